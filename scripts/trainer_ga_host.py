#!/usr/bin/env python3
"""The HF Trainer's host gap per micro-batch (step::HF_TRAINER_MICRO_HOST_US) from the `fit` rows of
calibration/runs/hf/raw/trainerga-h100-2026-11-25/ (scenarios/workloads/hf_trainer.py's
`trainer_mb n=<step> gaps_ms=<g0>,<g1>,...` lines): the medians of g1.. (the gaps between a step's
micro-batches: from the NaN check's return to the next forward's start) over the steps after the
warm-up, against the model's parameter tensors, and the least-squares line through them. Also
prints, for every eager Trainer row (fit and test), g0 (the gap after a step's last micro-batch),
the clip + post-optimizer host sections and the batch fetch, as a check; test rows are not fitted.

Usage: python3 scripts/trainer_ga_host.py calibration/runs/hf/raw/trainerga-h100-2026-11-25/call1/logs.tgz
       (call2/logs.tgz: its rows' gaps, as a check; its one fit row is hft-027 re-measured)
"""
import re
import statistics as st
import sys
import tarfile

# run id -> (split, parameter tensors of the config, warm-up steps): hf_param_tensors of the configs
# (smoke-llama 2 layers x 9 + 3; llama-3.2-1b 16 x 9 + 2, tied; tinyllama-1.1b 22 x 9 + 3;
# qwen3-1.7b 28 x 11 + 2, tied).
ROWS = {
    "027": ("fit", 21, 10), "028": ("fit", 201, 5), "029": ("fit", 146, 5),
    "030": ("test", 21, 10), "031": ("test", 201, 5), "032": ("test", 146, 3), "033": ("test", 310, 3),
    "034": ("test", 201, 3), "037": ("test", 310, 5), "038": ("test", 310, 3), "040": ("test", 201, 3),
    "041": ("test", 21, 10),
}


def main():
    tf = tarfile.open(sys.argv[1])
    names = {m.name.split("/")[-1]: m for m in tf.getmembers()}
    fit = []
    print("run   split tensors  G_ms(med, n)   g0_ms  clip+post_ms  fetch_ms  g0-clip-post-fetch")
    for rid, (split, tensors, warm) in ROWS.items():
        m = names.get(f"hft-{rid}.log")
        if m is None:
            continue
        s = tf.extractfile(m).read().decode("utf-8", "replace")
        g, g0, fetch, tail = [], [], [], []
        for x in re.finditer(r"trainer_mb n=(\d+) gaps_ms=([0-9.,]+) fetch_ms=([0-9.]+)", s):
            if int(x[1]) <= warm:
                continue
            gs = [float(v) for v in x[2].split(",")]
            g0.append(gs[0])
            g += gs[1:]
            fetch.append(float(x[3]))
        for x in re.finditer(r"trainer_cb n=(\d+) t_s=[0-9.]+ pre_opt_to_end_ms=([0-9.]+) clip_ms=([0-9.]+)", s):
            if int(x[1]) > warm:
                tail.append(float(x[2]) + float(x[3]))
        med = lambda v: st.median(v) if v else float("nan")
        gm = med(g)
        print(f"hft-{rid} {split:5} {tensors:5}  {gm:7.3f} {len(g):3}   {med(g0):7.2f} {med(tail):9.2f} {med(fetch):9.2f} {med(g0) - med(tail) - med(fetch):9.2f}")
        if split == "fit" and g:
            fit.append((tensors, gm))
    n = len(fit)
    if n < 2:
        print("fewer than two fit rows in this file: no line (the constant's fit is call 1's logs)")
        return
    mx = sum(x for x, _ in fit) / n
    my = sum(y for _, y in fit) / n
    b = sum((x - mx) * (y - my) for x, y in fit) / sum((x - mx) ** 2 for x, _ in fit)
    a = my - b * mx
    print(f"least squares over the fit rows {[f'{x}:{y:.3f}' for x, y in fit]}: G = {a * 1e3:.1f} us + {b * 1e3:.2f} us per tensor")


if __name__ == "__main__":
    main()
