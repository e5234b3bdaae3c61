#!/usr/bin/env bash
# The driver that measured the 4-GPU rows of calibration/runs/h200.jsonl (ids 040 and up) on a
# 4x H200 machine (device kind `nvidia-h200-x4`) with `gpuplan measure` and the reference workload:
# DDP and FSDP over 4 GPUs, tensor parallelism (PyTorch DTensor, no sequence parallelism) over 2
# and 4 GPUs.
#
#   run_h200x4.sh PHASE... OUTDIR       PHASE: smoke | dp | tp | ho | ids=NNN,NNN (rerun those rows)
#
# Phases dp and tp ran first (call 1 and 2, 2026-11-22 07:03-07:13 UTC); the DTensor host-stall
# constants were fitted on their fit rows; phase ho (ids 052-059) ran after that fit, as a
# held-out check of it whatever their split label says. Phase h2 (ids 060-067) ran after the DP
# overlap cost and the RMSNorm memory term were fitted/changed too: held out for all of them.
#
# Expects, under $D (default .devcarry/measure): the `gpuplan` binary, train_llama.py and the
# models/ref-llama-*.toml files. Writes $OUTDIR/h200.jsonl (records, appended), $OUTDIR/smoke.jsonl
# and one log per run under $OUTDIR/logs/. Rows run one at a time, each on GPUs 0..gpus-1.
# The split is fixed by the id alone, before any fitting: ids divisible by 3 are `test`.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 CUDA_DEVICE_ORDER=PCI_BUS_ID
D=${D:-.devcarry/measure}
G=$D/gpuplan
W=$D/train_llama.py
M=$D/models
OUTDIR=${*: -1}
PHASES=("${@:1:$#-1}")
mkdir -p "$OUTDIR/logs"
REC=$OUTDIR/h200.jsonl
T0=$(date +%s)
# Stop starting new runs this many seconds after the driver started (keeps a device call in time).
BUDGET_S=${BUDGET_S:-540}

# id phase gpus dist model mb seq grad_accum recompute steps warmup
read -r -d '' TABLE <<'ROWS'
040 dp 4 ddp  1b 4 4096 1 none 10 3
041 dp 4 ddp  3b 2 4096 1 none 8  3
042 dp 4 fsdp 3b 2 4096 1 none 8  3
043 dp 4 fsdp 8b 1 4096 1 none 8  3
044 dp 4 fsdp 8b 2 4096 1 none 8  3
045 tp 2 tp   3b 2 4096 1 none 8  3
046 tp 4 tp   3b 2 4096 1 none 8  3
047 tp 2 tp   8b 1 4096 1 none 8  3
048 tp 4 tp   8b 1 4096 1 none 8  3
049 tp 4 tp   8b 2 4096 1 full 8  3
050 tp 2 tp   1b 4 4096 1 none 10 3
051 tp 4 tp   1b 4 4096 1 none 10 3
052 ho 2 tp   8b 2 2048 1 none 8  3
053 ho 4 tp   3b 4 2048 2 none 6  2
054 ho 2 tp   1b 8 2048 1 full 8  3
055 ho 4 tp   8b 1 8192 1 full 6  2
056 ho 4 ddp  0.5b 8 2048 1 none 10 3
057 ho 4 fsdp 1b 4 4096 1 none 10 3
058 ho 2 tp   3b 1 8192 1 none 8  3
059 ho 4 tp   1b 8 2048 1 none 10 3
060 h2 4 ddp  3b 1 8192 1 none 8  3
061 h2 2 ddp  1b 8 2048 1 none 10 3
062 h2 4 fsdp 3b 4 2048 2 none 6  2
063 h2 2 fsdp 8b 1 2048 1 full 8  3
064 h2 4 tp   3b 1 8192 1 none 8  3
065 h2 2 tp   8b 1 8192 1 full 6  2
066 h2 4 ddp  1b 2 8192 1 none 8  3
067 h2 4 fsdp 8b 1 8192 1 full 6  2
ROWS

split_of() { if (( 10#$1 % 3 == 0 )); then echo test; else echo fit; fi; }

run_row() {
  local id=$1 phase=$2 n=$3 dist=$4 model=$5 b=$6 s=$7 ga=$8 rc=$9 steps=${10} warm=${11}
  if (( $(date +%s) - T0 > BUDGET_S )); then echo "skip h200-$id: over the driver's time budget"; return; fi
  local -a ma wa
  ma=(--model "ref-llama-$model" --system hgx-h200 --mode train --precision bf16 --stack torch-eager --gpus "$n"
      --micro-batch "$b" --grad-accum "$ga" --seq "$s" --recompute "$rc"
      --warmup "$warm" --run-id "h200-$id" --split "$(split_of "$id")" --out "$REC" --log "$OUTDIR/logs/h200-$id.log")
  wa=(--model-file "$M/ref-llama-$model.toml" --mode train --steps "$steps" --dist "$dist"
      --micro-batch "$b" --grad-accum "$ga" --seq "$s" --recompute "$rc")
  case $dist in
    ddp) ma+=(--dp "$n" --zero 0) ;;
    fsdp) ma+=(--dp "$n" --zero 3) ;;
    tp) ma+=(--tp "$n" --dp 1 --zero 0 --sp false) ;;
  esac
  local cvd; cvd=$(seq -s, 0 $((n - 1)))
  echo "=== h200-$id $model $dist x$n mb=$b s=$s ga=$ga rc=$rc (t=$(( $(date +%s) - T0 ))s)"
  CUDA_VISIBLE_DEVICES=$cvd "$G" measure "${ma[@]}" --timeout-s 150 -- \
    torchrun --standalone --nproc-per-node "$n" "$W" "${wa[@]}" < /dev/null > /dev/null 2>&1
  echo "    exit $? (t=$(( $(date +%s) - T0 ))s)"; tail -n 2 "$OUTDIR/logs/h200-$id.log"
}

run_phase() {
  echo "$TABLE" | while read -r -a r; do
    if [[ $1 == ids=* ]]; then
      [[ ,${1#ids=}, == *,${r[0]},* ]] && run_row "${r[@]}"
    else
      [[ ${r[1]} == "$1" ]] && run_row "${r[@]}"
    fi
  done
}

smoke() {
  local S=$OUTDIR/smoke.jsonl tiny=(--hidden 256 --layers 2 --heads 4 --kv-heads 4 --ffn 512 --vocab 1000)
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,power.limit,clocks.max.sm --format=csv
  nvidia-smi topo -m
  python3 -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())'
  local i=0
  for n in 2 4; do for tie in "" --tie-embeddings; do
    i=$((i+1))
    CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((n - 1))) "$G" measure --run-id "smoke-tp$i" --gpus "$n" --tp "$n" --sp false --out "$S" --warmup 2 \
      --log "$OUTDIR/logs/smoke-tp$i.log" --timeout-s 120 -- \
      torchrun --standalone --nproc-per-node "$n" "$W" "${tiny[@]}" $tie --mode train --steps 5 --grad-accum 2 --recompute full --dist tp > /dev/null 2>&1
    echo "smoke-tp$i exit $?: tp=$n $tie"; tail -n 5 "$OUTDIR/logs/smoke-tp$i.log"
  done; done
}

for ph in "${PHASES[@]}"; do
  if [[ $ph == smoke ]]; then smoke; else run_phase "$ph"; fi
done
[[ -f $REC ]] && python3 - "$REC" <<'PY'
import json, sys
G = 2**30
for l in open(sys.argv[1]):
    r = json.loads(l); m = r["metrics"]; s = r["scenario"]
    f = lambda v, k=1: "-" if v is None else f"{v*k:.4g}"
    print(r["run_id"], r["split"], r["status"], s["model"], s["n_gpus"], "tp", s["tp"], "zero", s["zero"], s.get("micro_batch"), s.get("seq"), s["recompute"],
          "t=" + f(m["step_time_s_median"]), "tok/s=" + f(m["tokens_per_s"]), "nvmlGiB=" + ",".join(f(x, 1/G) for x in m["peak_mem_bytes_per_gpu_nvml"]),
          "W=" + ",".join(f(x) for x in m["avg_power_w_per_gpu"]), "win=" + f(m["steady_window_s"]))
PY
echo "driver done after $(( $(date +%s) - T0 ))s"
