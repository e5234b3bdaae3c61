#!/bin/bash
# gpuplan calibrate on one GPU (issue 3): the full profile NAME (default h200-sxm-1x), the PyTorch
# comparison, a repeat run of the single-GPU groups (the repeat check), and the GPU-feature tests.
# Run from the repo root on the device machine, with .devcarry/ holding the release binary at
# calib/gpuplan, scripts/compare_{torch,runs}.py under calib/, and the test binary it-gpu (from
# `cargo test --release --features gpu-tests --no-run`, target/release/deps/it-*).
set -o pipefail
N=${1:-h200-sxm-1x}
export PYTHONUNBUFFERED=1
C=./.devcarry/calib
W=/tmp/calib-work; P=$W/profiles
mkdir -p $P
step() { echo "=== $(date -u +%FT%TZ) $*"; }
pack() { (cd $W && tar czf $OUT/profiles.tgz profiles); }
step nvidia-smi; nvidia-smi --query-gpu=index,name,uuid,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu,driver_version --format=csv
step 1x full
timeout 260 $C/gpuplan calibrate --name $N --out-dir $P --power-seconds 10 --keep-going --no-progress; pack
step torch comparison
timeout 60 python3 $C/compare_torch.py --profile $P/$N --out $P/$N/torch_comparison.json | tee $P/$N/torch_comparison.txt; pack
step repeat run
timeout 200 $C/gpuplan calibrate --name $N-repeat --only launch,hbm,elementwise,gemm,attention --out-dir $P --keep-going --no-progress; pack
step repeat check
python3 $C/compare_runs.py $P/$N $P/$N-repeat --out $P/$N/repeat.json | tee $P/$N/repeat.txt; pack
step gpu tests
GPUPLAN_BIN=$C/gpuplan timeout 100 ./.devcarry/it-gpu --test-threads 1 on_this_gpu 2>&1 | tee $P/gpu-tests-$N.txt; pack
step done
