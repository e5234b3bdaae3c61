//! GPU power from activity, capped at TDP by lowering the SM clock (which slows compute), and
//! energy.
//!
//! Model: a dense GEMM held at the sustained clock `f_s` draws exactly TDP (that is what makes the
//! GPU settle there: measured on H200, 700 W at ~1450 MHz). Tensor-core power scales as
//! `(f / f_s)^GAMMA`; HBM-bound kernels draw `hbm_load_w`; communication kernels draw half of the
//! HBM-bound excess (they move data through SMs and NVLink); idle time draws idle power. The
//! clock is the highest in `[f_s, f_max]` whose time-averaged power stays within TDP, with the
//! compute time shrinking as the clock rises.
//!
//! The average is taken over the activity that interleaves at the power limiter's time scale: a
//! training step's GEMMs, memory-bound kernels, collectives and short host stalls (each well under
//! ~10 ms). Idle stretches longer than that window (a pipeline's fill and drain, `long_idle`) draw
//! idle power but lend the compute none of the budget they leave unused. Measured on an H100 SXM
//! at its 700 W cap (scripts/power_duty_probe.py, calibration/runs/raw/power-duty-h100-2026-11-24/):
//! a bf16 GEMM run in bursts with 5 ms idle gaps (duty 0.9) or 11 ms HBM copies between bursts
//! (duty 0.76) ran at 1410 / 1445 MHz, where this law (GAMMA = 2, the gaps averaged in) gives
//! 1431 / 1470 MHz; with 23 ms gaps (duty 0.5) the bursts ran at 1533 MHz, not the 1980 MHz the
//! average would allow (the step averaged 513 W), and with 194 ms gaps every 1 s at 1427 MHz, not
//! 1517 (steady GEMM: 1365 MHz). The limiter lets a burst exceed the cap for a few ms (760-900 W
//! measured per burst) and then pulls the clock down, so a long gap buys the next burst only its
//! first milliseconds.

//!
//! Where the GPU waits on the host (host-bound eager steps of the `hf-*` stacks), each kernel runs
//! as the host reaches it, and a kernel's priced time is not what it draws power for. Measured on
//! the lent H100 (scripts/power_small_kernels_probe.py, calibration/runs/raw/
//! power-small-kernels-h100-2026-11-24/analysis.txt): a stream of small elementwise adds draws the
//! excess over idle of its bytes' time at the stream rate, not of its priced time with the
//! per-launch floor (the floor is idle); bytes that stay in L2 draw `L2_RESIDENT_POWER_SHARE` of an
//! HBM stream's excess; and a small GEMM at the top clock draws the tensor law's power times its
//! FLOP rate over the large GEMM's at the same clock (1024 x 2048 x 2048 with 20 us host gaps at
//! 1978 MHz: 270 W over idle measured, 264 W by the law times its FLOP share 0.69, 385 W by the
//! law alone). `Activity::memory_l2` and `Activity::tensor_idle` carry those parts. A streaming
//! part of such a step draws the HBM copy loop's energy per byte, whatever its own rate: on the
//! lent H200 (scripts/power7_parts_probe.py, calibration/runs/raw/power7-parts-h200-2026-11-24/)
//! the fused fp32 AdamW step over Qwen3-1.7B's and Llama-3.2-1B's tensors drew 1.07 and 0.99 of it
//! and autocast's bf16 weight casts 0.85 and 1.04, so the time the `hf-*` stacks' memory ops are
//! priced at beyond their bytes at the stream rate (`HF_MEMORY_EFFICIENCY`) counts as idle there
//! (`Breakdown::memory_unstreamed`, `analytic::activity`).

use crate::hardware::Gpu;
use crate::units::{Hertz, Seconds, Watts};

/// Exponent of dynamic power in clock (P ~ C V^2 f with voltage rising with f). An engineering
/// estimate, checked on an H100 SXM at its 700 W cap (module doc; calibration/runs/raw/
/// power-duty-h100-2026-11-24/analysis.txt): the GEMM bursts' own power against their clock implies
/// 2.2-3.0, and the clocks of the finely mixed bursts lie between this law at 2 (1-4% above them)
/// and at 3 (within 1.5%). An exponent of 1 (tried for issue 17 to lift GB300) gives those bursts
/// 1508-1980 MHz against 1410-1500 measured, so it is refuted on Hopper. `calibrate`'s power sweep
/// replaces the constants it multiplies.
pub const GAMMA: f64 = 2.0;

/// Share of the HBM-stream power excess over idle that memory-bound traffic staying in L2 draws
/// per second of its bytes' time at the stream rate (the rate `cost` prices memory-bound kernels
/// at). Measured on the lent H100 (NVIDIA H100 80GB HBM3, driver 580.159.04, 2026-11-24 21:32 UTC,
/// scripts/power_small_kernels_probe.py, read by scripts/power_small_kernels_analysis.py:
/// calibration/runs/raw/power-small-kernels-h100-2026-11-24/analysis.txt): elementwise bf16 adds
/// of 1 and 4 MiB tensors (3 and 12 MiB per launch) back to back and with 5 and 20 us host gaps,
/// six phases: 0.39-0.56 of the bytes' time at `hbm_load_w`, mean 0.447. Adds of 16 MiB tensors
/// (48 MiB per launch, about the 50 MiB L2) drew 0.90-0.91 and of 64 MiB 0.97-0.99: the line is
/// drawn at half the L2 (`analytic`). Not fitted to any run record.
pub const L2_RESIDENT_POWER_SHARE: f64 = 0.447;

/// Time one GPU spends in each kind of activity during a step, priced at the sustained clock.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Activity {
    pub compute: Seconds,
    pub memory: Seconds,
    pub comm: Seconds,
    /// Idle interleaved with the work at the power limiter's time scale (host stalls between
    /// kernels): its unused power budget lets the compute clock higher.
    pub idle: Seconds,
    /// Idle in stretches longer than the limiter's window (a pipeline's fill and drain): it draws
    /// idle power but lends the compute nothing (module doc).
    pub long_idle: Seconds,
    /// Of `memory`, the bytes' time of traffic that stays in L2: it draws
    /// `L2_RESIDENT_POWER_SHARE` of the HBM-bound excess (module doc).
    pub memory_l2: Seconds,
    /// Of `compute`, time its tensor units do not work (GEMMs below the large GEMM's FLOP rate):
    /// it draws no tensor power (module doc).
    pub tensor_idle: Seconds,
}

impl Activity {
    pub fn total_at(&self, speedup: f64) -> Seconds {
        self.compute / speedup + self.memory + self.comm + self.idle + self.long_idle
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

/// `base`: the idle term, the GPU's `idle_power` unless the run measured its own card's
/// ([`solve_with_idle`]); the excess terms are priced over the GPU's `idle_power` either way.
fn average_power(gpu: &Gpu, a: &Activity, speedup: f64, base: Watts) -> Watts {
    let total = a.total_at(speedup);
    if total.value() <= 0.0 {
        return base;
    }
    let idle = gpu.idle_power.value;
    let tensor_excess = (gpu.tdp.value - idle) * speedup.powf(GAMMA);
    let hbm_excess = (gpu.efficiency.hbm_load_power.value - idle).max(Watts::ZERO);
    let busy = |t: Seconds| t / total;
    let tensor = (a.compute - a.tensor_idle.min(a.compute)) / speedup;
    let l2 = a.memory_l2.min(a.memory);
    let memory = busy(a.memory - l2) + L2_RESIDENT_POWER_SHARE * busy(l2);
    base + tensor_excess * busy(tensor) + hbm_excess * memory + hbm_excess * (0.5 * busy(a.comm))
}

/// The clock and power a GPU settles at for this activity mix: the clock from the activity the
/// limiter averages over (all but `long_idle`), the power averaged over the whole step.
pub fn solve(gpu: &Gpu, a: &Activity) -> PowerState {
    solve_with_idle(gpu, a, None)
}

/// [`solve`] with the idle term at `own_idle` where given: the idle power the run's own card
/// measured with its context open (cards of one model idle 116-138 W, calibration/runs/hf/FIT.md
/// "Fourteenth pass"). Only the idle term moves: the excess of compute, HBM and communication over
/// idle keeps the GPU's `idle_power` as its anchor (what the profile's loads were measured over).
pub fn solve_with_idle(gpu: &Gpu, a: &Activity, own_idle: Option<Watts>) -> PowerState {
    let base = own_idle.unwrap_or(gpu.idle_power.value);
    let f_s = gpu.efficiency.sustained_gemm_clock.value;
    let f_max = gpu.max_clock.value;
    let max_speedup = (f_max / f_s).max(1.0);
    let tdp = gpu.tdp.value;
    let windowed = Activity { long_idle: Seconds::ZERO, ..*a };
    let at = |s: f64| average_power(gpu, &windowed, s, base);
    if at(max_speedup) <= tdp {
        return PowerState { speedup: max_speedup, clock: f_max, gpu_power: average_power(gpu, a, max_speedup, base), capped: false };
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
    PowerState { speedup: lo, clock: f_s * lo, gpu_power: average_power(gpu, a, lo, base).min(tdp), capped: true }
}
