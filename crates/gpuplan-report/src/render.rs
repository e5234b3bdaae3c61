//! The report's files: markdown (charts as SVG files beside it), a self-contained HTML page (charts
//! inline) and CSV tables. Both documents are rendered from one list of blocks, which one function
//! per section appends to, in the order the report shows them.

use gpuplan_config::prediction::{finite, PredictionDoc};

use super::charts::{self, short, Banded};
use super::claims::Checked;
use super::prices::{GpuPrice, Prices};
use super::{cost, provenance, time_to_train, Band, Costed, Entry, Predicted, Run};

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

/// The report being built: the blocks of its documents and its other files (relative path,
/// contents).
#[derive(Default)]
struct Out {
    blocks: Vec<Block>,
    files: Vec<(String, String)>,
}

impl Out {
    fn h(&mut self, level: u8, text: impl Into<String>) {
        self.blocks.push(Block::H(level, text.into()));
    }
    fn p(&mut self, text: impl Into<String>) {
        self.blocks.push(Block::P(text.into()));
    }
    fn table(&mut self, head: Vec<String>, rows: Vec<Vec<String>>) {
        self.blocks.push(Block::Table(head, rows));
    }
    fn file(&mut self, path: &str, contents: String) {
        self.files.push((path.into(), contents));
    }
    /// A chart: `charts/NAME.svg` and its block.
    fn chart(&mut self, name: &str, svg: Result<String, String>) -> Result<(), String> {
        let svg = svg?;
        self.files.push((format!("charts/{name}.svg"), svg.clone()));
        self.blocks.push(Block::Chart(name.into(), svg));
        Ok(())
    }
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
                    (Ok(p), Some(pr)) => Some(cost(&p.scenario, &p.doc, pr)),
                    _ => None,
                },
            })
        })
        .collect()
}

/// What the sections read: the input, every run and those predicted, and the note under the charts.
struct Ctx<'a> {
    inp: &'a Input<'a>,
    band: &'a Band,
    all: &'a [Row<'a>],
    /// The runs with a prediction.
    ok: &'a [(&'a Row<'a>, &'a Predicted)],
    /// Where the charts' inputs came from and their band.
    note: String,
}

/// The run groups of the bar charts, by `mode_index`.
const MODES: [&str; 3] = ["train", "prefill", "decode"];

/// A run's name in tables and charts; "[no fit]" marks a configuration predicted not to fit in memory.
fn label(r: &Run) -> String {
    let fits = r.outcome.as_ref().map(|p| p.doc.memory.fits).unwrap_or(true);
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

/// A number of the document as its JSON text reads: NaN where it is written as `null`.
fn num(v: f64) -> f64 {
    finite(v).unwrap_or(f64::NAN)
}

/// A value of the document as its JSON text writes it (`null` for a NaN).
fn json_text<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

const GIB: f64 = (1u64 << 30) as f64;

/// Render every file of the report: (relative path, contents).
pub fn render(inp: &Input) -> Result<Vec<(String, String)>, String> {
    let all = rows(inp.entries, inp.prices);
    let ok: Vec<(&Row, &Predicted)> = all.iter().filter_map(|r| r.run.outcome.as_ref().ok().map(|p| (r, p))).collect();
    let cx = Ctx { inp, band: inp.band, all: &all, ok: &ok, note: chart_note(&all, inp.band) };
    let mut o = Out::default();
    header(&mut o, &cx);
    inputs(&mut o, &cx)?;
    if !inp.entries.is_empty() {
        side_by_side(&mut o, &cx);
        per_token_charts(&mut o, &cx)?;
        if inp.prices.is_some() {
            time_to_train_table(&mut o, &cx);
        }
        step_breakdown(&mut o, &cx)?;
        stragglers(&mut o, &cx)?;
        memory(&mut o, &cx)?;
        power(&mut o, &cx)?;
        scaling(&mut o, &cx)?;
        csv_files(&mut o, &cx)?;
    }
    if let Some(cl) = inp.claims {
        claims_audit(&mut o, cl)?;
    }
    let Out { blocks, mut files } = o;
    files.push(("report.md".into(), markdown(&blocks)));
    files.push(("report.html".into(), html(inp.title, &blocks)));
    files.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(files)
}

/// The note under the charts: the source kinds of the numbers the predictions used, and the band.
fn chart_note(all: &[Row], band: &Band) -> String {
    let mut kinds: Vec<String> = all.iter().filter_map(|r| r.run.outcome.as_ref().ok().map(|p| provenance(&p.used))).collect();
    kinds.sort();
    kinds.dedup();
    let inputs = match kinds.as_slice() {
        [one] => format!("inputs: {one} numbers per bar (sources.csv)"),
        _ => "inputs: source kinds per scenario in the table above (sources.csv)".to_string(),
    };
    format!("{inputs}; band: ±validation MAPE over {} measured runs (see \"Inputs and their sources\")", band.n_runs)
}

/// Title and how to regenerate the report.
fn header(o: &mut Out, cx: &Ctx) {
    let inp = cx.inp;
    o.h(1, format!("gpuplan report: {}", inp.title));
    o.p(format!(
        "Regenerate: `gpuplan report {}`. Every figure is the analytic engine's prediction{}; none is measured on the systems shown.",
        inp.command,
        if inp.entries.is_empty() { "" } else { " (`gpuplan predict --json` with the flags in `summary.csv`)" }
    ));
}

/// "Inputs and their sources": each scenario's layout and source kinds, the bands, the prices
/// (and `prices.csv`).
fn inputs(o: &mut Out, cx: &Ctx) -> Result<(), String> {
    let (inp, band) = (cx.inp, cx.band);
    o.h(2, "Inputs and their sources");
    if !inp.entries.is_empty() {
        o.table(
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
        );
    }
    o.p("Source kinds: *datasheet* (a vendor document), *measured* (a calibration profile), *transferred* (measured on another GPU and carried over), *unsourced* (an engineering estimate that says so). `sources.csv` lists every number with its citation.");
    o.p(format!(
        "Uncertainty bands: the predictor's mean absolute percentage error against measured runs — step time {:.1}%, power {:.1}%, peak memory {:.1}% ({}). Throughput bands use the step-time error; energy and cost bands add the step-time and power errors. The runs are H200 runs; B200 and other systems are predicted from datasheet and transferred numbers, so their real error is likely larger than this band.",
        band.step_time_pct, band.power_pct, band.memory_pct, band.origin
    ));
    if let Some(p) = inp.prices {
        prices(o, p)?;
    } else if !inp.entries.is_empty() {
        o.p("No prices given (`--prices FILE` or price flags): dollar figures are left out.");
    }
    Ok(())
}

/// The prices used, as a paragraph, a table and `prices.csv`.
fn prices(o: &mut Out, p: &Prices) -> Result<(), String> {
    let unsourced = p.figures().iter().filter(|f| f.1.unsourced).count();
    o.p(format!(
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
            GpuPrice::Owned { purchase_usd_per_gpu, amortization_years, utilization } =>
                format!(" (owned: {} $ over {} years at {:.0}% utilization)", purchase_usd_per_gpu.value, amortization_years.value, utilization.value * 100.0),
        },
        p.pue.as_ref().map_or("the system file's (sources.csv)".to_string(), |x| format!("{} (price file)", x.value)),
        p.node_overhead_w.as_ref().map_or("the system file's host power per node (sources.csv)".to_string(), |x| format!("{} W (price file)", x.value)),
    ));
    o.table(
        vec!["price".into(), "value".into(), "kind".into(), "source".into()],
        p.figures().iter().map(|(k, f)| vec![k.to_string(), format!("{}", f.value), f.kind().into(), f.source.clone()]).collect(),
    );
    o.file(
        "prices.csv",
        csv(
            &["key", "value", "kind", "source", "note"],
            p.figures()
                .iter()
                .map(|(k, f)| vec![k.to_string(), format!("{}", f.value), f.kind().into(), f.source.clone(), f.note.clone().unwrap_or_default()])
                .collect(),
        )?,
    );
    Ok(())
}

/// "Side by side": one row per run, throughput, energy, cost, power and memory.
fn side_by_side(o: &mut Out, cx: &Ctx) {
    let (inp, band) = (cx.inp, cx.band);
    o.h(2, "Side by side");
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
    for r in cx.all {
        match (&r.run.outcome, &r.c) {
            (Ok(p), c) => {
                let d = &p.doc;
                let mut row = vec![
                    label(r.run),
                    p.scenario.n_gpus.to_string(),
                    pm(num(d.tokens_per_s), band.throughput()),
                    short(num(d.tokens_per_s_per_gpu)),
                    format!("{:.1}%", num(d.mfu) * 100.0),
                    short(1.0 / num(d.energy.j_per_token)),
                    pm(num(d.energy.kwh_per_million_tokens), band.energy()),
                    c.as_ref().map_or("-".into(), |c| pm(c.facility_kwh_per_million_tokens, band.energy())),
                    c.as_ref().map_or("-".into(), |c| format!("${}", pm(c.usd_per_million_tokens, band.energy()))),
                    pm(num(d.power.avg_w_per_gpu), band.power()),
                    format!("{:.2}", num(d.power.node_w) / 1e3),
                    format!("{:.1} / {:.0}", num(d.memory.peak_bytes_per_gpu) / GIB, num(d.memory.capacity_bytes) / GIB),
                    if d.memory.fits { "yes".into() } else { "**no**".into() },
                ];
                if inp.prices.is_none() {
                    // Without prices there is no $ column and no facility energy (it depends on the price file's PUE).
                    row.remove(8);
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
    o.table(head, tab);
    o.p("Training tokens are trained tokens (global batch x sequence per step); prefill tokens are prompt tokens; decode tokens are generated tokens at the given KV length. IT energy: GPUs and host, as `predict` reports (`/energy/kwh_per_million_tokens`); facility energy multiplies by PUE and uses the price file's node overhead where it sets one. A job on fewer GPUs than a node is charged the whole node's host power, as `predict` counts it (`/power/node_w`); GPUs are charged per GPU-hour, network and storage per node-hour.");
}

/// "Throughput, energy and cost per token": bar charts over every run.
fn per_token_charts(o: &mut Out, cx: &Ctx) -> Result<(), String> {
    let (inp, band, all, note) = (cx.inp, cx.band, cx.all, &cx.note);
    let labels: Vec<String> = all.iter().map(|r| label(r.run)).collect();
    let groups: Vec<usize> = all.iter().map(|r| mode_index(&r.run.mode)).collect();
    let gnames: Vec<String> = MODES.iter().map(|s| s.to_string()).collect();
    let val = |f: &dyn Fn(&Row) -> Option<f64>, rel: f64| -> Vec<Option<Banded>> {
        all.iter().map(|r| f(r).filter(|v| v.is_finite() && *v > 0.0).map(|v| Banded { value: v, lo: v * (1.0 - rel), hi: v * (1.0 + rel) })).collect()
    };
    let doc = |r: &Row, f: fn(&PredictionDoc) -> f64| r.run.outcome.as_ref().ok().and_then(|p| finite(f(&p.doc)));
    o.h(2, "Throughput, energy and cost per token");
    o.chart(
        "tokens-per-s-per-gpu",
        charts::bars(
            "Throughput per GPU (tokens/s per GPU)",
            "tokens/s per GPU (log scale when values span >30x)",
            &labels,
            &val(&|r| doc(r, |d| d.tokens_per_s_per_gpu), band.throughput()),
            &groups,
            &gnames,
            note,
        ),
    )?;
    o.chart(
        "tokens-per-joule",
        charts::bars(
            "Energy efficiency (tokens per joule, IT energy)",
            "tokens per joule (GPUs + host)",
            &labels,
            &val(&|r| doc(r, |d| d.energy.j_per_token).map(|j| 1.0 / j), band.energy()),
            &groups,
            &gnames,
            note,
        ),
    )?;
    if let Some(prices) = inp.prices {
        o.chart(
            "kwh-per-million-tokens",
            charts::bars(
                "Facility energy per 1M tokens (kWh, PUE applied)",
                "kWh per 1M tokens",
                &labels,
                &val(&|r| r.c.as_ref().map(|c| c.facility_kwh_per_million_tokens), band.energy()),
                &groups,
                &gnames,
                note,
            ),
        )?;
        o.chart(
            "usd-per-million-tokens",
            charts::bars(
                "Cost per 1M tokens (USD)",
                "USD per 1M tokens",
                &labels,
                &val(&|r| r.c.as_ref().map(|c| c.usd_per_million_tokens), band.energy()),
                &groups,
                &gnames,
                &format!("prices: {} (prices.csv); {note}", prices.name),
            ),
        )?;
    } else {
        o.chart(
            "kwh-per-million-tokens",
            charts::bars(
                "IT energy per 1M tokens (kWh)",
                "kWh per 1M tokens",
                &labels,
                &val(&|r| doc(r, |d| d.energy.kwh_per_million_tokens), band.energy()),
                &groups,
                &gnames,
                note,
            ),
        )?;
    }
    Ok(())
}

/// "Time and cost to train N tokens" (with prices): one row per training run; with `--goodput`,
/// the goodput-adjusted time, cost and $/1M tokens beside them (from `/goodput` of the run's
/// `predict --json` document).
fn time_to_train_table(o: &mut Out, cx: &Ctx) {
    let (inp, band) = (cx.inp, cx.band);
    o.h(2, format!("Time and cost to train {} tokens", short(inp.tokens)));
    let goodput = cx.all.iter().any(|r| r.run.mode == "train" && r.run.outcome.as_ref().is_ok_and(|p| p.doc.goodput.is_some()));
    let mut tt = Vec::new();
    for r in cx.all.iter().filter(|r| r.run.mode == "train") {
        if let Some(c) = &r.c {
            let (h, usd, kwh) = time_to_train(c, inp.tokens);
            let mut row = vec![
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
            ];
            if goodput {
                let g = r.run.outcome.as_ref().ok().and_then(|p| p.doc.goodput.as_ref());
                match g.and_then(|g| g.train.as_ref().map(|t| (g, t))) {
                    Some((g, t)) => {
                        let wall_h = t.days * 24.0;
                        row.extend([
                            format!("{:.1}%", 100.0 * g.effective_fraction),
                            format!("{} ({}–{})", short(t.days), short(t.days_p5), short(t.days_p95)),
                            format!(
                                "${} (${}–${})",
                                short(wall_h * c.usd_per_hour),
                                short(t.days_p5 * 24.0 * c.usd_per_hour),
                                short(t.days_p95 * 24.0 * c.usd_per_hour)
                            ),
                            format!("{:.4}", c.usd_per_million_tokens / g.effective_fraction),
                            format!("{:.0}", t.failures),
                        ]);
                    }
                    None => row.extend(std::iter::repeat_n("-".to_string(), 5)),
                }
            }
            tt.push(row);
        }
    }
    let mut head: Vec<String> = vec![
        "scenario · mode".into(),
        "GPUs".into(),
        "days".into(),
        "cost".into(),
        "facility MWh".into(),
        "$/hour (job)".into(),
        "capital / energy / network+storage".into(),
        "fits".into(),
    ];
    if goodput {
        head.extend([
            "effective time".into(),
            "days with failures (p5–p95)".into(),
            "cost with failures (p5–p95)".into(),
            "$/1M tok with failures".into(),
            "failures".into(),
        ]);
    }
    o.table(head, tt);
    o.p(format!("At the predicted training throughput, running without interruption (`--tokens {:e}`); checkpointing, failures and evaluation are not included. A configuration that does not fit in memory (fits: no) cannot run as given; its row shows what it would cost if it did.", inp.tokens));
    if goodput {
        let about = cx
            .all
            .iter()
            .find_map(|r| r.run.outcome.as_ref().ok().and_then(|p| p.doc.goodput.as_ref()))
            .map(|g| {
                format!(
                    "failure rates from {}, {} recovery, detection {:.0} s, relaunch {:.0} s, checkpoints written and read at the given storage bandwidth",
                    g.reliability, g.recovery, g.detect_s, g.restart_s
                )
            })
            .unwrap_or_default();
        o.p(format!("With failures (`--goodput`: {about}): the job pays for wall-clock time, so time and cost are the failure-free figures divided by the effective training-time fraction; the p5–p95 range is the Poisson spread of the failure count over the run only (not the failure rates' uncertainty, nor the throughput band). The model and its sources: ARCHITECTURE.md, `goodput`."));
        failures_by_component(o, cx);
    }
}

/// With `--goodput`: each training run's expected failures over the run by component (from
/// `/goodput/components` of its document), with each rate's source.
fn failures_by_component(o: &mut Out, cx: &Ctx) {
    let mut rows = Vec::new();
    for r in cx.all.iter().filter(|r| r.run.mode == "train") {
        let Some(g) = r.run.outcome.as_ref().ok().and_then(|p| p.doc.goodput.as_ref()) else { continue };
        let days = g.train.as_ref().map(|t| t.days);
        for c in &g.components {
            let share = if g.failures_per_day > 0.0 { 100.0 * c.failures_per_day / g.failures_per_day } else { 0.0 };
            rows.push(vec![
                label(r.run),
                c.name.clone(),
                format!("{:.3e} per {}-day x {}", c.failures_per_unit_day, c.per, c.units),
                format!("{:.2}", c.failures_per_day),
                format!("{share:.1}%"),
                days.map_or("-".into(), |d| format!("{:.0}", c.failures_per_day * d)),
                c.source.clone(),
            ]);
        }
    }
    if rows.is_empty() {
        return;
    }
    o.table(
        ["scenario · mode", "component", "rate x units", "failures per day", "share", "failures over the run", "source"]
            .iter()
            .map(|h| h.to_string())
            .collect(),
        rows,
    );
}

/// "Where the step time goes": the critical path's parts as a stacked chart.
fn step_breakdown(o: &mut Out, cx: &Ctx) -> Result<(), String> {
    let band = cx.band;
    o.h(2, "Where the step time goes");
    let part_names: Vec<String> = gpuplan_core::analytic::Breakdown::default().parts().iter().map(|(k, _)| k.to_string()).collect();
    let bd_rows: Vec<Vec<f64>> = cx
        .ok
        .iter()
        .map(|(_, p)| {
            let d = &p.doc;
            let total = finite(d.step_time_s).unwrap_or(1.0);
            part_names.iter().map(|k| 100.0 * d.breakdown.get(&format!("{k}_s")).copied().and_then(finite).unwrap_or(0.0) / total).collect()
        })
        .collect();
    let used_parts: Vec<usize> = (0..part_names.len()).filter(|k| bd_rows.iter().any(|r| r[*k] > 0.0)).collect();
    let ok_labels: Vec<String> =
        cx.ok.iter().map(|(r, p)| format!("{} ({} ±{:.0}%)", label(r.run), fmt_time(finite(p.doc.step_time_s).unwrap_or(0.0)), band.step_time_pct)).collect();
    o.chart(
        "step-breakdown",
        charts::stacked(
            "Step time breakdown (% of one step; step time and its band in brackets)",
            "% of step time (critical path)",
            &ok_labels,
            &used_parts.iter().map(|k| part_names[*k].clone()).collect::<Vec<_>>(),
            &bd_rows.iter().map(|r| used_parts.iter().map(|k| r[*k]).collect()).collect::<Vec<_>>(),
            None,
            0.0,
            &format!("step = train: one optimizer step; prefill: one forward pass; decode: one token step; {}", cx.note),
        ),
    )
}

/// A file-name part from a scenario name: lowercase letters, digits and dashes.
fn slug(name: &str) -> String {
    let s: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' { c.to_ascii_lowercase() } else { '-' }).collect();
    s.split('-').filter(|p| !p.is_empty()).collect::<Vec<_>>().join("-")
}

/// "Step time under stragglers" (`--stragglers`): per training scenario, the per-rank engine's
/// step-time distribution over its steps as a table, a CDF chart with p50/p90/p99 and the
/// fault-free step marked (`charts/stragglers-NAME.svg`), and its document
/// (`stragglers-NAME.json`, `simulate --per-rank --json`'s `/per_rank`).
fn stragglers(o: &mut Out, cx: &Ctx) -> Result<(), String> {
    let with: Vec<(&Entry, &super::Stragglers)> = cx.inp.entries.iter().filter_map(|e| e.stragglers.as_ref().map(|s| (e, s))).collect();
    if with.is_empty() {
        return Ok(());
    }
    o.h(2, "Step time under stragglers");
    let ms = |s: f64| format!("{:.3}", s * 1e3);
    let mut rows = Vec::new();
    let mut used: Vec<String> = Vec::new();
    let mut charts = Vec::new();
    for (e, st) in &with {
        let mut name = slug(&e.name);
        if used.contains(&name) {
            name = format!("{name}-{}", used.len() + 1);
        }
        used.push(name.clone());
        match &st.doc {
            Ok(d) => {
                let t = &d.step_time_s;
                let (k, f, persistence) = d.stragglers.as_ref().map_or((0, 1.0, "-".to_string()), |s| (s.count, s.factor, s.persistence.clone()));
                rows.push(vec![
                    format!("{} · train", e.name),
                    d.ranks.to_string(),
                    format!("{k} at {f}x"),
                    persistence,
                    format!("{} (seed {})", d.steps, d.seed),
                    ms(d.fault_free_step_time_s),
                    ms(t.mean),
                    ms(t.p50),
                    ms(t.p90),
                    ms(t.p99),
                    ms(t.max),
                    format!("{:+.1}%", 100.0 * (t.mean / d.fault_free_step_time_s - 1.0)),
                ]);
                // Seconds for steps of a second or more, else milliseconds.
                let (unit, scale) = if d.fault_free_step_time_s >= 1.0 { ("s", 1.0) } else { ("ms", 1e3) };
                let times: Vec<f64> = d.per_step.iter().map(|s| s.step_time_s * scale).collect();
                let marks = vec![
                    ("no fault".to_string(), d.fault_free_step_time_s * scale),
                    ("p50".to_string(), t.p50 * scale),
                    ("p90".to_string(), t.p90 * scale),
                    ("p99".to_string(), t.p99 * scale),
                ];
                let file = format!("stragglers-{name}.json");
                o.file(&file, serde_json::to_string_pretty(d).map_err(|e| e.to_string())? + "\n");
                charts.push((
                    format!("stragglers-{name}"),
                    charts::step_cdf(
                        &format!("{}: step time over {} steps, {k} straggler(s) at {f}x", e.name, d.steps),
                        unit,
                        &times,
                        &marks,
                        &format!("per-rank discrete-event engine; `gpuplan simulate {}`; data: {file}", st.command),
                    ),
                ));
            }
            Err(err) => rows.push(vec![
                format!("{} · train", e.name),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                format!("cannot simulate: {err}"),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
            ]),
        }
    }
    o.table(
        [
            "scenario · mode",
            "GPUs",
            "stragglers",
            "persistence",
            "steps",
            "no fault (ms)",
            "mean (ms)",
            "p50 (ms)",
            "p90 (ms)",
            "p99 (ms)",
            "max (ms)",
            "mean vs no fault",
        ]
        .iter()
        .map(|h| h.to_string())
        .collect(),
        rows,
    );
    o.p("The per-rank discrete-event engine (`gpuplan simulate --per-rank`) plays every GPU of the training run in classes of GPUs that behave alike; in each step the drawn stragglers compute at the given share of their speed, and a collective waits for its slowest member. Percentiles are nearest-rank over the simulated steps; no fault is the same step with every GPU healthy. Persistence: `step` draws fresh stragglers each step, `job` keeps one draw throughout, a number is a straggler's mean lifetime in steps (geometric). The draw of each run is in its `stragglers-*.json` (`stragglers.distribution`, `per_step`).");
    for (e, st) in &with {
        if st.doc.is_ok() {
            o.p(format!("Reproduce {}: `gpuplan simulate {} --json`.", e.name, st.command));
        }
    }
    for (name, svg) in charts {
        o.chart(&name, svg)?;
    }
    Ok(())
}

/// "Memory per GPU": the peak GPU's components as a stacked chart against HBM capacity.
fn memory(o: &mut Out, cx: &Ctx) -> Result<(), String> {
    let band = cx.band;
    // In the order of `MemoryPlan::components`, which the document's map does not keep.
    let mem_names: Vec<String> = ["weights", "gradients", "optimizer", "activations", "logits", "kv_cache", "transient", "runtime", "fragmentation"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mem_rows: Vec<Vec<f64>> = cx
        .ok
        .iter()
        .map(|(_, p)| mem_names.iter().map(|k| p.doc.memory.components.get(&format!("{k}_bytes")).copied().and_then(finite).unwrap_or(0.0) / GIB).collect())
        .collect();
    let caps: Vec<f64> = cx.ok.iter().map(|(_, p)| finite(p.doc.memory.capacity_bytes).unwrap_or(0.0) / GIB).collect();
    let used_mem: Vec<usize> = (0..mem_names.len()).filter(|k| mem_rows.iter().any(|r| r[*k] > 0.0)).collect();
    o.h(2, "Memory per GPU");
    o.chart(
        "memory-breakdown",
        charts::stacked(
            "Peak memory per GPU (GiB)",
            "GiB per GPU",
            &cx.ok.iter().map(|(r, _)| label(r.run)).collect::<Vec<_>>(),
            &used_mem.iter().map(|k| mem_names[*k].clone()).collect::<Vec<_>>(),
            &mem_rows.iter().map(|r| used_mem.iter().map(|k| r[*k]).collect()).collect::<Vec<_>>(),
            Some((&caps, "HBM capacity")),
            band.memory(),
            &format!("whiskers: peak-memory band ±{:.1}% ({})", band.memory_pct, band.origin),
        ),
    )
}

/// "Power": per GPU and per node as bar charts (bands capped at TDP), and a table with clocks.
fn power(o: &mut Out, cx: &Ctx) -> Result<(), String> {
    let (band, note) = (cx.band, &cx.note);
    o.h(2, "Power");
    let okl: Vec<String> = cx.ok.iter().map(|(r, _)| label(r.run)).collect();
    let okg: Vec<usize> = cx.ok.iter().map(|(r, _)| mode_index(&r.run.mode)).collect();
    let gnames: Vec<String> = MODES.iter().map(|s| s.to_string()).collect();
    // The band's upper end stops at the cap: TDP per GPU, TDP x GPUs + host per node.
    let pv = |f: fn(&PredictionDoc) -> f64, scale: f64, per_node: bool| -> Vec<Option<Banded>> {
        cx.ok
            .iter()
            .map(|(_, p)| {
                let sys = &p.scenario.system;
                let gpus = p.scenario.n_gpus.min(sys.gpus_per_node as u64) as f64;
                let cap = if per_node { sys.gpu.tdp.value.value() * gpus + sys.host_power_per_node.value.value() } else { sys.gpu.tdp.value.value() } * scale;
                finite(f(&p.doc)).map(|v| v * scale).map(|v| Banded { value: v, lo: v * (1.0 - band.power()), hi: (v * (1.0 + band.power())).min(cap.max(v)) })
            })
            .collect()
    };
    o.chart(
        "power-per-gpu",
        charts::bars(
            "Average power per GPU (W)",
            "W per GPU (time-averaged over a step)",
            &okl,
            &pv(|d| d.power.avg_w_per_gpu, 1.0, false),
            &okg,
            &gnames,
            &format!("band capped at TDP; TDP and idle power per scenario in sources.csv; {note}"),
        ),
    )?;
    o.chart(
        "power-per-node",
        charts::bars(
            "Average power per node (kW, GPUs + host)",
            "kW per node",
            &okl,
            &pv(|d| d.power.node_w, 1e-3, true),
            &okg,
            &gnames,
            &format!("host power: the system file's figure (sources.csv); band capped at TDP x GPUs + host; {note}"),
        ),
    )?;
    let pt = cx
        .ok
        .iter()
        .map(|(r, p)| {
            let d = &p.doc;
            vec![
                label(r.run),
                pm(finite(d.power.avg_w_per_gpu).unwrap_or(0.0), band.power()),
                format!("{:.0}", p.scenario.system.gpu.tdp.value.value()),
                format!("{:.0}", finite(d.power.sm_clock_mhz).unwrap_or(0.0)),
                if d.power.power_capped { "yes".into() } else { "no".into() },
                format!("{:.2}", finite(d.power.node_w).unwrap_or(0.0) / 1e3),
            ]
        })
        .collect();
    o.table(vec!["scenario · mode".into(), "W/GPU".into(), "TDP W".into(), "SM clock MHz".into(), "TDP-capped".into(), "kW/node".into()], pt);
    Ok(())
}

/// "Scaling with the data-parallel degree": throughput and efficiency curves over GPUs.
fn scaling(o: &mut Out, cx: &Ctx) -> Result<(), String> {
    let (inp, band) = (cx.inp, cx.band);
    o.h(2, "Scaling with the data-parallel degree");
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
    o.chart(
        "scaling-throughput",
        charts::curves(
            "Throughput vs GPUs (data-parallel degree scaled, per-replica batch kept)",
            "GPUs (log2)",
            "tokens/s (log)",
            &series,
            &hollow,
            true,
            band.throughput(),
            &format!("hollow circles: predicted not to fit in memory (throughput shown as if it did); {}", cx.note),
        ),
    )?;
    let eff: Vec<(String, Vec<(f64, f64)>)> = series
        .iter()
        .map(|(n, pts)| {
            let base = pts.first().map(|p| p.1 / p.0).unwrap_or(f64::NAN);
            (n.clone(), pts.iter().map(|p| (p.0, 100.0 * (p.1 / p.0) / base)).collect())
        })
        .collect();
    o.chart(
        "scaling-efficiency",
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
    o.p("Each point is the scenario re-predicted with `--gpus` and `--dp` scaled (and `--global-batch` scaled with dp in training), other flags unchanged; `scaling.csv` has the flags of every point. Efficiency below 100% is the data-parallel communication gpuplan predicts becoming exposed; across nodes it crosses the scale-out fabric.");
    Ok(())
}

/// `summary.csv`: one row per run, the document's figures with the costed ones and the bands.
fn summary_csv(cx: &Ctx) -> Result<String, String> {
    let band = cx.band;
    let summary_rows: Vec<Vec<String>> = cx
        .all
        .iter()
        .map(|r| match (&r.run.outcome, &r.c) {
            (Ok(p), c) => {
                let d = &p.doc;
                let cf = |g: fn(&Costed) -> f64| c.as_ref().map(|c| format!("{}", g(c))).unwrap_or_default();
                vec![
                    r.entry.file.clone(),
                    r.run.scenario_name.clone(),
                    r.run.mode.clone(),
                    flags(r.run),
                    String::new(),
                    json_text(&d.scenario.gpus),
                    json_text(&d.step_time_s),
                    json_text(&d.tokens_per_s),
                    json_text(&d.tokens_per_s_per_gpu),
                    json_text(&d.mfu),
                    json_text(&d.energy.j_per_token),
                    json_text(&d.energy.kwh_per_million_tokens),
                    json_text(&d.power.avg_w_per_gpu),
                    json_text(&d.power.node_w),
                    json_text(&d.memory.peak_bytes_per_gpu),
                    json_text(&d.memory.capacity_bytes),
                    json_text(&d.memory.fits),
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
    )
}

/// The CSV tables: summary, breakdown, memory, scaling, time to train (with prices) and sources.
fn csv_files(o: &mut Out, cx: &Ctx) -> Result<(), String> {
    let (inp, band) = (cx.inp, cx.band);
    o.file("summary.csv", summary_csv(cx)?);
    let mut bd_csv = Vec::new();
    let mut mem_csv = Vec::new();
    for (r, p) in cx.ok {
        for (k, v) in &p.doc.breakdown {
            bd_csv.push(vec![r.run.scenario_name.clone(), r.run.mode.clone(), k.clone(), json_text(v)]);
        }
        for (k, v) in &p.doc.memory.components {
            mem_csv.push(vec![r.run.scenario_name.clone(), r.run.mode.clone(), k.clone(), json_text(v)]);
        }
    }
    o.file("breakdown.csv", csv(&["scenario", "mode", "part", "seconds"], bd_csv)?);
    o.file("memory.csv", csv(&["scenario", "mode", "component", "bytes_per_gpu"], mem_csv)?);
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
    o.file("scaling.csv", csv(&["file", "scenario", "mode", "gpus", "dp", "tokens_per_s", "fits", "predict_args_after_scenario"], sc)?);
    if inp.prices.is_some() {
        let goodput = cx.all.iter().any(|r| r.run.mode == "train" && r.run.outcome.as_ref().is_ok_and(|p| p.doc.goodput.is_some()));
        let tt: Vec<Vec<String>> = cx
            .all
            .iter()
            .filter(|r| r.run.mode == "train")
            .filter_map(|r| r.c.as_ref().map(|c| (r, c)))
            .map(|(r, c)| {
                let (h, usd, kwh) = time_to_train(c, inp.tokens);
                let mut row = vec![
                    r.run.scenario_name.clone(),
                    format!("{}", inp.tokens),
                    format!("{h}"),
                    format!("{usd}"),
                    format!("{kwh}"),
                    format!("{}", band.step_time_pct),
                    format!("{}", band.energy() * 100.0),
                ];
                if goodput {
                    // Goodput-adjusted: wall hours (expected, p5, p95) and their cost; empty without.
                    let g = r.run.outcome.as_ref().ok().and_then(|p| p.doc.goodput.as_ref()).and_then(|g| g.train.as_ref().map(|t| (g, t)));
                    match g {
                        Some((g, t)) => row.extend(
                            [g.effective_fraction, t.days * 24.0, t.days_p5 * 24.0, t.days_p95 * 24.0, t.days * 24.0 * c.usd_per_hour, t.failures]
                                .map(|x| format!("{x}")),
                        ),
                        None => row.extend(std::iter::repeat_n(String::new(), 6)),
                    }
                }
                row
            })
            .collect();
        let mut head = vec!["scenario", "tokens", "hours", "usd", "facility_kwh", "time_band_pct", "cost_energy_band_pct"];
        if goodput {
            head.extend(["effective_fraction", "goodput_hours", "goodput_hours_p5", "goodput_hours_p95", "goodput_usd", "failures"]);
        }
        o.file("time_to_train.csv", csv(&head, tt)?);
    }
    let mut src = Vec::new();
    for (r, p) in cx.ok {
        if r.run.mode != r.entry.primary_mode {
            continue;
        }
        for u in &p.used {
            src.push(vec![r.run.scenario_name.clone(), u.name.clone(), u.value.clone(), u.source.kind().into(), u.source.citation().into()]);
        }
    }
    o.file("sources.csv", csv(&["scenario", "number", "value", "kind", "source"], src)?);
    Ok(())
}

/// "Claims audit": each seed claim beside gpuplan's prediction, and `claims.csv`.
fn claims_audit(o: &mut Out, cl: &[Checked]) -> Result<(), String> {
    o.h(2, "Claims audit");
    o.p("Each figure the seed documents expect, beside gpuplan's prediction (with its band) and the physical bound. *IMPOSSIBLE*: beyond a physical bound. *CONTRADICTORY*: a throughput and an MFU claim of the same document about the same run imply different FLOP rates. *disagrees*: outside gpuplan's band (either the claim or gpuplan is off; the reason says by how much). *consistent*: inside the band.");
    o.table(
        vec!["claim".into(), "source".into(), "claimed".into(), "gpuplan".into(), "physical bound".into(), "verdict".into(), "reason".into()],
        cl.iter().map(claim_row).collect(),
    );
    o.file("claims.csv", claims_csv(cl)?);
    Ok(())
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
