//! The power model's clock law (`power::solve`) against the H100 power-cap probe
//! (scripts/power_duty_probe.py, one device call 2026-11-24 on an H100 80GB HBM3 SXM at its 700 W
//! cap; raw samples and `analysis.txt` in calibration/runs/raw/power-duty-h100-2026-11-24/): a bf16
//! 8192^3 GEMM run steadily, in bursts with idle gaps, and in bursts between HBM copies.

use gpuplan::config::system::load_system;
use gpuplan::hardware::{Gpu, Source, Sourced};
use gpuplan::power::{solve, Activity};
use gpuplan::units::{Hertz, Seconds, Watts};

const PROBE: &str = "calibration/runs/raw/power-duty-h100-2026-11-24/power_duty.json";

fn probe() -> serde_json::Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(PROBE);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn phase<'a>(d: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    d["phases"].as_array().unwrap().iter().find(|p| p["phase"] == name).unwrap_or_else(|| panic!("no phase {name}"))
}

fn f(v: &serde_json::Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("no {key} in {v}"))
}

/// The H100 as the probe measured it: cap, top clock, the steady GEMM's clock, the power of a
/// gap right after work (instantaneous field; the averaged one lags) and of the copy loop.
fn measured_h100(d: &serde_json::Value) -> Gpu {
    let m = |what: &str| Source::Measured(format!("{PROBE}: {what}"));
    let mut g = load_system("dgx-h100").unwrap().gpu;
    g.tdp = Sourced::new(Watts::new(f(d, "power_limit_w")), m("power limit"));
    g.max_clock = Sourced::new(Hertz::mhz(f(d, "max_sm_mhz")), m("max SM clock"));
    g.efficiency.sustained_gemm_clock = Sourced::new(Hertz::mhz(f(phase(d, "steady_bf16"), "sm_mhz_median")), m("steady GEMM clock"));
    g.idle_power = Sourced::new(Watts::new(f(phase(d, "idle_after_gemm"), "instant_w_mean")), m("gap power"));
    g.efficiency.hbm_load_power = Sourced::new(Watts::new(f(phase(d, "copy_only"), "instant_w_mean")), m("copy-loop power"));
    g
}

/// A burst phase: the clock its GEMMs ran at (their rate over the steady GEMM's rate per MHz), and
/// its activity as the model takes it (the bursts' work as time at the steady clock; the gaps as
/// idle, or as long idle, or the copies as memory-bound time).
fn burst(d: &serde_json::Value, name: &str) -> (f64, Seconds, Seconds) {
    let st = phase(d, "steady_bf16");
    let per_mhz = f(st, "tflops_second_half") / f(st, "sm_mhz_mean");
    let p = phase(d, name);
    let clock = f(p, "burst_tflops") / per_mhz;
    let work = Seconds::new(f(p, "mean_burst_s") * clock / f(st, "sm_mhz_median"));
    (clock, work, Seconds::new(f(p, "mean_gap_s")))
}

#[test]
fn finely_mixed_gemm_bursts_clock_as_the_law_says() {
    let d = probe();
    let gpu = measured_h100(&d);
    // Gaps and copies of 5-11 ms between 35-44 ms bursts: the limiter averages over them.
    for (name, copies) in [("burst_idle_d0.9_p50ms", false), ("burst_copy_d0.75_p50ms", true)] {
        let (measured, compute, other) = burst(&d, name);
        let a = if copies { Activity { compute, memory: other, ..Default::default() } } else { Activity { compute, idle: other, ..Default::default() } };
        let model = solve(&gpu, &a).clock.as_mhz();
        assert!((model / measured - 1.0).abs() < 0.03, "{name}: model {model:.0} MHz, measured {measured:.0} MHz");
        // Without the gaps' credit the model would sit at the steady clock, 3-6% under.
        assert!(model > gpu.efficiency.sustained_gemm_clock.value.as_mhz() * 1.02, "{name}: {model:.0}");
    }
}

#[test]
fn long_idle_stretches_lend_the_compute_clock_less_than_their_average() {
    let d = probe();
    let gpu = measured_h100(&d);
    let steady = gpu.efficiency.sustained_gemm_clock.value.as_mhz();
    // 23 ms gaps at duty 0.5 and 194 ms gaps every second: the bursts ran 12% and 4.5% above the
    // steady clock; averaging the gaps in would give the top clock (1980) and 11%. The long-idle
    // rule (no credit) is the nearer bound on both.
    for name in ["burst_idle_d0.5_p50ms", "burst_idle_d0.8_p1s"] {
        let (measured, compute, gap) = burst(&d, name);
        let averaged = solve(&gpu, &Activity { compute, idle: gap, ..Default::default() }).clock.as_mhz();
        let long = solve(&gpu, &Activity { compute, long_idle: gap, ..Default::default() });
        let long_mhz = long.clock.as_mhz();
        assert!((long_mhz - steady).abs() < 1e-6, "{name}: {long_mhz}");
        assert!(long_mhz < measured && measured < averaged, "{name}: {long_mhz:.0} / {measured:.0} / {averaged:.0}");
        assert!(measured - long_mhz < averaged - measured, "{name}: {long_mhz:.0} / {measured:.0} / {averaged:.0}");
        // The step's power still counts the gap, at idle power.
        let total = compute + gap;
        let want = (gpu.tdp.value.value() * compute.value() + gpu.idle_power.value.value() * gap.value()) / total.value();
        assert!((long.gpu_power.value() - want).abs() < 1.0, "{name}: {} W vs {want} W", long.gpu_power.value());
    }
}

#[test]
fn fp8_gemms_settle_lower_than_bf16_at_the_same_cap() {
    // Same per-clock efficiency (0.918 bf16, 0.910 FP8 of 132 SMs x 4096 / 8192 FLOP/clk), but the
    // 8-bit path's double work per clock draws more: the cap holds FP8 at 0.91 of bf16's clock.
    let d = probe();
    let (bf16, fp8) = (phase(&d, "steady_bf16"), phase(&d, "steady_fp8"));
    let per_clock = |p: &serde_json::Value, flop_per_clk: f64| f(p, "tflops_second_half") * 1e12 / (132.0 * flop_per_clk * f(p, "sm_mhz_mean") * 1e6);
    let (e16, e8) = (per_clock(bf16, 4096.0), per_clock(fp8, 8192.0));
    assert!((e16 - e8).abs() < 0.02 && e16 > 0.9, "{e16} {e8}");
    let ratio = f(fp8, "sm_mhz_median") / f(bf16, "sm_mhz_median");
    assert!((0.88..0.94).contains(&ratio), "{ratio}");
}

/// The small-kernel probe (scripts/power_small_kernels_probe.py, lent H100 80GB HBM3, 2026-11-24
/// 21:32 UTC; calibration/runs/raw/power-small-kernels-h100-2026-11-24/, `analysis.txt`): streams
/// of elementwise adds and small GEMMs launched from Python with host gaps, power from NVML's energy
/// counter per phase. What a host-bound step's kernels draw (`power` module doc).
const SMALL: &str = "calibration/runs/raw/power-small-kernels-h100-2026-11-24/small_kernels.json";

/// The H100 as gpuplan's H100 profile has it (calibration/profiles/h100-sxm-1x: stream rate,
/// per-launch floor, power phases), with the probe's own idle power.
fn profiled_h100(idle: f64) -> (Gpu, f64, f64) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("calibration/profiles/h100-sxm-1x");
    let p = gpuplan::config::profile::load_profile(&dir).unwrap();
    let pw = p.power.clone().unwrap();
    let m = |what: &str| Source::Measured(format!("calibration/profiles/h100-sxm-1x: {what}"));
    let mut g = load_system("dgx-h100").unwrap().gpu;
    g.tdp = Sourced::new(pw.power_limit, m("power limit"));
    g.max_clock = Sourced::new(pw.max_clock, m("max SM clock"));
    g.efficiency.sustained_gemm_clock = Sourced::new(pw.gemm_clock, m("GEMM clock"));
    g.efficiency.hbm_load_power = Sourced::new(pw.hbm_load, m("HBM-load power"));
    g.idle_power = Sourced::new(Watts::new(idle), Source::Measured(format!("{SMALL}: idle phase")));
    (g, p.stream.unwrap().bandwidth.value(), p.kernel_launch.unwrap().value())
}

#[test]
fn small_adds_draw_their_bytes_power_with_floors_idle_and_l2_traffic_at_its_share() {
    let d: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(SMALL)).unwrap()).unwrap();
    let idle = f(phase(&d, "idle"), "energy_power_w");
    let (gpu, stream, floor) = profiled_h100(idle);
    let l2 = load_system("dgx-h100").unwrap().gpu.l2_cache.unwrap().value.value();
    for mib in [1, 4, 16, 64] {
        for gap in [0, 5, 20] {
            let p = phase(&d, &format!("add_{mib}MiB_gap{gap}"));
            let (period, bytes) = (f(p, "launch_period_us") * 1e-6, f(p, "bytes_per_kernel"));
            let bytes_time = (bytes / stream).min(period);
            let in_l2 = bytes <= 0.5 * l2;
            // One launch period as gpuplan's host-bound rule takes it: the floor idle, the bytes'
            // time as memory (in L2 when a launch's bytes fit in half of it).
            let a = Activity {
                memory: Seconds::new(bytes_time),
                memory_l2: Seconds::new(if in_l2 { bytes_time } else { 0.0 }),
                idle: Seconds::new(period - bytes_time),
                ..Default::default()
            };
            let model = solve(&gpu, &a).gpu_power.value();
            let measured = f(p, "energy_power_w");
            let err = (model - idle) / (measured - idle) - 1.0;
            // The excess over idle: L2-resident phases within 25% (-20..+15%: the share is their
            // mean), HBM-bound ones within 12% (+1..+10%). The priced time with the floor as
            // memory gives 2.4-10x the measured excess at 1 and 4 MiB (asserted below).
            let tol = if in_l2 { 0.25 } else { 0.12 };
            assert!(err.abs() < tol, "add {mib} MiB gap {gap}: model {model:.1} W, measured {measured:.1} W ({:+.0}%)", err * 100.0);
            let priced = Activity {
                memory: Seconds::new((bytes / stream + floor).min(period)),
                idle: Seconds::new(period - (bytes / stream + floor).min(period)),
                ..Default::default()
            };
            let before = solve(&gpu, &priced).gpu_power.value();
            if mib <= 4 {
                assert!((before - idle) > 2.0 * (measured - idle), "add {mib} MiB gap {gap}: priced time gives {before:.1} W");
            }
        }
    }
}

#[test]
fn a_small_gemm_at_the_top_clock_draws_the_tensor_law_times_its_flop_share() {
    let d: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(SMALL)).unwrap()).unwrap();
    let idle = f(phase(&d, "idle"), "energy_power_w");
    let (gpu, _, _) = profiled_h100(idle);
    let big = phase(&d, "gemm_8192x8192x8192_gap0");
    let p = phase(&d, "gemm_1024x2048x2048_gap20");
    // Host gaps keep it under the cap: it ran at the top clock.
    assert!(f(p, "sm_clock_mhz") > 0.98 * gpu.max_clock.value.as_mhz());
    let (busy, period) = (f(p, "gpu_busy_share"), f(p, "launch_period_us") * 1e-6);
    // Its FLOP rate per MHz over the large GEMM's.
    let share = (f(p, "tflop_per_s") / busy / f(p, "sm_clock_mhz")) / (f(big, "tflop_per_s") / f(big, "sm_clock_mhz"));
    assert!((0.6..0.8).contains(&share), "{share}");
    // The kernel's time as compute at the sustained clock (the model divides it by the speedup).
    let speedup = gpu.max_clock.value.as_mhz() / gpu.efficiency.sustained_gemm_clock.value.as_mhz();
    let compute = Seconds::new(busy * period * speedup);
    let idle_t = Seconds::new((1.0 - busy) * period);
    let with_share = solve(&gpu, &Activity { compute, tensor_idle: compute * (1.0 - share), idle: idle_t, ..Default::default() });
    let law_alone = solve(&gpu, &Activity { compute, idle: idle_t, ..Default::default() });
    let measured = f(p, "energy_power_w") - idle;
    let excess = |s: &gpuplan::power::PowerState| s.gpu_power.value() - idle;
    assert!(!with_share.capped && (excess(&with_share) / measured - 1.0).abs() < 0.06, "{:.1} W vs {measured:.1} W", excess(&with_share));
    assert!(excess(&law_alone) / measured > 1.3, "the law alone: {:.1} W vs {measured:.1} W", excess(&law_alone));
}

/// The parts probe on the lent H200 (scripts/power7_parts_probe.py, one device call 2026-11-24
/// 22:34 UTC, NVIDIA H200 at 700 W, driver 580.159.04, torch 2.11.0+cu130;
/// calibration/runs/raw/power7-parts-h200-2026-11-24/parts.json): a fused fp32 AdamW step over
/// Qwen3-1.7B's and Llama-3.2-1B's tensors (28 B per parameter: param r/w, grad, m and v r/w) and
/// autocast's bf16 casts of their weight matrices (6 B per parameter), each looped with 20 ms host
/// sleeps, draw the HBM copy loop's energy per byte (the H200 profile's `hbm_load_w` less idle over
/// its stream rate) within 16%, not that energy over `HF_MEMORY_EFFICIENCY` (0.66), the rate the
/// hf stacks' memory ops are priced at: the stretch draws no HBM power (FIT.md, thirteenth pass).
#[test]
fn streamed_parts_draw_the_copy_loops_energy_per_byte() {
    const HBM_LOAD_W: f64 = 650.6801333333337; // calibration/profiles/h200-sxm-2x/profile.toml [power]
    const IDLE_W: f64 = 121.85652100840339; // same file
    const STREAM_GB_PER_S: f64 = 4294.202315992086; // same file [stream]
    const HF_MEMORY_EFFICIENCY: f64 = 0.66; // gpuplan_core::cost::fitted::HF_MEMORY_EFFICIENCY
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("calibration/runs/raw/power7-parts-h200-2026-11-24/parts.json");
    let d: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(d["gpu"], "NVIDIA H200");
    let copy_j_per_gb = (HBM_LOAD_W - IDLE_W) / STREAM_GB_PER_S;
    for name in ["qwen3-1.7b_adamw_fused", "llama-3.2-1b_adamw_fused", "qwen3-1.7b_bf16_casts", "llama-3.2-1b_bf16_casts"] {
        let p = phase(&d, name);
        assert_eq!(f(p, "sm_clock_mhz"), 1980.0, "{name}: uncapped");
        let j_per_gb = f(p, "excess_j_per_iter") / (f(p, "bytes") / 1e9);
        let ratio = j_per_gb / copy_j_per_gb;
        println!("{name}: {j_per_gb:.4} J/GB over idle, {ratio:.2} of the copy loop's");
        assert!((0.80..1.20).contains(&ratio), "{name}: {ratio}");
        assert!(1.0 / HF_MEMORY_EFFICIENCY / ratio > 1.25, "{name}: the stretched charge is not over");
    }
}
