//! Least-squares fits (nalgebra) of what the cost model needs.
//!
//! - latency + bytes / bandwidth: collectives per op and group size (with nccl-tests' bus factor),
//!   P2P copies, memory-bound kernels. Fitted as time = a + b * x with x the bus bytes, weighted by
//!   1/time so that small and large messages count alike in relative error.
//! - power vs activity: watts = idle + slope * activity, over the load phases.

use nalgebra::{DMatrix, DVector};

/// time = latency + x / bandwidth, in seconds and bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinearFit {
    /// Intercept (seconds).
    pub latency: f64,
    /// Bytes per second.
    pub bandwidth: f64,
    /// Root-mean-square relative error of the fit over the points.
    pub rms_rel_err: f64,
    pub n_points: usize,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FitError {
    #[error("a fit needs at least {need} points with positive size and time, got {got}")]
    TooFewPoints { need: usize, got: usize },
    #[error("the fit is degenerate (all sizes equal?)")]
    Degenerate,
    #[error("the fit's inputs are out of range (a size, time or weight that is not a finite number)")]
    NotFinite,
}

/// nalgebra's SVD panics on NaN ("Singular value was NaN"): refuse non-finite systems first.
fn finite(a: &DMatrix<f64>, b: &DVector<f64>) -> Result<(), FitError> {
    if a.iter().chain(b.iter()).all(|v| v.is_finite()) {
        Ok(())
    } else {
        Err(FitError::NotFinite)
    }
}

/// Weighted least squares of y = a + b x with weights w (minimizes sum w_i^2 (a + b x_i - y_i)^2).
pub fn weighted_line(x: &[f64], y: &[f64], w: &[f64]) -> Result<(f64, f64), FitError> {
    let n = x.len();
    let a = DMatrix::from_fn(n, 2, |i, j| if j == 0 { w[i] } else { w[i] * x[i] });
    let b = DVector::from_fn(n, |i, _| w[i] * y[i]);
    finite(&a, &b)?;
    let svd = a.svd(true, true);
    if svd.singular_values.iter().any(|s| *s < 1e-12 * svd.singular_values.max()) {
        return Err(FitError::Degenerate);
    }
    let sol = svd.solve(&b, 1e-15).map_err(|_| FitError::Degenerate)?;
    Ok((sol[0], sol[1]))
}

/// Fit time = latency + bytes / bandwidth over (bytes, seconds) points. Latency is clamped at zero
/// (refit through the origin) and bandwidth must come out positive.
pub fn latency_bandwidth(points: &[(f64, f64)]) -> Result<LinearFit, FitError> {
    let pts: Vec<(f64, f64)> = points.iter().copied().filter(|(x, t)| *x > 0.0 && *t > 0.0 && x.is_finite() && t.is_finite()).collect();
    if pts.len() < 2 {
        return Err(FitError::TooFewPoints { need: 2, got: pts.len() });
    }
    let x: Vec<f64> = pts.iter().map(|p| p.0).collect();
    let y: Vec<f64> = pts.iter().map(|p| p.1).collect();
    let w: Vec<f64> = y.iter().map(|t| 1.0 / t).collect();
    let (mut a, mut b) = weighted_line(&x, &y, &w)?;
    if a < 0.0 {
        // Through the origin: b = sum w^2 x y / sum w^2 x^2.
        let num: f64 = (0..x.len()).map(|i| w[i] * w[i] * x[i] * y[i]).sum();
        let den: f64 = (0..x.len()).map(|i| w[i] * w[i] * x[i] * x[i]).sum();
        a = 0.0;
        b = num / den;
    }
    if b.is_nan() || b <= 0.0 {
        return Err(FitError::Degenerate);
    }
    let rms = ((0..x.len()).map(|i| ((a + b * x[i]) / y[i] - 1.0).powi(2)).sum::<f64>() / x.len() as f64).sqrt();
    Ok(LinearFit { latency: a, bandwidth: 1.0 / b, rms_rel_err: rms, n_points: x.len() })
}

/// watts = intercept + slope * activity (ordinary least squares).
pub fn power_line(points: &[(f64, f64)]) -> Result<(f64, f64), FitError> {
    if points.len() < 2 {
        return Err(FitError::TooFewPoints { need: 2, got: points.len() });
    }
    let x: Vec<f64> = points.iter().map(|p| p.0).collect();
    let y: Vec<f64> = points.iter().map(|p| p.1).collect();
    weighted_line(&x, &y, &vec![1.0; x.len()])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovers_latency_and_bandwidth() {
        // 20 us + bytes / 350 GB/s, sizes 8 B .. 4 GiB, with +-1% deterministic noise.
        let pts: Vec<(f64, f64)> = (3..=32)
            .map(|e| {
                let x = 2f64.powi(e);
                let noise = 1.0 + 0.01 * ((e as f64) * 1.7).sin();
                (x, (20e-6 + x / 350e9) * noise)
            })
            .collect();
        let f = latency_bandwidth(&pts).unwrap();
        assert!((f.latency / 20e-6 - 1.0).abs() < 0.03, "{f:?}");
        assert!((f.bandwidth / 350e9 - 1.0).abs() < 0.03, "{f:?}");
        assert!(f.rms_rel_err < 0.02);
    }

    #[test]
    fn negative_intercepts_are_clamped() {
        let pts = [(1e6, 1e-6), (2e6, 2.2e-6), (4e6, 4.5e-6)];
        let f = latency_bandwidth(&pts).unwrap();
        assert_eq!(f.latency, 0.0);
        assert!(f.bandwidth > 0.0);
    }

    #[test]
    fn too_few_points() {
        assert_eq!(latency_bandwidth(&[(1.0, 1.0)]), Err(FitError::TooFewPoints { need: 2, got: 1 }));
        assert_eq!(latency_bandwidth(&[(1.0, 1.0), (1.0, 1.0)]), Err(FitError::Degenerate));
    }

    #[test]
    fn power_line_is_exact_on_a_line() {
        let (a, b) = power_line(&[(0.0, 90.0), (0.5, 395.0), (1.0, 700.0)]).unwrap();
        assert!((a - 90.0).abs() < 1e-9 && (b - 610.0).abs() < 1e-9);
    }

    /// Found by tests/it/fuzz.rs: a time of 1e-300 us made a weight infinite and the SVD panic.
    #[test]
    fn non_finite_inputs_are_an_error_not_a_panic() {
        assert_eq!(weighted_line(&[1.0, 2.0, 3.0], &[1.0, 2.0, 3.0], &[1.0, f64::INFINITY, 1.0]), Err(FitError::NotFinite));
        assert_eq!(power_plane(&[(0.0, 0.0, 100.0), (1.0, 0.0, f64::NAN), (0.0, 1.0, 300.0)]), Err(FitError::NotFinite));
    }
}

/// watts = idle + a * gemm_util + b * hbm_util over the load phases (least squares).
pub fn power_plane(points: &[(f64, f64, f64)]) -> Result<(f64, f64, f64), FitError> {
    if points.len() < 3 {
        return Err(FitError::TooFewPoints { need: 3, got: points.len() });
    }
    let n = points.len();
    let a = DMatrix::from_fn(n, 3, |i, j| match j {
        0 => 1.0,
        1 => points[i].0,
        _ => points[i].1,
    });
    let b = DVector::from_fn(n, |i, _| points[i].2);
    finite(&a, &b)?;
    let svd = a.svd(true, true);
    if svd.singular_values.iter().any(|s| *s < 1e-9 * svd.singular_values.max()) {
        return Err(FitError::Degenerate);
    }
    let x = svd.solve(&b, 1e-12).map_err(|_| FitError::Degenerate)?;
    Ok((x[0], x[1], x[2]))
}

#[cfg(test)]
mod plane_tests {
    use super::*;

    #[test]
    fn power_plane_recovers_coefficients() {
        let f = |g: f64, h: f64| 95.0 + 600.0 * g + 250.0 * h;
        let pts = [(0.0, 0.0, f(0.0, 0.0)), (1.0, 0.0, f(1.0, 0.0)), (0.0, 1.0, f(0.0, 1.0)), (0.7, 0.5, f(0.7, 0.5))];
        let (i, a, b) = power_plane(&pts).unwrap();
        assert!((i - 95.0).abs() < 1e-6 && (a - 600.0).abs() < 1e-6 && (b - 250.0).abs() < 1e-6);
    }
}
