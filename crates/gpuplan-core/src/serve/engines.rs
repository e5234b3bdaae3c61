//! The serving engines' defaults (`--stack trtllm | vllm | sglang`): batch and token limits,
//! chunked prefill, KV block size, how the KV cache is sized, the scheduler, the CUDA graphs they
//! capture, and which of `serve`'s knobs each engine has. Every number names the engine version and
//! the setting it is (`source`); the engines could not be installed or their sources read on the
//! machine this was written on, so each is given as its documentation states it, from the author's
//! reading of those versions ("from memory" where it is so), to be re-checked against the source.
//!
//! Pure data: `config::deploy` lays the flags over these.

use crate::workload::Stack;

/// How an engine sizes its KV cache from the GPU's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvSizing {
    /// The cache takes what is left of `fraction` x HBM once weights and transients are placed
    /// (vLLM's `gpu_memory_utilization`, SGLang's `mem_fraction_static`).
    OfTotal,
    /// The cache takes `fraction` of the memory still free once the engine (weights, transients,
    /// runtime) is loaded (TensorRT-LLM's `kv_cache_free_gpu_mem_fraction`).
    OfFree,
}

/// Which continuous-batching policy a replica runs (`serve::scheduler`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// vLLM v1: running first, preemption by recompute when blocks run out, then waiting ones.
    VllmV1,
    /// TensorRT-LLM in-flight batching with the `GUARANTEED_NO_EVICT` capacity scheduler: a request
    /// is admitted only when the blocks for its prompt and all its output can be reserved; no
    /// preemption.
    TrtllmInflight,
}

/// An engine's defaults, each with its source.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EngineDefaults {
    pub stack: Stack,
    /// Most sequences per iteration.
    pub max_batch: u32,
    /// Most tokens per iteration.
    pub token_budget: u32,
    pub chunked_prefill: bool,
    /// Tokens per KV block.
    pub block_size: u32,
    /// The KV sizing fraction (see `kv_sizing`).
    pub kv_fraction: f64,
    pub kv_sizing: KvSizing,
    pub policy: Policy,
    /// Decode-only iterations of at most this many sequences replay a CUDA graph (the batch padded
    /// to 1, 2, 4 or a multiple of 8); larger ones run eagerly.
    pub cuda_graph_max_batch: u32,
    /// The engine's name for each knob (`serve`'s flag -> the engine's setting), `None` where it
    /// has none.
    pub knob_max_batch: &'static str,
    pub knob_token_budget: &'static str,
    pub knob_kv_fraction: &'static str,
    pub source: &'static str,
}

/// TensorRT-LLM, as the performance overview ran it (v0.17 TensorRT engines, v1.0 PyTorch backend).
pub const TRTLLM: EngineDefaults = EngineDefaults {
    stack: Stack::Trtllm,
    max_batch: 2048,
    token_budget: 8192,
    chunked_prefill: false,
    block_size: 32,
    kv_fraction: 0.9,
    kv_sizing: KvSizing::OfFree,
    policy: Policy::TrtllmInflight,
    cuda_graph_max_batch: 2048,
    knob_max_batch: "max_batch_size",
    knob_token_budget: "max_num_tokens",
    knob_kv_fraction: "kv_cache_free_gpu_mem_fraction",
    source: "TensorRT-LLM v0.17 / v1.0 (from memory of tensorrt_llm/llmapi/llm_args.py and builder.py, not re-read here): \
             max_batch_size 2048 and max_num_tokens 8192 (BuildConfig / BaseLlmArgs defaults); enable_chunked_prefill False; \
             tokens_per_block 32; KvCacheConfig.free_gpu_memory_fraction 0.9 of the memory free after the engine loads; \
             SchedulerConfig capacity_scheduler_policy GUARANTEED_NO_EVICT; CUDA graphs with padding (the perf-overview notes) \
             captured up to the batch limit",
};

/// vLLM v1 (v0.8-v0.10 `EngineArgs` defaults).
pub const VLLM: EngineDefaults = EngineDefaults {
    stack: Stack::Vllm,
    max_batch: 256,
    token_budget: 8192,
    chunked_prefill: true,
    block_size: 16,
    kv_fraction: 0.9,
    kv_sizing: KvSizing::OfTotal,
    policy: Policy::VllmV1,
    cuda_graph_max_batch: 256,
    knob_max_batch: "max_num_seqs",
    knob_token_budget: "max_num_batched_tokens",
    knob_kv_fraction: "gpu_memory_utilization",
    source: "vLLM v0.8-v0.10 EngineArgs / CacheConfig / SchedulerConfig defaults (from memory, not re-read here): max_num_seqs 256, \
             max_num_batched_tokens 8192 (V1 offline default), chunked prefill always on in V1, block_size 16 on CUDA, \
             gpu_memory_utilization 0.9 of total memory; CompilationConfig cudagraph capture sizes 1, 2, 4, multiples of 8 up to \
             max_capture_size 512, none above max_num_seqs (256 here)",
};

/// SGLang (v0.4.x `ServerArgs` defaults on an 80-141 GB GPU at TP 1).
pub const SGLANG: EngineDefaults = EngineDefaults {
    stack: Stack::Sglang,
    max_batch: 4096,
    token_budget: 8192,
    chunked_prefill: true,
    block_size: 1,
    kv_fraction: 0.88,
    kv_sizing: KvSizing::OfTotal,
    policy: Policy::VllmV1,
    cuda_graph_max_batch: 160,
    knob_max_batch: "max_running_requests",
    knob_token_budget: "chunked_prefill_size",
    knob_kv_fraction: "mem_fraction_static",
    source: "SGLang v0.4.x python/sglang/srt/server_args.py (from memory, not re-read here): chunked_prefill_size 8192, \
             mem_fraction_static 0.88 at TP 1, page_size 1, cuda_graph_max_bs 160, max_running_requests derived from the KV pool \
             (4096 here: the pool, not the limit, binds); its radix cache shares no prefix in the synthetic workloads scored here",
};

/// The defaults of an inference engine stack; `None` for the training stacks (whose serving
/// defaults are `SchedConfig::default()`).
pub fn defaults(stack: Stack) -> Option<EngineDefaults> {
    match stack {
        Stack::Trtllm => Some(TRTLLM),
        Stack::Vllm => Some(VLLM),
        Stack::Sglang => Some(SGLANG),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_engine_has_its_own_defaults_and_knob_names() {
        for s in [Stack::Trtllm, Stack::Vllm, Stack::Sglang] {
            let d = defaults(s).unwrap();
            assert_eq!(d.stack, s);
            assert!(d.cuda_graph_max_batch <= d.max_batch, "{s:?}: graphs captured past the batch limit");
            assert!(d.kv_fraction > 0.0 && d.kv_fraction <= 1.0);
        }
        assert_eq!(TRTLLM.kv_sizing, KvSizing::OfFree);
        assert_eq!(VLLM.knob_kv_fraction, "gpu_memory_utilization");
        assert!(defaults(Stack::Megatron).is_none());
    }
}
