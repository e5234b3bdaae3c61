//! `gpuplan validate --published FILE.csv`: score predictions against published Megatron-Bridge /
//! NeMo throughput rows (issue 17). Mapping: `config::published`; scoring: `validate::published`;
//! the table and JSON: `report::views::published`.

use std::path::{Path, PathBuf};

use super::Outcome;
use crate::config::published::{describe_row, map_row, read_rows};
use crate::report::views::published::{table, to_json};
use crate::validate::published::{predict_all, report, score, NotScored, Report, SkipKind, Skipped};

#[derive(clap::Args, Debug, Default)]
pub struct PublishedArgs {
    /// Score published training rows instead of --runs: Megatron-Bridge/NeMo rows (a CSV as
    /// tests/data/published/megatron_bridge_training_dev.csv) or torchtitan's (a header with
    /// `techniques`, as torchtitan_training_dev.csv; memory too): tokens/s/GPU MAPE and bias per
    /// split; a bare --max-mape PCT bounds it (torchtitan: peak_memory=PCT bounds memory)
    #[arg(long, value_name = "FILE.csv")]
    pub published: Option<PathBuf>,
    /// With --published: fail (exit 1) when the selection's |signed bias| exceeds PCT
    #[arg(long, value_name = "PCT")]
    pub max_bias: Option<f64>,
    /// With --published or --serving: how many of the worst rows to print (per metric with --serving)
    #[arg(long, default_value_t = 12)]
    pub worst: usize,
    /// Score `gpuplan serve` against published TensorRT-LLM serving rows (a CSV as
    /// tests/data/published/trtllm_inference_dev.csv) instead of --runs: offline output tokens/s and
    /// online mean TTFT and ITL, MAPE and bias per split; a bare --max-mape PCT bounds every metric
    #[arg(long, value_name = "FILE.csv", conflicts_with = "published")]
    pub serving: Option<PathBuf>,
    /// With --serving: the engine stack the deployments run (default: megatron, the baseline)
    #[arg(long, requires = "serving")]
    pub stack: Option<String>,
    /// With --serving: fail (exit 1) when a metric's MAPE exceeds PCT: METRIC=PCT
    /// (offline_output_tps, mean_ttft, mean_itl), repeatable
    #[arg(long, value_name = "METRIC=PCT", requires = "serving")]
    pub max_serving_mape: Vec<String>,
    /// With --serving: only rows whose GPU maps to this catalog system (e.g. hgx-h200; the table
    /// config::serving_published::SYSTEMS)
    #[arg(long, value_name = "SYSTEM", requires = "serving")]
    pub only_system: Option<String>,
    /// With --serving: only `offline` or `online` rows
    #[arg(long, value_name = "offline|online", requires = "serving")]
    pub scenario_kind: Option<String>,
}

/// Map, predict and score the rows of `file`; `split`, `json` and the `--max-mape` bounds are
/// validate's own flags (a bound's metric must be step_time, the rate's inverse, or bare).
pub fn run(file: &Path, args: &PublishedArgs, split: &str, json: bool, max_mape: &[(crate::validate::Metric, f64)]) -> anyhow::Result<Outcome> {
    super::ensure_split(split)?;
    if let Some((m, _)) = max_mape.iter().find(|(m, _)| *m != crate::validate::Metric::StepTime) {
        anyhow::bail!("`--max-mape {}=...` does not apply to --published\nhint: published rows measure tokens/s/GPU only: give `--max-mape PCT`", m.name());
    }
    let r = score_file(file, split)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&to_json(&r, split))?);
    } else {
        print!("{}", table(&r, file, split, args.worst));
    }
    let failed = r.bound_failures(split, max_mape.iter().map(|b| b.1).reduce(f64::min), args.max_bias);
    Ok(super::bounds_outcome(&failed))
}

/// Read, map, predict (in parallel) and score every row of `file` in `split` (fit, test or all).
pub fn score_file(file: &Path, split: &str) -> anyhow::Result<Report> {
    let rows: Vec<_> = read_rows(file)?.into_iter().filter(|r| split == "all" || r.split == split).collect();
    anyhow::ensure!(!rows.is_empty(), "no rows of split `{split}` in `{}`", file.display());
    let mut cases = Vec::new();
    let mut scenarios = Vec::new();
    let mut not_scored = Vec::new();
    let skip =
        |r: &crate::config::published::RowWire, s: Skipped| NotScored { id: r.dev_row.clone(), split: r.split.clone(), describe: describe_row(r), skipped: s };
    for r in &rows {
        match map_row(r).and_then(|m| {
            crate::config::scenario::build(&m.wire, None)
                .map(|s| (m.case, s))
                .map_err(|e| Skipped::new(SkipKind::Unexpressible, format!("gpuplan refuses: {}", e.to_string().lines().next().unwrap_or_default())))
        }) {
            Ok((c, s)) => {
                cases.push(c);
                scenarios.push(s);
            }
            Err(s) => not_scored.push(skip(r, s)),
        }
    }
    let mut scored = Vec::new();
    for ((case, s), p) in cases.into_iter().zip(&scenarios).zip(predict_all(&scenarios)) {
        match p {
            Ok(p) => scored.push(score(case, s.n_gpus, &p)),
            Err(e) => not_scored.push(NotScored {
                id: case.id.clone(),
                split: case.split.clone(),
                describe: case.describe.clone(),
                skipped: Skipped::new(SkipKind::Unexpressible, format!("gpuplan refuses: {e}")),
            }),
        }
    }
    not_scored.sort_by_key(|n| n.id.parse::<u64>().unwrap_or(u64::MAX));
    Ok(report(scored, not_scored))
}
