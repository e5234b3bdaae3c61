#!/usr/bin/env bash
# Llama 3.1 405B on 16,384 H100 (scenarios/llama-3.1-405b-16384xh100.toml, the Llama 3 paper's
# TP8 CP1 PP16 DP128 at seq 8,192): gpuplan's predicted MFU, memory and step breakdown over what
# the paper does not publish in Table 4 (ZeRO level, recompute, interleaving depth vp), and with
# the fitted OVERLAP_COST set to 0 (GPUPLAN_FIT_CONSTANTS) to show what it charges. Predictions
# only, nothing fitted; the paper reports 41% BF16 MFU at this layout (Table 4).
# Usage: scripts/llama3_405b_layouts.sh [BIN]
set -eu
bin=$(realpath "${1:-target/debug/gpuplan}")
cd "$(dirname "$0")/.."
s=scenarios/llama-3.1-405b-16384xh100.toml
echo "| zero | recompute | vp | overlap_cost | step (s) | MFU | peak GiB | fits | compute | pp_bubble | dp_comm | tp_comm |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
row() {
  GPUPLAN_FIT_CONSTANTS="$4" "$bin" predict --scenario "$s" --zero "$1" --recompute "$2" --vp "$3" --json 2>/dev/null | python3 -c "
import json, sys
v = json.load(sys.stdin); b = v['breakdown']
print('| $1 | $2 | $3 | ${4:-fitted (1.0)} | %.2f | %.1f%% | %.1f | %s | %.2f | %.2f | %.2f | %.2f |' % (v['step_time_s'], 100 * v['mfu'],
      v['memory']['peak_bytes_per_gpu'] / 2**30, v['memory']['fits'], b.get('compute_s', 0), b.get('pp_bubble_s', 0), b.get('dp_comm_s', 0), b.get('tp_comm_s', 0)))"
}
for z in 1 2; do
  for rc in full selective none; do
    for vp in 1 2 4 8; do row "$z" "$rc" "$vp" ""; done
  done
done
row 2 none 1 "overlap_cost=0"
row 2 none 8 "overlap_cost=0"
