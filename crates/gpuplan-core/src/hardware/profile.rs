//! A measured profile of one node, as `calibrate` fits it and `cost` uses it. Built by
//! `config::profile` from `calibration/profiles/<name>.toml`; `cost` never reads files.

use super::Dtype;
use crate::units::{BytesPerSec, FlopsPerSec, Hertz, Seconds, Watts};

/// One measured GEMM: `C[m,n] = A[m,k] B[k,n]` in `dtype`, median over repetitions.
#[derive(Debug, Clone, PartialEq)]
pub struct GemmPoint {
    pub dtype: Dtype,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub achieved: FlopsPerSec,
    /// Mean SM clock while it ran (the power cap lowers it under sustained load).
    pub sm_clock: Hertz,
}

/// Attention-like batched GEMMs at one (s, d) in bf16: QK^T and PV of `seq_len` queries over
/// `seq_len` keys with head dim `head_dim`, batched over (sequence, head) pairs; achieved FLOP/s of
/// the two together (their FLOPs over the sum of their times).
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionBmmPoint {
    pub seq_len: u64,
    pub head_dim: u64,
    pub achieved: FlopsPerSec,
}

/// A decode-like pair of batched GEMMs (`rows` query rows of one KV head against `seq_kv` keys of
/// head dim `head_dim`, QK^T then PV): the HBM rate the two reach together (bytes they must move
/// over the sum of their times). Memory-bound, so this is what an unfused decode attention gets.
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionDecodePoint {
    pub rows: u64,
    pub seq_kv: u64,
    pub head_dim: u64,
    pub bandwidth: BytesPerSec,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CollectiveOp {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    SendRecv,
}

impl CollectiveOp {
    pub fn name(self) -> &'static str {
        match self {
            CollectiveOp::AllReduce => "all_reduce",
            CollectiveOp::AllGather => "all_gather",
            CollectiveOp::ReduceScatter => "reduce_scatter",
            CollectiveOp::AllToAll => "all_to_all",
            CollectiveOp::SendRecv => "send_recv",
        }
    }
    /// nccl-tests' bus-bandwidth factor: busbw = algbw * factor(n).
    pub fn busbw_factor(self, n_ranks: u32) -> f64 {
        let n = n_ranks as f64;
        match self {
            CollectiveOp::AllReduce => 2.0 * (n - 1.0) / n,
            CollectiveOp::AllGather | CollectiveOp::ReduceScatter | CollectiveOp::AllToAll => (n - 1.0) / n,
            CollectiveOp::SendRecv => 1.0,
        }
    }
}

/// time(size) = latency + size * busbw_factor / busbw, fitted over message sizes on one group.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectiveFit {
    pub op: CollectiveOp,
    pub n_ranks: u32,
    /// All ranks within one NVLink domain (true on one node).
    pub intra_node: bool,
    pub latency: Seconds,
    pub busbw: BytesPerSec,
}

/// Time of a memory-bound kernel: latency + bytes / bandwidth (bytes read + written).
#[derive(Debug, Clone, PartialEq)]
pub struct StreamFit {
    pub latency: Seconds,
    pub bandwidth: BytesPerSec,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PowerProfile {
    pub idle: Watts,
    /// Sustained dense GEMM: power and the SM clock it settles at (the cap's doing).
    pub gemm_load: Watts,
    pub gemm_clock: Hertz,
    /// HBM-bound streaming kernel.
    pub hbm_load: Watts,
    pub power_limit: Watts,
    pub max_clock: Hertz,
}

/// What `calibrate --host` measured of the framework's host side on one node: PyTorch and
/// transformers running a decode step, timed with the GPU nearly idle
/// (scenarios/workloads/host_probe.py; `calibrate::host` fits these from its table). Prices the
/// host in inference under the `hf-*` stacks (`cost::lower`).
#[derive(Debug, Clone, PartialEq)]
pub struct HostProbe {
    /// Machine, date and command.
    pub provenance: String,
    /// One transformers decoder layer's host time in a one-token decode step: its module calls,
    /// dispatcher ops and kernel launches and its `DynamicCache.update` (SDPA's flash backend, so
    /// no plan is built): the per-layer slope of a whole step between two depths.
    pub hf_decode_layer: Seconds,
    /// The rest of a one-token step (embedding, final norm, LM head, argmax, the model's Python):
    /// the same line's intercept.
    pub hf_decode_fixed: Seconds,
    /// `generate()`'s per-token host time over the manual loop's, per layer and fixed.
    pub hf_generate_layer: Seconds,
    pub hf_generate_fixed: Seconds,
    /// SDPA's cuDNN backend: host time of an attention call whose KV length is new (cuDNN builds
    /// an execution plan for every new shape) less that of a call of a known shape; the median
    /// over the probed decode shapes.
    pub sdpa_cudnn_plan: Seconds,
    /// One dispatcher op and kernel launch from Python (`torch.add` of tiny tensors).
    pub op_dispatch: Seconds,
    /// Taken in the predicted run's own period (a run record's host probe,
    /// `record::RunHostProbe::applied_to`), not at calibration time: a decode step then pays the
    /// probe's whole plan build (`cost::lower::hf_inference_host`), not the fitted share of it.
    pub in_period: bool,
}

/// What `calibrate` measured on one node. Every part is optional: a quick run may skip some, and
/// `cost` falls back to the GPU file's datasheet-derived values for what is missing, saying so.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Profile {
    pub name: String,
    /// GPU name as the driver reports it, e.g. "NVIDIA H200".
    pub gpu_name: String,
    pub n_gpus: u32,
    /// Machine, date and command, for provenance lines.
    pub provenance: String,
    pub gemm: Vec<GemmPoint>,
    /// Attention-like batched GEMMs vs (s, d); `cost` takes attention's shape dependence from
    /// them (empty in profiles measured before the `attention` group existed).
    pub attention_bmm: Vec<AttentionBmmPoint>,
    /// Decode-like batched GEMMs, from the `decode` rows of the profile's `attention.csv` (empty
    /// without them).
    pub attention_decode: Vec<AttentionDecodePoint>,
    pub stream: Option<StreamFit>,
    pub kernel_launch: Option<Seconds>,
    pub collectives: Vec<CollectiveFit>,
    pub power: Option<PowerProfile>,
    /// The framework's host costs (`calibrate --host`), when probed.
    pub host: Option<HostProbe>,
    /// Grouped GEMMs and MoE index kernels (`calibrate --moe`), when probed.
    pub moe: Option<MoeKernels>,
    /// The catalog GPU the profile was measured on, when `config` could tell which it is. A
    /// profile applied to another GPU is transferred: only its dimensionless parts (GEMM
    /// efficiency vs shape, HBM efficiency, attention's shape dependence) carry over, scaled to the
    /// other GPU's peaks.
    pub measured_gpu: Option<Box<super::Gpu>>,
}

impl Profile {
    /// HBM rate of an unfused decode attention with `rows` query rows per KV head: the measured
    /// points of the nearest row count and head dim (log distance), median over their key counts.
    pub fn decode_attention_bandwidth(&self, rows: u64, head_dim: u64) -> Option<BytesPerSec> {
        let dist = |a: u64, b: u64| ((a.max(1) as f64).ln() - (b.max(1) as f64).ln()).abs();
        let best = self
            .attention_decode
            .iter()
            .min_by(|a, b| (dist(a.rows, rows) + dist(a.head_dim, head_dim)).total_cmp(&(dist(b.rows, rows) + dist(b.head_dim, head_dim))))?;
        let mut v: Vec<f64> =
            self.attention_decode.iter().filter(|p| p.rows == best.rows && p.head_dim == best.head_dim).map(|p| p.bandwidth.value()).collect();
        v.sort_by(f64::total_cmp);
        Some(BytesPerSec::gb_per_s(v[v.len() / 2] / 1e9))
    }
}

/// Which grouped (per-expert) GEMM kernel a [`GroupedGemmPoint`] timed
/// (scenarios/workloads/moe_probe.py, `calibrate --moe`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GroupedKernel {
    /// `torch.nn.functional.grouped_mm` / `torch._grouped_mm`: PyTorch's CUTLASS grouped kernel in
    /// bf16; in fp32 PyTorch's `_grouped_mm_fallback` (offsets copied to the host, one `mm` per
    /// group), whose time includes the host's launches.
    GroupedMm,
    /// `torch.bmm` over equal groups (cuBLAS strided-batched GEMM).
    Bmm,
    /// `torch._scaled_grouped_mm`: FP8 e4m3 with rowwise scales.
    ScaledGroupedMm,
}

impl GroupedKernel {
    pub fn name(self) -> &'static str {
        match self {
            GroupedKernel::GroupedMm => "grouped_mm",
            GroupedKernel::Bmm => "bmm",
            GroupedKernel::ScaledGroupedMm => "scaled_grouped_mm",
        }
    }
    pub const ALL: [GroupedKernel; 3] = [GroupedKernel::GroupedMm, GroupedKernel::Bmm, GroupedKernel::ScaledGroupedMm];
}

/// How a grouped GEMM splits its rows over the groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GroupedLayout {
    /// `C[T,n] = A[T,k] B_e[k,n]` per expert: the experts' forward and data-gradient GEMMs
    /// (2d x 3d, the tokens split the rows M).
    Mk,
    /// `C_e[k,n] = A_e[T,k]^T dY_e[T,n]`: the weight gradient (2d x 2d, the tokens split the
    /// reduction dimension).
    K,
}

/// One grouped GEMM the MoE probe timed: `experts` groups of `tokens` rows each (balanced), per
/// group widths `k` (reduction of layout `Mk`) and `n`; `time` per call (CUDA events; for the fp32
/// fallback the host wall clock per call with a synchronize, which is what a step waits for).
#[derive(Debug, Clone, PartialEq)]
pub struct GroupedGemmPoint {
    pub kernel: GroupedKernel,
    pub dtype: Dtype,
    pub layout: GroupedLayout,
    pub experts: u64,
    pub tokens: u64,
    pub k: u64,
    pub n: u64,
    pub time: Seconds,
}

/// The MoE index and permutation kernels the probe times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MoeIndexKernel {
    RouterSoftmaxTopk,
    Argsort,
    Histc,
    Bincount,
    Cumsum,
    GatherRows,
    ScatterInverse,
    WeightRows,
    UnpermuteGather,
    TopkSum,
    IndexAdd,
    ScatterAdd,
}

impl MoeIndexKernel {
    pub const ALL: [MoeIndexKernel; 12] = [
        MoeIndexKernel::RouterSoftmaxTopk,
        MoeIndexKernel::Argsort,
        MoeIndexKernel::Histc,
        MoeIndexKernel::Bincount,
        MoeIndexKernel::Cumsum,
        MoeIndexKernel::GatherRows,
        MoeIndexKernel::ScatterInverse,
        MoeIndexKernel::WeightRows,
        MoeIndexKernel::UnpermuteGather,
        MoeIndexKernel::TopkSum,
        MoeIndexKernel::IndexAdd,
        MoeIndexKernel::ScatterAdd,
    ];
    pub fn name(self) -> &'static str {
        match self {
            MoeIndexKernel::RouterSoftmaxTopk => "router_softmax_topk",
            MoeIndexKernel::Argsort => "argsort",
            MoeIndexKernel::Histc => "histc",
            MoeIndexKernel::Bincount => "bincount",
            MoeIndexKernel::Cumsum => "cumsum",
            MoeIndexKernel::GatherRows => "gather_rows",
            MoeIndexKernel::ScatterInverse => "scatter_inverse",
            MoeIndexKernel::WeightRows => "weight_rows",
            MoeIndexKernel::UnpermuteGather => "unpermute_gather",
            MoeIndexKernel::TopkSum => "topk_sum",
            MoeIndexKernel::IndexAdd => "index_add",
            MoeIndexKernel::ScatterAdd => "scatter_add",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }
}

/// One MoE index kernel the probe timed at `tokens` tokens of width `hidden`, `experts` experts,
/// `top_k`: `time` per call and the bytes it must move at least (the probe's count).
#[derive(Debug, Clone, PartialEq)]
pub struct MoeIndexPoint {
    pub kernel: MoeIndexKernel,
    pub experts: u64,
    pub tokens: u64,
    pub hidden: u64,
    pub top_k: u64,
    pub time: Seconds,
    pub bytes: f64,
}

/// What `calibrate --moe` measured (`moe.toml` + `moe.csv` beside a profile): grouped GEMMs and
/// MoE index kernels. `cost::grouped` reads them.
#[derive(Debug, Clone, PartialEq)]
pub struct MoeKernels {
    /// Machine, date, software and command.
    pub provenance: String,
    pub grouped: Vec<GroupedGemmPoint>,
    pub index: Vec<MoeIndexPoint>,
}
