#!/usr/bin/env bash
# Issue 19 (branch wt-torch4): hf-139 (a third period's repeat of hf-116's shape, with its host
# probe), then scenarios/workloads/hf_host_regime_probe.py in three processes (a decode step and
# the host probes side by side, row by row). Runs on the device machine from the repository root;
# S = the folder holding the carried scripts, OUTDIR = $1.
#   S=.devbin/wt-torch4 bash .devbin/wt-torch4/device_host_regime.sh $OUT
set -u
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
S=${S:-scenarios/workloads}
OUTDIR=$1
C=scenarios/workloads/hf_configs
W=$S G=.devbin/gpuplan BUDGET_S=60 bash "$S/device_hf.sh" ids=139 "$OUTDIR/m" 2>&1 | grep -E "^===|measure exit|skip"
{ date -u +%FT%TZ; lscpu | grep -E "Model name|^CPU\(s\)|MHz"; uptime; } >"$OUTDIR/env.txt" 2>&1
CSV=$OUTDIR/host-regime.csv
for spec in "llama-3.2-1b 1 512 110" "tinyllama-1.1b 1 4096 110" "qwen3-1.7b 4 2048 90"; do
  set -- $spec
  echo "=== $1 b$2 kv$3 $(date -u +%T)"
  timeout $(( $4 + 60 )) python3 "$S/hf_host_regime_probe.py" --config $C/$1.json --batch $2 --kv-len $3 --seconds $4 --csv "$CSV" 2>&1 | tail -6
done
echo "=== done $(date -u +%T)"
