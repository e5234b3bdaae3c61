//! `gpuplan serve` against published serving rows (TensorRT-LLM's performance overview, issue 20):
//! offline output tokens/s of trtllm-bench (every request queued at t = 0, the whole run's output
//! tokens over its duration) and online mean TTFT and mean ITL of Triton at a Poisson load. Each
//! distinct (configuration, load) is simulated once with the serving DES; its rows read their
//! metric from the run's summary. Error = predicted / measured - 1; MAPE and bias per split and
//! metric, per GPU system and model, as `validate::published` computes them.
//!
//! No I/O: `gpuplan_config::serving_published` reads and maps the rows, the CLI builds each
//! deployment; this module makes the requests, simulates (in parallel) and scores.

use std::collections::BTreeMap;

use rayon::prelude::*;

use super::published::{stats, NotScored, SkipKind, Skipped, Stats};
use crate::serve::arrivals::{Arrival, Rng};
use crate::serve::stats::{summarize, Summary};
use crate::serve::{simulate, Deployment, RunOptions};
use crate::serve::{RequestRecord, ServeResult};

/// What a row measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Metric {
    /// Offline output tokens/s of the whole TP x PP group.
    OfflineOutputTput,
    /// Online mean time to first token, seconds (the CSV's ms are converted when compared).
    MeanTtft,
    /// Online mean inter-token latency (the first token excluded), in the CSV's ms: every gap
    /// between two streamed tokens of every request pooled ([`pooled_itl_s`], as the benchmark
    /// client computes it).
    MeanItl,
}

impl Metric {
    pub const ALL: [Metric; 3] = [Metric::OfflineOutputTput, Metric::MeanTtft, Metric::MeanItl];
    pub fn name(self) -> &'static str {
        match self {
            Metric::OfflineOutputTput => "offline_output_tps",
            Metric::MeanTtft => "mean_ttft",
            Metric::MeanItl => "mean_itl",
        }
    }
    pub fn unit(self) -> &'static str {
        match self {
            Metric::OfflineOutputTput => "tokens/s",
            _ => "ms",
        }
    }
    pub fn parse(s: &str) -> Option<Metric> {
        Metric::ALL.into_iter().find(|m| m.name() == s)
    }
    /// The metric of a run, in the CSV's unit.
    pub fn of(self, r: &RunMetrics) -> f64 {
        match self {
            Metric::OfflineOutputTput => r.summary.output_token_throughput,
            Metric::MeanTtft => r.summary.ttft.mean * 1e3,
            Metric::MeanItl => r.pooled_itl_s * 1e3,
        }
    }
}

/// What the rows read off one simulated run: its summary, and the mean inter-token latency as the
/// benchmark client of the online rows computes it ([`pooled_itl_s`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RunMetrics {
    pub summary: Summary,
    pub pooled_itl_s: f64,
}

impl RunMetrics {
    pub fn of(r: &ServeResult) -> RunMetrics {
        RunMetrics { summary: summarize(r), pooled_itl_s: pooled_itl_s(r.requests.iter()) }
    }
}

/// Mean inter-token latency with every gap between two consecutive tokens of every finished
/// request pooled: sum over requests of (last token - first token) over sum of (output tokens -
/// 1), seconds (NaN when no request has two tokens).
///
/// This is the "Mean ITL" that vLLM's `benchmarks/benchmark_serving.py` prints (read in the
/// vllm 0.6.3 sdist, PyPI, sha256 03e69029...a9c5, 2026-11-24): `calculate_metrics` extends one
/// list, `itls += outputs[i].itl`, with each request's gaps between streamed chunks (the first
/// chunk's time is its TTFT, not a gap) and prints `np.mean(itls)`; its per-request average is
/// the separate "Mean TPOT" (`(latency - ttft) / (output_len - 1)`, the [`Summary::tpot`] here).
/// The v0.14 online rows' columns (request throughput, mean TTFT, mean ITL, total token and
/// output token throughput) are the lines that script prints, and its `tensorrt-llm` backend
/// streams from Triton's `generate_stream` endpoint one response per token; so the rows are
/// read as that client's output (the rows do not name their client: docs/trtllm-residuals.md
/// section 10). With equal output lengths both means are the same; with unequal ones the pooled
/// mean weights each request by its gaps.
pub fn pooled_itl_s<'a>(requests: impl Iterator<Item = &'a RequestRecord>) -> f64 {
    let (gap_s, gaps) =
        requests.filter(|x| x.finished() && x.output_len > 1).fold((0.0, 0u64), |(t, n), x| (t + (x.finish - x.first_token), n + (x.output_len - 1) as u64));
    if gaps == 0 {
        f64::NAN
    } else {
        gap_s / gaps as f64
    }
}

/// How the requests were offered.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Load {
    /// trtllm-bench's offline mode (and an online row at QPS `INF`): every request queued at t = 0.
    Offline { requests: u32 },
    /// Poisson arrivals at `qps`, `requests` of them.
    Poisson { qps: f64, requests: u32 },
}

impl Load {
    pub fn describe(&self) -> String {
        match self {
            Load::Offline { requests } => format!("offline x{requests}"),
            Load::Poisson { qps, requests } => format!("poisson {qps} qps x{requests}"),
        }
    }
    /// The requests, of fixed lengths (the rows' synthetic datasets are uniform), seeded.
    pub fn arrivals(&self, input_len: u32, output_len: u32, seed: u64) -> Vec<Arrival> {
        match *self {
            Load::Offline { requests } => offline_arrivals(requests, input_len, output_len),
            Load::Poisson { qps, requests } => {
                let mut rng = Rng::new(seed);
                let mut at = 0.0;
                (0..requests)
                    .map(|i| {
                        if i > 0 {
                            at += rng.exponential(1.0 / qps);
                        }
                        Arrival { at, input_len, output_len }
                    })
                    .collect()
            }
        }
    }
}

/// `n` requests all queued at t = 0 (trtllm-bench's offline throughput mode).
pub fn offline_arrivals(n: u32, input_len: u32, output_len: u32) -> Vec<Arrival> {
    vec![Arrival { at: 0.0, input_len, output_len }; n as usize]
}

/// One mapped row.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    /// The row id (`dev_row`).
    pub id: String,
    /// `fit` or `test`.
    pub split: String,
    pub config_id: String,
    pub metric: Metric,
    pub model: String,
    pub moe: bool,
    /// Catalog system.
    pub system: String,
    /// gpuplan precision (bf16, fp8, fp4).
    pub precision: String,
    /// The row's TP size: its GPUs per pipeline stage (under attention DP, the attention-DP
    /// ranks, each running attention at TP 1: the row's `tp`, or its `num_gpus` where a
    /// PyTorch-backend MoE row prints more GPUs than TP).
    pub tp: u32,
    pub pp: u32,
    /// MoE expert parallelism (`None`: the experts split by TP).
    pub ep: Option<u32>,
    /// Attention DP over the `tp` GPUs around expert-parallel MoE (TensorRT-LLM's
    /// `enable_attention_dp`).
    pub attention_dp: bool,
    pub input_len: u32,
    pub output_len: u32,
    pub load: Load,
    /// Chunked prefill (context) on: TensorRT-LLM runs no prompt longer than `max_num_tokens`
    /// without it, so rows with longer prompts (20,000 tokens) turn it on.
    pub chunked_prefill: bool,
    /// Served through Triton's TensorRT-LLM backend (the online rows): its front end's time per
    /// request (`cost::fitted::TRITON_FRONTEND_US`) is in their TTFT.
    pub triton: bool,
    /// Decode iterations replay CUDA graphs: the v1.0 PyTorch backend's rows ("CUDA graphs with
    /// padding", their notes); the v0.14 and v0.17 rows ran TensorRT engines, whose CUDA graph
    /// mode is off by default and not stated as on.
    pub cuda_graphs: bool,
    /// TensorRT-LLM's `kv_cache_free_gpu_mem_fraction` where the row's notes state it.
    pub kv_free_fraction: Option<f64>,
    /// As published (tokens/s, or ms).
    pub measured: f64,
    pub describe: String,
}

impl Case {
    /// Rows that share one simulation: the same configuration under the same load.
    pub fn run_key(&self) -> String {
        format!(
            "{}|{}|{}|{}|{}|{:?}|{}|{}|{}|{:?}|{}|{}|{}|{:?}",
            self.model,
            self.system,
            self.precision,
            self.tp,
            self.pp,
            self.ep,
            self.attention_dp,
            self.input_len,
            self.output_len,
            self.load,
            self.chunked_prefill,
            self.cuda_graphs,
            self.triton,
            self.kv_free_fraction
        )
    }
}

/// A row scored.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    pub case: Case,
    pub predicted: f64,
    /// predicted / measured - 1.
    pub error: f64,
    /// Of the run: mean decode batch and KV occupancy, requests preempted.
    pub mean_batch: f64,
    pub max_kv_occupancy: f64,
    pub preempted: u64,
}

/// The seed of the Poisson draws of every online row (one stream per row; the published figures
/// are one run each).
pub const SEED: u64 = 0;

/// Simulate each distinct run once (in parallel) and score its rows. `runs[i]` is the deployment
/// of `cases[i]` (rows of one run key share one).
pub fn score_all(cases: Vec<Case>, deployments: Vec<Deployment>) -> (Vec<Scored>, Vec<NotScored>) {
    let mut keys: BTreeMap<String, usize> = BTreeMap::new();
    let mut firsts = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        keys.entry(c.run_key()).or_insert_with(|| {
            firsts.push(i);
            firsts.len() - 1
        });
    }
    let summaries: Vec<Result<RunMetrics, String>> = firsts
        .par_iter()
        .map(|&i| {
            let c = &cases[i];
            let arr = c.load.arrivals(c.input_len, c.output_len, SEED);
            // Online rows went through Triton's front end; offline rows called the engine.
            let frontend_s = if c.triton { crate::cost::fitted::fitted().triton_frontend_us * 1e-6 } else { 0.0 };
            let opts = RunOptions { bin_s: 1e9, frontend_s, ..RunOptions::default() };
            let streamed;
            let d = if c.triton {
                streamed = streamed_through_triton(&deployments[i]);
                &streamed
            } else {
                &deployments[i]
            };
            simulate(d, &arr, &opts).map(|r| RunMetrics::of(&r)).map_err(|e| e.to_string())
        })
        .collect();
    let mut scored = Vec::new();
    let mut not = Vec::new();
    for c in cases {
        match &summaries[keys[&c.run_key()]] {
            Ok(r) if r.summary.completed > 0 && r.summary.rejected == 0 => {
                let (predicted, s) = (c.metric.of(r), &r.summary);
                scored.push(Scored {
                    error: predicted / c.measured - 1.0,
                    predicted,
                    mean_batch: s.mean_batch,
                    max_kv_occupancy: s.max_kv_occupancy,
                    preempted: s.preempted_requests,
                    case: c,
                });
            }
            Ok(RunMetrics { summary: s, .. }) => not.push(NotScored {
                id: c.id.clone(),
                split: c.split.clone(),
                describe: c.describe.clone(),
                skipped: Skipped::new(SkipKind::Unexpressible, format!("the simulated run completed {} and rejected {} requests", s.completed, s.rejected)),
            }),
            Err(e) => not.push(NotScored {
                id: c.id.clone(),
                split: c.split.clone(),
                describe: c.describe.clone(),
                skipped: Skipped::new(SkipKind::Unexpressible, format!("gpuplan refuses: {}", e.lines().next().unwrap_or_default())),
            }),
        }
    }
    (scored, not)
}

/// `d` as the online rows ran it: TensorRT-LLM v0.14 engines served through Triton's
/// TensorRT-LLM backend, which streams every generated token as its own response. Each `trtllm`
/// pool whose host time is the stack's default pays `cost::fitted::TRITON_STREAM_SEQ_US` more per
/// sequence and iteration, serially (on top of the engine's own per-sequence term,
/// `TRTLLM_HOST_US`); a pool given its own host time keeps it. Each `trtllm` pool whose token
/// budget is the engine default (`serve::engines::TRTLLM`) runs with the budget fitted for those
/// engines, `cost::fitted::TRITON_MAX_NUM_TOKENS`, which the rows do not state.
pub fn streamed_through_triton(d: &Deployment) -> Deployment {
    let f = crate::cost::fitted::fitted();
    let mut d = d.clone();
    for p in &mut d.pools {
        if p.scenario.workload.stack != crate::workload::Stack::Trtllm {
            continue;
        }
        if p.sched.host_us.is_none() {
            let [it, seq, layer] = f.trtllm_host_us;
            p.sched.host_us = Some([it, seq + f.triton_stream_seq_us, layer, 0.0]);
        }
        if p.sched.token_budget == crate::serve::engines::TRTLLM.token_budget {
            p.sched.token_budget = f.triton_max_num_tokens as u32;
        }
    }
    d
}

/// Statistics of one split and metric.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricSummary {
    pub split: String,
    pub metric: Metric,
    pub all: Option<Stats>,
    pub systems: BTreeMap<String, Stats>,
    pub models: BTreeMap<String, Stats>,
}

/// The whole scoring.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub summaries: Vec<MetricSummary>,
    /// Worst first.
    pub scored: Vec<Scored>,
    pub not_scored: Vec<NotScored>,
}

fn grouped(rows: &[&Scored], key: impl Fn(&Scored) -> String) -> BTreeMap<String, Stats> {
    let mut g: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for r in rows {
        g.entry(key(r)).or_default().push(r.error);
    }
    g.into_iter().filter_map(|(k, v)| stats(&v).map(|s| (k, s))).collect()
}

pub fn report(mut scored: Vec<Scored>, mut not_scored: Vec<NotScored>) -> Report {
    scored.sort_by(|a, b| b.error.abs().total_cmp(&a.error.abs()).then_with(|| a.case.id.cmp(&b.case.id)));
    not_scored.sort_by_key(|n| n.id.parse::<u64>().unwrap_or(u64::MAX));
    let mut summaries = Vec::new();
    for split in super::published::SPLITS {
        for metric in Metric::ALL {
            let sel: Vec<&Scored> = scored.iter().filter(|x| x.case.metric == metric && (split == "all" || x.case.split == split)).collect();
            summaries.push(MetricSummary {
                split: split.to_string(),
                metric,
                all: stats(&sel.iter().map(|x| x.error).collect::<Vec<_>>()),
                systems: grouped(&sel, |x| x.case.system.clone()),
                models: grouped(&sel, |x| x.case.model.clone()),
            });
        }
    }
    Report { summaries, scored, not_scored }
}

impl Report {
    pub fn summary(&self, split: &str, metric: Metric) -> Option<&MetricSummary> {
        self.summaries.iter().find(|s| s.split == split && s.metric == metric)
    }
    pub fn count(&self, kind: SkipKind) -> usize {
        self.not_scored.iter().filter(|n| n.skipped.kind == kind).count()
    }
    /// The bounds a split breaks: a metric's MAPE above its bound (percent).
    pub fn bound_failures(&self, split: &str, bounds: &[(Metric, f64)]) -> Vec<String> {
        let mut out = Vec::new();
        for &(m, b) in bounds {
            if let Some(s) = self.summary(split, m).and_then(|s| s.all) {
                if s.mape > b {
                    out.push(format!("{split} split: {} MAPE {:.1}% > {b}%", m.name(), s.mape));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poisson_arrivals_are_seeded_and_at_the_rate() {
        let l = Load::Poisson { qps: 4.0, requests: 2000 };
        let a = l.arrivals(100, 10, 7);
        assert_eq!(a, l.arrivals(100, 10, 7));
        assert_eq!(a.len(), 2000);
        assert_eq!(a[0].at, 0.0);
        let rate = 1999.0 / a.last().unwrap().at;
        assert!((rate / 4.0 - 1.0).abs() < 0.06, "{rate}");
        let o = Load::Offline { requests: 3 }.arrivals(5, 6, 0);
        assert!(o.iter().all(|x| x.at == 0.0 && x.input_len == 5 && x.output_len == 6) && o.len() == 3);
    }

    fn req(first_token: f64, finish: f64, output_len: u32) -> RequestRecord {
        RequestRecord { arrival: 0.0, input_len: 10, output_len, scheduled: 0.0, first_token, finish, preemptions: 0, rejected: false }
    }

    #[test]
    fn mean_itl_pools_every_gap_as_benchmark_serving_does() {
        // Two requests: 3 gaps of 10 ms, and 1 gap of 50 ms. benchmark_serving's np.mean over the
        // pooled gaps is 80 / 4 = 20 ms; the per-request mean (TPOT) would be (10 + 50) / 2 = 30.
        let rs = [req(0.1, 0.13, 4), req(0.2, 0.25, 2), req(0.3, 0.3, 1), req(0.4, f64::INFINITY, 9)];
        assert!((pooled_itl_s(rs.iter()) - 0.020).abs() < 1e-12, "{}", pooled_itl_s(rs.iter()));
        // Equal lengths: the pooled mean is the per-request mean.
        let eq = [req(0.0, 0.3, 4), req(0.0, 0.6, 4)];
        assert!((pooled_itl_s(eq.iter()) - 0.15).abs() < 1e-12);
        // No request with two tokens: undefined, not zero.
        assert!(pooled_itl_s([req(0.1, 0.1, 1)].iter()).is_nan());
    }

    #[test]
    fn metrics_read_the_summary_in_the_csv_units() {
        assert_eq!(Metric::parse("mean_itl"), Some(Metric::MeanItl));
        assert_eq!(Metric::MeanTtft.unit(), "ms");
    }
}
