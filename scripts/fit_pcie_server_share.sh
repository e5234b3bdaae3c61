#!/usr/bin/env bash
# Sweep cost::fitted::PCIE_SERVER_BUSBW_SHARE (the share of a GPU's PCIe bus bandwidth that a
# collective or a pipeline send reaches between the GPUs of a PCIe server) on the offline rows of
# the two PCIe systems of the TensorRT-LLM dev set (tests/data/published/trtllm_inference_dev.csv,
# split fixed in trtllm_split.md before any fit): L40S (TP 1, 4, 8; FP8) and RTX PRO 6000 (TP 1,
# PP 2, 4, 8; NVFP4). The value is chosen on the fit rows of the L40S at TP > 1 (the rows whose
# time is mostly all-reduce); the pipelined RTX PRO 6000 rows and the test split are reported
# only. TP 1 rows do not move (no collective). Prints, per value, offline MAPE (bias, n) per
# system and group size for the fit and the test split.
# Usage: scripts/fit_pcie_server_share.sh [path/to/gpuplan] [values...]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release/gpuplan}
shift || true
# shellcheck disable=SC2086 # the default values are a word list
exec scripts/serving_sweep.sh "$BIN" pcie_server_busbw_share pcie "l40s-pcie-8x rtx-pro-6000-bse-pcie-8x" ${*:-1.0 0.9 0.8 0.7 0.6 0.5}
