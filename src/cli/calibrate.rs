//! `gpuplan calibrate`.

use super::Outcome;

#[derive(clap::Args, Debug)]
pub struct CalibrateArgs {}

pub fn run(_args: CalibrateArgs) -> anyhow::Result<Outcome> {
    anyhow::bail!("`gpuplan calibrate` is not built yet")
}
