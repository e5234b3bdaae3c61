#!/bin/bash
# Memory by phase of a training step (issue 9 follow-up): rank 0's allocated bytes and the peak
# since the previous point (`train_llama.py --mem-trace`, step 2) for 1B at TP 1/2/4, 8B at TP 2/4
# and 3B at TP 4, on a 4x H200 machine (device kind `nvidia-h200-x4`), run from the repo root with
# .devcarry/measure carried. Output of the 2026-11-22 07:59 UTC run:
# calibration/runs/raw/memtrace-tp-x4.txt. It showed 26.8 B per token x hidden unit per layer
# staying whole under TP without SP (the eager RMSNorm's fp32 normalized tensor was not counted).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
D=.devcarry/measure; W=$D/train_llama.py; M=$D/models
run() { local name=$1 n=$2; shift 2; echo "=== $name"; if [ $n = 1 ]; then CUDA_VISIBLE_DEVICES=0 timeout 120 python3 $W "$@" --steps 3 --mem-trace 2>&1 | grep -E "memtrace|^config|Error|error" | cut -c1-300; else CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((n-1))) timeout 150 torchrun --standalone --nproc-per-node $n $W "$@" --steps 3 --mem-trace 2>&1 | grep -E "memtrace|Error|error" | cut -c1-300; fi; }
run 1b-tp1 1 --model-file $M/ref-llama-1b.toml --micro-batch 4 --seq 4096
run 1b-tp4 4 --model-file $M/ref-llama-1b.toml --micro-batch 4 --seq 4096 --dist tp
run 1b-tp2 2 --model-file $M/ref-llama-1b.toml --micro-batch 4 --seq 4096 --dist tp
run 8b-tp4 4 --model-file $M/ref-llama-8b.toml --micro-batch 1 --seq 4096 --dist tp
run 8b-tp2 2 --model-file $M/ref-llama-8b.toml --micro-batch 1 --seq 4096 --dist tp
run 3b-tp4 4 --model-file $M/ref-llama-3b.toml --micro-batch 2 --seq 4096 --dist tp
