#!/usr/bin/env bash
# Issue 19, branch wt-compilemem: what hf-compile training keeps (calibration/runs/hf/FIT.md, twenty-first
# pass), for two gpuplan binaries: BEFORE (a build of main 5d3bfb6, before the pass) and AFTER (default
# target/debug/gpuplan). Prints every hf-compile run's peak memory and step time (predicted, measured,
# error %) in every HF set, then the MAPE lines of every set, the torchtitan and the Megatron suites.
# Run from the repository root:
#   BEFORE=/tmp/cm-gpuplan-before bash scripts/compilemem_before_after.sh > calibration/runs/hf/compilemem-before-after.txt
set -u
BEFORE=${BEFORE:?a gpuplan binary built from main before the pass}
AFTER=${AFTER:-target/debug/gpuplan}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
echo "## every hf-compile run: run_id, set, metric, predicted before, predicted after, measured, error before %, error after %"
for f in calibration/runs/hf/hf.jsonl calibration/runs/hf/postfit*.jsonl calibration/runs/hf/trainer*.jsonl; do
  "$BEFORE" validate --runs "$f" --csv "$TMP/b.csv" --force >/dev/null 2>&1
  "$AFTER" validate --runs "$f" --csv "$TMP/a.csv" --force >/dev/null 2>&1
  paste -d, "$TMP/b.csv" "$TMP/a.csv" | awk -F, -v set="$(basename "$f")" '$4 ~ /hf-compile/ && ($5 == "peak_memory" || $5 == "step_time") {
    printf "%s %-18s %-5s %-12s %8.3f %8.3f %8.3f %+7.2f %+7.2f  %s\n", $1, set, $2, $5, $7, $16, $8, $9, $18, $4 }'
done
for B in "$BEFORE" "$AFTER"; do
  echo "### $B"
  for split in test fit; do
    echo -n "hf.jsonl $split: "; "$B" validate --runs calibration/runs/hf/hf.jsonl --split $split 2>/dev/null | grep "^MAPE"
  done
  for f in calibration/runs/hf/postfit*.jsonl calibration/runs/hf/trainer*.jsonl; do
    echo -n "$(basename "$f"): "; "$B" validate --runs "$f" 2>/dev/null | grep "^MAPE" | tr '\n' ' '; echo
  done
  echo -n "megatron published: "; "$B" validate --published tests/data/published/megatron_bridge_training_dev.csv 2>/dev/null | grep -E "ALL" | tr -s ' ' | tr '\n' ';'; echo
  echo "torchtitan published:"; "$B" validate --published tests/data/published/torchtitan_training_dev.csv 2>/dev/null | grep -E "split:|: ALL|torch.compile"
done
