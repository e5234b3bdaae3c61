#!/usr/bin/env bash
# Issue 18 (branch wt-moecal), second device call (nvidia-h200): `gpuplan calibrate --moe` end to
# end with the carried binary (its shipped probe: full, then --quick, timed) into copies of the
# H200 profiles, and new HF MoE runs on the H200 (scripts/device_hf.sh rows 102-105, all `test`).
#   G=.devbin/wt-moecal/gpuplan scripts/device_moe_h200.sh OUTDIR
set -u
OUT=$1
G=${G:-.devbin/wt-moecal/gpuplan}
mkdir -p "$OUT/profiles/full" "$OUT/profiles/quick"
for d in full quick; do cp -r calibration/profiles/h200-sxm-2x "$OUT/profiles/$d/h200"; rm -f "$OUT/profiles/$d/h200/moe."*; done
echo "=== calibrate --moe (full) at $(date -u +%T)"
t0=$(date +%s); "$G" calibrate --moe --name h200 --out-dir "$OUT/profiles/full" >"$OUT/calibrate-moe-full.log" 2>&1; echo "exit $? in $(( $(date +%s) - t0 )) s"
echo "=== calibrate --moe --quick at $(date -u +%T)"
t0=$(date +%s); "$G" calibrate --moe --quick --name h200 --out-dir "$OUT/profiles/quick" >"$OUT/calibrate-moe-quick.log" 2>&1; echo "exit $? in $(( $(date +%s) - t0 )) s"
tail -2 "$OUT/calibrate-moe-full.log" "$OUT/calibrate-moe-quick.log"
for d in full quick; do mv "$OUT/profiles/$d/h200/moe.toml" "$OUT/moe-$d.toml"; mv "$OUT/profiles/$d/h200/moe.csv" "$OUT/moe-$d.csv"; done
rm -rf "$OUT/profiles"
echo "=== runs at $(date -u +%T)"
G=$G BUDGET_S=${RUNS_BUDGET_S:-170} bash scripts/device_hf.sh rows=102-105 "$OUT"
date -u +%FT%TZ
