//! LoRA fine-tuning (`--lora-rank`, `--lora-targets`, `workload.lora_rank` / `lora_targets`):
//! what it changes in a prediction, and the bad input it refuses (exit 2 naming the key, the
//! value and the flag).

use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Llama-3 70B on one DGX H100 as the Megatron-Bridge LoRA dev row 25 runs it (TP 2, PP 4, VP 20).
const BASE: &[&str] = &[
    "--model",
    "llama-3-70b",
    "--system",
    "dgx-h100",
    "--gpus",
    "8",
    "--tp",
    "2",
    "--pp",
    "4",
    "--vp",
    "20",
    "--seq",
    "4096",
    "--global-batch",
    "32",
    "--precision",
    "fp8",
];

fn gpuplan(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuplan")).args(args).current_dir(ROOT).output().expect("run gpuplan");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn predict(extra: &[&str]) -> serde_json::Value {
    let mut a = vec!["predict"];
    a.extend_from_slice(BASE);
    a.extend_from_slice(extra);
    a.push("--json");
    let (code, out, err) = gpuplan(&a);
    assert!(code == 0 || code == 1, "{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn lora_trains_adapters_only_and_frees_the_optimizer_memory() {
    let full = predict(&[]);
    let lora = predict(&["--lora-rank", "16"]);
    let mem = |v: &serde_json::Value, k: &str| v["memory"]["components"][k].as_f64().unwrap();
    // Adapters: r (d_in + d_out) per target per layer = 16 x 137,216 x 80 = 175.6M, over TP 2
    // and this stage's 20 of 80 layers: 4 B fp32 gradients and 12 B fp32 master + Adam each.
    let adapters_on_rank = 16.0 * 137_216.0 * 20.0 / 2.0;
    assert!((mem(&lora, "gradients_bytes") / (4.0 * adapters_on_rank) - 1.0).abs() < 1e-9, "{lora:#}");
    assert!((mem(&lora, "optimizer_bytes") / (12.0 * adapters_on_rank) - 1.0).abs() < 1e-9);
    // 175.6M of 70.6B parameters: 0.25%.
    assert!(mem(&lora, "optimizer_bytes") < 0.003 * mem(&full, "optimizer_bytes"));
    assert!(lora["memory"]["peak_bytes_per_gpu"].as_f64().unwrap() < 0.5 * full["memory"]["peak_bytes_per_gpu"].as_f64().unwrap());
    assert_eq!(full["memory"]["fits"], false, "full fine-tuning of 70B does not fit on 8 H100s");
    assert_eq!(lora["memory"]["fits"], true);
    // No weight gradients: a shorter step, though under SP each adapter of a column-parallel
    // layer gathers the norm's output again (Bridge's `gather_from_sequence_parallel_region`).
    let (t_full, t_lora) = (full["step_time_s"].as_f64().unwrap(), lora["step_time_s"].as_f64().unwrap());
    assert!(t_lora < 0.95 * t_full, "{t_lora} vs {t_full}");
    let tp_comm = |v: &serde_json::Value| v["breakdown"]["tp_comm_s"].as_f64().unwrap();
    assert!(tp_comm(&lora) > 1.5 * tp_comm(&full), "{} vs {}", tp_comm(&lora), tp_comm(&full));
    let no_sp = predict(&["--lora-rank", "16", "--sp", "false"]);
    assert!(tp_comm(&no_sp) < tp_comm(&lora));
    assert_eq!(lora["scenario"]["lora_rank"], 16);
    assert_eq!(lora["scenario"]["lora_targets"].as_array().unwrap().len(), 4);
    assert!(full["scenario"].get("lora_rank").is_none());
    // Fewer targets, fewer adapter states; the LoRA FLOPs convention (4N + 6 x adapters + attention).
    let qkv = predict(&["--lora-rank", "16", "--lora-targets", "linear_qkv"]);
    let qkv_on_rank = 16.0 * (8192.0 + 10240.0) * 20.0 / 2.0;
    assert!((mem(&qkv, "gradients_bytes") / (4.0 * qkv_on_rank) - 1.0).abs() < 1e-9);
    let ratio = lora["model_flops_per_token"].as_f64().unwrap() / full["model_flops_per_token"].as_f64().unwrap();
    assert!(ratio > 0.66 && ratio < 0.72, "{ratio}");
}

#[test]
fn lora_runs_in_simulate_plan_scenario_files_and_prints_its_bridge_recipe() {
    let mut a = vec!["simulate"];
    a.extend_from_slice(BASE);
    a.extend(["--lora-rank", "16", "--json"]);
    let (code, out, err) = gpuplan(&a);
    assert_eq!(code, 0, "{err}");
    let sim: serde_json::Value = serde_json::from_str(&out).unwrap();
    let ana = predict(&["--lora-rank", "16"]);
    let (s, p) = (sim["step_time_s"].as_f64().unwrap(), ana["step_time_s"].as_f64().unwrap());
    assert!(s >= p * 0.98 && s < p * 1.2, "simulate {s} vs predict {p}");

    let (code, out, err) = gpuplan(&["predict", "--lora-rank", "16", "--megatron-args"].iter().chain(BASE).copied().collect::<Vec<_>>());
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Megatron-LM has no LoRA arguments") && out.contains("peft=LoRA(dim=16"), "{out}");

    let dir = std::env::temp_dir().join(format!("gpuplan-it-lora-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("lora.toml");
    std::fs::write(
        &file,
        "model = \"llama-3-8b\"\nsystem = \"dgx-h100\"\ngpus = 8\n[workload]\nseq = 4096\nglobal_batch = 64\nlora_rank = 32\nlora_targets = [\"qkv\", \"linear_fc2\"]\n",
    )
    .unwrap();
    let (code, out, err) = gpuplan(&["predict", "--scenario", file.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["scenario"]["lora_targets"], serde_json::json!(["linear_qkv", "linear_fc2"]));

    let (code, out, err) = gpuplan(&[
        "plan",
        "--model",
        "llama-3-70b",
        "--system",
        "dgx-h100",
        "--gpus",
        "8",
        "--seq",
        "4096",
        "--global-batch",
        "32",
        "--lora-rank",
        "16",
        "--json",
        "--top",
        "3",
    ]);
    assert_eq!(code, 0, "{err}");
    let first: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(first["scenario"]["lora_rank"], 16, "{first}");
    assert_eq!(first["memory"]["fits"], true);
}

#[test]
fn bad_lora_input_exits_2_naming_the_key_value_and_flag() {
    let run = |extra: &[&str]| {
        let mut a = vec!["predict"];
        a.extend_from_slice(BASE);
        a.extend_from_slice(extra);
        gpuplan(&a)
    };
    let cases: &[(&[&str], &[&str])] = &[
        (&["--lora-rank", "0"], &["workload.lora_rank", "`0`", "positive", "--lora-rank"]),
        (&["--lora-rank", "-8"], &["workload.lora_rank", "-8", "--lora-rank"]),
        (&["--lora-rank", "20000"], &["workload.lora_rank", "20000", "exceeds", "8192"]),
        (&["--lora-rank", "16", "--lora-targets", "q_proj"], &["workload.lora_targets", "q_proj", "not a LoRA target", "linear_fc1"]),
        (&["--lora-targets", "linear_qkv"], &["workload.lora_targets", "without a LoRA rank", "--lora-rank"]),
        (&["--lora-rank", "15"], &["workload.lora_rank", "15", "multiple of tp = 2", "--tp"]),
        (&["--lora-rank", "16", "--stack", "torch-eager"], &["workload.lora_rank", "torch-eager", "--stack megatron"]),
        (&["--lora-rank", "16", "--mode", "prefill"], &["workload.lora_rank", "applies to training"]),
    ];
    for (extra, needles) in cases {
        let (code, _, err) = run(extra);
        assert_eq!(code, 2, "{extra:?}: {err}");
        for n in needles.iter() {
            assert!(err.contains(n), "{extra:?}: `{n}` not in: {err}");
        }
        assert!(!err.contains("panicked"), "{err}");
    }
    let (code, _, err) = gpuplan(&["predict", "--model", "deepseek-v3", "--system", "dgx-h100", "--gpus", "8", "--seq", "4096", "--lora-rank", "16"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("multi-head latent attention"), "{err}");
    // A hybrid Mamba-attention model has no per-layer qkv/proj/fc1/fc2 for the adapters.
    let (code, _, err) = gpuplan(&["predict", "--model", "nemotron-h-8b", "--system", "dgx-h100", "--gpus", "8", "--seq", "4096", "--lora-rank", "16"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("workload.lora_rank") && err.contains("hybrid Mamba-attention") && err.contains("hint"), "{err}");
}
