#!/usr/bin/env python3
"""torchtitan TP-8 per-rank kernels on one GPU (gpuplan wt-titantp, 2026-11-25).

Times, with CUDA events and NVML SM clock / power sampled every 5 ms during each timing loop:
- the per-rank GEMMs of Llama 3 8B and Llama 3 70B under torchtitan's TP 8 (wq, wk, wo, w1, w2;
  wv = wk, w3 = w1) at M = local batch x seq (8B: 12 x 8192 = 98,304; 70B: 16 x 8192 = 131,072)
  and at M / 8 (async TP's chunks), forward, data gradient and weight gradient:
  bf16 `torch.mm`; float8 e4m3 `torch._scaled_mm` tensorwise (fast accumulation in forward, as
  torchao sets it) and rowwise (forward, fast accumulation);
- DTensor's sequence-parallel layout copies as torch 2.11 runs them under torch.compile:
  `cat(chunk(gathered, 8, dim=0), dim=1)` after an all-gather of a [B, S/8, H] shard and
  `cat(chunk(x, 8, dim=1))` before a reduce-scatter of [B, S, H];
- symmetric memory's `torch.sum` over 8 partial outputs (async TP's matmul-reduce-scatter).

Usage: python3 titantp_probe.py OUT_DIR [--small] [--budget-s S]
Writes OUT_DIR/titantp_kernels.csv and OUT_DIR/meta.json.
"""
import csv, json, os, sys, threading, time

import torch

OUT = sys.argv[1]
SMALL = "--small" in sys.argv
BUDGET = float(sys.argv[sys.argv.index("--budget-s") + 1]) if "--budget-s" in sys.argv else 300.0
T0 = time.time()
dev = "cuda" if torch.cuda.is_available() else "cpu"
os.makedirs(OUT, exist_ok=True)

try:
    import pynvml
    pynvml.nvmlInit()
    H = pynvml.nvmlDeviceGetHandleByIndex(0)
except Exception:  # CPU test run, or no NVML binding
    H = None


class Sampler:
    def __init__(self):
        self.clk, self.pw, self.run = [], [], True
        self.t = threading.Thread(target=self.loop, daemon=True)

    def loop(self):
        while self.run:
            if H is not None:
                self.clk.append(pynvml.nvmlDeviceGetClockInfo(H, pynvml.NVML_CLOCK_SM))
                self.pw.append(pynvml.nvmlDeviceGetPowerUsage(H) / 1000.0)
            time.sleep(0.005)

    def __enter__(self):
        self.t.start()
        return self

    def __exit__(self, *a):
        self.run = False
        self.t.join()


def med(x):
    x = sorted(x)
    return x[len(x) // 2] if x else float("nan")


def timeit(fn, min_s=0.25):
    for _ in range(3):
        fn()
    if dev == "cpu":
        t = time.perf_counter(); fn(); return (time.perf_counter() - t) * 1e6, float("nan"), float("nan")
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); fn(); e.record(); torch.cuda.synchronize()
    one = max(s.elapsed_time(e) / 1e3, 1e-5)
    reps = max(3, int(min_s / one))
    with Sampler() as smp:
        s.record()
        for _ in range(reps):
            fn()
        e.record()
        torch.cuda.synchronize()
    return s.elapsed_time(e) * 1e3 / reps, med(smp.clk), med(smp.pw)


rows = []
def emit(**r):
    rows.append(r)
    print(",".join(str(v) for v in r.values()), flush=True)

E4 = torch.float8_e4m3fn
MODELS = {"llama-3-8b": (4096, 1024, 14336, 98304), "llama-3-70b": (8192, 1024, 28672, 131072)}
TP = 8
if SMALL:
    MODELS = {"tiny": (256, 64, 512, 1024)}


def shapes(h, kv, f, m):
    lin = {"wq": (h, h // TP), "wk": (h, kv // TP), "wo": (h // TP, h), "w1": (h, f // TP), "w2": (f // TP, h)}
    for name, (k, n) in lin.items():
        yield name, "fwd", m, n, k
        yield name, "dgrad", m, k, n
        yield name, "wgrad", n, k, m  # dW [out, in] = dY^T [out, M] @ X [M, in]


def gemm_rows(model, h, kv, f, m_full):
    for m in (m_full, m_full // TP):
        for name, g, M, N, K in shapes(h, kv, f, m):
            if time.time() - T0 > BUDGET:
                return
            a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
            b = torch.randn(N, K, device=dev, dtype=torch.bfloat16).t()  # column-major B as nn.Linear's weight
            t, c, p = timeit(lambda: torch.mm(a, b))
            emit(kind="gemm", model=model, m_tokens=m, linear=name, gemm=g, m=M, n=N, k=K, variant="bf16_mm", time_us=round(t, 2), sm_clock_mhz=c, power_w=p)
            if dev == "cuda":
                a8, b8 = a.to(E4), b.to(E4)
                one = torch.ones((), device=dev)
                fast = g == "fwd"
                t, c, p = timeit(lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=fast))
                emit(kind="gemm", model=model, m_tokens=m, linear=name, gemm=g, m=M, n=N, k=K, variant="scaled_mm_tensorwise", time_us=round(t, 2), sm_clock_mhz=c, power_w=p)
                if g == "fwd":
                    sa = torch.ones(M, 1, device=dev); sb = torch.ones(1, N, device=dev)
                    t, c, p = timeit(lambda: torch._scaled_mm(a8, b8, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, use_fast_accum=True))
                    emit(kind="gemm", model=model, m_tokens=m, linear=name, gemm=g, m=M, n=N, k=K, variant="scaled_mm_rowwise", time_us=round(t, 2), sm_clock_mhz=c, power_w=p)
                del a8, b8
            del a, b


def layout_rows(model, h, m_full):
    B, S = (12, 8192) if not SMALL else (4, 256)
    if model == "llama-3-70b" and not SMALL:
        B = 16
    for dt, name in ((torch.bfloat16, "bf16"), (torch.float8_e4m3fn if dev == "cuda" else torch.bfloat16, "fp8")):
        gathered = torch.randn(TP * B, S // TP, h, device=dev, dtype=torch.bfloat16).to(dt)
        f_ag = torch.compile(lambda x: torch.cat(torch.chunk(x, TP, dim=0), dim=1))
        t, c, p = timeit(lambda: f_ag(gathered))
        emit(kind="layout", model=model, m_tokens=B * S, linear="all_gather_relayout", gemm=name, m=B, n=S, k=h, variant="compiled_cat_chunk", time_us=round(t, 2), sm_clock_mhz=c, power_w=p)
        del gathered
    x = torch.randn(B, S, h, device=dev, dtype=torch.bfloat16)
    f_rs = torch.compile(lambda x: torch.cat(torch.chunk(x, TP, dim=1)))
    t, c, p = timeit(lambda: f_rs(x))
    emit(kind="layout", model=model, m_tokens=B * S, linear="reduce_scatter_relayout", gemm="bf16", m=B, n=S, k=h, variant="compiled_cat_chunk", time_us=round(t, 2), sm_clock_mhz=c, power_w=p)
    t, c, p = timeit(lambda: x.clone())
    emit(kind="layout", model=model, m_tokens=B * S, linear="copy_reference", gemm="bf16", m=B, n=S, k=h, variant="clone", time_us=round(t, 2), sm_clock_mhz=c, power_w=p)
    parts = x.view(TP, -1, h)
    t, c, p = timeit(lambda: torch.sum(parts, dim=0))
    emit(kind="layout", model=model, m_tokens=B * S, linear="symm_mem_partial_sum", gemm="bf16", m=TP, n=B * S // TP, k=h, variant="torch_sum_dim0", time_us=round(t, 2), sm_clock_mhz=c, power_w=p)
    del x, parts


for model, (h, kv, f, m) in MODELS.items():
    layout_rows(model, h, m)
for model, (h, kv, f, m) in MODELS.items():
    gemm_rows(model, h, kv, f, m)

with open(os.path.join(OUT, "titantp_kernels.csv"), "w", newline="") as fh:
    w = csv.DictWriter(fh, fieldnames=list(rows[0].keys()))
    w.writeheader(); w.writerows(rows)
meta = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0) if dev == "cuda" else "cpu",
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "elapsed_s": round(time.time() - T0, 1)}
if H is not None:
    meta["power_limit_w"] = pynvml.nvmlDeviceGetPowerManagementLimit(H) / 1000.0
    meta["max_sm_clock_mhz"] = pynvml.nvmlDeviceGetMaxClockInfo(H, pynvml.NVML_CLOCK_SM)
    meta["uuid"] = pynvml.nvmlDeviceGetUUID(H)
    meta["driver"] = pynvml.nvmlSystemGetDriverVersion()
json.dump(meta, open(os.path.join(OUT, "meta.json"), "w"), indent=1)
print(json.dumps(meta))
