//! `gpuplan predict`: the analytical prediction of one scenario, as a table or JSON.

use anyhow::Context;

use super::args::ScenarioArgs;
use super::Outcome;
use crate::analytic::{self, Prediction};
use crate::config::prediction::{EnergyDoc, MemoryDoc, PowerDoc, PredictionDoc, ScenarioDoc, SourceDoc};
use crate::scenario::Scenario;

/// Version of the JSON document `predict --json` prints (and `simulate`, `plan`).
pub use crate::config::prediction::SCHEMA_VERSION;

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
    /// Also print the Megatron-LM arguments that launch this layout
    #[arg(long)]
    pub megatron_args: bool,
    #[command(flatten)]
    pub goodput: super::goodput::GoodputArgs,
}

pub fn run(args: PredictArgs) -> anyhow::Result<Outcome> {
    let scenario = args.scenario.build()?;
    let goodput = args.goodput.setup(&scenario)?;
    let origin = args.scenario.scenario.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "command line".into());
    let pred = analytic::predict(&scenario).with_context(|| format!("{origin}: configuration cannot run"))?;
    let goodput = goodput.map(|g| super::goodput::document(&scenario, pred.tokens_per_s, &g));
    if args.json {
        let mut doc = document(&scenario, &pred);
        doc.goodput = goodput;
        // Through a `Value`, whose objects print their keys sorted (as `to_json`).
        println!("{}", serde_json::to_string_pretty(&serde_json::to_value(&doc)?)?);
    } else {
        print!("{}", table(&scenario, &pred, args.sources));
        if let Some(g) = &goodput {
            print!("{}", super::goodput::table(g));
        }
    }
    if args.megatron_args {
        // After the JSON document too, on stderr, so stdout stays one JSON object.
        let line = format!("megatron-lm args: {}", crate::config::megatron::args_line(&scenario));
        if args.json {
            eprintln!("{line}");
        } else {
            println!("\n{line}");
        }
    }
    Ok(if pred.memory.fits() { Outcome::Ok } else { Outcome::Infeasible })
}

/// The versioned JSON document, as a `serde_json::Value` (`simulate`, `plan` and `compare` add
/// their keys to it). The keys of DESIGN.md's contract keep their meaning.
pub fn to_json(s: &Scenario, p: &Prediction) -> serde_json::Value {
    serde_json::to_value(document(s, p)).expect("a prediction document serializes")
}

/// The typed `predict --json` document of one prediction.
pub fn document(s: &Scenario, p: &Prediction) -> PredictionDoc {
    let pc = &s.parallel;
    let w = &s.workload;
    PredictionDoc {
        schema_version: SCHEMA_VERSION,
        engine: "analytic".into(),
        scenario: ScenarioDoc {
            name: s.name.clone(),
            model: s.model.name.clone(),
            system: s.system.name.clone(),
            gpus: s.n_gpus,
            tp: pc.tp,
            pp: pc.pp,
            dp: pc.dp,
            cp: pc.cp,
            ep: pc.ep,
            etp: pc.etp,
            vp: pc.vp,
            sp: pc.sp,
            zero: pc.zero,
            mode: w.mode.name().into(),
            micro_batch: w.micro_batch,
            global_batch: w.global_batch,
            seq: w.seq,
            batch: w.batch,
            kv_len: w.kv_len,
            precision: w.precision.name().into(),
            recompute: w.recompute.name(),
            stack: w.stack.name().into(),
            calibration: s.profile.as_ref().map(|p| p.name.clone()),
            lora_rank: w.lora.as_ref().map(|l| l.rank),
            lora_targets: w.lora.as_ref().map(|l| l.targets.iter().map(|t| t.name().to_string()).collect()),
            attention_dp_batch: w.attention_dp,
        },
        step_time_s: p.step_time.value(),
        tokens_per_s: p.tokens_per_s,
        tokens_per_s_per_gpu: p.tokens_per_s / s.n_gpus as f64,
        tokens_per_step: p.tokens_per_step,
        mfu: p.mfu,
        hfu: p.hfu,
        model_flops_per_token: p.model_flops_per_token,
        n_microbatches: p.n_microbatches,
        bottleneck: p.bottleneck.into(),
        breakdown: p.breakdown.parts().iter().map(|(k, v)| (format!("{k}_s"), v.value())).collect(),
        memory: MemoryDoc {
            peak_bytes_per_gpu: p.memory.total().value(),
            capacity_bytes: p.memory.capacity.value(),
            fits: p.memory.fits(),
            peak_stage: p.memory.stage,
            components: p.memory.components().iter().map(|(k, v)| (format!("{k}_bytes"), v.value())).collect(),
        },
        power: PowerDoc {
            avg_w_per_gpu: p.power.gpu_power.value(),
            node_w: p.node_power.value(),
            sm_clock_mhz: p.power.clock.as_mhz(),
            power_capped: p.power.capped,
        },
        energy: EnergyDoc {
            j_per_token: p.energy_per_token.value(),
            j_per_token_facility: p.energy_per_token_facility.value(),
            j_per_step: p.energy_per_step.value(),
            kwh_per_million_tokens: p.energy_per_token.as_kwh() * 1e6,
        },
        goodput: None,
        sources: analytic::used_numbers(s)
            .iter()
            .map(|u| SourceDoc { name: u.name.clone(), value: u.value.clone(), kind: u.source.kind().into(), source: u.source.citation().into() })
            .collect(),
    }
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
            if let Some(l) = &w.lora {
                let adapters = crate::workload::lora::adapter_params(&s.model, l);
                let _ = writeln!(o, "  LoRA rank {} on {}: {:.1}M adapter parameters trained, base frozen", l.rank, l.target_names(), adapters / 1e6);
            }
        }
        _ => match w.attention_dp {
            Some(n) => {
                let _ = writeln!(
                    o,
                    "  batch={n} over {} attention-DP ranks ({} on the busiest) seq={} kv_len={}; experts over ep={} x etp={}",
                    s.parallel.dp, w.batch, w.seq, w.kv_len, s.parallel.ep, s.parallel.etp
                );
            }
            None => {
                let _ = writeln!(o, "  batch={} seq={} kv_len={}", w.batch, w.seq, w.kv_len);
            }
        },
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
