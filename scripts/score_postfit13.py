#!/usr/bin/env python3
"""Post-fit 13 (issue 19): MAPE and bias per class and per GPU of an HF run set, and its OOM calls.

  scripts/score_postfit13.py RUNS.jsonl VALIDATE.json
    RUNS.jsonl     the run records (`gpuplan measure` output)
    VALIDATE.json  `gpuplan validate --runs RUNS.jsonl --json` of the same records

Classes, from each record's own facts (`job.reported`, the scenario): `train` (hf-eager, dense, no
recompute), `recompute/long` (hf-eager training with full recompute), `compile` (hf-compile,
bf16), `fp8` (hf-compile-fp8 and hf-compile-fp8-rowwise), `prefill`, `decode loop`, `decode
generate`, `moe` (a model with experts, any mode). Each ok run is counted in its class, its GPU
(the record's system) and `all`. OOM: every run's measured status against `predicted_fits`.
Prints one line per (class, GPU, metric): n, MAPE, bias (mean signed error), worst run.
"""
import json
import sys


def cls_of(rec):
    rep = rec["job"]["reported"]
    sc = rec["scenario"]
    if rep.get("experts_impl", "none") not in ("none", ""):
        return "moe"
    stack = rep.get("hf_stack", "")
    if sc["mode"] == "prefill":
        return "prefill"
    if sc["mode"] == "decode":
        return "decode " + rep.get("decode_api", "?")
    if stack.startswith("hf-compile-fp8"):
        return "fp8"
    if stack.startswith("hf-compile"):
        return "compile"
    if sc.get("recompute") == "full":
        return "recompute/long"
    return "train"


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    recs = {}
    for line in open(sys.argv[1]):
        if line.strip():
            r = json.loads(line)
            recs[r["run_id"]] = r
    doc = json.load(open(sys.argv[2]))
    gpu = {"dgx-h100": "H100", "hgx-h200": "H200"}
    groups = {}
    oom = []
    for v in doc["runs"]:
        rec = recs[v["run_id"]]
        c, g = cls_of(rec), gpu.get(rec["scenario"]["system"], rec["scenario"]["system"])
        fits = v.get("predicted_fits")
        oom.append((v["run_id"], c, g, v["status"], fits, v.get("oom_agrees")))
        if v["status"] != "ok":
            continue
        for m in v["metrics"]:
            for key in ((c, g), (c, "all"), ("all", g), ("all", "all")):
                groups.setdefault((key, m["metric"]), []).append((m["error_pct"], v["run_id"]))
    order = ["train", "recompute/long", "compile", "fp8", "prefill", "decode loop", "decode generate", "moe", "all"]
    print(f"{'class':16} {'gpu':4} {'metric':12} {'n':>2} {'MAPE':>7} {'bias':>7}  worst")
    for (key, metric), e in sorted(groups.items(), key=lambda kv: (order.index(kv[0][0][0]), kv[0][0][1], kv[0][1])):
        mape = sum(abs(x) for x, _ in e) / len(e)
        bias = sum(x for x, _ in e) / len(e)
        w = max(e, key=lambda t: abs(t[0]))
        print(f"{key[0]:16} {key[1]:4} {metric:12} {len(e):>2} {mape:6.1f}% {bias:+6.1f}%  {w[1]} {w[0]:+.1f}%")
    print()
    print("OOM calls (measured status vs predicted fit):")
    for rid, c, g, st, fits, agrees in oom:
        print(f"  {rid} {g} {c:16} measured {st:8} predicted {'fits' if fits else 'does not fit':13} {'agrees' if agrees else 'DISAGREES' if agrees is not None else ''}")


if __name__ == "__main__":
    main()
