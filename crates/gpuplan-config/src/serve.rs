//! Serving scenario files (`scenarios/serving/*.toml`) for `gpuplan serve`; flags override them.
//!
//! ```toml
//! name = "llama-3-8b-chat-8xh100"
//! model = "llama-3-8b"
//! system = "dgx-h100"
//! gpus = 8                       # all replicas (and both pools when disaggregated)
//! tp = 2                         # per replica; replicas = gpus / (tp * pp)
//! # ep = 8                       # MoE: expert parallelism inside a replica (default: expert TP)
//! # attention_dp = true          # MoE with trtllm/vllm/sglang: each replica is an instance of
//! # dp = 8                       # dp attention-DP ranks of tp GPUs, experts over ep x etp = tp x dp;
//! #                              # replicas = gpus / (tp * dp); max_batch and token_budget per rank
//! [traffic]
//! qps = 20.0
//! duration_s = 120.0
//! arrival = "poisson"            # poisson | gamma (with cv) | constant
//! input_len = "lognormal:1024"   # N | uniform:LO:HI | lognormal:MEAN[:SIGMA]
//! output_len = "lognormal:256"
//! seed = 0
//! # trace = "trace.csv"          # arrival_s,input_len,output_len; replaces the generated stream
//! [scheduler]
//! max_batch = 256
//! token_budget = 8192
//! chunked_prefill = true
//! block_size = 16
//! gpu_memory_utilization = 0.9
//! # host_overhead_us = [100, 10, 80, 400] # engine host time: per iteration, per sequence, per
//! #                                       # layer with decoders, per layer and prefill chunk
//! #                                       # (default: the stack's)
//! # decode_attention = "padded"           # paged (default) | padded: to the longest context |
//! #                                       # padded-matmul: the reference server's (needs a profile)
//! # host_gpu_overlap = 1.0                # share of host and GPU time that overlaps (default: the stack's)
//! # host_time_scale = 1.0                 # this node's host time over the fit host's, or:
//! # host_probe_ms = 13.3                  # the host probe measured on this node (sets the scale)
//! # iteration_spread = "on"               # on | off: the stack's measured iteration-time spread
//! # cuda_graphs = "decode"                # off (default) | decode: decode-only iterations replay
//! #                                       # CUDA graphs (padded shapes) | full: prefill graphs too
//! # graph_context_step = 256              # their context padding (padded-matmul attention)
//! # prefill_graph_step = 128              # full: the prefill graphs' token padding
//! # graph_overhead_us = [326, 116.1, 84.5] # host time between graph iterations, a graph's GPU
//! #                                       # time per layer beyond the op list, less per GB of cache
//! #                                       # read per layer (default: the stack's)
//! routing = "least-loaded"       # round-robin | least-loaded
//! # [disaggregated]              # a prefill pool of prefill_gpus GPUs (TP prefill_tp); the rest decode
//! # prefill_gpus = 4
//! # prefill_tp = 2
//! ```

use std::path::Path;

use serde::Deserialize;

use super::{parse_toml, read_file, ConfigError};

#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeWire {
    pub name: Option<String>,
    pub description: Option<String>,
    pub source: Option<String>,
    pub model: Option<String>,
    pub system: Option<String>,
    pub gpus: Option<i64>,
    pub tp: Option<i64>,
    pub pp: Option<i64>,
    /// Expert parallelism inside a replica (MoE models; default: the experts over TP).
    pub ep: Option<i64>,
    /// Attention-DP ranks of one instance (with `attention_dp`).
    pub dp: Option<i64>,
    /// Attention data parallelism around expert-parallel MoE (TensorRT-LLM `enable_attention_dp`,
    /// SGLang `--enable-dp-attention`): a replica is `dp` ranks of `tp` GPUs.
    pub attention_dp: Option<bool>,
    pub precision: Option<String>,
    pub stack: Option<String>,
    pub calibration: Option<String>,
    #[serde(default)]
    pub traffic: TrafficWire,
    #[serde(default)]
    pub scheduler: SchedulerWire,
    pub disaggregated: Option<DisaggWire>,
}

#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrafficWire {
    pub qps: Option<f64>,
    pub duration_s: Option<f64>,
    pub arrival: Option<String>,
    pub cv: Option<f64>,
    pub input_len: Option<String>,
    pub output_len: Option<String>,
    pub seed: Option<u64>,
    pub trace: Option<String>,
}

#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulerWire {
    pub max_batch: Option<i64>,
    pub token_budget: Option<i64>,
    pub chunked_prefill: Option<bool>,
    pub block_size: Option<i64>,
    pub gpu_memory_utilization: Option<f64>,
    pub host_overhead_us: Option<Vec<f64>>,
    pub decode_attention: Option<String>,
    pub host_gpu_overlap: Option<f64>,
    pub host_time_scale: Option<f64>,
    pub host_probe_ms: Option<f64>,
    pub iteration_spread: Option<String>,
    pub cuda_graphs: Option<String>,
    pub graph_context_step: Option<i64>,
    pub prefill_graph_step: Option<i64>,
    pub graph_overhead_us: Option<Vec<f64>>,
    pub routing: Option<String>,
    /// TensorRT-LLM's KV sizing: the share of the memory free once the engine is loaded.
    pub kv_cache_free_gpu_mem_fraction: Option<f64>,
    /// SGLang's KV sizing: the share of HBM for weights and the KV pool.
    pub mem_fraction_static: Option<f64>,
    /// Decode batches up to this size replay CUDA graphs (an engine's largest capture size).
    pub cuda_graph_max_batch: Option<i64>,
}

#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DisaggWire {
    pub prefill_gpus: Option<i64>,
    pub prefill_tp: Option<i64>,
}

pub fn read_serve(path: &Path) -> Result<ServeWire, ConfigError> {
    let text = read_file(path)?;
    parse_toml(path, &text)
}
