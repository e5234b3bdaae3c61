//! Model x workload -> op list for one rank: every GEMM with its (m, n, k), flash attention, the
//! memory-bound ops, and the collectives the parallel layout inserts. Both engines read this list.
//!
//! Shapes are per rank after sharding: `T` tokens of one micro-batch on this rank (`b*s/cp`),
//! TP splits heads and FFN columns, SP splits the tokens of norms and residuals, EP splits experts.

use crate::hardware::profile::CollectiveOp;
use crate::hardware::Dtype;
use crate::model::{Block, FfnKind, LayerKind, Model, NormKind, NormPlacement, Position, RmsStyle};
use crate::parallelism::{Group, ParallelConfig};

pub mod lora;
pub use lora::{Lora, LoraTarget};

/// A LoRA adapter's op (its GEMMs run in bf16, outside the FP8 recipes: `lora`).
pub fn is_adapter(name: &str) -> bool {
    name.starts_with("lora_")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    Train,
    /// One forward pass over `batch` x `seq` tokens.
    Prefill,
    /// One generated token for each of `batch` sequences holding `kv_len` cached tokens.
    Decode,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Train => "train",
            Mode::Prefill => "prefill",
            Mode::Decode => "decode",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Recompute {
    None,
    /// Recompute the attention core only (Korthikanti et al. 2022).
    Selective,
    /// Keep each layer's input; recompute the whole layer forward during backward.
    Full,
    /// torchtitan's per-op selective activation checkpointing (`activation_checkpoint.mode =
    /// "selective"`, `selective_ac_option = "op"`; the default of its Llama 3 8B config): each
    /// decoder block runs under `torch.utils.checkpoint` with a policy that saves the outputs of
    /// the ops in `_op_sac_save_list` (`aten.mm`, SDPA's flash and memory-efficient attention,
    /// `_c10d_functional.reduce_scatter_tensor`, `aten.max`) except every second `aten.mm` of the
    /// block (counted per block call), and recomputes every other op in the backward
    /// (torchtitan 0.2.0 `torchtitan/distributed/activation_checkpoint.py` `_apply_op_sac`,
    /// `torchtitan/models/llama3/infra/parallelize.py` `_op_sac_save_list`; the same in 0.1.0's
    /// `models/llama3/infra/parallelize.py` `_save_list`). For a Llama block the mm's are wq,
    /// wk, wv, wo, w1, w3, w2: q, v, the gate (w1) and the down projection (w2) are saved, k, the
    /// output projection and the up projection (w3) recomputed; torchao's float8 linears alike
    /// ([`selective_op_saved`]). Dense transformer layers only (`config` refuses MoE, MLA and
    /// hybrid models).
    /// Memory: `memory::kind_activation_bytes`; time: [`recompute_of`].
    SelectiveOp,
    /// torchtitan's layer selective checkpointing (`selective_ac_option = "<n>"`, n >= 1; its
    /// default "2"): a rank's blocks are counted as `apply_ac` wraps them, and every n-th one
    /// (count 1-based divisible by n) is checkpointed whole, the others keep everything
    /// (torchtitan 0.2.0 `torchtitan/distributed/activation_checkpoint.py` `_apply_layer_sac`, a
    /// process-wide counter). Which blocks: [`Recompute::checkpoints`]; the engines re-run a
    /// checkpointed block's forward ([`rerun_of`]), `memory` keeps only its input.
    Layers(u32),
}

impl Recompute {
    pub const NAMES: &'static str = "none, selective, full, selective-op, layer:N";
    pub fn name(self) -> String {
        match self {
            Recompute::None => "none".into(),
            Recompute::Selective => "selective".into(),
            Recompute::Full => "full".into(),
            Recompute::SelectiveOp => "selective-op".into(),
            Recompute::Layers(n) => format!("layer:{n}"),
        }
    }
    pub fn parse(s: &str) -> Option<Recompute> {
        match s {
            "none" => Some(Recompute::None),
            "selective" => Some(Recompute::Selective),
            "full" => Some(Recompute::Full),
            "selective-op" => Some(Recompute::SelectiveOp),
            _ => s.strip_prefix("layer:").and_then(|n| n.parse::<u32>().ok()).filter(|n| *n >= 1).map(Recompute::Layers),
        }
    }
    /// Whether the rank's `i`-th decoder block (0-based, in the order its model chunks hold them)
    /// is checkpointed whole: every block under full recompute, every n-th under `layer:n`.
    pub fn checkpoints(self, i: u64) -> bool {
        match self {
            Recompute::Full => true,
            Recompute::Layers(n) => (i + 1).is_multiple_of(n as u64),
            _ => false,
        }
    }
    /// Layers of each kind on pipeline rank `rank` that are checkpointed whole ([`Self::checkpoints`]
    /// of their rank-local index).
    pub fn checkpointed_kind_counts(self, model: &Model, pc: &ParallelConfig, rank: u32) -> crate::model::KindCounts {
        crate::parallelism::picked_kind_counts(&model.layer_kinds(), pc, rank, |i| self.checkpoints(i))
    }
}

/// A submodule Megatron-Core recomputes under `recompute_granularity = selective`
/// (`TransformerConfig.recompute_modules`, megatron/core/transformer/transformer_config.py,
/// Megatron-Core 0.16.1; the default, `None`, means `[core_attn]`). `moe_act`, `layernorm` and
/// `mla_up_proj` use output-discarding checkpointing (their outputs are freed once consumed and
/// rebuilt before backward), the others ordinary checkpointing (only their inputs are kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecomputeModule {
    /// The attention core (TE's fused attention and, under CP, its exchanges).
    CoreAttn,
    /// The dense MLP of a non-MoE layer (with TE's fused pre-MLP norm); ignored on MoE layers
    /// (`TransformerLayer.__init__`: `if not self.is_moe_layer`).
    Mlp,
    /// The whole MoE layer (router, dispatch, experts, combine).
    Moe,
    /// The routed experts' activation function (needs grouped GEMM).
    MoeAct,
    /// The shared experts of an MoE layer.
    SharedExperts,
    /// The input and pre-MLP norms (their outputs).
    Layernorm,
    /// MLA's up projections and RoPE (their outputs q, k, v).
    MlaUpProj,
}

impl RecomputeModule {
    pub const ALL: [RecomputeModule; 7] = [
        RecomputeModule::CoreAttn,
        RecomputeModule::Mlp,
        RecomputeModule::Moe,
        RecomputeModule::MoeAct,
        RecomputeModule::SharedExperts,
        RecomputeModule::Layernorm,
        RecomputeModule::MlaUpProj,
    ];
    /// Megatron-Core's name.
    pub fn name(self) -> &'static str {
        match self {
            RecomputeModule::CoreAttn => "core_attn",
            RecomputeModule::Mlp => "mlp",
            RecomputeModule::Moe => "moe",
            RecomputeModule::MoeAct => "moe_act",
            RecomputeModule::SharedExperts => "shared_experts",
            RecomputeModule::Layernorm => "layernorm",
            RecomputeModule::MlaUpProj => "mla_up_proj",
        }
    }
    pub fn parse(s: &str) -> Option<RecomputeModule> {
        Self::ALL.into_iter().find(|m| m.name() == s)
    }
}

/// The dtype of a training state Megatron keeps per parameter: gradients (`grad_reduce_in_fp32`)
/// or Adam's moments (the precision-aware optimizer's `exp_avg_dtype` / `exp_avg_sq_dtype`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StateDtype {
    Fp32,
    Bf16,
}

impl StateDtype {
    pub fn name(self) -> &'static str {
        match self {
            StateDtype::Fp32 => "fp32",
            StateDtype::Bf16 => "bf16",
        }
    }
    pub fn bytes(self) -> f64 {
        match self {
            StateDtype::Fp32 => 4.0,
            StateDtype::Bf16 => 2.0,
        }
    }
    pub fn parse(s: &str) -> Option<StateDtype> {
        match s {
            "fp32" => Some(StateDtype::Fp32),
            "bf16" => Some(StateDtype::Bf16),
            _ => None,
        }
    }
}

/// What a `megatron` training rank keeps per parameter and which activations it drops or moves,
/// as Megatron-Core / Megatron-Bridge options set them. `Default` is Megatron-LM's defaults: fp32
/// main grads (`--accumulate-allreduce-grads-in-fp32`, which Megatron-LM turns on for bf16), no
/// FP8 parameters, fp32 Adam moments, `[core_attn]` under selective recompute, no offload.
#[derive(Debug, Clone, PartialEq)]
pub struct MegatronMemory {
    /// The main-gradient buffer's dtype (`DistributedDataParallelConfig.grad_reduce_in_fp32`: fp32,
    /// else the parameters' bf16; param_and_grad_buffer.py / distributed_data_parallel.py).
    pub grad_dtype: StateDtype,
    /// `fp8_param_gather` / `fp8_param` (`fp4_param_gather` under fp4): the transformer layers'
    /// linear weights live only as Transformer Engine quantized tensors, no bf16 copy
    /// (`memory::quantized_param_bytes`).
    pub fp8_param_gather: bool,
    /// Adam's exp_avg and exp_avg_sq (`use_precision_aware_optimizer` with bf16 moments), beside
    /// the fp32 master weights.
    pub adam_state_dtype: StateDtype,
    /// What `Recompute::Selective` recomputes (empty: Megatron's default `[core_attn]`).
    pub recompute_modules: Vec<RecomputeModule>,
    /// Megatron-Core's layer-level activation offload (`cpu_offloading`, `cpu_offloading_weights =
    /// False`, `cpu_offloading_num_layers`): the activations of this many layers per micro-batch go
    /// to host memory in forward and come back for backward (pipeline size 1 only, no recompute).
    pub cpu_offload_layers: u32,
    /// The loss through Transformer Engine's fused cross entropy (`cross_entropy_loss_fusion`
    /// with `cross_entropy_fusion_impl = te`), which writes the logits' gradient over the bf16
    /// logits (`memory::plan`'s logits).
    pub cross_entropy_fusion: bool,
}

impl Default for MegatronMemory {
    fn default() -> Self {
        MegatronMemory {
            grad_dtype: StateDtype::Fp32,
            fp8_param_gather: false,
            adam_state_dtype: StateDtype::Fp32,
            recompute_modules: Vec::new(),
            cpu_offload_layers: 0,
            cross_entropy_fusion: false,
        }
    }
}

impl MegatronMemory {
    /// The modules selective recompute re-runs (Megatron's default when none are named).
    pub fn modules(&self) -> &[RecomputeModule] {
        if self.recompute_modules.is_empty() {
            &[RecomputeModule::CoreAttn]
        } else {
            &self.recompute_modules
        }
    }
}

/// The software stack: which kernels run, how many, and what memory they hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stack {
    /// Megatron-Core + Transformer Engine: fused norms/activations/RoPE, fused QKV and gate/up,
    /// bf16 params with fp32 main grads, distributed optimizer.
    Megatron,
    /// Plain PyTorch (HF-style modules): fp32 master params under bf16 autocast, unfused
    /// elementwise ops, SDPA flash attention, fused AdamW.
    TorchEager,
    /// As `TorchEager` with Inductor fusing the elementwise ops.
    TorchCompile,
    /// Hugging Face transformers models as `AutoModelForCausalLM.from_config`/`from_pretrained`
    /// build them, eager: SDPA attention (PyTorch picks the backend), transformers' RMSNorm (fp32
    /// upcast), RoPE and MLP modules, the loss over the whole vocabulary on fp32-upcast logits,
    /// `DynamicCache` (a `torch.cat` of each layer's cache per new token), MoE experts through the
    /// library's `grouped_mm` path in the weight dtype; fp32 master weights under bf16 autocast in
    /// training. Its host cost in inference comes from the node's host probe (`calibrate --host`).
    HfEager,
    /// As `HfEager` under `torch.compile(model)` (Inductor fuses the elementwise ops).
    HfCompile,
    /// TensorRT-LLM (inference only): fused attention (XQA for decode, FMHA for context), fused
    /// norm/RoPE/activation and quantize kernels, in-flight batching (`serve::scheduler::TrtllmInflight`),
    /// FP8 KV cache with FP8/FP4 checkpoints, CUDA graphs for decode. Defaults: `serve::engines`.
    Trtllm,
    /// vLLM v1 (inference only): FlashAttention-3 / FlashInfer, fused elementwise kernels (custom
    /// ops and torch.compile), chunked prefill with a token budget (`serve::scheduler::VllmV1`),
    /// piecewise CUDA graphs. Defaults: `serve::engines`.
    Vllm,
    /// SGLang (inference only): FlashInfer / FA3 attention, fused elementwise kernels, chunked
    /// prefill, CUDA graphs for decode up to `cuda_graph_max_bs`. Defaults: `serve::engines`.
    Sglang,
}

impl Stack {
    pub fn name(self) -> &'static str {
        match self {
            Stack::Megatron => "megatron",
            Stack::TorchEager => "torch-eager",
            Stack::TorchCompile => "torch-compile",
            Stack::HfEager => "hf-eager",
            Stack::HfCompile => "hf-compile",
            Stack::Trtllm => "trtllm",
            Stack::Vllm => "vllm",
            Stack::Sglang => "sglang",
        }
    }
    /// Every stack's name, for hints.
    pub const NAMES: &'static str =
        "megatron, torch-eager, torch-compile, hf-eager, hf-compile (training and inference); trtllm, vllm, sglang (inference engines)";
    /// An inference engine (no training path).
    pub fn is_engine(self) -> bool {
        matches!(self, Stack::Trtllm | Stack::Vllm | Stack::Sglang)
    }
    pub fn parse(s: &str) -> Option<Stack> {
        Some(match s {
            "megatron" => Stack::Megatron,
            "torch-eager" => Stack::TorchEager,
            "torch-compile" => Stack::TorchCompile,
            "hf-eager" => Stack::HfEager,
            "hf-compile" => Stack::HfCompile,
            "trtllm" | "tensorrt-llm" => Stack::Trtllm,
            "vllm" => Stack::Vllm,
            "sglang" => Stack::Sglang,
            _ => return None,
        })
    }
    /// Inductor or Transformer Engine fuses the elementwise ops.
    pub fn fused(self) -> bool {
        !self.eager()
    }
    /// Eager PyTorch: one kernel per elementwise op, per-op host dispatch.
    pub fn eager(self) -> bool {
        matches!(self, Stack::TorchEager | Stack::HfEager)
    }
    /// PyTorch with fp32 master weights under bf16 autocast in training (the torch and HF stacks;
    /// not Megatron, not the inference engines).
    pub fn torch(self) -> bool {
        matches!(self, Stack::TorchEager | Stack::TorchCompile | Stack::HfEager | Stack::HfCompile)
    }
    /// A hand-written PyTorch loop (`torch-eager` / `torch-compile`: torchtitan's DTensor
    /// parallelism, PyTorch's context parallel), not transformers' modules.
    pub fn hand_written(self) -> bool {
        matches!(self, Stack::TorchEager | Stack::TorchCompile)
    }
    /// Hugging Face transformers' modules, cache and MoE code.
    pub fn hf(self) -> bool {
        matches!(self, Stack::HfEager | Stack::HfCompile)
    }
}

/// The scaling recipe of fp8 training and inference: how a bf16 tensor becomes an fp8 GEMM input,
/// which sets the quantize kernels' memory traffic (`Fp8Recipe::quantize_bytes`) and which GPUs
/// can run it (MXFP8's block scales need Blackwell's tensor cores).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fp8Recipe {
    /// Per-tensor current scaling (Transformer Engine's `Float8CurrentScaling`, torchao's dynamic
    /// tensorwise): an amax pass over the input, then the cast.
    Tensorwise,
    /// Per-tensor delayed scaling (TE's `DelayedScaling`): the scale comes from an amax history,
    /// the amax is taken inside the cast kernel; no separate pass.
    Delayed,
    /// DeepSeek-V3-style blocks (1x128 activations, 128x128 weights), scales computed in the cast.
    Blockwise,
    /// MXFP8: 32-element blocks with E8M0 scales, computed in the cast; Blackwell only.
    Mxfp8,
    /// torchao's rowwise recipe (`Float8LinearConfig.from_recipe_name("rowwise")`): a scale per
    /// row of each GEMM operand (`torch._scaled_mm` with fp32 scale vectors), so the transposed
    /// copy the weight gradient takes needs its own column-wise amax pass, and the gradient GEMMs
    /// run the tensorwise kernel followed by a rescale (`FP8_ROWWISE_SCALE`). The torch stacks
    /// under `torch.compile` only (`config` refuses it elsewhere).
    Rowwise,
}

impl Fp8Recipe {
    pub const ALL: [Fp8Recipe; 5] = [Fp8Recipe::Tensorwise, Fp8Recipe::Delayed, Fp8Recipe::Blockwise, Fp8Recipe::Mxfp8, Fp8Recipe::Rowwise];
    pub fn name(self) -> &'static str {
        match self {
            Fp8Recipe::Tensorwise => "tensorwise",
            Fp8Recipe::Delayed => "delayed",
            Fp8Recipe::Blockwise => "blockwise",
            Fp8Recipe::Mxfp8 => "mxfp8",
            Fp8Recipe::Rowwise => "rowwise",
        }
    }
    pub fn parse(s: &str) -> Option<Fp8Recipe> {
        Fp8Recipe::ALL.into_iter().find(|r| r.name() == s)
    }
}

/// HBM bytes and kernels to quantize one bf16 input element of a linear layer, by precision and
/// recipe, from the kernels' reads and writes (nothing fitted): reading the bf16 element (2 B),
/// writing it at 1 B (fp8) or 0.5 B (fp4), and in training a second, transposed copy for the
/// weight-gradient GEMM (Hopper's fp8 GEMMs take only TN layouts; the block-scaled recipes keep a
/// columnwise copy too); per-tensor current scaling reads the input once more for its amax, and
/// NVFP4 takes a per-tensor amax for its second-level scale too; block scales add 1 B per 32
/// (MXFP8, E8M0) or per 16 (NVFP4, E4M3) elements per copy, blockwise 4 B per 128.
///
/// NVFP4 training (Transformer Engine's `NVFP4BlockScaling` recipe, TE 2.8+; NVIDIA, "Pretraining
/// Large Language Models with NVFP4", arXiv:2509.25149, sec. 4: 16-point random Hadamard
/// transforms on the weight-gradient GEMM's inputs, stochastic rounding of gradients) casts the
/// column-wise (wgrad) copy through the Hadamard transform, so it cannot share the row-wise cast's
/// pass: the rotated copy is read and cast in a pass of its own (2 B read more, one kernel more);
/// its amax is taken with the plain one in the amax pass. Stochastic rounding adds random-number
/// work inside the cast, no traffic.
pub fn quantize_bytes(precision: Dtype, recipe: Fp8Recipe, train: bool) -> Option<(f64, u32)> {
    let copies = if train { 2.0 } else { 1.0 };
    let written = copies * quantized_elem_bytes(precision, recipe)?;
    Some(match precision {
        Dtype::Fp8 => match recipe {
            // Rowwise (torchao, torch stacks only): priced by `Builder::quantize_input`'s torchao
            // path under compile; eager torchao reads the input once more for the row amax too.
            Fp8Recipe::Tensorwise | Fp8Recipe::Rowwise => (2.0 + 2.0 + written, 2),
            Fp8Recipe::Delayed | Fp8Recipe::Blockwise | Fp8Recipe::Mxfp8 => (2.0 + written, 1),
        },
        Dtype::Fp4 if train => (2.0 + 2.0 + 2.0 + written, 3),
        _ => (2.0 + 2.0 + written, 2),
    })
}

/// Bytes per element that TensorRT-LLM's FP8 activation quantize moves: it reads the bf16 input
/// (2 B) and writes its FP8 copy (1 B), one kernel, no amax pass. The performance overview's FP8
/// rows run NVIDIA ModelOpt checkpoints (`nvidia/*-FP8`, `hf_quant_config.json`: `quant_algo` FP8,
/// `kv_cache_quant_algo` FP8), whose linear layers carry a calibrated static `input_scale`, and
/// TensorRT-LLM quantizes with it (v0.17 `quantization/functional.py` `quantize_per_tensor`, v1.0
/// `_torch/modules/linear.py` `FP8QDQLinearMethod`: `static_quantize_e4m3_per_tensor`; from
/// memory, not re-read here). Measured on the H100: calibration/runs/raw/decode-fp8-h100-2026-11-24/.
pub const TRTLLM_STATIC_FP8_QUANTIZE_BYTES: f64 = 2.0 + 1.0;

/// Bytes per element of one quantized copy of a tensor, its block scales included: FP8 1 B
/// (per-tensor or per-row scales are negligible), blockwise FP8 plus one fp32 scale per 128, MXFP8
/// plus one E8M0 scale per 32, NVFP4 0.5 B plus one E4M3 scale per 16. `None` for a precision that
/// is not quantized. The quantize kernels' writes, the quantized inputs Transformer Engine saves
/// and a quantized checkpoint's weights all count it.
pub fn quantized_elem_bytes(precision: Dtype, recipe: Fp8Recipe) -> Option<f64> {
    match precision {
        Dtype::Fp8 => Some(match recipe {
            Fp8Recipe::Tensorwise | Fp8Recipe::Delayed | Fp8Recipe::Rowwise => 1.0,
            Fp8Recipe::Blockwise => 1.0 + 4.0 / 128.0,
            Fp8Recipe::Mxfp8 => 1.0 + 1.0 / 32.0,
        }),
        Dtype::Fp4 => Some(0.5 + 1.0 / 16.0),
        _ => None,
    }
}

/// Linear layers that stay in bf16 under an FP8 or FP4 recipe: the LM head (Megatron-Core builds
/// `output_layer` as its own `tensor_parallel.ColumnParallelLinear`, not a Transformer Engine
/// module, so no FP8/FP4 autocast reaches it; torchao's float8 conversion skips it by the
/// recipes' module filter) and the MoE router (a plain `torch.nn.functional.linear` in
/// Megatron-Core's `TopKRouter`, run in fp32 or bf16).
pub fn stays_bf16(name: &str) -> bool {
    matches!(name, "router" | "lm_head")
}

/// The training loop an `hf-*` stack's step runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TrainLoop {
    /// A plain PyTorch loop: forward, backward, fused AdamW, `zero_grad(set_to_none=True)`, no
    /// synchronisation until the step ends (scenarios/workloads/hf_train.py).
    #[default]
    Plain,
    /// `transformers.Trainer` at its defaults (`bf16=True`, `adamw_torch_fused`): it checks each
    /// step's loss for NaN on the host (`logging_nan_inf_filter`), which waits for the backward, so
    /// the host's gradient clipping (`max_grad_norm`, default 1.0; `clip` false at 0), optimizer step,
    /// scheduler, `model.zero_grad()` and callbacks run with the GPU idle
    /// (`step::hf_trainer_host`), and the clipping's kernels add their GPU work.
    HfTrainer { clip: bool },
}

impl TrainLoop {
    pub fn name(self) -> &'static str {
        match self {
            TrainLoop::Plain => "plain",
            TrainLoop::HfTrainer { .. } => "hf-trainer",
        }
    }
}

/// How FSDP (ZeRO-3) on a torch stack casts what it gathers and reduces: PyTorch FSDP2's
/// `MixedPrecisionPolicy` and torchao's float8 all-gather (torch 2.11
/// `torch/distributed/fsdp/_fully_shard/`, read from the 2.11.0 wheel: `FSDPParam.all_gather_inputs`
/// casts the fp32 shard with `_to_dtype_if_needed(sharded_param_data, self.param_dtype)` before the
/// all-gather; `foreach_reduce` allocates the reduce-scatter input in `reduce_dtype` and copies the
/// unsharded gradients into it (`foreach_reduce_scatter_copy_in`); the sharded parameters, their
/// gradients and the optimizer stay fp32). With `bf16_params` the layers compute on the gathered
/// bf16 parameters and no autocast runs (torchtitan's `maybe_enable_amp` returns a null context
/// when FSDP is on: "FSDP handles mixed precision internally", torchtitan 0.1.0
/// `distributed/utils.py`). The default (no policy) is what the project's reference workload
/// measured (scenarios/workloads/train_llama.py: `fully_shard` without a policy, fp32 parameters
/// gathered, bf16 autocast around the forward).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsdpPrecision {
    /// `MixedPrecisionPolicy(param_dtype=torch.bfloat16)`: parameters gathered (and computed on)
    /// in bf16; false: fp32 parameters gathered and cast by autocast.
    pub bf16_params: bool,
    /// The gradients' reduce-scatter dtype (`reduce_dtype`; FSDP2's default `None` reduces in the
    /// gradients' own dtype: bf16 under a bf16 policy, fp32 without one). torchtitan sets float32
    /// (`training.mixed_precision_reduce`, torchtitan 0.1.0-0.3.0 config).
    pub reduce: StateDtype,
    /// torchao's `Float8LinearConfig(enable_fsdp_float8_all_gather=True)` (tensorwise scaling):
    /// each Float8Linear weight's shard is cast to float8 before the all-gather
    /// (`WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather`), so those weights cross the wire at
    /// 1 B; the rest (norms, embedding, the LM head torchtitan filters out) as the policy says.
    pub float8_all_gather: bool,
}

impl Default for FsdpPrecision {
    /// No policy: fp32 parameters gathered, fp32 gradients reduced.
    fn default() -> FsdpPrecision {
        FsdpPrecision { bf16_params: false, reduce: StateDtype::Fp32, float8_all_gather: false }
    }
}

impl FsdpPrecision {
    /// Bytes per parameter of what FSDP gathers, float8 aside.
    pub fn param_bytes(self) -> f64 {
        if self.bf16_params {
            2.0
        } else {
            4.0
        }
    }
}

/// What is run: mode, batch shape, precision, recompute, stack.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    pub mode: Mode,
    /// Sequences per micro-batch per DP replica (training).
    pub micro_batch: u64,
    /// Sequences per optimizer step, whole job (training).
    pub global_batch: u64,
    pub seq: u64,
    /// Sequences in flight per replica (inference).
    pub batch: u64,
    /// Cached tokens per sequence (decode).
    pub kv_len: u64,
    /// GEMM compute dtype (activations stay bf16; fp8/fp4 GEMMs keep bf16 activations around them).
    pub precision: Dtype,
    /// How fp8 GEMM inputs are scaled (meaningful with `precision` fp8; fp4 is NVFP4).
    pub fp8_recipe: Fp8Recipe,
    pub recompute: Recompute,
    pub stack: Stack,
    /// Dropout layers present (GPT-3-era training); modern LLMs train without.
    pub dropout: bool,
    /// Flash attention (no s^2 score matrix kept); false = unfused softmax attention.
    pub flash_attention: bool,
    /// Tokens on the busiest expert rank / mean (1.0 = perfectly balanced routing).
    pub routing_imbalance: f64,
    /// How MoE tokens reach their experts' ranks.
    pub moe_dispatcher: MoeDispatcher,
    /// The `flex` dispatcher's kernels (Megatron's `moe_flex_dispatcher_backend`); meaningful with
    /// [`MoeDispatcher::Flex`] only.
    pub moe_flex_backend: FlexBackend,
    /// Megatron's expert capacity (`--moe-expert-capacity-factor`, `--moe-pad-expert-input-to-capacity`);
    /// `None` is dropless (Megatron's default).
    pub moe_capacity: Option<MoeCapacity>,
    /// LoRA fine-tuning (training only): frozen base weights, trained low-rank adapters.
    pub lora: Option<Lora>,
    /// Multi-token-prediction modules trained (Megatron's `--mtp-num-layers`; 0, Megatron's
    /// default, trains the main model only), each on the last pipeline stage beside the loss.
    pub mtp_layers: u32,
    /// How context-parallel attention exchanges keys and values (meaningful with `cp` > 1).
    pub cp_comm: CpComm,
    /// Megatron's per-parameter state dtypes, selective-recompute modules and activation offload.
    pub megatron: MegatronMemory,
    /// FSDP's gather and reduce dtypes on the torch stacks (meaningful under zero 3).
    pub fsdp: FsdpPrecision,
    /// Under a compiled torch stack (`torch-compile`, `hf-compile`) in training, whether the loss
    /// (`cross_entropy(logits.float(), labels)`) is compiled too (true, the default) or runs eager
    /// beside the compiled blocks. torchtitan compiles it when `compile.components` holds "loss"
    /// (its default, torchtitan 0.2.0 `config/job_config.py`; 0.1.0 `components/loss.py` compiles it
    /// when `training.compile` is set, re-read); its December 2024 `train.py` kept the loss eager
    /// ("compiling loss function causes CUDA errors", the `torch.compile(loss_fn)` line commented
    /// out; from memory). Eager, the loss keeps the logits' fp32 copy, the log-softmax output and
    /// the fp32 gradient (`memory`) and runs as eager's kernels (`Builder::output_head`).
    pub compile_loss: bool,
    /// Tokens each sequence generates in the decode run whose peak memory is asked for, from
    /// `kv_len` on (1: one step). Only the `hf-*` stacks' DynamicCache depends on it: its
    /// `torch.cat` per token leaves PyTorch's caching allocator blocks it cannot reuse
    /// (`memory::hf_stranded_cache_sets`).
    pub decode_tokens: u64,
    /// Attention data parallelism around expert-parallel MoE, the way TensorRT-LLM
    /// (`enable_attention_dp`) and SGLang (`--enable-dp-attention`) serve DeepSeek-V3/R1 and Qwen3
    /// MoE: `Some(n)`, the inference instance's `n` sequences spread over its `dp` ranks as evenly
    /// as whole requests go, each rank running its own requests' attention (TP `tp`, no
    /// all-reduce across ranks), dense layers and LM head with its own KV cache; `batch` is then
    /// the busiest rank's share, `ceil(n / dp)`, which the other ranks wait for at every MoE
    /// layer. The MoE layers' experts are sharded `ep x etp` over all `tp x dp` GPUs of the
    /// instance and see every rank's tokens ([`Workload::instance_sequences`]). `None`: off.
    pub attention_dp: Option<u64>,
    /// Training on packed sequences (Megatron's THD layout with `cu_seqlens`, as the
    /// Megatron-Bridge / NeMo fine-tuning recipes pack SQuAD): each `seq`-token sequence holds
    /// documents of this many tokens on average, and attention runs within each document only.
    /// `None`: one document per sequence.
    pub packed_doc_len: Option<u64>,
    /// The training loop around an `hf-*` stack's model ([`TrainLoop`]): the project's own loop
    /// (scenarios/workloads/hf_train.py, what the hf constants were fitted on), or Hugging Face's
    /// `transformers.Trainer`.
    pub train_loop: TrainLoop,
    /// Megatron training (Transformer Engine) on a GPU whose FP8 GEMMs take every operand layout,
    /// not only TN (data-centre Blackwell, compute capability 10.x: Transformer Engine 2.9
    /// `pytorch/utils.py` `is_non_tn_fp8_gemm_supported`), so Transformer Engine's per-tensor FP8
    /// inputs (`Float8TensorStorage.update_usage`) keep no transposed copy for the weight-gradient
    /// GEMM; the block-scaled recipes (MXFP8, NVFP4) still write a column-wise copy with its own
    /// scales.
    pub fp8_non_tn: bool,
}

/// Token dropping at a per-expert capacity, as Megatron-Core runs it (megatron-core 0.16.1
/// `transformer/moe/moe_utils.py` `get_capacity`: capacity = ceil(tokens x top_k / experts x
/// `factor`) per expert and source rank; `transformer/moe/token_dispatcher.py`): tokens routed to an
/// expert beyond its capacity are dropped; with `pad` (`moe_pad_expert_input_to_capacity`) every
/// expert's input is padded to its capacity, so each expert runs exactly `factor` x the mean load
/// and the all-to-all sends the padded buffers, whose sizes are known in advance (no device-to-host
/// sync of the token counts: `num_tokens_per_local_expert` is a constant).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoeCapacity {
    /// Capacity over the mean per-expert load (> 0; Megatron reads a negative value as dropless).
    pub factor: f64,
    /// Pad every expert's input to its capacity.
    pub pad: bool,
}

/// Transformer Engine's context-parallel attention (`cp_comm_type`, Megatron-LM
/// `--cp-comm-type`). Every variant runs on Megatron's load-balanced causal split: each sequence
/// cut into `2 cp` chunks, rank r holding chunks r and `2 cp - 1 - r`, so every rank does
/// `1 / cp` of the causal work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpComm {
    /// Ring attention (TE `p2p`, the Megatron default): `cp` steps per layer; at each, one block of
    /// attention on the key/value block in hand while the next block travels to the ring neighbour
    /// (step 0 uses the rank's own keys and values). Backward sends keys, values and their
    /// gradients around the ring; the last hop of the key/value gradients is exposed.
    P2p,
    /// TE `all_gather`: all-gather the keys and values before attention (exposed), reduce-scatter
    /// their gradients after its backward.
    AllGather,
    /// TE `a2a` (DeepSpeed-Ulysses): all-to-all of queries, keys and values from sequence to head
    /// sharding, attention over the whole sequence on `heads / cp` heads, all-to-all of the output
    /// back; all exposed. The (TP-local) query and key/value heads must divide by `cp`.
    A2a,
}

impl CpComm {
    pub const ALL: [CpComm; 3] = [CpComm::P2p, CpComm::AllGather, CpComm::A2a];
    /// Transformer Engine's name (`cp_comm_type`).
    pub fn name(self) -> &'static str {
        match self {
            CpComm::P2p => "p2p",
            CpComm::AllGather => "all_gather",
            CpComm::A2a => "a2a",
        }
    }
    /// TE's names; `all-gather` too.
    pub fn parse(s: &str) -> Option<CpComm> {
        if s == "all-gather" {
            return Some(CpComm::AllGather);
        }
        CpComm::ALL.into_iter().find(|d| d.name() == s)
    }
}

/// Megatron-Core's MoE token dispatchers (`--moe-token-dispatcher-type`): what crosses the EP group
/// to bring each token to its experts and back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoeDispatcher {
    /// All-to-all of each (token, expert) pair: `top_k` copies of a token, even to one rank.
    AllToAll,
    /// All-gather of every EP rank's tokens, each rank keeps those of its experts; the combine is a
    /// reduce-scatter.
    AllGather,
    /// DeepEP's fused all-to-all (`flex`): a token goes once to each rank that holds one of its
    /// experts.
    Flex,
}

/// The token permutations of a MoE layer that run as kernels of their own (`Builder::megatron_permutation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MegatronPermutation {
    /// Other stacks: a permute and an unpermute, each reading and writing the routed rows.
    Other,
    /// A permute of the routed rows before the dispatch and an unpermute after the combine; `sort`:
    /// also a second copy of every received row into the local experts' order, and back.
    Separate { sort: bool },
    /// A permute of the received rows into the routed rows after the dispatch, and back before the
    /// combine (DeepEP).
    Received,
    /// Inside the dispatch and combine kernels (HybridEP).
    InDispatch,
}

/// The kernels behind Megatron-Core's `flex` dispatcher (`moe_flex_dispatcher_backend`, default
/// `deepep` in megatron-core 0.16.1 `TransformerConfig`), which differ in the token permutation
/// they leave to separate kernels (megatron-core 0.16.1 `transformer/moe/token_dispatcher.py`):
/// - DeepEP (`_DeepepManager`): the dispatch kernel reads the tokens in their own order and sends
///   each once to every rank holding one of its experts (the send-side permutation is in the
///   kernel); the receiving rank then permutes what it received into its experts' order
///   (`get_permuted_hidden_states_by_instances`, one fused permute) and back before the combine
///   (`get_restored_hidden_states_by_instances`).
/// - HybridEP (`_HybridEPManager`: "permute tokens for communication, perform all-to-all
///   communication, and permute tokens for experts in single step", and the mirror image in the
///   combine; `get_permuted_hidden_states_by_experts` returns its input): no separate permute or
///   unpermute kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlexBackend {
    DeepEp,
    HybridEp,
}

impl FlexBackend {
    pub const ALL: [FlexBackend; 2] = [FlexBackend::DeepEp, FlexBackend::HybridEp];
    pub fn name(self) -> &'static str {
        match self {
            FlexBackend::DeepEp => "deepep",
            FlexBackend::HybridEp => "hybridep",
        }
    }
    pub fn parse(s: &str) -> Option<FlexBackend> {
        FlexBackend::ALL.into_iter().find(|d| d.name() == s)
    }
}

impl MoeDispatcher {
    pub const ALL: [MoeDispatcher; 3] = [MoeDispatcher::AllToAll, MoeDispatcher::AllGather, MoeDispatcher::Flex];
    pub fn name(self) -> &'static str {
        match self {
            MoeDispatcher::AllToAll => "alltoall",
            MoeDispatcher::AllGather => "allgather",
            MoeDispatcher::Flex => "flex",
        }
    }
    pub fn parse(s: &str) -> Option<MoeDispatcher> {
        MoeDispatcher::ALL.into_iter().find(|d| d.name() == s)
    }
}

impl Workload {
    /// Tokens the busiest rank's experts process, over the mean load: the routing imbalance when
    /// dropless; capped at the capacity factor when tokens beyond it are dropped; the capacity
    /// factor itself when every expert's input is padded to capacity ([`MoeCapacity`]). The
    /// expert GEMMs, the tokens the busiest rank receives in the dispatch all-to-all (and sends
    /// back in the combine) and the experts' saved activations scale with it.
    pub fn expert_load(&self) -> f64 {
        match self.moe_capacity {
            None => self.routing_imbalance,
            Some(MoeCapacity { factor, pad: true }) => factor,
            Some(MoeCapacity { factor, pad: false }) => self.routing_imbalance.min(factor),
        }
    }
    /// The dtype GEMM `name` of the op list runs in: the workload's precision, except the linears
    /// that stay in bf16 under FP8/FP4 training ([`stays_bf16`]). Inference keeps the precision
    /// for every GEMM, as the serving fits were made with it.
    pub fn gemm_dtype(&self, name: &str) -> Dtype {
        if self.mode == Mode::Train && matches!(self.precision, Dtype::Fp8 | Dtype::Fp4) && stays_bf16(name) {
            Dtype::Bf16
        } else {
            self.precision
        }
    }
    /// Sequences per micro-batch (training) or per forward (inference) on one replica.
    /// Sequences of the whole inference instance (`dp` data-parallel ranks): the attention-DP
    /// instance's count ([`Workload::attention_dp`]), else `dp` ranks of `batch` each (training:
    /// `micro_batch`).
    pub fn instance_sequences(&self, dp: u32) -> u64 {
        self.attention_dp.unwrap_or(self.sequences() * dp as u64)
    }
    pub fn sequences(&self) -> u64 {
        match self.mode {
            Mode::Train => self.micro_batch,
            Mode::Prefill | Mode::Decode => self.batch,
        }
    }
    /// Query tokens per sequence in one forward.
    pub fn q_len(&self) -> u64 {
        match self.mode {
            Mode::Decode => 1,
            _ => self.seq,
        }
    }
    /// Bytes of one cached key or value element. TensorRT-LLM runs its FP8 and FP4 checkpoints
    /// with an FP8 KV cache (the ModelOpt checkpoints the performance overview uses are quantized
    /// with `kv_cache_quant_algo = FP8`, and `trtllm-bench` builds FP8 engines with an FP8 cache:
    /// its perf-overview notes, v0.17 and v1.0); every other stack keeps the cache in bf16 (vLLM's
    /// and SGLang's `kv_cache_dtype` default `auto` = the model's dtype).
    pub fn kv_elem_bytes(&self) -> f64 {
        match (self.stack, self.precision) {
            (Stack::Trtllm, crate::hardware::Dtype::Fp8 | crate::hardware::Dtype::Fp4) => 1.0,
            _ => 2.0,
        }
    }
    /// Keys each query attends to (the full context).
    pub fn context_len(&self) -> u64 {
        match self.mode {
            Mode::Decode => self.kv_len + 1,
            _ => self.seq,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pass {
    Forward,
    Backward,
    /// Forward recomputed during backward (activation checkpointing).
    Recompute,
}

#[derive(Debug, Clone, PartialEq)]
pub enum OpKind {
    /// `count` independent GEMMs `C[m,n] = A[m,k] B[k,n]` in the workload's compute dtype.
    Gemm { m: u64, n: u64, k: u64, count: u64 },
    /// Flash attention over `batch_heads` (sequence x head) pairs, reading `kv_bytes` of keys and
    /// values (per KV head under GQA; the compressed latent cache of MLA in decode).
    /// `window`: the model's sliding-window layers, for which this one op stands in the share
    /// `window.share` (`None`: every layer full).
    Attention {
        batch_heads: u64,
        q_len: u64,
        kv_len: u64,
        head_dim_qk: u64,
        head_dim_v: u64,
        causal: bool,
        backward: bool,
        kv_bytes: f64,
        window: Option<AttnWindow>,
    },
    /// Memory-bound kernels moving `bytes` (read + write) in `kernels` launches.
    Memory { bytes: f64, kernels: u32 },
    /// `count` independent bf16 matmuls `C[m,n] = A[m,k] B[k,n]` inside one of mamba_ssm's fused SSD
    /// Triton kernels (`tl.dot` on bf16 tiles, fp32 accumulate): always bf16, never quantized, whatever
    /// the workload's GEMM precision. Priced as a batched bf16 GEMM of that shape.
    ScanMatmul { m: u64, n: u64, k: u64, count: u64 },
    /// A collective on a group; `bytes` is the nccl-tests buffer size (all-gather: the output,
    /// reduce-scatter: the input, all-reduce: the buffer, all-to-all: the buffer, send/recv: the message).
    Comm { op: CollectiveOp, group: Group, bytes: f64 },
}

/// Sliding-window attention on a share of the layers one attention op stands for: one layer op
/// list prices every layer of its kind, so the op carries the model's share of sliding layers
/// (GPT-OSS: 1/2) and is priced as that mix of full causal and banded causal attention.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttnWindow {
    /// Keys a query sees on a sliding layer, itself included (`SlidingWindow::window`).
    pub window: u64,
    /// The share of the layers that slide, 0 to 1 (`Model::sliding_share`).
    pub share: f64,
    /// The sliding layers run SDPA with an explicit mask instead of a window the kernel knows
    /// (transformers under SDPA once the keys reach the window, see `Builder::attention`): every
    /// score tile is computed, none skipped, so those layers cost a non-causal call.
    pub masked: bool,
}

/// Keys the `q_len` queries at the end of a `kv_len` context attend to in all, causally, when
/// each sees at most `window` keys (itself included): the sum over positions `p` in
/// `kv_len - q_len .. kv_len` of `min(p + 1, window)`.
pub fn banded_keys(q_len: u64, kv_len: u64, window: u64) -> f64 {
    let (a, b, w) = ((kv_len - q_len.min(kv_len) + 1) as f64, kv_len as f64, window as f64);
    if b <= w {
        (a + b) * (b - a + 1.0) / 2.0
    } else if a >= w {
        w * (b - a + 1.0)
    } else {
        (a + w) * (w - a + 1.0) / 2.0 + w * (b - w)
    }
}

/// Score tiles of 128 queries x 128 keys a fused kernel (cuDNN, FlashAttention) computes for the
/// `q_len` queries at the end of a `kv_len` context, causally, and with a band of `window` keys
/// (`None`: causal only): in each 128-query tile, every key tile from the one holding the first
/// key its first query sees to the one holding its last query, whole (the accounting of
/// `cost::causal_tile_share`).
pub fn causal_tiles(q_len: u64, kv_len: u64, window: Option<u64>) -> f64 {
    const T: u64 = 128;
    let start = kv_len - q_len.min(kv_len);
    let mut tiles = 0u64;
    let mut q0 = 0;
    while q0 < q_len {
        let first_pos = start + q0;
        let last_pos = (start + (q0 + T).min(q_len) - 1).min(kv_len.saturating_sub(1));
        let first_key = window.map_or(0, |w| (first_pos + 1).saturating_sub(w));
        tiles += last_pos / T - first_key / T + 1;
        q0 += T;
    }
    tiles as f64
}

#[derive(Debug, Clone, PartialEq)]
pub struct Op {
    pub name: &'static str,
    pub kind: OpKind,
    pub pass: Pass,
    /// What the op becomes in backward (`backward_of`).
    pub backward: Backward,
}

/// What a forward op becomes in backward.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Backward {
    /// A GEMM gives its data- and weight-gradient GEMMs, attention its backward, a memory op twice
    /// its traffic, a collective its conjugate.
    #[default]
    Mirror,
    /// Frozen weights (the base model under LoRA): a GEMM gives its data-gradient GEMM only (no
    /// weight gradient is formed); any other op (the embedding lookup, whose only backward is its
    /// weight gradient; a gather whose gradient is a local split) gives nothing.
    Frozen,
    /// Exactly this op (LoRA adapters' tensor-parallel layers, whose backward traffic is not the
    /// forward's conjugate; their scale-and-add, whose backward is the scale's alone).
    As(OpKind),
}

impl Op {
    /// Floating-point operations the op performs (matmuls and attention; elementwise ops count 0).
    /// Causal attention counts the FLOPs of the unmasked half only (what the kernel executes).
    pub fn flops(&self) -> f64 {
        match &self.kind {
            OpKind::Gemm { m, n, k, count } | OpKind::ScanMatmul { m, n, k, count } => 2.0 * (*m * *n * *k * *count) as f64,
            OpKind::Attention { batch_heads, q_len, kv_len, head_dim_qk, head_dim_v, causal, backward, window, .. } => {
                let full = 2.0 * (*batch_heads * *q_len * *kv_len) as f64 * (*head_dim_qk + *head_dim_v) as f64;
                let mut executed = if *causal { full * causal_fraction(*q_len, *kv_len) } else { full };
                if let (Some(win), true) = (window, *causal) {
                    // Sliding layers: the keys inside the band only, or, masked, the whole matrix.
                    let sliding = if win.masked { full } else { full * banded_keys(*q_len, *kv_len, win.window) / (*q_len * *kv_len) as f64 };
                    executed = (1.0 - win.share) * executed + win.share * sliding;
                }
                // Backward: dQ, dK, dV, dP and the recomputed QK^T: 2.5x the forward (FlashAttention-2).
                if *backward {
                    2.5 * executed
                } else {
                    executed
                }
            }
            OpKind::Memory { .. } | OpKind::Comm { .. } => 0.0,
        }
    }
}

/// Fraction of the q x kv score matrix a causal mask leaves, with queries at the end of the context.
pub fn causal_fraction(q_len: u64, kv_len: u64) -> f64 {
    let (q, kv) = (q_len as f64, kv_len as f64);
    // Query i (0-based from the end block) sees kv - q + i + 1 keys.
    let seen = q * (kv - q) + q * (q + 1.0) / 2.0;
    seen / (q * kv)
}

/// Per-rank op lists of one micro-batch: one transformer layer of each kind, plus the parts
/// outside the layers. The caller multiplies layer lists by the layers each stage holds.
#[derive(Debug, Clone, PartialEq)]
pub struct OpList {
    pub dense_layer: Vec<Op>,
    pub moe_layer: Vec<Op>,
    /// Embedding lookup (first stage).
    pub embedding: Vec<Op>,
    /// Final norm, LM head and loss (last stage).
    pub head: Vec<Op>,
    /// A hybrid model's blocks (empty otherwise): Mamba-2, attention, MLP and MoE layers, each
    /// norm, mixer or MLP, residual.
    pub mamba_layer: Vec<Op>,
    pub attention_layer: Vec<Op>,
    pub mlp_layer: Vec<Op>,
    pub moe_mlp_layer: Vec<Op>,
}

impl OpList {
    /// The forward ops of one layer of `kind`.
    pub fn layer(&self, kind: LayerKind) -> &[Op] {
        match kind {
            LayerKind::Dense => &self.dense_layer,
            LayerKind::Moe => &self.moe_layer,
            LayerKind::Mamba => &self.mamba_layer,
            LayerKind::Attention => &self.attention_layer,
            LayerKind::Mlp => &self.mlp_layer,
            LayerKind::MoeMlp => &self.moe_mlp_layer,
        }
    }
}

struct Builder<'a> {
    model: &'a Model,
    pc: &'a ParallelConfig,
    w: &'a Workload,
    ops: Vec<Op>,
    /// Activation element size (bf16).
    act: f64,
}

const ACT_BYTES: f64 = 2.0;

/// The op that casts a linear's input to fp8 for torchao under Inductor; `backward_of` gives the
/// GEMM after it the cast of its output gradient.
pub const FP8_CAST: &str = "fp8_cast";
/// DTensor's re-layout of a sequence-parallel collective's tensor on the torch stacks
/// (`Builder::sp_layout_copies`).
pub const SP_LAYOUT_COPY: &str = "sp_layout_copy";
/// The same under torchao's rowwise recipe.
pub const FP8_CAST_ROWWISE: &str = "fp8_cast_rowwise";
/// HBM bytes per element of torchao's fused cast (see `Builder::quantize_input`): read bf16 (2),
/// write the fp8 copy (1) and its transpose (1). The rowwise recipe's row-wise cast measures no
/// dearer; what it adds (the column-wise casts, the rescaling) is priced apart
/// ([`FP8_ROWWISE_SCALE`]).
const TORCHAO_CAST_BYTES: f64 = 4.0;

/// The op that carries what torchao's rowwise recipe adds to a linear's backward over tensorwise:
/// the rescaling of the data-gradient GEMM's output and the column-wise casts of the input and
/// the output gradient (`ROWWISE_*_BYTES`).
pub const FP8_ROWWISE_SCALE: &str = "fp8_rowwise_scale";

/// PyTorch's context parallelism (`torch.distributed.tensor.experimental.context_parallel`, what
/// torchtitan runs: torchtitan 0.1.0 `distributed/utils.py` `create_context_parallel_ctx`) on the
/// torch stacks: the key/value all-gather (`_AllGatherRotater`, torchtitan's default rotate method
/// `allgather`, 0.1.0 `config_manager.py`), issued asynchronously before the first (diagonal)
/// SDPA call and waited for at the second (torch 2.6 `distributed/tensor/experimental/_attention.py`
/// `_templated_ring_attention`, lines 470-483; torch 2.11 `_context_parallel/_attention.py`
/// lines 420-431), so it runs beside that call. Its backward gathers the keys and values again
/// (`_templated_ring_attention_backward`'s `kv_rotater`).
pub const TORCH_CP_KV_GATHER: &str = "cp_torch_all_gather_kv";
/// The gradients of the keys and values under PyTorch's context parallelism: after every
/// rotation's flash backward the fp32 dk/dv accumulators travel one hop round the ring
/// (`dkv_rotater`, an `ALL_TO_ALL` rotater whatever the forward's method: torch 2.6
/// `_attention.py` lines 640 and 745-747, torch 2.11 lines 517 and 618-620), `cp` hops of
/// `2 x` the rank's bf16 key/value bytes (fp32), each beside the next rotation's backward; the
/// last is waited for after the loop (torch 2.6 line 764).
pub const TORCH_CP_DKV_ROTATE: &str = "cp_torch_dkv_rotate";
/// The per-rank work PyTorch's ring attention adds around its SDPA calls (`TORCH_CP_*_BYTES`).
pub const TORCH_CP_MERGE: &str = "cp_torch_sdpa_merge";
/// HBM bytes per output element (this rank's queries x heads x head dim) of one `_SDPAMerger.step`
/// on a whole block (torch 2.6 `_attention.py` lines 120-195, torch 2.11 lines 138-223; eager
/// PyTorch ops, fp32 since `convert_to_f32` is on): `block_out.to(float32)` (2 read + 4 written),
/// `out - block_out` (4 + 4 + 4), `sigmoid(block_lse - lse) * (...)` (4 + 4; the log-sum-exp terms
/// are per row, 1/128 of this), `out - (...)` (4 + 4 + 4): 38. Counted from the code, not fitted;
/// calibration/runs/raw/titancp-h100-2026-11-25 measures 13 ms on one H100 for the 7 merges and 6
/// key/value concatenations of rank 7 of 8 at 32K tokens per rank (32 heads x 128), against 15 ms
/// these bytes give at 3 TB/s.
pub const TORCH_CP_MERGE_BYTES: f64 = 38.0;
/// Bytes per output element of the merger's first and last casts (`out.to(float32)` when the first
/// block is taken, `results()`'s `.to(bfloat16)`): 6 each.
pub const TORCH_CP_MERGE_CAST_BYTES: f64 = 12.0;
/// Bytes per key/value element of one rotation's send buffer, `torch.cat([key.flatten(),
/// value.flatten()])` in bf16 (2 read + 2 written), formed before each of the first `cp - 1` SDPA
/// calls in forward and again in backward (torch 2.6 lines 482 and 653).
pub const TORCH_CP_KV_CAT_BYTES: f64 = 4.0;
/// Backward bytes per element (q, or each of k and v; the same count under torchtitan's repeated
/// key/value heads) of one rotation on the busiest rank (the last, whose every rotation takes
/// the first half of the keys: `i <= rank`), from `_templated_ring_attention_backward` (torch 2.6
/// lines 606-775): `grad_query += grad_query_` (fp32 += bf16: 4 + 2 read, 4 written = 10), and for
/// each of k and v `_partial_update(..., add=True)` (`chunks[0] += new` on half the rows, 5, then
/// `torch.cat` of the whole fp32 tensor, 8) plus `torch.cat([grad_key.flatten(),
/// grad_value.flatten()])` in fp32 (8): 10 + 2 x (13 + 8) = 52 per q element.
pub const TORCH_CP_BWD_ROTATION_BYTES: f64 = 52.0;
/// The backward's fixed bytes per element: the three fp32 `zeros_like` accumulators (4 x 3), the
/// first rotation's plain `+=` on q, k and v (10 x 3) and fp32 concatenation (8 x 2), the final
/// `grad_query.to(bf16)` (6) and the received dk/dv `.to(bf16)` (6 x 2): 76.
pub const TORCH_CP_BWD_FIXED_BYTES: f64 = 76.0;

/// Time of the rescaling pass after a rowwise data-gradient GEMM, as bytes per output element at
/// the GPU's stream rate. torchao runs a rowwise GEMM without fast accumulation (both gradient
/// GEMMs: `Float8LinearConfig` sets `use_fast_accum` for the output GEMM only) on the tensorwise
/// cuBLAS kernel with unit scales and multiplies the bf16 output by the outer product of the row
/// and column scales afterwards (torchao 0.18.0 `float8/float8_ops.py` `addmm_float8_unwrapped`:
/// "The rowwise CUTLASS-based kernel is so slow without fast-accum that we'd rather use the
/// tensorwise cuBLAS-based kernel and do the scaling manually afterwards"; the same in 0.11.0 and
/// 0.12.0). The pass reads and writes the bf16 output (4 B) but runs slower than its bytes:
/// measured on the lent H100 (2026-11-25, calibration/runs/raw/float8-h100-2026-11-25/gemm.csv,
/// `scaled_mm_rowwise_torchao_postscale` less `scaled_mm_tensorwise`), the median over the 55
/// gradient-GEMM outputs of 32M elements or more is 3.22 ps per element, 9.6 B at the H100
/// profile's 2,995 GB/s stream rate. The weight gradient's (k x n) rescale adds no measurable time
/// (the kernel profile, below, needs no k x n term). Not fitted.
pub const ROWWISE_GRAD_SCALE_BYTES: f64 = 9.6;

/// Time of the rowwise recipe's column-wise cast of a linear's input (per input element, as bytes
/// at the stream rate) and of its output gradient (per element), over tensorwise's transposed
/// copy: the weight-gradient GEMM takes both scaled per column, an amax along the other axis
/// (torchao `hp_tensor_to_float8_dynamic`, `axiswise_dim = 0`). Fitted on the lent H100's
/// single-linear timings (2026-11-25, calibration/runs/raw/float8-h100-2026-11-25/linear.csv: the
/// rowwise less tensorwise time of one compiled linear's forward and backward at 16,384 tokens,
/// least squares over its 8 shapes on M x K and M x N: 19.5 and 5.8 B per element at 2,995 GB/s),
/// less the measured rescale (`ROWWISE_GRAD_SCALE_BYTES`) on M x K. The kernel profile of three of
/// those shapes (`profile/kernels.csv`) puts the whole difference in Inductor's cast kernels (the
/// GEMM kernels within 1%), and the two coefficients reproduce it within 3%.
pub const ROWWISE_INPUT_COLUMN_CAST_BYTES: f64 = 19.5 - ROWWISE_GRAD_SCALE_BYTES;
/// See [`ROWWISE_INPUT_COLUMN_CAST_BYTES`]: the output gradient's column-wise cast.
pub const ROWWISE_GRAD_COLUMN_CAST_BYTES: f64 = 5.8;

impl<'a> Builder<'a> {
    fn tokens(&self) -> u64 {
        self.w.sequences() * self.w.q_len() / self.pc.cp as u64
    }
    /// Tokens of the norms and residuals on this rank (split by TP under sequence parallelism).
    fn sp_tokens(&self) -> u64 {
        if self.pc.sp && self.pc.tp > 1 {
            self.tokens().div_ceil(self.pc.tp as u64)
        } else {
            self.tokens()
        }
    }
    fn push(&mut self, name: &'static str, kind: OpKind) {
        // Under LoRA every base weight is frozen: its GEMMs form no weight gradient, and the
        // embedding lookup (whose backward is only its weight gradient) has no backward.
        let frozen_weight = self.w.lora.is_some()
            && match kind {
                OpKind::Gemm { .. } => !matches!(name, "scores" | "attn_values") && !is_adapter(name),
                _ => name == "embedding",
            };
        let backward = if frozen_weight { Backward::Frozen } else { Backward::Mirror };
        self.ops.push(Op { name, kind, pass: Pass::Forward, backward });
    }
    fn push_with(&mut self, name: &'static str, kind: OpKind, backward: Backward) {
        self.ops.push(Op { name, kind, pass: Pass::Forward, backward });
    }
    fn gemm(&mut self, name: &'static str, m: u64, n: u64, k: u64) {
        self.quantize_input(name, (m * k) as f64);
        self.push(name, OpKind::Gemm { m, n, k, count: 1 });
    }
    /// A linear layer's input cast to FP8/FP4 before its GEMM, as Transformer Engine and torchao
    /// do it ([`quantize_bytes`] by recipe). Backward casts the output gradients alike
    /// (`backward_of` doubles memory ops). The router and the LM head stay in bf16 (TE's recipes),
    /// so they are not cast.
    fn quantize_input(&mut self, name: &'static str, elems: f64) {
        if stays_bf16(name) {
            return;
        }
        if self.w.stack == Stack::Trtllm && self.w.precision == Dtype::Fp8 {
            // TensorRT-LLM runs FP8 checkpoints with static per-tensor activation scales (the
            // ModelOpt checkpoints' calibrated `input_scale`), so no amax pass: one kernel reads
            // the bf16 input and writes it in FP8 (`TRTLLM_STATIC_FP8_QUANTIZE_BYTES`).
            self.push("quantize", OpKind::Memory { bytes: elems * TRTLLM_STATIC_FP8_QUANTIZE_BYTES, kernels: 1 });
            return;
        }
        if self.torchao_fp8() {
            if matches!(name, "expert_up" | "expert_down") {
                // Grouped experts are no `nn.Linear`: torchao leaves them in bf16 (or fp32).
                return;
            }
            // torchao's dynamic scaling under Inductor (`convert_to_float8_training`, then
            // `torch.compile`): the amax reduction fuses into the kernel that produces the input
            // (norm, SiLU-mul; measured kernels `triton_red_fused_abs_max_mul_silu...`), and one
            // cast kernel reads the bf16 input (2 B) and writes its fp8 copy and the transposed fp8
            // copy the weight-gradient GEMM takes (1 + 1 B). AOTAutograd's common-subexpression
            // pass leaves one cast where several linears read the same tensor (k and v after q,
            // gate after up): those carry a zero-byte marker. The backward casts each output
            // gradient alike (`backward_of` prices it from the GEMM's m x n). Under compile no fp8
            // copy is kept for backward (it is rebuilt there; `memory::layer_activation_bytes`).
            // The rowwise recipe's row-wise casts cost the same; its column-wise casts and the
            // rescale of its data gradients are priced in backward (`FP8_ROWWISE_SCALE`).
            let shared = matches!(name, "k_proj" | "v_proj" | "gate_proj");
            let op = if self.w.fp8_recipe == Fp8Recipe::Rowwise { FP8_CAST_ROWWISE } else { FP8_CAST };
            let (bytes, kernels) = if shared { (0.0, 0) } else { (elems * TORCHAO_CAST_BYTES, 1) };
            self.push(op, OpKind::Memory { bytes, kernels });
            return;
        }
        // Frozen weights (LoRA) form no weight gradient, so no transposed copy of the input; nor
        // does per-tensor FP8 on a GPU whose FP8 GEMMs read the row-wise copy in any layout.
        let per_tensor = self.w.precision == Dtype::Fp8 && matches!(self.w.fp8_recipe, Fp8Recipe::Tensorwise | Fp8Recipe::Delayed);
        let wgrad = self.w.mode == Mode::Train && self.w.lora.is_none() && !(self.w.fp8_non_tn && per_tensor);
        if let Some((per_elem, kernels)) = quantize_bytes(self.w.precision, self.w.fp8_recipe, wgrad) {
            self.push("quantize", OpKind::Memory { bytes: elems * per_elem, kernels });
        }
    }
    /// An elementwise op reading `reads` and writing `writes` tensors of `elems` elements each,
    /// in `kernels` launches (unfused stacks launch more and re-read more).
    fn memory(&mut self, name: &'static str, elems: f64, reads: f64, writes: f64, eager_kernels: u32) {
        let (traffic, kernels) = if self.w.stack.fused() {
            (reads + writes, 1)
        } else {
            // Unfused: every intermediate goes through HBM once more per extra kernel.
            (reads + writes + 2.0 * (eager_kernels.saturating_sub(1)) as f64, eager_kernels)
        };
        self.push(name, OpKind::Memory { bytes: elems * self.act * traffic, kernels });
    }
    /// An elementwise op whose unfused (eager) form is a known chain of kernels moving
    /// `eager_bytes` per element in all (fp32 intermediates included).
    fn memory_chain(&mut self, name: &'static str, elems: f64, reads: f64, writes: f64, eager_bytes: f64, eager_kernels: u32) {
        if self.w.stack.fused() {
            self.memory(name, elems, reads, writes, 1);
        } else {
            self.push(name, OpKind::Memory { bytes: elems * eager_bytes, kernels: eager_kernels });
        }
    }
    /// torchao float8 training of the linears under `torch.compile` (`--stack torch-compile` or
    /// `hf-compile` at `--precision fp8`).
    fn torchao_fp8(&self) -> bool {
        self.w.stack.torch() && self.w.stack.fused() && self.w.precision == Dtype::Fp8 && self.w.mode == Mode::Train
    }
    /// One GEMM for q, k and v, and one for gate and up: Transformer Engine's fused layers and the
    /// hand-written compiled loops. transformers keeps an `nn.Linear` per projection, and Inductor
    /// leaves each as its own cuBLAS call (measured: 340 GEMM kernels per Llama-3.2-1B training
    /// step both eager and compiled, calibration/runs/hf/profile/).
    /// Under torchtitan's per-op selective checkpointing ([`Recompute::SelectiveOp`]) the linears
    /// stay apart as the policy sees them: torchtitan's Llama keeps `wq`, `wk`, `wv` and `w1`,
    /// `w3` as separate `nn.Linear`s, and the policy saves or recomputes each one's `aten.mm`.
    fn fuses_linears(&self) -> bool {
        self.w.stack.fused() && !self.w.stack.hf() && self.w.recompute != Recompute::SelectiveOp
    }
    fn hidden_elems(&self) -> f64 {
        (self.sp_tokens() * self.model.hidden) as f64
    }
    /// Training under a `hf-*` stack: fp32 master weights under bf16 autocast, where the residual
    /// stream stays fp32 (the embedding's output is fp32, and fp32 + bf16 adds give fp32), so
    /// transformers' RMSNorm gets and returns fp32 and autocast casts its output to bf16 once per
    /// linear that reads it (autocast caches casts of weights only).
    fn hf_fp32_stream(&self) -> bool {
        self.w.stack.hf() && self.w.mode == Mode::Train
    }
    /// The norm before `consumers` autocast linears (see [`Builder::hf_fp32_stream`]).
    fn norm_for(&mut self, name: &'static str, consumers: u32) {
        if !self.hf_fp32_stream() {
            return self.norm(name);
        }
        let e = self.hidden_elems();
        if self.w.stack.fused() {
            // Inductor: one kernel reading the fp32 input, writing the bf16 copy the linears read
            // (and the fp32 output autograd keeps).
            self.push(name, OpKind::Memory { bytes: e * (4.0 + 4.0 + 2.0), kernels: 1 });
        } else {
            // .to(fp32) is a no-op; pow (r4 w4), mean (r4), + eps and rsqrt (tiny), x * rsqrt (r4
            // w4), .to(fp32) no-op, weight * x (r4 w4): 28 B/element in 5 kernels (Gemma's
            // `1.0 + weight` one more, on the weight only); then a cast (r4 w2) for each linear
            // that reads it.
            let offset = u32::from(self.model.style.rms_style == RmsStyle::OffsetScaleThenCast);
            self.push(name, OpKind::Memory { bytes: e * 28.0, kernels: 5 + offset });
            self.stream_cast(consumers);
        }
    }
    /// Autocast's cast of the fp32 residual stream to bf16 for each of `consumers` linears that
    /// read it (r4 w2 each; autocast caches casts of weights only): after a pre-norm, or, without
    /// one (OLMo-2's [`NormPlacement::Post`]), of the stream itself. Inductor writes the bf16 copy
    /// once. Nothing outside `hf-*` training, whose stream is bf16.
    fn stream_cast(&mut self, consumers: u32) {
        if !self.hf_fp32_stream() {
            return;
        }
        let e = self.hidden_elems();
        if self.w.stack.fused() {
            self.push("autocast_cast", OpKind::Memory { bytes: e * 6.0, kernels: 1 });
        } else {
            self.push("autocast_cast", OpKind::Memory { bytes: e * 6.0 * consumers as f64, kernels: consumers });
        }
    }
    fn norm(&mut self, name: &'static str) {
        let e = self.hidden_elems();
        self.bf16_norm(name, e);
    }
    /// An RMSNorm over `elems` bf16 elements (inference's stream, a linear's output), with the
    /// family's rounding ([`RmsStyle`]).
    fn bf16_norm(&mut self, name: &'static str, elems: f64) {
        match (self.model.norm, self.model.style.rms_style) {
            // HF-style RMSNorm in eager: x.float() (r2 w4), pow (r4 w4), mean (r4), + eps and
            // rsqrt (tiny), x * rsqrt (r4 w4), .to(bf16) (r4 w2), * weight (r2 w2): 36 B/element
            // in 8 kernels.
            (NormKind::RmsNorm, RmsStyle::CastThenScale) => self.memory_chain(name, elems, 1.0, 1.0, 36.0, 8),
            // OLMo-2: ... x * rsqrt (r4 w4), weight * x in fp32 (r4 w4), .to(bf16) (r4 w2): 40 B
            // in 8 kernels.
            (NormKind::RmsNorm, RmsStyle::ScaleThenCast) => self.memory_chain(name, elems, 1.0, 1.0, 40.0, 8),
            // Gemma: the same with `1.0 + weight.float()` (a kernel on the weight) before the
            // product: 40 B in 9 kernels.
            (NormKind::RmsNorm, RmsStyle::OffsetScaleThenCast) => self.memory_chain(name, elems, 1.0, 1.0, 40.0, 9),
            (NormKind::LayerNorm, _) => self.memory(name, elems, 1.0, 1.0, 1),
        }
    }
    /// A norm on a branch's output before the residual add (Gemma's `post_attention_layernorm` /
    /// `post_feedforward_layernorm`, OLMo-2's): bf16 in (the linear's output under autocast, or
    /// inference's stream) and bf16 out (`type_as(x)`, `.to(input_dtype)`).
    fn branch_norm(&mut self, name: &'static str) {
        let e = self.hidden_elems();
        self.bf16_norm(name, e);
    }
    /// TP collective entering a column-parallel region: all-gather under SP, nothing otherwise
    /// (its backward all-reduce is added by `backward_of`). On the torch stacks DTensor's
    /// layout copies follow it ([`Builder::sp_layout_copies`]).
    fn tp_enter(&mut self) {
        self.tp_enter_gathering(self.act);
    }
    /// [`Builder::tp_enter`] gathering `gather_elem` bytes an element (the conjugate
    /// reduce-scatter of the gradient in the activations' dtype).
    fn tp_enter_gathering(&mut self, gather_elem: f64) {
        if self.pc.tp > 1 && self.pc.sp {
            let elems = (self.tokens() * self.model.hidden) as f64;
            let (bytes, grad) = (elems * gather_elem, elems * self.act);
            let conjugate = OpKind::Comm { op: CollectiveOp::ReduceScatter, group: Group::Tp, bytes: grad };
            self.push_with("tp_all_gather", OpKind::Comm { op: CollectiveOp::AllGather, group: Group::Tp, bytes }, Backward::As(conjugate));
            if let Some((gather, _)) = self.sp_layout_copies(bytes) {
                // Forward: the gathered tensor's re-layout; backward: the copy before the
                // gradient's reduce-scatter (this all-gather's conjugate).
                let scatter = self.sp_layout_copies(grad).map(|c| c.1).expect("same condition");
                self.push_with(SP_LAYOUT_COPY, gather, Backward::As(scatter));
            }
        }
    }
    /// TP collective leaving a row-parallel region: reduce-scatter under SP, all-reduce otherwise.
    fn tp_exit(&mut self) {
        self.tp_exit_gathering(self.act);
    }
    /// [`Builder::tp_exit`] whose backward all-gather moves `gather_elem` bytes an element.
    fn tp_exit_gathering(&mut self, gather_elem: f64) {
        if self.pc.tp > 1 {
            let elems = (self.tokens() * self.model.hidden) as f64;
            let bytes = elems * self.act;
            let op = if self.pc.sp { CollectiveOp::ReduceScatter } else { CollectiveOp::AllReduce };
            if let Some((_, scatter)) = self.sp_layout_copies(bytes).filter(|_| self.pc.sp) {
                // Forward: the copy before the reduce-scatter; backward: the re-layout of the
                // gradient's all-gather (this reduce-scatter's conjugate).
                let gather = self.sp_layout_copies(elems * gather_elem).map(|c| c.0).expect("same condition");
                self.push_with(SP_LAYOUT_COPY, scatter, Backward::As(gather));
            }
            let backward = if self.pc.sp {
                Backward::As(OpKind::Comm { op: CollectiveOp::AllGather, group: Group::Tp, bytes: elems * gather_elem })
            } else {
                Backward::Mirror
            };
            self.push_with("tp_reduce", OpKind::Comm { op, group: Group::Tp, bytes }, backward);
        }
    }
    /// Bytes an element of the all-gathers around a decoder block's column-parallel linears:
    /// one under torchao's float8 with tensorwise scaling on the torch stacks, the activations'
    /// otherwise. torchtitan (0.1.0 `apply_tp`, `enable_float8_tensorwise_tp`) parallelizes the
    /// block linears with torchao's `Float8ColwiseParallel` / `Float8RowwiseParallel` /
    /// `PrepareFloat8ModuleInput` (torchao 0.18.0 `float8/float8_tensor_parallel.py`): the
    /// sequence-sharded input is cast to float8 (`hp_tensor_to_float8_dynamic`) before its
    /// all-gather, and the row-parallel output's gradient is cast
    /// (`NoopFwToFloat8BwDynamic`) before the backward's all-gather; the reduce-scatters stay in
    /// bf16. The rowwise recipes keep plain TP ("all-gather happens in high precision"), as do
    /// the embedding and the LM head. The tensorwise scales' amax all-reduces over the TP group
    /// (a few bytes each) are not priced.
    fn block_gather_elem(&self) -> f64 {
        let float8_tp =
            self.w.stack.hand_written() && self.w.mode == Mode::Train && self.w.precision == Dtype::Fp8 && self.w.fp8_recipe == Fp8Recipe::Tensorwise;
        if float8_tp {
            Dtype::Fp8.bytes()
        } else {
            self.act
        }
    }
    /// DTensor's layout copies around a sequence-parallel collective on the torch stacks, as
    /// (after an all-gather, before a reduce-scatter) memory ops for a collective of `bytes`.
    /// torchtitan's plan shards the norms' and the residual's sequence dimension (`Shard(1)` of a
    /// `[batch, seq, hidden]` activation; torchtitan 0.1.0 `models/llama3/infra/parallelize.py`
    /// `apply_tp`), and NCCL gathers and scatters along dimension 0 only. torch 2.11's functional
    /// collectives (`torch/distributed/_functional_collectives.py`, reached from
    /// `Shard._to_replicate_tensor` and `Shard._reduce_shard_tensor` in
    /// `distributed/tensor/placement_types.py`) therefore
    /// - after `all_gather_tensor(gather_dim=1)` rebuild the gathered tensor as
    ///   `cat(chunk(res, tp, dim=0), dim=1)` (`torch._utils._maybe_view_chunk_cat`: a view only
    ///   when every dimension before the gather dimension is 1, i.e. one sequence per micro-batch;
    ///   otherwise a copy: read and write of the gathered bytes);
    /// - before `reduce_scatter_tensor(scatter_dim=1)` always run `cat(chunk(x, tp, dim=1))`, a
    ///   copy of the whole input.
    ///
    /// torchtitan's own comment names the cost ("we can accelerate Sequence Parallel by folding
    /// (and unfolding) the batch dimension and the sequence dimension", pytorch/torchtitan#437).
    /// Under async TP the micro-pipelined collectives skip them (`cost::lower`). Megatron's and
    /// the engines' TP run sequence-first activations (dimension 0): no copy. Training only (the
    /// plan is torchtitan's training plan; prefill and decode on the torch stacks keep their
    /// collectives as they were). `None` where the copies do not apply.
    fn sp_layout_copies(&self, bytes: f64) -> Option<(OpKind, OpKind)> {
        if !(self.pc.tp > 1 && self.pc.sp && self.w.mode == Mode::Train && self.w.stack.hand_written()) {
            return None;
        }
        let gather = if self.w.sequences() > 1 { OpKind::Memory { bytes: 2.0 * bytes, kernels: 1 } } else { OpKind::Memory { bytes: 0.0, kernels: 0 } };
        Some((gather, OpKind::Memory { bytes: 2.0 * bytes, kernels: 1 }))
    }
    fn residual(&mut self) {
        let e = self.hidden_elems();
        if self.w.dropout {
            self.memory("dropout", e, 1.0, 2.0, 2);
        }
        if self.hf_fp32_stream() && !self.w.stack.fused() {
            // fp32 residual + bf16 branch -> fp32 (r4 r2 w4).
            self.push("residual_add", OpKind::Memory { bytes: e * 10.0, kernels: 1 });
        } else if !self.w.stack.fused() || self.w.dropout || self.w.stack == Stack::Megatron {
            // Megatron-Core adds the residual in its own kernel (`TransformerLayer`'s
            // `self_attn_bda` / `mlp_bda`, `bias_dropout_add`): Transformer Engine's fused
            // LayerNormLinear / LayerNormMLP take the norm, not the residual add before it.
            self.memory("residual_add", e, 2.0, 1.0, 1);
        }
    }

    /// The LoRA adapter of a targeted linear layer `d_in -> d_out` (full, unsharded widths), as
    /// Megatron-Bridge's `ParallelLinearAdapter` runs it (see `lora`), right after the base GEMM.
    /// Tensor-parallel traffic, per adapter:
    /// - of a column-parallel layer: under SP the norm's output gathered (its own all-gather,
    ///   reduce-scattered back in backward); `A`'s output `[t, r]` all-gathered; in backward the
    ///   input gradient of `A` all-reduced (`[t, d_in]`, without SP) and that of `B` (`[t, r]`);
    /// - of a row-parallel layer: `A`'s partial sums all-reduced (`[t, r]`, and `B`'s input
    ///   gradient in backward); `B`'s output all-gathered to `[t, d_out]` (its backward is a local
    ///   split; under SP it is scattered back to the sequence shards, an all-gather in backward).
    ///
    /// Then the `alpha / r` scale (read and write the output) and the add to the base output (read
    /// two, write one).
    fn adapter(&mut self, target: LoraTarget, d_in: u64, d_out: u64) {
        let Some(lora) = &self.w.lora else { return };
        if !lora.targets(target) {
            return;
        }
        let (r, tp, t) = (lora.rank, self.pc.tp as u64, self.tokens());
        let sp = self.pc.sp && tp > 1;
        let act = self.act;
        let out_elems = if target.column_parallel() {
            if sp {
                self.push_with(
                    "lora_sp_gather",
                    OpKind::Comm { op: CollectiveOp::AllGather, group: Group::Tp, bytes: (t * d_in) as f64 * act },
                    Backward::Mirror,
                );
            }
            self.push("lora_a", OpKind::Gemm { m: t, n: r / tp, k: d_in, count: 1 });
            if tp > 1 {
                let grad = if sp { 0.0 } else { (t * d_in) as f64 * act } + (t * r) as f64 * act;
                let gather = OpKind::Comm { op: CollectiveOp::AllGather, group: Group::Tp, bytes: (t * r) as f64 * act };
                self.push_with("lora_gather", gather, Backward::As(OpKind::Comm { op: CollectiveOp::AllReduce, group: Group::Tp, bytes: grad }));
            }
            self.push("lora_b", OpKind::Gemm { m: t, n: d_out / tp, k: r, count: 1 });
            t * d_out / tp
        } else {
            self.push("lora_a", OpKind::Gemm { m: t, n: r, k: d_in / tp, count: 1 });
            if tp > 1 {
                self.push_with("lora_reduce", OpKind::Comm { op: CollectiveOp::AllReduce, group: Group::Tp, bytes: (t * r) as f64 * act }, Backward::Mirror);
            }
            self.push("lora_b", OpKind::Gemm { m: t, n: d_out / tp, k: r, count: 1 });
            if tp > 1 {
                let bytes = (t * d_out) as f64 * act;
                let back = if sp { Backward::As(OpKind::Comm { op: CollectiveOp::AllGather, group: Group::Tp, bytes }) } else { Backward::Frozen };
                self.push_with("lora_gather", OpKind::Comm { op: CollectiveOp::AllGather, group: Group::Tp, bytes }, back);
            }
            self.sp_tokens() * d_out
        };
        self.scale_add(out_elems as f64);
    }

    /// LoRA's `x * (alpha / r)` (read and write the adapter's output) and the add to the base
    /// output (read two, write one), two kernels; in backward the scale's gradient only (the add
    /// passes its gradient through).
    fn scale_add(&mut self, elems: f64) {
        let act = self.act;
        let back = Backward::As(OpKind::Memory { bytes: elems * act * 2.0, kernels: 1 });
        self.push_with("lora_scale_add", OpKind::Memory { bytes: elems * act * 5.0, kernels: 2 }, back);
    }

    /// The adapters of `local` routed experts' layer `d_in -> d_out` (per-expert widths after
    /// expert TP), `m` tokens each: `A` and `B` as grouped GEMMs, then scale and add.
    fn expert_adapter(&mut self, target: LoraTarget, m: u64, d_in: u64, d_out: u64, local: u64) {
        let Some(lora) = &self.w.lora else { return };
        if !lora.targets(target) {
            return;
        }
        let r = lora.rank;
        self.push("lora_a", OpKind::Gemm { m, n: r, k: d_in, count: local });
        self.push("lora_b", OpKind::Gemm { m, n: d_out, k: r, count: local });
        self.scale_add((m * local * d_out) as f64);
    }

    fn attention(&mut self) {
        let m = self.model;
        let tp = self.pc.tp as u64;
        let t = self.tokens();
        let heads = m.n_heads / tp;
        let (qk_dim, v_dim, kv_heads) = match &m.mla {
            Some(mla) => {
                let qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim;
                if mla.q_lora_rank > 0 {
                    self.gemm("q_down", t, mla.q_lora_rank, m.hidden);
                    self.memory_chain("q_norm", (t * mla.q_lora_rank) as f64, 1.0, 1.0, 36.0, 8);
                    self.gemm("q_up", t, heads * qk, mla.q_lora_rank);
                } else {
                    self.gemm("q_proj", t, heads * qk, m.hidden);
                }
                self.gemm("kv_down", t, mla.kv_lora_rank + mla.qk_rope_head_dim, m.hidden);
                self.memory_chain("kv_norm", (t * mla.kv_lora_rank) as f64, 1.0, 1.0, 36.0, 8);
                self.gemm("kv_up", t, heads * (mla.qk_nope_head_dim + mla.v_head_dim), mla.kv_lora_rank);
                (qk, mla.v_head_dim, heads)
            }
            None => {
                let kv_heads = (m.n_kv_heads / tp).max(1);
                if self.fuses_linears() || m.style.fused_projections {
                    self.gemm("qkv_proj", t, (heads + 2 * kv_heads) * m.head_dim, m.hidden);
                } else {
                    self.gemm("q_proj", t, heads * m.head_dim, m.hidden);
                    self.gemm("k_proj", t, kv_heads * m.head_dim, m.hidden);
                    self.gemm("v_proj", t, kv_heads * m.head_dim, m.hidden);
                }
                let [(target, d_in, d_out), _] = lora::attention_dims(m);
                self.adapter(target, d_in, d_out);
                (m.head_dim, m.head_dim, kv_heads)
            }
        };
        if m.qk_norm {
            // Qwen3's and Gemma 3's q_norm and k_norm: RMSNorm over each head's queries and keys;
            // OLMo-2's over the whole projections (the same elements): the family's kernel chain
            // on bf16 q and k.
            let qk_elems = (t * (heads + kv_heads) * qk_dim) as f64;
            self.bf16_norm("qk_norm", qk_elems);
        }
        // RoPE on q and k (HF: rotate_half, 2 muls, add, for each: ~6 kernels); none without a
        // position embedding (Nemotron-H).
        match (&m.mla, self.w.stack.hf()) {
            (Some(mla), true) if m.position != Position::None => {
                // transformers' MLA (`DeepseekV3Attention.forward`, 5.17.0) rotates only the rope
                // parts, the query's `qk_rope_head_dim` per head and the one shared rope key,
                // with `apply_rotary_pos_emb_interleave` (modeling_deepseek_v3.py lines 350-357):
                // per element four half-width products (r2 w2 on half: 8 B), a difference and a
                // sum (r4 w2 on half: 6 B), the `cat` (r2 w2: 4 B): 18 B in 7 kernels.
                let rope_elems = (t * (heads + 1) * mla.qk_rope_head_dim) as f64;
                self.memory_chain("rope", rope_elems, 1.0, 1.0, 18.0, 7);
                if self.w.mode != Mode::Decode {
                    // Then three copies the fused stacks do not make: `torch.cat((q_pass, q_rot))`
                    // (line 471), `expand_kv`'s key filled by two `copy_` (k_nope out of
                    // `kv_b_proj`'s output, the shared rope key broadcast over the heads; lines
                    // 428-434), and SDPA's output, [b, h, s, v] after a contiguous query, made
                    // contiguous by `transpose(1, 2).contiguous()` (integrations/sdpa_attention.py
                    // line 168; `torch.cuda.memory._record_memory_history` shows each as its own
                    // tensor, calibration/runs/raw/mla-prefill-h100-2026-11-25/): read and write
                    // each element once.
                    let qk_elems = (t * heads * qk_dim) as f64;
                    self.push("mla_query_cat", OpKind::Memory { bytes: qk_elems * self.act * 2.0, kernels: 1 });
                    self.push("mla_key_fill", OpKind::Memory { bytes: qk_elems * self.act * 2.0, kernels: 2 });
                    self.push("mla_out_copy", OpKind::Memory { bytes: (t * heads * v_dim) as f64 * self.act * 2.0, kernels: 1 });
                }
            }
            _ if m.position != Position::None => {
                let rope_elems = (t * (heads * qk_dim + kv_heads * qk_dim)) as f64;
                // Eager RoPE per element: x * cos (r2 w2), rotate_half's neg and cat (r2 w2, r4 w2),
                // * sin (r2 w2), add (r4 w2): 22 B in 5 kernels (6 with the slices' copies).
                self.memory_chain("rope", rope_elems, 1.0, 1.0, 22.0, 6);
            }
            _ => {}
        }
        let seqs = self.w.sequences();
        let cp = self.pc.cp as u64;
        // Context parallelism (training and prefill: decode is not split). `ring`: the attention
        // runs as `cp` equal blocks per (sequence, head) (`ring_blocks`), each `2c` queries x `c`
        // keys non-causal, c = seq / (2 cp): TE's load-balanced ring attention computes, per rank,
        // one causal `2c x 2c` diagonal block (2c^2 of work) and `cp - 1` half blocks (2c x c or c x
        // 2c, 2c^2 each): seq^2 / (2 cp), 1 / cp of the causal total on every rank.
        let cp_split = cp > 1 && self.w.q_len() > 1;
        // PyTorch's own context parallelism (torchtitan) rather than Transformer Engine's.
        let torch_cp = cp_split && self.w.stack.hand_written();
        let mut ring_blocks = 1;
        let (mut attn_heads, mut q_len, mut kv_len, mut causal) = (heads, self.w.q_len() / cp, self.w.context_len(), true);
        if cp_split {
            let seq = self.w.q_len();
            let chunk = seq / (2 * cp);
            // Keys and values of the whole sequence (per TP-local KV head), bf16.
            let kv_all = (seqs * seq * kv_heads * (qk_dim + v_dim)) as f64 * self.act;
            match self.w.cp_comm {
                CpComm::AllGather if torch_cp => {
                    // torchtitan repeats the key/value heads to the query heads before SDPA
                    // (torchtitan 0.1.0 `models/llama3/model/model.py` lines 185-186,
                    // `repeat_kv`), so what the CP group gathers is `heads` wide. Each rank's
                    // dk/dv then go round the ring in fp32 (`TORCH_CP_DKV_ROTATE`).
                    let kv_rep = (seqs * seq * heads * (qk_dim + v_dim)) as f64 * self.act;
                    self.push(TORCH_CP_KV_GATHER, OpKind::Comm { op: CollectiveOp::AllGather, group: Group::Cp, bytes: kv_rep });
                    ring_blocks = cp;
                    (q_len, kv_len, causal) = (2 * chunk, chunk, false);
                }
                CpComm::P2p | CpComm::AllGather => {
                    let name = if self.w.cp_comm == CpComm::P2p { "cp_kv_p2p" } else { "cp_all_gather_kv" };
                    self.push(name, OpKind::Comm { op: CollectiveOp::AllGather, group: Group::Cp, bytes: kv_all });
                    ring_blocks = cp;
                    (q_len, kv_len, causal) = (2 * chunk, chunk, false);
                }
                CpComm::A2a => {
                    // Sequence-sharded q, k, v (this rank's seq / cp tokens) to head-sharded over the
                    // whole sequence.
                    let qkv = (seqs * (seq / cp) * (heads * qk_dim + kv_heads * (qk_dim + v_dim))) as f64 * self.act;
                    self.push("cp_a2a_qkv", OpKind::Comm { op: CollectiveOp::AllToAll, group: Group::Cp, bytes: qkv });
                    attn_heads = heads / cp;
                    (q_len, kv_len) = (seq, seq);
                }
            }
        }
        // Packed sequences (THD with `cu_seqlens`): TE's fused attention runs each document
        // causally against itself, `seq / doc` documents of `doc` tokens per sequence (the last
        // one rounded up to a whole document), instead of one causal `seq x seq` block.
        let seqs = match self.w.packed_doc_len {
            Some(doc) if !cp_split && self.w.mode != Mode::Decode && doc < q_len => {
                let docs = q_len.div_ceil(doc);
                (q_len, kv_len) = (doc, doc);
                seqs * docs
            }
            _ => seqs,
        };
        let attn_kv_heads = if self.w.cp_comm == CpComm::A2a && cp_split { (kv_heads / cp).max(1) } else { kv_heads };
        // transformers under torch.compile: while Dynamo traces, `masking_utils._ignore_causal_mask_sdpa`
        // returns False (`is_tracing`), so the model builds an explicit boolean mask [b, 1, q, kv]
        // and SDPA gets `attn_mask` instead of `is_causal=True`: cuDNN's kernel then computes every
        // block of the score matrix (no causal skipping) and reads the mask, broadcast over the
        // heads, once per head in the forward (twice in the backward: `backward_of` doubles memory
        // ops). Measured (calibration/runs/hf/profile/, Llama-3.2-1B mb2 x 4096 on the lent H100,
        // 2026-11-24): the same cuDNN SDPA kernels take 16.4 ms forward and 45.3 ms backward per
        // step compiled against 5.3 and 14.2 ms eager (3.1x, 3.2x). Decode (one query) skips it.
        let masked_sdpa = self.w.stack == Stack::HfCompile && q_len > 1;
        if masked_sdpa {
            causal = false;
            if self.w.flash_attention || self.w.mode == Mode::Decode {
                let mask = (seqs * heads * q_len * kv_len) as f64;
                self.push("sdpa_mask", OpKind::Memory { bytes: mask, kernels: 0 });
            }
        }
        if self.w.stack.hf() && self.w.mode == Mode::Decode {
            // transformers' DynamicCache.update: `torch.cat([cache, new], dim=-2)` for the keys and
            // for the values of every layer at every token, a new tensor each time: the whole
            // layer's cache read and written again (what it caches per token: K and V per KV head,
            // or MLA's latent and RoPE key).
            let per_token = match &m.mla {
                Some(mla) => (mla.kv_lora_rank + mla.qk_rope_head_dim) as f64,
                None => (kv_heads * (qk_dim + v_dim)) as f64,
            };
            let cached = (seqs * self.w.kv_len) as f64 * per_token * self.act;
            let new = (seqs as f64) * per_token * self.act;
            self.push("cache_cat", OpKind::Memory { bytes: 2.0 * cached + 3.0 * new, kernels: 2 });
        }
        // Sliding-window layers (GPT-OSS): a fused kernel given the window (Transformer Engine's
        // `window_size`, TensorRT-LLM's and vLLM's sliding-window attention) computes only the
        // score tiles inside the band, and a decode step reads only the window's keys (every
        // engine, and transformers' `DynamicSlidingWindowLayer`, caches only the window).
        // transformers' GPT-OSS runs eager attention in training and prefill
        // (`_supports_sdpa = False`, transformers 5.24.0 `modeling_gpt_oss.py`): the whole
        // score matrix, masked, so no window there. Context parallelism's ring blocks are
        // priced full (non-causal blocks; not modelled with a window).
        let mut window = m.sliding_window.as_ref().filter(|_| causal && (!self.w.stack.hf() || self.w.mode == Mode::Decode)).map(|sw| AttnWindow {
            window: sw.window,
            share: m.sliding_share(),
            masked: false,
        });
        // transformers' SDPA models with sliding layers (Gemma 2/3, Phi-3; not GPT-OSS, whose
        // attention is eager, above): a sliding layer gets `create_sliding_window_causal_mask`'s
        // mask once its keys reach the window, since `_ignore_causal_mask_sdpa` does not skip it
        // then (transformers 5.17.0 `masking_utils.py` lines 263-264: `local_attention_size is not
        // None and kv_length >= local_attention_size`); below the window the layer runs causal as
        // a full one. With `attn_mask`, `sdpa_attention_forward` passes `is_causal=False`
        // (integrations/sdpa_attention.py line 124), so the kernel computes every score tile and
        // reads the mask, broadcast over the heads; under GQA it first repeats k and v to every
        // query head (`use_gqa_in_sdpa` is false with a mask, lines 27-36: `repeat_kv`). A decode
        // step's mask is one row per sequence (the window's keys, `DynamicSlidingWindowLayer`).
        if let Some(sw) = m.sliding_window.as_ref().filter(|_| self.w.stack.hf() && !m.attention_sinks && !masked_sdpa) {
            let keys = if self.w.mode == Mode::Decode { sw.window.min(kv_len) } else { kv_len };
            if kv_len >= sw.window {
                let share = m.sliding_share();
                if self.w.mode != Mode::Decode {
                    window = Some(AttnWindow { window: sw.window, share, masked: true });
                }
                if self.w.flash_attention || self.w.mode == Mode::Decode {
                    let mask = (seqs * heads * q_len * keys) as f64 * share;
                    self.push("sdpa_mask", OpKind::Memory { bytes: mask, kernels: 0 });
                }
                if heads > attn_kv_heads {
                    let bytes = (seqs * keys * (heads + attn_kv_heads) * (qk_dim + v_dim)) as f64 * self.act * share;
                    // Two copies (k, v) per sliding layer: this op stands for every layer of its kind.
                    self.push("repeat_kv", OpKind::Memory { bytes, kernels: (2.0 * share).round() as u32 });
                }
            }
        }
        if self.w.flash_attention || self.w.mode == Mode::Decode {
            // Keys and values read: per KV head (GQA), or MLA's latent cache when decoding.
            let kv_bytes = match (&m.mla, self.w.mode) {
                (Some(mla), Mode::Decode) => (seqs * kv_len * (mla.kv_lora_rank + mla.qk_rope_head_dim)) as f64 * self.act,
                _ => (ring_blocks * seqs * kv_len * attn_kv_heads * (qk_dim + v_dim)) as f64 * self.w.kv_elem_bytes(),
            };
            self.push(
                "attention",
                OpKind::Attention {
                    batch_heads: ring_blocks * seqs * attn_heads,
                    q_len,
                    kv_len,
                    head_dim_qk: qk_dim,
                    head_dim_v: v_dim,
                    causal,
                    backward: false,
                    kv_bytes,
                    window,
                },
            );
            if ring_blocks > 1 && torch_cp {
                // PyTorch's ring attention around its `cp` SDPA calls on the busiest rank (the
                // last): `cp - 1` fp32 merges of a whole block's output, the merger's two casts,
                // and `cp - 1` bf16 concatenations of the keys and values to send (heads wide,
                // `repeat_kv`); its backward, the fp32 gradient accumulation and copies
                // (`TORCH_CP_BWD_*`) in place of twice these bytes.
                let q_elems = (seqs * q_len * heads * v_dim) as f64;
                let kv_elems = (seqs * q_len * heads * (qk_dim + v_dim)) as f64;
                let rot = (ring_blocks - 1) as f64;
                let fwd = q_elems * (TORCH_CP_MERGE_CAST_BYTES + TORCH_CP_MERGE_BYTES * rot) + kv_elems * TORCH_CP_KV_CAT_BYTES * rot;
                let bwd = q_elems * (TORCH_CP_BWD_FIXED_BYTES + TORCH_CP_BWD_ROTATION_BYTES * rot) + kv_elems * TORCH_CP_KV_CAT_BYTES * rot;
                let n = (ring_blocks - 1) as u32;
                // Eager kernels: per merge the cast, three full-size and five per-row ops; per
                // backward rotation the q accumulate, two partial adds and their concatenations,
                // the dk/dv concatenation and the key/value one.
                let back = Backward::As(OpKind::Memory { bytes: bwd, kernels: 10 + 7 * n });
                self.push_with(TORCH_CP_MERGE, OpKind::Memory { bytes: fwd, kernels: 2 + 10 * n }, back);
            } else if ring_blocks > 1 {
                // Each block after the first merges its partial output into the running one by
                // their log-sum-exps (TE's `flash_attn_fwd_out_correction`): read both bf16
                // outputs, write one, `ring_blocks - 1` times.
                let out = (seqs * q_len * heads * v_dim) as f64 * self.act;
                self.push("cp_out_correction", OpKind::Memory { bytes: 3.0 * out * (ring_blocks - 1) as f64, kernels: (ring_blocks - 1) as u32 });
            }
        } else {
            // Unfused: QK^T and PV as batched GEMMs with the score matrix through HBM.
            let bh = ring_blocks * seqs * attn_heads;
            self.push("scores", OpKind::Gemm { m: q_len, n: kv_len, k: qk_dim, count: bh });
            let scores = (bh * q_len * kv_len) as f64;
            self.memory("softmax", scores, 1.0, 1.0, 3);
            if self.w.dropout {
                self.memory("attention_dropout", scores, 1.0, 2.0, 2);
            }
            self.push("attn_values", OpKind::Gemm { m: q_len, n: v_dim, k: kv_len, count: bh });
        }
        if cp_split && self.w.cp_comm == CpComm::A2a {
            // The output, head-sharded over the whole sequence, back to this rank's tokens.
            let o = (seqs * (self.w.q_len() / cp) * heads * v_dim) as f64 * self.act;
            self.push("cp_a2a_out", OpKind::Comm { op: CollectiveOp::AllToAll, group: Group::Cp, bytes: o });
        }
        self.gemm("out_proj", t, m.hidden, heads * v_dim);
        if m.mla.is_none() {
            let [_, (target, d_in, d_out)] = lora::attention_dims(m);
            self.adapter(target, d_in, d_out);
        }
    }

    fn dense_ffn(&mut self, width: u64, name_up: &'static str, name_down: &'static str) {
        let m = self.model;
        let t = self.tokens();
        let f = width / self.pc.tp as u64;
        let up = if m.ffn_kind == FfnKind::Gated { 2 * width } else { width };
        match m.ffn_kind {
            FfnKind::Gated => {
                if self.fuses_linears() || m.style.fused_projections {
                    self.gemm(name_up, t, 2 * f, m.hidden);
                } else {
                    self.gemm(name_up, t, f, m.hidden);
                    self.gemm("gate_proj", t, f, m.hidden);
                }
                self.adapter(LoraTarget::Fc1, m.hidden, up);
                self.memory("silu_mul", (t * f) as f64, 2.0, 1.0, 2);
            }
            FfnKind::Plain => {
                self.gemm(name_up, t, f, m.hidden);
                self.adapter(LoraTarget::Fc1, m.hidden, up);
                self.memory("gelu", (t * f) as f64, 1.0, 1.0, 1);
            }
        }
        self.gemm(name_down, t, m.hidden, f);
        self.adapter(LoraTarget::Fc2, width, m.hidden);
    }

    /// The router after its linear: score, top-k and the top-k normalization variant
    /// ([`crate::model::Router`]). Fused stacks run it as one kernel over tokens x experts
    /// (Transformer Engine's `fused_topk_with_score_function` under Megatron's
    /// `moe_router_fusion`; torch.compile; the serving engines' fused top-k kernels). Eager
    /// PyTorch launches one kernel per step, as transformers 5.17.0's routers do:
    /// - `router_softmax_topk`: the score (softmax or sigmoid) and `torch.topk` over tokens x
    ///   experts;
    /// - `router_expert_bias`: the bias added to the scores for the choice (`scores +
    ///   e_score_correction_bias`, tokens x experts);
    /// - `router_group_limit`: group-limited choice (`DeepseekV3TopkRouter`): the top-2 per group,
    ///   their sum, the top groups, the zeroed mask, its scatter, its expansion to tokens x
    ///   experts, the `masked_fill` of the scores and the `gather` of the k weights: 8 kernels,
    ///   moving the scores about four times (read for the group top-2, the mask written, the
    ///   scores read and written by the fill; the group-sized tensors are ignored);
    /// - `router_topk_norm`: the k weights' sum and the division by it (`norm_topk_prob`, k > 1);
    /// - `router_scale`: the multiply by `routed_scaling_factor` (when it is not 1).
    ///
    /// GPT-OSS's top-k of the logits then softmax over the k is priced as softmax, top-k and the
    /// renormalization (the same weights; one kernel more than it launches), Llama-4's scatter
    /// of the top-k logits into a tokens x experts tensor before its sigmoid as the score and the
    /// top-k. Megatron's expert-bias update (`_update_router_expert_bias` in Megatron-Core 0.16.1
    /// `finalize_model_grads.py`: one stacked update of layers x experts floats per step) is not
    /// priced; transformers does not update the bias in training.
    ///
    /// Megatron stays one kernel although most Megatron-Bridge 0.6.2 recipes set
    /// `moe_router_fusion = False` (Megatron-Core's default; e.g. `recipes/qwen/h100/qwen3_moe.py`,
    /// `recipes/nemotronh/gb200/nemotron_3_nano.py`), whose unfused `topk_routing_with_score_function`
    /// launches several: the published rows' predictions are unchanged, and pricing those kernels
    /// (their host cost sits under the recipes' `moe_router` CUDA-graph scope where they set it)
    /// is left to the joint refit of the Megatron constants.
    fn router_topk(&mut self, moe: &crate::model::Moe, t: u64) {
        let te = (t * moe.n_experts as u64) as f64;
        if self.w.stack.fused() {
            self.memory("router_softmax_topk", te, 1.0, 1.0, 1);
            return;
        }
        let (r, tk) = (moe.router, (t * moe.top_k as u64) as f64);
        self.memory("router_softmax_topk", te, 1.0, 1.0, 2);
        if r.expert_bias {
            self.memory("router_expert_bias", te, 1.0, 1.0, 1);
        }
        if moe.expert_groups > 0 {
            self.push("router_group_limit", OpKind::Memory { bytes: te * self.act * 4.0, kernels: 8 });
        }
        if r.norm_topk_prob && moe.top_k > 1 {
            self.memory("router_topk_norm", tk, 1.0, 1.0, 2);
        }
        if r.routed_scaling_factor != 1.0 {
            self.memory("router_scale", tk, 1.0, 1.0, 1);
        }
    }

    fn moe_ffn(&mut self) {
        let m = self.model;
        let moe = m.moe.as_ref().expect("moe layer of a dense model");
        let pc = self.pc;
        // Tokens routed from this rank: SP-split when TP > 1 (Megatron requires SP with MoE + TP).
        let t = self.sp_tokens();
        self.gemm("router", t, moe.n_experts as u64, m.hidden);
        self.router_topk(moe, t);
        let routed = t * moe.top_k as u64;
        // What the dispatcher moves over the EP group, one way (the combine moves it back).
        let (ep, k) = (pc.ep as f64, moe.top_k as f64);
        let (comm_op, dispatch_bytes) = match self.w.moe_dispatcher {
            MoeDispatcher::AllToAll => (CollectiveOp::AllToAll, routed as f64),
            // Copies of a token to distinct ranks: ep (1 - (1 - 1/ep)^k) for experts spread evenly.
            MoeDispatcher::Flex => (CollectiveOp::AllToAll, t as f64 * (ep * (1.0 - (1.0 - 1.0 / ep).powf(k))).min(k)),
            // Every rank receives all ranks' tokens (the nccl-tests buffer is the gathered size).
            MoeDispatcher::AllGather => (CollectiveOp::AllGather, t as f64 * ep),
        };
        // The busiest rank receives its experts' load ([`Workload::expert_load`]: routing imbalance,
        // or the capacity) in the dispatch and sends it back in the combine; an all-gather
        // gathers every token whatever the routing.
        let load = if comm_op == CollectiveOp::AllGather { 1.0 } else { self.w.expert_load() };
        let a2a_bytes = dispatch_bytes * load * m.hidden as f64 * self.act;
        let combine_op = if comm_op == CollectiveOp::AllGather { CollectiveOp::ReduceScatter } else { CollectiveOp::AllToAll };
        // Outside the hf stacks, the permutations around the experts: padded to capacity, the
        // permuted buffer holds `factor` x the routed rows (zeros in the padding; dropped rows are
        // not counted, how many depends on the routing); DeepEP permutes the rows the busiest rank
        // received.
        let permutation = self.megatron_permutation(moe);
        let permuted_rows = routed as f64 * self.w.moe_capacity.filter(|c| c.pad).map_or(1.0, |c| c.factor);
        let received_rows = dispatch_bytes * self.w.expert_load();
        if pc.ep > 1 {
            self.push("ep_dispatch", OpKind::Comm { op: comm_op, group: Group::Ep, bytes: a2a_bytes });
        }
        if self.w.stack.hf() {
            // transformers' grouped_mm experts path (integrations/moe.py): argsort of the expert
            // ids, histc and cumsum for the offsets, the inverse permutation (index kernels on
            // t x top_k ids), then the gather of every routed row (read and write a hidden row).
            self.push("route_index", OpKind::Memory { bytes: routed as f64 * 8.0 * 4.0, kernels: 6 });
            self.push("permute", OpKind::Memory { bytes: (routed * m.hidden) as f64 * self.act * 2.0, kernels: 1 });
            // transformers 5.17's EP-sentinel handling, run also on one GPU: `masked_fill_` of the
            // gathered rows (read and write them), before the up projection.
            self.push("sentinel_mask", OpKind::Memory { bytes: (routed * m.hidden) as f64 * self.act * 2.0, kernels: 1 });
        } else {
            let rows = permuted_rows;
            match permutation {
                MegatronPermutation::Other => self.memory("permute", rows * m.hidden as f64, 1.0, 1.0, 2),
                MegatronPermutation::Separate { sort } => {
                    self.memory("permute", rows * m.hidden as f64, 1.0, 1.0, 2);
                    if sort {
                        self.memory("sort_chunks", rows * m.hidden as f64, 1.0, 1.0, 1);
                    }
                }
                MegatronPermutation::Received => {
                    self.push("permute", OpKind::Memory { bytes: (received_rows + rows) * m.hidden as f64 * self.act, kernels: 1 });
                }
                // Kept as a zero-byte marker: the dispatcher's sync (`cost::lower::drains_launch_queue`)
                // sits at the permutation.
                MegatronPermutation::InDispatch => self.push("permute", OpKind::Memory { bytes: 0.0, kernels: 0 }),
            }
        }
        // Tokens reaching one expert on the busiest rank: all EP ranks' routed tokens, spread over
        // the experts, times the load factor (routing imbalance, or the capacity when tokens are
        // dropped or padded: `Workload::expert_load`); ETP ranks each see all of their expert's tokens.
        // Under attention DP the experts see the instance's tokens, not ep x etp copies of the
        // busiest rank's (`Workload::attention_dp`).
        // The EP x ETP group spans ep x etp / tp TP groups, each with its own `tokens()`: under
        // SP a rank routes its share of them (counted exactly here: `sp_tokens` rounds it up, so
        // one decode token on 8 SP ranks would count 8), without SP every rank of a TP group
        // holds the same tokens (inference engines), which reach the experts once.
        let (tp, group) = (pc.tp as u64, pc.ep as u64 * pc.etp as u64);
        let instance_routed = match self.w.attention_dp {
            Some(n) => n * self.w.q_len() * moe.top_k as u64,
            None if self.pc.sp && tp > 1 => (self.tokens() * moe.top_k as u64 * group).div_ceil(tp),
            None => self.tokens() * moe.top_k as u64 * group.max(tp) / tp,
        };
        let (local_experts, active) = self.active_local_experts(moe, instance_routed);
        let per_expert = (instance_routed as f64 / (moe.n_experts as f64 * active) * self.w.expert_load()).ceil() as u64;
        let per_expert = per_expert.max(1);
        let f = moe.expert_ffn_hidden / pc.etp as u64;
        let up = if m.ffn_kind == FfnKind::Gated { 2 * f } else { f };
        self.quantize_input("expert_up", (per_expert * local_experts * m.hidden) as f64);
        self.push("expert_up", OpKind::Gemm { m: per_expert, n: up, k: m.hidden, count: local_experts });
        self.expert_adapter(LoraTarget::Fc1, per_expert, m.hidden, up, local_experts);
        if self.w.stack.hf() {
            // `proj_out.masked_fill(sentinel_mask, 0.0)` after each grouped GEMM: out of place, a
            // copy of the output (ATen's clone, a device-to-device memcpy) and the fill over it
            // (read and write each element; `cost::lower::hf_index_kernels` prices the fill).
            self.push("sentinel_copy", OpKind::Memory { bytes: (routed * up) as f64 * self.act * 2.0, kernels: 1 });
            self.push("sentinel_mask", OpKind::Memory { bytes: (routed * up) as f64 * self.act * 2.0, kernels: 1 });
        }
        self.memory("expert_act", (per_expert * local_experts * f) as f64, 2.0, 1.0, 2);
        self.quantize_input("expert_down", (per_expert * local_experts * f) as f64);
        self.push("expert_down", OpKind::Gemm { m: per_expert, n: m.hidden, k: f, count: local_experts });
        if self.w.stack.hf() {
            self.push("sentinel_copy", OpKind::Memory { bytes: (routed * m.hidden) as f64 * self.act * 2.0, kernels: 1 });
            self.push("sentinel_mask", OpKind::Memory { bytes: (routed * m.hidden) as f64 * self.act * 2.0, kernels: 1 });
        }
        self.expert_adapter(LoraTarget::Fc2, per_expert, f, m.hidden, local_experts);
        if pc.etp > 1 {
            let bytes = (per_expert * local_experts * m.hidden) as f64 * self.act;
            self.push("etp_reduce", OpKind::Comm { op: CollectiveOp::ReduceScatter, group: Group::Tp, bytes });
        }
        if self.w.stack.hf() {
            // The routing weight's multiply (read and write every routed row), the gather back
            // to token order (the same), and the top-k sum (read every routed row, write a token's).
            // With fp32 routed weights (`Router::weights_fp32`: Mixtral, DeepSeek-V3) the product is
            // fp32 (bf16 rows in, 4 B out), so are the gather and the sum, and the sum is cast back
            // to bf16 (read 4 B, write 2 B a token's element): measured on the H100
            // (calibration/runs/raw/mla-prefill-h100-2026-11-25/, DeepSeek-V3-s b4 x 8192) the fp32
            // multiply takes 2.33 ms per layer against 1.51 ms at the bf16 table's rate for the
            // same rows, the bytes' ratio 6 / 4.
            let elems = (routed * m.hidden) as f64;
            let tokens = (t * m.hidden) as f64;
            let bytes = if moe.router.weights_fp32 {
                elems * (2.0 + 4.0) + elems * 8.0 + elems * 4.0 + tokens * 4.0 + tokens * 6.0
            } else {
                elems * self.act * 5.0 + tokens * self.act
            };
            self.push("unpermute", OpKind::Memory { bytes, kernels: if moe.router.weights_fp32 { 4 } else { 3 } });
        } else {
            let rows = permuted_rows;
            match permutation {
                MegatronPermutation::Other => self.memory("unpermute", rows * m.hidden as f64, 1.0, 1.0, 2),
                MegatronPermutation::Separate { sort } => {
                    if sort {
                        self.memory("unsort_chunks", rows * m.hidden as f64, 1.0, 1.0, 1);
                    }
                    // Megatron's unpermute (Transformer Engine's fused `moe_unpermute` with the
                    // routing probabilities) reads every routed row and writes one row per token,
                    // the weighted sum of its experts' outputs.
                    let bytes = (rows + t as f64) * m.hidden as f64 * self.act;
                    self.push("unpermute", OpKind::Memory { bytes, kernels: 1 });
                }
                MegatronPermutation::Received => {
                    self.push("unpermute", OpKind::Memory { bytes: (received_rows + rows) * m.hidden as f64 * self.act, kernels: 1 });
                }
                MegatronPermutation::InDispatch => {}
            }
        }
        if pc.ep > 1 {
            self.push("ep_combine", OpKind::Comm { op: combine_op, group: Group::Ep, bytes: a2a_bytes });
        }
        if moe.n_shared_experts > 0 {
            let width = moe.shared_expert_ffn_hidden * moe.n_shared_experts as u64;
            self.tp_enter();
            self.dense_ffn(width, "shared_up", "shared_down");
            self.tp_exit();
        }
    }

    /// Which token permutations a MoE layer runs as kernels of their own besides the dispatch.
    /// Other stacks than `megatron`: one permute and one unpermute, each reading and writing the
    /// routed rows. Megatron-Core 0.16.1 (`transformer/moe/token_dispatcher.py`):
    /// - `alltoall` (`MoEAlltoAllTokenDispatcher`): the permute before the all-to-all, then with
    ///   more than one local expert "Permutation 2: Sort tokens by local expert"
    ///   (`sort_chunks_by_idxs`, fused under `moe_permute_fusion`, a copy of every received row;
    ///   with padding to capacity a `transpose().contiguous()` copy), and both undone around the
    ///   combine; `allgather`: the permute and unpermute alone;
    /// - `flex` on DeepEP: the received rows permuted into the experts' order and back
    ///   ([`FlexBackend`]);
    /// - `flex` on HybridEP: none ([`FlexBackend`]).
    fn megatron_permutation(&self, moe: &crate::model::Moe) -> MegatronPermutation {
        if self.w.stack != Stack::Megatron {
            return MegatronPermutation::Other;
        }
        match (self.w.moe_dispatcher, self.w.moe_flex_backend) {
            (MoeDispatcher::AllToAll, _) => MegatronPermutation::Separate { sort: moe.n_experts / self.pc.ep > 1 },
            (MoeDispatcher::AllGather, _) => MegatronPermutation::Separate { sort: false },
            (MoeDispatcher::Flex, FlexBackend::DeepEp) => MegatronPermutation::Received,
            (MoeDispatcher::Flex, FlexBackend::HybridEp) => MegatronPermutation::InDispatch,
        }
    }

    /// The busiest rank's expert GEMMs' group count and the fraction of the experts that get a
    /// token (the mean load of an active expert is the routed tokens over that many experts), for `instance_routed` routed token copies over the EP group. The inference engines'
    /// MoE kernels run only the experts some token was routed to (TensorRT-LLM's CUTLASS MoE GEMMs
    /// and vLLM's/SGLang's Triton `fused_moe` launch tiles per routed token block, so an expert
    /// without tokens reads no weights): with `T` tokens each picking `k` distinct experts of `E`
    /// uniformly (balanced routing), an expert gets none with probability `(1 - k/E)^T`, so
    /// `E (1 - (1 - k/E)^T)` experts are active, and a rank's `E / ep` local experts have that
    /// fraction active (rounded up: the busiest rank). At decode batch 1 of DeepSeek-V3 (k 8 of
    /// 256) that is 8 experts, not 256; from a few hundred tokens on it is every expert. Megatron
    /// and the torch stacks (training and their measured runs) keep every local expert's GEMM.
    fn active_local_experts(&self, moe: &crate::model::Moe, instance_routed: u64) -> (u64, f64) {
        let local = (moe.n_experts / self.pc.ep) as u64;
        if !self.w.stack.is_engine() || self.w.mode == Mode::Train {
            return (local, 1.0);
        }
        let (e, k) = (moe.n_experts as f64, moe.top_k as f64);
        let tokens = instance_routed as f64 / k;
        let frac = 1.0 - (1.0 - k / e).max(0.0).powf(tokens);
        let count = ((local as f64 * frac).ceil() as u64).clamp(1, local);
        (count, frac)
    }

    /// PyTorch autocast keeps fp32 weights and casts each to bf16 once per forward (read 4 B,
    /// write 2 B per parameter); the backward casts the bf16 weight gradient back to fp32 (the
    /// `backward_of` doubling of memory ops covers it). Megatron keeps bf16 weights: no cast; nor
    /// does FSDP2 under a bf16 policy (`Workload::fsdp`), which casts the shard before the gather
    /// (`step::dp_plan` prices that) and runs no autocast.
    fn weight_cast(&mut self, moe: bool) {
        if self.w.mode != Mode::Train || self.w.stack == Stack::Megatron || (self.w.fsdp.bf16_params && self.pc.zero == 3) {
            return;
        }
        let m = self.model;
        let t = self.pc.tp as f64;
        let h = m.hidden as f64;
        let mats = if m.ffn_kind == FfnKind::Gated { 3.0 } else { 2.0 };
        let ffn = match (&m.moe, moe) {
            (Some(moe), true) => {
                let local = (moe.n_experts / self.pc.ep) as f64;
                local * mats * h * moe.expert_ffn_hidden as f64 / self.pc.etp as f64
                    + moe.n_shared_experts as f64 * mats * h * moe.shared_expert_ffn_hidden as f64 / t
                    + moe.n_experts as f64 * h
            }
            _ => mats * h * m.ffn_hidden as f64 / t,
        };
        let params = m.attention_params_per_layer() / t + ffn;
        let kernels = match (&m.mla, m.style.fused_projections) {
            (Some(_), _) => 9,
            // Phi-3: `qkv_proj`, `o_proj`, `gate_up_proj`, `down_proj`.
            (None, true) => 4,
            (None, false) => 7,
        };
        self.push("weight_cast", OpKind::Memory { bytes: params * 6.0, kernels });
    }

    /// Megatron's Mamba-2 mixer (`MambaMixer`, training path `mamba_split_conv1d_scan_combined`;
    /// TP splits heads and groups, `in_proj` column-parallel, `out_proj` row-parallel):
    /// - `in_proj`: T x (2 d + 2 G N + H)/tp from the hidden state (z, x, B, C, dt);
    /// - the causal conv1d over x, B, C (`causal_conv1d_fwd`, SiLU fused): read and write once;
    /// - the SSD chunked scan as mamba_ssm's five Triton kernels run it (`ssd_combined.py`
    ///   `_mamba_chunk_scan_combined_fwd`, in megatron-core 0.19 `ssm/ops`), per sequence of L
    ///   tokens in L/Q chunks of Q, H heads of dim P, G groups, state N (per TP rank):
    ///   1. `_chunk_cumsum_fwd`: dt softplus and the cumulative sum of dt A within each chunk:
    ///      reads dt (bf16), writes dt and dA_cumsum (fp32);
    ///   2. `_chunk_state_fwd`: each chunk's final state B^T (x decay): a P x Q by Q x N matmul
    ///      per chunk and head, states written in fp32;
    ///   3. `_state_passing_fwd`: the recurrence over chunks, sequential in the chunk index:
    ///      reads the fp32 chunk states and writes the passed states (bf16);
    ///   4. `_bmm_chunk_fwd`: C B^T within each chunk, Q x N by N x Q per chunk and group;
    ///   5. `_chunk_scan_fwd`: the output, (C B^T . decay) x (Q x Q by Q x P) plus C . state
    ///      (Q x N by N x P) per chunk and head, with the D skip and the z gate (reads z) fused;
    /// - the gated RMSNorm over groups (`RMSNormGated`, one Triton kernel);
    /// - `out_proj`: T x hidden from d/tp.
    ///
    /// Backward: each matmul's two gradients (`backward_of`); the memory-efficient path saves only
    /// `zxbcdt` and recomputes the conv and the scan's cumsum, chunk states, state passing and
    /// C B^T first (`SCAN_RECOMPUTED_IN_BACKWARD`).
    fn mamba(&mut self) {
        let model = self.model;
        let mb = &model.hybrid.as_ref().expect("mamba layer of a model without a hybrid pattern").mamba;
        let tp = self.pc.tp as u64;
        let t = self.tokens();
        let (heads, groups) = (mb.n_heads / tp, (mb.n_groups / tp).max(1));
        let (p, n, q) = (mb.head_dim, mb.state_size, mb.chunk_size);
        let d = heads * p;
        self.gemm("mamba_in_proj", t, mb.in_proj_width() / tp, self.model.hidden);
        let conv_ch = d + 2 * groups * n;
        if self.w.mode == Mode::Decode {
            // One token per sequence: `causal_conv1d_update` reads and rewrites each sequence's
            // conv state (K - 1 inputs per channel) and reads the new input; mamba_ssm's
            // `selective_state_update` reads and writes the SSM state (H P N) once and reads x,
            // B, C, dt, z.
            let seqs = self.w.sequences() as f64;
            let conv_state = (conv_ch * (mb.conv_kernel - 1)) as f64 * self.act;
            self.push("conv1d_update", OpKind::Memory { bytes: seqs * (2.0 * conv_state + 2.0 * conv_ch as f64 * self.act), kernels: 1 });
            let state = (heads * p * n) as f64 * crate::model::hybrid::SSM_STATE_BYTES;
            let io = (2 * d + 2 * groups * n + heads + d) as f64 * self.act;
            self.push("ssm_state_update", OpKind::Memory { bytes: seqs * (2.0 * state + io), kernels: 1 });
        } else {
            self.memory("conv1d", (t * conv_ch) as f64, 1.0, 1.0, 1);
            let seqs = self.w.sequences();
            let chunks = seqs * self.w.q_len().div_ceil(q);
            let f32 = 4.0;
            self.push("ssd_chunk_cumsum", OpKind::Memory { bytes: (t * heads) as f64 * (self.act + 2.0 * f32), kernels: 1 });
            self.push("ssd_chunk_state", OpKind::ScanMatmul { m: p, n, k: q, count: chunks * heads });
            self.push("ssd_state_passing", OpKind::Memory { bytes: (chunks * heads * p * n) as f64 * (f32 + self.act), kernels: 1 });
            self.push("ssd_bmm_chunk", OpKind::ScanMatmul { m: q, n: q, k: n, count: chunks * groups });
            self.push("ssd_chunk_scan", OpKind::ScanMatmul { m: q, n: p, k: q, count: chunks * heads });
            self.push("ssd_chunk_scan_states", OpKind::ScanMatmul { m: q, n: p, k: n, count: chunks * heads });
            // The z gate's read, in the chunk-scan kernel (no launch of its own).
            self.push("ssd_gate", OpKind::Memory { bytes: (t * d) as f64 * self.act, kernels: 0 });
        }
        self.memory("mamba_norm", (t * d) as f64, 1.0, 1.0, 1);
        self.gemm("mamba_out_proj", t, self.model.hidden, d);
    }

    /// One block of a hybrid model: its norm, its mixer or MLP in the TP region, the residual.
    fn block(mut self, b: Block) -> Vec<Op> {
        self.norm_for("input_norm", 1);
        if b == Block::Moe {
            self.moe_ffn();
        } else {
            self.tp_enter();
            match b {
                Block::Mamba => self.mamba(),
                Block::Attention => self.attention(),
                _ => {
                    let width = self.model.ffn_hidden;
                    self.dense_ffn(width, "up_proj", "down_proj");
                }
            }
            self.tp_exit();
        }
        self.residual();
        self.ops
    }

    /// The final norm, the LM head and (training) the loss over the `t` tokens of a micro-batch.
    fn output_head(&mut self, t: u64) {
        let (model, pc, w) = (self.model, self.pc, self.w);
        self.norm_for("final_norm", 1);
        self.tp_enter();
        let vocab_shard = model.vocab.div_ceil(pc.tp as u64);
        // Decode and prefill compute logits for the last position only (prefill returns next token).
        let logit_tokens = match w.mode {
            Mode::Train => t,
            Mode::Prefill | Mode::Decode => w.sequences(),
        };
        self.gemm("lm_head", logit_tokens, vocab_shard, model.hidden);
        if model.style.final_logit_softcap.is_some() {
            // Gemma 2's `logits / cap`, `torch.tanh`, `* cap` (transformers 5.17.0
            // `Gemma2ForCausalLM.forward`, lines 527-530): three bf16 kernels over the logits in
            // eager (autocast leaves `tanh` and scalar arithmetic in the input's dtype), one under
            // Inductor.
            let elems = (logit_tokens * vocab_shard) as f64;
            self.memory("logit_softcap", elems, 1.0, 1.0, 3);
        }
        if w.mode == Mode::Train {
            // Cross-entropy over the vocabulary: upcast, log-softmax, gather (fused in Megatron).
            let elems = (logit_tokens * vocab_shard) as f64;
            let fused = w.stack.fused() && (w.compile_loss || !w.stack.torch());
            let traffic = if fused { 2.0 + 2.0 } else { 1.0 + 2.0 + 2.0 + 2.0 + 2.0 };
            self.push("cross_entropy", OpKind::Memory { bytes: elems * ACT_BYTES * traffic, kernels: if fused { 1 } else { 5 } });
            if pc.tp > 1 {
                let bytes = (logit_tokens * 4 * 2) as f64;
                self.push("tp_loss_all_reduce", OpKind::Comm { op: CollectiveOp::AllReduce, group: Group::Tp, bytes });
            }
        }
    }

    /// One multi-token-prediction module in training, as Megatron-Core runs it on the last
    /// pipeline stage (`MultiTokenPredictionLayer`; DeepSeek-V3 Technical Report sec. 2.2): the
    /// embedding of the tokens one position ahead (the shared word embedding), RMSNorm of it and
    /// of the previous depth's hidden state (`enorm`, `hnorm`), their concatenation projected to
    /// the hidden size (`eh_proj`, a linear of 2h -> h), one transformer layer of the model's last
    /// layer's kind, then the shared output head and its own cross-entropy loss.
    fn mtp_module(mut self, t: u64) -> Vec<Op> {
        let (model, pc) = (self.model, self.pc);
        self.push("mtp_embedding", OpKind::Memory { bytes: (t * model.hidden) as f64 * ACT_BYTES * 2.0, kernels: 1 });
        if pc.tp > 1 {
            self.tp_exit();
        }
        self.norm("mtp_enorm");
        self.norm("mtp_hnorm");
        self.memory("mtp_concat", 2.0 * self.hidden_elems(), 1.0, 1.0, 1);
        self.tp_enter();
        self.gemm("mtp_eh_proj", t, model.hidden.div_ceil(pc.tp as u64), 2 * model.hidden);
        self.tp_exit();
        let moe = model.n_moe_layers() > 0;
        let mut ops = std::mem::take(&mut self.ops);
        let layer = Builder { ops: Vec::new(), ..self };
        ops.extend(layer.layer(moe));
        let mut head = Builder { model, pc, w: self.w, ops: Vec::new(), act: ACT_BYTES };
        head.output_head(t);
        ops.extend(head.ops);
        ops
    }

    /// One transformer layer. Its norms sit where the family puts them
    /// ([`NormPlacement`]): Llama's before attention and the MLP; Gemma's also on each branch's
    /// output before its residual add (`attn_out_norm`, `ffn_out_norm`); OLMo-2's on the branch
    /// outputs only, the projections reading the residual stream (through autocast's casts in
    /// `hf-*` training).
    fn layer(mut self, moe: bool) -> Vec<Op> {
        self.weight_cast(moe);
        let style = self.model.style;
        let attn_inputs = match &self.model.mla {
            Some(_) => 2,
            None if self.w.stack.fused() || style.fused_projections => 1,
            None => 3,
        };
        if style.norm_placement == NormPlacement::Post {
            self.stream_cast(attn_inputs);
        } else {
            self.norm_for("input_norm", attn_inputs);
        }
        let gather = if moe || self.model.mla.is_some() { self.act } else { self.block_gather_elem() };
        self.tp_enter_gathering(gather);
        self.attention();
        self.tp_exit_gathering(gather);
        if style.norm_placement != NormPlacement::Pre {
            self.branch_norm("attn_out_norm");
        }
        self.residual();
        let ffn_inputs = match (&self.model.moe, moe) {
            // The router's linear, and the shared experts' gate and up; the routed experts take
            // the fp32 input as it is (their path casts to the weights' fp32).
            (Some(m), true) => 1 + if m.n_shared_experts > 0 { 2 } else { 0 },
            _ if self.model.ffn_kind == FfnKind::Gated && !style.fused_projections => 2,
            _ => 1,
        };
        if style.norm_placement == NormPlacement::Post {
            self.stream_cast(ffn_inputs);
        } else {
            self.norm_for("post_attention_norm", ffn_inputs);
        }
        if moe {
            self.moe_ffn();
        } else {
            self.tp_enter_gathering(gather);
            let width = self.model.ffn_hidden;
            self.dense_ffn(width, "up_proj", "down_proj");
            self.tp_exit_gathering(gather);
        }
        if style.norm_placement != NormPlacement::Pre {
            self.branch_norm("ffn_out_norm");
        }
        self.residual();
        self.ops
    }
}

/// Forward ops of one micro-batch on one rank, by part.
pub fn forward_ops(model: &Model, pc: &ParallelConfig, w: &Workload) -> OpList {
    let b = |ops: Vec<Op>| Builder { model, pc, w, ops, act: ACT_BYTES };
    let hybrid = model.hybrid.is_some();
    let dense_layer = if hybrid { Vec::new() } else { b(Vec::new()).layer(false) };
    let moe_layer = if model.is_moe() && !hybrid { b(Vec::new()).layer(true) } else { Vec::new() };

    let mut e = b(Vec::new());
    let t = e.tokens();
    e.push("embedding", OpKind::Memory { bytes: (t * model.hidden) as f64 * ACT_BYTES * 2.0, kernels: 1 });
    if model.style.embedding_scale && !(w.stack.fused() && w.stack.torch()) {
        // Gemma's `Gemma2TextScaledWordEmbedding`: the lookup times `sqrt(hidden)`, its own kernel
        // (r w of the embedding's output: fp32 in `hf-*` training, whose weights are fp32; Inductor
        // fuses it into the gather).
        let elem = if e.hf_fp32_stream() { 4.0 } else { ACT_BYTES };
        e.push("embedding_scale", OpKind::Memory { bytes: (t * model.hidden) as f64 * elem * 2.0, kernels: 1 });
    }
    if pc.tp > 1 {
        // Vocab-parallel embedding: partial lookups summed (reduce-scatter under SP).
        e.tp_exit();
    }
    let embedding = e.ops;

    let mut h = b(Vec::new());
    h.output_head(t);
    let mut head = h.ops;
    if w.mode == Mode::Train {
        for _ in 0..w.mtp_layers.min(crate::model::MAX_MTP_LAYERS) {
            head.extend(b(Vec::new()).mtp_module(t));
        }
    }
    let block = |blk: Block| match &model.hybrid {
        Some(hy) if hy.pattern.contains(&blk) => b(Vec::new()).block(blk),
        _ => Vec::new(),
    };
    OpList {
        dense_layer,
        moe_layer,
        embedding,
        head,
        mamba_layer: block(Block::Mamba),
        attention_layer: block(Block::Attention),
        mlp_layer: block(Block::Mlp),
        moe_mlp_layer: block(Block::Moe),
    }
}

/// The SSD kernels mamba_ssm's memory-efficient backward runs again before its gradients
/// (`_mamba_chunk_scan_combined_bwd` recomputes the chunk cumsum, chunk states, state passing and
/// C B^T; `MambaSplitConv1dScanCombinedFn.backward` the conv1d).
pub const SCAN_RECOMPUTED_IN_BACKWARD: [&str; 5] = ["conv1d", "ssd_chunk_cumsum", "ssd_chunk_state", "ssd_state_passing", "ssd_bmm_chunk"];

/// Backward ops of a forward list, in reverse order: each GEMM gives its data-gradient and
/// weight-gradient GEMMs, attention its backward, memory ops twice their traffic, and each
/// collective its conjugate (all-gather <-> reduce-scatter; TP all-reduce stays all-reduce).
pub fn backward_of(forward: &[Op]) -> Vec<Op> {
    let mut out = Vec::with_capacity(forward.len() * 2);
    for (i, op) in forward.iter().enumerate().rev() {
        let bwd = |name, kind| Op { name, kind, pass: Pass::Backward, backward: Backward::Mirror };
        // Context parallelism's key/value exchange before attention (see [`CpComm`]). Ring
        // attention's backward sends keys, values and their gradients around the ring beside the
        // attention backward's blocks (twice the forward's bytes, before the attention backward);
        // all-gather's backward gathers the keys and values again before it and reduce-scatters
        // their gradients after it.
        if let (OpKind::Attention { .. }, Some(Op { name, kind: OpKind::Comm { group: Group::Cp, bytes, .. }, .. })) =
            (&op.kind, i.checked_sub(1).map(|j| &forward[j]))
        {
            match *name {
                "cp_kv_p2p" => out.push(bwd("cp_kv_dkv_p2p", OpKind::Comm { op: CollectiveOp::AllGather, group: Group::Cp, bytes: 2.0 * bytes })),
                "cp_all_gather_kv" => out.push(bwd("cp_all_gather_kv", OpKind::Comm { op: CollectiveOp::AllGather, group: Group::Cp, bytes: *bytes })),
                TORCH_CP_KV_GATHER => out.push(bwd(TORCH_CP_KV_GATHER, OpKind::Comm { op: CollectiveOp::AllGather, group: Group::Cp, bytes: *bytes })),
                _ => {}
            }
        }
        if op.name == "cp_kv_p2p" {
            continue;
        }
        if let (TORCH_CP_KV_GATHER, OpKind::Comm { bytes, .. }) = (op.name, &op.kind) {
            // PyTorch's dk/dv rotation: `cp` one-hop sends of the rank's fp32 dk/dv (twice its
            // bf16 key/value bytes), `2 x` the gathered bytes in all (`TORCH_CP_DKV_ROTATE`).
            out.push(bwd(TORCH_CP_DKV_ROTATE, OpKind::Comm { op: CollectiveOp::SendRecv, group: Group::Cp, bytes: 2.0 * bytes }));
            continue;
        }
        if SCAN_RECOMPUTED_IN_BACKWARD.contains(&op.name) {
            out.push(bwd(op.name, op.kind.clone()));
        }
        match (&op.kind, &op.backward) {
            // torchao's input cast has no backward of its own; the GEMM's output gradient is cast.
            (OpKind::Memory { .. }, _) if matches!(op.name, FP8_CAST | FP8_CAST_ROWWISE) => {}
            (OpKind::Gemm { m, n, k, count }, Backward::Frozen) => {
                // Frozen weights: the data gradient only.
                out.push(bwd(op.name, OpKind::Gemm { m: *m, n: *k, k: *n, count: *count }));
            }
            (_, Backward::Frozen) => {}
            (_, Backward::As(kind)) => out.push(bwd(op.name, kind.clone())),
            (OpKind::Gemm { m, n, k, count }, _) => {
                let cast = i.checked_sub(1).map(|j| forward[j].name).filter(|p| matches!(*p, FP8_CAST | FP8_CAST_ROWWISE));
                if let Some(cast) = cast {
                    let bytes = (*m * *n * *count) as f64 * TORCHAO_CAST_BYTES;
                    out.push(bwd(cast, OpKind::Memory { bytes, kernels: 1 }));
                }
                // dX[m,k] = dY[m,n] W^T ; dW[k,n] = X^T dY. Score/value GEMMs of unfused attention
                // have two data gradients instead; the FLOPs are the same.
                out.push(bwd(op.name, OpKind::Gemm { m: *m, n: *k, k: *n, count: *count }));
                out.push(bwd(op.name, OpKind::Gemm { m: *k, n: *n, k: *m, count: *count }));
                if cast == Some(FP8_CAST_ROWWISE) {
                    // dX (m x k) rescaled after the tensorwise kernel, the output gradient (m x n)
                    // cast per column, and the input (m x k) per column where this GEMM's forward
                    // cast was its own (k and v, gate share q's and up's).
                    let own_input = matches!(forward[i - 1].kind, OpKind::Memory { bytes, .. } if bytes > 0.0);
                    let mk = (*m * *k * *count) as f64;
                    let bytes = mk * ROWWISE_GRAD_SCALE_BYTES
                        + (*m * *n * *count) as f64 * ROWWISE_GRAD_COLUMN_CAST_BYTES
                        + if own_input { mk * ROWWISE_INPUT_COLUMN_CAST_BYTES } else { 0.0 };
                    out.push(bwd(FP8_ROWWISE_SCALE, OpKind::Memory { bytes, kernels: if own_input { 3 } else { 2 } }));
                }
            }
            // The gradients of both factors of each SSD matmul.
            (OpKind::ScanMatmul { m, n, k, count }, _) => {
                out.push(bwd(op.name, OpKind::ScanMatmul { m: *m, n: *k, k: *n, count: *count }));
                out.push(bwd(op.name, OpKind::ScanMatmul { m: *k, n: *n, k: *m, count: *count }));
            }
            (OpKind::Attention { batch_heads, q_len, kv_len, head_dim_qk, head_dim_v, causal, kv_bytes, window, .. }, _) => out.push(bwd(
                op.name,
                OpKind::Attention {
                    batch_heads: *batch_heads,
                    q_len: *q_len,
                    kv_len: *kv_len,
                    head_dim_qk: *head_dim_qk,
                    head_dim_v: *head_dim_v,
                    causal: *causal,
                    backward: true,
                    kv_bytes: *kv_bytes,
                    window: *window,
                },
            )),
            (OpKind::Memory { bytes, kernels }, _) => out.push(bwd(op.name, OpKind::Memory { bytes: 2.0 * bytes, kernels: *kernels })),
            (OpKind::Comm { op: c, group, bytes }, _) => {
                let conj = match c {
                    CollectiveOp::AllGather => CollectiveOp::ReduceScatter,
                    CollectiveOp::ReduceScatter => CollectiveOp::AllGather,
                    other => *other,
                };
                // Without SP, the forward's identity (f) becomes an all-reduce in backward and the
                // forward all-reduce (g) an identity: one all-reduce each way, so the count holds.
                out.push(bwd(op.name, OpKind::Comm { op: conj, group: *group, bytes: *bytes }));
            }
        }
    }
    out
}

/// Forward ops re-run before backward under activation recomputation. Under `Selective` the
/// modules of `w.megatron` (Megatron-Core's `recompute_modules`; `[core_attn]` by default) re-run
/// their forward ops, each GEMM with its input's quantize kernel:
/// - `core_attn`: the attention core, with what context parallelism does inside it (TE's CP
///   attention is one autograd function: its exchanges and output merge run again);
/// - `mlp`: a dense layer's FFN from its (TE-fused) norm to its output, TP collectives included
///   (on MoE layers Megatron ignores it);
/// - `moe`: an MoE layer's FFN from its norm's output: router, dispatch, experts, combine and
///   shared experts;
/// - `moe_act`: the routed experts' activation; `shared_experts`: the shared experts' FFN;
/// - `layernorm`: the input and pre-MLP norms; `mla_up_proj`: MLA's q/kv up projections and RoPE.
pub fn recompute_of(forward: &[Op], w: &Workload) -> Vec<Op> {
    match w.recompute {
        // Layer checkpointing re-runs some blocks whole: the engines ask [`rerun_of`] per block.
        Recompute::None | Recompute::Layers(_) => return Vec::new(),
        Recompute::Full => return rerun_of(forward),
        Recompute::SelectiveOp => return selective_op_recompute(forward, w),
        Recompute::Selective => {}
    }
    let modules = w.megatron.modules();
    let has = |m: RecomputeModule| modules.contains(&m);
    // The FFN region of a transformer layer: after the pre-MLP norm up to its closing residual add.
    let ffn_start = forward.iter().position(|o| o.name == "post_attention_norm");
    let ffn_end = forward.iter().rposition(|o| o.name == "residual_add").unwrap_or(forward.len());
    let moe_layer = forward.iter().any(|o| o.name == "router");
    let in_ffn = |i: usize| ffn_start.is_some_and(|s| i >= s && i < ffn_end);
    let keep = |i: usize, op: &Op| -> bool {
        let core_attn = matches!(op.kind, OpKind::Attention { .. })
            || matches!(
                op.name,
                "scores"
                    | "softmax"
                    | "attention_dropout"
                    | "attn_values"
                    | "cp_kv_p2p"
                    | "cp_all_gather_kv"
                    | "cp_a2a_qkv"
                    | "cp_a2a_out"
                    | "cp_out_correction"
            );
        (has(RecomputeModule::CoreAttn) && core_attn)
            || (has(RecomputeModule::Mlp) && !moe_layer && in_ffn(i))
            // The MoE layer's checkpoint starts at the norm's output (the norm stays outside).
            || (has(RecomputeModule::Moe) && moe_layer && in_ffn(i) && Some(i) != ffn_start)
            || (has(RecomputeModule::MoeAct) && op.name == "expert_act")
            || (has(RecomputeModule::SharedExperts) && (matches!(op.name, "shared_up" | "shared_down") || shared_act(forward, i)))
            || (has(RecomputeModule::Layernorm) && matches!(op.name, "input_norm" | "post_attention_norm"))
            || (has(RecomputeModule::MlaUpProj) && matches!(op.name, "q_up" | "kv_up" | "rope"))
    };
    let mut out = Vec::new();
    for (i, op) in forward.iter().enumerate() {
        if keep(i, op) {
            out.push(again(op));
        } else if op.name == "quantize" && forward.get(i + 1).is_some_and(|next| matches!(next.kind, OpKind::Gemm { .. }) && keep(i + 1, next)) {
            // The quantize kernel feeding a recomputed GEMM runs again with it.
            out.push(again(op));
        }
    }
    out
}

/// Whether torchtitan's per-op policy ([`Recompute::SelectiveOp`]) saves each op of a layer's
/// forward list: flash (or memory-efficient) attention, the TP reduce-scatters and the odd
/// `aten.mm`s of the block (the 1st, 3rd, ... linear GEMM in the block's order). torchao's
/// float8 linears count too: they call `torch.mm` on `Float8TrainingTensor` inputs, and the
/// policy's dispatch mode sees that `aten.mm` before the tensor subclass turns it into
/// `aten._scaled_mm` (PyTorch runs dispatch modes before subclasses; torchao 0.18.0
/// `float8/float8_linear.py` `matmul_with_hp_or_float8_args`). The score and value products of
/// unfused attention are batched matmuls (`aten.bmm`), not counted.
pub fn selective_op_saved(forward: &[Op], w: &Workload) -> Vec<bool> {
    let mut mm = 0;
    forward
        .iter()
        .map(|op| match &op.kind {
            OpKind::Attention { .. } => w.flash_attention,
            // Inside PyTorch's CP handler of the saved SDPA op (its output is what is saved).
            _ if matches!(op.name, TORCH_CP_KV_GATHER | TORCH_CP_MERGE) => w.flash_attention,
            OpKind::Comm { op: CollectiveOp::ReduceScatter, group: Group::Tp, .. } => true,
            OpKind::Gemm { .. } if !matches!(op.name, "scores" | "attn_values") => {
                mm += 1;
                mm % 2 == 1
            }
            _ => false,
        })
        .collect()
}

/// A checkpointed block's forward run again before its backward (`layer:n`'s every n-th block,
/// [`Recompute::checkpoints`]).
pub fn rerun_of(forward: &[Op]) -> Vec<Op> {
    forward.iter().map(again).collect()
}

/// `op` run again in the backward pass.
fn again(op: &Op) -> Op {
    Op { pass: Pass::Recompute, ..op.clone() }
}

/// Why [`Recompute::SelectiveOp`] does not apply to a model and workload, or `None` where it
/// does: training of a dense transformer (no MoE, MLA or hybrid layers, whose op counts torchtitan's
/// policy treats otherwise) under a PyTorch stack.
pub fn selective_op_unsupported(model: &Model, w: &Workload) -> Option<String> {
    if !w.stack.torch() {
        Some(format!("is torchtitan's policy for PyTorch stacks; this scenario's stack is {}", w.stack.name()))
    } else if w.mode != Mode::Train {
        Some(format!("applies to training; this scenario is {}", w.mode.name()))
    } else if model.is_moe() || model.mla.is_some() || model.hybrid.is_some() {
        Some(format!("is priced for dense transformer layers; `{}` has MoE, MLA or hybrid layers", model.name))
    } else {
        None
    }
}

/// What the backward re-runs under torchtitan's per-op selective checkpointing
/// ([`Recompute::SelectiveOp`]): every forward op whose output the policy does not save
/// ([`selective_op_saved`]): the norms, RoPE, the activation and the casts, the unsaved GEMMs
/// (k, the output and the up projection), and the collectives other than
/// the reduce-scatters (SP's all-gathers run again). Eager re-runs the block's whole forward
/// with the saved ops' outputs served from the cache; under `torch.compile` the partitioner
/// re-runs only what the backward reads, so a GEMM whose output goes only into a saved
/// reduce-scatter, or only to the block's output (the last linear without TP), is not re-run.
///
/// torchtitan wraps the decoder blocks only (`apply_ac` over `model.layers`): the embedding and the
/// final norm, LM head and loss (op lists without attention) re-run nothing.
fn selective_op_recompute(forward: &[Op], w: &Workload) -> Vec<Op> {
    let block = forward.iter().any(|o| matches!(o.kind, OpKind::Attention { .. }) || o.name == "scores");
    if !block {
        return Vec::new();
    }
    let saved = selective_op_saved(forward, w);
    let last_gemm = forward.iter().rposition(|o| matches!(o.kind, OpKind::Gemm { .. }));
    // The op after `i`, past DTensor's layout copies.
    let next = |i: usize| (i + 1..forward.len()).find(|&j| forward[j].name != SP_LAYOUT_COPY);
    let dead = |i: usize| {
        w.stack.fused()
            && (matches!(forward[i].kind, OpKind::Gemm { .. }) || forward[i].name == SP_LAYOUT_COPY)
            && ((Some(i) == last_gemm && !forward[i + 1..].iter().any(|o| matches!(o.kind, OpKind::Comm { .. })))
                || next(i).is_some_and(|j| forward[j].name == "tp_reduce" && saved[j]))
    };
    forward.iter().enumerate().filter(|&(i, _)| !saved[i] && !dead(i)).map(|(_, op)| again(op)).collect()
}

/// The shared experts' activation: the activation op right after the shared experts' up GEMM(s).
fn shared_act(forward: &[Op], i: usize) -> bool {
    if !matches!(forward[i].name, "silu_mul" | "gelu") {
        return false;
    }
    let mut gemms = forward[..i].iter().rev().filter(|o| matches!(o.kind, OpKind::Gemm { .. }));
    match gemms.next().map(|o| o.name) {
        Some("shared_up") => true,
        Some("gate_proj") => gemms.next().is_some_and(|o| o.name == "shared_up"),
        _ => false,
    }
}

/// Model FLOPs per token of one training step, the MFU convention of Megatron-LM and PaLM:
/// 6 x (matmul parameters a token passes through, LM head included, embedding lookup excluded)
/// plus 12 x L x (attention width) x s for the score and value products, counting the causal
/// mask's masked half too (as Narayanan et al. 2021 and Chowdhery et al. 2022 do).
/// Mamba-2 layers add their SSD scan, 3 x its forward FLOPs ([`crate::model::Mamba2::scan_flops_per_token`]:
/// the forward and the two gradients of each of its matmuls), as attention's term does.
///
/// Under LoRA the frozen weights take a forward and a data gradient, 4 x their parameters, the
/// adapters 6 x theirs, and attention (no weights) all of its 6x: Megatron-Bridge's LoRA count
/// (`training/utils/flop_utils.py`: the frozen model's FLOPs x 2/3 plus the attention's), with
/// the adapters' own FLOPs, which it leaves out, added.
pub fn model_flops_per_token_train(model: &Model, seq: u64, lora: Option<&Lora>) -> f64 {
    let attention = 6.0 * attention_flops_per_token_forward_full(model, seq) + 3.0 * scan_flops_per_token_forward(model);
    match lora {
        None => 6.0 * model.matmul_params_per_token() + attention,
        Some(l) => {
            let adapters = lora::adapter_params(model, l);
            // Routed experts' adapters: a token passes through top_k of n_experts.
            let active = match &model.moe {
                None => adapters,
                Some(m) => {
                    let (_, e) = lora::adapter_params_per_layer(model, l, true);
                    adapters - model.n_moe_layers() as f64 * e * (1.0 - m.top_k as f64 / m.n_experts as f64)
                }
            };
            4.0 * model.matmul_params_per_token() + 6.0 * active + attention
        }
    }
}

/// Model FLOPs per token of one multi-token-prediction module in a training step, same
/// conventions: 6 x its matmul parameters a token passes through (projection, layer, the shared
/// output head again) plus one layer's score and value products. NVIDIA's published DeepSeek-V3
/// rows count it: 260 G model FLOPs per token with MTP against 249.5 G without (dev rows 104 vs
/// 93, 94, 99, 100 of tests/data/published/megatron_bridge_training_dev.csv).
pub fn mtp_flops_per_token_train(model: &Model, seq: u64) -> f64 {
    let one_layer = attention_flops_per_token_forward_full(model, seq) / model.n_layers as f64;
    6.0 * model.mtp_matmul_params_per_token() + 6.0 * one_layer
}

/// Forward FLOPs per token of one forward pass (prefill), same conventions.
pub fn model_flops_per_token_forward(model: &Model, seq: u64) -> f64 {
    2.0 * model.matmul_params_per_token() + 2.0 * attention_flops_per_token_forward_full(model, seq) + scan_flops_per_token_forward(model)
}

/// The SSD scans' forward FLOPs per token over all Mamba-2 layers (0 without).
fn scan_flops_per_token_forward(model: &Model) -> f64 {
    model.hybrid.as_ref().map_or(0.0, |hy| model.n_mamba_layers() as f64 * hy.mamba.scan_flops_per_token())
}

/// Half the forward score + value FLOPs per token, non-causal: L x s x (d_qk + d_v) x heads.
fn attention_flops_per_token_forward_full(model: &Model, seq: u64) -> f64 {
    let (qk, v) = match &model.mla {
        Some(mla) => (mla.qk_nope_head_dim + mla.qk_rope_head_dim, mla.v_head_dim),
        None => (model.head_dim, model.head_dim),
    };
    // A sliding layer counts the keys in its band: `seq` scaled by its mean keys per query over
    // the full causal layer's, (seq + 1) / 2 (the same count when the window spans the sequence).
    let sliding = match &model.sliding_window {
        Some(sw) => sw.n_sliding() as f64 * seq as f64 * sw.mean_keys(seq) / ((seq as f64 + 1.0) / 2.0),
        None => 0.0,
    };
    let full = (model.n_attention_layers() - model.n_sliding_layers()) as f64 * seq as f64;
    (full + sliding) * (model.n_heads * (qk + v)) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::gpt3_175b;
    use crate::parallelism::Schedule;

    pub fn train(seq: u64, stack: Stack) -> Workload {
        Workload {
            mode: Mode::Train,
            micro_batch: 1,
            global_batch: 1,
            seq,
            batch: 1,
            kv_len: 0,
            precision: Dtype::Bf16,
            fp8_recipe: Fp8Recipe::Tensorwise,
            recompute: Recompute::None,
            stack,
            dropout: false,
            flash_attention: true,
            routing_imbalance: 1.0,
            moe_dispatcher: MoeDispatcher::AllToAll,
            moe_flex_backend: FlexBackend::DeepEp,
            moe_capacity: None,
            lora: None,
            mtp_layers: 0,
            cp_comm: CpComm::P2p,
            megatron: MegatronMemory::default(),
            fsdp: FsdpPrecision::default(),
            decode_tokens: 1,
            attention_dp: None,
            packed_doc_len: None,
            train_loop: TrainLoop::Plain,
            fp8_non_tn: false,
            compile_loss: true,
        }
    }

    fn single() -> ParallelConfig {
        ParallelConfig { tp: 1, sp: false, pp: 1, vp: 1, dp: 1, cp: 1, ep: 1, etp: 1, zero: 0, schedule: Schedule::OneFOneB, split: Default::default() }
    }

    fn step_flops(model: &Model, pc: &ParallelConfig, w: &Workload, causal_as_full: bool) -> f64 {
        let ops = forward_ops(model, pc, w);
        let mut fwd = ops.embedding.clone();
        for _ in 0..model.n_layers {
            fwd.extend(ops.dense_layer.iter().cloned());
        }
        fwd.extend(ops.head.iter().cloned());
        let bwd = backward_of(&fwd);
        fwd.iter()
            .chain(bwd.iter())
            .map(|op| match (&op.kind, causal_as_full) {
                (OpKind::Attention { q_len, kv_len, .. }, true) => {
                    op.flops() / causal_fraction(*q_len, *kv_len) / if op.pass == Pass::Backward { 1.25 } else { 1.0 }
                }
                _ => op.flops(),
            })
            .sum()
    }

    #[test]
    fn causal_fraction_is_about_half_for_training() {
        assert!((causal_fraction(4096, 4096) - 0.5).abs() < 1e-3);
        assert_eq!(causal_fraction(1, 100), 1.0);
    }

    #[test]
    fn op_list_flops_match_6n_plus_12lhs() {
        let m = gpt3_175b();
        let s = 2048;
        let w = train(s, Stack::Megatron);
        // Op list with attention counted in full (the convention) vs the closed form.
        let per_token = step_flops(&m, &single(), &w, true) / s as f64;
        let closed = 6.0 * m.matmul_params_per_token() + 12.0 * (m.n_layers * m.hidden * s) as f64;
        assert!((per_token / closed - 1.0).abs() < 0.01, "{per_token} vs {closed}");
        // 6N with N = all parameters (embedding included) is within 1% too for a model this size.
        let six_n = 6.0 * m.params().total() + 12.0 * (m.n_layers * m.hidden * s) as f64;
        assert!((per_token / six_n - 1.0).abs() < 0.01, "{per_token} vs {six_n}");
        assert!((model_flops_per_token_train(&m, s, None) / closed - 1.0).abs() < 1e-9);
    }

    #[test]
    fn causal_execution_halves_attention_flops_only() {
        let m = gpt3_175b();
        let s = 2048;
        let w = train(s, Stack::Megatron);
        let full = step_flops(&m, &single(), &w, true);
        let executed = step_flops(&m, &single(), &w, false);
        // Executed attention: fwd 0.5 * 4Lhs^2 b, bwd 2.5x that; the convention counts fwd 4, bwd 8.
        let attn_conv = 12.0 * (m.n_layers * m.hidden * s * s) as f64;
        let attn_exec = 3.5 * 4.0 * (m.n_layers * m.hidden * s * s) as f64 * causal_fraction(s, s);
        assert!(((full - executed) - (attn_conv - attn_exec)).abs() / full < 1e-3);
    }

    /// Forward attention FLOPs of one layer on one CP rank, and the ops of that layer.
    fn cp_layer(m: &Model, cp: u32, seq: u64, comm: CpComm) -> (f64, Vec<Op>) {
        let pc = ParallelConfig { cp, ..single() };
        let w = Workload { cp_comm: comm, ..train(seq, Stack::Megatron) };
        let ops = forward_ops(m, &pc, &w).dense_layer;
        let attn = ops.iter().filter(|op| matches!(op.kind, OpKind::Attention { .. })).map(Op::flops).sum();
        (attn, ops)
    }

    #[test]
    fn load_balanced_context_parallelism_gives_every_rank_one_cp_th_of_the_causal_work() {
        let m = gpt3_175b();
        let seq = 131_072;
        // The causal forward of one sequence and layer, by hand: 4 h d_head x (seq^2 / 2) (the
        // diagonal's half is counted, the ring's block convention: s^2/2, not s(s+1)/2).
        let causal_total = 4.0 * (m.n_heads * m.head_dim) as f64 * (seq * seq) as f64 / 2.0;
        for cp in [2u32, 4, 8, 16, 32] {
            for comm in [CpComm::P2p, CpComm::AllGather, CpComm::A2a] {
                let (per_rank, _) = cp_layer(&m, cp, seq, comm);
                // Every rank: 1 / cp of it (the ops are one rank's; the split makes them the same
                // on every rank: chunks r and 2cp-1-r).
                let share = per_rank / causal_total;
                assert!((share * cp as f64 - 1.0).abs() < 1e-3, "cp {cp} {comm:?}: rank share {share}");
            }
            // Not the last rank's share of an unbalanced contiguous split: 1 - 1/(2 cp) of its
            // q x kv rectangle, (2 cp - 1) / cp^2 of the total.
            let unbalanced_last = (2 * cp - 1) as f64 / (cp * cp) as f64;
            let (per_rank, _) = cp_layer(&m, cp, seq, CpComm::P2p);
            assert!(per_rank / causal_total < 0.7 * unbalanced_last, "cp {cp}: {} vs the last rank's {unbalanced_last}", per_rank / causal_total);
        }
    }

    #[test]
    fn ring_attention_runs_cp_blocks_of_2c_by_c_with_the_kv_ring_beside_them() {
        let m = gpt3_175b();
        let (cp, seq) = (8u32, 65_536u64);
        let (_, ops) = cp_layer(&m, cp, seq, CpComm::P2p);
        let c = seq / (2 * cp as u64);
        let i = ops.iter().position(|op| op.name == "attention").unwrap();
        // The key/value exchange right before the attention blocks, all of the sequence's K and V.
        let kv_all = (seq * m.n_kv_heads * 2 * m.head_dim) as f64 * 2.0;
        assert_eq!(ops[i - 1].kind, OpKind::Comm { op: CollectiveOp::AllGather, group: Group::Cp, bytes: kv_all });
        let OpKind::Attention { batch_heads, q_len, kv_len, causal, .. } = ops[i].kind else { unreachable!() };
        assert_eq!((batch_heads, q_len, kv_len, causal), (cp as u64 * m.n_heads, 2 * c, c, false));
        // Backward: keys, values and their gradients (twice the bytes), before the attention's
        // backward, and nothing after it.
        let bwd = backward_of(&ops);
        let j = bwd.iter().position(|op| op.name == "attention").unwrap();
        assert_eq!(bwd[j - 1].name, "cp_kv_dkv_p2p");
        assert_eq!(bwd[j - 1].kind, OpKind::Comm { op: CollectiveOp::AllGather, group: Group::Cp, bytes: 2.0 * kv_all });
        assert_eq!(bwd.iter().filter(|op| matches!(op.kind, OpKind::Comm { group: Group::Cp, .. })).count(), 1);
        // a2a: the whole sequence on heads / cp heads, causal, between two all-to-alls.
        let (_, ops) = cp_layer(&m, cp, seq, CpComm::A2a);
        let i = ops.iter().position(|op| op.name == "attention").unwrap();
        let OpKind::Attention { batch_heads, q_len, kv_len, causal, .. } = ops[i].kind else { unreachable!() };
        assert_eq!((batch_heads, q_len, kv_len, causal), (m.n_heads / cp as u64, seq, seq, true));
        assert_eq!((ops[i - 1].name, ops[i + 1].name), ("cp_a2a_qkv", "cp_a2a_out"));
    }

    /// PyTorch's context parallelism on a torch stack (torchtitan): the all-gather carries the
    /// keys and values repeated to the query heads, the merges and the backward's fp32
    /// accumulation are priced with the bytes counted from torch's code, the backward sends the
    /// fp32 dk/dv round the ring (twice the gathered bytes), and Megatron's CP keeps TE's ops.
    #[test]
    fn torch_context_parallelism_runs_pytorchs_ring() {
        let m = gpt3_175b();
        let (cp, seq) = (8u32, 65_536u64);
        let pc = ParallelConfig { cp, ..single() };
        let w = Workload { cp_comm: CpComm::AllGather, ..train(seq, Stack::TorchCompile) };
        let ops = forward_ops(&m, &pc, &w).dense_layer;
        let i = ops.iter().position(|op| op.name == "attention").unwrap();
        let kv_rep = (seq * m.n_heads * 2 * m.head_dim) as f64 * 2.0;
        assert_eq!(ops[i - 1].name, TORCH_CP_KV_GATHER);
        assert_eq!(ops[i - 1].kind, OpKind::Comm { op: CollectiveOp::AllGather, group: Group::Cp, bytes: kv_rep });
        // The merger right after the SDPA calls: per output element 12 + 38 (cp - 1) bytes and
        // 4 (cp - 1) per key/value element.
        let q_elems = (seq / cp as u64 * m.n_heads * m.head_dim) as f64;
        let fwd = q_elems * (12.0 + 38.0 * 7.0) + 2.0 * q_elems * 4.0 * 7.0;
        assert_eq!(ops[i + 1].name, TORCH_CP_MERGE);
        let OpKind::Memory { bytes, .. } = ops[i + 1].kind else { unreachable!() };
        assert!((bytes / fwd - 1.0).abs() < 1e-12, "{bytes} vs {fwd}");
        let bwd = backward_of(&ops);
        let merge = bwd.iter().find(|op| op.name == TORCH_CP_MERGE).unwrap();
        let OpKind::Memory { bytes, .. } = merge.kind else { unreachable!() };
        let want = q_elems * (76.0 + 52.0 * 7.0) + 2.0 * q_elems * 4.0 * 7.0;
        assert!((bytes / want - 1.0).abs() < 1e-12, "{bytes} vs {want}");
        // Backward: the keys and values gathered again before the attention's backward, the
        // fp32 dk/dv rotation after it.
        let j = bwd.iter().position(|op| op.name == "attention").unwrap();
        assert_eq!(bwd[j - 1].name, TORCH_CP_KV_GATHER);
        assert_eq!(bwd[j + 1].name, TORCH_CP_DKV_ROTATE);
        assert_eq!(bwd[j + 1].kind, OpKind::Comm { op: CollectiveOp::SendRecv, group: Group::Cp, bytes: 2.0 * kv_rep });
        // Megatron: TE's ops, none of PyTorch's.
        let (_, ops) = cp_layer(&m, cp, seq, CpComm::AllGather);
        assert!(ops.iter().any(|op| op.name == "cp_all_gather_kv"));
        assert!(!ops.iter().any(|op| matches!(op.name, TORCH_CP_KV_GATHER | TORCH_CP_MERGE)));
    }

    /// One micro-batch's forward and backward FLOPs of a hybrid model, its layers in pattern order.
    fn hybrid_step_flops(model: &Model, pc: &ParallelConfig, w: &Workload) -> f64 {
        let ops = forward_ops(model, pc, w);
        let mut fwd = ops.embedding.clone();
        for kind in model.layer_kinds() {
            fwd.extend(ops.layer(kind).iter().cloned());
        }
        fwd.extend(ops.head.iter().cloned());
        let bwd = backward_of(&fwd);
        fwd.iter()
            .chain(bwd.iter())
            .map(|op| match &op.kind {
                // The convention counts attention in full, its backward at 2x.
                OpKind::Attention { q_len, kv_len, .. } => op.flops() / causal_fraction(*q_len, *kv_len) / if op.pass == Pass::Backward { 1.25 } else { 1.0 },
                _ => op.flops(),
            })
            .sum()
    }

    #[test]
    fn hybrid_op_list_flops_are_the_model_flops_plus_the_scans_recompute() {
        let m = crate::model::tests::nemotron_h_8b();
        let s = 8192;
        let w = train(s, Stack::Megatron);
        let per_token = hybrid_step_flops(&m, &single(), &w) / s as f64;
        let mb = &m.hybrid.as_ref().unwrap().mamba;
        // The scan's forward per token: 4 H P N + 2 Q G N + 2 Q H P (Nemotron-H 8B: 6,553,600).
        assert_eq!(mb.scan_flops_per_token(), 6_553_600.0);
        // The backward recomputes the chunk states (2 H P N) and C B^T (2 Q G N) before its gradients.
        let recomputed = 24.0 * (2.0 * 128.0 * 64.0 * 128.0 + 2.0 * 128.0 * 8.0 * 128.0);
        let model = model_flops_per_token_train(&m, s, None);
        assert!((per_token / (model + recomputed) - 1.0).abs() < 1e-9, "{per_token} vs {model} + {recomputed}");
        // The closed form: 6 N + 12 x (4 attention layers) x 32 heads x 128 x s / 2... written out.
        let attention = 6.0 * (4 * s * 32 * 256) as f64;
        assert!((model - (6.0 * m.matmul_params_per_token() + attention + 3.0 * 24.0 * 6_553_600.0)).abs() < 1.0);
        // TP splits the mixers' heads and groups, the attention heads and the MLP evenly.
        let mut pc = single();
        pc.tp = 8;
        pc.sp = true;
        let f8 = hybrid_step_flops(&m, &pc, &w);
        assert!((per_token * s as f64 / f8 / 8.0 - 1.0).abs() < 0.01);
    }

    #[test]
    fn mamba_layers_list_the_mixer_kernels_and_decode_reads_the_state() {
        let m = crate::model::tests::nemotron_h_8b();
        let ops = forward_ops(&m, &single(), &train(8192, Stack::Megatron));
        let names: Vec<&str> = ops.mamba_layer.iter().map(|o| o.name).collect();
        assert_eq!(
            names,
            [
                "input_norm",
                "mamba_in_proj",
                "conv1d",
                "ssd_chunk_cumsum",
                "ssd_chunk_state",
                "ssd_state_passing",
                "ssd_bmm_chunk",
                "ssd_chunk_scan",
                "ssd_chunk_scan_states",
                "ssd_gate",
                "mamba_norm",
                "mamba_out_proj",
                // Megatron prices the block's residual add as a kernel of its own.
                "residual_add"
            ]
        );
        // No RoPE in Nemotron-H's attention; the dense lists are empty for a hybrid model.
        assert!(ops.attention_layer.iter().all(|o| o.name != "rope") && ops.dense_layer.is_empty());
        // The state passing moves 64 chunks x 128 heads x 64 x 128 fp32 reads and bf16 writes.
        let passing = ops.mamba_layer.iter().find(|o| o.name == "ssd_state_passing").unwrap();
        assert_eq!(passing.kind, OpKind::Memory { bytes: (64 * 128 * 64 * 128) as f64 * 6.0, kernels: 1 });
        // Decode: batch 4 reads and writes each sequence's 4 MiB fp32 state once.
        let mut w = train(8192, Stack::Megatron);
        w.mode = Mode::Decode;
        w.batch = 4;
        w.kv_len = 1000;
        let ops = forward_ops(&m, &single(), &w);
        let update = ops.mamba_layer.iter().find(|o| o.name == "ssm_state_update").unwrap();
        let io = (2 * 8192 + 2 * 8 * 128 + 128 + 8192) as f64 * 2.0;
        assert_eq!(update.kind, OpKind::Memory { bytes: 4.0 * (2.0 * 4_194_304.0 + io), kernels: 1 });
        assert!(ops.mamba_layer.iter().all(|o| !o.name.starts_with("ssd_")));
    }

    #[test]
    fn lora_skips_the_frozen_weight_gradients_and_adds_the_adapters() {
        let m = gpt3_175b();
        let s = 2048;
        let mut w = train(s, Stack::Megatron);
        let full = forward_ops(&m, &single(), &w);
        w.lora = Some(Lora::new(16, LoraTarget::ALL.to_vec()));
        let lora = forward_ops(&m, &single(), &w);
        let count = |ops: &[Op], name: &str| ops.iter().filter(|o| o.name == name && matches!(o.kind, OpKind::Gemm { .. })).count();
        // Every base weight GEMM: dgrad only under LoRA (wgrad skipped), both in full training.
        for name in ["qkv_proj", "out_proj", "up_proj", "down_proj"] {
            assert_eq!(count(&backward_of(&full.dense_layer), name), 2, "{name}");
            assert_eq!(count(&backward_of(&lora.dense_layer), name), 1, "{name}");
        }
        assert_eq!(count(&backward_of(&lora.head), "lm_head"), 1);
        // The embedding's only backward is its weight gradient: none when frozen.
        assert!(backward_of(&lora.embedding).iter().all(|o| o.name != "embedding"));
        // Four adapters, A and B each, with dgrad and wgrad in backward.
        assert_eq!(count(&lora.dense_layer, "lora_a"), 4);
        assert_eq!(count(&backward_of(&lora.dense_layer), "lora_b"), 8);
        // The op list's FLOPs equal the LoRA convention: 4 x base matmul parameters, 6 x the
        // adapters', attention in full.
        let per_token = step_flops(&m, &single(), &w, true) / s as f64;
        let closed = model_flops_per_token_train(&m, s, w.lora.as_ref());
        assert!((per_token / closed - 1.0).abs() < 0.01, "{per_token} vs {closed}");
        let full_flops = model_flops_per_token_train(&m, s, None);
        assert!(closed < 0.75 * full_flops && closed > 0.66 * full_flops, "{closed} vs {full_flops}");
    }

    #[test]
    fn lora_adapters_shard_over_tp_and_gather_the_row_parallel_outputs() {
        let m = gpt3_175b();
        let mut w = train(2048, Stack::Megatron);
        w.lora = Some(Lora::new(16, vec![LoraTarget::Proj]));
        let mut pc = single();
        pc.tp = 8;
        let ops = forward_ops(&m, &pc, &w).dense_layer;
        let gemm = |name: &str| {
            ops.iter().find_map(|o| match (o.name == name, &o.kind) {
                (true, OpKind::Gemm { m, n, k, .. }) => Some((*m, *n, *k)),
                _ => None,
            })
        };
        // Row-parallel proj: A reads the TP shard of the input, B writes a shard of the output.
        assert_eq!(gemm("lora_a"), Some((2048, 16, 12288 / 8)));
        assert_eq!(gemm("lora_b"), Some((2048, 12288 / 8, 16)));
        let gather = ops.iter().find(|o| o.name == "lora_gather").unwrap();
        assert!(matches!(gather.kind, OpKind::Comm { op: CollectiveOp::AllGather, bytes, .. } if bytes == 2048.0 * 12288.0 * 2.0));
        // Without SP the gathered output's gradient is a local split: no backward collective.
        assert!(backward_of(&ops).iter().all(|o| o.name != "lora_gather"));
    }

    #[test]
    fn compiled_transformers_attention_is_masked_not_causal() {
        let m = gpt3_175b();
        let attn = |stack, mode| {
            let mut w = train(4096, stack);
            w.mode = mode;
            w.kv_len = 100;
            let ops = forward_ops(&m, &single(), &w).dense_layer;
            let causal = ops.iter().find_map(|o| match o.kind {
                OpKind::Attention { causal, .. } => Some(causal),
                _ => None,
            });
            let mask = ops.iter().find(|o| o.name == "sdpa_mask").map(|o| match o.kind {
                OpKind::Memory { bytes, .. } => bytes,
                _ => 0.0,
            });
            (causal.unwrap(), mask)
        };
        // b x heads x s x s booleans, read once per head in the forward.
        let mask = (m.n_heads * 4096 * 4096) as f64;
        assert_eq!(attn(Stack::HfCompile, Mode::Train), (false, Some(mask)));
        assert_eq!(attn(Stack::HfCompile, Mode::Prefill), (false, Some(mask)));
        assert_eq!(attn(Stack::HfEager, Mode::Train), (true, None));
        assert_eq!(attn(Stack::TorchCompile, Mode::Train), (true, None));
        // One query per sequence: no mask, causal = attend to everything cached.
        assert_eq!(attn(Stack::HfCompile, Mode::Decode), (true, None));
    }

    #[test]
    fn trtllm_fp8_quantizes_each_gemm_input_with_its_static_scale() {
        let m = gpt3_175b();
        let mut w = train(1, Stack::Trtllm);
        (w.mode, w.batch, w.kv_len, w.precision) = (Mode::Decode, 256, 1024, Dtype::Fp8);
        let fwd = forward_ops(&m, &single(), &w).dense_layer;
        let (t, h, f) = (256.0, m.hidden as f64, m.ffn_hidden as f64);
        let q: Vec<(f64, u32)> = fwd
            .iter()
            .filter(|o| o.name == "quantize")
            .map(|o| match o.kind {
                OpKind::Memory { bytes, kernels } => (bytes, kernels),
                _ => unreachable!(),
            })
            .collect();
        // qkv, out, up (and gate, one GEMM) and down inputs: read bf16, write FP8, one kernel each;
        // no amax pass (the checkpoint's calibrated input scale).
        assert_eq!(q, vec![(3.0 * t * h, 1), (3.0 * t * h, 1), (3.0 * t * h, 1), (3.0 * t * f, 1)]);
        // Training stacks keep their current-scaling amax pass (2 + 2 + 1 B, two kernels).
        let mut mg = train(2048, Stack::Megatron);
        mg.precision = Dtype::Fp8;
        let first = forward_ops(&m, &single(), &mg).dense_layer.into_iter().find(|o| o.name == "quantize").unwrap();
        assert!(matches!(first.kind, OpKind::Memory { kernels: 2, .. }), "{first:?}");
    }

    #[test]
    fn torchao_casts_each_distinct_input_and_each_output_gradient() {
        let m = gpt3_175b();
        let mut w = train(2048, Stack::HfCompile);
        w.precision = Dtype::Fp8;
        let fwd = forward_ops(&m, &single(), &w).dense_layer;
        let t = 2048.0;
        let h = m.hidden as f64;
        let casts: Vec<f64> = fwd
            .iter()
            .filter(|o| o.name == FP8_CAST)
            .map(|o| match o.kind {
                OpKind::Memory { bytes, .. } => bytes,
                _ => unreachable!(),
            })
            .collect();
        // q, k, v (k and v share q's cast), out, up and down (plain FFN): 4 B per input element.
        let f = m.ffn_hidden as f64;
        assert_eq!(casts, vec![4.0 * t * h, 0.0, 0.0, 4.0 * t * h, 4.0 * t * h, 4.0 * t * f]);
        assert!(!fwd.iter().any(|o| o.name == "quantize"));
        // Backward: one cast per GEMM of its output gradient (m x n), none doubled from the forward.
        let bwd = backward_of(&fwd);
        let grad_casts: f64 = bwd
            .iter()
            .filter(|o| o.name == FP8_CAST)
            .map(|o| match o.kind {
                OpKind::Memory { bytes, .. } => bytes,
                _ => unreachable!(),
            })
            .sum();
        let outputs: f64 = fwd
            .iter()
            .enumerate()
            .filter(|(i, _)| *i > 0 && fwd[i - 1].name == FP8_CAST)
            .map(|(_, o)| match o.kind {
                OpKind::Gemm { m, n, count, .. } => (m * n * count) as f64,
                _ => unreachable!(),
            })
            .sum();
        assert_eq!(grad_casts, 4.0 * outputs);
        // bf16 training keeps none of them.
        let bf16 = forward_ops(&m, &single(), &train(2048, Stack::HfCompile)).dense_layer;
        assert!(!bf16.iter().any(|o| o.name == FP8_CAST));
    }

    #[test]
    fn torchao_rowwise_rescales_both_gradient_gemm_outputs() {
        let m = gpt3_175b();
        let mut w = train(2048, Stack::TorchCompile);
        w.precision = Dtype::Fp8;
        w.fp8_recipe = Fp8Recipe::Rowwise;
        let fwd = forward_ops(&m, &single(), &w).dense_layer;
        let bwd = backward_of(&fwd);
        // Every converted GEMM (the one after a rowwise cast, shared casts included): its data
        // gradient's rescale (m x k), its output gradient's column-wise cast (m x n), and its
        // input's column-wise cast (m x k) where the input is its own.
        let want: f64 = fwd
            .iter()
            .enumerate()
            .filter(|(i, _)| *i > 0 && fwd[i - 1].name == FP8_CAST_ROWWISE)
            .map(|(i, o)| match (o.kind.clone(), &fwd[i - 1].kind) {
                (OpKind::Gemm { m, n, k, count }, OpKind::Memory { bytes, .. }) => {
                    let own = if *bytes > 0.0 { ROWWISE_INPUT_COLUMN_CAST_BYTES } else { 0.0 };
                    (m * k * count) as f64 * (ROWWISE_GRAD_SCALE_BYTES + own) + (m * n * count) as f64 * ROWWISE_GRAD_COLUMN_CAST_BYTES
                }
                _ => unreachable!(),
            })
            .sum();
        let got: f64 = bwd
            .iter()
            .filter(|o| o.name == FP8_ROWWISE_SCALE)
            .map(|o| match o.kind {
                OpKind::Memory { bytes, .. } => bytes,
                _ => unreachable!(),
            })
            .sum();
        assert!(want > 0.0 && (got - want).abs() < 1e-6 * want, "{got} {want}");
        // Each follows its two gradient GEMMs; the casts themselves cost what tensorwise's do.
        let i = bwd.iter().position(|o| o.name == FP8_ROWWISE_SCALE).unwrap();
        assert!(matches!(bwd[i - 1].kind, OpKind::Gemm { .. }) && matches!(bwd[i - 2].kind, OpKind::Gemm { .. }));
        // Tensorwise runs the cuBLAS kernel with its scales in the epilogue: no rescale.
        w.fp8_recipe = Fp8Recipe::Tensorwise;
        let fwd = forward_ops(&m, &single(), &w).dense_layer;
        assert!(!backward_of(&fwd).iter().any(|o| o.name == FP8_ROWWISE_SCALE));
    }

    #[test]
    fn tp_shards_gemm_flops_evenly() {
        let m = gpt3_175b();
        let w = train(2048, Stack::Megatron);
        let mut pc = single();
        let f1 = step_flops(&m, &pc, &w, true);
        pc.tp = 8;
        pc.sp = true;
        let f8 = step_flops(&m, &pc, &w, true);
        assert!((f1 / f8 - 8.0).abs() < 0.01, "{}", f1 / f8);
    }

    #[test]
    fn lm_head_and_router_stay_bf16_in_low_precision_training_only() {
        let mut w = train(4096, Stack::Megatron);
        w.precision = Dtype::Fp8;
        assert_eq!((w.gemm_dtype("lm_head"), w.gemm_dtype("router"), w.gemm_dtype("qkv_proj")), (Dtype::Bf16, Dtype::Bf16, Dtype::Fp8));
        w.precision = Dtype::Fp4;
        assert_eq!((w.gemm_dtype("lm_head"), w.gemm_dtype("down_proj")), (Dtype::Bf16, Dtype::Fp4));
        // Inference keeps the checkpoint's precision everywhere.
        w.mode = Mode::Prefill;
        assert_eq!(w.gemm_dtype("lm_head"), Dtype::Fp4);
        // Nor is the LM head's input cast.
        let m = gpt3_175b();
        let pc = crate::parallelism::ParallelConfig {
            tp: 1,
            sp: false,
            pp: 1,
            vp: 1,
            dp: 1,
            cp: 1,
            ep: 1,
            etp: 1,
            zero: 1,
            schedule: Schedule::OneFOneB,
            split: Default::default(),
        };
        let mut w = train(2048, Stack::Megatron);
        w.precision = Dtype::Fp8;
        let ops = forward_ops(&m, &pc, &w);
        let casts = |list: &[Op]| list.iter().filter(|o| o.name == "quantize").count();
        assert_eq!(casts(&ops.head), 0);
        assert_eq!(casts(&ops.dense_layer), 4, "qkv, out, up, down");
    }

    #[test]
    fn packed_documents_attend_within_themselves() {
        let m = gpt3_175b();
        let pc = ParallelConfig { zero: 1, ..single() };
        let attention = |w: &Workload| {
            let ops = forward_ops(&m, &pc, w);
            ops.dense_layer.iter().find(|o| o.name == "attention").cloned().expect("attention op")
        };
        let full = train(2048, Stack::Megatron);
        let packed = Workload { packed_doc_len: Some(256), ..full.clone() };
        let (a, b) = (attention(&full), attention(&packed));
        let OpKind::Attention { batch_heads, q_len, kv_len, causal, .. } = b.kind else { panic!("{b:?}") };
        // 8 documents of 256 tokens per 2048-token sequence, each causal within itself.
        assert_eq!((q_len, kv_len, causal), (256, 256, true));
        let OpKind::Attention { batch_heads: full_bh, .. } = a.kind else { panic!("{a:?}") };
        assert_eq!(batch_heads, 8 * full_bh);
        // Causal work scales with the square of the length: 8 x (1/8)^2 of the full sequence's.
        assert!((b.flops() / a.flops() - 1.0 / 8.0).abs() < 1e-3, "{} / {}", b.flops(), a.flops());
        // The rest of the layer does not change.
        let gemm_flops =
            |w: &Workload| forward_ops(&m, &pc, w).dense_layer.iter().filter(|o| matches!(o.kind, OpKind::Gemm { .. })).map(Op::flops).sum::<f64>();
        assert_eq!(gemm_flops(&full), gemm_flops(&packed));
        // A document as long as the sequence is the unpacked case.
        assert_eq!(attention(&Workload { packed_doc_len: Some(2048), ..full.clone() }), a);
    }

    #[test]
    fn per_tensor_fp8_on_non_tn_gpus_writes_no_transposed_copy() {
        let m = gpt3_175b();
        let pc = ParallelConfig { zero: 1, ..single() };
        let quantize_bytes_of = |recipe: Fp8Recipe, non_tn: bool| {
            let w = Workload { precision: Dtype::Fp8, fp8_recipe: recipe, fp8_non_tn: non_tn, ..train(2048, Stack::Megatron) };
            forward_ops(&m, &pc, &w)
                .dense_layer
                .iter()
                .filter_map(|o| match o.kind {
                    OpKind::Memory { bytes, .. } if o.name == "quantize" => Some(bytes),
                    _ => None,
                })
                .sum::<f64>()
        };
        // Current scaling: amax read (2) + cast read (2) + copies written (2 on Hopper, 1 on Blackwell).
        let (hopper, blackwell) = (quantize_bytes_of(Fp8Recipe::Tensorwise, false), quantize_bytes_of(Fp8Recipe::Tensorwise, true));
        assert!((blackwell / hopper - 5.0 / 6.0).abs() < 1e-9, "{blackwell} / {hopper}");
        // MXFP8 keeps its column-wise copy (its scales run along the other axis).
        assert_eq!(quantize_bytes_of(Fp8Recipe::Mxfp8, true), quantize_bytes_of(Fp8Recipe::Mxfp8, false));
    }

    #[test]
    fn nvfp4_training_casts_the_rotated_wgrad_copy_in_a_pass_of_its_own() {
        // amax (2) + row-wise cast (2 read) + rotated column-wise cast (2 read) + two 4-bit copies
        // with E4M3 scales per 16 elements.
        assert_eq!(quantize_bytes(Dtype::Fp4, Fp8Recipe::Tensorwise, true), Some((6.0 + 2.0 * (0.5 + 1.0 / 16.0), 3)));
        assert_eq!(quantize_bytes(Dtype::Fp4, Fp8Recipe::Tensorwise, false), Some((4.0 + 0.5 + 1.0 / 16.0, 2)));
        // Delayed scaling needs no amax pass: less traffic than current scaling.
        assert!(quantize_bytes(Dtype::Fp8, Fp8Recipe::Delayed, true).unwrap().0 < quantize_bytes(Dtype::Fp8, Fp8Recipe::Tensorwise, true).unwrap().0);
        assert_eq!(quantize_bytes(Dtype::Bf16, Fp8Recipe::Tensorwise, true), None);
    }

    /// A Gemma-2-2B-shaped model (its config.json's dims; `config::hf` maps the file), with the
    /// window set per test.
    fn gemma2_2b(window: u64) -> Model {
        use crate::model::{LayerStyle, RmsStyle, SlidingWindow};
        let mut m = gpt3_175b();
        m.name = "gemma-2-2b".into();
        (m.n_layers, m.hidden, m.n_heads, m.n_kv_heads, m.head_dim, m.ffn_hidden, m.vocab) = (26, 2304, 8, 4, 256, 9216, 256_000);
        (m.ffn_kind, m.norm, m.position, m.linear_bias, m.max_seq_len) = (FfnKind::Gated, NormKind::RmsNorm, Position::Rope, false, 8192);
        m.style = LayerStyle {
            norm_placement: NormPlacement::PrePost,
            rms_style: RmsStyle::OffsetScaleThenCast,
            embedding_scale: true,
            final_logit_softcap: Some(30.0),
            ..LayerStyle::default()
        };
        m.sliding_window = Some(SlidingWindow { window, sliding: (0..26).map(|i| i % 2 == 0).collect() });
        m
    }

    #[test]
    fn gemma_layer_runs_four_norms_a_scaled_embedding_and_a_soft_capped_head() {
        let m = gemma2_2b(4096);
        let ops = forward_ops(&m, &single(), &train(2048, Stack::HfEager));
        let names: Vec<_> = ops.dense_layer.iter().map(|o| o.name).filter(|n| n.ends_with("norm")).collect();
        assert_eq!(names, ["input_norm", "attn_out_norm", "post_attention_norm", "ffn_out_norm"]);
        // The fp32-stream pre-norms: Llama's 5 kernels and the `1 + weight` one; the bf16 branch norms 9.
        let kernels = |name: &str| {
            ops.dense_layer.iter().find(|o| o.name == name).map(|o| match o.kind {
                OpKind::Memory { kernels, .. } => kernels,
                _ => 0,
            })
        };
        assert_eq!((kernels("input_norm"), kernels("attn_out_norm")), (Some(6), Some(9)));
        assert!(ops.embedding.iter().any(|o| o.name == "embedding_scale"));
        let cap = ops.head.iter().find(|o| o.name == "logit_softcap").expect("soft-cap");
        // Three bf16 passes over 2048 x 256000 logits: 12 B each.
        assert_eq!(cap.kind, OpKind::Memory { bytes: 2048.0 * 256_000.0 * 12.0, kernels: 3 });
        // Compiled, the soft-cap fuses into one kernel and the embedding's scale into the gather.
        let c = forward_ops(&m, &single(), &train(2048, Stack::HfCompile));
        assert!(c.head.iter().any(|o| o.name == "logit_softcap" && o.kind == OpKind::Memory { bytes: 2048.0 * 256_000.0 * 4.0, kernels: 1 }));
        assert!(!c.embedding.iter().any(|o| o.name == "embedding_scale"));
    }

    #[test]
    fn sliding_layers_past_the_window_run_masked_sdpa_on_the_hf_stacks() {
        let attn = |m: &Model, w: &Workload| forward_ops(m, &single(), w).dense_layer.into_iter().find(|o| o.name == "attention").unwrap();
        let names = |m: &Model, w: &Workload| forward_ops(m, &single(), w).dense_layer.into_iter().map(|o| o.name).collect::<Vec<_>>();
        // Below the window transformers skips the mask: causal flash on every layer, as a full one.
        let below = gemma2_2b(4096);
        let OpKind::Attention { window, causal, .. } = attn(&below, &train(2048, Stack::HfEager)).kind else { unreachable!() };
        assert!(causal && window.is_none());
        assert!(!names(&below, &train(2048, Stack::HfEager)).contains(&"repeat_kv"));
        // At the window: the sliding half runs the whole score matrix under the mask, GQA's k and
        // v repeated first.
        let at = gemma2_2b(2048);
        let op = attn(&at, &train(2048, Stack::HfEager));
        let OpKind::Attention { window: Some(win), causal: true, .. } = op.kind else { panic!("{op:?}") };
        assert!(win.masked && (win.share - 0.5).abs() < 1e-12);
        let full = 2.0 * (8 * 2048 * 2048) as f64 * 512.0;
        let expect = 0.5 * full * causal_fraction(2048, 2048) + 0.5 * full;
        assert!((op.flops() / expect - 1.0).abs() < 1e-12);
        let n = names(&at, &train(2048, Stack::HfEager));
        assert!(n.contains(&"repeat_kv") && n.contains(&"sdpa_mask"));
        // Megatron's fused kernel takes the window itself: banded, unmasked.
        let OpKind::Attention { window: Some(win), .. } = attn(&at, &train(2048, Stack::Megatron)).kind else { unreachable!() };
        assert!(!win.masked);
    }

    #[test]
    fn phi3_fuses_qkv_and_gate_up_into_one_gemm_each() {
        let mut m = gemma2_2b(4096);
        m.style = crate::model::LayerStyle { fused_projections: true, ..Default::default() };
        m.sliding_window = None;
        let ops = forward_ops(&m, &single(), &train(2048, Stack::HfEager)).dense_layer;
        let gemms: Vec<_> = ops.iter().filter(|o| matches!(o.kind, OpKind::Gemm { .. })).map(|o| o.name).collect();
        assert_eq!(gemms, ["qkv_proj", "out_proj", "up_proj", "down_proj"]);
        // One autocast cast of each norm's output (one linear reads it), four weight casts.
        let casts: u32 = ops
            .iter()
            .filter(|o| matches!(o.name, "autocast_cast" | "weight_cast"))
            .map(|o| match o.kind {
                OpKind::Memory { kernels, .. } => kernels,
                _ => 0,
            })
            .sum();
        assert_eq!(casts, 1 + 1 + 4);
    }
}
