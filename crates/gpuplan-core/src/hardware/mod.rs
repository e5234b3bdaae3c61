//! Hardware description: GPU, node, fabric, power. Built by `config` from the TOML catalog in
//! `calibration/systems/`; every number keeps where it came from (`Source`).

pub mod profile;

use crate::units::{Bytes, BytesPerSec, FlopsPerSec, Hertz, Seconds, Watts};

/// Where a number came from. Every prediction can list the numbers it used with their origin.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// A vendor datasheet or published document (the citation).
    Datasheet(String),
    /// Measured by `gpuplan calibrate` or by hand on a named machine (the citation).
    Measured(String),
    /// Measured on another GPU and carried over (from where, and how it was scaled).
    Transferred(String),
    /// No source could be found; the value is an engineering estimate and says so.
    Unsourced(String),
}

impl Source {
    pub fn kind(&self) -> &'static str {
        match self {
            Source::Datasheet(_) => "datasheet",
            Source::Measured(_) => "measured",
            Source::Transferred(_) => "transferred",
            Source::Unsourced(_) => "unsourced",
        }
    }
    pub fn citation(&self) -> &str {
        match self {
            Source::Datasheet(s) | Source::Measured(s) | Source::Transferred(s) | Source::Unsourced(s) => s,
        }
    }
}

/// A value together with its provenance.
#[derive(Debug, Clone, PartialEq)]
pub struct Sourced<T> {
    pub value: T,
    pub source: Source,
}

impl<T: Copy> Sourced<T> {
    pub fn new(value: T, source: Source) -> Self {
        Sourced { value, source }
    }
    pub fn get(&self) -> T {
        self.value
    }
}

/// Numeric formats the tensor cores (and CUDA cores for fp32) run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dtype {
    Fp4,
    Fp8,
    Bf16,
    Fp16,
    Tf32,
    Fp32,
}

impl Dtype {
    pub fn bytes(self) -> f64 {
        match self {
            Dtype::Fp4 => 0.5,
            Dtype::Fp8 => 1.0,
            Dtype::Bf16 | Dtype::Fp16 => 2.0,
            Dtype::Tf32 | Dtype::Fp32 => 4.0,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Fp4 => "fp4",
            Dtype::Fp8 => "fp8",
            Dtype::Bf16 => "bf16",
            Dtype::Fp16 => "fp16",
            Dtype::Tf32 => "tf32",
            Dtype::Fp32 => "fp32",
        }
    }
    pub fn parse(s: &str) -> Option<Dtype> {
        Some(match s {
            "fp4" | "nvfp4" => Dtype::Fp4,
            "fp8" => Dtype::Fp8,
            "bf16" => Dtype::Bf16,
            "fp16" => Dtype::Fp16,
            "tf32" => Dtype::Tf32,
            "fp32" => Dtype::Fp32,
            _ => return None,
        })
    }
    pub const ALL: [Dtype; 6] = [Dtype::Fp4, Dtype::Fp8, Dtype::Bf16, Dtype::Fp16, Dtype::Tf32, Dtype::Fp32];
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    Ampere,
    Hopper,
    Blackwell,
}

/// Dense peak throughput per dtype; `None` where the GPU has no such tensor-core path.
#[derive(Debug, Clone, PartialEq)]
pub struct PeakTable {
    pub fp4: Option<Sourced<FlopsPerSec>>,
    pub fp8: Option<Sourced<FlopsPerSec>>,
    pub bf16: Sourced<FlopsPerSec>,
    pub fp16: Sourced<FlopsPerSec>,
    pub tf32: Sourced<FlopsPerSec>,
    pub fp32: Sourced<FlopsPerSec>,
}

impl PeakTable {
    pub fn get(&self, dtype: Dtype) -> Option<&Sourced<FlopsPerSec>> {
        match dtype {
            Dtype::Fp4 => self.fp4.as_ref(),
            Dtype::Fp8 => self.fp8.as_ref(),
            Dtype::Bf16 => Some(&self.bf16),
            Dtype::Fp16 => Some(&self.fp16),
            Dtype::Tf32 => Some(&self.tf32),
            Dtype::Fp32 => Some(&self.fp32),
        }
    }
}

/// One GPU model.
#[derive(Debug, Clone, PartialEq)]
pub struct Gpu {
    pub name: String,
    pub display_name: String,
    pub arch: Arch,
    pub sm_count: Sourced<u32>,
    /// Maximum boost clock of the SMs.
    pub max_clock: Sourced<Hertz>,
    /// The SM clock the datasheet's peak TFLOPS are quoted at.
    pub spec_clock: Sourced<Hertz>,
    pub peak: PeakTable,
    pub hbm_capacity: Sourced<Bytes>,
    pub hbm_bandwidth: Sourced<BytesPerSec>,
    pub l2_cache: Sourced<Bytes>,
    pub nvlink_generation: Sourced<u32>,
    /// NVLink bandwidth per GPU, one direction (NVIDIA quotes both directions added).
    pub nvlink_bandwidth: Sourced<BytesPerSec>,
    pub tdp: Sourced<Watts>,
    pub idle_power: Sourced<Watts>,
    pub efficiency: Efficiency,
}

/// Achievable fractions of peak: datasheet-derived defaults in the GPU file, replaced by a measured
/// profile (`calibrate`) where one is given.
#[derive(Debug, Clone, PartialEq)]
pub struct Efficiency {
    /// Best fraction of dense peak a large GEMM sustains (at the power-capped clock it settles at).
    pub gemm_max: Sourced<f64>,
    /// Fraction of datasheet HBM bandwidth a streaming kernel reaches.
    pub hbm: Sourced<f64>,
    /// Fraction of peak flash attention reaches in forward (backward is lower, see `cost`): the
    /// FlashAttention-2 kernels PyTorch's SDPA runs (the `torch-*` stacks).
    pub attention: Sourced<f64>,
    /// The same for the vendor's fused attention that Transformer Engine calls (cuDNN; what
    /// Megatron-Core runs, the `megatron` stack), quoted at the same shape.
    pub fused_attention: Sourced<f64>,
    /// Fraction of unidirectional NVLink bandwidth NCCL reaches as bus bandwidth on large messages.
    pub nvlink_busbw: Sourced<f64>,
    /// Fraction of NIC line rate NCCL reaches as bus bandwidth across nodes.
    pub network_busbw: Sourced<f64>,
    /// Kernel launch plus small-message latency per kernel (fixed cost of one op).
    pub kernel_overhead: Sourced<Seconds>,
    /// SM clock a sustained dense GEMM settles at under the TDP cap.
    pub sustained_gemm_clock: Sourced<Hertz>,
    /// GPU power while an HBM-bound kernel streams (below TDP on Hopper).
    pub hbm_load_power: Sourced<Watts>,
}

/// Scale-out fabric between nodes (or NVL domains).
#[derive(Debug, Clone, PartialEq)]
pub struct Fabric {
    /// "infiniband" or "ethernet" (RoCE).
    pub kind: String,
    /// Rail-optimized: NIC i of every node on leaf switch i.
    pub rail_optimized: bool,
    /// Leaf-to-spine oversubscription (1.0 = non-blocking).
    pub oversubscription: Sourced<f64>,
    /// One-way latency of a small message between nodes.
    pub latency: Sourced<Seconds>,
}

/// A node type and the cluster fabric that joins nodes.
#[derive(Debug, Clone, PartialEq)]
pub struct System {
    pub name: String,
    pub display_name: String,
    pub gpu: Gpu,
    pub gpus_per_node: u32,
    /// GPUs joined by one NVLink/NVSwitch domain: 8 in a DGX, 72 in a GB200 NVL72 rack.
    pub nvlink_domain_size: u32,
    pub nvswitch: bool,
    /// NVLink SHARP in-switch reduction (NVLS).
    pub nvls: bool,
    pub nics_per_node: u32,
    /// Line rate of one NIC.
    pub nic_bandwidth: Sourced<BytesPerSec>,
    pub fabric: Fabric,
    /// Power of a node beyond its GPUs (CPUs, NICs, fans, switches), under load.
    pub host_power_per_node: Sourced<Watts>,
    pub pue: Sourced<f64>,
    /// The calibration profile measured on this system, if its file names one.
    pub calibration: Option<String>,
}

impl System {
    /// Bandwidth one GPU can drive across the scale-out fabric (its share of the node's NICs).
    pub fn network_bandwidth_per_gpu(&self) -> BytesPerSec {
        self.nic_bandwidth.value * (self.nics_per_node as f64 / self.gpus_per_node as f64)
    }
}
