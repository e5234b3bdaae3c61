#!/usr/bin/env python3
"""Microbenchmarks for the HF MoE and host-overhead models (raw data; nothing is fitted here).

  grouped  `torch.nn.functional.grouped_mm` (torch >= 2.10; else `torch._grouped_mm`) in bf16, in the
           layout transformers 5.x uses (activations [S, K] sorted by expert, weights stored
           [E, N, K] and passed transposed as [E, K, N], int32 offsets), over expert counts, tokens
           per expert and widths; balanced offsets, and offsets from a real top-k of random router
           logits. Forward alone and forward + backward. Beside each: the same FLOPs as one dense
           `torch.mm` [E*T, K] x [K, N] and as `torch.bmm` [E, T, K] x [E, K, N] (balanced only).
  routing  the MoE glue kernels at MoE sizes, as transformers' grouped_mm path runs them: router
           linear, softmax + topk, sort of the expert ids, histc, gather of the token rows
           (hidden[perm // k]), routing-weight multiply, inverse-permutation gather, the top-k sum,
           and index_add_ (the scatter alternative); bytes moved and GB/s where memory-bound.
  host     host overhead with the GPU idle or on tiny tensors: nn.Module __call__ (empty forward),
           nn.Linear __call__ vs F.linear (the dispatcher op), torch.add, torch.empty, a CUDA
           launch + synchronize, DynamicCache.update (one layer, one token), greedy and sampling
           steps, fused/foreach AdamW step and torch._foreach_add_ over many small tensors, and an
           HF Llama forward of one token at 2 and 8 layers (per-layer host cost by difference).

Writes CSVs (one per part) into --out-dir; columns name the shape and give the measured time.
GPU times: CUDA events around `reps` launches after warm-up, the median over `rounds` rounds, per
call. Host times: time.perf_counter over n calls with no synchronize inside the loop (the GPU is
idle or the kernels tiny, so the host is the bottleneck), and the same with a synchronize after each
call where the column `sync` says 1.
"""

import argparse
import csv
import os
import statistics
import time

import torch
import torch.nn.functional as F


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--parts", default="grouped,routing,host")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--quick", action="store_true", help="a few shapes only (smoke test)")
    p.add_argument("--device", default="cuda")
    return p.parse_args()


def gpu_time(fn, reps=10, rounds=3, warmup=2):
    """Median over rounds of (event time of reps calls) / reps, in seconds."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    res = []
    for _ in range(rounds):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(reps):
            fn()
        e.record()
        torch.cuda.synchronize()
        res.append(s.elapsed_time(e) * 1e-3 / reps)
    return statistics.median(res)


def reps_for(est_s):
    return max(3, min(50, int(0.02 / max(est_s, 1e-6))))


def gmm_fn():
    if hasattr(F, "grouped_mm"):
        return F.grouped_mm, "F.grouped_mm"
    return torch._grouped_mm, "torch._grouped_mm"


def topk_offsets(n_tokens, E, k, dev):
    logits = torch.randn(n_tokens, E, device=dev)
    idx = logits.softmax(-1).topk(k, dim=-1).indices.reshape(-1)
    counts = torch.bincount(idx, minlength=E)
    return torch.cumsum(counts, 0).to(torch.int32), counts


def part_grouped(out_dir, quick, dev):
    gmm, api = gmm_fn()
    rows = []
    # (name, K, N): gate_up and down projections of the shapes the HF runs use
    widths = [("qwen3moe_gate_up", 2048, 2 * 768), ("qwen3moe_down", 768, 2048), ("dsv3_s_gate_up", 2048, 2 * 1024),
              ("dsv3_s_down", 1024, 2048), ("mixtral_s_gate_up", 2048, 2 * 5632), ("mixtral_s_down", 5632, 2048)]
    experts = [8, 32, 128]
    tpe = [16, 128, 1024, 4096]
    if quick:
        widths, experts, tpe = widths[:2], [8, 64], [64, 1024]
    for wname, K, N in widths:
        for E in experts:
            for T in tpe:
                S = E * T
                if S * max(K, N) > 2 ** 31 or E * K * N > 2 ** 31:
                    continue
                for routing in ("balanced", "topk"):
                    x = torch.randn(S, K, device=dev, dtype=torch.bfloat16)
                    w_store = torch.randn(E, N, K, device=dev, dtype=torch.bfloat16) * 0.02
                    w = w_store.transpose(-2, -1)  # [E, K, N] view, as transformers passes it
                    if routing == "balanced":
                        offs = torch.arange(1, E + 1, device=dev, dtype=torch.int32) * T
                        cmax = T
                    else:
                        k = 8 if E >= 32 else 2
                        offs, counts = topk_offsets(S // k, E, k, dev)
                        S_real = int(offs[-1])
                        cmax = int(counts.max())
                        x = x[:S_real].contiguous()
                    S_real = x.shape[0]
                    flops = 2.0 * S_real * K * N
                    est = flops / 600e12
                    r = reps_for(est)
                    t_f = gpu_time(lambda: gmm(x, w, offs=offs), reps=r)
                    xg = x.detach().clone().requires_grad_(True)
                    wg = w_store.detach().clone().requires_grad_(True)
                    gout = torch.randn(S_real, N, device=dev, dtype=torch.bfloat16)

                    def fb():
                        y = gmm(xg, wg.transpose(-2, -1), offs=offs)
                        y.backward(gout)
                        xg.grad = None
                        wg.grad = None
                    t_fb = gpu_time(fb, reps=max(3, r // 3))
                    a = torch.randn(S_real, K, device=dev, dtype=torch.bfloat16)
                    b = torch.randn(K, N, device=dev, dtype=torch.bfloat16)
                    t_mm = gpu_time(lambda: torch.mm(a, b), reps=r)
                    t_bmm = float("nan")
                    if routing == "balanced":
                        xb = x.view(E, T, K)
                        t_bmm = gpu_time(lambda: torch.bmm(xb, w), reps=r)
                    rows.append({"api": api, "shape": wname, "experts": E, "tokens_per_expert_mean": S_real / E,
                                 "tokens_per_expert_max": cmax, "routing": routing, "rows_S": S_real, "K": K, "N": N,
                                 "fwd_s": t_f, "fwd_tflops": flops / t_f / 1e12, "fwd_bwd_s": t_fb,
                                 "fwd_bwd_tflops": 3 * flops / t_fb / 1e12, "dense_mm_s": t_mm,
                                 "dense_mm_tflops": flops / t_mm / 1e12, "bmm_s": t_bmm,
                                 "bmm_tflops": flops / t_bmm / 1e12 if t_bmm == t_bmm else float("nan")})
                    print(f"grouped {wname} E={E} T={T} {routing}: fwd {t_f*1e3:.3f} ms {flops/t_f/1e12:.0f} TF/s, "
                          f"fwd+bwd {t_fb*1e3:.3f} ms, mm {flops/t_mm/1e12:.0f} TF/s", flush=True)
                    del x, w_store, w, xg, wg, gout, a, b
    write(out_dir, "grouped_mm.csv", rows)


def part_routing(out_dir, quick, dev):
    rows = []
    H = 2048
    cases = [(n, E, k) for n in (4096, 16384, 65536) for (E, k) in ((8, 2), (32, 8), (64, 8), (128, 8))]
    if quick:
        cases = cases[:2]
    for n, E, k in cases:
        h = torch.randn(n, H, device=dev, dtype=torch.bfloat16)
        wr = torch.randn(E, H, device=dev, dtype=torch.bfloat16)
        logits = F.linear(h, wr)
        probs = logits.float().softmax(-1)
        topv, topi = probs.topk(k, dim=-1)
        ids = topi.reshape(-1)
        ids_sorted, perm = torch.sort(ids)
        sel = h[perm // k]
        wts = topv.reshape(-1)[perm].to(torch.bfloat16)
        inv = torch.empty_like(perm)
        inv[perm] = torch.arange(perm.numel(), device=dev)
        S = n * k
        b = 2  # bf16 bytes
        ops = [
            ("router_linear", lambda: F.linear(h, wr), n * H * b + E * H * b + n * E * b),
            ("softmax_fp32", lambda: logits.float().softmax(-1), n * E * (2 + 4 + 4)),
            ("topk", lambda: probs.topk(k, dim=-1), n * E * 4 + n * k * (4 + 8)),
            ("sort_expert_ids", lambda: torch.sort(ids), S * 8 * 4),
            ("histc", lambda: torch.histc(ids_sorted.int(), bins=E, min=0, max=E - 1), S * 8),
            ("gather_rows", lambda: h[perm // k], S * H * b * 2 + S * 8),
            ("weight_rows", lambda: sel * wts.unsqueeze(-1), S * H * b * 2),
            ("inv_perm_gather", lambda: sel[inv], S * H * b * 2 + S * 8),
            ("topk_sum", lambda: sel.view(n, k, H).sum(dim=1), S * H * b + n * H * b),
            ("index_add_scatter", lambda: torch.zeros(n, H, device=dev, dtype=torch.bfloat16).index_add_(0, perm // k, sel),
             S * H * b + n * H * b * 2),
        ]
        for name, fn, nbytes in ops:
            t = gpu_time(fn, reps=20)
            rows.append({"op": name, "tokens": n, "experts": E, "top_k": k, "hidden": H, "rows_S": S,
                         "time_s": t, "bytes_min": nbytes, "gb_per_s": nbytes / t / 1e9})
            print(f"routing {name} n={n} E={E} k={k}: {t*1e6:.1f} us {nbytes/t/1e9:.0f} GB/s", flush=True)
    write(out_dir, "moe_routing.csv", rows)


def host_time(fn, n=2000, sync=False):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    if sync:
        for _ in range(n):
            fn()
            torch.cuda.synchronize()
    else:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n


def part_host(out_dir, quick, dev):
    import transformers
    from transformers import AutoModelForCausalLM, DynamicCache, LlamaConfig
    rows = []

    def add(probe, detail, us, n, sync=0):
        rows.append({"probe": probe, "detail": detail, "us_per_call": us * 1e6, "n_calls": n, "sync": sync})
        print(f"host {probe} [{detail}] sync={sync}: {us*1e6:.2f} us", flush=True)

    class Empty(torch.nn.Module):
        def forward(self, x):
            return x
    x = torch.randn(16, 16, device=dev)
    m = Empty()
    n = 20000
    add("module_call_empty", "nn.Module __call__, forward returns its input", host_time(lambda: m(x), n), n)
    def ident(y):
        return y
    add("python_call_empty", "plain Python function call, same body", host_time(lambda: ident(x), n), n)
    lin = torch.nn.Linear(16, 16, device=dev)
    add("linear_module_call", "nn.Linear(16,16) __call__ on [16,16] fp32", host_time(lambda: lin(x), n), n)
    add("f_linear", "F.linear on [16,16] fp32 (dispatcher op + launch)", host_time(lambda: F.linear(x, lin.weight, lin.bias), n), n)
    add("torch_add", "torch.add of two [16,16] fp32 (dispatcher op + launch)", host_time(lambda: torch.add(x, x), n), n)
    add("torch_empty", "torch.empty([16,16]) on the GPU (caching allocator, no launch)", host_time(lambda: torch.empty(16, 16, device=dev), n), n)
    add("torch_add_sync", "torch.add then torch.cuda.synchronize (launch-to-completion round trip)", host_time(lambda: torch.add(x, x), 5000, sync=True), 5000, 1)
    add("sync_idle", "torch.cuda.synchronize with nothing queued", host_time(lambda: None, 5000, sync=True), 5000, 1)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        add("linear_module_call_autocast", "nn.Linear(16,16) __call__ under bf16 autocast (cast + mm)", host_time(lambda: lin(x), n), n)
    # DynamicCache.update: one layer, one token per call (torch.cat of the whole layer each call)
    for kv in (0, 1024, 8192):
        cache = DynamicCache()
        base = torch.randn(1, 8, kv + 1, 64, device=dev, dtype=torch.bfloat16)
        cache.update(base, base, 0)
        one = torch.randn(1, 8, 1, 64, device=dev, dtype=torch.bfloat16)
        nn_ = 300 if kv else 2000
        add("dynamic_cache_update", f"DynamicCache.update 1 layer, b1 kvh8 hd64, +1 token per call from kv {kv}", host_time(lambda: cache.update(one, one, 0), nn_), nn_)
    for V in (32000, 151936):
        lg = torch.randn(1, V, device=dev, dtype=torch.bfloat16)
        add("greedy_step", f"argmax over [1,{V}] bf16", host_time(lambda: lg.argmax(-1), 5000), 5000)
        add("sampling_step", f"softmax(fp32) + multinomial over [1,{V}]", host_time(lambda: torch.multinomial(lg.float().softmax(-1), 1), 2000), 2000)
        add("sampling_step_sync", f"softmax + multinomial + .item() over [1,{V}]", host_time(lambda: torch.multinomial(lg.float().softmax(-1), 1).item(), 2000), 2000, 1)
    for nt in (16, 147, 400):
        ps = [torch.nn.Parameter(torch.randn(64, device=dev)) for _ in range(nt)]
        for p in ps:
            p.grad = torch.randn_like(p)
        for kind in ("fused", "foreach"):
            opt = torch.optim.AdamW(ps, lr=1e-4, fused=kind == "fused", foreach=kind == "foreach")
            add(f"adamw_step_{kind}", f"AdamW.step over {nt} tensors of 64 fp32", host_time(opt.step, 300), 300)
        with torch.no_grad():
            add("foreach_add", f"torch._foreach_add_ over {nt} tensors of 64 fp32", host_time(lambda: torch._foreach_add_(ps, 1.0), 2000), 2000)
    # HF Llama decoder, one token, bf16, eager: per-layer host cost = (t8 - t2) / 6
    tv = {}
    for L in (2, 8):
        cfg = LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=L, num_attention_heads=4, num_key_value_heads=2,
                          vocab_size=1024, max_position_embeddings=8192)
        with torch.device(dev):
            model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=torch.bfloat16).eval()
        tok = torch.zeros(1, 1, dtype=torch.long, device=dev)
        with torch.inference_mode():
            cache = DynamicCache(config=model.config)
            nn_ = 300
            t = host_time(lambda: model(input_ids=tok, past_key_values=cache, use_cache=True), nn_)
            tv[L] = t
            add("hf_llama_forward_1tok", f"HF Llama {L} layers h256, one token, DynamicCache, no sync", t, nn_)
            t_noc = host_time(lambda: model(input_ids=tok, use_cache=False), nn_)
            add("hf_llama_forward_1tok_nocache", f"HF Llama {L} layers h256, one token, use_cache=False", t_noc, nn_)
    add("hf_llama_per_layer", "(t(8 layers) - t(2 layers)) / 6, one-token forward with DynamicCache", (tv[8] - tv[2]) / 6, 0)
    for r in rows:
        r["transformers"] = transformers.__version__
        r["torch"] = torch.__version__
    write(out_dir, "host_overhead.csv", rows)


def write(out_dir, name, rows):
    if not rows:
        return
    os.makedirs(out_dir, exist_ok=True)
    keys = list(rows[0].keys())
    gpu = torch.cuda.get_device_name().replace(" ", "_")
    with open(os.path.join(out_dir, name), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["gpu"] + keys)
        w.writeheader()
        for r in rows:
            w.writerow({"gpu": gpu, **{k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()}})
    print(f"wrote {os.path.join(out_dir, name)} ({len(rows)} rows)", flush=True)


def main():
    a = parse_args()
    dev = torch.device(a.device)
    torch.manual_seed(0)
    parts = a.parts.split(",")
    for part in parts:
        t0 = time.perf_counter()
        {"grouped": part_grouped, "routing": part_routing, "host": part_host}[part](a.out_dir, a.quick, dev)
        print(f"part {part}: {time.perf_counter() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
