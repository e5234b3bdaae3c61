#!/usr/bin/env python3
"""Issue 20 (branch wt-trthop): the parts of a large-batch FP8 decode iteration, timed on the H100.

TensorRT-LLM v0.17's FP8 engines on Hopper run each decode iteration of a Llama-3.1-8B / Mistral-7B
layer as (from memory of the v0.17 engine build, not re-read): fused residual + RMSNorm writing FP8
(static per-tensor input scale of the ModelOpt checkpoint), the qkv FP8 GEMM, RoPE + KV-cache write,
XQA decode attention over the FP8 KV cache writing its output in FP8, the o FP8 GEMM, fused residual +
RMSNorm writing FP8, one FP8 GEMM for gate+up, SiLU x up writing FP8, and the down FP8 GEMM. This probe
times those kernels' stand-ins through PyTorch (TensorRT-LLM cannot be installed on the device):
  - FP8 GEMMs: torch._scaled_mm (cuBLASLt), per-tensor scales, bf16 out, at decode M; bf16 matmul beside;
  - the elementwise kernels: torch.compile'd (Inductor/Triton) fused norm+quant, SiLU-mul+quant, the
    static quantize alone, and the unfused norm;
  - decode attention: SDPA (flash, GQA) over a contiguous bf16 KV cache, the stand-in for XQA over the
    FP8 cache (no PyTorch kernel reads an FP8 KV cache), run at half the KV length so that it reads the
    FP8 cache's bytes (marked `fp8_bytes_equivalent`), and at the full length for the rate;
  - whole 32-layer decode iterations of the 8B shape (Mistral-7B has the same layer) captured in one
    CUDA graph and replayed back to back for WARM + MEAS s with NVML (SM clock, power) every 5 ms:
    "fused" (the v0.17 engine's kernel list: quantize inside the norm and the SiLU kernels) and
    "unfused" (a separate static-quantize kernel before each of the four GEMMs, as gpuplan listed them).
Every op alone: 20 calls captured in one CUDA graph, replayed for STEADY s; mean per call over the
second half. Never changes clocks or power limits.

Writes OUT/decode_fp8_probe.json and OUT/decode_fp8_samples.csv.
Usage (device): python3 scripts/decode_fp8_probe.py OUTDIR
"""
import csv
import json
import os
import sys
import threading
import time
import traceback

import pynvml
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

OUT = sys.argv[1] if len(sys.argv) > 1 else "."
os.makedirs(OUT, exist_ok=True)
WARM, MEAS, STEADY = 2.0, 2.5, 0.4
FP8 = torch.float8_e4m3fn
BF = torch.bfloat16
DEV = "cuda"

pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
samples = []
phase = ["start"]
stop = threading.Event()
results = []


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
    med = lambda v: sorted(v)[len(v) // 2]
    return {"nvml_samples": len(s), "sm_mhz_median": med([x[2] for x in s]), "power_w_mean": sum(x[3] for x in s) / len(s)}


def save():
    with open(os.path.join(OUT, "decode_fp8_probe.json"), "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)
    with open(os.path.join(OUT, "decode_fp8_samples.csv"), "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["t_s", "phase", "sm_mhz", "power_w"])
        for x in list(samples):
            wr.writerow([f"{x[0]:.4f}", *x[1:]])


def graph_of(fn, reps):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    torch.cuda.synchronize()
    return g


def steady(name, fn, extra, seconds=STEADY, reps=20):
    phase[0] = name
    try:
        g = graph_of(fn, reps)
    except Exception as e:  # noqa: BLE001
        r = {"phase": name, "error": repr(e)[:300]}
        r.update(extra)
        results.append(r)
        print(json.dumps(r), flush=True)
        return None
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    rec = []
    while time.perf_counter() - t0 < seconds:
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        rec.append((time.perf_counter(), e0.elapsed_time(e1) / 1e3 / reps))
    t1 = time.perf_counter()
    half = [dt for t, dt in rec if t > t0 + seconds / 2] or [dt for _, dt in rec]
    per = sum(half) / len(half)
    r = {"phase": name, "call_us": per * 1e6}
    r.update(extra)
    r.update(window(t0 + seconds / 2, t1))
    results.append(r)
    print(json.dumps(r), flush=True)
    del g
    return per


th = threading.Thread(target=sampler, daemon=True)
th.start()
meta = {
    "gpu": pynvml.nvmlDeviceGetName(h),
    "driver": pynvml.nvmlSystemGetDriverVersion(),
    "power_limit_w": pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
    "max_sm_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
    "torch": torch.__version__,
    "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
}
meta = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in meta.items()}
print(json.dumps(meta), flush=True)

one = torch.ones((), device=DEV, dtype=torch.float32)

# ---- elementwise kernels (Inductor) ----
def rms(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5) * w.float())


def add_norm_quant(x, r, w, inv_scale):
    y = x + r
    return (rms(y, w) * inv_scale).clamp(-448.0, 448.0).to(FP8), y


def add_norm(x, r, w):
    y = x + r
    return rms(y, w).to(BF), y


def quant(x, inv_scale):
    return (x.float() * inv_scale).clamp(-448.0, 448.0).to(FP8)


def silu_mul_quant(gu, inv_scale):
    g, u = gu.chunk(2, dim=-1)
    return (F.silu(g.float()) * u.float() * inv_scale).clamp(-448.0, 448.0).to(FP8)


def silu_mul(gu):
    g, u = gu.chunk(2, dim=-1)
    return (F.silu(g.float()) * u.float()).to(BF)


def rope_q(qkv, cos, sin, nq, d):
    q = qkv[:, : nq * d].view(qkv.shape[0], nq, d).float()
    q1, q2 = q[..., : d // 2], q[..., d // 2:]
    return torch.cat([q1 * cos - q2 * sin, q2 * cos + q1 * sin], -1).to(BF)


torch._dynamo.config.cache_size_limit = 64
compiled = {}
for n, f in (("add_norm_quant", add_norm_quant), ("add_norm", add_norm), ("quant", quant),
             ("silu_mul_quant", silu_mul_quant), ("silu_mul", silu_mul), ("rope_q", rope_q)):
    try:
        compiled[n] = torch.compile(f, dynamic=False)
    except Exception as e:  # noqa: BLE001
        print("compile failed", n, repr(e), flush=True)
        compiled[n] = f

# ---- 1. FP8 and bf16 GEMMs at decode M ----
SHAPES = {
    "8b_tp1": [("qkv", 4096, 6144), ("o", 4096, 4096), ("gate_up", 4096, 28672), ("down", 14336, 4096)],
    "70b_tp4": [("qkv", 8192, 2560), ("o", 2048, 8192), ("gate_up", 8192, 14336), ("down", 7168, 8192)],
    "70b_tp8": [("qkv", 8192, 1280), ("o", 1024, 8192), ("gate_up", 8192, 7168), ("down", 3584, 8192)],
}
MS = [64, 256, 512, 1024, 2048]
try:
    for tag, shapes in SHAPES.items():
        for name, k, n in shapes:
            w8 = (torch.randn(n, k, device=DEV) * 0.05).to(FP8)
            wb = torch.randn(n, k, device=DEV, dtype=BF) * 0.05
            for m in MS:
                a8 = (torch.randn(m, k, device=DEV)).to(FP8)
                ab = torch.randn(m, k, device=DEV, dtype=BF)
                out = torch.empty(m, n, device=DEV, dtype=BF)
                ex = {"tag": tag, "op": name, "m": m, "k": k, "n": n}
                steady(f"gemm_fp8_{tag}_{name}_m{m}", lambda: torch._scaled_mm(a8, w8.t(), scale_a=one, scale_b=one, out_dtype=BF),
                       dict(ex, dtype="fp8", flop=2.0 * m * n * k))
                if m in (512, 2048):
                    steady(f"gemm_bf16_{tag}_{name}_m{m}", lambda: torch.matmul(ab, wb.t(), out=out), dict(ex, dtype="bf16", flop=2.0 * m * n * k))
            del w8, wb
    save()
except Exception:  # noqa: BLE001
    traceback.print_exc()

# ---- 3. decode attention, SDPA stand-in ----

BACKENDS = [("flash", [SDPBackend.FLASH_ATTENTION]), ("cudnn", [SDPBackend.CUDNN_ATTENTION]), ("efficient", [SDPBackend.EFFICIENT_ATTENTION])]


CHOSEN = []


def attn_fn(q, k, v):
    for bname, be in BACKENDS:
        try:
            with sdpa_kernel(be):
                F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            torch.cuda.synchronize()

            def f(be=be):
                with sdpa_kernel(be):
                    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            if not CHOSEN:
                CHOSEN.append(be)
            return bname, f
        except Exception as e:  # noqa: BLE001
            print("sdpa", bname, "failed:", repr(e)[:200], flush=True)
    return None, None


CASES = [  # (label, batch, kv_len of the row's mean decode, q heads, kv heads)
    ("8b_b2000_kv192", 2000, 192, 32, 8),
    ("8b_b512_kv1100", 512, 1100, 32, 8),
    ("8b_b256_kv2200", 256, 2200, 32, 8),
    ("8b_b64_kv21000", 64, 21000, 32, 8),
    ("70b_tp8_b1488_kv1100", 1488, 1100, 8, 1),
    ("70b_tp4_b700_kv1100", 700, 1100, 16, 2),
]
attn_per_layer = {}
try:
    for label, b, L, hq, hk in CASES:
        for variant, length in (("fp8_bytes_equivalent", L // 2), ("bf16_full", L)):
            q = torch.randn(b, hq, 1, 128, device=DEV, dtype=BF)
            k = torch.randn(b, hk, length, 128, device=DEV, dtype=BF)
            v = torch.randn(b, hk, length, 128, device=DEV, dtype=BF)
            bname, f = attn_fn(q, k, v)
            if f is None:
                results.append({"phase": f"attn_{label}_{variant}", "error": "no SDPA backend"})
                continue
            kv_bytes = 2.0 * b * hk * length * 128 * 2
            per = steady(f"attn_{label}_{variant}", f, {"backend": bname, "batch": b, "kv_len_row": L, "kv_len_run": length,
                                                         "q_heads": hq, "kv_heads": hk, "kv_bytes": kv_bytes}, reps=10)
            if per:
                results[-1]["kv_gb_per_s"] = kv_bytes / per / 1e9
            del q, k, v
    save()
except Exception:  # noqa: BLE001
    traceback.print_exc()

# ---- 4. whole decode iterations, 8B layer x 32, CUDA graph, clock beside ----


def iteration(m, L, fused, layers=32):
    hid, nq, nk, d, ffn = 4096, 32, 8, 128, 14336
    W = {
        "qkv": (torch.randn(6144, hid, device=DEV) * 0.05).to(FP8),
        "o": (torch.randn(hid, hid, device=DEV) * 0.05).to(FP8),
        "gu": (torch.randn(2 * ffn, hid, device=DEV) * 0.05).to(FP8),
        "down": (torch.randn(hid, ffn, device=DEV) * 0.05).to(FP8),
    }
    wn = torch.ones(hid, device=DEV, dtype=BF)
    x = torch.randn(m, hid, device=DEV, dtype=BF) * 0.1
    res = torch.randn(m, hid, device=DEV, dtype=BF) * 0.1
    k = torch.randn(m, nk, L, d, device=DEV, dtype=BF)
    v = torch.randn(m, nk, L, d, device=DEV, dtype=BF)
    cos = torch.randn(m, 1, 64, device=DEV)
    sin = torch.randn(m, 1, 64, device=DEV)
    _, af = attn_fn(torch.randn(m, nq, 1, d, device=DEV, dtype=BF), k, v)

    def mm(a, w):
        return torch._scaled_mm(a, w.t(), scale_a=one, scale_b=one, out_dtype=BF)

    def fwd():
        h, r = x, res
        for _ in range(layers):
            if fused:
                a8, r = compiled["add_norm_quant"](h, r, wn, one)
            else:
                a, r = compiled["add_norm"](h, r, wn)
                a8 = compiled["quant"](a, one)
            qkv = mm(a8, W["qkv"])
            q = compiled["rope_q"](qkv, cos, sin, nq, d).view(m, nq, 1, d)
            with sdpa_kernel(CHOSEN[0] if CHOSEN else BACKENDS[0][1]):
                o = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            o8 = compiled["quant"](o.reshape(m, hid), one)  # fused into XQA's output in v0.17 (both variants run it here)
            h = mm(o8, W["o"])
            if fused:
                a8, r = compiled["add_norm_quant"](h, r, wn, one)
            else:
                a, r = compiled["add_norm"](h, r, wn)
                a8 = compiled["quant"](a, one)
            gu = mm(a8, W["gu"])
            if fused:
                mid8 = compiled["silu_mul_quant"](gu, one)
            else:
                mid8 = compiled["quant"](compiled["silu_mul"](gu), one)
            h = mm(mid8, W["down"])
        return h

    return fwd


def run_iteration(name, m, L, fused):
    phase[0] = name
    fwd = iteration(m, L, fused)
    g = graph_of(fwd, 1)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    tm = t0 + WARM
    its = []
    while time.perf_counter() - t0 < WARM + MEAS:
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        if time.perf_counter() >= tm:
            its.append(e0.elapsed_time(e1) / 1e3)
    t1 = time.perf_counter()
    r = {"phase": name, "batch": m, "kv_len_run": L, "fused": fused, "iterations": len(its),
         "iteration_ms_mean": 1e3 * sum(its) / len(its), "iteration_ms_min": 1e3 * min(its)}
    r.update(window(tm, t1))
    results.append(r)
    print(json.dumps(r), flush=True)
    del g


try:
    # Mistral-7B 128/128 rows: batch ~2,000 at a mean cache of ~192 tokens (FP8: 96 bf16 tokens' bytes)
    run_iteration("iter_8b_b2000_kv192fp8_fused", 2000, 96, True)
    run_iteration("iter_8b_b2000_kv192fp8_unfused", 2000, 96, False)
    # 128/2048 and 1000/1000 rows: batch ~500 at ~1,100 cached tokens
    run_iteration("iter_8b_b512_kv1100fp8_fused", 512, 550, True)
    run_iteration("iter_8b_b512_kv1100fp8_unfused", 512, 550, False)
    save()
except Exception:  # noqa: BLE001
    traceback.print_exc()

# ---- 2. elementwise kernels at the 8B shape ----
try:
    for m in (512, 2000):
        x = torch.randn(m, 4096, device=DEV, dtype=BF)
        r = torch.randn(m, 4096, device=DEV, dtype=BF)
        wn = torch.ones(4096, device=DEV, dtype=BF)
        gu = torch.randn(m, 28672, device=DEV, dtype=BF)
        mid = torch.randn(m, 14336, device=DEV, dtype=BF)
        qkv = torch.randn(m, 6144, device=DEV, dtype=BF)
        cos = torch.randn(m, 1, 64, device=DEV)
        sin = torch.randn(m, 1, 64, device=DEV)
        ex = {"m": m, "hidden": 4096}
        steady(f"ew_add_norm_quant_m{m}", lambda: compiled["add_norm_quant"](x, r, wn, one), dict(ex, bytes=m * 4096 * (2 + 2 + 1 + 2)))
        steady(f"ew_add_norm_m{m}", lambda: compiled["add_norm"](x, r, wn), dict(ex, bytes=m * 4096 * (2 + 2 + 2 + 2)))
        steady(f"ew_quant_h_m{m}", lambda: compiled["quant"](x, one), dict(ex, bytes=m * 4096 * 3))
        steady(f"ew_quant_ffn_m{m}", lambda: compiled["quant"](mid, one), dict(ex, bytes=m * 14336 * 3))
        steady(f"ew_silu_mul_quant_m{m}", lambda: compiled["silu_mul_quant"](gu, one), dict(ex, bytes=m * (28672 * 2 + 14336)))
        steady(f"ew_silu_mul_m{m}", lambda: compiled["silu_mul"](gu), dict(ex, bytes=m * (28672 * 2 + 14336 * 2)))
        steady(f"ew_rope_q_m{m}", lambda: compiled["rope_q"](qkv, cos, sin, 32, 128), dict(ex, bytes=m * 4096 * 4))
    save()
except Exception:  # noqa: BLE001
    traceback.print_exc()

stop.set()
th.join()
save()
print("done", flush=True)
