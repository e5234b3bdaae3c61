#!/usr/bin/env bash
# Issue 19, post-fit 15 (lead, 2026-11-25, session 15): HF transformers runs on new shapes, taken the
# way the project's held-out HF runs are taken (no in-process host probe, no idle reading), on the
# lent H200. Rows 270-282 of scripts/device_hf.sh, all `test` (rows >= 62), fixed before the call;
# nothing is fitted on them: eager training of the four dense shapes at new micro-batches and
# sequences (3B at 12K with full recompute), DeepSeek-V3-s and Qwen3-MoE training, prefill of
# Qwen3-1.7B at 32K, Llama-3.2-1B at 4 x 8K and Mixtral-s at 2 x 8K, decode through generate() and
# the manual loop at new batch/KV pairs, one compiled Qwen3 step. One device call:
#   S=.devbin/postfit15 BUDGET_S=500 bash .devbin/postfit15/device_postfit15.sh h200 $OUT   (nvidia-h200)
set -u
S=${S:-.devbin/postfit15}
PART=${1:?h200}
OUT=${2:?OUTDIR}
case $PART in
  h200) ROWS=270-282 ;;
  *) echo "PART must be h200, not $PART"; exit 2 ;;
esac
D=$OUT/postfit15-$PART
mkdir -p "$D"
T0=$(date +%s)
{ date -u +%FT%TZ; nvidia-smi --query-gpu=uuid,name,power.draw,clocks.sm,pstate,temperature.gpu --format=csv; } >"$D/nvidia-smi-before.txt" 2>&1
W=$S G=${G:-$S/gpuplan} BUDGET_S=${BUDGET_S:-500} bash "$S/device_hf.sh" "rows=$ROWS" "$D" >"$D/driver.txt" 2>&1
echo "rows done at t=$(( $(date +%s) - T0 ))s" >>"$D/driver.txt"
{ date -u +%FT%TZ; nvidia-smi --query-gpu=uuid,name,power.draw,clocks.sm,pstate,temperature.gpu --format=csv; } >"$D/nvidia-smi-after.txt" 2>&1
rmdir "$D/micro" 2>/dev/null
cat "$D/driver.txt"
