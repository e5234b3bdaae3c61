#!/usr/bin/env python3
"""MLA (DeepSeek-V3) prefill probe: which SDPA kernel transformers' MLA attention gets, and where an
hf-eager prefill forward's allocated and reserved memory go.

Two parts, each writing CSV under --out:

  sdpa   `torch.nn.functional.scaled_dot_product_attention`, causal, bf16, batch x heads x seq with
         the query/key head dim `dqk` and the value head dim `dv` (DeepSeek-V3 MLA: 192 = 128 nope +
         64 rope against 128; controls 128/128 and 192/192), under the default dispatch and under each
         backend forced with `sdpa_kernel` (cuDNN, flash, memory-efficient, math): whether it runs
         (the error text where not), the median of 10 calls' CUDA-event times, the peak allocated
         above the inputs, and the kernels the default dispatch launched (torch.profiler).
         -> sdpa.csv, sdpa-kernels.csv
  trace  one prefill forward of a transformers model built from a config.json exactly as
         scenarios/workloads/hf_train.py --mode prefill builds and runs it (from_config on the GPU,
         SDPA, the library-default experts path, bf16, inference_mode, use_cache=True,
         logits_to_keep=1), after two warm-up forwards, under
         `torch.cuda.memory._record_memory_history`: every allocator event (alloc, free, segment
         alloc/free) with its size and the innermost transformers (else torch) Python frame;
         plus, from forward hooks in a second forward, each module's allocated memory on entry and
         exit and its peak inside (`reset_peak_memory_stats` on entry).
         -> trace-<tag>.csv, modules-<tag>.csv, summary.csv (max allocated / reserved per run)

Usage: mla_prefill_probe.py --out DIR [--sdpa] [--trace CONFIG:BATCH:SEQ:TAG ...] [--device cpu]
On a CPU (--device cpu, tiny shapes) only the code paths run: no kernels, no allocator trace.
"""
import argparse
import csv
import json
import os
import statistics
import sys
import time


def sdpa_part(torch, out, dev, shapes):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backends = [("default", None), ("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION),
                ("efficient", SDPBackend.EFFICIENT_ATTENTION), ("math", SDPBackend.MATH)]
    rows, krows = [], []
    cuda = dev.type == "cuda"
    for (b, h, s, dqk, dv) in shapes:
        for name, be in backends:
            if name == "math" and b * h * s * s * 2 > 12e9:
                rows.append(dict(b=b, h=h, s=s, dqk=dqk, dv=dv, backend=name, ok=0, median_ms="", peak_extra_bytes="",
                                 note="skipped: score matrix over 12 GB"))
                continue
            torch.manual_seed(0)
            q = torch.randn(b, h, s, dqk, device=dev, dtype=torch.bfloat16)
            k = torch.randn(b, h, s, dqk, device=dev, dtype=torch.bfloat16)
            v = torch.randn(b, h, s, dv, device=dev, dtype=torch.bfloat16)
            ctx = sdpa_kernel([be]) if be is not None else _Null()
            note = ""
            import warnings
            wl = []
            try:
                with torch.inference_mode(), ctx:
                    with warnings.catch_warnings(record=True) as wl:
                        warnings.simplefilter("always")
                        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    note = " | ".join(str(x.message).replace("\n", " ")[:300] for x in wl)
                    del o
                    if cuda:
                        torch.cuda.synchronize()
                        base = torch.cuda.memory_allocated()
                        torch.cuda.reset_peak_memory_stats()
                    ts = []
                    for _ in range(10 if cuda else 1):
                        if cuda:
                            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                            e0.record()
                        t0 = time.perf_counter()
                        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                        if cuda:
                            e1.record()
                            torch.cuda.synchronize()
                            ts.append(e0.elapsed_time(e1))
                        else:
                            ts.append((time.perf_counter() - t0) * 1e3)
                        del o
                    peak = (torch.cuda.max_memory_allocated() - base) if cuda else 0
                    if name == "default" and cuda:
                        from torch.profiler import ProfilerActivity, profile
                        with profile(activities=[ProfilerActivity.CUDA]) as prof:
                            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                            torch.cuda.synchronize()
                            del o
                        for e in prof.key_averages():
                            if e.device_type.name == "CUDA" or getattr(e, "self_device_time_total", 0) > 0:
                                krows.append(dict(b=b, h=h, s=s, dqk=dqk, dv=dv, kernel=e.key[:200], calls=e.count,
                                                  device_us=f"{getattr(e, 'self_device_time_total', 0.0):.1f}"))
                rows.append(dict(b=b, h=h, s=s, dqk=dqk, dv=dv, backend=name, ok=1, median_ms=f"{statistics.median(ts):.4f}",
                                 peak_extra_bytes=peak, note=note))
            except Exception as ex:  # a backend that refuses the shape says why
                rows.append(dict(b=b, h=h, s=s, dqk=dqk, dv=dv, backend=name, ok=0, median_ms="", peak_extra_bytes="",
                                 note=(type(ex).__name__ + ": " + str(ex) + " | warnings: "
                                       + " | ".join(str(x.message) for x in wl)).replace("\n", " ")[:1200]))
            del q, k, v
            if cuda:
                torch.cuda.empty_cache()
            print("sdpa", rows[-1], flush=True)
    write(os.path.join(out, "sdpa.csv"), rows)
    write(os.path.join(out, "sdpa-kernels.csv"), krows)


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def write(path, rows):
    if not rows:
        open(path, "w").close()
        return
    keys = list(rows[0].keys())
    for r in rows:
        for k in r:
            if k not in keys:
                keys.append(k)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)


def frame_of(frames):
    """The innermost frame in transformers, else in torch, else the first."""
    for want in ("transformers/", "torch/"):
        for fr in frames:
            if want in fr.get("filename", ""):
                fn = fr["filename"]
                return f"{fn[fn.find(want):]}:{fr.get('line')}:{fr.get('name')}"
    if frames:
        fr = frames[0]
        return f"{os.path.basename(fr.get('filename', ''))}:{fr.get('line')}:{fr.get('name')}"
    return ""


def trace_rows(snapshot):
    rows = []
    for dev_trace in snapshot.get("device_traces", []):
        for i, e in enumerate(dev_trace):
            rows.append(dict(i=i, action=e.get("action"), addr=e.get("addr"), size=e.get("size"),
                             frame=frame_of(e.get("frames", []))))
    return rows


def build(torch, dev, config):
    from transformers import AutoConfig, AutoModelForCausalLM
    with open(config) as f:
        raw = json.load(f)
    cfg = AutoConfig.for_model(**raw)
    torch.manual_seed(0)
    with torch.device(dev):
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=torch.bfloat16)
    model.to(dev)
    model.eval()
    return model, cfg


def trace_part(torch, out, dev, spec, summary):
    config, batch, seq, tag = spec.split(":")
    batch, seq = int(batch), int(seq)
    cuda = dev.type == "cuda"
    model, cfg = build(torch, dev, config)
    vocab = cfg.vocab_size

    def fwd():
        x = torch.randint(0, vocab, (batch, seq), device=dev)
        o = model(input_ids=x, use_cache=True, logits_to_keep=1)
        del o, x

    with torch.inference_mode():
        fwd()
        fwd()
        if cuda:
            torch.cuda.synchronize()
            # One forward's events from a warm allocator, as the timed steps of hf_train.py run.
            torch.cuda.reset_peak_memory_stats()
            before_alloc, before_res = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
            torch.cuda.memory._record_memory_history(max_entries=200000, stacks="python")
            fwd()
            torch.cuda.synchronize()
            snap = torch.cuda.memory._snapshot()
            torch.cuda.memory._record_memory_history(enabled=None)
            write(os.path.join(out, f"trace-{tag}.csv"), trace_rows(snap))
            summary.append(dict(tag=tag, config=os.path.basename(config), batch=batch, seq=seq,
                                before_allocated=before_alloc, before_reserved=before_res,
                                max_allocated=torch.cuda.max_memory_allocated(), max_reserved=torch.cuda.max_memory_reserved(),
                                gpu=torch.cuda.get_device_name()))
        # Second forward: per-module memory from hooks.
        mrows = []
        stack = []

        def pre(name):
            def h(mod, args):
                if cuda:
                    torch.cuda.synchronize()
                    if stack:
                        stack[-1][2] = max(stack[-1][2], torch.cuda.max_memory_allocated())
                    stack.append([name, torch.cuda.memory_allocated(), 0])
                    torch.cuda.reset_peak_memory_stats()
                else:
                    stack.append([name, 0, 0])
            return h

        def post(name):
            def h(mod, args, output):
                n, a0, carried = stack.pop()
                if cuda:
                    torch.cuda.synchronize()
                    a1 = torch.cuda.memory_allocated()
                    pk = max(torch.cuda.max_memory_allocated(), carried)
                    if stack:
                        stack[-1][2] = max(stack[-1][2], pk)
                    mrows.append(dict(module=n, alloc_in=a0, alloc_out=a1, peak_inside=pk, peak_above_entry=pk - a0))
                else:
                    mrows.append(dict(module=n, alloc_in=0, alloc_out=0, peak_inside=0, peak_above_entry=0))
            return h

        hooks = []
        want = ("self_attn", "mlp", "mlp.experts", "mlp.gate", "mlp.shared_experts", "input_layernorm", "post_attention_layernorm")
        for name, mod in model.named_modules():
            short = name.split("layers.")[-1]
            parts = short.split(".", 1)
            if name.startswith("model.layers.") and (len(parts) == 1 or parts[1] in want):
                hooks.append(mod.register_forward_pre_hook(pre(name)))
                hooks.append(mod.register_forward_hook(post(name)))
            elif name in ("model.embed_tokens", "model.norm", "lm_head", "model.rotary_emb"):
                hooks.append(mod.register_forward_pre_hook(pre(name)))
                hooks.append(mod.register_forward_hook(post(name)))
        fwd()
        for h in hooks:
            h.remove()
        write(os.path.join(out, f"modules-{tag}.csv"), mrows)
    print("trace", tag, summary[-1] if summary else "", flush=True)
    del model
    if cuda:
        torch.cuda.empty_cache()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--sdpa", action="store_true")
    p.add_argument("--sdpa-shapes", default="4,16,4096;4,16,8192;8,16,4096",
                   help="b,h,s triples; each runs at dqk/dv 192/128, 128/128, 192/192")
    p.add_argument("--trace", nargs="*", default=[])
    a = p.parse_args()
    import torch
    os.makedirs(a.out, exist_ok=True)
    dev = torch.device(a.device)
    print("versions torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), flush=True)
    if a.sdpa:
        shapes = []
        for t in a.sdpa_shapes.split(";"):
            b, h, s = (int(x) for x in t.split(","))
            for dqk, dv in ((192, 128), (128, 128), (192, 192)):
                shapes.append((b, h, s, dqk, dv))
        sdpa_part(torch, a.out, dev, shapes)
    summary = []
    for spec in a.trace:
        trace_part(torch, a.out, dev, spec, summary)
    write(os.path.join(a.out, "summary.csv"), summary)


if __name__ == "__main__":
    sys.exit(main())
