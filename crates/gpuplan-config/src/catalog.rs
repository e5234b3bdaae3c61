//! The catalog: model files (`models/`), GPU and system files (`calibration/systems/`), the
//! shipped calibration profiles (`calibration/profiles/`), price files (`calibration/prices/`)
//! and reliability files (`calibration/reliability/`). They are compiled into the binary, so `gpuplan` works from any folder
//! and on any machine it is copied to; folders on disk can override or extend them.
//!
//! A name is looked up in the data roots, in order: the folders given with `--catalog` (see
//! [`install`]), the current directory, those of `GPUPLAN_CATALOG` (and the older
//! `GPUPLAN_HOME`), then the built-in copy, whose paths start with [`BUILT_IN`]. The binary reads
//! the flag and the environment and installs them; this module reads no environment.
//!
//! Every loader in this crate goes through [`is_file`], [`is_dir`], [`read_to_string`] and
//! [`list_dir`], which serve paths under [`BUILT_IN`] from the compiled-in copy and all others from
//! the disk.

use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

use include_dir::{include_dir, Dir};

/// The prefix of built-in paths, as error messages show them (`<built-in>/models/llama-3-8b.toml`).
pub const BUILT_IN: &str = "<built-in>";

static MODELS: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../../models");
static SYSTEMS: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../../calibration/systems");
static PROFILES: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../../calibration/profiles");
static PRICES: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../../calibration/prices");
static RELIABILITY: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../../calibration/reliability");

/// The catalog folders of the data roots, as paths under a root.
const FOLDERS: [(&str, &Dir<'static>); 5] = [
    ("models", &MODELS),
    ("calibration/systems", &SYSTEMS),
    ("calibration/profiles", &PROFILES),
    ("calibration/prices", &PRICES),
    ("calibration/reliability", &RELIABILITY),
];

/// Folders on disk searched besides the current directory.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Roots {
    /// Searched before the current directory (`--catalog DIR`, repeatable).
    pub before_cwd: Vec<PathBuf>,
    /// Searched after it (`GPUPLAN_CATALOG`, a path list, then `GPUPLAN_HOME`).
    pub after_cwd: Vec<PathBuf>,
}

static ROOTS: OnceLock<Roots> = OnceLock::new();

/// Set the folders searched for this process (once, before anything is loaded); `Err` when they
/// were already set.
pub fn install(roots: Roots) -> Result<(), Roots> {
    ROOTS.set(roots)
}

/// The folders searched for data files, in order; the last is the built-in copy.
pub fn data_roots() -> Vec<PathBuf> {
    let roots = ROOTS.get().cloned().unwrap_or_default();
    let mut out = roots.before_cwd;
    out.push(PathBuf::from("."));
    out.extend(roots.after_cwd);
    out.push(PathBuf::from(BUILT_IN));
    out
}

/// The built-in folder and the path inside it that `p` names, if `p` is under [`BUILT_IN`].
fn built_in(p: &Path) -> Option<(&'static Dir<'static>, PathBuf)> {
    let rest = p.strip_prefix(BUILT_IN).ok()?;
    // Normalise `a/./b` and `a/b/../c` (a system file's GPU is looked up beside it).
    let mut parts: Vec<&str> = Vec::new();
    for c in rest.components() {
        match c {
            Component::Normal(s) => parts.push(s.to_str()?),
            Component::ParentDir => {
                parts.pop()?;
            }
            _ => {}
        }
    }
    let joined = parts.join("/");
    FOLDERS.iter().find_map(|(folder, dir)| {
        let inner = if joined == *folder { Some("") } else { joined.strip_prefix(folder).and_then(|r| r.strip_prefix('/')) };
        inner.map(|inner| (*dir, PathBuf::from(inner)))
    })
}

/// `p` is a file (on disk, or built in).
pub fn is_file(p: &Path) -> bool {
    match built_in(p) {
        Some((dir, inner)) => dir.get_file(&inner).is_some(),
        None => p.is_file(),
    }
}

/// `p` is a folder (on disk, or built in).
pub fn is_dir(p: &Path) -> bool {
    match built_in(p) {
        Some((dir, inner)) => inner.as_os_str().is_empty() || dir.get_dir(&inner).is_some(),
        None => p.is_dir(),
    }
}

/// The text of a file (on disk, or built in).
pub fn read_to_string(p: &Path) -> std::io::Result<String> {
    match built_in(p) {
        Some((dir, inner)) => {
            let f = dir.get_file(&inner).ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "not in the built-in catalog"))?;
            f.contents_utf8().map(str::to_string).ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8"))
        }
        None => std::fs::read_to_string(p),
    }
}

/// The entries of a folder: (name, is a folder), sorted by name.
pub fn list_dir(p: &Path) -> std::io::Result<Vec<(String, bool)>> {
    let mut out: Vec<(String, bool)> = match built_in(p) {
        Some((dir, inner)) => {
            let d = if inner.as_os_str().is_empty() { Some(dir) } else { dir.get_dir(&inner) };
            let d = d.ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "not in the built-in catalog"))?;
            d.entries().iter().filter_map(|e| Some((e.path().file_name()?.to_str()?.to_string(), e.as_dir().is_some()))).collect()
        }
        None => std::fs::read_dir(p)?.filter_map(|e| e.ok()).map(|e| (e.file_name().to_string_lossy().into_owned(), e.path().is_dir())).collect(),
    };
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_paths_reach_every_catalog_folder() {
        let b = Path::new(BUILT_IN);
        assert!(is_file(&b.join("models/llama-3-8b.toml")));
        assert!(is_file(&b.join("calibration/systems/dgx-b200.toml")));
        assert!(is_file(&b.join("calibration/systems/./../systems/b200.toml")));
        assert!(is_file(&b.join("calibration/profiles/h200-sxm-1x/profile.toml")));
        assert!(is_dir(&b.join("calibration/profiles/h200-sxm-1x")));
        assert!(!is_file(&b.join("models/no-such-model.toml")));
        assert!(!is_file(&b.join("scenarios/seed-claims.toml")), "scenarios are not part of the catalog");
        let models = list_dir(&b.join("models")).unwrap();
        assert!(models.iter().any(|(n, d)| n == "llama-3-8b.toml" && !d));
        assert_eq!(read_to_string(&b.join("models/llama-3-8b.toml")).unwrap(), std::fs::read_to_string("../../models/llama-3-8b.toml").unwrap());
    }
}
