//! `gpuplan validate`'s outputs: the per-run table, JSON, CSV and the predicted-vs-measured plot.

use std::fmt::Write as _;

use plotters::prelude::*;

use gpuplan_core::validate::{Metric, Scored, Summary};

pub fn table(scored: &[Scored], summaries: &[Summary]) -> String {
    let mut o = String::new();
    let _ =
        writeln!(o, "{:<10} {:<5} {:<52} {:>22} {:>22} {:>20}", "run", "split", "scenario", "step time pred/meas", "memory GiB pred/meas", "power W pred/meas");
    for s in scored {
        let cell = |m: Metric| match s.values.iter().find(|v| v.0 == m) {
            Some((_, p, x, e)) => format!("{p:.3}/{x:.3} {e:+.0}%"),
            None => "-".into(),
        };
        let status = match (&s.problem, s.status.as_str()) {
            (Some(e), _) => format!("cannot predict: {e}"),
            (None, "ok") if s.predicted_fits == Some(false) => "ran, but predicted NOT to fit".into(),
            (None, "ok") => String::new(),
            (None, "oom") => format!("out of memory; predicted {}", if s.oom_agrees { "not to fit (right)" } else { "to fit (WRONG)" }),
            (None, other) => other.to_string(),
        };
        let status = match &s.memory_from {
            Some(from) if status.is_empty() => format!("memory measured as {from}"),
            Some(from) => format!("{status}; memory measured as {from}"),
            None => status,
        };
        let status = match &s.power_idle_from {
            Some(from) if status.is_empty() => format!("power idle: {from}"),
            Some(from) => format!("{status}; power idle: {from}"),
            None => status,
        };
        let _ = writeln!(
            o,
            "{:<10} {:<5} {:<52} {:>22} {:>22} {:>20} {status}",
            s.run_id,
            s.split,
            s.describe,
            cell(Metric::StepTime),
            cell(Metric::PeakMemory),
            cell(Metric::Power)
        );
    }
    let _ = writeln!(o);
    for sm in summaries {
        let parts: Vec<String> = sm.mape.iter().map(|(m, v, n)| format!("{} {v:.1}% (n={n})", m.name())).collect();
        let _ = writeln!(
            o,
            "MAPE [{}]: {}; OOM runs predicted not to fit: {}/{}; ran but predicted not to fit: {}",
            sm.split,
            parts.join(", "),
            sm.oom_predicted,
            sm.oom_runs,
            sm.false_oom
        );
    }
    type Value = (Metric, f64, f64, f64);
    let mut worst: Vec<(&Scored, &Value)> = scored.iter().flat_map(|s| s.values.iter().map(move |v| (s, v))).collect();
    worst.sort_by(|a, b| b.1 .3.abs().total_cmp(&a.1 .3.abs()));
    let _ = writeln!(o, "worst: {}", worst.iter().take(5).map(|(s, v)| format!("{} {} {:+.1}%", s.run_id, v.0.name(), v.3)).collect::<Vec<_>>().join(", "));
    o
}

pub fn json(scored: &[Scored], summaries: &[Summary]) -> serde_json::Value {
    serde_json::json!({
        "schema_version": 1,
        "runs": scored.iter().map(|s| serde_json::json!({
            "run_id": s.run_id, "split": s.split, "status": s.status, "scenario": s.describe,
            "predicted_fits": s.predicted_fits, "oom_agrees": s.oom_agrees, "problem": s.problem,
            "metrics": s.values.iter().map(|(m, p, x, e)| {
                let mut v = serde_json::json!({"metric": m.name(), "unit": m.unit(), "predicted": p, "measured": x, "error_pct": e});
                // Only where the measured peak is not NVML's (a job with an in-process host probe):
                // every other record's JSON is as it was.
                if let (Metric::PeakMemory, Some(from)) = (m, &s.memory_from) {
                    v["measured_from"] = serde_json::json!(from);
                }
                // Only where the record measured its own card's idle (`job.reported.idle_w`).
                if let (Metric::Power, Some(from)) = (m, &s.power_idle_from) {
                    v["idle_from"] = serde_json::json!(from);
                }
                v
            }).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "summary": summaries.iter().map(|sm| serde_json::json!({
            "split": sm.split,
            "mape_pct": sm.mape.iter().map(|(m, v, n)| (m.name().to_string(), serde_json::json!({"mape": v, "n": n}))).collect::<serde_json::Map<_, _>>(),
            "oom_runs": sm.oom_runs, "oom_predicted": sm.oom_predicted, "false_oom": sm.false_oom, "unpredicted": sm.unpredicted,
        })).collect::<Vec<_>>(),
    })
}

pub fn csv_text(scored: &[Scored]) -> anyhow::Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(["run_id", "split", "status", "scenario", "metric", "unit", "predicted", "measured", "error_pct"])?;
    for s in scored {
        for (m, p, x, e) in &s.values {
            w.write_record([s.run_id.as_str(), &s.split, &s.status, &s.describe, m.name(), m.unit(), &format!("{p}"), &format!("{x}"), &format!("{e:.3}")])?;
        }
    }
    Ok(String::from_utf8(w.into_inner()?)?)
}

pub fn plot(scored: &[Scored], path: &std::path::Path) -> anyhow::Result<()> {
    let size = (1500, 520);
    match path.extension().and_then(|e| e.to_str()) {
        Some("svg") => draw(SVGBackend::new(path, size).into_drawing_area(), scored),
        Some("png") => draw(BitMapBackend::new(path, size).into_drawing_area(), scored),
        _ => anyhow::bail!("plot format of `{}` is not supported\nhint: use a .png or .svg file name", path.display()),
    }
}

fn draw<DB: DrawingBackend>(area: DrawingArea<DB, plotters::coord::Shift>, scored: &[Scored]) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("{e:?}");
    area.fill(&WHITE).map_err(err)?;
    let panels = area.split_evenly((1, 3));
    for (panel, m) in panels.iter().zip(Metric::ALL) {
        let pts: Vec<(f64, f64, bool)> = scored.iter().flat_map(|s| s.values.iter().filter(|v| v.0 == m).map(move |v| (v.2, v.1, s.split == "test"))).collect();
        let hi = pts.iter().map(|p| p.0.max(p.1)).fold(0.0, f64::max) * 1.08;
        let hi = if hi > 0.0 { hi } else { 1.0 };
        let mut chart = ChartBuilder::on(panel)
            .caption(format!("{} ({})", m.name().replace('_', " "), m.unit()), ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..hi, 0.0..hi)
            .map_err(err)?;
        chart.configure_mesh().x_desc(format!("measured ({})", m.unit())).y_desc(format!("predicted ({})", m.unit())).draw().map_err(err)?;
        chart
            .draw_series(LineSeries::new([(0.0, 0.0), (hi, hi)], BLACK.stroke_width(1)))
            .map_err(err)?
            .label("y = x")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLACK));
        chart
            .draw_series(pts.iter().filter(|p| !p.2).map(|p| Circle::new((p.0, p.1), 4, BLUE.filled())))
            .map_err(err)?
            .label("fit split")
            .legend(|(x, y)| Circle::new((x + 8, y), 4, BLUE.filled()));
        chart
            .draw_series(pts.iter().filter(|p| p.2).map(|p| TriangleMarker::new((p.0, p.1), 6, RED.filled())))
            .map_err(err)?
            .label("test split")
            .legend(|(x, y)| TriangleMarker::new((x + 8, y), 6, RED.filled()));
        chart.configure_series_labels().position(SeriesLabelPosition::UpperLeft).background_style(WHITE.mix(0.9)).border_style(BLACK).draw().map_err(err)?;
    }
    area.present().map_err(err)?;
    Ok(())
}
