//! Command line: clap arguments, subcommands, output. The only module that prints or exits.

pub mod args;
pub mod calibrate;
pub mod check;
pub mod compare;
pub mod measure;
pub mod plan;
pub mod predict;
pub mod published;
pub mod report;
pub mod serve;
pub mod simulate;
pub mod validate;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "gpuplan", version, about = "Simulator and capacity planner for LLM training and inference on GPU clusters")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// A catalog folder (holding models/, calibration/systems/, calibration/profiles/,
    /// calibration/prices/) searched before the current directory and the built-in catalog;
    /// repeatable. GPUPLAN_CATALOG (a path list) is searched after the current directory
    #[arg(long, global = true, value_name = "DIR")]
    pub catalog: Vec<std::path::PathBuf>,
}

#[derive(Subcommand, Debug)]
// Parsed once per process: the size of the flag structs does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Predict step time, throughput, MFU, memory, power and energy of one configuration
    Predict(predict::PredictArgs),
    /// Simulate one step with the discrete-event engine (same inputs as predict; --trace, --timeline)
    Simulate(simulate::SimulateArgs),
    /// Score predictions against measured run records (MAPE per metric, plots, CI bounds)
    Validate(validate::ValidateArgs),
    /// Search parallel layouts and batch sizes; rank them by an objective
    Plan(plan::PlanArgs),
    /// Plan the same workload on several systems or hardware variants and print the deltas
    Compare(compare::CompareArgs),
    /// Cost-per-token report (markdown + SVG, HTML, CSV) of scenarios; --claims audits the seed documents' figures
    Report(report::ReportArgs),
    /// Check model, system, scenario and profile files; report every problem
    Check(check::CheckArgs),
    /// Simulate an inference deployment under load: TTFT, TPOT, latency percentiles, throughput
    Serve(serve::ServeArgs),
    /// Run microbenchmarks on this node and write a calibration profile
    Calibrate(calibrate::CalibrateArgs),
    /// Run a real job, sample NVML, parse its step times, and append a run record
    Measure(measure::MeasureArgs),
}

/// Exit codes: 0 ok, 1 valid input but infeasible, 2 bad input or error.
pub enum Outcome {
    Ok,
    Infeasible,
}

pub fn run(cli: Cli) -> anyhow::Result<Outcome> {
    match cli.command {
        Command::Predict(a) => predict::run(a),
        Command::Simulate(a) => simulate::run(a),
        Command::Validate(a) => validate::run(a),
        Command::Plan(a) => plan::run(a),
        Command::Compare(a) => compare::run(a),
        Command::Report(a) => report::run(a),
        Command::Check(a) => check::run(a),
        Command::Serve(a) => serve::run(a),
        Command::Calibrate(a) => calibrate::run(a),
        Command::Measure(a) => measure::run(a),
    }
}

/// Chart text uses fonts compiled into the binary (DejaVu Sans, assets/fonts/LICENSE-DejaVu.txt), so
/// PNG/SVG output needs no system fonts or fontconfig on the machine it runs on.
pub fn register_fonts() {
    use plotters::style::{register_font, FontStyle};
    static REGULAR: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");
    static BOLD: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans-Bold.ttf");
    for family in ["sans-serif", "serif", "monospace"] {
        let _ = register_font(family, FontStyle::Normal, REGULAR);
        let _ = register_font(family, FontStyle::Bold, BOLD);
        let _ = register_font(family, FontStyle::Italic, REGULAR);
        let _ = register_font(family, FontStyle::Oblique, REGULAR);
    }
}

pub fn main() -> ExitCode {
    quiet_on_closed_pipe();
    register_fonts();
    install_fit_overrides();
    let cli = Cli::parse();
    if let Err(e) = install_catalog(&cli.catalog) {
        eprintln!("error: {e:#}");
        return ExitCode::from(2);
    }
    match run(cli) {
        Ok(Outcome::Ok) => ExitCode::SUCCESS,
        Ok(Outcome::Infeasible) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// A reader that closes the pipe early (`gpuplan plan ... | head -1`) ends the process quietly, as
/// it ends `ls`, `ripgrep` and other Unix tools: the Rust runtime ignores SIGPIPE, so a write to a
/// closed pipe fails with `BrokenPipe` and `println!` panics on it; restoring the default
/// disposition makes the write end the process instead (the shell sees 141, nothing printed).
fn quiet_on_closed_pipe() {
    #[cfg(unix)]
    // SAFETY: `signal` with a valid signal number and `SIG_DFL` only changes the disposition;
    // called first thing in `main`, before any thread is spawned.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// `GPUPLAN_FIT_CONSTANTS` (for the refit scripts): parsed once and installed into
/// `cost::fitted` before anything is priced; announced on stderr, and a malformed value is
/// reported and ignored.
fn install_fit_overrides() {
    use crate::cost::fitted::{install, parse, SHIPPED, VAR};
    let Ok(text) = std::env::var(VAR) else { return };
    match parse(&text, SHIPPED) {
        Ok(f) => {
            eprintln!("gpuplan: {VAR} overrides fitted constants: {f:?}");
            let _ = install(f);
        }
        Err(e) => eprintln!("gpuplan: ignoring {VAR}=`{text}`: {e}\nhint: `dtensor_linear_us=A,B;overlap_cost=X;moe_dispatch_sync_us=X`"),
    }
}

/// The catalog folders: `--catalog` before the current directory, `GPUPLAN_CATALOG` (a path list)
/// and the older `GPUPLAN_HOME` after it; the built-in catalog last.
fn install_catalog(flag: &[std::path::PathBuf]) -> anyhow::Result<()> {
    for d in flag {
        anyhow::ensure!(d.is_dir(), "`--catalog` = `{}` is not a folder\nhint: give a folder holding models/ or calibration/systems/", d.display());
    }
    let mut after_cwd: Vec<std::path::PathBuf> = std::env::var_os("GPUPLAN_CATALOG").map(|v| std::env::split_paths(&v).collect()).unwrap_or_default();
    after_cwd.extend(std::env::var_os("GPUPLAN_HOME").map(std::path::PathBuf::from));
    let _ = crate::config::catalog::install(crate::config::catalog::Roots { before_cwd: flag.to_vec(), after_cwd });
    Ok(())
}

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

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Every flag of every command says what it is.
    #[test]
    fn every_flag_has_help_text() {
        let cli = super::Cli::command();
        let mut missing = Vec::new();
        for sub in cli.get_subcommands() {
            for a in sub.get_arguments() {
                if a.get_help().is_none() && a.get_long_help().is_none() && !matches!(a.get_id().as_str(), "help" | "version") {
                    missing.push(format!("{} --{}", sub.get_name(), a.get_id()));
                }
            }
        }
        assert!(missing.is_empty(), "flags without help: {missing:?}");
    }
}
