"""Host time per PyTorch eager op on this machine (the framework's per-op dispatch: Python, the
dispatcher, the kernel launch), for transferring gpuplan's torch-eager host costs between hosts.

Each op runs on tiny CUDA tensors (the GPU finishes each kernel sooner than the host issues the
next, so the loop is host-bound), `--calls` times back to back without synchronizing, timed with
time.perf_counter; `--reps` repetitions give p10/p50/p90. The mix is the ops of a decoder layer's
forward (linear, elementwise, norm pieces, activation, softmax, batched matmul, indexing, cat).
Prints one JSON document: per-op microseconds per call and the mix's mean of medians.
"""
import argparse, json, platform, statistics, time

import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    dev = torch.device("cuda")
    bf = torch.bfloat16
    x = torch.randn(1, 256, device=dev, dtype=bf)
    y = torch.randn(1, 256, device=dev, dtype=bf)
    w = torch.randn(256, 256, device=dev, dtype=bf)
    q = torch.randn(8, 4, 64, device=dev, dtype=bf)
    k = torch.randn(8, 64, 128, device=dev, dtype=bf)
    s = torch.randn(8, 4, 128, device=dev, dtype=torch.float32)
    idx = torch.tensor([0], device=dev)
    cache = torch.zeros(4, 256, device=dev, dtype=bf)
    ops = {
        "linear": lambda: F.linear(x, w),
        "add": lambda: x + y,
        "mul": lambda: x * y,
        "pow_mean": lambda: x.pow(2).mean(-1, keepdim=True),
        "rsqrt": lambda: torch.rsqrt(x),
        "silu": lambda: F.silu(x),
        "softmax": lambda: torch.softmax(s, dim=-1),
        "bmm": lambda: torch.matmul(q, k),
        "index_put": lambda: cache.index_copy_(0, idx, x),
        "gather": lambda: cache[idx],
        "cat": lambda: torch.cat([x, y]),
        "to_dtype": lambda: s.to(bf),
    }
    for f in ops.values():  # warm-up: kernels loaded, allocator primed
        for _ in range(50):
            f()
    torch.cuda.synchronize()
    rows = {}
    for name, f in ops.items():
        per = []
        for _ in range(a.reps):
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(a.calls):
                f()
            per.append((time.perf_counter() - t) / a.calls * 1e6)
        torch.cuda.synchronize()
        per.sort()
        q10 = per[max(0, int(0.1 * (len(per) - 1)))]
        q90 = per[min(len(per) - 1, int(round(0.9 * (len(per) - 1))))]
        rows[name] = {"us_p10": q10, "us_p50": statistics.median(per), "us_p90": q90}
    mix = statistics.mean(r["us_p50"] for r in rows.values())
    print(json.dumps({
        "kind": "torch-dispatch", "torch": torch.__version__, "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(), "gpu": torch.cuda.get_device_name(0),
        "calls": a.calls, "reps": a.reps, "ops": rows, "mix_us_per_op": mix,
    }))


if __name__ == "__main__":
    main()
