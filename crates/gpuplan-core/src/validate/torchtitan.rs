//! Predictions against torchtitan's published Llama 3 / 3.1 training rows: tokens/s/GPU and (where
//! published) memory GiB per GPU, MAPE and signed bias per split (fit, test, all), by model, by
//! technique tag (a row counts under each of its tags: torch.compile or eager, TP, async TP, PP,
//! CP, float8 tensorwise or rowwise, the recompute) and by system.
//!
//! No I/O: `gpuplan_config::torchtitan_published` reads and maps the rows; the caller prints. Errors
//! as in [`super::published`]: error = predicted / measured - 1; MAPE = mean |error|, bias = mean
//! error (percent).

use std::collections::BTreeMap;

use super::published::{stats, Case, NotScored, Scored, Stats, SPLITS};

/// One mapped torchtitan row: the published case, its technique tags and its published memory.
#[derive(Debug, Clone, PartialEq)]
pub struct TitanCase {
    pub case: Case,
    pub techniques: Vec<String>,
    /// Published memory per GPU (GiB, the max over GPUs), where the row gives it.
    pub measured_memory_gib: Option<f64>,
}

/// A row scored: throughput as [`Scored`], memory against the predicted peak.
#[derive(Debug, Clone, PartialEq)]
pub struct TitanScored {
    pub scored: Scored,
    pub techniques: Vec<String>,
    pub measured_memory_gib: Option<f64>,
    /// Predicted peak memory per GPU (GiB).
    pub peak_gib: f64,
    /// predicted / measured - 1 of memory, where published.
    pub memory_error: Option<f64>,
}

/// Score one row against its prediction.
pub fn score(tc: TitanCase, n_gpus: u64, p: &crate::analytic::Prediction) -> TitanScored {
    let scored = super::published::score(tc.case, n_gpus, p);
    let peak_gib = p.memory.total().as_gib();
    TitanScored {
        memory_error: tc.measured_memory_gib.filter(|m| *m > 0.0).map(|m| peak_gib / m - 1.0),
        scored,
        techniques: tc.techniques,
        measured_memory_gib: tc.measured_memory_gib,
        peak_gib,
    }
}

/// Statistics of one metric over a split: all rows, by model, by technique tag, by system.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MetricSummary {
    pub all: Option<Stats>,
    pub models: BTreeMap<String, Stats>,
    pub techniques: BTreeMap<String, Stats>,
    pub systems: BTreeMap<String, Stats>,
}

fn metric_summary(rows: &[&TitanScored], error: impl Fn(&TitanScored) -> Option<f64>) -> MetricSummary {
    let mut models: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut techniques: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut systems: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut all = Vec::new();
    for r in rows {
        let Some(e) = error(r) else { continue };
        all.push(e);
        models.entry(r.scored.case.model.clone()).or_default().push(e);
        systems.entry(r.scored.case.system.clone()).or_default().push(e);
        for t in &r.techniques {
            techniques.entry(t.clone()).or_default().push(e);
        }
    }
    let done = |g: BTreeMap<String, Vec<f64>>| g.into_iter().filter_map(|(k, v)| stats(&v).map(|s| (k, s))).collect();
    MetricSummary { all: stats(&all), models: done(models), techniques: done(techniques), systems: done(systems) }
}

/// The statistics of one split.
#[derive(Debug, Clone, PartialEq)]
pub struct TitanSummary {
    /// `fit`, `test` or `all`.
    pub split: String,
    pub throughput: MetricSummary,
    pub memory: MetricSummary,
}

pub fn summarize(split: &str, scored: &[TitanScored]) -> TitanSummary {
    let sel: Vec<&TitanScored> = scored.iter().filter(|x| split == "all" || x.scored.case.split == split).collect();
    TitanSummary { split: split.to_string(), throughput: metric_summary(&sel, |x| Some(x.scored.error)), memory: metric_summary(&sel, |x| x.memory_error) }
}

/// The whole scoring: summaries of fit, test and all, the rows by |throughput error| (worst first),
/// and the rows not scored.
#[derive(Debug, Clone, PartialEq)]
pub struct TitanReport {
    pub summaries: Vec<TitanSummary>,
    pub scored: Vec<TitanScored>,
    pub not_scored: Vec<NotScored>,
}

pub fn report(mut scored: Vec<TitanScored>, not_scored: Vec<NotScored>) -> TitanReport {
    scored.sort_by(|a, b| b.scored.error.abs().total_cmp(&a.scored.error.abs()).then_with(|| a.scored.case.id.cmp(&b.scored.case.id)));
    TitanReport { summaries: SPLITS.iter().map(|s| summarize(s, &scored)).collect(), scored, not_scored }
}

impl TitanReport {
    pub fn summary(&self, split: &str) -> Option<&TitanSummary> {
        self.summaries.iter().find(|s| s.split == split)
    }
    /// The bounds a selection breaks: throughput MAPE above `max_mape`, |throughput bias| above
    /// `max_bias`, memory MAPE above `max_memory_mape` (percent).
    pub fn bound_failures(&self, split: &str, max_mape: Option<f64>, max_bias: Option<f64>, max_memory_mape: Option<f64>) -> Vec<String> {
        let mut out = Vec::new();
        let Some(s) = self.summary(split) else { return out };
        if let Some(t) = s.throughput.all {
            if let Some(m) = max_mape.filter(|m| t.mape > *m) {
                out.push(format!("{split} split: tokens/s/GPU MAPE {:.1}% > {m}%", t.mape));
            }
            if let Some(b) = max_bias.filter(|b| t.bias.abs() > *b) {
                out.push(format!("{split} split: tokens/s/GPU |bias| {:.1}% > {b}%", t.bias.abs()));
            }
        }
        if let (Some(t), Some(m)) = (s.memory.all, max_memory_mape) {
            if t.mape > m {
                out.push(format!("{split} split: memory MAPE {:.1}% > {m}%", t.mape));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, split: &str, error: f64, mem: Option<f64>, tags: &[&str]) -> TitanScored {
        let case = Case {
            id: id.into(),
            split: split.into(),
            system: "grand-teton-h100".into(),
            moe: false,
            precision: "bf16".into(),
            recipe: "BF16".into(),
            gpus: 8,
            model: "llama-3.1-8b".into(),
            describe: String::new(),
            measured: 100.0,
            notes: vec![],
        };
        TitanScored {
            scored: Scored {
                case,
                predicted: 100.0 * (1.0 + error),
                error,
                step_time_s: 1.0,
                fits: true,
                memory_gib: vec![],
                capacity_gib: 95.0,
                sm_clock_mhz: 1500.0,
                mfu: 0.4,
                breakdown: vec![],
            },
            techniques: tags.iter().map(|t| t.to_string()).collect(),
            measured_memory_gib: mem.map(|_| 50.0),
            peak_gib: 50.0 * (1.0 + mem.unwrap_or(0.0)),
            memory_error: mem,
        }
    }

    #[test]
    fn splits_tags_and_memory_are_summarized_apart() {
        let r = report(
            vec![
                row("0", "fit", 0.1, Some(0.2), &["eager", "FSDP"]),
                row("1", "test", -0.3, None, &["torch.compile", "FSDP"]),
                row("2", "fit", -0.1, Some(-0.4), &["torch.compile", "FSDP"]),
            ],
            vec![],
        );
        assert_eq!(r.scored[0].scored.case.id, "1", "worst first");
        let fit = r.summary("fit").unwrap();
        assert_eq!(fit.throughput.all.unwrap().n, 2);
        assert!((fit.throughput.all.unwrap().mape - 10.0).abs() < 1e-9);
        assert!((fit.memory.all.unwrap().mape - 30.0).abs() < 1e-9);
        let all = r.summary("all").unwrap();
        assert_eq!(all.throughput.techniques["FSDP"].n, 3);
        assert_eq!(all.throughput.techniques["torch.compile"].n, 2);
        assert_eq!(all.memory.all.unwrap().n, 2, "rows without a published memory are not in the memory stats");
        assert_eq!(r.bound_failures("fit", Some(5.0), None, Some(40.0)).len(), 1);
        assert!(r.bound_failures("fit", Some(11.0), Some(1.0), Some(31.0)).is_empty());
    }
}
