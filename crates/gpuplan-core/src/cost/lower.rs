//! Lowering: op list -> timed steps, shared by both engines. A step is a kernel (occupies the
//! GPU's compute stream for a duration) or a collective (latency, then bytes at a bus bandwidth over
//! the links it crosses), with the overlap rule that applies to it. The analytic engine adds steps
//! up with these rules; the DES plays them on streams and links, so the two differ only where
//! flows contend or schedules overlap.

use super::{nccl, Bound, CostModel};
use crate::hardware::profile::CollectiveOp;
use crate::parallelism::{group_shape, Group, ParallelConfig};
use crate::scenario::Options;
use crate::units::{BytesPerSec, Seconds};
use crate::workload::{Mode, Op, OpKind, Pass, Stack, Workload};

/// Host time to launch one kernel, by stack and pass: the framework's per-op dispatch (Python,
/// the dispatcher and autograd recording in forward; the C++ autograd engine in backward).
/// `torch-eager` forward: 18.5 us, fitted on the CPU-bound decode runs of the fit split of
/// calibration/runs/h200.jsonl (h200-023 and -028, 20 and 18 ms per token; GPU util 37-43%). The backward and the other
/// stacks are not separable in that data (those runs are GPU-bound): 9 us for eager backward and
/// 6 us for fused stacks are engineering estimates (a C++ dispatch plus a launch), unsourced.
pub fn cpu_dispatch(stack: Stack, pass: Pass) -> Seconds {
    match (stack, pass) {
        (Stack::TorchEager | Stack::HfEager, Pass::Forward | Pass::Recompute) => Seconds::us(18.5),
        (Stack::TorchEager | Stack::HfEager, Pass::Backward) => Seconds::us(9.0),
        (Stack::TorchCompile | Stack::HfCompile | Stack::Megatron, _) => Seconds::us(6.0),
        // The engines launch from C++ (TensorRT-LLM's runtime) or a Python loop around compiled
        // pieces (vLLM, SGLang); decode replays CUDA graphs. The same estimate as the fused stacks.
        (Stack::Trtllm | Stack::Vllm | Stack::Sglang, _) => Seconds::us(6.0),
    }
}

/// Defined with the other fitted constants in `cost::fitted`.
pub use super::fitted::DTENSOR_LINEAR_US;

/// GEMMs that are tensor-parallel linear layers (column- or row-parallel weights) in the op list.
fn is_tp_linear(op: &Op) -> bool {
    matches!(op.kind, OpKind::Gemm { .. })
        && matches!(
            op.name,
            "q_proj"
                | "k_proj"
                | "v_proj"
                | "qkv_proj"
                | "out_proj"
                | "up_proj"
                | "gate_proj"
                | "down_proj"
                | "lm_head"
                | "q_down"
                | "q_up"
                | "kv_down"
                | "kv_up"
                | "shared_up"
                | "shared_down"
        )
}

/// Host time of DTensor's dispatch for `op` (zero unless training a tensor-parallel `torch-eager` job).
fn dtensor_dispatch(pc: &ParallelConfig, w: &Workload, op: &Op) -> Seconds {
    if w.stack.eager() && w.mode == Mode::Train && pc.tp > 1 && is_tp_linear(op) {
        let [a, b] = super::fitted::fitted().dtensor_linear_us;
        Seconds::us(a + b * (pc.tp as f64).log2())
    } else {
        Seconds::ZERO
    }
}

/// Host time the GPU waits for at `op` when Megatron-Core's dropless MoE dispatcher syncs the host
/// (`cost::fitted::MOE_DISPATCH_SYNC_US`, once per MoE layer and forward or recompute pass of a
/// training step, at the token permutation); zero for other stacks, modes and ops (the rows it is
/// fitted on are training; inference engines run MoE from CUDA graphs without the sync).
fn moe_dispatch_sync(w: &Workload, op: &Op) -> Seconds {
    if w.stack == Stack::Megatron && w.mode == Mode::Train && op.name == "permute" && matches!(op.pass, Pass::Forward | Pass::Recompute) {
        Seconds::us(super::fitted::fitted().moe_dispatch_sync_us)
    } else {
        Seconds::ZERO
    }
}

/// Host time of the `hf-*` stacks in inference, from the node's host probe (`Profile::host`,
/// `calibrate --host`), for one part's op list: `(cpu, stall)`. `cpu` is launch-side host time
/// spread over the list's kernels (it runs ahead of the GPU; the pass costs the longer of the two):
/// a decoder layer's measured host time for a layer list, the rest of a step (embedding, final
/// norm, LM head, argmax) for the head's list. `stall` is host time the GPU waits for in full, put
/// on the embedding (once per step): in decode, when SDPA runs cuDNN ([`super::sdpa_picks_cudnn`]),
/// the KV length is new at every step, so cuDNN builds a new execution plan at the step's first
/// attention call (the other layers' calls, of the same shape, hit its plan cache) while the GPU
/// has nothing queued beyond that layer's first kernels. `None` outside the `hf-*` stacks'
/// inference, or without a probe (`config` refuses those scenarios first).
pub fn hf_inference_host(cost: &CostModel, w: &Workload, ops: &[Op]) -> Option<(Seconds, Seconds)> {
    if !w.stack.hf() || w.mode == Mode::Train {
        return None;
    }
    let host = cost.profile?.host.as_ref()?;
    let has = |name: &str| ops.iter().any(|o| o.name == name);
    Some(if has("input_norm") {
        (host.hf_decode_layer, Seconds::ZERO)
    } else if has("lm_head") {
        (host.hf_decode_fixed, Seconds::ZERO)
    } else if has("embedding") && w.mode == Mode::Decode && super::sdpa_picks_cudnn(cost.system.gpu.arch) {
        (Seconds::ZERO, host.sdpa_cudnn_plan * super::fitted::fitted().hf_sdpa_plan_share)
    } else {
        (Seconds::ZERO, Seconds::ZERO)
    })
}

/// The dtype a GEMM runs in: the workload's, except the LM head of a serving engine's quantized
/// checkpoint, which stays in bf16: NVIDIA ModelOpt's FP8 and NVFP4 recipes (the checkpoints
/// TensorRT-LLM's performance overview runs, and those vLLM and SGLang load) leave `*lm_head*`
/// unquantized (ModelOpt `mtq` default configs, `"*lm_head*": {"enable": False}`; the quantized
/// checkpoints' `hf_quant_config.json` lists `lm_head` under `exclude_modules`).
pub fn gemm_dtype(w: &Workload, op: &Op) -> crate::hardware::Dtype {
    if op.name == "lm_head" && w.stack.is_engine() {
        crate::hardware::Dtype::Bf16
    } else {
        w.precision
    }
}

/// Whether `op` is an expert GEMM that transformers' `grouped_mm` experts path runs through
/// PyTorch's fallback: in training under the `hf-*` stacks the experts' weights are the fp32
/// master weights, and transformers casts the routed activations to the weight dtype
/// (`integrations/moe.py`: `input.to(weight.dtype)`; the path is not autocast-enabled), so
/// `torch._grouped_mm` gets fp32 operands. PyTorch 2.11 runs its CUTLASS grouped kernel for bf16
/// only; other dtypes take `_grouped_mm_fallback`, which copies the offsets to the host (a device
/// sync) and runs one `mm` per expert (TF32 here: the runs allow it), in forward and in both
/// backward GEMMs.
pub fn hf_fp32_grouped_mm(w: &Workload, op: &Op) -> bool {
    w.stack.hf() && w.mode == Mode::Train && matches!(op.name, "expert_up" | "expert_down") && matches!(op.kind, OpKind::Gemm { .. })
}

/// Host time the GPU waits for at a fallback grouped GEMM ([`hf_fp32_grouped_mm`]) of `count`
/// experts whose GEMMs take `gpu` on the GPU: the offsets' device-to-host sync, then the host
/// launching one `mm` per expert, of which the GPU hides what its own GEMMs take
/// (`cost::fitted::HF_GROUPED_MM_FALLBACK_US`).
fn hf_fallback_stall(count: u64, gpu: Seconds) -> Seconds {
    let [per_call, per_expert] = super::fitted::fitted().hf_grouped_mm_fallback_us;
    Seconds::us(per_call) + (Seconds::us(per_expert) * count as f64 - gpu).max(Seconds::ZERO)
}

/// Share of an overlapped TP collective that stays on the critical path (the first chunk of
/// Megatron's pipelined all-gather/reduce-scatter GEMM overlap). An engineering estimate.
pub const TP_OVERLAP_BLOCKING: f64 = 0.1;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Overlap {
    /// The stream waits for the collective.
    Blocking,
    /// `blocking` of the bytes go first; the rest runs beside the next kernel, and the step after
    /// that kernel waits for both.
    WithNextKernel { blocking: f64 },
}

#[derive(Debug, Clone, PartialEq)]
pub struct CommStep {
    pub group: Group,
    pub op: CollectiveOp,
    pub algo: nccl::Algo,
    pub proto: nccl::Proto,
    /// Paid once, before the first step.
    pub latency: Seconds,
    /// Steps of the algorithm (a ring all-reduce: 2(n-1)); each costs `step_latency` and moves
    /// `wire_bytes / steps`.
    pub steps: u32,
    pub step_latency: Seconds,
    /// Bytes each rank moves at the bus bandwidth: size x the op's bus-bandwidth factor.
    pub wire_bytes: f64,
    pub busbw: BytesPerSec,
    pub crosses_network: bool,
    pub overlap: Overlap,
}

impl CommStep {
    /// Time with the whole bus bandwidth to itself.
    pub fn time(&self) -> Seconds {
        self.total_latency() + self.transfer(1.0)
    }
    /// Base latency plus every step's latency.
    pub fn total_latency(&self) -> Seconds {
        self.latency + self.step_latency * self.steps as f64
    }
    /// Time to move `fraction` of the bytes at full bus bandwidth.
    pub fn transfer(&self, fraction: f64) -> Seconds {
        Seconds::new(self.wire_bytes * fraction / self.busbw.value())
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// A kernel (or a few, for unfused elementwise ops): GPU `time`, and `cpu` seconds for the host
    /// to launch it (the framework's per-op dispatch).
    /// `host_sync`: host time that cannot run ahead of the GPU (the GPU waits for it in full):
    /// DTensor's dispatch of a tensor-parallel linear layer, see [`DTENSOR_LINEAR_US`].
    Kernel {
        name: &'static str,
        time: Seconds,
        bound: Bound,
        cpu: Seconds,
        launches: f64,
        host_sync: Seconds,
    },
    Comm {
        name: &'static str,
        comm: CommStep,
    },
}

impl CostModel<'_> {
    /// One collective of `bytes` (nccl-tests buffer size) on `group`.
    pub fn comm_step(&self, pc: &ParallelConfig, op: CollectiveOp, group: Group, bytes: f64, overlap: Overlap) -> CommStep {
        let shape = group_shape(pc, group, self.system);
        let plan = self.collective_plan(op, &shape, bytes);
        let alone = shape.size <= 1;
        CommStep {
            group,
            op,
            algo: plan.algo,
            proto: plan.proto,
            latency: if alone { Seconds::ZERO } else { plan.base },
            steps: if alone { 0 } else { plan.steps },
            step_latency: plan.step_latency,
            wire_bytes: if alone { 0.0 } else { bytes * op.busbw_factor(shape.size) },
            busbw: plan.busbw,
            crosses_network: shape.crosses_domains(),
            overlap,
        }
    }

    /// Lower a list of ops to steps; compute-bound kernels run `speedup` times faster than at the
    /// sustained clock (the power model's answer).
    pub fn lower(&self, pc: &ParallelConfig, options: &Options, w: &Workload, ops: &[Op], speedup: f64) -> Vec<Step> {
        let stack = w.stack;
        let mut out = Vec::with_capacity(ops.len());
        let hf_host = hf_inference_host(self, w, ops);
        let launches_in_list: f64 = ops
            .iter()
            .map(|o| match o.kind {
                OpKind::Memory { kernels, .. } => kernels as f64,
                OpKind::Comm { .. } => 0.0,
                _ => 1.0,
            })
            .sum();
        for (i, op) in ops.iter().enumerate() {
            let dispatch = match hf_host {
                Some((cpu, _)) => cpu / launches_in_list.max(1.0),
                None => cpu_dispatch(stack, op.pass),
            };
            let stall = match hf_host {
                Some((_, stall)) if i == 0 => stall,
                _ => Seconds::ZERO,
            };
            let host_sync = dtensor_dispatch(pc, w, op) + moe_dispatch_sync(w, op) + stall;
            let kernel = |c: super::OpCost, launches: f64| {
                let time = if c.bound == Bound::Compute { c.time / speedup } else { c.time };
                Step::Kernel { name: op.name, time, bound: c.bound, cpu: dispatch * launches, launches, host_sync }
            };
            let step = match &op.kind {
                OpKind::Gemm { m, n, k, count } if hf_fp32_grouped_mm(w, op) => {
                    let c = self.gemm_time(*m, *n, *k, *count, crate::hardware::Dtype::Tf32);
                    let time = if c.bound == Bound::Compute { c.time / speedup } else { c.time };
                    let host_sync = host_sync + hf_fallback_stall(*count, time);
                    Step::Kernel { name: op.name, time, bound: c.bound, cpu: dispatch * *count as f64, launches: *count as f64, host_sync }
                }
                OpKind::Gemm { m, n, k, count } => kernel(self.gemm_time(*m, *n, *k, *count, gemm_dtype(w, op)), 1.0),
                OpKind::Attention { .. } => kernel(self.attention_time(op), 1.0),
                OpKind::Memory { bytes, kernels } if stack.hf() && w.mode != Mode::Decode => {
                    kernel(self.memory_time(*bytes / super::fitted::fitted().hf_memory_efficiency, *kernels), *kernels as f64)
                }
                OpKind::Memory { bytes, kernels } => kernel(self.memory_time(*bytes, *kernels), *kernels as f64),
                OpKind::Comm { op: c, group, bytes } => {
                    let next_is_kernel = ops.get(i + 1).is_some_and(|n| !matches!(n.kind, OpKind::Comm { .. }));
                    let overlap = match group {
                        Group::Tp if options.tp_comm_overlap && next_is_kernel => Overlap::WithNextKernel { blocking: TP_OVERLAP_BLOCKING },
                        // Ring attention: the first of cp chunks is exchanged before the attention
                        // starts, the rest beside it.
                        Group::Cp if next_is_kernel => Overlap::WithNextKernel { blocking: 1.0 / pc.cp.max(1) as f64 },
                        _ => Overlap::Blocking,
                    };
                    Step::Comm { name: op.name, comm: self.comm_step(pc, *c, *group, *bytes, overlap) }
                }
            };
            out.push(step);
        }
        out
    }
}
