#!/usr/bin/env python3
"""Loop vs generate() and the plan build's period-to-period spread (issue 19), in one process.

hf_train.py's two decode APIs measured 1.0-1.6x apart on the same shapes in separate processes
(calibration/runs/hf/FIT.md), and a decode step's first SDPA call (cuDNN's plan build for a new KV
length) moved by about half between periods on one host. This probe runs both APIs on one model
and one DynamicCache (bf16 weights, random keys/values, as hf_train.py), alternating blocks of
`--block` steps: loop, generate, loop, generate, ... so that a period's host state is shared by
neighbouring blocks of both APIs. Per step it writes one CSV row:

  case, block, api, step        the case (CONFIG:B:KV), block number, `loop` or `generate`, step in block
  t_s                           the step's end, seconds since the probe started
  step_us                       host wall clock of the step (loop: sync at both ends; generate:
                                between two calls of a syncing LogitsProcessor, as hf_train.py)
  sdpa_first_us, sdpa_rest_us   host time inside the step's first SDPA call, and in the others
  cpu_us                        the process's CPU time (user + system, all threads) in the step
  steal_pct, busy_pct           the whole VM's steal and non-idle CPU share over the step
                                (/proc/stat; the host's 16 vCPUs), as seen from the guest
  kv_len                        the cache's length at the step

Usage: hf_decode_api_probe.py --config C.json --case 1:512 [--blocks 6] [--block 15] --csv F
"""

import argparse
import json
import os
import sys
import time

import torch


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--case", action="append", required=True, help="BATCH:KV_LEN")
    p.add_argument("--blocks", type=int, default=6)
    p.add_argument("--block", type=int, default=15)
    p.add_argument("--csv", required=True)
    return p.parse_args()


def proc_stat():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal ...
    total = sum(v[:8])
    idle = v[3] + v[4]
    return total, idle, v[7]


class SdpaClock:
    def __init__(self):
        self.calls = []
        self.orig = torch.nn.functional.scaled_dot_product_attention

    def __call__(self, *args, **kw):
        t0 = time.perf_counter()
        out = self.orig(*args, **kw)
        self.calls.append((t0, time.perf_counter()))
        return out


class Stepper:
    """Turns step boundaries into CSV rows: the SDPA calls inside, CPU time, /proc/stat shares."""

    def __init__(self, out, clock, t_origin):
        self.out, self.clock, self.t0 = out, clock, t_origin
        self.mark()

    def mark(self):
        self.wall = time.perf_counter()
        self.cpu = time.process_time()
        self.stat = proc_stat()

    def row(self, case, block, api, step, kv_len):
        wall, cpu, stat = time.perf_counter(), time.process_time(), proc_stat()
        calls = [c for c in self.clock.calls if c[0] >= self.wall and c[1] <= wall]
        self.clock.calls = [c for c in self.clock.calls if c[1] > wall]
        inside = [e - s for s, e in calls]
        dt, di, ds = stat[0] - self.stat[0], stat[1] - self.stat[1], stat[2] - self.stat[2]
        steal = 100.0 * ds / dt if dt else 0.0
        busy = 100.0 * (dt - di) / dt if dt else 0.0
        self.out.write(f"{case},{block},{api},{step},{wall - self.t0:.4f},{(wall - self.wall) * 1e6:.1f},"
                       f"{(inside[0] if inside else 0) * 1e6:.1f},{sum(inside[1:]) * 1e6:.1f},{(cpu - self.cpu) * 1e6:.1f},"
                       f"{steal:.2f},{busy:.2f},{kv_len}\n")
        self.out.flush()
        self.wall, self.cpu, self.stat = wall, cpu, stat


def main():
    a = parse_args()
    from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache, LogitsProcessor, LogitsProcessorList
    with open(a.config) as f:
        cfg = AutoConfig.for_model(**json.load(f))
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=torch.bfloat16)
    model.eval()
    gc = model.generation_config
    gc.eos_token_id, gc.pad_token_id, gc.bos_token_id = None, 0, None
    clock = SdpaClock()
    torch.nn.functional.scaled_dot_product_attention = clock
    heads = cfg.num_attention_heads
    kvh = getattr(cfg, "num_key_value_heads", None) or heads
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    name = a.config.rsplit("/", 1)[-1].removesuffix(".json")
    t_origin = time.perf_counter()
    new = not os.path.exists(a.csv)
    with open(a.csv, "a") as out:
        if new:
            out.write("case,block,api,step,t_s,step_us,sdpa_first_us,sdpa_rest_us,cpu_us,steal_pct,busy_pct,kv_len\n")
        for case in a.case:
            b, kv = (int(x) for x in case.split(":"))
            cache = DynamicCache(config=model.config)
            for i in range(cfg.num_hidden_layers):
                k = torch.randn(b, kvh, kv, hd, device="cuda", dtype=torch.bfloat16)
                cache.update(k, torch.randn_like(k), i)
                del k
            tag = f"{name}:{b}:{kv}"
            st = Stepper(out, clock, t_origin)
            with torch.inference_mode():
                for block in range(a.blocks):
                    api = "loop" if block % 2 == 0 else "generate"
                    if api == "loop":
                        nxt = torch.randint(0, cfg.vocab_size, (b, 1), device="cuda")
                        torch.cuda.synchronize()
                        st.mark()
                        for step in range(1, a.block + 1):
                            o = model(input_ids=nxt, past_key_values=cache, use_cache=True)
                            nxt = o.logits[:, -1:].argmax(-1)
                            torch.cuda.synchronize()
                            del o
                            st.row(tag, block, api, step, cache.get_seq_length())
                    else:
                        class Clock(LogitsProcessor):
                            n = 0

                            def __call__(self, input_ids, scores):
                                torch.cuda.synchronize()
                                self.n += 1
                                st.row(tag, block, api, self.n, cache.get_seq_length())
                                return scores

                        ids = torch.randint(0, cfg.vocab_size, (b, cache.get_seq_length() + 1), device="cuda")
                        torch.cuda.synchronize()
                        st.mark()
                        model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), past_key_values=cache,
                                       max_new_tokens=a.block, do_sample=False, logits_processor=LogitsProcessorList([Clock()]),
                                       generation_config=gc)
                        torch.cuda.synchronize()
            del cache
            torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main())
