#!/usr/bin/env python3
"""Host probe for `gpuplan calibrate --host`: what the framework's host side costs per piece of a
Hugging Face transformers decode step, timed on this node with the GPU (nearly) idle.

Prints one CSV table to stdout (and to --csv): `probe,detail,b,hq,hkv,d,layers,us_per_call,n_calls`.
Every time is host wall clock (time.perf_counter) per call, the median over `rounds` rounds of
`n` calls each, after warm-up, with a torch.cuda.synchronize() only where the detail says so.

  op_dispatch        torch.add of two [16,16] bf16 tensors (one dispatcher op + one kernel launch)
  module_call        nn.Module __call__ of an empty forward
  cache_update       DynamicCache.update of one layer, one new token (torch.cat of keys and values)
  greedy             argmax over [1, 128256] bf16 logits (the loop's and generate()'s greedy pick)
  sdpa_decode_new    transformers' sdpa_attention_forward of one query token per sequence against a
                     KV cache that grows by one token per call (the shape changes every call, as in
                     decode), PyTorch's default SDPA backend choice
  sdpa_decode_same   the same against a cache of fixed length (same shape every call)
  sdpa_decode_flash  the growing cache with the flash backend forced
  hf_decode_step     a whole HF LlamaForCausalLM one-token step (forward + argmax, DynamicCache, the
                     flash backend forced so that no per-shape plan is built) of a small model
                     (hidden 256) at `layers` decoder layers: per layer = difference of two depths
  hf_generate_step   the same model's generate() per new token (greedy), for its per-step extra

The sdpa rows at a head dim d price every attention call of a decode step in gpuplan's host model;
the layer rows the rest of a decoder layer (`cost::host`).
"""

import argparse
import statistics
import sys
import time

import torch


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--csv", default=None, help="also write the table here")
    p.add_argument("--quick", action="store_true", help="fewer calls (smoke test)")
    p.add_argument("--device", default="cuda")
    return p.parse_args()


ROWS = []


def emit(probe, detail, us, n, b=0, hq=0, hkv=0, d=0, layers=0):
    row = f"{probe},\"{detail}\",{b},{hq},{hkv},{d},{layers},{us:.3f},{n}"
    ROWS.append(row)
    print(row, flush=True)


def host_us(fn, n, rounds=3, warmup=3, sync_each=False, dev="cuda"):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    res = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
            if sync_each:
                torch.cuda.synchronize()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        res.append((t1 - t0) / n * 1e6)
    return statistics.median(res)


class _Attn:
    """What transformers' sdpa_attention_forward reads from the attention module."""

    def __init__(self, hq, hkv):
        self.is_causal = True
        self.num_key_value_groups = hq // hkv
        self.training = False


def sdpa_rows(a, dev):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    n = 10 if a.quick else 40
    for (b, hq, hkv, d, kv0) in [(1, 32, 8, 64, 512), (1, 24, 8, 128, 4096), (1, 16, 8, 128, 4096), (16, 16, 8, 128, 4096),
                                 (64, 32, 8, 64, 4096), (1, 32, 8, 128, 4096), (1, 32, 32, 64, 4096)]:
        mod = _Attn(hq, hkv)
        q = torch.randn(b, hq, 1, d, device=dev, dtype=torch.bfloat16)
        kmax = torch.randn(b, hkv, kv0 + 3 * n + 16, d, device=dev, dtype=torch.bfloat16)
        vmax = torch.randn_like(kmax)
        state = {"kv": kv0}

        def grow():
            state["kv"] += 1
            kv = state["kv"]
            # A fresh contiguous tensor per call, as DynamicCache's torch.cat gives.
            k = kmax[:, :, :kv].contiguous()
            v = vmax[:, :, :kv].contiguous()
            sdpa_attention_forward(mod, q, k, v, None, dropout=0.0, scaling=None, is_causal=None)

        ks = kmax[:, :, :kv0].contiguous()
        vs = vmax[:, :, :kv0].contiguous()

        def same():
            k = ks.clone()
            v = vs.clone()
            sdpa_attention_forward(mod, q, k, v, None, dropout=0.0, scaling=None, is_causal=None)

        with torch.inference_mode():
            us_new = host_us(grow, n, sync_each=True)
            state["kv"] = kv0
            us_same = host_us(same, n, sync_each=True)
            state["kv"] = kv0
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                us_flash = host_us(grow, n, sync_each=True)
        shape = dict(b=b, hq=hq, hkv=hkv, d=d)
        emit("sdpa_decode_new", f"sdpa_attention_forward, KV from {kv0} growing by 1 per call, default backend, sync each", us_new, n, **shape)
        emit("sdpa_decode_same", f"sdpa_attention_forward, KV fixed at {kv0}, default backend, sync each", us_same, n, **shape)
        emit("sdpa_decode_flash", f"sdpa_attention_forward, KV from {kv0} growing by 1 per call, flash forced, sync each", us_flash, n, **shape)


def small_ops(a, dev):
    n = 2000 if a.quick else 20000
    x = torch.randn(16, 16, device=dev, dtype=torch.bfloat16)
    y = torch.randn(16, 16, device=dev, dtype=torch.bfloat16)
    emit("op_dispatch", "torch.add [16,16] bf16, no sync", host_us(lambda: torch.add(x, y), n), n)

    class Empty(torch.nn.Module):
        def forward(self, t):
            return t

    m = Empty()
    emit("module_call", "nn.Module __call__, empty forward", host_us(lambda: m(x), n), n)
    logits = torch.randn(1, 128256, device=dev, dtype=torch.bfloat16)
    emit("greedy", "argmax over [1,128256] bf16, no sync", host_us(lambda: logits.argmax(-1), n // 4), n // 4)

    from transformers import DynamicCache

    for kv0 in (512, 8192):
        cache = DynamicCache()
        k0 = torch.randn(1, 8, kv0, 64, device=dev, dtype=torch.bfloat16)
        cache.update(k0, k0.clone(), 0)
        k1 = torch.randn(1, 8, 1, 64, device=dev, dtype=torch.bfloat16)
        nn_ = 200 if a.quick else 600
        us = host_us(lambda: cache.update(k1, k1, 0), nn_ // 3, rounds=3)
        emit("cache_update", f"DynamicCache.update 1 layer b1 kvh8 d64 +1 token from kv {kv0}, no sync", us, nn_)


def hf_steps(a, dev):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

    n = 10 if a.quick else 40
    for layers in (2, 10):
        cfg = LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=layers, num_attention_heads=4,
                          num_key_value_heads=2, head_dim=64, vocab_size=32000, max_position_embeddings=8192)
        cfg._attn_implementation = "sdpa"
        model = LlamaForCausalLM(cfg).to(dev, torch.bfloat16).eval()
        with torch.inference_mode(), sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            cache = DynamicCache(config=model.config)
            ids = torch.randint(0, 32000, (1, 64), device=dev)
            out = model(input_ids=ids, past_key_values=cache, use_cache=True)
            nxt = out.logits[:, -1:].argmax(-1)
            st = {"nxt": nxt}

            def step():
                o = model(input_ids=st["nxt"], past_key_values=cache, use_cache=True)
                st["nxt"] = o.logits[:, -1:].argmax(-1)

            us = host_us(step, n, sync_each=True)
            emit("hf_decode_step", f"LlamaForCausalLM h256 one-token step + argmax, DynamicCache, flash forced, sync each", us, n, b=1, hq=4, hkv=2, d=64, layers=layers)

            gc = model.generation_config
            gc.eos_token_id = None
            gc.pad_token_id = 0
            gc.bos_token_id = None
            gen_ids = torch.randint(0, 32000, (1, 65), device=dev)
            mask = torch.ones_like(gen_ids)
            tokens = 3 * n
            for _ in range(2):
                model.generate(input_ids=gen_ids, attention_mask=mask, max_new_tokens=8, do_sample=False, generation_config=gc)
            torch.cuda.synchronize()
            res = []
            for _ in range(3):
                t0 = time.perf_counter()
                model.generate(input_ids=gen_ids, attention_mask=mask, max_new_tokens=tokens, do_sample=False, generation_config=gc)
                torch.cuda.synchronize()
                t1 = time.perf_counter()
                t0b = time.perf_counter()
                model.generate(input_ids=gen_ids, attention_mask=mask, max_new_tokens=tokens // 3, do_sample=False, generation_config=gc)
                torch.cuda.synchronize()
                t1b = time.perf_counter()
                # Per-token time from two lengths, so that generate()'s setup and prefill cancel.
                res.append(((t1 - t0) - (t1b - t0b)) / (tokens - tokens // 3) * 1e6)
            emit("hf_generate_step", "LlamaForCausalLM h256 generate() greedy, per new token (two lengths' difference), flash forced", statistics.median(res), tokens, b=1, hq=4, hkv=2, d=64, layers=layers)
        del model


def main():
    a = parse_args()
    if not torch.cuda.is_available():
        print("host_probe: no CUDA device", file=sys.stderr)
        return 2
    dev = a.device
    import transformers

    note = f"# gpu={torch.cuda.get_device_name(0).replace(' ', '_')} torch={torch.__version__} transformers={transformers.__version__} cudnn={torch.backends.cudnn.version()}"
    print("probe,detail,b,hq,hkv,d,layers,us_per_call,n_calls", flush=True)
    print(note, flush=True)
    small_ops(a, dev)
    sdpa_rows(a, dev)
    hf_steps(a, dev)
    if a.csv:
        with open(a.csv, "w") as f:
            f.write("probe,detail,b,hq,hkv,d,layers,us_per_call,n_calls\n" + note + "\n")
            for r in ROWS:
                f.write(r + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
