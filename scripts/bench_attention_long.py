#!/usr/bin/env python3
"""Long-sequence and context-parallel block attention throughput on this GPU, by PyTorch SDPA
backend (cudnn = cuDNN fused attention, the kernel family Transformer Engine calls on Hopper;
flash = FlashAttention-2 in PyTorch).

Two tables, bf16, head dim 128 (Llama-3 8B):
- `causal`: square causal attention, batch 1, 32 heads, s = 4K..128K (one long sequence, no CP);
- `block`: the non-causal rectangular blocks Transformer Engine's load-balanced ring attention
  (cp_comm_type p2p) computes at each off-diagonal step: queries of 2c tokens (the rank's two
  chunks) against keys of one c-token chunk, and c queries against 2c keys, 8 heads (32 / TP 4),
  c = seq / (2 cp) from 2K (8K tokens at CP 2) to 32K (1M at CP 16).

FLOPs by the FlashAttention convention: forward 4 * b * h * s_q * s_kv * d (halved when causal),
backward 2.5x forward. Times are CUDA-event medians after warm-up.

Usage: python3 scripts/bench_attention_long.py > attention_long.csv   (stderr: versions, GPU)
"""
import os
import sys

import torch
from torch.nn.attention import SDPBackend

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_attention import measure, rates  # noqa: E402  (the shared timing and FLOP rules)

BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}


def bench(table, name, backend, b, h, sq, skv, d, causal, dev):
    flops_fwd = 4 * b * h * sq * skv * d / (2 if causal else 1)
    reps = max(3, min(20, int(2e14 / flops_fwd)))
    m = measure(backend, b, h, sq, skv, d, causal, dev, reps, 2, f"{table} {name} sq={sq} skv={skv}")
    if m is None:
        return
    tf, tfb, flops_fwd = m
    tb, rf, rb = rates(tf, tfb, flops_fwd)
    print(f"{table},{name},{b},{h},{sq},{skv},{d},{int(causal)},{tf:.6e},{tfb:.6e},{tb:.6e},{rf:.1f},{rb:.1f}", flush=True)


def main():
    dev = torch.device("cuda")
    print(f"gpu={torch.cuda.get_device_name()} torch={torch.__version__} cuda={torch.version.cuda} cudnn={torch.backends.cudnn.version()}", file=sys.stderr)
    print("table,backend,batch,heads,seq_q,seq_kv,head_dim,causal,fwd_s,fwd_bwd_s,bwd_s,fwd_tflops,bwd_tflops")
    for s in [4096, 8192, 16384, 32768, 65536, 131072]:
        for name, backend in BACKENDS.items():
            bench("causal", name, backend, 1, 32, s, s, 128, True, dev)
    for c in [2048, 4096, 8192, 16384, 32768]:
        for name, backend in BACKENDS.items():
            bench("block", name, backend, 1, 8, 2 * c, c, 128, False, dev)
            bench("block", name, backend, 1, 8, c, 2 * c, 128, False, dev)


if __name__ == "__main__":
    main()
