#!/usr/bin/env python3
"""Issue 19 (wt-power7): NVML energy of the parts of a host-bound eager HF training step that the
power6 small-kernel probe did not cover, each in isolation on one GPU, looped with host gaps:
  - the fused fp32 AdamW step (torch.optim.AdamW(fused=True)) over a model-sized parameter list
    (Qwen3-1.7B's and Llama-3.2-1B's tensor shapes, fp32 params/grads/moments);
  - autocast's per-forward bf16 casts of those fp32 weights (p.to(bfloat16) per weight tensor);
  - SDPA (flash) causal forward+backward at the runs' shapes, one call per layer;
  - cross-entropy (fp32 upcast of bf16 logits) forward+backward over the vocabulary.
Each part's GPU time per iteration is timed with CUDA events (synchronized, no host between its own
kernels beyond what eager launches add); each phase then repeats iteration + host sleep GAP_MS for
PHASE_S seconds, and its power is the NVML total-energy counter over the phase. Excess energy per
iteration over idle = (E - idle_W * wall) / iterations. Never changes clocks or power limits.
Writes OUT/parts.json. Usage: python3 power7_parts_probe.py OUTDIR
"""
import json, os, sys, time, threading
import pynvml, torch
import torch.nn.functional as F

OUT = sys.argv[1]
os.makedirs(OUT, exist_ok=True)
PHASE_S = float(os.environ.get("PHASE_S", "2.0"))
GAP_MS = float(os.environ.get("GAP_MS", "20"))
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
dev = torch.device("cuda")
samples = []
stop = threading.Event()
cur = ["start"]

def sampler():
    while not stop.is_set():
        try:
            samples.append((time.perf_counter(), cur[0], pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                            pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0))
        except pynvml.NVMLError:
            pass
        time.sleep(0.01)

def energy_j():
    return pynvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0

res = []

def gpu_time_ms(fn, n=5):
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(n):
        a.record(); fn(); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]

def phase(name, fn, idle_w, extra):
    try:
        _phase(name, fn, idle_w, extra)
    except Exception as ex:  # one part failing leaves the others
        print(json.dumps(dict(phase=name, error=repr(ex))), flush=True)
        res.append(dict(phase=name, error=repr(ex)))

def _phase(name, fn, idle_w, extra):
    t_ms = gpu_time_ms(fn)
    time.sleep(0.3)
    cur[0] = name
    n = 0
    e0, t0 = energy_j(), time.perf_counter()
    while time.perf_counter() - t0 < PHASE_S:
        fn(); torch.cuda.synchronize(); n += 1
        time.sleep(GAP_MS / 1000.0)
    t1, e1 = time.perf_counter(), energy_j()
    cur[0] = "between"
    wall = t1 - t0
    ins = [s for s in samples if t0 <= s[0] <= t1 and s[1] == name]
    r = dict(phase=name, gpu_ms=t_ms, iters=n, wall_s=wall, gap_ms=GAP_MS, energy_w=(e1 - e0) / wall,
             excess_j_per_iter=((e1 - e0) - idle_w * wall) / n,
             excess_w_over_gpu_time=((e1 - e0) - idle_w * wall) / n / (t_ms / 1e3),
             sm_clock_mhz=sum(s[2] for s in ins) / max(1, len(ins)), **extra)
    res.append(r)
    print(json.dumps(r), flush=True)

threading.Thread(target=sampler, daemon=True).start()
torch.cuda.synchronize(); time.sleep(1.0)
cur[0] = "idle"; e0, t0 = energy_j(), time.perf_counter(); time.sleep(2.0); t1, e1 = time.perf_counter(), energy_j()
idle_w = (e1 - e0) / (t1 - t0)
res.append(dict(phase="idle", energy_w=idle_w, wall_s=t1 - t0)); print(json.dumps(res[-1]), flush=True)

MODELS = {
    # name: hidden, layers, q heads, kv heads, head_dim, intermediate, vocab, tied
    "qwen3-1.7b": (2048, 28, 16, 8, 128, 6144, 151936, True),
    "llama-3.2-1b": (2048, 16, 32, 8, 64, 8192, 128256, True),
}
for mname, (hd, L, nq, nkv, dh, inter, vocab, tied) in MODELS.items():
    shapes = [(vocab, hd)]
    for _ in range(L):
        shapes += [(nq * dh, hd), (nkv * dh, hd), (nkv * dh, hd), (hd, nq * dh), (inter, hd), (inter, hd), (hd, inter), (hd,), (hd,)]
        if mname.startswith("qwen3"):
            shapes += [(dh,), (dh,)]
    shapes += [(hd,)]
    params = [torch.nn.Parameter(torch.randn(s, device=dev) * 0.02) for s in shapes]
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    nparam = sum(p.numel() for p in params)
    opt = torch.optim.AdamW(params, lr=1e-5, fused=True)
    phase(f"{mname}_adamw_fused", lambda: opt.step(), idle_w,
          dict(params=nparam, tensors=len(params), bytes=28 * nparam))
    phase(f"{mname}_bf16_casts", lambda: [p.to(torch.bfloat16) for p in params if p.dim() == 2], idle_w,
          dict(params=nparam, bytes=6 * sum(p.numel() for p in params if p.dim() == 2)))
    del opt
    for p in params:
        p.grad = None
    del params
    torch.cuda.empty_cache()
    for (b, s) in ((1, 2048), (2, 1024), (1, 1024)):
        q = torch.randn(b, nq, s, dh, device=dev, dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(b, nkv, s, dh, device=dev, dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(b, nkv, s, dh, device=dev, dtype=torch.bfloat16, requires_grad=True)
        go = torch.randn(b, nq, s, dh, device=dev, dtype=torch.bfloat16)
        def sdpa():
            for _ in range(L):
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
                o.backward(go)
        flops = L * 4 * b * nq * s * s * dh * 0.5 * 3.5  # causal fwd (2 GEMMs) + bwd (2.5x fwd)
        phase(f"{mname}_sdpa_{b}x{s}", sdpa, idle_w, dict(batch=b, seq=s, layers=L, flops_causal_est=flops))
        del q, k, v, go
        logits = torch.randn(b * s, vocab, device=dev, dtype=torch.bfloat16, requires_grad=True)
        lab = torch.randint(0, vocab, (b * s,), device=dev)
        def ce():
            loss = F.cross_entropy(logits.float(), lab)
            loss.backward()
        phase(f"{mname}_ce_{b}x{s}", ce, idle_w, dict(tokens=b * s, vocab=vocab))
        del logits, lab
        torch.cuda.empty_cache()
stop.set()
json.dump(dict(gpu=torch.cuda.get_device_name(0), driver=pynvml.nvmlSystemGetDriverVersion(), torch=torch.__version__,
               utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), power_limit_w=pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
               phase_s=PHASE_S, gap_ms=GAP_MS, phases=res), open(os.path.join(OUT, "parts.json"), "w"), indent=1)
