//! The published Megatron-Bridge / NeMo performance-summary models the dev set does not hold
//! (wt-mbmap, 2026-11-25): every name form maps to the right catalog model and family, never to a
//! near neighbour; the models gpuplan cannot express are refused with their reason; a row of each
//! new model takes its perf recipe's settings (`config::published_recipes::PERF_RECIPES`) and is
//! predicted at a finite rate. The layouts are the megatron-bridge 0.6.2 perf recipes' own
//! (`tests/data/published/megatron_bridge_0.6.2_perf_recipes.csv`); no measured value is involved.

use gpuplan::config::published::{catalog_model, compact_name, map_row, RowWire, MODELS};
use gpuplan::config::published_recipes::{has_perf_recipes, PERF_RECIPES};

#[test]
fn every_name_form_maps_to_its_model() {
    for (name, model, family, moe) in [
        ("LLAMA31_405B", "llama-3.1-405b", "llama31_405b", false),
        ("LLAMA3_405B", "llama-3.1-405b", "llama31_405b", false),
        ("Llama3.1-405B", "llama-3.1-405b", "llama31_405b", false),
        ("Llama 3.1 405B", "llama-3.1-405b", "llama31_405b", false),
        ("LLAMA31_8B", "llama-3.1-8b", "llama3", false),
        ("LLAMA3-8B", "llama-3-8b", "llama3", false),
        ("Llama3.1-70B", "llama-3.1-70b", "llama3", false),
        ("Qwen3_235B_a22B", "qwen3-235b-a22b", "qwen3", true),
        ("QWEN3_235B_A22B (tokendrop)", "qwen3-235b-a22b", "qwen3", true),
        ("Qwen3-235B-A22B", "qwen3-235b-a22b", "qwen3", true),
        ("Qwen3_30B_a3B", "qwen3-30b-a3b", "qwen3", true),
        ("Qwen3_8B", "qwen3-8b", "qwen3", false),
        ("GPT-OSS-120B", "gpt-oss-120b", "gpt_oss", true),
        ("gpt_oss_120b", "gpt-oss-120b", "gpt_oss", true),
        ("GPT OSS 120B", "gpt-oss-120b", "gpt_oss", true),
        ("GPT-OSS-20B", "gpt-oss-20b", "gpt_oss", true),
        ("NemotronH_56B", "nemotron-h-56b", "nemotronh", false),
        ("Nemotron-H 56B", "nemotron-h-56b", "nemotronh", false),
        ("NemotronH_8B", "nemotron-h-8b", "nemotronh", false),
        ("Nemotron-H 47B", "nemotron-h-47b", "nemotronh", false),
        ("Nemotron-8B", "nemotron-3-8b", "nemotron", false),
        ("Nemotron-340B", "nemotron-4-340b", "nemotron", false),
        ("Nemotron3_Nano", "nemotron-3-nano-30b-a3b", "nemotron3_nano", true),
        ("Nemotron-3-Nano-30B-A3B", "nemotron-3-nano-30b-a3b", "nemotron3_nano", true),
        ("LLAMA4_E16", "llama-4-scout", "llama4", true),
        ("Llama4-Scout", "llama-4-scout", "llama4", true),
        ("LLAMA4_E128", "llama-4-maverick", "llama4", true),
        ("Llama4-Maverick", "llama-4-maverick", "llama4", true),
        ("Kimi-K2", "kimi-k2", "kimi", true),
        ("DeepSeekV3 (w/o MTP)", "deepseek-v3", "deepseek", true),
        ("DeepSeek-V3", "deepseek-v3", "deepseek", true),
        ("Mixtral-8x22B", "mixtral-8x22b", "mixtral", true),
    ] {
        assert_eq!(catalog_model(name), Ok((model, family, moe)), "{name}");
    }
}

#[test]
fn no_name_matches_a_near_neighbour() {
    // Pairs a looser match (prefix, substring, dropped version digit) would confuse.
    for (a, b) in [
        ("QWEN3_30B_A3B", "QWEN3_235B_A22B"),
        ("LLAMA3_8B", "LLAMA31_8B"),
        ("LLAMA3_70B", "LLAMA31_70B"),
        ("NemotronH_8B", "NEMOTRON_8B"),
        ("Nemotron3_8B", "Nemotron3_Nano"),
        ("GPT-OSS-20B", "GPT3-20B"),
        ("LLAMA4_E16", "LLAMA4_E128"),
        ("Qwen3_8B", "Qwen3_30B_a3B"),
    ] {
        let (ma, mb) = (catalog_model(a).unwrap().0, catalog_model(b).unwrap().0);
        assert_ne!(ma, mb, "{a} and {b} map to the same model");
    }
    // No two entries of different models share a compact form, and every entry's model loads.
    for (i, x) in MODELS.iter().enumerate() {
        for y in &MODELS[i + 1..] {
            assert!(compact_name(x.0) != compact_name(y.0) || x.1 == y.1, "{} and {} collide", x.0, y.0);
        }
        assert!(gpuplan::config::model::load_model(x.1).is_ok(), "{} -> {} is not a catalog model", x.0, x.1);
    }
    // Names of models outside the catalog are refused, not matched to a neighbour.
    for name in ["Qwen3_Next_80B_a3B", "Nemotron3_Super", "Qwen3-VL-235B-A22B", "GLM5", "DeepSeekV4_Flash", "Qwen3_32B", "LLAMA3_405B_X"] {
        assert!(catalog_model(name).is_err(), "{name} matched {:?}", catalog_model(name));
    }
    let e = catalog_model("Qwen3_Next_80B_a3B").unwrap_err();
    assert!(e.contains("Gated DeltaNet") && e.contains("Mamba-2"), "{e}");
    assert!(catalog_model("Mistral-Large").unwrap_err().contains("has no catalog model"));
}

/// A published row of `model` on `system` with the layout `(gpus, tp, pp, cp, vp, ep, mbs, gbs, seq)`.
fn row(container: &str, system: &str, model: &str, precision: &str, l: [u64; 9], fsdp: &str) -> RowWire {
    let [n, tp, pp, cp, vp, ep, mbs, gbs, seq] = l.map(|x| x.to_string());
    RowWire {
        dev_row: "0".into(),
        split: "test".into(),
        container: container.into(),
        task: "Pre-Training".into(),
        system: system.into(),
        model: model.into(),
        num_gpus: n,
        precision: precision.into(),
        gbs,
        mbs,
        seq_len: seq,
        fsdp: fsdp.into(),
        tp,
        pp,
        cp,
        vp: if vp == "1" { "n/a".into() } else { vp },
        ep,
        tokens_per_sec_per_gpu: "1".into(),
        config_complete: "yes".into(),
        ..Default::default()
    }
}

#[test]
fn new_models_take_their_perf_recipes_and_predict_finite_rates() {
    let s = |x: &str| Some(x.to_string());
    // (row, cuda_graphs, moe_dispatcher, flex backend, recompute modules, cpu offload layers); the
    // layouts are the 0.6.2 perf recipes' (named).
    let cases = [
        // llama31_405b_pretrain_1024gpu_h100_fp8cs_config: TP 8 PP 8 CP 2 VP 8, no graphs, no recompute
        (row("NeMo 26.06", "DGX-H100", "LLAMA31_405B", "FP8-CS", [1024, 8, 8, 2, 8, 1, 1, 1536, 8192], ""), None, None, None, vec![], None),
        // llama31_405b_pretrain_128gpu_gb300_bf16_config: Megatron-FSDP TP 2, 40 layers offloaded
        (row("NeMo 26.06", "DGX-GB300", "Llama3.1-405B", "BF16", [128, 2, 1, 1, 1, 1, 1, 768, 8192], "128"), None, None, None, vec![], Some(40)),
        // qwen3_235b_a22b_pretrain_256gpu_gb200_fp8mx_config: full-iteration HybridEP
        (
            row("NeMo 26.06", "DGX-GB200", "Qwen3_235B_a22B", "MXFP8", [256, 1, 8, 1, 3, 32, 1, 8192, 4096], ""),
            s("full"),
            s("flex"),
            s("hybridep"),
            vec![],
            None,
        ),
        // the same layout in 26.02: partial graphs (full iteration from 26.06)
        (
            row("NeMo 26.02", "DGX-GB200", "Qwen3_235B_a22B", "MXFP8", [256, 1, 8, 1, 3, 32, 1, 8192, 4096], ""),
            s("partial"),
            s("flex"),
            s("hybridep"),
            vec![],
            None,
        ),
        // qwen3_235b_a22b_pretrain_64gpu_b200_bf16_config: alltoall, no graphs
        (row("NeMo 26.06", "DGX-B200", "QWEN3_235B_A22B", "BF16", [64, 1, 8, 1, 4, 8, 1, 2048, 4096], ""), None, None, None, vec![], None),
        // gpt_oss_120b_pretrain_64gpu_h100_bf16_config: selective recompute of layernorm and moe_act
        (row("NeMo 26.06", "DGX-H100", "GPT-OSS-120B", "BF16", [64, 1, 4, 1, 1, 8, 1, 1280, 4096], ""), None, None, None, vec!["layernorm", "moe_act"], None),
        // gpt_oss_120b_pretrain_64gpu_b300_bf16_config: TE graphs, HybridEP
        (row("NeMo 26.06", "DGX-B300", "gpt_oss_120b", "BF16", [64, 1, 1, 1, 1, 8, 4, 1280, 4096], ""), s("partial"), s("flex"), s("hybridep"), vec![], None),
        // kimi_k2_pretrain_256gpu_gb200_fp8mx_config: recompute mla_up_proj, TE graphs, HybridEP
        (
            row("NeMo 26.06", "DGX-GB200", "Kimi-K2", "MXFP8", [256, 1, 4, 1, 4, 64, 1, 2048, 4096], ""),
            s("partial"),
            s("flex"),
            s("hybridep"),
            vec!["mla_up_proj"],
            None,
        ),
        // nemotron_3_nano_pretrain_16gpu_h100_bf16_config: recompute moe and layernorm, TE graphs
        (
            row("NeMo 26.06", "DGX-H100", "Nemotron3_Nano", "BF16", [16, 1, 1, 1, 1, 8, 1, 1024, 8192], ""),
            s("partial"),
            s("flex"),
            s("hybridep"),
            vec!["moe", "layernorm"],
            None,
        ),
        // nemotronh_56b_pretrain_64gpu_gb200_fp8cs_config: TE graphs of mamba and attention
        (row("NeMo 26.06", "DGX-GB200", "NemotronH_56B", "FP8-CS", [64, 2, 1, 1, 1, 1, 1, 192, 8192], ""), s("partial"), None, None, vec![], None),
        // no perf recipe: the family rules (Llama 4 on Blackwell: partial graphs; 26.06 HybridEP)
        (row("NeMo 26.06", "DGX-B200", "LLAMA4_E16", "MXFP8", [64, 1, 2, 1, 1, 8, 1, 1024, 8192], ""), s("partial"), s("flex"), s("hybridep"), vec![], None),
        (row("NeMo 25.11", "DGX-H100", "Qwen3_8B", "BF16", [8, 1, 1, 1, 1, 1, 1, 128, 4096], ""), None, None, None, vec![], None),
    ];
    let mut scenarios = Vec::new();
    for (r, graphs, dispatcher, backend, recompute, offload) in cases {
        let what = format!("{} {} {} {}", r.model, r.system, r.precision, r.container);
        let m = map_row(&r).unwrap_or_else(|e| panic!("{what}: refused: {}", e.reason));
        let w = &m.wire;
        assert_eq!((&w.options.cuda_graphs, &w.workload.moe_dispatcher, &w.workload.moe_flex_backend), (&graphs, &dispatcher, &backend), "{what}");
        let modules: Vec<String> = recompute.iter().map(|x| x.to_string()).collect();
        assert_eq!(w.workload.recompute_modules.clone().unwrap_or_default(), modules, "{what}");
        assert_eq!(w.workload.cpu_offload_layers, offload, "{what}");
        scenarios.push((what, gpuplan::config::scenario::build(w, None).unwrap_or_else(|e| panic!("{}: gpuplan refuses: {e}", r.model))));
    }
    for (what, s) in &scenarios {
        let p = gpuplan::analytic::predict(s).unwrap_or_else(|e| panic!("{what}: {e}"));
        let per_gpu = p.tokens_per_s / s.n_gpus as f64;
        assert!(per_gpu.is_finite() && per_gpu > 10.0, "{what}: {per_gpu} tokens/s/GPU");
    }
}

#[test]
fn perf_recipe_models_are_catalog_models_with_published_names() {
    for p in PERF_RECIPES {
        assert!(MODELS.iter().any(|m| m.1 == p.model), "{} has perf recipes but no published name", p.model);
        assert!(has_perf_recipes(p.model));
    }
    // The dev set's models keep their family rules (their scores are pinned by tests/it/published.rs).
    for dev in ["llama-3-70b", "llama-3-8b", "deepseek-v3", "qwen3-30b-a3b", "mixtral-8x7b"] {
        assert!(!has_perf_recipes(dev), "{dev}");
    }
}

#[test]
fn tokendrop_rows_run_the_bridge_token_drop_settings() {
    // Megatron-Bridge 0.6.2 `apply_moe_token_drop`: capacity factor 1.0, padded, alltoall only.
    let r = row("NeMo 26.06", "DGX-B200", "Qwen3_30B_a3B (tokendrop)", "MXFP8", [8, 1, 1, 1, 1, 8, 1, 512, 4096], "");
    let m = map_row(&r).unwrap_or_else(|e| panic!("refused: {}", e.reason));
    let w = &m.wire.workload;
    assert_eq!((w.moe_capacity_factor, w.moe_pad_to_capacity), (Some(1.0), Some(true)));
    assert_eq!((&w.moe_dispatcher, &w.moe_flex_backend), (&None, &None));
    // The same row dropless runs the 26.06 full-iteration HybridEP recipe; token dropping cannot.
    assert_eq!(m.wire.options.cuda_graphs.as_deref(), Some("partial"));
    let dropless = map_row(&row("NeMo 26.06", "DGX-B200", "Qwen3_30B_a3B", "MXFP8", [8, 1, 1, 1, 1, 8, 1, 512, 4096], "")).unwrap();
    assert_eq!(dropless.wire.options.cuda_graphs.as_deref(), Some("full"));
    assert_eq!(dropless.wire.workload.moe_capacity_factor, None);
    let s = gpuplan::config::scenario::build(&m.wire, None).unwrap();
    let per_gpu = gpuplan::analytic::predict(&s).unwrap().tokens_per_s / 8.0;
    assert!(per_gpu.is_finite() && per_gpu > 1000.0, "{per_gpu}");
    // A dense model's "(tokendrop)" has nothing to drop: the variant changes nothing.
    let dense = map_row(&row("NeMo 26.06", "DGX-B200", "LLAMA3_8B (tokendrop)", "BF16", [8, 1, 1, 1, 1, 1, 1, 128, 8192], "")).unwrap();
    assert_eq!(dense.wire.workload.moe_capacity_factor, None);
}

/// The EP all-to-all overlap as the perf recipes set it (`PerfRecipe::ep_overlap`): Qwen3-235B-A22B
/// on H100 (`qwen3_235b_a22b_pretrain_256gpu_h100_{bf16,fp8cs}_config`: alltoall, TP 2 PP 8 VP 4, EP 32
/// over four nodes, `CommOverlapConfig(overlap_moe_expert_parallel_comm=True, ...)`) overlaps in the
/// 26.x releases, not in 25.x; the full-iteration configs only from 26.06; a recipe that leaves it
/// off (Kimi K2 on H100) does not; without a virtual pipeline at pp > 1 Megatron refuses it.
#[test]
fn perf_recipes_ep_overlap_maps_by_release_and_layout() {
    let overlap = |r: RowWire| map_row(&r).unwrap_or_else(|e| panic!("refused: {}", e.reason)).wire.options.moe_ep_overlap;
    let qwen_h100 = |release: &str, vp: u64| row(release, "DGX-H100", "Qwen3_235B_a22B", "BF16", [256, 2, 8, 1, vp, 32, 1, 8192, 4096], "");
    assert_eq!(overlap(qwen_h100("NeMo 26.02", 4)), Some(true));
    assert_eq!(overlap(qwen_h100("NeMo 26.06", 4)), Some(true));
    assert_eq!(overlap(qwen_h100("NeMo 25.11", 4)), None);
    assert_eq!(overlap(qwen_h100("NeMo 26.02", 1)), None);
    let qwen_gb200 = |release: &str| row(release, "DGX-GB200", "Qwen3_235B_a22B", "MXFP8", [256, 1, 8, 1, 3, 32, 1, 8192, 4096], "");
    assert_eq!(overlap(qwen_gb200("NeMo 26.06")), Some(true));
    assert_eq!(overlap(qwen_gb200("NeMo 26.02")), None);
    assert_eq!(overlap(row("NeMo 26.06", "DGX-H100", "Kimi-K2", "BF16", [1024, 8, 16, 1, 2, 64, 1, 8192, 4096], "")), None);
    // A dev model's: Qwen3-30B-A3B BF16 on H100 (qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config, EP 16
    // over two nodes) overlaps; its FP8-CS config (the dev rows) does not.
    let qwen30 = |precision: &str| row("NeMo 26.04", "DGX-H100", "Qwen3_30B_a3B", precision, [16, 1, 1, 1, 1, 16, 1, 1024, 4096], "");
    assert_eq!((overlap(qwen30("BF16")), overlap(qwen30("FP8-CS"))), (Some(true), None));
}
