#!/usr/bin/env python3
"""gpuplan fp8 microbenchmark (issue 19): what torchao float8 training runs, kernel by kernel, on one GPU.

For the linear shapes of the HF run set's Llama configs (tokens M = 8192, the forward GEMM
out[M,N] = x[M,K] w[N,K]^T and the two backward GEMMs dgrad[M,K] = g[M,N] w[N,K] and
wgrad[N,K] = g^T[N,M] x[M,K]) it times, with CUDA events (median of `--reps` after warm-up):

  mm_bf16            torch.mm in bf16 (cuBLAS)
  scaled_tensorwise  torch._scaled_mm, float8_e4m3fn operands, one fp32 scale each, bf16 out
  scaled_rowwise     torch._scaled_mm with a scale per row of A and per column of B (fp32), bf16 out
  cast_tensorwise    torch.compile'd amax(|x|) -> scale -> x*scale -> float8 (and the transposed copy
                     for the other backward GEMM): what Inductor makes of torchao's hp_tensor_to_float8
  cast_rowwise       the same with a per-row amax (and a per-column one for the transposed copy)

CSV columns: op, m, n, k, time_us, tflops (GEMMs) or gb_per_s (casts: bytes read + written), what.
"""
import argparse
import csv


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--reps", type=int, default=20)
    a = p.parse_args()
    import torch
    dev = "cuda"
    f8 = torch.float8_e4m3fn
    fmax = torch.finfo(f8).max

    def timeit(fn):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(a.reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            ts.append(s.elapsed_time(e) * 1e3)
        ts.sort()
        return ts[len(ts) // 2]

    def cast_tw(x):
        amax = x.abs().max().float()
        scale = fmax / torch.clamp(amax, min=1e-12)
        y = (x.float() * scale).clamp(-fmax, fmax).to(f8)
        yt = (x.t().contiguous().float() * scale).clamp(-fmax, fmax).to(f8)
        return y, yt, scale

    def cast_rw(x):
        s0 = fmax / torch.clamp(x.abs().amax(dim=1, keepdim=True).float(), min=1e-12)
        s1 = fmax / torch.clamp(x.abs().amax(dim=0, keepdim=True).float(), min=1e-12)
        y = (x.float() * s0).clamp(-fmax, fmax).to(f8)
        yt = (x.float() * s1).clamp(-fmax, fmax).to(f8).t().contiguous()
        return y, yt, s0, s1

    ctw = torch.compile(cast_tw)
    crw = torch.compile(cast_rw)
    # (name, N, K) of Llama-3.2-1B (h 2048, ffn 8192, 32 q heads x 64, 8 kv heads) and -3B (h 3072,
    # ffn 8192, 24 x 128, 8 kv heads); M = 8192 tokens (mb2 x 4096).
    shapes = [("1b_q", 2048, 2048), ("1b_kv", 512, 2048), ("1b_o", 2048, 2048), ("1b_up", 8192, 2048), ("1b_down", 2048, 8192),
              ("3b_q", 3072, 3072), ("3b_kv", 1024, 3072), ("3b_up", 8192, 3072), ("3b_down", 3072, 8192)]
    rows = []
    for M in (8192, 4096):
        for name, N, K in shapes:
            for gname, (m, n, k) in (("fwd", (M, N, K)), ("dgrad", (M, K, N)), ("wgrad", (N, K, M))):
                x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
                w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
                fl = 2.0 * m * n * k
                t = timeit(lambda: torch.mm(x, w.t()))
                rows.append(("mm_bf16", m, n, k, t, fl / t / 1e6, f"{name} {gname}"))
                xf = x.to(f8)
                wf = w.to(f8)
                one = torch.ones((), device=dev, dtype=torch.float32)
                t = timeit(lambda: torch._scaled_mm(xf, wf.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
                rows.append(("scaled_tensorwise", m, n, k, t, fl / t / 1e6, f"{name} {gname}"))
                sa = torch.ones((m, 1), device=dev, dtype=torch.float32)
                sb = torch.ones((1, n), device=dev, dtype=torch.float32)
                try:
                    t = timeit(lambda: torch._scaled_mm(xf, wf.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16))
                    rows.append(("scaled_rowwise", m, n, k, t, fl / t / 1e6, f"{name} {gname}"))
                except Exception as e:  # noqa: BLE001
                    print("rowwise failed", m, n, k, type(e).__name__, str(e)[:200], flush=True)
                del x, w, xf, wf
            # casts of an activation [M, K] (bf16 in; fp8 out twice: row-major and transposed)
            x = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
            by = M * K * (2 + 1 + 1)
            t = timeit(lambda: ctw(x))
            rows.append(("cast_tensorwise", M, 0, K, t, by / t / 1e3, f"{name} act read 2B write 2x1B"))
            t = timeit(lambda: crw(x))
            rows.append(("cast_rowwise", M, 0, K, t, by / t / 1e3, f"{name} act read 2B write 2x1B"))
            del x
        print("done M", M, flush=True)
    with open(a.out, "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["op", "m", "n", "k", "time_us", "tflops_or_gb_per_s", "what"])
        for r in rows:
            wr.writerow([r[0], r[1], r[2], r[3], f"{r[4]:.2f}", f"{r[5]:.1f}", r[6]])
    print("wrote", a.out, len(rows), "rows", flush=True)


if __name__ == "__main__":
    main()
