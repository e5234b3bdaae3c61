#!/usr/bin/env bash
# What-ifs on the DGX-A100 offline rows of the TensorRT-LLM dev set (issue 20, branch wt-trta100):
# each run copies the catalog's systems into a temporary catalog, changes one value of
# calibration/systems/a100-sxm-80g.toml, scores the A100 rows (both splits, `validate --serving
# --stack trtllm --only-system dgx-a100 --scenario-kind offline`) and prints MAPE (bias) by model
# and TP. Nothing is fitted or chosen here: the rows say how far a mechanism of that size would
# move them, to rank the measurements that would settle them (docs/trtllm-residuals.md section 9).
# Usage: scripts/a100_what_ifs.sh [path/to/gpuplan]   (debug build: ~15 s a run)
set -euo pipefail
BIN=${1:-target/debug/gpuplan}
CSV=tests/data/published/trtllm_inference_dev.csv
GPU=a100-sxm-80g.toml
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
run() {
  local name=$1 expr=$2
  rm -rf "$TMP/cat" && mkdir -p "$TMP/cat/calibration/systems"
  cp calibration/systems/*.toml "$TMP/cat/calibration/systems/"
  sed -i "$expr" "$TMP/cat/calibration/systems/$GPU"
  "$BIN" validate --serving "$CSV" --stack trtllm --split all --only-system dgx-a100 --scenario-kind offline \
    --catalog "$TMP/cat" --json > "$TMP/out.json"
  python3 - "$TMP/out.json" "$name" <<'PY'
import json, sys, collections
rows = [r for r in json.load(open(sys.argv[1]))["rows"] if r["metric"] == "offline_output_tps"]
print(sys.argv[2])
for split in ["fit", "test"]:
    g = collections.defaultdict(list)
    for r in rows:
        if r["split"] == split:
            g[f"{r['model']} tp{r['tp']}"].append(r["error"])
            g["all"].append(r["error"])
    print(f"  {split}: " + "; ".join(f"{k} {100 * sum(map(abs, e)) / len(e):.1f}% ({100 * sum(e) / len(e):+.0f}%, n={len(e)})" for k, e in sorted(g.items())))
PY
}
run "as shipped" 's/^$//'
run "sustained GEMM clock 1350 MHz, gemm_max_fraction 0.857 (before this branch)" 's/^sustained_gemm_clock_mhz = { value = 1410/sustained_gemm_clock_mhz = { value = 1350/; s/^gemm_max_fraction = { value = 0.859/gemm_max_fraction = { value = 0.857/'
run "nvlink_busbw_fraction 0.40 (all-reduces at about half the modelled rate)" 's/^nvlink_busbw_fraction = { value = 0.769/nvlink_busbw_fraction = { value = 0.40/'
run "hbm_fraction 0.80 (every memory-bound kernel 13% slower)" 's/^hbm_fraction = { value = 0.905/hbm_fraction = { value = 0.80/'
