#!/usr/bin/env python3
"""MoE probe for `gpuplan calibrate --moe`: what the kernels an MoE layer runs on cost on this GPU.

Prints one CSV table to stdout (and to --csv), header
`probe,dtype,layout,experts,tokens,k,n,top_k,gpu_us,wall_us,flops,bytes,reps`, with `#` note lines
(GPU, versions, date). Nothing is fitted here; `gpuplan calibrate --moe` (crates/gpuplan-gpu/src/
calibrate/moe.rs) reads the table.

Grouped GEMMs (`probe` = grouped_mm, bmm, scaled_grouped_mm), `experts` E groups of `tokens` T rows
each (balanced offsets: every expert gets T tokens), per-expert GEMM widths `k` (reduction) and `n`:
  layout mk  C[T,n] = A[T,k] B_e[k,n] for each expert e: the 2d x 3d grouped GEMM transformers 5.x's
             `grouped_mm` experts path runs in forward (activations [E*T, k] sorted by expert, weights
             stored [E, n, k] and passed transposed, int32 offsets), and the data gradient of it;
  layout k   C_e[k,n] = A[:, rows of e]^T dY[rows of e, :]: the 2d x 2d grouped GEMM of the weight
             gradient (offsets split the reduction dimension, T per expert).
  grouped_mm         `torch.nn.functional.grouped_mm` (else `torch._grouped_mm`) in bf16 (PyTorch's
                     CUTLASS grouped kernel on sm90) and in fp32 (PyTorch's `_grouped_mm_fallback`:
                     the offsets copied to the host, one `mm` per expert; TF32 allowed, as the HF
                     training runs allow it). `wall_us` is the host wall clock per call with a
                     synchronize after each call (the fallback syncs anyway), from an idle GPU.
  bmm                `torch.bmm` [E,T,k] x [E,k,n] in bf16 (cuBLAS strided-batched GEMM), balanced
                     groups only: the batched alternative.
  scaled_grouped_mm  `torch._scaled_grouped_mm` in FP8 e4m3 with rowwise fp32 scales (layout mk),
                     where this PyTorch offers it on this GPU (else a `#` note says why not).
  flops = 2 E T k n; gpu_us = CUDA-event time per call (median of rounds after warm-up).

MoE index kernels (`probe` = the kernel), at `tokens` tokens of hidden `k`, E experts, top-k
`top_k`, as transformers 5.x's MoE layer and Megatron's permutation run them; `bytes` = what the
kernel must read and write at least, so bytes / gpu_us is the rate it reaches:
  router_softmax_topk  fp32 softmax over [tokens, E] router logits and topk (2 kernels + cast)
  argsort              torch.argsort(stable=True) of the tokens*top_k expert ids (int64)
  histc                torch.histc of the expert ids over E bins
  bincount             torch.bincount of the expert ids (minlength E)
  cumsum               cumsum over E counts (int32)
  gather_rows          index_select of tokens*top_k hidden rows by token (the permute)
  scatter_inverse      inv[perm] = arange (the inverse permutation)
  weight_rows          routed rows times their routing weights (elementwise)
  unpermute_gather     routed rows back to token order (index_select by the inverse permutation)
  topk_sum             the top_k rows of each token summed
  index_add            index_add_ of the routed rows into [tokens, hidden] (the scatter unpermute)
  scatter_add          scatter_add_ of the routed rows with an expanded index (Megatron-style)

Run from the repository root with the node's Python (torch >= 2.9 on a CUDA GPU):
  python3 scenarios/workloads/moe_probe.py [--quick] [--csv FILE]
"""

import argparse
import datetime
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F

HEADER = "probe,dtype,layout,experts,tokens,k,n,top_k,gpu_us,wall_us,flops,bytes,reps"
ROWS = []


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--csv", default=None, help="also write the table here")
    p.add_argument("--quick", action="store_true", help="a few shapes only (under a minute)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--budget-s", type=float, default=240.0, help="stop starting new shapes after this many seconds")
    return p.parse_args()


def note(text):
    line = "# " + text.replace("\n", " ")
    ROWS.append(line)
    print(line, flush=True)


def emit(probe, dtype, layout, experts, tokens, k, n, top_k, gpu_s, wall_s, flops, nbytes, reps):
    wall = "" if wall_s is None else f"{wall_s * 1e6:.3f}"
    row = f"{probe},{dtype},{layout},{experts},{tokens},{k},{n},{top_k},{gpu_s * 1e6:.3f},{wall},{flops:.6g},{nbytes:.6g},{reps}"
    ROWS.append(row)
    print(row, flush=True)


def gpu_time(fn, reps, rounds=3, warmup=2):
    """Median over rounds of (CUDA-event time of reps calls) / reps, seconds."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    res = []
    for _ in range(rounds):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(reps):
            fn()
        e.record()
        torch.cuda.synchronize()
        res.append(s.elapsed_time(e) * 1e-3 / reps)
    return statistics.median(res)


def wall_time(fn, reps, rounds=3):
    """Median over rounds of host wall clock per call with a synchronize after each call, seconds."""
    fn()
    torch.cuda.synchronize()
    res = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
            torch.cuda.synchronize()
        res.append((time.perf_counter() - t0) / reps)
    return statistics.median(res)


ERRORS = {}


def attempt(desc, fn):
    """Run one measurement; an error becomes a `#` note (the first 3 of each kind), not a stop."""
    try:
        fn()
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        note(f"out of memory: {desc}")
    except Exception as e:  # noqa: BLE001
        key = desc.split(" ")[0] + type(e).__name__
        ERRORS[key] = ERRORS.get(key, 0) + 1
        if ERRORS[key] <= 3:
            note(f"error: {desc}: {type(e).__name__}: {str(e)[:160]}")


def reps_for(est_s):
    return max(3, min(50, int(0.02 / max(est_s, 1e-6))))


def gmm_fn():
    if hasattr(F, "grouped_mm"):
        return F.grouped_mm, "F.grouped_mm"
    return torch._grouped_mm, "torch._grouped_mm"


# Per-expert GEMM widths (k, n) of layout mk: the HF run set's gate_up and down projections
# (hidden 2048; expert widths 768, 1024, 1536, 5632; scenarios/workloads/hf_configs/) and those of
# the published MoE models (Qwen3-30B-A3B: hidden 2048, 768; DeepSeek-V3: 7168, 2048; Mixtral 8x7B:
# 4096, 14336; GPT-OSS-120B: 2880, 2880). The down projection of each is its own (k, n) pair, so the
# data gradients' shapes (k and n swapped) are among them.
WIDTHS = [(2048, 1536), (768, 2048), (2048, 2048), (1024, 2048), (2048, 3072), (1536, 2048), (2048, 11264), (5632, 2048),
          (7168, 4096), (2048, 7168), (4096, 28672), (14336, 4096), (2880, 5760), (2880, 2880)]
EXPERTS = [8, 32, 64, 128]
TOKENS = [1, 4, 16, 64, 256, 1024, 4096, 8192]
MAX_ROWS = 131072          # E * T
MAX_FLOPS = 4e12           # per call
FP32_WIDTHS = WIDTHS[:8]   # the fallback only where the HF runs take it (fp32 master weights)


def grouped(a, dev, t_end):
    gmm, api = gmm_fn()
    note(f"grouped GEMM API: {api}")
    widths, experts, tokens = WIDTHS, EXPERTS, TOKENS
    fp32_widths = FP32_WIDTHS
    if a.quick:
        widths, experts, tokens, fp32_widths = [(2048, 1536), (768, 2048)], [8, 64], [16, 256, 2048], [(2048, 1536)]
    has_scaled = hasattr(torch, "_scaled_grouped_mm")
    scaled_ok = has_scaled
    fp8_failures = 0
    if not has_scaled:
        note("torch._scaled_grouped_mm: not in this PyTorch; no FP8 grouped rows")
    for (K, N) in widths:
        for E in experts:
            for T in tokens:
                if time.perf_counter() > t_end:
                    note(f"budget reached: stopped before k={K} n={N} E={E} T={T}")
                    return
                S = E * T
                flops = 2.0 * S * K * N
                if S > MAX_ROWS or flops > MAX_FLOPS:
                    continue
                try:
                    x = torch.randn(S, K, device=dev, dtype=torch.bfloat16)
                    w_store = torch.randn(E, N, K, device=dev, dtype=torch.bfloat16) * 0.02
                    w = w_store.transpose(-2, -1)
                    offs = torch.arange(1, E + 1, device=dev, dtype=torch.int32) * T
                    est = flops / 5e14 + 1e-5
                    r = reps_for(est)
                    nbytes = 2.0 * (S * K + E * K * N + S * N)
                    t = gpu_time(lambda: gmm(x, w, offs=offs), reps=r)
                    emit("grouped_mm", "bf16", "mk", E, T, K, N, 0, t, None, flops, nbytes, r)
                    # Weight gradient: [K, S] x [S, N] -> [E, K, N], offsets over S.
                    dy = torch.randn(S, N, device=dev, dtype=torch.bfloat16)
                    xt = x.t()
                    attempt(f"grouped_mm_k bf16 k={K} n={N} E={E} T={T}", lambda: emit(
                        "grouped_mm", "bf16", "k", E, T, K, N, 0, gpu_time(lambda: gmm(xt, dy, offs=offs), reps=r), None, flops, nbytes, r))
                    xb = x.view(E, T, K)
                    attempt(f"bmm bf16 k={K} n={N} E={E} T={T}", lambda: emit(
                        "bmm", "bf16", "mk", E, T, K, N, 0, gpu_time(lambda: torch.bmm(xb, w), reps=r), None, flops, nbytes, r))
                    if (K, N) in fp32_widths and T <= 4096:
                        xf, wf, dyf = x.float(), w_store.float().transpose(-2, -1), dy.float()
                        xft = xf.t()
                        rf = max(2, min(r, 10))

                        def fp32(a_, b_, layout):
                            t = gpu_time(lambda: gmm(a_, b_, offs=offs), reps=rf, rounds=2)
                            wall = wall_time(lambda: gmm(a_, b_, offs=offs), reps=rf, rounds=2)
                            emit("grouped_mm", "fp32", layout, E, T, K, N, 0, t, wall, flops, 2 * nbytes, rf)
                        attempt(f"grouped_mm_mk fp32 k={K} n={N} E={E} T={T}", lambda: fp32(xf, wf, "mk"))
                        attempt(f"grouped_mm_k fp32 k={K} n={N} E={E} T={T}", lambda: fp32(xft, dyf, "k"))
                        del xf, wf, dyf, xft
                    if scaled_ok:
                        try:
                            xq = x.to(torch.float8_e4m3fn)
                            wq = w_store.to(torch.float8_e4m3fn).transpose(-2, -1)
                            sa = torch.ones(S, device=dev, dtype=torch.float32)
                            sb = torch.ones(E, N, device=dev, dtype=torch.float32)
                            t = gpu_time(lambda: torch._scaled_grouped_mm(xq, wq, sa, sb, offs=offs, out_dtype=torch.bfloat16), reps=r)
                            emit("scaled_grouped_mm", "fp8", "mk", E, T, K, N, 0, t, None, flops, nbytes / 2 + S * N, r)
                        except Exception as e:  # noqa: BLE001 - report and go on without this FP8 shape
                            fp8_failures += 1
                            if fp8_failures <= 3:
                                note(f"torch._scaled_grouped_mm failed at k={K} n={N} E={E} T={T}: {type(e).__name__}: {str(e)[:160]}")
                            if fp8_failures >= 12:
                                scaled_ok = False
                                note("torch._scaled_grouped_mm: 12 failures, no more FP8 rows")
                    del x, w_store, w, dy, xt, xb
                except torch.cuda.OutOfMemoryError:
                    note(f"out of memory at k={K} n={N} E={E} T={T}")
                    torch.cuda.empty_cache()
                except Exception as e:  # noqa: BLE001
                    note(f"error at k={K} n={N} E={E} T={T}: {type(e).__name__}: {str(e)[:200]}")


def index(a, dev, t_end):
    cases = [(n, E, k, H) for H in (2048, 7168) for n in (1024, 4096, 16384, 65536) for (E, k) in ((8, 2), (32, 8), (64, 8), (128, 8))]
    if a.quick:
        cases = [(n, E, k, 2048) for n in (4096, 32768) for (E, k) in ((8, 2), (64, 8))]
    for n, E, k, H in cases:
        if time.perf_counter() > t_end:
            note(f"budget reached: stopped before index tokens={n} E={E} k={k} H={H}")
            return
        S = n * k
        if S * H * 2 * 4 > 16e9:
            continue
        try:
            h = torch.randn(n, H, device=dev, dtype=torch.bfloat16)
            logits = torch.randn(n, E, device=dev, dtype=torch.bfloat16)
            probs = F.softmax(logits, dim=-1, dtype=torch.float)
            topv, topi = probs.topk(k, dim=-1)
            ids = topi.reshape(-1)
            perm = torch.argsort(ids, stable=True)
            tok = perm // k
            sel = h.index_select(0, tok)
            wts = topv.reshape(-1)[perm].to(torch.bfloat16)
            inv = torch.empty_like(perm)
            inv[perm] = torch.arange(S, device=dev)  # filled here: scatter_inverse is timed at H 2048 only
            counts = torch.bincount(ids, minlength=E).to(torch.int32)
            idx2 = tok.unsqueeze(-1).expand(S, H)
            ar = torch.arange(S, device=dev)
            b = 2
            ops = [
                ("router_softmax_topk", lambda: F.softmax(logits, dim=-1, dtype=torch.float).topk(k, dim=-1), n * E * (2 + 4 + 4) + n * k * 12),
                ("argsort", lambda: torch.argsort(ids, stable=True), S * 8 * 2),
                ("histc", lambda: torch.histc(ids.float(), bins=E, min=0, max=E - 1), S * 4),
                ("bincount", lambda: torch.bincount(ids, minlength=E), S * 8),
                ("cumsum", lambda: torch.cumsum(counts, 0), E * 8),
                ("gather_rows", lambda: h.index_select(0, tok), S * H * b * 2 + S * 8),
                ("scatter_inverse", lambda: inv.__setitem__(perm, ar), S * 8 * 3),
                ("weight_rows", lambda: sel * wts.unsqueeze(-1), S * H * b * 2 + S * b),
                ("unpermute_gather", lambda: sel.index_select(0, inv), S * H * b * 2 + S * 8),
                ("topk_sum", lambda: sel.view(n, k, H).sum(dim=1), S * H * b + n * H * b),
                ("index_add", lambda: torch.zeros(n, H, device=dev, dtype=torch.bfloat16).index_add_(0, tok, sel), S * H * b + n * H * b * 2 + S * 8),
                ("scatter_add", lambda: torch.zeros(n, H, device=dev, dtype=torch.bfloat16).scatter_add_(0, idx2, sel), S * H * b + n * H * b * 2 + S * H * 8),
            ]
            for name, fn, nbytes in ops:
                if H != 2048 and name in ("router_softmax_topk", "argsort", "histc", "bincount", "cumsum", "scatter_inverse"):
                    continue  # width-independent: measured at H 2048
                t = gpu_time(fn, reps=20)
                emit(name, "bf16", "", E, n, H, 0, k, t, None, 0.0, nbytes, 20)
            del h, logits, probs, topv, topi, ids, perm, tok, sel, wts, inv, idx2, ar
        except torch.cuda.OutOfMemoryError:
            note(f"out of memory at index tokens={n} E={E} k={k} H={H}")
            torch.cuda.empty_cache()
        except Exception as e:  # noqa: BLE001
            note(f"error at index tokens={n} E={E} k={k} H={H}: {type(e).__name__}: {str(e)[:200]}")


def main():
    a = parse_args()
    dev = a.device
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    print(HEADER, flush=True)
    ROWS.append(HEADER)
    props = torch.cuda.get_device_properties(0)
    note(f"gpu={torch.cuda.get_device_name(0).replace(',', ' ')} sms={props.multi_processor_count} "
         f"torch={torch.__version__} cuda={torch.version.cuda} date={datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')} "
         f"quick={int(a.quick)} script=scenarios/workloads/moe_probe.py")
    t0 = time.perf_counter()
    budget = 45.0 if a.quick else a.budget_s
    grouped(a, dev, t0 + budget * 0.75)
    index(a, dev, t0 + budget)
    note(f"probe took {time.perf_counter() - t0:.1f} s")
    if a.csv:
        with open(a.csv, "w") as f:
            f.write("\n".join(ROWS) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
