#!/usr/bin/env bash
# Issue 20 (branch wt-trthop): refit the per-sequence host time of TensorRT-LLM's C++ batch manager
# (cost::fitted::TRTLLM_HOST_US[1], paid by every TensorRT-LLM run) on the OFFLINE rows of the FIT
# split of tests/data/published/trtllm_inference_dev.csv (split fixed in trtllm_split.md before any
# fit), holding the online rows' per-sequence total at its shipped 10 us: Triton's streaming term
# (cost::fitted::TRITON_STREAM_SEQ_US, paid by the online rows only) is set to 10 - X, so every online
# prediction stays as it was and only the offline trtllm-bench rows move. Per-iteration time
# (2,000 us) and the front end (4,000 us) held. The test split is not read.
# Usage: scripts/fit_trtllm_engine_seq.sh [path/to/gpuplan] [X values...]  (debug build: ~25 s a point)
set -euo pipefail
BIN=${1:-target/debug/gpuplan}
shift || true
GRID=${*:-0 1 2 3 4 5 6 7 8 9 10}
CSV=tests/data/published/trtllm_inference_dev.csv
TOTAL=10
echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD) $BIN; online per-sequence total held at $TOTAL us"
for x in $GRID; do
  str=$(python3 -c "print($TOTAL - $x)")
  GPUPLAN_FIT_CONSTANTS="trtllm_host_us=2000,$x,0;triton_stream_seq_us=$str;triton_frontend_us=4000" "$BIN" validate --serving "$CSV" --split fit --stack trtllm --json 2>/dev/null |
    python3 -c 'import json,sys; v=json.load(sys.stdin); m={s["metric"]:s["all"]["mape_pct"] for s in v["summary"] if s["split"]=="fit" and s["all"]}; print("engine_seq_us %4s stream_seq_us %4s: offline %.2f  ttft %.2f  itl %.2f  (mean %.2f)" % (sys.argv[1], sys.argv[2], m["offline_output_tps"], m["mean_ttft"], m["mean_itl"], sum(m.values())/len(m)))' "$x" "$str"
done
