//! What a serving run reports, and the accumulator that fills it as the event loop runs: one
//! record per request (queueing, first token, finish, preemptions), per-pool totals, time-series
//! bins, the integrals of requests in the system and queued (Little's law), and optionally one
//! record per iteration.

use super::arrivals::Arrival;
use super::RunOptions;
use crate::des::SimTime;

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

/// The metrics of one run while it runs. The engine tells it what happened (an event's time,
/// arrivals, first schedulings, preemptions, tokens, iterations), in event order.
pub(super) struct Metrics {
    requests: Vec<RequestRecord>,
    iterations: Vec<IterationRecord>,
    record_iterations: bool,
    bins: Vec<Bin>,
    bin_s: f64,
    /// Requests in the system (arrived, not finished or rejected) and among them those not yet
    /// scheduled, since the last event.
    in_system: u64,
    queued: u64,
    in_system_area: f64,
    queued_area: f64,
    last_t: SimTime,
    events: u64,
    arrived: u64,
}

impl Metrics {
    pub(super) fn new(arrivals: &[Arrival], opts: &RunOptions) -> Metrics {
        let requests = arrivals
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
        Metrics {
            requests,
            iterations: Vec::new(),
            record_iterations: opts.record_iterations,
            bins: Vec::new(),
            bin_s: opts.bin_s,
            in_system: 0,
            queued: 0,
            in_system_area: 0.0,
            queued_area: 0.0,
            last_t: SimTime::ZERO,
            events: 0,
            arrived: 0,
        }
    }

    pub(super) fn request(&self, req: u32) -> &RequestRecord {
        &self.requests[req as usize]
    }

    /// The time-series bin of time `t_s`, added when the run gets there.
    fn bin(&mut self, t_s: f64) -> &mut Bin {
        let i = (t_s / self.bin_s).floor().max(0.0) as usize;
        if self.bins.len() <= i {
            self.bins.resize(i + 1, Bin::default());
        }
        &mut self.bins[i]
    }

    /// An event at `t`: count it, and integrate the requests in the system and queued over the
    /// time since the last event (Little's law).
    pub(super) fn event(&mut self, t: SimTime) {
        self.events += 1;
        if t > self.last_t {
            let dt = (t.0 - self.last_t.0) as f64 * 1e-12;
            let (in_system, queued) = (self.in_system as f64, self.queued as f64);
            self.in_system_area += in_system * dt;
            self.queued_area += queued * dt;
            let bin = self.bin(self.last_t.0 as f64 * 1e-12);
            bin.in_system_area += in_system * dt;
            bin.queued_area += queued * dt;
            self.last_t = t;
        }
    }

    /// Request `req`, held back by the client's concurrency limit, is sent at `sent_s`: its
    /// latencies count from then.
    pub(super) fn resent(&mut self, req: u32, sent_s: f64) {
        let rec = &mut self.requests[req as usize];
        rec.arrival = rec.arrival.max(sent_s);
    }

    /// Request `req` arrived at `now_s`; it is refused (`rejected`) or waits for its first
    /// scheduling.
    pub(super) fn arrival(&mut self, req: u32, now_s: f64, rejected: bool) {
        self.arrived += 1;
        self.bin(now_s).arrivals += 1;
        if rejected {
            self.requests[req as usize].rejected = true;
        } else {
            self.in_system += 1;
            self.queued += 1;
        }
    }

    /// A scheduler admitted `req` to a running batch (the first time ends its queueing).
    pub(super) fn admitted(&mut self, req: u32, now_s: f64) {
        let rec = &mut self.requests[req as usize];
        if !rec.scheduled.is_finite() {
            rec.scheduled = now_s;
            self.queued -= 1;
        }
    }

    /// A scheduler preempted `req` on a replica of the pool with `stats`.
    pub(super) fn preempted(&mut self, req: u32, stats: &mut PoolStats) {
        self.requests[req as usize].preemptions += 1;
        stats.preemptions += 1;
    }

    /// `req` got a token at `at_s` (its first sets the time to first token), the last one when
    /// `last`.
    pub(super) fn token(&mut self, req: u32, at_s: f64, last: bool) {
        let rec = &mut self.requests[req as usize];
        if !rec.first_token.is_finite() {
            rec.first_token = at_s;
        }
        if last {
            rec.finish = at_s;
        }
    }

    /// Whether every iteration is kept (`RunOptions::record_iterations`).
    pub(super) fn records_iterations(&self) -> bool {
        self.record_iterations
    }

    /// The time-series bin boundary after `t_s`.
    pub(super) fn next_bin_edge(&self, t_s: f64) -> f64 {
        ((t_s / self.bin_s).floor() + 1.0) * self.bin_s
    }

    /// `tokens` tokens out at `at_s` that are no request's first or last (the iterations of a
    /// decode run before its last).
    pub(super) fn tokens(&mut self, at_s: f64, tokens: u64) {
        self.bin(at_s).output_tokens += tokens;
    }

    /// An iteration ended at `now_s` with `tokens` new tokens, `completions` of them requests'
    /// last.
    pub(super) fn iteration_done(&mut self, now_s: f64, tokens: u64, completions: u64) {
        self.in_system -= completions;
        let bin = self.bin(now_s);
        bin.completions += completions;
        bin.output_tokens += tokens;
    }

    /// An iteration started (`it`) on a replica of the pool with `stats` (its `gpus` GPUs drawing
    /// `gpu_power_w` each), running `batch` sequences at KV-cache occupancy `occupancy`.
    pub(super) fn iteration_started(&mut self, stats: &mut PoolStats, it: IterationRecord, batch: u32, occupancy: f64, gpu_power_w: f64, gpus: u64) {
        let dur = it.time_s;
        if self.record_iterations {
            self.iterations.push(it);
        }
        stats.iterations += 1;
        stats.busy_s += dur;
        stats.batch_area += batch as f64 * dur;
        stats.kv_area += occupancy * dur;
        stats.max_batch_seen = stats.max_batch_seen.max(batch);
        stats.max_kv_occupancy = stats.max_kv_occupancy.max(occupancy);
        stats.busy_energy_j += gpu_power_w * gpus as f64 * dur;
        stats.decode_tokens += it.n_decode;
        stats.prefill_tokens += it.prefill_tokens;
        let bin = self.bin(it.start_s);
        bin.batch_area += batch as f64 * dur;
        bin.kv_area += occupancy * dur;
        bin.busy_s += dur;
    }

    /// The time of the last event handled, in seconds: the run's horizon.
    pub(super) fn horizon_s(&self) -> f64 {
        self.last_t.0 as f64 * 1e-12
    }

    /// The result, with the pools' totals (idle energy included) and the deployment's GPUs and
    /// host energy.
    pub(super) fn into_result(self, pools: Vec<PoolStats>, n_gpus: u64, host_energy_j: f64, pue: f64) -> ServeResult {
        let in_flight_at_end = self.requests[..self.arrived as usize].iter().filter(|r| !r.rejected && !r.finished()).count() as u64;
        ServeResult {
            horizon_s: self.horizon_s(),
            iterations: self.iterations,
            requests: self.requests,
            pools,
            bins: self.bins,
            bin_s: self.bin_s,
            in_system_area: self.in_system_area,
            queued_area: self.queued_area,
            arrived: self.arrived,
            in_flight_at_end,
            events: self.events,
            host_energy_j,
            n_gpus,
            pue,
        }
    }
}
