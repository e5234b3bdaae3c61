#!/usr/bin/env bash
# Sweep cost::fitted::TRTLLM_PYTORCH_SEQ_US (TensorRT-LLM PyTorch backend: host time per sequence
# of a CUDA-graph iteration, serial with the GPU, microseconds) on the offline rows of the
# TensorRT-LLM dev set (tests/data/published/trtllm_inference_dev.csv, split fixed in
# trtllm_split.md before any fit). The term applies to the v1.0 PyTorch-backend rows only (those
# that replay CUDA graphs: B200, GB200, RTX PRO 6000 NVFP4 and H100, H200 FP8); the v0.17 rows of
# H100 and H200 are scored too and do not move. Prints, per value, offline MAPE (bias) per system
# and backend for the fit split (what chooses the value) and the test split (reported only).
# Usage: scripts/fit_trtllm_pytorch_host.sh [path/to/gpuplan] [values...]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release/gpuplan}
shift || true
# shellcheck disable=SC2086 # the default values are a word list
exec scripts/serving_sweep.sh "$BIN" trtllm_pytorch_seq_us backend "rtx-pro-6000-bse-pcie-8x dgx-b200 gb200-nvl72 dgx-h100 hgx-h200" ${*:-0 10 20 30 40 60}
