#!/usr/bin/env python3
"""Where a Hugging Face decode step's time goes (issue 19): the manual `model(...)` loop of
hf_train.py's decode (bf16 weights, a DynamicCache prefilled with random keys/values), one step per
token, with every `torch.nn.functional.scaled_dot_product_attention` call timed on the host.

For each `--case B:KV` and each SDPA backend choice (PyTorch's own, then flash forced) it prints one
CSV row per case and backend, the medians over the steps after `--warmup`:

  step_us        host wall clock of the step, torch.cuda.synchronize() at both ends
  pre_us         step start -> the first SDPA call starts (embedding, layer 0's norm, q/k/v, RoPE,
                 the cache update of layer 0), host time, no sync
  sdpa_first_us  host time inside the step's first SDPA call (with PyTorch's choice on Hopper:
                 cuDNN, whose execution plan is built when the KV length is new)
  sdpa_rest_us   host time inside the other SDPA calls of the step, summed
  between_us     host time between the first SDPA call's start and the last one's end, less the
                 SDPA calls (the rest of layers 0..L-1 on the host)
  tail_us        the last SDPA call's end -> the step's end (the last layer, final norm, LM head,
                 argmax, then waiting for the GPU to finish: the GPU's backlog)
  gpu_us         the step's GPU time between two CUDA events recorded at its start and end
  weights_gib, cache_gib   torch.cuda.memory_allocated() of the model, and of the prefilled cache
  alloc_gib, reserved_gib  torch.cuda.max_memory_allocated() / max_memory_reserved() over the case
  used_gib       the device's used memory (cudaMemGetInfo total - free) at the case's end

Usage: hf_decode_breakdown.py --config C.json --case 1:512 --case 64:4096 [--steps 25] [--csv F]
"""

import argparse
import contextlib
import json
import statistics
import sys
import time

import torch


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--case", action="append", required=True, help="BATCH:KV_LEN")
    p.add_argument("--steps", type=int, default=25)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--csv", default=None)
    return p.parse_args()


class SdpaClock:
    """Wraps F.scaled_dot_product_attention (transformers' sdpa_attention_forward calls it) and keeps
    (start, end) host times of every call."""

    def __init__(self):
        self.calls = []
        self.orig = torch.nn.functional.scaled_dot_product_attention

    def __call__(self, *args, **kw):
        t0 = time.perf_counter()
        out = self.orig(*args, **kw)
        self.calls.append((t0, time.perf_counter()))
        return out


def main():
    a = parse_args()
    from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with open(a.config) as f:
        cfg = AutoConfig.for_model(**json.load(f))
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=torch.bfloat16)
    model.eval()
    torch.cuda.synchronize()
    weights = torch.cuda.memory_allocated()
    clock = SdpaClock()
    torch.nn.functional.scaled_dot_product_attention = clock
    heads = cfg.num_attention_heads
    kvh = getattr(cfg, "num_key_value_heads", None) or heads
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    head = "config,batch,kv_len,backend,layers,steps,step_us,pre_us,sdpa_first_us,sdpa_rest_us,between_us,tail_us,gpu_us,weights_gib,cache_gib,alloc_gib,reserved_gib,used_gib"
    rows = [head]
    print(head, flush=True)
    name = a.config.rsplit("/", 1)[-1].removesuffix(".json")
    for case in a.case:
        b, kv = (int(x) for x in case.split(":"))
        for backend in ("auto", "flash"):
            cache = DynamicCache(config=model.config)
            for i in range(cfg.num_hidden_layers):
                k = torch.randn(b, kvh, kv, hd, device="cuda", dtype=torch.bfloat16)
                cache.update(k, torch.randn_like(k), i)
                del k
            ctx = sdpa_kernel([SDPBackend.FLASH_ATTENTION]) if backend == "flash" else contextlib.nullcontext()
            torch.cuda.synchronize()
            cache_bytes = torch.cuda.memory_allocated() - weights
            torch.cuda.reset_peak_memory_stats()
            per = {k: [] for k in ("step", "pre", "first", "rest", "between", "tail", "gpu")}
            nxt = torch.randint(0, cfg.vocab_size, (b, 1), device="cuda")
            with torch.inference_mode(), ctx:
                for step in range(a.steps):
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    torch.cuda.synchronize()
                    clock.calls.clear()
                    t0 = time.perf_counter()
                    e0.record()
                    out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
                    nxt = out.logits[:, -1:].argmax(-1)
                    e1.record()
                    torch.cuda.synchronize()
                    t1 = time.perf_counter()
                    del out
                    if step < a.warmup or not clock.calls:
                        continue
                    c = clock.calls
                    inside = [e - s for s, e in c]
                    per["step"].append(t1 - t0)
                    per["pre"].append(c[0][0] - t0)
                    per["first"].append(inside[0])
                    per["rest"].append(sum(inside[1:]))
                    per["between"].append((c[-1][1] - c[0][0]) - sum(inside))
                    per["tail"].append(t1 - c[-1][1])
                    per["gpu"].append(e0.elapsed_time(e1) / 1e3)
            med = {k: statistics.median(v) * 1e6 for k, v in per.items()}
            free, total = torch.cuda.mem_get_info()
            gib = 2.0**30
            mem = (f"{weights / gib:.3f},{cache_bytes / gib:.3f},{torch.cuda.max_memory_allocated() / gib:.3f},"
                   f"{torch.cuda.max_memory_reserved() / gib:.3f},{(total - free) / gib:.3f}")
            row = (f"{name},{b},{kv},{backend},{cfg.num_hidden_layers},{len(per['step'])},{med['step']:.1f},{med['pre']:.1f},"
                   f"{med['first']:.1f},{med['rest']:.1f},{med['between']:.1f},{med['tail']:.1f},{med['gpu']:.1f},{mem}")
            rows.append(row)
            print(row, flush=True)
            del cache
            torch.cuda.empty_cache()
    if a.csv:
        with open(a.csv, "w") as f:
            f.write("\n".join(rows) + "\n")


if __name__ == "__main__":
    sys.exit(main())
