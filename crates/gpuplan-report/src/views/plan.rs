//! `gpuplan plan`'s outputs: the pruning summary, the ranked table with its Pareto front, CSV,
//! the JSON `plan` object, and batch advice.

use gpuplan_core::plan::{self, advice, PlanMode, PlanResult, Request};
use gpuplan_core::scenario::Scenario;

/// The `plan` object added to each JSON line.
pub fn plan_json(rank: usize, r: &plan::Ranked, req: &Request) -> serde_json::Value {
    let m = &r.metrics;
    serde_json::json!({
        "rank": rank,
        "objective": req.objective.name(),
        "score": r.score,
        "config": r.candidate.label(req.mode),
        "gradient_accumulation": r.candidate.gradient_accumulation(),
        "memory_headroom": m.headroom(),
        "cluster_power_w": m.cluster_power_w,
        "tokens_per_joule": m.tokens_per_joule(),
        "usd_per_million_tokens": m.usd_per_million_tokens,
        "time_to_train_s": req.tokens().map(|t| t / m.tokens_per_s),
        "ttft_s": m.ttft_s,
        "tpot_s": m.tpot_s,
        "goodput_fraction": m.goodput,
    })
}

pub fn summary(base: &Scenario, req: &Request, r: &PlanResult) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let gpus = req.space.n_gpus.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
    let what = match req.mode {
        PlanMode::Train => format!("training, seq {}", base.workload.seq),
        PlanMode::Serve => format!("serving, prompt {} / context {}", base.workload.seq, base.workload.kv_len.max(base.workload.seq)),
    };
    let _ = writeln!(
        o,
        "plan: {} on {} x {} ({what}), stack {}, objective {}",
        base.model.name,
        gpus,
        base.system.display_name,
        base.workload.stack.name(),
        req.objective.name()
    );
    let _ = writeln!(o, "  {} configurations: {} pruned, {} predicted, {} feasible", r.enumerated, r.pruned_total(), r.predicted, r.ranked.len());
    for (reason, n) in &r.pruned {
        let _ = writeln!(o, "    {:>9}  {}", n, reason.describe());
    }
    let _ = writeln!(o);
    o
}

pub fn gib(b: f64) -> f64 {
    b / (1u64 << 30) as f64
}

pub fn duration(s: f64) -> String {
    if s >= 86400.0 {
        format!("{:.1} d", s / 86400.0)
    } else if s >= 3600.0 {
        format!("{:.1} h", s / 3600.0)
    } else {
        format!("{:.0} s", s)
    }
}

/// The ranked table; `tokens` (from `--tokens`) adds a time-to-train column under any objective.
pub fn table(r: &PlanResult, shown: usize, req: &Request, base: &Scenario, tokens: Option<f64>) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    if r.ranked.is_empty() {
        let _ = writeln!(o, "no feasible configuration");
        return o;
    }
    let priced = req.pricing.priced();
    let ttt = req.tokens().or(tokens);
    let serve = req.mode == PlanMode::Serve;
    let width = r.ranked[..shown].iter().map(|x| x.candidate.label(req.mode).len()).max().unwrap_or(10).max(6);
    let gpus_col = req.space.n_gpus.len() > 1;
    let mut head = format!("{:>4}  ", "rank");
    if gpus_col {
        let _ = write!(head, "{:>6}  ", "gpus");
    }
    let _ = write!(head, "{:<width$}  {:>12}  {:>6}  {:>18}  {:>7}", "config", "tokens/s", "MFU", "mem/GPU (free)", "W/GPU");
    if serve {
        let _ = write!(head, "  {:>9}  {:>9}", "TTFT", "TPOT");
    }
    if priced {
        let _ = write!(head, "  {:>10}", "$/1M tok");
    }
    let _ = write!(head, "  {:>9}", "tok/J");
    if ttt.is_some() {
        let _ = write!(head, "  {:>9}", "to train");
    }
    let goodput = r.ranked[..shown].iter().any(|x| x.metrics.goodput.is_some());
    if goodput {
        let _ = write!(head, "  {:>7}  {:>12}", "goodput", "good tok/s");
    }
    let _ = write!(head, "  bottleneck");
    let _ = writeln!(o, "{head}");
    for (i, x) in r.ranked[..shown].iter().enumerate() {
        let m = &x.metrics;
        let mut line = format!("{:>4}  ", i + 1);
        if gpus_col {
            let _ = write!(line, "{:>6}  ", x.candidate.n_gpus);
        }
        let mem = format!("{:.1} GiB ({:.0}%)", gib(m.memory_bytes), 100.0 * m.headroom());
        let _ = write!(line, "{:<width$}  {:>12.0}  {:>5.1}%  {:>18}  {:>7.0}", x.candidate.label(req.mode), m.tokens_per_s, 100.0 * m.mfu, mem, m.gpu_power_w);
        if serve {
            let ms = |v: Option<f64>| v.map_or("-".to_string(), |s| format!("{:.1} ms", s * 1e3));
            let _ = write!(line, "  {:>9}  {:>9}", ms(m.ttft_s), ms(m.tpot_s));
        }
        if priced {
            let _ = write!(line, "  {:>10.4}", m.usd_per_million_tokens.unwrap_or(f64::NAN));
        }
        let _ = write!(line, "  {:>9.2}", m.tokens_per_joule());
        if let Some(t) = ttt {
            let _ = write!(line, "  {:>9}", duration(t / m.tokens_per_s));
        }
        if goodput {
            let f = m.goodput.unwrap_or(f64::NAN);
            let _ = write!(line, "  {:>6.2}%  {:>12.0}", 100.0 * f, f * m.tokens_per_s);
        }
        let _ = write!(line, "  {}", m.bottleneck);
        let _ = writeln!(o, "{line}");
    }
    if r.ranked.len() > shown {
        let _ = writeln!(o, "  ... {} more feasible (--top N, --top 0 for all)", r.ranked.len() - shown);
    }
    let front = plan::pareto(&r.ranked, priced);
    let _ = writeln!(o);
    let against = if priced { "$ per 1M tokens" } else { "tokens per joule" };
    let _ = writeln!(o, "Pareto front, tokens/s vs {against} ({} configurations):", front.len());
    for i in front.iter().take(12) {
        let x = &r.ranked[*i];
        let m = &x.metrics;
        let second = if priced { format!("${:.4}/1M tok", m.usd_per_million_tokens.unwrap_or(f64::NAN)) } else { format!("{:.2} tok/J", m.tokens_per_joule()) };
        let gpus = if gpus_col { format!("{:>6} GPUs  ", x.candidate.n_gpus) } else { String::new() };
        let _ = writeln!(o, "  {gpus}{:<width$}  {:>12.0} tok/s  {second}", x.candidate.label(req.mode), m.tokens_per_s);
    }
    if front.len() > 12 {
        let _ = writeln!(o, "  ... {} more on the front", front.len() - 12);
    }
    if !priced {
        let _ = writeln!(o, "(no cost column: give --gpu-hour-usd PRICE; gpuplan has no built-in prices)");
    }
    let _ = base;
    o
}

pub fn csv(rows: &[plan::Ranked], req: &Request, base: &Scenario) -> anyhow::Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "rank",
        "gpus",
        "tp",
        "pp",
        "vp",
        "dp",
        "cp",
        "ep",
        "zero",
        "recompute",
        "micro_batch",
        "global_batch",
        "gradient_accumulation",
        "precision",
        "step_time_s",
        "tokens_per_s",
        "mfu",
        "memory_bytes_per_gpu",
        "capacity_bytes",
        "memory_headroom",
        "gpu_power_w",
        "node_power_w",
        "cluster_power_w",
        "tokens_per_joule",
        "usd_per_million_tokens",
        "ttft_s",
        "tpot_s",
        "bottleneck",
        "score",
    ])?;
    let opt = |v: Option<f64>| v.map_or(String::new(), |x| x.to_string());
    for (i, r) in rows.iter().enumerate() {
        let c = &r.candidate;
        let m = &r.metrics;
        let (mb, gb) = match req.mode {
            PlanMode::Train => (c.micro_batch, c.global_batch.to_string()),
            PlanMode::Serve => (c.micro_batch, String::new()),
        };
        w.write_record([
            (i + 1).to_string(),
            c.n_gpus.to_string(),
            c.tp.to_string(),
            c.pp.to_string(),
            c.vp.to_string(),
            c.dp.to_string(),
            c.cp.to_string(),
            c.ep.to_string(),
            c.zero.to_string(),
            c.recompute.get().name().to_string(),
            mb.to_string(),
            gb,
            c.gradient_accumulation().to_string(),
            c.precision.get().name().to_string(),
            m.step_time_s.to_string(),
            m.tokens_per_s.to_string(),
            m.mfu.to_string(),
            m.memory_bytes.to_string(),
            m.capacity_bytes.to_string(),
            m.headroom().to_string(),
            m.gpu_power_w.to_string(),
            m.node_power_w.to_string(),
            m.cluster_power_w.to_string(),
            m.tokens_per_joule().to_string(),
            opt(m.usd_per_million_tokens),
            opt(m.ttft_s),
            opt(m.tpot_s),
            m.bottleneck.to_string(),
            r.score.to_string(),
        ])?;
    }
    let _ = base;
    Ok(String::from_utf8(w.into_inner().map_err(|e| anyhow::anyhow!("{e}"))?)?)
}

/// Batch advice for training as JSON.
pub fn advice_train_json(schema_version: u32, s: &Scenario, label: &str, a: &advice::TrainAdvice) -> serde_json::Value {
    serde_json::json!({
        "schema_version": schema_version,
        "kind": "batch_advice",
        "mode": "train",
        "layout": label,
        "recompute": s.workload.recompute.name(),
        "global_batch": s.workload.global_batch,
        "per_replica_batch": a.per_replica_batch,
        "largest_fitting_micro_batch": a.largest_fitting,
        "micro_batch": a.chosen.map(|c| c.0),
        "gradient_accumulation": a.chosen.map(|c| c.1),
        "curve": a.curve.iter().map(|p| serde_json::json!({
            "micro_batch": p.batch, "gradient_accumulation": p.accumulation, "memory_bytes_per_gpu": p.memory_bytes,
            "fits": p.fits, "tokens_per_s": p.tokens_per_s, "mfu": p.mfu })).collect::<Vec<_>>(),
    })
}

/// Batch advice for training as a table.
pub fn advice_train_table(s: &Scenario, a: &advice::TrainAdvice) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let pc = &s.parallel;
    let _ = writeln!(
        o,
        "batch advice: {} on {} x {}, layout tp{} pp{} dp{} cp{} zero{}, recompute {}, global batch {} ({} per replica)",
        s.model.name,
        s.n_gpus,
        s.system.display_name,
        pc.tp,
        pc.pp,
        pc.dp,
        pc.cp,
        pc.zero,
        s.workload.recompute.name(),
        s.workload.global_batch,
        a.per_replica_batch
    );
    match a.largest_fitting {
        Some(l) => {
            let _ = writeln!(o, "  largest micro-batch that fits: {l}");
        }
        None => {
            let _ = writeln!(o, "  not even micro-batch 1 fits");
        }
    }
    if let Some((mb, ga)) = a.chosen {
        let _ = writeln!(o, "  use micro-batch {mb} with {ga} accumulation steps ({mb} x {} DP x {ga} = {})", pc.dp, s.workload.global_batch);
    }
    let _ = writeln!(o);
    let _ = writeln!(o, "  {:>11}  {:>5}  {:>10}  {:>5}  {:>12}  {:>6}", "micro-batch", "accum", "mem/GPU", "fits", "tokens/s", "MFU");
    for p in &a.curve {
        let _ = writeln!(
            o,
            "  {:>11}  {:>5}  {:>6.1} GiB  {:>5}  {:>12}  {:>6}",
            p.batch,
            p.accumulation.map_or("-".into(), |g| g.to_string()),
            gib(p.memory_bytes),
            if p.fits { "yes" } else { "no" },
            p.tokens_per_s.filter(|_| p.fits).map_or("-".into(), |t| format!("{t:.0}")),
            p.mfu.filter(|_| p.fits).map_or("-".into(), |m| format!("{:.1}%", m * 100.0)),
        );
    }
    o
}

/// Batch advice for serving as JSON.
pub fn advice_serve_json(schema_version: u32, s: &Scenario, label: &str, a: &advice::ServeAdvice) -> serde_json::Value {
    serde_json::json!({
        "schema_version": schema_version,
        "kind": "batch_advice",
        "mode": "serve",
        "layout": label,
        "prompt_len": s.workload.seq,
        "kv_len": s.workload.kv_len,
        "largest_batch": a.largest,
        "largest_fitting_batch": a.largest_fitting,
        "curve": a.curve.iter().map(|p| serde_json::json!({
            "batch": p.batch, "memory_bytes_per_gpu": p.memory_bytes, "fits": p.fits,
            "tokens_per_s": p.tokens_per_s, "ttft_s": p.ttft_s, "tpot_s": p.tpot_s })).collect::<Vec<_>>(),
    })
}

/// Batch advice for serving as a table.
pub fn advice_serve_table(s: &Scenario, req: &Request, a: &advice::ServeAdvice) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let pc = &s.parallel;
    let _ = writeln!(
        o,
        "batch advice: serving {} on {} x {}, layout tp{} pp{} ({} replicas), {}, prompt {} tokens, decode at {} cached",
        s.model.name,
        s.n_gpus,
        s.system.display_name,
        pc.tp,
        pc.pp,
        pc.dp,
        s.workload.precision.name(),
        s.workload.seq,
        s.workload.kv_len
    );
    let target = |v: Option<f64>| v.map_or("none".to_string(), |t| format!("{:.1} ms", t * 1e3));
    let _ = writeln!(o, "  targets: TTFT {}, TPOT {}", target(req.constraints.max_ttft_s), target(req.constraints.max_tpot_s));
    match a.largest_fitting {
        Some(b) => {
            let _ = writeln!(o, "  largest batch whose KV cache fits: {b} per replica");
        }
        None => {
            let _ = writeln!(o, "  not even batch 1 fits");
        }
    }
    match a.largest {
        Some(b) => {
            let _ = writeln!(o, "  largest batch meeting the targets: {b} per replica");
        }
        None => {
            let _ = writeln!(o, "  no batch meets the targets");
        }
    }
    let _ = writeln!(o);
    let _ = writeln!(o, "  {:>6}  {:>10}  {:>5}  {:>10}  {:>10}  {:>12}", "batch", "mem/GPU", "fits", "TTFT", "TPOT", "tokens/s");
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |s| format!("{:.2} ms", s * 1e3));
    for p in &a.curve {
        let _ = writeln!(
            o,
            "  {:>6}  {:>6.1} GiB  {:>5}  {:>10}  {:>10}  {:>12}",
            p.batch,
            gib(p.memory_bytes),
            if p.fits { "yes" } else { "no" },
            ms(p.ttft_s),
            ms(p.tpot_s),
            p.tokens_per_s.map_or("-".into(), |t| format!("{t:.0}")),
        );
    }
    o
}
