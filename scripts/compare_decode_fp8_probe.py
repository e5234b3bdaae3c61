#!/usr/bin/env python3
"""Set the H100 FP8 decode probe (scripts/decode_fp8_probe.py) beside what gpuplan prices.

For every GEMM, attention case and whole decode iteration the probe timed, runs
`gpuplan simulate --stack trtllm --precision fp8 --mode decode` at the same shape on dgx-h100 (the
engines' TP deployment: no sequence parallelism) with `--trace`, and prints the priced time per
call (the trace's op durations over their count) beside the measured one. The iterations compare
the 32 decoder layers only (the priced LM head, embedding and final norm are taken out; the probe
runs none).

Usage: python3 scripts/compare_decode_fp8_probe.py PROBE_JSON [path/to/gpuplan]
"""
import collections
import json
import os
import subprocess
import sys
import tempfile

PROBE = sys.argv[1]
BIN = sys.argv[2] if len(sys.argv) > 2 else "target/debug/gpuplan"
MODEL = {"8b_tp1": ("llama-3.1-8b", 1), "70b_tp4": ("llama-3.1-70b", 4), "70b_tp8": ("llama-3.1-70b", 8)}
OPS = {"qkv": "qkv_proj", "o": "out_proj", "gate_up": "up_proj", "down": "down_proj"}
_cache = {}


def priced(model, tp, batch, kv):
    key = (model, tp, batch, kv)
    if key in _cache:
        return _cache[key]
    with tempfile.TemporaryDirectory() as d:
        tr = os.path.join(d, "t.json")
        out = subprocess.run([BIN, "simulate", "--model", model, "--system", "dgx-h100", "--gpus", str(tp), "--tp", str(tp),
                              "--sp", "false", "--mode", "decode", "--batch", str(batch), "--kv-len", str(kv),
                              "--precision", "fp8", "--stack", "trtllm", "--trace", tr],
                             capture_output=True, text=True, check=True).stdout
        ev = json.load(open(tr))
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    agg = collections.defaultdict(lambda: [0, 0.0])
    for e in ev:
        if e.get("ph") == "X" and e.get("pid", 0) == 0:
            agg[e["name"]][0] += 1
            agg[e["name"]][1] += e["dur"]
    mhz = next((ln.split(" at ")[1].split(" MHz")[0] for ln in out.splitlines() if ln.strip().startswith("power") and " at " in ln), "?")
    _cache[key] = (agg, mhz)
    return _cache[key]


def per_call(agg, name):
    c, t = agg[name]
    return t / c if c else float("nan")


res = json.load(open(PROBE))["results"]
print("== GEMMs (us per call): measured (cuBLASLt via torch._scaled_mm / matmul, CUDA graph of 20) vs priced")
print("   (priced at the decode step's solved clock; 'at meas MHz' rescales it to the clock the steady loop ran at,")
print("    as a compute-bound kernel's time scales, for M >= 256; the loop of one FP8 GEMM sits at the 700 W cap)")
print(f"{'shape':10} {'op':8} {'dtype':5} {'M':>5} {'k':>6} {'n':>6} {'meas':>8} {'MHz':>5} {'priced':>8} {'at MHz':>6} {'meas/priced':>11} {'at meas MHz':>11} {'ratio':>6}")
for r in res:
    if not r["phase"].startswith("gemm_") or "call_us" not in r:
        continue
    model, tp = MODEL[r["tag"]]
    agg, mhz = priced(model, tp, r["m"], 128)
    p = per_call(agg, OPS[r["op"]])
    if r["dtype"] == "bf16":
        continue  # the priced op list is FP8; the bf16 rows are the probe's own reference
    at = p * float(mhz) / r["sm_mhz_median"] if r["m"] >= 256 else p
    print(f"{r['tag']:10} {r['op']:8} {r['dtype']:5} {r['m']:5} {r['k']:6} {r['n']:6} {r['call_us']:8.1f} {r.get('sm_mhz_median', 0):5} {p:8.1f} {mhz:>6} {r['call_us'] / p:11.2f} {at:11.1f} {r['call_us'] / at:6.2f}")

print("\n== decode attention (us per layer): SDPA stand-in over a bf16 cache of the FP8 cache's bytes vs priced (FP8 cache)")
for r in res:
    if not r["phase"].startswith("attn_") or "call_us" not in r:
        continue
    tag = "8b_tp1" if r["phase"].startswith("attn_8b") else ("70b_tp8" if "tp8" in r["phase"] else "70b_tp4")
    model, tp = MODEL[tag]
    try:
        agg, _ = priced(model, tp, r["batch"], r["kv_len_row"])
        p = per_call(agg, "attention")
    except subprocess.CalledProcessError:
        # The probe's batch does not fit the model's KV cache at this length (the rows run ~50-60):
        # price half the batch; decode attention is linear in it.
        agg, _ = priced(model, tp, r["batch"] // 2, r["kv_len_row"])
        p = 2 * per_call(agg, "attention")
    print(f"{r['phase']:45} {r['backend']:6} {r['call_us']:9.1f} us  {r.get('kv_gb_per_s', 0):7.0f} GB/s  priced {p:9.1f}  meas/priced {r['call_us'] / p:5.2f}")

print("\n== whole decode iterations, 32 layers of the 8B shape (ms): CUDA graph replays vs priced decoder layers")
for r in res:
    if not r["phase"].startswith("iter_") or "iteration_ms_mean" not in r:
        continue
    kv = 192 if "kv192" in r["phase"] else 1100
    agg, mhz = priced("llama-3.1-8b", 1, r["batch"], kv)
    total = sum(t for n, (c, t) in agg.items() if n != "forward") / 1e3
    layers = total - sum(agg[n][1] for n in ("lm_head", "embedding", "final_norm")) / 1e3
    q = agg["quantize"][1] / 1e3
    print(f"{r['phase']:36} measured {r['iteration_ms_mean']:7.2f} ms at {r.get('sm_mhz_median', 0)} MHz, {r.get('power_w_mean', 0):.0f} W | "
          f"priced layers {layers:7.2f} ms at {mhz} MHz (of which quantize {q:.2f}) | meas/priced {r['iteration_ms_mean'] / layers:5.2f}")
for r in res:
    if r["phase"].startswith("ew_") and "call_us" in r:
        print(f"{r['phase']:28} {r['call_us']:8.1f} us  {r['bytes'] / r['call_us'] / 1e3:7.0f} GB/s")
