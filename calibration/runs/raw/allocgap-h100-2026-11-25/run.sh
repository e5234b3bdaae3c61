#!/usr/bin/env bash
# allocgap (issue 19): caching-allocator traces of the first HF training steps on the lent H100.
#   bash .devbin/allocgap/run.sh "$OUT"
set -u
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
S=.devbin/allocgap
C=scenarios/workloads/hf_configs
OUT=${1:?OUT}
W=/tmp/allocgap
mkdir -p $W
T0=$(date +%s)
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv
  python3 -c "import torch, transformers, accelerate, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__, 'accelerate', accelerate.__version__)" 2>&1
  env | grep -i -E "PYTORCH|CUDA_" | sort
} >$W/env.txt 2>&1
cat $W/env.txt
# name budget_s args...
one() {
  local name=$1 lim=$2; shift 2
  local left=$(( 500 - ($(date +%s) - T0) ))
  if [ $left -lt 30 ]; then echo "skip $name (time)"; return; fi
  [ $lim -gt $left ] && lim=$left
  echo "== $name (limit ${lim}s) $*"
  timeout $lim python3 $S/trace_step.py $W/$name "$@" >$W/$name.log 2>&1
  echo "rc=$? $name $(( $(date +%s) - T0 ))s"; grep -E "allocgap|summary|oom|Error" $W/$name.log | tail -8
}
one l3b-eager-mb1x2048 60 -- --config $C/llama-3.2-3b.json --mode train --steps 3 --micro-batch 1 --seq 2048
one l3b-eager-mb2x2048 60 -- --config $C/llama-3.2-3b.json --mode train --steps 3 --micro-batch 2 --seq 2048
one tiny-eager-mb4x2048 60 -- --config $C/tinyllama-1.1b.json --mode train --steps 3 --micro-batch 4 --seq 2048
one l3b-compile-mb1x2048 150 -- --config $C/llama-3.2-3b.json --mode train --steps 3 --micro-batch 1 --seq 2048 --compile
one trainer-l1b-compile-mb1x2048 130 --trainer -- --config $C/llama-3.2-1b.json --micro-batch 1 --grad-accum 1 --seq 2048 --steps 3 --logging-steps 1 --compile
one tiny-compile-mb4x4096 120 -- --config $C/tinyllama-1.1b.json --mode train --steps 3 --micro-batch 4 --seq 4096 --compile
one l1b-eager-mb1x1024 40 -- --config $C/llama-3.2-1b.json --mode train --steps 3 --micro-batch 1 --seq 1024
one l1b-eager-mb1x2048 40 -- --config $C/llama-3.2-1b.json --mode train --steps 3 --micro-batch 1 --seq 2048
ls -la $W
tar -C $W -czf $OUT/allocgap.tgz .
ls -la $OUT
