//! The binary works from any folder: its catalog is built in, and a run record made elsewhere
//! carries its model file.

use std::path::PathBuf;
use std::process::Command;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gpuplan-it-portable-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

const STEPS: &str =
    "for i in 1 2 3 4 5 6; do echo \"step=$i step_time_s=0.2$i tokens=4096 tokens_per_s=1 max_mem_alloc_bytes=10 max_mem_reserved_bytes=20\"; done";

#[test]
fn a_copied_binary_predicts_and_validates_a_record_made_in_another_folder() {
    // The binary copied to a folder with no catalog, and run from there.
    let home = dir("bin");
    let exe = home.join("gpuplan");
    std::fs::copy(env!("CARGO_BIN_EXE_gpuplan"), &exe).unwrap();
    let run = |cwd: &PathBuf, args: &[&str]| {
        Command::new(&exe).args(args).current_dir(cwd).env_remove("GPUPLAN_CATALOG").env_remove("GPUPLAN_HOME").output().unwrap()
    };
    let p = run(&home, &["predict", "--model", "llama-3-8b", "--system", "dgx-b200", "--gpus", "8", "--seq", "4096", "--global-batch", "64"]);
    assert_eq!(p.status.code(), Some(0), "{}", String::from_utf8_lossy(&p.stderr));
    assert!(String::from_utf8_lossy(&p.stdout).contains("DGX B200"));

    // A record measured in another folder, its model named by a relative path...
    let work = dir("work");
    std::fs::copy(concat!(env!("CARGO_MANIFEST_DIR"), "/models/ref-llama-0.1b.toml"), work.join("my-model.toml")).unwrap();
    let m = run(
        &work,
        &["measure", "--out", "runs.jsonl", "--model", "my-model.toml", "--system", "hgx-h200", "--micro-batch", "4", "--seq", "1024", "--", "sh", "-c", STEPS],
    );
    assert_eq!(m.status.code(), Some(0), "{}", String::from_utf8_lossy(&m.stderr));
    let text = std::fs::read_to_string(work.join("runs.jsonl")).unwrap();
    assert!(text.contains("\"model_file\""), "the record keeps a copy of its model file: {text}");
    // ... validates from the binary's folder after the model file is gone.
    std::fs::remove_file(work.join("my-model.toml")).unwrap();
    let v = run(&home, &["validate", "--runs", work.join("runs.jsonl").to_str().unwrap()]);
    assert_eq!(v.status.code(), Some(0), "{}", String::from_utf8_lossy(&v.stderr));
    let out = String::from_utf8_lossy(&v.stdout);
    assert!(out.contains("step_time") && out.contains("(n=1)"), "{out}");

    // An explicit catalog folder that does not exist names its flag.
    let c = run(&home, &["predict", "--catalog", "/no/such/dir", "--model", "llama-3-8b", "--system", "dgx-h100"]);
    assert_eq!(c.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&c.stderr).contains("--catalog"));
    let _ = std::fs::remove_dir_all(&home);
    let _ = std::fs::remove_dir_all(&work);
}
