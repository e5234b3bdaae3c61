//! `gpuplan calibrate`: CPU-side behaviour (nccl-tests import, library discovery errors, profile
//! files) and, under `--features gpu-tests`, a short run on the GPU machine.

use std::path::{Path, PathBuf};
use std::process::Command;

use gpuplan::calibrate::libs::{discover, CudaLib, MissingLibrary, SearchEnv};
use gpuplan::config::profile::load_profile;
use gpuplan::hardware::profile::CollectiveOp;

fn bin() -> PathBuf {
    std::env::var_os("GPUPLAN_BIN").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_gpuplan")))
}

fn data(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(p)
}

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gpuplan-it-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn imports_nccl_tests_logs_into_a_profile() {
    let out = scratch("import");
    let log = data("nccl-tests/all_reduce_perf_dgx_h100_8gpu.log");
    let run = |force: bool| {
        let mut c = Command::new(bin());
        c.args(["calibrate", "--name", "dgx-h100-sample", "--out-dir"]).arg(&out).arg("--import-nccl-tests").arg(&log);
        if force {
            c.arg("--force");
        }
        c.output().unwrap()
    };
    let o = run(false);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let p = load_profile(&out.join("dgx-h100-sample")).unwrap();
    assert_eq!(p.n_gpus, 8);
    assert_eq!(p.gpu_name, "NVIDIA H100 80GB HBM3");
    let ar = p.collectives.iter().find(|c| c.op == CollectiveOp::AllReduce && c.n_ranks == 8).unwrap();
    assert!(ar.intra_node);
    // The log's large-message busbw is ~480 GB/s and its small-message time ~13-20 us
    // (reference CSV rows, NVIDIA/dgxc-benchmarking sample output); the fit must land near both.
    let bw = ar.busbw.as_gb_per_s();
    assert!((400.0..=520.0).contains(&bw), "busbw {bw}");
    let lat = ar.latency.as_us();
    assert!((5.0..=40.0).contains(&lat), "latency {lat}");
    assert!(out.join("dgx-h100-sample/collectives.csv").is_file());
    assert!(out.join("dgx-h100-sample/meta.toml").is_file());

    // Never overwrite without --force.
    let o = run(false);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("already exists") && err.contains("--force"), "{err}");
    assert!(run(true).status.success());
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn unknown_benchmark_names_are_errors() {
    let o = Command::new(bin()).args(["calibrate", "--only", "gemm,hmb"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("unknown benchmark `hmb`") && err.contains("hint: one of launch, hbm"), "{err}");
}

fn touch(p: &Path) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, b"").unwrap();
}

#[test]
fn discovery_finds_pip_and_toolkit_libraries_and_names_what_is_missing() {
    let root = scratch("libs");
    let sp = root.join("opt/torch/.venv/lib/python3.12/site-packages");
    touch(&sp.join("nvidia/cu13/lib/libcublas.so.13"));
    touch(&sp.join("nvidia/cu13/lib/libcublasLt.so.13"));
    touch(&sp.join("nvidia/nccl/lib/libnccl.so.2"));
    touch(&root.join("usr/local/cuda/lib64/libnvrtc.so.13"));
    touch(&root.join("usr/local/cuda/lib64/libnvrtc.so.12"));
    let env = SearchEnv { root: root.clone(), ..Default::default() };
    let d = discover(&env);
    assert_eq!(d.get(CudaLib::Nccl).unwrap().path, sp.join("nvidia/nccl/lib/libnccl.so.2"));
    assert_eq!(d.get(CudaLib::Cublas).unwrap().path, sp.join("nvidia/cu13/lib/libcublas.so.13"));
    assert_eq!(d.get(CudaLib::Nvrtc).unwrap().path, root.join("usr/local/cuda/lib64/libnvrtc.so.13"));
    assert!(d.get(CudaLib::Nccl).unwrap().origin.contains("pip packages in"));
    assert!(d.missing.contains(&CudaLib::Driver) && d.missing.contains(&CudaLib::Nvml));

    let msg = MissingLibrary { lib: CudaLib::Driver, searched: d.searched.clone() }.to_string();
    assert!(msg.starts_with("cannot find `libcuda.so*` (the CUDA driver"), "{msg}");
    assert!(msg.contains("looked in:") && msg.contains("usr/local/cuda/lib64 (CUDA toolkit)"), "{msg}");
    assert!(msg.contains("hint: set `GPUPLAN_CUDA_LIB_DIR`"), "{msg}");

    // The user's folder comes first.
    let mine = root.join("mine");
    touch(&mine.join("libnccl.so.2"));
    let env = SearchEnv { root: root.clone(), lib_dir: Some(mine.display().to_string()), ..Default::default() };
    let d = discover(&env);
    assert_eq!(d.get(CudaLib::Nccl).unwrap().path, mine.join("libnccl.so.2"));
    assert_eq!(d.get(CudaLib::Nccl).unwrap().origin, "GPUPLAN_CUDA_LIB_DIR");
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn shipped_profiles_load() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("calibration/profiles");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    let mut n = 0;
    for e in entries.flatten() {
        if e.path().join("profile.toml").is_file() {
            let p = load_profile(&e.path()).unwrap_or_else(|err| panic!("{}: {err}", e.path().display()));
            assert!(p.n_gpus >= 1);
            n += 1;
        }
    }
    eprintln!("{n} shipped profiles load");
}

/// `gpuplan calibrate --quick` on this GPU into `out` as profile `name`, with `extra` flags; it
/// must succeed.
#[cfg(feature = "gpu-tests")]
fn quick_calibration(out: &Path, name: &str, extra: &[&str]) {
    let o = Command::new(bin()).args(["calibrate", "--quick", "--name", name, "--no-progress", "--out-dir"]).arg(out).args(extra).output().unwrap();
    assert!(o.status.success(), "{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
}

#[cfg(feature = "gpu-tests")]
#[test]
fn quick_calibration_on_this_gpu() {
    let out = scratch("gpu");
    quick_calibration(&out, "gpu-test", &["--only", "launch,hbm,gemm", "--dtypes", "bf16"]);
    let p = load_profile(&out.join("gpu-test")).unwrap();
    let g = p.gemm.iter().find(|g| (g.m, g.n, g.k) == (8192, 8192, 8192)).unwrap();
    assert!(g.achieved.as_tflops() > 100.0, "{g:?}");
    assert!(p.stream.unwrap().bandwidth.as_gb_per_s() > 500.0);
    std::fs::remove_dir_all(&out).unwrap();
}

/// The `attention` group alone (so it heat-soaks first), quick: every case measured and checked,
/// the table holds the cost model's reference shape, and the numbers are of the right order.
#[cfg(feature = "gpu-tests")]
#[test]
fn quick_attention_calibration_on_this_gpu() {
    let out = scratch("gpu-attention");
    quick_calibration(&out, "gpu-attention", &["--only", "attention"]);
    let dir = out.join("gpu-attention");
    let p = load_profile(&dir).unwrap();
    // Quick: s in 512, 2048, 8192 at d = 64 and 128.
    assert_eq!(p.attention_bmm.len(), 6, "{:?}", p.attention_bmm);
    let reference = p.attention_bmm.iter().find(|a| (a.seq_len, a.head_dim) == (8192, 128)).unwrap();
    assert!(reference.achieved.as_tflops() > 100.0, "{reference:?}");
    let csv = std::fs::read_to_string(dir.join("attention.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    // 6 prefill and 2 decode cases, two products each.
    assert_eq!(rows.len(), 16, "{csv}");
    for r in rows.iter().filter(|r| r[col("regime")] == "decode") {
        let gb: f64 = r[col("bandwidth_gb_per_s_p50")].parse().unwrap();
        assert!(gb > 500.0, "{r:?}");
    }
    std::fs::remove_dir_all(&out).unwrap();
}

/// The decode-regime rows of a profile's attention.csv load with it (QK^T and PV together), and
/// give the HBM rate an unfused decode attention gets: lower with more query rows per KV head.
#[test]
fn decode_attention_rows_load_from_the_profile_csv() {
    let p = load_profile(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/calibration/profiles/h200-sxm-1x"))).unwrap();
    assert_eq!(p.attention_decode.len(), 16, "{:?}", p.attention_decode);
    let one = p.decode_attention_bandwidth(1, 128).unwrap().as_gb_per_s();
    let four = p.decode_attention_bandwidth(4, 128).unwrap().as_gb_per_s();
    assert!(one > 3500.0 && one < 5000.0, "{one}");
    assert!(four > 1500.0 && four < one, "{four} vs {one}");
    // Nearest row count: 3 reads the 4-row points (log distance), 5 too.
    assert_eq!(p.decode_attention_bandwidth(5, 128).unwrap().as_gb_per_s(), four);
    // A profile without attention.csv has none.
    let old = load_profile(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/calibration/profiles/h200-sxm-2x"))).unwrap();
    assert!(old.attention_decode.is_empty() && old.decode_attention_bandwidth(4, 128).is_none());
}
