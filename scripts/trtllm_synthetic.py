#!/usr/bin/env python3
"""Synthetic TensorRT-LLM perf-overview rows for the models the dev set lacks (issue 20).

The held-out rows are "the same tables' other models" (../shared/reference/README.md). This script
makes rows shaped like them from the dev rows, so that `gpuplan validate --serving` can show that
each maps (not refused) and what it predicts. They carry NO measured value: `value` is a
placeholder (1), so the "error" validate prints for them means nothing; only `predicted` is read.

    python3 scripts/trtllm_synthetic.py rows OUT.csv          # write the rows
    target/debug/gpuplan validate --serving OUT.csv --stack trtllm --split all --json > OUT.json
    python3 scripts/trtllm_synthetic.py table OUT.json        # markdown table of the predictions

Rows: the first row of each (table version, GPU, kind) of tests/data/published/trtllm_inference_dev.csv
(offline v0.17, offline v1.0; online v0.14: its first Mean TTFT and first Mean ITL row) with the
model swapped for each of MODELS, at every GPU
count of 1, 2, 4, 8 the system's node holds, at 1000/1000 tokens offline (the online rows keep
their lengths and QPS), and on the Blackwell systems of the v1.0 table in FP8 as well as the
row's FP4. A dense row keeps `ep` empty; one extra v1.0 row per MoE model prints `ep` = half the
GPUs (8 GPUs, EP 4) to exercise a printed EP cell.
"""
import csv
import json
import sys
from collections import defaultdict

DEV = "tests/data/published/trtllm_inference_dev.csv"

# Names as the tables print them (v0.17 style for v0.17 rows, v1.0 style otherwise).
MODELS = {
    "llama-3.1-405b": ("LLaMA v3.1 405B", "Llama 3.1 405B"),
    "mixtral-8x22b": ("Mixtral 8x22B v0.1", "Mixtral 8x22B"),
    "qwen3-235b-a22b": ("Qwen3 235B A22B", "Qwen3-235B-A22B"),
    "qwen3-30b-a3b": ("Qwen3 30B A3B", "Qwen3-30B-A3B"),
    "deepseek-v3": ("DeepSeek R1", "DeepSeek-R1-0528"),
    "llama-4-maverick": ("Llama 4 Maverick", "Llama 4 Maverick"),
    "llama-4-scout": ("Llama 4 Scout", "Llama 4 Scout"),
    "gpt-oss-120b": ("gpt-oss-120b", "gpt-oss-120b"),
    "gpt-oss-20b": ("gpt-oss-20b", "gpt-oss-20b"),
    # The dev set's models, as the ratios' reference.
    "llama-3.1-70b": ("LLaMA v3.1 70B", "Llama 3.3 70B"),
    "mixtral-8x7b": ("Mixtral 8x7B", "Mixtral 8x7B"),
}
MOE = {"mixtral-8x22b", "qwen3-235b-a22b", "qwen3-30b-a3b", "deepseek-v3", "llama-4-maverick", "llama-4-scout", "gpt-oss-120b", "gpt-oss-20b", "mixtral-8x7b"}
# GPUs of one node of the catalog system (calibration/systems/*.toml gpus_per_node).
NODE = {"GB200": 4, "GH200": 1}


def rows(out):
    src = list(csv.DictReader(open(DEV)))
    first = {}
    for r in src:
        v, kind = r["doc_version"][:4], r["scenario"][:7]
        scored = r["metric"] in ("Throughput", "Total Output Throughput", "Mean TTFT", "Mean ITL")
        if v in ("perf", "v0.1") and kind in ("offline", "online ") and r["split"] != "-" and scored:
            first.setdefault((v, r["gpu"], kind, r["metric"] if kind == "online " else ""), r)
    made = []
    n = 0
    for (v, gpu, kind, _), base in sorted(first.items()):
        node = next((g for k, g in NODE.items() if gpu.startswith(k)), 8)
        precisions = [base["precision"]]
        if v == "perf" and base["precision"] == "FP4":
            precisions.append("FP8")
        for model, (name17, name10) in MODELS.items():
            name = name17 if base["doc_version"] == "v0.17" else name10
            for prec in precisions:
                for gpus in (1, 2, 4, 8):
                    if gpus > node:
                        continue
                    eps = [""]
                    if v == "perf" and model in MOE and gpus == 8:
                        eps.append("4")
                    for ep in eps:
                        r = dict(base)
                        r.update(model=name, tp=str(gpus), pp="1", num_gpus=str(gpus), ep=ep, precision=prec, value="1", split="fit", dev_row=str(100000 + n), config_id="synthetic")
                        if kind == "offline":
                            r.update(input_len="1000", output_len="1000")
                        n += 1
                        made.append(r)
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(src[0].keys()))
        w.writeheader()
        w.writerows(made)
    print(f"{len(made)} rows -> {out}")


def table(path):
    d = json.load(open(path))
    # (model, "system table precision") -> {gpus: predicted}; v1.0 MoE rows at EP = the GPUs (no printed ep).
    pred = defaultdict(dict)
    cols = set()
    for r in d["rows"]:
        if r["metric"] != "offline_output_tps" or (r["attention_dp"] and r["ep"] != r["tp"]):
            continue
        ver = r["scenario"].split()[0]
        col = (r["system"], ver, r["precision"])
        cols.add(col)
        pred[(r["model"], col)][r["tp"]] = r["predicted"]
    cols = sorted(cols, key=lambda c: (c[1], c[0], c[2]))
    models = sorted({m for m, _ in pred})
    node = lambda system: {"gb200-nvl72": 4, "gh200-480gb-1x": 1}.get(system, 8)
    for title, pick in (
        ("fewest GPUs that fit (of 1, 2, 4, 8)", lambda v, c: min(v)),
        ("one whole node (8 GPUs; GB200 4, GH200 1)", lambda v, c: node(c[0]) if node(c[0]) in v else None),
    ):
        print(f"\n**{title}**: output tokens/s of the whole group, `GPUs: tokens/s`; blank = refused\n")
        print("| model | " + " | ".join(f"{s} {v} {p}" for s, v, p in cols) + " |")
        print("|---|" + "---:|" * len(cols))
        for m in models:
            cells = []
            for c in cols:
                v = pred.get((m, c), {})
                g = pick(v, c) if v else None
                cells.append(f"{g}: {v[g]:,.0f}" if g else "")
            print(f"| {m} | " + " | ".join(cells) + " |")
    print()
    refused = defaultdict(list)
    for n in d["not_scored"]:
        refused[n["reason"].split(":")[0] + ": " + n["reason"].split(":")[1][:40]].append(n["row"])
    for reason, rs in sorted(refused.items(), key=lambda x: -len(x[1])):
        print(f"- {len(rs)} refused: {reason}")


if __name__ == "__main__":
    {"rows": rows, "table": table}[sys.argv[1]](sys.argv[2])
