//! LoRA fine-tuning as Megatron-Bridge runs it (`megatron.bridge.peft.lora.LoRA`, the
//! `ParallelLinearAdapter` of `peft/utils.py` and `LoRALinear` of `peft/lora_layers.py`;
//! megatron-bridge 0.3.1 on PyPI): the base model's weights are frozen, and each targeted linear
//! layer `y = W x` gains `y += (alpha / r) B (A x)` with `A: d_in -> r` and `B: r -> d_out` in
//! bf16 (the adapters are Megatron-Core `ColumnParallelLinear` / `RowParallelLinear` layers, not
//! Transformer Engine ones, so FP8 recipes do not reach them).
//!
//! Under tensor parallelism an adapter of a column-parallel layer (`linear_qkv`, `linear_fc1`) has
//! `A` column-parallel with its output gathered (`gather_output=True`) and `B` column-parallel;
//! one of a row-parallel layer (`linear_proj`, `linear_fc2`) has `A` row-parallel (its partial
//! sums all-reduced) and `B` column-parallel with its output gathered to the full width. `alpha`
//! scales the output and does not change the cost, so it is not an input here.

use crate::model::{FfnKind, Model};

/// A linear layer an adapter can target, by Megatron-Core's module name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LoraTarget {
    /// The fused query/key/value projection (column-parallel).
    Qkv,
    /// The attention output projection (row-parallel).
    Proj,
    /// The FFN's first (up, or fused gate+up) projection (column-parallel), routed and shared
    /// experts' included.
    Fc1,
    /// The FFN's down projection (row-parallel), routed and shared experts' included.
    Fc2,
}

impl LoraTarget {
    /// Every target: Megatron-Bridge's default `target_modules = ["linear_qkv", "linear_proj",
    /// "linear_fc1", "linear_fc2"]` (`peft/lora.py`, class `LoRA`).
    pub const ALL: [LoraTarget; 4] = [LoraTarget::Qkv, LoraTarget::Proj, LoraTarget::Fc1, LoraTarget::Fc2];
    pub fn name(self) -> &'static str {
        match self {
            LoraTarget::Qkv => "linear_qkv",
            LoraTarget::Proj => "linear_proj",
            LoraTarget::Fc1 => "linear_fc1",
            LoraTarget::Fc2 => "linear_fc2",
        }
    }
    /// Megatron-Core's module name, or the same without its `linear_` prefix.
    pub fn parse(s: &str) -> Option<LoraTarget> {
        let s = s.trim();
        LoraTarget::ALL.into_iter().find(|t| t.name() == s || t.name().strip_prefix("linear_") == Some(s))
    }
    /// The base layer's weight is split by columns under TP (its adapter's output is sharded).
    pub fn column_parallel(self) -> bool {
        matches!(self, LoraTarget::Qkv | LoraTarget::Fc1)
    }
}

/// The LoRA adapters of a fine-tuning run.
#[derive(Debug, Clone, PartialEq)]
pub struct Lora {
    /// The adapters' rank `r` (Megatron-Bridge's `dim`).
    pub rank: u64,
    /// Targeted layers, sorted, without repeats.
    pub targets: Vec<LoraTarget>,
}

impl Lora {
    pub fn new(rank: u64, mut targets: Vec<LoraTarget>) -> Lora {
        targets.sort();
        targets.dedup();
        Lora { rank, targets }
    }
    pub fn targets(&self, t: LoraTarget) -> bool {
        self.targets.contains(&t)
    }
    /// The targets' names, comma-separated.
    pub fn target_names(&self) -> String {
        self.targets.iter().map(|t| t.name()).collect::<Vec<_>>().join(",")
    }
}

/// (d_in, d_out) of each targeted layer of a dense FFN of width `width` (the full, unsharded
/// shapes; the gated FFN's fc1 is the fused gate and up projection, 2 x width wide).
fn ffn_dims(model: &Model, width: u64) -> [(LoraTarget, u64, u64); 2] {
    let up = if model.ffn_kind == FfnKind::Gated { 2 * width } else { width };
    [(LoraTarget::Fc1, model.hidden, up), (LoraTarget::Fc2, width, model.hidden)]
}

/// (d_in, d_out) of a layer's attention projections (the fused QKV and the output projection).
pub fn attention_dims(model: &Model) -> [(LoraTarget, u64, u64); 2] {
    let q = model.n_heads * model.head_dim;
    let qkv = (model.n_heads + 2 * model.n_kv_heads) * model.head_dim;
    [(LoraTarget::Qkv, model.hidden, qkv), (LoraTarget::Proj, q, model.hidden)]
}

/// Adapter parameters of one whole (unsharded) layer: `r (d_in + d_out)` for each targeted
/// layer, the FFN's of every routed expert and of the shared experts in an MoE layer.
/// Returns (dense part, routed-expert part).
pub fn adapter_params_per_layer(model: &Model, lora: &Lora, moe_layer: bool) -> (f64, f64) {
    let r = lora.rank as f64;
    let sum = |dims: &[(LoraTarget, u64, u64)]| dims.iter().filter(|(t, _, _)| lora.targets(*t)).map(|(_, i, o)| r * (*i + *o) as f64).sum::<f64>();
    let attention = sum(&attention_dims(model));
    match (&model.moe, moe_layer) {
        (Some(moe), true) => {
            let shared = if moe.n_shared_experts > 0 { sum(&ffn_dims(model, moe.shared_expert_ffn_hidden * moe.n_shared_experts as u64)) } else { 0.0 };
            (attention + shared, moe.n_experts as f64 * sum(&ffn_dims(model, moe.expert_ffn_hidden)))
        }
        _ => (attention + sum(&ffn_dims(model, model.ffn_hidden)), 0.0),
    }
}

/// Adapter parameters of the whole model (every layer; none on the embedding or LM head).
pub fn adapter_params(model: &Model, lora: &Lora) -> f64 {
    let (d, _) = adapter_params_per_layer(model, lora, false);
    let (md, me) = if model.is_moe() { adapter_params_per_layer(model, lora, true) } else { (0.0, 0.0) };
    model.n_dense_layers() as f64 * d + model.n_moe_layers() as f64 * (md + me)
}

/// The narrowest side of any targeted layer: a rank above it is no low-rank adapter.
pub fn narrowest_target(model: &Model, lora: &Lora) -> u64 {
    let mut dims: Vec<(LoraTarget, u64, u64)> = attention_dims(model).to_vec();
    if model.n_dense_layers() > 0 {
        dims.extend(ffn_dims(model, model.ffn_hidden));
    }
    if let Some(moe) = &model.moe {
        dims.extend(ffn_dims(model, moe.expert_ffn_hidden));
    }
    dims.iter().filter(|(t, _, _)| lora.targets(*t)).map(|(_, i, o)| (*i).min(*o)).min().unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::gpt3_175b;

    #[test]
    fn adapter_params_are_r_times_d_in_plus_d_out_per_target() {
        let m = gpt3_175b(); // h 12288, 96 heads of 128, plain FFN 4h
        let h = 12288.0;
        let lora = Lora::new(16, LoraTarget::ALL.to_vec());
        let (d, e) = adapter_params_per_layer(&m, &lora, false);
        // qkv h -> 3h, proj h -> h, fc1 h -> 4h, fc2 4h -> h: r (4h + 2h + 5h + 5h) = 16 r h.
        assert_eq!(d, 16.0 * 16.0 * h);
        assert_eq!(e, 0.0);
        assert_eq!(adapter_params(&m, &lora), 96.0 * 16.0 * 16.0 * h);
        let qkv_only = Lora::new(32, vec![LoraTarget::Qkv]);
        assert_eq!(adapter_params_per_layer(&m, &qkv_only, false).0, 32.0 * 4.0 * h);
        assert_eq!(narrowest_target(&m, &qkv_only), 12288);
    }

    #[test]
    fn targets_parse_by_module_name_or_short_name() {
        assert_eq!(LoraTarget::parse("linear_qkv"), Some(LoraTarget::Qkv));
        assert_eq!(LoraTarget::parse("fc2"), Some(LoraTarget::Fc2));
        assert_eq!(LoraTarget::parse("q_proj"), None);
        assert_eq!(Lora::new(8, vec![LoraTarget::Fc2, LoraTarget::Qkv, LoraTarget::Fc2]).target_names(), "linear_qkv,linear_fc2");
    }
}
