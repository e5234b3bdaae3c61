#!/usr/bin/env bash
# wt-power6 device call 1 (nvidia-h100-x1): the small-kernel power probe, then hf-170..172 (hf-072
# and hf-143, -146's shapes on the H100, 30-40 steps: a longer energy window than the 7 steps of those runs).
set -u
OUT=$1
D=.devbin/power6
mkdir -p "$OUT/probe" "$OUT/pf"
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv; nproc; } >"$OUT/probe/env.txt" 2>&1
timeout 170 python3 $D/power_small_kernels_probe.py "$OUT/probe" >"$OUT/probe/probe.log" 2>&1
echo "probe exit $?"; tail -3 "$OUT/probe/probe.log"
G=.devbin/gpuplan BUDGET_S=150 bash $D/device_hf.sh rows=170-172 "$OUT/pf" 2>&1 | tail -12
rm -rf "$OUT/pf/micro"; ls -R "$OUT"
