//! The per-rank engine (`simulate --per-rank`): equal to the representative engine where nothing
//! is asymmetric, faults on single ranks and links where they hit, stragglers over steps, and bad
//! fault flags refused with exit 2.

use std::process::Command;

use gpuplan::config::scenario::{build, read_scenario, ParallelWire, ScenarioWire, WorkloadWire};
use gpuplan::scenario::Scenario;
use gpuplan::sim::per_rank::{simulate_per_rank, PerRankOptions, Persistence};
use gpuplan::sim::ranks::{LinkFault, LinkTarget, RankFaults};
use gpuplan::sim::{simulate, Faults, SimOptions};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn scenario(name: &str) -> Scenario {
    let p = std::path::Path::new(ROOT).join("scenarios").join(name);
    build(&read_scenario(&p).unwrap(), Some(&p)).unwrap()
}

/// Llama-3 8B on DGX H100 nodes of 8: with tp 4 the DP groups and the pipeline leave the node.
fn small(tp: i64, pp: i64, dp: i64) -> Scenario {
    let w = ScenarioWire {
        model: Some("llama-3-8b".into()),
        system: Some("dgx-h100".into()),
        gpus: Some(tp * pp * dp),
        parallelism: ParallelWire { tp: Some(tp), pp: Some(pp), dp: Some(dp), zero: Some(1), ..Default::default() },
        workload: WorkloadWire { seq: Some(1024), micro_batch: Some(1), global_batch: Some(4 * dp), recompute: Some("selective".into()), ..Default::default() },
        ..Default::default()
    };
    build(&w, None).unwrap()
}

/// Llama-3 8B on `gpus` DGX H100 GPUs, all data parallel over TP groups of `tp` (pp 1): the
/// DGX SuperPOD's scalable unit is 32 nodes (256 GPUs), NIC k of each on the SU's leaf k.
fn wide(gpus: i64, tp: i64) -> Scenario {
    let dp = gpus / tp;
    let w = ScenarioWire {
        model: Some("llama-3-8b".into()),
        system: Some("dgx-h100".into()),
        gpus: Some(gpus),
        parallelism: ParallelWire { tp: Some(tp), pp: Some(1), dp: Some(dp), zero: Some(1), ..Default::default() },
        workload: WorkloadWire { seq: Some(1024), micro_batch: Some(1), global_batch: Some(2 * dp), recompute: Some("selective".into()), ..Default::default() },
        ..Default::default()
    };
    build(&w, None).unwrap()
}

fn uplink(su: u64, rail: u32, factor: f64) -> LinkFault {
    LinkFault { target: LinkTarget::Uplink { su, rail }, factor }
}

fn per_rank(s: &Scenario, faults: RankFaults) -> gpuplan::sim::per_rank::PerRankResult {
    simulate_per_rank(s, &PerRankOptions { faults, steps: 1, ..Default::default() }).unwrap()
}

/// As [`per_rank`], with NCCL's PXN turned off (`--no-pxn`): each GPU sends through its own NIC.
fn per_rank_no_pxn(s: &Scenario, faults: RankFaults) -> gpuplan::sim::per_rank::PerRankResult {
    simulate_per_rank(s, &PerRankOptions { faults, steps: 1, no_pxn: true, ..Default::default() }).unwrap()
}

fn representative(s: &Scenario, faults: Faults) -> f64 {
    simulate(s, &SimOptions { faults, ..Default::default() }).unwrap().prediction.step_time.value()
}

/// Dense TP x DP, dense TP x interleaved PP, MoE with EP on one node, MoE with EP x PP across racks.
const SHIPPED: [&str; 4] = ["seed-8xb200-tp2-dp4-13b.toml", "llama-3-70b-64xb200.toml", "mixtral-8x7b-8xh100.toml", "deepseek-v3-256xgb200.toml"];

#[test]
fn with_nothing_asymmetric_per_rank_equals_the_representative_engine() {
    for name in SHIPPED {
        let s = scenario(name);
        let rep = representative(&s, Faults::default());
        let r = per_rank(&s, RankFaults::default());
        let got = r.distribution.p50.value();
        assert!((got - rep).abs() / rep < 1e-3, "{name}: per-rank {got} vs representative {rep}");
        assert_eq!(r.steps[0].classes, s.parallel.pp as usize, "{name}: one class per stage");
        assert_eq!(r.fault_free.value(), got, "{name}");
    }
}

#[test]
fn a_fault_on_a_link_no_flow_crosses_splits_classes_but_changes_nothing() {
    // One node: no collective leaves it, so a NIC at 10% is never used.
    let s = scenario("seed-8xb200-tp2-dp4-13b.toml");
    let r = per_rank(&s, RankFaults { links: vec![LinkFault { target: LinkTarget::RankNic(3), factor: 0.1 }], ..Default::default() });
    assert!(r.steps[0].classes > 1, "the fault breaks the symmetry");
    let rep = representative(&s, Faults::default());
    assert!((r.distribution.p50.value() - rep).abs() / rep < 1e-9, "{} vs {rep}", r.distribution.p50.value());
    assert!(r.steps[0].held_back.is_none());
}

#[test]
fn one_slow_gpu_holds_back_its_whole_stage() {
    // Rank 5 is at stage 0 (64 ranks, tp 4, pp 2, dp 8): its TP group waits for it at every
    // collective, its DP group at every bucket, and so the step takes as long as with all of stage
    // 0 slowed (the representative engine's stage fault).
    let s = scenario("llama-3-70b-64xb200.toml");
    let r = per_rank(&s, RankFaults { slow_gpu: vec![(5, 0.8)], ..Default::default() });
    let stage = representative(&s, Faults { slow_gpu: vec![(0, 0.8)], ..Default::default() });
    let got = r.distribution.p50.value();
    assert!((got - stage).abs() / stage < 1e-3, "per-rank {got} vs whole stage slow {stage}");
    assert!(got > r.fault_free.value() * 1.1);
    let h = r.steps[0].held_back.as_ref().unwrap();
    assert_eq!((h.rank, h.compute), (5, 0.8));
    assert!(h.waited_for.value() > 0.0);
}

#[test]
fn a_degraded_nic_slows_only_collectives_that_cross_it_and_is_named() {
    let s = small(4, 2, 4);
    let base = per_rank(&s, RankFaults::default()).distribution.p50.value();
    let nic = per_rank(&s, RankFaults { links: vec![LinkFault { target: LinkTarget::RankNic(3), factor: 0.5 }], ..Default::default() });
    let h = nic.steps[0].held_back.as_ref().unwrap();
    assert_eq!((h.rank, h.nic), (3, 0.5));
    assert!(h.link_delay.value() > 0.0, "its DP and pipeline traffic leave the node through it");
    assert!(nic.distribution.p50.value() > base);
    // A failed NIC halves its GPU's and its buddy's NIC share: here the same as that degrade.
    let failed = per_rank(&s, RankFaults { fail_nic: vec![3], ..Default::default() });
    assert!((failed.distribution.p50.value() - nic.distribution.p50.value()).abs() < 1e-12);
    // A slower NIC never makes the step faster.
    let worse = per_rank(&s, RankFaults { links: vec![LinkFault { target: LinkTarget::RankNic(3), factor: 0.25 }], ..Default::default() });
    assert!(worse.distribution.p50.value() >= nic.distribution.p50.value());
}

#[test]
fn grouping_ranks_into_classes_gives_the_step_of_every_rank_played_alone() {
    // Differential: the symmetry-reduced engine against every rank as its own class (32 ranks:
    // tp 4 x pp 2 x dp 4 over 4 nodes), with faults that break the symmetry unevenly.
    let s = small(4, 2, 4);
    let faults = RankFaults {
        slow_gpu: vec![(5, 0.8), (22, 0.9)],
        links: vec![LinkFault { target: LinkTarget::RankNic(12), factor: 0.5 }, LinkFault { target: LinkTarget::RankNvlink(30), factor: 0.2 }],
        fail_nic: vec![],
    };
    // And MoE: Mixtral on one node (tp 2 x dp 4, ep 4), its expert-parallel all-to-alls met by
    // 8 one-rank classes against one class. (One slow GPU there already splits all 8 ranks.)
    let moe = scenario("mixtral-8x7b-8xh100.toml");
    // With PXN (the default) the NIC fault also holds node 1's rail-0 GPUs, whose DP rings
    // leave through NIC 4: with the other faults every rank then differs, so the faulted case runs
    // without PXN too, where grouping still merges ranks.
    for (s, faults, no_pxn) in [(&s, RankFaults::default(), false), (&s, faults.clone(), true), (&s, faults, false), (&moe, RankFaults::default(), false)] {
        let n = s.parallel.tp as usize * s.parallel.pp as usize * s.parallel.dp as usize * s.parallel.cp as usize;
        let grouped = simulate_per_rank(s, &PerRankOptions { faults: faults.clone(), steps: 1, no_pxn, ..Default::default() }).unwrap();
        let alone = simulate_per_rank(s, &PerRankOptions { faults, steps: 1, no_pxn, ungrouped: true, ..Default::default() }).unwrap();
        assert_eq!(alone.steps[0].classes, n);
        assert!(grouped.steps[0].classes < n || !no_pxn && grouped.steps[0].classes == n, "{} of {n}", grouped.steps[0].classes);
        let (g, a) = (grouped.distribution.p50.value(), alone.distribution.p50.value());
        assert!((g - a).abs() / a < 1e-9, "grouped {g} vs every rank alone {a}");
        assert_eq!(grouped.steps[0].held_back.as_ref().map(|h| h.rank), alone.steps[0].held_back.as_ref().map(|h| h.rank));
    }
}

#[test]
fn stragglers_are_seeded_and_the_distribution_is_ordered() {
    let s = scenario("seed-8xb200-tp2-dp4-13b.toml");
    let opts = PerRankOptions { stragglers: Some((1, 0.7)), steps: 6, seed: 11, ..Default::default() };
    let a = simulate_per_rank(&s, &opts).unwrap();
    let b = simulate_per_rank(&s, &opts).unwrap();
    assert_eq!(a, b, "same seed, same steps");
    assert_eq!(a.steps.len(), 6);
    let d = a.distribution;
    assert!(d.p50 <= d.p90 && d.p90 <= d.p99 && d.p99 <= d.max);
    for st in &a.steps {
        assert_eq!(st.stragglers.len(), 1);
        // One straggler at 70% anywhere in a TP x DP job holds every step back to its pace.
        assert!(st.step_time.value() > a.fault_free.value() * 1.2, "{:?}", st);
        assert_eq!(st.held_back.as_ref().map(|h| h.rank), Some(st.stragglers[0]));
    }
    let drawn: std::collections::BTreeSet<u64> = a.steps.iter().map(|s| s.stragglers[0]).collect();
    assert!(drawn.len() > 1, "fresh draws per step: {drawn:?}");
}

#[test]
fn a_persistent_straggler_slows_every_step_and_transient_ones_spread() {
    let s = scenario("seed-8xb200-tp2-dp4-13b.toml");
    let run =
        |persistence| simulate_per_rank(&s, &PerRankOptions { stragglers: Some((1, 0.7)), persistence, steps: 8, seed: 11, ..Default::default() }).unwrap();
    let job = run(Persistence::Job);
    let step = run(Persistence::Step);
    // One draw for the job: the same GPU is slow in every step, and every step is held back to its pace.
    let rank = job.steps[0].stragglers[0];
    for st in &job.steps {
        assert_eq!(st.stragglers, vec![rank]);
        assert!(st.step_time.value() > job.fault_free.value() * 1.2, "{st:?}");
        assert_eq!(st.held_back.as_ref().map(|h| h.rank), Some(rank));
    }
    // The job's draw is the transient run's first step.
    assert_eq!(step.steps[0].stragglers, vec![rank]);
    let spread: std::collections::BTreeSet<u64> = step.steps.iter().map(|s| s.stragglers[0]).collect();
    assert!(spread.len() >= 4, "fresh draws spread over the GPUs: {spread:?}");
    // A mean lifetime between the two: runs of the same GPU, changing now and then.
    let mid = run(Persistence::MeanSteps(3.0));
    let changes = mid.steps.windows(2).filter(|w| w[0].stragglers != w[1].stragglers).count();
    assert!(changes < 7, "{changes}");
}

fn gpuplan(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuplan")).args(args).current_dir(ROOT).output().expect("run gpuplan");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn bad_fault_flags_exit_2_naming_the_flag_and_value() {
    let base = ["simulate", "--scenario", "scenarios/seed-8xb200-tp2-dp4-13b.toml", "--per-rank"];
    let cases: &[(&[&str], &[&str])] = &[
        (&["--slow-gpu", "8=0.5"], &["--slow-gpu", "8=0.5", "beyond the cluster"]),
        (&["--slow-gpu", "3=0"], &["--slow-gpu", "3=0", "(0, 1]"]),
        (&["--slow-gpu", "3=-0.5"], &["--slow-gpu", "3=-0.5"]),
        (&["--fail-nic", "99"], &["--fail-nic", "99", "beyond the cluster"]),
        (&["--degrade-link", "rank:8:nvlink=0.5"], &["--degrade-link", "rank:8:nvlink=0.5", "beyond the cluster"]),
        (&["--degrade-link", "node:0:nic:9=0.5"], &["--degrade-link", "node:0:nic:9=0.5", "does not exist"]),
        (&["--degrade-link", "rank:x:nic=0.5"], &["--degrade-link", "rank:x:nic=0.5", "not a number"]),
        (&["--degrade-link", "switch:3=0.5"], &["--degrade-link", "switch:3", "not a link"]),
        (&["--degrade-link", "rank:1:nic"], &["--degrade-link", "TARGET=FACTOR"]),
        (&["--degrade-link", "spine=1.5"], &["--degrade-link", "(0, 1]"]),
        (&["--stragglers", "9=0.5"], &["--stragglers", "9=0.5", "out of 8 ranks"]),
        (&["--stragglers", "2=0"], &["--stragglers", "2=0", "(0, 1]"]),
        (&["--stragglers", "two=0.5"], &["--stragglers", "two"]),
        (&["--steps", "0"], &["--steps", "0"]),
        (&["--stragglers", "1=0.5", "--straggler-persistence", "0.5"], &["--straggler-persistence", "0.5", "at least 1"]),
        (&["--stragglers", "1=0.5", "--straggler-persistence", "forever"], &["--straggler-persistence", "forever"]),
        (&["--straggler-persistence", "job"], &["--stragglers"]),
        (&["--nodes-per-leaf", "0"], &["--nodes-per-leaf", "`0`", "at least one node"]),
        (&["--nodes-per-leaf", "x"], &["--nodes-per-leaf", "x"]),
        (&["--degrade-link", "su:1:rail:0:uplink=0.5", "--nodes-per-leaf", "32"], &["--degrade-link", "su:1:rail:0:uplink=0.5", "does not exist"]),
        (&["--degrade-link", "su:0:rail:x:uplink=0.5"], &["--degrade-link", "not a number"]),
        (&["--degrade-link", "su:0:rail:0:uplink=0"], &["--degrade-link", "(0, 1]"]),
    ];
    for (extra, want) in cases {
        let args: Vec<&str> = base.iter().chain(extra.iter()).copied().collect();
        let (code, err) = gpuplan(&args);
        assert_eq!(code, 2, "{extra:?}: {err}");
        for w in *want {
            assert!(err.contains(w), "{extra:?}: `{w}` not in: {err}");
        }
        assert!(!err.contains("panicked"), "{extra:?}: {err}");
    }
    // The per-rank flags need --per-rank; the stage faults do not mix with it.
    let (code, err) = gpuplan(&["simulate", "--scenario", "scenarios/seed-8xb200-tp2-dp4-13b.toml", "--fail-nic", "1"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--per-rank"), "{err}");
    let (code, err) = gpuplan(&["simulate", "--scenario", "scenarios/seed-8xb200-tp2-dp4-13b.toml", "--per-rank", "--degrade-nic", "0=0.5"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--degrade-nic"), "{err}");
    let (code, err) = gpuplan(&["simulate", "--scenario", "scenarios/seed-8xb200-tp2-dp4-13b.toml", "--nodes-per-leaf", "32"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--per-rank"), "{err}");
    // --no-pxn is a switch of the per-rank engine: alone, or given a value, it is refused.
    let (code, err) = gpuplan(&["simulate", "--scenario", "scenarios/seed-8xb200-tp2-dp4-13b.toml", "--no-pxn"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--no-pxn") && err.contains("--per-rank"), "{err}");
    let (code, err) = gpuplan(&["simulate", "--scenario", "scenarios/seed-8xb200-tp2-dp4-13b.toml", "--per-rank", "--no-pxn=yes"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--no-pxn") && err.contains("yes"), "{err}");
    // A system whose file gives no leaf size has no leaf to name, unless the flag gives one.
    let gb =
        ["simulate", "--model", "llama-3-8b", "--system", "gb200-nvl72", "--gpus", "144", "--tp", "4", "--seq", "1024", "--global-batch", "72", "--per-rank"];
    let (code, err) = gpuplan(&[&gb[..], &["--degrade-link", "su:0:rail:1:uplink=0.5"]].concat());
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("su:0:rail:1:uplink=0.5") && err.contains("nodes_per_leaf") && err.contains("--nodes-per-leaf"), "{err}");
    let (code, err) = gpuplan(&[&gb[..], &["--degrade-link", "su:0:rail:1:uplink=0.5", "--nodes-per-leaf", "18"]].concat());
    assert_eq!(code, 0, "{err}");
}

#[test]
fn per_rank_json_has_the_distribution_and_who_held_the_step_back() {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuplan"))
        .args(["simulate", "--scenario", "scenarios/seed-8xb200-tp2-dp4-13b.toml", "--per-rank", "--slow-gpu", "6=0.9", "--steps", "2", "--json"])
        .current_dir(ROOT)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["engine"], "des-per-rank");
    let p = &v["per_rank"];
    assert_eq!(p["ranks"], 8);
    for k in ["mean", "p50", "p90", "p99", "max"] {
        assert!(p["step_time_s"][k].as_f64().unwrap() > p["fault_free_step_time_s"].as_f64().unwrap(), "{k}");
    }
    assert_eq!(p["held_back"][0]["rank"], 6);
    // DGX B200's SuperPOD scalable unit: 32 nodes per leaf switch on a rail.
    assert_eq!(p["nodes_per_leaf"], 32);
    assert_eq!(p["pxn"], true, "NCCL's default");
    assert_eq!(p["held_back"][0]["steps"], 2);
    let (top, p50) = (v["step_time_s"].as_f64().unwrap(), p["step_time_s"]["p50"].as_f64().unwrap());
    assert!((top - p50).abs() / p50 < 1e-9, "the prediction is the median step's: {top} vs {p50}");
}

/// Nemotron-H 8B at TP 2 x PP 4 with 10 layers on the first stage (`--decoder-first-pipeline-num-layers`):
/// the stages hold different mixes of Mamba-2, attention and MLP blocks; both DES engines and the
/// closed form agree where nothing contends (no DP).
#[test]
fn a_hybrid_pattern_over_uneven_stages_agrees_across_engines() {
    use gpuplan::model::LayerKind::{Attention, Mamba, Mlp};
    let w = ScenarioWire {
        model: Some("nemotron-h-8b".into()),
        system: Some("dgx-h100".into()),
        gpus: Some(8),
        parallelism: ParallelWire { tp: Some(2), pp: Some(4), dp: Some(1), zero: Some(1), decoder_first_pipeline_num_layers: Some(10), ..Default::default() },
        workload: WorkloadWire { seq: Some(2048), micro_batch: Some(1), global_batch: Some(8), ..Default::default() },
        ..Default::default()
    };
    let s = build(&w, None).unwrap();
    let kinds = s.model.layer_kinds();
    let mix = |stage| {
        let c = gpuplan::parallelism::stage_kind_counts(&kinds, &s.parallel, stage);
        (c[Mamba.index()], c[Attention.index()], c[Mlp.index()])
    };
    // `M-M-M-M*-M`, then 14 layers each: `-M-M-M-M*-M-M-`, `M-M-M*-M-M-M-M`, `-M*-M-M-M-M-M-`.
    assert_eq!([mix(0), mix(1), mix(2), mix(3)], [(5, 1, 4), (6, 1, 7), (7, 1, 6), (6, 1, 7)]);
    let rep = representative(&s, Faults::default());
    let r = per_rank(&s, RankFaults::default());
    assert!((r.distribution.p50.value() - rep).abs() / rep < 1e-3, "per-rank {} vs representative {rep}", r.distribution.p50.value());
    let a = gpuplan::analytic::predict(&s).unwrap().step_time.value();
    assert!((rep / a - 1.0).abs() < 0.02, "DES {rep} vs analytic {a}");
}

/// The cells of the markdown table row that starts with `first`.
fn md_row<'a>(md: &'a str, first: &str) -> Vec<&'a str> {
    let line = md.lines().find(|l| l.starts_with(&format!("| {first}"))).unwrap_or_else(|| panic!("no row `{first}` in {md}"));
    line.trim_matches('|').split('|').map(str::trim).collect()
}

#[test]
fn report_charts_the_step_time_distribution_under_stragglers() {
    let out = std::env::temp_dir().join(format!("gpuplan-it-stragglers-report-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let flags = ["--stragglers", "2=0.8", "--steps", "12", "--seed", "5", "--straggler-persistence", "3"];
    let mut args = vec!["report", "--scenario", "scenarios/seed-8xb200-tp2-dp4-13b.toml", "--out", out.to_str().unwrap()];
    args.extend(flags);
    let (code, err) = gpuplan(&args);
    assert_eq!(code, 0, "{err}");
    let name = "seed-8xb200-tp2-dp4-13b";
    // The chart: an SVG document with the CDF and the p50/p90/p99 and no-fault lines named.
    let svg = std::fs::read_to_string(out.join(format!("charts/stragglers-{name}.svg"))).unwrap();
    let tree = roxmltree::Document::parse(&svg).expect("the chart parses as XML");
    assert_eq!(tree.root_element().tag_name().name(), "svg");
    let texts: Vec<String> = tree.descendants().filter(|n| n.has_tag_name("text")).filter_map(|n| n.text().map(|t| t.trim().to_string())).collect();
    for mark in ["no fault", "p50", "p90", "p99"] {
        assert!(texts.iter().any(|t| t.starts_with(mark)), "`{mark}` not in {texts:?}");
    }
    assert!(tree.descendants().filter(|n| n.has_tag_name("polyline")).count() >= 5, "the CDF and four marks");
    // The document beside it is simulate's `/per_rank` for the same flags, and the report's table
    // names its numbers.
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join(format!("stragglers-{name}.json"))).unwrap()).unwrap();
    let mut sim = vec!["simulate", "--scenario", "scenarios/seed-8xb200-tp2-dp4-13b.toml", "--per-rank", "--json"];
    sim.extend(flags);
    let o = Command::new(env!("CARGO_BIN_EXE_gpuplan")).args(&sim).current_dir(ROOT).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["per_rank"], doc, "the report's JSON is simulate's");
    assert_eq!(doc["steps"], 12);
    assert_eq!(doc["stragglers"]["persistence"], "3");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    let section = &md[md.find("## Step time under stragglers").expect("the section")..];
    let row = md_row(section, &format!("{name} · train"));
    let ms = |x: &serde_json::Value| format!("{:.3}", x.as_f64().unwrap() * 1e3);
    let t = &doc["step_time_s"];
    assert_eq!(row[5..11], [ms(&doc["fault_free_step_time_s"]), ms(&t["mean"]), ms(&t["p50"]), ms(&t["p90"]), ms(&t["p99"]), ms(&t["max"])], "{row:?}");
    assert!(t["p50"].as_f64() <= t["p90"].as_f64() && t["p90"].as_f64() <= t["p99"].as_f64());
    assert!(md.contains("--stragglers 2=0.8 --steps 12 --seed 5 --straggler-persistence 3 --out DIR"), "the header regenerates it");
    // No overwrite without --force.
    let (code, err) = gpuplan(&args);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--force"), "{err}");
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn a_degraded_spine_link_slows_only_groups_that_leave_their_leaf() {
    let faults = |f: Vec<LinkFault>| RankFaults { links: f, ..Default::default() };
    // One scalable unit (32 nodes), TP 8: every DP group is one GPU index on every node, one rail
    // and so one leaf switch. Half of leaf (SU 0, rail 0)'s spine links down: nothing crosses them.
    let aligned = wide(256, 8);
    let base = per_rank(&aligned, RankFaults::default());
    let hit = per_rank(&aligned, faults(vec![uplink(0, 0, 0.5)]));
    assert!(hit.steps[0].classes > 1, "the fault breaks the symmetry");
    assert!((hit.distribution.p50.value() - base.distribution.p50.value()).abs() < 1e-9 * base.distribution.p50.value());
    assert!(hit.steps[0].held_back.is_none());
    // All spines at half: rail-aligned traffic inside the SU still never reaches them.
    let spine = per_rank(&aligned, faults(vec![LinkFault { target: LinkTarget::Spine, factor: 0.5 }]));
    assert!((spine.distribution.p50.value() - base.distribution.p50.value()).abs() < 1e-9 * base.distribution.p50.value());
    // TP 4: a DP ring joins GPU 0 and GPU 4 of each node, rails 0 and 4: not rail-aligned. With
    // PXN (NCCL's default) the rail change is made over NVLink to the rail-local GPU and the
    // traffic leaves through its NIC, staying on the rails' leaves: the uplinks never see it.
    let across = wide(256, 4);
    let base4 = per_rank(&across, RankFaults::default()).distribution.p50.value();
    let pxn4 = per_rank(&across, faults(vec![uplink(0, 0, 0.5)]));
    assert!(pxn4.steps[0].classes > 1, "the fault breaks the symmetry");
    assert!((pxn4.distribution.p50.value() - base4).abs() < 1e-9 * base4, "{} vs {base4}", pxn4.distribution.p50.value());
    // Without PXN each GPU sends through its own NIC: the ring's scale-out traffic goes up to the
    // spines and contends on the degraded leaf's uplinks.
    let per_rank = per_rank_no_pxn;
    assert_eq!(per_rank(&across, RankFaults::default()).distribution.p50.value(), base4, "no fault: the same with or without");
    let hit4 = per_rank(&across, faults(vec![uplink(0, 0, 0.5)]));
    assert!(hit4.distribution.p50.value() > base4 * 1.2, "{} vs {base4}", hit4.distribution.p50.value());
    let h = hit4.steps[0].held_back.as_ref().expect("the degraded leaf's ranks are named");
    assert_eq!((h.rank % 8, h.uplink), (0, 0.5), "a rank of rail 0, through the degraded uplinks");
    assert!(h.link_delay.value() > 0.0);
    // Every leaf's uplinks at half give the same step: each leaf's ring hops are the slowest.
    let spine4 = per_rank(&across, faults(vec![LinkFault { target: LinkTarget::Spine, factor: 0.5 }])).distribution.p50.value();
    assert!((spine4 - hit4.distribution.p50.value()).abs() < 1e-6 * spine4, "{spine4} vs {}", hit4.distribution.p50.value());
    // Two SUs: rail-aligned DP groups now span both SUs' leaves of their rail and cross the spine.
    let two = wide(512, 8);
    let base2 = per_rank(&two, RankFaults::default()).distribution.p50.value();
    let hit2 = per_rank(&two, faults(vec![uplink(1, 3, 0.5)])).distribution.p50.value();
    assert!(hit2 > base2 * 1.2, "{hit2} vs {base2}");
    // A worse uplink never makes the step faster.
    let worse = per_rank(&across, faults(vec![uplink(0, 0, 0.25)])).distribution.p50.value();
    assert!(worse >= hit4.distribution.p50.value());
}

#[test]
fn failed_nics_send_their_rail_through_the_next_leaf_and_its_uplinks() {
    // One SU at TP 8. NIC 3 fails on 16 of the 32 nodes: those GPUs reach the fabric through
    // NIC 4 of their node, on rail 4's leaf, while the other 16 GPUs of their DP group stay on
    // rail 3's: the group now spans two leaves and its flows cross the spine.
    let s = wide(256, 8);
    let failed_nics: Vec<u64> = (0..16).map(|node| node * 8 + 3).collect();
    let run = |links: Vec<LinkFault>, fail_nic: Vec<u64>| per_rank(&s, RankFaults { links, fail_nic, ..Default::default() }).distribution.p50.value();
    let base = run(vec![], vec![]);
    let failed = run(vec![], failed_nics.clone());
    assert!(failed > base, "half a NIC share each");
    // Rail 4's leaf left with 4 of its 32 uplinks: the healthy rail-aligned job never uses them ...
    let up4 = vec![uplink(0, 4, 0.125)];
    assert!((run(up4.clone(), vec![]) - base).abs() < 1e-9 * base);
    // ... one failed NIC's traffic fits in what is left (half a NIC in 4 NICs' worth) ...
    let one = run(vec![], vec![3]);
    assert!((run(up4.clone(), vec![3]) - one).abs() < 1e-9 * one);
    // ... sixteen do not (8 NICs' worth): their DP group waits on the spine.
    let both = run(up4, failed_nics);
    assert!(both > failed * 1.3, "{both} vs {failed}");
}

#[test]
fn grouped_leaf_uplinks_equal_every_rank_played_alone() {
    // Differential: the leaf as a refinement group and the weighted uplink flows against every
    // rank its own class (weight 1), with uplink, NIC failover and compute faults together.
    // 64 GPUs over 8 nodes at TP 2 x PP 2, what-if leaves of 2 nodes: groups span leaves unevenly.
    let s = small(2, 2, 16);
    let faults = RankFaults { slow_gpu: vec![(9, 0.9)], links: vec![uplink(1, 2, 0.5), uplink(3, 5, 0.3)], fail_nic: vec![20] };
    let opts = PerRankOptions { faults, steps: 1, nodes_per_leaf: Some(2), ..Default::default() };
    let grouped = simulate_per_rank(&s, &opts).unwrap();
    let alone = simulate_per_rank(&s, &PerRankOptions { ungrouped: true, ..opts.clone() }).unwrap();
    assert_eq!(alone.steps[0].classes, 64);
    assert!(grouped.steps[0].classes < 64, "{}", grouped.steps[0].classes);
    let (g, a) = (grouped.distribution.p50.value(), alone.distribution.p50.value());
    assert!((g - a).abs() / a < 1e-9, "grouped {g} vs every rank alone {a}");
    assert!(g > grouped.fault_free.value());
}

#[test]
fn an_ep_all_to_all_across_nodes_crosses_the_spine_only_without_pxn() {
    // Qwen3-30B-A3B on one SU of DGX H100 at TP 8: dense and expert DP groups are rail-aligned.
    // EP 8 keeps each all-to-all inside a node (NVLink); EP 16 spans two nodes and all 8 rails,
    // so without PXN its scale-out traffic goes up the leaves' uplinks.
    let moe = |ep: i64| {
        let w = ScenarioWire {
            model: Some("qwen3-30b-a3b".into()),
            system: Some("dgx-h100".into()),
            gpus: Some(256),
            parallelism: ParallelWire { tp: Some(8), pp: Some(1), dp: Some(32), ep: Some(ep), zero: Some(1), ..Default::default() },
            workload: WorkloadWire { seq: Some(1024), micro_batch: Some(1), global_batch: Some(64), ..Default::default() },
            ..Default::default()
        };
        build(&w, None).unwrap()
    };
    let hit = RankFaults { links: vec![uplink(0, 0, 0.25)], ..Default::default() };
    let inside = moe(8);
    let (base, faulted) = (per_rank(&inside, RankFaults::default()), per_rank(&inside, hit.clone()));
    assert_eq!(faulted.distribution.p50.value(), base.distribution.p50.value());
    let across = moe(16);
    // With PXN (the default) each all-to-all message for another rail moves over NVLink to the
    // GPU on that rail and leaves through its NIC: it stays on the rail's leaf, off the uplinks.
    let (base, faulted) = (per_rank(&across, RankFaults::default()), per_rank(&across, hit.clone()));
    assert_eq!(faulted.distribution.p50.value(), base.distribution.p50.value());
    // Without PXN, GPU k's messages to every rail leave through NIC k and cross the spines. (1.9%
    // here: the eager MoE layer's host time before the dispatcher's sync runs beside the combine,
    // `cost::fitted::MOE_LAYER_HOST_US`, so part of a slower combine hides; above 2% before.)
    let (base, faulted) = (per_rank_no_pxn(&across, RankFaults::default()), per_rank_no_pxn(&across, hit));
    assert!(
        faulted.distribution.p50.value() > base.distribution.p50.value() * 1.01,
        "{} vs {}",
        faulted.distribution.p50.value(),
        base.distribution.p50.value()
    );
}
