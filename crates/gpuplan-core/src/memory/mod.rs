//! Per-GPU memory plan: weights, gradients, optimizer states, activations (Korthikanti et al. 2022,
//! generalized to GQA, gated FFNs, MoE and flash attention), logits, KV cache, buffers.
//!
//! Activations are counted tensor by tensor (what autograd keeps for backward); for a GPT layer
//! with dropout and unfused attention the sum equals Korthikanti's closed forms, which the tests
//! check. The peak GPU is the one with the most in-flight micro-batches (pipeline stage 0) or the
//! one holding the logits (the last stage), whichever is larger.

use crate::model::{FfnKind, LayerKind, Model, NormKind, NormPlacement};
use crate::parallelism::{ParallelConfig, Schedule};
use crate::units::Bytes;
use crate::workload::{Mode, Recompute, RecomputeModule, Stack, Workload};

mod caching;
mod hf_prefill;
mod hf_train;
pub use caching::CachingAllocator;
pub use hf_prefill::hf_prefill_forward_peak;
pub use hf_train::{hf_train_job_peak, hf_train_replayable};

/// Memory of one GPU by component.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryPlan {
    pub weights: Bytes,
    pub gradients: Bytes,
    pub optimizer: Bytes,
    pub activations: Bytes,
    /// Logits and loss buffers (last stage, training) or one forward's transients (inference).
    pub logits: Bytes,
    pub kv_cache: Bytes,
    /// Transient copies: autocast's bf16 weight cache, FSDP gathered layers, DDP gradient buckets.
    pub transient: Bytes,
    /// CUDA context, cuBLAS workspace and NCCL buffers.
    pub runtime: Bytes,
    /// Caching-allocator fragmentation and rounding.
    pub fragmentation: Bytes,
    pub capacity: Bytes,
    /// Which pipeline stage the plan describes (the peak one).
    pub stage: u32,
}

impl MemoryPlan {
    pub fn components(&self) -> [(&'static str, Bytes); 9] {
        [
            ("weights", self.weights),
            ("gradients", self.gradients),
            ("optimizer", self.optimizer),
            ("activations", self.activations),
            ("logits", self.logits),
            ("kv_cache", self.kv_cache),
            ("transient", self.transient),
            ("runtime", self.runtime),
            ("fragmentation", self.fragmentation),
        ]
    }
    pub fn total(&self) -> Bytes {
        self.components().iter().map(|(_, b)| *b).sum()
    }
    pub fn fits(&self) -> bool {
        self.total() <= self.capacity
    }
}

/// PyTorch's caching allocator (c10/cuda/CUDACachingAllocator.cpp, PyTorch 2.11): a request of at
/// least `kMinLargeAlloc` (10 MiB) gets a segment of its size rounded up to `kRoundLarge` (2 MiB)
/// and is served from the cache only by a free block at least as large; smaller requests share
/// 2 MiB and 20 MiB buffers.
const ALLOC_MIN_LARGE: f64 = 10.0 * 1024.0 * 1024.0;
const ALLOC_ROUND_LARGE: f64 = 2.0 * 1024.0 * 1024.0;

/// Whole sets of an `hf-*` decode's KV cache (every layer's keys and values) that PyTorch's caching
/// allocator holds but cannot reuse after `tokens` tokens per sequence, for a per-layer key (or
/// value) tensor of `tensor` bytes at the start growing by `token` bytes per token.
/// `DynamicCache.update` (transformers 5.17) replaces each layer's keys and values by a
/// `torch.cat` one token longer, allocated before the old tensor is freed. The prefill's tensors
/// are sized exactly; while the grown tensor still fits in its 2 MiB-rounded segment, the segments
/// freed by one layer serve the next (one spare); each time it outgrows the segment, every layer
/// moves to new segments and the old set stays cached, of no use to any later, larger request. So
/// the sets stranded are the 2 MiB boundaries the tensor crosses (a prefill's exact size on a
/// boundary is outgrown at the first token). Tensors under 10 MiB live in shared buffers: none.
/// Measured on the lent H200 (calibration/runs/hf/raw/decode-breakdown-h200-2026-11-24/:
/// `max_memory_reserved` less the weights over the live cache, 25 steps: 2.09-2.11 sets at 256 MiB
/// and 1 GiB tensors, 2.03-2.08 at 112-448 MiB, 1.73-1.78 at 16-32 MiB) and by the run set's NVML
/// peaks (calibration/runs/hf/FIT.md).
pub fn hf_stranded_cache_sets(tensor: f64, token: f64, tokens: u64) -> f64 {
    if tensor < ALLOC_MIN_LARGE || tokens == 0 {
        return 0.0;
    }
    let end = tensor + token * tokens as f64;
    let crossed = (end / ALLOC_ROUND_LARGE).ceil() - (tensor / ALLOC_ROUND_LARGE).ceil();
    crossed.clamp(0.0, tokens as f64)
}

/// PyTorch's caching allocator serves requests of up to 1 MiB from its small pool (`kSmallSize`,
/// c10/cuda/CUDACachingAllocator.cpp); larger ones come from the large pool's free blocks first.
const ALLOC_SMALL_MAX: f64 = 1024.0 * 1024.0;

/// Bytes of a tied-embedding model's LM head block that PyTorch's caching allocator still holds,
/// unused, in an `hf-*` decode: `AutoModelForCausalLM.from_config` built on the GPU (the HF run
/// set's harness, scenarios/workloads/hf_train.py) allocates `lm_head.weight` as a tensor of its
/// own and then ties it to the embedding (`tie_weights` in `post_init`), freeing it; the freed
/// block (`head` bytes) stays reserved, and NVML counts it. A decode's later requests reuse it
/// only where they come from the large pool (`large_kv`: the KV cache's bytes when each layer's
/// tensor is over 1 MiB; the step's other buffers are small). Measured: `max_memory_reserved` less
/// `max_memory_allocated` of the H100 decode runs of calibration/runs/hf/postfit-6.jsonl, 0.509 GiB
/// for Llama-3.2-1B at batch 1 (head 0.489 GiB, hf-116, -120, -124), 0.653 GiB for Llama-3.2-3B
/// (head 0.734 GiB, KV 0.11 GiB, hf-117), 0.477 GiB for Qwen3-1.7B (head 0.580 GiB, KV 0.11 GiB,
/// hf-126); 0.066 GiB for TinyLlama (untied, hf-122). Nothing fitted.
pub fn hf_cached_tied_head(head: f64, large_kv: f64) -> f64 {
    (head - large_kv).max(0.0)
}

/// Bytes each stack keeps per parameter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StackMemory {
    pub param: f64,
    pub grad: f64,
    pub optimizer: f64,
    /// bf16 copies of fp32 weights that autocast caches during forward/backward.
    pub autocast_cache: f64,
    /// Caching-allocator overhead as a fraction of everything else.
    pub fragmentation: f64,
}

/// The allocated and reserved peaks of one forward of transformers' default MoE experts path
/// (`integrations/moe.py` `grouped_mm_experts_forward`, transformers 5.17.0, read from the wheel's
/// source) under `torch.inference_mode`, beyond its input: the router's outputs it is handed
/// (`router_logits` kept alive by the caller's `_`, the top-k indices and weights), then its
/// locals in the order the function makes and drops them: the sort (`expert_ids_g`, `perm`), the
/// gathered rows `hidden_states[perm // k]`, the sorted weights, `histc`'s int input and counts,
/// the sentinel mask; the gate/up grouped GEMM's output and its out-of-place `masked_fill` (the
/// first freed on rebinding), the activation of the gate half and its product with the up half
/// (`_default_apply_gate`), the down GEMM's output and its `masked_fill`, the routing-weight
/// multiply (in fp32 when the weights are, [`Router::weights_fp32`](crate::model::Router)), the
/// inverse permutation, the gather back to token order, and the top-k sum (cast to bf16 when
/// fp32). Every local stays allocated until the function returns, so the peak holds the
/// gathered rows, the masked down output and the weighted rows twice: 8 B per routed row and
/// hidden unit in bf16, 12 B in fp32. The caching allocator's replay ([`CachingAllocator`])
/// gives what it reserves on top: the gate/up-sized blocks freed midway cannot serve the
/// later, hidden-sized requests.
pub fn hf_grouped_experts_peak(tokens: f64, hidden: f64, experts: u32, top_k: u32, expert_ffn: f64, weights_fp32: bool) -> ExpertsPeak {
    let t = tokens.ceil();
    let e = experts as f64;
    let r = if weights_fp32 { 4.0 } else { 2.0 };
    let mut a = CachingAllocator::new();
    let _logits = a.alloc(t * e * r);
    let _indices = a.alloc(t * top_k as f64 * 8.0);
    let _weights = a.alloc(t * top_k as f64 * r);
    let _out = grouped_experts_replay(&mut a, t, hidden, experts, top_k, expert_ffn, weights_fp32);
    ExpertsPeak { allocated: a.peak_allocated as f64, reserved: a.peak_reserved as f64 }
}

/// [`hf_grouped_experts_peak`]'s sequence from the sort on, on a shared allocator `a` (the
/// router's outputs already allocated by the caller); returns the handle of the experts' output,
/// the other locals freed as the function returns.
pub(crate) fn grouped_experts_replay(a: &mut CachingAllocator, t: f64, hidden: f64, experts: u32, top_k: u32, expert_ffn: f64, weights_fp32: bool) -> usize {
    let s = t * top_k as f64;
    let e = experts as f64;
    let r = if weights_fp32 { 4.0 } else { 2.0 };
    let ids = a.alloc(s * 8.0);
    let perm = a.alloc(s * 8.0);
    let div = a.alloc(s * 8.0);
    let rows = a.alloc(s * hidden * 2.0);
    a.free(div);
    let weights_g = a.alloc(s * r);
    let histc_in = a.alloc(s * 4.0);
    let counts = a.alloc(e * 4.0);
    let offsets = a.alloc(e * 4.0);
    let sentinel = a.alloc(s);
    let gate_up = a.alloc(s * 2.0 * expert_ffn * 2.0);
    let gate_up_masked = a.alloc(s * 2.0 * expert_ffn * 2.0);
    a.free(gate_up);
    let act = a.alloc(s * expert_ffn * 2.0);
    let gated = a.alloc(s * expert_ffn * 2.0);
    a.free(act);
    a.free(gate_up_masked);
    let down = a.alloc(s * hidden * 2.0);
    a.free(gated);
    let down_masked = a.alloc(s * hidden * 2.0);
    a.free(down);
    let weighted = a.alloc(s * hidden * r);
    let inv_perm = a.alloc(s * 8.0);
    let arange = a.alloc(s * 8.0);
    a.free(arange);
    let restored = a.alloc(s * hidden * r);
    a.free(weighted);
    let summed = a.alloc(t * hidden * r);
    let out = if weights_fp32 {
        let out = a.alloc(t * hidden * 2.0);
        a.free(summed);
        out
    } else {
        summed
    };
    for h in [ids, perm, rows, weights_g, histc_in, counts, offsets, sentinel, down_masked, inv_perm, restored] {
        a.free(h);
    }
    out
}

/// [`hf_grouped_experts_peak`]'s result, bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExpertsPeak {
    pub allocated: f64,
    pub reserved: f64,
}

/// Per-stack bytes per parameter. Megatron (Korthikanti et al. 2022 sec. 2; Megatron-LM
/// distributed optimizer docs): bf16 params 2, fp32 main grads 4, fp32 master + Adam m, v 12.
/// PyTorch AMP (torch.amp docs): fp32 params 4, fp32 grads 4, Adam m, v 8, and autocast's cached
/// bf16 weight casts 2 during forward/backward. The fragmentation fractions are engineering
/// estimates until fitted on measured runs (calibration/runs).
pub fn stack_memory(stack: Stack) -> StackMemory {
    match stack {
        Stack::Megatron => StackMemory { param: 2.0, grad: 4.0, optimizer: 12.0, autocast_cache: 0.0, fragmentation: 0.05 },
        Stack::TorchEager | Stack::TorchCompile | Stack::HfEager | Stack::HfCompile => {
            StackMemory { param: 4.0, grad: 4.0, optimizer: 8.0, autocast_cache: 2.0, fragmentation: 0.05 }
        }
        // Inference engines: weights in their compute dtype (the inference plan), no training
        // state; KV pools are preallocated blocks, so no fragmentation on top of them.
        Stack::Trtllm | Stack::Vllm | Stack::Sglang => StackMemory { param: 2.0, grad: 0.0, optimizer: 0.0, autocast_cache: 0.0, fragmentation: 0.0 },
    }
}

/// What an `hf-*` job holds outside PyTorch's caching allocator (CUDA context, the CUDA libraries'
/// handles and loaded modules): measured, the median of NVML's peak less
/// `torch.cuda.max_memory_reserved` over the 30 fit-split runs of calibration/runs/hf/hf.jsonl
/// (PyTorch 2.11, CUDA 13.0, H100 and H200; 0.749 GiB, the test split's median the same).
pub const HF_CONTEXT_GIB: f64 = 0.749;

/// CUDA context + cuBLAS workspace per GPU (about 0.5 GiB on Hopper with CUDA 12/13; an estimate
/// until measured), plus NCCL buffers when the GPU talks to others.
fn runtime_bytes(pc: &ParallelConfig) -> Bytes {
    let context = Bytes::mib(512.0);
    let nccl = if pc.n_gpus() > 1 { Bytes::mib(256.0) } else { Bytes::ZERO };
    context + nccl
}

/// Activation bytes one transformer layer keeps for backward, for one micro-batch on one rank,
/// with no recomputation.
pub fn layer_activation_bytes(model: &Model, pc: &ParallelConfig, w: &Workload, moe_layer: bool) -> f64 {
    kind_activation_bytes(model, pc, w, if moe_layer { LayerKind::Moe } else { LayerKind::Dense })
}

/// Activation bytes one layer of `kind` keeps for backward (one micro-batch, one rank, no
/// recomputation): a transformer layer's attention and FFN halves, or one hybrid block. A
/// Mamba-2 block under Megatron (`mamba_split_conv1d_scan_combined`, which saves only its input
/// `zxbcdt` and the scan's ungated output `out_x` and recomputes the rest): the norm's input, the
/// norm's output (`in_proj`'s input), `zxbcdt` (T (2 d + 2 G N + H)/tp), `out_x` (T d/tp), the gated
/// norm's input and its output (`out_proj`'s input), all bf16, and the gated norm's fp32 1/rms
/// per token and group.
pub fn kind_activation_bytes(model: &Model, pc: &ParallelConfig, w: &Workload, kind: LayerKind) -> f64 {
    let moe_layer = kind.has_moe();
    let t = pc.tp as f64;
    let sp = pc.sp && pc.tp > 1;
    let tokens = (w.sequences() * w.q_len()) as f64 / pc.cp as f64;
    let h = model.hidden as f64;
    let sbh = tokens * h;
    // Tensors of the full hidden width: sharded by TP only under SP.
    let rep = if sp { sbh / t } else { sbh };
    let eager = w.stack.eager();
    let hf_compile = hf_compile_train(w);
    let norm_in = match (model.norm, eager) {
        // HF-style RMSNorm in eager autocast keeps its fp32 input (4), the fp32 normalized
        // x * rsqrt for the weight's product (4) and the bf16 copy the next linear saves (2).
        // Measured (scripts/device_memtrace_tp.sh, 1B at TP 1/2/4 on 4x H200): 26.8 B per token
        // and hidden unit per layer stay whole under TP without SP; 16 were counted before the
        // normalized tensor was (6 per norm).
        (NormKind::RmsNorm, true) => 10.0 * rep,
        // `hf-compile` training: the residual stream is fp32 (fp32 parameters under autocast: the
        // embedding's output and every residual add are fp32), and Inductor's partitioner saves
        // each norm's fp32 input (and its fp32 1/rms per token) and rebuilds the normalized
        // tensor in backward. Measured (calibration/runs/raw/float8-h100-2026-11-25/saved.csv,
        // transformers Llama, 2 layers less 1): two fp32 [tokens, hidden] tensors per layer.
        _ if hf_compile => 4.0 * rep,
        _ => 2.0 * rep,
    };
    let mask = if w.dropout { rep } else { 0.0 };
    // Where the family puts its norms (`model::NormPlacement`): OLMo-2 has none before attention
    // or the MLP (the linears save autocast's bf16 copy of the stream, `lin_in`, as they do a
    // norm's output); Gemma and OLMo-2 norm each branch's bf16 output, which keeps, in eager
    // autocast, the fp32 copy `pow` and the product read and the fp32 normalized tensor the weight's
    // product reads (8 B per element; `Gemma2RMSNorm.forward`, `Olmo2RMSNorm.forward`), and under
    // compile its bf16 input (the 1/rms per token aside).
    let (norm_in, branch_norm) = match model.style.norm_placement {
        NormPlacement::Pre => (norm_in, 0.0),
        NormPlacement::PrePost => (norm_in, if eager { 8.0 } else { 2.0 } * rep),
        NormPlacement::Post => (0.0, if eager { 8.0 } else { 2.0 } * rep),
    };

    // Attention block.
    let heads = model.n_heads as f64 / t;
    let (qk, v_dim, kv_heads) = match &model.mla {
        Some(mla) => ((mla.qk_nope_head_dim + mla.qk_rope_head_dim) as f64, mla.v_head_dim as f64, heads),
        // `hf-compile`: transformers repeats k and v to all query heads before SDPA
        // (`repeat_kv`) whenever an attention mask is passed (transformers 5.17.0
        // `integrations/sdpa_attention.py` l. 27-36 `use_gqa_in_sdpa`, l. 98-100), and under
        // torch.compile the causal mask is always materialized (`masking_utils.py` l. 256-261:
        // `_ignore_causal_mask_sdpa` returns False while tracing): the repeated k and v are what
        // SDPA's backward reads, so they are saved (measured: saved.csv, 32 heads of k and v for
        // the 1B's 8). Eager passes no mask and uses SDPA's native GQA.
        None if hf_compile => (model.head_dim as f64, model.head_dim as f64, heads),
        None => (model.head_dim as f64, model.head_dim as f64, (model.n_kv_heads as f64 / t).max(1.0)),
    };
    let q = 2.0 * tokens * heads * qk;
    let k = 2.0 * tokens * kv_heads * qk;
    let v = 2.0 * tokens * kv_heads * v_dim;
    let out = 2.0 * tokens * heads * v_dim; // attention output = out-proj input
                                            // What a linear layer keeps of its input for the weight gradient: the bf16 tensor, or under
                                            // Megatron + Transformer Engine FP8/FP4 training the quantized copy the wgrad GEMM reads
                                            // (TE's `Linear` and `LayerNormLinear` save the cast input, column-wise usage only, not the
                                            // bf16 one: transformer_engine/pytorch/module/linear.py, layernorm_linear.py, TE 2.x). The
                                            // attention output is kept twice then: in bf16 by the fused attention (its backward reads
                                            // it) and quantized by the output projection.
    let lin_in = saved_linear_input_bytes(w);
    let out_copy = if lin_in < 2.0 { lin_in * tokens * heads * v_dim } else { 0.0 };
    let mut attn = norm_in + branch_norm + lin_in * rep + q + k + v + out + out_copy + mask;
    if model
        .sliding_window
        .as_ref()
        .is_some_and(|sw| w.stack == Stack::HfEager && model.mla.is_none() && !model.attention_sinks && w.context_len() >= sw.window)
    {
        // transformers' sliding layers past their window under SDPA (`workload`'s `Builder::attention`):
        // a mask is passed, so k and v are repeated to every query head first (`repeat_kv`) and
        // SDPA's backward keeps the repeated ones, as `hf-compile`'s masked layers do above.
        let extra_heads = heads - kv_heads;
        attn += model.sliding_share() * 2.0 * tokens * extra_heads * (qk + v_dim);
    }
    if model.qk_norm {
        // Qwen3's per-head RMSNorm on q and k keeps, like the hidden norms, its fp32 input and
        // normalized tensor in eager (8 per element beyond the bf16 q and k), its input when fused.
        attn += (q + k) / 2.0 * if eager { 8.0 } else { 2.0 };
    }
    if let Some(mla) = &model.mla {
        // Low-rank latents are inputs of the up-projections.
        attn += 2.0 * tokens * (mla.q_lora_rank + mla.kv_lora_rank) as f64;
    }
    let flash = w.flash_attention;
    if flash {
        attn += 4.0 * tokens * heads; // log-sum-exp, fp32
    } else if w.recompute != Recompute::Selective {
        // Softmax output (2), dropout mask (1) and dropout output (2) per score: 5 a s^2 b / t.
        let scores = (w.sequences() as f64) * heads * (w.q_len() as f64 / pc.cp as f64) * w.context_len() as f64;
        attn += if w.dropout { 5.0 } else { 2.0 } * scores;
    }

    // Feed-forward block.
    // An MoE layer's norm output feeds the (bf16) router and the dispatch, not a TE linear.
    let ffn_in = norm_in + branch_norm + if moe_layer { 2.0 } else { lin_in } * rep + mask;
    if kind == LayerKind::Mamba {
        let mb = &model.hybrid.as_ref().expect("mamba layer of a model without a hybrid pattern").mamba;
        let d = mb.d_inner() as f64 / t;
        let groups = (mb.n_groups as f64 / t).max(1.0);
        return norm_in + 2.0 * rep + mask + 2.0 * tokens * (mb.in_proj_width() as f64 / t) + 3.0 * 2.0 * tokens * d + 4.0 * tokens * groups;
    }
    let ffn = if moe_layer {
        let moe = model.moe.as_ref().expect("moe layer");
        let local_tokens = if pc.tp > 1 { tokens / t } else { tokens };
        let routed = local_tokens * moe.top_k as f64 * w.expert_load();
        let f = moe.expert_ffn_hidden as f64 / pc.etp as f64;
        // The experts' GEMM inputs (the permuted hidden states, the activation's output) are kept
        // as the GEMMs' quantized copies in Megatron's fp8/fp4 training (`saved_linear_input_bytes`).
        let q = saved_linear_input_bytes(w);
        let per_token = q * h + (gated_or_plain(model.ffn_kind, eager) - 2.0 + q) * f + 2.0 * h;
        let shared = if moe.n_shared_experts > 0 {
            let fs = (moe.shared_expert_ffn_hidden * moe.n_shared_experts as u64) as f64 / t;
            tokens * gated_or_plain(model.ffn_kind, eager) * fs
        } else {
            0.0
        };
        ffn_in + routed * per_token + shared
    } else {
        let f = model.ffn_hidden as f64 / t;
        // The down projection's input (the activation's output, 2 of `gated_or_plain`) at the
        // saved linear input's size.
        ffn_in + tokens * (gated_or_plain(model.ffn_kind, eager) - 2.0 + lin_in) * f
    };
    // torchao's float8 linears under torch.compile save no input at all: `matmul_with_hp_or_float8_args`
    // saves the high-precision input and weight (torchao 0.18.0 `float8/float8_linear.py`,
    // `ctx.save_for_backward(input_hp, weight_hp_t)`), and AOTAutograd's min-cut partitioner
    // rebuilds the bf16 input and its fp8 casts in backward from tensors the layer keeps anyway
    // (the norm's fp32 input and rsqrt; the gate and up outputs) rather than save them. Measured
    // (calibration/runs/raw/float8-h100-2026-11-25/saved.csv, transformers Llama, 1B shapes, H100):
    // per layer the bf16 run saves the two norm outputs (bf16, 2 B) and the down projection's
    // input (2 B x ffn); the tensorwise and rowwise runs save neither, and no fp8 tensor. The
    // attention output stays (SDPA's backward reads it).
    let fp8_saved = if torchao_fp8(w) {
        let dense_ffn = if moe_layer { 0.0 } else { 2.0 * tokens * model.ffn_hidden as f64 / t };
        2.0 * lin_in * rep + dense_ffn
    } else {
        0.0
    };
    // Selective recompute of Megatron-Core's modules (`workload::RecomputeModule`): what each frees.
    let (attn, ffn) = if w.recompute == Recompute::Selective && w.stack == Stack::Megatron {
        let has = |m: RecomputeModule| w.megatron.modules().contains(&m);
        let mut attn = attn;
        let mut ffn = ffn;
        if has(RecomputeModule::MlaUpProj) && model.mla.is_some() {
            // Output-discarding: q, k and v (the up projections' and RoPE's outputs) are freed
            // once the attention has read them and rebuilt from the latents before its backward.
            attn -= q + k + v;
        }
        if has(RecomputeModule::Layernorm) {
            // Output-discarding: the norms' outputs (the attention's first linear input; the
            // FFN's: a TE linear's saved input, or an MoE layer's router and dispatch input).
            attn -= lin_in * rep;
            ffn -= if moe_layer { 2.0 } else { lin_in } * rep;
        }
        if moe_layer {
            let moe = model.moe.as_ref().expect("moe layer");
            let local_tokens = if pc.tp > 1 { tokens / t } else { tokens };
            let routed = local_tokens * moe.top_k as f64 * w.routing_imbalance;
            let f = moe.expert_ffn_hidden as f64 / pc.etp as f64;
            let shared = if moe.n_shared_experts > 0 {
                tokens * gated_or_plain(model.ffn_kind, eager) * (moe.shared_expert_ffn_hidden * moe.n_shared_experts as u64) as f64 / t
            } else {
                0.0
            };
            if has(RecomputeModule::Moe) {
                // Ordinary checkpointing from the norm's output: the layer keeps its input only.
                ffn = ffn_in;
            } else {
                if has(RecomputeModule::MoeAct) {
                    // The activation's output (the down projection's saved input) per routed token.
                    ffn -= routed * saved_linear_input_bytes(w) * f;
                }
                if has(RecomputeModule::SharedExperts) {
                    ffn -= shared;
                }
            }
        } else if has(RecomputeModule::Mlp) && kind == LayerKind::Dense {
            // Ordinary checkpointing of the MLP with its TE-fused norm: its input stays (a
            // transformer's dense layers; hybrid MLP blocks are not priced so, in memory or time).
            ffn = norm_in + mask;
        }
        (attn, ffn)
    } else {
        (attn, ffn)
    };
    if w.recompute == Recompute::SelectiveOp && kind == LayerKind::Dense {
        return selective_op_layer_bytes(model, pc, w, tokens, rep);
    }
    match kind {
        LayerKind::Attention => attn,
        LayerKind::Mlp | LayerKind::MoeMlp => ffn,
        _ => attn + ffn - fp8_saved,
    }
}

/// What a dense transformer layer keeps between its forward and its backward under torchtitan's
/// per-op selective checkpointing ([`Recompute::SelectiveOp`]), one micro-batch on one rank: the
/// block's input (the checkpoint's argument, sequence-sharded under SP) and the outputs of
/// the ops the policy saves (`workload::selective_op_saved`): at bf16 the odd `aten.mm`s of the
/// block in torchtitan's order wq, wk, wv, wo, w1, w3, w2 (q, v, the gate and, for a gated FFN,
/// the down projection's output, [T, hidden] on every TP rank before its reduce-scatter), flash
/// attention's output and its fp32 log-sum-exp, and under TP with SP the reduce-scatters'
/// outputs. Eager PyTorch's `_CachingTorchDispatchMode` caches every saved op's output whether
/// or not the backward reads it; under `torch.compile` the partitioner keeps only those the
/// backward reads, so the down projection's output and the FFN's reduce-scatter (the block's
/// output, the next block's input) are not kept twice. torchao's float8 linears save their bf16
/// outputs alike (their `aten.mm` is what the policy sees); the amax scalars (`aten.max`) are
/// negligible.
fn selective_op_layer_bytes(model: &Model, pc: &ParallelConfig, w: &Workload, tokens: f64, rep: f64) -> f64 {
    let t = pc.tp as f64;
    let sp = pc.sp && pc.tp > 1;
    let heads = model.n_heads as f64 / t;
    let kv_heads = (model.n_kv_heads as f64 / t).max(1.0);
    let hd = model.head_dim as f64;
    let f = model.ffn_hidden as f64 / t;
    let eager = w.stack.eager();
    // The input (fp32 on the hf stacks' residual stream under autocast, bf16 otherwise); q (1st
    // mm), v (3rd), the FFN's first linear (5th: w1, the gate; or the plain FFN's up).
    let input = if w.stack.hf() { 4.0 } else { 2.0 };
    let mut bytes = input * rep + 2.0 * tokens * (heads * hd + kv_heads * hd + f);
    // w2 is the 7th mm of a gated block (the 6th, recomputed, of a plain one).
    if eager && model.ffn_kind == FfnKind::Gated {
        bytes += 2.0 * tokens * model.hidden as f64;
    }
    if w.flash_attention {
        bytes += 2.0 * tokens * heads * hd + 4.0 * tokens * heads;
    }
    if sp {
        bytes += 2.0 * rep * if eager { 2.0 } else { 1.0 };
    }
    bytes
}

/// Bytes per parameter of a weight Transformer Engine keeps quantized under Megatron's
/// `fp8_param_gather` (`fp8_model_init`; `fp4_param_gather` under fp4), scales included: per-tensor
/// FP8 (tensorwise, delayed) one copy of 1 B (Float8Tensor in a uint8 buffer,
/// megatron/core/distributed/distributed_data_parallel.py); MXFP8 and NVFP4 a row-wise and a
/// column-wise copy (the forward and the data-gradient GEMMs read the weight along different
/// axes, and block scales follow the reduction axis): 2 x (1 + 1/32) and 2 x (0.5 + 1/16);
/// blockwise 2 x 1 B (its 128 x 128 weight blocks' fp32 scales, 4 B per 16384, neglected). The
/// two-copy layouts are Transformer Engine's MXFP8Tensor / NVFP4Tensor as remembered, not re-read
/// here; so is Hopper's cached FP8 transpose of a per-tensor weight, not counted. `None` where
/// the weights are not quantized so (bf16 training, or another stack).
pub fn quantized_param_bytes(w: &Workload) -> Option<f64> {
    use crate::workload::Fp8Recipe;
    if w.stack != Stack::Megatron || w.mode != Mode::Train || !w.megatron.fp8_param_gather {
        return None;
    }
    match (w.precision, w.fp8_recipe) {
        (crate::hardware::Dtype::Fp4, _) => Some(2.0 * (0.5 + 1.0 / 16.0)),
        (crate::hardware::Dtype::Fp8, Fp8Recipe::Mxfp8) => Some(2.0 * (1.0 + 1.0 / 32.0)),
        (crate::hardware::Dtype::Fp8, Fp8Recipe::Blockwise) => Some(2.0),
        (crate::hardware::Dtype::Fp8, _) => Some(1.0),
        _ => None,
    }
}

/// Bytes per element a linear layer keeps of its input for backward: 2 (bf16), or under the
/// `megatron` stack's FP8/FP4 training the quantized column-wise copy Transformer Engine saves
/// (1 B, plus the recipe's block scales: MXFP8 1 B per 32, blockwise 4 B per 128; NVFP4 0.5 B
/// plus 1 B per 16).
pub fn saved_linear_input_bytes(w: &Workload) -> f64 {
    if w.stack != Stack::Megatron || w.mode != Mode::Train {
        return 2.0;
    }
    crate::workload::quantized_elem_bytes(w.precision, w.fp8_recipe).unwrap_or(2.0)
}

/// `hf-compile` training (the HF loop with the whole model under `torch.compile`, fp32
/// parameters under bf16 autocast).
fn hf_compile_train(w: &Workload) -> bool {
    w.stack == Stack::HfCompile && w.mode == Mode::Train
}

/// torchao float8 training under `torch.compile` (see `workload::Builder::quantize_input`).
fn torchao_fp8(w: &Workload) -> bool {
    w.stack.torch() && w.stack.fused() && w.precision == crate::hardware::Dtype::Fp8 && w.mode == Mode::Train
}

/// Bytes per token per FFN column kept by the activation function and the down projection.
fn gated_or_plain(kind: FfnKind, eager: bool) -> f64 {
    match (kind, eager) {
        // GELU input and output: 2 + 2 (Korthikanti's 8sbh + 8sbh for f = 4h).
        (FfnKind::Plain, _) => 4.0,
        // gate, up and their product (fused SwiGLU); eager keeps SiLU(gate) too.
        (FfnKind::Gated, false) => 6.0,
        (FfnKind::Gated, true) => 8.0,
    }
}

/// Micro-batches whose activations stage 0 holds at the peak of the schedule. `torch`: PyTorch's
/// pipelining, whose interleaved warm-up is capped at every chunk of every micro-batch (below).
fn in_flight(pc: &ParallelConfig, n_micro: u64, torch: bool) -> f64 {
    let p = pc.pp as f64;
    match pc.schedule {
        Schedule::Gpipe => n_micro as f64,
        Schedule::OneFOneB | Schedule::Interleaved => {
            let base = p.min(n_micro as f64);
            if pc.vp > 1 {
                // The warm-up runs at most every micro-batch's every chunk (PyTorch's
                // `ScheduleInterleaved1F1B` caps `warmup_ops` at `n_microbatches * n_local_stages`,
                // torch 2.5.1 and 2.6.0 pipelining/schedules.py, re-read): with m = pp every chunk
                // of every micro-batch is in flight at once, m stage-micro-batches. (Megatron-Core
                // caps its warm-up at the total too, from memory; its path is left as it was
                // calibrated against the Megatron-Bridge rows.)
                let f = base * (1.0 + (p - 1.0) / (p * pc.vp as f64));
                if torch {
                    f.min(n_micro as f64)
                } else {
                    f
                }
            } else {
                base
            }
        }
    }
}

/// Micro-batches whose activations middle stage `stage` holds at its peak: its warm-up forwards
/// plus one (Megatron-Core's schedules: `pp - stage - 1` warm-up micro-batches, interleaved
/// `(pp - stage - 1) * 2 + (vp - 1) * pp` model chunks of 1/vp of its layers each). Planned only
/// for a middle stage that holds more layers than the first (an uneven split).
fn in_flight_middle(pc: &ParallelConfig, n_micro: u64, stage: u32) -> f64 {
    let (p, d, v) = (pc.pp as f64, stage as f64, pc.vp.max(1) as f64);
    match pc.schedule {
        Schedule::Gpipe => n_micro as f64,
        Schedule::OneFOneB | Schedule::Interleaved if pc.vp > 1 => (((p - d - 1.0) * 2.0 + (v - 1.0) * p + 1.0) / v).min(n_micro as f64),
        Schedule::OneFOneB | Schedule::Interleaved => (p - d).min(n_micro as f64),
    }
}

/// What PyTorch's pipelining (`torch.distributed.pipelining`, the torch stacks' pipeline
/// parallelism, torchtitan's) holds per micro-batch on one rank beyond the activations in flight:
/// (stage inputs, outputs and output gradients, bytes; the last stage's retained logits, bytes).
///
/// Each local stage of a rank (one, or `vp` under a multi-stage schedule) allocates, for every
/// micro-batch of the step, a receive buffer for its input (all but the first stage,
/// `PipelineStage._prepare_forward_infra`) and one for its output's gradient (all but the last,
/// `_prepare_backward_infra` via `_create_grad_recv_info`), and keeps every micro-batch's output
/// until the next step starts (`forward_one_chunk` appends it to `output_chunks` for
/// `_merge_outputs`; `clear_runtime_states` empties it): torch 2.5.1 and 2.6.0
/// `torch/distributed/pipelining/stage.py`, re-read. A stage's input and output are the residual
/// stream between blocks, `[micro-batch, seq / tp, hidden]` under sequence parallelism
/// (`layer_input`); the last stage's output is the LM head's logits in the compute dtype (bf16;
/// vocabulary-sharded under TP's loss parallelism), one of which is the loss's own (counted with
/// the logits). A micro-batch in flight saves its first layer's input, which is the receive buffer
/// itself: those are not counted twice. Megatron-Core receives into fresh tensors each
/// micro-batch and keeps no outputs: zero for it.
#[allow(clippy::too_many_arguments)]
fn torch_pipelining_buffers(
    model: &Model,
    pc: &ParallelConfig,
    w: &Workload,
    stage: u32,
    n_micro: u64,
    flight: f64,
    layer_input: f64,
    tokens: f64,
) -> (f64, f64) {
    if !w.stack.torch() || pc.pp < 2 || w.mode != Mode::Train {
        return (0.0, 0.0);
    }
    let (p, v, m) = (pc.pp, pc.vp.max(1), n_micro as f64);
    let last = p * v - 1;
    let (mut io, mut logits) = (0.0, 0.0);
    for chunk in 0..v {
        let j = chunk * p + stage;
        if j > 0 {
            // Input receive buffers, less those a micro-batch in flight saves as its first input.
            io += (m - flight.min(m)) * layer_input;
        }
        if j < last {
            // Output-gradient receive buffers and the retained outputs.
            io += 2.0 * m * layer_input;
        } else {
            logits += (m - 1.0) * tokens * model.vocab as f64 / pc.tp as f64 * 2.0;
        }
    }
    (io, logits)
}

/// Parameters one rank of pipeline stage `stage` holds, split into (dense, expert) parts, with
/// `mtp_layers` multi-token-prediction modules trained: Megatron-Core builds them on the last
/// pipeline stage beside the loss, each with its experts sharded like the decoder's, and that
/// stage keeps a copy of the word embeddings for them (shared with the first stage's, as tied
/// embeddings are).
pub fn params_on_rank(model: &Model, pc: &ParallelConfig, stage: u32, mtp_layers: u32) -> (f64, f64) {
    let p = model.params();
    let t = pc.tp as f64;
    let counts = crate::parallelism::stage_kind_counts(&model.layer_kinds(), pc, stage);
    // Each kind of layer's parameters on this stage (`Model::layer_params`): TP-sharded, whole on
    // every TP rank (norms, router), routed experts over EP x ETP.
    let (mut dense, mut experts) = (0.0, 0.0);
    for kind in LayerKind::ALL {
        let n = counts[kind.index()] as f64;
        if n > 0.0 {
            let (sharded, whole, routed) = model.layer_params(kind);
            dense += n * (sharded / t + whole);
            experts += n * routed / (pc.ep * pc.etp) as f64;
        }
    }
    if stage == pc.pp - 1 {
        // The final norm, before the LM head.
        dense += match model.norm {
            crate::model::NormKind::RmsNorm => model.hidden as f64,
            crate::model::NormKind::LayerNorm => 2.0 * model.hidden as f64,
        };
    }
    let embedding = p.embedding / t;
    dense += embedding_and_head_on_rank(model, pc, stage);
    if stage == pc.pp - 1 && mtp_layers > 0 {
        let n = mtp_layers as f64;
        let module = model.mtp_params_per_layer();
        let routed = if model.n_moe_layers() > 0 { p.experts / model.n_moe_layers() as f64 } else { 0.0 };
        // The module's routed experts split over ep x etp; the rest (attention, norms,
        // projection, shared experts, router) over TP as the decoder's layers are.
        experts += n * routed / (pc.ep * pc.etp) as f64;
        dense += n * (module - routed) / t;
        if pc.pp > 1 {
            dense += embedding;
        }
    }
    (dense, experts)
}

/// Parameters of the embedding (first stage) and the LM head (last stage, unless tied to the
/// embedding on one stage) on one rank of `stage`.
pub fn embedding_and_head_on_rank(model: &Model, pc: &ParallelConfig, stage: u32) -> f64 {
    let t = pc.tp as f64;
    let mut n = 0.0;
    if stage == 0 {
        n += model.params().embedding / t;
    }
    if stage == pc.pp - 1 && (!model.tied_embeddings || pc.pp > 1) {
        n += model.vocab as f64 * model.hidden as f64 / t;
    }
    n
}

/// The ranks FSDP (zero 3) shards a torch stack's parameters, gradients and optimizer states over:
/// the data-parallel ranks and, with context parallelism, the context-parallel ranks too, which
/// hold the same parameters and whose gradients must be summed anyway (torchtitan 0.1.0
/// `models/llama3/infra/parallelize.py` applies `fully_shard` over the `dp_shard_cp` mesh,
/// data-parallel shard x cp, whenever cp > 1). Elsewhere the data-parallel ranks.
pub fn fsdp_shards(pc: &ParallelConfig, w: &Workload) -> u32 {
    if w.stack.torch() && pc.zero == 3 {
        pc.dp * pc.cp
    } else {
        pc.dp
    }
}

/// Bytes per parameter, on average over the stage's parameters, of what FSDP all-gathers on a
/// torch stack (`Workload::fsdp`): fp32 without a policy, bf16 under `param_dtype=bfloat16`, and
/// under torchao's float8 all-gather the layers' linear weights (the TP-sharded part of
/// `Model::layer_params`: the attention and FFN projections; torchao converts no grouped experts,
/// and torchtitan filters the LM head out) at 1 B. Megatron's gathers are priced in `step::dp_plan`.
pub fn fsdp_gather_bytes(model: &Model, pc: &ParallelConfig, w: &Workload, stage: u32) -> f64 {
    let f = w.fsdp;
    let base = f.param_bytes();
    if !f.float8_all_gather {
        return base;
    }
    let (dense, experts) = params_on_rank(model, pc, stage, 0);
    let counts = crate::parallelism::stage_kind_counts(&model.layer_kinds(), pc, stage);
    let linear: f64 = LayerKind::ALL.iter().map(|k| counts[k.index()] as f64 * model.layer_params(*k).0 / pc.tp as f64).sum();
    let all = (dense + experts).max(1.0);
    (linear * 1.0 + (all - linear).max(0.0) * base) / all
}

/// Bytes per weight of a serving engine's quantized checkpoint (FP8 or NVFP4, as NVIDIA ModelOpt
/// writes them): FP8 one byte (its per-tensor scales are negligible); NVFP4 half a byte plus one
/// E4M3 scale per 16 weights (the NVFP4 format: 16-element blocks with an FP8 scale each, and a
/// per-tensor FP32 scale). `None` where the weights are not quantized so.
pub fn quantized_weight_bytes(precision: crate::hardware::Dtype) -> Option<f64> {
    crate::workload::quantized_elem_bytes(precision, crate::workload::Fp8Recipe::Tensorwise)
}

/// Parameters one rank of pipeline stage `stage` trains, split into (dense, expert) parts: all of
/// its own ([`params_on_rank`]), or under LoRA only its adapters' (sharded as their base layers:
/// over TP, and the routed experts' over EP x ETP).
/// What PyTorch's ring attention backward (`_templated_ring_attention_backward`, torch 2.6
/// `distributed/tensor/experimental/_attention.py` lines 606-775) holds beyond the layer's saved
/// tensors on a torch stack under context parallelism (training), per micro-batch: the keys and
/// values all-gathered again over the CP group (`kv_rotater`, bf16, heads repeated to the query
/// heads as torchtitan's `repeat_kv` leaves them), the fp32 accumulators of dq, dk and dv, the
/// fp32 dk/dv send buffer and the one received (`torch.cat` / `dkv_rotater`), and one rotation's
/// bf16 flash-backward gradients. 0 elsewhere.
pub fn torch_cp_backward_bytes(model: &Model, pc: &ParallelConfig, w: &Workload) -> f64 {
    let torch = w.stack.hand_written();
    if !(torch && pc.cp > 1 && w.mode == Mode::Train && w.q_len() > 1 && w.cp_comm == crate::workload::CpComm::AllGather && model.mla.is_none()) {
        return 0.0;
    }
    let heads = (model.n_heads / pc.tp as u64) as f64;
    // This rank's query elements; its keys and values are twice that (heads repeated).
    let q = w.sequences() as f64 * (w.q_len() / pc.cp as u64) as f64 * heads * model.head_dim as f64;
    let kv = 2.0 * q;
    let gathered = kv * pc.cp as f64 * 2.0;
    gathered + 4.0 * (q + kv) + 4.0 * kv * 2.0 + 2.0 * (q + kv)
}

pub fn trainable_params_on_rank(model: &Model, pc: &ParallelConfig, w: &Workload, stage: u32) -> (f64, f64) {
    let Some(lora) = &w.lora else { return params_on_rank(model, pc, stage, if w.mode == Mode::Train { w.mtp_layers } else { 0 }) };
    let counts = crate::parallelism::stage_kind_counts(&model.layer_kinds(), pc, stage);
    let (dense_layers, moe_layers) = (counts[LayerKind::Dense.index()], counts[LayerKind::Moe.index()]);
    let (d, _) = crate::workload::lora::adapter_params_per_layer(model, lora, false);
    let (md, me) = if model.is_moe() { crate::workload::lora::adapter_params_per_layer(model, lora, true) } else { (0.0, 0.0) };
    let t = pc.tp as f64;
    ((dense_layers as f64 * d + moe_layers as f64 * md) / t, moe_layers as f64 * me / (pc.ep * pc.etp) as f64)
}

/// Bytes per parameter of LoRA's frozen base weights: bf16, as Megatron-Bridge loads the base
/// checkpoint (`bf16_mixed` and the FP8 mixed-precision recipes keep bf16 parameters; FP8 copies
/// are made per GEMM, not stored), in every stack.
pub const FROZEN_BASE_BYTES: f64 = 2.0;

/// Activation bytes of one micro-batch that Megatron-Core's layer-level offload
/// (`cpu_offloading`, `cpu_offloading_num_layers`; megatron/core/cpu_offload.py) keeps in host
/// memory at the peak: the first `cpu_offload_layers` layers' saved tensors go to the host in
/// forward, one layer's transfer in flight at a time, and come back, one layer ahead, in backward;
/// so `cpu_offload_layers - 1` layers' worth is off the GPU (the one in flight is still counted on
/// it). Its host traffic is `offload_traffic_bytes`.
pub fn offloaded_activation_bytes(model: &Model, pc: &ParallelConfig, w: &Workload, stage: u32) -> f64 {
    let n = w.megatron.cpu_offload_layers;
    if n == 0 || w.stack != Stack::Megatron || w.mode != Mode::Train || w.recompute != Recompute::None {
        return 0.0;
    }
    let kinds = model.layer_kinds();
    let counts = crate::parallelism::stage_kind_counts(&kinds, pc, stage);
    let layers = counts.iter().sum::<u64>();
    kinds.iter().take(n.min(layers as u32).saturating_sub(1) as usize).map(|k| kind_activation_bytes(model, pc, w, *k)).sum()
}

/// Bytes one micro-batch's offloaded activations cross the host link (each way):
/// `cpu_offload_layers` layers' saved tensors.
pub fn offload_traffic_bytes(model: &Model, pc: &ParallelConfig, w: &Workload) -> f64 {
    let n = w.megatron.cpu_offload_layers;
    if n == 0 || w.stack != Stack::Megatron || w.mode != Mode::Train || w.recompute != Recompute::None {
        return 0.0;
    }
    model.layer_kinds().iter().take(n as usize).map(|k| kind_activation_bytes(model, pc, w, *k)).sum()
}

/// The memory plan of the peak GPU.
pub fn plan(model: &Model, pc: &ParallelConfig, w: &Workload, capacity: Bytes) -> MemoryPlan {
    // The first stage (embedding, most micro-batches in flight), the last (LM head) and, when the
    // split is uneven, the stage with the most layers.
    let counts = crate::parallelism::stage_layer_counts(model.n_layers, pc);
    let most = counts.iter().enumerate().fold((0, 0), |acc, (i, &n)| if n > acc.1 { (i as u32, n) } else { acc }).0;
    let mut stages: Vec<u32> = if pc.pp > 1 { vec![0, pc.pp - 1] } else { vec![0] };
    if !stages.contains(&most) {
        stages.push(most);
    }
    // Under PyTorch's pipelining the second stage holds one micro-batch fewer in flight than the
    // first but the input receive buffers the first has not (`torch_pipelining_buffers`).
    if w.stack.torch() && pc.pp > 2 && !stages.contains(&1) {
        stages.push(1);
    }
    stages
        .into_iter()
        .map(|s| stage_plan(model, pc, w, capacity, s))
        .max_by(|a, b| a.total().value().total_cmp(&b.total().value()))
        .expect("at least one stage")
}

/// Whether an inference plan takes its peak from [`hf_prefill_forward_peak`]: an `hf-eager`
/// prefill from an empty cache on one GPU of a transformer (GQA or MLA attention, RMSNorm, gated
/// FFN, dense or MoE layers), the forwards that replay was written from and checked against.
/// Others (hf-compile, whose Inductor graph allocates differently; sliding windows and sinks,
/// which transformers runs as eager attention; hybrid models; TP/PP/CP/EP) keep the estimate.
fn hf_prefill_replayed(model: &Model, pc: &ParallelConfig, w: &Workload) -> bool {
    w.stack == Stack::HfEager
        && w.mode == Mode::Prefill
        && w.kv_len == 0
        && pc.n_gpus() == 1
        && model.hybrid.is_none()
        && !model.attention_sinks
        && model.norm == NormKind::RmsNorm
        && model.ffn_kind == FfnKind::Gated
}

/// Whether a training plan takes the caching allocator's reserved-minus-allocated gap from
/// [`hf_train_job_peak`]: an `hf-eager` job of the HF run set's loop (one micro-batch per step,
/// no recompute, LoRA or float8, bf16 autocast over fp32 parameters) on one GPU, of a model that
/// replay describes ([`hf_train_replayable`]). Others keep the generic fragmentation share.
fn hf_train_replayed(model: &Model, pc: &ParallelConfig, w: &Workload, n_micro: u64) -> bool {
    w.stack == Stack::HfEager
        && w.mode == Mode::Train
        && pc.n_gpus() == 1
        && n_micro == 1
        && w.train_loop == crate::workload::TrainLoop::Plain
        && w.recompute == Recompute::None
        && w.lora.is_none()
        && w.precision == crate::hardware::Dtype::Bf16
        && !w.dropout
        && hf_train_replayable(model)
}

fn stage_plan(model: &Model, pc: &ParallelConfig, w: &Workload, capacity: Bytes, stage: u32) -> MemoryPlan {
    let sm = stack_memory(w.stack);
    let (dense, experts) = params_on_rank(model, pc, stage, if w.mode == Mode::Train { w.mtp_layers } else { 0 });
    // Megatron-Core's distributed optimizer (and its gradient buffers) shard over the data-parallel
    // group with context parallelism (`parallel_state.get_data_parallel_group(with_context_parallel=True)`):
    // the CP ranks hold the same parameters, so they share the shards.
    // FSDP on the torch stacks shards over the data-parallel and context-parallel ranks together
    // (`fsdp_shards`).
    let dp = if w.stack == Stack::Megatron { (pc.dp * pc.cp) as f64 } else { fsdp_shards(pc, w) as f64 };
    let edp = pc.expert_dp() as f64;
    let shard = |stage_min: u32, n: f64| if pc.zero >= stage_min { n } else { 1.0 };
    let counts = crate::parallelism::stage_kind_counts(&model.layer_kinds(), pc, stage);
    let layers = counts.iter().sum::<u64>() as f64;
    let tokens = (w.sequences() * w.q_len()) as f64 / pc.cp as f64;
    let runtime = if w.stack.hf() { Bytes::gib(HF_CONTEXT_GIB) + runtime_bytes(pc) - Bytes::mib(512.0) } else { runtime_bytes(pc) };

    if w.mode != Mode::Train {
        // Inference: weights in the compute dtype (bf16, or fp8/fp4 when quantized), KV cache,
        // and one forward's transients.
        let wbytes = w.precision.bytes().max(0.5);
        let weights = match quantized_weight_bytes(w.precision).filter(|_| w.stack.is_engine()) {
            // A serving engine's quantized checkpoint: the embedding and the LM head stay in bf16
            // (ModelOpt leaves them unquantized; `cost::lower::gemm_dtype`), the rest carries its
            // block scales.
            Some(q) => {
                let eh = embedding_and_head_on_rank(model, pc, stage);
                (dense + experts - eh) * q + eh * 2.0
            }
            None => (dense + experts) * wbytes,
        };
        // KV of the layers with attention; a Mamba-2 layer holds a fixed-size state per sequence
        // instead (its SSM state in fp32 and its conv state, split over TP with the heads).
        let layers_here = LayerKind::ALL.iter().filter(|k| k.has_attention()).map(|k| counts[k.index()]).sum::<u64>() as f64;
        let mamba_state = match &model.hybrid {
            Some(hy) => {
                counts[LayerKind::Mamba.index()] as f64 * w.sequences() as f64 * hy.mamba.state_bytes_per_sequence(crate::model::hybrid::SSM_STATE_BYTES, 2.0)
                    / pc.tp as f64
            }
            None => 0.0,
        };
        let kv_tokens = (w.sequences() * (w.kv_len + w.q_len())) as f64;
        let kv_shard = match &model.mla {
            Some(_) => 1.0,
            None => (pc.tp as f64).min(model.n_kv_heads as f64),
        };
        // Sliding-window layers (GPT-OSS) cache only their window (TensorRT-LLM's and vLLM's
        // per-layer window, transformers' `DynamicSlidingWindowLayer` holds `sliding_window - 1`
        // tokens and the step's new one): this stage's attention layers at the model's share of
        // cached (token, layer) pairs.
        //
        // transformers' prefill keeps every token all the same: `DynamicSlidingWindowLayer.update`
        // keeps `full_key_states[:, :, -self.sliding_window + 1 :, :]` (transformers 5.17.0
        // `cache_utils.py` lines 251-256), a view of the `torch.cat` result, whose whole storage
        // stays alive until the next update replaces it.
        let window_share = if w.stack.hf() && w.mode == Mode::Prefill { 1.0 } else { model.kv_cached_share((w.kv_len + w.q_len()) as f64) };
        let mut kv = kv_tokens * layers_here * window_share * model.kv_elements_per_token_per_layer() / kv_shard * w.kv_elem_bytes() / pc.cp as f64;
        // DynamicCache's torch.cat per token: whole sets of the cache that the caching allocator
        // keeps but cannot reuse. It frees them and retries when a cudaMalloc fails, so they never
        // take the peak past the device (capped below, once the rest is known).
        //
        // A sliding layer past its window strands nothing: its `torch.cat` is `sliding_window`
        // tokens at every step (the window less one cached, plus the new token), so the block its
        // last step freed serves the next; only the full layers' share of the cache grows.
        let t_all = (w.kv_len + w.q_len()) as f64;
        let growing_share = match &model.sliding_window {
            Some(sw) if w.stack.hf() && t_all >= sw.window as f64 => {
                let full = (model.n_attention_layers() - model.n_sliding_layers()) as f64 * t_all;
                full / model.kv_cached_layer_tokens(t_all).max(1.0)
            }
            _ => 1.0,
        };
        let stranded_sets = if w.stack.hf() && w.mode == Mode::Decode && layers_here > 0.0 {
            // One full layer's keys (or values) as the decode finds them: `kv_len` tokens.
            let token = kv / layers_here / window_share / 2.0 / t_all;
            hf_stranded_cache_sets(token * w.kv_len as f64, token, w.decode_tokens)
        } else {
            0.0
        };
        let stranded = kv * growing_share * stranded_sets;
        kv += mamba_state;
        let widest = model.ffn_hidden.max(model.moe.as_ref().map_or(0, |m| m.expert_ffn_hidden)) as f64 / pc.tp as f64;
        let mut transient = tokens * (3.0 * widest + 4.0 * model.hidden as f64) * 2.0;
        // What the caching allocator holds beyond the allocated peak because of the experts
        // path's pattern of requests (below); added to the plan's fragmentation.
        let mut experts_cached = 0.0;
        if let (true, Some(moe)) = (w.stack.hf(), &model.moe) {
            // The MoE layer's peak: the residual stream's four [tokens, hidden] bf16 tensors
            // (the model's `inputs_embeds`, the layer's input, its residual and the normed input
            // of the MLP) and transformers' grouped_mm experts forward, replayed through the
            // caching allocator; the peak is that of the MoE layer or of the widest dense part,
            // whichever is larger.
            let e = hf_grouped_experts_peak(
                tokens / pc.ep as f64,
                model.hidden as f64,
                moe.n_experts,
                moe.top_k,
                moe.expert_ffn_hidden as f64 / pc.etp as f64,
                moe.router.weights_fp32,
            );
            let moe_peak = tokens * 4.0 * model.hidden as f64 * 2.0 + e.allocated;
            if moe_peak >= transient {
                transient = moe_peak;
                experts_cached = e.reserved - e.allocated;
            }
        }
        let logits = w.sequences() as f64 * model.vocab as f64 / pc.tp as f64 * 4.0;
        // An `hf-eager` prefill on one GPU: the whole forward replayed through the caching
        // allocator (`hf_prefill_forward_peak`) gives the allocated peak above the weights (the KV
        // cache it fills included) and what the allocator reserves beyond it, in place of the
        // widest-part estimate above and the generic fragmentation share.
        let replayed = hf_prefill_replayed(model, pc, w).then(|| hf_prefill_forward_peak(model, tokens, w.q_len()));
        if let Some(p) = replayed {
            transient = (p.allocated - kv).max(0.0);
            experts_cached = p.reserved - p.allocated;
        }
        let base = weights + kv + transient + logits;
        // An `hf-*` decode's allocator holds, beyond what is allocated, the stranded cache sets and
        // the tied head's block (below) and nothing measurable else: the decode runs' reserved
        // less allocated peaks less those is 0.02 GiB or under at batch 1-4
        // (calibration/runs/hf/FIT.md, sixth pass), so no share of the rest on top. A replayed
        // prefill's reserved peak is the replay's.
        let fragmentation = if (w.stack.hf() && w.mode == Mode::Decode) || replayed.is_some() { 0.0 } else { sm.fragmentation };
        let live = base * (1.0 + fragmentation) + experts_cached + runtime.value();
        let stranded = stranded.min((capacity.value() - live).max(0.0));
        let cached_head = if w.stack.hf() && w.mode == Mode::Decode && model.tied_embeddings {
            // The cache's tensors come from the large pool (and out of the free head block first)
            // only when each layer's keys exceed the small pool's 1 MiB.
            let per_layer = if layers_here > 0.0 { kv / layers_here / 2.0 } else { 0.0 };
            let large_kv = if per_layer > ALLOC_SMALL_MAX { kv + stranded } else { 0.0 };
            hf_cached_tied_head(model.vocab as f64 * model.hidden as f64 / pc.tp as f64 * wbytes, large_kv).min((capacity.value() - live - stranded).max(0.0))
        } else {
            0.0
        };
        return MemoryPlan {
            weights: Bytes::new(weights),
            gradients: Bytes::ZERO,
            optimizer: Bytes::ZERO,
            activations: Bytes::new(transient),
            logits: Bytes::new(logits),
            kv_cache: Bytes::new(kv + stranded),
            transient: Bytes::ZERO,
            runtime,
            fragmentation: Bytes::new(base * fragmentation + experts_cached + cached_head),
            capacity,
            stage,
        };
    }

    // Under LoRA the base weights are frozen (bf16, no gradients or optimizer state) and the
    // adapters train like any parameter of the stack.
    let (base_bytes, (train_dense, train_experts)) = match &w.lora {
        None => (sm.param, (dense, experts)),
        Some(_) => (FROZEN_BASE_BYTES, trainable_params_on_rank(model, pc, w, stage)),
    };
    let mut weights = match quantized_param_bytes(w).filter(|_| w.lora.is_none()) {
        // `fp8_param_gather`: the transformer layers' weights are quantized tensors only; the
        // embedding, the LM head (and the MTP modules' embedding copy) stay bf16. Norms and the
        // router (under 0.1% of a model's parameters) are counted with the quantized weights.
        Some(q) => {
            let mut bf16 = embedding_and_head_on_rank(model, pc, stage);
            if stage == pc.pp - 1 && pc.pp > 1 && w.mtp_layers > 0 {
                bf16 += model.params().embedding / pc.tp as f64;
            }
            let bf16 = bf16.min(dense);
            ((dense - bf16) * q + bf16 * sm.param) / shard(3, dp) + experts * q / shard(3, edp)
        }
        None => dense * base_bytes / shard(3, dp) + experts * base_bytes / shard(3, edp),
    };
    if w.lora.is_some() {
        weights += train_dense * sm.param / shard(3, dp) + train_experts * sm.param / shard(3, edp);
    }
    // Megatron's main gradients in the DDP buffer's dtype, and its optimizer's fp32 master weights
    // with Adam's two moments in theirs (`workload::MegatronMemory`; the defaults give 4 and 12).
    let (grad_bytes, optimizer_bytes) =
        if w.stack == Stack::Megatron { (w.megatron.grad_dtype.bytes(), 4.0 + 2.0 * w.megatron.adam_state_dtype.bytes()) } else { (sm.grad, sm.optimizer) };
    let gradients = train_dense * grad_bytes / shard(2, dp) + train_experts * grad_bytes / shard(2, edp);
    let optimizer = train_dense * optimizer_bytes / shard(1, dp) + train_experts * optimizer_bytes / shard(1, edp);

    // Activations of the micro-batches in flight on this stage.
    let n_micro = (w.global_batch / (w.micro_batch * pc.dp as u64)).max(1);
    // The last rank runs one micro-batch at a time without interleaving; with it, PyTorch's
    // `ScheduleInterleaved1F1B` warms it up with `(n_local_stages - 1) x pp` chunk-forwards of its
    // earlier model chunks first (`get_rank_warmup_ops`, torch 2.5.1 and 2.6.0, re-read):
    // `in_flight_middle`. (Megatron-Core's path keeps one.)
    let torch_pipelining = w.stack.torch();
    let flight = if stage == 0 {
        in_flight(pc, n_micro, torch_pipelining)
    } else if stage < pc.pp - 1 || (pc.vp > 1 && torch_pipelining) {
        in_flight_middle(pc, n_micro, stage)
    } else {
        1.0
    };
    let mut one_micro_full = 0.0;
    for kind in LayerKind::ALL {
        let n = counts[kind.index()];
        if n > 0 {
            one_micro_full += n as f64 * kind_activation_bytes(model, pc, w, kind);
        }
    }
    // The largest layer the model has (a transformer model's dense layer counts even when every
    // layer is MoE).
    let model_kinds: Vec<LayerKind> = match &model.hybrid {
        Some(_) => {
            let kinds = model.layer_kinds();
            LayerKind::ALL.into_iter().filter(|k| kinds.contains(k)).collect()
        }
        None if model.is_moe() => vec![LayerKind::Dense, LayerKind::Moe],
        None => vec![LayerKind::Dense],
    };
    let largest_layer = model_kinds.iter().map(|k| kind_activation_bytes(model, pc, w, *k)).fold(0.0, f64::max);
    let sp = pc.sp && pc.tp > 1;
    let layer_input = 2.0 * tokens * model.hidden as f64 / if sp { pc.tp as f64 } else { 1.0 };
    // Layer checkpointing (`layer:n`): the checkpointed layers keep their input only.
    let picked = w.recompute.checkpointed_kind_counts(model, pc, stage);
    let per_micro = match w.recompute {
        Recompute::Full => layers * layer_input,
        Recompute::Layers(_) => LayerKind::ALL
            .iter()
            .map(|k| {
                let (n, ck) = (counts[k.index()], picked[k.index()]);
                (n - ck) as f64 * if n > ck { kind_activation_bytes(model, pc, w, *k) } else { 0.0 } + ck as f64 * layer_input
            })
            .sum(),
        _ => one_micro_full - offloaded_activation_bytes(model, pc, w, stage),
    };
    // Under full recompute one layer's activations are rebuilt at a time during backward; under
    // per-op selective checkpointing what the layer did not keep.
    let rebuilt = match w.recompute {
        Recompute::Full => largest_layer,
        Recompute::Layers(_) if picked.iter().sum::<u64>() > 0 => largest_layer,
        Recompute::SelectiveOp => {
            let all = Workload { recompute: Recompute::None, ..w.clone() };
            let full = model_kinds.iter().map(|k| kind_activation_bytes(model, pc, &all, *k)).fold(0.0, f64::max);
            (full - largest_layer).max(0.0)
        }
        _ => 0.0,
    };
    let embedding_out = if stage == 0 && hf_compile_train(w) {
        // `hf-compile`: the embedding's fp32 output is the first layer's norm input, counted with
        // the layer (`kind_activation_bytes`). The causal mask the compiled model materializes
        // (see there) is saved once for all layers' SDPA backward: [batch, 1, q, kv] in bf16
        // (measured: saved.csv, 2 x 1 x 4096 x 4096 bf16).
        (w.sequences() * w.q_len()) as f64 / pc.cp as f64 * w.context_len() as f64 * 2.0
    } else if stage == 0 {
        layer_input * if w.dropout { 1.5 } else { 1.0 }
    } else {
        0.0
    };
    // Multi-token prediction on the last stage: per module, its layer's activations (of the
    // model's last layer's kind) and what its norms and projection keep (both norms' inputs, the
    // concatenation: 4 hidden-sized tensors).
    let mtp = if stage == pc.pp - 1 && w.mtp_layers > 0 {
        let layer = kind_activation_bytes(model, pc, w, if model.n_moe_layers() > 0 { LayerKind::Moe } else { LayerKind::Dense });
        let per_module = match w.recompute {
            Recompute::Full => layer_input,
            _ => layer + 4.0 * layer_input,
        };
        w.mtp_layers as f64 * per_module
    } else {
        0.0
    };
    let (stage_io, retained_logits) = torch_pipelining_buffers(model, pc, w, stage, n_micro, flight, layer_input, tokens);
    let activations = flight * (per_micro + embedding_out + mtp) + rebuilt + stage_io;

    // Logits and loss on the last stage, at their peak early in backward: what the loss keeps
    // plus the logits' gradient being formed.
    let logits = if stage == pc.pp - 1 {
        let per_logit = match w.stack {
            // Transformer Engine's fused cross entropy (`parallel_cross_entropy`, Triton) computes
            // the gradient in the forward and writes it over the bf16 logits (as remembered of
            // transformer_engine/pytorch/triton/cross_entropy.py, not re-read here).
            Stack::Megatron if w.megatron.cross_entropy_fusion => 2.0,
            // fp32 vocab-parallel cross-entropy (Korthikanti: 4sbv/t) + its bf16 gradient
            Stack::Megatron => 6.0,
            // The compiled loss saves the bf16 logits and two fp32 statistics per token (the
            // max and the log-sum-exp; measured: saved.csv, the only [tokens, vocab] tensor saved
            // is the bf16 logits), and its backward forms the logits' gradient in one fused
            // kernel (softmax less the one-hot, cast back to bf16 for the LM head's GEMMs, the
            // backward of `logits.float()`): 2 + 2. transformers' `ForCausalLMLoss`
            // (5.17.0 `loss/loss_utils.py` l. 49-71): `logits.float()`, then `cross_entropy`.
            Stack::HfCompile if w.compile_loss => 4.0,
            // bf16 logits + fused fp32 log-softmax statistics + fp32 gradient
            Stack::TorchCompile if w.compile_loss => 8.0,
            // The loss left eager beside compiled blocks (`Workload::compile_loss`): as eager's.
            Stack::TorchCompile | Stack::HfCompile => 14.0,
            // bf16 logits, their .float() copy, the log-softmax output, and the fp32 gradient;
            // Gemma 2's final soft-cap keeps its `tanh` output (bf16) for backward besides
            // (`logits / cap` and `* cap` keep only the scalar).
            Stack::TorchEager | Stack::HfEager => 14.0 + if model.style.final_logit_softcap.is_some() { 2.0 } else { 0.0 },
            // Inference engines do not train (refused by `config`); as the fused stacks.
            Stack::Trtllm | Stack::Vllm | Stack::Sglang => 6.0,
        };
        // Each MTP module has its own loss over the same vocabulary, kept until backward too.
        (1.0 + w.mtp_layers as f64) * (tokens * model.vocab as f64 / pc.tp as f64 * per_logit + 4.0 * tokens * model.hidden as f64 / pc.tp as f64)
            + retained_logits
    } else {
        0.0
    };

    // Autocast caches a bf16 copy of every weight it casts until the autocast region ends; under
    // FSDP the weights it casts are the gathered (unsharded) ones, so the cache is not sharded.
    // Checkpointed layers run their forward without grad (no caching) and recompute in their own
    // short autocast region, so under full recompute one layer's copies are held at a time.
    // Autocast casts the fp32 weights it finds: under LoRA only the adapters' (the base is bf16).
    let cast = if w.lora.is_some() { train_dense + train_experts } else { dense + experts };
    // Under layer checkpointing the checkpointed layers' copies are not cached (one at a time).
    let cached = match w.recompute {
        Recompute::Full => cast / layers.max(1.0),
        Recompute::Layers(_) => {
            let ck = picked.iter().sum::<u64>() as f64;
            cast * ((layers - ck).max(0.0) + ck.min(1.0)) / layers.max(1.0)
        }
        _ => cast,
    };
    // torchao float8 under compile keeps no copy of a converted linear's weight: its backward
    // casts the fp32 weight (saved as the parameter itself) to fp8 again (measured: saved.csv, no
    // weight-sized tensor but the parameters). What stays under autocast keeps its bf16 copy: the
    // LM head (the recipes skip it), the router and the grouped experts (no `nn.Linear`).
    let cached = if torchao_fp8(w) {
        let head = if stage == pc.pp - 1 { model.vocab as f64 * model.hidden as f64 / pc.tp as f64 } else { 0.0 };
        head + if w.recompute == Recompute::Full { experts / layers.max(1.0) } else { experts }
    } else {
        cached
    };
    // Under FSDP2's bf16 policy no autocast runs (`Workload::fsdp`): the layers compute on the
    // gathered bf16 parameters, which autograd saves as they are (FSDP2 frees and re-gathers their
    // storage), so nothing is cached.
    let autocast_cache = if w.fsdp.bf16_params && w.stack.torch() && pc.zero == 3 { 0.0 } else { sm.autocast_cache };
    let mut transient = cached * autocast_cache;
    // What FSDP gathers (fp32, bf16 under FSDP2's policy, float8 linear weights) and the dtype the
    // gradients are reduced in (`Workload::fsdp`); Megatron's FSDP gathers its bf16 parameters.
    let (gathered, reduced) = if w.stack.torch() { (fsdp_gather_bytes(model, pc, w, stage), w.fsdp.reduce.bytes()) } else { (sm.param, sm.grad) };
    let fsdp_ranks = fsdp_shards(pc, w);
    if pc.zero == 3 && fsdp_ranks > 1 && w.stack.torch() && w.mode == Mode::Train && pc.pp > 1 {
        // FSDP under PyTorch's pipelining (`step::DpPlan::per_step`): the stage's layers stay
        // gathered through the step and their gradients accumulate unsharded until the last
        // backward (FSDP2 accumulates them in the reduce dtype, `to_accumulated_grad_if_needed`).
        transient += (dense + experts) * (gathered + reduced);
    } else if pc.zero == 3 && fsdp_ranks > 1 {
        // FSDP: the current and the prefetched layer gathered in full.
        let per_layer = (dense + experts) / layers.max(1.0);
        transient += 2.0 * per_layer * gathered;
    }
    if pc.zero == 0 && pc.dp > 1 && w.stack != Stack::Megatron {
        // DDP's gradient buckets are a second copy of the gradients.
        transient += (train_dense + train_experts) * sm.grad;
    }
    // PyTorch's context parallelism: during each layer's attention backward the ring holds what
    // `torch_cp_backward_bytes` counts. The loss's logits are freed by then (the layers' backward
    // follows the LM head's), so it adds only where it exceeds them.
    transient += (torch_cp_backward_bytes(model, pc, w) - logits).max(0.0);
    // `optimizer.zero_grad()` sets the gradients to None (PyTorch's default since 2.0; the HF run
    // set and HF Trainer do so): with one micro-batch per step no gradient exists while the
    // forward's activations are at their peak, and backward allocates each gradient as it frees
    // the activations that made it. The peak is then the larger of the two, not their sum
    // (measured: the hf runs' `max_memory_allocated` less weights and AdamW states equals the
    // activations, logits and weight copies alone, calibration/runs/hf/FIT.md), except for the
    // LM head's gradient, the first one backward makes, while the loss's gradient is live.
    let gradients = if w.stack.hf() && n_micro == 1 && pc.pp == 1 && pc.zero < 2 {
        let head = model.vocab as f64 * model.hidden as f64 / pc.tp as f64 * sm.grad;
        (gradients - (activations + logits + transient)).max(head.min(gradients))
    } else {
        gradients
    };
    let base = weights + gradients + optimizer + activations + logits + transient;
    // Where the job's allocation sequence is known (`hf_train_job_peak`, replayed on the device
    // less what lives outside the allocator), the replay's allocated peak stands for what is live
    // at the peak: the weights, gradients and optimizer states stay as counted above and the
    // activations take the difference (the replay holds them tensor by tensor, and when each is
    // freed); the caching allocator's gap is the replay's reserved less allocated peak. Elsewhere
    // the gap is a share of everything else.
    let (activations, fragmentation) = if hf_train_replayed(model, pc, w, n_micro) {
        let p = hf_train_job_peak(model, tokens, (capacity - runtime).value());
        ((activations + p.allocated - base).max(0.0), p.reserved - p.allocated)
    } else {
        (activations, base * sm.fragmentation)
    };
    MemoryPlan {
        weights: Bytes::new(weights),
        gradients: Bytes::new(gradients),
        optimizer: Bytes::new(optimizer),
        activations: Bytes::new(activations),
        logits: Bytes::new(logits),
        kv_cache: Bytes::ZERO,
        transient: Bytes::new(transient),
        runtime,
        fragmentation: Bytes::new(fragmentation),
        capacity,
        stage,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hf_decode_strands_a_cache_set_per_2_mib_boundary_crossed() {
        let mib = 1024.0 * 1024.0;
        // Llama-1B at batch 64, KV 4096: 256 MiB per layer's keys, 64 KiB more per token. The
        // prefill's exact 256 MiB is outgrown at once; then one more set per 32 tokens.
        let (tensor, token) = (256.0 * mib, 64.0 * 1024.0);
        assert_eq!(hf_stranded_cache_sets(tensor, token, 1), 1.0);
        assert_eq!(hf_stranded_cache_sets(tensor, token, 25), 1.0);
        assert_eq!(hf_stranded_cache_sets(tensor, token, 32), 1.0);
        assert_eq!(hf_stranded_cache_sets(tensor, token, 33), 2.0);
        assert_eq!(hf_stranded_cache_sets(tensor, token, 60), 2.0);
        // Off a boundary, the first tokens fit in the prefill's rounded segment.
        assert_eq!(hf_stranded_cache_sets(255.0 * mib, token, 16), 0.0);
        assert_eq!(hf_stranded_cache_sets(255.0 * mib, token, 17), 1.0);
        // Under 10 MiB the tensors share the allocator's buffers; no tokens, nothing grows.
        assert_eq!(hf_stranded_cache_sets(8.0 * mib, token, 1000), 0.0);
        assert_eq!(hf_stranded_cache_sets(tensor, token, 0), 0.0);
    }

    #[test]
    fn hf_decode_stranded_sets_never_take_the_plan_past_the_device() {
        // A GPT-3-shaped model cut to 4 layers (14.5 GB of bf16 weights, 96 MiB of keys per layer
        // per sequence at 4096 tokens): the cache at batch 16 holds 12 GiB, two sets fit in 80 GiB,
        // a long decode's many do not.
        let m = Model { n_layers: 4, ..gpt3_175b() };
        let mut w = Workload { mode: Mode::Decode, batch: 16, kv_len: 4096, stack: Stack::HfEager, ..korthikanti(Recompute::None) };
        let cap = Bytes::gib(80.0);
        w.decode_tokens = 1;
        let one = plan(&m, &pc(1, false), &w, cap);
        w.decode_tokens = 4000;
        let long = plan(&m, &pc(1, false), &w, cap);
        assert!(long.kv_cache > one.kv_cache, "{:?} vs {:?}", long.kv_cache, one.kv_cache);
        // Two sets would not fit: the allocator frees its stranded blocks and retries instead.
        assert!(one.fits() && long.fits() && one.total() < cap, "{:?} {:?}", one.total(), long.total());
        assert!((long.total().value() - cap.value()).abs() < 1.0, "{:?}", long.total());
    }
    use crate::hardware::Dtype;
    use crate::model::tests::gpt3_175b;
    use crate::parallelism::Schedule;

    /// Korthikanti et al. 2022 setting: GPT with dropout, unfused attention, Megatron kernels.
    fn korthikanti(recompute: Recompute) -> Workload {
        Workload {
            mode: Mode::Train,
            micro_batch: 1,
            global_batch: 64,
            seq: 2048,
            batch: 1,
            kv_len: 0,
            precision: Dtype::Bf16,
            fp8_recipe: crate::workload::Fp8Recipe::Tensorwise,
            recompute,
            stack: Stack::Megatron,
            dropout: true,
            flash_attention: false,
            routing_imbalance: 1.0,
            moe_capacity: None,
            moe_dispatcher: crate::workload::MoeDispatcher::AllToAll,
            moe_flex_backend: crate::workload::FlexBackend::DeepEp,
            lora: None,
            mtp_layers: 0,
            cp_comm: crate::workload::CpComm::P2p,
            megatron: Default::default(),
            fsdp: Default::default(),
            decode_tokens: 1,
            attention_dp: None,
            packed_doc_len: None,
            train_loop: Default::default(),
            fp8_non_tn: false,
            compile_loss: true,
        }
    }

    fn pc(tp: u32, sp: bool) -> ParallelConfig {
        ParallelConfig { tp, sp, pp: 1, vp: 1, dp: 1, cp: 1, ep: 1, etp: 1, zero: 0, schedule: Schedule::OneFOneB, split: Default::default() }
    }

    /// Table 2 of Korthikanti et al. 2022, per layer, bytes: s b h (...)
    fn table2(m: &Model, w: &Workload, t: f64, sp: bool, selective: bool) -> f64 {
        let (s, b, h, a) = (w.seq as f64, w.micro_batch as f64, m.hidden as f64, m.n_heads as f64);
        let sbh = s * b * h;
        let quad = if selective { 0.0 } else { 5.0 * a * s / (h * t) };
        if sp {
            sbh * (34.0 / t + quad)
        } else {
            sbh * (10.0 + 24.0 / t + quad)
        }
    }

    #[test]
    fn activations_equal_korthikanti_table2() {
        let m = gpt3_175b();
        for (t, sp) in [(1, false), (8, false), (8, true), (4, true)] {
            for rc in [Recompute::None, Recompute::Selective] {
                let w = korthikanti(rc);
                let ours = layer_activation_bytes(&m, &pc(t, sp), &w, false);
                let theirs = table2(&m, &w, t as f64, sp && t > 1, rc == Recompute::Selective);
                assert!((ours / theirs - 1.0).abs() < 1e-12, "t={t} sp={sp} {rc:?}: {ours} vs {theirs}");
            }
        }
    }

    #[test]
    fn full_recompute_keeps_2sbh_per_layer() {
        let m = gpt3_175b();
        let w = korthikanti(Recompute::Full);
        let p = pc(1, false);
        let plan = plan(&m, &p, &w, Bytes::gib(80.0));
        let sbh = 2048.0 * 12288.0;
        let layer = layer_activation_bytes(&m, &p, &w, false);
        // 96 layer inputs, the embedding output with its dropout mask, and one rebuilt layer.
        let expected = 96.0 * 2.0 * sbh + 1.5 * 2.0 * sbh + layer;
        assert!((plan.activations.value() / expected - 1.0).abs() < 1e-12);
    }

    #[test]
    fn components_sum_to_total_and_zero_shards() {
        let m = gpt3_175b();
        let mut w = korthikanti(Recompute::Selective);
        w.flash_attention = true;
        let mut p =
            ParallelConfig { tp: 8, sp: true, pp: 8, vp: 1, dp: 4, cp: 1, ep: 1, etp: 1, zero: 0, schedule: Schedule::OneFOneB, split: Default::default() };
        let z0 = plan(&m, &p, &w, Bytes::gib(80.0));
        let sum: f64 = z0.components().iter().map(|(_, b)| b.value()).sum();
        assert_eq!(sum, z0.total().value());
        p.zero = 1;
        let z1 = plan(&m, &p, &w, Bytes::gib(80.0));
        assert!((z1.optimizer.value() * 4.0 - z0.optimizer.value()).abs() < 1.0);
        assert_eq!(z1.weights, z0.weights);
        p.zero = 3;
        let z3 = plan(&m, &p, &w, Bytes::gib(80.0));
        assert!((z3.weights.value() * 4.0 - z0.weights.value()).abs() < 1.0);
    }

    #[test]
    fn hybrid_activations_and_decode_state() {
        let m = crate::model::tests::nemotron_h_8b();
        let mut w = korthikanti(Recompute::None);
        (w.seq, w.dropout, w.flash_attention) = (8192, false, true);
        let p = pc(1, false);
        let t = 8192.0;
        // A Mamba-2 block: norm input and output (2 + 2 per hidden unit), zxbcdt (2 x 18560),
        // out_x, the gated norm's input and output (3 x 2 x 8192), fp32 1/rms per group (4 x 8).
        let mamba = kind_activation_bytes(&m, &p, &w, LayerKind::Mamba);
        assert_eq!(mamba, t * (4.0 * 4096.0 + 2.0 * 18560.0 + 6.0 * 8192.0 + 32.0));
        // An MLP block is a transformer layer's FFN half; an attention block its attention half.
        let mlp = kind_activation_bytes(&m, &p, &w, LayerKind::Mlp);
        assert_eq!(mlp, t * (4.0 * 4096.0 + 4.0 * 21504.0));
        let attn = kind_activation_bytes(&m, &p, &w, LayerKind::Attention);
        let train_plan = plan(&m, &p, &w, Bytes::gib(80.0));
        let embedding_out = 2.0 * t * 4096.0;
        assert!((train_plan.activations.value() - (24.0 * mamba + 24.0 * mlp + 4.0 * attn + embedding_out)).abs() < 1.0);

        // Decode: KV for the 4 attention layers only, and each Mamba layer's fixed-size state.
        (w.mode, w.batch, w.kv_len) = (Mode::Decode, 4, 1023);
        let decode = plan(&m, &p, &w, Bytes::gib(80.0));
        let kv = 4.0 * 4.0 * 1024.0 * (2.0 * 8.0 * 128.0) * 2.0;
        let state = 24.0 * 4.0 * (128.0 * 64.0 * 128.0 * 4.0 + 10240.0 * 3.0 * 2.0);
        assert_eq!(decode.kv_cache.value(), kv + state);
        // TP splits the state with the heads.
        let plan8 = plan(&m, &pc(8, false), &w, Bytes::gib(80.0));
        assert_eq!(plan8.kv_cache.value(), kv / 8.0 + state / 8.0);
    }

    #[test]
    fn pipeline_stage0_holds_p_microbatches() {
        let m = gpt3_175b();
        let w = korthikanti(Recompute::Selective);
        let mut p = pc(8, true);
        p.pp = 8;
        let act = plan(&m, &p, &w, Bytes::gib(80.0));
        let layer = layer_activation_bytes(&m, &p, &w, false);
        // 8 micro-batches of 12 layers = 96 layers' worth (Korthikanti sec. 4.2.3), plus embeddings.
        assert!(act.activations.value() >= 96.0 * layer);
        assert!(act.activations.value() < 97.0 * layer);
    }

    #[test]
    fn torch_pipelining_keeps_every_micro_batch_s_stage_inputs_outputs_and_logits() {
        let m = gpt3_175b();
        let w = Workload { stack: Stack::TorchCompile, ..korthikanti(Recompute::Full) };
        let mut p = pc(8, true);
        p.pp = 8;
        let (boundary, tokens) = (2.0 * 2048.0 * 12288.0 / 8.0, 2048.0);
        let logits = tokens * m.vocab as f64 / 8.0 * 2.0;
        let buffers = |w: &Workload, p: &ParallelConfig, stage: u32, flight: f64| torch_pipelining_buffers(&m, p, w, stage, 32, flight, boundary, tokens);
        // First stage: output gradients and outputs of all 32 micro-batches; a middle stage also
        // its input buffers, less the 5 in flight whose first layer saved them as its input.
        assert_eq!(buffers(&w, &p, 0, 8.0), (64.0 * boundary, 0.0));
        assert_eq!(buffers(&w, &p, 3, 5.0), ((96.0 - 5.0) * boundary, 0.0));
        // Last stage: 31 micro-batches' bf16 logits beside the loss's own, and its input buffers.
        assert_eq!(buffers(&w, &p, 7, 1.0), (31.0 * boundary, 31.0 * logits));
        // Interleaved: rank 0 holds virtual stages 0 and 8, rank 7 stages 7 and 15 (the last).
        (p.vp, p.schedule) = (2, Schedule::Interleaved);
        assert_eq!(buffers(&w, &p, 0, 8.0), ((64.0 + 96.0 - 8.0) * boundary, 0.0));
        assert_eq!(buffers(&w, &p, 7, 4.5), ((96.0 - 4.5 + 32.0 - 4.5) * boundary, 31.0 * logits));
        // Megatron-Core keeps none of them; no pipelining, none either.
        assert_eq!(buffers(&korthikanti(Recompute::Full), &p, 3, 5.0), (0.0, 0.0));
        p.pp = 1;
        assert_eq!(buffers(&w, &p, 0, 1.0), (0.0, 0.0));
    }

    #[test]
    fn torch_interleaved_warm_up_stops_at_every_chunk_of_every_micro_batch() {
        let mut p = pc(8, true);
        (p.pp, p.vp, p.schedule) = (8, 2, Schedule::Interleaved);
        // m = pp: the warm-up (22 chunk-forwards on rank 0) is capped at all 16: 8 stage-micro-batches.
        assert_eq!(in_flight(&p, 8, true), 8.0);
        assert_eq!(in_flight(&p, 16, true), 8.0 * (1.0 + 7.0 / 16.0));
        // Megatron's path as it was.
        assert_eq!(in_flight(&p, 8, false), 8.0 * (1.0 + 7.0 / 16.0));
        // The last rank warms up (vp - 1) x pp = 8 chunk-forwards of its first chunk, plus one.
        assert_eq!(in_flight_middle(&p, 16, 7), 4.5);
    }

    /// Llama-3.2-1B's shape (hidden 2048, 32 query and 8 key/value heads of 64, SwiGLU 8192, vocab
    /// 128256) on a GPT-3 body.
    fn llama_1b_shape() -> Model {
        Model {
            n_layers: 16,
            hidden: 2048,
            n_heads: 32,
            n_kv_heads: 8,
            head_dim: 64,
            ffn_hidden: 8192,
            ffn_kind: FfnKind::Gated,
            vocab: 128_256,
            tied_embeddings: true,
            norm: NormKind::RmsNorm,
            ..gpt3_175b()
        }
    }

    #[test]
    fn hf_compile_layer_keeps_what_the_compiled_graph_saved() {
        // calibration/runs/raw/float8-h100-2026-11-25/saved.csv, bf16, batch 2 x 4096: the
        // 2-layer graph saves 4,483,588,268 B, the 1-layer one 3,622,625,436 B; of the difference
        // 121,634,816 B are the layer's autocast weight copies (counted apart), the rest is the
        // layer's activations: both norms' fp32 inputs, their bf16 outputs, q, k and v repeated to
        // 32 heads, SDPA's output and log-sum-exp, gate, up and the down projection's input.
        let m = llama_1b_shape();
        let w = Workload {
            micro_batch: 2,
            global_batch: 2,
            seq: 4096,
            stack: Stack::HfCompile,
            dropout: false,
            flash_attention: true,
            ..korthikanti(Recompute::None)
        };
        let measured = (4_483_588_268.0 - 3_622_625_436.0) - 121_634_816.0;
        let layer = layer_activation_bytes(&m, &pc(1, false), &w, false);
        assert!((layer / measured - 1.0).abs() < 1e-3, "{layer} vs {measured}");
        // k and v are saved repeated to all query heads: the layer keeps as much as a model with
        // as many key/value heads as query heads, and 24 heads' k and v more than the torch-compile
        // stack (no `repeat_kv`) with the same norms.
        let mha = Model { n_kv_heads: 32, ..m.clone() };
        assert_eq!(layer, layer_activation_bytes(&mha, &pc(1, false), &w, false));
        let titan = Workload { stack: Stack::TorchCompile, ..w.clone() };
        let fp32_norms = 2.0 * 2.0 * 8192.0 * 2048.0;
        let repeat = 2.0 * 2.0 * 8192.0 * 24.0 * 64.0;
        assert_eq!(layer - layer_activation_bytes(&m, &pc(1, false), &titan, false), fp32_norms + repeat);
        // The compiled loss: 4 B per logit (the saved bf16 logits and their bf16 gradient) plus
        // the final norm's fp32 input.
        let p = plan(&m, &pc(1, false), &w, Bytes::gib(80.0));
        assert_eq!(p.logits.value(), 8192.0 * 128_256.0 * 4.0 + 4.0 * 8192.0 * 2048.0);
    }

    #[test]
    fn torchao_float8_under_compile_keeps_no_linear_input_and_no_weight_copy() {
        let m = gpt3_175b();
        let p = pc(1, false);
        let mut w = korthikanti(Recompute::None);
        (w.stack, w.dropout, w.flash_attention) = (Stack::TorchCompile, false, true);
        let bf16 = layer_activation_bytes(&m, &p, &w, false);
        let bf16_plan = plan(&m, &p, &w, Bytes::gib(8000.0));
        w.precision = Dtype::Fp8;
        let fp8 = layer_activation_bytes(&m, &p, &w, false);
        // The two norm outputs (bf16) and the dense FFN's down-projection input (bf16) are rebuilt
        // in backward, not saved (calibration/runs/raw/float8-h100-2026-11-25/saved.csv).
        let tokens = (w.sequences() * w.q_len()) as f64;
        let want = 2.0 * 2.0 * tokens * m.hidden as f64 + 2.0 * tokens * m.ffn_hidden as f64;
        assert!((bf16 - fp8 - want).abs() < 1e-9 * bf16, "{bf16} {fp8} {want}");
        // Rowwise keeps the same (measured identical).
        w.fp8_recipe = crate::workload::Fp8Recipe::Rowwise;
        assert_eq!(layer_activation_bytes(&m, &p, &w, false), fp8);
        // Autocast's bf16 weight copies: only the LM head's stays (the recipes skip it).
        let fp8_plan = plan(&m, &p, &w, Bytes::gib(8000.0));
        let head = m.vocab as f64 * m.hidden as f64 * 2.0;
        assert!((fp8_plan.transient.value() - head).abs() < 1e-6 * head, "{}", fp8_plan.transient.value());
        assert!(bf16_plan.transient.value() > 10.0 * head);
    }

    #[test]
    fn megatron_fp8_keeps_the_quantized_linear_inputs_not_the_bf16_ones() {
        let m = gpt3_175b();
        let pc =
            ParallelConfig { tp: 1, sp: false, pp: 1, vp: 1, dp: 1, cp: 1, ep: 1, etp: 1, zero: 1, schedule: Schedule::OneFOneB, split: Default::default() };
        let mut w = korthikanti(Recompute::None);
        w.dropout = false;
        w.flash_attention = true;
        let bf16 = layer_activation_bytes(&m, &pc, &w, false);
        w.precision = Dtype::Fp8;
        let fp8 = layer_activation_bytes(&m, &pc, &w, false);
        // One byte less per element of the two norm outputs (qkv and fc1 inputs) and of the fc2
        // input; one byte more for the output projection's fp8 copy of the attention output.
        let (tokens, h, f) = ((w.micro_batch * w.seq) as f64, m.hidden as f64, m.ffn_hidden as f64);
        assert!((bf16 - fp8 - tokens * (h + f)).abs() < 1e-6 * bf16, "{bf16} {fp8}");
        // The torch stacks keep bf16 inputs (autocast).
        w.stack = Stack::TorchCompile;
        assert_eq!(saved_linear_input_bytes(&w), 2.0);
    }

    #[test]
    fn lora_keeps_gradients_and_optimizer_of_the_adapters_only() {
        use crate::workload::{Lora, LoraTarget};
        let m = gpt3_175b();
        let mut w = korthikanti(Recompute::Full);
        w.flash_attention = true;
        w.dropout = false;
        let p = pc(8, true);
        let full = plan(&m, &p, &w, Bytes::gib(1e6));
        let lora = Lora::new(16, LoraTarget::ALL.to_vec());
        w.lora = Some(lora.clone());
        let tuned = plan(&m, &p, &w, Bytes::gib(1e6));
        let adapters = crate::workload::lora::adapter_params(&m, &lora) / 8.0;
        // Megatron: fp32 main grads (4 B) and fp32 master + Adam m, v (12 B) of the adapters only.
        assert!((tuned.gradients.value() - 4.0 * adapters).abs() < 1.0, "{:?}", tuned.gradients);
        assert!((tuned.optimizer.value() - 12.0 * adapters).abs() < 1.0, "{:?}", tuned.optimizer);
        // Frozen bf16 base + bf16 adapters; the same activations.
        let (dense, experts) = params_on_rank(&m, &p, 0, 0);
        assert!((tuned.weights.value() - 2.0 * (dense + experts + adapters)).abs() < 1.0);
        assert_eq!(tuned.activations, full.activations);
        // 2 + 4 + 12 = 18 B per parameter in full fine-tuning vs ~2 under LoRA.
        let states = |p: &MemoryPlan| (p.weights + p.gradients + p.optimizer).value();
        assert!(states(&tuned) < 0.12 * states(&full), "{} vs {}", states(&tuned), states(&full));
    }

    #[test]
    fn hf_grouped_experts_peak_holds_its_hidden_sized_locals_and_what_the_allocator_strands() {
        // Qwen3-MoE-s at 8 x 4096 tokens: 262,144 routed rows of hidden 2048, experts 768 wide.
        let (t, h, f) = (32768.0, 2048.0, 768.0);
        let rows = t * 8.0;
        let bf16 = hf_grouped_experts_peak(t, h, 64, 8, f, false);
        // The gathered rows, the masked down output, the weighted rows and their gather back:
        // 8 B per row and hidden unit, plus the ids and the router's outputs (under 1%).
        let hidden_sized = 8.0 * rows * h;
        assert!(bf16.allocated >= hidden_sized && bf16.allocated < 1.01 * hidden_sized, "{bf16:?}");
        // fp32 routed weights (Mixtral, DeepSeek): the last two are fp32, 12 B.
        let fp32 = hf_grouped_experts_peak(t, h, 64, 8, f, true);
        assert!(fp32.allocated >= 12.0 * rows * h && fp32.allocated < 1.01 * 12.0 * rows * h, "{fp32:?}");
        // Narrow experts: the two gate/up-sized blocks (3,072 B a row each) freed midway cannot
        // serve the hidden-sized (4,096 B) requests that follow, so they stay reserved on top.
        assert!((bf16.reserved - bf16.allocated - 2.0 * rows * 2.0 * f * 2.0).abs() < 0.01 * bf16.allocated, "{bf16:?}");
        // Wide experts (Mixtral's 5,632): the freed blocks serve the later requests.
        let wide = hf_grouped_experts_peak(t, h, 8, 2, 5632.0, true);
        assert!(wide.reserved - wide.allocated < 0.01 * wide.allocated, "{wide:?}");
    }
}
