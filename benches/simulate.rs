//! Speed of the discrete-event engine at 8, 1,024 and 16,384 GPUs (issue: 405B on 16,384 B200 in
//! under 10 s on 2 cores). Events per second are reported as criterion "elements".
//! Run: `cargo bench --bench simulate`; results recorded in benches/RESULTS.md.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use gpuplan::config::scenario::{build, read_scenario, ParallelWire, ScenarioWire, WorkloadWire};
use gpuplan::sim::per_rank::{simulate_per_rank, PerRankOptions};
use gpuplan::sim::{simulate, SimOptions};

fn scenario(model: &str, system: &str, gpus: i64, tp: i64, pp: i64, seq: i64, gb: i64) -> gpuplan::scenario::Scenario {
    let w = ScenarioWire {
        model: Some(model.into()),
        system: Some(system.into()),
        gpus: Some(gpus),
        parallelism: ParallelWire { tp: Some(tp), pp: Some(pp), zero: Some(1), ..Default::default() },
        workload: WorkloadWire { seq: Some(seq), global_batch: Some(gb), recompute: Some("selective".into()), ..Default::default() },
        ..Default::default()
    };
    build(&w, None).expect("bench scenario")
}

fn bench(c: &mut Criterion) {
    let path = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/llama-3.1-405b-16384xb200.toml"));
    let cases = [
        ("llama-3-8b 8xH100 tp2 pp2 dp2", scenario("llama-3-8b", "dgx-h100", 8, 2, 2, 4096, 64)),
        ("llama-3-70b 1024xB200 tp8 pp4 dp32", scenario("llama-3-70b", "dgx-b200", 1024, 8, 4, 8192, 1024)),
        ("llama-3.1-405b 16384xB200 tp8 pp16 dp128", build(&read_scenario(path).unwrap(), Some(path)).unwrap()),
    ];
    let mut g = c.benchmark_group("simulate");
    g.sample_size(10);
    for (name, s) in &cases {
        let events = simulate(s, &SimOptions::default()).unwrap().events;
        g.throughput(Throughput::Elements(events));
        g.bench_function(*name, |b| b.iter(|| simulate(std::hint::black_box(s), &SimOptions::default()).unwrap()));
    }
    g.finish();
    // The per-rank engine at 16,384 GPUs with 4 random stragglers (320 classes; the fault-free
    // reference step run too, its events not counted in the elements). Script with peak RSS and
    // 131,072 GPUs: scripts/bench_per_rank.sh.
    let s = &cases[2].1;
    let opts = PerRankOptions { stragglers: Some((4, 0.8)), steps: 1, seed: 1, ..Default::default() };
    let events: u64 = simulate_per_rank(s, &opts).unwrap().steps.iter().map(|st| st.events).sum();
    let mut g = c.benchmark_group("simulate_per_rank");
    g.sample_size(10);
    g.throughput(Throughput::Elements(events));
    g.bench_function("llama-3.1-405b 16384xB200 4 stragglers", |b| b.iter(|| simulate_per_rank(std::hint::black_box(s), &opts).unwrap()));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
