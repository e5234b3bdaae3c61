//! `gpuplan plan`: search parallel layouts and batch knobs, rank them, print a table, JSON Lines or
//! CSV; `--batch-advice` for the micro-batch (training) or serving batch of the best layout.

use std::io::IsTerminal;

use anyhow::{bail, Context};

use super::args::{count_u32, count_u64, headroom, non_negative, positive as positive_f64, ScenarioArgs};
use super::launch::{Asked as LaunchAsked, LaunchArgs};
use super::predict::{to_json, SCHEMA_VERSION};
use super::Outcome;
use crate::analytic;
use crate::config::deploy::cuda_graphs;
use crate::plan::request::{self, Asked};
use crate::plan::{self, advice, PlanMode, PlanResult, Request};
use crate::report::views::plan as view;
use crate::report::views::serve::{slo_json, slo_table, SloQuery};
use crate::scenario::Scenario;
use crate::serve::{arrivals, Lengths, Process, Routing, RunOptions, SchedConfig};

/// Search and output options shared by `plan` and `compare`.
#[derive(clap::Args, Debug, Clone)]
pub struct PlanOptions {
    /// Smallest GPU count to consider (with --max-gpus: a range instead of --gpus)
    #[arg(long, value_parser = count_u64(), allow_negative_numbers = true)]
    pub min_gpus: Option<u64>,
    /// Largest GPU count to consider
    #[arg(long, value_parser = count_u64(), allow_negative_numbers = true)]
    pub max_gpus: Option<u64>,
    /// Tokens to train (time-to-train objective and column), e.g. 15e12
    #[arg(long, value_parser = positive_f64, allow_negative_numbers = true)]
    pub tokens: Option<f64>,
    /// Smallest global batch (sequences) to consider, instead of a fixed --global-batch
    #[arg(long, value_parser = count_u64(), allow_negative_numbers = true)]
    pub min_global_batch: Option<u64>,
    /// Largest global batch (sequences) to consider
    #[arg(long, value_parser = count_u64(), allow_negative_numbers = true)]
    pub max_global_batch: Option<u64>,
    /// throughput, time-to-train, cost, tokens-per-joule, goodput (needs --goodput and its flags)
    #[arg(long, default_value = "throughput")]
    pub objective: String,
    #[command(flatten)]
    pub goodput: super::goodput::GoodputArgs,
    /// Price of one GPU-hour in USD (cost column and objective); `compare` also takes
    /// `system=price,...`. No default: prices are yours
    #[arg(long)]
    pub gpu_hour_usd: Option<String>,
    /// Price of one kWh at the facility in USD (added to the cost; energy includes the PUE)
    #[arg(long, value_parser = non_negative, allow_negative_numbers = true)]
    pub kwh_usd: Option<f64>,
    /// Also try fp8 GEMMs (where the GPU has them)
    #[arg(long)]
    pub allow_fp8: bool,
    /// Also try fp4 GEMMs (where the GPU has them)
    #[arg(long)]
    pub allow_fp4: bool,
    /// Fraction of HBM to keep free (0.1 = use at most 90%)
    #[arg(long, default_value_t = 0.0, value_parser = headroom, allow_negative_numbers = true)]
    pub min_memory_headroom: f64,
    /// Power budget per node in watts (GPUs + host)
    #[arg(long, value_parser = positive_f64, allow_negative_numbers = true)]
    pub max_node_power_w: Option<f64>,
    /// Power budget of the whole job in kilowatts (IT power: GPUs + hosts, no PUE)
    #[arg(long, value_parser = positive_f64, allow_negative_numbers = true)]
    pub max_cluster_power_kw: Option<f64>,
    /// Serving: time-to-first-token target (prefill of one batch), ms
    #[arg(long, value_parser = positive_f64, allow_negative_numbers = true)]
    pub ttft_ms: Option<f64>,
    /// Serving: time-per-output-token target (one decode step), ms
    #[arg(long, value_parser = positive_f64, allow_negative_numbers = true)]
    pub tpot_ms: Option<f64>,
    /// Largest micro-batch to try (training)
    #[arg(long, default_value_t = 64, value_parser = count_u64(), allow_negative_numbers = true)]
    pub max_micro_batch: u64,
    /// Largest batch per replica to try (serving)
    #[arg(long, default_value_t = 512, value_parser = count_u64(), allow_negative_numbers = true)]
    pub max_batch: u64,
    /// Largest virtual-pipeline (interleaving) factor to try
    #[arg(long, default_value_t = 4, value_parser = count_u32(), allow_negative_numbers = true)]
    pub max_vp: u32,
    /// Largest context-parallel size to try
    #[arg(long, default_value_t = 8, value_parser = count_u32(), allow_negative_numbers = true)]
    pub max_cp: u32,
    /// Re-rank the top K with the discrete-event simulator
    #[arg(long, allow_negative_numbers = true)]
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
    #[arg(long, default_value_t = 10, allow_negative_numbers = true)]
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
    /// After the table, the Megatron-LM arguments that launch the top-ranked layout (training)
    #[arg(long)]
    pub megatron_args: bool,
    /// Serving under load (`--mode serve --qps Q`): the request-level simulator checks the targets
    #[command(flatten)]
    pub serve: PlanServeArgs,
    /// Serving: the chosen deployment as TensorRT-LLM / vLLM / SGLang launch configuration
    #[command(flatten)]
    pub launch: LaunchArgs,
    /// Replace existing files under --launch-dir
    #[arg(long)]
    pub force: bool,
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
        lora_rank: a.lora_rank,
        lora_targets: a.lora_targets.clone(),
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
        // The layout and micro batch are searched over, but a file `predict` refuses is refused.
        crate::config::scenario::check_searched_keys(&file, Some(p))?;
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

/// What `a` and `o` ask of the search, as `plan::request` reads it.
fn asked(a: &ScenarioArgs, o: &PlanOptions) -> Asked {
    Asked {
        gpus: a.gpus,
        tp: a.tp,
        pp: a.pp,
        dp: a.dp,
        cp: a.cp,
        ep: a.ep,
        vp: a.vp,
        zero: a.zero,
        micro_batch: a.micro_batch,
        global_batch: a.global_batch,
        batch: a.batch,
        precision: a.precision.clone(),
        recompute: a.recompute.clone(),
        min_gpus: o.min_gpus,
        max_gpus: o.max_gpus,
        min_global_batch: o.min_global_batch,
        max_global_batch: o.max_global_batch,
        allow_fp8: o.allow_fp8,
        allow_fp4: o.allow_fp4,
        max_micro_batch: o.max_micro_batch,
        max_batch: o.max_batch,
        max_vp: o.max_vp,
        max_cp: o.max_cp,
        min_memory_headroom: o.min_memory_headroom,
        max_node_power_w: o.max_node_power_w,
        max_cluster_power_kw: o.max_cluster_power_kw,
        ttft_ms: o.ttft_ms,
        tpot_ms: o.tpot_ms,
        tokens: o.tokens,
        kwh_usd: o.kwh_usd,
        objective: o.objective.clone(),
        gpu_hour_usd: o.gpu_hour_usd.clone(),
        goodput: None,
    }
}

/// `--gpu-hour-usd`: one price, or `system=price,...` (for `compare`).
pub fn gpu_hour_price(o: &PlanOptions, system: &str) -> anyhow::Result<Option<f64>> {
    request::gpu_hour_price(o.gpu_hour_usd.as_deref(), system).map_err(anyhow::Error::msg)
}

/// Build the plan request from the flags.
pub fn request(a: &ScenarioArgs, o: &PlanOptions, base: &Scenario, mode: PlanMode) -> anyhow::Result<Request> {
    let mut asked = asked(a, o);
    if o.goodput.goodput {
        anyhow::ensure!(mode == PlanMode::Train, "`--goodput` applies to training plans\nhint: drop --goodput or use `--mode train`");
        anyhow::ensure!(
            o.objective == "goodput",
            "`--goodput` in a plan ranks by goodput: it needs `--objective goodput` (given: `{}`)\nhint: add `--objective goodput`",
            o.objective
        );
        asked.goodput = Some(crate::config::reliability::build(&o.goodput.flags())?.params);
    }
    request::request(&asked, base, mode).map_err(anyhow::Error::msg)
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
    let launch = args.launch.asked()?;
    if let Some(l) = &launch {
        if mode != PlanMode::Serve {
            bail!("`--launch` and `--launch-dir` write serving launch configuration\nhint: add `--mode serve`");
        }
        l.check_outputs(&[crate::serve::Role::Both], args.force, &[("--scenario", args.scenario.scenario.as_deref())])?;
    } else if args.force {
        bail!("`--force` replaces files under `--launch-dir`, and none is given");
    }
    if mode == PlanMode::Serve && args.serve.qps.is_some() {
        return plan_slo(&args, launch.as_ref());
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

    // The launch configuration of the top-ranked serving layout, as its engines would run it.
    let launched = match (&launch, result.ranked.first()) {
        (Some(l), Some(best)) => Some(l.emit(&analytic_deployment(&base, &best.candidate, &args.serve)?, &base.model.name)?),
        (Some(_), None) => {
            eprintln!("no feasible configuration: no launch configuration");
            None
        }
        _ => None,
    };
    let summary = view::summary(&base, &req, &result);
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
            v["plan"] = view::plan_json(i + 1, r, &req);
            if let (0, Some((_, launch))) = (i, &launched) {
                v["launch"] = launch.clone();
            }
            // A closed pipe (`| head`) ends the stream quietly.
            if writeln!(out, "{}", serde_json::to_string(&v)?).is_err() {
                break;
            }
        }
    } else if args.csv {
        if !args.options.quiet {
            eprint!("{summary}");
        }
        print!("{}", view::csv(&result.ranked[..shown], &req, &base)?);
    } else {
        if !args.options.quiet {
            print!("{summary}");
        }
        print!("{}", view::table(&result, shown, &req, &base, args.options.tokens.filter(|_| mode == PlanMode::Train)));
        if let (true, PlanMode::Train, Some(best)) = (args.megatron_args, mode, result.ranked.first()) {
            let s = plan::scenario_of(&base, &best.candidate, mode);
            println!("\nmegatron-lm args (rank 1): {}", crate::config::megatron::args_line(&s));
        }
        if let (Some((text, _)), Some(best)) = (&launched, result.ranked.first()) {
            if !text.is_empty() {
                print!("\nlaunch configuration of rank 1 ({}):\n{text}", best.candidate.label(mode));
            }
        }
    }
    Ok(if result.ranked.is_empty() { Outcome::Infeasible } else { Outcome::Ok })
}

pub use crate::report::views::plan::plan_json;

/// The serving deployment of an analytic plan's candidate: `dp` colocated replicas of one
/// tp x pp (x cp) group, each running `micro_batch` sequences at most, with `plan`'s serving
/// scheduler knobs (`--token-budget`, `--cuda-graphs`). Where an MoE layout's expert-parallel
/// group (ep x etp) spans data-parallel replicas, those replicas form one instance (the pool's
/// `dp`: attention data parallelism around expert-parallel MoE).
fn analytic_deployment(base: &Scenario, c: &plan::Candidate, v: &PlanServeArgs) -> anyhow::Result<crate::serve::Deployment> {
    use crate::serve::{Deployment, Pool, Role};
    let mut s = plan::scenario_of(base, c, PlanMode::Serve);
    let pc = &s.parallel;
    let expert_span = pc.ep as u64 * pc.etp as u64;
    let attention_dp = if expert_span > pc.tp as u64 { (expert_span / pc.tp.max(1) as u64).clamp(1, pc.dp.max(1) as u64) as u32 } else { 1 };
    let replicas = s.parallel.dp / attention_dp;
    s.parallel.dp = attention_dp;
    s.workload.attention_dp = (attention_dp > 1).then_some(attention_dp as u64 * c.micro_batch.max(1));
    s.n_gpus = s.parallel.tp as u64 * s.parallel.pp as u64 * s.parallel.cp as u64 * attention_dp as u64;
    let max_batch = u32::try_from(c.micro_batch.max(1)).unwrap_or(u32::MAX);
    let sched = SchedConfig {
        max_batch,
        token_budget: v.token_budget,
        cuda_graphs: cuda_graphs("--cuda-graphs", v.cuda_graphs.as_deref(), None, None)?,
        ..SchedConfig::default()
    };
    Ok(Deployment { pools: vec![Pool { role: Role::Both, scenario: s, n_replicas: replicas, sched }], routing: Routing::LeastLoaded })
}

fn batch_advice(args: &PlanArgs, base: &Scenario, req: &Request, result: &PlanResult) -> anyhow::Result<Outcome> {
    let Some(best) = result.ranked.first() else {
        println!("no feasible configuration: no batch advice");
        return Ok(Outcome::Infeasible);
    };
    let s = plan::scenario_of(base, &best.candidate, req.mode);
    let headroom = req.constraints.min_memory_headroom;
    let label = best.candidate.label(req.mode);
    let (found, json, text) = match req.mode {
        PlanMode::Train => {
            let a = advice::train(&s, headroom);
            (a.chosen.is_some(), args.json.then(|| view::advice_train_json(SCHEMA_VERSION, &s, &label, &a)), view::advice_train_table(&s, &a))
        }
        PlanMode::Serve => {
            let a = advice::serve(&s, headroom, args.options.max_batch, req.constraints.max_ttft_s, req.constraints.max_tpot_s);
            (a.largest.is_some(), args.json.then(|| view::advice_serve_json(SCHEMA_VERSION, &s, &label, &a)), view::advice_serve_table(&s, req, &a))
        }
    };
    match json {
        Some(v) => println!("{}", serde_json::to_string(&v)?),
        None => print!("{text}"),
    }
    Ok(if found { Outcome::Ok } else { Outcome::Infeasible })
}

/// `plan --mode serve --qps Q`: flags of the load the SLO search simulates.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct PlanServeArgs {
    /// Serving: requests per second the deployment must sustain (turns on the request-level search)
    #[arg(long, value_parser = positive_f64, allow_negative_numbers = true)]
    pub qps: Option<f64>,
    /// Serving: seconds of Poisson arrivals per simulated configuration
    #[arg(long, default_value_t = 120.0, value_parser = positive_f64, allow_negative_numbers = true)]
    pub duration_s: f64,
    /// Serving: prompt lengths (N, uniform:LO:HI, lognormal:MEAN or lognormal:MEAN:SIGMA; default: --seq)
    #[arg(long)]
    pub input_len: Option<String>,
    /// Serving: output lengths (N, uniform:LO:HI, lognormal:MEAN or lognormal:MEAN:SIGMA)
    #[arg(long)]
    pub output_len: Option<String>,
    /// Serving: seed of the request stream
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub seed: u64,
    /// Serving: percentile the TTFT and TPOT targets apply to (50, 90, 95, 99)
    #[arg(long, default_value_t = 99.0)]
    pub slo_percentile: f64,
    /// Serving: most tokens per iteration per replica
    #[arg(long, default_value_t = 8192, value_parser = count_u32(), allow_negative_numbers = true)]
    pub token_budget: u32,
    /// Serving: the engine replays CUDA graphs (as `serve --cuda-graphs`: decode, the default
    /// value, for decode-only iterations; full, prefill graphs too), with the stack's graph terms
    #[arg(long, value_name = "decode|full", num_args = 0..=1, default_missing_value = "decode")]
    pub cuda_graphs: Option<String>,
}

/// The cheapest deployment (GPUs, TP, max batch) meeting `--ttft-ms` / `--tpot-ms` at `--qps`,
/// each configuration checked by `serve::simulate` on the same request stream.
fn plan_slo(args: &PlanArgs, launch: Option<&LaunchAsked>) -> anyhow::Result<Outcome> {
    use crate::serve::plan::{deployment_of, search, ServeSpace, Slo};
    use std::io::Write;
    let (a, o, v) = (&args.scenario, &args.options, &args.serve);
    let qps = v.qps.context("`--qps` is required")?;
    if !(qps > 0.0 && qps.is_finite()) {
        bail!("`--qps` = {qps} must be positive");
    }
    if ![50.0, 90.0, 95.0, 99.0].contains(&v.slo_percentile) {
        bail!("`--slo-percentile` = {} is not one of 50, 90, 95, 99", v.slo_percentile);
    }
    if o.ttft_ms.is_none() && o.tpot_ms.is_none() {
        bail!("give `--ttft-ms` and/or `--tpot-ms` (the latency targets)");
    }
    let first = match (a.gpus.filter(|_| o.min_gpus.is_none()), o.min_gpus) {
        (Some(g), _) if g >= 1 => g as u64,
        (_, Some(g)) if g >= 1 => g,
        _ => bail!("give `--gpus N`, or both `--min-gpus` and `--max-gpus`"),
    };
    // The base scenario carries model, system, precision and stack; the layout is searched.
    let mut sa = a.clone();
    sa.kv_len = sa.kv_len.or(Some(1));
    sa.gpus = Some(first as i64);
    sa.tp = None;
    let mut base = base_scenario(&sa, crate::plan::PlanMode::Serve, first, None)?;
    if let Some(p) = &a.precision {
        base.workload.precision = crate::hardware::Dtype::parse(p).with_context(|| format!("`--precision` = `{p}` is not known"))?;
    }
    let gpus = request::gpu_counts(a.gpus, o.min_gpus, o.max_gpus, base.system.gpus_per_node as u64).map_err(anyhow::Error::msg)?;
    let domain = base.system.nvlink_domain_size as u64;
    let tp: Vec<u32> = match a.tp {
        Some(t) if t >= 1 => vec![t as u32],
        Some(t) => bail!("`--tp` = {t} must be a positive integer"),
        None => (0..8).map(|i| 1u32 << i).filter(|t| (*t as u64) <= domain).collect(),
    };
    let max_batch: Vec<u32> = match a.batch {
        Some(b) if b >= 1 => vec![b as u32],
        Some(b) => bail!("`--batch` = {b} must be a positive integer"),
        None => (0..20).map(|i| 1u32 << i).filter(|b| *b as u64 <= o.max_batch.max(1)).collect(),
    };
    let input = match (&v.input_len, a.seq) {
        (Some(s), _) => Lengths::parse(s).map_err(|e| anyhow::anyhow!("`--input-len`: {e}"))?,
        (None, Some(s)) if s >= 1 => Lengths::Fixed(s as u32),
        _ => bail!("give `--input-len` (or `--seq`) for the prompts"),
    };
    let output =
        Lengths::parse(v.output_len.as_deref().context("give `--output-len` for the generated tokens")?).map_err(|e| anyhow::anyhow!("`--output-len`: {e}"))?;
    let max_len = base.model.max_seq_len.min(u32::MAX as u64) as u32;
    if crate::limits::serve::Work::generated(qps, v.duration_s, output.mean().min(max_len as f64), 1).exceeded(false).is_some() {
        bail!(
            "`--qps` = {qps} for `--duration-s` = {} s at {:.0} output tokens a request is more than a serving run's limits ({} requests, {:.0e} output tokens)\nhint: lower `--qps` or `--duration-s`; see README.md \"Limits\"",
            v.duration_s,
            output.mean(),
            crate::limits::serve::MAX_REQUESTS,
            crate::limits::serve::MAX_OUTPUT_TOKENS
        );
    }
    let arrivals = arrivals::generate(&Process::Poisson { qps }, input, output, v.duration_s, v.seed, max_len);
    let space = ServeSpace {
        n_gpus: gpus,
        tp,
        max_batch,
        sched: {
            // The stack's serving defaults (an engine's limits, KV sizing, scheduler and graphs).
            let d = SchedConfig::for_stack(base.workload.stack);
            let graphs = match v.cuda_graphs.as_deref() {
                None => d.cuda_graphs,
                given => cuda_graphs("--cuda-graphs", given, None, None)?
                    .map(|g| crate::serve::CudaGraphs { max_batch: d.cuda_graphs.map_or(u32::MAX, |x| x.max_batch), ..g }),
            };
            SchedConfig { token_budget: v.token_budget, cuda_graphs: graphs, ..d }
        },
        routing: Routing::LeastLoaded,
    };
    let slo = Slo { ttft_s: o.ttft_ms.map(|m| m / 1e3), tpot_s: o.tpot_ms.map(|m| m / 1e3), percentile: v.slo_percentile };
    // Overloaded configurations would queue without end: stop them a duration after the last arrival.
    let opts = RunOptions {
        bin_s: v.duration_s.max(1.0),
        drain_s: v.duration_s,
        record_iterations: false,
        seed: 0,
        frontend_s: 0.0,
        max_concurrency: None,
        every_iteration: false,
    };
    let results = search(&base, &space, &arrivals, &slo, &opts);
    let feasible = results.iter().filter(|r| r.outcome.is_ok()).count();
    let shown = if args.top == 0 { results.len() } else { args.top.min(results.len()) };
    let (input, output) = (input.spec(), output.spec());
    let q = SloQuery {
        model: &base.model.name,
        system: &base.system.display_name,
        qps,
        duration_s: v.duration_s,
        input: &input,
        output: &output,
        slo: &slo,
        ttft_ms: o.ttft_ms,
        tpot_ms: o.tpot_ms,
        gpu_hour_usd: gpu_hour_price(o, &base.system.name)?,
    };
    // The launch configuration of the cheapest deployment that meets the targets.
    let chosen = results.first().filter(|r| r.outcome.is_ok());
    let launched = match (launch, chosen) {
        (Some(l), Some(r)) => Some(l.emit(&deployment_of(&base, &r.candidate, &space), &base.model.name)?),
        (Some(_), None) => {
            eprintln!("no deployment meets the targets: no launch configuration");
            None
        }
        _ => None,
    };
    if args.json {
        let mut out = std::io::stdout().lock();
        for (i, r) in results[..shown].iter().enumerate() {
            let mut v = slo_json(i + 1, r, &q);
            if let (0, Some((_, launch))) = (i, &launched) {
                v["launch"] = launch.clone();
            }
            if writeln!(out, "{}", serde_json::to_string(&v)?).is_err() {
                break;
            }
        }
    } else {
        print!("{}", slo_table(&results, shown, &q));
        if let (Some((text, _)), Some(r)) = (&launched, chosen) {
            if !text.is_empty() {
                print!("\nlaunch configuration of the chosen deployment ({}):\n{text}", r.candidate.label());
            }
        }
    }
    Ok(if feasible == 0 { Outcome::Infeasible } else { Outcome::Ok })
}
