#!/usr/bin/env python3
"""Issue 17: does an H100's SM clock under its power cap follow gpuplan's power law (power::solve)?

The power model (crates/gpuplan-core/src/power/mod.rs) says: a dense GEMM held at the sustained clock
f_s draws TDP; tensor-core power above idle scales as (f / f_s)^GAMMA (GAMMA = 2); memory-bound time
draws `hbm_load_w`; idle time idle power; and the clock is the highest one whose power *averaged over
the step* stays within TDP. So a GEMM that runs only part of the time should clock higher while it
runs: at duty 0.8 (GEMM 80% of the time at f_s, idle the rest) GAMMA = 2 gives 1.13 f_s, GAMMA = 1
gives 1.33 f_s.

This probe never changes clocks or power limits; it only reads them through NVML while it runs:
  A. a steady bf16 GEMM (8192^3) for 30 s: sustained clock, power, TFLOP/s;
  B. a steady FP8 GEMM (torch._scaled_mm, 8192^3, per-tensor scales) for 20 s;
  C. bf16 GEMM bursts with idle gaps (host sleeps after a sync) at duty 0.9 / 0.8 / 0.7 / 0.5 and a
     50 ms period, and duty 0.8 at a 1 s period (the controller's averaging window);
  D. bf16 GEMM bursts alternating with HBM copies (2 GiB copy_) at about equal / one-third time;
  E. idle-gap power: the host sleeps 3 s after work (what a gap draws).
Each burst's GEMM rate is timed with CUDA events (the clock it ran at, compute-bound); NVML is sampled
every 5 ms in a thread (SM clock, power.draw averaged and, where the driver has it, instantaneous).

Writes OUT/power_duty.json (per-phase summaries) and OUT/power_duty_samples.csv (every NVML sample).
Usage (device): python3 scripts/power_duty_probe.py OUTDIR
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
N = 8192
FLOP = 2.0 * N * N * N

pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
INSTANT = getattr(pynvml, "NVML_FI_DEV_POWER_INSTANT", None)
THROTTLE = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons

samples = []  # (t, phase, sm_mhz, power_w, instant_w, temp_c, throttle)
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
            thr = THROTTLE(h)
        except Exception:  # noqa: BLE001 - a failed read skips one sample
            time.sleep(0.005)
            continue
        samples.append((t, phase[0], sm, p, inst, temp, thr))
        time.sleep(0.005)


def info():
    d = {
        "gpu": pynvml.nvmlDeviceGetName(h),
        "driver": pynvml.nvmlSystemGetDriverVersion(),
        "power_limit_w": pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
        "max_sm_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
        "torch": torch.__version__,
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in d.items()}


a = torch.randn(N, N, device="cuda", dtype=torch.bfloat16)
b = torch.randn(N, N, device="cuda", dtype=torch.bfloat16)
c = torch.empty(N, N, device="cuda", dtype=torch.bfloat16)
a8 = a.to(torch.float8_e4m3fn)
b8 = b.to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm wants its second operand
one = torch.ones((), device="cuda")
src = torch.empty(2 * 1024**3 // 2, device="cuda", dtype=torch.bfloat16)
dst = torch.empty_like(src)


def gemm():
    torch.matmul(a, b, out=c)


def gemm8():
    torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def copy():
    dst.copy_(src)


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


results = []


def steady(name, fn, flop, seconds):
    phase[0] = name
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    ev = []
    while time.perf_counter() - t0 < seconds:
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(20):
            fn()
        e1.record()
        e1.synchronize()
        ev.append((time.perf_counter(), e0.elapsed_time(e1) / 1e3 / 20))
    t1 = time.perf_counter()
    half = [dt for (t, dt) in ev if t > t0 + seconds / 2]
    per_call = sum(half) / len(half)
    r = {"phase": name, "seconds": t1 - t0, "tflops_second_half": flop / per_call / 1e12, "call_s_second_half": per_call}
    r.update(window(t0 + seconds / 2, t1))
    results.append(r)
    print(json.dumps(r), flush=True)


def bursts(name, duty, period, seconds, other=None):
    """GEMM bursts of duty x period; the rest of each period idle (host sleep) or `other` kernels."""
    phase[0] = name
    torch.cuda.synchronize()
    n = max(1, round(duty * period / 1.6e-3))  # 8192^3 bf16 ~1.6 ms at the cap
    t0 = time.perf_counter()
    rec = []
    while time.perf_counter() - t0 < seconds:
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(n):
            gemm()
        e1.record()
        if other is None:
            e1.synchronize()
            tb = e0.elapsed_time(e1) / 1e3
            time.sleep(max(0.0, tb * (1 - duty) / duty))
            to = tb * (1 - duty) / duty
        else:
            e2 = torch.cuda.Event(enable_timing=True)
            m = max(1, round((1 - duty) * period / other[1]))
            for _ in range(m):
                other[0]()
            e2.record()
            e2.synchronize()
            tb = e0.elapsed_time(e1) / 1e3
            to = e1.elapsed_time(e2) / 1e3
        rec.append((time.perf_counter(), tb, to, n))
    t1 = time.perf_counter()
    half = [x for x in rec if x[0] > t0 + seconds / 3]
    tb = sum(x[1] for x in half)
    to = sum(x[2] for x in half)
    r = {
        "phase": name,
        "target_duty": duty,
        "period_s": period,
        "gemms_per_burst": n,
        "burst_tflops": FLOP * sum(x[3] for x in half) / tb / 1e12,
        "measured_duty": tb / (tb + to),
        "mean_burst_s": tb / len(half),
        "mean_gap_s": to / len(half),
    }
    r.update(window(t0 + seconds / 3, t1))
    results.append(r)
    print(json.dumps(r), flush=True)


def idle_gap(name, seconds):
    phase[0] = name
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    time.sleep(seconds)
    r = {"phase": name}
    r.update(window(t0, time.perf_counter()))
    results.append(r)
    print(json.dumps(r), flush=True)


th = threading.Thread(target=sampler, daemon=True)
th.start()
meta = info()
print(json.dumps(meta), flush=True)
for _ in range(5):
    gemm()
    gemm8()
torch.cuda.synchronize()
idle_gap("idle_before", 2)
steady("steady_bf16", gemm, FLOP, 30)
idle_gap("idle_after_gemm", 3)
steady("steady_fp8", gemm8, FLOP, 20)
# time of one copy at ~3 TB/s: 2 GiB read + 2 GiB write
copy_s = 2 * 2 * 1024**3 / 2.9e12
for d in (0.9, 0.8, 0.7, 0.5):
    bursts(f"burst_idle_d{d}_p50ms", d, 0.05, 14)
bursts("burst_idle_d0.8_p1s", 0.8, 1.0, 16)
bursts("burst_copy_d0.5_p50ms", 0.5, 0.05, 14, other=(copy, copy_s))
bursts("burst_copy_d0.75_p50ms", 0.75, 0.05, 14, other=(copy, copy_s))
steady("copy_only", copy, 0.0, 12)
stop.set()
th.join()
meta["phases"] = results
with open(os.path.join(OUT, "power_duty.json"), "w") as f:
    json.dump(meta, f, indent=1)
with open(os.path.join(OUT, "power_duty_samples.csv"), "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["t_s", "phase", "sm_clock_mhz", "power_w", "power_instant_w", "temp_c", "throttle_reasons"])
    t00 = samples[0][0] if samples else 0.0
    for s in samples:
        w.writerow([f"{s[0] - t00:.4f}", s[1], s[2], f"{s[3]:.2f}", f"{s[4]:.2f}", s[5], s[6]])
print("done", len(samples), "samples", flush=True)
