#!/usr/bin/env bash
# Step-time (and memory, power) MAPE and bias per MoE class of the HF run set with a given binary:
# MoE train (fp32 master weights; hf-040 left out) and MoE prefill, on the fit and test splits of
# calibration/runs/hf/hf.jsonl and on the post-fit MoE runs (calibration/runs/hf/postfit-moe.jsonl,
# all test). Usage: scripts/score_hf_moe.sh [PATH/TO/gpuplan]
set -eu
cd "$(dirname "$0")/.."
bin=${1:-target/debug/gpuplan}
for f in calibration/runs/hf/hf.jsonl calibration/runs/hf/postfit-moe.jsonl; do
  "$bin" validate --runs "$f" --json 2>/dev/null | python3 -c "
import json, sys
d = json.load(sys.stdin)
f = sys.argv[1]
moe = ('mixtral', 'moe', 'deepseek')
for cls in ('train', 'prefill'):
    for split in ('fit', 'test'):
        rows = [r for r in d['runs'] if r['split'] == split and r['status'] == 'ok' and r['run_id'] != 'hf-040'
                and any(m in r['scenario'] for m in moe) and r['scenario'].split()[2] == cls]
        if not rows: continue
        out = []
        for metric in ('step_time', 'peak_memory', 'power'):
            e = [m['error_pct'] for r in rows for m in r['metrics'] if m['metric'] == metric]
            out.append(f'{metric} {sum(abs(x) for x in e)/len(e):.1f}% (bias {sum(e)/len(e):+.1f}%)')
        errs = ' '.join(f\"{r['run_id']}:{[m['error_pct'] for m in r['metrics'] if m['metric']=='step_time'][0]:+.0f}\" for r in rows)
        print(f'{f.split(\"/\")[-1]:20} MoE {cls:7} {split:4} n={len(rows):2}  ' + ', '.join(out) + f'   [{errs}]')
" "$f"
done
