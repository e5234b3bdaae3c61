//! Accuracy against published training throughput (tests/data/reference/training_throughput.csv,
//! copied with sources from the Megatron-LM README, Narayanan et al. 2021 Table 1 and Korthikanti
//! et al. 2022 Tables 3-5). Fails when the mean absolute percentage error passes the bound the
//! README states.

use gpuplan::analytic::predict;
use gpuplan::config::scenario::{build, OptionsWire, ParallelWire, ScenarioWire, WorkloadWire};

/// Bound on the throughput MAPE over all rows (README: "Accuracy").
const MAX_MAPE: f64 = 12.0;

struct Row {
    id: String,
    metric: String,
    value: f64,
    wire: ScenarioWire,
}

fn rows() -> Vec<Row> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/reference/training_throughput.csv");
    let mut r = csv::Reader::from_path(path).expect("reference csv");
    let headers = r.headers().unwrap().clone();
    r.records()
        .map(|rec| {
            let rec = rec.unwrap();
            let get = |k: &str| rec.get(headers.iter().position(|h| h == k).unwrap_or_else(|| panic!("column {k}"))).unwrap().to_string();
            let int = |k: &str| get(k).parse::<i64>().unwrap();
            let boolean = |k: &str| get(k) == "true";
            Row {
                id: get("id"),
                metric: get("metric"),
                value: get("value").parse().unwrap(),
                wire: ScenarioWire {
                    name: Some(get("id")),
                    model: Some(get("model")),
                    system: Some(get("system")),
                    gpus: Some(int("gpus")),
                    parallelism: ParallelWire {
                        tp: Some(int("tp")),
                        pp: Some(int("pp")),
                        dp: Some(int("dp")),
                        vp: Some(int("vp")),
                        sp: Some(boolean("sp")),
                        zero: Some(1),
                        ..Default::default()
                    },
                    workload: WorkloadWire {
                        mode: Some("train".into()),
                        micro_batch: Some(int("micro_batch")),
                        global_batch: Some(int("global_batch")),
                        seq: Some(int("seq")),
                        recompute: Some(get("recompute")),
                        stack: Some("megatron".into()),
                        dropout: Some(boolean("dropout")),
                        flash_attention: Some(boolean("flash_attention")),
                        ..Default::default()
                    },
                    options: OptionsWire {
                        tp_comm_overlap: Some(boolean("tp_comm_overlap")),
                        dp_overlap: Some(true),
                        cuda_graphs: None,
                        moe_ep_overlap: None,
                        moe_shared_expert_overlap: None,
                    },
                    ..Default::default()
                },
            }
        })
        .collect()
}

#[test]
fn published_training_throughput_within_bound() {
    let mut report = String::new();
    let mut errors = Vec::new();
    // GPUPLAN_REF_CALIBRATION=NAME predicts every row with that profile (to compare datasheet and
    // measured efficiencies on the same rows); by default the system files decide.
    let calibration = std::env::var("GPUPLAN_REF_CALIBRATION").ok();
    for mut row in rows() {
        if calibration.is_some() {
            row.wire.calibration = calibration.clone();
        }
        let s = build(&row.wire, None).unwrap_or_else(|e| panic!("{}: {e}", row.id));
        let p = predict(&s).unwrap_or_else(|e| panic!("{}: {e}", row.id));
        let m = &s.model;
        let predicted = match row.metric.as_str() {
            "model_tflops_per_gpu" => p.mfu * s.system.gpu.peak.bf16.value.as_tflops(),
            "narayanan_tflops_per_gpu" => {
                let (b, sq, l, h, v) = (s.workload.global_batch as f64, s.workload.seq as f64, m.n_layers as f64, m.hidden as f64, m.vocab as f64);
                let flops = 96.0 * b * sq * l * h * h * (1.0 + sq / (6.0 * h) + v / (16.0 * l * h));
                flops / p.step_time.value() / s.n_gpus as f64 / 1e12
            }
            "iteration_time_s" => p.step_time.value(),
            other => panic!("unknown metric {other}"),
        };
        let err = (predicted - row.value) / row.value * 100.0;
        errors.push(err.abs());
        report.push_str(&format!(
            "{:<16} {:<26} published {:>8.2} predicted {:>8.2} error {:>+6.1}%  ({})\n",
            row.id, row.metric, row.value, predicted, err, p.bottleneck
        ));
    }
    let mape = errors.iter().sum::<f64>() / errors.len() as f64;
    println!("{report}MAPE {mape:.1}% over {} rows", errors.len());
    assert!(errors.len() >= 27, "every reference row is predicted");
    assert!(mape <= MAX_MAPE, "throughput MAPE {mape:.1}% exceeds {MAX_MAPE}%:\n{report}");
}
