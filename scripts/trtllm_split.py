#!/usr/bin/env python3
"""Fix the fit/test split of the TensorRT-LLM serving dev rows (issue 20), before anything is fitted.

Reads ../shared/reference/trtllm_inference_dev.csv (or the path given) and writes
tests/data/published/trtllm_inference_dev.csv: the source rows unchanged, with three columns added in
front (`dev_row`, `config_id`, `split`). The rule is in tests/data/published/trtllm_split.md; running
this again on the same source gives the same file, byte for byte.

    python3 scripts/trtllm_split.py [SOURCE.csv] [OUT.csv]
"""

import csv
import io
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SOURCE = os.path.join(ROOT, "..", "shared", "reference", "trtllm_inference_dev.csv")
OUT = os.path.join(ROOT, "tests", "data", "published", "trtllm_inference_dev.csv")

# Whole models held out for the test split.
HELD_OUT_MODELS = ("mistral-7b", "mixtral-8x7b")


def model_key(name):
    n = name.lower().replace("llama v3", "llama 3").replace("llama3", "llama 3")
    if "mixtral" in n:
        return "mixtral-8x7b"
    if "mistral" in n:
        return "mistral-7b"
    if "70b" in n:
        return "llama-3.x-70b"
    if "8b" in n:
        return "llama-3.x-8b"
    return n


def gpu_key(name):
    n = name.lower()
    for k in ("gb200", "gh200", "b200", "h200", "h100", "a100", "l40s"):
        if k in n:
            return k
    if "rtx" in n and "6000" in n:
        return "rtx-pro-6000"
    return n


def scored_kind(row):
    s = row["scenario"]
    if s == "offline max throughput":
        return "offline"
    if s.startswith("online serving"):
        return "online"
    return None


def precision_key(p):
    return {"FP16": "bf16", "BF16": "bf16"}.get(p, p.lower())


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else SOURCE
    out = sys.argv[2] if len(sys.argv) > 2 else OUT
    with open(src, newline="") as f:
        r = csv.DictReader(f)
        header = r.fieldnames
        rows = list(r)
    keys = []
    for row in rows:
        kind = scored_kind(row)
        if kind is None:
            keys.append(None)
            continue
        keys.append(
            (
                kind,
                model_key(row["model"]),
                gpu_key(row["gpu"]),
                row["tp"],
                row["pp"] or "1",
                precision_key(row["precision"]),
                int(row["input_len"]),
                int(row["output_len"]),
            )
        )
    configs = sorted({k for k in keys if k is not None}, key=lambda k: tuple(str(x) if not isinstance(x, int) else f"{x:08d}" for x in k))
    config_id = {k: i for i, k in enumerate(configs)}
    # Of the configurations not held out by model, every third in that order (index 2, 5, 8, ...).
    kept = [k for k in configs if k[1] not in HELD_OUT_MODELS]
    third = {k for i, k in enumerate(kept) if i % 3 == 2}
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["dev_row", "config_id", "split"] + header)
    for i, (row, k) in enumerate(zip(rows, keys)):
        if k is None:
            cid, split = "-", "-"
        else:
            cid = str(config_id[k])
            split = "test" if (k[1] in HELD_OUT_MODELS or k in third) else "fit"
        w.writerow([str(i), cid, split] + [row[h] for h in header])
    with open(out, "w", newline="") as f:
        f.write(buf.getvalue())
    n = {s: sum(1 for x in buf.getvalue().splitlines()[1:] if x.split(",")[2] == s) for s in ("fit", "test", "-")}
    print(f"{len(rows)} rows, {len(configs)} configurations: fit {n['fit']}, test {n['test']}, not scored (-) {n['-']}")


if __name__ == "__main__":
    main()
