#!/usr/bin/env bash
# The exact driver that measured calibration/runs/h200.jsonl on a 2x H200 machine (device kind
# `nvidia-h200-x2`) with `gpuplan measure` and the reference workload.
#
#   run_h200.sh PHASE... OUTDIR       PHASE: smoke | a | b | ids=NNN,NNN (rerun those rows)
#
# Expects, under $D (default .devcarry/measure): the `gpuplan` binary, train_llama.py and the
# models/ref-llama-*.toml files. Writes $OUTDIR/h200.jsonl (records, appended), $OUTDIR/smoke.jsonl
# and one log per run under $OUTDIR/logs/.
#
# Every run is one row of the table below, with a fixed id. Its split is fixed by the id alone,
# before any fitting: ids divisible by 3 are `test`, the others `fit`.
# Lane 0 rows run on GPU 0 while lane 1 rows run on GPU 1 (two single-GPU jobs at once, one per
# GPU); lane 2 rows use both GPUs and run alone, after the single-GPU rows of their phase.
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

# id phase lane mode model dist mb|batch seq|kv_len grad_accum recompute stack steps warmup
read -r -d '' TABLE <<'EOF'
001 a 0 train   0.1b none  8   1024 1 none eager   70 3   # first run with 10 steps: windows under 1.5 s for power; rerun
002 a 1 train   0.1b none  4   4096 1 none eager   40 3   # first run with 10 steps: windows under 1.5 s for power; rerun
003 a 0 train   0.1b none  16  2048 1 full eager   20 3   # first run with 10 steps: windows under 1.5 s for power; rerun
004 a 1 train   0.5b none  8   2048 1 none eager   20 3   # first run with 10 steps: windows under 1.5 s for power; rerun
005 a 0 train   0.5b none  4   8192 1 none eager   10 3
006 a 1 train   0.5b none  8   2048 1 full eager   10 3
007 a 0 train   1b   none  4   4096 1 none eager   10 3
008 a 1 train   1b   none  8   2048 1 full eager   10 3
009 a 0 train   1b   none  2   8192 1 none eager   10 3
010 a 1 train   1b   none  2   2048 4 none eager   8  3
011 a 0 train   3b   none  2   4096 1 none eager   10 3
012 a 1 train   3b   none  4   4096 1 full eager   8  3
013 a 0 train   3b   none  1   8192 1 none eager   10 3
014 a 1 train   3b   none  8   4096 1 none eager   8  3
015 a 0 train   8b   none  1   2048 1 full eager   8  3
016 a 1 train   8b   none  2   4096 1 none eager   8  3
017 a 0 train   3b   none  2   8192 1 full eager   8  3
018 a 1 train   1b   none  16  8192 1 none eager   8  3
019 a 0 prefill 8b   none  1   2048 0 none eager   50 3   # first run with 10 steps: windows under 1.5 s for power; rerun
020 a 1 prefill 8b   none  8   4096 0 none eager   8  3
021 a 0 prefill 1b   none  16  2048 0 none eager   20 3   # first run with 10 steps: windows under 1.5 s for power; rerun
022 a 1 prefill 3b   none  4   8192 0 none eager   8  3
023 a 0 decode  8b   none  1   1024 0 none eager   100 10   # first run with 40 steps: windows under 1.5 s for power; rerun
024 a 1 decode  8b   none  32  2048 0 none eager   100 10   # first run with 40 steps: windows under 1.5 s for power; rerun
025 a 0 decode  8b   none  128 4096 0 none eager   100 10   # first run with 40 steps: windows under 1.5 s for power; rerun
026 a 1 decode  8b   none  256 8192 0 none eager   40 10
027 a 0 decode  1b   none  64  2048 0 none eager   100 10   # first run with 40 steps: windows under 1.5 s for power; rerun
028 a 1 decode  3b   none  16  8192 0 none eager   100 10   # first run with 40 steps: windows under 1.5 s for power; rerun
029 b 0 train   0.1b none  8   1024 1 none compile 10 3
030 b 1 train   0.5b none  8   2048 1 none compile 10 3
031 b 0 train   1b   none  4   4096 1 none compile 10 3
032 b 1 train   3b   none  2   4096 1 none compile 8  3
033 b 2 train   1b   ddp   4   4096 1 none eager   10 3
034 b 2 train   3b   ddp   2   4096 1 none eager   8  3
035 b 2 train   3b   fsdp  2   4096 1 none eager   8  3
036 b 2 train   8b   fsdp  1   4096 1 full eager   8  3
037 b 2 train   8b   fsdp  1   4096 1 none eager   8  3
038 b 2 train   1b   fsdp  4   4096 1 none eager   10 3
039 b 2 train   8b   ddp   1   1024 1 full eager   8  3
EOF

split_of() { if (( 10#$1 % 3 == 0 )); then echo test; else echo fit; fi; }

# run_row ROW...: one measured run.
run_row() {
  local id=$1 phase=$2 lane=$3 mode=$4 model=$5 dist=$6 b=$7 s=$8 ga=$9 rc=${10} stack=${11} steps=${12} warm=${13}
  if (( $(date +%s) - T0 > BUDGET_S )); then echo "skip h200-$id: over the driver's time budget"; return; fi
  local mf=$M/ref-llama-$model.toml
  local -a ma wa pre
  local cvd
  ma=(--model "ref-llama-$model" --system hgx-h200 --mode "$mode" --precision bf16 --stack "torch-$stack"
      --warmup "$warm" --run-id "h200-$id" --split "$(split_of "$id")" --out "$REC" --log "$OUTDIR/logs/h200-$id.log")
  wa=(--model-file "$mf" --mode "$mode" --steps "$steps")
  local timeout=150
  [[ $stack == compile ]] && { wa+=(--compile); timeout=300; }
  case $mode in
    train)
      ma+=(--micro-batch "$b" --grad-accum "$ga" --seq "$s" --recompute "$rc")
      wa+=(--micro-batch "$b" --grad-accum "$ga" --seq "$s" --recompute "$rc") ;;
    prefill)
      ma+=(--batch "$b" --seq "$s"); wa+=(--batch "$b" --seq "$s") ;;
    decode)
      ma+=(--batch "$b" --kv-len "$s"); wa+=(--batch "$b" --kv-len "$s") ;;
  esac
  if [[ $lane == 2 ]]; then
    local zero=0; [[ $dist == fsdp ]] && zero=3
    ma+=(--gpus 2 --dp 2 --zero "$zero")
    wa+=(--dist "$dist")
    pre=(torchrun --standalone --nproc-per-node 2 "$W")
    cvd=0,1
  else
    ma+=(--gpus 1 --zero 0 --note "single-GPU run; the other GPU ran another single-GPU row at the same time")
    pre=(python3 "$W")
    cvd=$lane
  fi
  echo "=== h200-$id $mode $model $dist b=$b s=$s ga=$ga rc=$rc $stack (t=$(( $(date +%s) - T0 ))s)"
  CUDA_VISIBLE_DEVICES=$cvd "$G" measure "${ma[@]}" --timeout-s "$timeout" -- "${pre[@]}" "${wa[@]}" < /dev/null > /dev/null 2>&1
  echo "    exit $? (t=$(( $(date +%s) - T0 ))s)"
}

run_lane() { # PHASE LANE; PHASE `ids=001,017` runs those rows again, each in its own lane
  echo "$TABLE" | while read -r -a r; do
    if [[ $1 == ids=* ]]; then
      [[ ,${1#ids=}, == *,${r[0]},* && ${r[2]} == "$2" ]] && run_row "${r[@]}"
    else
      [[ ${r[1]} == "$1" && ${r[2]} == "$2" ]] && run_row "${r[@]}"
    fi
  done
}

smoke() {
  local S=$OUTDIR/smoke.jsonl tiny=(--hidden 256 --layers 2 --heads 4 --kv-heads 2 --ffn 512 --vocab 1000)
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,power.limit,clocks.max.sm --format=csv
  python3 -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())'
  "$G" --version
  local i=0
  for args in "--mode train --steps 5" "--mode train --steps 5 --recompute full --grad-accum 2" "--mode prefill --steps 5 --batch 2 --seq 512" \
              "--mode decode --steps 8 --batch 4 --kv-len 256" "--mode decode --steps 3 --batch 100000 --kv-len 100000"; do
    i=$((i+1))
    CUDA_VISIBLE_DEVICES=0 "$G" measure --run-id "smoke-$i" --out "$S" --warmup 2 --log "$OUTDIR/logs/smoke-$i.log" -- python3 "$W" "${tiny[@]}" $args > /dev/null 2>&1
    echo "smoke-$i exit $?: $args"; tail -n 3 "$OUTDIR/logs/smoke-$i.log"
  done
  for dist in ddp fsdp; do
    i=$((i+1))
    CUDA_VISIBLE_DEVICES=0,1 "$G" measure --run-id "smoke-$i" --gpus 2 --out "$S" --warmup 2 --log "$OUTDIR/logs/smoke-$i.log" --timeout-s 120 -- \
      torchrun --standalone --nproc-per-node 2 "$W" "${tiny[@]}" --mode train --steps 5 --grad-accum 2 --dist $dist > /dev/null 2>&1
    echo "smoke-$i exit $?: $dist"; tail -n 4 "$OUTDIR/logs/smoke-$i.log"
  done
  python3 - "$S" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l); m = r["metrics"]
    print(r["run_id"], r["status"], m["n_steps_timed"], m["step_time_s_median"], m["peak_mem_bytes_per_gpu_nvml"], m["avg_power_w_per_gpu"], m["n_nvml_samples"], r["machine"]["gpu_name"], r["machine"]["driver_version"], r["machine"]["cuda_driver_version"])
PY
}

for ph in "${PHASES[@]}"; do
  if [[ $ph == smoke ]]; then smoke; continue; fi
  run_lane "$ph" 0 > "$OUTDIR/lane0-$ph.txt" 2>&1 &
  run_lane "$ph" 1 > "$OUTDIR/lane1-$ph.txt" 2>&1 &
  wait
  cat "$OUTDIR/lane0-$ph.txt" "$OUTDIR/lane1-$ph.txt"
  run_lane "$ph" 2
done
[[ -f $REC ]] && python3 - "$REC" <<'PY'
import json, sys
G = 2**30
for l in open(sys.argv[1]):
    r = json.loads(l); m = r["metrics"]; s = r["scenario"]
    f = lambda v, k=1: "-" if v is None else f"{v*k:.4g}"
    print(r["run_id"], r["split"], r["status"], s["mode"], s["model"], s["n_gpus"], s["zero"], s.get("micro_batch") or s.get("batch"), s.get("seq") or s.get("kv_len"), s["recompute"], s["stack"],
          "t=" + f(m["step_time_s_median"]), "tok/s=" + f(m["tokens_per_s"]), "nvmlGiB=" + ",".join(f(x, 1/G) for x in m["peak_mem_bytes_per_gpu_nvml"]),
          "resGiB=" + ",".join(f(x, 1/G) for x in m["peak_mem_reserved_bytes_per_rank"]), "W=" + ",".join(f(x) for x in m["avg_power_w_per_gpu"]), "J/step=" + f(m["energy_j_per_step"]), "win=" + f(m["steady_window_s"]))
PY
echo "driver done after $(( $(date +%s) - T0 ))s"
