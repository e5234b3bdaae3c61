//! Scenario flags shared by `predict`, `simulate` and `plan`. A flag overrides the scenario file.

use std::path::PathBuf;

use crate::config::scenario::{OptionsWire, ParallelWire, ScenarioWire, WorkloadWire};

#[derive(clap::Args, Debug, Default, Clone)]
pub struct ScenarioArgs {
    /// Scenario file (scenarios/*.toml); flags override its values
    #[arg(long)]
    pub scenario: Option<PathBuf>,
    /// Model: a name from models/, a TOML file, or a Hugging Face config.json
    #[arg(long)]
    pub model: Option<String>,
    /// System: a name from calibration/systems/ (dgx-b200, gb200-nvl72, dgx-h100, hgx-h200, ...) or a file
    #[arg(long)]
    pub system: Option<String>,
    /// Total GPUs (= tp * pp * dp * cp)
    #[arg(long)]
    pub gpus: Option<i64>,
    #[arg(long)]
    pub tp: Option<i64>,
    #[arg(long)]
    pub pp: Option<i64>,
    #[arg(long)]
    pub dp: Option<i64>,
    #[arg(long)]
    pub cp: Option<i64>,
    #[arg(long)]
    pub ep: Option<i64>,
    /// Expert tensor parallelism
    #[arg(long)]
    pub etp: Option<i64>,
    /// Virtual pipeline stages per rank (interleaved 1F1B)
    #[arg(long)]
    pub vp: Option<i64>,
    /// Sequence parallelism with TP (default: on when tp > 1)
    #[arg(long)]
    pub sp: Option<bool>,
    /// Pipeline schedule: 1f1b, interleaved, gpipe
    #[arg(long)]
    pub schedule: Option<String>,
    /// ZeRO stage: 0, 1, 2, 3 (3 = FSDP full shard)
    #[arg(long)]
    pub zero: Option<i64>,
    /// Decoder layers on the first pipeline rank (Megatron-LM's flag)
    #[arg(long)]
    pub decoder_first_pipeline_num_layers: Option<i64>,
    /// Decoder layers on the last pipeline rank (Megatron-LM's flag)
    #[arg(long)]
    pub decoder_last_pipeline_num_layers: Option<i64>,
    /// The embedding counts as one layer in the pipeline split (Megatron-LM's flag)
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub account_for_embedding_in_pipeline_split: Option<bool>,
    /// The loss counts as one layer in the pipeline split (Megatron-LM's flag)
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub account_for_loss_in_pipeline_split: Option<bool>,
    /// Decoder layers per virtual stage, comma-separated (virtual stage = chunk * pp + rank)
    #[arg(long, value_delimiter = ',')]
    pub pipeline_layout: Option<Vec<i64>>,
    /// train, prefill or decode
    #[arg(long)]
    pub mode: Option<String>,
    /// Sequences per micro-batch per data-parallel rank
    #[arg(long)]
    pub micro_batch: Option<i64>,
    /// Sequences per optimizer step, whole job
    #[arg(long)]
    pub global_batch: Option<i64>,
    /// Sequence length (training, prefill)
    #[arg(long)]
    pub seq: Option<i64>,
    /// Sequences in flight per replica (inference)
    #[arg(long)]
    pub batch: Option<i64>,
    /// Cached tokens per sequence (decode)
    #[arg(long)]
    pub kv_len: Option<i64>,
    /// bf16, fp16, fp8, fp4, tf32, fp32
    #[arg(long)]
    pub precision: Option<String>,
    /// none, selective, full
    #[arg(long)]
    pub recompute: Option<String>,
    /// megatron, torch-eager, torch-compile
    #[arg(long)]
    pub stack: Option<String>,
    /// Busiest expert rank's tokens / mean (1.0 = balanced)
    #[arg(long)]
    pub routing_imbalance: Option<f64>,
    /// Overlap TP communication with GEMMs (Megatron --tp-comm-overlap)
    #[arg(long)]
    pub tp_comm_overlap: Option<bool>,
    /// Calibration profile: a name under calibration/profiles/, its folder or profile.toml;
    /// `none` ignores the one a system file names
    #[arg(long)]
    pub calibration: Option<String>,
}

impl ScenarioArgs {
    /// The flags as a scenario overlay.
    pub fn to_wire(&self) -> ScenarioWire {
        ScenarioWire {
            model: self.model.clone(),
            system: self.system.clone(),
            gpus: self.gpus,
            calibration: self.calibration.clone(),
            parallelism: ParallelWire {
                tp: self.tp,
                pp: self.pp,
                dp: self.dp,
                cp: self.cp,
                ep: self.ep,
                etp: self.etp,
                vp: self.vp,
                sp: self.sp,
                zero: self.zero,
                schedule: self.schedule.clone(),
                decoder_first_pipeline_num_layers: self.decoder_first_pipeline_num_layers,
                decoder_last_pipeline_num_layers: self.decoder_last_pipeline_num_layers,
                account_for_embedding_in_pipeline_split: self.account_for_embedding_in_pipeline_split,
                account_for_loss_in_pipeline_split: self.account_for_loss_in_pipeline_split,
                pipeline_layout: self.pipeline_layout.clone(),
            },
            workload: WorkloadWire {
                mode: self.mode.clone(),
                micro_batch: self.micro_batch,
                global_batch: self.global_batch,
                seq: self.seq,
                batch: self.batch,
                kv_len: self.kv_len,
                precision: self.precision.clone(),
                recompute: self.recompute.clone(),
                stack: self.stack.clone(),
                dropout: None,
                flash_attention: None,
                routing_imbalance: self.routing_imbalance,
            },
            options: OptionsWire { tp_comm_overlap: self.tp_comm_overlap, dp_overlap: None },
            ..ScenarioWire::default()
        }
    }

    /// Read the scenario file (if any), overlay the flags, and build the scenario.
    pub fn build(&self) -> anyhow::Result<crate::scenario::Scenario> {
        use crate::config::scenario::{build, overlay, read_scenario};
        let base = match &self.scenario {
            Some(p) => read_scenario(p)?,
            None => ScenarioWire::default(),
        };
        let merged = overlay(base, self.to_wire());
        Ok(build(&merged, self.scenario.as_deref())?)
    }
}
