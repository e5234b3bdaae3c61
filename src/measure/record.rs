//! The run record: one JSON object per measured run, one per line in a `.jsonl` file. Its format
//! is documented in `calibration/runs/FORMAT.md`; bump `SCHEMA_VERSION` when a key changes meaning
//! or goes away (adding keys does not bump it).

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub schema_version: u32,
    /// Unique within its file, e.g. `h200-007`.
    pub run_id: Option<String>,
    /// `fit` (constants may be fitted on it) or `test` (held out); `None` for a user's own runs.
    pub split: Option<String>,
    /// `ok`, `oom`, `crashed`, `timeout`, or `no_steps` (exit 0 but no step line parsed).
    pub status: String,
    /// The job's exit code; `None` when a signal ended it.
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub scenario: Scenario,
    pub metrics: Metrics,
    pub machine: Machine,
    pub job: Job,
    pub note: Option<String>,
    /// Serving runs (`mode = "serve"`): the load generator's request statistics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serve: Option<ServeMetrics>,
}

/// A serving run's statistics as its load generator measured them (vLLM benchmark_serving
/// definitions: TTFT = first token - arrival; TPOT = (E2E - TTFT) / (output tokens - 1); throughput
/// over first arrival to last completion), read from the job's `serve-summary-json:` line (the
/// keys of `gpuplan serve --json`), plus the energy NVML saw per output token.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ServeMetrics {
    /// Poisson arrival rate asked for (requests/s); `None` for a replayed trace.
    pub qps: Option<f64>,
    pub max_batch: Option<u64>,
    pub token_budget: Option<u64>,
    pub requests_completed: u64,
    /// First arrival to last completion.
    pub duration_s: f64,
    pub requests_per_s: f64,
    pub output_tokens_per_s: f64,
    pub total_tokens_per_s: Option<f64>,
    pub ttft_s: LatencyDist,
    pub tpot_s: LatencyDist,
    pub e2e_latency_s: LatencyDist,
    pub queueing_s: LatencyDist,
    /// The per-request CSV the job wrote (arrival, lengths, times): a trace `gpuplan serve
    /// --trace` replays and `--measured` scores.
    pub requests_csv: Option<String>,
    /// All sampled GPUs' energy over the timed iterations / output tokens in that time.
    pub energy_j_per_output_token: Option<f64>,
}

/// Mean and percentiles of a latency, seconds (`None` where the run had no sample).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct LatencyDist {
    pub n: u64,
    pub mean: Option<f64>,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
    pub max: Option<f64>,
}

impl ServeMetrics {
    /// Read the JSON document a serving job prints after `serve-summary-json:`.
    pub fn from_summary_json(text: &str) -> Result<ServeMetrics, String> {
        #[derive(Deserialize)]
        struct Throughput {
            requests_per_s: f64,
            output_tokens_per_s: f64,
            total_tokens_per_s: Option<f64>,
        }
        #[derive(Deserialize)]
        struct Requests {
            completed: u64,
        }
        #[derive(Deserialize)]
        struct Wire {
            qps: Option<f64>,
            max_batch: Option<u64>,
            token_budget: Option<u64>,
            requests: Requests,
            duration_s: f64,
            throughput: Throughput,
            ttft_s: LatencyDist,
            tpot_s: LatencyDist,
            e2e_latency_s: LatencyDist,
            queueing_s: LatencyDist,
            requests_csv: Option<String>,
        }
        let w: Wire = serde_json::from_str(text.trim()).map_err(|e| e.to_string())?;
        Ok(ServeMetrics {
            qps: w.qps,
            max_batch: w.max_batch,
            token_budget: w.token_budget,
            requests_completed: w.requests.completed,
            duration_s: w.duration_s,
            requests_per_s: w.throughput.requests_per_s,
            output_tokens_per_s: w.throughput.output_tokens_per_s,
            total_tokens_per_s: w.throughput.total_tokens_per_s,
            ttft_s: w.ttft_s,
            tpot_s: w.tpot_s,
            e2e_latency_s: w.e2e_latency_s,
            queueing_s: w.queueing_s,
            requests_csv: w.requests_csv,
            energy_j_per_output_token: None,
        })
    }
}

/// What ran, in the terms `gpuplan predict` takes (its flag names, snake_case).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Scenario {
    /// Model name in `models/` (or a path).
    pub model: Option<String>,
    /// System name in `calibration/systems/`, e.g. `hgx-h200`.
    pub system: Option<String>,
    pub n_gpus: u32,
    pub tp: u32,
    /// Sequence parallelism with TP (Megatron's `--sequence-parallel`); absent: on when tp > 1,
    /// as `predict` assumes. PyTorch DTensor TP without SP records `false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sp: Option<bool>,
    pub pp: u32,
    pub dp: u32,
    /// 0 = DDP (replicated), 3 = FSDP full shard.
    pub zero: u32,
    /// `train`, `prefill` or `decode`.
    pub mode: String,
    /// Training: sequences per GPU per micro-step.
    pub micro_batch: Option<u64>,
    /// Training: micro-steps per optimizer step.
    pub grad_accum: Option<u64>,
    /// Training: sequences per optimizer step, all ranks (micro_batch x grad_accum x dp).
    pub global_batch: Option<u64>,
    /// Training and prefill: tokens per sequence.
    pub seq: Option<u64>,
    /// Inference: sequences per GPU.
    pub batch: Option<u64>,
    /// Decode: tokens in the KV cache when the timed steps start.
    pub kv_len: Option<u64>,
    /// `none`, `selective` or `full`.
    pub recompute: Option<String>,
    /// `torch-eager`, `torch-compile`, `megatron`.
    pub stack: Option<String>,
    /// `bf16`, `fp8`, `fp4`.
    pub precision: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Metrics {
    /// Which parser read the log (`gpuplan`, `megatron`, `torchtitan`, `hf-trainer`, `regex`).
    pub log_format: Option<String>,
    pub n_steps_parsed: u64,
    pub n_warmup_dropped: u64,
    /// Steps in the steady window (after warm-up).
    pub n_steps_timed: u64,
    /// Step times of the timed samples, in order, as the log gave them.
    pub step_times_s: Vec<f64>,
    pub step_time_s_median: Option<f64>,
    pub step_time_s_mean: Option<f64>,
    pub step_time_s_min: Option<f64>,
    pub step_time_s_max: Option<f64>,
    /// Tokens per step, all ranks (training: global_batch x seq; prefill: batch x seq x n_gpus;
    /// decode: batch x n_gpus).
    pub tokens_per_step: Option<f64>,
    /// tokens_per_step / step_time_s_median: the whole job's throughput.
    pub tokens_per_s: Option<f64>,
    /// Peak `memory used` NVML saw on each sampled GPU during the run (includes the CUDA
    /// context and anything else on the GPU).
    pub peak_mem_bytes_per_gpu_nvml: Vec<Option<f64>>,
    /// NVML `memory used` on each GPU just before the job started.
    pub mem_bytes_before_per_gpu_nvml: Vec<Option<f64>>,
    /// The job's own peak per rank (PyTorch max_memory_reserved / max_memory_allocated), by rank.
    pub peak_mem_reserved_bytes_per_rank: Vec<Option<f64>>,
    pub peak_mem_allocated_bytes_per_rank: Vec<Option<f64>>,
    /// Seconds of the steady window over which power and energy are taken.
    pub steady_window_s: Option<f64>,
    /// Energy counter difference over the steady window / its length, per GPU.
    pub avg_power_w_per_gpu: Vec<Option<f64>>,
    /// Mean of NVML power readings in the steady window, per GPU (a cross-check).
    pub avg_power_w_per_gpu_sampled: Vec<Option<f64>>,
    pub avg_sm_clock_mhz_per_gpu: Vec<Option<f64>>,
    pub avg_gpu_util_pct_per_gpu: Vec<Option<f64>>,
    /// All sampled GPUs together, per step and per token, over the steady window.
    pub energy_j_per_step: Option<f64>,
    pub energy_j_per_token: Option<f64>,
    /// NVML samples taken, per GPU, and the rate asked for.
    pub n_nvml_samples: u64,
    pub nvml_sample_hz: f64,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Machine {
    pub hostname: Option<String>,
    pub gpu_name: Option<String>,
    /// GPUs sampled (those visible to the job).
    pub n_gpus: u32,
    /// Their NVML indices and UUIDs.
    pub gpu_indices: Vec<u32>,
    pub gpu_uuids: Vec<String>,
    pub driver_version: Option<String>,
    /// The CUDA version the driver supports, e.g. `13.0`.
    pub cuda_driver_version: Option<String>,
    pub power_limit_w: Option<f64>,
    pub memory_total_bytes: Option<f64>,
    /// Why NVML gave nothing, when it did not.
    pub nvml_error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Job {
    pub command: Vec<String>,
    pub cwd: Option<String>,
    /// UTC, RFC 3339, when the job started.
    pub started_utc: String,
    pub duration_s: f64,
    /// Environment variables that change what runs (CUDA_VISIBLE_DEVICES, NCCL_*, PYTORCH_*).
    pub env: BTreeMap<String, String>,
    /// key=value facts the job printed about itself (the reference workload's `config` line,
    /// its parameter count, torch version).
    pub reported: BTreeMap<String, String>,
    /// The first out-of-memory line seen, if any.
    pub oom_line: Option<String>,
    /// The last lines of output, when the job failed.
    pub tail: Vec<String>,
    pub log_file: Option<String>,
    pub gpuplan_version: String,
}

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("cannot write `{path}`")]
    Write { path: String, source: std::io::Error },
    #[error("cannot read `{path}`")]
    Read { path: String, source: std::io::Error },
    #[error("{path}:{line}: not a run record")]
    Parse { path: String, line: usize, source: serde_json::Error },
    #[error("{path}:{line}: `schema_version` = {found}, this gpuplan reads {SCHEMA_VERSION}")]
    Version { path: String, line: usize, found: u64 },
}

/// Append one record as one line, under an exclusive lock, never touching what is there.
pub fn append(path: &Path, rec: &RunRecord) -> Result<(), RecordError> {
    let werr = |source| RecordError::Write { path: path.display().to_string(), source };
    let mut line = serde_json::to_string(rec).expect("a run record serializes");
    line.push('\n');
    let mut f = std::fs::OpenOptions::new().create(true).read(true).append(true).open(path).map_err(werr)?;
    f.lock().map_err(werr)?;
    // If the file does not end in a newline (a torn or hand-edited last line), start a new one.
    let len = f.metadata().map_err(werr)?.len();
    if len > 0 {
        let mut last = [0u8; 1];
        f.seek(SeekFrom::Start(len - 1)).map_err(werr)?;
        f.read_exact(&mut last).map_err(werr)?;
        if last[0] != b'\n' {
            line.insert(0, '\n');
        }
    }
    f.write_all(line.as_bytes()).map_err(werr)?;
    f.sync_data().map_err(werr)?;
    f.unlock().map_err(werr)?;
    Ok(())
}

/// Read every record of a `.jsonl` file (blank lines skipped).
pub fn read_all(path: &Path) -> Result<Vec<RunRecord>, RecordError> {
    let p = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| RecordError::Read { path: p.clone(), source })?;
    parse_jsonl(&p, &text)
}

pub fn parse_jsonl(path: &str, text: &str) -> Result<Vec<RunRecord>, RecordError> {
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(l).map_err(|source| RecordError::Parse { path: path.into(), line: i + 1, source })?;
        let found = v.get("schema_version").and_then(|x| x.as_u64()).unwrap_or(0);
        if found != u64::from(SCHEMA_VERSION) {
            return Err(RecordError::Version { path: path.into(), line: i + 1, found });
        }
        out.push(serde_json::from_value(v).map_err(|source| RecordError::Parse { path: path.into(), line: i + 1, source })?);
    }
    Ok(out)
}

impl RunRecord {
    /// Ran to the end and gave step times.
    pub fn is_ok(&self) -> bool {
        self.status == "ok"
    }
    pub fn is_oom(&self) -> bool {
        self.status == "oom"
    }
}
