//! Closed-form step time with overlap rules, and the whole prediction (throughput, MFU, memory,
//! power, energy). Fast: the planner calls it millions of times. What it shares with the DES
//! (`Prediction`, `Breakdown`, `dp_plan`, `p2p_step`, `finish`, ...) lives in `step` and is
//! re-exported here.

use crate::cost::lower::{Overlap, Step};
use crate::cost::{Bound, CostModel, UsedNumber};
use crate::parallelism::{self, Group, ParallelConfig};
use crate::power::{self, Activity};
use crate::scenario::Scenario;
use crate::units::Seconds;
use crate::workload::{self, backward_of, forward_ops, recompute_of, Mode, Op};

use crate::step::total_time;
pub use crate::step::{
    check_scenario, dp_plan, finish, n_micro_of, p2p_step, stage_layers, Breakdown, Buckets, DpPlan, PredictError, Prediction, Priced, BUCKET_BYTES,
};

/// Defined with the other fitted constants in `cost::fitted`.
pub use crate::cost::fitted::OVERLAP_COST;

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
            Step::Comm { comm: c, .. } => comm.push((c.group, comm_exposed(steps, i))),
        }
    }
    (compute, memory, cpu, sync, comm)
}

/// The exposed time of the collective `steps[i]`: all of it when blocking; beside the next kernel,
/// its latency and blocking part plus whatever of the rest outlasts that kernel.
fn comm_exposed(steps: &[Step], i: usize) -> Seconds {
    let Some(Step::Comm { comm: c, .. }) = steps.get(i) else { return Seconds::ZERO };
    match c.overlap {
        Overlap::Blocking => c.time(),
        Overlap::WithNextKernel { blocking } => {
            let beside = match steps.get(i + 1) {
                Some(Step::Kernel { time, .. }) => *time,
                _ => Seconds::ZERO,
            };
            c.total_latency() + c.transfer(blocking) + (c.transfer(1.0 - blocking) - beside).max(Seconds::ZERO)
        }
    }
}

/// The time from one drain of the launch queue to the next (Megatron's MoE dispatcher syncing the
/// host, `cost::lower::drains_launch_queue`), for a part whose op list drains once: at the drain
/// the GPU is idle and the host's lead is gone; from there the host issues the steps in order (the
/// list from the draining op to its end, then the next layer's steps before it), each kernel
/// starting once its first launch is issued and the GPU is free and ending no earlier than its last
/// launch, each exposed collective on the GPU's stream in turn. This is the DES's rule
/// (`sim`: host cursor and GPU clock), which the pooled max(launch, GPU) of a pass cannot give:
/// after a drain the host's per-expert launches come before the GPU work that could hide them.
/// The host sync itself (`host_sync`) is not in it.
fn drained_span(steps: &[Step], drain: usize) -> Seconds {
    let (mut host, mut gpu) = (0.0_f64, 0.0_f64);
    for i in (drain..steps.len()).chain(0..drain) {
        match &steps[i] {
            Step::Kernel { time, cpu, launches, .. } => {
                let first = host + if *launches > 0.0 { cpu.value() / launches.max(1.0) } else { 0.0 };
                host += cpu.value();
                gpu = (gpu.max(first) + time.value()).max(host);
            }
            Step::Comm { .. } => gpu = gpu.max(host) + comm_exposed(steps, i).value(),
        }
    }
    Seconds::new(gpu)
}

fn pass_time(cost: &CostModel, s: &Scenario, ops: &[Op], times: usize, speedup: f64) -> PassTime {
    debug_assert!(times >= 1);
    let steps = cost.lower(&s.model, &s.parallel, &s.options, &s.workload, ops, speedup);
    let (compute, memory, mut cpu, host_sync, comm) = exposed_time(&steps);
    // Host time the GPU waits for in full is a stall on the critical path.
    let launch_floor = steps
        .iter()
        .map(|st| match st {
            Step::Kernel { time, bound, launches, .. } if *bound != Bound::Compute => (cost.kernel_overhead() * *launches).min(*time),
            _ => Seconds::ZERO,
        })
        .sum::<Seconds>();
    // Each step's share of its bytes' time that its bytes at the stream rate fill (one step per
    // op; where a post-pass rewrote the list, 1). Not on MoE models: the parts probe measured no
    // MoE step, and there the lighter power lets capped steps clock higher, moving the hf test
    // split's MoE training step time 3.2 -> 4.4% (calibration/runs/hf/FIT.md, thirteenth pass).
    let shares: Vec<f64> = if steps.len() == ops.len() && !s.model.is_moe() {
        ops.iter().map(|op| crate::cost::lower::memory_stream_share(cost, &s.workload, op)).collect()
    } else {
        vec![1.0; steps.len()]
    };
    let memory_unstreamed = steps
        .iter()
        .zip(&shares)
        .map(|(st, share)| match st {
            Step::Kernel { time, bound: Bound::Memory, launches, .. } => (*time - (cost.kernel_overhead() * *launches).min(*time)) * (1.0 - share),
            _ => Seconds::ZERO,
        })
        .sum::<Seconds>();
    let (memory_l2, tensor_idle) = (l2_resident_time(cost, s, &steps, &shares), gemm_tensor_idle(cost, s, ops, &steps, speedup));
    let mut bd = Breakdown { compute, memory, cpu_launch: host_sync, launch_floor, memory_l2, tensor_idle, memory_unstreamed, ..Breakdown::default() };
    // A part that drains the launch queue: its launches are exposed where they outlast the GPU
    // from the drain on, in the part itself, not pooled over the stage's pass.
    if let Some(drain) = ops.iter().position(|op| crate::cost::lower::drains_launch_queue(&s.options, &s.workload, op)) {
        // One step per op, unless a post-pass (TE's userbuffers) rewrote the list: then by name.
        let drain = if steps.len() == ops.len() { drain } else { steps.iter().position(|st| matches!(st, Step::Kernel { name: "permute", .. })).unwrap_or(0) };
        let gpu = compute + memory + comm.iter().map(|(_, t)| *t).sum::<Seconds>();
        bd.cpu_launch += (drained_span(&steps, drain) - gpu).max(Seconds::ZERO);
        cpu = Seconds::ZERO;
    }
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

/// The bytes' own time (priced time less the per-launch floor) of the memory-bound kernels whose
/// bytes per launch fit in half the GPU's L2 (`Breakdown::memory_l2`). Half: on the lent H100
/// (50 MiB L2) 12 MiB per launch drew the L2 level and 48 MiB nearly an HBM stream's
/// (`power::L2_RESIDENT_POWER_SHARE`). Zero where the system gives no L2 size.
fn l2_resident_time(cost: &CostModel, s: &Scenario, steps: &[Step], shares: &[f64]) -> Seconds {
    let Some(l2) = s.system.gpu.l2_cache.as_ref().map(|c| c.value.value()) else { return Seconds::ZERO };
    let rate = cost.stream_bandwidth().value();
    steps
        .iter()
        .zip(shares)
        .map(|(st, share)| match st {
            Step::Kernel { time, bound: Bound::Memory, launches, .. } => {
                let bytes_time = (*time - (cost.kernel_overhead() * *launches).min(*time)) * *share;
                let bytes_per_launch = bytes_time.value() * rate / launches.max(1.0);
                if bytes_per_launch <= 0.5 * l2 {
                    bytes_time
                } else {
                    Seconds::ZERO
                }
            }
            _ => Seconds::ZERO,
        })
        .sum()
}

/// Of a pass's compute time, the dense bf16 GEMMs' time times one less their FLOP rate over the
/// large GEMM's (8192^3, as this cost model prices it, at the same clock): `Breakdown::tensor_idle`.
/// Measured on small GEMMs at the top clock (`power` module doc). Only single GEMMs (`count` 1) of
/// bf16 workloads, where the steps are the ops one to one: the probe measured no grouped, FP8 or
/// attention kernel, and those keep the whole time as tensor time, as before.
fn gemm_tensor_idle(cost: &CostModel, s: &Scenario, ops: &[Op], steps: &[Step], speedup: f64) -> Seconds {
    let dtype = crate::hardware::Dtype::Bf16;
    if s.workload.precision != dtype || steps.len() != ops.len() {
        return Seconds::ZERO;
    }
    let large = cost.peak(dtype).map_or(0.0, |p| p.value()) * cost.gemm_efficiency(8192, 8192, 8192, 1, dtype) * speedup;
    if large <= 0.0 {
        return Seconds::ZERO;
    }
    ops.iter()
        .zip(steps)
        .map(|(op, st)| match (&op.kind, st) {
            (workload::OpKind::Gemm { count: 1, .. }, Step::Kernel { time, bound: Bound::Compute, .. }) if time.value() > 0.0 => {
                *time * (1.0 - (op.flops() / (time.value() * large)).min(1.0))
            }
            _ => Seconds::ZERO,
        })
        .sum()
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

struct StageTimes {
    fwd: Breakdown,
    bwd: Breakdown,
}

/// Forward and backward (+ recompute) pass times of one of each part of the model, priced once
/// and combined per stage.
struct PartTimes {
    /// One layer of each `LayerKind`, by `LayerKind::index`.
    layers: Vec<(PassTime, PassTime)>,
    /// A checkpointed layer's forward run again (layer checkpointing, `Recompute::Layers`), by
    /// `LayerKind::index`; empty otherwise.
    reruns: Vec<PassTime>,
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
            let mut back = recompute_of(list, &s.workload);
            back.extend(backward_of(list));
            pass_time(cost, s, &back, 1, speedup)
        } else {
            PassTime::default()
        };
        (f, b)
    };
    let reruns = if train && matches!(s.workload.recompute, workload::Recompute::Layers(_)) {
        crate::model::LayerKind::ALL
            .iter()
            .map(|k| {
                let list = ops.layer(*k);
                if list.is_empty() {
                    PassTime::default()
                } else {
                    pass_time(cost, s, &workload::rerun_of(list), 1, speedup)
                }
            })
            .collect()
    } else {
        Vec::new()
    };
    PartTimes {
        layers: crate::model::LayerKind::ALL.iter().map(|k| both(ops.layer(*k))).collect(),
        reruns,
        embedding: both(&ops.embedding),
        head: both(&ops.head),
    }
}

fn stage_times(s: &Scenario, parts: &PartTimes, stage: u32) -> StageTimes {
    let counts = stage_layers(s, stage);
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
    for (part, n) in parts.layers.iter().zip(counts) {
        add(part, n as usize);
    }
    if stage == s.parallel.pp - 1 {
        add(&parts.head, 1);
    }
    // Layer checkpointing: the rank's checkpointed layers run their forward again.
    if !parts.reruns.is_empty() {
        let rc = s.workload.recompute;
        let picked = rc.checkpointed_kind_counts(&s.model, &s.parallel, stage);
        for (rerun, n) in parts.reruns.iter().zip(picked) {
            let mut b = rerun.bd.clone();
            b.scale(n as f64);
            bwd.bd.add(&b);
            bwd.cpu += rerun.cpu * n as f64;
        }
    }
    // The CPU runs ahead of the GPU within a pass; the GPU waits only when launching takes longer.
    StageTimes { fwd: with_cpu(fwd), bwd: with_cpu(bwd) }
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
                // Megatron-Core's non-interleaved 1F1B (`forward_backward_pipelining_without_interleaving`)
                // exchanges with its neighbours blocking (`send_forward_recv_backward` and
                // `send_backward_recv_forward` wait on their requests; `overlap_p2p_comm` is for the
                // interleaved schedule only; megatron-core's schedules.py and p2p_communication.py,
                // from memory), so each micro-batch's two exchanges sit on the stage's critical
                // path; the interleaved schedule overlaps them with the next chunk's compute.
                let steady = if pc.vp == 1 { 2 * n_micro } else { 0 };
                bd.pp_p2p = p2p * (2 * u64::from(pc.pp - 1) + steady) as f64;
            }
            let (dp, opt) = data_parallel_and_optimizer(cost, s, stages, n_micro);
            bd.dp_comm = dp;
            bd.optimizer = opt;
            // The training loop's host time after the backward (the HF Trainer's), GPU idle.
            let loop_host = crate::step::hf_trainer_host(s);
            bd.cpu_launch += loop_host;
            bd.loop_host += loop_host;
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
///
/// In decode the memory-bound kernels are small (one token per sequence) and most of their time
/// is the per-launch floor (`Breakdown::launch_floor`). Where the host is the bottleneck (the GPU
/// waits on the host longer than it runs kernels: the `hf-*` stacks' plan builds and per-layer
/// Python), each kernel starts on an idle GPU as the host reaches it and HBM is not streaming
/// during its floor: that part draws idle power, and only the bytes' own time draws `hbm_load_w`.
/// Where kernels queue back to back (GPU-bound decode) the floors overlap the neighbours'
/// streaming and stay activity. Only the `hf-*` stacks: their host time is measured (`calibrate
/// --host`) and mostly stalls the GPU waits for in full; the `torch-*` stacks' host time is a
/// per-kernel dispatch rate, and on the reference loop's decode rows (calibration/runs/h200.jsonl,
/// h200-024, -027, -028: 289-358 W measured) the rule would take 14-25% off their power. Seen in the HF run
/// set's NVML averages (calibration/runs/hf/FIT.md, "Fifth pass"): batch-1 decode steps of
/// 47-110 ms sit within 0-17 W of the profile's idle power although their kernels (floors
/// included) fill 5-12% of the step, and at batch 32-64 the measured excess over idle matches
/// the bytes' share.
///
/// In training and prefill of the `hf-*` stacks where the GPU waits on the host (`cpu_launch`: the
/// per-layer Python and dispatch of eager transformers outrun the kernels, post-fit 7's H200 runs
/// hf-140..146 and the H100's hf-072), the kernels likewise run one at a time as the host issues
/// them, and the probe of small kernels (`power` module doc) prices them: the memory-bound kernels'
/// floors draw idle power, their bytes that stay in L2 `L2_RESIDENT_POWER_SHARE` of the HBM
/// stream's excess, and the dense GEMMs' tensor power follows their FLOP rate (`tensor_idle`).
/// GPU-bound training keeps the whole kernel time as activity: there the power cap decides the
/// clock the step time was fitted at, and the same rules moved the reference loop's measured set
/// (calibration/runs/h200.jsonl) off (step 9.2% -> 10.4% on its fit split with all steps;
/// `torch-*` steps with host exposure, power 6.4% -> 6.8%): calibration/runs/hf/FIT.md, tenth pass.
fn activity(bd: &Breakdown, w: &workload::Workload) -> Activity {
    let host_bound = bd.cpu_launch > bd.compute + bd.memory;
    let starved = w.stack.hf() && w.mode != Mode::Decode && bd.cpu_launch > bd.loop_host;
    let floor = if (w.stack.hf() && w.mode == Mode::Decode && host_bound) || starved { bd.launch_floor.min(bd.memory) } else { Seconds::ZERO };
    let unstreamed = if starved { bd.memory_unstreamed.min(bd.memory - floor) } else { Seconds::ZERO };
    let (memory_l2, tensor_idle) =
        if starved { (bd.memory_l2.min(bd.memory - floor - unstreamed), bd.tensor_idle.min(bd.compute)) } else { (Seconds::ZERO, Seconds::ZERO) };
    Activity {
        compute: bd.compute,
        memory: bd.memory - floor - unstreamed + bd.optimizer,
        comm: bd.tp_comm + bd.cp_comm + bd.ep_comm + bd.pp_p2p + bd.dp_comm,
        idle: bd.cpu_launch + floor + unstreamed,
        // The pipeline's fill and drain: each stage idles (pp - 1) chunks in one stretch, tens of
        // ms and more, longer than the power limiter's window (`power` module doc).
        long_idle: bd.pp_bubble,
        memory_l2,
        tensor_idle,
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

/// The cost model of a scenario: its stack's kernels, replayed from a CUDA graph (each kernel at
/// the GPU's in-graph floor) when Megatron training captures the whole iteration.
fn cost_model(s: &Scenario) -> CostModel<'_> {
    let cost = CostModel::new(&s.system, s.profile.as_ref()).for_stack(s.workload.stack);
    let full =
        s.workload.stack == crate::workload::Stack::Megatron && s.workload.mode == Mode::Train && s.options.cuda_graphs == crate::scenario::TrainGraphs::Full;
    if full {
        cost.in_cuda_graph()
    } else {
        cost
    }
}

/// Check, build the op list and settle the clock: price at the sustained clock, let the power
/// model pick the clock for that activity, and return it for pricing at that clock.
pub fn price(s: &Scenario) -> Result<Priced<'_>, PredictError> {
    let n_micro = check_scenario(s)?;
    let cost = cost_model(s);
    let ops = forward_ops(&s.model, &s.parallel, &s.workload);
    let parts = part_times(&cost, s, &ops, 1.0);
    let at_sustained: Vec<StageTimes> = (0..s.parallel.pp).map(|st| stage_times(s, &parts, st)).collect();
    let power = power::solve_with_idle(
        &power_gpu(s),
        &activity(&step_breakdown(s, &cost, &at_sustained, n_micro), &s.workload),
        s.options.run_idle.as_ref().map(|i| i.value),
    );
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

/// Exposed data-parallel communication and the optimizer step of the slowest rank.
fn data_parallel_and_optimizer(cost: &CostModel, s: &Scenario, stages: &[StageTimes], n_micro: u64) -> (Seconds, Seconds) {
    let pc: &ParallelConfig = &s.parallel;
    let mut worst = (Seconds::ZERO, Seconds::ZERO);
    // In the drain, stage s finishes its last backward while stages 0..s still run theirs: its
    // DP tail and optimizer hide behind them.
    let mut slack = Seconds::ZERO;
    let mut stretch = Seconds::ZERO;
    // Overlapped collectives beside compute that the stages run at the same time (interleaved
    // schedule's cool-down): only the largest stage's stretch is on the critical path.
    let mut beside = Seconds::ZERO;
    for (stage, st) in stages.iter().enumerate() {
        let plan = dp_plan(cost, s, stage as u32);
        let (grad_sync, param_sync) = (total_time(&plan.grad), total_time(&plan.param));
        let (bwd_one, fwd_one) = (st.bwd.total(), st.fwd.total());
        let (exposed, overlapped) = if let (Some(g), Some(r)) = (&plan.layer_gather, &plan.layer_reduce) {
            // FSDP: the next layer's gather runs beside this layer's compute; a layer costs the
            // longer of the two, plus FSDP's copies; the pass's edges are exposed.
            let layers = parallelism::stage_layer_counts(s.model.n_layers, pc)[stage] as f64;
            let (f_layer, b_layer) = (fwd_one / layers, bwd_one / layers);
            let fwd_wait = (g.time() - f_layer).max(Seconds::ZERO);
            if plan.per_step {
                // Gathered once, beside the first micro-batch's forward (the first layer's gather
                // exposed), kept to the end; every layer's gradients reduce-scattered after the
                // last backward, nothing left to overlap them with on this stage.
                let gather = fwd_wait * layers + g.time() + plan.gather_copy * layers;
                let reduce = (r.time() + plan.reduce_copy) * layers;
                let hidden = (g.time() * layers - fwd_wait * layers).max(Seconds::ZERO).min(fwd_one);
                (gather + reduce, hidden)
            } else {
                let bwd_wait = (g.time() + r.time() - b_layer).max(Seconds::ZERO);
                let copies = plan.gather_copy * 2.0 + plan.reduce_copy;
                // What nothing overlaps (`step::fsdp_pass_edges`): the first gather of each pass,
                // or under FSDP2 the forward's first gather and the last reduce-scatter's tail.
                let edges = crate::step::fsdp_pass_edges(s.workload.stack, g.time(), r.time());
                let per_micro = (fwd_wait + bwd_wait + copies) * layers + edges.exposed;
                let comm = (g.time() * 2.0 + r.time()) * layers;
                let hidden = (comm - (fwd_wait + bwd_wait) * layers - edges.unoverlapped).max(Seconds::ZERO).min((fwd_one + bwd_one) * 1.0);
                (per_micro * n_micro as f64, hidden * n_micro as f64)
            }
        } else if s.options.dp_overlap {
            // Buckets reduce during the last micro-batch's backward; the last bucket is exposed.
            // Megatron's interleaved schedule reduces (and gathers) each model chunk's buckets on
            // their own, spread over the pipeline's cool-down (warm-up): `ChunkWindows`.
            let last = |v: &[Buckets]| v.last().map_or(Seconds::ZERO, |b| b.step.time());
            let windows = ChunkWindows::of(s, n_micro);
            let g = windows.grad_exposed(grad_sync, last(&plan.grad), bwd_one);
            // The parameter all-gather overlaps the next step's first forward (Megatron
            // --overlap-param-gather).
            let p = windows.param_exposed(param_sync, last(&plan.param), fwd_one);
            // What runs beside compute: the gradient buckets within the backward passes they
            // overlap, and (on the stage that starts at once) the parameter gathers within the
            // forward passes.
            let hidden_g = (grad_sync - g).max(Seconds::ZERO).min(windows.span(bwd_one));
            let hidden_p = if stage == 0 { (param_sync - p).max(Seconds::ZERO).min(windows.span(fwd_one)) } else { Seconds::ZERO };
            // The stage's last chunk-backward is on the drain's chain through every stage; the
            // earlier chunk passes the collectives overlap run while the other stages run theirs.
            let chain = hidden_g.min(bwd_one / windows.chunks as f64);
            beside = beside.max(hidden_g - chain);
            (g + p, chain + hidden_p)
        } else {
            (grad_sync + param_sync, Seconds::ZERO)
        };
        // Collectives slow the compute they overlap (`step::overlap_cost` of the stack); each stage's stretched
        // passes are on the pipeline's fill or drain path, so they add up.
        stretch += overlapped * crate::step::overlap_cost(s.workload.stack);
        let tail = exposed + plan.optimizer - slack;
        if tail > worst.0 + worst.1 {
            // Report the optimizer whole and the DP part as what is left of the tail.
            worst = ((tail - plan.optimizer).max(Seconds::ZERO), plan.optimizer.min(tail));
        }
        if s.workload.mode == Mode::Train && pc.pp > 1 {
            slack += st.bwd.total();
        }
    }
    (worst.0 + stretch + beside * crate::step::overlap_cost(s.workload.stack), worst.1)
}

/// When the model chunks of one pipeline rank run their last backward (first forward) of a step,
/// for the data-parallel collectives that overlap them with `overlap_grad_reduce` and
/// `overlap_param_gather`.
///
/// Megatron-Core wraps each virtual-pipeline model chunk in its own `DistributedDataParallel` with
/// its own buckets (megatron/core/distributed/distributed_data_parallel.py), and the interleaved
/// schedule (megatron/core/pipeline_parallel/schedules.py,
/// `forward_backward_pipelining_with_interleaving`) enables a chunk's gradient sync at its last
/// micro-batch's backward and launches a chunk's parameter all-gather (`param_sync_func`) ahead of
/// its first forward. Backward walks the chunks in reverse in groups of `pp` micro-batches
/// (`microbatch_group_size_per_vp_stage`, default pp), so chunk c's last backward ends c x pp
/// chunk-backwards before the rank's last one, and chunk c's first forward starts c x pp
/// chunk-forwards after its first: its reduce-scatter can run beside the chunk-backwards that
/// follow, its all-gather beside those before. All of a rank's DP collectives share one
/// communicator and run one after another. With one chunk (no virtual pipeline, or a stack other
/// than megatron) this is the single-window rule: the buckets overlap the one last backward (first
/// forward) and the last bucket is exposed. Chunks are taken as equal (each holds 1/vp of the
/// stage's buckets; the embedding's and head's extra buckets are not placed in their chunks).
struct ChunkWindows {
    /// Model chunks whose collectives run on their own (vp under megatron, else 1).
    chunks: u32,
    /// Chunk passes between two chunks' last backwards (first forwards): min(pp, micro-batches).
    group: u32,
}

impl ChunkWindows {
    fn of(s: &Scenario, n_micro: u64) -> ChunkWindows {
        let pc = &s.parallel;
        if s.workload.stack != crate::workload::Stack::Megatron || pc.vp <= 1 || s.workload.mode != Mode::Train {
            return ChunkWindows { chunks: 1, group: 1 };
        }
        ChunkWindows { chunks: pc.vp, group: (pc.pp as u64).min(n_micro.max(1)) as u32 }
    }

    /// Time from the first window's start to the end of the last: one pass (`pass`, all chunks of
    /// the stage) with one chunk, else the chunk passes from the first chunk's window to the
    /// last's.
    fn span(&self, pass: Seconds) -> Seconds {
        let c = pass / self.chunks as f64;
        c * (1.0 + ((self.chunks - 1) * self.group) as f64)
    }

    /// Gradient collectives (`total` over all chunks, `last` the last bucket) left after the
    /// stage's last backward (`bwd`: one micro-batch through all its chunks) ends. Chunk c's
    /// buckets are produced during its last chunk-backward, which ends c x group chunk-backwards
    /// before the stage's end; each chunk costs its collectives less its window plus its last
    /// bucket (at least its last bucket), after the earlier chunks' collectives.
    fn grad_exposed(&self, total: Seconds, last: Seconds, bwd: Seconds) -> Seconds {
        let n = self.chunks as f64;
        let (g, b) = (total / n, bwd / n);
        let l = last.min(g);
        let mut done: Option<Seconds> = None;
        for c in (0..self.chunks).rev() {
            let end = Seconds::ZERO - b * (c * self.group) as f64;
            let own = end + (g - b + l).max(l);
            done = Some(done.map_or(own, |d: Seconds| (d + g).max(own)));
        }
        done.unwrap_or(Seconds::ZERO).max(Seconds::ZERO)
    }

    /// Parameter all-gathers (`total`, `last`) that delay the stage's forward passes (`fwd`: one
    /// micro-batch through all chunks). The gathers run back to back from the step's start; chunk
    /// c's first forward starts c x group chunk-forwards in (plus the delay so far) and cannot end
    /// before its gathers are done and its last bucket used: each chunk delays the forward by its
    /// collectives' end less its window plus its last bucket, the first at least by its first
    /// bucket.
    fn param_exposed(&self, total: Seconds, last: Seconds, fwd: Seconds) -> Seconds {
        let n = self.chunks as f64;
        let (g, f) = (total / n, fwd / n);
        let l = last.min(g);
        let mut delay = l;
        for c in 0..self.chunks {
            let comm_end = g * (c + 1) as f64;
            let window_end = f * (c * self.group + 1) as f64;
            delay = delay.max(comm_end - window_end + l);
        }
        if total <= Seconds::ZERO {
            Seconds::ZERO
        } else {
            delay
        }
    }
}

/// Every hardware number a prediction of this scenario uses, with its source.
pub fn used_numbers(s: &Scenario) -> Vec<UsedNumber> {
    let cost = CostModel::new(&s.system, s.profile.as_ref()).for_stack(s.workload.stack);
    let w = &s.workload;
    let mut used = cost.used_numbers(w.precision);
    let qk_head_dim = s.model.mla.as_ref().map_or(s.model.head_dim, |m| m.qk_nope_head_dim + m.qk_rope_head_dim);
    used.extend(cost.head_dim_number(qk_head_dim));
    let g = power_gpu(s);
    used.push(UsedNumber { name: "tdp_w".into(), value: format!("{:.0}", g.tdp.value.value()), source: g.tdp.source.clone() });
    used.push(UsedNumber { name: "idle_w".into(), value: format!("{:.0}", g.idle_power.value.value()), source: g.idle_power.source.clone() });
    if let Some(i) = &s.options.run_idle {
        used.push(UsedNumber { name: "run_idle_w".into(), value: format!("{:.1}", i.value.value()), source: i.source.clone() });
    }
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
    if w.stack == crate::workload::Stack::HfEager && w.mode == Mode::Train {
        // The host time of eager HF training (`cost::lower::hf_eager_train_layer_host`).
        use crate::cost::lower::{HF_EAGER_TRAIN_LAUNCH_US as US, HF_EAGER_TRAIN_LAYER_LAUNCHES as L, HF_EAGER_TRAIN_QK_NORM_LAUNCHES as Q};
        used.push(UsedNumber {
            name: "hf_eager_train_host".into(),
            value: format!(
                "{} us per forward launch, {} per backward; a dense layer {}+{} launches (QK-norm +{}+{}); x {:.3} for this node's host ({} op dispatch over {} us)",
                US[0],
                US[1],
                L[0],
                L[1],
                Q[0],
                Q[1],
                crate::cost::lower::hf_eager_train_host_scale(&cost),
                // A run record's own host probe (`RunHostProbe::applied_to`) marks the host in period.
                if s.profile.as_ref().and_then(|p| p.host.as_ref()).is_some_and(|h| h.in_period) {
                    "the run's own probed (and speedometer-scaled)"
                } else {
                    "the profile's"
                },
                crate::cost::lower::HF_EAGER_TRAIN_REFERENCE_OP_DISPATCH_US
            ),
            source: crate::hardware::Source::Measured(
                "lent H100 host (nvidia-h100-x1, torch 2.11, transformers 5.17), 2026-11-24, scenarios/workloads/hf_train_host_probe.py; calibration/runs/raw/hf-train-host-h100-2026-11-24/".into(),
            ),
        });
    }
    if s.model.moe.is_some() && w.stack.hf() && w.mode != Mode::Decode {
        // How transformers' grouped expert GEMMs and permutations are priced (`cost::grouped`).
        used.push(match cost.moe_kernels() {
            Some(t) => UsedNumber {
                name: "hf_grouped_expert_gemms".into(),
                value: format!("measured table: {} grouped GEMM rows, {} index-kernel rows", t.grouped.len(), t.index.len()),
                source: crate::hardware::Source::Measured(format!("`calibrate --moe` in profile `{}`: {}", s.profile.as_ref().map_or("", |p| p.name.as_str()), t.provenance)),
            },
            None => UsedNumber {
                name: "hf_grouped_expert_gemms".into(),
                value: "GEMM model; fp32 fallback stall fitted".into(),
                source: crate::hardware::Source::Unsourced(
                    "no `calibrate --moe` table for this GPU: expert GEMMs priced as dense GEMMs by the GEMM model, the fp32 fallback's host stall by cost::fitted::HF_GROUPED_MM_FALLBACK_US".into(),
                ),
            },
        });
    }
    used
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: f64) -> Seconds {
        Seconds::new(x)
    }

    #[test]
    fn one_chunk_is_the_single_window_rule() {
        let w = ChunkWindows { chunks: 1, group: 1 };
        for (total, last, pass) in [(1.0f64, 0.01f64, 0.12f64), (0.06, 0.001, 0.12), (0.0, 0.0, 0.1)] {
            let single = (total - pass + last).max(last);
            assert!((w.grad_exposed(s(total), s(last), s(pass)).value() - single).abs() < 1e-12);
            assert!((w.param_exposed(s(total), s(last), s(pass)).value() - if total > 0.0 { single } else { 0.0 }).abs() < 1e-12);
            assert_eq!(w.span(s(pass)), s(pass));
        }
    }

    #[test]
    fn interleaved_chunks_spread_the_collectives_over_the_cool_down_and_warm_up() {
        // 12 chunks, pp 4: chunk 11's last backward ends 44 chunk-backwards before the stage's
        // end. 1 s of reduce-scatter (12 equal chunks, 10 ms last bucket) beside a 120 ms backward
        // starts 440 ms before the end: 560 ms exposed, against 890 ms in one window.
        let w = ChunkWindows { chunks: 12, group: 4 };
        let g = w.grad_exposed(s(1.0), s(0.01), s(0.12)).value();
        assert!((g - 0.56).abs() < 1e-9, "{g}");
        // Small collectives: only chunk 0's last bucket is left after the end.
        assert!((w.grad_exposed(s(0.06), s(0.001), s(0.12)).value() - 0.001).abs() < 1e-12);
        // The all-gathers: chunk 11's first forward starts 44 chunk-forwards (5 ms each) in, so
        // the 1 s of gathers delays the forwards by 1 - 45 x 5 ms + 10 ms = 785 ms (950 ms in one
        // window).
        let p = w.param_exposed(s(1.0), s(0.01), s(0.06)).value();
        assert!((p - 0.785).abs() < 1e-9, "{p}");
        assert!((w.span(s(0.12)).value() - 0.01 * 45.0).abs() < 1e-12);
    }

    /// The eager MoE layer's host time before the dispatcher's sync (`cost::fitted::MOE_LAYER_HOST_US`,
    /// launch-side time on the last kernel before the draining permutation) runs beside the GPU's
    /// queued work: a cycle from one drain to the next costs the longer of the host and the GPU,
    /// not their sum. Layer: permute (drains) -> experts -> [next layer] attention -> router (host
    /// time before the sync).
    #[test]
    fn host_time_before_the_sync_hides_under_the_queued_gpu_work() {
        let kernel = |name, ms: f64, cpu_us: f64| Step::Kernel {
            name,
            time: Seconds::ms(ms),
            bound: Bound::Compute,
            cpu: Seconds::us(cpu_us),
            launches: 1.0,
            host_sync: Seconds::ZERO,
            fixed: Seconds::ZERO,
        };
        let cycle = |gpu_ms: f64, host_ms: f64| {
            let steps = [kernel("permute", 0.1, 6.0), kernel("experts", gpu_ms, 6.0), kernel("attention", 0.5, 6.0), kernel("router", 0.05, 1e3 * host_ms)];
            drained_span(&steps, 0).value() * 1e3
        };
        // Host-bound (micro-batch 1): the host's 3 ms set the cycle; the GPU's 1.65 ms run beside it.
        let host_bound = cycle(1.0, 3.0);
        assert!((host_bound - (0.018 + 3.0 + 0.05)).abs() < 0.01, "{host_bound}");
        // GPU-bound (micro-batch 4): the same 3 ms of host hide under 4.65 ms of GPU work.
        let gpu_bound = cycle(4.0, 3.0);
        assert!((gpu_bound - (0.006 + 4.65)).abs() < 0.01, "{gpu_bound}");
        // So 4x the expert work costs 1.6 ms more, not 3 ms.
        assert!(gpu_bound - host_bound < 1.7);
    }
}
