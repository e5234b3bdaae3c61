//! How the decoder layers are split over pipeline stages and virtual stages, as Megatron-LM builds
//! them (`megatron/core/transformer/transformer_block.py`, `get_num_layers_to_build`).
//!
//! Virtual stages are numbered as Megatron numbers model chunks: virtual stage `v = chunk * pp +
//! rank`, so virtual stage 0 (the embedding's) and virtual stage `pp*vp - 1` (the LM head's and
//! the loss's) sit on the first and last ranks.
//!
//! - `--decoder-first-pipeline-num-layers` / `--decoder-last-pipeline-num-layers`: the first
//!   (last) rank holds that many layers; the rest split evenly over the middle ranks and must
//!   divide; each rank's layers split evenly over its `vp` chunks.
//! - `--account-for-embedding-in-pipeline-split` / `--account-for-loss-in-pipeline-split`: the
//!   embedding (loss) counts as one layer; `n_layers + 1 (+ 1)` must split evenly over `pp*vp`
//!   virtual stages, and the first (last) virtual stage builds one decoder layer fewer.
//! - `pipeline_layout`: decoder layers per virtual stage given outright (what Megatron's
//!   `--pipeline-model-parallel-layout` says once its `E`/`L`/`m` markers are set aside).
//! - With none of these, layers that divide evenly over `pp*vp` do so (Megatron's default); those
//!   that do not are split by the scenario's [`Fill`] rule: the model recipe's layout, or refused
//!   when interleaving (Megatron's default, `check`).

use super::ParallelConfig;

/// How to split layers that do not divide evenly over the virtual stages when no flag says how.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Fill {
    /// Megatron-LM without options: layers must divide evenly over `pp*vp` when interleaving
    /// (`check` refuses the layout otherwise); with vp = 1 gpuplan splits them as [`Fill::Balanced`],
    /// which Megatron would express as a `pipeline_layout`.
    #[default]
    Even,
    /// `n / (pp*vp)` everywhere and one more on the middle virtual stages first, then the ends:
    /// the first and last stages also hold the embedding and the LM head. Whenever
    /// `n + 2` divides evenly this equals Megatron's split with both `account_for_*` flags set
    /// (Llama 3.1 405B's 126 layers: 126 + 2 = 128).
    Balanced,
    /// `ceil(n / (pp*vp))` on every virtual stage; the shortfall comes off the last virtual stage
    /// (the loss's, and MTP's), then the first (the embedding's), then inward. This reproduces the
    /// pipeline layouts Megatron-Bridge's DeepSeek-V3 recipes set for 61 layers.
    FrontFilled,
}

/// Megatron's pipeline-split options. All unset: even split, or [`Fill`] when uneven.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct PipelineSplit {
    /// `--decoder-first-pipeline-num-layers`: layers on the first pipeline rank.
    pub first: Option<u64>,
    /// `--decoder-last-pipeline-num-layers`: layers on the last pipeline rank.
    pub last: Option<u64>,
    /// `--account-for-embedding-in-pipeline-split`.
    pub account_for_embedding: bool,
    /// `--account-for-loss-in-pipeline-split`.
    pub account_for_loss: bool,
    /// Decoder layers per virtual stage, in virtual-stage order (`pipeline_layout`).
    pub layout: Option<Vec<u64>>,
    /// The rule for an uneven split when none of the above is set.
    pub fill: Fill,
}

impl PipelineSplit {
    /// Whether any Megatron flag is set (the fill rule is then not used).
    pub fn has_flags(&self) -> bool {
        self.first.is_some() || self.last.is_some() || self.account_for_embedding || self.account_for_loss || self.layout.is_some()
    }
}

/// Why the split options do not describe a layout: the scenario key, its value, what is wrong and
/// what would work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{key}` = {value}: {why}")]
pub struct SplitError {
    /// The scenario key (under `[parallelism]`), as Megatron's flag without dashes.
    pub key: &'static str,
    pub value: String,
    pub why: String,
    pub hint: String,
}

pub const KEY_FIRST: &str = "decoder_first_pipeline_num_layers";
pub const KEY_LAST: &str = "decoder_last_pipeline_num_layers";
pub const KEY_EMBEDDING: &str = "account_for_embedding_in_pipeline_split";
pub const KEY_LOSS: &str = "account_for_loss_in_pipeline_split";
pub const KEY_LAYOUT: &str = "pipeline_layout";
/// The key a pipeline-depth error names (`vp`; pp is under it too).
pub const KEY_VP: &str = "vp";

/// Decoder layers of each virtual stage (`pp*vp` entries, `v = chunk * pp + rank`), or why the
/// options do not add up.
pub fn virtual_stage_layers(n_layers: u64, pc: &ParallelConfig) -> Result<Vec<u64>, SplitError> {
    let (pp, vp) = (pc.pp.max(1) as u64, pc.vp.max(1) as u64);
    let n_v = pp * vp;
    let sp = &pc.split;
    let err = |key, value: String, why: String, hint: String| Err(SplitError { key, value, why, hint });
    // Checked before any list of stages is made (the fuzz campaign found pp*vp in the billions
    // allocating 34 GB here). Megatron's layouts may leave a few virtual stages empty (DeepSeek-V3:
    // 61 layers in 16 x 4); more than twice the layers, plus embedding and loss, is no layout.
    let max_stages = 2 * n_layers + 2;
    if n_v > max_stages {
        return err(
            KEY_VP,
            format!("pp*vp = {pp}*{vp} = {n_v}"),
            format!("is more than twice the model's {n_layers} layers in virtual stages"),
            format!("choose pp*vp of at most {max_stages}"),
        );
    }
    if let Some(layout) = &sp.layout {
        if sp.first.is_some() || sp.last.is_some() || sp.account_for_embedding || sp.account_for_loss {
            return err(
                KEY_LAYOUT,
                format!("{layout:?}"),
                "cannot be combined with the first/last or account_for_* options".into(),
                "give either a layout or the other options".into(),
            );
        }
        if layout.len() as u64 != n_v {
            return err(
                KEY_LAYOUT,
                format!("{layout:?}"),
                format!("has {} virtual stages, the layout has pp*vp = {pp}*{vp} = {n_v}", layout.len()),
                format!("list {n_v} layer counts, virtual stage v = chunk*pp + rank"),
            );
        }
        let sum: u64 = layout.iter().sum();
        if sum != n_layers {
            return err(
                KEY_LAYOUT,
                format!("{layout:?}"),
                format!("adds up to {sum} layers, the model has {n_layers}"),
                format!("make the counts add up to {n_layers}"),
            );
        }
        return Ok(layout.clone());
    }
    if sp.first.is_some() || sp.last.is_some() {
        if sp.account_for_embedding || sp.account_for_loss {
            // Megatron-LM asserts the same ("Does not support standalone embedding stage and
            // standalone loss stage with uneven pp").
            let key = if sp.account_for_embedding { KEY_EMBEDDING } else { KEY_LOSS };
            return err(
                key,
                "true".into(),
                "cannot be combined with decoder_first/last_pipeline_num_layers (as in Megatron-LM)".into(),
                "use either the first/last layer counts or the account_for_* options".into(),
            );
        }
        let mut rest = n_layers as i64;
        let mut stages_left = pp as i64;
        for (key, v) in [(KEY_FIRST, sp.first), (KEY_LAST, sp.last)] {
            if let Some(n) = v {
                rest -= n as i64;
                stages_left -= 1;
                if rest < 0 {
                    return err(
                        key,
                        n.to_string(),
                        format!("leaves {rest} layers of the model's {n_layers} for the other stages"),
                        format!("the first and last stages together hold at most {n_layers} layers"),
                    );
                }
            }
        }
        let key = if sp.last.is_some() { KEY_LAST } else { KEY_FIRST };
        let value = sp.last.or(sp.first).unwrap_or_default().to_string();
        if stages_left <= 0 {
            if pp == 1 {
                return err(key, value, "needs pipeline parallelism (pp > 1)".into(), "set pp > 1 or drop the option".into());
            }
            if rest != 0 {
                return err(
                    key,
                    value,
                    format!("with pp = {pp} the first and last stages must hold all {n_layers} layers; {rest} are left"),
                    format!("make decoder_first + decoder_last = {n_layers}"),
                );
            }
        } else if rest % stages_left != 0 {
            return err(
                key,
                value,
                format!("leaves {rest} layers for {stages_left} middle stages, which do not split evenly (n_layers = {n_layers}, pp = {pp})"),
                format!("choose first/last so that n_layers - first - last is a multiple of {stages_left}"),
            );
        }
        let middle = if stages_left > 0 { (rest / stages_left) as u64 } else { 0 };
        let per_rank: Vec<u64> = (0..pp)
            .map(|r| match (r, sp.first, sp.last) {
                (0, Some(f), _) => f,
                (r, _, Some(l)) if r == pp - 1 => l,
                _ => middle,
            })
            .collect();
        // Megatron-LM: each rank's layers split evenly over its model chunks.
        for (r, &n) in per_rank.iter().enumerate() {
            if !n.is_multiple_of(vp) {
                let (key, v) = match (r, sp.first, sp.last) {
                    (0, Some(f), _) => (KEY_FIRST, f),
                    (r, _, Some(l)) if r as u64 == pp - 1 => (KEY_LAST, l),
                    _ => (key, sp.last.or(sp.first).unwrap_or_default()),
                };
                return err(
                    key,
                    v.to_string(),
                    format!("pipeline rank {r} holds {n} layers, not a multiple of vp = {vp}"),
                    format!("with vp = {vp}, every rank's layer count must be a multiple of {vp}"),
                );
            }
        }
        return Ok((0..n_v).map(|v| per_rank[(v % pp) as usize] / vp).collect());
    }
    if sp.account_for_embedding || sp.account_for_loss {
        let total = n_layers + sp.account_for_embedding as u64 + sp.account_for_loss as u64;
        if !total.is_multiple_of(n_v) {
            let key = if sp.account_for_loss { KEY_LOSS } else { KEY_EMBEDDING };
            return err(
                key,
                "true".into(),
                format!("n_layers = {n_layers} plus the accounted embedding/loss = {total} is not divisible by pp*vp = {pp}*{vp} = {n_v}"),
                "choose pp and vp so that they divide it, or give decoder_first/last_pipeline_num_layers or a pipeline_layout".into(),
            );
        }
        let mut out = vec![total / n_v; n_v as usize];
        if sp.account_for_embedding {
            out[0] -= 1;
        }
        if sp.account_for_loss {
            out[n_v as usize - 1] -= 1;
        }
        return Ok(out);
    }
    Ok(fill(n_layers, n_v, sp.fill))
}

/// Whether the layout is an uneven interleaved split that nothing asked for (Megatron-LM refuses
/// it: no option set and the model's recipe gives no layout).
pub fn unrequested_uneven_interleaving(n_layers: u64, pc: &ParallelConfig) -> bool {
    pc.vp > 1 && !pc.split.has_flags() && pc.split.fill == Fill::Even && !n_layers.is_multiple_of(pc.pp as u64 * pc.vp as u64)
}

/// Split `n` layers over `n_v` virtual stages by the fill rule (even when they divide).
pub fn fill(n: u64, n_v: u64, rule: Fill) -> Vec<u64> {
    let n_v = n_v.max(1);
    match rule {
        Fill::Even | Fill::Balanced => {
            let mut counts = vec![n / n_v; n_v as usize];
            let mut extra = n % n_v;
            // Middle stages outward: 1, n_v-2, 2, ..., then the ends.
            let mut order: Vec<usize> = (1..n_v.saturating_sub(1) as usize).collect();
            order.push(0);
            if n_v > 1 {
                order.push(n_v as usize - 1);
            }
            for i in order {
                if extra == 0 {
                    break;
                }
                counts[i] += 1;
                extra -= 1;
            }
            counts
        }
        Fill::FrontFilled => {
            let per = n.div_ceil(n_v);
            let mut counts = vec![per; n_v as usize];
            let mut short = per * n_v - n;
            // The last, the first, the second to last, the second, ...
            let len = n_v as usize;
            let order = (0..len).map(|i| if i % 2 == 0 { len - 1 - i / 2 } else { i / 2 });
            for i in order {
                let take = short.min(counts[i]);
                counts[i] -= take;
                short -= take;
                if short == 0 {
                    break;
                }
            }
            counts
        }
    }
}

/// The per-virtual-stage counts, or the fill rule's when the options do not add up (`check`
/// reports those before any engine prices the scenario).
pub fn virtual_stage_layer_counts(n_layers: u64, pc: &ParallelConfig) -> Vec<u64> {
    virtual_stage_layers(n_layers, pc).unwrap_or_else(|_| fill(n_layers, pc.pp.max(1) as u64 * pc.vp.max(1) as u64, pc.split.fill))
}

/// Decoder layers held by each pipeline rank (the sum of its virtual stages).
pub fn stage_layer_counts(n_layers: u64, pc: &ParallelConfig) -> Vec<u64> {
    let pp = pc.pp.max(1) as usize;
    let mut out = vec![0; pp];
    for (v, n) in virtual_stage_layer_counts(n_layers, pc).into_iter().enumerate() {
        out[v % pp] += n;
    }
    out
}

/// Layers of each kind on pipeline rank `rank`, for a model whose layers are `kinds` first to last
/// (`Model::layer_kinds`): Megatron splits a hybrid pattern over the stages by layer count, in
/// order (megatron-core 0.19 `hybrid_layer_allocation.select_pipeline_segment` without `|`
/// separators), as it does a transformer's layers; a rank's virtual stages are not contiguous
/// when vp > 1.
pub fn stage_kind_counts(kinds: &[crate::model::LayerKind], pc: &ParallelConfig, rank: u32) -> crate::model::KindCounts {
    let pp = pc.pp.max(1) as usize;
    let mut start = 0usize;
    let mut out = [0u64; 6];
    for (v, n) in virtual_stage_layer_counts(kinds.len() as u64, pc).into_iter().enumerate() {
        let end = (start + n as usize).min(kinds.len());
        if v % pp == rank as usize {
            for k in &kinds[start.min(end)..end] {
                out[k.index()] += 1;
            }
        }
        start = end;
    }
    out
}

/// Layers of each kind on pipeline rank `rank` for whose rank-local index (0-based, in the order
/// the rank's model chunks hold them: virtual stages `rank`, `rank + pp`, ...) `pick` is true
/// (layer checkpointing's every n-th block, `workload::Recompute::checkpoints`).
pub fn picked_kind_counts(kinds: &[crate::model::LayerKind], pc: &ParallelConfig, rank: u32, pick: impl Fn(u64) -> bool) -> crate::model::KindCounts {
    let pp = pc.pp.max(1) as usize;
    let mut start = 0usize;
    let mut out = [0u64; 6];
    let mut i = 0u64;
    for (v, n) in virtual_stage_layer_counts(kinds.len() as u64, pc).into_iter().enumerate() {
        let end = (start + n as usize).min(kinds.len());
        if v % pp == rank as usize {
            for k in &kinds[start.min(end)..end] {
                if pick(i) {
                    out[k.index()] += 1;
                }
                i += 1;
            }
        }
        start = end;
    }
    out
}

/// The share of each rank's per-micro-batch time that lies on the pipeline's fill and drain, when
/// a rank's model chunks are not all of one size (`None`: they are, and the share is 1/vp of every
/// rank but the slowest). Before the slowest rank, the first micro-batch's forward and the last one's
/// backward pass through each rank's first chunk (virtual stages 0..pp); after it, through each
/// rank's last chunk. A rank's time is shared out over its chunks by their layers.
pub fn bubble_chunk_shares(n_layers: u64, pc: &ParallelConfig, slowest: usize) -> Option<Vec<f64>> {
    let pp = pc.pp.max(1) as usize;
    let vp = pc.vp.max(1) as usize;
    let v = virtual_stage_layer_counts(n_layers, pc);
    // Each rank's chunks of one size (vp = 1 included): every share is 1/vp.
    if (0..pp).all(|d| (0..vp).all(|c| v[c * pp + d] == v[d])) {
        return None;
    }
    let per_rank = stage_layer_counts(n_layers, pc);
    Some(
        (0..pp)
            .map(|d| {
                let chunk = match d.cmp(&slowest) {
                    std::cmp::Ordering::Equal => return 0.0,
                    std::cmp::Ordering::Less => d,
                    std::cmp::Ordering::Greater => (vp - 1) * pp + d,
                };
                if per_rank[d] == 0 {
                    1.0 / vp as f64
                } else {
                    v[chunk] as f64 / per_rank[d] as f64
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parallelism::Schedule;

    #[test]
    fn a_hybrid_pattern_splits_in_order_by_layer_count() {
        use crate::model::LayerKind::{Attention, Mamba, Mlp};
        let kinds = crate::model::tests::nemotron_h_8b().layer_kinds();
        let count = |c: crate::model::KindCounts| (c[Mamba.index()], c[Attention.index()], c[Mlp.index()]);
        // pp = 4: 13 layers each, `M-M-M-M*-M-M-`, `M-M-M*-M-M-M-`, ...: one attention layer each.
        for rank in 0..4 {
            assert_eq!(count(stage_kind_counts(&kinds, &pc(4, 1, PipelineSplit::default()), rank)), (6, 1, 6));
        }
        // `--decoder-first-pipeline-num-layers 10` at pp = 2: `M-M-M-M*-M` first, the other 42 last.
        let first = PipelineSplit { first: Some(10), ..PipelineSplit::default() };
        assert_eq!(count(stage_kind_counts(&kinds, &pc(2, 1, first.clone()), 0)), (5, 1, 4));
        assert_eq!(count(stage_kind_counts(&kinds, &pc(2, 1, first), 1)), (19, 3, 20));
    }

    fn pc(pp: u32, vp: u32, split: PipelineSplit) -> ParallelConfig {
        ParallelConfig {
            tp: 8,
            sp: true,
            pp,
            vp,
            dp: 1,
            cp: 1,
            ep: 1,
            etp: 1,
            zero: 1,
            schedule: if vp > 1 { Schedule::Interleaved } else { Schedule::OneFOneB },
            split,
        }
    }
    fn flags(first: Option<u64>, last: Option<u64>, e: bool, l: bool) -> PipelineSplit {
        PipelineSplit { first, last, account_for_embedding: e, account_for_loss: l, ..Default::default() }
    }

    /// The fuzz campaign's abort: a run record with pp*vp in the billions allocated 34 GB before
    /// the split was checked. Refused first, with the key.
    #[test]
    fn a_pipeline_deeper_than_the_layers_is_refused_before_anything_is_allocated() {
        let e = virtual_stage_layers(80, &pc(u32::MAX, 16, PipelineSplit::default())).unwrap_err();
        assert_eq!(e.key, KEY_VP);
        assert!(e.why.contains("twice the model's 80 layers"), "{e:?}");
        assert!(virtual_stage_layers(80, &pc(2, 41, PipelineSplit::default())).is_ok(), "82 = 80 layers + embedding + loss is allowed");
    }
    #[test]
    fn llama_405b_126_layers_with_embedding_and_loss_accounted() {
        // 126 + 2 = 128 slots: PP 8 x VP 4 -> 4 per virtual stage, 3 on the first and the last.
        let c = virtual_stage_layers(126, &pc(8, 4, flags(None, None, true, true))).unwrap();
        assert_eq!(c.len(), 32);
        assert_eq!((c[0], c[31]), (3, 3));
        assert!(c[1..31].iter().all(|&n| n == 4));
        assert_eq!(stage_layer_counts(126, &pc(8, 4, flags(None, None, true, true))), vec![15, 16, 16, 16, 16, 16, 16, 15]);
        // PP 16 x VP 8: one slot per virtual stage; the embedding's and the loss's hold no decoder layer.
        let c = virtual_stage_layers(126, &pc(16, 8, flags(None, None, true, true))).unwrap();
        assert_eq!((c[0], c[127], c[1..127].iter().sum::<u64>()), (0, 0, 126));
        // The default fill is the same split wherever the flags are defined.
        let balanced = PipelineSplit { fill: Fill::Balanced, ..Default::default() };
        for (pp, vp) in [(8, 1), (16, 1), (8, 2), (8, 4), (16, 4), (16, 8), (4, 8), (2, 1)] {
            let p = pc(pp, vp, flags(None, None, true, true));
            assert_eq!(virtual_stage_layers(126, &p).unwrap(), virtual_stage_layers(126, &pc(pp, vp, balanced.clone())).unwrap(), "pp {pp} vp {vp}");
        }
        // Only the embedding accounted: 127 is prime.
        let e = virtual_stage_layers(126, &pc(8, 4, flags(None, None, true, false))).unwrap_err();
        assert_eq!(e.key, KEY_EMBEDDING);
    }

    #[test]
    fn balanced_fill_matches_the_old_uneven_split() {
        let c = stage_layer_counts(126, &pc(16, 1, PipelineSplit::default()));
        assert_eq!((c[0], c[15]), (7, 7));
        assert!(c[1..15].iter().all(|&n| n == 8));
        assert_eq!(stage_layer_counts(61, &pc(1, 1, PipelineSplit::default())), vec![61]);
        assert_eq!(stage_layer_counts(96, &pc(8, 1, PipelineSplit::default())), vec![12; 8]);
        assert_eq!(virtual_stage_layers(80, &pc(2, 4, PipelineSplit::default())).unwrap(), vec![10; 8]);
        // Megatron's default refuses uneven interleaving; vp = 1 keeps gpuplan's balanced split.
        assert!(unrequested_uneven_interleaving(126, &pc(8, 4, PipelineSplit::default())));
        assert!(!unrequested_uneven_interleaving(126, &pc(16, 1, PipelineSplit::default())));
        assert!(!unrequested_uneven_interleaving(126, &pc(8, 4, PipelineSplit { fill: Fill::Balanced, ..Default::default() })));
        assert!(!unrequested_uneven_interleaving(126, &pc(8, 4, flags(None, None, true, true))));
    }

    #[test]
    fn deepseek_v3_61_layers_front_filled_as_the_bridge_recipes() {
        let ff = PipelineSplit { fill: Fill::FrontFilled, ..Default::default() };
        // Megatron-Bridge deepseek_v3 layouts: (4,1) E+16|16|16|13+L, (8,1) / (4,2) E+8|8 x6|5+L,
        // (16,1) / (8,2) / (4,4) E+4|4 x14|1+L; perf configs at PP 8 x VP 4: "Et|(tt|)*30mL".
        assert_eq!(virtual_stage_layers(61, &pc(4, 1, ff.clone())).unwrap(), vec![16, 16, 16, 13]);
        assert_eq!(virtual_stage_layers(61, &pc(4, 2, ff.clone())).unwrap(), vec![8, 8, 8, 8, 8, 8, 8, 5]);
        let c = virtual_stage_layers(61, &pc(16, 1, ff.clone())).unwrap();
        assert_eq!((c[0], c[15]), (4, 1));
        assert!(c[1..15].iter().all(|&n| n == 4));
        let c = virtual_stage_layers(61, &pc(8, 4, ff.clone())).unwrap();
        assert_eq!((c[0], c[31], c.iter().sum::<u64>()), (1, 0, 61));
        assert!(c[1..31].iter().all(|&n| n == 2));
        // Rank 0 holds virtual stages 0, 8, 16, 24: 1 + 2 + 2 + 2; rank 7 holds 2 + 2 + 2 + 0.
        assert_eq!(stage_layer_counts(61, &pc(8, 4, ff.clone())), vec![7, 8, 8, 8, 8, 8, 8, 6]);
        // The first three layers are dense: v0 has layer 0, v1 layers 1-2.
        use crate::model::LayerKind::{Dense, Moe};
        let kinds: Vec<_> = (0..61).map(|i| if i >= 3 { Moe } else { Dense }).collect();
        let dense_moe = |rank| {
            let c = stage_kind_counts(&kinds, &pc(8, 4, ff.clone()), rank);
            (c[Dense.index()], c[Moe.index()])
        };
        assert_eq!([dense_moe(0), dense_moe(1), dense_moe(2)], [(1, 6), (2, 6), (0, 8)]);
        for (pp, vp) in [(2, 4), (4, 4), (16, 4), (2, 1), (64, 1)] {
            let c = virtual_stage_layers(61, &pc(pp, vp, ff.clone())).unwrap();
            assert_eq!(c.iter().sum::<u64>(), 61, "pp {pp} vp {vp}");
        }
    }

    #[test]
    fn first_and_last_stage_layers() {
        // 61 - 5 = 56 layers over the other 7 ranks.
        let c = stage_layer_counts(61, &pc(8, 1, flags(Some(5), None, false, false)));
        assert_eq!(c, vec![5, 8, 8, 8, 8, 8, 8, 8]);
        let c = stage_layer_counts(126, &pc(16, 1, flags(Some(4), Some(10), false, false)));
        assert_eq!((c[0], c[15], c[1]), (4, 10, 8));
        // With VP, each rank's layers split over its chunks: 126 = 6 + 14 * 8 + 8 at PP 16 x VP 2.
        let v = virtual_stage_layers(126, &pc(16, 2, flags(Some(6), Some(8), false, false))).unwrap();
        assert_eq!((v[0], v[16], v[15], v[31], v[1]), (3, 3, 4, 4, 4));
        // Do not add up: 126 - 5 = 121 over 15 middle ranks.
        let e = virtual_stage_layers(126, &pc(16, 1, flags(Some(5), None, false, false))).unwrap_err();
        assert_eq!((e.key, e.value.as_str()), (KEY_FIRST, "5"));
        assert!(e.why.contains("121") && e.hint.contains("multiple of 15"), "{e:?}");
        // A rank's count that its chunks cannot share.
        let e = virtual_stage_layers(126, &pc(16, 2, flags(Some(7), Some(7), false, false))).unwrap_err();
        assert!(e.why.contains("vp = 2"), "{e:?}");
        // More than the model has.
        let e = virtual_stage_layers(61, &pc(4, 1, flags(Some(40), Some(30), false, false))).unwrap_err();
        assert_eq!(e.key, KEY_LAST);
        // Combined with the account_for_* options: refused as Megatron does.
        let e = virtual_stage_layers(61, &pc(4, 1, flags(Some(16), None, true, false))).unwrap_err();
        assert_eq!(e.key, KEY_EMBEDDING);
        // PP 2: first and last must hold everything.
        assert_eq!(stage_layer_counts(61, &pc(2, 1, flags(Some(31), Some(30), false, false))), vec![31, 30]);
        assert!(virtual_stage_layers(61, &pc(2, 1, flags(Some(31), Some(29), false, false))).is_err());
    }

    #[test]
    fn bubble_shares_follow_the_chunk_sizes() {
        assert_eq!(bubble_chunk_shares(126, &pc(16, 1, PipelineSplit::default()), 3), None);
        assert_eq!(bubble_chunk_shares(80, &pc(2, 4, PipelineSplit::default()), 0), None);
        // 126 at PP 8 x VP 4: rank 0's first chunk holds 3 of its 15 layers, rank 7's last 3 of 15.
        let balanced = PipelineSplit { fill: Fill::Balanced, ..Default::default() };
        let sh = bubble_chunk_shares(126, &pc(8, 4, balanced), 3).unwrap();
        assert_eq!(sh[3], 0.0);
        assert!((sh[0] - 3.0 / 15.0).abs() < 1e-12 && (sh[7] - 3.0 / 15.0).abs() < 1e-12 && (sh[1] - 0.25).abs() < 1e-12, "{sh:?}");
    }

    #[test]
    fn explicit_layout() {
        let l = PipelineSplit { layout: Some(vec![1, 20, 20, 20]), ..Default::default() };
        assert_eq!(stage_layer_counts(61, &pc(2, 2, l.clone())), vec![21, 40]);
        let e = virtual_stage_layers(61, &pc(4, 2, l.clone())).unwrap_err();
        assert_eq!(e.key, KEY_LAYOUT);
        let l = PipelineSplit { layout: Some(vec![1, 20, 20, 19]), ..Default::default() };
        assert!(virtual_stage_layers(61, &pc(2, 2, l)).unwrap_err().why.contains("60"));
    }
}
