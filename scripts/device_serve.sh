#!/bin/bash
# Measured serving runs (issue 8) on one GPU: the project's continuous-batching server loop
# (scenarios/workloads/serve_llama.py) under Poisson load, each run recorded with
# `gpuplan measure --mode serve` (NVML power, the run's request statistics), its per-request CSV
# and its per-iteration log (step lines with the iteration's shape); before and after the runs, the
# host probe of each model (`--host-probe`: its batch-1 decode floor on this node, the figure
# `gpuplan serve --host-probe-ms` takes).
# Usage: [SERVE_FLAGS=...] scripts/device_serve.sh TAG SYSTEM MODEL:QPS:SECONDS...   e.g.
#   scripts/device_serve.sh h100 dgx-h100 1b:8:90 8b:4:90
#   SERVE_FLAGS=--cuda-graphs scripts/device_serve.sh h200g dgx-h200 1b:16:60 8b:8:60
# SERVE_FLAGS go to every server process (runs and probes); with --cuda-graphs the graphs are
# first checked against the eager forward (`--check-graphs`, each model; CHECK=0 skips it).
# Run from the repo root on the device machine with the release binary at .devcarry/calib/gpuplan;
# results go to $OUT/serve.tgz (re-packed after every run).
set -o pipefail
export PYTHONUNBUFFERED=1
TAG=$1 SYSTEM=$2; shift 2
F=${SERVE_FLAGS:-}
G=./.devcarry/calib/gpuplan; W=scenarios/workloads/serve_llama.py
R=/tmp/serve; mkdir -p $R
step() { echo "=== $(date -u +%FT%TZ) $*"; }
pack() { (cd /tmp && tar czf $OUT/serve.tgz serve); }
step nvidia-smi; nvidia-smi --query-gpu=index,name,uuid,clocks.sm,power.draw,power.limit,temperature.gpu,driver_version --format=csv | tee $R/nvidia-smi.txt
step smoke
timeout 90 python3 $W --model-file models/ref-llama-1b.toml --qps 4 --duration-s 3 --seed 1 $F --requests-csv $R/smoke.csv > $R/smoke.log 2>&1 || { tail -30 $R/smoke.log; pack; exit 1; }
tail -3 $R/smoke.log | cut -c1-400
if [[ " $F " == *" --cuda-graphs "* && ${CHECK:-1} != 0 ]]; then
  for m in $(for spec in "$@"; do echo ${spec%%:*}; done | sort -u); do
    step "check graphs $m"
    timeout 150 python3 $W --model-file models/ref-llama-$m.toml --check-graphs 12 $F > $R/check.log 2>&1 || tail -20 $R/check.log
    grep -E "^(cuda-graphs|check-graphs)" $R/check.log | tee -a $R/$TAG-check-graphs-$m.txt
  done
fi
probe() {  # when spec...
  local when=$1; shift
  for m in $(for spec in "$@"; do echo ${spec%%:*}; done | sort -u); do
    timeout 120 python3 $W --model-file models/ref-llama-$m.toml --host-probe 300 $F > $R/probe.log 2>&1 || tail -5 $R/probe.log
    grep host-probe-json $R/probe.log | sed "s/^/$when /" | tee -a $R/$TAG-host-probe-$m.txt
  done
}
step "host probe (before)"; probe before "$@"; pack
for spec in "$@"; do
  IFS=: read m q d <<< "$spec"
  id=$TAG-serve-$m-q$q
  step "$id ($d s)"
  $G measure --model ref-llama-$m --system $SYSTEM --gpus 1 --mode serve --batch 64 --stack torch-eager --precision bf16 \
    --warmup 0 --run-id $id --out $R/$TAG-serve.jsonl --log $R/$id.log --timeout-s $((d + 90)) -- \
    python3 $W --model-file models/ref-llama-$m.toml --qps $q --duration-s $d --input-len lognormal:512:0.8 \
      --output-len lognormal:128:0.8 --seed $q --max-batch 64 --token-budget 2048 --max-len 4096 $F \
      --requests-csv $R/$id.csv > /dev/null
  grep -o '"throughput": {[^}]*}' $R/$id.log | tail -1
  gzip -f $R/$id.log
  pack
done
step "host probe (after)"; probe after "$@"; pack
step done
