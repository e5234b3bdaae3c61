//! The serving engines (`--stack trtllm | vllm | sglang`, issue 20): their defaults reach the
//! deployment, trtllm-bench's offline mode runs, KV capacity binds at long contexts, and an engine
//! knob the engine does not have, or a CUDA-graph capture size above the batch limit, is refused
//! with the flag, the value and a hint (exit 2).

use std::process::Command;

fn gpuplan(args: &[&str]) -> (i32, serde_json::Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuplan")).args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().expect("run gpuplan");
    (out.status.code().unwrap_or(-1), serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null), String::from_utf8_lossy(&out.stderr).into_owned())
}

const BASE: &[&str] = &["serve", "--model", "llama-3.1-8b", "--system", "dgx-h100", "--input-len", "128", "--output-len", "64"];

fn with(more: &[&str]) -> Vec<&'static str> {
    let mut v: Vec<&'static str> = BASE.to_vec();
    for m in more {
        v.push(Box::leak(m.to_string().into_boxed_str()));
    }
    v
}

#[test]
fn engine_knobs_the_engine_does_not_have_are_refused_with_the_right_one_named() {
    for (args, flag, own) in [
        (with(&["--stack", "trtllm", "--qps", "1", "--gpu-memory-utilization", "0.8"]), "--gpu-memory-utilization", "--kv-cache-free-gpu-mem-fraction"),
        (with(&["--stack", "vllm", "--qps", "1", "--kv-cache-free-gpu-mem-fraction", "0.8"]), "--kv-cache-free-gpu-mem-fraction", "--gpu-memory-utilization"),
        (with(&["--stack", "sglang", "--qps", "1", "--gpu-memory-utilization", "0.8"]), "--gpu-memory-utilization", "--mem-fraction-static"),
        (with(&["--stack", "megatron", "--qps", "1", "--mem-fraction-static", "0.8"]), "--mem-fraction-static", "--gpu-memory-utilization"),
    ] {
        let (code, _, err) = gpuplan(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(flag) && err.contains("0.8") && err.contains("hint:") && err.contains(own), "{args:?}: {err}");
    }
}

#[test]
fn a_cuda_graph_capture_size_above_the_batch_limit_is_refused() {
    let (code, _, err) = gpuplan(&with(&["--stack", "trtllm", "--qps", "1", "--max-batch", "64", "--cuda-graph-max-batch", "128"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cuda_graph_max_batch") && err.contains("128") && err.contains("max_batch_size") && err.contains("hint:"), "{err}");
    let (code, _, err) = gpuplan(&with(&["--stack", "trtllm", "--qps", "1", "--cuda-graphs", "off", "--cuda-graph-max-batch", "16"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("off") && err.contains("hint:"), "{err}");
}

#[test]
fn training_with_an_inference_engine_is_refused() {
    let (code, _, err) =
        gpuplan(&["predict", "--model", "llama-3-8b", "--system", "dgx-h100", "--gpus", "8", "--stack", "trtllm", "--seq", "4096", "--global-batch", "64"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("trtllm") && err.contains("inference engine") && err.contains("hint:"), "{err}");
}

#[test]
fn engines_predict_decode_and_differ_in_kv_cache() {
    // FP8 decode at a long context: TensorRT-LLM's FP8 KV cache halves the attention's reads.
    let run = |stack: &str| {
        let (code, v, err) = gpuplan(&[
            "predict",
            "--model",
            "llama-3.1-70b",
            "--system",
            "dgx-h100",
            "--gpus",
            "4",
            "--tp",
            "4",
            "--mode",
            "decode",
            "--batch",
            "16",
            "--kv-len",
            "20000",
            "--precision",
            "fp8",
            "--stack",
            stack,
            "--json",
        ]);
        assert_eq!(code, 0, "{stack}: {err}");
        v
    };
    let (t, vl) = (run("trtllm"), run("vllm"));
    let kv = |v: &serde_json::Value| v["memory"]["components"]["kv_cache_bytes"].as_f64().unwrap_or_else(|| panic!("{v:#}"));
    assert!((kv(&vl) / kv(&t) - 2.0).abs() < 1e-6, "trtllm fp8 KV is half vLLM's bf16 KV: {} vs {}", kv(&t), kv(&vl));
    let step = |v: &serde_json::Value| v["step_time_s"].as_f64().unwrap();
    assert!(step(&t) < step(&vl), "reading half the cache is faster: {} vs {}", step(&t), step(&vl));
}

#[test]
fn trtllm_offline_mode_queues_every_request_and_kv_capacity_binds_at_20k() {
    let run = |input: &str, output: &str, n: &str| {
        let (code, v, err) = gpuplan(&[
            "serve",
            "--model",
            "llama-3.1-70b",
            "--system",
            "hgx-h200",
            "--gpus",
            "1",
            "--tp",
            "1",
            "--precision",
            "fp8",
            "--stack",
            "trtllm",
            "--offline",
            n,
            "--input-len",
            input,
            "--output-len",
            output,
            "--chunked-prefill",
            "true",
            "--json",
        ]);
        assert_eq!(code, 0, "{err}");
        v
    };
    let short = run("128", "128", "512");
    assert_eq!(short["requests"]["completed"].as_u64(), Some(512), "{short:#}");
    let pool = &short["deployment"]["pools"][0];
    assert_eq!(pool["max_batch"].as_u64(), Some(2048), "TensorRT-LLM's max_batch_size: {pool:#}");
    assert_eq!(pool["token_budget"].as_u64(), Some(8192), "TensorRT-LLM's max_num_tokens: {pool:#}");
    // At 20,000 + 2,000 tokens a request the KV cache, not max_batch_size, limits the batch: the
    // GUARANTEED_NO_EVICT scheduler admits only requests whose whole length it can reserve.
    let long = run("20000", "2000", "64");
    let kv_tokens = long["deployment"]["pools"][0]["kv_tokens_per_replica"].as_f64().unwrap();
    let fit = (kv_tokens / 22000.0).floor();
    let mean_batch = long["batch"]["mean"].as_f64().unwrap();
    assert!((1.0..64.0).contains(&fit), "{kv_tokens}");
    assert!(mean_batch <= fit + 1e-9 && mean_batch > 0.5 * fit, "mean batch {mean_batch} vs {fit} requests that fit");
    assert_eq!(long["requests"]["preempted"].as_u64(), Some(0));
    // Offline takes no load.
    let (code, _, err) = gpuplan(&with(&["--stack", "trtllm", "--offline", "10", "--qps", "1"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--offline") && err.contains("hint:"), "{err}");
}

#[test]
fn a_client_concurrency_limit_caps_the_batch_and_counts_latency_from_the_send() {
    let run = |more: &[&str]| {
        let mut args = vec!["serve", "--model", "llama-3.1-8b", "--system", "dgx-h100", "--stack", "trtllm", "--qps", "50", "--duration-s", "4"];
        args.extend_from_slice(&["--input-len", "467", "--output-len", "64", "--json"]);
        args.extend_from_slice(more);
        let (code, v, err) = gpuplan(&args);
        assert_eq!(code, 0, "{err}");
        v
    };
    let (free, capped) = (run(&[]), run(&["--max-concurrency", "4"]));
    assert_eq!(capped["requests"]["completed"], free["requests"]["completed"], "every request is still served");
    let batch = capped["batch"]["mean"].as_f64().unwrap();
    assert!(batch <= 4.0 + 1e-9 && batch > 3.0, "at most 4 in flight: mean batch {batch}");
    assert!(capped["duration_s"].as_f64().unwrap() > 2.0 * free["duration_s"].as_f64().unwrap(), "the client paces the load");
    // TTFT counts from the send, not from the arrival held at the client.
    assert!(capped["ttft_s"]["mean"].as_f64().unwrap() < 0.2, "{:#}", capped["ttft_s"]);
    let (code, _, err) = gpuplan(&with(&["--stack", "trtllm", "--qps", "1", "--max-concurrency", "0"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--max-concurrency"), "{err}");
}
