//! Numbers read from files get a physical range: nonsense is an error naming the file, key and
//! value (exit 2), not a prediction (issue 22's "accepted nonsense" reproducers).

use std::path::{Path, PathBuf};
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// `gpuplan` with these argument lists in turn: exit code, the parsed JSON on stdout (null when
/// there is none), and stderr.
fn predict_json(args: &[&[&str]]) -> (Option<i32>, serde_json::Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuplan")).args(args.concat()).current_dir(ROOT).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out.status.code(), v, String::from_utf8_lossy(&out.stderr).into_owned())
}

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
fn a_scale_up_link_the_gpu_file_does_not_source_is_refused() {
    // L40S has no NVLink: a system joining its GPUs over NVLink names the missing keys and the fix.
    let d = tmp("hw-nvlink");
    let sys = mutate(&d, "calibration/systems/l40s-pcie-8x.toml", "scale_up = \"pcie\"", "scale_up = \"nvlink\"");
    let (code, err) = gpuplan(&["check", sys.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("scale_up") && err.contains("nvlink_bandwidth_bidir_gb_per_s") && err.contains("hint"), "{err}");
    // A scale-out network given in part: the keys that come together are named.
    let d = tmp("hw-nic");
    let sys = mutate(&d, "calibration/systems/l40s-pcie-8x.toml", "nics_per_node = 0", "nics_per_node = 2");
    let (code, err) = gpuplan(&["check", sys.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("nics_per_node") && err.contains("[fabric]"), "{err}");
}

#[test]
fn an_moe_layer_step_outside_the_layers_is_refused() {
    for (bad, shown) in [("\nlayer_step = 0", "`0`"), ("\nlayer_step = 49", "`49`")] {
        let d = tmp(&format!("moe-step-{shown}").replace('`', ""));
        let model = mutate(&d, "models/llama-4-maverick.toml", "\nlayer_step = 2", bad);
        let (code, err) = gpuplan(&["check", model.to_str().unwrap()]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("moe.layer_step") && err.contains(shown) && err.contains("hint"), "{err}");
    }
}

#[test]
fn bad_expert_groups_are_refused() {
    for (i, (bad, key, shown)) in [
        ("expert_groups = 7\ngroup_top_k = 4", "moe.expert_groups", "`7`"),
        ("expert_groups = 8\ngroup_top_k = 9", "moe.group_top_k", "`9`"),
        ("expert_groups = 8\n", "moe.expert_groups", "`8`"),
    ]
    .into_iter()
    .enumerate()
    {
        let d = tmp(&format!("moe-groups-{i}"));
        let model = mutate(&d, "models/deepseek-v3.toml", "expert_groups = 8\ngroup_top_k = 4", bad);
        let (code, err) = gpuplan(&["check", model.to_str().unwrap()]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(key) && err.contains(shown) && err.contains("hint"), "{err}");
    }
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
    // NVFP4 training needs Blackwell's FP4 tensor cores: refused on Hopper with the flag and a hint.
    let (code, err) = run(&["--system", "dgx-h100", "--precision", "fp4"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("workload.precision") && err.contains("FP4 tensor cores") && err.contains("--precision fp8"), "{err}");
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
    // torchao's rowwise recipe is the compiled torch stacks' only: refused under Megatron, naming
    // the key, the value and the stacks that run it.
    let (code, err) = run(&["--system", "dgx-h100", "--precision", "fp8", "--fp8-recipe", "rowwise"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("workload.fp8_recipe") && err.contains("rowwise") && err.contains("hf-compile"), "{err}");
    let (code, err) = run(&["--system", "dgx-h100", "--precision", "fp8", "--fp8-recipe", "rowwise", "--stack", "torch-eager"]);
    assert_eq!(code, 2, "{err}");
}

/// torchao rowwise under compile: its forward GEMM runs the rowwise kernel (0.965x tensorwise,
/// measured), but both gradient GEMMs' outputs are rescaled in a pass of their own and its casts
/// read the input once more, so a step is slower than tensorwise (and here faster than bf16).
#[test]
fn rowwise_float8_costs_more_than_tensorwise_under_the_compiled_torch_stacks() {
    let step = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_gpuplan"))
            .args(["predict", "--model", "scenarios/workloads/hf_configs/llama-3.2-3b.json", "--system", "dgx-h100", "--gpus", "1"])
            .args(["--mode", "train", "--micro-batch", "1", "--global-batch", "1", "--seq", "4096", "--stack", "hf-compile", "--json"])
            .args(extra)
            .current_dir(ROOT)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["step_time_s"].as_f64().unwrap()
    };
    let (bf16, tw, rw) = (step(&[]), step(&["--precision", "fp8", "--fp8-recipe", "tensorwise"]), step(&["--precision", "fp8", "--fp8-recipe", "rowwise"]));
    assert!(tw < rw && rw < bf16, "bf16 {bf16} tensorwise {tw} rowwise {rw}");
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

#[test]
fn flex_backends_permute_where_megatron_core_does_and_bad_ones_are_refused() {
    // Qwen3-30B-A3B training on 8 B200, EP 8, MXFP8 (the dev rows' layout at micro-batch 4).
    let run = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_gpuplan"))
            .args(["predict", "--model", "qwen3-30b-a3b", "--system", "dgx-b200", "--gpus", "8", "--ep", "8", "--seq", "4096"])
            .args(["--micro-batch", "4", "--global-batch", "512", "--zero", "1", "--precision", "fp8", "--fp8-recipe", "mxfp8", "--json"])
            .args(extra)
            .current_dir(ROOT)
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
        (out.status.code(), v["breakdown"]["memory_bound_s"].as_f64(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let a2a = run(&[]).1.unwrap();
    let deepep = run(&["--moe-dispatcher", "flex"]).1.unwrap();
    assert_eq!(run(&["--moe-dispatcher", "flex", "--moe-flex-backend", "deepep"]).1.unwrap(), deepep, "deepep is the default backend");
    let hybridep = run(&["--moe-dispatcher", "flex", "--moe-flex-backend", "hybridep"]).1.unwrap();
    // alltoall: permute, sort by local expert, and both undone; DeepEP: the received rows permuted
    // and back; HybridEP: inside its dispatch and combine kernels.
    assert!(hybridep < deepep && deepep < a2a, "{hybridep} {deepep} {a2a}");
    let (code, _, err) = run(&["--moe-dispatcher", "flex", "--moe-flex-backend", "nvshmem"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("workload.moe_flex_backend") && err.contains("deepep, hybridep"), "{err}");
    let (code, _, err) = run(&["--moe-flex-backend", "hybridep"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("workload.moe_flex_backend") && err.contains("--moe-dispatcher flex"), "{err}");
}

// ---- Nothing overwritten, nothing lost (issue 22's "overwrites" reproducers) ----

const SERVE: &[&str] = &["serve", "--model", "llama-3-8b", "--system", "dgx-h100", "--gpus", "1"];

fn trace(d: &Path) -> PathBuf {
    let t = d.join("t.csv");
    std::fs::write(&t, "arrival_s,input_len,output_len\n0,100,10\n0.5,200,20\n").unwrap();
    t
}

fn with(base: &[&str], more: &[&str]) -> Vec<String> {
    base.iter().chain(more).map(|s| s.to_string()).collect()
}

fn run(v: &[String]) -> (i32, String) {
    gpuplan(&v.iter().map(String::as_str).collect::<Vec<_>>())
}

#[test]
fn serve_never_writes_over_its_trace_nor_an_existing_file_without_force() {
    let d = tmp("serve-out");
    let t = trace(&d);
    let before = std::fs::read(&t).unwrap();
    let ts = t.to_str().unwrap();
    // Its own input, even with --force (the reproducer destroyed it).
    for force in [false, true] {
        let mut v = with(SERVE, &["--trace", ts, "--requests-csv", ts]);
        if force {
            v.push("--force".into());
        }
        let (code, err) = run(&v);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("--requests-csv") && err.contains("--trace") && err.contains("t.csv"), "{err}");
        assert_eq!(std::fs::read(&t).unwrap(), before);
    }
    // The same file by another spelling is still the input.
    let other = d.join(".").join("t.csv");
    let (code, err) = run(&with(SERVE, &["--trace", ts, "--csv", other.to_str().unwrap()]));
    assert_eq!(code, 2, "{err}");
    // Every output flag: refused when the file exists, replaced with --force.
    for flag in ["--csv", "--requests-csv", "--iterations-csv"] {
        let out = d.join(format!("{}.csv", flag.trim_start_matches('-')));
        std::fs::write(&out, "mine").unwrap();
        let o = out.to_str().unwrap();
        let (code, err) = run(&with(SERVE, &["--trace", ts, flag, o]));
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(flag) && err.contains(o) && err.contains("--force"), "{err}");
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "mine");
        let (code, err) = run(&with(SERVE, &["--trace", ts, flag, o, "--force"]));
        assert_eq!(code, 0, "{err}");
        assert_ne!(std::fs::read_to_string(&out).unwrap(), "mine");
    }
    // Two outputs on one file.
    let a = d.join("a.csv");
    let (code, err) = run(&with(SERVE, &["--trace", ts, "--csv", a.to_str().unwrap(), "--requests-csv", a.to_str().unwrap()]));
    assert_eq!(code, 2, "{err}");
    assert!(!a.exists());
    // The sweep chart.
    let c = d.join("c.svg");
    std::fs::write(&c, "mine").unwrap();
    let (code, err) = gpuplan(&[
        "serve",
        "--model",
        "llama-3-8b",
        "--system",
        "dgx-h100",
        "--gpus",
        "1",
        "--input-len",
        "100",
        "--output-len",
        "10",
        "--sweep-qps",
        "1,2",
        "--duration-s",
        "2",
        "--chart",
        c.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--chart") && err.contains("--force"), "{err}");
    assert_eq!(std::fs::read_to_string(&c).unwrap(), "mine");
    // No temporary file is left behind.
    let left: Vec<_> = std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).filter(|n| n.contains(".tmp-")).collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn simulate_and_validate_outputs_are_not_their_inputs() {
    let d = tmp("sim-out");
    let sc = d.join("s.toml");
    std::fs::copy(Path::new(ROOT).join("scenarios/seed-8xb200-tp2-dp4-13b.toml"), &sc).unwrap();
    let before = std::fs::read(&sc).unwrap();
    let s = sc.to_str().unwrap();
    let (code, err) = gpuplan(&["simulate", "--scenario", s, "--trace", s, "--force"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--trace") && err.contains("--scenario"), "{err}");
    assert_eq!(std::fs::read(&sc).unwrap(), before);
    let (code, err) = gpuplan(&["simulate", "--scenario", s, "--timeline", d.join("t.jpg").to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--timeline") && err.contains(".png or .svg"), "{err}");

    let runs = d.join("r.jsonl");
    std::fs::copy(Path::new(ROOT).join("calibration/runs/h200.jsonl"), &runs).unwrap();
    let r = runs.to_str().unwrap();
    let (code, err) = gpuplan(&["validate", "--runs", r, "--csv", r, "--force"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--csv") && err.contains("--runs"), "{err}");
}

#[test]
fn measure_refuses_to_append_to_a_file_of_other_things_or_replace_a_log() {
    let d = tmp("measure");
    let notes = d.join("notes.txt");
    std::fs::write(&notes, "my notes\n").unwrap();
    let (code, err) = gpuplan(&["measure", "--out", notes.to_str().unwrap(), "--", "true"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--out") && err.contains("notes.txt") && err.contains("not a run-record file"), "{err}");
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "my notes\n");
    let (code, err) = gpuplan(&["measure", "--log", notes.to_str().unwrap(), "--", "echo", "hi"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--log") && err.contains("--force"), "{err}");
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "my notes\n");
    // A record file of run records takes more; an empty file too.
    let empty = d.join("runs.jsonl");
    std::fs::write(&empty, "").unwrap();
    assert!(gpuplan_measure_appendable(&empty));
    assert!(!gpuplan_measure_appendable(&notes));
    assert!(gpuplan_measure_appendable(&Path::new(ROOT).join("calibration/runs/h200.jsonl")));
}

fn gpuplan_measure_appendable(p: &Path) -> bool {
    gpuplan::measure::record::check_appendable(p).is_ok()
}

// ---- Errors that name the file, key and value ----

#[test]
fn names_inside_a_scenario_file_are_reported_with_the_file_and_key() {
    let d = tmp("names");
    let sc = mutate(&d, "scenarios/seed-8xb200-tp2-dp4-13b.toml", "model = \"llama-2-13b\"", "model = \"llama-9-13b\"");
    let (code, err) = gpuplan(&["predict", "--scenario", sc.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("seed-8xb200-tp2-dp4-13b.toml: `model` = `llama-9-13b` is not a known model"), "{err}");
    let sv = mutate(&d, "scenarios/serving/llama-3-8b-chat-8xh100.toml", "system = \"dgx-h100\"", "system = \"dgx-h900\"");
    let (code, err) = gpuplan(&["serve", "--scenario", sv.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("llama-3-8b-chat-8xh100.toml: `system` = `dgx-h900` is not a known system"), "{err}");
    // A serving file's own checks name it too.
    let sv = mutate(&d, "scenarios/serving/llama-3-8b-chat-8xh100.toml", "routing = \"least-loaded\"", "routing = \"nearest\"");
    let (code, err) = gpuplan(&["serve", "--scenario", sv.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("llama-3-8b-chat-8xh100.toml: `routing` = `nearest`"), "{err}");
}

#[test]
fn a_run_record_error_names_the_line_and_the_field() {
    let d = tmp("record");
    let text = std::fs::read_to_string(Path::new(ROOT).join("calibration/runs/h200.jsonl")).unwrap();
    let first = text.lines().next().unwrap();
    let f = d.join("r.jsonl");
    std::fs::write(&f, first.replacen("\"n_steps_parsed\":", "\"n_steps_parsed\":\"many\",\"x\":", 1)).unwrap();
    let (code, err) = gpuplan(&["validate", "--runs", f.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("r.jsonl:1: `metrics.n_steps_parsed` = `\"many\"`"), "{err}");
}

#[test]
fn a_duplicated_table_is_reported_where_it_is() {
    let d = tmp("dup");
    let sys = d.join("calibration/systems/s.toml");
    std::fs::create_dir_all(sys.parent().unwrap()).unwrap();
    let text = std::fs::read_to_string(Path::new(ROOT).join("calibration/systems/dgx-h100.toml")).unwrap();
    std::fs::write(&sys, format!("{text}\n[fabric]\nkind = \"ethernet\"\n")).unwrap();
    let (code, err) = gpuplan(&["predict", "--model", "llama-3-8b", "--system", sys.to_str().unwrap(), "--gpus", "8", "--seq", "2048", "--global-batch", "64"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("s.toml:") && err.contains("fabric") && !err.contains("`?`"), "{err}");
}

#[test]
fn zero_gpus_names_the_flag() {
    let (code, err) = gpuplan(&["predict", "--model", "llama-3-8b", "--system", "dgx-h100", "--gpus", "0", "--seq", "2048", "--global-batch", "64"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--gpus") && err.contains("'0'"), "{err}");
}

// ---- Accepted nonsense ----

#[test]
fn plan_refuses_what_predict_refuses_in_a_scenario_file() {
    let d = tmp("plan");
    for (from, to, key) in [
        ("tp = 2", "tp = -8", "parallelism.tp"),
        ("micro_batch = 6", "micro_batch = -20", "workload.micro_batch"),
        ("tp = 2", "tp = 2\nschedule = \"zigzag\"", "parallelism.schedule"),
    ] {
        let sc = mutate(&d, "scenarios/seed-8xb200-tp2-dp4-13b.toml", from, to);
        for cmd in ["predict", "plan"] {
            let (code, err) = gpuplan(&[cmd, "--scenario", sc.to_str().unwrap(), "--no-progress"][..if cmd == "plan" { 4 } else { 3 }]);
            assert_eq!(code, 2, "{cmd} {to}: {err}");
            assert!(err.contains(key), "{cmd} {to}: {err}");
        }
    }
}

#[test]
fn context_parallelism_needs_seq_divisible_by_two_cp() {
    let (code, err) =
        gpuplan(&["predict", "--model", "llama-3-8b", "--system", "dgx-h100", "--gpus", "3", "--cp", "3", "--seq", "8192", "--global-batch", "63"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("`seq` = 8192") && err.contains("2*cp = 6") && err.contains("hint"), "{err}");
    let (code, err) =
        gpuplan(&["predict", "--model", "llama-3-8b", "--system", "dgx-h100", "--gpus", "2", "--cp", "2", "--seq", "8192", "--global-batch", "64"]);
    assert!(code != 2 && !err.contains("2*cp"), "{err}");
}

#[test]
fn nccl_tests_rows_with_nan_are_refused_with_line_and_column() {
    let d = tmp("nccl");
    let log = d.join("all_reduce_perf.log");
    std::fs::write(
        &log,
        "#  Rank  0 Group  0 Pid   1 on node-a device  0 [0x18] NVIDIA H100 80GB HBM3\n#  Rank  1 Group  0 Pid   2 on node-a device  1 [0x2a] NVIDIA H100 80GB HBM3\n     1048576   262144  float  sum  -1   NaN  119.30  178.96  0   40.0  119.44  179.16  0\n",
    )
    .unwrap();
    let (code, err) = gpuplan(&["calibrate", "--import-nccl-tests", log.to_str().unwrap(), "--name", "x", "--out-dir", d.join("p").to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("all_reduce_perf.log:3:") && err.contains("`time` = `NaN`"), "{err}");
    assert!(!d.join("p").exists());
    // A good log imports; `--force` replaces the profile's files and leaves the user's.
    std::fs::write(&log, std::fs::read_to_string(&log).unwrap().replace("NaN", "40.0")).unwrap();
    let out = d.join("p");
    let args = ["calibrate", "--import-nccl-tests", log.to_str().unwrap(), "--name", "x", "--out-dir", out.to_str().unwrap()];
    let (code, err) = gpuplan(&args);
    assert_eq!(code, 0, "{err}");
    std::fs::write(d.join("p/x/notes.txt"), "mine").unwrap();
    let (code, err) = gpuplan(&args);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--force"), "{err}");
    let (code, err) = gpuplan(&[&args[..], &["--force"]].concat());
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read_to_string(d.join("p/x/notes.txt")).unwrap(), "mine");
}

#[test]
fn a_hybrid_pattern_that_does_not_fit_the_model_is_refused() {
    // A pattern one layer short of `n_layers`.
    let d = tmp("hybrid-len");
    let m = mutate(&d, "models/nemotron-h-8b.toml", "pattern = \"M-M-M-M*", "pattern = \"M-M-M*");
    let (code, err) = gpuplan(&["check", m.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("`hybrid.pattern`") && err.contains("has 50 layers, `n_layers` = 52") && err.contains("hint"), "{err}");
    // A symbol Megatron has but gpuplan does not model (`G`, gated delta net).
    let d = tmp("hybrid-symbol");
    let m = mutate(&d, "models/nemotron-h-8b.toml", "pattern = \"M-M-M-M*", "pattern = \"M-M-M-G*");
    let (code, err) = gpuplan(&["predict", "--model", m.to_str().unwrap(), "--system", "dgx-h100", "--gpus", "8"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("has `G` at layer 6, which is not a known layer symbol") && err.contains("hint: one symbol per layer"), "{err}");
}

#[test]
fn mamba_groups_that_tp_does_not_divide_name_flag_value_and_hint() {
    // TP 16 divides the attention heads, the MLP and the 128 SSM heads but not the 8 B/C groups.
    let (code, err) =
        gpuplan(&["predict", "--model", "nemotron-h-8b", "--system", "dgx-h100", "--gpus", "16", "--tp", "16", "--global-batch", "16", "--seq", "4096"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("`n_groups` = 8: not divisible by `tp` = 16") && err.contains("hint: use a `--tp` that divides 8"), "{err}");
    // Context parallelism over Mamba-2 layers is refused, not approximated.
    let (code, err) =
        gpuplan(&["predict", "--model", "nemotron-h-8b", "--system", "dgx-h100", "--gpus", "8", "--cp", "8", "--global-batch", "8", "--seq", "8192"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("`cp` = 8") && err.contains("MambaContextParallel"), "{err}");
}

/// Only a learned position-embedding table bounds the sequence. RoPE models train past
/// `max_position_embeddings` (long-context extension with context parallelism), so Llama-3 8B
/// (`max_seq_len` 8192) at 128K tokens over CP 16 is a prediction, while GPT-3 5B (learned
/// positions, 2048 rows) at 4096 tokens is refused naming the key, the value and the limit.
#[test]
fn only_learned_positions_bound_the_sequence() {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuplan"))
        .args(["predict", "--model", "llama-3-8b", "--system", "dgx-h100", "--gpus", "64", "--tp", "4", "--cp", "16"])
        .args(["--seq", "131072", "--global-batch", "1", "--zero", "1", "--json"])
        .current_dir(ROOT)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["tokens_per_s"].as_f64().is_some_and(|t| t > 0.0), "{v}");

    let (code, err) = gpuplan(&["predict", "--model", "gpt3-5b", "--system", "dgx-h100", "--gpus", "8", "--seq", "4096", "--global-batch", "8"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("workload.seq") && err.contains("4096") && err.contains("max_seq_len") && err.contains("2048"), "{err}");
}

#[test]
fn mtp_modules_add_their_layer_on_the_last_stage_and_too_many_are_refused() {
    let run = |extra: &[&str]| {
        predict_json(&[
            &["predict", "--model", "deepseek-v3", "--system", "gb200-nvl72", "--gpus", "256", "--pp", "4", "--vp", "4", "--ep", "64", "--seq", "4096"],
            &["--global-batch", "4096", "--zero", "1", "--precision", "fp8", "--fp8-recipe", "mxfp8", "--json"],
            extra,
        ])
    };
    let (_, main, _) = run(&[]);
    let (_, mtp, _) = run(&["--mtp-layers", "1"]);
    let step = |v: &serde_json::Value| v["step_time_s"].as_f64().unwrap();
    let peak = |v: &serde_json::Value| v["memory"]["peak_bytes_per_gpu"].as_f64().unwrap();
    // One more MoE layer and a second LM head and loss on the last of 16 virtual stages, which
    // holds 1 of the 61 layers (the recipes' layout, E+4 | 4 x 14 | 1+MTP+L): it fits in that
    // stage's slack, so the step barely grows, while the model FLOPs count it (NVIDIA's 260 G vs
    // 249.5 G per token: MFU up about 4%).
    let grow = step(&mtp) / step(&main) - 1.0;
    assert!((0.0..0.02).contains(&grow), "step +{:.2}%", grow * 100.0);
    // MFU is model FLOPs over step time: times the step's growth, the ratio is the FLOP count's.
    let mfu = mtp["mfu"].as_f64().unwrap() / main["mfu"].as_f64().unwrap() * (1.0 + grow);
    assert!((1.03..1.05).contains(&mfu), "{mfu}");
    // The peak GPU is the first stage (most micro-batches in flight), which MTP does not touch.
    assert_eq!(peak(&mtp), peak(&main));
    // DeepSeek-V3 has one MTP module (config.json num_nextn_predict_layers = 1).
    let (code, _, err) = run(&["--mtp-layers", "2"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("workload.mtp_layers") && err.contains('2') && err.contains("num_nextn_predict_layers"), "{err}");
}

#[test]
fn megatron_cuda_graphs_remove_host_time_and_are_refused_elsewhere() {
    let run = |extra: &[&str]| {
        predict_json(&[
            &["predict", "--model", "qwen3-30b-a3b", "--system", "dgx-b200", "--gpus", "8", "--ep", "8", "--micro-batch", "1", "--global-batch", "512"],
            &["--seq", "4096", "--precision", "fp8", "--fp8-recipe", "mxfp8", "--zero", "1", "--json"],
            extra,
        ])
    };
    let (_, eager, _) = run(&[]);
    let (_, partial, _) = run(&["--train-cuda-graphs", "partial"]);
    let (_, full, _) = run(&["--train-cuda-graphs", "full"]);
    let cpu = |v: &serde_json::Value| v["breakdown"]["cpu_launch_s"].as_f64().unwrap();
    let step = |v: &serde_json::Value| v["step_time_s"].as_f64().unwrap();
    // Eager and partial graphs keep the dispatcher's host sync per MoE layer; the full-iteration
    // graph has none and no launches either.
    assert!(cpu(&eager) > 0.3 * step(&eager), "{} of {}", cpu(&eager), step(&eager));
    assert!(step(&partial) <= step(&eager) && cpu(&partial) > 0.0);
    assert_eq!(cpu(&full), 0.0);
    assert!(step(&full) < 0.5 * step(&eager), "{} vs {}", step(&full), step(&eager));
    let (code, _, err) = run(&["--train-cuda-graphs", "piecewise"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("options.cuda_graphs") && err.contains("none, partial, full"), "{err}");
    let (code, _, err) = run(&["--train-cuda-graphs", "full", "--stack", "torch-compile"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("options.cuda_graphs") && err.contains("megatron"), "{err}");
}

/// Issue 18: Megatron's EP communication overlap (`--overlap-moe-expert-parallel-comm`) and expert
/// capacity (`--moe-expert-capacity-factor`, `--moe-pad-expert-input-to-capacity`): what they do to
/// a step, and bad values exit 2 naming the key.
#[test]
fn moe_ep_overlap_and_capacity_factor_act_and_bad_values_exit_2() {
    let run = |extra: &[&str]| {
        // Flag-value pairs; `extra` replaces a base flag's value or adds the flag.
        let mut args: Vec<[&str; 2]> = vec![["--model", "qwen3-30b-a3b"], ["--system", "dgx-b200"], ["--gpus", "8"], ["--ep", "8"], ["--micro-batch", "4"]];
        args.extend([
            ["--global-batch", "512"],
            ["--seq", "4096"],
            ["--precision", "fp8"],
            ["--fp8-recipe", "mxfp8"],
            ["--zero", "1"],
            ["--moe-dispatcher", "flex"],
        ]);
        for kv in extra.chunks(2) {
            match args.iter_mut().find(|a| a[0] == kv[0]) {
                Some(a) => a[1] = kv[1],
                None => args.push([kv[0], kv[1]]),
            }
        }
        let args: Vec<&str> = args.iter().flatten().copied().collect();
        predict_json(&[&["predict", "--json"], &args])
    };
    let ep = |v: &serde_json::Value| v["breakdown"]["ep_comm_s"].as_f64().unwrap();
    let cpu = |v: &serde_json::Value| v["breakdown"]["cpu_launch_s"].as_f64().unwrap();
    let step = |v: &serde_json::Value| v["step_time_s"].as_f64().unwrap();
    // 16 micro-batches at pp 1: the first forward and the last backward run alone (1/16 of the
    // all-to-alls exposed), the rest beside the other micro-batch's compute at HybridEP's 32 of
    // B200's 148 SMs: 1/16 + 15/16 x 32/148 = 26.5% of the all-to-all time stays.
    let (_, plain, _) = run(&["--train-cuda-graphs", "full"]);
    let (_, overlap, _) = run(&["--train-cuda-graphs", "full", "--moe-ep-overlap", "true"]);
    let kept = ep(&overlap) / ep(&plain);
    assert!((kept - (1.0 / 16.0 + 15.0 / 16.0 * 32.0 / 148.0)).abs() < 0.01, "{kept}");
    assert!(step(&overlap) < step(&plain) - 0.5 * (ep(&plain) - ep(&overlap)), "{} vs {}", step(&overlap), step(&plain));
    // Megatron's own refusals, with the key named.
    for (args, says) in [
        (&["--moe-ep-overlap", "true", "--ep", "1"][..], "ep"),
        (&["--moe-ep-overlap", "true", "--moe-dispatcher", "allgather"][..], "allgather"),
        (&["--moe-ep-overlap", "true", "--recompute", "full"][..], "full recompute"),
        (&["--moe-ep-overlap", "true", "--pp", "2", "--gpus", "16"][..], "virtual pipeline"),
    ] {
        let (code, _, err) = run(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains("options.moe_ep_overlap") && err.contains(says) && err.contains("hint:"), "{args:?}: {err}");
    }

    // Capacity: routing 1.5x imbalanced; a capacity factor of 1.25 drops what is beyond it, so the
    // busiest rank's expert GEMMs and all-to-all shrink; padding to capacity makes the token counts
    // constants, so the dispatcher's host sync (eager, no full graph) goes.
    let (_, skewed, _) = run(&["--routing-imbalance", "1.5"]);
    let (_, capped, _) = run(&["--routing-imbalance", "1.5", "--moe-capacity-factor", "1.25"]);
    let (_, padded, _) = run(&["--routing-imbalance", "1.5", "--moe-capacity-factor", "1.25", "--moe-pad-to-capacity", "true"]);
    assert!((ep(&capped) / ep(&skewed) - 1.25 / 1.5).abs() < 0.02, "{} {}", ep(&capped), ep(&skewed));
    assert!(step(&capped) < step(&skewed));
    assert!(cpu(&padded) < 0.5 * cpu(&capped), "{} {}", cpu(&padded), cpu(&capped));
    let (_, dropless, _) = run(&[]);
    let (_, one, _) = run(&["--moe-capacity-factor", "1.0", "--moe-pad-to-capacity", "true"]);
    assert!(step(&one) < step(&dropless), "balanced and padded at 1.0: the same work without the sync");
    for (args, key, says) in [
        (&["--moe-capacity-factor", "0"][..], "workload.moe_capacity_factor", "above 0"),
        (&["--moe-capacity-factor", "-1"][..], "workload.moe_capacity_factor", "above 0"),
        (&["--moe-capacity-factor", "NaN"][..], "workload.moe_capacity_factor", "above 0"),
        (&["--moe-pad-to-capacity", "true"][..], "workload.moe_pad_to_capacity", "no capacity"),
        (&["--moe-capacity-factor", "1.0", "--model", "llama-3-8b", "--ep", "1"][..], "workload.moe_capacity_factor", "dense"),
    ] {
        let (code, _, err) = run(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(key) && err.contains(says) && err.contains("hint:"), "{args:?}: {err}");
    }
}

/// Megatron's `--moe-shared-expert-overlap`: DeepSeek-V3's shared expert runs beside the alltoall
/// dispatcher's all-to-alls, so the exposed EP time falls; Megatron's refusals exit 2.
#[test]
fn shared_expert_overlap_hides_all_to_alls_and_is_refused_where_megatron_refuses_it() {
    let run = |extra: &[&str]| {
        predict_json(&[
            &["predict", "--model", "deepseek-v3", "--system", "dgx-b200", "--gpus", "256", "--pp", "16", "--ep", "8", "--micro-batch", "1"],
            &["--global-batch", "2048", "--seq", "4096", "--precision", "fp8", "--zero", "1", "--json"],
            extra,
        ])
    };
    let ep = |v: &serde_json::Value| v["breakdown"]["ep_comm_s"].as_f64().unwrap();
    let (_, plain, _) = run(&[]);
    let (_, overlap, _) = run(&["--moe-shared-expert-overlap", "true"]);
    // One shared expert of width 2048 beside eight routed copies' all-to-alls. What it hides is
    // charged back at MEGATRON_OVERLAP_COST of the hidden time (NCCL's share of the SMs); at the
    // session-9 joint refit (1.0) that is all of it, so the overlap neither gains nor loses.
    assert!(ep(&overlap) <= ep(&plain) * (1.0 + 1e-9) && ep(&overlap) > 0.8 * ep(&plain), "{} vs {}", ep(&overlap), ep(&plain));
    assert!(overlap["step_time_s"].as_f64().unwrap() <= plain["step_time_s"].as_f64().unwrap() * (1.0 + 1e-9));
    for (args, says) in [
        (&["--moe-shared-expert-overlap", "true", "--moe-dispatcher", "flex"][..], "alltoall"),
        (&["--moe-shared-expert-overlap", "true", "--moe-ep-overlap", "true", "--vp", "2"][..], "moe_ep_overlap"),
    ] {
        let (code, _, err) = run(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains("options.moe_shared_expert_overlap") && err.contains(says) && err.contains("hint:"), "{args:?}: {err}");
    }
    let (code, err) = gpuplan(&[
        "predict",
        "--model",
        "qwen3-30b-a3b",
        "--system",
        "dgx-b200",
        "--gpus",
        "8",
        "--ep",
        "8",
        "--seq",
        "4096",
        "--moe-shared-expert-overlap",
        "true",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("options.moe_shared_expert_overlap") && err.contains("has none"), "{err}");
}

#[test]
fn packed_documents_outside_training_or_the_sequence_are_refused() {
    let base = ["predict", "--model", "llama-3-8b", "--system", "dgx-h100", "--gpus", "8", "--global-batch", "64"];
    let run = |extra: &[&str]| {
        let mut a: Vec<&str> = base.to_vec();
        a.extend_from_slice(extra);
        gpuplan(&a)
    };
    let (code, err) = run(&["--seq", "4096", "--packed-doc-len", "8192"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("workload.packed_doc_len") && err.contains("8192") && err.contains("hint"), "{err}");
    let (code, err) = run(&["--seq", "4096", "--cp", "2", "--packed-doc-len", "256"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("workload.packed_doc_len") && err.contains("context parallelism") && err.contains("--cp 1"), "{err}");
    let (code, err) = run(&["--mode", "prefill", "--batch", "4", "--seq", "4096", "--packed-doc-len", "256"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("applies to training"), "{err}");
    let (code, err) = run(&["--seq", "4096", "--packed-doc-len", "0"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("packed"), "{err}");
    // Packed short documents train faster than one 4096-token document per sequence (exit 1 or
    // 0: the prediction is printed whether or not this layout fits).
    let step = |extra: &[&str]| {
        let (code, v, err) = predict_json(&[&base, &["--seq", "4096", "--stack", "megatron", "--json"], extra]);
        assert!(matches!(code, Some(0 | 1)), "{err}");
        v["step_time_s"].as_f64().unwrap()
    };
    let (full, packed) = (step(&[]), step(&["--packed-doc-len", "256"]));
    assert!(packed < 0.95 * full, "packed {packed} s vs {full} s");
}
