//! `gpuplan plan`: search parallel layouts and batch knobs, rank them, print a table, JSON Lines or
//! CSV; `--batch-advice` for the micro-batch (training) or serving batch of the best layout.

use std::io::IsTerminal;

use anyhow::{bail, Context};

use super::args::ScenarioArgs;
use super::predict::to_json;
use super::Outcome;
use crate::analytic;
use crate::hardware::Dtype;
use crate::plan::{self, advice, Constraints, GlobalBatch, Objective, PlanMode, PlanResult, Pricing, Request, Space};
use crate::scenario::Scenario;
use crate::workload::Recompute;

/// Search and output options shared by `plan` and `compare`.
#[derive(clap::Args, Debug, Clone)]
pub struct PlanOptions {
    /// Smallest GPU count to consider (with --max-gpus: a range instead of --gpus)
    #[arg(long)]
    pub min_gpus: Option<u64>,
    /// Largest GPU count to consider
    #[arg(long)]
    pub max_gpus: Option<u64>,
    /// Tokens to train (time-to-train objective and column), e.g. 15e12
    #[arg(long)]
    pub tokens: Option<f64>,
    /// Smallest global batch (sequences) to consider, instead of a fixed --global-batch
    #[arg(long)]
    pub min_global_batch: Option<u64>,
    /// Largest global batch (sequences) to consider
    #[arg(long)]
    pub max_global_batch: Option<u64>,
    /// throughput, time-to-train, cost, tokens-per-joule
    #[arg(long, default_value = "throughput")]
    pub objective: String,
    /// Price of one GPU-hour in USD (cost column and objective); `compare` also takes
    /// `system=price,...`. No default: prices are yours
    #[arg(long)]
    pub gpu_hour_usd: Option<String>,
    /// Price of one kWh at the facility in USD (added to the cost; energy includes the PUE)
    #[arg(long)]
    pub kwh_usd: Option<f64>,
    /// Also try fp8 GEMMs (where the GPU has them)
    #[arg(long)]
    pub allow_fp8: bool,
    /// Also try fp4 GEMMs (where the GPU has them)
    #[arg(long)]
    pub allow_fp4: bool,
    /// Fraction of HBM to keep free (0.1 = use at most 90%)
    #[arg(long, default_value_t = 0.0)]
    pub min_memory_headroom: f64,
    /// Power budget per node in watts (GPUs + host)
    #[arg(long)]
    pub max_node_power_w: Option<f64>,
    /// Power budget of the whole job in kilowatts (IT power: GPUs + hosts, no PUE)
    #[arg(long)]
    pub max_cluster_power_kw: Option<f64>,
    /// Serving: time-to-first-token target (prefill of one batch), ms
    #[arg(long)]
    pub ttft_ms: Option<f64>,
    /// Serving: time-per-output-token target (one decode step), ms
    #[arg(long)]
    pub tpot_ms: Option<f64>,
    /// Largest micro-batch to try (training)
    #[arg(long, default_value_t = 64)]
    pub max_micro_batch: u64,
    /// Largest batch per replica to try (serving)
    #[arg(long, default_value_t = 512)]
    pub max_batch: u64,
    /// Largest virtual-pipeline (interleaving) factor to try
    #[arg(long, default_value_t = 4)]
    pub max_vp: u32,
    /// Largest context-parallel size to try
    #[arg(long, default_value_t = 8)]
    pub max_cp: u32,
    /// Re-rank the top K with the discrete-event simulator
    #[arg(long)]
    pub rerank_des: Option<usize>,
    /// No progress bar
    #[arg(long)]
    pub no_progress: bool,
    /// Only the results (no pruning summary)
    #[arg(long, short)]
    pub quiet: bool,
}

#[derive(clap::Args, Debug)]
pub struct PlanArgs {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    #[command(flatten)]
    pub options: PlanOptions,
    /// Configurations to print (0 = all feasible)
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// JSON Lines: one object per ranked configuration, with the keys of `predict --json`
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// CSV: one row per ranked configuration
    #[arg(long)]
    pub csv: bool,
    /// Batch-size advice for the best layout (training: micro-batch; serving: batch under --ttft-ms/--tpot-ms)
    #[arg(long)]
    pub batch_advice: bool,
    /// Serving under load (`--mode serve --qps Q`): the request-level simulator checks the targets
    #[command(flatten)]
    pub serve: super::serve::PlanServeArgs,
}

/// The plan mode from `--mode` (train | serve; prefill and decode plan as serve).
fn plan_mode(a: &ScenarioArgs) -> anyhow::Result<PlanMode> {
    Ok(match a.mode.as_deref() {
        None | Some("train") => PlanMode::Train,
        Some("serve") | Some("decode") | Some("prefill") => PlanMode::Serve,
        Some(m) => bail!("`--mode` = `{m}` is not known\nhint: plan takes `train` or `serve`"),
    })
}

/// Build the base scenario: model, system and workload from the flags; parallel layout and batch
/// are left to the search.
pub fn base_scenario(a: &ScenarioArgs, mode: PlanMode, n_gpus: u64, system: Option<&str>) -> anyhow::Result<Scenario> {
    let mut b = ScenarioArgs {
        scenario: a.scenario.clone(),
        model: a.model.clone(),
        system: system.map(str::to_string).or_else(|| a.system.clone()),
        gpus: Some(n_gpus as i64),
        seq: a.seq,
        kv_len: a.kv_len,
        batch: a.batch,
        stack: a.stack.clone(),
        etp: a.etp,
        routing_imbalance: a.routing_imbalance,
        tp_comm_overlap: a.tp_comm_overlap,
        calibration: a.calibration.clone(),
        ..ScenarioArgs::default()
    };
    b.mode = Some(match mode {
        PlanMode::Train => "train".into(),
        PlanMode::Serve => "decode".into(),
    });
    if mode == PlanMode::Serve && b.kv_len.is_none() {
        b.kv_len = a.seq;
    }
    // A scenario file's layout would fight the search: reset it (flags pin dimensions instead).
    let mut wire = b.to_wire();
    if let Some(p) = &a.scenario {
        let file = crate::config::scenario::read_scenario(p)?;
        let mut merged = crate::config::scenario::overlay(file, wire);
        merged.gpus = Some(n_gpus as i64);
        merged.parallelism = Default::default();
        merged.workload.micro_batch = None;
        merged.workload.global_batch = None;
        merged.workload.mode = b.mode.clone();
        if mode == PlanMode::Serve && merged.workload.kv_len.is_none() {
            merged.workload.kv_len = merged.workload.seq;
        }
        wire = merged;
    }
    Ok(crate::config::scenario::build(&wire, a.scenario.as_deref())?)
}

fn positive(name: &str, v: Option<i64>) -> anyhow::Result<Option<u32>> {
    match v {
        None => Ok(None),
        Some(x) if x >= 1 => Ok(Some(x as u32)),
        Some(x) => bail!("`--{name}` = {x} must be a positive integer"),
    }
}

/// GPU counts to try: `--gpus`, or a range (powers of two, whole nodes times powers of two, and
/// the ends).
pub(crate) fn gpu_counts(a: &ScenarioArgs, o: &PlanOptions, gpus_per_node: u64) -> anyhow::Result<Vec<u64>> {
    // A range on the command line wins over a scenario file's GPU count.
    let gpus = if o.min_gpus.is_some() || o.max_gpus.is_some() { None } else { a.gpus };
    match (gpus, o.min_gpus, o.max_gpus) {
        (Some(g), None, None) if g >= 1 => Ok(vec![g as u64]),
        (Some(g), None, None) => bail!("`--gpus` = {g} must be a positive integer"),
        (None, Some(lo), Some(hi)) if lo >= 1 && lo <= hi => {
            let mut v: Vec<u64> = (0..40).map(|i| 1u64 << i).chain((0..40).map(|i| gpus_per_node << i)).filter(|n| *n >= lo && *n <= hi).collect();
            v.push(lo);
            v.push(hi);
            v.sort_unstable();
            v.dedup();
            Ok(v)
        }
        (None, Some(lo), Some(hi)) => bail!("`--min-gpus` = {lo} must be at least 1 and at most `--max-gpus` = {hi}"),
        _ => bail!("give `--gpus N`, or both `--min-gpus` and `--max-gpus`\nhint: a range plans over powers of two and whole nodes times powers of two"),
    }
}

fn objective(o: &PlanOptions) -> anyhow::Result<Objective> {
    Ok(match o.objective.as_str() {
        "throughput" => Objective::Throughput,
        "time-to-train" => Objective::TimeToTrain { tokens: o.tokens.context("`--objective time-to-train` needs `--tokens T`\nhint: e.g. `--tokens 15e12`")? },
        "cost" => Objective::Cost,
        "tokens-per-joule" => Objective::TokensPerJoule,
        other => bail!("`--objective` = `{other}` is not known\nhint: one of: throughput, time-to-train, cost, tokens-per-joule"),
    })
}

/// `--gpu-hour-usd`: one price, or `system=price,...` (for `compare`).
pub fn gpu_hour_price(o: &PlanOptions, system: &str) -> anyhow::Result<Option<f64>> {
    let Some(text) = &o.gpu_hour_usd else { return Ok(None) };
    let parse = |v: &str| -> anyhow::Result<f64> {
        let x: f64 = v.trim().parse().with_context(|| format!("`--gpu-hour-usd` value `{v}` is not a number"))?;
        if !(x >= 0.0 && x.is_finite()) {
            bail!("`--gpu-hour-usd` = {x} must be a non-negative price");
        }
        Ok(x)
    };
    if !text.contains('=') {
        return parse(text).map(Some);
    }
    for part in text.split(',') {
        let (k, v) = part.split_once('=').with_context(|| format!("`--gpu-hour-usd` entry `{part}` is not `system=price`"))?;
        if k.trim() == system {
            return parse(v).map(Some);
        }
    }
    bail!("`--gpu-hour-usd` has no price for `{system}`\nhint: give `{system}=PRICE` in the list")
}

/// Build the plan request from the flags.
pub fn request(a: &ScenarioArgs, o: &PlanOptions, base: &Scenario, mode: PlanMode) -> anyhow::Result<Request> {
    let n_gpus = gpu_counts(a, o, base.system.gpus_per_node as u64)?;
    let mut precision = match &a.precision {
        Some(p) => vec![Dtype::parse(p).with_context(|| format!("`--precision` = `{p}` is not known\nhint: one of: bf16, fp16, fp8, fp4"))?],
        None => vec![Dtype::Bf16],
    };
    if a.precision.is_none() {
        // On a GPU without the path (A100 and fp8), the prune rule counts them; `compare` keeps going.
        for (allow, d) in [(o.allow_fp8, Dtype::Fp8), (o.allow_fp4, Dtype::Fp4)] {
            if allow {
                precision.push(d);
            }
        }
    }
    let recompute = match a.recompute.as_deref() {
        None => vec![Recompute::None, Recompute::Selective, Recompute::Full],
        Some("none") => vec![Recompute::None],
        Some("selective") => vec![Recompute::Selective],
        Some("full") => vec![Recompute::Full],
        Some(r) => bail!("`--recompute` = `{r}` is not known\nhint: one of: none, selective, full"),
    };
    let zero = match a.zero {
        None => vec![0, 1, 2, 3],
        Some(z @ 0..=3) => vec![z as u32],
        Some(z) => bail!("`--zero` = {z} is not a ZeRO stage\nhint: 0, 1, 2 or 3"),
    };
    let global_batch = match (a.global_batch, o.min_global_batch, o.max_global_batch) {
        (Some(g), None, None) if g >= 1 => GlobalBatch::Fixed(g as u64),
        (None, Some(lo), Some(hi)) if lo >= 1 && lo <= hi => GlobalBatch::Range(lo, hi),
        _ if mode == PlanMode::Serve => GlobalBatch::Unset,
        (None, None, None) => {
            bail!("training plans need a global batch\nhint: give `--global-batch B` (sequences per step), or `--min-global-batch` and `--max-global-batch`")
        }
        _ => bail!("give either `--global-batch B` or both `--min-global-batch` and `--max-global-batch` (min <= max)"),
    };
    let serve_batches: Vec<u64> = match a.batch {
        Some(b) if b >= 1 => vec![b as u64],
        Some(b) => bail!("`--batch` = {b} must be a positive integer"),
        None => (0..40).map(|i| 1u64 << i).take_while(|b| *b <= o.max_batch.max(1)).collect(),
    };
    if !(0.0..1.0).contains(&o.min_memory_headroom) {
        bail!("`--min-memory-headroom` = {} must be a fraction in [0, 1)", o.min_memory_headroom);
    }
    let space = Space {
        mode: Some(mode),
        n_gpus,
        tp: positive("tp", a.tp)?,
        pp: positive("pp", a.pp)?,
        dp: positive("dp", a.dp)?,
        cp: positive("cp", a.cp)?,
        ep: positive("ep", a.ep)?,
        vp: positive("vp", a.vp)?,
        zero,
        recompute,
        precision,
        micro_batch: positive("micro-batch", a.micro_batch)?.map(u64::from),
        max_micro_batch: o.max_micro_batch,
        global_batch,
        serve_batches,
        max_vp: o.max_vp,
        max_cp: o.max_cp,
    };
    let constraints = Constraints {
        min_memory_headroom: o.min_memory_headroom,
        max_node_power_w: o.max_node_power_w,
        max_cluster_power_w: o.max_cluster_power_kw.map(|k| k * 1e3),
        max_ttft_s: o.ttft_ms.map(|m| m / 1e3),
        max_tpot_s: o.tpot_ms.map(|m| m / 1e3),
    };
    let objective = objective(o)?;
    let pricing = Pricing { gpu_hour_usd: gpu_hour_price(o, &base.system.name)?, kwh_usd: o.kwh_usd };
    if objective == Objective::Cost && !pricing.priced() {
        bail!("the `cost` objective needs a GPU-hour price\nhint: give `--gpu-hour-usd PRICE` (gpuplan has no built-in prices)");
    }
    Ok(Request { mode, space, constraints, objective, pricing })
}

/// The flags, with the scenario file's global batch and GPU count where no flag gives them (the file's layout
/// is searched over, its batch is the target).
pub fn with_file_batch(a: &ScenarioArgs) -> anyhow::Result<ScenarioArgs> {
    let mut a = a.clone();
    if let Some(p) = &a.scenario {
        let file = crate::config::scenario::read_scenario(p)?;
        if a.global_batch.is_none() {
            a.global_batch = file.workload.global_batch;
        }
        if a.gpus.is_none() {
            a.gpus = file.gpus;
        }
    }
    Ok(a)
}

/// Run the search with a progress bar on a terminal (never with --json, --quiet or --no-progress).
pub fn run_search(base: &Scenario, req: &Request, o: &PlanOptions, quiet_output: bool) -> anyhow::Result<PlanResult> {
    let show = !quiet_output && !o.no_progress && !o.quiet && std::io::stderr().is_terminal();
    let total = plan::count(base, req)?;
    let bar = if show { indicatif::ProgressBar::new(total) } else { indicatif::ProgressBar::hidden() };
    if show {
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} planning [{bar:40}] {pos}/{len} configurations ({per_sec}, eta {eta})")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
    }
    let mut result = plan::search(base, req, &|n| bar.inc(n))?;
    bar.finish_and_clear();
    if let Some(k) = o.rerank_des {
        let des = plan::FnEngine { name: "des", f: |s: &Scenario| crate::sim::simulate(s, &Default::default()).map(|r| r.prediction) };
        plan::rerank(base, req, &mut result, k, &des);
        if !o.quiet {
            eprintln!("the top {} configurations were re-predicted and re-ranked by the discrete-event engine", k.min(result.ranked.len()));
        }
    }
    Ok(result)
}

pub fn run(args: PlanArgs) -> anyhow::Result<Outcome> {
    let mode = plan_mode(&args.scenario)?;
    if mode == PlanMode::Serve && args.serve.qps.is_some() {
        return super::serve::plan_slo(&args);
    }
    let scenario_args = with_file_batch(&args.scenario)?;
    let first_gpus = match (scenario_args.gpus.filter(|_| args.options.min_gpus.is_none()), args.options.min_gpus) {
        (Some(g), _) if g >= 1 => g as u64,
        (_, Some(g)) if g >= 1 => g,
        _ => bail!("give `--gpus N`, or both `--min-gpus` and `--max-gpus`"),
    };
    let base = base_scenario(&args.scenario, mode, first_gpus, None)?;
    let req = request(&scenario_args, &args.options, &base, mode)?;
    let result = run_search(&base, &req, &args.options, args.json)?;
    let shown = if args.top == 0 { result.ranked.len() } else { args.top.min(result.ranked.len()) };

    if args.batch_advice {
        return batch_advice(&args, &base, &req, &result);
    }

    let summary = summary(&base, &req, &result);
    if args.json {
        if !args.options.quiet {
            eprint!("{summary}");
        }
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        for (i, r) in result.ranked[..shown].iter().enumerate() {
            let s = plan::scenario_of(&base, &r.candidate, mode);
            let p = analytic::predict(&s).context("re-predicting a ranked configuration")?;
            let mut v = to_json(&s, &p);
            v["plan"] = plan_json(i + 1, r, &req);
            // A closed pipe (`| head`) ends the stream quietly.
            if writeln!(out, "{}", serde_json::to_string(&v)?).is_err() {
                break;
            }
        }
    } else if args.csv {
        if !args.options.quiet {
            eprint!("{summary}");
        }
        print!("{}", csv(&result.ranked[..shown], &req, &base)?);
    } else {
        if !args.options.quiet {
            print!("{summary}");
        }
        print!("{}", table(&result, shown, &req, &base, args.options.tokens.filter(|_| mode == PlanMode::Train)));
    }
    Ok(if result.ranked.is_empty() { Outcome::Infeasible } else { Outcome::Ok })
}

/// The `plan` object added to each JSON line.
pub fn plan_json(rank: usize, r: &plan::Ranked, req: &Request) -> serde_json::Value {
    let m = &r.metrics;
    serde_json::json!({
        "rank": rank,
        "objective": req.objective.name(),
        "score": r.score,
        "config": r.candidate.label(req.mode),
        "gradient_accumulation": r.candidate.gradient_accumulation(),
        "memory_headroom": m.headroom(),
        "cluster_power_w": m.cluster_power_w,
        "tokens_per_joule": m.tokens_per_joule(),
        "usd_per_million_tokens": m.usd_per_million_tokens,
        "time_to_train_s": req.tokens().map(|t| t / m.tokens_per_s),
        "ttft_s": m.ttft_s,
        "tpot_s": m.tpot_s,
    })
}

fn summary(base: &Scenario, req: &Request, r: &PlanResult) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let gpus = req.space.n_gpus.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
    let what = match req.mode {
        PlanMode::Train => format!("training, seq {}", base.workload.seq),
        PlanMode::Serve => format!("serving, prompt {} / context {}", base.workload.seq, base.workload.kv_len.max(base.workload.seq)),
    };
    let _ = writeln!(
        o,
        "plan: {} on {} x {} ({what}), stack {}, objective {}",
        base.model.name,
        gpus,
        base.system.display_name,
        base.workload.stack.name(),
        req.objective.name()
    );
    let _ = writeln!(o, "  {} configurations: {} pruned, {} predicted, {} feasible", r.enumerated, r.pruned_total(), r.predicted, r.ranked.len());
    for (reason, n) in &r.pruned {
        let _ = writeln!(o, "    {:>9}  {}", n, reason.describe());
    }
    let _ = writeln!(o);
    o
}

fn gib(b: f64) -> f64 {
    b / (1u64 << 30) as f64
}

fn duration(s: f64) -> String {
    if s >= 86400.0 {
        format!("{:.1} d", s / 86400.0)
    } else if s >= 3600.0 {
        format!("{:.1} h", s / 3600.0)
    } else {
        format!("{:.0} s", s)
    }
}

/// The ranked table; `tokens` (from `--tokens`) adds a time-to-train column under any objective.
fn table(r: &PlanResult, shown: usize, req: &Request, base: &Scenario, tokens: Option<f64>) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    if r.ranked.is_empty() {
        let _ = writeln!(o, "no feasible configuration");
        return o;
    }
    let priced = req.pricing.priced();
    let ttt = req.tokens().or(tokens);
    let serve = req.mode == PlanMode::Serve;
    let width = r.ranked[..shown].iter().map(|x| x.candidate.label(req.mode).len()).max().unwrap_or(10).max(6);
    let gpus_col = req.space.n_gpus.len() > 1;
    let mut head = format!("{:>4}  ", "rank");
    if gpus_col {
        let _ = write!(head, "{:>6}  ", "gpus");
    }
    let _ = write!(head, "{:<width$}  {:>12}  {:>6}  {:>18}  {:>7}", "config", "tokens/s", "MFU", "mem/GPU (free)", "W/GPU");
    if serve {
        let _ = write!(head, "  {:>9}  {:>9}", "TTFT", "TPOT");
    }
    if priced {
        let _ = write!(head, "  {:>10}", "$/1M tok");
    }
    let _ = write!(head, "  {:>9}", "tok/J");
    if ttt.is_some() {
        let _ = write!(head, "  {:>9}", "to train");
    }
    let _ = write!(head, "  bottleneck");
    let _ = writeln!(o, "{head}");
    for (i, x) in r.ranked[..shown].iter().enumerate() {
        let m = &x.metrics;
        let mut line = format!("{:>4}  ", i + 1);
        if gpus_col {
            let _ = write!(line, "{:>6}  ", x.candidate.n_gpus);
        }
        let mem = format!("{:.1} GiB ({:.0}%)", gib(m.memory_bytes), 100.0 * m.headroom());
        let _ = write!(line, "{:<width$}  {:>12.0}  {:>5.1}%  {:>18}  {:>7.0}", x.candidate.label(req.mode), m.tokens_per_s, 100.0 * m.mfu, mem, m.gpu_power_w);
        if serve {
            let ms = |v: Option<f64>| v.map_or("-".to_string(), |s| format!("{:.1} ms", s * 1e3));
            let _ = write!(line, "  {:>9}  {:>9}", ms(m.ttft_s), ms(m.tpot_s));
        }
        if priced {
            let _ = write!(line, "  {:>10.4}", m.usd_per_million_tokens.unwrap_or(f64::NAN));
        }
        let _ = write!(line, "  {:>9.2}", m.tokens_per_joule());
        if let Some(t) = ttt {
            let _ = write!(line, "  {:>9}", duration(t / m.tokens_per_s));
        }
        let _ = write!(line, "  {}", m.bottleneck);
        let _ = writeln!(o, "{line}");
    }
    if r.ranked.len() > shown {
        let _ = writeln!(o, "  ... {} more feasible (--top N, --top 0 for all)", r.ranked.len() - shown);
    }
    let front = plan::pareto(&r.ranked, priced);
    let _ = writeln!(o);
    let against = if priced { "$ per 1M tokens" } else { "tokens per joule" };
    let _ = writeln!(o, "Pareto front, tokens/s vs {against} ({} configurations):", front.len());
    for i in front.iter().take(12) {
        let x = &r.ranked[*i];
        let m = &x.metrics;
        let second = if priced { format!("${:.4}/1M tok", m.usd_per_million_tokens.unwrap_or(f64::NAN)) } else { format!("{:.2} tok/J", m.tokens_per_joule()) };
        let gpus = if gpus_col { format!("{:>6} GPUs  ", x.candidate.n_gpus) } else { String::new() };
        let _ = writeln!(o, "  {gpus}{:<width$}  {:>12.0} tok/s  {second}", x.candidate.label(req.mode), m.tokens_per_s);
    }
    if front.len() > 12 {
        let _ = writeln!(o, "  ... {} more on the front", front.len() - 12);
    }
    if !priced {
        let _ = writeln!(o, "(no cost column: give --gpu-hour-usd PRICE; gpuplan has no built-in prices)");
    }
    let _ = base;
    o
}

fn csv(rows: &[plan::Ranked], req: &Request, base: &Scenario) -> anyhow::Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "rank",
        "gpus",
        "tp",
        "pp",
        "vp",
        "dp",
        "cp",
        "ep",
        "zero",
        "recompute",
        "micro_batch",
        "global_batch",
        "gradient_accumulation",
        "precision",
        "step_time_s",
        "tokens_per_s",
        "mfu",
        "memory_bytes_per_gpu",
        "capacity_bytes",
        "memory_headroom",
        "gpu_power_w",
        "node_power_w",
        "cluster_power_w",
        "tokens_per_joule",
        "usd_per_million_tokens",
        "ttft_s",
        "tpot_s",
        "bottleneck",
        "score",
    ])?;
    let opt = |v: Option<f64>| v.map_or(String::new(), |x| x.to_string());
    for (i, r) in rows.iter().enumerate() {
        let c = &r.candidate;
        let m = &r.metrics;
        let (mb, gb) = match req.mode {
            PlanMode::Train => (c.micro_batch, c.global_batch.to_string()),
            PlanMode::Serve => (c.micro_batch, String::new()),
        };
        w.write_record([
            (i + 1).to_string(),
            c.n_gpus.to_string(),
            c.tp.to_string(),
            c.pp.to_string(),
            c.vp.to_string(),
            c.dp.to_string(),
            c.cp.to_string(),
            c.ep.to_string(),
            c.zero.to_string(),
            c.recompute.get().name().to_string(),
            mb.to_string(),
            gb,
            c.gradient_accumulation().to_string(),
            c.precision.get().name().to_string(),
            m.step_time_s.to_string(),
            m.tokens_per_s.to_string(),
            m.mfu.to_string(),
            m.memory_bytes.to_string(),
            m.capacity_bytes.to_string(),
            m.headroom().to_string(),
            m.gpu_power_w.to_string(),
            m.node_power_w.to_string(),
            m.cluster_power_w.to_string(),
            m.tokens_per_joule().to_string(),
            opt(m.usd_per_million_tokens),
            opt(m.ttft_s),
            opt(m.tpot_s),
            m.bottleneck.to_string(),
            r.score.to_string(),
        ])?;
    }
    let _ = base;
    Ok(String::from_utf8(w.into_inner().map_err(|e| anyhow::anyhow!("{e}"))?)?)
}

fn batch_advice(args: &PlanArgs, base: &Scenario, req: &Request, result: &PlanResult) -> anyhow::Result<Outcome> {
    use std::fmt::Write;
    let Some(best) = result.ranked.first() else {
        println!("no feasible configuration: no batch advice");
        return Ok(Outcome::Infeasible);
    };
    let s = plan::scenario_of(base, &best.candidate, req.mode);
    let headroom = req.constraints.min_memory_headroom;
    let mut o = String::new();
    let label = best.candidate.label(req.mode);
    match req.mode {
        PlanMode::Train => {
            let a = advice::train(&s, headroom);
            if args.json {
                let v = serde_json::json!({
                    "schema_version": super::predict::SCHEMA_VERSION,
                    "kind": "batch_advice",
                    "mode": "train",
                    "layout": label,
                    "recompute": s.workload.recompute.name(),
                    "global_batch": s.workload.global_batch,
                    "per_replica_batch": a.per_replica_batch,
                    "largest_fitting_micro_batch": a.largest_fitting,
                    "micro_batch": a.chosen.map(|c| c.0),
                    "gradient_accumulation": a.chosen.map(|c| c.1),
                    "curve": a.curve.iter().map(|p| serde_json::json!({
                        "micro_batch": p.batch, "gradient_accumulation": p.accumulation, "memory_bytes_per_gpu": p.memory_bytes,
                        "fits": p.fits, "tokens_per_s": p.tokens_per_s, "mfu": p.mfu })).collect::<Vec<_>>(),
                });
                println!("{}", serde_json::to_string(&v)?);
                return Ok(if a.chosen.is_some() { Outcome::Ok } else { Outcome::Infeasible });
            }
            let pc = &s.parallel;
            let _ = writeln!(
                o,
                "batch advice: {} on {} x {}, layout tp{} pp{} dp{} cp{} zero{}, recompute {}, global batch {} ({} per replica)",
                s.model.name,
                s.n_gpus,
                s.system.display_name,
                pc.tp,
                pc.pp,
                pc.dp,
                pc.cp,
                pc.zero,
                s.workload.recompute.name(),
                s.workload.global_batch,
                a.per_replica_batch
            );
            match a.largest_fitting {
                Some(l) => {
                    let _ = writeln!(o, "  largest micro-batch that fits: {l}");
                }
                None => {
                    let _ = writeln!(o, "  not even micro-batch 1 fits");
                }
            }
            if let Some((mb, ga)) = a.chosen {
                let _ = writeln!(o, "  use micro-batch {mb} with {ga} accumulation steps ({mb} x {} DP x {ga} = {})", pc.dp, s.workload.global_batch);
            }
            let _ = writeln!(o);
            let _ = writeln!(o, "  {:>11}  {:>5}  {:>10}  {:>5}  {:>12}  {:>6}", "micro-batch", "accum", "mem/GPU", "fits", "tokens/s", "MFU");
            for p in &a.curve {
                let _ = writeln!(
                    o,
                    "  {:>11}  {:>5}  {:>6.1} GiB  {:>5}  {:>12}  {:>6}",
                    p.batch,
                    p.accumulation.map_or("-".into(), |g| g.to_string()),
                    gib(p.memory_bytes),
                    if p.fits { "yes" } else { "no" },
                    p.tokens_per_s.filter(|_| p.fits).map_or("-".into(), |t| format!("{t:.0}")),
                    p.mfu.filter(|_| p.fits).map_or("-".into(), |m| format!("{:.1}%", m * 100.0)),
                );
            }
            print!("{o}");
            Ok(if a.chosen.is_some() { Outcome::Ok } else { Outcome::Infeasible })
        }
        PlanMode::Serve => {
            let a = advice::serve(&s, headroom, args.options.max_batch, req.constraints.max_ttft_s, req.constraints.max_tpot_s);
            if args.json {
                let v = serde_json::json!({
                    "schema_version": super::predict::SCHEMA_VERSION,
                    "kind": "batch_advice",
                    "mode": "serve",
                    "layout": label,
                    "prompt_len": s.workload.seq,
                    "kv_len": s.workload.kv_len,
                    "largest_batch": a.largest,
                    "largest_fitting_batch": a.largest_fitting,
                    "curve": a.curve.iter().map(|p| serde_json::json!({
                        "batch": p.batch, "memory_bytes_per_gpu": p.memory_bytes, "fits": p.fits,
                        "tokens_per_s": p.tokens_per_s, "ttft_s": p.ttft_s, "tpot_s": p.tpot_s })).collect::<Vec<_>>(),
                });
                println!("{}", serde_json::to_string(&v)?);
                return Ok(if a.largest.is_some() { Outcome::Ok } else { Outcome::Infeasible });
            }
            let pc = &s.parallel;
            let _ = writeln!(
                o,
                "batch advice: serving {} on {} x {}, layout tp{} pp{} ({} replicas), {}, prompt {} tokens, decode at {} cached",
                s.model.name,
                s.n_gpus,
                s.system.display_name,
                pc.tp,
                pc.pp,
                pc.dp,
                s.workload.precision.name(),
                s.workload.seq,
                s.workload.kv_len
            );
            let target = |v: Option<f64>| v.map_or("none".to_string(), |t| format!("{:.1} ms", t * 1e3));
            let _ = writeln!(o, "  targets: TTFT {}, TPOT {}", target(req.constraints.max_ttft_s), target(req.constraints.max_tpot_s));
            match a.largest_fitting {
                Some(b) => {
                    let _ = writeln!(o, "  largest batch whose KV cache fits: {b} per replica");
                }
                None => {
                    let _ = writeln!(o, "  not even batch 1 fits");
                }
            }
            match a.largest {
                Some(b) => {
                    let _ = writeln!(o, "  largest batch meeting the targets: {b} per replica");
                }
                None => {
                    let _ = writeln!(o, "  no batch meets the targets");
                }
            }
            let _ = writeln!(o);
            let _ = writeln!(o, "  {:>6}  {:>10}  {:>5}  {:>10}  {:>10}  {:>12}", "batch", "mem/GPU", "fits", "TTFT", "TPOT", "tokens/s");
            let ms = |v: Option<f64>| v.map_or("-".to_string(), |s| format!("{:.2} ms", s * 1e3));
            for p in &a.curve {
                let _ = writeln!(
                    o,
                    "  {:>6}  {:>6.1} GiB  {:>5}  {:>10}  {:>10}  {:>12}",
                    p.batch,
                    gib(p.memory_bytes),
                    if p.fits { "yes" } else { "no" },
                    ms(p.ttft_s),
                    ms(p.tpot_s),
                    p.tokens_per_s.map_or("-".into(), |t| format!("{t:.0}")),
                );
            }
            print!("{o}");
            Ok(if a.largest.is_some() { Outcome::Ok } else { Outcome::Infeasible })
        }
    }
}
