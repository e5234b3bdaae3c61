#!/usr/bin/env bash
# What-ifs for the online TensorRT-LLM rows (Triton, v0.14, BF16; issue 20). Nothing here is
# fitted or shipped: each block runs `gpuplan serve` the way `validate --serving` runs an online
# row (stack trtllm, bf16, no CUDA graphs, no iteration spread, Triton front end 4 ms =
# cost::fitted::TRITON_FRONTEND_US) with one thing changed, and prints what the published
# columns give beside it.
#   1. Context capacity (fit configurations, QPS INF, 467/16): the run's duration and the mean
#      time of an iteration that carries prefill, against the published duration (500 / rate, the
#      rate = Total Token Tput / 483) and mean ITL (at 467/16 nearly every decode iteration also
#      carries max_num_tokens of prompts, so the mean ITL is close to that iteration's time).
#   2. Variable output lengths (test configurations, 202/214 at QPS INF): fixed lengths (what
#      validate assumes) against lognormal lengths of the same means. The published columns
#      (online-residuals-output.txt: a 450-600 token tail after the last arrival at 16-32 QPS,
#      about 245 in flight at INF) say these runs had variable lengths; their distribution is not
#      published, so the sigma (0.5) is an illustration, not a fit, and these are test configs:
#      nothing is chosen from this block. It prints the rate, TTFT, the request-mean TPOT
#      (validate's ITL) and the token-weighted ITL (every gap of every request pooled).
#   3. A client concurrency cap of 256 at INF (TTFT from each request's send), test configs.
#   4. Clocks held at the H100 / H200 profiles' sustained-GEMM clock (a catalog copy in a temp dir),
#      online and offline H100/H200 rows, fit and test: the power model's per-iteration averaging.
#   5. Poisson against constant-rate arrivals (70B TP 4, dgx-h100, 467/256 at 16 QPS, a fit
#      configuration; published TTFT 175 ms, ITL 66 ms), and the KV room of the 70B TP 4 runs at
#      INF (whether the capacity policy, GUARANTEED_NO_EVICT or MAX_UTILIZATION, can matter).
# Usage: scripts/serving_online_what_ifs.sh [path/to/gpuplan]
# Recorded output: calibration/runs/serving-trtllm/online-what-ifs-output.txt
set -euo pipefail
BIN=${1:-target/debug/gpuplan}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
echo "# $(date -u +%F) $(git rev-parse --short HEAD) $BIN"
run() { # model tp system isl osl extra... ; prints rate, mean TTFT, mean TPOT, token-weighted ITL, prefill-iteration mean
  local model=$1 tp=$2 sys=$3 isl=$4 osl=$5; shift 5
  "$BIN" serve --model "$model" --system "$sys" --gpus "$tp" --tp "$tp" --precision bf16 --stack trtllm --offline 500 \
    --input-len "$isl" --output-len "$osl" --frontend-ms 4 --cuda-graphs off --iteration-spread off \
    --requests-csv "$TMP/r.csv" --iterations-csv "$TMP/i.csv" --force "$@" >/dev/null
  python3 - "$TMP/r.csv" "$TMP/i.csv" <<'EOF'
import csv, sys
r = list(csv.DictReader(open(sys.argv[1])))
it = list(csv.DictReader(open(sys.argv[2])))
dur = max(float(x["finish_s"]) for x in r)
many = [x for x in r if int(x["output_len"]) > 1]
tpot = sum(float(x["tpot_s"]) for x in many) / len(many)
tw = sum(float(x["finish_s"]) - float(x["first_token_s"]) for x in many) / sum(int(x["output_len"]) - 1 for x in many)
pre = [float(x["time_s"]) for x in it if int(x["prefill_tokens"]) > 4096]
print(f"duration {dur:6.2f} s  rate {len(r) / dur:6.2f} req/s  TTFT {1e3 * sum(float(x['ttft_s']) for x in r) / len(r):7.1f} ms  "
      f"TPOT {1e3 * tpot:6.1f} ms  token-weighted ITL {1e3 * tw:6.1f} ms  iterations with > 4096 prompt tokens: {len(pre)}, mean {1e3 * sum(pre) / max(len(pre), 1):6.1f} ms")
EOF
}
echo "== 1. context capacity, QPS INF, 467/16 (fit configurations); published: duration = 500 / rate, mean ITL"
for c in "llama-3.1-8b 1 dgx-h100 6.30 193" "llama-3.1-8b 1 hgx-h200 6.19 190" "llama-3.1-70b 4 dgx-h100 17.61 548" "llama-3.1-70b 4 hgx-h200 17.51 546"; do
  set -- $c
  printf '%-14s %-9s published duration %5.2f s, ITL %3d ms | model: ' "$1" "$3" "$4" "$5"
  run "$1" "$2" "$3" 467 16
done
echo "== 2. 202/214 at QPS INF (test configurations; illustration only): published rate / TTFT / ITL"
for c in "llama-3.1-8b 1 dgx-h100 38.74 1657 21" "llama-3.1-70b 4 dgx-h100 16.17 4482 50"; do
  set -- $c
  echo "$1 $3: published rate $4 req/s, TTFT $5 ms, ITL $6 ms"
  printf '  fixed 202/214:                           '; run "$1" "$2" "$3" 202 214
  printf '  lognormal 202:0.5 / 214:0.5 (sigma assumed): '; run "$1" "$2" "$3" lognormal:202:0.5 lognormal:214:0.5
done
echo "== 3. client concurrency cap 256 at QPS INF, fixed 202/214 (TTFT from each send)"
printf '  llama-3.1-8b dgx-h100:  '; run llama-3.1-8b 1 dgx-h100 202 214 --max-concurrency 256
printf '  llama-3.1-70b dgx-h100: '; run llama-3.1-70b 4 dgx-h100 202 214 --max-concurrency 256
echo "== 4. clocks held at the profile's sustained-GEMM clock (catalog copy: the H100 / H200 profiles' max_clock_mhz"
echo "   set to their gemm_clock_mhz), i.e. no boost from the lower average power of an iteration's communication"
echo "   and memory-bound phases; online and offline H100/H200 rows, fit and test (a what-if: not shipped)"
CAT="$TMP/cat"
mkdir -p "$CAT"
for d in tests models scenarios assets; do ln -s "$PWD/$d" "$CAT/$d"; done
cp -r calibration "$CAT/calibration"
for p in h100-sxm-1x h200-sxm-2x; do
  f="$CAT/calibration/profiles/$p/profile.toml"
  clock=$(sed -n 's/^gemm_clock_mhz = //p' "$f" | head -1)
  sed -i "s/^max_clock_mhz = .*/max_clock_mhz = $clock/" "$f"
done
BINABS=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
score() { # dir split kind [system]
  (cd "$1" && "$BINABS" validate --serving tests/data/published/trtllm_inference_dev.csv --stack trtllm --split "$2" --scenario-kind "$3" ${4:+--only-system $4} --json) |
    python3 -c 'import json,sys; v=json.load(sys.stdin); print("  ".join("%s %.2f%% (bias %+.1f%%, n=%d)" % (s["metric"], s["all"]["mape_pct"], s["all"]["bias_pct"], s["all"]["n"]) for s in v["summary"] if s["all"] and s["split"] != "all"))'
}
for sp in fit test; do
  echo "  online $sp, shipped: $(score "$PWD" $sp online)"
  echo "  online $sp, held:    $(score "$CAT" $sp online)"
done
for sys in dgx-h100 hgx-h200; do
  for sp in fit test; do
    echo "  offline $sys $sp, shipped: $(score "$PWD" $sp offline $sys)"
    echo "  offline $sys $sp, held:    $(score "$CAT" $sp offline $sys)"
  done
done
for d in "$PWD" "$CAT"; do
  printf '  70B TP 4 prefill, 17 x 467 tokens, dgx-h100 (%s): ' "$([ "$d" = "$PWD" ] && echo shipped || echo held)"
  (cd "$d" && "$BINABS" predict --model llama-3.1-70b --system dgx-h100 --gpus 4 --tp 4 --precision bf16 --stack trtllm --mode prefill --batch 17 --seq 467) | grep -E "step time|power" | tr -s ' ' | tr '\n' ';'
  echo
done
echo "== 5. arrivals: Poisson vs constant rate, 70B TP 4 dgx-h100, 467/256 at 16 QPS (500 requests; published TTFT 175 ms, ITL 66 ms)"
for arr in poisson constant; do
  printf '  %-8s ' "$arr"
  "$BIN" serve --model llama-3.1-70b --system dgx-h100 --gpus 4 --tp 4 --precision bf16 --stack trtllm --qps 16 --duration-s 31.25 \
    --input-len 467 --output-len 256 --arrival "$arr" --frontend-ms 4 --cuda-graphs off --iteration-spread off | grep -E "^  (TTFT|TPOT)" | tr -s ' ' | tr '\n' ';'
  echo
done
echo "== 5b. KV room at QPS INF, 70B TP 4, 467/256 (500 x 723 = 361,500 tokens wanted at once)"
for sys in dgx-h100 hgx-h200; do
  printf '  %-9s ' "$sys"
  "$BIN" serve --model llama-3.1-70b --system "$sys" --gpus 4 --tp 4 --precision bf16 --stack trtllm --offline 500 --input-len 467 --output-len 256 \
    --frontend-ms 4 --cuda-graphs off --iteration-spread off | grep -E "colocated pool|KV cache .*occupancy" | sed 's/.*chunked prefill off; //' | tr -s ' ' | tr '\n' ';'
  echo
done
