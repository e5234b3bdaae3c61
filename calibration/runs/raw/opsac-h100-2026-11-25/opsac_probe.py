"""Activation memory and step time of a Llama-3-8B-shaped stack of decoder blocks under torchtitan's
activation-checkpointing policies: none, full, per-op selective (`op`) and layer selective every 2nd
block (`layer2`), eager and torch.compile, bf16 and torchao float8 (tensorwise).

The block is torchtitan 0.2.0's Llama 3 `TransformerBlock` (torchtitan/models/llama3/model/model.py:
nn.RMSNorm, wq/wk/wv/wo, complex RoPE in fp32, `repeat_kv`, causal SDPA, SwiGLU w2(silu(w1 x) * w3 x)),
with its parameters in bf16 (what FSDP2's MixedPrecisionPolicy(param_dtype=bfloat16) computes with;
no autocast). The policies are copied from torchtitan 0.2.0 torchtitan/distributed/activation_checkpoint.py
(`_apply_op_sac`, `_apply_layer_sac`, `_apply_full_ac`) with the save list of
torchtitan/models/llama3/infra/parallelize.py (`_op_sac_save_list`); compile wraps each block after the
checkpoint wrapper with fullgraph=True as `apply_compile` does.

Usage: python3 opsac_probe.py OUT_DIR            (runs every config, one subprocess each)
       python3 opsac_probe.py --one MODE POLICY PRECISION  (one config, prints one JSON line)
"""

import json
import os
import subprocess
import sys
import time

DIM, N_HEADS, N_KV_HEADS, FFN = 4096, 32, 8, 14336  # Llama 3 8B (torchtitan llama3 "8B" args)
LAYERS = int(os.environ.get("OPSAC_LAYERS", "4"))
SEQ = int(os.environ.get("OPSAC_SEQ", "8192"))
MB = int(os.environ.get("OPSAC_MB", "2"))
STEPS = int(os.environ.get("OPSAC_STEPS", "5"))


def run_one(mode, policy, precision):
    from collections import defaultdict

    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    head_dim = DIM // N_HEADS

    def precompute_freqs_cis(dim, end, theta=500000.0):
        freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
        t = torch.arange(end, device=freqs.device)
        freqs = torch.outer(t, freqs).float()
        return torch.polar(torch.ones_like(freqs), freqs)

    def apply_rotary_emb(xq, xk, freqs_cis):
        xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
        xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
        fc = freqs_cis[0 : xq_.shape[1]].view(1, xq_.shape[1], 1, xq_.shape[-1])
        xq_out = torch.view_as_real(xq_ * fc).flatten(3)
        xk_out = torch.view_as_real(xk_ * fc).flatten(3)
        return xq_out.type_as(xq), xk_out.type_as(xk)

    def repeat_kv(x, n_rep):
        bs, slen, n_kv_heads, hd = x.shape
        if n_rep == 1:
            return x
        return torch.unsqueeze(x, dim=3).expand(bs, slen, n_kv_heads, n_rep, hd).reshape(bs, slen, n_kv_heads * n_rep, hd)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.wq = nn.Linear(DIM, N_HEADS * head_dim, bias=False)
            self.wk = nn.Linear(DIM, N_KV_HEADS * head_dim, bias=False)
            self.wv = nn.Linear(DIM, N_KV_HEADS * head_dim, bias=False)
            self.wo = nn.Linear(N_HEADS * head_dim, DIM, bias=False)

        def forward(self, x, freqs_cis):
            bs, seqlen, _ = x.shape
            xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)
            xq = xq.view(bs, seqlen, -1, head_dim)
            xk = xk.view(bs, seqlen, -1, head_dim)
            xv = xv.view(bs, seqlen, -1, head_dim)
            xq, xk = apply_rotary_emb(xq, xk, freqs_cis)
            keys = repeat_kv(xk, N_HEADS // N_KV_HEADS)
            values = repeat_kv(xv, N_HEADS // N_KV_HEADS)
            out = F.scaled_dot_product_attention(xq.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2), is_causal=True)
            out = out.transpose(1, 2).contiguous().view(bs, seqlen, -1)
            return self.wo(out)

    class FeedForward(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = nn.Linear(DIM, FFN, bias=False)
            self.w2 = nn.Linear(FFN, DIM, bias=False)
            self.w3 = nn.Linear(DIM, FFN, bias=False)

        def forward(self, x):
            return self.w2(F.silu(self.w1(x)) * self.w3(x))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention = Attention()
            self.feed_forward = FeedForward()
            self.attention_norm = nn.RMSNorm(DIM, eps=1e-5)
            self.ffn_norm = nn.RMSNorm(DIM, eps=1e-5)

        def forward(self, x, freqs_cis):
            h = x + self.attention(self.attention_norm(x), freqs_cis)
            return h + self.feed_forward(self.ffn_norm(h))

    # torchtitan 0.2.0 models/llama3/infra/parallelize.py `_op_sac_save_list`.
    save_list = {
        torch.ops.aten.mm.default,
        torch.ops.aten._scaled_dot_product_efficient_attention.default,
        torch.ops.aten._scaled_dot_product_flash_attention.default,
        torch.ops.aten.max.default,
    }
    try:
        save_list.add(torch.ops._c10d_functional.reduce_scatter_tensor.default)
    except (AttributeError, RuntimeError):
        pass
    if hasattr(torch._higher_order_ops, "flex_attention"):
        save_list.add(torch._higher_order_ops.flex_attention)

    seen = defaultdict(lambda: [0, 0])  # op -> [saved, recomputed] in the first step's forward (all layers)
    recording = [True]

    def _get_custom_policy(meta):
        def _custom_policy(ctx, func, *args, **kwargs):
            mode_ = "recompute" if ctx.is_recompute else "forward"
            mm_count_key = f"{mode_}_mm_count"
            if func == torch.ops.aten.mm.default:
                meta[mm_count_key] += 1
            to_save = func in save_list and not (func == torch.ops.aten.mm.default and meta[mm_count_key] % 2 == 0)
            if recording[0] and not ctx.is_recompute:
                seen[str(func)][0 if to_save else 1] += 1
            return CheckpointPolicy.MUST_SAVE if to_save else CheckpointPolicy.PREFER_RECOMPUTE

        return _custom_policy

    def selective_checkpointing_context_fn():
        meta = defaultdict(int)
        return create_selective_checkpoint_contexts(_get_custom_policy(meta))

    class Ckpt(nn.Module):
        def __init__(self, block, context_fn=None):
            super().__init__()
            self.block = block
            self.context_fn = context_fn

        def forward(self, x, freqs_cis):
            if self.context_fn is None:
                return checkpoint(self.block, x, freqs_cis, use_reentrant=False, preserve_rng_state=False)
            return checkpoint(self.block, x, freqs_cis, use_reentrant=False, preserve_rng_state=False, context_fn=self.context_fn)

    if mode == "compile" and hasattr(torch._dynamo.config, "_experimental_support_context_fn_in_torch_utils_checkpoint"):
        torch._dynamo.config._experimental_support_context_fn_in_torch_utils_checkpoint = True
    torch.manual_seed(0)
    blocks = [Block() for _ in range(LAYERS)]
    model = nn.ModuleList(blocks).to(device=dev, dtype=torch.bfloat16)
    if precision == "fp8":
        from torchao.float8 import convert_to_float8_training

        convert_to_float8_training(model)
    layers = []
    for i, b in enumerate(model):
        if policy == "full":
            b = Ckpt(b)
        elif policy == "op":
            b = Ckpt(b, selective_checkpointing_context_fn)
        elif policy == "layer2":
            # `_apply_layer_sac`: the global counter is incremented first; blocks whose count is a
            # multiple of 2 are wrapped (the 2nd, 4th, ...).
            if (i + 1) % 2 == 0:
                b = Ckpt(b)
        if mode == "compile":
            b = torch.compile(b, fullgraph=True)
        layers.append(b)
    freqs = precompute_freqs_cis(head_dim, SEQ).to(dev)
    params = [p for p in model.parameters()]
    param_bytes = sum(p.numel() * p.element_size() for p in params)

    def step(record=None):
        for p in params:
            p.grad = None
        x = torch.randn(MB, SEQ, DIM, device=dev, dtype=torch.bfloat16, requires_grad=True)
        if record is not None:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            record["base"] = torch.cuda.memory_allocated()
            record["after_layer"] = []
        h = x
        for b in layers:
            h = b(h, freqs)
            if record is not None:
                record["after_layer"].append(torch.cuda.memory_allocated())
        loss = h.sum()
        if record is not None:
            record["fwd_peak"] = torch.cuda.max_memory_allocated()
        loss.backward()
        if record is not None:
            torch.cuda.synchronize()
            record["peak"] = torch.cuda.max_memory_allocated()
            record["grad_bytes"] = sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None)
        return loss

    t0 = time.time()
    step()
    compile_s = time.time() - t0
    recording[0] = False
    step()
    rec = {}
    step(rec)
    times = []
    for _ in range(STEPS):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        step()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    tokens = MB * SEQ
    deltas = [b - a for a, b in zip([rec["base"]] + rec["after_layer"][:-1], rec["after_layer"])]
    return {
        "mode": mode,
        "policy": policy,
        "precision": precision,
        "layers": LAYERS,
        "seq": SEQ,
        "micro_batch": MB,
        "dim": DIM,
        "n_heads": N_HEADS,
        "n_kv_heads": N_KV_HEADS,
        "ffn": FFN,
        "param_bytes": param_bytes,
        "base_allocated_bytes": rec["base"],
        "after_layer_allocated_bytes": rec["after_layer"],
        "per_layer_delta_bytes": deltas,
        "per_layer_delta_bytes_per_token": [d / tokens for d in deltas],
        "fwd_peak_allocated_bytes": rec["fwd_peak"],
        "peak_allocated_bytes": rec["peak"],
        "grad_bytes": rec["grad_bytes"],
        "step_ms_median": times[len(times) // 2],
        "step_ms_all": times,
        "first_step_s": compile_s,
        "sac_ops_first_forward": {k: {"saved": v[0], "recomputed": v[1]} for k, v in seen.items()} if policy == "op" else None,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
        "sdpa_flash_enabled": torch.backends.cuda.flash_sdp_enabled() if dev == "cuda" else None,
    }


CONFIGS = [
    ("eager", "none", "bf16"),
    ("eager", "op", "bf16"),
    ("eager", "full", "bf16"),
    ("eager", "layer2", "bf16"),
    ("compile", "none", "bf16"),
    ("compile", "op", "bf16"),
    ("compile", "full", "bf16"),
    ("eager", "op", "fp8"),
    ("compile", "op", "fp8"),
    ("eager", "none", "fp8"),
    ("compile", "none", "fp8"),
    ("compile", "full", "fp8"),
]


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--one":
        print("RESULT " + json.dumps(run_one(*sys.argv[2:5])), flush=True)
        return
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    deadline = time.time() + float(os.environ.get("OPSAC_BUDGET_S", "420"))
    with open(os.path.join(out, "results.jsonl"), "a") as f, open(os.path.join(out, "log.txt"), "a") as log:
        for mode, policy, precision in CONFIGS:
            left = deadline - time.time()
            if left < 30:
                log.write(f"skipped {mode} {policy} {precision}: budget spent\n")
                continue
            t0 = time.time()
            try:
                p = subprocess.run(
                    [sys.executable, __file__, "--one", mode, policy, precision],
                    capture_output=True,
                    text=True,
                    timeout=min(left, 180),
                )
                lines = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
                if lines:
                    f.write(lines[-1][len("RESULT ") :] + "\n")
                    f.flush()
                log.write(f"== {mode} {policy} {precision} rc={p.returncode} {time.time() - t0:.1f}s\n{p.stderr[-3000:]}\n")
            except subprocess.TimeoutExpired:
                log.write(f"== {mode} {policy} {precision} timed out after {time.time() - t0:.1f}s\n")
            log.flush()
            print(f"{mode} {policy} {precision} done in {time.time() - t0:.1f}s", flush=True)


if __name__ == "__main__":
    main()
