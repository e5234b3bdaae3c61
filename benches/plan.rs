//! Planner speed (issue 6): configurations per minute on the analytic path, and Llama-3 70B on
//! 1,024 B200 planned end to end. Run: `cargo bench --bench plan`; results in benches/RESULTS-plan.md.
//!
//! Two throughputs are reported for the same search, labelled for what they count: every
//! configuration enumerated (most are removed by the cheap rules), and the configurations the
//! analytic engine actually predicted. Rayon runs on a pool of 2 threads (the "2 cores").

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use gpuplan::config::scenario::{build, ScenarioWire, WorkloadWire};
use gpuplan::hardware::Dtype;
use gpuplan::plan::{self, Constraints, GlobalBatch, Objective, PlanMode, Pricing, Request, Space};
use gpuplan::workload::Recompute;

/// The space `gpuplan plan --model llama-3-70b --system dgx-b200 --gpus 1024 --seq 8192
/// --global-batch 1024 --allow-fp8` searches (the CLI defaults: micro-batch <= 64, vp <= 4, cp <= 8).
fn request() -> Request {
    Request {
        mode: PlanMode::Train,
        space: Space {
            n_gpus: vec![1024],
            zero: vec![0, 1, 2, 3],
            recompute: vec![Recompute::None, Recompute::Selective, Recompute::Full],
            precision: vec![Dtype::Bf16, Dtype::Fp8],
            max_micro_batch: 64,
            global_batch: GlobalBatch::Fixed(1024),
            max_vp: 4,
            max_cp: 8,
            ..Default::default()
        },
        constraints: Constraints::default(),
        objective: Objective::Throughput,
        pricing: Pricing::default(),
    }
}

fn bench(c: &mut Criterion) {
    let w = ScenarioWire {
        model: Some("llama-3-70b".into()),
        system: Some("dgx-b200".into()),
        gpus: Some(1024),
        workload: WorkloadWire { seq: Some(8192), ..Default::default() },
        ..Default::default()
    };
    let base = build(&w, None).expect("bench scenario");
    let req = request();
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    let once = pool.install(|| plan::search(&base, &req, &|_| {}).unwrap());
    eprintln!("llama-3-70b 1024xB200: {} configurations, {} predicted, {} feasible", once.enumerated, once.predicted, once.ranked.len());

    let mut g = c.benchmark_group("plan llama-3-70b 1024xB200, 2 threads");
    g.sample_size(10);
    g.throughput(Throughput::Elements(once.enumerated));
    g.bench_function("configurations enumerated", |b| b.iter(|| pool.install(|| plan::search(std::hint::black_box(&base), &req, &|_| {}).unwrap())));
    g.throughput(Throughput::Elements(once.predicted));
    g.bench_function("analytic predictions", |b| b.iter(|| pool.install(|| plan::search(std::hint::black_box(&base), &req, &|_| {}).unwrap())));
    g.finish();

    // Brute force: every enumerated configuration through the analytic engine, one thread.
    let mut small = req.clone();
    small.space.precision = vec![Dtype::Bf16];
    small.space.max_cp = 1;
    small.space.max_vp = 1;
    let n = plan::enumerate(&base, &small).unwrap().len() as u64;
    let mut g = c.benchmark_group("plan llama-3-70b 1024xB200 bf16 no cp/vp, brute force, 1 thread");
    g.sample_size(10);
    g.throughput(Throughput::Elements(n));
    g.bench_function("analytic predictions", |b| b.iter(|| plan::brute_force(std::hint::black_box(&base), &small).unwrap()));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
