#!/usr/bin/env python3
"""Set the H100 TP-shard probe (scripts/tpshard_probe.py) beside what gpuplan prices, at the same clock.

For every measured shard GEMM (model, TP, op, M) runs `gpuplan simulate --system dgx-h100 --stack
trtllm` (the engines' TP deployment: no sequence parallelism) at that TP and M rows (decode
`--batch M --kv-len 128` up to M = 2048, prefill `--batch 1 --seq M` above) with `--trace`, and
takes the op's priced time per call (qkv_proj, out_proj, up_proj, down_proj; Mixtral's experts are
priced as a grouped GEMM, so its expert shards are left out) at the power model's solved clock.
The priced op is taken to the clock the probe measured by the clock law the binary prices with
(`--law`): `clocked` (CostModel::clocked, this branch on): time(s) = fixed + (c + o - fixed) / s,
fixed = o + (max(c u, m) - c u) / (1 - u), with c the compute time at the sustained clock, m the
bytes at the profile's HBM rate, o the kernel overhead, u = sustained / top clock and s the clock
over the sustained one; `linear` (before): time(s) = (c + o) / s for a compute-bound op. The script
reads c back from the traced time at the solved clock by inverting the law, and m from the shape.
A memory-bound op (c < m) is bytes / HBM + o at every clock. Under `clocked`, an op traced at the
top clock whose floor binds (time = m + o) does not give c back (it lies in [m, m / u]): its time
at the measured clock is shown as the middle of that range, marked `~`.
For decode attention, runs the Llama-3.1 70B (8 query heads per KV head) or 405B (16) decode step
at the TP that gives that many KV heads per rank, batch and cache length, and compares the priced
`attention` op with the SDPA flash stand-in over the FP8 cache's bytes.

Usage: python3 scripts/compare_tpshard_probe.py PROBE_JSON [path/to/gpuplan] [--law clocked|linear]
"""
import collections
import json
import os
import re
import subprocess
import sys
import tempfile

args = [a for a in sys.argv[1:] if not a.startswith("--law")]
LAW = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--law=")), "clocked")
PROBE = args[0]
BIN = args[1] if len(args) > 1 else "target/debug/gpuplan"
MODEL = {"70b": "llama-3.1-70b", "405b": "llama-3.1-405b", "mixtral8x22b": "mixtral-8x22b"}
OPS = {"qkv": "qkv_proj", "o": "out_proj", "gate_up": "up_proj", "down": "down_proj"}
PREC = {"fp8": "fp8", "bf16": "bf16"}
_cache = {}


def sources(model, tp, prec):
    out = subprocess.run([BIN, "predict", "--model", model, "--system", "dgx-h100", "--gpus", str(tp), "--tp", str(tp), "--sp", "false",
                          "--mode", "decode", "--batch", "16", "--kv-len", "128", "--precision", prec, "--stack", "trtllm", "--sources"],
                         capture_output=True, text=True, check=True).stdout
    num = lambda key: float(re.search(rf"^\s*{key}\s+([0-9.]+)", out, re.M).group(1))
    # The clocks the power model solves between: the profile's (analytic::power_gpu).
    prof = open("calibration/profiles/h100-sxm-1x/profile.toml").read()
    clock = lambda key: float(re.search(rf"^{key}\s*=\s*([0-9.]+)", prof, re.M).group(1))
    return num(r"hbm_bandwidth_gb_per_s \(achieved\)") * 1e9, num("kernel_overhead_us") * 1e-6, clock("gemm_clock_mhz"), clock("max_clock_mhz")


HBM, OVERHEAD, F_SUSTAINED, F_TOP = sources("llama-3.1-70b", 8, "fp8")
U = F_SUSTAINED / F_TOP


def law(c, m, s):
    """The op's time at s x the sustained clock (c: compute at the sustained clock, m: bytes' time)."""
    if c < m:
        return m + OVERHEAD
    if LAW == "linear":
        return (c + OVERHEAD) / s
    fixed = OVERHEAD + (max(c * U, m) - c * U) / (1 - U)
    return fixed + (c + OVERHEAD - fixed) / s


def invert(t, m, s):
    """c from the traced time t at s x the sustained clock; None where it cannot be told (see doc)."""
    if abs(t - (m + OVERHEAD)) < 0.05e-6:
        return "memory" if s * F_SUSTAINED < F_TOP - 1 or LAW == "linear" else None
    lo, hi = m, 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if law(mid, m, s) < t:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def priced(model, tp, prec, m=None, batch=None, kv=128):
    if m is not None:
        mode = ["--mode", "decode", "--batch", str(m), "--kv-len", "128"] if m <= 2048 else ["--mode", "prefill", "--batch", "1", "--seq", str(m)]
    else:
        mode = ["--mode", "decode", "--batch", str(batch), "--kv-len", str(kv)]
    key = (model, tp, prec, tuple(mode))
    if key in _cache:
        return _cache[key]
    with tempfile.TemporaryDirectory() as d:
        tr = os.path.join(d, "t.json")
        run = subprocess.run([BIN, "simulate", "--model", model, "--system", "dgx-h100", "--gpus", str(tp), "--tp", str(tp), "--sp", "false",
                              *mode, "--precision", prec, "--stack", "trtllm", "--trace", tr], capture_output=True, text=True)
        if run.returncode != 0:
            _cache[key] = None
            return None
        ev = json.load(open(tr))
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    agg = collections.defaultdict(lambda: [0, 0.0])
    for e in ev:
        if e.get("ph") == "X" and e.get("pid", 0) == 0:
            agg[e["name"]][0] += 1
            agg[e["name"]][1] += e["dur"]
    mhz = float(re.search(r"power .* at (\d+) MHz", run.stdout).group(1))
    _cache[key] = ({n: t / c for n, (c, t) in agg.items()}, mhz)
    return _cache[key]


res = json.load(open(PROBE))["results"]
rows = []
print("== shard GEMMs: measured (cuBLASLt, CUDA graph, weights cycled past L2) vs priced (dgx-h100, trtllm, profile h100-sxm-1x)")
print(f"   priced@f: the priced op at the measured clock by the `{LAW}` clock law (sustained {F_SUSTAINED:.0f} MHz, top {F_TOP:.0f} MHz)")
hdr = f"{'shape':17} {'op':7} {'dtype':8} {'M':>6} {'k':>6} {'n':>6} {'meas us':>9} {'MHz':>5} {'priced':>8} {'solved':>6} {'bound':>7} {'priced@f':>9} {'meas/priced@f':>13}"
print(hdr)
for r in res:
    if r.get("kind") != "gemm" or "call_us" not in r:
        continue
    fam, tp = r["tag"].rsplit("_tp", 1)
    tp = int(tp)
    model = MODEL[fam]
    if fam == "mixtral8x22b" and r["op"] in ("gate_up", "down"):
        continue
    p = priced(model, tp, PREC[r["dtype"]], m=r["m"])
    if p is None:
        continue
    ops, mhz = p
    t = ops.get(OPS[r["op"]])
    if t is None:
        continue
    t *= 1e-6
    eb = 1 if r["dtype"] == "fp8" else 2
    mem = ((r["m"] * r["k"] + r["k"] * r["n"]) * eb + r["m"] * r["n"] * 2) / HBM
    c = invert(t, mem, mhz / F_SUSTAINED)
    s_meas = r["sm_mhz_median"] / F_SUSTAINED
    mark = " "
    if c == "memory":
        bound, at = "memory", mem + OVERHEAD
    elif c is None:  # floor-bound at the top clock: c in [m, m / u]
        bound, mark = "floor", "~"
        at = 0.5 * (law(mem, mem, s_meas) + law(mem / U, mem, s_meas))
    else:
        bound, at = "compute", law(c, mem, s_meas)
    ratio = r["call_us"] * 1e-6 / at
    dt = r["dtype"] + ("+fa" if r.get("fast_accum") else "")
    rows.append((r["tag"], r["op"], dt, r["m"], ratio, bound))
    print(f"{r['tag']:17} {r['op']:7} {dt:8} {r['m']:6} {r['k']:6} {r['n']:6} {r['call_us']:9.1f} {r['sm_mhz_median']:5} {t * 1e6:8.1f} {mhz:6.0f} {bound:>7} {at * 1e6:8.1f}{mark} {ratio:13.2f}")

print("\n== summary: geometric mean of measured / priced-at-the-measured-clock, by M band (FP8, no fast accumulate)")
bands = [(16, 128), (256, 1024), (2048, 2048), (4096, 16384)]
import math
print(f"{'shape':17} " + " ".join(f"{f'M {a}-{b}':>12}" for a, b in bands))
for tag in dict.fromkeys(x[0] for x in rows):
    cells = []
    for a, b in bands:
        v = [x[4] for x in rows if x[0] == tag and x[2] == "fp8" and a <= x[3] <= b]
        cells.append(f"{math.exp(sum(map(math.log, v)) / len(v)):12.2f}" if v else f"{'':>12}")
    print(f"{tag:17} " + " ".join(cells))
for dt in ("fp8", "bf16"):
    for a, b in bands + [(16, 16384)]:
        v = [x[4] for x in rows if x[2] == dt and a <= x[3] <= b]
        if v:
            print(f"all {dt} shapes, M {a}-{b}: n = {len(v)}, geometric mean {math.exp(sum(map(math.log, v)) / len(v)):.3f}, "
                  f"mean |measured / priced - 1| {100 * sum(abs(x - 1) for x in v) / len(v):.1f}%")
print("(bf16)")
for tag in dict.fromkeys(x[0] for x in rows):
    cells = []
    for a, b in bands:
        v = [x[4] for x in rows if x[0] == tag and x[2] == "bf16" and a <= x[3] <= b]
        cells.append(f"{math.exp(sum(map(math.log, v)) / len(v)):12.2f}" if v else f"{'':>12}")
    print(f"{tag:17} " + " ".join(cells))

print("\n== decode attention (us per layer): SDPA flash over a bf16 cache of half the context (the FP8 cache's bytes) vs priced XQA")
print(f"{'q/kv heads':>10} {'batch':>6} {'context':>7} {'meas us':>9} {'GB/s':>6} {'MHz':>5} {'priced':>8} {'meas/priced':>11}")
for r in res:
    if r.get("kind") != "attention" or "call_us" not in r:
        continue
    hq, hk = r["q_heads"], r["kv_heads"]
    model, tp = ("llama-3.1-405b", 8) if hq == 16 * hk else ("llama-3.1-70b", 8 // hk)
    p = priced(model, tp, "fp8", batch=r["batch"], kv=r["context"])
    scale = 1
    if p is None:  # the batch's cache does not fit this model's shard: price half, attention is linear in the batch
        p = priced(model, tp, "fp8", batch=r["batch"] // 2, kv=r["context"])
        scale = 2
    if p is None:
        continue
    t = p[0]["attention"] * scale
    print(f"{f'{hq}/{hk}':>10} {r['batch']:6} {r['context']:7} {r['call_us']:9.1f} {r['kv_gb_per_s']:6.0f} {r['sm_mhz_median']:5} {t:8.1f} {r['call_us'] / t:11.2f}")
