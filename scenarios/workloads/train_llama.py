#!/usr/bin/env python3
"""gpuplan reference workload: a Llama-architecture decoder with random weights and random tokens.

No downloads. The model is built here from its shape (hidden, layers, heads, kv_heads, ffn, vocab) and
runs one of three modes:

  train    forward + backward + fused AdamW step on micro_batch x seq tokens, grad accumulation,
           bf16 autocast over fp32 master params (the `torch-eager` stack), or torch.compile'd
           (`torch-compile`); optional full activation recompute; 1 GPU, or DDP / FSDP (full shard,
           ZeRO-3) / tensor parallel (PyTorch DTensor, over all ranks) under torchrun.
  prefill  one forward pass of batch x seq tokens (bf16 weights) that fills a KV cache; the LM
           head runs on the last position only.
  decode   with kv_len tokens in the KV cache (random keys and values: no prefill is run), one
           token per sequence per step, the cache growing by one each step.

Training details that set memory: the residual stream is fp32 (fp32 embedding output plus bf16
branch outputs), autocast keeps bf16 copies of the weights through forward and backward, and the
loss upcasts the bf16 logits to fp32 (as Hugging Face models do). Params, grads and AdamW's two
moments are fp32 (16 bytes per parameter, sharded over ranks under FSDP).

Output format (one line per step, on stdout, from rank 0; `gpuplan measure` parses it):

  step=<n> step_time_s=<s> tokens=<tokens in this step, all ranks> tokens_per_s=<t> max_mem_alloc_bytes=<b> max_mem_reserved_bytes=<b>

then, from every rank, a summary line:

  summary rank=<r> world=<w> mode=<m> params=<n> steps=<n> median_step_time_s=<s> max_mem_alloc_bytes=<b> max_mem_reserved_bytes=<b>

A run that runs out of GPU memory prints `gpuplan-workload: oom rank=<r> <message>` and exits 3;
any other failure exits 1 with the Python traceback. Step times are host wall clock between
torch.cuda.synchronize() calls, one optimizer step (train), one forward pass (prefill) or one
token step (decode) each.
"""

import argparse
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

OOM_EXIT = 3


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=["train", "prefill", "decode"], default="train")
    p.add_argument("--model-file", help="a gpuplan models/*.toml: its shape replaces --hidden ... --tie-embeddings")
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--kv-heads", type=int, default=None, help="default: --heads (multi-head attention)")
    p.add_argument("--ffn", type=int, default=2048, help="SwiGLU intermediate size")
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--tie-embeddings", action="store_true")
    p.add_argument("--rope-theta", type=float, default=500000.0)
    p.add_argument("--micro-batch", type=int, default=1, help="train: sequences per GPU per micro-step")
    p.add_argument("--grad-accum", type=int, default=1, help="train: micro-steps per optimizer step")
    p.add_argument("--seq", type=int, default=1024, help="train/prefill: sequence length")
    p.add_argument("--batch", type=int, default=1, help="prefill/decode: sequences per GPU")
    p.add_argument("--kv-len", type=int, default=1024, help="decode: tokens already in the KV cache")
    p.add_argument("--recompute", choices=["none", "full"], default="none", help="train: activation checkpointing per layer")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (Inductor)")
    p.add_argument("--dist", choices=["none", "ddp", "fsdp", "tp"], default="none",
                   help="train under torchrun: data parallel (DDP, FSDP full shard) or tensor parallel over all ranks (DTensor)")
    p.add_argument("--steps", type=int, default=10, help="steps in all, warm-up included")
    p.add_argument("--sdpa", choices=["flash", "auto"], default="flash", help="force the flash SDPA backend, or let PyTorch pick")
    p.add_argument("--optim", choices=["fused", "foreach"], default="fused", help="AdamW implementation")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--mem-trace", action="store_true",
                   help="train: in step 2, rank 0 prints `memtrace at=<point> alloc=<bytes> peak=<bytes>` at each phase "
                        "(peak since the previous point; resets the peak statistics, so the step lines' peaks are not the run's)")
    return p.parse_args(argv)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * self.weight.float()).to(x.dtype)


def rope_tables(head_dim, max_len, theta, device):
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    t = torch.arange(max_len, device=device, dtype=torch.float32)
    f = torch.outer(t, inv)
    emb = torch.cat([f, f], dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat([-b, a], dim=-1)


def apply_rope(x, cos, sin):
    # x: [b, h, s, d]; cos/sin: [s, d]
    return (x * cos.to(x.dtype)) + (rotate_half(x) * sin.to(x.dtype))


class Attention(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.n_heads = a.heads
        self.n_kv = a.kv_heads
        self.hd = a.hidden // a.heads
        self.q_proj = nn.Linear(a.hidden, a.heads * self.hd, bias=False)
        self.k_proj = nn.Linear(a.hidden, self.n_kv * self.hd, bias=False)
        self.v_proj = nn.Linear(a.hidden, self.n_kv * self.hd, bias=False)
        self.o_proj = nn.Linear(a.heads * self.hd, a.hidden, bias=False)

    def forward(self, x, cos, sin, cache=None, pos=0):
        b, s, _ = x.shape
        # -1 heads: under tensor parallelism the projections return this rank's heads only.
        q = self.q_proj(x).view(b, s, -1, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, s, -1, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, s, -1, self.hd).transpose(1, 2)
        q = apply_rope(q, cos[pos:pos + s], sin[pos:pos + s])
        k = apply_rope(k, cos[pos:pos + s], sin[pos:pos + s])
        gqa = k.size(1) != q.size(1)
        if cache is None:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        else:
            kc, vc = cache
            kc[:, :, pos:pos + s] = k
            vc[:, :, pos:pos + s] = v
            # Prefill (s > 1) is causal over the new tokens; a decode step (s == 1) sees the whole cache.
            o = F.scaled_dot_product_attention(q, kc[:, :, :pos + s], vc[:, :, :pos + s], is_causal=(s > 1 and pos == 0), enable_gqa=gqa)
        o = o.transpose(1, 2).reshape(b, s, -1)
        return self.o_proj(o)


class Mlp(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.gate_proj = nn.Linear(a.hidden, a.ffn, bias=False)
        self.up_proj = nn.Linear(a.hidden, a.ffn, bias=False)
        self.down_proj = nn.Linear(a.ffn, a.hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.input_layernorm = RMSNorm(a.hidden)
        self.self_attn = Attention(a)
        self.post_attention_layernorm = RMSNorm(a.hidden)
        self.mlp = Mlp(a)

    def forward(self, x, cos, sin, cache=None, pos=0):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache, pos)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, a, max_len):
        super().__init__()
        self.embed_tokens = nn.Embedding(a.vocab, a.hidden)
        self.layers = nn.ModuleList([Block(a) for _ in range(a.layers)])
        self.norm = RMSNorm(a.hidden)
        self.lm_head = nn.Linear(a.hidden, a.vocab, bias=False)
        if a.tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.recompute = a.recompute == "full"
        cos, sin = rope_tables(a.hidden // a.heads, max_len, a.rope_theta, self.embed_tokens.weight.device)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, tokens, caches=None, pos=0):
        x = self.embed_tokens(tokens)
        for i, layer in enumerate(self.layers):
            if self.recompute and self.training:
                x = torch.utils.checkpoint.checkpoint(layer, x, self.cos, self.sin, use_reentrant=False)
            else:
                x = layer(x, self.cos, self.sin, None if caches is None else caches[i], pos)
        if caches is not None:
            # Inference needs the next token only: the LM head runs on the last position.
            x = x[:, -1:]
        return self.lm_head(self.norm(x))


def init_weights(model, std=0.02):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, std)


def is_oom(e):
    if isinstance(e, torch.OutOfMemoryError):
        return True
    m = str(e)
    return "out of memory" in m.lower() or "CUBLAS_STATUS_ALLOC_FAILED" in m


def main():
    a = parse_args()
    if a.model_file:
        import tomllib
        with open(a.model_file, "rb") as f:
            m = tomllib.load(f)
        if m.get("ffn_kind", "gated") != "gated" or m.get("norm", "rmsnorm") != "rmsnorm" or m.get("position", "rope") != "rope" \
                or m.get("moe") or m.get("mla") or m.get("linear_bias") or m.get("qkv_bias"):
            sys.exit(f"{a.model_file}: only dense Llama shapes (gated FFN, RMSNorm, RoPE, no biases) are built here")
        if m.get("head_dim", m["hidden_size"] // m["n_heads"]) * m["n_heads"] != m["hidden_size"]:
            sys.exit(f"{a.model_file}: head_dim x n_heads must equal hidden_size here")
        a.hidden, a.layers, a.heads = m["hidden_size"], m["n_layers"], m["n_heads"]
        a.kv_heads, a.ffn, a.vocab = m.get("n_kv_heads", m["n_heads"]), m["ffn_hidden_size"], m["vocab_size"]
        a.tie_embeddings = bool(m["tied_embeddings"])
    if a.kv_heads is None:
        a.kv_heads = a.heads
    if a.hidden % a.heads or a.heads % a.kv_heads:
        sys.exit(f"bad shape: hidden {a.hidden} heads {a.heads} kv_heads {a.kv_heads}")
    if a.dist == "tp" and (a.mode != "train" or a.compile):
        sys.exit("--dist tp: train mode without --compile only")
    rank, world, local = 0, 1, 0
    if a.dist != "none":
        import torch.distributed as dist
        rank = int(os.environ["RANK"])
        world = int(os.environ["WORLD_SIZE"])
        local = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
        if a.dist == "tp" and (a.heads % world or a.kv_heads % world):
            sys.exit(f"--dist tp over {world} ranks: heads {a.heads} and kv_heads {a.kv_heads} must divide by it")
    else:
        torch.cuda.set_device(0)
    try:
        run(a, rank, world)
    except Exception as e:  # noqa: BLE001 - the OOM marker is the contract
        if is_oom(e):
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            print(f"gpuplan-workload: oom rank={rank} {msg}", flush=True)
            sys.stdout.flush()
            os._exit(OOM_EXIT)
        raise
    if a.dist != "none":
        import torch.distributed as dist
        dist.barrier()
        dist.destroy_process_group()


def run(a, rank, world):
    torch.manual_seed(a.seed + rank)
    dev = torch.device("cuda", torch.cuda.current_device())
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    if a.mode == "train":
        max_len = a.seq
    elif a.mode == "prefill":
        max_len = a.seq
    else:
        max_len = a.kv_len + a.steps
    torch.manual_seed(a.seed)  # same weights on every rank
    # Train keeps fp32 master params (bf16 autocast); inference holds bf16 weights.
    param_dtype = torch.float32 if a.mode == "train" else torch.bfloat16
    torch.set_default_dtype(param_dtype)
    with torch.device(dev):
        model = Llama(a, max_len)
    torch.set_default_dtype(torch.float32)
    model.cos, model.sin = model.cos.float(), model.sin.float()
    init_weights(model)
    n_params = sum(p.numel() for p in model.parameters())
    # Data-parallel ranks draw their own tokens; tensor-parallel ranks must all see the same ones.
    torch.manual_seed(a.seed + 1000 + (0 if a.dist == "tp" else rank))
    if rank == 0:
        print(f"config mode={a.mode} params={n_params} hidden={a.hidden} layers={a.layers} heads={a.heads} kv_heads={a.kv_heads} "
              f"ffn={a.ffn} vocab={a.vocab} tied={int(a.tie_embeddings)} micro_batch={a.micro_batch} grad_accum={a.grad_accum} "
              f"seq={a.seq} batch={a.batch} kv_len={a.kv_len} recompute={a.recompute} compile={int(a.compile)} dist={a.dist} "
              f"world={world} sdpa={a.sdpa} torch={torch.__version__} gpu={torch.cuda.get_device_name()}", flush=True)

    from torch.nn.attention import SDPBackend, sdpa_kernel
    backends = [SDPBackend.FLASH_ATTENTION] if a.sdpa == "flash" else [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.MATH]

    times = []
    if a.mode == "train":
        if a.dist == "ddp":
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = DDP(model, device_ids=[dev.index])
        elif a.dist == "fsdp":
            from torch.distributed.fsdp import fully_shard
            for layer in model.layers:
                fully_shard(layer)
            fully_shard(model)
        elif a.dist == "tp":
            tensor_parallel(model, a, world)
        fwd = torch.compile(model) if a.compile else model
        # Under tensor parallelism the sharded weights are DTensors and the norms' weights plain
        # tensors; a fused AdamW step takes one kind at a time, so each kind gets its own.
        from torch.distributed.tensor import DTensor
        kinds = [[p for p in model.parameters() if isinstance(p, DTensor)], [p for p in model.parameters() if not isinstance(p, DTensor)]]
        opts = [torch.optim.AdamW(ps, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1,
                                  fused=a.optim == "fused", foreach=a.optim == "foreach") for ps in kinds if ps]
        model.train()
        # Tensor-parallel ranks share their tokens: a step trains on one rank's worth.
        tokens_per_step = a.micro_batch * a.seq * a.grad_accum * (1 if a.dist == "tp" else world)
        if a.dist == "tp":
            from torch.distributed.tensor.parallel import loss_parallel
        else:
            loss_parallel = _null
        # The SDPA backend choice must hold in backward too: recompute re-runs the forward there.
        sdpa_ctx = sdpa_kernel(backends)
        sdpa_ctx.__enter__()
        for step in range(1, a.steps + 1):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            memtrace(a, rank, step, "start")
            for micro in range(a.grad_accum):
                x = torch.randint(0, a.vocab, (a.micro_batch, a.seq + 1), device=dev)
                inp, tgt = x[:, :-1], x[:, 1:]
                sync_ctx = model.no_sync() if (a.dist == "ddp" and micro < a.grad_accum - 1) else _null()
                if a.dist == "fsdp":
                    model.set_requires_gradient_sync(micro == a.grad_accum - 1)
                with sync_ctx:
                    with torch.autocast("cuda", dtype=torch.bfloat16):
                        logits = fwd(inp)
                        memtrace(a, rank, step, "forward")
                        # Under TP the logits stay sharded over the vocabulary (loss_parallel).
                        with loss_parallel():
                            loss = F.cross_entropy(logits.float().flatten(0, 1), tgt.reshape(-1))
                        memtrace(a, rank, step, "loss")
                    with loss_parallel():
                        (loss / a.grad_accum).backward()
                    memtrace(a, rank, step, "backward")
                del logits, loss
            for opt in opts:
                opt.step()
                opt.zero_grad(set_to_none=True)
            memtrace(a, rank, step, "optimizer")
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            times.append(dt)
            report(rank, step, dt, tokens_per_step)
        sdpa_ctx.__exit__(None, None, None)
    else:
        model.eval()
        torch.cuda.reset_peak_memory_stats()  # weights only from here on: inference holds no optimizer
        hd = a.hidden // a.heads
        cache_len = max_len
        fwd = torch.compile(model) if a.compile else model
        caches = [(torch.empty(a.batch, a.kv_heads, cache_len, hd, device=dev, dtype=torch.bfloat16),
                   torch.empty(a.batch, a.kv_heads, cache_len, hd, device=dev, dtype=torch.bfloat16)) for _ in range(a.layers)]
        with torch.inference_mode(), sdpa_kernel(backends):
            if a.mode == "prefill":
                for step in range(1, a.steps + 1):
                    x = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    logits = fwd(x, caches, 0)
                    torch.cuda.synchronize()
                    dt = time.perf_counter() - t0
                    del logits
                    times.append(dt)
                    report(rank, step, dt, a.batch * a.seq * world)
            else:
                # The cache holds kv_len tokens of random keys and values (what they are does not
                # change the time), then single-token steps are timed.
                for kc, vc in caches:
                    kc[:, :, :a.kv_len].normal_()
                    vc[:, :, :a.kv_len].normal_()
                nxt = torch.randint(0, a.vocab, (a.batch, 1), device=dev)
                for step in range(1, a.steps + 1):
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    logits = fwd(nxt, caches, a.kv_len + step - 1)
                    nxt = logits[:, -1:].argmax(-1)
                    torch.cuda.synchronize()
                    dt = time.perf_counter() - t0
                    times.append(dt)
                    report(rank, step, dt, a.batch * world)
    med = sorted(times)[len(times) // 2] if times else float("nan")
    print(f"summary rank={rank} world={world} mode={a.mode} params={n_params} steps={len(times)} median_step_time_s={med:.6f} "
          f"max_mem_alloc_bytes={torch.cuda.max_memory_allocated()} max_mem_reserved_bytes={torch.cuda.max_memory_reserved()}", flush=True)


def tensor_parallel(model, a, world):
    """Megatron-style tensor parallelism with PyTorch DTensor over all ranks, no sequence
    parallelism: Q/K/V, gate and up column-parallel, O and down row-parallel (one all-reduce each
    way per attention and per MLP), the embedding sharded over the vocabulary (its partial lookups
    all-reduced) and the LM head column-parallel with its logits left sharded for a vocab-parallel
    loss. Norm weights stay whole on every rank."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    mesh = init_device_mesh("cuda", (world,))
    for layer in model.layers:
        parallelize_module(layer, mesh, {
            "self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(), "self_attn.v_proj": ColwiseParallel(),
            "self_attn.o_proj": RowwiseParallel(),
            "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(), "mlp.down_proj": RowwiseParallel(),
        })
    parallelize_module(model, mesh, {
        "embed_tokens": RowwiseParallel(input_layouts=Replicate()),
        "lm_head": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False),
    })
    if a.tie_embeddings:
        # Both weights are [vocab, hidden] sharded on the vocabulary: the same layout, tie again.
        model.lm_head.weight = model.embed_tokens.weight


def memtrace(a, rank, step, at):
    if a.mem_trace and rank == 0 and step == 2:
        torch.cuda.synchronize()
        print(f"memtrace at={at} alloc={torch.cuda.memory_allocated()} peak={torch.cuda.max_memory_allocated()}", flush=True)
        torch.cuda.reset_peak_memory_stats()


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def report(rank, step, dt, tokens):
    if rank != 0:
        return
    print(f"step={step} step_time_s={dt:.6f} tokens={tokens} tokens_per_s={tokens / dt:.1f} "
          f"max_mem_alloc_bytes={torch.cuda.max_memory_allocated()} max_mem_reserved_bytes={torch.cuda.max_memory_reserved()}", flush=True)


if __name__ == "__main__":
    main()
