//! LLM architecture: dense (MHA/GQA), MoE (routed + shared experts), MLA. Built by `config` from
//! `models/*.toml` or a Hugging Face `config.json`. Hybrid Mamba-attention models: `hybrid`.

pub mod hybrid;

pub use hybrid::{Block, Hybrid, KindCounts, LayerKind, Mamba2};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FfnKind {
    /// Gated: up, gate and down projections (SwiGLU / GeGLU); 3 matrices.
    Gated,
    /// Plain: up and down projections with GELU; 2 matrices.
    Plain,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NormKind {
    RmsNorm,
    LayerNorm,
}

/// Where a transformer layer's norms sit around its attention and MLP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NormPlacement {
    /// A norm before attention and one before the MLP (Llama, Qwen, Mistral, Phi-3).
    #[default]
    Pre,
    /// Gemma 2/3: four per layer, before and after attention and before and after the MLP
    /// (transformers 5.17.0 `Gemma2DecoderLayer`: `input_layernorm`, `post_attention_layernorm`,
    /// `pre_feedforward_layernorm`, `post_feedforward_layernorm`).
    PrePost,
    /// OLMo-2: one after attention and one after the MLP, none before (`Olmo2DecoderLayer`:
    /// `post_attention_layernorm`, `post_feedforward_layernorm` on the branch outputs), so the
    /// projections read the residual stream itself.
    Post,
}

impl NormPlacement {
    /// Norms per transformer layer.
    pub fn per_layer(self) -> u64 {
        match self {
            NormPlacement::Pre | NormPlacement::Post => 2,
            NormPlacement::PrePost => 4,
        }
    }
}

/// How an RMSNorm rounds, as each family's transformers module computes it (5.17.0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RmsStyle {
    /// `LlamaRMSNorm`: normalize in fp32, cast to the input dtype, then `weight *`.
    #[default]
    CastThenScale,
    /// `Olmo2RMSNorm`: normalize in fp32, `(weight * x)` in fp32, then cast.
    ScaleThenCast,
    /// `Gemma2RMSNorm` / `Gemma3RMSNorm`: normalize in fp32, `* (1.0 + weight.float())`, then
    /// `type_as(x)`: one kernel more (the `1 + weight`).
    OffsetScaleThenCast,
}

/// How a family's transformer layer computes beyond its shapes, where that changes its kernels:
/// where the norms sit and how they round, QK-norm's scope, the embedding's scale, the final
/// logit soft-cap and fused projections. `LayerStyle::default()` is Llama's.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LayerStyle {
    pub norm_placement: NormPlacement,
    pub rms_style: RmsStyle,
    /// QK-norm over the whole query and key projections (OLMo-2's `q_norm` over `n_heads x
    /// head_dim`, `k_norm` over `n_kv_heads x head_dim`) rather than per head (Qwen3, Gemma 3).
    /// The same elements either way; weights of `(n_heads + n_kv_heads) head_dim` per layer.
    pub qk_norm_projection: bool,
    /// The embedding's output multiplied by `sqrt(hidden)` (Gemma's
    /// `Gemma2TextScaledWordEmbedding`): one elementwise kernel over the tokens' hidden states.
    pub embedding_scale: bool,
    /// Final logit soft-capping, `cap * tanh(logits / cap)` over the vocabulary (Gemma 2's
    /// `final_logit_softcapping`, 30.0): three elementwise kernels over tokens x vocab.
    pub final_logit_softcap: Option<f64>,
    /// One GEMM for q, k and v and one for gate and up (Phi-3's `qkv_proj`, `gate_up_proj`).
    pub fused_projections: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    Rope,
    /// Learned absolute position embeddings (GPT-2/3), `max_seq_len` x hidden parameters.
    Learned,
    /// No position embedding (Nemotron-H: Megatron-Bridge's `HybridModelProvider`
    /// `position_embedding_type = "none"`; transformers' `NemotronHAttention` applies no RoPE).
    None,
}

/// The most multi-token-prediction modules a model file may declare: each one is a whole
/// transformer layer priced beside the loss; DeepSeek-V3 has 1 and its report tried 2 (sec.
/// 2.2). A bound on input, not a property of any model.
pub const MAX_MTP_LAYERS: u32 = 16;

/// Mixture-of-experts feed-forward layers.
#[derive(Debug, Clone, PartialEq)]
pub struct Moe {
    pub n_experts: u32,
    pub top_k: u32,
    pub expert_ffn_hidden: u64,
    pub n_shared_experts: u32,
    pub shared_expert_ffn_hidden: u64,
    /// The first layers that keep a dense FFN (DeepSeek-V3: 3), with `Model::ffn_hidden`.
    pub first_dense_layers: u32,
    /// After those, every `layer_step`-th layer is MoE and the others dense (1 = every layer;
    /// Llama-4 Maverick: 2). Layer `i` is MoE when `(i - first_dense_layers + 1)` is a multiple of
    /// it: transformers' `moe_layers = range(step - 1, n_layers, step)` (Llama-4's
    /// `interleave_moe_layer_step`) and `(layer_idx + 1) % decoder_sparse_step == 0` (Qwen2-MoE).
    pub layer_step: u32,
    /// Group-limited routing (DeepSeek-V3's node-limited routing): the experts are split into
    /// `expert_groups` equal groups and a token's `top_k` experts are taken from its best
    /// `group_top_k` groups only (Hugging Face `n_group` / `topk_group`, Megatron
    /// `moe_router_num_groups` / `moe_router_group_topk`). 0 = no groups.
    pub expert_groups: u32,
    pub group_top_k: u32,
    /// How the router turns its logits into the routed experts' weights ([`Router`]).
    pub router: Router,
}

/// The router's score function (Megatron-Core 0.16.1 `moe_router_score_function`; Hugging Face
/// `scoring_func`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouterScore {
    /// Softmax over the experts' logits (Mixtral, Qwen3-MoE, GPT-OSS over its top-k logits).
    Softmax,
    /// An independent sigmoid per expert (DeepSeek-V3, Nemotron-3 MoE, Llama-4).
    Sigmoid,
}

impl RouterScore {
    pub fn name(self) -> &'static str {
        match self {
            RouterScore::Softmax => "softmax",
            RouterScore::Sigmoid => "sigmoid",
        }
    }
}

/// The top-k normalization variant of an MoE router: what transformers 5.17.0's routers
/// (`MixtralTopKRouter`, `Qwen3MoeTopKRouter`, `DeepseekV3TopkRouter`, `GptOssTopKRouter`,
/// `Llama4Router`, `NemotronHTopkRouter`) and Megatron-Core 0.16.1's
/// `moe_utils.topk_routing_with_score_function` compute after the router's linear:
/// score (softmax or sigmoid), add the expert bias for the choice only (sigmoid), take the top-k,
/// divide the k weights by their sum (`norm_topk_prob`), multiply by `routed_scaling_factor`.
/// Each step is a kernel over tokens x experts (score, bias, top-k) or tokens x k (the sum and
/// division, the scaling) in eager PyTorch; Transformer Engine's
/// `fused_topk_with_score_function` (`moe_router_fusion`) does them all in one kernel.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Router {
    pub score: RouterScore,
    /// Renormalize the k chosen weights to sum to 1 (Hugging Face `norm_topk_prob`). Megatron-Core
    /// renormalizes always with sigmoid (top-k > 1) and, with softmax, when
    /// `moe_router_pre_softmax` is off (softmax over the k chosen logits: the same weights, as
    /// GPT-OSS's router computes them).
    pub norm_topk_prob: bool,
    /// The weights' multiplier after the top-k (Hugging Face `routed_scaling_factor`, Megatron
    /// `moe_router_topk_scaling_factor`; DeepSeek-V3 2.5). 1 = none.
    pub routed_scaling_factor: f64,
    /// A per-expert bias added to the scores for the choice only, updated from the expert loads
    /// outside the gradient (DeepSeek-V3's auxiliary-loss-free balancing: Hugging Face
    /// `e_score_correction_bias` with `topk_method` "noaux_tc"; Megatron
    /// `moe_router_enable_expert_bias`).
    pub expert_bias: bool,
    /// The routed weights reach the experts in fp32 (4 B), not in the activations' bf16 (2 B).
    /// transformers 5.17.0: `MixtralTopKRouter` returns its fp32 softmax values, and
    /// `DeepseekV3TopkRouter` / `DeepseekV2TopkRouter` / `NemotronHTopkRouter` score an fp32
    /// linear; `Qwen3MoeTopKRouter` and Qwen2-MoE's cast the weights back to the logits' dtype
    /// (`.to(router_logits.dtype)`), as `Llama4Router` and `GptOssTopKRouter` keep them. The
    /// experts' weighted rows then take the wider dtype (`grouped_mm_experts_forward`:
    /// `proj_out * sample_weights_g`), which the `hf-*` memory plan counts.
    pub weights_fp32: bool,
}

impl Router {
    /// Softmax over the experts, top-k, no renormalization, no scaling, no bias: the defaults of
    /// transformers' `Qwen3MoeConfig` (`norm_topk_prob` false) and of Megatron-Core's router
    /// (`moe_router_score_function` "softmax", `moe_router_topk_scaling_factor` None).
    pub const SOFTMAX_TOPK: Router =
        Router { score: RouterScore::Softmax, norm_topk_prob: false, routed_scaling_factor: 1.0, expert_bias: false, weights_fp32: true };
}

/// Sliding-window (local) attention on some layers (GPT-OSS: every other layer, window 128;
/// transformers' `sliding_window` and `layer_types`, Megatron's `window_size` and
/// `window_attn_skip_freq`). A query at position `i` attends to keys `i - window + 1 ..= i`:
/// transformers' `sliding_window_overlay` keeps `kv_idx > q_idx - sliding_window`
/// (transformers 5.24.0 `masking_utils.py`), Megatron-Bridge 0.6.2's `GPTOSSBridge` sets
/// `window_size = (sliding_window - 1, 0)`.
#[derive(Debug, Clone, PartialEq)]
pub struct SlidingWindow {
    /// Keys a query sees, itself included.
    pub window: u64,
    /// One entry per attention layer, first to last: `true` = sliding, `false` = full attention.
    pub sliding: Vec<bool>,
}

impl SlidingWindow {
    pub fn n_sliding(&self) -> u64 {
        self.sliding.iter().filter(|s| **s).count() as u64
    }

    /// The mean keys a query attends to on a sliding layer of a causal sequence of `s` tokens:
    /// the query at (0-based) position `i` sees `min(i + 1, window)`.
    pub fn mean_keys(&self, s: u64) -> f64 {
        let w = self.window.min(s) as f64;
        let s = s as f64;
        // Queries 0..w-1 see i + 1 keys (w (w + 1) / 2 in all), the other s - w see w each.
        (w * (w + 1.0) / 2.0 + (s - w) * w) / s
    }
}

/// Multi-head latent attention (DeepSeek-V2/V3).
#[derive(Debug, Clone, PartialEq)]
pub struct Mla {
    /// 0 = no low-rank query projection.
    pub q_lora_rank: u64,
    pub kv_lora_rank: u64,
    pub qk_nope_head_dim: u64,
    pub qk_rope_head_dim: u64,
    pub v_head_dim: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    pub name: String,
    pub n_layers: u64,
    pub hidden: u64,
    pub n_heads: u64,
    pub n_kv_heads: u64,
    pub head_dim: u64,
    /// FFN width of dense layers.
    pub ffn_hidden: u64,
    pub ffn_kind: FfnKind,
    pub vocab: u64,
    pub tied_embeddings: bool,
    pub norm: NormKind,
    pub position: Position,
    pub max_seq_len: u64,
    /// Bias terms on linear layers (GPT-2/3 style), and on QKV only (Qwen2).
    pub linear_bias: bool,
    pub qkv_bias: bool,
    /// RMSNorm on each head's queries and keys before RoPE (Qwen3).
    pub qk_norm: bool,
    /// Norm placement and rounding, QK-norm scope, embedding scale, logit soft-cap, fused
    /// projections ([`LayerStyle`]; Llama's by default).
    pub style: LayerStyle,
    pub moe: Option<Moe>,
    pub mla: Option<Mla>,
    /// A hybrid Mamba-attention layer pattern (Nemotron-H); `None` = every layer a transformer
    /// layer.
    pub hybrid: Option<Hybrid>,
    /// Sliding-window attention layers (GPT-OSS); `None` = every attention layer full.
    pub sliding_window: Option<SlidingWindow>,
    /// Attention sinks (GPT-OSS): one learned logit per query head added to each softmax
    /// denominator (transformers' `GptOssAttention.sinks`, `n_heads` parameters per layer;
    /// Megatron's `softmax_type = "learnable"`). Negligible FLOPs; which kernels run it is noted
    /// in ARCHITECTURE.md.
    pub attention_sinks: bool,
    /// Multi-token-prediction modules the architecture has (DeepSeek-V3: 1; HF `config.json`
    /// `num_nextn_predict_layers`). Not part of [`Model::params`] (the main model, which is what
    /// published counts count); a training run builds them only when its workload asks
    /// (`Workload::mtp_layers`, Megatron's `--mtp-num-layers`).
    pub mtp_layers: u32,
    /// The parameter count its authors publish, for the catalog test.
    pub published_params: Option<f64>,
}

/// Parameter counts by part, for one whole (unsharded) model.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ParamCount {
    pub embedding: f64,
    pub lm_head: f64,
    pub attention: f64,
    pub dense_ffn: f64,
    /// Routed experts, all of them.
    pub experts: f64,
    pub shared_experts: f64,
    pub router: f64,
    pub norms: f64,
    /// Mamba-2 mixers (hybrid models).
    pub mamba: f64,
}

impl ParamCount {
    pub fn total(&self) -> f64 {
        self.embedding + self.lm_head + self.attention + self.dense_ffn + self.experts + self.shared_experts + self.router + self.norms + self.mamba
    }
}

impl Model {
    pub fn is_moe(&self) -> bool {
        self.moe.is_some()
    }

    fn ffn_matrices(&self) -> f64 {
        match self.ffn_kind {
            FfnKind::Gated => 3.0,
            FfnKind::Plain => 2.0,
        }
    }

    /// Layers whose FFN is a mixture of experts (a hybrid model's `E` blocks).
    pub fn n_moe_layers(&self) -> u64 {
        match (&self.moe, &self.hybrid) {
            (Some(_), Some(hy)) => hy.count(Block::Moe),
            (Some(m), None) => self.n_layers.saturating_sub(m.first_dense_layers as u64) / m.layer_step.max(1) as u64,
            (None, _) => 0,
        }
    }

    /// Whether layer `i` (0-based) has a mixture-of-experts FFN: a hybrid model's `E` blocks, or a
    /// transformer's layers after the leading dense ones, every `Moe::layer_step`-th.
    /// Parameter tensors of the model as Hugging Face transformers builds it
    /// (`len(list(model.parameters()))`): the embedding, the final norm and an untied LM head; per
    /// decoder layer its two norms, the attention's projections (q, k, v, o; MLA's q_a, q_a norm,
    /// q_b, kv_a, kv_a norm, kv_b, o), their biases, QK norms, and the MLP's matrices or, in an MoE
    /// layer, the router, the experts' two fused tensors (transformers 5.x `gate_up_proj`,
    /// `down_proj`) and the shared experts' matrices; a Mamba layer's in/out projections, conv
    /// weight and bias, dt bias, A log, D and norm. The per-tensor host work of optimizers and
    /// gradient clipping follows it (`step::hf_trainer_host`).
    pub fn hf_param_tensors(&self) -> u64 {
        let norm = if self.norm == NormKind::LayerNorm { 2 } else { 1 };
        let attention = match &self.mla {
            Some(m) => (if m.q_lora_rank > 0 { 3 } else { 1 }) + 4,
            // Phi-3's fused `qkv_proj`: one weight for q, k and v.
            None => {
                (if self.style.fused_projections { 2 } else { 4 })
                    + if self.qkv_bias { 3 } else { 0 }
                    + if self.linear_bias { 1 } else { 0 }
                    + if self.qk_norm { 2 } else { 0 }
            }
        };
        // Phi-3's fused `gate_up_proj`: one weight for gate and up.
        let matrices = self.ffn_matrices() as u64 - u64::from(self.style.fused_projections && self.ffn_kind == FfnKind::Gated);
        let ffn = matrices * if self.linear_bias { 2 } else { 1 };
        let moe_ffn = self.moe.as_ref().map_or(0, |m| 1 + 2 + if m.n_shared_experts > 0 { self.ffn_matrices() as u64 } else { 0 });
        let layer_norms = self.style.norm_placement.per_layer() * norm;
        let per_layer: u64 = self
            .layer_kinds()
            .iter()
            .map(|k| match k {
                LayerKind::Dense => layer_norms + attention + ffn,
                LayerKind::Moe => layer_norms + attention + moe_ffn,
                LayerKind::Attention => norm + attention,
                LayerKind::Mlp => norm + ffn,
                LayerKind::MoeMlp => norm + moe_ffn,
                LayerKind::Mamba => 8,
            })
            .sum();
        per_layer + 1 + norm + if self.tied_embeddings { 0 } else { 1 }
    }

    pub fn is_moe_layer(&self, i: u64) -> bool {
        match (&self.moe, &self.hybrid) {
            (Some(_), Some(hy)) => hy.pattern.get(i as usize) == Some(&Block::Moe),
            (Some(m), None) => i >= m.first_dense_layers as u64 && (i - m.first_dense_layers as u64 + 1).is_multiple_of(m.layer_step.max(1) as u64),
            (None, _) => false,
        }
    }

    /// Layers with a dense FFN (a hybrid model's `-` blocks).
    pub fn n_dense_layers(&self) -> u64 {
        match &self.hybrid {
            Some(hy) => hy.count(Block::Mlp),
            None => self.n_layers - self.n_moe_layers(),
        }
    }

    /// Layers with self-attention.
    pub fn n_attention_layers(&self) -> u64 {
        match &self.hybrid {
            Some(hy) => hy.count(Block::Attention),
            None => self.n_layers,
        }
    }

    /// Mamba-2 layers.
    pub fn n_mamba_layers(&self) -> u64 {
        self.hybrid.as_ref().map_or(0, |hy| hy.count(Block::Mamba))
    }

    /// What each layer is, first to last: a transformer model's leading dense layers then its MoE
    /// layers, or a hybrid model's pattern.
    pub fn layer_kinds(&self) -> Vec<LayerKind> {
        match &self.hybrid {
            Some(hy) => hy.pattern.iter().map(|b| LayerKind::of_block(*b)).collect(),
            None => (0..self.n_layers).map(|i| if self.is_moe_layer(i) { LayerKind::Moe } else { LayerKind::Dense }).collect(),
        }
    }

    /// Parameters of one layer of `kind`, split into those TP shards (attention, FFN, Mamba
    /// mixers, shared experts), those every TP rank holds whole (norms, the router) and the
    /// routed experts (sharded by EP x ETP).
    pub fn layer_params(&self, kind: LayerKind) -> (f64, f64, f64) {
        let h = self.hidden as f64;
        let norm = match self.norm {
            NormKind::RmsNorm => h,
            NormKind::LayerNorm => 2.0 * h,
        };
        let moe = || match &self.moe {
            Some(m) => (
                m.n_shared_experts as f64 * self.ffn_params(m.shared_expert_ffn_hidden),
                m.n_experts as f64 * h,
                m.n_experts as f64 * self.ffn_params(m.expert_ffn_hidden),
            ),
            None => (0.0, 0.0, 0.0),
        };
        let layer_norms = self.style.norm_placement.per_layer() as f64 * norm + self.qk_norm_params();
        match kind {
            LayerKind::Dense => (self.attention_params_per_layer() + self.ffn_params(self.ffn_hidden), layer_norms, 0.0),
            LayerKind::Moe => {
                let (shared, router, experts) = moe();
                (self.attention_params_per_layer() + shared, layer_norms + router, experts)
            }
            LayerKind::Mamba => (self.hybrid.as_ref().map_or(0.0, |hy| hy.mamba.params(self.hidden)), norm, 0.0),
            LayerKind::Attention => (self.attention_params_per_layer(), norm, 0.0),
            LayerKind::Mlp => (self.ffn_params(self.ffn_hidden), norm, 0.0),
            LayerKind::MoeMlp => {
                let (shared, router, experts) = moe();
                (shared, norm + router, experts)
            }
        }
    }

    /// Attention parameters of one layer (weights and biases).
    pub fn attention_params_per_layer(&self) -> f64 {
        let h = self.hidden as f64;
        if let Some(mla) = &self.mla {
            let nh = self.n_heads as f64;
            let qk_head = (mla.qk_nope_head_dim + mla.qk_rope_head_dim) as f64;
            let q = if mla.q_lora_rank > 0 {
                let r = mla.q_lora_rank as f64;
                h * r + r + r * nh * qk_head // down, its norm, up
            } else {
                h * nh * qk_head
            };
            let r = mla.kv_lora_rank as f64;
            let kv = h * (r + mla.qk_rope_head_dim as f64) + r + r * nh * (mla.qk_nope_head_dim + mla.v_head_dim) as f64;
            let o = nh * mla.v_head_dim as f64 * h;
            return q + kv + o;
        }
        let q = (self.n_heads * self.head_dim) as f64;
        let kv = (self.n_kv_heads * self.head_dim) as f64;
        let weights = h * (q + 2.0 * kv) + q * h;
        let bias = if self.linear_bias {
            q + 2.0 * kv + h
        } else if self.qkv_bias {
            q + 2.0 * kv
        } else {
            0.0
        };
        let sinks = if self.attention_sinks { self.n_heads as f64 } else { 0.0 };
        weights + bias + sinks
    }

    /// Attention layers that attend over a sliding window (0 without one).
    pub fn n_sliding_layers(&self) -> u64 {
        self.sliding_window.as_ref().map_or(0, SlidingWindow::n_sliding)
    }

    /// The share of the attention layers that are sliding-window layers (0 without).
    pub fn sliding_share(&self) -> f64 {
        match self.n_attention_layers() {
            0 => 0.0,
            n => self.n_sliding_layers() as f64 / n as f64,
        }
    }

    /// Cached (token, layer) pairs for one sequence of `tokens` held in a KV cache by an engine
    /// that keeps only the window on sliding layers (TensorRT-LLM, vLLM, transformers'
    /// `DynamicSlidingWindowLayer`): full layers hold every token, sliding ones at most
    /// `window`. Without sliding layers: `n_attention_layers x tokens`.
    pub fn kv_cached_layer_tokens(&self, tokens: f64) -> f64 {
        let full = (self.n_attention_layers() - self.n_sliding_layers()) as f64 * tokens;
        let sliding = self.sliding_window.as_ref().map_or(0.0, |sw| sw.n_sliding() as f64 * tokens.min(sw.window as f64));
        full + sliding
    }

    /// The share of a plain KV cache's (token, layer) pairs that a window-keeping cache holds for
    /// one sequence of `tokens` ([`Model::kv_cached_layer_tokens`] over every attention layer's
    /// tokens): 1 without sliding layers.
    pub fn kv_cached_share(&self, tokens: f64) -> f64 {
        match self.n_attention_layers() {
            0 => 1.0,
            n => self.kv_cached_layer_tokens(tokens) / (n as f64 * tokens).max(1.0),
        }
    }

    fn ffn_params(&self, width: u64) -> f64 {
        let h = self.hidden as f64;
        let f = width as f64;
        let bias = if self.linear_bias { f * (self.ffn_matrices() - 1.0) + h } else { 0.0 };
        self.ffn_matrices() * h * f + bias
    }

    /// Norm parameters of one layer (two norms, four under Gemma's [`NormPlacement::PrePost`],
    /// one per hybrid block; LayerNorm has a bias too; OLMo-2's whole-projection QK-norm weights).
    fn norm_params_per_layer(&self) -> f64 {
        let per_norm = match self.norm {
            NormKind::RmsNorm => self.hidden as f64,
            NormKind::LayerNorm => 2.0 * self.hidden as f64,
        };
        if self.hybrid.is_some() {
            per_norm
        } else {
            self.style.norm_placement.per_layer() as f64 * per_norm + self.qk_norm_params()
        }
    }

    /// QK-norm weights of one layer counted among the norms: OLMo-2's over the whole projections,
    /// `(n_heads + n_kv_heads) head_dim` (16 layers x 4,096 in OLMo-2 1B). The per-head norms of
    /// Qwen3 and Gemma 3 (`2 head_dim` per layer, a few parts per million) are left out, as
    /// before.
    fn qk_norm_params(&self) -> f64 {
        if self.qk_norm && self.style.qk_norm_projection {
            ((self.n_heads + self.n_kv_heads) * self.head_dim) as f64
        } else {
            0.0
        }
    }

    pub fn params(&self) -> ParamCount {
        let h = self.hidden as f64;
        let l = self.n_layers as f64;
        let mut p = ParamCount {
            embedding: self.vocab as f64 * h + if self.position == Position::Learned { self.max_seq_len as f64 * h } else { 0.0 },
            lm_head: if self.tied_embeddings { 0.0 } else { self.vocab as f64 * h },
            attention: self.n_attention_layers() as f64 * self.attention_params_per_layer(),
            norms: l * self.norm_params_per_layer()
                + match self.norm {
                    NormKind::RmsNorm => h,
                    NormKind::LayerNorm => 2.0 * h,
                },
            dense_ffn: self.n_dense_layers() as f64 * self.ffn_params(self.ffn_hidden),
            ..ParamCount::default()
        };
        if let Some(m) = &self.moe {
            let n = self.n_moe_layers() as f64;
            p.experts = n * m.n_experts as f64 * self.ffn_params(m.expert_ffn_hidden);
            p.shared_experts = n * m.n_shared_experts as f64 * self.ffn_params(m.shared_expert_ffn_hidden);
            p.router = n * m.n_experts as f64 * h;
        }
        if let Some(hy) = &self.hybrid {
            p.mamba = hy.count(Block::Mamba) as f64 * hy.mamba.params(self.hidden);
        }
        p
    }

    /// Parameters one token passes through (routed experts counted top-k times, not all).
    pub fn active_params(&self) -> f64 {
        let p = self.params();
        match &self.moe {
            None => p.total(),
            Some(m) => p.total() - p.experts + p.experts * m.top_k as f64 / m.n_experts as f64,
        }
    }

    /// Matmul parameters a token passes through in one multi-token-prediction module: the
    /// projection, the layer's attention and (active) FFN, and the shared output head it runs
    /// again (its own loss), as [`Model::matmul_params_per_token`] counts them.
    pub fn mtp_matmul_params_per_token(&self) -> f64 {
        let h = self.hidden as f64;
        let ffn = match &self.moe {
            Some(m) if self.n_moe_layers() > 0 => {
                m.top_k as f64 * self.ffn_params(m.expert_ffn_hidden)
                    + m.n_shared_experts as f64 * self.ffn_params(m.shared_expert_ffn_hidden)
                    + m.n_experts as f64 * h
            }
            _ => self.ffn_params(self.ffn_hidden),
        };
        2.0 * h * h + self.attention_params_per_layer() + ffn + self.vocab as f64 * h
    }

    /// Non-embedding parameters a token passes through in matrix multiplies (the `N` of 6N):
    /// every linear layer including the LM head, excluding the embedding lookup and the norms.
    pub fn matmul_params_per_token(&self) -> f64 {
        let p = self.params();
        let experts_active = match &self.moe {
            None => 0.0,
            Some(m) => p.experts * m.top_k as f64 / m.n_experts as f64,
        };
        let lm_head = self.vocab as f64 * self.hidden as f64;
        let mamba = self.hybrid.as_ref().map_or(0.0, |hy| hy.count(Block::Mamba) as f64 * hy.mamba.matmul_params(self.hidden));
        p.attention + p.dense_ffn + experts_active + p.shared_experts + p.router + lm_head + mamba
    }

    /// Parameters of one multi-token-prediction module as Megatron-Core builds it
    /// (`megatron/core/transformer/multi_token_prediction.py`, DeepSeek-V3 Technical Report sec.
    /// 2.2): the RMSNorms of the previous depth's hidden state and of the next token's embedding
    /// (`hnorm`, `enorm`), the projection of their concatenation back to the hidden size
    /// (`eh_proj`, 2h x h, no bias), one transformer layer of the model's last layer's kind (MoE
    /// for DeepSeek-V3), and its final norm. The embedding and the output head are the main
    /// model's (shared), so they are not counted here. DeepSeek-V3: 11.7B, which with the copies of
    /// the embedding and head the Hub checkpoint stores (2 x 0.93B) is its stated 14B MTP module.
    pub fn mtp_params_per_layer(&self) -> f64 {
        let h = self.hidden as f64;
        let p = self.params();
        let layer = self.attention_params_per_layer()
            + self.norm_params_per_layer()
            + match &self.moe {
                Some(_) if self.n_moe_layers() > 0 => (p.experts + p.shared_experts + p.router) / self.n_moe_layers() as f64,
                _ => self.ffn_params(self.ffn_hidden),
            };
        2.0 * h + 2.0 * h * h + layer + h
    }

    /// Key/value (or MLA latent) bytes cached per token per layer, as elements.
    pub fn kv_elements_per_token_per_layer(&self) -> f64 {
        match &self.mla {
            Some(mla) => (mla.kv_lora_rank + mla.qk_rope_head_dim) as f64,
            None => 2.0 * (self.n_kv_heads * self.head_dim) as f64,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// GPT-3 175B (Brown et al. 2020, Table 2.1): 96 layers, d_model 12288, 96 heads, vocab 50257
    /// (GPT-2 BPE), context 2048, learned positions, LayerNorm, biases, tied embeddings.
    pub fn gpt3_175b() -> Model {
        Model {
            name: "gpt3-175b".into(),
            n_layers: 96,
            hidden: 12288,
            n_heads: 96,
            n_kv_heads: 96,
            head_dim: 128,
            ffn_hidden: 4 * 12288,
            ffn_kind: FfnKind::Plain,
            vocab: 50257,
            tied_embeddings: true,
            norm: NormKind::LayerNorm,
            position: Position::Learned,
            max_seq_len: 2048,
            linear_bias: true,
            qkv_bias: false,
            qk_norm: false,
            style: LayerStyle::default(),
            moe: None,
            mla: None,
            hybrid: None,
            mtp_layers: 0,
            sliding_window: None,
            attention_sinks: false,
            published_params: Some(175e9),
        }
    }

    /// Nemotron-H 8B as models/nemotron-h-8b.toml gives it (Megatron-Bridge 0.6.2's recipe).
    pub fn nemotron_h_8b() -> Model {
        let pattern = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-".chars().map(|c| Block::of_symbol(c).unwrap()).collect();
        Model {
            name: "nemotron-h-8b".into(),
            n_layers: 52,
            hidden: 4096,
            n_heads: 32,
            n_kv_heads: 8,
            head_dim: 128,
            ffn_hidden: 21504,
            ffn_kind: FfnKind::Plain,
            vocab: 131072,
            tied_embeddings: false,
            norm: NormKind::RmsNorm,
            position: Position::None,
            max_seq_len: 8192,
            linear_bias: false,
            qkv_bias: false,
            qk_norm: false,
            style: LayerStyle::default(),
            moe: None,
            mla: None,
            hybrid: Some(Hybrid { pattern, mamba: Mamba2 { n_heads: 128, head_dim: 64, state_size: 128, n_groups: 8, conv_kernel: 4, chunk_size: 128 } }),
            mtp_layers: 0,
            sliding_window: None,
            attention_sinks: false,
            published_params: Some(8e9),
        }
    }

    #[test]
    fn hybrid_params_count_each_block_once() {
        let m = nemotron_h_8b();
        assert_eq!((m.n_mamba_layers(), m.n_attention_layers(), m.n_dense_layers(), m.n_moe_layers()), (24, 4, 24, 0));
        let p = m.params();
        // 24 mixers of 109,635,968 (without their layer norm), 4 attention layers of 41,943,040,
        // 24 MLPs of 2 x 4096 x 21504, 52 + 1 RMSNorms, embedding and LM head 131072 x 4096 each.
        assert_eq!(p.mamba, 24.0 * 109_635_968.0);
        assert_eq!(p.attention, 4.0 * 41_943_040.0);
        assert_eq!(p.dense_ffn, 24.0 * 176_160_768.0);
        assert_eq!(p.norms, 53.0 * 4096.0);
        assert_eq!(p.total(), 8_100_852_736.0);
        // Matmul parameters: the mixers' in/out projections, attention, MLPs and the LM head.
        let mm = 24.0 * 4096.0 * (18560.0 + 8192.0) + p.attention + p.dense_ffn + 131072.0 * 4096.0;
        assert_eq!(m.matmul_params_per_token(), mm);
        // Per layer kind, what the memory plan shards: a mixer all over TP, its norm whole.
        assert_eq!(m.layer_params(LayerKind::Mamba), (109_635_968.0, 4096.0, 0.0));
        assert_eq!(m.layer_kinds().iter().filter(|k| **k == LayerKind::Attention).count(), 4);
    }

    #[test]
    fn gpt3_params_match_12lh2() {
        let m = gpt3_175b();
        let p = m.params().total();
        // 12 L h^2 (weights) + V h + s h + small terms: 174.6e9 (Narayanan et al. 2021 Table 2)
        assert!((p / 174.6e9 - 1.0).abs() < 0.002, "{p}");
    }

    #[test]
    fn moe_active_params_count_top_k_experts() {
        let mut m = gpt3_175b();
        m.n_layers = 2;
        m.moe = Some(Moe {
            n_experts: 8,
            top_k: 2,
            expert_ffn_hidden: 1000,
            n_shared_experts: 0,
            shared_expert_ffn_hidden: 0,
            first_dense_layers: 0,
            layer_step: 1,
            expert_groups: 0,
            group_top_k: 0,
            router: Router::SOFTMAX_TOPK,
        });
        let p = m.params();
        assert_eq!(p.dense_ffn, 0.0);
        let one_expert = 2.0 * 12288.0 * 1000.0 + 1000.0 + 12288.0;
        assert_eq!(p.experts, 2.0 * 8.0 * one_expert);
        assert!((m.active_params() - (p.total() - 0.75 * p.experts)).abs() < 1.0);
    }

    #[test]
    fn moe_layers_alternate_with_dense_ones_every_layer_step() {
        let mut m = gpt3_175b();
        m.n_layers = 7;
        m.moe = Some(Moe {
            n_experts: 8,
            top_k: 1,
            expert_ffn_hidden: 1000,
            n_shared_experts: 0,
            shared_expert_ffn_hidden: 0,
            first_dense_layers: 0,
            layer_step: 2,
            expert_groups: 0,
            group_top_k: 0,
            router: Router::SOFTMAX_TOPK,
        });
        // transformers' Llama-4: moe_layers = range(step - 1, n_layers, step) = 1, 3, 5.
        assert_eq!((0..7).filter(|&i| m.is_moe_layer(i)).collect::<Vec<_>>(), vec![1, 3, 5]);
        assert_eq!((m.n_moe_layers(), m.n_dense_layers()), (3, 4));
        let p = m.params();
        assert_eq!(p.dense_ffn, 4.0 * (2.0 * 12288.0 * 49152.0 + 49152.0 + 12288.0));
        m.moe.as_mut().unwrap().first_dense_layers = 2;
        m.moe.as_mut().unwrap().layer_step = 1;
        assert_eq!((0..7).filter(|&i| m.is_moe_layer(i)).count() as u64, m.n_moe_layers());
        assert!(!m.is_moe_layer(1) && m.is_moe_layer(2));
    }
}
