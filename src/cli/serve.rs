//! `gpuplan serve`: request-level simulation of an inference deployment under load (see
//! `serve`), as a table, versioned JSON, CSV time series, and a latency-vs-load chart. The
//! deployment is built by `config::deploy`, the outputs rendered by `report::views::serve`.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use super::args::{count, fraction, hide_unless, non_negative, non_negative_or_inf, positive, share, ScenarioArgs};
use super::Outcome;
use crate::config::deploy::{self, Resolved, RunFlags};
use crate::config::serve::{read_serve, DisaggWire, SchedulerWire, ServeWire, TrafficWire};
use crate::report::views::serve as view;
use crate::serve::stats::{summarize, Summary};
use crate::serve::{self, RunOptions};

pub use crate::report::views::serve::SERVE_SCHEMA_VERSION;

/// The scenario flags `serve` reads (the rest describe training or one batch).
const SCENARIO_FLAGS: &[&str] = &["scenario", "model", "system", "gpus", "tp", "pp", "dp", "ep", "attention-dp", "precision", "stack", "calibration"];

#[derive(clap::Args, Debug, Clone, Default)]
#[command(mut_args(hide_unless(SCENARIO_FLAGS)))]
pub struct ServeArgs {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// Requests per second offered
    #[arg(long, value_parser = positive, allow_negative_numbers = true)]
    pub qps: Option<f64>,
    /// Seconds of arrivals (the run then drains)
    #[arg(long, value_parser = positive, allow_negative_numbers = true)]
    pub duration_s: Option<f64>,
    /// Prompt lengths: N, uniform:LO:HI, lognormal:MEAN or lognormal:MEAN:SIGMA
    #[arg(long)]
    pub input_len: Option<String>,
    /// Output lengths: N, uniform:LO:HI, lognormal:MEAN or lognormal:MEAN:SIGMA
    #[arg(long)]
    pub output_len: Option<String>,
    /// poisson, gamma (bursty, with --cv), constant
    #[arg(long)]
    pub arrival: Option<String>,
    /// Coefficient of variation of gamma inter-arrival times (1 = Poisson)
    #[arg(long, value_parser = positive, allow_negative_numbers = true)]
    pub cv: Option<f64>,
    /// Seed of the request stream and of the iteration-time spread draws (default 0)
    #[arg(long, allow_negative_numbers = true)]
    pub seed: Option<u64>,
    /// Replay a CSV trace (arrival_s,input_len,output_len) instead of generating requests
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Simulate N replications (seeds SEED..SEED+N-1: new request streams, or the same trace with
    /// new iteration-time draws) and report percentiles over their requests pooled, throughputs
    /// and the other figures averaged; files (--csv, --requests-csv, --iterations-csv) are of the
    /// first (default 1; 16 is the usual for comparing latency tails with a measured run)
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    pub replications: u32,
    /// Most sequences per iteration per replica (vLLM max_num_seqs)
    #[arg(long, value_parser = count(), allow_negative_numbers = true)]
    pub max_batch: Option<i64>,
    /// Most tokens per iteration per replica (vLLM max_num_batched_tokens)
    #[arg(long, value_parser = count(), allow_negative_numbers = true)]
    pub token_budget: Option<i64>,
    /// Chunked prefill on (default) or off
    #[arg(long)]
    pub chunked_prefill: Option<bool>,
    /// Tokens per KV-cache block
    #[arg(long, value_parser = count(), allow_negative_numbers = true)]
    pub block_size: Option<i64>,
    /// Share of HBM the server may use (vLLM gpu_memory_utilization; the training stacks too)
    #[arg(long, value_parser = share, allow_negative_numbers = true)]
    pub gpu_memory_utilization: Option<f64>,
    /// --stack trtllm: share of the memory left free once the engine is loaded that the KV cache
    /// takes (TensorRT-LLM kv_cache_free_gpu_mem_fraction; default 0.9)
    #[arg(long, value_parser = share, allow_negative_numbers = true)]
    pub kv_cache_free_gpu_mem_fraction: Option<f64>,
    /// --stack sglang: share of HBM for the weights and the KV pool (SGLang mem_fraction_static;
    /// default 0.88)
    #[arg(long, value_parser = share, allow_negative_numbers = true)]
    pub mem_fraction_static: Option<f64>,
    /// With CUDA graphs: decode batches up to N replay one (the engine's largest capture size;
    /// default: the engine's, at most --max-batch); larger ones run eagerly
    #[arg(long, value_parser = count(), allow_negative_numbers = true)]
    pub cuda_graph_max_batch: Option<i64>,
    /// Offline mode (trtllm-bench's): N requests all queued at t = 0, served at the engine's
    /// limits; throughput is output tokens over the whole run. Takes no --qps or --trace
    #[arg(long, value_name = "N", value_parser = count(), allow_negative_numbers = true)]
    pub offline: Option<i64>,
    /// The serving front end's time per request, ms: a request reaches the engine this long after
    /// it is sent (Triton's ensemble: tokenizing, queueing, detokenizing and streaming); TTFT
    /// includes it (default 0: the engine called directly)
    #[arg(long, value_parser = non_negative, allow_negative_numbers = true)]
    pub frontend_ms: Option<f64>,
    /// The client's concurrency limit (Triton's online benchmarks): at most N requests in flight;
    /// arrivals beyond it wait at the client and are sent as requests finish (their TTFT counts
    /// from the send)
    #[arg(long, value_name = "N", value_parser = count(), allow_negative_numbers = true)]
    pub max_concurrency: Option<i64>,
    /// The engine's host time in microseconds: per iteration and per sequence in it (serial: the
    /// GPU waits), per layer when sequences decode, per layer and prefill chunk (beside the GPU, as
    /// launches); default: the stack's (torch-eager: fitted on the reference server, others
    /// zero). `--json` shows the one used.
    #[arg(long, value_name = "ITER,SEQ,DECODE_LAYER,CHUNK_LAYER", value_delimiter = ',', allow_negative_numbers = true)]
    pub host_overhead_us: Option<Vec<f64>>,
    /// paged (default: each decoder's attention reads its own context, as vLLM's paged attention),
    /// padded (reads up to the batch's longest context, as a contiguous per-sequence cache does),
    /// or padded-matmul (padded, as unfused batched matmuls priced from the calibration profile's
    /// decode-regime attention rows, the host waiting for them)
    #[arg(long)]
    pub decode_attention: Option<String>,
    /// Share of the shorter of host and GPU time hidden under the longer, 0..1: 1 = the host
    /// launches ahead of the GPU and an iteration takes the longer; 0 = the host waits for the GPU
    /// (their sum); default: the stack's (with the host overhead)
    #[arg(long, value_parser = fraction, allow_negative_numbers = true)]
    pub host_gpu_overlap: Option<f64>,
    /// Multiply all the engine's host time (kernel launches and host overhead) by F: how much
    /// slower this node's host runs it than the host the defaults were fitted on (1 = as fast;
    /// fit it on runs of your node: scripts/fit_serve_overhead.py --fit-split ... --scale-only)
    #[arg(long, value_parser = positive, allow_negative_numbers = true)]
    pub host_time_scale: Option<f64>,
    /// Set the host time scale from a host probe measured on this node: the median iteration of
    /// `scenarios/workloads/serve_llama.py --host-probe N` for the same model, in milliseconds
    /// (the scale at which the engine model takes that long for it)
    #[arg(long, value_parser = positive, allow_negative_numbers = true)]
    pub host_probe_ms: Option<f64>,
    /// on (default) or off: vary each iteration's time by a seeded draw from the stack's measured
    /// iteration-time spread (torch-eager: from the reference server's runs; others have none)
    #[arg(long)]
    pub iteration_spread: Option<String>,
    /// CUDA graphs captured for padded shapes (the reference server's --cuda-graphs): decode
    /// (the default value; vLLM's FULL_DECODE_ONLY): decode-only iterations replay one, the batch
    /// padded to 1, 2, 4 or a multiple of 8, no kernel launches from the host; iterations with
    /// prefill chunks stay eager. full: the decoders always replay theirs and each whole prompt a
    /// prefill graph (padded to --prefill-graph-step), later chunks of split prompts eager
    #[arg(long, value_name = "decode|full", num_args = 0..=1, default_missing_value = "decode")]
    pub cuda_graphs: Option<String>,
    /// With --cuda-graphs full: the prefill graphs' token padding (default 128)
    #[arg(long, value_parser = count(), allow_negative_numbers = true)]
    pub prefill_graph_step: Option<i64>,
    /// With --cuda-graphs and padded-matmul attention: the graphs' context padding (default 256)
    #[arg(long, value_parser = count(), allow_negative_numbers = true)]
    pub graph_context_step: Option<i64>,
    /// With --cuda-graphs: the engine's host time between graph iterations (its loop, after the
    /// tokens are out; serial with the GPU) and a graph's GPU time per layer beyond the op list's
    /// kernels, microseconds, and optionally how much less the latter is per GB of KV cache a
    /// decode graph reads per layer (default 0); default: the stack's (torch-eager: fitted on the
    /// reference server)
    #[arg(long, value_name = "ITER,LAYER[,PER_GB]", value_delimiter = ',', allow_negative_numbers = true)]
    pub graph_overhead_us: Option<Vec<f64>>,
    /// round-robin or least-loaded
    #[arg(long)]
    pub routing: Option<String>,
    /// Disaggregated: GPUs of the prefill pool (the rest of --gpus decode)
    #[arg(long, value_parser = count(), allow_negative_numbers = true)]
    pub prefill_gpus: Option<i64>,
    /// Disaggregated: TP of a prefill replica (default: --tp)
    #[arg(long, value_parser = count(), allow_negative_numbers = true)]
    pub prefill_tp: Option<i64>,
    /// Stop serving this long after the last arrival (unfinished requests are reported)
    #[arg(long, value_parser = non_negative_or_inf, allow_negative_numbers = true)]
    pub drain_s: Option<f64>,
    /// Width of the time-series bins, seconds
    #[arg(long, default_value_t = 1.0, value_parser = positive, allow_negative_numbers = true)]
    pub bin_s: f64,
    /// Print one JSON object instead of the table
    #[arg(long)]
    pub json: bool,
    /// Write the time series (per bin) as CSV to this file
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// Write one CSV row per request to this file
    #[arg(long)]
    pub requests_csv: Option<PathBuf>,
    /// Write one CSV row per iteration to this file (start, replica, decoders and their cached
    /// tokens, prefill chunks and their tokens, time)
    #[arg(long)]
    pub iterations_csv: Option<PathBuf>,
    /// Compare with a measured run: its per-request CSV (arrival_s, input_len, output_len,
    /// scheduled_s, first_token_s, finish_s; what scenarios/workloads/serve_llama.py writes and
    /// `--requests-csv` writes). Replay it with `--trace` on the same file.
    #[arg(long)]
    pub measured: Option<PathBuf>,
    /// With --measured: fail (exit 1) when P50/P99 TTFT or TPOT differ by more than PCT percent
    #[arg(long, value_parser = non_negative, allow_negative_numbers = true)]
    pub max_latency_error: Option<f64>,
    /// With --measured: fail (exit 1) when output-token throughput differs by more than PCT percent
    #[arg(long, value_parser = non_negative, allow_negative_numbers = true)]
    pub max_throughput_error: Option<f64>,
    /// Run at each of these loads (comma-separated QPS) and print latency against load
    #[arg(long, value_delimiter = ',', value_parser = positive, allow_negative_numbers = true)]
    pub sweep_qps: Option<Vec<f64>>,
    /// Latency-vs-load chart (.svg or .png) of the sweep
    #[arg(long)]
    pub chart: Option<PathBuf>,
    /// Replace existing --csv / --requests-csv / --iterations-csv / --chart / --launch-dir files
    #[arg(long)]
    pub force: bool,
    /// The deployment as TensorRT-LLM / vLLM / SGLang launch configuration
    #[command(flatten)]
    pub launch: super::launch::LaunchArgs,
}
impl ServeArgs {
    /// The flags as a serving-file overlay (`--trace` stays a path as given: see `RunFlags`).
    pub fn to_wire(&self) -> ServeWire {
        let s = &self.scenario;
        ServeWire {
            model: s.model.clone(),
            system: s.system.clone(),
            gpus: s.gpus,
            tp: s.tp,
            pp: s.pp,
            ep: s.ep,
            dp: s.dp,
            attention_dp: s.attention_dp.then_some(true),
            precision: s.precision.clone(),
            stack: s.stack.clone(),
            calibration: s.calibration.clone(),
            traffic: TrafficWire {
                qps: self.qps,
                duration_s: self.duration_s,
                arrival: self.arrival.clone(),
                cv: self.cv,
                input_len: self.input_len.clone(),
                output_len: self.output_len.clone(),
                seed: self.seed,
                trace: None,
            },
            scheduler: SchedulerWire {
                max_batch: self.max_batch,
                token_budget: self.token_budget,
                chunked_prefill: self.chunked_prefill,
                block_size: self.block_size,
                gpu_memory_utilization: self.gpu_memory_utilization,
                host_overhead_us: self.host_overhead_us.clone(),
                decode_attention: self.decode_attention.clone(),
                host_gpu_overlap: self.host_gpu_overlap,
                host_time_scale: self.host_time_scale,
                host_probe_ms: self.host_probe_ms,
                iteration_spread: self.iteration_spread.clone(),
                cuda_graphs: self.cuda_graphs.clone(),
                graph_context_step: self.graph_context_step,
                prefill_graph_step: self.prefill_graph_step,
                graph_overhead_us: self.graph_overhead_us.clone(),
                routing: self.routing.clone(),
                kv_cache_free_gpu_mem_fraction: self.kv_cache_free_gpu_mem_fraction,
                mem_fraction_static: self.mem_fraction_static,
                cuda_graph_max_batch: self.cuda_graph_max_batch,
            },
            disaggregated: (self.prefill_gpus.is_some() || self.prefill_tp.is_some())
                .then_some(DisaggWire { prefill_gpus: self.prefill_gpus, prefill_tp: self.prefill_tp }),
            ..ServeWire::default()
        }
    }
}

/// Merge the file (if any) and the flags, and build the deployment.
pub fn resolve(a: &ServeArgs) -> anyhow::Result<Resolved> {
    a.scenario.only("serve", SCENARIO_FLAGS)?;
    let file = match &a.scenario.scenario {
        Some(p) => read_serve(p)?,
        None => ServeWire::default(),
    };
    let run = RunFlags {
        trace: a.trace.clone(),
        sweep_first_qps: a.sweep_qps.as_ref().and_then(|v| v.first().copied()),
        sweeping: a.sweep_qps.is_some(),
        drain_s: a.drain_s,
        bin_s: a.bin_s,
        record_iterations: a.iterations_csv.is_some(),
        replications: a.replications as u64,
        sweep_max_qps: a.sweep_qps.as_ref().and_then(|v| v.iter().copied().reduce(f64::max)),
        offline: a.offline.map(|n| n as u64),
        frontend_ms: a.frontend_ms,
        max_concurrency: a.max_concurrency.map(|n| n.min(u32::MAX as i64) as u32),
    };
    let flags = a.to_wire();
    let by_flags = flags != ServeWire::default();
    deploy::resolve(&deploy::overlay(file, flags), a.scenario.scenario.as_deref(), &run).map_err(|e| match (e, &a.scenario.scenario) {
        // A value the serving file gives (or a flag over it): the message names the file too.
        (deploy::DeployError::Invalid(m), Some(f)) if by_flags => anyhow::anyhow!("{} (with the command line's flags over it): {m}", f.display()),
        (deploy::DeployError::Invalid(m), Some(f)) => anyhow::anyhow!("{}: {m}", f.display()),
        (e, _) => e.into(),
    })
}

/// `gpuplan check` on a serving scenario: resolve it and simulate 5 s of its load.
pub fn check_file(path: &Path) -> anyhow::Result<()> {
    let a = ServeArgs {
        scenario: ScenarioArgs { scenario: Some(path.to_path_buf()), ..ScenarioArgs::default() },
        duration_s: Some(5.0),
        bin_s: 1.0,
        ..ServeArgs::default()
    };
    let r = resolve(&a)?;
    serve::simulate(&r.deployment, &arrivals(&r, None, r.seed)?, &r.opts).with_context(|| format!("{}: deployment cannot run", path.display()))?;
    Ok(())
}

/// The requests of a run (`process`: a sweep's load; `seed`: a replication's), refused when the
/// stream was cut at the limit on requests (a bursty one can draw far more than qps x duration).
fn arrivals(r: &Resolved, process: Option<&serve::Process>, seed: u64) -> anyhow::Result<Vec<serve::Arrival>> {
    let arr = r.arrivals_seeded(process, seed);
    if serve::arrivals::exceeds_limit(&arr) {
        bail!(
            "the request stream (seed {seed}) drew more than the limit of {} requests in `duration_s` = {} s\nhint: lower `--qps`, `--duration-s` or `--cv` (serving file: traffic.qps, traffic.duration_s, traffic.cv); see README.md \"Limits\"",
            crate::limits::serve::MAX_REQUESTS,
            r.duration_s
        );
    }
    Ok(arr)
}

/// A progress bar on stderr over `len` requests, drawn only when stderr is a terminal.
fn progress_bar(len: u64) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} serving [{bar:40}] {pos}/{len} requests ({per_sec}, eta {eta})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar
}

/// Simulate `arr`, ticking `bar` once per request.
fn simulate_ticking(r: &Resolved, arr: &[serve::Arrival], opts: &RunOptions, bar: &indicatif::ProgressBar) -> anyhow::Result<serve::ServeResult> {
    let res = serve::simulate_with_progress(&r.deployment, arr, opts, &mut |n| bar.inc(n))?;
    bar.inc(arr.len() as u64 % serve::PROGRESS_STEP as u64);
    Ok(res)
}

pub fn run(a: ServeArgs) -> anyhow::Result<Outcome> {
    let r = resolve(&a)?;
    super::check_chart_path("--chart", a.chart.as_deref())?;
    super::check_outputs(
        a.force,
        &[
            ("--csv", a.csv.as_deref()),
            ("--requests-csv", a.requests_csv.as_deref()),
            ("--iterations-csv", a.iterations_csv.as_deref()),
            ("--chart", a.chart.as_deref()),
        ],
        &[("--scenario", a.scenario.scenario.as_deref()), ("--trace", r.trace_path.as_deref()), ("--measured", a.measured.as_deref())],
    )?;
    let launch = a.launch.asked()?;
    if let Some(l) = &launch {
        if a.sweep_qps.is_some() || a.measured.is_some() {
            bail!("`--launch` and `--launch-dir` describe one deployment's servers\nhint: leave out `--sweep-qps` and `--measured`");
        }
        let roles: Vec<serve::Role> = r.deployment.pools.iter().map(|p| p.role).collect();
        l.check_outputs(&roles, a.force, &[("--scenario", a.scenario.scenario.as_deref()), ("--trace", r.trace_path.as_deref())])?;
    }
    if let Some(qs) = &a.sweep_qps {
        if r.trace.is_some() {
            bail!("`--sweep-qps` generates requests; it cannot replay a trace");
        }
        if a.replications > 1 {
            bail!("`--replications` applies to one load, not to `--sweep-qps`\nhint: lengthen `--duration-s` to steady the sweep's tails");
        }
        let base = r.process.clone().context("`--sweep-qps` needs at least one load")?;
        let mut rows = Vec::new();
        let bar = progress_bar(0);
        for &q in qs {
            if !(q > 0.0 && q.is_finite()) {
                bail!("`--sweep-qps` value {q} must be positive");
            }
            let p = base.with_qps(q);
            let arr = arrivals(&r, Some(&p), r.seed)?;
            bar.inc_length(arr.len() as u64);
            let res = simulate_ticking(&r, &arr, &r.opts, &bar)?;
            rows.push((q, summarize(&res)));
        }
        bar.finish_and_clear();
        if let Some(path) = &a.chart {
            super::write_atomic_with(path, |tmp| view::chart(&rows, tmp, &r.name))?;
        }
        if a.json {
            let v: Vec<serde_json::Value> = rows.iter().map(|(q, s)| view::summary_json(s, Some(*q))).collect();
            println!(
                "{}",
                serde_json::to_string_pretty(
                    &serde_json::json!({ "schema_version": SERVE_SCHEMA_VERSION, "kind": "serve-sweep", "name": r.name, "deployment": view::deployment_json(&r, None), "sweep": v })
                )?
            );
        } else {
            print!("{}", view::sweep_table(&r, &rows));
        }
        return Ok(Outcome::Ok);
    }
    let arr = arrivals(&r, None, r.seed)?;
    let bar = progress_bar(arr.len() as u64 * a.replications.max(1) as u64);
    let res = simulate_ticking(&r, &arr, &r.opts, &bar)?;
    let s = if a.replications <= 1 {
        summarize(&res)
    } else {
        let mut more = Vec::new();
        for i in 1..a.replications as u64 {
            let seed = r.seed.wrapping_add(i);
            let opts = RunOptions { seed, record_iterations: false, ..r.opts };
            let arr = arrivals(&r, None, seed)?;
            more.push(simulate_ticking(&r, &arr, &opts, &bar)?);
        }
        serve::stats::summarize_pooled(&std::iter::once(&res).chain(&more).collect::<Vec<_>>())
    };
    bar.finish_and_clear();
    if let Some(p) = &a.csv {
        super::write_atomic(p, view::timeseries_csv(&res).as_bytes())?;
    }
    if let Some(p) = &a.requests_csv {
        super::write_atomic(p, view::requests_csv(&res).as_bytes())?;
    }
    if let Some(p) = &a.iterations_csv {
        super::write_atomic(p, view::iterations_csv(&res).as_bytes())?;
    }
    if let Some(path) = &a.measured {
        return compare_measured(&a, path, &s);
    }
    let launched = match &launch {
        Some(l) => Some(l.emit(&r.deployment, &r.deployment.pools[0].scenario.model.name)?),
        None => None,
    };
    if a.json {
        let mut v =
            serde_json::json!({ "schema_version": SERVE_SCHEMA_VERSION, "kind": "serve", "name": r.name, "deployment": view::deployment_json(&r, Some(&res)) });
        if let (Some(o), serde_json::Value::Object(m)) = (v.as_object_mut(), view::summary_json(&s, r.process.as_ref().map(|p| p.qps()))) {
            o.extend(m);
        }
        v["events"] = res.events.into();
        v["timeseries"] = view::timeseries_json(&res);
        if let Some((_, launch)) = launched {
            v["launch"] = launch;
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", view::table(&r, &res, &s));
        if let Some((text, _)) = launched.filter(|(t, _)| !t.is_empty()) {
            print!("\nlaunch configuration:\n{text}");
        }
    }
    Ok(if s.unfinished > 0 || s.rejected > 0 { Outcome::Infeasible } else { Outcome::Ok })
}

/// Predicted against measured serving metrics: P50/P99 TTFT and TPOT and output-token throughput.
fn compare_measured(a: &ServeArgs, path: &Path, predicted: &Summary) -> anyhow::Result<Outcome> {
    let measured = summarize(&deploy::read_measured(path)?);
    let rows = crate::deploy::measured_rows(predicted, &measured);
    let failed = crate::deploy::exceeded(&rows, a.max_latency_error, a.max_throughput_error);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&view::measured_json(path, &rows, predicted, &measured))?);
    } else {
        print!("{}", view::measured_table(path, &rows, predicted, &measured));
    }
    if failed.is_empty() {
        Ok(Outcome::Ok)
    } else {
        eprintln!("serving error bounds exceeded: {}", failed.join("; "));
        Ok(Outcome::Infeasible)
    }
}
