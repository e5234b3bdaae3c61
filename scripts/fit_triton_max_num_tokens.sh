#!/usr/bin/env bash
# Fit the token budget per iteration (max_num_tokens) of the TensorRT-LLM v0.14 engines behind the
# online Triton rows (issue 20; cost::fitted::TRITON_MAX_NUM_TOKENS), which the rows do not state.
# FIT split of tests/data/published/trtllm_inference_dev.csv only (split fixed in trtllm_split.md
# before any fit); online rows only (the offline rows never read this constant). Every other
# constant at its shipped value. Objective: the mean of the two online fit MAPEs (mean TTFT, mean
# ITL) over the grid; also printed: the INF rows at 467/16, where the budget binds (all 500
# requests queued at once, 16-token outputs: nearly every decode gap is an iteration that also
# carries prompts), predicted / published ms and error.
# Usage: scripts/fit_triton_max_num_tokens.sh [path/to/gpuplan]  (debug build: about 5 s a point)
set -euo pipefail
BIN=${1:-target/debug/gpuplan}
CSV=tests/data/published/trtllm_inference_dev.csv
echo "# $(date -u +%F) $(git rev-parse --short HEAD) $BIN"
for tb in 8192 12288 16384 20480 24576 32768; do
  GPUPLAN_FIT_CONSTANTS="triton_max_num_tokens=$tb" "$BIN" validate --serving "$CSV" --split fit --stack trtllm --scenario-kind online --json 2>/dev/null |
    python3 -c '
import json, sys
tb = sys.argv[1]
v = json.load(sys.stdin)
m = {s["metric"]: s["all"]["mape_pct"] for s in v["summary"] if s["split"] == "fit" and s["all"]}
inf = sorted((r["model"], r["system"], r["metric"], r["predicted"], r["measured"], r["error"]) for r in v["rows"]
             if r["load"].startswith("offline") and r["output_len"] == 16)
print("max_num_tokens=%-6s mean %.2f  TTFT %.2f  ITL %.2f  (fit MAPE %%)" % (tb, (m["mean_ttft"] + m["mean_itl"]) / 2, m["mean_ttft"], m["mean_itl"]))
for mo, sy, me, p, x, e in inf:
    print("    INF 467/16 %-14s %-9s %-9s %8.0f / %5.0f ms  %+5.1f%%" % (mo, sy, me, p, x, 100 * e))
' "$tb"
done
