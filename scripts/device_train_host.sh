#!/usr/bin/env bash
# Issue 19 (branch wt-torch5): host side of eager HF training steps. Run on the device from the
# repository root: bash .devbin/torch5/run.sh $OUT
set -u
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
OUTDIR=$1
{ date -u +%FT%TZ; lscpu | grep -E "Model name|^CPU\(s\)|MHz"; uptime; nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv; python3 -c "import torch,transformers;print(torch.__version__,transformers.__version__)"; } >"$OUTDIR/env.txt" 2>&1
timeout 330 python3 .devbin/torch5/hf_train_host_probe.py --out "$OUTDIR/train-host.jsonl" --budget-s 300 >"$OUTDIR/stdout.txt" 2>"$OUTDIR/stderr.txt"
echo "exit $?"
tail -c 3000 "$OUTDIR/stderr.txt"
grep -c . "$OUTDIR/train-host.jsonl"
