//! `gpuplan validate --runs FILE...`: predict every measured run and score the predictions.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context;
use plotters::prelude::*;

use super::{write_atomic, Outcome};
use crate::config::scenario::{OptionsWire, ParallelWire, ScenarioWire, WorkloadWire};
use crate::measure::record::{read_all, RunRecord};
use crate::validate::{score, summarize, Metric, Scored, Summary};

#[derive(clap::Args, Debug)]
pub struct ValidateArgs {
    /// Run-record files (.jsonl) written by `gpuplan measure`
    #[arg(long, required_unless_present = "published", num_args = 1..)]
    pub runs: Vec<PathBuf>,
    #[command(flatten)]
    pub published: super::published::PublishedArgs,
    /// Which engine predicts: analytic or des
    #[arg(long, default_value = "analytic")]
    pub engine: String,
    /// Calibration profile for every prediction (a profile.toml, its folder, or a profile name)
    #[arg(long)]
    pub calibration: Option<String>,
    /// Only runs of this split: fit, test or all
    #[arg(long, default_value = "all")]
    pub split: String,
    /// Print one JSON object instead of the table
    #[arg(long)]
    pub json: bool,
    /// Write the per-run comparison as CSV
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// Plot predicted against measured with the y = x line (.png or .svg)
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Overwrite existing --csv / --plot files
    #[arg(long)]
    pub force: bool,
    /// Fail (exit 1) when a metric's MAPE exceeds a bound: METRIC=PCT (step_time, peak_memory,
    /// power), repeatable; out-of-memory runs predicted to fit fail it too
    #[arg(long = "max-mape", value_parser = parse_bound)]
    pub max_mape: Vec<(Metric, f64)>,
}

fn parse_bound(s: &str) -> Result<(Metric, f64), String> {
    // A bare PCT bounds step time (with --published: tokens/s/GPU, its inverse).
    if let Ok(pct) = s.trim().trim_end_matches('%').parse::<f64>() {
        return Ok((Metric::StepTime, pct));
    }
    let (m, p) = s.split_once('=').ok_or_else(|| format!("`{s}` is not METRIC=PCT (e.g. `step_time=10`)"))?;
    let metric = Metric::parse(m.trim()).ok_or_else(|| format!("unknown metric `{m}`; one of: step_time, peak_memory, power"))?;
    let pct = p.trim().trim_end_matches('%').parse::<f64>().map_err(|_| format!("`{p}` is not a percentage"))?;
    Ok((metric, pct))
}

/// The scenario a run record describes, with the record's own copy of its model file when it has one.
pub fn record_scenario(r: &RunRecord, calibration: Option<&str>) -> Result<crate::scenario::Scenario, crate::config::ConfigError> {
    let model = match &r.scenario.model_file {
        Some(f) => Some(crate::config::model::model_from_text(std::path::Path::new(&f.path), &f.text)?),
        None => None,
    };
    crate::config::scenario::build_with_model(&scenario_wire(r, calibration), None, model)
}

/// The scenario a run record describes, as `predict` would take it.
pub fn scenario_wire(r: &RunRecord, calibration: Option<&str>) -> ScenarioWire {
    let s = &r.scenario;
    let int = |x: u64| Some(x as i64);
    ScenarioWire {
        name: r.run_id.clone(),
        model: s.model.clone(),
        system: s.system.clone(),
        gpus: Some(s.n_gpus as i64),
        calibration: calibration.map(str::to_string),
        parallelism: ParallelWire {
            tp: Some(s.tp as i64),
            pp: Some(s.pp as i64),
            dp: Some(s.dp as i64),
            zero: Some(s.zero as i64),
            sp: s.sp,
            ..Default::default()
        },
        workload: WorkloadWire {
            mode: Some(s.mode.clone()),
            micro_batch: s.micro_batch.and_then(int),
            global_batch: s.global_batch.or_else(|| Some(s.micro_batch? * s.grad_accum.unwrap_or(1) * s.dp as u64)).and_then(int),
            seq: s.seq.and_then(int),
            batch: s.batch.and_then(int),
            kv_len: s.kv_len.and_then(int),
            precision: s.precision.clone(),
            recompute: s.recompute.clone(),
            stack: s.stack.clone(),
            ..Default::default()
        },
        options: OptionsWire::default(),
        ..Default::default()
    }
}

pub fn run(args: ValidateArgs) -> anyhow::Result<Outcome> {
    if let Some(file) = &args.published.published {
        return super::published::run(file, &args.published, &args.split, args.json, &args.max_mape);
    }
    anyhow::ensure!(matches!(args.engine.as_str(), "analytic" | "des"), "`--engine` = `{}` is not known\nhint: analytic or des", args.engine);
    anyhow::ensure!(matches!(args.split.as_str(), "fit" | "test" | "all"), "`--split` = `{}` is not known\nhint: fit, test or all", args.split);
    for p in [&args.csv, &args.plot].into_iter().flatten() {
        anyhow::ensure!(args.force || !p.exists(), "`{}` exists\nhint: pass --force to overwrite it", p.display());
    }
    let mut records = Vec::new();
    for f in &args.runs {
        records.extend(read_all(f)?);
    }
    let records: Vec<RunRecord> = records.into_iter().filter(|r| args.split == "all" || r.split.as_deref() == Some(args.split.as_str())).collect();
    // Serving runs are scored request by request against the serving simulator, not here.
    let (serving, records): (Vec<RunRecord>, Vec<RunRecord>) = records.into_iter().partition(|r| r.scenario.mode == "serve");
    if !serving.is_empty() {
        eprintln!("note: {} serving run(s) skipped: score them with `gpuplan serve --trace CSV --measured CSV` (their requests_csv)", serving.len());
    }
    anyhow::ensure!(!records.is_empty(), "no run records of split `{}` in {:?}", args.split, args.runs);

    let scored: Vec<Scored> = records
        .iter()
        .map(|r| {
            let prediction = record_scenario(r, args.calibration.as_deref()).map_err(|e| e.to_string()).and_then(|s| {
                if args.engine == "des" {
                    crate::sim::simulate(&s, &Default::default()).map(|x| x.prediction).map_err(|e| e.to_string())
                } else {
                    crate::analytic::predict(&s).map_err(|e| e.to_string())
                }
            });
            score(r, prediction.as_ref().map_err(Clone::clone))
        })
        .collect();
    let mut splits: Vec<String> = scored.iter().map(|s| s.split.clone()).collect();
    splits.sort();
    splits.dedup();
    let mut summaries: Vec<Summary> = splits.iter().map(|sp| summarize(sp, &scored.iter().filter(|s| &s.split == sp).collect::<Vec<_>>())).collect();
    if splits.len() > 1 {
        summaries.push(summarize("all", &scored.iter().collect::<Vec<_>>()));
    }

    if let Some(p) = &args.csv {
        write_atomic(p, csv_text(&scored)?.as_bytes())?;
        eprintln!("wrote {}", p.display());
    }
    if let Some(p) = &args.plot {
        plot(&scored, p).with_context(|| format!("plotting to `{}`", p.display()))?;
        eprintln!("wrote {}", p.display());
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&json(&scored, &summaries))?);
    } else {
        print!("{}", table(&scored, &summaries));
    }

    // Bounds apply to the whole selection.
    let overall = summaries.last().expect("at least one split");
    let mut failed = Vec::new();
    for (m, bound) in &args.max_mape {
        if let Some(v) = overall.mape_of(*m) {
            if v > *bound {
                failed.push(format!("{} MAPE {v:.1}% > {bound}%", m.name()));
            }
        }
    }
    if !args.max_mape.is_empty() && overall.oom_predicted < overall.oom_runs {
        failed.push(format!("{} of {} out-of-memory runs predicted to fit", overall.oom_runs - overall.oom_predicted, overall.oom_runs));
    }
    if failed.is_empty() {
        Ok(Outcome::Ok)
    } else {
        eprintln!("validation bounds exceeded: {}", failed.join("; "));
        Ok(Outcome::Infeasible)
    }
}

fn table(scored: &[Scored], summaries: &[Summary]) -> String {
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

fn json(scored: &[Scored], summaries: &[Summary]) -> serde_json::Value {
    serde_json::json!({
        "schema_version": 1,
        "runs": scored.iter().map(|s| serde_json::json!({
            "run_id": s.run_id, "split": s.split, "status": s.status, "scenario": s.describe,
            "predicted_fits": s.predicted_fits, "oom_agrees": s.oom_agrees, "problem": s.problem,
            "metrics": s.values.iter().map(|(m, p, x, e)| serde_json::json!({"metric": m.name(), "unit": m.unit(), "predicted": p, "measured": x, "error_pct": e})).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "summary": summaries.iter().map(|sm| serde_json::json!({
            "split": sm.split,
            "mape_pct": sm.mape.iter().map(|(m, v, n)| (m.name().to_string(), serde_json::json!({"mape": v, "n": n}))).collect::<serde_json::Map<_, _>>(),
            "oom_runs": sm.oom_runs, "oom_predicted": sm.oom_predicted, "false_oom": sm.false_oom, "unpredicted": sm.unpredicted,
        })).collect::<Vec<_>>(),
    })
}

fn csv_text(scored: &[Scored]) -> anyhow::Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(["run_id", "split", "status", "scenario", "metric", "unit", "predicted", "measured", "error_pct"])?;
    for s in scored {
        for (m, p, x, e) in &s.values {
            w.write_record([s.run_id.as_str(), &s.split, &s.status, &s.describe, m.name(), m.unit(), &format!("{p}"), &format!("{x}"), &format!("{e:.3}")])?;
        }
    }
    Ok(String::from_utf8(w.into_inner()?)?)
}

fn plot(scored: &[Scored], path: &std::path::Path) -> anyhow::Result<()> {
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
