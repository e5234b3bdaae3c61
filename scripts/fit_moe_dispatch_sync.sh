#!/usr/bin/env bash
# Reproduces the fit of cost::fitted::MOE_DISPATCH_SYNC_US (host time per eager Megatron MoE layer
# and forward pass that the GPU waits for: the dropless dispatcher's device-to-host sync and the host
# work after it): for each value on a 500 us grid, the tokens/s/GPU MAPE and bias of the published
# dev set's MoE rows, fit split (what is minimised) and test split (reported, not used). Rows the
# mapping runs under full-iteration CUDA graphs (options.cuda_graphs = full) do not pay it.
# Usage: scripts/fit_moe_dispatch_sync.sh [PATH/TO/gpuplan] > OUT.txt
# (a debug build gives the same numbers; the release build is only faster)
set -eu
cd "$(dirname "$0")/.."
bin=${1:-target/release/gpuplan}
csv=tests/data/published/megatron_bridge_training_dev.csv
echo "moe_dispatch_sync_us  fit_moe_n fit_moe_mape fit_moe_bias  test_moe_n test_moe_mape test_moe_bias"
for x in $(seq 0 500 12000); do
  GPUPLAN_FIT_CONSTANTS="moe_dispatch_sync_us=$x" "$bin" validate --published "$csv" --json 2>/dev/null | python3 -c "
import json, sys
d = json.load(sys.stdin)
out = ['$x']
for split in ('fit', 'test'):
    e = [r['error'] for r in d['rows'] if r['split'] == split and r['moe']]
    out += [str(len(e)), f'{100 * sum(abs(v) for v in e) / len(e):.2f}', f'{100 * sum(e) / len(e):+.2f}']
print('  '.join(out))
"
done
