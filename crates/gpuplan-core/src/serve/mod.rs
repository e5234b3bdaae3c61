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
//! Time is integer picoseconds (`sim::SimTime`); events at equal times run in insertion order. No
//! wall clock; the only randomness is seeded (the request stream, the iteration-time draws), so the
//! same inputs and seed give the same result, bit for bit. Architecture Invariant: no I/O, printing or clock reads.

pub mod arrivals;
pub mod cost;
pub mod plan;
pub mod stats;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use crate::analytic::PredictError;
use crate::scenario::Scenario;
use crate::sim::SimTime;
use crate::units::Seconds;

pub use arrivals::{Arrival, Lengths, Process};
use cost::{Chunk, IterCost, KvRoom};

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
    /// Share of HBM the server may use (weights, transients and KV cache).
    pub gpu_memory_utilization: f64,
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

impl Default for SchedConfig {
    fn default() -> Self {
        SchedConfig {
            max_batch: 256,
            token_budget: 8192,
            chunked_prefill: true,
            block_size: DEFAULT_BLOCK_SIZE,
            gpu_memory_utilization: DEFAULT_GPU_MEMORY_UTILIZATION,
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
/// (tp, pp; dp = 1).
#[derive(Debug, Clone)]
pub struct Pool {
    pub role: Role,
    pub scenario: Scenario,
    pub n_replicas: u32,
    pub sched: SchedConfig,
}

impl Pool {
    pub fn gpus_per_replica(&self) -> u64 {
        (self.scenario.parallel.tp * self.scenario.parallel.pp) as u64
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
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions { bin_s: 1.0, drain_s: f64::INFINITY, record_iterations: false, seed: 0 }
    }
}

/// What happened to one request. Times in seconds from the start; NaN where it did not happen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RequestRecord {
    pub arrival: f64,
    pub input_len: u32,
    pub output_len: u32,
    /// First time a replica scheduled it (end of queueing).
    pub scheduled: f64,
    pub first_token: f64,
    pub finish: f64,
    pub preemptions: u32,
    /// Too long for the KV cache of any replica: refused at arrival.
    pub rejected: bool,
}

impl RequestRecord {
    pub fn finished(&self) -> bool {
        self.finish.is_finite()
    }
}

/// Per-pool totals.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PoolStats {
    pub role: &'static str,
    pub n_replicas: u32,
    pub gpus_per_replica: u64,
    pub tp: u32,
    pub pp: u32,
    pub max_batch: u32,
    pub token_budget: u32,
    pub kv_blocks_per_replica: u64,
    pub kv_tokens_per_replica: u64,
    pub kv_bytes_per_token_per_gpu: f64,
    pub kv_cache_bytes_per_gpu: f64,
    pub iterations: u64,
    pub preemptions: u64,
    /// Replica-seconds spent running iterations.
    pub busy_s: f64,
    /// Integral of the running batch over busy time (sequences x s).
    pub batch_area: f64,
    /// Integral of the KV-cache occupancy (used / total blocks) over busy time.
    pub kv_area: f64,
    pub max_batch_seen: u32,
    pub max_kv_occupancy: f64,
    /// GPU energy of the pool's iterations, and of its idle time.
    pub busy_energy_j: f64,
    pub idle_energy_j: f64,
    pub prefill_tokens: u64,
    pub decode_tokens: u64,
}

/// One time-series bin, all replicas together.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Bin {
    pub arrivals: u64,
    pub completions: u64,
    pub output_tokens: u64,
    /// Iterations started in the bin: sum of batch x duration, of occupancy x duration, and
    /// duration.
    pub batch_area: f64,
    pub kv_area: f64,
    pub busy_s: f64,
    /// Requests in the system and waiting for their first scheduling, integrated over the bin.
    pub in_system_area: f64,
    pub queued_area: f64,
}

#[derive(Debug, Clone)]
pub struct ServeResult {
    pub requests: Vec<RequestRecord>,
    /// One per iteration, when `RunOptions::record_iterations` asked for them.
    pub iterations: Vec<IterationRecord>,
    pub pools: Vec<PoolStats>,
    pub bins: Vec<Bin>,
    pub bin_s: f64,
    /// From t = 0 to the last event.
    pub horizon_s: f64,
    /// Requests in the system (arrived, not finished) and queued (not yet scheduled) integrated
    /// over the horizon (request x s), for Little's law.
    pub in_system_area: f64,
    pub queued_area: f64,
    /// Requests the simulation saw arrive (the first `arrived` of `requests`; the rest came
    /// after it stopped).
    pub arrived: u64,
    /// Requests still in the system when the simulation stopped.
    pub in_flight_at_end: u64,
    pub events: u64,
    /// Host power of the nodes over the horizon.
    pub host_energy_j: f64,
    pub n_gpus: u64,
    pub pue: f64,
}

/// One iteration of one replica, as simulated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IterationRecord {
    pub start_s: f64,
    pub replica: u32,
    /// Sequences decoding one token, and their cached tokens in all and at most.
    pub n_decode: u64,
    pub decode_kv: u64,
    pub decode_kv_max: u64,
    /// Cache slots up to the highest decoder's (what a per-slot padded cache reads).
    pub decode_slot_span: u64,
    /// Prefill chunks and their tokens.
    pub n_chunks: u64,
    pub prefill_tokens: u64,
    /// The rows and keys per row of the decode graph the iteration replays; (0, 0): none.
    pub graph_rows: u64,
    pub graph_keys: u64,
    pub time_s: f64,
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

// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
struct Seq {
    req: u32,
    /// Tokens to have in the KV cache before the next token is sampled (the prompt, or the prompt
    /// and the tokens generated so far after a preemption).
    target: u32,
    computed: u32,
    generated: u32,
    blocks: u32,
    /// Tokens scheduled in the current iteration.
    sched: u32,
    /// Its slot of a per-slot (padded) cache while running: the lowest free one when admitted,
    /// as a static-cache server assigns them ([`NO_SLOT`] while waiting).
    slot: u32,
}

const NO_SLOT: u32 = u32::MAX;

struct Replica {
    pool: usize,
    waiting: VecDeque<Seq>,
    running: Vec<Seq>,
    free_blocks: u64,
    /// Free cache slots (see [`Seq::slot`]), lowest first.
    free_slots: BinaryHeap<Reverse<u32>>,
    /// State of its iteration-time spread draws (see [`cost::IterationSpread`]).
    spread_z: f64,
    busy: bool,
    iter_power_w: f64,
    iter_time_s: f64,
    /// Of the current iteration, the host time after its tokens are out (a graph engine's loop
    /// between iterations): the replica is busy, its tokens are stamped before it.
    iter_tail_s: f64,
}

impl Replica {
    fn load(&self) -> usize {
        self.waiting.len() + self.running.len()
    }
}

struct PoolState<'a> {
    role: Role,
    sched: SchedConfig,
    cost: IterCost<'a>,
    room: KvRoom,
    total_blocks: u64,
    gpus: u64,
    replicas: Vec<usize>,
    rr: usize,
    stats: PoolStats,
    /// The stack's measured iteration-time spreads (see [`cost::IterationSpread`]), when it has
    /// them and they are asked for.
    spread: Option<cost::IterationSpread>,
}

const EV_ARRIVAL: u8 = 0;
const EV_ITER_DONE: u8 = 1;
const EV_HANDOFF: u8 = 2;

fn ceil_div(a: u64, b: u64) -> u64 {
    a.div_ceil(b)
}

/// The iteration pricer of a pool: its scenario's cost model with the engine's host overhead and
/// decode attention.
pub fn iteration_cost(p: &Pool) -> Result<IterCost<'_>, ServeError> {
    let mut cost = IterCost::new(&p.scenario)?.with_host(cost::HostOverhead::resolve(&p.sched, p.scenario.workload.stack).0);
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

/// Run the simulation of `deployment` serving `arrivals` (sorted by time).
pub fn simulate(deployment: &Deployment, arrivals: &[Arrival], opts: &RunOptions) -> Result<ServeResult, ServeError> {
    if deployment.pools.is_empty() {
        return Err(ServeError::Invalid("no replica pool".into()));
    }
    let disaggregated = deployment.pools.iter().any(|p| p.role != Role::Both);
    if disaggregated && !(deployment.pools.len() == 2 && deployment.pools[0].role == Role::Prefill && deployment.pools[1].role == Role::Decode) {
        return Err(ServeError::Invalid("a disaggregated deployment is a prefill pool then a decode pool".into()));
    }
    if !(opts.bin_s > 0.0 && opts.bin_s.is_finite()) {
        return Err(ServeError::Invalid(format!("bin width {} must be positive", opts.bin_s)));
    }
    let mut pools: Vec<PoolState> = Vec::new();
    let mut replicas: Vec<Replica> = Vec::new();
    for (pi, p) in deployment.pools.iter().enumerate() {
        if p.n_replicas == 0 || p.sched.max_batch == 0 || p.sched.token_budget == 0 || p.sched.block_size == 0 {
            return Err(ServeError::Invalid(format!("pool `{}`: replicas, max batch, token budget and block size must be positive", p.role.name())));
        }
        let cost = iteration_cost(p)?;
        let room = cost::kv_room(&p.scenario, p.sched.token_budget as u64, p.sched.max_batch as u64, p.sched.gpu_memory_utilization);
        let total_blocks = (room.cache_bytes / (room.bytes_per_token * p.sched.block_size as f64)).floor() as u64;
        if total_blocks == 0 {
            return Err(ServeError::NoKvRoom {
                pool: p.role.name(),
                other_gib: room.other_bytes / (1u64 << 30) as f64,
                usable_gib: room.capacity_bytes * p.sched.gpu_memory_utilization / (1u64 << 30) as f64,
            });
        }
        let pc = &p.scenario.parallel;
        let stats = PoolStats {
            role: p.role.name(),
            n_replicas: p.n_replicas,
            gpus_per_replica: p.gpus_per_replica(),
            tp: pc.tp,
            pp: pc.pp,
            max_batch: p.sched.max_batch,
            token_budget: p.sched.token_budget,
            kv_blocks_per_replica: total_blocks,
            kv_tokens_per_replica: total_blocks * p.sched.block_size as u64,
            kv_bytes_per_token_per_gpu: room.bytes_per_token,
            kv_cache_bytes_per_gpu: room.cache_bytes,
            ..PoolStats::default()
        };
        let mut ids = Vec::new();
        for _ in 0..p.n_replicas {
            ids.push(replicas.len());
            let free_slots = (0..p.sched.max_batch).map(Reverse).collect();
            replicas.push(Replica {
                pool: pi,
                waiting: VecDeque::new(),
                running: Vec::new(),
                free_blocks: total_blocks,
                free_slots,
                spread_z: 0.0,
                busy: false,
                iter_power_w: 0.0,
                iter_time_s: 0.0,
                iter_tail_s: 0.0,
            });
        }
        let spread = p.sched.iteration_spread.then(|| cost::iteration_spread(p.scenario.workload.stack)).flatten();
        pools.push(PoolState { role: p.role, sched: p.sched, cost, room, total_blocks, gpus: p.gpus_per_replica(), replicas: ids, rr: 0, stats, spread });
    }

    let mut records: Vec<RequestRecord> = arrivals
        .iter()
        .map(|a| RequestRecord {
            arrival: a.at,
            input_len: a.input_len,
            output_len: a.output_len,
            scheduled: f64::NAN,
            first_token: f64::NAN,
            finish: f64::NAN,
            preemptions: 0,
            rejected: false,
        })
        .collect();

    // (time in ps, insertion sequence, kind, a, b): earliest first, FIFO among equal times.
    type Event = Reverse<(u64, u64, u8, u32, u32)>;
    let mut iterations: Vec<IterationRecord> = Vec::new();
    // Iteration-time spread draws: their own seeded stream, so runs are deterministic.
    let mut spread_rng = arrivals::Rng::new(0x5EED_0F17 ^ opts.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut heap: BinaryHeap<Event> = BinaryHeap::new();
    let mut seq_no = 0u64;
    let mut push = |heap: &mut BinaryHeap<Event>, t: SimTime, kind: u8, a: u32, b: u32| {
        heap.push(Reverse((t.0, seq_no, kind, a, b)));
        seq_no += 1;
    };
    let stop = arrivals.last().map_or(0.0, |a| a.at) + opts.drain_s;
    let stop_ps = if stop.is_finite() { SimTime::from_seconds(Seconds::new(stop)).0 } else { u64::MAX };
    if !arrivals.is_empty() {
        push(&mut heap, SimTime::from_seconds(Seconds::new(arrivals[0].at)), EV_ARRIVAL, 0, 0);
    }

    let mut bins: Vec<Bin> = Vec::new();
    let bin_of = |t: f64, bins: &mut Vec<Bin>| -> usize {
        let i = (t / opts.bin_s).floor().max(0.0) as usize;
        if bins.len() <= i {
            bins.resize(i + 1, Bin::default());
        }
        i
    };
    let (mut n_sys, mut n_queued) = (0u64, 0u64);
    let (mut area_sys, mut area_q) = (0.0f64, 0.0f64);
    let mut last_t = 0u64;
    let mut events = 0u64;
    let mut n_arrived = 0u64;
    let mut scratch_chunks: Vec<Chunk> = Vec::new();
    let net_bw = deployment.pools[0].scenario.system.network_bandwidth_per_gpu().value();

    while let Some(Reverse((t, _, kind, a, b))) = heap.pop() {
        if t > stop_ps {
            break;
        }
        events += 1;
        // Little's law bookkeeping: the counts held since the last event.
        if t > last_t {
            let dt = (t - last_t) as f64 * 1e-12;
            area_sys += n_sys as f64 * dt;
            area_q += n_queued as f64 * dt;
            let bi = bin_of(last_t as f64 * 1e-12, &mut bins);
            bins[bi].in_system_area += n_sys as f64 * dt;
            bins[bi].queued_area += n_queued as f64 * dt;
            last_t = t;
        }
        let now = SimTime(t);
        let now_s = t as f64 * 1e-12;
        let wake: Option<usize>;
        match kind {
            EV_ARRIVAL => {
                let i = a as usize;
                if i + 1 < arrivals.len() {
                    push(&mut heap, SimTime::from_seconds(Seconds::new(arrivals[i + 1].at)), EV_ARRIVAL, a + 1, 0);
                }
                n_arrived += 1;
                let bi = bin_of(now_s, &mut bins);
                bins[bi].arrivals += 1;
                let r = arrivals[i];
                // A request whose whole context cannot fit one replica's cache never finishes.
                let fits = pools.iter().all(|p| ceil_div((r.input_len + r.output_len) as u64, p.sched.block_size as u64) <= p.total_blocks);
                if !fits {
                    records[i].rejected = true;
                    continue;
                }
                n_sys += 1;
                n_queued += 1;
                let pool = &mut pools[0];
                let rid = route(pool, &replicas, deployment.routing);
                replicas[rid].waiting.push_back(Seq { req: a, target: r.input_len, computed: 0, generated: 0, blocks: 0, sched: 0, slot: NO_SLOT });
                wake = Some(rid);
            }
            EV_HANDOFF => {
                // KV of a prefilled request arrives at the decode pool.
                let pool = &mut pools[1];
                let rid = route(pool, &replicas, deployment.routing);
                let rec = &records[a as usize];
                replicas[rid].waiting.push_back(Seq {
                    req: a,
                    target: rec.input_len,
                    computed: rec.input_len,
                    generated: 1,
                    blocks: 0,
                    sched: 0,
                    slot: NO_SLOT,
                });
                let _ = b;
                wake = Some(rid);
            }
            _ => {
                // EV_ITER_DONE on replica `a`.
                let rid = a as usize;
                let pi = replicas[rid].pool;
                let role = pools[pi].role;
                let rep = &mut replicas[rid];
                rep.busy = false;
                let tok_s = now_s - rep.iter_tail_s;
                let mut finished_tokens = 0u64;
                let mut completions = 0u64;
                let mut handoffs: Vec<(u32, f64)> = Vec::new();
                let mut freed = 0u64;
                for s in rep.running.iter_mut() {
                    if s.sched == 0 {
                        continue;
                    }
                    s.computed += s.sched;
                    s.sched = 0;
                    if s.computed >= s.target {
                        s.generated += 1;
                        finished_tokens += 1;
                        let rec = &mut records[s.req as usize];
                        if !rec.first_token.is_finite() {
                            rec.first_token = tok_s;
                        }
                        if s.generated >= rec.output_len {
                            rec.finish = tok_s;
                            completions += 1;
                            freed += s.blocks as u64;
                            s.blocks = 0;
                            rep.free_slots.push(Reverse(s.slot));
                            s.target = u32::MAX; // mark done
                        } else if role == Role::Prefill {
                            let kv_bytes = pools[pi].room.bytes_per_token * s.computed as f64;
                            handoffs.push((s.req, kv_bytes / net_bw));
                            freed += s.blocks as u64;
                            s.blocks = 0;
                            rep.free_slots.push(Reverse(s.slot));
                            s.target = u32::MAX;
                        }
                    }
                }
                rep.free_blocks += freed;
                rep.running.retain(|s| s.target != u32::MAX);
                n_sys -= completions;
                let bi = bin_of(now_s, &mut bins);
                bins[bi].completions += completions;
                bins[bi].output_tokens += finished_tokens;
                for (req, dt) in handoffs {
                    push(&mut heap, SimTime(t + SimTime::from_seconds(Seconds::new(dt)).0), EV_HANDOFF, req, 0);
                }
                wake = Some(rid);
            }
        }
        // Start an iteration on the replica the event touched, if it is idle and has work.
        if let Some(rid) = wake {
            if replicas[rid].busy {
                continue;
            }
            let pi = replicas[rid].pool;
            let pool = &mut pools[pi];
            let rep = &mut replicas[rid];
            let Some(batch) = schedule(rep, &pool.sched, &mut records, &mut scratch_chunks, &mut pool.stats, now_s, &mut n_queued) else {
                continue;
            };
            // Padded decode attention reads every decoder's cache up to the longest context; the
            // reference server's batched matmuls read every slot up to the highest decoder's.
            let kv = match pool.sched.decode_attention {
                DecodeAttention::Paged => batch.decode_kv,
                DecodeAttention::Padded => batch.n_decode * batch.decode_kv_max,
                DecodeAttention::PaddedMatmul => batch.decode_slot_span * batch.decode_kv_max,
            };
            // Graphs run the iteration with prefill graphs, or without them when it only decodes.
            let graphs = pool.sched.cuda_graphs.filter(|g| g.prefill_step.is_some() || (batch.n_decode > 0 && scratch_chunks.is_empty()));
            let graph = graphs.filter(|_| batch.n_decode > 0).map(|g| g.padded(pool.sched.decode_attention, pool.sched.max_batch as u64, &batch));
            let (mut it, kind, tail) = match graphs {
                None => (
                    pool.cost.iteration(batch.n_decode, kv, &scratch_chunks, batch.rows),
                    if scratch_chunks.is_empty() { cost::SpreadKind::DecodeOnly } else { cost::SpreadKind::Mixed },
                    0.0,
                ),
                Some(g) => graph_iteration(&mut pool.cost, g, pool.sched.token_budget, graph, &scratch_chunks),
            };
            if let Some(spread) = &pool.spread {
                it.time = it.time * spread.factor(&mut rep.spread_z, spread_rng.normal(), kind);
            }
            let dur = it.time.value();
            if opts.record_iterations {
                iterations.push(IterationRecord {
                    start_s: now_s,
                    replica: rid as u32,
                    n_decode: batch.n_decode,
                    decode_kv: batch.decode_kv,
                    decode_kv_max: batch.decode_kv_max,
                    decode_slot_span: batch.decode_slot_span,
                    n_chunks: scratch_chunks.len() as u64,
                    prefill_tokens: scratch_chunks.iter().map(|c| c.q as u64).sum(),
                    graph_rows: graph.map_or(0, |g| g.0),
                    graph_keys: graph.map_or(0, |(rows, kv)| kv / rows + 1),
                    time_s: dur,
                });
            }
            rep.busy = true;
            rep.iter_power_w = it.gpu_power.value();
            rep.iter_time_s = dur;
            rep.iter_tail_s = tail.min(dur);
            let st = &mut pool.stats;
            st.iterations += 1;
            st.busy_s += dur;
            let b = rep.running.iter().filter(|s| s.sched > 0).count() as u32;
            let occ = 1.0 - rep.free_blocks as f64 / pool.total_blocks as f64;
            st.batch_area += b as f64 * dur;
            st.kv_area += occ * dur;
            st.max_batch_seen = st.max_batch_seen.max(b);
            st.max_kv_occupancy = st.max_kv_occupancy.max(occ);
            st.busy_energy_j += it.gpu_power.value() * pool.gpus as f64 * dur;
            st.decode_tokens += batch.n_decode;
            st.prefill_tokens += scratch_chunks.iter().map(|c| c.q as u64).sum::<u64>();
            let bi = bin_of(now_s, &mut bins);
            bins[bi].batch_area += b as f64 * dur;
            bins[bi].kv_area += occ * dur;
            bins[bi].busy_s += dur;
            let end = SimTime(t + SimTime::from_seconds(it.time).0.max(1));
            push(&mut heap, end, EV_ITER_DONE, rid as u32, 0);
        }
        let _ = now;
    }

    let horizon = last_t as f64 * 1e-12;
    for p in pools.iter_mut() {
        let replica_s = horizon * p.replicas.len() as f64;
        p.stats.idle_energy_j = p.cost.idle_power().value() * p.gpus as f64 * (replica_s - p.stats.busy_s).max(0.0);
    }
    let n_gpus = deployment.n_gpus();
    let system = &deployment.pools[0].scenario.system;
    let n_nodes = (n_gpus as f64 / system.gpus_per_node as f64).ceil();
    let in_flight_at_end = records[..n_arrived as usize].iter().filter(|r| !r.rejected && !r.finished()).count() as u64;
    Ok(ServeResult {
        iterations,
        requests: records,
        pools: pools.into_iter().map(|p| p.stats).collect(),
        bins,
        bin_s: opts.bin_s,
        horizon_s: horizon,
        in_system_area: area_sys,
        queued_area: area_q,
        arrived: n_arrived,
        in_flight_at_end,
        events,
        host_energy_j: system.host_power_per_node.value.value() * n_nodes * horizon,
        n_gpus,
        pue: system.pue.value,
    })
}

fn route(pool: &mut PoolState, replicas: &[Replica], routing: Routing) -> usize {
    match routing {
        Routing::RoundRobin => {
            let r = pool.replicas[pool.rr % pool.replicas.len()];
            pool.rr += 1;
            r
        }
        Routing::LeastLoaded => *pool.replicas.iter().min_by_key(|&&r| (replicas[r].load(), r)).expect("a pool has replicas"),
    }
}

/// An iteration of an engine with CUDA graphs: the decoders' graph (`decode`: its rows and cached
/// tokens), then per prefill chunk a prefill graph (a whole prompt, padded to a multiple of the
/// step, the largest graph being the token budget's, as the server captures them) or an eager
/// forward (a later chunk), then the host's time between iterations (returned too: the tokens are
/// out before it). Power: the passes' time-weighted mean. The spread: the graphs' unless an eager
/// forward ran.
fn graph_iteration(
    cost: &mut IterCost,
    g: CudaGraphs,
    token_budget: u32,
    decode: Option<(u64, u64)>,
    chunks: &[Chunk],
) -> (cost::IterTime, cost::SpreadKind, f64) {
    let mut passes = Vec::with_capacity(chunks.len() + 1);
    if let Some((rows, kv)) = decode {
        passes.push(cost.graph_pass(rows, kv, &[], rows));
    }
    let mut kind = cost::SpreadKind::Graph;
    for c in chunks {
        match g.prefill_step {
            Some(step) if c.c == 0 => {
                let q = (c.q.div_ceil(step.max(1)) * step.max(1)).min(token_budget.max(c.q));
                passes.push(cost.graph_pass(0, 0, &[Chunk { q, c: 0 }], 1));
            }
            _ => {
                kind = cost::SpreadKind::Mixed;
                passes.push(cost.later_chunk_pass(*c, 1));
            }
        }
    }
    let busy: f64 = passes.iter().map(|p| p.time.value()).sum();
    let energy: f64 = passes.iter().map(|p| p.time.value() * p.gpu_power.value()).sum();
    let tail = cost.graph_host().value();
    (cost::IterTime { time: Seconds::new(busy + tail), gpu_power: crate::units::Watts::new(energy / busy.max(1e-12)) }, kind, tail)
}

struct Batch {
    n_decode: u64,
    decode_kv: u64,
    /// The longest decoder's context.
    decode_kv_max: u64,
    /// Slots up to the highest decoder's (see [`Seq::slot`]).
    decode_slot_span: u64,
    rows: u64,
}

/// Form the next iteration (vLLM v1 scheduler order): running sequences first, oldest first,
/// each taking one decode token or its next prefill chunk; when the cache has no block for one,
/// the newest running sequence is preempted (its blocks freed, its tokens recomputed later);
/// then, if nothing was preempted, waiting sequences in arrival order while the batch, the token
/// budget and the free blocks allow.
fn schedule(
    rep: &mut Replica,
    cfg: &SchedConfig,
    records: &mut [RequestRecord],
    chunks: &mut Vec<Chunk>,
    stats: &mut PoolStats,
    now_s: f64,
    n_queued: &mut u64,
) -> Option<Batch> {
    chunks.clear();
    let bs = cfg.block_size as u64;
    let mut budget = cfg.token_budget as u64;
    let mut preempted = false;
    let mut i = 0;
    while i < rep.running.len() && budget > 0 {
        let s = rep.running[i];
        let remaining = (s.target.saturating_sub(s.computed)) as u64;
        let need = if remaining == 0 { 1 } else { remaining.min(budget) };
        let need_blocks = ceil_div(s.computed as u64 + need, bs).saturating_sub(s.blocks as u64);
        while rep.free_blocks < need_blocks && rep.running.len() > i {
            let mut v = rep.running.pop().expect("non-empty");
            rep.free_blocks += v.blocks as u64;
            rep.free_slots.push(Reverse(v.slot));
            v.slot = NO_SLOT;
            v.target = records[v.req as usize].input_len + v.generated;
            v.computed = 0;
            v.blocks = 0;
            records[v.req as usize].preemptions += 1;
            stats.preemptions += 1;
            rep.waiting.push_front(v);
            preempted = true;
        }
        if i >= rep.running.len() {
            break;
        }
        let s = &mut rep.running[i];
        rep.free_blocks -= need_blocks;
        s.blocks += need_blocks as u32;
        s.sched = need as u32;
        budget -= need;
        i += 1;
    }
    if !preempted {
        while budget > 0 && rep.running.len() < cfg.max_batch as usize {
            let Some(s) = rep.waiting.front() else { break };
            let remaining = (s.target.saturating_sub(s.computed)) as u64;
            let need = if remaining == 0 {
                1
            } else if cfg.chunked_prefill {
                remaining.min(budget)
            } else if remaining <= budget || budget == cfg.token_budget as u64 {
                // Without chunking a prompt longer than the budget runs alone.
                remaining
            } else {
                break;
            };
            let need_blocks = ceil_div(s.computed as u64 + need, bs).saturating_sub(s.blocks as u64);
            if need_blocks > rep.free_blocks {
                break;
            }
            let mut s = rep.waiting.pop_front().expect("front");
            rep.free_blocks -= need_blocks;
            s.blocks += need_blocks as u32;
            s.sched = need as u32;
            s.slot = rep.free_slots.pop().expect("a slot per running sequence up to the batch limit").0;
            budget = budget.saturating_sub(need);
            let rec = &mut records[s.req as usize];
            if !rec.scheduled.is_finite() {
                rec.scheduled = now_s;
                *n_queued -= 1;
            }
            rep.running.push(s);
        }
    }
    let mut b = Batch { n_decode: 0, decode_kv: 0, decode_kv_max: 0, decode_slot_span: 0, rows: 0 };
    for s in rep.running.iter().filter(|s| s.sched > 0) {
        if s.computed < s.target {
            chunks.push(Chunk { q: s.sched, c: s.computed });
            if s.computed + s.sched >= s.target {
                b.rows += 1;
            }
        } else {
            b.n_decode += 1;
            b.decode_kv += s.computed as u64;
            b.decode_kv_max = b.decode_kv_max.max(s.computed as u64);
            b.decode_slot_span = b.decode_slot_span.max(s.slot as u64 + 1);
            b.rows += 1;
        }
    }
    if b.n_decode == 0 && chunks.is_empty() {
        return None;
    }
    Some(b)
}
