//! The claims audit: figures the seed documents expect (`scenarios/seed-claims.toml`) beside
//! gpuplan's prediction and the physical bound, each with a verdict and its reason.

use gpuplan_config::prediction::{finite, PredictionDoc};
use serde::Deserialize;

use super::Band;
use gpuplan_core::hardware::{Dtype, System};
use gpuplan_core::scenario::Scenario;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimsWire {
    pub claim: Vec<ClaimWire>,
}

/// One claimed figure: a range (`low` = `high` for a single value) of a quantity of a scenario or
/// of a system's hardware.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimWire {
    pub id: String,
    /// Seed document and section.
    pub source: String,
    /// The claim as the document words it.
    pub quote: String,
    pub quantity: String,
    pub low: f64,
    pub high: f64,
    /// Scenario file the claim is about (scenario quantities).
    #[serde(default)]
    pub scenario: Option<String>,
    /// System the claim is about (hardware quantities).
    #[serde(default)]
    pub system: Option<String>,
    /// Precision of a FLOP-rate claim (hardware `dense_tflops`).
    #[serde(default)]
    pub precision: Option<String>,
    /// How the claim was read (assumptions, ambiguity).
    #[serde(default)]
    pub note: Option<String>,
    /// Id of a claim about the same run in the other of `tokens_per_s` / `mfu`: the two are
    /// checked against each other through the model's FLOPs per token.
    #[serde(default)]
    pub pairs_with: Option<String>,
}

/// Whether a file under `scenarios/` is a claims file (it has `[[claim]]` tables) rather than a
/// scenario.
pub fn is_claims_file(text: &str) -> bool {
    text.lines().any(|l| l.trim() == "[[claim]]")
}

/// Quantities of a scenario's prediction.
pub const SCENARIO_QUANTITIES: [&str; 6] = ["tokens_per_s", "tokens_per_s_per_gpu", "mfu", "peak_memory_gb", "node_power_w", "gpus_power_w"];
/// Quantities of a system's hardware.
/// `hbm_bandwidth_gb_per_s`, `dense_tflops`, `nvlink_p2p_gb_per_s` and `allreduce_busbw_gb_per_s`
/// are what a benchmark achieves (predicted with the efficiency fractions); the others are
/// datasheet figures, compared with the system file.
pub const HARDWARE_QUANTITIES: [&str; 8] = [
    "hbm_bandwidth_gb_per_s",
    "dense_tflops",
    "nvlink_p2p_gb_per_s",
    "allreduce_busbw_gb_per_s",
    "hbm_bandwidth_spec_gb_per_s",
    "peak_tflops",
    "nvlink_bidir_gb_per_s",
    "gpu_tdp_w",
];

/// Unit each quantity is written in.
pub fn unit(quantity: &str) -> &'static str {
    match quantity {
        "tokens_per_s" => "tokens/s",
        "tokens_per_s_per_gpu" => "tokens/s per GPU",
        "mfu" => "fraction of peak",
        "peak_memory_gb" => "GB",
        "node_power_w" | "gpus_power_w" | "gpu_tdp_w" => "W",
        "dense_tflops" | "peak_tflops" => "TFLOP/s",
        _ => "GB/s",
    }
}

/// Tolerance for comparing quoted datasheet figures (rounding: 7.7 vs 8 TB/s is 4%).
pub const DATASHEET_TOLERANCE: f64 = 0.05;

/// What a claim is checked against.
pub enum Subject<'a> {
    Scenario {
        s: &'a Scenario,
        doc: &'a PredictionDoc,
    },
    Hardware {
        system: &'a System,
    },
    /// The scenario or system could not be loaded or predicted.
    Missing(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Consistent,
    Disagrees,
    Impossible,
    /// Contradicts another claim of the same document about the same run.
    Contradictory,
    Unchecked,
}

impl Verdict {
    pub fn name(&self) -> &'static str {
        match self {
            Verdict::Consistent => "consistent",
            Verdict::Disagrees => "disagrees",
            Verdict::Impossible => "IMPOSSIBLE",
            Verdict::Contradictory => "CONTRADICTORY",
            Verdict::Unchecked => "unchecked",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Checked {
    pub claim: ClaimWire,
    pub predicted: Option<f64>,
    /// Relative half-width of the prediction's band and where it comes from.
    pub tolerance: f64,
    pub tolerance_origin: String,
    /// Physical bound: value and what it is.
    pub bound: Option<(f64, String)>,
    pub verdict: Verdict,
    pub reasons: Vec<String>,
    /// Where the predicted figure's inputs came from.
    pub provenance: String,
    /// For `tokens_per_s` and `mfu` claims: the claimed range converted to the other quantity.
    pub implied: Option<(f64, f64)>,
}

/// A number of the document as its JSON text reads: NaN where it is written as `null`.
fn num(v: f64) -> f64 {
    finite(v).unwrap_or(f64::NAN)
}

fn fmt(v: f64) -> String {
    super::charts::short(v)
}

/// Check one claim.
pub fn check(c: &ClaimWire, subject: Subject, band: &Band) -> Checked {
    let mut out = Checked {
        claim: c.clone(),
        predicted: None,
        tolerance: 0.0,
        tolerance_origin: String::new(),
        bound: None,
        verdict: Verdict::Unchecked,
        reasons: vec![],
        provenance: String::new(),
        implied: None,
    };
    // (upper bound, lower bound)
    let mut lower: Option<(f64, String)> = None;
    match subject {
        Subject::Missing(why) => {
            out.reasons.push(why);
            return out;
        }
        Subject::Scenario { s, doc } => {
            out.provenance = super::provenance(&gpuplan_core::analytic::used_numbers(s));
            if !doc.memory.fits {
                out.reasons.push(format!(
                    "gpuplan predicts `{}` does not fit in memory ({} of {} GB per GPU)",
                    s.name,
                    fmt(num(doc.memory.peak_bytes_per_gpu) / 1e9),
                    fmt(num(doc.memory.capacity_bytes) / 1e9)
                ));
            }
            let peak = s.system.gpu.peak.get(s.workload.precision).map(|p| p.value.value()).unwrap_or(f64::NAN);
            let n = s.n_gpus as f64;
            let mfpt = num(doc.model_flops_per_token);
            let g = &s.system.gpu;
            let in_node = (s.n_gpus.min(s.system.gpus_per_node as u64)) as f64;
            let step = || (band.throughput(), format!("step-time MAPE {:.1}% on {} measured runs", band.step_time_pct, band.n_runs));
            match c.quantity.as_str() {
                "tokens_per_s" => {
                    out.predicted = Some(num(doc.tokens_per_s));
                    (out.tolerance, out.tolerance_origin) = step();
                    let mut b = (
                        n * peak / mfpt,
                        format!("{} GPUs x {} TFLOP/s {} / {} GFLOP per token", s.n_gpus, fmt(peak / 1e12), s.workload.precision.name(), fmt(mfpt / 1e9)),
                    );
                    if s.workload.mode == gpuplan_core::workload::Mode::Decode {
                        let weights = doc.memory.components.get("weights_bytes").map_or(f64::NAN, |v| num(*v));
                        let per_step = num(doc.tokens_per_step);
                        let hbm = g.hbm_bandwidth.value.value();
                        let hbm_bound = per_step * hbm / weights;
                        if hbm_bound < b.0 {
                            b = (
                                hbm_bound,
                                format!("every decode step reads each GPU's {:.1} GB of weights at {} GB/s (datasheet HBM)", weights / 1e9, fmt(hbm / 1e9)),
                            );
                        }
                    }
                    out.bound = Some(b);
                    let implied = |t: f64| t * mfpt / (n * peak);
                    out.implied = Some((implied(c.low), implied(c.high)));
                    out.reasons.push(format!(
                        "implies MFU {} ({} GFLOP per token, {} GPUs x {} TFLOP/s)",
                        pct_range(implied(c.low), implied(c.high)),
                        fmt(mfpt / 1e9),
                        s.n_gpus,
                        fmt(peak / 1e12)
                    ));
                }
                "tokens_per_s_per_gpu" => {
                    out.predicted = Some(num(doc.tokens_per_s_per_gpu));
                    (out.tolerance, out.tolerance_origin) = step();
                    out.bound =
                        Some((peak / mfpt, format!("{} TFLOP/s {} / {} GFLOP per token", fmt(peak / 1e12), s.workload.precision.name(), fmt(mfpt / 1e9))));
                    let implied = |t: f64| t * mfpt / peak;
                    out.implied = Some((implied(c.low), implied(c.high)));
                    out.reasons.push(format!("implies MFU {}", pct_range(implied(c.low), implied(c.high))));
                }
                "mfu" => {
                    out.predicted = Some(num(doc.mfu));
                    (out.tolerance, out.tolerance_origin) = step();
                    out.bound = Some((1.0, "100% of dense peak".into()));
                    let t = |m: f64| m * n * peak / mfpt;
                    out.implied = Some((t(c.low), t(c.high)));
                    out.reasons
                        .push(format!("implies {} tokens/s", if c.low == c.high { fmt(t(c.low)) } else { format!("{}-{}", fmt(t(c.low)), fmt(t(c.high))) }));
                    let ceiling = g.efficiency.gemm_max.value;
                    if c.high > ceiling {
                        out.reasons.push(format!(
                            "above the best large-GEMM efficiency gpuplan uses, {:.1}% [{}]",
                            ceiling * 100.0,
                            g.efficiency.gemm_max.source.kind()
                        ));
                    }
                }
                "peak_memory_gb" => {
                    out.predicted = Some(num(doc.memory.peak_bytes_per_gpu) / 1e9);
                    out.tolerance = band.memory();
                    out.tolerance_origin = format!("peak-memory MAPE {:.1}% on {} measured runs", band.memory_pct, band.n_runs);
                    out.bound = Some((num(doc.memory.capacity_bytes) / 1e9, "HBM capacity per GPU".into()));
                }
                "node_power_w" | "gpus_power_w" => {
                    let w = num(doc.power.avg_w_per_gpu);
                    let (k, host, what) =
                        if c.quantity == "node_power_w" { (in_node, s.system.host_power_per_node.value.value(), "node") } else { (n, 0.0, "GPUs") };
                    out.predicted = Some(if c.quantity == "node_power_w" { num(doc.power.node_w) } else { w * n });
                    out.tolerance = band.power();
                    out.tolerance_origin = format!("power MAPE {:.1}% on {} measured runs", band.power_pct, band.n_runs);
                    out.bound = Some((
                        k * g.tdp.value.value() + host,
                        format!("{k} x {} W TDP{}", fmt(g.tdp.value.value()), if host > 0.0 { format!(" + {} W host", fmt(host)) } else { String::new() }),
                    ));
                    lower = Some((
                        k * g.idle_power.value.value(),
                        format!("{k} GPUs idle at {} W ({}) ({what})", fmt(g.idle_power.value.value()), g.idle_power.source.kind()),
                    ));
                }
                other => out.reasons.push(format!("`{other}` is not a scenario quantity; one of: {}", SCENARIO_QUANTITIES.join(", "))),
            }
        }
        Subject::Hardware { system } => {
            let g = &system.gpu;
            let nvlink = g.nvlink_bandwidth.as_ref().zip(g.efficiency.nvlink_busbw.as_ref());
            let link = nvlink.map_or(0.0, |(l, _)| l.value.value() / 1e9);
            let ds = |_src: &str| {
                (
                    DATASHEET_TOLERANCE,
                    format!(
                        "{:.0}% for rounding of quoted datasheet figures (the system file's value, sources in calibration/systems/{}.toml)",
                        DATASHEET_TOLERANCE * 100.0,
                        g.name
                    ),
                )
            };
            let achieved = |kind: &str| {
                (
                    band.throughput(),
                    format!("step-time MAPE {:.1}% (measured-vs-predicted on {} runs), applied to a {kind} efficiency", band.step_time_pct, band.n_runs),
                )
            };
            match c.quantity.as_str() {
                "hbm_bandwidth_gb_per_s" => {
                    let e = &g.efficiency.hbm;
                    out.predicted = Some(g.hbm_bandwidth.value.value() / 1e9 * e.value);
                    (out.tolerance, out.tolerance_origin) = achieved(e.source.kind());
                    out.bound = Some((g.hbm_bandwidth.value.value() / 1e9, format!("datasheet HBM bandwidth [{}]", g.hbm_bandwidth.source.kind())));
                    out.provenance = format!("datasheet x hbm_fraction {:.3} [{}]", e.value, e.source.kind());
                }
                "dense_tflops" => {
                    let dt = c.precision.as_deref().and_then(Dtype::parse).unwrap_or(Dtype::Bf16);
                    match g.peak.get(dt) {
                        Some(p) => {
                            let e = &g.efficiency.gemm_max;
                            out.predicted = Some(p.value.value() / 1e12 * e.value);
                            (out.tolerance, out.tolerance_origin) = achieved(e.source.kind());
                            out.bound = Some((p.value.value() / 1e12, format!("dense {} peak [{}]", dt.name(), p.source.kind())));
                            out.provenance = format!("peak x gemm_max_fraction {:.3} [{}]", e.value, e.source.kind());
                        }
                        None => out.reasons.push(format!("{} has no {} tensor path", g.name, dt.name())),
                    }
                }
                "nvlink_p2p_gb_per_s" | "allreduce_busbw_gb_per_s" | "nvlink_bidir_gb_per_s" if nvlink.is_none() => {
                    out.reasons.push(format!("{} has no NVLink", g.name));
                }
                "nvlink_p2p_gb_per_s" | "allreduce_busbw_gb_per_s" => {
                    let Some((nv, e)) = nvlink else { return out };
                    out.predicted = Some(link * e.value);
                    (out.tolerance, out.tolerance_origin) = achieved(e.source.kind());
                    out.provenance = format!("NVLink one direction x nvlink_busbw_fraction {:.3} [{}]", e.value, e.source.kind());
                    if c.quantity == "allreduce_busbw_gb_per_s" && system.nvls {
                        let k = system.nvlink_domain_size as f64;
                        out.bound = Some((link * 2.0 * (k - 1.0) / k, format!("NVLS in-switch reduction: each GPU sends and receives the buffer once, bus bandwidth = 2(n-1)/n x {} GB/s one-direction NVLink, n = {}", fmt(link), system.nvlink_domain_size)));
                    } else {
                        out.bound = Some((link, format!("NVLink {} GB/s per GPU, one direction [{}]", fmt(link), nv.source.kind())));
                    }
                    if c.quantity == "nvlink_p2p_gb_per_s" {
                        out.reasons.push("predicted as the all-reduce link efficiency (gpuplan has no separate copy-engine figure)".into());
                    }
                }
                // Datasheet figures: the system file's value is both the prediction and the bound.
                "nvlink_bidir_gb_per_s" => {
                    let Some((nv, _)) = nvlink else { return out };
                    out.predicted = Some(2.0 * link);
                    (out.tolerance, out.tolerance_origin) = ds(nv.source.citation());
                    out.provenance = format!("NVLink both directions [{}]", nv.source.kind());
                }
                "gpu_tdp_w" => {
                    out.predicted = Some(g.tdp.value.value());
                    (out.tolerance, out.tolerance_origin) = ds(g.tdp.source.citation());
                    out.provenance = format!("{} TDP [{}]", g.display_name, g.tdp.source.kind());
                }
                "hbm_bandwidth_spec_gb_per_s" => {
                    out.predicted = Some(g.hbm_bandwidth.value.value() / 1e9);
                    (out.tolerance, out.tolerance_origin) = ds(g.hbm_bandwidth.source.citation());
                    out.provenance = format!("HBM bandwidth [{}]", g.hbm_bandwidth.source.kind());
                }
                "peak_tflops" => {
                    let dt = c.precision.as_deref().and_then(Dtype::parse).unwrap_or(Dtype::Bf16);
                    match g.peak.get(dt) {
                        Some(p) => {
                            out.predicted = Some(p.value.value() / 1e12);
                            (out.tolerance, out.tolerance_origin) = ds(p.source.citation());
                            out.provenance = format!("dense {} peak [{}]", dt.name(), p.source.kind());
                        }
                        None => out.reasons.push(format!("{} has no {} tensor path", g.name, dt.name())),
                    }
                }
                other => out.reasons.push(format!("`{other}` is not a hardware quantity; one of: {}", HARDWARE_QUANTITIES.join(", "))),
            }
        }
    }
    let Some(pred) = out.predicted else { return out };
    let mut verdict = {
        let (lo, hi) = (pred * (1.0 - out.tolerance), pred * (1.0 + out.tolerance));
        if c.high >= lo && c.low <= hi {
            Verdict::Consistent
        } else {
            // The end of the claimed range nearest the prediction.
            let near = if c.low > hi { c.low } else { c.high };
            out.reasons.insert(0, format!("claim is {:.2}x the prediction ({} vs {}; band {}-{})", near / pred, fmt(near), fmt(pred), fmt(lo), fmt(hi)));
            Verdict::Disagrees
        }
    };
    if let Some((b, what)) = &out.bound {
        if matches!(c.quantity.as_str(), "hbm_bandwidth_gb_per_s" | "dense_tflops" | "nvlink_p2p_gb_per_s" | "allreduce_busbw_gb_per_s") {
            out.reasons.push(format!("claim is {} of the bound", pct_range(c.low / b, c.high / b)));
        }
        if c.low > b * (1.0 + 1e-9) {
            out.reasons.insert(0, format!("exceeds the physical bound {} ({what})", fmt(*b)));
            verdict = Verdict::Impossible;
        }
    }
    if let Some((b, what)) = &lower {
        if c.high < *b {
            out.reasons.insert(0, format!("below the floor {} ({what})", fmt(*b)));
            verdict = Verdict::Impossible;
        }
    }
    out.verdict = verdict;
    out
}

fn pct_range(a: f64, b: f64) -> String {
    if (a - b).abs() < 1e-12 {
        format!("{:.1}%", a * 100.0)
    } else {
        format!("{:.1}%-{:.1}%", a * 100.0, b * 100.0)
    }
}

/// Check paired claims (`pairs_with`) against each other: a throughput and an MFU claim about the
/// same run must imply each other through the model's FLOPs per token.
pub fn cross_check(all: &mut [Checked]) {
    type Key = (String, String, f64, f64, Option<(f64, f64)>);
    let snapshot: Vec<Key> = all.iter().map(|c| (c.claim.id.clone(), c.claim.quantity.clone(), c.claim.low, c.claim.high, c.implied)).collect();
    for c in all.iter_mut() {
        let Some(other) = c.claim.pairs_with.clone() else { continue };
        let Some((id, q, lo, hi, _)) = snapshot.iter().find(|s| s.0 == other) else {
            c.reasons.push(format!("`pairs_with` = `{other}` names no claim"));
            continue;
        };
        let Some((ilo, ihi)) = c.implied else { continue };
        if q == &c.claim.quantity {
            continue;
        }
        // Overlap within 10% (the claims are rounded: "~170K").
        if ihi * 1.1 < *lo || ilo > hi * 1.1 {
            let shown = |a: f64, b: f64| {
                if q == "mfu" {
                    format!("MFU {}", pct_range(a, b))
                } else if (a - b).abs() < 1e-9 {
                    format!("{} {}", fmt(a), unit(q))
                } else {
                    format!("{}-{} {}", fmt(a), fmt(b), unit(q))
                }
            };
            c.reasons.insert(0, format!("contradicts `{id}` of the same document: this claim implies {}, `{id}` says {}", shown(ilo, ihi), shown(*lo, *hi)));
            if c.verdict != Verdict::Impossible {
                c.verdict = Verdict::Contradictory;
            }
        }
    }
}
