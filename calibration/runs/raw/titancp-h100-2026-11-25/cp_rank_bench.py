"""Per-rank cost of PyTorch's context-parallel ring attention on one GPU (no communication).

Runs torch's own `_templated_ring_attention` / `_templated_ring_attention_backward`
(torch/distributed/tensor/experimental/_context_parallel/_attention.py in torch 2.11) for one CP
rank: `dist.get_rank`/`get_world_size` answer (rank, cp) and the KV rotater hands back the rank's
own key/value buffer instead of a neighbour's (same shapes, same kernels; no NCCL). Every SDPA call
(flash, bf16), the `_SDPAMerger` fp32 merges, the per-step `torch.cat` of K/V for sending, the fp32
gradient accumulation and `_partial_update` copies run exactly as torch runs them.

Also times, at the same shapes, the bare flash SDPA calls alone (forward; forward+backward), so the
difference is what CP adds per rank beyond the attention kernels, and the single causal call.

Shapes: torchtitan Llama 3.1 8B attention as torchtitan Dec-2024 calls it: q [1, 32, L, 128],
keys/values repeated to 32 heads (torchtitan's `repeat_kv` before SDPA), L = tokens per rank.

Usage: python cp_rank_bench.py OUT.jsonl [--cpu-smoke]
"""
import json
import sys
import time
import types

import torch
import torch.nn.functional as F

try:
    import torch.distributed.tensor.experimental._context_parallel._attention as cpa
except ImportError:  # torch <= 2.6
    import torch.distributed.tensor.experimental._attention as cpa

aten = torch.ops.aten
SMOKE = "--cpu-smoke" in sys.argv
DEV = "cpu" if SMOKE else "cuda"
DT = torch.float32 if SMOKE else torch.bfloat16
HEADS, HD = (2, 16) if SMOKE else (32, 128)


class _Rotater:
    """Hands back what was exchanged (the rank's own buffer): shapes of a real rotation."""

    def __init__(self, *a, **k):
        self.buf = None
        self.first = None

    def exchange_buffers(self, b):
        if self.first is None:
            self.first = b
        self.buf = b

    def next_buffer(self):
        return self.buf if self.buf is not None else self.first


def patch(rank, size):
    cpa._create_rotater = lambda *a, **k: _Rotater()
    cpa.dist = types.SimpleNamespace(get_rank=lambda g=None: rank, get_world_size=lambda g=None: size, ProcessGroup=object)


if SMOKE:
    # CPU: math attention with the flash op's (out, lse, ...) calling convention.
    def fwd_op(q, k, v, is_causal=False, **kw):
        o, lse = aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, is_causal)
        return o, lse

    def bwd_op(grad_out=None, query=None, key=None, value=None, out=None, logsumexp=None, is_causal=False, **kw):
        return aten._scaled_dot_product_flash_attention_for_cpu_backward(grad_out, query, key, value, out, logsumexp, 0.0, is_causal)

    BWD_KW = {}
else:
    fwd_op = aten._scaled_dot_product_flash_attention
    bwd_op = aten._scaled_dot_product_flash_attention_backward.default


def timeit(fn, iters=5, warm=2):
    for _ in range(warm):
        fn()
    if SMOKE:
        t = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - t) / iters * 1e3
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(iters):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / iters


def tensors(lq, lk):
    g = torch.Generator(device=DEV).manual_seed(0)
    q = torch.randn(1, HEADS, lq, HD, device=DEV, dtype=DT, generator=g)
    k = torch.randn(1, HEADS, lk, HD, device=DEV, dtype=DT, generator=g)
    v = torch.randn(1, HEADS, lk, HD, device=DEV, dtype=DT, generator=g)
    return q, k, v


def attn_flops(lq, lk, causal):
    f = 4.0 * HEADS * lq * lk * HD
    return f / 2 if causal else f


def bare(lq, lk, causal):
    """One flash SDPA call: forward alone, and its backward alone."""
    q, k, v = tensors(lq, lk)
    out = fwd_op(q, k, v, is_causal=causal)
    o, lse = out[0], out[1]
    do = torch.randn_like(o)
    f = lambda: fwd_op(q, k, v, is_causal=causal)
    if SMOKE:
        b = lambda: bwd_op(grad_out=do, query=q, key=k, value=v, out=o, logsumexp=lse, is_causal=causal)
    else:
        rest = out[2:]
        cq, ck, mq, mk, seed, off = rest[0], rest[1], rest[2], rest[3], rest[4], rest[5]
        b = lambda: bwd_op(do, q, k, v, o, lse, cq, ck, mq, mk, 0.0, causal, seed, off)
    return timeit(f), timeit(b)


def ring_rank(local, cp, rank):
    """torch's ring attention forward and backward for `rank` of `cp`, `local` tokens per rank."""
    patch(rank, cp)
    q, k, v = tensors(local, local)
    fwd_kw = dict(dropout_p=0.0, scale=None) if not SMOKE else {}
    res = cpa._templated_ring_attention(None, 2, fwd_op, q, k, v, is_causal=True, **fwd_kw)
    o, lse = res[0], res[1]
    do = torch.randn_like(o)
    f = lambda: cpa._templated_ring_attention(None, 2, fwd_op, q, k, v, is_causal=True, **fwd_kw)
    if SMOKE:
        bkw = {}
    else:
        rest = res[2:]
        bkw = dict(cum_seq_q=rest[0], cum_seq_k=rest[1], max_q=rest[2], max_k=rest[3], dropout_p=0.0, philox_seed=rest[4], philox_offset=rest[5], scale=None)
    b = lambda: cpa._templated_ring_attention_backward(None, 2, bwd_op, do, "grad_out", q, k, v, o, lse, is_causal=True, **bkw)
    return timeit(f), timeit(b)


def merge_one(local):
    """One `_SDPAMerger` step on a full (non-partial) block and on a partial one, eager."""
    m = cpa._SDPAMerger(True, seq_dim=2)
    q, k, v = tensors(local, local)
    res = fwd_op(q, k, v, is_causal=True)
    o, lse = res[0], res[1]
    m.step(o, lse, False)
    base_o, base_l = m._out.clone(), m._lse.clone()

    def full():
        m._out, m._lse = base_o, base_l
        m.step(o, lse, False)

    oh, lh = o.chunk(2, dim=2)[1].contiguous(), lse.chunk(2, dim=2)[1].contiguous()

    def part():
        m._out, m._lse = base_o, base_l
        m.step(oh, lh, True)

    return timeit(full), timeit(part)


def main():
    out_path = sys.argv[1]
    rows = []
    env = dict(torch=torch.__version__, device=(torch.cuda.get_device_name() if not SMOKE else "cpu"), heads=HEADS, head_dim=HD, dtype=str(DT))
    locals_ = [256] if SMOKE else [32768, 16384, 8192]
    cps = [1, 2, 4] if SMOKE else [1, 2, 4, 8]
    for local in locals_:
        for lq, lk, causal in [(local, local, True), (local, local // 2, False), (local // 2, local, False), (local, local, False)]:
            f, b = bare(lq, lk, causal)
            rows.append(dict(kind="bare", q=lq, kv=lk, causal=causal, fwd_ms=f, bwd_ms=b, fwd_tflops=attn_flops(lq, lk, causal) / f / 1e9, bwd_tflops=2.5 * attn_flops(lq, lk, causal) / b / 1e9, **env))
            print(rows[-1], flush=True)
        mf, mp = merge_one(local)
        rows.append(dict(kind="merge", local=local, full_ms=mf, partial_ms=mp, **env))
        print(rows[-1], flush=True)
        for cp in cps:
            for rank in sorted({0, cp - 1}):
                if cp == 1 and rank > 0:
                    continue
                f, b = ring_rank(local, cp, rank)
                c = local // 2
                flops = attn_flops(local, local, True) + (cp - 1) * attn_flops(2 * c, c, False)
                rows.append(dict(kind="ring", local=local, cp=cp, rank=rank, fwd_ms=f, bwd_ms=b, attn_fwd_flops=flops, fwd_tflops=flops / f / 1e9, bwd_tflops=2.5 * flops / b / 1e9, **env))
                print(rows[-1], flush=True)
        if not SMOKE:
            torch.cuda.empty_cache()
    with open(out_path, "w") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
