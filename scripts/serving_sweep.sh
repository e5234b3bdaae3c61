#!/usr/bin/env bash
# Shared by the one-constant sweeps of the TensorRT-LLM dev set (scripts/fit_pcie_server_share.sh,
# scripts/fit_trtllm_pytorch_host.sh): for each value of one `GPUPLAN_FIT_CONSTANTS` key, scores
# the offline rows of the given systems (both splits, `validate --serving --stack trtllm`) and
# prints offline MAPE (bias, n) per group for the fit and the test split.
# Usage: scripts/serving_sweep.sh BIN KEY GROUPING "SYSTEMS" VALUES...
#   GROUPING: `pcie` (system, TP and PP, plus the L40S TP > 1 rows that choose the PCIe share) or
#   `backend` (system and TensorRT-LLM backend, v1.0 PyTorch or v0.17, PP > 1 apart).
set -euo pipefail
BIN=$1 KEY=$2 GROUPING=$3 SYSTEMS=$4
shift 4
CSV=tests/data/published/trtllm_inference_dev.csv
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for v in "$@"; do
  for sys in $SYSTEMS; do
    GPUPLAN_FIT_CONSTANTS="$KEY=$v" "$BIN" validate --serving "$CSV" --stack trtllm --split all \
      --scenario-kind offline --only-system "$sys" --json > "$OUT/$v.$sys.json" 2>/dev/null
  done
  python3 - "$OUT" "$v" "$KEY" "$GROUPING" <<'PY'
import json, glob, sys, collections
out, v, key, grouping = sys.argv[1:5]
rows = []
for f in glob.glob(f"{out}/{v}.*.json"):
    rows += json.load(open(f))["rows"]
print(f"{key}={v}")
for split in ["fit", "test"]:
    g = collections.defaultdict(list)
    for r in rows:
        if r["split"] != split:
            continue
        if grouping == "pcie":
            g[f"{r['system']} tp{r['tp']} pp{r['pp']}"].append(r["error"])
            if r["system"].startswith("l40s") and r["tp"] > 1:
                g["L40S TP>1 (chooses)"].append(r["error"])
        else:
            backend = "v1.0" if "v1.0" in r["scenario"] else "v0.17"
            g[f"{r['system']} {backend}" + (" pp>1" if r["pp"] > 1 else "")].append(r["error"])
        g["ALL"].append(r["error"])
    cells = [f"{k} {100 * sum(map(abs, e)) / len(e):.1f}% ({100 * sum(e) / len(e):+.0f}%, n={len(e)})" for k, e in sorted(g.items())]
    print(f"  {split}: " + "; ".join(cells))
PY
done
