//! Hybrid Mamba-attention models (Nemotron-H, Nemotron-Nano-2, Nemotron 3): a per-layer pattern of
//! blocks, each one norm, one mixer or MLP and a residual, and the Mamba-2 mixer's shape.
//!
//! The pattern is Megatron-LM's `--hybrid-layer-pattern` (formerly `--hybrid-override-pattern`),
//! which Hugging Face config.json files carry as `hybrid_override_pattern`: one symbol per layer,
//! `M` Mamba-2, `*` self-attention, `-` MLP, `E` mixture of experts
//! (megatron-core 0.19 `megatron/core/models/hybrid/hybrid_layer_allocation.py`, `Symbols`; the
//! same four in transformers 5.17 `NemotronHConfig._pattern_to_list`). Megatron's other symbols
//! (`G` gated delta net, `D` DeepSeek sparse attention, `+` MLA, `|` pipeline-stage boundaries,
//! `/` multi-token prediction) are not modelled and are refused by `config`.

/// One layer of a hybrid model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Block {
    /// Mamba-2 mixer (`M`).
    Mamba,
    /// Self-attention (`*`), no position embedding in Nemotron-H.
    Attention,
    /// Dense MLP (`-`).
    Mlp,
    /// Mixture-of-experts MLP (`E`).
    Moe,
}

impl Block {
    pub const ALL: [Block; 4] = [Block::Mamba, Block::Attention, Block::Mlp, Block::Moe];
    pub fn symbol(self) -> char {
        match self {
            Block::Mamba => 'M',
            Block::Attention => '*',
            Block::Mlp => '-',
            Block::Moe => 'E',
        }
    }
    pub fn of_symbol(c: char) -> Option<Block> {
        Block::ALL.into_iter().find(|b| b.symbol() == c)
    }
}

/// What each layer of any model is, for op lists, parameters and pipeline stages: a transformer
/// layer (attention and a dense or MoE FFN), or one block of a hybrid model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LayerKind {
    Dense,
    Moe,
    Mamba,
    Attention,
    Mlp,
    MoeMlp,
}

impl LayerKind {
    pub const ALL: [LayerKind; 6] = [LayerKind::Dense, LayerKind::Moe, LayerKind::Mamba, LayerKind::Attention, LayerKind::Mlp, LayerKind::MoeMlp];
    pub fn index(self) -> usize {
        self as usize
    }
    pub fn of_block(b: Block) -> LayerKind {
        match b {
            Block::Mamba => LayerKind::Mamba,
            Block::Attention => LayerKind::Attention,
            Block::Mlp => LayerKind::Mlp,
            Block::Moe => LayerKind::MoeMlp,
        }
    }
    /// The layer holds self-attention (and so a KV cache in inference).
    pub fn has_attention(self) -> bool {
        matches!(self, LayerKind::Dense | LayerKind::Moe | LayerKind::Attention)
    }
    /// The layer holds a mixture of experts.
    pub fn has_moe(self) -> bool {
        matches!(self, LayerKind::Moe | LayerKind::MoeMlp)
    }
}

/// Layers of each kind, indexed by [`LayerKind::index`].
pub type KindCounts = [u64; 6];

/// The Mamba-2 mixer (Dao and Gu 2024, "Transformers are SSMs", sec. 7; Megatron-LM's `MambaMixer`,
/// transformers' `NemotronHMamba2Mixer`): `in_proj` to z, x, B, C and dt; a depthwise causal
/// conv1d over x, B and C; the SSD chunked scan; a gated grouped RMSNorm; `out_proj`.
#[derive(Debug, Clone, PartialEq)]
pub struct Mamba2 {
    /// SSM heads (`mamba_num_heads`); the inner width is `n_heads * head_dim`.
    pub n_heads: u64,
    pub head_dim: u64,
    /// State size N per head (`ssm_state_size`, Megatron `mamba_state_dim`).
    pub state_size: u64,
    /// B/C groups (`n_groups`, Megatron `mamba_num_groups`), shared by `n_heads / n_groups` heads.
    pub n_groups: u64,
    /// Causal conv1d width (`conv_kernel`, Megatron `d_conv`).
    pub conv_kernel: u64,
    /// SSD chunk length Q (`chunk_size`).
    pub chunk_size: u64,
}

impl Mamba2 {
    /// The mixer's inner width (Megatron `d_inner`).
    pub fn d_inner(&self) -> u64 {
        self.n_heads * self.head_dim
    }
    /// `in_proj`'s output width: z, x (d_inner each), B, C (n_groups x state each), dt (n_heads).
    pub fn in_proj_width(&self) -> u64 {
        2 * self.d_inner() + 2 * self.n_groups * self.state_size + self.n_heads
    }
    /// Channels of the causal conv1d: x, B and C.
    pub fn conv_dim(&self) -> u64 {
        self.d_inner() + 2 * self.n_groups * self.state_size
    }
    /// Parameters of one mixer: `in_proj` and `out_proj` (no bias), the conv1d weight and bias,
    /// `dt_bias`, `A_log` and `D` (one per head), the gated RMSNorm's weight (d_inner).
    pub fn params(&self, hidden: u64) -> f64 {
        let h = hidden as f64;
        let di = self.d_inner() as f64;
        h * self.in_proj_width() as f64 + di * h + self.conv_dim() as f64 * (self.conv_kernel + 1) as f64 + 3.0 * self.n_heads as f64 + di
    }
    /// Parameters of its two matrix multiplies (the `N` of 6N).
    pub fn matmul_params(&self, hidden: u64) -> f64 {
        hidden as f64 * (self.in_proj_width() + self.d_inner()) as f64
    }
    /// Forward FLOPs per token of the SSD chunked scan, the convention this crate counts model
    /// FLOPs by (the intra-chunk product in full, as attention's causal half is): the matmuls of
    /// mamba_ssm's Triton kernels (`ssd_combined.py` `_mamba_chunk_scan_combined_fwd`, megatron-core's
    /// copy in `megatron/core/ssm/ops`), with heads H, head dim P, state N, groups G, chunk Q:
    /// `_chunk_state_fwd` B^T x per chunk (2 H P N), `_bmm_chunk_fwd` C B^T per chunk and group
    /// (2 Q G N), `_chunk_scan_fwd` the intra-chunk (C B^T . decay) x (2 Q H P) and the inter-chunk
    /// C . state (2 H P N). The cumulative sums and the state passing between chunks are
    /// elementwise (counted as memory traffic, 0 FLOPs).
    pub fn scan_flops_per_token(&self) -> f64 {
        let (h, p, n, g, q) = (self.n_heads as f64, self.head_dim as f64, self.state_size as f64, self.n_groups as f64, self.chunk_size as f64);
        4.0 * h * p * n + 2.0 * q * g * n + 2.0 * q * h * p
    }
    /// Bytes one sequence's recurrent state takes in one mixer in inference: the SSM state
    /// (H x P x N at `ssm_elem_bytes`) and the conv state (the last `conv_kernel - 1` inputs of
    /// every conv channel at `conv_elem_bytes`); independent of the context length.
    pub fn state_bytes_per_sequence(&self, ssm_elem_bytes: f64, conv_elem_bytes: f64) -> f64 {
        (self.n_heads * self.head_dim * self.state_size) as f64 * ssm_elem_bytes + (self.conv_dim() * (self.conv_kernel - 1)) as f64 * conv_elem_bytes
    }
}

/// Bytes of one SSM state element in inference: fp32, transformers' `mamba_ssm_cache_dtype` default
/// for Nemotron-H (`NemotronHConfig`, transformers 5.17) and what mamba_ssm's
/// `selective_state_update` accumulates in.
pub const SSM_STATE_BYTES: f64 = 4.0;

/// The layer pattern and mixer shape of a hybrid model.
#[derive(Debug, Clone, PartialEq)]
pub struct Hybrid {
    pub pattern: Vec<Block>,
    pub mamba: Mamba2,
}

impl Hybrid {
    pub fn count(&self, b: Block) -> u64 {
        self.pattern.iter().filter(|x| **x == b).count() as u64
    }
    /// The pattern as Megatron writes it (`M-M*-...`).
    pub fn pattern_string(&self) -> String {
        self.pattern.iter().map(|b| b.symbol()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nemotron-H 8B's mixer (Megatron-Bridge 0.6.2 `recipes/nemotronh/h100/nemotronh.py`;
    /// NVIDIA, "Nemotron-H", arXiv:2504.03624, Table 1).
    pub fn nemotron_h_8b_mamba() -> Mamba2 {
        Mamba2 { n_heads: 128, head_dim: 64, state_size: 128, n_groups: 8, conv_kernel: 4, chunk_size: 128 }
    }

    #[test]
    fn mixer_shapes_and_params_follow_the_megatron_layout() {
        let m = nemotron_h_8b_mamba();
        assert_eq!(m.d_inner(), 8192);
        // z, x: 8192 each; B, C: 8 x 128 each; dt: 128.
        assert_eq!(m.in_proj_width(), 18560);
        assert_eq!(m.conv_dim(), 10240);
        // in_proj 4096 x 18560 + out_proj 8192 x 4096 + conv 10240 x (4 + 1) + 3 x 128 + 8192.
        assert_eq!(m.params(4096), 76_021_760.0 + 33_554_432.0 + 51_200.0 + 384.0 + 8192.0);
    }

    #[test]
    fn scan_flops_and_state_bytes() {
        let m = nemotron_h_8b_mamba();
        // 4 x 128 x 64 x 128 + 2 x 128 x 8 x 128 + 2 x 128 x 128 x 64
        assert_eq!(m.scan_flops_per_token(), 4_194_304.0 + 262_144.0 + 2_097_152.0);
        // SSM state 128 x 64 x 128 fp32 = 4 MiB, conv state 10240 x 3 bf16 = 60 KiB.
        assert_eq!(m.state_bytes_per_sequence(SSM_STATE_BYTES, 2.0), 4_194_304.0 + 61_440.0);
    }

    #[test]
    fn symbols_round_trip() {
        for b in Block::ALL {
            assert_eq!(Block::of_symbol(b.symbol()), Some(b));
        }
        assert_eq!(Block::of_symbol('G'), None);
    }
}
