#!/usr/bin/env python3
"""Issue 20 (wt-ctx70): gpuplan's priced context iteration of one and of four 467-token prompts against
the layer stack timed on the H100 (calibration/runs/raw/small-context-h100-2026-11-24/small_ctx.json,
scripts/small_context_probe.py).

Runs `gpuplan simulate --trace` (dgx-h100, trtllm stack, bf16, --mode prefill --batch B --seq 467) for
Llama-3.1-70B at TP 4 and Llama-3.1-8B at TP 1, B = 1 and 4, and prints per layer the priced time of
qkv / attention / o / gate+up / down beside the measured one (the stack's per-op events), and the
priced ops the probe did not time. The stack has no all-reduce and no norms.
Usage: python3 scripts/compare_small_context.py [path/to/gpuplan]
"""
import collections
import json
import os
import subprocess
import sys
import tempfile

BIN = sys.argv[1] if len(sys.argv) > 1 else "target/debug/gpuplan"
RAW = "calibration/runs/raw/small-context-h100-2026-11-24/small_ctx.json"
meas = {r["name"]: r for r in json.load(open(RAW))["results"]}
PAIRS = {"qkv": "qkv_proj", "attn": "attention", "o": "out_proj", "gate_up": "up_proj", "down": "down_proj"}
for model, tp, tag, layers in (("llama-3.1-70b", 4, "70b_tp4", 80), ("llama-3.1-8b", 1, "8b_tp1", 32)):
    for b, m in ((1, 467), (4, 1868)):
        with tempfile.TemporaryDirectory() as d:
            tr = os.path.join(d, "t.json")
            out = subprocess.run(
                [BIN, "simulate", "--model", model, "--system", "dgx-h100", "--gpus", str(tp), "--tp", str(tp),
                 "--precision", "bf16", "--stack", "trtllm", "--mode", "prefill", "--batch", str(b), "--seq", "467",
                 "--trace", tr], capture_output=True, text=True, check=True).stdout
            t = json.load(open(tr))
        acc = collections.defaultdict(float)
        for e in t["traceEvents"]:
            if e.get("ph") == "X" and e.get("tid") == 0:
                acc[e["name"]] += e["dur"] / 1e3
        s = meas[f"stack_{tag}_m{m}"]["events"]
        clock = [l.strip() for l in out.splitlines() if l.strip().startswith("power")]
        print(f"{model} TP {tp}, {b} x 467 tokens (M = {m}): priced step {t['otherData']['step_time_s'] * 1e3:.2f} ms"
              f" ({clock[0] if clock else ''}); measured stack {s['iteration_s_mean'] * 1e3:.2f} ms"
              f" (kernels {s['kernels_sum_s'] * 1e3:.2f} ms) at {s['sm_mhz_median']} MHz median")
        print(f"  {'op':8} {'priced us/layer':>16} {'measured us/layer':>18} {'priced/measured':>16}")
        tot = 0.0
        for k, name in PAIRS.items():
            p = acc[name] / layers * 1e3
            q = s["per_layer_s"][k] * 1e6
            tot += acc[name]
            print(f"  {k:8} {p:16.1f} {q:18.1f} {p / q:16.3f}")
        print(f"  the five ops: priced {tot:.2f} ms, measured {s['kernels_sum_s'] * 1e3:.2f} ms per iteration")
        rest = {n: v for n, v in acc.items() if n not in PAIRS.values()}
        print("  priced, not timed: " + ", ".join(f"{n} {v:.2f} ms" for n, v in sorted(rest.items(), key=lambda x: -x[1])))
