//! Request-level discrete-event simulation of an inference deployment: replicas (each a TP x PP
//! group of GPUs), a request stream (Poisson, gamma-bursty, constant, or a replayed trace),
//! routing (round-robin or least-loaded), continuous batching with a token budget and a batch
//! limit per iteration (vLLM v1's scheduler: running requests first, oldest first, then waiting
//! ones in arrival order), a paged KV cache sized from the memory plan with preemption by
//! recompute, chunked prefill, and optionally disaggregated prefill and decode pools.
//!
//! Iteration times come from `cost::IterCost`, which prices each iteration with the same op
//! lists, lowering and power model as `analytic::predict` (one source of truth).
//!
//! The pieces: `engine` (the event loop: arrivals, routing, iterations, handoffs), `scheduler`
//! (the [`scheduler::Scheduler`] policies that pick each iteration's batch; vLLM v1's today),
//! `kv` (a replica's KV blocks and cache slots), `cost` (iteration times) and `metrics` (what the
//! run reports).
//!
//! Time is integer picoseconds (`des::SimTime`); events at equal times run in insertion order
//! (`des::EventQueue`). No wall clock; the only randomness is seeded (the request stream, the
//! iteration-time draws), so the same inputs and seed give the same result, bit for bit.
//! Architecture Invariant: no I/O, printing or clock reads.

pub mod arrivals;
pub mod cost;
mod engine;
pub mod engines;
pub mod kv;
mod metrics;
pub mod plan;
pub mod scheduler;
pub mod seq;
pub mod stats;

use crate::scenario::Scenario;
use crate::step::PredictError;

pub use arrivals::{Arrival, Lengths, Process};
use cost::IterCost;
pub use engine::{simulate, simulate_with_progress, PROGRESS_STEP};
pub use metrics::{Bin, IterationRecord, PoolStats, RequestRecord, ServeResult};
use scheduler::Batch;

/// vLLM's default `gpu_memory_utilization` (vllm/config: `CacheConfig.gpu_memory_utilization` = 0.9).
pub const DEFAULT_GPU_MEMORY_UTILIZATION: f64 = 0.9;
/// vLLM's default KV block size on CUDA (16 tokens).
pub const DEFAULT_BLOCK_SIZE: u32 = 16;

/// Where requests go first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Routing {
    RoundRobin,
    /// Fewest requests waiting or running; ties to the lowest replica index.
    LeastLoaded,
}

impl Routing {
    pub fn name(self) -> &'static str {
        match self {
            Routing::RoundRobin => "round-robin",
            Routing::LeastLoaded => "least-loaded",
        }
    }
}

/// Scheduler knobs of one replica.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SchedConfig {
    /// Most sequences in one iteration (vLLM `max_num_seqs`).
    pub max_batch: u32,
    /// Most tokens in one iteration (vLLM `max_num_batched_tokens`).
    pub token_budget: u32,
    /// Split prompts across iterations to fill the token budget.
    pub chunked_prefill: bool,
    /// Tokens per KV-cache block.
    pub block_size: u32,
    /// The KV sizing fraction: of HBM the server may use (weights, transients and KV cache;
    /// vLLM's `gpu_memory_utilization`), or of the memory free once the engine is loaded (with
    /// `kv_sizing` = `OfFree`, TensorRT-LLM's `kv_cache_free_gpu_mem_fraction`).
    pub gpu_memory_utilization: f64,
    /// How `gpu_memory_utilization` sizes the KV cache.
    pub kv_sizing: engines::KvSizing,
    /// The continuous-batching policy (`scheduler::for_config`).
    pub policy: engines::Policy,
    /// The engine's host overhead in microseconds (per iteration, per sequence, per layer with
    /// decoders, per layer and chunk); `None`: the stack's default (`HostOverhead::default_for`).
    pub host_us: Option<[f64; 4]>,
    /// Share of host and GPU time that overlaps (`HostOverhead::gpu_overlap`); `None`: the stack's.
    pub host_gpu_overlap: Option<f64>,
    /// Host time multiplier (`HostOverhead::time_scale`); `None`: 1.
    pub host_time_scale: Option<f64>,
    /// How the engine's decode attention reads the cache.
    pub decode_attention: DecodeAttention,
    /// Vary each iteration's time by a factor drawn (seeded) from the stack's measured spread
    /// (`cost::EAGER_ITERATION_SPREAD` for torch-eager; none for the others).
    pub iteration_spread: bool,
    /// Iterations replay CUDA graphs (see [`CudaGraphs`]); `None`: every kernel is launched from
    /// the host.
    pub cuda_graphs: Option<CudaGraphs>,
    /// The host time between graph iterations and a graph's GPU time per layer beyond the op
    /// list, microseconds (`HostOverhead::graph_per_iteration`, `graph_per_layer`); `None`: the
    /// stack's.
    pub graph_us: Option<[f64; 3]>,
}

/// CUDA graphs captured at start for a grid of padded shapes, as the reference server's
/// `--cuda-graphs [decode|full]`. Decoders replay the smallest graph that holds them: the batch
/// padded up to a capture size ([`capture_size`]); with `padded-matmul` attention the rows are the
/// cache slots up to the highest decoder's and every row attends to the longest context rounded
/// up to a multiple of `context_step`. Without `prefill_step` (vLLM's `FULL_DECODE_ONLY`) only
/// decode-only iterations replay graphs and iterations with prefill chunks run eagerly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CudaGraphs {
    pub context_step: u32,
    /// Decode-only iterations of more sequences than this run eagerly (no graph was captured for
    /// them: an engine's largest capture size). `u32::MAX`: every batch has one.
    pub max_batch: u32,
    /// Prefill graphs too (the reference server's `--cuda-graphs full`): in an iteration with
    /// prefill chunks the decoders replay their graph, each whole prompt (a first chunk) a graph
    /// of its length rounded up to a multiple of this, each its own pass; later chunks of a split
    /// prompt run eagerly. `None`: such iterations run eagerly as one forward.
    pub prefill_step: Option<u32>,
}

/// Context padding of the reference server's decode graphs (`serve_llama.py --graph-context-step`).
pub const DEFAULT_GRAPH_CONTEXT_STEP: u32 = 256;
/// Token padding of its prefill graphs (`--prefill-graph-step`).
pub const DEFAULT_PREFILL_GRAPH_STEP: u32 = 128;

/// The batch a decode graph is captured for that holds `n` rows: 1, 2, 4, then the next multiple
/// of 8 (vLLM's capture sizes), never above `max_batch` (captured too).
pub fn capture_size(n: u64, max_batch: u64) -> u64 {
    let b = match n {
        0..=1 => 1,
        2 => 2,
        3..=4 => 4,
        _ => n.div_ceil(8) * 8,
    };
    b.min(max_batch.max(n))
}

impl CudaGraphs {
    /// Rows and cached tokens (all rows, before the new one) a decode-only batch's graph runs.
    fn padded(&self, attention: DecodeAttention, max_batch: u64, b: &Batch) -> (u64, u64) {
        match attention {
            DecodeAttention::PaddedMatmul => {
                let rows = capture_size(b.decode_slot_span, max_batch);
                let step = self.context_step.max(1) as u64;
                let keys = (b.decode_kv_max + 1).div_ceil(step) * step;
                (rows, rows * (keys - 1))
            }
            // Padding rows of a fused kernel read (next to) nothing.
            DecodeAttention::Paged => (capture_size(b.n_decode, max_batch), b.decode_kv),
            DecodeAttention::Padded => (capture_size(b.n_decode, max_batch), b.n_decode * b.decode_kv_max),
        }
    }
}

impl SchedConfig {
    /// The serving defaults of a stack: an engine's (`engines::defaults`: its limits, KV sizing,
    /// scheduler, decode CUDA graphs up to its largest capture size, no measured iteration
    /// spread), or [`SchedConfig::default`] for the training stacks.
    pub fn for_stack(stack: crate::workload::Stack) -> SchedConfig {
        let d = SchedConfig::default();
        match engines::defaults(stack) {
            None => d,
            Some(e) => SchedConfig {
                max_batch: e.max_batch,
                token_budget: e.token_budget,
                chunked_prefill: e.chunked_prefill,
                block_size: e.block_size,
                gpu_memory_utilization: e.kv_fraction,
                kv_sizing: e.kv_sizing,
                policy: e.policy,
                iteration_spread: false,
                cuda_graphs: Some(CudaGraphs { context_step: DEFAULT_GRAPH_CONTEXT_STEP, max_batch: e.cuda_graph_max_batch, prefill_step: None }),
                ..d
            },
        }
    }
}

impl Default for SchedConfig {
    fn default() -> Self {
        SchedConfig {
            max_batch: 256,
            token_budget: 8192,
            chunked_prefill: true,
            block_size: DEFAULT_BLOCK_SIZE,
            gpu_memory_utilization: DEFAULT_GPU_MEMORY_UTILIZATION,
            kv_sizing: engines::KvSizing::OfTotal,
            policy: engines::Policy::VllmV1,
            host_us: None,
            host_gpu_overlap: None,
            host_time_scale: None,
            decode_attention: DecodeAttention::Paged,
            iteration_spread: true,
            cuda_graphs: None,
            graph_us: None,
        }
    }
}

/// How an engine's decode attention reads the KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeAttention {
    /// Each decoder reads its own context (paged attention, vLLM's), in a fused kernel.
    Paged,
    /// Each decoder's cache is read to the batch's longest context (a contiguous per-sequence
    /// cache, as simple servers and static caches have), in a fused kernel.
    Padded,
    /// The reference server's (scenarios/workloads/serve_llama.py): a cache slot per running
    /// sequence (the lowest free one), decoders attending with unfused batched matmuls over every
    /// slot up to the highest decoder's, each to the longest context, priced from the calibration
    /// profile's decode-regime rows, the host waiting for them; later prefill chunks' scores go
    /// through HBM too.
    PaddedMatmul,
}

impl DecodeAttention {
    pub fn name(self) -> &'static str {
        match self {
            DecodeAttention::Paged => "paged",
            DecodeAttention::Padded => "padded",
            DecodeAttention::PaddedMatmul => "padded-matmul",
        }
    }
    pub fn parse(s: &str) -> Option<DecodeAttention> {
        [DecodeAttention::Paged, DecodeAttention::Padded, DecodeAttention::PaddedMatmul].into_iter().find(|d| d.name() == s)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Prefill and decode on the same replicas.
    Both,
    Prefill,
    Decode,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Both => "colocated",
            Role::Prefill => "prefill",
            Role::Decode => "decode",
        }
    }
}

/// A pool of identical replicas. `scenario` holds the model, system and one replica's layout
/// (tp, pp; dp = 1, or under attention DP the instance's `dp` ranks: `Workload::attention_dp`).
#[derive(Debug, Clone)]
pub struct Pool {
    pub role: Role,
    pub scenario: Scenario,
    pub n_replicas: u32,
    pub sched: SchedConfig,
}

impl Pool {
    pub fn gpus_per_replica(&self) -> u64 {
        (self.scenario.parallel.tp * self.scenario.parallel.pp) as u64 * self.attention_dp_ranks()
    }
    /// The attention-DP ranks of one replica (1 without attention DP).
    pub fn attention_dp_ranks(&self) -> u64 {
        if self.scenario.workload.attention_dp.is_some() {
            self.scenario.parallel.dp.max(1) as u64
        } else {
            1
        }
    }
}

/// The deployment: one colocated pool, or a prefill pool and a decode pool.
#[derive(Debug, Clone)]
pub struct Deployment {
    pub pools: Vec<Pool>,
    pub routing: Routing,
}

impl Deployment {
    pub fn n_gpus(&self) -> u64 {
        self.pools.iter().map(|p| p.gpus_per_replica() * p.n_replicas as u64).sum()
    }
}

/// Simulation options.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunOptions {
    /// Width of the time-series bins.
    pub bin_s: f64,
    /// Keep one `IterationRecord` per iteration in `ServeResult::iterations`.
    pub record_iterations: bool,
    /// After the last arrival, keep serving for at most this long (requests still in the system
    /// then are reported as unfinished).
    pub drain_s: f64,
    /// Seed of the iteration-time spread draws (the request stream has its own seed).
    pub seed: u64,
    /// Seconds between a request's send and its arrival at the engine: the serving front end's own
    /// work per request, counted once
    /// (Triton's ensemble: tokenizing, its queue, detokenizing and streaming the tokens back),
    /// which TTFT includes and the time between tokens does not. 0: the engine is called directly
    /// (trtllm-bench, the reference server).
    pub frontend_s: f64,
    /// The client's concurrency limit (Triton's perf_analyzer / benchmark clients): at most this
    /// many requests in flight; an arrival beyond it waits at the client and is sent when one
    /// finishes, its latencies counted from the send. `None`: no limit.
    pub max_concurrency: Option<u32>,
    /// Run every iteration as its own event. `false` (the default) lets a replica whose running
    /// batch cannot change before its next completion (see `engine`'s decode runs) take the
    /// iterations up to it as one event, priced from three of them; `true` is the reference
    /// the runs are checked against (tests/it/serve_engine.rs).
    pub every_iteration: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions { bin_s: 1.0, drain_s: f64::INFINITY, record_iterations: false, seed: 0, frontend_s: 0.0, max_concurrency: None, every_iteration: false }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ServeError {
    #[error("{0}")]
    Predict(#[from] PredictError),
    #[error("pool `{pool}`: the KV cache has no room: weights and transients take {other_gib:.1} GiB of {usable_gib:.1} GiB usable per GPU")]
    NoKvRoom { pool: &'static str, other_gib: f64, usable_gib: f64 },
    #[error("{0}")]
    Invalid(String),
}

/// The iteration pricer of a pool: its scenario's cost model with the engine's host overhead and
/// decode attention.
pub fn iteration_cost(p: &Pool) -> Result<IterCost<'_>, ServeError> {
    let mut cost = IterCost::new(&p.scenario)?.with_host(cost::HostOverhead::resolve(&p.sched, p.scenario.workload.stack).0);
    // TensorRT-LLM's executor keeps one micro-batch per pipeline stage in flight.
    if p.sched.policy == engines::Policy::TrtllmInflight {
        cost = cost.with_pipelined_microbatches();
    }
    if p.sched.decode_attention == DecodeAttention::PaddedMatmul {
        let m = &p.scenario.model;
        let rows = m.n_heads / m.n_kv_heads.max(1);
        let bw = p.scenario.profile.as_ref().and_then(|pr| pr.decode_attention_bandwidth(rows, m.head_dim)).ok_or_else(|| {
            ServeError::Invalid("unfused decode attention is priced from a calibration profile's decode-regime attention rows, and this scenario's profile has none\nhint: name a profile measured with `gpuplan calibrate` (group `attention`), e.g. --calibration h200-sxm-1x".into())
        })?;
        cost = cost.with_unfused_decode(bw);
    }
    Ok(cost)
}

/// Context of the host probe: one sequence decoding at this many cached tokens
/// (scenarios/workloads/serve_llama.py `--host-probe`).
pub const HOST_PROBE_CONTEXT: u64 = 512;

/// The host time scale at which the pool's engine takes `probe_s` for the host probe's iteration
/// (one decoder at [`HOST_PROBE_CONTEXT`] cached tokens, no spread): the probe measures this node's
/// host against the one the engine's host terms were fitted on. Bisection (the iteration's time
/// grows with the scale); an error when no scale in 0.05..20 reaches it (a probe faster than the
/// GPU side alone, or a pool with no host time).
pub fn host_time_scale_for_probe(p: &Pool, probe_s: f64) -> Result<f64, ServeError> {
    let mut cost = iteration_cost(p)?;
    let mut at = |k: f64| {
        cost.set_host_time_scale(k);
        cost.iteration(1, HOST_PROBE_CONTEXT + 1, &[], 1).time.value()
    };
    let (mut lo, mut hi) = (0.05, 20.0);
    let (t_lo, t_hi) = (at(lo), at(hi));
    if !(probe_s >= t_lo && probe_s <= t_hi) {
        return Err(ServeError::Invalid(format!(
            "a host probe of {:.2} ms is outside what this engine model gives for it at host time scales 0.05-20 ({:.2}-{:.2} ms)\nhint: the probe is the median iteration of `serve_llama.py --host-probe` for the same model on this node",
            probe_s * 1e3,
            t_lo * 1e3,
            t_hi * 1e3
        )));
    }
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if at(mid) < probe_s {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(0.5 * (lo + hi))
}
