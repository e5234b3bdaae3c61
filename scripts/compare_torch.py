#!/usr/bin/env python3
"""Measure with PyTorch what `gpuplan calibrate` measured, on the same machine, and compare.

Issue 3's checks: cuBLAS bf16 8192^3 >= 97% of torch.matmul on random data; device copy >= 97% of
Tensor.copy_; NCCL busbw >= 95% of torch.distributed at >= 1 GiB.

    python3 scripts/compare_torch.py --profile calibration/profiles/h200-sxm-2x --out cmp.json

Timing: CUDA events around batches of back-to-back ops after warm-up; the p50 over batches of the
per-op mean, as gpuplan does. Inputs are torch.randn (never zeros). busbw per nccl-tests:
all_reduce 2(n-1)/n, all_gather and reduce_scatter (n-1)/n, times size/time.
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")

import torch  # noqa: E402


def p50(xs):
    return statistics.median(xs)


def time_batches(fn, warmup=5, batches=15, min_batch_s=10e-3, iters=None, settle_s=0.0):
    """Per-op seconds of each batch. Collectives pass `iters`: every rank must issue as many.
    `settle_s`: untimed back-to-back runs first, so the clock settles under the power cap (as
    gpuplan calibrate's GEMM rows do)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    if settle_s > 0:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < settle_s:
            for _ in range(10):
                fn()
            torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if iters is None:
        s.record()
        fn()
        e.record()
        e.synchronize()
        one = max(s.elapsed_time(e) * 1e-3, 1e-7)
        iters = max(1, min(200, int(min_batch_s / one + 0.999)))
    out = []
    for _ in range(batches):
        s.record()
        for _ in range(iters):
            fn()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e) * 1e-3 / iters)
    return out


def single_gpu():
    res = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda}
    n = 8192
    flops = 2 * n**3
    for name, dt in [("bf16", torch.bfloat16), ("fp16", torch.float16), ("tf32", torch.float32)]:
        torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
        a = torch.randn(n, n, device="cuda", dtype=dt)
        b = torch.randn(n, n, device="cuda", dtype=dt)
        t = time_batches(lambda: torch.matmul(a, b), settle_s=0.2)
        res[f"matmul_{name}_8192_tflops_p50"] = flops / p50(t) / 1e12
        del a, b
    try:
        a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm needs
        one = torch.tensor(1.0, device="cuda")
        t = time_batches(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16), settle_s=0.2)
        res["scaled_mm_fp8_8192_tflops_p50"] = flops / p50(t) / 1e12
        del a, b
    except Exception as e:  # noqa: BLE001
        res["scaled_mm_fp8_error"] = repr(e)
    for gib in (1, 4):
        size = gib << 30
        src = torch.randn(size // 4, device="cuda")
        dst = torch.empty_like(src)
        t = time_batches(lambda: dst.copy_(src), batches=20, min_batch_s=4e-3)
        res[f"copy_{gib}gib_gb_per_s_p50"] = 2 * size / p50(t) / 1e9
        assert torch.equal(dst[-1024:], src[-1024:])
        del src, dst
    torch.cuda.synchronize()
    return res


def dist_worker(out_path):
    import torch.distributed as dist

    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, world = dist.get_rank(), dist.get_world_size()
    res = {}
    for gib in (1, 2, 4):
        size = gib << 30
        n = size // 2
        x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        t = time_batches(lambda: dist.all_reduce(x), warmup=3, batches=10, iters=3)
        tt = torch.tensor(t, device="cuda")
        dist.all_reduce(tt, op=dist.ReduceOp.MAX)
        res[f"all_reduce_{gib}gib_busbw_gb_per_s_p50"] = 2 * (world - 1) / world * size / p50(tt.tolist()) / 1e9
        out = torch.empty(n, device="cuda", dtype=torch.bfloat16)
        shard = x[: n // world].clone()
        t = time_batches(lambda: dist.all_gather_into_tensor(out, shard), warmup=3, batches=10, iters=3)
        tt = torch.tensor(t, device="cuda")
        dist.all_reduce(tt, op=dist.ReduceOp.MAX)
        res[f"all_gather_{gib}gib_busbw_gb_per_s_p50"] = (world - 1) / world * size / p50(tt.tolist()) / 1e9
        t = time_batches(lambda: dist.reduce_scatter_tensor(shard, x), warmup=3, batches=10, iters=3)
        tt = torch.tensor(t, device="cuda")
        dist.all_reduce(tt, op=dist.ReduceOp.MAX)
        res[f"reduce_scatter_{gib}gib_busbw_gb_per_s_p50"] = (world - 1) / world * size / p50(tt.tolist()) / 1e9
        del x, out, shard
    res["world"] = world
    res["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(res, f, indent=1)
    dist.destroy_process_group()


def read_csv(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return list(csv.DictReader(f))


def ours(profile):
    g = {}
    for r in read_csv(os.path.join(profile, "gemm.csv")):
        if (r["m"], r["n"], r["k"]) == ("8192", "8192", "8192"):
            g.setdefault(f"gemm_{r['dtype']}_8192_tflops_p50", float(r["tflops_p50"]))
    for r in read_csv(os.path.join(profile, "hbm.csv")):
        for gib in (1, 4):
            if int(r["size_bytes"]) == gib << 30 and r["kernel"] in ("copy", "memcpy_dtod"):
                g[f"{r['kernel']}_{gib}gib_gb_per_s_p50"] = float(r["bandwidth_gb_per_s_p50"])
    for r in read_csv(os.path.join(profile, "collectives.csv")):
        size = int(r["size_bytes"])
        if size >= 1 << 30 and size % (1 << 30) == 0:
            g[f"{r['op']}_{r['n_ranks']}r_{size >> 30}gib_busbw_gb_per_s_p50"] = float(r["busbw_gb_per_s_p50"])
    return g


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", required=True, help="gpuplan profile folder measured on this machine")
    ap.add_argument("--out", required=True)
    ap.add_argument("--dist-worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.dist_worker:
        dist_worker(a.dist_worker)
        return
    torch_res = single_gpu()
    n = torch.cuda.device_count()
    if n > 1:
        dpath = a.out + ".dist.json"
        env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1")
        subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={n}", __file__, "--profile", a.profile, "--out", a.out, "--dist-worker", dpath],
            check=True,
            env=env,
        )
        with open(dpath) as f:
            torch_res["dist"] = json.load(f)
    mine = ours(a.profile)
    checks = []

    def check(what, ours_key, torch_val, need):
        if ours_key in mine and torch_val:
            r = mine[ours_key] / torch_val
            checks.append({"what": what, "gpuplan": round(mine[ours_key], 2), "torch": round(torch_val, 2), "ratio": round(r, 4), "need": need, "pass": r >= need})

    check("bf16 8192^3 TFLOP/s (cuBLASLt vs torch.matmul)", "gemm_bf16_8192_tflops_p50", torch_res.get("matmul_bf16_8192_tflops_p50"), 0.97)
    check("fp16 8192^3 TFLOP/s", "gemm_fp16_8192_tflops_p50", torch_res.get("matmul_fp16_8192_tflops_p50"), 0.97)
    check("tf32 8192^3 TFLOP/s", "gemm_tf32_8192_tflops_p50", torch_res.get("matmul_tf32_8192_tflops_p50"), 0.97)
    check("fp8 8192^3 TFLOP/s (vs torch._scaled_mm)", "gemm_fp8_8192_tflops_p50", torch_res.get("scaled_mm_fp8_8192_tflops_p50"), 0.97)
    for gib in (1, 4):
        check(f"device copy {gib} GiB GB/s (cuMemcpyDtoD vs Tensor.copy_)", f"memcpy_dtod_{gib}gib_gb_per_s_p50", torch_res.get(f"copy_{gib}gib_gb_per_s_p50"), 0.97)
        check(f"device copy {gib} GiB GB/s (hbm_copy kernel vs Tensor.copy_)", f"copy_{gib}gib_gb_per_s_p50", torch_res.get(f"copy_{gib}gib_gb_per_s_p50"), 0.97)
    d = torch_res.get("dist", {})
    w = d.get("world", 0)
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        for gib in (1, 2, 4):
            check(f"{op} {gib} GiB busbw GB/s on {w} GPUs (NCCL vs torch.distributed)", f"{op}_{w}r_{gib}gib_busbw_gb_per_s_p50", d.get(f"{op}_{gib}gib_busbw_gb_per_s_p50"), 0.95)
    out = {"torch": torch_res, "gpuplan": mine, "checks": checks}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    print(f"{'check':<72} {'gpuplan':>9} {'torch':>9} {'ratio':>7} need  ok")
    for c in checks:
        print(f"{c['what']:<72} {c['gpuplan']:>9.1f} {c['torch']:>9.1f} {c['ratio']:>7.3f} {c['need']:.2f} {'PASS' if c['pass'] else 'FAIL'}")


if __name__ == "__main__":
    main()
