#!/usr/bin/env bash
# Issue 19, new HF families (branch wt-hffamilies, 2026-11-25): Gemma 2 (gemma-2-2b), Gemma 3
# (gemma-3-1b), Phi-3 (phi-3-mini-4k) and OLMo-2 (olmo-2-1b) built by transformers from their
# published config.json shapes (scenarios/workloads/hf_configs/), taken the way the project's
# held-out HF runs are (as scripts/device_postfit13.sh): no in-process host probe, no idle reading.
# Rows 250-265 of scripts/device_hf.sh: hf-eager training at micro-batch 1-2 x 2048, one hf-compile
# training run (OLMo-2), prefill of 8K tokens, decode by a manual loop at batch 1 and 4. The
# split (rows 250-269: `fit` when id % 3 == 1, else `test`) was fixed before the call
# (calibration/runs/raw/hffamilies-2026-11-25/README.md). One device call (nvidia-h100-x1):
#   S=.devbin/hffamilies C=.devbin/hffamilies/hf_configs BUDGET_S=430 bash .devbin/hffamilies/device_hffamilies.sh $OUT
# The scripts (hf_train.py, device_hf.sh), the configs and the gpuplan binary are carried in S.
set -u
S=${S:-.devbin/hffamilies}
OUT=${1:?OUTDIR}
D=$OUT/hffamilies-h100
mkdir -p "$D"
T0=$(date +%s)
{ date -u +%FT%TZ; nvidia-smi --query-gpu=uuid,name,power.draw,clocks.sm,pstate,temperature.gpu --format=csv; } >"$D/nvidia-smi-before.txt" 2>&1
W=$S G=${G:-$S/gpuplan} C=${C:-$S/hf_configs} BUDGET_S=${BUDGET_S:-430} bash "$S/device_hf.sh" ids=250,251,252,253,254,255,256,257,258,259,260,261,262,263,264,265 "$D" >"$D/driver.txt" 2>&1
echo "rows done at t=$(( $(date +%s) - T0 ))s" >>"$D/driver.txt"
# Which SDPA kernel runs a masked (sliding-window) layer: Gemma-3-1B at 2048 tokens (window 512, so
# five of six layers get an explicit mask), two steps under torch.profiler (not a run record).
if (( $(date +%s) - T0 < ${KPROF_BEFORE_S:-470} )); then
  timeout 60 python3 "$S/hf_train.py" --config "${C:-$S/hf_configs}/gemma-3-1b.json" --mode train --micro-batch 1 --seq 2048 --steps 4 \
    --kernel-profile "$D/kprofile-gemma-3-1b-train.csv" >"$D/kprofile-gemma-3-1b-train.log" 2>&1
  echo "kernel profile exit $? at t=$(( $(date +%s) - T0 ))s" >>"$D/driver.txt"
fi
{ date -u +%FT%TZ; nvidia-smi --query-gpu=uuid,name,power.draw,clocks.sm,pstate,temperature.gpu --format=csv; } >"$D/nvidia-smi-after.txt" 2>&1
rmdir "$D/micro" 2>/dev/null
cat "$D/driver.txt"
