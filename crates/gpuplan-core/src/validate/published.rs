//! Predictions against published throughput rows (NVIDIA Megatron-Bridge / NeMo performance
//! summaries, issue 17): tokens/s/GPU error per row, MAPE and signed bias per slice (system x
//! dense/MoE x precision x scale bucket) and per split (fit, test, all), the worst rows with their
//! predicted breakdown, and the rows that could not be expressed, each with its reason.
//!
//! No I/O: `gpuplan_config::published` reads and maps the rows; the caller prints. The metric is
//! tokens/s/GPU; error = predicted / measured - 1; MAPE = mean |error|, bias = mean error (both in
//! percent), as `scripts/score_published.py` computes them.

use std::collections::BTreeMap;

use rayon::prelude::*;

use crate::analytic::{self, Prediction};
use crate::scenario::Scenario;

/// One mapped row: what it is, where it ran, what it measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    /// The row id (`dev_row`).
    pub id: String,
    /// `fit`, `test` or `-`.
    pub split: String,
    /// Catalog system name.
    pub system: String,
    pub moe: bool,
    /// Precision slice label: bf16, fp8 (per-tensor, delayed or current), fp8-block, mxfp8, nvfp4.
    pub precision: String,
    /// The recipe the row ran, as far as it is known (gpuplan approximates it by its precision).
    pub recipe: String,
    pub gpus: u64,
    /// Catalog model name.
    pub model: String,
    pub describe: String,
    /// Measured tokens/s/GPU.
    pub measured: f64,
    pub notes: Vec<String>,
}

/// Why a row was not scored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SkipKind {
    /// The published row lacks something (`config_complete` != yes, no precision).
    Incomplete,
    /// Complete, but gpuplan cannot express it (MTP, LoRA, layers not divisible, a refusal...).
    Unexpressible,
    /// The system is not mapped.
    Unsupported,
}

impl SkipKind {
    pub fn name(self) -> &'static str {
        match self {
            SkipKind::Incomplete => "incomplete",
            SkipKind::Unexpressible => "unexpressible",
            SkipKind::Unsupported => "unsupported",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Skipped {
    pub kind: SkipKind,
    pub reason: String,
}

impl Skipped {
    pub fn new(kind: SkipKind, reason: impl Into<String>) -> Self {
        Skipped { kind, reason: reason.into() }
    }
}

/// A row that was not scored, with its id, split and label.
#[derive(Debug, Clone, PartialEq)]
pub struct NotScored {
    pub id: String,
    pub split: String,
    pub describe: String,
    pub skipped: Skipped,
}

/// A row scored.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    pub case: Case,
    /// Predicted tokens/s/GPU.
    pub predicted: f64,
    /// predicted / measured - 1.
    pub error: f64,
    pub step_time_s: f64,
    pub fits: bool,
    /// The peak GPU's memory plan: (component, GiB) in `MemoryPlan::components` order, and its
    /// capacity in GiB.
    pub memory_gib: Vec<(&'static str, f64)>,
    pub capacity_gib: f64,
    pub sm_clock_mhz: f64,
    pub mfu: f64,
    /// Share of the predicted step per breakdown part, largest first (parts above 0 only).
    pub breakdown: Vec<(&'static str, f64)>,
}

/// Score one row against its prediction.
pub fn score(case: Case, n_gpus: u64, p: &Prediction) -> Scored {
    let predicted = p.tokens_per_s / n_gpus as f64;
    let parts = p.breakdown.parts();
    let total: f64 = parts.iter().map(|(_, s)| s.value()).sum();
    let mut breakdown: Vec<(&'static str, f64)> = parts.iter().filter(|(_, s)| s.value() > 0.0).map(|(k, s)| (*k, s.value() / total)).collect();
    breakdown.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
    Scored {
        error: predicted / case.measured - 1.0,
        case,
        predicted,
        step_time_s: p.step_time.value(),
        fits: p.memory.fits(),
        memory_gib: p.memory.components().iter().map(|(k, b)| (*k, b.as_gib())).collect(),
        capacity_gib: p.memory.capacity.as_gib(),
        sm_clock_mhz: p.power.clock.as_mhz(),
        mfu: p.mfu,
        breakdown,
    }
}

/// Predict every scenario with the analytic engine, in parallel; results in input order.
pub fn predict_all(scenarios: &[Scenario]) -> Vec<Result<Prediction, String>> {
    scenarios.par_iter().map(|s| analytic::predict(s).map_err(|e| e.to_string())).collect()
}

/// The scale bucket of a GPU count.
pub fn scale_bucket(gpus: u64) -> &'static str {
    match gpus {
        0..=8 => "8",
        9..=64 => "16-64",
        65..=256 => "128-256",
        _ => "512+",
    }
}

/// A slice: system x dense/MoE x precision x scale bucket.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Slice {
    pub system: String,
    pub kind: &'static str,
    pub precision: String,
    pub scale: &'static str,
}

impl Slice {
    pub fn of(c: &Case) -> Slice {
        Slice { system: c.system.clone(), kind: kind(c), precision: c.precision.clone(), scale: scale_bucket(c.gpus) }
    }
    pub fn label(&self) -> String {
        format!("{}/{}/{}/{}", self.system, self.kind, self.precision, self.scale)
    }
}

fn kind(c: &Case) -> &'static str {
    if c.moe {
        "moe"
    } else {
        "dense"
    }
}

/// Error statistics of a set of rows (percent, but the median ratio predicted / measured).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    pub n: usize,
    pub mape: f64,
    pub bias: f64,
    pub median_ratio: f64,
}

pub fn stats(errors: &[f64]) -> Option<Stats> {
    if errors.is_empty() {
        return None;
    }
    let n = errors.len();
    let mut ratios: Vec<f64> = errors.iter().map(|e| 1.0 + e).collect();
    ratios.sort_by(f64::total_cmp);
    let median_ratio = if n % 2 == 1 { ratios[n / 2] } else { (ratios[n / 2 - 1] + ratios[n / 2]) / 2.0 };
    Some(Stats { n, mape: 100.0 * errors.iter().map(|e| e.abs()).sum::<f64>() / n as f64, bias: 100.0 * errors.iter().sum::<f64>() / n as f64, median_ratio })
}

/// The statistics of one split.
#[derive(Debug, Clone, PartialEq)]
pub struct SplitSummary {
    /// `fit`, `test` or `all`.
    pub split: String,
    pub all: Option<Stats>,
    pub slices: BTreeMap<Slice, Stats>,
    pub systems: BTreeMap<String, Stats>,
    pub kinds: BTreeMap<&'static str, Stats>,
    pub models: BTreeMap<String, Stats>,
}

fn grouped<K: Ord>(rows: &[&Scored], key: impl Fn(&Scored) -> K) -> BTreeMap<K, Stats> {
    let mut g: BTreeMap<K, Vec<f64>> = BTreeMap::new();
    for r in rows {
        g.entry(key(r)).or_default().push(r.error);
    }
    g.into_iter().filter_map(|(k, v)| stats(&v).map(|s| (k, s))).collect()
}

pub fn summarize(split: &str, scored: &[Scored]) -> SplitSummary {
    let sel: Vec<&Scored> = scored.iter().filter(|x| split == "all" || x.case.split == split).collect();
    SplitSummary {
        split: split.to_string(),
        all: stats(&sel.iter().map(|x| x.error).collect::<Vec<_>>()),
        slices: grouped(&sel, |x| Slice::of(&x.case)),
        systems: grouped(&sel, |x| x.case.system.clone()),
        kinds: grouped(&sel, |x| kind(&x.case)),
        models: grouped(&sel, |x| x.case.model.clone()),
    }
}

/// The whole scoring: summaries of fit, test and all, the rows by |error| (worst first), and the
/// rows not scored.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub summaries: Vec<SplitSummary>,
    pub scored: Vec<Scored>,
    pub not_scored: Vec<NotScored>,
}

pub const SPLITS: [&str; 3] = ["fit", "test", "all"];

pub fn report(mut scored: Vec<Scored>, not_scored: Vec<NotScored>) -> Report {
    scored.sort_by(|a, b| b.error.abs().total_cmp(&a.error.abs()).then_with(|| a.case.id.cmp(&b.case.id)));
    Report { summaries: SPLITS.iter().map(|s| summarize(s, &scored)).collect(), scored, not_scored }
}

impl Report {
    pub fn summary(&self, split: &str) -> Option<&SplitSummary> {
        self.summaries.iter().find(|s| s.split == split)
    }
    pub fn count(&self, kind: SkipKind) -> usize {
        self.not_scored.iter().filter(|n| n.skipped.kind == kind).count()
    }
    /// The bounds a selection breaks: MAPE above `max_mape`, |bias| above `max_bias` (percent).
    pub fn bound_failures(&self, split: &str, max_mape: Option<f64>, max_bias: Option<f64>) -> Vec<String> {
        let mut out = Vec::new();
        let Some(s) = self.summary(split).and_then(|s| s.all) else {
            return out;
        };
        if let Some(m) = max_mape.filter(|m| s.mape > *m) {
            out.push(format!("{split} split: tokens/s/GPU MAPE {:.1}% > {m}%", s.mape));
        }
        if let Some(b) = max_bias.filter(|b| s.bias.abs() > *b) {
            out.push(format!("{split} split: |bias| {:.1}% > {b}%", s.bias.abs()));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_are_percent_and_median_ratio() {
        let s = stats(&[0.1, -0.3, 0.2]).unwrap();
        assert_eq!(s.n, 3);
        assert!((s.mape - 20.0).abs() < 1e-9);
        assert!((s.bias - 0.0).abs() < 1e-9);
        assert!((s.median_ratio - 1.1).abs() < 1e-9);
        assert_eq!(stats(&[0.0, 0.5]).unwrap().median_ratio, 1.25);
        assert!(stats(&[]).is_none());
    }

    #[test]
    fn scale_buckets() {
        assert_eq!([8, 16, 64, 128, 256, 512, 1536].map(scale_bucket), ["8", "16-64", "16-64", "128-256", "128-256", "512+", "512+"]);
    }
}
