"""Per-set peak-memory MAPE and bias before/after, and the runs that moved by more than 1 point.
usage: python3 before_after.py BEFORE.csv AFTER.csv  (CSV of `gpuplan validate --csv` over the same runs)"""
import csv, glob, json, os, sys

b = {(r["run_id"], r["metric"]): r for r in csv.DictReader(open(sys.argv[1]))}
a = {(r["run_id"], r["metric"]): r for r in csv.DictReader(open(sys.argv[2]))}
where = {}
for f in sorted(glob.glob("calibration/runs/hf/*.jsonl")):
    for line in open(f):
        r = json.loads(line)
        where.setdefault(r["run_id"], (os.path.basename(f), r["split"]))


def stats(keys, d, metric):
    e = [float(d[(k, metric)]["error_pct"]) for k in keys if (k, metric) in d and d[(k, metric)]["error_pct"] and d[(k, metric)]["status"] == "ok"]
    return (sum(abs(x) for x in e) / len(e), sum(e) / len(e), len(e)) if e else (0.0, 0.0, 0)


sets = {}
for rid, (f, split) in where.items():
    key = f"{f} {split}" if f == "hf.jsonl" else f
    sets.setdefault(key, []).append(rid)
print(f"{'set':34} {'n':>4}  {'memory MAPE before':>18} {'after':>7}  {'bias before':>11} {'after':>7}  {'step MAPE before':>16} {'after':>7}")
for key in sorted(sets):
    ids = sets[key]
    mb, bb, n = stats(ids, b, "peak_memory")
    ma, ba, _ = stats(ids, a, "peak_memory")
    sb, _, _ = stats(ids, b, "step_time")
    sa, _, _ = stats(ids, a, "step_time")
    print(f"{key:34} {n:4}  {mb:17.2f}% {ma:6.2f}%  {bb:+10.2f}% {ba:+6.2f}%  {sb:15.2f}% {sa:6.2f}%")
print()
print("runs whose peak-memory error moved by more than 1 point: run, set, error before -> after, scenario")
for (rid, m), r in b.items():
    if m != "peak_memory" or (rid, m) not in a or not r["error_pct"]:
        continue
    eb, ea = float(r["error_pct"]), float(a[(rid, m)]["error_pct"])
    if abs(ea - eb) > 1.0:
        print(f"{rid:8} {where[rid][0]:28} {eb:+6.1f}% -> {ea:+6.1f}%  {r['scenario'].replace('/work/main/', '')}")
moved = [k for k in b if k[0] != "" and k[1] in ("step_time", "power") and k in a and b[k]["predicted"] != a[k]["predicted"]]
print(f"\nstep-time or power predictions changed: {len(moved)}")
