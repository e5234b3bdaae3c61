#!/usr/bin/env python3
"""Fused attention's throughput by head dimension on this GPU (issue 19), as Hugging Face
transformers calls it: PyTorch SDPA with its default backend choice (no `sdpa_kernel` context),
bf16, causal, `enable_gqa=True` when the key/value heads are fewer than the query heads (what
transformers' `sdpa_attention_forward` passes when there is no attention mask), plus the same
shapes with the cuDNN and FlashAttention-2 backends forced.

Shapes: tokens per call 64K (batch = 65536 / seq), seq 2K..64K, head dims 64 (Llama-3.2-1B: 32
heads, 8 KV heads, hidden 2048), 128 (16 heads, hidden 2048; and Llama-3.2-3B's 24 heads, 8 KV),
96 (Phi-3-mini: 32 heads, hidden 3072) and 80 (Phi-2: 32 heads, hidden 2560); each with 8 KV
heads (gqa) and with as many KV heads as query heads (mha).

For each row: forward and forward+backward medians (CUDA events, after 2 warm-up iterations),
TFLOP/s by the FlashAttention convention (causal forward 4 b h s^2 d / 2, backward 2.5x forward),
the kernels that ran (names from torch.profiler of one forward+backward: `cudnn` for cuDNN's
fused attention, `flash` for FlashAttention) and the SM clock (median of nvidia-smi samples taken
every 100 ms while the row ran, from the log given as the first argument).

Usage: python3 scripts/bench_attention_headdim.py SMI_LOG BUDGET_S > attention_headdim.csv
(stderr: versions, GPU, refused shapes)
"""
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SEQS = [2048, 4096, 8192, 16384, 32768, 65536]
TOKENS = 65536
# (label, head_dim, heads), in the order measured: the head dims that matter most first.
SHAPES = [("d64h32", 64, 32), ("d128h16", 128, 16), ("d128h24", 128, 24), ("d96h32", 96, 32), ("d80h32", 80, 32)]
FORCED = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}


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


def kernels(fn):
    """The attention kernels' names seen in one profiled call (short tags)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as p:
        fn()
        torch.cuda.synchronize()
    names = {e.name for e in p.events() if e.device_type.name == "CUDA"}
    tags = set()
    for n in names:
        low = n.lower()
        if "cudnn" in low or "sm90_flash" in low or "cudnn_generated" in low:
            tags.add("cudnn")
        elif "flash" in low:
            tags.add("flash")
        elif "fmha" in low or "efficient" in low or "mem_eff" in low:
            tags.add("efficient")
    attn = sorted(n for n in names if any(t in n.lower() for t in ("cudnn", "flash", "fmha", "attention", "attn")))
    return "+".join(sorted(tags)) or "other", ";".join(a[:80] for a in attn[:4])


def measure(backend, b, h, kv, s, d, dev):
    q = torch.randn(b, h, s, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(b, kv, s, d, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    g = torch.randn(b, h, s, d, device=dev, dtype=torch.bfloat16)
    gqa = kv != h
    flops_fwd = 4 * b * h * s * s * d / 2
    reps = max(3, min(20, int(1e14 / flops_fwd)))

    def fwd():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)

    def fwd_bwd():
        fwd().backward(g)

    ctx = sdpa_kernel([backend]) if backend is not None else None
    try:
        if ctx is not None:
            ctx.__enter__()
        for _ in range(2):
            fwd_bwd()
        torch.cuda.synchronize()
        t0 = time.time()
        tf = timed(fwd, reps)
        tfb = timed(fwd_bwd, reps)
        t1 = time.time()
        tag, names = kernels(fwd_bwd)
        return tf, tfb, flops_fwd, tag, names, t0, t1
    except RuntimeError as e:
        print(f"refused b={b} h={h} kv={kv} s={s} d={d} backend={backend}: {str(e).splitlines()[0][:200]}", file=sys.stderr)
        return None
    finally:
        if ctx is not None:
            ctx.__exit__(None, None, None)
        del q, k, v, g
        torch.cuda.empty_cache()


def smi_clock(log, t0, t1):
    """Median SM clock (MHz) of the nvidia-smi samples between unix times t0 and t1."""
    import datetime as dt

    vals = []
    try:
        for line in open(log):
            parts = [p.strip() for p in line.split(",")]
            if len(parts) < 2 or not parts[1].split()[0].isdigit():
                continue
            ts = dt.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=dt.timezone.utc).timestamp()
            if t0 <= ts <= t1:
                vals.append(int(parts[1].split()[0]))
    except OSError:
        return ""
    vals.sort()
    return str(vals[len(vals) // 2]) if vals else ""


def main():
    log, budget = sys.argv[1], float(sys.argv[2])
    start = time.time()
    dev = torch.device("cuda")
    print(
        f"gpu={torch.cuda.get_device_name()} torch={torch.__version__} cuda={torch.version.cuda} cudnn={torch.backends.cudnn.version()} "
        f"flash_sdp={torch.backends.cuda.flash_sdp_enabled()} cudnn_sdp={torch.backends.cuda.cudnn_sdp_enabled()} "
        f"mem_efficient_sdp={torch.backends.cuda.mem_efficient_sdp_enabled()} math_sdp={torch.backends.cuda.math_sdp_enabled()}",
        file=sys.stderr,
    )
    rows = []
    # Pass 1: the default choice (as transformers calls it), gqa then mha; pass 2: forced backends, mha.
    plan = [(None, "default", shape, kvmode) for shape in SHAPES for kvmode in ("gqa", "mha")]
    plan += [(be, name, shape, "mha") for shape in SHAPES[:3] for name, be in FORCED.items()]
    plan += [(be, name, shape, "gqa") for shape in SHAPES[:1] for name, be in FORCED.items()]
    print("backend_asked,backend_ran,shape,batch,heads,kv_heads,seq,head_dim,causal,fwd_s,fwd_bwd_s,bwd_s,fwd_tflops,bwd_tflops,sm_clock_mhz,kernels")
    for be, name, (label, d, h), kvmode in plan:
        kv = 8 if kvmode == "gqa" else h
        for s in SEQS:
            if time.time() - start > budget:
                print(f"budget: stopped before {name} {label} {kvmode} s={s}", file=sys.stderr)
                return
            b = max(1, TOKENS // s)
            m = measure(be, b, h, kv, s, d, dev)
            if m is None:
                continue
            tf, tfb, flops, tag, names, t0, t1 = m
            tb = max(tfb - tf, 1e-9)
            print(
                f"{name},{tag},{label}-{kvmode},{b},{h},{kv},{s},{d},1,{tf:.6e},{tfb:.6e},{tb:.6e},{flops / tf / 1e12:.1f},{2.5 * flops / tb / 1e12:.1f},"
                f"{smi_clock(log, t0, t1)},{names}",
                flush=True,
            )


if __name__ == "__main__":
    main()
