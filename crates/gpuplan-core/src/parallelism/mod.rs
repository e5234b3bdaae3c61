//! Parallel configuration, its divisibility rules, and where each communication group lives.
//!
//! Rank order (fastest-varying first) is TP, CP, DP, PP as in Megatron-Core; the EP group is carved
//! out of DP x CP (experts are sharded across data-parallel ranks), and expert-tensor parallelism
//! (ETP) splits each expert across `etp` ranks inside the TP group.

use crate::hardware::System;
use crate::model::Model;

pub mod split;
pub use split::{
    bubble_chunk_shares, picked_kind_counts, stage_kind_counts, stage_layer_counts, unrequested_uneven_interleaving, virtual_stage_layer_counts,
    virtual_stage_layers, Fill, PipelineSplit, SplitError,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Schedule {
    /// GPipe-style all-forward then all-backward (same bubble as 1F1B, more memory).
    Gpipe,
    OneFOneB,
    /// Interleaved 1F1B with `vp` virtual stages per rank.
    Interleaved,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ParallelConfig {
    pub tp: u32,
    /// Sequence parallelism with TP: norms/dropout sharded, all-reduce replaced by RS + AG.
    pub sp: bool,
    pub pp: u32,
    /// Virtual pipeline stages per rank (1 = plain 1F1B).
    pub vp: u32,
    pub dp: u32,
    pub cp: u32,
    pub ep: u32,
    /// Expert tensor parallelism (defaults to 1: whole experts per rank).
    pub etp: u32,
    /// 0 none, 1 optimizer states sharded over DP, 2 + gradients, 3 + parameters (FSDP full shard).
    pub zero: u32,
    pub schedule: Schedule,
    /// How the layers split over pipeline (virtual) stages: Megatron's options (`split`).
    pub split: PipelineSplit,
}

impl ParallelConfig {
    pub fn n_gpus(&self) -> u64 {
        self.tp as u64 * self.pp as u64 * self.dp as u64 * self.cp as u64
    }
    /// Data-parallel ranks that hold the same expert shard (experts are replicated dp*cp/ep times).
    pub fn expert_dp(&self) -> u32 {
        (self.dp * self.cp * self.tp / (self.ep * self.etp)).max(1)
    }
}

/// Share of a rank's model-chunk passes (forwards, and as many backwards) that Megatron-Core's
/// combined 1F1B schedule (`overlap_moe_expert_parallel_comm`) runs alone, with no other
/// micro-batch's pass to hide their EP all-to-alls behind; the rest run as forward-backward pairs.
/// Without pipelining the first forward and the last backward run alone
/// (megatron-core 0.16.1 `pipeline_parallel/combined_1f1b.py`,
/// `combined_1f1b_schedule_for_no_pipelining`: "Phases 0: 1st microbatch forward ... Phases 4:
/// 4th microbatch backward"). With interleaving (Megatron requires a virtual pipeline for the
/// overlap when pp > 1) the warm-up forwards, as many cool-down backwards, run alone: on the first
/// stage, which has the most, `2 (pp - 1) + (vp - 1) pp + 1` of the `m vp` chunk passes
/// (`pipeline_parallel/schedules.py`, `get_pp_rank_microbatches`: the interleaved warm-up plus the
/// "one extra micro-batch forward step" the overlap schedules; the micro-batch group per virtual
/// stage at its default, pp).
pub fn ep_overlap_unpaired_share(pc: &ParallelConfig, n_micro: u64) -> f64 {
    let (pp, vp) = (pc.pp.max(1) as u64, pc.vp.max(1) as u64);
    let chunks = n_micro.max(1) * vp;
    let alone = if pp == 1 { 1 } else { 2 * (pp - 1) + (vp - 1) * pp + 1 };
    alone.min(chunks) as f64 / chunks as f64
}

/// Why a configuration cannot run. Infeasibility is data, counted by the planner.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Infeasible {
    #[error("`{what}` = {n} is not divisible by `{by_name}` = {by}")]
    Indivisible { what: &'static str, n: u64, by_name: &'static str, by: u64 },
    #[error("tp*pp*dp*cp = {product} does not equal `gpus` = {n_gpus}")]
    GpuCount { product: u64, n_gpus: u64 },
    #[error("`{what}` = {value}: {why}")]
    Unsupported { what: &'static str, value: u64, why: String },
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn divides(p: &mut Vec<Infeasible>, what: &'static str, n: u64, by_name: &'static str, by: u64) {
    if by == 0 || !n.is_multiple_of(by) {
        p.push(Infeasible::Indivisible { what, n, by_name, by });
    }
}

/// Every divisibility rule the configuration must meet for this model; all violations, not the first.
pub fn check(model: &Model, pc: &ParallelConfig, n_gpus: u64) -> Vec<Infeasible> {
    let mut p = Vec::new();
    for (what, v) in [("tp", pc.tp), ("pp", pc.pp), ("dp", pc.dp), ("cp", pc.cp), ("ep", pc.ep), ("etp", pc.etp), ("vp", pc.vp)] {
        if v == 0 {
            p.push(Infeasible::Unsupported { what, value: 0, why: "must be at least 1".into() });
        }
    }
    if !p.is_empty() {
        return p;
    }
    if pc.n_gpus() != n_gpus {
        p.push(Infeasible::GpuCount { product: pc.n_gpus(), n_gpus });
    }
    let tp = pc.tp as u64;
    divides(&mut p, "n_heads", model.n_heads, "tp", tp);
    if model.mla.is_none() {
        // KV heads are replicated when tp > n_kv_heads, but tp must then be a multiple of them.
        if model.n_kv_heads >= tp {
            divides(&mut p, "n_kv_heads", model.n_kv_heads, "tp", tp);
        } else {
            divides(&mut p, "tp", tp, "n_kv_heads", model.n_kv_heads);
        }
    }
    divides(&mut p, "ffn_hidden", model.ffn_hidden, "tp", tp);
    if let Some(hy) = model.hybrid.as_ref().filter(|hy| hy.pattern.contains(&crate::model::Block::Mamba)) {
        // Megatron's MambaMixer: `nheads % tp_size == 0`, `ngroups % tp_size == 0`.
        let (heads, groups) = (hy.mamba.n_heads, hy.mamba.n_groups);
        if !heads.is_multiple_of(tp) || !groups.is_multiple_of(tp) {
            let (what, value) = if !heads.is_multiple_of(tp) { ("mamba_num_heads", heads) } else { ("n_groups", groups) };
            p.push(Infeasible::Unsupported {
                what,
                value,
                why: format!(
                    "not divisible by `tp` = {tp}: Megatron's MambaMixer splits the SSM heads ({heads}) and B/C groups ({groups}) over TP; hint: use a `--tp` that divides {}",
                    gcd(heads, groups)
                ),
            });
        }
        if pc.cp > 1 {
            p.push(Infeasible::Unsupported {
                what: "cp",
                value: pc.cp as u64,
                why: "Mamba-2 layers under context parallelism (Megatron's all-to-all `MambaContextParallel`) are not modelled; use cp = 1".into(),
            });
        }
    }
    if model.hybrid.is_some() && pc.vp > 1 {
        p.push(Infeasible::Unsupported {
            what: "vp",
            value: pc.vp as u64,
            why: "Megatron interleaves a hybrid pattern only at `|` stage boundaries written into the pattern, which gpuplan does not model; use vp = 1".into(),
        });
    }
    if unrequested_uneven_interleaving(model.n_layers, pc) {
        // Interleaving needs equal model chunks unless a split option or the model's recipe
        // layout says otherwise (Megatron-LM's rule).
        divides(&mut p, "n_layers", model.n_layers, "pp*vp", pc.pp as u64 * pc.vp as u64);
    } else if model.n_layers < pc.pp as u64 {
        p.push(Infeasible::Unsupported { what: "pp", value: pc.pp as u64, why: format!("more pipeline stages than the model's {} layers", model.n_layers) });
    } else if !pc.split.has_flags() && (pc.pp as u64 * pc.vp as u64) > model.n_layers + 2 {
        // A fill would leave middle virtual stages without a layer (only the embedding's and the
        // loss's may be empty, as in Megatron's layouts).
        p.push(Infeasible::Unsupported {
            what: "vp",
            value: pc.vp as u64,
            why: format!("pp*vp = {} virtual stages for the model's {} layers: middle stages would hold none", pc.pp as u64 * pc.vp as u64, model.n_layers),
        });
    } else if let Err(e) = virtual_stage_layers(model.n_layers, pc) {
        // Uneven splits are Megatron's options (`split`); only options that do not add up fail.
        p.push(Infeasible::Unsupported { what: "n_layers", value: model.n_layers, why: format!("{e}; {}", e.hint) });
    }
    if pc.vp > 1 && pc.pp == 1 {
        p.push(Infeasible::Unsupported { what: "vp", value: pc.vp as u64, why: "interleaving needs pp > 1".into() });
    }
    if pc.zero > 3 {
        p.push(Infeasible::Unsupported { what: "zero", value: pc.zero as u64, why: "ZeRO stages are 0, 1, 2, 3".into() });
    }
    match &model.moe {
        Some(moe) => {
            divides(&mut p, "n_experts", moe.n_experts as u64, "ep", pc.ep as u64);
            divides(&mut p, "dp*cp*tp", (pc.dp * pc.cp * pc.tp) as u64, "ep*etp", (pc.ep * pc.etp) as u64);
            divides(&mut p, "expert_ffn_hidden", moe.expert_ffn_hidden, "etp", pc.etp as u64);
        }
        None => {
            if pc.ep > 1 {
                p.push(Infeasible::Unsupported { what: "ep", value: pc.ep as u64, why: format!("model `{}` has no experts", model.name) });
            }
        }
    }
    p
}

/// Megatron's context parallelism for causal attention is load balanced: each sequence is cut into
/// `2*cp` chunks and rank r holds chunks r and 2*cp-1-r, so the query length must divide by
/// `2*cp` (Megatron-LM asserts it in `get_batch_on_this_cp_rank`). `q_len`: the tokens of one
/// sequence a step processes (1 in decode, which context parallelism does not split).
pub fn check_seq(pc: &ParallelConfig, q_len: u64) -> Option<Infeasible> {
    let chunks = 2 * pc.cp as u64;
    (pc.cp > 1 && q_len > 1 && !q_len.is_multiple_of(chunks)).then(|| Infeasible::Unsupported {
        what: "seq",
        value: q_len,
        why: format!(
            "is not divisible by 2*cp = {chunks}: context parallelism cuts each sequence into 2*cp load-balanced chunks (Megatron)\nhint: choose `seq` a multiple of {chunks} (e.g. {}), or a `cp` with seq divisible by 2*cp",
            (q_len / chunks).max(1) * chunks
        ),
    })
}

/// Which communication group an op runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Group {
    Tp,
    Cp,
    Ep,
    Dp,
    /// The data-parallel group of expert weights (replicas of one expert shard).
    ExpertDp,
    Pp,
}

impl Group {
    pub fn name(self) -> &'static str {
        match self {
            Group::Tp => "tp",
            Group::Cp => "cp",
            Group::Ep => "ep",
            Group::Dp => "dp",
            Group::ExpertDp => "expert_dp",
            Group::Pp => "pp",
        }
    }
}

/// A group's size and how its ranks are spread over NVLink domains.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupShape {
    pub size: u32,
    /// Distance between consecutive ranks of the group in the global rank order.
    pub stride: u64,
    /// Ranks of the group inside one NVLink domain.
    pub ranks_per_domain: u32,
    /// NVLink domains (nodes, or NVL72 racks) the group spans.
    pub domains: u32,
}

impl GroupShape {
    pub fn crosses_domains(&self) -> bool {
        self.domains > 1
    }
}

pub fn group_shape(pc: &ParallelConfig, group: Group, system: &System) -> GroupShape {
    let (size, stride) = match group {
        Group::Tp => (pc.tp, 1u64),
        Group::Cp => (pc.cp, pc.tp as u64),
        // Expert grid (Megatron-Core): ETP fastest, then EP, then expert-DP, over the same ranks.
        Group::Ep => (pc.ep, pc.etp as u64),
        Group::Dp => (pc.dp, pc.tp as u64 * pc.cp as u64),
        Group::ExpertDp => (pc.expert_dp(), pc.etp as u64 * pc.ep as u64),
        Group::Pp => (pc.pp, pc.tp as u64 * pc.cp as u64 * pc.dp as u64),
    };
    let domain = system.nvlink_domain_size as u64;
    let span = stride * size as u64; // ranks covered from the group's first to past its last
    let (ranks_per_domain, domains) = if span <= domain {
        (size, 1)
    } else if stride >= domain {
        (1, size)
    } else {
        let per = (domain / stride) as u32;
        (per.max(1), size.div_ceil(per.max(1)))
    };
    GroupShape { size, stride, ranks_per_domain, domains }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::gpt3_175b;

    fn pc(tp: u32, pp: u32, dp: u32) -> ParallelConfig {
        ParallelConfig { tp, sp: true, pp, vp: 1, dp, cp: 1, ep: 1, etp: 1, zero: 1, schedule: Schedule::OneFOneB, split: PipelineSplit::default() }
    }

    #[test]
    fn ep_overlap_pairs_all_but_the_warm_up_and_cool_down() {
        let layout = |pp: u32, vp: u32| ParallelConfig {
            tp: 1,
            sp: false,
            pp,
            vp,
            dp: 8,
            cp: 1,
            ep: 8,
            etp: 1,
            zero: 1,
            schedule: Schedule::OneFOneB,
            split: Default::default(),
        };
        // No pipeline: the first forward and the last backward of 16 micro-batches run alone.
        assert_eq!(ep_overlap_unpaired_share(&layout(1, 1), 16), 1.0 / 16.0);
        // pp 2, vp 8, 32 micro-batches: 2 + 7 x 2 + 1 = 17 of 256 chunk passes in the warm-up.
        assert_eq!(ep_overlap_unpaired_share(&layout(2, 8), 32), 17.0 / 256.0);
        // Everything in the warm-up: nothing pairs.
        assert_eq!(ep_overlap_unpaired_share(&layout(4, 2), 1), 1.0);
        assert_eq!(ep_overlap_unpaired_share(&layout(1, 1), 1), 1.0);
    }

    #[test]
    fn more_virtual_stages_than_layers_is_refused() {
        let m = gpt3_175b(); // 96 layers
        let mut c = pc(8, 16, 1);
        c.vp = 12;
        c.schedule = Schedule::Interleaved;
        c.split.fill = Fill::Balanced;
        assert!(check(&m, &c, 128).iter().any(|e| matches!(e, Infeasible::Unsupported { what: "vp", .. })));
        c.vp = 6; // 96 virtual stages, one layer each
        assert!(check(&m, &c, 128).is_empty(), "{:?}", check(&m, &c, 128));
    }

    #[test]
    fn gpt3_tp8_pp8_is_valid_and_tp7_is_not() {
        let m = gpt3_175b();
        assert!(check(&m, &pc(8, 8, 2), 128).is_empty());
        let errs = check(&m, &pc(7, 1, 1), 7);
        assert!(errs.iter().any(|e| matches!(e, Infeasible::Indivisible { what: "n_heads", .. })), "{errs:?}");
        let errs = check(&m, &pc(8, 1, 2), 8);
        assert!(errs.contains(&Infeasible::GpuCount { product: 16, n_gpus: 8 }));
    }
}
