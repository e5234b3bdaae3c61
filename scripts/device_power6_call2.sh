#!/usr/bin/env bash
# wt-power6 device call 2 (nvidia-h200): hf-173..179 (recorded as post-fit 10, postfit-10.jsonl), host-bound hf-eager training on the
# H200 measured after the power rule (host-bound hf steps: launch floors idle, L2-resident traffic,
# dense GEMMs' FLOP share) was fixed; nothing is fitted on them.
set -u
OUT=$1
G=.devbin/gpuplan BUDGET_S=300 bash .devbin/power6/device_hf.sh rows=173-179 "$OUT/pf9" 2>&1 | tail -20
rm -rf "$OUT/pf9/micro"; ls -R "$OUT"
