//! Lowering: op list -> timed steps, shared by both engines. A step is a kernel (occupies the
//! GPU's compute stream for a duration) or a collective (latency, then bytes at a bus bandwidth over
//! the links it crosses), with the overlap rule that applies to it. The analytic engine adds steps
//! up with these rules; the DES plays them on streams and links, so the two differ only where
//! flows contend or schedules overlap.

use super::{nccl, Bound, CostModel};
use crate::hardware::profile::CollectiveOp;
use crate::model::{Model, RmsStyle};
use crate::parallelism::{group_shape, Group, ParallelConfig};
use crate::scenario::{Options, TrainGraphs};
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

/// Host time per kernel launch of `hf-eager` training (transformers' modeling code under
/// `torch.autocast`, the autograd engine, `AdamW(fused=True)`), forward (and recompute) and
/// backward, in us: measured on the lent H100's host (nvidia-h100-x1, Intel Xeon, 16 vCPUs, torch
/// 2.11.0+cu130, transformers 5.17.0; 2026-11-24 19:54 UTC, device clock) by
/// scenarios/workloads/hf_train_host_probe.py, raw data and summary in
/// calibration/runs/raw/hf-train-host-h100-2026-11-24/: one eager training step of the Llama-3.2-1B
/// and Qwen3-1.7B families (their configs, small dims, batch 1 x 16 tokens so that the GPU work is
/// tiny) at 2, 4 and 8 decoder layers, fp32 master weights under bf16 autocast as
/// scenarios/workloads/hf_train.py runs them. Each pass's host time per layer (least-squares slope
/// over the three depths, medians of 20 steps) over its CUDA kernel launches per layer (the torch
/// profiler's `cudaLaunchKernel` count at 2 and 4 layers): forward 2,147 us / 48 launches = 44.7
/// us (Llama), 2,571 / 64 = 40.2 (Qwen3); backward 1,949 / 93 = 21.0, 3,440 / 121 = 28.4. The
/// constants are the two families' means (`summary.txt`, scripts/hf_train_host_summary.py). The
/// MoE families' layers came out at 34-35 us per forward launch and 19-25 per backward launch.
/// Not fitted on any run record. The same call's real shapes (Qwen3-1.7B, Llama-3.2-1B at 1 x 2048,
/// fp32 + autocast) launched 65 and 50 kernels per layer forward, 122 and 95 backward (the small
/// models' counts), in 5.9 and 4.45 ms of host per layer (forward + backward host over the layer
/// count, the head included); these constants give 5.70 and 4.33 ms.
pub const HF_EAGER_TRAIN_LAUNCH_US: [f64; 2] = [42.4, 24.7];

/// CUDA kernel launches per dense decoder layer of `hf-eager` training, `[forward, backward]`, as
/// transformers 5.17's modeling code and PyTorch 2.11's autograd issue them under bf16 autocast
/// with fp32 master weights: counted by the torch profiler (`cudaLaunchKernel` calls, the
/// difference between 4 and 2 layers over 2) in the same call as [`HF_EAGER_TRAIN_LAUNCH_US`]. A
/// Llama layer (two RMSNorms of about 8 launches each, seven linears each behind autocast's weight
/// cast, rotary embedding on q and k, SDPA, SwiGLU, two residual adds): 48 and 93.
pub const HF_EAGER_TRAIN_LAYER_LAUNCHES: [f64; 2] = [48.0, 93.0];

/// What Qwen3's QK-norm (two more RMSNorms, on q and k per head) adds to
/// [`HF_EAGER_TRAIN_LAYER_LAUNCHES`]: Qwen3-1.7B's layer counted 64 and 121 in the same profile.
pub const HF_EAGER_TRAIN_QK_NORM_LAUNCHES: [f64; 2] = [16.0, 28.0];

/// The host speed [`HF_EAGER_TRAIN_LAUNCH_US`] was measured at: one dispatcher op from Python on
/// the lent H100's host, `op_dispatch_us` of calibration/profiles/h100-sxm-1x/host.toml (`calibrate
/// --host`, same host kind, 2026-11-24 08:16Z; the launch constants' own call did not time it). A
/// node whose profile measured its own `op_dispatch` pays the launches scaled by the ratio
/// ([`hf_eager_train_host_scale`]): the per-launch time is Python, dispatcher and launch work on
/// one CPU thread, as the probe's op is. Checked on the lent H200 (its profile's 6.78 us): the
/// host-bound post-fit 7 runs, calibration/runs/hf/postfit-7.jsonl.
pub const HF_EAGER_TRAIN_REFERENCE_OP_DISPATCH_US: f64 = 10.273;

/// How much slower (> 1) or faster this node's host runs eager training's launches than the host
/// [`HF_EAGER_TRAIN_LAUNCH_US`] was measured on: the profile's measured `op_dispatch` over
/// [`HF_EAGER_TRAIN_REFERENCE_OP_DISPATCH_US`]; 1 without a host probe in the profile.
pub fn hf_eager_train_host_scale(cost: &CostModel) -> f64 {
    cost.profile.and_then(|p| p.host.as_ref()).map_or(1.0, |h| h.op_dispatch.as_us() / HF_EAGER_TRAIN_REFERENCE_OP_DISPATCH_US)
}

/// Host time of one dense decoder layer of `hf-eager` training, `[forward (and each recompute),
/// backward]`: the layer's counted launches ([`HF_EAGER_TRAIN_LAYER_LAUNCHES`], with
/// [`HF_EAGER_TRAIN_QK_NORM_LAUNCHES`] where the layer has a `qk_norm`) at
/// [`HF_EAGER_TRAIN_LAUNCH_US`]. `None` outside `hf-eager` training, and for lists that are not a
/// dense layer (embedding, head, MoE layers: those take [`hf_eager_train_dispatch`] per kernel of
/// the op list, their launches varying with the routing).
pub fn hf_eager_train_layer_host(cost: &CostModel, model: &Model, w: &Workload, ops: &[Op]) -> Option<[Seconds; 2]> {
    if w.stack != Stack::HfEager || w.mode != Mode::Train {
        return None;
    }
    let has = |name: &str| ops.iter().any(|o| o.name == name);
    if !is_decoder_layer(ops) || has("router") {
        return None;
    }
    let qk = if has("qk_norm") { 1.0 } else { 0.0 };
    let style = hf_eager_train_style_launches(model);
    let launches = |p: usize| HF_EAGER_TRAIN_LAYER_LAUNCHES[p] + qk * HF_EAGER_TRAIN_QK_NORM_LAUNCHES[p] + style[p];
    Some([hf_eager_train_dispatch(cost, Pass::Forward) * launches(0), hf_eager_train_dispatch(cost, Pass::Backward) * launches(1)])
}

/// Whether an op list is a transformer layer's (its pre-norm, or a post-norm family's branch norm).
fn is_decoder_layer(ops: &[Op]) -> bool {
    ops.iter().any(|o| matches!(o.name, "input_norm" | "attn_out_norm"))
}

/// What a family's dense layer launches in `hf-eager` training beyond a Llama layer
/// ([`HF_EAGER_TRAIN_LAYER_LAUNCHES`]), `[forward, backward]`, from the modules and ops it runs
/// (transformers 5.17.0, PyTorch 2.11 autograd; derived from the ops, not counted by a profiler):
/// - each RMSNorm module beyond Llama's two (Gemma's `post_attention_layernorm` and
///   `post_feedforward_layernorm`): half the measured QK-norm pair
///   ([`HF_EAGER_TRAIN_QK_NORM_LAUNCHES`], two RMSNorm modules), 8 and 14;
/// - Gemma's `1.0 + weight.float()` in each of its norms (hidden and QK): one forward launch;
/// - Phi-3's fused projections: three `nn.Linear`s fewer (q, k, v -> `qkv_proj`; gate, up ->
///   `gate_up_proj`), each a weight cast and a GEMM forward (2) and two GEMMs and a gradient cast
///   backward (3), and three autocast input casts fewer (one per linear a norm feeds: three to
///   one, two to one) with their backward casts and gradient sums: -9 forward, -15 backward;
///   the three slices of `qkv` and the `chunk` of `gate_up` launch nothing forward, and backward
///   `slice_backward` fills and copies each slice's gradient into a zero tensor and sums them (2
///   launches each and 2 sums) and `chunk`'s backward concatenates (1): +9.
///
/// OLMo-2's two post-norms replace Llama's two pre-norms (the linears' input casts move to the
/// stream, as many), so its layer is Llama's plus the QK-norm pair.
pub fn hf_eager_train_style_launches(model: &Model) -> [f64; 2] {
    let style = model.style;
    let extra_norms = style.norm_placement.per_layer() as f64 - 2.0;
    let per_norm = [HF_EAGER_TRAIN_QK_NORM_LAUNCHES[0] / 2.0, HF_EAGER_TRAIN_QK_NORM_LAUNCHES[1] / 2.0];
    let offset =
        if style.rms_style == RmsStyle::OffsetScaleThenCast { style.norm_placement.per_layer() as f64 + if model.qk_norm { 2.0 } else { 0.0 } } else { 0.0 };
    let fused = if style.fused_projections { [-9.0, -15.0 + 9.0] } else { [0.0, 0.0] };
    [extra_norms * per_norm[0] + offset + fused[0], extra_norms * per_norm[1] + fused[1]]
}

/// Dispatcher ops a family's decoder layer runs beyond a Llama layer in `hf-*` inference (bf16
/// weights, no autocast), which the host probe's `hf_decode_layer` (a small Llama's layer) does not
/// hold; each at the probe's `op_dispatch` ([`hf_inference_host`]). From transformers 5.17.0's
/// modules:
/// - RMSNorm modules beyond Llama's two, each the family's op chain: 8 (`LlamaRMSNorm`: float,
///   pow, mean, add, rsqrt, mul, cast, mul; `Olmo2RMSNorm`'s the same count), 10 for Gemma's
///   (`weight.float()` and `1.0 +` besides); Gemma's two pre-norms 2 each more than Llama's;
/// - Phi-3's fused projections: three linears fewer, three slices and a `chunk` more: +1;
/// - a sliding layer past its window in decode under GQA: `repeat_kv`'s expand and reshape of k and
///   v (4), on the model's share of sliding layers.
///
/// QK-norm's two modules (Qwen3, Gemma 3, OLMo-2) are not added: the held-out Qwen3-1.7B decode
/// runs (calibration/runs/hf/postfit-13.jsonl hf-206, hf-220) measure within 3% of the Llama
/// layer's probed time without them, and 16 more ops at `op_dispatch` would put them 4% over, so
/// ops inside a norm module cost less than the probe's lone `torch.add`; the extra hidden norms
/// below are priced at `op_dispatch` all the same (an upper bound, not fitted). Module calls beyond
/// the ops (the probe's `module_call`, about 1.8 us on the lent H100) are not counted.
pub fn hf_inference_extra_ops(model: &Model, w: &Workload) -> f64 {
    let style = model.style;
    let norm_ops = if style.rms_style == RmsStyle::OffsetScaleThenCast { 10.0 } else { 8.0 };
    let layer_norms = style.norm_placement.per_layer() as f64;
    let norms = layer_norms * norm_ops - 2.0 * 8.0;
    let fused = if style.fused_projections { 1.0 } else { 0.0 };
    let repeat = match &model.sliding_window {
        Some(sw) if w.mode == Mode::Decode && model.n_heads > model.n_kv_heads && w.kv_len + 1 >= sw.window && !model.attention_sinks => {
            4.0 * model.sliding_share()
        }
        _ => 0.0,
    };
    norms + fused + repeat
}

/// Host time to launch one kernel of `hf-eager` training in `pass` ([`HF_EAGER_TRAIN_LAUNCH_US`]
/// at this node's host speed, [`hf_eager_train_host_scale`]).
pub fn hf_eager_train_dispatch(cost: &CostModel, pass: Pass) -> Seconds {
    let us = match pass {
        Pass::Forward | Pass::Recompute => HF_EAGER_TRAIN_LAUNCH_US[0],
        Pass::Backward => HF_EAGER_TRAIN_LAUNCH_US[1],
    };
    Seconds::us(us * hf_eager_train_host_scale(cost))
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

/// Whether the TP collectives run as PyTorch's async TP: `torch-compile` with
/// `Options::tp_comm_overlap` (torchtitan's `enable_async_tensor_parallel`, which needs compile),
/// TP with sequence parallelism. torchtitan sets `torch._inductor.config._micro_pipeline_tp` and
/// enables symmetric memory on the TP group (0.1.0 `apply_tp`); Inductor's post-grad pass
/// (torch 2.11 `_inductor/fx_passes/micro_pipeline_tp.py`) then replaces an all-gather whose result
/// feeds matmuls by `symm_mem.fused_all_gather_matmul` and a reduce-scatter of a matmul's output
/// by `fused_matmul_reduce_scatter`: chunked GEMMs beside the peer copies, no DTensor layout copy
/// (the fused ops index the gather dimension themselves). What the pass does not fuse: a
/// reduce-scatter whose input is not one matmul's output (`_find_producer_matmul`), which is the
/// backward's reduce-scatter of a column-parallel region's input gradient, the sum of the q, k and
/// v (or gate and up) data gradients. That one stays a blocking NCCL reduce-scatter with its
/// layout copy ([`unfused_tp_reduce`]).
fn micro_pipelined_tp(pc: &ParallelConfig, options: &Options, w: &Workload) -> bool {
    w.stack == Stack::TorchCompile && options.tp_comm_overlap && pc.tp > 1 && pc.sp
}

/// Whether `ops[i]` is a TP reduce-scatter that async TP fuses with the matmul producing its
/// input: one in the forward pass.
fn fused_tp_reduce(ops: &[Op], i: usize) -> bool {
    ops.get(i).is_some_and(|o| o.pass != Pass::Backward && matches!(o.kind, OpKind::Comm { op: CollectiveOp::ReduceScatter, group: Group::Tp, .. }))
}

/// Async TP's order on one pass's lowered steps ([`micro_pipelined_tp`]): each fused all-gather
/// beside the first GEMM it feeds (past the shard's staging copy and torchao's input casts, which
/// the fused op runs before its chunks), each fused reduce-scatter beside the GEMM producing its
/// input (`fused_matmul_reduce_scatter` runs that GEMM chunk by chunk while the peers' copies
/// proceed); the overlap itself is the generic one (`Overlap::WithNextKernel`, the first chunk,
/// `TP_OVERLAP_BLOCKING`, exposed). The unfused backward reduce-scatter stays where it is.
fn micro_pipeline_order(steps: &mut Vec<Step>, ops: &[Op]) {
    debug_assert_eq!(steps.len(), ops.len());
    let mut order: Vec<usize> = (0..ops.len()).collect();
    let is_gemm = |k: usize| matches!(ops[k].kind, OpKind::Gemm { .. });
    let passable = |k: usize| {
        matches!(ops[k].kind, OpKind::Memory { .. })
            && (matches!(ops[k].name, crate::workload::FP8_CAST | crate::workload::FP8_CAST_ROWWISE)
                || (ops[k].name == crate::workload::SP_LAYOUT_COPY && !fused_tp_reduce(ops, k + 1) && !unfused_tp_reduce(ops, k + 1)))
    };
    let mut i = 0;
    while i < order.len() {
        let idx = order[i];
        match &ops[idx].kind {
            OpKind::Comm { op: CollectiveOp::AllGather, group: Group::Tp, .. } => {
                let mut j = i + 1;
                while j < order.len() && passable(order[j]) {
                    j += 1;
                }
                if j < order.len() && is_gemm(order[j]) && j > i + 1 {
                    let comm = order.remove(i);
                    order.insert(j - 1, comm);
                    continue;
                }
            }
            OpKind::Comm { op: CollectiveOp::ReduceScatter, group: Group::Tp, .. } if fused_tp_reduce(ops, idx) => {
                // Back over the reduction slot (the layout copy's place) to the producing GEMM.
                let mut j = i;
                while j > 0 && !is_gemm(order[j - 1]) && matches!(ops[order[j - 1]].kind, OpKind::Memory { .. }) {
                    j -= 1;
                }
                if j > 0 && is_gemm(order[j - 1]) {
                    let comm = order.remove(i);
                    order.insert(j - 1, comm);
                }
            }
            _ => {}
        }
        i += 1;
    }
    let mut taken: Vec<Option<Step>> = std::mem::take(steps).into_iter().map(Some).collect();
    steps.extend(order.into_iter().map(|k| taken[k].take().expect("each step once")));
}

/// Whether `ops[i]` is a TP reduce-scatter that async TP leaves unfused: one in the backward
/// pass (see [`micro_pipelined_tp`]).
fn unfused_tp_reduce(ops: &[Op], i: usize) -> bool {
    ops.get(i).is_some_and(|o| o.pass == Pass::Backward && matches!(o.kind, OpKind::Comm { op: CollectiveOp::ReduceScatter, group: Group::Tp, .. }))
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
/// fitted on are training; inference engines run MoE from CUDA graphs without the sync), and when
/// every expert's input is padded to its capacity (`MoeCapacity::pad`: the token counts are
/// constants, megatron-core 0.16.1 `MoEAlltoAllTokenDispatcher.preprocess`). The layer's host
/// time before the sync (`cost::fitted::MOE_LAYER_HOST_US`) is launch-side time instead
/// ([`moe_host_before_drain`]).
fn moe_dispatch_sync(options: &Options, w: &Workload, op: &Op) -> Seconds {
    if drains_launch_queue(options, w, op) {
        Seconds::us(super::fitted::fitted().moe_dispatch_sync_us)
    } else {
        Seconds::ZERO
    }
}

/// Which of `ops` carry the eager MoE layer's host time up to the dispatcher's sync
/// (`cost::fitted::MOE_LAYER_HOST_US`): for each op that drains the launch queue
/// ([`drains_launch_queue`]), the last kernel before it in the list (the router's top-k). In
/// Megatron-Core 0.16.1 the host reaches the sync only after running the layer's Python up to it
/// (the transformer layer, the attention block or its CUDA-graph replay, the router, the
/// dispatcher's preprocess and DeepEP's `get_dispatch_layout`, `FusedDispatch.forward`), while the
/// GPU still works through what the host queued since the last sync (the previous layer's experts
/// and combine, this layer's attention). So that host time runs beside the GPU's queued work, as
/// launch time before the drain, and the GPU waits for it only where the host is the longer of
/// the two (analytic `drained_span`; the DES's host cursor); what the host does between the sync
/// and its next launch is the stall ([`moe_dispatch_sync`]).
fn moe_host_before_drain(options: &Options, w: &Workload, ops: &[Op]) -> Vec<usize> {
    let mut out = Vec::new();
    for (j, op) in ops.iter().enumerate() {
        if drains_launch_queue(options, w, op) {
            if let Some(i) = (0..j).rev().find(|&i| !matches!(ops[i].kind, OpKind::Comm { .. })) {
                out.push(i);
            }
        }
    }
    out
}

/// Whether `op` drains the launch queue under Megatron-Core's dropless MoE dispatcher: the
/// device-to-host copy of the token counts before the permutation (`moe_dispatch_sync`), in
/// eager training without padding to capacity. The host cannot run ahead of the GPU across it, so
/// a pass's launch time is bounded per MoE layer (`analytic`'s `part_times`).
pub fn drains_launch_queue(options: &Options, w: &Workload, op: &Op) -> bool {
    w.stack == Stack::Megatron
        && w.mode == Mode::Train
        && options.cuda_graphs != TrainGraphs::Full
        && !w.moe_capacity.is_some_and(|c| c.pad)
        && op.name == "permute"
        && matches!(op.pass, Pass::Forward | Pass::Recompute)
}

/// Share of the HBM copy rate (`CostModel`'s stream rate) that a MoE layer's token permutations
/// reach under Megatron (`permute`, `sort_chunks`, `unsort_chunks`, `unpermute`: one output row
/// gathered from one input row of `hidden` bf16 elements), in place of the megatron stack's fitted
/// [`MEGATRON_MEMORY_EFFICIENCY`](super::fitted::MEGATRON_MEMORY_EFFICIENCY) for its other
/// memory-bound kernels. Measured on the lent H100 (nvidia-h100-x1, 2026-11-24 19:41 UTC,
/// scripts/moe_permute_probe.py, calibration/runs/raw/moe-permute-h100-2026-11-24/) through
/// PyTorch's row gather (`index_select`; Transformer Engine's Triton permute kernels are not on
/// that machine): the median of the 8 rows that gather the routed buffer by a chunk permutation
/// (the alltoall dispatcher's sort by local expert) or in random order, Qwen3-30B-A3B and
/// DeepSeek-V3 hidden sizes at 4,096 and 16,384 tokens of top-8 (0.917-0.956 of `copy_` on the
/// same buffer, 2.44-2.81 TB/s); the permute from the token rows, whose source rows are re-read
/// `top_k` times, ran at 1.01-1.29x the copy. Taken to hold on the other GPUs as a share of their
/// copy rate (transferred). Not fitted.
pub const MOE_PERMUTE_COPY_SHARE: f64 = 0.925;

/// Whether `name` is one of a MoE layer's token permutations ([`MOE_PERMUTE_COPY_SHARE`]).
fn is_moe_permutation(name: &str) -> bool {
    matches!(name, "permute" | "sort_chunks" | "unsort_chunks" | "unpermute")
}

/// Defined with the other fitted constants in `cost::fitted`.
pub use super::fitted::MEGATRON_EXPERT_GEMM_HOST_US;

/// Host time per local expert of the quantize of a grouped expert GEMM's input (forward) or output
/// gradient (backward) under FP8/FP4 training: TE's `GroupedLinear` quantizes each expert's split
/// of the input separately (`tex.split_quantize`, one quantizer per GEMM, from memory). Measured as
/// PyTorch's FP8 cast, `Tensor.to(float8_e4m3fn)`: 15.1 us per call with the GPU held busy (the
/// run of [`MEGATRON_EXPERT_GEMM_HOST_US`], row `cast_fp8`).
pub const MEGATRON_EXPERT_QUANTIZE_HOST_US: f64 = 15.1;

/// Whether `ops[i]` is a grouped expert GEMM, or the quantize kernel of one (before it in forward,
/// after it in backward), of Megatron-Core's eager MoE layer in training: the ops whose launches
/// are per local expert ([`MEGATRON_EXPERT_GEMM_HOST_US`]). `None` otherwise, else the local
/// expert count.
fn megatron_per_expert_launches(w: &Workload, ops: &[Op], i: usize) -> Option<u64> {
    if w.stack != Stack::Megatron || w.mode != Mode::Train {
        return None;
    }
    let expert = |o: Option<&Op>| match o {
        Some(Op { name: "expert_up" | "expert_down", kind: OpKind::Gemm { count, .. }, .. }) => Some(*count),
        _ => None,
    };
    let op = &ops[i];
    match op.name {
        "expert_up" | "expert_down" => expert(Some(op)),
        "quantize" if op.pass == Pass::Backward => expert(i.checked_sub(1).and_then(|j| ops.get(j))),
        "quantize" => expert(ops.get(i + 1)),
        _ => None,
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
pub fn hf_inference_host(cost: &CostModel, model: &Model, w: &Workload, ops: &[Op]) -> Option<(Seconds, Seconds)> {
    if !w.stack.hf() || w.mode == Mode::Train {
        return None;
    }
    let host = cost.profile?.host.as_ref()?;
    let has = |name: &str| ops.iter().any(|o| o.name == name);
    Some(if is_decoder_layer(ops) {
        (host.hf_decode_layer + host.op_dispatch * hf_inference_extra_ops(model, w), Seconds::ZERO)
    } else if has("lm_head") {
        // Gemma's embedding scale (the scale buffer's cast and the product) and final soft-cap
        // (three ops) once per step.
        let extra = if model.style.embedding_scale { 2.0 } else { 0.0 } + if model.style.final_logit_softcap.is_some() { 3.0 } else { 0.0 };
        (host.hf_decode_fixed + host.op_dispatch * extra, Seconds::ZERO)
    } else if has("embedding") && w.mode == Mode::Decode && super::sdpa_picks_cudnn(cost.system.gpu.arch) {
        // A probe taken in the run's own period is paid whole: a decode step is one plan build plus
        // the rest of the step (calibration/runs/hf/raw/host-regime-h100-2026-11-24/: per 10 s
        // window, the step's median equals the probe's plan build plus the flash-forced step
        // within 4%); the fitted share relates the calibration-time probe to the runs' periods.
        let share = if host.in_period { 1.0 } else { super::fitted::fitted().hf_sdpa_plan_share };
        (Seconds::ZERO, host.sdpa_cudnn_plan * share)
    } else {
        (Seconds::ZERO, Seconds::ZERO)
    })
}

/// The dtype a GEMM runs in: the workload's, except the LM head of a serving engine's quantized
/// checkpoint, which stays in bf16: NVIDIA ModelOpt's FP8 and NVFP4 recipes (the checkpoints
/// TensorRT-LLM's performance overview runs, and those vLLM and SGLang load) leave `*lm_head*`
/// unquantized (ModelOpt `mtq` default configs, `"*lm_head*": {"enable": False}`; the quantized
/// checkpoints' `hf_quant_config.json` lists `lm_head` under `exclude_modules`).
///
/// The one place a GEMM's dtype is decided: LoRA adapters are Megatron-Core linears outside
/// Transformer Engine's FP8 autocast (bf16); training's bf16 linears under FP8/FP4
/// ([`Workload::gemm_dtype`]: LM head, router); torchao's bf16 fallbacks ([`torch_gemm_dtype`]).
pub fn gemm_dtype(w: &Workload, op: &Op) -> crate::hardware::Dtype {
    if crate::workload::is_adapter(op.name) || (op.name == "lm_head" && w.stack.is_engine()) {
        crate::hardware::Dtype::Bf16
    } else {
        torch_gemm_dtype(w, op, w.gemm_dtype(op.name))
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
/// Time of `torch._scaled_mm` with a scale per row of A and per column of B (fp32 vectors) and
/// fast accumulation, the kernel of torchao's rowwise recipe for a linear's forward GEMM, over the
/// same GEMM with one scale per tensor: measured on the lent H100 (nvidia-h100-x1, PyTorch
/// 2.11.0+cu130, 2026-11-25 01:53 UTC, scripts/float8_bench.py;
/// calibration/runs/raw/float8-h100-2026-11-25/gemm.csv): the median over the 62 forward shapes
/// of Llama 3 8B and 70B at TP 1 and 8 and the 1-3B HF models at 8K and 16K tokens (0.83-1.19x).
/// The rowwise recipe's two gradient GEMMs run the tensorwise kernel (torchao 0.18.0
/// `addmm_float8_unwrapped`, without fast accumulation) followed by a rescaling pass priced apart
/// (`workload::ROWWISE_GRAD_SCALE_BYTES`). An earlier reading (2026-11-24,
/// calibration/runs/hf/profile/fp8-micro-h100.csv) took 1.034 over the 1B/3B forward and gradient
/// shapes with the rowwise kernel on all three. Not fitted.
pub const ROWWISE_SCALED_MM_RATIO: f64 = 0.965;

/// The dtype a GEMM runs in. torchao's `convert_to_float8_training` swaps `nn.Linear` modules
/// only, and the recipes skip the LM head (its `module_filter_fn`, as torchtitan and the HF run set
/// do) and any linear whose dimensions do not divide by 16 (`_scaled_mm`'s requirement): under the
/// torch stacks at fp8 those, the router and the grouped experts (no `nn.Linear`) stay bf16.
/// Megatron's recipes are left as they were.
pub fn torch_gemm_dtype(w: &Workload, op: &Op, dtype: crate::hardware::Dtype) -> crate::hardware::Dtype {
    use crate::hardware::Dtype;
    if !w.stack.torch() || !matches!(dtype, Dtype::Fp8 | Dtype::Fp4) {
        return dtype;
    }
    let OpKind::Gemm { n, k, .. } = op.kind else { return dtype };
    let skipped = matches!(op.name, "lm_head" | "router" | "expert_up" | "expert_down");
    let unaligned = n % 16 != 0 || k % 16 != 0;
    if skipped || unaligned {
        Dtype::Bf16
    } else {
        dtype
    }
}

pub fn hf_fp32_grouped_mm(w: &Workload, op: &Op) -> bool {
    w.stack.hf() && w.mode == Mode::Train && matches!(op.name, "expert_up" | "expert_down") && matches!(op.kind, OpKind::Gemm { .. })
}

/// Whether `op` is an expert GEMM of transformers' `grouped_mm` experts path (the `hf-*` stacks;
/// in training with fp32 master weights, [`hf_fp32_grouped_mm`]).
pub fn hf_grouped_expert(w: &Workload, op: &Op) -> bool {
    w.stack.hf() && w.mode != Mode::Decode && matches!(op.name, "expert_up" | "expert_down") && matches!(op.kind, OpKind::Gemm { .. })
}

/// An expert GEMM of transformers' `grouped_mm` path priced from the profile's `calibrate --moe`
/// table ([`CostModel::grouped_expert_gemm`]): in fp32 (training with fp32 master weights)
/// PyTorch's fallback, else the CUTLASS grouped kernel in bf16; the weight gradient (`wgrad`: the
/// second backward GEMM of an expert op, `Gemm { m: k_fwd, n: n_fwd, k: tokens }`) as the 2d x 2d
/// layout. `None` where the table has no such rows.
#[allow(clippy::too_many_arguments)]
fn hf_measured_grouped(cost: &CostModel, fp32: bool, wgrad: bool, m: u64, n: u64, k: u64, count: u64, dtype: crate::hardware::Dtype) -> Option<Seconds> {
    use crate::hardware::profile::{GroupedKernel, GroupedLayout};
    use crate::hardware::Dtype;
    let dt = if fp32 {
        Dtype::Fp32
    } else if matches!(dtype, Dtype::Bf16 | Dtype::Fp16) {
        Dtype::Bf16
    } else {
        return None;
    };
    if wgrad {
        cost.grouped_expert_gemm(GroupedKernel::GroupedMm, dt, GroupedLayout::K, count, k, m, n)
    } else {
        cost.grouped_expert_gemm(GroupedKernel::GroupedMm, dt, GroupedLayout::Mk, count, m, k, n)
    }
}

/// The share of a memory-bound op's priced bytes' time (its time less the per-launch floor) that
/// is its bytes at the stream rate: `HF_MEMORY_EFFICIENCY` for the `hf-*` stacks' training and
/// prefill memory ops (priced at their bytes over that share of the stream rate, `lower`), 1 for
/// every other op. The power model reads it (`Breakdown::memory_unstreamed`).
pub fn memory_stream_share(cost: &CostModel, w: &Workload, op: &Op) -> f64 {
    match op.kind {
        OpKind::Memory { .. } if w.stack.hf() && w.mode != Mode::Decode && !hf_measured_index(cost, w, op) && op.name != crate::workload::FP8_ROWWISE_SCALE => {
            super::fitted::fitted().hf_memory_efficiency
        }
        _ => 1.0,
    }
}

/// Whether an `hf-*` training or prefill memory op is priced from the profile's measured index
/// kernels (`CostModel::moe_index_time`, [`hf_index_kernels`]) rather than by the memory rule.
fn hf_measured_index(cost: &CostModel, w: &Workload, op: &Op) -> bool {
    w.stack.hf() && w.mode != Mode::Decode && hf_index_kernels(op.name).is_some() && cost.moe_kernels().is_some()
}

/// The probe's index kernels that transformers' `grouped_mm` path runs for an `hf-*` MoE memory
/// op, whose bytes the workload counts as the probe does: `permute` the gather of the routed rows;
/// `unpermute` the routing-weight multiply, the gather back to token order and the top-k sum;
/// `sentinel_mask`, the `masked_fill` of a [rows, width] tensor by the [rows, 1] sentinel mask,
/// at the routing-weight multiply's measured rate: both are ATen's non-vectorized
/// `elementwise_kernel<128, 4>` (`gpu_kernel_impl_nocast`, taken for a broadcast operand) over a
/// bf16 tensor of the same shape, read and written once. That kernel is bound by the SMs' issue
/// rate, not HBM: the probe's multiply moves 4.3 GB in 2,712 us on the H100 and 2,596 us on the
/// H200 (1.58 and 1.65 TB/s, against 3.35 and 4.8 TB/s of HBM; `moe.csv`, 64 experts, 65,536
/// tokens, top-8), and the H100 kernel profile of a Qwen3-MoE-s prefill measured the 18 fills at
/// 25.8 ms for 35.4 GB (1.37 TB/s; calibration/runs/hf/profile/moe-prefill-qwen3-h100.csv).
/// Others (`route_index`, `router_softmax_topk`, the sentinel clones) keep the memory rule.
pub fn hf_index_kernels(name: &str) -> Option<&'static [crate::hardware::profile::MoeIndexKernel]> {
    use crate::hardware::profile::MoeIndexKernel as K;
    match name {
        "permute" => Some(&[K::GatherRows]),
        "unpermute" => Some(&[K::WeightRows, K::UnpermuteGather, K::TopkSum]),
        "sentinel_mask" => Some(&[K::WeightRows]),
        _ => None,
    }
}

/// Host time the GPU waits for at a fallback grouped GEMM ([`hf_fp32_grouped_mm`]) of `count`
/// experts whose GEMMs take `gpu` on the GPU: the offsets' device-to-host sync, then the host
/// launching one `mm` per expert, of which the GPU hides what its own GEMMs take
/// (`cost::fitted::HF_GROUPED_MM_FALLBACK_US`).
fn hf_fallback_stall(count: u64, gpu: Seconds) -> Seconds {
    let [per_call, per_expert] = super::fitted::fitted().hf_grouped_mm_fallback_us;
    Seconds::us(per_call) + (Seconds::us(per_expert) * count as f64 - gpu).max(Seconds::ZERO)
}

/// What HybridEP (Megatron-Core's `flex` dispatcher with `moe_flex_dispatcher_backend =
/// hybridep`, as the Megatron-Bridge MoE recipes run it) sends over the network, as a share of
/// what the all-to-all priced for the same buffer sends. The dispatcher's buffer (`workload`) holds
/// one copy of a token per EP rank that holds one of its `top_k` experts, `ep (1 - (1 - 1/ep)^k)`
/// on average for experts spread evenly, and an all-to-all sends `(n - r)/n` of it to the `n - r`
/// ranks outside the sender's NVLink domain of `r` ranks. HybridEP instead sends a token once to
/// each other domain that holds one of its experts, `(D - 1)(1 - (1 - 1/D)^k)` copies for `D`
/// domains ([`node_hit_share`]: fewer under group-limited routing), and fans it out over NVLink there (the combine reduces inside the domain first, the
/// mirror image). 1 when the EP group stays in one domain.
pub fn hybrid_ep_network_share(shape: &crate::parallelism::GroupShape, moe: &crate::model::Moe) -> f64 {
    if !shape.crosses_domains() || shape.size <= shape.ranks_per_domain {
        return 1.0;
    }
    let (n, d, k) = (shape.size as f64, shape.domains as f64, moe.top_k as f64);
    let r = shape.ranks_per_domain as f64;
    let rank_copies = n * (1.0 - (1.0 - 1.0 / n).powf(k));
    let node_copies = (d - 1.0) * node_hit_share(shape.domains, moe);
    (node_copies / (rank_copies * (n - r) / n)).min(1.0)
}

/// Chance that a token has at least one of its experts on a given one of the EP group's `domains`
/// nodes (experts laid out in order over the ranks, balanced routing). Without expert groups the
/// `top_k` experts fall anywhere: 1 - (1 - 1/d)^k. With group-limited routing (DeepSeek-V3's
/// node-limited routing, `Moe::expert_groups`) whose groups each sit on one node (`expert_groups`
/// a multiple of `d`), the experts come from `group_top_k` groups drawn among the `expert_groups`:
/// a node of `g/d` groups is missed when all of them fall among the other groups,
/// 1 - C(g - g/d, kg) / C(g, kg) (each chosen group taken to receive at least one of the experts,
/// as its best expert ranks it among the top). Megatron keeps the group limit under
/// `moe_router_force_load_balancing`, which randomizes the scores before the group top-k
/// (megatron-core `router.py` / `moe_utils.py` `topk_routing_with_score_function`, from memory).
pub fn node_hit_share(domains: u32, moe: &crate::model::Moe) -> f64 {
    let d = domains.max(1);
    let (g, kg) = (moe.expert_groups, moe.group_top_k);
    if g > 1 && kg >= 1 && kg < g && g.is_multiple_of(d) && moe.n_experts.is_multiple_of(g) && moe.top_k >= kg {
        let per_node = g / d;
        // C(g - p, kg) / C(g, kg) = prod_{i < kg} (g - p - i) / (g - i)
        let missed: f64 = (0..kg).map(|i| (g.saturating_sub(per_node + i)) as f64 / (g - i) as f64).product();
        return 1.0 - missed;
    }
    1.0 - (1.0 - 1.0 / d as f64).powf(moe.top_k as f64)
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
    /// `fixed`: of `time`, the part the clock does not shorten (`OpCost::fixed`: a compute-bound
    /// kernel's overhead and memory floor near the ridge; all of a memory-bound kernel's). `time`
    /// already holds it at the lowering's speedup; the serving engine, which lowers at the
    /// sustained clock and applies the solved clock to its sums, keeps it unshortened
    /// (`serve::cost::Parts::compute_fixed`). The power model counts the whole kernel as compute.
    Kernel {
        name: &'static str,
        time: Seconds,
        bound: Bound,
        cpu: Seconds,
        launches: f64,
        host_sync: Seconds,
        fixed: Seconds,
    },
    Comm {
        name: &'static str,
        comm: CommStep,
    },
}

/// Whether TensorRT-LLM runs a prompt's attention (the context phase) with its FP8 FMHA kernels:
/// an FP8 KV cache (`Workload::kv_elem_bytes`, the FP8 and NVFP4 checkpoints) on a GPU with an FP8
/// tensor path from Hopper on. TensorRT-LLM enables FP8 context FMHA with an FP8 KV cache on
/// Hopper (`use_fp8_context_fmha`, the TensorRT backend's plugin option; the PyTorch backend's
/// TRTLLM attention likewise): from memory of v0.17 / v1.0, not re-read here. Decode attention
/// (XQA) already reads the FP8 cache as such; it is memory-bound and not changed.
pub fn trtllm_fp8_context_fmha(w: &Workload, gpu: &crate::hardware::Gpu) -> bool {
    w.stack == Stack::Trtllm && w.kv_elem_bytes() == 1.0 && gpu.peak.fp8.is_some() && matches!(gpu.arch, crate::hardware::Arch::Hopper)
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
    pub fn lower(&self, model: &crate::model::Model, pc: &ParallelConfig, options: &Options, w: &Workload, ops: &[Op], speedup: f64) -> Vec<Step> {
        let stack = w.stack;
        let mut out = Vec::with_capacity(ops.len());
        let hf_host = hf_inference_host(self, model, w, ops);
        let launches_of = |o: &Op| match o.kind {
            OpKind::Memory { kernels, .. } => kernels as f64,
            OpKind::Comm { .. } => 0.0,
            _ => 1.0,
        };
        let launches_in_list: f64 = ops.iter().map(launches_of).sum();
        // hf-eager training of a dense layer: the layer's counted host time per pass, spread over
        // the list's kernels of that pass (recomputed ops re-run the forward's launches).
        let train_layer_host = hf_eager_train_layer_host(self, model, w, ops).map(|host| {
            let fwd: f64 = ops.iter().filter(|o| o.pass != Pass::Backward).map(launches_of).sum();
            let bwd: f64 = ops.iter().filter(|o| o.pass == Pass::Backward).map(launches_of).sum();
            [host[0] / fwd.max(1.0), host[1] / bwd.max(1.0)]
        });
        // Megatron training under CUDA graphs: the whole iteration, or (partial) a layer's
        // attention block and its MoE router, replayed without host launches.
        let graphs = if stack == Stack::Megatron && w.mode == Mode::Train { options.cuda_graphs } else { TrainGraphs::None };
        // The MoE layer's host time up to the dispatcher's sync, launched before the drain.
        let before_drain = moe_host_before_drain(options, w, ops);
        // The attention block: in forward the ops before the layer's `post_attention_norm`; in
        // backward, which runs the layer in reverse, the ops after its gradient; recomputed ops
        // (before the backward ops in a list) before a recomputed `post_attention_norm`, or all of
        // them where it is not recomputed (core attention, MLA's up-projections, the norms).
        let attention_end = ops.iter().position(|o| o.name == "post_attention_norm" && o.pass != Pass::Backward);
        let attention_start_bwd = ops.iter().position(|o| o.name == "post_attention_norm" && o.pass == Pass::Backward);
        let pipelined = micro_pipelined_tp(pc, options, w);
        for (i, op) in ops.iter().enumerate() {
            let in_attention = match op.pass {
                Pass::Forward => attention_end.is_some_and(|end| i < end),
                Pass::Recompute => attention_end.is_none_or(|end| i < end),
                Pass::Backward => attention_start_bwd.is_some_and(|start| i > start),
            };
            let graphed = match graphs {
                TrainGraphs::None => false,
                TrainGraphs::Full => true,
                TrainGraphs::Partial => in_attention || matches!(op.name, "router" | "router_softmax_topk"),
            };
            let dispatch = match hf_host {
                Some((cpu, _)) => cpu / launches_in_list.max(1.0),
                None if graphed => Seconds::ZERO,
                None => match train_layer_host {
                    Some([fwd, _]) if op.pass != Pass::Backward => fwd,
                    Some([_, bwd]) => bwd,
                    None if stack == Stack::HfEager && w.mode == Mode::Train => hf_eager_train_dispatch(self, op.pass),
                    None => cpu_dispatch(stack, op.pass),
                },
            };
            let stall = match hf_host {
                Some((_, stall)) if i == 0 => stall,
                _ => Seconds::ZERO,
            };
            let host_sync = dtensor_dispatch(pc, w, op) + moe_dispatch_sync(options, w, op) + stall;
            // Megatron's grouped experts launch one GEMM (and quantize) per local expert, each at
            // its own host cost, where no CUDA graph replays them.
            let per_expert = if graphed || hf_host.is_some() { None } else { megatron_per_expert_launches(w, ops, i) };
            let kernel = |c: super::OpCost, launches: f64| {
                let time = c.at(speedup);
                let (cpu, launches) = match (per_expert, &op.kind) {
                    (Some(n), OpKind::Gemm { .. }) => (Seconds::us(super::fitted::fitted().megatron_expert_gemm_host_us) * n as f64, n as f64),
                    (Some(n), _) => (Seconds::us(MEGATRON_EXPERT_QUANTIZE_HOST_US) * n as f64, launches * n as f64),
                    (None, _) => (dispatch * launches, launches),
                };
                Step::Kernel { name: op.name, time, bound: c.bound, cpu, launches, host_sync, fixed: c.fixed }
            };
            let step = match &op.kind {
                OpKind::Memory { bytes, .. } if pipelined && op.name == crate::workload::SP_LAYOUT_COPY && fused_tp_reduce(ops, i + 1) => {
                    // `fused_matmul_reduce_scatter` ends with `torch.sum` over the tp partial
                    // outputs the peers wrote into this rank's buffer: it reads the whole
                    // pre-reduction tensor and writes this rank's shard. `bytes` is the layout
                    // copy's read and write of that tensor.
                    let tensor = *bytes / 2.0;
                    kernel(self.memory_time(tensor * (1.0 + 1.0 / pc.tp as f64), 1), 1.0)
                }
                OpKind::Memory { .. } if pipelined && op.name == crate::workload::SP_LAYOUT_COPY && !unfused_tp_reduce(ops, i + 1) => {
                    // After a fused all-gather: no re-layout, but `_pipelined_all_gather_and_consume`
                    // first copies the local shard into its symmetric-memory buffer ("mv", left
                    // before the first chunk's GEMM, not beside it: torch 2.11's comment in
                    // `distributed/_symmetric_memory/__init__.py`), a read and a write of the shard.
                    let shard = match i.checked_sub(1).map(|j| &ops[j].kind) {
                        Some(OpKind::Comm { op: CollectiveOp::AllGather, group: Group::Tp, bytes }) => *bytes / pc.tp.max(1) as f64,
                        _ => 0.0,
                    };
                    kernel(self.memory_time(2.0 * shard, 1), 1.0)
                }
                OpKind::Gemm { m, n, k, count } if hf_grouped_expert(w, op) && self.moe_kernels().is_some() => {
                    let fp32 = hf_fp32_grouped_mm(w, op);
                    let wgrad = op.pass == Pass::Backward && i > 0 && ops[i - 1].name == op.name && matches!(ops[i - 1].kind, OpKind::Gemm { .. });
                    match hf_measured_grouped(self, fp32, wgrad, *m, *n, *k, *count, gemm_dtype(w, op)) {
                        Some(measured) if fp32 => {
                            // PyTorch's fallback, measured as wall clock per call: the host
                            // launching one `mm` per expert, which the GPU waits for beyond its own
                            // (TF32) GEMMs' time; the GPU runs the GEMMs (the GEMM model, for the
                            // power model's activity) and idles the rest, plus what a step pays
                            // per call beyond the probe's idle-GPU measurement (fitted).
                            let c = self.gemm_time(*m, *n, *k, *count, crate::hardware::Dtype::Tf32);
                            let stall = (measured - c.time).max(Seconds::ZERO) + Seconds::us(super::fitted::fitted().hf_grouped_mm_residual_us);
                            let time = c.at(speedup);
                            Step::Kernel {
                                name: op.name,
                                time,
                                bound: c.bound,
                                cpu: dispatch,
                                launches: *count as f64,
                                host_sync: host_sync + stall,
                                fixed: c.fixed,
                            }
                        }
                        Some(time) => {
                            let bound = self.gemm_time(*m, *n, *k, *count, crate::hardware::Dtype::Bf16).bound;
                            // Measured wall time: counted by its bound as before (the clock is the probe's).
                            let fixed = if bound == Bound::Compute { Seconds::ZERO } else { time };
                            Step::Kernel { name: op.name, time, bound, cpu: dispatch, launches: 1.0, host_sync, fixed }
                        }
                        None if fp32 => {
                            let c = self.gemm_time(*m, *n, *k, *count, crate::hardware::Dtype::Tf32);
                            let time = c.at(speedup);
                            let host_sync = host_sync + hf_fallback_stall(*count, time);
                            Step::Kernel {
                                name: op.name,
                                time,
                                bound: c.bound,
                                cpu: dispatch * *count as f64,
                                launches: *count as f64,
                                host_sync,
                                fixed: c.fixed,
                            }
                        }
                        None => kernel(self.gemm_time(*m, *n, *k, *count, gemm_dtype(w, op)), 1.0),
                    }
                }
                OpKind::Memory { bytes, .. } if hf_measured_index(self, w, op) => {
                    let kernels = hf_index_kernels(op.name).unwrap_or(&[]);
                    match self.moe_index_time(kernels, *bytes) {
                        Some(time) => Step::Kernel {
                            name: op.name,
                            time,
                            bound: Bound::Memory,
                            cpu: dispatch * kernels.len() as f64,
                            launches: kernels.len() as f64,
                            host_sync,
                            fixed: time,
                        },
                        None => kernel(self.memory_time(*bytes / super::fitted::fitted().hf_memory_efficiency, kernels.len() as u32), kernels.len() as f64),
                    }
                }
                OpKind::Gemm { m, n, k, count } if hf_fp32_grouped_mm(w, op) => {
                    let c = self.gemm_time(*m, *n, *k, *count, crate::hardware::Dtype::Tf32);
                    let time = c.at(speedup);
                    let host_sync = host_sync + hf_fallback_stall(*count, time);
                    Step::Kernel { name: op.name, time, bound: c.bound, cpu: dispatch * *count as f64, launches: *count as f64, host_sync, fixed: c.fixed }
                }
                OpKind::Gemm { m, n, k, count } => {
                    let dt = gemm_dtype(w, op);
                    let mut c = if matches!(op.name, "expert_up" | "expert_down") {
                        self.grouped_gemm_time(*m, *n, *k, *count, dt)
                    } else {
                        self.gemm_time(*m, *n, *k, *count, dt)
                    };
                    if w.fp8_recipe == crate::workload::Fp8Recipe::Rowwise && dt == crate::hardware::Dtype::Fp8 && op.pass == crate::workload::Pass::Forward {
                        c.time = c.time * ROWWISE_SCALED_MM_RATIO;
                    }
                    kernel(c, 1.0)
                }
                OpKind::ScanMatmul { m, n, k, count } => kernel(self.gemm_time(*m, *n, *k, *count, crate::hardware::Dtype::Bf16), 1.0),
                OpKind::Attention { q_len, backward, .. } => {
                    let fp8 = !*backward && *q_len > 1 && trtllm_fp8_context_fmha(w, &self.system.gpu);
                    kernel(self.attention_time_at(op, if fp8 { super::FP8_ATTENTION_SPEEDUP } else { 1.0 }), 1.0)
                }
                OpKind::Memory { bytes, kernels } if stack.hf() && w.mode != Mode::Decode && op.name != crate::workload::FP8_ROWWISE_SCALE => {
                    kernel(self.memory_time(*bytes / super::fitted::fitted().hf_memory_efficiency, *kernels), *kernels as f64)
                }
                OpKind::Memory { bytes, kernels } if stack == Stack::Megatron && w.mode == Mode::Train && is_moe_permutation(op.name) => {
                    kernel(self.memory_time(*bytes / MOE_PERMUTE_COPY_SHARE, *kernels), *kernels as f64)
                }
                OpKind::Memory { bytes, kernels } if stack == Stack::Megatron && w.mode == Mode::Train => {
                    kernel(self.memory_time(*bytes / super::fitted::fitted().megatron_memory_efficiency, *kernels), *kernels as f64)
                }
                OpKind::Memory { bytes, kernels } => kernel(self.memory_time(*bytes, *kernels), *kernels as f64),
                OpKind::Comm { op: c, group, bytes } => {
                    let next_is_kernel = ops.get(i + 1).is_some_and(|n| !matches!(n.kind, OpKind::Comm { .. }));
                    let overlap = match group {
                        Group::Tp if pipelined && unfused_tp_reduce(ops, i) => Overlap::Blocking,
                        // Beside the GEMM producing it (`micro_pipeline_order`), wherever it sits in
                        // the list (the layer's last op included).
                        Group::Tp if pipelined && fused_tp_reduce(ops, i) => Overlap::WithNextKernel { blocking: TP_OVERLAP_BLOCKING },
                        Group::Tp if options.tp_comm_overlap && next_is_kernel => Overlap::WithNextKernel { blocking: TP_OVERLAP_BLOCKING },
                        // Ring attention (`CpComm::P2p`): in forward every key/value block
                        // travels beside the attention block before it (step 0 runs on the rank's
                        // own keys and values); in backward the last hop of the key/value
                        // gradients comes after the last block: one of the `cp` gradient blocks,
                        // a half of the bytes, is exposed. TE's all-gather and a2a are blocking.
                        Group::Cp if next_is_kernel && op.name == "cp_kv_p2p" => Overlap::WithNextKernel { blocking: 0.0 },
                        Group::Cp if next_is_kernel && op.name == "cp_kv_dkv_p2p" => Overlap::WithNextKernel { blocking: 0.5 / pc.cp.max(1) as f64 },
                        // PyTorch's CP (`workload::TORCH_CP_KV_GATHER`): the gather runs beside the
                        // first (diagonal) SDPA call, waited for at the second; the fp32 dk/dv hops
                        // each beside the next rotation's backward, the last (1 of `cp`) exposed.
                        Group::Cp if next_is_kernel && op.name == crate::workload::TORCH_CP_KV_GATHER => Overlap::WithNextKernel { blocking: 0.0 },
                        Group::Cp if next_is_kernel && op.name == crate::workload::TORCH_CP_DKV_ROTATE => {
                            Overlap::WithNextKernel { blocking: 1.0 / pc.cp.max(1) as f64 }
                        }
                        _ => Overlap::Blocking,
                    };
                    let bytes = match (op.name, w.moe_dispatcher, &model.moe) {
                        ("ep_dispatch" | "ep_combine", crate::workload::MoeDispatcher::Flex, Some(moe)) => {
                            *bytes * hybrid_ep_network_share(&group_shape(pc, *group, self.system), moe)
                        }
                        _ => *bytes,
                    };
                    let mut comm = self.comm_step(pc, *c, *group, bytes, overlap);
                    if matches!(op.name, "ep_dispatch" | "ep_combine") && w.moe_dispatcher == crate::workload::MoeDispatcher::Flex {
                        // DeepEP / HybridEP dispatch (and combine) in one kernel whose channels
                        // write to every peer at once: one hop's latency, not the n - 1 steps
                        // of NCCL's ring schedule (`FLEX_DISPATCH_HOPS`).
                        comm.steps = comm.steps.min(FLEX_DISPATCH_HOPS);
                    }
                    Step::Comm { name: op.name, comm }
                }
            };
            let step = match step {
                Step::Kernel { name, time, bound, cpu, launches, host_sync, fixed } if before_drain.contains(&i) => {
                    Step::Kernel { name, time, bound, cpu: cpu + Seconds::us(super::fitted::fitted().moe_layer_host_us), launches, host_sync, fixed }
                }
                step => step,
            };
            out.push(step);
        }
        if stack == Stack::Megatron && options.tp_comm_overlap && pc.tp > 1 && pc.sp {
            userbuffers(&mut out, ops, self.system.gpu.sm_count.value as f64);
        }
        if pipelined {
            micro_pipeline_order(&mut out, ops);
        }
        // Megatron overlaps only where it can (its asserts, which `config` turns into errors for a
        // scenario; the planner's candidates that break them are priced without the overlap).
        let overlappable = pc.ep > 1 && (pc.pp == 1 || pc.vp > 1) && w.recompute != crate::workload::Recompute::Full;
        if stack == Stack::Megatron && w.mode == Mode::Train && options.moe_ep_overlap && overlappable {
            let per = (w.micro_batch * pc.dp as u64).max(1);
            let unpaired = crate::parallelism::ep_overlap_unpaired_share(pc, (w.global_batch / per).max(1));
            let sm_share = match w.moe_dispatcher {
                crate::workload::MoeDispatcher::Flex => (HYBRID_EP_SMS / self.system.gpu.sm_count.value as f64).min(1.0),
                _ => super::fitted::fitted().megatron_overlap_cost,
            };
            ep_a2a_overlap(&mut out, unpaired, sm_share);
        }
        if stack == Stack::Megatron && options.moe_shared_expert_overlap && pc.ep > 1 {
            shared_expert_overlap(&mut out, super::fitted::fitted().megatron_overlap_cost);
        }
        out
    }
}

/// Megatron-Core's shared-expert overlap (`Options::moe_shared_expert_overlap`) on one pass's
/// lowered steps: the shared experts' GEMMs run on a side stream while the dispatch and combine
/// all-to-alls run (megatron-core 0.16.1 `transformer/moe/shared_experts.py`: "The shared experts
/// are scheduled into this stream to be overlapped with the dispatcher"; fc1 and the activation
/// beside the dispatch, fc2 beside the combine, and in backward their gradients, ordered by
/// `set_tensor_grad_fn_sequence_sr`). Of the all-to-alls' time, what the shared GEMMs cover is
/// hidden but for `sm_share` of it (the GEMMs run beside NCCL's kernels: Megatron's fitted overlap
/// cost, `cost::fitted::MEGATRON_OVERLAP_COST`); the rest stays exposed. The shared GEMMs keep
/// their own time.
pub fn shared_expert_overlap(steps: &mut [Step], sm_share: f64) {
    let comm = ep_a2a_time(steps);
    let shared: Seconds = steps
        .iter()
        .filter_map(|s| match s {
            Step::Kernel { name: "shared_up" | "shared_down", time, .. } => Some(*time),
            _ => None,
        })
        .sum();
    if comm <= Seconds::ZERO || shared <= Seconds::ZERO {
        return;
    }
    let hidden = shared.min(comm);
    scale_ep_a2a(steps, ((comm - hidden) + hidden * sm_share.clamp(0.0, 1.0)) / comm);
}

fn is_ep_a2a(name: &str) -> bool {
    matches!(name, "ep_dispatch" | "ep_combine")
}

/// The EP dispatch and combine all-to-alls' time in one pass's steps.
fn ep_a2a_time(steps: &[Step]) -> Seconds {
    steps
        .iter()
        .filter_map(|s| match s {
            Step::Comm { name, comm } if is_ep_a2a(name) => Some(comm.time()),
            _ => None,
        })
        .sum()
}

/// Keep `keep` of each EP all-to-all: its latency and bytes scaled, so both engines see it.
fn scale_ep_a2a(steps: &mut [Step], keep: f64) {
    for s in steps.iter_mut() {
        if let Step::Comm { name, comm } = s {
            if is_ep_a2a(name) {
                comm.latency = comm.latency * keep;
                comm.step_latency = comm.step_latency * keep;
                comm.wire_bytes *= keep;
            }
        }
    }
}

/// Latency steps of a `flex` dispatcher's dispatch or combine: DeepEP's and HybridEP's kernels
/// send a token to all its destination ranks (or nodes) from parallel channels in one pass
/// (DeepEP README, github deepseek-ai/DeepEP: the normal kernels forward RDMA to NVLink
/// asynchronously inside one kernel; from memory, not re-read here), so the step pays one hop of
/// its link class, not the `n - 1` sequential peers NCCL's ring-shaped plan charges.
pub const FLEX_DISPATCH_HOPS: u32 = 1;

/// SMs HybridEP's dispatch and combine kernels occupy (`moe_hybridep_num_sms = 32` in
/// Megatron-Bridge 0.6.2's full-iteration MoE perf recipes, `perf_recipes/qwen/common.py`
/// `_enable_hybridep_full_iteration_mxfp8` and `perf_recipes/deepseek/common.py`
/// `_enable_deepseek_full_iteration_mxfp8`): the compute they overlap runs on the rest.
pub const HYBRID_EP_SMS: f64 = 32.0;

/// Megatron-Core's EP communication overlap (`Options::moe_ep_overlap`) on one pass's lowered
/// steps: in combined 1F1B a micro-batch's forward and another's backward run layer by layer
/// together, the dispatch and combine all-to-alls of each on a communication stream beside the
/// other's attention and expert compute (megatron-core 0.16.1 `combined_1f1b.py`: "EP A2A in
/// forward step is hidden by the attention/mlp computation in the backward step, and vice versa";
/// `delay_wgrad_compute`, which the recipes set with it, moves weight-gradient GEMMs under the
/// backward's combine). Each EP all-to-all keeps, of its time:
/// - all of it in the passes that run alone (`unpaired`, `parallelism::ep_overlap_unpaired_share`);
/// - in a pair, what the partner's compute cannot cover (the pass's all-to-alls beyond its own
///   kernels' time, this pass standing in for its partner: a forward's partner has about twice its
///   compute, a backward's half, and the pair's sums match), plus `sm_share` of the rest: the
///   compute beside it runs on the SMs the communication leaves (HybridEP:
///   [`HYBRID_EP_SMS`] of the GPU's; NCCL's all-to-all: Megatron's fitted overlap cost,
///   `cost::fitted::MEGATRON_OVERLAP_COST`).
///
/// Priced by scaling the all-to-all's latency and bytes, so both engines see the same exposed time.
pub fn ep_a2a_overlap(steps: &mut [Step], unpaired: f64, sm_share: f64) {
    let comm = ep_a2a_time(steps);
    if comm <= Seconds::ZERO {
        return;
    }
    let gpu: Seconds = steps
        .iter()
        .filter_map(|s| match s {
            Step::Kernel { time, .. } => Some(*time),
            _ => None,
        })
        .sum();
    let uncovered = ((comm - gpu).max(Seconds::ZERO) / comm).clamp(0.0, 1.0);
    let paired = uncovered + (1.0 - uncovered) * sm_share.clamp(0.0, 1.0);
    scale_ep_a2a(steps, unpaired.clamp(0.0, 1.0) + (1.0 - unpaired.clamp(0.0, 1.0)) * paired);
}

/// Transformer Engine's userbuffers TP overlap as the Megatron-Bridge / NeMo perf recipes configure
/// it (`tp_comm_overlap_cfg`, e.g. `userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192` in
/// nemo/collections/llm/recipes/tp_overlap_configs/userbuffers.py, from memory, not re-read here):
/// - the all-gather before a column-parallel GEMM (qkv, fc1 forward; proj, fc2 dgrad) is a ring
///   exchange over copy engines beside that GEMM; under FP8/FP4 TE quantizes the local shard
///   first and gathers the quantized tensor, so the gather pairs with the GEMM, not the cast;
/// - the reduce-scatter after a row-parallel GEMM (proj, fc2 forward) is pipelined with it in
///   [`UB_PIPELINE_SPLITS`] chunks, the last chunk's reduce-scatter exposed, the GEMM run on the SMs
///   the communication leaves ([`UB_PIPELINE_SMS`], `set_sm_margin=True`);
/// - the reduce-scatter of a column-parallel layer's data gradient runs in bulk beside its weight
///   gradient GEMM (`BulkOverlapCfg`).
fn userbuffers(steps: &mut Vec<Step>, ops: &[Op], sms: f64) {
    use crate::hardware::profile::CollectiveOp;
    debug_assert_eq!(steps.len(), ops.len());
    let mut order: Vec<usize> = (0..ops.len()).collect();
    let is_gemm = |i: usize| matches!(ops[i].kind, OpKind::Gemm { .. });
    let is_memory = |i: usize| matches!(ops[i].kind, OpKind::Memory { .. });
    let mut i = 0;
    while i < order.len() {
        let idx = order[i];
        let (c, pass) = match &ops[idx].kind {
            OpKind::Comm { op, group: Group::Tp, .. } => (*op, ops[idx].pass),
            _ => {
                i += 1;
                continue;
            }
        };
        match c {
            CollectiveOp::AllGather => {
                // Move past the casts to the GEMM it feeds.
                let mut j = i + 1;
                while j < order.len() && is_memory(order[j]) && ops[order[j]].name == "quantize" {
                    j += 1;
                }
                if j < order.len() && is_gemm(order[j]) && j > i + 1 {
                    let comm = order.remove(i);
                    order.insert(j - 1, comm);
                }
                set_overlap(&mut steps[idx], TP_OVERLAP_BLOCKING);
            }
            CollectiveOp::ReduceScatter => {
                // Back over the casts to the GEMM that produced it.
                let mut j = i;
                while j > 0 && is_memory(order[j - 1]) && ops[order[j - 1]].name == "quantize" {
                    j -= 1;
                }
                if j > 0 && is_gemm(order[j - 1]) {
                    let gemm = order[j - 1];
                    let comm = order.remove(i);
                    order.insert(j - 1, comm);
                    if pass == Pass::Backward {
                        set_overlap(&mut steps[idx], 0.0);
                    } else {
                        set_overlap(&mut steps[idx], 1.0 / UB_PIPELINE_SPLITS);
                        let taken = if ops[gemm].name == "out_proj" { UB_PIPELINE_SMS[0] } else { UB_PIPELINE_SMS[1] };
                        if let Step::Kernel { time, fixed, .. } = &mut steps[gemm] {
                            let slower = sms / (sms - taken).max(1.0);
                            *time = *time * slower;
                            *fixed = *fixed * slower;
                        }
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    let mut taken: Vec<Option<Step>> = std::mem::take(steps).into_iter().map(Some).collect();
    steps.extend(order.into_iter().map(|k| taken[k].take().expect("each step once")));
}

fn set_overlap(step: &mut Step, blocking: f64) {
    if let Step::Comm { comm, .. } = step {
        comm.overlap = Overlap::WithNextKernel { blocking };
    }
}

/// Chunks of a pipelined GEMM + reduce-scatter (`PipelineOverlapCfg(num_splits=4)` for proj and
/// fc2 forward in the userbuffers configs; see `userbuffers`).
pub const UB_PIPELINE_SPLITS: f64 = 4.0;
/// SMs the pipelined reduce-scatter takes from its GEMM, `[proj, fc2]` (`num_sm=24` and `16` with
/// `set_sm_margin=True` in the same configs; see `userbuffers`).
pub const UB_PIPELINE_SMS: [f64; 2] = [24.0, 16.0];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parallelism::GroupShape;

    fn shape(size: u32, per_domain: u32) -> GroupShape {
        GroupShape { size, stride: 1, ranks_per_domain: per_domain.min(size), domains: size.div_ceil(per_domain) }
    }

    fn moe(top_k: u32, groups: (u32, u32)) -> crate::model::Moe {
        crate::model::Moe {
            n_experts: 256,
            top_k,
            expert_ffn_hidden: 2048,
            n_shared_experts: 0,
            shared_expert_ffn_hidden: 0,
            first_dense_layers: 0,
            layer_step: 1,
            expert_groups: groups.0,
            group_top_k: groups.1,
            router: crate::model::Router::SOFTMAX_TOPK,
        }
    }

    fn a2a(name: &'static str, bytes: f64) -> Step {
        let comm = CommStep {
            group: Group::Ep,
            op: CollectiveOp::AllToAll,
            algo: nccl::Algo::Ring,
            proto: nccl::Proto::Simple,
            latency: Seconds::us(10.0),
            steps: 7,
            step_latency: Seconds::us(1.0),
            wire_bytes: bytes,
            busbw: BytesPerSec::gb_per_s(100.0),
            crosses_network: false,
            overlap: Overlap::Blocking,
        };
        Step::Comm { name, comm }
    }

    fn kernel(ms: f64) -> Step {
        Step::Kernel {
            name: "expert_up",
            time: Seconds::ms(ms),
            bound: Bound::Compute,
            cpu: Seconds::ZERO,
            launches: 1.0,
            host_sync: Seconds::ZERO,
            fixed: Seconds::ZERO,
        }
    }

    fn comm_time(steps: &[Step]) -> Seconds {
        steps.iter().filter_map(|s| if let Step::Comm { comm, .. } = s { Some(comm.time()) } else { None }).sum()
    }

    #[test]
    fn ep_overlap_keeps_the_unpaired_share_and_the_sm_share_of_the_rest() {
        // 1 ms of all-to-all beside 10 ms of kernels: covered; a quarter of the passes unpaired,
        // the communication taking a fifth of the SMs in the others: 0.25 + 0.75 x 0.2 = 0.4 kept.
        let mut steps = vec![a2a("ep_dispatch", 5e7), kernel(10.0), a2a("ep_combine", 5e7)];
        let before = comm_time(&steps);
        ep_a2a_overlap(&mut steps, 0.25, 0.2);
        assert!((comm_time(&steps) / before - 0.4).abs() < 1e-9);
        // Not covered: the all-to-alls outlast the pass's kernels; what sticks out stays whole.
        let mut steps = vec![a2a("ep_dispatch", 5e8), kernel(1.0), a2a("ep_combine", 5e8)];
        let before = comm_time(&steps);
        ep_a2a_overlap(&mut steps, 0.0, 0.2);
        let uncovered = (before - Seconds::ms(1.0)) / before;
        assert!((comm_time(&steps) / before - (uncovered + (1.0 - uncovered) * 0.2)).abs() < 1e-9);
        // Other collectives (the expert-TP reduce-scatter, TP, DP) are left alone.
        let mut steps = vec![a2a("etp_reduce", 5e7), kernel(10.0)];
        let before = comm_time(&steps);
        ep_a2a_overlap(&mut steps, 0.0, 0.2);
        assert_eq!(comm_time(&steps), before);
    }

    #[test]
    fn shared_experts_hide_the_all_to_alls_they_outlast() {
        let shared = |ms: f64| Step::Kernel {
            name: "shared_up",
            time: Seconds::ms(ms),
            bound: Bound::Compute,
            cpu: Seconds::ZERO,
            launches: 1.0,
            host_sync: Seconds::ZERO,
            fixed: Seconds::ZERO,
        };
        // 1 ms of all-to-all (1e8 bytes at 100 GB/s plus 17 us of latency) beside 5 ms of shared GEMMs:
        // hidden but for the SM share.
        let mut steps = vec![a2a("ep_dispatch", 5e7), shared(5.0), kernel(10.0), a2a("ep_combine", 5e7)];
        let before = comm_time(&steps);
        shared_expert_overlap(&mut steps, 0.3);
        assert!((comm_time(&steps) / before - 0.3).abs() < 1e-9);
        // Beside 0.25 ms of shared GEMMs only that much hides.
        let mut steps = vec![a2a("ep_dispatch", 5e7), shared(0.25), kernel(10.0), a2a("ep_combine", 5e7)];
        let before = comm_time(&steps);
        shared_expert_overlap(&mut steps, 0.0);
        assert!((comm_time(&steps) - (before - Seconds::ms(0.25))).value().abs() < 1e-12);
        // No shared experts: nothing changes.
        let mut steps = vec![a2a("ep_dispatch", 5e7), kernel(10.0)];
        shared_expert_overlap(&mut steps, 0.0);
        assert_eq!(comm_time(&steps), comm_time(&[a2a("ep_dispatch", 5e7)]));
    }

    #[test]
    fn hybrid_ep_sends_a_token_once_per_remote_domain() {
        // Inside one NVLink domain nothing crosses the network.
        assert_eq!(hybrid_ep_network_share(&shape(8, 8), &moe(8, (0, 0))), 1.0);
        assert_eq!(hybrid_ep_network_share(&shape(64, 72), &moe(8, (0, 0))), 1.0);
        // EP 16 over two 8-GPU nodes, top-8: a token almost surely needs the other node once,
        // where the all-to-all sends it to each of the ~3.2 distinct remote ranks it needs.
        let two = hybrid_ep_network_share(&shape(16, 8), &moe(8, (0, 0)));
        let rank_copies = 16.0 * (1.0 - (15.0f64 / 16.0).powi(8));
        assert!((two - (1.0 - 0.5f64.powi(8)) / (rank_copies * 0.5)).abs() < 1e-12, "{two}");
        assert!((0.30..0.32).contains(&two), "{two}");
        // Top-1: one copy either way, the same remote share, so nothing saved.
        assert!((hybrid_ep_network_share(&shape(16, 8), &moe(1, (0, 0))) - 1.0).abs() < 1e-12);
        // More domains, less to deduplicate per domain.
        assert!(hybrid_ep_network_share(&shape(32, 8), &moe(8, (0, 0))) > two);
    }

    #[test]
    fn node_limited_routing_reaches_fewer_nodes() {
        // DeepSeek-V3 on EP 32 over four 8-GPU nodes: 8 groups, 2 per node, a token's experts
        // from 4 of them. A node is missed when all 4 groups fall among the other 6: C(6,4)/C(8,4).
        let limited = moe(8, (8, 4));
        let hit = node_hit_share(4, &limited);
        assert!((hit - (1.0 - 15.0 / 70.0)).abs() < 1e-12, "{hit}");
        assert!(hit < node_hit_share(4, &moe(8, (0, 0))));
        let (free, grouped) = (hybrid_ep_network_share(&shape(32, 8), &moe(8, (0, 0))), hybrid_ep_network_share(&shape(32, 8), &limited));
        assert!((grouped / free - hit / node_hit_share(4, &moe(8, (0, 0)))).abs() < 1e-12);
        // Groups that do not sit on one node each (8 groups over 16 nodes): no limit assumed.
        assert_eq!(node_hit_share(16, &limited), node_hit_share(16, &moe(8, (0, 0))));
        // Inside one domain nothing changes.
        assert_eq!(hybrid_ep_network_share(&shape(64, 72), &limited), 1.0);
    }
}
