#!/bin/bash
# Issue 9 on a 4x H200 machine (device kind `nvidia-h200-x4`), in device calls of at most 10 min:
#   device_h200x4.sh calib   the node profile hgx-h200-4x (NCCL groups of 2 and 4, all-to-all,
#                            P2P per pair, power), then the TP smoke test and the DP rows
#   device_h200x4.sh tp      the tensor-parallel rows (and any PHASES given after it)
#   device_h200x4.sh runs P  the rows of phases P... only (e.g. `runs ho`)
#   device_h200x4.sh power   the power group alone (GPU 0's phases, then all GPUs under GEMMs at
#                            once: power_node.csv) as the profile hgx-h200-4x-power
# Run from the repo root, with .devcarry/calib/gpuplan (+ compare_torch.py) and .devcarry/measure/
# (gpuplan, train_llama.py, models/) carried. Results under $OUT (profiles.tgz, runs.tgz).
set -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s)
C=./.devcarry/calib
W=/tmp/calib-work; P=$W/profiles; R=$W/runs
mkdir -p $P $R
step() { echo "=== $(date -u +%FT%TZ) (t=$(( $(date +%s) - T0 ))s) $*"; }
pack() { (cd $W && tar czf $OUT/profiles.tgz profiles && tar czf $OUT/runs.tgz runs); }
left() { echo $(( ${LIMIT_S:-580} - ($(date +%s) - T0) )); }
step nvidia-smi; nvidia-smi --query-gpu=index,name,uuid,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu,driver_version --format=csv
case ${1:-calib} in
  calib)
    step 4x full calibration
    timeout ${CALIB_S:-330} $C/gpuplan calibrate --name hgx-h200-4x --out-dir $P --power-seconds 10 --keep-going --no-progress; pack
    step torch comparison
    timeout 60 python3 $C/compare_torch.py --profile $P/hgx-h200-4x --out $P/hgx-h200-4x/torch_comparison.json | tee $P/hgx-h200-4x/torch_comparison.txt; pack
    step runs
    BUDGET_S=$(( $(left) - 60 )) bash calibration/runs/run_h200x4.sh smoke dp $R; pack ;;
  tp)
    shift
    step runs
    BUDGET_S=$(( $(left) - 60 )) bash calibration/runs/run_h200x4.sh smoke tp "$@" $R; pack ;;
  power)
    step 4x power
    timeout 200 $C/gpuplan calibrate --name hgx-h200-4x-power --only power --out-dir $P --power-seconds 10 --no-progress; pack ;;
  runs)
    shift
    step runs
    BUDGET_S=$(( $(left) - 60 )) bash calibration/runs/run_h200x4.sh "$@" $R; pack ;;
esac
step done
