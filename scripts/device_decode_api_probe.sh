#!/usr/bin/env bash
# Issue 19 (branch wt-torch3): the decode API probe (scenarios/workloads/hf_decode_api_probe.py) in
# three processes, then hf-114/115 (hf-020's and hf-027's shapes measured again by `gpuplan measure`).
# Runs on the device machine from the repository root; S = the folder holding the carried scripts
# (this one's copies), OUTDIR = $1.
#   S=.devbin/wt-torch3 bash .devbin/wt-torch3/device_decode_api_probe.sh $OUT
set -u
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
S=${S:-scenarios/workloads}
OUTDIR=$1
C=scenarios/workloads/hf_configs
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm --format=csv
  lscpu | grep -E "Model name|^CPU\(s\)|MHz"
  uptime; head -1 /proc/stat
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version(), 'transformers', transformers.__version__)"
} >"$OUTDIR/env.txt" 2>&1
CSV=$OUTDIR/decode-api-probe.csv
for run in 1 2; do
  echo "=== probe process $run $(date -u +%T)"
  timeout 150 python3 "$S/hf_decode_api_probe.py" --config $C/llama-3.2-1b.json --case 1:512 --case 4:2048 --blocks 8 --block 15 --csv "$CSV" 2>&1 | tail -3
done
echo "=== probe process 3 (3B) $(date -u +%T)"
timeout 150 python3 "$S/hf_decode_api_probe.py" --config $C/llama-3.2-3b.json --case 1:1024 --blocks 8 --block 15 --csv "$CSV" 2>&1 | tail -3
echo "=== measure $(date -u +%T)"
G=.devbin/gpuplan BUDGET_S=120 bash "$S/device_hf.sh" ids=114,115 "$OUTDIR/m" 2>&1 | grep -E "^===|measure exit|skip"
mv "$OUTDIR/m/hf.jsonl" "$OUTDIR/hf.jsonl"; mv "$OUTDIR/m/logs.tgz" "$OUTDIR/logs.tgz"; cat "$OUTDIR/m/env.txt" >>"$OUTDIR/env.txt"; rm -rf "$OUTDIR/m"
echo "=== done $(date -u +%T)"
