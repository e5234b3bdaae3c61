//! The scenario of a run record (`record::Scenario`): as `gpuplan measure` builds it
//! (`run_scenario`: the flags laid over the `--scenario` file, a record's scenario keys flat,
//! checked, with dp, the global batch or the accumulation filled in, and a model file kept by
//! absolute path and text), and back as the scenario `predict` would take (`scenario_wire`,
//! `scenario`) for `validate`.

use std::path::Path;

use serde::Deserialize;

use crate::scenario::{OptionsWire, ParallelWire, ScenarioWire, WorkloadWire};
use crate::ConfigError;
use gpuplan_core::record::{ModelFile, RunRecord, Scenario};

/// The scenario keys of a run record, flat: a `measure --scenario` file, or the flags (`None`:
/// not given).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunScenarioWire {
    pub model: Option<String>,
    pub system: Option<String>,
    pub n_gpus: Option<u32>,
    pub tp: Option<u32>,
    pub sp: Option<bool>,
    pub pp: Option<u32>,
    pub dp: Option<u32>,
    pub zero: Option<u32>,
    pub mode: Option<String>,
    pub micro_batch: Option<u64>,
    pub grad_accum: Option<u64>,
    pub global_batch: Option<u64>,
    pub seq: Option<u64>,
    pub batch: Option<u64>,
    pub kv_len: Option<u64>,
    pub recompute: Option<String>,
    pub stack: Option<String>,
    pub precision: Option<String>,
}

/// `v`, when given, is one of `allowed`; the error names `what`.
pub fn one_of(what: &str, v: &Option<String>, allowed: &[&str]) -> Result<(), String> {
    match v {
        Some(x) if !allowed.contains(&x.as_str()) => Err(format!("`{what}` = `{x}` is not known\nhint: one of: {}", allowed.join(", "))),
        _ => Ok(()),
    }
}

/// The record's scenario: `flags` over the file `file` (when given). A training run's missing one
/// of micro-batch x accumulation x dp = global batch is filled in; dp defaults to what tp and pp
/// leave of the GPUs.
pub fn run_scenario(flags: RunScenarioWire, file: Option<&Path>) -> Result<Scenario, String> {
    let (n, f) = (flags, read(file)?);
    let mode = n.mode.or(f.mode).unwrap_or_else(|| "train".into());
    one_of("mode", &Some(mode.clone()), &["train", "prefill", "decode", "serve"])?;
    let recompute = n.recompute.or(f.recompute);
    one_of("recompute", &recompute, &["none", "selective", "full"])?;
    let precision = n.precision.or(f.precision);
    one_of("precision", &precision, &["bf16", "fp8", "fp4", "fp16", "fp32"])?;
    let n_gpus = n.n_gpus.or(f.n_gpus).unwrap_or(1);
    let tp = n.tp.or(f.tp).unwrap_or(1);
    let pp = n.pp.or(f.pp).unwrap_or(1);
    let dp = match n.dp.or(f.dp) {
        Some(d) => d,
        None => {
            if !n_gpus.is_multiple_of((tp * pp).max(1)) {
                return Err(format!("`--gpus` = {n_gpus} is not a multiple of tp x pp = {}", tp * pp));
            }
            n_gpus / (tp * pp).max(1)
        }
    };
    if tp * pp * dp != n_gpus {
        return Err(format!("tp x pp x dp = {} but `--gpus` = {n_gpus}", tp * pp * dp));
    }
    let micro_batch = n.micro_batch.or(f.micro_batch);
    let mut grad_accum = n.grad_accum.or(f.grad_accum);
    let mut global_batch = n.global_batch.or(f.global_batch);
    if mode == "train" {
        match (micro_batch, grad_accum, global_batch) {
            (Some(m), Some(g), None) => global_batch = Some(m * g * u64::from(dp)),
            (Some(m), None, Some(gb)) => {
                let per = m * u64::from(dp);
                if per == 0 || gb % per != 0 {
                    return Err(format!("`--global-batch` = {gb} is not a multiple of micro_batch x dp = {per}"));
                }
                grad_accum = Some(gb / per);
            }
            (Some(m), None, None) => {
                grad_accum = Some(1);
                global_batch = Some(m * u64::from(dp));
            }
            (Some(m), Some(g), Some(gb)) if m * g * u64::from(dp) != gb => {
                return Err(format!("micro_batch x grad_accum x dp = {} but `--global-batch` = {gb}", m * g * u64::from(dp)))
            }
            _ => {}
        }
    }
    let (model, model_file) = model_and_file(n.model.or(f.model))?;
    Ok(Scenario {
        model,
        model_file,
        system: n.system.or(f.system),
        n_gpus,
        tp,
        sp: n.sp.or(f.sp),
        pp,
        dp,
        zero: n.zero.or(f.zero).unwrap_or(0),
        mode,
        micro_batch,
        grad_accum,
        global_batch,
        seq: n.seq.or(f.seq),
        batch: n.batch.or(f.batch),
        kv_len: n.kv_len.or(f.kv_len),
        recompute,
        stack: n.stack.or(f.stack),
        precision,
    })
}

fn read(file: Option<&Path>) -> Result<RunScenarioWire, String> {
    let Some(p) = file else { return Ok(RunScenarioWire::default()) };
    let text = std::fs::read_to_string(p).map_err(|e| format!("cannot read `{}`: {e}", p.display()))?;
    toml::from_str(&text).map_err(|e| format!("`{}` is not a measure scenario: {e}", p.display()))
}

/// A model given as a file is kept by its absolute path and a copy of its text, so the record
/// validates from any folder and on any machine; a catalog name is kept as it is.
fn model_and_file(model: Option<String>) -> Result<(Option<String>, Option<ModelFile>), String> {
    let Some(m) = model else { return Ok((None, None)) };
    let p = Path::new(&m);
    if !p.is_file() {
        return Ok((Some(m), None));
    }
    let abs = std::fs::canonicalize(p).map_err(|e| format!("`--model` = `{m}`: cannot resolve the path: {e}"))?;
    let text = std::fs::read_to_string(&abs).map_err(|e| format!("`--model` = `{m}`: cannot read `{}`: {e}", abs.display()))?;
    let path = abs.display().to_string();
    Ok((Some(path.clone()), Some(ModelFile { path, text })))
}

/// The scenario a run record describes, with the record's own copy of its model file when it has
/// one, and its own host probe in place of the profile's host numbers when it took one
/// (`RunRecord::host_probe`; `scenario_with_host(.., false)` keeps the profile's).
pub fn scenario(r: &RunRecord, calibration: Option<&str>) -> Result<gpuplan_core::scenario::Scenario, ConfigError> {
    scenario_with_host(r, calibration, true)
}

/// [`scenario`], with the record's own host probe used only when `run_host_probe` is true.
pub fn scenario_with_host(r: &RunRecord, calibration: Option<&str>, run_host_probe: bool) -> Result<gpuplan_core::scenario::Scenario, ConfigError> {
    let model = match &r.scenario.model_file {
        Some(f) => Some(crate::model::model_from_text(Path::new(&f.path), &f.text)?),
        None => None,
    };
    let mut s = crate::scenario::build_with_model(&scenario_wire(r, calibration), None, model)?;
    if run_host_probe {
        let where_ = Path::new(r.run_id.as_deref().unwrap_or("(run record)"));
        let probe = r.host_probe().map_err(|e| {
            ConfigError::invalid(where_, "job.reported", "host_probe_*", e)
                .with_hint("a record's host probe is the four `host_probe_*_us` facts, and its speedometer the two `host_probe_speedo_us` and `host_steps_speedo_us`, of scenarios/workloads/hf_train.py --host-probe")
        })?;
        if let (Some(p), Some(host)) = (probe, s.profile.as_mut().and_then(|pr| pr.host.as_mut())) {
            *host = p.applied_to(host);
        }
    }
    Ok(s)
}

/// Price the run's power at its own card's idle (`RunRecord::own_idle_power`, the job's
/// `config idle_w=`) in place of the profile's or datasheet's `idle_w`: sets
/// `options.run_idle` (the power model's idle term only). Returns the watts used, `None` for a
/// record without them (the scenario is left as it was); an error names the bad key.
pub fn apply_run_idle(s: &mut gpuplan_core::scenario::Scenario, r: &RunRecord) -> Result<Option<gpuplan_core::units::Watts>, ConfigError> {
    let where_ = Path::new(r.run_id.as_deref().unwrap_or("(run record)"));
    let own = r.own_idle_power().map_err(|e| {
        ConfigError::invalid(where_, "job.reported", "idle_w", e)
            .with_hint("a record's own idle is the `idle_w` and `idle_energy_s` facts of scenarios/workloads/hf_train.py --host-probe; `validate --profile-idle` prices the profile's instead")
    })?;
    let Some((w, secs)) = own else {
        return Ok(None);
    };
    let card = r.machine.gpu_uuids.first().map_or_else(|| "its GPU".to_string(), |u| format!("GPU {u}"));
    let src = format!(
        "run {}'s own idle: NVML energy counter over {:.2} s with its CUDA context open, before the model (job.reported.idle_w, {card}, scenarios/workloads/hf_train.py)",
        r.run_id.as_deref().unwrap_or("?"),
        secs.value()
    );
    s.options.run_idle = Some(gpuplan_core::hardware::Sourced::new(w, gpuplan_core::hardware::Source::Measured(src)));
    Ok(Some(w))
}

/// The stack (and precision) a record is predicted under: see `RunRecord::hf_stack`.
pub fn record_stack(r: &RunRecord) -> Option<(&'static str, Option<&'static str>)> {
    r.hf_stack()
}

/// The scenario a run record describes, as `predict` would take it.
pub fn scenario_wire(r: &RunRecord, calibration: Option<&str>) -> ScenarioWire {
    let s = &r.scenario;
    let int = |x: u64| Some(x as i64);
    let trainer = r.hf_trainer();
    ScenarioWire {
        name: r.run_id.clone(),
        model: s.model.clone(),
        system: s.system.clone(),
        gpus: Some(s.n_gpus as i64),
        calibration: calibration.map(str::to_string),
        parallelism: ParallelWire {
            tp: Some(s.tp as i64),
            pp: Some(s.pp as i64),
            dp: Some(s.dp as i64),
            zero: Some(s.zero as i64),
            sp: s.sp,
            ..Default::default()
        },
        workload: WorkloadWire {
            mode: Some(s.mode.clone()),
            micro_batch: s.micro_batch.and_then(int),
            global_batch: s.global_batch.or_else(|| Some(s.micro_batch? * s.grad_accum.unwrap_or(1) * s.dp as u64)).and_then(int),
            seq: s.seq.and_then(int),
            batch: s.batch.and_then(int),
            kv_len: s.kv_len.and_then(int),
            precision: record_stack(r).map_or_else(|| s.precision.clone(), |(_, p)| p.map(str::to_string).or_else(|| s.precision.clone())),
            recompute: s.recompute.clone(),
            stack: record_stack(r).map_or_else(|| s.stack.clone(), |(st, _)| Some(st.to_string())),
            fp8_recipe: r.hf_fp8_recipe().map(str::to_string),
            decode_tokens: r.decode_tokens().filter(|_| s.mode == "decode").and_then(int),
            attention_dp: None,
            train_loop: trainer.then(|| "hf-trainer".to_string()),
            max_grad_norm: r.job.reported.get("max_grad_norm").filter(|_| trainer).and_then(|v| v.parse::<f64>().ok()),
            ..Default::default()
        },
        options: OptionsWire::default(),
        ..Default::default()
    }
}
