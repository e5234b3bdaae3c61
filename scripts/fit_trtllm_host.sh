#!/usr/bin/env bash
# Refit cost::fitted::TRTLLM_HOST_US (TensorRT-LLM host time: serial per iteration, serial per
# sequence, per layer beside the GPU; microseconds) and TRITON_FRONTEND_US (Triton's front-end time
# per request, in the online rows' TTFT) on the FIT split of the TensorRT-LLM dev rows
# (tests/data/published/trtllm_inference_dev.csv, split fixed in trtllm_split.md before any fit).
# Objective: the mean of the three metrics' fit-split MAPEs (offline output tokens/s, online mean
# TTFT, online mean ITL), by coordinate search over the grids below (layer, then iteration, then
# sequence, front end, then layer and iteration again), each value scored with `gpuplan validate --serving --split fit --stack trtllm`.
# Usage: scripts/fit_trtllm_host.sh [path/to/gpuplan]  (a release build: about 10 s a point)
set -euo pipefail
BIN=${1:-target/release/gpuplan}
CSV=tests/data/published/trtllm_inference_dev.csv
score() {
  GPUPLAN_FIT_CONSTANTS="trtllm_host_us=$1,$2,$3;triton_stream_seq_us=0;triton_frontend_us=$4" "$BIN" validate --serving "$CSV" --split fit --stack trtllm --json 2>/dev/null |
    python3 -c 'import json,sys; v=json.load(sys.stdin); m={s["metric"]:s["all"]["mape_pct"] for s in v["summary"] if s["split"]=="fit" and s["all"]}; print("%.2f %.2f %.2f %.2f" % (sum(m.values())/len(m), m["offline_output_tps"], m["mean_ttft"], m["mean_itl"]))'
}
it=0; seq=0; layer=0; fe=0
best() { # $1 = name, rest = values; sets the named variable to the best value
  local name=$1; shift; local bestv= bests=1e9
  for v in "$@"; do
    a=$it b=$seq c=$layer e=$fe
    case $name in it) a=$v;; seq) b=$v;; layer) c=$v;; fe) e=$v;; esac
    out=$(score "$a" "$b" "$c" "$e"); echo "trtllm_host_us=$a,$b,$c triton_frontend_us=$e  mean/offline/ttft/itl MAPE % = $out"
    s=${out%% *}
    if python3 -c "import sys; sys.exit(0 if $s < $bests else 1)"; then bests=$s; bestv=$v; fi
  done
  printf -v "$name" '%s' "$bestv"; echo "-> $name = $bestv (mean fit MAPE $bests%)"
}
best layer 0 50 100 150 200 300 400
best it 0 500 1000 2000 3000 4000 6000
best seq 0 5 10 20 40
best fe 0 2000 4000 6000 8000 12000
best layer 0 50 100 150 200
best it 0 1000 2000 3000 4000
best fe 0 2000 4000 6000
best seq 5 10 20 30
best it 1000 1500 2000 2500
echo "fitted: trtllm_host_us=$it,$seq,$layer; triton_frontend_us=$fe"
