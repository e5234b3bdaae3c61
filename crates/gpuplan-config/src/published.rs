//! Published NVIDIA Megatron-Bridge / NeMo performance-summary rows (issue 17):
//! `tests/data/published/megatron_bridge_training_dev.csv` read as wire rows, and each complete row
//! mapped to a [`ScenarioWire`] or refused with the reason.
//!
//! A port of `scripts/score_published.py` (`map_row`, `precision_of`, `MODELS`, `SYSTEMS`,
//! `RECIPE_DEFAULTS`); the mapping and its defaults are documented in `docs/published-analysis.md`
//! section 1. Nothing here is fitted. Scoring is `gpuplan_core::validate::published`.

use std::path::Path;

use serde::Deserialize;

use super::published_recipes::perf_recipe;
use super::scenario::{OptionsWire, ParallelWire, ScenarioWire, WorkloadWire};
use super::{read_file, ConfigError};
use gpuplan_core::validate::published::{Case, SkipKind, Skipped};

/// One published row as the CSV holds it (every column text; `dev_row`, `config_id` and `split` are
/// the columns the dev copy adds in front; see `tests/data/published/README.md`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RowWire {
    #[serde(default)]
    pub dev_row: String,
    #[serde(default)]
    pub config_id: String,
    /// `fit` or `test` (fixed; `megatron_bridge_split.md`). Missing: `-`.
    #[serde(default)]
    pub split: String,
    pub source_family: String,
    pub source: String,
    pub container: String,
    pub task: String,
    pub system: String,
    pub model: String,
    pub num_gpus: String,
    pub precision: String,
    pub gbs: String,
    pub mbs: String,
    pub seq_len: String,
    pub fsdp: String,
    pub tp: String,
    pub pp: String,
    pub cp: String,
    pub vp: String,
    pub ep: String,
    pub ga: String,
    pub tokens_per_sec_per_gpu: String,
    pub model_tflops_per_sec_per_gpu: String,
    pub variant: String,
    pub config_complete: String,
    pub notes: String,
    pub raw_row: String,
}

/// Published model names -> (catalog model, family, MoE). The prototype's `MODELS`, and the other
/// models of the same performance summaries (NeMo 24.07-26.08, Megatron-Bridge
/// `docs/performance-summary.md`) in each form the tables print them, from memory of those tables
/// and of the Megatron-Bridge perf recipes' names (`perf_recipes/<family>/<gpu>/*.py`: llama31_405b,
/// qwen3_235b_a22b, gpt_oss_120b / gpt_oss_20b, nemotronh_56b, nemotron_3_nano, kimi_k2). A name
/// matches when its [`compact_name`] equals an entry's: case, `-`, `_`, `.` and spaces do not count
/// (`Llama3.1-405B` = `LLAMA31_405B`); tests/it/published.rs checks that no two entries of different
/// models share a compact form. `family` keys the recipe rules of `map_row` (`deepseek`: MTP;
/// `qwen3`: the MXFP8 full-iteration graphs; `llama3`: the FSDP rows' offload); models of
/// [`crate::published_recipes::PERF_RECIPES`] take their settings from that table instead.
pub const MODELS: &[(&str, &str, &str, bool)] = &[
    ("LLAMA3_8B", "llama-3-8b", "llama3", false),
    ("LLAMA3_70B", "llama-3-70b", "llama3", false),
    ("LLAMA2_7B", "llama-2-7b", "llama2", false),
    ("LLAMA2_13B", "llama-2-13b", "llama2", false),
    ("LLAMA2_70B", "llama-2-70b", "llama2", false),
    ("GPT3_5B", "gpt3-5b", "gpt3", false),
    ("GPT3_20B", "gpt3-20b", "gpt3", false),
    ("GPT3_175B", "gpt3-175b", "gpt3", false),
    ("NEMOTRON_8B", "nemotron-3-8b", "nemotron", false),
    ("NEMOTRON_22B", "nemotron-3-22b", "nemotron", false),
    ("NEMOTRON_15B", "nemotron-4-15b", "nemotron", false),
    ("NEMOTRON_340B", "nemotron-4-340b", "nemotron", false),
    ("DEEPSEEKV3", "deepseek-v3", "deepseek", true),
    ("QWEN3_30B_A3B", "qwen3-30b-a3b", "qwen3", true),
    ("MIXTRAL_8X7B", "mixtral-8x7b", "mixtral", true),
    ("MIXTRAL_8X22B", "mixtral-8x22b", "mixtral", true),
    // The same tables' other models (wt-mbmap, 2026-11-25).
    ("NEMOTRON3_8B", "nemotron-3-8b", "nemotron", false),
    ("NEMOTRON3_22B", "nemotron-3-22b", "nemotron", false),
    ("NEMOTRON4_15B", "nemotron-4-15b", "nemotron", false),
    ("NEMOTRON4_340B", "nemotron-4-340b", "nemotron", false),
    ("LLAMA31_8B", "llama-3.1-8b", "llama3", false),
    ("LLAMA31_70B", "llama-3.1-70b", "llama3", false),
    ("LLAMA31_405B", "llama-3.1-405b", "llama31_405b", false),
    ("LLAMA3_405B", "llama-3.1-405b", "llama31_405b", false),
    ("LLAMA4_E16", "llama-4-scout", "llama4", true),
    ("LLAMA4_SCOUT", "llama-4-scout", "llama4", true),
    ("LLAMA4_SCOUT_17B_16E", "llama-4-scout", "llama4", true),
    ("LLAMA4_E128", "llama-4-maverick", "llama4", true),
    ("LLAMA4_MAVERICK", "llama-4-maverick", "llama4", true),
    ("LLAMA4_MAVERICK_17B_128E", "llama-4-maverick", "llama4", true),
    ("QWEN3_8B", "qwen3-8b", "qwen3", false),
    ("QWEN3_235B_A22B", "qwen3-235b-a22b", "qwen3", true),
    ("QWEN3_235B", "qwen3-235b-a22b", "qwen3", true),
    ("QWEN3_30B", "qwen3-30b-a3b", "qwen3", true),
    ("GPT_OSS_120B", "gpt-oss-120b", "gpt_oss", true),
    ("GPT_OSS_20B", "gpt-oss-20b", "gpt_oss", true),
    ("NEMOTRONH_8B", "nemotron-h-8b", "nemotronh", false),
    ("NEMOTRONH_47B", "nemotron-h-47b", "nemotronh", false),
    ("NEMOTRONH_56B", "nemotron-h-56b", "nemotronh", false),
    ("NEMOTRON3_NANO", "nemotron-3-nano-30b-a3b", "nemotron3_nano", true),
    ("NEMOTRON3_NANO_30B_A3B", "nemotron-3-nano-30b-a3b", "nemotron3_nano", true),
    ("NEMOTRON_NANO_3", "nemotron-3-nano-30b-a3b", "nemotron3_nano", true),
    ("KIMI_K2", "kimi-k2", "kimi", true),
    ("KIMI_K2_1T", "kimi-k2", "kimi", true),
    ("DEEPSEEK_V3_671B", "deepseek-v3", "deepseek", true),
];

/// Models of the same tables that gpuplan cannot express: (compact-name prefix, why). A row of
/// one is refused with the reason (not "no catalog model").
pub const UNEXPRESSIBLE_MODELS: &[(&str, &str)] = &[
    (
        "QWEN3NEXT",
        "Qwen3-Next's hybrid layers (Gated DeltaNet linear attention on 3 of every 4 layers, output-gated attention on the 4th; megatron-bridge 0.3.1 Qwen3NextModelProvider: experimental_attention_variant = gated_delta_net, linear_attention_freq 4) are not modelled: gpuplan's hybrid layers are Mamba-2 only (`[hybrid]`)",
    ),
    (
        "NEMOTRON3SUPER",
        "Nemotron 3 Super's latent MoE (experts in a projected latent space: fc1_latent_proj / fc2_latent_proj, megatron-bridge 0.6.2 nemotron_h_bridge.py `moe_latent_size`) is not modelled",
    ),
    ("NEMOTRON3ULTRA", "Nemotron 3 Ultra's latent MoE (megatron-bridge 0.6.2 nemotron_h_bridge.py `moe_latent_size`) is not modelled"),
    ("QWEN3VL", "a vision-language model: the vision encoder and its image tokens are not modelled (gpuplan models the language model only)"),
    ("QWEN35VL", "a vision-language model: the vision encoder and its image tokens are not modelled (gpuplan models the language model only)"),
    ("QWEN35", "Qwen3.5's hybrid Gated DeltaNet attention is not modelled: gpuplan's hybrid layers are Mamba-2 only"),
    ("GLM5", "GLM-5's DeepSeek sparse attention (the DSA indexer, megatron-bridge 0.6.2 models/glm_moe_dsa) is not modelled"),
    ("DEEPSEEKV4", "DeepSeek-V4's attention (megatron-bridge 0.6.2 perf_recipes/deepseek/*/deepseek_v4.py) has no catalog model: its architecture is not in gpuplan's model schema"),
    ("WAN", "a video diffusion transformer, not a language model"),
];

/// A published model name's matching key: upper case, letters and digits only
/// (`'Llama3.1-405B'` -> `LLAMA31405B`, `'GPT-OSS 120B'` -> `GPTOSS120B`).
pub fn compact_name(name: &str) -> String {
    name.chars().filter(char::is_ascii_alphanumeric).map(|c| c.to_ascii_uppercase()).collect()
}

/// The catalog model, family and MoE flag of a published model name (its parenthetical variant
/// dropped, [`norm_model`]), or why it has none.
pub fn catalog_model(name: &str) -> Result<(&'static str, &'static str, bool), String> {
    let key = compact_name(&norm_model(name).0);
    if let Some(&(_, model, family, moe)) = MODELS.iter().find(|m| compact_name(m.0) == key) {
        return Ok((model, family, moe));
    }
    if let Some((_, why)) = UNEXPRESSIBLE_MODELS.iter().find(|(prefix, _)| key.starts_with(prefix)) {
        return Err(format!("model `{}`: {why}", name.trim()));
    }
    let mut known: Vec<_> = MODELS.iter().map(|m| m.0).collect();
    known.dedup();
    Err(format!("model `{}` has no catalog model (published names mapped: {})", name.trim(), known.join(", ")))
}

/// Published system names -> catalog systems.
pub const SYSTEMS: &[(&str, &str)] =
    &[("DGX-H100", "dgx-h100"), ("DGX-B200", "dgx-b200"), ("DGX-GB200", "gb200-nvl72"), ("DGX-B300", "dgx-b300"), ("DGX-GB300", "gb300-nvl72")];

/// Other spellings of the published systems (compact form, [`compact_name`]) -> catalog systems: the
/// dev set prints only [`SYSTEMS`]' names; these are the forms other pages of the same summaries may
/// use (from memory), matched after them. DGX-H200 is HGX H200's catalog node (same GPUs, NVLink and
/// NICs; `calibration/systems/hgx-h200.toml`); DGX-A100 is `dgx-a100`.
pub const SYSTEM_ALIASES: &[(&str, &str)] = &[
    ("H100", "dgx-h100"),
    ("DGXH10080GB", "dgx-h100"),
    ("H200", "hgx-h200"),
    ("DGXH200", "hgx-h200"),
    ("B200", "dgx-b200"),
    ("B300", "dgx-b300"),
    ("GB200", "gb200-nvl72"),
    ("GB200NVL72", "gb200-nvl72"),
    ("DGXGB200NVL72", "gb200-nvl72"),
    ("GB300", "gb300-nvl72"),
    ("GB300NVL72", "gb300-nvl72"),
    ("DGXGB300NVL72", "gb300-nvl72"),
    ("A100", "dgx-a100"),
    ("DGXA100", "dgx-a100"),
];

/// The catalog system of a published system name: [`SYSTEMS`] as printed, else
/// [`SYSTEM_ALIASES`] on the name's compact form (`DGX H100` = `DGX-H100`).
pub fn catalog_system(name: &str) -> Option<&'static str> {
    let name = name.trim();
    if let Some(&(_, s)) = SYSTEMS.iter().find(|s| s.0 == name) {
        return Some(s);
    }
    let key = compact_name(name);
    SYSTEMS.iter().find(|s| compact_name(s.0) == key).or_else(|| SYSTEM_ALIASES.iter().find(|s| s.0 == key)).map(|s| s.1)
}

/// Defaults applied where a row is silent: (what, value, source). The published pages state none
/// of these; the sources are the Megatron-Bridge / NeMo recipes as the prototype's author knew them
/// ("from memory" where they could not be re-read).
pub const RECIPE_DEFAULTS: &[(&str, &str, &str)] = &[
    ("stack", "megatron", "Megatron-Core + Transformer Engine is what NeMo 2 / Megatron-Bridge run"),
    (
        "zero",
        "1 when the FSDP column is 0/empty; 3 when it is > 0 (the column is 1/0 in 25.07-25.09 and the sharding group size, 0 = DDP, in the archive: both read as on/off)",
        "Bridge recipes set OptimizerConfig(use_distributed_optimizer=True) (NeMo 24.07 launcher: optim.name=distributed_fused_adam); FSDP rows use Megatron-FSDP (use_megatron_fsdp=True, data_parallel_sharding_strategy=optim_grads_params), and FSDP group = all GPUs in every FSDP row",
    ),
    (
        "dp_overlap",
        "true (gpuplan's default)",
        "Bridge DistributedDataParallelConfig(overlap_grad_reduce=True, overlap_param_gather=True) in the pretrain recipes; NeMo 24.07 overlap_grad_sync/overlap_param_sync",
    ),
    ("sp", "true when tp > 1 (gpuplan's default)", "recipes set sequence_parallel=True with TP (Llama3 70B, GPT3 175B, Nemotron-4 340B, Llama2 70B)"),
    (
        "tp_comm_overlap",
        "true when tp > 1, except NVFP4 rows (`NVFP4_TP_COMM_OVERLAP`: the NVFP4 perf recipes set tp_comm_overlap = False)",
        "Bridge perf configs enable tp_comm_overlap with userbuffers configs (e.g. userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192 for Llama3 70B); NeMo 24.07 ub_tp_comm_overlap=True for the large TP models. For GPT3 20B / Nemotron 8B-22B at TP 2 it is a presumption; Megatron-Bridge 0.6.2 perf_recipes/llama/{b200,gb200}/llama3.py llama3_70b_pretrain_64gpu_*_nvfp4_config set comm_overlap.tp_comm_overlap = False",
    ),
    (
        "recompute",
        "none, except DeepSeek-V3 (`memory_recipe`, below)",
        "Megatron-Bridge 0.6.2 perf recipes leave recompute_granularity = None for the dense and Qwen3 models (perf_recipes/{llama,qwen}/*/); rows gpuplan's memory plan says do not fit are counted",
    ),
    ("cp_comm", "ring (p2p)", "Megatron cp_comm_type default p2p; gpuplan prices TE's load-balanced ring attention: cp equal attention blocks per rank, each key/value block sent beside the block before it, keys, values and their gradients in backward, the last gradient hop exposed"),
    (
        "moe",
        "alltoall dispatcher, grouped GEMM, force-balanced routing (routing_imbalance 1.0), etp 1",
        "the page: token distribution force-balanced (moe_router_force_load_balancing); Qwen3 perf configs: moe_token_dispatcher_type=alltoall, moe_grouped_gemm=True; expert TP = 1 in the MoE perf configs",
    ),
    (
        "precision",
        "BF16 -> bf16; FP8 / FP8-CS / FP8-DS / FP8-MX / MXFP8 / blockwise -> fp8; NVFP4 -> fp4",
        "fp8 rows run gpuplan's fp8 path with their recipe (workload.fp8_recipe: current scaling -> tensorwise, delayed, blockwise, MXFP8), which sets the quantize kernels' traffic and the quantized inputs the linears keep; NVFP4 runs the fp4 path (NVFP4 GEMM rate, Hadamard-rotated wgrad cast); the LM head and router stay bf16 under both; the fp8 GEMM rate is the same for every fp8 recipe (MXFP8 and per-tensor FP8 share Blackwell's FP8 tensor rate)",
    ),
    (
        "cuda_graphs",
        "MoE rows: full (whole iteration) for MXFP8 on Blackwell from NeMo 26.06 on (Qwen3-30B-A3B on every Blackwell system, DeepSeek-V3 on GB200, GB300 and B300); partial (attention, MoE router) for the other Blackwell MoE rows; none on H100 and for dense rows",
        "Megatron-Bridge 0.6.2 perf recipes (PyPI wheel megatron-bridge 0.6.2, 2026-09, megatron/bridge/perf_recipes/{qwen,deepseek}/*/): the MXFP8 Qwen3-30B-A3B and DeepSeek-V3 (GB200, GB300, B300) configs call _enable_hybridep_full_iteration_mxfp8 / _enable_deepseek_full_iteration_mxfp8 (cuda_graph_impl = full_iteration, HybridEP with moe_expert_rank_capacity_factor 1.5); their BF16/FP8-CS configs and DeepSeek-V3 MXFP8 on B200 set cuda_graph_impl = transformer_engine, cuda_graph_scope = [attn, moe_router, moe_preprocess]; the H100 base recipes cuda_graph_impl = none. Earlier releases' recipes are not in a published wheel; the rows' throughput at an unchanged layout jumps between NeMo 26.04.01 and 26.06 (Qwen3-30B-A3B on GB200 26112 -> 40706 tokens/s/GPU, on B300 30720 -> 40769), which is taken as when the full-iteration recipes landed",
    ),
    (
        "moe_dispatcher",
        "flex for the NeMo 26.x MoE rows: HybridEP (`moe_flex_backend` hybridep) from 26.06 on and on GB200/GB300 before, DeepEP (deepep) on H100, B200 and B300 before 26.06; alltoall for 25.x rows",
        "Megatron-Bridge 0.6.2 perf recipes set moe_token_dispatcher_type = flex, moe_flex_dispatcher_backend = hybridep for every Qwen3-30B-A3B and DeepSeek-V3 config; the 0.4.0 and 0.5.0 base recipes (megatron/bridge/recipes/qwen/qwen3_moe.py) set alltoall and then apply_flex_dispatcher_backend(cfg.model, 'deepep'), which switches to flex on Ampere, Hopper, B200 and B300 and leaves GB200/GB300 on alltoall (training/flex_dispatcher_backend.py); 25.x rows keep alltoall. The GB200/GB300 rows of 26.02-26.04.01 are taken to run HybridEP, which 0.4.0's apply_flex_dispatcher_backend lists for 'GB200, GB300 with NVL72' (the perf scripts' own choice for those releases is not in reach): chosen on the fit split, whose 81 rows score 10.21% with them on alltoall (its sort_chunks permutation and top-k copies per token) and 8.99% on HybridEP (wt-moe4, 2026-11-24); the test split, not used, 8.90% and 7.73%",
    ),
    (
        "grad_reduce_dtype, fp8_param_gather",
        "NeMo 25.x/26.x rows: bf16 main gradients; FP8/FP4 rows keep quantized weights only (no bf16 copy). NeMo 24.07 rows: fp32 main gradients, bf16 weights (Megatron's defaults)",
        "Megatron-Bridge 0.6.2 perf_recipes/_common.py (_benchmark_common and _perf_precision set grad_reduce_in_fp32 = False) and training/mixed_precision.py (bf16_with_fp8_current_scaling_mixed, bf16_with_mxfp8_mixed, bf16_with_fp8_delayed_scaling_mixed: fp8_param_gather = True; bf16_with_nvfp4_mixed: fp4_param_gather = True); NeMo 2's perf scripts for the 25.x rows set the same (from memory)",
    ),
    (
        "cross_entropy_fusion",
        "NeMo 25.x/26.x rows: Transformer Engine's fused cross entropy (bf16 logits, gradient in place); NeMo 24.07 rows: Megatron's unfused vocab-parallel cross entropy",
        "Megatron-Bridge 0.6.2 models/gpt_provider.py (cross_entropy_loss_fusion = True) and perf_recipes/_common.py _benchmark_common (cross_entropy_fusion_impl = te); NeMo 2 for the 25.x rows (from memory)",
    ),
    (
        "recompute (DeepSeek-V3), cpu_offload (Llama-3 70B FSDP)",
        "DeepSeek-V3: selective recompute of mla_up_proj (B200, B300, GB200 except FP8-CS, GB300 FP8-CS, and GB300 MXFP8 before 26.06: the layout those rows print is the FP8-CS config's; plus layernorm and moe_act for NVFP4 on B200), mla_up_proj and mlp (H100), mlp (GB200 FP8-CS), moe_act (GB300 BF16), none (GB300 MXFP8 from 26.06, the full-iteration config); Llama-3 70B Megatron-FSDP on GB200/GB300: activations of 40 (GB200 FP8), 20 (GB200 BF16, GB300 FP8) or 30 (GB300 BF16) layers offloaded to the host",
        "Megatron-Bridge 0.6.2 perf_recipes/deepseek/{h100,b200,b300,gb200,gb300}/deepseek_v3.py (_deepseek_v3_common sets recompute_granularity = selective; the H100 configs recompute_modules = [mla_up_proj, mlp]; gb300 deepseek_v3_pretrain_256gpu_gb300_fp8cs_config is PP 2 VP 8 EP 32 MBS 2 with [mla_up_proj]) and perf_recipes/llama/{gb200,gb300}/llama3.py (cpu_offloading = True, cpu_offloading_weights = False, cpu_offloading_num_layers); applied to the earlier releases' rows of the same model, system and precision",
    ),
    (
        "moe_ep_overlap",
        "on for the MoE rows with full-iteration CUDA graphs (RECIPE_DEFAULTS `cuda_graphs`), and for the 26.x rows of a model whose perf recipe sets it (`PerfRecipe::ep_overlap`: Qwen3-235B-A22B on H100, GPT-OSS-120B BF16 on GB200, and the full-iteration configs from 26.06), and for Qwen3-30B-A3B BF16 on H100 (26.x), whose layout Megatron overlaps (pp 1, or a virtual pipeline); off otherwise",
        "Megatron-Bridge 0.6.2 perf recipes: _enable_hybridep_full_iteration_mxfp8 (perf_recipes/qwen/common.py) and _enable_deepseek_full_iteration_mxfp8 (perf_recipes/deepseek/common.py) set comm_overlap overlap_moe_expert_parallel_comm = True and delay_wgrad_compute = True, with moe_hybridep_num_sms = 32; their BF16/FP8-CS and partial-graph configs leave it off (the H100 Qwen3 base recipe's is commented out), except qwen3_235b_a22b_pretrain_256gpu_h100_{bf16,fp8cs}_config (perf_recipes/qwen/h100/qwen3_moe.py: cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=False, overlap_moe_expert_parallel_comm=True, delay_wgrad_compute=True), alltoall, TP 2 PP 8 VP 4 EP 32), gpt_oss_120b_pretrain_64gpu_gb200_bf16_config and qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config (cfg.comm_overlap.overlap_moe_expert_parallel_comm = True; the dev set's H100 Qwen3-30B-A3B rows are FP8, whose config replaces comm_overlap with CommOverlapConfig(tp_comm_overlap=True)); megatron-core 0.16.1 asserts a virtual pipeline for it when pp > 1. The same helpers and the Qwen3 H100 base recipe set moe_shared_expert_overlap = False, so no row overlaps its shared experts (`moe_shared_expert_overlap` stays off)",
    ),
    (
        "tokendrop",
        "MoE rows whose model name says tokendrop: capacity factor 1.0 with each expert's input padded to its capacity (`TOKENDROP_CAPACITY_FACTOR`), the alltoall dispatcher, no full-iteration graphs",
        "Megatron-Bridge 0.6.2 training/utils/moe_token_drop.py apply_moe_token_drop (defaults 1.0 and pad = True; asserts the alltoall dispatcher); the perf scripts' token-drop switch calls it (from memory)",
    ),
    (
        "perf_recipes",
        "Llama 3.1 405B, Qwen3-235B-A22B, GPT-OSS-120B/20B, Kimi K2, Nemotron 3 Nano, Nemotron-H 56B: the recompute modules, CUDA graphs (full only from NeMo 26.06, partial before), MoE dispatcher (26.x rows; alltoall before) and FSDP activation offload of the model's perf recipe on the row's system and precision (`published_recipes::PERF_RECIPES`); other new models (Llama 4, Qwen3 8B, Llama 3.1 8B/70B, Nemotron-H 8B/47B) the family rules above",
        "megatron-bridge 0.6.2 perf_recipes/{llama/*/llama31.py, qwen/*/qwen3_moe.py, gpt_oss/*/gpt_oss.py, kimi/*/kimi_k2.py, nemotronh/*/nemotronh.py}, summarized by scripts/extract_perf_recipes.py (tests/data/published/megatron_bridge_0.6.2_perf_recipes.csv)",
    ),
    ("sft", "SFT rows as training on packed SQuAD (`packed_doc_len` = SQUAD_PACKED_DOC_TOKENS)", "SFT rows are packed sequences (SQuAD packed to 4096 on the 24.07 page; Megatron-Bridge 0.6.2 `default_squad_config`): attention within each document"),
    (
        "lora",
        "LoRA rows as training with `lora_rank` / `lora_targets`, distributed optimizer, sp and TP comm overlap from `lora_recipe` (Llama-3 70B: the Bridge perf recipes' adapters on linear_qkv, distributed optimizer, sp + TP overlap at tp > 1); packed SQuAD as the SFT rows",
        "Megatron-Bridge 0.6.2 perf_recipes/llama/<gpu>/llama3.py llama3_70b_peft_8gpu_* (peft.target_modules = [\"linear_qkv\"], dim 16, use_distributed_optimizer = True; H100 TP 2 with sequence_parallel and tp_comm_overlap); LoRA defaults (dim 32, all four linear layers) for other Bridge models; NeMo 1 PEFT defaults for the 24.07 rows (attention_qkv, adapter_dim 32)",
    ),
];

/// Read the rows of a published CSV (header as in `tests/data/published/`; the three added columns
/// are optional).
pub fn read_rows(path: &Path) -> Result<Vec<RowWire>, ConfigError> {
    read_dev_rows(path, |r: &mut RowWire| (&mut r.dev_row, &mut r.split))
}

/// The rows of a development-set CSV (training or serving), each row's optional `dev_row` and
/// `split` (given by `ids`) filled when empty: the row's index, and `-` (no split).
pub(crate) fn read_dev_rows<T: serde::de::DeserializeOwned>(path: &Path, ids: impl Fn(&mut T) -> (&mut String, &mut String)) -> Result<Vec<T>, ConfigError> {
    let text = read_file(path)?;
    let mut r = csv::ReaderBuilder::new().from_reader(text.as_bytes());
    let mut rows = Vec::new();
    for (i, rec) in r.deserialize::<T>().enumerate() {
        let mut row = rec.map_err(|e| ConfigError::invalid(path, &format!("row {}", i + 1), "(csv)", e.to_string()))?;
        let (dev_row, split) = ids(&mut row);
        if dev_row.is_empty() {
            *dev_row = i.to_string();
        }
        if split.is_empty() {
            *split = "-".into();
        }
        rows.push(row);
    }
    Ok(rows)
}

/// `'LLAMA3-70B'` -> `("LLAMA3_70B", "")`; `'DeepSeekV3 (w/o MTP)'` -> `("DEEPSEEKV3", "w/o MTP")`.
pub fn norm_model(name: &str) -> (String, String) {
    let name = name.trim();
    let (base, variant) = match name.find('(') {
        Some(i) if name.ends_with(')') => (&name[..i], &name[i + 1..name.len() - 1]),
        _ => (name, ""),
    };
    (base.trim().to_uppercase().replace('-', "_"), variant.trim().to_string())
}

/// (gpuplan precision, recipe as run, slice label) of a row, or `None` when it states none.
pub fn precision_of(row: &RowWire) -> Option<(&'static str, &'static str, &'static str)> {
    let p = row.precision.as_str();
    if p.starts_with("not stated") {
        return None;
    }
    Some(match p {
        "BF16" => ("bf16", "bf16", "bf16"),
        "NVFP4" => ("fp4", "nvfp4", "nvfp4"),
        "MXFP8" | "FP8-MX" => ("fp8", "mxfp8", "mxfp8"),
        "FP8-DS" => ("fp8", "fp8-delayed", "fp8"),
        "FP8-SC" | "FP8-BLOCK" | "FP8-BS" => ("fp8", "fp8-blockwise", "fp8-block"),
        _ if p == "FP8-CS" || p.starts_with("FP8 (page: per-tensor") => ("fp8", "fp8-current", "fp8"),
        "FP8" => match row.container.as_str() {
            "NeMo 24.07" => ("fp8", "fp8-delayed (NeMo 24.07 TE default, from memory)", "fp8"),
            // NeMo 2.0's perf scripts ran from NeMo 24.09 on (24.09, 24.12 and 25.02 pages).
            c if c == "NeMo 25.02" || nemo_release(c).is_some_and(|v| v > (24, 7) && v < (25, 2)) => {
                ("fp8", "fp8 (recipe not stated; NeMo 2.0 perf scripts defaulted to delayed scaling, from memory)", "fp8")
            }
            _ => ("fp8", "fp8-current (Bridge perf configs' fp8_cs, from memory)", "fp8"),
        },
        _ => return None,
    })
}

/// The recipe a row's precision reading (`precision_of`) runs as: gpuplan's `workload.fp8_recipe`
/// for fp8 rows, `None` otherwise (bf16; fp4 is NVFP4). The rest of a recipe's name is how the
/// row was read.
pub fn fp8_recipe_of(precision: &str, recipe: &str) -> Option<&'static str> {
    (precision == "fp8").then(|| match recipe {
        r if r.starts_with("mxfp8") => "mxfp8",
        r if r.starts_with("fp8-blockwise") => "blockwise",
        r if r.starts_with("fp8-delayed") || r.starts_with("fp8 (recipe not stated; NeMo 2.0") => "delayed",
        _ => "tensorwise",
    })
}

/// An integer cell; blank or `n/a` is `default`.
fn int_cell(key: &str, s: &str, default: u64) -> Result<u64, Skipped> {
    let s = s.trim();
    if s.is_empty() || s == "n/a" {
        return Ok(default);
    }
    s.parse().map_err(|_| Skipped::new(SkipKind::Incomplete, format!("`{key}` = `{s}` is not an integer")))
}

/// A row mapped to a scenario.
#[derive(Debug)]
pub struct Mapped {
    pub wire: ScenarioWire,
    pub case: Case,
}

/// Map one row: the scenario it describes, or why it cannot be expressed (a layout gpuplan's
/// own check refuses is reported by the caller, which builds the scenario).
pub fn map_row(r: &RowWire) -> Result<Mapped, Skipped> {
    use SkipKind::*;
    if r.config_complete != "yes" {
        return Err(Skipped::new(Incomplete, format!("config_complete = '{}'", r.config_complete)));
    }
    let (_, variant) = norm_model(&r.model);
    let (model, family, moe) = catalog_model(&r.model).map_err(|why| Skipped::new(Unexpressible, why))?;
    let Some(system) = catalog_system(&r.system) else {
        return Err(Skipped::new(Unsupported, format!("system `{}` is not mapped", r.system)));
    };
    let n = int_cell("num_gpus", &r.num_gpus, 0)?;
    let (tp, pp) = (int_cell("tp", &r.tp, 1)?, int_cell("pp", &r.pp, 1)?);
    let (cp, vp, ep) = (int_cell("cp", &r.cp, 1)?, int_cell("vp", &r.vp, 1)?, int_cell("ep", &r.ep, 1)?);
    let (mbs, gbs, seq) = (int_cell("mbs", &r.mbs, 0)?, int_cell("gbs", &r.gbs, 0)?, int_cell("seq_len", &r.seq_len, 0)?);
    let fsdp = int_cell("fsdp", &r.fsdp, 0)?;
    let mut reasons = Vec::new();
    // Token-drop rows run Megatron-Bridge's `apply_moe_token_drop` (RECIPE_DEFAULTS `tokendrop`).
    let tokendrop = moe && variant.to_lowercase().contains("tokendrop");
    // DeepSeek-V3 with its MTP module: the 25.11 page labels it; the 26.x rows' model
    // FLOPs/token, 260 G, equal the 25.11 'w/ MTP' row's, not the 'w/o MTP' rows' 249.5 G.
    let mtp = variant.contains("w/ MTP") || (family == "deepseek" && variant.is_empty() && r.container.starts_with("NeMo 26"));
    // The MoE recipes' CUDA graphs and dispatcher (RECIPE_DEFAULTS `cuda_graphs`, `moe_dispatcher`).
    let from_26_06 = nemo_release(&r.container).is_some_and(|v| v >= (26, 6));
    let blackwell = matches!(system, "dgx-b200" | "dgx-b300" | "gb200-nvl72" | "gb300-nvl72");
    let mxfp8 = matches!(r.precision.as_str(), "MXFP8" | "FP8-MX");
    // The models with Megatron-Bridge 0.6.2 perf recipes beyond the dev set's take their recipe's
    // settings (RECIPE_DEFAULTS `perf_recipes`); the full-iteration graphs only from 26.06, as below.
    let perf = precision_of(r).and_then(|(_, recipe, _)| perf_recipe(model, system, recipe, n));
    let cuda_graphs = match (perf, moe, blackwell) {
        // The full-iteration recipes run HybridEP, which token dropping cannot (alltoall only).
        _ if tokendrop && moe && blackwell => Some("partial"),
        (Some(p), _, _) => match p.cuda_graphs {
            "full" if from_26_06 => Some("full"),
            "full" | "partial" => Some("partial"),
            _ => None,
        },
        (None, true, true) if from_26_06 && mxfp8 && (family == "qwen3" || system != "dgx-b200") => Some("full"),
        (None, true, true) => Some("partial"),
        _ => None,
    };
    let from_26 = nemo_release(&r.container).is_some_and(|v| v >= (26, 0));
    let deepep_gpu = matches!(system, "dgx-h100" | "hgx-h200" | "dgx-a100" | "dgx-b200" | "dgx-b300");
    // Before 26.06 the GB200/GB300 rows run HybridEP, the one flex backend for NVL72 (selected on the
    // fit rows; RECIPE_DEFAULTS `moe_dispatcher`). A perf recipe's own choice for the 26.x rows.
    let moe_dispatcher = match perf {
        _ if tokendrop => None,
        Some(p) => (moe && from_26 && p.dispatcher != "alltoall").then_some("flex"),
        None => (moe && from_26).then_some("flex"),
    };
    // Its kernels (RECIPE_DEFAULTS `moe_dispatcher`): HybridEP in the 26.06 perf recipes and on
    // GB200/GB300, DeepEP on the other systems before (DeepSeek-V3's base recipe names HybridEP;
    // the perf scripts' choice for those releases is not in reach, and the fit rows do not tell
    // the two apart: docs/published-analysis.md, wt-mbmoe).
    let moe_flex_backend = moe_dispatcher.map(|_| match perf {
        Some(p) => p.dispatcher,
        None if from_26_06 || !deepep_gpu => "hybridep",
        None => "deepep",
    });
    // The full-iteration recipes overlap the EP all-to-alls (RECIPE_DEFAULTS `moe_ep_overlap`), and so
    // do the perf recipes that set it without them (Qwen3-235B-A22B on H100, EP 32 over four nodes;
    // GPT-OSS-120B BF16 on GB200), for the 26.x rows as their dispatcher; Megatron refuses the overlap
    // at pp > 1 without a virtual pipeline.
    // Of the dev models' 0.6.2 configs without full-iteration graphs, only Qwen3-30B-A3B's BF16 ones on
    // H100 set it (`perf_recipes/qwen/h100/qwen3_moe.py` `qwen3_30b_a3b_pretrain_{16,64}gpu_h100_bf16_config`;
    // the FP8-CS ones replace `comm_overlap` without it).
    let dev_recipe_overlap = model == "qwen3-30b-a3b" && system == "dgx-h100" && r.precision.trim().eq_ignore_ascii_case("BF16") && from_26;
    let recipe_overlap = match perf {
        Some(p) => p.ep_overlap && from_26 && (p.cuda_graphs != "full" || cuda_graphs == Some("full")),
        None => cuda_graphs == Some("full") || dev_recipe_overlap,
    };
    let moe_ep_overlap = recipe_overlap && ep > 1 && (pp == 1 || vp > 1);
    let Some((precision, recipe, prec_slice)) = precision_of(r) else {
        return Err(Skipped::new(Incomplete, "precision not stated"));
    };
    if precision == "fp4" && !blackwell {
        reasons.push(format!("NVFP4 on {system}: no FP4 tensor cores"));
    }
    if !reasons.is_empty() {
        return Err(Skipped::new(Unexpressible, reasons.join("; ")));
    }
    if n == 0 || !n.is_multiple_of(tp * pp * cp) {
        return Err(Skipped::new(Unexpressible, format!("gpus {n} not a multiple of tp*pp*cp = {}", tp * pp * cp)));
    }
    let dp = n / (tp * pp * cp);
    if mbs == 0 || !gbs.is_multiple_of(mbs * dp) {
        return Err(Skipped::new(Unexpressible, format!("gbs {gbs} not a multiple of mbs*dp = {mbs}*{dp}")));
    }
    let measured: f64 = r
        .tokens_per_sec_per_gpu
        .trim()
        .parse()
        .map_err(|_| Skipped::new(Incomplete, format!("tokens_per_sec_per_gpu = `{}` is not a number", r.tokens_per_sec_per_gpu)))?;
    let ga = gbs / (mbs * dp);
    let mut notes = Vec::new();
    if let Ok(published_ga) = r.ga.trim().parse::<u64>() {
        if published_ga != ga {
            notes.push(format!("published GA {published_ga} != gbs/(mbs*dp) = {ga}"));
        }
    }
    let task = task_kind(&r.task);
    if task == "SFT" {
        notes.push(format!("SFT on packed SQuAD: attention within {SQUAD_PACKED_DOC_TOKENS}-token documents"));
    }
    let lora = (task == "LoRA").then(|| lora_recipe(&r.container, model));
    if let Some(l) = &lora {
        notes.push(format!(
            "LoRA rank {} on {} ({}); packed SQuAD: attention within {SQUAD_PACKED_DOC_TOKENS}-token documents",
            l.rank,
            l.targets.join(","),
            l.source
        ));
    }
    // Fine-tuning rows train on SQuAD packed to the row's sequence (see `SQUAD_PACKED_DOC_TOKENS`).
    let packed_doc_len = matches!(task, "SFT" | "LoRA").then_some(SQUAD_PACKED_DOC_TOKENS.min(seq) as i64);
    let fp8_recipe = fp8_recipe_of(precision, recipe);
    let mut mem = memory_recipe(&r.container, family, system, precision, recipe, fsdp > 0, lora.is_some());
    // A perf recipe's recompute and offload (RECIPE_DEFAULTS `perf_recipes`), for the releases whose
    // memory options `memory_recipe` reads (25.x and 26.x), the offload on Megatron-FSDP rows only.
    if let Some(p) = perf.filter(|_| nemo_release(&r.container).is_some_and(|v| v >= (25, 0))) {
        mem.recompute_modules = p.recompute_modules.to_vec();
        mem.cpu_offload_layers = if fsdp > 0 { p.cpu_offload_layers } else { 0 };
    }
    let i = |x: u64| Some(x as i64);
    let wire = ScenarioWire {
        name: Some(format!("published dev_row {}", r.dev_row)),
        source: Some(r.source.clone()),
        model: Some(model.to_string()),
        system: Some(system.to_string()),
        gpus: i(n),
        parallelism: ParallelWire {
            tp: i(tp),
            pp: i(pp),
            cp: i(cp),
            vp: i(vp),
            ep: i(if moe { ep } else { 1 }),
            zero: Some(match (&lora, fsdp > 0) {
                (_, true) => 3,
                (Some(l), false) if !l.distributed_optimizer => 0,
                (_, false) => 1,
            }),
            sp: lora.as_ref().map(|l| l.sequence_parallel && tp > 1),
            ..Default::default()
        },
        workload: WorkloadWire {
            mode: Some("train".into()),
            micro_batch: i(mbs),
            global_batch: i(gbs),
            seq: i(seq),
            precision: Some(precision.into()),
            fp8_recipe: fp8_recipe.map(str::to_string),
            recompute: Some(if mem.recompute_modules.is_empty() { "none" } else { "selective" }.into()),
            recompute_modules: (!mem.recompute_modules.is_empty()).then(|| mem.recompute_modules.iter().map(|m| m.to_string()).collect()),
            grad_reduce_dtype: mem.grad_reduce_dtype.map(str::to_string),
            fp8_param_gather: mem.fp8_param_gather.then_some(true),
            cpu_offload_layers: (mem.cpu_offload_layers > 0).then_some(mem.cpu_offload_layers as i64),
            cross_entropy_fusion: mem.cross_entropy_fusion.then_some(true),
            stack: Some("megatron".into()),
            routing_imbalance: Some(1.0),
            lora_rank: lora.as_ref().map(|l| l.rank),
            lora_targets: lora.as_ref().map(|l| l.targets.iter().map(|t| t.to_string()).collect()),
            moe_dispatcher: moe_dispatcher.map(str::to_string),
            moe_flex_backend: moe_flex_backend.map(str::to_string),
            moe_capacity_factor: tokendrop.then_some(TOKENDROP_CAPACITY_FACTOR),
            moe_pad_to_capacity: tokendrop.then_some(true),
            mtp_layers: mtp.then_some(1),
            packed_doc_len,
            ..Default::default()
        },
        // Userbuffers' TP overlap needs sequence parallelism, which some LoRA recipes turn off;
        // the NVFP4 recipes turn it off (`nvfp4_tp_comm_overlap`).
        options: OptionsWire {
            tp_comm_overlap: Some(tp > 1 && lora.as_ref().is_none_or(|l| l.tp_overlap) && (precision != "fp4" || NVFP4_TP_COMM_OVERLAP)),
            dp_overlap: None,
            cuda_graphs: cuda_graphs.map(str::to_string),
            moe_ep_overlap: moe_ep_overlap.then_some(true),
            // The MoE perf recipes set moe_shared_expert_overlap = False (RECIPE_DEFAULTS `moe_ep_overlap`).
            moe_shared_expert_overlap: None,
        },
        ..Default::default()
    };
    let describe = format!(
        "{} {}{} {} {} {n} GPUs tp{tp} pp{pp} cp{cp} vp{} ep{} fsdp{} mbs{mbs} gbs{gbs} seq{seq} {}",
        system,
        model,
        if mtp { "+mtp" } else { "" },
        r.container,
        r.task,
        if vp > 1 { vp.to_string() } else { "-".into() },
        if moe { ep.to_string() } else { "-".into() },
        if fsdp > 0 { fsdp.to_string() } else { "-".into() },
        r.precision.chars().take(12).collect::<String>(),
    );
    let case = Case {
        id: r.dev_row.clone(),
        split: r.split.clone(),
        system: system.to_string(),
        moe,
        precision: prec_slice.to_string(),
        recipe: recipe.to_string(),
        gpus: n,
        model: model.to_string(),
        describe,
        measured,
        notes,
    };
    Ok(Mapped { wire, case })
}

/// What a published row's recipe keeps in memory (RECIPE_DEFAULTS `grad_reduce_dtype`,
/// `fp8_param_gather`, `cross_entropy_fusion`, `recompute`, `cpu_offload`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MemoryRecipe {
    pub grad_reduce_dtype: Option<&'static str>,
    pub fp8_param_gather: bool,
    /// Megatron `recompute_modules` under selective recompute; empty: no recompute.
    pub recompute_modules: Vec<&'static str>,
    pub cpu_offload_layers: u32,
    pub cross_entropy_fusion: bool,
}

/// The memory options of the recipe a row ran: Megatron-Bridge 0.6.2's perf recipes
/// (`perf_recipes/_common.py` `_benchmark_common` and `_perf_precision`: `grad_reduce_in_fp32 =
/// False`, and `cross_entropy_fusion_impl = "te"` over `models/gpt_provider.py`'s
/// `cross_entropy_loss_fusion = True`; `training/mixed_precision.py`: `fp8_param_gather = True` in the FP8 current-scaling,
/// MXFP8 and delayed recipes, `fp4_param_gather = True` in NVFP4; `perf_recipes/deepseek/*/
/// deepseek_v3.py`: selective recompute of the modules below; `perf_recipes/llama/{gb200,gb300}/
/// llama3.py`: the Megatron-FSDP Llama-3 70B configs offload activations). NeMo 25.x rows ran NeMo
/// 2's perf scripts, which set the same gradient dtype and FP8 parameter gather (from memory);
/// the NeMo 24.07 rows (NeMo 1 launcher) keep Megatron's defaults. The 0.6.2 recompute and
/// offload choices are applied to earlier releases' rows of the same model, system and precision
/// (their own recipes are not in a published wheel).
pub fn memory_recipe(container: &str, family: &str, system: &str, precision: &str, recipe: &str, fsdp: bool, lora: bool) -> MemoryRecipe {
    let mut m = MemoryRecipe::default();
    let Some(release) = nemo_release(container) else { return m };
    if release < (25, 0) {
        return m;
    }
    m.grad_reduce_dtype = Some("bf16");
    m.cross_entropy_fusion = true;
    m.fp8_param_gather = matches!(precision, "fp8" | "fp4") && !lora;
    let mxfp8 = recipe.starts_with("mxfp8");
    m.recompute_modules = match (family, system, precision) {
        ("deepseek", "gb300-nvl72", "bf16") => vec!["moe_act"],
        // The full-iteration MXFP8 config (no recompute, `moe_paged_stash`) lands in 26.06, as its
        // graphs; before, the GB300 rows run the layout of the FP8-CS config (PP 2 VP 8 EP 32 MBS 2,
        // `mla_up_proj`: `deepseek_v3_pretrain_256gpu_gb300_fp8cs_config`).
        ("deepseek", "gb300-nvl72", "fp8") if mxfp8 && release >= (26, 6) => vec![],
        ("deepseek", "gb200-nvl72", "fp8") if !mxfp8 => vec!["mlp"],
        ("deepseek", "dgx-b200", "fp4") => vec!["mla_up_proj", "layernorm", "moe_act"],
        ("deepseek", "gb300-nvl72" | "gb200-nvl72" | "dgx-b200" | "dgx-b300", _) => vec!["mla_up_proj"],
        // Every H100 config (`perf_recipes/deepseek/h100/deepseek_v3.py`, TP 2 PP 8 VP 4 or 2, EP 64):
        // `mlp` recomputes the three dense layers' FFN (Megatron ignores it on MoE layers).
        ("deepseek", "dgx-h100", _) => vec!["mla_up_proj", "mlp"],
        _ => vec![],
    };
    m.cpu_offload_layers = match (family, system, precision, fsdp) {
        ("llama3", "gb200-nvl72", "fp8", true) => 40,
        ("llama3", "gb200-nvl72", "bf16", true) => 20,
        ("llama3", "gb300-nvl72", "fp8", true) => 20,
        ("llama3", "gb300-nvl72", "bf16", true) => 30,
        _ => 0,
    };
    m
}

/// Mean tokens of one SQuAD v1.1 training example as the fine-tuning recipes feed it, the
/// document length of the published SFT and LoRA rows' packed sequences (`workload.packed_doc_len`).
/// The recipes: Megatron-Bridge 0.6.2 `recipes/common.py` `_sft_common` / `_peft_common` train on
/// `default_squad_config` (`recipes/utils/dataset_utils.py`: HF `squad`, offline packing with
/// `packed_sequence_size = seq_length`, `pad_to_max_length`), and the perf recipes
/// (`perf_recipes/llama/<gpu>/llama3.py` `llama3_70b_{sft,peft}_*`) keep it; the NeMo 24.07 page
/// says "SQuAD v1.1 packed to 4096 tokens". The length, from memory and to verify by tokenizing
/// the set: a SQuAD v1.1 paragraph averages about 140 tokens, a question about 11 and an answer
/// about 3 (Rajpurkar et al. 2016), about 1.2-1.3 Llama tokens per such token, plus the prompt's
/// "Context: / Question: / Answer:" words: about 190. Not fitted; the published rows' FLOP counts
/// do not say it (NVIDIA counts the SFT rows at full-sequence attention and the LoRA rows without
/// attention). Attention then does about 190 / 4096 of full-sequence causal attention's FLOPs per
/// token, at the lower level a 190-token causal call reaches (`cost::fused_short_causal_factor`,
/// measured). Sensitivity (predict, Llama-2 7B SFT on 8 H100, row 139's layout): 17,928 / 17,942 /
/// 17,819 tokens/s/GPU at 150 / 190 / 400-token documents, 15,916 unpacked.
pub const SQUAD_PACKED_DOC_TOKENS: u64 = 190;

/// The expert capacity factor of the published "tokendrop" rows, with each expert's input padded
/// to its capacity: Megatron-Bridge 0.6.2 `training/utils/moe_token_drop.py` `apply_moe_token_drop`
/// (defaults `moe_expert_capacity_factor = 1.0`, `moe_pad_expert_input_to_capacity = True`; it
/// asserts the alltoall dispatcher), which the perf scripts' token-drop option calls (from memory:
/// the scripts are not in the wheel). Padded to capacity, every expert runs capacity tokens whatever
/// the routing, and the dispatcher needs no host sync.
pub const TOKENDROP_CAPACITY_FACTOR: f64 = 1.0;

/// Whether the NVFP4 rows overlap their TP communication (TE userbuffers): no. Megatron-Bridge
/// 0.6.2's `perf_recipes/llama/{b200,gb200}/llama3.py` `llama3_70b_pretrain_64gpu_{b200,gb200}_nvfp4_config`
/// (TP 2, sequence parallel, the only NVFP4 layouts with TP > 1 in the perf recipes; the published
/// GB200 NVFP4 rows run this layout) set `cfg.comm_overlap.tp_comm_overlap = False`, where the
/// FP8-CS / MXFP8 configs of the same layout keep the base recipe's `tp_comm_overlap=True` with
/// `userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192`. The TP all-gathers and reduce-scatters then
/// run on the compute stream between the GEMMs (RECIPE_DEFAULTS `tp_comm_overlap`).
pub const NVFP4_TP_COMM_OVERLAP: bool = false;

/// The LoRA adapters of a published LoRA row, by release, and where they come from.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraRecipe {
    pub rank: i64,
    pub targets: Vec<&'static str>,
    /// Megatron's distributed optimizer (over the adapters' states): zero 1 instead of 0.
    pub distributed_optimizer: bool,
    /// Userbuffers' TP communication overlap when tp > 1.
    pub tp_overlap: bool,
    /// Sequence parallelism when tp > 1.
    pub sequence_parallel: bool,
    pub source: &'static str,
}

/// The LoRA recipe a published LoRA row ran (the pages state only "LoRA"):
/// - Megatron-Bridge perf releases (NeMo 25.x/26.x), Llama-3 70B: the perf recipes
///   `llama3_70b_peft_8gpu_{h100,b200,b300,gb200,gb300}_{fp8cs,fp8mx}_config` (megatron-bridge
///   0.6.2 wheel, `perf_recipes/llama/<gpu>/llama3.py`, whose layouts are the published rows'
///   own: GB300 PP 2 VP 20, GB200 FP8-CS PP 2 / MXFP8 PP 4 VP 20, H100 TP 2 PP 4 VP 20) start from
///   `llama3_70b_peft_config` (`peft.dim = 16`, alpha 32) and set `peft.target_modules =
///   ["linear_qkv"]`, `use_distributed_optimizer = True`, and on H100 (TP 2)
///   `sequence_parallel = True` with `CommOverlapConfig(tp_comm_overlap=True)`; the Blackwell
///   configs run TP 1 with `tp_comm_overlap=False`. The dataset is `_peft_common`'s SQuAD with
///   offline packing (`recipes/common.py`), padded to the packed size (`pad_to_max_length`).
/// - Llama 3.1 405B (no perf recipe): the base recipe `llama31_405b_peft_32gpu_h100_bf16_config`
///   (`recipes/llama/h100/llama3.py`, TP 4 PP 8 VP 8): `dim = 16`, alpha 32, `target_modules =
///   ["linear_qkv"]`, `use_distributed_optimizer = False`, `sequence_parallel = True` with
///   `CommOverlapConfig(tp_comm_overlap=False)`.
/// - Other models on Megatron-Bridge releases: `LoRA`'s defaults, `dim = 32` on `target_modules =
///   ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]` (`peft/lora.py`), no distributed
///   optimizer and sequence parallelism off (megatron-bridge 0.3.1 `recipes/llama/llama3.py`).
/// - NeMo 24.07 (NeMo 1 launcher): `peft_config.get_target_modules` defaults to
///   `("attention_qkv",)` (nemo-toolkit 2.0.0 on PyPI: `collections/nlp/parts/peft_config.py`),
///   with `adapter_dim = 32` (`megatron_gpt_finetuning_config.yaml`, from memory).
pub fn lora_recipe(container: &str, model: &str) -> LoraRecipe {
    if container == "NeMo 24.07" {
        return LoraRecipe {
            rank: 32,
            targets: vec!["linear_qkv"],
            distributed_optimizer: false,
            tp_overlap: false,
            sequence_parallel: false,
            source: "NeMo 1 default attention_qkv, adapter_dim 32",
        };
    }
    if model == "llama-3.1-405b" {
        return LoraRecipe {
            rank: 16,
            targets: vec!["linear_qkv"],
            distributed_optimizer: false,
            tp_overlap: false,
            sequence_parallel: true,
            source: "Megatron-Bridge 0.6.2 recipes/llama/h100/llama3.py llama31_405b_peft_32gpu_h100_bf16_config: dim 16 on linear_qkv, no distributed optimizer, sequence parallel without TP comm overlap",
        };
    }
    if model == "llama-3-70b" {
        LoraRecipe {
            rank: 16,
            targets: vec!["linear_qkv"],
            distributed_optimizer: true,
            tp_overlap: true,
            sequence_parallel: true,
            source: "Megatron-Bridge 0.6.2 perf recipes llama3_70b_peft_8gpu_*: dim 16 on linear_qkv, distributed optimizer",
        }
    } else {
        LoraRecipe {
            rank: 32,
            targets: vec!["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"],
            distributed_optimizer: false,
            tp_overlap: false,
            sequence_parallel: false,
            source: "Megatron-Bridge LoRA defaults: dim 32, all linear layers",
        }
    }
}

/// A row's task as the mapping reads it: `SFT` (supervised fine-tuning: `SFT`, `Fine-Tuning`,
/// `Finetuning`), `LoRA` (`LoRA`, `PEFT`), else pre-training (`Pre-Training`, `Pretraining`, ...).
/// The dev set prints `SFT` and `LoRA`; the other spellings are the same tables' other forms, from
/// memory.
pub fn task_kind(task: &str) -> &'static str {
    let t = task.to_ascii_lowercase();
    if t.contains("lora") || t.contains("peft") {
        "LoRA"
    } else if t.contains("sft") || t.contains("fine") {
        "SFT"
    } else {
        "Pre-Training"
    }
}

/// `NeMo 26.06.01` -> `(26, 6)`; `None` for a container that is not a NeMo release.
fn nemo_release(container: &str) -> Option<(u32, u32)> {
    let mut parts = container.strip_prefix("NeMo ")?.split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// A row's label for messages about rows that were not scored.
pub fn describe_row(r: &RowWire) -> String {
    format!("{} {} {} {} {} GPUs", r.system, r.model, r.container, r.task, r.num_gpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_names_normalize() {
        assert_eq!(norm_model("LLAMA3-70B"), ("LLAMA3_70B".into(), String::new()));
        assert_eq!(norm_model("DeepSeekV3 (w/o MTP)"), ("DEEPSEEKV3".into(), "w/o MTP".into()));
        assert_eq!(norm_model("Qwen3_30B_a3B"), ("QWEN3_30B_A3B".into(), String::new()));
        assert_eq!(nemo_release("NeMo 26.06.01"), Some((26, 6)));
        assert_eq!(nemo_release("NeMo 25.11"), Some((25, 11)));
        assert_eq!(nemo_release("archive"), None);
        // An unqualified FP8 reads as its release's default recipe.
        let fp8 = |container: &str| precision_of(&RowWire { precision: "FP8".into(), container: container.into(), ..Default::default() }).unwrap().1;
        assert!(fp8("NeMo 24.07").starts_with("fp8-delayed"));
        assert!(fp8("NeMo 24.12").contains("NeMo 2.0"));
        assert!(fp8("NeMo 25.02").contains("NeMo 2.0"));
        assert!(fp8("NeMo 25.04").starts_with("fp8-current"));
    }

    #[test]
    fn compact_names_drop_case_and_separators_only() {
        assert_eq!(compact_name("Llama3.1-405B"), "LLAMA31405B");
        assert_eq!(compact_name("LLAMA31_405B"), "LLAMA31405B");
        assert_eq!(compact_name("GPT-OSS 120B"), "GPTOSS120B");
        assert_eq!(compact_name("Nemotron-H 56B"), compact_name("NemotronH_56B"));
        // Digits stay: Llama 3 8B and Llama 3.1 8B differ, as do Qwen3 30B-A3B and 235B-A22B.
        assert_ne!(compact_name("LLAMA3_8B"), compact_name("LLAMA31_8B"));
        assert_ne!(compact_name("NEMOTRON_8B"), compact_name("NEMOTRONH_8B"));
        // The parenthetical variant is not part of the name (norm_model keeps it apart).
        assert_eq!(norm_model("QWEN3_235B_A22B (tokendrop)"), ("QWEN3_235B_A22B".into(), "tokendrop".into()));
        assert_eq!(catalog_model("QWEN3_235B_A22B (tokendrop)").map(|m| m.0), Ok("qwen3-235b-a22b"));
    }

    #[test]
    fn system_spellings_map_to_their_nodes() {
        assert_eq!(catalog_system("DGX-GB200"), Some("gb200-nvl72"));
        assert_eq!(catalog_system("DGX GB300"), Some("gb300-nvl72"));
        assert_eq!(catalog_system("GB200 NVL72"), Some("gb200-nvl72"));
        assert_eq!(catalog_system("B200"), Some("dgx-b200"));
        assert_eq!(catalog_system("DGX-H200"), Some("hgx-h200"));
        assert_eq!(catalog_system("DGX-H100"), Some("dgx-h100"));
        assert_eq!(catalog_system("MI300X"), None);
    }

    #[test]
    fn task_spellings_read_as_their_task() {
        for (t, k) in [
            ("SFT", "SFT"),
            ("Fine-Tuning", "SFT"),
            ("LoRA", "LoRA"),
            ("PEFT (LoRA)", "LoRA"),
            ("Pre-Training", "Pre-Training"),
            ("Pretraining", "Pre-Training"),
        ] {
            assert_eq!(task_kind(t), k, "{t}");
        }
    }

    #[test]
    fn unexpressible_models_are_refused_with_their_reason() {
        let e = catalog_model("Nemotron3_Super").unwrap_err();
        assert!(e.contains("latent MoE"), "{e}");
        let e = catalog_model("Qwen3-VL-30B-A3B").unwrap_err();
        assert!(e.contains("vision"), "{e}");
        // A known model is never caught by a refusal prefix.
        assert!(catalog_model("Qwen3_30B_a3B").is_ok());
    }
}
