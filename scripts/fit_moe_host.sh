#!/usr/bin/env bash
# Issue 18 (branch wt-moe3): fits the two host constants of Megatron-Core's eager MoE layer on the fit
# split of the published Megatron-Bridge dev set (tests/data/published/megatron_bridge_training_dev.csv),
# with the other two Megatron constants held at their shipped values (MEGATRON_OVERLAP_COST,
# MEGATRON_MEMORY_EFFICIENCY; scripts/fit_megatron_published.sh refits those jointly):
#   cost::fitted::MOE_DISPATCH_SYNC_US          the host stall per eager MoE layer and forward pass
#   cost::fitted::MEGATRON_EXPERT_GEMM_HOST_US  the host time per local expert of a grouped expert GEMM
# For each pair on a grid (sync SYNC_GRID, default 0-6,000 us by 500; per-expert host EXPERT_GRID,
# default 0-112 us by 14) it prints the fit split's tokens/s/GPU MAPE and bias (all scored rows, and
# the MoE rows), the test split's (reported, not used), and the predicted over measured throughput
# ratio of the Qwen3-30B-A3B B200 rows at micro-batch 4 and 1 (dev rows 72 and 88, measured 2.75),
# and the fit split's MAPE with each row's |error| capped at CAP (default 0.5), a robust check beside
# the plain fit MAPE (the criterion of scripts/fit_megatron_published.sh, which the shipped sync is
# fitted by): the fit split's two worst MoE rows (108: H100 25.11, whose options are not known; 89
# and 73: one H100 layout published at 5113 and 9058 tokens/s/GPU by two point releases,
# docs/published-analysis.md) weigh on plain MAPE more than any per-expert host time can fit.
# Usage: scripts/fit_moe_host.sh [PATH/TO/gpuplan] > OUT.txt
set -eu
cd "$(dirname "$0")/.."
bin=${1:-target/release/gpuplan}
csv=tests/data/published/megatron_bridge_training_dev.csv
echo "sync_us expert_us  fit_n fit_mape fit_bias fit_moe_mape fit_moe_bias  test_n test_mape test_bias test_moe_mape test_moe_bias  mbs4_over_mbs1  fit_mape_capped"
one() {
  GPUPLAN_FIT_CONSTANTS="moe_dispatch_sync_us=$1;megatron_expert_gemm_host_us=$2" "$bin" validate --published "$csv" --json 2>/dev/null | python3 -c "
import json, sys
CAP = float('${CAP:-0.5}')
d = json.load(sys.stdin)
out = ['$1', '$2']
m = lambda e: f'{100 * sum(abs(v) for v in e) / max(len(e), 1):.2f}'
b = lambda e: f'{100 * sum(e) / max(len(e), 1):+.2f}'
for split in ('fit', 'test'):
    rows = [r for r in d['rows'] if r['split'] == split]
    e = [r['error'] for r in rows]
    moe = [r['error'] for r in rows if r['moe']]
    out += [str(len(e)), m(e), b(e), m(moe), b(moe)]
p = {r['dev_row']: r['predicted'] for r in d['rows']}
out.append(f\"{p['72'] / p['88']:.2f}\")
fit = [r['error'] for r in d['rows'] if r['split'] == 'fit']
out.append(f'{100 * sum(min(abs(v), CAP) for v in fit) / len(fit):.2f}')
print('  '.join(out))
"
}
export -f one
export bin csv CAP=${CAP:-0.5}
for s in $(seq ${SYNC_GRID:-0 500 6000}); do
  for x in $(seq ${EXPERT_GRID:-0 14 112}); do echo "$s $x"; done
done | xargs -P "$(nproc)" -n 2 bash -c 'one "$@"' _ | sort -n -k1,1 -k2,2
