//! GPU power from activity, capped at TDP by lowering the SM clock (which slows compute), and
//! energy.
//!
//! Model: a dense GEMM held at the sustained clock `f_s` draws exactly TDP (that is what makes the
//! GPU settle there: measured on H200, 700 W at ~1450 MHz). Tensor-core power scales as
//! `(f / f_s)^GAMMA`; HBM-bound kernels draw `hbm_load_w`; communication kernels draw half of the
//! HBM-bound excess (they move data through SMs and NVLink); idle time draws idle power. The
//! clock is the highest in `[f_s, f_max]` whose time-averaged power stays within TDP, with the
//! compute time shrinking as the clock rises.

use crate::hardware::Gpu;
use crate::units::{Hertz, Seconds, Watts};

/// Exponent of dynamic power in clock (P ~ C V^2 f with voltage rising with f). An engineering
/// estimate (unsourced); `calibrate`'s power sweep replaces the constants it multiplies.
pub const GAMMA: f64 = 2.0;

/// Time one GPU spends in each kind of activity during a step, priced at the sustained clock.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Activity {
    pub compute: Seconds,
    pub memory: Seconds,
    pub comm: Seconds,
    pub idle: Seconds,
}

impl Activity {
    pub fn total_at(&self, speedup: f64) -> Seconds {
        self.compute / speedup + self.memory + self.comm + self.idle
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PowerState {
    /// Compute speed relative to the sustained-GEMM clock (>= 1).
    pub speedup: f64,
    pub clock: Hertz,
    /// Time-averaged power of one GPU over the step.
    pub gpu_power: Watts,
    /// Whether TDP limits the clock below its maximum.
    pub capped: bool,
}

fn average_power(gpu: &Gpu, a: &Activity, speedup: f64) -> Watts {
    let total = a.total_at(speedup);
    if total.value() <= 0.0 {
        return gpu.idle_power.value;
    }
    let idle = gpu.idle_power.value;
    let tensor_excess = (gpu.tdp.value - idle) * speedup.powf(GAMMA);
    let hbm_excess = (gpu.efficiency.hbm_load_power.value - idle).max(Watts::ZERO);
    let busy = |t: Seconds| t / total;
    idle + tensor_excess * busy(a.compute / speedup) + hbm_excess * busy(a.memory) + hbm_excess * (0.5 * busy(a.comm))
}

/// The clock and power a GPU settles at for this activity mix.
pub fn solve(gpu: &Gpu, a: &Activity) -> PowerState {
    let f_s = gpu.efficiency.sustained_gemm_clock.value;
    let f_max = gpu.max_clock.value;
    let max_speedup = (f_max / f_s).max(1.0);
    let tdp = gpu.tdp.value;
    let at = |s: f64| average_power(gpu, a, s);
    if at(max_speedup) <= tdp {
        return PowerState { speedup: max_speedup, clock: f_max, gpu_power: at(max_speedup), capped: false };
    }
    // Power rises with the clock: bisect for the clock that meets TDP.
    let (mut lo, mut hi) = (1.0, max_speedup);
    for _ in 0..50 {
        let mid = 0.5 * (lo + hi);
        if at(mid) <= tdp {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    PowerState { speedup: lo, clock: f_s * lo, gpu_power: at(lo).min(tdp), capped: true }
}
