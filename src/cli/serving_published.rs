//! `gpuplan validate --serving FILE.csv`: score `gpuplan serve` against published TensorRT-LLM
//! serving rows (issue 20): offline output tokens/s (trtllm-bench: every request queued at t = 0)
//! and online mean TTFT and ITL (Triton at a Poisson load). Mapping:
//! `config::serving_published`; deployments: `config::deploy`; simulation and scoring:
//! `validate::serving`; the table and JSON: `report::views::serving`.

use std::path::Path;

use super::Outcome;
use crate::config::deploy::{self, RunFlags};
use crate::config::serve::{SchedulerWire, ServeWire, TrafficWire};
use crate::config::serving_published::{describe_row, map_row, read_rows};
use crate::report::views::serving::{table, to_json};
use crate::validate::published::{NotScored, SkipKind, Skipped};
use crate::validate::serving::{report, score_all, Case, Metric, Report};

/// Map, simulate (in parallel) and score the rows of `file`; `split`, `json` and the bare
/// `--max-mape PCT` bound (on every metric) are validate's own flags.
pub fn run(
    file: &Path,
    args: &super::published::PublishedArgs,
    split: &str,
    json: bool,
    max_mape: &[(crate::validate::Metric, f64)],
) -> anyhow::Result<Outcome> {
    super::ensure_split(split)?;
    if let Some((m, _)) = max_mape.iter().find(|(m, _)| *m != crate::validate::Metric::StepTime) {
        anyhow::bail!(
            "`--max-mape {}=...` does not apply to --serving\nhint: give `--max-mape PCT` (every metric) or `--max-serving-mape METRIC=PCT` (offline_output_tps, mean_ttft, mean_itl)",
            m.name()
        );
    }
    let stack = args.stack.as_deref().unwrap_or(DEFAULT_STACK);
    let kind = args.scenario_kind.as_deref();
    if let Some(k) = kind.filter(|k| !matches!(*k, "offline" | "online")) {
        anyhow::bail!("`--scenario-kind` = `{k}` is not known\nhint: offline (trtllm-bench rows) or online (Triton rows)");
    }
    let r = score_file_filtered(file, split, stack, args.only_system.as_deref(), kind)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&to_json(&r, split, stack))?);
    } else {
        print!("{}", table(&r, file, split, stack, args.worst));
    }
    let mut bounds: Vec<(Metric, f64)> = max_mape.iter().flat_map(|(_, b)| Metric::ALL.map(|m| (m, *b))).collect();
    for s in &args.max_serving_mape {
        bounds.push(parse_serving_bound(s)?);
    }
    let failed = r.bound_failures(split, &bounds);
    Ok(super::bounds_outcome(&failed))
}

/// The stack `validate --serving` predicts with unless `--stack` names another.
pub const DEFAULT_STACK: &str = "megatron";

fn parse_serving_bound(s: &str) -> anyhow::Result<(Metric, f64)> {
    let hint = "hint: METRIC=PCT with METRIC one of offline_output_tps, mean_ttft, mean_itl, e.g. `mean_ttft=12`";
    let Some((m, p)) = s.split_once('=') else { anyhow::bail!("`--max-serving-mape` = `{s}` is not METRIC=PCT\n{hint}") };
    let Some(metric) = Metric::parse(m.trim()) else { anyhow::bail!("`--max-serving-mape` = `{s}`: unknown metric `{m}`\n{hint}") };
    let pct: f64 = p.trim().trim_end_matches('%').parse().map_err(|_| anyhow::anyhow!("`--max-serving-mape` = `{s}`: `{p}` is not a percentage\n{hint}"))?;
    Ok((metric, pct))
}

/// The deployment `serve` runs for a case: one replica of the row's TP x PP, the stack's engine
/// defaults (the load is made by `validate::serving`, the `qps` here only satisfies the resolver).
/// Under attention DP (`config::serving_published::moe_layout`) the replica is one instance of
/// the row's `tp` GPUs as attention-DP ranks at TP 1, its experts over `ep` of them
/// (`--attention-dp --tp 1 --dp TP --ep EP`).
pub fn serve_wire(c: &Case, stack: &str) -> ServeWire {
    let (tp, dp) = if c.attention_dp { (1, Some(c.tp as i64)) } else { (c.tp, None) };
    ServeWire {
        model: Some(c.model.clone()),
        system: Some(c.system.clone()),
        gpus: Some((c.tp * c.pp) as i64),
        tp: Some(tp as i64),
        pp: Some(c.pp as i64),
        ep: c.ep.map(|e| e as i64),
        dp,
        attention_dp: c.attention_dp.then_some(true),
        precision: Some(c.precision.clone()),
        stack: Some(stack.to_string()),
        traffic: TrafficWire {
            qps: Some(1.0),
            duration_s: Some(1.0),
            input_len: Some(c.input_len.to_string()),
            output_len: Some(c.output_len.to_string()),
            ..TrafficWire::default()
        },
        scheduler: SchedulerWire {
            iteration_spread: Some("off".into()),
            chunked_prefill: c.chunked_prefill.then_some(true),
            cuda_graphs: (stack == "trtllm").then(|| if c.cuda_graphs { "decode" } else { "off" }.to_string()),
            kv_cache_free_gpu_mem_fraction: c.kv_free_fraction.filter(|_| stack == "trtllm"),
            ..SchedulerWire::default()
        },
        ..ServeWire::default()
    }
}

/// Read, map, simulate and score every row of `file` in `split` (fit, test or all).
pub fn score_file(file: &Path, split: &str, stack: &str) -> anyhow::Result<Report> {
    score_file_filtered(file, split, stack, None, None)
}

/// [`score_file`] on the rows whose GPU maps to catalog system `system` and whose kind is `kind`
/// (offline, online), where given.
pub fn score_file_filtered(file: &Path, split: &str, stack: &str, system: Option<&str>, kind: Option<&str>) -> anyhow::Result<Report> {
    let of_kind = |r: &crate::config::serving_published::RowWire| match kind {
        Some("offline") => r.scenario == "offline max throughput",
        Some("online") => r.scenario.starts_with("online serving"),
        _ => true,
    };
    let rows: Vec<_> = read_rows(file)?
        .into_iter()
        .filter(|r| (split == "all" || r.split == split) && system.is_none_or(|s| crate::config::serving_published::system_of(&r.gpu) == Some(s)) && of_kind(r))
        .collect();
    anyhow::ensure!(!rows.is_empty(), "no rows of split `{split}` in `{}`", file.display());
    Ok(score_rows(&rows, stack))
}

/// Map, simulate and score `rows` (every one: no split or system filter) with `stack`.
pub fn score_rows(rows: &[crate::config::serving_published::RowWire], stack: &str) -> Report {
    let systems = crate::config::list_names("calibration/systems");
    let has_system = |s: &str| systems.iter().any(|n| n == s);
    let mut cases = Vec::new();
    let mut deployments = Vec::new();
    let mut not_scored = Vec::new();
    let run = RunFlags { bin_s: 1e9, ..RunFlags::default() };
    for r in rows {
        let mapped = map_row(r, &has_system).and_then(|c| {
            deploy::resolve(&serve_wire(&c, stack), None, &run)
                .map(|d| (c, d.deployment))
                .map_err(|e| Skipped::new(SkipKind::Unexpressible, format!("gpuplan refuses: {}", e.to_string().lines().next().unwrap_or_default())))
        });
        match mapped {
            Ok((c, d)) => {
                cases.push(c);
                deployments.push(d);
            }
            Err(s) => not_scored.push(NotScored { id: r.dev_row.clone(), split: r.split.clone(), describe: describe_row(r), skipped: s }),
        }
    }
    let (scored, more) = score_all(cases, deployments);
    not_scored.extend(more);
    report(scored, not_scored)
}
