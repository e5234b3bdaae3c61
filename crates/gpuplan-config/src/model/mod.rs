//! Model files: a model TOML (`models/*.toml`, the wire format in [`wire`]) or a Hugging Face
//! `config.json` (mapped onto the same wire struct by `hf`), by catalog name or path.

pub mod wire;

use std::path::Path;

pub use wire::*;

use crate::{hf, parse_toml, read_file, resolve, ConfigError};
use gpuplan_core::model::Model;

pub const DIR: &str = "models";

/// Load a model by catalog name, TOML path, or HF `config.json` path.
pub fn load_model(name_or_path: &str) -> Result<Model, ConfigError> {
    let path = resolve(name_or_path, DIR, "model")?;
    let text = read_file(&path)?;
    model_from_text(&path, &text)
}

/// A model from a file's text: an HF `config.json` when `path` ends in `.json`, else a model TOML.
/// `path` names the file in messages (a run record's copy of a model file is read this way).
pub fn model_from_text(path: &Path, text: &str) -> Result<Model, ConfigError> {
    if path.extension().is_some_and(|e| e == "json") {
        return hf::model_from_hf_json(path, text);
    }
    let wire: ModelWire = parse_toml(path, text)?;
    model_from_wire(path, &wire)
}
