//! Constants fitted on measured runs that a refit script may override, as data: the binary reads
//! the environment variable `GPUPLAN_FIT_CONSTANTS` (e.g. `dtensor_linear_us=225,50;overlap_cost=1.0`)
//! once, parses it with [`parse`] and [`install`]s the result before anything is priced (for the
//! scripts that refit them, `scripts/fit_training_constants.py`). Nothing here reads the
//! environment or prints.

use std::sync::OnceLock;

/// How much slower compute runs beside a data-parallel collective that overlaps it, as a fraction
/// of the overlapped collective's time: NCCL's kernels hold SMs (one CTA per channel, ~24 of 132),
/// its copies take HBM bandwidth, and at the power cap its power takes clock from the GEMMs.
/// Fitted on the DDP/FSDP runs of the fit split of calibration/runs/h200.jsonl (2 and 4 H200,
/// 0.5B-8B; squared relative step-time error over 0.18, 0.4, ..., 1.2 by
/// scripts/fit_training_constants.py): 1.0, i.e. overlapping the
/// gradient and parameter collectives with compute saves nothing on these power-capped GPUs (the
/// measured step over the single-GPU run grows by about the whole collective time). It was 0.18,
/// the SM share alone (an estimate). With 1.0: the DP test-split runs -8.0, +6.7, -4.3, -8.4%
/// (were -10.8, -9.4, -14.1, -13.4%), and the published training throughput table (nothing fitted
/// on it) 7.8% MAPE (was 9.7%).
pub const OVERLAP_COST: f64 = 1.0;

/// Fitted values in effect.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fitted {
    /// See [`crate::cost::lower::DTENSOR_LINEAR_US`].
    pub dtensor_linear_us: [f64; 2],
    /// See [`OVERLAP_COST`].
    pub overlap_cost: f64,
}

/// The environment variable the binary reads the overrides from.
pub const VAR: &str = "GPUPLAN_FIT_CONSTANTS";

/// The values as shipped.
pub const SHIPPED: Fitted = Fitted { dtensor_linear_us: crate::cost::lower::DTENSOR_LINEAR_US, overlap_cost: OVERLAP_COST };

static INSTALLED: OnceLock<Fitted> = OnceLock::new();

/// Set the values in effect for this process (once, before the first prediction); `Err` with the
/// values already in effect when called again.
pub fn install(f: Fitted) -> Result<(), Fitted> {
    INSTALLED.set(f).map_err(|_| fitted())
}

/// The values in effect: those [`install`]ed, else the shipped ones.
pub fn fitted() -> Fitted {
    *INSTALLED.get().unwrap_or(&SHIPPED)
}

/// Parse `KEY=V[,V];...` over `f` (`dtensor_linear_us=A,B`, `overlap_cost=X`).
pub fn parse(text: &str, mut f: Fitted) -> Result<Fitted, String> {
    for item in text.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        let (key, value) = item.split_once('=').ok_or_else(|| format!("`{item}` is not KEY=VALUE"))?;
        let nums: Vec<f64> =
            value.split(',').map(|v| v.trim().parse::<f64>().map_err(|_| format!("`{v}` in `{item}` is not a number"))).collect::<Result<_, _>>()?;
        match (key.trim(), nums.as_slice()) {
            ("dtensor_linear_us", [a, b]) => f.dtensor_linear_us = [*a, *b],
            ("overlap_cost", [x]) => f.overlap_cost = *x,
            (k, _) => return Err(format!("unknown key or wrong count of values: `{k}`")),
        }
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_parse_and_bad_ones_are_errors() {
        let base = Fitted { dtensor_linear_us: [1.0, 2.0], overlap_cost: 0.5 };
        let f = parse("dtensor_linear_us=225,50; overlap_cost=1.0", base).unwrap();
        assert_eq!(f, Fitted { dtensor_linear_us: [225.0, 50.0], overlap_cost: 1.0 });
        assert_eq!(parse("", base).unwrap(), base);
        assert!(parse("overlap_cost=1,2", base).is_err());
        assert!(parse("overlap=1", base).is_err());
        assert!(parse("overlap_cost=x", base).is_err());
    }
}
