#!/usr/bin/env bash
# Issue 19, branch wt-float8: the MAPE lines of every set the float8 pass reports (calibration/runs/hf/FIT.md,
# eighteenth pass), for two gpuplan binaries: BEFORE (a build of main before the pass) and AFTER (default
# target/debug/gpuplan). Run from the repository root:
#   BEFORE=/tmp/f8before/gpuplan bash scripts/float8_before_after.sh > calibration/runs/hf/float8-before-after.txt
set -u
BEFORE=${BEFORE:?a gpuplan binary built from main before the pass}
AFTER=${AFTER:-target/debug/gpuplan}
for B in "$BEFORE" "$AFTER"; do
  echo "### $B"
  for split in test fit; do
    for prof in "" "--profile-host --profile-idle"; do
      echo -n "hf.jsonl $split ${prof:+(profile host+idle)}: "; $B validate --runs calibration/runs/hf/hf.jsonl --split $split $prof 2>/dev/null | grep "^MAPE"
    done
  done
  for f in calibration/runs/hf/postfit*.jsonl calibration/runs/hf/trainer*.jsonl; do
    for prof in "" "--profile-host --profile-idle"; do
      echo -n "$(basename "$f") ${prof:+(profile host+idle)}: "; $B validate --runs "$f" $prof 2>/dev/null | grep "^MAPE" | tr '\n' ' '; echo
    done
  done
  echo -n "megatron published: "; $B validate --published tests/data/published/megatron_bridge_training_dev.csv 2>/dev/null | grep -E "ALL" | tr -s ' ' | tr '\n' ';'; echo
  echo "torchtitan published:"; $B validate --published tests/data/published/torchtitan_training_dev.csv 2>/dev/null | grep -E "split:|: ALL|float8"
done
