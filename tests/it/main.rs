//! The one integration-test binary (matklad's "delete cargo integration tests").

mod arch;
mod bad_input;
mod calibrate;
mod catalog;
mod cli;
mod cost;
mod fuzz;
mod hf;
mod limits;
mod measure;
mod megatron_args;
mod pipeline;
mod plan;
mod portable;
mod published;
mod reference;
mod report;
mod serve;
mod serve_engine;
mod sim;
mod validation;
