//! `gpuplan simulate`: the discrete-event engine on the same inputs as `predict`.

use std::path::PathBuf;

use anyhow::Context;

use super::args::ScenarioArgs;
use super::{predict, write_atomic, Outcome};
use crate::config::prediction::{HeldBackDoc, PerRankDoc, StepDoc, StepTimesDoc, StragglersDoc};
use crate::sim::per_rank::{simulate_per_rank, PerRankError, PerRankOptions, PerRankResult, Persistence};
use crate::sim::ranks::{LinkFault, LinkTarget, RankFaults};
use crate::sim::{self, Faults, SimOptions};

#[derive(clap::Args, Debug)]
pub struct SimulateArgs {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// Print one JSON object instead of the table
    #[arg(long)]
    pub json: bool,
    /// Write a Chrome trace (open in Perfetto or chrome://tracing)
    #[arg(long, conflicts_with = "per_rank")]
    pub trace: Option<PathBuf>,
    /// Draw a Gantt timeline of the step (.png or .svg)
    #[arg(long, conflicts_with = "per_rank")]
    pub timeline: Option<PathBuf>,
    /// Overwrite existing --trace / --timeline files
    #[arg(long)]
    pub force: bool,
    /// Throttled GPU: STAGE=FACTOR, e.g. `3=0.8` runs stage 3 at 80% speed; with --per-rank
    /// RANK=FACTOR, one GPU (repeatable)
    #[arg(long = "slow-gpu", value_parser = parse_stage_factor)]
    pub slow_gpu: Vec<(u32, f64)>,
    /// Degraded NVLink: STAGE=FACTOR of its bandwidth (repeatable)
    #[arg(long = "degrade-nvlink", value_parser = parse_stage_factor, conflicts_with = "per_rank")]
    pub degrade_nvlink: Vec<(u32, f64)>,
    /// Degraded or failed NIC share: STAGE=FACTOR of its bandwidth (repeatable)
    #[arg(long = "degrade-nic", value_parser = parse_stage_factor, conflicts_with = "per_rank")]
    pub degrade_nic: Vec<(u32, f64)>,
    /// Congested spine: all scale-out bandwidth times FACTOR
    #[arg(long = "spine-factor", conflicts_with = "per_rank")]
    pub spine_factor: Option<f64>,
    #[command(flatten)]
    pub goodput: super::goodput::GoodputArgs,
    /// Simulate every rank (in classes of ranks that behave alike), with faults on single
    /// ranks, links and switches and the step-time distribution over --steps
    #[arg(long = "per-rank", conflicts_with = "goodput")]
    pub per_rank: bool,
    /// With --per-rank, a degraded link or switch: TARGET=FACTOR of its bandwidth, TARGET one of
    /// `rank:R:nvlink`, `rank:R:nic`, `node:N:nic:K`, `rail:K` (leaf switch of rail K),
    /// `domain:D:nvswitch`, `su:S:rail:K:uplink` (the spine links of the leaf of rail K in scalable
    /// unit S), `spine` (every leaf's uplinks) (repeatable)
    #[arg(long = "degrade-link", value_parser = parse_link_fault, requires = "per_rank")]
    pub degrade_link: Vec<LinkFault>,
    /// With --per-rank, a failed NIC: RANK's NIC is down and its traffic moves to the next NIC of
    /// the node, which then carries both at half rate each (repeatable)
    #[arg(long = "fail-nic", requires = "per_rank")]
    pub fail_nic: Vec<u64>,
    /// With --per-rank, K=FACTOR: K GPUs drawn at random (uniformly, without replacement, from
    /// --seed) compute at FACTOR of their speed; a fresh draw in each of --steps
    #[arg(long, value_parser = parse_stragglers, requires = "per_rank")]
    pub stragglers: Option<(u64, f64)>,
    /// With --per-rank, how long a straggler stays slow: `step` (a fresh draw each step), `job`
    /// (one draw, the same GPUs slow in every step) or D, a mean lifetime in steps (geometric:
    /// after each step a straggler recovers with probability 1/D and a GPU drawn uniformly from
    /// the others takes its place)
    #[arg(long = "straggler-persistence", default_value = "step", value_parser = parse_persistence, requires = "stragglers")]
    pub straggler_persistence: Persistence,
    /// With --per-rank, steps to simulate (the step-time distribution)
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=crate::limits::sim::MAX_PER_RANK_STEPS as i64), requires = "per_rank")]
    pub steps: u32,
    /// With --per-rank, the seed of the straggler draws
    #[arg(long, default_value_t = 0, requires = "per_rank")]
    pub seed: u64,
    /// With --per-rank, N nodes per leaf switch on a rail (a scalable unit) instead of the system
    /// file's `fabric.nodes_per_leaf` (a what-if, or a system whose file gives none)
    #[arg(long = "nodes-per-leaf", requires = "per_rank")]
    pub nodes_per_leaf: Option<u32>,
    /// With --per-rank, turn NCCL's PXN off (as `NCCL_PXN_DISABLE=1`): each GPU sends through its
    /// own NIC, so traffic between rails crosses the spines. By default (NCCL >= 2.12) it moves
    /// over NVLink to the GPU on the destination's rail and leaves through that GPU's NIC
    #[arg(long = "no-pxn", requires = "per_rank")]
    pub no_pxn: bool,
}

fn parse_factor(b: &str, what: &str) -> Result<f64, String> {
    let f = b.trim().parse::<f64>().map_err(|_| format!("factor `{b}` is not a number (e.g. `{what}`)"))?;
    if !(f > 0.0 && f <= 1.0) {
        return Err(format!("factor `{f}` must be in (0, 1]"));
    }
    Ok(f)
}

/// `TARGET=FACTOR` of `--degrade-link`.
fn parse_link_fault(s: &str) -> Result<LinkFault, String> {
    const FORMS: &str = "`rank:R:nvlink`, `rank:R:nic`, `node:N:nic:K`, `rail:K`, `domain:D:nvswitch`, `su:S:rail:K:uplink` or `spine`";
    let (t, f) = s.split_once('=').ok_or_else(|| format!("`{s}` is not TARGET=FACTOR (e.g. `rank:12:nic=0.5`); TARGET is {FORMS}"))?;
    let factor = parse_factor(f, "rank:12:nic=0.5")?;
    let num = |x: &str| x.parse::<u64>().map_err(|_| format!("`{x}` in `{t}` is not a number"));
    let parts: Vec<&str> = t.trim().split(':').collect();
    let target = match parts.as_slice() {
        ["rank", r, "nvlink"] => LinkTarget::RankNvlink(num(r)?),
        ["rank", r, "nic"] => LinkTarget::RankNic(num(r)?),
        ["node", n, "nic", k] => LinkTarget::NodeNic { node: num(n)?, nic: u32::try_from(num(k)?).map_err(|_| format!("NIC `{k}` is too large"))? },
        ["rail", k] => LinkTarget::Rail(u32::try_from(num(k)?).map_err(|_| format!("rail `{k}` is too large"))?),
        ["domain", d, "nvswitch"] => LinkTarget::Nvswitch(num(d)?),
        ["su", u, "rail", k, "uplink"] => LinkTarget::Uplink { su: num(u)?, rail: u32::try_from(num(k)?).map_err(|_| format!("rail `{k}` is too large"))? },
        ["spine"] => LinkTarget::Spine,
        _ => return Err(format!("`{t}` is not a link: TARGET is {FORMS}")),
    };
    Ok(LinkFault { target, factor })
}

/// `K=FACTOR` of `--stragglers`.
pub(super) fn parse_stragglers(s: &str) -> Result<(u64, f64), String> {
    let (a, b) = s.split_once('=').ok_or_else(|| format!("`{s}` is not K=FACTOR (e.g. `4=0.8`)"))?;
    let k = a.trim().parse::<u64>().map_err(|_| format!("count `{a}` is not a number"))?;
    Ok((k, parse_factor(b, "4=0.8")?))
}

/// `step`, `job` or a mean lifetime in steps, of `--straggler-persistence`.
pub(super) fn parse_persistence(s: &str) -> Result<Persistence, String> {
    match s.trim() {
        "step" => Ok(Persistence::Step),
        "job" => Ok(Persistence::Job),
        t => match t.parse::<f64>() {
            Ok(m) if m.is_finite() && m >= 1.0 => Ok(Persistence::MeanSteps(m)),
            Ok(m) => Err(format!("a mean lifetime of `{m}` steps is not at least 1 (e.g. `20`)")),
            Err(_) => Err(format!("`{t}` is not `step`, `job` or a mean lifetime in steps (e.g. `20`)")),
        },
    }
}

/// The name of a persistence as the flag takes it.
pub(super) fn persistence_name(p: Persistence) -> String {
    match p {
        Persistence::Step => "step".into(),
        Persistence::Job => "job".into(),
        Persistence::MeanSteps(m) => m.to_string(),
    }
}

fn parse_stage_factor(s: &str) -> Result<(u32, f64), String> {
    let (a, b) = s.split_once('=').ok_or_else(|| format!("`{s}` is not STAGE=FACTOR (RANK=FACTOR with --per-rank; e.g. `3=0.8`)"))?;
    let stage = a.trim().parse::<u32>().map_err(|_| format!("stage (or with --per-rank, rank) `{a}` is not a number"))?;
    let f = b.trim().parse::<f64>().map_err(|_| format!("factor `{b}` is not a number"))?;
    if !(f > 0.0 && f <= 1.0) {
        return Err(format!("factor `{f}` must be in (0, 1]"));
    }
    Ok((stage, f))
}

pub fn run(args: SimulateArgs) -> anyhow::Result<Outcome> {
    let scenario = args.scenario.build()?;
    let goodput = args.goodput.setup(&scenario)?;
    let origin = args.scenario.scenario.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "command line".into());
    if args.per_rank {
        return per_rank(args, &scenario, &origin);
    }
    if let Some(f) = args.spine_factor {
        anyhow::ensure!(f > 0.0 && f <= 1.0, "`--spine-factor` = `{f}` must be in (0, 1]");
    }
    for (stage, _) in args.slow_gpu.iter().chain(&args.degrade_nvlink).chain(&args.degrade_nic) {
        anyhow::ensure!(*stage < scenario.parallel.pp, "stage `{stage}` does not exist: the pipeline has stages 0..{}", scenario.parallel.pp);
    }
    super::check_chart_path("--timeline", args.timeline.as_deref())?;
    super::check_outputs(args.force, &[("--trace", args.trace.as_deref()), ("--timeline", args.timeline.as_deref())], &args.scenario.input_files())?;
    let opts = SimOptions {
        faults: Faults { slow_gpu: args.slow_gpu, nvlink: args.degrade_nvlink, nic: args.degrade_nic, spine: args.spine_factor },
        trace: args.trace.is_some() || args.timeline.is_some(),
    };
    let result = simulate_with_bar(&scenario, &opts).with_context(|| format!("{origin}: configuration cannot run"))?;
    if let Some(p) = &args.trace {
        let text = serde_json::to_string(&sim::trace::chrome_trace(&result, &scenario.name))?;
        write_atomic(p, text.as_bytes())?;
        eprintln!("wrote {} ({} spans)", p.display(), result.spans.len());
    }
    if let Some(p) = &args.timeline {
        super::write_atomic_with(p, |tmp| sim::timeline::draw(&result, &scenario.name, tmp))?;
        eprintln!("wrote {}", p.display());
    }
    let pred = &result.prediction;
    let goodput = goodput.map(|g| super::goodput::document(&scenario, pred.tokens_per_s, &g));
    if args.json {
        let mut v = predict::to_json(&scenario, pred);
        v["engine"] = "des".into();
        v["des"] = serde_json::json!({
            "events": result.events,
            "bubble_fraction": result.bubble_fraction,
            "wire_bytes": result.wire_bytes,
            "utilization": result.utilization.iter().map(|u| serde_json::json!({
                "stage": u.stage, "compute": u.compute, "bubble": u.bubble, "nvlink": u.nvlink, "nic": u.nic,
            })).collect::<Vec<_>>(),
        });
        if let Some(g) = &goodput {
            v["goodput"] = serde_json::to_value(g)?;
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", predict::table(&scenario, pred, false));
        println!();
        println!("  discrete-event engine: {} events, bubble {:.1}% of the critical stage", result.events, result.bubble_fraction * 100.0);
        println!("  stage  compute  bubble  nvlink   nic");
        for u in &result.utilization {
            println!("  {:>5}  {:>6.1}%  {:>5.1}%  {:>5.1}%  {:>4.1}%", u.stage, u.compute * 100.0, u.bubble * 100.0, u.nvlink * 100.0, u.nic * 100.0);
        }
        if let Some(g) = &goodput {
            print!("{}", super::goodput::table(g));
        }
    }
    Ok(if pred.memory.fits() { Outcome::Ok } else { Outcome::Infeasible })
}

/// Run the engine with a progress bar over its estimated events on stderr, when stderr is a
/// terminal.
fn simulate_with_bar(scenario: &crate::scenario::Scenario, opts: &SimOptions) -> Result<sim::SimResult, crate::analytic::PredictError> {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return sim::simulate(scenario, opts);
    }
    let bar = indicatif::ProgressBar::new(sim::estimated_events(scenario)? as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} simulating [{bar:40}] {human_pos}/{human_len} events (estimated; {per_sec}, eta {eta})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let result = sim::simulate_with_progress(scenario, opts, &mut |n| bar.inc(n));
    bar.finish_and_clear();
    result
}

/// `simulate --per-rank`: the per-rank engine over `--steps` steps.
fn per_rank(args: SimulateArgs, scenario: &crate::scenario::Scenario, origin: &str) -> anyhow::Result<Outcome> {
    let opts = PerRankOptions {
        faults: RankFaults { slow_gpu: args.slow_gpu.iter().map(|&(r, f)| (r as u64, f)).collect(), links: args.degrade_link, fail_nic: args.fail_nic },
        stragglers: args.stragglers,
        persistence: args.straggler_persistence,
        steps: args.steps,
        seed: args.seed,
        nodes_per_leaf: args.nodes_per_leaf,
        no_pxn: args.no_pxn,
        ungrouped: false,
    };
    let result = match simulate_per_rank(scenario, &opts) {
        Ok(r) => r,
        Err(PerRankError::Fault(e)) => return Err(anyhow::Error::new(e)),
        Err(PerRankError::Predict(e)) => return Err(anyhow::Error::new(e).context(format!("{origin}: configuration cannot run"))),
    };
    let pred = &result.prediction;
    if args.json {
        let mut v = predict::to_json(scenario, pred);
        v["engine"] = "des-per-rank".into();
        v["per_rank"] = serde_json::to_value(per_rank_doc(&result, &opts))?;
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", predict::table(scenario, pred, false));
        println!();
        print!("{}", per_rank_text(&result, &opts));
    }
    Ok(if pred.memory.fits() { Outcome::Ok } else { Outcome::Infeasible })
}

fn factors(h: &sim::per_rank::HeldBack) -> String {
    let mut parts = Vec::new();
    if h.compute != 1.0 {
        parts.push(format!("compute x{}", h.compute));
    }
    if h.nvlink != 1.0 {
        parts.push(format!("nvlink x{}", h.nvlink));
    }
    if h.nic != 1.0 {
        parts.push(format!("nic x{}", h.nic));
    }
    if h.uplink != 1.0 {
        parts.push(format!("leaf uplinks x{}", h.uplink));
    }
    parts.join(", ")
}

/// Culprits over the steps: (rank, factors) -> (steps it held back, summed wait, summed link delay).
fn culprits(r: &PerRankResult) -> Vec<(u64, u64, String, u32, f64, f64)> {
    let mut out: Vec<(u64, u64, String, u32, f64, f64)> = Vec::new();
    for h in r.steps.iter().filter_map(|s| s.held_back.as_ref()) {
        let what = factors(h);
        match out.iter_mut().find(|c| c.0 == h.rank && c.2 == what) {
            Some(c) => {
                c.3 += 1;
                c.4 += h.waited_for.value();
                c.5 += h.link_delay.value();
            }
            None => out.push((h.rank, h.ranks, what, 1, h.waited_for.value(), h.link_delay.value())),
        }
    }
    out.sort_by(|a, b| b.3.cmp(&a.3).then(a.0.cmp(&b.0)));
    out
}

/// The `/per_rank` document of a per-rank run.
pub(super) fn per_rank_doc(r: &PerRankResult, o: &PerRankOptions) -> PerRankDoc {
    let d = &r.distribution;
    PerRankDoc {
        ranks: r.n_ranks,
        steps: r.steps.len() as u64,
        seed: o.seed,
        stragglers: o.stragglers.map(|(k, f)| StragglersDoc {
            count: k,
            factor: f,
            persistence: persistence_name(o.persistence),
            distribution: o.persistence.describe(),
        }),
        fault_free_step_time_s: r.fault_free.value(),
        step_time_s: StepTimesDoc { mean: d.mean.value(), p50: d.p50.value(), p90: d.p90.value(), p99: d.p99.value(), max: d.max.value() },
        nodes_per_leaf: r.nodes_per_leaf,
        pxn: r.pxn,
        held_back: culprits(r)
            .into_iter()
            .map(|c| HeldBackDoc {
                rank: c.0,
                ranks_alike: c.1,
                fault: c.2,
                steps: c.3,
                mean_waited_for_s: c.4 / c.3 as f64,
                mean_link_delay_s: c.5 / c.3 as f64,
            })
            .collect(),
        per_step: r
            .steps
            .iter()
            .map(|s| StepDoc {
                step_time_s: s.step_time.value(),
                classes: s.classes as u64,
                events: s.events,
                stragglers: s.stragglers.clone(),
                held_back_by: s.held_back.as_ref().map(|h| h.rank),
            })
            .collect(),
    }
}

fn per_rank_text(r: &PerRankResult, o: &PerRankOptions) -> String {
    use std::fmt::Write;
    let mut t = String::new();
    let d = &r.distribution;
    let classes: Vec<usize> = r.steps.iter().map(|s| s.classes).collect();
    let (lo, hi) = (classes.iter().min().copied().unwrap_or(0), classes.iter().max().copied().unwrap_or(0));
    let events: u64 = r.steps.iter().map(|s| s.events).sum();
    let classes = if lo == hi { lo.to_string() } else { format!("{lo}..{hi}") };
    let _ = writeln!(t, "  per-rank engine: {} ranks in {classes} classes of ranks that behave alike, {} step(s), {events} events", r.n_ranks, r.steps.len());
    let _ = match r.nodes_per_leaf {
        Some(n) => writeln!(t, "  leaf switches: {n} nodes per leaf on a rail; groups that span leaves share their uplinks to the spines"),
        None => writeln!(t, "  leaf switches: no leaf size (`fabric.nodes_per_leaf` or --nodes-per-leaf), so no shared uplinks; `spine` scales every NIC"),
    };
    let _ = if r.pxn {
        writeln!(
            t,
            "  PXN: on (NCCL default): traffic between rails moves over NVLink to the rail-local GPU and its NIC, off the spines (--no-pxn to turn off)"
        )
    } else {
        writeln!(t, "  PXN: off (--no-pxn): each GPU sends through its own NIC; traffic between rails crosses the spines")
    };
    if let Some((k, f)) = o.stragglers {
        let _ = writeln!(t, "  stragglers: {k} GPU(s) at {f}x compute, {} (seed {})", o.persistence.describe(), o.seed);
    }
    let ms = |s: crate::units::Seconds| s.value() * 1e3;
    let _ = writeln!(
        t,
        "  step time (ms): mean {:.3}  p50 {:.3}  p90 {:.3}  p99 {:.3}  max {:.3}   (no fault: {:.3})",
        ms(d.mean),
        ms(d.p50),
        ms(d.p90),
        ms(d.p99),
        ms(d.max),
        ms(r.fault_free)
    );
    let c = culprits(r);
    if c.is_empty() {
        let _ = writeln!(t, "  held back by: no faulted rank kept a collective waiting");
    } else {
        let _ = writeln!(t, "  held back by (the faulted rank others waited for most, per step):");
        for (rank, alike, what, steps, wait, link) in c.iter().take(10) {
            let also = if *alike > 1 { format!(" (one of {alike} ranks faulted and placed alike)") } else { String::new() };
            let _ = writeln!(
                t,
                "    rank {rank}{also} [{what}]: {steps} of {} steps; waited for {:.3} ms, links added {:.3} ms per step",
                r.steps.len(),
                wait / *steps as f64 * 1e3,
                link / *steps as f64 * 1e3
            );
        }
    }
    t
}
