//! The published Megatron-Bridge / NeMo dev rows (tests/data/published/megatron_bridge_training_dev.csv,
//! issue 17) scored by `gpuplan validate --published`, held to their current bounds so that a
//! regression fails and an improvement passes.
//!
//! Where the bounds come from: `gpuplan validate --published tests/data/published/megatron_bridge_training_dev.csv`
//! on the merged model of 2026-11-24 (the megatron stack's fused attention; the recipes' FP8/FP4
//! quantize kernels, GEMM dtypes and saved quantized inputs; Megatron's DDP buckets; TE's
//! userbuffers TP overlap; uneven pipeline splits; the load-balanced CP split; DeepSeek-V3's MTP
//! module; the MoE recipes' CUDA graphs and HybridEP dispatch; LoRA), with the three constants
//! `cost::fitted::MEGATRON_OVERLAP_COST` (0.6), `MEGATRON_MEMORY_EFFICIENCY` (0.75) and
//! `MOE_DISPATCH_SYNC_US` (5,000 us) fitted jointly on the fit split's 81 rows
//! (scripts/fit_megatron_published.sh):
//!
//! | split | rows | MAPE | bias | dense MAPE (bias) | MoE MAPE (bias) |
//! | --- | --- | --- | --- | --- | --- |
//! | fit | 81 | 12.46% | +1.9% | 10.16% (+2.1%) | 16.60% (+1.5%) |
//! | test | 61 | 12.65% | -1.9% | 11.51% (+5.2%) | 13.56% (-7.6%) |
//!
//! Then (issue 18, wt-moe2) the full-iteration MoE rows took their recipes' EP communication
//! overlap (`options.moe_ep_overlap`, Megatron-Bridge 0.6.2 `overlap_moe_expert_parallel_comm`),
//! nothing refitted: fit 12.33% (+2.6%; MoE 16.22%, +3.5%), test 11.66% (-0.3%; MoE 11.78%,
//! -4.7%); dense unchanged.
//! Then (wt-pubdense2, same day): Megatron's per-chunk DP overlap under the interleaved schedule
//! (`analytic::ChunkWindows`), the fused attention's measured small-call factor
//! (`cost::fused_small_call_factor`), GB300/B300 clocks at their power caps, and the same joint
//! refit (0.6, 0.70, 5,000 us; the full grid):
//!
//! | split | rows | MAPE | bias | dense MAPE (bias) | MoE MAPE (bias) |
//! | --- | --- | --- | --- | --- | --- |
//! | fit | 81 | 12.16% | +1.4% | 9.53% (+2.3%) | 16.88% (-0.2%) |
//! | test | 61 | 12.35% | -2.7% | 9.30% (+4.8%) | 14.78% (-8.8%) |
//!
//! The MoE test bounds and the LoRA bounds were loosened with it (the memory efficiency the refit
//! lowered from 0.75 to 0.70 slows MoE rows; see the LoRA test for its rows); at 0.75 the test split
//! would be 12.01% (MoE 13.68%), fit 12.21% against the optimum's 12.16%.
//!
//! Session 9's merged tree (all of the above together) and a joint refit on the fit rows (grid
//! narrowed around the optimum; calibration/runs/fit_megatron_published-output.txt): (1.0, 0.65,
//! 4,000 us). The bounds were set to it then:
//!
//! | split | rows | MAPE | bias | dense MAPE (bias) | MoE MAPE (bias) |
//! | --- | --- | --- | --- | --- | --- |
//! | fit | 81 | 11.51% | +1.8% | 9.02% (+0.7%) | 15.98% (+3.7%) |
//! | test | 61 | 8.94% | -1.0% | 7.72% (+3.3%) | 9.90% (-4.4%) |
//!
//! 164 rows: 142 scored, 22 incomplete, 0 unexpressible. History: 105 rows at fit 34.34%, test
//! 21.27% before the issue-17 mechanisms; 109 rows at fit 16.99%, test 17.39% at c630eda. The
//! dense-only bounds were 8.21% / 8.06% when overlap and memory efficiency were fitted on the dense
//! rows alone (0.3, 0.50); that fit made every MoE and LoRA row slow (test 16.2%, bias -11.3% on
//! the merged model), so the joint fit trades dense test accuracy (8.9% -> 11.5%) for MoE (22.1% ->
//! 13.6%) and the whole test split (16.2% -> 12.7%). The MoE bias bound and the LoRA bounds were
//! loosened with it (see their tests).
//!
//! wt-pub3 (2026-11-24): the LoRA rows' perf recipes (adapters on linear_qkv only, distributed
//! optimizer), packed SQuAD for the SFT and LoRA rows (`workload.packed_doc_len`), Blackwell's
//! per-tensor FP8 without a transposed copy (`workload.fp8_non_tn`), and B200/GB200 fused attention
//! at 0.818 of Hopper's level (the SFU's exponentials beside a doubled tensor rate; B300/GB300's
//! doubled SFU rate keeps Hopper's); constants unchanged (the fit script's optimum on this tree,
//! 0.9 / 0.60 / 4,000 us, is 0.08 points from them on the fit rows:
//! calibration/runs/fit_megatron_published-output.txt). The bounds below are set to it:
//!
//! | split | rows | MAPE | bias | dense MAPE (bias) | MoE MAPE (bias) |
//! | --- | --- | --- | --- | --- | --- |
//! | fit | 81 | 10.71% | +3.3% | 7.61% (+3.5%) | 16.26% (+2.8%) |
//! | test | 61 | 8.97% | -0.5% | 6.91% (+5.7%) | 10.61% (-5.4%) |
//!
//! Then the rows' recipes' memory options (bf16 main gradients and their halved DP reduce-scatter,
//! FP8 parameters gathered at 1 B, DeepSeek-V3's selective recompute with its forward re-run,
//! `config::published::memory_recipe`; docs/published-analysis.md "Memory plans of the published
//! rows"), with the constants unchanged (a refit is due):
//!
//! | split | rows | MAPE | bias | dense MAPE (bias) | MoE MAPE (bias) |
//! | --- | --- | --- | --- | --- | --- |
//! | fit | 81 | 12.73% | +3.3% | 10.45% (+4.6%) | 16.81% (+1.1%) |
//! | test | 61 | 12.31% | -0.6% | 11.71% (+7.5%) | 12.78% (-7.1%) |
//!
//! The fit and dense bounds moved up with it (fit +0.27, dense +0.29 / +0.20 points: the DP-bound
//! dense rows now run faster than measured, with constants fitted to fp32 gradient traffic); the
//! test and MoE test bounds down.
//!
//! Then (issue 18, wt-moe3) Megatron's eager MoE layer's host time by mechanism: each grouped expert
//! GEMM launches one cuBLASLt GEMM and one quantize per local expert (`MEGATRON_EXPERT_GEMM_HOST_US`
//! 28 us and `MEGATRON_EXPERT_QUANTIZE_HOST_US` 15.1 us, both measured through PyTorch on the lent
//! H100), the analytic engine runs host and GPU from the dispatcher's drain on as the DES does,
//! partial CUDA graphs cover the attention block's backward rather than the MoE backward, and
//! `MOE_DISPATCH_SYNC_US` refitted on the fit rows with the other two held (scripts/fit_moe_host.sh:
//! 4,000 us again):
//!
//! | split | rows | MAPE | bias | dense MAPE (bias) | MoE MAPE (bias) |
//! | --- | --- | --- | --- | --- | --- |
//! | fit | 81 | 10.76% | +0.8% | 9.02% (+0.7%) | 13.90% (+1.1%) |
//! | test | 61 | 8.93% | -1.6% | 7.72% (+3.3%) | 9.88% (-5.5%) |
//!
//! The MoE test bias bound was loosened with it (4.38% -> 5.45%; see that test).
//!
//! Session 10's merged tree (wt-pub3 and wt-moe3 above together, wt-attndp's engine-only changes)
//! and a joint refit of the three constants on the fit rows
//! (calibration/runs/fit_megatron_published-output.txt): (0.9, 0.60, 3,500 us). The bounds below
//! are set to it:
//!
//! | split | rows | MAPE | bias | dense MAPE (bias) | MoE MAPE (bias) |
//! | --- | --- | --- | --- | --- | --- |
//! | fit | 81 | 9.89% | +1.7% | 7.03% (+2.3%) | 15.02% (+0.6%) |
//! | test | 61 | 8.76% | -1.6% | 6.31% (+4.7%) | 10.70% (-6.6%) |
//!
//! Then GB300's peaks on GB200's datasheet convention (its top clock 2,062 MHz, wt-gb300), and
//! DeepSeek-V3's node-limited routing with the flex dispatcher's one-hop latency (wt-epnodes); the
//! optimum of a grid around the constants is unchanged (0.9, 0.60, 3,500 us):
//!
//! | split | rows | MAPE | bias | dense MAPE (bias) | MoE MAPE (bias) |
//! | --- | --- | --- | --- | --- | --- |
//! | fit | 81 | 9.74% | +1.9% | 7.01% (+2.4%) | 14.62% (+1.1%) |
//! | test | 61 | 8.58% | -1.4% | 6.31% (+4.7%) | 10.38% (-6.2%) |
//!
//! wt-prec4 (issue 17: packed documents' attention at the cuDNN level measured at their length,
//! the NVFP4 recipes' TP without userbuffers overlap, Megatron's MXFP8 parameter copy); the fit
//! optimum on a narrowed grid moved to (0.9, 0.65, 4,000 us) at 9.27%, 0.07 points below the shipped
//! constants, which were kept for the joint refit at merge
//! (calibration/runs/fit_megatron_published-wt-prec4.txt):
//!
//! | split | rows | MAPE | bias | dense MAPE (bias) | MoE MAPE (bias) |
//! | --- | --- | --- | --- | --- | --- |
//! | fit | 81 | 9.34% | +1.0% | 6.39% (+1.0%) | 14.65% (+1.1%) |
//! | test | 61 | 8.45% | -1.8% | 5.98% (+3.9%) | 10.41% (-6.3%) |
//! Then a pipeline's fill and drain lends the compute clock none of its unused power (issue 17,
//! wt-clock4: `power::Activity::long_idle`, measured on the H100 with scripts/power_duty_probe.py);
//! a narrowed grid around the constants (calibration/runs/fit_megatron_published-clock4.txt) puts
//! the optimum at (0.8, 0.60, 3,500 us), fit 9.59%, 0.01 points under the shipped (0.9, 0.60,
//! 3,500 us), which are kept:
//!
//! | split | rows | MAPE | bias | dense MAPE (bias) | MoE MAPE (bias) |
//! | --- | --- | --- | --- | --- | --- |
//! | fit | 81 | 9.60% | +1.3% | 7.01% (+1.7%) | 14.23% (+0.6%) |
//! | test | 61 | 8.24% | -2.1% | 6.10% (+3.6%) | 9.94% (-6.7%) |
//!
//! Then (issue 18, wt-moe4) Megatron-Core's token permutations by dispatcher (the alltoall
//! dispatcher's second permutation by local expert, DeepEP's permute of the received rows, none
//! outside HybridEP's dispatch and combine kernels; the unpermute writes a row per token), the
//! 26.06 rows on HybridEP, and the GB200/GB300 rows of 26.02-26.04.01 on HybridEP too (chosen on
//! the fit split), the permutations at their measured share of the copy rate
//! (`cost::lower::MOE_PERMUTE_COPY_SHARE`, 0.925, H100); the three constants unchanged (a grid
//! refit on the fit rows moves them to 0.8, 0.55, 4,500 us: fit 8.69%, test 7.42%, MoE test 8.70%;
//! calibration/runs/fit_megatron_published-wt-moe4.txt, left to the lead's joint refit at merge):
//!
//! | split | rows | MAPE | bias | dense MAPE (bias) | MoE MAPE (bias) |
//! | --- | --- | --- | --- | --- | --- |
//! | fit | 81 | 9.21% | +4.2% | 7.01% (+2.4%) | 13.15% (+7.4%) |
//! | test | 61 | 7.42% | +4.0% | 6.31% (+4.7%) | 8.30% (+3.4%) |
//!
//! Session 11's merge of the four branches above (wt-prec4, wt-clock4, wt-moe4, wt-models4: their
//! rows as merged, fit 9.25% / test 8.12% before the moe4 merge, fit 8.67% / test 6.94% after it),
//! then the joint refit on the fit rows (calibration/runs/fit_megatron_published-output.txt, last
//! block): (0.8, 0.575, 4,500 us):
//!
//! | split | rows | MAPE | bias | dense MAPE (bias) | MoE MAPE (bias) |
//! | --- | --- | --- | --- | --- | --- |
//! | fit | 81 | 8.26% | +0.5% | 6.41% (-0.1%) | 11.57% (+1.4%) |
//! | test | 61 | 7.34% | +0.0% | 5.81% (+2.5%) | 8.55% (-1.9%) |
//!
//! Then Megatron-Core's non-interleaved 1F1B schedule exchanging with its neighbours blocking
//! (`analytic::step_breakdown`: two exchanges per micro-batch at vp 1; the constants re-checked on
//! a narrowed grid, optimum unchanged): fit 8.20% (+0.4%), test 7.13% (-0.2%), MoE test 8.18%
//! (-2.3%); test DGX-B200 10.01% -> 9.24%.
//!
//! Then Megatron-Core's distributed-optimizer buffers (`step::megatron_dense_buffers`, wt-b200dense:
//! the word embedding's bucket is the last reduced and the first gathered, exposed whole; bf16
//! parameters gathered at 2 B under per-tensor `fp8_param_gather`; the constants re-checked on a
//! narrowed grid, optimum unchanged): fit 8.20% (+0.4%; dense 6.40%), test 7.09% (-0.2%; dense 5.73%),
//! MoE unchanged; test DGX-B200 9.24% -> 9.12% (row 159 +14.9% -> +14.2%).
//!
//! Then (issues 17/18, wt-b200moe) the eager MoE layer's host time before the dispatcher's sync,
//! launch-side beside the GPU's queued work (`cost::fitted::MOE_LAYER_HOST_US`), fitted with the
//! stall after the sync on the fit rows, the shared overlap and memory efficiency held
//! (calibration/runs/fit_megatron_published-wt-b200moe.txt): (3,750 us, 1,500 us). Dense rows
//! unchanged; fit 8.08% (+1.1%; MoE 11.09%), test 6.61% (+1.2%; MoE 7.31% / +0.18%); test DGX-B200
//! 9.12% -> 7.88% (+0.9%).
//!
//! Then (wt-mbmoe) the GB300 DeepSeek-V3 MXFP8 rows before 26.06 with the recompute of the FP8-CS
//! config whose layout they print (`mla_up_proj`; the no-recompute full-iteration config lands in
//! 26.06): fit 8.10% -> 8.12% (+1.1% -> +1.0%; rows 33/49/65/81 peak 375 -> 303 GiB, row 94 -10.4%
//! -> -12.2%), test unchanged (6.63%; main had drifted from 6.61% with later merges). The perf
//! recipes' EP overlap (`PerfRecipe::ep_overlap`) moves no dev row (no dev model has a perf recipe).
//!
//! Bound = current + 1 percentage point. Lower a bound when a change improves the numbers; the
//! issue's target is 8% MAPE on the test split.

use std::process::Command;

const CSV: &str = "tests/data/published/megatron_bridge_training_dev.csv";

/// MAPE (percent) of the fit and test splits measured when the bounds were set, and the slack.
const FIT_MAPE_NOW: f64 = 8.12;
const TEST_MAPE_NOW: f64 = 6.61;
/// The same for the dense rows (`summary[].kinds.dense`).
const FIT_DENSE_MAPE_NOW: f64 = 6.40;
const TEST_DENSE_MAPE_NOW: f64 = 5.73;
const SLACK_PP: f64 = 1.0;
/// Unexpressible rows when the bounds were set (none: every complete row maps), and incomplete rows
/// (a property of the data).
const UNEXPRESSIBLE_NOW: usize = 0;
const INCOMPLETE: usize = 22;

fn validate(extra: &[&str]) -> (i32, serde_json::Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuplan"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["validate", "--published", CSV, "--json"])
        .args(extra)
        .output()
        .expect("run gpuplan validate --published");
    let v = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out.status.code().unwrap_or(-1), v, String::from_utf8_lossy(&out.stderr).into_owned())
}

fn split_stats<'a>(v: &'a serde_json::Value, split: &str) -> &'a serde_json::Value {
    &v["summary"].as_array().unwrap().iter().find(|s| s["split"] == split).unwrap_or_else(|| panic!("no {split} summary: {v:#}"))["all"]
}

#[test]
fn dev_set_stays_within_its_current_bounds() {
    let (code, v, err) = validate(&[]);
    assert_eq!(code, 0, "{err}");
    let (fit, test) = (split_stats(&v, "fit"), split_stats(&v, "test"));
    let (fit_mape, test_mape) = (fit["mape_pct"].as_f64().unwrap(), test["mape_pct"].as_f64().unwrap());
    println!("published dev rows: fit {fit_mape:.2}% (n={}), test {test_mape:.2}% (n={})", fit["n"], test["n"]);
    assert!(fit_mape <= FIT_MAPE_NOW + SLACK_PP, "fit-split MAPE {fit_mape:.2}% > {FIT_MAPE_NOW}% + {SLACK_PP}");
    assert!(test_mape <= TEST_MAPE_NOW + SLACK_PP, "test-split MAPE {test_mape:.2}% > {TEST_MAPE_NOW}% + {SLACK_PP}");
    let dense = |split: &str| {
        let s = v["summary"].as_array().unwrap().iter().find(|s| s["split"] == split).unwrap();
        s["kinds"]["dense"]["mape_pct"].as_f64().unwrap()
    };
    let (fit_dense, test_dense) = (dense("fit"), dense("test"));
    assert!(fit_dense <= FIT_DENSE_MAPE_NOW + SLACK_PP, "fit-split dense MAPE {fit_dense:.2}% > {FIT_DENSE_MAPE_NOW}% + {SLACK_PP}");
    assert!(test_dense <= TEST_DENSE_MAPE_NOW + SLACK_PP, "test-split dense MAPE {test_dense:.2}% > {TEST_DENSE_MAPE_NOW}% + {SLACK_PP}");

    let not_scored = v["not_scored"].as_array().unwrap();
    let count = |k: &str| not_scored.iter().filter(|n| n["kind"] == k).count();
    assert_eq!(count("unexpressible"), UNEXPRESSIBLE_NOW, "every complete row is expressible");
    assert_eq!(count("incomplete"), INCOMPLETE);
    assert_eq!(count("unsupported"), 0, "every published system is mapped");
    for n in not_scored {
        assert!(n["reason"].as_str().is_some_and(|r| r.len() > 10), "a row not scored without a reason: {n}");
    }
    assert_eq!(v["rows"].as_array().unwrap().len() + not_scored.len(), 164);
    for r in v["rows"].as_array().unwrap() {
        assert!(r["predicted"].as_f64().unwrap() > 0.0 && r["breakdown_share"].as_object().is_some_and(|b| !b.is_empty()), "{r}");
    }
}

/// The 8 LoRA rows (Llama-3 70B on GB300/GB200/H100, NeMo 26.06; Llama-2 7B/13B/70B on H100,
/// NeMo 24.07) are scored with their recipes' adapters (`published::lora_recipe`). History: 8.03%
/// MAPE when first scored; 15.5% at session 9's joint refit (row 25 -27.4%), with the adapters of
/// the library recipe (all four linears, no distributed optimizer) and full-sequence attention.
/// wt-pub3 (2026-11-24): the Megatron-Bridge 0.6.2 perf recipes the 26.06 rows ran
/// (`llama3_70b_peft_8gpu_*`: adapters on linear_qkv only, distributed optimizer, SP and TP overlap
/// at TP 2) and packed SQuAD documents (`SQUAD_PACKED_DOC_TOKENS`): 8.4%, each within 22%; GB200's
/// two rows are the outliers (+18%, +22%; GB300's of the same layout +4%, +9%).
#[test]
fn lora_rows_are_scored_with_their_recipes_adapters() {
    let (code, v, err) = validate(&[]);
    assert_eq!(code, 0, "{err}");
    let ids = ["21", "22", "23", "24", "25", "142", "143", "144"];
    let rows: Vec<&serde_json::Value> = v["rows"].as_array().unwrap().iter().filter(|r| ids.contains(&r["dev_row"].as_str().unwrap_or(""))).collect();
    assert_eq!(rows.len(), 8, "every LoRA row is scored");
    let mut sum = 0.0;
    for r in &rows {
        let e = r["error"].as_f64().unwrap();
        assert!(e.abs() < LORA_ROW_MAX, "{r}");
        let notes = r["notes"].to_string();
        assert!(notes.contains("LoRA rank") && notes.contains("packed SQuAD"), "{r}");
        sum += e.abs();
    }
    assert!(sum / 8.0 < LORA_MAPE_NOW + SLACK_PP / 100.0, "LoRA MAPE {:.2}%", 100.0 * sum / 8.0);

    // The 26.06 rows' perf recipe, field by field (Megatron-Bridge 0.6.2
    // perf_recipes/llama/h100/llama3.py llama3_70b_peft_8gpu_h100_fp8cs_config).
    use gpuplan::config::published::{map_row, read_rows, SQUAD_PACKED_DOC_TOKENS};
    let rows = read_rows(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(CSV)).unwrap();
    let m = map_row(rows.iter().find(|r| r.dev_row == "25").unwrap()).unwrap();
    let (p, wl) = (&m.wire.parallelism, &m.wire.workload);
    assert_eq!((wl.lora_rank, wl.lora_targets.clone()), (Some(16), Some(vec!["linear_qkv".to_string()])));
    assert_eq!((p.tp, p.zero, p.sp, m.wire.options.tp_comm_overlap), (Some(2), Some(1), Some(true), Some(true)));
    assert_eq!(wl.packed_doc_len, Some(SQUAD_PACKED_DOC_TOKENS as i64));
    // NeMo 24.07's NeMo 1 PEFT keeps its own defaults; pre-training rows are not packed.
    let m = map_row(rows.iter().find(|r| r.dev_row == "142").unwrap()).unwrap();
    assert_eq!((m.wire.workload.lora_rank, m.wire.parallelism.zero), (Some(32), Some(0)));
    assert_eq!(map_row(rows.iter().find(|r| r.dev_row == "48").unwrap()).unwrap().wire.workload.packed_doc_len, None);
}

/// LoRA rows' MAPE (fraction) when the bounds were set, and the largest row error allowed.
const LORA_MAPE_NOW: f64 = 0.060;
const LORA_ROW_MAX: f64 = 0.205;

/// MoE rows alone (issue 18), test split: MAPE and |bias| when the bounds were set (see the module
/// doc), and the micro-batch trend the dev rows show. 13.56% / -7.62% at the joint refit; 11.78% /
/// -4.71% with the EP overlap of the full-iteration recipes; 9.90% / -4.38% at session 9's joint
/// refit; 9.88% / -5.45% with the per-expert launches and the drain (wt-moe3): the bias bound
/// loosened by 1.07 points, because the launches the GPU no longer hides after the drain slow the
/// Qwen3-30B-A3B rows at micro-batch 4 and 8 too (-7.6% -> -8.5% on that model's 21 test rows) while
/// DeepSeek-V3's test rows move from 13.5% to 11.8%. wt-pub3 (B200/GB200 fused attention at 0.818 of
/// Hopper's level, the softmax exponentials' share; nothing MoE-specific) moves the B200/GB200 MoE
/// rows down about 1% more. Merged tree with session 10's joint refit (sync 4,000 -> 3,500 us,
/// memory efficiency 0.65 -> 0.60): 10.70% / -6.61%, the bias bound loosened by 1.16 points more
/// (the refit is on the fit rows, where the MoE bias is +0.6%; the test MoE rows are mostly
/// Qwen3-30B-A3B at -8..-9%, and DeepSeek-V3's test rows are at +0.8%). wt-epnodes (node-limited
/// routing for DeepEP/HybridEP across nodes; the flex dispatcher's one-hop latency): 10.47% / -6.31%.
/// wt-prec4 (Megatron's per-step copy of the bf16-gathered parameters into the MXFP8 weights,
/// `step::mxfp8_param_copy`, charged on every MXFP8 row): 10.38% / -6.22% -> 10.41% / -6.26%, both
/// bounds loosened by 0.03-0.04 points with it (the MoE MXFP8 rows pay the copy too).
/// wt-clock4 (a pipeline's fill and drain lends the compute clock nothing; issue 17): 9.94% /
/// -6.69%, the bias bound loosened by 0.47 points: the rule slows the PP layouts, and among the test
/// MoE rows those are the over-predicted DGX-B200 / DGX-B300 DeepSeek-V3 PP 16 rows (+12.7..+18.0%
/// -> +10.1..+15.2%, +6.7..+12.0% -> +4.2..+9.4%), whose drop lowers the MAPE (10.38% -> 9.94%) but
/// moves the mean further from zero, and GB300's DeepSeek-V3 PP 2 rows (-13.0..-13.7% ->
/// -13.2..-13.8%).
/// wt-moe4 (Megatron-Core's permutations by dispatcher and flex backend; HybridEP for the 26.06
/// rows and the earlier GB200/GB300 rows; the permutations at their measured copy share): 8.30% /
/// +3.41%, both bounds tightened.
/// Session 11's merge of wt-prec4, wt-clock4, wt-moe4 and wt-models4, then the joint refit of the
/// three constants on the fit rows (0.8, 0.575, 4,500 us): 8.55% / -1.92%.
/// Then Megatron-Core's non-interleaved 1F1B exchanging with its neighbours blocking (every
/// micro-batch's two exchanges on the critical path at vp 1): 8.18% / -2.30%, the bias bound
/// loosened by 0.38 points: the over-predicted DeepSeek-V3 PP 16 rows on DGX-B200/B300 come down
/// (+14.6% -> +11.7% on row 84), which lowers the MAPE and moves the mean further below zero.
/// Then the eager MoE layer's host time before the dispatcher's sync, fitted with the stall after
/// it (wt-b200moe): 7.31% / +0.18%, both bounds tightened.
const MOE_TEST_MAPE_NOW: f64 = 7.31;
const MOE_TEST_BIAS_NOW: f64 = 0.18;

#[test]
fn moe_rows_stay_within_their_bounds_and_grow_with_the_micro_batch() {
    let (code, v, err) = validate(&[]);
    assert_eq!(code, 0, "{err}");
    let rows = v["rows"].as_array().unwrap();
    let moe: Vec<f64> = rows.iter().filter(|r| r["moe"] == true && r["split"] == "test").map(|r| r["error"].as_f64().unwrap()).collect();
    let mape = 100.0 * moe.iter().map(|e| e.abs()).sum::<f64>() / moe.len() as f64;
    let bias = 100.0 * moe.iter().sum::<f64>() / moe.len() as f64;
    assert!(mape <= MOE_TEST_MAPE_NOW + SLACK_PP, "MoE test MAPE {mape:.2}% (n={})", moe.len());
    assert!(bias.abs() <= MOE_TEST_BIAS_NOW + SLACK_PP, "MoE test bias {bias:+.2}%");
    // Qwen3-30B-A3B on 8 B200, NeMo 26.02, EP 8: micro-batch 4 (dev row 72, test) measures 2.75x
    // micro-batch 1 (dev row 88, fit): each eager MoE layer's host time is paid per micro-batch,
    // and at micro-batch 1 the per-expert launches outlast the GPU's work.
    let row = |id: &str| rows.iter().find(|r| r["dev_row"] == id).unwrap_or_else(|| panic!("dev row {id} not scored"));
    let (mbs4, mbs1) = (row("72"), row("88"));
    let measured = mbs4["measured"].as_f64().unwrap() / mbs1["measured"].as_f64().unwrap();
    let predicted = mbs4["predicted"].as_f64().unwrap() / mbs1["predicted"].as_f64().unwrap();
    assert!((measured - 2.75).abs() < 0.01, "{measured}");
    // 2.41x when the sync was fitted on the MoE rows alone (6,500 us); 2.11x at the joint fit's
    // 5,000 us; 1.95x at session 9's joint refit (4,000 us; lower bound loosened from 2.0 to 1.9:
    // the trend is still under-predicted, see issue 18's notes); 2.39x with the per-expert launches
    // and the drain (wt-moe3): lower bound 2.2; 2.33x with the permutations by dispatcher and their measured copy share (wt-moe4);
    // 2.43x with the 1F1B exchanges; 2.65x with the layer's host time before the sync running beside
    // the GPU's queued work (wt-b200moe): lower bound 2.5.
    assert!((2.5..3.3).contains(&predicted), "predicted micro-batch 4 / 1 = {predicted:.2}, measured {measured:.2}");
}

#[test]
fn bounds_exit_1_when_exceeded_and_bad_bounds_exit_2() {
    // The test split's bias is +4.0% now: a 0.01% bound is exceeded too.
    let (code, v, err) = validate(&["--split", "test", "--max-mape", "5", "--max-bias", "0.01"]);
    assert_eq!(code, 1, "test split is far from 5%: {err}");
    assert!(err.contains("MAPE") && err.contains("bias"), "{err}");
    assert!(v["summary"].as_array().unwrap().iter().all(|s| s["split"] == "test"));
    let (code, _, _) = validate(&["--split", "test", "--max-mape", &format!("{}", TEST_MAPE_NOW + SLACK_PP)]);
    assert_eq!(code, 0);
    let (code, _, err) = validate(&["--max-mape", "power=5"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("tokens/s/GPU"), "{err}");
}

/// One row's mapping, field by field, so that it cannot drift silently: dev_row 48 (NeMo 26.04,
/// Llama-3 70B on 64 DGX-H100, TP 4 PP 8 VP 5, FSDP column 0, FP8).
#[test]
fn a_rows_mapping_is_pinned() {
    use gpuplan::config::published::{map_row, read_rows};
    let rows = read_rows(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(CSV)).unwrap();
    let r = rows.iter().find(|r| r.dev_row == "48").unwrap();
    let m = map_row(r).unwrap();
    let (w, p, wl, o) = (&m.wire, &m.wire.parallelism, &m.wire.workload, &m.wire.options);
    let got = format!(
        "model={:?} system={:?} gpus={:?} tp={:?} pp={:?} dp={:?} cp={:?} ep={:?} etp={:?} vp={:?} sp={:?} zero={:?} schedule={:?} \
         mode={:?} mbs={:?} gbs={:?} seq={:?} precision={:?} recompute={:?} stack={:?} routing={:?} tp_overlap={:?} dp_overlap={:?}",
        w.model,
        w.system,
        w.gpus,
        p.tp,
        p.pp,
        p.dp,
        p.cp,
        p.ep,
        p.etp,
        p.vp,
        p.sp,
        p.zero,
        p.schedule,
        wl.mode,
        wl.micro_batch,
        wl.global_batch,
        wl.seq,
        wl.precision,
        wl.recompute,
        wl.stack,
        wl.routing_imbalance,
        o.tp_comm_overlap,
        o.dp_overlap
    );
    assert_eq!(
        got,
        "model=Some(\"llama-3-70b\") system=Some(\"dgx-h100\") gpus=Some(64) tp=Some(4) pp=Some(8) dp=None cp=Some(1) ep=Some(1) \
         etp=None vp=Some(5) sp=None zero=Some(1) schedule=None mode=Some(\"train\") mbs=Some(1) gbs=Some(256) seq=Some(8192) \
         precision=Some(\"fp8\") recompute=Some(\"none\") stack=Some(\"megatron\") routing=Some(1.0) tp_overlap=Some(true) dp_overlap=None"
    );
    let c = &m.case;
    assert_eq!(
        (c.id.as_str(), c.split.as_str(), c.system.as_str(), c.moe, c.precision.as_str(), c.gpus, c.measured),
        ("48", "fit", "dgx-h100", false, "fp8", 64, 1633.0)
    );
    assert_eq!(c.recipe, "fp8-current (Bridge perf configs' fp8_cs, from memory)");

    // The NVFP4 perf recipes turn TE's TP overlap off (`NVFP4_TP_COMM_OVERLAP`); the MXFP8 row of
    // the same layout, model, system and release keeps it (GB200 Llama-3 70B, TP 2 PP 4 VP 5, 26.02).
    let tp_overlap = |id: &str| map_row(rows.iter().find(|r| r.dev_row == id).unwrap()).unwrap().wire.options.tp_comm_overlap;
    assert_eq!((tp_overlap("75"), tp_overlap("77")), (Some(false), Some(true)));

    // The FSDP column (1/0 in 25.07-25.09, a group size in the archive) turns on ZeRO-3.
    let fsdp = rows.iter().find(|r| r.dev_row == "147").unwrap();
    assert_eq!(map_row(fsdp).unwrap().wire.parallelism.zero, Some(3));
    // DeepSeek-V3 trains its MTP module where the row's FLOPs say so (NeMo 26.x, 25.11 'w/ MTP'),
    // and not in the 25.11 'w/o MTP' rows.
    let mtp = |id: &str| map_row(rows.iter().find(|r| r.dev_row == id).unwrap()).unwrap().wire.workload.mtp_layers;
    assert_eq!((mtp("0"), mtp("104"), mtp("94")), (Some(1), Some(1), None));
    // The MoE recipes' CUDA graphs, dispatcher and flex backend (RECIPE_DEFAULTS `cuda_graphs`,
    // `moe_dispatcher`): Qwen3-30B-A3B MXFP8 on GB200 in NeMo 26.08 (full-iteration HybridEP
    // recipe), the same in 26.04.01 (partial graphs; HybridEP, the NVL72 backend: DeepEP does not
    // run on GB200), on H100 in 26.04.01 (no graphs, DeepEP), DeepSeek-V3 MXFP8 on B200 in 26.04
    // (partial graphs, DeepEP), and Mixtral in NeMo 25.04 (alltoall).
    let moe = |id: &str| {
        let w = map_row(rows.iter().find(|r| r.dev_row == id).unwrap()).unwrap().wire;
        (w.options.cuda_graphs, w.workload.moe_dispatcher, w.workload.moe_flex_backend)
    };
    let s = |x: &str| Some(x.to_string());
    assert_eq!(moe("3"), (s("full"), s("flex"), s("hybridep")));
    assert_eq!(moe("38"), (s("partial"), s("flex"), s("hybridep")));
    assert_eq!(moe("41"), (None, s("flex"), s("deepep")));
    assert_eq!(moe("52"), (s("partial"), s("flex"), s("deepep")));
    assert_eq!(moe("154"), (s("partial"), None, None));
    assert_eq!(moe("48"), (None, None, None));
    // The full-iteration recipes also overlap the EP all-to-alls (RECIPE_DEFAULTS `moe_ep_overlap`):
    // Qwen3 at pp 1 and DeepSeek-V3 on GB300 at pp 2 vp 8 do; the B300 row at pp 8 without a
    // virtual pipeline cannot (Megatron asserts one), nor the partial-graph rows.
    let overlap = |id: &str| map_row(rows.iter().find(|r| r.dev_row == id).unwrap()).unwrap().wire.options.moe_ep_overlap;
    assert_eq!((overlap("3"), overlap("0"), overlap("11"), overlap("38"), overlap("52")), (Some(true), Some(true), None, None, None));
    // A row the mapping cannot express says why (an incomplete row: its precision is missing).
    let incomplete = rows.iter().find(|r| r.dev_row == "109").unwrap();
    let e = map_row(incomplete).unwrap_err();
    assert!(e.reason.contains("precision"), "{}", e.reason);
}
