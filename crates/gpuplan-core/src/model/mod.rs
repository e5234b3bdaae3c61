//! LLM architecture: dense (MHA/GQA), MoE (routed + shared experts), MLA. Built by `config` from
//! `models/*.toml` or a Hugging Face `config.json`.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FfnKind {
    /// Gated: up, gate and down projections (SwiGLU / GeGLU); 3 matrices.
    Gated,
    /// Plain: up and down projections with GELU; 2 matrices.
    Plain,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NormKind {
    RmsNorm,
    LayerNorm,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    Rope,
    /// Learned absolute position embeddings (GPT-2/3), `max_seq_len` x hidden parameters.
    Learned,
}

/// The most multi-token-prediction modules a model file may declare: each one is a whole
/// transformer layer priced beside the loss; DeepSeek-V3 has 1 and its report tried 2 (sec.
/// 2.2). A bound on input, not a property of any model.
pub const MAX_MTP_LAYERS: u32 = 16;

/// Mixture-of-experts feed-forward layers.
#[derive(Debug, Clone, PartialEq)]
pub struct Moe {
    pub n_experts: u32,
    pub top_k: u32,
    pub expert_ffn_hidden: u64,
    pub n_shared_experts: u32,
    pub shared_expert_ffn_hidden: u64,
    /// The first layers that keep a dense FFN (DeepSeek-V3: 3), with `Model::ffn_hidden`.
    pub first_dense_layers: u32,
}

/// Multi-head latent attention (DeepSeek-V2/V3).
#[derive(Debug, Clone, PartialEq)]
pub struct Mla {
    /// 0 = no low-rank query projection.
    pub q_lora_rank: u64,
    pub kv_lora_rank: u64,
    pub qk_nope_head_dim: u64,
    pub qk_rope_head_dim: u64,
    pub v_head_dim: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    pub name: String,
    pub n_layers: u64,
    pub hidden: u64,
    pub n_heads: u64,
    pub n_kv_heads: u64,
    pub head_dim: u64,
    /// FFN width of dense layers.
    pub ffn_hidden: u64,
    pub ffn_kind: FfnKind,
    pub vocab: u64,
    pub tied_embeddings: bool,
    pub norm: NormKind,
    pub position: Position,
    pub max_seq_len: u64,
    /// Bias terms on linear layers (GPT-2/3 style), and on QKV only (Qwen2).
    pub linear_bias: bool,
    pub qkv_bias: bool,
    /// RMSNorm on each head's queries and keys before RoPE (Qwen3).
    pub qk_norm: bool,
    pub moe: Option<Moe>,
    pub mla: Option<Mla>,
    /// Multi-token-prediction modules the architecture has (DeepSeek-V3: 1; HF `config.json`
    /// `num_nextn_predict_layers`). Not part of [`Model::params`] (the main model, which is what
    /// published counts count); a training run builds them only when its workload asks
    /// (`Workload::mtp_layers`, Megatron's `--mtp-num-layers`).
    pub mtp_layers: u32,
    /// The parameter count its authors publish, for the catalog test.
    pub published_params: Option<f64>,
}

/// Parameter counts by part, for one whole (unsharded) model.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ParamCount {
    pub embedding: f64,
    pub lm_head: f64,
    pub attention: f64,
    pub dense_ffn: f64,
    /// Routed experts, all of them.
    pub experts: f64,
    pub shared_experts: f64,
    pub router: f64,
    pub norms: f64,
}

impl ParamCount {
    pub fn total(&self) -> f64 {
        self.embedding + self.lm_head + self.attention + self.dense_ffn + self.experts + self.shared_experts + self.router + self.norms
    }
}

impl Model {
    pub fn is_moe(&self) -> bool {
        self.moe.is_some()
    }

    fn ffn_matrices(&self) -> f64 {
        match self.ffn_kind {
            FfnKind::Gated => 3.0,
            FfnKind::Plain => 2.0,
        }
    }

    /// Layers whose FFN is a mixture of experts.
    pub fn n_moe_layers(&self) -> u64 {
        match &self.moe {
            Some(m) => self.n_layers.saturating_sub(m.first_dense_layers as u64),
            None => 0,
        }
    }

    pub fn n_dense_layers(&self) -> u64 {
        self.n_layers - self.n_moe_layers()
    }

    /// Attention parameters of one layer (weights and biases).
    pub fn attention_params_per_layer(&self) -> f64 {
        let h = self.hidden as f64;
        if let Some(mla) = &self.mla {
            let nh = self.n_heads as f64;
            let qk_head = (mla.qk_nope_head_dim + mla.qk_rope_head_dim) as f64;
            let q = if mla.q_lora_rank > 0 {
                let r = mla.q_lora_rank as f64;
                h * r + r + r * nh * qk_head // down, its norm, up
            } else {
                h * nh * qk_head
            };
            let r = mla.kv_lora_rank as f64;
            let kv = h * (r + mla.qk_rope_head_dim as f64) + r + r * nh * (mla.qk_nope_head_dim + mla.v_head_dim) as f64;
            let o = nh * mla.v_head_dim as f64 * h;
            return q + kv + o;
        }
        let q = (self.n_heads * self.head_dim) as f64;
        let kv = (self.n_kv_heads * self.head_dim) as f64;
        let weights = h * (q + 2.0 * kv) + q * h;
        let bias = if self.linear_bias {
            q + 2.0 * kv + h
        } else if self.qkv_bias {
            q + 2.0 * kv
        } else {
            0.0
        };
        weights + bias
    }

    fn ffn_params(&self, width: u64) -> f64 {
        let h = self.hidden as f64;
        let f = width as f64;
        let bias = if self.linear_bias { f * (self.ffn_matrices() - 1.0) + h } else { 0.0 };
        self.ffn_matrices() * h * f + bias
    }

    /// Norm parameters of one layer (two norms; LayerNorm has a bias too).
    fn norm_params_per_layer(&self) -> f64 {
        let per_norm = match self.norm {
            NormKind::RmsNorm => self.hidden as f64,
            NormKind::LayerNorm => 2.0 * self.hidden as f64,
        };
        2.0 * per_norm
    }

    pub fn params(&self) -> ParamCount {
        let h = self.hidden as f64;
        let l = self.n_layers as f64;
        let mut p = ParamCount {
            embedding: self.vocab as f64 * h + if self.position == Position::Learned { self.max_seq_len as f64 * h } else { 0.0 },
            lm_head: if self.tied_embeddings { 0.0 } else { self.vocab as f64 * h },
            attention: l * self.attention_params_per_layer(),
            norms: l * self.norm_params_per_layer()
                + match self.norm {
                    NormKind::RmsNorm => h,
                    NormKind::LayerNorm => 2.0 * h,
                },
            dense_ffn: self.n_dense_layers() as f64 * self.ffn_params(self.ffn_hidden),
            ..ParamCount::default()
        };
        if let Some(m) = &self.moe {
            let n = self.n_moe_layers() as f64;
            p.experts = n * m.n_experts as f64 * self.ffn_params(m.expert_ffn_hidden);
            p.shared_experts = n * m.n_shared_experts as f64 * self.ffn_params(m.shared_expert_ffn_hidden);
            p.router = n * m.n_experts as f64 * h;
        }
        p
    }

    /// Parameters one token passes through (routed experts counted top-k times, not all).
    pub fn active_params(&self) -> f64 {
        let p = self.params();
        match &self.moe {
            None => p.total(),
            Some(m) => p.total() - p.experts + p.experts * m.top_k as f64 / m.n_experts as f64,
        }
    }

    /// Matmul parameters a token passes through in one multi-token-prediction module: the
    /// projection, the layer's attention and (active) FFN, and the shared output head it runs
    /// again (its own loss), as [`Model::matmul_params_per_token`] counts them.
    pub fn mtp_matmul_params_per_token(&self) -> f64 {
        let h = self.hidden as f64;
        let ffn = match &self.moe {
            Some(m) if self.n_moe_layers() > 0 => {
                m.top_k as f64 * self.ffn_params(m.expert_ffn_hidden)
                    + m.n_shared_experts as f64 * self.ffn_params(m.shared_expert_ffn_hidden)
                    + m.n_experts as f64 * h
            }
            _ => self.ffn_params(self.ffn_hidden),
        };
        2.0 * h * h + self.attention_params_per_layer() + ffn + self.vocab as f64 * h
    }

    /// Non-embedding parameters a token passes through in matrix multiplies (the `N` of 6N):
    /// every linear layer including the LM head, excluding the embedding lookup and the norms.
    pub fn matmul_params_per_token(&self) -> f64 {
        let p = self.params();
        let experts_active = match &self.moe {
            None => 0.0,
            Some(m) => p.experts * m.top_k as f64 / m.n_experts as f64,
        };
        let lm_head = self.vocab as f64 * self.hidden as f64;
        p.attention + p.dense_ffn + experts_active + p.shared_experts + p.router + lm_head
    }

    /// Parameters of one multi-token-prediction module as Megatron-Core builds it
    /// (`megatron/core/transformer/multi_token_prediction.py`, DeepSeek-V3 Technical Report sec.
    /// 2.2): the RMSNorms of the previous depth's hidden state and of the next token's embedding
    /// (`hnorm`, `enorm`), the projection of their concatenation back to the hidden size
    /// (`eh_proj`, 2h x h, no bias), one transformer layer of the model's last layer's kind (MoE
    /// for DeepSeek-V3), and its final norm. The embedding and the output head are the main
    /// model's (shared), so they are not counted here. DeepSeek-V3: 11.7B, which with the copies of
    /// the embedding and head the Hub checkpoint stores (2 x 0.93B) is its stated 14B MTP module.
    pub fn mtp_params_per_layer(&self) -> f64 {
        let h = self.hidden as f64;
        let p = self.params();
        let layer = self.attention_params_per_layer()
            + self.norm_params_per_layer()
            + match &self.moe {
                Some(_) if self.n_moe_layers() > 0 => (p.experts + p.shared_experts + p.router) / self.n_moe_layers() as f64,
                _ => self.ffn_params(self.ffn_hidden),
            };
        2.0 * h + 2.0 * h * h + layer + h
    }

    /// Key/value (or MLA latent) bytes cached per token per layer, as elements.
    pub fn kv_elements_per_token_per_layer(&self) -> f64 {
        match &self.mla {
            Some(mla) => (mla.kv_lora_rank + mla.qk_rope_head_dim) as f64,
            None => 2.0 * (self.n_kv_heads * self.head_dim) as f64,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// GPT-3 175B (Brown et al. 2020, Table 2.1): 96 layers, d_model 12288, 96 heads, vocab 50257
    /// (GPT-2 BPE), context 2048, learned positions, LayerNorm, biases, tied embeddings.
    pub fn gpt3_175b() -> Model {
        Model {
            name: "gpt3-175b".into(),
            n_layers: 96,
            hidden: 12288,
            n_heads: 96,
            n_kv_heads: 96,
            head_dim: 128,
            ffn_hidden: 4 * 12288,
            ffn_kind: FfnKind::Plain,
            vocab: 50257,
            tied_embeddings: true,
            norm: NormKind::LayerNorm,
            position: Position::Learned,
            max_seq_len: 2048,
            linear_bias: true,
            qkv_bias: false,
            qk_norm: false,
            moe: None,
            mla: None,
            mtp_layers: 0,
            published_params: Some(175e9),
        }
    }

    #[test]
    fn gpt3_params_match_12lh2() {
        let m = gpt3_175b();
        let p = m.params().total();
        // 12 L h^2 (weights) + V h + s h + small terms: 174.6e9 (Narayanan et al. 2021 Table 2)
        assert!((p / 174.6e9 - 1.0).abs() < 0.002, "{p}");
    }

    #[test]
    fn moe_active_params_count_top_k_experts() {
        let mut m = gpt3_175b();
        m.n_layers = 2;
        m.moe = Some(Moe { n_experts: 8, top_k: 2, expert_ffn_hidden: 1000, n_shared_experts: 0, shared_expert_ffn_hidden: 0, first_dense_layers: 0 });
        let p = m.params();
        assert_eq!(p.dense_ffn, 0.0);
        let one_expert = 2.0 * 12288.0 * 1000.0 + 1000.0 + 12288.0;
        assert_eq!(p.experts, 2.0 * 8.0 * one_expert);
        assert!((m.active_params() - (p.total() - 0.75 * p.experts)).abs() < 1.0);
    }
}
