//! The report's files: markdown (charts as SVG files beside it), a self-contained HTML page (charts
//! inline) and CSV tables. Both documents are rendered from one list of blocks.

use super::charts::{self, short, Banded};
use super::claims::Checked;
use super::prices::{GpuPrice, Prices};
use super::{cost, provenance, time_to_train, Band, Costed, Entry, Run};

/// What a report shows.
pub struct Input<'a> {
    pub title: &'a str,
    /// The `gpuplan report` arguments that regenerate it (paths as given, without `--out`).
    pub command: &'a str,
    pub entries: &'a [Entry],
    pub prices: Option<&'a Prices>,
    pub band: &'a Band,
    pub tokens: f64,
    pub claims: Option<&'a [Checked]>,
}

enum Block {
    H(u8, String),
    P(String),
    Table(Vec<String>, Vec<Vec<String>>),
    Chart(String, String),
}

/// A run with its costed figures.
struct Row<'a> {
    entry: &'a Entry,
    run: &'a Run,
    c: Option<Costed>,
}

fn rows<'a>(entries: &'a [Entry], prices: Option<&Prices>) -> Vec<Row<'a>> {
    entries
        .iter()
        .flat_map(|e| {
            e.runs.iter().map(move |r| Row {
                entry: e,
                run: r,
                c: match (&r.outcome, prices) {
                    (Ok(p), Some(pr)) => Some(cost(&p.scenario, &p.json, pr)),
                    _ => None,
                },
            })
        })
        .collect()
}

/// A run's name in tables and charts; "[no fit]" marks a configuration predicted not to fit in memory.
fn label(r: &Run) -> String {
    let fits = r.outcome.as_ref().map(|p| p.json.pointer("/memory/fits").and_then(|v| v.as_bool()) != Some(false)).unwrap_or(true);
    format!("{} · {}{}", r.scenario_name, r.mode, if fits { "" } else { " [no fit]" })
}

fn flags(r: &Run) -> String {
    let mut v = vec![format!("--scenario {}", r.file)];
    v.extend(r.flags.iter().cloned());
    v.join(" ")
}

fn pm(v: f64, rel: f64) -> String {
    format!("{} ±{:.0}%", short(v), rel * 100.0)
}

fn mode_index(m: &str) -> usize {
    match m {
        "train" => 0,
        "prefill" => 1,
        _ => 2,
    }
}

/// Render every file of the report: (relative path, contents).
pub fn render(inp: &Input) -> Result<Vec<(String, String)>, String> {
    let band = inp.band;
    let all = rows(inp.entries, inp.prices);
    let mut files: Vec<(String, String)> = Vec::new();
    let mut b: Vec<Block> = Vec::new();
    let mut band_note = format!("band: ±validation MAPE over {} measured runs (see \"Inputs and their sources\")", band.n_runs);

    b.push(Block::H(1, format!("gpuplan report: {}", inp.title)));
    b.push(Block::P(format!(
        "Regenerate: `gpuplan report {}`. Every figure is the analytic engine's prediction{}; none is measured on the systems shown.",
        inp.command,
        if inp.entries.is_empty() { "" } else { " (`gpuplan predict --json` with the flags in `summary.csv`)" }
    )));

    // Inputs.
    b.push(Block::H(2, "Inputs and their sources".into()));
    if !inp.entries.is_empty() {
        b.push(Block::Table(
            vec![
                "scenario".into(),
                "model".into(),
                "system".into(),
                "GPUs".into(),
                "layout".into(),
                "mode".into(),
                "hardware numbers used (source kinds)".into(),
            ],
            inp.entries
                .iter()
                .filter_map(|e| e.runs.iter().find(|r| r.mode == e.primary_mode).map(|r| (e, r)))
                .map(|(e, r)| match &r.outcome {
                    Ok(p) => {
                        let s = &p.scenario;
                        let pc = &s.parallel;
                        vec![
                            e.file.clone(),
                            s.model.name.clone(),
                            s.system.name.clone(),
                            s.n_gpus.to_string(),
                            format!("tp{} pp{} dp{} zero{} {} {}", pc.tp, pc.pp, pc.dp, pc.zero, s.workload.stack.name(), s.workload.precision.name()),
                            e.primary_mode.clone(),
                            provenance(&p.used),
                        ]
                    }
                    Err(err) => vec![e.file.clone(), "-".into(), "-".into(), "-".into(), "-".into(), e.primary_mode.clone(), format!("cannot predict: {err}")],
                })
                .collect(),
        ));
    }
    b.push(Block::P("Source kinds: *datasheet* (a vendor document), *measured* (a calibration profile), *transferred* (measured on another GPU and carried over), *unsourced* (an engineering estimate that says so). `sources.csv` lists every number with its citation.".into()));
    b.push(Block::P(format!(
        "Uncertainty bands: the predictor's mean absolute percentage error against measured runs — step time {:.1}%, power {:.1}%, peak memory {:.1}% ({}). Throughput bands use the step-time error; energy and cost bands add the step-time and power errors. The runs are H200 runs; B200 and other systems are predicted from datasheet and transferred numbers, so their real error is likely larger than this band.",
        band.step_time_pct, band.power_pct, band.memory_pct, band.origin
    )));
    if let Some(p) = inp.prices {
        let unsourced = p.figures().iter().filter(|f| f.1.unsourced).count();
        b.push(Block::P(format!(
            "Prices: `{}`{}. GPU capital: {:.4} $/GPU-hour{}. PUE: {}; node overhead: {}.",
            p.name,
            if unsourced > 0 {
                format!(" — **{unsourced} figure(s) are unsourced examples: override them with your own quotes** (`--prices FILE` or flags)")
            } else {
                String::new()
            },
            p.usd_per_gpu_hour(),
            match &p.gpu {
                GpuPrice::Rental { .. } => " (rental)".to_string(),
                GpuPrice::Owned { purchase_usd_per_gpu, amortization_years, utilization } => format!(
                    " (owned: {} $ over {} years at {:.0}% utilization)",
                    purchase_usd_per_gpu.value,
                    amortization_years.value,
                    utilization.value * 100.0
                ),
            },
            p.pue.as_ref().map_or("the system file's (sources.csv)".to_string(), |x| format!("{} (price file)", x.value)),
            p.node_overhead_w.as_ref().map_or("the system file's host power per node (sources.csv)".to_string(), |x| format!("{} W (price file)", x.value)),
        )));
        b.push(Block::Table(
            vec!["price".into(), "value".into(), "kind".into(), "source".into()],
            p.figures().iter().map(|(k, f)| vec![k.to_string(), format!("{}", f.value), f.kind().into(), f.source.clone()]).collect(),
        ));
        files.push((
            "prices.csv".into(),
            csv(
                &["key", "value", "kind", "source", "note"],
                p.figures()
                    .iter()
                    .map(|(k, f)| vec![k.to_string(), format!("{}", f.value), f.kind().into(), f.source.clone(), f.note.clone().unwrap_or_default()])
                    .collect(),
            )?,
        ));
    } else if !inp.entries.is_empty() {
        b.push(Block::P("No prices given (`--prices FILE` or price flags): dollar figures are left out.".into()));
    }

    // Side by side.
    if !inp.entries.is_empty() {
        b.push(Block::H(2, "Side by side".into()));
        let mut head: Vec<String> = [
            "scenario · mode",
            "GPUs",
            "tokens/s",
            "tokens/s/GPU",
            "MFU",
            "tokens/J",
            "kWh/1M tok (IT)",
            "kWh/1M tok (facility)",
            "$/1M tok",
            "W/GPU",
            "kW/node",
            "GiB/GPU",
            "fits",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if inp.prices.is_none() {
            head.remove(8);
        }
        let mut tab = Vec::new();
        for r in &all {
            match (&r.run.outcome, &r.c) {
                (Ok(p), c) => {
                    let j = &p.json;
                    let g = |ptr: &str| j.pointer(ptr).and_then(|v| v.as_f64()).unwrap_or(f64::NAN);
                    let tps = g("/tokens_per_s");
                    let jpt = g("/energy/j_per_token");
                    let mut row = vec![
                        label(r.run),
                        p.scenario.n_gpus.to_string(),
                        pm(tps, band.throughput()),
                        short(g("/tokens_per_s_per_gpu")),
                        format!("{:.1}%", g("/mfu") * 100.0),
                        short(1.0 / jpt),
                        pm(g("/energy/kwh_per_million_tokens"), band.energy()),
                        c.as_ref().map_or("-".into(), |c| pm(c.facility_kwh_per_million_tokens, band.energy())),
                        c.as_ref().map_or("-".into(), |c| format!("${}", pm(c.usd_per_million_tokens, band.energy()))),
                        pm(g("/power/avg_w_per_gpu"), band.power()),
                        format!("{:.2}", g("/power/node_w") / 1e3),
                        format!("{:.1} / {:.0}", g("/memory/peak_bytes_per_gpu") / (1u64 << 30) as f64, g("/memory/capacity_bytes") / (1u64 << 30) as f64),
                        if j.pointer("/memory/fits").and_then(|v| v.as_bool()) == Some(true) { "yes".into() } else { "**no**".into() },
                    ];
                    if inp.prices.is_none() {
                        row.remove(8);
                    }
                    if inp.prices.is_some() {
                        // kWh facility depends on prices (PUE override); keep it.
                    } else {
                        row[7] = "-".into();
                    }
                    tab.push(row);
                }
                (Err(e), _) => {
                    let mut row = vec![label(r.run), "-".into(), format!("cannot predict: {e}")];
                    row.resize(head.len(), "-".into());
                    tab.push(row);
                }
            }
        }
        b.push(Block::Table(head, tab));
        b.push(Block::P("Training tokens are trained tokens (global batch x sequence per step); prefill tokens are prompt tokens; decode tokens are generated tokens at the given KV length. IT energy: GPUs and host, as `predict` reports (`/energy/kwh_per_million_tokens`); facility energy multiplies by PUE and uses the price file's node overhead where it sets one. A job on fewer GPUs than a node is charged the whole node's host power, as `predict` counts it (`/power/node_w`); GPUs are charged per GPU-hour, network and storage per node-hour.".into()));

        // Charts over every run.
        let labels: Vec<String> = all.iter().map(|r| label(r.run)).collect();
        let groups: Vec<usize> = all.iter().map(|r| mode_index(&r.run.mode)).collect();
        let gnames: Vec<String> = ["train", "prefill", "decode"].iter().map(|s| s.to_string()).collect();
        let val = |f: &dyn Fn(&Row) -> Option<f64>, rel: f64| -> Vec<Option<Banded>> {
            all.iter().map(|r| f(r).filter(|v| v.is_finite() && *v > 0.0).map(|v| Banded { value: v, lo: v * (1.0 - rel), hi: v * (1.0 + rel) })).collect()
        };
        let jnum = |r: &Row, ptr: &str| r.run.outcome.as_ref().ok().and_then(|p| p.json.pointer(ptr).and_then(|v| v.as_f64()));
        let mut chart = |b: &mut Vec<Block>, name: &str, title: &str, svg: Result<String, String>| -> Result<(), String> {
            let svg = svg?;
            files.push((format!("charts/{name}.svg"), svg.clone()));
            b.push(Block::Chart(name.into(), svg));
            let _ = title;
            Ok(())
        };
        b.push(Block::H(2, "Throughput, energy and cost per token".into()));
        // Where the inputs came from: the source kinds of the numbers each prediction used.
        let mut kinds: Vec<String> = all.iter().filter_map(|r| r.run.outcome.as_ref().ok().map(|p| provenance(&p.used))).collect();
        kinds.sort();
        kinds.dedup();
        let inputs = match kinds.as_slice() {
            [one] => format!("inputs: {one} numbers per bar (sources.csv)"),
            _ => "inputs: source kinds per scenario in the table above (sources.csv)".to_string(),
        };
        let note = format!("{inputs}; {band_note}");
        band_note = format!("{inputs}; {band_note}");
        chart(
            &mut b,
            "tokens-per-s-per-gpu",
            "",
            charts::bars(
                "Throughput per GPU (tokens/s per GPU)",
                "tokens/s per GPU (log scale when values span >30x)",
                &labels,
                &val(&|r| jnum(r, "/tokens_per_s_per_gpu"), band.throughput()),
                &groups,
                &gnames,
                &note,
            ),
        )?;
        chart(
            &mut b,
            "tokens-per-joule",
            "",
            charts::bars(
                "Energy efficiency (tokens per joule, IT energy)",
                "tokens per joule (GPUs + host)",
                &labels,
                &val(&|r| jnum(r, "/energy/j_per_token").map(|j| 1.0 / j), band.energy()),
                &groups,
                &gnames,
                &note,
            ),
        )?;
        if inp.prices.is_some() {
            chart(
                &mut b,
                "kwh-per-million-tokens",
                "",
                charts::bars(
                    "Facility energy per 1M tokens (kWh, PUE applied)",
                    "kWh per 1M tokens",
                    &labels,
                    &val(&|r| r.c.as_ref().map(|c| c.facility_kwh_per_million_tokens), band.energy()),
                    &groups,
                    &gnames,
                    &note,
                ),
            )?;
            let pnote = format!("prices: {} (prices.csv); {band_note}", inp.prices.map(|p| p.name.as_str()).unwrap_or(""));
            chart(
                &mut b,
                "usd-per-million-tokens",
                "",
                charts::bars(
                    "Cost per 1M tokens (USD)",
                    "USD per 1M tokens",
                    &labels,
                    &val(&|r| r.c.as_ref().map(|c| c.usd_per_million_tokens), band.energy()),
                    &groups,
                    &gnames,
                    &pnote,
                ),
            )?;
        } else {
            chart(
                &mut b,
                "kwh-per-million-tokens",
                "",
                charts::bars(
                    "IT energy per 1M tokens (kWh)",
                    "kWh per 1M tokens",
                    &labels,
                    &val(&|r| jnum(r, "/energy/kwh_per_million_tokens"), band.energy()),
                    &groups,
                    &gnames,
                    &note,
                ),
            )?;
        }

        // Time to train.
        if let Some(_p) = inp.prices {
            b.push(Block::H(2, format!("Time and cost to train {} tokens", short(inp.tokens))));
            let mut tt = Vec::new();
            for r in all.iter().filter(|r| r.run.mode == "train") {
                if let Some(c) = &r.c {
                    let (h, usd, kwh) = time_to_train(c, inp.tokens);
                    tt.push(vec![
                        label(r.run),
                        c.gpus.to_string(),
                        pm(h / 24.0, band.throughput()),
                        format!("${}", pm(usd, band.energy())),
                        pm(kwh / 1e3, band.energy()),
                        format!("{:.2}", c.usd_per_hour),
                        format!(
                            "{:.0}% / {:.0}% / {:.0}%",
                            100.0 * c.capital_usd_per_hour / c.usd_per_hour,
                            100.0 * c.energy_usd_per_hour / c.usd_per_hour,
                            100.0 * c.node_usd_per_hour / c.usd_per_hour
                        ),
                        if c.fits { "yes".into() } else { "**no**".into() },
                    ]);
                    let _ = usd;
                }
            }
            b.push(Block::Table(
                vec![
                    "scenario · mode".into(),
                    "GPUs".into(),
                    "days".into(),
                    "cost".into(),
                    "facility MWh".into(),
                    "$/hour (job)".into(),
                    "capital / energy / network+storage".into(),
                    "fits".into(),
                ],
                tt,
            ));
            b.push(Block::P(format!("At the predicted training throughput, running without interruption (`--tokens {:e}`); checkpointing, failures and evaluation are not included. A configuration that does not fit in memory (fits: no) cannot run as given; its row shows what it would cost if it did.", inp.tokens)));
        }

        // Breakdowns.
        b.push(Block::H(2, "Where the step time goes".into()));
        let ok: Vec<&Row> = all.iter().filter(|r| r.run.outcome.is_ok()).collect();
        let part_names: Vec<String> = gpuplan_core::analytic::Breakdown::default().parts().iter().map(|(k, _)| k.to_string()).collect();
        let bd_rows: Vec<Vec<f64>> = ok
            .iter()
            .map(|r| {
                let j = &r.run.outcome.as_ref().unwrap().json;
                let total = j["step_time_s"].as_f64().unwrap_or(1.0);
                part_names.iter().map(|k| 100.0 * j["breakdown"][format!("{k}_s")].as_f64().unwrap_or(0.0) / total).collect()
            })
            .collect();
        let used_parts: Vec<usize> = (0..part_names.len()).filter(|k| bd_rows.iter().any(|r| r[*k] > 0.0)).collect();
        let ok_labels: Vec<String> = ok
            .iter()
            .map(|r| {
                format!(
                    "{} ({} ±{:.0}%)",
                    label(r.run),
                    fmt_time(r.run.outcome.as_ref().unwrap().json["step_time_s"].as_f64().unwrap_or(0.0)),
                    band.step_time_pct
                )
            })
            .collect();
        chart(
            &mut b,
            "step-breakdown",
            "",
            charts::stacked(
                "Step time breakdown (% of one step; step time and its band in brackets)",
                "% of step time (critical path)",
                &ok_labels,
                &used_parts.iter().map(|k| part_names[*k].clone()).collect::<Vec<_>>(),
                &bd_rows.iter().map(|r| used_parts.iter().map(|k| r[*k]).collect()).collect::<Vec<_>>(),
                None,
                0.0,
                &format!("step = train: one optimizer step; prefill: one forward pass; decode: one token step; {band_note}"),
            ),
        )?;
        // In the order of `MemoryPlan::components`, which the JSON object does not keep.
        let mem_names: Vec<String> = ["weights", "gradients", "optimizer", "activations", "logits", "kv_cache", "transient", "runtime", "fragmentation"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mem_rows: Vec<Vec<f64>> = ok
            .iter()
            .map(|r| {
                let j = &r.run.outcome.as_ref().unwrap().json;
                mem_names.iter().map(|k| j["memory"]["components"][format!("{k}_bytes")].as_f64().unwrap_or(0.0) / (1u64 << 30) as f64).collect()
            })
            .collect();
        let caps: Vec<f64> =
            ok.iter().map(|r| r.run.outcome.as_ref().unwrap().json["memory"]["capacity_bytes"].as_f64().unwrap_or(0.0) / (1u64 << 30) as f64).collect();
        let used_mem: Vec<usize> = (0..mem_names.len()).filter(|k| mem_rows.iter().any(|r| r[*k] > 0.0)).collect();
        b.push(Block::H(2, "Memory per GPU".into()));
        chart(
            &mut b,
            "memory-breakdown",
            "",
            charts::stacked(
                "Peak memory per GPU (GiB)",
                "GiB per GPU",
                &ok.iter().map(|r| label(r.run)).collect::<Vec<_>>(),
                &used_mem.iter().map(|k| mem_names[*k].clone()).collect::<Vec<_>>(),
                &mem_rows.iter().map(|r| used_mem.iter().map(|k| r[*k]).collect()).collect::<Vec<_>>(),
                Some((&caps, "HBM capacity")),
                band.memory(),
                &format!("whiskers: peak-memory band ±{:.1}% ({})", band.memory_pct, band.origin),
            ),
        )?;

        // Power.
        b.push(Block::H(2, "Power".into()));
        let okl: Vec<String> = ok.iter().map(|r| label(r.run)).collect();
        let okg: Vec<usize> = ok.iter().map(|r| mode_index(&r.run.mode)).collect();
        // The band's upper end stops at the cap: TDP per GPU, TDP x GPUs + host per node.
        let pv = |ptr: &str, scale: f64, per_node: bool| -> Vec<Option<Banded>> {
            ok.iter()
                .map(|r| {
                    let p = r.run.outcome.as_ref().unwrap();
                    let sys = &p.scenario.system;
                    let gpus = p.scenario.n_gpus.min(sys.gpus_per_node as u64) as f64;
                    let cap =
                        if per_node { sys.gpu.tdp.value.value() * gpus + sys.host_power_per_node.value.value() } else { sys.gpu.tdp.value.value() } * scale;
                    p.json.pointer(ptr).and_then(|v| v.as_f64()).map(|v| v * scale).map(|v| Banded {
                        value: v,
                        lo: v * (1.0 - band.power()),
                        hi: (v * (1.0 + band.power())).min(cap.max(v)),
                    })
                })
                .collect()
        };
        chart(
            &mut b,
            "power-per-gpu",
            "",
            charts::bars(
                "Average power per GPU (W)",
                "W per GPU (time-averaged over a step)",
                &okl,
                &pv("/power/avg_w_per_gpu", 1.0, false),
                &okg,
                &gnames,
                &format!("band capped at TDP; TDP and idle power per scenario in sources.csv; {band_note}"),
            ),
        )?;
        chart(
            &mut b,
            "power-per-node",
            "",
            charts::bars(
                "Average power per node (kW, GPUs + host)",
                "kW per node",
                &okl,
                &pv("/power/node_w", 1e-3, true),
                &okg,
                &gnames,
                &format!("host power: the system file's figure (sources.csv); band capped at TDP x GPUs + host; {band_note}"),
            ),
        )?;
        let mut pt = Vec::new();
        for r in &ok {
            let p = r.run.outcome.as_ref().unwrap();
            let j = &p.json;
            let g = &p.scenario.system.gpu;
            pt.push(vec![
                label(r.run),
                pm(j["power"]["avg_w_per_gpu"].as_f64().unwrap_or(0.0), band.power()),
                format!("{:.0}", g.tdp.value.value()),
                format!("{:.0}", j["power"]["sm_clock_mhz"].as_f64().unwrap_or(0.0)),
                if j["power"]["power_capped"].as_bool() == Some(true) { "yes".into() } else { "no".into() },
                format!("{:.2}", j["power"]["node_w"].as_f64().unwrap_or(0.0) / 1e3),
            ]);
        }
        b.push(Block::Table(vec!["scenario · mode".into(), "W/GPU".into(), "TDP W".into(), "SM clock MHz".into(), "TDP-capped".into(), "kW/node".into()], pt));

        // Scaling.
        b.push(Block::H(2, "Scaling with the data-parallel degree".into()));
        let series: Vec<(String, Vec<(f64, f64)>)> = inp
            .entries
            .iter()
            .map(|e| {
                let pts: Vec<(f64, f64)> = e.scaling.iter().filter(|p| p.fits).filter_map(|p| p.tokens_per_s.map(|t| (p.gpus as f64, t))).collect();
                let name = format!("{} · {}{}", e.name, e.primary_mode, if pts.is_empty() { " (none fits)" } else { "" });
                (name, pts)
            })
            .collect();
        let hollow: Vec<Vec<(f64, f64)>> =
            inp.entries.iter().map(|e| e.scaling.iter().filter(|p| !p.fits).filter_map(|p| p.tokens_per_s.map(|t| (p.gpus as f64, t))).collect()).collect();
        chart(
            &mut b,
            "scaling-throughput",
            "",
            charts::curves(
                "Throughput vs GPUs (data-parallel degree scaled, per-replica batch kept)",
                "GPUs (log2)",
                "tokens/s (log)",
                &series,
                &hollow,
                true,
                band.throughput(),
                &format!("hollow circles: predicted not to fit in memory (throughput shown as if it did); {band_note}"),
            ),
        )?;
        let eff: Vec<(String, Vec<(f64, f64)>)> = series
            .iter()
            .map(|(n, pts)| {
                let base = pts.first().map(|p| p.1 / p.0).unwrap_or(f64::NAN);
                (n.clone(), pts.iter().map(|p| (p.0, 100.0 * (p.1 / p.0) / base)).collect())
            })
            .collect();
        chart(
            &mut b,
            "scaling-efficiency",
            "",
            charts::curves(
                "Scaling efficiency vs GPUs (tokens/s per GPU relative to the smallest)",
                "GPUs (log2)",
                "efficiency (%)",
                &eff,
                &[],
                false,
                0.0,
                "efficiency = (tokens/s per GPU) / (tokens/s per GPU at the smallest data-parallel degree that fits); the y axis does not start at 0; overlapping lines hide each other",
            ),
        )?;
        b.push(Block::P("Each point is the scenario re-predicted with `--gpus` and `--dp` scaled (and `--global-batch` scaled with dp in training), other flags unchanged; `scaling.csv` has the flags of every point. Efficiency below 100% is the data-parallel communication gpuplan predicts becoming exposed; across nodes it crosses the scale-out fabric.".into()));

        // CSVs.
        let summary_rows: Vec<Vec<String>> = all
            .iter()
            .map(|r| match (&r.run.outcome, &r.c) {
                (Ok(p), c) => {
                    let j = &p.json;
                    let f = |ptr: &str| j.pointer(ptr).map(|v| v.to_string()).unwrap_or_default();
                    let cf = |g: fn(&Costed) -> f64| c.as_ref().map(|c| format!("{}", g(c))).unwrap_or_default();
                    vec![
                        r.entry.file.clone(),
                        r.run.scenario_name.clone(),
                        r.run.mode.clone(),
                        flags(r.run),
                        String::new(),
                        f("/scenario/gpus"),
                        f("/step_time_s"),
                        f("/tokens_per_s"),
                        f("/tokens_per_s_per_gpu"),
                        f("/mfu"),
                        f("/energy/j_per_token"),
                        f("/energy/kwh_per_million_tokens"),
                        f("/power/avg_w_per_gpu"),
                        f("/power/node_w"),
                        f("/memory/peak_bytes_per_gpu"),
                        f("/memory/capacity_bytes"),
                        f("/memory/fits"),
                        cf(|c| c.tokens_per_joule),
                        cf(|c| c.facility_kwh_per_million_tokens),
                        cf(|c| c.usd_per_hour),
                        cf(|c| c.usd_per_million_tokens),
                        format!("{}", band.step_time_pct),
                        format!("{}", band.energy() * 100.0),
                        provenance(&p.used),
                    ]
                }
                (Err(e), _) => {
                    let mut v = vec![r.entry.file.clone(), r.run.scenario_name.clone(), r.run.mode.clone(), flags(r.run), e.clone()];
                    v.resize(24, String::new());
                    v
                }
            })
            .collect();
        files.push((
            "summary.csv".into(),
            csv(
                &[
                    "file",
                    "scenario",
                    "mode",
                    "predict_args",
                    "error",
                    "gpus",
                    "step_time_s",
                    "tokens_per_s",
                    "tokens_per_s_per_gpu",
                    "mfu",
                    "j_per_token",
                    "kwh_per_million_tokens",
                    "avg_w_per_gpu",
                    "node_w",
                    "peak_bytes_per_gpu",
                    "capacity_bytes",
                    "fits",
                    "tokens_per_joule",
                    "facility_kwh_per_million_tokens",
                    "usd_per_hour",
                    "usd_per_million_tokens",
                    "throughput_band_pct",
                    "energy_cost_band_pct",
                    "sources",
                ],
                summary_rows,
            )?,
        ));
        let mut bd_csv = Vec::new();
        let mut mem_csv = Vec::new();
        for r in &ok {
            let j = &r.run.outcome.as_ref().unwrap().json;
            for (k, v) in j["breakdown"].as_object().into_iter().flatten() {
                bd_csv.push(vec![r.run.scenario_name.clone(), r.run.mode.clone(), k.clone(), v.to_string()]);
            }
            for (k, v) in j["memory"]["components"].as_object().into_iter().flatten() {
                mem_csv.push(vec![r.run.scenario_name.clone(), r.run.mode.clone(), k.clone(), v.to_string()]);
            }
        }
        files.push(("breakdown.csv".into(), csv(&["scenario", "mode", "part", "seconds"], bd_csv)?));
        files.push(("memory.csv".into(), csv(&["scenario", "mode", "component", "bytes_per_gpu"], mem_csv)?));
        let sc: Vec<Vec<String>> = inp
            .entries
            .iter()
            .flat_map(|e| {
                e.scaling.iter().map(move |p| {
                    vec![
                        e.file.clone(),
                        e.name.clone(),
                        e.primary_mode.clone(),
                        p.gpus.to_string(),
                        p.dp.to_string(),
                        p.tokens_per_s.map(|t| t.to_string()).unwrap_or_default(),
                        p.fits.to_string(),
                        p.flags.join(" "),
                    ]
                })
            })
            .collect();
        files.push(("scaling.csv".into(), csv(&["file", "scenario", "mode", "gpus", "dp", "tokens_per_s", "fits", "predict_args_after_scenario"], sc)?));
        if let Some(_p) = inp.prices {
            let tt: Vec<Vec<String>> = all
                .iter()
                .filter(|r| r.run.mode == "train")
                .filter_map(|r| r.c.as_ref().map(|c| (r, c)))
                .map(|(r, c)| {
                    let (h, usd, kwh) = time_to_train(c, inp.tokens);
                    vec![
                        r.run.scenario_name.clone(),
                        format!("{}", inp.tokens),
                        format!("{h}"),
                        format!("{usd}"),
                        format!("{kwh}"),
                        format!("{}", band.step_time_pct),
                        format!("{}", band.energy() * 100.0),
                    ]
                })
                .collect();
            files
                .push(("time_to_train.csv".into(), csv(&["scenario", "tokens", "hours", "usd", "facility_kwh", "time_band_pct", "cost_energy_band_pct"], tt)?));
        }
        let mut src = Vec::new();
        for r in &ok {
            if r.run.mode != r.entry.primary_mode {
                continue;
            }
            for u in &r.run.outcome.as_ref().unwrap().used {
                src.push(vec![r.run.scenario_name.clone(), u.name.clone(), u.value.clone(), u.source.kind().into(), u.source.citation().into()]);
            }
        }
        files.push(("sources.csv".into(), csv(&["scenario", "number", "value", "kind", "source"], src)?));
    }

    // Claims.
    if let Some(cl) = inp.claims {
        b.push(Block::H(2, "Claims audit".into()));
        b.push(Block::P("Each figure the seed documents expect, beside gpuplan's prediction (with its band) and the physical bound. *IMPOSSIBLE*: beyond a physical bound. *CONTRADICTORY*: a throughput and an MFU claim of the same document about the same run imply different FLOP rates. *disagrees*: outside gpuplan's band (either the claim or gpuplan is off; the reason says by how much). *consistent*: inside the band.".into()));
        b.push(Block::Table(
            vec!["claim".into(), "source".into(), "claimed".into(), "gpuplan".into(), "physical bound".into(), "verdict".into(), "reason".into()],
            cl.iter().map(claim_row).collect(),
        ));
        files.push(("claims.csv".into(), claims_csv(cl)?));
    }

    files.push(("report.md".into(), markdown(&b)));
    files.push(("report.html".into(), html(inp.title, &b)));
    files.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(files)
}

fn fmt_time(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.2} s")
    } else {
        format!("{:.1} ms", s * 1e3)
    }
}

fn range(c: &Checked) -> String {
    let u = super::claims::unit(&c.claim.quantity);
    if c.claim.low == c.claim.high {
        format!("{} {u}", short(c.claim.low))
    } else {
        format!("{}-{} {u}", short(c.claim.low), short(c.claim.high))
    }
}

fn claim_row(c: &Checked) -> Vec<String> {
    vec![
        format!("{}: {}", c.claim.id, c.claim.quote),
        c.claim.source.clone(),
        range(c),
        c.predicted.map_or("-".into(), |p| {
            format!("{} ±{:.0}%{}", short(p), c.tolerance * 100.0, if c.provenance.is_empty() { String::new() } else { format!(" (inputs: {})", c.provenance) })
        }),
        c.bound.as_ref().map_or("- (datasheet figure)".into(), |(v, w)| format!("{} ({w})", short(*v))),
        if c.verdict == super::claims::Verdict::Consistent { c.verdict.name().into() } else { format!("**{}**", c.verdict.name()) },
        {
            let mut r = c.reasons.join("; ");
            if let Some(n) = &c.claim.note {
                r += &format!("{}note: {n}", if r.is_empty() { "" } else { ". " });
            }
            r
        },
    ]
}

/// The claims audit as a terminal table.
pub fn claims_text(cl: &[Checked]) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    for c in cl {
        let _ = writeln!(o, "{:<11} {}  [{}]", c.verdict.name(), c.claim.id, c.claim.source);
        let _ = writeln!(o, "    claim    {}  — \"{}\"", range(c), c.claim.quote);
        let _ = writeln!(
            o,
            "    gpuplan  {}",
            c.predicted.map_or("-".into(), |p| format!(
                "{} ±{:.0}% ({}){}",
                short(p),
                c.tolerance * 100.0,
                c.tolerance_origin,
                if c.provenance.is_empty() { String::new() } else { format!("; inputs: {}", c.provenance) }
            ))
        );
        if let Some((v, w)) = &c.bound {
            let _ = writeln!(o, "    bound    {} ({w})", short(*v));
        }
        if !c.reasons.is_empty() {
            let _ = writeln!(o, "    why      {}", c.reasons.join("; "));
        }
    }
    o
}

fn claims_csv(cl: &[Checked]) -> Result<String, String> {
    csv(
        &[
            "id",
            "source",
            "quote",
            "quantity",
            "unit",
            "claimed_low",
            "claimed_high",
            "predicted",
            "band_pct",
            "band_origin",
            "bound",
            "bound_what",
            "verdict",
            "reasons",
            "inputs",
            "note",
        ],
        cl.iter()
            .map(|c| {
                vec![
                    c.claim.id.clone(),
                    c.claim.source.clone(),
                    c.claim.quote.clone(),
                    c.claim.quantity.clone(),
                    super::claims::unit(&c.claim.quantity).into(),
                    format!("{}", c.claim.low),
                    format!("{}", c.claim.high),
                    c.predicted.map(|p| format!("{p}")).unwrap_or_default(),
                    format!("{}", c.tolerance * 100.0),
                    c.tolerance_origin.clone(),
                    c.bound.as_ref().map(|b| format!("{}", b.0)).unwrap_or_default(),
                    c.bound.as_ref().map(|b| b.1.clone()).unwrap_or_default(),
                    c.verdict.name().into(),
                    c.reasons.join("; "),
                    c.provenance.clone(),
                    c.claim.note.clone().unwrap_or_default(),
                ]
            })
            .collect(),
    )
}

fn csv(head: &[&str], rows: Vec<Vec<String>>) -> Result<String, String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(head).map_err(|e| e.to_string())?;
    for r in rows {
        w.write_record(&r).map_err(|e| e.to_string())?;
    }
    String::from_utf8(w.into_inner().map_err(|e| e.to_string())?).map_err(|e| e.to_string())
}

fn md_cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

fn markdown(blocks: &[Block]) -> String {
    let mut o = String::new();
    for b in blocks {
        match b {
            Block::H(l, t) => o += &format!("{} {t}\n\n", "#".repeat(*l as usize)),
            Block::P(t) => o += &format!("{t}\n\n"),
            Block::Table(h, rows) => {
                o += &format!("| {} |\n", h.iter().map(|c| md_cell(c)).collect::<Vec<_>>().join(" | "));
                o += &format!("|{}\n", " --- |".repeat(h.len()));
                for r in rows {
                    o += &format!("| {} |\n", r.iter().map(|c| md_cell(c)).collect::<Vec<_>>().join(" | "));
                }
                o += "\n";
            }
            Block::Chart(name, _) => o += &format!("![{name}](charts/{name}.svg)\n\n"),
        }
    }
    o
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Inline markdown of a paragraph: `code`, **bold**, *italic*.
fn inline(s: &str) -> String {
    let mut out = String::new();
    let e = esc(s);
    let mut code = false;
    for (i, part) in e.split('`').enumerate() {
        if i > 0 {
            out += if code { "</code>" } else { "<code>" };
            code = !code;
        }
        if code {
            out += part;
        } else {
            let mut t = String::new();
            for (k, p) in part.split("**").enumerate() {
                if k > 0 {
                    t += if k % 2 == 1 { "<b>" } else { "</b>" };
                }
                t += p;
            }
            let mut u = String::new();
            for (k, p) in t.split('*').enumerate() {
                if k > 0 {
                    u += if k % 2 == 1 { "<i>" } else { "</i>" };
                }
                u += p;
            }
            out += &u;
        }
    }
    out
}

fn html(title: &str, blocks: &[Block]) -> String {
    let mut o = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>gpuplan report: {}</title>\n<style>\nbody{{font-family:sans-serif;max-width:1160px;margin:24px auto;padding:0 16px;color:#222;line-height:1.45}}\ntable{{border-collapse:collapse;margin:8px 0 16px;font-size:13px}}\nth,td{{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}}\nth{{background:#f2f2f2}}\ncode{{background:#f4f4f4;padding:0 3px}}\n.chart{{margin:12px 0 20px}}\n.chart svg{{max-width:100%;height:auto}}\n</style></head><body>\n",
        esc(title)
    );
    for b in blocks {
        match b {
            Block::H(l, t) => o += &format!("<h{l}>{}</h{l}>\n", inline(t)),
            Block::P(t) => o += &format!("<p>{}</p>\n", inline(t)),
            Block::Table(h, rows) => {
                o += "<table><tr>";
                for c in h {
                    o += &format!("<th>{}</th>", inline(c));
                }
                o += "</tr>\n";
                for r in rows {
                    o += "<tr>";
                    for c in r {
                        o += &format!("<td>{}</td>", inline(c));
                    }
                    o += "</tr>\n";
                }
                o += "</table>\n";
            }
            Block::Chart(name, svg) => {
                let body = svg.find("<svg").map(|i| &svg[i..]).unwrap_or(svg);
                o += &format!("<div class=\"chart\" id=\"{name}\">{body}</div>\n");
            }
        }
    }
    o += "</body></html>\n";
    o
}
