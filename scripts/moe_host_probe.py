#!/usr/bin/env python3
"""Host and GPU cost of the pieces of an eager Megatron MoE layer that PyTorch can run (issue 18).

Transformer Engine is not installed on the device machine, so this measures what TE's grouped
linear reduces to on the GPU and the host, through PyTorch 2.11 on the same libraries:
  host  the host's time per call of one op, measured while the GPU is held busy by
        `torch.cuda._sleep` (the calls only enqueue; nothing waits for the GPU): cuBLASLt FP8
        GEMM (`torch._scaled_mm`, the library call TE's per-expert GEMMs make), cuBLAS bf16 GEMM
        (`torch.mm`), PyTorch's one-launch grouped GEMM (`torch._grouped_mm`, 16 groups), an
        FP8 cast (`Tensor.to(float8_e4m3fn)`, a quantize), a small elementwise op, and the round
        trip of a device-to-host copy of 16 token counts (`.tolist()`, the dispatcher's sync) on an
        idle GPU;
  loop  per-expert GEMM loops at expert shapes (E experts of T tokens, the fc1 and fc2 shapes
        of Qwen3-30B-A3B, 2048 x 1536 and 768 x 2048): the GPU's time (CUDA events, launches hidden
        behind a sleep) and the wall time of the loop from an idle GPU to its end (launches exposed),
        against one `torch._grouped_mm` call of the same work, bf16 and FP8 (`_scaled_mm`, with the
        per-expert FP8 cast of its input, as TE's split quantize does before each GEMM).
Writes a CSV: kind,name,dtype,experts,tokens,n,k,host_us,gpu_us,wall_us,calls.
Usage: python3 scripts/moe_host_probe.py --csv OUT.csv [--budget-s 150]
"""
import argparse
import statistics
import sys
import time

import torch

FP8 = torch.float8_e4m3fn


def sleep_ms(ms):
    # torch.cuda._sleep spins for a number of cycles; ~1.98 GHz on an H100 at its max SM clock.
    torch.cuda._sleep(int(ms * 1.98e6))


def host_per_call(fn, calls=400, reps=5):
    """Median host time per call of fn (us), the GPU held busy so that no call waits for it."""
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        sleep_ms(60)
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        out.append((t1 - t0) / calls * 1e6)
    return statistics.median(out)


def gpu_and_wall(fn, reps=7):
    """(GPU time by CUDA events with launches hidden behind a sleep, wall time from an idle GPU), us."""
    g, w = [], []
    for _ in range(reps):
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        sleep_ms(20)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        g.append(a.elapsed_time(b) * 1e3)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        w.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(g), statistics.median(w)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", required=True)
    ap.add_argument("--budget-s", type=float, default=150.0)
    args = ap.parse_args()
    start = time.time()
    dev = torch.device("cuda")
    rows = []

    def row(kind, name, dtype, experts, tokens, n, k, host="", gpu="", wall="", calls=""):
        r = [kind, name, dtype, experts, tokens, n, k, host, gpu, wall, calls]
        rows.append(r)
        print(",".join(str(x) if not isinstance(x, float) else f"{x:.2f}" for x in r), flush=True)

    print("kind,name,dtype,experts,tokens,n,k,host_us,gpu_us,wall_us,calls")
    one = torch.ones((), device=dev)
    # host: one call each
    a8 = torch.randn(64, 128, device=dev).to(FP8)
    b8 = torch.randn(128, 128, device=dev).to(FP8).t()
    ab = torch.randn(64, 128, device=dev, dtype=torch.bfloat16)
    bb = torch.randn(128, 128, device=dev, dtype=torch.bfloat16)
    xs = torch.randn(64, 128, device=dev, dtype=torch.bfloat16)
    offs16 = torch.arange(4, 65, 4, device=dev, dtype=torch.int32)
    wg = torch.randn(16, 128, 128, device=dev, dtype=torch.bfloat16)
    counts = torch.randint(0, 100, (16,), device=dev)
    host_ops = {
        "scaled_mm_fp8": lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
        "mm_bf16": lambda: torch.mm(ab, bb),
        "grouped_mm_bf16_16": lambda: torch._grouped_mm(ab, wg, offs=offs16),
        "cast_fp8": lambda: xs.to(FP8),
        "add_bf16": lambda: xs.add(1.0),
    }
    for name, fn in host_ops.items():
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        row("host", name, "", "", 64, 128, 128, host=host_per_call(fn), calls=400)
    # the dispatcher's sync: a device-to-host copy of the counts on an idle GPU
    sync = []
    for _ in range(200):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        counts.tolist()
        sync.append((time.perf_counter() - t0) * 1e6)
    row("host", "d2h_tolist_16", "int64", "", "", "", "", host=statistics.median(sync), calls=200)

    # loops at expert shapes
    shapes = [("fc1", 1536, 2048), ("fc2", 2048, 768)]
    for experts in (4, 8, 16, 32):
        for tokens in (128, 256, 512, 1024, 2048, 4096):
            if time.time() - start > args.budget_s:
                print("# budget reached", file=sys.stderr)
                break
            for sname, n, k in shapes:
                x = torch.randn(experts * tokens, k, device=dev, dtype=torch.bfloat16)
                w = torch.randn(experts, n, k, device=dev, dtype=torch.bfloat16)
                w8 = [w[e].to(FP8) for e in range(experts)]
                xsp = list(x.split(tokens))
                offs = torch.arange(tokens, experts * tokens + 1, tokens, device=dev, dtype=torch.int32)
                wt = w.transpose(1, 2)

                def loop_bf16():
                    for e in range(experts):
                        torch.mm(xsp[e], wt[e])

                def loop_fp8():
                    for e in range(experts):
                        torch._scaled_mm(xsp[e].to(FP8), w8[e].t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

                def grouped():
                    torch._grouped_mm(x, wt, offs=offs)

                for name, fn, dt in (("loop_mm", loop_bf16, "bf16"), ("loop_scaled_mm_cast", loop_fp8, "fp8"), ("grouped_mm", grouped, "bf16")):
                    fn()
                    torch.cuda.synchronize()
                    g, wl = gpu_and_wall(fn)
                    row("loop", f"{sname}_{name}", dt, experts, tokens, n, k, gpu=g, wall=wl, calls=experts if name != "grouped_mm" else 1)
                del x, w, w8, xsp, wt
    with open(args.csv, "w") as f:
        f.write("kind,name,dtype,experts,tokens,n,k,host_us,gpu_us,wall_us,calls\n")
        for r in rows:
            f.write(",".join(str(x) if not isinstance(x, float) else f"{x:.2f}" for x in r) + "\n")
    print(f"# {len(rows)} rows in {time.time() - start:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
