//! The largest inputs the engines take, in one place, and the estimates of a run's work that are
//! checked against them before the run starts (by `gpuplan-config` and the binary, which name the
//! flag or key in their messages). Each limit keeps a run under about 20 s and 4 GiB on one
//! core of a 2024 server (README.md "Limits" has the measured figures); the values are far above
//! any deployment or training step the shipped scenarios describe.

/// `gpuplan serve` (and `check` / `plan --mode serve` on a serving scenario): the request-level
/// simulation.
pub mod serve {
    /// Requests of one run, summed over its replications (`--qps` x `--duration-s`, or a trace's
    /// rows): every request keeps a record (arrival, lengths, times) until the run is summarized,
    /// and pooled percentiles sort them all: about 100 bytes each with the event queue and
    /// scheduler state (measured: 2 M short requests in 200 MiB and 1.5 s).
    pub const MAX_REQUESTS: u64 = 2_000_000;
    /// Output tokens of one run, summed over its replications (requests x mean `--output-len`):
    /// each one is a decode step of some sequence in some iteration, the event loop's unit of
    /// work. Batched, it runs about 50-80 M/s; one sequence per iteration (a light load on many
    /// replicas), about 2.6 M/s, the worst case, so this bounds the run to about 12 s.
    pub const MAX_OUTPUT_TOKENS: f64 = 30e6;
    /// With `--iterations-csv`, output tokens (an upper bound on iterations) of the run: every
    /// iteration keeps a record (about 100 bytes, and as much again as CSV text).
    pub const MAX_RECORDED_OUTPUT_TOKENS: f64 = 10e6;
    /// Replicas of a deployment (`--gpus` / (tp x pp)): each holds a KV-cache map and queues and
    /// runs its own iterations; the largest inference clusters run a few thousand.
    pub const MAX_REPLICAS: u64 = 4096;
    /// Requests x replicas of one run: least-loaded routing scans every replica at each arrival
    /// (measured: 200 k requests on 16384 replicas, 3.3e9, took 16 s).
    pub const MAX_REQUEST_REPLICAS: f64 = 1e9;
    /// Coefficient of variation of gamma inter-arrival times (`--cv`): at cv = c the shape is
    /// 1/c^2, and beyond about 100 almost every gap underflows to zero (the whole load arrives
    /// in a few instants), which no measured trace shows (vLLM's `--burstiness` 0.1 is cv 3.2).
    pub const MAX_CV: f64 = 100.0;
    /// Replications (`--replications`): each one builds the deployment's pricers again; 1000
    /// steadies any tail percentile.
    pub const MAX_REPLICATIONS: u64 = 1000;
    /// Time-series bins of a run (`--duration-s` / `--bin-s`): 64 bytes each, kept per run.
    pub const MAX_BINS: f64 = 1e6;

    /// The work of one run: requests and output tokens, summed over its replications.
    #[derive(Debug, Clone, Copy, PartialEq)]
    pub struct Work {
        pub requests: f64,
        pub output_tokens: f64,
    }

    impl Work {
        /// `qps` for `duration_s` seconds, each request `mean_output` tokens out, `replications`
        /// times.
        pub fn generated(qps: f64, duration_s: f64, mean_output: f64, replications: u64) -> Work {
            let requests = qps * duration_s * replications as f64;
            Work { requests, output_tokens: requests * mean_output }
        }
        /// Which limit the work exceeds, if any (`None`: it may run); `record_iterations`: with a
        /// record per iteration kept.
        pub fn exceeded(&self, record_iterations: bool) -> Option<Exceeded> {
            // NaN (an unbounded estimate) exceeds every limit.
            let over = |x: f64, limit: f64| x.is_nan() || x > limit;
            if over(self.requests, MAX_REQUESTS as f64) {
                Some(Exceeded::Requests)
            } else if over(self.output_tokens, MAX_OUTPUT_TOKENS) {
                Some(Exceeded::OutputTokens(MAX_OUTPUT_TOKENS))
            } else if record_iterations && over(self.output_tokens, MAX_RECORDED_OUTPUT_TOKENS) {
                Some(Exceeded::OutputTokens(MAX_RECORDED_OUTPUT_TOKENS))
            } else {
                None
            }
        }
    }

    #[derive(Debug, Clone, Copy, PartialEq)]
    pub enum Exceeded {
        Requests,
        /// Over this limit on output tokens.
        OutputTokens(f64),
    }
}

/// `gpuplan simulate` (and `plan --rerank-des`): the discrete-event engine of one training step.
pub mod sim {
    /// Events of one step (estimated before it runs: `EVENTS_PER_STEP` x the steps of every
    /// virtual stage's forward and backward lists x micro-batches; within 0.6-1.1x of the
    /// events run): measured 48 M events in 5.2 s and 1.8 GiB (llama-3-70b, pp 2 x vp 4), so
    /// this keeps a step under about 7 s and 2.5 GiB.
    pub const MAX_EVENTS: f64 = 60e6;
    /// With `--trace` / `--timeline`: each event leaves spans, and the Chrome trace's JSON takes
    /// about 1.2 KiB per event to build (measured: 2 M events in 7 s and 2.4 GiB).
    pub const MAX_TRACED_EVENTS: f64 = 2e6;
    /// Events per lowered step per micro-batch (its start and its end), for the estimate.
    pub const EVENTS_PER_STEP: f64 = 2.0;
    /// Micro-batches per step (`--global-batch` / (`--micro-batch` x dp)), checked before the
    /// schedule (two tasks per micro-batch and virtual stage) is built: a step of a million
    /// micro-batches is already far over `MAX_EVENTS` at one step per pass.
    pub const MAX_MICRO_BATCHES: u64 = 1_000_000;
    /// `simulate --per-rank --steps`: each step is a fresh straggler draw and its own run of the
    /// engine; 10,000 steps at the 16,384-GPU bench's 0.1-1 s a step is hours already.
    pub const MAX_PER_RANK_STEPS: u32 = 10_000;
    /// `simulate --per-rank`: ranks held as arrays (fault factors, classes, group signatures,
    /// about 100 bytes each while classes are refined): 8 M ranks is under 1 GiB.
    pub const MAX_PER_RANK_RANKS: u64 = 8 << 20;
    /// `simulate --per-rank`: events of one step (per-stage events x classes). The per-rank
    /// engine ran 51.8 M events in 7.0 s of CPU and 173 MiB (131,072 GPUs, 2,176 classes:
    /// benches/RESULTS-per-rank.md), about 7 M events/s, so this keeps a step under about 30 s
    /// and 1 GiB.
    pub const MAX_PER_RANK_EVENTS: f64 = 200e6;
}

/// `--goodput`.
pub mod goodput {
    /// Hot spare nodes (`--spares`): Erlang's B takes one step per spare; the largest clusters
    /// have some 10^4-10^5 nodes, so a million spares is beyond any.
    pub const MAX_SPARES: u32 = 1_000_000;
}
