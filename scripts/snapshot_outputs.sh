#!/usr/bin/env bash
# Writes predict --json, simulate --trace, plan --csv and serve --json of every shipped scenario
# into DIR, so that a refactor can be checked byte for byte: run it before and after, then
# `diff -r BEFORE AFTER`. Usage: scripts/snapshot_outputs.sh PATH/TO/gpuplan DIR
set -u
bin=$(realpath "$1"); mkdir -p "$2"; out=$(realpath "$2")
cd "$(dirname "$0")/.."
for s in scenarios/*.toml; do
  n=$(basename "$s" .toml)
  [ "$n" = seed-claims ] && continue
  "$bin" predict --scenario "$s" --json > "$out/$n.predict.json" 2>"$out/$n.predict.err"; echo "rc=$?" >> "$out/$n.predict.err"
  # The trace is written from inside DIR, so the "wrote ..." line names no absolute path.
  (root=$PWD; cd "$out" && "$bin" simulate --scenario "$root/$s" --trace "$n.trace.json" > "$n.simulate.txt" 2>"$n.simulate.err"; echo "rc=$?" >> "$n.simulate.err")
  "$bin" plan --scenario "$s" --no-progress --csv > "$out/$n.plan.csv" 2>"$out/$n.plan.err"; echo "rc=$?" >> "$out/$n.plan.err"
done
for s in scenarios/serving/*.toml; do
  n=$(basename "$s" .toml)
  "$bin" serve --scenario "$s" --json > "$out/$n.serve.json" 2>"$out/$n.serve.err"; echo "rc=$?" >> "$out/$n.serve.err"
done
