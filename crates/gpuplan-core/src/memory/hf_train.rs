//! An `hf-eager` training job replayed through PyTorch's caching allocator ([`CachingAllocator`]):
//! the allocated and reserved peaks of the HF run set's loop (scenarios/workloads/hf_train.py:
//! `AutoModelForCausalLM.from_config` built in fp32 on the GPU, bf16 autocast, transformers' loss,
//! `backward()`, fused AdamW, `zero_grad(set_to_none=True)`) over its first three steps, from the
//! model's build on. What the allocator reserves beyond the allocated peak is the caching
//! allocator's gap that a share of the allocated bytes cannot follow: fp32 gradients and AdamW's
//! states are param-sized blocks that the first step places into the segments the activations
//! left, so the next forward's activations need new segments, and how many depends on how the
//! sizes of the layer's tensors fit into one another.
//!
//! The sequence is written from `torch.cuda.memory._record_memory_history` traces of three steps
//! of Llama-3.2-3B (micro-batch 1 and 2 x 2048), Llama-3.2-1B (1 x 1024, 1 x 2048) and TinyLlama
//! (4 x 2048) on the lent H100 (torch 2.11.0+cu130, transformers 5.17.0;
//! calibration/runs/raw/allocgap-h100-2026-11-25/), every tensor of 1 MiB or more in the order the
//! trace shows it (per-token scalars and the norms' weight gradients, under 1 MiB, are left out):
//! - the build: every parameter in fp32 in module order (embedding; per layer q, k, v, o, gate,
//!   up, down, the two norm weights; the final norm; the LM head), the tied head allocated by
//!   `nn.Linear` and freed when `post_init` ties it to the embedding;
//! - the forward, per layer: RMSNorm's fp32 `pow(2)` (freed), normalized product and weighted
//!   output (the residual stream is fp32: fp32 embedding and residual adds); each linear's
//!   autocast weight cast, bf16 copy of its input (q, k and v each cast the norm's output) and
//!   output; RoPE in fp32 (`q * cos` with fp32 cos) with `rotate_half`'s bf16 negation and `cat`;
//!   SDPA's bf16 casts of the fp32 k and q, its output and log-sum-exp; the residual adds; the
//!   final norm, the LM head's weight cast, input cast and bf16 logits, the loss's `.float()`
//!   copy and log-softmax; cuBLAS's 32 MiB workspace at the first matmul of the forward thread and
//!   of autograd's;
//! - the backward: the loss's two fp32 [tokens, vocab] gradients and the bf16 one, then per layer
//!   in reverse each linear's bf16 weight gradient, input gradient and its fp32 cast, the fp32
//!   weight gradient (`AccumulateGrad` keeps it: the `.grad`), the saved tensors freed as their
//!   node runs, SDPA's backward (dq, dk, dv and a workspace of two fp32 queries), RoPE's
//!   backward, RMSNorm's backward (eight [tokens, hidden] fp32 temporaries and one of twice that), the residual
//!   stream's gradient accumulated in place; the embedding's dense gradient (a fresh
//!   [vocab, hidden] fp32 tensor added into the tied head's gradient);
//! - the optimizer: at the first step AdamW's `exp_avg` and `exp_avg_sq` per parameter in
//!   parameter order (`optim/adam.py` `_init_group`), then `zero_grad` frees every gradient.
//!
//! Qwen3's per-head q/k norms (transformers 5.17.0 `modeling_qwen3.py`, not traced) add, per
//! projection, the norm's fp32 copy and bf16 cast (kept) and its fp32 output, on which RoPE then
//! runs in fp32; their backward's temporaries are the hidden norm's at the head width.
//!
//! This sequence reproduces the traced allocated peaks within 0.01% and the reserved within 0.6%;
//! over the run set's replayed runs the peak is within 1.5% (Llama-3.2-1B/-3B, TinyLlama) and 5%
//! (Qwen3-1.7B: 15 of 18 within 0.4%) of NVML's (tests/it/hf.rs). Nothing in it is fitted.

use super::caching::CachingAllocator;
use super::ExpertsPeak;
use crate::model::Model;

const BF16: f64 = 2.0;
const FP32: f64 = 4.0;
/// cuBLAS's workspace as PyTorch allocates it through the caching allocator on Hopper (32 MiB per
/// handle; one handle for the forward's thread, one for autograd's): the traces' 32 MiB blocks
/// allocated at the first matmul of each thread and never freed.
const CUBLAS_WORKSPACE: f64 = 32.0 * 1024.0 * 1024.0;
/// Steps replayed: the traces' reserved peak is reached by the third step (TinyLlama's grew in
/// the third, none after: the 10-step runs' `max_memory_reserved` equal the traces').
const STEPS: usize = 3;

/// `LlamaRMSNorm.forward` on fp32 `[tokens, width]`: returns (normalized, output).
fn norm_fwd(a: &mut CachingAllocator, t: f64, h: f64) -> (usize, usize) {
    let pow = a.alloc(t * h * FP32);
    a.free(pow);
    (a.alloc(t * h * FP32), a.alloc(t * h * FP32))
}

/// A linear under autocast: the weight's bf16 cast, the input's bf16 cast (`None` when the input
/// is bf16 already), the bf16 output.
fn linear_fwd(a: &mut CachingAllocator, t: f64, i: f64, o: f64, cast_input: bool) -> (usize, Option<usize>, usize) {
    let w = a.alloc(i * o * BF16);
    let x = cast_input.then(|| a.alloc(t * i * BF16));
    (w, x, a.alloc(t * o * BF16))
}

/// `apply_rotary_pos_emb` on `n` elements of `elem` bytes (bf16 q, or the fp32 output of Qwen3's
/// q/k norm) with fp32 cos and sin: returns the fp32 result.
fn rope_fwd(a: &mut CachingAllocator, n: f64, elem: f64) -> usize {
    let q_cos = a.alloc(n * FP32);
    let neg = a.alloc(n * elem / 2.0);
    let cat = a.alloc(n * elem);
    a.free(neg);
    let rot_sin = a.alloc(n * FP32);
    a.free(cat);
    let out = a.alloc(n * FP32);
    a.free(q_cos);
    a.free(rot_sin);
    out
}

/// RoPE's backward from the fp32 gradient `g` of `n` elements: returns the gradient of its input
/// (`elem` bytes per element).
fn rope_bwd(a: &mut CachingAllocator, g: usize, n: f64, elem: f64) -> usize {
    let x = a.alloc(n * FP32);
    let y = a.alloc(n * elem);
    a.free(x);
    let half = a.alloc(n * elem / 2.0);
    let grad = a.alloc(n * elem);
    a.free(half);
    let z = a.alloc(n * elem);
    a.free(y);
    a.free(z);
    let u = a.alloc(n * FP32);
    let v = a.alloc(n * elem);
    a.free(u);
    a.free(g);
    a.free(v);
    grad
}

/// Qwen3's per-head `q_norm` / `k_norm` (the same `RMSNorm.forward`) on a bf16 projection of `n`
/// elements: the fp32 copy (kept), `pow(2)` (freed), the normalized product (freed on return),
/// its bf16 cast (kept: the fp32 weight's product reads it) and the fp32 product, returned.
fn head_norm_fwd(a: &mut CachingAllocator, n: f64) -> ((usize, usize), usize) {
    let copy = a.alloc(n * FP32);
    let pow = a.alloc(n * FP32);
    a.free(pow);
    let normed = a.alloc(n * FP32);
    let cast = a.alloc(n * BF16);
    let out = a.alloc(n * FP32);
    a.free(normed);
    ((copy, cast), out)
}

/// The head norm's backward from the fp32 gradient `g`: frees it and the kept tensors, returns
/// the bf16 gradient of the projection. Not traced: its temporaries are the hidden norm's
/// backward's (traced) at the head width, in the dtypes of the forward's tensors.
fn head_norm_bwd(a: &mut CachingAllocator, g: usize, n: f64, kept: (usize, usize)) -> usize {
    let p = a.alloc(n * FP32);
    let q = a.alloc(n * BF16);
    a.free(p);
    a.free(g);
    a.free(kept.1);
    let r: Vec<usize> = (0..3).map(|_| a.alloc(n * FP32)).collect();
    a.free(r[0]);
    a.free(r[1]);
    a.free(q);
    a.free(kept.0);
    let grad = a.alloc(n * BF16);
    a.free(r[2]);
    grad
}

/// RMSNorm's backward: frees the incoming fp32 gradient `g`, the saved normalized tensor and the
/// norm's input `x`; the final norm's (`first`) leaves the residual stream's gradient, returned.
fn norm_bwd(a: &mut CachingAllocator, t: f64, h: f64, g: usize, normed: usize, x: usize, first: bool) -> Option<usize> {
    let n = t * h * FP32;
    let p = a.alloc(n);
    let q = a.alloc(n);
    let r = a.alloc(2.0 * n);
    a.free(r);
    a.free(q);
    a.free(g);
    a.free(normed);
    let s = a.alloc(n);
    let e = a.alloc(n);
    a.free(s);
    a.free(p);
    if !first {
        a.free(e);
    }
    let f: Vec<usize> = (0..4).map(|_| a.alloc(n)).collect();
    a.free(f[2]);
    a.free(f[1]);
    a.free(f[0]);
    a.free(x);
    a.free(f[3]);
    first.then_some(e)
}

/// A linear's backward from the bf16 output gradient `gy` (made contiguous first when
/// `contiguous`): the fp32 weight gradient is pushed on `grads`; returns the fp32 input gradient,
/// or accumulates it into `acc` (freed then).
#[allow(clippy::too_many_arguments)]
fn linear_bwd(
    a: &mut CachingAllocator,
    t: f64,
    i: f64,
    o: f64,
    w: usize,
    x: usize,
    gy: usize,
    grads: &mut Vec<usize>,
    contiguous: bool,
    acc: bool,
) -> Option<usize> {
    let gy = if contiguous {
        let c = a.alloc(t * o * BF16);
        a.free(gy);
        c
    } else {
        gy
    };
    let wg = a.alloc(i * o * BF16);
    let gx = a.alloc(t * i * BF16);
    a.free(gy);
    a.free(w);
    a.free(x);
    let gx32 = a.alloc(t * i * FP32);
    a.free(gx);
    let out = if acc {
        a.free(gx32);
        None
    } else {
        Some(gx32)
    };
    grads.push(a.alloc(i * o * FP32));
    a.free(wg);
    out
}

/// What one layer's forward keeps for its backward (handles).
struct Saved {
    x: usize,
    n1: usize,
    q: (usize, usize),
    k: (usize, usize),
    v: (usize, usize, usize),
    sdpa: [usize; 4],
    /// Qwen3's q and k norms' kept tensors.
    head_norms: Option<((usize, usize), (usize, usize))>,
    wo: usize,
    res1: usize,
    n2: usize,
    gate: (usize, usize, usize),
    act: usize,
    up: (usize, usize, usize),
    mul: usize,
    wd: usize,
}

/// Whether [`hf_train_job_peak`] describes a model: a dense Llama-shaped transformer (GQA
/// attention with RoPE, RMSNorm, gated FFN, no biases), the shapes its traces were taken of, or
/// Qwen3's (the same with per-head q/k norms, from transformers 5.17.0 `modeling_qwen3.py`).
pub fn hf_train_replayable(model: &Model) -> bool {
    model.moe.is_none()
        && model.mla.is_none()
        && model.hybrid.is_none()
        && model.sliding_window.is_none()
        && !model.attention_sinks
        && !model.linear_bias
        && !model.qkv_bias
        && model.norm == crate::model::NormKind::RmsNorm
        && model.ffn_kind == crate::model::FfnKind::Gated
        // Llama's layer (wt-hffamilies' Gemma / OLMo-2 / Phi-3 styles allocate otherwise: more
        // norms, post-norms, fused projections, a soft-capped loss; not traced).
        && model.style == crate::model::LayerStyle::default()
}

/// The allocated and reserved peaks (bytes, everything the caching allocator holds: parameters,
/// gradients, AdamW states, activations, workspaces) of an `hf-eager` training job of `tokens`
/// tokens per step (one micro-batch) on one GPU, replayed over its first three steps.
/// `capacity` is what the allocator may reserve: when a new segment would pass it, PyTorch
/// frees its cached segments that hold no live block and retries (`release_cached_blocks`).
pub fn hf_train_job_peak(model: &Model, tokens: f64, capacity: f64) -> ExpertsPeak {
    let t = tokens.ceil();
    let v = model.vocab as f64;
    let h = model.hidden as f64;
    let f = model.ffn_hidden as f64;
    let hd = model.head_dim as f64;
    let q = model.n_heads as f64 * hd;
    let k = model.n_kv_heads as f64 * hd;
    let mut a = CachingAllocator::with_capacity(capacity);
    // The build, in module order; the layers' linears (in, out) as transformers declares them.
    let shapes = [(h, q), (h, k), (h, k), (q, h), (h, f), (h, f), (f, h)];
    let mut params: Vec<f64> = vec![v * h * FP32];
    for _ in 0..model.n_layers {
        params.extend(shapes.iter().map(|(i, o)| i * o * FP32));
        if model.qk_norm {
            params.extend([hd * FP32, hd * FP32]);
        }
        params.extend([h * FP32, h * FP32]);
    }
    params.push(h * FP32);
    if !model.tied_embeddings {
        params.push(v * h * FP32);
    }
    let n_params = params.len();
    let mut handles: Vec<usize> = params[..if model.tied_embeddings { n_params } else { n_params - 1 }].iter().map(|&b| a.alloc(b)).collect();
    let head = a.alloc(v * h * FP32);
    if model.tied_embeddings {
        a.free(head);
    } else {
        handles.push(head);
    }
    let mut optimizer_ready = false;
    for step in 0..STEPS {
        let mut grads = Vec::new();
        let mut x = a.alloc(t * h * FP32);
        if step == 0 {
            a.alloc(CUBLAS_WORKSPACE);
        }
        // Rotary embedding: freqs, `cat`, cos and sin (fp32, kept by every layer's RoPE backward).
        let freqs = a.alloc(t * hd / 2.0 * FP32);
        let emb = a.alloc(t * hd * FP32);
        let c0 = a.alloc(t * hd * FP32);
        let cos = a.alloc(t * hd * FP32);
        a.free(c0);
        let s0 = a.alloc(t * hd * FP32);
        let sin = a.alloc(t * hd * FP32);
        a.free(s0);
        a.free(freqs);
        a.free(emb);
        let mut saved = Vec::new();
        for _ in 0..model.n_layers {
            let (n1, o1) = norm_fwd(&mut a, t, h);
            // Qwen3 normalizes each projection as it is made (`self.q_norm(self.q_proj(x))`): RoPE
            // then runs on the norm's fp32 output.
            let head_norm = |a: &mut CachingAllocator, x: usize, n: f64| {
                if model.qk_norm {
                    let (kept, out) = head_norm_fwd(a, n);
                    a.free(x);
                    (out, Some(kept))
                } else {
                    (x, None)
                }
            };
            let (wq, xq, qo) = linear_fwd(&mut a, t, h, q, true);
            let (qo, qn) = head_norm(&mut a, qo, t * q);
            let (wk, xk, ko) = linear_fwd(&mut a, t, h, k, true);
            let (ko, kn) = head_norm(&mut a, ko, t * k);
            let (wv, xv, vo) = linear_fwd(&mut a, t, h, k, true);
            let rope_in = if model.qk_norm { FP32 } else { BF16 };
            let qe = rope_fwd(&mut a, t * q, rope_in);
            let ke = rope_fwd(&mut a, t * k, rope_in);
            a.free(qo);
            a.free(ko);
            let kc = a.alloc(t * k * BF16);
            let qc = a.alloc(t * q * BF16);
            let so = a.alloc(t * q * BF16);
            let lse = a.alloc(t * model.n_heads as f64 * FP32);
            let (wo, _, oo) = linear_fwd(&mut a, t, q, h, false);
            a.free(qe);
            a.free(ke);
            a.free(o1);
            let res1 = a.alloc(t * h * FP32);
            a.free(oo);
            let (n2, o2) = norm_fwd(&mut a, t, h);
            let (wg, xg, g) = linear_fwd(&mut a, t, h, f, true);
            let act = a.alloc(t * f * BF16);
            let (wu, xu, u) = linear_fwd(&mut a, t, h, f, true);
            let mul = a.alloc(t * f * BF16);
            let (wd, _, d) = linear_fwd(&mut a, t, f, h, false);
            a.free(o2);
            let res2 = a.alloc(t * h * FP32);
            a.free(d);
            let cast = |c: Option<usize>| c.expect("a linear on an fp32 input casts it");
            saved.push(Saved {
                x,
                n1,
                q: (wq, cast(xq)),
                k: (wk, cast(xk)),
                v: (wv, cast(xv), vo),
                sdpa: [kc, qc, so, lse],
                head_norms: qn.zip(kn),
                wo,
                res1,
                n2,
                gate: (wg, cast(xg), g),
                act,
                up: (wu, cast(xu), u),
                mul,
                wd,
            });
            x = res2;
        }
        let (nf, of) = norm_fwd(&mut a, t, h);
        let (wh, xh, logits) = linear_fwd(&mut a, t, h, v, true);
        let f32_logits = a.alloc(t * v * FP32);
        let log_softmax = a.alloc(t * v * FP32);
        a.free(f32_logits);
        a.free(of);
        // Backward: the loss, the LM head.
        let g1 = a.alloc(t * v * FP32);
        let g2 = a.alloc(t * v * FP32);
        a.free(g1);
        a.free(log_softmax);
        let g3 = a.alloc(t * v * BF16);
        a.free(g2);
        let whg = a.alloc(v * h * BF16);
        if step == 0 {
            a.alloc(CUBLAS_WORKSPACE);
        }
        let gx = a.alloc(t * h * BF16);
        a.free(g3);
        a.free(wh);
        a.free(xh.expect("the final norm's output is fp32"));
        let gx32 = a.alloc(t * h * FP32);
        a.free(gx);
        let head_grad = a.alloc(v * h * FP32);
        a.free(whg);
        let gy = norm_bwd(&mut a, t, h, gx32, nf, x, true).expect("the final norm leaves the residual gradient");
        for s in saved.into_iter().rev() {
            // MLP: down, the gated product, up, the activation, gate, the norm.
            let gd = a.alloc(t * h * BF16);
            let wdg = a.alloc(f * h * BF16);
            let gmul = a.alloc(t * f * BF16);
            a.free(gd);
            a.free(s.wd);
            a.free(s.mul);
            grads.push(a.alloc(f * h * FP32));
            a.free(wdg);
            let gu = a.alloc(t * f * BF16);
            let gact = a.alloc(t * f * BF16);
            a.free(gmul);
            a.free(s.up.2);
            a.free(s.act);
            let gx_mlp = linear_bwd(&mut a, t, h, f, s.up.0, s.up.1, gu, &mut grads, false, false).expect("not accumulated");
            let gg = a.alloc(t * f * BF16);
            a.free(gact);
            a.free(s.gate.2);
            linear_bwd(&mut a, t, h, f, s.gate.0, s.gate.1, gg, &mut grads, false, true);
            norm_bwd(&mut a, t, h, gx_mlp, s.n2, s.res1, false);
            // Attention: o, SDPA, RoPE, v, k, q, the norm.
            let go = a.alloc(t * h * BF16);
            let wog = a.alloc(q * h * BF16);
            let gso = a.alloc(t * q * BF16);
            a.free(go);
            a.free(s.wo);
            grads.push(a.alloc(q * h * FP32));
            a.free(wog);
            let dq = a.alloc(t * q * BF16);
            let dk = a.alloc(t * k * BF16);
            let dv = a.alloc(t * k * BF16);
            let ws = a.alloc(2.0 * t * q * FP32 + t * model.n_heads as f64 * FP32);
            a.free(ws);
            for x in [gso, s.sdpa[0], s.sdpa[1], s.v.2, s.sdpa[3], s.sdpa[2]] {
                a.free(x);
            }
            let dq32 = a.alloc(t * q * FP32);
            a.free(dq);
            let dk32 = a.alloc(t * k * FP32);
            a.free(dk);
            let rope_in = if model.qk_norm { FP32 } else { BF16 };
            let mut gk = rope_bwd(&mut a, dk32, t * k, rope_in);
            let mut gq = rope_bwd(&mut a, dq32, t * q, rope_in);
            if let Some((qn, kn)) = s.head_norms {
                gk = head_norm_bwd(&mut a, gk, t * k, kn);
                gq = head_norm_bwd(&mut a, gq, t * q, qn);
            }
            let gx_attn = linear_bwd(&mut a, t, h, k, s.v.0, s.v.1, dv, &mut grads, false, false).expect("not accumulated");
            linear_bwd(&mut a, t, h, k, s.k.0, s.k.1, gk, &mut grads, true, true);
            linear_bwd(&mut a, t, h, q, s.q.0, s.q.1, gq, &mut grads, true, true);
            norm_bwd(&mut a, t, h, gx_attn, s.n1, s.x, false);
        }
        // The embedding's dense gradient, added into the tied head's (or kept as its own).
        let eg = a.alloc(v * h * FP32);
        a.free(gy);
        if model.tied_embeddings {
            a.free(eg);
        } else {
            grads.push(eg);
        }
        grads.push(head_grad);
        a.free(cos);
        a.free(sin);
        // `del out`: the bf16 logits.
        a.free(logits);
        if !optimizer_ready {
            for &b in &params {
                if b >= 1024.0 * 1024.0 {
                    a.alloc(b);
                    a.alloc(b);
                }
            }
            optimizer_ready = true;
        }
        for g in grads {
            a.free(g);
        }
    }
    ExpertsPeak { allocated: a.peak_allocated as f64, reserved: a.peak_reserved as f64 }
}
