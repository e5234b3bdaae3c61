#!/usr/bin/env python3
"""Issue 19 (wt-power6): read scripts/power_small_kernels_probe.py's output against gpuplan's power rules.

Usage: python3 scripts/power_small_kernels_analysis.py calibration/runs/raw/power-small-kernels-h100-2026-11-24
Prints, per phase, the measured excess over idle (NVML energy counter) and what these rules give:
  - elementwise adds, priced as gpuplan prices a memory-bound kernel (bytes at the profile's stream
    rate + the profile's per-launch floor): `time` charges the priced time at hbm_load_w (the rule
    before), `bytes` only the bytes' time at stream rate (the per-launch floor drawing idle); the
    ratio measured / `bytes` is the share of HBM-streaming power the kernel's bytes draw;
  - GEMMs: the tensor power law (TDP - idle) (f / f_s)^2 over the GEMM's busy time, before and with
    its FLOP rate over the 8192^3 GEMM's at the same clock (`flops`).
The profile numbers are calibration/profiles/h100-sxm-1x/profile.toml's (the same lent H100 kind).
"""
import json
import sys

D = sys.argv[1] if len(sys.argv) > 1 else "calibration/runs/raw/power-small-kernels-h100-2026-11-24"
P = json.load(open(f"{D}/small_kernels.json"))
# calibration/profiles/h100-sxm-1x/profile.toml
STREAM_BPS = 3006.2414170721568e9
FLOOR_S = 3.7520707181069706e-6  # kernel_launch_us
HBM_LOAD_W = 509.8194033613444
TDP = 700.0
F_S = 1380.5042016806722
L2_BYTES = 50 * 2**20  # calibration/systems/h100-sxm.toml
ph = {r["phase"]: r for r in P["phases"]}
idle = ph["idle"]["energy_power_w"]
ref = ph["gemm_8192x8192x8192_gap0"]
ref_rate = ref["tflop_per_s"] / ref["sm_clock_mhz"]  # TFLOP/s per MHz of the big GEMM
print(f"{P['gpu']}, driver {P['driver']}, {P['utc']}; idle {idle:.1f} W; phases of {P['phase_s']} s")
print("phase                        period_us  busy  clock  meas_excess_W | time_rule  bytes_rule  meas/bytes | flops_share  law  law*flops")
shares = []
for r in P["phases"]:
    if r["phase"] == "idle":
        continue
    exc = r["energy_power_w"] - idle
    per = r["launch_period_us"] * 1e-6
    line = f"{r['phase']:<28} {r['launch_period_us']:8.1f}  {r['gpu_busy_share']:.2f}  {r['sm_clock_mhz']:5.0f}  {exc:8.1f}     |"
    if r["phase"].startswith("add"):
        b = r["bytes_per_kernel"]
        t_bytes = b / STREAM_BPS
        t_priced = t_bytes + FLOOR_S
        time_rule = min(1.0, t_priced / per) * (HBM_LOAD_W - idle)
        bytes_rule = min(1.0, t_bytes / per) * (HBM_LOAD_W - idle)
        ratio = exc / bytes_rule
        fits = b <= L2_BYTES / 2
        if fits:
            shares.append((r["phase"], ratio))
        line += f" {time_rule:8.1f}  {bytes_rule:9.1f}   {ratio:6.2f}{'  (bytes <= L2/2)' if fits else ''}"
    else:
        s = r["sm_clock_mhz"] / F_S
        busy = r["gpu_busy_share"]
        rate = r["tflop_per_s"] / busy / r["sm_clock_mhz"]
        share = min(1.0, rate / ref_rate)
        law = busy * (TDP - idle) * s**2
        line += f"                                   | {share:8.2f}  {law:6.1f}  {law * share:6.1f}"
        if r["sm_clock_mhz"] > 0.97 * 1980:
            line += "  (uncapped)"
    print(line)
if shares:
    v = [x for _, x in shares]
    print(f"L2-resident adds (bytes per launch <= half the L2): measured / bytes rule {min(v):.2f}-{max(v):.2f}, mean {sum(v) / len(v):.3f} over {', '.join(n for n, _ in shares)}")
