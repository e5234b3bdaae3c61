#!/usr/bin/env bash
# Issue 19, post-fit 14 (lead, 2026-11-25): HF transformers runs taken after this session's
# mechanisms were final (wt-float8: torchao float8 memory and the rowwise recipe's cost;
# wt-mlaprefill: the hf-eager prefill forward replayed through the caching allocator, MLA RoPE and
# copies; wt-trainerga; wt-opsac and wt-titancomm touch no single-GPU HF run), the way the project's
# held-out HF runs are taken: no in-process host probe, no idle reading. Rows 226-232 of
# scripts/device_hf.sh, all `test` (rows >= 62), nothing fitted on them: float8 tensorwise and
# rowwise training under compile on new shapes (the first HF rowwise training run), prefill of
# DeepSeek-V3-s at 16K, Qwen3-MoE e32k8, Llama-3.2-3B at 2 x 16K and Mixtral-s, and one compiled
# TinyLlama step. One device call:
#   S=.devbin/postfit14 BUDGET_S=470 bash .devbin/postfit14/device_postfit14.sh h100 $OUT   (nvidia-h100-x1)
#   S=.devbin/postfit14 BUDGET_S=220 bash .devbin/postfit14/device_postfit14.sh h100b $OUT  (the prefill rows, second call)
# The scripts (hf_train.py, host_probe.py, device_hf.sh) and the gpuplan binary are carried in S;
# the torchao wheel in .whl (device_hf.sh installs it).
set -u
S=${S:-.devbin/postfit14}
PART=${1:?h100|h200}
OUT=${2:?OUTDIR}
case $PART in
  h100) ROWS=226-232 ;;
  # The first call (02:43 UTC) measured hf-226 only: torch.compile took 238 s on that lease, hf-227
  # timed out compiling and rows 228-232 were skipped. A second call takes the prefill rows.
  h100b) ROWS=228,229,230,231 ;;
  *) echo "PART must be h100 or h100b, not $PART"; exit 2 ;;
esac
D=$OUT/postfit14-$PART
mkdir -p "$D"
T0=$(date +%s)
{ date -u +%FT%TZ; nvidia-smi --query-gpu=uuid,name,power.draw,clocks.sm,pstate,temperature.gpu --format=csv; } >"$D/nvidia-smi-before.txt" 2>&1
PH=rows=$ROWS; [[ $ROWS == *,* ]] && PH=ids=$ROWS
W=$S G=${G:-$S/gpuplan} BUDGET_S=${BUDGET_S:-470} bash "$S/device_hf.sh" "$PH" "$D" >"$D/driver.txt" 2>&1
echo "rows done at t=$(( $(date +%s) - T0 ))s" >>"$D/driver.txt"
{ date -u +%FT%TZ; nvidia-smi --query-gpu=uuid,name,power.draw,clocks.sm,pstate,temperature.gpu --format=csv; } >"$D/nvidia-smi-after.txt" 2>&1
rmdir "$D/micro" 2>/dev/null
cat "$D/driver.txt"
