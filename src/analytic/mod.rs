//! Closed-form step time with overlap rules, and the whole prediction (throughput, MFU, memory,
//! power, energy). Fast: the planner calls it millions of times.

use std::collections::BTreeMap;

use crate::cost::{Bound, CostModel, UsedNumber};
use crate::hardware::profile::CollectiveOp;
use crate::memory::{self, stack_memory, MemoryPlan};
use crate::parallelism::{self, group_shape, Group, Infeasible, ParallelConfig};
use crate::power::{self, Activity, PowerState};
use crate::scenario::Scenario;
use crate::units::{Joules, Seconds, Watts};
use crate::workload::{self, backward_of, forward_ops, recompute_of, Mode, Op, OpKind, Stack};

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
        for s in [
            &mut self.compute,
            &mut self.memory,
            &mut self.tp_comm,
            &mut self.cp_comm,
            &mut self.ep_comm,
            &mut self.pp_p2p,
            &mut self.cpu_launch,
        ] {
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
    pub used: Vec<UsedNumber>,
}

/// Why a scenario cannot be predicted at all (bad configuration, as opposed to not fitting).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PredictError {
    #[error("{}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; "))]
    Infeasible(Vec<Infeasible>),
    #[error("{0}")]
    Unsupported(String),
}

/// Per-kernel CPU dispatch cost of each stack (PyTorch eager op + autograd bookkeeping, or a
/// Megatron/TE fused kernel). Engineering estimates until fitted on the measured runs.
fn cpu_dispatch(stack: Stack) -> Seconds {
    match stack {
        Stack::TorchEager => Seconds::us(9.0),
        Stack::TorchCompile => Seconds::us(6.0),
        Stack::Megatron => Seconds::us(6.0),
    }
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

/// DDP/Megatron gradient bucket size (PyTorch DDP `bucket_cap_mb` = 25).
const BUCKET_BYTES: f64 = 25e6;
/// Share of TP communication that stays exposed even with overlap (pipelined chunks' fill).
const TP_OVERLAP_EXPOSED: f64 = 0.1;

/// Time of one pass (forward, or backward + recompute) of one micro-batch through one stage.
struct PassTime {
    bd: Breakdown,
    /// Kernels launched (CPU dispatch).
    kernels: f64,
}

fn op_cost(cost: &CostModel, s: &Scenario, op: &Op) -> (Bound, Seconds, Option<Group>) {
    let dtype = s.workload.precision;
    match &op.kind {
        OpKind::Gemm { m, n, k, count } => {
            let c = cost.gemm_time(*m, *n, *k, *count, dtype);
            (c.bound, c.time, None)
        }
        OpKind::Attention { .. } => {
            let c = cost.attention_time(op);
            (c.bound, c.time, None)
        }
        OpKind::Memory { bytes, kernels } => {
            let c = cost.memory_time(*bytes, *kernels);
            (c.bound, c.time, None)
        }
        OpKind::Comm { op: c, group, bytes } => {
            let shape = group_shape(&s.parallel, *group, &s.system);
            (Bound::Comm, cost.collective_time(*c, &shape, *bytes).time, Some(*group))
        }
    }
}

fn kernel_count(op: &Op) -> f64 {
    match &op.kind {
        OpKind::Memory { kernels, .. } => *kernels as f64,
        _ => 1.0,
    }
}

/// Time of a list of ops on one rank, with TP/CP/EP communication exposed per the overlap rules.
fn pass_time(cost: &CostModel, s: &Scenario, ops: &[Op], times: usize) -> PassTime {
    let mut bd = Breakdown::default();
    let mut gemm = Seconds::ZERO;
    let mut attention = Seconds::ZERO;
    let (mut tp, mut cp, mut ep) = (Seconds::ZERO, Seconds::ZERO, Seconds::ZERO);
    let mut kernels = 0.0;
    for op in ops {
        let (bound, t, group) = op_cost(cost, s, op);
        kernels += kernel_count(op);
        match (bound, group) {
            (Bound::Compute, _) => {
                bd.compute += t;
                if matches!(op.kind, OpKind::Attention { .. }) {
                    attention += t;
                } else {
                    gemm += t;
                }
            }
            (Bound::Memory, _) => bd.memory += t,
            (Bound::Comm, Some(Group::Cp)) => cp += t,
            (Bound::Comm, Some(Group::Ep)) => ep += t,
            (Bound::Comm, _) => tp += t,
        }
    }
    bd.tp_comm = if s.options.tp_comm_overlap { (tp * TP_OVERLAP_EXPOSED).max(tp - gemm) } else { tp };
    // Ring attention overlaps the KV exchange with the attention of the chunk in hand.
    bd.cp_comm = (cp - attention).max(cp * (1.0 / s.parallel.cp.max(1) as f64));
    bd.ep_comm = ep;
    bd.scale(times as f64);
    PassTime { bd, kernels: kernels * times as f64 }
}

/// GPU time of a pass, or the CPU's launch time if that is longer (the GPU then waits).
fn with_cpu(p: PassTime, stack: Stack) -> Breakdown {
    let mut bd = p.bd;
    let gpu = bd.total();
    let cpu = cpu_dispatch(stack) * p.kernels;
    if cpu > gpu {
        bd.cpu_launch = cpu - gpu;
    }
    bd
}

/// Layers of each kind in pipeline stage `stage` (dense layers come first in MoE models).
fn stage_layers(s: &Scenario, stage: u32) -> (usize, usize) {
    let per = (s.model.n_layers / s.parallel.pp as u64) as usize;
    let first = stage as usize * per;
    let dense_total = s.model.n_dense_layers() as usize;
    let dense = dense_total.saturating_sub(first).min(per);
    (dense, per - dense)
}

struct StageTimes {
    fwd: Breakdown,
    bwd: Breakdown,
}

fn stage_times(cost: &CostModel, s: &Scenario, ops: &workload::OpList, stage: u32) -> StageTimes {
    let (n_dense, n_moe) = stage_layers(s, stage);
    let train = s.workload.mode == Mode::Train;
    let stack = s.workload.stack;
    let mut fwd = Breakdown::default();
    let mut bwd = Breakdown::default();
    let mut add = |list: &[Op], times: usize| {
        if times == 0 || list.is_empty() {
            return;
        }
        fwd.add(&with_cpu(pass_time(cost, s, list, times), stack));
        if train {
            let mut back = recompute_of(list, s.workload.recompute);
            back.extend(backward_of(list));
            bwd.add(&with_cpu(pass_time(cost, s, &back, times), stack));
        }
    };
    add(&ops.dense_layer, n_dense);
    add(&ops.moe_layer, n_moe);
    if stage == 0 {
        add(&ops.embedding, 1);
    }
    if stage == s.parallel.pp - 1 {
        add(&ops.head, 1);
    }
    StageTimes { fwd, bwd }
}

/// Predict one scenario with the closed-form engine.
pub fn predict(s: &Scenario) -> Result<Prediction, PredictError> {
    let pc = &s.parallel;
    let problems = parallelism::check(&s.model, pc, s.n_gpus);
    if !problems.is_empty() {
        return Err(PredictError::Infeasible(problems));
    }
    let w = &s.workload;
    if s.system.gpu.peak.get(w.precision).is_none() {
        return Err(PredictError::Unsupported(format!(
            "`{}` has no {} tensor-core path; choose a precision it supports",
            s.system.gpu.display_name,
            w.precision.name()
        )));
    }
    let cost = CostModel::new(&s.system, s.profile.as_ref());
    let ops = forward_ops(&s.model, pc, w);
    let stages: Vec<StageTimes> = (0..pc.pp).map(|st| stage_times(&cost, s, &ops, st)).collect();

    let n_micro = match w.mode {
        Mode::Train => w.global_batch / (w.micro_batch * pc.dp as u64),
        _ => 1,
    };
    if w.mode == Mode::Train && (n_micro == 0 || w.global_batch % (w.micro_batch * pc.dp as u64) != 0) {
        return Err(PredictError::Infeasible(vec![Infeasible::Indivisible {
            what: "global_batch",
            n: w.global_batch,
            by_name: "micro_batch*dp",
            by: w.micro_batch * pc.dp as u64,
        }]));
    }

    // Pipeline: p2p of one micro-batch's activations between stages (1/tp of it under SP).
    let mut p2p = Seconds::ZERO;
    if pc.pp > 1 {
        let tokens = (w.sequences() * w.q_len()) as f64 / pc.cp as f64;
        let shard = if pc.sp && pc.tp > 1 { pc.tp as f64 } else { 1.0 };
        let bytes = tokens * s.model.hidden as f64 * 2.0 / shard;
        let shape = group_shape(pc, Group::Pp, &s.system);
        let pair = parallelism::GroupShape { size: 2, ..shape };
        p2p = cost.collective_time(CollectiveOp::SendRecv, &pair, bytes).time;
    }

    let mut bd = Breakdown::default();
    let per_stage: Vec<Seconds> = stages.iter().map(|st| st.fwd.total() + st.bwd.total()).collect();
    let slowest_idx = per_stage.iter().enumerate().fold((0, Seconds::ZERO), |acc, (i, t)| if *t > acc.1 { (i, *t) } else { acc }).0;
    let p2p_per_micro = if w.mode == Mode::Train { p2p * 2.0 } else { p2p };
    match w.mode {
        Mode::Train => {
            // 1F1B: m micro-batches at the pace of the slowest stage, plus fill and drain of
            // (p - 1) / vp stage-times (Narayanan et al. 2021, eq. for the interleaved schedule).
            let m = n_micro as f64;
            let mut per_micro = stages[slowest_idx].fwd.clone();
            per_micro.add(&stages[slowest_idx].bwd);
            per_micro.scale(m);
            per_micro.pp_bubble = Seconds::ZERO;
            bd.add(&per_micro);
            if pc.pp > 1 {
                let mean = per_stage.iter().copied().sum::<Seconds>() / pc.pp as f64;
                bd.pp_bubble = (mean + p2p_per_micro) * ((pc.pp - 1) as f64 / pc.vp as f64);
                bd.pp_p2p = p2p_per_micro * m;
            }
        }
        Mode::Prefill | Mode::Decode => {
            // One batch flows through the stages in turn.
            for st in &stages {
                bd.add(&st.fwd);
            }
            bd.pp_p2p = p2p * (pc.pp - 1) as f64;
        }
    }

    if w.mode == Mode::Train {
        let (dp_exposed, opt) = data_parallel_and_optimizer(&cost, s, &stages, n_micro);
        bd.dp_comm = dp_exposed;
        bd.optimizer = opt;
    }

    // Power: activity of the slowest rank over the step.
    let activity = Activity {
        compute: bd.compute,
        memory: bd.memory + bd.optimizer,
        comm: bd.tp_comm + bd.cp_comm + bd.ep_comm + bd.pp_p2p + bd.dp_comm,
        idle: bd.pp_bubble + bd.cpu_launch,
    };
    let power = power::solve(&s.system.gpu, &activity);
    bd.compute = bd.compute / power.speedup;
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
    let peak = cost.peak(w.precision).expect("checked above").value();
    let mfu = model_flops_per_token * tokens_per_s / (s.n_gpus as f64 * peak);
    let hfu = executed_flops_per_gpu_step(s, &ops, n_micro) / step_time.value() / peak;

    let memory = memory::plan(&s.model, pc, w, s.system.gpu.hbm_capacity.value);
    let n_nodes = (s.n_gpus as f64 / s.system.gpus_per_node as f64).ceil();
    let gpus_per_node = (s.n_gpus as f64).min(s.system.gpus_per_node as f64);
    let node_power = power.gpu_power * gpus_per_node + s.system.host_power_per_node.value;
    let energy_per_step = node_power * n_nodes * step_time;
    let energy_per_token = Joules::new(energy_per_step.value() / tokens_per_step);
    let energy_per_token_facility = energy_per_token * s.system.pue.value;

    let bottleneck = bottleneck(&bd);
    let mut used = cost.used_numbers(w.precision);
    used.push(UsedNumber { name: "tdp_w".into(), value: format!("{:.0}", s.system.gpu.tdp.value.value()), source: s.system.gpu.tdp.source.clone() });
    used.push(UsedNumber {
        name: "sustained_gemm_clock_mhz".into(),
        value: format!("{:.0}", s.system.gpu.efficiency.sustained_gemm_clock.value.as_mhz()),
        source: s.system.gpu.efficiency.sustained_gemm_clock.source.clone(),
    });
    Ok(Prediction {
        step_time,
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
        bottleneck,
        used,
    })
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

/// Exposed data-parallel communication and the optimizer step of the slowest rank.
fn data_parallel_and_optimizer(cost: &CostModel, s: &Scenario, stages: &[StageTimes], n_micro: u64) -> (Seconds, Seconds) {
    let pc: &ParallelConfig = &s.parallel;
    let w = &s.workload;
    let sm = stack_memory(w.stack);
    let mut worst_dp = Seconds::ZERO;
    let mut worst_opt = Seconds::ZERO;
    for (stage, st) in stages.iter().enumerate() {
        let (dense, experts) = memory::params_on_rank(&s.model, pc, stage as u32);
        let dp_shape = group_shape(pc, Group::Dp, &s.system);
        let edp_shape = group_shape(pc, Group::ExpertDp, &s.system);
        let grad_bytes = sm.grad; // gradients are reduced in fp32 (Megatron default, DDP on fp32 params)
        let param_bytes = sm.param;
        let sync = |shape: &parallelism::GroupShape, n: f64| -> (Seconds, Seconds) {
            if shape.size <= 1 || n == 0.0 {
                return (Seconds::ZERO, Seconds::ZERO);
            }
            match pc.zero {
                0 => (cost.collective_time(CollectiveOp::AllReduce, shape, n * grad_bytes).time, Seconds::ZERO),
                1 | 2 => (
                    cost.collective_time(CollectiveOp::ReduceScatter, shape, n * grad_bytes).time,
                    cost.collective_time(CollectiveOp::AllGather, shape, n * param_bytes).time,
                ),
                _ => (
                    // FSDP: per micro-batch all-gather in forward and backward, reduce-scatter of grads.
                    cost.collective_time(CollectiveOp::ReduceScatter, shape, n * grad_bytes).time * n_micro as f64,
                    cost.collective_time(CollectiveOp::AllGather, shape, n * param_bytes).time * (2 * n_micro) as f64,
                ),
            }
        };
        let (g1, p1) = sync(&dp_shape, dense);
        let (g2, p2) = sync(&edp_shape, experts);
        let grad_sync = g1 + g2;
        let param_sync = p1 + p2;
        let bwd_one = st.bwd.total();
        let fwd_one = st.fwd.total();
        let buckets = ((dense + experts) * grad_bytes / BUCKET_BYTES).max(1.0);
        let exposed = if pc.zero == 3 {
            // Prefetching hides gathers behind the compute of every micro-batch except the first layer's.
            let compute = (fwd_one + bwd_one) * n_micro as f64;
            (grad_sync + param_sync - compute).max(Seconds::ZERO) + (grad_sync + param_sync) / (s.model.n_layers as f64 * n_micro as f64)
        } else if s.options.dp_overlap {
            // Buckets reduce during the last micro-batch's backward; the last bucket is exposed.
            let g = (grad_sync - bwd_one * (1.0 - 1.0 / buckets)).max(grad_sync / buckets);
            // Parameter all-gather after the optimizer overlaps the next forward (Megatron
            // --overlap-param-gather); without it, it is exposed.
            let p = (param_sync - fwd_one).max(param_sync / buckets);
            g + p
        } else {
            grad_sync + param_sync
        };
        let local = dense / if pc.zero >= 1 { pc.dp as f64 } else { 1.0 } + experts / if pc.zero >= 1 { pc.expert_dp() as f64 } else { 1.0 };
        let opt = cost.memory_time(local * optimizer_bytes_per_param(w.stack), 4).time;
        if exposed + opt > worst_dp + worst_opt {
            worst_dp = exposed;
            worst_opt = opt;
        }
    }
    (worst_dp, worst_opt)
}

fn bottleneck(bd: &Breakdown) -> &'static str {
    let mut parts: BTreeMap<&'static str, f64> = BTreeMap::new();
    parts.insert("compute", bd.compute.value());
    parts.insert("hbm", (bd.memory + bd.optimizer).value());
    parts.insert("nvlink/network", (bd.tp_comm + bd.cp_comm + bd.ep_comm + bd.dp_comm + bd.pp_p2p).value());
    parts.insert("bubble", bd.pp_bubble.value());
    parts.insert("cpu", bd.cpu_launch.value());
    parts.into_iter().max_by(|a, b| a.1.total_cmp(&b.1)).map(|(k, _)| k).unwrap_or("compute")
}
