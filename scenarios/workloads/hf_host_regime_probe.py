#!/usr/bin/env python3
"""Issue 19: does the host's slow regime in HF decode follow a probe, and which one?

Decode step times of one run switch between two levels within seconds (calibration/runs/hf/
raw/postfit-6: e.g. hf-122 53 ms -> 85 ms -> 52 ms per token). This interleaves, in one process and
in a loop of fixed wall time, one real decode step with four probes taken right beside it, so that
each row holds the step and the probes of the same second:

  cpu_us    a pure-Python loop of fixed work (no torch): the CPU's own speed
  op_us     200 x torch.add of two [16,16] bf16 tensors, no sync, per call: PyTorch's dispatch
  plan_us   transformers' sdpa_attention_forward at a fixed probe shape (b1, 32 q heads, 8 kv
            heads, d64) with a KV length new at every call, less the same call at a known length
            (sync after each): cuDNN's execution-plan build, as `calibrate --host` defines it
  flash_us  a one-token step of the same model with SDPA's flash backend forced (no plan built):
            the rest of the host's step
  step_us   a one-token step of the model with PyTorch's SDPA choice (the measured decode step)

Writes CSV rows `config,batch,kv_len,iter,t_s,cpu_us,op_us,plan_us,flash_us,step_us` to --csv
(appending) and prints the correlation of step_us with each probe.

  python3 hf_host_regime_probe.py --config llama-3.2-1b.json --batch 1 --kv-len 512 --seconds 120 --csv OUT.csv
"""

import argparse
import json
import os
import statistics
import sys
import time


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--kv-len", type=int, default=512)
    p.add_argument("--seconds", type=float, default=120.0)
    p.add_argument("--csv", required=True)
    a = p.parse_args()

    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from host_probe import _Attn

    dev = torch.device("cuda")
    with open(a.config) as f:
        cfg = AutoConfig.for_model(**json.load(f))
    torch.manual_seed(0)
    with torch.device(dev):
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=torch.bfloat16).eval()
    hkv = cfg.num_key_value_heads
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    cache = DynamicCache(config=model.config)
    for i in range(cfg.num_hidden_layers):
        k = torch.randn(a.batch, hkv, a.kv_len, hd, device=dev, dtype=torch.bfloat16)
        cache.update(k, torch.randn_like(k), i)
    nxt = torch.randint(0, cfg.vocab_size, (a.batch, 1), device=dev)

    mod = _Attn(32, 8)
    q = torch.randn(1, 32, 1, 64, device=dev, dtype=torch.bfloat16)
    kmax = torch.randn(1, 8, 40000, 64, device=dev, dtype=torch.bfloat16)
    vmax = torch.randn_like(kmax)
    ks, vs = kmax[:, :, :20000].contiguous(), vmax[:, :, :20000].contiguous()
    x = torch.randn(16, 16, device=dev, dtype=torch.bfloat16)
    y = torch.randn(16, 16, device=dev, dtype=torch.bfloat16)
    probe_kv = 20000

    def timed(fn):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e6

    def cpu():
        s = 0
        for i in range(20000):
            s += i * i
        return s

    def ops():
        for _ in range(200):
            torch.add(x, y)

    rows = []
    name = os.path.basename(a.config).removesuffix(".json")
    with torch.inference_mode():
        def step():
            nonlocal nxt
            out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
            nxt = out.logits[:, -1:].argmax(-1)

        for _ in range(3):
            step()
        t_start = time.perf_counter()
        it = 0
        while time.perf_counter() - t_start < a.seconds and cache.get_seq_length() < a.kv_len + 4000:
            it += 1
            cpu_us = timed(cpu)
            op_us = timed(ops) / 200
            probe_kv += 1
            kk, vv = kmax[:, :, :probe_kv].contiguous(), vmax[:, :, :probe_kv].contiguous()
            new_us = timed(lambda: sdpa_attention_forward(mod, q, kk, vv, None, dropout=0.0, scaling=None, is_causal=None))
            same_us = timed(lambda: sdpa_attention_forward(mod, q, ks.clone(), vs.clone(), None, dropout=0.0, scaling=None, is_causal=None))
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                flash_us = timed(step)
            step_us = timed(step)
            rows.append((name, a.batch, a.kv_len, it, time.perf_counter() - t_start, cpu_us, op_us, new_us - same_us, flash_us, step_us))
    new = not os.path.exists(a.csv)
    with open(a.csv, "a") as f:
        if new:
            f.write("config,batch,kv_len,iter,t_s,cpu_us,op_us,plan_us,flash_us,step_us\n")
        for r in rows:
            f.write(",".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in r) + "\n")
    step = [r[9] for r in rows]
    print(f"{name} b{a.batch} kv{a.kv_len}: {len(rows)} rows, step median {statistics.median(step) / 1e3:.1f} ms")
    for i, k in ((5, "cpu_us"), (6, "op_us"), (7, "plan_us"), (8, "flash_us")):
        v = [r[i] for r in rows]
        print(f"  corr(step, {k}) = {statistics.correlation(step, v):+.3f}  median {statistics.median(v):.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
