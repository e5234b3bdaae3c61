//! `gpuplan validate --published` on torchtitan's rows: the per-split tables of tokens/s/GPU and
//! memory MAPE and bias by model, technique and system, the worst rows, the rows not scored; and the
//! JSON document.

use std::fmt::Write as _;
use std::path::Path;

use gpuplan_config::torchtitan_published::{SYSTEMS, TORCHTITAN_DEFAULTS};
use gpuplan_core::validate::published::SkipKind;
use gpuplan_core::validate::torchtitan::{MetricSummary, TitanReport, TitanScored};

use super::published::{fmt_stats, splits_shown};

fn section(o: &mut String, title: &str, m: &MetricSummary) {
    let _ = writeln!(o, "  {title}: {:<26} {}", "ALL", fmt_stats(m.all.as_ref()));
    for (k, v) in &m.models {
        let _ = writeln!(o, "    model     {k:<24} {}", fmt_stats(Some(v)));
    }
    for (k, v) in &m.techniques {
        let _ = writeln!(o, "    technique {k:<24} {}", fmt_stats(Some(v)));
    }
    for (k, v) in &m.systems {
        let _ = writeln!(o, "    system    {k:<24} {}", fmt_stats(Some(v)));
    }
}

fn row_line(x: &TitanScored) -> String {
    let s = &x.scored;
    let c = &s.case;
    let mem = match (x.measured_memory_gib, x.memory_error) {
        (Some(m), Some(e)) => format!("; memory {m:.1} GiB published, {:.1} predicted ({:+.1}%)", x.peak_gib, 100.0 * e),
        _ => format!("; memory {:.1} GiB predicted (none published)", x.peak_gib),
    };
    let mut o = format!(
        "  dev_row {:>2} [{}] {}: measured {:.0}, predicted {:.0} ({:+.1}%){mem}; step {:.3} s; clock {:.0} MHz; mfu {:.3}{}\n      breakdown: {}\n",
        c.id,
        c.split,
        c.describe,
        c.measured,
        s.predicted,
        100.0 * s.error,
        s.step_time_s,
        s.sm_clock_mhz,
        s.mfu,
        if s.fits { "" } else { "; does NOT fit in memory as mapped" },
        s.breakdown.iter().map(|(k, v)| format!("{k} {:.0}%", 100.0 * v)).collect::<Vec<_>>().join(" ")
    );
    for n in &c.notes {
        let _ = writeln!(o, "      note: {n}");
    }
    o
}

/// The text report of `r` (read from `file`) for `split` (fit, test or all), with the `worst` rows.
pub fn table(r: &TitanReport, file: &Path, split: &str, worst: usize) -> String {
    let mut o = String::new();
    let count = |k: SkipKind| r.not_scored.iter().filter(|n| n.skipped.kind == k).count();
    let _ = writeln!(o, "# gpuplan vs torchtitan's published rows ({}), split {split}, analytic engine", file.display());
    let _ = writeln!(
        o,
        "rows {}: scored {}, incomplete {}, unsupported {}, unexpressible {}",
        r.scored.len() + r.not_scored.len(),
        r.scored.len(),
        count(SkipKind::Incomplete),
        count(SkipKind::Unsupported),
        count(SkipKind::Unexpressible)
    );
    let _ = writeln!(
        o,
        "metrics: tokens/s/GPU, and memory GiB per GPU where published (predicted peak vs the published max over GPUs); error = predicted / measured - 1"
    );
    let _ = writeln!(o, "columns: n, MAPE, bias, median predicted/measured; a row counts under each of its technique tags");
    let _ = writeln!(o, "systems: {}", SYSTEMS.iter().map(|(a, b)| format!("`{a}` -> {b}")).collect::<Vec<_>>().join(", "));
    let _ = writeln!(
        o,
        "mapping (docs/published-analysis.md, torchtitan section): {}",
        TORCHTITAN_DEFAULTS.iter().map(|d| format!("{} = {}", d.0, d.1)).collect::<Vec<_>>().join("; ")
    );
    let _ = writeln!(o);
    for sp in splits_shown(split) {
        let Some(s) = r.summary(sp) else { continue };
        let _ = writeln!(o, "## split: {sp} ({} rows scored, {} with published memory)", s.throughput.all.map_or(0, |a| a.n), s.memory.all.map_or(0, |a| a.n));
        section(&mut o, "tokens/s/GPU", &s.throughput);
        section(&mut o, "memory GiB  ", &s.memory);
        let _ = writeln!(o);
    }
    let _ = writeln!(o, "## worst {} rows by |tokens/s/GPU error|", worst.min(r.scored.len()));
    for x in r.scored.iter().take(worst) {
        o += &row_line(x);
    }
    let _ = writeln!(o, "\n## rows not scored");
    for n in &r.not_scored {
        let _ = writeln!(o, "  dev_row {:>2} [{}] {:<13} {}: {}", n.id, n.split, n.skipped.kind.name(), n.describe, n.skipped.reason);
    }
    o
}

fn stats_json(s: &gpuplan_core::validate::published::Stats) -> serde_json::Value {
    serde_json::json!({"n": s.n, "mape_pct": s.mape, "bias_pct": s.bias, "median_ratio": s.median_ratio})
}

fn metric_json(m: &MetricSummary) -> serde_json::Value {
    let map = |g: &std::collections::BTreeMap<String, gpuplan_core::validate::published::Stats>| {
        g.iter().map(|(k, v)| (k.clone(), stats_json(v))).collect::<serde_json::Map<_, _>>()
    };
    serde_json::json!({
        "all": m.all.as_ref().map(stats_json),
        "models": map(&m.models),
        "techniques": map(&m.techniques),
        "systems": map(&m.systems),
    })
}

/// The `--json` document (schema 1) of `r` for `split`.
pub fn to_json(r: &TitanReport, split: &str) -> serde_json::Value {
    let summaries: Vec<serde_json::Value> = splits_shown(split)
        .into_iter()
        .filter_map(|sp| r.summary(sp))
        .map(|s| serde_json::json!({"split": s.split, "tokens_per_s_per_gpu": metric_json(&s.throughput), "memory_gib": metric_json(&s.memory)}))
        .collect();
    serde_json::json!({
        "schema_version": 1,
        "suite": "torchtitan",
        "metric": "tokens_per_s_per_gpu",
        "summary": summaries,
        "rows": r.scored.iter().map(|x| {
            let s = &x.scored;
            serde_json::json!({
                "dev_row": s.case.id, "split": s.case.split, "system": s.case.system, "model": s.case.model,
                "precision": s.case.precision, "published_precision": s.case.recipe, "gpus": s.case.gpus, "scenario": s.case.describe,
                "techniques": x.techniques,
                "measured": s.case.measured, "predicted": s.predicted, "error": s.error, "fits": s.fits,
                "measured_memory_gib": x.measured_memory_gib, "peak_gib": x.peak_gib, "memory_error": x.memory_error,
                "memory_gib": s.memory_gib.iter().map(|(k, v)| (k.to_string(), serde_json::json!(v))).collect::<serde_json::Map<_, _>>(),
                "capacity_gib": s.capacity_gib, "step_time_s": s.step_time_s, "sm_clock_mhz": s.sm_clock_mhz, "mfu": s.mfu,
                "breakdown_share": s.breakdown.iter().map(|(k, v)| (k.to_string(), serde_json::json!(v))).collect::<serde_json::Map<_, _>>(),
                "notes": s.case.notes,
            })
        }).collect::<Vec<_>>(),
        "not_scored": r.not_scored.iter().map(|n| serde_json::json!({
            "dev_row": n.id, "split": n.split, "kind": n.skipped.kind.name(), "row": n.describe, "reason": n.skipped.reason,
        })).collect::<Vec<_>>(),
    })
}
