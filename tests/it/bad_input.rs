//! Numbers read from files get a physical range: nonsense is an error naming the file, key and
//! value (exit 2), not a prediction (issue 22's "accepted nonsense" reproducers).

use std::path::{Path, PathBuf};
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn gpuplan(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuplan")).args(args).current_dir(ROOT).output().expect("run gpuplan");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gpuplan-it-bad-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `file` (under the repository) with `from` replaced by `to`, written into `dir`.
fn mutate(dir: &Path, file: &str, from: &str, to: &str) -> PathBuf {
    let text = std::fs::read_to_string(Path::new(ROOT).join(file)).unwrap();
    assert!(text.contains(from), "{file} has no `{from}`");
    let out = dir.join(file);
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    std::fs::write(&out, text.replacen(from, to, 1)).unwrap();
    out
}

#[test]
fn out_of_range_hardware_numbers_name_the_key() {
    let d = tmp("hw");
    // A GPU file beside a system file that names it.
    let gpu = mutate(&d, "calibration/systems/h100-sxm.toml", "hbm_capacity_gib = { value = 79.647", "hbm_capacity_gib = { value = 1e300");
    let (code, err) = gpuplan(&["check", gpu.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("hbm_capacity_gib.value") && err.contains("1e300") && err.contains("outside"), "{err}");

    let d = tmp("hw-fabric");
    let sys = mutate(&d, "calibration/systems/dgx-h100.toml", "oversubscription = { value = 1.0", "oversubscription = { value = 1e300");
    let (code, err) = gpuplan(&["check", sys.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("fabric.oversubscription.value") && err.contains("outside"), "{err}");

    let d = tmp("hw-pue");
    let sys = mutate(&d, "calibration/systems/dgx-h100.toml", "pue = { value = 1.56", "pue = { value = 1e300");
    let (code, err) = gpuplan(&["check", sys.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("pue.value"), "{err}");
}

#[test]
fn a_zero_head_dim_is_refused() {
    let d = tmp("model");
    let text = std::fs::read_to_string(Path::new(ROOT).join("models/llama-3-8b.toml")).unwrap();
    let m = d.join("m.toml");
    assert!(text.contains("head_dim = 128"));
    std::fs::write(&m, text.replace("head_dim = 128", "head_dim = 0")).unwrap();
    let (code, err) = gpuplan(&["predict", "--model", m.to_str().unwrap(), "--system", "dgx-h100", "--gpus", "8", "--seq", "4096", "--global-batch", "64"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("head_dim") && err.contains("must be positive"), "{err}");
}

#[test]
fn a_profile_gemm_row_above_the_gpus_peak_is_refused() {
    let d = tmp("profile").join("p");
    std::fs::create_dir_all(&d).unwrap();
    let src = Path::new(ROOT).join("calibration/profiles/h200-sxm-1x");
    for e in std::fs::read_dir(&src).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_file()) {
        std::fs::copy(&e, d.join(e.file_name().unwrap())).unwrap();
    }
    let toml = d.join("profile.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    // The first GEMM row measured at 100x the H200's bf16 peak.
    let at = text.find("[[gemm]]").unwrap();
    let key = "achieved_tflops = ";
    let k = at + text[at..].find(key).unwrap() + key.len();
    let end = k + text[k..].find('\n').unwrap();
    std::fs::write(&toml, format!("{}98900{}", &text[..k], &text[end..])).unwrap();
    let (code, err) = gpuplan(&[
        "predict",
        "--model",
        "llama-3-8b",
        "--system",
        "hgx-h200",
        "--gpus",
        "8",
        "--seq",
        "4096",
        "--global-batch",
        "64",
        "--calibration",
        d.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("gemm row 1") && err.contains("above"), "{err}");
}

#[test]
fn fp8_recipes_the_gpu_or_precision_cannot_run_are_refused() {
    let base = ["predict", "--model", "llama-3-8b", "--gpus", "8", "--seq", "4096", "--global-batch", "64"];
    let run = |extra: &[&str]| {
        let mut a: Vec<&str> = base.to_vec();
        a.extend_from_slice(extra);
        gpuplan(&a)
    };
    let (code, err) = run(&["--system", "dgx-h100", "--precision", "fp8", "--fp8-recipe", "mxfp8"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("workload.fp8_recipe") && err.contains("Blackwell") && err.contains("tensorwise"), "{err}");
    let (code, err) = run(&["--system", "dgx-b200", "--precision", "fp8", "--fp8-recipe", "rowwise-ish"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("is not known") && err.contains("delayed"), "{err}");
    let (code, err) = run(&["--system", "dgx-b200", "--precision", "bf16", "--fp8-recipe", "delayed"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("applies to precision fp8"), "{err}");
    // MXFP8 on Blackwell runs, and a recipe without an amax pass moves fewer bytes than tensorwise.
    let step = |recipe: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_gpuplan"))
            .args(base)
            .args(["--system", "dgx-b200", "--precision", "fp8", "--fp8-recipe", recipe, "--json"])
            .current_dir(ROOT)
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["step_time_s"].as_f64().unwrap()
    };
    assert!(step("mxfp8") < step("tensorwise") && step("delayed") < step("tensorwise"));
}

/// Issue 18's serving reproducer: without EP, a MoE model's experts are sharded over TP
/// (expert-TP = TP, as Megatron and TensorRT-LLM default), not copied whole to every GPU.
#[test]
fn moe_experts_are_sharded_over_tp_without_ep() {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuplan"))
        .args(["predict", "--model", "mixtral-8x22b", "--system", "dgx-h100", "--gpus", "8", "--tp", "8", "--mode", "decode", "--batch", "32"])
        .args(["--kv-len", "2048", "--json"])
        .current_dir(ROOT)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let weights_gib = v["memory"]["components"]["weights_bytes"].as_f64().unwrap() / f64::from(1u32 << 30);
    // 141B parameters in bf16 over 8 GPUs: about 33 GiB each (was 253 GiB with whole experts).
    assert!((30.0..36.0).contains(&weights_gib), "{weights_gib}");
}

#[test]
fn moe_dispatchers_move_what_they_move_and_unknown_ones_are_refused() {
    let step = |d: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_gpuplan"))
            .args(["predict", "--model", "deepseek-v3", "--system", "gb200-nvl72", "--gpus", "256", "--pp", "8", "--ep", "32", "--seq", "4096"])
            .args(["--global-batch", "1024", "--zero", "1", "--moe-dispatcher", d, "--json"])
            .current_dir(ROOT)
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
        (out.status.code(), v["breakdown"]["ep_comm_s"].as_f64(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (a2a, gather, flex) = (step("alltoall").1.unwrap(), step("allgather").1.unwrap(), step("flex").1.unwrap());
    // DeepEP sends a token once per rank it needs (fewer bytes than top-k copies); the all-gather
    // dispatcher moves every rank's tokens to every rank.
    assert!(flex < a2a && a2a < gather, "{flex} {a2a} {gather}");
    let (code, _, err) = step("ring");
    assert_eq!(code, Some(2));
    assert!(err.contains("workload.moe_dispatcher") && err.contains("alltoall, allgather, flex"), "{err}");
}
