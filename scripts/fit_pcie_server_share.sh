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
BIN=${1:-target/release/gpuplan}
shift || true
VALUES=${*:-1.0 0.9 0.8 0.7 0.6 0.5}
CSV=tests/data/published/trtllm_inference_dev.csv
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for v in $VALUES; do
  for sys in l40s-pcie-8x rtx-pro-6000-bse-pcie-8x; do
    GPUPLAN_FIT_CONSTANTS="pcie_server_busbw_share=$v" "$BIN" validate --serving "$CSV" --stack trtllm --split all \
      --scenario-kind offline --only-system "$sys" --json > "$OUT/$v.$sys.json" 2>/dev/null
  done
  python3 - "$OUT" "$v" <<'PY'
import json, glob, sys, collections
out, v = sys.argv[1], sys.argv[2]
rows = []
for f in glob.glob(f"{out}/{v}.*.json"):
    rows += json.load(open(f))["rows"]
print(f"pcie_server_busbw_share={v}")
for split in ["fit", "test"]:
    g = collections.defaultdict(list)
    for r in rows:
        if r["split"] != split:
            continue
        key = f"{r['system']} tp{r['tp']} pp{r['pp']}"
        g[key].append(r["error"])
        if r["system"].startswith("l40s") and r["tp"] > 1:
            g["L40S TP>1 (chooses)"].append(r["error"])
        g["ALL"].append(r["error"])
    cells = [f"{k} {100 * sum(map(abs, e)) / len(e):.1f}% ({100 * sum(e) / len(e):+.0f}%, n={len(e)})" for k, e in sorted(g.items())]
    print(f"  {split}: " + "; ".join(cells))
PY
done
