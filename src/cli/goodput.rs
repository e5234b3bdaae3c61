//! `--goodput` (predict, simulate): the goodput flags, and the goodput section of the table and of
//! the JSON document (`/goodput`), from `gpuplan_core::goodput` over a reliability file.

use crate::config::prediction::{FailureDoc, GoodputDoc, SourceDoc, TrainDoc};
use crate::config::reliability::{self, GoodputFlags, GoodputSetup};
use crate::goodput::{self, Recovery};
use crate::scenario::Scenario;

/// What the band of the time to train is.
pub const BAND: &str = "5th-95th percentile of the Poisson failure count over the run, each failure costing the expected loss per failure; the failure rates' own uncertainty is not included";

#[derive(clap::Args, Debug, Default, Clone)]
pub struct GoodputArgs {
    /// Add goodput: failures, checkpoints and restarts -> effective training-time fraction,
    /// tokens per day, time to train (--train-tokens)
    #[arg(long)]
    pub goodput: bool,
    /// Failure rates: a name under calibration/reliability/ (default meta-rsc-2024), a file, or
    /// `none` (only --failure-rate)
    #[arg(long, requires = "goodput")]
    pub reliability: Option<String>,
    /// A component's failure rate NAME=RATE[/PER], failures per unit-day, PER node (default), gpu
    /// or nic; replaces the file's component of that name (repeatable)
    #[arg(long = "failure-rate", requires = "goodput", allow_hyphen_values = true)]
    pub failure_rate: Vec<String>,
    /// Storage bandwidth of the whole job for checkpoint writes and reads, GB/s (required)
    #[arg(long, requires = "goodput", allow_negative_numbers = true)]
    pub storage_gb_per_s: Option<f64>,
    /// Training seconds between checkpoints (default: Daly's optimum)
    #[arg(long, requires = "goodput", allow_negative_numbers = true)]
    pub checkpoint_interval_s: Option<f64>,
    /// Seconds from a failure to its detection (default 600: PyTorch's NCCL timeout)
    #[arg(long, requires = "goodput", allow_negative_numbers = true)]
    pub detect_s: Option<f64>,
    /// Seconds to relaunch after a failure, checkpoint read aside (required unless the
    /// reliability file gives `restart_s`)
    #[arg(long, requires = "goodput", allow_negative_numbers = true)]
    pub restart_s: Option<f64>,
    /// Hot spare nodes (default: a healthy node is always at hand); needs --repair-h
    #[arg(long, requires = "goodput", allow_negative_numbers = true)]
    pub spares: Option<i64>,
    /// Mean hours to bring a failed node back (with --spares)
    #[arg(long, requires = "goodput", allow_negative_numbers = true)]
    pub repair_h: Option<f64>,
    /// restart (the whole job from its last checkpoint, default) or replica (only the failed
    /// data-parallel replica restarts; torchft-style)
    #[arg(long, requires = "goodput")]
    pub recovery: Option<String>,
    /// Tokens to train, for the time to train and its band (e.g. 15.6e12)
    #[arg(long, requires = "goodput", allow_negative_numbers = true)]
    pub train_tokens: Option<f64>,
}

impl GoodputArgs {
    pub fn flags(&self) -> GoodputFlags {
        GoodputFlags {
            reliability: self.reliability.clone(),
            failure_rates: self.failure_rate.clone(),
            storage_gb_per_s: self.storage_gb_per_s,
            checkpoint_interval_s: self.checkpoint_interval_s,
            detect_s: self.detect_s,
            restart_s: self.restart_s,
            spares: self.spares,
            repair_h: self.repair_h,
            recovery: self.recovery.clone(),
            train_tokens: self.train_tokens,
        }
    }

    /// The flags as a command line (`--goodput --storage-gb-per-s 2000 ...`), empty without
    /// `--goodput`: a report's header repeats them.
    pub fn command_line(&self) -> String {
        if !self.goodput {
            return String::new();
        }
        let mut v = vec!["--goodput".to_string()];
        let mut opt = |k: &str, x: Option<String>| {
            if let Some(x) = x {
                v.push(format!("--{k} {x}"));
            }
        };
        opt("reliability", self.reliability.clone());
        for r in &self.failure_rate {
            opt("failure-rate", Some(r.clone()));
        }
        opt("storage-gb-per-s", self.storage_gb_per_s.map(|x| x.to_string()));
        opt("checkpoint-interval-s", self.checkpoint_interval_s.map(|x| x.to_string()));
        opt("detect-s", self.detect_s.map(|x| x.to_string()));
        opt("restart-s", self.restart_s.map(|x| x.to_string()));
        opt("spares", self.spares.map(|x| x.to_string()));
        opt("repair-h", self.repair_h.map(|x| x.to_string()));
        opt("recovery", self.recovery.clone());
        v.join(" ")
    }

    /// The checked setup, when `--goodput` is given; for a training scenario only.
    pub fn setup(&self, s: &Scenario) -> anyhow::Result<Option<GoodputSetup>> {
        if !self.goodput {
            return Ok(None);
        }
        anyhow::ensure!(
            s.workload.mode == crate::workload::Mode::Train,
            "`--goodput` applies to training; the scenario's mode is `{}`\nhint: drop --goodput or use `--mode train`",
            s.workload.mode.name()
        );
        Ok(Some(reliability::build(&self.flags())?))
    }
}

/// The goodput document of `s` at `tokens_per_s` (failure-free).
pub fn document(s: &Scenario, tokens_per_s: f64, g: &GoodputSetup) -> GoodputDoc {
    let r = goodput::goodput(s, tokens_per_s, &g.params, g.train_tokens);
    let (nodes, gpus, nics) = goodput::units(s);
    let components = g
        .reliability
        .components
        .iter()
        .map(|c| FailureDoc {
            name: c.name.clone(),
            per: c.per.name().into(),
            failures_per_unit_day: c.rate.value,
            units: match c.per {
                goodput::Per::Node => nodes,
                goodput::Per::Gpu => gpus,
                goodput::Per::Nic => nics,
            },
            failures_per_day: goodput::failures_per_day(s, c.per, c.rate.value),
            source: format!("[{}] {}", c.rate.source.kind(), c.rate.source.citation()),
        })
        .collect();
    let days = |x: crate::units::Seconds| x.value() / goodput::DAY_S;
    GoodputDoc {
        reliability: format!("{} ({})", g.reliability.name, g.reliability.origin),
        recovery: r.recovery.name().into(),
        nodes,
        failures_per_day: r.failures_per_day,
        mtbf_h: r.mtbf.value() / 3600.0,
        components,
        checkpoint_bytes: r.checkpoint.value(),
        checkpoint_write_s: r.checkpoint_write.value(),
        checkpoint_interval_s: r.interval.value(),
        checkpoint_interval_optimal: r.interval_optimal,
        detect_s: g.params.detect.value(),
        restart_s: g.params.restart.value(),
        spare_wait_s: r.spare_wait.value(),
        recovery_s: r.recovery_time.value(),
        effective_fraction: r.fraction,
        tokens_per_s: r.tokens_per_s * r.fraction,
        tokens_per_day: r.tokens_per_day,
        train: r.train.map(|t| TrainDoc {
            tokens: t.tokens,
            days: days(t.wall),
            days_p5: days(t.wall_low),
            days_p95: days(t.wall_high),
            failures: t.failures,
            failures_p5: t.failures_low,
            failures_p95: t.failures_high,
            band: BAND.into(),
        }),
        inputs: g
            .inputs
            .iter()
            .map(|(name, value, src)| SourceDoc { name: name.clone(), value: value.clone(), kind: src.kind().into(), source: src.citation().into() })
            .collect(),
    }
}

/// The goodput section of the readable table.
pub fn table(d: &GoodputDoc) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(o);
    let _ = writeln!(o, "  goodput          {:.1}% effective training time ({} recovery; rates: {})", d.effective_fraction * 100.0, d.recovery, d.reliability);
    let _ = writeln!(o, "    failures       {:.2} per day over {} nodes (MTBF {:.2} h)", d.failures_per_day, d.nodes, d.mtbf_h);
    for c in &d.components {
        let share = if d.failures_per_day > 0.0 { 100.0 * c.failures_per_day / d.failures_per_day } else { 0.0 };
        let _ = writeln!(
            o,
            "      {:<12} {:.3e} per {}-day x {} = {:.2} per day ({share:.1}%)  {}",
            c.name, c.failures_per_unit_day, c.per, c.units, c.failures_per_day, c.source
        );
    }
    let gb = d.checkpoint_bytes / 1e9;
    let _ = writeln!(o, "    checkpoint     {:.1} GB (weights + optimizer state), {:.1} s to write or read", gb, d.checkpoint_write_s);
    if d.recovery == Recovery::Restart.name() {
        let how = if d.checkpoint_interval_optimal { "Daly's optimum" } else { "given" };
        let _ = writeln!(o, "    interval       {:.0} s of training between checkpoints ({how})", d.checkpoint_interval_s);
    } else {
        let _ = writeln!(o, "    interval       not counted: a failure restarts only its data-parallel replica");
    }
    let _ = writeln!(
        o,
        "    per failure    {:.0} s: detect {:.0} + relaunch {:.0} + spare wait {:.0} + read {:.1}",
        d.recovery_s, d.detect_s, d.restart_s, d.spare_wait_s, d.checkpoint_write_s
    );
    let _ = writeln!(o, "    tokens/day     {:.3e}  ({:.0} tokens/s after failures)", d.tokens_per_day, d.tokens_per_s);
    if let Some(t) = &d.train {
        let _ = writeln!(
            o,
            "    train {:.3e} tokens: {:.1} days (band {:.1}-{:.1}), {:.0} failures (band {:.0}-{:.0})",
            t.tokens, t.days, t.days_p5, t.days_p95, t.failures, t.failures_p5, t.failures_p95
        );
        let _ = writeln!(o, "      band: {}", t.band);
    }
    for i in &d.inputs {
        let _ = writeln!(o, "    {:<14} {:>12}  [{}] {}", i.name, i.value, i.kind, i.source);
    }
    o
}
