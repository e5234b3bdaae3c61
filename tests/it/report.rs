//! `gpuplan report`: its numbers equal `predict --json`, the checked-in example reports are fresh,
//! it never overwrites without `--force`, and the claims audit flags what it should.

use std::path::{Path, PathBuf};
use std::process::Command;

fn gpuplan(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuplan")).args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().expect("run gpuplan");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gpuplan-it-report-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn read_csv(path: &Path) -> Vec<std::collections::HashMap<String, String>> {
    let mut r = csv::Reader::from_path(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let head: Vec<String> = r.headers().unwrap().iter().map(str::to_string).collect();
    r.records().map(|rec| head.iter().cloned().zip(rec.unwrap().iter().map(str::to_string)).collect()).collect()
}

const PRICE_FLAGS: [&str; 8] =
    ["--gpu-hour-usd", "4", "--electricity-usd-per-kwh", "0.1", "--network-usd-per-node-hour", "0", "--storage-usd-per-node-hour", "0"];

#[test]
fn report_numbers_equal_predict_json() {
    let out = temp_dir("equal");
    let o = out.to_str().unwrap();
    let mut args = vec!["report", "--scenario", "scenarios/seed-llama2-1.36b-8xb200-ddp.toml", "scenarios/seed-gpt-39.5b-decode-b4.toml", "--out", o];
    args.extend(PRICE_FLAGS);
    let (code, _, err) = gpuplan(&args);
    assert_eq!(code, 0, "{err}");
    for f in [
        "report.md",
        "report.html",
        "summary.csv",
        "breakdown.csv",
        "memory.csv",
        "scaling.csv",
        "sources.csv",
        "prices.csv",
        "time_to_train.csv",
        "charts/usd-per-million-tokens.svg",
        "charts/step-breakdown.svg",
    ] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    let rows = read_csv(&out.join("summary.csv"));
    assert_eq!(rows.len(), 6, "2 scenarios x (train, prefill, decode)");
    let memory = read_csv(&out.join("memory.csv"));
    for row in &rows {
        assert!(row["error"].is_empty(), "{}", row["error"]);
        let pa: Vec<&str> = row["predict_args"].split_whitespace().collect();
        let mut a = vec!["predict"];
        a.extend(pa);
        a.push("--json");
        let (_, json, err) = gpuplan(&a);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{a:?}: {e}\n{err}"));
        for (col, ptr) in [
            ("step_time_s", "/step_time_s"),
            ("tokens_per_s", "/tokens_per_s"),
            ("tokens_per_s_per_gpu", "/tokens_per_s_per_gpu"),
            ("mfu", "/mfu"),
            ("j_per_token", "/energy/j_per_token"),
            ("kwh_per_million_tokens", "/energy/kwh_per_million_tokens"),
            ("avg_w_per_gpu", "/power/avg_w_per_gpu"),
            ("node_w", "/power/node_w"),
            ("peak_bytes_per_gpu", "/memory/peak_bytes_per_gpu"),
        ] {
            let want = v.pointer(ptr).and_then(|x| x.as_f64()).unwrap();
            let got: f64 = row[col].parse().unwrap_or_else(|_| panic!("{col} = `{}`", row[col]));
            // Equal to the last bits: serde_json's default float parser (no `float_roundtrip`) may
            // read the printed digits 1 ulp off, so compare within a few ulps.
            assert!((got - want).abs() <= 4.0 * f64::EPSILON * want.abs(), "{} {}: {col} {got} vs {want}", row["scenario"], row["mode"]);
        }
        assert_eq!(row["fits"], v["memory"]["fits"].to_string());
        // Memory components add up to the peak; $ per 1M tokens follows from the hourly cost.
        let parts: f64 =
            memory.iter().filter(|m| m["scenario"] == row["scenario"] && m["mode"] == row["mode"]).map(|m| m["bytes_per_gpu"].parse::<f64>().unwrap()).sum();
        let peak: f64 = row["peak_bytes_per_gpu"].parse().unwrap();
        assert!((parts - peak).abs() <= 1e-6 * peak, "{parts} vs {peak}");
        let tps: f64 = row["tokens_per_s"].parse().unwrap();
        let usd_h: f64 = row["usd_per_hour"].parse().unwrap();
        let usd_m: f64 = row["usd_per_million_tokens"].parse().unwrap();
        assert!((usd_m - usd_h / (tps * 3600.0) * 1e6).abs() <= 1e-9 * usd_m);
    }
    // 8 GPUs at $4 plus electricity for one node at the system's PUE: never below the GPU rent.
    let train = rows.iter().find(|r| r["scenario"] == "seed-llama2-1.36b-8xb200-ddp" && r["mode"] == "train").unwrap();
    assert!(train["usd_per_hour"].parse::<f64>().unwrap() > 32.0);
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn report_never_overwrites_without_force_and_needs_prices_for_dollars() {
    let out = temp_dir("force");
    let o = out.to_str().unwrap();
    let mut args = vec!["report", "--scenario", "scenarios/seed-gpt-39.5b-decode-b4.toml", "--out", o];
    args.extend(PRICE_FLAGS);
    assert_eq!(gpuplan(&args).0, 0);
    let before = std::fs::read(out.join("summary.csv")).unwrap();
    let (code, _, err) = gpuplan(&args);
    assert_eq!(code, 2);
    assert!(err.contains("--force"), "{err}");
    args.push("--force");
    assert_eq!(gpuplan(&args).0, 0);
    assert_eq!(std::fs::read(out.join("summary.csv")).unwrap(), before, "deterministic");
    // A price given only in part: the missing one is named with its flag, nothing is defaulted.
    let (code, _, err) = gpuplan(&["report", "--scenario", "scenarios/seed-gpt-39.5b-decode-b4.toml", "--out", o, "--force", "--gpu-hour-usd", "4"]);
    assert_eq!(code, 2);
    assert!(err.contains("--electricity-usd-per-kwh"), "{err}");
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn shipped_price_files_load_and_say_what_is_unsourced() {
    for f in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/calibration/prices")).unwrap() {
        let p = f.unwrap().path();
        if p.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        let w: gpuplan::report::prices::PricesWire = toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let prices = w.build(&p.display().to_string()).unwrap();
        for (k, fig) in prices.figures() {
            assert!(!fig.source.trim().is_empty(), "{}: {k} has no source", p.display());
        }
    }
}

#[test]
fn claims_audit_flags_the_implausible_with_reasons() {
    let (code, out, err) = gpuplan(&["report", "--claims"]);
    assert_eq!(code, 0, "{err}");
    let verdict = |id: &str| -> String {
        let line = out.lines().find(|l| l.split_whitespace().nth(1) == Some(id)).unwrap_or_else(|| panic!("{id} not in\n{out}"));
        line.split_whitespace().next().unwrap().to_string()
    };
    // Datasheet figures that match the system files.
    assert_eq!(verdict("s003-bf16-peak"), "consistent");
    assert_eq!(verdict("s004-nvlink"), "consistent");
    // 1400 W is not the HGX B200's 1000 W TDP.
    assert_eq!(verdict("s004-gpu-power"), "disagrees");
    // 2.7-2.8 TB/s is about a third of what B200 HBM streams.
    assert_eq!(verdict("s000-hbm"), "disagrees");
    // 55-62% MFU and ~170K tokens/s cannot both hold for the same 1.36B run on 8 GPUs.
    assert_eq!(verdict("s002-llama-1.36b-tier1-mfu"), "CONTRADICTORY");
    assert_eq!(verdict("s002-llama-1.36b-tier1-throughput"), "CONTRADICTORY");
    // Every claim that is not consistent says why.
    let mut blocks = out.split("\n").peekable();
    while let Some(l) = blocks.next() {
        let v = l.split_whitespace().next().unwrap_or("");
        if ["disagrees", "IMPOSSIBLE", "CONTRADICTORY"].contains(&v) {
            let mut has_why = false;
            while let Some(n) = blocks.peek() {
                if !n.starts_with("    ") {
                    break;
                }
                has_why |= n.trim_start().starts_with("why");
                blocks.next();
            }
            assert!(has_why, "no reason for `{l}`");
        }
    }
}

/// The `gpuplan report` arguments a checked-in report records on its "Regenerate:" line.
fn recorded_args(report_md: &str) -> Vec<String> {
    let line = report_md.lines().find(|l| l.starts_with("Regenerate: `gpuplan report ")).expect("a Regenerate line");
    let cmd = line.trim_start_matches("Regenerate: `gpuplan report ").split('`').next().unwrap();
    cmd.split_whitespace().map(str::to_string).collect()
}

#[test]
fn checked_in_example_reports_are_fresh() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("reports");
    let mut n = 0;
    for d in std::fs::read_dir(&root).unwrap() {
        let dir = d.unwrap().path();
        let md = dir.join("report.md");
        if !md.is_file() {
            continue;
        }
        n += 1;
        let text = std::fs::read_to_string(&md).unwrap();
        let out = temp_dir(&format!("fresh-{}", dir.file_name().unwrap().to_string_lossy()));
        let mut args: Vec<String> = vec!["report".into()];
        args.extend(recorded_args(&text).into_iter().map(|a| if a == "DIR" { out.display().to_string() } else { a }));
        args.extend(["--title".into(), dir.file_name().unwrap().to_string_lossy().into_owned()]);
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, _, err) = gpuplan(&a);
        assert_eq!(code, 0, "{a:?}: {err}");
        for f in std::fs::read_dir(&out).unwrap() {
            let p = f.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if !(name.ends_with(".csv") || name.ends_with(".md")) {
                continue;
            }
            let fresh = std::fs::read_to_string(&p).unwrap();
            let shipped = std::fs::read_to_string(dir.join(&name)).unwrap_or_default();
            assert!(
                fresh == shipped,
                "reports/{}/{name} is stale; regenerate with `sh reports/regenerate.sh` (see reports/README.md)",
                dir.file_name().unwrap().to_string_lossy()
            );
        }
        let _ = std::fs::remove_dir_all(&out);
    }
    assert!(n >= 1, "no example reports under reports/");
}
