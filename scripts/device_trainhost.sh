#!/usr/bin/env bash
# wt-trainhost device call (nvidia-h200), 2026-11-24: hf-180..189 (post-fit 11, postfit-11.jsonl),
# host-bound hf-eager training on the H200 with hf_train.py --host-probe (the run's own host probe
# before and after the timed steps, the speedometer after every timed step); nothing is fitted on them.
# Ran on the device as .devbin/trainhost/call.sh from the repository root with .devbin/trainhost/
# carried: gpuplan (a stripped debug build of wt-power6 f3d1eea; `measure` unchanged since), this
# branch's scripts/device_hf.sh, scenarios/workloads/hf_train.py and host_probe.py.
set -u
OUT=$1
date -u +%FT%TZ
G=.devbin/trainhost/gpuplan W=.devbin/trainhost BUDGET_S=${BUDGET_S:-350} bash .devbin/trainhost/device_hf.sh rows=180-189 "$OUT/pf11" 2>&1 | tail -30
rm -rf "$OUT/pf11/micro"; ls -R "$OUT"
