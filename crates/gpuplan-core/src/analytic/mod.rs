//! Closed-form step time with overlap rules, and the whole prediction (throughput, MFU, memory,
//! power, energy). Fast: the planner calls it millions of times.

use std::collections::BTreeMap;

use crate::cost::lower::{CommStep, Overlap, Step};
use crate::cost::{Bound, CostModel, UsedNumber};
use crate::hardware::profile::CollectiveOp;
use crate::memory::{self, stack_memory, MemoryPlan};
use crate::parallelism::{self, Group, Infeasible, ParallelConfig};
use crate::power::{self, Activity, PowerState};
use crate::scenario::Scenario;
use crate::units::{Joules, Seconds, Watts};
use crate::workload::{self, backward_of, forward_ops, recompute_of, Mode, Op, Stack};

/// Where the step time goes, on the critical path of the slowest rank.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Breakdown {
    /// Compute-bound kernels (GEMMs, attention) at the clock the power cap allows.
    pub compute: Seconds,
    /// Memory-bound kernels (norms, activations, optimizer) and launch overheads.
    pub memory: Seconds,
    /// Exposed tensor/context/expert-parallel communication.
    pub tp_comm: Seconds,
    pub cp_comm: Seconds,
    pub ep_comm: Seconds,
    /// Pipeline point-to-point transfers.
    pub pp_p2p: Seconds,
    /// Pipeline fill and drain.
    pub pp_bubble: Seconds,
    /// Data-parallel communication not hidden behind backward/forward.
    pub dp_comm: Seconds,
    pub optimizer: Seconds,
    /// Time the GPU waits for the CPU to launch kernels (eager stacks, small ops).
    pub cpu_launch: Seconds,
}

impl Breakdown {
    pub fn parts(&self) -> [(&'static str, Seconds); 10] {
        [
            ("compute", self.compute),
            ("memory_bound", self.memory),
            ("tp_comm", self.tp_comm),
            ("cp_comm", self.cp_comm),
            ("ep_comm", self.ep_comm),
            ("pp_p2p", self.pp_p2p),
            ("pp_bubble", self.pp_bubble),
            ("dp_comm", self.dp_comm),
            ("optimizer", self.optimizer),
            ("cpu_launch", self.cpu_launch),
        ]
    }
    pub fn total(&self) -> Seconds {
        self.parts().iter().map(|(_, s)| *s).sum()
    }
    fn scale(&mut self, k: f64) {
        for s in [&mut self.compute, &mut self.memory, &mut self.tp_comm, &mut self.cp_comm, &mut self.ep_comm, &mut self.pp_p2p, &mut self.cpu_launch] {
            *s = *s * k;
        }
    }
    fn add(&mut self, o: &Breakdown) {
        self.compute += o.compute;
        self.memory += o.memory;
        self.tp_comm += o.tp_comm;
        self.cp_comm += o.cp_comm;
        self.ep_comm += o.ep_comm;
        self.pp_p2p += o.pp_p2p;
        self.pp_bubble += o.pp_bubble;
        self.dp_comm += o.dp_comm;
        self.optimizer += o.optimizer;
        self.cpu_launch += o.cpu_launch;
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Prediction {
    pub step_time: Seconds,
    pub breakdown: Breakdown,
    /// Tokens processed per second by the whole job (training: trained tokens; prefill: prompt
    /// tokens; decode: generated tokens).
    pub tokens_per_s: f64,
    pub tokens_per_step: f64,
    /// Model FLOPs utilization (Megatron/PaLM convention, see `workload::model_flops_per_token_train`).
    pub mfu: f64,
    /// Hardware FLOPs utilization: FLOPs executed (recompute included, causal half only).
    pub hfu: f64,
    pub model_flops_per_token: f64,
    pub memory: MemoryPlan,
    pub power: PowerState,
    pub node_power: Watts,
    pub energy_per_step: Joules,
    pub energy_per_token: Joules,
    /// Facility energy per token (PUE applied).
    pub energy_per_token_facility: Joules,
    pub n_microbatches: u64,
    pub bottleneck: &'static str,
}

/// Why a scenario cannot be predicted at all (bad configuration, as opposed to not fitting).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PredictError {
    #[error("{}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; "))]
    Infeasible(Vec<Infeasible>),
    #[error("{0}")]
    Unsupported(String),
}

/// Bytes one parameter's update moves in the optimizer step (fused Adam: read param, grad, m, v;
/// write param, m, v; plus grad-norm clipping and zeroing the gradients; Megatron also writes the
/// bf16 copy of the fp32 master).
fn optimizer_bytes_per_param(stack: Stack) -> f64 {
    match stack {
        Stack::Megatron => 4.0 * 4.0 + 3.0 * 4.0 + 2.0 + 4.0 + 4.0,
        Stack::TorchEager | Stack::TorchCompile => 4.0 * 4.0 + 3.0 * 4.0 + 4.0 + 4.0,
    }
}

/// Defined with the other fitted constants in `cost::fitted`.
pub use crate::cost::fitted::OVERLAP_COST;

/// DDP/Megatron gradient bucket size (PyTorch DDP `bucket_cap_mb` = 25).
pub const BUCKET_BYTES: f64 = 25e6;

/// Time of one pass (forward, or backward + recompute) through part of a stage.
#[derive(Default)]
struct PassTime {
    bd: Breakdown,
    /// Kernels launched (CPU dispatch).
    /// Host time to launch the pass's kernels.
    cpu: Seconds,
}

/// Add up lowered steps with the overlap rules: a blocking collective costs its time; one that
/// runs beside the next kernel costs its blocking part plus whatever outlasts that kernel.
/// Returns compute, memory, host launch time (runs ahead of the GPU), host time the GPU waits for
/// in full (`host_sync`), and the exposed collectives.
pub fn exposed_time(steps: &[Step]) -> (Seconds, Seconds, Seconds, Seconds, Vec<(Group, Seconds)>) {
    let (mut compute, mut memory, mut cpu, mut sync) = (Seconds::ZERO, Seconds::ZERO, Seconds::ZERO, Seconds::ZERO);
    let mut comm = Vec::new();
    for (i, st) in steps.iter().enumerate() {
        match st {
            Step::Kernel { time, bound, cpu: c, host_sync, .. } => {
                sync += *host_sync;
                if *bound == Bound::Compute {
                    compute += *time;
                } else {
                    memory += *time;
                }
                cpu += *c;
            }
            Step::Comm { comm: c, .. } => {
                let exposed = match c.overlap {
                    Overlap::Blocking => c.time(),
                    Overlap::WithNextKernel { blocking } => {
                        let beside = match steps.get(i + 1) {
                            Some(Step::Kernel { time, .. }) => *time,
                            _ => Seconds::ZERO,
                        };
                        c.total_latency() + c.transfer(blocking) + (c.transfer(1.0 - blocking) - beside).max(Seconds::ZERO)
                    }
                };
                comm.push((c.group, exposed));
            }
        }
    }
    (compute, memory, cpu, sync, comm)
}

fn pass_time(cost: &CostModel, s: &Scenario, ops: &[Op], times: usize, speedup: f64) -> PassTime {
    debug_assert!(times >= 1);
    let steps = cost.lower(&s.parallel, &s.options, &s.workload, ops, speedup);
    let (compute, memory, cpu, host_sync, comm) = exposed_time(&steps);
    // Host time the GPU waits for in full is a stall on the critical path.
    let mut bd = Breakdown { compute, memory, cpu_launch: host_sync, ..Breakdown::default() };
    for (group, t) in comm {
        match group {
            Group::Cp => bd.cp_comm += t,
            Group::Ep => bd.ep_comm += t,
            _ => bd.tp_comm += t,
        }
    }
    bd.scale(times as f64);
    PassTime { bd, cpu: cpu * times as f64 }
}

/// GPU time of a pass, or the CPU's launch time if that is longer (the GPU then waits). Stalls
/// already in `cpu_launch` (host time the GPU waits for in full) keep the host busy too.
fn with_cpu(p: PassTime) -> Breakdown {
    let mut bd = p.bd;
    let gpu = bd.total() - bd.cpu_launch;
    if p.cpu > gpu {
        bd.cpu_launch += p.cpu - gpu;
    }
    bd
}

/// Layers of each kind in pipeline stage `stage` (dense layers come first in MoE models).
pub fn stage_layers(s: &Scenario, stage: u32) -> (usize, usize) {
    let (dense, moe) = parallelism::stage_dense_moe(s.model.n_layers, s.model.n_dense_layers(), &s.parallel, stage);
    (dense as usize, moe as usize)
}

struct StageTimes {
    fwd: Breakdown,
    bwd: Breakdown,
}

/// Forward and backward (+ recompute) pass times of one of each part of the model, priced once
/// and combined per stage.
struct PartTimes {
    dense: (PassTime, PassTime),
    moe: (PassTime, PassTime),
    embedding: (PassTime, PassTime),
    head: (PassTime, PassTime),
}

fn part_times(cost: &CostModel, s: &Scenario, ops: &workload::OpList, speedup: f64) -> PartTimes {
    let train = s.workload.mode == Mode::Train;
    let both = |list: &[Op]| {
        if list.is_empty() {
            return (PassTime::default(), PassTime::default());
        }
        let f = pass_time(cost, s, list, 1, speedup);
        let b = if train {
            let mut back = recompute_of(list, s.workload.recompute);
            back.extend(backward_of(list));
            pass_time(cost, s, &back, 1, speedup)
        } else {
            PassTime::default()
        };
        (f, b)
    };
    PartTimes { dense: both(&ops.dense_layer), moe: both(&ops.moe_layer), embedding: both(&ops.embedding), head: both(&ops.head) }
}

fn stage_times(s: &Scenario, parts: &PartTimes, stage: u32) -> StageTimes {
    let (n_dense, n_moe) = stage_layers(s, stage);
    let mut fwd = PassTime::default();
    let mut bwd = PassTime::default();
    let mut add = |part: &(PassTime, PassTime), times: usize| {
        if times == 0 {
            return;
        }
        let k = times as f64;
        let mut f = part.0.bd.clone();
        f.scale(k);
        fwd.bd.add(&f);
        fwd.cpu += part.0.cpu * k;
        let mut b = part.1.bd.clone();
        b.scale(k);
        bwd.bd.add(&b);
        bwd.cpu += part.1.cpu * k;
    };
    if stage == 0 {
        add(&parts.embedding, 1);
    }
    add(&parts.dense, n_dense);
    add(&parts.moe, n_moe);
    if stage == s.parallel.pp - 1 {
        add(&parts.head, 1);
    }
    // The CPU runs ahead of the GPU within a pass; the GPU waits only when launching takes longer.
    StageTimes { fwd: with_cpu(fwd), bwd: with_cpu(bwd) }
}

/// Micro-batches per optimizer step per pipeline (1 in inference).
pub fn n_micro_of(s: &Scenario) -> Result<u64, PredictError> {
    let w = &s.workload;
    if w.mode != Mode::Train {
        return Ok(1);
    }
    let per = w.micro_batch * s.parallel.dp as u64;
    if per == 0 || !w.global_batch.is_multiple_of(per) || w.global_batch < per {
        return Err(PredictError::Infeasible(vec![Infeasible::Indivisible { what: "global_batch", n: w.global_batch, by_name: "micro_batch*dp", by: per }]));
    }
    Ok(w.global_batch / per)
}

/// Checks shared by both engines before any pricing.
pub fn check_scenario(s: &Scenario) -> Result<u64, PredictError> {
    let problems = parallelism::check(&s.model, &s.parallel, s.n_gpus);
    if !problems.is_empty() {
        return Err(PredictError::Infeasible(problems));
    }
    if s.system.gpu.peak.get(s.workload.precision).is_none() {
        return Err(PredictError::Unsupported(format!(
            "`{}` has no {} tensor-core path; choose a precision it supports",
            s.system.gpu.display_name,
            s.workload.precision.name()
        )));
    }
    n_micro_of(s)
}

/// Time of one pipeline point-to-point transfer of a micro-batch's activations (1/tp of them
/// under sequence parallelism, Megatron's scatter-gather optimization).
pub fn p2p_step(cost: &CostModel, s: &Scenario) -> Option<CommStep> {
    let pc = &s.parallel;
    if pc.pp <= 1 {
        return None;
    }
    let w = &s.workload;
    let tokens = (w.sequences() * w.q_len()) as f64 / pc.cp as f64;
    let shard = if pc.sp && pc.tp > 1 { pc.tp as f64 } else { 1.0 };
    let bytes = tokens * s.model.hidden as f64 * 2.0 / shard;
    let mut step = cost.comm_step(pc, CollectiveOp::SendRecv, Group::Pp, bytes, Overlap::Blocking);
    // A send/recv is between two neighbours; `comm_step` sized it for the whole PP group.
    step.wire_bytes = bytes;
    Some(step)
}

/// The step's critical path from per-stage pass times.
fn step_breakdown(s: &Scenario, cost: &CostModel, stages: &[StageTimes], n_micro: u64) -> Breakdown {
    let pc = &s.parallel;
    let p2p = p2p_step(cost, s).map_or(Seconds::ZERO, |c| c.time());
    let mut bd = Breakdown::default();
    let per_stage: Vec<Seconds> = stages.iter().map(|st| st.fwd.total() + st.bwd.total()).collect();
    let slowest = per_stage.iter().enumerate().fold((0, Seconds::ZERO), |acc, (i, t)| if *t > acc.1 { (i, *t) } else { acc }).0;
    match s.workload.mode {
        Mode::Train => {
            // 1F1B: m micro-batches at the pace of the slowest stage, plus the fill and drain and
            // a forward and a backward transfer per hop (Narayanan et al. 2021, sec. 2.2).
            let mut busy = stages[slowest].fwd.clone();
            busy.add(&stages[slowest].bwd);
            busy.scale(n_micro as f64);
            bd.add(&busy);
            if pc.pp > 1 {
                // Fill and drain pass once through every stage but the slowest (which the m
                // micro-batches already count): one model chunk of each, = (p-1)/vp stage-times
                // when even, else the actual chunk sizes (`parallelism::bubble_chunk_shares`).
                let sum = per_stage.iter().copied().sum::<Seconds>();
                bd.pp_bubble = match parallelism::bubble_chunk_shares(s.model.n_layers, pc, slowest) {
                    None => (sum - per_stage[slowest]) / pc.vp as f64,
                    Some(shares) => per_stage.iter().zip(&shares).map(|(t, f)| *t * *f).sum::<Seconds>(),
                };
                bd.pp_p2p = p2p * (2 * (pc.pp - 1)) as f64;
            }
            let (dp, opt) = data_parallel_and_optimizer(cost, s, stages, n_micro);
            bd.dp_comm = dp;
            bd.optimizer = opt;
        }
        Mode::Prefill | Mode::Decode => {
            // One batch flows through the stages in turn.
            for st in stages {
                bd.add(&st.fwd);
            }
            bd.pp_p2p = p2p * (pc.pp - 1) as f64;
        }
    }
    bd
}

/// Activity of the slowest rank over the step, for the power model.
fn activity(bd: &Breakdown) -> Activity {
    Activity {
        compute: bd.compute,
        memory: bd.memory + bd.optimizer,
        comm: bd.tp_comm + bd.cp_comm + bd.ep_comm + bd.pp_p2p + bd.dp_comm,
        idle: bd.pp_bubble + bd.cpu_launch,
    }
}

/// The GPU as the power model sees it: the system's GPU, with the power, clocks and cap a
/// calibration profile measured when there is one.
pub fn power_gpu(s: &Scenario) -> std::borrow::Cow<'_, crate::hardware::Gpu> {
    use crate::hardware::{Source, Sourced};
    let native = s.profile.as_ref().filter(|p| crate::cost::profile_is_native(&s.system.gpu, p));
    let Some((p, pw)) = native.and_then(|p| p.power.as_ref().map(|pw| (p, pw))) else {
        return std::borrow::Cow::Borrowed(&s.system.gpu);
    };
    let src = |what: &str| Source::Measured(format!("profile `{}`: {what} ({})", p.name, p.provenance));
    let mut g = s.system.gpu.clone();
    g.idle_power = Sourced::new(pw.idle, src("idle power with a context open"));
    g.tdp = Sourced::new(pw.power_limit, src("power limit"));
    g.max_clock = Sourced::new(pw.max_clock, src("maximum SM clock"));
    if pw.gemm_clock.value() > 0.0 {
        g.efficiency.sustained_gemm_clock = Sourced::new(pw.gemm_clock.min(pw.max_clock), src("SM clock under sustained GEMM"));
    }
    g.efficiency.hbm_load_power = Sourced::new(pw.hbm_load, src("power under HBM-bound load"));
    std::borrow::Cow::Owned(g)
}

/// Clock, stage pass times and the op list of a scenario: what both engines start from.
pub struct Priced<'a> {
    pub cost: CostModel<'a>,
    pub ops: workload::OpList,
    pub power: PowerState,
    pub n_micro: u64,
}

/// Check, build the op list and settle the clock: price at the sustained clock, let the power
/// model pick the clock for that activity, and return it for pricing at that clock.
pub fn price(s: &Scenario) -> Result<Priced<'_>, PredictError> {
    let n_micro = check_scenario(s)?;
    let cost = CostModel::new(&s.system, s.profile.as_ref());
    let ops = forward_ops(&s.model, &s.parallel, &s.workload);
    let parts = part_times(&cost, s, &ops, 1.0);
    let at_sustained: Vec<StageTimes> = (0..s.parallel.pp).map(|st| stage_times(s, &parts, st)).collect();
    let power = power::solve(&power_gpu(s), &activity(&step_breakdown(s, &cost, &at_sustained, n_micro)));
    Ok(Priced { cost, ops, power, n_micro })
}

/// Predict one scenario with the closed-form engine.
pub fn predict(s: &Scenario) -> Result<Prediction, PredictError> {
    let Priced { cost, ops, power, n_micro } = price(s)?;
    let parts = part_times(&cost, s, &ops, power.speedup);
    let stages: Vec<StageTimes> = (0..s.parallel.pp).map(|st| stage_times(s, &parts, st)).collect();
    let bd = step_breakdown(s, &cost, &stages, n_micro);
    Ok(finish(s, &cost, &ops, n_micro, bd, power))
}

/// Throughput, MFU, memory and energy from a step's breakdown (both engines).
pub fn finish(s: &Scenario, cost: &CostModel, ops: &workload::OpList, n_micro: u64, bd: Breakdown, power: PowerState) -> Prediction {
    let (pc, w) = (&s.parallel, &s.workload);
    let step_time = bd.total();
    let tokens_per_step = match w.mode {
        Mode::Train => (w.global_batch * w.seq) as f64,
        Mode::Prefill => (w.batch * w.seq * pc.dp as u64) as f64,
        Mode::Decode => (w.batch * pc.dp as u64) as f64,
    };
    let tokens_per_s = tokens_per_step / step_time.value();
    let model_flops_per_token = match w.mode {
        Mode::Train => workload::model_flops_per_token_train(&s.model, w.seq),
        Mode::Prefill => workload::model_flops_per_token_forward(&s.model, w.seq),
        // One new token attends over the whole cache.
        Mode::Decode => workload::model_flops_per_token_forward(&s.model, w.kv_len + 1),
    };
    let peak = cost.peak(w.precision).expect("checked").value();
    let mfu = model_flops_per_token * tokens_per_s / (s.n_gpus as f64 * peak);
    let hfu = executed_flops_per_gpu_step(s, ops, n_micro) / step_time.value() / peak;

    let memory = memory::plan(&s.model, pc, w, s.system.gpu.hbm_capacity.value);
    let n_nodes = (s.n_gpus as f64 / s.system.gpus_per_node as f64).ceil();
    let gpus_per_node = (s.n_gpus as f64).min(s.system.gpus_per_node as f64);
    let node_power = power.gpu_power * gpus_per_node + s.system.host_power_per_node.value;
    let energy_per_step = node_power * n_nodes * step_time;
    let energy_per_token = Joules::new(energy_per_step.value() / tokens_per_step);
    let energy_per_token_facility = energy_per_token * s.system.pue.value;

    Prediction {
        step_time,
        bottleneck: bottleneck(s, &bd),
        breakdown: bd,
        tokens_per_s,
        tokens_per_step,
        mfu,
        hfu,
        model_flops_per_token,
        memory,
        power,
        node_power,
        energy_per_step,
        energy_per_token,
        energy_per_token_facility,
        n_microbatches: n_micro,
    }
}

/// FLOPs one GPU executes per step, averaged over the pipeline stages (recompute included;
/// causal attention counts the unmasked half).
fn executed_flops_per_gpu_step(s: &Scenario, ops: &workload::OpList, n_micro: u64) -> f64 {
    let pc = &s.parallel;
    let mut total = 0.0;
    for stage in 0..pc.pp {
        let (n_dense, n_moe) = stage_layers(s, stage);
        let mut f = |list: &[Op], times: usize| {
            let fwd: f64 = list.iter().map(Op::flops).sum();
            let back: f64 = if s.workload.mode == Mode::Train {
                recompute_of(list, s.workload.recompute).iter().chain(backward_of(list).iter()).map(Op::flops).sum()
            } else {
                0.0
            };
            total += (fwd + back) * times as f64;
        };
        f(&ops.dense_layer, n_dense);
        f(&ops.moe_layer, n_moe);
        if stage == 0 {
            f(&ops.embedding, 1);
        }
        if stage == pc.pp - 1 {
            f(&ops.head, 1);
        }
    }
    // `total` is one micro-batch through all stages on one rank of each; per GPU of the job:
    total * n_micro as f64 / pc.pp as f64
}

/// `count` equal buckets, each one collective.
#[derive(Debug, Clone)]
pub struct Buckets {
    pub step: CommStep,
    pub count: usize,
}

fn expand(b: &[Buckets]) -> Vec<CommStep> {
    b.iter().flat_map(|x| std::iter::repeat_n(x.step.clone(), x.count)).collect()
}

fn total_time(b: &[Buckets]) -> Seconds {
    b.iter().map(|x| x.step.time() * x.count as f64).sum()
}

/// The data-parallel traffic of one rank of a stage, in the collectives NCCL runs.
#[derive(Debug, Clone, Default)]
pub struct DpPlan {
    /// Gradient buckets, reduced as backward produces them (all-reduce, or reduce-scatter under
    /// ZeRO >= 1), in launch order.
    pub grad: Vec<Buckets>,
    /// Parameter all-gathers after the optimizer step (ZeRO 1/2, Megatron's distributed optimizer).
    pub param: Vec<Buckets>,
    /// FSDP (ZeRO-3): one layer's all-gather before its forward and again before its backward, and
    /// its gradients' reduce-scatter after its backward, per micro-batch.
    pub layer_gather: Option<CommStep>,
    pub layer_reduce: Option<CommStep>,
    /// FSDP's copies on the compute stream around them (PyTorch FSDP2 copy-out of the gathered
    /// flat buffer into the layer's parameters, copy-in of the gradients before the
    /// reduce-scatter): memory-bound, read + write of the layer's parameters or gradients.
    pub gather_copy: Seconds,
    pub reduce_copy: Seconds,
    /// Optimizer step of the rank's shard: memory-bound.
    pub optimizer: Seconds,
}

impl DpPlan {
    /// Gradient buckets one by one, in launch order.
    pub fn grad_list(&self) -> Vec<CommStep> {
        expand(&self.grad)
    }
    /// Parameter all-gather buckets one by one.
    pub fn param_list(&self) -> Vec<CommStep> {
        expand(&self.param)
    }
}

/// Split `bytes` into equal buckets of at most `BUCKET_BYTES` and price one collective.
fn buckets(cost: &CostModel, pc: &ParallelConfig, op: CollectiveOp, group: Group, bytes: f64) -> Option<Buckets> {
    if bytes <= 0.0 {
        return None;
    }
    let n = (bytes / BUCKET_BYTES).ceil().max(1.0);
    Some(Buckets { step: cost.comm_step(pc, op, group, bytes / n, Overlap::Blocking), count: n as usize })
}

pub fn dp_plan(cost: &CostModel, s: &Scenario, stage: u32) -> DpPlan {
    let pc = &s.parallel;
    let sm = stack_memory(s.workload.stack);
    let (dense, experts) = memory::params_on_rank(&s.model, pc, stage);
    // Gradients are reduced in fp32 (Megatron's default main grads; DDP on fp32 params).
    let (grad_bytes, param_bytes) = (sm.grad, sm.param);
    let local = dense / if pc.zero >= 1 { pc.dp as f64 } else { 1.0 } + experts / if pc.zero >= 1 { pc.expert_dp() as f64 } else { 1.0 };
    let mut plan = DpPlan { optimizer: cost.memory_time(local * optimizer_bytes_per_param(s.workload.stack), 4).time, ..DpPlan::default() };
    let groups = [(Group::Dp, pc.dp, dense), (Group::ExpertDp, pc.expert_dp(), experts)];
    match pc.zero {
        0 => {
            for (g, size, n) in groups {
                if size > 1 {
                    plan.grad.extend(buckets(cost, pc, CollectiveOp::AllReduce, g, n * grad_bytes));
                }
            }
        }
        1 | 2 => {
            for (g, size, n) in groups {
                if size > 1 {
                    plan.grad.extend(buckets(cost, pc, CollectiveOp::ReduceScatter, g, n * grad_bytes));
                    plan.param.extend(buckets(cost, pc, CollectiveOp::AllGather, g, n * param_bytes));
                }
            }
        }
        _ => {
            if pc.dp > 1 {
                let layers = parallelism::stage_layer_counts(s.model.n_layers, pc)[stage as usize].max(1) as f64;
                let per_layer = (dense + experts) / layers;
                plan.layer_gather = Some(cost.comm_step(pc, CollectiveOp::AllGather, Group::Dp, per_layer * param_bytes, Overlap::Blocking));
                plan.layer_reduce = Some(cost.comm_step(pc, CollectiveOp::ReduceScatter, Group::Dp, per_layer * grad_bytes, Overlap::Blocking));
                if s.workload.stack != Stack::Megatron {
                    plan.gather_copy = cost.memory_time(2.0 * per_layer * param_bytes, 1).time;
                    plan.reduce_copy = cost.memory_time(2.0 * per_layer * grad_bytes, 1).time;
                }
            }
        }
    }
    plan
}

/// Exposed data-parallel communication and the optimizer step of the slowest rank.
fn data_parallel_and_optimizer(cost: &CostModel, s: &Scenario, stages: &[StageTimes], n_micro: u64) -> (Seconds, Seconds) {
    let pc: &ParallelConfig = &s.parallel;
    let mut worst = (Seconds::ZERO, Seconds::ZERO);
    // In the drain, stage s finishes its last backward while stages 0..s still run theirs: its
    // DP tail and optimizer hide behind them.
    let mut slack = Seconds::ZERO;
    let mut stretch = Seconds::ZERO;
    for (stage, st) in stages.iter().enumerate() {
        let plan = dp_plan(cost, s, stage as u32);
        let (grad_sync, param_sync) = (total_time(&plan.grad), total_time(&plan.param));
        let (bwd_one, fwd_one) = (st.bwd.total(), st.fwd.total());
        let (exposed, overlapped) = if let (Some(g), Some(r)) = (&plan.layer_gather, &plan.layer_reduce) {
            // FSDP: the next layer's gather runs beside this layer's compute; a layer costs the
            // longer of the two, plus FSDP's copies. The first gather of each pass is exposed.
            let layers = parallelism::stage_layer_counts(s.model.n_layers, pc)[stage] as f64;
            let (f_layer, b_layer) = (fwd_one / layers, bwd_one / layers);
            let fwd_wait = (g.time() - f_layer).max(Seconds::ZERO);
            let bwd_wait = (g.time() + r.time() - b_layer).max(Seconds::ZERO);
            let copies = plan.gather_copy * 2.0 + plan.reduce_copy;
            let per_micro = (fwd_wait + bwd_wait + copies) * layers + g.time() * 2.0;
            let comm = (g.time() * 2.0 + r.time()) * layers;
            let hidden = (comm - (fwd_wait + bwd_wait) * layers).max(Seconds::ZERO).min((fwd_one + bwd_one) * 1.0);
            (per_micro * n_micro as f64, hidden * n_micro as f64)
        } else if s.options.dp_overlap {
            // Buckets reduce during the last micro-batch's backward; the last bucket is exposed.
            let last = |v: &[Buckets]| v.last().map_or(Seconds::ZERO, |b| b.step.time());
            let g = (grad_sync - bwd_one + last(&plan.grad)).max(last(&plan.grad));
            // The parameter all-gather overlaps the next step's first forward (Megatron
            // --overlap-param-gather).
            let p = (param_sync - fwd_one + last(&plan.param)).max(last(&plan.param));
            // What runs beside compute: the gradient buckets within the last backward, and (on
            // the stage that starts at once) the parameter gathers within the first forward.
            let hidden_g = (grad_sync - g).max(Seconds::ZERO).min(bwd_one);
            let hidden_p = if stage == 0 { (param_sync - p).max(Seconds::ZERO).min(fwd_one) } else { Seconds::ZERO };
            (g + p, hidden_g + hidden_p)
        } else {
            (grad_sync + param_sync, Seconds::ZERO)
        };
        // Collectives slow the compute they overlap (`OVERLAP_COST`); each stage's stretched
        // passes are on the pipeline's fill or drain path, so they add up.
        stretch += overlapped * crate::cost::fitted::fitted().overlap_cost;
        let tail = exposed + plan.optimizer - slack;
        if tail > worst.0 + worst.1 {
            // Report the optimizer whole and the DP part as what is left of the tail.
            worst = ((tail - plan.optimizer).max(Seconds::ZERO), plan.optimizer.min(tail));
        }
        if s.workload.mode == Mode::Train && pc.pp > 1 {
            slack += st.bwd.total();
        }
    }
    (worst.0 + stretch, worst.1)
}

/// What limits the step most: compute, HBM, NVLink, the scale-out network, the pipeline bubble or
/// the CPU. Communication counts as network when its group spans NVLink domains.
fn bottleneck(s: &Scenario, bd: &Breakdown) -> &'static str {
    let crosses = |g: Group| parallelism::group_shape(&s.parallel, g, &s.system).crosses_domains();
    let (mut nvlink, mut network) = (Seconds::ZERO, Seconds::ZERO);
    for (t, g) in [(bd.tp_comm, Group::Tp), (bd.cp_comm, Group::Cp), (bd.ep_comm, Group::Ep), (bd.dp_comm, Group::Dp), (bd.pp_p2p, Group::Pp)] {
        if crosses(g) {
            network += t;
        } else {
            nvlink += t;
        }
    }
    let mut parts: BTreeMap<&'static str, f64> = BTreeMap::new();
    parts.insert("compute", bd.compute.value());
    parts.insert("hbm", (bd.memory + bd.optimizer).value());
    parts.insert("nvlink", nvlink.value());
    parts.insert("network", network.value());
    parts.insert("bubble", bd.pp_bubble.value());
    parts.insert("cpu", bd.cpu_launch.value());
    parts.into_iter().max_by(|a, b| a.1.total_cmp(&b.1)).map(|(k, _)| k).unwrap_or("compute")
}

/// Every hardware number a prediction of this scenario uses, with its source.
pub fn used_numbers(s: &Scenario) -> Vec<UsedNumber> {
    let cost = CostModel::new(&s.system, s.profile.as_ref());
    let w = &s.workload;
    let mut used = cost.used_numbers(w.precision);
    let g = power_gpu(s);
    used.push(UsedNumber { name: "tdp_w".into(), value: format!("{:.0}", g.tdp.value.value()), source: g.tdp.source.clone() });
    used.push(UsedNumber { name: "idle_w".into(), value: format!("{:.0}", g.idle_power.value.value()), source: g.idle_power.source.clone() });
    used.push(UsedNumber {
        name: "sustained_gemm_clock_mhz".into(),
        value: format!("{:.0}", g.efficiency.sustained_gemm_clock.value.as_mhz()),
        source: g.efficiency.sustained_gemm_clock.source.clone(),
    });
    used.push(UsedNumber {
        name: "host_power_per_node_w".into(),
        value: format!("{:.0}", s.system.host_power_per_node.value.value()),
        source: s.system.host_power_per_node.source.clone(),
    });
    used
}
