//! Sliding-window attention (GPT-OSS: window 128 on every other layer) and attention sinks, as
//! models/gpt-oss-120b.toml gives them (transformers 5.24.0 `GptOssConfig`, megatron-bridge 0.6.2
//! `GPTOSSBridge`): prefill/training attention over the band, decode and its KV cache over the
//! window, and the model file's checks.

use std::path::PathBuf;
use std::process::Command;

use gpuplan::config::scenario::{build, ParallelWire, ScenarioWire, WorkloadWire};
use gpuplan::config::system::load_system;
use gpuplan::cost::CostModel;
use gpuplan::workload::{backward_of, forward_ops, AttnWindow, Op, OpKind};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn attention_op(mode: &str, seq: i64, kv_len: Option<i64>) -> Op {
    let w = ScenarioWire {
        model: Some("gpt-oss-120b".into()),
        system: Some("dgx-b200".into()),
        gpus: Some(8),
        parallelism: ParallelWire { ep: Some(8), ..Default::default() },
        workload: WorkloadWire {
            mode: Some(mode.into()),
            seq: Some(seq),
            micro_batch: Some(1),
            global_batch: Some(8),
            batch: Some(1),
            kv_len,
            ..Default::default()
        },
        ..Default::default()
    };
    let s = build(&w, None).unwrap_or_else(|e| panic!("{e}"));
    forward_ops(&s.model, &s.parallel, &s.workload).moe_layer.into_iter().find(|o| matches!(o.kind, OpKind::Attention { .. })).expect("attention op")
}

fn with_window(op: &Op, w: Option<AttnWindow>) -> Op {
    let mut op = op.clone();
    if let OpKind::Attention { window, .. } = &mut op.kind {
        *window = w;
    }
    op
}

#[test]
fn windowed_layers_price_the_band_and_full_layers_are_unchanged_at_8k() {
    let op = attention_op("train", 8192, None);
    let OpKind::Attention { q_len, kv_len, causal, window, .. } = op.kind else { unreachable!() };
    assert_eq!((q_len, kv_len, causal), (8192, 8192, true));
    // 18 of the 36 layers slide, window 128.
    assert_eq!(window, Some(AttnWindow { window: 128, share: 0.5, masked: false }));
    let full = with_window(&op, None);
    let all_full = with_window(&op, Some(AttnWindow { window: 128, share: 0.0, masked: false }));
    let all_sliding = with_window(&op, Some(AttnWindow { window: 128, share: 1.0, masked: false }));
    // FLOPs: a sliding layer computes the band's keys, 127.0 per query on average against the
    // causal layer's 4096.5: (128 x 129 / 2 + (8192 - 128) x 128) / 8192 / (8193 / 2).
    let band = (128.0 * 129.0 / 2.0 + (8192.0 - 128.0) * 128.0) / 8192.0 / (8193.0 / 2.0);
    assert!((all_sliding.flops() / full.flops() - band).abs() < 1e-12, "{}", all_sliding.flops() / full.flops());
    assert_eq!(all_full.flops(), full.flops());
    assert!((op.flops() - 0.5 * (full.flops() + all_sliding.flops())).abs() < 1e-6 * full.flops());
    // Time on a B200: full layers as without a window; a sliding layer's kernel computes the
    // 128 x 128 tiles inside the band, 127 of the causal call's 2,080 (64 query tiles, 1 + 63 x 2
    // against 64 x 65 / 2), at the causal call's efficiency per tile.
    let system = load_system("dgx-b200").unwrap();
    let c = CostModel::new(&system, None);
    let t = |o: &Op| c.attention_time(o).time.value();
    assert_eq!(t(&all_full), t(&full));
    let overhead = c.kernel_overhead().value();
    let share = (t(&all_sliding) - overhead) / (t(&full) - overhead);
    assert!((share - 127.0 / 2080.0).abs() < 1e-9, "sliding / full attention time {share}");
    assert!((t(&op) - 0.5 * (t(&full) + t(&all_sliding))).abs() < 1e-12);
    // The backward keeps the window.
    let bwd = backward_of(std::slice::from_ref(&op));
    assert!(bwd.iter().any(|o| matches!(o.kind, OpKind::Attention { window: Some(AttnWindow { window: 128, .. }), backward: true, .. })));
}

fn predict(args: &[&str]) -> (i32, serde_json::Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuplan")).args(args).current_dir(ROOT).output().unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out.status.code().unwrap_or(-1), v, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn gpt_oss_decode_at_128k_caches_the_window_on_sliding_layers() {
    let (code, v, err) = predict(&[
        "predict",
        "--model",
        "gpt-oss-120b",
        "--system",
        "dgx-b200",
        "--gpus",
        "8",
        "--tp",
        "8",
        "--stack",
        "trtllm",
        "--mode",
        "decode",
        "--kv-len",
        "131072",
        "--batch",
        "1",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    // 18 full layers hold 131,072 + 1 tokens, 18 sliding ones 128; K and V of 8 KV heads x 64 in
    // bf16 (2 x 8 x 64 x 2 B per token per layer), the 8 KV heads split over TP 8.
    let expected = (18.0 * 131_073.0 + 18.0 * 128.0) * 2.0 * 8.0 * 64.0 * 2.0 / 8.0;
    let kv = v["memory"]["components"]["kv_cache_bytes"].as_f64().unwrap();
    assert_eq!(kv, expected);
    // Half of what a model with every layer full would cache.
    assert!(kv / (36.0 * 131_073.0 * 2048.0 / 8.0) < 0.51);
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gpuplan-it-swa-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn bad_windows_and_layer_types_exit_2_naming_the_key() {
    let text = std::fs::read_to_string(PathBuf::from(ROOT).join("models/gpt-oss-120b.toml")).unwrap();
    let cases = [
        ("sliding_window = 128", "sliding_window = 0", "attention.sliding_window", "0", "must be positive"),
        ("sliding_window = 128", "sliding_window = 200000", "attention.sliding_window", "200000", "max_seq_len"),
        ("    \"sliding_attention\", \"full_attention\",  # layers 34, 35\n", "", "attention.layer_types", "34 entries", "one entry per layer"),
        ("\"full_attention\",  # layers 0, 1", "\"global\",  # layers 0, 1", "attention.layer_types", "global", "sliding_attention"),
    ];
    for (i, (from, to, key, value, says)) in cases.iter().enumerate() {
        assert!(text.contains(from), "{from}");
        let dir = tmp(&format!("case{i}"));
        let path = dir.join("gpt-oss-120b.toml");
        std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
        let (code, _, err) = predict(&["predict", "--model", path.to_str().unwrap(), "--system", "dgx-b200", "--gpus", "8", "--ep", "8"]);
        assert_eq!(code, 2, "{key}: {err}");
        assert!(err.contains(key) && err.contains(value) && err.contains(says) && err.contains("hint"), "{key} {value}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn gpt_oss_config_json_reads_window_layer_types_sinks_and_biases() {
    let m =
        gpuplan::config::model::load_model(PathBuf::from(ROOT).join("tests/data/hf/transformers-5.24.0--GptOssConfig.config.json").to_str().unwrap()).unwrap();
    let sw = m.sliding_window.as_ref().unwrap();
    assert_eq!((sw.window, sw.n_sliding(), sw.sliding[0], sw.sliding[1]), (128, 18, true, false));
    assert!(m.attention_sinks && m.linear_bias);
    // q width 64 x 64 = 4096 against hidden 2880: q, k, v and o weights, their biases, 64 sinks.
    assert_eq!(m.attention_params_per_layer(), 2880.0 * (4096.0 + 1024.0) + 4096.0 * 2880.0 + (4096.0 + 1024.0 + 2880.0) + 64.0);
    let moe = m.moe.as_ref().unwrap();
    assert_eq!((moe.n_experts, moe.top_k, moe.expert_ffn_hidden), (128, 4, 2880));
    // A bad window in a config.json: exit 2 naming the file's key.
    let dir = tmp("json");
    let text = std::fs::read_to_string(PathBuf::from(ROOT).join("tests/data/hf/transformers-5.24.0--GptOssConfig.config.json")).unwrap();
    let path = dir.join("config.json");
    std::fs::write(&path, text.replacen("\"sliding_window\": 128", "\"sliding_window\": 0", 1)).unwrap();
    let (code, _, err) = predict(&["predict", "--model", path.to_str().unwrap(), "--system", "dgx-b200", "--gpus", "8", "--ep", "8"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("sliding_window") && err.contains('0') && err.contains("hint"), "{err}");
}

#[test]
fn band_counts_and_decode_reads_only_the_window() {
    use gpuplan::workload::{banded_keys, causal_tiles};
    // Keys: a decode query at 131,072 cached tokens sees the window; a window as long as the
    // sequence is causal attention; a chunk of 4 queries at the end of 10 with window 3: 3 each.
    assert_eq!(banded_keys(1, 131_072, 128), 128.0);
    assert_eq!(banded_keys(8192, 8192, 8192), 8192.0 * 8193.0 / 2.0);
    assert_eq!(banded_keys(4, 10, 3), 12.0);
    // Tiles at 8K: 64 query tiles; causal 64 x 65 / 2 = 2,080; window 128: 1 + 63 x 2 = 127.
    assert_eq!((causal_tiles(8192, 8192, None), causal_tiles(8192, 8192, Some(128))), (2080.0, 127.0));
    // Decode of GPT-OSS-120B at 128K on a B200: a sliding layer reads 128 of the 131,072 cached keys.
    let op = attention_op("decode", 1, Some(131_071));
    let OpKind::Attention { q_len, kv_len, window, .. } = op.kind else { unreachable!() };
    assert_eq!((q_len, kv_len, window.map(|w| w.share)), (1, 131_072, Some(0.5)));
    let long = |share: f64| with_window(&op, Some(AttnWindow { window: 128, share, masked: false }));
    let system = load_system("dgx-b200").unwrap();
    let c = CostModel::new(&system, None);
    let overhead = c.kernel_overhead().value();
    let t = |o: &Op| c.attention_time(o).time.value() - overhead;
    let (full, sliding) = (t(&long(0.0)), t(&long(1.0)));
    assert!(sliding < full / 100.0, "sliding {sliding} s, full {full} s");
    assert!((t(&long(0.5)) - 0.5 * (full + sliding)).abs() < 1e-12);
}
