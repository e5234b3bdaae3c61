#!/usr/bin/env python3
"""The head-dim factor table of `cost::FUSED_ATTENTION_HEAD_DIM` from attention_headdim.csv: for each
head dim d and sequence s, the default-backend (cuDNN) TFLOP/s at d over that at d 128 (the head dim
`fused_attention_fraction` is quoted at), forward and backward, each the mean over the gqa and mha
rows (d 128: over its 16- and 24-head rows too). Also the FlashAttention-2 (forced) ratio d64/d128.

Usage: python3 derive_factors.py attention_headdim.csv"""
import csv
import sys
from collections import defaultdict
from statistics import mean

rows = list(csv.DictReader(open(sys.argv[1])))
rate = defaultdict(list)
for r in rows:
    key = (r["backend_asked"], int(r["head_dim"]), int(r["seq"]))
    rate[key].append((float(r["fwd_tflops"]), float(r["bwd_tflops"])))
seqs = sorted({int(r["seq"]) for r in rows})
for backend, dims in (("default", (64, 80, 96)), ("flash", (64,)), ("cudnn", (64,))):
    print(f"{backend}: d, then (s, forward factor, backward factor) relative to d 128")
    for d in dims:
        out = []
        for s in seqs:
            ref = rate[(backend, 128, s)]
            cur = rate[(backend, d, s)]
            if not ref or not cur:
                continue
            f = mean(c[0] for c in cur) / mean(c[0] for c in ref)
            b = mean(c[1] for c in cur) / mean(c[1] for c in ref)
            out.append(f"({s}, {f:.3f}, {b:.3f})")
        print(f"  {d}: " + ", ".join(out))
