//! `gpuplan predict`: the analytical prediction of one scenario, as a table or JSON.

use anyhow::Context;

use super::args::ScenarioArgs;
use super::Outcome;
use crate::analytic::{self, Prediction};
use crate::scenario::Scenario;

/// Version of the JSON document `predict --json` prints (and `simulate`, `plan`).
pub const SCHEMA_VERSION: u32 = 1;

#[derive(clap::Args, Debug)]
pub struct PredictArgs {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// Print one JSON object instead of the table
    #[arg(long)]
    pub json: bool,
    /// List every hardware number used and where it came from
    #[arg(long)]
    pub sources: bool,
}

pub fn run(args: PredictArgs) -> anyhow::Result<Outcome> {
    let scenario = args.scenario.build()?;
    let origin = args.scenario.scenario.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "command line".into());
    let pred = analytic::predict(&scenario).with_context(|| format!("{origin}: configuration cannot run"))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&to_json(&scenario, &pred))?);
    } else {
        print!("{}", table(&scenario, &pred, args.sources));
    }
    Ok(if pred.memory.fits() { Outcome::Ok } else { Outcome::Infeasible })
}

/// The versioned JSON document. The keys of DESIGN.md's contract keep their meaning.
pub fn to_json(s: &Scenario, p: &Prediction) -> serde_json::Value {
    let pc = &s.parallel;
    let w = &s.workload;
    let breakdown: serde_json::Map<String, serde_json::Value> = p.breakdown.parts().iter().map(|(k, v)| (format!("{k}_s"), v.value().into())).collect();
    let memory_parts: serde_json::Map<String, serde_json::Value> =
        p.memory.components().iter().map(|(k, v)| (format!("{k}_bytes"), v.value().into())).collect();
    let sources: Vec<serde_json::Value> = analytic::used_numbers(s)
        .iter()
        .map(|u| serde_json::json!({ "name": u.name, "value": u.value, "kind": u.source.kind(), "source": u.source.citation() }))
        .collect();
    serde_json::json!({
        "schema_version": SCHEMA_VERSION,
        "engine": "analytic",
        "scenario": {
            "name": s.name,
            "model": s.model.name,
            "system": s.system.name,
            "gpus": s.n_gpus,
            "tp": pc.tp, "pp": pc.pp, "dp": pc.dp, "cp": pc.cp, "ep": pc.ep, "etp": pc.etp, "vp": pc.vp,
            "sp": pc.sp, "zero": pc.zero,
            "mode": w.mode.name(),
            "micro_batch": w.micro_batch, "global_batch": w.global_batch, "seq": w.seq,
            "batch": w.batch, "kv_len": w.kv_len,
            "precision": w.precision.name(), "recompute": w.recompute.name(), "stack": w.stack.name(),
            "calibration": s.profile.as_ref().map(|p| p.name.clone()),
        },
        "step_time_s": p.step_time.value(),
        "tokens_per_s": p.tokens_per_s,
        "tokens_per_s_per_gpu": p.tokens_per_s / s.n_gpus as f64,
        "tokens_per_step": p.tokens_per_step,
        "mfu": p.mfu,
        "hfu": p.hfu,
        "model_flops_per_token": p.model_flops_per_token,
        "n_microbatches": p.n_microbatches,
        "bottleneck": p.bottleneck,
        "breakdown": breakdown,
        "memory": {
            "peak_bytes_per_gpu": p.memory.total().value(),
            "capacity_bytes": p.memory.capacity.value(),
            "fits": p.memory.fits(),
            "peak_stage": p.memory.stage,
            "components": memory_parts,
        },
        "power": {
            "avg_w_per_gpu": p.power.gpu_power.value(),
            "node_w": p.node_power.value(),
            "sm_clock_mhz": p.power.clock.as_mhz(),
            "power_capped": p.power.capped,
        },
        "energy": {
            "j_per_token": p.energy_per_token.value(),
            "j_per_token_facility": p.energy_per_token_facility.value(),
            "j_per_step": p.energy_per_step.value(),
            "kwh_per_million_tokens": p.energy_per_token.as_kwh() * 1e6,
        },
        "sources": sources,
    })
}

/// The readable report: configuration, time breakdown, memory breakdown, power.
pub fn table(s: &Scenario, p: &Prediction, with_sources: bool) -> String {
    use std::fmt::Write;
    let pc = &s.parallel;
    let w = &s.workload;
    let mut o = String::new();
    let _ = writeln!(o, "{}  ({} on {} x {})", s.name, s.model.name, s.n_gpus, s.system.display_name);
    let _ = writeln!(
        o,
        "  tp={} pp={} dp={} cp={} ep={} vp={} sp={} zero={}  mode={} stack={} precision={} recompute={}",
        pc.tp,
        pc.pp,
        pc.dp,
        pc.cp,
        pc.ep,
        pc.vp,
        pc.sp,
        pc.zero,
        w.mode.name(),
        w.stack.name(),
        w.precision.name(),
        w.recompute.name()
    );
    match w.mode {
        crate::workload::Mode::Train => {
            let _ = writeln!(o, "  micro_batch={} global_batch={} seq={} ({} micro-batches per step)", w.micro_batch, w.global_batch, w.seq, p.n_microbatches);
        }
        _ => {
            let _ = writeln!(o, "  batch={} seq={} kv_len={}", w.batch, w.seq, w.kv_len);
        }
    }
    let _ = writeln!(o);
    let _ = writeln!(o, "  step time        {}", p.step_time);
    let _ = writeln!(o, "  tokens/s         {:.0}  ({:.0} per GPU)", p.tokens_per_s, p.tokens_per_s / s.n_gpus as f64);
    let _ = writeln!(o, "  MFU / HFU        {:.1}% / {:.1}%", p.mfu * 100.0, p.hfu * 100.0);
    let _ = writeln!(o, "  bottleneck       {}", p.bottleneck);
    let _ = writeln!(o);
    let _ = writeln!(o, "  time breakdown (critical path)");
    let total = p.step_time.value();
    for (k, v) in p.breakdown.parts() {
        if v.value() > 0.0 {
            let _ = writeln!(o, "    {:<14} {:>12}  {:>5.1}%", k, v.to_string(), 100.0 * v.value() / total);
        }
    }
    let _ = writeln!(o);
    let fits = if p.memory.fits() { "fits" } else { "DOES NOT FIT" };
    let _ = writeln!(o, "  memory per GPU   {} of {}  ({fits}; peak on stage {})", p.memory.total(), p.memory.capacity, p.memory.stage);
    for (k, v) in p.memory.components() {
        if v.value() > 0.0 {
            let _ = writeln!(o, "    {:<14} {:>12}", k, v.to_string());
        }
    }
    let _ = writeln!(o);
    let cap = if p.power.capped { ", TDP-capped" } else { "" };
    let _ = writeln!(
        o,
        "  power            {} per GPU at {:.0} MHz{cap}; {:.1} kW per node",
        p.power.gpu_power,
        p.power.clock.as_mhz(),
        p.node_power.value() / 1e3
    );
    let _ = writeln!(
        o,
        "  energy           {:.3} J/token ({:.3} kWh per 1M tokens; x{:.2} PUE at the facility)",
        p.energy_per_token.value(),
        p.energy_per_token.as_kwh() * 1e6,
        s.system.pue.value
    );
    if with_sources {
        let _ = writeln!(o);
        let _ = writeln!(o, "  numbers used");
        for u in &analytic::used_numbers(s) {
            let _ = writeln!(o, "    {:<40} {:>10}  [{}] {}", u.name, u.value, u.source.kind(), u.source.citation());
        }
    } else {
        let used = analytic::used_numbers(s);
        let kinds: std::collections::BTreeSet<&str> = used.iter().map(|u| u.source.kind()).collect();
        let _ = writeln!(o, "  sources          {} (--sources lists each number)", kinds.into_iter().collect::<Vec<_>>().join(", "));
    }
    o
}
