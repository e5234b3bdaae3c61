#!/usr/bin/env bash
# Predictions for the Megatron-Bridge 0.6.2 perf recipes' default GPT-OSS-120B and Qwen3-235B-A22B
# layouts (megatron/bridge/perf_recipes/{gpt_oss,qwen}/{b200,gb200,h100}/*.py), mapped onto the CLI
# the way `validate --published` maps a published row (zero 1: distributed optimizer; balanced
# routing: the recipes set moe_router_force_load_balancing; bf16 gradient reduce: the perf recipes'
# grad_reduce_in_fp32 = False; fused cross entropy). No measured row exists for either model.
# Usage: docs/gpt-oss-qwen3-235b/predict.sh [path/to/gpuplan] > docs/gpt-oss-qwen3-235b/predict.out
set -euo pipefail
G=${1:-target/debug/gpuplan}
common=(--zero 1 --routing-imbalance 1.0 --grad-reduce-dtype bf16 --cross-entropy-fusion true --stack megatron --seq 4096)
oss=(--model gpt-oss-120b "${common[@]}" --gpus 64 --tp 1 --sp false --global-batch 1280 --recompute selective --recompute-modules layernorm,moe_act --moe-dispatcher alltoall)
# The base recipe (recipes/qwen/h100/qwen3_moe.py) counts the embedding and the loss as pipeline layers: 96 / (PP x VP).
q235=(--model qwen3-235b-a22b "${common[@]}" --recompute none --micro-batch 1 --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split)
run() { echo "### gpuplan predict $*"; "$G" predict "$@" || echo "(exit status $?)"; echo; }
# gpt_oss_120b_pretrain_64gpu_b200_{bf16,fp8mx}_config: TP1 PP1 EP8, MBS 4, GBS 1280
run "${oss[@]}" --system dgx-b200 --pp 1 --ep 8 --micro-batch 4 --precision bf16
run "${oss[@]}" --system dgx-b200 --pp 1 --ep 8 --micro-batch 4 --precision fp8 --fp8-recipe mxfp8
# gpt_oss_120b_pretrain_64gpu_gb200_bf16_config: TP1 PP1 EP64, MBS 4, GBS 1280
run "${oss[@]}" --system gb200-nvl72 --pp 1 --ep 64 --micro-batch 4 --precision bf16
# gpt_oss_120b_pretrain_64gpu_h100_bf16_config: TP1 PP4 EP8, MBS 1, GBS 1280
run "${oss[@]}" --system dgx-h100 --pp 4 --ep 8 --micro-batch 1 --precision bf16
# The question: EP 64 across 8 DGX B200 nodes against the recipe's EP 8 (one NVLink domain).
run "${oss[@]}" --system dgx-b200 --pp 1 --ep 64 --micro-batch 4 --precision bf16
# qwen3_235b_a22b_pretrain_64gpu_b200_bf16_config: TP1 PP8 VP4 EP8, MBS 1, GBS 2048, alltoall
run "${q235[@]}" --system dgx-b200 --gpus 64 --tp 1 --pp 8 --vp 4 --ep 8 --global-batch 2048 --precision bf16 --moe-dispatcher alltoall
# qwen3_235b_a22b_pretrain_64gpu_gb200_bf16_config: TP1 PP8 EP8, MBS 1, GBS 2048, flex
run "${q235[@]}" --system gb200-nvl72 --gpus 64 --tp 1 --pp 8 --ep 8 --global-batch 2048 --precision bf16 --moe-dispatcher flex
# qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config: TP2 PP8 VP4 EP32, MBS 1, GBS 8192, alltoall
run "${q235[@]}" --system dgx-h100 --gpus 256 --tp 2 --pp 8 --vp 4 --ep 32 --global-batch 8192 --precision bf16 --moe-dispatcher alltoall
# The planner on 64 DGX B200s (8 nodes of 8): its best layout overall, and its best with EP forced
# to 16 and to 64 (across 2 and 8 NVLink domains).
plan=(plan --model gpt-oss-120b --system dgx-b200 --gpus 64 --global-batch 1280 --seq 4096 --precision bf16 --zero 1 --routing-imbalance 1.0 --grad-reduce-dtype bf16 --cross-entropy-fusion true --stack megatron --no-progress)
echo "### gpuplan ${plan[*]} --top 5"; "$G" "${plan[@]}" --top 5; echo
for ep in 16 64; do echo "### gpuplan ${plan[*]} --ep $ep --top 1"; "$G" "${plan[@]}" --ep "$ep" --top 1; echo; done
