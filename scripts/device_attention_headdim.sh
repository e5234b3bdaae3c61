#!/usr/bin/env bash
# Device call for issue 19 head-dim attention (branch wt-headdim): nvidia-h100-x1.
set -u
OUT=${1:?OUT}
S=.devbin/headdim
{ date -u +%FT%TZ; nvidia-smi --query-gpu=uuid,name,driver_version,power.limit,clocks.sm,clocks.max.sm,pstate,temperature.gpu --format=csv; } >"$OUT/gpu.txt" 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,nounits -lms 100 >"$OUT/smi.csv" 2>&1 &
SMI=$!
python3 "$S/bench_attention_headdim.py" "$OUT/smi.csv" "${BUDGET_S:-330}" >"$OUT/attention_headdim.csv" 2>"$OUT/attention_headdim.err"
kill $SMI
{ date -u +%FT%TZ; nvidia-smi --query-gpu=clocks.sm,pstate,temperature.gpu --format=csv; } >>"$OUT/gpu.txt" 2>&1
gzip -f "$OUT/smi.csv"
cat "$OUT/attention_headdim.err"; cat "$OUT/attention_headdim.csv"
