//! `gpuplan compare`: plan the same model and workload on several systems and/or hardware variants
//! (NIC speed, TDP, HBM) and print each one's best configuration with the deltas to the first.

use anyhow::{bail, Context};

use super::args::ScenarioArgs;
use super::plan::{base_scenario, request, run_search, PlanOptions};
use super::predict::to_json;
use super::Outcome;
use crate::analytic;
use crate::plan::{self, PlanMode};
use crate::report::views::compare::{self as view, Row};
use crate::report::views::plan::plan_json;

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
        print!("{}", view::table(&rows, mode));
    }
    Ok(if rows.iter().any(|r| r.best.is_some()) { Outcome::Ok } else { Outcome::Infeasible })
}
