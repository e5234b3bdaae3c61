//! Attention data parallelism around expert-parallel MoE (`--attention-dp`), the way TensorRT-LLM
//! (`enable_attention_dp`) and SGLang (`--enable-dp-attention`) serve DeepSeek-V3/R1 and Qwen3 MoE.
//!
//! No published DeepSeek-R1 or Qwen3-MoE serving row exists in the reference data
//! (../shared/reference/trtllm_inference_dev.csv has Mixtral 8x7B only, served in TP), so these
//! tests check the mechanism NVIDIA's TensorRT-LLM tech blogs on DeepSeek-R1 on B200 describe
//! (2025, cited from memory): the min-latency configuration keeps attention in TP, the
//! max-throughput one turns attention DP on with the experts in EP 8, because at large batch TP
//! duplicates MLA's single latent KV head on every rank (capacity) and all-reduces every layer,
//! while at batch 1 attention DP reads the whole attention weights on every GPU.

use std::process::Command;

use gpuplan::config::scenario::{build, ParallelWire, ScenarioWire, WorkloadWire};
use gpuplan::workload::{forward_ops, OpKind};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn run(args: &[&str]) -> (i32, serde_json::Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuplan")).args(args).current_dir(ROOT).output().unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out.status.code().unwrap_or(-1), v, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// DeepSeek-V3 FP8 decode at 2,048 cached tokens on one DGX B200 (or two), TensorRT-LLM.
fn decode(layout: &[&str], batch: u64) -> serde_json::Value {
    let b = batch.to_string();
    let mut args = vec!["predict", "--model", "deepseek-v3", "--system", "dgx-b200", "--stack", "trtllm", "--mode", "decode", "--precision", "fp8"];
    args.extend(["--kv-len", "2048", "--batch", &b, "--json"]);
    args.extend(layout);
    let (code, v, err) = run(&args);
    assert_eq!(code, 0, "{args:?}: {err}");
    v
}

/// GPU time of a step: its critical path less the host's exposed launch time (the engines replay
/// CUDA graphs in decode; `predict` prices their eager launches).
fn gpu_s(v: &serde_json::Value) -> f64 {
    v["breakdown"].as_object().unwrap().iter().filter(|(k, _)| k.as_str() != "cpu_launch_s").map(|(_, x)| x.as_f64().unwrap()).sum()
}

const TP8: &[&str] = &["--gpus", "8", "--tp", "8", "--sp", "false"];
const ADP8: &[&str] = &["--gpus", "8", "--tp", "1", "--dp", "8", "--ep", "8", "--attention-dp"];

#[test]
fn attention_dp_beats_tp_at_large_batch_and_loses_at_batch_one() {
    // Batch 1: one token routes to 8 of 256 experts, so both layouts read the same expert bytes;
    // attention DP reads every attention weight on every GPU (TP reads 1/8), and that outweighs
    // the all-reduces it saves.
    let (tp, adp) = (decode(TP8, 1), decode(ADP8, 1));
    assert!(adp["breakdown"]["memory_bound_s"].as_f64().unwrap() > 1.3 * tp["breakdown"]["memory_bound_s"].as_f64().unwrap(), "{adp} vs {tp}");
    assert!(gpu_s(&adp) > 1.05 * gpu_s(&tp), "batch 1: attention DP {} s vs TP {} s", gpu_s(&adp), gpu_s(&tp));
    let weights = |v: &serde_json::Value| v["memory"]["components"]["weights_bytes"].as_f64().unwrap() / (1u64 << 30) as f64;
    assert!(weights(&adp) > weights(&tp) + 10.0, "{} vs {} GiB", weights(&adp), weights(&tp));
    // Batch 1024: TP all-reduces 1,024 rows per layer and reads the whole batch's cache on every
    // rank; attention DP gives each rank 128 sequences and moves only routed tokens.
    let (tp, adp) = (decode(TP8, 1024), decode(ADP8, 1024));
    let ratio = adp["tokens_per_s"].as_f64().unwrap() / tp["tokens_per_s"].as_f64().unwrap();
    assert!(ratio > 2.0, "batch 1024: attention DP / TP tokens/s = {ratio}");
    // The instance's batch, split over the ranks.
    assert_eq!(adp["tokens_per_step"].as_f64().unwrap(), 1024.0);
    assert_eq!(adp["scenario"]["attention_dp_batch"], 1024);
    assert_eq!(adp["scenario"]["batch"], 128);
    assert!(tp["scenario"].get("attention_dp_batch").is_none());
}

#[test]
fn the_busiest_rank_sets_the_step_and_the_experts_see_every_rank() {
    // 1,001 sequences over 8 ranks: the busiest holds 126, the step waits for it, and the MoE
    // layers see 1,001 tokens: no faster than 1,008 (8 x 126), no slower than 1,000 (8 x 125) +1.
    let uneven = decode(ADP8, 1001);
    assert_eq!(uneven["scenario"]["batch"], 126);
    assert_eq!(uneven["tokens_per_step"].as_f64().unwrap(), 1001.0);
    let (lo, hi) = (decode(ADP8, 1000), decode(ADP8, 1008));
    let t = |v: &serde_json::Value| v["step_time_s"].as_f64().unwrap();
    assert!(t(&uneven) >= t(&lo) && t(&uneven) <= t(&hi), "{} {} {}", t(&lo), t(&uneven), t(&hi));
}

#[test]
fn expert_all_to_all_across_nodes_costs_more_than_inside_one() {
    // 128 sequences per rank either way: EP 8 inside one NVLink domain, or EP 16 over two nodes,
    // where every dispatch and combine crosses the network at its per-step latency.
    let inside = decode(ADP8, 1024);
    let across = decode(&["--gpus", "16", "--tp", "1", "--dp", "16", "--ep", "16", "--attention-dp"], 2048);
    let ep = |v: &serde_json::Value| v["breakdown"]["ep_comm_s"].as_f64().unwrap();
    assert!(ep(&across) > 2.0 * ep(&inside), "EP 16 over 2 nodes {} s vs EP 8 {} s", ep(&across), ep(&inside));
    assert!(across["tokens_per_s_per_gpu"].as_f64().unwrap() < inside["tokens_per_s_per_gpu"].as_f64().unwrap());
}

/// The engines' MoE kernels run only the experts a token was routed to: E (1 - (1 - k/E)^T).
#[test]
fn engine_decode_reads_only_the_routed_experts() {
    let experts = |stack: &str, tokens: i64| -> u64 {
        let w = ScenarioWire {
            model: Some("deepseek-v3".into()),
            system: Some("dgx-b200".into()),
            gpus: Some(8),
            parallelism: ParallelWire { tp: Some(8), ..Default::default() },
            workload: WorkloadWire { mode: Some("decode".into()), batch: Some(tokens), kv_len: Some(128), stack: Some(stack.into()), ..Default::default() },
            ..Default::default()
        };
        let s = build(&w, None).unwrap();
        let ops = forward_ops(&s.model, &s.parallel, &s.workload);
        ops.moe_layer
            .iter()
            .find_map(|o| match (o.name, &o.kind) {
                ("expert_up", OpKind::Gemm { count, .. }) => Some(*count),
                _ => None,
            })
            .unwrap()
    };
    // One token picks 8 experts (top-8 of 256); expert TP 8 holds every expert's slice.
    assert_eq!(experts("trtllm", 1), 8);
    // 64 tokens: 256 (1 - (1 - 8/256)^64) = 222.4 active.
    assert_eq!(experts("vllm", 64), 223);
    assert_eq!(experts("sglang", 1024), 256);
    // Megatron (the training and baseline stack) keeps every local expert's GEMM.
    assert_eq!(experts("megatron", 1), 256);
}

#[test]
fn serving_attention_dp_holds_a_kv_cache_per_rank_and_wins_at_high_concurrency() {
    let serve = |layout: &[&str], concurrency: &str| {
        let mut args = vec!["serve", "--model", "deepseek-v3", "--system", "dgx-b200", "--stack", "trtllm", "--precision", "fp8", "--gpus", "8"];
        args.extend(layout);
        args.extend(["--offline", "512", "--max-concurrency", concurrency, "--input-len", "1024", "--output-len", "64", "--json"]);
        let (code, v, err) = run(&args);
        assert_eq!(code, 0, "{args:?}: {err}");
        v
    };
    let adp = serve(&["--tp", "1", "--dp", "8", "--ep", "8", "--attention-dp"], "512");
    let tp = serve(&["--tp", "8"], "512");
    let pool = |v: &serde_json::Value| v["deployment"]["pools"][0].clone();
    // MLA's one latent KV head cannot be split over TP: every TP rank holds the whole batch's
    // cache, while each attention-DP rank holds its own requests'.
    let tokens = |v: &serde_json::Value| pool(v)["kv_tokens_per_replica"].as_f64().unwrap();
    assert!(tokens(&adp) > 6.0 * tokens(&tp), "{} vs {}", tokens(&adp), tokens(&tp));
    let per_gpu = pool(&adp)["kv_cache_bytes_per_gpu"].as_f64().unwrap() / pool(&adp)["kv_bytes_per_token_per_gpu"].as_f64().unwrap();
    assert!((tokens(&adp) / (8.0 * per_gpu) - 1.0).abs() < 0.01, "{} vs 8 x {per_gpu}", tokens(&adp));
    assert_eq!(pool(&adp)["attention_dp"]["ranks"], 8);
    let out = |v: &serde_json::Value| v["throughput"]["output_tokens_per_s"].as_f64().unwrap();
    assert!(out(&adp) > 1.3 * out(&tp), "512 in flight: attention DP {} vs TP {} tokens/s", out(&adp), out(&tp));
}

#[test]
fn attention_dp_refusals_name_the_key_value_and_a_hint() {
    let base = ["predict", "--system", "dgx-b200", "--mode", "decode", "--kv-len", "128", "--attention-dp"];
    for (extra, says) in [
        (&["--model", "llama-3-8b", "--stack", "trtllm", "--gpus", "8"][..], "has no experts"),
        (&["--model", "deepseek-v3", "--stack", "megatron", "--gpus", "8", "--ep", "8"][..], "serving engines"),
        (&["--model", "deepseek-v3", "--stack", "trtllm", "--gpus", "6", "--ep", "6"][..], "does not divide the model's 256 experts"),
        (&["--model", "deepseek-v3", "--stack", "trtllm", "--gpus", "8", "--ep", "4"][..], "ep x etp = 4 x 1 is not tp x dp = 1 x 8"),
        (&["--model", "deepseek-v3", "--stack", "trtllm", "--gpus", "1"][..], "dp is 1"),
    ] {
        let args = [&base[..], extra].concat();
        let (code, _, err) = run(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains("workload.attention_dp") && err.contains(says) && err.contains("hint:") && err.contains("--"), "{args:?}: {err}");
    }
    let serve = ["serve", "--model", "deepseek-v3", "--system", "dgx-b200", "--stack", "trtllm", "--offline", "8", "--input-len", "64", "--output-len", "8"];
    for (extra, says) in [
        (&["--tp", "1", "--dp", "8", "--ep", "8"][..], "`dp` = 8 applies to attention DP"),
        (&["--tp", "1", "--ep", "8", "--attention-dp"][..], "`attention_dp` needs `dp`"),
        (&["--tp", "1", "--dp", "8", "--ep", "8", "--attention-dp", "--gpus", "12"][..], "`gpus` = 12 is not a multiple of tp*dp = 8"),
    ] {
        let args = [&serve[..], extra].concat();
        let (code, _, err) = run(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(says) && err.contains("hint:"), "{args:?}: {err}");
    }
}

/// `plan --mode serve --qps`'s space: attention-DP instances for an MoE model under an engine
/// (inside one NVLink domain, dividing the GPUs and the experts), none for a dense model or for
/// Megatron; every candidate's deployment shards the experts (EP, or expert TP), never replicates.
#[test]
fn the_serving_planner_enumerates_attention_dp_for_moe_under_an_engine() {
    use gpuplan::serve::plan::{candidates, deployment_of, ServeSpace};
    use gpuplan::serve::{Routing, SchedConfig};
    let base = |model: &str, stack: &str| {
        let w = ScenarioWire {
            model: Some(model.into()),
            system: Some("dgx-b200".into()),
            gpus: Some(1),
            workload: WorkloadWire { mode: Some("decode".into()), kv_len: Some(1), stack: Some(stack.into()), ..Default::default() },
            ..Default::default()
        };
        build(&w, None).unwrap()
    };
    let space = ServeSpace { n_gpus: vec![8, 16], tp: vec![1, 2, 8], max_batch: vec![64], sched: SchedConfig::default(), routing: Routing::LeastLoaded };
    let moe = base("deepseek-v3", "trtllm");
    let c = candidates(&moe, &space);
    let adp: Vec<_> = c.iter().filter(|c| c.attention_dp > 1).map(|c| (c.n_gpus, c.tp, c.attention_dp)).collect();
    // tp 1: dp 2, 4, 8; tp 2: dp 2, 4 (tp x dp <= 8, the B200 NVLink domain); for 8 and 16 GPUs.
    for n in [8, 16] {
        for (tp, dp) in [(1, 2), (1, 4), (1, 8), (2, 2), (2, 4)] {
            assert!(adp.contains(&(n, tp, dp)), "{adp:?}");
        }
    }
    assert!(adp.iter().all(|&(_, tp, dp)| tp * dp <= 8));
    for c in &c {
        let d = deployment_of(&moe, c, &space);
        let s = &d.pools[0].scenario;
        assert_eq!(s.parallel.ep as u64 * s.parallel.etp as u64, d.pools[0].gpus_per_replica(), "{c:?}");
        assert_eq!(d.n_gpus(), c.n_gpus);
    }
    assert!(candidates(&base("llama-3-8b", "trtllm"), &space).iter().all(|c| c.attention_dp == 1));
    assert!(candidates(&base("deepseek-v3", "megatron"), &space).iter().all(|c| c.attention_dp == 1));
}
