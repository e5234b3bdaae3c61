//! The one integration-test binary (matklad's "delete cargo integration tests").

mod arch;
mod bad_input;
mod calibrate;
mod catalog;
mod cli;
mod cost;
mod engines;
mod fuzz;
mod goodput;
mod hf;
mod launch;
mod limits;
mod measure;
mod megatron_args;
mod per_rank;
mod pipeline;
mod plan;
mod portable;
mod published;
mod reference;
mod report;
mod serve;
mod serve_engine;
mod serving_published;
mod sim;
mod validation;
