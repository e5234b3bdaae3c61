//! Constants fitted on measured runs, and the one way to change them at run time: the environment
//! variable `GPUPLAN_FIT_CONSTANTS` (e.g. `dtensor_linear_us=225,50;overlap_cost=1.0`), read once
//! per process, for the scripts that refit them (`scripts/fit_training_constants.py`). When it is
//! set, every process says so on stderr; nothing else reads it.

use std::sync::OnceLock;

/// Fitted values in effect.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fitted {
    /// See [`crate::cost::lower::DTENSOR_LINEAR_US`].
    pub dtensor_linear_us: [f64; 2],
    /// See [`crate::analytic::OVERLAP_COST`].
    pub overlap_cost: f64,
}

pub const VAR: &str = "GPUPLAN_FIT_CONSTANTS";

/// The shipped values, or those `GPUPLAN_FIT_CONSTANTS` sets (a malformed value is reported on
/// stderr and ignored).
pub fn fitted() -> Fitted {
    static F: OnceLock<Fitted> = OnceLock::new();
    *F.get_or_init(|| {
        let shipped = Fitted { dtensor_linear_us: crate::cost::lower::DTENSOR_LINEAR_US, overlap_cost: crate::analytic::OVERLAP_COST };
        match std::env::var(VAR) {
            Err(_) => shipped,
            Ok(text) => match parse(&text, shipped) {
                Ok(f) => {
                    eprintln!("gpuplan: {VAR} overrides fitted constants: {f:?}");
                    f
                }
                Err(e) => {
                    eprintln!("gpuplan: ignoring {VAR}=`{text}`: {e}\nhint: `dtensor_linear_us=A,B;overlap_cost=X`");
                    shipped
                }
            },
        }
    })
}

fn parse(text: &str, mut f: Fitted) -> Result<Fitted, String> {
    for item in text.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        let (key, value) = item.split_once('=').ok_or_else(|| format!("`{item}` is not KEY=VALUE"))?;
        let nums: Vec<f64> = value.split(',').map(|v| v.trim().parse::<f64>().map_err(|_| format!("`{v}` in `{item}` is not a number"))).collect::<Result<_, _>>()?;
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
