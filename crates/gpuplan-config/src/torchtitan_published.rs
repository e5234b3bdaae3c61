//! torchtitan's published Llama 3 / 3.1 training rows (`tests/data/published/torchtitan_training_dev.csv`,
//! a copy of `../shared/reference/torchtitan_training.csv` with `dev_row` and `split` in front) read as
//! wire rows, and each row mapped to a [`ScenarioWire`] or refused with the reason.
//!
//! The mapping and the defaults it applies where a row is silent are [`TORCHTITAN_DEFAULTS`]
//! (docs/published-analysis.md, "torchtitan's published rows"). Nothing here is fitted. Scoring is
//! `gpuplan_core::validate::torchtitan`.

use std::path::Path;

use serde::Deserialize;

use super::scenario::{OptionsWire, ParallelWire, ScenarioWire, WorkloadWire};
use super::ConfigError;
use gpuplan_core::validate::published::{Case, SkipKind, Skipped};
use gpuplan_core::validate::torchtitan::TitanCase;

/// One published row as the CSV holds it (every column text).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RowWire {
    #[serde(default)]
    pub dev_row: String,
    /// `fit` or `test` (fixed; `torchtitan_split.md`). Missing: `-`.
    #[serde(default)]
    pub split: String,
    pub source: String,
    pub table: String,
    pub gpu_system: String,
    pub model: String,
    pub num_gpus: String,
    pub fsdp: String,
    pub tp: String,
    pub pp: String,
    pub cp: String,
    pub local_batch: String,
    pub global_batch: String,
    pub seq_len: String,
    pub activation_checkpointing: String,
    pub techniques: String,
    pub precision: String,
    pub tokens_per_sec_per_gpu: String,
    pub memory_gib: String,
    pub mfu: String,
    pub config_complete: String,
    pub notes: String,
}

/// Whether a CSV header (its first line) is torchtitan's: it has the `techniques` and
/// `activation_checkpointing` columns the Megatron-Bridge rows lack.
pub fn is_torchtitan_header(first_line: &str) -> bool {
    let cols: Vec<&str> = first_line.trim().split(',').map(str::trim).collect();
    cols.contains(&"techniques") && cols.contains(&"activation_checkpointing")
}

/// Read every row of a torchtitan CSV (`dev_row` and `split` filled when absent: the row's index
/// and `-`).
pub fn read_rows(path: &Path) -> Result<Vec<RowWire>, ConfigError> {
    super::published::read_dev_rows(path, |r: &mut RowWire| (&mut r.dev_row, &mut r.split))
}

/// Published model names -> catalog models, where the name alone does not give it (see
/// [`catalog_model`]).
pub const MODELS: &[(&str, &str)] = &[
    ("Llama 3.1 8B", "llama-3.1-8b"),
    ("Llama 3.1 70B", "llama-3.1-70b"),
    ("Llama 3.1 405B", "llama-3.1-405b"),
    ("Llama 3 8B", "llama-3-8b"),
    ("Llama 3 70B", "llama-3-70b"),
];

/// The catalog model a published name means: the table above, else the name lower-cased with
/// spaces as `-` (`Llama3 8b` and `Llama 3 8B` -> `llama-3-8b`, `Qwen3 8B` -> `qwen3-8b`) where the
/// catalog has that model.
pub fn catalog_model(name: &str) -> Option<String> {
    let name = name.trim();
    if let Some(m) = MODELS.iter().find(|m| m.0.eq_ignore_ascii_case(name)) {
        return Some(m.1.to_string());
    }
    let mut key = name.to_lowercase().split_whitespace().collect::<Vec<_>>().join("-");
    // torchtitan writes `Llama3 70b` for Llama 3 70B.
    if let Some(rest) = key.strip_prefix("llama").filter(|r| r.starts_with(|c: char| c.is_ascii_digit())) {
        key = format!("llama-{rest}");
    }
    // A name, never a path.
    (!key.contains(['/', '\\']) && super::model::load_model(&key).is_ok()).then_some(key)
}

/// What a row's `gpu_system` text says (a substring) -> catalog system, first match first: the
/// Grand Teton 96 GB HBM2e H100 before any other H100, the NVL72 racks before their GPUs.
pub const SYSTEMS: &[(&str, &str)] = &[
    ("HBM2e", "grand-teton-h100"),
    ("Grand Teton", "grand-teton-h100"),
    ("GB300", "gb300-nvl72"),
    ("GB200", "gb200-nvl72"),
    ("B300", "dgx-b300"),
    ("B200", "dgx-b200"),
    ("H200", "hgx-h200"),
    ("H100", "dgx-h100"),
    ("A100", "dgx-a100"),
];

/// The sequence length torchtitan's Llama 3 train configs set where a row does not state one
/// (`train_configs/llama3_8b.toml`, `llama3_70b.toml`, `llama3_405b.toml`: `[training] seq_len = 8192`;
/// from memory, not re-read here).
pub const DEFAULT_SEQ: u64 = 8192;

/// Virtual stages per pipeline rank under torchtitan's multi-stage schedules (Interleaved 1F1B):
/// two (torchtitan's `generate_split_points` gives multi-stage schedules two stages per rank unless
/// split points are set: 0.1.0 `distributed/pipeline.py`, "by default each pipeline rank has 2
/// virtual stages", re-read; the December 2024 code from memory). The published 405B rows state no
/// split.
pub const INTERLEAVED_STAGES_PER_RANK: u64 = 2;

/// Whether a row's source is a December 2024 table (benchmarks/llama3_h100_202412_torchtitan.md,
/// docs/performance.md of December 2024), run with torchtitan's `train.py` of then, which kept the
/// loss eager beside the compiled blocks (`Workload::compile_loss`).
pub fn eager_loss_era(source: &str) -> bool {
    december_2024_table(source)
}

/// Whether a row's source is one of torchtitan's December 2024 tables (run with the torchtitan of
/// then: `experimental.pipeline_parallel_microbatches`, `train.py`'s eager loss).
pub fn december_2024_table(source: &str) -> bool {
    source.contains("llama3_h100_202412") || source.contains("Dec 2024")
}

/// (micro-batch size, micro-batches per step) of a pipelined row (`pp > 1`) with `local` sequences
/// per data-parallel rank and step and `stages` pipeline stages in all (pp x stages per rank), as
/// the torchtitan a row ran with split the local batch.
///
/// - December 2024 tables: `experimental.pipeline_parallel_microbatches` defaulted to `None`, and
///   `build_pipeline_schedule` then used the total number of stages,
///   `n_microbatches = pipeline_parallel_degree * len(stages)` (from memory: no release of that
///   torchtitan is on PyPI, 0.0.2's wheel and sdist hold no code; 0.1.0's `distributed/pipeline.py`
///   keeps the same `num_total_stages` line, now only for a warning, re-read). torch's schedules
///   split the batch into that many equal chunks (`_split_inputs`).
/// - torchtitan 0.1.0 on (June 2025; `distributed/pipeline.py` and `config_manager.py`, re-read):
///   `parallelism.pipeline_parallel_microbatch_size`, default 1, `n_microbatches = local_batch_size
///   // microbatch_size`.
pub fn pipeline_micro_batches(local: u64, stages: u64, december_2024: bool) -> Result<(u64, u64), Skipped> {
    if !december_2024 {
        return Ok((1, local));
    }
    if stages == 0 || local < stages || !local.is_multiple_of(stages) {
        return Err(Skipped::new(
            SkipKind::Unexpressible,
            format!("local batch {local} does not split into {stages} equal pipeline micro-batches (torchtitan's default of December 2024: one per stage)"),
        ));
    }
    Ok((local / stages, stages))
}

/// Defaults and readings applied to every row: (what, value, source).
pub const TORCHTITAN_DEFAULTS: &[(&str, &str, &str)] = &[
    (
        "stack",
        "torch-compile where the techniques name torch.compile, else torch-eager",
        "torchtitan compiles each TransformerBlock with torch.compile when [compile] is on",
    ),
    ("fsdp", "zero 3 (FSDP full shard) over the `fsdp` group: dp = fsdp (the row's GPUs = fsdp x tp x pp x cp)", "torchtitan applies FSDP2 fully_shard to every TransformerBlock and the root"),
    (
        "fsdp_precision",
        "fsdp_param_dtype bf16, fsdp_reduce_dtype fp32 (sharded fp32 parameters and optimizer, bf16 gathers and compute, no autocast, fp32 reduce-scatter); fsdp_float8_all_gather where the techniques name the float8 all-gather",
        "torchtitan 0.1.0-0.3.0 `training.mixed_precision_param = bfloat16`, `mixed_precision_reduce = float32` passed to FSDP2's MixedPrecisionPolicy (models/llama3/infra/parallelize.py `apply_fsdp`), and `maybe_enable_amp` returns no autocast under FSDP (distributed/utils.py); `float8.enable_fsdp_float8_all_gather` defaults to false (config_manager.py), so only rows that name it get it",
    ),
    (
        "loss",
        "compile_loss false on the December 2024 tables' torch.compile rows (eager_loss_era), compiled otherwise",
        "torchtitan's train.py of late 2024 had `loss_fn = torch.compile(loss_fn)` commented out (\"compiling loss function causes CUDA errors, turning off for now\"; from memory); 0.1.0 (June 2025) `components/loss.py` compiles it with `training.compile` (re-read). The published memory agrees: the Dec 2024 compiled rows hold 5.0-5.4 GiB less than the eager ones where only the blocks' activations differ",
    ),
    ("seq", "8192 where not stated (DEFAULT_SEQ)", "torchtitan train_configs/llama3_{8b,70b,405b}.toml seq_len = 8192 (from memory)"),
    (
        "batch",
        "pp 1: micro-batch = local_batch, one micro-batch per step; pp > 1, December 2024 tables: one micro-batch per pipeline stage (pp x stages per rank) of local_batch / stages; pp > 1, later: micro-batch 1 and local_batch micro-batches per step; global batch = local_batch x fsdp (checked against a stated one)",
        "torchtitan's local_batch_size is per data-parallel rank and step (no gradient accumulation in these runs). December 2024: experimental.pipeline_parallel_microbatches default None -> n_microbatches = pipeline_parallel_degree x len(stages) in build_pipeline_schedule (from memory; no release of it on PyPI). torchtitan 0.1.0 (June 2025) distributed/pipeline.py: n_microbatches = local_batch_size // parallelism.pipeline_parallel_microbatch_size, default 1 (re-read)",
    ),
    (
        "recompute",
        "full -> full; selective, selective op, per-op SAC, and the H200 rows' default (llama3_8b.toml: selective, op) -> selective-op; selective layer -> layer:2",
        "torchtitan 0.2.0 activation_checkpoint.py `_apply_op_sac` with llama3 parallelize.py `_op_sac_save_list` (re-read): saves the odd aten.mm outputs of each block, SDPA flash/efficient attention, TP reduce-scatters, aten.max; recomputes the rest. llama3_8b.toml's selective_ac_option = \"op\" (from memory; torchtitan 0.3.0 config_registry llama3_8b uses SelectiveAC, re-read). Layer SAC: `_apply_layer_sac`, every n-th block whole, selective_ac_option default \"2\" (re-read)",
    ),
    (
        "precision",
        "BF16 / None (bfloat16) -> bf16; FP8 (Float8 nn.Linear) and float8 tensorwise -> fp8 tensorwise; float8 rowwise -> fp8 rowwise",
        "torchao Float8Linear with dynamic tensorwise scaling is torchtitan's default float8 recipe (from memory); attention and the LM head stay bf16",
    ),
    ("async_tp", "AsyncTP / async TP -> tp_comm_overlap (each TP collective beside the next kernel); vanilla TP -> none", "torchtitan's async TP (SymmetricMemory micro-pipelined all-gather-matmul and matmul-reduce-scatter under torch.compile)"),
    ("sp", "true with tp > 1", "torchtitan's TP plan shards the norms' and residual's sequence dimension (Shard(1)) between the parallel regions"),
    (
        "pipeline",
        "1F1B -> 1f1b; Interleaved 1F1B -> interleaved with 2 stages per rank; uneven layer counts split as evenly as possible, the earlier ranks one more",
        "torchtitan pipeline_parallel_schedule; split points not published; 2 stages per rank by default (INTERLEAVED_STAGES_PER_RANK: torchtitan 0.1.0 generate_split_points, re-read)",
    ),
    ("cp", "all_gather (the keys and values gathered over the CP group)", "PyTorch's context_parallel rotate method default allgather, torchtitan context_parallel_rotate_method = allgather (from memory)"),
    ("memory", "published GiB (max over GPUs) against predicted peak GiB per GPU", "torchtitan logs max reserved memory (from memory)"),
];

/// A row mapped to a scenario.
#[derive(Debug)]
pub struct Mapped {
    pub wire: ScenarioWire,
    pub case: TitanCase,
}

fn int_cell(key: &str, s: &str) -> Result<Option<u64>, Skipped> {
    let s = s.trim().replace(',', "");
    if s.is_empty() {
        return Ok(None);
    }
    s.parse().map(Some).map_err(|_| Skipped::new(SkipKind::Incomplete, format!("`{key}` = `{s}` is not an integer")))
}

fn number_cell(s: &str) -> Option<f64> {
    s.trim().replace(',', "").parse().ok()
}

/// Recompute (gpuplan's) of a row's `activation_checkpointing`, or `None` when unknown. torchtitan's
/// `selective` with `selective_ac_option = "op"` is per-op selective checkpointing
/// (`selective-op`): the rows that say `selective op` or `per-op SAC`, and those that say only
/// `selective` or cite the 8B config's default, since torchtitan's Llama 3 8B config sets
/// `selective_ac_option = "op"` (train_configs/llama3_8b.toml, from memory; torchtitan 0.3.0's
/// `models/llama3/config_registry.py` `llama3_8b` sets `SelectiveAC`, its per-op policy, re-read).
/// `selective layer` is layer checkpointing (`selective_ac_option` an integer: every n-th block
/// checkpointed whole, torchtitan 0.2.0 `_apply_layer_sac`) at the option's default, "2"
/// (`ActivationCheckpoint.selective_ac_option`, torchtitan 0.1.0 `config_manager.py` and 0.2.0
/// `config/job_config.py`, re-read): `layer:2`.
pub fn recompute_of(ac: &str) -> Option<&'static str> {
    let a = ac.trim().to_lowercase();
    if a == "full" {
        Some("full")
    } else if a == "selective layer" {
        Some("layer:2")
    } else if a.starts_with("selective") || a == "per-op sac" || a.starts_with("per llama3_8b.toml default") {
        Some("selective-op")
    } else if a == "none" {
        Some("none")
    } else {
        None
    }
}

/// (gpuplan precision, fp8 recipe) of a row's `precision`, or `None` when unknown.
pub fn precision_of(p: &str) -> Option<(&'static str, Option<&'static str>)> {
    let p = p.trim().to_lowercase();
    if p.starts_with("bf16") || p.contains("bfloat16") {
        Some(("bf16", None))
    } else if p.contains("rowwise") {
        Some(("fp8", Some("rowwise")))
    } else if p.contains("tensorwise") || p.starts_with("fp8 (float8 nn.linear)") {
        Some(("fp8", Some("tensorwise")))
    } else {
        None
    }
}

/// Decoder layers per pipeline rank, as even as possible, the earlier ranks one more.
fn even_layout(layers: u64, stages: u64) -> Vec<i64> {
    (0..stages).map(|s| (layers / stages + u64::from(s < layers % stages)) as i64).collect()
}

/// The technique tags of a mapped row (the groups `by technique` reports), read from its scenario.
fn technique_tags(w: &ScenarioWire) -> Vec<String> {
    let (p, wl) = (&w.parallelism, &w.workload);
    let above_one = |x: Option<i64>| x.is_some_and(|x| x > 1);
    let mut t = vec![if wl.stack.as_deref() == Some("torch-compile") { "torch.compile" } else { "eager" }.to_string(), "FSDP".to_string()];
    if above_one(p.tp) {
        t.push(if w.options.tp_comm_overlap == Some(true) { "TP async" } else { "TP" }.into());
    }
    if above_one(p.pp) {
        t.push(if p.schedule.as_deref() == Some("interleaved") { "PP interleaved 1F1B" } else { "PP 1F1B" }.into());
    }
    if above_one(p.cp) {
        t.push("CP".into());
    }
    t.push(match wl.fp8_recipe.as_deref() {
        Some(rc) if wl.precision.as_deref() == Some("fp8") => format!("float8 {rc}"),
        _ => "bf16".into(),
    });
    t.push(format!("AC {}", wl.recompute.as_deref().unwrap_or("none")));
    t
}

/// Map one row: the scenario it describes, or why it cannot be expressed (a layout gpuplan's own
/// check refuses is reported by the caller, which builds the scenario).
pub fn map_row(r: &RowWire) -> Result<Mapped, Skipped> {
    use SkipKind::*;
    let Some(model) = catalog_model(&r.model) else {
        return Err(Skipped::new(
            Unexpressible,
            format!("model `{}` has no catalog model (mapped: {}, or a models/ name)", r.model, MODELS.iter().map(|m| m.0).collect::<Vec<_>>().join(", ")),
        ));
    };
    let model = model.as_str();
    let Some(&(_, system)) = SYSTEMS.iter().find(|s| r.gpu_system.contains(s.0)) else {
        return Err(Skipped::new(
            Unsupported,
            format!("system `{}` is not mapped (a `gpu_system` naming one of: {})", r.gpu_system, SYSTEMS.iter().map(|s| s.0).collect::<Vec<_>>().join(", ")),
        ));
    };
    let n = int_cell("num_gpus", &r.num_gpus)?.unwrap_or(0);
    let fsdp = int_cell("fsdp", &r.fsdp)?.unwrap_or(1);
    let tp = int_cell("tp", &r.tp)?.unwrap_or(1);
    let pp = int_cell("pp", &r.pp)?.unwrap_or(1);
    let cp = int_cell("cp", &r.cp)?.unwrap_or(1);
    let Some(local) = int_cell("local_batch", &r.local_batch)? else {
        return Err(Skipped::new(Incomplete, "local batch not stated"));
    };
    if n == 0 || fsdp * tp * pp * cp != n {
        return Err(Skipped::new(Unexpressible, format!("gpus {n} != fsdp x tp x pp x cp = {fsdp} x {tp} x {pp} x {cp}")));
    }
    let Some(recompute) = recompute_of(&r.activation_checkpointing) else {
        return Err(Skipped::new(Unexpressible, format!("activation checkpointing `{}` is not mapped", r.activation_checkpointing)));
    };
    let Some((precision, recipe)) = precision_of(&r.precision) else {
        return Err(Skipped::new(Unexpressible, format!("precision `{}` is not mapped", r.precision)));
    };
    let measured = number_cell(&r.tokens_per_sec_per_gpu)
        .ok_or_else(|| Skipped::new(Incomplete, format!("tokens_per_sec_per_gpu = `{}` is not a number", r.tokens_per_sec_per_gpu)))?;
    let measured_memory_gib = number_cell(&r.memory_gib);
    let mut notes = Vec::new();
    let seq = match int_cell("seq_len", &r.seq_len)? {
        Some(s) => s,
        None => {
            notes.push(format!("seq {DEFAULT_SEQ} from torchtitan's llama3 train configs (not stated; from memory)"));
            DEFAULT_SEQ
        }
    };
    let compile = r.techniques.contains("torch.compile");
    let t = r.techniques.to_lowercase();
    let async_tp = t.contains("asynctp") || t.contains("async tp");
    let interleaved = r.techniques.contains("Interleaved");
    let vp = if interleaved { INTERLEAVED_STAGES_PER_RANK } else { 1 };
    let december_2024 = december_2024_table(&r.source);
    let (micro, n_micro) = if pp > 1 { pipeline_micro_batches(local, pp * vp, december_2024)? } else { (local, 1) };
    let gbs = local * fsdp;
    if let Some(stated) = int_cell("global_batch", &r.global_batch)? {
        if stated != gbs {
            notes.push(format!("published global batch {stated} != local_batch x fsdp = {gbs}; {gbs} used"));
        }
    }
    if pp > 1 && december_2024 {
        notes.push(format!(
            "{n_micro} micro-batches of {micro} per step (torchtitan of December 2024: pipeline_parallel_microbatches default = the {n_micro} stages, from memory)"
        ));
    } else if pp > 1 {
        notes.push(format!("{n_micro} micro-batches of 1 per step (pipeline_parallel_microbatch_size default 1, torchtitan 0.1.0)"));
    }
    let float8_all_gather = r.techniques.contains("float8 all-gather") && recipe == Some("tensorwise");
    let eager_loss = compile && eager_loss_era(&r.source);
    if eager_loss {
        notes.push("loss left eager beside the compiled blocks (torchtitan's train.py of December 2024, from memory)".into());
    }
    match recompute {
        "layer:2" => notes.push(format!(
            "`{}` run as torchtitan's layer checkpointing at its default selective_ac_option = \"2\" (layer:2: every 2nd block whole)",
            r.activation_checkpointing
        )),
        "selective-op" => notes.push(format!("`{}` run as torchtitan's per-op selective checkpointing (selective-op)", r.activation_checkpointing)),
        _ => {}
    }
    let layers = super::model::load_model(model).map(|m| m.n_layers).map_err(|e| Skipped::new(Unexpressible, format!("model `{model}`: {e}")))?;
    let pipeline_layout = (pp > 1 && !layers.is_multiple_of(pp * vp)).then(|| even_layout(layers, pp * vp));
    if let Some(l) = &pipeline_layout {
        notes.push(format!("{layers} layers over {} stages as {:?} (split points not published)", pp * vp, l));
    }
    let i = |x: u64| Some(x as i64);
    let wire = ScenarioWire {
        name: Some(format!("torchtitan dev_row {}", r.dev_row)),
        source: Some(r.source.clone()),
        model: Some(model.to_string()),
        system: Some(system.to_string()),
        gpus: i(n),
        parallelism: ParallelWire {
            tp: i(tp),
            pp: i(pp),
            cp: i(cp),
            dp: i(fsdp),
            vp: i(vp),
            zero: Some(3),
            sp: Some(tp > 1),
            schedule: (pp > 1).then(|| if interleaved { "interleaved" } else { "1f1b" }.to_string()),
            pipeline_layout,
            cp_comm: (cp > 1).then(|| "all_gather".to_string()),
            ..Default::default()
        },
        workload: WorkloadWire {
            mode: Some("train".into()),
            micro_batch: i(micro),
            global_batch: i(gbs),
            seq: i(seq),
            precision: Some(precision.into()),
            fp8_recipe: recipe.map(str::to_string),
            recompute: Some(recompute.into()),
            stack: Some(if compile { "torch-compile" } else { "torch-eager" }.into()),
            fsdp_param_dtype: Some("bf16".into()),
            fsdp_reduce_dtype: Some("fp32".into()),
            fsdp_float8_all_gather: float8_all_gather.then_some(true),
            compile_loss: eager_loss.then_some(false),
            ..Default::default()
        },
        options: OptionsWire { tp_comm_overlap: Some(async_tp && tp > 1), ..Default::default() },
        ..Default::default()
    };
    let techniques = technique_tags(&wire);
    let describe = format!(
        "{system} {model} {n} GPUs fsdp{fsdp} tp{tp} pp{pp}{} cp{cp} lbs{local} seq{seq} {} {}{} ac-{recompute}",
        if interleaved { "x2" } else { "" },
        if compile { "compile" } else { "eager" },
        match recipe {
            Some(rc) => format!("fp8-{rc}"),
            None => "bf16".into(),
        },
        if async_tp { " async-tp" } else { "" },
    );
    let case = Case {
        id: r.dev_row.clone(),
        split: r.split.clone(),
        system: system.to_string(),
        moe: false,
        precision: recipe.map_or("bf16".to_string(), |rc| format!("fp8-{rc}")),
        recipe: r.precision.clone(),
        gpus: n,
        model: model.to_string(),
        describe,
        measured,
        notes,
    };
    Ok(Mapped { wire, case: TitanCase { case, techniques, measured_memory_gib } })
}

/// A row's label for messages about rows that were not scored.
pub fn describe_row(r: &RowWire) -> String {
    format!("{} {} GPUs {} ({})", r.model, r.num_gpus, r.techniques, r.table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_of_the_published_cells() {
        assert_eq!(recompute_of("selective layer"), Some("layer:2"));
        assert_eq!(recompute_of("selective op"), Some("selective-op"));
        assert_eq!(recompute_of("selective"), Some("selective-op"));
        assert_eq!(recompute_of("per llama3_8b.toml default (not stated)"), Some("selective-op"));
        assert_eq!(recompute_of("per-op SAC"), Some("selective-op"));
        assert_eq!(recompute_of("full"), Some("full"));
        assert_eq!(recompute_of("offload"), None);
        assert_eq!(precision_of("None (bfloat16)"), Some(("bf16", None)));
        assert_eq!(precision_of("BF16 (not stated explicitly)"), Some(("bf16", None)));
        assert_eq!(precision_of("FP8 (Float8 nn.Linear) + BF16"), Some(("fp8", Some("tensorwise"))));
        assert_eq!(precision_of("float8 rowwise"), Some(("fp8", Some("rowwise"))));
        assert_eq!(precision_of("mxfp8"), None);
        assert_eq!(catalog_model("Llama3 70b").as_deref(), Some("llama-3-70b"));
        assert_eq!(catalog_model("Llama 3.1 405B").as_deref(), Some("llama-3.1-405b"));
        assert_eq!(catalog_model("Qwen3 8B").as_deref(), Some("qwen3-8b"));
        assert_eq!(catalog_model("Llama 4 Scout").as_deref(), Some("llama-4-scout"));
        assert_eq!(catalog_model("Falcon 180B"), None);
        let system = |t: &str| SYSTEMS.iter().find(|s| t.contains(s.0)).map(|s| s.1);
        assert_eq!(system("Grand Teton: 8x H100 per host; H100 SXM with 96GB HBM2e"), Some("grand-teton-h100"));
        assert_eq!(system("8x H200 per host"), Some("hgx-h200"));
        assert_eq!(system("GB200 NVL72"), Some("gb200-nvl72"));
        assert_eq!(system("DGX H100 (80 GB HBM3)"), Some("dgx-h100"));
        assert_eq!(even_layout(126, 8), vec![16, 16, 16, 16, 16, 16, 15, 15]);
        assert_eq!(even_layout(126, 16).iter().sum::<i64>(), 126);
        assert_eq!(pipeline_micro_batches(32, 16, true).unwrap(), (2, 16));
        assert_eq!(pipeline_micro_batches(32, 8, true).unwrap(), (4, 8));
        assert_eq!(pipeline_micro_batches(8, 8, true).unwrap(), (1, 8));
        assert_eq!(pipeline_micro_batches(32, 8, false).unwrap(), (1, 32));
        assert!(pipeline_micro_batches(12, 8, true).unwrap_err().reason.contains("equal pipeline micro-batches"));
        assert!(is_torchtitan_header(
            "dev_row,split,source,table,gpu_system,model,num_gpus,fsdp,tp,pp,cp,local_batch,global_batch,seq_len,activation_checkpointing,techniques"
        ));
        assert!(!is_torchtitan_header("dev_row,config_id,split,source_family,source,container,task,system,model"));
    }
}
