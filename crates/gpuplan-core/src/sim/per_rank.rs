//! The per-rank engine (`simulate --per-rank`): every rank of the cluster with its own streams and
//! links, faults on single ranks, links and switches, and the step-time distribution over steps
//! with random stragglers.
//!
//! Symmetry: ranks are grouped into equivalence classes (`ranks::classes`, colour refinement over
//! the TP/CP/EP/DP/expert-DP groups and pipelines) and each class is played once, as one device
//! of the engine in `sim`. A class's collectives meet those of the other classes of its group at
//! a barrier (the k-th collective of a group kind on a stream pairs with the k-th of every other
//! member), run each participant's flow with NCCL's steps (`cost::nccl`: ring 2(n-1), tree
//! 2 log2 n, NVLS, hierarchical) on that participant's NVLink and NIC links, capped at the slowest
//! participant's link rate, and end for all with the last. With no fault there is one class per
//! stage, every barrier has one member, and the engine runs exactly the representative engine's
//! events (equal step time, tested).
//!
//! Stragglers (`stragglers`): K ranks drawn uniformly without replacement from all ranks
//! (xoshiro256** seeded by SplitMix64) compute at factor F. How long a straggler stays slow is
//! `Persistence`: a fresh draw every step (seeded from the seed and the step number; steps are
//! independent), one draw for the whole job (the same K ranks slow in every step), or a
//! geometric lifetime of mean D steps (after each step each straggler recovers with probability
//! 1/D and a rank drawn uniformly from the ranks not slow takes its place; one generator from the
//! seed, in step order). The straggler sets are drawn first, in step order; each distinct set is
//! simulated once, the sets in parallel (rayon), and the steps collected in step order.

use rayon::prelude::*;

use super::ranks::{self, Classes, FaultError, Layout, Placement, RankFactors, RankFaults};
use super::{chunk_lists, fsdp_gathers, schedule, shape, stage_caps, Device, Pass, Sim, SimStep, SimTime, TaskKey, Topo, NIC, NVLINK};
use crate::cost::lower::CommStep;
use crate::parallelism::stage_layer_counts;
use crate::scenario::Scenario;
use crate::serve::arrivals::Rng;
use crate::step::{self, Breakdown, DpPlan, PredictError, Prediction, Priced};
use crate::units::Seconds;

#[derive(Debug, Clone, PartialEq, Default)]
pub struct PerRankOptions {
    pub faults: RankFaults,
    /// (K, F): K random ranks per step compute at factor F.
    pub stragglers: Option<(u64, f64)>,
    /// How long a straggler stays slow.
    pub persistence: Persistence,
    /// Steps to draw (at least 1).
    pub steps: u32,
    pub seed: u64,
    /// Nodes per leaf switch on a rail, for what-if or where the system file gives none
    /// (`--nodes-per-leaf`); `None` takes the system's `fabric.nodes_per_leaf`.
    pub nodes_per_leaf: Option<u32>,
    /// Turn NCCL's PXN off (`--no-pxn`, `NCCL_PXN_DISABLE=1`): every GPU sends through its own
    /// NIC, and cross-rail traffic crosses the spines (`ranks` module doc).
    pub no_pxn: bool,
    /// Play every rank as a class of its own (no symmetry reduction): the naive reference the
    /// grouped engine is tested against.
    pub ungrouped: bool,
}

/// How long a random straggler stays slow (`--straggler-persistence`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Persistence {
    /// A fresh draw in every step: steps are independent.
    #[default]
    Step,
    /// One draw for the whole job: the same ranks are slow in every step.
    Job,
    /// Each straggler stays slow for a geometric number of steps of this mean (> 1): after each
    /// step it recovers with probability 1/mean, and a rank drawn uniformly from those not slow
    /// then takes its place.
    MeanSteps(f64),
}

impl Persistence {
    /// The draw, in words (the JSON's `stragglers.distribution`).
    pub fn describe(&self) -> String {
        match self {
            Persistence::Step => "uniform over ranks without replacement, a fresh draw each step".into(),
            Persistence::Job => "uniform over ranks without replacement, one draw for the whole job (the same ranks slow in every step)".into(),
            Persistence::MeanSteps(m) => format!(
                "uniform over ranks without replacement at step 0; each straggler stays slow a geometric number of steps of mean {m} (recovers after a step with probability {:.4}) and is replaced by a rank drawn uniformly from those not slow",
                1.0 / m
            ),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PerRankError {
    #[error(transparent)]
    Predict(#[from] PredictError),
    #[error(transparent)]
    Fault(#[from] FaultError),
}

/// The faulted rank that held a step back most: the time the other ranks of its collectives
/// waited for it to arrive, plus the time its slower links added to collectives.
#[derive(Debug, Clone, PartialEq)]
pub struct HeldBack {
    pub rank: u64,
    /// Ranks of its class (ranks faulted alike and placed alike).
    pub ranks: u64,
    /// Its factors: compute, NVLink, NIC (1.0 = healthy).
    pub compute: f64,
    pub nvlink: f64,
    pub nic: f64,
    /// The uplink factor of the leaf it sends through.
    pub uplink: f64,
    pub waited_for: Seconds,
    pub link_delay: Seconds,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StepOutcome {
    pub step_time: Seconds,
    pub classes: usize,
    pub rounds: u32,
    pub events: u64,
    /// The ranks drawn as stragglers in this step.
    pub stragglers: Vec<u64>,
    pub held_back: Option<HeldBack>,
}

/// Mean and nearest-rank percentiles of the steps' times.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Distribution {
    pub mean: Seconds,
    pub p50: Seconds,
    pub p90: Seconds,
    pub p99: Seconds,
    pub max: Seconds,
}

impl Distribution {
    pub fn of(times: &[Seconds]) -> Distribution {
        let mut v: Vec<f64> = times.iter().map(|t| t.value()).collect();
        v.sort_by(f64::total_cmp);
        let n = v.len().max(1);
        let at = |q: f64| Seconds::new(v.get(((q * n as f64).ceil() as usize).clamp(1, n) - 1).copied().unwrap_or(0.0));
        Distribution { mean: Seconds::new(v.iter().sum::<f64>() / n as f64), p50: at(0.5), p90: at(0.9), p99: at(0.99), max: at(1.0) }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct PerRankResult {
    pub n_ranks: u64,
    /// The prediction of the median step (the p50 step's breakdown, throughput and energy).
    pub prediction: Prediction,
    /// The step with no fault and no straggler (equal to the representative engine).
    pub fault_free: Seconds,
    pub steps: Vec<StepOutcome>,
    pub distribution: Distribution,
    /// Nodes per leaf switch on a rail, where leaf uplinks are modelled.
    pub nodes_per_leaf: Option<u32>,
    /// Whether cross-rail traffic took NCCL's PXN path.
    pub pxn: bool,
}

/// What every step shares: prices, per-stage lists, plans, schedules and link capacities.
struct Prepared<'a> {
    s: &'a Scenario,
    pr: Priced<'a>,
    pp: u32,
    vp: u32,
    m: u32,
    train: bool,
    fsdp: bool,
    plans: Vec<DpPlan>,
    tasks: Vec<Vec<TaskKey>>,
    layers: Vec<u64>,
    caps: Vec<[f64; 2]>,
    p2p: Option<CommStep>,
    /// Per-stage step lists at full speed, and the events of one stage's step.
    lists: Vec<Vec<(Vec<SimStep>, Vec<SimStep>)>>,
    events_per_stage: f64,
}

impl<'a> Prepared<'a> {
    fn new(s: &'a Scenario) -> Result<Prepared<'a>, PredictError> {
        let (pr, pp, vp, train) = shape(s)?;
        super::check_scenario_size(s, pr.n_micro, train)?;
        let pc = &s.parallel;
        let m = pr.n_micro as u32;
        let n_v = pp * vp;
        let fsdp = super::fsdp_on(s, train);
        let plans: Vec<DpPlan> = (0..pp).map(|d| if train { step::dp_plan(&pr.cost, s, d) } else { DpPlan::default() }).collect();
        let lists: Vec<_> =
            (0..pp).map(|d| (0..vp).map(|c| chunk_lists(s, &pr, &plans[d as usize], c * pp + d, n_v, 1.0, fsdp, train)).collect::<Vec<_>>()).collect();
        let tasks =
            (0..pp)
                .map(|d| {
                    if train {
                        schedule(pc.schedule, pp, vp, m, d)
                    } else {
                        (0..vp).map(|c| TaskKey { pass: Pass::Fwd, micro: 0, vstage: c * pp + d }).collect()
                    }
                })
                .collect();
        let layers = (0..pp).map(|d| stage_layer_counts(s.model.n_layers, pc)[d as usize].max(1)).collect();
        let p2p = step::p2p_step(&pr.cost, s);
        let caps = (0..pp as usize).map(|d| stage_caps(&lists[d], &plans[d], p2p.as_ref())).collect();
        let steps: usize = lists.iter().flatten().map(|(f, b): &(Vec<SimStep>, Vec<SimStep>)| f.len() + b.len()).sum();
        let events_per_stage = crate::limits::sim::EVENTS_PER_STEP * steps as f64 * pr.n_micro as f64 / pp as f64;
        Ok(Prepared { s, pr, pp, vp, m, train, fsdp, plans, tasks, layers, caps, p2p, lists, events_per_stage })
    }

    /// One step with the ranks' factors: classes, then the engine over the classes.
    fn step(&self, layout: &Layout, placement: &Placement, f: &RankFactors, ungrouped: bool) -> Result<(StepOutcome, Prediction), PredictError> {
        let c = if ungrouped { ranks::singletons(layout, f) } else { ranks::classes(layout, f) };
        let events = self.events_per_stage * c.len() as f64;
        if events > crate::limits::sim::MAX_PER_RANK_EVENTS {
            return Err(PredictError::Unsupported(format!(
                "the faults split the {} ranks into {} classes of ranks that behave alike, about {events:.2e} events: more than the discrete-event engine's limit of {:.0e}\nhint: fewer `--stragglers` or faults, or a smaller `--global-batch`",
                layout.n_ranks,
                c.len(),
                crate::limits::sim::MAX_PER_RANK_EVENTS
            )));
        }
        let mut sim = self.engine(&c, layout, placement, f);
        sim.run(&mut |_| {});
        if let Some(k) = sim.devices.iter().position(|d| d.done_at.is_none()) {
            // Every barrier is met when every class plays the same program; a class left waiting
            // is an engine bug, reported rather than read as a short step.
            return Err(PredictError::Unsupported(format!(
                "the per-rank engine stopped with rank {} (stage {}) unfinished: a collective's participants never all arrived\nhint: this is a bug; run without `--per-rank` and report the scenario",
                c.rep[k], c.stage[k]
            )));
        }
        let total = sim.end_time().seconds();
        let prediction = self.prediction(&sim, total);
        let topo = sim.topo.as_ref().expect("per-rank engine");
        let held_back = (0..c.len())
            .filter(|&k| !f.is_healthy(c.rep[k]))
            .map(|k| (topo.blame_wait[k] + topo.blame_link[k], k))
            .filter(|(b, _)| *b > 0.0)
            .max_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)))
            .map(|(_, k)| HeldBack {
                rank: c.rep[k],
                ranks: c.count[k],
                compute: c.compute[k],
                nvlink: c.nvlink[k],
                nic: c.nic[k],
                uplink: f.uplink(c.rep[k]),
                waited_for: Seconds::new(topo.blame_wait[k]),
                link_delay: Seconds::new(topo.blame_link[k]),
            });
        Ok((StepOutcome { step_time: total, classes: c.len(), rounds: c.rounds, events: sim.events, stragglers: Vec::new(), held_back }, prediction))
    }

    fn engine(&self, c: &Classes, layout: &Layout, placement: &Placement, f: &RankFactors) -> Sim {
        let (pp, n_v) = (self.pp, self.pp * self.vp);
        let mut lists = self.lists.clone();
        // Slow classes get their own lists, one per (stage, factor).
        let mut extra: Vec<(u32, u64)> = Vec::new();
        let mut list_of = Vec::with_capacity(c.len());
        let mut devices = Vec::with_capacity(c.len());
        let mut capacity = Vec::with_capacity(c.len() * 2);
        for k in 0..c.len() {
            let (stage, slow) = (c.stage[k], c.compute[k]);
            let idx = if slow == 1.0 {
                stage as usize
            } else if let Some(i) = extra.iter().position(|&e| e == (stage, slow.to_bits())) {
                pp as usize + i
            } else {
                extra.push((stage, slow.to_bits()));
                lists.push(
                    (0..self.vp)
                        .map(|ch| chunk_lists(self.s, &self.pr, &self.plans[stage as usize], ch * pp + stage, n_v, slow, self.fsdp, self.train))
                        .collect(),
                );
                lists.len() - 1
            };
            list_of.push(idx);
            let gathers_total = fsdp_gathers(self.fsdp, &self.plans[stage as usize], self.m, self.layers[stage as usize]);
            devices.push(Device::new(self.tasks[stage as usize].clone(), self.plans[stage as usize].clone(), self.layers[stage as usize], gathers_total));
            let caps = self.caps[stage as usize];
            capacity.push(caps[NVLINK].max(1.0) * c.nvlink[k]);
            capacity.push(caps[NIC].max(1.0) * c.nic[k]);
        }
        let n = c.len();
        // Leaf uplinks that lost bandwidth, one link per leaf class: at 1:1 (`nodes_per_leaf`'s
        // RA) a leaf's uplinks carry what its ports do, each port's rank at its stage's NIC
        // capacity, times what the fault left. Classes on one leaf class share a flow component.
        let first_link = capacity.len();
        for &leaf in &c.leaf_rep {
            let ports: f64 = placement.ranks_on_leaf(leaf).map(|r| self.caps[layout.stage(r) as usize][NIC].max(1.0)).sum();
            capacity.push(ports * f.leaf_uplink[leaf as usize]);
        }
        let uplink: Vec<Option<(usize, f64)>> = c.uplink.iter().map(|u| u.map(|(lc, w)| (first_link + lc as usize, w as f64))).collect();
        let mut comp: Vec<u32> = (0..n as u32).collect();
        let mut first_of = vec![u32::MAX; c.leaf_rep.len()];
        for (k, u) in c.uplink.iter().enumerate() {
            if let Some((lc, _)) = u {
                let head = &mut first_of[*lc as usize];
                if *head == u32::MAX {
                    *head = k as u32;
                }
                comp[k] = *head;
            }
        }
        let mut sim = Sim::new(devices, lists, capacity, self.p2p.clone(), self.m, pp, self.vp, false);
        sim.list_of = list_of;
        sim.overlap_cost = crate::step::overlap_cost(self.s.workload.stack);
        // One flow component per class: its flows cross only its own links.
        sim.active = vec![Vec::new(); n];
        sim.last_update = vec![SimTime::ZERO; n];
        sim.flow_gen = vec![0; n];
        sim.check_at = vec![None; n];
        sim.checks = crate::des::KeyedTimes::new(n);
        sim.stage = c.stage.clone();
        sim.topo = Some(Box::new(Topo {
            set_of: c.set_of.clone(),
            sets: c.sets.clone(),
            pp_line: c.pp_line.clone(),
            seq: vec![[0; 18]; n],
            open: Default::default(),
            barriers: Vec::new(),
            free_barriers: Vec::new(),
            colls: Vec::new(),
            free_colls: Vec::new(),
            blame_wait: vec![0.0; n],
            blame_link: vec![0.0; n],
            uplink,
            crosses: c.crosses.clone(),
            comp,
            nic_pxn: (0..c.nic_pxn.len()).map(|k| c.nic_pxn[k].map(|x| self.caps[c.stage[k] as usize][NIC].max(1.0) * x)).collect(),
        }));
        sim
    }

    /// The step's breakdown from its critical class, as the representative engine does it.
    fn prediction(&self, sim: &Sim, total: Seconds) -> Prediction {
        let crit = sim
            .devices
            .iter()
            .enumerate()
            .max_by_key(|(_, d)| (d.done_at.unwrap_or(d.last_task_end), std::cmp::Reverse(d.busy[0])))
            .map(|(i, _)| i)
            .unwrap_or(0);
        let dv = &sim.devices[crit];
        let compute = dv.busy[0].seconds();
        let memory = dv.busy[1].seconds();
        let cpu_launch = dv.wait_cpu.seconds();
        let dp_comm = if self.train { dv.dp_drain.seconds() } else { Seconds::ZERO };
        let optimizer = dv.optimizer_time.seconds();
        let bubble = dv.wait_dep.seconds();
        let comm = (total - compute - memory - cpu_launch - dp_comm - optimizer - bubble).max(Seconds::ZERO);
        let bd = Breakdown { compute, memory, tp_comm: comm, pp_bubble: bubble, dp_comm, optimizer, cpu_launch, ..Breakdown::default() };
        step::finish(self.s, &self.pr.cost, &self.pr.ops, self.pr.n_micro, bd, self.pr.power)
    }
}

/// K distinct ranks of `n`, uniform without replacement (Floyd's algorithm), sorted.
fn draw(rng: &mut Rng, n: u64, k: u64) -> Vec<u64> {
    let mut out: Vec<u64> = Vec::with_capacity(k as usize);
    for j in n - k..n {
        let t = rng.next_u64() % (j + 1);
        let pick = if out.contains(&t) { j } else { t };
        out.push(pick);
    }
    out.sort_unstable();
    out
}

/// The rank of index `t` among the ranks not in `slow` (sorted): the t-th healthy rank.
fn nth_outside(slow: &[u64], t: u64) -> u64 {
    let mut r = t;
    for &s in slow {
        if s <= r {
            r += 1;
        } else {
            break;
        }
    }
    r
}

/// The straggler sets of `steps` steps (sorted ranks each), drawn in step order (module doc).
pub fn straggler_sets(n: u64, k: u64, steps: u32, seed: u64, persistence: Persistence) -> Vec<Vec<u64>> {
    let fresh = |i: u32| draw(&mut Rng::new(seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)), n, k);
    match persistence {
        Persistence::Step => (0..steps).map(fresh).collect(),
        // Step 0's draw, kept.
        Persistence::Job => vec![fresh(0); steps as usize],
        Persistence::MeanSteps(mean) => {
            let mut rng = Rng::new(seed);
            let mut cur = draw(&mut rng, n, k);
            let mut out = Vec::with_capacity(steps as usize);
            out.push(cur.clone());
            for _ in 1..steps {
                let recovering: Vec<u64> = if k < n { cur.iter().copied().filter(|_| rng.unit() < 1.0 / mean).collect() } else { Vec::new() };
                for r in recovering {
                    // The t-th of the n - k ranks not slow now takes its place.
                    let t = rng.next_u64() % (n - k);
                    let pick = nth_outside(&cur, t);
                    if let Ok(i) = cur.binary_search(&r) {
                        cur.remove(i);
                    }
                    let at = cur.binary_search(&pick).unwrap_or_else(|i| i);
                    cur.insert(at, pick);
                }
                out.push(cur.clone());
            }
            out
        }
    }
}

/// The per-rank engine over `opts.steps` steps (see the module doc).
pub fn simulate_per_rank(s: &Scenario, opts: &PerRankOptions) -> Result<PerRankResult, PerRankError> {
    let layout = Layout::new(&s.parallel);
    if layout.n_ranks > crate::limits::sim::MAX_PER_RANK_RANKS {
        return Err(PredictError::Unsupported(format!(
            "{} ranks are more than the per-rank engine's limit of {}\nhint: drop `--per-rank` (the representative engine plays one rank per stage)",
            layout.n_ranks,
            crate::limits::sim::MAX_PER_RANK_RANKS
        ))
        .into());
    }
    let mut placement = Placement::new(layout.n_ranks, &s.system);
    if let Some(n) = opts.nodes_per_leaf {
        if n == 0 {
            return Err(FaultError {
                flag: "--nodes-per-leaf",
                value: n.to_string(),
                why: "a leaf switch joins at least one node".into(),
                hint: "the nodes whose NIC k one leaf switch joins, e.g. 32 (a DGX SuperPOD scalable unit)".into(),
            }
            .into());
        }
        if placement.nics_per_node == 0 {
            return Err(FaultError {
                flag: "--nodes-per-leaf",
                value: n.to_string(),
                why: format!("system `{}` has no scale-out network, so no leaf switches", s.system.name),
                hint: "leave `--nodes-per-leaf` out on a single-node system".into(),
            }
            .into());
        }
        placement.nodes_per_leaf = Some(n);
    }
    placement.pxn = !opts.no_pxn;
    let mut base = opts.faults.factors(&placement)?;
    ranks::route_pxn(&mut base, &layout, &placement);
    if let Some((k, f)) = opts.stragglers {
        let value = format!("{k}={f}");
        if k > layout.n_ranks {
            return Err(FaultError {
                flag: "--stragglers",
                value,
                why: format!("{k} stragglers out of {} ranks", layout.n_ranks),
                hint: format!("at most {} (the cluster's ranks)", layout.n_ranks),
            }
            .into());
        }
        if !(f.is_finite() && f > 0.0 && f <= 1.0) {
            return Err(FaultError {
                flag: "--stragglers",
                value,
                why: format!("factor `{f}` must be in (0, 1]"),
                hint: "a straggler computes at this share of its speed, e.g. 0.8".into(),
            }
            .into());
        }
    }
    if let Persistence::MeanSteps(m) = opts.persistence {
        if !(m.is_finite() && m >= 1.0) {
            return Err(FaultError {
                flag: "--straggler-persistence",
                value: m.to_string(),
                why: format!("a mean of `{m}` steps is not at least 1"),
                hint: "`step` (a fresh draw each step), `job` (the same ranks throughout) or a mean lifetime in steps >= 1, e.g. 20".into(),
            }
            .into());
        }
    }
    let prep = Prepared::new(s)?;
    let (clean, clean_prediction) = prep.step(&layout, &placement, &RankFactors::healthy(layout.n_ranks), opts.ungrouped)?;
    let n_steps = opts.steps.max(1);
    let healthy = (0..layout.n_ranks).all(|r| base.is_healthy(r));
    if healthy && opts.stragglers.is_none_or(|(k, _)| k == 0) {
        // Every step is the fault-free one.
        let distribution = Distribution::of(&vec![clean.step_time; n_steps as usize]);
        return Ok(PerRankResult {
            n_ranks: layout.n_ranks,
            prediction: clean_prediction,
            fault_free: clean.step_time,
            steps: vec![clean.clone(); n_steps as usize],
            distribution,
            nodes_per_leaf: placement.nodes_per_leaf,
            pxn: placement.pxn,
        });
    }
    // The straggler sets in step order, then each distinct set simulated once.
    let sets: Vec<Vec<u64>> = match opts.stragglers {
        Some((k, _)) if k > 0 => straggler_sets(layout.n_ranks, k, n_steps, opts.seed, opts.persistence),
        _ => vec![Vec::new(); n_steps as usize],
    };
    let mut distinct: Vec<&Vec<u64>> = sets.iter().collect();
    distinct.sort();
    distinct.dedup();
    let x = opts.stragglers.map_or(1.0, |(_, x)| x);
    let played: Vec<(StepOutcome, Prediction)> = distinct
        .par_iter()
        .map(|drawn| {
            let mut f = base.clone();
            for &r in drawn.iter() {
                f.compute[r as usize] *= x;
            }
            let (mut out, pred) = prep.step(&layout, &placement, &f, opts.ungrouped)?;
            out.stragglers = (*drawn).clone();
            Ok((out, pred))
        })
        .collect::<Result<Vec<_>, PredictError>>()?;
    let runs: Vec<(StepOutcome, Prediction)> = sets.iter().map(|set| played[distinct.binary_search(&set).expect("drawn above")].clone()).collect();
    let times: Vec<Seconds> = runs.iter().map(|(o, _)| o.step_time).collect();
    let distribution = Distribution::of(&times);
    // The median step: the lowest-numbered step at p50.
    let median = runs.iter().position(|(o, _)| o.step_time == distribution.p50).unwrap_or(0);
    let prediction = runs[median].1.clone();
    Ok(PerRankResult {
        n_ranks: layout.n_ranks,
        prediction,
        fault_free: clean.step_time,
        steps: runs.into_iter().map(|(o, _)| o).collect(),
        distribution,
        nodes_per_leaf: placement.nodes_per_leaf,
        pxn: placement.pxn,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let t: Vec<Seconds> = (1..=100).map(|i| Seconds::new(i as f64)).collect();
        let d = Distribution::of(&t);
        assert_eq!((d.p50.value(), d.p90.value(), d.p99.value(), d.max.value()), (50.0, 90.0, 99.0, 100.0));
        assert!((d.mean.value() - 50.5).abs() < 1e-12);
        let one = Distribution::of(&[Seconds::new(2.0)]);
        assert_eq!((one.p50, one.p99, one.max), (Seconds::new(2.0), Seconds::new(2.0), Seconds::new(2.0)));
    }

    #[test]
    fn straggler_draws_are_distinct_uniform_and_seeded() {
        let mut rng = Rng::new(7);
        let a = draw(&mut rng, 10, 10);
        assert_eq!(a, (0..10).collect::<Vec<_>>());
        let mut counts = [0u32; 8];
        let mut rng = Rng::new(1);
        for _ in 0..8000 {
            let d = draw(&mut rng, 8, 2);
            assert!(d[0] < d[1]);
            for r in d {
                counts[r as usize] += 1;
            }
        }
        // Each rank is drawn with probability 2/8: 2000 of 8000, within 5 sigma (~194).
        assert!(counts.iter().all(|&c| (c as f64 - 2000.0).abs() < 200.0), "{counts:?}");
        assert_eq!(draw(&mut Rng::new(3), 1000, 5), draw(&mut Rng::new(3), 1000, 5));
    }

    #[test]
    fn the_t_th_rank_outside_the_slow_set() {
        let slow = [2, 3, 7];
        let healthy: Vec<u64> = (0..7).map(|t| nth_outside(&slow, t)).collect();
        assert_eq!(healthy, vec![0, 1, 4, 5, 6, 8, 9]);
    }

    #[test]
    fn persistence_keeps_or_redraws_stragglers_as_stated() {
        // Job: step 0's fresh draw, kept throughout.
        let job = straggler_sets(1000, 3, 50, 9, Persistence::Job);
        let step = straggler_sets(1000, 3, 50, 9, Persistence::Step);
        assert!(job.iter().all(|s| *s == step[0]));
        assert!(step.iter().collect::<std::collections::BTreeSet<_>>().len() > 40, "fresh draws differ");
        // Mean lifetime D: a straggler leaves after a step with probability 1/D, so a single one
        // changes in 1/D of the steps: 20,000 steps at D = 5 give 4,000 changes (sigma ~57).
        let m = straggler_sets(1000, 1, 20_001, 4, Persistence::MeanSteps(5.0));
        let changes = m.windows(2).filter(|w| w[0] != w[1]).count() as f64;
        assert!((changes - 4000.0).abs() < 5.0 * 56.6, "{changes}");
        // Sets stay K distinct sorted ranks, all drawn (a uniform replacement reaches most ranks).
        let m = straggler_sets(64, 4, 2000, 1, Persistence::MeanSteps(3.0));
        assert!(m.iter().all(|s| s.len() == 4 && s.windows(2).all(|w| w[0] < w[1]) && s.iter().all(|&r| r < 64)));
        assert_eq!(m.iter().flatten().collect::<std::collections::BTreeSet<_>>().len(), 64);
        // All ranks slow: nothing to swap with.
        assert!(straggler_sets(4, 4, 10, 1, Persistence::MeanSteps(1.0)).iter().all(|s| *s == vec![0, 1, 2, 3]));
    }
}
