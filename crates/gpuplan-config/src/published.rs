//! Published NVIDIA Megatron-Bridge / NeMo performance-summary rows (issue 17):
//! `tests/data/published/megatron_bridge_training_dev.csv` read as wire rows, and each complete row
//! mapped to a [`ScenarioWire`] or refused with the reason.
//!
//! A port of `scripts/score_published.py` (`map_row`, `precision_of`, `MODELS`, `SYSTEMS`,
//! `RECIPE_DEFAULTS`); the mapping and its defaults are documented in `docs/published-analysis.md`
//! section 1. Nothing here is fitted. Scoring is `gpuplan_core::validate::published`.

use std::path::Path;

use serde::Deserialize;

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

/// Published model names (upper case, `-` as `_`, parenthetical dropped) -> (catalog model, family,
/// MoE). The prototype's `MODELS`.
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
];

/// Published system names -> catalog systems.
pub const SYSTEMS: &[(&str, &str)] =
    &[("DGX-H100", "dgx-h100"), ("DGX-B200", "dgx-b200"), ("DGX-GB200", "gb200-nvl72"), ("DGX-B300", "dgx-b300"), ("DGX-GB300", "gb300-nvl72")];

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
        "true when tp > 1",
        "Bridge perf configs enable tp_comm_overlap with userbuffers configs (e.g. userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192 for Llama3 70B); NeMo 24.07 ub_tp_comm_overlap=True for the large TP models. For GPT3 20B / Nemotron 8B-22B at TP 2 it is a presumption",
    ),
    (
        "recompute",
        "none",
        "Bridge pretrain recipes leave recompute_granularity=None for these models; perf configs add partial recompute (recompute_num_layers / recompute_modules) or activation offload only where memory needs it, which gpuplan cannot express per layer. Rows gpuplan's memory plan says do not fit are counted",
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
        "fp8 rows run gpuplan's fp8 path with their recipe (workload.fp8_recipe: current scaling -> tensorwise, delayed, blockwise, MXFP8), which sets the quantize kernels' traffic; GEMM rates are the same fp8 rate for every recipe; NVFP4 runs the fp4 path",
    ),
    (
        "cuda_graphs",
        "not expressed",
        "Bridge perf configs enable CUDA graphs for some models (Llama3 8B, MoE); gpuplan's training path prices each kernel at the profile's stream launch cost",
    ),
    ("sft", "SFT rows as training at the row's sequence (packed)", "SFT rows are packed sequences (SQuAD packed to 4096 on the 24.07 page); per-document attention masks are not modelled"),
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
            "NeMo 25.02" => ("fp8", "fp8 (recipe not stated; NeMo 2.0 perf scripts defaulted to delayed scaling, from memory)", "fp8"),
            _ => ("fp8", "fp8-current (Bridge perf configs' fp8_cs, from memory)", "fp8"),
        },
        _ => return None,
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
    if r.task == "LoRA" {
        return Err(Skipped::new(Unexpressible, "LoRA fine-tuning: gpuplan has no frozen base / adapter-only gradients (issue 17 item 7)"));
    }
    let (base, variant) = norm_model(&r.model);
    let Some(&(_, model, family, moe)) = MODELS.iter().find(|m| m.0 == base) else {
        return Err(Skipped::new(
            Unexpressible,
            format!("model `{}` has no catalog model (published names mapped: {})", r.model, MODELS.iter().map(|m| m.0).collect::<Vec<_>>().join(", ")),
        ));
    };
    let Some(&(_, system)) = SYSTEMS.iter().find(|s| s.0 == r.system) else {
        return Err(Skipped::new(Unsupported, format!("system `{}` is not mapped", r.system)));
    };
    let n = int_cell("num_gpus", &r.num_gpus, 0)?;
    let (tp, pp) = (int_cell("tp", &r.tp, 1)?, int_cell("pp", &r.pp, 1)?);
    let (cp, vp, ep) = (int_cell("cp", &r.cp, 1)?, int_cell("vp", &r.vp, 1)?, int_cell("ep", &r.ep, 1)?);
    let (mbs, gbs, seq) = (int_cell("mbs", &r.mbs, 0)?, int_cell("gbs", &r.gbs, 0)?, int_cell("seq_len", &r.seq_len, 0)?);
    let fsdp = int_cell("fsdp", &r.fsdp, 0)?;
    let mut reasons = Vec::new();
    if variant.to_lowercase().contains("tokendrop") {
        reasons.push("token dropping (capacity factor) is not modelled: gpuplan MoE is dropless".to_string());
    }
    let mtp = variant.contains("w/ MTP") || (family == "deepseek" && variant.is_empty() && r.container.starts_with("NeMo 26"));
    if mtp {
        reasons.push(
            "DeepSeek-V3 with its MTP layer (the 25.11 page labels it; the 26.x rows' model FLOPs/token, 260 G, equal the 25.11 'w/ MTP' row's, \
             not the 'w/o MTP' rows' 249.5 G): models/deepseek-v3.toml is the 671B main model without MTP"
                .to_string(),
        );
    }
    let Some((precision, recipe, prec_slice)) = precision_of(r) else {
        return Err(Skipped::new(Incomplete, "precision not stated"));
    };
    if precision == "fp4" && system == "dgx-h100" {
        reasons.push("NVFP4 on H100: no FP4 tensor cores".to_string());
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
    if r.task == "SFT" {
        notes.push("SFT (packed sequences) priced as pre-training".into());
    }
    // The recipe as gpuplan's `workload.fp8_recipe` (fp8 rows); the rest of a recipe's name is
    // how the row was read.
    let fp8_recipe = (precision == "fp8").then(|| match recipe {
        r if r.starts_with("mxfp8") => "mxfp8",
        r if r.starts_with("fp8-blockwise") => "blockwise",
        r if r.starts_with("fp8-delayed") || r.starts_with("fp8 (recipe not stated; NeMo 2.0") => "delayed",
        _ => "tensorwise",
    });
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
            zero: Some(if fsdp > 0 { 3 } else { 1 }),
            ..Default::default()
        },
        workload: WorkloadWire {
            mode: Some("train".into()),
            micro_batch: i(mbs),
            global_batch: i(gbs),
            seq: i(seq),
            precision: Some(precision.into()),
            fp8_recipe: fp8_recipe.map(str::to_string),
            recompute: Some("none".into()),
            stack: Some("megatron".into()),
            routing_imbalance: Some(1.0),
            ..Default::default()
        },
        options: OptionsWire { tp_comm_overlap: Some(tp > 1), dp_overlap: None },
        ..Default::default()
    };
    let describe = format!(
        "{} {} {} {} {n} GPUs tp{tp} pp{pp} cp{cp} vp{} ep{} fsdp{} mbs{mbs} gbs{gbs} seq{seq} {}",
        system,
        model,
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
    }
}
