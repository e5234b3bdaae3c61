//! Hugging Face `config.json` (Llama, Qwen2/3, Mistral, Mixtral, Qwen3-MoE, DeepSeek-V3 styles).

use std::path::Path;

use super::ConfigError;
use crate::model::Model;

pub fn model_from_hf_json(path: &Path, _text: &str) -> Result<Model, ConfigError> {
    Err(ConfigError::invalid(path, "model_type", "?", "HF config.json loading is being written"))
}
