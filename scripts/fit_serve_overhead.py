#!/usr/bin/env python3
"""Fit the torch-eager serving host overhead (per iteration, per sequence, per layer with decoders,
per layer and prefill chunk) on the fit split of the measured serving runs, and score every run with it.

    python3 scripts/fit_serve_overhead.py [--gpuplan target/release/gpuplan] [--runs calibration/runs/serve]

Each run is replayed by `gpuplan serve --trace RUN.csv --measured RUN.csv --decode-attention
padded-matmul --calibration h200-sxm-1x` (the simulator serves exactly the measured requests with
the measured scheduler limits, and prices the server's decode attention as it runs: batched matmuls
over a cache padded to the longest context, at the profile's decode-regime rate) under a grid of overheads; the
fit minimizes the mean absolute error over P50/P99 TTFT, P50/P99 TPOT and output-token throughput
of the fit runs only (with the iteration-time spread, which this script also derives from the fit
runs' logs and prints first). Prints the grid's best point and the per-run errors at it (fit and
test).
"""
import argparse
import collections
import gzip
import itertools
import statistics
import json
import os
import subprocess

METRICS = ["ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "output_tokens_per_s"]


def score(g, runs_dir, rec, host):
    csv = os.path.join(runs_dir, rec["serve"]["requests_csv"])
    sc = rec["scenario"]
    cmd = [g, "serve", "--model", sc["model"], "--system", sc["system"], "--gpus", "1", "--stack", sc["stack"],
           "--trace", csv, "--measured", csv, "--max-batch", str(rec["serve"]["max_batch"]),
           "--token-budget", str(rec["serve"]["token_budget"]), "--gpu-memory-utilization", "1.0",
           "--decode-attention", "padded-matmul", "--calibration", "h200-sxm-1x", "--json"]
    if host is not None:
        cmd += ["--host-overhead-us", ",".join(str(x) for x in host[:4]), "--host-gpu-overlap", str(host[4])]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    d = json.loads(out)
    return {m["metric"]: m["error_pct"] for m in d["metrics"]}


SPREAD_P = [0, 0.01, 0.05, 0.10, 0.25, 0.50, 0.75, 0.90, 0.95, 0.99, 0.999]


def spread(runs_dir, recs, mixed=False):
    """Quantiles of decode-only iteration times over the median of their batch size (batches of 8,
    groups of at least 20 iterations), pooled over the given runs' logs: the iteration-time spread
    (`EAGER_ITERATION_SPREAD`); with `mixed`, of the iterations with prefill chunks over the median
    of their (batch of 8, prefill tokens of 256) group of at least 5 (`EAGER_MIXED_ITERATION_SPREAD`)."""
    ratios = []
    for r in recs:
        groups = collections.defaultdict(list)
        with gzip.open(os.path.join(runs_dir, r["job"]["log_file"]), "rt") as f:
            for line in f:
                if line.startswith("step="):
                    d = dict(kv.split("=", 1) for kv in line.split())
                    tokens, batch = int(d["tokens"]), int(d["batch"])
                    if tokens == batch and not mixed:
                        groups[batch // 8].append(float(d["step_time_s"]))
                    elif tokens != batch and mixed:
                        groups[(batch // 8, (tokens - batch) // 256)].append(float(d["step_time_s"]))
        for v in groups.values():
            if len(v) >= (5 if mixed else 20):
                m = statistics.median(v)
                ratios += [x / m for x in v]
    ratios.sort()

    def q(p):
        i = p * (len(ratios) - 1)
        lo = int(i)
        hi = min(lo + 1, len(ratios) - 1)
        return ratios[lo] + (ratios[hi] - ratios[lo]) * (i - lo)
    return len(ratios), [round(q(p), 3) for p in SPREAD_P]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpuplan", default="target/release/gpuplan")
    ap.add_argument("--runs", default="calibration/runs/serve")
    ap.add_argument("--objective", choices=["all", "p50"], default="all",
                    help="metrics the fit minimizes: all five, or the P50s and throughput only")
    a = ap.parse_args()
    recs = [json.loads(l) for l in open(os.path.join(a.runs, "h200-serve.jsonl")) if l.strip()]
    fit = [r for r in recs if r["split"] == "fit"]
    n, table = spread(a.runs, fit)
    print(f"iteration-time spread of the fit runs ({n} decode-only iterations), quantiles at {SPREAD_P}: {table}")
    n, table = spread(a.runs, fit, mixed=True)
    print(f"iteration-time spread of the fit runs ({n} iterations with prefill chunks): {table}")
    grid = itertools.product(range(0, 601, 100), (0, 5, 10), (0, 20, 40), range(150, 551, 50), (0.5, 0.625, 0.75, 0.875, 1.0))
    best = None
    for host in grid:
        errs = [abs(e) for r in fit for k, e in score(a.gpuplan, a.runs, r, host).items() if a.objective == "all" or "p99" not in k]
        m = sum(errs) / len(errs)
        if best is None or m < best[0]:
            best = (m, host)
    print(f"fit: host_overhead_us = {list(best[1][:4])}, host_gpu_overlap = {best[1][4]} (mean |error| over the fit runs' metrics {best[0]:.1f}%)")
    for label, host in [("zero overhead, full overlap", (0, 0, 0, 0, 1.0)), ("fitted", best[1])]:
        print(f"\n{label} {list(host)}:")
        print(f"{'run':<20} {'split':<5} " + " ".join(f"{m:>20}" for m in METRICS))
        for r in recs:
            e = score(a.gpuplan, a.runs, r, host)
            print(f"{r['run_id']:<20} {r['split']:<5} " + " ".join(f"{e[m]:>+19.1f}%" for m in METRICS))


if __name__ == "__main__":
    main()
