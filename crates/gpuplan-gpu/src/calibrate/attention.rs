//! Attention-like batched GEMMs: the two matrix products attention runs per (sequence, head),
//! timed as strided batches through cuBLASLt in bf16 ([`super::gemm::Gemm::measure_batched`]).
//!
//! - QK^T: m = s_q, n = s_kv, k = d (scores).
//! - PV:   m = s_q, n = d,    k = s_kv (output).
//!
//! FLOPs = 2 m n k per batch element; bytes = A + B read and C written once each (bf16), the
//! least a GEMM must move. Layout: cuBLASLt's "TN", as in the GEMM group, so Q, K and P are
//! stored with the reduction dimension contiguous and V as d x s_kv (keys contiguous); a fused
//! attention kernel reads V with d contiguous, which changes its loads but not its tensor-core work.
//!
//! Two regimes:
//! - prefill: s_q = s_kv = s in {512 .. 8192}, d in {64, 128}, batch = b * h chosen so the score
//!   matrix of the whole batch holds [`SCORE_ELEMENTS`] (1 GiB in bf16): 2^36 FLOPs per GEMM at
//!   d = 64, 2^37 at d = 128, at every s. `output` fits QK^T + PV into the profile's
//!   `attention_bmm` table, which `cost` reads for attention's shape dependence. Note: each
//!   product moves the s x s score matrix through HBM once (QK^T writes it, PV reads it), 2 bytes
//!   per 2d FLOPs, so d FLOP/byte at any s; at d <= 128 that is below the FLOP/byte ridge of an
//!   H100 or H200 (989 TFLOP/s over 3.35 or 4.8 TB/s: about 300 or 200), so these rows can sit at the HBM bound rather than the
//!   tensor-core bound (`attention.csv` has both rates). A fused kernel keeps the scores on chip.
//! - decode (memory-bound): s_q = the GQA group size (query heads per KV head, 1 .. 8 rows),
//!   s_kv in {1024 .. 8192}, d = 128, batch = b * kv_heads chosen so the K (or V) of the whole
//!   batch is [`DECODE_KV_BYTES`], far past L2. Reported as FLOP/s and bytes/s in `attention.csv`.
//!
//! Causal masking does not change these GEMMs (a fused kernel skips masked tiles; the GEMMs here
//! are the unmasked products).

use super::gemm::{Gemm, GemmShape, Operands, Timed};
use super::gpu::Reps;
use super::stats::Percentiles;
use super::CalibrateError;

/// Elements of the score matrix (s_q x s_kv x batch) of one prefill case: 2^29, 1 GiB in bf16.
/// Sets the batch, so every prefill case is large (2^36..2^37 FLOPs per GEMM, thousands of output
/// tiles: wave quantization stays under a few percent) and the largest operand stays at 1 GiB.
pub const SCORE_ELEMENTS: u64 = 1 << 29;

/// Bytes of K (and of V) of one decode case, over the batch: 512 MiB, about 8x the H100/H200 L2
/// (50/60 MiB), so every decode GEMM streams from HBM.
pub const DECODE_KV_BYTES: u64 = 1 << 29;

/// Bytes per element: bf16.
const ELEM_BYTES: u64 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Regime {
    /// s_q = s_kv, as in training and prefill (d FLOP per byte of the score matrix).
    Prefill,
    /// s_q = rows of one KV head's queries for one new token: memory-bound.
    Decode,
}

impl Regime {
    pub fn name(self) -> &'static str {
        match self {
            Regime::Prefill => "prefill",
            Regime::Decode => "decode",
        }
    }
}

/// Which of attention's two products.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Product {
    /// Scores: Q K^T.
    Qk,
    /// Output: P V.
    Pv,
}

impl Product {
    pub const BOTH: [Product; 2] = [Product::Qk, Product::Pv];
    pub fn name(self) -> &'static str {
        match self {
            Product::Qk => "qk",
            Product::Pv => "pv",
        }
    }
}

/// One attention shape: `batch` (sequence, head) pairs of s_q queries over s_kv keys, head dim d.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Case {
    pub regime: Regime,
    pub seq_q: u64,
    pub seq_kv: u64,
    pub head_dim: u64,
    pub batch: u64,
}

impl Case {
    /// The GEMM shape of one batch element.
    pub fn shape(&self, p: Product) -> GemmShape {
        match p {
            Product::Qk => GemmShape { m: self.seq_q, n: self.seq_kv, k: self.head_dim },
            Product::Pv => GemmShape { m: self.seq_q, n: self.head_dim, k: self.seq_kv },
        }
    }
    /// FLOPs of the whole batch of one product.
    pub fn flops(&self, p: Product) -> f64 {
        self.shape(p).flops() * self.batch as f64
    }
    /// Bytes the whole batch of one product must move: A and B read, C written, once each.
    pub fn bytes(&self, p: Product) -> u64 {
        let s = self.shape(p);
        self.batch * (s.m * s.k + s.k * s.n + s.m * s.n) * ELEM_BYTES
    }
}

/// Prefill cases: s_q = s_kv = s, batch = [`SCORE_ELEMENTS`] / s^2. The reference of the
/// cost model (s = 8192, d = 128) is in both modes.
pub fn prefill_cases(quick: bool) -> Vec<Case> {
    let seqs: &[u64] = if quick { &[512, 2048, 8192] } else { &[512, 1024, 2048, 4096, 8192] };
    let mut out = Vec::new();
    for &head_dim in &[64u64, 128] {
        for &s in seqs {
            out.push(Case { regime: Regime::Prefill, seq_q: s, seq_kv: s, head_dim, batch: (SCORE_ELEMENTS / (s * s)).max(1) });
        }
    }
    out
}

/// Memory-bound cases: s_q = GQA group size, d = 128, batch = [`DECODE_KV_BYTES`] / (s_kv d 2).
pub fn decode_cases(quick: bool) -> Vec<Case> {
    let (groups, seqs): (&[u64], &[u64]) = if quick { (&[1, 8], &[4096]) } else { (&[1, 2, 4, 8], &[1024, 2048, 4096, 8192]) };
    let head_dim = 128;
    let mut out = Vec::new();
    for &g in groups {
        for &s_kv in seqs {
            out.push(Case { regime: Regime::Decode, seq_q: g, seq_kv: s_kv, head_dim, batch: (DECODE_KV_BYTES / (s_kv * head_dim * ELEM_BYTES)).max(1) });
        }
    }
    out
}

/// One measured product of one case.
#[derive(Debug, Clone)]
pub struct AttnRow {
    pub case: Case,
    pub product: Product,
    /// Seconds per call (the whole batch).
    pub time: Percentiles,
    pub sm_clock_mhz: Option<f64>,
    pub waves: f32,
    pub algo_index: usize,
    pub check_rel_err: f64,
}

impl AttnRow {
    pub fn shape(&self) -> GemmShape {
        self.case.shape(self.product)
    }
    /// FLOP/s at the median time.
    pub fn flops_per_s(&self) -> f64 {
        self.case.flops(self.product) / self.time.p50
    }
    /// Bytes/s at the median time (see [`Case::bytes`]).
    pub fn bytes_per_s(&self) -> f64 {
        self.case.bytes(self.product) as f64 / self.time.p50
    }
}

/// Every (shape, batch) the cases run, for sizing the operands.
pub fn batched_shapes(cases: &[Case]) -> Vec<(GemmShape, u64)> {
    cases.iter().flat_map(|c| Product::BOTH.map(|p| (c.shape(p), c.batch))).collect()
}

/// Measure both products of `case` on `ops` (bf16 operands from [`batched_shapes`]).
pub fn measure(
    ge: &Gemm,
    ops: &Operands,
    case: Case,
    p: Product,
    n_algos: usize,
    reps: Reps,
    sm_clock: &dyn Fn() -> Option<f64>,
) -> Result<AttnRow, CalibrateError> {
    let Timed { time, sm_clock_mhz, waves, algo_index, check_rel_err } = ge.measure_batched(ops, case.shape(p), case.batch, n_algos, reps, sm_clock)?;
    Ok(AttnRow { case, product: p, time, sm_clock_mhz, waves, algo_index, check_rel_err })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefill_cases_do_a_fixed_amount_of_work_within_a_memory_cap() {
        for quick in [true, false] {
            let cases = prefill_cases(quick);
            assert!(cases.iter().any(|c| (c.seq_q, c.head_dim) == (8192, 128)));
            for c in &cases {
                for p in Product::BOTH {
                    let f = c.flops(p);
                    assert!((2f64.powi(36)..=2f64.powi(38)).contains(&f), "{c:?} {p:?}: {f:e}");
                    let s = c.shape(p);
                    for elems in [s.m * s.k, s.k * s.n, s.m * s.n] {
                        assert!(c.batch * elems * ELEM_BYTES <= 1 << 30, "{c:?} {p:?}");
                    }
                }
            }
        }
        assert_eq!(prefill_cases(false).len(), 10);
        // s = 8192: 8 sequence-heads; s = 512: 2048.
        let b: Vec<u64> = prefill_cases(false).iter().map(|c| c.batch).take(5).collect();
        assert_eq!(b, vec![2048, 512, 128, 32, 8]);
    }

    #[test]
    fn decode_cases_stream_a_fixed_kv_size_past_l2() {
        for c in decode_cases(false) {
            assert!((1..=8).contains(&c.seq_q));
            let s = c.shape(Product::Qk);
            // K of the batch (B of QK^T): DECODE_KV_BYTES exactly.
            assert_eq!(c.batch * s.k * s.n * ELEM_BYTES, DECODE_KV_BYTES);
            // Memory-bound: far below the FLOP/byte ridge of an H100 or H200 (989 TFLOP/s dense
            // bf16 over 3.35 or 4.8 TB/s: about 300 or 200).
            for p in Product::BOTH {
                assert!(c.flops(p) / c.bytes(p) as f64 <= 8.0, "{c:?} {p:?}");
            }
        }
        assert_eq!(decode_cases(false).len(), 16);
        assert_eq!(decode_cases(true).len(), 2);
    }

    #[test]
    fn shapes_follow_attention() {
        let c = Case { regime: Regime::Prefill, seq_q: 1024, seq_kv: 2048, head_dim: 64, batch: 3 };
        assert_eq!(c.shape(Product::Qk), GemmShape { m: 1024, n: 2048, k: 64 });
        assert_eq!(c.shape(Product::Pv), GemmShape { m: 1024, n: 64, k: 2048 });
        // Equal FLOPs for both products: 2 s_q s_kv d per batch element.
        assert_eq!(c.flops(Product::Qk), c.flops(Product::Pv));
        assert_eq!(c.flops(Product::Qk), 2.0 * 3.0 * 1024.0 * 2048.0 * 64.0);
        assert_eq!(c.bytes(Product::Pv), 3 * (1024 * 2048 + 2048 * 64 + 1024 * 64) * 2);
        assert_eq!(batched_shapes(&[c]).len(), 2);
    }
}
