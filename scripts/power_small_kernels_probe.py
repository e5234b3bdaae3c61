#!/usr/bin/env python3
"""Issue 19 (wt-power6): what a stream of small kernels with host gaps draws.

A host-bound eager training step (the `hf-eager` post-fit 7 runs) runs thousands of small kernels,
each launched as the host reaches it. gpuplan's power model (crates/gpuplan-core/src/power/) charges a
memory-bound kernel's whole priced time (its per-launch floor included) at `hbm_load_w` and a GEMM's
time at the dense-GEMM power scaled by the clock. This probe measures, on one GPU, the board power of
controlled streams:
  - elementwise `torch.add(a, b, out=c)` in bf16 on tensors of 1, 4, 16 and 64 MiB, launched from
    Python back to back or with a host spin of 5 or 20 us between launches;
  - bf16 GEMMs of (M, K, N) = (1024, 2048, 2048), (2048, 2048, 6144), (4096, 4096, 4096) with no gap
    and with a 20 us gap; and the 8192^3 GEMM back to back (the capped reference);
  - idle with a context open.
Each phase runs `PHASE_S` seconds; its power is the NVML total-energy counter's difference over the
phase (not the 1 s averaged power.draw); SM clock and utilization are sampled every 10 ms in a thread.
Each kernel's own GPU time is timed separately as a CUDA-graph replay of 200 launches (no host in
it), so the phase's GPU-busy share is launches x graph time / wall, and its bytes (or FLOPs) per
second follow from the launch count. Never changes clocks or power limits.

Writes OUT/small_kernels.json (one object per phase) and OUT/small_kernels_samples.csv.
Usage (device): python3 scripts/power_small_kernels_probe.py OUTDIR
"""
import csv
import json
import os
import sys
import threading
import time

import pynvml
import torch

OUT = sys.argv[1] if len(sys.argv) > 1 else "."
os.makedirs(OUT, exist_ok=True)
PHASE_S = float(os.environ.get("PHASE_S", "1.5"))

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
            u = pynvml.nvmlDeviceGetUtilizationRates(h).gpu
            e = pynvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0
        except pynvml.NVMLError:
            sm, p, u, e = -1, float("nan"), -1, float("nan")
        samples.append((t, phase[0], sm, p, u, e))
        time.sleep(0.01)


def energy_j():
    return pynvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0


def spin(us):
    if us <= 0:
        return
    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass


def graph_time_us(fn, n=200):
    """Per-launch GPU time of fn as a CUDA-graph replay of n launches (no host between kernels)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            fn()
    g.replay()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(5):
        g.replay()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) * 1e3 / (5 * n)


results = []


def run_phase(name, fn, gap_us, kernel_us, bytes_per=0.0, flops_per=0.0):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    time.sleep(0.3)  # let the previous phase's power settle out of the counter's window
    phase[0] = name
    n = 0
    e0, t0 = energy_j(), time.perf_counter()
    while time.perf_counter() - t0 < PHASE_S:
        for _ in range(50):
            fn()
            spin(gap_us)
        n += 50
    torch.cuda.synchronize()
    t1, e1 = time.perf_counter(), energy_j()
    phase[0] = "between"
    wall = t1 - t0
    inside = [x for x in samples if t0 <= x[0] <= t1 and x[1] == name]
    mean = lambda v: sum(v) / len(v) if v else float("nan")
    r = {
        "phase": name,
        "gap_us": gap_us,
        "wall_s": wall,
        "launches": n,
        "launch_period_us": wall * 1e6 / n,
        "kernel_graph_us": kernel_us,
        "gpu_busy_share": min(1.0, n * kernel_us * 1e-6 / wall),
        "bytes_per_kernel": bytes_per,
        "hbm_gb_per_s": n * bytes_per / wall / 1e9,
        "flops_per_kernel": flops_per,
        "tflop_per_s": n * flops_per / wall / 1e12,
        "energy_power_w": (e1 - e0) / wall,
        "sampled_power_w": mean([x[3] for x in inside]),
        "sm_clock_mhz": mean([x[2] for x in inside if x[2] > 0]),
        "gpu_util_pct": mean([x[4] for x in inside if x[4] >= 0]),
        "n_samples": len(inside),
    }
    results.append(r)
    print(json.dumps(r), flush=True)


th = threading.Thread(target=sampler, daemon=True)
th.start()
dev = torch.device("cuda")
torch.backends.cuda.matmul.allow_tf32 = False

# Idle with a context open.
torch.cuda.synchronize()
time.sleep(0.5)
phase[0] = "idle"
e0, t0 = energy_j(), time.perf_counter()
time.sleep(PHASE_S)
t1, e1 = time.perf_counter(), energy_j()
inside = [x for x in samples if t0 <= x[0] <= t1]
results.append({"phase": "idle", "wall_s": t1 - t0, "energy_power_w": (e1 - e0) / (t1 - t0),
                "sm_clock_mhz": sum(x[2] for x in inside) / max(1, len(inside)), "gpu_util_pct": 0})
print(json.dumps(results[-1]), flush=True)

# Elementwise adds: read a and b, write c.
for mib in (1, 4, 16, 64):
    n = mib * 2**20 // 2
    a = torch.randn(n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, device=dev, dtype=torch.bfloat16)
    c = torch.empty_like(a)
    fn = lambda a=a, b=b, c=c: torch.add(a, b, out=c)
    k = graph_time_us(fn)
    for gap in (0, 5, 20):
        run_phase(f"add_{mib}MiB_gap{gap}", fn, gap, k, bytes_per=3 * n * 2)
    del a, b, c

# GEMMs.
for (m, kk, nn) in ((1024, 2048, 2048), (2048, 2048, 6144), (4096, 4096, 4096)):
    x = torch.randn(m, kk, device=dev, dtype=torch.bfloat16)
    w = torch.randn(kk, nn, device=dev, dtype=torch.bfloat16)
    y = torch.empty(m, nn, device=dev, dtype=torch.bfloat16)
    fn = lambda x=x, w=w, y=y: torch.matmul(x, w, out=y)
    k = graph_time_us(fn)
    for gap in (0, 20):
        run_phase(f"gemm_{m}x{kk}x{nn}_gap{gap}", fn, gap, k, bytes_per=2 * (m * kk + kk * nn + m * nn), flops_per=2.0 * m * kk * nn)
    del x, w, y
x = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
w = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
y = torch.empty_like(x)
fn = lambda: torch.matmul(x, w, out=y)
k = graph_time_us(fn, n=20)
run_phase("gemm_8192x8192x8192_gap0", fn, 0, k, bytes_per=3 * 2 * 8192 * 8192, flops_per=2.0 * 8192**3)

stop.set()
th.join()
with open(os.path.join(OUT, "small_kernels.json"), "w") as f:
    json.dump({"gpu": torch.cuda.get_device_name(0), "driver": pynvml.nvmlSystemGetDriverVersion(),
               "torch": torch.__version__, "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "power_limit_w": pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0, "phase_s": PHASE_S,
               "phases": results}, f, indent=1)
with open(os.path.join(OUT, "small_kernels_samples.csv"), "w", newline="") as f:
    wr = csv.writer(f)
    wr.writerow(["t_s", "phase", "sm_clock_mhz", "power_w", "gpu_util_pct", "energy_j"])
    for s in samples:
        wr.writerow(s)
