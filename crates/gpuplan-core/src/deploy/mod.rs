//! Deployment arithmetic the commands share, apart from the engines: the price of a million
//! output tokens, predicted-against-measured serving metrics and their bounds, hardware what-if
//! variants of a system, and the GPU counts a plan searches.

pub mod launch;

use crate::hardware::{ScaleUp, Source, Sourced, System};
use crate::serve::stats::Summary;
use crate::units::{Bytes, BytesPerSec, Watts};

/// USD per million tokens of `n_gpus` GPUs at `gpu_hour_usd` each producing `tokens_per_s`.
pub fn usd_per_million_tokens(gpu_hour_usd: f64, n_gpus: u64, tokens_per_s: f64) -> f64 {
    gpu_hour_usd * n_gpus as f64 / 3600.0 / tokens_per_s * 1e6
}

/// One serving metric, predicted and measured.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricRow {
    pub name: &'static str,
    pub predicted: f64,
    pub measured: f64,
    /// A latency (bounded by the latency bound) or a throughput.
    pub latency: bool,
}

impl MetricRow {
    /// Signed error of the prediction, percent of the measurement.
    pub fn error_pct(&self) -> f64 {
        (self.predicted - self.measured) / self.measured * 100.0
    }
}

/// P50/P99 TTFT and TPOT and output-token throughput, predicted against measured.
pub fn measured_rows(predicted: &Summary, measured: &Summary) -> Vec<MetricRow> {
    let row = |name, predicted, measured, latency| MetricRow { name, predicted, measured, latency };
    vec![
        row("ttft_p50_s", predicted.ttft.p50, measured.ttft.p50, true),
        row("ttft_p99_s", predicted.ttft.p99, measured.ttft.p99, true),
        row("tpot_p50_s", predicted.tpot.p50, measured.tpot.p50, true),
        row("tpot_p99_s", predicted.tpot.p99, measured.tpot.p99, true),
        row("output_tokens_per_s", predicted.output_token_throughput, measured.output_token_throughput, false),
    ]
}

/// The rows whose error exceeds its bound (percent; none: unbounded), described.
pub fn exceeded(rows: &[MetricRow], max_latency_pct: Option<f64>, max_throughput_pct: Option<f64>) -> Vec<String> {
    let mut failed = Vec::new();
    for r in rows {
        if let Some(b) = if r.latency { max_latency_pct } else { max_throughput_pct } {
            let e = r.error_pct();
            if !e.is_finite() || e.abs() > b {
                failed.push(format!("{} {e:+.1}% (bound {b}%)", r.name));
            }
        }
    }
    failed
}

/// Apply a what-if variant, `key=value[,key=value]` (nic-gbit per NIC, tdp-w, hbm-gib and
/// nvlink-gb per GPU), to a system. Overridden numbers carry their origin.
pub fn apply_variant(sys: &mut System, spec: &str) -> Result<(), String> {
    let src = |k: &str, v: f64| Source::Unsourced(format!("what-if override `{k}={v}` given on the command line"));
    for part in spec.split(',') {
        let (k, v) = part.split_once('=').ok_or_else(|| format!("`--variant` entry `{part}` is not `key=value`"))?;
        let (k, v) = (k.trim(), v.trim());
        let x: f64 = v.parse().map_err(|e| format!("`--variant` `{k}` = `{v}` is not a number: {e}"))?;
        if !(x > 0.0 && x.is_finite()) {
            return Err(format!("`--variant` `{k}` = {x} must be positive"));
        }
        match k {
            "nic-gbit" => match &mut sys.nic_bandwidth {
                Some(nic) => *nic = Sourced::new(BytesPerSec::gbit_per_s(x), src(k, x)),
                None => {
                    return Err(format!(
                    "`--variant` `nic-gbit`: `{}` has no scale-out network to change\nhint: use a system file with `nic_bandwidth_gbit_per_s` and `[fabric]`",
                    sys.name
                ))
                }
            },
            "tdp-w" => {
                sys.gpu.tdp.value = Watts::new(x);
                sys.gpu.tdp.source = src(k, x);
            }
            "hbm-gib" => {
                sys.gpu.hbm_capacity.value = Bytes::gib(x);
                sys.gpu.hbm_capacity.source = src(k, x);
            }
            "nvlink-gb" => match &mut sys.gpu.nvlink_bandwidth {
                Some(link) if sys.scale_up == ScaleUp::NvLink => *link = Sourced::new(BytesPerSec::gb_per_s(x), src(k, x)),
                _ => {
                    return Err(format!(
                        "`--variant` `nvlink-gb`: `{}` has no NVLink (its GPUs talk over {})\nhint: one of: nic-gbit, tdp-w, hbm-gib",
                        sys.name,
                        sys.scale_up.name()
                    ))
                }
            },
            other => return Err(format!("`--variant` key `{other}` is not known\nhint: one of: nic-gbit, tdp-w, hbm-gib, nvlink-gb")),
        }
    }
    Ok(())
}

/// GPU counts to plan over from `lo..=hi`: powers of two, whole nodes times powers of two, and
/// the ends.
pub fn gpu_range(lo: u64, hi: u64, gpus_per_node: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..40).map(|i| 1u64 << i).chain((0..40).map(|i| gpus_per_node << i)).filter(|n| *n >= lo && *n <= hi).collect();
    v.push(lo);
    v.push(hi);
    v.sort_unstable();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_range_has_powers_of_two_whole_nodes_and_the_ends() {
        assert_eq!(gpu_range(3, 40, 8), vec![3, 4, 8, 16, 32, 40]);
        assert_eq!(gpu_range(8, 8, 8), vec![8]);
    }

    #[test]
    fn price_per_million_tokens() {
        // 8 GPUs at $2/h making 1000 tokens/s: $16/h over 3.6M tokens.
        assert!((usd_per_million_tokens(2.0, 8, 1000.0) - 16.0 / 3.6).abs() < 1e-12);
    }
}
