#!/usr/bin/env python3
"""The online TensorRT-LLM rows (Triton, v0.14, BF16; issue 20): where the mean TTFT and mean ITL
misses sit, and what the rows' own throughput columns say about how the load was offered.

Reads the validation JSON of the online rows and the published CSV (its `Tput (req/s)`,
`Total Token Tput` and `Output Tput` rows, which gpuplan does not score), and prints, per split:

1. the MAPE contribution of each slice (load, lengths, model/TP, GPU), in percentage points of the
   split's MAPE (sum of the slice's |error| over the split's row count), with its bias;
2. the error floor that the published rounding alone sets: the values are whole milliseconds, so a
   model exact to the microsecond would still miss a value v by up to 0.5/v (on average 0.25/v);
3. per configuration and load, from the published columns only:
   - `rate`: the request rate of the run, total token throughput / (input + output length): the
     completed requests over the benchmark's duration;
   - `tail_tok`: the duration left after the last Poisson arrival (500 requests at the nominal
     QPS: 500 / QPS seconds, +-4.5% at one sigma), in output tokens at the row's mean ITL; with
     fixed lengths the last request's tail is about TTFT + OSL x ITL, i.e. about OSL tokens;
   - `in_flight`: Little's law, rate x (mean TTFT + (OSL - 1) x mean ITL), the mean number of
     requests in flight (at QPS INF, 500 sent at once and all admitted, close to 500 when every
     request finishes near the end).
Nothing is fitted here. Usage:
  target/debug/gpuplan validate --serving tests/data/published/trtllm_inference_dev.csv \
      --stack trtllm --split all --scenario-kind online --json > /tmp/online.json
  python3 scripts/serving_online_residuals.py /tmp/online.json tests/data/published/trtllm_inference_dev.csv
The recorded output is calibration/runs/serving-trtllm/online-residuals-output.txt.
"""
import collections
import csv
import json
import sys


def load_of(r):
    return r["load"].replace("poisson ", "").replace(" qps x500", "").replace("offline x500", "INF")


def slices(rows, split, metric):
    sel = [r for r in rows if r["split"] == split and r["metric"] == metric]
    n = len(sel)
    if not n:
        return
    total = 100 * sum(abs(r["error"]) for r in sel) / n
    bias = 100 * sum(r["error"] for r in sel) / n
    print(f"== {split} {metric}: MAPE {total:.2f}% bias {bias:+.2f}% over {n} rows; contribution by slice (pp of the MAPE)")
    keys = {
        "load (QPS)": lambda r: load_of(r),
        "lengths": lambda r: f"{r['input_len']}/{r['output_len']}",
        "model, TP": lambda r: f"{r['model']} tp{r['tp']}",
        "GPU": lambda r: r["system"],
        "model x load": lambda r: f"{r['model']} {load_of(r)}",
    }
    for name, key in keys.items():
        g = collections.defaultdict(list)
        for r in sel:
            g[key(r)].append(r["error"])
        out = sorted(((100 * sum(abs(e) for e in l) / n, k, l) for k, l in g.items()), reverse=True)
        print(f"  by {name}: " + "; ".join(f"{k} {c:.2f} (n={len(l)}, bias {100 * sum(l) / len(l):+.0f}%)" for c, k, l in out))
    floor = 100 * sum(0.25 / r["measured"] for r in sel) / n
    worst = 100 * sum(0.5 / r["measured"] for r in sel) / n
    print(f"  rounding floor (values in whole ms): mean |error| {floor:.2f}% on average, {worst:.2f}% at worst")


def published_columns(path):
    g = collections.defaultdict(dict)
    for r in csv.DictReader(open(path)):
        if not r["scenario"].startswith("online"):
            continue
        k = (r["split"], r["model"], r["gpu"].split()[0], int(r["tp"]), int(r["input_len"]), int(r["output_len"]))
        g[k].setdefault(r["qps"], {})[r["metric"]] = float(r["value"])
    print("== published throughput columns (not scored): the run's request rate, the tail after the last arrival, Little's law")
    print(f"  {'split':<5} {'model':<14} {'gpu':<5} tp {'lengths':<8} {'QPS':>4} {'rate':>6} {'tail_tok':>8} {'in_flight':>9}")
    for k in sorted(g):
        split, model, gpu, tp, isl, osl = k
        for q, m in sorted(g[k].items(), key=lambda x: float("inf") if x[0] == "INF" else float(x[0])):
            rate = m["Total Token Tput"] / (isl + osl)
            dur = 500 / rate
            ttft, itl = m["Mean TTFT"] / 1e3, m["Mean ITL"] / 1e3
            in_flight = rate * (ttft + (osl - 1) * itl)
            tail = "" if q == "INF" else f"{(dur - 500 / float(q)) / itl:8.0f}"
            print(f"  {split:<5} {model:<14} {gpu:<5} {tp:>2} {isl}/{osl:<4} {q:>4} {rate:6.2f} {tail:>8} {in_flight:9.0f}")


def main():
    v = json.load(open(sys.argv[1]))
    rows = v["rows"]
    for split in ("fit", "test"):
        for metric in ("mean_ttft", "mean_itl"):
            slices(rows, split, metric)
    published_columns(sys.argv[2])


if __name__ == "__main__":
    main()
