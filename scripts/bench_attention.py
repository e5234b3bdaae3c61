#!/usr/bin/env python3
"""Fused-attention throughput on this GPU, by PyTorch SDPA backend: what each stack's attention
kernel reaches (Megatron-Core runs Transformer Engine's cuDNN fused attention; PyTorch's SDPA picks
FlashAttention-2 on Hopper by default).

For each backend (flash = FlashAttention-2 in PyTorch, cudnn = cuDNN's fused attention, the kernel
family Transformer Engine calls), bf16, causal, head dim 128, batch 2, 32 heads (Llama-3 8B's
attention), sequence 1K..32K: forward and forward+backward times (CUDA events, median of N after
warm-up) and TFLOP/s by the FlashAttention convention (causal forward 2 * 2 * b * h * s^2 * d / 2;
backward 2.5 x forward).

Usage: python3 scripts/bench_attention.py > attention_sdpa.csv   (stderr: versions, GPU)
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def timed(fn, reps):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    return times[len(times) // 2]


def measure(backend, b, h, sq, skv, d, causal, dev, reps, warmup, label):
    """Forward and forward+backward medians (s) of one SDPA shape under one backend, and the
    forward FLOPs; None (with the error on stderr) where the backend refuses the shape."""
    q = torch.randn(b, h, sq, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(b, h, skv, d, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    g = torch.randn(b, h, sq, d, device=dev, dtype=torch.bfloat16)
    flops_fwd = 4 * b * h * sq * skv * d / (2 if causal else 1)
    try:
        with sdpa_kernel([backend]):
            fwd = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)

            def fwd_bwd():
                o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                o.backward(g)

            for _ in range(warmup):
                fwd_bwd()
            torch.cuda.synchronize()
            return timed(fwd, reps), timed(fwd_bwd, reps), flops_fwd
    except RuntimeError as e:
        print(f"{label}: {str(e).splitlines()[0]}", file=sys.stderr)
        return None
    finally:
        del q, k, v, g
        torch.cuda.empty_cache()


def rates(tf, tfb, flops_fwd):
    """Backward time (s) and forward / backward TFLOP/s (backward = 2.5x forward FLOPs)."""
    tb = max(tfb - tf, 1e-9)
    return tb, flops_fwd / tf / 1e12, 2.5 * flops_fwd / tb / 1e12


def main():
    dev = torch.device("cuda")
    print(f"gpu={torch.cuda.get_device_name()} torch={torch.__version__} cuda={torch.version.cuda} cudnn={torch.backends.cudnn.version()}", file=sys.stderr)
    print("backend,batch,heads,seq,head_dim,causal,fwd_s,fwd_bwd_s,bwd_s,fwd_tflops,bwd_tflops")
    b, h, d = 2, 32, 128
    for s in [1024, 2048, 4096, 8192, 16384, 32768]:
        for name, backend in BACKENDS.items():
            m = measure(backend, b, h, s, s, d, True, dev, 20 if s <= 8192 else 8, 3, f"{name} s={s}")
            if m is None:
                continue
            tf, tfb, flops_fwd = m
            tb, rf, rb = rates(tf, tfb, flops_fwd)
            print(f"{name},{b},{h},{s},{d},1,{tf:.6e},{tfb:.6e},{tb:.6e},{rf:.1f},{rb:.1f}", flush=True)


if __name__ == "__main__":
    main()
