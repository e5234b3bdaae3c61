//! Summary metrics of a serving run, with the definitions of vLLM's `benchmark_serving.py`
//! (`calculate_metrics`), which TensorRT-LLM's benchmark tools share:
//!
//! - TTFT: first token time - request send time (queueing and prefill included).
//! - TPOT: per request with more than one output token, (E2E latency - TTFT) / (output tokens - 1):
//!   the first token excluded.
//! - E2E latency: last token time - send time.
//! - Throughput: completed requests, output tokens, and input + output tokens of completed
//!   requests, each divided by the benchmark duration: the first send (t = 0) to the last
//!   completion.
//! - Percentiles: numpy's default (linear interpolation between closest ranks), as vLLM.
//!
//! Also: queueing delay (send to first scheduled), and per-pool batch size and KV occupancy.

use super::{RequestRecord, ServeResult};

/// Percentile `p` (0-100) of sorted values, numpy's `linear` method. NaN for no values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = p / 100.0 * (sorted.len() - 1) as f64;
    let lo = rank.floor() as usize;
    let hi = rank.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
}

pub const PERCENTILES: [f64; 4] = [50.0, 90.0, 95.0, 99.0];

/// Mean and the percentiles of `PERCENTILES`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dist {
    pub n: usize,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

impl Dist {
    pub fn of(mut v: Vec<f64>) -> Dist {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let mean = if n == 0 { f64::NAN } else { v.iter().sum::<f64>() / n as f64 };
        Dist {
            n,
            mean,
            p50: percentile(&v, 50.0),
            p90: percentile(&v, 90.0),
            p95: percentile(&v, 95.0),
            p99: percentile(&v, 99.0),
            max: v.last().copied().unwrap_or(f64::NAN),
        }
    }
    pub fn at(&self, p: f64) -> f64 {
        match p as u32 {
            50 => self.p50,
            90 => self.p90,
            95 => self.p95,
            99 => self.p99,
            _ => f64::NAN,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub arrived: u64,
    pub completed: u64,
    pub rejected: u64,
    pub unfinished: u64,
    /// First send (t = 0) to the last completion.
    pub duration_s: f64,
    pub request_throughput: f64,
    pub output_token_throughput: f64,
    pub total_token_throughput: f64,
    pub offered_qps: f64,
    pub ttft: Dist,
    pub tpot: Dist,
    pub e2e: Dist,
    pub queueing: Dist,
    pub preempted_requests: u64,
    /// Time-weighted over busy time, all pools.
    pub mean_batch: f64,
    pub mean_kv_occupancy: f64,
    pub max_kv_occupancy: f64,
    /// Average power of one GPU over the horizon (busy and idle).
    pub avg_gpu_power_w: f64,
    pub gpu_energy_j: f64,
    /// GPU + host energy per output token, and with the PUE.
    pub j_per_output_token: f64,
    pub j_per_output_token_facility: f64,
    /// Little's law over the horizon: mean requests in the system, and arrival rate x mean time
    /// in the system of the requests that arrived.
    pub mean_in_system: f64,
    pub mean_queued: f64,
}

/// TTFT, TPOT (excluding the first token), end-to-end latency and queueing of requests.
fn latencies<'a>(requests: impl Iterator<Item = &'a RequestRecord> + Clone) -> [Dist; 4] {
    let done = requests.clone().filter(|x| x.finished());
    [
        Dist::of(done.clone().map(|x| x.first_token - x.arrival).collect()),
        Dist::of(done.clone().filter(|x| x.output_len > 1).map(|x| (x.finish - x.first_token) / (x.output_len - 1) as f64).collect()),
        Dist::of(done.map(|x| x.finish - x.arrival).collect()),
        Dist::of(requests.filter(|x| x.scheduled.is_finite()).map(|x| x.scheduled - x.arrival).collect()),
    ]
}

/// Several replications of one run (other seeds): the latency distributions over all their
/// requests pooled (a tail percentile of one replication rests on a few requests and draws),
/// every other figure averaged over the replications.
pub fn summarize_pooled(rs: &[&ServeResult]) -> Summary {
    let sums: Vec<Summary> = rs.iter().map(|r| summarize(r)).collect();
    let n = sums.len().max(1) as f64;
    let mean = |f: fn(&Summary) -> f64| sums.iter().map(f).sum::<f64>() / n;
    let count = |f: fn(&Summary) -> u64| (sums.iter().map(f).sum::<u64>() as f64 / n).round() as u64;
    let [ttft, tpot, e2e, queueing] = latencies(rs.iter().flat_map(|r| r.requests.iter()));
    Summary {
        arrived: count(|s| s.arrived),
        completed: count(|s| s.completed),
        rejected: count(|s| s.rejected),
        unfinished: count(|s| s.unfinished),
        duration_s: mean(|s| s.duration_s),
        request_throughput: mean(|s| s.request_throughput),
        output_token_throughput: mean(|s| s.output_token_throughput),
        total_token_throughput: mean(|s| s.total_token_throughput),
        offered_qps: mean(|s| s.offered_qps),
        ttft,
        tpot,
        e2e,
        queueing,
        preempted_requests: count(|s| s.preempted_requests),
        mean_batch: mean(|s| s.mean_batch),
        mean_kv_occupancy: mean(|s| s.mean_kv_occupancy),
        max_kv_occupancy: mean(|s| s.max_kv_occupancy),
        avg_gpu_power_w: mean(|s| s.avg_gpu_power_w),
        gpu_energy_j: mean(|s| s.gpu_energy_j),
        j_per_output_token: mean(|s| s.j_per_output_token),
        j_per_output_token_facility: mean(|s| s.j_per_output_token_facility),
        mean_in_system: mean(|s| s.mean_in_system),
        mean_queued: mean(|s| s.mean_queued),
    }
}

pub fn summarize(r: &ServeResult) -> Summary {
    let done: Vec<&RequestRecord> = r.requests.iter().filter(|x| x.finished()).collect();
    let arrived = r.arrived;
    let rejected = r.requests.iter().filter(|x| x.rejected).count() as u64;
    let duration = done.iter().map(|x| x.finish).fold(0.0, f64::max);
    let out_tokens: u64 = done.iter().map(|x| x.output_len as u64).sum();
    let in_tokens: u64 = done.iter().map(|x| x.input_len as u64).sum();
    let per = |n: f64| if duration > 0.0 { n / duration } else { f64::NAN };
    let [ttft, tpot, e2e, queueing] = latencies(r.requests.iter());
    let last_arrival = r.requests.iter().map(|x| x.arrival).fold(0.0, f64::max);
    let (busy, batch_area, kv_area) = r.pools.iter().fold((0.0, 0.0, 0.0), |a, p| (a.0 + p.busy_s, a.1 + p.batch_area, a.2 + p.kv_area));
    let gpu_energy: f64 = r.pools.iter().map(|p| p.busy_energy_j + p.idle_energy_j).sum();
    let j = (gpu_energy + r.host_energy_j) / out_tokens.max(1) as f64;
    Summary {
        arrived,
        completed: done.len() as u64,
        rejected,
        unfinished: r.in_flight_at_end,
        duration_s: duration,
        request_throughput: per(done.len() as f64),
        output_token_throughput: per(out_tokens as f64),
        total_token_throughput: per((in_tokens + out_tokens) as f64),
        offered_qps: if last_arrival > 0.0 { (r.requests.len() as f64 - 1.0) / last_arrival } else { f64::NAN },
        ttft,
        tpot,
        e2e,
        queueing,
        preempted_requests: r.requests.iter().filter(|x| x.preemptions > 0).count() as u64,
        mean_batch: if busy > 0.0 { batch_area / busy } else { 0.0 },
        mean_kv_occupancy: if busy > 0.0 { kv_area / busy } else { 0.0 },
        max_kv_occupancy: r.pools.iter().map(|p| p.max_kv_occupancy).fold(0.0, f64::max),
        avg_gpu_power_w: if r.horizon_s > 0.0 { gpu_energy / r.horizon_s / r.n_gpus as f64 } else { f64::NAN },
        gpu_energy_j: gpu_energy,
        j_per_output_token: j,
        j_per_output_token_facility: j * r.pue,
        mean_in_system: if r.horizon_s > 0.0 { r.in_system_area / r.horizon_s } else { 0.0 },
        mean_queued: if r.horizon_s > 0.0 { r.queued_area / r.horizon_s } else { 0.0 },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_matches_numpy_linear() {
        // numpy.percentile([1, 2, 3, 4], [50, 90, 99]) = [2.5, 3.7, 3.97]
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 50.0), 2.5);
        assert!((percentile(&v, 90.0) - 3.7).abs() < 1e-12);
        assert!((percentile(&v, 99.0) - 3.97).abs() < 1e-12);
        assert_eq!(percentile(&[5.0], 99.0), 5.0);
        assert!(percentile(&[], 50.0).is_nan());
    }
}
