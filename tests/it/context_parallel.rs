//! Context parallelism as Megatron-Core with Transformer Engine runs it (issue 17 item 4):
//! long-sequence Llama-3 8B training, checked against hand calculations written out here.

use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// `gpuplan predict --json` of Llama-3 8B on DGX H100 at TP 4 over `gpus` GPUs, one micro-batch.
fn predict(gpus: u32, cp: u32, seq: u64, extra: &[&str]) -> (i32, serde_json::Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuplan"))
        .current_dir(ROOT)
        .args(["predict", "--model", "llama-3-8b", "--system", "dgx-h100", "--tp", "4", "--zero", "1", "--global-batch", "1", "--json"])
        .args(["--gpus", &gpus.to_string(), "--cp", &cp.to_string(), "--seq", &seq.to_string()])
        .args(extra)
        .output()
        .expect("run gpuplan predict");
    let v = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out.status.code().unwrap_or(-1), v, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Llama-3 8B (models/llama-3-8b.toml): 32 layers, 32 query heads, 8 key/value heads, head dim
/// 128; 7.50e9 matmul parameters a token passes through (32 x 218.1M per layer + the 525M LM
/// head).
const LAYERS: f64 = 32.0;
const HEADS: f64 = 32.0;
const KV_HEADS: f64 = 8.0;
const HEAD_DIM: f64 = 128.0;
const MATMUL_PARAMS: f64 = 7.50e9;

#[test]
fn a_million_tokens_at_cp_32_runs_at_the_hand_calculated_rate() {
    let (tp, cp, seq) = (4.0, 32.0, 1_048_576f64);
    let (code, v, err) = predict(128, 32, 1_048_576, &[]);
    assert_eq!(code, 0, "{err}");
    // By hand, one rank, one micro-batch. Attention: the load-balanced split gives each rank
    // seq^2 / (2 cp) of (query, key) pairs per head, 4 d FLOPs each forward, on heads / tp heads;
    // at cuDNN's measured 608.4 TFLOP/s forward (0.615 of 989.4, calibration/systems/h100-sxm.toml)
    // and 0.8795 of that backward at these lengths (2.5x the forward FLOPs;
    // calibration/runs/raw/attention-long-h100-2026-11-24/).
    let fwd_flops = 4.0 * HEAD_DIM * (HEADS / tp) * seq * seq / (2.0 * cp);
    let fwd_rate = 0.615 * 989.4e12;
    let attention = LAYERS * (fwd_flops / fwd_rate + 2.5 * fwd_flops / (0.8795 * fwd_rate));
    // The GEMMs: 6 x params x tokens on this rank / tp, at 70% of the bf16 peak.
    let gemms = 6.0 * MATMUL_PARAMS * (seq / cp) / tp / (0.70 * 989.4e12);
    let hand = seq / (attention + gemms) / 128.0;
    let got = v["tokens_per_s_per_gpu"].as_f64().unwrap();
    // Within -7% (the memory-bound kernels, TP collectives and the optimizer the hand sum leaves
    // out) and +3% of the hand figure (555 tokens/s/GPU).
    assert!((0.93 * hand..1.03 * hand).contains(&got), "{got} tokens/s/GPU vs {hand:.1} by hand");
    // Attention is most of the step: compute-bound, MFU above HFU (the convention counts the
    // masked half that the kernels skip).
    assert_eq!(v["bottleneck"], "compute");
    assert!(v["mfu"].as_f64().unwrap() > v["hfu"].as_f64().unwrap());
}

#[test]
fn ring_attention_exposes_one_key_value_gradient_hop_per_layer() {
    // One key/value gradient block: the 2c = seq / cp tokens of a rank, K and V, on kv_heads / tp
    // heads, bf16: 33.55 MB at 1M tokens, CP 32, TP 4. It crosses a node boundary at the 400 Gbit/s
    // (50 GB/s) of one ConnectX-7 (calibration/systems/dgx-h100.toml): 0.67 ms, once per layer in
    // backward; the forward's blocks travel beside the attention blocks.
    let (tp, cp, seq) = (4.0, 32.0, 1_048_576f64);
    let block = (seq / cp) * (KV_HEADS / tp) * HEAD_DIM * 2.0 * 2.0;
    let one_hop_per_layer = LAYERS * block / 50e9;
    let cp_comm = |comm: &str| {
        let (code, v, err) = predict(128, 32, 1_048_576, &["--cp-comm", comm]);
        assert_eq!(code, 0, "{err}");
        v["breakdown"]["cp_comm_s"].as_f64().unwrap()
    };
    let ring = cp_comm("p2p");
    assert!((0.25 * one_hop_per_layer..1.5 * one_hop_per_layer).contains(&ring), "{ring} s vs one hop per layer {one_hop_per_layer} s");
    // TE's all_gather variant gathers every block before attention (and again in backward, with a
    // reduce-scatter of the gradients after it), exposed: tens of times more.
    let gathered = cp_comm("all_gather");
    assert!(gathered > 20.0 * ring, "all_gather {gathered} s vs p2p {ring} s");
}

#[test]
fn bad_context_parallel_input_exits_2_naming_the_flag() {
    let (code, _, err) = predict(128, 32, 1_048_576, &["--cp-comm", "ring"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--cp-comm") && err.contains("p2p, all_gather, a2a"), "{err}");
    // seq must cut into 2 cp chunks.
    let (code, _, err) = predict(128, 32, 1_048_608, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("`seq` = 1048608") && err.contains("2*cp = 64") && err.contains("hint:"), "{err}");
    // a2a shards heads over the CP ranks: 2 TP-local key/value heads do not split 32 ways.
    let (code, _, err) = predict(128, 32, 1_048_576, &["--cp-comm", "a2a"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cp_comm") && err.contains("hint: use `--cp-comm p2p`"), "{err}");
    // Megatron's flag spelling is checked too.
    let (code, _, err) = predict(16, 4, 65_536, &["--from-megatron-args", "--cp-comm-type bogus"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--cp-comm-type") && err.contains("bogus"), "{err}");
}
