//! `gpuplan validate --runs FILE...`: predict every measured run and score the predictions.

use std::path::PathBuf;

use anyhow::Context;

use super::{write_atomic, Outcome};
use crate::config::record::{apply_run_idle, scenario_with_host as record_scenario};
use crate::measure::record::{read_all, RunRecord};
use crate::report::views::validate::{csv_text, json, plot, table};
use crate::validate::{score, summarize, Metric, Scored, Summary};

#[derive(clap::Args, Debug)]
pub struct ValidateArgs {
    /// Run-record files (.jsonl) written by `gpuplan measure`
    #[arg(long, required_unless_present_any = ["published", "serving"], num_args = 1..)]
    pub runs: Vec<PathBuf>,
    #[command(flatten)]
    pub published: super::published::PublishedArgs,
    /// Which engine predicts: analytic or des
    #[arg(long, default_value = "analytic")]
    pub engine: String,
    /// Calibration profile for every prediction (a profile.toml, its folder, or a profile name)
    #[arg(long)]
    pub calibration: Option<String>,
    /// Predict with the calibration profile's host numbers even for records that carry a host
    /// probe of their own period (`job.reported.host_probe_*`); by default such a record's probe
    /// replaces the profile's plan build, decode layer and step and op dispatch times
    #[arg(long)]
    pub profile_host: bool,
    /// Price power at the calibration profile's (or datasheet's) idle even for records that
    /// measured their own card's idle (`job.reported.idle_w`, hf_train.py --host-probe); by
    /// default such a record's idle replaces the profile's in the power model's idle term
    #[arg(long)]
    pub profile_idle: bool,
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

pub fn run(args: ValidateArgs) -> anyhow::Result<Outcome> {
    if let Some(file) = &args.published.serving {
        return super::serving_published::run(file, &args.published, &args.split, args.json, &args.max_mape);
    }
    if let Some(file) = &args.published.published {
        if super::torchtitan_published::is_torchtitan_file(file)? {
            return super::torchtitan_published::run(file, &args.published, &args.split, args.json, &args.max_mape);
        }
        return super::published::run(file, &args.published, &args.split, args.json, &args.max_mape);
    }
    anyhow::ensure!(matches!(args.engine.as_str(), "analytic" | "des"), "`--engine` = `{}` is not known\nhint: analytic or des", args.engine);
    super::ensure_split(&args.split)?;
    let inputs: Vec<(&str, Option<&std::path::Path>)> = args.runs.iter().map(|p| ("--runs", Some(p.as_path()))).collect();
    super::check_chart_path("--plot", args.plot.as_deref())?;
    super::check_outputs(args.force, &[("--csv", args.csv.as_deref()), ("--plot", args.plot.as_deref())], &inputs)?;
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
            let mut own_idle = None;
            let prediction = record_scenario(r, args.calibration.as_deref(), !args.profile_host).map_err(|e| e.to_string()).and_then(|mut s| {
                own_idle = apply_run_idle(&mut s, r).map_err(|e| e.to_string())?;
                if args.profile_idle {
                    s.options.run_idle = None;
                }
                if args.engine == "des" {
                    crate::sim::simulate(&s, &Default::default()).map(|x| x.prediction).map_err(|e| e.to_string())
                } else {
                    crate::analytic::predict(&s).map_err(|e| e.to_string())
                }
            });
            let mut scored = score(r, prediction.as_ref().map_err(Clone::clone));
            scored.power_idle_from = own_idle.map(|w| {
                if args.profile_idle {
                    format!("the profile's idle_w (--profile-idle; the run's own {:.1} W unused)", w.value())
                } else {
                    format!("the run's own {:.1} W (job.reported.idle_w)", w.value())
                }
            });
            scored
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
        super::write_atomic_with(p, |tmp| plot(&scored, tmp)).with_context(|| format!("plotting to `{}`", p.display()))?;
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
    Ok(super::bounds_outcome(&failed))
}
