//! Scenario files in `scenarios/` and the flags that override them.
//!
//! ```toml
//! name = "llama-3-70b-64xb200"
//! model = "llama-3-70b"          # catalog name, TOML path or HF config.json
//! system = "dgx-b200"
//! gpus = 64
//! [parallelism]                  # all optional: tp, pp, dp, cp, ep, etp, vp, sp, zero, schedule,
//!                                # decoder_first_pipeline_num_layers, decoder_last_pipeline_num_layers,
//!                                # account_for_embedding_in_pipeline_split,
//!                                # account_for_loss_in_pipeline_split, pipeline_layout = [n, ...]
//! tp = 4
//! pp = 2
//! [workload]                     # mode, micro_batch, global_batch (or grad_accum), seq, batch, kv_len, precision,
//! mode = "train"                 # fp8_recipe, recompute, stack, dropout, flash_attention,
//!                                # routing_imbalance, moe_dispatcher, moe_flex_backend, moe_capacity_factor,
//!                                # moe_pad_to_capacity, lora_rank, lora_targets,
//!                                # megatron: grad_reduce_dtype, optimizer_state_dtype,
//!                                # fp8_param_gather, recompute_modules, cpu_offload_layers,
//!                                # cross_entropy_fusion; torch stacks under zero 3:
//!                                # fsdp_param_dtype, fsdp_reduce_dtype, fsdp_float8_all_gather;
//!                                # compiled torch stacks: compile_loss;
//!                                # attention_dp (inference engines)
//! seq = 8192
//! global_batch = 512
//! [options]                      # tp_comm_overlap, dp_overlap, cuda_graphs, moe_ep_overlap,
//!                                # moe_shared_expert_overlap
//! ```
//!
//! Workload defaults (not hardware numbers): tp/pp/cp/ep/vp = 1, etp = tp for an MoE model without
//! EP (else 1), dp = gpus / (tp*pp*cp),
//! sp = (tp > 1), zero = 0, mode = train, micro_batch = 1, global_batch = micro_batch * dp (* grad_accum),
//! batch = 1, precision = bf16, fp8_recipe = tensorwise, recompute = none, stack = megatron, flash attention on, no dropout,
//! balanced routing, moe_dispatcher = alltoall, dropless MoE, no EP or shared-expert overlap, no LoRA (with `lora_rank`, lora_targets = all four linear layers). Pipeline split: Megatron's options as given; with none, layers that divide
//! over pp*vp split evenly and those that do not as the model's Megatron-Bridge recipe does
//! (`recipe_fill`).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{parse_toml, read_file, ConfigError, Problems};
use gpuplan_core::hardware::Dtype;
use gpuplan_core::model::{Model, Position};
use gpuplan_core::parallelism::{Fill, ParallelConfig, PipelineSplit, Schedule};
use gpuplan_core::scenario::{Options, Scenario, TrainGraphs};
use gpuplan_core::workload::{
    CpComm, FlexBackend, Fp8Recipe, Lora, LoraTarget, MegatronMemory, Mode, MoeDispatcher, Recompute, RecomputeModule, Stack, StateDtype, TrainLoop, Workload,
};

pub const DIR: &str = "scenarios";

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioWire {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    /// Where the setup comes from (a seed document, a paper table).
    #[serde(default)]
    pub source: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub system: Option<String>,
    #[serde(default)]
    pub gpus: Option<i64>,
    #[serde(default)]
    pub calibration: Option<String>,
    #[serde(default)]
    pub parallelism: ParallelWire,
    #[serde(default)]
    pub workload: WorkloadWire,
    #[serde(default)]
    pub options: OptionsWire,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParallelWire {
    pub tp: Option<i64>,
    pub pp: Option<i64>,
    pub dp: Option<i64>,
    pub cp: Option<i64>,
    pub ep: Option<i64>,
    pub etp: Option<i64>,
    pub vp: Option<i64>,
    pub sp: Option<bool>,
    pub zero: Option<i64>,
    /// 1f1b | interleaved | gpipe
    pub schedule: Option<String>,
    /// Megatron-LM `--decoder-first-pipeline-num-layers`: decoder layers on the first pipeline rank.
    pub decoder_first_pipeline_num_layers: Option<i64>,
    /// Megatron-LM `--decoder-last-pipeline-num-layers`: decoder layers on the last pipeline rank.
    pub decoder_last_pipeline_num_layers: Option<i64>,
    /// Megatron-LM `--account-for-embedding-in-pipeline-split`: the embedding counts as a layer.
    pub account_for_embedding_in_pipeline_split: Option<bool>,
    /// Megatron-LM `--account-for-loss-in-pipeline-split`: the loss counts as a layer.
    pub account_for_loss_in_pipeline_split: Option<bool>,
    /// Decoder layers per virtual stage (virtual stage v = chunk * pp + rank), as Megatron's
    /// `--pipeline-model-parallel-layout` places them.
    pub pipeline_layout: Option<Vec<i64>>,
    /// Context parallelism's attention exchange, Transformer Engine's `cp_comm_type` (Megatron-LM
    /// `--cp-comm-type`): p2p (default, ring attention) | all_gather | a2a
    pub cp_comm: Option<String>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadWire {
    /// train | prefill | decode
    pub mode: Option<String>,
    pub micro_batch: Option<i64>,
    pub global_batch: Option<i64>,
    /// Gradient-accumulation steps per optimizer step (a Hugging Face Trainer's
    /// `gradient_accumulation_steps`): sets `global_batch` = micro_batch x dp x grad_accum; with
    /// `global_batch` as well, the two must agree.
    pub grad_accum: Option<i64>,
    pub seq: Option<i64>,
    pub batch: Option<i64>,
    pub kv_len: Option<i64>,
    /// bf16 | fp16 | fp8 | fp4 | tf32 | fp32
    pub precision: Option<String>,
    /// with precision fp8: tensorwise (default) | delayed | blockwise | mxfp8
    pub fp8_recipe: Option<String>,
    /// none | selective | full
    pub recompute: Option<String>,
    /// megatron | torch-eager | torch-compile | hf-eager | hf-compile
    pub stack: Option<String>,
    pub dropout: Option<bool>,
    pub flash_attention: Option<bool>,
    pub routing_imbalance: Option<f64>,
    /// alltoall (default) | allgather | flex (DeepEP)
    pub moe_dispatcher: Option<String>,
    /// The flex dispatcher's kernels: deepep (default) | hybridep (Megatron's `moe_flex_dispatcher_backend`)
    pub moe_flex_backend: Option<String>,
    /// Megatron's expert capacity factor (`--moe-expert-capacity-factor`, > 0): tokens routed to an
    /// expert beyond factor x the mean load are dropped (default: dropless)
    pub moe_capacity_factor: Option<f64>,
    /// Pad every expert's input to its capacity (`--moe-pad-expert-input-to-capacity`; needs
    /// `moe_capacity_factor`)
    pub moe_pad_to_capacity: Option<bool>,
    /// LoRA fine-tuning: the adapters' rank (training only; frozen base weights)
    pub lora_rank: Option<i64>,
    /// LoRA targets: linear_qkv, linear_proj, linear_fc1, linear_fc2 (default: all four, as
    /// Megatron-Bridge's `LoRA.target_modules`)
    pub lora_targets: Option<Vec<String>>,
    /// Multi-token-prediction modules trained (Megatron `--mtp-num-layers`); 0 (default) to the
    /// model's `mtp_layers`.
    pub mtp_layers: Option<i64>,
    /// megatron training: the main-gradient buffer's dtype, fp32 (default,
    /// `grad_reduce_in_fp32`) | bf16
    pub grad_reduce_dtype: Option<String>,
    /// megatron fp8/fp4 training: weights kept only as Transformer Engine quantized tensors
    /// (`fp8_param_gather`; `fp4_param_gather` under fp4)
    pub fp8_param_gather: Option<bool>,
    /// megatron training: Adam's moments, fp32 (default) | bf16 (precision-aware optimizer)
    pub optimizer_state_dtype: Option<String>,
    /// with recompute = selective: Megatron's `recompute_modules` (core_attn, mlp, moe, moe_act,
    /// shared_experts, layernorm, mla_up_proj; default core_attn)
    pub recompute_modules: Option<Vec<String>>,
    /// megatron training: layers whose activations go to host memory (`cpu_offloading_num_layers`)
    pub cpu_offload_layers: Option<i64>,
    /// torch-eager/torch-compile training under FSDP (zero 3): PyTorch FSDP2's
    /// `MixedPrecisionPolicy.param_dtype`, fp32 (default: no policy, fp32 parameters gathered, bf16
    /// autocast) | bf16 (parameters gathered and computed in bf16, no autocast; torchtitan's default)
    pub fsdp_param_dtype: Option<String>,
    /// with FSDP on a torch stack: the gradients' reduce-scatter dtype (`reduce_dtype`), fp32 | bf16
    /// (default: the parameters' dtype, FSDP2's `reduce_dtype=None`)
    pub fsdp_reduce_dtype: Option<String>,
    /// with FSDP on a torch stack at fp8 tensorwise: torchao's `enable_fsdp_float8_all_gather`, the
    /// linear weights gathered in float8 (default false)
    pub fsdp_float8_all_gather: Option<bool>,
    /// megatron training: the loss through Transformer Engine's fused cross entropy
    /// (`cross_entropy_loss_fusion`, impl `te`; default false)
    pub cross_entropy_fusion: Option<bool>,
    /// torch-compile/hf-compile training: the loss compiled with the model (default true) or left
    /// eager (torchtitan before its loss was compiled; `Workload::compile_loss`)
    pub compile_loss: Option<bool>,
    /// decode: tokens each sequence generates from `kv_len` on, for the peak memory of the hf-*
    /// stacks' DynamicCache (default 1: one step)
    pub decode_tokens: Option<i64>,
    /// inference with trtllm, vllm or sglang on an MoE model: attention data parallelism around
    /// expert-parallel MoE (TensorRT-LLM `enable_attention_dp`, SGLang `--enable-dp-attention`):
    /// `batch` is the instance's sequences, spread over its `dp` ranks; needs ep x etp = tp x dp
    pub attention_dp: Option<bool>,
    /// training: packed sequences (THD, `cu_seqlens`), the mean tokens of one document in a
    /// `seq`-token sequence; attention runs within each document (default: one document)
    pub packed_doc_len: Option<i64>,
    /// training with an hf-* stack: `plain` (the project's loop, default) or `hf-trainer`
    /// (`transformers.Trainer` at its defaults)
    pub train_loop: Option<String>,
    /// with `train_loop = "hf-trainer"`: `TrainingArguments.max_grad_norm` (default 1.0; 0 turns
    /// gradient clipping off)
    pub max_grad_norm: Option<f64>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptionsWire {
    pub tp_comm_overlap: Option<bool>,
    pub dp_overlap: Option<bool>,
    /// Megatron training's CUDA graphs: none (default) | partial (attention and MoE router) | full
    /// (the whole iteration).
    pub cuda_graphs: Option<String>,
    /// Megatron training's EP communication overlap (`--overlap-moe-expert-parallel-comm`): the
    /// all-to-alls of one micro-batch beside another's compute; needs ep > 1, the alltoall or flex
    /// dispatcher, no full recompute, and a virtual pipeline when pp > 1.
    pub moe_ep_overlap: Option<bool>,
    /// Megatron's shared-expert overlap (`--moe-shared-expert-overlap`): the shared experts beside
    /// the alltoall dispatcher's all-to-alls; needs shared experts, ep > 1, the alltoall dispatcher,
    /// and not `moe_ep_overlap`.
    pub moe_shared_expert_overlap: Option<bool>,
}

/// Overlay `over` on `base`: every value `over` sets wins.
pub fn overlay(base: ScenarioWire, over: ScenarioWire) -> ScenarioWire {
    macro_rules! pick {
        ($b:expr, $o:expr, [$($f:ident),*]) => { $( if $o.$f.is_some() { $b.$f = $o.$f; } )* };
    }
    let mut b = base;
    pick!(b, over, [name, description, source, model, system, gpus, calibration]);
    pick!(
        b.parallelism,
        over.parallelism,
        [
            tp,
            pp,
            dp,
            cp,
            ep,
            etp,
            vp,
            sp,
            zero,
            schedule,
            decoder_first_pipeline_num_layers,
            decoder_last_pipeline_num_layers,
            account_for_embedding_in_pipeline_split,
            account_for_loss_in_pipeline_split,
            pipeline_layout,
            cp_comm
        ]
    );
    pick!(
        b.workload,
        over.workload,
        [
            mode,
            micro_batch,
            global_batch,
            grad_accum,
            seq,
            batch,
            kv_len,
            precision,
            fp8_recipe,
            recompute,
            stack,
            dropout,
            flash_attention,
            routing_imbalance,
            moe_dispatcher,
            moe_flex_backend,
            moe_capacity_factor,
            moe_pad_to_capacity,
            lora_rank,
            lora_targets,
            mtp_layers,
            grad_reduce_dtype,
            fp8_param_gather,
            optimizer_state_dtype,
            recompute_modules,
            cpu_offload_layers,
            cross_entropy_fusion,
            compile_loss,
            fsdp_param_dtype,
            fsdp_reduce_dtype,
            fsdp_float8_all_gather,
            decode_tokens,
            attention_dp,
            packed_doc_len,
            train_loop,
            max_grad_norm
        ]
    );
    pick!(b.options, over.options, [tp_comm_overlap, dp_overlap, cuda_graphs, moe_ep_overlap, moe_shared_expert_overlap]);
    b
}

/// `workload.train_loop` and `workload.max_grad_norm`, checked: the Hugging Face Trainer wraps the
/// hf-* stacks' models in training only; `max_grad_norm` belongs to it and is not negative.
fn train_loop_keys(p: &mut Problems, path: &Path, ww: &WorkloadWire, mode: Mode, stack: Stack) -> TrainLoop {
    let clip = match ww.max_grad_norm {
        None => true,
        Some(v) if v.is_finite() && v >= 0.0 => v > 0.0,
        Some(v) => {
            p.push(
                ConfigError::invalid(path, "workload.max_grad_norm", v, "is not a norm (0 or more)")
                    .with_hint("TrainingArguments.max_grad_norm: 1.0 by default, 0 turns clipping off"),
            );
            true
        }
    };
    match ww.train_loop.as_deref() {
        None | Some("plain") => {
            if let Some(v) = ww.max_grad_norm {
                p.push(
                    ConfigError::invalid(path, "workload.max_grad_norm", v, "applies to the Hugging Face Trainer's loop only")
                        .with_hint("give `--train-loop hf-trainer` with it, or leave it out"),
                );
            }
            TrainLoop::Plain
        }
        Some("hf-trainer") if mode == Mode::Train && stack.hf() => TrainLoop::HfTrainer { clip },
        Some("hf-trainer") => {
            let why = if mode != Mode::Train {
                format!("applies to training; this scenario is {}", mode.name())
            } else {
                format!("wraps the hf-* stacks' models; the stack is {}", stack.name())
            };
            p.push(
                ConfigError::invalid(path, "workload.train_loop", "hf-trainer", why)
                    .with_hint("give `--stack hf-eager` (or hf-compile) and `--mode train`, or leave `--train-loop` out"),
            );
            TrainLoop::Plain
        }
        Some(other) => {
            p.push(
                ConfigError::invalid(path, "workload.train_loop", other, "is not a training loop gpuplan knows")
                    .with_hint("plain (a PyTorch loop: forward, backward, optimizer) or hf-trainer (transformers.Trainer)"),
            );
            TrainLoop::Plain
        }
    }
}

/// `workload.moe_capacity_factor` and `workload.moe_pad_to_capacity` (Megatron's
/// `--moe-expert-capacity-factor`, `--moe-pad-expert-input-to-capacity`), checked: a factor is a
/// finite number above 0 (Megatron reads a negative one as dropless: here leave it out), on an MoE
/// model; padding needs a factor (Megatron raises the same).
fn moe_capacity_keys(p: &mut Problems, path: &Path, ww: &WorkloadWire, model: &Model) -> Option<gpuplan_core::workload::MoeCapacity> {
    let pad = ww.moe_pad_to_capacity.unwrap_or(false);
    let Some(factor) = ww.moe_capacity_factor else {
        if pad {
            p.push(
                ConfigError::invalid(path, "workload.moe_pad_to_capacity", true, "pads each expert's input to its capacity, and no capacity is set")
                    .with_hint("add `workload.moe_capacity_factor` (--moe-capacity-factor), e.g. 1.0"),
            );
        }
        return None;
    };
    if model.moe.is_none() {
        p.push(
            ConfigError::invalid(path, "workload.moe_capacity_factor", factor, format!("applies to MoE models; `{}` is dense", model.name))
                .with_hint("leave it out"),
        );
        return None;
    }
    if !(factor.is_finite() && factor > 0.0) {
        p.push(
            ConfigError::invalid(path, "workload.moe_capacity_factor", factor, "must be a finite number above 0 (capacity over the mean per-expert load)")
                .with_hint("e.g. 1.0 or 1.25; leave it out for dropless MoE (Megatron's default)"),
        );
        return None;
    }
    Some(gpuplan_core::workload::MoeCapacity { factor, pad })
}

pub fn read_scenario(path: &Path) -> Result<ScenarioWire, ConfigError> {
    let text = read_file(path)?;
    parse_toml(path, &text)
}

/// Where a value came from, for error messages: the file, or the command line.
fn origin(file: Option<&Path>) -> PathBuf {
    file.map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("command line"))
}

/// A profile given as a file, a profile folder, a path relative to the scenario file, or a name
/// under `calibration/profiles/`.
pub fn resolve_profile(given: &str, scenario_file: Option<&Path>) -> Result<PathBuf, ConfigError> {
    use crate::catalog;
    let as_path = |p: PathBuf| if catalog::is_dir(&p) { p.join("profile.toml") } else { p };
    let direct = as_path(PathBuf::from(given));
    if catalog::is_file(&direct) {
        return Ok(direct);
    }
    if let Some(dir) = scenario_file.and_then(Path::parent) {
        let rel = as_path(dir.join(given));
        if catalog::is_file(&rel) {
            return Ok(rel);
        }
    }
    for root in super::data_roots() {
        let named = root.join("calibration/profiles").join(given).join("profile.toml");
        if catalog::is_file(&named) {
            return Ok(named);
        }
    }
    let known: Vec<String> = super::data_roots()
        .iter()
        .flat_map(|r| {
            let dir = r.join("calibration/profiles");
            catalog::list_dir(&dir)
                .unwrap_or_default()
                .into_iter()
                .filter(|(name, is_dir)| *is_dir && catalog::is_file(&dir.join(name).join("profile.toml")))
                .map(|(name, _)| name)
                .collect::<Vec<_>>()
        })
        .collect();
    let hint = match super::closest(given, &known) {
        Some(c) => format!("did you mean `{c}`? profiles: {}", known.join(", ")),
        None => format!("profiles: {}; or give a path to a profile.toml", if known.is_empty() { "none found".to_string() } else { known.join(", ") }),
    };
    Err(ConfigError::UnknownName { what: "calibration profile", name: given.to_string(), hint: Some(hint) })
}

/// Check a wire scenario and build the domain scenario, loading model, system and profile.
/// `file` names the scenario file for messages (values given by flags are reported as such).
pub fn build(w: &ScenarioWire, file: Option<&Path>) -> Result<Scenario, ConfigError> {
    build_with_model(w, file, None)
}

/// [`build`], with the model already loaded (a run record's copy of its model file) instead of the
/// one `w.model` names; `w.model` still names it in messages.
/// The split of the layers over pipeline stages: Megatron's options where the scenario gives them,
/// else what the Megatron-Bridge recipe of the model does (`recipe_fill`).
fn pipeline_split(p: &mut Problems, path: &Path, pw: &ParallelWire, model: &Model) -> PipelineSplit {
    let mut count = |key: &str, v: Option<i64>| match v {
        Some(n) if n >= 0 => Some(n as u64),
        Some(n) => {
            p.push(ConfigError::invalid(path, &format!("parallelism.{key}"), n, "must be zero or a positive number of layers"));
            None
        }
        None => None,
    };
    let first = count("decoder_first_pipeline_num_layers", pw.decoder_first_pipeline_num_layers);
    let last = count("decoder_last_pipeline_num_layers", pw.decoder_last_pipeline_num_layers);
    let layout = pw.pipeline_layout.as_ref().map(|l| l.iter().map(|&n| count("pipeline_layout", Some(n)).unwrap_or(0)).collect());
    PipelineSplit {
        first,
        last,
        account_for_embedding: pw.account_for_embedding_in_pipeline_split.unwrap_or(false),
        account_for_loss: pw.account_for_loss_in_pipeline_split.unwrap_or(false),
        layout,
        fill: recipe_fill(model),
    }
}

/// How the Megatron-Bridge recipe of a model splits layers that do not divide over `pp*vp`, when
/// the scenario sets none of Megatron's split options.
///
/// - DeepSeek-V3 (61 layers): Megatron-Bridge's `deepseek_v3` recipes set
///   `pipeline_model_parallel_layout` from a table keyed by (pp, vp) (from memory of
///   `recipes/deepseek/deepseek_v3.py`): (4,1) `E+16|16|16|13+L`, (8,1) and (4,2) `E+8|8 x6|5+L`,
///   (16,1), (8,2) and (4,4) `E+4|4 x14|1+L`; the performance configs at PP 8 x VP 4 use
///   `Et|(tt|)*30mL`. All of these are [`Fill::FrontFilled`]: ceil(61 / (pp*vp)) on every virtual
///   stage, the shortfall off the last (loss, MTP) and then the first (embedding). At other
///   (pp, vp) the same rule is an extrapolation. Kimi K2 (61 layers) likewise: megatron-bridge 0.6.2
///   `recipes/kimi/h100/kimi_k2.py` `_get_kimi_k2_pipeline_layout` holds the same table (read).
/// - Llama-3.1 405B (126 layers): the recipes set `account_for_embedding_in_pipeline_split` and
///   `account_for_loss_in_pipeline_split` (126 + 2 = 128 splits evenly over PP 8/16 x VP 4/8;
///   from memory of Megatron-Bridge `llama31_405b` / NeMo 2 `llama31_405b.py`). Wherever those
///   flags are defined, [`Fill::Balanced`] gives the same split, and it also covers the (pp, vp)
///   where they are not (where Megatron would refuse). Qwen3-235B-A22B (94 layers) likewise:
///   megatron-bridge 0.6.2 `recipes/qwen/h100/qwen3_moe.py` `qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config`,
///   the base of every Qwen3-235B perf recipe, sets both flags (94 + 2 = 96 over PP 8 x VP 3/4,
///   PP 4 x VP 12; read).
/// - Every other model: [`Fill::Even`], Megatron's default (an uneven interleaved split is refused
///   unless an option gives it; with vp = 1 gpuplan keeps its balanced split).
pub fn recipe_fill(model: &Model) -> Fill {
    if model.name.starts_with("deepseek-v3") || model.name.starts_with("kimi-k2") {
        Fill::FrontFilled
    } else if model.name.starts_with("llama-3.1-405b") || model.name.starts_with("qwen3-235b-a22b") {
        Fill::Balanced
    } else {
        Fill::Even
    }
}

/// A positive integer key (`default` when absent; a problem, and `default`, when not positive).
fn positive(p: &mut Problems, path: &Path, key: &str, v: Option<i64>, default: u64) -> u64 {
    match v {
        None => default,
        Some(x) if x >= 1 => x as u64,
        Some(x) => {
            p.push(ConfigError::invalid(path, key, x, "must be a positive integer"));
            default
        }
    }
}

/// The `[parallelism]` sizes, each checked on its own (their combination is `build`'s).
struct Layout {
    tp: u32,
    pp: u32,
    cp: u32,
    ep: u32,
    etp: u32,
    vp: u32,
}

fn layout_keys(p: &mut Problems, path: &Path, pw: &ParallelWire) -> Layout {
    let mut pos = |key: &str, v: Option<i64>| positive(p, path, key, v, 1) as u32;
    let (tp, pp, cp, ep, etp, vp) = (
        pos("parallelism.tp", pw.tp),
        pos("parallelism.pp", pw.pp),
        pos("parallelism.cp", pw.cp),
        pos("parallelism.ep", pw.ep),
        pos("parallelism.etp", pw.etp),
        pos("parallelism.vp", pw.vp),
    );
    Layout { tp, pp, cp, ep, etp, vp }
}

/// `parallelism.zero` and `parallelism.schedule` (interleaved by default when `vp` > 1).
fn zero_and_schedule(p: &mut Problems, path: &Path, pw: &ParallelWire, vp: u32) -> (u32, Schedule) {
    let zero = match pw.zero {
        None => 0,
        Some(z @ 0..=3) => z as u32,
        Some(z) => {
            p.push(ConfigError::invalid(path, "parallelism.zero", z, "is not a ZeRO stage").with_hint("0, 1, 2 or 3 (3 = FSDP full shard)"));
            0
        }
    };
    let schedule = match pw.schedule.as_deref() {
        None if vp > 1 => Schedule::Interleaved,
        None | Some("1f1b") => Schedule::OneFOneB,
        Some("interleaved") => Schedule::Interleaved,
        Some("gpipe") => Schedule::Gpipe,
        Some(other) => {
            p.push(ConfigError::invalid(path, "parallelism.schedule", other, "is not known").with_hint("one of: 1f1b, interleaved, gpipe"));
            Schedule::OneFOneB
        }
    };
    (zero, schedule)
}

/// `workload.lora_rank` and `workload.lora_targets` (`--lora-rank`, `--lora-targets`): the LoRA
/// adapters, checked against the model, the layout, the mode and the stack.
fn lora_keys(p: &mut Problems, path: &Path, ww: &WorkloadWire, model: &Model, pc: &ParallelConfig, mode: Mode, stack: Stack) -> Option<Lora> {
    let names = LoraTarget::ALL.map(LoraTarget::name).join(", ");
    let targets = match &ww.lora_targets {
        None => LoraTarget::ALL.to_vec(),
        Some(list) => {
            let mut out = Vec::new();
            for name in list {
                match LoraTarget::parse(name) {
                    Some(t) => out.push(t),
                    None => p.push(
                        ConfigError::invalid(path, "workload.lora_targets", name, "is not a LoRA target")
                            .with_hint(format!("`--lora-targets` takes a comma-separated list of: {names} (or qkv, proj, fc1, fc2)")),
                    ),
                }
            }
            if list.is_empty() {
                p.push(ConfigError::invalid(path, "workload.lora_targets", "(empty)", "names no layer").with_hint(format!("one or more of: {names}")));
            }
            out
        }
    };
    let rank = match ww.lora_rank {
        None => {
            if ww.lora_targets.is_some() {
                p.push(
                    ConfigError::invalid(
                        path,
                        "workload.lora_targets",
                        ww.lora_targets.as_ref().map(|l| l.join(",")).unwrap_or_default(),
                        "is given without a LoRA rank",
                    )
                    .with_hint("give `--lora-rank R` (Megatron-Bridge's LoRA `dim`, e.g. 16 or 32) with it"),
                );
            }
            return None;
        }
        Some(r) if r <= 0 => {
            p.push(
                ConfigError::invalid(path, "workload.lora_rank", r, "must be a positive rank")
                    .with_hint("`--lora-rank R` with R >= 1 (Megatron-Bridge's default `dim` is 32)"),
            );
            return None;
        }
        Some(r) => r as u64,
    };
    let lora = Lora::new(rank, targets);
    if mode != Mode::Train {
        p.push(
            ConfigError::invalid(path, "workload.lora_rank", rank, format!("applies to training, not {}", mode.name()))
                .with_hint("LoRA is a fine-tuning method; for inference leave `--lora-rank` out (merged adapters cost nothing)"),
        );
    }
    if stack != Stack::Megatron {
        p.push(
            ConfigError::invalid(path, "workload.lora_rank", rank, format!("is modelled as Megatron-Bridge runs LoRA, not under stack {}", stack.name()))
                .with_hint("use `--stack megatron` (the default) with `--lora-rank`"),
        );
    }
    if model.mla.is_some() {
        p.push(
            ConfigError::invalid(
                path,
                "workload.lora_rank",
                rank,
                format!("model `{}` has multi-head latent attention, whose projections LoRA's targets do not name", model.name),
            )
            .with_hint("LoRA is modelled on models with a fused QKV projection (dense, GQA and MoE)"),
        );
    }
    if model.hybrid.is_some() {
        // The adapters are placed per transformer layer (`workload::lora`); a hybrid model's
        // Mamba-2 blocks have no qkv/proj/fc1/fc2 linears and its blocks carry no adapter ops.
        p.push(
            ConfigError::invalid(
                path,
                "workload.lora_rank",
                rank,
                format!("model `{}` is a hybrid Mamba-attention model, which LoRA is not modelled on", model.name),
            )
            .with_hint("LoRA is modelled on models with a fused QKV projection (dense, GQA and MoE)"),
        );
    }
    let narrowest = gpuplan_core::workload::lora::narrowest_target(model, &lora);
    if rank > narrowest {
        p.push(
            ConfigError::invalid(path, "workload.lora_rank", rank, format!("exceeds the narrowest targeted layer's width, {narrowest}"))
                .with_hint(format!("a LoRA rank is far below the layer width (16 to 64 typically); give `--lora-rank` at most {narrowest}")),
        );
    } else if !rank.is_multiple_of(pc.tp as u64) {
        p.push(
            ConfigError::invalid(path, "workload.lora_rank", rank, format!("is not a multiple of tp = {}", pc.tp))
                .with_hint("Megatron-Core's column-parallel adapter layer splits the rank over the TP group: choose a rank divisible by `--tp`"),
        );
    }
    Some(lora)
}

/// The keys `plan` searches over instead of using (`[parallelism]`, `workload.micro_batch`), checked
/// as `build` checks them: a file that `predict` refuses is refused by `plan` too, though `plan`
/// then replaces these values.
pub fn check_searched_keys(w: &ScenarioWire, file: Option<&Path>) -> Result<(), ConfigError> {
    let path = origin(file);
    let mut p = Problems::default();
    let vp = layout_keys(&mut p, &path, &w.parallelism).vp;
    zero_and_schedule(&mut p, &path, &w.parallelism, vp);
    positive(&mut p, &path, "parallelism.dp", w.parallelism.dp, 1);
    positive(&mut p, &path, "workload.micro_batch", w.workload.micro_batch, 1);
    for (key, v) in [
        ("decoder_first_pipeline_num_layers", w.parallelism.decoder_first_pipeline_num_layers),
        ("decoder_last_pipeline_num_layers", w.parallelism.decoder_last_pipeline_num_layers),
    ] {
        if let Some(n) = v.filter(|n| *n < 0) {
            p.push(ConfigError::invalid(&path, &format!("parallelism.{key}"), n, "must be zero or a positive number of layers"));
        }
    }
    p.finish()
}

pub fn build_with_model(w: &ScenarioWire, file: Option<&Path>, loaded: Option<Model>) -> Result<Scenario, ConfigError> {
    let path = origin(file);
    let mut p = Problems::default();
    let model_name = w.model.clone();
    let system_name = w.system.clone();
    p.check(model_name.is_some(), || {
        ConfigError::invalid(&path, "model", "(missing)", "is required").with_hint("give `--model NAME` or `model = \"...\"`; see models/")
    });
    p.check(system_name.is_some(), || {
        ConfigError::invalid(&path, "system", "(missing)", "is required").with_hint("give `--system NAME` or `system = \"...\"`; see calibration/systems/")
    });
    p.finish()?;
    // A name the scenario file gives that the catalog does not know: the file and key say where.
    let named = |key: &str, e: ConfigError| match (e, file) {
        (ConfigError::UnknownName { what, name, hint }, Some(f)) => {
            ConfigError::Invalid { path: f.to_path_buf(), key: key.into(), value: format!("`{name}`"), problem: format!("is not a known {what}"), hint }
        }
        (e, _) => e,
    };
    let model = match loaded {
        Some(m) => m,
        None => super::model::load_model(model_name.as_deref().unwrap_or_default()).map_err(|e| named("model", e))?,
    };
    let system = super::system::load_system(system_name.as_deref().unwrap_or_default()).map_err(|e| named("system", e))?;
    // `calibration = "none"` (or `--calibration none`) keeps the datasheet values even where the
    // system file names a profile.
    let profile = match w.calibration.as_ref().or(system.calibration.as_ref()).filter(|c| c.as_str() != "none") {
        Some(c) => {
            let mut p = super::profile::load_profile(&resolve_profile(c, file).map_err(|e| named("calibration", e))?)?;
            p.measured_gpu = super::system::gpu_by_driver_name(&p.gpu_name).map(Box::new);
            Some(p)
        }
        None => None,
    };

    let mut p = Problems::default();
    let pos = |p: &mut Problems, key: &str, v: Option<i64>, default: u64| positive(p, &path, key, v, default);
    let pw = &w.parallelism;
    let Layout { tp, pp, cp, ep, etp, vp } = layout_keys(&mut p, &path, pw);
    // Expert tensor parallelism: without expert parallelism, MoE experts are sharded over the TP
    // group as the dense layers are (Megatron-Core's `expert_tensor_parallel_size` defaults to the
    // TP size; TensorRT-LLM's `moe_tp_size` is the TP size when `moe_ep_size` is 1). With EP the
    // default is 1: each EP rank holds whole experts, as the Megatron-Bridge MoE recipes set it.
    let etp = if pw.etp.is_none() && ep == 1 && model.moe.is_some() { tp } else { etp };
    // In u64 and saturating: tp*pp*cp of u32 values can pass any integer (the fuzz campaign's
    // round 10 wrapped it to 0, a divisor below); a saturated product is then no divisor of gpus.
    let model_parallel = (tp as u64).saturating_mul(pp as u64).saturating_mul(cp as u64).max(1);
    let gpus = match (w.gpus, pw.dp) {
        (Some(g), _) => pos(&mut p, "gpus", Some(g), 1),
        (None, Some(dp)) => model_parallel.saturating_mul(pos(&mut p, "parallelism.dp", Some(dp), 1)),
        (None, None) => model_parallel,
    };
    let dp = match pw.dp {
        Some(d) => pos(&mut p, "parallelism.dp", Some(d), 1) as u32,
        None => {
            p.check(gpus % model_parallel == 0, || {
                ConfigError::invalid(&path, "gpus", gpus, format!("is not a multiple of tp*pp*cp = {model_parallel}"))
                    .with_hint("choose gpus = tp * pp * dp * cp")
            });
            (gpus / model_parallel).max(1) as u32
        }
    };
    p.check(pw.dp.is_none() || model_parallel.saturating_mul(dp as u64) == gpus, || {
        ConfigError::invalid(&path, "gpus", gpus, format!("does not equal tp*pp*dp*cp = {tp}*{pp}*{dp}*{cp} = {}", model_parallel.saturating_mul(dp as u64)))
            .with_hint("set `--dp` to gpus / (tp*pp*cp), or leave it out to derive it")
    });
    let (zero, schedule) = zero_and_schedule(&mut p, &path, pw, vp);
    let split = pipeline_split(&mut p, &path, pw, &model);
    let parallel = ParallelConfig { tp, sp: pw.sp.unwrap_or(tp > 1), pp, vp, dp, cp, ep, etp, zero, schedule, split };
    if let Err(e) = gpuplan_core::parallelism::virtual_stage_layers(model.n_layers, &parallel) {
        p.push(ConfigError::invalid(&path, &format!("parallelism.{}", e.key), e.value, e.why).with_hint(e.hint));
    }

    let ww = &w.workload;
    let mode = match ww.mode.as_deref().unwrap_or("train") {
        "train" => Mode::Train,
        "prefill" => Mode::Prefill,
        "decode" => Mode::Decode,
        other => {
            p.push(
                ConfigError::invalid(&path, "workload.mode", other, "is not known")
                    .with_hint("one of: train, prefill, decode (for request-level serving, `gpuplan serve`)"),
            );
            Mode::Train
        }
    };
    let micro_batch = pos(&mut p, "workload.micro_batch", ww.micro_batch, 1);
    let per_step = micro_batch.saturating_mul(dp as u64);
    let global_batch = match ww.grad_accum {
        None => pos(&mut p, "workload.global_batch", ww.global_batch, per_step),
        Some(ga) => {
            let ga = pos(&mut p, "workload.grad_accum", Some(ga), 1);
            let implied = per_step.saturating_mul(ga);
            let given = pos(&mut p, "workload.global_batch", ww.global_batch, implied);
            p.check(given == implied, || {
                ConfigError::invalid(&path, "workload.grad_accum", ga, format!("gives global_batch {micro_batch}*{dp}*{ga} = {implied}, not the {given} given"))
                    .with_hint("give either `--grad-accum` or `--global-batch` (= micro_batch * dp * gradient accumulation steps)")
            });
            given
        }
    };
    let seq = match (ww.seq, mode) {
        (None, Mode::Decode) => 1,
        (None, _) => {
            p.push(ConfigError::invalid(&path, "workload.seq", "(missing)", "is required for training and prefill").with_hint("give `--seq N`"));
            1
        }
        (Some(s), _) => pos(&mut p, "workload.seq", Some(s), 1),
    };
    let batch = pos(&mut p, "workload.batch", ww.batch, 1);
    let kv_len = match (ww.kv_len, mode) {
        (None, Mode::Decode) => {
            p.push(ConfigError::invalid(&path, "workload.kv_len", "(missing)", "is required for decode").with_hint("give `--kv-len N`"));
            1
        }
        (None, _) => 0,
        (Some(k), _) => pos(&mut p, "workload.kv_len", Some(k), 1),
    };
    if mode == Mode::Train {
        // Checked: a dp of 0 (reported with `gpus`) or a product past u64 is no divisor.
        let per_step = micro_batch.checked_mul(dp as u64).filter(|&n| n > 0);
        p.check(per_step.is_some_and(|n| global_batch.is_multiple_of(n)), || {
            ConfigError::invalid(&path, "workload.global_batch", global_batch, format!("is not a multiple of micro_batch*dp = {micro_batch}*{dp}"))
                .with_hint("global_batch = micro_batch * dp * gradient accumulation steps")
        });
    }
    // Only learned absolute position embeddings bound the sequence: their table has `max_seq_len`
    // rows. RoPE (and position-free) models train and run past `max_position_embeddings`, as
    // long-context extension does (NeMo's long-context recipes train Llama-3 8B at up to 1M tokens
    // with context parallelism, adjusting only the RoPE base).
    if seq > model.max_seq_len && mode != Mode::Decode && model.position == Position::Learned {
        p.push(
            ConfigError::invalid(&path, "workload.seq", seq, format!("exceeds the model's `max_seq_len` = {}", model.max_seq_len))
                .with_hint("the model's learned position-embedding table has `max_seq_len` rows; use a shorter `--seq`"),
        );
    }
    let precision = match ww.precision.as_deref() {
        None => Dtype::Bf16,
        Some(s) => Dtype::parse(s).unwrap_or_else(|| {
            p.push(ConfigError::invalid(&path, "workload.precision", s, "is not known").with_hint("one of: bf16, fp16, fp8, fp4, tf32, fp32"));
            Dtype::Bf16
        }),
    };
    if precision == Dtype::Fp4 && !system.gpu.arch.is_blackwell() && mode == Mode::Train {
        p.push(
            ConfigError::invalid(
                &path,
                "workload.precision",
                "fp4",
                format!("NVFP4 training needs Blackwell's FP4 tensor cores; {} has none", system.gpu.name),
            )
            .with_hint("on Hopper train with `--precision fp8` (`--fp8-recipe tensorwise|delayed|blockwise`) or `--precision bf16`"),
        );
    }
    let fp8_recipe = match ww.fp8_recipe.as_deref() {
        None => Fp8Recipe::Tensorwise,
        Some(s) => {
            let names = Fp8Recipe::ALL.map(Fp8Recipe::name).join(", ");
            let r = Fp8Recipe::parse(s);
            if r.is_none() {
                p.push(ConfigError::invalid(&path, "workload.fp8_recipe", s, "is not known").with_hint(format!("one of: {names}")));
            } else if precision != Dtype::Fp8 {
                p.push(
                    ConfigError::invalid(&path, "workload.fp8_recipe", s, format!("applies to precision fp8, not {}", precision.name()))
                        .with_hint("give `--precision fp8` with it, or leave the recipe out (fp4 is NVFP4)"),
                );
            } else if r == Some(Fp8Recipe::Mxfp8) && !system.gpu.arch.is_blackwell() {
                p.push(
                    ConfigError::invalid(&path, "workload.fp8_recipe", s, format!("needs Blackwell's block-scaled tensor cores; {} has none", system.gpu.name))
                        .with_hint("on Hopper use `--fp8-recipe tensorwise|delayed|blockwise` (scenario key `workload.fp8_recipe`)"),
                );
            }
            r.unwrap_or(Fp8Recipe::Tensorwise)
        }
    };
    let recompute_name = ww.recompute.as_deref().unwrap_or("none");
    let recompute = Recompute::parse(recompute_name).unwrap_or_else(|| {
        let e = if recompute_name.starts_with("layer:") {
            ConfigError::invalid(&path, "workload.recompute", recompute_name, "needs a whole number of layers of at least 1 after `layer:`")
                .with_hint("`layer:2` checkpoints every 2nd block (torchtitan's selective_ac_option = \"2\")")
        } else {
            ConfigError::invalid(&path, "workload.recompute", recompute_name, "is not known").with_hint(format!("one of: {}", Recompute::NAMES))
        };
        p.push(e);
        Recompute::None
    });
    let stack = match ww.stack.as_deref() {
        None => Stack::Megatron,
        Some(s) => Stack::parse(s).unwrap_or_else(|| {
            p.push(ConfigError::invalid(&path, "workload.stack", s, "is not known").with_hint(format!("one of: {}", Stack::NAMES)));
            Stack::Megatron
        }),
    };
    if stack.is_engine() && mode == Mode::Train {
        p.push(
            ConfigError::invalid(&path, "workload.stack", stack.name(), "is an inference engine: it has no training path")
                .with_hint("train with megatron, torch-eager or torch-compile; use the engine with --mode prefill|decode, serve or plan --mode serve"),
        );
    }
    if fp8_recipe == Fp8Recipe::Rowwise && precision == Dtype::Fp8 && !(stack.torch() && stack.fused()) {
        p.push(
            ConfigError::invalid(
                &path,
                "workload.fp8_recipe",
                "rowwise",
                format!("is torchao's recipe under torch.compile; stack {} does not run it", stack.name()),
            )
            .with_hint("use --stack torch-compile or hf-compile with it, or tensorwise, delayed or blockwise here"),
        );
    }
    let routing_imbalance = ww.routing_imbalance.unwrap_or(1.0);
    p.check(routing_imbalance >= 1.0 && routing_imbalance.is_finite(), || {
        ConfigError::invalid(&path, "workload.routing_imbalance", routing_imbalance, "must be at least 1 (busiest expert rank / mean)")
    });
    let moe_dispatcher = match ww.moe_dispatcher.as_deref() {
        None => MoeDispatcher::AllToAll,
        Some(s) => MoeDispatcher::parse(s).unwrap_or_else(|| {
            let names = MoeDispatcher::ALL.map(MoeDispatcher::name).join(", ");
            p.push(ConfigError::invalid(&path, "workload.moe_dispatcher", s, "is not known").with_hint(format!("one of: {names}")));
            MoeDispatcher::AllToAll
        }),
    };
    let moe_flex_backend = match ww.moe_flex_backend.as_deref() {
        None => FlexBackend::DeepEp,
        Some(s) => match FlexBackend::parse(s) {
            Some(b) if moe_dispatcher == MoeDispatcher::Flex => b,
            Some(_) => {
                p.push(
                    ConfigError::invalid(
                        &path,
                        "workload.moe_flex_backend",
                        s,
                        format!("chooses the flex dispatcher's kernels; the dispatcher is {}", moe_dispatcher.name()),
                    )
                    .with_hint("add `workload.moe_dispatcher = \"flex\"` (--moe-dispatcher flex), or leave it out"),
                );
                FlexBackend::DeepEp
            }
            None => {
                let names = FlexBackend::ALL.map(FlexBackend::name).join(", ");
                p.push(ConfigError::invalid(&path, "workload.moe_flex_backend", s, "is not known").with_hint(format!("one of: {names}")));
                FlexBackend::DeepEp
            }
        },
    };
    let moe_capacity = moe_capacity_keys(&mut p, &path, ww, &model);
    let lora = lora_keys(&mut p, &path, ww, &model, &parallel, mode, stack);
    let mtp_layers = match ww.mtp_layers {
        None | Some(0) => 0,
        Some(n) if mode != Mode::Train => {
            p.push(
                ConfigError::invalid(&path, "workload.mtp_layers", n, format!("applies to training; this scenario is {}", mode.name()))
                    .with_hint("gpuplan prices MTP modules in training only (their use as speculative decoders is not modelled): leave it out"),
            );
            0
        }
        Some(n) if n < 0 || n > model.mtp_layers as i64 => {
            p.push(
                ConfigError::invalid(
                    &path,
                    "workload.mtp_layers",
                    n,
                    format!("must be between 0 and the {} multi-token-prediction modules model `{}` has", model.mtp_layers, model.name),
                )
                .with_hint("the model file's `mtp_layers` (config.json `num_nextn_predict_layers`) says how many it has"),
            );
            0
        }
        Some(n) => n as u32,
    };
    let decode_tokens = match ww.decode_tokens {
        None => 1,
        Some(n) if mode != Mode::Decode => {
            p.push(
                ConfigError::invalid(&path, "workload.decode_tokens", n, format!("applies to decode; this scenario is {}", mode.name()))
                    .with_hint("leave `--decode-tokens` out, or give `--mode decode`"),
            );
            1
        }
        Some(n) => pos(&mut p, "workload.decode_tokens", Some(n), 1),
    };
    let packed_doc_len = match ww.packed_doc_len {
        None => None,
        Some(n) if mode != Mode::Train => {
            p.push(
                ConfigError::invalid(&path, "workload.packed_doc_len", n, format!("applies to training; this scenario is {}", mode.name()))
                    .with_hint("leave `--packed-doc-len` out, or give `--mode train`"),
            );
            None
        }
        Some(n) if parallel.cp > 1 => {
            p.push(
                ConfigError::invalid(&path, "workload.packed_doc_len", n, format!("is not modelled with context parallelism (cp = {})", parallel.cp))
                    .with_hint("leave `--packed-doc-len` out, or give `--cp 1`"),
            );
            None
        }
        Some(n) if n > seq as i64 => {
            p.push(
                ConfigError::invalid(&path, "workload.packed_doc_len", n, format!("is longer than the {seq}-token sequence it is packed into"))
                    .with_hint("give at most `--seq`; leave it out for one document per sequence"),
            );
            None
        }
        Some(n) => Some(pos(&mut p, "workload.packed_doc_len", Some(n), 1)),
    };
    let train_loop = train_loop_keys(&mut p, &path, ww, mode, stack);
    let cp_comm = match pw.cp_comm.as_deref() {
        None => CpComm::P2p,
        Some(s) => CpComm::parse(s).unwrap_or_else(|| {
            let names = CpComm::ALL.map(CpComm::name).join(", ");
            p.push(
                ConfigError::invalid(&path, "parallelism.cp_comm", s, "is not a context-parallel communication type (`--cp-comm`)")
                    .with_hint(format!("one of: {names} (Transformer Engine's cp_comm_type; a2a+p2p is not modelled)")),
            );
            CpComm::P2p
        }),
    };
    let megatron = megatron_memory_keys(&mut p, &path, ww, &model, &parallel, mode, stack, precision, fp8_recipe, recompute);
    let fsdp = fsdp_keys(&mut p, &path, ww, &parallel, mode, stack, precision, fp8_recipe);
    let (batch, attention_dp) = attention_dp_keys(&mut p, &path, ww, &model, &parallel, mode, stack, batch);
    let workload = Workload {
        mode,
        micro_batch,
        global_batch,
        seq,
        batch,
        kv_len,
        precision,
        fp8_recipe,
        recompute,
        stack,
        dropout: ww.dropout.unwrap_or(false),
        flash_attention: ww.flash_attention.unwrap_or(true),
        routing_imbalance,
        moe_dispatcher,
        moe_flex_backend,
        moe_capacity,
        lora,
        mtp_layers,
        cp_comm,
        megatron,
        fsdp,
        decode_tokens,
        attention_dp,
        packed_doc_len,
        train_loop,
        // Transformer Engine's layout rule (the megatron stack's quantize kernels).
        fp8_non_tn: stack == Stack::Megatron && system.gpu.arch == gpuplan_core::hardware::Arch::Blackwell,
        compile_loss: ww.compile_loss.unwrap_or(true),
    };
    if let (Some(c), false) = (ww.compile_loss, stack.torch() && stack.fused() && mode == Mode::Train) {
        p.push(
            ConfigError::invalid(
                &path,
                "workload.compile_loss",
                c,
                format!("applies to torch-compile or hf-compile training; this scenario is {} {}", stack.name(), mode.name()),
            )
            .with_hint("leave it out (eager stacks run the loss eager; megatron's fused loss is --cross-entropy-fusion)"),
        );
    }
    if let (Recompute::Layers(_), false) = (recompute, stack.torch() && mode == Mode::Train) {
        p.push(
            ConfigError::invalid(
                &path,
                "workload.recompute",
                recompute.name(),
                format!("is torchtitan's layer checkpointing for PyTorch training; this scenario is {} {}", stack.name(), mode.name()),
            )
            .with_hint("use it with --stack torch-eager, torch-compile, hf-eager or hf-compile in training; Megatron's full recompute is --recompute full"),
        );
    }
    if recompute == Recompute::SelectiveOp {
        if let Some(why) = gpuplan_core::workload::selective_op_unsupported(&model, &workload) {
            p.push(ConfigError::invalid(&path, "workload.recompute", recompute.name(), why).with_hint(
                "torchtitan's per-op policy runs on dense transformers under --stack torch-eager, torch-compile, hf-eager or hf-compile; use --recompute selective or full otherwise",
            ));
        }
    }
    // The hf-* stacks' host time in inference is the node's host probe's: no default.
    if stack.hf() && mode != Mode::Train && profile.as_ref().is_none_or(|pr| pr.host.is_none()) {
        let profile_name = profile.as_ref().map_or("none".to_string(), |pr| pr.name.clone());
        p.push(
            ConfigError::invalid(&path, "workload.stack", stack.name(), format!("in {} needs the node's host probe, and profile `{profile_name}` has none", mode.name()))
                .with_hint("run `gpuplan calibrate --host --name PROFILE` on the node (it writes host.toml beside the profile's profile.toml), or give `--calibration` a profile that has one"),
        );
    }
    let d = Options::default();
    let cuda_graphs = match w.options.cuda_graphs.as_deref() {
        None => d.cuda_graphs,
        Some(g) => match TrainGraphs::parse(g) {
            Some(TrainGraphs::None) => TrainGraphs::None,
            Some(t) if stack == Stack::Megatron && mode == Mode::Train => t,
            Some(_) => {
                p.push(
                    ConfigError::invalid(
                        &path,
                        "options.cuda_graphs",
                        g,
                        format!("applies to megatron training; this scenario is {} {}", stack.name(), mode.name()),
                    )
                    .with_hint("leave it out (the serving engines' graphs are serve's `--cuda-graphs`; torch stacks' are not modelled in training)"),
                );
                TrainGraphs::None
            }
            None => {
                let names = TrainGraphs::ALL.map(TrainGraphs::name).join(", ");
                p.push(ConfigError::invalid(&path, "options.cuda_graphs", g, "is not known").with_hint(format!("one of: {names}")));
                TrainGraphs::None
            }
        },
    };
    let moe_ep_overlap = w.options.moe_ep_overlap.unwrap_or(d.moe_ep_overlap);
    if moe_ep_overlap {
        // Megatron-Core's own checks (megatron-core 0.16.1 `TransformerConfig.__post_init__`).
        let why = if stack != Stack::Megatron || mode != Mode::Train {
            Some(format!("applies to megatron training; this scenario is {} {}", stack.name(), mode.name()))
        } else if parallel.ep <= 1 {
            Some("needs expert parallelism: `parallelism.ep` is 1".to_string())
        } else if workload.moe_dispatcher == MoeDispatcher::AllGather {
            Some("runs with the alltoall or flex dispatcher, not allgather".to_string())
        } else if workload.recompute == Recompute::Full {
            Some("cannot run with full recompute".to_string())
        } else if parallel.pp > 1 && parallel.vp <= 1 {
            Some(format!("needs a virtual pipeline when `parallelism.pp` = {} (Megatron asserts it)", parallel.pp))
        } else {
            None
        };
        if let Some(why) = why {
            p.push(
                ConfigError::invalid(&path, "options.moe_ep_overlap", true, why)
                    .with_hint("leave it out, or give a layout Megatron overlaps (ep > 1; pp 1, or pp > 1 with vp > 1; no full recompute)"),
            );
        }
    }
    let moe_shared_expert_overlap = w.options.moe_shared_expert_overlap.unwrap_or(d.moe_shared_expert_overlap);
    if moe_shared_expert_overlap {
        // Megatron-Core's checks (megatron-core 0.16.1 `TransformerConfig.__post_init__`).
        let why = if stack != Stack::Megatron {
            Some(format!("applies to the megatron stack; this scenario is {}", stack.name()))
        } else if model.moe.as_ref().is_none_or(|m| m.n_shared_experts == 0) {
            Some(format!("overlaps shared experts, and `{}` has none", model.name))
        } else if parallel.ep <= 1 {
            Some("overlaps the EP all-to-alls: `parallelism.ep` is 1".to_string())
        } else if workload.moe_dispatcher != MoeDispatcher::AllToAll {
            Some(format!("runs with the alltoall dispatcher only, not {}", workload.moe_dispatcher.name()))
        } else if moe_ep_overlap {
            Some("cannot run with `options.moe_ep_overlap` (Megatron asserts one or the other)".to_string())
        } else {
            None
        };
        if let Some(why) = why {
            p.push(
                ConfigError::invalid(&path, "options.moe_shared_expert_overlap", true, why)
                    .with_hint("leave it out, or use it on an MoE model with shared experts, ep > 1 and the alltoall dispatcher"),
            );
        }
    }
    let options = Options {
        tp_comm_overlap: w.options.tp_comm_overlap.unwrap_or(d.tp_comm_overlap),
        dp_overlap: w.options.dp_overlap.unwrap_or(d.dp_overlap),
        cuda_graphs,
        moe_ep_overlap,
        moe_shared_expert_overlap,
        // Only a run record's own measurement sets it (`record::apply_run_idle`).
        run_idle: None,
    };
    p.finish()?;
    let name = w.name.clone().unwrap_or_else(|| format!("{}-{}-{}gpu", model.name, system.name, gpus));
    Ok(Scenario { name, model, system, n_gpus: gpus, parallel, workload, profile, options })
}

/// `workload.attention_dp` (`--attention-dp`), checked as the engines check it: an inference
/// engine (TensorRT-LLM's `enable_attention_dp`, SGLang's `--enable-dp-attention`; vLLM's
/// `--data-parallel-size` with `--enable-expert-parallel`), an MoE model, more than one
/// data-parallel rank, and experts sharded over every GPU of the instance (`ep x etp = tp x dp`,
/// `ep` dividing the experts: TensorRT-LLM's `moe_ep_size x moe_tp_size = tp_size` under attention
/// DP, SGLang's `ep_size` = `tp_size`). Returns the busiest rank's `batch` (`ceil(batch / dp)`)
/// and the instance's sequences.
#[allow(clippy::too_many_arguments)]
fn attention_dp_keys(
    p: &mut Problems,
    path: &Path,
    ww: &WorkloadWire,
    model: &Model,
    pc: &ParallelConfig,
    mode: Mode,
    stack: Stack,
    batch: u64,
) -> (u64, Option<u64>) {
    if ww.attention_dp != Some(true) {
        return (batch, None);
    }
    let key = "workload.attention_dp";
    let hint = "give --ep and --dp so that ep x etp = tp x dp (e.g. `--tp 1 --dp 8 --ep 8` on 8 GPUs), or leave out `--attention-dp`";
    let why = if !stack.is_engine() || mode == Mode::Train {
        Some((
            format!("is how the serving engines run MoE inference; this scenario is {} {}", stack.name(), mode.name()),
            "use --attention-dp with --stack trtllm, vllm or sglang and --mode prefill|decode (or `gpuplan serve`)",
        ))
    } else if model.moe.is_none() {
        Some((
            format!("replicates attention around expert-parallel MoE layers, and model `{}` has no experts", model.name),
            "leave out --attention-dp (a dense model serves as data-parallel replicas), or give an MoE model",
        ))
    } else if pc.dp <= 1 {
        Some(("needs `parallelism.dp` > 1 attention-DP ranks; dp is 1".to_string(), hint))
    } else if pc.cp > 1 || pc.pp > 1 {
        Some((format!("is modelled with tp and dp only; this layout has pp = {} and cp = {}", pc.pp, pc.cp), "leave out --pp and --cp with --attention-dp"))
    } else if model.moe.as_ref().is_some_and(|m| m.n_experts % pc.ep != 0) {
        let n = model.moe.as_ref().map_or(0, |m| m.n_experts);
        Some((
            format!("shards the experts over `parallelism.ep` = {}, which does not divide the model's {n} experts", pc.ep),
            "give --attention-dp an --ep that divides the experts (and ep x etp = tp x dp)",
        ))
    } else if pc.ep as u64 * pc.etp as u64 != pc.tp as u64 * pc.dp as u64 {
        Some((format!("needs the experts over every GPU of the instance: ep x etp = {} x {} is not tp x dp = {} x {}", pc.ep, pc.etp, pc.tp, pc.dp), hint))
    } else {
        None
    };
    if let Some((why, hint)) = why {
        p.push(ConfigError::invalid(path, key, true, why).with_hint(hint));
        return (batch, None);
    }
    (batch.div_ceil(pc.dp as u64), Some(batch))
}

/// `workload.fsdp_param_dtype`, `fsdp_reduce_dtype` and `fsdp_float8_all_gather`, checked: they
/// describe PyTorch FSDP2 (`fully_shard`'s `MixedPrecisionPolicy`) and torchao's float8 all-gather,
/// so they need a hand-written torch loop (torch-eager or torch-compile; the hf-* stacks model
/// transformers under autocast), training, and zero 3; the float8 all-gather needs fp8 training with
/// tensorwise scaling (torchao refuses it with a recipe: torchtitan 0.1.0 `components/quantization/float8.py`).
#[allow(clippy::too_many_arguments)]
fn fsdp_keys(
    p: &mut Problems,
    path: &Path,
    ww: &WorkloadWire,
    parallel: &ParallelConfig,
    mode: Mode,
    stack: Stack,
    precision: Dtype,
    fp8_recipe: Fp8Recipe,
) -> gpuplan_core::workload::FsdpPrecision {
    use gpuplan_core::workload::FsdpPrecision;
    let mut f = FsdpPrecision::default();
    let applies = matches!(stack, Stack::TorchEager | Stack::TorchCompile) && mode == Mode::Train && parallel.zero == 3;
    let check = |p: &mut Problems, key: &str, value: &dyn std::fmt::Display| {
        if !applies {
            let why = if !matches!(stack, Stack::TorchEager | Stack::TorchCompile) || mode != Mode::Train {
                format!("is an FSDP option of torch-eager/torch-compile training; this scenario is {} under stack {}", mode.name(), stack.name())
            } else {
                format!("is an FSDP option; this scenario has zero {}", parallel.zero)
            };
            p.push(
                ConfigError::invalid(path, key, value, why)
                    .with_hint("use it with --stack torch-eager or torch-compile, --mode train and --zero 3, or leave it out"),
            );
        }
    };
    let dtype = |p: &mut Problems, key: &str, flag: &str, s: &str| {
        StateDtype::parse(s).unwrap_or_else(|| {
            p.push(ConfigError::invalid(path, key, s, "is not an FSDP dtype").with_hint(format!("`{flag}` takes fp32 or bf16")));
            StateDtype::Fp32
        })
    };
    if let Some(s) = &ww.fsdp_param_dtype {
        check(p, "workload.fsdp_param_dtype", s);
        f.bf16_params = dtype(p, "workload.fsdp_param_dtype", "--fsdp-param-dtype", s) == StateDtype::Bf16;
    }
    f.reduce = if f.bf16_params { StateDtype::Bf16 } else { StateDtype::Fp32 };
    if let Some(s) = &ww.fsdp_reduce_dtype {
        check(p, "workload.fsdp_reduce_dtype", s);
        f.reduce = dtype(p, "workload.fsdp_reduce_dtype", "--fsdp-reduce-dtype", s);
    }
    if let Some(g) = ww.fsdp_float8_all_gather {
        check(p, "workload.fsdp_float8_all_gather", &g);
        if g && !(precision == Dtype::Fp8 && fp8_recipe == Fp8Recipe::Tensorwise) {
            p.push(
                ConfigError::invalid(
                    path,
                    "workload.fsdp_float8_all_gather",
                    g,
                    format!("gathers torchao's tensorwise float8 weights; this scenario trains in {}", precision.name()),
                )
                .with_hint("use it with --precision fp8 --fp8-recipe tensorwise, or leave it out"),
            );
        }
        f.float8_all_gather = g;
    }
    f
}

/// The `megatron` stack's memory keys (`workload.grad_reduce_dtype`, `fp8_param_gather`,
/// `optimizer_state_dtype`, `recompute_modules`, `cpu_offload_layers`), checked against what
/// Megatron-Core accepts (megatron/core/transformer/transformer_config.py `__post_init__`).
#[allow(clippy::too_many_arguments)]
fn megatron_memory_keys(
    p: &mut Problems,
    path: &Path,
    ww: &WorkloadWire,
    model: &Model,
    parallel: &ParallelConfig,
    mode: Mode,
    stack: Stack,
    precision: Dtype,
    fp8_recipe: Fp8Recipe,
    recompute: Recompute,
) -> MegatronMemory {
    let mut m = MegatronMemory::default();
    let megatron_train = stack == Stack::Megatron && mode == Mode::Train;
    let only_megatron = |p: &mut Problems, key: &str, value: &dyn std::fmt::Display| {
        if !megatron_train {
            p.push(
                ConfigError::invalid(path, key, value, format!("is a Megatron training option; this scenario is {} under stack {}", mode.name(), stack.name()))
                    .with_hint("use it with --stack megatron --mode train, or leave it out"),
            );
        }
    };
    let dtype = |p: &mut Problems, key: &str, flag: &str, s: &str| {
        StateDtype::parse(s).unwrap_or_else(|| {
            p.push(ConfigError::invalid(path, key, s, "is not a state dtype").with_hint(format!("`{flag}` takes fp32 or bf16")));
            StateDtype::Fp32
        })
    };
    if let Some(s) = &ww.grad_reduce_dtype {
        only_megatron(p, "workload.grad_reduce_dtype", s);
        m.grad_dtype = dtype(p, "workload.grad_reduce_dtype", "--grad-reduce-dtype", s);
    }
    if let Some(s) = &ww.optimizer_state_dtype {
        only_megatron(p, "workload.optimizer_state_dtype", s);
        m.adam_state_dtype = dtype(p, "workload.optimizer_state_dtype", "--optimizer-state-dtype", s);
    }
    if let Some(g) = ww.fp8_param_gather {
        only_megatron(p, "workload.fp8_param_gather", &g);
        if g && !matches!(precision, Dtype::Fp8 | Dtype::Fp4) {
            p.push(
                ConfigError::invalid(path, "workload.fp8_param_gather", g, format!("keeps FP8/FP4 weights; this scenario trains in {}", precision.name()))
                    .with_hint("use it with --precision fp8 or fp4"),
            );
        }
        m.fp8_param_gather = g;
    }
    if let Some(names) = &ww.recompute_modules {
        only_megatron(p, "workload.recompute_modules", &names.join(","));
        if recompute != Recompute::Selective {
            p.push(
                ConfigError::invalid(
                    path,
                    "workload.recompute_modules",
                    names.join(","),
                    format!("applies to selective recompute; recompute is {}", recompute.name()),
                )
                .with_hint("add --recompute selective (Megatron's recompute_granularity = selective)"),
            );
        }
        for n in names {
            let Some(module) = RecomputeModule::parse(n) else {
                let all = RecomputeModule::ALL.map(RecomputeModule::name).join(", ");
                p.push(ConfigError::invalid(path, "workload.recompute_modules", n, "is not a Megatron recompute module").with_hint(format!("one of: {all}")));
                continue;
            };
            let moe = model.moe.as_ref();
            let missing = match module {
                RecomputeModule::MlaUpProj if model.mla.is_none() => Some("has no multi-latent attention"),
                RecomputeModule::Moe | RecomputeModule::MoeAct if moe.is_none() => Some("has no MoE layers"),
                RecomputeModule::SharedExperts if moe.is_none_or(|m| m.n_shared_experts == 0) => Some("has no shared experts"),
                _ => None,
            };
            if let Some(why) = missing {
                p.push(
                    ConfigError::invalid(path, "workload.recompute_modules", n, format!("model `{}` {why}", model.name))
                        .with_hint("Megatron-Core refuses it too (transformer_config.py); leave it out"),
                );
                continue;
            }
            if matches!(module, RecomputeModule::MoeAct | RecomputeModule::Layernorm) && precision == Dtype::Fp8 && fp8_recipe == Fp8Recipe::Delayed {
                p.push(
                    ConfigError::invalid(path, "workload.recompute_modules", n, "is not supported with delayed FP8 scaling (Megatron-Core refuses it)")
                        .with_hint("use --fp8-recipe tensorwise, blockwise or mxfp8, or leave the module out"),
                );
                continue;
            }
            if !m.recompute_modules.contains(&module) {
                m.recompute_modules.push(module);
            }
        }
    }
    if let Some(f) = ww.cross_entropy_fusion {
        only_megatron(p, "workload.cross_entropy_fusion", &f);
        m.cross_entropy_fusion = f && megatron_train;
    }
    if let Some(n) = ww.cpu_offload_layers {
        only_megatron(p, "workload.cpu_offload_layers", &n);
        if n < 0 || n >= model.n_layers as i64 {
            p.push(
                ConfigError::invalid(
                    path,
                    "workload.cpu_offload_layers",
                    n,
                    format!("must be between 0 and {} (less than the model's layers)", model.n_layers.saturating_sub(1)),
                )
                .with_hint("Megatron-Core requires 0 <= cpu_offloading_num_layers < num_layers"),
            );
        } else if n > 0 && parallel.pp > 1 {
            p.push(
                ConfigError::invalid(path, "workload.cpu_offload_layers", n, format!("needs pipeline size 1; this scenario has pp = {}", parallel.pp))
                    .with_hint("Megatron-Core's cpu_offloading does not run with pipeline parallelism"),
            );
        } else if n > 0 && recompute != Recompute::None {
            p.push(
                ConfigError::invalid(path, "workload.cpu_offload_layers", n, format!("cannot be combined with recompute {}", recompute.name()))
                    .with_hint("Megatron-Core refuses cpu_offloading with activation recomputation: use --recompute none"),
            );
        } else {
            m.cpu_offload_layers = n.max(0) as u32;
        }
    }
    m
}
