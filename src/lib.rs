//! gpuplan: simulator and capacity planner for LLM training and inference on GPU clusters.
//!
//! The binary's library: `cli` (flags, scenario building, printing, files) over the workspace's
//! crates, re-exported under their module names so `gpuplan::config`, `gpuplan::analytic`, ...
//! name one thing each:
//! - `gpuplan-core`: units, hardware, model, workload, parallelism, memory, power, cost,
//!   analytic, sim, plan, goodput, serve, validate, scenario, record, limits;
//! - `gpuplan-config`: wire formats and the catalog (`config`);
//! - `gpuplan-report`: reports, charts, traces (`report`; `sim::trace`, `sim::timeline`);
//! - `gpuplan-gpu`: `calibrate` and `measure`.
//!
//! Only `cli` prints, exits or reads the environment.

pub use gpuplan_config as config;
pub use gpuplan_core::{
    analytic, cost, deploy, goodput, hardware, limits, memory, model, parallelism, plan, power, record, scenario, serve, units, validate, workload,
};
pub use gpuplan_gpu::{calibrate, measure};
pub use gpuplan_report as report;

/// The discrete-event engine (`gpuplan_core::sim`) with its renderers (`gpuplan_report`).
pub mod sim {
    pub use gpuplan_core::sim::*;
    pub use gpuplan_report::{timeline, trace};
}

pub mod cli;
