//! `gpuplan compare`: plan the same model and workload on several systems and/or hardware variants
//! (NIC speed, TDP, HBM) and print each one's best configuration with the deltas to the first.

use anyhow::{bail, Context};

use super::args::ScenarioArgs;
use super::plan::{base_scenario, request, run_search, PlanOptions};
use super::predict::to_json;
use super::Outcome;
use crate::analytic;
use crate::plan::{self, PlanMode, Ranked, Request};
use crate::report::views::plan::plan_json;
use crate::scenario::Scenario;

#[derive(clap::Args, Debug)]
pub struct CompareArgs {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    #[command(flatten)]
    pub options: PlanOptions,
    /// Systems to compare, comma-separated (default: --system)
    #[arg(long, value_delimiter = ',')]
    pub systems: Vec<String>,
    /// A hardware variant, `key=value[,key=value]`, applied to every system; repeat for more.
    /// Keys: nic-gbit (per NIC), tdp-w (per GPU), hbm-gib (per GPU), nvlink-gb (per GPU, one way)
    #[arg(long)]
    pub variant: Vec<String>,
    /// One JSON line per row, with the keys of `predict --json` and a `compare` object
    #[arg(long)]
    pub json: bool,
}

struct Row {
    label: String,
    base: Scenario,
    req: Request,
    best: Option<Ranked>,
    feasible: usize,
}

pub fn run(args: CompareArgs) -> anyhow::Result<Outcome> {
    let mode = match args.scenario.mode.as_deref() {
        None | Some("train") => PlanMode::Train,
        Some("serve") | Some("prefill") | Some("decode") => PlanMode::Serve,
        Some(m) => bail!("`--mode` = `{m}` is not known\nhint: compare takes `train` or `serve`"),
    };
    let mut systems = args.systems.clone();
    if systems.is_empty() {
        match &args.scenario.system {
            Some(s) => systems.push(s.clone()),
            None => bail!("give `--systems a,b,...` (or `--system S` with `--variant`)"),
        }
    }
    let first_gpus = match (args.scenario.gpus, args.options.min_gpus) {
        (Some(g), _) if g >= 1 => g as u64,
        (_, Some(g)) if g >= 1 => g,
        _ => bail!("give `--gpus N`, or both `--min-gpus` and `--max-gpus`"),
    };
    let mut variants: Vec<Option<&str>> = vec![None];
    variants.extend(args.variant.iter().map(|v| Some(v.as_str())));
    let mut rows = Vec::new();
    for sys in &systems {
        for v in &variants {
            let mut base = base_scenario(&args.scenario, mode, first_gpus, Some(sys)).with_context(|| format!("system `{sys}`"))?;
            if let Some(spec) = v {
                crate::deploy::apply_variant(&mut base.system, spec).map_err(anyhow::Error::msg)?;
            }
            let req = request(&super::plan::with_file_batch(&args.scenario)?, &args.options, &base, mode).with_context(|| format!("system `{sys}`"))?;
            let result = run_search(&base, &req, &args.options, args.json)?;
            let label = match v {
                Some(spec) => format!("{sys} [{spec}]"),
                None => sys.clone(),
            };
            rows.push(Row { label, feasible: result.ranked.len(), best: result.ranked.into_iter().next(), base, req });
        }
    }

    let reference = rows.iter().find_map(|r| r.best.as_ref().map(|b| b.metrics.clone()));
    let delta = |x: f64, r: f64| if r != 0.0 { format!("{:+.1}%", 100.0 * (x / r - 1.0)) } else { "-".into() };
    if args.json {
        for r in &rows {
            let Some(b) = &r.best else {
                println!("{}", serde_json::json!({ "schema_version": super::predict::SCHEMA_VERSION, "compare": { "label": r.label, "feasible": 0 } }));
                continue;
            };
            let s = plan::scenario_of(&r.base, &b.candidate, mode);
            let p = analytic::predict(&s)?;
            let mut j = to_json(&s, &p);
            j["plan"] = plan_json(1, b, &r.req);
            let refm = reference.as_ref().expect("a row with a plan exists");
            j["compare"] = serde_json::json!({
                "label": r.label,
                "feasible": r.feasible,
                "tokens_per_s_ratio": b.metrics.tokens_per_s / refm.tokens_per_s,
                "tokens_per_joule_ratio": b.metrics.tokens_per_joule() / refm.tokens_per_joule(),
                "usd_per_million_tokens_ratio": match (b.metrics.usd_per_million_tokens, refm.usd_per_million_tokens) { (Some(a), Some(c)) => Some(a / c), _ => None },
            });
            println!("{}", serde_json::to_string(&j)?);
        }
    } else {
        use std::fmt::Write;
        let mut o = String::new();
        let b0 = &rows[0].base;
        let what = match mode {
            PlanMode::Train => format!("training, seq {}", b0.workload.seq),
            PlanMode::Serve => format!("serving, prompt {}", b0.workload.seq),
        };
        let _ = writeln!(
            o,
            "compare: {} on {} GPUs ({what}), objective {}; best configuration per system, deltas against the first row",
            b0.model.name,
            rows[0].req.space.n_gpus.iter().map(u64::to_string).collect::<Vec<_>>().join("/"),
            rows[0].req.objective.name()
        );
        let _ = writeln!(o);
        let lw = rows.iter().map(|r| r.label.len()).max().unwrap_or(6).max(6);
        let cw = rows.iter().filter_map(|r| r.best.as_ref().map(|b| b.candidate.label(mode).len())).max().unwrap_or(6).max(6);
        let priced = rows.iter().any(|r| r.req.pricing.priced());
        let mut head = format!(
            "{:<lw$}  {:<cw$}  {:>12}  {:>8}  {:>6}  {:>9}  {:>7}  {:>8}  {:>7}",
            "system", "best config", "tokens/s", "delta", "MFU", "mem/GPU", "W/GPU", "tok/J", "delta"
        );
        if priced {
            let _ = write!(head, "  {:>9}  {:>8}", "$/1M tok", "delta");
        }
        let _ = write!(head, "  bottleneck");
        let _ = writeln!(o, "{head}");
        for r in &rows {
            let Some(b) = &r.best else {
                let _ = writeln!(o, "{:<lw$}  no feasible configuration", r.label);
                continue;
            };
            let m = &b.metrics;
            let refm = reference.as_ref().expect("a row with a plan exists");
            let mut line = format!(
                "{:<lw$}  {:<cw$}  {:>12.0}  {:>8}  {:>5.1}%  {:>5.1} GiB  {:>7.0}  {:>8.2}  {:>7}",
                r.label,
                b.candidate.label(mode),
                m.tokens_per_s,
                delta(m.tokens_per_s, refm.tokens_per_s),
                m.mfu * 100.0,
                m.memory_bytes / (1u64 << 30) as f64,
                m.gpu_power_w,
                m.tokens_per_joule(),
                delta(m.tokens_per_joule(), refm.tokens_per_joule()),
            );
            if priced {
                match (m.usd_per_million_tokens, refm.usd_per_million_tokens) {
                    (Some(c), Some(rc)) => {
                        let _ = write!(line, "  {:>9.4}  {:>8}", c, delta(c, rc));
                    }
                    (Some(c), None) => {
                        let _ = write!(line, "  {:>9.4}  {:>8}", c, "-");
                    }
                    _ => {
                        let _ = write!(line, "  {:>9}  {:>8}", "-", "-");
                    }
                }
            }
            let _ = write!(line, "  {}", m.bottleneck);
            let _ = writeln!(o, "{line}");
        }
        print!("{o}");
    }
    Ok(if rows.iter().any(|r| r.best.is_some()) { Outcome::Ok } else { Outcome::Infeasible })
}
