//! torchtitan's per-op selective activation checkpointing (`--recompute selective-op`,
//! `workload::Recompute::SelectiveOp`): what a Llama block keeps, what its backward re-runs, and
//! the inputs it refuses.

use gpuplan::config::scenario::{build, ParallelWire, ScenarioWire, WorkloadWire};
use gpuplan::model::LayerKind;
use gpuplan::workload::{forward_ops, recompute_of, selective_op_saved, OpKind};
use std::process::Command;

fn scenario(stack: &str, recompute: &str, tp: i64, precision: &str) -> gpuplan::scenario::Scenario {
    let w = ScenarioWire {
        model: Some("llama-3-8b".into()),
        system: Some("dgx-h100".into()),
        gpus: Some(8),
        parallelism: ParallelWire { tp: Some(tp), dp: Some(8 / tp), zero: Some(3), ..Default::default() },
        workload: WorkloadWire {
            seq: Some(8192),
            micro_batch: Some(1),
            global_batch: Some(8 / tp),
            recompute: Some(recompute.into()),
            stack: Some(stack.into()),
            precision: Some(precision.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    build(&w, None).unwrap()
}

fn names(ops: &[gpuplan::workload::Op]) -> Vec<&'static str> {
    ops.iter().map(|o| o.name).collect()
}

/// torchtitan 0.2.0's `_apply_op_sac` counts each block's `aten.mm`s (wq, wk, wv, wo, w1, w3, w2)
/// and saves the odd ones: q, v, the FFN's first linear and the down projection; flash attention
/// and TP reduce-scatters are saved; everything else runs again in the backward.
#[test]
fn the_policy_saves_every_other_linear_attention_and_reduce_scatters() {
    let s = scenario("torch-eager", "selective-op", 1, "bf16");
    let layer = forward_ops(&s.model, &s.parallel, &s.workload).layer(LayerKind::Dense).to_vec();
    let saved = selective_op_saved(&layer, &s.workload);
    let saved_gemms: Vec<&str> = layer.iter().zip(&saved).filter(|(o, s)| **s && matches!(o.kind, OpKind::Gemm { .. })).map(|(o, _)| o.name).collect();
    assert_eq!(saved_gemms, ["q_proj", "v_proj", "up_proj", "down_proj"], "{:?}", names(&layer));
    let again = recompute_of(&layer, &s.workload);
    let again_gemms: Vec<&str> = again.iter().filter(|o| matches!(o.kind, OpKind::Gemm { .. })).map(|o| o.name).collect();
    assert_eq!(again_gemms, ["k_proj", "out_proj", "gate_proj"]);
    assert!(!again.iter().any(|o| matches!(o.kind, OpKind::Attention { .. })), "attention is saved: {:?}", names(&again));
    assert!(again.iter().any(|o| o.name == "input_norm") && again.iter().any(|o| o.name == "rope"), "{:?}", names(&again));

    // Compiled, the partitioner drops what the backward never reads: the last linear's output.
    let s = scenario("torch-compile", "selective-op", 1, "bf16");
    let layer = forward_ops(&s.model, &s.parallel, &s.workload).layer(LayerKind::Dense).to_vec();
    let again_gemms: Vec<&str> = recompute_of(&layer, &s.workload).iter().filter(|o| matches!(o.kind, OpKind::Gemm { .. })).map(|o| o.name).collect();
    assert_eq!(again_gemms, ["k_proj", "out_proj", "gate_proj"], "the linears stay apart under selective-op: {:?}", names(&layer));

    // Under TP with SP: the reduce-scatters are saved (so, compiled, the output projection feeding
    // one is not re-run); the sequence all-gathers before the column-parallel linears run again.
    let s = scenario("torch-compile", "selective-op", 2, "bf16");
    let layer = forward_ops(&s.model, &s.parallel, &s.workload).layer(LayerKind::Dense).to_vec();
    let again = recompute_of(&layer, &s.workload);
    assert_eq!(again.iter().filter(|o| o.name == "tp_all_gather").count(), 2, "{:?}", names(&again));
    assert!(!again.iter().any(|o| o.name == "tp_reduce" || o.name == "out_proj"), "{:?}", names(&again));

    // Only the decoder blocks are checkpointed: the embedding and the head re-run nothing.
    let ops = forward_ops(&s.model, &s.parallel, &s.workload);
    assert!(recompute_of(&ops.embedding, &s.workload).is_empty() && recompute_of(&ops.head, &s.workload).is_empty());

    // torchao float8 linears reach the policy as `aten.mm` too: the same ones are saved.
    let s = scenario("torch-compile", "selective-op", 1, "fp8");
    let layer = forward_ops(&s.model, &s.parallel, &s.workload).layer(LayerKind::Dense).to_vec();
    let saved = selective_op_saved(&layer, &s.workload);
    assert_eq!(layer.iter().zip(&saved).filter(|(o, s)| **s && matches!(o.kind, OpKind::Gemm { .. })).count(), 4);
}

/// Llama 3 8B (hidden 4096, 32 heads of 128, 8 KV heads, FFN 14336) at TP 1 keeps per token and
/// layer: its input, q, v, the gate and the down projection's output (bf16: 2 x (4096 + 4096 +
/// 1024 + 14336 + 4096) B), flash attention's output (2 x 4096) and log-sum-exp (4 x 32): 63,616
/// B eager; compiled, the down projection's output is not kept: 55,424 B.
#[test]
fn a_layer_keeps_its_input_and_the_saved_outputs() {
    let tokens = 8192.0;
    for (stack, per_token) in [("torch-eager", 63_616.0), ("torch-compile", 55_424.0)] {
        let s = scenario(stack, "selective-op", 1, "bf16");
        let bytes = gpuplan::memory::kind_activation_bytes(&s.model, &s.parallel, &s.workload, LayerKind::Dense);
        assert_eq!(bytes, per_token * tokens, "{stack}");
    }
    // Between no recompute and full recompute, in memory and in time.
    let p = |rc: &str| gpuplan::analytic::predict(&scenario("torch-compile", rc, 1, "bf16")).unwrap();
    let (none, op, full, sel) = (p("none"), p("selective-op"), p("full"), p("selective"));
    assert!(none.memory.activations > op.memory.activations && op.memory.activations > full.memory.activations);
    assert!(sel.step_time < op.step_time && op.step_time < full.step_time, "{:?} {:?} {:?}", sel.step_time, op.step_time, full.step_time);
}

fn gpuplan(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuplan")).args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().expect("run gpuplan");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn selective_op_outside_dense_torch_training_is_refused() {
    let base = ["predict", "--model", "llama-3-8b", "--system", "dgx-h100", "--gpus", "8", "--seq", "4096", "--micro-batch", "1", "--global-batch", "8"];
    let run = |more: &[&str]| gpuplan(&[&base[..], more].concat());
    let (code, err) = run(&["--recompute", "selective-op", "--stack", "megatron"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("workload.recompute") && err.contains("megatron") && err.contains("hint"), "{err}");
    let (code, err) = gpuplan(&[
        "predict",
        "--model",
        "mixtral-8x7b",
        "--system",
        "dgx-h100",
        "--gpus",
        "8",
        "--seq",
        "4096",
        "--micro-batch",
        "1",
        "--global-batch",
        "8",
        "--recompute",
        "selective-op",
        "--stack",
        "torch-compile",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("dense transformer"), "{err}");
    let (code, err) = run(&["--recompute", "per-op"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("selective-op"), "the hint lists it: {err}");
    let (code, err) = run(&["--recompute", "selective-op", "--stack", "torch-compile", "--zero", "3"]);
    assert_eq!(code, 0, "{err}");
}

/// torchtitan's layer checkpointing (`--recompute layer:N`, `selective_ac_option = "N"`): every
/// N-th block of a rank is checkpointed whole, the others keep everything. Memory and time lie
/// between none and full; both engines agree; at N = 1 it is full recompute of the blocks only
/// (gpuplan's `full` also re-runs the head).
#[test]
fn layer_checkpointing_checkpoints_every_nth_block() {
    let p = |rc: &str| gpuplan::analytic::predict(&scenario("torch-compile", rc, 1, "bf16")).unwrap();
    let (none, two, one, full) = (p("none"), p("layer:2"), p("layer:1"), p("full"));
    let s = scenario("torch-compile", "layer:2", 1, "bf16");
    let layer = gpuplan::memory::kind_activation_bytes(&s.model, &s.parallel, &s.workload, LayerKind::Dense);
    let input = 2.0 * 8192.0 * 4096.0;
    // 32 layers: 16 keep everything, 16 their input; one checkpointed layer is rebuilt at a time
    // in the backward.
    let saved = none.memory.activations.value() - two.memory.activations.value();
    let expect = 16.0 * (layer - input) - layer;
    assert!((saved - expect).abs() < 1e-3 * expect, "{saved} vs {expect}");
    assert_eq!(one.memory.activations, full.memory.activations);
    assert!(none.step_time < two.step_time && two.step_time < one.step_time && one.step_time < full.step_time);
    // The DES re-runs the same blocks: its step grows by what the closed form's does (the two
    // engines' FSDP overlap differs, so their steps are compared as increments over none).
    let des = |rc: &str| gpuplan::sim::simulate(&scenario("torch-compile", rc, 1, "bf16"), &Default::default()).unwrap().prediction.step_time.value();
    let (des_more, more) = (des("layer:2") - des("none"), two.step_time.value() - none.step_time.value());
    assert!((des_more / more - 1.0).abs() < 0.05, "DES +{des_more} s, analytic +{more} s");
    // Counted per pipeline rank, chunk by chunk: 32 layers over pp 2 x vp 2 chunks of 8 give each
    // rank 16 layers, 8 of them checkpointed.
    let pc = gpuplan::parallelism::ParallelConfig { pp: 2, vp: 2, ..s.parallel.clone() };
    let picked = s.workload.recompute.checkpointed_kind_counts(&s.model, &pc, 1);
    assert_eq!(picked[LayerKind::Dense.index()], 8);
    let rc = gpuplan::workload::Recompute::parse("layer:3").unwrap();
    assert!(!rc.checkpoints(0) && !rc.checkpoints(1) && rc.checkpoints(2) && rc.checkpoints(5));
    for bad in ["layer:0", "layer:", "layer:-1", "layer:two"] {
        assert_eq!(gpuplan::workload::Recompute::parse(bad), None, "{bad}");
    }
}

/// `predict` of Llama 3 8B under FSDP on one DGX H100 (seq 4096, one micro-batch per rank).
const PREDICT_8B_FSDP: [&str; 15] =
    ["predict", "--model", "llama-3-8b", "--system", "dgx-h100", "--gpus", "8", "--seq", "4096", "--micro-batch", "1", "--global-batch", "8", "--zero", "3"];

#[test]
fn layer_checkpointing_outside_torch_training_and_bad_counts_are_refused() {
    let run = |more: &[&str]| gpuplan(&[&PREDICT_8B_FSDP[..], more].concat());
    let (code, err) = run(&["--recompute", "layer:2", "--stack", "megatron"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("workload.recompute") && err.contains("layer:2") && err.contains("hint"), "{err}");
    let (code, err) = run(&["--recompute", "layer:0", "--stack", "torch-compile"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("at least 1") && err.contains("hint"), "{err}");
    let (code, err) = run(&["--recompute", "layer:2", "--stack", "torch-compile"]);
    assert_eq!(code, 0, "{err}");
}

/// The loss left eager beside compiled blocks (`--compile-loss false`, torchtitan's December 2024
/// train.py): eager's 14 B a logit instead of 8, and eager's loss kernels.
#[test]
fn an_eager_loss_beside_compiled_blocks_keeps_eager_logits() {
    let build = |compile_loss: Option<bool>| {
        let w = ScenarioWire {
            model: Some("llama-3-8b".into()),
            system: Some("dgx-h100".into()),
            gpus: Some(8),
            parallelism: ParallelWire { dp: Some(8), zero: Some(3), ..Default::default() },
            workload: WorkloadWire {
                seq: Some(8192),
                micro_batch: Some(1),
                global_batch: Some(8),
                recompute: Some("full".into()),
                stack: Some("torch-compile".into()),
                compile_loss,
                ..Default::default()
            },
            ..Default::default()
        };
        gpuplan::analytic::predict(&build(&w, None).unwrap()).unwrap()
    };
    let (compiled, eager) = (build(None), build(Some(false)));
    let ratio = eager.memory.logits.value() / compiled.memory.logits.value();
    // Each holds 4 B a token and hidden unit beside the logits; the logits part goes 8 -> 14.
    assert!(ratio > 1.6 && ratio < 14.0 / 8.0, "{ratio}");
    assert!(eager.step_time > compiled.step_time);
    let (code, err) = gpuplan(&[&PREDICT_8B_FSDP[..], &["--stack", "torch-eager", "--compile-loss", "false"]].concat());
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("workload.compile_loss") && err.contains("hint"), "{err}");
}
