//! `gpuplan validate --published FILE.csv`: score predictions against published Megatron-Bridge /
//! NeMo throughput rows (issue 17). Mapping: `config::published`; scoring: `validate::published`.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::Outcome;
use crate::config::published::{describe_row, map_row, read_rows, RECIPE_DEFAULTS, SYSTEMS};
use crate::validate::published::{predict_all, report, score, NotScored, Report, Scored, SkipKind, Skipped, Stats, SPLITS};

#[derive(clap::Args, Debug, Default)]
pub struct PublishedArgs {
    /// Score published Megatron-Bridge/NeMo rows (a CSV as tests/data/published/) instead of
    /// --runs: tokens/s/GPU MAPE and bias per slice and split; a bare --max-mape PCT bounds it
    #[arg(long, value_name = "FILE.csv")]
    pub published: Option<PathBuf>,
    /// With --published: fail (exit 1) when the selection's |signed bias| exceeds PCT
    #[arg(long, value_name = "PCT")]
    pub max_bias: Option<f64>,
    /// With --published: how many of the worst rows to print with their breakdown
    #[arg(long, default_value_t = 12)]
    pub worst: usize,
}

/// Map, predict and score the rows of `file`; `split`, `json` and the `--max-mape` bounds are
/// validate's own flags (a bound's metric must be step_time, the rate's inverse, or bare).
pub fn run(file: &Path, args: &PublishedArgs, split: &str, json: bool, max_mape: &[(crate::validate::Metric, f64)]) -> anyhow::Result<Outcome> {
    anyhow::ensure!(matches!(split, "fit" | "test" | "all"), "`--split` = `{split}` is not known\nhint: fit, test or all");
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
    if failed.is_empty() {
        Ok(Outcome::Ok)
    } else {
        eprintln!("validation bounds exceeded: {}", failed.join("; "));
        Ok(Outcome::Infeasible)
    }
}

/// Read, map, predict (in parallel) and score every row of `file` in `split` (fit, test or all).
pub fn score_file(file: &Path, split: &str) -> anyhow::Result<Report> {
    let rows: Vec<_> = read_rows(file)?.into_iter().filter(|r| split == "all" || r.split == split).collect();
    anyhow::ensure!(!rows.is_empty(), "no rows of split `{split}` in `{}`", file.display());
    let layers: RefCell<HashMap<String, Option<u64>>> = RefCell::default();
    let n_layers = |m: &str| *layers.borrow_mut().entry(m.to_string()).or_insert_with(|| crate::config::model::load_model(m).ok().map(|m| m.n_layers));
    let mut cases = Vec::new();
    let mut scenarios = Vec::new();
    let mut not_scored = Vec::new();
    let skip =
        |r: &crate::config::published::RowWire, s: Skipped| NotScored { id: r.dev_row.clone(), split: r.split.clone(), describe: describe_row(r), skipped: s };
    for r in &rows {
        match map_row(r, &n_layers).and_then(|m| {
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

fn splits_shown(split: &str) -> Vec<&'static str> {
    SPLITS.into_iter().filter(|s| split == "all" || *s == split).collect()
}

fn fmt_stats(s: Option<&Stats>) -> String {
    match s {
        Some(s) => format!("{:3}  {:6.1}%  {:+7.1}%  {:6.3}", s.n, s.mape, s.bias, s.median_ratio),
        None => "  -".into(),
    }
}

fn row_line(x: &Scored) -> String {
    let c = &x.case;
    let mut o = format!(
        "  dev_row {:>3} [{}] {}: measured {:.0}, predicted {:.0} ({:+.1}%); step {:.3} s; clock {:.0} MHz; mfu {:.3}{}\n      breakdown: {}\n",
        c.id,
        c.split,
        c.describe,
        c.measured,
        x.predicted,
        100.0 * x.error,
        x.step_time_s,
        x.sm_clock_mhz,
        x.mfu,
        if x.fits { "" } else { "; does NOT fit in memory as mapped" },
        x.breakdown.iter().map(|(k, v)| format!("{k} {:.0}%", 100.0 * v)).collect::<Vec<_>>().join(" ")
    );
    for n in &c.notes {
        let _ = writeln!(o, "      note: {n}");
    }
    o
}

fn table(r: &Report, file: &Path, split: &str, worst: usize) -> String {
    let mut o = String::new();
    let total = r.scored.len() + r.not_scored.len();
    let _ = writeln!(o, "# gpuplan vs published Megatron-Bridge/NeMo rows ({}), split {split}, analytic engine", file.display());
    let _ = writeln!(
        o,
        "rows {total}: scored {}, incomplete {}, unsupported {}, unexpressible {}",
        r.scored.len(),
        r.count(SkipKind::Incomplete),
        r.count(SkipKind::Unsupported),
        r.count(SkipKind::Unexpressible)
    );
    let _ = writeln!(o, "metric: tokens/s/GPU; error = predicted / measured - 1; MAPE = mean |error|, bias = mean error");
    let _ = writeln!(o, "systems: {}", SYSTEMS.iter().map(|(a, b)| format!("{a} -> {b}")).collect::<Vec<_>>().join(", "));
    let mut recipes: BTreeMap<(String, String), usize> = BTreeMap::new();
    for x in &r.scored {
        *recipes.entry((x.case.recipe.clone(), x.case.precision.clone())).or_default() += 1;
    }
    let _ = writeln!(o, "recipes approximated (gpuplan has one fp8 and one fp4 path; no recipe-specific quantization kernels):");
    for ((recipe, slice), n) in &recipes {
        let path = if slice == "bf16" {
            "bf16"
        } else if slice == "nvfp4" {
            "fp4"
        } else {
            "fp8"
        };
        let _ = writeln!(o, "  {n:3} rows  {recipe} -> {path}");
    }
    let _ = writeln!(
        o,
        "defaults where a row is silent (docs/published-analysis.md section 1): {}",
        RECIPE_DEFAULTS.iter().map(|d| format!("{} = {}", d.0, d.1.split(" (").next().unwrap_or(d.1))).collect::<Vec<_>>().join("; ")
    );
    let _ = writeln!(o);
    for sp in splits_shown(split) {
        let Some(s) = r.summary(sp) else { continue };
        let _ = writeln!(o, "## split: {sp} ({} rows)", s.all.map_or(0, |a| a.n));
        let _ = writeln!(o, "{:<12} {:<5} {:<9} {:<8} {:>3}  {:>7}  {:>8}  {:>6}", "system", "kind", "prec", "gpus", "n", "MAPE", "bias", "median");
        for (k, v) in &s.slices {
            let _ = writeln!(o, "{:<12} {:<5} {:<9} {:<8} {}", k.system, k.kind, k.precision, k.scale, fmt_stats(Some(v)));
        }
        let _ = writeln!(o, "  by system:");
        for (k, v) in &s.systems {
            let _ = writeln!(o, "  {k:<30} {}", fmt_stats(Some(v)));
        }
        for (k, v) in &s.kinds {
            let _ = writeln!(o, "  {k:<30} {}", fmt_stats(Some(v)));
        }
        let _ = writeln!(o, "  by model:");
        for (k, v) in &s.models {
            let _ = writeln!(o, "  {k:<30} {}", fmt_stats(Some(v)));
        }
        let _ = writeln!(o, "  {:<30} {}\n", "ALL", fmt_stats(s.all.as_ref()));
    }
    let _ = writeln!(o, "## worst {} rows by |error|", worst.min(r.scored.len()));
    for x in r.scored.iter().take(worst) {
        o += &row_line(x);
    }
    let not_fit: Vec<&str> = r.scored.iter().filter(|x| !x.fits).map(|x| x.case.id.as_str()).collect();
    if !not_fit.is_empty() {
        let mut ids: Vec<u64> = not_fit.iter().filter_map(|i| i.parse().ok()).collect();
        ids.sort();
        let _ = writeln!(o, "\n## {} scored rows gpuplan's memory plan says do not fit (recompute none, as the recipes): dev_row {:?}", not_fit.len(), ids);
    }
    let _ = writeln!(o, "\n## rows not scored");
    for n in &r.not_scored {
        let _ = writeln!(o, "  dev_row {:>3} [{}] {:<13} {}: {}", n.id, n.split, n.skipped.kind.name(), n.describe, n.skipped.reason);
    }
    o
}

fn stats_json(s: &Stats) -> serde_json::Value {
    serde_json::json!({"n": s.n, "mape_pct": s.mape, "bias_pct": s.bias, "median_ratio": s.median_ratio})
}

fn to_json(r: &Report, split: &str) -> serde_json::Value {
    let summaries: Vec<serde_json::Value> = splits_shown(split)
        .into_iter()
        .filter_map(|sp| r.summary(sp))
        .map(|s| {
            serde_json::json!({
                "split": s.split,
                "all": s.all.as_ref().map(stats_json),
                "slices": s.slices.iter().map(|(k, v)| (k.label(), stats_json(v))).collect::<serde_json::Map<_, _>>(),
                "systems": s.systems.iter().map(|(k, v)| (k.clone(), stats_json(v))).collect::<serde_json::Map<_, _>>(),
                "kinds": s.kinds.iter().map(|(k, v)| (k.to_string(), stats_json(v))).collect::<serde_json::Map<_, _>>(),
                "models": s.models.iter().map(|(k, v)| (k.clone(), stats_json(v))).collect::<serde_json::Map<_, _>>(),
            })
        })
        .collect();
    serde_json::json!({
        "schema_version": 1,
        "metric": "tokens_per_s_per_gpu",
        "summary": summaries,
        "rows": r.scored.iter().map(|x| serde_json::json!({
            "dev_row": x.case.id, "split": x.case.split, "system": x.case.system, "model": x.case.model, "moe": x.case.moe,
            "precision": x.case.precision, "recipe": x.case.recipe, "gpus": x.case.gpus, "scenario": x.case.describe,
            "measured": x.case.measured, "predicted": x.predicted, "error": x.error, "fits": x.fits,
            "step_time_s": x.step_time_s, "sm_clock_mhz": x.sm_clock_mhz, "mfu": x.mfu,
            "breakdown_share": x.breakdown.iter().map(|(k, v)| (k.to_string(), serde_json::json!(v))).collect::<serde_json::Map<_, _>>(),
            "notes": x.case.notes,
        })).collect::<Vec<_>>(),
        "not_scored": r.not_scored.iter().map(|n| serde_json::json!({
            "dev_row": n.id, "split": n.split, "kind": n.skipped.kind.name(), "row": n.describe, "reason": n.skipped.reason,
        })).collect::<Vec<_>>(),
    })
}
