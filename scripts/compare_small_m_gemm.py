#!/usr/bin/env python3
"""Measured small-M GEMMs (scripts/device_small_m_gemm.py's CSV) against gpuplan's GEMM model as
`validate --serving` prices them on an H100 with no calibration profile: `CostModel::gemm_time`
(crates/gpuplan-core/src/cost/mod.rs) = max(FLOPs / (peak x gemm_max_fraction x
gemm_shape_factor), bytes / achieved HBM) + kernel_overhead, with the h100-sxm.toml values
(peak bf16 989.4 / fp8 1978.9 TFLOP/s, gemm_max_fraction 0.725, HBM 3350 x 0.905 GB/s, 1 us) at the
sustained clock (no power-solve speedup). `gemm_shape_factor` is re-implemented here line for line
(Hopper tile 128 x 256, split-K below one wave, K ramp 128, normalised at 8192^3).
Caveat: each measured call is timed alone with CUDA events around it, so its time includes the
host's launch of that one call (PyTorch dispatch and cuBLAS launch, the GPU idle meanwhile); calls
under ~60 us are dominated by it and say nothing about the kernel. Usage:
  python3 scripts/compare_small_m_gemm.py calibration/runs/serving-trtllm/small-m-gemm-h100-2026-11-24/small-m-gemm.csv
"""
import csv
import sys

PEAK = {"bf16": 989.4e12, "fp8": 1978.9e12}
GEMM_MAX, HBM, OVERHEAD_US, SMS = 0.725, 3350e9 * 0.905, 1.0, 132


def npow2(x):
    p = 1
    while p < x:
        p *= 2
    return p


def raw(m, n, k):
    fit = lambda d, b: b if d >= b else max(npow2(d), 16)
    tm, tn = fit(m, 128), fit(n, 256)
    tiles = -(-m // tm) * -(-n // tn)
    split = min(SMS // tiles, max(k // 256, 1)) if tiles < SMS else 1
    work = tiles * split
    wave = work / (-(-work // SMS) * SMS)
    pad = m * n / ((-(-m // tm) * tm) * (-(-n // tn) * tn))
    ks = k / split
    return wave * pad * ks / (ks + 128)


def model_us(dtype, m, n, k):
    eff = min(1.0, GEMM_MAX * raw(m, n, k) / raw(8192, 8192, 8192))
    b = 1 if dtype == "fp8" else 2
    compute = 2 * m * n * k / (PEAK[dtype] * eff)
    memory = ((m * k + k * n) * b + m * n * 2) / HBM
    return max(compute, memory) * 1e6 + OVERHEAD_US, "compute" if compute >= memory else "memory"


print(f"{'dtype':<5} {'m':>5} {'n':>6} {'k':>6} {'measured p50 us':>16} {'model us':>9} {'bound':<8} {'measured/model':>14}")
for r in csv.DictReader(l for l in open(sys.argv[1]) if not l.startswith("#")):
    m, n, k = int(r["m"]), int(r["n"]), int(r["k"])
    t, bound = model_us(r["dtype"], m, n, k)
    meas = float(r["time_us_p50"])
    flag = "" if meas >= 60 else "  (launch-dominated)"
    print(f"{r['dtype']:<5} {m:5d} {n:6d} {k:6d} {meas:16.1f} {t:9.1f} {bound:<8} {meas / t:14.2f}{flag}")
