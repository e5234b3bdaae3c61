//! The plan `Request` from what the command line asks (`Asked`: the flags as plain values, not yet
//! checked): GPU counts, precisions, recompute policies, ZeRO stages, global and serving batches,
//! pinned dimensions, constraints, objective and prices. Each error names its flag.

use super::{Constraints, GlobalBatch, Objective, PlanMode, Pricing, Request, Space};
use crate::deploy::gpu_range;
use crate::hardware::Dtype;
use crate::scenario::Scenario;
use crate::workload::Recompute;

/// The flags a plan reads, as given (`None`: not given). Counts are signed, so that a zero or
/// negative one is reported by its flag.
#[derive(Debug, Clone, Default)]
pub struct Asked {
    pub gpus: Option<i64>,
    pub min_gpus: Option<u64>,
    pub max_gpus: Option<u64>,
    pub tp: Option<i64>,
    pub pp: Option<i64>,
    pub dp: Option<i64>,
    pub cp: Option<i64>,
    pub ep: Option<i64>,
    pub vp: Option<i64>,
    pub zero: Option<i64>,
    pub micro_batch: Option<i64>,
    pub global_batch: Option<i64>,
    pub min_global_batch: Option<u64>,
    pub max_global_batch: Option<u64>,
    /// Serving: the batch per replica.
    pub batch: Option<i64>,
    pub precision: Option<String>,
    pub allow_fp8: bool,
    pub allow_fp4: bool,
    pub recompute: Option<String>,
    pub max_micro_batch: u64,
    pub max_batch: u64,
    pub max_vp: u32,
    pub max_cp: u32,
    pub min_memory_headroom: f64,
    pub max_node_power_w: Option<f64>,
    pub max_cluster_power_kw: Option<f64>,
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    /// throughput, time-to-train, cost, tokens-per-joule.
    pub objective: String,
    pub tokens: Option<f64>,
    /// The goodput model's inputs (`--goodput` and its flags), for `--objective goodput`.
    pub goodput: Option<crate::goodput::Params>,
    /// One price, or `system=price,...`.
    pub gpu_hour_usd: Option<String>,
    pub kwh_usd: Option<f64>,
}

fn positive(name: &str, v: Option<i64>) -> Result<Option<u32>, String> {
    match v {
        None => Ok(None),
        Some(x) if x >= 1 => Ok(Some(x as u32)),
        Some(x) => Err(format!("`--{name}` = {x} must be a positive integer")),
    }
}

/// GPU counts to try: `--gpus`, or a range (powers of two, whole nodes times powers of two, and
/// the ends). A range wins over a scenario file's GPU count.
pub fn gpu_counts(gpus: Option<i64>, min_gpus: Option<u64>, max_gpus: Option<u64>, gpus_per_node: u64) -> Result<Vec<u64>, String> {
    let gpus = if min_gpus.is_some() || max_gpus.is_some() { None } else { gpus };
    match (gpus, min_gpus, max_gpus) {
        (Some(g), None, None) if g >= 1 => Ok(vec![g as u64]),
        (Some(g), None, None) => Err(format!("`--gpus` = {g} must be a positive integer")),
        (None, Some(lo), Some(hi)) if lo >= 1 && lo <= hi => Ok(gpu_range(lo, hi, gpus_per_node)),
        (None, Some(lo), Some(hi)) => Err(format!("`--min-gpus` = {lo} must be at least 1 and at most `--max-gpus` = {hi}")),
        _ => Err("give `--gpus N`, or both `--min-gpus` and `--max-gpus`\nhint: a range plans over powers of two and whole nodes times powers of two".into()),
    }
}

fn objective(a: &Asked) -> Result<Objective, String> {
    Ok(match a.objective.as_str() {
        "throughput" => Objective::Throughput,
        "time-to-train" => Objective::TimeToTrain { tokens: a.tokens.ok_or("`--objective time-to-train` needs `--tokens T`\nhint: e.g. `--tokens 15e12`")? },
        "cost" => Objective::Cost,
        "tokens-per-joule" => Objective::TokensPerJoule,
        "goodput" => Objective::Goodput(a.goodput.ok_or(
            "`--objective goodput` needs the goodput inputs\nhint: add `--goodput --storage-gb-per-s BW --restart-s S` (and optionally --reliability, --failure-rate, --recovery replica)",
        )?),
        other => return Err(format!("`--objective` = `{other}` is not known\nhint: one of: throughput, time-to-train, cost, tokens-per-joule, goodput")),
    })
}

/// `--gpu-hour-usd`: one price, or `system=price,...` (for `compare`); the price of `system`.
pub fn gpu_hour_price(text: Option<&str>, system: &str) -> Result<Option<f64>, String> {
    let Some(text) = text else { return Ok(None) };
    let parse = |v: &str| -> Result<f64, String> {
        let x: f64 = v.trim().parse().map_err(|e| format!("`--gpu-hour-usd` value `{v}` is not a number: {e}"))?;
        if !(x >= 0.0 && x.is_finite()) {
            return Err(format!("`--gpu-hour-usd` = {x} must be a non-negative price"));
        }
        Ok(x)
    };
    if !text.contains('=') {
        return parse(text).map(Some);
    }
    for part in text.split(',') {
        let (k, v) = part.split_once('=').ok_or_else(|| format!("`--gpu-hour-usd` entry `{part}` is not `system=price`"))?;
        if k.trim() == system {
            return parse(v).map(Some);
        }
    }
    Err(format!("`--gpu-hour-usd` has no price for `{system}`\nhint: give `{system}=PRICE` in the list"))
}

/// The plan request of `a` over `base` (its system's node size and name) in `mode`.
pub fn request(a: &Asked, base: &Scenario, mode: PlanMode) -> Result<Request, String> {
    let n_gpus = gpu_counts(a.gpus, a.min_gpus, a.max_gpus, base.system.gpus_per_node as u64)?;
    let mut precision = match &a.precision {
        Some(p) => vec![Dtype::parse(p).ok_or_else(|| format!("`--precision` = `{p}` is not known\nhint: one of: bf16, fp16, fp8, fp4"))?],
        None => vec![Dtype::Bf16],
    };
    if a.precision.is_none() {
        // On a GPU without the path (A100 and fp8), the prune rule counts them; `compare` keeps going.
        for (allow, d) in [(a.allow_fp8, Dtype::Fp8), (a.allow_fp4, Dtype::Fp4)] {
            if allow {
                precision.push(d);
            }
        }
    }
    let recompute = match a.recompute.as_deref() {
        None => vec![Recompute::None, Recompute::Selective, Recompute::Full],
        Some("none") => vec![Recompute::None],
        Some("selective") => vec![Recompute::Selective],
        Some("full") => vec![Recompute::Full],
        Some("selective-op") => {
            if let Some(why) = crate::workload::selective_op_unsupported(&base.model, &base.workload) {
                return Err(format!("`--recompute` = `selective-op` {why}\nhint: torchtitan's per-op policy runs on dense transformers under --stack torch-eager, torch-compile, hf-eager or hf-compile"));
            }
            vec![Recompute::SelectiveOp]
        }
        Some(r) => match Recompute::parse(r) {
            Some(rc @ Recompute::Layers(_)) if base.workload.stack.torch() => vec![rc],
            Some(Recompute::Layers(_)) => {
                return Err(format!(
                    "`--recompute` = `{r}` is torchtitan's layer checkpointing for PyTorch training; the stack is {}\nhint: use --stack torch-eager, torch-compile, hf-eager or hf-compile",
                    base.workload.stack.name()
                ))
            }
            _ => return Err(format!("`--recompute` = `{r}` is not known\nhint: one of: {} (N >= 1)", Recompute::NAMES)),
        },
    };
    let zero = match a.zero {
        None => vec![0, 1, 2, 3],
        Some(z @ 0..=3) => vec![z as u32],
        Some(z) => return Err(format!("`--zero` = {z} is not a ZeRO stage\nhint: 0, 1, 2 or 3")),
    };
    let global_batch = match (a.global_batch, a.min_global_batch, a.max_global_batch) {
        (Some(g), None, None) if g >= 1 => GlobalBatch::Fixed(g as u64),
        (None, Some(lo), Some(hi)) if lo >= 1 && lo <= hi => GlobalBatch::Range(lo, hi),
        _ if mode == PlanMode::Serve => GlobalBatch::Unset,
        (None, None, None) => {
            return Err(
                "training plans need a global batch\nhint: give `--global-batch B` (sequences per step), or `--min-global-batch` and `--max-global-batch`"
                    .into(),
            )
        }
        _ => return Err("give either `--global-batch B` or both `--min-global-batch` and `--max-global-batch` (min <= max)".into()),
    };
    let serve_batches: Vec<u64> = match a.batch {
        Some(b) if b >= 1 => vec![b as u64],
        Some(b) => return Err(format!("`--batch` = {b} must be a positive integer")),
        None => (0..40).map(|i| 1u64 << i).take_while(|b| *b <= a.max_batch.max(1)).collect(),
    };
    if !(0.0..1.0).contains(&a.min_memory_headroom) {
        return Err(format!("`--min-memory-headroom` = {} must be a fraction in [0, 1)", a.min_memory_headroom));
    }
    let space = Space {
        mode: Some(mode),
        n_gpus,
        tp: positive("tp", a.tp)?,
        pp: positive("pp", a.pp)?,
        dp: positive("dp", a.dp)?,
        cp: positive("cp", a.cp)?,
        ep: positive("ep", a.ep)?,
        vp: positive("vp", a.vp)?,
        zero,
        recompute,
        precision,
        micro_batch: positive("micro-batch", a.micro_batch)?.map(u64::from),
        max_micro_batch: a.max_micro_batch,
        global_batch,
        serve_batches,
        max_vp: a.max_vp,
        max_cp: a.max_cp,
    };
    let constraints = Constraints {
        min_memory_headroom: a.min_memory_headroom,
        max_node_power_w: a.max_node_power_w,
        max_cluster_power_w: a.max_cluster_power_kw.map(|k| k * 1e3),
        max_ttft_s: a.ttft_ms.map(|m| m / 1e3),
        max_tpot_s: a.tpot_ms.map(|m| m / 1e3),
    };
    let objective = objective(a)?;
    let pricing = Pricing { gpu_hour_usd: gpu_hour_price(a.gpu_hour_usd.as_deref(), &base.system.name)?, kwh_usd: a.kwh_usd };
    if objective == Objective::Cost && !pricing.priced() {
        return Err("the `cost` objective needs a GPU-hour price\nhint: give `--gpu-hour-usd PRICE` (gpuplan has no built-in prices)".into());
    }
    Ok(Request { mode, space, constraints, objective, pricing })
}
