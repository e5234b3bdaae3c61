//! Planner: enumerate parallel layouts and workload knobs, prune what cannot run, evaluate the rest
//! in parallel on the analytic engine, rank by an objective, and find the Pareto front.
//!
//! The search varies one base `Scenario` in place (each rayon worker holds its own copy); nothing is
//! reloaded per configuration. Pruning runs cheapest rule first and counts each removed
//! configuration once, under the first rule that removes it:
//!
//! 1. TP beyond the NVLink domain, or TP groups that do not tile it (TP collectives sit on every
//!    layer's critical path),
//! 2. precision the GPU has no tensor-core path for,
//! 3. divisibility (`parallelism::check`, plus `seq` by `2*cp` for load-balanced ring attention),
//! 4. memory (`memory::plan`, the same plan `predict` returns, against capacity less headroom),
//! 5. after `predict`: power budgets and serving latency targets.
//!
//! Results are collected, then sorted by score and then by configuration key, so the output does
//! not depend on the number of threads. Architecture Invariant: no I/O, printing or clock reads.

pub mod advice;
pub mod request;

use std::collections::BTreeMap;

use rayon::prelude::*;

use crate::analytic;
use crate::hardware::Dtype;
use crate::memory;
use crate::parallelism::{self, Infeasible, Schedule};
use crate::scenario::Scenario;
use crate::step::{PredictError, Prediction};
use crate::workload::{Mode, Recompute};

/// Training, or serving (decode throughput, with prefill time as time-to-first-token).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanMode {
    Train,
    Serve,
}

/// One point of the search space. Ordered by its fields, which is the tie-break of the ranking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Candidate {
    pub n_gpus: u64,
    pub tp: u32,
    pub pp: u32,
    pub vp: u32,
    pub dp: u32,
    pub cp: u32,
    pub ep: u32,
    pub zero: u32,
    pub recompute: RecomputeKey,
    /// Training: sequences per micro-batch; serving: sequences in flight per replica.
    pub micro_batch: u64,
    /// Training: sequences per optimizer step (whole job); serving: 0.
    pub global_batch: u64,
    pub precision: DtypeKey,
}

/// `Recompute` with an order, for sorting candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RecomputeKey {
    None,
    Selective,
    Full,
    SelectiveOp,
    Layers(u32),
}

impl RecomputeKey {
    pub fn of(r: Recompute) -> Self {
        match r {
            Recompute::None => RecomputeKey::None,
            Recompute::Selective => RecomputeKey::Selective,
            Recompute::Full => RecomputeKey::Full,
            Recompute::SelectiveOp => RecomputeKey::SelectiveOp,
            Recompute::Layers(n) => RecomputeKey::Layers(n),
        }
    }
    pub fn get(self) -> Recompute {
        match self {
            RecomputeKey::None => Recompute::None,
            RecomputeKey::Selective => Recompute::Selective,
            RecomputeKey::Full => Recompute::Full,
            RecomputeKey::SelectiveOp => Recompute::SelectiveOp,
            RecomputeKey::Layers(n) => Recompute::Layers(n),
        }
    }
}

/// `Dtype` wrapper ordered bf16 first (then fp8, fp4), for sorting candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DtypeKey(u8);

impl DtypeKey {
    pub fn of(d: Dtype) -> Self {
        DtypeKey(match d {
            Dtype::Bf16 => 0,
            Dtype::Fp16 => 1,
            Dtype::Fp8 => 2,
            Dtype::Fp4 => 3,
            Dtype::Tf32 => 4,
            Dtype::Fp32 => 5,
        })
    }
    pub fn get(self) -> Dtype {
        match self.0 {
            0 => Dtype::Bf16,
            1 => Dtype::Fp16,
            2 => Dtype::Fp8,
            3 => Dtype::Fp4,
            4 => Dtype::Tf32,
            _ => Dtype::Fp32,
        }
    }
}

impl Candidate {
    pub fn gradient_accumulation(&self) -> u64 {
        if self.global_batch == 0 {
            return 1;
        }
        self.global_batch / (self.micro_batch * self.dp as u64)
    }

    /// Write this configuration into a scenario (the other fields stay as the base has them).
    pub fn apply(&self, s: &mut Scenario, mode: PlanMode) {
        s.n_gpus = self.n_gpus;
        let pc = &mut s.parallel;
        pc.tp = self.tp;
        pc.sp = self.tp > 1;
        pc.pp = self.pp;
        pc.vp = self.vp;
        pc.dp = self.dp;
        pc.cp = self.cp;
        pc.ep = self.ep;
        pc.zero = self.zero;
        pc.schedule = if self.vp > 1 { Schedule::Interleaved } else { Schedule::OneFOneB };
        let w = &mut s.workload;
        w.recompute = self.recompute.get();
        w.precision = self.precision.get();
        match mode {
            PlanMode::Train => {
                w.micro_batch = self.micro_batch;
                w.global_batch = self.global_batch;
            }
            PlanMode::Serve => w.batch = self.micro_batch,
        }
    }

    /// Short text form, e.g. `tp2 pp1 dp4 z1 rc=sel mb6 ga8 bf16`; dimensions at 1 are left out
    /// except tp, pp and dp.
    pub fn label(&self, mode: PlanMode) -> String {
        use std::fmt::Write;
        let mut o = format!("tp{} pp{}", self.tp, self.pp);
        if self.vp > 1 {
            let _ = write!(o, " vp{}", self.vp);
        }
        let _ = write!(o, " dp{}", self.dp);
        if self.cp > 1 {
            let _ = write!(o, " cp{}", self.cp);
        }
        if self.ep > 1 {
            let _ = write!(o, " ep{}", self.ep);
        }
        match mode {
            PlanMode::Train => {
                let rc = match self.recompute {
                    RecomputeKey::None => "none".to_string(),
                    RecomputeKey::Selective => "sel".to_string(),
                    RecomputeKey::Full => "full".to_string(),
                    RecomputeKey::SelectiveOp => "sel-op".to_string(),
                    RecomputeKey::Layers(n) => format!("layer{n}"),
                };
                let _ = write!(o, " z{} rc={} mb{} ga{}", self.zero, rc, self.micro_batch, self.gradient_accumulation());
            }
            PlanMode::Serve => {
                let _ = write!(o, " batch{}", self.micro_batch);
            }
        }
        let _ = write!(o, " {}", self.precision.get().name());
        o
    }
}

/// The values each dimension may take. A dimension the user pinned holds one value.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Space {
    pub mode: Option<PlanMode>,
    /// GPU counts to try.
    pub n_gpus: Vec<u64>,
    /// Pinned values (`None` = search).
    pub tp: Option<u32>,
    pub pp: Option<u32>,
    pub dp: Option<u32>,
    pub cp: Option<u32>,
    pub ep: Option<u32>,
    pub vp: Option<u32>,
    pub zero: Vec<u32>,
    pub recompute: Vec<Recompute>,
    pub precision: Vec<Dtype>,
    /// Training: fixed micro-batch, or all divisors of the per-replica batch up to `max_micro_batch`.
    pub micro_batch: Option<u64>,
    pub max_micro_batch: u64,
    /// Training: global batches to try (one, or those a range yields per layout).
    pub global_batch: GlobalBatch,
    /// Serving: batches to try per replica.
    pub serve_batches: Vec<u64>,
    /// Search bounds on pipeline interleaving and context parallelism.
    pub max_vp: u32,
    pub max_cp: u32,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub enum GlobalBatch {
    #[default]
    Unset,
    Fixed(u64),
    /// Every `micro_batch * dp * ga` inside the range where `ga` is a power of two, plus the
    /// smallest and largest `ga` in range.
    Range(u64, u64),
}

/// Constraints a configuration must meet beyond fitting.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Constraints {
    /// Fraction of HBM that must stay free (0.1 = use at most 90%).
    pub min_memory_headroom: f64,
    pub max_node_power_w: Option<f64>,
    pub max_cluster_power_w: Option<f64>,
    /// Serving latency targets.
    pub max_ttft_s: Option<f64>,
    pub max_tpot_s: Option<f64>,
}

/// What a GPU-hour and a kWh cost. No defaults: prices are the user's.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Pricing {
    pub gpu_hour_usd: Option<f64>,
    /// Facility energy price (applied to energy with the system's PUE).
    pub kwh_usd: Option<f64>,
}

impl Pricing {
    pub fn priced(&self) -> bool {
        self.gpu_hour_usd.is_some()
    }
    /// Dollars per million tokens, when a GPU-hour price is given.
    pub fn usd_per_million_tokens(&self, n_gpus: u64, tokens_per_s: f64, j_per_token_facility: f64) -> Option<f64> {
        let gpu = self.gpu_hour_usd? * n_gpus as f64 / 3600.0 / tokens_per_s * 1e6;
        let energy = self.kwh_usd.map_or(0.0, |p| p * j_per_token_facility * 1e6 / 3.6e6);
        Some(gpu + energy)
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Objective {
    Throughput,
    /// Time to train this many tokens.
    TimeToTrain {
        tokens: f64,
    },
    Cost,
    TokensPerJoule,
    /// Goodput-adjusted throughput: tokens/s x the effective training-time fraction of the
    /// goodput model (`goodput::goodput`) under these failure, checkpoint and recovery inputs.
    Goodput(crate::goodput::Params),
}

impl Objective {
    pub fn name(&self) -> &'static str {
        match self {
            Objective::Throughput => "throughput",
            Objective::TimeToTrain { .. } => "time-to-train",
            Objective::Cost => "cost",
            Objective::TokensPerJoule => "tokens-per-joule",
            Objective::Goodput(_) => "goodput",
        }
    }
}

/// The numbers of one evaluated configuration the ranking and the table need.
#[derive(Debug, Clone, PartialEq)]
pub struct Metrics {
    pub step_time_s: f64,
    pub tokens_per_s: f64,
    pub mfu: f64,
    pub memory_bytes: f64,
    pub capacity_bytes: f64,
    pub gpu_power_w: f64,
    pub node_power_w: f64,
    pub cluster_power_w: f64,
    pub j_per_token: f64,
    pub j_per_token_facility: f64,
    pub bottleneck: &'static str,
    pub usd_per_million_tokens: Option<f64>,
    /// Serving: prefill time of one batch (time to first token) and decode step time.
    pub ttft_s: Option<f64>,
    pub tpot_s: Option<f64>,
    /// Effective training-time fraction, under the goodput objective.
    pub goodput: Option<f64>,
}

impl Metrics {
    pub fn headroom(&self) -> f64 {
        1.0 - self.memory_bytes / self.capacity_bytes
    }
    pub fn tokens_per_joule(&self) -> f64 {
        1.0 / self.j_per_token
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Ranked {
    pub candidate: Candidate,
    pub metrics: Metrics,
    /// Higher is better.
    pub score: f64,
}

/// Why a configuration was removed; counted per reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    TpBeyondNvlink,
    /// TP groups that do not tile the NVLink domain (some would span two domains).
    TpStraddlesNvlink,
    Precision,
    Indivisible {
        what: &'static str,
        by: &'static str,
    },
    Unsupported(&'static str),
    OutOfMemory,
    Headroom,
    NodePower,
    ClusterPower,
    Ttft,
    Tpot,
    /// The engine refused it for another reason.
    Engine,
}

impl Reason {
    pub fn describe(&self) -> String {
        match self {
            Reason::TpBeyondNvlink => "tp beyond the NVLink domain".into(),
            Reason::TpStraddlesNvlink => "tp does not divide the NVLink domain (groups would straddle two)".into(),
            Reason::Precision => "precision without a tensor-core path on this GPU".into(),
            Reason::Indivisible { what, by } => format!("`{what}` not divisible by `{by}`"),
            Reason::Unsupported(what) => format!("unsupported `{what}`"),
            Reason::OutOfMemory => "does not fit in GPU memory".into(),
            Reason::Headroom => "fits, but with less than the required memory headroom".into(),
            Reason::NodePower => "over the node power budget".into(),
            Reason::ClusterPower => "over the cluster power budget".into(),
            Reason::Ttft => "over the time-to-first-token target".into(),
            Reason::Tpot => "over the time-per-output-token target".into(),
            Reason::Engine => "rejected by the engine".into(),
        }
    }
    fn of_infeasible(e: &Infeasible) -> Reason {
        match e {
            Infeasible::Indivisible { what, by_name, .. } => Reason::Indivisible { what, by: by_name },
            Infeasible::GpuCount { .. } => Reason::Indivisible { what: "gpus", by: "tp*pp*dp*cp" },
            Infeasible::Unsupported { what, .. } => Reason::Unsupported(what),
        }
    }
}

/// What the search did and found.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PlanResult {
    /// Feasible configurations, best first.
    pub ranked: Vec<Ranked>,
    pub pruned: BTreeMap<Reason, u64>,
    /// Configurations enumerated.
    pub enumerated: u64,
    /// Configurations the analytic engine predicted (those that passed the cheap rules).
    pub predicted: u64,
}

impl PlanResult {
    pub fn pruned_total(&self) -> u64 {
        self.pruned.values().sum()
    }
}

/// Everything the search needs besides the base scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub mode: PlanMode,
    pub space: Space,
    pub constraints: Constraints,
    pub objective: Objective,
    pub pricing: Pricing,
}

impl Request {
    /// Tokens to train, when the objective is time to train.
    pub fn tokens(&self) -> Option<f64> {
        match self.objective {
            Objective::TimeToTrain { tokens } => Some(tokens),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error("the `cost` objective needs a GPU-hour price")]
    NoPrice,
    #[error("the `time-to-train` objective needs a token count")]
    NoTokens,
    #[error("training plans need a global batch")]
    NoGlobalBatch,
    #[error("no GPU count to plan for")]
    NoGpus,
}

fn divisors(n: u64) -> Vec<u64> {
    let mut d: Vec<u64> = (1..=n).take_while(|i| i * i <= n).filter(|i| n.is_multiple_of(*i)).flat_map(|i| [i, n / i]).collect();
    d.sort_unstable();
    d.dedup();
    d
}

fn pinned_or(pin: Option<u32>, all: impl Iterator<Item = u64>) -> Vec<u32> {
    match pin {
        Some(v) => vec![v],
        None => all.map(|v| v as u32).collect(),
    }
}

/// A parallel layout: the outer part of a configuration. The search hands layouts to workers and
/// expands each into its configurations there, so the whole space is never held in memory.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    pub n_gpus: u64,
    pub tp: u32,
    pub pp: u32,
    pub vp: u32,
    pub dp: u32,
    pub cp: u32,
    pub ep: u32,
    zeros: Vec<u32>,
    recomputes: Vec<Recompute>,
    /// (micro_batch, global_batch) pairs (serving: (batch, 0)).
    batches: Vec<(u64, u64)>,
}

impl Layout {
    pub fn len(&self, req: &Request) -> u64 {
        (self.zeros.len() * self.recomputes.len() * self.batches.len() * req.space.precision.len()) as u64
    }
    pub fn is_empty(&self, req: &Request) -> bool {
        self.len(req) == 0
    }
    /// The configurations of this layout, in key order.
    pub fn candidates(&self, req: &Request) -> Vec<Candidate> {
        let mut out = Vec::with_capacity(self.len(req) as usize);
        for &zero in &self.zeros {
            for &rc in &self.recomputes {
                for &(mb, gb) in &self.batches {
                    for &prec in &req.space.precision {
                        out.push(Candidate {
                            n_gpus: self.n_gpus,
                            tp: self.tp,
                            pp: self.pp,
                            vp: self.vp,
                            dp: self.dp,
                            cp: self.cp,
                            ep: self.ep,
                            zero,
                            recompute: RecomputeKey::of(rc),
                            micro_batch: mb,
                            global_batch: gb,
                            precision: DtypeKey::of(prec),
                        });
                    }
                }
            }
        }
        out
    }
}

/// Every layout of the space.
pub fn layouts(base: &Scenario, req: &Request) -> Result<Vec<Layout>, PlanError> {
    let sp = &req.space;
    if sp.n_gpus.is_empty() {
        return Err(PlanError::NoGpus);
    }
    if req.mode == PlanMode::Train && sp.global_batch == GlobalBatch::Unset {
        return Err(PlanError::NoGlobalBatch);
    }
    let n_experts = base.model.moe.as_ref().map(|m| m.n_experts as u64);
    let mut gpus = sp.n_gpus.clone();
    gpus.sort_unstable();
    gpus.dedup();
    let mut out = Vec::new();
    for n in gpus {
        for tp in pinned_or(sp.tp, divisors(n).into_iter()) {
            if n % tp as u64 != 0 {
                continue;
            }
            let rest = n / tp as u64;
            for pp in pinned_or(sp.pp, divisors(rest).into_iter()) {
                if !rest.is_multiple_of(pp as u64) {
                    continue;
                }
                let rest = rest / pp as u64;
                let cps = pinned_or(sp.cp, divisors(rest).into_iter().filter(|c| *c <= sp.max_cp.max(1) as u64));
                for cp in cps {
                    if !rest.is_multiple_of(cp as u64) {
                        continue;
                    }
                    let dp = (rest / cp as u64) as u32;
                    if sp.dp.is_some_and(|d| d != dp) {
                        continue;
                    }
                    let vps = match (sp.vp, pp) {
                        (Some(v), _) => vec![v],
                        (None, 1) => vec![1],
                        // Interleaving only shortens the training bubble.
                        (None, _) if req.mode == PlanMode::Serve => vec![1],
                        (None, _) => (1..=sp.max_vp.max(1)).collect(),
                    };
                    let eps: Vec<u32> = match (sp.ep, n_experts) {
                        (Some(e), _) => vec![e],
                        (None, None) => vec![1],
                        // Expert parallelism is carved out of dp*cp*tp; powers of two dividing the expert count.
                        (None, Some(ne)) => (0..)
                            .map(|i| 1u64 << i)
                            .take_while(|e| *e <= ne && *e <= (dp as u64 * cp as u64 * tp as u64))
                            .filter(|e| ne % e == 0)
                            .map(|e| e as u32)
                            .collect(),
                    };
                    // ZeRO shards over data-parallel replicas; with one replica the stages are the same.
                    let zeros: Vec<u32> =
                        if req.mode == PlanMode::Serve || (dp == 1 && sp.zero.len() > 1 && n_experts.is_none()) { vec![0] } else { sp.zero.clone() };
                    let recomputes: Vec<Recompute> = if req.mode == PlanMode::Serve { vec![Recompute::None] } else { sp.recompute.clone() };
                    let batches: Vec<(u64, u64)> = match req.mode {
                        PlanMode::Serve => sp.serve_batches.iter().map(|b| (*b, 0)).collect(),
                        PlanMode::Train => train_batches(sp, dp as u64),
                    };
                    for &vp in &vps {
                        for &ep in &eps {
                            let l =
                                Layout { n_gpus: n, tp, pp, vp, dp, cp, ep, zeros: zeros.clone(), recomputes: recomputes.clone(), batches: batches.clone() };
                            if !l.is_empty(req) {
                                out.push(l);
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(out)
}

/// How many configurations the space holds.
pub fn count(base: &Scenario, req: &Request) -> Result<u64, PlanError> {
    Ok(layouts(base, req)?.iter().map(|l| l.len(req)).sum())
}

/// Every configuration of the space, in key order (for tests and small spaces; the search
/// expands layouts one at a time instead).
pub fn enumerate(base: &Scenario, req: &Request) -> Result<Vec<Candidate>, PlanError> {
    let mut out: Vec<Candidate> = layouts(base, req)?.iter().flat_map(|l| l.candidates(req)).collect();
    out.sort_unstable();
    Ok(out)
}

/// (micro_batch, global_batch) pairs for `dp` replicas.
fn train_batches(sp: &Space, dp: u64) -> Vec<(u64, u64)> {
    let mbs_for = |per_replica: u64| -> Vec<u64> {
        match sp.micro_batch {
            Some(m) => {
                if per_replica.is_multiple_of(m) {
                    vec![m]
                } else {
                    vec![]
                }
            }
            None => divisors(per_replica).into_iter().filter(|m| *m <= sp.max_micro_batch.max(1)).collect(),
        }
    };
    let mut out = Vec::new();
    match sp.global_batch {
        GlobalBatch::Unset => {}
        GlobalBatch::Fixed(gb) => {
            if gb % dp == 0 {
                for m in mbs_for(gb / dp) {
                    out.push((m, gb));
                }
            }
        }
        GlobalBatch::Range(lo, hi) => {
            let mbs: Vec<u64> = match sp.micro_batch {
                Some(m) => vec![m],
                None => (1..=sp.max_micro_batch.max(1)).collect(),
            };
            for m in mbs {
                let unit = m * dp;
                let ga_lo = lo.div_ceil(unit).max(1);
                let ga_hi = hi / unit;
                if ga_lo > ga_hi {
                    continue;
                }
                let mut gas: Vec<u64> = (0..63).map(|i| 1u64 << i).take_while(|g| *g <= ga_hi).filter(|g| *g >= ga_lo).collect();
                gas.push(ga_lo);
                gas.push(ga_hi);
                gas.sort_unstable();
                gas.dedup();
                out.extend(gas.into_iter().map(|g| (m, g * unit)));
            }
        }
    }
    out
}

/// Outcome of one configuration.
pub type Evaluation = Result<Ranked, Reason>;

/// The cheap rules, in order: NVLink domain, precision, divisibility, memory. `s` already holds
/// the candidate.
fn cheap_rules(s: &Scenario, c: &Candidate, req: &Request) -> Result<(), Reason> {
    nvlink_rule(s, c)?;
    if s.system.gpu.peak.get(c.precision.get()).is_none() {
        return Err(Reason::Precision);
    }
    if let Some(e) = parallelism::check(&s.model, &s.parallel, s.n_gpus).first() {
        return Err(Reason::of_infeasible(e));
    }
    if c.cp > 1 && !s.workload.seq.is_multiple_of(2 * c.cp as u64) {
        return Err(Reason::Indivisible { what: "seq", by: "2*cp" });
    }
    let mem = memory::plan(&s.model, &s.parallel, &s.workload, s.system.gpu.hbm_capacity.value);
    memory_rule(mem.total().value(), mem.capacity.value(), req)
}

/// TP collectives sit on every layer's critical path: TP stays inside one NVLink domain, and its
/// groups tile the domain.
fn nvlink_rule(s: &Scenario, c: &Candidate) -> Result<(), Reason> {
    let domain = s.system.nvlink_domain_size;
    if c.tp > domain {
        return Err(Reason::TpBeyondNvlink);
    }
    if !domain.is_multiple_of(c.tp) {
        return Err(Reason::TpStraddlesNvlink);
    }
    Ok(())
}

fn memory_rule(total: f64, capacity: f64, req: &Request) -> Result<(), Reason> {
    if total > capacity {
        return Err(Reason::OutOfMemory);
    }
    if total > capacity * (1.0 - req.constraints.min_memory_headroom) {
        return Err(Reason::Headroom);
    }
    Ok(())
}

/// Predict a scenario that passed the cheap rules, and apply the rules that need the prediction.
fn evaluate_predicted(s: &mut Scenario, c: &Candidate, req: &Request, engine: &dyn Engine) -> Evaluation {
    let p = engine.predict(s).map_err(|e| match e {
        PredictError::Infeasible(v) => v.first().map(Reason::of_infeasible).unwrap_or(Reason::Engine),
        PredictError::Unsupported(_) => Reason::Engine,
    })?;
    memory_rule(p.memory.total().value(), p.memory.capacity.value(), req)?;
    let n_nodes = (s.n_gpus as f64 / s.system.gpus_per_node as f64).ceil();
    let cluster_power = p.node_power.value() * n_nodes;
    let k = &req.constraints;
    if k.max_node_power_w.is_some_and(|m| p.node_power.value() > m) {
        return Err(Reason::NodePower);
    }
    if k.max_cluster_power_w.is_some_and(|m| cluster_power > m) {
        return Err(Reason::ClusterPower);
    }
    let (mut ttft, mut tpot) = (None, None);
    if req.mode == PlanMode::Serve {
        tpot = Some(p.step_time.value());
        if k.max_tpot_s.is_some_and(|m| p.step_time.value() > m) {
            return Err(Reason::Tpot);
        }
        if k.max_ttft_s.is_some() {
            // Time to first token: the prefill of the whole batch at the prompt length.
            let saved = s.workload.mode;
            s.workload.mode = Mode::Prefill;
            let pre = engine.predict(s);
            s.workload.mode = saved;
            let t = pre.map_err(|_| Reason::Engine)?.step_time.value();
            ttft = Some(t);
            if k.max_ttft_s.is_some_and(|m| t > m) {
                return Err(Reason::Ttft);
            }
        }
    }
    let mut metrics = metrics_of(s, &p, &req.pricing, ttft, tpot);
    if let Objective::Goodput(g) = &req.objective {
        metrics.goodput = Some(crate::goodput::goodput(s, p.tokens_per_s, g, None).fraction);
    }
    let score = score(&req.objective, &metrics);
    Ok(Ranked { candidate: *c, metrics, score })
}

fn metrics_of(s: &Scenario, p: &Prediction, pricing: &Pricing, ttft_s: Option<f64>, tpot_s: Option<f64>) -> Metrics {
    let n_nodes = (s.n_gpus as f64 / s.system.gpus_per_node as f64).ceil();
    Metrics {
        step_time_s: p.step_time.value(),
        tokens_per_s: p.tokens_per_s,
        mfu: p.mfu,
        memory_bytes: p.memory.total().value(),
        capacity_bytes: p.memory.capacity.value(),
        gpu_power_w: p.power.gpu_power.value(),
        node_power_w: p.node_power.value(),
        cluster_power_w: p.node_power.value() * n_nodes,
        j_per_token: p.energy_per_token.value(),
        j_per_token_facility: p.energy_per_token_facility.value(),
        bottleneck: p.bottleneck,
        usd_per_million_tokens: pricing.usd_per_million_tokens(s.n_gpus, p.tokens_per_s, p.energy_per_token_facility.value()),
        ttft_s,
        tpot_s,
        goodput: None,
    }
}

fn score(obj: &Objective, m: &Metrics) -> f64 {
    match obj {
        Objective::Throughput => m.tokens_per_s,
        Objective::TimeToTrain { tokens } => -(tokens / m.tokens_per_s),
        Objective::Cost => -m.usd_per_million_tokens.unwrap_or(f64::INFINITY),
        Objective::TokensPerJoule => m.tokens_per_joule(),
        Objective::Goodput(_) => m.tokens_per_s * m.goodput.unwrap_or(0.0),
    }
}

/// An engine that predicts one scenario: the analytic model for the search, and (for re-ranking
/// the top K, `plan --rerank-des K`) the discrete-event simulator.
pub trait Engine: Sync {
    fn name(&self) -> &'static str;
    fn predict(&self, s: &Scenario) -> Result<Prediction, PredictError>;
}

/// The closed-form engine.
pub struct Analytic;

impl Engine for Analytic {
    fn name(&self) -> &'static str {
        "analytic"
    }
    fn predict(&self, s: &Scenario) -> Result<Prediction, PredictError> {
        analytic::predict(s)
    }
}

/// An engine given as a function (e.g. `Fn(&Scenario) -> Result<Prediction, PredictError>` for
/// `sim::simulate`).
pub struct FnEngine<F: Fn(&Scenario) -> Result<Prediction, PredictError> + Sync> {
    pub name: &'static str,
    pub f: F,
}

impl<F: Fn(&Scenario) -> Result<Prediction, PredictError> + Sync> Engine for FnEngine<F> {
    fn name(&self) -> &'static str {
        self.name
    }
    fn predict(&self, s: &Scenario) -> Result<Prediction, PredictError> {
        (self.f)(s)
    }
}

fn check_request(req: &Request) -> Result<(), PlanError> {
    match req.objective {
        Objective::Cost if !req.pricing.priced() => Err(PlanError::NoPrice),
        Objective::TimeToTrain { tokens } if tokens.is_nan() || tokens <= 0.0 => Err(PlanError::NoTokens),
        _ => Ok(()),
    }
}

fn sort_ranked(v: &mut [Ranked]) {
    v.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.candidate.cmp(&b.candidate)));
}

/// Search the space with pruning; `progress` is called with the number of configurations done.
pub fn search(base: &Scenario, req: &Request, progress: &(dyn Fn(u64) + Sync)) -> Result<PlanResult, PlanError> {
    search_with(base, req, &Analytic, progress)
}

pub fn search_with(base: &Scenario, req: &Request, engine: &dyn Engine, progress: &(dyn Fn(u64) + Sync)) -> Result<PlanResult, PlanError> {
    check_request(req)?;
    let layouts = layouts(base, req)?;
    let base = prepared(base, req.mode);
    struct Acc {
        ranked: Vec<Ranked>,
        pruned: BTreeMap<Reason, u64>,
        predicted: u64,
        enumerated: u64,
    }
    let parts: Vec<Acc> = layouts
        .par_iter()
        .map_init(
            || base.clone(),
            |s, layout| {
                let mut acc = Acc { ranked: Vec::new(), pruned: BTreeMap::new(), predicted: 0, enumerated: 0 };
                for c in layout.candidates(req) {
                    acc.enumerated += 1;
                    c.apply(s, req.mode);
                    let r = match cheap_rules(s, &c, req) {
                        Ok(()) => {
                            acc.predicted += 1;
                            evaluate_predicted(s, &c, req, engine)
                        }
                        Err(e) => Err(e),
                    };
                    match r {
                        Ok(r) => acc.ranked.push(r),
                        Err(e) => *acc.pruned.entry(e).or_insert(0) += 1,
                    }
                }
                progress(acc.enumerated);
                acc
            },
        )
        .collect();
    let mut out = PlanResult::default();
    for a in parts {
        out.ranked.extend(a.ranked);
        out.predicted += a.predicted;
        out.enumerated += a.enumerated;
        for (k, v) in a.pruned {
            *out.pruned.entry(k).or_insert(0) += v;
        }
    }
    sort_ranked(&mut out.ranked);
    Ok(out)
}

/// The same space without the cheap rules: every configuration goes to the engine, and only its
/// prediction decides. For testing the pruned search (equal ranking), and slow.
pub fn brute_force(base: &Scenario, req: &Request) -> Result<PlanResult, PlanError> {
    check_request(req)?;
    let cands = enumerate(base, req)?;
    let mut s = prepared(base, req.mode);
    let mut out = PlanResult { enumerated: cands.len() as u64, ..Default::default() };
    for c in &cands {
        c.apply(&mut s, req.mode);
        out.predicted += 1;
        let r = if let Err(e) = nvlink_rule(&s, c) {
            Err(e)
        } else if c.cp > 1 && !s.workload.seq.is_multiple_of(2 * c.cp as u64) {
            Err(Reason::Indivisible { what: "seq", by: "2*cp" })
        } else {
            evaluate_predicted(&mut s, c, req, &Analytic)
        };
        match r {
            Ok(r) => out.ranked.push(r),
            Err(e) => *out.pruned.entry(e).or_insert(0) += 1,
        }
    }
    sort_ranked(&mut out.ranked);
    Ok(out)
}

/// The base scenario set up for the plan's mode (serving predicts decode steps).
pub fn prepared(base: &Scenario, mode: PlanMode) -> Scenario {
    let mut s = base.clone();
    match mode {
        PlanMode::Train => s.workload.mode = Mode::Train,
        PlanMode::Serve => {
            s.workload.mode = Mode::Decode;
            if s.workload.kv_len == 0 {
                s.workload.kv_len = s.workload.seq;
            }
        }
    }
    s
}

/// The scenario of one ranked configuration (for printing it as `predict` would).
pub fn scenario_of(base: &Scenario, c: &Candidate, mode: PlanMode) -> Scenario {
    let mut s = prepared(base, mode);
    c.apply(&mut s, mode);
    s
}

/// Indices (into `ranked`) of the Pareto front: higher throughput against lower cost per token
/// when priced, else against more tokens per joule. Ordered by throughput, highest first.
pub fn pareto(ranked: &[Ranked], priced: bool) -> Vec<usize> {
    let second = |r: &Ranked| -> f64 {
        if priced {
            -r.metrics.usd_per_million_tokens.unwrap_or(f64::INFINITY)
        } else {
            r.metrics.tokens_per_joule()
        }
    };
    let mut idx: Vec<usize> = (0..ranked.len()).collect();
    idx.sort_by(|&a, &b| {
        ranked[b]
            .metrics
            .tokens_per_s
            .total_cmp(&ranked[a].metrics.tokens_per_s)
            .then_with(|| second(&ranked[b]).total_cmp(&second(&ranked[a])))
            .then_with(|| ranked[a].candidate.cmp(&ranked[b].candidate))
    });
    let mut front = Vec::new();
    let mut best = f64::NEG_INFINITY;
    for i in idx {
        let v = second(&ranked[i]);
        if v > best {
            front.push(i);
            best = v;
        }
    }
    front
}

/// Re-predict the top `k` configurations with another engine (the DES) and re-rank them by its
/// numbers; the rest keep their analytic order below them. Configurations the engine rejects
/// keep their analytic numbers.
pub fn rerank(base: &Scenario, req: &Request, result: &mut PlanResult, k: usize, engine: &dyn Engine) {
    let k = k.min(result.ranked.len());
    let mut top: Vec<Ranked> = result.ranked[..k]
        .par_iter()
        .map(|r| {
            let mut s = scenario_of(base, &r.candidate, req.mode);
            evaluate_predicted(&mut s, &r.candidate, req, engine).unwrap_or_else(|_| r.clone())
        })
        .collect();
    sort_ranked(&mut top);
    result.ranked.splice(..k, top);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn divisors_are_sorted_and_complete() {
        assert_eq!(divisors(12), vec![1, 2, 3, 4, 6, 12]);
        assert_eq!(divisors(1), vec![1]);
        assert_eq!(divisors(1024).len(), 11);
    }

    #[test]
    fn global_batch_range_takes_power_of_two_accumulation_and_the_ends() {
        let sp = Space { global_batch: GlobalBatch::Range(96, 1000), micro_batch: Some(4), max_micro_batch: 4, ..Default::default() };
        // unit = 4 * 8 = 32: ga 3..=31 -> 3, 4, 8, 16, 31.
        let gbs: Vec<u64> = train_batches(&sp, 8).into_iter().map(|(_, g)| g).collect();
        assert_eq!(gbs, vec![96, 128, 256, 512, 992]);
    }

    #[test]
    fn pricing_adds_gpu_hours_and_energy() {
        let p = Pricing { gpu_hour_usd: Some(3.6), kwh_usd: None };
        // 1 GPU at 1000 tokens/s: 1e6 tokens take 1000 s = 1/3.6 h -> $1.
        assert!((p.usd_per_million_tokens(1, 1000.0, 0.0).unwrap() - 1.0).abs() < 1e-12);
        let p = Pricing { gpu_hour_usd: Some(0.0), kwh_usd: Some(1.0) };
        // 3.6 J/token -> 3.6e6 J per 1e6 tokens = 1 kWh.
        assert!((p.usd_per_million_tokens(1, 1.0, 3.6).unwrap() - 1.0).abs() < 1e-12);
        assert_eq!(Pricing::default().usd_per_million_tokens(8, 1.0, 1.0), None);
    }
}
