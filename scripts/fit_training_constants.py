#!/usr/bin/env python3
"""Refit the training constants fitted on measured runs (calibration/runs/h200.jsonl), on the fit
split only, and show the test split beside them:

  overlap_cost       analytic::OVERLAP_COST: the share of overlapped DP-collective time the compute
                     beside it loses; squared relative step-time error of the DDP/FSDP fit runs
                     (dp > 1, tp = 1) over 0.18, 0.4, ..., 1.2.
  dtensor_linear_us  cost::lower::DTENSOR_LINEAR_US = [a, b]: host stall a + b log2(tp) us per GEMM of
                     a tensor-parallel linear (PyTorch DTensor, eager); squared relative step-time
                     error of the TP fit runs (tp > 1) measured before that fit (ids up to h200-051,
                     `--tp-upto`; the shipped value), a in 0..480 and b in 0..180 by 20, then +-15 by 5
                     around the best; then again with every TP fit run (h200-052..-059 were measured
                     after the shipped fit, to check it), for information.

    python3 scripts/fit_training_constants.py [--gpuplan target/release/gpuplan]

Each point runs `gpuplan validate --json` with GPUPLAN_FIT_CONSTANTS set (src/cost/fitted.rs); the
analytic engine and the shipped h200-sxm-2x profile, as the validation test uses. About 2 minutes.
Output of the run behind the shipped values: calibration/runs/fit_training_constants-output.txt.
"""
import argparse
import json
import os
import subprocess

RUNS = "calibration/runs/h200.jsonl"


def scenario_of():
    return {json.loads(l)["run_id"]: json.loads(l)["scenario"] for l in open(RUNS) if l.strip()}


def step_errors(gpuplan, constants):
    env = dict(os.environ, GPUPLAN_FIT_CONSTANTS=constants)
    out = subprocess.run([gpuplan, "validate", "--runs", RUNS, "--calibration", "h200-sxm-2x", "--json"],
                         capture_output=True, text=True, env=env, check=False).stdout
    errs = {}
    for r in json.loads(out)["runs"]:
        m = {x["metric"]: x for x in r["metrics"]}.get("step_time")
        if m:
            errs[r["run_id"]] = (r["split"], m["error_pct"])
    return errs


def sse(errs, ids, split="fit"):
    return sum(e * e for rid, (s, e) in errs.items() if rid in ids and s == split)


def show(errs, ids):
    for rid in sorted(ids):
        if rid in errs:
            print(f"  {rid} {errs[rid][0]:<4} {errs[rid][1]:+6.1f}%")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpuplan", default="target/release/gpuplan")
    ap.add_argument("--tp-upto", default="h200-051", help="TP runs the shipped DTensor fit used: ids up to this one")
    a = ap.parse_args()
    sc = scenario_of()
    dp_ids = {rid for rid, s in sc.items() if s["dp"] > 1 and s["tp"] == 1 and s["mode"] == "train"}
    tp_ids = {rid for rid, s in sc.items() if s["tp"] > 1 and s["mode"] == "train"}

    print("overlap_cost (DDP/FSDP runs):")
    best = None
    for x in [0.18, 0.4, 0.6, 0.8, 1.0, 1.2]:
        errs = step_errors(a.gpuplan, f"overlap_cost={x}")
        f = sse(errs, dp_ids)
        print(f"  {x:4.2f}: fit SSE {f:7.1f}   test " + " ".join(f"{errs[r][1]:+.1f}" for r in sorted(dp_ids) if r in errs and errs[r][0] == "test"))
        if best is None or f < best[0]:
            best = (f, x, errs)
    print(f"best overlap_cost = {best[1]}")
    show(best[2], dp_ids)

    for label, ids in [(f"TP runs up to {a.tp_upto}, the shipped fit", {r for r in tp_ids if r <= a.tp_upto}),
                       ("every TP run, for information", tp_ids)]:
        print(f"\ndtensor_linear_us ({label}):")
        best = fit_dtensor(a.gpuplan, ids)
        print(f"best dtensor_linear_us = [{best[1]}, {best[2]}] (fit SSE {best[0]:.1f})")
        show(best[3], tp_ids)


def fit_dtensor(gpuplan, ids):
    best = None
    for x in range(0, 500, 20):
        for y in range(0, 200, 20):
            errs = step_errors(gpuplan, f"dtensor_linear_us={x},{y}")
            f = sse(errs, ids)
            if best is None or f < best[0]:
                best = (f, x, y, errs)
    _, x0, y0, _ = best
    for x in range(x0 - 15, x0 + 16, 5):
        for y in range(max(0, y0 - 15), y0 + 16, 5):
            errs = step_errors(gpuplan, f"dtensor_linear_us={x},{y}")
            f = sse(errs, ids)
            if f < best[0]:
                best = (f, x, y, errs)
    return best


if __name__ == "__main__":
    main()
