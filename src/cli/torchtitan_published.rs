//! `gpuplan validate --published FILE.csv` on torchtitan's published rows (a CSV whose header has
//! `techniques` and `activation_checkpointing`, as tests/data/published/torchtitan_training_dev.csv):
//! tokens/s/GPU and memory scored per split. Mapping: `config::torchtitan_published`; scoring:
//! `validate::torchtitan`; the table and JSON: `report::views::torchtitan`.

use std::path::Path;

use super::Outcome;
use crate::config::torchtitan_published::{describe_row, is_torchtitan_header, map_row, read_rows, RowWire};
use crate::report::views::torchtitan::{table, to_json};
use crate::validate::published::{predict_all, NotScored, SkipKind, Skipped};
use crate::validate::torchtitan::{report, score, TitanReport};

/// Whether `file` holds torchtitan rows (its header names their columns).
pub fn is_torchtitan_file(file: &Path) -> anyhow::Result<bool> {
    let text = crate::config::read_file(file)?;
    Ok(is_torchtitan_header(text.lines().next().unwrap_or_default()))
}

/// Map, predict and score the rows of `file`; `split`, `json` and the bounds are validate's flags.
pub fn run(
    file: &Path,
    args: &super::published::PublishedArgs,
    split: &str,
    json: bool,
    max_mape: &[(crate::validate::Metric, f64)],
) -> anyhow::Result<Outcome> {
    use crate::validate::Metric;
    super::ensure_split(split)?;
    if let Some((m, _)) = max_mape.iter().find(|(m, _)| !matches!(m, Metric::StepTime | Metric::PeakMemory)) {
        anyhow::bail!(
            "`--max-mape {}=...` does not apply to torchtitan rows\nhint: they publish tokens/s/GPU and memory: give `--max-mape PCT` and/or `--max-mape peak_memory=PCT`",
            m.name()
        );
    }
    let r = score_file(file, split)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&to_json(&r, split))?);
    } else {
        print!("{}", table(&r, file, split, args.worst));
    }
    let bound = |want: Metric| max_mape.iter().filter(|(m, _)| *m == want).map(|b| b.1).reduce(f64::min);
    let failed = r.bound_failures(split, bound(Metric::StepTime), args.max_bias, bound(Metric::PeakMemory));
    Ok(super::bounds_outcome(&failed))
}

/// Read, map, predict (in parallel) and score every row of `file` in `split` (fit, test or all).
pub fn score_file(file: &Path, split: &str) -> anyhow::Result<TitanReport> {
    let rows: Vec<RowWire> = read_rows(file)?.into_iter().filter(|r| split == "all" || r.split == split).collect();
    anyhow::ensure!(!rows.is_empty(), "no rows of split `{split}` in `{}`", file.display());
    let mut cases = Vec::new();
    let mut scenarios = Vec::new();
    let mut not_scored = Vec::new();
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
            Err(s) => not_scored.push(NotScored { id: r.dev_row.clone(), split: r.split.clone(), describe: describe_row(r), skipped: s }),
        }
    }
    let mut scored = Vec::new();
    for ((tc, s), p) in cases.into_iter().zip(&scenarios).zip(predict_all(&scenarios)) {
        match p {
            Ok(p) => scored.push(score(tc, s.n_gpus, &p)),
            Err(e) => not_scored.push(NotScored {
                id: tc.case.id.clone(),
                split: tc.case.split.clone(),
                describe: tc.case.describe.clone(),
                skipped: Skipped::new(SkipKind::Unexpressible, format!("gpuplan refuses: {e}")),
            }),
        }
    }
    not_scored.sort_by_key(|n| n.id.parse::<u64>().unwrap_or(u64::MAX));
    Ok(report(scored, not_scored))
}
