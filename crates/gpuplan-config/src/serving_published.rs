//! Published TensorRT-LLM serving rows (issue 20): `tests/data/published/trtllm_inference_dev.csv`
//! read as wire rows, and each row mapped to what `gpuplan serve` runs for it (model, system, TP,
//! precision, lengths, and how the load was offered) or refused with the reason. Scoring is
//! `gpuplan_core::validate::serving`; the CLI builds each deployment with `config::deploy`.
//!
//! Nothing here is fitted. The split is fixed in `tests/data/published/trtllm_split.md`.

use std::path::Path;

use serde::Deserialize;

use super::ConfigError;
use gpuplan_core::validate::published::{SkipKind, Skipped};
use gpuplan_core::validate::serving::{Case, Load, Metric};

/// One published row as the CSV holds it (every column text; the first three are the ones the dev
/// copy adds in front, see `tests/data/published/trtllm_split.md`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RowWire {
    #[serde(default)]
    pub dev_row: String,
    #[serde(default)]
    pub config_id: String,
    /// `fit`, `test` or `-` (not scored).
    #[serde(default)]
    pub split: String,
    pub source: String,
    pub doc_version: String,
    pub scenario: String,
    pub model: String,
    pub gpu: String,
    pub num_gpus: String,
    pub tp: String,
    pub pp: String,
    pub ep: String,
    pub precision: String,
    pub input_len: String,
    pub output_len: String,
    pub batch_or_concurrency: String,
    pub qps: String,
    pub metric: String,
    pub value: String,
    pub units: String,
    pub config_complete: String,
    pub notes: String,
}

/// The CSV's GPU names (a substring, matched in order) -> the catalog system a row runs on: a
/// node of that GPU (the rows use at most 8 GPUs of one node). The one table of this mapping: a
/// system added to the catalog is picked up by naming it here; a row whose system the catalog
/// lacks is reported as "no system in catalog", not dropped.
pub const SYSTEMS: &[(&str, &str)] = &[
    ("GB200", "gb200-nvl72"),
    ("GH200", "gh200-480gb-1x"),
    ("B200", "dgx-b200"),
    ("H200", "hgx-h200"),
    ("H100", "dgx-h100"),
    ("A100", "dgx-a100"),
    // The names the catalog branch for issue 20 item 5 (wt-deploy) gives these systems.
    ("L40S", "l40s-pcie-8x"),
    ("RTX 6000 Pro Blackwell", "rtx-pro-6000-bse-pcie-8x"),
];

/// The CSV's model names (lower case, substring, in order) -> catalog model. Llama 3.3 70B has
/// Llama 3.1 70B's architecture.
pub const MODELS: &[(&str, &str, bool)] = &[
    ("mixtral 8x7b", "mixtral-8x7b", true),
    ("mistral 7b", "mistral-7b", false),
    ("llama 3.3 70b", "llama-3.1-70b", false),
    ("llama 3.1 70b", "llama-3.1-70b", false),
    ("llama v3.1 70b", "llama-3.1-70b", false),
    ("llama 3.1 8b", "llama-3.1-8b", false),
    ("llama v3.1 8b", "llama-3.1-8b", false),
];

/// Requests trtllm-bench was given per (input, output) length in the offline tables: the
/// perf-overview page's "Preparing a Dataset" table (`prepare_dataset.py ... --num-requests`), as
/// this mapping's author recalls it from the v0.17 / v1.0 pages (not re-read here: the page could
/// not be fetched on this machine). Throughput is output tokens over the whole run, so the number
/// sets only the weight of the ramp-up and the drain.
pub const OFFLINE_REQUESTS: &[((u32, u32), u32)] = &[
    ((128, 128), 30000),
    ((128, 2048), 3000),
    ((128, 4096), 1500),
    ((500, 2000), 3000),
    ((1000, 1000), 3000),
    ((1000, 2000), 1500),
    ((2048, 128), 3000),
    ((2048, 2048), 1500),
    ((5000, 500), 1500),
    ((20000, 2000), 1000),
];

/// Requests of each online measurement: "All data in the table below was generated using version
/// 0.14.0, with 500 requests and BF16 precision" (the page's online section).
pub const ONLINE_REQUESTS: u32 = 500;

/// Read the rows of a serving CSV (header as in `tests/data/published/`; the three added columns
/// are optional).
pub fn read_rows(path: &Path) -> Result<Vec<RowWire>, ConfigError> {
    crate::published::read_dev_rows(path, |r: &mut RowWire| (&mut r.dev_row, &mut r.split))
}

/// The catalog system of a CSV GPU name, if the table names one.
pub fn system_of(gpu: &str) -> Option<&'static str> {
    SYSTEMS.iter().find(|(k, _)| gpu.contains(k)).map(|(_, s)| *s)
}

/// gpuplan's precision of a row's precision cell.
pub fn precision_of(p: &str) -> Option<&'static str> {
    Some(match p {
        "BF16" | "FP16" => "bf16",
        "FP8" => "fp8",
        "FP4" => "fp4",
        _ => return None,
    })
}

fn int_cell(key: &str, s: &str) -> Result<u32, Skipped> {
    s.trim().parse().map_err(|_| Skipped::new(SkipKind::Incomplete, format!("`{key}` = `{s}` is not an integer")))
}

/// Map one row to its case, or say why it is not scored. `has_system` says whether the catalog
/// holds a system (a row on a GPU without one is `Unsupported`: "no system in catalog").
pub fn map_row(r: &RowWire, has_system: &dyn Fn(&str) -> bool) -> Result<Case, Skipped> {
    use SkipKind::*;
    let offline = r.scenario == "offline max throughput";
    let online = r.scenario.starts_with("online serving");
    if !offline && !online {
        return Err(Skipped::new(Incomplete, format!("`{}` rows: {}", r.scenario, r.config_complete)));
    }
    let metric = match r.metric.as_str() {
        "Throughput" | "Total Output Throughput" if offline => Metric::OfflineOutputTput,
        "Mean TTFT" => Metric::MeanTtft,
        "Mean ITL" => Metric::MeanItl,
        m => return Err(Skipped::new(Unexpressible, format!("metric `{m}` is not scored (offline output tokens/s, mean TTFT and mean ITL are)"))),
    };
    let lower = r.model.to_lowercase();
    let Some(&(_, model, moe)) = MODELS.iter().find(|(k, _, _)| lower.contains(k)) else {
        return Err(Skipped::new(Unexpressible, format!("model `{}` has no catalog model", r.model)));
    };
    let Some(system) = system_of(&r.gpu) else {
        return Err(Skipped::new(Unsupported, format!("GPU `{}` is not in the GPU table (config::serving_published::SYSTEMS)", r.gpu)));
    };
    if !has_system(system) {
        return Err(Skipped::new(Unsupported, format!("no system in catalog: `{system}` (GPU `{}`)", r.gpu)));
    }
    let Some(precision) = precision_of(&r.precision) else {
        return Err(Skipped::new(Incomplete, format!("precision `{}` not stated", r.precision)));
    };
    let (tp, pp) = (int_cell("tp", &r.tp)?, if r.pp.trim().is_empty() { 1 } else { int_cell("pp", &r.pp)? });
    let (isl, osl) = (int_cell("input_len", &r.input_len)?, int_cell("output_len", &r.output_len)?);
    let measured: f64 = r.value.trim().parse().map_err(|_| Skipped::new(Incomplete, format!("`value` = `{}` is not a number", r.value)))?;
    let load = if offline {
        let Some(&(_, n)) = OFFLINE_REQUESTS.iter().find(|(k, _)| *k == (isl, osl)) else {
            return Err(Skipped::new(Incomplete, format!("no request count known for {isl}/{osl} (config::serving_published::OFFLINE_REQUESTS)")));
        };
        Load::Offline { requests: n }
    } else if r.qps.trim() == "INF" {
        Load::Offline { requests: ONLINE_REQUESTS }
    } else {
        let qps: f64 = r.qps.trim().parse().map_err(|_| Skipped::new(Incomplete, format!("`qps` = `{}` is not a number", r.qps)))?;
        Load::Poisson { qps, requests: ONLINE_REQUESTS }
    };
    let version = if r.doc_version.starts_with("perf-overview") { "v1.0".to_string() } else { r.doc_version.clone() };
    Ok(Case {
        id: r.dev_row.clone(),
        split: r.split.clone(),
        config_id: r.config_id.clone(),
        metric,
        model: model.to_string(),
        moe,
        system: system.to_string(),
        precision: precision.to_string(),
        tp,
        pp,
        input_len: isl,
        output_len: osl,
        load,
        // The offline rows' notes: "kv_cache_free_gpu_mem_fraction 0.95 in many cases (fallback
        // 0.90)" (v1.0), "0.95 in majority of cases" (v0.17). The online rows state none.
        kv_free_fraction: offline.then_some(0.95),
        cuda_graphs: r.notes.contains("CUDA graphs"),
        triton: online,
        // TensorRT-LLM refuses a prompt longer than max_num_tokens (8192 by default) unless
        // chunked context is on (`enable_chunked_context` / `enable_chunked_prefill`): the 20,000
        // token rows must have run with it.
        chunked_prefill: isl > gpuplan_core::serve::engines::TRTLLM.token_budget,
        measured,
        describe: format!("{} {} {} tp{tp} pp{pp} {} {isl}/{osl} {}", version, model, system, r.precision, load.describe()),
    })
}

/// A row's label for rows not scored.
pub fn describe_row(r: &RowWire) -> String {
    format!("{} {} {} tp{} {} {}/{} {}", r.scenario, r.model, r.gpu, r.tp, r.precision, r.input_len, r.output_len, r.metric)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_and_model_names_map_through_one_table() {
        assert_eq!(system_of("H200 131GB HBM3"), Some("hgx-h200"));
        assert_eq!(system_of("GB200"), Some("gb200-nvl72"));
        assert_eq!(system_of("B200"), Some("dgx-b200"));
        assert_eq!(system_of("A100-SXM4-80GB"), Some("dgx-a100"));
        assert_eq!(system_of("MI300X"), None);
        assert_eq!(precision_of("FP16"), Some("bf16"));
    }
}
