#!/usr/bin/env bash
# Diagnostic what-ifs behind docs/trtllm-residuals.md (issue 20): how the TensorRT-LLM dev rows
# respond to one knob at a time. Nothing here is fitted or shipped; each line says what it varies.
# Usage: scripts/serving_what_ifs.sh [path/to/gpuplan]   (a debug build: about 2 minutes)
# Output recorded in calibration/runs/serving-trtllm/what-ifs-output.txt.
set -euo pipefail
BIN=${1:-target/debug/gpuplan}
CSV=tests/data/published/trtllm_inference_dev.csv
summary() { # $1 = split; stdin = validate --json
  python3 -c 'import json,sys; v=json.load(sys.stdin); print("  ".join("%s %.2f%% (%+.1f%%)" % (s["metric"], s["all"]["mape_pct"], s["all"]["bias_pct"]) for s in v["summary"] if s["split"]==sys.argv[1] and s["all"]))' "$1"
}
echo "# $(date -u +%F) $(git rev-parse --short HEAD) $BIN"
echo "## 1. TensorRT-LLM's serial host time per sequence (cost::fitted::TRTLLM_HOST_US[1], shipped 10 us), fit split"
for seq in 10 5 0; do
  echo -n "trtllm_host_us=2000,$seq,0: "
  GPUPLAN_FIT_CONSTANTS="trtllm_host_us=2000,$seq,0;triton_stream_seq_us=0" "$BIN" validate --serving "$CSV" --split fit --stack trtllm --json 2>/dev/null | summary fit
done
echo "## 2. Triton online rows at QPS INF (500 requests queued at once), H100, BF16, 202/214: the engine's batch and token limits"
echo "##    measured (dev rows 613/614, 523/524): 8B TTFT 1657 ms ITL 21 ms; 70B TP4 TTFT 4482 ms ITL 50 ms"
for m in "llama-3.1-8b 1" "llama-3.1-70b 4"; do
  set -- $m
  for mb in 2048 256 128; do
    for mnt in 8192 2048; do
      echo -n "$1 tp$2 max_batch_size=$mb max_num_tokens=$mnt: "
      "$BIN" serve --model "$1" --system dgx-h100 --gpus "$2" --tp "$2" --precision bf16 --stack trtllm --offline 500 \
        --input-len 202 --output-len 214 --cuda-graphs off --frontend-ms 4 --max-batch "$mb" --token-budget "$mnt" \
        --iteration-spread off --json 2>/dev/null |
        python3 -c 'import json,sys; v=json.load(sys.stdin); print("TTFT %.0f ms  ITL %.1f ms  mean batch %.0f" % (v["ttft_s"]["mean"]*1e3, v["tpot_s"]["mean"]*1e3, v["batch"]["mean"]))'
    done
  done
done
echo "## 3. RTX PRO 6000 (NVFP4, v1.0) offline output tokens/s by pipeline depth: the batch limit per micro-batch and CUDA graphs"
echo "##    measured (dev rows 40-79): PP8 128/128 11881, 1000/1000 8166; PP4 128/128 9641, 1000/1000 5961"
for pp in 4 8; do
  for io in "128 128 30000" "1000 1000 3000"; do
    set -- $io
    for mb in 2048 $((2048 / pp)); do
      for g in decode off; do
        echo -n "pp$pp $1/$2 max_batch_size=$mb cuda_graphs=$g: "
        "$BIN" serve --model llama-3.1-70b --system rtx-pro-6000-bse-pcie-8x --gpus "$pp" --tp 1 --pp "$pp" --precision fp4 --stack trtllm \
          --offline "$3" --input-len "$1" --output-len "$2" --cuda-graphs "$g" --max-batch "$mb" --iteration-spread off --json 2>/dev/null |
          python3 -c 'import json,sys; v=json.load(sys.stdin); print("%.0f output tokens/s" % v["throughput"]["output_tokens_per_s"])'
      done
    done
  done
done
