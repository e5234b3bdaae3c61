//! What the commands print and write, rendered to strings (and charts to files): `serve`,
//! `plan` (and `compare`), `validate`, `published` (`validate --published`). The binary runs the
//! engines and prints these.

pub mod compare;
pub mod launch;
pub mod plan;
pub mod published;
pub mod serve;
pub mod serving;
pub mod torchtitan;
pub mod validate;
