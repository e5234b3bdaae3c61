//! NVML: power, SM clock and temperature sampled while a load runs long enough to settle.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::Nvml;

use super::stats::Percentiles;
use super::CalibrateError;

#[derive(Debug, Clone)]
pub struct Sample {
    pub load: &'static str,
    pub t_s: f64,
    pub power_w: f64,
    pub sm_clock_mhz: f64,
    pub temperature_c: f64,
}

#[derive(Debug, Clone)]
pub struct Phase {
    pub load: &'static str,
    pub duration_s: f64,
    /// Over the settled part (after the first `settle_fraction` of the phase).
    pub power_w_mean: f64,
    pub power_w: Percentiles,
    pub sm_clock_mhz_mean: f64,
    pub temperature_c_mean: f64,
    pub n_samples: usize,
    /// What the load achieved while sampled (TFLOP/s or GB/s), if it is a GEMM or a copy.
    pub gemm_tflops: Option<f64>,
    pub hbm_gb_per_s: Option<f64>,
}

/// Static facts NVML reports about the device.
#[derive(Debug, Clone, Default)]
pub struct DeviceFacts {
    pub driver_version: Option<String>,
    pub cuda_driver_version: Option<String>,
    pub power_limit_w: Option<f64>,
    pub max_sm_clock_mhz: Option<f64>,
    pub max_mem_clock_mhz: Option<f64>,
    pub name: Option<String>,
}

pub fn open(lib: Option<&std::path::Path>) -> Result<Nvml, CalibrateError> {
    let r = match lib {
        Some(p) => Nvml::builder().lib_path(p.as_os_str()).init(),
        None => Nvml::init(),
    };
    r.map_err(|e| CalibrateError::Nvml(e.to_string()))
}

pub fn facts(nvml: &Nvml, uuid: &str) -> DeviceFacts {
    let mut f = DeviceFacts { driver_version: nvml.sys_driver_version().ok(), ..Default::default() };
    f.cuda_driver_version = nvml.sys_cuda_driver_version().ok().map(|v| format!("{}.{}", v / 1000, (v % 1000) / 10));
    if let Ok(d) = nvml.device_by_uuid(uuid) {
        f.power_limit_w = d.enforced_power_limit().ok().map(|mw| f64::from(mw) * 1e-3);
        f.max_sm_clock_mhz = d.max_clock_info(Clock::SM).ok().map(f64::from);
        f.max_mem_clock_mhz = d.max_clock_info(Clock::Memory).ok().map(f64::from);
        f.name = d.name().ok();
    }
    f
}

pub fn sm_clock(nvml: &Nvml, uuid: &str) -> Option<f64> {
    nvml.device_by_uuid(uuid).ok()?.clock_info(Clock::SM).ok().map(f64::from)
}

/// Run `load` (which must return after `duration`) while another thread samples the device every
/// `period`. Summaries use the samples after `settle_fraction` of the phase.
pub fn sample_phase<T>(
    nvml: &Nvml,
    uuid: &str,
    name: &'static str,
    duration: Duration,
    settle_fraction: f64,
    load: impl FnOnce(Instant) -> Result<T, CalibrateError>,
) -> Result<(T, Vec<Sample>, Phase), CalibrateError> {
    let device = nvml.device_by_uuid(uuid).map_err(|e| CalibrateError::Nvml(format!("device `{uuid}`: {e}")))?;
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let until = start + duration;
    let period = Duration::from_millis(50);
    let (result, samples) = std::thread::scope(|s| {
        let h = s.spawn(|| {
            let mut v = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let t = start.elapsed().as_secs_f64();
                let p = device.power_usage().map(|mw| f64::from(mw) * 1e-3).unwrap_or(f64::NAN);
                let c = device.clock_info(Clock::SM).map(f64::from).unwrap_or(f64::NAN);
                let temp = device.temperature(TemperatureSensor::Gpu).map(f64::from).unwrap_or(f64::NAN);
                v.push(Sample { load: name, t_s: t, power_w: p, sm_clock_mhz: c, temperature_c: temp });
                std::thread::sleep(period);
            }
            v
        });
        let r = load(until);
        stop.store(true, Ordering::Relaxed);
        (r, h.join().unwrap_or_default())
    });
    let result = result?;
    let elapsed = start.elapsed().as_secs_f64();
    let settled: Vec<&Sample> = samples.iter().filter(|s| s.t_s >= settle_fraction * elapsed && s.power_w.is_finite()).collect();
    let mean = |f: &dyn Fn(&Sample) -> f64| -> f64 {
        let v: Vec<f64> = settled.iter().map(|s| f(s)).filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            f64::NAN
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    let pw: Vec<f64> = settled.iter().map(|s| s.power_w).collect();
    let phase = Phase {
        load: name,
        duration_s: elapsed,
        power_w_mean: mean(&|s| s.power_w),
        power_w: Percentiles::of(&pw).unwrap_or(Percentiles { p10: f64::NAN, p50: f64::NAN, p90: f64::NAN }),
        sm_clock_mhz_mean: mean(&|s| s.sm_clock_mhz),
        temperature_c_mean: mean(&|s| s.temperature_c),
        n_samples: settled.len(),
        gemm_tflops: None,
        hbm_gb_per_s: None,
    };
    Ok((result, samples, phase))
}
