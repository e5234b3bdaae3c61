//! Cost-per-token reports: dollars, joules and time per token from predictions and prices, with
//! charts (plotters SVG), CSV tables, markdown and a self-contained HTML page; and the audit of the
//! seed documents' claims. No I/O: `cli::report` predicts the scenarios, reads files and writes what
//! this returns; the uncertainty band (`Band::from_runs`) scores the run records it is given.
//!
//! Every number a report shows about a scenario comes from the `predict --json` document of the
//! same scenario (`gpuplan_config::prediction::PredictionDoc`, filled by `cli::predict::document`),
//! so the two cannot drift apart.

pub mod charts;
pub mod claims;
pub mod prices;
pub mod render;
pub mod timeline;
pub mod trace;
pub mod views;

use std::path::{Path, PathBuf};

use gpuplan_config::prediction::{finite, PerRankDoc, PredictionDoc};
use gpuplan_config::record::scenario_wire;
use gpuplan_core::cost::UsedNumber;
use gpuplan_core::record::RunRecord;
use gpuplan_core::scenario::Scenario;
use gpuplan_core::validate::{score, summarize, Metric};
use prices::{PriceFlags, Prices};

/// Uncertainty bands: the mean absolute percentage error of the predictor on a measured run set.
#[derive(Debug, Clone, PartialEq)]
pub struct Band {
    pub step_time_pct: f64,
    pub power_pct: f64,
    pub memory_pct: f64,
    pub n_runs: usize,
    /// How the band was obtained (run file, profile, when).
    pub origin: String,
}

impl Band {
    /// Relative half-width of a throughput band (time only).
    pub fn throughput(&self) -> f64 {
        self.step_time_pct / 100.0
    }
    /// Relative half-width of an energy or cost band: time and power errors added (conservative).
    pub fn energy(&self) -> f64 {
        (self.step_time_pct + self.power_pct) / 100.0
    }
    pub fn power(&self) -> f64 {
        self.power_pct / 100.0
    }
    pub fn memory(&self) -> f64 {
        self.memory_pct / 100.0
    }
}

impl Band {
    /// The analytic engine's error on the run set `records` (read from `runs`) predicted with the
    /// calibration profile `profile`, all splits.
    pub fn from_runs(records: &[RunRecord], runs: &Path, profile: &str) -> Result<Band, String> {
        let scored: Vec<_> = records
            .iter()
            .map(|r| {
                let p = gpuplan_config::scenario::build(&scenario_wire(r, Some(profile)), None)
                    .map_err(|e| e.to_string())
                    .and_then(|s| gpuplan_core::analytic::predict(&s).map_err(|e| e.to_string()));
                score(r, p.as_ref().map_err(Clone::clone))
            })
            .collect();
        let sm = summarize("all", &scored.iter().collect::<Vec<_>>());
        let get = |m| sm.mape.iter().find(|x| x.0 == m).map(|x| (x.1, x.2));
        let (st, n) = get(Metric::StepTime).ok_or("no step-time measurements in the band's run set")?;
        let (pw, _) = get(Metric::Power).ok_or("no power measurements in the band's run set")?;
        let (mem, _) = get(Metric::PeakMemory).ok_or("no memory measurements in the band's run set")?;
        Ok(Band {
            step_time_pct: st,
            power_pct: pw,
            memory_pct: mem,
            n_runs: n,
            origin: format!("`gpuplan validate --runs {} --calibration {}`, all splits, n = {n}, computed at report time", runs.display(), profile),
        })
    }
}

/// One prediction in a report: a scenario file in one mode.
#[derive(Debug, Clone)]
pub struct Run {
    pub file: String,
    pub scenario_name: String,
    pub mode: String,
    /// The `predict` flags (besides `--scenario FILE`) that reproduce it; empty for the file as is.
    pub flags: Vec<String>,
    pub outcome: Result<Predicted, String>,
}

#[derive(Debug, Clone)]
pub struct Predicted {
    pub scenario: Scenario,
    /// The `predict --json` document.
    pub doc: PredictionDoc,
    pub used: Vec<UsedNumber>,
}

/// The `gpuplan report` arguments that regenerate a report, for its header (`--out DIR` last).
pub fn command_args(scenarios: &[PathBuf], prices: Option<&Path>, flags: &PriceFlags, tokens: f64, claims: Option<&Path>) -> String {
    let mut v = Vec::new();
    if !scenarios.is_empty() {
        v.push(format!("--scenario {}", scenarios.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(" ")));
    }
    if let Some(p) = prices {
        v.push(format!("--prices {}", p.display()));
    }
    let f = flags;
    for (k, x) in [
        ("--gpu-hour-usd", f.gpu_hour_usd),
        ("--purchase-usd-per-gpu", f.purchase_usd_per_gpu),
        ("--amortization-years", f.amortization_years),
        ("--utilization", f.utilization),
        ("--electricity-usd-per-kwh", f.electricity_usd_per_kwh),
        ("--pue", f.pue),
        ("--node-overhead-w", f.node_overhead_w),
        ("--network-usd-per-node-hour", f.network_usd_per_node_hour),
        ("--storage-usd-per-node-hour", f.storage_usd_per_node_hour),
    ] {
        if let Some(x) = x {
            v.push(format!("{k} {x}"));
        }
    }
    if tokens != 1e12 {
        v.push(format!("--tokens {tokens}"));
    }
    if let Some(c) = claims {
        v.push(format!("--claims {}", c.display()));
    }
    v.push("--out DIR".into());
    v.join(" ")
}

/// One point of a scaling curve: the scenario with its data-parallel degree scaled.
#[derive(Debug, Clone)]
pub struct ScalePoint {
    pub gpus: u64,
    pub dp: u32,
    pub flags: Vec<String>,
    pub tokens_per_s: Option<f64>,
    pub fits: bool,
}

/// One scenario file: its runs in train, prefill and decode, and its scaling curve.
#[derive(Debug, Clone)]
pub struct Entry {
    pub file: String,
    pub name: String,
    pub primary_mode: String,
    pub runs: Vec<Run>,
    pub scaling: Vec<ScalePoint>,
    /// With `--stragglers`: the training run's step times under random stragglers.
    pub stragglers: Option<Stragglers>,
}

/// A training run's step-time distribution under random stragglers: the per-rank engine's
/// document (`simulate --per-rank --json`'s `/per_rank`) and the flags that reproduce it.
#[derive(Debug, Clone)]
pub struct Stragglers {
    /// The `gpuplan simulate` arguments (`--scenario FILE ... --per-rank --stragglers K=F ...`).
    pub command: String,
    pub doc: Result<PerRankDoc, String>,
}

/// Cost and energy figures of one run under a set of prices.
#[derive(Debug, Clone, PartialEq)]
pub struct Costed {
    pub gpus: u64,
    pub nodes: u64,
    pub fits: bool,
    pub step_time_s: f64,
    pub tokens_per_s: f64,
    pub tokens_per_s_per_gpu: f64,
    pub mfu: f64,
    pub avg_w_per_gpu: f64,
    pub node_w: f64,
    /// Node power used for pricing (the node overhead of the price file replaces the system's).
    pub priced_node_w: f64,
    pub pue: f64,
    pub j_per_token: f64,
    pub tokens_per_joule: f64,
    pub kwh_per_million_tokens: f64,
    pub facility_kwh_per_million_tokens: f64,
    pub peak_bytes_per_gpu: f64,
    pub capacity_bytes: f64,
    pub capital_usd_per_hour: f64,
    pub energy_usd_per_hour: f64,
    pub node_usd_per_hour: f64,
    pub usd_per_hour: f64,
    pub usd_per_million_tokens: f64,
}

/// A number of the document as its JSON text reads: NaN where it is written as `null`.
fn num(v: f64) -> f64 {
    finite(v).unwrap_or(f64::NAN)
}

/// Price one prediction. Throughput, power and energy are read from the `predict --json` document.
pub fn cost(s: &Scenario, doc: &PredictionDoc, prices: &Prices) -> Costed {
    let gpus = s.n_gpus;
    let gpus_per_node = s.system.gpus_per_node as u64;
    let nodes = gpus.div_ceil(gpus_per_node);
    let gpus_in_node = gpus.min(gpus_per_node) as f64;
    let tokens_per_s = num(doc.tokens_per_s);
    let avg_w_per_gpu = num(doc.power.avg_w_per_gpu);
    let node_w = num(doc.power.node_w);
    let priced_node_w = match &prices.node_overhead_w {
        Some(o) => avg_w_per_gpu * gpus_in_node + o.value,
        None => node_w,
    };
    let pue = prices.pue.as_ref().map_or(s.system.pue.value, |p| p.value);
    let facility_kw = priced_node_w * nodes as f64 * pue / 1e3;
    let capital_usd_per_hour = prices.usd_per_gpu_hour() * gpus as f64;
    let energy_usd_per_hour = facility_kw * prices.electricity_usd_per_kwh.value;
    let node_usd_per_hour = (prices.network_usd_per_node_hour.value + prices.storage_usd_per_node_hour.value) * nodes as f64;
    let usd_per_hour = capital_usd_per_hour + energy_usd_per_hour + node_usd_per_hour;
    let million_tokens_hours = 1e6 / (tokens_per_s * 3600.0);
    let j_per_token = num(doc.energy.j_per_token);
    Costed {
        gpus,
        nodes,
        fits: doc.memory.fits,
        step_time_s: num(doc.step_time_s),
        tokens_per_s,
        tokens_per_s_per_gpu: num(doc.tokens_per_s_per_gpu),
        mfu: num(doc.mfu),
        avg_w_per_gpu,
        node_w,
        priced_node_w,
        pue,
        j_per_token,
        tokens_per_joule: 1.0 / j_per_token,
        kwh_per_million_tokens: num(doc.energy.kwh_per_million_tokens),
        facility_kwh_per_million_tokens: facility_kw * million_tokens_hours,
        peak_bytes_per_gpu: num(doc.memory.peak_bytes_per_gpu),
        capacity_bytes: num(doc.memory.capacity_bytes),
        capital_usd_per_hour,
        energy_usd_per_hour,
        node_usd_per_hour,
        usd_per_hour,
        usd_per_million_tokens: usd_per_hour * million_tokens_hours,
    }
}

/// Time, cost and facility energy to train `tokens` tokens at a run's throughput.
pub fn time_to_train(c: &Costed, tokens: f64) -> (f64, f64, f64) {
    let hours = tokens / c.tokens_per_s / 3600.0;
    (hours, hours * c.usd_per_hour, c.facility_kwh_per_million_tokens * tokens / 1e6)
}

/// Counts of the source kinds (datasheet, measured, transferred, unsourced) of the numbers a
/// prediction used, as "datasheet 9 · transferred 6 · unsourced 4".
pub fn provenance(used: &[UsedNumber]) -> String {
    let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
    for u in used {
        *counts.entry(u.source.kind()).or_default() += 1;
    }
    counts.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(" · ")
}

/// The data-parallel degrees of a scaling curve: powers of two from 1 up to 8x the file's degree
/// (at least 16), keeping the per-replica batch.
pub fn scaling_dps(dp: u32) -> Vec<u32> {
    let top = (dp * 8).max(16);
    let mut v = Vec::new();
    let mut d = 1;
    while d <= top {
        v.push(d);
        d *= 2;
    }
    if !v.contains(&dp) {
        v.push(dp);
        v.sort();
    }
    v
}

#[cfg(test)]
mod tests {
    use super::prices::{Figure, GpuPrice};
    use super::*;
    use gpuplan_config::prediction::{EnergyDoc, MemoryDoc, PowerDoc};

    fn fig(v: f64) -> Figure {
        Figure { value: v, source: "test".into(), unsourced: false, note: None }
    }

    #[test]
    fn cost_adds_capital_energy_and_per_node_charges() {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/seed-gpt-39.5b-decode-b4.toml");
        let s = gpuplan_config::scenario::build(&gpuplan_config::scenario::read_scenario(&p).unwrap(), Some(&p)).unwrap();
        assert_eq!((s.n_gpus, s.system.gpus_per_node), (2, 8));
        let json = PredictionDoc {
            step_time_s: 1.0,
            tokens_per_s: 1000.0,
            tokens_per_s_per_gpu: 500.0,
            mfu: 0.1,
            power: PowerDoc { avg_w_per_gpu: 500.0, node_w: 7300.0, ..Default::default() },
            energy: EnergyDoc { j_per_token: 7.3, kwh_per_million_tokens: 2.0, ..Default::default() },
            memory: MemoryDoc { peak_bytes_per_gpu: 1.0, capacity_bytes: 2.0, fits: true, ..Default::default() },
            ..Default::default()
        };
        let prices = Prices {
            name: "t".into(),
            gpu: GpuPrice::Rental { usd_per_gpu_hour: fig(2.0) },
            electricity_usd_per_kwh: fig(0.1),
            pue: Some(fig(1.5)),
            node_overhead_w: Some(fig(1000.0)),
            network_usd_per_node_hour: fig(1.0),
            storage_usd_per_node_hour: fig(0.5),
        };
        let c = cost(&s, &json, &prices);
        // One node: 2 x 500 W + 1000 W overhead = 2 kW, x 1.5 PUE = 3 kW at $0.1.
        assert_eq!(c.nodes, 1);
        assert!((c.priced_node_w - 2000.0).abs() < 1e-9);
        assert!((c.energy_usd_per_hour - 0.3).abs() < 1e-12);
        assert!((c.capital_usd_per_hour - 4.0).abs() < 1e-12);
        assert!((c.node_usd_per_hour - 1.5).abs() < 1e-12);
        // $5.8 per hour over 3.6M tokens per hour.
        assert!((c.usd_per_million_tokens - 5.8 / 3.6).abs() < 1e-12);
        assert!((c.facility_kwh_per_million_tokens - 3.0 / 3.6).abs() < 1e-12);
        let (hours, usd, kwh) = time_to_train(&c, 3.6e6);
        assert!((hours - 1.0).abs() < 1e-12 && (usd - 5.8).abs() < 1e-12 && (kwh - 3.0).abs() < 1e-12);
        // Without overrides the system's PUE and `predict`'s node power are used.
        let plain = Prices { pue: None, node_overhead_w: None, ..prices };
        let c = cost(&s, &json, &plain);
        assert_eq!(c.priced_node_w, 7300.0);
        assert_eq!(c.pue, s.system.pue.value);
    }

    #[test]
    fn scaling_degrees_are_powers_of_two_and_the_files_own() {
        assert_eq!(scaling_dps(2), vec![1, 2, 4, 8, 16]);
        assert_eq!(scaling_dps(3), vec![1, 2, 3, 4, 8, 16]);
        assert_eq!(scaling_dps(8), vec![1, 2, 4, 8, 16, 32, 64]);
    }
}
