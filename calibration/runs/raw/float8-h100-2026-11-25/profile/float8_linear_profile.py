"""Per-kernel GPU time of one torchao float8 linear's forward + backward under torch.compile.

Issue 19 (branch wt-float8), the follow-up to scripts/float8_bench.py's linear.csv: where the
rowwise recipe's extra time over tensorwise goes, kernel by kernel. For each shape (tokens M,
in K, out N) and recipe (bf16, tensorwise, rowwise) the linear runs 10 profiled steps after
warm-up; torch.profiler's CUDA kernel times are summed per kernel name and divided by the steps.

Writes OUTDIR/kernels.csv: recipe, m, k, n, kernel, calls_per_step, us_per_step.
Usage: python3 float8_linear_profile.py OUTDIR
"""
import csv
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

OUT = sys.argv[1]
os.makedirs(OUT, exist_ok=True)
STEPS = 10
SHAPES = [(16384, 8192, 2048), (16384, 4096, 1792), (16384, 14336, 4096)]


def main():
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    with open(os.path.join(OUT, "kernels.csv"), "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["recipe", "m", "k", "n", "kernel", "calls_per_step", "us_per_step"])
        for m, k, n in SHAPES:
            for recipe in ("bf16", "tensorwise", "rowwise"):
                torch._dynamo.reset()
                lin = torch.nn.Sequential(torch.nn.Linear(k, n, bias=False)).cuda().to(torch.bfloat16)
                if recipe != "bf16":
                    convert_to_float8_training(lin, config=Float8LinearConfig.from_recipe_name(recipe))
                f = torch.compile(lin)
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                for _ in range(5):
                    f(x).sum().backward()
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(STEPS):
                        f(x).sum().backward()
                    torch.cuda.synchronize()
                agg = {}
                for e in prof.events():
                    if e.device_type == torch.autograd.DeviceType.CUDA:
                        c, t = agg.get(e.name, (0, 0.0))
                        dt = getattr(e, "device_time", None)
                        agg[e.name] = (c + 1, t + (dt if dt is not None else e.cuda_time))
                tot = 0.0
                for name, (c, t) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
                    w.writerow([recipe, m, k, n, name[:160], c / STEPS, f"{t / STEPS:.2f}"])
                    tot += t / STEPS
                print(f"{recipe} {m}x{k}->{n}: {tot:.0f} us of kernels per step, {len(agg)} kernels", flush=True)
                fh.flush()
                del lin, f, x


if __name__ == "__main__":
    main()
