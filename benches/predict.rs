//! Speed of one analytic prediction (issue: "well under a millisecond").
//! Run: `cargo bench --bench predict`; results recorded in benches/RESULTS.md.

use criterion::{criterion_group, criterion_main, Criterion};
use gpuplan::analytic::predict;
use gpuplan::config::scenario::{build, ParallelWire, ScenarioWire, WorkloadWire};

fn scenario(model: &str, system: &str, gpus: i64, tp: i64, pp: i64, seq: i64, gb: i64) -> gpuplan::scenario::Scenario {
    let w = ScenarioWire {
        model: Some(model.into()),
        system: Some(system.into()),
        gpus: Some(gpus),
        parallelism: ParallelWire { tp: Some(tp), pp: Some(pp), zero: Some(1), ..Default::default() },
        workload: WorkloadWire { seq: Some(seq), global_batch: Some(gb), ..Default::default() },
        ..Default::default()
    };
    build(&w, None).expect("bench scenario")
}

fn bench(c: &mut Criterion) {
    let dense = scenario("llama-3-70b", "dgx-b200", 64, 4, 2, 8192, 512);
    c.bench_function("predict llama-3-70b 64xB200 tp4 pp2 dp8", |b| b.iter(|| predict(std::hint::black_box(&dense)).unwrap()));
    let big = scenario("llama-3.1-405b", "dgx-b200", 16384, 8, 16, 8192, 2048);
    c.bench_function("predict llama-3.1-405b 16384xB200 tp8 pp16 dp128", |b| b.iter(|| predict(std::hint::black_box(&big)).unwrap()));
    let moe = scenario("deepseek-v3", "gb200-nvl72", 256, 1, 4, 4096, 1024);
    c.bench_function("predict deepseek-v3 256xGB200 pp4", |b| b.iter(|| predict(std::hint::black_box(&moe)).unwrap()));
}

criterion_group!(benches, bench);
criterion_main!(benches);
