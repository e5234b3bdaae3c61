#!/usr/bin/env bash
# Issue 19, post-fit 13 (branch wt-postfit13): HF transformers runs taken the way the project's
# held-out HF runs are, with no in-process host probe (`hf_train.py --host-probe`) and no idle
# reading (`--idle-power`), so that `gpuplan validate` predicts them with the calibration profile's
# host and idle, as it does the held-out runs. Rows 196-224 of scripts/device_hf.sh, all `test`
# (rows >= 62), nothing fitted on them: hf-eager training (1K-8K, micro-batch 1-4), full recompute
# at 16K and 32K, hf-compile (one predicted not to fit the H100), torchao float8 tensorwise (H100)
# and rowwise (H200) under compile, prefill at 16K-64K, decode by a manual loop and by generate()
# at batch 1/8/32 and KV 512/4K/32K, two MoE configs. One device call per GPU kind:
#   S=.devbin/postfit13 BUDGET_S=470 bash .devbin/postfit13/device_postfit13.sh h100 $OUT   (nvidia-h100-x1: rows 196-210)
#   S=.devbin/postfit13 BUDGET_S=495 bash .devbin/postfit13/device_postfit13.sh h200 $OUT   (nvidia-h200: rows 211-225 but 213, 217, 221, 222)
# The scripts (hf_train.py, host_probe.py, device_hf.sh) and the gpuplan binary are carried in S;
# the torchao wheel in .whl (device_hf.sh installs it).
set -u
S=${S:-.devbin/postfit13}
PART=${1:?h100|h200}
OUT=${2:?OUTDIR}
case $PART in
  h100) ROWS=196-210 ;;
  # The H100 call (rows 196-210, 2026-11-24 23:55 UTC) ran out of its budget before row 209 (float8
  # tensorwise): the H200 call takes float8 tensorwise as row 225, and leaves rows 213, 217, 221 and
  # 222 (24 s each) out so that float8, compile and, if time is left, rowwise float8 fit.
  h200) ROWS=211,212,214,215,216,218,219,220,225,223,224 ;;
  *) echo "PART must be h100 or h200, not $PART"; exit 2 ;;
esac
D=$OUT/postfit13-$PART
mkdir -p "$D"
T0=$(date +%s)
{ date -u +%FT%TZ; nvidia-smi --query-gpu=uuid,name,power.draw,clocks.sm,pstate,temperature.gpu --format=csv; } >"$D/nvidia-smi-before.txt" 2>&1
PH=rows=$ROWS; [[ $ROWS == *,* ]] && PH=ids=$ROWS
W=$S G=${G:-$S/gpuplan} BUDGET_S=${BUDGET_S:-470} bash "$S/device_hf.sh" "$PH" "$D" >"$D/driver.txt" 2>&1
echo "rows done at t=$(( $(date +%s) - T0 ))s" >>"$D/driver.txt"
{ date -u +%FT%TZ; nvidia-smi --query-gpu=uuid,name,power.draw,clocks.sm,pstate,temperature.gpu --format=csv; } >"$D/nvidia-smi-after.txt" 2>&1
rmdir "$D/micro" 2>/dev/null
cat "$D/driver.txt"
