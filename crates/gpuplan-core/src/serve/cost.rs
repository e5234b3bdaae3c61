//! Time of one continuous-batching iteration on one replica, from the same op lists, lowering,
//! overlap rules, CPU-launch floor and power model as `analytic::predict` (one source of truth).
//!
//! An iteration runs one forward over `N` tokens: some sequences decode one token each (with `k`
//! cached tokens), some prefill a chunk of `q` prompt tokens on top of `c` already cached. The
//! token-parallel part (GEMMs with `m = N`, norms, activations, TP collectives, embedding) is the
//! op list `workload::forward_ops` builds for `N` tokens; the LM head runs over the sequences that
//! sample a token; attention is priced per part: one flash-attention op for the decoding sequences
//! (`b` sequences, `k + 1` keys each) and one per prefill chunk (`q` queries at the end of `c + q`
//! keys, causal). Each part is lowered by `CostModel::lower` at the sustained clock, stages add
//! up as in `analytic` (per stage: GPU time or the CPU's launch time, whichever is longer; plus
//! pipeline sends), then `power::solve` settles the clock for the iteration's activity mix and
//! compute-bound time shrinks by its speedup.
//!
//! For a decode-only iteration this equals `predict --mode decode` at that batch and `kv_len`; for
//! one whole prompt it equals `predict --mode prefill` at batch 1 up to the final norm, which here
//! runs over the sampled rows only (the tests hold both).
//!
//! Memoized: the token-parallel parts per `N` and the LM head per row count (exact keys); the
//! power solution per activity mix, quantized to 1/4096 of the iteration.

use std::collections::HashMap;

use crate::analytic::{self, exposed_time};
use crate::cost::CostModel;
use crate::memory;
use crate::power::{self, Activity};
use crate::scenario::Scenario;
use crate::step::{self, PredictError};
use crate::units::{Seconds, Watts};
use crate::workload::{forward_ops, Mode, Op, OpKind, Workload};

/// Time by activity of one pass at the sustained clock.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Parts {
    pub compute: f64,
    /// Of `compute`, the part a faster clock does not shorten (the compute-bound kernels'
    /// `Step::Kernel::fixed`). The power model still counts it as compute.
    pub compute_fixed: f64,
    pub memory: f64,
    pub comm: f64,
    pub cpu: f64,
}

impl Parts {
    fn add(&mut self, o: &Parts, k: f64) {
        self.compute += o.compute * k;
        self.compute_fixed += o.compute_fixed * k;
        self.memory += o.memory * k;
        self.comm += o.comm * k;
        self.cpu += o.cpu * k;
    }
    fn gpu(&self, speedup: f64) -> f64 {
        let fixed = self.compute_fixed.min(self.compute);
        fixed + (self.compute - fixed) / speedup + self.memory + self.comm
    }
}

/// Host time a serving engine spends per iteration beyond launching the op list's kernels: input
/// preparation, scheduling and bookkeeping between iterations (the GPU waits), and, per layer, the
/// host side of its attention for the decoders and for each prefill chunk (the Python that slices,
/// masks and dispatches them: it overlaps the GPU as kernel launches do).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostOverhead {
    pub per_iteration: Seconds,
    /// Per sequence in the iteration (building its inputs, reading its token back), serial.
    pub per_sequence: Seconds,
    pub per_layer_decode: Seconds,
    pub per_layer_chunk: Seconds,
    /// Share of the shorter of host and GPU time hidden under the longer: 1 = the host launches
    /// ahead of the GPU (time per stage = the longer), 0 = it waits for each kernel (the sum).
    pub gpu_overlap: f64,
    /// Multiplies all host time (the kernels' launches and the terms above): how much slower this
    /// node's host runs the engine than the host the defaults were fitted on (1 = as fast).
    pub time_scale: f64,
    /// Host time between an iteration that replays CUDA graphs and the next (the engine's loop:
    /// bookkeeping, scheduling, the next inputs), serial with the GPU, after the iteration's tokens
    /// are out; the graphs' kernels cost no launches.
    pub graph_per_iteration: Seconds,
    /// Host time per sequence of a graph iteration, serial with the GPU as
    /// `graph_per_iteration` (an engine whose loop handles each request in Python).
    pub graph_per_sequence: Seconds,
    /// GPU time per layer of a replayed graph beyond what its op list's kernels are priced at
    /// (their bytes and FLOPs plus the GPU's in-graph floor per kernel,
    /// [`CostModel::in_cuda_graph`]): the small kernels' own latency above that floor and the
    /// eager forward's kernels the op list does not list, back to back in the graph. Not host
    /// time: `time_scale` leaves it alone. At no cached tokens read; see
    /// `graph_per_layer_per_cache_gb`.
    pub graph_per_layer: Seconds,
    /// How much less `graph_per_layer` is per GB of KV cache a decode graph's attention reads in
    /// one layer (the per-layer term never below zero): the graph's small kernels run beside the
    /// unfused attention's long cache reads instead of after them, and those reads run faster
    /// than the profile's decode-regime rate prices them. Zero: one term per layer for every shape.
    pub graph_per_layer_per_cache_gb: Seconds,
}

impl Default for HostOverhead {
    /// None: the op list's launches only, fully overlapped with the GPU.
    fn default() -> Self {
        HostOverhead {
            per_iteration: Seconds::ZERO,
            per_sequence: Seconds::ZERO,
            per_layer_decode: Seconds::ZERO,
            per_layer_chunk: Seconds::ZERO,
            gpu_overlap: 1.0,
            time_scale: 1.0,
            graph_per_iteration: Seconds::ZERO,
            graph_per_sequence: Seconds::ZERO,
            graph_per_layer: Seconds::ZERO,
            graph_per_layer_per_cache_gb: Seconds::ZERO,
        }
    }
}

impl HostOverhead {
    /// The stack's default and where it comes from. Only `torch-eager` has one: fitted on the fit
    /// split of the measured serving runs of the project's reference server
    /// (calibration/runs/serve/, scenarios/workloads/serve_llama.py on one H200, 2026-11-22, by
    /// scripts/fit_serve_overhead.py). Other stacks: none measured, zero.
    pub fn default_for(stack: crate::workload::Stack) -> (HostOverhead, &'static str) {
        match stack {
            crate::workload::Stack::TorchEager => (
                HostOverhead {
                    per_iteration: Seconds::us(EAGER_HOST_US[0]),
                    per_sequence: Seconds::us(EAGER_HOST_US[1]),
                    per_layer_decode: Seconds::us(EAGER_HOST_US[2]),
                    per_layer_chunk: Seconds::us(EAGER_HOST_US[3]),
                    gpu_overlap: EAGER_GPU_OVERLAP,
                    time_scale: 1.0,
                    graph_per_iteration: Seconds::us(GRAPH_US[0]),
                    graph_per_sequence: Seconds::ZERO,
                    graph_per_layer: Seconds::us(GRAPH_US[1]),
                    graph_per_layer_per_cache_gb: Seconds::us(GRAPH_US[2]),
                },
                "fitted: serving runs of scenarios/workloads/serve_llama.py on H200s (eager: one machine's fit split; CUDA graphs: the graph-fit split; calibration/runs/serve/FIT.md)",
            ),
            crate::workload::Stack::Trtllm => {
                let f = crate::cost::fitted::fitted();
                let [it, seq, layer] = f.trtllm_host_us;
                (
                    HostOverhead {
                        per_iteration: Seconds::us(it),
                        per_sequence: Seconds::us(seq),
                        per_layer_decode: Seconds::us(layer),
                        per_layer_chunk: Seconds::ZERO,
                        // The same loop runs between graph replays; a replay enqueues no layers.
                        // Graphs are the PyTorch backend's: its Python loop's per-request time.
                        graph_per_iteration: Seconds::us(it),
                        graph_per_sequence: Seconds::us(f.trtllm_pytorch_seq_us),
                        ..HostOverhead::default()
                    },
                    "fitted: the fit split of the TensorRT-LLM dev rows (cost::fitted::TRTLLM_HOST_US, TRTLLM_PYTORCH_SEQ_US)",
                )
            }
            _ => (HostOverhead::default(), "none measured for this stack: zero (set --host-overhead-us)"),
        }
    }

    /// The stack's default with what the scheduler configuration overrides, and its source.
    pub fn resolve(sched: &super::SchedConfig, stack: crate::workload::Stack) -> (HostOverhead, &'static str) {
        let (mut h, mut source) = HostOverhead::default_for(stack);
        if let Some(v) = sched.host_us {
            h.per_iteration = Seconds::us(v[0]);
            h.per_sequence = Seconds::us(v[1]);
            h.per_layer_decode = Seconds::us(v[2]);
            h.per_layer_chunk = Seconds::us(v[3]);
            source = "given";
        }
        if let Some(o) = sched.host_gpu_overlap {
            h.gpu_overlap = o;
            source = "given";
        }
        if let Some(k) = sched.host_time_scale {
            h.time_scale = k;
            source = "given";
        }
        if let Some([it, layer, per_gb]) = sched.graph_us {
            h.graph_per_iteration = Seconds::us(it);
            h.graph_per_layer = Seconds::us(layer);
            h.graph_per_layer_per_cache_gb = Seconds::us(per_gb);
            source = "given";
        }
        (h, source)
    }
}

/// `torch-eager` share of host and GPU time that overlaps (see [`HostOverhead::gpu_overlap`]).
pub const EAGER_GPU_OVERLAP: f64 = 1.0;
/// `torch-eager` host overhead, microseconds: per iteration, per sequence, per layer with
/// decoders, per layer and prefill chunk. See [`HostOverhead::default_for`]; fitted together with
/// `--decode-attention padded-matmul` (how the reference server attends).
pub const EAGER_HOST_US: [f64; 4] = [100.0, 0.0, 0.0, 200.0];
/// `torch-eager` iterations replaying CUDA graphs (`--cuda-graphs`): host time per iteration, us
/// ([`HostOverhead::graph_per_iteration`]); GPU time per layer beyond the op list at no cache read,
/// us ([`HostOverhead::graph_per_layer`]); and how much less that is per GB of KV cache the graph's
/// decode attention reads per layer, us per GB ([`HostOverhead::graph_per_layer_per_cache_gb`]).
/// Fitted on the graph-fit split of the serving runs (H200 machines 5 and 7, decode and full
/// graphs, priced with the h200-sxm-1x profile; calibration/runs/serve/FIT.md,
/// `scripts/fit_serve_graphs.py --counted-bytes 82`): the server's loop between a graph iteration
/// and the next takes 326 us on average (median 255); the measured minus simulated median of each
/// decode graph shape and of each prefill graph length (kernels at the GPU's in-graph floor), per
/// layer, weighted least squares on the cache GB the shape reads per layer: 116.1 us less 84.5 us
/// per GB (decode shapes: 113 us per layer up to 0.1 GB for the 1B model, 110-119 for the 8B, down
/// to 90 and 50-80 past 0.25 GB; the unfused attention's cache reads run at ~3.4 TB/s where the
/// profile's decode rows price them at 2.65). With the h200-sxm-1x-b profile: 114.6 and 80.3.
pub const GRAPH_US: [f64; 3] = [326.0, 116.1, 84.5];

/// Probabilities of [`EAGER_ITERATION_SPREAD`]'s quantiles.
pub const SPREAD_P: [f64; 11] = [0.0, 0.01, 0.05, 0.10, 0.25, 0.50, 0.75, 0.90, 0.95, 0.99, 0.999];
/// `torch-eager` iteration-time spread: quantiles (at [`SPREAD_P`]) of measured decode-only
/// iteration times over the median of their batch size (batches of 8), pooled over the fit runs of
/// calibration/runs/serve (6,435 iterations; scripts/fit_serve_overhead.py prints them). Above
/// p99.9 the table holds its last value.
pub const EAGER_ITERATION_SPREAD: [f64; 11] = [0.829, 0.893, 0.924, 0.942, 0.972, 1.0, 1.037, 1.099, 1.14, 1.328, 2.003];
/// The same for iterations with prefill chunks, over the median of their (batch of 8, prefill
/// tokens of 256) group with at least 5 iterations (525 iterations of the fit runs): wider.
pub const EAGER_MIXED_ITERATION_SPREAD: [f64; 11] = [0.682, 0.793, 0.885, 0.912, 0.96, 1.0, 1.063, 1.187, 1.437, 1.904, 2.971];
/// The same for decode-only iterations replaying a CUDA graph (`--cuda-graphs`), over the median
/// of their graph shape (slot span, padded context) with at least 5 iterations (40,960 iterations
/// of the graph-fit runs; scripts/fit_serve_graphs.py): narrow, the GPU sets their pace. (Their
/// lag-1 correlation, 0.68, is close to the eager one the draws share.)
pub const GRAPH_ITERATION_SPREAD: [f64; 11] = [0.97, 0.986, 0.991, 0.993, 0.997, 1.0, 1.006, 1.017, 1.026, 1.047, 1.233];

/// A stack's measured iteration-time spread: each simulated iteration's time is multiplied by a
/// factor drawn from `decode_only` (eager iterations without prefill chunks), `mixed` (eager, with
/// them) or `graph` (replaying CUDA graphs only), at a probability
/// that follows a Gaussian AR(1) process with lag-1 correlation `lag1` (a Gaussian copula: each
/// draw keeps its table's distribution, consecutive draws of a replica are correlated as measured).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IterationSpread {
    pub decode_only: &'static [f64; 11],
    pub mixed: &'static [f64; 11],
    /// Decode-only iterations replaying a CUDA graph.
    pub graph: &'static [f64; 11],
    pub lag1: f64,
}

/// Which of a spread's tables an iteration draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpreadKind {
    DecodeOnly,
    Mixed,
    Graph,
}

/// `torch-eager` lag-1 correlation of the normal scores of the decode-only iteration-time ratios
/// (see [`EAGER_ITERATION_SPREAD`]) of the fit runs: slow iterations come in runs.
pub const EAGER_SPREAD_LAG1: f64 = 0.62;

/// The measured spread of a stack; only torch-eager has one.
pub fn iteration_spread(stack: crate::workload::Stack) -> Option<IterationSpread> {
    (stack == crate::workload::Stack::TorchEager).then_some(IterationSpread {
        decode_only: &EAGER_ITERATION_SPREAD,
        mixed: &EAGER_MIXED_ITERATION_SPREAD,
        graph: &GRAPH_ITERATION_SPREAD,
        lag1: EAGER_SPREAD_LAG1,
    })
}

impl IterationSpread {
    /// The next factor: advance the replica's AR(1) state `z` (standard normal) with the
    /// innovation `noise` (standard normal) and read the table at the probability of `z`.
    pub fn factor(&self, z: &mut f64, noise: f64, kind: SpreadKind) -> f64 {
        *z = self.lag1 * *z + (1.0 - self.lag1 * self.lag1).sqrt() * noise;
        let u = 0.5 * libm::erfc(-*z / std::f64::consts::SQRT_2);
        let table = match kind {
            SpreadKind::DecodeOnly => self.decode_only,
            SpreadKind::Mixed => self.mixed,
            SpreadKind::Graph => self.graph,
        };
        spread_factor(table, u)
    }
}

/// The multiplicative factor at probability `u` of a spread table (linear between quantiles).
pub fn spread_factor(table: &[f64; 11], u: f64) -> f64 {
    let u = u.clamp(0.0, 1.0);
    let i = SPREAD_P.iter().position(|&p| p >= u).unwrap_or(SPREAD_P.len());
    if i == 0 {
        return table[0];
    }
    if i == SPREAD_P.len() {
        return table[SPREAD_P.len() - 1];
    }
    let (p0, p1) = (SPREAD_P[i - 1], SPREAD_P[i]);
    table[i - 1] + (table[i] - table[i - 1]) * (u - p0) / (p1 - p0)
}

/// HBM bytes per attention score of an unfused (matmul, mask, softmax) attention that
/// materializes its scores, as the reference server does for its decoders and a prompt's later
/// chunks (scenarios/workloads/serve_llama.py): the bf16 QK^T output written (2), cast to fp32 (2 + 4),
/// scaled (4 + 4), masked in place (4 + 4), softmax (4 + 4), cast to bf16 (4 + 2), read by PV (2):
/// 40, counted from its code (the boolean mask is shared by the KV heads: under 1 byte a score).
pub const UNFUSED_BYTES_PER_SCORE: f64 = 40.0;

/// HBM bytes per score of the reference server's attention for a prompt's later chunk (a masked
/// matmul over the chunk's queries and every cached key, fp32 scores; counted as
/// [`UNFUSED_BYTES_PER_SCORE`]), as measured: the median over the 17 GPU-bound (>= 500 tokens)
/// later chunks of the graph-fit runs (68-100 bytes, one at 161; calibration/runs/serve/FIT.md,
/// scripts/fit_serve_graphs.py), where such a chunk runs alone (`--cuda-graphs full`). Twice the
/// count: the long fp32 rows' softmax and the mask kernels do not stream at the copy bandwidth the
/// count is priced at. Used there only ([`IterCost::later_chunk_pass`]): the eager engine's
/// host terms and iteration-time spread were fitted with the count, and its mixed-iteration
/// spread carries these chunks' extra time (with 82 its replays' TTFT P99 rose by 20-45 points);
/// refitting them with it is left.
pub const LATER_CHUNK_BYTES_PER_SCORE: f64 = 82.0;

/// One prefill chunk of an iteration: `q` new prompt tokens after `c` cached ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    pub q: u32,
    pub c: u32,
}

/// What one iteration costs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IterTime {
    pub time: Seconds,
    /// Average power of one GPU of the replica during the iteration.
    pub gpu_power: Watts,
}

/// Attention op template: per-sequence heads and dims, KV bytes per (sequence x key).
#[derive(Debug, Clone)]
struct AttnTemplate {
    op: Op,
    heads: u64,
    kv_bytes_per_key: f64,
}

impl AttnTemplate {
    fn from_ops(ops: &[Op], seqs: u64, keys: u64) -> Option<AttnTemplate> {
        let op = ops.iter().find(|o| matches!(o.kind, OpKind::Attention { .. }))?.clone();
        let OpKind::Attention { batch_heads, kv_bytes, .. } = op.kind else { return None };
        Some(AttnTemplate { heads: batch_heads / seqs, kv_bytes_per_key: kv_bytes / (seqs * keys) as f64, op })
    }
    fn with(&self, seqs: u64, q_len: u64, kv_len: u64) -> Op {
        let mut op = self.op.clone();
        if let OpKind::Attention { batch_heads, q_len: q, kv_len: k, kv_bytes, .. } = &mut op.kind {
            *batch_heads = seqs * self.heads;
            *q = q_len;
            *k = kv_len;
            *kv_bytes = self.kv_bytes_per_key * (seqs * kv_len) as f64;
        }
        op
    }
}

/// The iteration cost model of one replica configuration (the scenario's model, system, TP, PP,
/// precision and stack).
pub struct IterCost<'a> {
    s: &'a Scenario,
    cost: CostModel<'a>,
    /// The same for a CUDA graph's replay ([`CostModel::in_cuda_graph`]): kernels without the
    /// profile's stream-launch cost.
    graph_cost: CostModel<'a>,
    gpu: std::borrow::Cow<'a, crate::hardware::Gpu>,
    /// Dense and MoE layers and whether embedding/head sit on each pipeline stage.
    stages: Vec<(f64, f64, bool, bool)>,
    /// Layers over all stages.
    layers: f64,
    p2p_per_token: Option<(f64, f64)>,
    decode_attn: AttnTemplate,
    prefill_attn: AttnTemplate,
    /// Token-parallel parts per (the busiest rank's tokens, the instance's tokens, in a graph):
    /// (dense layer, moe layer, embedding).
    linear: HashMap<(u64, u64, bool), [Parts; 3]>,
    head: HashMap<(u64, bool), Parts>,
    power: HashMap<[u16; 3], (f64, f64)>,
    host: HostOverhead,
    /// Unfused decode attention (batched matmuls over the cache) at this HBM rate, with the host
    /// waiting for it; `None`: the op list's fused decode attention.
    unfused_decode: Option<f64>,
    /// Micro-batches a pipeline-parallel replica keeps in flight (see
    /// [`IterCost::with_pipelined_microbatches`]); 1: an iteration passes the stages one after
    /// another with the GPUs of the other stages idle.
    microbatches: u64,
    /// Attention-DP ranks of the instance (`Workload::attention_dp`; 1 without): each holds its
    /// own sequences, the iteration waits for the busiest ([`split_over_ranks`]).
    adp: u64,
}

/// The busiest attention-DP rank's share of one iteration over `ranks` ranks: its decoders, its
/// prefill chunks and its tokens. Sequences stay on the rank that admitted them, and the engines
/// admit each new request to the rank with the fewest (TensorRT-LLM's attention-DP scheduler and
/// SGLang's DP controller balance by request count), so the decoders split as evenly as whole
/// sequences go (the busiest has `ceil(n / ranks)`) and each prompt chunk goes to the rank with
/// the fewest tokens so far, largest first; the busiest rank is the one with the most tokens.
/// (Their contexts are taken at the mean: the spread of context lengths over ranks is not
/// modelled.)
pub fn split_over_ranks(n_decode: u64, chunks: &[Chunk], ranks: u64) -> (u64, Vec<Chunk>, u64) {
    let ranks = ranks.max(1);
    if ranks == 1 {
        return (n_decode, chunks.to_vec(), n_decode + chunks.iter().map(|c| c.q as u64).sum::<u64>());
    }
    let mut load: Vec<(u64, u64, Vec<Chunk>)> = (0..ranks)
        .map(|r| {
            let d = n_decode / ranks + u64::from(r < n_decode % ranks);
            (d, d, Vec::new())
        })
        .collect();
    let mut sorted = chunks.to_vec();
    sorted.sort_by_key(|c| std::cmp::Reverse(c.q));
    for c in sorted {
        let r = (0..load.len()).min_by_key(|&i| (load[i].1, std::cmp::Reverse(i))).unwrap_or(0);
        load[r].1 += c.q as u64;
        load[r].2.push(c);
    }
    let busiest = (0..load.len()).max_by_key(|&i| (load[i].1, load[i].0, std::cmp::Reverse(i))).unwrap_or(0);
    let (d, tokens, cs) = load.swap_remove(busiest);
    (d, cs, tokens)
}

/// How a priced pass runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Run {
    /// Kernels launched from the host, as the op list says.
    Eager,
    /// A CUDA graph's replay: no host launches, each kernel at the GPU's in-graph floor instead
    /// of the profile's stream launch ([`CostModel::in_cuda_graph`]), the graph's per-layer GPU
    /// time.
    Graph,
    /// Eagerly, one later prompt chunk alone: its scores at the measured bytes.
    LaterChunkAlone,
}

fn parts_of(cost: &CostModel, s: &Scenario, w: &Workload, ops: &[Op]) -> Parts {
    if ops.is_empty() {
        return Parts::default();
    }
    let steps = cost.lower(&s.model, &s.parallel, &s.options, w, ops, 1.0);
    // No host_sync: it is priced for tensor-parallel training only.
    let (compute, memory, cpu, _, comm) = exposed_time(&steps);
    let compute_fixed = steps
        .iter()
        .map(|st| match st {
            crate::cost::lower::Step::Kernel { time, bound: crate::cost::Bound::Compute, fixed, .. } => fixed.min(*time).value(),
            _ => 0.0,
        })
        .sum();
    Parts { compute: compute.value(), compute_fixed, memory: memory.value(), comm: comm.iter().map(|(_, t)| t.value()).sum(), cpu: cpu.value() }
}

impl<'a> IterCost<'a> {
    /// `s` holds the replica's model, system and layout (`dp` = 1, `cp` = 1).
    pub fn new(s: &'a Scenario) -> Result<IterCost<'a>, PredictError> {
        let mut probe = s.clone();
        probe.workload.mode = Mode::Decode;
        probe.workload.batch = 1;
        probe.workload.kv_len = 1;
        step::check_scenario(&probe)?;
        if s.model.hybrid.is_some() {
            return Err(PredictError::Unsupported(
                "the serving simulator does not model hybrid Mamba-attention models (a fixed-size SSM state per sequence instead of KV blocks); use `predict --mode prefill|decode`".into(),
            ));
        }
        let adp = if s.workload.attention_dp.is_some() { s.parallel.dp.max(1) as u64 } else { 1 };
        if s.parallel.cp > 1 || (s.parallel.dp > 1 && adp == 1) {
            return Err(PredictError::Unsupported(
                "serving replicas take `dp` = 1 and `cp` = 1 (replicas are the data-parallel dimension; `--attention-dp` makes dp ranks one instance)".into(),
            ));
        }
        let cost = CostModel::new(&s.system, s.profile.as_ref()).for_stack(s.workload.stack);
        let decode_w = Workload { mode: Mode::Decode, batch: 1, kv_len: 1, ..s.workload.clone() };
        let decode_attn = AttnTemplate::from_ops(&forward_ops(&s.model, &s.parallel, &decode_w).dense_layer, 1, 2)
            .ok_or_else(|| PredictError::Unsupported("no attention op in the decode op list".into()))?;
        let prefill_w = Workload { mode: Mode::Prefill, batch: 1, seq: 128, flash_attention: true, ..s.workload.clone() };
        let prefill_attn = AttnTemplate::from_ops(&forward_ops(&s.model, &s.parallel, &prefill_w).dense_layer, 1, 128)
            .ok_or_else(|| PredictError::Unsupported("no attention op in the prefill op list".into()))?;
        let pp = s.parallel.pp;
        let stages: Vec<(f64, f64, bool, bool)> = (0..pp)
            .map(|st| {
                let c = step::stage_layers(s, st);
                let (d, m) = (c[crate::model::LayerKind::Dense.index()], c[crate::model::LayerKind::Moe.index()]);
                (d as f64, m as f64, st == 0, st == pp - 1)
            })
            .collect();
        // Pipeline sends scale with the tokens of the batch: price one token's and the latency.
        let p2p_per_token = if pp > 1 {
            let mut one = s.clone();
            one.workload = Workload { mode: Mode::Decode, batch: 1, kv_len: 1, ..s.workload.clone() };
            let a = step::p2p_step(&cost, &one).map(|c| c.time().value()).unwrap_or(0.0);
            one.workload.batch = 1024;
            let b = step::p2p_step(&cost, &one).map(|c| c.time().value()).unwrap_or(0.0);
            let per = (b - a) / 1023.0;
            Some((a - per, per))
        } else {
            None
        };
        Ok(IterCost {
            layers: stages.iter().map(|x| x.0 + x.1).sum(),
            gpu: analytic::power_gpu(s),
            s,
            graph_cost: CostModel::new(&s.system, s.profile.as_ref()).for_stack(s.workload.stack).in_cuda_graph(),
            cost,
            stages,
            p2p_per_token,
            decode_attn,
            prefill_attn,
            linear: HashMap::new(),
            head: HashMap::new(),
            power: HashMap::new(),
            host: HostOverhead::default_for(s.workload.stack).0,
            unfused_decode: None,
            microbatches: 1,
            adp,
        })
    }

    /// Price decode attention as unfused batched matmuls reading the cache at `bandwidth` (a
    /// profile's decode-regime rows), with the host waiting for them.
    pub fn with_unfused_decode(mut self, bandwidth: crate::units::BytesPerSec) -> Self {
        self.unfused_decode = Some(bandwidth.value());
        self
    }

    /// Pipeline parallelism as TensorRT-LLM's executor runs it: a replica of `pp` stages keeps
    /// `pp` micro-batches in flight, each a disjoint set of the running sequences, so every
    /// stage works on one of them at any time (in-flight batching per micro-batch; its
    /// `max_batch_size` and `max_num_tokens` hold per micro-batch). An iteration of the
    /// simulation is then one period of the pipeline: every running sequence's micro-batch
    /// passes every stage once, and each sequence gains one token. Its time is the busiest
    /// stage's work over the `pp` micro-batches (each of 1/pp of the tokens, decoders and
    /// sampled rows: the weights are read once per micro-batch), the serial host time once per
    /// micro-batch, and one stage boundary's sends for every micro-batch; which equals one
    /// micro-batch's pass through all stages when the stages are equal. Without it (the other
    /// stacks) an iteration is one batch through the stages one after another.
    pub fn with_pipelined_microbatches(mut self) -> Self {
        self.microbatches = self.stages.len().max(1) as u64;
        self
    }

    /// Micro-batches in flight (1 unless [`IterCost::with_pipelined_microbatches`]).
    pub fn microbatches(&self) -> u64 {
        self.microbatches
    }

    /// Attention-DP ranks of the instance (1 without attention DP).
    pub fn attention_dp_ranks(&self) -> u64 {
        self.adp
    }

    /// Replace the stack's default host overhead.
    pub fn with_host(mut self, host: HostOverhead) -> Self {
        self.host = host;
        self
    }

    /// Set the host time multiplier (`HostOverhead::time_scale`); the memoized parts stay valid
    /// (the scale applies after them).
    pub fn set_host_time_scale(&mut self, k: f64) {
        self.host.time_scale = k;
    }

    /// The cost model of a pass: a graph's replay or kernels launched from the host.
    fn cost_of(&self, graph: bool) -> &CostModel<'a> {
        if graph {
            &self.graph_cost
        } else {
            &self.cost
        }
    }

    /// `n` tokens on the busiest rank, `total` on the instance (equal without attention DP).
    fn linear(&mut self, n: u64, total: u64, graph: bool) -> [Parts; 3] {
        if let Some(p) = self.linear.get(&(n, total, graph)) {
            return *p;
        }
        let s = self.s;
        let attention_dp = s.workload.attention_dp.map(|_| total.max(n));
        let w = Workload { mode: Mode::Decode, batch: n, kv_len: 1, attention_dp, ..s.workload.clone() };
        let ops = forward_ops(&s.model, &s.parallel, &w);
        let strip = |v: &[Op]| -> Vec<Op> { v.iter().filter(|o| !matches!(o.kind, OpKind::Attention { .. })).cloned().collect() };
        let cost = self.cost_of(graph);
        let p = [parts_of(cost, s, &w, &strip(&ops.dense_layer)), parts_of(cost, s, &w, &strip(&ops.moe_layer)), parts_of(cost, s, &w, &ops.embedding)];
        self.linear.insert((n, total, graph), p);
        p
    }

    fn head(&mut self, rows: u64, graph: bool) -> Parts {
        if let Some(p) = self.head.get(&(rows, graph)) {
            return *p;
        }
        let s = self.s;
        let w = Workload { mode: Mode::Decode, batch: rows.max(1), kv_len: 1, ..s.workload.clone() };
        let ops = forward_ops(&s.model, &s.parallel, &w);
        let p = parts_of(self.cost_of(graph), s, &w, &ops.head);
        self.head.insert((rows, graph), p);
        p
    }

    fn attention(&self, op: Op, graph: bool) -> Parts {
        parts_of(self.cost_of(graph), self.s, &self.s.workload, std::slice::from_ref(&op))
    }

    /// Speedup and GPU power for an activity mix (memoized on the mix, which is all they depend on).
    fn solve(&mut self, a: &Activity) -> (f64, f64) {
        let total = (a.compute + a.memory + a.comm + a.idle).value();
        if total <= 0.0 {
            return (1.0, self.gpu.idle_power.value.value());
        }
        let q = |x: Seconds| ((x.value() / total) * 4096.0).round() as u16;
        let key = [q(a.compute), q(a.memory), q(a.comm)];
        if let Some(v) = self.power.get(&key) {
            return *v;
        }
        let ps = power::solve(&self.gpu, a);
        let v = (ps.speedup, ps.gpu_power.value());
        self.power.insert(key, v);
        v
    }

    /// One iteration: `n_decode` sequences decoding with `decode_kv` cached tokens in all, the
    /// prefill `chunks`, and `rows` sequences sampling a token (decoders + prompts that finish).
    pub fn iteration(&mut self, n_decode: u64, decode_kv: u64, chunks: &[Chunk], rows: u64) -> IterTime {
        self.price(n_decode, decode_kv, chunks, rows, Run::Eager)
    }

    /// One replay of a CUDA graph of the forward the arguments describe (as
    /// [`IterCost::iteration`]'s): the same GPU work, no kernel launches from the host, each
    /// kernel's fixed cost the GPU's in-graph floor instead of the profile's stream launch
    /// ([`CostModel::in_cuda_graph`]), [`HostOverhead::graph_per_layer`] per layer; no host time
    /// between iterations. A decode
    /// graph runs `rows` = its padded batch (every row runs the whole forward and samples).
    pub fn graph_pass(&mut self, n_decode: u64, decode_kv: u64, chunks: &[Chunk], rows: u64) -> IterTime {
        self.price(n_decode, decode_kv, chunks, rows, Run::Graph)
    }

    /// A later chunk of a prompt run eagerly as its own pass (an engine with prefill graphs), its
    /// unfused attention's scores at [`LATER_CHUNK_BYTES_PER_SCORE`].
    pub fn later_chunk_pass(&mut self, chunk: Chunk, rows: u64) -> IterTime {
        self.price(0, 0, &[chunk], rows, Run::LaterChunkAlone)
    }

    /// The engine's host time between a graph iteration of `seqs` sequences and the next
    /// ([`HostOverhead::graph_per_iteration`] per micro-batch and
    /// [`HostOverhead::graph_per_sequence`] per sequence, at the host time scale).
    pub fn graph_host(&self, seqs: u64) -> Seconds {
        (self.host.graph_per_iteration * self.microbatches as f64 + self.host.graph_per_sequence * seqs as f64) * self.host.time_scale
    }

    fn price(&mut self, n_decode: u64, decode_kv: u64, chunks: &[Chunk], rows: u64, run: Run) -> IterTime {
        let graph = run == Run::Graph;
        let later_chunk_bytes = if run == Run::LaterChunkAlone { LATER_CHUNK_BYTES_PER_SCORE } else { UNFUSED_BYTES_PER_SCORE };
        let instance_tokens = n_decode + chunks.iter().map(|c| c.q as u64).sum::<u64>();
        // Attention DP: the busiest rank's decoders, chunks, tokens and sampled rows; its decode
        // keys at the instance's mean context. The MoE layers see the instance's tokens.
        let k_mean = if n_decode > 0 { (decode_kv as f64 / n_decode as f64).round().max(0.0) as u64 } else { 0 };
        // (Without attention DP nothing is split or copied: this runs every iteration.)
        let rank_split;
        let (n_decode, chunks, n_tokens) = if self.adp > 1 {
            rank_split = split_over_ranks(n_decode, chunks, self.adp);
            (rank_split.0, &rank_split.1[..], rank_split.2)
        } else {
            (n_decode, chunks, instance_tokens)
        };
        let rows = rows.div_ceil(self.adp);
        let decode_kv = if self.adp > 1 { k_mean * n_decode } else { decode_kv };
        // Pipelined micro-batches: the token-parallel parts and the LM head of one micro-batch
        // (1/mb of the tokens and rows), counted `mb` times on each stage; attention is additive
        // over the sequences and is priced for all of them.
        let mb = self.microbatches.max(1);
        let [dense, moe, emb] = self.linear(n_tokens.div_ceil(mb).max(1), instance_tokens.div_ceil(mb).max(1), graph);
        // No row samples (prefill chunks that do not finish a prompt): no LM head.
        let head = if rows == 0 { Parts::default() } else { self.head(rows.div_ceil(mb), graph) };
        // Attention of one layer: the decoders as one op at their mean context (their KV reads
        // and FLOPs are linear in the total), each prefill chunk as its own op.
        let mut attn = Parts::default();
        // Unfused decode attention: its launches as usual, its cache reads serial (per layer).
        let mut serial_per_layer = 0.0;
        let k = if n_decode > 0 { (decode_kv as f64 / n_decode as f64).round().max(0.0) as u64 } else { 0 };
        // Keys the decoders read per layer, each at the mean context plus its new token.
        let decode_keys = n_decode * (k + 1);
        if n_decode > 0 {
            // One op per micro-batch (its share of the decoders), `mb` of them.
            let per_mb = n_decode.div_ceil(mb);
            let mut da = self.attention(self.decode_attn.with(per_mb, 1, k + 1), graph);
            if mb > 1 {
                let one = da;
                da = Parts::default();
                da.add(&one, n_decode as f64 / per_mb as f64);
            }
            match self.unfused_decode {
                Some(bw) => {
                    attn.cpu += da.cpu;
                    // The products' cache reads at the profile's decode-regime rate, and their
                    // scores through HBM between the products (cast, scale, mask, softmax, cast:
                    // UNFUSED_BYTES_PER_SCORE, five kernels).
                    let keys = decode_keys as f64;
                    let scores = self.decode_attn.heads as f64 * keys;
                    serial_per_layer =
                        self.decode_attn.kv_bytes_per_key * keys / bw + self.cost_of(graph).memory_time(scores * UNFUSED_BYTES_PER_SCORE, 5).time.value();
                }
                None => attn.add(&da, 1.0),
            }
        }
        for c in chunks {
            let op = self.prefill_attn.with(1, c.q as u64, (c.c + c.q) as u64);
            attn.add(&self.attention(op, graph), 1.0);
            if self.unfused_decode.is_some() && c.c > 0 {
                // A later chunk of an unfused engine: the scores go through HBM (see
                // LATER_CHUNK_BYTES_PER_SCORE), on top of the products' arithmetic priced above.
                let scores = (self.prefill_attn.heads * c.q as u64 * (c.c + c.q) as u64) as f64;
                attn.memory += self.cost_of(graph).memory_time(scores * later_chunk_bytes, 7).time.value();
            }
        }
        let host_per_layer = if n_decode > 0 { self.host.per_layer_decode.value() } else { 0.0 } + self.host.per_layer_chunk.value() * chunks.len() as f64;
        let mut stage_parts: Vec<Parts> = Vec::with_capacity(self.stages.len());
        for &(d, m, first, last) in &self.stages {
            let k = mb as f64;
            let mut p = Parts { cpu: host_per_layer * (d + m) * k, ..Parts::default() };
            p.add(&dense, d * k);
            p.add(&moe, m * k);
            p.add(&attn, d + m);
            if first {
                p.add(&emb, k);
            }
            if last {
                p.add(&head, k);
            }
            p.cpu *= if graph { 0.0 } else { self.host.time_scale };
            stage_parts.push(p);
        }
        // Pipelined: one boundary's sends of every micro-batch (the boundaries send at once);
        // otherwise every boundary's, one after another.
        let boundaries = if mb > 1 { 1.0 } else { (self.stages.len() - 1) as f64 };
        let p2p = self.p2p_per_token.map_or(0.0, |(lat, per)| (lat * mb as f64 + per * n_tokens as f64) * boundaries);
        // Pipelined: the period is the busiest stage's (its layers carry the per-layer terms);
        // otherwise the stages one after another.
        let busiest = if mb > 1 {
            stage_parts.iter().enumerate().max_by(|a, b| a.1.gpu(1.0).max(a.1.cpu).total_cmp(&b.1.gpu(1.0).max(b.1.cpu))).map_or(0, |(i, _)| i)
        } else {
            0
        };
        let crit_layers = if mb > 1 { self.stages[busiest].0 + self.stages[busiest].1 } else { self.layers };
        // The unfused decode attention keeps HBM busy while the host waits for it.
        let mut act = Activity { comm: Seconds::new(p2p), memory: Seconds::new(serial_per_layer * crit_layers), ..Activity::default() };
        if mb > 1 {
            stage_parts = vec![stage_parts[busiest]];
        }
        for p in &stage_parts {
            act.compute += Seconds::new(p.compute);
            act.memory += Seconds::new(p.memory);
            act.comm += Seconds::new(p.comm);
            act.idle += Seconds::new((p.cpu - p.gpu(1.0)).max(0.0));
        }
        let (speedup, watts) = self.solve(&act);
        let stage = |p: &Parts| {
            let (g, c) = (p.gpu(speedup), p.cpu);
            g.max(c) + (1.0 - self.host.gpu_overlap) * g.min(c)
        };
        let serial_host =
            if graph { 0.0 } else { self.host.per_iteration.value() * mb as f64 + self.host.per_sequence.value() * (n_decode + chunks.len() as u64) as f64 };
        let graph_gpu = if graph {
            // The decoders' cache bytes read per layer (as the attention op prices them).
            let cache_gb = self.decode_attn.kv_bytes_per_key * decode_keys as f64 / 1e9;
            (self.host.graph_per_layer.value() - self.host.graph_per_layer_per_cache_gb.value() * cache_gb).max(0.0) * crit_layers * mb as f64
        } else {
            0.0
        };
        let time: f64 = stage_parts.iter().map(stage).sum::<f64>() + serial_per_layer * crit_layers + graph_gpu + p2p + serial_host * self.host.time_scale;
        IterTime { time: Seconds::new(time), gpu_power: Watts::new(watts) }
    }

    pub fn idle_power(&self) -> Watts {
        self.gpu.idle_power.value
    }
}

/// KV-cache room of one replica: bytes per cached token on its peak GPU, and the bytes left for
/// the cache once weights, one iteration's transients, logits, runtime and fragmentation are
/// placed within `utilization` of HBM (vLLM's `gpu_memory_utilization`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KvRoom {
    pub bytes_per_token: f64,
    pub cache_bytes: f64,
    pub other_bytes: f64,
    pub capacity_bytes: f64,
}

pub fn kv_room(s: &Scenario, token_budget: u64, max_batch: u64, utilization: f64) -> KvRoom {
    kv_room_sized(s, token_budget, max_batch, utilization, super::engines::KvSizing::OfTotal)
}

/// [`kv_room`] with the engine's way of sizing the cache: `fraction` of HBM less the rest
/// (`OfTotal`, vLLM), or `fraction` of what the rest leaves free (`OfFree`, TensorRT-LLM).
pub fn kv_room_sized(s: &Scenario, token_budget: u64, max_batch: u64, fraction: f64, sizing: super::engines::KvSizing) -> KvRoom {
    kv_room_with(s, token_budget, max_batch, fraction, sizing, 0.0)
}

/// Bytes per GPU that TensorRT-LLM's TensorRT-engine flow (the v0.17 rows: `trtllm-bench build`,
/// no CUDA graphs) holds beyond the memory plan's sharded weights: the whole input embedding
/// table on every tensor-parallel rank. Its checkpoint converter shards the embedding only with
/// `use_parallel_embedding` (`PretrainedConfig.use_parallel_embedding`, default `False`; the
/// converters' `--use_parallel_embedding` help reads "By default embedding parallelism is
/// disabled"; TensorRT-LLM v0.17 `tensorrt_llm/models/modeling_utils.py` and
/// `examples/llama/convert_checkpoint.py`, from memory, not re-read here), so each rank keeps
/// `vocab x hidden` in 16 bits (ModelOpt leaves the embedding unquantized), where the plan counts
/// `1 / tp` of it (`memory::embedding_and_head_on_rank`). The PyTorch backend (v1.0, the rows
/// that replay CUDA graphs) shards it over TP (its Llama `Embedding` is built with
/// `TensorParallelMode.COLUMN`, from memory) and holds none of this. Counted on the replica's
/// peak GPU: exact at pp = 1 (every TensorRT-engine row), an upper bound at pp > 1, where only
/// the first stage holds the embedding. Llama-3.1 70B: 2.1 GB per GPU against 1.05 GB sharded at
/// TP 2, 0.26 GB at TP 8.
pub fn tensorrt_engine_embedding_bytes(s: &Scenario) -> f64 {
    let tp = s.parallel.tp.max(1) as f64;
    s.model.params().embedding * (1.0 - 1.0 / tp) * 2.0
}

/// [`kv_room_sized`] with `extra_bytes` per GPU held outside the memory plan (placed before the
/// cache is sized, as the engine's own weights are: [`tensorrt_engine_embedding_bytes`]).
pub fn kv_room_with(s: &Scenario, token_budget: u64, max_batch: u64, fraction: f64, sizing: super::engines::KvSizing, extra_bytes: f64) -> KvRoom {
    let utilization = fraction;
    let cap = s.system.gpu.hbm_capacity.value;
    let probe = |batch: u64, kv_len: u64| {
        let w = Workload { mode: Mode::Decode, batch, kv_len, ..s.workload.clone() };
        memory::plan(&s.model, &s.parallel, &w, cap)
    };
    // Per-token KV bytes from the memory plan (1024 tokens of one sequence).
    // A sliding-window model's plan caches only the window on its sliding layers; the paged
    // cache here counts a token on every attention layer (the engines' separate pools per window
    // size are not modelled), so the plan's bytes are scaled back to every layer: conservative,
    // fewer sequences fit than the engines' window pools allow.
    let windowed = s.model.kv_cached_share(1024.0);
    let per_token = probe(1, 1023).kv_cache.value() / 1024.0 / windowed;
    // One iteration of `token_budget` tokens: its transients; logits for `max_batch` rows.
    let it = probe(token_budget.max(1), 0);
    let logits = it.logits.value() * max_batch.min(token_budget.max(1)) as f64 / token_budget.max(1) as f64;
    let frac = crate::memory::stack_memory(s.workload.stack).fragmentation;
    let other = (it.weights.value() + extra_bytes + it.activations.value() + logits) * (1.0 + frac) + it.runtime.value();
    let cache = match sizing {
        super::engines::KvSizing::OfTotal => (cap.value() * utilization - other).max(0.0) / (1.0 + frac),
        super::engines::KvSizing::OfFree => (cap.value() - other).max(0.0) * utilization / (1.0 + frac),
    };
    KvRoom { bytes_per_token: per_token, cache_bytes: cache, other_bytes: other, capacity_bytes: cap.value() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_busiest_attention_dp_rank_takes_the_ceiling_of_the_decoders_and_the_largest_chunks() {
        // No attention DP: everything on the one rank.
        let chunks = [Chunk { q: 100, c: 0 }, Chunk { q: 300, c: 0 }];
        assert_eq!(split_over_ranks(5, &chunks, 1), (5, chunks.to_vec(), 405));
        // 10 decoders over 4 ranks: 3, 3, 2, 2. The 300-token chunk goes to a 2-decoder rank
        // (fewest tokens), the 100-token one to the other: 302 and 102 tokens; the busiest is
        // the one with the 300-token chunk.
        let (d, cs, tokens) = split_over_ranks(10, &chunks, 4);
        assert_eq!((d, tokens), (2, 302));
        assert_eq!(cs, vec![Chunk { q: 300, c: 0 }]);
        // Decoders only: ceil(n / ranks).
        assert_eq!(split_over_ranks(17, &[], 8), (3, vec![], 3));
        // Fewer sequences than ranks: the busiest has one; an idle instance has none.
        assert_eq!(split_over_ranks(3, &[], 8).0, 1);
        assert_eq!(split_over_ranks(0, &[], 8), (0, vec![], 0));
    }
}
