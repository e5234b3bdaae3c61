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
use serde::Deserialize;

use super::args::{count_u64, hide_unless, positive, ScenarioArgs};
use super::Outcome;
use crate::measure::parse::{step_regex, LogFormat};
use crate::measure::record::{append, Scenario};
use crate::measure::{self, MeasureConfig};

#[derive(clap::Args, Debug)]
#[command(trailing_var_arg = true, mut_args(hide_unless(SCENARIO_FLAGS)))]
pub struct MeasureArgs {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// Gradient-accumulation steps (training; with --micro-batch and dp, sets the global batch)
    #[arg(long, value_parser = count_u64(), allow_negative_numbers = true)]
    pub grad_accum: Option<u64>,

    /// Append the record to this JSON Lines file (created if missing, never truncated)
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Also write the job's output to this file
    #[arg(long)]
    pub log: Option<PathBuf>,
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

/// The scenario file: the record's scenario keys, flat.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioFileWire {
    model: Option<String>,
    system: Option<String>,
    n_gpus: Option<u32>,
    tp: Option<u32>,
    sp: Option<bool>,
    pp: Option<u32>,
    dp: Option<u32>,
    zero: Option<u32>,
    mode: Option<String>,
    micro_batch: Option<u64>,
    grad_accum: Option<u64>,
    global_batch: Option<u64>,
    seq: Option<u64>,
    batch: Option<u64>,
    kv_len: Option<u64>,
    recompute: Option<String>,
    stack: Option<String>,
    precision: Option<String>,
}

fn one_of(what: &str, v: &Option<String>, allowed: &[&str]) -> anyhow::Result<()> {
    if let Some(x) = v {
        if !allowed.contains(&x.as_str()) {
            anyhow::bail!("`{what}` = `{x}` is not known\nhint: one of: {}", allowed.join(", "));
        }
    }
    Ok(())
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
    "seq",
    "batch",
    "kv-len",
    "recompute",
    "stack",
    "precision",
];

/// The flags as the record's types (clap checked their ranges: counts fit a `u32`, ZeRO 0..=3).
struct Flags {
    gpus: Option<u32>,
    tp: Option<u32>,
    pp: Option<u32>,
    dp: Option<u32>,
    zero: Option<u32>,
    micro_batch: Option<u64>,
    global_batch: Option<u64>,
    seq: Option<u64>,
    batch: Option<u64>,
    kv_len: Option<u64>,
}

fn scenario(m: &MeasureArgs) -> anyhow::Result<Scenario> {
    let a = &m.scenario;
    a.only("measure", SCENARIO_FLAGS)?;
    let u32_of = |v: Option<i64>| v.map(|x| x as u32);
    let u64_of = |v: Option<i64>| v.map(|x| x as u64);
    let n = Flags {
        gpus: u32_of(a.gpus),
        tp: u32_of(a.tp),
        pp: u32_of(a.pp),
        dp: u32_of(a.dp),
        zero: u32_of(a.zero),
        micro_batch: u64_of(a.micro_batch),
        global_batch: u64_of(a.global_batch),
        seq: u64_of(a.seq),
        batch: u64_of(a.batch),
        kv_len: u64_of(a.kv_len),
    };
    let f = match &a.scenario {
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| format!("cannot read `{}`", p.display()))?;
            toml::from_str::<ScenarioFileWire>(&text).with_context(|| format!("`{}` is not a measure scenario", p.display()))?
        }
        None => ScenarioFileWire::default(),
    };
    let mode = a.mode.clone().or(f.mode).unwrap_or_else(|| "train".into());
    one_of("mode", &Some(mode.clone()), &["train", "prefill", "decode", "serve"])?;
    let recompute = a.recompute.clone().or(f.recompute);
    one_of("recompute", &recompute, &["none", "selective", "full"])?;
    let precision = a.precision.clone().or(f.precision);
    one_of("precision", &precision, &["bf16", "fp8", "fp4", "fp16", "fp32"])?;
    let n_gpus = n.gpus.or(f.n_gpus).unwrap_or(1);
    let tp = n.tp.or(f.tp).unwrap_or(1);
    let pp = n.pp.or(f.pp).unwrap_or(1);
    let dp = match n.dp.or(f.dp) {
        Some(d) => d,
        None => {
            if !n_gpus.is_multiple_of((tp * pp).max(1)) {
                anyhow::bail!("`--gpus` = {n_gpus} is not a multiple of tp x pp = {}", tp * pp);
            }
            n_gpus / (tp * pp).max(1)
        }
    };
    if tp * pp * dp != n_gpus {
        anyhow::bail!("tp x pp x dp = {} but `--gpus` = {n_gpus}", tp * pp * dp);
    }
    let micro_batch = n.micro_batch.or(f.micro_batch);
    let mut grad_accum = m.grad_accum.or(f.grad_accum);
    let mut global_batch = n.global_batch.or(f.global_batch);
    if mode == "train" {
        match (micro_batch, grad_accum, global_batch) {
            (Some(m), Some(g), None) => global_batch = Some(m * g * u64::from(dp)),
            (Some(m), None, Some(gb)) => {
                let per = m * u64::from(dp);
                if per == 0 || gb % per != 0 {
                    anyhow::bail!("`--global-batch` = {gb} is not a multiple of micro_batch x dp = {per}");
                }
                grad_accum = Some(gb / per);
            }
            (Some(m), None, None) => {
                grad_accum = Some(1);
                global_batch = Some(m * u64::from(dp));
            }
            (Some(m), Some(g), Some(gb)) if m * g * u64::from(dp) != gb => {
                anyhow::bail!("micro_batch x grad_accum x dp = {} but `--global-batch` = {gb}", m * g * u64::from(dp))
            }
            _ => {}
        }
    }
    let (model, model_file) = model_and_file(a.model.clone().or(f.model))?;
    Ok(Scenario {
        model,
        model_file,
        system: a.system.clone().or(f.system),
        n_gpus,
        tp,
        sp: a.sp.or(f.sp),
        pp,
        dp,
        zero: n.zero.or(f.zero).unwrap_or(0),
        mode,
        micro_batch,
        grad_accum,
        global_batch,
        seq: n.seq.or(f.seq),
        batch: n.batch.or(f.batch),
        kv_len: n.kv_len.or(f.kv_len),
        recompute,
        stack: a.stack.clone().or(f.stack),
        precision,
    })
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
    one_of("split", &a.split, &["fit", "test"])?;
    let format = match (&a.step_regex, a.format.as_str()) {
        (Some(r), _) => LogFormat::Regex(step_regex(r).map_err(anyhow::Error::msg)?),
        (None, "auto") => LogFormat::Auto,
        (None, "gpuplan") => LogFormat::Gpuplan,
        (None, "megatron") => LogFormat::Megatron,
        (None, "torchtitan") => LogFormat::Torchtitan,
        (None, "hf-trainer") => LogFormat::HfTrainer,
        (None, other) => anyhow::bail!("`--format` = `{other}` is not known\nhint: one of: auto, gpuplan, megatron, torchtitan, hf-trainer"),
    };
    let log = match &a.log {
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
    let rec = measure::run(&cfg, out, err, &mut |w| eprintln!("gpuplan measure: warning: {w}"))?;
    let m = &rec.metrics;
    let gib = |b: f64| b / (1u64 << 30) as f64;
    eprintln!(
        "gpuplan measure: {} status={} exit={:?} steps={} timed={} median_step_s={} tokens_per_s={} peak_mem_gib_nvml={:?} avg_power_w={:?} energy_j_per_step={}",
        rec.run_id.as_deref().unwrap_or("-"),
        rec.status,
        rec.exit_code,
        m.n_steps_parsed,
        m.n_steps_timed,
        m.step_time_s_median.map_or("-".into(), |v| format!("{v:.4}")),
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

/// A model given as a file is kept by its absolute path and a copy of its text, so the record
/// validates from any folder and on any machine; a catalog name is kept as it is.
fn model_and_file(model: Option<String>) -> anyhow::Result<(Option<String>, Option<crate::record::ModelFile>)> {
    let Some(m) = model else { return Ok((None, None)) };
    let p = std::path::Path::new(&m);
    if !p.is_file() {
        return Ok((Some(m), None));
    }
    let abs = std::fs::canonicalize(p).with_context(|| format!("`--model` = `{m}`: cannot resolve the path"))?;
    let text = std::fs::read_to_string(&abs).with_context(|| format!("`--model` = `{m}`: cannot read `{}`", abs.display()))?;
    let path = abs.display().to_string();
    Ok((Some(path.clone()), Some(crate::record::ModelFile { path, text })))
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
