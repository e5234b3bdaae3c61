#!/usr/bin/env python3
"""Host link bandwidth of one GPU: pinned host->device, device->host and both at once (two streams),
timed with CUDA events, as the PCIe efficiency the PCIe systems' collective model uses (issue 20).

Run on the device machine: `python3 scripts/device_pcie_copy.py > $OUT/pcie_copy.txt`. Prints one
CSV row per (direction, size): p50 of 20 timed copies after 5 warm-ups, GB = 1e9."""
import statistics
import subprocess

import torch

print("# " + subprocess.run(["nvidia-smi", "--query-gpu=name,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,driver_version",
                             "--format=csv,noheader"], capture_output=True, text=True).stdout.strip())
print("# torch", torch.__version__, "cuda", torch.version.cuda)
dev = torch.device("cuda:0")
print("direction,size_bytes,time_us_p50,bandwidth_gb_per_s_p50")
for size in [1 << 20, 16 << 20, 256 << 20, 1 << 30]:
    h_src = torch.empty(size, dtype=torch.uint8, pin_memory=True)
    h_dst = torch.empty(size, dtype=torch.uint8, pin_memory=True)
    d_src = torch.empty(size, dtype=torch.uint8, device=dev)
    d_dst = torch.empty(size, dtype=torch.uint8, device=dev)
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()

    def h2d():
        with torch.cuda.stream(s1):
            d_dst.copy_(h_src, non_blocking=True)

    def d2h():
        with torch.cuda.stream(s2):
            h_dst.copy_(d_src, non_blocking=True)

    for name, fns, moved in [("h2d", [h2d], size), ("d2h", [d2h], size), ("both", [h2d, d2h], 2 * size)]:
        times = []
        for i in range(25):
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for s in (s1, s2):
                s.wait_event(start)
            for f in fns:
                f()
            for s in (s1, s2):
                torch.cuda.current_stream().wait_stream(s)
            end.record()
            torch.cuda.synchronize()
            if i >= 5:
                times.append(start.elapsed_time(end) * 1e3)
        t = statistics.median(times)
        print(f"{name},{size},{t:.1f},{moved / (t * 1e-6) / 1e9:.2f}")
