//! The prediction document: what `predict --json` prints (and `simulate --json`, `plan --json` and
//! `compare --json` extend with their own keys), and what `report` reads. The binary's
//! `cli::predict::document` fills it from a `Prediction`; `cli::predict::to_json` turns it into a
//! `serde_json::Value`, whose objects (serde_json without `preserve_order`) print their keys in
//! sorted order: the field order here does not change the output.
//!
//! Numbers are written as serde_json writes them; a NaN or infinite `f64` is written as `null`.
//! The keys of DESIGN.md's contract keep their meaning.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Version of the document (`schema_version`).
pub const SCHEMA_VERSION: u32 = 1;

/// The versioned `predict --json` document.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PredictionDoc {
    pub schema_version: u32,
    /// Which engine made the prediction ("analytic").
    pub engine: String,
    pub scenario: ScenarioDoc,
    pub step_time_s: f64,
    pub tokens_per_s: f64,
    pub tokens_per_s_per_gpu: f64,
    pub tokens_per_step: f64,
    pub mfu: f64,
    pub hfu: f64,
    pub model_flops_per_token: f64,
    pub n_microbatches: u64,
    pub bottleneck: String,
    /// Critical-path time by part, keyed `<part>_s`.
    pub breakdown: BTreeMap<String, f64>,
    pub memory: MemoryDoc,
    pub power: PowerDoc,
    pub energy: EnergyDoc,
    /// Every hardware number the prediction used, with where it came from.
    pub sources: Vec<SourceDoc>,
    /// With `--goodput`: failures, checkpoints and restarts (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goodput: Option<GoodputDoc>,
}

/// The goodput model's result (`--goodput`), `gpuplan_core::goodput`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GoodputDoc {
    /// The reliability file (name and path) the rates came from.
    pub reliability: String,
    /// `restart` (the whole job from its checkpoint) or `replica` (the failed DP replica only).
    pub recovery: String,
    pub nodes: u64,
    pub failures_per_day: f64,
    pub mtbf_h: f64,
    pub components: Vec<FailureDoc>,
    pub checkpoint_bytes: f64,
    pub checkpoint_write_s: f64,
    /// Compute time between checkpoints, and whether it is Daly's optimum (else given).
    pub checkpoint_interval_s: f64,
    pub checkpoint_interval_optimal: bool,
    pub detect_s: f64,
    pub restart_s: f64,
    pub spare_wait_s: f64,
    /// Detection + relaunch + spare wait + checkpoint read.
    pub recovery_s: f64,
    /// Effective training-time fraction.
    pub effective_fraction: f64,
    /// Goodput-adjusted throughput.
    pub tokens_per_s: f64,
    pub tokens_per_day: f64,
    pub train: Option<TrainDoc>,
    /// The model's inputs besides the rates, with their sources.
    pub inputs: Vec<SourceDoc>,
}

/// One component's failures in the job.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FailureDoc {
    pub name: String,
    pub per: String,
    pub failures_per_unit_day: f64,
    pub units: u64,
    pub failures_per_day: f64,
    pub source: String,
}

/// Time to train `tokens`, with the band from the Poisson spread of the failure count.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TrainDoc {
    pub tokens: f64,
    pub days: f64,
    pub days_p5: f64,
    pub days_p95: f64,
    pub failures: f64,
    pub failures_p5: f64,
    pub failures_p95: f64,
    /// What the band is.
    pub band: String,
}

/// The scenario a prediction is of: names, layout and workload.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ScenarioDoc {
    pub name: String,
    pub model: String,
    pub system: String,
    pub gpus: u64,
    pub tp: u32,
    pub pp: u32,
    pub dp: u32,
    pub cp: u32,
    pub ep: u32,
    pub etp: u32,
    pub vp: u32,
    pub sp: bool,
    pub zero: u32,
    pub mode: String,
    pub micro_batch: u64,
    pub global_batch: u64,
    pub seq: u64,
    pub batch: u64,
    pub kv_len: u64,
    pub precision: String,
    pub recompute: String,
    pub stack: String,
    /// The calibration profile's name, `null` without one.
    pub calibration: Option<String>,
    /// LoRA fine-tuning: the adapters' rank (absent without LoRA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora_rank: Option<u64>,
    /// LoRA's targeted layers, Megatron-Core module names (absent without LoRA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora_targets: Option<Vec<String>>,
    /// Attention data parallelism (`--attention-dp`): the instance's sequences over the `dp`
    /// ranks (`batch` is then the busiest rank's share); absent without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_dp_batch: Option<u64>,
}

/// Memory of the peak GPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryDoc {
    pub peak_bytes_per_gpu: f64,
    pub capacity_bytes: f64,
    pub fits: bool,
    pub peak_stage: u32,
    /// Bytes by component, keyed `<component>_bytes`.
    pub components: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PowerDoc {
    pub avg_w_per_gpu: f64,
    pub node_w: f64,
    pub sm_clock_mhz: f64,
    pub power_capped: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EnergyDoc {
    pub j_per_token: f64,
    pub j_per_token_facility: f64,
    pub j_per_step: f64,
    pub kwh_per_million_tokens: f64,
}

/// One hardware number a prediction used.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SourceDoc {
    pub name: String,
    pub value: String,
    /// datasheet, measured, transferred or unsourced.
    pub kind: String,
    pub source: String,
}

/// `simulate --per-rank --json`'s `/per_rank` (and a report's `stragglers-*.json`): the
/// step-time distribution over steps, the random stragglers and the ranks that held steps back
/// (`gpuplan_core::sim::per_rank`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PerRankDoc {
    pub ranks: u64,
    pub steps: u64,
    pub seed: u64,
    /// `null` without `--stragglers`.
    pub stragglers: Option<StragglersDoc>,
    /// The step with no fault and no straggler.
    pub fault_free_step_time_s: f64,
    pub step_time_s: StepTimesDoc,
    /// Nodes per leaf switch on a rail (the system's `fabric.nodes_per_leaf` or
    /// `--nodes-per-leaf`); `null`: no leaf uplinks are modelled.
    #[serde(default)]
    pub nodes_per_leaf: Option<u32>,
    /// Whether cross-rail traffic took NCCL's PXN path (NVLink to the rail-local GPU and its
    /// NIC); `false` with `--no-pxn`. Absent (documents from before PXN was modelled, whose
    /// engine sent cross-rail traffic over the spines) reads as `false`.
    #[serde(default)]
    pub pxn: bool,
    pub held_back: Vec<HeldBackDoc>,
    pub per_step: Vec<StepDoc>,
}

/// `--stragglers K=F` and how they were drawn.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StragglersDoc {
    pub count: u64,
    pub factor: f64,
    /// `step`, `job` or the mean lifetime in steps (`--straggler-persistence`).
    pub persistence: String,
    /// The draw, in words.
    pub distribution: String,
}

/// Mean and nearest-rank percentiles of the steps' times.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepTimesDoc {
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

/// A faulted rank that held steps back, over the steps.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HeldBackDoc {
    pub rank: u64,
    pub ranks_alike: u64,
    pub fault: String,
    pub steps: u32,
    pub mean_waited_for_s: f64,
    pub mean_link_delay_s: f64,
}

/// One simulated step.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepDoc {
    pub step_time_s: f64,
    pub classes: u64,
    pub events: u64,
    pub stragglers: Vec<u64>,
    pub held_back_by: Option<u64>,
}

/// A number as a reader of the JSON text sees it: `None` where it is written as `null` (NaN or
/// infinite), as `serde_json::Value::as_f64` returns.
pub fn finite(v: f64) -> Option<f64> {
    v.is_finite().then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_json_with_sorted_keys_and_null_for_non_finite_numbers() {
        let mut d = PredictionDoc { schema_version: SCHEMA_VERSION, engine: "analytic".into(), step_time_s: 1.5, mfu: f64::NAN, ..Default::default() };
        d.breakdown.insert("compute_s".into(), 1.0);
        d.memory.components.insert("weights_bytes".into(), 2.0);
        let v = serde_json::to_value(&d).unwrap();
        assert_eq!(v["mfu"], serde_json::Value::Null);
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
        d.mfu = 0.0;
        let back: PredictionDoc = serde_json::from_value(serde_json::to_value(&d).unwrap()).unwrap();
        assert_eq!(back, d);
    }

    #[test]
    fn finite_is_none_where_json_writes_null() {
        assert_eq!(finite(2.0), Some(2.0));
        assert_eq!(finite(f64::NAN), None);
        assert_eq!(finite(f64::INFINITY), None);
    }
}
