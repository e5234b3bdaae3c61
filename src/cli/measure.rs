//! `gpuplan measure`.

use super::Outcome;

#[derive(clap::Args, Debug)]
pub struct MeasureArgs {}

pub fn run(_args: MeasureArgs) -> anyhow::Result<Outcome> {
    anyhow::bail!("`gpuplan measure` is not built yet")
}
