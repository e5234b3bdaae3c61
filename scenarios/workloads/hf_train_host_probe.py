#!/usr/bin/env python3
"""gpuplan issue 19: the host side of one eager HF training step (forward + loss, backward, AdamW
step, zero_grad), as scenarios/workloads/hf_train.py runs it (fp32 master weights under bf16
autocast by default, or bf16 params; `AdamW(fused=True)` on CUDA; `zero_grad(set_to_none=True)`;
the model's own loss with labels=input_ids; no grad clipping).

Part A (`host` rows): each family's config (hf_configs/*.json) with its op structure kept (QK-norm,
tied head, MoE routing, experts and top-k) but small dims (hidden 256, heads 4/2 x 64, FFN 512,
expert FFN 128, vocab 32000) at batch 1 x seq 16, so the GPU work is tiny and the step is
host-bound; 2, 4 and 8 decoder layers (the slope is the per-layer host time, the intercept the
fixed part). Per phase: the host clock from the phase's first call to its return, no sync
between phases (the GPU keeps up); `step_sync_us` = the whole step between two synchronizes.
Medians of 20 steps after 5 warm-up steps.

Part B (`prof` rows): one profiled step per family at 2 and 4 layers (torch.profiler, CPU + CUDA),
phase by phase: counts of aten ops and of CUDA runtime calls (kernel launches, memcpy, memset,
synchronizations; each phase's profile ends with one torch.cuda.synchronize() of its own, counted) per phase; the per-layer count is the difference of the two depths over 2.

Part C (`full` rows): the real shapes of measured runs (Qwen3-1.7B mb1 x 2048 = hf-072's shape,
Llama-3.2-1B mb1 x 2048), 28/16 layers: per-phase host return times, the synchronized step, and
one profiled step's GPU kernel time sum (busy) and runtime sync calls.

Prints one JSON object per line to stdout (and --out).
"""
import argparse
import json
import os
import statistics
import sys
import time
import traceback


def log(out, rec):
    line = json.dumps(rec)
    print(line, flush=True)
    with open(out, "a") as f:
        f.write(line + "\n")


def small_cfg(raw, layers):
    c = dict(raw)
    c.update(hidden_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=64, intermediate_size=512,
             vocab_size=32000, num_hidden_layers=layers)
    if "moe_intermediate_size" in c:
        c["moe_intermediate_size"] = 128
    if "mlp_only_layers" in c:
        c["mlp_only_layers"] = []
    return c


def build(torch, raw, dtype):
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg = AutoConfig.for_model(**raw)
    torch.manual_seed(0)
    with torch.device("cuda"):
        m = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=dtype)
    m.to("cuda")
    m.train()
    return m, cfg


class Step:
    def __init__(self, torch, model, vocab, mb, seq, param_dtype):
        self.torch = torch
        self.model = model
        self.vocab = vocab
        self.mb = mb
        self.seq = seq
        self.opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
        self.autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if param_dtype == "fp32" else None

    def phases(self, prof_phase=None):
        """One step; returns host us per phase (input, fwd, bwd, opt, zero) and the synced total."""
        torch = self.torch
        torch.cuda.synchronize()
        t = [time.perf_counter()]
        x = torch.randint(0, self.vocab, (self.mb, self.seq), device="cuda")
        t.append(time.perf_counter())
        if self.autocast:
            with self.autocast():
                out = self.model(input_ids=x, labels=x, use_cache=False)
        else:
            out = self.model(input_ids=x, labels=x, use_cache=False)
        t.append(time.perf_counter())
        out.loss.backward()
        del out
        t.append(time.perf_counter())
        self.opt.step()
        t.append(time.perf_counter())
        self.opt.zero_grad(set_to_none=True)
        t.append(time.perf_counter())
        torch.cuda.synchronize()
        t.append(time.perf_counter())
        us = [(b - a) * 1e6 for a, b in zip(t, t[1:])]
        return {"input_us": us[0], "fwd_us": us[1], "bwd_us": us[2], "opt_us": us[3], "zero_us": us[4],
                "host_us": (t[5] - t[0]) * 1e6, "drain_us": us[5], "step_sync_us": (t[6] - t[0]) * 1e6}


def run_phases(st, n, warm):
    for _ in range(warm):
        st.phases()
    rows = [st.phases() for _ in range(n)]
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


RUNTIME = {"launch": ("LaunchKernel", "cuLaunch", "LaunchCooperative"), "memcpy": ("Memcpy",), "memset": ("Memset",),
           "sync": ("Synchronize",)}


def count_events(prof):
    c = {"aten": 0, "launch": 0, "memcpy": 0, "memset": 0, "sync": 0, "sync_us": 0.0, "kernels": 0, "kernel_us": 0.0}
    for e in prof.events():
        name = e.name
        dev = str(getattr(e, "device_type", ""))
        if "CUDA" in dev and not name.startswith("cuda"):
            c["kernels"] += 1
            c["kernel_us"] += getattr(e, "device_time", 0.0) or 0.0
            continue
        if name.startswith("aten::"):
            c["aten"] += 1
        for k, keys in RUNTIME.items():
            if any(s in name for s in keys) and (name.startswith("cu")):
                c[k] += 1
                if k == "sync":
                    c["sync_us"] += getattr(e, "cpu_time_total", 0.0) or 0.0
    return c


def profile_step(torch, st):
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    res = {}
    x = torch.randint(0, st.vocab, (st.mb, st.seq), device="cuda")
    torch.cuda.synchronize()
    with profile(activities=acts) as p:
        if st.autocast:
            with st.autocast():
                out = st.model(input_ids=x, labels=x, use_cache=False)
        else:
            out = st.model(input_ids=x, labels=x, use_cache=False)
        torch.cuda.synchronize()
    res["fwd"] = count_events(p)
    with profile(activities=acts) as p:
        out.loss.backward()
        torch.cuda.synchronize()
    del out
    res["bwd"] = count_events(p)
    with profile(activities=acts) as p:
        st.opt.step()
        torch.cuda.synchronize()
    res["opt"] = count_events(p)
    with profile(activities=acts) as p:
        st.opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
    res["zero"] = count_events(p)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default="scenarios/workloads/hf_configs")
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=300)
    a = ap.parse_args()
    t_start = time.perf_counter()
    import torch
    import transformers
    log(a.out, {"kind": "env", "torch": torch.__version__, "transformers": transformers.__version__,
                "gpu": torch.cuda.get_device_name(0), "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    fams = [("llama", "llama-3.2-1b.json"), ("qwen3", "qwen3-1.7b.json"), ("qwen3_moe", "qwen3-moe-s.json"),
            ("mixtral", "mixtral-s.json")]
    # Part A + B
    for pd in ("fp32", "bf16"):
        for fam, fn in fams:
            raw = json.load(open(os.path.join(a.configs, fn)))
            for layers in (2, 4, 8):
                if time.perf_counter() - t_start > a.budget_s * 0.45:
                    break
                try:
                    m, cfg = build(torch, small_cfg(raw, layers), torch.float32 if pd == "fp32" else torch.bfloat16)
                    st = Step(torch, m, 32000, 1, 16, pd)
                    r = run_phases(st, 20, 5)
                    r.update(kind="host", family=fam, config=fn, layers=layers, param_dtype=pd,
                             experts_impl=getattr(m.config, "_experts_implementation", None))
                    log(a.out, r)
                    if layers in (2, 4) and pd == "fp32":
                        pr = profile_step(torch, st)
                        log(a.out, {"kind": "prof", "family": fam, "layers": layers, "param_dtype": pd, **pr})
                    del st, m
                    torch.cuda.empty_cache()
                except Exception as e:  # noqa: BLE001
                    log(a.out, {"kind": "error", "family": fam, "layers": layers, "param_dtype": pd,
                                "error": f"{type(e).__name__}: {e}", "tb": traceback.format_exc()[-800:]})
    # Part C
    for fam, fn, mb, seq in (("qwen3", "qwen3-1.7b.json", 1, 2048), ("llama", "llama-3.2-1b.json", 1, 2048)):
        if time.perf_counter() - t_start > a.budget_s * 0.8:
            break
        try:
            raw = json.load(open(os.path.join(a.configs, fn)))
            m, cfg = build(torch, raw, torch.float32)
            st = Step(torch, m, cfg.vocab_size, mb, seq, "fp32")
            rows = []
            for i in range(13):
                r = st.phases()
                if i >= 3:
                    rows.append(r)
            med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
            log(a.out, {"kind": "full", "family": fam, "config": fn, "layers": cfg.num_hidden_layers, "mb": mb,
                        "seq": seq, "param_dtype": "fp32", **med, "steps": rows})
            pr = profile_step(torch, st)
            log(a.out, {"kind": "full_prof", "family": fam, "config": fn, "mb": mb, "seq": seq, **pr})
            del st, m
            torch.cuda.empty_cache()
        except Exception as e:  # noqa: BLE001
            log(a.out, {"kind": "error", "family": fam, "full": True, "error": f"{type(e).__name__}: {e}",
                        "tb": traceback.format_exc()[-800:]})
    log(a.out, {"kind": "done", "wall_s": time.perf_counter() - t_start})


if __name__ == "__main__":
    sys.exit(main())
