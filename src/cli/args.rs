//! The scenario flags every engine command shares (predict, simulate, plan, compare, serve,
//! measure), their value ranges, and the one overlay of the flags over a scenario file.
//!
//! Ranges are checked by clap, so a bad value names its flag (`--tp`: invalid value '-1' ...)
//! and exits 2; negative numbers parse as values, not as flags. Counts fit a `u32`, so a GPU
//! count of 2^32 is refused rather than cut.

use std::path::PathBuf;

use clap::builder::{RangedI64ValueParser, TypedValueParser};

use crate::config::scenario::{OptionsWire, ParallelWire, ScenarioWire, WorkloadWire};

/// A count (GPUs, parallel sizes, batch sizes, lengths): 1 ..= 2^32 - 1.
pub fn count() -> RangedI64ValueParser<i64> {
    clap::value_parser!(i64).range(1..=u32::MAX as i64)
}

/// A count as a `u64` (plan's GPU and batch ranges): 1 ..= 2^32 - 1.
pub fn count_u64() -> impl TypedValueParser<Value = u64> {
    clap::value_parser!(u64).range(1..=u32::MAX as u64)
}

/// A count as a `u32`: 1 ..= 2^32 - 1.
pub fn count_u32() -> impl TypedValueParser<Value = u32> {
    clap::value_parser!(u32).range(1..)
}

/// A ZeRO stage: 0 ..= 3.
pub fn zero_stage() -> RangedI64ValueParser<i64> {
    clap::value_parser!(i64).range(0..=3)
}

fn number(s: &str) -> Result<f64, String> {
    s.trim().parse::<f64>().map_err(|_| format!("`{s}` is not a number"))
}

/// A finite number above zero.
pub fn positive(s: &str) -> Result<f64, String> {
    let x = number(s)?;
    if x > 0.0 && x.is_finite() {
        Ok(x)
    } else {
        Err(format!("{x} must be positive"))
    }
}

/// A finite number at or above zero.
pub fn non_negative(s: &str) -> Result<f64, String> {
    let x = number(s)?;
    if x >= 0.0 && x.is_finite() {
        Ok(x)
    } else {
        Err(format!("{x} must be non-negative"))
    }
}

/// A non-negative number or infinity (a time limit that may be off).
pub fn non_negative_or_inf(s: &str) -> Result<f64, String> {
    let x = number(s)?;
    if x >= 0.0 {
        Ok(x)
    } else {
        Err(format!("{x} must be non-negative"))
    }
}

/// A finite number of at least 1 (a ratio to the mean).
pub fn at_least_one(s: &str) -> Result<f64, String> {
    let x = number(s)?;
    if x >= 1.0 && x.is_finite() {
        Ok(x)
    } else {
        Err(format!("{x} must be at least 1"))
    }
}

/// A share in (0, 1].
pub fn share(s: &str) -> Result<f64, String> {
    let x = number(s)?;
    if x > 0.0 && x <= 1.0 {
        Ok(x)
    } else {
        Err(format!("{x} must be in (0, 1]"))
    }
}

/// A share in [0, 1].
pub fn fraction(s: &str) -> Result<f64, String> {
    let x = number(s)?;
    if (0.0..=1.0).contains(&x) {
        Ok(x)
    } else {
        Err(format!("{x} is not in 0..1"))
    }
}

/// A share in [0, 1): memory kept free.
pub fn headroom(s: &str) -> Result<f64, String> {
    let x = number(s)?;
    if (0.0..1.0).contains(&x) {
        Ok(x)
    } else {
        Err(format!("{x} must be a fraction in [0, 1)"))
    }
}

/// Model, system, parallel layout and batch: one group of flags over a scenario file.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct ScenarioArgs {
    /// Scenario file (scenarios/*.toml; for `serve`, scenarios/serving/*.toml; for `measure`, the
    /// record's scenario keys); flags override its values
    #[arg(long)]
    pub scenario: Option<PathBuf>,
    /// Model: a name from models/, a TOML file, or a Hugging Face config.json
    #[arg(long)]
    pub model: Option<String>,
    /// System: a name from calibration/systems/ (dgx-b200, gb200-nvl72, dgx-h100, hgx-h200, ...) or a file
    #[arg(long)]
    pub system: Option<String>,
    /// Total GPUs (= tp * pp * dp * cp; serve: all replicas, both pools when disaggregated)
    #[arg(long, value_parser = count(), allow_negative_numbers = true)]
    pub gpus: Option<i64>,
    /// Tensor parallelism (serve: per replica)
    #[arg(long, value_parser = count(), allow_negative_numbers = true)]
    pub tp: Option<i64>,
    /// Pipeline parallelism (serve: per replica)
    #[arg(long, value_parser = count(), allow_negative_numbers = true)]
    pub pp: Option<i64>,
    /// Data parallelism (default: gpus / (tp * pp * cp))
    #[arg(long, value_parser = count(), allow_negative_numbers = true)]
    pub dp: Option<i64>,
    /// Context parallelism
    #[arg(long, value_parser = count(), allow_negative_numbers = true)]
    pub cp: Option<i64>,
    /// Context-parallel attention exchange, Transformer Engine's cp_comm_type: p2p (default, ring
    /// attention overlapped with the attention blocks), all_gather, or a2a (Ulysses)
    #[arg(long)]
    pub cp_comm: Option<String>,
    /// Expert parallelism
    #[arg(long, value_parser = count(), allow_negative_numbers = true)]
    pub ep: Option<i64>,
    /// Expert tensor parallelism
    #[arg(long, value_parser = count(), allow_negative_numbers = true)]
    pub etp: Option<i64>,
    /// Virtual pipeline stages per rank (interleaved 1F1B)
    #[arg(long, value_parser = count(), allow_negative_numbers = true)]
    pub vp: Option<i64>,
    /// Sequence parallelism with TP (default: on when tp > 1)
    #[arg(long)]
    pub sp: Option<bool>,
    /// Pipeline schedule: 1f1b, interleaved, gpipe
    #[arg(long)]
    pub schedule: Option<String>,
    /// ZeRO stage: 0, 1, 2, 3 (3 = FSDP full shard)
    #[arg(long, value_parser = zero_stage(), allow_negative_numbers = true)]
    pub zero: Option<i64>,
    /// Decoder layers on the first pipeline rank (Megatron-LM's flag)
    #[arg(long)]
    pub decoder_first_pipeline_num_layers: Option<i64>,
    /// Decoder layers on the last pipeline rank (Megatron-LM's flag)
    #[arg(long)]
    pub decoder_last_pipeline_num_layers: Option<i64>,
    /// The embedding counts as one layer in the pipeline split (Megatron-LM's flag)
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub account_for_embedding_in_pipeline_split: Option<bool>,
    /// The loss counts as one layer in the pipeline split (Megatron-LM's flag)
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub account_for_loss_in_pipeline_split: Option<bool>,
    /// Decoder layers per virtual stage, comma-separated (virtual stage = chunk * pp + rank)
    #[arg(long, value_delimiter = ',')]
    pub pipeline_layout: Option<Vec<i64>>,
    /// train, prefill or decode (plan and compare: train or serve; measure: also serve)
    #[arg(long)]
    pub mode: Option<String>,
    /// Sequences per micro-batch per data-parallel rank
    #[arg(long, value_parser = count(), allow_negative_numbers = true)]
    pub micro_batch: Option<i64>,
    /// Sequences per optimizer step, whole job
    #[arg(long, value_parser = count(), allow_negative_numbers = true)]
    pub global_batch: Option<i64>,
    /// Gradient-accumulation steps (training; with --micro-batch and dp, sets the global batch; a
    /// Hugging Face Trainer's gradient_accumulation_steps)
    #[arg(long, value_parser = count(), allow_negative_numbers = true)]
    pub grad_accum: Option<i64>,
    /// Sequence length (training, prefill)
    #[arg(long, value_parser = count(), allow_negative_numbers = true)]
    pub seq: Option<i64>,
    /// Sequences in flight per replica (inference)
    #[arg(long, value_parser = count(), allow_negative_numbers = true)]
    pub batch: Option<i64>,
    /// Cached tokens per sequence (decode)
    #[arg(long, value_parser = count(), allow_negative_numbers = true)]
    pub kv_len: Option<i64>,
    /// Decode: tokens each sequence generates from --kv-len on (default 1); the hf-* stacks'
    /// peak memory grows with it (DynamicCache's blocks the caching allocator cannot reuse)
    #[arg(long, value_parser = count(), allow_negative_numbers = true)]
    pub decode_tokens: Option<i64>,
    /// Training on packed sequences (THD): mean tokens per document packed into each --seq
    /// sequence; attention runs within each document (default: one document per sequence)
    #[arg(long, value_parser = count(), allow_negative_numbers = true)]
    pub packed_doc_len: Option<i64>,
    /// bf16, fp16, fp8, fp4 (NVFP4), tf32, fp32
    #[arg(long)]
    pub precision: Option<String>,
    /// With --precision fp8: tensorwise (current scaling, the default), delayed, blockwise,
    /// mxfp8 (Blackwell only), or rowwise (torchao; --stack torch-compile or hf-compile only)
    #[arg(long)]
    pub fp8_recipe: Option<String>,
    /// none, selective (Megatron-Core's modules; core attention by default), full, selective-op
    /// (torchtitan's per-op selective checkpointing: every other linear's output, attention and TP
    /// reduce-scatters saved, the rest recomputed; dense models under the torch and hf stacks), or
    /// layer:N (torchtitan's layer checkpointing: every N-th block of a rank recomputed whole; torch
    /// and hf stacks)
    #[arg(long)]
    pub recompute: Option<String>,
    /// megatron, torch-eager, torch-compile, hf-eager, hf-compile (transformers models as the library builds them)
    #[arg(long)]
    pub stack: Option<String>,
    /// Busiest expert rank's tokens / mean (1.0 = balanced)
    #[arg(long, value_parser = at_least_one, allow_negative_numbers = true)]
    pub routing_imbalance: Option<f64>,
    /// MoE token dispatcher: alltoall (default), allgather, or flex (DeepEP)
    #[arg(long)]
    pub moe_dispatcher: Option<String>,
    /// The flex dispatcher's kernels (Megatron --moe-flex-dispatcher-backend): deepep (default) or hybridep (permutes inside the dispatch and combine)
    #[arg(long)]
    pub moe_flex_backend: Option<String>,
    /// MoE expert capacity factor (Megatron --moe-expert-capacity-factor, > 0): tokens beyond factor x the mean
    /// per-expert load are dropped (default: dropless)
    #[arg(long, allow_negative_numbers = true)]
    pub moe_capacity_factor: Option<f64>,
    /// Pad every expert's input to its capacity (Megatron --moe-pad-expert-input-to-capacity; needs --moe-capacity-factor)
    #[arg(long)]
    pub moe_pad_to_capacity: Option<bool>,
    /// LoRA fine-tuning: the adapters' rank (Megatron-Bridge's `dim`); the base weights are frozen
    #[arg(long, allow_negative_numbers = true)]
    pub lora_rank: Option<i64>,
    /// LoRA targets, comma-separated: linear_qkv, linear_proj, linear_fc1, linear_fc2 (default: all four)
    #[arg(long, value_delimiter = ',')]
    pub lora_targets: Option<Vec<String>>,
    /// Multi-token-prediction modules to train (Megatron --mtp-num-layers; at most the model's `mtp_layers`, e.g. 1 for DeepSeek-V3)
    #[arg(long)]
    pub mtp_layers: Option<i64>,
    /// Megatron's main-gradient dtype: fp32 (default, grad_reduce_in_fp32) or bf16 (the Megatron-Bridge perf recipes)
    #[arg(long)]
    pub grad_reduce_dtype: Option<String>,
    /// torch-eager/torch-compile under --zero 3: FSDP2's MixedPrecisionPolicy param_dtype, fp32 (default: no policy, fp32 gathered, bf16 autocast) or bf16 (gathered and computed in bf16, no autocast; torchtitan's default)
    #[arg(long)]
    pub fsdp_param_dtype: Option<String>,
    /// torch stacks under --zero 3: the gradients' reduce-scatter dtype, fp32 or bf16 (default: the parameters'; torchtitan sets fp32)
    #[arg(long)]
    pub fsdp_reduce_dtype: Option<String>,
    /// torch stacks under --zero 3 with --precision fp8 --fp8-recipe tensorwise: torchao's float8 all-gather of the linear weights (enable_fsdp_float8_all_gather)
    #[arg(long)]
    pub fsdp_float8_all_gather: Option<bool>,
    /// torch-compile or hf-compile training: compile the loss with the model (default true; false: the loss runs eager beside the compiled blocks, keeping eager's fp32 logit copies)
    #[arg(long)]
    pub compile_loss: Option<bool>,
    /// Megatron fp8/fp4 training keeps the layers' weights only as quantized tensors (fp8_param_gather; no bf16 copy)
    #[arg(long)]
    pub fp8_param_gather: Option<bool>,
    /// Adam's moments: fp32 (default) or bf16 (Megatron's precision-aware optimizer)
    #[arg(long)]
    pub optimizer_state_dtype: Option<String>,
    /// With --recompute selective: Megatron's recompute modules, comma-separated: core_attn (default), mlp, moe, moe_act, shared_experts, layernorm, mla_up_proj
    #[arg(long, value_delimiter = ',')]
    pub recompute_modules: Option<Vec<String>>,
    /// Megatron's activation offload: layers whose activations go to host memory (cpu_offloading_num_layers; pp 1, no recompute)
    #[arg(long, allow_negative_numbers = true)]
    pub cpu_offload_layers: Option<i64>,
    /// Megatron's loss through Transformer Engine's fused cross entropy (cross_entropy_loss_fusion, impl te): the logits' gradient overwrites the bf16 logits
    #[arg(long)]
    pub cross_entropy_fusion: Option<bool>,
    /// Inference engines (trtllm, vllm, sglang) on an MoE model: attention data parallelism around expert-parallel MoE
    /// (TensorRT-LLM enable_attention_dp, SGLang --enable-dp-attention): --batch is the instance's sequences, spread over
    /// its --dp ranks, each with its own attention and KV cache; the experts span every GPU (ep x etp = tp x dp)
    #[arg(long)]
    pub attention_dp: bool,
    /// Overlap TP communication with GEMMs (Megatron --tp-comm-overlap; on torch-compile, PyTorch's async TP as torchtitan enables it)
    #[arg(long)]
    pub tp_comm_overlap: Option<bool>,
    /// Training with an hf-* stack: the loop around the model, plain (a PyTorch loop, default) or hf-trainer
    /// (transformers.Trainer at its defaults: its per-step NaN check leaves the GPU idle while the host clips,
    /// steps the optimizer and zeroes the gradients)
    #[arg(long)]
    pub train_loop: Option<String>,
    /// With --train-loop hf-trainer: TrainingArguments.max_grad_norm (default 1.0; 0 turns clipping off)
    #[arg(long, allow_negative_numbers = true)]
    pub max_grad_norm: Option<f64>,
    /// Megatron training's CUDA graphs: none (default), partial (attention and MoE router: Megatron-Bridge
    /// cuda_graph_impl transformer_engine), full (the whole iteration: cuda_graph_impl full_iteration)
    #[arg(long)]
    pub train_cuda_graphs: Option<String>,
    /// Megatron training's EP communication overlap (--overlap-moe-expert-parallel-comm): each micro-batch's MoE
    /// all-to-alls run beside another micro-batch's compute (needs ep > 1; with pp > 1 a virtual pipeline)
    #[arg(long)]
    pub moe_ep_overlap: Option<bool>,
    /// Megatron's shared-expert overlap (--moe-shared-expert-overlap): the shared experts run beside the alltoall
    /// dispatcher's all-to-alls (needs shared experts, ep > 1, --moe-dispatcher alltoall)
    #[arg(long)]
    pub moe_shared_expert_overlap: Option<bool>,
    /// A Megatron-LM argument list read as the scenario's layout, batch and precision (e.g. '--tensor-model-parallel-size 4
    /// --pipeline-model-parallel-size 8 ... --fp8-recipe mxfp8'); over the scenario file, under the other flags
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    pub from_megatron_args: Option<String>,
    /// Calibration profile: a name under calibration/profiles/, its folder or profile.toml;
    /// `none` ignores the one a system file names
    #[arg(long)]
    pub calibration: Option<String>,
}

impl ScenarioArgs {
    /// The files these flags name that a command reads (the scenario file; a model, system or
    /// calibration given as a path): a command's outputs must not be one of them.
    pub fn input_files(&self) -> Vec<(&'static str, Option<&std::path::Path>)> {
        fn file(v: &Option<String>) -> Option<&std::path::Path> {
            v.as_deref().map(std::path::Path::new).filter(|p| p.is_file())
        }
        vec![
            ("--scenario", self.scenario.as_deref()),
            ("--model", file(&self.model)),
            ("--system", file(&self.system)),
            ("--calibration", file(&self.calibration)),
        ]
    }
    /// The flags as a scenario overlay.
    pub fn to_wire(&self) -> ScenarioWire {
        ScenarioWire {
            model: self.model.clone(),
            system: self.system.clone(),
            gpus: self.gpus,
            calibration: self.calibration.clone(),
            parallelism: ParallelWire {
                tp: self.tp,
                pp: self.pp,
                dp: self.dp,
                cp: self.cp,
                ep: self.ep,
                etp: self.etp,
                vp: self.vp,
                sp: self.sp,
                zero: self.zero,
                schedule: self.schedule.clone(),
                decoder_first_pipeline_num_layers: self.decoder_first_pipeline_num_layers,
                decoder_last_pipeline_num_layers: self.decoder_last_pipeline_num_layers,
                account_for_embedding_in_pipeline_split: self.account_for_embedding_in_pipeline_split,
                account_for_loss_in_pipeline_split: self.account_for_loss_in_pipeline_split,
                pipeline_layout: self.pipeline_layout.clone(),
                cp_comm: self.cp_comm.clone(),
            },
            workload: WorkloadWire {
                mode: self.mode.clone(),
                micro_batch: self.micro_batch,
                global_batch: self.global_batch,
                grad_accum: self.grad_accum,
                seq: self.seq,
                batch: self.batch,
                kv_len: self.kv_len,
                precision: self.precision.clone(),
                fp8_recipe: self.fp8_recipe.clone(),
                recompute: self.recompute.clone(),
                stack: self.stack.clone(),
                dropout: None,
                flash_attention: None,
                routing_imbalance: self.routing_imbalance,
                moe_dispatcher: self.moe_dispatcher.clone(),
                moe_flex_backend: self.moe_flex_backend.clone(),
                moe_capacity_factor: self.moe_capacity_factor,
                moe_pad_to_capacity: self.moe_pad_to_capacity,
                lora_rank: self.lora_rank,
                lora_targets: self.lora_targets.clone(),
                mtp_layers: self.mtp_layers,
                grad_reduce_dtype: self.grad_reduce_dtype.clone(),
                fp8_param_gather: self.fp8_param_gather,
                optimizer_state_dtype: self.optimizer_state_dtype.clone(),
                recompute_modules: self.recompute_modules.clone(),
                cpu_offload_layers: self.cpu_offload_layers,
                cross_entropy_fusion: self.cross_entropy_fusion,
                fsdp_param_dtype: self.fsdp_param_dtype.clone(),
                fsdp_reduce_dtype: self.fsdp_reduce_dtype.clone(),
                fsdp_float8_all_gather: self.fsdp_float8_all_gather,
                compile_loss: self.compile_loss,
                decode_tokens: self.decode_tokens,
                attention_dp: self.attention_dp.then_some(true),
                packed_doc_len: self.packed_doc_len,
                train_loop: self.train_loop.clone(),
                max_grad_norm: self.max_grad_norm,
            },
            options: OptionsWire {
                tp_comm_overlap: self.tp_comm_overlap,
                dp_overlap: None,
                cuda_graphs: self.train_cuda_graphs.clone(),
                moe_ep_overlap: self.moe_ep_overlap,
                moe_shared_expert_overlap: self.moe_shared_expert_overlap,
            },
            ..ScenarioWire::default()
        }
    }

    /// The scenario file (if any) with the flags laid over it: the one overlay of every command
    /// that reads a `scenarios/*.toml` file.
    pub fn merged(&self) -> anyhow::Result<ScenarioWire> {
        use crate::config::scenario::{overlay, read_scenario};
        let mut base = match &self.scenario {
            Some(p) => read_scenario(p)?,
            None => ScenarioWire::default(),
        };
        if let Some(args) = &self.from_megatron_args {
            let read = crate::config::megatron::from_args(args)?;
            if !read.ignored.is_empty() {
                eprintln!("note: --from-megatron-args: not modelled, ignored: {}", read.ignored.join(" "));
            }
            base = overlay(base, read.wire);
        }
        Ok(overlay(base, self.to_wire()))
    }

    /// Read the scenario file (if any), overlay the flags, and build the scenario.
    pub fn build(&self) -> anyhow::Result<crate::scenario::Scenario> {
        Ok(crate::config::scenario::build(&self.merged()?, self.scenario.as_deref())?)
    }

    /// The flags of the group, by name.
    pub const FLAGS: &'static [&'static str] = &[
        "scenario",
        "model",
        "system",
        "gpus",
        "tp",
        "pp",
        "dp",
        "cp",
        "ep",
        "etp",
        "vp",
        "sp",
        "schedule",
        "zero",
        "mode",
        "micro-batch",
        "global-batch",
        "seq",
        "batch",
        "kv-len",
        "precision",
        "fp8-recipe",
        "recompute",
        "stack",
        "routing-imbalance",
        "moe-dispatcher",
        "lora-rank",
        "lora-targets",
        "grad-reduce-dtype",
        "fp8-param-gather",
        "optimizer-state-dtype",
        "recompute-modules",
        "cpu-offload-layers",
        "cross-entropy-fusion",
        "attention-dp",
        "cp-comm",
        "tp-comm-overlap",
        "from-megatron-args",
        "calibration",
    ];

    /// The flags given, by name.
    fn given(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        let mut f = |set: bool, name: &'static str| {
            if set {
                v.push(name)
            }
        };
        f(self.scenario.is_some(), "scenario");
        f(self.model.is_some(), "model");
        f(self.system.is_some(), "system");
        f(self.gpus.is_some(), "gpus");
        f(self.tp.is_some(), "tp");
        f(self.pp.is_some(), "pp");
        f(self.dp.is_some(), "dp");
        f(self.cp.is_some(), "cp");
        f(self.ep.is_some(), "ep");
        f(self.etp.is_some(), "etp");
        f(self.vp.is_some(), "vp");
        f(self.sp.is_some(), "sp");
        f(self.schedule.is_some(), "schedule");
        f(self.zero.is_some(), "zero");
        f(self.mode.is_some(), "mode");
        f(self.micro_batch.is_some(), "micro-batch");
        f(self.global_batch.is_some(), "global-batch");
        f(self.grad_accum.is_some(), "grad-accum");
        f(self.seq.is_some(), "seq");
        f(self.batch.is_some(), "batch");
        f(self.kv_len.is_some(), "kv-len");
        f(self.decode_tokens.is_some(), "decode-tokens");
        f(self.packed_doc_len.is_some(), "packed-doc-len");
        f(self.precision.is_some(), "precision");
        f(self.fp8_recipe.is_some(), "fp8-recipe");
        f(self.recompute.is_some(), "recompute");
        f(self.stack.is_some(), "stack");
        f(self.routing_imbalance.is_some(), "routing-imbalance");
        f(self.moe_dispatcher.is_some(), "moe-dispatcher");
        f(self.moe_flex_backend.is_some(), "moe-flex-backend");
        f(self.moe_capacity_factor.is_some(), "moe-capacity-factor");
        f(self.moe_pad_to_capacity.is_some(), "moe-pad-to-capacity");
        f(self.lora_rank.is_some(), "lora-rank");
        f(self.lora_targets.is_some(), "lora-targets");
        f(self.mtp_layers.is_some(), "mtp-layers");
        f(self.grad_reduce_dtype.is_some(), "grad-reduce-dtype");
        f(self.fp8_param_gather.is_some(), "fp8-param-gather");
        f(self.optimizer_state_dtype.is_some(), "optimizer-state-dtype");
        f(self.recompute_modules.is_some(), "recompute-modules");
        f(self.cpu_offload_layers.is_some(), "cpu-offload-layers");
        f(self.cross_entropy_fusion.is_some(), "cross-entropy-fusion");
        f(self.fsdp_param_dtype.is_some(), "fsdp-param-dtype");
        f(self.fsdp_reduce_dtype.is_some(), "fsdp-reduce-dtype");
        f(self.fsdp_float8_all_gather.is_some(), "fsdp-float8-all-gather");
        f(self.compile_loss.is_some(), "compile-loss");
        f(self.attention_dp, "attention-dp");
        f(self.cp_comm.is_some(), "cp-comm");
        f(self.tp_comm_overlap.is_some(), "tp-comm-overlap");
        f(self.train_cuda_graphs.is_some(), "train-cuda-graphs");
        f(self.train_loop.is_some(), "train-loop");
        f(self.max_grad_norm.is_some(), "max-grad-norm");
        f(self.moe_ep_overlap.is_some(), "moe-ep-overlap");
        f(self.moe_shared_expert_overlap.is_some(), "moe-shared-expert-overlap");
        f(self.from_megatron_args.is_some(), "from-megatron-args");
        f(self.calibration.is_some(), "calibration");
        v
    }

    /// Refuse the scenario flags that `command` does not read (it takes only `takes`).
    pub fn only(&self, command: &str, takes: &[&str]) -> anyhow::Result<()> {
        if let Some(x) = self.given().into_iter().find(|x| !takes.contains(x)) {
            anyhow::bail!("`--{x}` does not apply to `gpuplan {command}`\nhint: its scenario flags are --{}", takes.join(", --"));
        }
        Ok(())
    }
}

/// For a command that reads some of the group (`#[command(mut_args(hide_unless(TAKES)))]`): the
/// others are hidden from its help (and refused by `ScenarioArgs::only`).
pub fn hide_unless(takes: &'static [&'static str]) -> impl FnMut(clap::Arg) -> clap::Arg {
    move |a| match a.get_long() {
        Some(l) if ScenarioArgs::FLAGS.contains(&l) && !takes.contains(&l) => a.hide(true),
        _ => a,
    }
}
