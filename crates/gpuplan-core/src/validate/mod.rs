//! Predictions against measured run records: error per metric, MAPE per split, worst cases, and
//! out-of-memory agreement. No I/O: the caller reads the records and loads the scenarios.

pub mod published;
pub mod serving;
pub mod torchtitan;

use crate::record::RunRecord;
use crate::step::Prediction;

/// The metrics compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Metric {
    StepTime,
    PeakMemory,
    Power,
}

impl Metric {
    pub const ALL: [Metric; 3] = [Metric::StepTime, Metric::PeakMemory, Metric::Power];
    pub fn name(self) -> &'static str {
        match self {
            Metric::StepTime => "step_time",
            Metric::PeakMemory => "peak_memory",
            Metric::Power => "power",
        }
    }
    pub fn unit(self) -> &'static str {
        match self {
            Metric::StepTime => "s",
            Metric::PeakMemory => "GiB",
            Metric::Power => "W",
        }
    }
    pub fn parse(s: &str) -> Option<Metric> {
        Metric::ALL.into_iter().find(|m| m.name() == s || (s == "step" && *m == Metric::StepTime) || (s == "memory" && *m == Metric::PeakMemory))
    }
    /// The measured value of a run, in the metric's display unit.
    pub fn measured(self, r: &RunRecord) -> Option<f64> {
        let m = &r.metrics;
        match self {
            Metric::StepTime => m.step_time_s_median,
            // The busiest GPU's peak as NVML saw it (context and allocator cache included); for a
            // job that took a host probe in its own process, the job's own peak
            // (`RunRecord::scored_peak_memory`).
            Metric::PeakMemory => r.scored_peak_memory().ok().flatten().map(|(b, _)| b.value() / GIB),
            Metric::Power => {
                let v: Vec<f64> = m.avg_power_w_per_gpu.iter().flatten().copied().collect();
                (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
            }
        }
    }
    pub fn predicted(self, p: &Prediction) -> f64 {
        match self {
            Metric::StepTime => p.step_time.value(),
            Metric::PeakMemory => p.memory.total().value() / GIB,
            Metric::Power => p.power.gpu_power.value(),
        }
    }
}

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// One run scored: predicted vs measured per metric, or why it could not be.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    pub run_id: String,
    pub split: String,
    pub status: String,
    pub describe: String,
    /// (metric, predicted, measured, signed error %)
    pub values: Vec<(Metric, f64, f64, f64)>,
    pub predicted_fits: Option<bool>,
    /// An OOM run counts as right only if the prediction says it does not fit; an OK run predicted
    /// not to fit is wrong too.
    pub oom_agrees: bool,
    pub problem: Option<String>,
    /// Which measured value the peak memory is, where it is not the NVML peak
    /// (`PeakSource::describe`: records whose job took an in-process host probe).
    pub memory_from: Option<String>,
    /// Which idle power the predicted power's idle term took, where the record measured its own
    /// card's (`job.reported.idle_w`): the run's own, or the profile's under `--profile-idle`.
    /// `None` for every other record (priced at the profile's or datasheet's `idle_w`, as always).
    pub power_idle_from: Option<String>,
}

pub fn score(r: &RunRecord, p: Result<&Prediction, String>) -> Scored {
    let describe = describe(r);
    let run_id = r.run_id.clone().unwrap_or_else(|| "?".into());
    let split = r.split.clone().unwrap_or_else(|| "-".into());
    let peak = if r.is_ok() { r.scored_peak_memory() } else { Ok(None) };
    let memory_from = peak.as_ref().ok().and_then(|p| p.as_ref()).and_then(|(_, src)| src.describe());
    let p = match peak {
        Err(e) => Err(format!("its peak memory: {e}")),
        Ok(_) => p,
    };
    let (values, predicted_fits, oom_agrees, problem) = match p {
        Err(e) => (vec![], None, false, Some(e)),
        Ok(p) => {
            let fits = p.memory.fits();
            let values = if r.is_ok() {
                Metric::ALL
                    .into_iter()
                    .filter_map(|m| m.measured(r).filter(|v| *v > 0.0).map(|meas| (m, m.predicted(p), meas, (m.predicted(p) - meas) / meas * 100.0)))
                    .collect()
            } else {
                vec![]
            };
            let oom_agrees = if r.is_oom() { !fits } else { !r.is_ok() || fits };
            (values, Some(fits), oom_agrees, None)
        }
    };
    Scored { run_id, split, status: r.status.clone(), describe, values, predicted_fits, oom_agrees, problem, memory_from, power_idle_from: None }
}

fn describe(r: &RunRecord) -> String {
    let s = &r.scenario;
    let mut d = format!("{} {}x{} {}", s.model.as_deref().unwrap_or("?"), s.n_gpus, s.system.as_deref().unwrap_or("?"), s.mode);
    if s.mode == "train" {
        d += &format!(" mb{} seq{}", s.micro_batch.unwrap_or(0), s.seq.unwrap_or(0));
        if let Some(rc) = s.recompute.as_deref().filter(|r| *r != "none") {
            d += &format!(" rc={rc}");
        }
        if s.tp > 1 {
            d += &format!(" tp{}{}", s.tp, if s.sp == Some(false) { "" } else { "+sp" });
        }
        if s.zero == 3 {
            d += " fsdp";
        } else if s.dp > 1 {
            d += " ddp";
        }
    } else {
        d += &format!(" b{} seq{} kv{}", s.batch.unwrap_or(0), s.seq.unwrap_or(0), s.kv_len.unwrap_or(0));
    }
    match (r.hf_stack(), s.stack.as_deref()) {
        (Some((st, Some(p))), _) => d += &format!(" {st} {p}"),
        (Some((st, None)), _) | (None, Some(st)) => d += &format!(" {st}"),
        (None, None) => {}
    }
    d
}

/// Mean absolute percentage error per metric over runs, with counts.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub split: String,
    pub mape: Vec<(Metric, f64, usize)>,
    pub oom_runs: usize,
    pub oom_predicted: usize,
    pub false_oom: usize,
    pub unpredicted: usize,
}

pub fn summarize(split: &str, scored: &[&Scored]) -> Summary {
    let mape = Metric::ALL
        .into_iter()
        .filter_map(|m| {
            let errs: Vec<f64> = scored.iter().flat_map(|s| s.values.iter()).filter(|v| v.0 == m).map(|v| v.3.abs()).collect();
            (!errs.is_empty()).then(|| (m, errs.iter().sum::<f64>() / errs.len() as f64, errs.len()))
        })
        .collect();
    Summary {
        split: split.to_string(),
        mape,
        oom_runs: scored.iter().filter(|s| s.status == "oom").count(),
        oom_predicted: scored.iter().filter(|s| s.status == "oom" && s.predicted_fits == Some(false)).count(),
        false_oom: scored.iter().filter(|s| s.status == "ok" && s.predicted_fits == Some(false)).count(),
        unpredicted: scored.iter().filter(|s| s.problem.is_some()).count(),
    }
}

impl Summary {
    pub fn mape_of(&self, m: Metric) -> Option<f64> {
        self.mape.iter().find(|x| x.0 == m).map(|x| x.1)
    }
}
