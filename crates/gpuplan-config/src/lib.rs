//! On-disk formats (wire structs), loading, validation and their errors. Domain types are not
//! `Deserialize`; each file kind has wire structs here that are checked and converted.
//!
//! Files are found by name in the data roots (`catalog`): `--catalog` folders, the current
//! directory, `$GPUPLAN_CATALOG`, then the catalog compiled into the binary.

pub mod catalog;
pub mod deploy;
pub mod files;
pub mod hf;
pub mod megatron;
pub mod model;
pub mod moe;
pub mod prediction;
pub mod profile;
pub mod published;
pub mod published_recipes;
pub mod record;
pub mod reliability;
pub mod scenario;
pub mod serve;
pub mod serving_published;
pub mod system;
pub mod torchtitan_published;

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use gpuplan_core::hardware::{Source, Sourced};

/// A bad input file or name. Carries the file, the key path and the offending value where known.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read `{path}`")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}:{line}:{column}: {message}\n{snippet}")]
    Parse { path: PathBuf, line: usize, column: usize, message: String, snippet: String },
    #[error("{path}: `{key}` = {value} {problem}{}", hint_line(.hint))]
    Invalid { path: PathBuf, key: String, value: String, problem: String, hint: Option<String> },
    #[error("unknown {what} `{name}`{}", hint_line(.hint))]
    UnknownName { what: &'static str, name: String, hint: Option<String> },
    #[error("{}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n"))]
    Many(Vec<ConfigError>),
}

fn hint_line(hint: &Option<String>) -> String {
    match hint {
        Some(h) => format!("\nhint: {h}"),
        None => String::new(),
    }
}

impl ConfigError {
    pub fn invalid(path: &Path, key: &str, value: impl fmt::Display, problem: impl Into<String>) -> Self {
        ConfigError::Invalid { path: path.to_path_buf(), key: key.into(), value: format!("`{value}`"), problem: problem.into(), hint: None }
    }
    pub fn with_hint(self, h: impl Into<String>) -> Self {
        match self {
            ConfigError::Invalid { path, key, value, problem, .. } => ConfigError::Invalid { path, key, value, problem, hint: Some(h.into()) },
            other => other,
        }
    }
}

/// Collects every problem in a file instead of stopping at the first.
#[derive(Default)]
pub struct Problems(Vec<ConfigError>);

impl Problems {
    pub fn push(&mut self, e: ConfigError) {
        self.0.push(e);
    }
    pub fn check(&mut self, ok: bool, e: impl FnOnce() -> ConfigError) {
        if !ok {
            self.0.push(e());
        }
    }
    pub fn finish(mut self) -> Result<(), ConfigError> {
        match self.0.len() {
            0 => Ok(()),
            1 => Err(self.0.remove(0)),
            _ => Err(ConfigError::Many(self.0)),
        }
    }
}

pub fn read_file(path: &Path) -> Result<String, ConfigError> {
    catalog::read_to_string(path).map_err(|source| ConfigError::Io { path: path.to_path_buf(), source })
}

/// Parse TOML into a wire struct, turning serde's message and span into `file:line:col` and a caret.
pub fn parse_toml<T: for<'de> Deserialize<'de>>(path: &Path, text: &str) -> Result<T, ConfigError> {
    toml::from_str(text).map_err(|e| {
        let (line, column, snippet) = match e.span() {
            Some(span) => locate(text, span.start),
            None => (0, 0, String::new()),
        };
        ConfigError::Parse { path: path.to_path_buf(), line, column, message: e.message().trim().to_string(), snippet }
    })
}

/// 1-based line and column of a byte offset, and the line with a caret under the column.
fn locate(text: &str, offset: usize) -> (usize, usize, String) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line_idx = before.matches('\n').count();
    let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
    let column = text[line_start..offset].chars().count() + 1;
    let line_text = text[line_start..].lines().next().unwrap_or("");
    let snippet = format!("  | {line_text}\n  | {}^", " ".repeat(column - 1));
    (line_idx + 1, column, snippet)
}

pub use catalog::data_roots;

/// Resolve `name_or_path` to a file: an existing path, or `<root>/<dir>/<name>.toml`.
pub fn resolve(name_or_path: &str, dir: &str, what: &'static str) -> Result<PathBuf, ConfigError> {
    let p = Path::new(name_or_path);
    if catalog::is_file(p) {
        return Ok(p.to_path_buf());
    }
    for root in data_roots() {
        let candidate = root.join(dir).join(format!("{name_or_path}.toml"));
        if catalog::is_file(&candidate) {
            return Ok(candidate);
        }
    }
    let known = list_names(dir);
    let hint = match closest(name_or_path, &known) {
        Some(c) => format!("did you mean `{c}`? known: {}", known.join(", ")),
        None if known.is_empty() => format!("no `{dir}/` folder found; give a path to a file"),
        None => format!("known: {}; or give a path to a file", known.join(", ")),
    };
    Err(ConfigError::UnknownName { what, name: name_or_path.to_string(), hint: Some(hint) })
}

/// Names of the `*.toml` files in the first data root that has `dir`, sorted.
pub fn list_names(dir: &str) -> Vec<String> {
    for root in data_roots() {
        let d = root.join(dir);
        if let Ok(entries) = catalog::list_dir(&d) {
            return entries.into_iter().filter(|(_, is_dir)| !is_dir).filter_map(|(name, _)| name.strip_suffix(".toml").map(str::to_string)).collect();
        }
    }
    Vec::new()
}

/// The known name nearest to `name` by edit distance, if it is close enough to be a typo.
pub fn closest<'a>(name: &str, known: &'a [String]) -> Option<&'a str> {
    known.iter().map(|k| (edit_distance(name, k), k)).filter(|(d, k)| *d <= 3.max(k.len() / 3)).min().map(|(_, k)| k.as_str())
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            cur.push((prev[j] + usize::from(ca != *cb)).min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The physical range of a sourced hardware number, by its key (its unit suffix, or its name):
/// every number read from a GPU or system file must lie inside, so a typo (`1e300`, a value in the
/// wrong unit) is an error naming the key rather than a prediction. The bounds are far outside
/// any GPU or cluster built or announced (B300: 2.25 PFLOP/s bf16 dense, 288 GB, 8 TB/s, 1.4 kW).
pub fn physical_range(key: &str) -> Option<(f64, f64, &'static str)> {
    let name = key.rsplit('.').next().unwrap_or(key);
    Some(match name {
        "pue" => (1.0, 3.0, "a data centre's PUE is total power over IT power: 1.0 to about 2"),
        "oversubscription" => (1.0, 64.0, "oversubscription is downlink over uplink bandwidth of a leaf: 1 (non-blocking) to a few"),
        "nodes_per_leaf" => (1.0, 4096.0, "the nodes one leaf switch joins on a rail: its downlink ports, e.g. 32 of a 64-port switch at 1:1"),
        _ if name.ends_with("_fraction") => (0.0, 1.0, "a fraction of the datasheet peak, at most 1"),
        _ if name.ends_with("_tflops") => (0.0, 1.0e5, "TFLOP/s of one GPU: at most 100,000 (100 PFLOP/s)"),
        _ if name.ends_with("_gib") => (0.0, 16384.0, "GiB of one GPU: at most 16,384"),
        _ if name.ends_with("_mib") => (0.0, 65536.0, "MiB of one GPU's cache: at most 65,536"),
        _ if name.ends_with("_gb_per_s") => (0.0, 1.0e5, "GB/s of one GPU or link: at most 100,000 (100 TB/s)"),
        _ if name.ends_with("_gbit_per_s") => (0.0, 1.0e5, "Gbit/s of one NIC: at most 100,000"),
        _ if name.ends_with("_mhz") => (0.0, 1.0e4, "a GPU clock in MHz: at most 10,000"),
        _ if name.ends_with("_us") => (0.0, 1.0e6, "microseconds: at most 1,000,000 (one second)"),
        _ if name.ends_with("_w") => (0.0, 1.0e6, "watts of one GPU or node: at most 1,000,000"),
        "sm_count" => (1.0, 10000.0, "streaming multiprocessors of one GPU: at most 10,000"),
        "nvlink_generation" => (1.0, 20.0, "an NVLink generation: 1 to 20"),
        "pcie_generation" => (1.0, 20.0, "a PCIe generation: 1 to 20"),
        _ => return None,
    })
}

/// A number with its source, as written in the files: `{ value = 989, source = "..." }`.
/// `kind` is `datasheet` (the default), `measured`, `transferred` or `unsourced`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourcedWire {
    pub value: f64,
    pub source: String,
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub note: Option<String>,
}

impl SourcedWire {
    /// Check and convert: the value must be finite and positive (or zero when `allow_zero`), the
    /// source non-empty and the kind known.
    pub fn to_sourced<T>(&self, path: &Path, key: &str, allow_zero: bool, convert: impl Fn(f64) -> T, problems: &mut Problems) -> Sourced<T>
    where
        T: Copy,
    {
        let ok = self.value.is_finite() && (self.value > 0.0 || (allow_zero && self.value == 0.0));
        problems.check(ok, || {
            ConfigError::invalid(path, &format!("{key}.value"), self.value, if allow_zero { "must be zero or positive" } else { "must be positive" })
        });
        if let Some((lo, hi, why)) = physical_range(key) {
            problems.check(!ok || (lo..=hi).contains(&self.value), || {
                let v = if self.value.abs() >= 1e15 { format!("{:e}", self.value) } else { self.value.to_string() };
                ConfigError::invalid(path, &format!("{key}.value"), v, format!("is outside [{lo}, {hi}]")).with_hint(why)
            });
        }
        problems.check(!self.source.trim().is_empty(), || {
            ConfigError::invalid(path, &format!("{key}.source"), "\"\"", "is empty")
                .with_hint("every hardware number needs a source; use kind = \"unsourced\" and say why")
        });
        let citation = match &self.note {
            Some(n) => format!("{} ({n})", self.source),
            None => self.source.clone(),
        };
        let source = match self.kind.as_deref().unwrap_or("datasheet") {
            "datasheet" => Source::Datasheet(citation),
            "measured" => Source::Measured(citation),
            "transferred" => Source::Transferred(citation),
            "unsourced" => Source::Unsourced(citation),
            other => {
                problems.push(
                    ConfigError::invalid(path, &format!("{key}.kind"), other, "is not a known source kind")
                        .with_hint("one of: datasheet, measured, transferred, unsourced"),
                );
                Source::Unsourced(citation)
            }
        };
        Sourced::new(convert(self.value), source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate_points_at_the_column() {
        let (l, c, s) = locate("a = 1\nbb = x\n", 11);
        assert_eq!((l, c), (2, 6));
        assert!(s.ends_with("     ^"), "{s}");
    }

    #[test]
    fn closest_finds_typos_only() {
        let known = vec!["llama-3-8b".to_string(), "llama-3-70b".to_string(), "gpt3-175b".to_string()];
        assert_eq!(closest("llama3-8b", &known), Some("llama-3-8b"));
        assert_eq!(closest("zzzzzzzzzzzzzzzzzz", &known), None);
    }
}
