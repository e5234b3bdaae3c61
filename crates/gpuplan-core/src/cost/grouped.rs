//! Grouped expert GEMMs and MoE index kernels priced from what `calibrate --moe` measured
//! (`Profile::moe`: scenarios/workloads/moe_probe.py's table). The one entry point for a lowering
//! is [`CostModel::grouped_expert_gemm`] (and [`CostModel::moe_index_time`]); both return `None`
//! where the profile has no measured table for the GPU and kernel asked, and the caller keeps its
//! own rule (the GEMM model), saying so in the prediction's provenance.
//!
//! Reading the table (no constant is fitted here):
//! - the measured expert count nearest the one asked (log distance) is taken, and the time scaled
//!   by the ratio of expert counts (a grouped GEMM's work, its weight reads and, for PyTorch's
//!   fallback, its launches all grow with the number of groups);
//! - along the tokens per expert of each measured width: log-log linear between the measured
//!   counts; below the smallest, the smallest's time (what reads the weights and launches does not
//!   shrink); above the largest, the largest's time scaled by the tokens (compute-bound);
//! - across widths: each measured width's time scaled by `k n` over its own (the work and the
//!   weight bytes are both proportional to it), then the two nearest widths (log distance in k and
//!   n) weighted by inverse distance, so a measured width is read exactly.

use super::CostModel;
use crate::hardware::profile::{GroupedKernel, GroupedLayout, MoeIndexKernel, MoeKernels};
use crate::hardware::Dtype;
use crate::units::Seconds;

fn lg(x: f64) -> f64 {
    x.max(1.0).ln()
}

/// Log-log linear through `pts` (x ascending, x and y positive) at `x` (positive); flat below the first point,
/// proportional to x above the last.
fn interp(pts: &[(f64, f64)], x: f64) -> f64 {
    let (first, last) = (pts[0], pts[pts.len() - 1]);
    if x <= first.0 {
        return first.1;
    }
    if x >= last.0 {
        return last.1 * x / last.0;
    }
    let i = pts.partition_point(|p| p.0 <= x).clamp(1, pts.len() - 1);
    let (a, b) = (pts[i - 1], pts[i]);
    if (b.0.ln() - a.0.ln()).abs() < 1e-12 {
        return a.1;
    }
    let f = (x.ln() - a.0.ln()) / (b.0.ln() - a.0.ln());
    (a.1.ln() + f * (b.1.ln() - a.1.ln())).exp()
}

impl MoeKernels {
    /// Time of one grouped GEMM of `experts` groups of `tokens` rows each, per-group widths `k`
    /// and `n`, read from the measured points of `kernel`, `dtype` and `layout` (module docs);
    /// `None` without such points.
    #[allow(clippy::too_many_arguments)]
    pub fn grouped_time(&self, kernel: GroupedKernel, dtype: Dtype, layout: GroupedLayout, experts: u64, tokens: u64, k: u64, n: u64) -> Option<Seconds> {
        let pts: Vec<_> = self.grouped.iter().filter(|p| p.kernel == kernel && p.dtype == dtype && p.layout == layout).collect();
        let le = lg(experts as f64);
        let e_star = pts.iter().map(|p| p.experts).min_by(|a, b| (lg(*a as f64) - le).abs().total_cmp(&(lg(*b as f64) - le).abs()).then(b.cmp(a)))?;
        let mut widths: Vec<(u64, u64)> = pts.iter().filter(|p| p.experts == e_star).map(|p| (p.k, p.n)).collect();
        widths.sort_unstable();
        widths.dedup();
        let dist = |w: &(u64, u64)| (lg(w.0 as f64) - lg(k as f64)).abs() + (lg(w.1 as f64) - lg(n as f64)).abs();
        widths.sort_by(|a, b| dist(a).total_cmp(&dist(b)).then(a.cmp(b)));
        let at = |w: (u64, u64)| {
            let mut curve: Vec<(f64, f64)> = pts.iter().filter(|p| p.experts == e_star && (p.k, p.n) == w).map(|p| (p.tokens as f64, p.time.value())).collect();
            curve.sort_by(|a, b| a.0.total_cmp(&b.0));
            interp(&curve, tokens.max(1) as f64) * (k as f64 * n as f64) / (w.0 as f64 * w.1 as f64)
        };
        let scale = experts as f64 / e_star as f64;
        let t = match widths.as_slice() {
            [] => return None,
            [w] => at(*w),
            [a, b, ..] => {
                let (da, db) = (dist(a), dist(b));
                if da < 1e-12 {
                    at(*a)
                } else {
                    (at(*a) / da + at(*b) / db) / (1.0 / da + 1.0 / db)
                }
            }
        };
        Some(Seconds::new(t * scale))
    }

    /// Time of the index kernels `kernels` run one after another on a problem whose bytes (the
    /// probe's count for these kernels together) are `bytes`: the measured cases that ran all of
    /// them, their summed bytes and times, log-log linear in bytes (flat below the smallest case,
    /// proportional above the largest); `None` without such cases.
    pub fn index_time(&self, kernels: &[MoeIndexKernel], bytes: f64) -> Option<Seconds> {
        // Per measured case (experts, tokens, hidden, top-k): summed bytes, summed time, kernels.
        type Case = (u64, u64, u64, u64);
        let mut cases: std::collections::BTreeMap<Case, (f64, f64, usize)> = Default::default();
        for p in self.index.iter().filter(|p| kernels.contains(&p.kernel)) {
            let e = cases.entry((p.experts, p.tokens, p.hidden, p.top_k)).or_insert((0.0, 0.0, 0));
            e.0 += p.bytes;
            e.1 += p.time.value();
            e.2 += 1;
        }
        let mut pts: Vec<(f64, f64)> = cases.into_values().filter(|c| c.2 == kernels.len() && c.0 > 0.0 && c.1 > 0.0).map(|c| (c.0, c.1)).collect();
        if pts.is_empty() {
            return None;
        }
        pts.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
        Some(Seconds::new(interp(&pts, bytes)))
    }
}

impl CostModel<'_> {
    /// The measured MoE tables, when the profile has them and was measured on this GPU model (they
    /// are times, not fractions of a peak, so they do not transfer to another GPU).
    pub fn moe_kernels(&self) -> Option<&MoeKernels> {
        let p = self.profile?;
        matches!(super::profile_relation(&self.system.gpu, p), super::Relation::Same).then_some(())?;
        p.moe.as_ref()
    }

    /// One grouped expert GEMM: `experts` experts of `tokens` tokens each (layout `Mk`: the
    /// per-expert M; layout `K`: the weight gradient's reduction), per-expert widths `k`
    /// (reduction of `Mk`) and `n`, by `kernel` in `dtype`, from the profile's measured table;
    /// `None` without one for this GPU, kernel and dtype (the caller keeps its GEMM rule).
    #[allow(clippy::too_many_arguments)]
    pub fn grouped_expert_gemm(
        &self,
        kernel: GroupedKernel,
        dtype: Dtype,
        layout: GroupedLayout,
        experts: u64,
        tokens: u64,
        k: u64,
        n: u64,
    ) -> Option<Seconds> {
        self.moe_kernels()?.grouped_time(kernel, dtype, layout, experts, tokens, k, n)
    }

    /// MoE index kernels run back to back on `bytes` (the probe's byte count), from the profile's
    /// measured table; `None` without one.
    pub fn moe_index_time(&self, kernels: &[MoeIndexKernel], bytes: f64) -> Option<Seconds> {
        self.moe_kernels()?.index_time(kernels, bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hardware::profile::{GroupedGemmPoint, MoeIndexPoint};

    fn pt(experts: u64, tokens: u64, k: u64, n: u64, us: f64) -> GroupedGemmPoint {
        GroupedGemmPoint { kernel: GroupedKernel::GroupedMm, dtype: Dtype::Bf16, layout: GroupedLayout::Mk, experts, tokens, k, n, time: Seconds::us(us) }
    }

    fn table() -> MoeKernels {
        // Rows of the lent H100's probe (calibration/profiles/h100-sxm-1x/moe.csv), 64 experts.
        MoeKernels {
            provenance: "test".into(),
            grouped: vec![
                pt(64, 1, 2048, 1536, 158.056),
                pt(64, 64, 2048, 1536, 164.452),
                pt(64, 256, 2048, 1536, 208.995),
                pt(64, 1024, 2048, 1536, 609.926),
                pt(64, 256, 768, 2048, 100.0),
                pt(64, 1024, 768, 2048, 300.0),
            ],
            index: vec![
                MoeIndexPoint { kernel: MoeIndexKernel::GatherRows, experts: 8, tokens: 4096, hidden: 2048, top_k: 2, time: Seconds::us(20.0), bytes: 1e7 },
                MoeIndexPoint { kernel: MoeIndexKernel::GatherRows, experts: 8, tokens: 65536, hidden: 2048, top_k: 2, time: Seconds::us(200.0), bytes: 1e9 },
            ],
        }
    }

    #[test]
    fn measured_shapes_read_back_exactly_and_between_them_log_linearly() {
        let t = table();
        let at = |e, tok, k, n| t.grouped_time(GroupedKernel::GroupedMm, Dtype::Bf16, GroupedLayout::Mk, e, tok, k, n).unwrap().value() * 1e6;
        assert!((at(64, 256, 2048, 1536) - 208.995).abs() < 1e-6);
        // Half way in log tokens between 256 and 1024: the geometric mean of the times.
        assert!((at(64, 512, 2048, 1536) - (208.995f64 * 609.926).sqrt()).abs() < 1e-6);
        // Below the smallest count: flat (the weight reads); above the largest: proportional.
        assert!((at(64, 1, 2048, 1536) - 158.056).abs() < 1e-6);
        assert!((at(64, 4096, 2048, 1536) - 4.0 * 609.926).abs() < 1e-6);
        // Twice the experts (nearest measured count 64): twice the time.
        assert!((at(128, 256, 2048, 1536) - 2.0 * 208.995).abs() < 1e-6);
        // A width between the two measured ones lies between their k n-scaled times.
        let mid = at(64, 256, 1024, 2048);
        let (a, b): (f64, f64) = (208.995 * (1024.0 * 2048.0) / (2048.0 * 1536.0), 100.0 * (1024.0 * 2048.0) / (768.0 * 2048.0));
        assert!(mid > a.min(b) && mid < a.max(b), "{mid} {a} {b}");
        // Another dtype or layout is not measured: None, the caller keeps its rule.
        assert!(t.grouped_time(GroupedKernel::GroupedMm, Dtype::Fp32, GroupedLayout::Mk, 64, 256, 2048, 1536).is_none());
        assert!(t.grouped_time(GroupedKernel::GroupedMm, Dtype::Bf16, GroupedLayout::K, 64, 256, 2048, 1536).is_none());
    }

    #[test]
    fn index_kernels_interpolate_in_bytes() {
        let t = table();
        let g = |b: f64| t.index_time(&[MoeIndexKernel::GatherRows], b).unwrap().value() * 1e6;
        assert!((g(1e7) - 20.0).abs() < 1e-9);
        assert!((g(1e8) - (20.0f64 * 200.0).sqrt()).abs() < 1e-6);
        assert!((g(1e3) - 20.0).abs() < 1e-9);
        assert!((g(2e9) - 400.0).abs() < 1e-6);
        assert!(t.index_time(&[MoeIndexKernel::GatherRows, MoeIndexKernel::TopkSum], 1e7).is_none());
    }
}
