#!/usr/bin/env bash
# wt-power7 device call (nvidia-h200): scripts/power7_parts_probe.py, parts of a host-bound HF step in isolation.
set -u
OUT=$1
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv; nproc; python3 -c 'import torch;print(torch.__version__, torch.backends.cudnn.version())'; } >"$OUT/env.txt" 2>&1
timeout 240 python3 .devbin/power7/power7_parts_probe.py "$OUT" >"$OUT/probe.log" 2>&1
echo "exit $?"; cat "$OUT/probe.log" | cut -c1-400
