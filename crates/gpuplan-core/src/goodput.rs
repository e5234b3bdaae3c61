//! Goodput: the share of wall-clock time a training job spends on training that is kept, once
//! failures, checkpoints and restarts are paid for; and from it tokens per day and the time to
//! train a token count.
//!
//! The model (exponential, independent failures; the job is one series system):
//! - failures per day of the job = the sum over components of (rate per unit-day x units in the
//!   job): nodes (`ceil(gpus / gpus_per_node)`), GPUs, or NICs (`nodes x nics_per_node`);
//! - checkpoint = the model state a restart needs: every parameter's weight and optimizer bytes
//!   of the stack (`memory::stack_memory`: Megatron 2 + 12 bytes, torch AMP 4 + 8); gradients are
//!   not saved. It is written (blocking) and read at the storage bandwidth;
//! - `Recovery::Restart` (what Llama 3's job did): every failure stops the whole job, which
//!   detects it, relaunches, waits for a spare node if none is free, reads the last checkpoint and
//!   redoes the work since. The expected wall time is Daly's (2006) closed form for exponential
//!   failures, `T_w = M e^(R/M) (e^((tau + delta)/M) - 1) T_s / tau`, so the fraction is
//!   `tau / (M e^(R/M) (e^((tau + delta)/M) - 1))` (M: job MTBF, R: detection + relaunch + spare
//!   wait + checkpoint read, delta: checkpoint write, tau: compute between checkpoints). The
//!   interval is given or Daly's higher-order optimum (`daly_interval`);
//! - `Recovery::Replica` (fault-tolerant data parallelism, e.g. torchft): a failure stops only
//!   the data-parallel replica it hits (tp x pp x cp GPUs); the others go on, so each failure
//!   costs `R / dp` of the job's time and nothing is redone. Periodic checkpoints for a loss of
//!   the whole job are not counted. With dp = 1 it is `Restart`;
//! - hot spares: failed nodes are repaired in a mean time `repair`; the job runs while at most
//!   `n` nodes are in repair (an Erlang loss system), and a failure that finds all `n` spares out
//!   waits for the first repair (`spare_wait`). Without `Spares`, a healthy node is always at hand
//!   (no wait).
//!
//! The band of the time to train is the Poisson spread of the failure count over the run (its
//! 5th and 95th percentiles, each failure costing the expected loss per failure); the failure
//! rates' own uncertainty is not in it.
//!
//! **Architecture Invariant:** pure arithmetic on checked numbers: no I/O; the rates and their
//! sources come from `config`.

use crate::memory::stack_memory;
use crate::scenario::Scenario;
use crate::units::{Bytes, BytesPerSec, Seconds};

/// Seconds per day.
pub const DAY_S: f64 = 86_400.0;

/// What a component's failure rate counts failures of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Per {
    Node,
    Gpu,
    Nic,
}

impl Per {
    pub fn name(self) -> &'static str {
        match self {
            Per::Node => "node",
            Per::Gpu => "gpu",
            Per::Nic => "nic",
        }
    }
    pub fn parse(s: &str) -> Option<Per> {
        Some(match s {
            "node" => Per::Node,
            "gpu" => Per::Gpu,
            "nic" => Per::Nic,
            _ => return None,
        })
    }
}

/// Failure rates summed by what they count: failures per unit-day.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Rates {
    pub per_node_day: f64,
    pub per_gpu_day: f64,
    pub per_nic_day: f64,
}

impl Rates {
    /// Add a rate of `per`.
    pub fn add(&mut self, per: Per, rate: f64) {
        match per {
            Per::Node => self.per_node_day += rate,
            Per::Gpu => self.per_gpu_day += rate,
            Per::Nic => self.per_nic_day += rate,
        }
    }
}

/// How the job recovers from a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    /// The whole job restarts from its last checkpoint.
    Restart,
    /// Only the failed data-parallel replica restarts; the others go on.
    Replica,
}

impl Recovery {
    pub fn name(self) -> &'static str {
        match self {
            Recovery::Restart => "restart",
            Recovery::Replica => "replica",
        }
    }
}

/// Hot spare nodes and how long a failed node takes to come back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spares {
    pub nodes: u32,
    pub repair: Seconds,
}

/// The goodput model's inputs, checked by `config` (rates >= 0, bandwidth > 0, times >= 0,
/// interval > 0).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    pub rates: Rates,
    /// Storage bandwidth the checkpoint is written and read at (the whole job's).
    pub storage_bandwidth: BytesPerSec,
    /// Compute time between checkpoints; `None`: Daly's optimum.
    pub interval: Option<Seconds>,
    /// From the failure to the job knowing it.
    pub detect: Seconds,
    /// Relaunch: rescheduling, process start, communicator setup (not the checkpoint read).
    pub restart: Seconds,
    pub spares: Option<Spares>,
    pub recovery: Recovery,
}

/// Units of each kind in the job: (nodes, GPUs, NICs).
pub fn units(s: &Scenario) -> (u64, u64, u64) {
    let per_node = s.system.gpus_per_node.max(1) as u64;
    let nodes = s.n_gpus.div_ceil(per_node);
    (nodes, s.n_gpus, nodes * s.system.nics_per_node as u64)
}

/// Failures per day of the job from a rate of `per`.
pub fn failures_per_day(s: &Scenario, per: Per, rate: f64) -> f64 {
    let (nodes, gpus, nics) = units(s);
    rate * match per {
        Per::Node => nodes,
        Per::Gpu => gpus,
        Per::Nic => nics,
    } as f64
}

/// Failures per day of the whole job.
pub fn job_failures_per_day(s: &Scenario, r: &Rates) -> f64 {
    failures_per_day(s, Per::Node, r.per_node_day) + failures_per_day(s, Per::Gpu, r.per_gpu_day) + failures_per_day(s, Per::Nic, r.per_nic_day)
}

/// The model state a restart reads: every parameter's weight and optimizer bytes under the
/// scenario's stack (gradients are recomputed, not saved).
pub fn checkpoint_bytes(s: &Scenario) -> Bytes {
    let sm = stack_memory(s.workload.stack);
    Bytes::new(s.model.params().total() * (sm.param + sm.optimizer))
}

/// Young's (1974) first-order optimum checkpoint interval, `sqrt(2 delta M)`.
pub fn young_interval(write: Seconds, mtbf: Seconds) -> Seconds {
    Seconds::new((2.0 * write.value() * mtbf.value()).sqrt())
}

/// Daly's (2006, FGCS 22(3) eq. 37) higher-order optimum compute time between checkpoints:
/// `sqrt(2 delta M) (1 + sqrt(delta / 2M) / 3 + (delta / 2M) / 9) - delta` for `delta < 2M`,
/// else `M`.
pub fn daly_interval(write: Seconds, mtbf: Seconds) -> Seconds {
    let (d, m) = (write.value(), mtbf.value());
    if d >= 2.0 * m {
        return mtbf;
    }
    let x = d / (2.0 * m);
    Seconds::new((2.0 * d * m).sqrt() * (1.0 + x.sqrt() / 3.0 + x / 9.0) - d)
}

/// Daly's expected-efficiency of a restart job: useful time over wall time with exponential
/// failures of mean `mtbf`, checkpoints of `write` every `interval` of compute, and `restart`
/// lost per failure before computing again.
pub fn restart_fraction(interval: Seconds, write: Seconds, restart: Seconds, mtbf: Seconds) -> f64 {
    let (t, d, r, m) = (interval.value(), write.value(), restart.value(), mtbf.value());
    if !m.is_finite() {
        // No failures: only the checkpoints cost (none without an interval).
        return if t.is_finite() { t / (t + d) } else { 1.0 };
    }
    t / (m * (r / m).exp() * ((t + d) / m).exp_m1())
}

/// Expected wait for a spare per failure: `B(S, a) x repair / (S + 1)`. Failed nodes are repaired
/// in a mean time `repair` (exponential); the job runs while at most `S` nodes are in repair, so
/// the number in repair is the Erlang loss system's (offered load `a = failures_per_s x repair`),
/// and a failure finds every spare out with Erlang's B probability; it then waits for the first of
/// the `S + 1` nodes in repair to return.
pub fn spare_wait(spares: Spares, failures_per_s: f64) -> Seconds {
    let h = spares.repair.value();
    let a = failures_per_s * h;
    if h <= 0.0 || a <= 0.0 {
        return Seconds::ZERO;
    }
    Seconds::new(erlang_b(spares.nodes, a) * h / (spares.nodes as f64 + 1.0))
}

/// Erlang's B (loss) probability for `servers` and offered load `a`, by the stable recursion
/// `B(0) = 1`, `B(k) = a B(k-1) / (k + a B(k-1))`.
pub fn erlang_b(servers: u32, a: f64) -> f64 {
    let mut b = 1.0;
    for k in 1..=servers {
        b = a * b / (k as f64 + a * b);
        if b == 0.0 {
            break;
        }
    }
    b
}

/// The `q` quantile of a Poisson count of mean `mean`: exact summation below a mean of 500, a
/// normal approximation with continuity correction above.
pub fn poisson_quantile(mean: f64, q: f64) -> f64 {
    if mean <= 0.0 {
        return 0.0;
    }
    if mean > 500.0 {
        return (mean + normal_quantile(q) * mean.sqrt() - 0.5).max(0.0).ceil();
    }
    let mut p = (-mean).exp();
    let mut cdf = p;
    let mut k = 0u64;
    while cdf < q && k < 100_000 {
        k += 1;
        p *= mean / k as f64;
        cdf += p;
    }
    k as f64
}

/// The standard normal quantile (Acklam's rational approximation, relative error < 1.2e-9).
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [-3.969683028665376e1, 2.209460984245205e2, -2.759285104469687e2, 1.38357751867269e2, -3.066479806614716e1, 2.506628277459239];
    const B: [f64; 5] = [-5.447609879822406e1, 1.615858368580409e2, -1.556989798598866e2, 6.680131188771972e1, -1.328068155288572e1];
    const C: [f64; 6] = [-7.784894002430293e-3, -3.223964580411365e-1, -2.400758277161838, -2.549732539343734, 4.374664141464968, 2.938163982698783];
    const D: [f64; 4] = [7.784695709041462e-3, 3.224671290700398e-1, 2.445134137142996, 3.754408661907416];
    let p = p.clamp(1e-12, 1.0 - 1e-12);
    let tail = |q: f64| (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5]) / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0);
    if p < 0.02425 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.02425 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

/// The time to train a token count, with the Poisson band of its failure count.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrainTime {
    pub tokens: f64,
    /// Expected wall time.
    pub wall: Seconds,
    /// Wall time at the 5th and 95th percentile of the failure count.
    pub wall_low: Seconds,
    pub wall_high: Seconds,
    pub failures: f64,
    pub failures_low: f64,
    pub failures_high: f64,
}

/// What the goodput model predicts for one scenario.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Goodput {
    pub recovery: Recovery,
    pub nodes: u64,
    pub failures_per_day: f64,
    /// Mean time between failures of the job (infinite with no failures).
    pub mtbf: Seconds,
    pub checkpoint: Bytes,
    /// Checkpoint write (blocking) and read time at the storage bandwidth.
    pub checkpoint_write: Seconds,
    /// Compute time between checkpoints (restart recovery).
    pub interval: Seconds,
    pub interval_optimal: bool,
    /// Expected wait for a spare node per failure.
    pub spare_wait: Seconds,
    /// Time from a failure until training goes on, rework aside: detection + relaunch + spare wait
    /// + checkpoint read.
    pub recovery_time: Seconds,
    /// Effective training-time fraction: kept training time over wall time.
    pub fraction: f64,
    /// Failure-free throughput (the engine's) and the goodput-adjusted one.
    pub tokens_per_s: f64,
    pub tokens_per_day: f64,
    pub train: Option<TrainTime>,
}

/// The goodput of `s` running at `tokens_per_s` (failure-free), and the time to train
/// `train_tokens` when given.
pub fn goodput(s: &Scenario, tokens_per_s: f64, p: &Params, train_tokens: Option<f64>) -> Goodput {
    let (nodes, _, _) = units(s);
    let per_day = job_failures_per_day(s, &p.rates);
    let per_s = per_day / DAY_S;
    let mtbf = Seconds::new(if per_s > 0.0 { 1.0 / per_s } else { f64::INFINITY });
    let checkpoint = checkpoint_bytes(s);
    let write = checkpoint / p.storage_bandwidth;
    let wait = p.spares.map_or(Seconds::ZERO, |sp| spare_wait(sp, per_s));
    let recovery_time = p.detect + p.restart + wait + write;
    let dp = s.parallel.dp.max(1) as f64;
    let recovery = if dp > 1.0 { p.recovery } else { Recovery::Restart };
    let (interval, optimal) = match p.interval {
        Some(t) => (t, false),
        None if mtbf.is_finite() => (daly_interval(write, mtbf), true),
        None => (Seconds::new(f64::INFINITY), true),
    };
    let fraction = match recovery {
        Recovery::Restart => restart_fraction(interval, write, recovery_time, mtbf),
        Recovery::Replica => (1.0 - per_s * recovery_time.value() / dp).max(0.0),
    };
    let fraction = if fraction.is_finite() { fraction.clamp(0.0, 1.0) } else { 0.0 };
    let good = tokens_per_s * fraction;
    let train = train_tokens.filter(|t| *t > 0.0 && good > 0.0).map(|tokens| {
        let compute = tokens / tokens_per_s;
        let wall = tokens / good;
        // The part of the wall time that does not depend on failures (checkpoint writes), and the
        // expected cost of one failure.
        let base = match recovery {
            Recovery::Restart if interval.value().is_finite() => compute * (interval + write).value() / interval.value(),
            _ => compute,
        };
        let failures = per_s * wall;
        let per_failure = if failures > 0.0 { (wall - base) / failures } else { 0.0 };
        let (lo, hi) = (poisson_quantile(failures, 0.05), poisson_quantile(failures, 0.95));
        TrainTime {
            tokens,
            wall: Seconds::new(wall),
            wall_low: Seconds::new(base + lo * per_failure),
            wall_high: Seconds::new(base + hi * per_failure),
            failures,
            failures_low: lo,
            failures_high: hi,
        }
    });
    Goodput {
        recovery,
        nodes,
        failures_per_day: per_day,
        mtbf,
        checkpoint,
        checkpoint_write: write,
        interval,
        interval_optimal: optimal,
        spare_wait: wait,
        recovery_time,
        fraction,
        tokens_per_s,
        tokens_per_day: good * DAY_S,
        train,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn daly_optimum_minimises_the_closed_form_wall_time() {
        // Golden-section search of Daly's wall time against his closed-form optimum.
        for (d, m, r) in [(3.0, 6_500.0, 600.0), (60.0, 3_600.0, 300.0), (600.0, 86_400.0, 0.0), (20.0, 1_000.0, 50.0)] {
            let f = |t: f64| restart_fraction(Seconds::new(t), Seconds::new(d), Seconds::new(r), Seconds::new(m));
            let (mut a, mut b) = (1e-3 * m, 2.0 * m);
            let g = (5f64.sqrt() - 1.0) / 2.0;
            for _ in 0..200 {
                let (c, e) = (b - g * (b - a), a + g * (b - a));
                if f(c) > f(e) {
                    b = e
                } else {
                    a = c
                }
            }
            let best = f((a + b) / 2.0);
            let daly = daly_interval(Seconds::new(d), Seconds::new(m)).value();
            // Daly's formula is a series: its efficiency is within 1e-4 of the true optimum's.
            assert!(best - f(daly) < 1e-4, "d={d} m={m}: optimum {} at {}, Daly {daly} gives {}", best, (a + b) / 2.0, f(daly));
            // and for a small write over MTBF it is Young's sqrt(2 d M) to first order.
            let young = young_interval(Seconds::new(d), Seconds::new(m)).value();
            assert!((daly - young).abs() / young < (d / (2.0 * m)).sqrt(), "d={d} m={m}: Daly {daly} Young {young}");
        }
        assert_eq!(daly_interval(Seconds::new(10.0), Seconds::new(4.0)).value(), 4.0);
    }

    #[test]
    fn restart_fraction_is_one_minus_the_first_order_losses_when_small() {
        let (t, d, r, m) = (200.0, 2.0, 300.0, 100_000.0);
        let f = restart_fraction(Seconds::new(t), Seconds::new(d), Seconds::new(r), Seconds::new(m));
        let first = 1.0 - d / t - t / (2.0 * m) - r / m;
        // Second-order terms ((delta / tau)^2 = 1e-4 here) are what is left.
        assert!((f - first).abs() < 2e-4, "{f} vs {first}");
        assert_eq!(restart_fraction(Seconds::new(t), Seconds::new(d), Seconds::new(r), Seconds::new(f64::INFINITY)), t / (t + d));
        let inf = Seconds::new(f64::INFINITY);
        assert_eq!(restart_fraction(inf, Seconds::new(d), Seconds::new(r), inf), 1.0);
    }

    #[test]
    fn spare_wait_vanishes_with_many_spares_and_is_a_repair_with_none() {
        let h = Seconds::new(3600.0 * 24.0);
        let rate = 1.0 / 3600.0;
        let wait = |n| spare_wait(Spares { nodes: n, repair: h }, rate).value();
        assert_eq!(wait(0), h.value());
        assert!(wait(0) > wait(20) && wait(20) > wait(40) && wait(40) > wait(60), "{} {} {}", wait(20), wait(40), wait(60));
        assert!(wait(60) < 1.0, "{}", wait(60));
        // Erlang B(1, a) = a / (1 + a); B(2, 2) = 0.4 (textbook values).
        assert!((erlang_b(1, 3.0) - 0.75).abs() < 1e-12);
        assert!((erlang_b(2, 2.0) - 0.4).abs() < 1e-12);
    }

    #[test]
    fn poisson_quantiles_bracket_the_mean() {
        assert_eq!(poisson_quantile(0.0, 0.95), 0.0);
        // Poisson(10): P(X <= 4) = 0.029, P(X <= 5) = 0.067; P(X <= 15) = 0.951, P(X <= 14) = 0.917.
        assert_eq!(poisson_quantile(10.0, 0.05), 5.0);
        assert_eq!(poisson_quantile(10.0, 0.95), 15.0);
        let (lo, hi) = (poisson_quantile(1000.0, 0.05), poisson_quantile(1000.0, 0.95));
        assert!((lo - 948.0).abs() <= 1.0 && (hi - 1052.0).abs() <= 1.0, "{lo} {hi}");
        assert!((normal_quantile(0.95) - 1.6448536).abs() < 1e-6);
    }
}
