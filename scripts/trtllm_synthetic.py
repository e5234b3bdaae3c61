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
    pred = defaultdict(dict)
    for r in d["rows"]:
        if r["metric"] != "offline_output_tps" or r["ep"] not in (None, r["tp"]) and r["attention_dp"]:
            continue
        if r["ep"] is not None and not r["attention_dp"]:
            continue
        ver = r["scenario"].split()[0]
        pred[(r["model"], ver, r["precision"])][(r["system"], r["tp"])] = r["predicted"]
    systems = sorted({k for v in pred.values() for k in v})
    print("| model | table | precision | " + " | ".join(f"{s} x{n}" for s, n in systems) + " |")
    print("|---|---|---|" + "---|" * len(systems))
    for (m, ver, p), v in sorted(pred.items()):
        cells = [f"{v[k]:,.0f}" if k in v else "" for k in systems]
        print(f"| {m} | {ver} | {p} | " + " | ".join(cells) + " |")
    print()
    refused = defaultdict(list)
    for n in d["not_scored"]:
        refused[n["reason"]].append(n["row"])
    for reason, rs in sorted(refused.items(), key=lambda x: -len(x[1])):
        print(f"- {len(rs)} refused: {reason}")
        for r in rs[:3]:
            print(f"    e.g. {r}")


if __name__ == "__main__":
    {"rows": rows, "table": table}[sys.argv[1]](sys.argv[2])
