//! Hugging Face `config.json` files, read directly: Llama, Mistral, Mixtral, Qwen2, Qwen2-MoE, Qwen3,
//! Qwen3-MoE, DeepSeek-V2, DeepSeek-V3, Llama-4, GPT-OSS and Nemotron-H hybrids (the `model_type` key says which).
//!
//! The keys are mapped onto the same wire struct as `models/*.toml` ([`ModelWire`]) and converted by the
//! same code, so a config.json and the TOML written from it give the same [`Model`]. Defaults for absent
//! keys are those of the model's `transformers` configuration class (`LlamaConfig`, `Qwen3MoeConfig`,
//! ...): `tie_word_embeddings` false, `num_key_value_heads` = `num_attention_heads`, `head_dim` =
//! `hidden_size / num_attention_heads`, no attention bias. What a config.json says that gpuplan does
//! not model (sliding windows other than GPT-OSS's, Llama-4's chunked attention and NoPE layers, RoPE scaling,
//! DeepSeek's multi-token-prediction layers) is ignored; a layout it cannot represent (a
//! list of dense layers other than every n-th) is an error, never a silent approximation. MoE on
//! every n-th layer (Llama-4's `interleave_moe_layer_step`, Qwen2-MoE's `decoder_sparse_step`)
//! is `moe.layer_step`; Llama-4's language model is read from its `text_config`.

use std::path::Path;

use serde_json::{Map, Value};

use super::{closest, ConfigError};
use crate::model::wire::{model_from_wire, AttentionWire, HybridWire, MlaWire, ModelWire, MoeWire};
use gpuplan_core::model::Model;

/// The `model_type` values this loader understands.
pub const SUPPORTED: [&str; 18] = [
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "deepseek_v2",
    "deepseek_v3",
    "llama4",
    "llama4_text",
    "nemotron_h",
    "gpt_oss",
    "gemma2",
    "gemma3",
    "gemma3_text",
    "phi3",
    "olmo2",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Llama,
    Mistral,
    Mixtral,
    Qwen2,
    Qwen2Moe,
    Qwen3,
    Qwen3Moe,
    DeepSeek,
    NemotronH,
    Llama4,
    GptOss,
    Gemma2,
    Gemma3,
    Phi3,
    Olmo2,
}

impl Family {
    fn of(model_type: &str) -> Option<Family> {
        Some(match model_type {
            "llama" => Family::Llama,
            "mistral" => Family::Mistral,
            "mixtral" => Family::Mixtral,
            "qwen2" => Family::Qwen2,
            "qwen2_moe" => Family::Qwen2Moe,
            "qwen3" => Family::Qwen3,
            "qwen3_moe" => Family::Qwen3Moe,
            "deepseek_v2" | "deepseek_v3" => Family::DeepSeek,
            "nemotron_h" => Family::NemotronH,
            "llama4_text" => Family::Llama4,
            "gpt_oss" => Family::GptOss,
            "gemma2" => Family::Gemma2,
            "gemma3_text" => Family::Gemma3,
            "phi3" => Family::Phi3,
            "olmo2" => Family::Olmo2,
            _ => return None,
        })
    }
}

/// Read one config.json into a [`Model`].
pub fn model_from_hf_json(path: &Path, text: &str) -> Result<Model, ConfigError> {
    let root: Value = serde_json::from_str(text).map_err(|e| parse_error(path, text, &e))?;
    let Some(obj) = root.as_object() else {
        return Err(
            ConfigError::invalid(path, "(top level)", kind_of(&root), "is not a JSON object").with_hint("a Hugging Face config.json is one object of keys")
        );
    };
    // Llama-4 (`model_type` "llama4") is a vision-language config whose language model is its
    // `text_config` ("llama4_text"); gpuplan models the language model.
    // Gemma 3's multimodal config ("gemma3", `Gemma3ForConditionalGeneration`) likewise holds its
    // language model under `text_config` ("gemma3_text"); the vision tower is not modelled.
    let obj = match (obj.get("model_type").and_then(Value::as_str), obj.get("text_config").and_then(Value::as_object)) {
        (Some("llama4" | "gemma3"), Some(text)) => text,
        (Some(t @ ("llama4" | "gemma3")), None) => {
            return Err(ConfigError::invalid(path, "text_config", "(missing)", format!("is required for model_type `{t}`"))
                .with_hint("a Llama-4 or Gemma 3 multimodal config.json holds its language model's shape under `text_config`"))
        }
        _ => obj,
    };
    let c = Keys { path, obj };
    let wire = wire_from_keys(&c)?;
    model_from_wire(path, &wire)
}

fn wire_from_keys(c: &Keys) -> Result<ModelWire, ConfigError> {
    let model_type = c.string("model_type")?;
    let Some(family) = Family::of(&model_type) else {
        let known: Vec<String> = SUPPORTED.iter().map(|s| s.to_string()).collect();
        let hint = match closest(&model_type, &known) {
            Some(k) => format!("did you mean `{k}`? supported: {}; or write a models/*.toml file", SUPPORTED.join(", ")),
            None => format!("supported: {}; or write a models/*.toml file with the shape", SUPPORTED.join(", ")),
        };
        return Err(ConfigError::invalid(c.path, "model_type", format!("\"{model_type}\""), "is not a supported architecture").with_hint(hint));
    };

    let hybrid = if family == Family::NemotronH { Some(hybrid_from_keys(c)?) } else { None };
    let n_layers = match &hybrid {
        // transformers derives the layer count from the pattern; a config.json that also gives
        // `num_hidden_layers` must agree (checked against the pattern by `model_from_wire`).
        Some(hy) => c.opt_count("num_hidden_layers")?.unwrap_or(hy.pattern.chars().count() as u64),
        None => c.count("num_hidden_layers")?,
    };
    let hidden = c.count("hidden_size")?;
    let n_heads = c.count("num_attention_heads")?;
    let n_kv_heads = c.opt_count("num_key_value_heads")?;
    if let Some(kv) = n_kv_heads {
        if n_heads % kv != 0 {
            return Err(ConfigError::invalid(c.path, "num_key_value_heads", kv, format!("does not divide `num_attention_heads` = {n_heads}")));
        }
    }
    let ffn = match family {
        // A Nemotron-H MoE model (every FFN an `E` layer) may have no dense width.
        Family::NemotronH => c.opt_count("intermediate_size")?.unwrap_or(0),
        _ => c.count("intermediate_size")?,
    };
    // Llama-4: `intermediate_size` is the experts' width, `intermediate_size_mlp` the dense layers'.
    let dense_ffn = if family == Family::Llama4 { c.count("intermediate_size_mlp")? } else { ffn };
    let vocab = c.count("vocab_size")?;
    let max_seq_len = c.count("max_position_embeddings")?;
    // `GemmaNConfig.tie_word_embeddings` defaults to true (transformers 5.17.0); the others' to false.
    let tied = c.opt_bool("tie_word_embeddings")?.unwrap_or(matches!(family, Family::Gemma2 | Family::Gemma3));
    // GptOssConfig's `attention_bias` defaults to true (transformers 5.24.0).
    let attention_bias = c.opt_bool("attention_bias")?.unwrap_or(family == Family::GptOss);
    let mlp_bias = c.opt_bool("mlp_bias")?.unwrap_or(false);

    let (linear_bias, qkv_bias) = match family {
        // Qwen2 and Qwen2-MoE put biases on the Q, K and V projections, always, with no key for it.
        Family::Qwen2 | Family::Qwen2Moe => (false, true),
        // GPT-OSS: biases on Q, K, V and O (`attention_bias`) and on every expert's gate/up and
        // down projections (`GptOssExperts.gate_up_proj_bias`, `down_proj_bias`, always).
        Family::GptOss if attention_bias => (true, false),
        Family::GptOss => {
            return Err(ConfigError::invalid(c.path, "attention_bias", false, "cannot be represented for GPT-OSS, whose experts always carry biases")
                .with_hint("gpuplan models biases on every linear layer (`linear_bias`); write a models/*.toml"))
        }
        _ => match (attention_bias, mlp_bias) {
            (false, false) => (false, false),
            // Biases on Q, K, V and O: gpuplan's `qkv_bias` counts Q, K and V; the output projection's
            // `hidden_size` biases per layer are left out (a few parts per million of the model).
            (true, false) => (false, true),
            (true, true) => (true, false),
            (false, true) => {
                return Err(ConfigError::invalid(c.path, "mlp_bias", true, "without `attention_bias` cannot be represented")
                    .with_hint("gpuplan models biases on every linear layer (`linear_bias`) or on Q/K/V only (`qkv_bias`); write a models/*.toml"))
            }
        },
    };

    let mut head_dim = c.opt_count("head_dim")?;
    let mut attention = None;
    let mut moe = None;
    let mut mla = None;
    let mut ffn_kind = "gated";
    let mut position = "rope";
    let mut style = StyleKeys::default();
    match family {
        Family::Llama | Family::Mistral | Family::Qwen2 | Family::Qwen3 => {}
        Family::Gemma2 | Family::Gemma3 => {
            // transformers 5.17.0 `modeling_gemma2.py` / `modeling_gemma3.py`: GeGLU
            // (`hidden_activation` gelu_pytorch_tanh: one kernel as SiLU is, so the gated MLP's
            // op list), four RMSNorms per layer that compute `(1 + weight)` in fp32
            // (`Gemma2RMSNorm`, lines 49-63; `Gemma2DecoderLayer`, lines 291-335),
            // the embedding times `sqrt(hidden_size)` (`Gemma2TextScaledWordEmbedding`, lines
            // 338-349), `head_dim` 256 by default, independent of hidden / heads. The attention
            // scale `query_pre_attn_scalar ** -0.5` is SDPA's `scale` argument: no kernel.
            // Gemma 2's `attn_logit_softcapping` (default 50.0) reaches the attention function as
            // `softcap=` (line 282), which only `eager_attention_forward` applies (lines 203-206):
            // `sdpa_attention_forward` (integrations/sdpa_attention.py) takes it in `**kwargs` and
            // drops it, so under SDPA no soft-cap kernel runs (and the flash path is not barred
            // by it). Gemma 2's `final_logit_softcapping` (default 30.0; null for none) divides,
            // tanh's and multiplies the logits (`Gemma2ForCausalLM.forward`, lines 527-530).
            head_dim = Some(head_dim.unwrap_or(256));
            match c.get("hidden_activation").or(c.get("hidden_act")) {
                None => {}
                Some(Value::String(a)) if a == "gelu_pytorch_tanh" || a == "gelu" || a == "gelu_new" => {}
                Some(v) => {
                    return Err(ConfigError::invalid(c.path, "hidden_activation", v, "is not a GELU, the gated MLP gpuplan models for Gemma")
                        .with_hint("Gemma: \"gelu_pytorch_tanh\""))
                }
            }
            style.norm_placement = Some("pre_post");
            style.rms_norm_style = Some("offset_scale_then_cast");
            style.embedding_scale = true;
            style.final_logit_softcap = match (family, c.obj.get("final_logit_softcapping")) {
                (_, Some(Value::Null)) => None,
                (Family::Gemma2, None) => Some(30.0),
                (_, None) => None,
                (_, Some(v)) => match v.as_f64() {
                    Some(f) if f > 0.0 && f.is_finite() => Some(f),
                    _ => {
                        return Err(ConfigError::invalid(c.path, "final_logit_softcapping", v, "must be a positive number or null")
                            .with_hint("Gemma 2: 30.0; null for no soft-cap"))
                    }
                },
            };
            // Sliding layers: Gemma 2 every other layer (`Gemma2Config.__post_init__`: layer i
            // slides when (i + 1) % 2 != 0), Gemma 3 five of six (`sliding_window_pattern`,
            // default 6: (i + 1) % 6 != 0); `sliding_window` 4096 by default in both classes;
            // `layer_types` where the config.json lists them. Gemma 3's sliding layers' own RoPE
            // theta (`rope_local_base_freq`) changes no kernel (a second cos/sin table per forward).
            let pattern = if family == Family::Gemma2 { 2 } else { c.opt_count("sliding_window_pattern")?.unwrap_or(6) };
            let default_types = (0..n_layers).map(|i| if (i + 1) % pattern != 0 { "sliding_attention" } else { "full_attention" }.to_string()).collect();
            attention = sliding_attention(c, Some(4096), default_types)?;
        }
        Family::Phi3 => {
            // transformers 5.17.0 `modeling_phi3.py`: `qkv_proj` one linear for q, k and v
            // (`Phi3Attention`, lines 200-262) and `gate_up_proj` one for gate and up (`Phi3MLP`,
            // lines 49-64), the SiLU-gated MLP on the two halves. `sliding_window` (Phi-3-mini-4k:
            // 2047) applies to every layer: `Phi3Model.forward` builds the sliding-window mask for
            // all of them (line 395), and the cache keeps the window on every layer
            // (`cache_utils.get_layer_types_and_kwargs`, no `layer_types`). su/longrope scaling
            // (`rope_scaling`, the 128K models) changes the inverse frequencies only (one cos/sin
            // table per forward): no kernel of its own. `resid_pdrop` dropout (0.0 in the
            // published configs) is not priced.
            match c.get("hidden_act") {
                None => {}
                Some(Value::String(a)) if a == "silu" => {}
                Some(v) => {
                    return Err(ConfigError::invalid(c.path, "hidden_act", v, "is not `silu`, the Phi-3 MLP gpuplan models").with_hint("Phi-3: \"silu\""))
                }
            }
            style.fused_projections = true;
            attention = sliding_attention(c, None, (0..n_layers).map(|_| "sliding_attention".to_string()).collect())?;
        }
        Family::Olmo2 => {
            // transformers 5.17.0 `modeling_olmo2.py`: no norm before attention or the MLP; one
            // after each (`Olmo2DecoderLayer`, lines 285-323), so the projections read
            // the residual stream; `Olmo2RMSNorm` multiplies by the weight in fp32 before the
            // cast (lines 51-65); `q_norm` and `k_norm` over the whole projections, before the
            // reshape to heads (`Olmo2Attention`, lines 221-222 and 235-236).
            style.norm_placement = Some("post");
            style.rms_norm_style = Some("scale_then_cast");
            style.qk_norm_scope = Some("projection");
        }
        Family::Mixtral => {
            moe = Some(every_layer_routed(c, ffn, "fp32")?);
        }
        Family::GptOss => {
            // transformers 5.24.0 `GptOssConfig` / `modeling_gpt_oss.py`: every layer MoE
            // (`num_local_experts` experts of `intermediate_size`, `num_experts_per_tok` per
            // token, SwiGLU-style gate/up and down projections with biases), `head_dim` 64 by
            // default (64 query heads x 64 = 4096, wider than hidden 2880), one learned sink logit
            // per head, and sliding-window layers: `sliding_window` (default 128) on the layers
            // `layer_types` marks (default: even layers sliding, odd ones full).
            head_dim = Some(head_dim.unwrap_or(64));
            moe = Some(every_layer_routed(c, ffn, "bf16")?);
            let sliding_window = match c.obj.get("sliding_window") {
                // An explicit null: no layer slides (`GptOssAttention.sliding_window` None).
                Some(Value::Null) => None,
                None => Some(128),
                Some(v) => match v.as_u64() {
                    Some(n) => Some(n),
                    None => {
                        return Err(ConfigError::invalid(c.path, "sliding_window", v, "is not a whole number of keys")
                            .with_hint("GPT-OSS: 128 (the keys a query sees, itself included), or null for no window"))
                    }
                },
            };
            let layer_types = match c.get("layer_types") {
                None => (0..n_layers).map(|i| if i % 2 == 0 { "sliding_attention" } else { "full_attention" }.to_string()).collect(),
                Some(Value::Array(list)) => {
                    let mut v = Vec::with_capacity(list.len());
                    for t in list {
                        match t.as_str() {
                            Some(s) => v.push(s.to_string()),
                            None => {
                                return Err(
                                    ConfigError::invalid(c.path, "layer_types", t, "is not a layer type name").with_hint(crate::model::wire::LAYER_TYPES_HINT)
                                )
                            }
                        }
                    }
                    v
                }
                Some(v) => return Err(ConfigError::invalid(c.path, "layer_types", v, "is not a list").with_hint(crate::model::wire::LAYER_TYPES_HINT)),
            };
            attention = Some(AttentionWire {
                // The window is checked (positive, within `max_position_embeddings`) with the rest.
                layer_types: sliding_window.map(|_| layer_types),
                sliding_window,
                sinks: true,
            });
        }
        Family::Llama4 => {
            // transformers' Llama4TextMoe: routed experts of `intermediate_size`, one shared expert
            // of the same width, the router; dense layers' MLP is `intermediate_size_mlp` wide.
            // MoE layers: `moe_layers`, by default range(step - 1, n_layers, step).
            let step = c.opt_count("interleave_moe_layer_step")?.unwrap_or(1);
            if let Some(v) = c.get("moe_layers") {
                let default: Vec<u64> = (step - 1..n_layers).step_by(step as usize).collect();
                let given: Option<Vec<u64>> = v.as_array().and_then(|a| a.iter().map(Value::as_u64).collect());
                if given.as_ref() != Some(&default) {
                    return Err(ConfigError::invalid(c.path, "moe_layers", v, format!("is not every {step}-th layer (`interleave_moe_layer_step`)"))
                        .with_hint("gpuplan models MoE on every `moe.layer_step`-th layer after the first `moe.first_dense_layers`; write a models/*.toml"));
                }
            }
            moe = Some(MoeWire {
                n_experts: c.count_u32("num_local_experts")?,
                top_k: c.count_u32("num_experts_per_tok")?,
                expert_ffn_hidden_size: ffn,
                n_shared_experts: 1,
                shared_expert_ffn_hidden_size: ffn,
                first_dense_layers: 0,
                layer_step: Some(to_u32(c, "interleave_moe_layer_step", step)?),
                expert_groups: None,
                group_top_k: None,
                // `Llama4Router`: top-k of the logits, sigmoid of those (the others -inf, 0); no
                // renormalization, no scaling, no key for it (transformers 5.17.0).
                router_score: Some("sigmoid".into()),
                norm_topk_prob: Some(false),
                routed_scaling_factor: None,
                expert_bias: None,
                // `Llama4Router` casts the sigmoid back to the logits' dtype.
                routing_weights_dtype: Some("bf16".into()),
            });
        }
        Family::Qwen2Moe | Family::Qwen3Moe => {
            // `(layer_idx + 1) % decoder_sparse_step == 0` is MoE, as `moe.layer_step` places it.
            let step = c.opt_count("decoder_sparse_step")?.unwrap_or(1);
            if let Some(v) = c.obj.get("mlp_only_layers") {
                if !v.as_array().is_some_and(|a| a.is_empty()) {
                    return Err(ConfigError::invalid(c.path, "mlp_only_layers", v, "lists dense layers, which cannot be represented")
                        .with_hint("gpuplan models MoE on every `moe.layer_step`-th layer after the first `moe.first_dense_layers`"));
                }
            }
            let shared = if family == Family::Qwen2Moe { c.opt_count("shared_expert_intermediate_size")?.unwrap_or(0) } else { 0 };
            moe = Some(MoeWire {
                n_experts: c.count_u32("num_experts")?,
                top_k: c.count_u32("num_experts_per_tok")?,
                expert_ffn_hidden_size: c.count("moe_intermediate_size")?,
                n_shared_experts: u32::from(shared > 0),
                shared_expert_ffn_hidden_size: shared,
                first_dense_layers: 0,
                layer_step: Some(to_u32(c, "decoder_sparse_step", step)?),
                expert_groups: None,
                group_top_k: None,
                // `Qwen3MoeTopKRouter` / Qwen2-MoE: softmax, top-k, divided by the sum when
                // `norm_topk_prob` (default false in `Qwen3MoeConfig` and `Qwen2MoeConfig` 5.17.0;
                // Qwen3-30B-A3B's config.json sets true).
                router_score: Some("softmax".into()),
                norm_topk_prob: Some(norm_topk_prob(c, false)?),
                routed_scaling_factor: None,
                expert_bias: None,
                // Both cast the top-k weights back to the logits' dtype (`.to(router_logits.dtype)`).
                routing_weights_dtype: Some("bf16".into()),
            });
        }
        Family::DeepSeek => {
            if let Some(freq) = c.opt_count("moe_layer_freq")? {
                if freq != 1 {
                    return Err(ConfigError::invalid(c.path, "moe_layer_freq", freq, "is not 1: MoE on every n-th layer cannot be represented")
                        .with_hint("gpuplan models MoE on every layer after the first `first_k_dense_replace`"));
                }
            }
            let expert = c.count("moe_intermediate_size")?;
            let n_shared = c.opt_count("n_shared_experts")?.unwrap_or(0);
            let first_dense = c.opt_count("first_k_dense_replace")?.unwrap_or(0);
            let v3 = model_type == "deepseek_v3";
            moe = Some(MoeWire {
                n_experts: c.count_u32("n_routed_experts")?,
                top_k: c.count_u32("num_experts_per_tok")?,
                expert_ffn_hidden_size: expert,
                n_shared_experts: to_u32(c, "n_shared_experts", n_shared)?,
                shared_expert_ffn_hidden_size: if n_shared > 0 { expert } else { 0 },
                first_dense_layers: to_u32(c, "first_k_dense_replace", first_dense)?,
                layer_step: None,
                // DeepSeek-V3 `n_group` 8 / `topk_group` 4: node-limited routing.
                expert_groups: c.opt_count("n_group")?.map(|g| to_u32(c, "n_group", g)).transpose()?,
                group_top_k: c.opt_count("topk_group")?.map(|k| to_u32(c, "topk_group", k)).transpose()?,
                // transformers 5.17.0: `DeepseekV2Moe` softmax (`DeepseekV2Config` `norm_topk_prob`
                // false, `routed_scaling_factor` 1.0, `topk_method` "greedy"); `DeepseekV3TopkRouter`
                // sigmoid plus `e_score_correction_bias` for the choice ("noaux_tc"), divided by the
                // sum when `norm_topk_prob` (default true), times `routed_scaling_factor` (default 2.5).
                router_score: Some(scoring_func(c, if v3 { "sigmoid" } else { "softmax" })?),
                norm_topk_prob: Some(norm_topk_prob(c, v3)?),
                routed_scaling_factor: Some(routed_scaling_factor(c, if v3 { 2.5 } else { 1.0 })?),
                expert_bias: Some(match c.get("topk_method") {
                    None => v3,
                    Some(Value::String(m)) => m == "noaux_tc",
                    Some(v) => {
                        return Err(ConfigError::invalid(c.path, "topk_method", v, "is not a string")
                            .with_hint("DeepSeek-V3 \"noaux_tc\" (expert bias), DeepSeek-V2 \"greedy\" or \"group_limited_greedy\""))
                    }
                }),
                // Both routers score an fp32 linear and return fp32 weights.
                routing_weights_dtype: Some("fp32".into()),
            });
            let qk_nope = c.count("qk_nope_head_dim")?;
            let qk_rope = c.count("qk_rope_head_dim")?;
            mla = Some(MlaWire {
                // null (DeepSeek-V2-Lite) = no low-rank query projection
                q_lora_rank: c.opt_count("q_lora_rank")?.unwrap_or(0),
                kv_lora_rank: c.count("kv_lora_rank")?,
                qk_nope_head_dim: qk_nope,
                qk_rope_head_dim: qk_rope,
                v_head_dim: c.count("v_head_dim")?,
            });
            // Query/key head width; values use `v_head_dim`.
            head_dim = Some(qk_nope + qk_rope);
        }
        Family::NemotronH => {
            // transformers' NemotronHConfig: `head_dim` 128 when absent; the MLP and the experts
            // are up/down projections with squared ReLU (`mlp_hidden_act` "relu2"), and attention
            // takes no position embedding.
            head_dim = Some(head_dim.unwrap_or(128));
            match c.get("mlp_hidden_act") {
                None => {}
                Some(Value::String(a)) if a == "relu2" => {}
                Some(v) => {
                    return Err(ConfigError::invalid(c.path, "mlp_hidden_act", v, "is not `relu2`, the only Nemotron-H MLP gpuplan models")
                        .with_hint("write a models/*.toml with `ffn_kind`"))
                }
            }
            ffn_kind = "plain";
            position = "none";
            if hybrid.as_ref().is_some_and(|hy| hy.pattern.contains('E')) {
                if c.get("moe_latent_size").is_some() {
                    return Err(ConfigError::invalid(c.path, "moe_latent_size", c.obj["moe_latent_size"].clone(), "is not modelled (latent MoE projections)")
                        .with_hint("gpuplan models experts on the full hidden width; remove the key only if the model has no latent projection"));
                }
                let shared = c.opt_count("moe_shared_expert_intermediate_size")?.unwrap_or(0);
                moe = Some(MoeWire {
                    n_experts: c.count_u32("n_routed_experts")?,
                    top_k: c.count_u32("num_experts_per_tok")?,
                    expert_ffn_hidden_size: c.count("moe_intermediate_size")?,
                    // transformers' NemotronHMoE: one shared MLP of this width.
                    n_shared_experts: u32::from(shared > 0),
                    shared_expert_ffn_hidden_size: shared,
                    first_dense_layers: 0,
                    layer_step: None,
                    expert_groups: None,
                    group_top_k: None,
                    // `NemotronHTopkRouter` (transformers 5.17.0): sigmoid plus
                    // `e_score_correction_bias` for the choice, divided by the sum when
                    // `norm_topk_prob` (default true), times `routed_scaling_factor` (default 1.0).
                    router_score: Some("sigmoid".into()),
                    norm_topk_prob: Some(norm_topk_prob(c, true)?),
                    routed_scaling_factor: Some(routed_scaling_factor(c, 1.0)?),
                    expert_bias: Some(true),
                    // fp32 linear, fp32 weights.
                    routing_weights_dtype: Some("fp32".into()),
                });
            }
        }
    }
    if family == Family::NemotronH && ffn == 0 && hybrid.as_ref().is_some_and(|hy| hy.pattern.contains('-')) {
        return Err(c.missing("intermediate_size"));
    }

    // DeepSeek-V3's multi-token-prediction modules (0 where the key is absent).
    let mtp_layers = match c.opt_count("num_nextn_predict_layers")? {
        Some(n) => to_u32(c, "num_nextn_predict_layers", n)?,
        None => 0,
    };
    let name = c.name();
    Ok(ModelWire {
        display_name: name.clone(),
        source: format!("Hugging Face config.json `{}` (model_type `{model_type}`)", c.path.display()),
        name,
        published_params_b: None,
        n_layers,
        hidden_size: hidden,
        n_heads,
        n_kv_heads,
        head_dim,
        ffn_hidden_size: dense_ffn,
        ffn_kind: ffn_kind.into(),
        vocab_size: vocab,
        tied_embeddings: tied,
        norm: "rmsnorm".into(),
        position: position.into(),
        max_seq_len,
        linear_bias,
        qkv_bias,
        // Qwen3 and Qwen3-MoE normalize each head's queries and keys (`q_norm`, `k_norm`, RMSNorm
        // over head_dim) before RoPE, with no config key for it.
        // Llama-4's `use_qk_norm` (default true) is a weightless L2 norm of q and k.
        // Gemma 3 (`Gemma3Attention.q_norm`, `k_norm`, per head) and OLMo-2 (whole projections).
        qk_norm: matches!(family, Family::Qwen3 | Family::Qwen3Moe | Family::Gemma3 | Family::Olmo2)
            || (family == Family::Llama4 && c.opt_bool("use_qk_norm")?.unwrap_or(true)),
        qk_norm_scope: style.qk_norm_scope.map(str::to_string),
        norm_placement: style.norm_placement.map(str::to_string),
        rms_norm_style: style.rms_norm_style.map(str::to_string),
        embedding_scale: style.embedding_scale,
        final_logit_softcap: style.final_logit_softcap,
        fused_projections: style.fused_projections,
        moe,
        mla,
        hybrid,
        attention,
        mtp_layers,
    })
}

/// The [`ModelWire`] layer-style keys a family sets (absent: Llama's).
#[derive(Default)]
struct StyleKeys {
    norm_placement: Option<&'static str>,
    rms_norm_style: Option<&'static str>,
    qk_norm_scope: Option<&'static str>,
    embedding_scale: bool,
    final_logit_softcap: Option<f64>,
    fused_projections: bool,
}

/// A config.json's `sliding_window` (its class's `default` where absent; an explicit null or no
/// default: no window) and `layer_types` (`default_types` where absent), as an [`AttentionWire`];
/// `None` without a window.
fn sliding_attention(c: &Keys, default: Option<u64>, default_types: Vec<String>) -> Result<Option<AttentionWire>, ConfigError> {
    let window = match c.obj.get("sliding_window") {
        Some(Value::Null) => None,
        None => default,
        Some(v) => match v.as_u64() {
            Some(n) if n > 0 => Some(n),
            _ => {
                return Err(ConfigError::invalid(c.path, "sliding_window", v, "is not a positive whole number of keys")
                    .with_hint("the keys a query sees; null for no window"))
            }
        },
    };
    let Some(window) = window else { return Ok(None) };
    let layer_types = match c.get("layer_types") {
        None => default_types,
        Some(v) => layer_types(c, v)?,
    };
    Ok(Some(AttentionWire { layer_types: Some(layer_types), sliding_window: Some(window), sinks: false }))
}

/// A config.json's `layer_types` list.
fn layer_types(c: &Keys, v: &Value) -> Result<Vec<String>, ConfigError> {
    let Value::Array(list) = v else {
        return Err(ConfigError::invalid(c.path, "layer_types", v, "is not a list").with_hint(crate::model::wire::LAYER_TYPES_HINT));
    };
    list.iter()
        .map(|t| {
            t.as_str()
                .map(str::to_string)
                .ok_or_else(|| ConfigError::invalid(c.path, "layer_types", t, "is not a layer type name").with_hint(crate::model::wire::LAYER_TYPES_HINT))
        })
        .collect()
}

/// A Nemotron-H config.json's layer pattern and Mamba-2 keys, with transformers' `NemotronHConfig`
/// names, its older aliases (`mamba_n_groups`, `mamba_d_conv`, `mamba_chunk_size`) and its defaults
/// (`n_groups` 8, `conv_kernel` 4, `chunk_size` 128). The pattern is `hybrid_override_pattern`, or
/// the newer `layers_block_type` list (`mamba`/`linear_attention`, `attention`/`full_attention`,
/// `mlp`, `moe`).
fn hybrid_from_keys(c: &Keys) -> Result<HybridWire, ConfigError> {
    let pattern = match (c.get("hybrid_override_pattern"), c.get("layers_block_type")) {
        (Some(Value::String(p)), _) => p.clone(),
        (Some(v), _) => return Err(ConfigError::invalid(c.path, "hybrid_override_pattern", v, "is not a string").with_hint(crate::model::wire::PATTERN_HINT)),
        (None, Some(Value::Array(list))) => {
            let mut p = String::new();
            for v in list {
                p.push(match v.as_str() {
                    Some("mamba" | "linear_attention") => 'M',
                    Some("attention" | "full_attention") => '*',
                    Some("mlp") => '-',
                    Some("moe") => 'E',
                    _ => {
                        return Err(ConfigError::invalid(c.path, "layers_block_type", v, "is not a known layer type")
                            .with_hint("one of: mamba (linear_attention), attention (full_attention), mlp, moe"))
                    }
                });
            }
            p
        }
        (None, Some(v)) => return Err(ConfigError::invalid(c.path, "layers_block_type", v, "is not a list of layer types")),
        (None, None) => return Err(c.missing("hybrid_override_pattern")),
    };
    let either = |new: &str, old: &str, default: u64| -> Result<u64, ConfigError> { Ok(c.opt_count(new)?.or(c.opt_count(old)?).unwrap_or(default)) };
    Ok(HybridWire {
        pattern,
        mamba_num_heads: c.count("mamba_num_heads")?,
        mamba_head_dim: c.count("mamba_head_dim")?,
        ssm_state_size: c.count("ssm_state_size")?,
        n_groups: either("n_groups", "mamba_n_groups", 8)?,
        conv_kernel: either("conv_kernel", "mamba_d_conv", 4)?,
        chunk_size: either("chunk_size", "mamba_chunk_size", 128)?,
    })
}

/// Every layer MoE with routed experts only (Mixtral, GPT-OSS): `num_local_experts` experts of
/// width `ffn`, `num_experts_per_tok` per token, no shared or dense layers, no expert groups.
/// `weights_dtype`: the routed weights' dtype (`MixtralTopKRouter` returns its fp32 softmax
/// values; `GptOssTopKRouter` takes the softmax in the logits' dtype).
fn every_layer_routed(c: &Keys, ffn: u64, weights_dtype: &str) -> Result<MoeWire, ConfigError> {
    Ok(MoeWire {
        n_experts: c.count_u32("num_local_experts")?,
        top_k: c.count_u32("num_experts_per_tok")?,
        expert_ffn_hidden_size: ffn,
        n_shared_experts: 0,
        shared_expert_ffn_hidden_size: 0,
        first_dense_layers: 0,
        layer_step: None,
        expert_groups: None,
        group_top_k: None,
        // Mixtral: softmax, top-k, the k weights divided by their sum (`MixtralTopKRouter`, always);
        // GPT-OSS: top-k of the logits, softmax over those k (`GptOssTopKRouter`), the same weights.
        // transformers 5.17.0; neither reads a key for it.
        router_score: Some("softmax".into()),
        norm_topk_prob: Some(true),
        routed_scaling_factor: None,
        expert_bias: None,
        routing_weights_dtype: Some(weights_dtype.into()),
    })
}

/// `scoring_func` (DeepSeek), checked here so that the error names the config.json key.
fn scoring_func(c: &Keys, default: &str) -> Result<String, ConfigError> {
    match c.get("scoring_func") {
        None => Ok(default.to_string()),
        Some(Value::String(s)) if s == "softmax" || s == "sigmoid" => Ok(s.clone()),
        Some(v) => Err(ConfigError::invalid(c.path, "scoring_func", v, "is not a known router score function")
            .with_hint("one of: softmax, sigmoid (DeepSeek-V2 softmax, DeepSeek-V3 sigmoid)")),
    }
}

/// `norm_topk_prob`, with the family's default where absent.
fn norm_topk_prob(c: &Keys, default: bool) -> Result<bool, ConfigError> {
    match c.get("norm_topk_prob") {
        None => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => Err(ConfigError::invalid(c.path, "norm_topk_prob", v, "is not true or false")
            .with_hint("true: the k routed weights are divided by their sum (Qwen3-30B-A3B, DeepSeek-V3)")),
    }
}

/// `routed_scaling_factor`, with the family's default where absent; positive.
fn routed_scaling_factor(c: &Keys, default: f64) -> Result<f64, ConfigError> {
    match c.get("routed_scaling_factor") {
        None => Ok(default),
        Some(v) => match v.as_f64() {
            Some(f) if f.is_finite() && f > 0.0 => Ok(f),
            _ => Err(ConfigError::invalid(c.path, "routed_scaling_factor", v, "must be a positive number")
                .with_hint("the routed weights' multiplier after the top-k: 1 for none, DeepSeek-V3 2.5")),
        },
    }
}

fn to_u32(c: &Keys, key: &str, v: u64) -> Result<u32, ConfigError> {
    u32::try_from(v).map_err(|_| ConfigError::invalid(c.path, key, v, "is too large"))
}

/// Typed access to the keys of one config.json, with errors that name the file, key and value.
struct Keys<'a> {
    path: &'a Path,
    obj: &'a Map<String, Value>,
}

impl Keys<'_> {
    fn missing(&self, key: &str) -> ConfigError {
        ConfigError::invalid(self.path, key, "(missing)", "is required")
            .with_hint("this key is in every published config.json of its model_type; add it, or write a models/*.toml file")
    }

    /// The value of `key`; JSON `null` counts as absent.
    fn get(&self, key: &str) -> Option<&Value> {
        self.obj.get(key).filter(|v| !v.is_null())
    }

    fn string(&self, key: &str) -> Result<String, ConfigError> {
        match self.get(key) {
            None => Err(self.missing(key)),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(v) => Err(ConfigError::invalid(self.path, key, v, "is not a string")),
        }
    }

    fn opt_count(&self, key: &str) -> Result<Option<u64>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(n) if n > 0 => Ok(Some(n)),
                _ => Err(ConfigError::invalid(self.path, key, v, "must be a positive integer")),
            },
        }
    }

    fn count(&self, key: &str) -> Result<u64, ConfigError> {
        self.opt_count(key)?.ok_or_else(|| self.missing(key))
    }

    fn count_u32(&self, key: &str) -> Result<u32, ConfigError> {
        let v = self.count(key)?;
        to_u32(self, key, v)
    }

    fn opt_bool(&self, key: &str) -> Result<Option<bool>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(ConfigError::invalid(self.path, key, v, "is not true or false")),
        }
    }

    /// A name for the model: `_name_or_path` where the file has one, else the file name without
    /// `.json` and `.config` (`Qwen--Qwen3-8B.config.json` -> `Qwen--Qwen3-8B`), or the folder's name
    /// for a plain `config.json`.
    fn name(&self) -> String {
        if let Some(Value::String(s)) = self.get("_name_or_path") {
            if !s.trim().is_empty() {
                return s.clone();
            }
        }
        let stem = self.path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let stem = stem.strip_suffix(".config").map(str::to_string).unwrap_or(stem);
        if stem == "config" {
            if let Some(dir) = self.path.parent().and_then(|d| d.file_name()) {
                return dir.to_string_lossy().into_owned();
            }
        }
        stem
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A JSON syntax error as `file:line:column`, with the line and a caret under the column.
fn parse_error(path: &Path, text: &str, e: &serde_json::Error) -> ConfigError {
    let (line, column) = (e.line(), e.column());
    let line_text = text.lines().nth(line.saturating_sub(1)).unwrap_or("");
    let snippet = format!("  | {line_text}\n  | {}^", " ".repeat(column.saturating_sub(1)));
    let message = e.to_string();
    // serde_json appends " at line L column C"; the location is already in the prefix.
    let message = message.split(" at line ").next().unwrap_or(&message).to_string();
    ConfigError::Parse { path: path.to_path_buf(), line, column, message, snippet }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Model, ConfigError> {
        model_from_hf_json(Path::new("org--Some-Model.config.json"), text)
    }

    const LLAMA: &str = r#"{
        "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 1000,
        "max_position_embeddings": 256, "rope_scaling": null, "tie_word_embeddings": true
    }"#;

    #[test]
    fn llama_keys_map_onto_the_model() {
        let m = load(LLAMA).unwrap();
        assert_eq!(m.name, "org--Some-Model");
        assert_eq!((m.n_layers, m.hidden, m.n_heads, m.n_kv_heads, m.head_dim), (2, 64, 4, 2, 16));
        assert_eq!((m.ffn_hidden, m.vocab, m.max_seq_len, m.tied_embeddings), (128, 1000, 256, true));
        assert!(!m.qkv_bias && !m.linear_bias && m.moe.is_none() && m.mla.is_none());
    }

    /// A Llama-4 config.json's shape (model_type llama4, the language model under `text_config`),
    /// scaled down: 4 layers, MoE on every 2nd (`interleave_moe_layer_step`).
    const LLAMA4: &str = r#"{
        "model_type": "llama4", "vision_config": {"hidden_size": 1408},
        "text_config": {
            "model_type": "llama4_text", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 32, "intermediate_size_mlp": 96,
            "vocab_size": 1000, "max_position_embeddings": 256, "num_local_experts": 8,
            "num_experts_per_tok": 1, "interleave_moe_layer_step": 2, "tie_word_embeddings": false
        }
    }"#;

    #[test]
    fn llama4_reads_its_text_config_with_moe_on_every_other_layer() {
        let m = load(LLAMA4).unwrap();
        let moe = m.moe.as_ref().unwrap();
        assert_eq!((moe.n_experts, moe.top_k, moe.expert_ffn_hidden, moe.n_shared_experts, moe.shared_expert_ffn_hidden, moe.layer_step), (8, 1, 32, 1, 32, 2));
        assert_eq!(m.ffn_hidden, 96, "dense layers take intermediate_size_mlp");
        assert_eq!((0..4).map(|i| m.is_moe_layer(i)).collect::<Vec<_>>(), vec![false, true, false, true]);
        assert!(m.qk_norm, "use_qk_norm defaults to true");
        // Llama4Router: sigmoid of the top-k logits, no renormalization, no scaling, no bias.
        let r = moe.router;
        assert_eq!((r.score, r.norm_topk_prob, r.routed_scaling_factor, r.expert_bias), (gpuplan_core::model::RouterScore::Sigmoid, false, 1.0, false));
        // An explicit `moe_layers` that is the default pattern is accepted; another is refused.
        let with = |layers: &str| LLAMA4.replace(r#""interleave_moe_layer_step": 2,"#, &format!(r#""interleave_moe_layer_step": 2, "moe_layers": {layers},"#));
        assert!(load(&with("[1, 3]")).is_ok());
        let e = load(&with("[0, 3]")).unwrap_err().to_string();
        assert!(e.contains("moe_layers") && e.contains("every 2-th"), "{e}");
        let e = load(r#"{"model_type": "llama4"}"#).unwrap_err().to_string();
        assert!(e.contains("text_config"), "{e}");
    }

    /// The four published shapes of scenarios/workloads/hf_configs/ (written from memory of the
    /// published config.json files; calibration/runs/raw/hffamilies-2026-11-25/README.md), with the
    /// parameter counts transformers builds for them (gemma-2-2b 2,614,341,888, phi-3-mini
    /// 3,821,079,552, OLMo-2-0425-1B 1,484,916,736, gemma-3-1b 999,885,952 of which 13,312 are
    /// the per-head QK-norm weights gpuplan leaves out).
    fn shipped(name: &str) -> Model {
        let path = format!("{}/../../scenarios/workloads/hf_configs/{name}.json", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap();
        model_from_hf_json(Path::new(&path), &text).unwrap()
    }

    #[test]
    fn gemma_phi3_and_olmo2_configs_map_with_their_families_layouts() {
        use gpuplan_core::model::{NormPlacement, RmsStyle};
        let g2 = shipped("gemma-2-2b");
        assert_eq!(
            (g2.head_dim, g2.tied_embeddings, g2.style.norm_placement, g2.style.rms_style),
            (256, true, NormPlacement::PrePost, RmsStyle::OffsetScaleThenCast)
        );
        assert_eq!((g2.style.embedding_scale, g2.style.final_logit_softcap, g2.qk_norm), (true, Some(30.0), false));
        let sw = g2.sliding_window.as_ref().unwrap();
        assert_eq!((sw.window, sw.n_sliding(), sw.sliding[0], sw.sliding[1]), (4096, 13, true, false), "even layers slide");
        assert_eq!(g2.params().total(), 2_614_341_888.0);

        let g3 = shipped("gemma-3-1b");
        let sw = g3.sliding_window.as_ref().unwrap();
        assert_eq!((sw.window, sw.n_sliding()), (512, 22), "five of six layers slide: 26 - 4 full (5, 11, 17, 23)");
        assert!(!sw.sliding[5] && sw.sliding[6] && g3.qk_norm && !g3.style.qk_norm_projection);
        assert_eq!((g3.style.final_logit_softcap, g3.n_kv_heads), (None, 1));
        assert_eq!(g3.params().total(), 999_885_952.0 - 26.0 * 512.0);

        let phi = shipped("phi-3-mini-4k");
        assert!(phi.style.fused_projections && !phi.tied_embeddings && phi.style.norm_placement == NormPlacement::Pre);
        let sw = phi.sliding_window.as_ref().unwrap();
        assert_eq!((sw.window, sw.n_sliding()), (2047, 32), "every layer slides");
        assert_eq!(phi.params().total(), 3_821_079_552.0);
        // qkv_proj, o_proj, gate_up_proj, down_proj and two norms per layer; embedding, final norm, LM head.
        assert_eq!(phi.hf_param_tensors(), 32 * 6 + 3);

        let olmo = shipped("olmo-2-1b");
        assert_eq!(
            (olmo.style.norm_placement, olmo.style.rms_style, olmo.qk_norm, olmo.style.qk_norm_projection),
            (NormPlacement::Post, RmsStyle::ScaleThenCast, true, true)
        );
        assert!(olmo.sliding_window.is_none() && !olmo.style.embedding_scale);
        assert_eq!(olmo.params().total(), 1_484_916_736.0);
    }

    #[test]
    fn gemma_defaults_and_bad_keys_are_named() {
        // Absent keys take Gemma2Config's defaults (transformers 5.17.0): head_dim 256, tied
        // embeddings, window 4096 on even layers, final soft-cap 30; an explicit null turns the
        // soft-cap and the window off.
        let base = r#"{"model_type": "gemma2", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
            "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 1000, "max_position_embeddings": 8192"#;
        let m = load(&format!("{base}}}")).unwrap();
        assert_eq!((m.head_dim, m.tied_embeddings, m.style.final_logit_softcap), (256, true, Some(30.0)));
        assert_eq!(m.sliding_window.as_ref().map(|s| (s.window, s.n_sliding())), Some((4096, 2)));
        let m = load(&format!(r#"{base}, "final_logit_softcapping": null, "sliding_window": null}}"#)).unwrap();
        assert!(m.style.final_logit_softcap.is_none() && m.sliding_window.is_none());
        let e = load(&format!(r#"{base}, "hidden_activation": "relu"}}"#)).unwrap_err().to_string();
        assert!(e.contains("hidden_activation") && e.contains("relu"), "{e}");
        let e = load(&format!(r#"{base}, "final_logit_softcapping": -1}}"#)).unwrap_err().to_string();
        assert!(e.contains("final_logit_softcapping"), "{e}");
        let e = load(&format!(r#"{base}, "sliding_window_pattern": 0, "model_type": "gemma3_text"}}"#).replace(r#""model_type": "gemma2", "#, ""))
            .unwrap_err()
            .to_string();
        assert!(e.contains("sliding_window_pattern"), "{e}");
        // A multimodal Gemma 3 config reads its language model from `text_config`.
        let mm = format!(r#"{{"model_type": "gemma3", "text_config": {}}}"#, format!("{base}}}").replace("gemma2", "gemma3_text"));
        let m = load(&mm).unwrap();
        assert!(m.qk_norm && m.style.norm_placement == gpuplan_core::model::NormPlacement::PrePost);
        let e = load(r#"{"model_type": "gemma3"}"#).unwrap_err().to_string();
        assert!(e.contains("text_config"), "{e}");
        // A missing required key names the file and the key.
        let e = load(r#"{"model_type": "olmo2", "hidden_size": 64}"#).unwrap_err().to_string();
        assert!(e.contains("org--Some-Model.config.json") && e.contains("num_hidden_layers"), "{e}");
        let e = load(
            r#"{"model_type": "phi3", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10, "max_position_embeddings": 64}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("intermediate_size") && e.contains("is required"), "{e}");
    }

    #[test]
    fn absent_keys_take_the_transformers_defaults() {
        let m = load(
            r#"{"model_type": "mistral", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
            "intermediate_size": 128, "vocab_size": 1000, "max_position_embeddings": 256}"#,
        )
        .unwrap();
        assert_eq!((m.n_kv_heads, m.head_dim, m.tied_embeddings), (4, 16, false));
    }

    #[test]
    fn qwen2_has_qkv_bias_without_a_key() {
        let m = load(&LLAMA.replace("\"llama\"", "\"qwen2\"")).unwrap();
        assert!(m.qkv_bias && !m.linear_bias);
    }

    #[test]
    fn qwen2_moe_has_one_shared_expert_of_its_own_width() {
        let text = LLAMA.replace("\"llama\"", "\"qwen2_moe\"").replace(
            "\"vocab_size\"",
            "\"num_experts\": 8, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32, \"shared_expert_intermediate_size\": 96, \"decoder_sparse_step\": 1, \"mlp_only_layers\": [], \"vocab_size\"",
        );
        let moe = load(&text).unwrap().moe.unwrap();
        assert_eq!((moe.n_experts, moe.top_k, moe.expert_ffn_hidden, moe.n_shared_experts, moe.shared_expert_ffn_hidden), (8, 2, 32, 1, 96));
    }

    #[test]
    fn unknown_model_type_names_file_key_value_and_hint() {
        let err = load(&LLAMA.replace("\"llama\"", "\"lama\"")).unwrap_err().to_string();
        assert!(err.contains("org--Some-Model.config.json"), "{err}");
        assert!(err.contains("`model_type` = `\"lama\"` is not a supported architecture"), "{err}");
        assert!(err.contains("hint: did you mean `llama`?"), "{err}");
    }

    #[test]
    fn missing_required_key_is_named() {
        let err = load(&LLAMA.replace("\"vocab_size\": 1000,", "")).unwrap_err().to_string();
        assert!(err.contains("`vocab_size` = `(missing)` is required"), "{err}");
        assert!(err.contains("hint:"), "{err}");
    }

    #[test]
    fn wrong_types_and_values_are_named() {
        let err = load(&LLAMA.replace("\"hidden_size\": 64", "\"hidden_size\": \"64\"")).unwrap_err().to_string();
        assert!(err.contains("`hidden_size` = `\"64\"` must be a positive integer"), "{err}");
        let err = load(&LLAMA.replace("\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3")).unwrap_err().to_string();
        assert!(err.contains("`num_key_value_heads` = `3` does not divide `num_attention_heads` = 4"), "{err}");
    }

    #[test]
    fn layouts_that_cannot_be_represented_are_errors() {
        let text = LLAMA.replace("\"llama\"", "\"qwen3_moe\"").replace(
            "\"vocab_size\"",
            "\"num_experts\": 8, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32, \"decoder_sparse_step\": 2, \"vocab_size\"",
        );
        // MoE on every 2nd layer is `moe.layer_step` (transformers: (layer_idx + 1) % step == 0) ...
        let m = load(&text).unwrap();
        assert_eq!(m.moe.as_ref().unwrap().layer_step, 2);
        assert_eq!((m.is_moe_layer(0), m.is_moe_layer(1)), (false, true));
        // ... a list of dense layers is not.
        let err = load(&text.replace("\"decoder_sparse_step\": 2,", "\"mlp_only_layers\": [0],")).unwrap_err().to_string();
        assert!(err.contains("`mlp_only_layers` = `[0]`"), "{err}");
    }

    /// NemotronHConfig's keys (transformers 5.17) with a small shape.
    const NEMOTRON_H: &str = r#"{
        "model_type": "nemotron_h", "num_hidden_layers": 6, "hidden_size": 256, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 512, "vocab_size": 1000,
        "max_position_embeddings": 4096, "tie_word_embeddings": false, "mlp_hidden_act": "relu2",
        "hybrid_override_pattern": "M-M*-M", "mamba_num_heads": 8, "mamba_head_dim": 64,
        "ssm_state_size": 128, "n_groups": 2, "conv_kernel": 4, "chunk_size": 128, "expand": 2
    }"#;

    #[test]
    fn nemotron_h_keys_map_onto_a_hybrid_model() {
        let m = load(NEMOTRON_H).unwrap();
        let hy = m.hybrid.as_ref().unwrap();
        assert_eq!(hy.pattern_string(), "M-M*-M");
        assert_eq!(
            (hy.mamba.n_heads, hy.mamba.head_dim, hy.mamba.state_size, hy.mamba.n_groups, hy.mamba.conv_kernel, hy.mamba.chunk_size),
            (8, 64, 128, 2, 4, 128)
        );
        assert_eq!((m.ffn_kind, m.position, m.head_dim, m.n_layers), (gpuplan_core::model::FfnKind::Plain, gpuplan_core::model::Position::None, 64, 6));
        assert_eq!((m.n_mamba_layers(), m.n_attention_layers(), m.n_dense_layers()), (3, 1, 2));
        // The newer list form and the older key names give the same model.
        let list = NEMOTRON_H
            .replace(r#""hybrid_override_pattern": "M-M*-M""#, r#""layers_block_type": ["mamba", "mlp", "linear_attention", "full_attention", "mlp", "mamba"]"#)
            .replace(r#""n_groups": 2, "conv_kernel": 4, "chunk_size": 128"#, r#""mamba_n_groups": 2, "mamba_d_conv": 4, "mamba_chunk_size": 128"#);
        assert_eq!(load(&list).unwrap(), m);
    }

    #[test]
    fn nemotron_h_errors_name_the_key_value_and_hint() {
        let err = load(&NEMOTRON_H.replace("M-M*-M", "M-G*-M")).unwrap_err().to_string();
        assert!(err.contains("`hybrid.pattern` = `M-G*-M` has `G` at layer 2, which is not a known layer symbol"), "{err}");
        assert!(err.contains("hint: one symbol per layer: `M` Mamba-2"), "{err}");
        let err = load(&NEMOTRON_H.replace("M-M*-M", "M-M*-")).unwrap_err().to_string();
        assert!(err.contains("`hybrid.pattern` = `M-M*-` has 5 layers, `n_layers` = 6"), "{err}");
        let err = load(&NEMOTRON_H.replace(r#""n_groups": 2"#, r#""n_groups": 3"#)).unwrap_err().to_string();
        assert!(err.contains("`hybrid.n_groups` = `3` does not divide `hybrid.mamba_num_heads` = 8"), "{err}");
        let err = load(&NEMOTRON_H.replace(r#""relu2""#, r#""silu""#)).unwrap_err().to_string();
        assert!(err.contains("`mlp_hidden_act`"), "{err}");
        let err = load(&NEMOTRON_H.replace(r#""hybrid_override_pattern": "M-M*-M", "#, "")).unwrap_err().to_string();
        assert!(err.contains("`hybrid_override_pattern` = `(missing)` is required"), "{err}");
    }

    #[test]
    fn syntax_errors_point_at_line_and_column() {
        let err = load("{\n  \"model_type\": \"llama\",\n  \"hidden_size\": ,\n}").unwrap_err();
        match err {
            ConfigError::Parse { line, column, snippet, .. } => {
                assert_eq!((line, column), (3, 18));
                assert!(snippet.ends_with('^'), "{snippet}");
            }
            other => panic!("expected a parse error, got {other}"),
        }
    }

    #[test]
    fn top_level_must_be_an_object() {
        let err = load("[1, 2]").unwrap_err().to_string();
        assert!(err.contains("is not a JSON object"), "{err}");
    }
}
