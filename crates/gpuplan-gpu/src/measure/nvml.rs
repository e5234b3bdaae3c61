//! NVML sampling. NVML is loaded at run time (nvml-wrapper opens `libnvidia-ml.so.1`), so the
//! binary runs where there is none; `open` then fails and `measure` records the run without
//! power, clock or NVML memory numbers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nvml_wrapper::enum_wrappers::device::Clock;
use nvml_wrapper::Nvml;

/// One reading of one GPU. Fields NVML refused are `None`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct GpuSample {
    /// Seconds since the job started.
    pub t_s: f64,
    pub power_w: Option<f64>,
    /// NVML's total energy counter since the driver loaded, in joules.
    pub energy_j: Option<f64>,
    pub mem_used_bytes: Option<f64>,
    pub sm_clock_mhz: Option<f64>,
    pub gpu_util_pct: Option<f64>,
}

/// What NVML says about the machine.
#[derive(Debug, Clone, Default)]
pub struct GpuInventory {
    pub indices: Vec<u32>,
    pub uuids: Vec<String>,
    pub names: Vec<String>,
    pub driver_version: Option<String>,
    pub cuda_driver_version: Option<String>,
    pub power_limit_w: Option<f64>,
    pub memory_total_bytes: Option<f64>,
}

pub struct NvmlSession {
    nvml: Nvml,
    pub inventory: GpuInventory,
}

/// Which NVML devices the job sees: `CUDA_VISIBLE_DEVICES` entries as indices or UUIDs (MIG
/// entries and unparsable lists mean all GPUs). NVML numbers GPUs in PCI bus order, as CUDA does
/// for identical GPUs (set `CUDA_DEVICE_ORDER=PCI_BUS_ID` to be sure).
pub fn visible_indices(cuda_visible: Option<&str>, uuids: &[String]) -> Vec<u32> {
    let all: Vec<u32> = (0..uuids.len() as u32).collect();
    let Some(v) = cuda_visible else { return all };
    let v = v.trim();
    if v.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for e in v.split(',').map(str::trim) {
        if let Ok(i) = e.parse::<u32>() {
            if (i as usize) < uuids.len() {
                out.push(i);
                continue;
            }
            // CUDA stops at the first invalid index.
            break;
        } else if e.starts_with("GPU-") {
            match uuids.iter().position(|u| u.starts_with(e)) {
                Some(i) => out.push(i as u32),
                None => break,
            }
        } else {
            return all;
        }
    }
    out
}

pub fn open(cuda_visible: Option<&str>, only: Option<&[u32]>) -> Result<NvmlSession, String> {
    let nvml = Nvml::init().map_err(|e| format!("nvml: {e}"))?;
    let n = nvml.device_count().map_err(|e| format!("nvml device count: {e}"))?;
    let mut uuids = Vec::new();
    for i in 0..n {
        let d = nvml.device_by_index(i).map_err(|e| format!("nvml device {i}: {e}"))?;
        uuids.push(d.uuid().unwrap_or_default());
    }
    let indices = match only {
        Some(o) => o.iter().copied().filter(|&i| i < n).collect(),
        None => visible_indices(cuda_visible, &uuids),
    };
    let mut inv = GpuInventory {
        driver_version: nvml.sys_driver_version().ok(),
        cuda_driver_version: nvml.sys_cuda_driver_version().ok().map(|v| format!("{}.{}", v / 1000, (v % 1000) / 10)),
        ..Default::default()
    };
    for &i in &indices {
        let d = nvml.device_by_index(i).map_err(|e| format!("nvml device {i}: {e}"))?;
        inv.indices.push(i);
        inv.uuids.push(uuids[i as usize].clone());
        inv.names.push(d.name().unwrap_or_default());
        if inv.power_limit_w.is_none() {
            inv.power_limit_w = d.enforced_power_limit().ok().map(|mw| f64::from(mw) * 1e-3);
        }
        if inv.memory_total_bytes.is_none() {
            inv.memory_total_bytes = d.memory_info().ok().map(|m| m.total as f64);
        }
    }
    Ok(NvmlSession { nvml, inventory: inv })
}

impl NvmlSession {
    /// Read every sampled GPU once.
    pub fn sample(&self, t_s: f64) -> Vec<GpuSample> {
        self.inventory
            .indices
            .iter()
            .map(|&i| match self.nvml.device_by_index(i) {
                Ok(d) => GpuSample {
                    t_s,
                    power_w: d.power_usage().ok().map(|mw| f64::from(mw) * 1e-3),
                    energy_j: d.total_energy_consumption().ok().map(|mj| mj as f64 * 1e-3),
                    mem_used_bytes: d.memory_info().ok().map(|m| m.used as f64),
                    sm_clock_mhz: d.clock_info(Clock::SM).ok().map(f64::from),
                    gpu_util_pct: d.utilization_rates().ok().map(|u| f64::from(u.gpu)),
                },
                Err(_) => GpuSample { t_s, ..Default::default() },
            })
            .collect()
    }

    /// Sample at `hz` until `stop` is set; returns the samples, one series per GPU.
    pub fn sample_until(&self, hz: f64, t0: Instant, stop: &AtomicBool) -> Vec<Vec<GpuSample>> {
        let period = Duration::from_secs_f64(1.0 / hz.max(0.1));
        let mut series: Vec<Vec<GpuSample>> = vec![Vec::new(); self.inventory.indices.len()];
        let mut next = Instant::now();
        loop {
            let s = self.sample(t0.elapsed().as_secs_f64());
            for (k, x) in s.into_iter().enumerate() {
                series[k].push(x);
            }
            if stop.load(Ordering::Relaxed) {
                break;
            }
            next += period;
            let now = Instant::now();
            if next > now {
                std::thread::sleep(next - now);
            } else {
                next = now;
            }
        }
        series
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn visible_devices() {
        let u: Vec<String> = ["GPU-aaaa-1", "GPU-bbbb-2", "GPU-cccc-3"].iter().map(|s| s.to_string()).collect();
        assert_eq!(visible_indices(None, &u), vec![0, 1, 2]);
        assert_eq!(visible_indices(Some("1"), &u), vec![1]);
        assert_eq!(visible_indices(Some("2,0"), &u), vec![2, 0]);
        assert_eq!(visible_indices(Some("0,7,1"), &u), vec![0]);
        assert_eq!(visible_indices(Some("GPU-bbbb"), &u), vec![1]);
        assert_eq!(visible_indices(Some(""), &u), Vec::<u32>::new());
        assert_eq!(visible_indices(Some("MIG-xyz"), &u), vec![0, 1, 2]);
    }
}
