//! GPU and system files in `calibration/systems/`.
//!
//! A GPU file (`kind = "gpu"`, e.g. `h100-sxm.toml`) describes one GPU model; a system file
//! (`kind = "system"`, e.g. `dgx-h100.toml`) a node type, the GPU it holds and the fabric between
//! nodes. Every number is `{ value = .., source = "..", kind = "datasheet|measured|transferred|unsourced" }`
//! and its key carries its unit.

use std::path::Path;

use serde::Deserialize;

use super::{parse_toml, read_file, resolve, ConfigError, Problems, SourcedWire};
use gpuplan_core::hardware::{Arch, Efficiency, Fabric, Gpu, PeakTable, ScaleUp, System};
use gpuplan_core::units::{Bytes, BytesPerSec, FlopsPerSec, Hertz, Seconds, Watts};

pub const DIR: &str = "calibration/systems";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuWire {
    pub kind: String,
    pub name: String,
    pub display_name: String,
    /// ampere | hopper | blackwell
    pub architecture: String,
    pub sm_count: SourcedWire,
    pub max_clock_mhz: SourcedWire,
    pub spec_clock_mhz: SourcedWire,
    /// Dense (non-sparse) tensor throughput; fp4/fp8 absent where the GPU has no such path.
    #[serde(default)]
    pub peak_fp4_tflops: Option<SourcedWire>,
    #[serde(default)]
    pub peak_fp8_tflops: Option<SourcedWire>,
    pub peak_bf16_tflops: SourcedWire,
    pub peak_fp16_tflops: SourcedWire,
    pub peak_tf32_tflops: SourcedWire,
    pub peak_fp32_tflops: SourcedWire,
    /// The GPU's device memory: HBM, or GDDR on the L40S and RTX PRO 6000 (the keys keep the name).
    pub hbm_capacity_gib: SourcedWire,
    pub hbm_bandwidth_gb_per_s: SourcedWire,
    /// Left out where no datasheet gives it (no model reads it yet).
    #[serde(default)]
    pub l2_cache_mib: Option<SourcedWire>,
    /// Left out, with the bandwidth, on GPUs without NVLink.
    #[serde(default)]
    pub nvlink_generation: Option<SourcedWire>,
    /// Both directions added, as NVIDIA quotes it (900 GB/s for H100).
    #[serde(default)]
    pub nvlink_bandwidth_bidir_gb_per_s: Option<SourcedWire>,
    /// The x16 host link: its generation and both directions added, as NVIDIA quotes it (64 GB/s
    /// for PCIe Gen4 x16). Needed where a system joins its GPUs over PCIe (`scale_up = "pcie"`).
    #[serde(default)]
    pub pcie_generation: Option<SourcedWire>,
    #[serde(default)]
    pub pcie_bandwidth_bidir_gb_per_s: Option<SourcedWire>,
    pub tdp_w: SourcedWire,
    pub idle_w: SourcedWire,
    pub efficiency: EfficiencyWire,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EfficiencyWire {
    pub gemm_max_fraction: SourcedWire,
    pub hbm_fraction: SourcedWire,
    pub attention_fraction: SourcedWire,
    /// Fraction of bf16 peak the fused attention of Transformer Engine (cuDNN) reaches, forward,
    /// causal, head dim 128, sequence 8192 (the `megatron` stack's attention).
    pub fused_attention_fraction: SourcedWire,
    /// Left out on GPUs without NVLink.
    #[serde(default)]
    pub nvlink_busbw_fraction: Option<SourcedWire>,
    /// Needed with `pcie_bandwidth_bidir_gb_per_s` where a system joins its GPUs over PCIe.
    #[serde(default)]
    pub pcie_busbw_fraction: Option<SourcedWire>,
    /// Needed where a system with this GPU has a scale-out network.
    #[serde(default)]
    pub network_busbw_fraction: Option<SourcedWire>,
    pub kernel_overhead_us: SourcedWire,
    pub sustained_gemm_clock_mhz: SourcedWire,
    pub hbm_load_w: SourcedWire,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SystemWire {
    pub kind: String,
    pub name: String,
    pub display_name: String,
    /// Where the structural facts (GPU count, switches, NICs) come from.
    pub source: String,
    /// Name of a GPU file in the same folder.
    pub gpu: String,
    pub gpus_per_node: u32,
    pub nvlink_domain_size: u32,
    /// `nvlink` (the default) or `pcie`: what joins the GPUs of one domain. A `pcie` system's
    /// domain is its node (`nvlink_domain_size` = `gpus_per_node`), without NVSwitch or NVLS.
    #[serde(default)]
    pub scale_up: Option<String>,
    pub nvswitch: bool,
    pub nvls: bool,
    /// The scale-out network: `nics_per_node`, `nic_bandwidth_gbit_per_s` and `[fabric]` together,
    /// or none of them (`nics_per_node = 0`): such a system runs on one node only.
    pub nics_per_node: u32,
    #[serde(default)]
    pub nic_bandwidth_gbit_per_s: Option<SourcedWire>,
    pub host_power_per_node_w: SourcedWire,
    pub pue: SourcedWire,
    /// A calibration profile (name under calibration/profiles/, or a path) measured on this
    /// system, used when a scenario names none.
    #[serde(default)]
    pub calibration: Option<String>,
    #[serde(default)]
    pub fabric: Option<FabricWire>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FabricWire {
    /// infiniband | ethernet
    pub kind: String,
    pub rail_optimized: bool,
    pub oversubscription: SourcedWire,
    pub latency_us: SourcedWire,
    /// Nodes whose NIC k shares one leaf switch (a scalable unit of a rail-optimized fabric),
    /// where a reference architecture gives it; the per-rank engine's leaf uplinks need it.
    #[serde(default)]
    pub nodes_per_leaf: Option<SourcedWire>,
}

/// The `kind` key of a catalog file, to tell GPU files from system files.
pub fn file_kind(path: &Path, text: &str) -> Result<String, ConfigError> {
    #[derive(Deserialize)]
    struct Loose {
        kind: Option<String>,
    }
    // A file that is not TOML (a duplicated table, a stray quote) is reported where it breaks.
    let loose: Loose = crate::parse_toml(path, text)?;
    loose.kind.ok_or_else(|| ConfigError::invalid(path, "kind", "(missing)", "is required").with_hint("`kind = \"gpu\"` or `kind = \"system\"`"))
}

pub fn load_gpu(name_or_path: &str) -> Result<Gpu, ConfigError> {
    let path = resolve(name_or_path, DIR, "gpu")?;
    let text = read_file(&path)?;
    let wire: GpuWire = parse_toml(&path, &text)?;
    gpu_from_wire(&path, &wire)
}

pub fn gpu_from_wire(path: &Path, w: &GpuWire) -> Result<Gpu, ConfigError> {
    let mut p = Problems::default();
    p.check(w.kind == "gpu", || ConfigError::invalid(path, "kind", &w.kind, "should be `gpu` in a GPU file"));
    let arch = match w.architecture.as_str() {
        "ampere" => Arch::Ampere,
        "ada" => Arch::Ada,
        "hopper" => Arch::Hopper,
        "blackwell" => Arch::Blackwell,
        "blackwell-rtx" => Arch::BlackwellRtx,
        other => {
            p.push(ConfigError::invalid(path, "architecture", other, "is not known").with_hint("one of: ampere, ada, hopper, blackwell, blackwell-rtx"));
            Arch::Hopper
        }
    };
    let tf = |x: f64| FlopsPerSec::tflops(x);
    let mhz = |x: f64| Hertz::mhz(x);
    let count = |x: f64| x.round() as u32;
    let peak = PeakTable {
        fp4: w.peak_fp4_tflops.as_ref().map(|s| s.to_sourced(path, "peak_fp4_tflops", false, tf, &mut p)),
        fp8: w.peak_fp8_tflops.as_ref().map(|s| s.to_sourced(path, "peak_fp8_tflops", false, tf, &mut p)),
        bf16: w.peak_bf16_tflops.to_sourced(path, "peak_bf16_tflops", false, tf, &mut p),
        fp16: w.peak_fp16_tflops.to_sourced(path, "peak_fp16_tflops", false, tf, &mut p),
        tf32: w.peak_tf32_tflops.to_sourced(path, "peak_tf32_tflops", false, tf, &mut p),
        fp32: w.peak_fp32_tflops.to_sourced(path, "peak_fp32_tflops", false, tf, &mut p),
    };
    let e = &w.efficiency;
    let fraction = |s: &SourcedWire, key: &str, p: &mut Problems| {
        p.check(s.value <= 1.0, || ConfigError::invalid(path, &format!("efficiency.{key}.value"), s.value, "is a fraction and must be at most 1"));
        s.to_sourced(path, &format!("efficiency.{key}"), false, |x| x, p)
    };
    let efficiency = Efficiency {
        gemm_max: fraction(&e.gemm_max_fraction, "gemm_max_fraction", &mut p),
        hbm: fraction(&e.hbm_fraction, "hbm_fraction", &mut p),
        attention: fraction(&e.attention_fraction, "attention_fraction", &mut p),
        fused_attention: fraction(&e.fused_attention_fraction, "fused_attention_fraction", &mut p),
        nvlink_busbw: e.nvlink_busbw_fraction.as_ref().map(|s| fraction(s, "nvlink_busbw_fraction", &mut p)),
        pcie_busbw: e.pcie_busbw_fraction.as_ref().map(|s| fraction(s, "pcie_busbw_fraction", &mut p)),
        network_busbw: e.network_busbw_fraction.as_ref().map(|s| fraction(s, "network_busbw_fraction", &mut p)),
        kernel_overhead: e.kernel_overhead_us.to_sourced(path, "efficiency.kernel_overhead_us", true, Seconds::us, &mut p),
        sustained_gemm_clock: e.sustained_gemm_clock_mhz.to_sourced(path, "efficiency.sustained_gemm_clock_mhz", false, mhz, &mut p),
        hbm_load_power: e.hbm_load_w.to_sourced(path, "efficiency.hbm_load_w", false, Watts::new, &mut p),
    };
    let gpu = Gpu {
        name: w.name.clone(),
        display_name: w.display_name.clone(),
        arch,
        sm_count: w.sm_count.to_sourced(path, "sm_count", false, count, &mut p),
        max_clock: w.max_clock_mhz.to_sourced(path, "max_clock_mhz", false, mhz, &mut p),
        spec_clock: w.spec_clock_mhz.to_sourced(path, "spec_clock_mhz", false, mhz, &mut p),
        peak,
        hbm_capacity: w.hbm_capacity_gib.to_sourced(path, "hbm_capacity_gib", false, Bytes::gib, &mut p),
        hbm_bandwidth: w.hbm_bandwidth_gb_per_s.to_sourced(path, "hbm_bandwidth_gb_per_s", false, BytesPerSec::gb_per_s, &mut p),
        l2_cache: w.l2_cache_mib.as_ref().map(|s| s.to_sourced(path, "l2_cache_mib", false, Bytes::mib, &mut p)),
        nvlink_generation: w.nvlink_generation.as_ref().map(|s| s.to_sourced(path, "nvlink_generation", false, count, &mut p)),
        nvlink_bandwidth: w
            .nvlink_bandwidth_bidir_gb_per_s
            .as_ref()
            .map(|s| s.to_sourced(path, "nvlink_bandwidth_bidir_gb_per_s", false, |x| BytesPerSec::gb_per_s(x / 2.0), &mut p)),
        pcie_generation: w.pcie_generation.as_ref().map(|s| s.to_sourced(path, "pcie_generation", false, count, &mut p)),
        pcie_bandwidth: w
            .pcie_bandwidth_bidir_gb_per_s
            .as_ref()
            .map(|s| s.to_sourced(path, "pcie_bandwidth_bidir_gb_per_s", false, |x| BytesPerSec::gb_per_s(x / 2.0), &mut p)),
        tdp: w.tdp_w.to_sourced(path, "tdp_w", false, Watts::new, &mut p),
        idle_power: w.idle_w.to_sourced(path, "idle_w", false, Watts::new, &mut p),
        efficiency,
    };
    let together = |a: bool, b: bool, keys: &str| {
        (a != b).then(|| ConfigError::invalid(path, keys, if a { "(first given)" } else { "(second given)" }, "come together: give both or neither"))
    };
    if let Some(err) =
        together(w.nvlink_generation.is_some(), w.nvlink_bandwidth_bidir_gb_per_s.is_some(), "nvlink_generation, nvlink_bandwidth_bidir_gb_per_s")
    {
        p.push(err);
    }
    if let Some(err) = together(
        w.nvlink_bandwidth_bidir_gb_per_s.is_some(),
        e.nvlink_busbw_fraction.is_some(),
        "nvlink_bandwidth_bidir_gb_per_s, efficiency.nvlink_busbw_fraction",
    ) {
        p.push(err.with_hint("a GPU with NVLink needs the fraction of it NCCL reaches; one without NVLink has neither"));
    }
    if let Some(err) =
        together(w.pcie_bandwidth_bidir_gb_per_s.is_some(), e.pcie_busbw_fraction.is_some(), "pcie_bandwidth_bidir_gb_per_s, efficiency.pcie_busbw_fraction")
    {
        p.push(err.with_hint("collectives over PCIe need both the link's bandwidth and the fraction of it reached"));
    }
    p.check(gpu.idle_power.value < gpu.tdp.value, || ConfigError::invalid(path, "idle_w.value", gpu.idle_power.value.value(), "must be below `tdp_w`"));
    p.check(gpu.efficiency.sustained_gemm_clock.value <= gpu.max_clock.value, || {
        ConfigError::invalid(
            path,
            "efficiency.sustained_gemm_clock_mhz.value",
            gpu.efficiency.sustained_gemm_clock.value.as_mhz(),
            "must not exceed `max_clock_mhz`",
        )
    });
    p.finish()?;
    Ok(gpu)
}

/// Load a system by name (`dgx-h100`) or path, with its GPU.
pub fn load_system(name_or_path: &str) -> Result<System, ConfigError> {
    let path = resolve(name_or_path, DIR, "system")?;
    let text = read_file(&path)?;
    let kind = file_kind(&path, &text)?;
    if kind != "system" {
        let systems: Vec<String> = super::list_names(DIR).into_iter().filter(|n| is_system_name(n)).collect();
        return Err(ConfigError::invalid(&path, "kind", &kind, "is not a system")
            .with_hint(format!("`--system` takes a node or cluster file; systems: {}", systems.join(", "))));
    }
    let wire: SystemWire = parse_toml(&path, &text)?;
    system_from_wire(&path, &wire)
}

fn is_system_name(name: &str) -> bool {
    resolve(name, DIR, "system").ok().and_then(|p| read_file(&p).ok().map(|t| (p, t))).and_then(|(p, t)| file_kind(&p, &t).ok()).is_some_and(|k| k == "system")
}

pub fn system_from_wire(path: &Path, w: &SystemWire) -> Result<System, ConfigError> {
    let gpu_path = path.parent().map(|d| d.join(format!("{}.toml", w.gpu)));
    let gpu = match gpu_path {
        Some(gp) if crate::catalog::is_file(&gp) => load_gpu(gp.to_str().unwrap_or(&w.gpu)),
        _ => load_gpu(&w.gpu),
    }
    .map_err(|e| match e {
        ConfigError::UnknownName { hint, .. } => {
            ConfigError::Invalid { path: path.to_path_buf(), key: "gpu".into(), value: format!("`{}`", w.gpu), problem: "names no GPU file".into(), hint }
        }
        other => other,
    })?;
    let mut p = Problems::default();
    p.check(w.kind == "system", || ConfigError::invalid(path, "kind", &w.kind, "should be `system` in a system file"));
    p.check(w.gpus_per_node > 0, || ConfigError::invalid(path, "gpus_per_node", w.gpus_per_node, "must be positive"));
    p.check(w.nvlink_domain_size >= 1 && w.nvlink_domain_size.is_multiple_of(w.gpus_per_node.max(1)), || {
        ConfigError::invalid(path, "nvlink_domain_size", w.nvlink_domain_size, "must be a positive multiple of `gpus_per_node`")
    });
    let scale_up = match w.scale_up.as_deref().unwrap_or("nvlink") {
        "nvlink" => ScaleUp::NvLink,
        "pcie" => ScaleUp::Pcie,
        other => {
            p.push(ConfigError::invalid(path, "scale_up", other, "is not known").with_hint("one of: nvlink, pcie"));
            ScaleUp::NvLink
        }
    };
    if scale_up == ScaleUp::Pcie {
        p.check(!w.nvswitch && !w.nvls, || {
            ConfigError::invalid(path, "nvswitch", w.nvswitch, "must be false with `scale_up = \"pcie\"`, and so must `nvls`")
                .with_hint("a PCIe node has no NVSwitch")
        });
        p.check(w.nvlink_domain_size == w.gpus_per_node, || {
            ConfigError::invalid(path, "nvlink_domain_size", w.nvlink_domain_size, "must equal `gpus_per_node` with `scale_up = \"pcie\"`")
                .with_hint("a PCIe node's GPUs form one domain: the node")
        });
    }
    if w.gpus_per_node > 1 || w.nvlink_domain_size > 1 {
        let (link, fraction, keys) = match scale_up {
            ScaleUp::NvLink => (
                gpu.nvlink_bandwidth.is_some(),
                gpu.efficiency.nvlink_busbw.is_some(),
                "`nvlink_bandwidth_bidir_gb_per_s` and `efficiency.nvlink_busbw_fraction`",
            ),
            ScaleUp::Pcie => {
                (gpu.pcie_bandwidth.is_some(), gpu.efficiency.pcie_busbw.is_some(), "`pcie_bandwidth_bidir_gb_per_s` and `efficiency.pcie_busbw_fraction`")
            }
        };
        p.check(link && fraction, || {
            ConfigError::invalid(path, "scale_up", scale_up.name(), format!("needs {keys} in the GPU file `{}`", w.gpu)).with_hint(
                if scale_up == ScaleUp::NvLink {
                    "a GPU without NVLink joins its node over PCIe: `scale_up = \"pcie\"`"
                } else {
                    "give the GPU's PCIe link and the fraction of it reached, each with its source"
                },
            )
        });
    }
    let scale_out = w.nic_bandwidth_gbit_per_s.is_some();
    p.check(!scale_out || gpu.efficiency.network_busbw.is_some(), || {
        ConfigError::invalid(path, "nic_bandwidth_gbit_per_s", "(given)", format!("needs `efficiency.network_busbw_fraction` in the GPU file `{}`", w.gpu))
            .with_hint("give the fraction of the NIC line rate NCCL reaches, with its source, or leave the scale-out network out")
    });
    p.check(scale_out == (w.nics_per_node > 0) && scale_out == w.fabric.is_some(), || {
        ConfigError::invalid(path, "nics_per_node", w.nics_per_node, "`nics_per_node` > 0, `nic_bandwidth_gbit_per_s` and `[fabric]` come together")
            .with_hint("give the scale-out network in full, or none of it (`nics_per_node = 0`: the system runs on one node)")
    });
    p.check(!w.source.trim().is_empty(), || ConfigError::invalid(path, "source", "\"\"", "is empty"));
    if let Some(f) = &w.fabric {
        p.check(matches!(f.kind.as_str(), "infiniband" | "ethernet"), || {
            ConfigError::invalid(path, "fabric.kind", &f.kind, "is not known").with_hint("one of: infiniband, ethernet")
        });
        p.check(f.oversubscription.value >= 1.0, || {
            ConfigError::invalid(path, "fabric.oversubscription.value", f.oversubscription.value, "must be at least 1 (1 = non-blocking)")
        });
        if let Some(n) = &f.nodes_per_leaf {
            p.check(n.value.fract() == 0.0, || {
                ConfigError::invalid(path, "fabric.nodes_per_leaf.value", n.value, "must be a whole number of nodes")
                    .with_hint("the nodes whose NIC k one leaf switch joins, e.g. 32 in a DGX H100 SuperPOD scalable unit")
            });
        }
    }
    p.check(w.pue.value >= 1.0, || ConfigError::invalid(path, "pue.value", w.pue.value, "must be at least 1"));
    let system = System {
        name: w.name.clone(),
        display_name: w.display_name.clone(),
        gpu,
        gpus_per_node: w.gpus_per_node,
        nvlink_domain_size: w.nvlink_domain_size,
        scale_up,
        nvswitch: w.nvswitch,
        nvls: w.nvls,
        nics_per_node: w.nics_per_node,
        nic_bandwidth: w.nic_bandwidth_gbit_per_s.as_ref().map(|s| s.to_sourced(path, "nic_bandwidth_gbit_per_s", false, BytesPerSec::gbit_per_s, &mut p)),
        fabric: w.fabric.as_ref().map(|f| Fabric {
            kind: f.kind.clone(),
            rail_optimized: f.rail_optimized,
            oversubscription: f.oversubscription.to_sourced(path, "fabric.oversubscription", false, |x| x, &mut p),
            latency: f.latency_us.to_sourced(path, "fabric.latency_us", false, Seconds::us, &mut p),
            nodes_per_leaf: f.nodes_per_leaf.as_ref().map(|n| n.to_sourced(path, "fabric.nodes_per_leaf", false, |x| x as u32, &mut p)),
        }),
        host_power_per_node: w.host_power_per_node_w.to_sourced(path, "host_power_per_node_w", true, Watts::new, &mut p),
        pue: w.pue.to_sourced(path, "pue", false, |x| x, &mut p),
        calibration: w.calibration.clone(),
    };
    p.finish()?;
    Ok(system)
}

/// The catalog GPU a driver name (`NVIDIA H200`, `NVIDIA H100 80GB HBM3`) describes: the one whose
/// display name carries the same model token (H200, H100, B200, GB200, A100), if exactly one does
/// (or exactly one of them also carries the driver name's memory size, `80GB`).
pub fn gpu_by_driver_name(driver_name: &str) -> Option<Gpu> {
    let token = |s: &str| -> Option<String> {
        s.split(|c: char| !c.is_ascii_alphanumeric())
            .find(|t| {
                t.len() >= 4
                    && t.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                    && t.chars().any(|c| c.is_ascii_digit())
                    && t.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
            })
            .map(str::to_string)
    };
    let want = token(driver_name)?;
    let matches: Vec<Gpu> =
        super::list_names(DIR).iter().filter_map(|n| load_gpu(n).ok()).filter(|g| token(&g.display_name).as_deref() == Some(want.as_str())).collect();
    // Two parts of one model (H100 SXM 80 GB HBM3 and 96 GB HBM2e) are told apart by the memory
    // size both names carry (`80GB`).
    let size = |s: &str| -> Option<String> {
        s.split(|c: char| !c.is_ascii_alphanumeric())
            .find(|t| t.len() > 2 && t.ends_with("GB") && t[..t.len() - 2].chars().all(|c| c.is_ascii_digit()))
            .map(str::to_string)
    };
    let matches: Vec<Gpu> = match (matches.len(), size(driver_name)) {
        (n, Some(gb)) if n > 1 => matches.into_iter().filter(|g| size(&g.display_name).as_deref() == Some(gb.as_str())).collect(),
        _ => matches,
    };
    if matches.len() == 1 {
        matches.into_iter().next()
    } else {
        None
    }
}
