//! `gpuplan simulate`: the discrete-event engine on the same inputs as `predict`.

use std::path::PathBuf;

use anyhow::Context;

use super::args::ScenarioArgs;
use super::{predict, write_atomic, Outcome};
use crate::sim::{self, Faults, SimOptions};

#[derive(clap::Args, Debug)]
pub struct SimulateArgs {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// Print one JSON object instead of the table
    #[arg(long)]
    pub json: bool,
    /// Write a Chrome trace (open in Perfetto or chrome://tracing)
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Draw a Gantt timeline of the step (.png or .svg)
    #[arg(long)]
    pub timeline: Option<PathBuf>,
    /// Overwrite existing --trace / --timeline files
    #[arg(long)]
    pub force: bool,
    /// Throttled GPU: STAGE=FACTOR, e.g. `3=0.8` runs stage 3 at 80% speed (repeatable)
    #[arg(long = "slow-gpu", value_parser = parse_stage_factor)]
    pub slow_gpu: Vec<(u32, f64)>,
    /// Degraded NVLink: STAGE=FACTOR of its bandwidth (repeatable)
    #[arg(long = "degrade-nvlink", value_parser = parse_stage_factor)]
    pub degrade_nvlink: Vec<(u32, f64)>,
    /// Degraded or failed NIC share: STAGE=FACTOR of its bandwidth (repeatable)
    #[arg(long = "degrade-nic", value_parser = parse_stage_factor)]
    pub degrade_nic: Vec<(u32, f64)>,
    /// Congested spine: all scale-out bandwidth times FACTOR
    #[arg(long = "spine-factor")]
    pub spine_factor: Option<f64>,
    #[command(flatten)]
    pub goodput: super::goodput::GoodputArgs,
}

fn parse_stage_factor(s: &str) -> Result<(u32, f64), String> {
    let (a, b) = s.split_once('=').ok_or_else(|| format!("`{s}` is not STAGE=FACTOR (e.g. `3=0.8`)"))?;
    let stage = a.trim().parse::<u32>().map_err(|_| format!("stage `{a}` is not a number"))?;
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
