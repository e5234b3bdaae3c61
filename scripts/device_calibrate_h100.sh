#!/bin/bash
# gpuplan calibrate on one H100 (issue 3): the shipped h100-sxm-1x profile, its PyTorch comparison,
# a repeat run of the single-GPU groups (the repeat check), and the GPU-feature tests.
# Run from the repo root on the device machine, with .devcarry/ holding the release binary
# (gpuplan), the test binary (it-gpu, from `cargo test --release --features gpu-tests --no-run`)
# and scripts/compare_{torch,runs}.py under .devcarry/calib/.
set -o pipefail
export PYTHONUNBUFFERED=1
C=./.devcarry/calib
W=/tmp/calib-work; P=$W/profiles
mkdir -p $P
step() { echo "=== $(date -u +%FT%TZ) $*"; }
pack() { (cd $W && tar czf $OUT/profiles.tgz profiles); }
step nvidia-smi; nvidia-smi --query-gpu=index,name,uuid,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu,driver_version --format=csv
step 1x full
timeout 240 $C/gpuplan calibrate --name h100-sxm-1x --out-dir $P --power-seconds 10 --keep-going --no-progress; pack
step torch comparison
timeout 100 python3 $C/compare_torch.py --profile $P/h100-sxm-1x --out $P/h100-sxm-1x/torch_comparison.json | tee $P/h100-sxm-1x/torch_comparison.txt; pack
step repeat run
timeout 180 $C/gpuplan calibrate --name h100-sxm-1x-repeat --only launch,hbm,elementwise,gemm --out-dir $P --keep-going --no-progress; pack
step repeat check
python3 $C/compare_runs.py $P/h100-sxm-1x $P/h100-sxm-1x-repeat --out $P/h100-sxm-1x/repeat.json | tee $P/h100-sxm-1x/repeat.txt; pack
step gpu tests
GPUPLAN_BIN=$C/gpuplan timeout 150 ./.devcarry/it-gpu --test-threads 1 quick_calibration_on_this_gpu nvml_samples_on_this_gpu 2>&1 | tee $W/profiles/gpu-tests-h100.txt; pack
step done
