#!/usr/bin/env bash
# Issue 19: what the Hugging Face Trainer adds to a training step (one nvidia-h200 call). Each row runs
# scenarios/workloads/hf_trainer.py (transformers.Trainer with the library's defaults: bf16 autocast,
# max_grad_norm 1.0, its default optimizer, data loader and logging) and, paired, the same shape through
# scenarios/workloads/hf_train.py (the project's own loop: no clipping, fused AdamW), both recorded by
# `gpuplan measure` (the Trainer's log read as `hf-trainer`: its tqdm bar, as a user's job would be).
# Run ids hft-NNN (a namespace of their own); every run is split `test`: nothing is fitted on them.
#   S=.devbin/trainer G=.devbin/trainer/gpuplan bash .devbin/trainer/device_trainer.sh OUTDIR
set -u
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
S=${S:-.devbin/trainer}
G=${G:-$S/gpuplan}
C=scenarios/workloads/hf_configs
OUT=${1:?OUTDIR}
mkdir -p "$OUT/logs"
REC=$OUT/trainer.jsonl
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-470}
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$GPU_NAME" in *H100*) SYS=dgx-h100 ;; *H200*) SYS=hgx-h200 ;; *) echo "unknown GPU $GPU_NAME"; exit 2 ;; esac
{
  date -u +%FT%TZ; echo "gpu=$GPU_NAME system=$SYS"
  nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm --format=csv
  python3 -c "import torch, transformers, accelerate, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__, 'accelerate', accelerate.__version__)" 2>&1
  nproc; $G --version 2>&1 | head -1
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

# id loop config mb seq steps warmup est_s [max_grad_norm]
# hft-000 / hft-010: the smoke config (host-bound: the step is the loop's host time), Trainer vs loop
# Rows 000-010 ran on the lent H200 (2026-11-25 00:16 UTC); rows 011-019 on the lent H100 with the
# Trainer's post-backward sections timed (hf_trainer.py's `trainer_cb ... clip_ms= optimizer_ms= ...`);
# rows 020-026 on the lent H200 after the Trainer's model (step::HF_TRAINER_HOST_US) was final: post-fit.
ROWS=${ROWS:-000-010}
read -r -d '' TABLE <<'T'
000 trainer smoke-llama     1 128  60 10 30
010 loop    smoke-llama     1 128  60 10 25
001 trainer tinyllama-1.1b  1 2048 30 5 40
002 loop    tinyllama-1.1b  1 2048 30 5 30
003 trainer tinyllama-1.1b  4 2048 30 5 50
004 loop    tinyllama-1.1b  4 2048 30 5 40
005 trainer tinyllama-1.1b  1 2048 30 5 40 0
006 trainer llama-3.2-3b    1 2048 30 5 50
007 loop    llama-3.2-3b    1 2048 30 5 40
008 trainer qwen3-1.7b      2 2048 30 5 50
009 loop    qwen3-1.7b      2 2048 30 5 40
011 trainer smoke-llama     1 128  60 10 30
012 trainer tinyllama-1.1b  4 2048 30 5 45
013 loop    tinyllama-1.1b  4 2048 30 5 35
014 trainer tinyllama-1.1b  1 2048 30 5 40
015 loop    tinyllama-1.1b  1 2048 30 5 30
016 trainer llama-3.2-3b    1 2048 30 5 50
017 loop    llama-3.2-3b    1 2048 30 5 40
018 trainer qwen3-1.7b      1 4096 30 5 50
019 loop    qwen3-1.7b      1 4096 30 5 40
020 trainer llama-3.2-1b    2 4096 30 5 45
021 trainer tinyllama-1.1b  2 4096 30 5 45
022 trainer qwen3-1.7b      1 2048 30 5 40
023 trainer llama-3.2-3b    2 2048 30 5 55
024 trainer llama-3.2-1b    4 2048 30 5 45
025 loop    llama-3.2-1b    4 2048 30 5 35
026 trainer tinyllama-1.1b  1 4096 30 5 40
T

while read -r id loop cfg mb seq steps warm est mgn; do
  [[ -z ${id:-} ]] && continue
  (( 10#$id < 10#${ROWS%-*} || 10#$id > 10#${ROWS#*-} )) && continue
  now=$(( $(date +%s) - T0 ))
  if (( now + est > BUDGET_S )); then echo "skip hft-$id: ${est}s does not fit (${now}s used)"; continue; fi
  to=$(( est * 3 )); (( to > BUDGET_S + 40 - now )) && to=$(( BUDGET_S + 40 - now ))
  sa=(--model "$C/$cfg.json" --system "$SYS" --gpus 1 --tp 1 --pp 1 --dp 1 --zero 0 --mode train
      --micro-batch "$mb" --grad-accum 1 --global-batch "$mb" --seq "$seq" --recompute none --stack torch-eager --precision bf16)
  if [[ $loop == trainer ]]; then
    wa=(python3 "$S/hf_trainer.py" --config "$C/$cfg.json" --micro-batch "$mb" --seq "$seq" --steps "$steps")
    [[ -n ${mgn:-} ]] && wa+=(--max-grad-norm "$mgn")
    note="HF transformers from_config (SDPA) trained by transformers.Trainer (bf16=True, library defaults${mgn:+, max_grad_norm $mgn}); scenarios/workloads/hf_trainer.py"
  else
    wa=(python3 "$S/hf_train.py" --config "$C/$cfg.json" --mode train --micro-batch "$mb" --seq "$seq" --steps "$steps" --recompute none)
    note="HF transformers from_config (SDPA), the project's loop (fp32 master params + bf16 autocast, fused AdamW, no clipping); scenarios/workloads/hf_train.py"
  fi
  echo "=== hft-$id $loop $cfg mb=$mb seq=$seq ${mgn:+max_grad_norm=$mgn} (t=${now}s)"
  "$G" measure "${sa[@]}" --warmup "$warm" --timeout-s "$to" --run-id "hft-$id" --split test --note "$note" \
    --log "$OUT/logs/hft-$id.log" --out "$REC" -- "${wa[@]}" >/dev/null 2>&1
  echo "    exit $?: $(grep -E "train_runtime|summary|Error|error" "$OUT/logs/hft-$id.log" | tail -2 | cut -c1-300)"
done <<<"$TABLE"
echo "done at t=$(( $(date +%s) - T0 ))s"
