//! A serving deployment from a serving scenario file with the command line's values laid over it
//! (`overlay`, then `resolve`), and a measured serving run's per-request CSV (`read_measured`).
//! `gpuplan serve`, `gpuplan check` and `gpuplan plan --mode serve` read deployments through here.

use std::path::{Path, PathBuf};

use gpuplan_core::limits::serve::{self as limits, Exceeded, Work};
use gpuplan_core::scenario::Scenario;
use gpuplan_core::serve::{self, arrivals, Arrival, Deployment, Lengths, Pool, Process, Role, Routing, RunOptions, SchedConfig, ServeError, ServeResult};

use super::scenario::{build, ParallelWire, ScenarioWire, WorkloadWire};
use super::serve::{DisaggWire, ServeWire};
use super::ConfigError;

/// A deployment that cannot be built: the message names the key (or flag) and value.
#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Serve(#[from] ServeError),
}

macro_rules! bail {
    ($($t:tt)*) => { return Err(DeployError::Invalid(format!($($t)*))) };
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
    /// The trace file read, if any (a command's outputs must not be it).
    pub trace_path: Option<PathBuf>,
    pub opts: RunOptions,
    /// Offline mode: this many requests all queued at t = 0 (trtllm-bench's), instead of a
    /// process or a trace.
    pub offline: Option<u64>,
}

impl Resolved {
    pub fn arrivals(&self, process: Option<&Process>) -> Vec<Arrival> {
        self.arrivals_seeded(process, self.seed)
    }

    /// The requests of a replication with another seed (a trace is the same whatever the seed).
    pub fn arrivals_seeded(&self, process: Option<&Process>, seed: u64) -> Vec<Arrival> {
        let max_len = self.deployment.pools[0].scenario.model.max_seq_len.min(u32::MAX as u64) as u32;
        if let (Some(n), None) = (self.offline, process) {
            return arrivals::offline(n, self.input, self.output, seed, max_len);
        }
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

/// What a run takes beyond the serving file's keys (command-line only).
#[derive(Debug, Clone, Default)]
pub struct RunFlags {
    /// A trace file given on the command line (used as given; the file's `traffic.trace` resolves
    /// against the file's folder).
    pub trace: Option<PathBuf>,
    /// The first load of a sweep: the arrival process when no `qps` is given.
    pub sweep_first_qps: Option<f64>,
    pub sweeping: bool,
    pub drain_s: Option<f64>,
    pub bin_s: f64,
    pub record_iterations: bool,
    /// Replications of the run (0 or 1: one), for the work estimate.
    pub replications: u64,
    /// The highest load of a sweep, for the work estimate.
    pub sweep_max_qps: Option<f64>,
    /// `--offline N`: N requests queued at t = 0 (trtllm-bench's offline mode).
    pub offline: Option<u64>,
    /// `--frontend-ms`: the serving front end's time per request (`RunOptions::frontend_s`).
    pub frontend_ms: Option<f64>,
    /// `--max-concurrency`: the client's limit on requests in flight (`RunOptions::max_concurrency`).
    pub max_concurrency: Option<u32>,
}

/// Overlay `over` on `base`: every value `over` sets wins.
pub fn overlay(base: ServeWire, over: ServeWire) -> ServeWire {
    macro_rules! pick {
        ($b:expr, $o:expr, [$($f:ident),*]) => { $( if $o.$f.is_some() { $b.$f = $o.$f; } )* };
    }
    let mut b = base;
    pick!(b, over, [name, description, source, model, system, gpus, tp, pp, ep, dp, attention_dp, precision, stack, calibration]);
    pick!(b.traffic, over.traffic, [qps, duration_s, arrival, cv, input_len, output_len, seed, trace]);
    pick!(
        b.scheduler,
        over.scheduler,
        [
            max_batch,
            token_budget,
            chunked_prefill,
            block_size,
            gpu_memory_utilization,
            host_overhead_us,
            decode_attention,
            host_gpu_overlap,
            host_time_scale,
            host_probe_ms,
            iteration_spread,
            cuda_graphs,
            graph_context_step,
            prefill_graph_step,
            graph_overhead_us,
            routing,
            kv_cache_free_gpu_mem_fraction,
            mem_fraction_static,
            cuda_graph_max_batch
        ]
    );
    if let Some(o) = over.disaggregated {
        let d = b.disaggregated.get_or_insert_with(DisaggWire::default);
        pick!(d, o, [prefill_gpus, prefill_tp]);
    }
    b
}

fn pos(name: &str, v: Option<i64>) -> Result<Option<u64>, DeployError> {
    match v {
        None => Ok(None),
        Some(x) if x >= 1 && x <= u32::MAX as i64 => Ok(Some(x as u64)),
        Some(x) if x >= 1 => bail!("`{name}` = {x} is too large\nhint: at most {}", u32::MAX),
        Some(x) => bail!("`{name}` = {x} must be a positive integer"),
    }
}

/// The CUDA graphs of a `--cuda-graphs` value (`name`: the key or flag it came from, for errors)
/// with the given paddings or the defaults.
pub fn cuda_graphs(name: &str, mode: Option<&str>, context_step: Option<u64>, prefill_step: Option<u64>) -> Result<Option<serve::CudaGraphs>, DeployError> {
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
        max_batch: u32::MAX,
        context_step: context_step.unwrap_or(serve::DEFAULT_GRAPH_CONTEXT_STEP as u64) as u32,
        prefill_step: full.then(|| prefill_step.unwrap_or(serve::DEFAULT_PREFILL_GRAPH_STEP as u64) as u32),
    }))
}

/// The KV sizing fraction the file or flags give, in the knob of the stack's engine: TensorRT-LLM's
/// `kv_cache_free_gpu_mem_fraction`, SGLang's `mem_fraction_static`, vLLM's (and the training
/// stacks') `gpu_memory_utilization`. Another engine's knob is refused with the right one named.
fn engine_kv_fraction(engine: Option<serve::engines::EngineDefaults>, sc: &super::serve::SchedulerWire) -> Result<Option<f64>, DeployError> {
    use gpuplan_core::workload::Stack;
    let given = [
        ("gpu_memory_utilization", "--gpu-memory-utilization", sc.gpu_memory_utilization, "vllm (and the training stacks)"),
        ("kv_cache_free_gpu_mem_fraction", "--kv-cache-free-gpu-mem-fraction", sc.kv_cache_free_gpu_mem_fraction, "trtllm"),
        ("mem_fraction_static", "--mem-fraction-static", sc.mem_fraction_static, "sglang"),
    ];
    let own = match engine.map(|e| e.stack) {
        Some(Stack::Trtllm) => "kv_cache_free_gpu_mem_fraction",
        Some(Stack::Sglang) => "mem_fraction_static",
        _ => "gpu_memory_utilization",
    };
    let stack = engine.map_or("a training stack", |e| e.stack.name());
    let mut out = None;
    for (key, flag, v, of) in given {
        let Some(v) = v else { continue };
        if key != own {
            let own_flag = given.iter().find(|g| g.0 == own).map_or(own, |g| g.1);
            bail!("`{flag}` = {v} is a knob of {of}, which {stack} does not have\nhint: {stack} sizes its KV cache with {own_flag}");
        }
        out = Some(v);
    }
    Ok(out)
}

/// Build the deployment, its load and run options from a merged serving file (`file`: where it
/// came from; relative paths in it resolve against it).
pub fn resolve(w: &ServeWire, file: Option<&Path>, run: &RunFlags) -> Result<Resolved, DeployError> {
    let (t, sc) = (&w.traffic, &w.scheduler);
    let tp = pos("tp", w.tp)?.unwrap_or(1);
    let pp = pos("pp", w.pp)?.unwrap_or(1);
    let ep = pos("ep", w.ep)?;
    let attention_dp = w.attention_dp == Some(true);
    // Attention DP: a replica is one instance of `dp` ranks (its scenario's `dp`); otherwise
    // replicas are the data-parallel dimension.
    let dp = match (pos("dp", w.dp)?, attention_dp) {
        (Some(d), true) => d,
        (None, true) => bail!(
            "`attention_dp` needs `dp`, the instance's attention-DP ranks
hint: e.g. --attention-dp --tp 1 --dp 8 --ep 8 (8 GPUs per instance)"
        ),
        (Some(d), false) if d > 1 => {
            bail!(
                "`dp` = {d} applies to attention DP; serving replicas are the data-parallel dimension
hint: leave out --dp (replicas = gpus / (tp * pp)), or add --attention-dp for an MoE model"
            )
        }
        _ => 1,
    };
    if attention_dp && w.disaggregated.as_ref().is_some_and(|d| d.prefill_gpus.is_some()) {
        bail!(
            "`attention_dp` with disaggregated prefill is not modelled
hint: serve colocated (leave out --prefill-gpus), or leave out --attention-dp"
        );
    }
    let gpus = pos("gpus", w.gpus)?.unwrap_or(tp * pp * dp);
    let engine_stack = w.stack.as_deref().and_then(gpuplan_core::workload::Stack::parse).is_some_and(|s| s.is_engine());
    let scenario_for = |tp: u64| -> Result<Scenario, ConfigError> {
        let wire = ScenarioWire {
            model: w.model.clone(),
            system: w.system.clone(),
            gpus: Some((tp * pp * dp) as i64),
            calibration: w.calibration.clone(),
            parallelism: ParallelWire {
                tp: Some(tp as i64),
                pp: Some(pp as i64),
                dp: attention_dp.then_some(dp as i64),
                ep: ep.map(|e| e as i64),
                // Under attention DP the experts span the instance's tp x dp GPUs: an `ep` below
                // that splits each expert over the rest, as TensorRT-LLM's `Mapping` does
                // (moe_tp_size = tp_size / moe_ep_size when only the EP size is given, from
                // memory of tensorrt_llm/mapping.py).
                etp: ep.filter(|&e| attention_dp && e < tp * dp && (tp * dp).is_multiple_of(e)).map(|e| ((tp * dp) / e) as i64),
                // The serving engines reduce a tensor-parallel layer's partial sums with one
                // all-reduce after the attention output and one after the MLP (TensorRT-LLM's
                // `AllReduce` plugin / op, vLLM's and SGLang's `tensor_model_parallel_all_reduce`),
                // with no sequence parallelism at inference; the training default (SP with TP)
                // would price a reduce-scatter and an all-gather instead.
                sp: engine_stack.then_some(false),
                ..ParallelWire::default()
            },
            workload: WorkloadWire {
                mode: Some("decode".into()),
                kv_len: Some(1),
                // The instance's sequences of the scenario probe: one per rank (the iteration
                // pricer sets each iteration's own).
                batch: attention_dp.then_some(dp as i64),
                precision: w.precision.clone(),
                stack: w.stack.clone(),
                attention_dp: attention_dp.then_some(true),
                ..WorkloadWire::default()
            },
            ..ScenarioWire::default()
        };
        // Relative calibration paths in the serving file resolve against it.
        build(&wire, file)
    };
    let int = |name: &str, v: Option<i64>, d: u64| -> Result<u64, DeployError> { Ok(pos(name, v)?.unwrap_or(d)) };
    let stack = w.stack.as_deref().and_then(gpuplan_core::workload::Stack::parse);
    let engine = stack.and_then(serve::engines::defaults);
    let d = stack.map_or_else(SchedConfig::default, SchedConfig::for_stack);
    let kv_fraction = engine_kv_fraction(engine, sc)?;
    let x = sc.decode_attention.as_deref().unwrap_or("paged");
    let Some(decode_attention) = serve::DecodeAttention::parse(x) else {
        bail!("`decode_attention` = `{x}` is not known\nhint: paged, padded or padded-matmul")
    };
    let host_gpu_overlap = sc.host_gpu_overlap;
    if let Some(o) = host_gpu_overlap.filter(|o| !(0.0..=1.0).contains(o)) {
        bail!("`host_gpu_overlap` = {o} is not in 0..1\nhint: 1 = host launches overlap the GPU fully, 0 = not at all");
    }
    let host_time_scale = sc.host_time_scale;
    if let Some(k) = host_time_scale.filter(|k| !(k.is_finite() && *k > 0.0)) {
        bail!(
            "`host_time_scale` = {k} must be positive\nhint: 1 = this host runs the engine as fast as the one its defaults were fitted on, 2 = twice as slow"
        );
    }
    let iteration_spread = match sc.iteration_spread.as_deref().unwrap_or(if engine.is_some() { "off" } else { "on" }) {
        "on" => true,
        "off" => false,
        x => bail!("`iteration_spread` = `{x}` is not known\nhint: on or off"),
    };
    let context_step = pos("graph_context_step", sc.graph_context_step)?;
    let prefill_step = pos("prefill_graph_step", sc.prefill_graph_step)?;
    // The engines replay decode graphs unless told otherwise (`cuda_graphs = "off"`).
    let graph_mode = sc.cuda_graphs.as_deref().or(engine.map(|_| "decode"));
    let mut cuda_graphs = cuda_graphs("cuda_graphs", graph_mode, context_step, prefill_step)?;
    let max_batch = int("max_batch", sc.max_batch, d.max_batch as u64)?;
    let graph_max = pos("cuda_graph_max_batch", sc.cuda_graph_max_batch)?;
    if let Some(g) = graph_max {
        if g > max_batch {
            let knob = engine.map_or("max_batch", |e| e.knob_max_batch);
            bail!(
                "`cuda_graph_max_batch` = {g} is above the batch limit `max_batch` = {max_batch} (the engine's `{knob}`): no batch that large can run, so no graph of it is captured\nhint: give --cuda-graph-max-batch at most {max_batch}, or raise --max-batch"
            );
        }
        if cuda_graphs.is_none() {
            bail!("`cuda_graph_max_batch` = {g} describes CUDA graphs, which are off\nhint: add --cuda-graphs (serving file: cuda_graphs = \"decode\")");
        }
    }
    if let Some(g) = cuda_graphs.as_mut() {
        g.max_batch = graph_max.map(|x| x as u32).or(engine.map(|e| e.cuda_graph_max_batch.min(max_batch as u32))).unwrap_or(u32::MAX);
    }
    let graph_us = match sc.graph_overhead_us.clone() {
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
        max_batch: max_batch as u32,
        kv_sizing: d.kv_sizing,
        policy: d.policy,
        token_budget: int("token_budget", sc.token_budget, d.token_budget as u64)? as u32,
        chunked_prefill: sc.chunked_prefill.unwrap_or(d.chunked_prefill),
        block_size: int("block_size", sc.block_size, d.block_size as u64)? as u32,
        gpu_memory_utilization: kv_fraction.unwrap_or(d.gpu_memory_utilization),
        host_us: match sc.host_overhead_us.clone() {
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
        let knob = engine.map_or("gpu_memory_utilization", |e| e.knob_kv_fraction);
        bail!("`{knob}` = {} must be in (0, 1]", sched.gpu_memory_utilization);
    }
    let routing = match sc.routing.as_deref().unwrap_or("least-loaded") {
        "round-robin" => Routing::RoundRobin,
        "least-loaded" => Routing::LeastLoaded,
        r => bail!("`routing` = `{r}` is not known\nhint: round-robin or least-loaded"),
    };
    let prefill_gpus = pos("prefill_gpus", w.disaggregated.as_ref().and_then(|d| d.prefill_gpus))?;
    let mut pools = match prefill_gpus {
        None if attention_dp => {
            let per = tp * pp * dp;
            if gpus % per != 0 {
                bail!("`gpus` = {gpus} is not a multiple of tp*dp = {per}, one attention-DP instance\nhint: replicas = gpus / (tp * dp)");
            }
            replicas_within_limit("gpus", gpus / per, per)?;
            vec![Pool { role: Role::Both, scenario: scenario_for(tp)?, n_replicas: (gpus / per) as u32, sched }]
        }
        None => {
            if gpus % (tp * pp) != 0 {
                bail!("`gpus` = {gpus} is not a multiple of tp*pp = {}\nhint: replicas = gpus / (tp * pp)", tp * pp);
            }
            replicas_within_limit("gpus", gpus / (tp * pp), tp * pp)?;
            vec![Pool { role: Role::Both, scenario: scenario_for(tp)?, n_replicas: (gpus / (tp * pp)) as u32, sched }]
        }
        Some(pg) => {
            let ptp = pos("prefill_tp", w.disaggregated.as_ref().and_then(|d| d.prefill_tp))?.unwrap_or(tp);
            if pg >= gpus {
                bail!("`prefill_gpus` = {pg} leaves no GPU of `gpus` = {gpus} to decode");
            }
            let dg = gpus - pg;
            let decode = scenario_for(tp)?;
            if decode.system.nic_bandwidth.is_none() || decode.system.gpu.efficiency.network_busbw.is_none() {
                bail!(
                    "`prefill_gpus`: disaggregated serving moves each prompt's KV cache to the decode pool over the scale-out network, and `{}` gives none with a source\nhint: serve colocated (leave out `prefill_gpus`), or use a system file with `nic_bandwidth_gbit_per_s` and `[fabric]`",
                    decode.system.name
                );
            }
            if pg % (ptp * pp) != 0 || dg % (tp * pp) != 0 {
                bail!("prefill GPUs {pg} must be a multiple of prefill_tp*pp = {} and decode GPUs {dg} of tp*pp = {}", ptp * pp, tp * pp);
            }
            replicas_within_limit("prefill_gpus", pg / (ptp * pp), ptp * pp)?;
            replicas_within_limit("gpus", dg / (tp * pp), tp * pp)?;
            vec![
                Pool { role: Role::Prefill, scenario: scenario_for(ptp)?, n_replicas: (pg / (ptp * pp)) as u32, sched },
                Pool { role: Role::Decode, scenario: decode, n_replicas: (dg / (tp * pp)) as u32, sched },
            ]
        }
    };
    if let Some(ms) = sc.host_probe_ms {
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

    let trace_path = run.trace.clone().or_else(|| {
        t.trace.as_ref().map(|p| match file.and_then(Path::parent) {
            Some(dir) if !Path::new(p).is_absolute() && !Path::new(p).exists() => dir.join(p),
            _ => PathBuf::from(p),
        })
    });
    let trace = match &trace_path {
        Some(p) => {
            let text = match std::fs::read_to_string(p) {
                Ok(t) => t,
                Err(e) => bail!("cannot read trace `{}`: {e}", p.display()),
            };
            Some(arrivals::read_trace(&text).map_err(|e| DeployError::Invalid(format!("{}: {e}", p.display())))?)
        }
        None => None,
    };
    if let Some(n) = run.offline {
        if trace.is_some() || run.sweeping || t.qps.is_some() {
            bail!("`--offline` = {n} queues every request at t = 0: it takes no `--qps`, `--trace` or `--sweep-qps`\nhint: give the lengths with --input-len / --output-len");
        }
        if n == 0 || n > limits::MAX_REQUESTS {
            bail!("`--offline` = {n} requests is not in 1..={}\nhint: trtllm-bench's offline datasets hold 1,000-30,000 requests", limits::MAX_REQUESTS);
        }
    }
    let process = match t.qps {
        None if trace.is_some() || run.sweeping || run.offline.is_some() => None,
        None => bail!("give `--qps Q` (requests per second), `--trace FILE` or `--sweep-qps Q1,Q2,..`"),
        Some(q) if !(q > 0.0 && q.is_finite()) => bail!("`qps` = {q} must be positive"),
        Some(q) => Some(q),
    };
    let arrival = t.arrival.clone().unwrap_or_else(|| "poisson".into());
    let make = |q: f64| -> Result<Process, DeployError> {
        Ok(match arrival.as_str() {
            "poisson" => Process::Poisson { qps: q },
            "constant" => Process::Constant { qps: q },
            "gamma" => {
                let Some(cv) = t.cv else { bail!("`arrival` = `gamma` needs `--cv` (coefficient of variation of the gaps; 1 = Poisson)") };
                if !(cv > 0.0 && cv.is_finite()) {
                    bail!("`cv` = {cv} must be positive");
                }
                if cv > limits::MAX_CV {
                    bail!(
                        "`cv` = {cv} is above the limit of {}: nearly every gap would be zero, the whole load arriving in a few instants\nhint: lower `--cv` (serving file: traffic.cv); measured traffic is bursty at cv 1-10",
                        limits::MAX_CV
                    );
                }
                Process::Gamma { qps: q, cv }
            }
            o => bail!("`arrival` = `{o}` is not known\nhint: poisson, gamma or constant"),
        })
    };
    let process = match process {
        Some(q) => Some(make(q)?),
        None => run.sweep_first_qps.map(make).transpose()?,
    };
    let lengths = |name: &str, v: &Option<String>| -> Result<Lengths, DeployError> {
        match v {
            Some(s) => Lengths::parse(s).map_err(|e| DeployError::Invalid(format!("`{name}`: {e}"))),
            None if trace.is_some() => Ok(Lengths::Fixed(1)),
            None => bail!("give `--{}` (N, uniform:LO:HI or lognormal:MEAN[:SIGMA])", name.replace('_', "-")),
        }
    };
    let input = lengths("input_len", &t.input_len)?;
    let output = lengths("output_len", &t.output_len)?;
    let duration_s = t.duration_s.unwrap_or(60.0);
    if !(duration_s > 0.0 && duration_s.is_finite()) {
        bail!("`duration_s` = {duration_s} must be positive");
    }
    let drain_s = run.drain_s.unwrap_or(f64::INFINITY);
    let seed = t.seed.unwrap_or(0);
    if drain_s.is_nan() || drain_s < 0.0 {
        bail!("`--drain-s` = {drain_s} must be non-negative");
    }
    let replications = run.replications.max(1);
    if replications > limits::MAX_REPLICATIONS {
        bail!(
            "`--replications` = {replications} is above the limit of {}\nhint: 16 steady latency tails; lengthen `--duration-s` for more",
            limits::MAX_REPLICATIONS
        );
    }
    let max_len = deployment.pools[0].scenario.model.max_seq_len as f64;
    let replicas: u64 = deployment.pools.iter().map(|p| p.n_replicas as u64).sum();
    let routed = |requests: f64| -> Result<(), DeployError> {
        if requests * replicas as f64 > limits::MAX_REQUEST_REPLICAS {
            bail!(
                "{:.3e} requests routed over {replicas} replicas (`gpus` = {gpus}) is more than the limit of {:.0e} requests x replicas per run\nhint: lower `--gpus` (or raise `--tp` for fewer replicas), or `--qps` / `--duration-s`; see README.md \"Limits\"",
                requests,
                limits::MAX_REQUEST_REPLICAS
            );
        }
        Ok(())
    };
    if let Some(n) = run.offline {
        let reps = replications as f64;
        let work = Work { requests: n as f64 * reps, output_tokens: n as f64 * output.mean().min(max_len) * reps };
        work_within_limits(&work, || format!("`--offline` = {n} requests"), "lower `--offline`", replications, run.record_iterations)?;
        routed(work.requests)?;
    }
    match &trace {
        Some(rows) => {
            let what = || format!("the trace `{}`", trace_path.as_deref().unwrap_or(Path::new("?")).display());
            let reps = replications as f64;
            let work = Work { requests: rows.len() as f64 * reps, output_tokens: rows.iter().map(|r| r.output_len as f64).sum::<f64>() * reps };
            work_within_limits(&work, what, "use a shorter trace", replications, run.record_iterations)?;
            routed(work.requests)?;
            bins_within_limit(rows.last().map_or(0.0, |r| r.at), run.bin_s)?;
        }
        None => {
            for q in process.iter().map(Process::qps).chain(run.sweep_max_qps) {
                let mean_out = output.mean().min(max_len);
                let work = Work::generated(q, duration_s, mean_out, replications);
                let what = || format!("`qps` = {} for `duration_s` = {} s at {mean_out:.0} output tokens a request", show(q), show(duration_s));
                work_within_limits(
                    &work,
                    what,
                    "lower `--qps` or `--duration-s` (serving file: traffic.qps, traffic.duration_s)",
                    replications,
                    run.record_iterations,
                )?;
                routed(work.requests)?;
            }
            bins_within_limit(duration_s, run.bin_s)?;
        }
    }
    let name = w.name.clone().unwrap_or_else(|| {
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
        trace_path,
        opts: RunOptions {
            bin_s: run.bin_s,
            drain_s,
            record_iterations: run.record_iterations,
            seed,
            frontend_s: run.frontend_ms.unwrap_or(0.0) * 1e-3,
            max_concurrency: run.max_concurrency,
            every_iteration: false,
        },
        offline: run.offline,
    })
}

/// A number as given for the small ones, in exponent form for the huge ones (`1e300`).
fn show(x: f64) -> String {
    if x.abs() >= 1e15 {
        format!("{x:e}")
    } else {
        format!("{x}")
    }
}

/// A pool of `n` replicas of `per` GPUs each within `limits::MAX_REPLICAS` (`name`: the key).
fn replicas_within_limit(name: &str, n: u64, per: u64) -> Result<(), DeployError> {
    if n > limits::MAX_REPLICAS {
        bail!(
            "`{name}` = {} makes {n} replicas of {per} GPU(s), more than the limit of {}\nhint: lower `--{}`, or raise `--tp` / `--pp` to make fewer, larger replicas",
            n * per,
            limits::MAX_REPLICAS,
            name.replace('_', "-")
        );
    }
    Ok(())
}

/// A run's requests and output tokens within the limits (`what`: the load, `fix`: how to
/// shrink it).
fn work_within_limits(work: &Work, what: impl Fn() -> String, fix: &str, replications: u64, record_iterations: bool) -> Result<(), DeployError> {
    let reps = if replications > 1 { format!(" x `--replications` = {replications}") } else { String::new() };
    match work.exceeded(record_iterations) {
        None => Ok(()),
        Some(Exceeded::Requests) => bail!(
            "{}{reps} is {:.3e} requests, more than the limit of {} per run\nhint: {fix}{}; see README.md \"Limits\"",
            what(),
            work.requests,
            limits::MAX_REQUESTS,
            if replications > 1 { " or `--replications`" } else { "" }
        ),
        Some(Exceeded::OutputTokens(limit)) => bail!(
            "{}{reps} is {:.3e} output tokens to decode, more than the limit of {limit:.0e} per run{}\nhint: {fix}{}, or shorten `--output-len`; see README.md \"Limits\"",
            what(),
            work.output_tokens,
            if record_iterations { " with `--iterations-csv`" } else { "" },
            if replications > 1 { ", `--replications`" } else { "" }
        ),
    }
}

/// The time series of `span_s` seconds of arrivals in bins of `bin_s` within `limits::MAX_BINS`.
fn bins_within_limit(span_s: f64, bin_s: f64) -> Result<(), DeployError> {
    if span_s / bin_s > limits::MAX_BINS {
        bail!(
            "`--bin-s` = {} cuts {} s of arrivals into {:.3e} time-series bins, more than the limit of {:.0e}\nhint: raise `--bin-s`",
            show(bin_s),
            show(span_s),
            span_s / bin_s,
            limits::MAX_BINS
        );
    }
    Ok(())
}

/// Read a measured per-request CSV (arrival_s, input_len, output_len, scheduled_s,
/// first_token_s, finish_s) into request records (missing times mean not finished).
pub fn read_measured(path: &Path) -> Result<ServeResult, DeployError> {
    let at = |what: String| DeployError::Invalid(what);
    let mut rd = csv::Reader::from_path(path).map_err(|e| at(format!("cannot read `{}`: {e}", path.display())))?;
    let headers = rd.headers().map_err(|e| at(e.to_string()))?.clone();
    let col = |name: &str| {
        headers.iter().position(|h| h == name).ok_or_else(|| {
            at(format!("`{}`: no `{name}` column\nhint: columns arrival_s, input_len, output_len, scheduled_s, first_token_s, finish_s", path.display()))
        })
    };
    let (ia, ii, io, is, ift, ifi) = (col("arrival_s")?, col("input_len")?, col("output_len")?, col("scheduled_s")?, col("first_token_s")?, col("finish_s")?);
    let mut requests = Vec::new();
    for (n, rec) in rd.records().enumerate() {
        let rec = rec.map_err(|e| at(format!("`{}`: row {}: {e}", path.display(), n + 2)))?;
        let num = |i: usize| -> Result<f64, DeployError> {
            let v = rec.get(i).unwrap_or("").trim();
            if v.is_empty() {
                return Ok(f64::INFINITY);
            }
            v.parse::<f64>().map_err(|e| at(format!("`{}`: row {}, `{}` = `{v}` is not a number: {e}", path.display(), n + 2, &headers[i])))
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
    if requests.is_empty() {
        bail!("`{}` has no requests", path.display());
    }
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
