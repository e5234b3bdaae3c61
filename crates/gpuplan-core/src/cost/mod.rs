//! Op -> seconds on one GPU; collective -> seconds on a group over the links it crosses.
//!
//! Compute-bound ops are priced at the clock a sustained GEMM settles at under the power cap
//! (where both the datasheet-derived efficiencies and `calibrate`'s measurements are taken); the
//! caller scales them by `power`'s clock factor. Every number used is listed with its source.

pub mod fitted;
pub mod grouped;
pub mod lower;
pub mod nccl;

use crate::hardware::profile::{AttentionBmmPoint, CollectiveOp, Profile};
use crate::hardware::{Arch, Dtype, ScaleUp, Source, Sourced, System};
use crate::parallelism::GroupShape;
use crate::units::{Bytes, BytesPerSec, Flops, FlopsPerSec, Seconds};
use crate::workload::{Op, OpKind};

/// What limits a kernel; the engines sum time by bound (collectives are `lower::CommStep`s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Bound {
    Compute,
    Memory,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OpCost {
    /// Time at the sustained clock (`efficiency.sustained_gemm_clock`).
    pub time: Seconds,
    pub bound: Bound,
    /// Of `time`, the part a faster SM clock does not shorten: all of a memory-bound op's; of a
    /// compute-bound op's, its kernel overhead and the memory floor it meets before the top clock
    /// ([`CostModel::clocked`]). [`OpCost::at`] prices the op at another clock.
    pub fixed: Seconds,
}

impl OpCost {
    /// The time at `speedup` x the sustained clock: the clock-bound part shortens, `fixed` does not.
    pub fn at(&self, speedup: f64) -> Seconds {
        match self.bound {
            Bound::Compute => self.fixed + (self.time - self.fixed) / speedup,
            Bound::Memory => self.time,
        }
    }
}

/// One number a prediction used, with its origin.
#[derive(Debug, Clone, PartialEq)]
pub struct UsedNumber {
    pub name: String,
    pub value: String,
    pub source: Source,
}

/// Fraction of peak FlashAttention-2/3 backward reaches relative to its forward on Hopper
/// (FA3 paper, Shah et al. 2024, fig. 5-7: forward up to ~740, backward ~480-560 TFLOP/s in bf16);
/// an estimate applied to all GPUs.
const ATTENTION_BACKWARD_RATIO: f64 = 0.7;

/// Backward over forward TFLOP/s of the fused (cuDNN) attention Transformer Engine calls: 447.1 /
/// 608.4 on an H100 SXM (bf16, causal, b 2, 32 heads, d 128, s 8192; backward TFLOP/s counted as
/// 2.5x the forward FLOPs; cuDNN 9.19, PyTorch 2.11 SDPA's cuDNN backend, 2026-11-24,
/// scripts/bench_attention.py, calibration/runs/raw/attention-h100-2026-11-24/). Measured, not
/// fitted; applied to every GPU.
const FUSED_ATTENTION_BACKWARD_RATIO: f64 = 0.735;

/// Backward over forward TFLOP/s of the same cuDNN fused attention at long sequences (s >= 16384):
/// 0.8795, the mean of the six causal rows at s 16K-128K of two H100 SXM runs (b 2, 32 heads, s
/// 16K/32K: 0.869, 0.844, calibration/runs/raw/attention-h100-2026-11-24/; b 1, 32 heads, s
/// 16K..128K: 0.907, 0.878, 0.812, 0.968, calibration/runs/raw/attention-long-h100-2026-11-24/,
/// scripts/bench_attention_long.py; d 128, bf16, cuDNN 9.19, 2026-11-24). Measured, not fitted.
/// Held out: the six non-causal ring-attention block rows of the second run at s = sqrt(s_q s_kv)
/// 11.6K..46K average 0.855 (3% lower). Between s 8192 ([`FUSED_ATTENTION_BACKWARD_RATIO`]) and
/// 16384 the ratio is linear in ln s; beyond 16384 it stays flat (the rows show no trend to 128K).
const FUSED_ATTENTION_BACKWARD_RATIO_LONG: f64 = 0.8795;

/// The fused (cuDNN) attention's backward-over-forward ratio at sequence length `s` (s = sqrt(s_q
/// s_kv) of one kernel's block): `FUSED_ATTENTION_BACKWARD_RATIO` up to s 8192,
/// `FUSED_ATTENTION_BACKWARD_RATIO_LONG` from 16384, linear in ln s between.
pub fn fused_backward_ratio(s: f64) -> f64 {
    let (lo, hi) = (8192f64.ln(), 16384f64.ln());
    let t = ((s.max(1.0).ln() - lo) / (hi - lo)).clamp(0.0, 1.0);
    FUSED_ATTENTION_BACKWARD_RATIO + t * (FUSED_ATTENTION_BACKWARD_RATIO_LONG - FUSED_ATTENTION_BACKWARD_RATIO)
}

/// The fused (cuDNN) attention's level on causal calls with less work than the one its level is
/// quoted at, forward and backward: (forward FLOPs of one call, forward TFLOP/s over the reference
/// call's, backward TFLOP/s over the reference call's). Measured on an H100 SXM (PyTorch 2.11 SDPA
/// cuDNN backend, cuDNN 9.19, bf16, causal, b 2, 32 heads, d 128, s 1024 / 2048 / 4096 / 8192:
/// forward 127.4 / 300.0 / 524.9 / 608.4 TFLOP/s, backward 107.5 / 245.3 / 390.2 / 447.1;
/// scripts/bench_attention.py, 2026-11-24, calibration/runs/raw/attention-h100-2026-11-24/). The
/// last row is the reference `fused_attention_fraction` is quoted at (1.1e12 FLOPs). Measured, not
/// fitted; applied to every GPU as the level is.
///
/// The variable is the call's work, not its sequence length: held out, the b 1 rows of
/// calibration/runs/raw/attention-long-h100-2026-11-24/ (same versions) read 0.678 at s 4096
/// (measured 406.3 / 608.4 = 0.668) and 0.930 at s 8192 (measured 563.5 / 608.4 = 0.926) in
/// forward. Above the reference work the level holds (s 16K-128K rows: 0.90-1.03).
const FUSED_ATTENTION_SMALL_CAUSAL: [(f64, f64, f64); 4] =
    [(1.718e10, 127.4 / 608.4, 107.5 / 447.1), (6.872e10, 300.0 / 608.4, 245.3 / 447.1), (2.749e11, 524.9 / 608.4, 390.2 / 447.1), (1.0995e12, 1.0, 1.0)];

/// The same for non-causal calls (the blocks of Transformer Engine's load-balanced ring attention,
/// queries 2c x keys c and c x 2c), which lose less at the same work than causal ones: measured in
/// the same session (b 1, 8 heads, d 128, bf16, calibration/runs/raw/attention-long-h100-2026-11-24/,
/// scripts/bench_attention_long.py), the mean of the two block orientations over the causal
/// reference (608.4 forward, 447.1 backward): c 2048, 3.4e10 FLOPs, forward 403.2 (0.663), backward
/// 326.1 (0.729); c 4096, 1.37e11, 554.8 (0.912) and 467.9 (1.047, held at 1); c 8192, 5.5e11,
/// 626.9 and 506.6 (both held at 1). Below the smallest block measured the factor is held, above
/// the largest it is 1.
const FUSED_ATTENTION_SMALL_BLOCKS: [(f64, f64, f64); 3] = [(3.436e10, 403.2 / 608.4, 326.1 / 447.1), (1.374e11, 554.8 / 608.4, 1.0), (5.498e11, 1.0, 1.0)];

/// The shortest query or key side the small-call tables were measured at (s 1024 causal; c 2048
/// blocks, whose short side is 2048): below it (decode steps, short prompts) no factor is applied,
/// as no such call was measured.
const FUSED_SMALL_CALL_MIN_SIDE: u64 = 1024;

/// The fused attention's level factor on a call of `work` forward FLOPs, causal or not
/// (`FUSED_ATTENTION_SMALL_CAUSAL`, `FUSED_ATTENTION_SMALL_BLOCKS`: linear in ln work between
/// the measured calls, held below the smallest, 1 above the largest), forward or backward.
pub fn fused_small_call_factor(work: f64, causal: bool, backward: bool) -> f64 {
    let t: &[(f64, f64, f64)] = if causal { &FUSED_ATTENTION_SMALL_CAUSAL } else { &FUSED_ATTENTION_SMALL_BLOCKS };
    let pick = |p: &(f64, f64, f64)| if backward { p.2 } else { p.1 };
    let w = work.max(1.0);
    if w <= t[0].0 {
        return pick(&t[0]);
    }
    for pair in t.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if w <= b.0 {
            let x = (w.ln() - a.0.ln()) / (b.0.ln() - a.0.ln());
            return pick(a) + x * (pick(b) - pick(a));
        }
    }
    1.0
}

/// The share of a causal `s x s` attention's computed score blocks that the causal half needs:
/// a fused kernel (cuDNN, FlashAttention) walks 128-query tiles and, in each, the 128-key tiles up
/// to the diagonal, computing every tile it visits whole: `n (n + 1) / 2` tiles of 128^2 for
/// `n = ceil(s / 128)`, against `s^2 / 2` scores. 0.97 at s 4096, 0.37 at s 190 (packed SQuAD
/// documents, `workload.packed_doc_len`); 1 in the limit. Applied only below the measured calls
/// (`FUSED_SMALL_CALL_MIN_SIDE`), whose factors already hold what tiling costs them.
pub fn causal_tile_share(s: u64) -> f64 {
    let n = s.div_ceil(128) as f64;
    let s = s as f64;
    ((s * s / 2.0) / (n * (n + 1.0) / 2.0 * 128.0 * 128.0)).min(1.0)
}

/// The fused (cuDNN) attention's level on short causal sequences, the documents of a packed
/// sequence (Transformer Engine's THD attention with `cu_seqlens` runs each document's causal
/// attention on its own), by sequence length: (tokens, forward TFLOP/s over the long reference
/// call's, backward likewise). Measured on an H100 SXM (PyTorch 2.11 SDPA cuDNN backend, cuDNN
/// 9.19, bf16, causal, 32 heads, d 128, 16,384 tokens per call in 16384 / s sequences of s tokens;
/// scripts/bench_packed_attention.py, 2026-11-24, calibration/runs/raw/packed-attention-h100-2026-11-24/):
/// forward / backward TFLOP/s (causal convention, s^2 / 2 scores) 68.2 / 31.3 at s 128, 109.9 /
/// 48.3 at 190, 157.2 / 64.0 at 256, 224.9 / 93.9 at 384, 269.5 / 120.8 at 512, 368.0 / 211.4 at
/// 1024, against 550.7 / 459.9 for b 2 x s 8192 in the same session (the reference the level is
/// quoted at). They hold the whole 128 x 128 tiles a short causal sequence computes
/// ([`causal_tile_share`]) and the per-tile work a short key range cannot hide (a 190-token
/// document's backward reaches a tenth of the long call's rate). Measured, not fitted; applied to
/// every GPU as the level is. The s 1024 point meets the work-based table
/// (`FUSED_ATTENTION_SMALL_CAUSAL`: 0.68 forward at its 1.4e11 FLOPs) above it.
const FUSED_ATTENTION_SHORT_CAUSAL: [(f64, f64, f64); 6] = [
    (128.0, 68.2 / 550.7, 31.3 / 459.9),
    (190.0, 109.9 / 550.7, 48.3 / 459.9),
    (256.0, 157.2 / 550.7, 64.0 / 459.9),
    (384.0, 224.9 / 550.7, 93.9 / 459.9),
    (512.0, 269.5 / 550.7, 120.8 / 459.9),
    (1024.0, 368.0 / 550.7, 211.4 / 459.9),
];

/// The fused attention's level factor on a causal sequence of `s` tokens shorter than the
/// work-based tables' calls (`FUSED_ATTENTION_SHORT_CAUSAL`, linear in ln s between the measured
/// lengths); below 128 tokens the 128-token factor scaled by the share of its one tile that is
/// still needed ([`causal_tile_share`]).
pub fn fused_short_causal_factor(s: u64, backward: bool) -> f64 {
    let t = &FUSED_ATTENTION_SHORT_CAUSAL;
    let pick = |p: &(f64, f64, f64)| if backward { p.2 } else { p.1 };
    let x = s.max(1) as f64;
    if x <= t[0].0 {
        return pick(&t[0]) * causal_tile_share(s) / causal_tile_share(t[0].0 as u64);
    }
    for pair in t.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if x <= b.0 {
            let f = (x.ln() - a.0.ln()) / (b.0.ln() - a.0.ln());
            return pick(a) + f * (pick(b) - pick(a));
        }
    }
    pick(&t[t.len() - 1])
}

/// One head dim's measured (s, forward factor, backward factor) points, by ascending s.
type HeadDimRow = [(f64, f64, f64); 6];

/// The fused (cuDNN) attention's level at head dim d relative to d 128, where
/// `fused_attention_fraction` and the other fused tables are quoted: (d, [(s, forward factor,
/// backward factor)]). Measured on an H100 SXM (PyTorch 2.11 SDPA left to choose, which ran cuDNN
/// 9.19's fused attention in every row; bf16, causal, 64K tokens per call, s 2K..64K, 8 KV heads
/// and as many as the query heads, the mean of both; d 64 x 32 heads (Llama-3.2-1B), d 80 x 32
/// (Phi-2), d 96 x 32 (Phi-3-mini) over d 128 x 16 and 24 heads (Llama-3.2-3B) at the same s;
/// 2026-11-25, scripts/bench_attention_headdim.py, calibration/runs/raw/attention-headdim-h100-2026-11-25/,
/// factors.txt there). Measured, not fitted; applied to every GPU as the level is. Smaller head
/// dims do less work per loaded K/V tile, so the kernel reaches less of the tensor-core peak;
/// the drop is not monotone in d (d 80 is the slowest: its tiles are padded). A head dim not
/// measured takes the nearest measured one (ties to the larger); above 128 none was measured and
/// the factor is 1. Between the measured lengths linear in ln s, held outside them.
const FUSED_ATTENTION_HEAD_DIM: [(u64, HeadDimRow); 4] = [
    (64, [(2048.0, 0.746, 0.859), (4096.0, 0.754, 0.864), (8192.0, 0.789, 0.818), (16384.0, 0.764, 0.820), (32768.0, 0.759, 0.764), (65536.0, 0.747, 0.766)]),
    (80, [(2048.0, 0.656, 0.766), (4096.0, 0.651, 0.742), (8192.0, 0.656, 0.713), (16384.0, 0.662, 0.669), (32768.0, 0.664, 0.659), (65536.0, 0.644, 0.657)]),
    (96, [(2048.0, 0.802, 0.850), (4096.0, 0.765, 0.850), (8192.0, 0.778, 0.818), (16384.0, 0.789, 0.777), (32768.0, 0.782, 0.756), (65536.0, 0.771, 0.760)]),
    (128, [(2048.0, 1.0, 1.0), (4096.0, 1.0, 1.0), (8192.0, 1.0, 1.0), (16384.0, 1.0, 1.0), (32768.0, 1.0, 1.0), (65536.0, 1.0, 1.0)]),
];

/// The fused attention's head-dim factor (`FUSED_ATTENTION_HEAD_DIM`) at head dim `d` and
/// sequence length `s` (s = sqrt(s_q s_kv)), forward or backward: 1 above d 128.
pub fn fused_head_dim_factor(d: u64, s: f64, backward: bool) -> f64 {
    let t = &FUSED_ATTENTION_HEAD_DIM;
    if d > t[t.len() - 1].0 {
        return 1.0;
    }
    let ld = (d.max(1) as f64).ln();
    let dist = |h: u64| ((h as f64).ln() - ld).abs();
    // Ascending head dims: `<=` lets the larger of two equally near ones win.
    let mut best = &t[0];
    for row in &t[1..] {
        if dist(row.0) <= dist(best.0) {
            best = row;
        }
    }
    let pts = &best.1;
    let pick = |p: &(f64, f64, f64)| if backward { p.2 } else { p.1 };
    let x = s.max(1.0);
    if x <= pts[0].0 {
        return pick(&pts[0]);
    }
    for pair in pts.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if x <= b.0 {
            let f = (x.ln() - a.0.ln()) / (b.0.ln() - a.0.ln());
            return pick(a) + f * (pick(b) - pick(a));
        }
    }
    pick(&pts[pts.len() - 1])
}

/// Which attention kernel a stack runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionKernel {
    /// FlashAttention-2, what PyTorch's SDPA picks (`efficiency.attention_fraction`).
    Flash,
    /// The vendor's fused attention (cuDNN) that Transformer Engine calls
    /// (`efficiency.fused_attention_fraction`).
    Fused,
}

impl AttentionKernel {
    /// The kernel a framework stack runs: Megatron-Core with Transformer Engine runs cuDNN's fused
    /// attention; plain PyTorch (eager or compiled) runs SDPA's FlashAttention-2.
    pub fn of(stack: crate::workload::Stack) -> AttentionKernel {
        match stack {
            crate::workload::Stack::Megatron => AttentionKernel::Fused,
            // TensorRT-LLM's own fused kernels (FMHA for context, XQA for decode) are priced at
            // the fused-attention level of the GPU file, as cuDNN's; vLLM and SGLang run
            // FlashAttention-3 / FlashInfer, priced at the FlashAttention level.
            crate::workload::Stack::Trtllm => AttentionKernel::Fused,
            _ => AttentionKernel::Flash,
        }
    }
}

/// Whether PyTorch's SDPA, left to choose (the `hf-*` stacks: `attn_implementation="sdpa"`, no
/// backend forced), runs cuDNN's fused attention on this GPU: on Hopper, PyTorch 2.11 puts the
/// cuDNN backend first for bf16, as its profiler showed on the lent H100 at head dims 64 and 128
/// (`aten::_cudnn_attention_forward` in every attention call; calibration/runs/hf/README.md,
/// "Decode: where the time goes"). Other architectures were not probed; they keep the flash kernel.
/// Nor do wider heads or a mask change it: Gemma-3-1B's 256-wide heads ran cuDNN's kernels
/// (`cudnn_generated_fort_native_sdpa_sm90_flash_{fprop,bprop}_wgmma_f16_knob_*_*x*x256`) on every
/// layer, masked sliding ones included, in a training step on the lent H100
/// (calibration/runs/raw/hffamilies-2026-11-25/kprofile-gemma-3-1b-train.csv, cuDNN 9.19).
pub fn sdpa_picks_cudnn(arch: crate::hardware::Arch) -> bool {
    arch == crate::hardware::Arch::Hopper
}

/// (s, d) at which `efficiency.attention` is quoted: the published FlashAttention-2 forward
/// figures the GPU files cite are at head dim 128, sequence length 8192 ("[AZ] FlashAttention-2
/// (hd128, b2, s8192)" in calibration/systems/h100-sxm.toml and gb200.toml, transferred to
/// h200-sxm and b200). A profile's attention shape factor is 1 there, so the level stays the GPU
/// file's and only the shape dependence comes from the profile. (a100-sxm-80g's fraction is the
/// middle of FlashAttention-2's published A100 range, at no single shape; the same reference is
/// used for it.)
const ATTENTION_REFERENCE: (u64, u64) = (8192, 128);

/// Achieved FLOP/s of attention-like batched GEMMs (a profile's `attention_bmm` table) as a
/// function of (s, d). Policy: the points of the nearest measured head dim (distance in log d,
/// ties to the larger), linear in ln s between them, clamped to their measured range.
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionCurves {
    /// (head dim, [(ln s, FLOP/s)] by ascending s), by ascending head dim.
    curves: Vec<(u64, Vec<(f64, f64)>)>,
}

impl AttentionCurves {
    /// `None` without points.
    pub fn new(points: &[AttentionBmmPoint]) -> Option<AttentionCurves> {
        let mut curves: Vec<(u64, Vec<(f64, f64)>)> = Vec::new();
        for p in points {
            let pt = ((p.seq_len.max(1) as f64).ln(), p.achieved.value());
            match curves.iter_mut().find(|(d, _)| *d == p.head_dim) {
                Some((_, v)) => v.push(pt),
                None => curves.push((p.head_dim, vec![pt])),
            }
        }
        if curves.is_empty() {
            return None;
        }
        curves.sort_by_key(|(d, _)| *d);
        for (_, v) in &mut curves {
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        Some(AttentionCurves { curves })
    }

    /// FLOP/s at sequence length `s` and head dim `d`.
    pub fn at(&self, s: f64, d: u64) -> f64 {
        let ld = (d.max(1) as f64).ln();
        let dist = |h: u64| ((h.max(1) as f64).ln() - ld).abs();
        // Ascending head dims: `<=` lets the larger of two equally near ones win.
        let mut best = &self.curves[0];
        for c in &self.curves[1..] {
            if dist(c.0) <= dist(best.0) {
                best = c;
            }
        }
        let pts = &best.1;
        let x = s.max(1.0).ln();
        let (first, last) = (pts[0], pts[pts.len() - 1]);
        if x <= first.0 {
            return first.1;
        }
        if x >= last.0 {
            return last.1;
        }
        let i = pts.iter().position(|p| p.0 >= x).expect("x is inside the range");
        let (a, b) = (pts[i - 1], pts[i]);
        a.1 + (b.1 - a.1) * (x - a.0) / (b.0 - a.0)
    }

    /// Efficiency at (s, d) relative to the reference sequence length of the same head dim
    /// (s = 8192 of `ATTENTION_REFERENCE`). Only the dependence on s is taken: across head
    /// dims the unfused products differ mostly by the score matrix's HBM traffic (d FLOPs per
    /// byte), which FlashAttention keeps on chip, so they say little about its d dependence.
    pub fn factor(&self, s: f64, d: u64) -> f64 {
        self.at(s, d) / self.at(ATTENTION_REFERENCE.0 as f64, d)
    }

    /// Smallest and largest factor over the measured points.
    fn range(&self) -> (f64, f64) {
        let fs = self.curves.iter().flat_map(|(d, v)| {
            let reference = self.at(ATTENTION_REFERENCE.0 as f64, *d);
            v.iter().map(move |p| p.1 / reference)
        });
        fs.fold((f64::INFINITY, 0.0f64), |(lo, hi), f| (lo.min(f), hi.max(f)))
    }
}

/// cuBLAS tile of the large-GEMM kernels: 128 x 256 on Hopper/Blackwell, 128 x 128 on Ampere
/// (the CUTLASS default tile shapes for those architectures); Ada (sm_89) and GB202 (sm_120) have
/// neither wgmma nor tcgen05 and run warp-level MMA kernels with Ampere's 128 x 128 tile (CUTLASS
/// 3.9 examples/79_blackwell_geforce_gemm use 128 x 128 tiles on sm_120).
fn tile(arch: Arch) -> (u64, u64) {
    match arch {
        Arch::Ampere | Arch::Ada | Arch::BlackwellRtx => (128, 128),
        Arch::Hopper | Arch::Blackwell => (128, 256),
    }
}

/// K steps a GEMM main loop needs to hide its prologue and epilogue: efficiency k / (k + K0).
const K_RAMP: f64 = 128.0;
/// The GEMM the datasheet-derived `gemm_max_fraction` is measured on (cuBLAS 8192^3).
const REFERENCE_GEMM: u64 = 8192;

/// A measured GEMM shape and its measured / modelled efficiency.
struct Correction {
    dtype: Dtype,
    log_m: f64,
    log_n: f64,
    log_k: f64,
    ratio: f64,
    /// Measured efficiency / [`stream_k_shape_factor`] x the efficiency ceiling: the ratio against
    /// the model without wave quantization, which [`CostModel::stream_k_transfer`] carries to
    /// unmeasured shapes on Hopper.
    ratio_stream_k: f64,
}

pub struct CostModel<'a> {
    pub system: &'a System,
    pub profile: Option<&'a Profile>,
    corrections: Vec<Correction>,
    gemm_max: Sourced<f64>,
    hbm: Sourced<BytesPerSec>,
    kernel_overhead: Sourced<Seconds>,
    /// Attention's shape dependence from a profile's `attention_bmm` table, with its source.
    attention_shape: Option<(AttentionCurves, Source)>,
    /// The attention kernel priced ([`CostModel::for_stack`]; FlashAttention-2 unless set).
    attention_kernel: AttentionKernel,
    /// Whether the fused attention's small calls lose level ([`fused_small_call_factor`]): under
    /// the megatron stack only. The hf stacks' SDPA cuDNN calls are the measured kernel too, but
    /// their host and memory constants (`fitted::HF_*`) were fitted without the factor; applying it
    /// there waits for their refit.
    fused_small_calls: bool,
    /// The top SM clock's period over the sustained clock's (<= 1): the profile's measured clocks
    /// where it has them (as `analytic::power_gpu` gives the power model), else the GPU file's.
    top_clock_period: f64,
    /// Whether a causal call on sequences shorter than the work-based tables' calls is priced at
    /// the measured short-causal level ([`fused_short_causal_factor`]): the megatron stack's packed
    /// documents and TensorRT-LLM's context FMHA (trtllm). Without it a context iteration of
    /// 17 x 467-token prompts priced the FMHA at the long-call level: 0.074 ms per Llama-3.1-8B
    /// layer (412 TFLOP/s causal), where SDPA's flash kernel at that shape took 0.327 ms (93
    /// TFLOP/s) on the H100 (calibration/runs/raw/context-iteration-h100-2026-11-24/); the table
    /// gives 0.155 ms. TensorRT-LLM's own kernel was not timed (the engine does not run on the
    /// device machine); the table is the measured fused kernel nearest to it.
    fused_short_causal: bool,
}

impl<'a> CostModel<'a> {
    pub fn new(system: &'a System, profile: Option<&'a Profile>) -> Self {
        let gpu = &system.gpu;
        let e = &gpu.efficiency;
        let mut gemm_max = e.gemm_max.clone();
        let mut hbm = Sourced::new(gpu.hbm_bandwidth.value * e.hbm.value, e.hbm.source.clone());
        let mut kernel_overhead = e.kernel_overhead.clone();
        if let Some(p) = profile {
            match profile_relation(gpu, p) {
                Relation::Same => {
                    let measured = |what: &str| Source::Measured(format!("profile `{}`: {what} ({})", p.name, p.provenance));
                    if let Some(big) = largest_gemm(p, Dtype::Bf16) {
                        let shape = gemm_shape_factor(gpu.arch, gpu.sm_count.value as u64, big.m, big.n, big.k, 1);
                        gemm_max = Sourced::new(big.achieved / gpu.peak.bf16.value / shape, measured("bf16 GEMM efficiency"));
                    }
                    if let Some(st) = &p.stream {
                        hbm = Sourced::new(st.bandwidth, measured("HBM copy bandwidth"));
                    }
                    if let Some(l) = p.kernel_launch {
                        kernel_overhead = Sourced::new(l, measured("kernel launch overhead"));
                    }
                }
                Relation::Other(src) => {
                    // Only the dimensionless parts carry over, as fractions of the measured GPU's
                    // peaks applied to this GPU's.
                    let transferred = |what: &str| {
                        Source::Transferred(format!(
                            "profile `{}` measured on {}: {what}, as a fraction of peak, applied to {}",
                            p.name, src.display_name, gpu.display_name
                        ))
                    };
                    if let Some(big) = largest_gemm(p, Dtype::Bf16) {
                        let shape = gemm_shape_factor(src.arch, src.sm_count.value as u64, big.m, big.n, big.k, 1);
                        gemm_max = Sourced::new(big.achieved / src.peak.bf16.value / shape, transferred("bf16 GEMM efficiency"));
                    }
                    if let Some(st) = &p.stream {
                        let fraction = st.bandwidth / src.hbm_bandwidth.value;
                        hbm = Sourced::new(gpu.hbm_bandwidth.value * fraction, transferred("HBM efficiency"));
                    }
                }
                Relation::Unknown => {}
            }
        }
        // Measured / modelled efficiency at every measured shape, against the GPU it was measured on.
        let corrections = match profile.map(|p| (p, profile_relation(gpu, p))) {
            Some((p, rel @ (Relation::Same | Relation::Other(_)))) => {
                let src = match rel {
                    Relation::Other(g) => g,
                    _ => gpu,
                };
                p.gemm
                    .iter()
                    .filter_map(|g| {
                        let peak = src.peak.get(g.dtype)?.value;
                        let modelled = gemm_shape_factor(src.arch, src.sm_count.value as u64, g.m, g.n, g.k, 1) * gemm_max.value;
                        let stream_k = stream_k_shape_factor(src.arch, g.m, g.n, g.k) * gemm_max.value;
                        let lg = |x: u64| (x.max(1) as f64).ln();
                        let measured = g.achieved / peak;
                        Some(Correction {
                            dtype: g.dtype,
                            log_m: lg(g.m),
                            log_n: lg(g.n),
                            log_k: lg(g.k),
                            ratio: measured / modelled,
                            ratio_stream_k: measured / stream_k,
                        })
                    })
                    .collect()
            }
            _ => Vec::new(),
        };
        // Attention's shape dependence: a ratio of two measured efficiencies, so it carries to
        // another GPU as it is (transferred), like the GEMM corrections.
        let attention_shape = profile.and_then(|p| {
            let curves = AttentionCurves::new(&p.attention_bmm)?;
            let what = format!(
                "attention-like bf16 batched GEMMs (QK^T + PV) vs (s, d), relative to s = {}, d = {} where `attention_fraction` is quoted",
                ATTENTION_REFERENCE.0, ATTENTION_REFERENCE.1
            );
            let source = match profile_relation(gpu, p) {
                Relation::Same => Source::Measured(format!("profile `{}`: {what} ({})", p.name, p.provenance)),
                Relation::Other(src) => {
                    Source::Transferred(format!("profile `{}` measured on {}: {what}, applied to {}", p.name, src.display_name, gpu.display_name))
                }
                Relation::Unknown => return None,
            };
            Some((curves, source))
        });
        let native_power = profile.filter(|p| matches!(profile_relation(gpu, p), Relation::Same)).and_then(|p| p.power.as_ref());
        let (sustained, top) = match native_power {
            Some(pw) if pw.gemm_clock.value() > 0.0 => (pw.gemm_clock.min(pw.max_clock), pw.max_clock),
            Some(pw) => (gpu.efficiency.sustained_gemm_clock.value.min(pw.max_clock), pw.max_clock),
            None => (gpu.efficiency.sustained_gemm_clock.value, gpu.max_clock.value),
        };
        let top_clock_period = if top.value() > 0.0 { (sustained / top).clamp(0.0, 1.0) } else { 1.0 };
        CostModel {
            system,
            profile,
            corrections,
            gemm_max,
            hbm,
            kernel_overhead,
            top_clock_period,
            attention_shape,
            attention_kernel: AttentionKernel::Flash,
            fused_small_calls: false,
            fused_short_causal: false,
        }
    }

    /// The same model pricing attention with the kernel `stack` runs ([`AttentionKernel::of`]).
    pub fn for_stack(mut self, stack: crate::workload::Stack) -> Self {
        self.attention_kernel = AttentionKernel::of(stack);
        self.fused_small_calls = stack == crate::workload::Stack::Megatron;
        self.fused_short_causal = matches!(stack, crate::workload::Stack::Megatron | crate::workload::Stack::Trtllm);
        if stack.hf() && sdpa_picks_cudnn(self.system.gpu.arch) {
            self.attention_kernel = AttentionKernel::Fused;
        }
        self
    }

    /// The attention level (fraction of bf16 peak, forward, at the reference shape), its name in
    /// the GPU file, and the backward-over-forward ratio of the kernel priced.
    fn attention_level(&self) -> (&Sourced<f64>, &'static str, f64) {
        let e = &self.system.gpu.efficiency;
        match self.attention_kernel {
            AttentionKernel::Flash => (&e.attention, "attention_fraction", ATTENTION_BACKWARD_RATIO),
            AttentionKernel::Fused => (&e.fused_attention, "fused_attention_fraction", FUSED_ATTENTION_BACKWARD_RATIO),
        }
    }

    /// The same model for kernels replayed from a CUDA graph. A kernel's fixed cost is then the GPU
    /// file's `efficiency.kernel_overhead_us`, measured as back-to-back small kernels inside one
    /// graph (0.82 us on an H200, 0.99 on an H100: the GPU-side floor per kernel, which a graph
    /// replay pays), not a profile's `kernel_launch_us` (back-to-back launches on a stream, 2.9-4.3
    /// us on the same GPUs: the driver's launch path, which a graph replay does not take). The
    /// profile's HBM fit latency (`stream.latency_us`) is not priced by either.
    pub fn in_cuda_graph(mut self) -> Self {
        self.kernel_overhead = self.system.gpu.efficiency.kernel_overhead.clone();
        self
    }

    /// Fixed GPU time per kernel this model adds to each kernel's time.
    pub fn kernel_overhead(&self) -> Seconds {
        self.kernel_overhead.value
    }

    /// The HBM stream rate memory-bound kernels are priced at (`memory_time`).
    pub fn stream_bandwidth(&self) -> crate::units::BytesPerSec {
        self.hbm.value
    }

    pub fn peak(&self, dtype: Dtype) -> Option<FlopsPerSec> {
        self.system.gpu.peak.get(dtype).map(|s| s.value)
    }

    /// The fused attention's head-dim factor ([`fused_head_dim_factor`]) a model of query/key head
    /// dim `d` is priced with, forward at s 2K..64K, with its source; `None` where none applies
    /// (the flash kernel, or d 128 and wider).
    pub fn head_dim_number(&self, d: u64) -> Option<UsedNumber> {
        if self.attention_kernel != AttentionKernel::Fused || fused_head_dim_factor(d, 8192.0, false) == 1.0 {
            return None;
        }
        let (lo, hi) =
            [2048.0, 65536.0, 8192.0].iter().map(|&s| fused_head_dim_factor(d, s, false)).fold((f64::INFINITY, 0.0f64), |(lo, hi), f| (lo.min(f), hi.max(f)));
        Some(UsedNumber {
            name: format!("fused_attention_head_dim_{d}_factor"),
            value: format!("{lo:.3}..{hi:.3}"),
            source: Source::Measured(
                "cuDNN 9.19 fused attention (PyTorch 2.11 SDPA) over d 128, H100 SXM, 2026-11-25, calibration/runs/raw/attention-headdim-h100-2026-11-25/"
                    .into(),
            ),
        })
    }

    /// The numbers this model uses, with their sources.
    pub fn used_numbers(&self, dtype: Dtype) -> Vec<UsedNumber> {
        let g = &self.system.gpu;
        let mut v = vec![
            UsedNumber {
                name: format!("peak_{}_tflops", dtype.name()),
                value: format!("{:.0}", self.peak(dtype).map_or(0.0, |p| p.as_tflops())),
                source: g.peak.get(dtype).map_or(Source::Unsourced("no such path".into()), |s| s.source.clone()),
            },
            UsedNumber { name: "gemm_max_fraction".into(), value: format!("{:.3}", self.gemm_max.value), source: self.gemm_max.source.clone() },
            UsedNumber {
                name: "hbm_bandwidth_gb_per_s (achieved)".into(),
                value: format!("{:.0}", self.hbm.value.as_gb_per_s()),
                source: self.hbm.source.clone(),
            },
            {
                let (level, name, _) = self.attention_level();
                UsedNumber { name: name.into(), value: format!("{:.3}", level.value), source: level.source.clone() }
            },
        ];
        if let Some((curves, source)) = &self.attention_shape {
            let (lo, hi) = curves.range();
            v.push(UsedNumber { name: "attention_shape_factor".into(), value: format!("{lo:.3}..{hi:.3}"), source: source.clone() });
        }
        v.extend([UsedNumber {
            name: "kernel_overhead_us".into(),
            value: format!("{:.1}", self.kernel_overhead.value.as_us()),
            source: self.kernel_overhead.source.clone(),
        }]);
        if let Some((link, fraction)) = self.system.scale_up_link() {
            let kind = self.system.scale_up.name();
            v.extend([
                UsedNumber {
                    name: format!("{kind}_bandwidth_unidir_gb_per_s"),
                    value: format!("{:.0}", link.value.as_gb_per_s()),
                    source: link.source.clone(),
                },
                UsedNumber { name: format!("{kind}_busbw_fraction"), value: format!("{:.3}", fraction.value), source: fraction.source.clone() },
            ]);
        }
        if let (Some(nic), Some(fraction)) = (&self.system.nic_bandwidth, &g.efficiency.network_busbw) {
            v.extend([
                UsedNumber { name: "nic_bandwidth_gb_per_s".into(), value: format!("{:.0}", nic.value.as_gb_per_s()), source: nic.source.clone() },
                UsedNumber { name: "network_busbw_fraction".into(), value: format!("{:.3}", fraction.value), source: fraction.source.clone() },
            ]);
        }
        v.extend([UsedNumber {
            name: "hbm_capacity_gib".into(),
            value: format!("{:.1}", g.hbm_capacity.value.as_gib()),
            source: g.hbm_capacity.source.clone(),
        }]);
        if let Some(p) = self.profile {
            for c in &p.collectives {
                v.push(UsedNumber {
                    name: format!("{}_{}ranks_busbw_gb_per_s", c.op.name(), c.n_ranks),
                    value: format!("{:.0}", c.busbw.as_gb_per_s()),
                    source: Source::Measured(format!("profile `{}` ({})", p.name, p.provenance)),
                });
            }
        }
        v
    }

    /// Efficiency of one GEMM shape relative to peak: the large-GEMM efficiency, times wave
    /// quantization over the SMs and tile padding, times the K ramp (normalized at 8192^3), times
    /// the measured/modelled ratio of the nearest measured shapes when a profile has them.
    /// Between two measured shapes with the same N and K (and dtype), the measured efficiencies
    /// interpolated in log M instead: Hopper's cuBLAS balances partial waves (stream-K), so the
    /// wave model's dips between measured row counts are not there (an 8B model's 768-token
    /// prefill ran 13% faster than the model priced it, its 512- and 2048-row GEMMs measured,
    /// calibration/runs/serve/FIT.md).
    ///
    /// Elsewhere on Hopper (one GEMM, a profile with GEMM shapes) the nearest measured shapes'
    /// efficiencies are carried over with only the tile padding and the K ramp re-priced
    /// (`CostModel::stream_k_transfer`): a measured shape's ratio to the wave model also holds
    /// that model's wave dip at the measured M, which is not the dip (or its absence) at another N.
    /// The 70B TP 4 shard's gate+up at M = 467 (N = 14336, K = 8192) took the 1.52 ratio of the
    /// (512, 10240, 8192) point, where two waves of 160 tiles model 0.61, and was priced at the
    /// ceiling, 0.70 of its time measured on the H100 (docs/trtllm-residuals.md section 12).
    pub fn gemm_efficiency(&self, m: u64, n: u64, k: u64, count: u64, dtype: Dtype) -> f64 {
        if count == 1 {
            if let Some(e) = self.bracketed(m, n, k, dtype) {
                return e.min(1.0);
            }
            if self.system.gpu.arch == Arch::Hopper {
                if let Some(e) = self.stream_k_transfer(m, n, k, dtype) {
                    return e.min(1.0);
                }
            }
        }
        let base = self.gemm_model(m, n, k, count) * self.gemm_max.value;
        (base * self.profile_correction(m, n, k, dtype)).min(1.0)
    }

    /// Shape-only part of the GEMM model (no efficiency ceiling, no profile).
    fn gemm_model(&self, m: u64, n: u64, k: u64, count: u64) -> f64 {
        let gpu = &self.system.gpu;
        gemm_shape_factor(gpu.arch, gpu.sm_count.value as u64, m, n, k, count)
    }

    /// The efficiency at `m` interpolated (log-linear in M) between the nearest measured shapes
    /// below and above it with this N, K and dtype; `None` unless both exist.
    fn bracketed(&self, m: u64, n: u64, k: u64, dtype: Dtype) -> Option<f64> {
        let lg = |x: u64| (x.max(1) as f64).ln();
        let (lm, ln, lk) = (lg(m), lg(n), lg(k));
        let (mut lo, mut hi): (Option<&Correction>, Option<&Correction>) = (None, None);
        for c in self.corrections.iter().filter(|c| c.dtype == dtype && (c.log_n - ln).abs() < 1e-9 && (c.log_k - lk).abs() < 1e-9) {
            if c.log_m <= lm && lo.is_none_or(|x| c.log_m > x.log_m) {
                lo = Some(c);
            }
            if c.log_m >= lm && hi.is_none_or(|x| c.log_m < x.log_m) {
                hi = Some(c);
            }
        }
        let eff = |c: &Correction| c.ratio * self.gemm_model(c.log_m.exp().round() as u64, n, k, 1) * self.gemm_max.value;
        let (lo, hi) = (lo?, hi?);
        let t = if hi.log_m > lo.log_m { (lm - lo.log_m) / (hi.log_m - lo.log_m) } else { 0.0 };
        Some((eff(lo).ln() * (1.0 - t) + eff(hi).ln() * t).exp())
    }

    /// The efficiency of an unmeasured shape from the three nearest measured ones (the neighbours and
    /// inverse-distance weights of [`CostModel::profile_correction`]), each one's measured efficiency
    /// relative to [`stream_k_shape_factor`] (tile padding and K ramp, no waves); `None` without
    /// measured shapes.
    fn stream_k_transfer(&self, m: u64, n: u64, k: u64, dtype: Dtype) -> Option<f64> {
        let ratio = self.nearest_mean(m, n, k, dtype, |c| c.ratio_stream_k)?;
        Some(ratio * stream_k_shape_factor(self.system.gpu.arch, m, n, k) * self.gemm_max.value)
    }

    /// Measured / modelled efficiency near this shape (inverse-distance weights in log space over
    /// the three nearest measured shapes of the dtype, bf16 when the dtype was not measured).
    fn profile_correction(&self, m: u64, n: u64, k: u64, dtype: Dtype) -> f64 {
        self.nearest_mean(m, n, k, dtype, |c| c.ratio).unwrap_or(1.0)
    }

    /// `value` of the nearest measured shape when it is this one, else its inverse-distance mean
    /// (in log M, N, K) over the three nearest shapes of the dtype (bf16 when the dtype was not
    /// measured); `None` without measured shapes.
    fn nearest_mean(&self, m: u64, n: u64, k: u64, dtype: Dtype, value: impl Fn(&Correction) -> f64) -> Option<f64> {
        let same: Vec<&Correction> = self.corrections.iter().filter(|c| c.dtype == dtype).collect();
        let points = if same.is_empty() { self.corrections.iter().filter(|c| c.dtype == Dtype::Bf16).collect() } else { same };
        if points.is_empty() {
            return None;
        }
        let lg = |x: u64| (x.max(1) as f64).ln();
        let (lm, ln, lk) = (lg(m), lg(n), lg(k));
        let mut near: [(f64, f64); 3] = [(f64::INFINITY, 1.0); 3];
        for c in points {
            let d = (c.log_m - lm).powi(2) + (c.log_n - ln).powi(2) + (c.log_k - lk).powi(2);
            if d < near[2].0 {
                near[2] = (d, value(c));
                near.sort_by(|a, b| a.0.total_cmp(&b.0));
            }
        }
        if near[0].0 < 1e-12 {
            return Some(near[0].1);
        }
        let (wsum, vsum) = near.iter().filter(|x| x.0.is_finite()).fold((0.0, 0.0), |(w, v), (d, r)| (w + 1.0 / d, v + r / d));
        Some(vsum / wsum)
    }

    pub fn gemm_time(&self, m: u64, n: u64, k: u64, count: u64, dtype: Dtype) -> OpCost {
        let peak = self.peak(dtype).or_else(|| self.peak(Dtype::Bf16)).expect("bf16 peak is required");
        let flops = Flops::new(2.0 * (m * n * k * count) as f64);
        let compute = flops / (peak * self.gemm_efficiency(m, n, k, count, dtype));
        // Operands as the tensor cores read them: an NVFP4 operand carries its E4M3 scale per 16
        // elements (`workload::quantized_elem_bytes`), which a memory-bound GEMM (decode, a small
        // expert's M) reads with its weights.
        let elem = if dtype == Dtype::Fp4 {
            crate::workload::quantized_elem_bytes(dtype, crate::workload::Fp8Recipe::Tensorwise).unwrap_or(dtype.bytes())
        } else {
            dtype.bytes()
        };
        let bytes = Bytes::new((m * k + k * n) as f64 * elem * count as f64 + (m * n * count) as f64 * 2.0);
        let memory = bytes / self.hbm.value;
        self.clocked(compute, memory)
    }

    /// An op of `compute` time at the sustained clock and `memory` time at the stream rate, plus
    /// the kernel overhead: bound by the longer at the sustained clock. A compute-bound op is
    /// priced exactly at the sustained clock (compute + overhead) and at the top clock (the longer
    /// of compute shortened by the clock and memory, + overhead), linear in the clock period in
    /// between: `fixed` holds the overhead, which the SM clock does not shorten, and the share of
    /// the memory time that a GEMM near the ridge meets before the top clock (the power model
    /// still counts the whole op as compute: what it draws was not measured). Without it a
    /// compute-bound op was shortened by the whole speedup, below its own bytes' time: a decode
    /// step of Llama-3.1 70B at TP 8 (1,980 MHz solved) priced the shard's o projection at M = 256
    /// (1024 -> 8192, FP8) at 5.7 us, under the 8.1 us its weights and output take to stream, where
    /// cuBLASLt took 7.6 us at 1,980 MHz on the H100. Over the probe's 276 FP8 shard GEMMs
    /// (Llama-3.1 70B TP 1-8, 405B TP 4/8, Mixtral 8x22B TP 2-8; M = 16-16384) the mean
    /// |measured / priced - 1| at the measured clock goes from 8.9% to 7.3%, at M = 256-1024 from
    /// 13.6% to 8.5%; over the 74 bf16 ones from 10.1% to 8.9% (calibration/runs/raw/
    /// tpshard-h100-2026-11-25/, scripts/compare_tpshard_probe.py; docs/trtllm-residuals.md
    /// section 15). Nothing fitted: the clocks are the profile's (or the GPU file's).
    pub fn clocked(&self, compute: Seconds, memory: Seconds) -> OpCost {
        let overhead = self.kernel_overhead.value;
        if compute < memory {
            return OpCost { time: memory + overhead, bound: Bound::Memory, fixed: memory + overhead };
        }
        let u = self.top_clock_period;
        let floor = if u < 1.0 { ((compute * u).max(memory) - compute * u) / (1.0 - u) } else { Seconds::ZERO };
        OpCost { time: compute + overhead, bound: Bound::Compute, fixed: floor + overhead }
    }

    /// The experts' grouped GEMM on one rank (`expert_up`, `expert_down` and their gradients:
    /// `count` local experts of `m` tokens each, the busiest rank's load) for the stacks whose
    /// grouped kernel has no measured table: Transformer Engine's cuBLAS grouped GEMM (megatron)
    /// and the engines'. The `calibrate --moe` tables measure PyTorch's `grouped_mm`, which only the
    /// `hf-*` stacks run; they are read by [`CostModel::grouped_expert_gemm`] from
    /// `lower::hf_measured_grouped`. This is [`CostModel::gemm_time`] with the batch count: the efficiency at the per-expert `m`
    /// (the K ramp and tile padding of a small M) and wave quantization over every expert's tiles,
    /// as cuBLASLt's grouped and TE's grouped GEMMs launch them in one kernel.
    pub fn grouped_gemm_time(&self, m: u64, n: u64, k: u64, count: u64, dtype: Dtype) -> OpCost {
        self.gemm_time(m, n, k, count, dtype)
    }

    /// Flash attention: FLOPs at the kernel's level of the bf16 peak (`efficiency.attention` for
    /// SDPA's FlashAttention-2, `efficiency.fused_attention` for the megatron stack's cuDNN fused
    /// attention; lower in backward), times
    /// a profile's measured shape factor when it has an `attention_bmm` table (1 at the reference
    /// shape the fraction is quoted at), times wave quantization of 128-query tiles over the SMs;
    /// or the bytes it must move at the achieved HBM bandwidth, whichever is longer.
    pub fn attention_time(&self, op: &Op) -> OpCost {
        self.attention_time_at(op, 1.0)
    }

    /// [`CostModel::attention_time`] with the compute part `tensor_speedup` times faster than the
    /// bf16 level (an FP8 kernel: [`FP8_ATTENTION_SPEEDUP`]).
    pub fn attention_time_at(&self, op: &Op, tensor_speedup: f64) -> OpCost {
        let OpKind::Attention { batch_heads, q_len, kv_len, head_dim_qk, head_dim_v, causal, backward, kv_bytes, window } = op.kind else {
            unreachable!("attention_time on {}", op.name)
        };
        let one = |c: Seconds, m: Seconds| if c >= m { (c, Bound::Compute) } else { (m, Bound::Memory) };
        if let Some(win) = window.filter(|w| causal && w.masked) {
            // Sliding layers under an explicit mask (`AttnWindow::masked`): the op's `window.share`
            // of its layers run as a non-causal call over the whole score matrix, the rest causal.
            let mut full = op.clone();
            let mut masked = op.clone();
            if let (OpKind::Attention { window, .. }, OpKind::Attention { window: w2, causal: c2, .. }) = (&mut full.kind, &mut masked.kind) {
                *window = None;
                *w2 = None;
                *c2 = false;
            }
            let (cf, mf) = self.attention_parts(&full, tensor_speedup);
            let (cm, mm) = self.attention_parts(&masked, tensor_speedup);
            let (t_full, b_full) = one(cf, mf);
            let (t_masked, b_masked) = one(cm, mm);
            let time = t_full * (1.0 - win.share) + t_masked * win.share + self.kernel_overhead.value;
            let bound = if win.share >= 0.5 { b_masked } else { b_full };
            let fixed = if bound == Bound::Compute { self.kernel_overhead.value } else { time };
            return OpCost { time, bound, fixed };
        }
        if let Some(win) = window.filter(|_| causal) {
            // Sliding-window layers (the op's `window.share` of them): the full causal call's
            // efficiency per score tile, on the tiles inside the band only
            // (`workload::causal_tiles`), and the keys inside the band read.
            let mut full = op.clone();
            if let OpKind::Attention { window, .. } = &mut full.kind {
                *window = None;
            }
            let (compute, memory) = self.attention_parts(&full, tensor_speedup);
            let tiles = crate::workload::causal_tiles(q_len, kv_len, Some(win.window)) / crate::workload::causal_tiles(q_len, kv_len, None);
            let keys = (win.window + q_len - 1).min(kv_len) as f64 / kv_len.max(1) as f64;
            let q_o = (batch_heads * q_len * (head_dim_qk + head_dim_v)) as f64 * 2.0;
            let scale = if backward { 2.0 } else { 1.0 };
            let banded_memory = Bytes::new((q_o + kv_bytes * keys) * scale) / self.hbm.value;
            let (t_full, b_full) = one(compute, memory);
            let (t_band, b_band) = one(compute * tiles, banded_memory);
            let time = t_full * (1.0 - win.share) + t_band * win.share;
            let bound = if win.share >= 0.5 { b_band } else { b_full };
            let time = time + self.kernel_overhead.value;
            let fixed = if bound == Bound::Compute { self.kernel_overhead.value } else { time };
            return OpCost { time, bound, fixed };
        }
        let (compute, memory) = self.attention_parts(op, tensor_speedup);
        self.clocked(compute, memory)
    }

    /// [`CostModel::attention_time_at`]'s compute and memory times of a call without a window.
    fn attention_parts(&self, op: &Op, tensor_speedup: f64) -> (Seconds, Seconds) {
        let OpKind::Attention { batch_heads, q_len, kv_len, head_dim_qk, head_dim_v, causal, backward, kv_bytes, .. } = op.kind else {
            unreachable!("attention_time on {}", op.name)
        };
        let gpu = &self.system.gpu;
        let (level, _, backward_ratio) = self.attention_level();
        let mut eff = level.value;
        // The tables are measured at s_q = s_kv = s; a rectangular (s_q, s_kv) is read at the
        // square of equal work per (sequence, head): s = sqrt(s_q s_kv).
        let s = ((q_len as f64) * (kv_len as f64)).sqrt();
        if let Some((curves, _)) = &self.attention_shape {
            eff = (eff * curves.factor(s, head_dim_qk)).min(1.0);
        }
        if self.fused_small_calls && self.attention_kernel == AttentionKernel::Fused && q_len.min(kv_len) >= FUSED_SMALL_CALL_MIN_SIDE {
            // A call with less work than the reference reaches less of the level.
            let forward_flops = if backward { op.flops() / 2.5 } else { op.flops() };
            eff *= fused_small_call_factor(forward_flops, causal, backward);
        } else if self.fused_short_causal
            && self.attention_kernel == AttentionKernel::Fused
            && causal
            && q_len == kv_len
            && q_len > 1
            && q_len < FUSED_SMALL_CALL_MIN_SIDE
        {
            // Short causal sequences (packed documents) below the work-based tables: the level
            // measured at the sequence's length (whole 128 x 128 score tiles, short key ranges).
            eff *= fused_short_causal_factor(q_len, backward);
        }
        if self.attention_kernel == AttentionKernel::Fused && q_len.min(kv_len) >= FUSED_SMALL_CALL_MIN_SIDE {
            // The fused level is quoted at head dim 128; narrower heads reach less of it.
            eff *= fused_head_dim_factor(head_dim_qk, s, backward);
        }
        if backward {
            eff *= match self.attention_kernel {
                AttentionKernel::Fused => fused_backward_ratio(s),
                AttentionKernel::Flash => backward_ratio,
            };
        }
        // Work is split in 128-query tiles per (sequence, head) across the SMs.
        let tiles = batch_heads * q_len.div_ceil(128);
        let sms = gpu.sm_count.value as u64;
        let wave = tiles as f64 / (tiles.div_ceil(sms) * sms) as f64;
        let compute = Flops::new(op.flops()) / (gpu.peak.bf16.value * (eff * wave * tensor_speedup));
        // Q in, O out, K and V read once per KV head; backward reads and writes about twice that.
        let q_o = (batch_heads * q_len * (head_dim_qk + head_dim_v)) as f64 * 2.0;
        let bytes = Bytes::new((q_o + kv_bytes) * if backward { 2.0 } else { 1.0 });
        let memory = bytes / self.hbm.value;
        (compute, memory)
    }

    pub fn memory_time(&self, bytes: f64, kernels: u32) -> OpCost {
        let time = Bytes::new(bytes) / self.hbm.value + self.kernel_overhead.value * kernels as f64;
        OpCost { time, bound: Bound::Memory, fixed: time }
    }

    /// What the links offer a group of this shape: ring bus bandwidth over its slowest link class
    /// and NVLS where the system has it.
    pub fn links(&self, shape: &GroupShape) -> nccl::Links {
        let sys = self.system;
        let gpu = &sys.gpu;
        // `check_scenario` refuses a group over GPUs without a sourced scale-up link.
        // Between the GPUs of a PCIe server, the share of the per-link rate its switches, root
        // complexes and socket link leave (fitted, `cost::fitted::PCIE_SERVER_BUSBW_SHARE`).
        let server_share = if sys.scale_up == ScaleUp::Pcie { fitted::fitted().pcie_server_busbw_share } else { 1.0 };
        let intra = sys.scale_up_link().map_or(BytesPerSec::ZERO, |(link, fraction)| link.value * fraction.value * server_share);
        let oversubscription = sys.fabric.as_ref().map_or(1.0, |f| f.oversubscription.value);
        // Zero without a scale-out network (`network_bandwidth_per_gpu`), refused before here.
        let network_busbw = gpu.efficiency.network_busbw.as_ref().map_or(0.0, |f| f.value);
        let busbw = if shape.crosses_domains() {
            // Across domains the group drives one NIC per member rank in each domain
            // (rail-optimized), divided by the leaf-spine oversubscription.
            let nic_share = sys.network_bandwidth_per_gpu() * shape.ranks_per_domain as f64;
            (nic_share * network_busbw / oversubscription).min(intra)
        } else {
            intra
        };
        let nvlink = sys.scale_up == ScaleUp::NvLink;
        let nvls_algbw = (sys.nvls && nvlink && shape.size > 2).then(|| gpu.nvlink_bandwidth.as_ref().map_or(BytesPerSec::ZERO, |b| b.value) * NVLS_EFFICIENCY);
        let inter = sys.network_bandwidth_per_gpu() * network_busbw / oversubscription;
        nccl::Links {
            n_ranks: shape.size,
            crosses_network: shape.crosses_domains(),
            pcie: !nvlink,
            busbw,
            nvls_algbw,
            ranks_per_domain: shape.ranks_per_domain,
            domains: shape.domains,
            intra_busbw: intra,
            inter_busbw: inter,
        }
    }

    /// How NCCL runs `op` of `bytes` on a group of this shape: a measured fit from the profile
    /// when it has one for this op and group size, otherwise NCCL's choice on the modelled links.
    pub fn collective_plan(&self, op: CollectiveOp, shape: &GroupShape, bytes: f64) -> nccl::Plan {
        if let Some((latency, busbw)) = self.profile_collective(op, shape) {
            // A measured latency + bandwidth fit, played as ring steps without per-step latency.
            let ring = nccl::choose(op, &nccl::Links { busbw, nvls_algbw: None, ..self.links(shape) }, f64::INFINITY);
            return nccl::Plan { base: latency, step_latency: Seconds::ZERO, busbw, ..ring };
        }
        let mut plan = nccl::choose(op, &self.links(shape), bytes);
        if let (CollectiveOp::SendRecv, true, Some(fabric)) = (op, shape.crosses_domains(), &self.system.fabric) {
            plan.base += fabric.latency.value;
        }
        plan
    }

    /// A measured fit for this op and group size on one node, if the profile has one.
    fn profile_collective(&self, op: CollectiveOp, shape: &GroupShape) -> Option<(Seconds, BytesPerSec)> {
        let p = self.profile.filter(|p| profile_is_native(&self.system.gpu, p))?;
        let want_intra = !shape.crosses_domains();
        p.collectives.iter().filter(|c| c.op == op && c.intra_node == want_intra && c.n_ranks == shape.size).map(|c| (c.latency, c.busbw)).next()
    }
}

/// How much faster an FP8 flash-attention kernel runs than the same kernel in bf16/fp16 on Hopper:
/// FlashAttention-3 reaches "up to 740 TFLOPs/s (75% utilization)" in FP16 and "close to 1.2
/// PFLOPs/s" in FP8 on an H100 SXM5 (Shah et al. 2024, arXiv:2407.08608, abstract): 1.2 / 0.74.
/// Priced for TensorRT-LLM's FP8 context FMHA (`cost::lower`), whose own kernels were not timed.
pub const FP8_ATTENTION_SPEEDUP: f64 = 1.2 / 0.74;

/// NVLS all-reduce algorithm bandwidth as a fraction of one direction of a GPU's NVLink: 8x H100
/// reach 480.16 GB/s bus bandwidth at 8 GiB with NVLS (github NVIDIA/dgxc-benchmarking @ 841f5466 :
/// nccl/README.md sample output; Azure ND H100 v5 478.9 GB/s), i.e. algbw 480.16 / (2 x 7/8) =
/// 274.4 GB/s = 0.61 x 450 GB/s.
const NVLS_EFFICIENCY: f64 = 0.61;

/// How a profile relates to the GPU it is applied to.
enum Relation<'p> {
    /// Measured on this GPU model: every part applies.
    Same,
    /// Measured on another catalog GPU: transferred as fractions of that GPU's peaks.
    Other(&'p crate::hardware::Gpu),
    /// Measured on a GPU the catalog does not know: nothing can be scaled, nothing applies.
    Unknown,
}

fn profile_relation<'p>(gpu: &crate::hardware::Gpu, p: &'p Profile) -> Relation<'p> {
    match &p.measured_gpu {
        Some(g) if g.name == gpu.name => Relation::Same,
        Some(g) => Relation::Other(g),
        None if !p.gpu_name.is_empty() && gpu.display_name.contains(&p.gpu_name) => Relation::Same,
        None => Relation::Unknown,
    }
}

/// Whether a profile's absolute measurements (collectives, power) apply to this GPU.
pub fn profile_is_native(gpu: &crate::hardware::Gpu, p: &Profile) -> bool {
    matches!(profile_relation(gpu, p), Relation::Same)
}

/// Wave quantization over the SMs x tile padding x K ramp, relative to the reference 8192^3 GEMM
/// (so the efficiency ceiling is the efficiency of that GEMM). Small dimensions get small tiles
/// (cuBLAS has 64-, 32- and 16-wide kernels), and when a GEMM has fewer tiles than SMs it is split
/// along K (split-K) to fill them, as cuBLAS's heuristics do for skinny shapes.
pub fn gemm_shape_factor(arch: Arch, sms: u64, m: u64, n: u64, k: u64, count: u64) -> f64 {
    if m == 0 || n == 0 || k == 0 || count == 0 {
        return 1.0;
    }
    let raw = |m: u64, n: u64, k: u64, count: u64| {
        let (big_m, big_n) = tile(arch);
        let fit = |dim: u64, big: u64| if dim >= big { big } else { dim.next_power_of_two().max(16) };
        let (tm, tn) = (fit(m, big_m), fit(n, big_n));
        let tiles = m.div_ceil(tm) * n.div_ceil(tn) * count;
        let split = if tiles < sms { (sms / tiles).min((k / 256).max(1)) } else { 1 };
        let work = tiles * split;
        let waves = work.div_ceil(sms);
        let wave_eff = work as f64 / (waves * sms) as f64;
        let pad = (m * n) as f64 / ((m.div_ceil(tm) * tm) * (n.div_ceil(tn) * tn)) as f64;
        let k_split = k as f64 / split as f64;
        wave_eff * pad * (k_split / (k_split + K_RAMP))
    };
    raw(m, n, k, count) / raw(REFERENCE_GEMM, REFERENCE_GEMM, REFERENCE_GEMM, 1)
}

/// [`gemm_shape_factor`] without wave quantization or split-K: tile padding x K ramp relative to
/// the 8192^3 reference. Hopper's cuBLAS spreads a partial last wave over the SMs (stream-K), so
/// what is left of the shape between measured shapes is the padding of the last row / column tile
/// and the K ramp.
pub fn stream_k_shape_factor(arch: Arch, m: u64, n: u64, k: u64) -> f64 {
    if m == 0 || n == 0 || k == 0 {
        return 1.0;
    }
    let raw = |m: u64, n: u64, k: u64| {
        let (big_m, big_n) = tile(arch);
        let fit = |dim: u64, big: u64| if dim >= big { big } else { dim.next_power_of_two().max(16) };
        let (tm, tn) = (fit(m, big_m), fit(n, big_n));
        let pad = (m * n) as f64 / ((m.div_ceil(tm) * tm) * (n.div_ceil(tn) * tn)) as f64;
        pad * (k as f64 / (k as f64 + K_RAMP))
    };
    raw(m, n, k) / raw(REFERENCE_GEMM, REFERENCE_GEMM, REFERENCE_GEMM)
}

fn largest_gemm(p: &Profile, dtype: Dtype) -> Option<&crate::hardware::profile::GemmPoint> {
    p.gemm.iter().filter(|g| g.dtype == dtype).max_by_key(|g| g.m.min(g.n).min(g.k))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causal_tiles_cost_short_documents_most() {
        // 190 tokens: 2 query tiles visit 3 key tiles of 128^2 for 190^2 / 2 scores.
        assert!((causal_tile_share(190) - (190.0 * 190.0 / 2.0) / (3.0 * 128.0 * 128.0)).abs() < 1e-12);
        // One tile, half of it needed at 128; the share rises toward 1 with the length.
        assert!((causal_tile_share(128) - 0.5).abs() < 1e-12);
        assert!(causal_tile_share(4096) > 0.96 && causal_tile_share(4096) < 1.0);
        assert!(causal_tile_share(190) < causal_tile_share(1000) && causal_tile_share(1000) < causal_tile_share(4096));
    }

    #[test]
    fn short_causal_documents_run_below_their_tile_share() {
        // The measured points themselves (190-token SQuAD documents: a fifth of the long call's
        // forward rate, a tenth of its backward), below what whole tiles alone would cost.
        assert!((fused_short_causal_factor(190, false) - 109.9 / 550.7).abs() < 1e-12);
        assert!((fused_short_causal_factor(190, true) - 48.3 / 459.9).abs() < 1e-12);
        assert!(fused_short_causal_factor(190, false) < causal_tile_share(190));
        // Monotone in the length, forward above backward, and continuous into the work-based
        // table at 1024 tokens (measured 0.668 there; the table reads 0.68 at that call's work).
        let lens = [64, 128, 150, 190, 300, 512, 800, 1024];
        for w in lens.windows(2) {
            assert!(fused_short_causal_factor(w[0], false) < fused_short_causal_factor(w[1], false));
            assert!(fused_short_causal_factor(w[0], true) < fused_short_causal_factor(w[1], true));
        }
        for s in lens {
            assert!(fused_short_causal_factor(s, true) < fused_short_causal_factor(s, false));
        }
        let work_1024 = 4.0 * 16.0 * 32.0 * 1024.0 * 1024.0 * 128.0 / 2.0;
        assert!((fused_short_causal_factor(1023, false) - fused_small_call_factor(work_1024, true, false)).abs() < 0.03);
    }

    fn point(seq_len: u64, head_dim: u64, tflops: f64) -> AttentionBmmPoint {
        AttentionBmmPoint { seq_len, head_dim, achieved: FlopsPerSec::tflops(tflops) }
    }

    /// A synthetic H200 table: efficiency rising with s at d = 128, one level at d = 64.
    fn table() -> Vec<AttentionBmmPoint> {
        vec![point(8192, 128, 600.0), point(512, 128, 200.0), point(2048, 128, 400.0), point(1024, 64, 300.0)]
    }

    #[test]
    fn attention_curves_interpolate_in_log_s_clamp_and_take_the_nearest_head_dim() {
        let c = AttentionCurves::new(&table()).unwrap();
        let tf = |s: f64, d: u64| c.at(s, d) / 1e12;
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        // Measured points.
        assert!(close(tf(512.0, 128), 200.0) && close(tf(2048.0, 128), 400.0) && close(tf(8192.0, 128), 600.0));
        // 1024 is halfway from 512 to 2048 in log s.
        assert!(close(tf(1024.0, 128), 300.0), "{}", tf(1024.0, 128));
        assert!(close(tf(4096.0, 128), 500.0));
        // Clamped past both ends.
        assert!(close(tf(64.0, 128), 200.0) && close(tf(131072.0, 128), 600.0));
        // One point at d = 64: constant in s.
        assert!(close(tf(512.0, 64), 300.0) && close(tf(8192.0, 64), 300.0));
        // Nearest head dim in log d: 96 -> 128 (ln 4/3 < ln 3/2), 80 -> 64, 256 -> 128, 32 -> 64.
        assert!(close(tf(4096.0, 96), 500.0) && close(tf(4096.0, 80), 300.0));
        assert!(close(tf(4096.0, 256), 500.0) && close(tf(4096.0, 32), 300.0));
        // Factor relative to s = 8192 of the same head dim (d = 64 has one point: flat).
        assert!(close(c.factor(8192.0, 128), 1.0) && close(c.factor(512.0, 128), 1.0 / 3.0) && close(c.factor(2048.0, 64), 1.0));
        assert_eq!(c.range(), (200.0 / 600.0, 1.0));
        assert!(AttentionCurves::new(&[]).is_none());
        // Without the reference shape in the table, the reference is read by the same policy.
        let c = AttentionCurves::new(&[point(1024, 128, 300.0), point(4096, 128, 450.0)]).unwrap();
        assert!(close(c.factor(4096.0, 128), 1.0) && close(c.factor(1024.0, 128), 300.0 / 450.0));
    }

    #[test]
    fn fused_attention_loses_level_on_small_calls_as_measured() {
        // The reference call (b 2, 32 heads, s 8192) and anything larger run at the level.
        for causal in [true, false] {
            assert_eq!(fused_small_call_factor(1.0995e12, causal, false), 1.0);
            assert_eq!(fused_small_call_factor(1e14, causal, true), 1.0);
            // Never above the level, and not decreasing with the work.
            for backward in [false, true] {
                let mut prev = 0.0;
                for e in 0..40 {
                    let f = fused_small_call_factor(1e9 * 1.3f64.powi(e), causal, backward);
                    assert!(f >= prev && f <= 1.0, "{f}");
                    prev = f;
                }
            }
        }
        // The measured calls read back their measured ratios.
        assert!((fused_small_call_factor(2.749e11, true, false) - 524.9 / 608.4).abs() < 1e-12);
        assert!((fused_small_call_factor(6.872e10, true, true) - 245.3 / 447.1).abs() < 1e-12);
        assert!((fused_small_call_factor(3.436e10, false, false) - 403.2 / 608.4).abs() < 1e-12);
        // Held out: b 1, 32 heads, s 4096 (forward 4 b h s^2 d / 2 FLOPs) measured 406.3 of 608.4;
        // a non-causal block of the same work loses less than a causal call.
        let work = 4.0 * 32.0 * 4096f64.powi(2) * 128.0 / 2.0;
        assert!((fused_small_call_factor(work, true, false) - 406.3 / 608.4).abs() < 0.02);
        assert!(fused_small_call_factor(work, false, false) > fused_small_call_factor(work, true, false));
    }

    #[test]
    fn fused_attention_loses_level_at_narrow_head_dims_as_measured() {
        // d 128 (where the level is quoted) and the unmeasured wider heads keep the level.
        for s in [1024.0, 8192.0, 131072.0] {
            for backward in [false, true] {
                assert_eq!(fused_head_dim_factor(128, s, backward), 1.0);
                assert_eq!(fused_head_dim_factor(256, s, backward), 1.0);
                assert_eq!(fused_head_dim_factor(192, s, backward), 1.0);
            }
        }
        // Measured points read back; held outside the measured lengths; between them in ln s.
        assert_eq!(fused_head_dim_factor(64, 32768.0, false), 0.759);
        assert_eq!(fused_head_dim_factor(64, 65536.0, true), 0.766);
        assert_eq!(fused_head_dim_factor(64, 1024.0, false), 0.746);
        assert_eq!(fused_head_dim_factor(64, 262144.0, true), 0.766);
        let mid = fused_head_dim_factor(80, (16384f64 * 32768.0).sqrt(), false);
        assert!((mid - (0.662 + 0.664) / 2.0).abs() < 1e-12);
        // Unmeasured head dims take the nearest measured one (d 72 -> 80, d 32 -> 64, d 112 -> 128).
        assert_eq!(fused_head_dim_factor(72, 8192.0, false), 0.656);
        assert_eq!(fused_head_dim_factor(32, 8192.0, false), 0.789);
        assert_eq!(fused_head_dim_factor(112, 8192.0, false), 1.0);
        // Held out: the same kernel forced (`cudnn` rows of attention_headdim.csv, d 64 over d 128,
        // 32 and 16 heads, mha), timed apart from the default rows the table came from.
        let forced = [(2048.0, 371.6 / 507.5, 264.6 / 305.4), (8192.0, 440.5 / 557.8, 369.2 / 452.5), (65536.0, 445.4 / 594.9, 412.7 / 530.8)];
        for (s, fwd, bwd) in forced {
            assert!((fused_head_dim_factor(64, s, false) - fwd).abs() < 0.04, "forward at {s}");
            assert!((fused_head_dim_factor(64, s, true) - bwd).abs() < 0.04, "backward at {s}");
        }
    }
}
