#!/usr/bin/env python3
"""Issue 20: one serving context (prefill) iteration's parts, timed on the device with the SM clock beside.

A TRT-LLM context iteration on the online fit rows carries 17 prompts x 467 tokens (M = 7,939 tokens).
This probe times, in bf16 with random weights and CUDA events, the per-layer work of such an iteration,
repeated back to back (all layers of the model, iteration after iteration) so the clock settles under
the 700 W cap, while a thread samples NVML (SM clock, power) every 5 ms. It never changes clocks or
power limits.

Phases (each WARM s of warm-up at the shape, then MEAS s measured):
  A. llama8b_tp1: Llama-3.1-8B layer (hidden 4096, 32 q / 8 kv heads, ffn 14336) x 32 layers:
     qkv 4096->6144, causal flash attention (SDPA, 17 x 467, head dim 128), o 4096->4096,
     gate+up 4096->28672, down 14336->4096.
  B. llama70b_tp4_nogap: the TP 4 shard of a Llama-3.1-70B layer (hidden 8192, 16 q / 2 kv heads per
     rank, ffn shard 7168) x 80 layers: qkv 8192->2560, attention, o 2048->8192, gate+up 8192->14336,
     down 7168->8192; no all-reduce.
  C. llama70b_tp4_idlegap: B with, after o and after down, an idle gap of GAP_US (torch.cuda._sleep, a
     one-thread spin kernel: the SMs idle, as they would while an NVLink all-reduce of M x 8192 x 2
     bytes runs; measured by events).
  D. llama70b_tp4_copygap: B with the gaps filled by an HBM copy of the all-reduce's bytes
     (M x 8192 x 2 = 130 MB read + written, a stand-in for the all-reduce's memory traffic).
Also each GEMM alone, steady for 1.5 s (E.*), for the per-shape rate at the settled clock.

Writes OUT/ctx_probe.json (per-phase summaries) and OUT/ctx_samples.csv (every NVML sample).
Usage (device): python3 scripts/context_iteration_probe.py OUTDIR
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

OUT = sys.argv[1] if len(sys.argv) > 1 else "."
os.makedirs(OUT, exist_ok=True)
WARM, MEAS = 2.0, 2.5
B, S, D = 17, 467, 128
M = B * S
GAP_US = float(os.environ.get("GAP_US", "500"))

pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
INSTANT = getattr(pynvml, "NVML_FI_DEV_POWER_INSTANT", None)
samples = []
phase = ["start"]
stop = threading.Event()


def sampler():
    while not stop.is_set():
        t = time.perf_counter()
        try:
            sm = pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
            p = pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0
            inst = float("nan")
            if INSTANT is not None:
                v = pynvml.nvmlDeviceGetFieldValues(h, [INSTANT])[0]
                if v.nvmlReturn == 0:
                    inst = v.value.uiVal / 1000.0
            temp = pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
        except Exception:  # noqa: BLE001
            time.sleep(0.005)
            continue
        samples.append((t, phase[0], sm, p, inst, temp))
        time.sleep(0.005)


def window(t0, t1):
    s = [x for x in samples if t0 <= x[0] <= t1]
    if not s:
        return {}
    med = lambda v: sorted(v)[len(v) // 2]
    return {
        "nvml_samples": len(s),
        "sm_mhz_median": med([x[2] for x in s]),
        "sm_mhz_mean": sum(x[2] for x in s) / len(s),
        "power_w_mean": sum(x[3] for x in s) / len(s),
        "instant_w_mean": sum(x[4] for x in s) / len(s),
        "temp_c_max": max(x[5] for x in s),
    }


def info():
    d = {
        "gpu": pynvml.nvmlDeviceGetName(h),
        "driver": pynvml.nvmlSystemGetDriverVersion(),
        "power_limit_w": pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
        "max_sm_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
        "torch": torch.__version__,
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "M": M, "B": B, "S": S, "gap_us": GAP_US,
    }
    return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in d.items()}


def make_layer(hidden, q_heads, kv_heads, qkv_out, o_in, gu_out, down_in):
    dt = torch.bfloat16
    x = torch.randn(M, hidden, device="cuda", dtype=dt)
    w = {
        "qkv": torch.randn(qkv_out, hidden, device="cuda", dtype=dt) * 0.02,
        "o": torch.randn(hidden, o_in, device="cuda", dtype=dt) * 0.02,
        "gate_up": torch.randn(gu_out, hidden, device="cuda", dtype=dt) * 0.02,
        "down": torch.randn(hidden, down_in, device="cuda", dtype=dt) * 0.02,
    }
    # attention operands in (B, H, S, D) views of token-major tensors, as a fused qkv output would give;
    # kv already broadcast to the q heads (the FMHA's work per q head is the same).
    q = torch.randn(B, S, q_heads, D, device="cuda", dtype=dt).transpose(1, 2)
    k = torch.randn(B, S, q_heads, D, device="cuda", dtype=dt).transpose(1, 2)
    v = torch.randn(B, S, q_heads, D, device="cuda", dtype=dt).transpose(1, 2)
    a_in = torch.randn(M, o_in, device="cuda", dtype=dt)
    m_in = torch.randn(M, down_in, device="cuda", dtype=dt)
    outs = {
        "qkv": torch.empty(M, qkv_out, device="cuda", dtype=dt),
        "o": torch.empty(M, hidden, device="cuda", dtype=dt),
        "gate_up": torch.empty(M, gu_out, device="cuda", dtype=dt),
        "down": torch.empty(M, hidden, device="cuda", dtype=dt),
    }
    ops = [
        ("qkv", lambda: torch.matmul(x, w["qkv"].t(), out=outs["qkv"]), 2.0 * M * hidden * qkv_out),
        ("attn", lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
         # causal: half of the S x S score and PV products, per sequence and q head
         4.0 * B * q_heads * D * S * S / 2),
        ("o", lambda: torch.matmul(a_in, w["o"].t(), out=outs["o"]), 2.0 * M * o_in * hidden),
        ("gate_up", lambda: torch.matmul(x, w["gate_up"].t(), out=outs["gate_up"]), 2.0 * M * hidden * gu_out),
        ("down", lambda: torch.matmul(m_in, w["down"].t(), out=outs["down"]), 2.0 * M * down_in * hidden),
    ]
    return ops, hidden


results = []
copy_src = torch.empty(M * 8192, device="cuda", dtype=torch.bfloat16)
copy_dst = torch.empty_like(copy_src)
SLEEP_CYCLES = int(GAP_US * 1e-6 * 1.98e9)  # the spin counts clock64 cycles; the gap is measured anyway


def gap(kind):
    if kind == "idle":
        torch.cuda._sleep(SLEEP_CYCLES)
    elif kind == "copy":
        copy_dst.copy_(copy_src)


def run_phase(name, ops, layers, gap_kind=None):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    phase[0] = name
    names = [n for n, _, _ in ops] + (["gap"] if gap_kind else [])
    acc = {n: 0.0 for n in names}
    flop_layer = sum(f for _, _, f in ops)
    iters = []
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        tm = t0 + WARM
        while time.perf_counter() - t0 < WARM + MEAS:
            measuring = time.perf_counter() >= tm
            it0 = torch.cuda.Event(enable_timing=True)
            it1 = torch.cuda.Event(enable_timing=True)
            evs = []
            it0.record()
            for _ in range(layers):
                for n, fn, _ in ops:
                    if measuring:
                        e0 = torch.cuda.Event(enable_timing=True); e0.record()
                    fn()
                    if measuring:
                        e1 = torch.cuda.Event(enable_timing=True); e1.record(); evs.append((n, e0, e1))
                    if gap_kind and n in ("o", "down"):
                        if measuring:
                            g0 = torch.cuda.Event(enable_timing=True); g0.record()
                        gap(gap_kind)
                        if measuring:
                            g1 = torch.cuda.Event(enable_timing=True); g1.record(); evs.append(("gap", g0, g1))
            it1.record()
            it1.synchronize()
            if measuring:
                iters.append(it0.elapsed_time(it1) / 1e3)
                for n, a, b in evs:
                    acc[n] += a.elapsed_time(b) / 1e3
    t1 = time.perf_counter()
    ni = len(iters)
    per_layer = {n: acc[n] / ni / layers for n in names}
    r = {
        "phase": name, "layers": layers, "measured_iterations": ni,
        "iteration_s_mean": sum(iters) / ni,
        "per_layer_s": per_layer,
        "tflops": {n: f / per_layer[n] / 1e12 for n, _, f in ops},
        "layer_tflops_busy": flop_layer / sum(per_layer[n] for n, _, _ in ops) / 1e12,
        "busy_fraction": sum(per_layer[n] for n, _, _ in ops) * layers / (sum(iters) / ni),
    }
    r.update(window(tm, t1))
    results.append(r)
    print(json.dumps(r), flush=True)


def steady_op(name, fn, flop, seconds=1.5):
    phase[0] = name
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    rec = []
    while time.perf_counter() - t0 < seconds:
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(20):
            fn()
        e1.record(); e1.synchronize()
        rec.append((time.perf_counter(), e0.elapsed_time(e1) / 1e3 / 20))
    t1 = time.perf_counter()
    half = [dt for t, dt in rec if t > t0 + seconds / 2]
    per = sum(half) / len(half)
    r = {"phase": name, "call_s": per, "tflops": flop / per / 1e12}
    r.update(window(t0 + seconds / 2, t1))
    results.append(r)
    print(json.dumps(r), flush=True)


th = threading.Thread(target=sampler, daemon=True)
th.start()
meta = info()
print(json.dumps(meta), flush=True)
phase[0] = "idle_before"
t = time.perf_counter(); time.sleep(1.0)
results.append(dict(phase="idle_before", **window(t, time.perf_counter())))

ops8, _ = make_layer(4096, 32, 8, 6144, 4096, 28672, 14336)
run_phase("llama8b_tp1", ops8, 32)
ops70, _ = make_layer(8192, 16, 2, 2560, 2048, 14336, 7168)
run_phase("llama70b_tp4_nogap", ops70, 80)
run_phase("llama70b_tp4_idlegap", ops70, 80, "idle")
run_phase("llama70b_tp4_copygap", ops70, 80, "copy")
from torch.nn.attention import SDPBackend, sdpa_kernel
with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
    for tag, ops in (("8b", ops8), ("70b", ops70)):
        for n, fn, f in ops:
            steady_op(f"steady_{tag}_{n}", fn, f)
# the copy gap alone (its time and power), and a 20 ms idle (what a gap draws)
steady_op("steady_copy_allreduce_bytes", lambda: gap("copy"), 0.0)
stop.set(); th.join()

with open(os.path.join(OUT, "ctx_probe.json"), "w") as f:
    json.dump({"meta": meta, "results": results}, f, indent=1)
with open(os.path.join(OUT, "ctx_samples.csv"), "w", newline="") as f:
    wr = csv.writer(f)
    wr.writerow(["t_s", "phase", "sm_mhz", "power_w", "instant_w", "temp_c"])
    for s in samples:
        wr.writerow([f"{s[0]:.4f}", *s[1:]])
print("done", flush=True)
