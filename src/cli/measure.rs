//! `gpuplan measure [--scenario FILE | flags] [--out runs.jsonl] -- <command...>`
//!
//! Runs the command with its output passed through, samples NVML, parses step times, and
//! appends one run record to `--out` (or prints it to stdout when there is no `--out`).
//! Exit: 0 the job ran and gave step times; 1 it ran out of memory (record written); 2 it
//! crashed, timed out or printed no step (record written), or measure itself failed.

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;

use super::args::{hide_unless, positive, ScenarioArgs};
use super::Outcome;
use crate::config::record::{one_of, run_scenario, RunScenarioWire};
use crate::measure::parse::{step_regex, LogFormat};
use crate::measure::record::{append, check_appendable, Scenario};
use crate::measure::{self, MeasureConfig};

#[derive(clap::Args, Debug)]
#[command(trailing_var_arg = true, mut_args(hide_unless(SCENARIO_FLAGS)))]
pub struct MeasureArgs {
    #[command(flatten)]
    pub scenario: ScenarioArgs,

    /// Append the record to this JSON Lines file (created if missing, never truncated)
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Also write the job's output to this file (written beside it, moved into place at the end)
    #[arg(long)]
    pub log: Option<PathBuf>,
    /// Replace an existing --log file
    #[arg(long)]
    pub force: bool,
    /// Steps dropped at the start before timing
    #[arg(long, default_value_t = 3)]
    pub warmup: u64,
    /// NVML samples per second per GPU
    #[arg(long, default_value_t = 20.0, value_parser = positive, allow_negative_numbers = true)]
    pub sample_hz: f64,
    /// Stop the job (SIGTERM, then SIGKILL) after this many seconds
    #[arg(long, value_parser = positive, allow_negative_numbers = true)]
    pub timeout_s: Option<f64>,
    /// auto | gpuplan | megatron | torchtitan | hf-trainer
    #[arg(long, default_value = "auto")]
    pub format: String,
    /// Regex for step lines, with named groups `time_s`, `time_ms` or `tps`, and optionally
    /// `step` and `tokens`
    #[arg(long)]
    pub step_regex: Option<String>,
    /// Sample these NVML GPU indices (default: those CUDA_VISIBLE_DEVICES names, or all)
    #[arg(long, value_delimiter = ',')]
    pub gpu_index: Option<Vec<u32>>,
    /// Run id of the record (default: one made from the time and host)
    #[arg(long)]
    pub run_id: Option<String>,
    /// fit | test
    #[arg(long)]
    pub split: Option<String>,
    /// A free-text note kept in the record
    #[arg(long)]
    pub note: Option<String>,

    /// The command to run, after `--`
    #[arg(required = true, allow_hyphen_values = true)]
    pub command: Vec<String>,
}

/// The scenario flags `measure` reads (a run record's scenario keys).
const SCENARIO_FLAGS: &[&str] = &[
    "scenario",
    "model",
    "system",
    "gpus",
    "tp",
    "pp",
    "dp",
    "sp",
    "zero",
    "mode",
    "micro-batch",
    "global-batch",
    "grad-accum",
    "seq",
    "batch",
    "kv-len",
    "recompute",
    "stack",
    "precision",
];

/// The record's scenario: the flags (clap checked their ranges: counts fit a `u32`, ZeRO 0..=3)
/// over the `--scenario` file.
fn scenario(m: &MeasureArgs) -> anyhow::Result<Scenario> {
    let a = &m.scenario;
    a.only("measure", SCENARIO_FLAGS)?;
    let u32_of = |v: Option<i64>| v.map(|x| x as u32);
    let u64_of = |v: Option<i64>| v.map(|x| x as u64);
    let flags = RunScenarioWire {
        model: a.model.clone(),
        system: a.system.clone(),
        n_gpus: u32_of(a.gpus),
        tp: u32_of(a.tp),
        sp: a.sp,
        pp: u32_of(a.pp),
        dp: u32_of(a.dp),
        zero: u32_of(a.zero),
        mode: a.mode.clone(),
        micro_batch: u64_of(a.micro_batch),
        grad_accum: u64_of(a.grad_accum),
        global_batch: u64_of(a.global_batch),
        seq: u64_of(a.seq),
        batch: u64_of(a.batch),
        kv_len: u64_of(a.kv_len),
        recompute: a.recompute.clone(),
        stack: a.stack.clone(),
        precision: a.precision.clone(),
    };
    run_scenario(flags, a.scenario.as_deref()).map_err(anyhow::Error::msg)
}

/// Copies to a console stream and, if asked, to a shared log file.
struct Tee<W: Write> {
    inner: W,
    log: Option<Arc<Mutex<std::fs::File>>>,
}

impl<W: Write> Write for Tee<W> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if let Some(l) = &self.log {
            if let Ok(mut f) = l.lock() {
                let _ = f.write_all(b);
            }
        }
        self.inner.write_all(b)?;
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

pub fn run(a: MeasureArgs) -> anyhow::Result<Outcome> {
    let sc = scenario(&a)?;
    one_of("split", &a.split, &["fit", "test"]).map_err(anyhow::Error::msg)?;
    let format = match (&a.step_regex, a.format.as_str()) {
        (Some(r), _) => LogFormat::Regex(step_regex(r).map_err(anyhow::Error::msg)?),
        (None, "auto") => LogFormat::Auto,
        (None, "gpuplan") => LogFormat::Gpuplan,
        (None, "megatron") => LogFormat::Megatron,
        (None, "torchtitan") => LogFormat::Torchtitan,
        (None, "hf-trainer") => LogFormat::HfTrainer,
        (None, other) => anyhow::bail!("`--format` = `{other}` is not known\nhint: one of: auto, gpuplan, megatron, torchtitan, hf-trainer"),
    };
    // Before the job runs: the record file takes records only, the log replaces nothing unasked.
    if let Some(p) = &a.out {
        check_appendable(p).map_err(|e| anyhow::anyhow!("`--out` = `{}`: {e}\nhint: give `--out` a new file or a .jsonl of run records", p.display()))?;
    }
    let mut inputs = a.scenario.input_files();
    inputs.push(("--out", a.out.as_deref()));
    super::check_outputs(a.force, &[("--log", a.log.as_deref())], &inputs)?;
    let log_tmp = a.log.as_deref().map(super::temp_beside).transpose()?;
    let log = match &log_tmp {
        Some(p) => Some(Arc::new(Mutex::new(std::fs::File::create(p).with_context(|| format!("cannot create `{}`", p.display()))?))),
        None => None,
    };
    let cfg = MeasureConfig {
        command: a.command.clone(),
        scenario: sc,
        format,
        warmup: a.warmup,
        sample_hz: a.sample_hz,
        timeout: a.timeout_s.map(Duration::from_secs_f64),
        gpu_indices: a.gpu_index.clone(),
        run_id: a.run_id.clone(),
        split: a.split.clone(),
        note: a.note.clone(),
        log_file: a.log.as_ref().map(|p| p.display().to_string()),
    };
    let out = Tee { inner: std::io::stdout(), log: log.clone() };
    let err = Tee { inner: std::io::stderr(), log: log.clone() };
    let rec = measure::run(&cfg, out, err, &mut |w| eprintln!("gpuplan measure: warning: {w}"));
    // The job's output is kept whatever happened to it.
    if let (Some(tmp), Some(p)) = (&log_tmp, &a.log) {
        drop(log);
        std::fs::rename(tmp, p).with_context(|| format!("cannot move `{}` to `{}`", tmp.display(), p.display()))?;
    }
    let rec = rec?;
    let m = &rec.metrics;
    let gib = |b: f64| b / (1u64 << 30) as f64;
    eprintln!(
        "gpuplan measure: {} status={} exit={:?} steps={} timed={} median_step_s={}{} tokens_per_s={} peak_mem_gib_nvml={:?} avg_power_w={:?} energy_j_per_step={}",
        rec.run_id.as_deref().unwrap_or("-"),
        rec.status,
        rec.exit_code,
        m.n_steps_parsed,
        m.n_steps_timed,
        m.step_time_s_median.map_or("-".into(), |v| format!("{v:.4}")),
        m.step_time_source.as_deref().map_or(String::new(), |s| format!(" (from {s})")),
        m.tokens_per_s.map_or("-".into(), |v| format!("{v:.0}")),
        m.peak_mem_bytes_per_gpu_nvml.iter().map(|b| b.map(|b| (gib(b) * 100.0).round() / 100.0)).collect::<Vec<_>>(),
        m.avg_power_w_per_gpu.iter().map(|w| w.map(f64::round)).collect::<Vec<_>>(),
        m.energy_j_per_step.map_or("-".into(), |v| format!("{v:.1}")),
    );
    match &a.out {
        Some(p) => append(p, &rec).with_context(|| "cannot append the run record")?,
        None => println!("{}", serde_json::to_string(&rec)?),
    }
    match rec.status.as_str() {
        "ok" => Ok(Outcome::Ok),
        "oom" => Ok(Outcome::Infeasible),
        s => anyhow::bail!("the job ended with status `{s}` (exit {:?}); the record was written", rec.exit_code),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(v: &[&str]) -> MeasureArgs {
        let cli = crate::cli::Cli::try_parse_from(["gpuplan", "measure"].iter().chain(v.iter())).unwrap();
        match cli.command {
            crate::cli::Command::Measure(a) => a,
            _ => unreachable!(),
        }
    }

    #[test]
    fn flags_make_a_scenario() {
        let a = args(&[
            "--gpus",
            "2",
            "--micro-batch",
            "2",
            "--grad-accum",
            "4",
            "--seq",
            "4096",
            "--zero",
            "3",
            "--",
            "torchrun",
            "--nproc-per-node",
            "2",
            "x.py",
        ]);
        assert_eq!(a.command, vec!["torchrun", "--nproc-per-node", "2", "x.py"]);
        let s = scenario(&a).unwrap();
        assert_eq!((s.dp, s.global_batch, s.zero), (2, Some(16), 3));
        let a = args(&["--gpus", "2", "--micro-batch", "2", "--global-batch", "8", "--", "x"]);
        assert_eq!(scenario(&a).unwrap().grad_accum, Some(2));
        let a = args(&["--gpus", "2", "--micro-batch", "3", "--global-batch", "8", "--", "x"]);
        assert!(scenario(&a).is_err());
        // `serve` is a mode since 235ee4d (a serving run); an unknown mode is still an error.
        let a = args(&["--mode", "serve", "--", "x"]);
        assert!(scenario(&a).is_ok());
        let a = args(&["--mode", "serving", "--", "x"]);
        assert!(scenario(&a).is_err());
        // DTensor tensor parallelism runs without sequence parallelism: the record says so.
        let a = args(&["--gpus", "4", "--tp", "4", "--sp", "false", "--", "x"]);
        let s = scenario(&a).unwrap();
        assert_eq!((s.tp, s.dp, s.sp), (4, 1, Some(false)));
        assert_eq!(scenario(&args(&["--", "x"])).unwrap().sp, None);
    }
}
