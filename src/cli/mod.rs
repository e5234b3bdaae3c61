//! Command line: clap arguments, subcommands, output. The only module that prints or exits.

pub mod args;
pub mod calibrate;
pub mod check;
pub mod compare;
pub mod goodput;
pub mod launch;
pub mod measure;
pub mod plan;
pub mod predict;
pub mod published;
pub mod report;
pub mod serve;
pub mod serving_published;
pub mod simulate;
pub mod torchtitan_published;
pub mod validate;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "gpuplan", version, about = "Simulator and capacity planner for LLM training and inference on GPU clusters")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// A catalog folder (holding models/, calibration/systems/, calibration/profiles/,
    /// calibration/prices/, calibration/reliability/) searched before the current directory and the built-in catalog;
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

/// Writing files without losing any: `config::files` (atomic writes, outputs checked against the
/// command's inputs and `--force`).
pub use crate::config::files::{canonical_target, check_chart_path, check_outputs, temp_beside, write_atomic, write_atomic_with};

/// `--split`: fit, test or all (the run records' and every published-row file's).
pub(crate) fn ensure_split(split: &str) -> anyhow::Result<()> {
    anyhow::ensure!(matches!(split, "fit" | "test" | "all"), "`--split` = `{split}` is not known\nhint: fit, test or all");
    Ok(())
}

/// A validation's outcome from the bounds it exceeded (each named on stderr): exit 1 when any.
pub(crate) fn bounds_outcome(failed: &[String]) -> Outcome {
    if failed.is_empty() {
        Outcome::Ok
    } else {
        eprintln!("validation bounds exceeded: {}", failed.join("; "));
        Outcome::Infeasible
    }
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
