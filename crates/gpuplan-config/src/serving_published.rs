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

/// The CSV's GPU names (a substring, matched in order, ignoring case) -> the catalog system a row
/// runs on: a node of that GPU (the rows use at most 8 GPUs of one node). The one table of this
/// mapping: a system added to the catalog is picked up by naming it here; a row whose system the
/// catalog lacks is reported as "no system in catalog", not dropped. The GB and GH superchips
/// come before the GPUs their names contain (`GB200` holds `B200`, `GH200` holds `H200`). The
/// names the tables print: "H100 80GB HBM3", "H200 141GB HBM3" (v0.17), "H200 131GB HBM3"
/// (v0.14), "H100", "H200", "B200", "GB200", "RTX 6000 Pro Blackwell Server Edition" (v1.0),
/// "GH200 480GB", "A100-SXM4-80GB", "L40S" (v0.17); the v1.0 page's hardware list also writes
/// "B200 180GB", "GB200 192GB", "GB200 NVL72" and the RTX card "RTX PRO 6000". A PCIe or NVL
/// variant of an SXM GPU (`H100 PCIe`, `H100 NVL`, `H200 NVL`, `A100-PCIE-80GB`: other clocks,
/// power and links) maps to no system: [`system_of`] refuses it rather than price it as SXM.
pub const SYSTEMS: &[(&str, &str)] = &[
    ("GB300", "gb300-nvl72"),
    ("GB200", "gb200-nvl72"),
    ("GH200", "gh200-480gb-1x"),
    ("B300", "dgx-b300"),
    ("B200", "dgx-b200"),
    ("H200", "hgx-h200"),
    ("H100", "dgx-h100"),
    ("A100", "dgx-a100"),
    // The names the catalog branch for issue 20 item 5 (wt-deploy) gives these systems.
    ("L40S", "l40s-pcie-8x"),
    ("RTX 6000 Pro Blackwell", "rtx-pro-6000-bse-pcie-8x"),
    ("RTX PRO 6000", "rtx-pro-6000-bse-pcie-8x"),
];

/// The CSV's model names -> catalog model (and whether it is MoE), as [`name_tokens`] of a
/// pattern: a row's model matches a pattern when the row's name holds every token of it, and the
/// pattern with the most tokens wins ([`model_of`]), so `Llama 3.1 405B FP8`,
/// `LLaMA v3.1 405B`, `Llama-3.1-405B-Instruct` are one model and `llama 3.1 8b` never matches
/// `Llama 3.1 80B` (`8b` and `80b` are different tokens). Versions of one architecture share a
/// catalog model:
/// - Llama 3.3 70B, Llama 3.1 70B (and DeepSeek-R1-Distill-Llama-70B, fine-tuned from Llama 3.3
///   70B Instruct, its model card): the same shapes;
/// - DeepSeek-R1 (and R1-0528, V3-0324, V3.1): DeepSeek-V3's architecture (R1's config.json is V3's
///   `DeepseekV3ForCausalLM` with the same shapes, from memory; the R1 report, arXiv:2501.12948,
///   trains R1 from DeepSeek-V3-Base);
/// - Qwen3 235B A22B and 30B A3B with or without their `-2507` / `Instruct` / `Thinking`
///   suffixes; Mixtral 8x7B and 8x22B v0.1 (their only releases).
///
/// A name holding `distill` matches only a pattern that does (`DeepSeek-R1-Distill-Qwen-32B` is
/// not DeepSeek-R1). The names the tables print (v0.14: `LLaMA 3.1 70B`; v0.17: `LLaMA v3.1 70B`,
/// `LLaMA v3.1 405B`, `Mixtral 8x22B`; v1.0: `Llama 3.3 70B`, `Llama 3.1 405B`, `DeepSeek R1`,
/// `Qwen3 235B A22B`, `Llama 4 Maverick`, ...) are in the unit tests.
pub const MODELS: &[(&str, &str, bool)] = &[
    ("mixtral 8x7b", "mixtral-8x7b", true),
    ("mixtral 8x22b", "mixtral-8x22b", true),
    ("mistral 7b", "mistral-7b", false),
    ("llama 3.3 70b", "llama-3.1-70b", false),
    ("llama 3.1 70b", "llama-3.1-70b", false),
    ("llama 3.1 8b", "llama-3.1-8b", false),
    ("llama 3.1 405b", "llama-3.1-405b", false),
    ("llama 3 70b", "llama-3-70b", false),
    ("llama 3 8b", "llama-3-8b", false),
    ("llama 2 7b", "llama-2-7b", false),
    ("llama 2 13b", "llama-2-13b", false),
    ("llama 2 70b", "llama-2-70b", false),
    ("deepseek r1 distill llama 70b", "llama-3.1-70b", false),
    ("deepseek r1 distill llama 8b", "llama-3.1-8b", false),
    ("llama 4 maverick", "llama-4-maverick", true),
    ("llama 4 scout", "llama-4-scout", true),
    ("deepseek r1", "deepseek-v3", true),
    ("deepseek v3", "deepseek-v3", true),
    ("deepseek v3.1", "deepseek-v3", true),
    ("qwen3 235b", "qwen3-235b-a22b", true),
    ("qwen3 235b a22b", "qwen3-235b-a22b", true),
    ("qwen3 30b", "qwen3-30b-a3b", true),
    ("qwen3 30b a3b", "qwen3-30b-a3b", true),
    ("qwen3 8b", "qwen3-8b", false),
    ("qwen2.5 7b", "qwen2.5-7b", false),
    ("gpt oss 120b", "gpt-oss-120b", true),
    ("gpt oss 20b", "gpt-oss-20b", true),
];

/// A model or GPU name as tokens: lower case, split at every character other than a letter, a
/// digit or `.` (spaces, `-`, `_`, `/`, brackets), a version's `v` dropped (`v3.1` -> `3.1`,
/// `v0.1` -> `0.1`), and a word glued to its version split from it (`llama3.1` -> `llama`,
/// `3.1`; `qwen3` -> `qwen`, `3`; `r1` -> `r`, `1`; but `8b`, `a22b`, `8x7b` stay whole).
pub fn name_tokens(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    for raw in name.to_lowercase().split(|c: char| !(c.is_ascii_alphanumeric() || c == '.')) {
        let t = raw.trim_matches('.');
        if t.is_empty() {
            continue;
        }
        let number = |s: &str| !s.is_empty() && s.starts_with(|c: char| c.is_ascii_digit()) && s.chars().all(|c| c.is_ascii_digit() || c == '.');
        if let Some(rest) = t.strip_prefix('v').filter(|r| number(r)) {
            out.push(rest.to_string());
            continue;
        }
        let letters = t.find(|c: char| !c.is_ascii_alphabetic()).unwrap_or(t.len());
        if letters > 0 && letters < t.len() && number(&t[letters..]) {
            out.push(t[..letters].to_string());
            out.push(t[letters..].to_string());
        } else {
            out.push(t.to_string());
        }
    }
    out
}

/// The catalog model of a row's model name ([`MODELS`]): (pattern, catalog model, MoE), or
/// `None` when no pattern matches or two different models tie for the longest.
pub fn model_of(name: &str) -> Option<(&'static str, &'static str, bool)> {
    let have = name_tokens(name);
    let distill = have.iter().any(|t| t == "distill");
    let mut best: Option<(usize, (&'static str, &'static str, bool))> = None;
    let mut tie = false;
    for &(pattern, model, moe) in MODELS {
        let want = name_tokens(pattern);
        if distill != want.iter().any(|t| t == "distill") || !want.iter().all(|t| have.contains(t)) {
            continue;
        }
        match best {
            Some((n, _)) if n > want.len() => {}
            Some((n, (_, m, _))) if n == want.len() => tie |= m != model,
            _ => {
                best = Some((want.len(), (pattern, model, moe)));
                tie = false;
            }
        }
    }
    best.filter(|_| !tie).map(|(_, m)| m)
}

/// Requests trtllm-bench was given per (input, output) length in the offline tables: the
/// perf-overview page's "Preparing a Dataset" table (`prepare_dataset.py ... --num-requests`), as
/// this mapping's author recalls it from the v0.17 / v1.0 pages (not re-read here: the page could
/// not be fetched on this machine). Throughput is output tokens over the whole run, so the number
/// sets only the weight of the ramp-up and the drain. A length pair not listed takes
/// [`offline_requests`]' rule.
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

/// The requests trtllm-bench ran for `isl`/`osl` tokens: [`OFFLINE_REQUESTS`]' count of the pair,
/// or, for a pair the table does not list, the count of the listed pair nearest in total tokens
/// (`isl + osl`; a tie takes the larger count). The page's table sets its counts by the sequence
/// length it lists beside them (`$seq_len` = input + output, from memory): 30,000 at 256 tokens,
/// 3,000 from 2,000 to 2,500, 1,500 from 3,000 to 5,500, 1,000 at 22,000, which this rule
/// continues. Where the engine holds far fewer sequences than the run has requests (every dense
/// row), the count sets only the share of the run spent ramping up and draining the batch:
/// 1,500, 3,000 or 6,000 requests move Llama 3.1 70B and 405B FP8 on 8 H200 at 1000/1000 by
/// under 4% (14,351 / 14,534 / 14,989 and 3,607 / 3,672 / 3,728 tokens/s predicted). Where the
/// instance could hold the whole run at once (an attention-DP MoE instance of light experts,
/// 2,048 sequences per rank), the count is the batch and moves the throughput with it: gpt-oss-120b
/// FP4 on 8 B200 predicts 182,868 / 259,341 / 329,995 tokens/s (docs/trtllm-residuals.md
/// section 14). An unlisted pair is then as uncertain as its count.
pub fn offline_requests(isl: u32, osl: u32) -> u32 {
    if let Some(&(_, n)) = OFFLINE_REQUESTS.iter().find(|(k, _)| *k == (isl, osl)) {
        return n;
    }
    let total = |(i, o): (u32, u32)| i as i64 + o as i64;
    let want = total((isl, osl));
    OFFLINE_REQUESTS.iter().min_by_key(|&&(k, n)| ((total(k) - want).abs(), std::cmp::Reverse(n))).map_or(ONLINE_REQUESTS, |&(_, n)| n)
}

/// Requests of each online measurement: "All data in the table below was generated using version
/// 0.14.0, with 500 requests and BF16 precision" (the page's online section).
pub const ONLINE_REQUESTS: u32 = 500;

/// Read the rows of a serving CSV (header as in `tests/data/published/`; the three added columns
/// are optional).
pub fn read_rows(path: &Path) -> Result<Vec<RowWire>, ConfigError> {
    crate::published::read_dev_rows(path, |r: &mut RowWire| (&mut r.dev_row, &mut r.split))
}

/// The catalog system of a CSV GPU name, if the table names one ([`SYSTEMS`], ignoring case);
/// `None` for a PCIe or NVL card of an SXM system (a name with a `pcie` or `nvl` token: `H100
/// PCIe`, `H200 NVL`, `A100-PCIE-80GB`; `GB200 NVL72` is the rack, token `nvl72`).
pub fn system_of(gpu: &str) -> Option<&'static str> {
    let lower = gpu.to_lowercase();
    let system = SYSTEMS.iter().find(|(k, _)| lower.contains(&k.to_lowercase())).map(|(_, s)| *s)?;
    let card = lower.split(|c: char| !c.is_ascii_alphanumeric()).any(|t| t == "pcie" || t == "nvl");
    (!card || system.ends_with("-pcie-8x")).then_some(system)
}

/// gpuplan's precision of a row's precision cell (any case). `NVFP4` is the tables' FP4 (ModelOpt's
/// NVFP4 checkpoints); `MXFP4` (gpt-oss's own expert format: 32 values per 8-bit power-of-two
/// scale, 4.25 bits, where NVFP4 has 16 per FP8 scale, 4.5 bits) is priced as FP4, its weights
/// 6% heavier than they are.
pub fn precision_of(p: &str) -> Option<&'static str> {
    Some(match p.trim().to_uppercase().as_str() {
        "BF16" | "FP16" => "bf16",
        "FP8" => "fp8",
        "FP4" | "NVFP4" | "MXFP4" => "fp4",
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
    let Some((_, model, moe)) = model_of(&r.model) else {
        return Err(Skipped::new(Unexpressible, format!("model `{}` has no catalog model (config::serving_published::MODELS)", r.model)));
    };
    let Some(system) = system_of(&r.gpu) else {
        let lower = r.gpu.to_lowercase();
        if let Some((k, sxm)) = SYSTEMS.iter().find(|(k, _)| lower.contains(&k.to_lowercase())) {
            return Err(Skipped::new(
                Unsupported,
                format!("GPU `{}` is a PCIe or NVL card; the catalog's {k} system `{sxm}` is SXM (other clocks, power and links): no system in catalog", r.gpu),
            ));
        }
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
    if isl == 0 || osl == 0 {
        return Err(Skipped::new(Incomplete, format!("input/output length {isl}/{osl}: both must be positive")));
    }
    let load = if offline {
        Load::Offline { requests: offline_requests(isl, osl) }
    } else if r.qps.trim() == "INF" {
        Load::Offline { requests: ONLINE_REQUESTS }
    } else {
        let qps: f64 = r.qps.trim().parse().map_err(|_| Skipped::new(Incomplete, format!("`qps` = `{}` is not a number", r.qps)))?;
        Load::Poisson { qps, requests: ONLINE_REQUESTS }
    };
    let version = if r.doc_version.starts_with("perf-overview") { "v1.0".to_string() } else { r.doc_version.clone() };
    let ep = match r.ep.trim() {
        "" | "-" => None,
        e => Some(int_cell("ep", e)?),
    };
    let pytorch = pytorch_backend(&r.doc_version);
    // A PyTorch-backend MoE row may print its attention-DP ranks as GPUs beyond TP x PP (`tp` 1,
    // `num_gpus` 8): the instance is then those GPUs. (No dev row has num_gpus other than tp x pp.)
    let tp = match r.num_gpus.trim().parse::<u32>() {
        Ok(g) if moe && pytorch && pp == 1 && g > tp && g % tp == 0 => g,
        _ => tp,
    };
    let layout = moe_layout(moe, pytorch, tp, pp, ep);
    if let Some(e) = layout.ep.filter(|e| *e == 0 || tp % e != 0) {
        return Err(Skipped::new(Incomplete, format!("`ep` = {e} does not divide `tp` = {tp}")));
    }
    let par = layout.describe();
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
        ep: layout.ep,
        attention_dp: layout.attention_dp,
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
        describe: format!("{} {} {} tp{tp} pp{pp}{par} {} {isl}/{osl} {}", version, model, system, r.precision, load.describe()),
    })
}

/// Whether a row's table ran TensorRT-LLM's PyTorch backend (`trtllm-bench --backend pytorch`):
/// the v1.0 perf-overview page ("NEW for v1.0" in the dev rows' `doc_version`, or a version 1.x).
/// The v0.14 and v0.17 tables ran TensorRT engines (`trtllm-bench build`, Triton).
pub fn pytorch_backend(doc_version: &str) -> bool {
    let v = doc_version.trim().trim_start_matches('v');
    doc_version.starts_with("perf-overview") || v.split('.').next().and_then(|m| m.parse::<u32>().ok()).is_some_and(|m| m >= 1)
}

/// How a row's MoE layers were laid out over its `tp` GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeLayout {
    /// Expert parallelism (`None`: the experts split by TP, "expert TP").
    pub ep: Option<u32>,
    /// Attention data parallelism: each of the `tp` GPUs runs attention for its own sequences
    /// (TP 1 for attention), the experts spread over all of them.
    pub attention_dp: bool,
}

impl MoeLayout {
    /// The layout's part of a row's label (empty for a dense model or expert TP).
    pub fn describe(&self) -> String {
        match (self.ep, self.attention_dp) {
            (Some(e), true) => format!(" ep{e} attention-dp"),
            (Some(e), false) => format!(" ep{e}"),
            (None, true) => " attention-dp".into(),
            (None, false) => String::new(),
        }
    }
}

/// The MoE layout a row ran with, as the pages ran them.
///
/// - TensorRT engines (the v0.14 and v0.17 tables, `trtllm-bench build --tp_size N`): expert TP,
///   TensorRT-LLM's default for an engine built without `--moe_ep_size` (its `moe_tp_size`
///   defaults to the TP size, `MoeConfig` of `tensorrt_llm/layers/moe.py`, from memory); an `ep`
///   cell, where the row prints one, is used as printed.
/// - The PyTorch backend (v1.0, `trtllm-bench --backend pytorch throughput --tp N --ep E
///   --extra_llm_api_options`): the dev rows' notes say "MoE runs use --ep and attention DP" (their
///   source's `notes` column, tests/data/published/trtllm_inference_dev.csv); the page's MoE
///   commands (DeepSeek-R1, Qwen3, Llama 4 Maverick) set `enable_attention_dp: true` in the extra
///   options YAML and `--ep` to the GPU count (from memory of the v1.0 perf-overview and
///   trtllm-bench pages, not re-read here). So: attention DP over the row's `tp` GPUs (one
///   sequence set and KV cache per GPU, attention at TP 1) and EP = the row's `ep` cell, or its
///   GPU count where the cell is empty (the dev rows: "EP size for MoE not printed per cell").
///   One GPU (`tp` 1) is plain: no DP to spread over, the experts on it.
/// - A dense model: neither.
/// - A pipelined MoE row (PP > 1, as the v1.0 table runs Llama 3.3 70B on the RTX Pro 6000
///   servers, which have no NVLink): no attention DP (gpuplan models attention DP without PP
///   only), the experts of each stage over its `tp` GPUs by EP (the row's `ep`, else `tp`).
///
/// An `ep` below the GPUs splits each expert over the rest (`config::deploy`: etp = GPUs / ep).
pub fn moe_layout(moe: bool, pytorch: bool, tp: u32, pp: u32, ep: Option<u32>) -> MoeLayout {
    match (moe, pytorch) {
        (false, _) => MoeLayout { ep: None, attention_dp: false },
        (true, false) => MoeLayout { ep, attention_dp: false },
        (true, true) if tp <= 1 => MoeLayout { ep: None, attention_dp: false },
        (true, true) if pp > 1 => MoeLayout { ep: Some(ep.unwrap_or(tp)), attention_dp: false },
        (true, true) => MoeLayout { ep: Some(ep.unwrap_or(tp)), attention_dp: true },
    }
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
        // Case, the tables' name forms, the superchips before the GPUs their names hold.
        assert_eq!(system_of("H200 141GB HBM3e"), Some("hgx-h200"));
        assert_eq!(system_of("GH200 480GB"), Some("gh200-480gb-1x"));
        assert_eq!(system_of("B200 180GB"), Some("dgx-b200"));
        assert_eq!(system_of("GB200 NVL72"), Some("gb200-nvl72"));
        assert_eq!(system_of("GB300 NVL72"), Some("gb300-nvl72"));
        assert_eq!(system_of("B300"), Some("dgx-b300"));
        assert_eq!(system_of("RTX 6000 Pro Blackwell Server Edition"), Some("rtx-pro-6000-bse-pcie-8x"));
        assert_eq!(system_of("RTX PRO 6000 Blackwell Server Edition"), Some("rtx-pro-6000-bse-pcie-8x"));
        assert_eq!(system_of("l40s"), Some("l40s-pcie-8x"));
        // A PCIe or NVL card is not its SXM system.
        for card in ["H100 PCIe", "H100 NVL", "H200 NVL", "A100-PCIE-80GB"] {
            assert_eq!(system_of(card), None, "{card}");
        }
    }

    #[test]
    fn name_tokens_normalise_case_separators_and_versions() {
        assert_eq!(name_tokens("LLaMA v3.1 405B"), ["llama", "3.1", "405b"]);
        assert_eq!(name_tokens("Llama-3.1-405B-Instruct-FP8"), ["llama", "3.1", "405b", "instruct", "fp", "8"]);
        assert_eq!(name_tokens("Qwen3-235B-A22B"), ["qwen", "3", "235b", "a22b"]);
        assert_eq!(name_tokens("Mixtral 8x22B v0.1"), ["mixtral", "8x22b", "0.1"]);
        assert_eq!(name_tokens("meta_llama3.1_8b"), ["meta", "llama", "3.1", "8b"]);
        assert_eq!(name_tokens("DeepSeek-R1-0528"), ["deepseek", "r", "1", "0528"]);
    }

    #[test]
    fn every_name_form_of_the_tables_maps_to_its_catalog_model() {
        let cases: &[(&str, &str, bool)] = &[
            // As the tables print them (v0.14, v0.17, v1.0) and their usual variants.
            ("LLaMA 3.1 70B", "llama-3.1-70b", false),
            ("LLaMA v3.1 70B", "llama-3.1-70b", false),
            ("Llama 3.3 70B", "llama-3.1-70b", false),
            ("Llama-3.3-70B-Instruct-FP8", "llama-3.1-70b", false),
            ("LLaMA v3.1 8B", "llama-3.1-8b", false),
            ("Llama 3.1 8B", "llama-3.1-8b", false),
            ("LLaMA v3.1 405B", "llama-3.1-405b", false),
            ("Llama 3.1 405B", "llama-3.1-405b", false),
            ("Llama 3.1 405B FP8", "llama-3.1-405b", false),
            ("nvidia/Llama-3.1-405B-Instruct-FP4", "llama-3.1-405b", false),
            ("LLAMA 3 70B", "llama-3-70b", false),
            ("LLaMA v2 70B", "llama-2-70b", false),
            ("Llama-2-7b-hf", "llama-2-7b", false),
            ("Mistral 7B", "mistral-7b", false),
            ("Mixtral 8x7B", "mixtral-8x7b", true),
            ("Mixtral 8x22B", "mixtral-8x22b", true),
            ("Mixtral 8x22B v0.1", "mixtral-8x22b", true),
            ("Mixtral-8x22B-Instruct-v0.1", "mixtral-8x22b", true),
            ("Qwen3 235B A22B", "qwen3-235b-a22b", true),
            ("Qwen3-235B-A22B", "qwen3-235b-a22b", true),
            ("Qwen3-235B-A22B-FP8", "qwen3-235b-a22b", true),
            ("Qwen3 30B A3B", "qwen3-30b-a3b", true),
            ("qwen3_30b_a3b", "qwen3-30b-a3b", true),
            ("DeepSeek R1", "deepseek-v3", true),
            ("DeepSeek-R1-0528", "deepseek-v3", true),
            ("nvidia/DeepSeek-R1-0528-FP4", "deepseek-v3", true),
            ("DeepSeek V3", "deepseek-v3", true),
            ("DeepSeek-V3-0324", "deepseek-v3", true),
            ("Llama 4 Maverick", "llama-4-maverick", true),
            ("Llama-4-Maverick-17B-128E-Instruct-FP8", "llama-4-maverick", true),
            ("Llama 4 Scout", "llama-4-scout", true),
            ("Llama-4-Scout-17B-16E-Instruct", "llama-4-scout", true),
            ("gpt-oss-120b", "gpt-oss-120b", true),
            ("GPT-OSS 20B", "gpt-oss-20b", true),
            ("DeepSeek-R1-Distill-Llama-70B", "llama-3.1-70b", false),
        ];
        for &(name, model, moe) in cases {
            let got = model_of(name).map(|(_, m, e)| (m, e));
            assert_eq!(got, Some((model, moe)), "{name}");
        }
    }

    #[test]
    fn a_name_never_matches_a_model_it_only_resembles() {
        // Another size, another generation, another family, a distilled model: no match, or the
        // right one, never the near one.
        for name in [
            "Llama 3.1 80B",
            "Llama 3.2 1B",
            "Llama 3.2 3B",
            "Llama 3.1 70",
            "Llama 4 Behemoth",
            "Qwen3 32B",
            "Qwen3 235",
            "Qwen2.5 72B",
            "Mixtral 8x7",
            "Mistral Small 24B",
            "DeepSeek V2",
            "DeepSeek V3.2",
            "DeepSeek-R1-Distill-Qwen-32B",
            "gpt-oss-200b",
            "Nemotron 70B",
            "Llama 2 34B",
            // Two models tie for the longest pattern: refused, not a guess.
            "Llama 2 7B vs Llama 3.1 8B",
        ] {
            assert_eq!(model_of(name), None, "{name}");
        }
        assert_eq!(model_of("Llama 3.1 8B").unwrap().1, "llama-3.1-8b");
        assert_eq!(model_of("Llama 3.1 80B"), None);
        assert_eq!(model_of("Qwen3 30B A3B").unwrap().1, "qwen3-30b-a3b");
        assert_eq!(model_of("Qwen3 235B A22B").unwrap().1, "qwen3-235b-a22b");
        assert_eq!(model_of("Mistral 7B").unwrap().1, "mistral-7b");
        assert_eq!(model_of("Mixtral 8x7B").unwrap().1, "mixtral-8x7b");
        assert_eq!(model_of("Llama 3 8B").unwrap().1, "llama-3-8b");
        assert_eq!(model_of("Llama 3.1 8B").unwrap().1, "llama-3.1-8b");
        // The longest pattern wins: `deepseek r1 distill llama 8b`, not `llama 3.1 8b`'s rivals.
        assert_eq!(model_of("DeepSeek-R1-Distill-Llama-8B").unwrap().1, "llama-3.1-8b");
    }

    #[test]
    fn no_two_patterns_of_one_length_claim_one_name_for_two_models() {
        // Every pattern, read as a name, maps to its own model (a tie between two models would
        // make model_of refuse it).
        for &(pattern, model, _) in MODELS {
            assert_eq!(model_of(pattern).map(|m| m.1), Some(model), "{pattern}");
        }
    }

    #[test]
    fn lengths_the_request_table_lacks_take_the_nearest_listed_total() {
        assert_eq!(offline_requests(128, 128), 30000);
        assert_eq!(offline_requests(20000, 2000), 1000);
        // 1024/1024 = 2,048 tokens: nearest 1000/1000 (2,000) -> 3,000.
        assert_eq!(offline_requests(1024, 1024), 3000);
        // 8192/1024 = 9,216: nearest 5000/500 (5,500) -> 1,500.
        assert_eq!(offline_requests(8192, 1024), 1500);
        // 128/8 = 136: nearest 128/128 (256) -> 30,000.
        assert_eq!(offline_requests(128, 8), 30000);
        // 1000/3000 = 4,000: 128/4096 (4,224) -> 1,500.
        assert_eq!(offline_requests(1000, 3000), 1500);
    }

    #[test]
    fn moe_layouts_follow_the_backend() {
        // TensorRT engines (v0.14, v0.17): expert TP, or the printed EP.
        assert_eq!(moe_layout(true, false, 8, 1, None), MoeLayout { ep: None, attention_dp: false });
        assert_eq!(moe_layout(true, false, 8, 1, Some(2)), MoeLayout { ep: Some(2), attention_dp: false });
        // PyTorch backend (v1.0): attention DP over the GPUs, EP = the GPUs unless printed.
        assert_eq!(moe_layout(true, true, 8, 1, None), MoeLayout { ep: Some(8), attention_dp: true });
        assert_eq!(moe_layout(true, true, 8, 1, Some(4)), MoeLayout { ep: Some(4), attention_dp: true });
        assert_eq!(moe_layout(true, true, 1, 1, None), MoeLayout { ep: None, attention_dp: false });
        assert_eq!(moe_layout(true, true, 2, 4, None), MoeLayout { ep: Some(2), attention_dp: false });
        // Dense models: neither.
        assert_eq!(moe_layout(false, true, 8, 1, Some(8)), MoeLayout { ep: None, attention_dp: false });
        assert!(pytorch_backend("perf-overview (doc states NEW for v1.0)") && pytorch_backend("v1.0") && pytorch_backend("1.1.0"));
        assert!(!pytorch_backend("v0.17") && !pytorch_backend("v0.14.0") && !pytorch_backend(""));
    }
}
