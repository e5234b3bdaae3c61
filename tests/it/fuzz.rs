//! Mutation fuzzing of every parser (issue 22): a shipped file of each input kind, mutated by
//! proptest (numbers swapped for hostile values, lines dropped, duplicated or cut, bytes
//! inserted), goes through the library parser that reads it. An error is fine; a panic fails the
//! test, and proptest shrinks the mutation and keeps it in `tests/proptest-regressions/fuzz.txt`. One more
//! test runs the binary on random flag combinations under a timeout.
//!
//! CI runs few cases (`CASES`, well under 2 minutes in all); `scripts/fuzz_campaign.sh` runs the
//! same generators for hours with `PROPTEST_CASES` set.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use proptest::prelude::*;

use gpuplan::config;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// Cases per parser in CI (override with PROPTEST_CASES).
const CASES: u32 = 256;
/// CLI invocations in CI (override with PROPTEST_CASES).
const CLI_CASES: u32 = 48;

fn cases(default: u32) -> ProptestConfig {
    let n = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    ProptestConfig { cases: n, max_shrink_iters: 256, ..ProptestConfig::default() }
}

fn seed(file: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(file)).unwrap()
}

/// Values a hostile or careless user writes where a number belongs.
const HOSTILE: &[&str] = &[
    "0",
    "-1",
    "-8",
    "1e300",
    "-1e300",
    "1e-300",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "4294967296",
    "4294967295",
    "18446744073709551616",
    "9223372036854775807",
    "\"x\"",
    "\"\"",
    "true",
    "[]",
    "{}",
    "0.0",
    "-0",
    "1e9",
    "3",
    "x",
    "",
    ",",
    "\"",
];

/// One mutation: what it does, where (a fraction of the text), and which hostile value.
#[derive(Debug, Clone)]
enum Mutation {
    /// Replace the number nearest the position with a hostile value.
    Number(f64, usize),
    /// Drop the line at the position.
    DropLine(f64),
    /// Duplicate the line at the position.
    DupLine(f64),
    /// Cut the text at the position.
    Truncate(f64),
    /// Insert bytes at the position.
    Insert(f64, String),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (0.0..1.0f64, 0..HOSTILE.len()).prop_map(|(f, k)| Mutation::Number(f, k)),
        1 => (0.0..1.0f64).prop_map(Mutation::DropLine),
        1 => (0.0..1.0f64).prop_map(Mutation::DupLine),
        1 => (0.0..1.0f64).prop_map(Mutation::Truncate),
        1 => (0.0..1.0f64, "[ -~\n\t\u{80}-\u{10ffff}]{0,8}").prop_map(|(f, s)| Mutation::Insert(f, s)),
    ]
}

fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    prop::collection::vec(mutation(), 1..6)
}

fn at(text: &str, f: f64) -> usize {
    let mut i = ((text.len() as f64) * f) as usize;
    i = i.min(text.len());
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn apply(text: &str, muts: &[Mutation]) -> String {
    let mut t = text.to_string();
    for m in muts {
        match m {
            Mutation::Number(f, k) => {
                let i = at(&t, *f);
                // The next run of number characters at or after i (wrapping to the start).
                let is_num = |c: char| c.is_ascii_digit() || c == '.' || c == '-' || c == 'e';
                let find = |from: usize| t[from..].find(|c: char| c.is_ascii_digit()).map(|s| from + s);
                if let Some(s) = find(i).or_else(|| find(0)) {
                    let e = s + t[s..].find(|c: char| !is_num(c)).unwrap_or(t.len() - s);
                    t.replace_range(s..e, HOSTILE[*k]);
                }
            }
            Mutation::DropLine(f) | Mutation::DupLine(f) => {
                let mut lines: Vec<&str> = t.lines().collect();
                if lines.is_empty() {
                    continue;
                }
                let k = ((lines.len() as f64) * f) as usize % lines.len();
                if matches!(m, Mutation::DropLine(_)) {
                    lines.remove(k);
                } else {
                    lines.insert(k, lines[k]);
                }
                t = lines.join("\n");
            }
            Mutation::Truncate(f) => {
                let i = at(&t, *f);
                t.truncate(i);
            }
            Mutation::Insert(f, s) => {
                let i = at(&t, *f);
                t.insert_str(i, s);
            }
        }
    }
    t
}

fn scratch(kind: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gpuplan-fuzz-{}-{kind}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

proptest! {
    #![proptest_config(cases(CASES))]

    #[test]
    fn model_toml(m in mutations()) {
        let text = apply(&seed("models/llama-3-8b.toml"), &m);
        let _ = config::model::model_from_text(Path::new("m.toml"), &text);
        let text = apply(&seed("models/deepseek-v3.toml"), &m);
        let _ = config::model::model_from_text(Path::new("m.toml"), &text);
        // A hybrid model's `[hybrid]` pattern and Mamba-2 keys.
        let text = apply(&seed("models/nemotron-h-8b.toml"), &m);
        let _ = config::model::model_from_text(Path::new("m.toml"), &text);
    }

    #[test]
    fn hf_config_json(m in mutations()) {
        for f in ["tests/data/hf/meta-llama--Meta-Llama-3-8B.config.json", "tests/data/hf/Qwen--Qwen3-30B-A3B.config.json", "tests/data/hf/deepseek-ai--DeepSeek-V3.config.json"] {
            let text = apply(&seed(f), &m);
            let _ = config::hf::model_from_hf_json(Path::new("config.json"), &text);
        }
        let text = apply(NEMOTRON_H_JSON, &m);
        let _ = config::hf::model_from_hf_json(Path::new("config.json"), &text);
    }

    #[test]
    fn moe_probe_table(m in mutations()) {
        // The head of the shipped H100 table (`calibrate --moe`'s moe.csv), mutated: parsed, and
        // where it parses, read by the grouped-GEMM and index-kernel lookups.
        let head: String = seed("calibration/profiles/h100-sxm-1x/moe.csv").lines().take(60).chain(std::iter::once("gather_rows,bf16,,8,4096,2048,0,2,20.5,,0,3.4e7,20")).collect::<Vec<_>>().join("\n");
        let text = apply(&head, &m);
        if let Ok((grouped, index)) = config::moe::parse_table(Path::new("moe.csv"), &text) {
            use gpuplan::hardware::profile::{GroupedKernel, GroupedLayout, MoeIndexKernel, MoeKernels};
            let t = MoeKernels { provenance: String::new(), grouped, index };
            for (e, tok) in [(1, 1), (64, 300), (512, 100_000)] {
                let _ = t.grouped_time(GroupedKernel::GroupedMm, gpuplan::hardware::Dtype::Bf16, GroupedLayout::Mk, e, tok, 2048, 1536);
            }
            let _ = t.index_time(&[MoeIndexKernel::GatherRows], 1e6);
        }
    }

    #[test]
    fn gpu_and_system_toml(m in mutations()) {
        let d = scratch("sys");
        let gpu = d.join("h100-sxm.toml");
        std::fs::write(&gpu, apply(&seed("calibration/systems/h100-sxm.toml"), &m)).unwrap();
        let _ = config::system::load_gpu(gpu.to_str().unwrap());
        // A system file naming the stock GPU, mutated.
        let sys = d.join("dgx.toml");
        std::fs::write(&sys, apply(&seed("calibration/systems/dgx-h100.toml"), &m)).unwrap();
        let _ = config::system::load_system(sys.to_str().unwrap());
        let _ = config::system::file_kind(&sys, &std::fs::read_to_string(&sys).unwrap());
    }

    #[test]
    fn training_scenario(m in mutations()) {
        let d = scratch("scenario");
        let f = d.join("s.toml");
        std::fs::write(&f, apply(&seed("scenarios/seed-8xb200-tp2-dp4-13b.toml"), &m)).unwrap();
        if let Ok(w) = config::scenario::read_scenario(&f) {
            let _ = config::scenario::check_searched_keys(&w, Some(&f));
            let _ = config::scenario::build(&w, Some(&f));
        }
    }

    #[test]
    fn serving_scenario(m in mutations()) {
        let d = scratch("serving");
        let f = d.join("s.toml");
        std::fs::write(&f, apply(&seed("scenarios/serving/llama-3-8b-chat-8xh100.toml"), &m)).unwrap();
        if let Ok(w) = config::serve::read_serve(&f) {
            // Resolve only: simulating hostile loads is the serving limits' business (README "Limits").
            let _ = config::deploy::resolve(&w, Some(&f), &config::deploy::RunFlags { bin_s: 1.0, ..Default::default() });
        }
    }

    #[test]
    fn profile_toml_and_csvs(m in mutations(), which in 0usize..7) {
        let d = scratch("profile").join(format!("p{which}"));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let src = Path::new(ROOT).join("calibration/profiles/h200-sxm-1x");
        let files = ["profile.toml", "attention.csv", "gemm.csv", "hbm.csv", "elementwise.csv", "launch.csv", "power.csv"];
        for e in std::fs::read_dir(&src).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_file()) {
            std::fs::copy(&e, d.join(e.file_name().unwrap())).unwrap();
        }
        let f = d.join(files[which]);
        if let Ok(text) = std::fs::read_to_string(&f) {
            std::fs::write(&f, apply(&text, &m)).unwrap();
        }
        let _ = config::profile::load_profile(&d.join("profile.toml"));
    }

    #[test]
    fn prices(m in mutations()) {
        for f in ["calibration/prices/example-owned.toml", "calibration/prices/example-rental.toml"] {
            let text = apply(&seed(f), &m);
            if let Ok(w) = config::parse_toml::<gpuplan::report::prices::PricesWire>(Path::new(f), &text) {
                let _ = w.build(f);
            }
        }
    }

    #[test]
    fn run_records(m in mutations()) {
        let text: String = seed("calibration/runs/h200.jsonl").lines().take(3).map(|l| format!("{l}\n")).collect();
        let text = apply(&text, &m);
        if let Ok(recs) = gpuplan::measure::record::parse_jsonl("r.jsonl", &text) {
            for r in &recs {
                let _ = config::record::scenario(r, None);
            }
        }
    }

    #[test]
    fn serving_traces_and_measured_csvs(m in mutations()) {
        let text = apply(&seed("scenarios/serving/trace-example.csv"), &m);
        let _ = gpuplan::serve::arrivals::read_trace(&text);
        let d = scratch("measured");
        let f = d.join("m.csv");
        std::fs::write(&f, apply("arrival_s,input_len,output_len,scheduled_s,first_token_s,finish_s\n0,10,5,0.01,0.02,0.1\n0.5,20,8,0.51,0.53,0.7\n", &m)).unwrap();
        let _ = config::deploy::read_measured(&f);
    }

    #[test]
    fn nccl_tests_logs(m in mutations()) {
        let text = apply(&seed("tests/data/nccl-tests/all_reduce_perf_dgx_h100_8gpu.log"), &m);
        if let Ok(runs) = gpuplan::calibrate::nccl_tests::parse(Path::new("all_reduce_perf.log"), &text) {
            let _ = gpuplan::calibrate::import::import(&runs, "fuzz", &["all_reduce_perf.log".into()], "gpuplan calibrate", "2025-01-01T00:00:00Z");
        }
    }
}

/// One command line: a training command with a few flags, or `serve` on a shipped serving
/// scenario with a few of its flags, the values hostile or ordinary.
fn command_line() -> impl Strategy<Value = Vec<String>> {
    prop_oneof![3 => training_command_line(), 1 => serve_command_line()]
}

/// `serve` over a shipped serving scenario with flags that change the load, the scheduler and
/// the layout (the workload estimate of `limits::serve` must refuse what would take too long).
fn serve_command_line() -> impl Strategy<Value = Vec<String>> {
    let flag = prop::sample::select(vec![
        "--gpus",
        "--tp",
        "--pp",
        "--qps",
        "--duration-s",
        "--input-len",
        "--output-len",
        "--arrival",
        "--cv",
        "--seed",
        "--replications",
        "--max-batch",
        "--token-budget",
        "--block-size",
        "--chunked-prefill",
        "--precision",
        "--json",
        "--dp",
        "--ep",
        "--attention-dp",
    ]);
    let value = prop::sample::select(vec![
        "0",
        "-1",
        "1",
        "2",
        "8",
        "64",
        "2048",
        "nan",
        "inf",
        "1e300",
        "4294967296",
        "x",
        "",
        "gamma",
        "constant",
        "uniform:1:4096",
        "lognormal:0",
        "true",
        "fp8",
    ]);
    prop::collection::vec((flag, value), 0..6).prop_map(|fv| {
        let mut v = ["serve", "--scenario", "scenarios/serving/llama-3-8b-chat-8xh100.toml"].map(String::from).to_vec();
        for (f, x) in fv {
            v.push(f.to_string());
            if !matches!(f, "--json" | "--attention-dp") {
                v.push(x.to_string());
            }
        }
        v
    })
}

/// A Nemotron-H config.json's keys (transformers 5.17 `NemotronHConfig`), the 8B shape.
const NEMOTRON_H_JSON: &str = r#"{
    "model_type": "nemotron_h", "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
    "num_hidden_layers": 52, "hidden_size": 4096, "intermediate_size": 21504, "mlp_hidden_act": "relu2",
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 131072,
    "max_position_embeddings": 8192, "tie_word_embeddings": false, "mamba_num_heads": 128, "mamba_head_dim": 64,
    "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4, "chunk_size": 128, "n_routed_experts": 8,
    "num_experts_per_tok": 2, "moe_intermediate_size": 1024, "moe_shared_expert_intermediate_size": 2048
}"#;

fn training_command_line() -> impl Strategy<Value = Vec<String>> {
    let cmd = prop::sample::select(vec!["predict", "simulate", "plan", "compare", "check", "report", "validate"]);
    let flag = prop::sample::select(vec![
        "--gpus",
        "--tp",
        "--pp",
        "--dp",
        "--cp",
        "--ep",
        "--vp",
        "--seq",
        "--global-batch",
        "--micro-batch",
        "--zero",
        "--batch",
        "--kv-len",
        "--min-gpus",
        "--max-gpus",
        "--precision",
        "--recompute",
        "--mode",
        "--schedule",
        "--stack",
        "--top",
        "--json",
        "--csv",
        "--force",
        "--launch",
        "--launch-model",
        "--goodput",
        "--storage-gb-per-s",
        "--restart-s",
        "--spares",
        "--repair-h",
        "--checkpoint-interval-s",
        "--failure-rate",
        "--lora-rank",
        "--lora-targets",
        "--per-rank",
        "--slow-gpu",
        "--degrade-link",
        "--fail-nic",
        "--stragglers",
        "--steps",
        "--nodes-per-leaf",
        "--no-pxn",
        "--moe-capacity-factor",
        "--moe-pad-to-capacity",
        "--moe-ep-overlap",
        "--moe-shared-expert-overlap",
        "--attention-dp",
    ]);
    let value = prop::sample::select(vec![
        "0",
        "-1",
        "1",
        "2",
        "3",
        "8",
        "64",
        "2048",
        "nan",
        "inf",
        "1e300",
        "4294967296",
        "x",
        "",
        "bf16",
        "full",
        "train",
        "gpipe",
        "serve",
        "all",
        "vllm",
        "linear_qkv,fc2",
        "1=0.5",
        "su:0:rail:0:uplink=0.5",
        "su:1:rail:9:uplink=0.5",
        "spine=0.5",
        "true",
        "0.5",
    ]);
    let model = prop::sample::select(vec!["llama-3-8b", "nemotron-h-8b"]);
    (cmd, model, prop::collection::vec((flag, value), 0..6)).prop_map(|(c, model, fv)| {
        let mut v = vec![c.to_string()];
        if !matches!(c, "check" | "report" | "validate") {
            v.extend(["--model", model, "--system", "dgx-h100"].map(String::from));
        }
        for (f, x) in fv {
            v.push(f.to_string());
            if !matches!(f, "--json" | "--csv" | "--force" | "--goodput" | "--per-rank" | "--no-pxn" | "--attention-dp") {
                v.push(x.to_string());
            }
        }
        v
    })
}

proptest! {
    #![proptest_config(cases(CLI_CASES))]

    /// The binary on random flags: exits 0, 1 or 2 within 20 s, never panics or dies on a signal.
    #[test]
    fn cli_flags(args in command_line()) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_gpuplan"))
            .args(&args)
            .args(if args[0] == "serve" { None } else { Some("--no-progress") })
            .current_dir(ROOT)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let start = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if start.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                let _ = child.wait();
                prop_assert!(false, "hung: gpuplan {}", args.join(" "));
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut err = String::new();
        use std::io::Read;
        child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        prop_assert!(!err.contains("panicked"), "gpuplan {}: {err}", args.join(" "));
        prop_assert!(matches!(status.code(), Some(0..=2)), "gpuplan {}: {status:?} {err}", args.join(" "));
    }
}
