#!/usr/bin/env python3
"""Grouped expert GEMMs against per-expert GEMM loops on one GPU (issue 18, Qwen3-30B-A3B shapes).

Megatron's grouped experts (TE `GroupedLinear`) run a layer's local experts either as per-expert
cuBLAS GEMMs (TE's `general_grouped_gemm`: one GEMM launch per expert, spread over a few compute
streams) or as one multi-expert kernel. Transformer Engine is not on the device machine, so this
times PyTorch's stand-ins at the shapes of Qwen3-30B-A3B (hidden 2048, expert ffn 768, gated up
projection 2 x 768 = 1536) with E local experts of M tokens each:
  grouped       torch._grouped_mm (bf16; one CUTLASS grouped kernel for all E experts)
  loop          one torch.mm per expert on the current stream
  loop_s4       one torch.mm per expert, round-robin over 4 side streams (TE's compute streams)
  dense         one torch.mm of the E*M rows against one expert's weight (total-M reference)
  grouped_fp8   torch._scaled_grouped_mm, e4m3 operands, row-wise scales (if present)
  loop_fp8      one torch._scaled_mm per expert, e4m3, per-tensor scales
Passes: fprop  [M,K] x [K,N];  dgrad  [M,N] x [N,K];  wgrad  [K,M] x [M,N] (reduction over M).
gpu_us: CUDA-event median of --reps after warm-ups (whole call, all experts); host_us: median
host time to enqueue the call (synchronised before, not after); tflops: 2*E*M*N*K / gpu time.
Writes a CSV: method,pass,E,M,K,N,gpu_us,host_us,tflops,note
Usage: python3 scripts/grouped_gemm_probe.py --csv OUT.csv
"""
import argparse
import statistics
import time

import torch


def timed(fn, reps):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    gpu, host = [], []
    for _ in range(reps):
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        b.record()
        b.synchronize()
        gpu.append(a.elapsed_time(b) * 1e3)
        host.append((t1 - t0) * 1e6)
    return statistics.median(gpu), statistics.median(host)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", required=True)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--experts", default="16")
    args = ap.parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    streams = [torch.cuda.Stream() for _ in range(4)]
    out = ["method,pass,E,M,K,N,gpu_us,host_us,tflops,note"]
    has_sgm = hasattr(torch, "_scaled_grouped_mm")
    f8 = torch.float8_e4m3fn
    for E in [int(e) for e in args.experts.split(",")]:
        # (K, N) of the forward GEMM: fc1 gated up (2048 -> 1536), fc1 one half (2048 -> 768), fc2 (768 -> 2048).
        for K, N in [(2048, 1536), (2048, 768), (768, 2048)]:
            for M in (64, 128, 256, 512, 1024, 2048):
                T = E * M
                offs = torch.arange(M, T + 1, M, device=dev, dtype=torch.int32)
                x = torch.randn(T, K, device=dev, dtype=torch.bfloat16)
                w = torch.randn(E, K, N, device=dev, dtype=torch.bfloat16) * 0.02
                wt = w.transpose(1, 2).contiguous()  # [E, N, K]
                dy = torch.randn(T, N, device=dev, dtype=torch.bfloat16)
                xt = x.t().contiguous()  # [K, T]
                # (pass, a, b3d-or-2d, rows of each expert's A, reduction, out shape)
                cases = {
                    "fprop": (x, w, K, N),
                    "dgrad": (dy, w.transpose(1, 2), N, K),  # [E, N, K] view, column-major per expert
                    "wgrad": (xt, dy, None, None),
                }
                for pas, (a, b, kk, nn) in cases.items():
                    flops = 2.0 * T * N * K
                    res = {}
                    if pas == "wgrad":
                        res["grouped"] = lambda a=a, b=b: torch._grouped_mm(a, b, offs=offs)
                        res["loop"] = lambda a=a, b=b: [torch.mm(a[:, e * M:(e + 1) * M], b[e * M:(e + 1) * M]) for e in range(E)]
                        def s4(a=a, b=b):
                            cur = torch.cuda.current_stream()
                            for s in streams:
                                s.wait_stream(cur)
                            for e in range(E):
                                with torch.cuda.stream(streams[e % 4]):
                                    torch.mm(a[:, e * M:(e + 1) * M], b[e * M:(e + 1) * M])
                            for s in streams:
                                cur.wait_stream(s)
                        res["loop_s4"] = s4
                        res["dense"] = lambda a=a, b=b: torch.mm(a, b)
                    else:
                        res["grouped"] = lambda a=a, b=b: torch._grouped_mm(a, b, offs=offs)
                        res["loop"] = lambda a=a, b=b: [torch.mm(a[e * M:(e + 1) * M], b[e]) for e in range(E)]
                        def s4(a=a, b=b):
                            cur = torch.cuda.current_stream()
                            for s in streams:
                                s.wait_stream(cur)
                            for e in range(E):
                                with torch.cuda.stream(streams[e % 4]):
                                    torch.mm(a[e * M:(e + 1) * M], b[e])
                            for s in streams:
                                cur.wait_stream(s)
                        res["loop_s4"] = s4
                        res["dense"] = lambda a=a, b=b: torch.mm(a, b[0])
                        # FP8: e4m3 operands; _scaled_mm wants B column-major.
                        a8 = a.to(f8)
                        b8 = b.to(f8)
                        bcm = b8.transpose(1, 2).contiguous().transpose(1, 2)  # [E, k, n] column-major
                        one = torch.ones((), device=dev, dtype=torch.float32)
                        res["loop_fp8"] = lambda a8=a8, bcm=bcm: [torch._scaled_mm(a8[e * M:(e + 1) * M], bcm[e], one, one, out_dtype=torch.bfloat16) for e in range(E)]
                        if has_sgm:
                            sa = torch.ones(T, device=dev, dtype=torch.float32)
                            sb = torch.ones(E, bcm.shape[2], device=dev, dtype=torch.float32)
                            res["grouped_fp8"] = lambda a8=a8, bcm=bcm, sa=sa, sb=sb: torch._scaled_grouped_mm(a8, bcm, sa, sb, offs=offs, out_dtype=torch.bfloat16)
                    for meth, fn in res.items():
                        try:
                            g, h = timed(fn, args.reps)
                            out.append(f"{meth},{pas},{E},{M},{K},{N},{g:.2f},{h:.2f},{flops / g / 1e6:.1f},")
                        except Exception as ex:  # noqa: BLE001 - record what the build lacks
                            msg = str(ex).splitlines()[0][:120].replace(",", ";")
                            out.append(f"{meth},{pas},{E},{M},{K},{N},,,,{msg}")
                print(f"E={E} K={K} N={N} M={M} done", flush=True)
    with open(args.csv, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
