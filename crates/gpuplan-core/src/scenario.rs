//! A scenario: what to predict. Model + system + parallel layout + workload (+ a measured profile).
//! Built by `config::scenario` from a scenario file and flags; read by both engines.

use crate::hardware::profile::Profile;
use crate::hardware::System;
use crate::model::Model;
use crate::parallelism::ParallelConfig;
use crate::workload::Workload;

#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Overlap TP collectives with the GEMMs next to them (Megatron `--tp-comm-overlap`).
    pub tp_comm_overlap: bool,
    /// Overlap the DP gradient reduction with backward (DDP and Megatron default: on).
    pub dp_overlap: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options { tp_comm_overlap: false, dp_overlap: true }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    pub name: String,
    pub model: Model,
    pub system: System,
    pub n_gpus: u64,
    pub parallel: ParallelConfig,
    pub workload: Workload,
    pub profile: Option<Profile>,
    pub options: Options,
}
