#!/bin/bash
# gpuplan calibrate on one H200 (issue 3), second round: the full profile with the attention group
# and per-row GEMM settling, a repeat run of the single-GPU groups (the repeat check), the PyTorch
# comparison, and the GPU-feature tests. Run from the repo root on the device machine with
# .devcarry/ holding gpuplan and it-gpu (see device_calibrate_h100.sh).
set -o pipefail
export PYTHONUNBUFFERED=1
C=./.devcarry/calib
W=/tmp/calib-work; P=$W/profiles
mkdir -p $P
step() { echo "=== $(date -u +%FT%TZ) $*"; }
pack() { (cd $W && tar czf $OUT/profiles.tgz profiles); }
step nvidia-smi; nvidia-smi --query-gpu=index,name,uuid,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu,driver_version --format=csv
step 1x full
timeout 260 $C/gpuplan calibrate --name h200-sxm-1x --out-dir $P --power-seconds 10 --keep-going --no-progress; pack
step torch comparison
timeout 60 python3 $C/compare_torch.py --profile $P/h200-sxm-1x --out $P/h200-sxm-1x/torch_comparison.json | tee $P/h200-sxm-1x/torch_comparison.txt; pack
step repeat run
timeout 200 $C/gpuplan calibrate --name h200-sxm-1x-repeat --only launch,hbm,elementwise,gemm,attention --out-dir $P --keep-going --no-progress; pack
step repeat check
python3 $C/compare_runs.py $P/h200-sxm-1x $P/h200-sxm-1x-repeat --out $P/h200-sxm-1x/repeat.json | tee $P/h200-sxm-1x/repeat.txt; pack
step gpu tests
GPUPLAN_BIN=$C/gpuplan timeout 100 ./.devcarry/it-gpu --test-threads 1 on_this_gpu 2>&1 | tee $P/gpu-tests-h200.txt; pack
step done
