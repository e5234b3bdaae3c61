//! gpuplan: simulator and capacity planner for LLM training and inference on GPU clusters.
//!
//! Data flows one way: `config` reads files into domain types (`hardware`, `model`); `workload`
//! turns a model and a mode into an op list; `parallelism` shards it; `cost` prices each op;
//! `analytic` adds it up into a `Prediction`. Only `cli` prints or exits.

pub mod calibrate;
pub mod config;
pub mod hardware;
pub mod model;
pub mod units;
pub mod cli;
