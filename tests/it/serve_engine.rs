//! Serving-engine tests that read the shipped catalog (moved out of `gpuplan-core`, which reads
//! no files).

use gpuplan::analytic::predict;
use gpuplan::config::scenario::{build, ScenarioWire};
use gpuplan::scenario::Scenario;
use gpuplan::serve::stats::summarize;
use gpuplan::serve::*;
use gpuplan::units::Seconds;
use gpuplan::workload::Mode;

fn scenario(model: &str, system: &str, tp: i64, pp: i64) -> Scenario {
    let mut w = ScenarioWire { model: Some(model.into()), system: Some(system.into()), gpus: Some(tp * pp), ..ScenarioWire::default() };
    w.parallelism.tp = Some(tp);
    w.parallelism.pp = Some(pp);
    w.workload.mode = Some("decode".into());
    w.workload.kv_len = Some(1);
    build(&w, None).expect("scenario")
}

fn rel(a: f64, b: f64) -> f64 {
    (a / b - 1.0).abs()
}

#[test]
fn decode_iteration_equals_predict_decode() {
    for (m, tp, pp) in [("llama-3-8b", 1, 1), ("llama-3-70b", 4, 1), ("llama-3-70b", 2, 2), ("mixtral-8x7b", 2, 1)] {
        let s = scenario(m, "dgx-h100", tp, pp);
        let mut c = cost::IterCost::new(&s).unwrap();
        for (b, k) in [(1u64, 100u64), (32, 1200), (200, 3000)] {
            let mut p = s.clone();
            p.workload.mode = Mode::Decode;
            p.workload.batch = b;
            p.workload.kv_len = k;
            let want = predict(&p).unwrap().step_time.value();
            let got = c.iteration(b, b * k, &[], b).time.value();
            assert!(rel(got, want) < 2e-3, "{m} tp{tp} pp{pp} b{b} k{k}: {got} vs {want}");
        }
    }
}

#[test]
fn one_prompt_iteration_equals_predict_prefill() {
    for (m, tp) in [("llama-3-8b", 1), ("llama-3-70b", 4)] {
        let s = scenario(m, "dgx-h100", tp, 1);
        let mut c = cost::IterCost::new(&s).unwrap();
        for l in [128u32, 2048, 8000] {
            let mut p = s.clone();
            p.workload.mode = Mode::Prefill;
            p.workload.batch = 1;
            p.workload.seq = l as u64;
            p.workload.kv_len = 0;
            let want = predict(&p).unwrap().step_time.value();
            let got = c.iteration(0, 0, &[cost::Chunk { q: l, c: 0 }], 1).time.value();
            // The final norm runs over the sampled row only here (the whole prompt in predict).
            assert!(rel(got, want) < 5e-3, "{m} tp{tp} L{l}: {got} vs {want}");
        }
    }
}

#[test]
fn host_overhead_adds_where_it_should() {
    // llama-3-8b on an H100, eager stack: a decode iteration at batch 8 is host-bound (launches).
    let mut s = scenario("llama-3-8b", "dgx-h100", 1, 1);
    s.workload.stack = gpuplan::workload::Stack::TorchEager;
    let zero = cost::HostOverhead::default();
    let mut c0 = cost::IterCost::new(&s).unwrap().with_host(zero);
    let base = c0.iteration(8, 8 * 500, &[], 8).time.value();
    // Serial terms add in full: 300 us + 8 x 20 us.
    let h = cost::HostOverhead { per_iteration: Seconds::us(300.0), per_sequence: Seconds::us(20.0), ..zero };
    let mut c1 = cost::IterCost::new(&s).unwrap().with_host(h);
    assert!((c1.iteration(8, 8 * 500, &[], 8).time.value() - base - 460e-6).abs() < 1e-9);
    // Per-layer decode host time adds to the launch side: on a host-bound iteration, 32 layers x 50 us.
    let h = cost::HostOverhead { per_layer_decode: Seconds::us(50.0), ..zero };
    let mut c2 = cost::IterCost::new(&s).unwrap().with_host(h);
    let got = c2.iteration(8, 8 * 500, &[], 8).time.value() - base;
    assert!((got - 32.0 * 50e-6).abs() < 1e-6, "{got}");
    // Per-chunk host time counts once per chunk, and not at all without chunks.
    let h = cost::HostOverhead { per_layer_chunk: Seconds::us(100.0), ..zero };
    let mut c3 = cost::IterCost::new(&s).unwrap().with_host(h);
    assert_eq!(c3.iteration(8, 8 * 500, &[], 8).time.value(), base);
    let one = c3.iteration(8, 8 * 500, &[cost::Chunk { q: 16, c: 0 }], 9).time.value();
    let two = c3.iteration(8, 8 * 500, &[cost::Chunk { q: 16, c: 0 }, cost::Chunk { q: 16, c: 0 }], 10).time.value();
    let one0 = c0.iteration(8, 8 * 500, &[cost::Chunk { q: 16, c: 0 }], 9).time.value();
    assert!((one - one0 - 32.0 * 100e-6).abs() < 1e-6, "{one} {one0}");
    assert!(two > one);
    // The eager stack's default is the fitted one; Megatron's is zero.
    assert_eq!(cost::HostOverhead::default_for(gpuplan::workload::Stack::TorchEager).0.per_layer_chunk, Seconds::us(cost::EAGER_HOST_US[3]));
    assert_eq!(cost::HostOverhead::default_for(gpuplan::workload::Stack::Megatron).0, zero);
}

#[test]
fn chunk_with_context_costs_more_than_without() {
    let s = scenario("llama-3-8b", "dgx-h100", 1, 1);
    let mut c = cost::IterCost::new(&s).unwrap();
    let a = c.iteration(0, 0, &[cost::Chunk { q: 512, c: 0 }], 0).time.value();
    let b = c.iteration(0, 0, &[cost::Chunk { q: 512, c: 6000 }], 0).time.value();
    assert!(b > a, "{a} {b}");
}

fn deployment(s: &Scenario, replicas: u32, sched: SchedConfig) -> Deployment {
    Deployment { pools: vec![Pool { role: Role::Both, scenario: s.clone(), n_replicas: replicas, sched }], routing: Routing::LeastLoaded }
}

fn stream(qps: f64, dur: f64, seed: u64) -> Vec<Arrival> {
    arrivals::generate(
        &Process::Poisson { qps },
        Lengths::Lognormal { mean: 600.0, sigma: 0.8 },
        Lengths::Lognormal { mean: 200.0, sigma: 0.8 },
        dur,
        seed,
        8192,
    )
}

#[test]
fn lone_request_sees_prefill_then_decode_steps() {
    let s = scenario("llama-3-8b", "dgx-h100", 1, 1);
    let d = deployment(&s, 1, SchedConfig::default());
    let a = vec![Arrival { at: 0.0, input_len: 1000, output_len: 4 }];
    let r = simulate(&d, &a, &RunOptions::default()).unwrap();
    let rec = r.requests[0];
    let mut p = s.clone();
    p.workload.mode = Mode::Prefill;
    p.workload.seq = 1000;
    p.workload.kv_len = 0;
    let prefill = predict(&p).unwrap().step_time.value();
    assert!(rel(rec.first_token, prefill) < 5e-3, "{} vs {prefill}", rec.first_token);
    let mut dsum = 0.0;
    for k in 1000..1003 {
        let mut q = s.clone();
        q.workload.batch = 1;
        q.workload.kv_len = k;
        dsum += predict(&q).unwrap().step_time.value();
    }
    assert!(rel(rec.finish - rec.first_token, dsum) < 2e-3, "{} vs {dsum}", rec.finish - rec.first_token);
    assert_eq!(rec.scheduled, 0.0);
}

#[test]
fn iteration_spread_table_interpolates_and_holds_its_ends() {
    let t = &cost::EAGER_ITERATION_SPREAD;
    assert_eq!(cost::spread_factor(t, 0.5), 1.0);
    assert_eq!(cost::spread_factor(t, 0.0), t[0]);
    assert_eq!(cost::spread_factor(t, 1.0), t[10]);
    // Halfway between p50 (1.0) and p75 (1.037).
    assert!((cost::spread_factor(t, 0.625) - 1.0185).abs() < 1e-12);
    // Monotone in the probability.
    let mut last = 0.0;
    for i in 0..=1000 {
        let f = cost::spread_factor(t, i as f64 / 1000.0);
        assert!(f >= last);
        last = f;
    }
}

#[test]
fn iteration_spread_applies_to_torch_eager_only_and_is_deterministic() {
    let mut s = scenario("llama-3-8b", "dgx-h100", 1, 1);
    let a = stream(4.0, 20.0, 7);
    let run = |s: &Scenario, spread: bool| {
        let sched = SchedConfig { iteration_spread: spread, ..SchedConfig::default() };
        simulate(&deployment(s, 1, sched), &a, &RunOptions::default()).unwrap()
    };
    // Megatron has no measured spread: on and off agree.
    assert_eq!(run(&s, true).requests, run(&s, false).requests);
    s.workload.stack = gpuplan::workload::Stack::TorchEager;
    let (on, off) = (run(&s, true), run(&s, false));
    assert_ne!(on.requests, off.requests);
    assert_eq!(on.requests, run(&s, true).requests);
}

#[test]
fn padded_decode_attention_reads_to_the_longest_context() {
    // Two requests decoding together, one with a 100-token and one with a 30000-token prompt, on
    // a memory-bound model: padded attention reads both caches to 30000 tokens, so the short
    // request's tokens come slower than with paged attention; alone, a request is unchanged.
    let s = scenario("llama-3-8b", "dgx-h100", 1, 1);
    let a = vec![Arrival { at: 0.0, input_len: 100, output_len: 50 }, Arrival { at: 0.0, input_len: 30000, output_len: 50 }];
    let run = |padded: bool, a: &[Arrival]| {
        let decode_attention = if padded { DecodeAttention::Padded } else { DecodeAttention::Paged };
        let sched = SchedConfig { decode_attention, token_budget: 32768, ..SchedConfig::default() };
        simulate(&deployment(&s, 1, sched), a, &RunOptions::default()).unwrap()
    };
    let tpot = |r: &ServeResult| (r.requests[0].finish - r.requests[0].first_token) / 49.0;
    let (paged, padded) = (run(false, &a), run(true, &a));
    assert!(tpot(&padded) > tpot(&paged) * 1.02, "{} vs {}", tpot(&padded), tpot(&paged));
    let alone = &a[..1];
    assert_eq!(tpot(&run(true, alone)), tpot(&run(false, alone)));
}

#[test]
fn conservation_and_littles_law() {
    let s = scenario("llama-3-8b", "dgx-h100", 1, 1);
    let sched = SchedConfig { max_batch: 64, ..SchedConfig::default() };
    // Overloaded and cut off: requests in = out + in flight at the stop.
    for (qps, drain) in [(20.0, f64::INFINITY), (200.0, 0.0)] {
        let a = stream(qps, 60.0, 1);
        let r = simulate(
            &deployment(&s, 2, sched),
            &a,
            &RunOptions { bin_s: 1.0, drain_s: drain, record_iterations: false, seed: 0, frontend_s: 0.0, max_concurrency: None, every_iteration: false },
        )
        .unwrap();
        let sm = summarize(&r);
        let arrived = r.arrived;
        let seen = &r.requests[..arrived as usize];
        assert_eq!(arrived, sm.completed + sm.unfinished + sm.rejected, "qps {qps}");
        assert_eq!(r.bins.iter().map(|b| b.arrivals).sum::<u64>(), arrived);
        assert_eq!(r.bins.iter().map(|b| b.completions).sum::<u64>(), sm.completed);
        if drain.is_infinite() {
            assert_eq!(sm.unfinished, 0);
        } else {
            assert!(sm.unfinished > 0);
        }
        // L = lambda W over the horizon: the time-average number in the system equals the
        // arrival rate times the mean time each request spent in it (inside the horizon).
        let h = r.horizon_s;
        let admitted: Vec<_> = seen.iter().filter(|x| !x.rejected).collect();
        let in_sys: f64 = admitted.iter().map(|x| if x.finished() { x.finish } else { h } - x.arrival).sum();
        let lambda = admitted.len() as f64 / h;
        let w = in_sys / admitted.len() as f64;
        assert!(rel(sm.mean_in_system, lambda * w) < 1e-6, "L {} vs lambda W {}", sm.mean_in_system, lambda * w);
        // The same for the queue: waiting until first scheduled.
        let q: f64 = admitted.iter().map(|x| if x.scheduled.is_finite() { x.scheduled } else { h } - x.arrival).sum();
        assert!((sm.mean_queued - q / h).abs() < 1e-6 * (1.0 + sm.mean_queued), "Lq {} vs {}", sm.mean_queued, q / h);
    }
}

#[test]
fn stable_queue_mean_in_system_is_offered_rate_times_latency() {
    // Below saturation over a long run, L = lambda x W with lambda the offered rate.
    let s = scenario("llama-3-8b", "dgx-h100", 1, 1);
    let a = stream(10.0, 600.0, 5);
    let r = simulate(&deployment(&s, 1, SchedConfig::default()), &a, &RunOptions::default()).unwrap();
    let sm = summarize(&r);
    let lambda = a.len() as f64 / r.horizon_s;
    assert!(rel(sm.mean_in_system, lambda * sm.e2e.mean) < 1e-6);
    assert!(rel(lambda, 10.0) < 0.05, "{lambda}");
}

#[test]
fn same_seed_same_run() {
    let s = scenario("llama-3-8b", "dgx-h100", 1, 1);
    let d = deployment(&s, 2, SchedConfig::default());
    let run = |seed| {
        let r = simulate(&d, &stream(30.0, 30.0, seed), &RunOptions::default()).unwrap();
        (r.requests.iter().map(|x| (x.first_token.to_bits(), x.finish.to_bits())).collect::<Vec<_>>(), r.events)
    };
    assert_eq!(run(3), run(3));
    assert_ne!(run(3), run(4));
}

#[test]
fn small_cache_preempts_and_still_finishes() {
    let s = scenario("llama-3-8b", "dgx-h100", 1, 1);
    // Weights ~16 GB of 80: at 0.25 the cache holds a few thousand tokens.
    let sched = SchedConfig { gpu_memory_utilization: 0.25, ..SchedConfig::default() };
    let a = stream(40.0, 30.0, 2);
    let r = simulate(&deployment(&s, 1, sched), &a, &RunOptions::default()).unwrap();
    let sm = summarize(&r);
    assert!(r.pools[0].preemptions > 0, "no preemption with {} KV tokens", r.pools[0].kv_tokens_per_replica);
    assert_eq!(sm.completed + sm.rejected, a.len() as u64);
    assert!(r.pools[0].max_kv_occupancy <= 1.0);
}

#[test]
fn chunked_prefill_keeps_decode_steps_short() {
    let s = scenario("llama-3-8b", "dgx-h100", 1, 1);
    let a = arrivals::generate(&Process::Poisson { qps: 4.0 }, Lengths::Fixed(7000), Lengths::Fixed(300), 60.0, 9, 8192);
    let p99 = |chunked: bool, budget: u32| {
        let sched = SchedConfig { chunked_prefill: chunked, token_budget: budget, ..SchedConfig::default() };
        summarize(&simulate(&deployment(&s, 1, sched), &a, &RunOptions::default()).unwrap()).tpot.p99
    };
    let (on, off) = (p99(true, 512), p99(false, 8192));
    assert!(on < off, "chunked {on} vs whole prompts {off}");
}

#[test]
fn disaggregated_pools_serve_everything() {
    let s = scenario("llama-3-8b", "dgx-h100", 1, 1);
    let d = Deployment {
        pools: vec![
            Pool { role: Role::Prefill, scenario: s.clone(), n_replicas: 1, sched: SchedConfig::default() },
            Pool { role: Role::Decode, scenario: s.clone(), n_replicas: 2, sched: SchedConfig::default() },
        ],
        routing: Routing::RoundRobin,
    };
    let a = stream(10.0, 30.0, 4);
    let r = simulate(&d, &a, &RunOptions::default()).unwrap();
    let sm = summarize(&r);
    assert_eq!(sm.completed, a.len() as u64);
    assert!(r.pools[0].decode_tokens == 0 && r.pools[1].prefill_tokens == 0);
    let single = a.iter().filter(|x| x.output_len == 1).count() as u64;
    assert_eq!(r.pools[1].decode_tokens, a.iter().map(|x| x.output_len as u64 - 1).sum::<u64>(), "{single}");
}

#[test]
fn bursty_arrivals_raise_tail_ttft() {
    let s = scenario("llama-3-8b", "dgx-h100", 1, 1);
    let d = deployment(&s, 1, SchedConfig::default());
    let len = Lengths::Lognormal { mean: 600.0, sigma: 0.8 };
    let p99 = |p: Process| {
        let a = arrivals::generate(&p, len, Lengths::Lognormal { mean: 200.0, sigma: 0.8 }, 300.0, 11, 8192);
        summarize(&simulate(&d, &a, &RunOptions::default()).unwrap()).ttft.p99
    };
    let (poisson, bursty) = (p99(Process::Poisson { qps: 12.0 }), p99(Process::Gamma { qps: 12.0, cv: 4.0 }));
    assert!(bursty > poisson, "gamma cv 4 {bursty} vs Poisson {poisson}");
}

#[test]
fn trace_replay_keeps_the_requests() {
    let s = scenario("llama-3-8b", "dgx-h100", 1, 1);
    let a = arrivals::read_trace("arrival_s,input_len,output_len\n0,100,5\n0.5,200,1\n0.5,50,3\n").unwrap();
    let r = simulate(&deployment(&s, 1, SchedConfig::default()), &a, &RunOptions::default()).unwrap();
    assert!(r.requests.iter().all(|x| x.finished()));
    // A one-token request finishes with its first token.
    assert_eq!(r.requests[1].first_token, r.requests[1].finish);
    assert_eq!(r.pools[0].decode_tokens, 4 + 2);
}

#[test]
fn spread_draws_keep_the_table_and_the_lag1_correlation() {
    // The AR(1) copula: each factor is distributed as the table says, consecutive ones are
    // correlated (normal scores) about as the constant says.
    let sp = cost::iteration_spread(gpuplan::workload::Stack::TorchEager).unwrap();
    let mut rng = arrivals::Rng::new(11);
    let mut z = 0.0;
    let n = 200_000;
    let (mut f, mut zs) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        f.push(sp.factor(&mut z, rng.normal(), cost::SpreadKind::DecodeOnly));
        zs.push(z);
    }
    let mut sorted = f.clone();
    sorted.sort_by(f64::total_cmp);
    for (i, &p) in cost::SPREAD_P.iter().enumerate().skip(1).take(9) {
        let got = sorted[(p * n as f64) as usize];
        assert!((got / sp.decode_only[i] - 1.0).abs() < 0.01, "p{p}: {got} vs {}", sp.decode_only[i]);
    }
    let lag1 = zs.windows(2).map(|w| w[0] * w[1]).sum::<f64>() / zs.iter().map(|x| x * x).sum::<f64>();
    assert!((lag1 - sp.lag1).abs() < 0.01, "{lag1} vs {}", sp.lag1);
}

#[test]
fn slots_are_the_lowest_free_and_the_span_keeps_holes() {
    // Three requests at once take slots 0, 1, 2; the middle one finishes first, so the other two
    // decode with a span of 3 (the reference server's attention reads slot 1 too); a later
    // request takes slot 1 again.
    let s = scenario("llama-3-8b", "dgx-h100", 1, 1);
    let a = vec![
        Arrival { at: 0.0, input_len: 100, output_len: 200 },
        Arrival { at: 0.0, input_len: 100, output_len: 5 },
        Arrival { at: 0.0, input_len: 100, output_len: 200 },
        Arrival { at: 1.0, input_len: 100, output_len: 10 },
    ];
    let r = simulate(&deployment(&s, 1, SchedConfig::default()), &a, &RunOptions { record_iterations: true, ..RunOptions::default() }).unwrap();
    assert!(r.iterations.iter().all(|it| it.decode_slot_span >= it.n_decode));
    assert!(r.iterations.iter().any(|it| it.n_decode == 2 && it.decode_slot_span == 3));
    assert!(r.iterations.iter().any(|it| it.n_decode == 3 && it.decode_slot_span == 3 && it.start_s > 1.0));
    assert!(r.iterations.iter().all(|it| it.decode_slot_span <= 3));
}

#[test]
fn pooled_replications_average_figures_and_pool_requests() {
    let mut s = scenario("llama-3-8b", "dgx-h100", 1, 1);
    s.workload.stack = gpuplan::workload::Stack::TorchEager;
    let a = stream(4.0, 20.0, 7);
    let d = deployment(&s, 1, SchedConfig::default());
    let runs: Vec<ServeResult> = (0..3).map(|seed| simulate(&d, &a, &RunOptions { seed, ..RunOptions::default() }).unwrap()).collect();
    let each: Vec<_> = runs.iter().map(summarize).collect();
    // Other seeds, other iteration-time draws.
    assert_ne!(each[0].tpot.p99, each[1].tpot.p99);
    let pooled = gpuplan::serve::stats::summarize_pooled(&runs.iter().collect::<Vec<_>>());
    let mean = each.iter().map(|x| x.output_token_throughput).sum::<f64>() / 3.0;
    assert!(rel(pooled.output_token_throughput, mean) < 1e-12);
    assert_eq!(pooled.completed, each[0].completed);
    let lo = each.iter().map(|x| x.tpot.p50).fold(f64::INFINITY, f64::min);
    let hi = each.iter().map(|x| x.tpot.p50).fold(0.0, f64::max);
    assert!(pooled.tpot.p50 >= lo && pooled.tpot.p50 <= hi);
    let one = gpuplan::serve::stats::summarize_pooled(&[&runs[0]]);
    assert_eq!(one, each[0]);
}

#[test]
fn host_probe_sets_the_scale_that_reproduces_it() {
    let mut s = scenario("llama-3-8b", "dgx-h100", 1, 1);
    s.workload.stack = gpuplan::workload::Stack::TorchEager;
    let pool = Pool { role: Role::Both, scenario: s, n_replicas: 1, sched: SchedConfig::default() };
    let at = |k: f64| {
        let p = Pool { sched: SchedConfig { host_time_scale: Some(k), ..pool.sched }, ..pool.clone() };
        iteration_cost(&p).unwrap().iteration(1, HOST_PROBE_CONTEXT + 1, &[], 1).time.value()
    };
    // The engine's own time for the probe gives scale 1; a probe 1.5x as long a larger scale that
    // reproduces it.
    let k1 = host_time_scale_for_probe(&pool, at(1.0)).unwrap();
    assert!((k1 - 1.0).abs() < 1e-6, "{k1}");
    let k = host_time_scale_for_probe(&pool, 1.5 * at(1.0)).unwrap();
    assert!(k > 1.4 && rel(at(k), 1.5 * at(1.0)) < 1e-6, "{k}");
    // Faster than the GPU side alone: no scale reaches it.
    assert!(host_time_scale_for_probe(&pool, 1e-6).is_err());
}

#[test]
fn capture_sizes_are_vllms() {
    let got: Vec<u64> = [1, 2, 3, 4, 5, 8, 9, 17, 63, 64].iter().map(|&n| capture_size(n, 64)).collect();
    assert_eq!(got, [1, 2, 4, 4, 8, 8, 16, 24, 64, 64]);
    // Never above the batch limit (captured too), never below the batch.
    assert_eq!(capture_size(57, 60), 60);
    assert_eq!(capture_size(60, 60), 60);
    assert_eq!(capture_size(70, 60), 70);
}

#[test]
fn graph_iterations_price_gpu_work_without_launches() {
    let mut s = scenario("llama-3-8b", "dgx-h100", 1, 1);
    s.workload.stack = gpuplan::workload::Stack::TorchEager;
    let zero = cost::HostOverhead::default();
    let h = cost::HostOverhead { graph_per_iteration: Seconds::us(300.0), graph_per_layer: Seconds::us(20.0), ..zero };
    let mut c = cost::IterCost::new(&s).unwrap().with_host(h);
    let mut c0 = cost::IterCost::new(&s).unwrap().with_host(zero);
    // Batch 8 on an H100 with eager launches is host-bound: the graph pass is shorter.
    let eager = c.iteration(8, 8 * 500, &[], 8).time.value();
    let pass = c.graph_pass(8, 8 * 500, &[], 8).time.value();
    assert!(pass < 0.8 * eager, "{pass} {eager}");
    // The pass: the GPU work plus 32 layers x 20 us; the host's 300 us come between iterations.
    assert!((pass - c0.graph_pass(8, 8 * 500, &[], 8).time.value() - 32.0 * 20e-6).abs() < 1e-9);
    assert!((c.graph_host(1).value() - 300e-6).abs() < 1e-12);
    // The host time scale stretches the host's part only.
    c.set_host_time_scale(2.0);
    assert!((c.graph_host(1).value() - 600e-6).abs() < 1e-12);
    assert_eq!(c.graph_pass(8, 8 * 500, &[], 8).time.value(), pass);
    // A later chunk run alone (prefill graphs) prices its scores at the measured bytes: dearer
    // than the counted ones of the eager forward; a first chunk has no cached keys, no difference.
    let mut u = cost::IterCost::new(&s).unwrap().with_unfused_decode(gpuplan::units::BytesPerSec::gb_per_s(2000.0));
    let later = cost::Chunk { q: 1024, c: 2048 };
    assert!(u.later_chunk_pass(later, 1).time.value() > u.iteration(0, 0, &[later], 1).time.value());
    let first = cost::Chunk { q: 1024, c: 0 };
    assert_eq!(u.later_chunk_pass(first, 1).time, u.iteration(0, 0, &[first], 1).time);
}

#[test]
fn graph_passes_do_not_pay_the_profiles_stream_launch() {
    // The shipped H200 profile and the same with another stream-launch time (as a second machine
    // of the kind measured): eager iterations move with it, graph passes do not (their kernels
    // cost the GPU file's in-graph floor per kernel instead).
    let mut s = scenario("ref-llama-1b", "hgx-h200", 1, 1);
    s.workload.stack = gpuplan::workload::Stack::TorchEager;
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/calibration/profiles/h200-sxm-1x");
    s.profile = Some(gpuplan::config::profile::load_profile(std::path::Path::new(dir)).unwrap());
    let mut slow = s.clone();
    let launch = s.profile.as_ref().unwrap().kernel_launch.unwrap();
    slow.profile.as_mut().unwrap().kernel_launch = Some(launch + Seconds::us(1.0));
    // No host time: the eager passes GPU-bound.
    let zero = cost::HostOverhead { time_scale: 0.0, ..cost::HostOverhead::default() };
    let (mut a, mut b) = (cost::IterCost::new(&s).unwrap().with_host(zero), cost::IterCost::new(&slow).unwrap().with_host(zero));
    for (n, kv, chunks) in [(8u64, 8 * 512u64, vec![]), (0, 0, vec![cost::Chunk { q: 384, c: 0 }])] {
        let rows = n.max(1);
        assert_eq!(a.graph_pass(n, kv, &chunks, rows).time, b.graph_pass(n, kv, &chunks, rows).time);
    }
    // Eager: about 1 us more per kernel of the op list.
    let (ea, eb) = (a.iteration(8, 8 * 512, &[], 8).time.value(), b.iteration(8, 8 * 512, &[], 8).time.value());
    assert!(eb - ea > 16.0 * 20.0 * 1e-6, "{ea} {eb}");
}

#[test]
fn prefill_graphs_pad_to_the_step_and_stop_at_the_token_budget() {
    // One 1000-token prompt, budget 1000, step 128: the server's largest prefill graph is the
    // budget's (1000 tokens), not 1024; a 300-token prompt pads to 384.
    let mut s = scenario("llama-3-8b", "dgx-h100", 1, 1);
    s.workload.stack = gpuplan::workload::Stack::TorchEager;
    let sched = SchedConfig {
        token_budget: 1000,
        iteration_spread: false,
        cuda_graphs: Some(CudaGraphs { context_step: 256, max_batch: u32::MAX, prefill_step: Some(128) }),
        ..SchedConfig::default()
    };
    let d = deployment(&s, 1, sched);
    let mut c = iteration_cost(&d.pools[0]).unwrap();
    let host = c.graph_host(1).value();
    for (len, padded) in [(1000u32, 1000u32), (300, 384)] {
        let a = vec![Arrival { at: 0.0, input_len: len, output_len: 2 }];
        let r = simulate(&d, &a, &RunOptions { record_iterations: true, ..RunOptions::default() }).unwrap();
        let want = c.graph_pass(0, 0, &[cost::Chunk { q: padded, c: 0 }], 1).time.value() + host;
        assert!((r.iterations[0].time_s - want).abs() < 1e-12, "{len}: {} vs {want}", r.iterations[0].time_s);
    }
}

#[test]
fn decode_runs_match_every_iteration_within_a_percent() {
    // TensorRT-LLM's in-flight batching takes the iterations of a batch that cannot change before
    // its next completion as one event; the reference runs every iteration. Offline (all queued,
    // trtllm-bench) and a Poisson load, one and two pipeline stages, CUDA graphs on.
    for pp in [1i64, 2] {
        let mut w = ScenarioWire { model: Some("llama-3-8b".into()), system: Some("dgx-h100".into()), gpus: Some(pp), ..ScenarioWire::default() };
        w.parallelism.pp = Some(pp);
        w.workload.mode = Some("decode".into());
        w.workload.kv_len = Some(1);
        w.workload.stack = Some("trtllm".into());
        w.workload.precision = Some("fp8".into());
        let s = build(&w, None).expect("scenario");
        let d = deployment(&s, 1, SchedConfig::for_stack(gpuplan::workload::Stack::Trtllm));
        let offline = vec![Arrival { at: 0.0, input_len: 500, output_len: 300 }; 600];
        for (name, a) in [("offline", offline), ("poisson", stream(6.0, 40.0, 3))] {
            let fast = simulate(&d, &a, &RunOptions { bin_s: 1e9, ..RunOptions::default() }).unwrap();
            let exact = simulate(&d, &a, &RunOptions { bin_s: 1e9, every_iteration: true, ..RunOptions::default() }).unwrap();
            let (f, e) = (summarize(&fast), summarize(&exact));
            assert_eq!(f.completed, e.completed, "pp{pp} {name}");
            for (what, x, y) in
                [("tokens/s", f.output_token_throughput, e.output_token_throughput), ("TTFT", f.ttft.mean, e.ttft.mean), ("ITL", f.tpot.mean, e.tpot.mean)]
            {
                assert!(rel(x, y) < 0.01, "pp{pp} {name} {what}: {x} vs {y}");
            }
            assert_eq!(fast.pools[0].iterations, exact.pools[0].iterations, "pp{pp} {name}: the runs count their iterations");
            if name == "offline" {
                // Events beside the arrivals: the iterations' ends.
                let n = a.len() as u64;
                assert!((fast.events - n) * 3 < exact.events - n, "pp{pp}: {} events vs {}", fast.events, exact.events);
            }
        }
    }
}
