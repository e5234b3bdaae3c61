//! The binary as a user runs it: exit codes, JSON contract, error messages.

use std::process::Command;

fn gpuplan(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuplan")).args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().expect("run gpuplan");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn write_temp(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("gpuplan-it-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn predict_json_has_the_contract_keys() {
    let (code, out, err) = gpuplan(&[
        "predict",
        "--model",
        "llama-3-8b",
        "--system",
        "dgx-h100",
        "--gpus",
        "8",
        "--tp",
        "2",
        "--zero",
        "1",
        "--seq",
        "4096",
        "--global-batch",
        "64",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for ptr in [
        "/schema_version",
        "/step_time_s",
        "/tokens_per_s",
        "/mfu",
        "/memory/peak_bytes_per_gpu",
        "/memory/fits",
        "/power/avg_w_per_gpu",
        "/energy/j_per_token",
    ] {
        assert!(v.pointer(ptr).is_some(), "missing {ptr}");
    }
    assert_eq!(v.pointer("/memory/fits"), Some(&serde_json::Value::Bool(true)));
    let mfu = v.pointer("/mfu").unwrap().as_f64().unwrap();
    assert!(mfu > 0.2 && mfu < 0.8, "mfu {mfu}");
}

#[test]
fn not_fitting_exits_1_and_still_prints_the_prediction() {
    // Llama-3.1 405B on one H100 cannot hold its weights.
    let (code, out, _) = gpuplan(&["predict", "--model", "llama-3.1-405b", "--system", "dgx-h100", "--gpus", "1", "--seq", "2048", "--json"]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v.pointer("/memory/fits"), Some(&serde_json::Value::Bool(false)));
}

#[test]
fn unknown_model_suggests_the_nearest_name() {
    let (code, _, err) = gpuplan(&["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--seq", "2048"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown model `llama3-8b`") && err.contains("did you mean `llama-3-8b`"), "{err}");
}

#[test]
fn tp_that_does_not_divide_heads_is_bad_input() {
    let (code, _, err) = gpuplan(&["predict", "--model", "llama-3-8b", "--system", "dgx-h100", "--tp", "3", "--gpus", "3", "--seq", "2048"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("`n_heads` = 32 is not divisible by `tp` = 3"), "{err}");
}

#[test]
fn gpu_count_mismatch_is_bad_input() {
    let (code, _, err) = gpuplan(&["predict", "--model", "llama-3-8b", "--system", "dgx-h100", "--gpus", "8", "--tp", "2", "--dp", "2", "--seq", "2048"]);
    assert_eq!(code, 2);
    assert!(err.contains("`gpus` = `8` does not equal tp*pp*dp*cp"), "{err}");
}

#[test]
fn malformed_scenario_points_at_line_and_column() {
    let p = write_temp("bad.toml", "model = \"llama-3-8b\"\nsystem = dgx-h100\n");
    let (code, _, err) = gpuplan(&["predict", "--scenario", p.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("bad.toml:2:10"), "{err}");
    assert!(err.contains("^"), "{err}");
}

#[test]
fn unknown_key_and_negative_size_are_named() {
    let p = write_temp("unknown.toml", "model = \"llama-3-8b\"\nsystem = \"dgx-h100\"\n[workload]\nseqlen = 4096\n");
    let (code, _, err) = gpuplan(&["predict", "--scenario", p.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown field `seqlen`"), "{err}");
    let p = write_temp("negative.toml", "model = \"llama-3-8b\"\nsystem = \"dgx-h100\"\n[workload]\nseq = -5\nmicro_batch = 0\n");
    let (code, _, err) = gpuplan(&["predict", "--scenario", p.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("`workload.seq` = `-5` must be a positive integer"), "{err}");
    assert!(err.contains("`workload.micro_batch` = `0` must be a positive integer"), "{err}");
}

#[test]
fn check_accepts_the_catalog_and_rejects_a_bad_gpu_file() {
    let (code, _, err) = gpuplan(&["check", "models/llama-3-8b.toml", "calibration/systems/dgx-h100.toml", "calibration/systems/h100-sxm.toml"]);
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/calibration/systems/h100-sxm.toml")).unwrap();
    let bad = text.replacen("tdp_w = { value = 700", "tdp_w = { value = -700", 1);
    assert_ne!(bad, text, "fixture edit applies");
    let dir = std::env::temp_dir().join(format!("gpuplan-it-check-{}", std::process::id())).join("systems");
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("h100-sxm.toml");
    std::fs::write(&p, bad).unwrap();
    let (code, _, err) = gpuplan(&["check", p.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("`tdp_w.value` = `-700` must be positive"), "{err}");
}

#[test]
fn a_profile_applies_as_measured_on_its_gpu_and_transferred_on_another() {
    let sources = |system: &str| {
        let (code, out, err) = gpuplan(&[
            "predict",
            "--model",
            "llama-3-8b",
            "--system",
            system,
            "--gpus",
            "8",
            "--zero",
            "1",
            "--seq",
            "4096",
            "--calibration",
            "h200-sxm-1x",
            "--json",
        ]);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["sources"].as_array().unwrap().iter().find(|s| s["name"] == "gemm_max_fraction").cloned().unwrap()
    };
    let h200 = sources("hgx-h200");
    assert_eq!(h200["kind"], "measured", "{h200}");
    let b200 = sources("dgx-b200");
    assert_eq!(b200["kind"], "transferred", "{b200}");
    assert!(b200["source"].as_str().unwrap().contains("measured on NVIDIA H200"));
    // Transferred as a fraction of the H200's peak, not the H200's TFLOP/s over the B200's peak.
    let f: f64 = b200["value"].as_str().unwrap().parse().unwrap();
    assert!(f > 0.6 && f < 0.8, "{f}");
}

/// A shipped profile that predates the `attention` group (h200-sxm-2x) loads and prices attention
/// as before (a table that says "no shape dependence" gives the same predictions to the bit), and
/// a measured table with lower efficiency at the scenario's sequence length slows the step.
#[test]
fn a_profile_attention_table_shapes_attention_and_old_profiles_are_unchanged() {
    let predict = |system: &str, profile: &str| {
        let (code, out, err) = gpuplan(&[
            "predict",
            "--model",
            "llama-3-8b",
            "--system",
            system,
            "--gpus",
            "8",
            "--tp",
            "2",
            "--zero",
            "1",
            "--seq",
            "4096",
            "--global-batch",
            "64",
            "--calibration",
            profile,
            "--json",
        ]);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let factor = v["sources"].as_array().unwrap().iter().find(|s| s["name"] == "attention_shape_factor").cloned();
        (v["step_time_s"].as_f64().unwrap(), v["tokens_per_s"].as_f64().unwrap(), factor)
    };
    let point = |s: u64, d: u64, tflops: f64| {
        format!(
            "\n[[attention_bmm]]\nseq_len = {s}\nhead_dim = {d}\nbatch = {}\nqk_tflops = {tflops}\npv_tflops = {tflops}\nachieved_tflops = {tflops}\n",
            (1u64 << 29) / (s * s)
        )
    };
    // The shipped profile with a table: its factor applies, measured on its GPU, transferred on another.
    let (_, _, f) = predict("hgx-h200", "h200-sxm-1x");
    assert_eq!(f.expect("h200-sxm-1x has an attention table")["kind"], "measured");
    let (_, _, f) = predict("dgx-h100", "h200-sxm-1x");
    assert_eq!(f.expect("transferred to H100")["kind"], "transferred");
    let (_, _, f) = predict("dgx-h100", "h100-sxm-1x");
    assert_eq!(f.expect("h100-sxm-1x has an attention table")["kind"], "measured");
    {
        let (name, system) = ("h200-sxm-2x", "hgx-h200");
        let text = std::fs::read_to_string(format!("{}/calibration/profiles/{name}/profile.toml", env!("CARGO_MANIFEST_DIR"))).unwrap();
        assert!(!text.contains("attention_bmm"), "{name} has an attention table now: update this test");
        let (t0, tps0, f0) = predict(system, name);
        assert!(f0.is_none(), "{name}: {f0:?}");
        let flat = write_temp(&format!("{name}-flat.toml"), &format!("{text}{}{}{}", point(1024, 128, 500.0), point(8192, 128, 500.0), point(2048, 64, 500.0)));
        let (t1, tps1, f1) = predict(system, flat.to_str().unwrap());
        assert_eq!((t1, tps1), (t0, tps0), "{name}");
        assert_eq!(f1.unwrap()["kind"], "measured");
        // 4096 tokens at d = 128 measured at 3/4 of the reference's rate: attention slows, the step too.
        let slower = write_temp(&format!("{name}-shaped.toml"), &format!("{text}{}{}", point(4096, 128, 450.0), point(8192, 128, 600.0)));
        let (t2, _, f2) = predict(system, slower.to_str().unwrap());
        assert!(t2 > t0 * 1.001, "{name}: {t2} vs {t0}");
        assert_eq!(f2.unwrap()["value"], "0.750..1.000");
    }
}

/// Error text is part of the interface: every problem of a file, each with its key, value and hint.
#[test]
fn error_text_of_a_scenario_with_several_problems() {
    let p = write_temp(
        "several.toml",
        "model = \"llama-3-8b\"\nsystem = \"dgx-h100\"\ngpus = 8\n[parallelism]\ntp = 3\nzero = 7\n[workload]\nmode = \"serve\"\nseq = 0\nstack = \"jax\"\n",
    );
    let (code, _, err) = gpuplan(&["predict", "--scenario", p.to_str().unwrap()]);
    assert_eq!(code, 2);
    let err = err.replace(p.to_str().unwrap(), "several.toml");
    insta::assert_snapshot!("several_problems", err);
}

/// The readable table of the README's main scenario (deterministic: no wall-clock values in it).
#[test]
fn predict_table_of_the_main_scenario() {
    let (code, out, err) = gpuplan(&["predict", "--scenario", "scenarios/seed-8xb200-tp2-dp4-13b.toml"]);
    assert_eq!(code, 0, "{err}");
    insta::assert_snapshot!("predict_table_seed_13b", out);
}

/// A scenario that does not fit prints its prediction and exits 1: the seed's Llama-2 1.36B
/// Tier 1 run at the assumed 2048 tokens needs about 180 GiB per GPU under eager autocast (the
/// seed claims 40-50 GB).
#[test]
fn predict_of_a_scenario_that_does_not_fit_exits_1_with_the_table() {
    let (code, out, err) = gpuplan(&["predict", "--scenario", "scenarios/seed-llama2-1.36b-8xb200-ddp.toml"]);
    assert_eq!(code, 1, "{err}");
    assert!(out.contains("DOES NOT FIT") && out.contains("step time"), "{out}");
}

/// `predict --json` of every shipped scenario, held byte for byte (`INSTA_UPDATE=always cargo test`
/// after an intended change, then review the diff).
#[test]
fn predict_json_of_every_shipped_scenario() {
    let mut files: Vec<_> = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml") && !p.ends_with("seed-claims.toml"))
        .collect();
    files.sort();
    assert!(files.len() >= 10, "{files:?}");
    for f in files {
        let rel = f.strip_prefix(env!("CARGO_MANIFEST_DIR")).unwrap().to_str().unwrap().trim_start_matches('/').to_string();
        let (code, out, err) = gpuplan(&["predict", "--scenario", &rel, "--json"]);
        assert!(code == 0 || code == 1, "{rel}: exit {code}: {err}");
        let name = format!("predict_json__{}", f.file_stem().unwrap().to_str().unwrap());
        insta::assert_snapshot!(name, out);
    }
}

/// Out-of-range flag values are refused by the flag parser, naming the flag: a GPU count past
/// u32 is not cut, a negative value is a value (not "unexpected argument"), zero is not a count.
#[test]
fn out_of_range_flags_name_the_flag() {
    for (args, flag) in [
        (vec!["predict", "--model", "llama-3-8b", "--system", "dgx-h100", "--gpus", "4294967296", "--seq", "2048", "--global-batch", "64"], "'--gpus"),
        (vec!["simulate", "--model", "llama-3-8b", "--system", "dgx-h100", "--gpus", "4294967296", "--seq", "2048"], "'--gpus"),
        (vec!["plan", "--model", "llama-3-8b", "--system", "dgx-h100", "--min-gpus", "8", "--max-gpus", "4294967296", "--seq", "2048"], "'--max-gpus"),
        (vec!["compare", "--systems", "dgx-h100", "--model", "llama-3-8b", "--gpus", "4294967296", "--seq", "2048"], "'--gpus"),
        (vec!["predict", "--model", "llama-3-8b", "--system", "dgx-h100", "--tp", "-1"], "'--tp"),
        (vec!["predict", "--model", "llama-3-8b", "--system", "dgx-h100", "--gpus", "0"], "'--gpus"),
        (vec!["serve", "--model", "llama-3-8b", "--system", "dgx-h100", "--qps", "-1"], "'--qps"),
        (vec!["serve", "--model", "llama-3-8b", "--system", "dgx-h100", "--qps", "1", "--max-batch", "0"], "'--max-batch"),
    ] {
        let (code, _, err) = gpuplan(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains("invalid value") && err.contains(flag), "{args:?}: {err}");
    }
    // A scenario flag `serve` does not read is refused by name.
    // (`--dp` it reads since attention DP: `--attention-dp --dp N`.)
    let (code, _, err) = gpuplan(&["serve", "--model", "llama-3-8b", "--system", "dgx-h100", "--qps", "1", "--cp", "2"]);
    assert_eq!(code, 2);
    assert!(err.contains("`--cp` does not apply to `gpuplan serve`"), "{err}");
}
