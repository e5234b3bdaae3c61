//! One `hf-eager` prefill forward replayed through PyTorch's caching allocator
//! ([`CachingAllocator`]): the allocated and reserved peaks of a transformers model's forward
//! under `torch.inference_mode` with `use_cache=True` (scenarios/workloads/hf_train.py
//! `--mode prefill`), beyond its weights.
//!
//! The requests are the forward's tensors in the order the transformers 5.17.0 modules make and
//! drop them (read from the wheel: `models/llama`, `models/qwen3_moe`, `models/mixtral`,
//! `models/deepseek_v3` `modeling_*.py`, `integrations/sdpa_attention.py`, `integrations/moe.py`),
//! each tensor that scales with the tokens and a width (per-token scalars, under 1 MiB at the run
//! set's shapes, are left out):
//! - the embedding output (`inputs_embeds`, alive for the whole forward), each layer's input freed
//!   when the next layer's output replaces it;
//! - RMSNorm (`*RMSNorm.forward`): the fp32 copy, `pow(2)` (freed), the fp32 normalized product
//!   (the copy freed), the bf16 cast and the weight's product (the cast freed), the fp32 product
//!   freed on return;
//! - GQA attention (`LlamaAttention`, `Qwen3MoeAttention` with its per-head `q_norm`/`k_norm`):
//!   q, k, v projections, `apply_rotary_pos_emb` (`q * cos`, `rotate_half`'s negated half and
//!   `cat`, `* sin`, the sum), the cache's copies of k and v (`DynamicCache`'s first `update`),
//!   the SDPA output (cuDNN writes it in the query's [b, s, h, d] layout: no copy) and `o_proj`;
//! - MLA attention (`DeepseekV3Attention.forward`, lines 438-493): `q_a_proj`, `q_a_layernorm`,
//!   `q_b_proj`, `kv_a_proj_with_mqa`, `kv_a_layernorm` on the latent, the interleaved RoPE on the
//!   query's and the shared key's rope parts (`apply_rotary_pos_emb_interleave`, lines 350-357:
//!   four half-width products, a difference and a sum, the `cat`), the cache's copies of the latent
//!   and the rope key, the concatenated query (`torch.cat((q_pass, q_rot))`, nh x 192 wide),
//!   `expand_kv` (`kv_b_proj`'s nh x (128 + 128) output and the `new_empty` key of nh x 192 filled
//!   in place: `k_rot.expand` shares storage, the copies do not allocate), the SDPA output in
//!   [b, h, s, dv] layout (the query is a contiguous `cat`) and its `transpose(1, 2).contiguous()`
//!   copy (`sdpa_attention.py` line 168), `o_proj`; everything held until the method returns;
//! - the gated MLP (`down(act(gate(x)) * up(x))`);
//! - the MoE block: the router (DeepSeek-V3's `F.linear(hidden.float(), weight.float())` makes an
//!   fp32 copy of the hidden states, then fp32 logits, scores and choice scores; softmax routers a
//!   bf16 linear and an fp32 softmax), transformers' `grouped_mm` experts
//!   ([`super::hf_grouped_experts_peak`]'s sequence), DeepSeek's shared experts as a gated MLP of
//!   `n_shared x` their width and the sum;
//! - the residual adds; the final norm (the LM head runs on the last position only,
//!   `logits_to_keep=1`: negligible).
//!
//! Written from `torch.cuda.memory._record_memory_history` traces of these forwards on the lent H100
//! (calibration/runs/raw/mla-prefill-h100-2026-11-25/) and checked against the same processes'
//! `max_memory_allocated` / `max_memory_reserved` less the weights: allocated within 0.2%, reserved
//! within 3.6% (DeepSeek-V3-s at b4 x 8192 and b8 x 4096, its e64k6 variant, Qwen3-MoE-s,
//! Llama-3.2-1B; `tests/it/hf.rs`), and against the run set's 27 hf-eager prefill runs (allocated
//! within 1%, reserved within 8%).

use super::caching::CachingAllocator;
use super::ExpertsPeak;
use crate::model::{Model, NormPlacement, RmsStyle, RouterScore};

/// bf16 and fp32 element bytes.
const BF16: f64 = 2.0;
const FP32: f64 = 4.0;

/// `*RMSNorm.forward` on `[tokens, width]` bf16 (transformers 5.17.0, e.g.
/// `modeling_deepseek_v3.py` lines 47-52); returns the output's handle.
fn rms_norm(a: &mut CachingAllocator, tokens: f64, width: f64) -> usize {
    let f32_copy = a.alloc(tokens * width * FP32);
    let pow = a.alloc(tokens * width * FP32);
    a.free(pow);
    let normed = a.alloc(tokens * width * FP32);
    a.free(f32_copy);
    let cast = a.alloc(tokens * width * BF16);
    let out = a.alloc(tokens * width * BF16);
    a.free(cast);
    a.free(normed);
    out
}

/// The family's RMSNorm on `[tokens, width]` bf16: Llama's ([`rms_norm`]), or OLMo-2's and
/// Gemma's, which multiply by the weight (Gemma: by `1 + weight`) in fp32 before the cast
/// (`Olmo2RMSNorm.forward`, `Gemma2RMSNorm.forward`, transformers 5.17.0): the fp32 copy, `pow(2)`
/// (freed), the fp32 normalized tensor (the copy freed), the fp32 product (the normalized freed),
/// the bf16 cast (the product freed).
fn styled_norm(a: &mut CachingAllocator, model: &Model, tokens: f64, width: f64) -> usize {
    if model.style.rms_style == RmsStyle::CastThenScale {
        return rms_norm(a, tokens, width);
    }
    let f32_copy = a.alloc(tokens * width * FP32);
    let pow = a.alloc(tokens * width * FP32);
    a.free(pow);
    let normed = a.alloc(tokens * width * FP32);
    a.free(f32_copy);
    let product = a.alloc(tokens * width * FP32);
    a.free(normed);
    let out = a.alloc(tokens * width * BF16);
    a.free(product);
    out
}

/// `apply_rotary_pos_emb` (`q * cos + rotate_half(q) * sin`) on a bf16 tensor of `bytes`.
fn rope_rotate_half(a: &mut CachingAllocator, bytes: f64) -> usize {
    let q_cos = a.alloc(bytes);
    let neg = a.alloc(bytes / 2.0);
    let cat = a.alloc(bytes);
    a.free(neg);
    let q_sin = a.alloc(bytes);
    a.free(cat);
    let out = a.alloc(bytes);
    a.free(q_cos);
    a.free(q_sin);
    out
}

/// `apply_rotary_pos_emb_interleave` (DeepSeek-V3) on a bf16 tensor of `bytes`.
fn rope_interleave(a: &mut CachingAllocator, bytes: f64) -> usize {
    let half = bytes / 2.0;
    let x1 = a.alloc(half);
    let x2 = a.alloc(half);
    let first = a.alloc(half);
    a.free(x1);
    a.free(x2);
    let y1 = a.alloc(half);
    let y2 = a.alloc(half);
    let second = a.alloc(half);
    a.free(y1);
    a.free(y2);
    let out = a.alloc(bytes);
    a.free(first);
    a.free(second);
    out
}

/// Phi-3's `down_proj(up * act(gate))` after one `gate_up_proj` (`Phi3MLP.forward`): the fused
/// output, whose `chunk` halves are views, the activation, the product (the fused output and the
/// activation freed), `down_proj`.
fn fused_gated_mlp(a: &mut CachingAllocator, tokens: f64, hidden: f64, ffn: f64) -> usize {
    let gate_up = a.alloc(tokens * 2.0 * ffn * BF16);
    let act = a.alloc(tokens * ffn * BF16);
    let product = a.alloc(tokens * ffn * BF16);
    a.free(act);
    a.free(gate_up);
    let down = a.alloc(tokens * hidden * BF16);
    a.free(product);
    down
}

/// `down_proj(act_fn(gate_proj(x)) * up_proj(x))` on `tokens` rows of width `ffn`.
fn gated_mlp(a: &mut CachingAllocator, tokens: f64, hidden: f64, ffn: f64) -> usize {
    let gate = a.alloc(tokens * ffn * BF16);
    let act = a.alloc(tokens * ffn * BF16);
    a.free(gate);
    let up = a.alloc(tokens * ffn * BF16);
    let product = a.alloc(tokens * ffn * BF16);
    a.free(act);
    a.free(up);
    let down = a.alloc(tokens * hidden * BF16);
    a.free(product);
    down
}

/// The attention block of one layer from its normed input to `o_proj`'s output (the normed input,
/// where the family has one, is freed here); the KV cache's tensors are pushed on `cache`.
/// `masked`: the layer runs SDPA with transformers' sliding-window mask, so under GQA k and v are
/// first repeated to every query head (`repeat_kv`, two new tensors held through the call), and the
/// boolean mask of `mask_bytes` elements is made additive for the kernel.
fn attention(a: &mut CachingAllocator, model: &Model, tokens: f64, normed: Option<usize>, masked: bool, mask_bytes: f64, cache: &mut Vec<usize>) -> usize {
    let t = tokens;
    let heads = model.n_heads as f64;
    match &model.mla {
        Some(mla) => {
            let qk = (mla.qk_nope_head_dim + mla.qk_rope_head_dim) as f64;
            let rope = mla.qk_rope_head_dim as f64;
            let latent = mla.kv_lora_rank as f64;
            let v = mla.v_head_dim as f64;
            let q_states = if mla.q_lora_rank > 0 {
                let q_a = a.alloc(t * mla.q_lora_rank as f64 * BF16);
                let q_norm = rms_norm(a, t, mla.q_lora_rank as f64);
                a.free(q_a);
                let q_b = a.alloc(t * heads * qk * BF16);
                a.free(q_norm);
                q_b
            } else {
                a.alloc(t * heads * qk * BF16)
            };
            let kv_a = a.alloc(t * (latent + rope) * BF16);
            let kv_norm = rms_norm(a, t, latent);
            let q_rot = rope_interleave(a, t * heads * rope * BF16);
            let k_rot = rope_interleave(a, t * rope * BF16);
            cache.push(a.alloc(t * latent * BF16));
            cache.push(a.alloc(t * rope * BF16));
            a.free(kv_norm);
            a.free(k_rot);
            let query = a.alloc(t * heads * qk * BF16);
            let kv_b = a.alloc(t * heads * (mla.qk_nope_head_dim as f64 + v) * BF16);
            let key = a.alloc(t * heads * qk * BF16);
            let sdpa = a.alloc(t * heads * v * BF16);
            let contiguous = a.alloc(t * heads * v * BF16);
            a.free(sdpa);
            let out = a.alloc(t * model.hidden as f64 * BF16);
            a.free(contiguous);
            for h in [q_states, q_rot, kv_a, query, key, kv_b] {
                a.free(h);
            }
            if let Some(n) = normed {
                a.free(n);
            }
            out
        }
        None => {
            let hd = model.head_dim as f64;
            let kv_heads = model.n_kv_heads as f64;
            // Phi-3's `qkv_proj`: one tensor whose q, k and v slices are views.
            let fused = model.style.fused_projections.then(|| a.alloc(t * (heads + 2.0 * kv_heads) * hd * BF16));
            let mut q = if fused.is_some() { None } else { Some(a.alloc(t * heads * hd * BF16)) };
            if model.qk_norm {
                let n = styled_norm(a, model, t, heads * hd);
                if let Some(q) = q {
                    a.free(q);
                }
                q = Some(n);
            }
            let mut k = if fused.is_some() { None } else { Some(a.alloc(t * kv_heads * hd * BF16)) };
            if model.qk_norm {
                let n = styled_norm(a, model, t, kv_heads * hd);
                if let Some(k) = k {
                    a.free(k);
                }
                k = Some(n);
            }
            let v = if fused.is_some() { None } else { Some(a.alloc(t * kv_heads * hd * BF16)) };
            let q_embed = rope_rotate_half(a, t * heads * hd * BF16);
            let k_embed = rope_rotate_half(a, t * kv_heads * hd * BF16);
            for h in [q, k].into_iter().flatten() {
                a.free(h);
            }
            cache.push(a.alloc(t * kv_heads * hd * BF16));
            cache.push(a.alloc(t * kv_heads * hd * BF16));
            let mut repeated = if masked && heads > kv_heads { vec![a.alloc(t * heads * hd * BF16), a.alloc(t * heads * hd * BF16)] } else { Vec::new() };
            for h in [Some(k_embed), v, fused].into_iter().flatten() {
                a.free(h);
            }
            if masked {
                // SDPA turns the boolean mask into an additive one of the query's dtype
                // (`convert_boolean_attn_mask`, aten/src/ATen/native/transformers/attention.cpp,
                // PyTorch 2.x: from memory, not re-read here), held through the kernel: [b, 1, s, s]
                // bf16, `mask_bytes` twice over.
                repeated.push(a.alloc(mask_bytes * BF16));
            }
            let sdpa = a.alloc(t * heads * hd * BF16);
            for h in repeated {
                a.free(h);
            }
            let out = a.alloc(t * model.hidden as f64 * BF16);
            a.free(sdpa);
            a.free(q_embed);
            if let Some(n) = normed {
                a.free(n);
            }
            out
        }
    }
}

/// The MoE block from its normed input: router, grouped experts, shared experts.
fn moe_block(a: &mut CachingAllocator, model: &Model, tokens: f64) -> usize {
    let moe = model.moe.as_ref().expect("an MoE layer has an MoE block");
    let t = tokens;
    let h = model.hidden as f64;
    let e = moe.n_experts as f64;
    let k = moe.top_k as f64;
    let fp32_router = moe.router.score == RouterScore::Sigmoid && moe.router.weights_fp32;
    let mut router = Vec::new();
    if fp32_router {
        // `F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32))`.
        let hidden32 = a.alloc(t * h * FP32);
        router.push(a.alloc(t * e * FP32));
        a.free(hidden32);
        router.push(a.alloc(t * e * FP32));
        router.push(a.alloc(t * e * FP32));
    } else {
        router.push(a.alloc(t * e * BF16));
        let softmax = a.alloc(t * e * FP32);
        a.free(softmax);
    }
    let r = if moe.router.weights_fp32 { FP32 } else { BF16 };
    router.push(a.alloc(t * k * 8.0));
    router.push(a.alloc(t * k * r));
    let mut out = super::grouped_experts_replay(a, t, h, moe.n_experts, moe.top_k, moe.expert_ffn_hidden as f64, moe.router.weights_fp32);
    for x in router {
        a.free(x);
    }
    if moe.n_shared_experts > 0 {
        let shared = gated_mlp(a, t, h, (moe.n_shared_experts as u64 * moe.shared_expert_ffn_hidden) as f64);
        let sum = a.alloc(t * h * BF16);
        a.free(shared);
        a.free(out);
        out = sum;
    }
    out
}

/// The allocated and reserved peaks of one `hf-eager` prefill forward of `tokens` tokens (batch x
/// sequence) on one GPU, beyond the weights, the KV cache it fills included.
///
/// The families' layouts (`model::LayerStyle`): Gemma's scaled embedding (the lookup, then its
/// product, the lookup freed), norms after attention and the MLP on their outputs (Gemma besides
/// its pre-norms, OLMo-2 instead of them), the families' RMSNorm rounding, Phi-3's fused
/// projections; and, when a sequence of `seq` tokens reaches a sliding window, transformers'
/// sliding-window mask (`[b, 1, s, s]` bool, made once before the layers and held through them,
/// `create_sliding_window_causal_mask`) with the sliding layers' repeated k and v under GQA.
pub fn hf_prefill_forward_peak(model: &Model, tokens: f64, seq: u64) -> ExpertsPeak {
    let t = tokens.ceil();
    let h = model.hidden as f64;
    let style = model.style;
    let mut a = CachingAllocator::new();
    let embeds = if style.embedding_scale {
        let lookup = a.alloc(t * h * BF16);
        let scaled = a.alloc(t * h * BF16);
        a.free(lookup);
        scaled
    } else {
        a.alloc(t * h * BF16)
    };
    let sliding = model.sliding_window.as_ref().filter(|sw| seq >= sw.window);
    let mask_bytes = if sliding.is_some() { t * seq as f64 } else { 0.0 };
    let _mask = sliding.map(|_| a.alloc(mask_bytes));
    let mut x = embeds;
    let mut cache = Vec::new();
    let pre = style.norm_placement != NormPlacement::Post;
    let post = style.norm_placement != NormPlacement::Pre;
    for layer in 0..model.n_layers {
        let normed = pre.then(|| styled_norm(&mut a, model, t, h));
        let masked = sliding.is_some_and(|sw| sw.sliding.get(layer as usize).copied().unwrap_or(false));
        let mut attn = attention(&mut a, model, t, normed, masked, mask_bytes, &mut cache);
        if post {
            let n = styled_norm(&mut a, model, t, h);
            a.free(attn);
            attn = n;
        }
        let after_attn = a.alloc(t * h * BF16);
        a.free(attn);
        let normed2 = pre.then(|| styled_norm(&mut a, model, t, h));
        let mut ffn = if model.moe.is_some() && model.is_moe_layer(layer) {
            moe_block(&mut a, model, t)
        } else if style.fused_projections {
            fused_gated_mlp(&mut a, t, h, model.ffn_hidden as f64)
        } else {
            gated_mlp(&mut a, t, h, model.ffn_hidden as f64)
        };
        if let Some(n) = normed2 {
            a.free(n);
        }
        if post {
            let n = styled_norm(&mut a, model, t, h);
            a.free(ffn);
            ffn = n;
        }
        let out = a.alloc(t * h * BF16);
        a.free(ffn);
        a.free(after_attn);
        if x != embeds {
            a.free(x);
        }
        x = out;
    }
    let _final_norm = styled_norm(&mut a, model, t, h);
    ExpertsPeak { allocated: a.peak_allocated as f64, reserved: a.peak_reserved as f64 }
}
