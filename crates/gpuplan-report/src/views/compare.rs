//! `gpuplan compare`'s table: each system's (or variant's) best configuration with the deltas
//! to the first row that has one.

use gpuplan_core::plan::{PlanMode, Ranked, Request};
use gpuplan_core::scenario::Scenario;

/// One system or variant and its best configuration.
pub struct Row {
    pub label: String,
    pub base: Scenario,
    pub req: Request,
    pub best: Option<Ranked>,
    pub feasible: usize,
}

/// `x` against the reference `r`, signed percent.
pub fn delta(x: f64, r: f64) -> String {
    if r != 0.0 {
        format!("{:+.1}%", 100.0 * (x / r - 1.0))
    } else {
        "-".into()
    }
}

/// The table of `rows` (at least one) in `mode`.
pub fn table(rows: &[Row], mode: PlanMode) -> String {
    use std::fmt::Write;
    let reference = rows.iter().find_map(|r| r.best.as_ref().map(|b| b.metrics.clone()));
    let mut o = String::new();
    let b0 = &rows[0].base;
    let what = match mode {
        PlanMode::Train => format!("training, seq {}", b0.workload.seq),
        PlanMode::Serve => format!("serving, prompt {}", b0.workload.seq),
    };
    let _ = writeln!(
        o,
        "compare: {} on {} GPUs ({what}), objective {}; best configuration per system, deltas against the first row",
        b0.model.name,
        rows[0].req.space.n_gpus.iter().map(u64::to_string).collect::<Vec<_>>().join("/"),
        rows[0].req.objective.name()
    );
    let _ = writeln!(o);
    let lw = rows.iter().map(|r| r.label.len()).max().unwrap_or(6).max(6);
    let cw = rows.iter().filter_map(|r| r.best.as_ref().map(|b| b.candidate.label(mode).len())).max().unwrap_or(6).max(6);
    let priced = rows.iter().any(|r| r.req.pricing.priced());
    let mut head = format!(
        "{:<lw$}  {:<cw$}  {:>12}  {:>8}  {:>6}  {:>9}  {:>7}  {:>8}  {:>7}",
        "system", "best config", "tokens/s", "delta", "MFU", "mem/GPU", "W/GPU", "tok/J", "delta"
    );
    if priced {
        let _ = write!(head, "  {:>9}  {:>8}", "$/1M tok", "delta");
    }
    let _ = write!(head, "  bottleneck");
    let _ = writeln!(o, "{head}");
    for r in rows {
        let Some(b) = &r.best else {
            let _ = writeln!(o, "{:<lw$}  no feasible configuration", r.label);
            continue;
        };
        let m = &b.metrics;
        let refm = reference.as_ref().expect("a row with a plan exists");
        let mut line = format!(
            "{:<lw$}  {:<cw$}  {:>12.0}  {:>8}  {:>5.1}%  {:>5.1} GiB  {:>7.0}  {:>8.2}  {:>7}",
            r.label,
            b.candidate.label(mode),
            m.tokens_per_s,
            delta(m.tokens_per_s, refm.tokens_per_s),
            m.mfu * 100.0,
            m.memory_bytes / (1u64 << 30) as f64,
            m.gpu_power_w,
            m.tokens_per_joule(),
            delta(m.tokens_per_joule(), refm.tokens_per_joule()),
        );
        if priced {
            match (m.usd_per_million_tokens, refm.usd_per_million_tokens) {
                (Some(c), Some(rc)) => {
                    let _ = write!(line, "  {:>9.4}  {:>8}", c, delta(c, rc));
                }
                (Some(c), None) => {
                    let _ = write!(line, "  {:>9.4}  {:>8}", c, "-");
                }
                _ => {
                    let _ = write!(line, "  {:>9}  {:>8}", "-", "-");
                }
            }
        }
        let _ = write!(line, "  {}", m.bottleneck);
        let _ = writeln!(o, "{line}");
    }
    o
}
