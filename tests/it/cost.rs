//! Cost-model tests that read the shipped catalog (moved out of `gpuplan-core`, which reads no
//! files).

use gpuplan::config::system::{gpu_by_driver_name, load_system};
use gpuplan::cost::*;
use gpuplan::hardware::profile::{AttentionBmmPoint, Profile};
use gpuplan::hardware::Dtype;
use gpuplan::units::{FlopsPerSec, Seconds};
use gpuplan::workload::{Backward, Op, OpKind, Pass};

fn point(seq_len: u64, head_dim: u64, tflops: f64) -> AttentionBmmPoint {
    AttentionBmmPoint { seq_len, head_dim, achieved: FlopsPerSec::tflops(tflops) }
}

/// A synthetic H200 table: efficiency rising with s at d = 128, one level at d = 64.
fn table() -> Vec<AttentionBmmPoint> {
    vec![point(8192, 128, 600.0), point(512, 128, 200.0), point(2048, 128, 400.0), point(1024, 64, 300.0)]
}

fn h200_profile(attention_bmm: Vec<AttentionBmmPoint>) -> Profile {
    Profile { name: "synthetic".into(), gpu_name: "NVIDIA H200".into(), n_gpus: 1, provenance: "unit test".into(), attention_bmm, ..Default::default() }
}

/// Forward, non-causal attention of 256 (sequence, head) pairs.
fn attention(q_len: u64, kv_len: u64, d: u64) -> Op {
    let kv_bytes = (256 * kv_len * 2 * d) as f64 * 2.0;
    Op {
        name: "attention",
        kind: OpKind::Attention { batch_heads: 256, q_len, kv_len, head_dim_qk: d, head_dim_v: d, causal: false, backward: false, kv_bytes, window: None },
        pass: Pass::Forward,
        backward: Default::default(),
    }
}

#[test]
fn gemm_between_measured_row_counts_interpolates_the_measurements() {
    let system = load_system("hgx-h200").unwrap();
    let point = |m: u64, n: u64, tflops: f64| gpuplan::hardware::profile::GemmPoint {
        dtype: Dtype::Bf16,
        m,
        n,
        k: 4096,
        achieved: FlopsPerSec::tflops(tflops),
        sm_clock: gpuplan::units::Hertz::mhz(1500.0),
    };
    let mut p = h200_profile(Vec::new());
    p.gemm = vec![point(512, 6144, 580.0), point(2048, 6144, 665.0), point(512, 1000, 300.0)];
    let c = CostModel::new(&system, Some(&p));
    let peak = c.peak(Dtype::Bf16).unwrap().value();
    let eff = |m: u64, n: u64| c.gemm_efficiency(m, n, 4096, 1, Dtype::Bf16) * peak / 1e12;
    // At the measured shapes: the measurements.
    assert!((eff(512, 6144) - 580.0).abs() < 1e-6 && (eff(2048, 6144) - 665.0).abs() < 1e-6);
    // Between them: log-linear in M (1024 is halfway), no wave-quantization dip at 768.
    assert!((eff(1024, 6144) - (580.0f64 * 665.0).sqrt()).abs() < 1e-6, "{}", eff(1024, 6144));
    let at768 = eff(768, 6144);
    assert!(at768 > 580.0 && at768 < 665.0, "{at768}");
    // Outside the bracket, or another N: the wave model with the nearest ratios (not interpolated).
    assert!(eff(4096, 6144) > 0.0 && eff(768, 1000) > 0.0);
    assert_ne!(eff(768, 1000), eff(768, 6144));
}

#[test]
fn measured_attention_shape_slows_what_it_should_and_leaves_the_reference_alone() {
    let system = load_system("hgx-h200").unwrap();
    let base = CostModel::new(&system, None);
    let with_table = h200_profile(table());
    let measured = CostModel::new(&system, Some(&with_table));
    let overhead = base.kernel_overhead();
    let kernel = |c: &CostModel, op: &Op| {
        let t = c.attention_time(op);
        assert_eq!(t.bound, Bound::Compute, "{op:?}");
        (t.time - overhead).value()
    };
    // The reference shape (s = 8192, d = 128): unchanged, to the bit.
    let r = attention(8192, 8192, 128);
    assert_eq!(base.attention_time(&r), measured.attention_time(&r));
    // s = 2048 measured at 2/3 of the reference's efficiency: 1.5x the compute time.
    let a = attention(2048, 2048, 128);
    let ratio = kernel(&measured, &a) / kernel(&base, &a);
    assert!((ratio - 1.5).abs() < 1e-9, "{ratio}");
    // Rectangular: s_q = 1024, s_kv = 4096 is read at s = 2048.
    let a = attention(1024, 4096, 128);
    assert!((kernel(&measured, &a) / kernel(&base, &a) - 1.5).abs() < 1e-9);
    // d = 64 has one measured point (300 at s = 2048, half the d = 128 reference): only the
    // dependence on s is taken, within a head dim, so d = 64 is priced as before.
    let a = attention(2048, 2048, 64);
    assert!((kernel(&measured, &a) / kernel(&base, &a) - 1.0).abs() < 1e-9);
    // Between two shapes, FLOP rates move by the measured ratio (300 / 500 TFLOP/s at
    // s = 1024 and 4096) on top of what the model already had (wave quantization).
    let rate = |c: &CostModel, s: u64| attention(s, s, 128).flops() / kernel(c, &attention(s, s, 128));
    let moved = (rate(&measured, 1024) / rate(&measured, 4096)) / (rate(&base, 1024) / rate(&base, 4096));
    assert!((moved - 0.6).abs() < 1e-9, "{moved}");
    // Said in the numbers used: measured on this GPU.
    let used = measured.used_numbers(Dtype::Bf16);
    let f = used.iter().find(|u| u.name == "attention_shape_factor").unwrap();
    assert_eq!((f.source.kind(), f.value.as_str()), ("measured", "0.333..1.000"));
    assert!(f.source.citation().contains("profile `synthetic`"), "{f:?}");
    // The level stays the GPU file's.
    let level = used.iter().find(|u| u.name == "attention_fraction").unwrap();
    assert_eq!(level.source, system.gpu.efficiency.attention.source);
}

#[test]
fn kernels_in_a_cuda_graph_cost_the_gpus_floor_not_the_profiles_stream_launch() {
    let system = load_system("hgx-h200").unwrap();
    let mut p = h200_profile(vec![]);
    p.kernel_launch = Some(Seconds::us(3.0));
    let stream = CostModel::new(&system, Some(&p));
    assert_eq!(stream.kernel_overhead(), Seconds::us(3.0));
    let graph = CostModel::new(&system, Some(&p)).in_cuda_graph();
    assert_eq!(graph.kernel_overhead(), system.gpu.efficiency.kernel_overhead.value);
    assert!(graph.kernel_overhead() < Seconds::us(1.0));
    // Everything else as measured: the difference is the fixed cost per kernel only.
    let (a, b) = (stream.memory_time(1e9, 4).time, graph.memory_time(1e9, 4).time);
    assert!(((a - b).value() - 4.0 * (3.0e-6 - graph.kernel_overhead().value())).abs() < 1e-15);
}

#[test]
fn profiles_without_the_table_price_attention_as_before() {
    let system = load_system("hgx-h200").unwrap();
    let mut without = h200_profile(vec![]);
    // Other measured parts (HBM, launch) still apply; only attention's factor is absent.
    without.kernel_launch = Some(Seconds::us(3.0));
    let mut flat = without.clone();
    flat.attention_bmm = vec![point(512, 128, 500.0), point(8192, 128, 500.0), point(1024, 64, 500.0)];
    let (a, b) = (CostModel::new(&system, Some(&without)), CostModel::new(&system, Some(&flat)));
    for op in [attention(512, 512, 128), attention(8192, 8192, 64), attention(1, 4096, 128), attention(3000, 3000, 96)] {
        assert_eq!(a.attention_time(&op), b.attention_time(&op), "{op:?}");
    }
    assert!(a.used_numbers(Dtype::Bf16).iter().all(|u| u.name != "attention_shape_factor"));
    assert!(CostModel::new(&system, None).used_numbers(Dtype::Bf16).iter().all(|u| u.name != "attention_shape_factor"));
}

#[test]
fn the_attention_shape_transfers_to_another_gpu_and_not_from_an_unknown_one() {
    let b200 = load_system("dgx-b200").unwrap();
    let mut p = h200_profile(table());
    p.measured_gpu = gpu_by_driver_name("NVIDIA H200").map(Box::new);
    assert!(p.measured_gpu.is_some());
    let (base, moved) = (CostModel::new(&b200, None), CostModel::new(&b200, Some(&p)));
    let a = attention(2048, 2048, 128);
    let over = base.kernel_overhead();
    let ratio = (moved.attention_time(&a).time - over).value() / (base.attention_time(&a).time - over).value();
    assert!((ratio - 1.5).abs() < 1e-9, "{ratio}");
    let used = moved.used_numbers(Dtype::Bf16);
    let f = used.iter().find(|u| u.name == "attention_shape_factor").unwrap();
    assert_eq!(f.source.kind(), "transferred");
    assert!(f.source.citation().contains("measured on NVIDIA H200"), "{f:?}");
    // A GPU the catalog does not know: nothing can be said about it, nothing applies.
    let mut unknown = h200_profile(table());
    unknown.gpu_name = "Some Future GPU".into();
    let c = CostModel::new(&b200, Some(&unknown));
    assert_eq!(c.attention_time(&a), base.attention_time(&a));
}

/// Megatron's TP overlap as the userbuffers configs run it: the reduce-scatter after the output
/// projection moves in front of the GEMM that produces it and runs beside it (the last of its four
/// chunks exposed), and that GEMM runs on the SMs the reduce-scatter leaves; the all-gather before
/// a column-parallel GEMM pairs with that GEMM, not with the FP8 cast between them. Without the
/// option both stay blocking where they were.
#[test]
fn megatron_tp_overlap_pairs_each_collective_with_its_gemm() {
    use gpuplan::cost::lower::{Overlap, Step, UB_PIPELINE_SMS, UB_PIPELINE_SPLITS};
    use gpuplan::hardware::profile::CollectiveOp;
    use gpuplan::parallelism::{Group, ParallelConfig, Schedule};
    use gpuplan::scenario::Options;
    use gpuplan::workload::{Fp8Recipe, Mode, MoeDispatcher, Recompute, Stack, Workload};
    let system = load_system("dgx-h100").unwrap();
    let cost = CostModel::new(&system, None).for_stack(Stack::Megatron);
    let pc = ParallelConfig { tp: 4, sp: true, pp: 1, vp: 1, dp: 1, cp: 1, ep: 1, etp: 1, zero: 1, schedule: Schedule::OneFOneB, split: Default::default() };
    let w = Workload {
        mode: Mode::Train,
        micro_batch: 1,
        global_batch: 1,
        seq: 8192,
        batch: 1,
        kv_len: 0,
        precision: Dtype::Fp8,
        fp8_recipe: Fp8Recipe::Tensorwise,
        recompute: Recompute::None,
        stack: Stack::Megatron,
        dropout: false,
        flash_attention: true,
        routing_imbalance: 1.0,
        moe_capacity: None,
        moe_dispatcher: MoeDispatcher::AllToAll,
        moe_flex_backend: gpuplan::workload::FlexBackend::DeepEp,
        lora: None,
        mtp_layers: 0,
        cp_comm: gpuplan::workload::CpComm::P2p,
        megatron: Default::default(),
        fsdp: Default::default(),
        decode_tokens: 1,
        attention_dp: None,
        packed_doc_len: None,
        train_loop: Default::default(),
        fp8_non_tn: false,
    };
    let op = |name, kind| Op { name, kind, pass: Pass::Forward, backward: Backward::Mirror };
    let bytes = 8192.0 * 8192.0 * 2.0;
    let ops = vec![
        op("tp_all_gather", OpKind::Comm { op: CollectiveOp::AllGather, group: Group::Tp, bytes }),
        op("quantize", OpKind::Memory { bytes: 8192.0 * 8192.0 * 6.0, kernels: 2 }),
        op("qkv_proj", OpKind::Gemm { m: 8192, n: 2560, k: 8192, count: 1 }),
        op("quantize", OpKind::Memory { bytes: 8192.0 * 2048.0 * 6.0, kernels: 2 }),
        op("out_proj", OpKind::Gemm { m: 8192, n: 8192, k: 2048, count: 1 }),
        op("tp_reduce", OpKind::Comm { op: CollectiveOp::ReduceScatter, group: Group::Tp, bytes }),
    ];
    let names = |steps: &[Step]| {
        steps
            .iter()
            .map(|s| match s {
                Step::Kernel { name, .. } | Step::Comm { name, .. } => *name,
            })
            .collect::<Vec<_>>()
    };
    let time_of = |steps: &[Step], n: &str| {
        steps.iter().find_map(|s| if let Step::Kernel { name, time, .. } = s { (*name == n).then_some(*time) } else { None }).unwrap()
    };
    let overlap_of = |steps: &[Step], n: &str| {
        steps.iter().find_map(|s| if let Step::Comm { name, comm } = s { (*name == n).then_some(comm.overlap) } else { None }).unwrap()
    };
    let model = gpuplan::config::model::load_model(concat!(env!("CARGO_MANIFEST_DIR"), "/models/llama-3-70b.toml")).unwrap();
    let on = cost.lower(&model, &pc, &Options { tp_comm_overlap: true, ..Options::default() }, &w, &ops, 1.0);
    let off = cost.lower(&model, &pc, &Options { tp_comm_overlap: false, ..Options::default() }, &w, &ops, 1.0);
    assert_eq!(names(&on), ["quantize", "tp_all_gather", "qkv_proj", "quantize", "tp_reduce", "out_proj"]);
    assert_eq!(names(&off), ["tp_all_gather", "quantize", "qkv_proj", "quantize", "out_proj", "tp_reduce"]);
    assert_eq!(overlap_of(&on, "tp_reduce"), Overlap::WithNextKernel { blocking: 1.0 / UB_PIPELINE_SPLITS });
    assert_eq!(overlap_of(&off, "tp_reduce"), Overlap::Blocking);
    assert!(matches!(overlap_of(&on, "tp_all_gather"), Overlap::WithNextKernel { .. }));
    let sms = system.gpu.sm_count.value as f64;
    let stretch = time_of(&on, "out_proj") / time_of(&off, "out_proj");
    assert!((stretch - sms / (sms - UB_PIPELINE_SMS[0])).abs() < 1e-9, "{stretch}");
    assert_eq!(time_of(&on, "qkv_proj"), time_of(&off, "qkv_proj"));
}

/// A memory-bound NVFP4 GEMM (a decode expert's few rows) reads each operand element's half byte
/// and its E4M3 scale per 16 (the NVFP4 format, `workload::quantized_elem_bytes`): 0.5625 B, not
/// 0.5. Against FP8 (1 B) and BF16 (2 B) at the same shape, whose outputs and fixed costs are the
/// same, the time saved over FP8 is 0.4375 of what FP8 saves over BF16.
#[test]
fn a_memory_bound_nvfp4_gemm_reads_its_block_scales() {
    let b200 = load_system("dgx-b200").unwrap();
    let c = CostModel::new(&b200, None);
    let t = |dt: Dtype| c.gemm_time(1, 4096, 7168, 32, dt);
    let (fp4, fp8, bf16) = (t(Dtype::Fp4), t(Dtype::Fp8), t(Dtype::Bf16));
    assert!([fp4.bound, fp8.bound, bf16.bound].iter().all(|b| *b == Bound::Memory));
    let ratio = (fp8.time - fp4.time).value() / (bf16.time - fp8.time).value();
    assert!((ratio - 0.4375).abs() < 1e-9, "{ratio}");
}

/// The megatron stack's price of a grouped expert GEMM (`CostModel::grouped_gemm_time`) against
/// PyTorch's bf16 grouped kernel (`torch._grouped_mm`) measured on the lent H100 at
/// Qwen3-30B-A3B's shapes: 16 local experts of M = 64..2048 rows, up (2048 -> 1536, 2048 -> 768)
/// and down (768 -> 2048) projections, fprop/dgrad/wgrad
/// (calibration/runs/raw/grouped-gemm-h100-2026-11-24/, scripts/grouped_gemm_probe.py). The
/// measured event window holds the call's host enqueue (`host_us`); less that, the GPU time is
/// priced within a near-constant few microseconds at every M: no efficiency that depends on the
/// total rows is missing from the model between MBS 1 (M 256) and MBS 4 (M 1024).
#[test]
fn grouped_expert_gemm_price_matches_the_measured_h100_grouped_kernel_at_every_m() {
    let system = load_system("dgx-h100").unwrap();
    let c = CostModel::new(&system, None);
    let csv =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/calibration/runs/raw/grouped-gemm-h100-2026-11-24/grouped_gemm_probe.csv")).unwrap();
    let head: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let col = |name: &str| head.iter().position(|h| *h == name).unwrap();
    let mut n = 0;
    let mut by_m: std::collections::BTreeMap<u64, Vec<f64>> = Default::default();
    for line in csv.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        if f[col("method")] != "grouped" {
            continue;
        }
        let num = |name: &str| f[col(name)].parse::<f64>().unwrap();
        let (e, m, k, nn) = (num("E") as u64, num("M") as u64, num("K") as u64, num("N") as u64);
        // The lowered (m, n, k) of each pass: fprop [M,K]x[K,N]; dgrad [M,N]x[N,K]; wgrad [K,M]x[M,N].
        let (gm, gn, gk) = match f[col("pass")] {
            "fprop" => (m, nn, k),
            "dgrad" => (m, k, nn),
            _ => (k, nn, m),
        };
        let model_us = c.grouped_gemm_time(gm, gn, gk, e, Dtype::Bf16).time.as_us();
        let gpu_us = num("gpu_us") - num("host_us");
        let gap = gpu_us - model_us;
        assert!((-20.0..=20.0).contains(&gap), "{line}: measured GPU {gpu_us:.1} us, priced {model_us:.1} us");
        by_m.entry(m).or_default().push(gap);
        n += 1;
    }
    assert_eq!(n, 54, "the probe's 54 bf16 grouped rows");
    // The median gap per M is a few microseconds of either sign, with no trend in M.
    for (m, mut gaps) in by_m {
        gaps.sort_by(f64::total_cmp);
        let med = gaps[gaps.len() / 2];
        assert!((-5.0..=12.0).contains(&med), "M {m}: median gap {med:.1} us");
    }
}

#[test]
fn the_fused_kernel_loses_level_at_narrow_heads_and_the_flash_kernel_does_not() {
    use gpuplan::workload::Stack;
    let system = load_system("hgx-h200").unwrap();
    // On Hopper the hf stacks price SDPA's cuDNN kernel (fused); vLLM the flash level.
    let fused = CostModel::new(&system, None).for_stack(Stack::HfEager);
    let flash = CostModel::new(&system, None).for_stack(Stack::Vllm);
    let overhead = fused.kernel_overhead();
    let rate = |c: &CostModel, s: u64, d: u64| {
        let op = attention(s, s, d);
        let t = c.attention_time(&op);
        assert_eq!(t.bound, Bound::Compute, "{op:?}");
        op.flops() / (t.time - overhead).value()
    };
    for s in [2048, 32768, 65536] {
        let ratio = rate(&fused, s, 64) / rate(&fused, s, 128);
        assert!((ratio - fused_head_dim_factor(64, s as f64, false)).abs() < 1e-9, "s {s}: {ratio}");
        assert!(ratio < 0.8, "measured d 64 over d 128: 0.75-0.79 forward");
        assert!((rate(&flash, s, 64) / rate(&flash, s, 128) - 1.0).abs() < 1e-9);
    }
    // Decode-shaped calls (one query) are left as they were.
    let one = |c: &CostModel, d: u64| c.attention_time(&attention(1, 32768, d)).time.value();
    assert!((one(&fused, 64) / one(&flash, 64) - one(&fused, 128) / one(&flash, 128)).abs() < 1e-9);
    // Said in the numbers used, with its source; not for d 128, nor for the flash kernel.
    let n = fused.head_dim_number(64).unwrap();
    assert_eq!((n.name.as_str(), n.value.as_str(), n.source.kind()), ("fused_attention_head_dim_64_factor", "0.746..0.789", "measured"));
    assert!(n.source.citation().contains("attention-headdim-h100-2026-11-25"));
    assert!(fused.head_dim_number(128).is_none() && flash.head_dim_number(64).is_none());
}
