//! What a step of either engine is made of and comes to: the shared pieces of `analytic` (the
//! closed form) and `sim` (the DES). The checks both run first (`check_scenario`), the pipeline's
//! point-to-point transfer (`p2p_step`), a stage's data-parallel traffic (`dp_plan`: gradient
//! buckets, ZeRO gathers, FSDP layer collectives, the optimizer step), the critical path's
//! `Breakdown`, and `finish`, which turns a breakdown into the `Prediction` (throughput, MFU,
//! memory, power and energy). The engines differ only in how they add the lowered steps up.

use std::collections::BTreeMap;

use crate::cost::lower::{CommStep, Overlap};
use crate::cost::CostModel;
use crate::hardware::profile::CollectiveOp;
use crate::hardware::Dtype;
use crate::memory::{self, stack_memory, MemoryPlan};
use crate::parallelism::{self, Group, Infeasible, ParallelConfig};
use crate::power::PowerState;
use crate::scenario::Scenario;
use crate::units::{Joules, Seconds, Watts};
use crate::workload::{self, backward_of, recompute_of, Fp8Recipe, Mode, Op, Stack};

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
    /// Of `memory`, the memory-bound kernels' per-launch floor (the GPU's `kernel_overhead` per
    /// launch, at most the kernel's time): time the GPU spends starting and draining kernels
    /// rather than streaming HBM. Not a part of the step of its own (it is in `memory`); the power
    /// model counts it as idle in decode (`analytic::activity`). Zero from the DES.
    pub launch_floor: Seconds,
    /// Of `memory`, the bytes' own time (launch floors excluded) of memory-bound kernels whose bytes
    /// per launch fit in half the GPU's L2: traffic that stays in L2 and draws less than an HBM
    /// stream (`power::L2_RESIDENT_POWER_SHARE`). Not a part of the step of its own; the power
    /// model reads it where the GPU waits on the host (`analytic::activity`). Zero from the DES.
    pub memory_l2: Seconds,
    /// Of `compute`, the dense bf16 GEMMs' time times the share of the large GEMM's FLOP rate they
    /// do not reach (`analytic::gemm_tensor_idle`): tensor work the priced time does not carry,
    /// which draws no GEMM power. Not a part of the step of its own; read by the power model as
    /// `memory_l2` is. Zero from the DES.
    pub tensor_idle: Seconds,
    /// Of `memory`, the part of the `hf-*` stacks' training and prefill memory-bound kernels' time
    /// that their bytes at the stream rate do not fill: their priced bytes' time less the bytes at
    /// the stream rate (`cost::fitted::HF_MEMORY_EFFICIENCY` stretches it for what the op lists
    /// miss). It draws no HBM power where the GPU waits on the host (`analytic::activity`;
    /// calibration/runs/hf/FIT.md, thirteenth pass). Not a part of the step of its own. Zero from
    /// the DES.
    pub memory_unstreamed: Seconds,
    /// Of `cpu_launch`, the training loop's own host time after the backward that the GPU waits
    /// for (the Hugging Face Trainer's, [`hf_trainer_host`]): idle GPU time, but not the kernel
    /// starvation of a host-bound step (`analytic::activity` keeps them apart). Not a part of the
    /// step of its own.
    pub loop_host: Seconds,
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
    pub(crate) fn scale(&mut self, k: f64) {
        for s in [
            &mut self.compute,
            &mut self.memory,
            &mut self.tp_comm,
            &mut self.cp_comm,
            &mut self.ep_comm,
            &mut self.pp_p2p,
            &mut self.cpu_launch,
            &mut self.launch_floor,
            &mut self.memory_l2,
            &mut self.tensor_idle,
            &mut self.memory_unstreamed,
            &mut self.loop_host,
        ] {
            *s = *s * k;
        }
    }
    pub(crate) fn add(&mut self, o: &Breakdown) {
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
        self.launch_floor += o.launch_floor;
        self.memory_l2 += o.memory_l2;
        self.memory_unstreamed += o.memory_unstreamed;
        self.tensor_idle += o.tensor_idle;
        self.loop_host += o.loop_host;
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
/// bf16 copy of the fp32 master). Megatron's gradients and Adam moments are in the dtypes of
/// `workload.megatron` (fp32 by default: 4 x 4 + 3 x 4 + 2 + 4 + 4 = 38 B).
fn optimizer_bytes_per_param(w: &workload::Workload) -> f64 {
    match w.stack {
        Stack::Megatron => {
            let (g, m) = (w.megatron.grad_dtype.bytes(), w.megatron.adam_state_dtype.bytes());
            // master r/w, grad read, m and v r/w, bf16 copy, grad-norm read, zeroing.
            2.0 * 4.0 + g + 4.0 * m + 2.0 + g + g
        }
        Stack::TorchEager | Stack::TorchCompile | Stack::HfEager | Stack::HfCompile => 4.0 * 4.0 + 3.0 * 4.0 + 4.0 + 4.0,
        // Inference engines take no optimizer step (training with them is refused by `config`).
        Stack::Trtllm | Stack::Vllm | Stack::Sglang => 0.0,
    }
}

/// The Hugging Face Trainer's host time after each step's backward, microseconds: `[fixed, per
/// parameter tensor]`. The Trainer's NaN check of the step's loss (`logging_nan_inf_filter`, on by
/// default) waits for the backward, so what the host runs next — `clip_grad_norm_` (foreach norm and
/// scale over every gradient), the optimizer's step (fused AdamW's Python: grouping the tensors),
/// the scheduler, `model.zero_grad()` (a Python loop over the parameters) and the callbacks — runs
/// with the GPU idle, where a plain loop runs it beside the backward's kernels. Measured, not
/// fitted to step times: the host wall time of those calls (`trainer_cb ... clip_ms` plus
/// `pre_opt_to_end_ms`, medians over steps 6-30; none of the calls synchronises) on the lent H100's
/// host (16-core Xeon VM, torch 2.11.0, transformers 5.17.0, accelerate 1.15.0, 2026-11-25; runs
/// hft-011, 012, 014, 016, 018, scenarios/workloads/hf_trainer.py, raw logs in
/// calibration/runs/hf/raw/trainer-h100-2026-11-25/) against the models' parameter tensors (21,
/// 201, 201, 254, 310): 1.84 / 8.13 / 7.38 / 10.75 / 10.65 ms; the least-squares line through them
/// is 1,289 us + 32.74 us per tensor. Checked on the lent H200's paired runs (hft-000..009), whose
/// sections were not timed.
pub const HF_TRAINER_HOST_US: [f64; 2] = [1289.0, 32.74];

/// Bytes per parameter of the Hugging Face Trainer's gradient clipping (`max_grad_norm` > 0):
/// `torch.nn.utils.clip_grad_norm_` reads every fp32 gradient for the norm (4 B) and scales every
/// one in place (`_foreach_mul_`, read and write: 8 B), whatever the norm.
pub const HF_TRAINER_CLIP_BYTES_PER_PARAM: f64 = 12.0;

/// The Hugging Face Trainer's host time between micro-batches of one optimizer step (gradient
/// accumulation), microseconds: `[fixed, per parameter tensor]`. transformers 5.17's
/// `Trainer._inner_training_loop` (trainer.py, lines 1822-1880 of the 5.17.0 wheel) checks every
/// micro-batch's loss for NaN (`torch.isnan(tr_loss_step)` in an `if`, a device-to-host copy that
/// waits for that micro-batch's backward), then runs `floating_point_ops(inputs)` (which calls
/// `model.num_parameters(exclude_embeddings=True)`: a walk over `named_modules()` and
/// `named_parameters()`), the `on_substep_end` callbacks, and the next `training_step`'s
/// preamble (`model.train()`, a walk over the modules; `_prepare_inputs`; the autocast context)
/// before the next forward launches anything: the GPU is idle meanwhile. A plain loop (and the
/// Trainer between steps' optimizer work) has no such gap. Measured, not fitted to step times: the
/// host time from the NaN check's return to the next forward's first hook (scenarios/workloads/
/// hf_trainer.py's `trainer_mb ... gaps_ms`, the gaps between a step's micro-batches, medians over
/// the steps after warm-up) of the `fit` rows hft-027, 028, 029 (lent H100, 2026-11-25 01:44 UTC,
/// torch 2.11.0, transformers 5.17.0, accelerate 1.15.0; raw logs in
/// calibration/runs/hf/raw/trainerga-h100-2026-11-25/): 0.554 / 3.947 / 2.505 ms at 21 / 201 / 146
/// parameter tensors; least squares 91.2 us + 18.29 us per tensor (scripts/trainer_ga_host.py).
/// The gap after a step's last micro-batch is in [`HF_TRAINER_HOST_US`]'s step tail.
pub const HF_TRAINER_MICRO_HOST_US: [f64; 2] = [91.2, 18.29];

/// The host time the Hugging Face Trainer leaves the GPU idle for in a step: after the last
/// micro-batch's backward ([`HF_TRAINER_HOST_US`]) and between the micro-batches of a gradient
/// accumulation ([`HF_TRAINER_MICRO_HOST_US`], one fewer than the micro-batches), both over the
/// model's parameter tensors; zero in a plain loop.
pub fn hf_trainer_host(s: &Scenario) -> Seconds {
    match s.workload.train_loop {
        workload::TrainLoop::HfTrainer { .. } => {
            let tensors = s.model.hf_param_tensors() as f64;
            let ([fixed, per_tensor], [mb_fixed, mb_per_tensor]) = (HF_TRAINER_HOST_US, HF_TRAINER_MICRO_HOST_US);
            let between = n_micro_of(s).unwrap_or(1).saturating_sub(1) as f64;
            Seconds::us(fixed + per_tensor * tensors + between * (mb_fixed + mb_per_tensor * tensors))
        }
        workload::TrainLoop::Plain => Seconds::ZERO,
    }
}

/// PyTorch DDP's gradient bucket size (`bucket_cap_mb` = 25), for the torch stacks.
pub const BUCKET_BYTES: f64 = 25e6;

/// Parameters per gradient / parameter bucket of Megatron-Core's distributed data parallel with
/// `overlap_grad_reduce` (`--ddp-bucket-size` unset): `max(40_000_000, 1_000_000 * dp)`, with dp
/// the data-parallel size including context parallelism
/// (megatron/core/distributed/distributed_data_parallel.py, `DistributedDataParallel.__init__`:
/// "bucket_size = max(40000000, 1000000 * self.ddp_config ... data_parallel_world_size)").
pub fn megatron_bucket_params(dp_with_cp: u32) -> f64 {
    (1_000_000.0 * dp_with_cp as f64).max(40_000_000.0)
}

/// How much slower compute runs beside the data-parallel collectives it overlaps, as a fraction of
/// their time, by stack: `cost::fitted` holds one per stack family (torch DDP/FSDP:
/// `OVERLAP_COST`, fitted on measured H200 runs; Megatron: `MEGATRON_OVERLAP_COST`, fitted on the
/// published Megatron-Bridge fit rows). Both engines read it. (A cost per byte, the torch stacks'
/// figure scaled by the network's bus rate over NVLink's for a data-parallel group that crosses
/// nodes, was tried on the torchtitan rows and not kept: docs/published-analysis.md, torchtitan
/// section.)
pub fn overlap_cost(stack: Stack) -> f64 {
    let f = crate::cost::fitted::fitted();
    match stack {
        Stack::Megatron => f.megatron_overlap_cost,
        _ => f.overlap_cost,
    }
}

/// Layers of each kind in pipeline stage `stage` (`LayerKind::index`; dense layers come first in
/// MoE models, a hybrid model's follow its pattern).
pub fn stage_layers(s: &Scenario, stage: u32) -> crate::model::KindCounts {
    parallelism::stage_kind_counts(&s.model.layer_kinds(), &s.parallel, stage)
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
    let mut problems = parallelism::check(&s.model, &s.parallel, s.n_gpus);
    problems.extend(parallelism::check_seq(&s.parallel, s.workload.q_len()));
    if let Some(lora) = s.workload.lora.as_ref().filter(|l| !l.rank.is_multiple_of(s.parallel.tp as u64)) {
        // Megatron-Core's column-parallel adapter layer splits the rank over TP.
        problems.push(Infeasible::Indivisible { what: "lora_rank", n: lora.rank, by_name: "tp", by: s.parallel.tp as u64 });
    }
    if s.parallel.cp > 1 && s.workload.cp_comm == workload::CpComm::A2a && s.workload.q_len() > 1 {
        // TE's a2a reshapes q, k and v from sequence to head sharding: each TP rank's query and
        // key/value heads split over the cp ranks.
        let (tp, cp) = (s.parallel.tp as u64, s.parallel.cp as u64);
        let heads = s.model.n_heads / tp;
        let kv_heads = if s.model.mla.is_some() { heads } else { (s.model.n_kv_heads / tp).max(1) };
        if !heads.is_multiple_of(cp) || !kv_heads.is_multiple_of(cp) {
            problems.push(Infeasible::Unsupported {
                what: "cp",
                value: cp,
                why: format!(
                    "with `cp_comm` = a2a the TP-local attention heads ({heads} query, {kv_heads} key/value) must divide by cp (Transformer Engine's all-to-all shards heads over the cp ranks)\nhint: use `--cp-comm p2p` (ring attention), or a cp that divides {kv_heads}"
                ),
            });
        }
    }
    if !problems.is_empty() {
        return Err(PredictError::Infeasible(problems));
    }
    if s.model.hybrid.is_some() && s.workload.stack.torch() {
        return Err(PredictError::Unsupported(format!(
            "model `{}` has Mamba-2 layers, which gpuplan models as Megatron-LM and the inference engines run them (mamba_ssm's Triton kernels); `{}` runs transformers' own PyTorch code for them; use `--stack megatron` (or an inference engine)",
            s.model.name,
            s.workload.stack.name()
        )));
    }
    if let Some(max) = s.system.max_gpus().filter(|max| s.n_gpus > *max) {
        return Err(PredictError::Unsupported(format!(
            "`{}` has no sourced scale-out network in its system file, so it runs on one node: {} GPUs asked, at most {max}; use at most {max} GPUs, or a system file with `nic_bandwidth_gbit_per_s` and `[fabric]`",
            s.system.display_name, s.n_gpus
        )));
    }
    if s.n_gpus > 1 && s.system.scale_up_link().is_none() {
        return Err(PredictError::Unsupported(format!(
            "`{}` has no sourced {} bandwidth and bus-bandwidth fraction for its GPUs to talk over; give them in the GPU file or run on one GPU",
            s.system.display_name,
            s.system.scale_up.name()
        )));
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

/// The cost model, op list, clock and micro-batch count of a scenario (`analytic::price`): what
/// both engines start from.
pub struct Priced<'a> {
    pub cost: CostModel<'a>,
    pub ops: workload::OpList,
    pub power: PowerState,
    pub n_micro: u64,
}

/// Throughput, MFU, memory and energy from a step's breakdown (both engines).
pub fn finish(s: &Scenario, cost: &CostModel, ops: &workload::OpList, n_micro: u64, bd: Breakdown, power: PowerState) -> Prediction {
    let (pc, w) = (&s.parallel, &s.workload);
    let step_time = bd.total();
    let tokens_per_step = match w.mode {
        Mode::Train => (w.global_batch * w.seq) as f64,
        Mode::Prefill => (w.instance_sequences(pc.dp) * w.seq) as f64,
        Mode::Decode => w.instance_sequences(pc.dp) as f64,
    };
    let tokens_per_s = tokens_per_step / step_time.value();
    let model_flops_per_token = match w.mode {
        Mode::Train => {
            workload::model_flops_per_token_train(&s.model, w.seq, w.lora.as_ref()) + w.mtp_layers as f64 * workload::mtp_flops_per_token_train(&s.model, w.seq)
        }
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
        let counts = stage_layers(s, stage);
        let mut f = |list: &[Op], times: usize| {
            let fwd: f64 = list.iter().map(Op::flops).sum();
            let back: f64 =
                if s.workload.mode == Mode::Train { recompute_of(list, &s.workload).iter().chain(backward_of(list).iter()).map(Op::flops).sum() } else { 0.0 };
            total += (fwd + back) * times as f64;
        };
        for kind in crate::model::LayerKind::ALL {
            f(ops.layer(kind), counts[kind.index()] as usize);
        }
        if stage == 0 {
            f(&ops.embedding, 1);
        }
        if stage == pc.pp - 1 {
            f(&ops.head, 1);
        }
        // Layer checkpointing: the checkpointed layers' forward runs again.
        if s.workload.mode == Mode::Train && matches!(s.workload.recompute, workload::Recompute::Layers(_)) {
            let rc = s.workload.recompute;
            let picked = rc.checkpointed_kind_counts(&s.model, pc, stage);
            for kind in crate::model::LayerKind::ALL {
                total += ops.layer(kind).iter().map(Op::flops).sum::<f64>() * picked[kind.index()] as f64;
            }
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

pub(crate) fn total_time(b: &[Buckets]) -> Seconds {
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
    /// FSDP under PyTorch's pipelining (the torch stacks at pp > 1, as torchtitan runs FSDP2 with
    /// PP): each layer is gathered once per step, at the first micro-batch's forward, and kept
    /// (torchtitan's `reshard_after_forward` is off with PP), and its gradients accumulate
    /// unsharded and are reduce-scattered once, after the stage's last backward
    /// (`torch.distributed.pipelining`'s stage `backward_maybe_with_nosync`: gradient sync and
    /// resharding off for every micro-batch, then `perform_reduce_grad`, scheduled after all of
    /// them, runs every parameter group's `post_backward` back to back and waits for them with
    /// `_root_post_backward_final_callback`; torch 2.11.0 `distributed/pipelining/stage.py`,
    /// re-read). Otherwise per micro-batch, as above.
    pub per_step: bool,
    /// FSDP's copies on the compute stream around them (PyTorch FSDP2 copy-out of the gathered
    /// flat buffer into the layer's parameters, copy-in of the gradients before the
    /// reduce-scatter): memory-bound, read + write of the layer's parameters or gradients.
    pub gather_copy: Seconds,
    pub reduce_copy: Seconds,
    /// Under `per_step`: the step's gradient accumulation over the stage's unsharded parameters, on
    /// the compute stream (torch 2.11 `_fsdp_param_group.py` `post_backward` with gradient sync off:
    /// `accumulate_unsharded_grad_if_needed` adds each micro-batch's bf16 gradient into the fp32
    /// accumulator, 2 + 4 + 4 B a parameter, after the first micro-batch's `to_accumulated_grad_if_needed`
    /// cast, 2 + 4 B; without a policy autograd's `AccumulateGrad` adds the fp32 gradients in place,
    /// 4 + 4 + 4 B, from the second micro-batch on). Included in `optimizer` (once-per-step
    /// memory traffic on the compute stream, as `mxfp8_param_copy` is), so both engines charge it
    /// with the step's tail. The same accumulation in the torch stacks' other loops (gradient
    /// accumulation without pipelining) is not priced.
    pub accumulate: Seconds,
    /// Optimizer step of the rank's shard: memory-bound.
    pub optimizer: Seconds,
    /// Host time after the backward that the GPU waits for in full, serial with the step: the
    /// Hugging Face Trainer's post-backward Python ([`hf_trainer_host`]); zero in any other loop.
    pub loop_host: Seconds,
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

/// Split `params` parameters of `bytes_per_param` into the stack's equal buckets and price one
/// collective: PyTorch DDP's `BUCKET_BYTES` of gradients, Megatron's `megatron_bucket_params`
/// parameters (the same buckets carry the gradients' reduce-scatter and the parameters'
/// all-gather).
fn buckets(cost: &CostModel, s: &Scenario, op: CollectiveOp, group: Group, params: f64, bytes_per_param: f64, grad_bytes: f64) -> Option<Buckets> {
    let bytes = params * bytes_per_param;
    if bytes <= 0.0 {
        return None;
    }
    let pc = &s.parallel;
    let n = match s.workload.stack {
        Stack::Megatron => (params / megatron_bucket_params(pc.dp * pc.cp)).ceil(),
        _ => (params * grad_bytes / BUCKET_BYTES).ceil(),
    }
    .max(1.0);
    Some(Buckets { step: cost.comm_step(pc, op, group, bytes / n, Overlap::Blocking), count: n as usize })
}

/// Bytes per parameter of Megatron's MXFP8 parameter copy after each step's all-gather
/// (`mxfp8_param_copy`): read the gathered bf16 value (2), write the MXFP8 weight's row-wise and
/// column-wise copies with their scales (`memory::quantized_param_bytes`, 2 x (1 + 1/32)), zero the
/// bf16 slice of the shared gradient buffer (2).
pub const MXFP8_PARAM_COPY_BYTES: f64 = 2.0 + 2.0 * (1.0 + 1.0 / 32.0) + 2.0;

/// Megatron's MXFP8 parameters are all-gathered in bf16 into the gradient buffer
/// (`reuse_grad_buf_for_mxfp8_param_ag`, which Megatron-Bridge's MXFP8 recipe sets), then copied
/// into the MXFP8 weights, which quantizes them, and the buffer slice zeroed for the next
/// backward's gradients: megatron-core `distributed/param_and_grad_buffer.py`
/// (`finish_param_sync`: `param.data.copy_(param_slice)`, `bucket.param_data.zero_()`, run on the
/// compute stream before the bucket's first forward under `overlap_param_gather`) and
/// `distributed_data_parallel.py` (`start_param_sync`, the same without overlap). Per step, over
/// every parameter of the rank's stage (not its shard): memory-bound, one quantize kernel per
/// linear weight (four per layer; a grouped linear's per-expert weights are not counted apart).
/// Zero for the other recipes: per-tensor FP8 parameters are gathered as they are stored, and
/// the optimizer writes them quantized on its shard. Charged with the optimizer step (it is the
/// same once-per-step, exposed memory traffic).
fn mxfp8_param_copy(cost: &CostModel, s: &Scenario, stage: u32) -> Seconds {
    let w = &s.workload;
    if w.stack != Stack::Megatron || w.lora.is_some() || w.precision != Dtype::Fp8 || w.fp8_recipe != Fp8Recipe::Mxfp8 || !w.megatron.fp8_param_gather {
        return Seconds::ZERO;
    }
    let (dense, experts) = memory::params_on_rank(&s.model, &s.parallel, stage, 0);
    let layers = parallelism::stage_layer_counts(s.model.n_layers, &s.parallel)[stage as usize].max(1);
    cost.memory_time((dense + experts) * MXFP8_PARAM_COPY_BYTES, (4 * layers) as u32).time
}

/// How Megatron-Core's distributed optimizer lays out one stage's dense parameters in its
/// gradient and parameter buffers, where that differs from equal buckets of one dtype.
///
/// `_ParamAndGradBuffer` (megatron/core/distributed/param_and_grad_buffer.py, megatron-core
/// 0.11-0.16, from memory) takes the parameters in reverse order (the order backward produces their
/// gradients) and closes a bucket once it holds `megatron_bucket_params` or more, so a parameter
/// larger than a bucket ends one of its own, and the word embedding, the first parameter of the
/// model, is in the last bucket. That bucket's gradients are ready only when backward ends, so its
/// reduce-scatter is exposed whole; under `overlap_param_gather` the first forward's first module
/// (the embedding) waits for its all-gather, the first one dispatched after the optimizer step
/// (`DistributedDataParallel` forward pre-hooks; the first bucket group's gather starts in
/// `zero_grad`/`start_param_sync`). Megatron keeps one buffer per (parameter dtype, gradient
/// dtype) (`DistributedDataParallel.__init__`, `_allocate_buffers_for_parameters`): under
/// `fp8_param_gather` with a per-tensor FP8 recipe the linear weights sit in a uint8 buffer and are
/// gathered at 1 B, while the embedding, the LM head, the norms and the router stay bf16
/// (Transformer Engine quantizes only its linear layers' weights; `fp8_model_init` does not cover
/// Megatron's `VocabParallelEmbedding` or its output layer) and are gathered at 2 B. `None` outside
/// Megatron training of every parameter (LoRA trains adapters only) or without a distributed
/// optimizer.
struct MegatronDenseBuffers {
    /// Word-embedding parameters on this rank (stage 0): the last bucket.
    embedding: f64,
    /// Other parameters that are not quantized: the LM head, norms, routers.
    unquantized: f64,
}

fn megatron_dense_buffers(s: &Scenario, stage: u32) -> Option<MegatronDenseBuffers> {
    let (w, pc, m) = (&s.workload, &s.parallel, &s.model);
    if w.stack != Stack::Megatron || w.mode != Mode::Train || w.lora.is_some() || !matches!(pc.zero, 1 | 2) {
        return None;
    }
    let embedding = if stage == 0 { m.params().embedding / pc.tp as f64 } else { 0.0 };
    let head = memory::embedding_and_head_on_rank(m, pc, stage) - embedding;
    let counts = parallelism::stage_kind_counts(&m.layer_kinds(), pc, stage);
    let whole: f64 = crate::model::LayerKind::ALL.iter().map(|k| counts[k.index()] as f64 * m.layer_params(*k).1).sum();
    // The final norm, before the LM head (`memory::params_on_rank`).
    let final_norm = if stage == pc.pp - 1 {
        match m.norm {
            crate::model::NormKind::RmsNorm => m.hidden as f64,
            crate::model::NormKind::LayerNorm => 2.0 * m.hidden as f64,
        }
    } else {
        0.0
    };
    Some(MegatronDenseBuffers { embedding, unquantized: head + whole + final_norm })
}

pub fn dp_plan(cost: &CostModel, s: &Scenario, stage: u32) -> DpPlan {
    let pc = &s.parallel;
    let sm = stack_memory(s.workload.stack);
    // What is trained: every parameter, or under LoRA the adapters only (their gradients are all
    // that is reduced, their states all the optimizer updates).
    let (dense, experts) = memory::trainable_params_on_rank(&s.model, pc, &s.workload, stage);
    // Gradients are reduced in their buffer's dtype (Megatron's main grads: fp32 by default, bf16
    // under `grad_reduce_dtype`; DDP on fp32 params); parameters are gathered as stored: bf16, or
    // under `fp8_param_gather` per-tensor FP8 as its 1 B (the uint8 buffer), MXFP8 and NVFP4 in
    // bf16 into the gradient buffer (`reuse_grad_buf_for_mxfp8_param_ag`, which the Megatron-Bridge
    // MXFP8 recipe sets; quantized after the gather: param_and_grad_buffer.py).
    let (grad_bytes, param_bytes) = if s.workload.stack == Stack::Megatron {
        let gathered = match memory::quantized_param_bytes(&s.workload).filter(|_| s.workload.lora.is_none()) {
            Some(q) if q <= 1.0 => q,
            _ => sm.param,
        };
        (s.workload.megatron.grad_dtype.bytes(), gathered)
    } else {
        (sm.grad, sm.param)
    };
    let local =
        dense / if pc.zero >= 1 { memory::fsdp_shards(pc, &s.workload) as f64 } else { 1.0 } + experts / if pc.zero >= 1 { pc.expert_dp() as f64 } else { 1.0 };
    let clip = if matches!(s.workload.train_loop, workload::TrainLoop::HfTrainer { clip: true }) { HF_TRAINER_CLIP_BYTES_PER_PARAM } else { 0.0 };
    let mut plan = DpPlan {
        optimizer: cost.memory_time(local * (optimizer_bytes_per_param(&s.workload) + clip), 4).time,
        loop_host: hf_trainer_host(s),
        ..DpPlan::default()
    };
    let groups = [(Group::Dp, pc.dp, dense), (Group::ExpertDp, pc.expert_dp(), experts)];
    match pc.zero {
        0 => {
            for (g, size, n) in groups {
                if size > 1 {
                    plan.grad.extend(buckets(cost, s, CollectiveOp::AllReduce, g, n, grad_bytes, grad_bytes));
                }
            }
        }
        1 | 2 => {
            for (g, size, n) in groups {
                if size <= 1 {
                    continue;
                }
                match megatron_dense_buffers(s, stage).filter(|_| g == Group::Dp) {
                    Some(MegatronDenseBuffers { embedding, unquantized }) => {
                        // Megatron-Core's buffers (`megatron_dense_buffers`): the body's buckets,
                        // quantized weights gathered at their bytes and the rest in bf16, then the
                        // word embedding's bucket, the last one reduced and the first one gathered.
                        let body = (n - embedding - unquantized).max(0.0);
                        plan.grad.extend(buckets(cost, s, CollectiveOp::ReduceScatter, g, body + unquantized, grad_bytes, grad_bytes));
                        plan.param.extend(buckets(cost, s, CollectiveOp::AllGather, g, body, param_bytes, grad_bytes));
                        plan.param.extend(buckets(cost, s, CollectiveOp::AllGather, g, unquantized, sm.param, grad_bytes));
                        if embedding > 0.0 {
                            let one = |op, bytes: f64| Buckets { step: cost.comm_step(pc, op, g, embedding * bytes, Overlap::Blocking), count: 1 };
                            plan.grad.push(one(CollectiveOp::ReduceScatter, grad_bytes));
                            plan.param.push(one(CollectiveOp::AllGather, sm.param));
                        }
                    }
                    None => {
                        plan.grad.extend(buckets(cost, s, CollectiveOp::ReduceScatter, g, n, grad_bytes, grad_bytes));
                        plan.param.extend(buckets(cost, s, CollectiveOp::AllGather, g, n, param_bytes, grad_bytes));
                    }
                }
            }
            if !plan.param.is_empty() {
                plan.optimizer += mxfp8_param_copy(cost, s, stage);
            }
        }
        _ => {
            // The torch stacks' FSDP group spans the context-parallel ranks too
            // (`memory::fsdp_shards`): the same collectives over dp x cp ranks, tp apart.
            let shards = memory::fsdp_shards(pc, &s.workload);
            let fsdp_pc = ParallelConfig { dp: shards, cp: if shards == pc.dp { pc.cp } else { 1 }, ..pc.clone() };
            if shards > 1 {
                let pc = &fsdp_pc;
                let layers = parallelism::stage_layer_counts(s.model.n_layers, pc)[stage as usize].max(1) as f64;
                let per_layer = (dense + experts) / layers;
                // The torch stacks gather and reduce in FSDP's dtypes (`Workload::fsdp`: fp32
                // without a policy, FSDP2's bf16 parameters and its reduce dtype, torchao's float8
                // weights).
                let torch = s.workload.stack.torch();
                let (param_bytes, grad_bytes) = if torch {
                    (memory::fsdp_gather_bytes(&s.model, pc, &s.workload, stage), s.workload.fsdp.reduce.bytes())
                } else {
                    (param_bytes, grad_bytes)
                };
                // Under LoRA FSDP still gathers the frozen base weights (bf16) of each layer.
                let gathered = match &s.workload.lora {
                    None => per_layer * param_bytes,
                    Some(_) => {
                        let (bd, be) = memory::params_on_rank(&s.model, pc, stage, 0);
                        (bd + be) / layers * memory::FROZEN_BASE_BYTES + per_layer * param_bytes
                    }
                };
                plan.layer_gather = Some(cost.comm_step(pc, CollectiveOp::AllGather, Group::Dp, gathered, Overlap::Blocking));
                plan.layer_reduce = Some(cost.comm_step(pc, CollectiveOp::ReduceScatter, Group::Dp, per_layer * grad_bytes, Overlap::Blocking));
                plan.per_step = fsdp_per_step(s);
                if plan.per_step {
                    let later = (n_micro_of(s).unwrap_or(1) as f64 - 1.0).max(0.0);
                    let stage = dense + experts;
                    let bytes = if s.workload.fsdp.bf16_params && grad_bytes > 2.0 { 6.0 + 10.0 * later } else { grad_bytes * 3.0 * later };
                    plan.accumulate = cost.memory_time(stage * bytes, (layers as u32).max(1)).time;
                    plan.optimizer += plan.accumulate;
                }
                if torch {
                    // FSDP2's copy-out of the gathered buffer into the layer's parameters (read and
                    // write), and the copy-in of the gradients into the reduce-scatter buffer (read
                    // them in the dtype they were computed in, write them in the reduce dtype).
                    // Under a policy the shard is cast before the gather too (read 4 B, write the
                    // gathered bytes, 1/dp of the layer).
                    let computed = if s.workload.fsdp.bf16_params { 2.0 } else { 4.0 };
                    let cast_in = if param_bytes < 4.0 { per_layer / pc.dp as f64 * (4.0 + param_bytes) } else { 0.0 };
                    plan.gather_copy = cost.memory_time(2.0 * per_layer * param_bytes + cast_in, 1).time;
                    plan.reduce_copy = cost.memory_time(per_layer * (computed + grad_bytes), 1).time;
                }
            }
        }
    }
    plan
}

/// The FSDP collectives of one micro-batch that run beside no compute, given one layer's gather
/// `gather` and reduce-scatter `reduce` (the rest overlap the layers' compute, each layer waiting
/// only for what its compute does not cover).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PassEdges {
    /// Time added to the step.
    pub exposed: Seconds,
    /// Collective time that runs beside no compute (not charged again as overlapped).
    pub unoverlapped: Seconds,
}

/// [`PassEdges`] of a micro-batch under FSDP, by how the stack's FSDP orders its collectives.
///
/// The torch stacks run FSDP2 (`torch.distributed.fsdp.fully_shard`; torch 2.11.0
/// `_fully_shard/_fsdp_state.py` and `_fsdp_param_group.py`, re-read from the 2.11.0+cu130 wheel):
/// - forward: each module's `pre_forward` issues its all-gather on the all-gather stream and makes
///   the compute stream wait for it (`unshard`, `wait_for_unshard`); the host runs ahead of the
///   GPU, so layer i+1's gather is issued while layer i computes (implicit prefetch; the gather
///   stream may run up to two layers ahead, `AllGatherState` holding the previous result until
///   the next copy-out). Only the first gather of the pass has nothing to hide behind: the root
///   module's (embeddings, final norm, output; never resharded after forward, `_lazy_init`) and
///   the first layer's, which gpuplan spreads over the layers as one layer's gather.
/// - backward: each module's `pre_backward` waits for its gather and prefetches the previous
///   module's in reverse forward order (`_backward_prefetch`); the first backward gather needs
///   nothing (torchtitan keeps the last block gathered after forward, `reshard_after_forward =
///   layer_id < n_layers - 1` in torchtitan 0.1.0 `apply_fsdp`) or is issued by the root's
///   `pre_backward` beside the output projection's backward. Each `post_backward` reduce-scatters
///   on the reduce-scatter stream after waiting for the previous one, so a layer's gather and its
///   successor's reduce-scatter share the layer's backward (one process group: NCCL runs them one
///   after the other), and the last reduce-scatter runs after the last layer's backward with
///   nothing beside it: `_root_post_backward_final_callback` makes the compute stream wait for it
///   (`reduce_scatter_state.event`).
///
/// So one gather and one reduce-scatter per micro-batch are exposed. FSDP1
/// (`FullyShardedDataParallel`, which accelerate's FSDP plugin wraps for the hf stacks by default)
/// has the same edges: torch 2.11.0 `fsdp/_runtime_utils.py` keeps the root's parameters after
/// forward ("Do not free the root's parameters in the post-forward for `FULL_SHARD`"), issues the
/// next unit's unshard on its own stream as the host reaches it, prefetches in backward
/// (`BACKWARD_PRE`), and `_post_backward_final_callback` waits for the post-backward stream. Other
/// stacks (Megatron-FSDP, ZeRO 3 elsewhere): the first gather of each pass, as before this rule.
pub fn fsdp_pass_edges(stack: Stack, gather: Seconds, reduce: Seconds) -> PassEdges {
    if stack.torch() {
        PassEdges { exposed: gather + reduce, unoverlapped: gather + reduce }
    } else {
        PassEdges { exposed: gather * 2.0, unoverlapped: Seconds::ZERO }
    }
}

/// Whether FSDP gathers and reduces once per step (`DpPlan::per_step`): the torch stacks'
/// FSDP training at pp > 1.
pub fn fsdp_per_step(s: &Scenario) -> bool {
    s.workload.stack.torch() && s.workload.mode == Mode::Train && s.parallel.pp > 1 && s.parallel.zero == 3
}

/// What limits the step most: compute, HBM, NVLink (`pcie` on a PCIe node), the scale-out network,
/// the pipeline bubble or the CPU. Communication counts as network when its group spans NVLink domains.
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
    parts.insert(s.system.scale_up.name(), nvlink.value());
    parts.insert("network", network.value());
    parts.insert("bubble", bd.pp_bubble.value());
    parts.insert("cpu", bd.cpu_launch.value());
    parts.into_iter().max_by(|a, b| a.1.total_cmp(&b.1)).map(|(k, _)| k).unwrap_or("compute")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn megatron_buckets_hold_40m_parameters_or_1m_per_data_parallel_rank() {
        assert_eq!(megatron_bucket_params(1), 40e6);
        assert_eq!(megatron_bucket_params(40), 40e6);
        assert_eq!(megatron_bucket_params(128), 128e6);
    }

    #[test]
    fn each_stack_family_has_its_own_overlap_cost() {
        let f = crate::cost::fitted::fitted();
        assert_eq!(overlap_cost(Stack::Megatron), f.megatron_overlap_cost);
        assert_eq!(overlap_cost(Stack::TorchEager), f.overlap_cost);
        assert_eq!(overlap_cost(Stack::HfCompile), f.overlap_cost);
    }

    #[test]
    fn fsdp2_exposes_the_forward_s_first_gather_and_the_last_reduce_scatter() {
        let (gather, reduce) = (Seconds::ms(2.0), Seconds::ms(5.0));
        // The torch stacks (FSDP2 under torchtitan, FSDP1 under accelerate): one gather and one
        // reduce-scatter a micro-batch run beside no compute, and are not charged as overlapped.
        for stack in [Stack::TorchEager, Stack::TorchCompile, Stack::HfEager, Stack::HfCompile] {
            let e = fsdp_pass_edges(stack, gather, reduce);
            assert_eq!(e.exposed, gather + reduce, "{stack:?}");
            assert_eq!(e.unoverlapped, gather + reduce, "{stack:?}");
        }
        // Other stacks: the first gather of each pass.
        let other = fsdp_pass_edges(Stack::Megatron, gather, reduce);
        assert_eq!(other, PassEdges { exposed: gather * 2.0, unoverlapped: Seconds::ZERO });
    }
}
