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
    /// Ada Lovelace (L40S): fourth-generation tensor cores, FP8, no FP4.
    Ada,
    Hopper,
    /// Data-centre Blackwell (B200, GB200, B300): 8192 dense bf16 FLOP per clock per SM.
    Blackwell,
    /// Blackwell GB202 (RTX PRO 6000 Blackwell): fifth-generation tensor cores (FP8, NVFP4) at
    /// 1024 dense bf16 FLOP per clock per SM.
    BlackwellRtx,
}

impl Arch {
    /// Both Blackwell families: fifth-generation tensor cores with block-scaled FP8 (MXFP8) and NVFP4.
    pub fn is_blackwell(self) -> bool {
        matches!(self, Arch::Blackwell | Arch::BlackwellRtx)
    }
}

/// How the GPUs of one node (one scale-up domain) reach each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScaleUp {
    /// NVLink, through NVSwitches or direct.
    NvLink,
    /// PCIe only (L40S and RTX PRO 6000 servers): peer traffic crosses each GPU's x16 host link,
    /// through PCIe switches or the CPU's root complex.
    Pcie,
}

impl ScaleUp {
    pub fn name(self) -> &'static str {
        match self {
            ScaleUp::NvLink => "nvlink",
            ScaleUp::Pcie => "pcie",
        }
    }
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
    /// Last-level cache; `None` where no datasheet gives it (no model reads it yet).
    pub l2_cache: Option<Sourced<Bytes>>,
    /// `None` on GPUs without NVLink (L40S, RTX PRO 6000).
    pub nvlink_generation: Option<Sourced<u32>>,
    /// NVLink bandwidth per GPU, one direction (NVIDIA quotes both directions added).
    pub nvlink_bandwidth: Option<Sourced<BytesPerSec>>,
    /// PCIe generation of the GPU's x16 host link, where the file gives it.
    pub pcie_generation: Option<Sourced<u32>>,
    /// The x16 host link's bandwidth per GPU, one direction (NVIDIA quotes both directions added).
    pub pcie_bandwidth: Option<Sourced<BytesPerSec>>,
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
    /// Fraction of unidirectional NVLink bandwidth NCCL reaches as bus bandwidth on large messages
    /// (`None` without NVLink).
    pub nvlink_busbw: Option<Sourced<f64>>,
    /// Fraction of the unidirectional x16 PCIe bandwidth a GPU moves each way while sending and
    /// receiving at once, what a ring over PCIe reaches as bus bandwidth (`None` where not given).
    pub pcie_busbw: Option<Sourced<f64>>,
    /// Fraction of NIC line rate NCCL reaches as bus bandwidth across nodes (`None` for a GPU only
    /// shipped in systems without a sourced scale-out network; `config` requires it where a system
    /// has one).
    pub network_busbw: Option<Sourced<f64>>,
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
    /// Nodes whose NIC k sits on one leaf switch (rail k of a scalable unit); `None` where no
    /// reference architecture at hand gives it (the per-rank engine then models no leaf uplinks).
    pub nodes_per_leaf: Option<Sourced<u32>>,
}

/// A node type and the cluster fabric that joins nodes.
#[derive(Debug, Clone, PartialEq)]
pub struct System {
    pub name: String,
    pub display_name: String,
    pub gpu: Gpu,
    pub gpus_per_node: u32,
    /// GPUs joined by one NVLink/NVSwitch domain: 8 in a DGX, 72 in a GB200 NVL72 rack; on a PCIe
    /// node (`scale_up` = `Pcie`), the GPUs of one node.
    pub nvlink_domain_size: u32,
    /// What joins the GPUs of one domain.
    pub scale_up: ScaleUp,
    pub nvswitch: bool,
    /// NVLink SHARP in-switch reduction (NVLS).
    pub nvls: bool,
    /// 0 where the system file gives no scale-out network (`nic_bandwidth` is then `None`).
    pub nics_per_node: u32,
    /// Line rate of one NIC; `None` where no sourced scale-out network is known: such a system
    /// runs on one node only (`check_scenario` refuses more GPUs).
    pub nic_bandwidth: Option<Sourced<BytesPerSec>>,
    pub fabric: Option<Fabric>,
    /// Power of a node beyond its GPUs (CPUs, NICs, fans, switches), under load.
    pub host_power_per_node: Sourced<Watts>,
    pub pue: Sourced<f64>,
    /// The calibration profile measured on this system, if its file names one.
    pub calibration: Option<String>,
}

impl System {
    /// Bandwidth one GPU can drive across the scale-out fabric (its share of the node's NICs);
    /// zero where the system has no scale-out network (`check_scenario` refuses such groups first).
    pub fn network_bandwidth_per_gpu(&self) -> BytesPerSec {
        let fraction_known = self.gpu.efficiency.network_busbw.is_some();
        self.nic_bandwidth.as_ref().filter(|_| fraction_known).map_or(BytesPerSec::ZERO, |b| b.value * (self.nics_per_node as f64 / self.gpus_per_node as f64))
    }

    /// The link that joins the GPUs of one domain, one direction per GPU, and the fraction of it
    /// NCCL reaches as bus bandwidth: NVLink, or the x16 PCIe host link. `None` where the GPU file
    /// lacks the number (`config` refuses such a system file; a hand-built one is refused by
    /// `check_scenario` when a group spans GPUs).
    pub fn scale_up_link(&self) -> Option<(&Sourced<BytesPerSec>, &Sourced<f64>)> {
        let (g, e) = (&self.gpu, &self.gpu.efficiency);
        match self.scale_up {
            ScaleUp::NvLink => g.nvlink_bandwidth.as_ref().zip(e.nvlink_busbw.as_ref()),
            ScaleUp::Pcie => g.pcie_bandwidth.as_ref().zip(e.pcie_busbw.as_ref()),
        }
    }

    /// The most GPUs a scenario may use: one node where the system has no scale-out network.
    pub fn max_gpus(&self) -> Option<u64> {
        (self.nic_bandwidth.is_none() || self.gpu.efficiency.network_busbw.is_none()).then_some(self.gpus_per_node as u64)
    }
}
