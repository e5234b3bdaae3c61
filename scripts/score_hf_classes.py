#!/usr/bin/env python3
"""MAPE (and bias) per class of the HF run sets from `gpuplan validate --json` documents.

  scripts/score_hf_classes.py LABEL=FILE.json ...   (one document per run set; `validate --runs
  SET.jsonl --json > FILE.json`)

Classes: train/prefill and decode (the scenario's mode), per split (fit, test), over runs that
ran (status ok). Prints `set split class metric n MAPE bias`, one line each.
"""
import json
import sys


def main():
    for arg in sys.argv[1:]:
        label, path = arg.split("=", 1)
        d = json.load(open(path))
        groups = {}
        for r in d["runs"]:
            if r["status"] != "ok":
                continue
            mode = r["scenario"].split()[2]
            cls = "decode" if mode == "decode" else "train/prefill"
            for m in r["metrics"]:
                for c in (cls, "all"):
                    groups.setdefault((r["split"], c, m["metric"]), []).append(m["error_pct"])
        for (split, cls, metric), e in sorted(groups.items()):
            mape = sum(abs(x) for x in e) / len(e)
            bias = sum(e) / len(e)
            print(f"{label} {split} {cls} {metric} n={len(e)} MAPE {mape:.1f}% bias {bias:+.1f}%")


if __name__ == "__main__":
    main()
