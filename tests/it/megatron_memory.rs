//! What a Megatron training rank holds (`workload.megatron`: `--grad-reduce-dtype`,
//! `--optimizer-state-dtype`, `--fp8-param-gather`, `--recompute-modules`, `--cpu-offload-layers`,
//! `--cross-entropy-fusion`): each mechanism's bytes, the time selective recompute adds to the
//! backward, the bad input each flag refuses (exit 2), and the published rows' memory plans.

use std::process::Command;

use gpuplan::config::scenario::{build, ParallelWire, ScenarioWire, WorkloadWire};
use gpuplan::memory;
use gpuplan::model::LayerKind;
use gpuplan::scenario::Scenario;
use gpuplan::workload::{forward_ops, recompute_of, OpKind, Pass, RecomputeModule};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn scenario(model: &str, system: &str, gpus: i64, par: ParallelWire, w: WorkloadWire) -> Scenario {
    let wire = ScenarioWire {
        model: Some(model.into()),
        system: Some(system.into()),
        gpus: Some(gpus),
        parallelism: par,
        workload: WorkloadWire { mode: Some("train".into()), stack: Some("megatron".into()), ..w },
        ..Default::default()
    };
    build(&wire, None).unwrap_or_else(|e| panic!("{e}"))
}

/// Llama-3 70B on 64 GB200s, TP 1, PP 4, VP 5, micro-batch 1, sequence 8192, distributed optimizer.
fn llama(w: WorkloadWire) -> Scenario {
    let par = ParallelWire { tp: Some(1), pp: Some(4), vp: Some(5), zero: Some(1), ..Default::default() };
    scenario("llama-3-70b", "gb200-nvl72", 64, par, WorkloadWire { seq: Some(8192), global_batch: Some(256), ..w })
}

fn plan(s: &Scenario) -> memory::MemoryPlan {
    memory::plan(&s.model, &s.parallel, &s.workload, gpuplan::units::Bytes::gib(1e6))
}

fn fp8(recipe: &str) -> WorkloadWire {
    WorkloadWire { precision: Some("fp8".into()), fp8_recipe: Some(recipe.into()), ..Default::default() }
}

#[test]
fn fp8_param_gather_keeps_the_layers_weights_quantized_with_no_bf16_copy() {
    for (recipe, bytes) in [("tensorwise", 1.0), ("mxfp8", 2.0 * (1.0 + 1.0 / 32.0))] {
        let plain = llama(fp8(recipe));
        let gathered = llama(WorkloadWire { fp8_param_gather: Some(true), ..fp8(recipe) });
        let (a, b) = (plan(&plain), plan(&gathered));
        assert_eq!(a.stage, b.stage);
        let (dense, experts) = memory::params_on_rank(&plain.model, &plain.parallel, a.stage, 0);
        let bf16 = memory::embedding_and_head_on_rank(&plain.model, &plain.parallel, a.stage);
        assert!(bf16 > 0.0, "the peak stage holds the embedding or the head");
        // bf16 weights: 2 B each; gathered: the layers' weights at the recipe's bytes, the
        // embedding / LM head still bf16.
        assert!((a.weights.value() - 2.0 * (dense + experts)).abs() < 1.0);
        assert!((b.weights.value() - ((dense + experts - bf16) * bytes + 2.0 * bf16)).abs() < 1.0, "{recipe}: {:?}", b.weights);
        assert_eq!((a.gradients, a.optimizer), (b.gradients, b.optimizer));
    }
    // NVFP4: a row-wise and a column-wise copy of 0.5 B plus an E4M3 scale per 16.
    let w = WorkloadWire { precision: Some("fp4".into()), fp8_param_gather: Some(true), ..Default::default() };
    assert_eq!(memory::quantized_param_bytes(&llama(w).workload), Some(1.125));
}

#[test]
fn grad_and_adam_state_dtypes_set_the_per_parameter_bytes() {
    let base = llama(fp8("tensorwise"));
    let lean = llama(WorkloadWire { grad_reduce_dtype: Some("bf16".into()), optimizer_state_dtype: Some("bf16".into()), ..fp8("tensorwise") });
    let (a, b) = (plan(&base), plan(&lean));
    // Main grads fp32 -> bf16 (4 -> 2 B); fp32 master + Adam moments 4 + 4 + 4 -> 4 + 2 + 2 B.
    assert!((b.gradients.value() / a.gradients.value() - 0.5).abs() < 1e-12);
    assert!((b.optimizer.value() / a.optimizer.value() - 8.0 / 12.0).abs() < 1e-12);
    assert_eq!((a.weights, a.activations), (b.weights, b.activations));
}

#[test]
fn selective_recompute_of_mlp_frees_its_saved_tensors_and_reruns_its_forward() {
    let sel = |modules: &[&str]| {
        llama(WorkloadWire {
            recompute: Some("selective".into()),
            recompute_modules: Some(modules.iter().map(|m| m.to_string()).collect()),
            micro_batch: Some(1),
            ..Default::default()
        })
    };
    let (attn, mlp) = (sel(&["core_attn"]), sel(&["core_attn", "mlp"]));
    let act = |s: &Scenario| memory::kind_activation_bytes(&s.model, &s.parallel, &s.workload, LayerKind::Dense);
    // bf16, TP 1: the MLP keeps its input only; it no longer keeps the fc1 input (2 B x h), the
    // gate and up outputs (2 x 2 B x f) and the activation's output, fc2's input (2 B x f).
    let (tokens, h, f) = (8192.0, attn.model.hidden as f64, attn.model.ffn_hidden as f64);
    assert!((act(&attn) - act(&mlp) - tokens * (2.0 * h + 6.0 * f)).abs() < 1.0, "{} {}", act(&attn), act(&mlp));

    // The backward re-runs the MLP's forward: its two GEMMs' FLOPs, and its norm and activation.
    let ops = forward_ops(&mlp.model, &mlp.parallel, &mlp.workload);
    let layer = ops.layer(LayerKind::Dense);
    let rerun = recompute_of(layer, &mlp.workload);
    assert!(rerun.iter().all(|o| o.pass == Pass::Recompute));
    let gemm_flops = |names: &[&str], list: &[gpuplan::workload::Op]| -> f64 {
        list.iter().filter(|o| matches!(o.kind, OpKind::Gemm { .. }) && names.contains(&o.name)).map(|o| o.flops()).sum()
    };
    let ffn = ["up_proj", "gate_proj", "down_proj"];
    assert!(gemm_flops(&ffn, layer) > 0.0);
    assert_eq!(gemm_flops(&ffn, &rerun), gemm_flops(&ffn, layer));
    assert!(rerun.iter().any(|o| o.name == "post_attention_norm") && rerun.iter().any(|o| o.name == "silu_mul"));
    assert!(!rerun.iter().any(|o| o.name == "qkv_proj" || o.name == "input_norm"), "attention's linears are not recomputed");
    // Default modules (`[core_attn]`): attention only.
    let only_attn = recompute_of(layer, &attn.workload);
    assert!(only_attn.iter().all(|o| matches!(o.kind, OpKind::Attention { .. }) || !matches!(o.kind, OpKind::Gemm { .. })));
    // So the step takes longer by the MLP's forward, and the MFU counts no recompute.
    let (pa, pm) = (gpuplan::analytic::predict(&attn).unwrap(), gpuplan::analytic::predict(&mlp).unwrap());
    assert!(pm.step_time > pa.step_time);
    assert!(pm.hfu > pa.hfu - 1e-12 && (pm.mfu * pm.step_time.value() - pa.mfu * pa.step_time.value()).abs() < 1e-9 * pa.step_time.value());
}

#[test]
fn mla_up_projection_recompute_frees_q_k_v_and_moe_act_the_experts_activation() {
    let par = ParallelWire { tp: Some(1), pp: Some(8), ep: Some(32), zero: Some(1), ..Default::default() };
    let w = |modules: &[&str]| WorkloadWire {
        seq: Some(4096),
        global_batch: Some(4096),
        precision: Some("fp8".into()),
        fp8_recipe: Some("mxfp8".into()),
        recompute: Some("selective".into()),
        recompute_modules: Some(modules.iter().map(|m| m.to_string()).collect()),
        ..Default::default()
    };
    let s = |m: &[&str]| scenario("deepseek-v3", "gb200-nvl72", 256, par.clone(), w(m));
    let act = |s: &Scenario| memory::kind_activation_bytes(&s.model, &s.parallel, &s.workload, LayerKind::Moe);
    let (none, up, moe_act) = (s(&[]), s(&["mla_up_proj"]), s(&["moe_act"]));
    // q (128 heads x 192), k (128 x 192) and v (128 x 128), bf16, per token.
    let qkv = 4096.0 * 2.0 * 128.0 * (192.0 + 192.0 + 128.0);
    assert!((act(&none) - act(&up) - qkv).abs() < 1.0);
    // The routed experts' activation output, kept as fc2's MXFP8 input: 8 routed copies of a
    // 2048-wide row at 1 + 1/32 B.
    let routed = 4096.0 * 8.0 * 2048.0 * (1.0 + 1.0 / 32.0);
    assert!((act(&none) - act(&moe_act) - routed).abs() < 1.0);
    let ops = forward_ops(&up.model, &up.parallel, &up.workload);
    let names: Vec<&str> = recompute_of(ops.layer(LayerKind::Moe), &up.workload).iter().map(|o| o.name).collect();
    assert!(names.contains(&"q_up") && names.contains(&"kv_up") && names.contains(&"rope"), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("expert") || *n == "q_down"), "{names:?}");
}

#[test]
fn offload_moves_layers_activations_to_the_host_and_fused_cross_entropy_keeps_bf16_logits() {
    let par = ParallelWire { tp: Some(1), pp: Some(1), zero: Some(3), ..Default::default() };
    let w = |offload: Option<i64>, fused: Option<bool>| WorkloadWire {
        seq: Some(8192),
        micro_batch: Some(2),
        global_batch: Some(256),
        precision: Some("fp8".into()),
        cpu_offload_layers: offload,
        cross_entropy_fusion: fused,
        ..Default::default()
    };
    let base = scenario("llama-3-70b", "gb200-nvl72", 64, par.clone(), w(None, None));
    let off = scenario("llama-3-70b", "gb200-nvl72", 64, par.clone(), w(Some(40), Some(true)));
    let (a, b) = (plan(&base), plan(&off));
    let layer = memory::kind_activation_bytes(&base.model, &base.parallel, &base.workload, LayerKind::Dense);
    // 40 layers offloaded, one of them in flight on the GPU: 39 layers' activations off it.
    assert!((a.activations.value() - b.activations.value() - 39.0 * layer).abs() < 1.0);
    assert!((memory::offload_traffic_bytes(&off.model, &off.parallel, &off.workload) - 40.0 * layer).abs() < 1.0);
    // Logits: 6 B (fp32 vocab-parallel cross entropy + bf16 gradient) -> 2 B per logit.
    let hidden = 4.0 * 2.0 * 8192.0 * 8192.0;
    let logits = 2.0 * 8192.0 * 128_256.0;
    assert!((a.logits.value() - 6.0 * logits - hidden).abs() < 1.0 && (b.logits.value() - 2.0 * logits - hidden).abs() < 1.0);
}

fn gpuplan(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuplan")).args(args).current_dir(ROOT).output().expect("run gpuplan");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn bad_memory_options_exit_2_naming_the_key_and_value() {
    let base = ["predict", "--model", "llama-3-70b", "--system", "gb200-nvl72", "--gpus", "64"];
    let cases: &[(&[&str], &[&str])] = &[
        (&["--recompute-modules", "mlp"], &["workload.recompute_modules", "selective"]),
        (&["--recompute", "selective", "--recompute-modules", "attn"], &["`attn`", "core_attn"]),
        (&["--recompute", "selective", "--recompute-modules", "mla_up_proj"], &["mla_up_proj", "multi-latent"]),
        (&["--grad-reduce-dtype", "fp16"], &["workload.grad_reduce_dtype", "`fp16`", "--grad-reduce-dtype"]),
        (&["--optimizer-state-dtype", "fp8"], &["workload.optimizer_state_dtype", "bf16"]),
        (&["--fp8-param-gather", "true"], &["workload.fp8_param_gather", "bf16"]),
        (&["--cpu-offload-layers", "10", "--pp", "4"], &["workload.cpu_offload_layers", "pp = 4"]),
        (&["--cpu-offload-layers", "80"], &["workload.cpu_offload_layers", "`80`"]),
        (&["--precision", "fp8", "--fp8-recipe", "delayed", "--recompute", "selective", "--recompute-modules", "layernorm"], &["delayed"]),
        (&["--grad-reduce-dtype", "bf16", "--stack", "torch-compile"], &["Megatron training option"]),
    ];
    for (extra, want) in cases {
        let mut a: Vec<&str> = base.to_vec();
        a.extend_from_slice(extra);
        let (code, err) = gpuplan(&a);
        assert_eq!(code, 2, "{extra:?}: {err}");
        for w in *want {
            assert!(err.contains(w), "{extra:?}: `{w}` not in {err}");
        }
        assert!(err.contains("hint"), "{err}");
    }
    assert_eq!(RecomputeModule::parse("moe_act"), Some(RecomputeModule::MoeAct));
}

/// The published rows gpuplan's memory plan still puts over capacity under their recipes' memory
/// options (docs/published-analysis.md, "Memory plans of the published rows"): 68 before them.
#[test]
fn published_rows_fit_under_their_recipes_memory_options() {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuplan"))
        .args(["validate", "--published", "tests/data/published/megatron_bridge_training_dev.csv", "--json"])
        .current_dir(ROOT)
        .output()
        .expect("run gpuplan");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut over: Vec<u64> =
        v["rows"].as_array().unwrap().iter().filter(|r| r["fits"] == false).map(|r| r["dev_row"].as_str().unwrap().parse().unwrap()).collect();
    over.sort();
    // Explained one by one in docs/published-analysis.md: DeepSeek-V3 at micro-batch 2 on GB300
    // (33, 49, 65, 81: the 0.6.2 recipe runs micro-batch 1), Llama-3 70B on GB300 at PP 4 without
    // VP and micro-batch 2 (60) and NVFP4 without FSDP (58), Qwen3-30B-A3B at micro-batch 8 on B300
    // (14, 39, 55, 71, 87: 271 of 269 GiB) and on H100 (108: 81 of 80 GiB), and the NeMo 24.07 H100
    // rows (136, 141) whose recipes are not published.
    assert_eq!(over, vec![14, 33, 39, 49, 55, 58, 60, 65, 71, 81, 87, 108, 136, 141]);
    for r in v["rows"].as_array().unwrap() {
        let sum: f64 = r["memory_gib"].as_object().unwrap().values().map(|x| x.as_f64().unwrap()).sum();
        assert!((sum - r["peak_gib"].as_f64().unwrap()).abs() < 1e-6 && r["capacity_gib"].as_f64().unwrap() > 70.0, "{r}");
    }
}

/// The memory options a published row's recipe sets (`config::published::memory_recipe`).
#[test]
fn published_rows_take_their_recipes_memory_options() {
    use gpuplan::config::published::{map_row, read_rows};
    let rows = read_rows(&std::path::Path::new(ROOT).join("tests/data/published/megatron_bridge_training_dev.csv")).unwrap();
    let wl = |id: &str| map_row(rows.iter().find(|r| r.dev_row == id).unwrap()).unwrap().wire.workload;
    let s = |x: &str| Some(x.to_string());
    // DeepSeek-V3 MXFP8 on GB200 (NeMo 26.08): perf_recipes/deepseek/gb200 `recompute_modules = ["mla_up_proj"]`.
    let d = wl("1");
    assert_eq!((d.recompute, d.recompute_modules), (s("selective"), Some(vec![s("mla_up_proj").unwrap()])));
    assert_eq!((d.grad_reduce_dtype, d.fp8_param_gather, d.cross_entropy_fusion), (s("bf16"), Some(true), Some(true)));
    // DeepSeek-V3 MXFP8 on GB300: `recompute_modules = []`, so no recompute.
    assert_eq!((wl("0").recompute, wl("0").recompute_modules), (s("none"), None));
    // Llama-3 70B FP8 Megatron-FSDP on GB200 and GB300: 40 and 20 layers' activations offloaded.
    assert_eq!((wl("29").cpu_offload_layers, wl("26").cpu_offload_layers), (Some(40), Some(20)));
    // NeMo 24.07 (NeMo 1 launcher): Megatron's defaults.
    let old = wl("141");
    assert_eq!((old.grad_reduce_dtype, old.fp8_param_gather, old.cross_entropy_fusion, old.cpu_offload_layers), (None, None, None, None));
}

/// Megatron's MXFP8 parameters are all-gathered in bf16 into the gradient buffer and copied into
/// the MXFP8 weights every step (`reuse_grad_buf_for_mxfp8_param_ag`; megatron-core
/// `param_and_grad_buffer.py` `finish_param_sync`): read bf16, write the row-wise and column-wise
/// MXFP8 copies with their scales, zero the buffer slice, 6.0625 B per parameter of the rank, one
/// kernel per linear weight. Per-tensor FP8 parameters are gathered as stored: no copy.
#[test]
fn mxfp8_parameters_are_copied_out_of_the_gathered_buffer_every_step() {
    let run = |recipe: &str| {
        let par = ParallelWire { tp: Some(1), pp: Some(1), zero: Some(1), ..Default::default() };
        let w = WorkloadWire { fp8_param_gather: Some(true), seq: Some(8192), micro_batch: Some(2), global_batch: Some(128), ..fp8(recipe) };
        scenario("llama-3-8b", "gb200-nvl72", 8, par, w)
    };
    let (mx, ts) = (run("mxfp8"), run("tensorwise"));
    let optimizer = |s: &Scenario| gpuplan::analytic::predict(s).unwrap().breakdown.optimizer.value();
    let (dense, experts) = memory::params_on_rank(&mx.model, &mx.parallel, 0, 0);
    let cost = gpuplan::analytic::price(&mx).unwrap().cost;
    let copy = cost.memory_time((dense + experts) * (2.0 + 2.0 * (1.0 + 1.0 / 32.0) + 2.0), 4 * mx.model.n_layers as u32).time.value();
    assert!(copy > 0.0);
    assert!((optimizer(&mx) - optimizer(&ts) - copy).abs() < 1e-9, "{} {} {copy}", optimizer(&mx), optimizer(&ts));
    // Without `fp8_param_gather` the MXFP8 weights are quantized from bf16 weights in the forward,
    // not copied out of the buffer: the optimizer steps match.
    let plain = |recipe: &str| {
        let par = ParallelWire { tp: Some(1), pp: Some(1), zero: Some(1), ..Default::default() };
        scenario("llama-3-8b", "gb200-nvl72", 8, par, WorkloadWire { seq: Some(8192), micro_batch: Some(2), global_batch: Some(128), ..fp8(recipe) })
    };
    assert_eq!(optimizer(&plain("mxfp8")), optimizer(&plain("tensorwise")));
}

/// Megatron-Core's distributed optimizer keeps one buffer per parameter dtype and fills its buckets
/// in reverse parameter order (`step::megatron_dense_buffers`): the word embedding, a parameter far
/// larger than a bucket, ends the last bucket, whose reduce-scatter waits for the end of backward
/// and whose all-gather the first forward waits for; under per-tensor `fp8_param_gather` the linear
/// weights are gathered at 1 B and the embedding, LM head and norms at 2 B.
#[test]
fn distributed_optimizer_buckets_end_with_the_embedding_and_gather_bf16_parameters_at_2_bytes() {
    // Dev row 159's layout: Nemotron-4 15B (256k vocabulary, untied head) on 64 B200s, DP 64.
    let run = |pp: i64| {
        let par = ParallelWire { tp: Some(1), pp: Some(pp), zero: Some(1), ..Default::default() };
        let w = WorkloadWire {
            fp8_param_gather: Some(true),
            grad_reduce_dtype: Some("bf16".into()),
            seq: Some(4096),
            micro_batch: Some(2),
            global_batch: Some(256),
            ..fp8("tensorwise")
        };
        scenario("nemotron-4-15b", "dgx-b200", 64, par, w)
    };
    let s = run(1);
    let cost = gpuplan::analytic::price(&s).unwrap().cost;
    let plan = gpuplan::analytic::dp_plan(&cost, &s, 0);
    let embedding = s.model.params().embedding / s.parallel.tp as f64;
    assert!(embedding > 1.5e9, "256k x 6144: {embedding}");
    let (grads, params) = (plan.grad_list(), plan.param_list());
    let (last_grad, first_gather) = (grads.last().unwrap(), params.last().unwrap());
    // Ring reduce-scatter / all-gather over 64 ranks: each rank moves 63/64 of the bytes.
    let ring = 63.0 / 64.0;
    assert!((last_grad.wire_bytes - ring * 2.0 * embedding).abs() < 1.0, "{}", last_grad.wire_bytes);
    assert!((first_gather.wire_bytes - ring * 2.0 * embedding).abs() < 1.0, "{}", first_gather.wire_bytes);
    // Every other bucket holds max(40M, 1M x 64) = 64M parameters or fewer.
    assert!(grads[..grads.len() - 1].iter().all(|b| b.wire_bytes <= ring * 2.0 * 64e6 + 1.0));
    // All of the stage's parameters are reduced (bf16 gradients) and gathered: quantized linear
    // weights at 1 B, the embedding, head and norms at 2 B.
    let (dense, _) = memory::params_on_rank(&s.model, &s.parallel, 0, 0);
    // Nemotron-4 uses LayerNorm (weight and bias): two per layer and the final one.
    let norms = (2 * s.model.n_layers + 1) as f64 * 2.0 * s.model.hidden as f64;
    assert_eq!(s.model.n_layers as f64 * s.model.layer_params(LayerKind::Dense).1 + 2.0 * s.model.hidden as f64, norms);
    let bf16 = memory::embedding_and_head_on_rank(&s.model, &s.parallel, 0) + norms;
    let sum = |v: &[gpuplan::cost::lower::CommStep]| v.iter().map(|b| b.wire_bytes).sum::<f64>();
    assert!((sum(&grads) - ring * 2.0 * dense).abs() / sum(&grads) < 1e-9);
    assert!((sum(&params) - ring * ((dense - bf16) + 2.0 * bf16)).abs() / sum(&params) < 1e-9, "{} {}", sum(&params), ring * ((dense - bf16) + 2.0 * bf16));
    // The exposed end of the step: with 2 micro-batches the buckets before the last hide behind the
    // last backward, so the embedding's reduce-scatter and gather are what the DP part costs at least.
    let dp = gpuplan::analytic::predict(&s).unwrap().breakdown.dp_comm;
    assert!(dp >= last_grad.time() + first_gather.time(), "{dp:?}");
    // A later pipeline stage holds no embedding: its last bucket is a body bucket.
    let later = run(2);
    let cost = gpuplan::analytic::price(&later).unwrap().cost;
    let last = gpuplan::analytic::dp_plan(&cost, &later, 1).grad_list().last().unwrap().wire_bytes;
    assert!(last <= ring * 2.0 * 64e6 + 1.0, "{last}");
}
