//! Percentiles over repetitions.

/// p10, p50 and p90 of a sample (linear interpolation between order statistics).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Percentiles {
    pub p10: f64,
    pub p50: f64,
    pub p90: f64,
}

impl Percentiles {
    /// `None` for an empty sample or one holding a non-finite value.
    pub fn of(sample: &[f64]) -> Option<Percentiles> {
        if sample.is_empty() || sample.iter().any(|x| !x.is_finite()) {
            return None;
        }
        let mut v = sample.to_vec();
        v.sort_by(|a, b| a.total_cmp(b));
        Some(Percentiles { p10: quantile(&v, 0.1), p50: quantile(&v, 0.5), p90: quantile(&v, 0.9) })
    }
    pub fn map(self, f: impl Fn(f64) -> f64) -> Percentiles {
        Percentiles { p10: f(self.p10), p50: f(self.p50), p90: f(self.p90) }
    }
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_sample() {
        let v: Vec<f64> = (0..=10).rev().map(f64::from).collect();
        let p = Percentiles::of(&v).unwrap();
        assert_eq!((p.p10, p.p50, p.p90), (1.0, 5.0, 9.0));
        assert_eq!(Percentiles::of(&[]), None);
        assert_eq!(Percentiles::of(&[1.0, f64::NAN]), None);
        assert_eq!(Percentiles::of(&[3.0]).unwrap().p90, 3.0);
    }
}
