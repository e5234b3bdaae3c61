#!/usr/bin/env python3
"""Issue 20: gpuplan's priced context iteration against the measured parts on the H100.

Runs `gpuplan simulate --trace` for the two context iterations the probe timed (17 x 467 tokens;
Llama-3.1-8B TP 1 and Llama-3.1-70B TP 4 on dgx-h100, bf16, trtllm stack) and prints, per layer,
the priced time of each op next to the measured one from
calibration/runs/raw/context-iteration-h100-2026-11-24/ctx_probe.json (scripts/context_iteration_probe.py).
Usage: python3 scripts/compare_context_iteration.py [path/to/gpuplan]
"""
import collections
import json
import os
import subprocess
import sys
import tempfile

BIN = sys.argv[1] if len(sys.argv) > 1 else "target/debug/gpuplan"
RAW = "calibration/runs/raw/context-iteration-h100-2026-11-24/ctx_probe.json"
meas = {r["phase"]: r for r in json.load(open(RAW))["results"]}
PAIRS = {"qkv": "qkv_proj", "attn": "attention", "o": "out_proj", "gate_up": "up_proj", "down": "down_proj"}
CASES = [
    ("llama-3.1-8b", 1, "llama8b_tp1", 32),
    ("llama-3.1-70b", 4, "llama70b_tp4_copygap", 80),
]
for model, tp, phase, layers in CASES:
    with tempfile.TemporaryDirectory() as d:
        tr = os.path.join(d, "t.json")
        out = subprocess.run(
            [BIN, "simulate", "--model", model, "--system", "dgx-h100", "--gpus", str(tp), "--tp", str(tp), "--precision", "bf16",
             "--stack", "trtllm", "--mode", "prefill", "--batch", "17", "--seq", "467", "--trace", tr],
            check=True, capture_output=True, text=True).stdout
        t = json.load(open(tr))
    clock = [l.strip() for l in out.splitlines() if "power" in l]
    acc = collections.defaultdict(float)
    for e in t["traceEvents"]:
        if e.get("ph") == "X" and e.get("tid") == 0:
            acc[e["name"]] += e["dur"] / 1e3
    m = meas[phase]
    print(f"{model} TP {tp}: priced step {t['otherData']['step_time_s'] * 1e3:.1f} ms ({clock[0] if clock else ''});"
          f" measured ({phase}) {m['sm_mhz_median']} MHz median, GEMMs+attention {m['iteration_s_mean'] * 1e3:.1f} ms"
          f" per iteration of {layers} layers")
    print(f"  {'op':10} {'priced ms/layer':>16} {'measured ms/layer':>18} {'priced/measured':>16}")
    for k, name in PAIRS.items():
        p = acc[name] / layers
        q = m["per_layer_s"][k] * 1e3
        print(f"  {k:10} {p:16.4f} {q:18.4f} {p / q:16.3f}")
    rest = sum(v for n, v in acc.items() if n not in PAIRS.values()) / layers
    print(f"  {'other':10} {rest:16.4f} {'(not timed)':>18}")
