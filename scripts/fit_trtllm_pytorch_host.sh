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
BIN=${1:-target/release/gpuplan}
shift || true
VALUES=${*:-0 10 20 30 40 60}
CSV=tests/data/published/trtllm_inference_dev.csv
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for v in $VALUES; do
  for sys in rtx-pro-6000-bse-pcie-8x dgx-b200 gb200-nvl72 dgx-h100 hgx-h200; do
    GPUPLAN_FIT_CONSTANTS="trtllm_pytorch_seq_us=$v" "$BIN" validate --serving "$CSV" --stack trtllm --split all \
      --scenario-kind offline --only-system "$sys" --json > "$OUT/$v.$sys.json" 2>/dev/null
  done
  python3 - "$OUT" "$v" <<'PY'
import json, glob, sys, collections
out, v = sys.argv[1], sys.argv[2]
rows = []
for f in glob.glob(f"{out}/{v}.*.json"):
    rows += json.load(open(f))["rows"]
print(f"trtllm_pytorch_seq_us={v}")
for split in ["fit", "test"]:
    g = collections.defaultdict(list)
    for r in rows:
        if r["split"] != split:
            continue
        backend = "v1.0" if "v1.0" in r["scenario"] else "v0.17"
        key = f"{r['system']} {backend}" + (" pp>1" if r["pp"] > 1 else "")
        g[key].append(r["error"]); g["ALL"].append(r["error"])
    cells = [f"{k} {100 * sum(map(abs, e)) / len(e):.1f}% ({100 * sum(e) / len(e):+.0f}%, n={len(e)})" for k, e in sorted(g.items())]
    print(f"  {split}: " + "; ".join(cells))
PY
done
