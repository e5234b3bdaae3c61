//! `gpuplan check FILE...`: load each file as what it is and report every problem.

use std::path::PathBuf;

use anyhow::Context;

use super::Outcome;
use crate::config;

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// Files to check: models/*.toml, HF config.json, calibration/systems/*.toml, scenarios/*.toml
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

pub fn run(args: CheckArgs) -> anyhow::Result<Outcome> {
    let mut errors = Vec::new();
    for f in &args.files {
        match check_file(f) {
            Ok(what) => eprintln!("ok: {} ({what})", f.display()),
            Err(e) => errors.push(format!("{e:#}")),
        }
    }
    if errors.is_empty() {
        Ok(Outcome::Ok)
    } else {
        anyhow::bail!("{} of {} files have problems:\n{}", errors.len(), args.files.len(), errors.join("\n"))
    }
}

/// What kind of file this is, judged by where it lives and its `kind` key.
fn check_file(path: &std::path::Path) -> anyhow::Result<&'static str> {
    let s = path.to_str().with_context(|| format!("path `{}` is not UTF-8", path.display()))?;
    let text = config::read_file(path)?;
    let in_dir = |d: &str| path.components().any(|c| c.as_os_str() == d);
    if path.extension().is_some_and(|e| e == "json") {
        config::model::load_model(s)?;
        return Ok("hugging face model config");
    }
    if in_dir("models") {
        config::model::load_model(s)?;
        return Ok("model");
    }
    if in_dir("systems") {
        return match config::system::file_kind(path, &text)?.as_str() {
            "gpu" => {
                config::system::load_gpu(s)?;
                Ok("gpu")
            }
            _ => {
                config::system::load_system(s)?;
                Ok("system")
            }
        };
    }
    if in_dir("prices") {
        let w: crate::report::prices::PricesWire = config::parse_toml(path, &text)?;
        w.build(s)?;
        return Ok("prices");
    }
    if in_dir("reliability") {
        let w: config::reliability::ReliabilityWire = config::parse_toml(path, &text)?;
        w.build(path)?;
        return Ok("reliability");
    }
    if in_dir("scenarios") && crate::report::claims::is_claims_file(&text) {
        let _: crate::report::claims::ClaimsWire = config::parse_toml(path, &text)?;
        return Ok("claims");
    }
    if in_dir("serving") {
        super::serve::check_file(path)?;
        return Ok("serving scenario");
    }
    if in_dir("scenarios") {
        let wire = config::scenario::read_scenario(path)?;
        let scenario = config::scenario::build(&wire, Some(path))?;
        crate::analytic::predict(&scenario).with_context(|| format!("{}: configuration cannot run", path.display()))?;
        return Ok("scenario");
    }
    anyhow::bail!("{}: cannot tell what kind of file this is\nhint: gpuplan checks files under models/, calibration/systems/, calibration/prices/, calibration/reliability/ and scenarios/", path.display())
}
