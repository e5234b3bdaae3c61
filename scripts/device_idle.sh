#!/usr/bin/env bash
# Issue 19, fifteenth pass (branch wt-idle, one nvidia-h100-x1 call): post-fit 12, rows 190-195 of
# scripts/device_hf.sh (host-bound hf-eager decode on the H100, all `test`, shapes like post-fit 8's
# but none the same), each with its host probe, speedometer and, new here, its card's own idle
# power (hf_train.py --host-probe prints `config idle_w=`, NVML's energy counter over ~2 s with the
# context open before the model is built). Nothing is fitted on them.
# Runs on the device machine from the repository root, the scripts carried in S (hf_train.py,
# host_probe.py, device_hf.sh) and the gpuplan binary in G:
#   S=.devbin/idle G=.devbin/idle/gpuplan bash .devbin/idle/device_idle.sh OUTDIR
set -u
S=${S:-.devbin/idle}
OUT=${1:?OUTDIR}
mkdir -p "$OUT/postfit12"
T0=$(date +%s)
nvidia-smi --query-gpu=uuid,name,power.draw,clocks.sm,pstate --format=csv >"$OUT/postfit12/nvidia-smi-before.txt" 2>&1
W=$S G=${G:-.devbin/gpuplan} BUDGET_S=${BUDGET_S:-250} bash "$S/device_hf.sh" rows=190-195 "$OUT/postfit12" >"$OUT/postfit12/driver.txt" 2>&1
echo "rows done at t=$(( $(date +%s) - T0 ))s" >>"$OUT/postfit12/driver.txt"
nvidia-smi --query-gpu=uuid,name,power.draw,clocks.sm,pstate --format=csv >"$OUT/postfit12/nvidia-smi-after.txt" 2>&1
cat "$OUT/postfit12/driver.txt"
