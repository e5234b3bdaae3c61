//! `gpuplan serve`: request-level simulation of an inference deployment under load (see
//! `serve`), as a table, versioned JSON, CSV time series, and a latency-vs-load chart.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use plotters::prelude::*;

use super::args::ScenarioArgs;
use super::Outcome;
use crate::config::serve::{read_serve, ServeWire};
use crate::serve::stats::{summarize, Dist, Summary};
use crate::serve::{self, arrivals, Arrival, Deployment, Lengths, Pool, Process, Role, Routing, RunOptions, SchedConfig, ServeResult};

/// Version of the JSON document `serve --json` prints.
pub const SERVE_SCHEMA_VERSION: u32 = 1;

#[derive(clap::Args, Debug, Clone, Default)]
pub struct ServeArgs {
    /// Serving scenario file (scenarios/serving/*.toml); flags override its values
    #[arg(long)]
    pub scenario: Option<PathBuf>,
    /// Model: a name from models/, a TOML file, or a Hugging Face config.json
    #[arg(long)]
    pub model: Option<String>,
    /// System: a name from calibration/systems/ or a file
    #[arg(long)]
    pub system: Option<String>,
    /// Total GPUs (all replicas; both pools when disaggregated)
    #[arg(long)]
    pub gpus: Option<i64>,
    /// Tensor parallelism per replica
    #[arg(long)]
    pub tp: Option<i64>,
    /// Pipeline parallelism per replica
    #[arg(long)]
    pub pp: Option<i64>,
    /// bf16, fp16, fp8, fp4
    #[arg(long)]
    pub precision: Option<String>,
    /// megatron, torch-eager, torch-compile
    #[arg(long)]
    pub stack: Option<String>,
    /// Calibration profile
    #[arg(long)]
    pub calibration: Option<String>,
    /// Requests per second offered
    #[arg(long)]
    pub qps: Option<f64>,
    /// Seconds of arrivals (the run then drains)
    #[arg(long)]
    pub duration_s: Option<f64>,
    /// Prompt lengths: N, uniform:LO:HI, lognormal:MEAN[:SIGMA]
    #[arg(long)]
    pub input_len: Option<String>,
    /// Output lengths: N, uniform:LO:HI, lognormal:MEAN[:SIGMA]
    #[arg(long)]
    pub output_len: Option<String>,
    /// poisson, gamma (bursty, with --cv), constant
    #[arg(long)]
    pub arrival: Option<String>,
    /// Coefficient of variation of gamma inter-arrival times (1 = Poisson)
    #[arg(long)]
    pub cv: Option<f64>,
    /// Seed of the request stream and of the iteration-time spread draws (default 0)
    #[arg(long)]
    pub seed: Option<u64>,
    /// Replay a CSV trace (arrival_s,input_len,output_len) instead of generating requests
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Simulate N replications (seeds SEED..SEED+N-1: new request streams, or the same trace with
    /// new iteration-time draws) and report percentiles over their requests pooled, throughputs
    /// and the other figures averaged; files (--csv, --requests-csv, --iterations-csv) are of the
    /// first (default 1; 16 is the usual for comparing latency tails with a measured run)
    #[arg(long, default_value_t = 1)]
    pub replications: u32,
    /// Most sequences per iteration per replica (vLLM max_num_seqs)
    #[arg(long)]
    pub max_batch: Option<i64>,
    /// Most tokens per iteration per replica (vLLM max_num_batched_tokens)
    #[arg(long)]
    pub token_budget: Option<i64>,
    /// Chunked prefill on (default) or off
    #[arg(long)]
    pub chunked_prefill: Option<bool>,
    /// Tokens per KV-cache block
    #[arg(long)]
    pub block_size: Option<i64>,
    /// Share of HBM the server may use (vLLM gpu_memory_utilization)
    #[arg(long)]
    pub gpu_memory_utilization: Option<f64>,
    /// The engine's host time in microseconds: per iteration and per sequence in it (serial: the
    /// GPU waits), per layer when sequences decode, per layer and prefill chunk (beside the GPU, as
    /// launches); default: the stack's (torch-eager: fitted on the reference server, others
    /// zero). `--json` shows the one used.
    #[arg(long, value_name = "ITER,SEQ,DECODE_LAYER,CHUNK_LAYER", value_delimiter = ',')]
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
    #[arg(long)]
    pub host_gpu_overlap: Option<f64>,
    /// Multiply all the engine's host time (kernel launches and host overhead) by F: how much
    /// slower this node's host runs it than the host the defaults were fitted on (1 = as fast;
    /// fit it on runs of your node: scripts/fit_serve_overhead.py --fit-split ... --scale-only)
    #[arg(long)]
    pub host_time_scale: Option<f64>,
    /// Set the host time scale from a host probe measured on this node: the median iteration of
    /// `scenarios/workloads/serve_llama.py --host-probe N` for the same model, in milliseconds
    /// (the scale at which the engine model takes that long for it)
    #[arg(long)]
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
    #[arg(long)]
    pub prefill_graph_step: Option<i64>,
    /// With --cuda-graphs and padded-matmul attention: the graphs' context padding (default 256)
    #[arg(long)]
    pub graph_context_step: Option<i64>,
    /// With --cuda-graphs: the engine's host time between graph iterations (its loop, after the
    /// tokens are out; serial with the GPU) and a graph's GPU time per layer beyond the op list's
    /// kernels, microseconds, and optionally how much less the latter is per GB of KV cache a
    /// decode graph reads per layer (default 0); default: the stack's (torch-eager: fitted on the
    /// reference server)
    #[arg(long, value_name = "ITER,LAYER[,PER_GB]", value_delimiter = ',')]
    pub graph_overhead_us: Option<Vec<f64>>,
    /// round-robin or least-loaded
    #[arg(long)]
    pub routing: Option<String>,
    /// Disaggregated: GPUs of the prefill pool (the rest of --gpus decode)
    #[arg(long)]
    pub prefill_gpus: Option<i64>,
    /// Disaggregated: TP of a prefill replica (default: --tp)
    #[arg(long)]
    pub prefill_tp: Option<i64>,
    /// Stop serving this long after the last arrival (unfinished requests are reported)
    #[arg(long)]
    pub drain_s: Option<f64>,
    /// Width of the time-series bins, seconds
    #[arg(long, default_value_t = 1.0)]
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
    #[arg(long)]
    pub max_latency_error: Option<f64>,
    /// With --measured: fail (exit 1) when output-token throughput differs by more than PCT percent
    #[arg(long)]
    pub max_throughput_error: Option<f64>,
    /// Run at each of these loads (comma-separated QPS) and print latency against load
    #[arg(long, value_delimiter = ',')]
    pub sweep_qps: Option<Vec<f64>>,
    /// Latency-vs-load chart (.svg or .png) of the sweep
    #[arg(long)]
    pub chart: Option<PathBuf>,
}

/// Everything a run needs, resolved from the file and flags.
pub struct Resolved {
    pub name: String,
    pub deployment: Deployment,
    pub process: Option<Process>,
    pub input: Lengths,
    pub output: Lengths,
    pub duration_s: f64,
    pub seed: u64,
    pub trace: Option<Vec<Arrival>>,
    pub opts: RunOptions,
}

impl Resolved {
    pub fn arrivals(&self, process: Option<&Process>) -> Vec<Arrival> {
        self.arrivals_seeded(process, self.seed)
    }

    /// The requests of a replication with another seed (a trace is the same whatever the seed).
    pub fn arrivals_seeded(&self, process: Option<&Process>, seed: u64) -> Vec<Arrival> {
        match (&self.trace, process.or(self.process.as_ref())) {
            (Some(t), _) => t.clone(),
            (None, Some(p)) => {
                let max_len = self.deployment.pools[0].scenario.model.max_seq_len.min(u32::MAX as u64) as u32;
                arrivals::generate(p, self.input, self.output, self.duration_s, seed, max_len)
            }
            (None, None) => Vec::new(),
        }
    }
}

fn pos(name: &str, v: Option<i64>) -> anyhow::Result<Option<u64>> {
    match v {
        None => Ok(None),
        Some(x) if x >= 1 => Ok(Some(x as u64)),
        Some(x) => bail!("`{name}` = {x} must be a positive integer"),
    }
}

/// Merge the file (if any) and the flags, and build the deployment.
pub fn resolve(a: &ServeArgs) -> anyhow::Result<Resolved> {
    let file = match &a.scenario {
        Some(p) => read_serve(p)?,
        None => ServeWire::default(),
    };
    let (t, sc) = (&file.traffic, &file.scheduler);
    let model = a.model.clone().or(file.model.clone());
    let system = a.system.clone().or(file.system.clone());
    let tp = pos("tp", a.tp.or(file.tp))?.unwrap_or(1);
    let pp = pos("pp", a.pp.or(file.pp))?.unwrap_or(1);
    let gpus = pos("gpus", a.gpus.or(file.gpus))?.unwrap_or(tp * pp);
    let calibration = a.calibration.clone().or(file.calibration.clone());
    let precision = a.precision.clone().or(file.precision.clone());
    let stack = a.stack.clone().or(file.stack.clone());
    let scenario_for = |tp: u64| -> anyhow::Result<crate::scenario::Scenario> {
        let sa = ScenarioArgs {
            model: model.clone(),
            system: system.clone(),
            gpus: Some((tp * pp) as i64),
            tp: Some(tp as i64),
            pp: Some(pp as i64),
            mode: Some("decode".into()),
            kv_len: Some(1),
            precision: precision.clone(),
            stack: stack.clone(),
            calibration: calibration.clone(),
            ..ScenarioArgs::default()
        };
        let mut wire = sa.to_wire();
        // Relative calibration paths in the serving file resolve against it.
        let s = crate::config::scenario::build(&std::mem::take(&mut wire), a.scenario.as_deref())?;
        Ok(s)
    };
    let int = |name: &str, flag: Option<i64>, file: Option<i64>, d: u64| -> anyhow::Result<u64> { Ok(pos(name, flag.or(file))?.unwrap_or(d)) };
    let d = SchedConfig::default();
    let x = a.decode_attention.as_deref().or(sc.decode_attention.as_deref()).unwrap_or("paged");
    let decode_attention =
        serve::DecodeAttention::parse(x).ok_or_else(|| anyhow::anyhow!("`decode_attention` = `{x}` is not known\nhint: paged, padded or padded-matmul"))?;
    let host_gpu_overlap = a.host_gpu_overlap.or(sc.host_gpu_overlap);
    if let Some(o) = host_gpu_overlap.filter(|o| !(0.0..=1.0).contains(o)) {
        bail!("`host_gpu_overlap` = {o} is not in 0..1\nhint: 1 = host launches overlap the GPU fully, 0 = not at all");
    }
    let host_time_scale = a.host_time_scale.or(sc.host_time_scale);
    if let Some(k) = host_time_scale.filter(|k| !(k.is_finite() && *k > 0.0)) {
        bail!(
            "`host_time_scale` = {k} must be positive\nhint: 1 = this host runs the engine as fast as the one its defaults were fitted on, 2 = twice as slow"
        );
    }
    let iteration_spread = match a.iteration_spread.as_deref().or(sc.iteration_spread.as_deref()).unwrap_or("on") {
        "on" => true,
        "off" => false,
        x => bail!("`iteration_spread` = `{x}` is not known\nhint: on or off"),
    };
    let context_step = pos("graph_context_step", a.graph_context_step.or(sc.graph_context_step))?;
    let prefill_step = pos("prefill_graph_step", a.prefill_graph_step.or(sc.prefill_graph_step))?;
    let cuda_graphs = cuda_graphs("cuda_graphs", a.cuda_graphs.as_deref().or(sc.cuda_graphs.as_deref()), context_step, prefill_step)?;
    let graph_us = match a.graph_overhead_us.clone().or(sc.graph_overhead_us.clone()) {
        None => None,
        Some(v) => {
            if !(v.len() == 2 || v.len() == 3) || v.iter().any(|x| !(x.is_finite() && *x >= 0.0)) {
                bail!("`graph_overhead_us` = {v:?} is not two or three non-negative numbers\nhint: microseconds of host time per graph iteration, of GPU time per layer beyond the op list, and (optional, default 0) how much less that is per GB of KV cache the decode graph reads per layer, e.g. 326,116.1,84.5");
            }
            Some([v[0], v[1], v.get(2).copied().unwrap_or(0.0)])
        }
    };
    if cuda_graphs.is_none() && (graph_us.is_some() || context_step.is_some() || prefill_step.is_some()) {
        bail!("`graph_overhead_us`, `graph_context_step` and `prefill_graph_step` describe CUDA graphs, which are off\nhint: add --cuda-graphs (serving file: cuda_graphs = \"decode\" or \"full\")");
    }
    let sched = SchedConfig {
        cuda_graphs,
        graph_us,
        iteration_spread,
        decode_attention,
        max_batch: int("max_batch", a.max_batch, sc.max_batch, d.max_batch as u64)? as u32,
        token_budget: int("token_budget", a.token_budget, sc.token_budget, d.token_budget as u64)? as u32,
        chunked_prefill: a.chunked_prefill.or(sc.chunked_prefill).unwrap_or(d.chunked_prefill),
        block_size: int("block_size", a.block_size, sc.block_size, d.block_size as u64)? as u32,
        gpu_memory_utilization: a.gpu_memory_utilization.or(sc.gpu_memory_utilization).unwrap_or(d.gpu_memory_utilization),
        host_us: match a.host_overhead_us.clone().or(sc.host_overhead_us.clone()) {
            None => None,
            Some(v) => {
                if v.len() != 4 || v.iter().any(|x| !(x.is_finite() && *x >= 0.0)) {
                    bail!("`host_overhead_us` = {v:?} is not four non-negative numbers\nhint: microseconds per iteration, per sequence, per layer with decoders, per layer and prefill chunk, e.g. 100,10,80,400");
                }
                Some([v[0], v[1], v[2], v[3]])
            }
        },
        host_gpu_overlap,
        host_time_scale,
    };
    if !(sched.gpu_memory_utilization > 0.0 && sched.gpu_memory_utilization <= 1.0) {
        bail!("`gpu_memory_utilization` = {} must be in (0, 1]", sched.gpu_memory_utilization);
    }
    let routing = match a.routing.as_deref().or(sc.routing.as_deref()).unwrap_or("least-loaded") {
        "round-robin" => Routing::RoundRobin,
        "least-loaded" => Routing::LeastLoaded,
        r => bail!("`routing` = `{r}` is not known\nhint: round-robin or least-loaded"),
    };
    let prefill_gpus = pos("prefill_gpus", a.prefill_gpus.or(file.disaggregated.as_ref().and_then(|d| d.prefill_gpus)))?;
    let mut pools = match prefill_gpus {
        None => {
            if gpus % (tp * pp) != 0 {
                bail!("`gpus` = {gpus} is not a multiple of tp*pp = {}\nhint: replicas = gpus / (tp * pp)", tp * pp);
            }
            vec![Pool { role: Role::Both, scenario: scenario_for(tp)?, n_replicas: (gpus / (tp * pp)) as u32, sched }]
        }
        Some(pg) => {
            let ptp = pos("prefill_tp", a.prefill_tp.or(file.disaggregated.as_ref().and_then(|d| d.prefill_tp)))?.unwrap_or(tp);
            if pg >= gpus {
                bail!("`prefill_gpus` = {pg} leaves no GPU of `gpus` = {gpus} to decode");
            }
            let dg = gpus - pg;
            if pg % (ptp * pp) != 0 || dg % (tp * pp) != 0 {
                bail!("prefill GPUs {pg} must be a multiple of prefill_tp*pp = {} and decode GPUs {dg} of tp*pp = {}", ptp * pp, tp * pp);
            }
            vec![
                Pool { role: Role::Prefill, scenario: scenario_for(ptp)?, n_replicas: (pg / (ptp * pp)) as u32, sched },
                Pool { role: Role::Decode, scenario: scenario_for(tp)?, n_replicas: (dg / (tp * pp)) as u32, sched },
            ]
        }
    };
    if let Some(ms) = a.host_probe_ms.or(sc.host_probe_ms) {
        if host_time_scale.is_some() {
            bail!("give `host_time_scale` or `host_probe_ms`, not both\nhint: the probe sets the scale");
        }
        if !(ms.is_finite() && ms > 0.0) {
            bail!("`host_probe_ms` = {ms} must be positive");
        }
        for p in pools.iter_mut() {
            p.sched.host_time_scale = Some(serve::host_time_scale_for_probe(p, ms * 1e-3)?);
        }
    }
    let deployment = Deployment { pools, routing };

    let trace_path = a.trace.clone().or_else(|| {
        t.trace.as_ref().map(|p| match a.scenario.as_deref().and_then(Path::parent) {
            Some(dir) if !Path::new(p).is_absolute() && !Path::new(p).exists() => dir.join(p),
            _ => PathBuf::from(p),
        })
    });
    let trace = match &trace_path {
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| format!("cannot read trace `{}`", p.display()))?;
            Some(arrivals::read_trace(&text).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?)
        }
        None => None,
    };
    let qps = a.qps.or(t.qps);
    let process = match qps {
        None if trace.is_some() || a.sweep_qps.is_some() => None,
        None => bail!("give `--qps Q` (requests per second), `--trace FILE` or `--sweep-qps Q1,Q2,..`"),
        Some(q) if !(q > 0.0 && q.is_finite()) => bail!("`qps` = {q} must be positive"),
        Some(q) => Some(q),
    };
    let arrival = a.arrival.clone().or(t.arrival.clone()).unwrap_or_else(|| "poisson".into());
    let cv = a.cv.or(t.cv);
    let make = |q: f64| -> anyhow::Result<Process> {
        Ok(match arrival.as_str() {
            "poisson" => Process::Poisson { qps: q },
            "constant" => Process::Constant { qps: q },
            "gamma" => {
                let cv = cv.context("`arrival` = `gamma` needs `--cv` (coefficient of variation of the gaps; 1 = Poisson)")?;
                if !(cv > 0.0 && cv.is_finite()) {
                    bail!("`cv` = {cv} must be positive");
                }
                Process::Gamma { qps: q, cv }
            }
            o => bail!("`arrival` = `{o}` is not known\nhint: poisson, gamma or constant"),
        })
    };
    let process = match process {
        Some(q) => Some(make(q)?),
        None => a.sweep_qps.as_ref().and_then(|v| v.first()).map(|q| make(*q)).transpose()?,
    };
    let lengths = |name: &str, flag: &Option<String>, file: &Option<String>| -> anyhow::Result<Lengths> {
        match flag.as_ref().or(file.as_ref()) {
            Some(s) => Lengths::parse(s).map_err(|e| anyhow::anyhow!("`{name}`: {e}")),
            None if trace.is_some() => Ok(Lengths::Fixed(1)),
            None => bail!("give `--{}` (N, uniform:LO:HI or lognormal:MEAN[:SIGMA])", name.replace('_', "-")),
        }
    };
    let input = lengths("input_len", &a.input_len, &t.input_len)?;
    let output = lengths("output_len", &a.output_len, &t.output_len)?;
    let duration_s = a.duration_s.or(t.duration_s).unwrap_or(60.0);
    if !(duration_s > 0.0 && duration_s.is_finite()) {
        bail!("`duration_s` = {duration_s} must be positive");
    }
    let drain_s = a.drain_s.unwrap_or(f64::INFINITY);
    let seed = a.seed.or(t.seed).unwrap_or(0);
    if drain_s.is_nan() || drain_s < 0.0 {
        bail!("`--drain-s` = {drain_s} must be non-negative");
    }
    let name = file.name.clone().unwrap_or_else(|| {
        let p = &deployment.pools[0].scenario;
        format!("{}-{}-{}gpu", p.model.name, p.system.name, gpus)
    });
    Ok(Resolved {
        name,
        deployment,
        process,
        input,
        output,
        duration_s,
        seed,
        trace,
        opts: RunOptions { bin_s: a.bin_s, drain_s, record_iterations: a.iterations_csv.is_some(), seed },
    })
}

/// `gpuplan check` on a serving scenario: resolve it and simulate 5 s of its load.
pub fn check_file(path: &Path) -> anyhow::Result<()> {
    let a = ServeArgs { scenario: Some(path.to_path_buf()), duration_s: Some(5.0), bin_s: 1.0, ..ServeArgs::default() };
    let r = resolve(&a)?;
    serve::simulate(&r.deployment, &r.arrivals(None), &r.opts).with_context(|| format!("{}: deployment cannot run", path.display()))?;
    Ok(())
}

pub fn run(a: ServeArgs) -> anyhow::Result<Outcome> {
    let r = resolve(&a)?;
    if let Some(qs) = &a.sweep_qps {
        if r.trace.is_some() {
            bail!("`--sweep-qps` generates requests; it cannot replay a trace");
        }
        if a.replications > 1 {
            bail!("`--replications` applies to one load, not to `--sweep-qps`\nhint: lengthen `--duration-s` to steady the sweep's tails");
        }
        let base = r.process.clone().context("`--sweep-qps` needs at least one load")?;
        let mut rows = Vec::new();
        for &q in qs {
            if !(q > 0.0 && q.is_finite()) {
                bail!("`--sweep-qps` value {q} must be positive");
            }
            let p = base.with_qps(q);
            let res = serve::simulate(&r.deployment, &r.arrivals(Some(&p)), &r.opts)?;
            rows.push((q, summarize(&res)));
        }
        if let Some(path) = &a.chart {
            chart(&rows, path, &r.name)?;
        }
        if a.json {
            let v: Vec<serde_json::Value> = rows.iter().map(|(q, s)| summary_json(s, Some(*q))).collect();
            println!(
                "{}",
                serde_json::to_string_pretty(
                    &serde_json::json!({ "schema_version": SERVE_SCHEMA_VERSION, "kind": "serve-sweep", "name": r.name, "deployment": deployment_json(&r, None), "sweep": v })
                )?
            );
        } else {
            print!("{}", sweep_table(&r, &rows));
        }
        return Ok(Outcome::Ok);
    }
    let arr = r.arrivals(None);
    let res = serve::simulate(&r.deployment, &arr, &r.opts)?;
    let s = if a.replications <= 1 {
        summarize(&res)
    } else {
        let mut more = Vec::new();
        for i in 1..a.replications as u64 {
            let seed = r.seed.wrapping_add(i);
            let opts = RunOptions { seed, record_iterations: false, ..r.opts };
            more.push(serve::simulate(&r.deployment, &r.arrivals_seeded(None, seed), &opts)?);
        }
        serve::stats::summarize_pooled(&std::iter::once(&res).chain(&more).collect::<Vec<_>>())
    };
    if let Some(p) = &a.csv {
        super::write_atomic(p, timeseries_csv(&res).as_bytes())?;
    }
    if let Some(p) = &a.requests_csv {
        super::write_atomic(p, requests_csv(&res).as_bytes())?;
    }
    if let Some(p) = &a.iterations_csv {
        super::write_atomic(p, iterations_csv(&res).as_bytes())?;
    }
    if let Some(path) = &a.measured {
        return compare_measured(&a, path, &s);
    }
    if a.json {
        let mut v =
            serde_json::json!({ "schema_version": SERVE_SCHEMA_VERSION, "kind": "serve", "name": r.name, "deployment": deployment_json(&r, Some(&res)) });
        if let (Some(o), serde_json::Value::Object(m)) = (v.as_object_mut(), summary_json(&s, r.process.as_ref().map(|p| p.qps()))) {
            o.extend(m);
        }
        v["events"] = res.events.into();
        v["timeseries"] = timeseries_json(&res);
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", table(&r, &res, &s));
    }
    Ok(if s.unfinished > 0 || s.rejected > 0 { Outcome::Infeasible } else { Outcome::Ok })
}

fn dist_json(d: &Dist) -> serde_json::Value {
    serde_json::json!({ "n": d.n, "mean": nan_null(d.mean), "p50": nan_null(d.p50), "p90": nan_null(d.p90), "p95": nan_null(d.p95), "p99": nan_null(d.p99), "max": nan_null(d.max) })
}

fn nan_null(x: f64) -> serde_json::Value {
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

fn deployment_json(r: &Resolved, res: Option<&ServeResult>) -> serde_json::Value {
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
            let (h, source) = crate::serve::cost::HostOverhead::resolve(&p.sched, p.scenario.workload.stack);
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

fn timeseries_json(res: &ServeResult) -> serde_json::Value {
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

fn timeseries_csv(res: &ServeResult) -> String {
    let mut o = String::from(TS_HEADER);
    o.push('\n');
    for r in timeseries_rows(res) {
        o.push_str(&r.iter().map(|x| format!("{x}")).collect::<Vec<_>>().join(","));
        o.push('\n');
    }
    o
}

fn iterations_csv(res: &ServeResult) -> String {
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

fn requests_csv(res: &ServeResult) -> String {
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

fn ms(x: f64) -> String {
    if x.is_finite() {
        format!("{:.1}", x * 1e3)
    } else {
        "-".into()
    }
}

fn table(r: &Resolved, res: &ServeResult, s: &Summary) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let s0 = &r.deployment.pools[0].scenario;
    let _ = writeln!(o, "{}  ({} on {} x {}, routing {})", r.name, s0.model.name, r.deployment.n_gpus(), s0.system.display_name, r.deployment.routing.name());
    for (p, st) in r.deployment.pools.iter().zip(&res.pools) {
        let _ = writeln!(
            o,
            "  {} pool: {} replicas x tp{} pp{}; max batch {}, token budget {}, chunked prefill {}; KV cache {:.1} GiB/GPU = {} tokens/replica ({} blocks of {})",
            p.role.name(),
            p.n_replicas,
            p.scenario.parallel.tp,
            p.scenario.parallel.pp,
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
        (None, None) => "-".into(),
    };
    if r.trace.is_some() {
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

fn sweep_table(r: &Resolved, rows: &[(f64, Summary)]) -> String {
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

fn chart(rows: &[(f64, Summary)], path: &Path, title: &str) -> anyhow::Result<()> {
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

/// `plan --mode serve --qps Q`: flags of the load the SLO search simulates.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct PlanServeArgs {
    /// Serving: requests per second the deployment must sustain (turns on the request-level search)
    #[arg(long)]
    pub qps: Option<f64>,
    /// Serving: seconds of Poisson arrivals per simulated configuration
    #[arg(long, default_value_t = 120.0)]
    pub duration_s: f64,
    /// Serving: prompt lengths (N, uniform:LO:HI, lognormal:MEAN[:SIGMA]; default: --seq)
    #[arg(long)]
    pub input_len: Option<String>,
    /// Serving: output lengths (N, uniform:LO:HI, lognormal:MEAN[:SIGMA])
    #[arg(long)]
    pub output_len: Option<String>,
    /// Serving: seed of the request stream
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Serving: percentile the TTFT and TPOT targets apply to (50, 90, 95, 99)
    #[arg(long, default_value_t = 99.0)]
    pub slo_percentile: f64,
    /// Serving: most tokens per iteration per replica
    #[arg(long, default_value_t = 8192)]
    pub token_budget: u32,
    /// Serving: the engine replays CUDA graphs (as `serve --cuda-graphs`: decode, the default
    /// value, for decode-only iterations; full, prefill graphs too), with the stack's graph terms
    #[arg(long, value_name = "decode|full", num_args = 0..=1, default_missing_value = "decode")]
    pub cuda_graphs: Option<String>,
}

/// The CUDA graphs of a `--cuda-graphs` value (`name`: the key or flag it came from, for errors)
/// with the given paddings or the defaults.
fn cuda_graphs(name: &str, mode: Option<&str>, context_step: Option<u64>, prefill_step: Option<u64>) -> anyhow::Result<Option<serve::CudaGraphs>> {
    let full = match mode {
        None | Some("off") => return Ok(None),
        Some("decode") => false,
        Some("full") => true,
        Some(x) => bail!("`{name}` = `{x}` is not known\nhint: off, decode (decode-only iterations replay graphs) or full (prefill graphs too)"),
    };
    if !full && prefill_step.is_some() {
        bail!("`prefill_graph_step` describes prefill graphs, which `{name}` = \"decode\" does not capture\nhint: --cuda-graphs full");
    }
    Ok(Some(serve::CudaGraphs {
        context_step: context_step.unwrap_or(serve::DEFAULT_GRAPH_CONTEXT_STEP as u64) as u32,
        prefill_step: full.then(|| prefill_step.unwrap_or(serve::DEFAULT_PREFILL_GRAPH_STEP as u64) as u32),
    }))
}

/// The cheapest deployment (GPUs, TP, max batch) meeting `--ttft-ms` / `--tpot-ms` at `--qps`,
/// each configuration checked by `serve::simulate` on the same request stream.
pub fn plan_slo(args: &super::plan::PlanArgs) -> anyhow::Result<Outcome> {
    use crate::serve::plan::{search, ServeSpace, Slo};
    let (a, o, v) = (&args.scenario, &args.options, &args.serve);
    let qps = v.qps.context("`--qps` is required")?;
    if !(qps > 0.0 && qps.is_finite()) {
        bail!("`--qps` = {qps} must be positive");
    }
    if ![50.0, 90.0, 95.0, 99.0].contains(&v.slo_percentile) {
        bail!("`--slo-percentile` = {} is not one of 50, 90, 95, 99", v.slo_percentile);
    }
    if o.ttft_ms.is_none() && o.tpot_ms.is_none() {
        bail!("give `--ttft-ms` and/or `--tpot-ms` (the latency targets)");
    }
    let first = match (a.gpus.filter(|_| o.min_gpus.is_none()), o.min_gpus) {
        (Some(g), _) if g >= 1 => g as u64,
        (_, Some(g)) if g >= 1 => g,
        _ => bail!("give `--gpus N`, or both `--min-gpus` and `--max-gpus`"),
    };
    // The base scenario carries model, system, precision and stack; the layout is searched.
    let mut sa = a.clone();
    sa.kv_len = sa.kv_len.or(Some(1));
    sa.gpus = Some(first as i64);
    sa.tp = None;
    let mut base = super::plan::base_scenario(&sa, crate::plan::PlanMode::Serve, first, None)?;
    if let Some(p) = &a.precision {
        base.workload.precision = crate::hardware::Dtype::parse(p).with_context(|| format!("`--precision` = `{p}` is not known"))?;
    }
    let gpus = super::plan::gpu_counts(a, o, base.system.gpus_per_node as u64)?;
    let domain = base.system.nvlink_domain_size as u64;
    let tp: Vec<u32> = match a.tp {
        Some(t) if t >= 1 => vec![t as u32],
        Some(t) => bail!("`--tp` = {t} must be a positive integer"),
        None => (0..8).map(|i| 1u32 << i).filter(|t| (*t as u64) <= domain).collect(),
    };
    let max_batch: Vec<u32> = match a.batch {
        Some(b) if b >= 1 => vec![b as u32],
        Some(b) => bail!("`--batch` = {b} must be a positive integer"),
        None => (0..20).map(|i| 1u32 << i).filter(|b| *b as u64 <= o.max_batch.max(1)).collect(),
    };
    let input = match (&v.input_len, a.seq) {
        (Some(s), _) => Lengths::parse(s).map_err(|e| anyhow::anyhow!("`--input-len`: {e}"))?,
        (None, Some(s)) if s >= 1 => Lengths::Fixed(s as u32),
        _ => bail!("give `--input-len` (or `--seq`) for the prompts"),
    };
    let output =
        Lengths::parse(v.output_len.as_deref().context("give `--output-len` for the generated tokens")?).map_err(|e| anyhow::anyhow!("`--output-len`: {e}"))?;
    let max_len = base.model.max_seq_len.min(u32::MAX as u64) as u32;
    let arrivals = arrivals::generate(&Process::Poisson { qps }, input, output, v.duration_s, v.seed, max_len);
    let space = ServeSpace {
        n_gpus: gpus,
        tp,
        max_batch,
        sched: SchedConfig {
            token_budget: v.token_budget,
            cuda_graphs: cuda_graphs("--cuda-graphs", v.cuda_graphs.as_deref(), None, None)?,
            ..SchedConfig::default()
        },
        routing: Routing::LeastLoaded,
    };
    let slo = Slo { ttft_s: o.ttft_ms.map(|m| m / 1e3), tpot_s: o.tpot_ms.map(|m| m / 1e3), percentile: v.slo_percentile };
    // Overloaded configurations would queue without end: stop them a duration after the last arrival.
    let opts = RunOptions { bin_s: v.duration_s.max(1.0), drain_s: v.duration_s, record_iterations: false, seed: 0 };
    let results = search(&base, &space, &arrivals, &slo, &opts);
    let feasible = results.iter().filter(|r| r.outcome.is_ok()).count();
    let price = super::plan::gpu_hour_price(o, &base.system.name)?;
    let pct = v.slo_percentile as u32;
    let shown = if args.top == 0 { results.len() } else { args.top.min(results.len()) };
    if args.json {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        for (i, r) in results[..shown].iter().enumerate() {
            let c = &r.candidate;
            let (ok, miss, s) = match &r.outcome {
                Ok(s) => (true, None, Some(s)),
                Err((m, s)) => (false, Some(m.describe()), s.as_ref()),
            };
            let mut j = serde_json::json!({
                "schema_version": SERVE_SCHEMA_VERSION, "kind": "serve-plan", "rank": i + 1, "meets_slo": ok, "miss": miss,
                "gpus": c.n_gpus, "tp": c.tp, "replicas": c.replicas(), "max_batch": c.max_batch, "qps": qps,
                "slo": { "percentile": v.slo_percentile, "ttft_s": slo.ttft_s, "tpot_s": slo.tpot_s },
            });
            if let Some(s) = s {
                j["result"] = summary_json(s, Some(qps));
                j["usd_per_million_output_tokens"] = price.map(|p| p * c.n_gpus as f64 / 3600.0 / s.output_token_throughput * 1e6).into();
            }
            if writeln!(out, "{}", serde_json::to_string(&j)?).is_err() {
                break;
            }
        }
    } else {
        use std::fmt::Write;
        let mut t = String::new();
        let _ = writeln!(
            t,
            "serve plan: {} on {} at {qps} QPS (Poisson, {} s, input {}, output {}); targets P{pct} TTFT {} ms, TPOT {} ms",
            base.model.name,
            base.system.display_name,
            v.duration_s,
            input.spec(),
            output.spec(),
            o.ttft_ms.map_or("-".into(), |x| x.to_string()),
            o.tpot_ms.map_or("-".into(), |x| x.to_string())
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
            let cost = match (price, s) {
                (Some(p), Some(s)) => format!("{:.3}", p * c.n_gpus as f64 / 3600.0 / s.output_token_throughput * 1e6),
                _ => "-".into(),
            };
            let _ = writeln!(
                t,
                "{:>4}  {:>5}  {:<28}  {:>10}  {:>10}  {:>10}  {:>9}  {}",
                i + 1,
                c.n_gpus,
                c.label(),
                s.map_or("-".into(), |s| ms(s.ttft.at(v.slo_percentile))),
                s.map_or("-".into(), |s| ms(s.tpot.at(v.slo_percentile))),
                s.map_or("-".into(), |s| format!("{:.0}", s.output_token_throughput)),
                cost,
                verdict
            );
        }
        let _ = writeln!(t, "(latencies in ms; cheapest = fewest GPUs, then lowest TTFT)");
        print!("{t}");
    }
    Ok(if feasible == 0 { Outcome::Infeasible } else { Outcome::Ok })
}

/// Read a measured per-request CSV into request records (missing times mean not finished).
pub fn read_measured(path: &std::path::Path) -> anyhow::Result<ServeResult> {
    let mut rd = csv::Reader::from_path(path).with_context(|| format!("cannot read `{}`", path.display()))?;
    let headers = rd.headers()?.clone();
    let col = |name: &str| {
        headers.iter().position(|h| h == name).with_context(|| {
            format!("`{}`: no `{name}` column\nhint: columns arrival_s, input_len, output_len, scheduled_s, first_token_s, finish_s", path.display())
        })
    };
    let (ia, ii, io, is, ift, ifi) = (col("arrival_s")?, col("input_len")?, col("output_len")?, col("scheduled_s")?, col("first_token_s")?, col("finish_s")?);
    let mut requests = Vec::new();
    for (n, rec) in rd.records().enumerate() {
        let rec = rec.with_context(|| format!("`{}`: row {}", path.display(), n + 2))?;
        let num = |i: usize| -> anyhow::Result<f64> {
            let v = rec.get(i).unwrap_or("").trim();
            if v.is_empty() {
                return Ok(f64::INFINITY);
            }
            v.parse::<f64>().with_context(|| format!("`{}`: row {}, `{}` = `{v}` is not a number", path.display(), n + 2, &headers[i]))
        };
        requests.push(serve::RequestRecord {
            arrival: num(ia)?,
            input_len: num(ii)? as u32,
            output_len: num(io)? as u32,
            scheduled: num(is)?,
            first_token: num(ift)?,
            finish: num(ifi)?,
            preemptions: 0,
            rejected: false,
        });
    }
    anyhow::ensure!(!requests.is_empty(), "`{}` has no requests", path.display());
    let n = requests.len() as u64;
    let unfinished = requests.iter().filter(|r| !r.finished()).count() as u64;
    Ok(ServeResult {
        requests,
        iterations: Vec::new(),
        pools: Vec::new(),
        bins: Vec::new(),
        bin_s: 1.0,
        horizon_s: 0.0,
        in_system_area: 0.0,
        queued_area: 0.0,
        arrived: n,
        in_flight_at_end: unfinished,
        events: 0,
        host_energy_j: 0.0,
        n_gpus: 1,
        pue: 1.0,
    })
}

/// Predicted against measured serving metrics: P50/P99 TTFT and TPOT and output-token throughput.
fn compare_measured(a: &ServeArgs, path: &std::path::Path, predicted: &Summary) -> anyhow::Result<Outcome> {
    let measured = summarize(&read_measured(path)?);
    let rows: Vec<(&str, f64, f64, bool)> = vec![
        ("ttft_p50_s", predicted.ttft.p50, measured.ttft.p50, true),
        ("ttft_p99_s", predicted.ttft.p99, measured.ttft.p99, true),
        ("tpot_p50_s", predicted.tpot.p50, measured.tpot.p50, true),
        ("tpot_p99_s", predicted.tpot.p99, measured.tpot.p99, true),
        ("output_tokens_per_s", predicted.output_token_throughput, measured.output_token_throughput, false),
    ];
    let err = |p: f64, m: f64| (p - m) / m * 100.0;
    let mut failed = Vec::new();
    for (name, p, m, latency) in &rows {
        let bound = if *latency { a.max_latency_error } else { a.max_throughput_error };
        if let Some(b) = bound {
            let e = err(*p, *m);
            if !e.is_finite() || e.abs() > b {
                failed.push(format!("{name} {e:+.1}% (bound {b}%)"));
            }
        }
    }
    if a.json {
        let v = serde_json::json!({
            "schema_version": SERVE_SCHEMA_VERSION,
            "kind": "serve-compare",
            "measured_file": path.display().to_string(),
            "metrics": rows.iter().map(|(n, p, m, _)| serde_json::json!({"metric": n, "predicted": nan_null(*p), "measured": nan_null(*m), "error_pct": nan_null(err(*p, *m))})).collect::<Vec<_>>(),
            "requests": {"predicted_completed": predicted.completed, "measured_completed": measured.completed},
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("predicted (gpuplan serve) against measured ({}), {} and {} requests completed", path.display(), predicted.completed, measured.completed);
        println!("  {:<22} {:>12} {:>12} {:>9}", "metric", "predicted", "measured", "error");
        for (n, p, m, _) in &rows {
            println!("  {:<22} {:>12.4} {:>12.4} {:>+8.1}%", n, p, m, err(*p, *m));
        }
    }
    if failed.is_empty() {
        Ok(Outcome::Ok)
    } else {
        eprintln!("serving error bounds exceeded: {}", failed.join("; "));
        Ok(Outcome::Infeasible)
    }
}
