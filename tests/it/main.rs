//! The one integration-test binary (matklad's "delete cargo integration tests").

mod cli;
mod plan;
mod reference;
