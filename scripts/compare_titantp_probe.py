#!/usr/bin/env python3
"""Set the H100 torchtitan TP-8 kernel probe (calibration/runs/raw/titantp-h100-2026-11-25/) beside
what gpuplan prices on the same GPU (dgx-h100, its shipped H100 profile).

For each model (Llama 3 8B, micro-batch 12; Llama 3 70B, micro-batch 16; seq 8192; TP 8 with SP,
torch-compile, bf16 or fp8 tensorwise, torchtitan's per-op selective checkpointing so that the
linears stay unfused) runs `gpuplan simulate --system dgx-h100 --trace` and reads each linear's
first forward GEMM and its two backward GEMMs (data, then weight gradient) and the layout copies
(`sp_layout_copy`) from the compute stream, with the power model's solved SM clock. A
compute-bound GEMM's priced time is taken to the probe's measured clock by the clock ratio
(solved / measured); the copies and the memory-bound k/v projections are compared as they are.

Usage: python3 scripts/compare_titantp_probe.py [path/to/gpuplan]
"""
import csv, json, os, re, subprocess, sys, tempfile

BIN = sys.argv[1] if len(sys.argv) > 1 else "target/debug/gpuplan"
RAW = "calibration/runs/raw/titantp-h100-2026-11-25/titantp_kernels.csv"
NAMES = {"wq": "q_proj", "wk": "k_proj", "wo": "out_proj", "w1": "gate_proj", "w2": "down_proj"}
CFG = {"llama-3-8b": 12, "llama-3-70b": 16}
# As the published rows run them (the 70B under full AC; per-op SAC does not fit it on 80 GB,
# `simulate` still prices it and exits 1).
RECOMPUTE = {"llama-3-8b": "selective-op", "llama-3-70b": "full"}


def priced(model, mb, prec):
    with tempfile.TemporaryDirectory() as d:
        tr = os.path.join(d, "t.json")
        out = subprocess.run([BIN, "simulate", "--model", model, "--system", "dgx-h100", "--gpus", "64", "--tp", "8", "--dp", "8",
                              "--zero", "3", "--fsdp-param-dtype", "bf16", "--mode", "train", "--micro-batch", str(mb), "--global-batch", str(8 * mb),
                              "--seq", "8192", "--precision", prec] + (["--fp8-recipe", "tensorwise"] if prec == "fp8" else []) +
                             ["--stack", "torch-compile", "--recompute", RECOMPUTE[model], "--trace", tr], capture_output=True, text=True).stdout
        clock = float(re.search(r"at (\d+) MHz", out).group(1))
        ev = [e for e in json.load(open(tr))["traceEvents"] if e.get("ph") == "X" and e.get("tid") == 0]
    fwd, bwd = {}, {}
    half = len(ev) // 2
    for i, e in enumerate(ev):
        n = e["name"]
        if n not in fwd:
            fwd[n] = e["dur"]
    # Backward: a linear's two GEMMs in a row (data gradient, then weight gradient) in the second half.
    for i in range(half, len(ev) - 1):
        n = ev[i]["name"]
        if n in NAMES.values() and ev[i + 1]["name"] == n and n not in bwd:
            bwd[n] = (ev[i]["dur"], ev[i + 1]["dur"])
    copies = sorted({round(e["dur"], 1) for e in ev if e["name"] == "sp_layout_copy"})
    return clock, fwd, bwd, copies


rows = list(csv.DictReader(open(RAW)))
print("model        linear gemm   variant               measured_us  MHz   priced_us@solved  MHz   priced_at_measured_clock  measured/priced")
ratios = {}
for model, mb in CFG.items():
    for prec, variant in (("bf16", "bf16_mm"), ("fp8", "scaled_mm_tensorwise")):
        clock, fwd, bwd, copies = priced(model, mb, prec)
        for r in rows:
            if r["kind"] != "gemm" or r["model"] != model or r["variant"] != variant or int(r["m_tokens"]) != mb * 8192:
                continue
            op = NAMES[r["linear"]]
            t = {"fwd": fwd.get(op), "dgrad": bwd.get(op, (None, None))[0], "wgrad": bwd.get(op, (None, None))[1]}[r["gemm"]]
            if t is None:
                continue
            meas, f = float(r["time_us"]), float(r["sm_clock_mhz"])
            m, n, k = int(r["m"]), int(r["n"]), int(r["k"])
            memory_bound = min(n, k, m) <= 128
            at = t if memory_bound else t * clock / f
            ratio = meas / at
            ratios.setdefault((model, variant), []).append(ratio)
            print(f"{model:12s} {r['linear']:6s} {r['gemm']:6s} {variant:21s} {meas:10.1f} {f:6.0f} {t:14.1f} {clock:7.0f} {at:20.1f}{' (memory)' if memory_bound else '         '} {ratio:8.3f}")
        if prec == "bf16":
            lay = [r for r in rows if r["kind"] == "layout" and r["model"] == model]
            for r in lay:
                print(f"{model:12s} {r['linear']:24s} {r['gemm']:5s} measured {float(r['time_us']):9.1f} us; gpuplan's sp_layout_copy at this size: {copies}")
for key, v in ratios.items():
    v = sorted(v)
    print(key, "median measured/priced", round(v[len(v) // 2], 3), "range", round(v[0], 3), "-", round(v[-1], 3), "n", len(v))
