//! Issue 18: the top-k normalization variants of MoE routers (`moe.router_score`,
//! `moe.norm_topk_prob`, `moe.routed_scaling_factor`, `moe.expert_bias`): read from each family's
//! config.json as transformers 5.17.0's routers compute them, priced per kernel on the eager
//! stacks, one fused kernel on the others, and bad values refused with exit 2.

use std::path::{Path, PathBuf};
use std::process::Command;

use gpuplan::config::model::load_model;
use gpuplan::config::scenario::{build, ParallelWire, ScenarioWire, WorkloadWire};
use gpuplan::model::{LayerKind, Router, RouterScore};
use gpuplan::workload::{forward_ops, OpKind};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn fixture(name: &str) -> String {
    Path::new(ROOT).join("tests/data/hf").join(format!("{name}.config.json")).to_str().unwrap().to_string()
}

fn router_of(path: &str) -> Router {
    load_model(path).unwrap_or_else(|e| panic!("{e}")).moe.expect("an MoE model").router
}

/// A temporary copy of a file with `from` replaced by `to` (which must occur).
fn mutated(file: &str, from: &str, to: &str, tag: &str) -> PathBuf {
    let text = std::fs::read_to_string(file).unwrap();
    assert!(text.contains(from), "{file} has no `{from}`");
    // `gpuplan check` tells a model TOML by its folder.
    let sub = if file.ends_with(".toml") { "models" } else { "" };
    let dir = std::env::temp_dir().join(format!("gpuplan-it-router-{}-{tag}", std::process::id())).join(sub);
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(Path::new(file).file_name().unwrap());
    std::fs::write(&out, text.replacen(from, to, 1)).unwrap();
    out
}

#[test]
fn each_familys_router_variant_is_read_from_its_config_json() {
    let r = |score, norm, scale, bias, fp32| Router { score, norm_topk_prob: norm, routed_scaling_factor: scale, expert_bias: bias, weights_fp32: fp32 };
    // MixtralTopKRouter: softmax, top-2, always renormalized (no key).
    assert_eq!(router_of(&fixture("mistralai--Mixtral-8x7B-v0.1")), r(RouterScore::Softmax, true, 1.0, false, true));
    // Qwen3-30B-A3B's config.json sets norm_topk_prob true (Qwen3MoeConfig's default is false).
    let qwen = fixture("Qwen--Qwen3-30B-A3B");
    assert_eq!(router_of(&qwen), r(RouterScore::Softmax, true, 1.0, false, false));
    let qwen_default = mutated(&qwen, "\"norm_topk_prob\": true,", "", "qwen-default");
    assert_eq!(router_of(qwen_default.to_str().unwrap()), r(RouterScore::Softmax, false, 1.0, false, false));
    // DeepSeek-V3: scoring_func sigmoid, noaux_tc (the expert bias), norm_topk_prob, 2.5.
    assert_eq!(router_of(&fixture("deepseek-ai--DeepSeek-V3")), r(RouterScore::Sigmoid, true, 2.5, true, true));
    // GPT-OSS: softmax over the top-k logits = softmax, top-k, renormalized.
    assert_eq!(router_of(&fixture("transformers-5.24.0--GptOssConfig")), r(RouterScore::Softmax, true, 1.0, false, false));
    // The catalog files say the same (and Llama-4's sigmoid on its top-1, Nemotron-3 Nano's).
    let toml = |n: &str| router_of(Path::new(ROOT).join("models").join(format!("{n}.toml")).to_str().unwrap());
    assert_eq!(toml("deepseek-v3"), r(RouterScore::Sigmoid, true, 2.5, true, true));
    assert_eq!(toml("llama-4-maverick"), r(RouterScore::Sigmoid, false, 1.0, false, false));
    assert_eq!(toml("nemotron-3-nano-30b-a3b"), r(RouterScore::Sigmoid, true, 2.5, true, true));
    // Mixtral's router hands the experts fp32 weights, Qwen3-MoE's and GPT-OSS's bf16 ones.
    for (n, fp32) in [("mixtral-8x22b", true), ("qwen3-235b-a22b", false), ("gpt-oss-20b", false)] {
        assert_eq!(toml(n), r(RouterScore::Softmax, true, 1.0, false, fp32), "{n}");
    }
}

/// The MoE layer's router ops (after the router's linear) of `model` on one GPU: (name, kernels).
fn router_ops(model: &str, stack: &str) -> Vec<(&'static str, u32)> {
    let wire = ScenarioWire {
        model: Some(model.into()),
        system: Some("dgx-h100".into()),
        gpus: Some(1),
        parallelism: ParallelWire::default(),
        workload: WorkloadWire { mode: Some("train".into()), stack: Some(stack.into()), seq: Some(1024), global_batch: Some(1), ..Default::default() },
        ..Default::default()
    };
    let s = build(&wire, None).unwrap_or_else(|e| panic!("{e}"));
    let ops = forward_ops(&s.model, &s.parallel, &s.workload);
    ops.layer(LayerKind::Moe)
        .iter()
        .filter(|o| o.name.starts_with("router_"))
        .map(|o| match o.kind {
            OpKind::Memory { kernels, .. } => (o.name, kernels),
            _ => panic!("{} is not a memory op", o.name),
        })
        .collect()
}

#[test]
fn a_deepseek_v3_sigmoid_router_prices_its_kernels_on_eager_stacks_only() {
    let v3 = fixture("deepseek-ai--DeepSeek-V3");
    // transformers' DeepseekV3TopkRouter, eager: sigmoid + top-k, the bias add, the group-limited
    // choice (8 kernels), the sum and division, the 2.5 multiply.
    assert_eq!(
        router_ops(&v3, "hf-eager"),
        vec![("router_softmax_topk", 2), ("router_expert_bias", 1), ("router_group_limit", 8), ("router_topk_norm", 2), ("router_scale", 1)]
    );
    // The same shape with a plain softmax router (DeepSeek-V2's greedy, no groups, no norm, no
    // scaling): the score and the top-k only.
    let plain = mutated(&v3, "\"scoring_func\": \"sigmoid\"", "\"scoring_func\": \"softmax\"", "v3-softmax");
    let plain = mutated(plain.to_str().unwrap(), "\"topk_method\": \"noaux_tc\"", "\"topk_method\": \"greedy\"", "v3-softmax");
    let plain = mutated(plain.to_str().unwrap(), "\"norm_topk_prob\": true", "\"norm_topk_prob\": false", "v3-softmax");
    let plain = mutated(plain.to_str().unwrap(), "\"routed_scaling_factor\": 2.5", "\"routed_scaling_factor\": 1.0", "v3-softmax");
    let plain = mutated(plain.to_str().unwrap(), "\"n_group\": 8", "\"n_group\": null", "v3-softmax");
    let plain = mutated(plain.to_str().unwrap(), "\"topk_group\": 4", "\"topk_group\": null", "v3-softmax");
    let m = load_model(plain.to_str().unwrap()).unwrap();
    assert_eq!(m.moe.as_ref().unwrap().router, Router::SOFTMAX_TOPK);
    assert_eq!(router_ops(plain.to_str().unwrap(), "hf-eager"), vec![("router_softmax_topk", 2)]);
    // Fused stacks (Megatron, torch.compile) run any variant as one kernel.
    for stack in ["megatron", "hf-compile"] {
        assert_eq!(router_ops(&v3, stack), vec![("router_softmax_topk", 1)], "{stack}");
        assert_eq!(router_ops(plain.to_str().unwrap(), stack), vec![("router_softmax_topk", 1)], "{stack}");
    }
}

fn gpuplan_check(path: &Path) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuplan")).args(["check", path.to_str().unwrap()]).current_dir(ROOT).output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout))
}

#[test]
fn bad_router_values_exit_2_naming_file_key_and_value() {
    let v3 = fixture("deepseek-ai--DeepSeek-V3");
    for (from, to, key, value) in [
        ("\"routed_scaling_factor\": 2.5", "\"routed_scaling_factor\": 0", "routed_scaling_factor", "`0`"),
        ("\"routed_scaling_factor\": 2.5", "\"routed_scaling_factor\": -1.5", "routed_scaling_factor", "`-1.5`"),
        ("\"scoring_func\": \"sigmoid\"", "\"scoring_func\": \"tanh\"", "scoring_func", "tanh"),
        ("\"norm_topk_prob\": true", "\"norm_topk_prob\": \"yes\"", "norm_topk_prob", "yes"),
    ] {
        let bad = mutated(&v3, from, to, &format!("bad-{key}"));
        let (code, err) = gpuplan_check(&bad);
        assert_eq!(code, Some(2), "{to}: {err}");
        assert!(err.contains(&bad.display().to_string()) && err.contains(key) && err.contains(value) && err.contains("hint:"), "{to}: {err}");
    }
    let toml = Path::new(ROOT).join("models/deepseek-v3.toml");
    let toml = toml.to_str().unwrap();
    for (from, to, key, value) in [
        ("router_score = \"sigmoid\"", "router_score = \"tanh\"", "moe.router_score", "tanh"),
        ("routed_scaling_factor = 2.5", "routed_scaling_factor = 0.0", "moe.routed_scaling_factor", "`0`"),
        ("router_score = \"sigmoid\"", "router_score = \"softmax\"", "moe.expert_bias", "true"),
    ] {
        let bad = mutated(toml, from, to, &format!("bad-toml-{key}"));
        let (code, err) = gpuplan_check(&bad);
        assert_eq!(code, Some(2), "{to}: {err}");
        assert!(err.contains(&bad.display().to_string()) && err.contains(key) && err.contains(value) && err.contains("hint:"), "{to}: {err}");
    }
    // The routed weights' dtype is fp32 or bf16, nothing else.
    let qwen = Path::new(ROOT).join("models/qwen3-30b-a3b.toml");
    let bad = mutated(qwen.to_str().unwrap(), "routing_weights_dtype = \"bf16\"", "routing_weights_dtype = \"fp16\"", "bad-toml-weights-dtype");
    let (code, err) = gpuplan_check(&bad);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("moe.routing_weights_dtype") && err.contains("fp16") && err.contains("hint:"), "{err}");
}
