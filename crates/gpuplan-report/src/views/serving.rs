//! `gpuplan validate --serving`'s outputs: per split and metric (offline output tokens/s, online
//! mean TTFT and mean ITL) the MAPE and bias, by system and model, the worst rows, the rows not
//! scored; and the JSON document.

use std::fmt::Write as _;
use std::path::Path;

use gpuplan_config::serving_published::SYSTEMS;
use gpuplan_core::validate::published::{SkipKind, Stats};
use gpuplan_core::validate::serving::{Metric, Report, Scored};

use super::published::{fmt_stats, splits_shown};

fn row_line(x: &Scored) -> String {
    let c = &x.case;
    format!(
        "  dev_row {:>3} [{}] {} {}: measured {:.1}, predicted {:.1} {} ({:+.1}%); mean batch {:.0}, peak KV {:.0}%, preempted {}\n",
        c.id,
        c.split,
        c.metric.name(),
        c.describe,
        c.measured,
        x.predicted,
        c.metric.unit(),
        100.0 * x.error,
        x.mean_batch,
        100.0 * x.max_kv_occupancy,
        x.preempted
    )
}

/// The text report of `r` (read from `file`, predicted with `stack`) for `split`, with the
/// `worst` rows of each metric.
pub fn table(r: &Report, file: &Path, split: &str, stack: &str, worst: usize) -> String {
    let mut o = String::new();
    let total = r.scored.len() + r.not_scored.len();
    let _ = writeln!(o, "# gpuplan serve vs published TensorRT-LLM rows ({}), split {split}, --stack {stack}", file.display());
    let _ = writeln!(
        o,
        "rows {total}: scored {}, incomplete {}, no system in catalog / unmapped GPU {}, unexpressible {}",
        r.scored.len(),
        r.count(SkipKind::Incomplete),
        r.count(SkipKind::Unsupported),
        r.count(SkipKind::Unexpressible)
    );
    let _ = writeln!(o, "error = predicted / measured - 1; MAPE = mean |error|, bias = mean error");
    let _ = writeln!(o, "systems: {}", SYSTEMS.iter().map(|(a, b)| format!("{a} -> {b}")).collect::<Vec<_>>().join(", "));
    for sp in splits_shown(split) {
        let _ = writeln!(o, "\n## split: {sp}");
        for m in Metric::ALL {
            let Some(s) = r.summary(sp, m) else { continue };
            let _ = writeln!(o, "{} ({}):        {:>3}  {:>7}  {:>8}  {:>6}", m.name(), m.unit(), "n", "MAPE", "bias", "median");
            for (k, v) in &s.systems {
                let _ = writeln!(o, "  {k:<28} {}", fmt_stats(Some(v)));
            }
            for (k, v) in &s.models {
                let _ = writeln!(o, "  {k:<28} {}", fmt_stats(Some(v)));
            }
            let _ = writeln!(o, "  {:<28} {}", "ALL", fmt_stats(s.all.as_ref()));
        }
    }
    for m in Metric::ALL {
        let rows: Vec<&Scored> = r.scored.iter().filter(|x| x.case.metric == m && (split == "all" || x.case.split == split)).take(worst).collect();
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(o, "\n## worst {} rows of {} by |error|", rows.len(), m.name());
        for x in rows {
            o += &row_line(x);
        }
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
pub fn to_json(r: &Report, split: &str, stack: &str) -> serde_json::Value {
    let summaries: Vec<serde_json::Value> = splits_shown(split)
        .into_iter()
        .flat_map(|sp| Metric::ALL.into_iter().filter_map(move |m| r.summary(sp, m)))
        .map(|s| {
            serde_json::json!({
                "split": s.split,
                "metric": s.metric.name(),
                "all": s.all.as_ref().map(stats_json),
                "systems": s.systems.iter().map(|(k, v)| (k.clone(), stats_json(v))).collect::<serde_json::Map<_, _>>(),
                "models": s.models.iter().map(|(k, v)| (k.clone(), stats_json(v))).collect::<serde_json::Map<_, _>>(),
            })
        })
        .collect();
    serde_json::json!({
        "schema_version": 1,
        "kind": "validate-serving",
        "stack": stack,
        "summary": summaries,
        "rows": r.scored.iter().map(|x| serde_json::json!({
            "dev_row": x.case.id, "split": x.case.split, "config_id": x.case.config_id, "metric": x.case.metric.name(), "unit": x.case.metric.unit(),
            "system": x.case.system, "model": x.case.model, "moe": x.case.moe, "precision": x.case.precision, "tp": x.case.tp, "pp": x.case.pp,
            "ep": x.case.ep, "attention_dp": x.case.attention_dp,
            "input_len": x.case.input_len, "output_len": x.case.output_len, "load": x.case.load.describe(), "scenario": x.case.describe,
            "measured": x.case.measured, "predicted": x.predicted, "error": x.error,
            "mean_batch": x.mean_batch, "max_kv_occupancy": x.max_kv_occupancy, "preempted": x.preempted,
        })).collect::<Vec<_>>(),
        "not_scored": r.not_scored.iter().map(|n| serde_json::json!({
            "dev_row": n.id, "split": n.split, "kind": n.skipped.kind.name(), "row": n.describe, "reason": n.skipped.reason,
        })).collect::<Vec<_>>(),
    })
}
