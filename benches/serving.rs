//! Speed of one serving prediction with an engine stack (issue 20: "one serving prediction stays
//! under 10 ms"). A prediction here is what `validate --serving` computes per published row: the
//! deployment resolved from the catalog is given, the requests are made and the serving DES runs
//! them to the end. Run: `cargo bench --bench serving`; results in benches/RESULTS-serving.md.
//!
//! Cases (TensorRT-LLM stack, engine defaults, FP8 KV):
//! - online: Llama-3.1-8B on one H100, BF16, Poisson at 8 QPS, 500 requests of 467 in / 256 out
//!   (the v0.14 Triton table's shape);
//! - offline: Llama-3.1-70B on 4 H100s (TP 4), FP8, 3,000 requests of 1,000 in / 1,000 out queued
//!   at t = 0 (trtllm-bench's mode and request count);
//! - offline long: Llama-3.1-70B on one H200, FP8, 1,000 requests of 20,000 in / 2,000 out,
//!   chunked context;
//! - offline many: Llama-3.3-70B on one B200, NVFP4, 30,000 requests of 128 in / 128 out (the
//!   largest request count of the offline tables);
//! - offline pipelined: Llama-3.3-70B on 8 RTX PRO 6000 (PP 8), NVFP4, 3,000 requests of 500 in /
//!   2,000 out.
//!
//! Each offline case also prints what the same run gives with every iteration its own event
//! (`RunOptions::every_iteration`, the reference the decode runs are checked against) and is timed
//! that way too.

use criterion::{criterion_group, criterion_main, Criterion};
use gpuplan::config::deploy::{resolve, RunFlags};
use gpuplan::config::serve::{SchedulerWire, ServeWire, TrafficWire};
use gpuplan::serve::{simulate, Deployment, RunOptions};
use gpuplan::validate::serving::Load;

fn deployment(model: &str, system: &str, tp: i64, precision: &str, chunked: bool) -> Deployment {
    deployment_pp(model, system, tp, 1, precision, chunked)
}

fn deployment_pp(model: &str, system: &str, tp: i64, pp: i64, precision: &str, chunked: bool) -> Deployment {
    let w = ServeWire {
        model: Some(model.into()),
        system: Some(system.into()),
        gpus: Some(tp * pp),
        tp: Some(tp),
        pp: Some(pp),
        precision: Some(precision.into()),
        stack: Some("trtllm".into()),
        traffic: TrafficWire { qps: Some(1.0), duration_s: Some(1.0), input_len: Some("1".into()), output_len: Some("1".into()), ..TrafficWire::default() },
        scheduler: SchedulerWire { chunked_prefill: Some(chunked), ..SchedulerWire::default() },
        ..ServeWire::default()
    };
    resolve(&w, None, &RunFlags { bin_s: 1e9, ..RunFlags::default() }).expect("bench deployment").deployment
}

fn bench(c: &mut Criterion) {
    let opts = RunOptions { bin_s: 1e9, ..RunOptions::default() };
    let cases = [
        (
            "online llama-3.1-8b 1xH100 bf16 8 qps x500 467/256",
            deployment("llama-3.1-8b", "dgx-h100", 1, "bf16", false),
            Load::Poisson { qps: 8.0, requests: 500 },
            467,
            256,
        ),
        (
            "offline llama-3.1-70b 4xH100 fp8 x3000 1000/1000",
            deployment("llama-3.1-70b", "dgx-h100", 4, "fp8", false),
            Load::Offline { requests: 3000 },
            1000,
            1000,
        ),
        (
            "offline llama-3.1-70b 1xH200 fp8 x1000 20000/2000",
            deployment("llama-3.1-70b", "hgx-h200", 1, "fp8", true),
            Load::Offline { requests: 1000 },
            20000,
            2000,
        ),
        (
            "offline llama-3.1-70b 1xB200 fp4 x30000 128/128",
            deployment("llama-3.1-70b", "dgx-b200", 1, "fp4", false),
            Load::Offline { requests: 30000 },
            128,
            128,
        ),
        (
            "offline llama-3.1-70b 8xRTX PRO 6000 pp8 fp4 x3000 500/2000",
            deployment_pp("llama-3.1-70b", "rtx-pro-6000-bse-pcie-8x", 1, 8, "fp4", false),
            Load::Offline { requests: 3000 },
            500,
            2000,
        ),
    ];
    let exact = RunOptions { every_iteration: true, ..opts };
    let mut g = c.benchmark_group("serving prediction");
    g.sample_size(10);
    for (name, d, load, i, o) in &cases {
        let a = load.arrivals(*i, *o, 0);
        let r = simulate(d, &a, &opts).unwrap();
        let s = gpuplan::serve::stats::summarize(&r);
        eprintln!(
            "{name}: {} iterations, {:.0} output tok/s, mean TTFT {:.1} ms, mean ITL {:.2} ms",
            r.pools[0].iterations,
            s.output_token_throughput,
            s.ttft.mean * 1e3,
            s.tpot.mean * 1e3
        );
        g.bench_function(*name, |b| b.iter(|| simulate(std::hint::black_box(d), &a, &opts).unwrap()));
        if matches!(load, Load::Offline { .. }) {
            let e = simulate(d, &a, &exact).unwrap();
            let se = gpuplan::serve::stats::summarize(&e);
            eprintln!(
                "  every iteration an event: {} events (decode runs: {}), output tok/s {:+.3}%, mean TTFT {:+.3}%, mean ITL {:+.3}%",
                e.events,
                r.events,
                (s.output_token_throughput / se.output_token_throughput - 1.0) * 100.0,
                (s.ttft.mean / se.ttft.mean - 1.0) * 100.0,
                (s.tpot.mean / se.tpot.mean - 1.0) * 100.0
            );
            g.bench_function(format!("{name} (every iteration)"), |b| b.iter(|| simulate(std::hint::black_box(d), &a, &exact).unwrap()));
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
