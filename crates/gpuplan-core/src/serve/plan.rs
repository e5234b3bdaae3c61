//! The cheapest deployment that meets serving latency targets at a load: every (GPU count, TP,
//! max batch) of the space is simulated on the same request stream (same seed), and the ones
//! whose TTFT and TPOT percentiles meet the targets, with every request served, are ranked by
//! GPU count, then by the TTFT percentile, then by configuration. Rayon evaluates the
//! configurations; results are collected and then sorted, so the order does not depend on the
//! thread count. Architecture Invariant: no I/O, printing or clock reads.

use rayon::prelude::*;

use super::stats::{summarize, Summary};
use super::{simulate, Arrival, Deployment, Pool, Role, Routing, RunOptions, SchedConfig};
use crate::scenario::Scenario;

/// Latency targets, in seconds, at a percentile (50, 90, 95 or 99).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Slo {
    pub ttft_s: Option<f64>,
    pub tpot_s: Option<f64>,
    pub percentile: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServeCandidate {
    pub n_gpus: u64,
    pub tp: u32,
    pub max_batch: u32,
    /// Attention-DP ranks of one instance, its experts over all `tp x attention_dp` GPUs
    /// (`Workload::attention_dp`; `max_batch` then holds per rank); 1: plain TP replicas.
    pub attention_dp: u32,
}

impl ServeCandidate {
    pub fn gpus_per_replica(&self) -> u64 {
        self.tp as u64 * self.attention_dp.max(1) as u64
    }
    pub fn replicas(&self) -> u64 {
        self.n_gpus / self.gpus_per_replica()
    }
    pub fn label(&self) -> String {
        if self.attention_dp > 1 {
            format!("{} x tp{} dp{} ep{} (attention DP) max_batch {}", self.replicas(), self.tp, self.attention_dp, self.gpus_per_replica(), self.max_batch)
        } else {
            format!("{} x tp{} max_batch {}", self.replicas(), self.tp, self.max_batch)
        }
    }
}

/// Why a configuration misses.
#[derive(Debug, Clone, PartialEq)]
pub enum Miss {
    /// Cannot run (layout, memory, no KV room).
    Invalid(String),
    /// Requests left unserved or refused (overloaded, or too long for the cache).
    Unserved {
        unfinished: u64,
        rejected: u64,
    },
    Ttft(f64),
    Tpot(f64),
}

impl Miss {
    pub fn describe(&self) -> String {
        match self {
            Miss::Invalid(e) => format!("cannot run: {e}"),
            Miss::Unserved { unfinished, rejected } => format!("{unfinished} requests unserved at the drain limit, {rejected} refused"),
            Miss::Ttft(t) => format!("TTFT {:.1} ms over target", t * 1e3),
            Miss::Tpot(t) => format!("TPOT {:.2} ms over target", t * 1e3),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Evaluated {
    pub candidate: ServeCandidate,
    pub outcome: Result<Summary, (Miss, Option<Summary>)>,
}

/// The search space.
#[derive(Debug, Clone, PartialEq)]
pub struct ServeSpace {
    pub n_gpus: Vec<u64>,
    pub tp: Vec<u32>,
    pub max_batch: Vec<u32>,
    /// Scheduler knobs other than the max batch.
    pub sched: SchedConfig,
    pub routing: Routing,
}

/// Every candidate: TP dividing the GPU count and within one NVLink domain; for an MoE model
/// under an inference engine also attention-DP instances of `dp` ranks of TP `tp` (dp > 1 a
/// power of two), the experts in EP over the instance's `tp x dp` GPUs, which must divide the GPU
/// count and the experts and stay within one NVLink domain (the all-to-all at decode sizes is
/// latency-bound; across nodes it pays the network's per-step latency).
pub fn candidates(base: &Scenario, space: &ServeSpace) -> Vec<ServeCandidate> {
    let domain = base.system.nvlink_domain_size;
    let experts = base.model.moe.as_ref().filter(|_| base.workload.stack.is_engine()).map(|m| m.n_experts);
    let mut out = Vec::new();
    for &n in &space.n_gpus {
        for &tp in &space.tp {
            if tp == 0 || n % tp as u64 != 0 || tp > domain || !domain.is_multiple_of(tp) {
                continue;
            }
            let mut adps = vec![1u32];
            if let Some(e) = experts {
                let mut dp = 2u32;
                while tp * dp <= domain {
                    if n.is_multiple_of((tp * dp) as u64) && e.is_multiple_of(tp * dp) {
                        adps.push(dp);
                    }
                    dp *= 2;
                }
            }
            for &attention_dp in &adps {
                for &b in &space.max_batch {
                    out.push(ServeCandidate { n_gpus: n, tp, max_batch: b, attention_dp });
                }
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The deployment of one candidate: `n_gpus / tp` colocated replicas of the base scenario.
pub fn deployment_of(base: &Scenario, c: &ServeCandidate, space: &ServeSpace) -> Deployment {
    let mut s = base.clone();
    let adp = c.attention_dp.max(1);
    s.parallel.tp = c.tp;
    s.parallel.sp = c.tp > 1;
    s.parallel.pp = 1;
    s.parallel.dp = adp;
    s.parallel.cp = 1;
    if s.model.moe.is_some() {
        // Attention DP: experts in EP over the instance; otherwise the base's EP, or expert TP
        // (the default without EP: experts sharded over the candidate's TP, not replicated).
        if adp > 1 {
            (s.parallel.ep, s.parallel.etp) = (c.tp * adp, 1);
        } else if s.parallel.ep <= 1 {
            s.parallel.etp = c.tp;
        }
    }
    s.workload.attention_dp = (adp > 1).then_some(adp as u64);
    s.n_gpus = c.gpus_per_replica();
    Deployment {
        pools: vec![Pool { role: Role::Both, scenario: s, n_replicas: c.replicas() as u32, sched: SchedConfig { max_batch: c.max_batch, ..space.sched } }],
        routing: space.routing,
    }
}

/// Simulate one candidate and judge it against the targets.
pub fn evaluate(base: &Scenario, c: &ServeCandidate, space: &ServeSpace, arrivals: &[Arrival], slo: &Slo, opts: &RunOptions) -> Evaluated {
    let d = deployment_of(base, c, space);
    let outcome = match simulate(&d, arrivals, opts) {
        Err(e) => Err((Miss::Invalid(e.to_string()), None)),
        Ok(r) => {
            let s = summarize(&r);
            let ttft = s.ttft.at(slo.percentile);
            let tpot = s.tpot.at(slo.percentile);
            if s.unfinished > 0 || s.rejected > 0 {
                Err((Miss::Unserved { unfinished: s.unfinished, rejected: s.rejected }, Some(s)))
            } else if slo.ttft_s.is_some_and(|m| ttft.is_nan() || ttft > m) {
                Err((Miss::Ttft(ttft), Some(s)))
            } else if slo.tpot_s.is_some_and(|m| s.tpot.n > 0 && (tpot.is_nan() || tpot > m)) {
                Err((Miss::Tpot(tpot), Some(s)))
            } else {
                Ok(s)
            }
        }
    };
    Evaluated { candidate: *c, outcome }
}

/// Evaluate the whole space; feasible first (fewest GPUs, then lowest TTFT percentile, then
/// configuration), then the misses in configuration order.
pub fn search(base: &Scenario, space: &ServeSpace, arrivals: &[Arrival], slo: &Slo, opts: &RunOptions) -> Vec<Evaluated> {
    let cands = candidates(base, space);
    let mut out: Vec<Evaluated> = cands.par_iter().map(|c| evaluate(base, c, space, arrivals, slo, opts)).collect();
    out.sort_by(|a, b| match (&a.outcome, &b.outcome) {
        (Ok(x), Ok(y)) => a
            .candidate
            .n_gpus
            .cmp(&b.candidate.n_gpus)
            .then_with(|| x.ttft.at(slo.percentile).total_cmp(&y.ttft.at(slo.percentile)))
            .then_with(|| a.candidate.cmp(&b.candidate)),
        (Ok(_), Err(_)) => std::cmp::Ordering::Less,
        (Err(_), Ok(_)) => std::cmp::Ordering::Greater,
        (Err(_), Err(_)) => a.candidate.cmp(&b.candidate),
    });
    out
}
