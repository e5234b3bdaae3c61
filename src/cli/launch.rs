//! `--launch`, `--launch-dir`, `--launch-model` of `plan --mode serve` and `serve`: the chosen
//! deployment as launch configuration for TensorRT-LLM, vLLM and SGLang (`core::deploy::launch`),
//! printed, written as files, or added to the JSON.

use std::path::{Path, PathBuf};

use anyhow::bail;

use crate::deploy::launch::{file_names, launch, Server};
use crate::report::views::launch as view;
use crate::serve::{Deployment, Role};

#[derive(clap::Args, Debug, Clone, Default)]
pub struct LaunchArgs {
    /// Serving: print the chosen deployment as launch configuration for trtllm, vllm, sglang or
    /// all (the default without a value): commands, TensorRT-LLM's extra-options YAML, the router
    #[arg(long, value_name = "trtllm|vllm|sglang|all", num_args = 0..=1, default_missing_value = "all")]
    pub launch: Option<String>,
    /// Serving: write the launch files (SERVER-launch.sh and YAML) into this folder instead of
    /// printing them (implies --launch all unless --launch names one); existing files need --force
    #[arg(long, value_name = "DIR")]
    pub launch_dir: Option<PathBuf>,
    /// Serving: the checkpoint the launch commands load (a Hugging Face repository or a local
    /// path); default: the gpuplan model name
    #[arg(long, value_name = "ID")]
    pub launch_model: Option<String>,
}

/// What was asked: the servers, and where the files go.
pub struct Asked {
    pub servers: Vec<Server>,
    pub dir: Option<PathBuf>,
    pub checkpoint: Option<String>,
}

impl LaunchArgs {
    /// The servers asked for, or `None` when no launch flag is given.
    pub fn asked(&self) -> anyhow::Result<Option<Asked>> {
        if self.launch.is_none() && self.launch_dir.is_none() {
            if self.launch_model.is_some() {
                bail!("`--launch-model` names the checkpoint of the launch configuration\nhint: add `--launch [trtllm|vllm|sglang|all]` or `--launch-dir DIR`");
            }
            return Ok(None);
        }
        let name = self.launch.as_deref().unwrap_or("all");
        let servers = match name {
            "all" => Server::ALL.to_vec(),
            other => match Server::parse(other) {
                Some(s) => vec![s],
                None => bail!("`--launch` = `{other}` is not a server gpuplan writes launch configuration for\nhint: one of: trtllm, vllm, sglang, all"),
            },
        };
        if let Some(m) = &self.launch_model {
            if m.trim().is_empty() || m.chars().any(|c| c.is_control() || c == '\'') {
                bail!("`--launch-model` = `{m}` is not a checkpoint name\nhint: a Hugging Face repository (org/name) or a path");
            }
        }
        Ok(Some(Asked { servers, dir: self.launch_dir.clone(), checkpoint: self.launch_model.clone() }))
    }
}

impl Asked {
    /// The files `--launch-dir` will write for pools of these roles: checked (not an input, no
    /// existing file without `--force`, the folder not a file) before any work.
    pub fn check_outputs(&self, roles: &[Role], force: bool, inputs: &[(&str, Option<&Path>)]) -> anyhow::Result<()> {
        let Some(dir) = &self.dir else { return Ok(()) };
        if dir.exists() && !dir.is_dir() {
            bail!("`--launch-dir` = `{}` is a file\nhint: give a folder (it is created if missing)", dir.display());
        }
        let paths: Vec<PathBuf> = self.servers.iter().flat_map(|s| file_names(*s, roles)).map(|n| dir.join(n)).collect();
        let outputs: Vec<(&str, Option<&Path>)> = paths.iter().map(|p| ("--launch-dir", Some(p.as_path()))).collect();
        super::check_outputs(force, &outputs, inputs)
    }

    /// Render `d` for every server asked: written under `--launch-dir` (announced on stderr), or
    /// returned as text to print; and the JSON of each, keyed by server name.
    pub fn emit(&self, d: &Deployment, model_name: &str) -> anyhow::Result<(String, serde_json::Value)> {
        let checkpoint = self.checkpoint.as_deref().unwrap_or(model_name);
        let mut text = String::new();
        let mut json = serde_json::Map::new();
        for s in &self.servers {
            let c = launch(d, *s, checkpoint);
            json.insert(s.name().to_string(), view::json(&c));
            match &self.dir {
                Some(dir) => {
                    std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("`--launch-dir` = `{}`: cannot create it: {e}", dir.display()))?;
                    for (name, body) in view::files(&c) {
                        let p = dir.join(&name);
                        super::write_atomic(&p, body.as_bytes())?;
                        eprintln!("wrote {}", p.display());
                    }
                }
                None => {
                    text.push_str(&format!("\n{}\n", view::text(&c)));
                }
            }
        }
        Ok((text, serde_json::Value::Object(json)))
    }
}
