//! gpuplan: simulator and capacity planner for LLM training and inference on GPU clusters.
//!
//! Data flows one way: `config` reads files into domain types (`hardware`, `model`); `workload`
//! turns a model and a mode into an op list; `parallelism` shards it; `cost` prices each op;
//! `analytic` adds it up into a `Prediction`. Only `cli` prints or exits.

pub mod analytic;
pub mod calibrate;
pub mod cli;
pub mod config;
pub mod cost;
pub mod hardware;
pub mod measure;
pub mod memory;
pub mod model;
pub mod parallelism;
pub mod plan;
pub mod power;
pub mod report;
pub mod scenario;
pub mod serve;
pub mod sim;
pub mod units;
pub mod validate;
pub mod workload;
