//! The discrete-event engine against the analytic one, its trace, and its invariants.

use gpuplan::analytic::predict;
use gpuplan::config::scenario::{build, read_scenario, ParallelWire, ScenarioWire, WorkloadWire};
use gpuplan::parallelism::group_shape;
use gpuplan::scenario::Scenario;
use gpuplan::sim::{simulate, Faults, SimOptions};
use gpuplan::workload::{backward_of, forward_ops, recompute_of, OpKind};
use proptest::prelude::*;

fn shipped() -> Vec<(String, Scenario)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios");
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .filter(|p| !gpuplan::report::claims::is_claims_file(&std::fs::read_to_string(p).unwrap()))
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), build(&read_scenario(&p).unwrap(), Some(&p)).unwrap()))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// Where DES and analytic differ by more than 2% on a shipped scenario, the cause, checked below:
/// large data-parallel runs whose DP collectives overlap compute at length (`step::overlap_cost`:
/// 1.0 for the torch stacks since the 4-GPU runs, `MEGATRON_OVERLAP_COST` = 0.3 for megatron, at
/// which DeepSeek-V3 on 256 GB200 comes within 2%): the closed form charges all of the
/// overlapped DP time (pipelined, every stage's along the drain); the DES stretches only the
/// kernels that start while a DP flow of their device runs. The DES is then the faster one, by
/// less than the closed form's DP time. (DeepSeek-V3's DP buckets also share the NVLink with the
/// EP all-to-all, which the DES sees and the closed form does not; the overlap difference now
/// outweighs it.) Nemotron-H 56B on 64 H100 (DP 8): -3.8%; at DP 1 the engines agree to 0.001%.
const DP_OVERLAP_CHARGED_IN_FULL: &[&str] =
    &["deepseek-v3-256xgb200.toml", "llama-3.1-405b-16384xb200.toml", "llama-3.1-405b-16384xh100.toml", "nemotron-h-56b-64xh100.toml"];

/// Deep interleaving (VP 20 over PP 4, 32 micro-batches: Megatron-Bridge's Llama-3 70B LoRA
/// layout on one DGX H100): the DES plays the interleaved schedule's warm-up and drain chunk by
/// chunk and finds a larger bubble than the closed form's `(pp - 1) / (vp m)`; the same layout
/// without LoRA shows the same 0.145 s gap (7.879 vs 8.023 s), and at VP 1 the engines agree to
/// 0.01%. The DES is then the slower one, by less than the bubbles differ.
const DEEP_INTERLEAVING: &[&str] = &["llama-3-70b-lora-8xh100.toml"];

#[test]
fn des_agrees_with_analytic_on_shipped_scenarios_or_names_the_cause() {
    let mut report = String::new();
    for (name, s) in shipped() {
        let a = predict(&s).unwrap();
        let d = simulate(&s, &SimOptions::default()).unwrap().prediction;
        let gap = d.step_time.value() / a.step_time.value() - 1.0;
        report.push_str(&format!("{name:<44} analytic {:>9.4} s  des {:>9.4} s  {:+.2}%\n", a.step_time.value(), d.step_time.value(), gap * 100.0));
        if DP_OVERLAP_CHARGED_IN_FULL.contains(&name.as_str()) && gap.abs() > 0.02 {
            assert!(s.parallel.dp > 1, "{name}: not a data-parallel run");
            assert!(gap < 0.0, "{name}: expected the DES to be faster\n{report}");
            assert!(a.step_time.value() - d.step_time.value() < a.breakdown.dp_comm.value(), "{name}: the gap is more than the DP time\n{report}");
            continue;
        }
        if DEEP_INTERLEAVING.contains(&name.as_str()) {
            assert!(s.parallel.vp >= 8, "{name}: not deeply interleaved");
            assert!(gap > 0.0 && gap < 0.04, "{name}: expected the DES slower, within 4%\n{report}");
            let bubbles = d.breakdown.pp_bubble.value() - a.breakdown.pp_bubble.value();
            assert!(d.step_time.value() - a.step_time.value() < bubbles, "{name}: the gap is more than the bubbles differ\n{report}");
            continue;
        }
        assert!(gap.abs() <= 0.02, "{name}: DES and analytic differ by {:.2}%\n{report}", gap * 100.0);
    }
    println!("{report}");
}

fn small(tp: i64, pp: i64, dp: i64, zero: i64) -> Scenario {
    let w = ScenarioWire {
        model: Some("llama-3-8b".into()),
        system: Some("dgx-h100".into()),
        gpus: Some(tp * pp * dp),
        parallelism: ParallelWire { tp: Some(tp), pp: Some(pp), dp: Some(dp), zero: Some(zero), ..Default::default() },
        workload: WorkloadWire { seq: Some(1024), micro_batch: Some(1), global_batch: Some(4 * dp), recompute: Some("selective".into()), ..Default::default() },
        ..Default::default()
    };
    build(&w, None).unwrap()
}

#[test]
fn wire_bytes_equal_what_the_collectives_require() {
    // TP only: every collective is in the op list; the DES must move exactly those bytes.
    let s = small(4, 1, 1, 0);
    let r = simulate(&s, &SimOptions::default()).unwrap();
    let ops = forward_ops(&s.model, &s.parallel, &s.workload);
    let per_pass = |list: &[gpuplan::workload::Op]| -> f64 {
        let mut all = list.to_vec();
        all.extend(recompute_of(list, &s.workload));
        all.extend(backward_of(list));
        all.iter()
            .map(|op| match &op.kind {
                OpKind::Comm { op: c, group, bytes } => bytes * c.busbw_factor(group_shape(&s.parallel, *group, &s.system).size),
                _ => 0.0,
            })
            .sum()
    };
    let n_micro = (s.workload.global_batch / s.workload.micro_batch) as f64;
    let expected = n_micro * (per_pass(&ops.embedding) + per_pass(&ops.head) + s.model.n_layers as f64 * per_pass(&ops.dense_layer));
    assert!(expected > 0.0);
    assert!((r.wire_bytes / expected - 1.0).abs() < 1e-9, "{} vs {expected}", r.wire_bytes);
}

#[test]
fn same_scenario_gives_the_same_trace_byte_for_byte() {
    let s = small(2, 2, 2, 1);
    let opts = SimOptions { trace: true, ..Default::default() };
    let a = gpuplan::sim::trace::chrome_trace(&simulate(&s, &opts).unwrap(), "a").to_string();
    let b = gpuplan::sim::trace::chrome_trace(&simulate(&s, &opts).unwrap(), "a").to_string();
    assert_eq!(a, b);
}

#[test]
fn written_trace_has_the_chrome_trace_structure() {
    let dir = std::env::temp_dir().join(format!("gpuplan-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("step.json");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpuplan"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["simulate", "--model", "llama-3-8b", "--system", "dgx-h100", "--gpus", "8", "--tp", "2", "--pp", "2", "--zero", "1"])
        .args(["--seq", "1024", "--global-batch", "16", "--force", "--trace", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let spans: Vec<_> = events.iter().filter(|e| e["ph"] == "X").collect();
    assert!(spans.len() > 100);
    for e in &spans {
        for k in ["name", "cat", "pid", "tid", "ts", "dur"] {
            assert!(!e[k].is_null(), "span without `{k}`: {e}");
        }
        assert!(e["dur"].as_f64().unwrap() >= 0.0);
    }
    // Both stages have named processes and a compute thread; compute spans of a stage never overlap.
    for pid in 0..2 {
        assert!(events.iter().any(|e| e["ph"] == "M" && e["name"] == "process_name" && e["pid"] == pid));
        let mut compute: Vec<(f64, f64)> = spans
            .iter()
            .filter(|e| e["pid"] == pid && e["cat"] == "compute")
            .map(|e| (e["ts"].as_f64().unwrap(), e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap()))
            .collect();
        compute.sort_by(|a, b| a.0.total_cmp(&b.0));
        assert!(compute.len() > 10);
        assert!(compute.windows(2).all(|w| w[1].0 >= w[0].1 - 1e-6), "compute spans overlap on stage {pid}");
    }
    let end = spans.iter().map(|e| e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap()).fold(0.0, f64::max);
    let step_us = v["otherData"]["step_time_s"].as_f64().unwrap() * 1e6;
    assert!((end - step_us).abs() / step_us < 1e-6, "trace ends at {end} us, step is {step_us} us");
}

#[test]
fn faults_cost_time_where_they_hit() {
    let s = small(2, 2, 2, 1);
    let base = simulate(&s, &SimOptions::default()).unwrap().prediction.step_time;
    let slow = SimOptions { faults: Faults { slow_gpu: vec![(1, 0.8)], ..Default::default() }, ..Default::default() };
    let nvl = SimOptions { faults: Faults { nvlink: vec![(0, 0.25)], ..Default::default() }, ..Default::default() };
    let t_slow = simulate(&s, &slow).unwrap().prediction.step_time;
    let t_nvl = simulate(&s, &nvl).unwrap().prediction.step_time;
    assert!(t_slow.value() > base.value() * 1.05, "a GPU at 80% slows its pipeline: {} vs {}", t_slow.value(), base.value());
    assert!(t_nvl > base, "a degraded NVLink slows TP collectives");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn more_bandwidth_never_makes_a_step_slower(f in 0.1f64..1.0, g in 0.1f64..1.0, cfg in 0usize..3) {
        let s = [small(2, 2, 2, 1), small(4, 1, 2, 0), small(1, 2, 4, 3)][cfg].clone();
        let lo = f.min(g);
        let hi = f.max(g);
        let at = |x: f64| {
            let faults = Faults { nvlink: (0..s.parallel.pp).map(|st| (st, x)).collect(), nic: (0..s.parallel.pp).map(|st| (st, x)).collect(), ..Default::default() };
            simulate(&s, &SimOptions { faults, ..Default::default() }).unwrap().prediction.step_time.value()
        };
        // Within 0.1%: a list scheduler has timing anomalies (Graham 1969), where a faster link
        // moves one flow's end past another's start and the FIFO order changes; proptest found one
        // of 0.045% (tests/proptest-regressions/sim.txt). A real slowdown is far larger.
        prop_assert!(at(hi) <= at(lo) * (1.0 + 1e-3), "{} at {hi} vs {} at {lo}", at(hi), at(lo));
    }
}

/// Qwen3-30B-A3B on one DGX B200 at EP 8 (the published rows 88 and 72's layout), Megatron eager or
/// with partial CUDA graphs.
fn qwen3_b200(micro_batch: i64, graphs: Option<&str>) -> Scenario {
    let w = ScenarioWire {
        model: Some("qwen3-30b-a3b".into()),
        system: Some("dgx-b200".into()),
        gpus: Some(8),
        parallelism: ParallelWire { ep: Some(8), zero: Some(1), ..Default::default() },
        workload: WorkloadWire {
            seq: Some(4096),
            micro_batch: Some(micro_batch),
            global_batch: Some(512),
            precision: Some("fp8".into()),
            fp8_recipe: Some("mxfp8".into()),
            ..Default::default()
        },
        options: gpuplan::config::scenario::OptionsWire { cuda_graphs: graphs.map(str::to_string), ..Default::default() },
        ..Default::default()
    };
    build(&w, None).unwrap()
}

/// Megatron's eager MoE layer (issue 18): the dispatcher's host sync drains the launch queue once
/// per MoE layer and forward, and Transformer Engine's grouped experts launch a GEMM and a quantize
/// per local expert. After the drain the host issues those launches while the GPU waits, so at
/// micro-batch 1 they are exposed well beyond the syncs, and at micro-batch 4 the GPU's longer
/// expert GEMMs cover most of them. The analytic engine runs host and GPU from the drain on as the
/// DES does, so the two agree on these host-bound steps (eager, and with partial graphs).
#[test]
fn eager_moe_layers_expose_their_per_expert_launches_at_small_micro_batches() {
    let fitted = gpuplan::cost::fitted::fitted();
    let layers = 48.0; // qwen3-30b-a3b: every layer MoE
    let mut exposed = Vec::new();
    for (mbs, graphs) in [(1, None), (4, None), (1, Some("partial"))] {
        let s = qwen3_b200(mbs, graphs);
        let a = predict(&s).unwrap();
        let d = simulate(&s, &SimOptions::default()).unwrap().prediction;
        let gap = d.step_time.value() / a.step_time.value() - 1.0;
        assert!(gap.abs() < 0.01, "mbs {mbs} {graphs:?}: analytic {} s, DES {} s", a.step_time.value(), d.step_time.value());
        let micro = 512.0 / 8.0 / mbs as f64;
        let syncs = micro * layers * fitted.moe_dispatch_sync_us * 1e-6;
        let cpu = a.breakdown.cpu_launch.value();
        assert!(cpu > syncs, "mbs {mbs} {graphs:?}: host {cpu} s, syncs {syncs} s");
        // Launch time exposed beyond the syncs, per micro-batch.
        exposed.push((cpu - syncs) / micro);
    }
    assert!(exposed[0] > 3.0 * exposed[1], "exposed launches per micro-batch: mbs 1 {} s, mbs 4 {} s", exposed[0], exposed[1]);
    // Partial graphs replay the attention block (forward and backward) and the router; the
    // experts' launches stay.
    assert!(exposed[2] > 0.8 * exposed[0], "{exposed:?}");
    let eager = predict(&qwen3_b200(1, None)).unwrap();
    let partial = predict(&qwen3_b200(1, Some("partial"))).unwrap();
    assert!(partial.step_time < eager.step_time);
}
