//! `gpuplan report`: cost per token, energy and time for scenarios, as markdown + SVG, HTML and
//! CSV; and `--claims`, the audit of the seed documents' figures.

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::args::ScenarioArgs;
use super::{write_atomic, Outcome};
use crate::config::reliability::GoodputSetup;
use crate::measure::record::read_all;
use crate::report::claims::{self, ClaimsWire, Subject};
use crate::report::prices::{self, PriceFlags, PricesWire};
use crate::report::{command_args, render, scaling_dps, Band, Entry, Predicted, Run, ScalePoint, Stragglers};
use crate::sim::per_rank::{simulate_per_rank, PerRankError, PerRankOptions, Persistence};
use crate::workload::Mode;

/// The run set and profile the uncertainty bands are computed from.
pub const BAND_RUNS: &str = "calibration/runs/h200.jsonl";
pub const BAND_PROFILE: &str = "h200-sxm-2x";

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// Scenario files (scenarios/*.toml); each is also predicted in the other modes
    #[arg(long, num_args = 1..)]
    pub scenario: Vec<PathBuf>,
    /// Price file (calibration/prices/*.toml); price flags override its figures
    #[arg(long)]
    pub prices: Option<PathBuf>,
    /// Output folder (report.md, report.html, charts/*.svg, *.csv)
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Overwrite an existing report folder's files
    #[arg(long)]
    pub force: bool,
    /// Report title (default: the output folder's name)
    #[arg(long)]
    pub title: Option<String>,
    /// Tokens to train, for the time- and cost-to-train table
    #[arg(long, default_value_t = 1e12)]
    pub tokens: f64,
    /// Audit the claims of a claims file (default scenarios/seed-claims.toml)
    #[arg(long, num_args = 0..=1, default_missing_value = "scenarios/seed-claims.toml")]
    pub claims: Option<PathBuf>,
    /// Run records for the uncertainty bands
    #[arg(long, default_value = BAND_RUNS)]
    pub band_runs: PathBuf,
    /// Calibration profile the band runs are predicted with
    #[arg(long, default_value = BAND_PROFILE)]
    pub band_profile: String,
    /// Rental price per GPU-hour (USD); replaces the file's GPU price
    #[arg(long)]
    pub gpu_hour_usd: Option<f64>,
    /// Purchase price per GPU (USD, the node's price / its GPUs)
    #[arg(long)]
    pub purchase_usd_per_gpu: Option<f64>,
    /// Years over which the purchase is written off (straight line)
    #[arg(long)]
    pub amortization_years: Option<f64>,
    /// Share of hours the GPUs do paid work (0-1]
    #[arg(long)]
    pub utilization: Option<f64>,
    /// Electricity price, USD per kWh at the facility meter (0 when the GPU-hour price includes power)
    #[arg(long)]
    pub electricity_usd_per_kwh: Option<f64>,
    /// Power usage effectiveness (replaces the system file's)
    #[arg(long)]
    pub pue: Option<f64>,
    /// Host power per node beyond the GPUs, W (replaces the system file's)
    #[arg(long)]
    pub node_overhead_w: Option<f64>,
    /// Network (fabric, egress) cost per node-hour, USD
    #[arg(long)]
    pub network_usd_per_node_hour: Option<f64>,
    /// Storage cost per node-hour, USD
    #[arg(long)]
    pub storage_usd_per_node_hour: Option<f64>,
    /// K=FACTOR: add the step-time distribution under K random stragglers at FACTOR of their
    /// speed (the per-rank engine, over --steps) of each scenario's training run, with a chart
    #[arg(long, value_parser = super::simulate::parse_stragglers)]
    pub stragglers: Option<(u64, f64)>,
    /// With --stragglers, steps to simulate
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=crate::limits::sim::MAX_PER_RANK_STEPS as i64), requires = "stragglers")]
    pub steps: u32,
    /// With --stragglers, the seed of the straggler draws
    #[arg(long, default_value_t = 0, requires = "stragglers")]
    pub seed: u64,
    /// With --stragglers, how long a straggler stays slow: `step`, `job` or a mean lifetime in
    /// steps (as `simulate --straggler-persistence`)
    #[arg(long = "straggler-persistence", default_value = "step", value_parser = super::simulate::parse_persistence, requires = "stragglers")]
    pub straggler_persistence: Persistence,
    /// `--goodput` and its flags: goodput-adjusted time and cost to train `--tokens` (training runs)
    #[command(flatten)]
    pub goodput: super::goodput::GoodputArgs,
}

impl ReportArgs {
    fn price_flags(&self) -> PriceFlags {
        PriceFlags {
            gpu_hour_usd: self.gpu_hour_usd,
            purchase_usd_per_gpu: self.purchase_usd_per_gpu,
            amortization_years: self.amortization_years,
            utilization: self.utilization,
            electricity_usd_per_kwh: self.electricity_usd_per_kwh,
            pue: self.pue,
            node_overhead_w: self.node_overhead_w,
            network_usd_per_node_hour: self.network_usd_per_node_hour,
            storage_usd_per_node_hour: self.storage_usd_per_node_hour,
        }
    }
}

pub fn run(args: ReportArgs) -> anyhow::Result<Outcome> {
    anyhow::ensure!(!args.scenario.is_empty() || args.claims.is_some(), "nothing to report\nhint: give `--scenario FILE...` and/or `--claims [FILE]`");
    anyhow::ensure!(args.tokens.is_finite() && args.tokens > 0.0, "`--tokens` = {} must be positive", args.tokens);
    if !args.scenario.is_empty() {
        anyhow::ensure!(args.out.is_some(), "`--out DIR` is required with `--scenario`\nhint: e.g. `--out reports/my-cluster/`");
    }
    let flags = args.price_flags();
    let prices = match &args.prices {
        Some(p) => {
            let w: PricesWire = crate::config::parse_toml(p, &crate::config::read_file(p)?)?;
            Some(prices::resolve(Some(w.build(&p.display().to_string())?), &flags)?)
        }
        None if flags != PriceFlags::default() => Some(prices::resolve(None, &flags)?),
        None => None,
    };
    if prices.is_none() && !args.scenario.is_empty() {
        eprintln!("note: no prices given (`--prices FILE` or price flags); the report leaves dollar figures out");
    }
    let band = band(&args.band_runs, &args.band_profile)?;
    eprintln!("uncertainty band: {}", band.origin);

    let goodput = match args.goodput.goodput {
        true => {
            anyhow::ensure!(args.goodput.train_tokens.is_none(), "`--train-tokens` does not apply to `gpuplan report`\nhint: the report trains `--tokens`");
            let mut g = crate::config::reliability::build(&args.goodput.flags())?;
            g.train_tokens = Some(args.tokens);
            Some(g)
        }
        false => None,
    };
    let straggle = args.stragglers.map(|k| PerRankOptions {
        stragglers: Some(k),
        persistence: args.straggler_persistence,
        steps: args.steps,
        seed: args.seed,
        ..Default::default()
    });
    let entries: Vec<Entry> = args.scenario.iter().map(|f| entry(f, goodput.as_ref(), straggle.as_ref())).collect::<anyhow::Result<_>>()?;
    let claims = match &args.claims {
        Some(f) => Some(audit(f, &band)?),
        None => None,
    };
    if let Some(cl) = &claims {
        print!("{}", render::claims_text(cl));
    }

    if let Some(out) = &args.out {
        let title = args.title.clone().unwrap_or_else(|| out.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "report".into()));
        let mut command = command_args(&args.scenario, args.prices.as_deref(), &flags, args.tokens, args.claims.as_deref());
        if args.goodput.goodput {
            command = command.replace("--out DIR", &format!("{} --out DIR", args.goodput.command_line()));
        }
        if let Some(o) = &straggle {
            command = command.replace("--out DIR", &format!("{} --out DIR", straggler_flags(o)));
        }
        let files = render::render(&render::Input {
            title: &title,
            command: &command,
            entries: &entries,
            prices: prices.as_ref(),
            band: &band,
            tokens: args.tokens,
            claims: claims.as_deref(),
        })
        .map_err(|e| anyhow::anyhow!(e))?;
        // Never over an input, whatever `--force` says (a scenario kept in the report folder).
        let mut inputs: Vec<(&str, Option<&Path>)> = args.scenario.iter().map(|p| ("--scenario", Some(p.as_path()))).collect();
        inputs.extend([("--prices", args.prices.as_deref()), ("--claims", args.claims.as_deref()), ("--band-runs", Some(args.band_runs.as_path()))]);
        let targets: Vec<PathBuf> = files.iter().map(|(p, _)| out.join(p)).collect();
        let outputs: Vec<(&str, Option<&Path>)> = targets.iter().map(|t| ("--out", Some(t.as_path()))).collect();
        super::check_outputs(true, &outputs, &inputs)?;
        if !args.force {
            let existing: Vec<String> = files.iter().map(|(p, _)| out.join(p)).filter(|p| p.exists()).map(|p| p.display().to_string()).collect();
            anyhow::ensure!(
                existing.is_empty(),
                "`{}` would be overwritten ({} files, e.g. `{}`)\nhint: pass --force to overwrite",
                out.display(),
                existing.len(),
                existing[0]
            );
        }
        for (p, text) in &files {
            write_atomic(&out.join(p), text.as_bytes())?;
        }
        eprintln!("wrote {} files to {}", files.len(), out.display());
        println!("{}", out.join("report.html").display());
    }
    Ok(Outcome::Ok)
}

/// A data file given relative to the repository (`calibration/runs/...`, `scenarios/...`): as given
/// if it exists, else under the data roots on disk (`--catalog`, `GPUPLAN_CATALOG`), like model and
/// system names.
fn locate(p: &Path) -> PathBuf {
    if p.exists() || p.is_absolute() {
        return p.to_path_buf();
    }
    crate::config::data_roots().into_iter().map(|r| r.join(p)).find(|c| c.exists()).unwrap_or_else(|| p.to_path_buf())
}

/// Validation error of the shipped run set with the shipped profile, computed now.
pub fn band(runs: &Path, profile: &str) -> anyhow::Result<Band> {
    let records = read_all(&locate(runs)).with_context(|| format!("reading the band's run set `{}`", runs.display()))?;
    Band::from_runs(&records, runs, profile).map_err(anyhow::Error::msg)
}

fn predict_run(file: &Path, name_hint: &str, mode: &str, flags: Vec<String>, a: ScenarioArgs, goodput: Option<&GoodputSetup>) -> Run {
    let outcome = a.build().map_err(|e| format!("{e:#}")).and_then(|s| {
        let p = crate::analytic::predict(&s).map_err(|e| e.to_string())?;
        let mut doc = super::predict::document(&s, &p);
        if s.workload.mode == Mode::Train {
            doc.goodput = goodput.map(|g| super::goodput::document(&s, p.tokens_per_s, g));
        }
        let used = crate::analytic::used_numbers(&s);
        Ok(Predicted { scenario: s, doc, used })
    });
    let scenario_name = outcome.as_ref().map(|p| p.scenario.name.clone()).unwrap_or_else(|_| name_hint.to_string());
    Run { file: file.display().to_string(), scenario_name, mode: mode.into(), flags, outcome }
}

/// The straggler flags of `simulate --per-rank` (and `report`).
fn straggler_flags(o: &PerRankOptions) -> String {
    let (k, f) = o.stragglers.unwrap_or((0, 1.0));
    let mut v = format!("--stragglers {k}={f} --steps {} --seed {}", o.steps, o.seed);
    if o.persistence != Persistence::Step {
        v += &format!(" --straggler-persistence {}", super::simulate::persistence_name(o.persistence));
    }
    v
}

/// The training run's step times under stragglers: the per-rank engine over its steps.
fn straggler_run(file: &Path, train: &Run, o: &PerRankOptions) -> anyhow::Result<Stragglers> {
    let mut command = vec![format!("--scenario {}", file.display())];
    command.extend(train.flags.iter().cloned());
    command.push(format!("--per-rank {}", straggler_flags(o)));
    let doc = match &train.outcome {
        Ok(p) => match simulate_per_rank(&p.scenario, o) {
            Ok(r) => Ok(super::simulate::per_rank_doc(&r, o)),
            // A bad straggler count names its flag: bad input, not a row of the report.
            Err(PerRankError::Fault(e)) => return Err(anyhow::Error::new(e).context(format!("scenario `{}`", file.display()))),
            Err(PerRankError::Predict(e)) => Err(e.to_string()),
        },
        Err(e) => Err(e.clone()),
    };
    Ok(Stragglers { command: command.join(" "), doc })
}

/// A scenario file in its own mode and the two others, and its scaling curve.
fn entry(file: &Path, goodput: Option<&GoodputSetup>, stragglers: Option<&PerRankOptions>) -> anyhow::Result<Entry> {
    let base = ScenarioArgs { scenario: Some(file.to_path_buf()), ..Default::default() };
    let s = base.build().with_context(|| format!("scenario `{}`", file.display()))?;
    let w = &s.workload;
    let primary = w.mode.name().to_string();
    let name = s.name.clone();
    // Inference batch = training micro-batch and back; decode attends over the training/prefill sequence.
    let (batch, seq) = match w.mode {
        Mode::Train => (w.micro_batch, w.seq),
        Mode::Prefill => (w.batch, w.seq),
        Mode::Decode => (w.batch, w.kv_len),
    };
    let variant = |mode: Mode| -> (Vec<String>, ScenarioArgs) {
        let mut a = base.clone();
        let mut f: Vec<String> = Vec::new();
        if mode == w.mode {
            return (f, a);
        }
        a.mode = Some(mode.name().into());
        f.push(format!("--mode {}", mode.name()));
        match mode {
            Mode::Train => {
                a.micro_batch = Some(batch as i64);
                a.global_batch = Some((batch * s.parallel.dp as u64) as i64);
                a.seq = Some(seq as i64);
                f.extend([format!("--micro-batch {batch}"), format!("--global-batch {}", batch * s.parallel.dp as u64), format!("--seq {seq}")]);
            }
            Mode::Prefill | Mode::Decode => {
                a.batch = Some(batch as i64);
                a.zero = Some(0);
                a.recompute = Some("none".into());
                f.extend([format!("--batch {batch}"), "--zero 0".into(), "--recompute none".into()]);
                if mode == Mode::Prefill {
                    a.seq = Some(seq as i64);
                    f.push(format!("--seq {seq}"));
                } else {
                    a.kv_len = Some(seq as i64);
                    f.push(format!("--kv-len {seq}"));
                }
            }
        }
        (f, a)
    };
    let runs: Vec<Run> = [Mode::Train, Mode::Prefill, Mode::Decode]
        .into_iter()
        .map(|m| {
            let (f, a) = variant(m);
            predict_run(file, &name, m.name(), f, a, goodput)
        })
        .collect();

    let mp = (s.parallel.tp * s.parallel.pp * s.parallel.cp) as u64;
    let scaling = scaling_dps(s.parallel.dp)
        .into_iter()
        .map(|dp| {
            let mut a = base.clone();
            let gpus = mp * dp as u64;
            a.gpus = Some(gpus as i64);
            a.dp = Some(dp as i64);
            let mut f = vec![format!("--gpus {gpus}"), format!("--dp {dp}")];
            if w.mode == Mode::Train {
                let gb = w.global_batch / s.parallel.dp as u64 * dp as u64;
                a.global_batch = Some(gb as i64);
                f.push(format!("--global-batch {gb}"));
            }
            match a.build().map_err(|e| e.to_string()).and_then(|s| crate::analytic::predict(&s).map_err(|e| e.to_string())) {
                Ok(p) => ScalePoint { gpus, dp, flags: f, tokens_per_s: Some(p.tokens_per_s), fits: p.memory.fits() },
                Err(_) => ScalePoint { gpus, dp, flags: f, tokens_per_s: None, fits: false },
            }
        })
        .collect();
    let stragglers = match (stragglers, runs.iter().find(|r| r.mode == Mode::Train.name())) {
        (Some(o), Some(train)) => Some(straggler_run(file, train, o)?),
        _ => None,
    };
    Ok(Entry { file: file.display().to_string(), name, primary_mode: primary, runs, scaling, stragglers })
}

/// Check every claim of a claims file.
fn audit(file: &Path, band: &Band) -> anyhow::Result<Vec<claims::Checked>> {
    let file = &locate(file);
    let w: ClaimsWire = crate::config::parse_toml(file, &crate::config::read_file(file)?)?;
    let mut out = Vec::new();
    for c in &w.claim {
        anyhow::ensure!(
            c.low <= c.high && c.low.is_finite() && c.high.is_finite(),
            "{}: claim `{}`: `low` = {} is above `high` = {}",
            file.display(),
            c.id,
            c.low,
            c.high
        );
        let checked = match (&c.scenario, &c.system) {
            (Some(sf), None) => {
                let a = ScenarioArgs { scenario: Some(locate(Path::new(sf))), ..Default::default() };
                match a.build().map_err(|e| format!("{e:#}")).and_then(|s| crate::analytic::predict(&s).map(|p| (s, p)).map_err(|e| e.to_string())) {
                    Ok((s, p)) => {
                        let doc = super::predict::document(&s, &p);
                        claims::check(c, Subject::Scenario { s: &s, doc: &doc }, band)
                    }
                    Err(e) => claims::check(c, Subject::Missing(format!("scenario `{sf}`: {e}")), band),
                }
            }
            (None, Some(sys)) => match crate::config::system::load_system(sys) {
                Ok(system) => claims::check(c, Subject::Hardware { system: &system }, band),
                Err(e) => claims::check(c, Subject::Missing(format!("system `{sys}`: {e}")), band),
            },
            _ => anyhow::bail!("{}: claim `{}` needs exactly one of `scenario` and `system`", file.display(), c.id),
        };
        out.push(checked);
    }
    claims::cross_check(&mut out);
    Ok(out)
}
