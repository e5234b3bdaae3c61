#!/usr/bin/env bash
# wt-trainhost device call (nvidia-h200), 2026-11-24: hf-180..189 (post-fit 11, postfit-11.jsonl),
# Run on the device from the repository root with .devbin/trainhost/ carried: gpuplan (a stripped debug
# build of this branch), device_hf.sh (scripts/), hf_train.py and host_probe.py (scenarios/workloads/).
# host-bound hf-eager training on the H200 with hf_train.py --host-probe (the run's own host probe
# before and after the timed steps, the speedometer after every timed step); nothing is fitted on them.
set -u
OUT=$1
date -u +%FT%TZ
G=.devbin/trainhost/gpuplan W=.devbin/trainhost BUDGET_S=${BUDGET_S:-350} bash .devbin/trainhost/device_hf.sh rows=180-189 "$OUT/pf11" 2>&1 | tail -30
rm -rf "$OUT/pf11/micro"; ls -R "$OUT"
