//! Hugging Face `config.json` files, read directly: Llama, Mistral, Mixtral, Qwen2, Qwen2-MoE, Qwen3,
//! Qwen3-MoE, DeepSeek-V2 and DeepSeek-V3 (the `model_type` key says which).
//!
//! The keys are mapped onto the same wire struct as `models/*.toml` ([`ModelWire`]) and converted by the
//! same code, so a config.json and the TOML written from it give the same [`Model`]. Defaults for absent
//! keys are those of the model's `transformers` configuration class (`LlamaConfig`, `Qwen3MoeConfig`,
//! ...): `tie_word_embeddings` false, `num_key_value_heads` = `num_attention_heads`, `head_dim` =
//! `hidden_size / num_attention_heads`, no attention bias. What a config.json says that gpuplan does
//! not model (sliding windows, RoPE scaling, router details, DeepSeek's multi-token-prediction layers)
//! is ignored; a layout it cannot represent (MoE on every other layer, a list of dense layers) is an
//! error, never a silent approximation.

use std::path::Path;

use serde_json::{Map, Value};

use super::{closest, ConfigError};
use crate::model::wire::{model_from_wire, MlaWire, ModelWire, MoeWire};
use gpuplan_core::model::Model;

/// The `model_type` values this loader understands.
pub const SUPPORTED: [&str; 9] = ["llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "deepseek_v2", "deepseek_v3"];

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

    let n_layers = c.count("num_hidden_layers")?;
    let hidden = c.count("hidden_size")?;
    let n_heads = c.count("num_attention_heads")?;
    let n_kv_heads = c.opt_count("num_key_value_heads")?;
    if let Some(kv) = n_kv_heads {
        if n_heads % kv != 0 {
            return Err(ConfigError::invalid(c.path, "num_key_value_heads", kv, format!("does not divide `num_attention_heads` = {n_heads}")));
        }
    }
    let ffn = c.count("intermediate_size")?;
    let vocab = c.count("vocab_size")?;
    let max_seq_len = c.count("max_position_embeddings")?;
    let tied = c.opt_bool("tie_word_embeddings")?.unwrap_or(false);
    let attention_bias = c.opt_bool("attention_bias")?.unwrap_or(false);
    let mlp_bias = c.opt_bool("mlp_bias")?.unwrap_or(false);

    let (linear_bias, qkv_bias) = match family {
        // Qwen2 and Qwen2-MoE put biases on the Q, K and V projections, always, with no key for it.
        Family::Qwen2 | Family::Qwen2Moe => (false, true),
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
    let mut moe = None;
    let mut mla = None;
    match family {
        Family::Llama | Family::Mistral | Family::Qwen2 | Family::Qwen3 => {}
        Family::Mixtral => {
            moe = Some(MoeWire {
                n_experts: c.count_u32("num_local_experts")?,
                top_k: c.count_u32("num_experts_per_tok")?,
                expert_ffn_hidden_size: ffn,
                n_shared_experts: 0,
                shared_expert_ffn_hidden_size: 0,
                first_dense_layers: 0,
            });
        }
        Family::Qwen2Moe | Family::Qwen3Moe => {
            if let Some(step) = c.opt_count("decoder_sparse_step")? {
                if step != 1 {
                    return Err(ConfigError::invalid(c.path, "decoder_sparse_step", step, "is not 1: MoE on every n-th layer cannot be represented")
                        .with_hint("gpuplan models MoE on every layer after the first `moe.first_dense_layers`"));
                }
            }
            if let Some(v) = c.obj.get("mlp_only_layers") {
                if !v.as_array().is_some_and(|a| a.is_empty()) {
                    return Err(ConfigError::invalid(c.path, "mlp_only_layers", v, "lists dense layers, which cannot be represented")
                        .with_hint("gpuplan models MoE on every layer after the first `moe.first_dense_layers`"));
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
            moe = Some(MoeWire {
                n_experts: c.count_u32("n_routed_experts")?,
                top_k: c.count_u32("num_experts_per_tok")?,
                expert_ffn_hidden_size: expert,
                n_shared_experts: to_u32(c, "n_shared_experts", n_shared)?,
                shared_expert_ffn_hidden_size: if n_shared > 0 { expert } else { 0 },
                first_dense_layers: to_u32(c, "first_k_dense_replace", first_dense)?,
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
        ffn_hidden_size: ffn,
        ffn_kind: "gated".into(),
        vocab_size: vocab,
        tied_embeddings: tied,
        norm: "rmsnorm".into(),
        position: "rope".into(),
        max_seq_len,
        linear_bias,
        qkv_bias,
        // Qwen3 and Qwen3-MoE normalize each head's queries and keys (`q_norm`, `k_norm`, RMSNorm
        // over head_dim) before RoPE, with no config key for it.
        qk_norm: matches!(family, Family::Qwen3 | Family::Qwen3Moe),
        moe,
        mla,
        mtp_layers,
    })
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
        let err = load(&text).unwrap_err().to_string();
        assert!(err.contains("`decoder_sparse_step` = `2`"), "{err}");
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
