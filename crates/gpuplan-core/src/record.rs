//! The run record: the measured-run document `gpuplan measure` writes and `validate` reads (types
//! only; reading and writing `.jsonl` files is `gpuplan_gpu::measure::record`). One JSON object per measured run, one per line in a `.jsonl` file. Its format
//! is documented in `calibration/runs/FORMAT.md`; bump `SCHEMA_VERSION` when a key changes meaning
//! or goes away (adding keys does not bump it).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::hardware::profile::HostProbe;
use crate::units::{Bytes, Seconds, Watts};

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

/// What ran, in the terms `gpuplan predict` takes (its flag names, snake_case).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Scenario {
    /// Model name in the catalog (`models/`), or the absolute path of the model file.
    pub model: Option<String>,
    /// When `model` is a file rather than a catalog name: its path and text as measured, so the
    /// record validates from any folder and on any machine (`validate` prefers this copy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_file: Option<ModelFile>,
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
    /// Where a Hugging Face Trainer log's step time came from: `tqdm-redraw-gaps` (the time
    /// between the progress bar's redraws over the steps between their counts) or
    /// `train_steps_per_second` (the Trainer's final metrics dict: the whole run, warm-up
    /// included; only where no bar was seen). Absent for the other formats (their step lines).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_time_source: Option<String>,
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

/// A model file kept inside a run record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelFile {
    /// Absolute path when measured; a `.json` path is read as an HF `config.json`, else as TOML.
    pub path: String,
    pub text: String,
}

/// A host probe taken in a run's own period: the quantities of
/// [`HostProbe`] by the same definitions, measured in the
/// run's process (see [`RunRecord::host_probe`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunHostProbe {
    pub sdpa_cudnn_plan: Seconds,
    pub hf_decode_layer: Seconds,
    pub hf_decode_fixed: Seconds,
    pub op_dispatch: Seconds,
    /// The host's speedometer (hf_train.py's `speedo()`, a fixed pure-Python loop) over the timed
    /// steps against the same loop in the probes: `host_steps_speedo_us / host_probe_speedo_us`,
    /// where the job reported both (runs from hf-147 on). Above 1 the host ran slower during the
    /// steps than while it was probed.
    pub steps_over_probe: Option<f64>,
}

/// How a decode step's host time follows the host's speedometer (hf_train.py's `speedo()`, a
/// fixed pure-Python loop): the step scales as (speedometer ratio)^this. Fitted on the host-regime
/// diagnostic (lent H100, 2026-11-24, scripts/device_host_regime.sh,
/// calibration/runs/hf/raw/host-regime-h100-2026-11-24/host-regime.csv), whose processes time the
/// same loop between real decode steps: per process, the median step of the rows whose loop ran
/// under 1,050 us (fast) and of those at 1,300 us or more (slow), ln(step ratio) / ln(loop ratio):
/// Llama-3.2-1B b1 kv512 0.444 (49.6 -> 62.7 ms at 957 -> 1,623 us), TinyLlama b1 kv4096 0.410
/// (50.3 -> 62.6 at 954 -> 1,626), Qwen3-1.7B b4 kv2048 0.576 (57.9 -> 79.0 at 946 -> 1,622); the
/// median. Below 1: the pure-Python loop slows by more than the step (binned the same way, the
/// probe's plan build 0.61-0.68 and its flash-forced step 0.50-0.65, each timed beside the loop).
/// Chosen after post-fit 8 (hf-147..156) came back, which had been scored under an elasticity of 1
/// fixed before it ran (calibration/runs/hf/FIT.md "Ninth pass"); post-fit 9 was measured after.
pub const HOST_SPEEDO_ELASTICITY: f64 = 0.444;

impl RunHostProbe {
    /// The `job.reported` keys it is read from.
    pub const KEYS: [&'static str; 4] = ["host_probe_plan_us", "host_probe_layer_us", "host_probe_fixed_us", "host_probe_op_dispatch_us"];
    /// The speedometer's keys (both or neither): the probes' and the timed steps'.
    pub const SPEEDO_KEYS: [&'static str; 2] = ["host_probe_speedo_us", "host_steps_speedo_us"];

    /// The node's host profile as the host ran in the run's period: the probe's plan build and op
    /// dispatch in place of the profile's, and the profile's per-layer and fixed decode host times
    /// (and `generate()`'s extras) scaled by the probe's whole one-token step of the probe model at
    /// 10 layers (`fixed + 10 x layer`) over the profile's. The step, not the probe's slope and
    /// intercept themselves: those are a difference of two short timings and scatter by +-40% from
    /// probe to probe (calibration/runs/hf/raw/postfit-6/), the 10-layer step by far less.
    ///
    /// Where the job also timed the host's speedometer ([`Self::steps_over_probe`]), every one of
    /// those host times is scaled by the ratio to the power [`HOST_SPEEDO_ELASTICITY`]: the host
    /// runs whole periods slower or faster, switching within seconds (hf-122: 53 -> 85 -> 52 ms), and
    /// the probes a few seconds before and after the steps need not share the steps' period.
    pub fn applied_to(&self, profile: &HostProbe) -> HostProbe {
        let step = |fixed: Seconds, layer: Seconds| fixed + layer * 10.0;
        let prof = step(profile.hf_decode_fixed, profile.hf_decode_layer);
        let k = if prof > Seconds::ZERO { step(self.hf_decode_fixed, self.hf_decode_layer) / prof } else { 1.0 };
        let v = self.steps_over_probe.map_or(1.0, |r| r.powf(HOST_SPEEDO_ELASTICITY));
        let speedo = match self.steps_over_probe {
            Some(r) => format!("; the steps' host speedometer {r:.3}x the probes', every host time x {v:.3} (^{HOST_SPEEDO_ELASTICITY})"),
            None => String::new(),
        };
        HostProbe {
            provenance: format!("{}; in this run's period (its own host probe, job.reported.host_probe_*): cuDNN plan build and op dispatch as probed, decode host times x {k:.3}{speedo}", profile.provenance),
            hf_decode_layer: profile.hf_decode_layer * (k * v),
            hf_decode_fixed: profile.hf_decode_fixed * (k * v),
            hf_generate_layer: profile.hf_generate_layer * (k * v),
            hf_generate_fixed: profile.hf_generate_fixed * (k * v),
            sdpa_cudnn_plan: self.sdpa_cudnn_plan * v,
            op_dispatch: self.op_dispatch * v,
            in_period: true,
        }
    }
}

/// The memory a decode process holds on its GPU outside PyTorch's caching allocator: the CUDA
/// context, loaded kernel modules, and the cuBLAS/cuDNN handles' own memory, which NVML's `memory
/// used` counts and `torch.cuda.max_memory_reserved` does not. Measured, not fitted: 698.8 MiB,
/// the median of the NVML peak less `max_memory_reserved` over the 28 hf decode runs without an
/// in-process host probe whose NVML peak is not below their reserved peak (calibration/runs/hf/:
/// hf.jsonl hf-020..030 but -023 and -025, hf-054..056; postfit.jsonl hf-067..069; postfit-2
/// hf-081; postfit-3 hf-089..093; postfit-4 hf-108, -109, -111..113; postfit-5 hf-114, -115;
/// lent H100 and H200, driver 580.159, torch 2.11.0+cu130, 2026-11-24; range 696.8-700.8 MiB).
/// Runs whose job also took the host probe hold 4-8 MiB more (702.8-706.8 MiB in post-fit 6, 8
/// and 9 where their NVML peak is their own: the probe's kernels stay loaded). The hf training
/// runs hold 0.75 GiB, prefill 0.68: this value is for decode, the one mode hf_train.py probes in.
/// Used by [`RunRecord::scored_peak_memory`] for a record with a probe that did not time its own
/// (`RUN_END_KEYS`).
pub const DECODE_NON_ALLOCATOR: Bytes = Bytes::new(732_758_016.0);

/// Which measured value a run's peak memory is scored against ([`RunRecord::scored_peak_memory`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PeakSource {
    /// The busiest GPU's NVML peak: every record whose job took no in-process host probe.
    Nvml,
    /// The job's own allocator peak (the largest `max_memory_reserved` of its ranks) plus its
    /// memory outside the allocator: the job's own NVML used less `memory_reserved` read just
    /// before its after-probe (`own`, `job.reported.run_end_*`), else [`DECODE_NON_ALLOCATOR`].
    Reserved { reserved: Bytes, non_allocator: Bytes, own: bool },
    /// The job took an in-process probe but recorded no reserved peak: the NVML peak, which may
    /// be the probe's.
    NvmlProbeUnchecked,
}

impl PeakSource {
    /// What the run was scored against, for `validate`'s output; `None` for the NVML peak of a
    /// record without a probe (the rule every older record is scored by).
    pub fn describe(&self) -> Option<String> {
        let gib = |b: Bytes| b.as_gib();
        match *self {
            PeakSource::Nvml => None,
            PeakSource::Reserved { reserved, non_allocator, own } => Some(format!(
                "the job's own peak: max_memory_reserved {:.3} GiB + {:.3} GiB outside the allocator ({}); the NVML peak is not used: the job's in-process host probe ran on the same GPU",
                gib(reserved),
                gib(non_allocator),
                if own { "the job's NVML used less memory_reserved before its after-probe, job.reported.run_end_*" } else { "DECODE_NON_ALLOCATOR, measured on hf decode runs without a probe" }
            )),
            PeakSource::NvmlProbeUnchecked => {
                Some("the NVML peak, which may be the in-process host probe's: the record has no max_memory_reserved to score the job's own peak by".into())
            }
        }
    }
}

impl RunRecord {
    /// The stack (and, for torchao float8, the precision) of a record whose job reported a Hugging
    /// Face transformers stack (`job.reported.hf_stack`, written by scenarios/workloads/hf_train.py):
    /// the records of calibration/runs/hf/ say `torch-eager`/`torch-compile` in their scenario (the
    /// stacks that existed when they were measured) and the true one in the job's report, which is
    /// left as measured. `hf-eager`, `hf-eager-loop`, `hf-eager-generate` -> `hf-eager`;
    /// `hf-compile` -> `hf-compile`; `hf-compile-fp8` (torchao `convert_to_float8_training`,
    /// tensorwise dynamic scaling, under `torch.compile`) -> `hf-compile` at precision fp8 with the
    /// tensorwise recipe; `hf-compile-fp8-rowwise` (hf_train.py `--fp8-recipe rowwise`) likewise with
    /// the rowwise recipe ([`Self::hf_fp8_recipe`]). `None` for any other record.
    pub fn hf_stack(&self) -> Option<(&'static str, Option<&'static str>)> {
        let hf = self.job.reported.get("hf_stack")?;
        Some(match hf.as_str() {
            "hf-compile-fp8" | "hf-compile-fp8-rowwise" => ("hf-compile", Some("fp8")),
            s if s.starts_with("hf-compile") => ("hf-compile", None),
            s if s.starts_with("hf-eager") => ("hf-eager", None),
            _ => return None,
        })
    }
    /// Whether the job was a Hugging Face Trainer run of an hf-* stack (its scenario's, or the one
    /// [`Self::hf_stack`] reads) in training: its log read as
    /// the Trainer's (`metrics.log_format` `hf-trainer`: its tqdm bar and metrics dict), or its job
    /// reported `hf_loop=trainer` (scenarios/workloads/hf_trainer.py).
    pub fn hf_trainer(&self) -> bool {
        let hf = self.hf_stack().is_some() || self.scenario.stack.as_deref().is_some_and(|s| s.starts_with("hf-"));
        hf && self.scenario.mode == "train"
            && (self.metrics.log_format.as_deref() == Some("hf-trainer") || self.job.reported.get("hf_loop").is_some_and(|v| v == "trainer"))
    }
    /// The torchao float8 recipe of a record whose job reported an `hf-compile-fp8*` stack:
    /// `rowwise` for `hf-compile-fp8-rowwise`, else `tensorwise`; `None` for any other record.
    pub fn hf_fp8_recipe(&self) -> Option<&'static str> {
        match self.job.reported.get("hf_stack")?.as_str() {
            "hf-compile-fp8-rowwise" => Some("rowwise"),
            "hf-compile-fp8" => Some("tensorwise"),
            _ => None,
        }
    }
    /// Tokens each sequence generated in a decode run, from the cache lengths its job reported
    /// (`cache_len_end - cache_len_start`, scenarios/workloads/hf_train.py); `None` when it
    /// reported none.
    pub fn decode_tokens(&self) -> Option<u64> {
        let len = |k: &str| self.job.reported.get(k)?.parse::<u64>().ok();
        len("cache_len_end")?.checked_sub(len("cache_len_start")?).filter(|&n| n > 0)
    }
    /// The host probe the job took in its own period (`job.reported.host_probe_*`, written by
    /// scenarios/workloads/hf_train.py `--host-probe`: the mean of a short form of `calibrate
    /// --host`'s probe before the model is built and after the timed steps). `Ok(None)` when the job
    /// reported none; an error names the key whose value is missing or not a number.
    pub fn host_probe(&self) -> Result<Option<RunHostProbe>, String> {
        let rep = &self.job.reported;
        if !RunHostProbe::KEYS.iter().any(|k| rep.contains_key(*k)) {
            return Ok(None);
        }
        let us = |k: &str| -> Result<Seconds, String> {
            let v = rep.get(k).ok_or_else(|| format!("`job.reported.{k}` is missing (the record has other `host_probe_*` keys)"))?;
            match v.parse::<f64>() {
                Ok(x) if x.is_finite() => Ok(Seconds::us(x)),
                _ => Err(format!("`job.reported.{k}` = `{v}` is not a number of microseconds")),
            }
        };
        let [probe_k, steps_k] = RunHostProbe::SPEEDO_KEYS;
        let steps_over_probe = match (self.reported_positive(probe_k, "microseconds")?, self.reported_positive(steps_k, "microseconds")?) {
            (None, None) => None,
            (Some(probe), Some(steps)) => Some(steps / probe),
            (probe, _) => {
                let missing = if probe.is_some() { steps_k } else { probe_k };
                return Err(format!("`job.reported.{missing}` is missing (the record has the other speedometer key; hf_train.py --host-probe writes both)"));
            }
        };
        Ok(Some(RunHostProbe {
            sdpa_cudnn_plan: us("host_probe_plan_us")?,
            hf_decode_layer: us("host_probe_layer_us")?,
            hf_decode_fixed: us("host_probe_fixed_us")?,
            op_dispatch: us("host_probe_op_dispatch_us")?,
            steps_over_probe,
        }))
    }
    /// The `job.reported` keys hf_train.py --host-probe (decode) prints just before its
    /// after-probe, with the model and its cache still held: `torch.cuda.memory_reserved()` and
    /// the GPU's NVML `memory used` (`torch.cuda.device_memory_used()`); or, where NVML could not
    /// be read there, `run_end_nvml_error` in place of the second.
    pub const RUN_END_KEYS: [&'static str; 2] = ["run_end_reserved_bytes", "run_end_nvml_used_bytes"];

    /// The `job.reported` keys of the job's own idle power (scenarios/workloads/hf_train.py
    /// --host-probe or --idle-power: NVML's energy counter over `idle_energy_s` seconds of sleep with
    /// the CUDA context open, before the model is built).
    pub const IDLE_KEYS: [&'static str; 2] = ["idle_w", "idle_energy_s"];

    /// The idle power the job measured on its own GPU (`job.reported.idle_w`), with the seconds it
    /// was averaged over. `Ok(None)` for a record without it (every record before post-fit 12, and
    /// a job whose NVML could not be read: `idle_error`); an error names a key that is not a
    /// positive number of watts (or seconds), or the seconds missing beside the watts.
    pub fn own_idle_power(&self) -> Result<Option<(Watts, Seconds)>, String> {
        let [w_k, s_k] = Self::IDLE_KEYS;
        let Some(watts) = self.reported_positive(w_k, "watts")? else {
            return Ok(None);
        };
        let secs = self
            .reported_positive(s_k, "seconds")?
            .ok_or_else(|| format!("`job.reported.{s_k}` is missing beside `job.reported.{w_k}` (hf_train.py writes both)"))?;
        Ok(Some((Watts::new(watts), Seconds::new(secs))))
    }

    /// `job.reported.{key}` as a positive number of `unit`: `Ok(None)` when the job did not report
    /// it, an error naming the key and the value when it is not a finite number above zero.
    fn reported_positive(&self, key: &str, unit: &str) -> Result<Option<f64>, String> {
        match self.job.reported.get(key) {
            None => Ok(None),
            Some(v) => match v.parse::<f64>() {
                Ok(x) if x.is_finite() && x > 0.0 => Ok(Some(x)),
                _ => Err(format!("`job.reported.{key}` = `{v}` is not a positive number of {unit}")),
            },
        }
    }

    /// Whether the job took a host probe in its own process (any `job.reported.host_probe_*`
    /// key, an error of the probe's included): the probe's tensors then share the GPU and the
    /// NVML peak with the job's.
    pub fn took_in_process_probe(&self) -> bool {
        self.job.reported.keys().any(|k| k.starts_with("host_probe_"))
    }

    /// The peak memory a run is scored against, and which value that is. A record without an
    /// in-process probe: the busiest GPU's NVML peak (context and allocator cache included), as
    /// always. A record with one: NVML saw the probe's allocations too (the after-probe's batch-64
    /// SDPA shapes hold about 2.96 GiB, more than a small batch-1 decode job), so the job's own
    /// peak is its allocator's (`max_memory_reserved`, read before the after-probe) plus what it
    /// holds outside the allocator ([`PeakSource::Reserved`]); without a reserved peak, NVML's with
    /// a note. `Ok(None)` when nothing was measured; an error names a `run_end_*` key that is
    /// missing beside the other or is not a number of bytes.
    pub fn scored_peak_memory(&self) -> Result<Option<(Bytes, PeakSource)>, String> {
        let max = |v: &[Option<f64>]| v.iter().flatten().copied().filter(|x| x.is_finite()).fold(None, |a: Option<f64>, x| Some(a.map_or(x, |a| a.max(x))));
        let nvml = max(&self.metrics.peak_mem_bytes_per_gpu_nvml).map(Bytes::new);
        if !self.took_in_process_probe() {
            return Ok(nvml.map(|b| (b, PeakSource::Nvml)));
        }
        let Some(reserved) = max(&self.metrics.peak_mem_reserved_bytes_per_rank).filter(|x| *x > 0.0).map(Bytes::new) else {
            return Ok(nvml.map(|b| (b, PeakSource::NvmlProbeUnchecked)));
        };
        let rep = &self.job.reported;
        let bytes = |k: &str| self.reported_positive(k, "bytes");
        let [reserved_k, used_k] = Self::RUN_END_KEYS;
        let non_allocator = match (bytes(reserved_k)?, bytes(used_k)?) {
            (Some(r), Some(u)) if u > r => Some(Bytes::new(u - r)),
            (Some(r), Some(u)) => {
                return Err(format!("`job.reported.{used_k}` = {u} is not above `job.reported.{reserved_k}` = {r}: NVML's memory used holds the allocator's reserved memory and the CUDA context"));
            }
            (None, None) => None,
            (Some(_), None) if rep.contains_key("run_end_nvml_error") => None,
            (has_reserved, _) => {
                let missing = if has_reserved.is_some() { used_k } else { reserved_k };
                return Err(format!("`job.reported.{missing}` is missing (the record has the other `run_end_*` key; hf_train.py --host-probe writes both, or `run_end_nvml_error`)"));
            }
        };
        let own = non_allocator.is_some();
        let non_allocator = non_allocator.unwrap_or(DECODE_NON_ALLOCATOR);
        Ok(Some((reserved + non_allocator, PeakSource::Reserved { reserved, non_allocator, own })))
    }
    /// Ran to the end and gave step times.
    pub fn is_ok(&self) -> bool {
        self.status == "ok"
    }
    pub fn is_oom(&self) -> bool {
        self.status == "oom"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_probe_replaces_the_plan_and_scales_the_layers_by_its_10_layer_step() {
        let profile = HostProbe {
            provenance: "p".into(),
            hf_decode_layer: Seconds::us(600.0),
            hf_decode_fixed: Seconds::us(1000.0),
            hf_generate_layer: Seconds::us(50.0),
            hf_generate_fixed: Seconds::us(300.0),
            sdpa_cudnn_plan: Seconds::us(54000.0),
            op_dispatch: Seconds::us(10.0),
            in_period: false,
        };
        // The probe's 10-layer step: 500 + 10 x 900 = 9,500 us against the profile's 7,000.
        let run = RunHostProbe {
            sdpa_cudnn_plan: Seconds::us(40000.0),
            hf_decode_layer: Seconds::us(900.0),
            hf_decode_fixed: Seconds::us(500.0),
            op_dispatch: Seconds::us(7.0),
            steps_over_probe: None,
        };
        let h = run.applied_to(&profile);
        let k = 9500.0 / 7000.0;
        assert!(h.in_period);
        assert_eq!(h.sdpa_cudnn_plan, Seconds::us(40000.0));
        assert_eq!(h.op_dispatch, Seconds::us(7.0));
        assert!((h.hf_decode_layer / Seconds::us(600.0 * k) - 1.0).abs() < 1e-12);
        assert!((h.hf_decode_fixed / Seconds::us(1000.0 * k) - 1.0).abs() < 1e-12);
        assert!((h.hf_generate_fixed / Seconds::us(300.0 * k) - 1.0).abs() < 1e-12);
        // The steps' speedometer 1.6x the probes': every host time x 1.6^HOST_SPEEDO_ELASTICITY.
        let slow = RunHostProbe { steps_over_probe: Some(1.6), ..run }.applied_to(&profile);
        let v = 1.6f64.powf(HOST_SPEEDO_ELASTICITY);
        assert!(v > 1.2 && v < 1.3, "{v}");
        assert!((slow.sdpa_cudnn_plan / Seconds::us(40000.0 * v) - 1.0).abs() < 1e-12);
        assert!((slow.op_dispatch / Seconds::us(7.0 * v) - 1.0).abs() < 1e-12);
        assert!((slow.hf_decode_layer / Seconds::us(600.0 * k * v) - 1.0).abs() < 1e-12);
        assert!((slow.hf_generate_layer / Seconds::us(50.0 * k * v) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn a_float8_record_keeps_its_recipe() {
        let rec = |stack: &str| {
            let mut r = RunRecord {
                schema_version: SCHEMA_VERSION,
                run_id: None,
                split: None,
                status: "ok".into(),
                exit_code: Some(0),
                signal: None,
                scenario: Scenario::default(),
                metrics: Metrics::default(),
                machine: Machine::default(),
                job: Job::default(),
                note: None,
                serve: None,
            };
            r.job.reported.insert("hf_stack".into(), stack.into());
            r
        };
        assert_eq!(rec("hf-compile-fp8-rowwise").hf_stack(), Some(("hf-compile", Some("fp8"))));
        assert_eq!(rec("hf-compile-fp8-rowwise").hf_fp8_recipe(), Some("rowwise"));
        assert_eq!(rec("hf-compile-fp8").hf_fp8_recipe(), Some("tensorwise"));
        assert_eq!(rec("hf-compile").hf_fp8_recipe(), None);
        assert_eq!(rec("hf-eager").hf_stack(), Some(("hf-eager", None)));
    }
}
