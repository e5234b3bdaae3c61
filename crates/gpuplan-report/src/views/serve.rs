//! `gpuplan serve`'s outputs: the table, the versioned JSON, CSV series, the load sweep and its
//! latency-vs-load chart, the SLO search's ranking, and predicted against measured.

use std::path::Path;

use anyhow::bail;
use plotters::prelude::*;

use gpuplan_config::deploy::Resolved;
use gpuplan_core::serve::stats::{Dist, Summary};
use gpuplan_core::serve::{self, Process, ServeResult};

/// Version of the JSON document `serve --json` prints.
pub const SERVE_SCHEMA_VERSION: u32 = 1;

fn dist_json(d: &Dist) -> serde_json::Value {
    serde_json::json!({ "n": d.n, "mean": nan_null(d.mean), "p50": nan_null(d.p50), "p90": nan_null(d.p90), "p95": nan_null(d.p95), "p99": nan_null(d.p99), "max": nan_null(d.max) })
}

pub fn nan_null(x: f64) -> serde_json::Value {
    if x.is_finite() {
        x.into()
    } else {
        serde_json::Value::Null
    }
}

pub fn summary_json(s: &Summary, qps: Option<f64>) -> serde_json::Value {
    serde_json::json!({
        "qps": qps,
        "requests": { "arrived": s.arrived, "completed": s.completed, "rejected": s.rejected, "unfinished": s.unfinished, "preempted": s.preempted_requests },
        "duration_s": s.duration_s,
        "throughput": {
            "requests_per_s": nan_null(s.request_throughput),
            "output_tokens_per_s": nan_null(s.output_token_throughput),
            "total_tokens_per_s": nan_null(s.total_token_throughput),
            "offered_qps": nan_null(s.offered_qps),
        },
        "ttft_s": dist_json(&s.ttft),
        "tpot_s": dist_json(&s.tpot),
        "e2e_latency_s": dist_json(&s.e2e),
        "queueing_s": dist_json(&s.queueing),
        "batch": { "mean": s.mean_batch },
        "kv_cache": { "mean_occupancy": s.mean_kv_occupancy, "max_occupancy": s.max_kv_occupancy },
        "power": { "avg_w_per_gpu": nan_null(s.avg_gpu_power_w) },
        "energy": {
            "gpu_j": s.gpu_energy_j,
            "j_per_output_token": s.j_per_output_token,
            "j_per_output_token_facility": s.j_per_output_token_facility,
            "kwh_per_million_output_tokens": s.j_per_output_token / 3.6e6 * 1e6,
        },
        "littles_law": { "mean_in_system": s.mean_in_system, "mean_queued": s.mean_queued },
    })
}

pub fn deployment_json(r: &Resolved, res: Option<&ServeResult>) -> serde_json::Value {
    let d = &r.deployment;
    let s0 = &d.pools[0].scenario;
    let pools: Vec<serde_json::Value> = d
        .pools
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut v = serde_json::json!({
                "role": p.role.name(), "replicas": p.n_replicas, "tp": p.scenario.parallel.tp, "pp": p.scenario.parallel.pp,
                "max_batch": p.sched.max_batch, "token_budget": p.sched.token_budget, "chunked_prefill": p.sched.chunked_prefill,
                "block_size": p.sched.block_size, "gpu_memory_utilization": p.sched.gpu_memory_utilization,
            });
            if p.attention_dp_ranks() > 1 {
                // Attention DP: the instance's ranks and expert layout; max_batch and token_budget hold per rank.
                let pc = &p.scenario.parallel;
                v["attention_dp"] = serde_json::json!({ "ranks": pc.dp, "ep": pc.ep, "etp": pc.etp, "gpus_per_replica": p.gpus_per_replica() });
            }
            if let Some(e) = serve::engines::defaults(p.scenario.workload.stack) {
                // The engine's own names for the knobs, with their values, and where the defaults come from.
                let mut engine = serde_json::json!({
                    "stack": e.stack.name(),
                    "kv_sizing": match p.sched.kv_sizing { serve::engines::KvSizing::OfFree => "of memory free after loading", serve::engines::KvSizing::OfTotal => "of total memory" },
                    "scheduler": match p.sched.policy { serve::engines::Policy::TrtllmInflight => "in-flight batching, GUARANTEED_NO_EVICT", serve::engines::Policy::VllmV1 => "vllm v1 (running first, preemption by recompute)" },
                    "cuda_graph_max_batch": p.sched.cuda_graphs.map(|g| g.max_batch),
                    "defaults_source": e.source,
                });
                engine[e.knob_max_batch] = p.sched.max_batch.into();
                engine[e.knob_token_budget] = p.sched.token_budget.into();
                engine[e.knob_kv_fraction] = p.sched.gpu_memory_utilization.into();
                v["engine"] = engine;
            }
            let (h, source) = serve::cost::HostOverhead::resolve(&p.sched, p.scenario.workload.stack);
            v["iteration_spread"] = (p.sched.iteration_spread && serve::cost::iteration_spread(p.scenario.workload.stack).is_some()).into();
            v["decode_attention"] = p.sched.decode_attention.name().into();
            v["cuda_graphs"] = match p.sched.cuda_graphs {
                Some(g) => serde_json::json!({ "mode": if g.prefill_step.is_some() { "full" } else { "decode" }, "context_step": g.context_step, "prefill_step": g.prefill_step, "host_us_per_iteration": h.graph_per_iteration.value() * 1e6, "gpu_us_per_layer": h.graph_per_layer.value() * 1e6, "gpu_us_per_layer_less_per_cache_gb": h.graph_per_layer_per_cache_gb.value() * 1e6 }),
                None => serde_json::Value::Null,
            };
            v["host_overhead_us"] = serde_json::json!({
                "per_iteration": h.per_iteration.value() * 1e6, "per_sequence": h.per_sequence.value() * 1e6, "per_layer_decode": h.per_layer_decode.value() * 1e6,
                "per_layer_chunk": h.per_layer_chunk.value() * 1e6, "gpu_overlap": h.gpu_overlap, "time_scale": h.time_scale, "source": source,
            });
            if let Some(st) = res.map(|x| &x.pools[i]) {
                v["kv_blocks_per_replica"] = st.kv_blocks_per_replica.into();
                v["kv_tokens_per_replica"] = st.kv_tokens_per_replica.into();
                v["kv_cache_bytes_per_gpu"] = st.kv_cache_bytes_per_gpu.into();
                v["kv_bytes_per_token_per_gpu"] = st.kv_bytes_per_token_per_gpu.into();
                v["iterations"] = st.iterations.into();
                v["preemptions"] = st.preemptions.into();
                v["busy_fraction"] = (st.busy_s / (res.map_or(1.0, |x| x.horizon_s) * p.n_replicas as f64)).into();
                v["mean_batch"] = (if st.busy_s > 0.0 { st.batch_area / st.busy_s } else { 0.0 }).into();
                v["max_batch_seen"] = st.max_batch_seen.into();
                v["mean_kv_occupancy"] = (if st.busy_s > 0.0 { st.kv_area / st.busy_s } else { 0.0 }).into();
                v["max_kv_occupancy"] = st.max_kv_occupancy.into();
                v["prefill_tokens"] = st.prefill_tokens.into();
                v["decode_tokens"] = st.decode_tokens.into();
            }
            v
        })
        .collect();
    serde_json::json!({
        "model": s0.model.name, "system": s0.system.name, "gpus": d.n_gpus(), "routing": d.routing.name(),
        "precision": s0.workload.precision.name(), "stack": s0.workload.stack.name(),
        "calibration": s0.profile.as_ref().map(|p| p.name.clone()),
        "arrival": match (&r.trace, &r.process) {
            (Some(_), _) => serde_json::json!({ "kind": "trace" }),
            (None, _) if r.offline.is_some() => serde_json::json!({ "kind": "offline", "requests": r.offline }),
            (None, Some(Process::Poisson { qps })) => serde_json::json!({ "kind": "poisson", "qps": qps }),
            (None, Some(Process::Gamma { qps, cv })) => serde_json::json!({ "kind": "gamma", "qps": qps, "cv": cv }),
            (None, Some(Process::Constant { qps })) => serde_json::json!({ "kind": "constant", "qps": qps }),
            (None, None) => serde_json::Value::Null,
        },
        "input_len": if r.trace.is_some() { serde_json::Value::Null } else { r.input.spec().into() },
        "output_len": if r.trace.is_some() { serde_json::Value::Null } else { r.output.spec().into() },
        "duration_s": r.duration_s, "seed": r.seed,
        "pools": pools,
    })
}

pub fn timeseries_json(res: &ServeResult) -> serde_json::Value {
    let rows = timeseries_rows(res);
    let col = |i: usize| rows.iter().map(|r| nan_null(r[i])).collect::<Vec<_>>();
    serde_json::json!({
        "bin_s": res.bin_s,
        "t_s": col(0), "arrivals": col(1), "completions": col(2), "output_tokens_per_s": col(3),
        "mean_batch": col(4), "kv_occupancy": col(5), "busy_fraction": col(6), "in_system": col(7), "queued": col(8),
    })
}

const TS_HEADER: &str = "t_s,arrivals,completions,output_tokens_per_s,mean_batch,kv_occupancy,busy_fraction,in_system,queued";

fn timeseries_rows(res: &ServeResult) -> Vec<[f64; 9]> {
    let n_rep: f64 = res.pools.iter().map(|p| p.n_replicas as f64).sum();
    res.bins
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let busy = b.busy_s.max(1e-300);
            [
                i as f64 * res.bin_s,
                b.arrivals as f64,
                b.completions as f64,
                b.output_tokens as f64 / res.bin_s,
                if b.busy_s > 0.0 { b.batch_area / busy } else { 0.0 },
                if b.busy_s > 0.0 { b.kv_area / busy } else { 0.0 },
                b.busy_s / (res.bin_s * n_rep),
                b.in_system_area / res.bin_s,
                b.queued_area / res.bin_s,
            ]
        })
        .collect()
}

pub fn timeseries_csv(res: &ServeResult) -> String {
    let mut o = String::from(TS_HEADER);
    o.push('\n');
    for r in timeseries_rows(res) {
        o.push_str(&r.iter().map(|x| format!("{x}")).collect::<Vec<_>>().join(","));
        o.push('\n');
    }
    o
}

pub fn iterations_csv(res: &ServeResult) -> String {
    let mut o = String::from("start_s,replica,n_decode,decode_kv,decode_kv_max,decode_slot_span,n_chunks,prefill_tokens,tokens,graph_rows,graph_keys,time_s\n");
    for it in &res.iterations {
        o.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{},{},{}\n",
            it.start_s,
            it.replica,
            it.n_decode,
            it.decode_kv,
            it.decode_kv_max,
            it.decode_slot_span,
            it.n_chunks,
            it.prefill_tokens,
            it.n_decode + it.prefill_tokens,
            it.graph_rows,
            it.graph_keys,
            it.time_s
        ));
    }
    o
}

pub fn requests_csv(res: &ServeResult) -> String {
    let mut o = String::from("request,arrival_s,input_len,output_len,scheduled_s,first_token_s,finish_s,ttft_s,tpot_s,e2e_s,preemptions,rejected\n");
    let f = |x: f64| if x.is_finite() { format!("{x}") } else { String::new() };
    for (i, r) in res.requests.iter().enumerate() {
        let tpot = if r.output_len > 1 { (r.finish - r.first_token) / (r.output_len - 1) as f64 } else { f64::NAN };
        o.push_str(&format!(
            "{i},{},{},{},{},{},{},{},{},{},{},{}\n",
            r.arrival,
            r.input_len,
            r.output_len,
            f(r.scheduled),
            f(r.first_token),
            f(r.finish),
            f(r.first_token - r.arrival),
            f(tpot),
            f(r.finish - r.arrival),
            r.preemptions,
            r.rejected
        ));
    }
    o
}

pub fn ms(x: f64) -> String {
    if x.is_finite() {
        format!("{:.1}", x * 1e3)
    } else {
        "-".into()
    }
}

pub fn table(r: &Resolved, res: &ServeResult, s: &Summary) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let s0 = &r.deployment.pools[0].scenario;
    let _ = writeln!(o, "{}  ({} on {} x {}, routing {})", r.name, s0.model.name, r.deployment.n_gpus(), s0.system.display_name, r.deployment.routing.name());
    for (p, st) in r.deployment.pools.iter().zip(&res.pools) {
        let _ = writeln!(
            o,
            "  {} pool: {} replicas x tp{} pp{}{}; max batch {}, token budget {}, chunked prefill {}; KV cache {:.1} GiB/GPU = {} tokens/replica ({} blocks of {})",
            p.role.name(),
            p.n_replicas,
            p.scenario.parallel.tp,
            p.scenario.parallel.pp,
            if p.attention_dp_ranks() > 1 {
                format!(
                    " x {} attention-DP ranks (experts ep{} x etp{}; limits per rank)",
                    p.attention_dp_ranks(),
                    p.scenario.parallel.ep,
                    p.scenario.parallel.etp
                )
            } else {
                String::new()
            },
            p.sched.max_batch,
            p.sched.token_budget,
            if p.sched.chunked_prefill { "on" } else { "off" },
            st.kv_cache_bytes_per_gpu / (1u64 << 30) as f64,
            st.kv_tokens_per_replica,
            st.kv_blocks_per_replica,
            p.sched.block_size
        );
    }
    let load = match (&r.trace, &r.process) {
        (Some(_), _) => "trace".to_string(),
        (None, Some(Process::Poisson { qps })) => format!("Poisson at {qps} QPS"),
        (None, Some(Process::Gamma { qps, cv })) => format!("gamma inter-arrivals at {qps} QPS, CV {cv}"),
        (None, Some(Process::Constant { qps })) => format!("constant at {qps} QPS"),
        (None, None) => match r.offline {
            Some(n) => format!("offline: {n} requests queued at t = 0"),
            None => "-".into(),
        },
    };
    if r.offline.is_some() {
        let _ = writeln!(o, "  load: {load}, input {}, output {}, seed {}", r.input.spec(), r.output.spec(), r.seed);
    } else if r.trace.is_some() {
        let _ = writeln!(o, "  load: {load}");
    } else {
        let _ = writeln!(o, "  load: {load}; {} s of arrivals, input {}, output {}, seed {}", r.duration_s, r.input.spec(), r.output.spec(), r.seed);
    }
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "  requests         {} arrived, {} completed, {} unfinished, {} refused, {} preempted",
        s.arrived, s.completed, s.unfinished, s.rejected, s.preempted_requests
    );
    let _ = writeln!(o, "  duration         {:.1} s (first send to last completion)", s.duration_s);
    let _ = writeln!(
        o,
        "  throughput       {:.2} req/s, {:.0} output tok/s, {:.0} total tok/s",
        s.request_throughput, s.output_token_throughput, s.total_token_throughput
    );
    let _ = writeln!(o, "                   {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}", "mean", "P50", "P90", "P95", "P99", "max");
    for (name, d) in [("TTFT (ms)", &s.ttft), ("TPOT (ms)", &s.tpot), ("E2E (ms)", &s.e2e), ("queueing (ms)", &s.queueing)] {
        let _ = writeln!(o, "  {:<16} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}", name, ms(d.mean), ms(d.p50), ms(d.p90), ms(d.p95), ms(d.p99), ms(d.max));
    }
    let _ = writeln!(o, "  batch            {:.1} sequences per iteration (time-weighted mean)", s.mean_batch);
    let _ = writeln!(o, "  KV cache         {:.1}% mean occupancy, {:.1}% max", s.mean_kv_occupancy * 100.0, s.max_kv_occupancy * 100.0);
    let _ = writeln!(o, "  power            {:.0} W per GPU (mean over the run, idle included)", s.avg_gpu_power_w);
    let _ = writeln!(
        o,
        "  energy           {:.3} J per output token (GPUs + hosts; x{:.2} PUE: {:.3})",
        s.j_per_output_token, res.pue, s.j_per_output_token_facility
    );
    let _ = writeln!(o, "  Little's law     {:.2} in system (mean), {:.2} waiting; {} events", s.mean_in_system, s.mean_queued, res.events);
    o
}

pub fn sweep_table(r: &Resolved, rows: &[(f64, Summary)]) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let s0 = &r.deployment.pools[0].scenario;
    let _ = writeln!(o, "{}  ({} on {} x {})", r.name, s0.model.name, r.deployment.n_gpus(), s0.system.display_name);
    let _ = writeln!(
        o,
        "{:>8}  {:>8}  {:>10}  {:>9}  {:>9}  {:>9}  {:>9}  {:>9}  {:>9}  {:>8}",
        "QPS", "req/s", "out tok/s", "TTFT P50", "TTFT P99", "TPOT P50", "TPOT P99", "E2E P50", "E2E P99", "unserved"
    );
    for (q, s) in rows {
        let _ = writeln!(
            o,
            "{:>8.2}  {:>8.2}  {:>10.0}  {:>9}  {:>9}  {:>9}  {:>9}  {:>9}  {:>9}  {:>8}",
            q,
            s.request_throughput,
            s.output_token_throughput,
            ms(s.ttft.p50),
            ms(s.ttft.p99),
            ms(s.tpot.p50),
            ms(s.tpot.p99),
            ms(s.e2e.p50),
            ms(s.e2e.p99),
            s.unfinished + s.rejected
        );
    }
    let _ = writeln!(o, "(latencies in ms)");
    o
}

pub fn chart(rows: &[(f64, Summary)], path: &Path, title: &str) -> anyhow::Result<()> {
    let size = (1200, 480);
    match path.extension().and_then(|e| e.to_str()) {
        Some("svg") => draw(SVGBackend::new(path, size).into_drawing_area(), rows, title),
        Some("png") => draw(BitMapBackend::new(path, size).into_drawing_area(), rows, title),
        _ => bail!("chart format of `{}` is not supported\nhint: use a .png or .svg file name", path.display()),
    }
}

fn draw<DB: DrawingBackend>(area: DrawingArea<DB, plotters::coord::Shift>, rows: &[(f64, Summary)], title: &str) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("{e:?}");
    area.fill(&WHITE).map_err(err)?;
    let area = area.titled(title, ("sans-serif", 20)).map_err(err)?;
    let panels = area.split_evenly((1, 2));
    let qmax = rows.iter().map(|r| r.0).fold(0.0, f64::max) * 1.05;
    type Pick = fn(&Summary) -> (f64, f64);
    let series: [(&str, Pick); 2] = [("TTFT (ms)", |s| (s.ttft.p50, s.ttft.p99)), ("TPOT (ms)", |s| (s.tpot.p50, s.tpot.p99))];
    for (panel, (name, pick)) in panels.iter().zip(series) {
        let pts: Vec<(f64, f64, f64)> =
            rows.iter().map(|(q, s)| (*q, pick(s).0 * 1e3, pick(s).1 * 1e3)).filter(|p| p.1.is_finite() && p.2.is_finite()).collect();
        // Log scale: latency spans orders of magnitude between light load and saturation.
        let ymax = pts.iter().map(|p| p.2.max(p.1)).fold(0.0, f64::max) * 1.5;
        let ymin = pts.iter().map(|p| p.1.min(p.2)).filter(|v| *v > 0.0).fold(f64::INFINITY, f64::min) / 1.5;
        let (ymin, ymax) = if ymax > 0.0 && ymin.is_finite() { (ymin, ymax) } else { (0.1, 1.0) };
        let mut c = ChartBuilder::on(panel)
            .caption(format!("{name}, log scale"), ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..qmax.max(1e-9), (ymin..ymax).log_scale())
            .map_err(err)?;
        c.configure_mesh().x_desc("offered load (requests/s)").y_desc(name).draw().map_err(err)?;
        c.draw_series(LineSeries::new(pts.iter().map(|p| (p.0, p.1)), BLUE.stroke_width(2)))
            .map_err(err)?
            .label("P50")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLUE));
        c.draw_series(pts.iter().map(|p| Circle::new((p.0, p.1), 3, BLUE.filled()))).map_err(err)?;
        c.draw_series(LineSeries::new(pts.iter().map(|p| (p.0, p.2)), RED.stroke_width(2)))
            .map_err(err)?
            .label("P99")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], RED));
        c.draw_series(pts.iter().map(|p| TriangleMarker::new((p.0, p.2), 5, RED.filled()))).map_err(err)?;
        c.configure_series_labels().position(SeriesLabelPosition::UpperLeft).background_style(WHITE.mix(0.9)).border_style(BLACK).draw().map_err(err)?;
    }
    area.present().map_err(err)?;
    Ok(())
}

/// What the SLO search (`plan --mode serve --qps Q`) was asked, for its outputs.
pub struct SloQuery<'a> {
    pub model: &'a str,
    pub system: &'a str,
    pub qps: f64,
    pub duration_s: f64,
    pub input: &'a str,
    pub output: &'a str,
    pub slo: &'a serve::plan::Slo,
    /// The targets as given, in milliseconds (printed as given).
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    /// USD per GPU-hour, for the cost column.
    pub gpu_hour_usd: Option<f64>,
}

fn slo_cost(q: &SloQuery, n_gpus: u64, s: &Summary) -> Option<f64> {
    q.gpu_hour_usd.map(|p| gpuplan_core::deploy::usd_per_million_tokens(p, n_gpus, s.output_token_throughput))
}

/// One ranked deployment of the SLO search as a JSON line.
pub fn slo_json(rank: usize, r: &serve::plan::Evaluated, q: &SloQuery) -> serde_json::Value {
    let c = &r.candidate;
    let (ok, miss, s) = match &r.outcome {
        Ok(s) => (true, None, Some(s)),
        Err((m, s)) => (false, Some(m.describe()), s.as_ref()),
    };
    let mut j = serde_json::json!({
        "schema_version": SERVE_SCHEMA_VERSION, "kind": "serve-plan", "rank": rank, "meets_slo": ok, "miss": miss,
        "gpus": c.n_gpus, "tp": c.tp, "attention_dp": c.attention_dp, "replicas": c.replicas(), "max_batch": c.max_batch, "qps": q.qps,
        "slo": { "percentile": q.slo.percentile, "ttft_s": q.slo.ttft_s, "tpot_s": q.slo.tpot_s },
    });
    if let Some(s) = s {
        j["result"] = summary_json(s, Some(q.qps));
        j["usd_per_million_output_tokens"] = slo_cost(q, c.n_gpus, s).into();
    }
    j
}

/// The SLO search's ranking as a table (`shown` of `results`).
pub fn slo_table(results: &[serve::plan::Evaluated], shown: usize, q: &SloQuery) -> String {
    use std::fmt::Write;
    let pct = q.slo.percentile as u32;
    let feasible = results.iter().filter(|r| r.outcome.is_ok()).count();
    let target = |x: Option<f64>| x.map_or("-".into(), |x| x.to_string());
    let mut t = String::new();
    let _ = writeln!(
        t,
        "serve plan: {} on {} at {} QPS (Poisson, {} s, input {}, output {}); targets P{pct} TTFT {} ms, TPOT {} ms",
        q.model,
        q.system,
        q.qps,
        q.duration_s,
        q.input,
        q.output,
        target(q.ttft_ms),
        target(q.tpot_ms)
    );
    let _ = writeln!(t, "  {} configurations simulated, {feasible} meet the targets", results.len());
    let _ = writeln!(t);
    let _ = writeln!(
        t,
        "{:>4}  {:>5}  {:<28}  {:>10}  {:>10}  {:>10}  {:>9}  verdict",
        "rank",
        "gpus",
        "config",
        format!("TTFT P{pct}"),
        format!("TPOT P{pct}"),
        "out tok/s",
        "$/1M out"
    );
    for (i, r) in results[..shown].iter().enumerate() {
        let c = &r.candidate;
        let (verdict, s) = match &r.outcome {
            Ok(s) => ("meets".to_string(), Some(s)),
            Err((m, s)) => (m.describe(), s.as_ref()),
        };
        let cost = s.and_then(|s| slo_cost(q, c.n_gpus, s)).map_or("-".into(), |c| format!("{c:.3}"));
        let _ = writeln!(
            t,
            "{:>4}  {:>5}  {:<28}  {:>10}  {:>10}  {:>10}  {:>9}  {}",
            i + 1,
            c.n_gpus,
            c.label(),
            s.map_or("-".into(), |s| ms(s.ttft.at(q.slo.percentile))),
            s.map_or("-".into(), |s| ms(s.tpot.at(q.slo.percentile))),
            s.map_or("-".into(), |s| format!("{:.0}", s.output_token_throughput)),
            cost,
            verdict
        );
    }
    let _ = writeln!(t, "(latencies in ms; cheapest = fewest GPUs, then lowest TTFT)");
    t
}

/// Predicted against measured serving metrics as JSON.
pub fn measured_json(path: &Path, rows: &[gpuplan_core::deploy::MetricRow], predicted: &Summary, measured: &Summary) -> serde_json::Value {
    serde_json::json!({
        "schema_version": SERVE_SCHEMA_VERSION,
        "kind": "serve-compare",
        "measured_file": path.display().to_string(),
        "metrics": rows.iter().map(|r| serde_json::json!({"metric": r.name, "predicted": nan_null(r.predicted), "measured": nan_null(r.measured), "error_pct": nan_null(r.error_pct())})).collect::<Vec<_>>(),
        "requests": {"predicted_completed": predicted.completed, "measured_completed": measured.completed},
    })
}

/// Predicted against measured serving metrics as a table.
pub fn measured_table(path: &Path, rows: &[gpuplan_core::deploy::MetricRow], predicted: &Summary, measured: &Summary) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ =
        writeln!(o, "predicted (gpuplan serve) against measured ({}), {} and {} requests completed", path.display(), predicted.completed, measured.completed);
    let _ = writeln!(o, "  {:<22} {:>12} {:>12} {:>9}", "metric", "predicted", "measured", "error");
    for r in rows {
        let _ = writeln!(o, "  {:<22} {:>12.4} {:>12.4} {:>+8.1}%", r.name, r.predicted, r.measured, r.error_pct());
    }
    o
}
