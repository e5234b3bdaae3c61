#!/usr/bin/env python3
"""Where the TensorRT-LLM serving dev rows' error comes from (issue 20): reads the document
`gpuplan validate --serving tests/data/published/trtllm_inference_dev.csv --stack trtllm --json`
prints and reports, per split,

1. the offline output tokens/s slices (system x TP/PP > 1) ranked by their contribution to the
   split's MAPE (sum of the slice's |error| over the split's row count, percentage points);
2. the offline signed error by engine version, precision and input/output length (a trend with the
   decode batch shows as a trend over the lengths: 128/128 runs the largest batches);
3. for the offline rows, the time per output token the prediction misses, 1/measured - 1/predicted
   (microseconds per output token of the whole TP x PP replica). An offline run's period is its
   running batch over its throughput, so this is the missing time per period divided by the batch:
   a cost per decoding sequence and period. A cost that sits on every GPU's critical path per
   layer (GEMM, attention, all-reduce) shrinks with the GPUs of the replica; one that sits in one
   place per generated token (the host's loop, the sampler) does not;
4. the online rows (mean TTFT, mean ITL) by model, TP and load, signed error.

Nothing here is fitted; it only reads predictions. Usage:
  target/debug/gpuplan validate --serving tests/data/published/trtllm_inference_dev.csv \
      --stack trtllm --json > /tmp/serving.json
  python3 scripts/serving_residuals.py /tmp/serving.json
The recorded output is calibration/runs/serving-trtllm/residuals-output.txt.
"""
import collections
import json
import sys


def version(r):
    return r["scenario"].split()[0]


def contributions(rows, split):
    off = [r for r in rows if r["metric"] == "offline_output_tps" and r["split"] == split]
    if not off:
        return
    n = len(off)
    total = 100 * sum(abs(r["error"]) for r in off) / n
    print(f"== offline output tokens/s, {split} split: MAPE {total:.2f}% over {n} rows; slices by contribution")
    g = collections.defaultdict(list)
    for r in off:
        g[(r["system"], "TPxPP>1" if r["tp"] * r["pp"] > 1 else "1 GPU")].append(r["error"])
    out = sorted(((100 * sum(abs(e) for e in l) / n, k, l) for k, l in g.items()), reverse=True)
    print(f"  {'contrib pp':>10}  {'slice':<40} {'n':>3} {'MAPE':>7} {'bias':>7}")
    for c, k, l in out:
        print(f"  {c:10.2f}  {k[0] + ' ' + k[1]:<40} {len(l):3d} {100 * sum(abs(e) for e in l) / len(l):6.1f}% {100 * sum(l) / len(l):+6.1f}%")


def trend(rows):
    print("== offline signed error by engine version, precision and input/output length (all splits)")
    g = collections.defaultdict(list)
    for r in rows:
        if r["metric"] == "offline_output_tps":
            g[(version(r), r["precision"], r["input_len"], r["output_len"])].append(r["error"])
    for k in sorted(g):
        l = g[k]
        print(f"  {k[0]:<6} {k[1]:<5} {k[2]:>6}/{k[3]:<5} n={len(l):3d} mean {100 * sum(l) / len(l):+6.1f}%")


def per_token(rows):
    print("== offline time missed per output token, 1/measured - 1/predicted (us), by system, precision, TP x PP")
    print("   (median over the lengths; min..max; all splits)")
    g = collections.defaultdict(list)
    for r in rows:
        if r["metric"] == "offline_output_tps":
            g[(version(r), r["system"], r["model"], r["precision"], r["tp"], r["pp"])].append(1e6 * (1 / r["measured"] - 1 / r["predicted"]))
    for k in sorted(g):
        l = g[k]
        m = sorted(l)
        med = m[len(m) // 2] if len(m) % 2 else 0.5 * (m[len(m) // 2 - 1] + m[len(m) // 2])
        print(f"  {k[0]:<6} {k[1]:<26} {k[2]:<14} {k[3]:<5} tp{k[4]} pp{k[5]}  n={len(l):2d} {med:+8.1f} us  ({min(l):+.1f}..{max(l):+.1f})")


def online(rows):
    print("== online rows (Triton, v0.14 BF16): signed error by model, TP, lengths and load")
    g = collections.defaultdict(dict)
    loads = []
    for r in rows:
        if r["metric"] == "offline_output_tps":
            continue
        load = r["load"].replace("poisson ", "").replace(" x500", "").replace("offline", "INF")
        if load not in loads:
            loads.append(load)
        g[(r["metric"], r["system"], r["model"], r["tp"], f"{r['input_len']}/{r['output_len']}", r["split"])][load] = r["error"]
    loads.sort(key=lambda s: float("inf") if s.startswith("INF") else float(s.split()[0]))
    print(f"  {'metric':<10} {'system':<9} {'model':<14} tp {'lengths':<8} split " + " ".join(f"{l.split()[0]:>7}" for l in loads))
    for k in sorted(g):
        cells = " ".join(f"{100 * g[k][l]:+6.1f}%" if l in g[k] else f"{'-':>7}" for l in loads)
        print(f"  {k[0]:<10} {k[1][:9]:<9} {k[2]:<14} {k[3]:>2} {k[4]:<8} {k[5]:<5} {cells}")


def main():
    v = json.load(open(sys.argv[1]))
    rows = v["rows"]
    for s in v["summary"]:
        if s["all"]:
            print(f"{s['split']:<5} {s['metric']:<20} MAPE {s['all']['mape_pct']:6.2f}%  bias {s['all']['bias_pct']:+6.2f}%  n={s['all']['n']}")
    for split in ("fit", "test"):
        contributions(rows, split)
    trend(rows)
    per_token(rows)
    online(rows)


if __name__ == "__main__":
    main()
