#!/usr/bin/env python3
"""Fit the torch-eager serving host overhead (per iteration, per sequence, per layer with decoders,
per layer and prefill chunk) on the fit split of the measured serving runs, and score every run with it.

    python3 scripts/fit_serve_overhead.py [--gpuplan target/release/gpuplan] [--runs calibration/runs/serve]

Each run is replayed by `gpuplan serve --trace RUN.csv --measured RUN.csv --decode-attention
padded-matmul --calibration PROFILE --replications 16` (the simulator serves exactly the measured
requests with the measured scheduler limits, prices the server's decode attention as it runs:
batched matmuls over its cache slots padded to the longest context, at the profile's decode-regime
rate, and pools 16 replications of the iteration-time draws) under a grid of overheads; the fit
minimizes the mean absolute error over P50/P99 TTFT, P50/P99 TPOT and output-token throughput of
the fit runs only (with the iteration-time spread and its lag-1 correlation, which this script also
derives from the fit runs' logs and prints first). Prints the grid's best point and the per-run
errors at it for every run of every split, with the measured P99s' bootstrap 90% intervals (how
far a P99 of that many requests moves by chance).
"""
import argparse
import collections
import concurrent.futures
import csv as csvmod
import random
import gzip
import itertools
import statistics
import json
import os
import subprocess

METRICS = ["ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "output_tokens_per_s"]
RUN_FILES = ["h200-serve.jsonl", "h200b-serve.jsonl", "h200c-serve.jsonl", "h100-serve.jsonl", "h100b-serve.jsonl"]
# The calibration profile of each measured system (the GPU the runs were on).
PROFILE = {"hgx-h200": "h200-sxm-1x", "dgx-h100": "h100-sxm-1x"}
REPLICATIONS = 16


def score(g, runs_dir, rec, host):
    csv = os.path.join(runs_dir, rec["serve"]["requests_csv"])
    sc = rec["scenario"]
    cmd = [g, "serve", "--model", sc["model"], "--system", sc["system"], "--gpus", "1", "--stack", sc["stack"],
           "--trace", csv, "--measured", csv, "--max-batch", str(rec["serve"]["max_batch"]),
           "--token-budget", str(rec["serve"]["token_budget"]), "--gpu-memory-utilization", "1.0",
           "--decode-attention", "padded-matmul", "--calibration", PROFILE[sc["system"]],
           "--replications", str(REPLICATIONS), "--json"]
    if host is not None and host[0] == "probe":
        cmd += ["--host-probe-ms", str(host[1])]
    elif host is not None and len(host) == 1:
        cmd += ["--host-time-scale", str(host[0])]
    elif host is not None:
        cmd += ["--host-overhead-us", ",".join(str(x) for x in host[:4]), "--host-gpu-overlap", str(host[4])]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    d = json.loads(out)
    return {m["metric"]: m["error_pct"] for m in d["metrics"]}


SPREAD_P = [0, 0.01, 0.05, 0.10, 0.25, 0.50, 0.75, 0.90, 0.95, 0.99, 0.999]


def steps(runs_dir, rec):
    """The run's iterations from its log: (time, batch, tokens) per `step=` line."""
    out = []
    with gzip.open(os.path.join(runs_dir, rec["job"]["log_file"]), "rt") as f:
        for line in f:
            if line.startswith("step="):
                d = dict(kv.split("=", 1) for kv in line.split())
                out.append((float(d["step_time_s"]), int(d["batch"]), int(d["tokens"])))
    return out


def decode_ratios(run_steps):
    """Per iteration, a decode-only iteration's time over the median of its batch size's (batches
    of 8, groups of at least 20 iterations); None for the others."""
    groups = collections.defaultdict(list)
    for x, b, t in run_steps:
        if t == b:
            groups[b // 8].append(x)
    med = {k: statistics.median(v) for k, v in groups.items() if len(v) >= 20}
    return [x / med[b // 8] if t == b and b // 8 in med else None for x, b, t in run_steps]


def quantile(sorted_values, p):
    """numpy's default (linear) quantile of sorted values."""
    i = p * (len(sorted_values) - 1)
    lo = int(i)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (i - lo)


def spread(runs_dir, recs, mixed=False):
    """Quantiles of `decode_ratios`, pooled over the given runs' logs: the iteration-time spread
    (`EAGER_ITERATION_SPREAD`); with `mixed`, of the iterations with prefill chunks over the median
    of their (batch of 8, prefill tokens of 256) group of at least 5 (`EAGER_MIXED_ITERATION_SPREAD`)."""
    ratios = []
    for r in recs:
        run_steps = steps(runs_dir, r)
        if not mixed:
            ratios += [x for x in decode_ratios(run_steps) if x is not None]
            continue
        groups = collections.defaultdict(list)
        for x, b, t in run_steps:
            if t != b:
                groups[(b // 8, (t - b) // 256)].append(x)
        for v in groups.values():
            if len(v) >= 5:
                m = statistics.median(v)
                ratios += [x / m for x in v]
    ratios.sort()
    return len(ratios), [round(quantile(ratios, p), 3) for p in SPREAD_P]


def lag1(runs_dir, recs):
    """Lag-1 correlation of the normal scores of consecutive decode-only iterations' ratios
    (`decode_ratios`) within each run: the AR(1) correlation of the simulator's spread draws
    (`EAGER_SPREAD_LAG1`)."""
    return lag1_of(decode_ratios(steps(runs_dir, r)) for r in recs)


def lag1_of(runs_ratios):
    """(pairs, lag-1 correlation to 2 places) of the normal scores of consecutive ratios, each
    run's list of per-iteration ratios (None: not counted) taken on its own."""
    pairs = []
    nd = statistics.NormalDist()
    for ratio in runs_ratios:
        # Normal scores of the ratios' ranks within the run.
        order = sorted((v, i) for i, v in enumerate(ratio) if v is not None)
        z = [None] * len(ratio)
        for rank, (_, i) in enumerate(order):
            z[i] = nd.inv_cdf((rank + 0.5) / len(order))
        pairs += [(z[i], z[i + 1]) for i in range(len(z) - 1) if z[i] is not None and z[i + 1] is not None]
    return len(pairs), round(statistics.correlation([a for a, _ in pairs], [b for _, b in pairs]), 2)


def probe_ms(runs_dir, rec):
    """The mean of the host probes (before and after the runs) of the run's model on its machine,
    in ms: `TAG-host-probe-MODEL.txt` beside the runs (scripts/device_serve.sh), or None."""
    tag = rec["run_id"].split("-serve-")[0]
    model = rec["scenario"]["model"].removeprefix("ref-llama-")
    path = os.path.join(runs_dir, f"{tag}-host-probe-{model}.txt")
    if not os.path.exists(path):
        return None
    v = [json.loads(l.split("host-probe-json: ", 1)[1])["median_step_s"] for l in open(path) if "host-probe-json: " in l]
    return round(1e3 * sum(v) / len(v), 3) if v else None


def p99_interval(runs_dir, rec, reps=1000):
    """Bootstrap 90% interval of the measured TTFT and TPOT P99s, relative to the P99s."""
    rows = list(csvmod.DictReader(open(os.path.join(runs_dir, rec["serve"]["requests_csv"]))))
    ttft = [float(r["first_token_s"]) - float(r["arrival_s"]) for r in rows]
    tpot = [(float(r["finish_s"]) - float(r["first_token_s"])) / (int(r["output_len"]) - 1) for r in rows if int(r["output_len"]) > 1]

    def p99(v):
        return quantile(sorted(v), 0.99)
    rnd = random.Random(0)
    out = []
    for v in (ttft, tpot):
        m = p99(v)
        b = sorted(p99(rnd.choices(v, k=len(v))) for _ in range(reps))
        out.append((100 * (b[int(0.05 * reps)] / m - 1), 100 * (b[int(0.95 * reps)] / m - 1)))
    return len(rows), out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpuplan", default="target/release/gpuplan")
    ap.add_argument("--runs", default="calibration/runs/serve")
    ap.add_argument("--objective", choices=["all", "p50"], default="all",
                    help="metrics the fit minimizes: all five, or the P50s and throughput only")
    ap.add_argument("--fit-split", default="fit", help="the split to fit on (h100-fit: the H100 machine's host)")
    ap.add_argument("--at", help="ITER,SEQ,DECODE_LAYER,CHUNK_LAYER,OVERLAP: score every run at this point instead of fitting")
    ap.add_argument("--scale-only", action="store_true",
                    help="fit only the host time scale (--host-time-scale) over the defaults: a node's host against the fit host")
    a = ap.parse_args()
    recs = [json.loads(l) for f in RUN_FILES if os.path.exists(os.path.join(a.runs, f)) for l in open(os.path.join(a.runs, f)) if l.strip()]
    fit = [r for r in recs if r["split"] == a.fit_split]
    n, table = spread(a.runs, fit)
    print(f"iteration-time spread of the fit runs ({n} decode-only iterations), quantiles at {SPREAD_P}: {table}")
    n, table = spread(a.runs, fit, mixed=True)
    print(f"iteration-time spread of the fit runs ({n} iterations with prefill chunks): {table}")
    n, rho = lag1(a.runs, fit)
    print(f"lag-1 correlation of the fit runs' decode-only iteration-time ratios (normal scores, {n} pairs): {rho}")
    grid = list(itertools.product(range(0, 601, 100), (0, 5, 10), (0, 20, 40), range(150, 551, 50), (0.5, 0.625, 0.75, 0.875, 1.0)))

    def objective(host):
        errs = [abs(e) for r in fit for k, e in score(a.gpuplan, a.runs, r, host).items() if a.objective == "all" or "p99" not in k]
        return sum(errs) / len(errs), host
    if a.scale_only:
        grid = [(round(0.7 + 0.05 * i, 2),) for i in range(39)]
    if a.at:
        v = [float(x) for x in a.at.split(",")]
        best = objective((*[int(x) for x in v[:4]], v[4]))
    else:
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
            best = min(ex.map(objective, grid))
    if a.scale_only:
        print(f"fit ({a.fit_split} split): host_time_scale = {best[1][0]} (mean |error| over the fit runs' metrics {best[0]:.1f}%)")
    else:
        print(f"{'at' if a.at else 'fit'} ({a.fit_split} split): host_overhead_us = {list(best[1][:4])}, host_gpu_overlap = {best[1][4]} (mean |error| over the fit runs' metrics {best[0]:.1f}%)")
    for label, host in [("zero overhead, full overlap", (0, 0, 0, 0, 1.0)), ("fitted", best[1])]:
        print(f"\n{label} {list(host)}:")
        print(f"{'run':<20} {'split':<8} " + " ".join(f"{m:>20}" for m in METRICS))
        for r in recs:
            e = score(a.gpuplan, a.runs, r, host)
            print(f"{r['run_id']:<20} {r['split']:<8} " + " ".join(f"{e[m]:>+19.1f}%" for m in METRICS))
    print("\nruns with host probes on their machine, scored with --host-probe-ms (the mean of the probes before and after the runs):")
    for r in recs:
        ms = probe_ms(a.runs, r)
        if ms is not None:
            e = score(a.gpuplan, a.runs, r, ("probe", ms))
            print(f"{r['run_id']:<20} {ms:7.2f} ms " + " ".join(f"{e[m]:>+19.1f}%" for m in METRICS))
    print("\nmeasured P99s' bootstrap 90% intervals (requests resampled, 1000 times):")
    for r in recs:
        n, ((t0, t1), (u0, u1)) = p99_interval(a.runs, r)
        print(f"{r['run_id']:<20} {n:5} requests  TTFT P99 [{t0:+.0f}%, {t1:+.0f}%]  TPOT P99 [{u0:+.0f}%, {u1:+.0f}%]")


if __name__ == "__main__":
    main()
