//! Speed of the serving simulator (issue 8: one hour of traffic at 100 QPS in under 5 s).
//! Criterion "elements" are simulated requests. Run: `cargo bench --bench serve`; results in
//! benches/RESULTS-serve.md.
//!
//! Deployment: Llama-3-8B on one DGX H100, 8 replicas of TP1, least-loaded routing, vLLM-like
//! scheduler defaults (max batch 256, token budget 8192, chunked prefill, 16-token blocks);
//! Poisson arrivals at 100 QPS for 3,600 s, lognormal prompts (mean 1,024) and outputs (mean 256),
//! sigma 1, seed 0.

use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use gpuplan::config::scenario::{build, ScenarioWire};
use gpuplan::serve::{arrivals, simulate, Deployment, Lengths, Pool, Process, Role, Routing, RunOptions, SchedConfig};

fn deployment() -> Deployment {
    let mut w = ScenarioWire { model: Some("llama-3-8b".into()), system: Some("dgx-h100".into()), gpus: Some(1), ..ScenarioWire::default() };
    w.workload.mode = Some("decode".into());
    w.workload.kv_len = Some(1);
    let s = build(&w, None).expect("bench scenario");
    Deployment { pools: vec![Pool { role: Role::Both, scenario: s, n_replicas: 8, sched: SchedConfig::default() }], routing: Routing::LeastLoaded }
}

fn bench(c: &mut Criterion) {
    let d = deployment();
    let len = |m| Lengths::Lognormal { mean: m, sigma: 1.0 };
    let t0 = Instant::now();
    let a = arrivals::generate(&Process::Poisson { qps: 100.0 }, len(1024.0), len(256.0), 3600.0, 0, 8192);
    let gen = t0.elapsed();
    // One timed run with its numbers printed (what RESULTS-serve.md records), then criterion.
    let t1 = Instant::now();
    let r = simulate(&d, &a, &RunOptions::default()).unwrap();
    let sim = t1.elapsed();
    let s = gpuplan::serve::stats::summarize(&r);
    eprintln!(
        "1 h at 100 QPS: {} requests, {} events, {} iterations; generate {:.3} s, simulate {:.3} s; P99 TTFT {:.1} ms, P99 TPOT {:.2} ms, {:.0} output tok/s",
        a.len(),
        r.events,
        r.pools[0].iterations,
        gen.as_secs_f64(),
        sim.as_secs_f64(),
        s.ttft.p99 * 1e3,
        s.tpot.p99 * 1e3,
        s.output_token_throughput
    );
    let mut g = c.benchmark_group("serve");
    g.sample_size(10);
    g.throughput(Throughput::Elements(a.len() as u64));
    g.bench_function("llama-3-8b 8xH100 tp1, 1 h at 100 QPS", |b| b.iter(|| simulate(std::hint::black_box(&d), &a, &RunOptions::default()).unwrap()));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
