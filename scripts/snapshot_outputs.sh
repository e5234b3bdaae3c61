#!/usr/bin/env bash
# Writes predict --json, simulate --trace, plan --csv and serve --json of every shipped scenario
# into DIR, so that a refactor can be checked byte for byte: run it before and after, then
# `diff -r BEFORE AFTER`. Usage: scripts/snapshot_outputs.sh PATH/TO/gpuplan DIR
set -u
bin=$1; out=$2
mkdir -p "$out"
cd "$(dirname "$0")/.."
for s in scenarios/*.toml; do
  n=$(basename "$s" .toml)
  [ "$n" = seed-claims ] && continue
  "$bin" predict --scenario "$s" --json > "$out/$n.predict.json" 2>"$out/$n.predict.err"; echo "rc=$?" >> "$out/$n.predict.err"
  "$bin" simulate --scenario "$s" --trace "$out/$n.trace.json" > "$out/$n.simulate.txt" 2>"$out/$n.simulate.err"; echo "rc=$?" >> "$out/$n.simulate.err"
  "$bin" plan --scenario "$s" --no-progress --csv > "$out/$n.plan.csv" 2>"$out/$n.plan.err"; echo "rc=$?" >> "$out/$n.plan.err"
done
for s in scenarios/serving/*.toml; do
  n=$(basename "$s" .toml)
  "$bin" serve --scenario "$s" --json > "$out/$n.serve.json" 2>"$out/$n.serve.err"; echo "rc=$?" >> "$out/$n.serve.err"
done
