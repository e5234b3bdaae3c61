#!/usr/bin/env python3
"""Summarize scenarios/workloads/hf_train_host_probe.py's output (issue 19, branch wt-torch5):
per family and param dtype, the host time per decoder layer of each training phase (least-squares
slope over the 2, 4 and 8-layer rows) and its intercept; the profiler's kernel launches per layer
(4-layer minus 2-layer count over 2, fp32 rows); their ratio, the host time per launch; and the
real-shape rows (host per phase, GPU kernel time per phase, synchronized step).

  scripts/hf_train_host_summary.py calibration/runs/raw/hf-train-host-h100-2026-11-24/train-host.jsonl

The constants cost::lower::HF_EAGER_TRAIN_LAUNCH_US and HF_EAGER_TRAIN_(LAYER|QK_NORM)_LAUNCHES
are read off this output (summary.txt beside the raw file).
"""
import json
import sys


def slope(pts):
    xs = [p[0] for p in pts]
    ys = [p[1] for p in pts]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return b, my - b * mx


def main(path):
    rows = [json.loads(line) for line in open(path)]
    host = {}
    prof = {}
    for r in rows:
        if r["kind"] == "host":
            host.setdefault((r["family"], r["param_dtype"]), []).append(r)
        elif r["kind"] == "prof":
            prof[(r["family"], r["layers"])] = r
    print("family dtype phase: host us/layer (slope over 2,4,8 layers), intercept us; launches/layer; us/launch")
    per_launch = {"fwd": [], "bwd": []}
    for (fam, pd), rs in sorted(host.items()):
        for ph in ("fwd", "bwd", "opt", "zero"):
            b, a = slope([(r["layers"], r[f"{ph}_us"]) for r in rs])
            line = f"{fam:10s} {pd} {ph:4s}: {b:8.0f} us/layer  intercept {a:8.0f} us"
            if pd == "fp32" and (fam, 2) in prof and (fam, 4) in prof:
                n = (prof[(fam, 4)][ph]["launch"] - prof[(fam, 2)][ph]["launch"]) / 2
                aten = (prof[(fam, 4)][ph]["aten"] - prof[(fam, 2)][ph]["aten"]) / 2
                line += f"  launches/layer {n:6.1f}  aten ops/layer {aten:6.1f}"
                if n > 0:
                    line += f"  us/launch {b / n:6.1f}"
                    if ph in per_launch and fam in ("llama", "qwen3"):
                        per_launch[ph].append(b / n)
            print(line)
        b, a = slope([(r["layers"], r["step_sync_us"]) for r in rs])
        print(f"{fam:10s} {pd} step: {b:8.0f} us/layer  intercept {a:8.0f} us (synchronized step)")
    for ph, v in per_launch.items():
        if v:
            print(f"dense families' mean host us per launch, {ph}: {sum(v) / len(v):.2f} (from {', '.join(f'{x:.1f}' for x in v)})")
    for r in rows:
        if r["kind"] == "full":
            print(f"full {r['family']} {r['layers']} layers mb{r['mb']} x {r['seq']}: " + " ".join(
                f"{k}={r[k] / 1000:.1f}ms" for k in ("fwd_us", "bwd_us", "opt_us", "zero_us", "host_us", "drain_us", "step_sync_us")))
        if r["kind"] == "full_prof":
            print(f"full {r['family']} profile: " + " ".join(
                f"{ph}: {r[ph]['launch']} launches, GPU kernels {r[ph]['kernel_us'] / 1000:.1f}ms;" for ph in ("fwd", "bwd", "opt")))


if __name__ == "__main__":
    main(sys.argv[1])
