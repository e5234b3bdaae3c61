#!/usr/bin/env bash
# Kernel-level profile of the torch.compile / torchao float8 / MoE-prefill paths of the HF run set
# (issue 19), on the device machine (one H100 or H200), from the repository root:
#
#   scripts/device_torch_profile.sh OUTDIR
#
# 1. scenarios/workloads/fp8_microbench.py: torch._scaled_mm (tensorwise, rowwise) vs bf16 mm on
#    the Llama-1B/3B linear shapes, and Inductor's fp8 casts (OUTDIR/fp8-micro-<gpu>.csv);
# 2. scenarios/workloads/hf_train.py --kernel-profile on a few rows of the run set's shapes (eager,
#    compile, float8 tensorwise and rowwise under compile, MoE prefill): every GPU kernel's device
#    time per step and the wall/kernel/busy line (OUTDIR/kprof/<name>.csv, OUTDIR/profile.txt).
# Needs .whl/torchao-*.whl (carried). S (default .) is the folder holding the two workload scripts
# (scenarios/workloads in this checkout, or a carried copy).
set -u
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
OUT=$1
S=${S:-scenarios/workloads}
C=scenarios/workloads/hf_configs
BUDGET_S=${BUDGET_S:-450}
T0=$(date +%s)
mkdir -p "$OUT/kprof" "$OUT/logs"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$GPU" in *H100*) G=h100 ;; *H200*) G=h200 ;; *) G=gpu ;; esac
{
  date -u +%FT%TZ; echo "gpu=$GPU"
  nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm --format=csv
  python3 -c "import torch, transformers, torchao, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__, 'torchao', torchao.__version__)"
} 2>&1 | tee "$OUT/profile.txt"

left() { echo $(( BUDGET_S - ($(date +%s) - T0) )); }
prof() { # name est_s args...
  local name=$1 est=$2; shift 2
  if (( $(left) < est )); then echo "skip $name (est ${est}s, $(left)s left)" | tee -a "$OUT/profile.txt"; return; fi
  local to=$(( est * 2 )); (( to > $(left) + 20 )) && to=$(( $(left) + 20 ))
  echo "=== $name: $* (t=$(( $(date +%s) - T0 ))s)" | tee -a "$OUT/profile.txt"
  timeout "$to" python3 "$S/hf_train.py" "$@" --kernel-profile "$OUT/kprof/$name-$G.csv" >"$OUT/logs/$name.log" 2>&1
  echo "    exit $?" | tee -a "$OUT/profile.txt"
  grep -E '^(summary|kprofile|gpuplan-workload)' "$OUT/logs/$name.log" | tee -a "$OUT/profile.txt"
  grep -E '^step=' "$OUT/logs/$name.log" | tail -2 >>"$OUT/profile.txt"
  tail -3 "$OUT/logs/$name.log" | grep -iE 'error|Traceback' >>"$OUT/profile.txt"
}

echo "=== fp8 microbench (t=$(( $(date +%s) - T0 ))s)" | tee -a "$OUT/profile.txt"
timeout 150 python3 "$S/fp8_microbench.py" --out "$OUT/fp8-micro-$G.csv" >"$OUT/logs/fp8-micro.log" 2>&1
echo "    exit $?: $(tail -2 "$OUT/logs/fp8-micro.log" | tr '\n' ' ')" | tee -a "$OUT/profile.txt"

T="--config $C/llama-3.2-1b.json --mode train --micro-batch 2 --seq 4096 --steps 6"
prof eager-1b 30 $T
prof compile-1b 90 $T --compile
prof fp8tw-1b 100 $T --fp8 --fp8-recipe tensorwise
prof moe-prefill-qwen3 30 --config $C/qwen3-moe-s.json --mode prefill --batch 8 --seq 4096 --steps 6
prof fp8rw-1b 100 $T --fp8 --fp8-recipe rowwise
prof compile-qwen3-1.7b 90 --config $C/qwen3-1.7b.json --mode train --micro-batch 1 --seq 4096 --steps 6 --compile
echo "=== done t=$(( $(date +%s) - T0 ))s" | tee -a "$OUT/profile.txt"
tar -C "$OUT" -czf "$OUT/logs.tgz" logs && rm -rf "$OUT/logs"
tar -C "$OUT" -czf "$OUT/kprof.tgz" kprof && rm -rf "$OUT/kprof"
