//! Batch-size advice for one parallel layout.
//!
//! Training: the largest micro-batch that fits (with the layout's recompute policy), the gradient
//! accumulation that reaches the global batch, and throughput over micro-batch sizes.
//! Serving: the largest batch per replica whose KV cache fits and whose prefill time (time to first
//! token of the batch) and decode step time (time per output token) meet the targets.
//!
//! Memory and latency grow with the batch, so the largest passing batch is found by bisection.

use crate::analytic;
use crate::memory;
use crate::scenario::Scenario;
use crate::workload::Mode;

/// One point of the micro-batch (training) or batch (serving) curve.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub batch: u64,
    /// Training: accumulation steps to reach the global batch (`None` where it does not divide).
    pub accumulation: Option<u64>,
    pub memory_bytes: f64,
    pub capacity_bytes: f64,
    pub fits: bool,
    /// `None` where the point cannot be predicted (does not divide the global batch).
    pub tokens_per_s: Option<f64>,
    pub mfu: Option<f64>,
    pub ttft_s: Option<f64>,
    pub tpot_s: Option<f64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TrainAdvice {
    /// Largest micro-batch that fits, whether or not it divides the per-replica batch.
    pub largest_fitting: Option<u64>,
    /// Largest fitting micro-batch that divides `global_batch / dp`, and its accumulation.
    pub chosen: Option<(u64, u64)>,
    pub per_replica_batch: u64,
    pub curve: Vec<Point>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ServeAdvice {
    /// Largest batch per replica that fits and meets the targets.
    pub largest: Option<u64>,
    /// Largest batch whose KV cache fits, targets aside.
    pub largest_fitting: Option<u64>,
    pub curve: Vec<Point>,
}

fn fits(s: &Scenario, headroom: f64) -> (bool, f64, f64) {
    let m = memory::plan(&s.model, &s.parallel, &s.workload, s.system.gpu.hbm_capacity.value);
    let (t, c) = (m.total().value(), m.capacity.value());
    (t <= c * (1.0 - headroom), t, c)
}

/// Largest `b` in `1..=hi` with `ok(b)`, assuming `ok` holds up to some point and not after.
fn bisect(hi: u64, mut ok: impl FnMut(u64) -> bool) -> Option<u64> {
    if hi == 0 || !ok(1) {
        return None;
    }
    let (mut lo, mut hi) = (1u64, hi);
    if ok(hi) {
        return Some(hi);
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if ok(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(lo)
}

fn powers_of_two_upto(n: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..63).map(|i| 1u64 << i).take_while(|b| *b <= n).collect();
    if v.last() != Some(&n) && n > 0 {
        v.push(n);
    }
    v
}

/// Training advice for the layout in `s` (its global batch, dp and recompute are kept).
pub fn train(s: &Scenario, headroom: f64) -> TrainAdvice {
    let mut s = s.clone();
    s.workload.mode = Mode::Train;
    let dp = s.parallel.dp as u64;
    let per_replica = s.workload.global_batch / dp;
    let at = |s: &mut Scenario, mb: u64| {
        s.workload.micro_batch = mb;
        // Memory depends on the in-flight micro-batches; keep the global batch a multiple.
        let saved = s.workload.global_batch;
        if !saved.is_multiple_of(mb * dp) {
            s.workload.global_batch = (saved / (mb * dp)).max(1) * mb * dp;
        }
        let r = fits(s, headroom);
        s.workload.global_batch = saved;
        r
    };
    let largest_fitting = bisect(per_replica, |mb| at(&mut s, mb).0);
    let mut divs: Vec<u64> = (1..=per_replica).filter(|m| per_replica.is_multiple_of(*m)).collect();
    divs.retain(|m| largest_fitting.is_some_and(|l| *m <= l));
    let chosen = divs.last().map(|m| (*m, per_replica / m));
    let mut sizes = powers_of_two_upto(per_replica);
    sizes.extend(largest_fitting);
    sizes.sort_unstable();
    sizes.dedup();
    let curve = sizes
        .into_iter()
        .map(|mb| {
            let (ok, mem, cap) = at(&mut s, mb);
            let divides = per_replica.is_multiple_of(mb);
            let pred = if divides {
                s.workload.micro_batch = mb;
                analytic::predict(&s).ok()
            } else {
                None
            };
            Point {
                batch: mb,
                accumulation: divides.then(|| per_replica / mb),
                memory_bytes: mem,
                capacity_bytes: cap,
                fits: ok,
                tokens_per_s: pred.as_ref().map(|p| p.tokens_per_s),
                mfu: pred.as_ref().map(|p| p.mfu),
                ttft_s: None,
                tpot_s: None,
            }
        })
        .collect();
    TrainAdvice { largest_fitting, chosen, per_replica_batch: per_replica, curve }
}

/// Serving advice for the layout in `s`: prompt length `s.workload.seq`, decode at `kv_len`.
pub fn serve(s: &Scenario, headroom: f64, max_batch: u64, ttft_s: Option<f64>, tpot_s: Option<f64>) -> ServeAdvice {
    let mut s = s.clone();
    if s.workload.kv_len == 0 {
        s.workload.kv_len = s.workload.seq;
    }
    let point = |s: &mut Scenario, b: u64| -> Point {
        s.workload.batch = b;
        s.workload.mode = Mode::Decode;
        let (ok, mem, cap) = fits(s, headroom);
        let dec = analytic::predict(s).ok();
        s.workload.mode = Mode::Prefill;
        let pre = analytic::predict(s).ok();
        s.workload.mode = Mode::Decode;
        Point {
            batch: b,
            accumulation: None,
            memory_bytes: mem,
            capacity_bytes: cap,
            fits: ok,
            tokens_per_s: dec.as_ref().map(|p| p.tokens_per_s),
            mfu: dec.as_ref().map(|p| p.mfu),
            ttft_s: pre.map(|p| p.step_time.value()),
            tpot_s: dec.map(|p| p.step_time.value()),
        }
    };
    let meets = |p: &Point| p.fits && ttft_s.is_none_or(|m| p.ttft_s.is_some_and(|t| t <= m)) && tpot_s.is_none_or(|m| p.tpot_s.is_some_and(|t| t <= m));
    let largest_fitting = bisect(max_batch, |b| point(&mut s, b).fits);
    let largest = bisect(max_batch, |b| meets(&point(&mut s, b)));
    let mut sizes = powers_of_two_upto(max_batch);
    sizes.extend(largest);
    sizes.extend(largest_fitting);
    sizes.sort_unstable();
    sizes.dedup();
    let curve = sizes.into_iter().map(|b| point(&mut s, b)).collect();
    ServeAdvice { largest, largest_fitting, curve }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bisect_finds_the_last_passing_value() {
        assert_eq!(bisect(100, |b| b <= 37), Some(37));
        assert_eq!(bisect(100, |b| b <= 100), Some(100));
        assert_eq!(bisect(100, |_| false), None);
        assert_eq!(bisect(1, |_| true), Some(1));
    }
}
