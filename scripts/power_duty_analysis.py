#!/usr/bin/env python3
"""Issue 17: read scripts/power_duty_probe.py's power_duty.json and set each phase beside gpuplan's
power law (crates/gpuplan-core/src/power/mod.rs, `solve`), for GAMMA = 1 ... 4.

Per GEMM-burst phase: the clock the bursts ran at (NVML median over the phase's settled part, and the
burst's bf16 rate / the steady phase's rate per MHz), the power a burst drew (phase mean power less
what the gaps drew, per second of burst), and what the law predicts: the clock s x f_s whose
time-averaged power is the cap, with the gaps drawing the measured gap power (E) or idle_w (as
`power::solve` does), and the exponent the measured (clock, burst power) pair implies:
  (P_burst - idle_w) / (P_cap - idle_w) = (f_burst / f_s)^GAMMA.
Usage: scripts/power_duty_analysis.py power_duty.json [h100-sxm.toml idle_w] > analysis.txt
"""
import json
import math
import sys

d = json.load(open(sys.argv[1]))
idle_w = float(sys.argv[2]) if len(sys.argv) > 2 else 73.5  # calibration/systems/h100-sxm.toml idle_w
ph = {p["phase"]: p for p in d["phases"]}
# NVML's power.draw is a 1 s moving average on Hopper and lags a phase change (after the GEMM the
# averaged reading is still ~240 W while the instantaneous one is ~147 W): use the instantaneous
# field (NVML_FI_DEV_POWER_INSTANT) where the driver gives it.
for p in d["phases"]:
    if p.get("instant_w_mean") == p.get("instant_w_mean") and "instant_w_mean" in p:  # not NaN
        p["power_w_mean"] = p["instant_w_mean"]
cap = d["power_limit_w"]
fmax = d["max_sm_mhz"]
st = ph["steady_bf16"]
fs = st["sm_mhz_median"]
p_s = st["power_w_mean"]
per_mhz = st["tflops_second_half"] / st["sm_mhz_mean"]
gap_w = ph["idle_after_gemm"]["power_w_mean"]
copy = ph.get("copy_only", {})
print(f"# {d['gpu']}, driver {d['driver']}, torch {d['torch']}, {d['date_utc']}; power limit {cap:.0f} W, max SM clock {fmax} MHz")
print(f"steady bf16 8192^3: {st['tflops_second_half']:.1f} TFLOP/s at {fs} MHz (median; mean {st['sm_mhz_mean']:.0f}), {p_s:.1f} W, {per_mhz:.4f} TFLOP/s per MHz")
f8 = ph["steady_fp8"]
print(f"steady fp8  8192^3: {f8['tflops_second_half']:.1f} TFLOP/s at {f8['sm_mhz_median']} MHz, {f8['power_w_mean']:.1f} W")
print(f"idle after work (gap power): {gap_w:.1f} W at {ph['idle_after_gemm']['sm_mhz_median']} MHz; before work {ph['idle_before']['power_w_mean']:.1f} W")
if copy:
    print(f"HBM copy loop: {copy['power_w_mean']:.1f} W at {copy['sm_mhz_median']} MHz")
print()


def solve(gamma, c, g, base_w, m=0.0, m_w=0.0):
    """power::solve for compute c (s at f_s), gap g at base_w, memory m at m_w: the speedup."""
    def p(s):
        tot = c / s + g + m
        return idle_w + (cap - idle_w) * s**gamma * (c / s) / tot + (base_w - idle_w) * g / tot + (m_w - idle_w) * m / tot
    smax = fmax / fs
    if p(smax) <= cap:
        return smax
    lo, hi = 1.0, smax
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if p(mid) <= cap else (lo, mid)
    return lo


print("phase                       duty  burst_MHz(nvml) burst_MHz(rate) P_mean  P_burst  gamma_implied | law's clock, gaps at measured gap power: G=1  G=2  G=3  G=4 | gaps at idle_w: G=2")
for p in d["phases"]:
    if not p["phase"].startswith("burst_"):
        continue
    duty = p["measured_duty"]
    f_rate = p["burst_tflops"] / per_mhz
    tb, tg = p["mean_burst_s"], p["mean_gap_s"]
    other_w = gap_w if "idle" in p["phase"] else copy.get("power_w_mean", gap_w)
    p_burst = (p["power_w_mean"] * (tb + tg) - other_w * tg) / tb
    ratio = (p_burst - idle_w) / (p_s - idle_w)
    g_impl = math.log(ratio) / math.log(f_rate / fs) if f_rate / fs > 1.005 and ratio > 0 else float("nan")
    c = tb * f_rate / fs  # the burst's work as time at f_s
    mem = "copy" in p["phase"]
    preds = []
    for G in (1, 2, 3, 4):
        s = solve(G, c, 0.0 if mem else tg, other_w, tg if mem else 0.0, other_w)
        preds.append(s * fs)
    s_idle = solve(2, c, tg, idle_w) if not mem else solve(2, c, 0.0, idle_w, tg, other_w)
    print(
        f"{p['phase']:27s} {duty:4.2f}  {p['sm_mhz_median']:6.0f}          {f_rate:6.0f}        {p['power_w_mean']:6.1f}  {p_burst:6.1f}  {g_impl:5.2f}         | "
        + "  ".join(f"{x:5.0f}" for x in preds)
        + f" | {s_idle * fs:5.0f}"
    )
