#!/usr/bin/env bash
# Issue 19 (branch wt-mlaprefill): one nvidia-h100-x1 call. The MLA/MoE prefill probe
# (scripts/mla_prefill_probe.py: SDPA backends at MLA's head dims; allocator traces and per-module
# memory of hf-eager prefill forwards at the run set's shapes) and hf_train.py prefill runs with
# --kernel-profile at the same shapes (kernel time by name, for the MoE/MLA time gaps).
#   S=.devbin/mlaprefill bash .devbin/mlaprefill/device_mla_prefill.sh $OUT
set -u
S=${S:-.devbin/mlaprefill}
OUT=${1:?OUTDIR}
D=$OUT/mla-prefill
mkdir -p "$D"
export PYTHONUNBUFFERED=1
C=scenarios/workloads/hf_configs
{ date -u +%FT%TZ; nvidia-smi --query-gpu=uuid,name,driver_version,memory.total,power.limit,clocks.max.sm --format=csv;
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), 'transformers', transformers.__version__)"; } >"$D/env.txt" 2>&1
T0=$(date +%s)
timeout 200 python3 "$S/mla_prefill_probe.py" --out "$D" --sdpa \
  --trace $C/deepseek-v3-s.json:4:8192:ds-b4s8192 $C/deepseek-v3-s.json:8:4096:ds-b8s4096 \
          $C/deepseek-v3-s-e64k6.json:4:4096:ds64-b4s4096 $C/qwen3-moe-s.json:8:4096:qwen3moe-b8s4096 \
          $C/llama-3.2-1b.json:8:4096:llama1b-b8s4096 >"$D/probe.log" 2>&1
echo "probe exit $? at t=$(( $(date +%s) - T0 ))s" >>"$D/probe.log"
for spec in deepseek-v3-s:4:8192 deepseek-v3-s-e64k6:4:4096 mixtral-s-e16k4-w2816:8:4096 qwen3-moe-s-e96k6-w512:8:4096 mixtral-s-e16k4-w2816:4:4096; do
  IFS=: read -r cfg b s <<<"$spec"
  [ $(( $(date +%s) - T0 )) -gt 300 ] && { echo "skip $spec: time" >>"$D/probe.log"; continue; }
  timeout 60 python3 scenarios/workloads/hf_train.py --config $C/$cfg.json --mode prefill --steps 6 --batch $b --seq $s \
    --kernel-profile "$D/kp-$cfg-b$b-s$s.csv" >"$D/run-$cfg-b$b-s$s.log" 2>&1
  echo "run $spec exit $? at t=$(( $(date +%s) - T0 ))s" >>"$D/probe.log"
done
cd "$OUT" && tar czf mla-prefill.tgz mla-prefill && cp mla-prefill/probe.log . && rm -rf mla-prefill
cat probe.log | grep -v "^sdpa" | tail -30
