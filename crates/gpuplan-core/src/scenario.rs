//! A scenario: what to predict. Model + system + parallel layout + workload (+ a measured profile).
//! Built by `config::scenario` from a scenario file and flags; read by both engines.

use crate::hardware::profile::Profile;
use crate::hardware::{Sourced, System};
use crate::model::Model;
use crate::parallelism::ParallelConfig;
use crate::units::Watts;
use crate::workload::Workload;

#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Overlap TP collectives with the GEMMs next to them (Megatron `--tp-comm-overlap`).
    pub tp_comm_overlap: bool,
    /// Overlap the DP gradient reduction with backward (DDP and Megatron default: on).
    pub dp_overlap: bool,
    /// What Megatron-Core training replays from CUDA graphs (`--cuda-graph-impl`,
    /// `--cuda-graph-scope`); the other stacks ignore it.
    pub cuda_graphs: TrainGraphs,
    /// Megatron-Core's EP communication overlap (`--overlap-moe-expert-parallel-comm`,
    /// megatron-core 0.16.1 `pipeline_parallel/combined_1f1b.py`): one micro-batch's forward and
    /// another's backward run layer by layer together, each one's dispatch and combine all-to-alls
    /// beside the other's compute (`cost::lower::ep_a2a_overlap`). Megatron training with EP > 1 only.
    pub moe_ep_overlap: bool,
    /// Megatron-Core's shared-expert overlap (`--moe-shared-expert-overlap`, megatron-core 0.16.1
    /// `transformer/moe/shared_experts.py`): the shared experts run on their own stream beside
    /// the alltoall dispatcher's all-to-alls (fc1 and the activation beside the dispatch, fc2
    /// beside the combine; their gradients likewise; `cost::lower::shared_expert_overlap`).
    pub moe_shared_expert_overlap: bool,
    /// The GPU's idle power as the run itself measured it (`validate` of a run record whose job
    /// printed `config idle_w=`: scenarios/workloads/hf_train.py --host-probe): the power model's
    /// idle term (`power::solve_with_idle`) in place of the profile's or the datasheet's; the
    /// excess terms keep their anchors. `None`: the GPU's own `idle_power`.
    pub run_idle: Option<Sourced<Watts>>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            tp_comm_overlap: false,
            dp_overlap: true,
            cuda_graphs: TrainGraphs::None,
            moe_ep_overlap: false,
            moe_shared_expert_overlap: false,
            run_idle: None,
        }
    }
}

/// CUDA graphs in Megatron-Core training (Megatron-Bridge `cuda_graph_impl` / `cuda_graph_scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TrainGraphs {
    /// Eager: every kernel launched by the host (`cuda_graph_impl = "none"`, Megatron's default).
    #[default]
    None,
    /// Transformer Engine graphs of the attention block and the MoE router and dispatch
    /// preprocessing (`cuda_graph_impl = "transformer_engine"`, `cuda_graph_scope = ["attn",
    /// "moe_router", "moe_preprocess"]`): those kernels cost the host nothing; the experts, the
    /// dispatch and combine and the rest stay eager, the dispatcher's host sync included.
    Partial,
    /// The whole iteration replayed from one graph (`cuda_graph_impl = "full_iteration"`, with
    /// HybridEP and a per-rank expert capacity, `moe_expert_rank_capacity_factor`, so that no
    /// token count crosses to the host): no host launch time, no dispatcher sync, each kernel at
    /// the GPU's in-graph floor.
    Full,
}

impl TrainGraphs {
    pub const ALL: [TrainGraphs; 3] = [TrainGraphs::None, TrainGraphs::Partial, TrainGraphs::Full];
    pub fn name(self) -> &'static str {
        match self {
            TrainGraphs::None => "none",
            TrainGraphs::Partial => "partial",
            TrainGraphs::Full => "full",
        }
    }
    pub fn parse(s: &str) -> Option<TrainGraphs> {
        TrainGraphs::ALL.into_iter().find(|g| g.name() == s)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    pub name: String,
    pub model: Model,
    pub system: System,
    pub n_gpus: u64,
    pub parallel: ParallelConfig,
    pub workload: Workload,
    pub profile: Option<Profile>,
    pub options: Options,
}
