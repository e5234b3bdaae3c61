//! Megatron's pipeline layouts (issue 17 item 3): uneven splits through the binary and both engines.

use std::process::Command;

use gpuplan::analytic::predict;
use gpuplan::config::scenario::{build, ParallelWire, ScenarioWire, WorkloadWire};
use gpuplan::parallelism::{stage_layer_counts, virtual_stage_layer_counts};
use gpuplan::sim::{simulate, SimOptions};

fn gpuplan(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuplan")).args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().expect("run gpuplan");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn llama_405b_runs_at_pp16_vp8_and_pp8_vp4() {
    for (gpus, pp, vp) in [("1024", "16", "8"), ("512", "8", "4")] {
        let (code, out, err) = gpuplan(&[
            "predict",
            "--model",
            "llama-3.1-405b",
            "--system",
            "dgx-h100",
            "--gpus",
            gpus,
            "--tp",
            "8",
            "--pp",
            pp,
            "--vp",
            vp,
            "--micro-batch",
            "1",
            "--global-batch",
            "512",
            "--seq",
            "8192",
            "--precision",
            "fp8",
            "--json",
        ]);
        // Exit 1 is "does not fit" with the whole prediction; what matters is that it is priced.
        assert!(code == 0 || code == 1, "pp {pp} vp {vp}: exit {code}\n{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}\n{out}\n{err}"));
        assert!(v["tokens_per_s"].as_f64().unwrap() > 0.0, "{out}");
    }
}

#[test]
fn deepseek_v3_runs_at_its_published_pp_x_vp() {
    let (code, out, err) = gpuplan(&[
        "predict",
        "--model",
        "deepseek-v3",
        "--system",
        "gb200-nvl72",
        "--gpus",
        "256",
        "--pp",
        "8",
        "--vp",
        "4",
        "--ep",
        "32",
        "--micro-batch",
        "1",
        "--global-batch",
        "4096",
        "--seq",
        "4096",
        "--precision",
        "fp8",
        "--zero",
        "1",
    ]);
    assert!(code == 0 || code == 1, "exit {code}\n{err}");
    assert!(out.contains("step time"), "{out}");
}

#[test]
fn a_split_that_does_not_add_up_exits_2_naming_the_key_value_and_a_hint() {
    let base = ["predict", "--model", "llama-3-8b", "--system", "dgx-h100", "--gpus", "4", "--pp", "4", "--seq", "1024"];
    let cases: [(&[&str], &str, &str); 4] = [
        (&["--decoder-first-pipeline-num-layers", "4"], "parallelism.decoder_first_pipeline_num_layers", "`4`"),
        (&["--decoder-first-pipeline-num-layers", "20", "--decoder-last-pipeline-num-layers", "20"], "parallelism.decoder_last_pipeline_num_layers", "`20`"),
        (&["--vp", "3", "--account-for-embedding-in-pipeline-split"], "parallelism.account_for_embedding_in_pipeline_split", "`true`"),
        (&["--vp", "2", "--pipeline-layout", "4,4,4,4,4,4,4,3"], "parallelism.pipeline_layout", "adds up to 31"),
    ];
    for (extra, key, value) in cases {
        let args: Vec<&str> = base.iter().chain(extra.iter()).copied().collect();
        let (code, _, err) = gpuplan(&args);
        assert_eq!(code, 2, "{extra:?}: {err}");
        assert!(err.contains(key) && err.contains(value) && err.contains("hint:"), "{extra:?}: {err}");
    }
}

fn llama_8b(pp: i64, vp: i64, layout: Option<Vec<i64>>) -> gpuplan::scenario::Scenario {
    let w = ScenarioWire {
        model: Some("llama-3-8b".into()),
        system: Some("dgx-h100".into()),
        gpus: Some(pp),
        parallelism: ParallelWire { tp: Some(1), pp: Some(pp), vp: Some(vp), pipeline_layout: layout, ..Default::default() },
        workload: WorkloadWire { seq: Some(1024), micro_batch: Some(1), global_batch: Some(16), ..Default::default() },
        ..Default::default()
    };
    build(&w, None).unwrap()
}

#[test]
fn both_engines_price_unequal_virtual_stages_alike() {
    // One data-parallel replica: no DP overlap rule between the engines, only the pipeline.
    for (pp, vp, layout) in
        [(4, 3, Some(vec![2, 3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2])), (2, 2, Some(vec![2, 14, 10, 6])), (2, 4, Some(vec![1, 5, 5, 5, 5, 5, 5, 1]))]
    {
        let s = llama_8b(pp, vp, layout);
        let counts = virtual_stage_layer_counts(s.model.n_layers, &s.parallel);
        assert!(counts.iter().any(|&n| n != counts[0]), "{counts:?}");
        let a = predict(&s).unwrap();
        let d = simulate(&s, &SimOptions::default()).unwrap().prediction;
        let gap = d.step_time.value() / a.step_time.value() - 1.0;
        assert!(gap.abs() <= 0.02, "pp {pp} vp {vp} {counts:?}: analytic {} s, DES {} s ({:+.2}%)", a.step_time.value(), d.step_time.value(), gap * 100.0);
    }
}

#[test]
fn uneven_interleaving_nothing_asked_for_is_refused_as_megatron_does() {
    // 32 layers over 4 x 3 virtual stages, no option and no recipe layout for Llama 3 8B.
    let err = predict(&llama_8b(4, 3, None)).unwrap_err().to_string();
    assert!(err.contains("n_layers") && err.contains("pp*vp"), "{err}");
}

#[test]
fn the_stage_with_the_most_layers_sets_the_pace() {
    // Rank 1 holds 20 of 32 layers, rank 0 12: the 16 micro-batches run at rank 1's pace.
    let uneven = llama_8b(2, 2, Some(vec![2, 14, 10, 6]));
    assert_eq!(stage_layer_counts(32, &uneven.parallel), vec![12, 20]);
    let even = llama_8b(2, 2, None);
    let (a, b) = (predict(&uneven).unwrap(), predict(&even).unwrap());
    let per_layer = b.breakdown.compute.value() / 16.0 / 16.0;
    assert!(a.breakdown.compute.value() > 16.0 * 19.0 * per_layer, "uneven {} s, even {} s", a.breakdown.compute.value(), b.breakdown.compute.value());
    let (da, db) = (simulate(&uneven, &SimOptions::default()).unwrap().prediction, simulate(&even, &SimOptions::default()).unwrap().prediction);
    assert!(da.step_time.value() > db.step_time.value() * 1.15, "DES uneven {} s, even {} s", da.step_time.value(), db.step_time.value());
}
