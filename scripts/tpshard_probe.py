#!/usr/bin/env python3
"""Issue 20 (branch wt-tpshard): the GEMMs of tensor-parallel shards and few-KV-head decode
attention, timed on one H100 (docs/trtllm-residuals.md section 14).

TensorRT-LLM cannot run on the device machine, so every kernel is a stand-in:
  - GEMMs: cuBLASLt through PyTorch. FP8 e4m3 with per-tensor scales, bf16 out
    (`torch._scaled_mm`, use_fast_accum=False as scripts/decode_fp8_probe.py, plus a fast-accumulate
    variant on the 70B TP 4 / TP 8 shards), and bf16 (`torch.matmul`). Shapes: every per-rank
    linear of Llama-3.1 70B (TP 1/2/4/8), Llama-3.1 405B (TP 4/8) and Mixtral 8x22B (TP 2/4/8; the
    experts TP-sharded, one expert's GEMM), at M = 16 ... 16384 rows.
    Each (shape, M): the call repeated R times inside one CUDA graph (R chosen so that one replay
    takes >= ~3 ms), the weights cycled through a pool of distinct copies larger than the 50 MB L2
    (as a model's layers read theirs from HBM), the graph replayed back to back for STEADY s;
    time per call = mean over the replays of the second half; NVML SM clock and power every 5 ms,
    median / min / max over the same half.
  - decode attention: SDPA (flash backend; GQA) with one query token per sequence over a
    contiguous bf16 KV cache of HALF the context (the bytes of the FP8 cache, as section 11 did;
    marked `fp8_bytes_equivalent`), 1/2/4/8 KV heads per rank with 8 query heads each (and 16 for
    405B's 1 KV head per rank at TP 8), batch 64-512, context 512-8192. A stand-in for XQA.
Never changes clocks or power limits. Writes OUT/tpshard_probe.json and OUT/tpshard_samples.csv
after every shape (a timeout keeps what was measured).
Usage (device): python3 scripts/tpshard_probe.py OUTDIR [BUDGET_S]
"""
import csv
import json
import math
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
BUDGET = float(sys.argv[2]) if len(sys.argv) > 2 else 500.0
T_START = time.perf_counter()
os.makedirs(OUT, exist_ok=True)
FP8 = torch.float8_e4m3fn
BF = torch.bfloat16
DEV = "cuda"
L2_POOL_BYTES = 160e6  # > 3x the H100's 50 MB L2
REPLAY_S = 3e-3

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
    clocks = sorted(x[2] for x in s)
    return {"nvml_samples": len(s), "sm_mhz_median": clocks[len(clocks) // 2], "sm_mhz_min": clocks[0], "sm_mhz_max": clocks[-1],
            "power_w_mean": round(sum(x[3] for x in s) / len(s), 1)}


def save():
    with open(os.path.join(OUT, "tpshard_probe.json"), "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=0)
    with open(os.path.join(OUT, "tpshard_samples.csv"), "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["t_s", "phase", "sm_mhz", "power_w"])
        for x in list(samples):
            wr.writerow([f"{x[0] - T_START:.4f}", *x[1:]])


def left():
    return BUDGET - (time.perf_counter() - T_START)


def graph_of(fns):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for f in fns[:2]:
            f()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for f in fns:
            f()
    torch.cuda.synchronize()
    return g


def once_s(f):
    f()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(3):
        f()
    e1.record()
    e1.synchronize()
    return e0.elapsed_time(e1) / 1e3 / 3


def steady(name, make_fn, n_variants, extra, seconds):
    """make_fn(i) -> a callable using variant i (weight copy i % n_variants)."""
    phase[0] = name
    r = {"phase": name}
    r.update(extra)
    try:
        t1 = once_s(make_fn(0))
        reps = max(1, min(400, math.ceil(REPLAY_S / max(t1, 1e-7))))
        reps = max(reps, min(n_variants, 400))
        g = graph_of([make_fn(i % n_variants) for i in range(reps)])
    except Exception as e:  # noqa: BLE001
        r["error"] = repr(e)[:300]
        results.append(r)
        print(json.dumps(r), flush=True)
        return None
    t0 = time.perf_counter()
    rec = []
    while time.perf_counter() - t0 < seconds:
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        rec.append((time.perf_counter(), e0.elapsed_time(e1) / 1e3 / reps))
    t_end = time.perf_counter()
    half = [dt for t, dt in rec if t > t0 + seconds / 2] or [dt for _, dt in rec]
    per = sum(half) / len(half)
    r.update({"call_us": round(per * 1e6, 3), "call_us_min": round(min(half) * 1e6, 3), "reps": reps, "replays": len(rec), "pool": n_variants})
    r.update(window(t0 + seconds / 2, t_end))
    results.append(r)
    print(json.dumps(r), flush=True)
    del g
    return per


th = threading.Thread(target=sampler, daemon=True)
th.start()
props = torch.cuda.get_device_properties(0)
meta = {
    "gpu": pynvml.nvmlDeviceGetName(h),
    "driver": pynvml.nvmlSystemGetDriverVersion(),
    "power_limit_w": pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
    "max_sm_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
    "sms": props.multi_processor_count,
    "torch": torch.__version__,
    "cuda": torch.version.cuda,
    "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "script": "scripts/tpshard_probe.py",
}
meta = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in meta.items()}
print(json.dumps(meta), flush=True)
one = torch.ones((), device=DEV, dtype=torch.float32)


def shard_shapes():
    """(tag, op, k, n) per rank: column-parallel qkv / gate+up split N, row-parallel o / down split K."""
    out = []

    def dense(tag, hidden, qkv, ffn, tps):
        for tp in tps:
            out.extend([(f"{tag}_tp{tp}", "qkv", hidden, qkv // tp), (f"{tag}_tp{tp}", "o", hidden // tp, hidden),
                        (f"{tag}_tp{tp}", "gate_up", hidden, 2 * ffn // tp), (f"{tag}_tp{tp}", "down", ffn // tp, hidden)])

    # Llama-3.1 70B: hidden 8192, 64 q + 8 kv heads of 128 (qkv 10240), ffn 28672 (models/llama-3.1-70b.toml)
    dense("70b", 8192, 10240, 28672, (8, 4, 2, 1))
    # Llama-3.1 405B: hidden 16384, 128 q + 8 kv heads (qkv 18432), ffn 53248 (models/llama-3.1-405b.toml)
    dense("405b", 16384, 18432, 53248, (8, 4))
    # Mixtral 8x22B: hidden 6144, 48 q + 8 kv heads (qkv 8192), expert ffn 16384 (models/mixtral-8x22b.toml)
    dense("mixtral8x22b", 6144, 8192, 16384, (8, 4, 2))
    return out


MS_FP8 = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
MS_BF16 = [16, 128, 512, 2048, 8192]
MS_FAST = [256, 1024, 4096]


def run_gemms(dtype, ms, seconds, only=None, fast=False):
    for tag, op, k, n in shard_shapes():
        if only and tag not in only:
            continue
        if left() < 25:
            print("budget: stopping gemms", dtype, flush=True)
            return
        eb = 1 if dtype == "fp8" else 2
        pool = max(2, math.ceil(L2_POOL_BYTES / (n * k * eb)) + 1)
        if dtype == "fp8":
            ws = [(torch.randn(n, k, device=DEV) * 0.05).to(FP8) for _ in range(pool)]
        else:
            ws = [torch.randn(k, n, device=DEV, dtype=BF) * 0.05 for _ in range(pool)]
        for m in ms:
            if left() < 25:
                break
            ex = {"kind": "gemm", "dtype": dtype, "tag": tag, "op": op, "m": m, "k": k, "n": n, "fast_accum": fast,
                  "flop": 2.0 * m * n * k, "weight_bytes": n * k * eb}
            try:
                if dtype == "fp8":
                    a = torch.randn(m, k, device=DEV).to(FP8)
                    mk = lambda i, a=a: (lambda: torch._scaled_mm(a, ws[i].t(), scale_a=one, scale_b=one, out_dtype=BF, use_fast_accum=fast))
                else:
                    a = torch.randn(m, k, device=DEV, dtype=BF)
                    mk = lambda i, a=a: (lambda: torch.matmul(a, ws[i]))
            except Exception as e:  # noqa: BLE001
                results.append(dict(ex, phase=f"gemm_{dtype}_{tag}_{op}_m{m}", error=repr(e)[:300]))
                continue
            name = f"gemm_{dtype}{'_fast' if fast else ''}_{tag}_{op}_m{m}"
            per = steady(name, mk, pool, ex, seconds)
            if per:
                results[-1]["tflops"] = round(ex["flop"] / per / 1e12, 1)
                results[-1]["weight_gb_per_s"] = round(ex["weight_bytes"] / per / 1e9, 1)
            del a
        del ws
        torch.cuda.empty_cache()
        save()


def run_attention(seconds):
    # (q heads per rank, kv heads per rank): 8 query heads per KV head (Llama-3.1 70B at TP 8/4/2/1);
    # 16 per KV head is Llama-3.1 405B at TP 8.
    heads = [(8, 1), (16, 2), (32, 4), (64, 8), (16, 1)]
    for hq, hk in heads:
        for b in (64, 128, 256, 512):
            for ctx in (512, 1024, 2048, 4096, 8192):
                if (hq, hk) == (16, 1) and b not in (64, 256):
                    continue
                if left() < 15:
                    print("budget: stopping attention", flush=True)
                    return
                length = ctx // 2  # the FP8 cache's bytes in a bf16 cache
                ex = {"kind": "attention", "backend": "flash", "variant": "fp8_bytes_equivalent", "batch": b, "context": ctx,
                      "kv_len_run": length, "q_heads": hq, "kv_heads": hk, "head_dim": 128,
                      "kv_bytes_run": 2.0 * b * hk * length * 128 * 2}
                try:
                    q = torch.randn(b, hq, 1, 128, device=DEV, dtype=BF)
                    kv_pool = max(1, min(4, math.ceil(L2_POOL_BYTES / ex["kv_bytes_run"])))
                    ks = [torch.randn(b, hk, length, 128, device=DEV, dtype=BF) for _ in range(kv_pool)]
                    vs = [torch.randn(b, hk, length, 128, device=DEV, dtype=BF) for _ in range(kv_pool)]

                    def mk(i):
                        def f():
                            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                                return F.scaled_dot_product_attention(q, ks[i], vs[i], enable_gqa=True)
                        return f
                except Exception as e:  # noqa: BLE001
                    results.append(dict(ex, phase=f"attn_h{hk}_b{b}_c{ctx}", error=repr(e)[:300]))
                    continue
                per = steady(f"attn_hq{hq}_hk{hk}_b{b}_c{ctx}", mk, kv_pool, ex, seconds)
                if per:
                    results[-1]["kv_gb_per_s"] = round(ex["kv_bytes_run"] / per / 1e9, 1)
                del q, ks, vs
        torch.cuda.empty_cache()
        save()


for label, fn in (
    ("fp8", lambda: run_gemms("fp8", MS_FP8, 0.35)),
    ("attention", lambda: run_attention(0.25)),
    ("fp8_fast", lambda: run_gemms("fp8", MS_FAST, 0.3, only={"70b_tp4", "70b_tp8"}, fast=True)),
    ("bf16", lambda: run_gemms("bf16", MS_BF16, 0.3)),
):
    try:
        print("== section", label, "t =", round(time.perf_counter() - T_START, 1), flush=True)
        fn()
    except Exception:  # noqa: BLE001
        traceback.print_exc()
    save()

stop.set()
th.join()
meta["elapsed_s"] = round(time.perf_counter() - T_START, 1)
save()
print("done", meta["elapsed_s"], flush=True)
