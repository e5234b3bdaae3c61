//! The serving event loop: arrivals routed to replicas, an iteration started on a replica whenever
//! it is idle and its scheduler picks a batch, its tokens out when the iteration ends, and, when
//! disaggregated, each prefilled request's KV sent on to the decode pool. The loop owns time and
//! the replicas; `scheduler` picks batches, `kv` keeps the blocks, `cost` prices iterations and
//! `metrics` records what happened.

use super::arrivals::{Arrival, Rng};
use super::cost::{self, Chunk, IterCost, IterTime, KvRoom, SpreadKind};
use super::kv::{blocks_for, KvCache};
use super::metrics::{IterationRecord, Metrics, PoolStats, ServeResult};
use super::scheduler::{self, Batch, Decisions, Queues, Scheduler, Seq};
use super::{iteration_cost, CudaGraphs, DecodeAttention, Deployment, Pool, Role, Routing, RunOptions, SchedConfig, ServeError};
use std::collections::VecDeque;

use crate::des::{EventQueue, SimTime};
use crate::units::{Seconds, Watts};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    /// Request `i` (of the arrivals) arrives.
    Arrival(u32),
    /// The iteration of this replica ends.
    IterationDone(u32),
    /// This request's KV, prefilled, arrives at the decode pool.
    Handoff(u32),
}

struct Replica {
    pool: usize,
    queues: Queues,
    kv: KvCache,
    scheduler: Box<dyn Scheduler>,
    /// State of its iteration-time spread draws (see [`cost::IterationSpread`]).
    spread_z: f64,
    busy: bool,
    /// Of the current iteration, the host time after its tokens are out (a graph engine's loop
    /// between iterations): the replica is busy, its tokens are stamped before it.
    iter_tail_s: f64,
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

impl<'a> PoolState<'a> {
    /// Pool `pi` of the deployment, its replicas added to `replicas`: checks its knobs, sizes its
    /// KV cache and sets up its iteration pricer.
    fn new(pi: usize, p: &'a Pool, replicas: &mut Vec<Replica>) -> Result<PoolState<'a>, ServeError> {
        if p.n_replicas == 0 || p.sched.max_batch == 0 || p.sched.token_budget == 0 || p.sched.block_size == 0 {
            return Err(ServeError::Invalid(format!("pool `{}`: replicas, max batch, token budget and block size must be positive", p.role.name())));
        }
        let cost = iteration_cost(p)?;
        // The transients are one micro-batch's: sized at the configured limits.
        // TensorRT-LLM without CUDA graphs is its TensorRT-engine flow: every TP rank holds the
        // whole embedding table (`cost::tensorrt_engine_embedding_bytes`).
        let engine_flow = p.scenario.workload.stack == crate::workload::Stack::Trtllm && p.sched.cuda_graphs.is_none();
        let extra = if engine_flow { cost::tensorrt_engine_embedding_bytes(&p.scenario) } else { 0.0 };
        let room =
            cost::kv_room_with(&p.scenario, p.sched.token_budget as u64, p.sched.max_batch as u64, p.sched.gpu_memory_utilization, p.sched.kv_sizing, extra);
        // With pipelined micro-batches the limits hold per micro-batch: the replica's scheduler
        // runs up to `microbatches` times as many sequences and tokens per period.
        // Under attention DP (`Pool::attention_dp_ranks`) each rank has its own limits and its own
        // KV cache (TensorRT-LLM's max_batch_size and max_num_tokens hold per rank): the instance
        // holds `ranks` times as many sequences, tokens and blocks, pooled here.
        let ranks = p.attention_dp_ranks().min(u32::MAX as u64) as u32;
        let mb = (cost.microbatches().min(u32::MAX as u64) as u32).saturating_mul(ranks);
        let sched = SchedConfig { max_batch: p.sched.max_batch.saturating_mul(mb), token_budget: p.sched.token_budget.saturating_mul(mb), ..p.sched };
        let total_blocks = (room.cache_bytes / (room.bytes_per_token * sched.block_size as f64)).floor() as u64 * ranks as u64;
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
            max_batch: sched.max_batch,
            token_budget: sched.token_budget,
            kv_blocks_per_replica: total_blocks,
            kv_tokens_per_replica: total_blocks * sched.block_size as u64,
            kv_bytes_per_token_per_gpu: room.bytes_per_token,
            kv_cache_bytes_per_gpu: room.cache_bytes,
            ..PoolStats::default()
        };
        let mut ids = Vec::new();
        for _ in 0..p.n_replicas {
            ids.push(replicas.len());
            replicas.push(Replica {
                pool: pi,
                queues: Queues::default(),
                kv: KvCache::new(total_blocks, sched.block_size, sched.max_batch),
                scheduler: scheduler::for_config(&sched),
                spread_z: 0.0,
                busy: false,
                iter_tail_s: 0.0,
            });
        }
        let spread = p.sched.iteration_spread.then(|| cost::iteration_spread(p.scenario.workload.stack)).flatten();
        Ok(PoolState { role: p.role, sched, cost, room, total_blocks, gpus: p.gpus_per_replica(), replicas: ids, rr: 0, stats, spread })
    }
}

/// Run the simulation of `deployment` serving `arrivals` (sorted by time).
pub fn simulate(deployment: &Deployment, arrivals: &[Arrival], opts: &RunOptions) -> Result<ServeResult, ServeError> {
    simulate_with_progress(deployment, arrivals, opts, &mut |_| {})
}

/// Arrivals handled between two calls of a progress callback.
pub const PROGRESS_STEP: u32 = 4096;

/// [`simulate`], calling `progress(n)` each time another `n` arrivals have been handled (every
/// [`PROGRESS_STEP`] of them; a progress bar's ticks, out of `arrivals.len()`).
pub fn simulate_with_progress(
    deployment: &Deployment,
    arrivals: &[Arrival],
    opts: &RunOptions,
    progress: &mut dyn FnMut(u64),
) -> Result<ServeResult, ServeError> {
    check(deployment, opts)?;
    let mut replicas = Vec::new();
    let mut pools = Vec::new();
    for (pi, p) in deployment.pools.iter().enumerate() {
        pools.push(PoolState::new(pi, p, &mut replicas)?);
    }
    let mut engine = Engine {
        arrivals,
        routing: deployment.routing,
        pools,
        replicas,
        queue: EventQueue::new(),
        metrics: Metrics::new(arrivals, opts),
        // Iteration-time spread draws: their own seeded stream, so runs are deterministic.
        spread_rng: Rng::new(0x5EED_0F17 ^ opts.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
        net_bw: deployment.pools[0].scenario.system.network_bandwidth_per_gpu().value(),
        chunks: Vec::new(),
        decisions: Decisions::default(),
        frontend_s: opts.frontend_s.max(0.0),
        max_concurrency: opts.max_concurrency.unwrap_or(u32::MAX).max(1),
        in_flight: 0,
        held: std::collections::VecDeque::new(),
        released_to: Vec::new(),
        next_arrival_s: arrivals.first().map_or(f64::INFINITY, |a| a.at + opts.frontend_s.max(0.0)),
        decode_runs: !opts.every_iteration && deployment.pools.len() == 1 && (opts.max_concurrency.is_none() || deployment.pools[0].n_replicas == 1),
    };
    let stop = arrivals.last().map_or(0.0, |a| a.at) + opts.drain_s;
    engine.run(if stop.is_finite() { SimTime::from_seconds(Seconds::new(stop)) } else { SimTime(u64::MAX) }, progress);

    let Engine { pools, metrics, .. } = engine;
    let horizon = metrics.horizon_s();
    let stats = pools
        .into_iter()
        .map(|mut p| {
            let replica_s = horizon * p.replicas.len() as f64;
            p.stats.idle_energy_j = p.cost.idle_power().value() * p.gpus as f64 * (replica_s - p.stats.busy_s).max(0.0);
            p.stats
        })
        .collect();
    let n_gpus = deployment.n_gpus();
    let system = &deployment.pools[0].scenario.system;
    let n_nodes = (n_gpus as f64 / system.gpus_per_node as f64).ceil();
    Ok(metrics.into_result(stats, n_gpus, system.host_power_per_node.value.value() * n_nodes * horizon, system.pue.value))
}

/// The deployment's shape and the options, before any pool is built.
fn check(deployment: &Deployment, opts: &RunOptions) -> Result<(), ServeError> {
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
    Ok(())
}

struct Engine<'a> {
    arrivals: &'a [Arrival],
    routing: Routing,
    pools: Vec<PoolState<'a>>,
    replicas: Vec<Replica>,
    queue: EventQueue<Event>,
    metrics: Metrics,
    spread_rng: Rng,
    /// Bytes per second a prefilled request's KV moves at to the decode pool.
    net_bw: f64,
    /// Scratch: the prefill chunks of the batch being started, and its scheduler's decisions.
    chunks: Vec<Chunk>,
    decisions: Decisions,
    /// The front end's time per request (`RunOptions::frontend_s`).
    frontend_s: f64,
    /// The client's concurrency limit (`RunOptions::max_concurrency`; `u32::MAX`: none), the
    /// requests it has in flight, those it holds back until one finishes (in arrival order), and
    /// the replicas that requests released this event went to.
    max_concurrency: u32,
    in_flight: u32,
    held: std::collections::VecDeque<u32>,
    released_to: Vec<usize>,
    /// When the next arrival reaches the engine (infinite when none is left).
    next_arrival_s: f64,
    /// Decode runs may be taken as one event (`RunOptions::every_iteration` off and the
    /// deployment one pool, without a client limit across replicas).
    decode_runs: bool,
}

impl Engine<'_> {
    /// Handle events in time order until none is left or the next is after `stop`.
    fn run(&mut self, stop: SimTime, progress: &mut dyn FnMut(u64)) {
        if let Some(first) = self.arrivals.first() {
            self.queue.push(SimTime::from_seconds(Seconds::new(first.at + self.frontend_s)), Event::Arrival(0));
        }
        while let Some((t, event)) = self.queue.pop() {
            if t > stop {
                break;
            }
            self.metrics.event(t);
            let now_s = t.0 as f64 * 1e-12;
            let woken = match event {
                Event::Arrival(i) => {
                    if (i + 1).is_multiple_of(PROGRESS_STEP) {
                        progress(PROGRESS_STEP as u64);
                    }
                    self.arrival(i, now_s)
                }
                Event::Handoff(req) => Some(self.handoff(req)),
                Event::IterationDone(rid) => Some(self.iteration_done(rid as usize, t, now_s)),
            };
            // Start an iteration on the replica the event touched, if it is idle and has work.
            if let Some(rid) = woken {
                self.start_iteration(rid, t, now_s);
            }
            // Requests a completion let the client send (its concurrency limit).
            while let Some(rid) = self.released_to.pop() {
                self.start_iteration(rid, t, now_s);
            }
        }
    }

    /// Request `i` arrives: queue the next arrival, and route this one to a replica of the first
    /// pool (returned), unless it can never fit a replica's cache.
    fn arrival(&mut self, i: u32, now_s: f64) -> Option<usize> {
        self.next_arrival_s = f64::INFINITY;
        if let Some(next) = self.arrivals.get(i as usize + 1) {
            self.next_arrival_s = next.at + self.frontend_s;
            self.queue.push(SimTime::from_seconds(Seconds::new(next.at + self.frontend_s)), Event::Arrival(i + 1));
        }
        if self.in_flight >= self.max_concurrency {
            self.held.push_back(i);
            return None;
        }
        self.send(i, now_s)
    }

    /// Request `i` reaches the engine at `now_s` (counted in flight): routed to a replica of the
    /// first pool (returned), unless it can never fit a replica's cache.
    fn send(&mut self, i: u32, now_s: f64) -> Option<usize> {
        let r = self.arrivals[i as usize];
        // A request whose whole context cannot fit one replica's cache never finishes.
        let fits = self.pools.iter().all(|p| blocks_for((r.input_len + r.output_len) as u64, p.sched.block_size as u64) <= p.total_blocks);
        self.metrics.arrival(i, now_s, !fits);
        if !fits {
            return None;
        }
        self.in_flight += 1;
        let rid = route(&mut self.pools[0], &self.replicas, self.routing);
        self.replicas[rid].queues.waiting.push_back(Seq::new(i, r.input_len, r.output_len));
        Some(rid)
    }

    /// The KV of prefilled request `req` arrives at the decode pool: route it to a replica
    /// (returned).
    fn handoff(&mut self, req: u32) -> usize {
        let rid = route(&mut self.pools[1], &self.replicas, self.routing);
        let rec = self.metrics.request(req);
        let seq = Seq::prefilled(req, rec.input_len, rec.output_len);
        self.replicas[rid].queues.waiting.push_back(seq);
        rid
    }

    /// Replica `rid`'s iteration ends at `t`: its sequences take their tokens; finished ones (and,
    /// in a prefill pool, prefilled ones, sent on to the decode pool) leave with their blocks.
    /// Returns the replica.
    fn iteration_done(&mut self, rid: usize, t: SimTime, now_s: f64) -> usize {
        /// `Seq::target` of a sequence that leaves the replica.
        const GONE: u32 = u32::MAX;
        let rep = &mut self.replicas[rid];
        let pool = &self.pools[rep.pool];
        rep.busy = false;
        let tok_s = now_s - rep.iter_tail_s;
        let (mut tokens, mut completions) = (0u64, 0u64);
        let mut handoffs: Vec<(u32, f64)> = Vec::new();
        let (front, back) = rep.queues.running.as_mut_slices();
        for part in [front, back] {
            for s in part.iter_mut() {
                if s.sched == 0 {
                    continue;
                }
                s.computed += s.sched;
                s.sched = 0;
                if s.computed < s.target {
                    continue;
                }
                s.generated += 1;
                tokens += 1;
                let last = s.generated >= s.output_len;
                // Only a request's first and last tokens touch its record (a token in between only
                // counts, below): at a large batch the records are the loop's cache misses.
                if s.generated == 1 || last {
                    self.metrics.token(s.req, tok_s, last);
                }
                if last {
                    completions += 1;
                    rep.kv.release(s);
                    s.target = GONE;
                } else if pool.role == Role::Prefill {
                    let kv_bytes = pool.room.bytes_per_token * s.computed as f64;
                    handoffs.push((s.req, kv_bytes / self.net_bw));
                    rep.kv.release(s);
                    s.target = GONE;
                }
            }
        }
        // Those that leave are mostly the oldest (the front): dropped from the front without
        // moving the rest, then any others.
        let (mut gone, front) = (completions as usize + handoffs.len(), rep.queues.running.iter().take_while(|s| s.target == GONE).count());
        rep.queues.running.drain(..front);
        gone -= front;
        if gone > 0 {
            rep.queues.running.retain(|s| s.target != GONE);
        }
        self.metrics.iteration_done(now_s, tokens, completions);
        // Each completion frees a slot of the client's concurrency limit: it sends the next held
        // request now (sent now: its latency counts from here, as a benchmark client's does).
        self.in_flight = self.in_flight.saturating_sub(completions as u32);
        while self.in_flight < self.max_concurrency {
            let Some(i) = self.held.pop_front() else { break };
            self.metrics.resent(i, now_s - self.frontend_s);
            if let Some(r) = self.send(i, now_s) {
                self.released_to.push(r);
            }
        }
        for (req, dt) in handoffs {
            self.queue.push(SimTime(t.0 + SimTime::from_seconds(Seconds::new(dt)).0), Event::Handoff(req));
        }
        rid
    }

    /// If replica `rid` is idle, let its scheduler pick a batch and start the iteration.
    fn start_iteration(&mut self, rid: usize, t: SimTime, now_s: f64) {
        let rep = &mut self.replicas[rid];
        if rep.busy {
            return;
        }
        let pool = &mut self.pools[rep.pool];
        self.decisions.clear();
        rep.scheduler.schedule(&mut rep.queues, &mut rep.kv, &pool.sched, &mut self.decisions);
        for &req in &self.decisions.preempted {
            self.metrics.preempted(req, &mut pool.stats);
        }
        for &req in &self.decisions.admitted {
            self.metrics.admitted(req, now_s);
        }
        let Some(batch) = rep.scheduler.batch(&rep.queues.running, &mut self.chunks) else {
            return;
        };
        let mut priced = price_iteration(pool, &batch, &self.chunks);
        if let Some(spread) = &pool.spread {
            priced.it.time = priced.it.time * spread.factor(&mut rep.spread_z, self.spread_rng.normal(), priced.kind);
        }
        // A decode run: when nothing can change the running batch before its first completion,
        // the iterations up to it are one event (see `decode_run`).
        let mut run_len = 1;
        if self.decode_runs
            && pool.spread.is_none()
            && !self.metrics.records_iterations()
            && self.decisions.admitted.is_empty()
            && self.decisions.preempted.is_empty()
        {
            let limit_s = self.next_arrival_s.min(self.metrics.next_bin_edge(now_s));
            if let Some((k, it, tail)) = decode_run(pool, &rep.queues.running, &batch, &self.chunks, priced.it, now_s, limit_s) {
                // The first k - 1 iterations' tokens: none is a request's first or last.
                for s in rep.queues.running.iter_mut() {
                    s.computed += (k - 1) as u32;
                    s.generated += (k - 1) as u32;
                }
                self.metrics.tokens(now_s, (k - 1) * batch.n_decode);
                priced.it = it;
                priced.tail = tail;
                run_len = k;
            }
        }
        let dur = priced.it.time.value();
        rep.busy = true;
        rep.iter_tail_s = priced.tail.min(dur);
        let record = IterationRecord {
            start_s: now_s,
            replica: rid as u32,
            n_decode: batch.n_decode * run_len,
            decode_kv: batch.decode_kv,
            decode_kv_max: batch.decode_kv_max,
            decode_slot_span: batch.decode_slot_span,
            n_chunks: self.chunks.len() as u64,
            prefill_tokens: self.chunks.iter().map(|c| c.q as u64).sum(),
            graph_rows: priced.graph.map_or(0, |g| g.0),
            graph_keys: priced.graph.map_or(0, |(rows, kv)| kv / rows + 1),
            time_s: dur,
        };
        let running = (batch.n_decode + self.chunks.len() as u64) as u32;
        self.metrics.iteration_started(&mut pool.stats, record, running, rep.kv.occupancy(), priced.it.gpu_power.value(), pool.gpus);
        pool.stats.iterations += run_len - 1;
        let end = SimTime(t.0 + SimTime::from_seconds(priced.it.time).0.max(1));
        self.queue.push(end, Event::IterationDone(rid as u32));
    }
}

/// A decode run: `k` >= 2 iterations of the same running batch, taken as one event, when nothing
/// can change the batch before the first of its sequences finishes. That holds for TensorRT-LLM's
/// in-flight batching (`GUARANTEED_NO_EVICT`: every running sequence holds the blocks of its
/// whole output, so a waiting one is admitted only once a completion frees blocks or a batch
/// slot) when the iteration only decodes, every running sequence decodes, nobody was admitted,
/// and no arrival or time-series bin edge comes before the run ends (`limit_s`). Each iteration
/// then differs from the last only by one more cached token per sequence: the run's time is
/// Simpson's rule over the iterations priced at its first, middle and last context (exact where
/// the time is quadratic in the context, as the paged attention's linear reads are), its power
/// the middle one's. Returns `k` (the last iteration is the one with the completion), the run as
/// one iteration, and the host time after the last one's tokens; `None` when no run of 2 or more
/// fits.
fn decode_run(
    pool: &mut PoolState,
    running: &VecDeque<Seq>,
    batch: &Batch,
    chunks: &[Chunk],
    first: IterTime,
    now_s: f64,
    limit_s: f64,
) -> Option<(u64, IterTime, f64)> {
    if pool.sched.policy != super::engines::Policy::TrtllmInflight || !chunks.is_empty() || running.len() as u64 != batch.n_decode || batch.n_decode == 0 {
        return None;
    }
    // Iterations to the first completion, its own included.
    let to_finish = running.iter().map(|s| s.output_len.saturating_sub(s.generated) as u64).min()?;
    let at = |pool: &mut PoolState, j: u64| {
        let b = Batch { decode_kv: batch.decode_kv + j * batch.n_decode, decode_kv_max: batch.decode_kv_max + j, ..*batch };
        price_iteration(pool, &b, chunks)
    };
    let mut k = to_finish;
    if k < 2 {
        return None;
    }
    let mut last = at(pool, k - 1);
    // Within the limit: every iteration is at most the longer of the first and the last.
    let longest = first.time.value().max(last.it.time.value());
    let room = ((limit_s - now_s) / longest).floor();
    if room < k as f64 {
        k = room.max(0.0) as u64;
        if k < 2 {
            return None;
        }
        last = at(pool, k - 1);
    }
    let mid = at(pool, (k - 1) / 2);
    let mid_t = if (k - 1) % 2 == 0 { mid.it.time.value() } else { 0.5 * (mid.it.time.value() + at(pool, k / 2).it.time.value()) };
    let total = k as f64 * (first.time.value() + 4.0 * mid_t + last.it.time.value()) / 6.0;
    Some((k, IterTime { time: Seconds::new(total), gpu_power: mid.it.gpu_power }, last.tail))
}

fn route(pool: &mut PoolState, replicas: &[Replica], routing: Routing) -> usize {
    match routing {
        Routing::RoundRobin => {
            let r = pool.replicas[pool.rr % pool.replicas.len()];
            pool.rr += 1;
            r
        }
        Routing::LeastLoaded => *pool.replicas.iter().min_by_key(|&&r| (replicas[r].queues.len(), r)).expect("a pool has replicas"),
    }
}

/// An iteration as priced, before the spread: its time and power, the spread table that applies,
/// the host time after its tokens are out, and the decode graph it replays (rows, cached tokens).
struct PricedIteration {
    it: IterTime,
    kind: SpreadKind,
    tail: f64,
    graph: Option<(u64, u64)>,
}

/// Price `batch` (with its prefill `chunks`) on a replica of `pool`: eagerly, or with the pool's
/// CUDA graphs where they apply.
fn price_iteration(pool: &mut PoolState, batch: &Batch, chunks: &[Chunk]) -> PricedIteration {
    let sched = pool.sched;
    // Padded decode attention reads every decoder's cache up to the longest context; the
    // reference server's batched matmuls read every slot up to the highest decoder's.
    let kv = match sched.decode_attention {
        DecodeAttention::Paged => batch.decode_kv,
        DecodeAttention::Padded => batch.n_decode * batch.decode_kv_max,
        DecodeAttention::PaddedMatmul => batch.decode_slot_span * batch.decode_kv_max,
    };
    // Graphs run the iteration with prefill graphs, or without them when it only decodes.
    // A graph holds one micro-batch (pipelined: 1/mb of the decoders), of one attention-DP rank.
    let per_graph = batch.n_decode.div_ceil(pool.cost.microbatches().max(1) * pool.cost.attention_dp_ranks());
    let graphs = sched.cuda_graphs.filter(|g| g.prefill_step.is_some() || (batch.n_decode > 0 && chunks.is_empty() && per_graph <= g.max_batch as u64));
    let graph = graphs.filter(|_| batch.n_decode > 0).map(|g| g.padded(sched.decode_attention, sched.max_batch as u64, batch));
    let (it, kind, tail) = match graphs {
        None => (pool.cost.iteration(batch.n_decode, kv, chunks, batch.rows), if chunks.is_empty() { SpreadKind::DecodeOnly } else { SpreadKind::Mixed }, 0.0),
        Some(g) => graph_iteration(&mut pool.cost, g, sched.token_budget, graph, chunks, batch.n_decode + chunks.len() as u64),
    };
    PricedIteration { it, kind, tail, graph }
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
    seqs: u64,
) -> (IterTime, SpreadKind, f64) {
    let mut passes = Vec::with_capacity(chunks.len() + 1);
    if let Some((rows, kv)) = decode {
        passes.push(cost.graph_pass(rows, kv, &[], rows));
    }
    let mut kind = SpreadKind::Graph;
    for c in chunks {
        match g.prefill_step {
            Some(step) if c.c == 0 => {
                let q = (c.q.div_ceil(step.max(1)) * step.max(1)).min(token_budget.max(c.q));
                passes.push(cost.graph_pass(0, 0, &[Chunk { q, c: 0 }], 1));
            }
            _ => {
                kind = SpreadKind::Mixed;
                passes.push(cost.later_chunk_pass(*c, 1));
            }
        }
    }
    let busy: f64 = passes.iter().map(|p| p.time.value()).sum();
    let energy: f64 = passes.iter().map(|p| p.time.value() * p.gpu_power.value()).sum();
    let tail = cost.graph_host(seqs).value();
    (IterTime { time: Seconds::new(busy + tail), gpu_power: Watts::new(energy / busy.max(1e-12)) }, kind, tail)
}
