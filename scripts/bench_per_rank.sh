#!/usr/bin/env bash
# Speed and memory of `gpuplan simulate --per-rank` at 16,384 and 131,072 GPUs (issue 24, item 2:
# one step at 16,384 GPUs <= 10 s, at 131,072 <= 60 s, within 16 GiB, with stragglers so the
# symmetry is really broken), also with leaf-uplink faults (switch ports shared between ranks).
# Each case runs the release binary once under /usr/bin/time -v: wall time and peak RSS, and the
# engine's own summary lines (ranks, classes, events, step times).
# The run includes the fault-free reference step that --per-rank always simulates as well.
# Usage: cargo build --release --locked && scripts/bench_per_rank.sh [BIN] > benches/RESULTS-per-rank.md
set -eu
bin=$(realpath "${1:-target/release/gpuplan}")
cd "$(dirname "$0")/.."
s16=scenarios/llama-3.1-405b-16384xb200.toml
s131=benches/scenarios/llama-3.1-405b-131072xgb200.toml
echo "# simulate --per-rank: speed and memory at 16,384 and 131,072 GPUs"
echo
echo "Recorded by \`scripts/bench_per_rank.sh\` on $(date -u +%Y-%m-%d) at git $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates src || echo ' (with uncommitted changes)'),"
echo "release build, on $(nproc) cores of $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//') ($(free -g | awk '/Mem:/{print $2}') GiB; shared with other jobs, so wall times are upper bounds)."
echo
echo "Load average before the runs: $(cut -d' ' -f1-3 /proc/loadavg) (on $(nproc) cores)."
echo
echo "| GPUs | case | flags | wall (s) | CPU user+sys (s) | peak RSS (MiB) | engine summary | step time (ms) |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
run() {
  local gpus=$1 name=$2 scen=$3; shift 3
  local out err
  out=$(mktemp); err=$(mktemp)
  /usr/bin/time -v "$bin" simulate --scenario "$scen" --per-rank "$@" > "$out" 2> "$err" || { echo "| $gpus | $name | \`$*\` | failed: $(grep -v '^\s' "$err" | head -3 | tr '\n' ' ') | | | | |"; return; }
  local wall cpu rss summary steps
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/{n=split($2,a,":"); s=0; for(i=1;i<=n;i++) s=s*60+a[i]; print s}' "$err")
  cpu=$(awk -F': ' '/User time|System time/{s+=$2} END{printf "%.2f", s}' "$err")
  rss=$(awk -F': ' '/Maximum resident set size/{printf "%.0f", $2/1024}' "$err")
  summary=$(grep 'per-rank engine:' "$out" | sed 's/^ *per-rank engine: //')
  steps=$(grep 'step time (ms):' "$out" | sed 's/^ *step time (ms): //')
  echo "| $gpus | $name | \`$*\` | $wall | $cpu | $rss | $summary | $steps |"
  rm -f "$out" "$err"
}
faults="--slow-gpu 1000=0.9 --degrade-link rank:5000:nic=0.5 --degrade-link rail:3=0.8 --fail-nic 9000"
run 16384 "no fault" $s16
run 16384 "4 stragglers" $s16 --stragglers 4=0.8 --seed 1
run 16384 "16 stragglers + faults" $s16 --stragglers 16=0.8 --seed 1 $faults
run 16384 "4 stragglers, 8 steps" $s16 --stragglers 4=0.8 --seed 1 --steps 8
run 131072 "no fault" $s131
run 131072 "4 stragglers" $s131 --stragglers 4=0.8 --seed 1
run 131072 "16 stragglers + faults" $s131 --stragglers 16=0.8 --seed 1 $faults
# Shared leaf uplinks: half the spine links of one leaf and every spine link at 0.9, on top of the
# faults above; the 131,072-GPU case takes a what-if leaf of 32 trays (gb200-nvl72.toml gives none).
uplinks="--degrade-link su:1:rail:2:uplink=0.5 --degrade-link spine=0.9"
run 16384 "16 stragglers + faults + uplinks" $s16 --stragglers 16=0.8 --seed 1 $faults $uplinks
run 131072 "16 stragglers + faults + uplinks" $s131 --stragglers 16=0.8 --seed 1 $faults $uplinks --nodes-per-leaf 32
echo
echo "Targets (issue 24): one step at 16,384 GPUs <= 10 s; at 131,072 GPUs <= 60 s; peak RSS <= 16 GiB (16,384 MiB)."
