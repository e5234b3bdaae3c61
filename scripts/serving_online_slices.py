#!/usr/bin/env python3
"""Online TensorRT-LLM rows (Triton, v0.14, BF16; issue 20) by slice, before and after a change:
mean |error| and mean error per (split, metric, model x TP, QPS), from two `validate --serving
--scenario-kind online --json` outputs. Nothing is fitted here.
Usage:
  target/debug/gpuplan validate --serving tests/data/published/trtllm_inference_dev.csv \\
      --stack trtllm --split all --scenario-kind online --json > after.json
  python3 scripts/serving_online_slices.py before.json after.json
"""
import collections
import json
import sys

LOADS = ["2", "4", "8", "16", "32", "INF"]


def load_of(r):
    return r["load"].replace("poisson ", "").replace(" qps x500", "").replace("offline x500", "INF")


def slices(path):
    v = json.load(open(path))
    g = collections.defaultdict(list)
    for r in v["rows"]:
        g[(r["split"], r["metric"], "%s TP %d" % (r["model"], r["tp"]), load_of(r))].append(r["error"])
    tot = {(s["split"], s["metric"]): s["all"] for s in v["summary"] if s["split"] in ("fit", "test") and s["metric"] != "offline_output_tps" and s["all"]}
    return g, tot


def main():
    (b, bt), (a, at) = slices(sys.argv[1]), slices(sys.argv[2])
    cell = lambda e: "%4.1f%% (%+5.1f%%)" % (100 * sum(abs(x) for x in e) / len(e), 100 * sum(e) / len(e))
    for split in ("fit", "test"):
        for metric in ("mean_ttft", "mean_itl"):
            x, y = bt[(split, metric)], at[(split, metric)]
            print("== %s %s: MAPE %.2f%% (%+.2f%%) -> %.2f%% (%+.2f%%), %d rows" % (split, metric, x["mape_pct"], x["bias_pct"], y["mape_pct"], y["bias_pct"], y["n"]))
            for mt in sorted({k[2] for k in a if k[0] == split and k[1] == metric}):
                parts = []
                for q in LOADS:
                    k = (split, metric, mt, q)
                    if k in a:
                        parts.append("%s: %s -> %s" % (q, cell(b[k]), cell(a[k])))
                print("  %-20s %s" % (mt, " | ".join(parts)))


if __name__ == "__main__":
    main()
