//! `--goodput`: the Llama 3 54-day check (Dubey et al. 2024, arXiv:2407.21783, Sec. 3.3.4 and
//! Table 5; copied in tests/data/llama3-reliability.csv), Daly's optimum as the CLI reports it,
//! monotonicity, and bad input.
//!
//! The failure rate is Kokolis et al. 2024's (Meta RSC A100 clusters,
//! calibration/reliability/meta-rsc-2024.toml), not fitted on the Llama 3 figures.

use std::process::Command;

use gpuplan::goodput::{self, Params, Rates, Recovery};
use gpuplan::units::{BytesPerSec, Seconds};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const LLAMA3: &str = "scenarios/llama-3.1-405b-16384xh100.toml";

/// The Llama 3 paper's figures (tests/data/llama3-reliability.csv).
const PAPER_DAYS: f64 = 54.0;
const PAPER_UNEXPECTED: f64 = 419.0;
const PAPER_EFFECTIVE: f64 = 0.90;
/// Tectonic's sustained storage throughput, 2 TB/s (same file).
const PAPER_STORAGE_GB_PER_S: &str = "2000";

fn gpuplan(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuplan")).args(args).current_dir(ROOT).output().expect("run gpuplan");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn goodput_json(extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["predict", "--scenario", LLAMA3, "--json", "--goodput", "--storage-gb-per-s", PAPER_STORAGE_GB_PER_S];
    args.extend_from_slice(extra);
    let (code, out, err) = gpuplan(&args);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["goodput"].clone()
}

fn f(v: &serde_json::Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("no `{key}` in {v}"))
}

#[test]
fn llama3_54_days_effective_time_within_three_points_and_interruptions_within_2x() {
    // The paper does not publish its detection or relaunch time, so the check holds over a window
    // of recovery times rather than at a chosen one: 5 minutes (all relaunch, crash seen at once)
    // and 10 minutes (PyTorch's NCCL timeout, the --detect-s default, with no relaunch).
    for (detect, restart) in [("0", "300"), ("600", "0")] {
        let g = goodput_json(&["--detect-s", detect, "--restart-s", restart]);
        let eff = f(&g, "effective_fraction");
        assert!((eff - PAPER_EFFECTIVE).abs() <= 0.03, "detect {detect} s + relaunch {restart} s: effective {eff:.4} vs the paper's {PAPER_EFFECTIVE}");
    }
    // The whole window is about 4.6 to 11.8 minutes; past it the model says less than 87%.
    let slow = f(&goodput_json(&["--detect-s", "600", "--restart-s", "600"]), "effective_fraction");
    assert!(slow < PAPER_EFFECTIVE - 0.03, "{slow}");

    // Interruptions over the 54 days: 6.5e-3 per node-day x 2,048 nodes x 54 = 719, 1.72x the
    // paper's 419 unexpected ones (A100 research clusters fail more often than Llama 3's H100 job).
    let g = goodput_json(&["--restart-s", "0"]);
    let predicted = f(&g, "failures_per_day") * PAPER_DAYS;
    let ratio = predicted / PAPER_UNEXPECTED;
    assert!((1.6..1.8).contains(&ratio), "predicted {predicted:.0} interruptions in 54 days, {ratio:.2}x the paper's 419");
    assert_eq!(g["nodes"], 2048);
}

#[test]
fn checkpoint_is_the_state_bytes_and_inside_the_papers_per_gpu_range() {
    let g = goodput_json(&["--restart-s", "0"]);
    let bytes = f(&g, "checkpoint_bytes");
    // Megatron keeps 2 (bf16 weights) + 12 (fp32 master, Adam m, v) bytes per parameter.
    let params = 405.8e9;
    assert!((bytes / (14.0 * params) - 1.0).abs() < 0.01, "{bytes:e}");
    // The paper: each GPU saves its own state, 1 MB to 4 GB per GPU.
    let per_gpu = bytes / 16384.0;
    assert!((1e6..=4e9).contains(&per_gpu), "{per_gpu:e} bytes per GPU");
    assert!((f(&g, "checkpoint_write_s") - bytes / 2e12).abs() < 1e-9);
}

#[test]
fn the_reported_interval_is_dalys_closed_form() {
    let g = goodput_json(&["--restart-s", "120"]);
    let (d, m) = (f(&g, "checkpoint_write_s"), f(&g, "mtbf_h") * 3600.0);
    let x = d / (2.0 * m);
    let daly = (2.0 * d * m).sqrt() * (1.0 + x.sqrt() / 3.0 + x / 9.0) - d;
    assert!((f(&g, "checkpoint_interval_s") - daly).abs() < 1e-9 * daly);
    assert_eq!(g["checkpoint_interval_optimal"], true);
    let given = goodput_json(&["--restart-s", "120", "--checkpoint-interval-s", "1800"]);
    assert_eq!(f(&given, "checkpoint_interval_s"), 1800.0);
    assert!(f(&given, "effective_fraction") < f(&g, "effective_fraction"), "the optimum beats a 30-minute interval");
}

#[test]
fn more_gpus_fail_more_and_more_bandwidth_writes_faster() {
    let s16k = gpuplan::config::scenario::build(
        &gpuplan::config::scenario::read_scenario(std::path::Path::new(&format!("{ROOT}/{LLAMA3}"))).unwrap(),
        Some(std::path::Path::new(LLAMA3)),
    )
    .unwrap();
    let mut s8k = s16k.clone();
    s8k.n_gpus = 8192;
    s8k.parallel.dp = 64;
    let p = |bw: f64, recovery| Params {
        rates: Rates { per_node_day: 6.5e-3, per_gpu_day: 1e-4, per_nic_day: 1e-5 },
        storage_bandwidth: BytesPerSec::gb_per_s(bw),
        interval: None,
        detect: Seconds::new(60.0),
        restart: Seconds::new(300.0),
        spares: None,
        recovery,
    };
    let tps = 1e6;
    let small = goodput::goodput(&s8k, tps, &p(2000.0, Recovery::Restart), Some(1e13));
    let big = goodput::goodput(&s16k, tps, &p(2000.0, Recovery::Restart), Some(1e13));
    assert!((big.failures_per_day / small.failures_per_day - 2.0).abs() < 1e-12);
    assert!(big.fraction < small.fraction);
    let slow = goodput::goodput(&s16k, tps, &p(200.0, Recovery::Restart), None);
    assert!(slow.checkpoint_write.value() > big.checkpoint_write.value() && slow.fraction < big.fraction);
    // Replica recovery: a failure costs 1/dp of the job, so more replicas lose less per failure.
    let rep_small = goodput::goodput(&s8k, tps, &p(2000.0, Recovery::Replica), None);
    let rep_big = goodput::goodput(&s16k, tps, &p(2000.0, Recovery::Replica), None);
    assert!(rep_big.fraction > big.fraction && rep_small.fraction > small.fraction);
    // The band holds the expected time and widens with the failure count.
    let t = big.train.unwrap();
    assert!(t.wall_low.value() < t.wall.value() && t.wall.value() < t.wall_high.value());
    assert!(t.failures_low < t.failures && t.failures < t.failures_high);
}

#[test]
fn bad_goodput_input_names_the_flag_and_value() {
    let base = ["predict", "--scenario", LLAMA3, "--goodput", "--restart-s", "60"];
    let bw = ["--storage-gb-per-s", "2000"];
    for (extra, needle) in [
        (vec!["--failure-rate", "gpu=-1e-4/gpu", bw[0], bw[1]], "`--failure-rate` = `gpu=-1e-4/gpu`"),
        (vec!["--storage-gb-per-s", "0"], "`--storage-gb-per-s` = `0`"),
        (vec!["--storage-gb-per-s", "-3"], "`--storage-gb-per-s` = `-3`"),
        (vec!["--checkpoint-interval-s", "0", bw[0], bw[1]], "`--checkpoint-interval-s` = `0`"),
        (vec!["--spares", "-1", "--repair-h", "24", bw[0], bw[1]], "`--spares` = `-1`"),
        (vec!["--spares", "4", bw[0], bw[1]], "--repair-h"),
        (vec!["--detect-s", "-1", bw[0], bw[1]], "`--detect-s` = `-1`"),
        (vec!["--reliability", "no-such-fleet", bw[0], bw[1]], "no-such-fleet"),
        (vec![], "--storage-gb-per-s"),
    ] {
        let mut args: Vec<&str> = base.to_vec();
        args.extend(extra.iter());
        let (code, _, err) = gpuplan(&args);
        assert_eq!(code, 2, "{extra:?}: {err}");
        assert!(err.contains(needle), "{extra:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    // The relaunch time has no published default: it is required, by name.
    let (code, _, err) = gpuplan(&["predict", "--scenario", LLAMA3, "--goodput", "--storage-gb-per-s", "2000"]);
    assert_eq!(code, 2);
    assert!(err.contains("--restart-s") && err.contains("hint:"), "{err}");
    // A goodput flag without --goodput.
    let (code, _, err) = gpuplan(&["predict", "--scenario", LLAMA3, "--restart-s", "60"]);
    assert_eq!(code, 2, "{err}");
    // A negative rate in a file names the file and key.
    let d = std::env::temp_dir().join(format!("gpuplan-it-goodput-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let file = d.join("bad.toml");
    std::fs::write(
        &file,
        "kind = \"reliability\"\nname = \"bad\"\n[[component]]\nname = \"hbm\"\nper = \"gpu\"\nfailures_per_unit_day = { value = -2e-5, source = \"test\" }\n",
    )
    .unwrap();
    let mut args: Vec<&str> = base.to_vec();
    args.extend(["--reliability", file.to_str().unwrap(), bw[0], bw[1]]);
    let (code, _, err) = gpuplan(&args);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("bad.toml") && err.contains("component[0].failures_per_unit_day.value") && err.contains("-0.00002"), "{err}");
}

#[test]
fn plan_ranks_by_goodput_and_simulate_reports_it() {
    let (code, out, err) = gpuplan(&[
        "plan",
        "--model",
        "llama-3-8b",
        "--system",
        "dgx-h100",
        "--gpus",
        "16",
        "--global-batch",
        "64",
        "--seq",
        "4096",
        "--objective",
        "goodput",
        "--goodput",
        "--storage-gb-per-s",
        "100",
        "--restart-s",
        "300",
        "--json",
        "--top",
        "3",
        "--no-progress",
    ]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 3);
    let score = |v: &serde_json::Value| v["plan"]["score"].as_f64().unwrap();
    for v in &lines {
        let g = v["plan"]["goodput_fraction"].as_f64().unwrap();
        assert!(g > 0.0 && g < 1.0);
        assert!((score(v) - g * v["tokens_per_s"].as_f64().unwrap()).abs() < 1e-6 * score(v));
    }
    assert!(score(&lines[0]) >= score(&lines[1]) && score(&lines[1]) >= score(&lines[2]));
    let (code, _, err) =
        gpuplan(&["plan", "--model", "llama-3-8b", "--system", "dgx-h100", "--gpus", "16", "--global-batch", "64", "--seq", "4096", "--objective", "goodput"]);
    assert_eq!(code, 2);
    assert!(err.contains("--goodput"), "{err}");

    let (code, out, err) = gpuplan(&[
        "simulate",
        "--model",
        "llama-3-8b",
        "--system",
        "dgx-h100",
        "--gpus",
        "8",
        "--tp",
        "8",
        "--global-batch",
        "8",
        "--seq",
        "4096",
        "--json",
        "--goodput",
        "--storage-gb-per-s",
        "100",
        "--restart-s",
        "300",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["engine"], "des");
    let g = &v["goodput"];
    assert!((g["tokens_per_s"].as_f64().unwrap() - g["effective_fraction"].as_f64().unwrap() * v["tokens_per_s"].as_f64().unwrap()).abs() < 1e-6);
}

#[test]
fn report_adds_goodput_adjusted_time_and_cost_to_train() {
    let out = std::env::temp_dir().join(format!("gpuplan-it-goodput-report-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let (code, _, err) = gpuplan(&[
        "report",
        "--scenario",
        "scenarios/seed-8xb200-tp2-dp4-13b.toml",
        "--prices",
        "calibration/prices/example-rental.toml",
        "--tokens",
        "1e11",
        "--out",
        out.to_str().unwrap(),
        "--goodput",
        "--storage-gb-per-s",
        "10",
        "--restart-s",
        "300",
        "--failure-rate",
        "node=0.5",
    ]);
    assert_eq!(code, 0, "{err}");
    let csv = std::fs::read_to_string(out.join("time_to_train.csv")).unwrap();
    let mut lines = csv.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let row: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| row[head.iter().position(|h| *h == name).unwrap_or_else(|| panic!("no `{name}` in {head:?}"))].parse::<f64>().unwrap();
    let (hours, eff, good) = (col("hours"), col("effective_fraction"), col("goodput_hours"));
    // The job pays for wall time: failure-free hours over the effective fraction.
    assert!(eff > 0.0 && eff < 1.0);
    assert!((good - hours / eff).abs() < 1e-9 * good, "{good} vs {hours} / {eff}");
    assert!(col("goodput_hours_p5") <= good && good <= col("goodput_hours_p95"));
    assert!((col("goodput_usd") / col("usd") - good / hours).abs() < 1e-9);
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("days with failures") && md.contains("--goodput --failure-rate node=0.5 --storage-gb-per-s 10 --restart-s 300 --out DIR"), "{md}");
    // Failures by component: the file's six and the flag's `node`, whose counts add to the total.
    let parts: Vec<f64> = md
        .lines()
        .filter(|l| l.starts_with("| seed-8xb200-tp2-dp4-13b · train | "))
        .filter_map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            (cells.len() == 7).then(|| cells[5].parse::<f64>().unwrap())
        })
        .collect();
    assert_eq!(parts.len(), 7, "{md}");
    for name in ["| gpu |", "| hbm |", "| nic |", "| switch |", "| host |", "| software |", "| node |"] {
        assert!(md.contains(name), "{name} not in the component table");
    }
    let total = col("failures");
    assert!((parts.iter().sum::<f64>() - total).abs() <= 4.0, "{parts:?} vs {total}");
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn no_failures_means_only_checkpoints_cost() {
    let g = goodput_json(&["--reliability", "none", "--failure-rate", "node=0", "--restart-s", "300"]);
    assert_eq!(f(&g, "effective_fraction"), 1.0);
    assert_eq!(f(&g, "failures_per_day"), 0.0);
    let g = goodput_json(&["--reliability", "none", "--failure-rate", "node=0", "--restart-s", "300", "--checkpoint-interval-s", "600"]);
    let d = f(&g, "checkpoint_write_s");
    assert!((f(&g, "effective_fraction") - 600.0 / (600.0 + d)).abs() < 1e-12);
}

#[test]
fn plan_goodput_flags_need_the_goodput_objective() {
    let (code, _, err) = gpuplan(&[
        "plan",
        "--model",
        "llama-3-8b",
        "--system",
        "dgx-h100",
        "--gpus",
        "16",
        "--global-batch",
        "64",
        "--seq",
        "4096",
        "--goodput",
        "--storage-gb-per-s",
        "100",
        "--restart-s",
        "300",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--objective goodput"), "{err}");
}

/// The shipped split cites the Llama 3 paper's Table 5 counts that the shared reference file holds
/// (tests/data/llama3-reliability.csv, a copy of ../shared/reference/cluster_reliability.csv) and
/// uses them exactly: HBM3 72 and switch/cable 35 of 419, and of the GPU share the faulty GPU 148,
/// SRAM 19 and GSP 17 rows. The counts the file does not hold (SDC, thermal, NIC, host rows but
/// CPU, software) are from memory and say so in the shipped file; they close the table (419 less
/// the 293 the file holds = 126).
#[test]
fn the_component_split_uses_the_reference_files_table_5_counts_exactly() {
    let csv = std::fs::read_to_string(std::path::Path::new(ROOT).join("tests/data/llama3-reliability.csv")).unwrap();
    let count = |metric: &str| -> f64 {
        let line = csv.lines().find(|l| l.contains(&format!(",{metric},"))).unwrap_or_else(|| panic!("no `{metric}` row"));
        let after = &line[line.find(&format!(",{metric},")).unwrap() + metric.len() + 2..];
        after.split(',').next().unwrap().parse().unwrap()
    };
    let total = count("unexpected interruptions");
    assert_eq!(total, PAPER_UNEXPECTED);
    let r = gpuplan::config::reliability::load("meta-rsc-2024").unwrap();
    let rate = |name: &str| r.components.iter().find(|c| c.name == name).unwrap_or_else(|| panic!("no `{name}`")).rate.value;
    // Kokolis et al.'s 6.5e-3 failures per node-day over 8 GPUs and 8 NICs per node.
    let per_node_day = 6.5e-3;
    let share = |n: f64, units: f64| per_node_day * n / total / units;
    let close = |a: f64, b: f64| (a / b - 1.0).abs() < 5e-4;
    assert!(close(rate("hbm"), share(count("GPU HBM3 memory"), 8.0)), "{}", rate("hbm"));
    assert!(close(rate("switch"), share(count("network switch and cable"), 8.0)), "{}", rate("switch"));
    let gpu_ref = count("faulty GPU (incl. NVLink)") + count("GPU SRAM memory") + count("GPU system processor");
    assert_eq!(gpu_ref, 184.0);
    // The GPU share is those 184 plus 12 from memory (SDC 6, thermal 6): 196.
    assert!(close(rate("gpu"), share(gpu_ref + 12.0, 8.0)), "{}", rate("gpu"));
    // Every component together is the whole rate: the from-memory rows close the table.
    let sum = 8.0 * (rate("gpu") + rate("hbm") + rate("nic") + rate("switch")) + rate("host") + rate("software");
    assert!(close(sum, per_node_day), "{sum}");
    // Each rate says which of its counts are in the reference file and which are from memory
    // (and that Kokolis et al.'s total is quoted from memory, for every component).
    for c in &r.components {
        let cited = c.rate.source.citation();
        assert!(cited.contains("Kokolis") && cited.contains("Table 5") && cited.contains("quoted from memory, to verify"), "{}: {cited}", c.name);
        let from_memory = cited.matches("from memory").count();
        let in_file = cited.contains(", in the shared reference file");
        match c.name.as_str() {
            "hbm" | "switch" => assert!(from_memory == 1 && in_file, "{}: {cited}", c.name),
            "gpu" | "host" => assert!(from_memory == 2 && in_file, "{}: {cited}", c.name),
            _ => assert!(from_memory == 2 && !in_file, "{}: {cited}", c.name),
        }
    }
}
