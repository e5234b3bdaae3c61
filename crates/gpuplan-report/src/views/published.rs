//! `gpuplan validate --published`'s outputs: the per-split table of MAPE and bias by slice,
//! system, kind and model, the worst rows, the rows not scored; and the JSON document.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use gpuplan_config::published::{fp8_recipe_of, RECIPE_DEFAULTS, SYSTEMS};
use gpuplan_core::validate::published::{Report, Scored, SkipKind, Stats, SPLITS};

pub(crate) fn splits_shown(split: &str) -> Vec<&'static str> {
    SPLITS.into_iter().filter(|s| split == "all" || *s == split).collect()
}

pub(crate) fn fmt_stats(s: Option<&Stats>) -> String {
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

/// The text report of `r` (read from `file`) for `split` (fit, test or all), with the `worst` rows.
pub fn table(r: &Report, file: &Path, split: &str, worst: usize) -> String {
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
    let _ = writeln!(
        o,
        "recipes as run (workload precision / fp8_recipe: each recipe's quantize kernels, saved quantized inputs, LM head and router GEMMs in bf16; NVFP4 with its Hadamard-rotated wgrad cast):"
    );
    for ((recipe, slice), n) in &recipes {
        let path = match (slice.as_str(), fp8_recipe_of(if slice == "bf16" || slice == "nvfp4" { slice } else { "fp8" }, recipe)) {
            (_, Some(r)) => format!("fp8, fp8_recipe {r}"),
            ("nvfp4", None) => "fp4 (NVFP4)".into(),
            _ => "bf16".into(),
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

/// The `--json` document (schema 1) of `r` for `split`.
pub fn to_json(r: &Report, split: &str) -> serde_json::Value {
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
            "memory_gib": x.memory_gib.iter().map(|(k, v)| (k.to_string(), serde_json::json!(v))).collect::<serde_json::Map<_, _>>(),
            "peak_gib": x.memory_gib.iter().map(|(_, v)| v).sum::<f64>(), "capacity_gib": x.capacity_gib,
            "step_time_s": x.step_time_s, "sm_clock_mhz": x.sm_clock_mhz, "mfu": x.mfu,
            "breakdown_share": x.breakdown.iter().map(|(k, v)| (k.to_string(), serde_json::json!(v))).collect::<serde_json::Map<_, _>>(),
            "notes": x.case.notes,
        })).collect::<Vec<_>>(),
        "not_scored": r.not_scored.iter().map(|n| serde_json::json!({
            "dev_row": n.id, "split": n.split, "kind": n.skipped.kind.name(), "row": n.describe, "reason": n.skipped.reason,
        })).collect::<Vec<_>>(),
    })
}
