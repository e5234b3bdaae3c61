#!/usr/bin/env bash
# Issue 19, ninth pass (branch wt-decode6): the post-fit 8 decode runs (rows 147-158 of
# scripts/device_hf.sh, all `test`, each with its host probe and the per-step host speedometer of
# hf_train.py --host-probe), then hf_decode_breakdown.py on the H100 at the test split's decode
# shapes (the step's first SDPA call, the other calls, the rest of the layers; auto vs flash).
# The second call (post-fit 9, rows 159-169 on the lent H200, after the speedometer's elasticity
# was fixed): ROWS=159-169 BREAKDOWN=0.
# Runs on the device machine from the repository root, the scripts carried in S (default
# .devbin/decode6: hf_train.py, host_probe.py, hf_decode_breakdown.py, device_hf.sh) and the
# gpuplan binary in G (default .devbin/gpuplan).
#   S=.devbin/decode6 bash .devbin/decode6/device_decode6.sh OUTDIR
set -u
S=${S:-.devbin/decode6}
OUT=${1:?OUTDIR}
mkdir -p "$OUT/postfit8"
T0=$(date +%s)
W=$S G=${G:-.devbin/gpuplan} BUDGET_S=${BUDGET_S:-320} bash "$S/device_hf.sh" rows=${ROWS:-147-158} "$OUT/postfit8" >"$OUT/postfit8/driver.txt" 2>&1
echo "rows done at t=$(( $(date +%s) - T0 ))s" >>"$OUT/postfit8/driver.txt"
C=scenarios/workloads/hf_configs
[[ ${BREAKDOWN:-1} == 0 ]] && exit 0
{
  date -u +%FT%TZ
  for spec in "llama-3.2-1b --case 1:512 --case 1:32768" "llama-3.2-3b --case 1:4096 --case 8:8192" "qwen3-1.7b --case 16:4096"; do
    set -- $spec
    cfg=$1; shift
    left=$(( ${BREAKDOWN_END_S:-400} - ($(date +%s) - T0) ))
    (( left < 20 )) && { echo "skip $cfg: ${left}s left"; continue; }
    echo "=== $cfg $* (t=$(( $(date +%s) - T0 ))s)"
    timeout "$left" python3 "$S/hf_decode_breakdown.py" --config "$C/$cfg.json" "$@" --steps 25 --warmup 5 2>&1 | grep -v Warning
  done
  date -u +%FT%TZ
} >"$OUT/breakdown-h100.txt" 2>&1
