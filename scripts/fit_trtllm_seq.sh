#!/usr/bin/env bash
# Refit the per-sequence term of cost::fitted::TRTLLM_HOST_US (TensorRT-LLM's C++ batch manager,
# serial host time per sequence and iteration, microseconds) on the FIT split of the TensorRT-LLM
# dev rows (tests/data/published/trtllm_inference_dev.csv, split fixed in trtllm_split.md), the
# other host terms and TRITON_FRONTEND_US held at their shipped values (2,000 us per iteration, 0
# per layer, front end 4,000 us). Objective as scripts/fit_trtllm_host.sh: the mean of the three
# metrics' fit-split MAPEs (offline output tokens/s, online mean TTFT, online mean ITL); the test
# split is not read. Run after the engines' all-reduces lost sequence parallelism and the NVLS
# latency was fitted (branch wt-trtoff4, issue 20).
# One term for offline and online: Triton's streaming term is held at 0 here (it ships at 4 us since
# branch wt-trthop, where the engine's term was refitted on the offline rows: fit_trtllm_engine_seq.sh).
# Usage: scripts/fit_trtllm_seq.sh [path/to/gpuplan] [SEQ values...]  (debug build: ~20 s a point)
set -euo pipefail
BIN=${1:-target/debug/gpuplan}
shift || true
GRID=${*:-0 1 2 3 4 5 6 8 10}
CSV=tests/data/published/trtllm_inference_dev.csv
for seq in $GRID; do
  GPUPLAN_FIT_CONSTANTS="trtllm_host_us=2000,$seq,0;triton_stream_seq_us=0;triton_frontend_us=4000" "$BIN" validate --serving "$CSV" --split fit --stack trtllm --json 2>/dev/null |
    python3 -c 'import json,sys; v=json.load(sys.stdin); m={s["metric"]:s["all"]["mape_pct"] for s in v["summary"] if s["split"]=="fit" and s["all"]}; print("seq %5s us: mean %.2f  offline %.2f  ttft %.2f  itl %.2f" % (sys.argv[1], sum(m.values())/len(m), m["offline_output_tps"], m["mean_ttft"], m["mean_itl"]))' "$seq"
done
