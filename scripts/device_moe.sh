#!/usr/bin/env bash
# Issue 18 (branch wt-moecal) device call: the MoE kernel probe (scenarios/workloads/moe_probe.py,
# what `gpuplan calibrate --moe` runs) and new HF MoE runs (scripts/device_hf.sh rows, all `test`).
# Runs on the device machine from the repository root (one GPU).
#
#   scripts/device_moe.sh OUTDIR [ROWS]     ROWS: a device_hf.sh phase (default rows=094-101)
#   PROBE_BUDGET_S (default 150): the probe's --budget-s; RUNS_BUDGET_S (default 260): device_hf.sh's BUDGET_S.
# Writes OUTDIR/moe-probe.csv (the probe's table), OUTDIR/moe-probe.log, OUTDIR/env.txt and
# device_hf.sh's files (OUTDIR/hf.jsonl, logs.tgz).
set -u
OUT=$1
ROWS=${2:-rows=094-101}
mkdir -p "$OUT"
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm --format=csv
  python3 -c "import torch, transformers, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"
} >"$OUT/probe-env.txt" 2>&1
cat "$OUT/probe-env.txt"
echo "=== moe probe (budget ${PROBE_BUDGET_S:-150}s) at $(date -u +%T)"
timeout $(( ${PROBE_BUDGET_S:-150} + 90 )) python3 scenarios/workloads/moe_probe.py --budget-s "${PROBE_BUDGET_S:-150}" --csv "$OUT/moe-probe.csv" >"$OUT/moe-probe.log" 2>&1
echo "probe exit $?: $(grep -c -v '^#' "$OUT/moe-probe.csv" 2>/dev/null) rows; notes:"; grep '^#' "$OUT/moe-probe.log" | head -20; tail -3 "$OUT/moe-probe.log"
echo "=== runs at $(date -u +%T)"
BUDGET_S=${RUNS_BUDGET_S:-260} bash scripts/device_hf.sh "$ROWS" "$OUT"
date -u +%FT%TZ
