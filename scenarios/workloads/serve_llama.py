#!/usr/bin/env python3
"""gpuplan reference serving workload: a load generator driving a continuous-batching server loop.

No downloads: the Llama-architecture model of train_llama.py (same shapes from a models/*.toml),
random bf16 weights, random prompt tokens. One process, one GPU:

  load generator  Poisson arrivals at --qps for --duration-s (seeded), prompt and output lengths
                  fixed, uniform or lognormal (as `gpuplan serve --input-len/--output-len`); or a
                  replayed trace CSV (arrival_s,input_len,output_len). Requests become visible
                  to the server when the wall clock passes their arrival time.
  server loop     continuous batching with the scheduler of `gpuplan serve` (vLLM v1's order):
                  running requests first, oldest first, one decode token each or their next
                  prefill chunk; then waiting requests in arrival order while the batch
                  (--max-batch), the token budget (--token-budget) and the KV slots allow. One
                  iteration is one forward over all its tokens: the projections and the MLP run on
                  the concatenated tokens, attention runs per part (the decoders batched against
                  their caches, each prefill chunk against its own). Output tokens are sampled
                  greedily (argmax). The KV cache is one contiguous slot of --max-len tokens per
                  running request (no paging: nothing is ever preempted; size --max-batch and
                  --max-len to fit).
  --cuda-graphs   decode-only iterations replay a CUDA graph (captured at start, one per padded
                  shape: slot span rounded up to 1, 2, 4 or a multiple of 8, context up to a
                  multiple of --graph-context-step) instead of launching each kernel from Python;
                  the sampled tokens come back to the host every iteration. Iterations with
                  prefill chunks stay eager. --check-graphs N compares the graphs' tokens with the
                  eager forward's.
  --cuda-graphs full   as well: in iterations with prefill chunks the decoders replay their graph,
                  each whole prompt (a first chunk up to --token-budget tokens) a prefill graph of
                  its length rounded up to --prefill-graph-step (its own pass over the weights),
                  and only later chunks of a split prompt run eagerly. With GRAPH_DEBUG=eager in
                  the environment the graphs' code runs eagerly instead of replaying (debugging:
                  a failing kernel then shows its Python line).

Definitions (vLLM benchmark_serving.py): TTFT = first token time - arrival; TPOT = (E2E - TTFT) /
(output tokens - 1) for requests with more than one output token; throughput = completed requests
or output tokens / (first arrival to last completion). Token times are taken after a
torch.cuda.synchronize() (with --cuda-graphs: the tokens' read-back, which waits as well) at the
end of the iteration that produced them.

Output (stdout): one line per iteration, which `gpuplan measure` parses as a step,

  step=<n> step_time_s=<s> tokens=<tokens in the iteration> tokens_per_s=<t> batch=<sequences> max_mem_alloc_bytes=<b> max_mem_reserved_bytes=<b>

then a summary line, and a JSON document after the line `serve-summary-json:` with the keys of
`gpuplan serve --json` (throughput, ttft_s, tpot_s, e2e_latency_s, queueing_s with mean/p50/p90/
p95/p99/max). --requests-csv writes one row per request: arrival_s,input_len,output_len,
scheduled_s,first_token_s,finish_s; it is also a trace `gpuplan serve --trace` replays, so the
simulator sees exactly the measured requests.
"""

import argparse
import bisect
import csv
import heapq
import json
import statistics
import math
import os
import random
import sys
import time

# Tensors of a new size every iteration fragment the caching allocator's fixed segments until the
# GPU is full (NVML saw 139 GiB in use at 16 QPS, 2026-11-22); expandable segments do not.
os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_llama  # noqa: E402  (the model module)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-file", required=True, help="a gpuplan models/*.toml (dense Llama shape)")
    p.add_argument("--qps", type=float, default=None, help="Poisson arrival rate (requests/s)")
    p.add_argument("--duration-s", type=float, default=60.0, help="seconds of arrivals")
    p.add_argument("--input-len", default="512", help="N | uniform:LO:HI | lognormal:MEAN[:SIGMA]")
    p.add_argument("--output-len", default="128", help="N | uniform:LO:HI | lognormal:MEAN[:SIGMA]")
    p.add_argument("--trace", help="replay arrival_s,input_len,output_len from this CSV instead")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-batch", type=int, default=64, help="most sequences per iteration (and KV slots)")
    p.add_argument("--token-budget", type=int, default=2048, help="most tokens per iteration")
    p.add_argument("--no-chunked-prefill", action="store_true", help="prompts are never split")
    p.add_argument("--max-len", type=int, default=4096, help="KV slot length: prompt + output must fit")
    p.add_argument("--warmup-iters", type=int, default=8, help="untimed iterations before the load starts")
    p.add_argument("--requests-csv", help="write one row per request here")
    p.add_argument("--cuda-graphs", nargs="?", const="decode", choices=["decode", "full"],
                   help="decode: decoders replay a CUDA graph captured at start for their padded shape (slot span "
                        "rounded up to a capture size, context up to --graph-context-step), as vLLM does, in iterations "
                        "without prefill chunks; iterations with chunks stay eager. full: decoders always replay their "
                        "graph, and each whole prompt (a first chunk) replays a prefill graph of its length rounded up "
                        "to --prefill-graph-step; only later chunks of a split prompt run eagerly "
                        "(`gpuplan serve --cuda-graphs [decode|full]`)")
    p.add_argument("--prefill-graph-step", type=int, default=128, help="token padding of the captured prefill graphs")
    p.add_argument("--graph-context-step", type=int, default=256, help="context padding of the captured decode graphs")
    p.add_argument("--check-graphs", type=int, default=0, metavar="N",
                   help="instead of serving: N random decode batches (with --cuda-graphs full, and N whole prompts) "
                        "through both the eager forward and the graphs; print how many sampled tokens agree")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="instead of serving: time N decode iterations of 16 sequences under torch.profiler and print where the time goes")
    p.add_argument("--host-probe", type=int, default=0, metavar="N",
                   help="instead of serving: time N decode iterations of one sequence at 512 cached tokens (the host-bound floor "
                        "of this model on this node; `gpuplan serve --host-probe-ms`) and print their median")
    return p.parse_args(argv)


# --------------------------------------------------------------------------------------------
# Load generator


def lengths(spec):
    parts = spec.split(":")
    if len(parts) == 1:
        n = int(parts[0])
        return lambda r: n
    if parts[0] == "uniform":
        lo, hi = int(parts[1]), int(parts[2])
        return lambda r: r.randint(lo, hi)
    if parts[0] == "lognormal":
        mean = float(parts[1])
        sigma = float(parts[2]) if len(parts) > 2 else 1.0
        mu = math.log(mean) - 0.5 * sigma * sigma
        return lambda r: max(1, int(round(r.lognormvariate(mu, sigma))))
    sys.exit(f"`{spec}` is not a length distribution")


def make_requests(a):
    if a.trace:
        with open(a.trace) as f:
            rows = [(float(r["arrival_s"]), int(r["input_len"]), int(r["output_len"])) for r in csv.DictReader(f)]
        rows.sort(key=lambda x: x[0])
    else:
        if a.qps is None:
            sys.exit("give --qps or --trace")
        r = random.Random(a.seed)
        fi, fo = lengths(a.input_len), lengths(a.output_len)
        rows, t = [], 0.0  # the first request at t = 0, as vLLM's benchmark_serving.py
        while t < a.duration_s:
            rows.append((t, fi(r), fo(r)))
            t += r.expovariate(a.qps)
    out = []
    for t, i, o in rows:
        i = max(1, min(i, a.max_len - 1))
        o = max(1, min(o, a.max_len - i))
        out.append({"arrival": t, "input": i, "output": o, "scheduled": None, "first": None, "finish": None})
    return out


# --------------------------------------------------------------------------------------------
# Model pieces (weights from train_llama.Llama; the forward is per-token for mixed batches)


def rope(x, cos, sin):
    # x: [tokens, heads, d]; cos/sin: [tokens, d]
    return x * cos[:, None, :] + train_llama.rotate_half(x) * sin[:, None, :]


class Server:
    def __init__(self, a, model_args):
        self.a = a
        self.dev = torch.device("cuda", 0)
        with torch.device(self.dev):  # build on the GPU (no host copy of the fp32 weights)
            self.model = train_llama.Llama(model_args, a.max_len)
        train_llama.init_weights(self.model)
        self.model = self.model.to(torch.bfloat16).eval()
        self.cos = self.model.cos.to(torch.bfloat16)
        self.sin = self.model.sin.to(torch.bfloat16)
        m = model_args
        self.h, self.kv, self.hd = m.heads, m.kv_heads, m.hidden // m.heads
        # One position past --max-len: the scratch row the decode graphs' padding rows write to.
        shape = (a.max_batch, self.kv, a.max_len + 1, self.hd)
        self.kc = [torch.zeros(shape, dtype=torch.bfloat16, device=self.dev) for _ in self.model.layers]
        self.vc = [torch.zeros(shape, dtype=torch.bfloat16, device=self.dev) for _ in self.model.layers]
        self.free_slots = list(range(a.max_batch))  # a heap: the lowest free slot first, so the
        # decoders' slots stay within a short prefix of the cache
        self.vocab = m.vocab

    @torch.no_grad()
    def forward(self, parts):
        """One iteration. `parts` is a list of (slot, token ids [q], start position); decoders have
        q = 1 and come first. Returns the next token of every part (argmax at its last position).

        Inputs are built on the host and copied once (no per-part kernels). Decoders attend with
        two batched matmuls over a view of the cache (slots 0..S-1, positions 0..longest-1; no
        gather, no per-shape kernel plans: cuDNN attention builds one per new shape, and every
        serving iteration has a new one, which cost ~38 ms per iteration on an H200, 2026-11-22).
        Whole-prompt chunks use flash attention (causal); later chunks a masked matmul."""
        dev = self.dev
        n_dec = 0
        while n_dec < len(parts) and parts[n_dec][1].numel() == 1 and parts[n_dec][2] > 0:
            n_dec += 1
        ids = torch.cat([p[1] for p in parts])
        pos_l, slot_l = [], []
        for slot, toks, start in parts:
            n = toks.numel()
            pos_l.extend(range(start, start + n))
            slot_l.extend([slot] * n)
        idx = torch.tensor([pos_l, slot_l], dtype=torch.long).pin_memory().to(dev, non_blocking=True)
        pos, slots = idx[0], idx[1]
        cos, sin = self.cos[pos], self.sin[pos]
        x = self.model.embed_tokens(ids)
        g = self.h // self.kv
        scale = 1.0 / math.sqrt(self.hd)
        if n_dec:
            dec_slot_l = [p[0] for p in parts[:n_dec]]
            S = max(dec_slot_l) + 1
            L = max(p[2] for p in parts[:n_dec]) + 1
            lens = [1] * S  # slots not decoding attend to position 0 (their rows are dropped)
            for p in parts[:n_dec]:
                lens[p[0]] = p[2] + 1
            meta = torch.tensor(lens + dec_slot_l, dtype=torch.long).pin_memory().to(dev, non_blocking=True)
            dec_slots = meta[S:]
            masked = torch.arange(L, device=dev)[None, :] >= meta[:S, None]  # [S, L]: True = not attended
            masked = masked[:, None, None, :]
        for li, layer in enumerate(self.model.layers):
            at = layer.self_attn
            hsx = layer.input_layernorm(x)
            q = at.q_proj(hsx).view(-1, self.h, self.hd)
            k = at.k_proj(hsx).view(-1, self.kv, self.hd)
            v = at.v_proj(hsx).view(-1, self.kv, self.hd)
            q, k = rope(q, cos, sin), rope(k, cos, sin)
            kc, vc = self.kc[li], self.vc[li]
            kc[slots, :, pos] = k
            vc[slots, :, pos] = v
            outs = []
            if n_dec:
                qd = q.new_zeros(S, self.kv, g, self.hd)
                qd[dec_slots] = q[:n_dec].view(n_dec, self.kv, g, self.hd)
                sc = torch.matmul(qd, kc[:S, :, :L].transpose(-1, -2)).float() * scale  # [S, kv, g, L]
                pr = torch.softmax(sc.masked_fill_(masked, float("-inf")), dim=-1).to(q.dtype)
                o = torch.matmul(pr, vc[:S, :, :L])  # [S, kv, g, d]
                outs.append(o[dec_slots].reshape(n_dec, self.h, self.hd))
            off = n_dec
            for slot, toks, start in parts[n_dec:]:
                n = toks.numel()
                qp = q[off:off + n].transpose(0, 1).unsqueeze(0)  # [1, h, n, d]
                if start == 0:
                    kp = k[off:off + n].transpose(0, 1).unsqueeze(0)
                    vp = v[off:off + n].transpose(0, 1).unsqueeze(0)
                    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                        o = F.scaled_dot_product_attention(qp, kp, vp, is_causal=True, enable_gqa=g > 1)
                    o = o.squeeze(0).transpose(0, 1)
                else:
                    # A later chunk: every cached key, causal within the chunk.
                    qg = q[off:off + n].view(n, self.kv, g, self.hd).permute(1, 2, 0, 3).reshape(self.kv, g * n, self.hd)
                    sc = torch.matmul(qg, kc[slot, :, :start + n].transpose(-1, -2)).float() * scale  # [kv, g*n, start+n]
                    keep = torch.ones(n, start + n, dtype=torch.bool, device=dev).tril(diagonal=start).repeat(g, 1)
                    pr = torch.softmax(sc.masked_fill_(~keep, float("-inf")), dim=-1).to(q.dtype)
                    o = torch.matmul(pr, vc[slot, :, :start + n])  # [kv, g*n, d]
                    o = o.view(self.kv, g, n, self.hd).permute(2, 0, 1, 3).reshape(n, self.h, self.hd)
                outs.append(o)
                off += n
            o = torch.cat(outs).reshape(-1, self.h * self.hd)
            x = x + at.o_proj(o)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        # The LM head on the last position of every part only.
        ends, acc = [], 0
        for p in parts:
            acc += p[1].numel()
            ends.append(acc - 1)
        last = torch.tensor(ends, dtype=torch.long).pin_memory().to(dev, non_blocking=True)
        logits = self.model.lm_head(self.model.norm(x[last]))
        return logits.argmax(-1)


def graph_sizes(max_batch):
    """Slot spans the decode graphs are captured for: 1, 2, 4, then multiples of 8 (vLLM's
    capture sizes), up to and including --max-batch."""
    sizes = [b for b in [1, 2, 4] + list(range(8, max_batch + 1, 8)) if b <= max_batch]
    if sizes[-1] != max_batch:
        sizes.append(max_batch)
    return sizes


class DecodeGraphs:
    """CUDA graphs of the decoders' forward, one per (slot span S, context L) of the padded grid.

    A graph runs every slot 0..S-1 (the decoders at their slots, padding rows elsewhere) through
    the whole forward as `Server.forward` does for decoders, attending each to L keys with the
    same batched matmuls; padding rows read one key and write their K/V to the scratch position
    --max-len, which no attention reads. Inputs come through one static tensor (token, position,
    write position, attended keys per slot), filled by one host-to-device copy per iteration."""

    def __init__(self, srv, pool):
        a = srv.a
        self.srv = srv
        self.spans = graph_sizes(a.max_batch)
        step = a.graph_context_step
        self.ctxs = list(range(step, a.max_len, step)) + [a.max_len]
        self.inp = torch.zeros(a.max_batch, 4, dtype=torch.long, device=srv.dev)
        self.keys = torch.arange(a.max_len, device=srv.dev)
        self.graphs, self.out = {}, {}
        ts = time.perf_counter()
        self.inp[:, 2] = a.max_len  # padding everywhere while capturing
        self.inp[:, 3] = 1
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # the eager warm-up capture needs (cuBLAS handles, workspaces)
            for S in self.spans:
                self.run(S, self.ctxs[0])
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        # Largest first, as vLLM: the pool's blocks are sized by the first capture.
        for S in reversed(self.spans):
            for L in reversed(self.ctxs):
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, pool=pool):
                    self.out[(S, L)] = self.run(S, L)
                self.graphs[(S, L)] = g
        torch.cuda.synchronize()
        print(f"cuda-graphs: captured {len(self.graphs)} decode graphs (spans {self.spans}, contexts {self.ctxs[0]}.."
              f"{self.ctxs[-1]} by {step}) in {time.perf_counter() - ts:.1f} s", flush=True)

    @torch.no_grad()
    def run(self, S, L):
        srv = self.srv
        inp = self.inp[:S]
        ids, pos, wpos, lens = inp[:, 0], inp[:, 1], inp[:, 2], inp[:, 3]
        cos, sin = srv.cos[pos], srv.sin[pos]
        x = srv.model.embed_tokens(ids)
        g = srv.h // srv.kv
        scale = 1.0 / math.sqrt(srv.hd)
        slots = self.keys[:S]
        masked = (self.keys[:L][None, :] >= lens[:, None])[:, None, None, :]  # [S, 1, 1, L]
        for li, layer in enumerate(srv.model.layers):
            at = layer.self_attn
            hsx = layer.input_layernorm(x)
            q = at.q_proj(hsx).view(S, srv.h, srv.hd)
            k = at.k_proj(hsx).view(S, srv.kv, srv.hd)
            v = at.v_proj(hsx).view(S, srv.kv, srv.hd)
            q, k = rope(q, cos, sin), rope(k, cos, sin)
            kc, vc = srv.kc[li], srv.vc[li]
            kc[slots, :, wpos] = k
            vc[slots, :, wpos] = v
            sc = torch.matmul(q.view(S, srv.kv, g, srv.hd), kc[:S, :, :L].transpose(-1, -2)).float() * scale
            pr = torch.softmax(sc.masked_fill_(masked, float("-inf")), dim=-1).to(q.dtype)
            o = torch.matmul(pr, vc[:S, :, :L]).reshape(S, srv.h * srv.hd)
            x = x + at.o_proj(o)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return srv.model.lm_head(srv.model.norm(x)).argmax(-1)

    def shape(self, dec):
        """The captured (span, context) a decode batch of (slot, token, position) runs at."""
        S = max(d[0] for d in dec) + 1
        L = max(d[2] for d in dec) + 1
        return self.spans[bisect.bisect_left(self.spans, S)], self.ctxs[bisect.bisect_left(self.ctxs, L)]

    def decode(self, dec):
        """One decode-only iteration: `dec` is a list of (slot, token id, position). Returns the
        graph's output (the next token of every slot of the span; the caller reads its decoders')."""
        S, L = self.shape(dec)
        rows = [[0, 0, self.srv.a.max_len, 1] for _ in range(S)]
        for slot, tok, p in dec:
            rows[slot] = [tok, p, p, p + 1]
        self.inp[:S].copy_(torch.tensor(rows, dtype=torch.long).pin_memory(), non_blocking=True)
        if os.environ.get("GRAPH_DEBUG") == "eager":
            return self.run(S, L)
        self.graphs[(S, L)].replay()
        return self.out[(S, L)]


class PrefillGraphs:
    """CUDA graphs of one whole prompt's prefill (a first chunk), one per padded length N (multiples
    of --prefill-graph-step up to --token-budget): the prompt's tokens, then padding tokens that
    write their K/V to the scratch position --max-len; causal attention over the N tokens (the
    padding comes last, so the prompt's tokens never see it); the LM head on the prompt's last
    token. Inputs: the token ids (copied on the GPU from the prompt), the prompt's length and its
    cache slot."""

    def __init__(self, srv, pool):
        a = srv.a
        self.srv = srv
        step = a.prefill_graph_step
        self.sizes = list(range(step, a.token_budget, step)) + [a.token_budget]
        n = self.sizes[-1]
        self.ids = torch.zeros(n, dtype=torch.long, device=srv.dev)
        self.meta = torch.zeros(2, dtype=torch.long, device=srv.dev)  # prompt length, slot
        self.meta[0] = 1
        self.pos = torch.arange(n, device=srv.dev)
        self.graphs, self.out = {}, {}
        ts = time.perf_counter()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for N in self.sizes[:2]:
                self.run(N)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        for N in reversed(self.sizes):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool):
                self.out[N] = self.run(N)
            self.graphs[N] = g
        torch.cuda.synchronize()
        print(f"cuda-graphs: captured {len(self.graphs)} prefill graphs ({self.sizes[0]}..{self.sizes[-1]} tokens by {step}) "
              f"in {time.perf_counter() - ts:.1f} s", flush=True)

    @torch.no_grad()
    def run(self, N):
        srv = self.srv
        g = srv.h // srv.kv
        n, slot = self.meta[0:1], self.meta[1:2]
        pos = self.pos[:N]
        wpos = torch.where(pos < n, pos, srv.a.max_len)
        slots = slot.expand(N)
        cos, sin = srv.cos[:N], srv.sin[:N]
        x = srv.model.embed_tokens(self.ids[:N])
        for li, layer in enumerate(srv.model.layers):
            at = layer.self_attn
            hsx = layer.input_layernorm(x)
            q = at.q_proj(hsx).view(N, srv.h, srv.hd)
            k = at.k_proj(hsx).view(N, srv.kv, srv.hd)
            v = at.v_proj(hsx).view(N, srv.kv, srv.hd)
            q, k = rope(q, cos, sin), rope(k, cos, sin)
            srv.kc[li][slots, :, wpos] = k
            srv.vc[li][slots, :, wpos] = v
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                o = F.scaled_dot_product_attention(q.transpose(0, 1).unsqueeze(0), k.transpose(0, 1).unsqueeze(0),
                                                   v.transpose(0, 1).unsqueeze(0), is_causal=True, enable_gqa=g > 1)
            o = o.squeeze(0).transpose(0, 1).reshape(N, srv.h * srv.hd)
            x = x + at.o_proj(o)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        last = srv.model.norm(x.index_select(0, n - 1))
        return srv.model.lm_head(last).argmax(-1)

    def size(self, n):
        return self.sizes[bisect.bisect_left(self.sizes, n)]

    def prefill(self, slot, toks):
        """Replay the graph of a whole prompt `toks` (a GPU tensor) in cache `slot`; returns its
        next token (a GPU tensor of one; the graph's output, so read it before replaying the same
        graph again)."""
        n = toks.numel()
        N = self.size(n)
        self.ids[:n].copy_(toks)
        self.meta.copy_(torch.tensor([n, slot], dtype=torch.long).pin_memory(), non_blocking=True)
        if os.environ.get("GRAPH_DEBUG") == "eager":
            return self.run(N)
        self.graphs[N].replay()
        return self.out[N]


def check_graphs(srv, graphs, prefills, a, m, gen):
    """Eager forward and decode graphs on the same decode batches: random slots and contexts
    (their caches filled by an eager prefill first), the sampled tokens compared."""
    r = random.Random(a.seed)
    agree = total = 0
    for _ in range(a.check_graphs):
        n = r.randint(1, a.max_batch)
        slots = sorted(r.sample(range(a.max_batch), n))
        ctx = {s: r.randint(1, a.max_len // 2) for s in slots}
        for s in slots:
            srv.forward([(s, torch.randint(0, m.vocab, (ctx[s],), device=srv.dev, generator=gen), 0)])
        toks = {s: r.randrange(m.vocab) for s in slots}
        eager = srv.forward([(s, torch.tensor([toks[s]], device=srv.dev), ctx[s]) for s in slots]).tolist()
        out = graphs.decode([(s, toks[s], ctx[s]) for s in slots]).tolist()
        agree += sum(e == out[s] for e, s in zip(eager, slots))
        total += n
        if prefills is not None:  # a whole prompt both ways, in a free slot
            free = [s for s in range(a.max_batch) if s not in slots] or [0]
            p = torch.randint(0, m.vocab, (r.randint(1, a.token_budget),), device=srv.dev, generator=gen)
            e = srv.forward([(free[0], p, 0)]).tolist()
            agree += int(e[0] == prefills.prefill(free[0], p).tolist()[0])
            total += 1
    print(f"check-graphs: {agree} of {total} sampled tokens agree ({100 * agree / total:.2f}%) over {a.check_graphs} batches",
          flush=True)
    print("check-graphs-json: " + json.dumps({"batches": a.check_graphs, "tokens": total, "agree": agree}), flush=True)


def percentile(v, p):
    """numpy's default (linear) percentile."""
    if not v:
        return None
    v = sorted(v)
    r = p / 100 * (len(v) - 1)
    lo, hi = math.floor(r), math.ceil(r)
    return v[lo] + (v[hi] - v[lo]) * (r - lo)


def dist(v):
    return {"n": len(v), "mean": sum(v) / len(v) if v else None, "p50": percentile(v, 50), "p90": percentile(v, 90),
            "p95": percentile(v, 95), "p99": percentile(v, 99), "max": max(v) if v else None}


def host_probe(srv, a, m, gen, graphs=None):
    """The engine's floor on this node: decode iterations of one sequence (slot 0) at 512 cached
    tokens, each timed as the serving loop times them (forward and synchronize), the context held
    (the same position rewritten) so every iteration has the same shape. With graphs, the same
    through the decode graph too (`graph_*` keys)."""
    tok = torch.randint(0, m.vocab, (1,), device=srv.dev, generator=gen)

    def timed(fn):
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(a.host_probe):
            ts = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - ts)
        times.sort()
        q = lambda p: times[min(len(times) - 1, int(p * len(times)))]
        return statistics.median(times), q(0.1), q(0.9)

    med, p10, p90 = timed(lambda: srv.forward([(0, tok, 512)]))
    out = {"kind": "host-probe", "model_file": a.model_file, "iterations": a.host_probe, "batch": 1, "context": 512,
           "median_step_s": med, "p10_step_s": p10, "p90_step_s": p90}
    if graphs is not None:
        t = int(tok.item())
        med, p10, p90 = timed(lambda: graphs.decode([(0, t, 512)]).tolist())
        out.update({"graph_median_step_s": med, "graph_p10_step_s": p10, "graph_p90_step_s": p90,
                    "graph_shape": list(graphs.shape([(0, t, 512)]))})
    print("host-probe-json: " + json.dumps(out), flush=True)


def profile(srv, a, m, gen):
    """Where one decode iteration's time goes: wall time per iteration, then torch.profiler's
    top operators by host and by device time."""
    b, start = min(16, a.max_batch), 512
    dec = [(s, torch.randint(0, m.vocab, (1,), device=srv.dev, generator=gen), start + s) for s in range(b)]
    for _ in range(5):
        srv.forward(dec)
    torch.cuda.synchronize()
    ts = time.perf_counter()
    for _ in range(a.profile):
        srv.forward(dec)
    torch.cuda.synchronize()
    print(f"profile: decode of {b} sequences: {(time.perf_counter() - ts) / a.profile * 1e3:.2f} ms per iteration", flush=True)
    from torch.profiler import ProfilerActivity, profile as prof
    with prof(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        for _ in range(a.profile):
            srv.forward(dec)
        torch.cuda.synchronize()
    ka = p.key_averages()
    print(ka.table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=60), flush=True)
    print(ka.table(sort_by="self_cuda_time_total", row_limit=15, max_name_column_width=60), flush=True)


def main():
    a = parse_args()
    m = train_llama.parse_args([])
    import tomllib
    with open(a.model_file, "rb") as f:
        t = tomllib.load(f)
    m.hidden, m.layers, m.heads = t["hidden_size"], t["n_layers"], t["n_heads"]
    m.kv_heads, m.ffn, m.vocab = t.get("n_kv_heads", t["n_heads"]), t["ffn_hidden_size"], t["vocab_size"]
    m.tie_embeddings = bool(t["tied_embeddings"])
    torch.cuda.set_device(0)
    torch.manual_seed(a.seed)
    srv = Server(a, m)
    gen = torch.Generator(device="cuda").manual_seed(a.seed)

    # Warm-up: a few iterations of the shapes to come (untimed, not reported): a full prefill, a
    # later prefill chunk, and decode steps of a few sequences mixed with a chunk.
    n = min(a.token_budget, a.max_len // 2)
    for _ in range(a.warmup_iters):
        toks = torch.randint(0, m.vocab, (n,), device=srv.dev, generator=gen)
        srv.forward([(0, toks, 0)])
        srv.forward([(0, toks[: n // 2], n)])
        dec = [(s, toks[s:s + 1], n + s) for s in range(min(8, a.max_batch))]
        srv.forward(dec + [(min(8, a.max_batch) - 1, toks[: n // 4], 0)])
    torch.cuda.synchronize()
    # One memory pool per kind of graph (graphs of a kind run one at a time and share theirs): the
    # decode graphs crashed (an index out of bounds) in the iteration after two prompts' prefill
    # graphs ran when all graphs shared one pool (H200, 2026-11-22), not with the same code eager.
    graphs = DecodeGraphs(srv, torch.cuda.graph_pool_handle()) if (a.cuda_graphs or a.check_graphs) else None
    prefills = PrefillGraphs(srv, torch.cuda.graph_pool_handle()) if a.cuda_graphs == "full" else None
    torch.cuda.reset_peak_memory_stats()
    if a.check_graphs:
        check_graphs(srv, graphs, prefills, a, m, gen)
        return
    if a.profile:
        profile(srv, a, m, gen)
        return
    if a.host_probe:
        host_probe(srv, a, m, gen, graphs)
        return
    reqs = make_requests(a)

    waiting, running = [], []  # running: dicts with slot, target, computed, generated, prompt, last
    nxt, done, step = 0, 0, 0
    t0 = time.perf_counter()
    budget0 = a.token_budget
    while done < len(reqs):
        now = time.perf_counter() - t0
        while nxt < len(reqs) and reqs[nxt]["arrival"] <= now:
            r = reqs[nxt]
            r["prompt"] = torch.randint(0, m.vocab, (r["input"],), device=srv.dev, generator=gen)
            waiting.append(nxt)
            nxt += 1
        # Schedule (the order of `gpuplan serve`).
        budget, sched = budget0, []
        for s in running:
            if budget == 0:
                break
            rem = s["target"] - s["computed"]
            need = 1 if rem <= 0 else min(rem, budget)  # decoding (rem < 0 after its first token): one
            sched.append((s, need))
            budget -= need
        while waiting and budget > 0 and len(running) < a.max_batch:
            r = reqs[waiting[0]]
            rem = r["input"]
            if a.no_chunked_prefill and rem > budget and budget != budget0:
                break
            need = rem if a.no_chunked_prefill else min(rem, budget)
            waiting.pop(0)
            s = {"req": r, "slot": heapq.heappop(srv.free_slots), "target": r["input"], "computed": 0, "generated": 0, "last": None}
            r["scheduled"] = time.perf_counter() - t0
            running.append(s)
            sched.append((s, need))
            budget = max(0, budget - need)
        if not sched:
            # Idle: sleep until the next arrival.
            if nxt < len(reqs):
                time.sleep(max(0.0, reqs[nxt]["arrival"] - (time.perf_counter() - t0)))
            continue
        # Decoders first, then prefill chunks.
        dec = [(s, n) for s, n in sched if s["computed"] >= s["target"]]
        pre = [(s, n) for s, n in sched if s["computed"] < s["target"]]
        ts = time.perf_counter()
        shape = None
        graph_tokens = eager_chunks = 0
        if graphs is None:
            parts = [(s["slot"], s["last"].view(1), s["computed"]) for s, _ in dec]
            parts += [(s["slot"], s["req"]["prompt"][s["computed"]:s["computed"] + n], s["computed"]) for s, n in pre]
            out = srv.forward(parts)
            torch.cuda.synchronize()
        elif not pre or prefills is not None:
            # The decoders: the graph of their padded shape; the tokens come back to the host (the
            # next iteration's inputs), which waits for the GPU. With prefill graphs, each whole
            # prompt then replays its graph and later chunks run eagerly, one pass each.
            batch = [(s["slot"], s["last"], s["computed"]) for s, _ in dec]
            shape = graphs.shape(batch) if dec else (0, 0)
            full = graphs.decode(batch) if dec else None
            outs = []
            for s, n in pre:
                toks = s["req"]["prompt"][s["computed"]:s["computed"] + n]
                if s["computed"] == 0:
                    outs.append(prefills.prefill(s["slot"], toks).clone())  # two prompts may share a graph
                    graph_tokens += prefills.size(n)
                else:
                    outs.append(srv.forward([(s["slot"], toks, s["computed"])]))
                    eager_chunks += 1
            full = full.tolist() if full is not None else []
            out = [full[s["slot"]] for s, _ in dec] + [o.tolist()[0] for o in outs]
        else:
            ids = torch.tensor([s["last"] for s, _ in dec], dtype=torch.long).pin_memory().to(srv.dev, non_blocking=True)
            parts = [(s["slot"], ids[i:i + 1], s["computed"]) for i, (s, _) in enumerate(dec)]
            parts += [(s["slot"], s["req"]["prompt"][s["computed"]:s["computed"] + n], s["computed"]) for s, n in pre]
            out = srv.forward(parts).tolist()
        te = time.perf_counter()
        now = te - t0
        n_tokens = sum(n for _, n in sched)
        step += 1
        # The iteration's shape, for comparing iteration times with the simulator's: decoders, the
        # slots and context their attention reads (see Server.forward), prefill chunks' new and
        # cached tokens.
        span = max((s["slot"] for s, _ in dec), default=-1) + 1
        ctx = max((s["computed"] for s, _ in dec), default=-1) + 1
        print(f"step={step} step_time_s={te - ts:.6f} tokens={n_tokens} tokens_per_s={n_tokens / (te - ts):.1f} batch={len(sched)} "
              f"start_s={ts - t0:.6f} n_decode={len(dec)} slot_span={span} max_context={ctx} chunks={len(pre)} "
              f"chunk_tokens={sum(n for _, n in pre)} chunk_cached={sum(s['computed'] for s, _ in pre)} "
              f"graph={int(shape is not None)} graph_span={shape[0] if shape else 0} graph_context={shape[1] if shape else 0} "
              f"prefill_graph_tokens={graph_tokens} eager_chunks={eager_chunks} "
              f"max_mem_alloc_bytes={torch.cuda.max_memory_allocated()} max_mem_reserved_bytes={torch.cuda.max_memory_reserved()}", flush=True)
        for (s, n), tok in zip(dec + pre, out):
            s["computed"] += n
            if s["computed"] >= s["target"]:
                s["generated"] += 1
                s["last"] = tok
                r = s["req"]
                if r["first"] is None:
                    r["first"] = now
                if s["generated"] >= r["output"]:
                    r["finish"] = now
                    done += 1
                    heapq.heappush(srv.free_slots, s["slot"])
                    s["done"] = True
        running = [s for s in running if not s.get("done")]

    ttft = [r["first"] - r["arrival"] for r in reqs]
    tpot = [(r["finish"] - r["first"]) / (r["output"] - 1) for r in reqs if r["output"] > 1]
    e2e = [r["finish"] - r["arrival"] for r in reqs]
    queue = [r["scheduled"] - r["arrival"] for r in reqs]
    duration = max(r["finish"] for r in reqs)
    out_tok = sum(r["output"] for r in reqs)
    in_tok = sum(r["input"] for r in reqs)
    summary = {
        "schema_version": 1, "kind": "serve-measured", "model_file": a.model_file, "qps": a.qps, "trace": a.trace,
        "max_batch": a.max_batch, "token_budget": a.token_budget, "chunked_prefill": not a.no_chunked_prefill,
        "cuda_graphs": a.cuda_graphs, "graph_context_step": a.graph_context_step if a.cuda_graphs else None,
        "prefill_graph_step": a.prefill_graph_step if a.cuda_graphs == "full" else None,
        "requests": {"arrived": len(reqs), "completed": len(reqs)}, "duration_s": duration,
        "throughput": {"requests_per_s": len(reqs) / duration, "output_tokens_per_s": out_tok / duration,
                       "total_tokens_per_s": (in_tok + out_tok) / duration},
        "ttft_s": dist(ttft), "tpot_s": dist(tpot), "e2e_latency_s": dist(e2e), "queueing_s": dist(queue),
        "iterations": step, "requests_csv": a.requests_csv,
    }
    print(f"summary rank=0 world=1 mode=serve requests={len(reqs)} steps={step} duration_s={duration:.3f} "
          f"max_mem_alloc_bytes={torch.cuda.max_memory_allocated()} max_mem_reserved_bytes={torch.cuda.max_memory_reserved()}", flush=True)
    print("serve-summary-json: " + json.dumps(summary), flush=True)
    if a.requests_csv:
        with open(a.requests_csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["arrival_s", "input_len", "output_len", "scheduled_s", "first_token_s", "finish_s"])
            for r in reqs:
                w.writerow([f"{r['arrival']:.6f}", r["input"], r["output"], f"{r['scheduled']:.6f}", f"{r['first']:.6f}", f"{r['finish']:.6f}"])


if __name__ == "__main__":
    main()
