//! The Megatron-Bridge perf recipes of the published models the dev set does not hold (wt-mbmap,
//! 2026-11-25): what each recipe sets that a published row does not print (selective recompute,
//! CUDA graphs, the MoE dispatcher, activation offload), read from the recipes themselves.
//!
//! Source: the megatron-bridge 0.6.2 wheel (PyPI, 2026-09), `megatron/bridge/perf_recipes/<family>/
//! <gpu>/*.py`, summarized statically by `scripts/extract_perf_recipes.py` (Python's `ast`; nothing
//! imported or run; each function's own assignments over the perf recipe it starts from), whose
//! output for the whole folder is `tests/data/published/megatron_bridge_0.6.2_perf_recipes.csv`.
//! One entry per `<model>_pretrain_<n>gpu_<gpu>_<precision>_config` of the models below (the
//! `_dev`, `_large_scale`, `_ncclep`, `_partial_cg`, `_paged_stash` and `_full_iteration` variants
//! are alternatives beside the benchmark config and are left out; VR200 and R100 have no catalog
//! system). The readings:
//! - `recompute_modules`: `recompute_modules` under `recompute_granularity = "selective"`, else none.
//! - `cuda_graphs` (gpuplan's `options.cuda_graphs`): `cuda_graph_impl = "full_iteration"` -> full;
//!   `"transformer_engine"` (scopes attn / mamba / moe_router / moe_preprocess) and `"local"` (per-layer
//!   graphs, GPT-OSS-20B) -> partial, gpuplan's attention-and-router graphs; unset or `"none"` -> none.
//! - `dispatcher`: `alltoall`, or the flex dispatcher's backend (`moe_token_dispatcher_type = "flex"`
//!   with `moe_flex_dispatcher_backend`; Nemotron 3 Nano's base recipe sets flex,
//!   `recipes/nemotronh/h100/nemotron_3_nano.py`); unset is the model bridge's alltoall
//!   (`models/{gpt_oss,kimi,qwen,nemotronh}/*_bridge.py`).
//! - `cpu_offload_layers`: `cpu_offloading_num_layers` where `cpu_offloading = True` (Llama 3.1 405B
//!   BF16 Megatron-FSDP on B300 and GB300).
//! - `ep_overlap`: `comm_overlap.overlap_moe_expert_parallel_comm = True`, assigned directly, through
//!   `cfg.comm_overlap = CommOverlapConfig(overlap_moe_expert_parallel_comm=True, ...)` (the Qwen3-235B
//!   H100 configs: EP 32 over four nodes, alltoall, `delay_wgrad_compute = True`) or by a helper
//!   (`_enable_hybridep_full_iteration_mxfp8`, `_apply_gpt_oss_120b_full_iter_fp8mx_configs`); GPT-OSS-120B's
//!   GB200 BF16 config sets it beside alltoall and no graphs (wt-mbmoe, 2026-11-25).
//!
//! Nemotron 3 Nano's GB200/GB300 MXFP8 configs are built by `_build_nemotron_3_nano_<gpu>_mxfp8`
//! (read by hand: HybridEP, TE graphs of attn, mamba, moe_router and moe_preprocess, no recompute).

/// One perf recipe's settings (see the module doc for the readings).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PerfRecipe {
    /// Catalog model.
    pub model: &'static str,
    /// Catalog system.
    pub system: &'static str,
    /// `bf16`, `fp8cs` (current scaling), `fp8sc` (blockwise), `fp8mx` (MXFP8) or `nvfp4`.
    pub precision: &'static str,
    /// The recipe's GPU count (its name's `<n>gpu`).
    pub gpus: u64,
    pub recompute_modules: &'static [&'static str],
    /// `none`, `partial` or `full` (`options.cuda_graphs`).
    pub cuda_graphs: &'static str,
    /// `alltoall`, `hybridep` or `deepep` (the last two: the flex dispatcher's backend).
    pub dispatcher: &'static str,
    pub cpu_offload_layers: u32,
    /// `comm_overlap.overlap_moe_expert_parallel_comm = True` (Megatron-Core's EP all-to-all overlap
    /// in combined 1F1B, `options.moe_ep_overlap`), set by the recipe, by the helper it calls, or by
    /// the `CommOverlapConfig(...)` it assigns.
    pub ep_overlap: bool,
    /// The recipe function.
    pub function: &'static str,
}

#[allow(clippy::too_many_arguments)]
const fn pr(
    model: &'static str,
    system: &'static str,
    precision: &'static str,
    gpus: u64,
    recompute_modules: &'static [&'static str],
    cuda_graphs: &'static str,
    dispatcher: &'static str,
    cpu_offload_layers: u32,
    ep_overlap: bool,
    function: &'static str,
) -> PerfRecipe {
    PerfRecipe { model, system, precision, gpus, recompute_modules, cuda_graphs, dispatcher, cpu_offload_layers, ep_overlap, function }
}

/// The perf recipes (megatron-bridge 0.6.2) of Llama 3.1 405B, Qwen3-235B-A22B, GPT-OSS-120B and
/// 20B, Kimi K2, Nemotron 3 Nano and Nemotron-H 56B.
pub const PERF_RECIPES: &[PerfRecipe] = &[
    pr("gpt-oss-120b", "dgx-b200", "bf16", 64, &["layernorm", "moe_act"], "none", "alltoall", 0, false, "gpt_oss_120b_pretrain_64gpu_b200_bf16_config"),
    pr("gpt-oss-120b", "dgx-b200", "fp8mx", 64, &["layernorm", "moe_act"], "none", "alltoall", 0, false, "gpt_oss_120b_pretrain_64gpu_b200_fp8mx_config"),
    pr("gpt-oss-120b", "dgx-b300", "bf16", 64, &[], "partial", "hybridep", 0, false, "gpt_oss_120b_pretrain_64gpu_b300_bf16_config"),
    pr("gpt-oss-120b", "dgx-b300", "fp8mx", 64, &[], "partial", "hybridep", 0, false, "gpt_oss_120b_pretrain_64gpu_b300_fp8mx_config"),
    pr("gpt-oss-120b", "gb200-nvl72", "bf16", 64, &["layernorm", "moe_act"], "none", "alltoall", 0, true, "gpt_oss_120b_pretrain_64gpu_gb200_bf16_config"),
    pr("gpt-oss-120b", "gb200-nvl72", "fp8mx", 64, &[], "full", "hybridep", 0, true, "gpt_oss_120b_pretrain_64gpu_gb200_fp8mx_config"),
    pr("gpt-oss-120b", "gb300-nvl72", "bf16", 64, &[], "partial", "alltoall", 0, false, "gpt_oss_120b_pretrain_64gpu_gb300_bf16_config"),
    pr("gpt-oss-120b", "gb300-nvl72", "fp8mx", 64, &[], "full", "hybridep", 0, true, "gpt_oss_120b_pretrain_64gpu_gb300_fp8mx_config"),
    pr("gpt-oss-120b", "dgx-h100", "bf16", 64, &["layernorm", "moe_act"], "none", "alltoall", 0, false, "gpt_oss_120b_pretrain_64gpu_h100_bf16_config"),
    pr("gpt-oss-120b", "dgx-h100", "fp8cs", 64, &["layernorm", "moe_act"], "none", "alltoall", 0, false, "gpt_oss_120b_pretrain_64gpu_h100_fp8cs_config"),
    pr("gpt-oss-20b", "gb200-nvl72", "fp8mx", 512, &[], "partial", "hybridep", 0, false, "gpt_oss_20b_pretrain_512gpu_gb200_fp8mx_config"),
    pr("gpt-oss-20b", "gb300-nvl72", "fp8mx", 512, &[], "partial", "hybridep", 0, false, "gpt_oss_20b_pretrain_512gpu_gb300_fp8mx_config"),
    pr("gpt-oss-20b", "dgx-b300", "fp8mx", 64, &[], "partial", "hybridep", 0, false, "gpt_oss_20b_pretrain_64gpu_b300_fp8mx_config"),
    pr("gpt-oss-20b", "dgx-b300", "nvfp4", 64, &[], "partial", "hybridep", 0, false, "gpt_oss_20b_pretrain_64gpu_b300_nvfp4_config"),
    pr("gpt-oss-20b", "gb200-nvl72", "nvfp4", 72, &[], "partial", "hybridep", 0, false, "gpt_oss_20b_pretrain_72gpu_gb200_nvfp4_config"),
    pr("gpt-oss-20b", "gb300-nvl72", "nvfp4", 72, &[], "partial", "hybridep", 0, false, "gpt_oss_20b_pretrain_72gpu_gb300_nvfp4_config"),
    pr("gpt-oss-20b", "dgx-b300", "fp8mx", 8, &[], "partial", "hybridep", 0, false, "gpt_oss_20b_pretrain_8gpu_b300_fp8mx_config"),
    pr("gpt-oss-20b", "dgx-b300", "nvfp4", 8, &[], "partial", "hybridep", 0, false, "gpt_oss_20b_pretrain_8gpu_b300_nvfp4_config"),
    pr("gpt-oss-20b", "gb200-nvl72", "nvfp4", 8, &[], "partial", "hybridep", 0, false, "gpt_oss_20b_pretrain_8gpu_gb200_nvfp4_config"),
    pr("gpt-oss-20b", "gb300-nvl72", "nvfp4", 8, &[], "partial", "hybridep", 0, false, "gpt_oss_20b_pretrain_8gpu_gb300_nvfp4_config"),
    pr("kimi-k2", "dgx-h100", "bf16", 1024, &["mla_up_proj", "mlp"], "none", "alltoall", 0, false, "kimi_k2_pretrain_1024gpu_h100_bf16_config"),
    pr("kimi-k2", "dgx-h100", "fp8cs", 1024, &["mla_up_proj", "mlp"], "none", "alltoall", 0, false, "kimi_k2_pretrain_1024gpu_h100_fp8cs_config"),
    pr("kimi-k2", "dgx-h100", "fp8sc", 1024, &["mla_up_proj", "mlp"], "none", "alltoall", 0, false, "kimi_k2_pretrain_1024gpu_h100_fp8sc_config"),
    pr("kimi-k2", "dgx-b200", "bf16", 256, &["mla_up_proj"], "none", "alltoall", 0, false, "kimi_k2_pretrain_256gpu_b200_bf16_config"),
    pr("kimi-k2", "dgx-b200", "fp8cs", 256, &["mla_up_proj"], "none", "alltoall", 0, false, "kimi_k2_pretrain_256gpu_b200_fp8cs_config"),
    pr("kimi-k2", "dgx-b200", "fp8mx", 256, &["mla_up_proj"], "none", "alltoall", 0, false, "kimi_k2_pretrain_256gpu_b200_fp8mx_config"),
    pr("kimi-k2", "dgx-b300", "bf16", 256, &["mla_up_proj"], "none", "alltoall", 0, false, "kimi_k2_pretrain_256gpu_b300_bf16_config"),
    pr("kimi-k2", "dgx-b300", "fp8cs", 256, &["mla_up_proj"], "none", "alltoall", 0, false, "kimi_k2_pretrain_256gpu_b300_fp8cs_config"),
    pr("kimi-k2", "dgx-b300", "fp8mx", 256, &["mla_up_proj"], "none", "alltoall", 0, false, "kimi_k2_pretrain_256gpu_b300_fp8mx_config"),
    pr("kimi-k2", "gb200-nvl72", "bf16", 256, &["mla_up_proj"], "partial", "hybridep", 0, false, "kimi_k2_pretrain_256gpu_gb200_bf16_config"),
    pr("kimi-k2", "gb200-nvl72", "fp8cs", 256, &["mla_up_proj"], "partial", "hybridep", 0, false, "kimi_k2_pretrain_256gpu_gb200_fp8cs_config"),
    pr("kimi-k2", "gb200-nvl72", "fp8mx", 256, &["mla_up_proj"], "partial", "hybridep", 0, false, "kimi_k2_pretrain_256gpu_gb200_fp8mx_config"),
    pr("kimi-k2", "gb300-nvl72", "bf16", 256, &["mla_up_proj"], "none", "hybridep", 0, false, "kimi_k2_pretrain_256gpu_gb300_bf16_config"),
    pr("kimi-k2", "gb300-nvl72", "fp8cs", 256, &["mla_up_proj"], "none", "hybridep", 0, false, "kimi_k2_pretrain_256gpu_gb300_fp8cs_config"),
    pr("kimi-k2", "gb300-nvl72", "fp8mx", 256, &["mla_up_proj"], "none", "hybridep", 0, false, "kimi_k2_pretrain_256gpu_gb300_fp8mx_config"),
    pr("kimi-k2", "gb300-nvl72", "nvfp4", 256, &["mla_up_proj"], "none", "hybridep", 0, false, "kimi_k2_pretrain_256gpu_gb300_nvfp4_config"),
    pr("llama-3.1-405b", "dgx-h100", "bf16", 1024, &[], "none", "alltoall", 0, false, "llama31_405b_pretrain_1024gpu_h100_bf16_config"),
    pr("llama-3.1-405b", "dgx-h100", "fp8cs", 1024, &[], "none", "alltoall", 0, false, "llama31_405b_pretrain_1024gpu_h100_fp8cs_config"),
    pr("llama-3.1-405b", "dgx-b200", "bf16", 128, &[], "none", "alltoall", 0, false, "llama31_405b_pretrain_128gpu_b200_bf16_config"),
    pr("llama-3.1-405b", "dgx-b200", "fp8cs", 128, &[], "none", "alltoall", 0, false, "llama31_405b_pretrain_128gpu_b200_fp8cs_config"),
    pr("llama-3.1-405b", "dgx-b200", "fp8mx", 128, &[], "none", "alltoall", 0, false, "llama31_405b_pretrain_128gpu_b200_fp8mx_config"),
    pr("llama-3.1-405b", "dgx-b200", "nvfp4", 128, &[], "none", "alltoall", 0, false, "llama31_405b_pretrain_128gpu_b200_nvfp4_config"),
    pr("llama-3.1-405b", "dgx-b300", "bf16", 128, &[], "none", "alltoall", 40, false, "llama31_405b_pretrain_128gpu_b300_bf16_config"),
    pr("llama-3.1-405b", "dgx-b300", "fp8cs", 128, &[], "none", "alltoall", 0, false, "llama31_405b_pretrain_128gpu_b300_fp8cs_config"),
    pr("llama-3.1-405b", "dgx-b300", "fp8mx", 128, &[], "none", "alltoall", 0, false, "llama31_405b_pretrain_128gpu_b300_fp8mx_config"),
    pr("llama-3.1-405b", "dgx-b300", "nvfp4", 128, &[], "none", "alltoall", 0, false, "llama31_405b_pretrain_128gpu_b300_nvfp4_config"),
    pr("llama-3.1-405b", "gb200-nvl72", "bf16", 128, &[], "none", "alltoall", 0, false, "llama31_405b_pretrain_128gpu_gb200_bf16_config"),
    pr("llama-3.1-405b", "gb200-nvl72", "fp8cs", 128, &[], "none", "alltoall", 0, false, "llama31_405b_pretrain_128gpu_gb200_fp8cs_config"),
    pr("llama-3.1-405b", "gb200-nvl72", "fp8mx", 128, &[], "none", "alltoall", 0, false, "llama31_405b_pretrain_128gpu_gb200_fp8mx_config"),
    pr("llama-3.1-405b", "gb200-nvl72", "nvfp4", 128, &[], "none", "alltoall", 0, false, "llama31_405b_pretrain_128gpu_gb200_nvfp4_config"),
    pr("llama-3.1-405b", "gb300-nvl72", "bf16", 128, &[], "none", "alltoall", 40, false, "llama31_405b_pretrain_128gpu_gb300_bf16_config"),
    pr("llama-3.1-405b", "gb300-nvl72", "fp8cs", 128, &[], "none", "alltoall", 0, false, "llama31_405b_pretrain_128gpu_gb300_fp8cs_config"),
    pr("llama-3.1-405b", "gb300-nvl72", "fp8mx", 128, &[], "none", "alltoall", 0, false, "llama31_405b_pretrain_128gpu_gb300_fp8mx_config"),
    pr("llama-3.1-405b", "gb300-nvl72", "nvfp4", 128, &[], "none", "alltoall", 0, false, "llama31_405b_pretrain_128gpu_gb300_nvfp4_config"),
    pr("llama-3.1-405b", "dgx-b200", "nvfp4", 256, &[], "none", "alltoall", 0, false, "llama31_405b_pretrain_256gpu_b200_nvfp4_config"),
    pr("llama-3.1-405b", "dgx-b300", "bf16", 256, &[], "none", "alltoall", 40, false, "llama31_405b_pretrain_256gpu_b300_bf16_config"),
    pr("llama-3.1-405b", "gb200-nvl72", "bf16", 256, &[], "none", "alltoall", 0, false, "llama31_405b_pretrain_256gpu_gb200_bf16_config"),
    pr("llama-3.1-405b", "gb200-nvl72", "fp8cs", 256, &[], "none", "alltoall", 0, false, "llama31_405b_pretrain_256gpu_gb200_fp8cs_config"),
    pr("llama-3.1-405b", "gb200-nvl72", "fp8mx", 256, &[], "none", "alltoall", 0, false, "llama31_405b_pretrain_256gpu_gb200_fp8mx_config"),
    pr("llama-3.1-405b", "gb200-nvl72", "nvfp4", 256, &[], "none", "alltoall", 0, false, "llama31_405b_pretrain_256gpu_gb200_nvfp4_config"),
    pr("llama-3.1-405b", "gb300-nvl72", "bf16", 256, &[], "none", "alltoall", 40, false, "llama31_405b_pretrain_256gpu_gb300_bf16_config"),
    pr("llama-3.1-405b", "gb300-nvl72", "fp8cs", 256, &[], "none", "alltoall", 0, false, "llama31_405b_pretrain_256gpu_gb300_fp8cs_config"),
    pr("llama-3.1-405b", "gb300-nvl72", "fp8mx", 256, &[], "none", "alltoall", 0, false, "llama31_405b_pretrain_256gpu_gb300_fp8mx_config"),
    pr("llama-3.1-405b", "gb300-nvl72", "nvfp4", 256, &[], "none", "alltoall", 0, false, "llama31_405b_pretrain_256gpu_gb300_nvfp4_config"),
    pr("llama-3.1-405b", "dgx-h100", "bf16", 512, &[], "none", "alltoall", 0, false, "llama31_405b_pretrain_512gpu_h100_bf16_config"),
    pr("llama-3.1-405b", "dgx-h100", "fp8cs", 512, &[], "none", "alltoall", 0, false, "llama31_405b_pretrain_512gpu_h100_fp8cs_config"),
    pr(
        "nemotron-3-nano-30b-a3b",
        "dgx-h100",
        "bf16",
        16,
        &["moe", "layernorm"],
        "partial",
        "hybridep",
        0,
        false,
        "nemotron_3_nano_pretrain_16gpu_h100_bf16_config",
    ),
    pr(
        "nemotron-3-nano-30b-a3b",
        "dgx-h100",
        "fp8cs",
        16,
        &["moe", "layernorm", "core_attn", "moe_act"],
        "partial",
        "hybridep",
        0,
        false,
        "nemotron_3_nano_pretrain_16gpu_h100_fp8cs_config",
    ),
    pr("nemotron-3-nano-30b-a3b", "dgx-b200", "bf16", 8, &[], "partial", "hybridep", 0, false, "nemotron_3_nano_pretrain_8gpu_b200_bf16_config"),
    pr("nemotron-3-nano-30b-a3b", "dgx-b200", "fp8mx", 8, &[], "partial", "hybridep", 0, false, "nemotron_3_nano_pretrain_8gpu_b200_fp8mx_config"),
    pr("nemotron-3-nano-30b-a3b", "dgx-b200", "nvfp4", 8, &[], "partial", "hybridep", 0, false, "nemotron_3_nano_pretrain_8gpu_b200_nvfp4_config"),
    pr("nemotron-3-nano-30b-a3b", "dgx-b300", "bf16", 8, &[], "partial", "hybridep", 0, false, "nemotron_3_nano_pretrain_8gpu_b300_bf16_config"),
    pr("nemotron-3-nano-30b-a3b", "dgx-b300", "fp8mx", 8, &[], "partial", "hybridep", 0, false, "nemotron_3_nano_pretrain_8gpu_b300_fp8mx_config"),
    pr("nemotron-3-nano-30b-a3b", "dgx-b300", "nvfp4", 8, &[], "partial", "hybridep", 0, false, "nemotron_3_nano_pretrain_8gpu_b300_nvfp4_config"),
    pr("nemotron-3-nano-30b-a3b", "gb200-nvl72", "bf16", 8, &[], "partial", "hybridep", 0, false, "nemotron_3_nano_pretrain_8gpu_gb200_bf16_config"),
    pr("nemotron-3-nano-30b-a3b", "gb200-nvl72", "fp8mx", 8, &[], "partial", "hybridep", 0, false, "nemotron_3_nano_pretrain_8gpu_gb200_fp8mx_config"),
    pr("nemotron-3-nano-30b-a3b", "gb200-nvl72", "nvfp4", 8, &[], "partial", "hybridep", 0, false, "nemotron_3_nano_pretrain_8gpu_gb200_nvfp4_config"),
    pr("nemotron-3-nano-30b-a3b", "gb300-nvl72", "bf16", 8, &[], "partial", "hybridep", 0, false, "nemotron_3_nano_pretrain_8gpu_gb300_bf16_config"),
    pr("nemotron-3-nano-30b-a3b", "gb300-nvl72", "fp8mx", 8, &[], "partial", "hybridep", 0, false, "nemotron_3_nano_pretrain_8gpu_gb300_fp8mx_config"),
    pr("nemotron-3-nano-30b-a3b", "gb300-nvl72", "nvfp4", 8, &[], "partial", "hybridep", 0, false, "nemotron_3_nano_pretrain_8gpu_gb300_nvfp4_config"),
    pr("nemotron-h-56b", "dgx-b200", "bf16", 256, &[], "partial", "alltoall", 0, false, "nemotronh_56b_pretrain_256gpu_b200_bf16_config"),
    pr("nemotron-h-56b", "dgx-b200", "fp8cs", 256, &[], "partial", "alltoall", 0, false, "nemotronh_56b_pretrain_256gpu_b200_fp8cs_config"),
    pr("nemotron-h-56b", "gb300-nvl72", "bf16", 256, &[], "partial", "alltoall", 0, false, "nemotronh_56b_pretrain_256gpu_gb300_bf16_config"),
    pr("nemotron-h-56b", "gb300-nvl72", "fp8cs", 256, &[], "partial", "alltoall", 0, false, "nemotronh_56b_pretrain_256gpu_gb300_fp8cs_config"),
    pr("nemotron-h-56b", "dgx-b200", "fp8cs", 64, &[], "partial", "alltoall", 0, false, "nemotronh_56b_pretrain_64gpu_b200_fp8cs_config"),
    pr("nemotron-h-56b", "dgx-b300", "fp8cs", 64, &[], "partial", "alltoall", 0, false, "nemotronh_56b_pretrain_64gpu_b300_fp8cs_config"),
    pr("nemotron-h-56b", "gb200-nvl72", "fp8cs", 64, &[], "partial", "alltoall", 0, false, "nemotronh_56b_pretrain_64gpu_gb200_fp8cs_config"),
    pr("nemotron-h-56b", "gb300-nvl72", "fp8cs", 64, &[], "partial", "alltoall", 0, false, "nemotronh_56b_pretrain_64gpu_gb300_fp8cs_config"),
    pr("nemotron-h-56b", "dgx-h100", "fp8cs", 64, &[], "partial", "alltoall", 0, false, "nemotronh_56b_pretrain_64gpu_h100_fp8cs_config"),
    pr("qwen3-235b-a22b", "dgx-b200", "bf16", 256, &[], "none", "alltoall", 0, false, "qwen3_235b_a22b_pretrain_256gpu_b200_bf16_config"),
    pr("qwen3-235b-a22b", "dgx-b200", "fp8cs", 256, &[], "none", "alltoall", 0, false, "qwen3_235b_a22b_pretrain_256gpu_b200_fp8cs_config"),
    pr("qwen3-235b-a22b", "dgx-b200", "fp8mx", 256, &[], "full", "hybridep", 0, true, "qwen3_235b_a22b_pretrain_256gpu_b200_fp8mx_config"),
    pr("qwen3-235b-a22b", "dgx-b200", "nvfp4", 256, &[], "full", "hybridep", 0, true, "qwen3_235b_a22b_pretrain_256gpu_b200_nvfp4_config"),
    pr("qwen3-235b-a22b", "dgx-b300", "bf16", 256, &[], "none", "hybridep", 0, false, "qwen3_235b_a22b_pretrain_256gpu_b300_bf16_config"),
    pr("qwen3-235b-a22b", "dgx-b300", "fp8cs", 256, &[], "none", "hybridep", 0, false, "qwen3_235b_a22b_pretrain_256gpu_b300_fp8cs_config"),
    pr("qwen3-235b-a22b", "dgx-b300", "fp8mx", 256, &[], "full", "hybridep", 0, true, "qwen3_235b_a22b_pretrain_256gpu_b300_fp8mx_config"),
    pr("qwen3-235b-a22b", "dgx-b300", "nvfp4", 256, &[], "full", "hybridep", 0, true, "qwen3_235b_a22b_pretrain_256gpu_b300_nvfp4_config"),
    pr("qwen3-235b-a22b", "gb200-nvl72", "bf16", 256, &[], "partial", "hybridep", 0, false, "qwen3_235b_a22b_pretrain_256gpu_gb200_bf16_config"),
    pr("qwen3-235b-a22b", "gb200-nvl72", "fp8cs", 256, &[], "partial", "hybridep", 0, false, "qwen3_235b_a22b_pretrain_256gpu_gb200_fp8cs_config"),
    pr("qwen3-235b-a22b", "gb200-nvl72", "fp8mx", 256, &[], "full", "hybridep", 0, true, "qwen3_235b_a22b_pretrain_256gpu_gb200_fp8mx_config"),
    pr("qwen3-235b-a22b", "gb200-nvl72", "nvfp4", 256, &[], "full", "hybridep", 0, true, "qwen3_235b_a22b_pretrain_256gpu_gb200_nvfp4_config"),
    pr("qwen3-235b-a22b", "gb300-nvl72", "bf16", 256, &[], "partial", "hybridep", 0, false, "qwen3_235b_a22b_pretrain_256gpu_gb300_bf16_config"),
    pr("qwen3-235b-a22b", "gb300-nvl72", "fp8cs", 256, &[], "partial", "hybridep", 0, false, "qwen3_235b_a22b_pretrain_256gpu_gb300_fp8cs_config"),
    pr("qwen3-235b-a22b", "gb300-nvl72", "fp8mx", 256, &[], "full", "hybridep", 0, true, "qwen3_235b_a22b_pretrain_256gpu_gb300_fp8mx_config"),
    pr("qwen3-235b-a22b", "gb300-nvl72", "nvfp4", 256, &[], "full", "hybridep", 0, true, "qwen3_235b_a22b_pretrain_256gpu_gb300_nvfp4_config"),
    pr("qwen3-235b-a22b", "dgx-h100", "bf16", 256, &[], "none", "alltoall", 0, true, "qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config"),
    pr("qwen3-235b-a22b", "dgx-h100", "fp8cs", 256, &[], "none", "alltoall", 0, true, "qwen3_235b_a22b_pretrain_256gpu_h100_fp8cs_config"),
    pr("qwen3-235b-a22b", "dgx-b200", "bf16", 64, &[], "none", "alltoall", 0, false, "qwen3_235b_a22b_pretrain_64gpu_b200_bf16_config"),
    pr("qwen3-235b-a22b", "dgx-b200", "fp8cs", 64, &[], "none", "alltoall", 0, false, "qwen3_235b_a22b_pretrain_64gpu_b200_fp8cs_config"),
    pr("qwen3-235b-a22b", "dgx-b200", "fp8mx", 64, &[], "none", "alltoall", 0, false, "qwen3_235b_a22b_pretrain_64gpu_b200_fp8mx_config"),
    pr("qwen3-235b-a22b", "dgx-b200", "nvfp4", 64, &[], "none", "alltoall", 0, false, "qwen3_235b_a22b_pretrain_64gpu_b200_nvfp4_config"),
    pr("qwen3-235b-a22b", "dgx-b300", "bf16", 64, &[], "none", "hybridep", 0, false, "qwen3_235b_a22b_pretrain_64gpu_b300_bf16_config"),
    pr("qwen3-235b-a22b", "dgx-b300", "fp8cs", 64, &[], "none", "hybridep", 0, false, "qwen3_235b_a22b_pretrain_64gpu_b300_fp8cs_config"),
    pr("qwen3-235b-a22b", "dgx-b300", "fp8mx", 64, &[], "none", "hybridep", 0, false, "qwen3_235b_a22b_pretrain_64gpu_b300_fp8mx_config"),
    pr("qwen3-235b-a22b", "dgx-b300", "nvfp4", 64, &[], "none", "hybridep", 0, false, "qwen3_235b_a22b_pretrain_64gpu_b300_nvfp4_config"),
    pr("qwen3-235b-a22b", "gb200-nvl72", "bf16", 64, &[], "partial", "hybridep", 0, false, "qwen3_235b_a22b_pretrain_64gpu_gb200_bf16_config"),
    pr("qwen3-235b-a22b", "gb200-nvl72", "fp8cs", 64, &[], "partial", "hybridep", 0, false, "qwen3_235b_a22b_pretrain_64gpu_gb200_fp8cs_config"),
    pr("qwen3-235b-a22b", "gb200-nvl72", "fp8mx", 64, &[], "full", "hybridep", 0, true, "qwen3_235b_a22b_pretrain_64gpu_gb200_fp8mx_config"),
    pr("qwen3-235b-a22b", "gb200-nvl72", "nvfp4", 64, &[], "partial", "hybridep", 0, false, "qwen3_235b_a22b_pretrain_64gpu_gb200_nvfp4_config"),
    pr("qwen3-235b-a22b", "gb300-nvl72", "bf16", 64, &[], "partial", "hybridep", 0, false, "qwen3_235b_a22b_pretrain_64gpu_gb300_bf16_config"),
    pr("qwen3-235b-a22b", "gb300-nvl72", "fp8cs", 64, &[], "partial", "hybridep", 0, false, "qwen3_235b_a22b_pretrain_64gpu_gb300_fp8cs_config"),
    pr("qwen3-235b-a22b", "gb300-nvl72", "fp8mx", 64, &[], "full", "hybridep", 0, true, "qwen3_235b_a22b_pretrain_64gpu_gb300_fp8mx_config"),
    pr("qwen3-235b-a22b", "gb300-nvl72", "nvfp4", 64, &[], "partial", "hybridep", 0, false, "qwen3_235b_a22b_pretrain_64gpu_gb300_nvfp4_config"),
];

/// The perf recipe of `model` on `system` at a row's precision recipe (`precision_of`'s second
/// field), or `None` when the model has none on that system. Of several GPU counts, the one nearest
/// `gpus` (the settings differ by count only for Qwen3-235B-A22B MXFP8/NVFP4 on B200 and B300, whose
/// 64-GPU configs run without the 256-GPU configs' full-iteration graphs). Blockwise FP8 reads the
/// `fp8sc` recipe where there is one, else `fp8cs`, as delayed scaling does. A precision the model
/// has no recipe for on that system (a table row of a release whose recipe the wheel no longer
/// holds) reads the same system's BF16 recipe, else its first of FP8-CS, MXFP8, NVFP4, with
/// full-iteration graphs read as partial: the full-iteration helpers are MXFP8/NVFP4-specific
/// (`_enable_hybridep_full_iteration_mxfp8`, `_apply_gpt_oss_120b_full_iter_fp8mx_configs`).
pub fn perf_recipe(model: &str, system: &str, recipe: &str, gpus: u64) -> Option<PerfRecipe> {
    let class = match recipe {
        "bf16" => "bf16",
        "nvfp4" => "nvfp4",
        r if r.starts_with("mxfp8") => "fp8mx",
        r if r.starts_with("fp8-blockwise") => "fp8sc",
        _ => "fp8cs",
    };
    let pick = |class: &str| {
        PERF_RECIPES.iter().filter(|p| p.model == model && p.system == system && p.precision == class).min_by_key(|p| (p.gpus.abs_diff(gpus), p.gpus))
    };
    if let Some(p) = pick(class).or_else(|| (class == "fp8sc").then(|| pick("fp8cs")).flatten()) {
        return Some(*p);
    }
    let other = ["bf16", "fp8cs", "fp8mx", "nvfp4"].iter().find_map(|c| pick(c))?;
    // A borrowed full-iteration config's graphs read as partial, and the EP overlap its helper sets
    // with them is left out (as for the releases before the full-iteration recipes).
    let full = other.cuda_graphs == "full";
    Some(PerfRecipe { cuda_graphs: if full { "partial" } else { other.cuda_graphs }, ep_overlap: other.ep_overlap && !full, ..*other })
}

/// Whether `model` has perf recipes in [`PERF_RECIPES`] (its rows then take their settings from
/// there, and the family rules of `published::map_row` do not apply to it).
pub fn has_perf_recipes(model: &str) -> bool {
    PERF_RECIPES.iter().any(|p| p.model == model)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_picks_the_nearest_count_and_falls_back_for_blockwise() {
        let p = perf_recipe("qwen3-235b-a22b", "dgx-b200", "mxfp8", 64).unwrap();
        assert_eq!((p.gpus, p.cuda_graphs, p.dispatcher), (64, "none", "alltoall"));
        let p = perf_recipe("qwen3-235b-a22b", "dgx-b200", "mxfp8", 512).unwrap();
        assert_eq!((p.gpus, p.cuda_graphs, p.dispatcher), (256, "full", "hybridep"));
        assert_eq!(perf_recipe("kimi-k2", "dgx-h100", "fp8-blockwise", 1024).unwrap().precision, "fp8sc");
        assert_eq!(perf_recipe("gpt-oss-120b", "dgx-h100", "fp8-blockwise", 64).unwrap().precision, "fp8cs");
        assert!(perf_recipe("llama-3-70b", "dgx-h100", "bf16", 64).is_none());
        // The EP overlap as each recipe sets it: through CommOverlapConfig (Qwen3-235B H100), by an
        // assignment beside alltoall (GPT-OSS-120B GB200 BF16), with the full-iteration helper; not
        // where the recipe leaves it (Kimi K2 H100, EP 64 over eight nodes).
        assert!(perf_recipe("qwen3-235b-a22b", "dgx-h100", "bf16", 256).unwrap().ep_overlap);
        assert!(perf_recipe("gpt-oss-120b", "gb200-nvl72", "bf16", 64).unwrap().ep_overlap);
        assert!(perf_recipe("qwen3-235b-a22b", "gb200-nvl72", "mxfp8", 256).unwrap().ep_overlap);
        assert!(!perf_recipe("kimi-k2", "dgx-h100", "bf16", 1024).unwrap().ep_overlap);
        // No FP8-CS recipe for GPT-OSS-120B on B200: its BF16 recipe's settings.
        let p = perf_recipe("gpt-oss-120b", "dgx-b200", "fp8-current", 64).unwrap();
        assert_eq!((p.precision, p.recompute_modules), ("bf16", &["layernorm", "moe_act"][..]));
        // A system without any recipe of the model gives none.
        assert!(perf_recipe("gpt-oss-20b", "dgx-h100", "bf16", 8).is_none());
        // GPT-OSS-120B NVFP4 on GB300 (no NVFP4 recipe) borrows the BF16 recipe's partial graphs,
        // not the MXFP8 recipe's full iteration.
        let p = perf_recipe("gpt-oss-120b", "gb300-nvl72", "nvfp4", 64).unwrap();
        assert_eq!((p.precision, p.cuda_graphs), ("bf16", "partial"));
        let p = perf_recipe("llama-3.1-405b", "gb300-nvl72", "bf16", 256).unwrap();
        assert_eq!(p.cpu_offload_layers, 40);
    }

    #[test]
    fn every_entry_reads_a_known_setting() {
        for p in PERF_RECIPES {
            assert!(matches!(p.cuda_graphs, "none" | "partial" | "full"), "{}", p.function);
            assert!(matches!(p.dispatcher, "alltoall" | "hybridep" | "deepep"), "{}", p.function);
            assert!(matches!(p.precision, "bf16" | "fp8cs" | "fp8sc" | "fp8mx" | "nvfp4"), "{}", p.function);
            assert!(p.function.contains(&format!("{}gpu", p.gpus)), "{}", p.function);
        }
    }
}
