//! Writing files without losing any (every command's outputs): a file is written atomically
//! (a temporary file beside it, then a rename), and before any work a command checks its outputs
//! against its inputs and `--force` (`check_outputs`). The binary's writers all go through here.

/// Write a file atomically: a temporary file beside it, then a rename.
pub fn write_atomic(path: &std::path::Path, bytes: &[u8]) -> anyhow::Result<()> {
    use anyhow::Context;
    write_atomic_with(path, |tmp| std::fs::write(tmp, bytes).with_context(|| format!("cannot write `{}`", tmp.display())))
}

/// Write a file atomically through `write`, which fills the temporary path it is given (beside
/// `path`, with the same extension, so that a chart renderer picks the same format); then a
/// rename. The temporary file is removed when `write` fails.
pub fn write_atomic_with(path: &std::path::Path, write: impl FnOnce(&std::path::Path) -> anyhow::Result<()>) -> anyhow::Result<()> {
    use anyhow::Context;
    let tmp = temp_beside(path)?;
    if let Err(e) = write(&tmp) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::rename(&tmp, path)
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
        .with_context(|| format!("cannot move `{}` to `{}`", tmp.display(), path.display()))?;
    Ok(())
}

/// A temporary path beside `path` (same folder, so that a rename is atomic; same extension),
/// its folder created.
pub fn temp_beside(path: &std::path::Path) -> anyhow::Result<std::path::PathBuf> {
    use anyhow::Context;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create `{}`", dir.display()))?;
    let stem = path.file_stem().and_then(|n| n.to_str()).unwrap_or("out");
    let ext = path.extension().and_then(|e| e.to_str()).map(|e| format!(".{e}")).unwrap_or_default();
    Ok(dir.join(format!(".{stem}.tmp-{}{ext}", std::process::id())))
}

/// A chart file must be `.svg` or `.png` (checked before any work, so that the error names the
/// path given, not the temporary file the chart is drawn into).
pub fn check_chart_path(flag: &str, path: Option<&std::path::Path>) -> anyhow::Result<()> {
    if let Some(p) = path {
        let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
        anyhow::ensure!(
            matches!(ext, "svg" | "png"),
            "`{flag}` = `{}`: chart format `{ext}` is not supported\nhint: use a .png or .svg file name",
            p.display()
        );
    }
    Ok(())
}

/// The path a file has or would have: canonical where it exists, else its canonical folder
/// joined with its name (a folder that does not exist yet: the path made absolute).
pub fn canonical_target(p: &std::path::Path) -> std::path::PathBuf {
    if let Ok(c) = std::fs::canonicalize(p) {
        return c;
    }
    let parent = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    match (std::fs::canonicalize(parent), p.file_name()) {
        (Ok(dir), Some(name)) => dir.join(name),
        _ => std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()),
    }
}

/// Check the files a command will write before it does any work: none may be one of its inputs
/// (not even with `--force`), no two may be the same file, and an existing one is replaced only
/// with `--force`. `outputs` and `inputs` are (flag, path) pairs.
pub fn check_outputs(force: bool, outputs: &[(&str, Option<&std::path::Path>)], inputs: &[(&str, Option<&std::path::Path>)]) -> anyhow::Result<()> {
    let inputs: Vec<(&str, &std::path::Path, std::path::PathBuf)> = inputs.iter().filter_map(|(f, p)| p.map(|p| (*f, p, canonical_target(p)))).collect();
    let mut seen: Vec<(&str, std::path::PathBuf)> = Vec::new();
    for (flag, path) in outputs.iter().filter_map(|(f, p)| p.map(|p| (*f, p))) {
        let target = canonical_target(path);
        if let Some((in_flag, in_path, _)) = inputs.iter().find(|(_, _, c)| *c == target) {
            anyhow::bail!(
                "`{flag}` = `{}` is the file `{in_flag}` = `{}` reads; gpuplan never writes over its own input\nhint: give `{flag}` another path",
                path.display(),
                in_path.display()
            );
        }
        if let Some((other, _)) = seen.iter().find(|(_, c)| *c == target) {
            anyhow::bail!("`{flag}` = `{}` is also `{other}`'s file: one would overwrite the other\nhint: give `{flag}` another path", path.display());
        }
        if target.is_dir() {
            anyhow::bail!("`{flag}` = `{}` is a folder\nhint: give `{flag}` a file name", path.display());
        }
        if !force && path.exists() {
            anyhow::bail!("`{flag}` = `{}` exists\nhint: pass `--force` to replace it, or give `{flag}` another path", path.display());
        }
        seen.push((flag, target));
    }
    Ok(())
}
