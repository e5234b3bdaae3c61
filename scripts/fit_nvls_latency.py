#!/usr/bin/env python3
"""Fit the NVLS all-reduce latency of `cost::nccl` (issue 20) on the measured 8x H100 NCCL
all-reduce curve of ../shared/reference/collectives_nccl_bandwidth.csv (rows of
github NVIDIA/dgxc-benchmarking @ 841f5466 : nccl/README.md, out-of-place, 1 MiB .. 16 GiB).

The model is `cost::nccl::choose` for an all-reduce of 8 ranks inside one NVLink domain, replicated
here (keep in sync): ring LL / LL128 / Simple with NCCL's baseLat + 2(n-1) x hwLat (NVLink) at
the ring bus bandwidth (h100-sxm `nvlink_busbw_fraction` 0.769 x 450 GB/s, times each protocol's
payload share), and NVLS (one step of latency L, algorithm bandwidth `NVLS_EFFICIENCY` 0.61 x 450
GB/s), the fastest one chosen. L is swept over 0..150 us by 1 us; the criterion is the mean
absolute relative error of the modelled time over the measured points. The output is recorded in
calibration/runs/serving-trtllm/fit_nvls_latency-output.txt.
Usage: python3 scripts/fit_nvls_latency.py [path/to/collectives_nccl_bandwidth.csv]
"""
import csv
import sys

PATH = sys.argv[1] if len(sys.argv) > 1 else "../shared/reference/collectives_nccl_bandwidth.csv"
N = 8
LINK = 450e9
RING_BUSBW = 0.769 * LINK
NVLS_ALGBW = 0.61 * LINK
# (baseLat, hwLat NVLink ring) per protocol, us; payload efficiency
PROTOS = {"LL": (6.6, 0.6, 0.5), "LL128": (14.0, 1.9, 120 / 128), "Simple": (8.4, 3.4, 1.0)}


def model(size, nvls_us):
    factor = 2 * (N - 1) / N
    best = None
    for name, (base, hw, eff) in PROTOS.items():
        t = base + 2 * (N - 1) * hw + size * factor / (RING_BUSBW * eff) * 1e6
        if best is None or t < best[0]:
            best = (t, "ring/" + name)
    t = nvls_us + size / NVLS_ALGBW * 1e6
    if t < best[0]:
        best = (t, "nvls")
    return best


rows = [
    r
    for r in csv.DictReader(open(PATH))
    if r["gpu"].startswith("NVIDIA H100") and r["num_ranks"] == "8" and r["op_mode"] == "out-of-place" and r["size_bytes"]
]
points = [(int(r["size_bytes"]), float(r["time_us"])) for r in rows if int(r["size_bytes"]) >= 1 << 20]
print(f"{len(points)} measured points (8x H100, out-of-place, >= 1 MiB): {PATH}")


def err(L):
    return sum(abs(model(s, L)[0] / t - 1) for s, t in points) / len(points)


grid = [(err(L), L) for L in range(0, 151)]
best_err, best_L = min(grid)
for L in (25, best_L):
    print(f"\nNVLS latency {L} us: MAPE {100 * err(L):.1f}%")
    print(f"{'size':>12} {'measured us':>12} {'model us':>9} {'algo':>12} {'err':>7}")
    for s, t in points:
        m, a = model(s, L)
        print(f"{s:>12} {t:>12.1f} {m:>9.1f} {a:>12} {100 * (m / t - 1):>+6.1f}%")
print("\nsweep (L us: MAPE %):", " ".join(f"{L}:{100 * e:.1f}" for e, L in sorted(grid, key=lambda x: x[1]) if L % 10 == 0))
print(f"optimum: {best_L} us, MAPE {100 * best_err:.1f}% (at NCCL's tuning value 25 us: {100 * err(25):.1f}%)")
