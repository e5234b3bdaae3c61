//! The model TOML format (`models/*.toml`): wire structs and their check and conversion to a
//! domain `Model`. Hugging Face `config.json` files are mapped onto [`ModelWire`] by `hf`.

use std::path::Path;

use serde::Deserialize;

use crate::{ConfigError, Problems};
use gpuplan_core::model::{
    Block, FfnKind, Hybrid, LayerStyle, Mamba2, Mla, Model, Moe, NormKind, NormPlacement, Position, RmsStyle, Router, RouterScore, SlidingWindow,
};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelWire {
    pub name: String,
    pub display_name: String,
    /// Where the shapes come from (a config.json URL, a paper table).
    pub source: String,
    /// Published total parameter count, in billions, if its authors state one.
    #[serde(default)]
    pub published_params_b: Option<f64>,
    pub n_layers: u64,
    pub hidden_size: u64,
    pub n_heads: u64,
    /// Defaults to `n_heads` (multi-head attention) only when absent.
    #[serde(default)]
    pub n_kv_heads: Option<u64>,
    /// Defaults to `hidden_size / n_heads` only when absent.
    #[serde(default)]
    pub head_dim: Option<u64>,
    pub ffn_hidden_size: u64,
    /// gated (SwiGLU/GeGLU, 3 matrices) | plain (GELU MLP, 2 matrices)
    pub ffn_kind: String,
    pub vocab_size: u64,
    pub tied_embeddings: bool,
    /// rmsnorm | layernorm
    pub norm: String,
    /// rope | learned | none
    pub position: String,
    pub max_seq_len: u64,
    #[serde(default)]
    pub linear_bias: bool,
    #[serde(default)]
    pub qkv_bias: bool,
    /// RMSNorm on each head's queries and keys before RoPE (Qwen3's `q_norm`, `k_norm`).
    #[serde(default)]
    pub qk_norm: bool,
    /// `head` (default: Qwen3, Gemma 3) | `projection` (OLMo-2: one norm over all query heads and
    /// one over all key heads).
    #[serde(default)]
    pub qk_norm_scope: Option<String>,
    /// `pre` (default: Llama) | `pre_post` (Gemma 2/3: norms before and after attention and MLP)
    /// | `post` (OLMo-2: after attention and MLP only).
    #[serde(default)]
    pub norm_placement: Option<String>,
    /// How the RMSNorm rounds: `cast_then_scale` (default: Llama) | `scale_then_cast` (OLMo-2) |
    /// `offset_scale_then_cast` (Gemma: `(1 + weight)` in fp32).
    #[serde(default)]
    pub rms_norm_style: Option<String>,
    /// The embedding's output times `sqrt(hidden_size)` (Gemma).
    #[serde(default)]
    pub embedding_scale: bool,
    /// Final logit soft-cap `cap * tanh(logits / cap)` (Gemma 2: 30.0).
    #[serde(default)]
    pub final_logit_softcap: Option<f64>,
    /// One GEMM for q, k, v and one for gate and up (Phi-3's `qkv_proj`, `gate_up_proj`).
    #[serde(default)]
    pub fused_projections: bool,
    #[serde(default)]
    pub moe: Option<MoeWire>,
    #[serde(default)]
    pub mla: Option<MlaWire>,
    #[serde(default)]
    pub hybrid: Option<HybridWire>,
    /// Sliding-window attention and attention sinks (`[attention]`; GPT-OSS).
    #[serde(default)]
    pub attention: Option<AttentionWire>,
    /// Multi-token-prediction modules the architecture has (config.json
    /// `num_nextn_predict_layers`; DeepSeek-V3: 1); trained only when a scenario asks
    /// (`workload.mtp_layers`).
    #[serde(default)]
    pub mtp_layers: u32,
}

/// A hybrid Mamba-attention model's layer pattern and Mamba-2 mixer (`[hybrid]`); the keys are
/// those of a Nemotron-H config.json.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HybridWire {
    /// One symbol per layer: `M` Mamba-2, `*` attention, `-` MLP, `E` MoE (Megatron-LM's
    /// `--hybrid-layer-pattern`, config.json's `hybrid_override_pattern`).
    pub pattern: String,
    pub mamba_num_heads: u64,
    pub mamba_head_dim: u64,
    pub ssm_state_size: u64,
    pub n_groups: u64,
    pub conv_kernel: u64,
    pub chunk_size: u64,
}

/// Attention variants (`[attention]`), with the keys of a Hugging Face config.json.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttentionWire {
    /// Keys a query on a sliding layer sees, itself included (config.json `sliding_window`;
    /// GPT-OSS 128). Absent: every layer attends over the whole context.
    #[serde(default)]
    pub sliding_window: Option<u64>,
    /// One entry per layer, `sliding_attention` or `full_attention` (config.json
    /// `layer_types`). Absent with a window: every layer slides.
    #[serde(default)]
    pub layer_types: Option<Vec<String>>,
    /// One learned logit per head in each softmax denominator (GPT-OSS's `sinks`).
    #[serde(default)]
    pub sinks: bool,
}

/// The hint for `attention.layer_types`.
pub const LAYER_TYPES_HINT: &str = "one entry per layer, `sliding_attention` or `full_attention` (GPT-OSS alternates them, sliding first)";

/// The hint for a pattern symbol gpuplan does not know.
pub const PATTERN_HINT: &str =
    "one symbol per layer: `M` Mamba-2, `*` attention, `-` MLP, `E` MoE; Megatron's `G`, `D`, `+` and its `|` and `/` separators are not modelled";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoeWire {
    pub n_experts: u32,
    pub top_k: u32,
    pub expert_ffn_hidden_size: u64,
    #[serde(default)]
    pub n_shared_experts: u32,
    #[serde(default)]
    pub shared_expert_ffn_hidden_size: u64,
    #[serde(default)]
    pub first_dense_layers: u32,
    /// After the first dense layers, MoE on every `layer_step`-th layer, dense on the others
    /// (default 1: every layer; Llama-4 Maverick 2). Layer i is MoE when
    /// `(i - first_dense_layers + 1) % layer_step == 0`, as transformers places them.
    #[serde(default)]
    pub layer_step: Option<u32>,
    /// Group-limited routing: `expert_groups` equal groups of experts, a token's experts taken
    /// from its best `group_top_k` groups (Hugging Face `n_group` / `topk_group`). Both or neither.
    #[serde(default)]
    pub expert_groups: Option<u32>,
    #[serde(default)]
    pub group_top_k: Option<u32>,
    /// The router's score function: "softmax" (default) or "sigmoid" (Hugging Face
    /// `scoring_func`, Megatron `moe_router_score_function`).
    #[serde(default)]
    pub router_score: Option<String>,
    /// Renormalize the k chosen weights to sum to 1 (Hugging Face `norm_topk_prob`; default false).
    #[serde(default)]
    pub norm_topk_prob: Option<bool>,
    /// The weights' multiplier after the top-k (Hugging Face `routed_scaling_factor`, Megatron
    /// `moe_router_topk_scaling_factor`; default 1).
    #[serde(default)]
    pub routed_scaling_factor: Option<f64>,
    /// Auxiliary-loss-free per-expert bias on the choice scores (DeepSeek-V3 `noaux_tc`, Megatron
    /// `moe_router_enable_expert_bias`; default false).
    #[serde(default)]
    pub expert_bias: Option<bool>,
    /// The dtype the routed weights reach the experts in: "fp32" (default: Mixtral, DeepSeek) or
    /// "bf16" (transformers' Qwen2/3-MoE, Llama-4 and GPT-OSS routers cast them back).
    #[serde(default)]
    pub routing_weights_dtype: Option<String>,
}

pub const ROUTER_SCORE_HINT: &str = "one of: softmax, sigmoid (Hugging Face `scoring_func`, Megatron `moe_router_score_function`)";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MlaWire {
    #[serde(default)]
    pub q_lora_rank: u64,
    pub kv_lora_rank: u64,
    pub qk_nope_head_dim: u64,
    pub qk_rope_head_dim: u64,
    pub v_head_dim: u64,
}

pub fn model_from_wire(path: &Path, w: &ModelWire) -> Result<Model, ConfigError> {
    let mut p = Problems::default();
    let positive = |p: &mut Problems, key: &str, v: u64| p.check(v > 0, || ConfigError::invalid(path, key, v, "must be positive"));
    positive(&mut p, "n_layers", w.n_layers);
    positive(&mut p, "hidden_size", w.hidden_size);
    positive(&mut p, "n_heads", w.n_heads);
    // A hybrid model whose FFNs are all MoE (`E`, no `-`) has no dense width.
    if w.hybrid.as_ref().is_none_or(|hy| hy.pattern.contains('-')) {
        positive(&mut p, "ffn_hidden_size", w.ffn_hidden_size);
    }
    positive(&mut p, "vocab_size", w.vocab_size);
    positive(&mut p, "max_seq_len", w.max_seq_len);
    let n_kv_heads = w.n_kv_heads.unwrap_or(w.n_heads);
    p.check(n_kv_heads > 0 && w.n_heads.is_multiple_of(n_kv_heads.max(1)), || {
        ConfigError::invalid(path, "n_kv_heads", n_kv_heads, format!("must divide `n_heads` = {}", w.n_heads))
    });
    let head_dim = match w.head_dim {
        Some(d) => {
            p.check(d > 0, || ConfigError::invalid(path, "head_dim", d, "must be positive"));
            d
        }
        None => {
            p.check(w.n_heads > 0 && w.hidden_size.is_multiple_of(w.n_heads.max(1)), || {
                ConfigError::invalid(path, "hidden_size", w.hidden_size, format!("is not a multiple of `n_heads` = {}", w.n_heads))
                    .with_hint("give `head_dim` explicitly")
            });
            w.hidden_size / w.n_heads.max(1)
        }
    };
    let ffn_kind = match w.ffn_kind.as_str() {
        "gated" => FfnKind::Gated,
        "plain" => FfnKind::Plain,
        other => {
            p.push(ConfigError::invalid(path, "ffn_kind", other, "is not known").with_hint("one of: gated, plain"));
            FfnKind::Gated
        }
    };
    let norm = match w.norm.as_str() {
        "rmsnorm" => NormKind::RmsNorm,
        "layernorm" => NormKind::LayerNorm,
        other => {
            p.push(ConfigError::invalid(path, "norm", other, "is not known").with_hint("one of: rmsnorm, layernorm"));
            NormKind::RmsNorm
        }
    };
    let position = match w.position.as_str() {
        "rope" => Position::Rope,
        "learned" => Position::Learned,
        "none" => Position::None,
        other => {
            p.push(ConfigError::invalid(path, "position", other, "is not known").with_hint("one of: rope, learned, none"));
            Position::Rope
        }
    };
    let style = layer_style(path, w, &mut p);
    let moe = w.moe.as_ref().map(|m| {
        p.check(m.n_experts >= 1, || ConfigError::invalid(path, "moe.n_experts", m.n_experts, "must be positive"));
        p.check(m.top_k >= 1 && m.top_k <= m.n_experts, || {
            ConfigError::invalid(path, "moe.top_k", m.top_k, format!("must be between 1 and `moe.n_experts` = {}", m.n_experts))
        });
        p.check(m.expert_ffn_hidden_size > 0, || ConfigError::invalid(path, "moe.expert_ffn_hidden_size", m.expert_ffn_hidden_size, "must be positive"));
        p.check(m.n_shared_experts == 0 || m.shared_expert_ffn_hidden_size > 0, || {
            ConfigError::invalid(path, "moe.shared_expert_ffn_hidden_size", m.shared_expert_ffn_hidden_size, "must be positive when there are shared experts")
        });
        p.check((m.first_dense_layers as u64) < w.n_layers.max(1), || {
            ConfigError::invalid(path, "moe.first_dense_layers", m.first_dense_layers, format!("must be below `n_layers` = {}", w.n_layers))
        });
        let step = m.layer_step.unwrap_or(1);
        let after_dense = w.n_layers.saturating_sub(m.first_dense_layers as u64);
        p.check(step >= 1 && (step as u64) <= after_dense.max(1), || {
            ConfigError::invalid(path, "moe.layer_step", step, format!("must be 1 to the {after_dense} layers after `moe.first_dense_layers`"))
                .with_hint("1 = MoE on every layer; 2 = every other layer (Llama-4 Maverick's `interleave_moe_layer_step`)")
        });
        match (m.expert_groups, m.group_top_k) {
            (None, None) => {}
            (Some(g), Some(k)) => {
                p.check(g >= 1 && m.n_experts.is_multiple_of(g), || {
                    ConfigError::invalid(path, "moe.expert_groups", g, format!("must divide `moe.n_experts` = {}", m.n_experts))
                        .with_hint("Hugging Face `n_group`: DeepSeek-V3 8")
                });
                p.check(k >= 1 && k <= g, || {
                    ConfigError::invalid(path, "moe.group_top_k", k, format!("must be 1 to `moe.expert_groups` = {g}"))
                        .with_hint("Hugging Face `topk_group`: DeepSeek-V3 4")
                });
            }
            (g, k) => p.check(false, || {
                ConfigError::invalid(path, if g.is_none() { "moe.group_top_k" } else { "moe.expert_groups" }, g.or(k).unwrap_or(0), "is set without its pair")
                    .with_hint("set both `moe.expert_groups` and `moe.group_top_k` (group-limited routing), or neither")
            }),
        }
        let score = match m.router_score.as_deref() {
            None | Some("softmax") => RouterScore::Softmax,
            Some("sigmoid") => RouterScore::Sigmoid,
            Some(other) => {
                p.push(ConfigError::invalid(path, "moe.router_score", other, "is not known").with_hint(ROUTER_SCORE_HINT));
                RouterScore::Softmax
            }
        };
        let scale = m.routed_scaling_factor.unwrap_or(1.0);
        p.check(scale.is_finite() && scale > 0.0, || {
            ConfigError::invalid(path, "moe.routed_scaling_factor", scale, "must be a positive number")
                .with_hint("the routed weights' multiplier after the top-k: 1 for none, DeepSeek-V3 2.5")
        });
        let expert_bias = m.expert_bias.unwrap_or(false);
        p.check(!expert_bias || score == RouterScore::Sigmoid, || {
            ConfigError::invalid(path, "moe.expert_bias", true, "needs `moe.router_score = \"sigmoid\"`")
                .with_hint("the auxiliary-loss-free bias is added to sigmoid scores (DeepSeek-V3; Megatron-Core allows it with sigmoid only)")
        });
        let weights_fp32 = match m.routing_weights_dtype.as_deref() {
            None | Some("fp32") => true,
            Some("bf16") => false,
            Some(other) => {
                p.push(
                    ConfigError::invalid(path, "moe.routing_weights_dtype", other, "is not known")
                        .with_hint("one of: fp32 (Mixtral's and DeepSeek's routers), bf16 (Qwen2/3-MoE's, which cast the weights to the logits' dtype)"),
                );
                true
            }
        };
        Moe {
            router: Router { score, norm_topk_prob: m.norm_topk_prob.unwrap_or(false), routed_scaling_factor: scale, expert_bias, weights_fp32 },
            n_experts: m.n_experts,
            top_k: m.top_k,
            expert_ffn_hidden: m.expert_ffn_hidden_size,
            n_shared_experts: m.n_shared_experts,
            shared_expert_ffn_hidden: m.shared_expert_ffn_hidden_size,
            first_dense_layers: m.first_dense_layers,
            layer_step: step.max(1),
            expert_groups: m.expert_groups.zip(m.group_top_k).map_or(0, |(g, _)| g),
            group_top_k: m.expert_groups.zip(m.group_top_k).map_or(0, |(_, k)| k),
        }
    });
    let mla = w.mla.as_ref().map(|m| {
        for (k, v) in [
            ("mla.kv_lora_rank", m.kv_lora_rank),
            ("mla.qk_nope_head_dim", m.qk_nope_head_dim),
            ("mla.qk_rope_head_dim", m.qk_rope_head_dim),
            ("mla.v_head_dim", m.v_head_dim),
        ] {
            positive(&mut p, k, v);
        }
        Mla {
            q_lora_rank: m.q_lora_rank,
            kv_lora_rank: m.kv_lora_rank,
            qk_nope_head_dim: m.qk_nope_head_dim,
            qk_rope_head_dim: m.qk_rope_head_dim,
            v_head_dim: m.v_head_dim,
        }
    });
    p.check(w.mtp_layers <= gpuplan_core::model::MAX_MTP_LAYERS, || {
        ConfigError::invalid(path, "mtp_layers", w.mtp_layers, format!("is more than {} multi-token-prediction modules", gpuplan_core::model::MAX_MTP_LAYERS))
            .with_hint("DeepSeek-V3 has 1 (`num_nextn_predict_layers`)")
    });
    let hybrid = w.hybrid.as_ref().map(|hy| {
        let mut pattern = Vec::with_capacity(hy.pattern.len());
        for (i, c) in hy.pattern.chars().enumerate() {
            match Block::of_symbol(c) {
                Some(b) => pattern.push(b),
                None => {
                    p.push(
                        ConfigError::invalid(path, "hybrid.pattern", &hy.pattern, format!("has `{c}` at layer {i}, which is not a known layer symbol"))
                            .with_hint(PATTERN_HINT),
                    );
                    break;
                }
            }
        }
        let n_symbols = hy.pattern.chars().count() as u64;
        p.check(n_symbols == w.n_layers, || {
            ConfigError::invalid(path, "hybrid.pattern", &hy.pattern, format!("has {n_symbols} layers, `n_layers` = {}", w.n_layers))
                .with_hint("give one symbol per layer, or fix `n_layers`")
        });
        for (k, v) in [
            ("hybrid.mamba_num_heads", hy.mamba_num_heads),
            ("hybrid.mamba_head_dim", hy.mamba_head_dim),
            ("hybrid.ssm_state_size", hy.ssm_state_size),
            ("hybrid.n_groups", hy.n_groups),
            ("hybrid.conv_kernel", hy.conv_kernel),
            ("hybrid.chunk_size", hy.chunk_size),
        ] {
            positive(&mut p, k, v);
        }
        p.check(hy.n_groups == 0 || hy.mamba_num_heads.is_multiple_of(hy.n_groups.max(1)), || {
            ConfigError::invalid(path, "hybrid.n_groups", hy.n_groups, format!("does not divide `hybrid.mamba_num_heads` = {}", hy.mamba_num_heads))
                .with_hint("Megatron's MambaMixer shares each B/C group among `mamba_num_heads / n_groups` heads")
        });
        p.check(hy.chunk_size == 0 || hy.chunk_size.is_power_of_two(), || {
            ConfigError::invalid(path, "hybrid.chunk_size", hy.chunk_size, "is not a power of two")
                .with_hint("mamba_ssm's SSD kernels take chunk sizes 2^k (128 or 256)")
        });
        let has_moe = pattern.contains(&Block::Moe);
        p.check(has_moe == w.moe.is_some(), || match has_moe {
            true => ConfigError::invalid(path, "hybrid.pattern", &hy.pattern, "has `E` layers but the model has no `[moe]` table")
                .with_hint("add `[moe]` with the experts' shape"),
            false => ConfigError::invalid(path, "moe", "(table)", "is given but `hybrid.pattern` has no `E` layer")
                .with_hint("mark the MoE layers `E` in the pattern"),
        });
        if let Some(m) = &w.moe {
            p.check(m.first_dense_layers == 0, || {
                ConfigError::invalid(path, "moe.first_dense_layers", m.first_dense_layers, "must be 0 in a hybrid model")
                    .with_hint("the pattern says which layers are MoE (`E`) and which dense (`-`)")
            });
        }
        p.check(w.mla.is_none(), || {
            ConfigError::invalid(path, "mla", "(table)", "cannot be combined with `[hybrid]`").with_hint("hybrid models use `*` for grouped-query attention")
        });
        Hybrid {
            pattern,
            mamba: Mamba2 {
                n_heads: hy.mamba_num_heads,
                head_dim: hy.mamba_head_dim,
                state_size: hy.ssm_state_size,
                n_groups: hy.n_groups,
                conv_kernel: hy.conv_kernel,
                chunk_size: hy.chunk_size,
            },
        }
    });
    let attention = w.attention.as_ref();
    let sliding_window = match attention.and_then(|a| a.sliding_window) {
        None => {
            if let Some(types) = attention.and_then(|a| a.layer_types.as_ref()) {
                p.check(!types.iter().any(|t| t == "sliding_attention"), || {
                    ConfigError::invalid(
                        path,
                        "attention.layer_types",
                        format!("{} entries", types.len()),
                        "has sliding layers but no `attention.sliding_window`",
                    )
                    .with_hint("give the window (GPT-OSS: `sliding_window = 128`)")
                });
            }
            None
        }
        Some(window) => {
            p.check(window > 0, || {
                ConfigError::invalid(path, "attention.sliding_window", window, "must be positive")
                    .with_hint("the keys a query sees, itself included (GPT-OSS: 128); leave it out for full attention on every layer")
            });
            p.check(window <= w.max_seq_len, || {
                ConfigError::invalid(path, "attention.sliding_window", window, format!("is above `max_seq_len` = {}", w.max_seq_len))
                    .with_hint("a window as long as the context is full attention: leave `attention.sliding_window` out")
            });
            p.check(w.hybrid.is_none(), || {
                ConfigError::invalid(path, "attention.sliding_window", window, "cannot be combined with `[hybrid]`")
                    .with_hint("sliding windows are modelled on transformer layers only")
            });
            let sliding = match attention.and_then(|a| a.layer_types.as_ref()) {
                None => vec![true; w.n_layers as usize],
                Some(types) => {
                    p.check(types.len() as u64 == w.n_layers, || {
                        ConfigError::invalid(
                            path,
                            "attention.layer_types",
                            format!("{} entries", types.len()),
                            format!("must have one entry per layer, `n_layers` = {}", w.n_layers),
                        )
                        .with_hint(LAYER_TYPES_HINT)
                    });
                    let mut v = Vec::with_capacity(types.len());
                    for (i, t) in types.iter().enumerate() {
                        match t.as_str() {
                            "sliding_attention" => v.push(true),
                            "full_attention" => v.push(false),
                            other => {
                                p.push(
                                    ConfigError::invalid(path, "attention.layer_types", other, format!("at layer {i} is not a known layer type"))
                                        .with_hint(LAYER_TYPES_HINT),
                                );
                                break;
                            }
                        }
                    }
                    v
                }
            };
            Some(SlidingWindow { window, sliding })
        }
    };
    if let Some(pb) = w.published_params_b {
        p.check(pb > 0.0 && pb.is_finite(), || ConfigError::invalid(path, "published_params_b", pb, "must be positive"));
    }
    p.finish()?;
    Ok(Model {
        name: w.name.clone(),
        n_layers: w.n_layers,
        hidden: w.hidden_size,
        n_heads: w.n_heads,
        n_kv_heads,
        head_dim,
        ffn_hidden: w.ffn_hidden_size,
        ffn_kind,
        vocab: w.vocab_size,
        tied_embeddings: w.tied_embeddings,
        norm,
        position,
        max_seq_len: w.max_seq_len,
        linear_bias: w.linear_bias,
        qkv_bias: w.qkv_bias,
        qk_norm: w.qk_norm,
        style,
        moe,
        mla,
        hybrid,
        sliding_window,
        attention_sinks: attention.is_some_and(|a| a.sinks),
        mtp_layers: w.mtp_layers,
        published_params: w.published_params_b.map(|b| b * 1e9),
    })
}

/// The [`LayerStyle`] keys of a model file (each absent key is Llama's choice).
fn layer_style(path: &Path, w: &ModelWire, p: &mut Problems) -> LayerStyle {
    let mut style = LayerStyle::default();
    if let Some(v) = &w.norm_placement {
        style.norm_placement = match v.as_str() {
            "pre" => NormPlacement::Pre,
            "pre_post" => NormPlacement::PrePost,
            "post" => NormPlacement::Post,
            other => {
                p.push(ConfigError::invalid(path, "norm_placement", other, "is not known").with_hint("one of: pre, pre_post (Gemma), post (OLMo-2)"));
                NormPlacement::Pre
            }
        };
    }
    if let Some(v) = &w.rms_norm_style {
        style.rms_style = match v.as_str() {
            "cast_then_scale" => RmsStyle::CastThenScale,
            "scale_then_cast" => RmsStyle::ScaleThenCast,
            "offset_scale_then_cast" => RmsStyle::OffsetScaleThenCast,
            other => {
                p.push(
                    ConfigError::invalid(path, "rms_norm_style", other, "is not known")
                        .with_hint("one of: cast_then_scale (Llama), scale_then_cast (OLMo-2), offset_scale_then_cast (Gemma)"),
                );
                RmsStyle::CastThenScale
            }
        };
    }
    if let Some(v) = &w.qk_norm_scope {
        match v.as_str() {
            "head" => {}
            "projection" => style.qk_norm_projection = true,
            other => p.push(ConfigError::invalid(path, "qk_norm_scope", other, "is not known").with_hint("one of: head (Qwen3, Gemma 3), projection (OLMo-2)")),
        }
        p.check(w.qk_norm, || {
            ConfigError::invalid(path, "qk_norm_scope", v, "is given without `qk_norm = true`").with_hint("set `qk_norm = true`, or leave the scope out")
        });
    }
    if let Some(cap) = w.final_logit_softcap {
        p.check(cap > 0.0 && cap.is_finite(), || {
            ConfigError::invalid(path, "final_logit_softcap", cap, "must be positive").with_hint("Gemma 2: 30.0; leave it out for no soft-cap")
        });
        style.final_logit_softcap = Some(cap);
    }
    style.embedding_scale = w.embedding_scale;
    style.fused_projections = w.fused_projections;
    p.check(!(w.fused_projections && w.mla.is_some()), || {
        ConfigError::invalid(path, "fused_projections", true, "cannot be combined with `[mla]`")
            .with_hint("fused q/k/v and gate/up projections are modelled for MHA/GQA models")
    });
    style
}
