#!/usr/bin/env python3
"""Repeat-run agreement: compare time_us_p50 of the rows two gpuplan profiles share.

    python3 scripts/compare_runs.py PROFILE_A PROFILE_B [--tol 0.03] [--out FILE]

Rows are joined on every column before `time_us_p10`. Rows whose p50 is under `--min-us`
(default 20 us: launch-bound, where a few hundred ns of jitter is several percent) are reported
apart. Prints, per table, how many shared rows agree within the tolerance.
"""
import argparse
import csv
import json
import os
import statistics

TABLES = ["hbm.csv", "gemm.csv", "attention.csv", "elementwise.csv", "collectives.csv", "p2p.csv", "launch.csv"]


def rows(path):
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        rd = csv.DictReader(f)
        keys = rd.fieldnames[: rd.fieldnames.index("time_us_p10")]
        return {tuple(r[k] for k in keys): float(r["time_us_p50"]) for r in rd}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--tol", type=float, default=0.03)
    ap.add_argument("--min-us", type=float, default=20.0)
    ap.add_argument("--out")
    a = ap.parse_args()
    report = {}
    print(f"{'table':<16} {'shared':>6} {'>=min':>6} {'within':>6} {'median|d|':>9} {'max|d|':>8}  worst row")
    for t in TABLES:
        ra, rb = rows(os.path.join(a.a, t)), rows(os.path.join(a.b, t))
        shared = sorted(set(ra) & set(rb))
        if not shared:
            continue
        d = {k: abs(rb[k] / ra[k] - 1.0) for k in shared if ra[k] > 0}
        big = {k: v for k, v in d.items() if ra[k] >= a.min_us}
        within = sum(1 for v in big.values() if v <= a.tol)
        worst = max(big, key=big.get) if big else None
        report[t] = {
            "shared": len(shared),
            "above_min_us": len(big),
            "within_tol": within,
            "median_abs_rel_diff": statistics.median(big.values()) if big else None,
            "max_abs_rel_diff": max(big.values()) if big else None,
            "worst": list(worst) if worst else None,
            "all_rows": {",".join(k): round(v, 5) for k, v in d.items()},
        }
        if big:
            print(f"{t:<16} {len(shared):>6} {len(big):>6} {within:>6} {statistics.median(big.values()):>9.4f} {max(big.values()):>8.4f}  {','.join(worst)}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"a": a.a, "b": a.b, "tol": a.tol, "min_us": a.min_us, "tables": report}, f, indent=1)


if __name__ == "__main__":
    main()
