#!/usr/bin/env bash
# Diagnostic for the HF eager decode timings of the HF run set (hf-020..030, -054..056: about
# 50-77 ms per token for 1B and 3B, with the GPU 4-50% busy and no growth from 16 to 28 layers).
# One device call: the same decode run directly (no `gpuplan measure`), under measure at its default
# 20 Hz NVML sampling and at 1 Hz, the 3B shape directly, the reference workload's (train_llama.py)
# decode of a 1B shape, and a torch.profiler table of 5 HF steps. Not run yet (no device time left).
#   scripts/device_hf_decode_probe.sh OUTDIR
set -u
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
OUT=$1
G=.devbin/gpuplan; W=scenarios/workloads; C=$W/hf_configs
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$GPU_NAME" in *H100*) SYS=dgx-h100 ;; *) SYS=hgx-h200 ;; esac
echo "$GPU_NAME"; nproc; cat /proc/loadavg; lscpu | grep -E 'Model name|MHz' | head -3
run() {
  local name=$1; shift
  local t0=$(date +%s.%N)
  "$@" >"$OUT/$name.log" 2>&1
  local rc=$? t1=$(date +%s.%N)
  python3 - "$OUT/$name.log" "$name" "$rc" "$t0" "$t1" <<'PY'
import sys, statistics
f, name, rc, t0, t1 = sys.argv[1:]
ts = [float(l.split()[1].split("=")[1]) for l in open(f) if l.startswith("step=")]
st = ts[10:] or ts
print(f"{name}: exit {rc}, wall {float(t1)-float(t0):.1f} s, {len(ts)} steps, after 10: median {statistics.median(st)*1e3:.1f} ms "
      f"min {min(st)*1e3:.1f} max {max(st)*1e3:.1f}" if ts else f"{name}: exit {rc}, no steps")
PY
}
A=(python3 $W/hf_train.py --config $C/llama-3.2-1b.json --mode decode --batch 1 --kv-len 512 --decode-api loop --steps 40)
M=(--model $C/llama-3.2-1b.json --system $SYS --gpus 1 --mode decode --batch 1 --kv-len 512 --stack torch-eager --precision bf16 --warmup 10)
run direct-1b "${A[@]}"
run measure20hz-1b $G measure "${M[@]}" --run-id diag-20hz --note "diagnostic, not in the set: NVML at 20 Hz" --out "$OUT/diag.jsonl" -- "${A[@]}"
run measure1hz-1b $G measure "${M[@]}" --sample-hz 1 --run-id diag-1hz --note "diagnostic, not in the set: NVML at 1 Hz" --out "$OUT/diag.jsonl" -- "${A[@]}"
run direct-3b python3 $W/hf_train.py --config $C/llama-3.2-3b.json --mode decode --batch 1 --kv-len 4096 --decode-api loop --steps 40
run direct-1b-again "${A[@]}"
# the reference workload's own decode (no transformers) of a 1B Llama shape, same batch and KV, for the host's speed
run ref-llama-1b python3 $W/train_llama.py --model-file models/ref-llama-1b.toml --mode decode --batch 1 --kv-len 512 --steps 40
run profile-1b "${A[@]:0:${#A[@]}-2}" --steps 15 --profile 5
sed -n '/Self CPU %/,$p' "$OUT/profile-1b.log" | head -40
cat /proc/loadavg
tar -C "$OUT" -czf "$OUT/diag-logs.tgz" $(cd "$OUT" && ls *.log) && rm -f "$OUT"/*.log
