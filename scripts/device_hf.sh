#!/usr/bin/env bash
# The driver of the HF run set (issues 18 and 19): Hugging Face transformers models built from
# config.json (scenarios/workloads/hf_configs/), timed by scenarios/workloads/hf_train.py and recorded
# by `gpuplan measure`; plus the microbenchmarks of scenarios/workloads/hf_microbench.py.
# Runs on the device machine from the repository root (one GPU: nvidia-h100-x1 or nvidia-h200).
#
#   scripts/device_hf.sh PHASE... OUTDIR
#     PHASE: smoke        tiny configs, every mode and stack (records in OUTDIR/smoke.jsonl)
#            micro        hf_microbench.py, all parts (CSVs in OUTDIR/micro/)
#            micro-quick  the same on a few shapes
#            micro-host   its host-overhead part only
#            rows=A-B     the table's rows with ids A..B (inclusive) for this GPU kind, in table order
#            ids=A,B,...  those rows
#   BUDGET_S (default 540): no row starts unless its estimate fits before this many seconds after
#   the driver started; a skipped row is printed as `skip hf-NNN`.
#
# Needs: .devbin/gpuplan (the current binary, carried), .whl/torchao-*.whl (carried; installed into
# /tmp/site for the fp8 rows). Writes OUTDIR/hf.jsonl (records, appended), OUTDIR/smoke.jsonl,
# OUTDIR/env.txt and OUTDIR/logs.tgz (every run's full output, the microbenchmark's console).
#
# The split (calibration/runs/hf/SPLIT.md, fixed before any run): every run of qwen3-1.7b and of
# qwen3-moe-s-e32k4 is `test`; any other run is `test` when its id is divisible by 3, else `fit`.
set -u
export PYTHONUNBUFFERED=1 CUDA_DEVICE_ORDER=PCI_BUS_ID TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
G=${G:-.devbin/gpuplan}
W=${W:-scenarios/workloads}  # the workload scripts (a carried copy: W=.devbin/NAME)
C=${C:-scenarios/workloads/hf_configs}  # the configs (a carried copy: C=.devbin/NAME/hf_configs)
OUTDIR=${*: -1}
PHASES=("${@:1:$#-1}")
mkdir -p "$OUTDIR/logs" "$OUTDIR/micro"
REC=$OUTDIR/hf.jsonl
SMOKE=$OUTDIR/smoke.jsonl
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-540}

if ls .whl/torchao-*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi

GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$GPU_NAME" in
  *H100*) KIND=h100; SYS=dgx-h100 ;;
  *H200*) KIND=h200; SYS=hgx-h200 ;;
  *) echo "unknown GPU: $GPU_NAME"; exit 2 ;;
esac
{
  date -u +%FT%TZ
  echo "gpu=$GPU_NAME kind=$KIND system=$SYS"
  nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm --format=csv
  python3 -c "import torch, transformers, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), 'transformers', transformers.__version__)"
  python3 -c "import torchao; print('torchao', torchao.__version__)" 2>&1 | tail -1
  nproc; uname -r
  $G --version 2>&1 | head -1
} >>"$OUTDIR/env.txt" 2>&1
cat "$OUTDIR/env.txt"

# id kind mode config mb|batch seq|kv_len grad_accum recompute variant steps warmup est_s
# variant: eager | compile | fp8 (torchao float8, tensorwise, under torch.compile) | fp8row (the same,
# torchao's rowwise recipe) | bf16p (bf16 params, no autocast) | loop | generate (decode APIs).
# est_s: the driver's time estimate (skip guard).
read -r -d '' TABLE <<'EOF'
001 h100 train   tinyllama-1.1b           4  2048  1 none eager    10 3  30
002 h100 train   llama-3.2-1b             2  4096  1 none eager    10 3  30
003 h100 train   llama-3.2-1b             1  16384 1 none eager    8  3  40
004 h100 train   llama-3.2-1b             1  32768 1 none eager    6  2  40
005 h100 train   llama-3.2-1b             1  32768 1 full eager    6  2  50
006 h100 train   llama-3.2-3b             1  2048  1 none eager    10 3  35
007 h100 train   llama-3.2-3b             1  4096  1 none eager    8  3  40
008 h100 train   llama-3.2-3b             2  4096  1 full eager    8  3  50
009 h100 train   qwen3-1.7b               1  4096  1 none eager    10 3  35
010 h100 train   qwen3-1.7b               2  8192  1 full eager    8  3  50
011 h100 train   llama-3.2-1b             2  4096  1 none compile  10 3  120
012 h100 train   llama-3.2-3b             1  2048  1 none compile  10 3  100
013 h100 train   qwen3-1.7b               1  4096  1 none compile  10 3  100
014 h100 train   llama-3.2-1b             2  4096  1 none fp8      10 3  100
015 h100 train   llama-3.2-3b             1  2048  1 none fp8      10 3  110
016 h100 prefill llama-3.2-1b             1  32768 0 none eager    8  3  30
017 h100 prefill llama-3.2-1b             8  4096  0 none eager    8  3  30
018 h100 prefill llama-3.2-3b             4  8192  0 none eager    8  3  30
019 h100 prefill qwen3-1.7b               16 2048  0 none eager    8  3  30
020 h100 decode  llama-3.2-1b             1  512   0 none loop     60 10 25
021 h100 decode  llama-3.2-1b             1  32768 0 none loop     60 10 25
022 h100 decode  llama-3.2-1b             64 4096  0 none loop     60 10 30
023 h100 decode  llama-3.2-1b             64 16384 0 none loop     40 10 40
024 h100 decode  llama-3.2-3b             1  4096  0 none loop     60 10 25
025 h100 decode  llama-3.2-3b             32 8192  0 none loop     40 10 35
026 h100 decode  qwen3-1.7b               16 4096  0 none loop     60 10 30
027 h100 decode  llama-3.2-1b             1  512   0 none generate 60 10 25
028 h100 decode  llama-3.2-1b             1  32768 0 none generate 60 10 25
029 h100 decode  llama-3.2-1b             64 4096  0 none generate 60 10 30
030 h100 decode  llama-3.2-3b             8  8192  0 none generate 60 10 30
031 h100 train   mixtral-s                2  4096  1 none eager    8  3  40
032 h100 train   mixtral-s                8  2048  1 none eager    8  3  45
033 h100 train   qwen3-moe-s              2  4096  1 none eager    8  3  40
034 h100 train   qwen3-moe-s              8  4096  1 none eager    8  3  50
035 h100 train   qwen3-moe-s-e32k4        2  4096  1 none eager    8  3  40
036 h100 train   qwen3-moe-s-e32k8-w1536  2  4096  1 none eager    8  3  40
037 h100 train   qwen3-moe-s-e128k8-l3    2  4096  1 none eager    8  3  40
038 h100 train   deepseek-v3-s            2  4096  1 none eager    8  3  40
039 h100 train   deepseek-v3-s            1  16384 1 full eager    8  3  50
040 h100 train   qwen3-moe-s              2  4096  1 none bf16p    8  3  40
041 h100 prefill mixtral-s                8  4096  0 none eager    8  3  30
042 h100 prefill qwen3-moe-s              8  4096  0 none eager    8  3  30
043 h100 prefill deepseek-v3-s            4  8192  0 none eager    8  3  30
044 h100 prefill qwen3-moe-s-e128k8-l3    16 2048  0 none eager    8  3  30
045 h100 train   qwen3-moe-s              2  4096  1 none compile  8  3  100
046 h200 train   llama-3.2-1b             2  4096  1 none eager    10 3  30
047 h200 train   llama-3.2-3b             1  4096  1 none eager    8  3  40
048 h200 train   llama-3.2-3b             4  4096  1 none eager    8  3  45
049 h200 train   llama-3.2-1b             1  32768 1 none eager    6  2  45
050 h200 train   qwen3-1.7b               2  4096  1 none eager    10 3  35
051 h200 train   llama-3.2-1b             2  4096  1 none compile  10 3  80
052 h200 train   llama-3.2-1b             2  4096  1 none fp8      10 3  100
053 h200 prefill llama-3.2-3b             4  8192  0 none eager    8  3  30
054 h200 decode  llama-3.2-1b             1  512   0 none loop     60 10 25
055 h200 decode  llama-3.2-1b             64 16384 0 none loop     40 10 40
056 h200 decode  llama-3.2-1b             1  512   0 none generate 60 10 25
057 h200 train   qwen3-moe-s              2  4096  1 none eager    8  3  40
058 h200 train   mixtral-s                2  4096  1 none eager    8  3  40
059 h200 train   deepseek-v3-s            2  4096  1 none eager    8  3  40
060 h200 prefill qwen3-moe-s              8  4096  0 none eager    8  3  30
061 h200 train   qwen3-moe-s-e32k4        8  4096  1 none eager    8  3  50
062 h100 train   llama-3.2-1b             1  8192  1 none eager    10 3  35
063 h100 train   tinyllama-1.1b           2  4096  1 none eager    10 3  35
064 h100 train   llama-3.2-3b             2  2048  1 full eager    8  3  45
065 h100 prefill llama-3.2-3b             2  16384 0 none eager    8  3  30
066 h100 prefill tinyllama-1.1b           4  8192  0 none eager    8  3  30
067 h100 decode  llama-3.2-3b             4  16384 0 none loop     40 10 35
068 h100 decode  tinyllama-1.1b           32 2048  0 none generate 60 10 30
069 h100 decode  qwen3-1.7b               1  1024  0 none loop     60 10 25
070 h100 train   mixtral-s                4  2048  1 none eager    8  3  40
071 h100 prefill qwen3-moe-s-e32k8-w1536  4  4096  0 none eager    8  3  30
072 h100 train   qwen3-1.7b               1  2048  1 none eager    10 3  30
073 h100 train   llama-3.2-1b             4  2048  1 none compile  10 3  90
074 h100 train   llama-3.2-3b             1  4096  1 none compile  10 3  110
075 h100 train   tinyllama-1.1b           2  4096  1 none fp8      10 3  110
077 h100 prefill mixtral-s                4  4096  0 none eager    8  3  30
078 h100 prefill deepseek-v3-s            8  4096  0 none eager    8  3  30
079 h100 prefill qwen3-moe-s-e128k8-l3    8  4096  0 none eager    8  3  30
081 h100 decode  llama-3.2-1b             8  8192  0 none loop     60 10 25
076 h100 train   qwen3-1.7b               2  2048  1 none compile  10 3  120
080 h100 train   llama-3.2-1b             4  2048  1 none fp8      10 3  190
082 h100 train   qwen3-moe-s-e32k8-w1536  1  4096  1 none eager    8  3  40
083 h100 prefill qwen3-moe-s              2  8192  0 none eager    8  3  30
084 h200 train   tinyllama-1.1b           4  2048  1 none eager    10 3  30
085 h200 train   llama-3.2-1b             1  8192  1 none eager    10 3  35
086 h200 train   llama-3.2-3b             2  4096  1 none eager    8  3  45
087 h200 train   qwen3-1.7b               1  4096  1 none compile  10 3  100
088 h200 prefill llama-3.2-1b             4  8192  0 none eager    8  3  30
089 h200 decode  llama-3.2-3b             16 8192  0 none loop     40 10 30
090 h200 decode  llama-3.2-1b             1  4096  0 none generate 60 10 25
091 h200 decode  qwen3-1.7b               4  2048  0 none loop     60 10 25
092 h200 decode  llama-3.2-1b             32 32768 0 none loop     40 10 40
093 h200 decode  tinyllama-1.1b           8  8192  0 none generate 60 10 25
094 h100 train   mixtral-s-e16k4-w2816    2  4096  1 none eager    8  3  40
095 h100 prefill mixtral-s-e16k4-w2816    4  4096  0 none eager    8  3  30
096 h100 train   qwen3-moe-s-e96k6-w512   2  2048  1 none eager    8  3  40
097 h100 prefill qwen3-moe-s-e96k6-w512   8  4096  0 none eager    8  3  30
098 h100 train   deepseek-v3-s-e64k6      1  4096  1 none eager    8  3  40
099 h100 prefill deepseek-v3-s-e64k6      4  4096  0 none eager    8  3  30
100 h100 prefill mixtral-s                16 2048  0 none eager    8  3  30
101 h100 train   qwen3-moe-s              4  2048  1 none eager    8  3  40
102 h200 train   mixtral-s-e16k4-w2816    2  4096  1 none eager    8  3  40
103 h200 prefill qwen3-moe-s-e96k6-w512   8  4096  0 none eager    8  3  30
104 h200 train   deepseek-v3-s-e64k6      2  4096  1 none eager    8  3  40
105 h200 prefill mixtral-s-e16k4-w2816    8  4096  0 none eager    8  3  30
106 h100 train   llama-3.2-3b             2  4096  1 none compile  8  3  150
108 h100 decode  llama-3.2-1b             4  2048  0 none loop     60 10 25
109 h100 decode  llama-3.2-1b             4  2048  0 none generate 60 10 25
110 h100 decode  llama-3.2-3b             64 4096  0 none loop     40 10 40
111 h100 decode  tinyllama-1.1b           16 16384 0 none generate 40 10 35
112 h100 decode  qwen3-1.7b               32 4096  0 none generate 40 10 30
113 h100 decode  llama-3.2-3b             1  1024  0 none generate 60 10 25
107 h100 train   llama-3.2-3b             2  2048  1 none compile  8  3  110
114 h100 decode  llama-3.2-1b             1  512   0 none loop     60 10 25
115 h100 decode  llama-3.2-1b             1  512   0 none generate 60 10 25
116 h100 decode  llama-3.2-1b             1  512   0 none loop     60 10 35
117 h100 decode  llama-3.2-3b             1  1024  0 none generate 60 10 35
118 h100 decode  llama-3.2-1b             4  2048  0 none loop     60 10 35
119 h100 decode  qwen3-1.7b               4  2048  0 none loop     60 10 35
120 h100 decode  llama-3.2-1b             1  512   0 none generate 60 10 35
121 h100 decode  llama-3.2-3b             8  8192  0 none loop     60 10 40
122 h100 decode  tinyllama-1.1b           1  4096  0 none loop     60 10 35
123 h100 decode  llama-3.2-1b             64 4096  0 none loop     40 10 40
124 h100 decode  llama-3.2-1b             1  512   0 none loop     60 10 35
125 h100 decode  llama-3.2-3b             32 8192  0 none generate 40 10 40
126 h100 decode  qwen3-1.7b               1  1024  0 none generate 60 10 35
127 h100 decode  llama-3.2-1b             1  512   0 none loop     60 10 35
128 h100 decode  llama-3.2-1b             1  512   0 none loop     60 10 35
129 h100 decode  llama-3.2-3b             1  1024  0 none generate 60 10 35
130 h100 decode  llama-3.2-1b             4  2048  0 none loop     60 10 35
131 h100 decode  qwen3-1.7b               4  2048  0 none loop     60 10 35
132 h100 decode  llama-3.2-1b             1  512   0 none generate 60 10 35
133 h100 decode  llama-3.2-3b             8  8192  0 none loop     60 10 40
134 h100 decode  tinyllama-1.1b           1  4096  0 none loop     60 10 35
135 h100 decode  llama-3.2-1b             64 4096  0 none loop     40 10 40
136 h100 decode  llama-3.2-1b             1  512   0 none loop     60 10 35
137 h100 decode  llama-3.2-3b             16 16384 0 none generate 40 10 40
138 h100 decode  tinyllama-1.1b           8  8192  0 none generate 60 10 35
139 h100 decode  llama-3.2-1b             1  512   0 none loop     60 10 35
140 h200 train   qwen3-1.7b               1  2048  1 none eager    10 3  30
141 h200 train   llama-3.2-1b             1  2048  1 none eager    10 3  30
142 h200 train   tinyllama-1.1b           1  2048  1 none eager    10 3  30
143 h200 train   qwen3-1.7b               1  1024  1 none eager    10 3  30
144 h200 train   llama-3.2-3b             1  2048  1 none eager    10 3  35
145 h200 train   qwen3-1.7b               2  2048  1 none eager    10 3  35
146 h200 train   llama-3.2-1b             1  1024  1 none eager    10 3  30
147 h100 decode  llama-3.2-1b             2  8192  0 none loop     60 10 35
148 h100 decode  llama-3.2-3b             4  2048  0 none generate 60 10 35
149 h100 decode  qwen3-1.7b               8  8192  0 none loop     60 10 35
150 h100 decode  tinyllama-1.1b           4  1024  0 none generate 60 10 35
151 h100 decode  llama-3.2-1b             16 1024  0 none generate 60 10 35
152 h100 decode  llama-3.2-3b             2  16384 0 none loop     60 10 35
153 h100 decode  qwen3-1.7b               1  16384 0 none generate 60 10 35
154 h100 decode  llama-3.2-1b             32 2048  0 none loop     60 10 35
155 h100 decode  tinyllama-1.1b           2  2048  0 none loop     60 10 35
156 h100 decode  llama-3.2-3b             1  32768 0 none generate 60 10 35
157 h100 decode  qwen3-1.7b               2  1024  0 none loop     60 10 35
158 h100 decode  llama-3.2-1b             8  512   0 none generate 60 10 35
159 h200 decode  llama-3.2-1b             2  8192  0 none loop     60 10 35
160 h200 decode  llama-3.2-3b             4  2048  0 none generate 60 10 35
161 h200 decode  qwen3-1.7b               8  8192  0 none loop     60 10 35
162 h200 decode  tinyllama-1.1b           4  1024  0 none generate 60 10 35
163 h200 decode  llama-3.2-1b             8  16384 0 none generate 60 10 35
164 h200 decode  llama-3.2-3b             2  16384 0 none loop     60 10 35
165 h200 decode  qwen3-1.7b               1  16384 0 none generate 60 10 35
166 h200 decode  llama-3.2-3b             8  4096  0 none loop     60 10 35
167 h200 decode  tinyllama-1.1b           2  2048  0 none loop     60 10 35
168 h200 decode  llama-3.2-1b             1  1024  0 none generate 60 10 35
169 h200 decode  qwen3-1.7b               16 2048  0 none loop     60 10 35
170 h100 train   qwen3-1.7b               1  2048  1 none eager    30 5  40
171 h100 train   qwen3-1.7b               1  1024  1 none eager    40 5  40
172 h100 train   llama-3.2-1b             1  1024  1 none eager    40 5  35
173 h200 train   qwen3-1.7b               1  1536  1 none eager    20 5  35
174 h200 train   llama-3.2-1b             1  1536  1 none eager    20 5  30
175 h200 train   tinyllama-1.1b           1  1024  1 none eager    20 5  30
176 h200 train   llama-3.2-3b             1  1024  1 none eager    20 5  35
177 h200 train   qwen3-1.7b               1  512   1 none eager    20 5  35
178 h200 train   tinyllama-1.1b           2  1024  1 none eager    20 5  30
179 h200 train   llama-3.2-1b             2  2048  1 none eager    20 5  30
180 h200 train   qwen3-1.7b               1  2048  1 none eager    20 5  38
181 h200 train   llama-3.2-1b             1  2048  1 none eager    20 5  34
182 h200 train   tinyllama-1.1b           1  2048  1 none eager    20 5  34
183 h200 train   llama-3.2-3b             1  1536  1 none eager    20 5  38
184 h200 train   qwen3-1.7b               2  1024  1 none eager    20 5  38
185 h200 train   llama-3.2-1b             2  1024  1 none eager    20 5  34
186 h200 train   tinyllama-1.1b           1  1536  1 none eager    20 5  34
187 h200 train   llama-3.2-3b             2  1024  1 none eager    20 5  38
188 h200 train   qwen3-1.7b               1  1024  1 none eager    20 5  38
189 h200 train   llama-3.2-1b             1  1024  1 none eager    20 5  34
190 h100 decode  llama-3.2-1b             4  4096  0 none loop     60 10 35
191 h100 decode  llama-3.2-3b             2  8192  0 none generate 60 10 40
192 h100 decode  qwen3-1.7b               2  4096  0 none loop     60 10 35
193 h100 decode  tinyllama-1.1b           8  2048  0 none generate 60 10 35
194 h100 decode  llama-3.2-1b             8  16384 0 none loop     60 10 35
195 h100 decode  llama-3.2-3b             1  8192  0 none loop     60 10 35
196 h100 train   llama-3.2-1b             3  2048  1 none eager    10 3  25
197 h100 train   tinyllama-1.1b           1  8192  1 none eager    10 3  25
198 h100 train   qwen3-1.7b               4  1024  1 none eager    10 3  25
199 h100 train   llama-3.2-3b             1  3072  1 none eager    8  3  30
200 h100 train   tinyllama-1.1b           1  32768 1 full eager    6  2  35
201 h100 train   qwen3-1.7b               1  32768 1 full eager    6  2  35
202 h100 prefill llama-3.2-1b             1  65536 0 none eager    6  2  30
203 h100 prefill qwen3-1.7b               2  16384 0 none eager    8  3  30
204 h100 decode  llama-3.2-3b             32 512   0 none loop     40 10 25
205 h100 decode  tinyllama-1.1b           1  32768 0 none generate 60 10 25
206 h100 decode  qwen3-1.7b               8  4096  0 none generate 60 10 25
207 h100 decode  llama-3.2-1b             32 4096  0 none loop     40 10 25
208 h100 train   qwen3-moe-s-e96k6-w512   4  2048  1 none eager    8  3  35
210 h100 train   llama-3.2-1b             4  8192  1 none compile  8  3  90
209 h100 train   llama-3.2-1b             1  8192  1 none fp8      10 3  150
211 h200 train   llama-3.2-3b             3  2048  1 none eager    8  3  30
212 h200 train   qwen3-1.7b               1  8192  1 none eager    10 3  30
213 h200 train   llama-3.2-1b             4  4096  1 none eager    10 3  30
214 h200 train   qwen3-1.7b               1  32768 1 full eager    6  2  40
215 h200 train   llama-3.2-3b             1  16384 1 full eager    6  2  40
216 h200 prefill llama-3.2-3b             1  65536 0 none eager    6  2  30
217 h200 prefill tinyllama-1.1b           2  32768 0 none eager    8  3  30
218 h200 decode  llama-3.2-1b             32 32768 0 none generate 40 10 35
219 h200 decode  llama-3.2-3b             8  512   0 none loop     60 10 25
220 h200 decode  qwen3-1.7b               1  32768 0 none loop     60 10 25
221 h200 decode  tinyllama-1.1b           32 4096  0 none generate 40 10 25
222 h200 train   mixtral-s-e16k4-w2816    4  2048  1 none eager    8  3  35
225 h200 train   llama-3.2-1b             1  8192  1 none fp8      10 3  110
223 h200 train   tinyllama-1.1b           4  4096  1 none compile  8  3  90
224 h200 train   llama-3.2-1b             4  2048  1 none fp8row   8  3  120
226 h100 train   llama-3.2-3b             2  2048  1 none fp8      10 3  110
227 h100 train   qwen3-1.7b               2  2048  1 none fp8row   8  3  120
228 h100 prefill deepseek-v3-s            1  16384 0 none eager    6  2  30
229 h100 prefill qwen3-moe-s-e32k8-w1536  4  4096  0 none eager    8  3  30
230 h100 prefill llama-3.2-3b             2  16384 0 none eager    6  2  30
231 h100 prefill mixtral-s                4  4096  0 none eager    8  3  30
232 h100 train   tinyllama-1.1b           2  4096  1 none compile  8  3  90
250 h100 train   gemma-2-2b               1  2048  1 none eager    8  3  40
251 h100 train   gemma-3-1b               2  2048  1 none eager    8  3  35
252 h100 train   phi-3-mini-4k            1  2048  1 none eager    8  3  40
253 h100 train   olmo-2-1b                2  2048  1 none eager    10 3  30
254 h100 prefill gemma-2-2b               1  8192  0 none eager    8  3  25
255 h100 prefill gemma-3-1b               1  8192  0 none eager    8  3  25
256 h100 prefill phi-3-mini-4k            2  4096  0 none eager    8  3  25
257 h100 prefill olmo-2-1b                2  4096  0 none eager    8  3  25
258 h100 decode  gemma-2-2b               1  4096  0 none loop     60 10 25
259 h100 decode  gemma-3-1b               4  4096  0 none loop     60 10 25
260 h100 decode  phi-3-mini-4k            4  2048  0 none loop     60 10 25
261 h100 decode  olmo-2-1b                1  2048  0 none loop     60 10 25
262 h100 train   olmo-2-1b                2  2048  1 none compile  8  3  120
263 h100 train   gemma-2-2b               2  2048  1 none eager    8  3  40
264 h100 decode  gemma-2-2b               4  2048  0 none loop     60 10 25
265 h100 decode  olmo-2-1b                4  4096  0 none loop     60 10 25
270 h200 train   llama-3.2-1b             3  3072  1 none eager    10 3  30
271 h200 train   tinyllama-1.1b           8  1024  1 none eager    10 3  30
272 h200 train   qwen3-1.7b               2  4096  1 none eager    10 3  35
273 h200 train   llama-3.2-3b             1  12288 1 full eager    6  2  40
274 h200 train   deepseek-v3-s            2  2048  1 none eager    8  3  40
275 h200 train   qwen3-moe-s-e32k8-w1536  2  4096  1 none eager    8  3  40
276 h200 prefill qwen3-1.7b               1  32768 0 none eager    6  2  30
277 h200 prefill llama-3.2-1b             4  8192  0 none eager    8  3  30
278 h200 prefill mixtral-s                2  8192  0 none eager    8  3  30
279 h200 decode  llama-3.2-3b             16 4096  0 none generate 40 10 30
280 h200 decode  qwen3-1.7b               4  16384 0 none loop     60 10 30
281 h200 decode  tinyllama-1.1b           64 1024  0 none loop     40 10 25
282 h200 train   qwen3-1.7b               2  2048  1 none compile  8  3  90
EOF

split_of() {  # id config
  # Rows 062 on were added after the hf-* stacks' constants were fitted (scripts/fit_hf.sh) and are
  # all held out (calibration/runs/hf/postfit.jsonl; rows 074 on: postfit-2.jsonl, measured after
  # the second fit, branch wt-torch; rows 084-093, the first H200 post-fit rows: postfit-3.jsonl,
  # measured after the third fit, branch wt-torch2; rows 094-105: postfit-moe.jsonl, issue 18's new
  # MoE shapes, branch wt-moecal, measured before its grouped-GEMM mechanism or any refit; they ran
  # as rows 084-095 and their raw logs keep those ids).
  # Rows 250-269 (branch wt-hffamilies, issue 19's new families: Gemma 2/3, Phi-3, OLMo-2),
  # fixed before their call (calibration/runs/raw/hffamilies-2026-11-25/README.md): `fit` when
  # the id is 1 more than a multiple of 3, `test` otherwise.
  if (( 10#$1 >= 250 && 10#$1 <= 269 )); then
    if (( 10#$1 % 3 == 1 )); then echo fit; else echo test; fi
    return
  fi
  if (( 10#$1 >= 62 )); then echo test; return; fi
  case "$2" in qwen3-1.7b|qwen3-moe-s-e32k4) echo test; return ;; esac
  if (( 10#$1 % 3 == 0 )); then echo test; else echo fit; fi
}

declare -A SMOKE_FAILED=()

# measure_one REC RUN_ID SPLIT mode cfg b s ga rc variant steps warm est
measure_one() {
  local rec=$1 rid=$2 split=$3 mode=$4 cfg=$5 b=$6 s=$7 ga=$8 rc=$9 variant=${10} steps=${11} warm=${12} est=${13}
  local now=$(( $(date +%s) - T0 ))
  if (( now + est > BUDGET_S )); then echo "skip $rid: ${est}s estimate does not fit (${now}s of ${BUDGET_S}s used)"; return; fi
  local to=$(( est * 3 )); (( to > BUDGET_S + 40 - now )) && to=$(( BUDGET_S + 40 - now ))
  local stack=torch-eager prec=bf16 true_stack
  local -a sa wa
  sa=(--model "$C/$cfg.json" --system "$SYS" --gpus 1 --tp 1 --pp 1 --dp 1 --zero 0 --mode "$mode")
  wa=(python3 "$W/hf_train.py" --config "$C/$cfg.json" --mode "$mode" --steps "$steps")
  case $mode in
    train)
      sa+=(--micro-batch "$b" --grad-accum "$ga" --global-batch $(( b * ga )) --seq "$s" --recompute "$rc")
      wa+=(--micro-batch "$b" --grad-accum "$ga" --seq "$s" --recompute "$rc")
      # Rows 180-195 take the host probe and speedometer in the run's own period (hf_train.py
      # --host-probe). Rows 196 on (post-fit 13) are taken as the project's held-out HF runs are:
      # no in-process host probe and no idle reading, so they are predicted with the profile's host.
      (( 10#${rid#hf-} >= 180 && 10#${rid#hf-} < 196 )) 2>/dev/null && wa+=(--host-probe)
      case $variant in
        eager) true_stack="hf-eager: fp32 master params + bf16 autocast, fused AdamW" ;;
        compile) stack=torch-compile; wa+=(--compile); true_stack="hf-compile: torch.compile(model), fp32 master params + bf16 autocast, fused AdamW" ;;
        fp8) stack=torch-compile; prec=fp8; wa+=(--fp8); true_stack="hf-compile-fp8: torchao convert_to_float8_training tensorwise (all nn.Linear but lm_head) under torch.compile, fp32 master params + bf16 autocast, fused AdamW" ;;
        fp8row) stack=torch-compile; prec=fp8; wa+=(--fp8 --fp8-recipe rowwise); true_stack="hf-compile-fp8-rowwise: torchao convert_to_float8_training rowwise (all nn.Linear but lm_head) under torch.compile, fp32 master params + bf16 autocast, fused AdamW" ;;
        bf16p) wa+=(--param-dtype bf16); true_stack="hf-eager with bf16 params (no fp32 master, no autocast; AdamW states bf16), fused AdamW" ;;
      esac ;;
    prefill)
      sa+=(--batch "$b" --seq "$s"); wa+=(--batch "$b" --seq "$s")
      true_stack="hf-eager prefill: bf16 weights, inference_mode, use_cache=True (DynamicCache), logits_to_keep=1" ;;
    decode)
      sa+=(--batch "$b" --kv-len "$s"); wa+=(--batch "$b" --kv-len "$s" --decode-api "$variant")
      # Rows 116-195 take the host probe in the run's own period (hf_train.py --host-probe); rows
      # 196 on do not (post-fit 13, taken as the held-out runs are).
      (( 10#${rid#hf-} >= 116 && 10#${rid#hf-} < 196 )) 2>/dev/null && wa+=(--host-probe)
      if [[ $variant == generate ]]; then
        true_stack="hf-eager decode via model.generate (greedy, prefilled random DynamicCache, step = one generate iteration read by a syncing LogitsProcessor)"
      else
        true_stack="hf-eager decode via a manual model() loop with a DynamicCache (prefilled random), argmax"
      fi ;;
  esac
  local -a spl=()
  [[ -n $split ]] && spl=(--split "$split")
  echo "=== $rid [$split] $mode $cfg b=$b s=$s ga=$ga rc=$rc $variant (t=${now}s, timeout ${to}s)"
  "$G" measure "${sa[@]}" --stack "$stack" --precision "$prec" --warmup "$warm" --timeout-s "$to" \
    --run-id "$rid" "${spl[@]}" --note "HF transformers from_config (SDPA, library-default experts path) on $KIND; true stack ${true_stack}; scenarios/workloads/hf_train.py" \
    --log "$OUTDIR/logs/$rid.log" --out "$rec" -- "${wa[@]}" >/dev/null 2>&1
  local rcode=$?
  local line
  line=$(grep -h -E '^(step=|summary|gpuplan-workload|config hf_stack)' "$OUTDIR/logs/$rid.log" 2>/dev/null | grep -E 'summary|oom' | tail -1)
  echo "    measure exit $rcode: ${line:-$(tail -2 "$OUTDIR/logs/$rid.log" 2>/dev/null | tr '\n' ' ' | cut -c1-300)}"
  return $rcode
}

run_rows() {  # filter: a function of the id
  local sel=$1
  while read -r id kind mode cfg b s ga rc variant steps warm est; do
    [[ -z ${id:-} ]] && continue
    $sel "$id" || continue
    if [[ $kind != "$KIND" ]]; then echo "skip hf-$id: a $kind row, this is $KIND"; continue; fi
    local tag="$mode-$variant"
    [[ $cfg == mixtral* || $cfg == qwen3-moe* || $cfg == deepseek* ]] && tag="moe-$tag"
    if [[ -n ${SMOKE_FAILED[$tag]:-} ]]; then echo "skip hf-$id: its smoke test ($tag) failed"; continue; fi
    measure_one "$REC" "hf-$id" "$(split_of "$id" "$cfg")" "$mode" "$cfg" "$b" "$s" "$ga" "$rc" "$variant" "$steps" "$warm" "$est"
  done <<<"$TABLE"
}

smoke() {
  # tag mode cfg b s ga rc variant steps warm est
  local n=0
  while read -r tag mode cfg b s ga rc variant steps warm est; do
    n=$(( n + 1 ))
    if ! measure_one "$SMOKE" "smoke-$n-$tag" "" "$mode" "$cfg" "$b" "$s" "$ga" "$rc" "$variant" "$steps" "$warm" "$est"; then
      SMOKE_FAILED[$tag]=1
      [[ $tag == train-fp8 ]] && SMOKE_FAILED[train-compile]=1
    fi
  done <<'EOF'
train-eager          train   smoke-llama       2 256 1 none eager    5  1 20
train-fp8            train   smoke-llama       2 256 1 none fp8      5  1 90
prefill-eager        prefill smoke-llama       2 256 0 none eager    5  1 20
decode-loop          decode  smoke-qwen3       2 256 0 none loop     12 2 20
decode-generate      decode  smoke-llama       2 256 0 none generate 12 2 20
moe-train-eager      train   smoke-qwen3-moe   2 256 1 none eager    5  1 25
moe-train-bf16p      train   smoke-deepseek-v3 2 256 1 full bf16p    5  1 25
moe-prefill-eager    prefill smoke-mixtral     2 256 0 none eager    5  1 20
moe-train-compile    train   smoke-mixtral     2 256 1 none compile  5  1 90
EOF
  # the recompute and deepseek smoke row stands for every eager MoE row too
  [[ -n ${SMOKE_FAILED[moe-train-bf16p]:-} ]] && SMOKE_FAILED[moe-train-eager]=1
}

for ph in "${PHASES[@]}"; do
  case $ph in
    smoke) smoke ;;
    micro|micro-quick|micro-host)
      q=(); [[ $ph == micro-quick ]] && q=(--quick); [[ $ph == micro-host ]] && q=(--parts host)
      echo "=== microbenchmarks ($ph, t=$(( $(date +%s) - T0 ))s)"
      timeout 300 python3 "$W/hf_microbench.py" --out-dir "$OUTDIR/micro" "${q[@]}" >>"$OUTDIR/logs/microbench-$KIND.log" 2>&1
      echo "    exit $?: $(grep -E '^part|^wrote|Error' "$OUTDIR/logs/microbench-$KIND.log" | tr '\n' ' ')" ;;
    rows=*)
      r=${ph#rows=}; lo=$((10#${r%-*})); hi=$((10#${r#*-}))
      in_range() { (( 10#$1 >= lo && 10#$1 <= hi )); }
      run_rows in_range ;;
    ids=*)
      IDS=",${ph#ids=},"
      in_ids() { [[ $IDS == *",$1,"* ]]; }
      run_rows in_ids ;;
    *) echo "unknown phase $ph" ;;
  esac
done
echo "=== done at t=$(( $(date +%s) - T0 ))s"
tar -C "$OUTDIR" -czf "$OUTDIR/logs.tgz" logs && rm -rf "$OUTDIR/logs"
