#!/usr/bin/env python3
"""Small-M GEMMs of the TensorRT-LLM dev rows' layers on one GPU (issue 20, docs/trtllm-residuals.md):
cuBLAS through PyTorch, the stand-in for TensorRT-LLM's GEMM plugin (the engine itself cannot be
installed on the device machine). Times, with CUDA events, the per-layer linear GEMMs of
- Llama-3.1 70B at TP 4 in bf16 (the online Triton rows: a 202- or 467-token context phase, decode
  batches of 1-512): QKV 8192 -> 2560, O 2048 -> 8192, gate+up 8192 -> 14336, down 7168 -> 8192;
- Llama-3.1 8B at TP 1 in FP8 (the offline v0.17 rows' decode batches of 64-2048): QKV 4096 -> 6144,
  O 4096 -> 4096, gate+up 4096 -> 28672, down 14336 -> 4096; FP8 e4m3 with per-tensor scales
  (torch._scaled_mm, cuBLASLt), bf16 out.
For each (dtype, M, N, K): p10/p50/p90 of 50 timed calls after 10 warm-ups, each call on a fresh
weight copy in turn out of a pool bigger than the L2 (so the weights stream from HBM as in a
model's forward), and the achieved TFLOP/s and GB/s (weights + activations + output).
Writes CSV to stdout: dtype,m,n,k,time_us_p10,time_us_p50,time_us_p90,tflops_p50,gbps_p50
"""
import sys

import torch


def bench(dtype, m, n, k, reps=50, warm=10):
    dev = "cuda"
    wbytes = n * k * (1 if dtype == "fp8" else 2)
    pool = max(2, int(3 * 50e6 / wbytes) + 1)  # > 3x the 50 MB L2
    if dtype == "fp8":
        a = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
        ws = [torch.randn(n, k, device=dev).to(torch.float8_e4m3fn).t() for _ in range(pool)]
        one = torch.tensor(1.0, device=dev)
        f = lambda w: torch._scaled_mm(a, w, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    else:
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        ws = [torch.randn(k, n, device=dev, dtype=torch.bfloat16) for _ in range(pool)]
        f = lambda w: a @ w
    for i in range(warm):
        f(ws[i % pool])
    torch.cuda.synchronize()
    times = []
    for i in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        w = ws[i % pool]
        s.record()
        f(w)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e3)
    times.sort()
    q = lambda p: times[min(len(times) - 1, int(p * len(times)))]
    p50 = q(0.5)
    flops = 2 * m * n * k
    bytes_ = wbytes + m * k * (1 if dtype == "fp8" else 2) + m * n * 2
    return q(0.1), p50, q(0.9), flops / p50 / 1e6, bytes_ / p50 / 1e3


def main():
    print(f"# gpu={torch.cuda.get_device_name()} torch={torch.__version__} script=scripts/device_small_m_gemm.py", flush=True)
    print("dtype,m,n,k,time_us_p10,time_us_p50,time_us_p90,tflops_p50,gbps_p50", flush=True)
    shapes = {
        "bf16": ([(2560, 8192), (8192, 2048), (14336, 8192), (8192, 7168)], [1, 8, 32, 64, 128, 202, 256, 467, 512, 1024, 2048]),
        "fp8": ([(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)], [8, 64, 128, 256, 512, 1024, 2048, 4096]),
    }
    for dtype, (nks, ms) in shapes.items():
        for n, k in nks:
            for m in ms:
                try:
                    p10, p50, p90, tf, gb = bench(dtype, m, n, k)
                except RuntimeError as e:
                    print(f"# {dtype} m={m} n={n} k={k}: {str(e).splitlines()[0]}", flush=True)
                    continue
                print(f"{dtype},{m},{n},{k},{p10:.3f},{p50:.3f},{p90:.3f},{tf:.1f},{gb:.1f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
