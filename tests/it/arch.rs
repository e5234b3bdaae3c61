//! Architecture invariants that the crate graph does not enforce by itself: no import cycle between
//! the modules of a crate, `gpuplan-core`'s dependencies, and no I/O, environment, clock or printing
//! in `gpuplan-core`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The `.rs` files under `dir`, recursively, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()) {
        if e.is_dir() {
            out.extend(rust_files(&e));
        } else if e.extension().is_some_and(|x| x == "rs") {
            out.push(e);
        }
    }
    out.sort();
    out
}

/// The module path of a source file under `src`: `a/b.rs` and `a/b/mod.rs` are `a::b`; `lib.rs`
/// and `main.rs` are the crate root (empty).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().unwrap();
    match last.as_str() {
        "mod.rs" => {}
        "lib.rs" | "main.rs" if parts.is_empty() => {}
        other => parts.push(other.trim_end_matches(".rs").to_string()),
    }
    parts
}

/// Code without `//` comments (doc comments too) and without string literals' contents, roughly:
/// enough that a path in prose or in a message is not taken for an import.
fn code_only(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let mut in_str = false;
        let mut prev = ' ';
        let mut kept = String::new();
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if !in_str && c == '/' && chars.get(i + 1) == Some(&'/') {
                break;
            }
            if c == '"' && prev != '\\' {
                in_str = !in_str;
            } else if !in_str {
                kept.push(c);
            }
            prev = c;
            i += 1;
        }
        out.push_str(&kept);
        out.push('\n');
    }
    out
}

/// Every path that follows `crate::` or `super::` (possibly `super::super::`), with one level of
/// `{a, b::c}` groups expanded, resolved against `module`.
fn referenced_paths(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes: Vec<char> = code.chars().collect();
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut i = 0;
    while i < bytes.len() {
        let starts = |s: &str| bytes[i..].iter().take(s.len()).copied().eq(s.chars());
        let boundary = i == 0 || !ident(bytes[i - 1]);
        if boundary && (starts("crate::") || starts("super::")) {
            let mut base: Vec<String> = Vec::new();
            let mut j = i;
            if starts("crate::") {
                j += "crate::".len();
            } else {
                base = module.to_vec();
                while bytes[j..].iter().take(7).copied().eq("super::".chars()) {
                    base.pop();
                    j += "super::".len();
                }
            }
            // The rest: idents and `::`, then maybe a `{...}` group.
            let mut path = base.clone();
            let mut cur = String::new();
            while j < bytes.len() && (ident(bytes[j]) || bytes[j] == ':') {
                if ident(bytes[j]) {
                    cur.push(bytes[j]);
                } else if !cur.is_empty() {
                    path.push(std::mem::take(&mut cur));
                }
                j += 1;
            }
            if !cur.is_empty() {
                path.push(cur);
            }
            if j < bytes.len() && bytes[j] == '{' {
                let end = bytes[j..].iter().position(|&c| c == '}').map_or(bytes.len(), |p| j + p);
                let inner: String = bytes[j + 1..end].iter().collect();
                for item in inner.split(',') {
                    let mut p = path.clone();
                    p.extend(item.split("::").map(|s| s.trim().to_string()).filter(|s| !s.is_empty() && s.chars().all(ident)));
                    out.push(p);
                }
                j = end;
            } else {
                out.push(path);
            }
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

/// Module-to-module import edges of the crate whose sources are `src`, between modules that are
/// not each other's ancestors (a child using its parent's items, or a parent its child's, is how
/// Rust modules work).
fn import_edges(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let files = rust_files(src);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_of(src, f)).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let m = module_of(src, f);
        let code = code_only(&std::fs::read_to_string(f).unwrap());
        for p in referenced_paths(&code, &m) {
            // The longest known module that prefixes the path.
            let target = (0..=p.len()).rev().map(|n| p[..n].to_vec()).find(|q| modules.contains(q)).unwrap_or_default();
            let related = target.starts_with(&m) || m.starts_with(&target);
            if !related {
                edges.entry(m.join("::")).or_default().insert(target.join("::"));
            }
        }
    }
    edges
}

/// A cycle in `edges`, if there is one.
fn find_cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(n: &str, edges: &BTreeMap<String, BTreeSet<String>>, state: &mut BTreeMap<String, u8>, stack: &mut Vec<String>) -> Option<Vec<String>> {
        state.insert(n.to_string(), 1);
        stack.push(n.to_string());
        for m in edges.get(n).into_iter().flatten() {
            match state.get(m.as_str()).copied().unwrap_or(0) {
                1 => {
                    let at = stack.iter().position(|s| s == m).unwrap();
                    let mut cycle = stack[at..].to_vec();
                    cycle.push(m.clone());
                    return Some(cycle);
                }
                0 => {
                    if let Some(c) = visit(m, edges, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in edges.keys() {
        if state.get(n.as_str()).copied().unwrap_or(0) == 0 {
            if let Some(c) = visit(n, edges, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

const CRATES: [&str; 5] = ["crates/gpuplan-core/src", "crates/gpuplan-config/src", "crates/gpuplan-report/src", "crates/gpuplan-gpu/src", "src"];

#[test]
fn no_import_cycle_between_the_modules_of_any_crate() {
    for c in CRATES {
        let edges = import_edges(&Path::new(ROOT).join(c));
        assert!(!edges.is_empty() || c == "src", "{c}: no edges found; is the scan broken?");
        if let Some(cycle) = find_cycle(&edges) {
            panic!("{c}: import cycle {}", cycle.join(" -> "));
        }
    }
}

#[test]
fn the_cycle_check_finds_a_cycle() {
    let code = code_only("use crate::b::X; // crate::c::Y\nlet s = \"crate::d\";\nuse super::{e, f::g};");
    let paths = referenced_paths(&code, &["a".to_string(), "h".to_string()]);
    assert_eq!(paths, vec![vec!["b", "X"], vec!["a", "e"], vec!["a", "f", "g"]]);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    edges.entry("a".into()).or_default().insert("b".into());
    edges.entry("b".into()).or_default().insert("c".into());
    assert_eq!(find_cycle(&edges), None);
    edges.entry("c".into()).or_default().insert("a".into());
    assert_eq!(find_cycle(&edges), Some(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
}

#[test]
fn core_depends_on_no_io_cli_or_gpu_crate() {
    let manifest = std::fs::read_to_string(Path::new(ROOT).join("crates/gpuplan-core/Cargo.toml")).unwrap();
    let deps: Vec<&str> = manifest
        .split("[dependencies]")
        .nth(1)
        .unwrap()
        .split("\n[")
        .next()
        .unwrap()
        .lines()
        .filter_map(|l| l.split(['.', '=', ' ']).next())
        .filter(|k| !k.is_empty() && !k.starts_with('#'))
        .collect();
    assert!(deps.contains(&"serde"), "the dependency scan found {deps:?}");
    for banned in ["cudarc", "nvml-wrapper", "plotters", "clap", "indicatif", "serde_json", "toml", "anyhow"] {
        assert!(!deps.contains(&banned), "gpuplan-core depends on {banned}");
    }
}

#[test]
fn core_does_no_io_environment_clock_or_printing() {
    let src = Path::new(ROOT).join("crates/gpuplan-core/src");
    for f in rust_files(&src) {
        let code = code_only(&std::fs::read_to_string(&f).unwrap());
        for banned in ["std::fs", "std::env", "println!", "eprintln!", "print!(", "Instant::now", "SystemTime", "std::io::stdin", "std::net", "std::process"] {
            assert!(!code.contains(banned), "{}: uses {banned}", f.display());
        }
    }
}
