#!/usr/bin/env python3
"""Packed-document (THD) causal attention against one long causal sequence, on this GPU: what
Megatron's fine-tuning rows pay for attention over SQuAD documents packed into 4096-token
sequences (issue 17, SFT rows; `cost::causal_tile_share`).

A packed sequence's attention (Transformer Engine's cuDNN fused attention with `cu_seqlens`) runs
each document's causal attention on its own. Two forms are timed at a constant 16,384 tokens per
call (bf16, 32 heads, head dim 128, the shapes of scripts/bench_attention.py):
  - `dense`: PyTorch SDPA (backend cudnn = cuDNN's fused attention, the kernel family TE calls;
    flash = FlashAttention-2) on b = 16384 / s sequences of s tokens each, causal: every document
    the same length s;
  - `varlen`: torch.nn.attention.varlen.varlen_attn (PyTorch's variable-length FlashAttention)
    where this PyTorch has it, on the same documents given by cu_seqlens (one call, THD layout).
Forward and forward+backward medians (CUDA events, after warm-up) and TFLOP/s by the causal
FlashAttention convention (forward 2 * 2 * b * h * s^2 * d / 2, backward 2.5 x forward).

Usage: python3 scripts/bench_packed_attention.py > packed_attention.csv   (stderr: versions, GPU)
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
TOKENS, HEADS, DIM = 16384, 32, 128
LENGTHS = [128, 190, 256, 384, 512, 1024, 2048, 4096, 8192]


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


def run(label, fwd, fwd_bwd, reps=20, warmup=5):
    try:
        for _ in range(warmup):
            fwd_bwd()
        torch.cuda.synchronize()
        return timed(fwd, reps), timed(fwd_bwd, reps)
    except (RuntimeError, TypeError, ValueError) as e:
        print(f"{label}: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return None


def main():
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    print(f"gpu {props.name}, sms {props.multi_processor_count}, torch {torch.__version__}, cuda {torch.version.cuda}, "
          f"cudnn {torch.backends.cudnn.version()}", file=sys.stderr)
    print("form,backend,doc_tokens,docs,heads,head_dim,fwd_s,fwd_bwd_s,fwd_flops,fwd_tflops,bwd_tflops")
    varlen = None
    try:
        from torch.nn.attention.varlen import varlen_attn as varlen
    except ImportError as e:
        print(f"varlen: {e}", file=sys.stderr)
    for s in LENGTHS:
        b = TOKENS // s
        flops = 4 * b * HEADS * s * s * DIM / 2
        q, k, v = (torch.randn(b, HEADS, s, DIM, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        g = torch.randn(b, HEADS, s, DIM, device=dev, dtype=torch.bfloat16)
        rows = []
        for name, backend in BACKENDS.items():
            def fwd():
                with sdpa_kernel([backend]):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True)

            def fwd_bwd():
                fwd().backward(g)

            rows.append(("dense", name, run(f"dense {name} s {s}", fwd, fwd_bwd)))
        if varlen is not None:
            # THD: (tokens, heads, dim), documents back to back.
            qt, kt, vt = (x.detach().transpose(1, 2).reshape(b * s, HEADS, DIM).contiguous().requires_grad_(True) for x in (q, k, v))
            gt = g.transpose(1, 2).reshape(b * s, HEADS, DIM).contiguous()
            cu = torch.arange(0, b * s + 1, s, device=dev, dtype=torch.int32)

            def vfwd():
                return varlen(qt, kt, vt, cu, cu, s, s, is_causal=True)

            def vfwd_bwd():
                vfwd().backward(gt)

            rows.append(("varlen", "flash", run(f"varlen s {s}", vfwd, vfwd_bwd)))
        for form, name, r in rows:
            if r is None:
                continue
            f, fb = r
            bwd = max(fb - f, 1e-12)
            print(f"{form},{name},{s},{b},{HEADS},{DIM},{f:.6e},{fb:.6e},{flops:.4e},{flops / f / 1e12:.1f},{2.5 * flops / bwd / 1e12:.1f}")
            sys.stdout.flush()
        del q, k, v, g
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
