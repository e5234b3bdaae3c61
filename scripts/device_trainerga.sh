#!/usr/bin/env bash
# Issue 19: the Hugging Face Trainer with gradient accumulation and torch_compile, and `gpuplan
# measure`'s reading of a Trainer log whose tqdm bar is redrawn less often than steps happen (one
# nvidia-h100-x1 call). Each row runs scenarios/workloads/hf_trainer.py (transformers.Trainer at the
# library's defaults: bf16 autocast, adamw_torch_fused, max_grad_norm 1.0, linear schedule) with
# `gradient_accumulation_steps` GA, recorded by `gpuplan measure --format hf-trainer` as a user's
# job would be; eager rows also print the host gap of every micro-batch (`trainer_mb`), which fits
# the per-micro-batch host constant on the `fit` rows only. Loop rows run scenarios/workloads/hf_train.py
# (the project's loop, no per-micro-batch sync) at the same shape. Run ids hft-027..060; the split
# of every id is fixed in calibration/runs/hf/FIT.md ("Gradient accumulation ... split") before the call.
#   S=.devbin/trainerga G=.devbin/trainerga/gpuplan [ROWS="027 030"] bash .devbin/trainerga/device_trainerga.sh OUTDIR
# Call 1 (2026-11-25 01:44 UTC) ran every row to 036; call 2 (after measure's line times were fixed
# to a line's first byte, crates/gpuplan-gpu/src/measure/job.rs) ROWS="027 030 041 037 038 040 039":
# the smoke rows re-measured (same ids, same split), the rest new. Call 3 (nvidia-h200, after the
# model was final: post-fit) ROWS="042 043 044 045 046 047".
set -u
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
S=${S:-.devbin/trainerga}
G=${G:-$S/gpuplan}
C=scenarios/workloads/hf_configs
OUT=${1:?OUTDIR}
mkdir -p "$OUT/logs"
REC=$OUT/trainer-ga.jsonl
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-500}
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$GPU_NAME" in *H100*) SYS=dgx-h100 ;; *H200*) SYS=hgx-h200 ;; *) echo "unknown GPU $GPU_NAME"; exit 2 ;; esac
{
  date -u +%FT%TZ; echo "gpu=$GPU_NAME system=$SYS"
  nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm --format=csv
  python3 -c "import torch, transformers, accelerate, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__, 'accelerate', accelerate.__version__)" 2>&1
  nproc; $G --version 2>&1 | head -1
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

# The short-step capture first: the smoke model's Trainer log with each line's arrival time, split
# as measure splits it (scripts/stamp_lines.py), for the hf-trainer parser's unit test.
python3 "$S/stamp_lines.py" "$OUT/logs/smoke-stamped.tsv" -- python3 "$S/hf_trainer.py" --config "$C/smoke-llama.json" \
  --micro-batch 1 --seq 128 --steps 60 --logging-steps 10 >/dev/null 2>&1
echo "stamped: exit $? $(wc -l <"$OUT/logs/smoke-stamped.tsv") lines (t=$(( $(date +%s) - T0 ))s)"

# id split loop config mb seq ga steps warmup est_s [compile]
read -r -d '' TABLE <<'T'
027 fit  trainer smoke-llama     1 128  4 40 10 30
030 test trainer smoke-llama     1 128  1 60 10 25
028 fit  trainer tinyllama-1.1b  1 1024 4 20 5  40
031 test trainer tinyllama-1.1b  1 2048 2 20 5  40
033 test trainer qwen3-1.7b      1 2048 4 12 3  50
029 fit  trainer llama-3.2-1b    1 1024 4 20 5  40
032 test trainer llama-3.2-1b    2 4096 2 12 3  45
035 test trainer llama-3.2-1b    1 2048 1 30 8  90 compile
034 test trainer tinyllama-1.1b  4 1024 4 12 3  45
036 fit  loop    tinyllama-1.1b  1 1024 4 20 5  35
037 test trainer qwen3-1.7b      2 1024 2 20 5  45
041 test trainer smoke-llama     2 256  2 40 10 25
038 test trainer qwen3-1.7b      1 1024 4 12 3  45
040 test trainer tinyllama-1.1b  2 2048 4 10 3  45
039 test trainer llama-3.2-1b    1 1024 2 20 5  90 compile
042 test trainer smoke-llama     1 128  4 40 10 25
043 test trainer tinyllama-1.1b  1 2048 2 20 5  40
044 test trainer llama-3.2-1b    2 2048 4 12 3  45
045 test trainer qwen3-1.7b      1 2048 2 16 4  45
046 test trainer llama-3.2-3b    1 2048 2 16 4  55
047 test trainer llama-3.2-1b    2 2048 2 20 5  90 compile
T

while read -r id split loop cfg mb seq ga steps warm est comp; do
  [[ -z ${id:-} ]] && continue
  [[ -n ${ROWS:-} && " $ROWS " != *" $id "* ]] && continue
  now=$(( $(date +%s) - T0 ))
  if (( now + est > BUDGET_S )); then echo "skip hft-$id: ${est}s does not fit (${now}s used)"; continue; fi
  to=$(( est * 3 )); (( to > BUDGET_S + 40 - now )) && to=$(( BUDGET_S + 40 - now ))
  stack=hf-eager; [[ ${comp:-} == compile ]] && stack=hf-compile
  sa=(--model "$C/$cfg.json" --system "$SYS" --gpus 1 --tp 1 --pp 1 --dp 1 --zero 0 --mode train
      --micro-batch "$mb" --grad-accum "$ga" --seq "$seq" --recompute none --stack "$stack" --precision bf16)
  if [[ $loop == trainer ]]; then
    wa=(python3 "$S/hf_trainer.py" --config "$C/$cfg.json" --micro-batch "$mb" --grad-accum "$ga" --seq "$seq" --steps "$steps" --logging-steps 10)
    [[ $stack == hf-compile ]] && wa+=(--compile)
    note="HF transformers from_config (SDPA) trained by transformers.Trainer (bf16=True, gradient_accumulation_steps $ga, logging_steps 10${comp:+, torch_compile=True}, library defaults otherwise); scenarios/workloads/hf_trainer.py"
  else
    wa=(python3 "$S/hf_train.py" --config "$C/$cfg.json" --mode train --micro-batch "$mb" --grad-accum "$ga" --seq "$seq" --steps "$steps" --recompute none)
    note="HF transformers from_config (SDPA), the project's loop (fp32 master params + bf16 autocast, fused AdamW, no clipping, grad_accum $ga); scenarios/workloads/hf_train.py"
  fi
  fmt=hf-trainer; [[ $loop == loop ]] && fmt=gpuplan
  echo "=== hft-$id $split $loop $cfg mb=$mb seq=$seq ga=$ga $stack (t=${now}s)"
  "$G" measure "${sa[@]}" --format "$fmt" --warmup "$warm" --timeout-s "$to" --run-id "hft-$id" --split "$split" --note "$note" \
    --log "$OUT/logs/hft-$id.log" --out "$REC" -- "${wa[@]}" >/dev/null 2>"$OUT/logs/hft-$id.measure.txt"
  echo "    exit $?: $(grep -a "gpuplan measure:" "$OUT/logs/hft-$id.measure.txt" | tail -1 | cut -c1-330)"
  grep -aE "Error|error" "$OUT/logs/hft-$id.log" | tail -2 | cut -c1-300
done <<<"$TABLE"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
echo "done at t=$(( $(date +%s) - T0 ))s"
