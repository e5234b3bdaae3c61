//! From a plan to a launch and back (issue 17 item 8): the Megatron-LM arguments `predict` prints
//! for a layout, read back with `--from-megatron-args`, give the same prediction.

use std::process::Command;

fn gpuplan(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuplan")).args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().expect("run gpuplan");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn printed_megatron_args_read_back_to_the_same_prediction() {
    let what = ["--model", "llama-3-70b", "--system", "gb200-nvl72", "--gpus", "64"];
    let layout = [
        "--tp",
        "2",
        "--pp",
        "4",
        "--vp",
        "5",
        "--zero",
        "1",
        "--seq",
        "8192",
        "--global-batch",
        "512",
        "--precision",
        "fp8",
        "--fp8-recipe",
        "mxfp8",
        "--recompute",
        "selective",
    ];
    let (code, json, err) = gpuplan(&[&["predict", "--json", "--megatron-args"][..], &what, &layout].concat());
    assert_eq!(code, 0, "{err}");
    let line = err.lines().find_map(|l| l.strip_prefix("megatron-lm args: ")).expect("the args line").to_string();
    assert!(line.contains("--tensor-model-parallel-size 2") && line.contains("--fp8-recipe mxfp8"), "{line}");
    // A real launch line has more than gpuplan models: those flags are reported and ignored.
    let pasted = format!("{line} --lr 3e-4 --data-path /data/tokens");
    let (code, back, err) = gpuplan(&[&["predict", "--json"][..], &what, &["--from-megatron-args", &pasted]].concat());
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("ignored: --lr 3e-4 --data-path /data/tokens"), "{err}");
    assert_eq!(back, json);
    // A malformed value names the Megatron flag.
    let (code, _, err) = gpuplan(&[&["predict"][..], &what, &["--from-megatron-args", "--pipeline-model-parallel-size x"]].concat());
    assert_eq!(code, 2);
    assert!(err.contains("--pipeline-model-parallel-size") && err.contains("`x`"), "{err}");
}
