//! gpuplan-core: the model. Given domain types (what to run, where), it predicts (`analytic`),
//! simulates (`sim`), plans (`plan`), serves (`serve`) and scores (`validate`).
//!
//! Data flows one way: `workload` turns a model and a mode into an op list; `parallelism` shards
//! it; `cost` prices each op; `analytic` adds it up into a `Prediction` (`step` holds what both
//! engines share). No I/O, environment, clock or printing here: files are read by
//! `gpuplan-config`, and fitted constants that a script overrides reach `cost::fitted` as data.

pub mod analytic;
pub mod cost;
pub mod deploy;
pub mod des;
pub mod goodput;
pub mod hardware;
pub mod limits;
pub mod memory;
pub mod model;
pub mod parallelism;
pub mod plan;
pub mod power;
pub mod record;
pub mod scenario;
pub mod serve;
pub mod sim;
pub mod step;
pub mod units;
pub mod validate;
pub mod workload;
