//! Resource limits (issue 22's panics, aborts and hangs in serving and simulation): every
//! reproducer ends within 20 s with exit 2 and a message naming the flag (or the file, key and
//! value) and a hint; a closed pipe ends a command quietly. The limits live in
//! `gpuplan_core::limits`; README.md "Limits" has their measured time and memory.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const LIMIT: Duration = Duration::from_secs(20);

/// Run gpuplan with `args`, killed after [`LIMIT`]: (exit code, stderr).
fn gpuplan(args: &[&str]) -> (i32, String) {
    let mut child =
        Command::new(env!("CARGO_BIN_EXE_gpuplan")).args(args).current_dir(ROOT).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("run gpuplan");
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("gpuplan {args:?} ran past {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status.code().unwrap_or(-1), reader.join().unwrap())
}

/// Exit 2, no panic, and every one of `needles` in the message, with a hint.
fn refused(args: &[&str], needles: &[&str]) {
    let (code, err) = gpuplan(args);
    assert_eq!(code, 2, "gpuplan {args:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains("hint:"), "no hint: {err}");
    for n in needles {
        assert!(err.contains(n), "gpuplan {args:?}: no `{n}` in: {err}");
    }
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gpuplan-it-limits-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

const SERVE: &[&str] = &["serve", "--model", "llama-3-8b", "--system", "dgx-h100", "--input-len", "512"];

fn serve<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    [SERVE, extra].concat()
}

#[test]
fn a_closed_pipe_ends_the_command_quietly() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpuplan"))
        .args(["plan", "--scenario", "scenarios/seed-8xb200-tp2-dp4-13b.toml", "--no-progress"])
        .current_dir(ROOT)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    // The reader is gone (as after `| head -1`): the next writes hit a closed pipe.
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!first.is_empty());
    assert!(!err.contains("panicked") && !err.contains("Broken pipe"), "{err}");
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        // Ended by SIGPIPE (as `ls | head -1`), or done before the pipe closed.
        assert!(out.status.signal() == Some(libc_sigpipe()) || out.status.success(), "{:?}: {err}", out.status);
    }
}

#[cfg(unix)]
fn libc_sigpipe() -> i32 {
    13
}

#[test]
fn serving_loads_over_the_request_limit_are_refused() {
    refused(
        &serve(&["--gpus", "8", "--output-len", "128", "--qps", "1e9", "--duration-s", "20"]),
        &["`qps` = 1000000000", "requests, more than the limit", "--qps", "--duration-s"],
    );
    refused(&serve(&["--gpus", "8", "--output-len", "128", "--qps", "1", "--duration-s", "1e12"]), &["`duration_s` = 1000000000000", "--duration-s"]);
    refused(&serve(&["--gpus", "8", "--output-len", "128", "--qps", "1e7"]), &["`qps` = 10000000", "--qps"]);
    refused(&serve(&["--gpus", "8", "--output-len", "128", "--qps", "10", "--sweep-qps", "1,1e8"]), &["`qps` = 100000000", "--qps"]);
    // Light on requests, heavy on tokens.
    refused(&serve(&["--gpus", "8", "--qps", "1000", "--duration-s", "1000", "--output-len", "8000"]), &["output tokens", "--output-len"]);
}

#[test]
fn a_serving_scenario_over_the_limit_is_refused() {
    let d = tmp("duration");
    let text = std::fs::read_to_string(format!("{ROOT}/scenarios/serving/llama-3-70b-bursty-8xb200.toml")).unwrap();
    let text = text.lines().filter(|l| !l.trim_start().starts_with("duration_s")).collect::<Vec<_>>().join("\n").replacen(
        "[traffic]",
        "[traffic]\nduration_s = 1e300",
        1,
    );
    let f = d.join("huge.toml");
    std::fs::write(&f, text).unwrap();
    refused(&["serve", "--scenario", f.to_str().unwrap()], &["`duration_s` = 1e300", "traffic.duration_s"]);
}

#[test]
fn huge_deployments_bursts_and_replications_are_refused() {
    refused(&serve(&["--output-len", "128", "--qps", "1", "--gpus", "4294967295", "--tp", "1"]), &["`gpus` = 4294967295", "replicas", "--gpus"]);
    refused(&serve(&["--gpus", "8", "--output-len", "128", "--qps", "10", "--arrival", "gamma", "--cv", "1e6"]), &["`cv` = 1000000", "--cv"]);
    refused(
        &serve(&["--gpus", "8", "--output-len", "128", "--qps", "1", "--duration-s", "10", "--replications", "100000"]),
        &["`--replications` = 100000", "limit"],
    );
    refused(
        &serve(&["--gpus", "8", "--output-len", "128", "--qps", "100", "--duration-s", "100", "--replications", "1000"]),
        &["`--replications` = 1000", "requests"],
    );
    refused(&serve(&["--gpus", "8", "--output-len", "128", "--qps", "1", "--bin-s", "1e-9"]), &["`--bin-s`", "bins"]);
}

#[test]
fn a_des_step_over_the_event_limit_is_refused() {
    // 4294967280 = 24 x 178956970 micro-batches of 6 x dp 4.
    refused(
        &["simulate", "--scenario", "scenarios/seed-8xb200-tp2-dp4-13b.toml", "--global-batch", "4294967280"],
        &["`global_batch` = 4294967280", "--global-batch"],
    );
    refused(
        &["simulate", "--scenario", "scenarios/seed-8xb200-tp2-dp4-13b.toml", "--global-batch", "1200000"],
        &["events", "--global-batch", "gpuplan predict"],
    );
    let d = tmp("des-file");
    let text = std::fs::read_to_string(format!("{ROOT}/scenarios/seed-8xb200-tp2-dp4-13b.toml")).unwrap();
    let f = d.join("big.toml");
    std::fs::write(&f, text.replacen("global_batch = 192", "global_batch = 1000000000008", 1)).unwrap();
    let (code, err) = gpuplan(&["simulate", "--scenario", f.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("global_batch") && !err.contains("panicked"), "{err}");
}

#[test]
fn traces_are_relative_to_their_first_arrival_in_order_and_not_empty() {
    let d = tmp("trace");
    let epoch = d.join("epoch.csv");
    std::fs::write(&epoch, "arrival_s,input_len,output_len\n1732400000.482,512,16\n1732400000.982,256,16\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gpuplan"))
        .args(["serve", "--model", "llama-3-8b", "--system", "dgx-h100", "--gpus", "1", "--trace", epoch.to_str().unwrap(), "--json"])
        .current_dir(ROOT)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ttft = v["ttft_s"]["p50"].as_f64().unwrap();
    assert!(ttft > 0.0 && ttft < 1.0, "TTFT {ttft}");

    let base = ["serve", "--model", "llama-3-8b", "--system", "dgx-h100", "--gpus", "1", "--trace"];
    let unsorted = d.join("unsorted.csv");
    std::fs::write(&unsorted, "arrival_s,input_len,output_len\n0.5,512,16\n0.1,256,16\n").unwrap();
    let args: Vec<&str> = base.iter().copied().chain([unsorted.to_str().unwrap()]).collect();
    refused(&args, &["unsorted.csv", "line 3, column 1 (`arrival_s`)", "`0.1`", "sort"]);

    let negative = d.join("negative.csv");
    std::fs::write(&negative, "arrival_s,input_len,output_len\n-3,512,16\n").unwrap();
    let args: Vec<&str> = base.iter().copied().chain([negative.to_str().unwrap()]).collect();
    refused(&args, &["negative.csv", "line 2, column 1 (`arrival_s`)", "`-3`"]);

    let empty = d.join("empty.csv");
    std::fs::write(&empty, "arrival_s,input_len,output_len\n").unwrap();
    let args: Vec<&str> = base.iter().copied().chain([empty.to_str().unwrap()]).collect();
    refused(&args, &["empty.csv", "no requests"]);
}
