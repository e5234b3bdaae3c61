#!/usr/bin/env python3
"""Issue 20 (wt-ctx70): a context (prefill) iteration of one to a few short prompts, timed on the device.

The online rows at 2-8 QPS run context iterations of one to a few 467-token prompts (M = 467..~2,000).
This probe times, in bf16 with random weights and CUDA events, with an NVML sampler (SM clock, power,
every 5 ms) beside it; it never changes clocks or power limits:
  G. every layer GEMM of the Llama-3.1-70B TP 4 shard (qkv 8192->2560, o 2048->8192, gate+up
     8192->14336, down 7168->8192) and of Llama-3.1-8B at TP 1 (qkv 4096->6144, o 4096->4096,
     gate+up 4096->28672, down 14336->4096) at M = 128, 256, 467, 934, 1868, as torch.matmul (cuBLAS),
     REPS calls back to back after a warm-up; the weights (>= 16 MB .. 235 MB) are re-read each call.
  L. the LM head on the last token of each prompt: M = 1, 2, 4 rows x (8192 -> 128256/4) and (4096 -> 128256).
  A. causal attention of B prompts x S tokens (B x S = 1x128, 1x256, 1x467, 2x467, 4x467), per-rank heads
     (70B TP 4: 16 q heads; 8B: 32), head dim 128, SDPA with the FLASH and the CUDNN backends.
  S. a whole layer stack back to back: 80 layers of the 70B TP 4 shard and 32 of the 8B at M = 467
     (one prompt) and M = 1868 (four), qkv / attention (flash) / o / gate+up / down, no all-reduce, no
     norms; per-op events inside, the stack's own event pair outside (the difference is time between
     kernels, i.e. launch-bound gaps).
Writes OUT/small_ctx.json and OUT/small_ctx_samples.csv.
Usage (device): python3 small_context_probe.py OUTDIR
"""
import csv
import json
import os
import sys
import threading
import time

import pynvml
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

OUT = sys.argv[1] if len(sys.argv) > 1 else "."
os.makedirs(OUT, exist_ok=True)
REPS = 40
MS = [128, 256, 467, 934, 1868]
dt = torch.bfloat16

pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
samples = []
phase = ["start"]
stop = threading.Event()


def sampler():
    while not stop.is_set():
        t = time.perf_counter()
        try:
            sm = pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
            p = pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0
        except Exception:  # noqa: BLE001
            time.sleep(0.005)
            continue
        samples.append((t, phase[0], sm, p))
        time.sleep(0.005)


def window(t0, t1):
    s = [x for x in samples if t0 <= x[0] <= t1]
    if not s:
        return {}
    v = sorted(x[2] for x in s)
    return {"nvml_samples": len(s), "sm_mhz_median": v[len(v) // 2],
            "power_w_mean": sum(x[3] for x in s) / len(s)}


meta = {
    "gpu": pynvml.nvmlDeviceGetName(h),
    "driver": pynvml.nvmlSystemGetDriverVersion(),
    "power_limit_w": pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
    "max_sm_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
    "torch": torch.__version__, "cuda": torch.version.cuda,
    "cudnn": torch.backends.cudnn.version(),
    "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "reps": REPS,
}
meta = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in meta.items()}
print(json.dumps(meta), flush=True)
results = []


def timed(name, fn, flop, extra=None, reps=REPS):
    phase[0] = name
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    evs = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); evs.append((a, b))
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    ts = sorted(a.elapsed_time(b) / 1e3 for a, b in evs)
    r = {"name": name, "median_s": ts[len(ts) // 2], "min_s": ts[0], "mean_s": sum(ts) / len(ts),
         "tflops_median": flop / ts[len(ts) // 2] / 1e12 if flop else None}
    if extra:
        r.update(extra)
    r.update(window(t0, t1))
    results.append(r)
    print(json.dumps(r), flush=True)


th = threading.Thread(target=sampler, daemon=True)
th.start()
time.sleep(0.5)

SHAPES = {
    "70b_tp4": [("qkv", 8192, 2560), ("o", 2048, 8192), ("gate_up", 8192, 14336), ("down", 7168, 8192)],
    "8b_tp1": [("qkv", 4096, 6144), ("o", 4096, 4096), ("gate_up", 4096, 28672), ("down", 14336, 4096)],
}
MMAX = max(MS)
for model, shapes in SHAPES.items():
    for op, k, n in shapes:
        w = torch.randn(n, k, device="cuda", dtype=dt) * 0.02
        xa = torch.randn(MMAX, k, device="cuda", dtype=dt)
        for m in MS:
            x = xa[:m]
            out = torch.empty(m, n, device="cuda", dtype=dt)
            timed(f"gemm_{model}_{op}_m{m}", lambda: torch.matmul(x, w.t(), out=out), 2.0 * m * k * n,
                  {"kind": "gemm", "model": model, "op": op, "M": m, "K": k, "N": n})
        del w, xa

for model, k, n in (("70b_tp4", 8192, 128256 // 4), ("8b_tp1", 4096, 128256)):
    w = torch.randn(n, k, device="cuda", dtype=dt) * 0.02
    for m in (1, 2, 4):
        x = torch.randn(m, k, device="cuda", dtype=dt)
        timed(f"lmhead_{model}_m{m}", lambda: torch.matmul(x, w.t()), 2.0 * m * k * n,
              {"kind": "lm_head", "model": model, "M": m, "K": k, "N": n})
    del w

for model, heads in (("70b_tp4", 16), ("8b_tp1", 32)):
    for b, s in ((1, 128), (1, 256), (1, 467), (2, 467), (4, 467)):
        q = torch.randn(b, s, heads, 128, device="cuda", dtype=dt).transpose(1, 2)
        kk = torch.randn(b, s, heads, 128, device="cuda", dtype=dt).transpose(1, 2)
        v = torch.randn(b, s, heads, 128, device="cuda", dtype=dt).transpose(1, 2)
        flop = 4.0 * b * heads * 128 * s * s / 2
        for be_name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                with sdpa_kernel([be]):
                    timed(f"attn_{model}_{be_name}_b{b}_s{s}",
                          lambda: F.scaled_dot_product_attention(q, kk, v, is_causal=True), flop,
                          {"kind": "attn", "model": model, "backend": be_name, "B": b, "S": s, "heads": heads})
            except Exception as e:  # noqa: BLE001
                print(json.dumps({"name": f"attn_{model}_{be_name}_b{b}_s{s}", "error": str(e)[:200]}), flush=True)


def stack(model, layers, m, b, s, hidden, heads, qkv_out, o_in, gu_out, down_in, seconds=2.0):
    name = f"stack_{model}_m{m}"
    phase[0] = name
    x = torch.randn(m, hidden, device="cuda", dtype=dt)
    ws = [(torch.randn(qkv_out, hidden, device="cuda", dtype=dt) * 0.02,
           torch.randn(hidden, o_in, device="cuda", dtype=dt) * 0.02,
           torch.randn(gu_out, hidden, device="cuda", dtype=dt) * 0.02,
           torch.randn(hidden, down_in, device="cuda", dtype=dt) * 0.02) for _ in range(layers)]
    q = torch.randn(b, s, heads, 128, device="cuda", dtype=dt).transpose(1, 2)
    kk = torch.randn(b, s, heads, 128, device="cuda", dtype=dt).transpose(1, 2)
    v = torch.randn(b, s, heads, 128, device="cuda", dtype=dt).transpose(1, 2)
    a_in = torch.randn(m, o_in, device="cuda", dtype=dt)
    m_in = torch.randn(m, down_in, device="cuda", dtype=dt)
    o1 = torch.empty(m, qkv_out, device="cuda", dtype=dt)
    o2 = torch.empty(m, hidden, device="cuda", dtype=dt)
    o3 = torch.empty(m, gu_out, device="cuda", dtype=dt)
    o4 = torch.empty(m, hidden, device="cuda", dtype=dt)
    names = ["qkv", "attn", "o", "gate_up", "down"]

    def one(lw, measure, evs):
        wq, wo, wg, wd = lw
        fns = [lambda: torch.matmul(x, wq.t(), out=o1),
               lambda: F.scaled_dot_product_attention(q, kk, v, is_causal=True),
               lambda: torch.matmul(a_in, wo.t(), out=o2),
               lambda: torch.matmul(x, wg.t(), out=o3),
               lambda: torch.matmul(m_in, wd.t(), out=o4)]
        for n_, fn in zip(names, fns):
            if measure:
                e0 = torch.cuda.Event(enable_timing=True); e0.record()
            fn()
            if measure:
                e1 = torch.cuda.Event(enable_timing=True); e1.record(); evs.append((n_, e0, e1))

    res = {}
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        for mode in ("bare", "events"):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            iters, acc, n_it = [], {n_: 0.0 for n_ in names}, 0
            while time.perf_counter() - t0 < seconds:
                measuring = time.perf_counter() - t0 > seconds / 4
                evs = []
                i0, i1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                i0.record()
                for lw in ws:
                    one(lw, measuring and mode == "events", evs)
                i1.record(); i1.synchronize()
                if measuring:
                    iters.append(i0.elapsed_time(i1) / 1e3)
                    n_it += 1
                    for n_, a, bb in evs:
                        acc[n_] += a.elapsed_time(bb) / 1e3
            t1 = time.perf_counter()
            r = {"iteration_s_mean": sum(iters) / len(iters), "iteration_s_min": min(iters), "iterations": len(iters)}
            if mode == "events":
                r["per_layer_s"] = {n_: acc[n_] / n_it / layers for n_ in names}
                r["kernels_sum_s"] = sum(acc.values()) / n_it
            r.update(window(t0 + seconds / 4, t1))
            res[mode] = r
    out = {"name": name, "kind": "stack", "model": model, "layers": layers, "M": m, "B": b, "S": s, **res}
    results.append(out)
    print(json.dumps(out), flush=True)
    del ws


stack("70b_tp4", 80, 467, 1, 467, 8192, 16, 2560, 2048, 14336, 7168)
stack("70b_tp4", 80, 1868, 4, 467, 8192, 16, 2560, 2048, 14336, 7168)
stack("8b_tp1", 32, 467, 1, 467, 4096, 32, 6144, 4096, 28672, 14336)
stack("8b_tp1", 32, 1868, 4, 467, 4096, 32, 6144, 4096, 28672, 14336)
stop.set(); th.join()

with open(os.path.join(OUT, "small_ctx.json"), "w") as f:
    json.dump({"meta": meta, "results": results}, f, indent=1)
with open(os.path.join(OUT, "small_ctx_samples.csv"), "w", newline="") as f:
    wr = csv.writer(f)
    wr.writerow(["t_s", "phase", "sm_mhz", "power_w"])
    for s_ in samples:
        wr.writerow([f"{s_[0]:.4f}", *s_[1:]])
print("done", flush=True)
