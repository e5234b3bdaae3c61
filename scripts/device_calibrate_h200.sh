#!/bin/bash
# gpuplan calibrate: the runs that produce the shipped H200 profiles (issue 3). Run from the repo root.
set -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
C=./.devcarry/calib
W=/tmp/calib-work; P=$W/profiles
mkdir -p $P
step() { echo "=== $(date -u +%FT%TZ) $*"; }
pack() { (cd $W && tar czf $OUT/profiles.tgz profiles); }
step nvidia-smi; nvidia-smi --query-gpu=index,name,uuid,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu,driver_version --format=csv
step 2x full
timeout 150 $C/gpuplan calibrate --name h200-sxm-2x --out-dir $P --power-seconds 10 --keep-going --no-progress; pack
step torch comparison
timeout 80 python3 $C/compare_torch.py --profile $P/h200-sxm-2x --out $P/h200-sxm-2x/torch_comparison.json | tee $P/h200-sxm-2x/torch_comparison.txt; pack
step 1x full
CUDA_VISIBLE_DEVICES=0 timeout 130 $C/gpuplan calibrate --name h200-sxm-1x --out-dir $P --power-seconds 10 --keep-going --no-progress; pack
step repeat check
python3 $C/compare_runs.py $P/h200-sxm-1x $P/h200-sxm-2x --out $P/h200-sxm-1x/repeat_vs_2x.json | tee $P/h200-sxm-1x/repeat_vs_2x.txt; pack
step done
