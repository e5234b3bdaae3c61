#!/bin/bash
# Measured serving runs for issue 8, on one H200: the project's continuous-batching server loop
# (scenarios/workloads/serve_llama.py) under Poisson load at several QPS, each recorded with
# `gpuplan measure --mode serve` (NVML power, the run's request statistics) and its per-request CSV.
# Run from the repo root on the device machine with the release binary at .devcarry/calib/gpuplan.
set -o pipefail
export PYTHONUNBUFFERED=1
G=./.devcarry/calib/gpuplan; W=scenarios/workloads/serve_llama.py
R=/tmp/serve; mkdir -p $R
step() { echo "=== $(date -u +%FT%TZ) $*"; }
pack() { (cd /tmp && tar czf $OUT/serve.tgz serve); }
step nvidia-smi; nvidia-smi --query-gpu=index,name,uuid,clocks.sm,power.draw,power.limit,temperature.gpu,driver_version --format=csv
step smoke
timeout 90 python3 $W --model-file models/ref-llama-1b.toml --qps 4 --duration-s 3 --seed 1 --requests-csv $R/smoke.csv > $R/smoke.log 2>&1 || { tail -30 $R/smoke.log; pack; exit 1; }
tail -2 $R/smoke.log | cut -c1-400
run() {  # model qps duration
  local m=$1 q=$2 d=$3 id=h200-serve-${1#ref-llama-}-q$2
  step "$id"
  $G measure --model $m --system hgx-h200 --gpus 1 --mode serve --batch 64 --stack torch-eager --precision bf16 \
    --warmup 0 --run-id $id --out $R/h200-serve.jsonl --log $R/$id.log --timeout-s 150 -- \
    python3 $W --model-file models/$m.toml --qps $q --duration-s $d --input-len lognormal:512:0.8 \
      --output-len lognormal:128:0.8 --seed $q --max-batch 64 --token-budget 2048 --max-len 4096 \
      --requests-csv $R/$id.csv > /dev/null
  grep -o '"throughput": {[^}]*}' $R/$id.log | tail -1
  pack
}
timeout 60 python3 $W --model-file models/ref-llama-1b.toml --qps 1 --duration-s 1 --profile 20 --warmup-iters 2 2>&1 | grep "profile:"
for q in 2 8 16 24; do run ref-llama-1b $q 30; done
for q in 4 10; do run ref-llama-8b $q 30; done
step done
