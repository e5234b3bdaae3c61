//! `gpuplan calibrate`: microbenchmarks on this node (cudarc: driver, NVRTC, cuBLASLt, NCCL;
//! nvml-wrapper), each timed with CUDA events after warm-up as p10/p50/p90 over repetitions, on
//! random inputs, checked where a check is cheap; then nalgebra fits into a `Profile`.
//!
//! Everything here is loaded at run time: without a GPU only [`libs`], [`fit`], [`nccl_tests`]
//! (and [`import`], a profile from its logs) and [`stats`] do anything. Printing and exiting belong to `cli`; progress goes through the
//! [`Progress`] trait.

pub mod attention;
pub mod collectives;
pub mod fit;
pub mod gemm;
pub mod gpu;
pub mod host;
pub mod import;
pub mod libs;
pub mod memory;
pub mod moe;
pub mod nccl_tests;
pub mod output;
pub mod power;
pub mod stats;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use gpuplan_core::hardware::profile::CollectiveOp;
use gpuplan_core::hardware::Dtype;

use collectives::{CollRow, P2pRow};
use gemm::{GemmRow, GemmShape};

/// Seconds of bf16 8192^3 GEMM load before the GEMM grid (and before the attention group when
/// the GEMM group did not just run): quick, full.
const GEMM_SOAK_S: [u64; 2] = [3, 15];
/// cuBLASLt heuristic candidates timed per GEMM shape: the first only, as PyTorch and cuBLAS use.
/// Timing the first four and keeping the fastest made repeat runs disagree: near-equal algorithms
/// swapped places between runs (the 2026-11-22 H200 repeat check: in 16 of the 17 GEMM rows that
/// moved more than 3%, the chosen algorithm had changed) and their sustained rates under the
/// power cap differ by 3-12%.
const GEMM_ALGOS: usize = 1;
use gpu::{Gpu, Reps};
use memory::{EltRow, LaunchRow, MemRow};

#[derive(Debug, thiserror::Error)]
pub enum CalibrateError {
    #[error("CUDA driver: {0}")]
    Driver(#[from] cudarc::driver::DriverError),
    #[error("compiling `{file}` with NVRTC: {detail}")]
    Compile { file: &'static str, detail: String },
    #[error("cuBLASLt: {0}")]
    Cublas(String),
    #[error("cuBLASLt: no algorithm for {0}")]
    NoAlgorithm(String),
    #[error("NCCL: {0}")]
    Nccl(String),
    #[error("NVML: {0}")]
    Nvml(String),
    #[error("check failed for {what}: {detail}")]
    Check { what: String, detail: String },
    #[error("not supported here: {0}")]
    Unsupported(String),
    #[error("no CUDA GPU is visible{}", .0)]
    NoGpu(String),
    #[error(transparent)]
    MissingLibrary(#[from] libs::MissingLibrary),
    #[error("{0}")]
    Fit(String),
    #[error("cannot write `{path}`")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("`{path}` already exists\nhint: pass `--force` to replace it")]
    Exists { path: PathBuf },
}

/// A group of benchmarks, selectable with `--only`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Bench {
    Launch,
    Hbm,
    Elementwise,
    Gemm,
    Attention,
    P2p,
    Nccl,
    Power,
}

impl Bench {
    pub const ALL: [Bench; 8] = [Bench::Launch, Bench::Hbm, Bench::Elementwise, Bench::Gemm, Bench::Attention, Bench::P2p, Bench::Nccl, Bench::Power];
    pub fn name(self) -> &'static str {
        match self {
            Bench::Launch => "launch",
            Bench::Hbm => "hbm",
            Bench::Elementwise => "elementwise",
            Bench::Gemm => "gemm",
            Bench::Attention => "attention",
            Bench::P2p => "p2p",
            Bench::Nccl => "nccl",
            Bench::Power => "power",
        }
    }
    pub fn parse(s: &str) -> Option<Bench> {
        Bench::ALL.into_iter().find(|b| b.name() == s)
    }
}

#[derive(Debug, Clone)]
pub struct Options {
    pub quick: bool,
    pub benches: Vec<Bench>,
    pub dtypes: Vec<Dtype>,
    /// Seconds each power phase runs (default: 4 quick, 12 full).
    pub power_seconds: Option<f64>,
    /// NVML library found by discovery (else nvml-wrapper's default name).
    pub nvml_lib: Option<PathBuf>,
    /// Go on past a failing benchmark group (noted in the profile) instead of stopping.
    pub keep_going: bool,
}

/// Progress reporting, implemented by `cli` (an indicatif bar on a TTY, nothing otherwise).
pub trait Progress {
    fn stage(&self, name: &str, steps: u64);
    fn step(&self);
    fn note(&self, msg: &str);
}

/// Everything measured, before fitting.
#[derive(Debug, Clone, Default)]
pub struct Measurements {
    pub gpu_name: String,
    pub gpu_uuids: Vec<String>,
    pub n_gpus: u32,
    pub compute_capability: (i32, i32),
    pub n_sms: u32,
    pub l2_bytes: u64,
    pub memory_bytes: u64,
    pub driver_version: Option<String>,
    pub cuda_driver_version: Option<String>,
    pub cublaslt_version: Option<usize>,
    pub nccl_version: Option<String>,
    pub nvrtc_version: Option<String>,
    pub power_limit_w: Option<f64>,
    pub max_sm_clock_mhz: Option<f64>,
    pub max_mem_clock_mhz: Option<f64>,
    pub launch: Vec<LaunchRow>,
    pub hbm: Vec<MemRow>,
    pub elementwise: Vec<EltRow>,
    pub gemm: Vec<GemmRow>,
    /// Attention-like batched GEMMs (bf16), prefill and decode regimes.
    pub attention: Vec<attention::AttnRow>,
    pub p2p: Vec<P2pRow>,
    pub collectives: Vec<CollRow>,
    pub all_reduce_check_err: Option<f64>,
    pub power_phases: Vec<power::Phase>,
    pub power_samples: Vec<power::Sample>,
    /// Every GPU of the node under bf16 GEMMs at once: (GPU index, its phase "gemm-node").
    pub node_power: Vec<(usize, power::Phase)>,
    pub notes: Vec<String>,
    /// Groups that failed under `keep_going`.
    pub failed: Vec<Bench>,
    pub wall_s: f64,
}

fn reps(quick: bool, heavy: bool) -> Reps {
    match (quick, heavy) {
        (true, false) => Reps { warmup: 3, reps: 10, min_batch_s: 1e-3, max_iters: 2000, settle_s: 0.0 },
        (false, false) => Reps { warmup: 5, reps: 25, min_batch_s: 2e-3, max_iters: 5000, settle_s: 0.0 },
        (true, true) => Reps { warmup: 2, reps: 7, min_batch_s: 4e-3, max_iters: 200, settle_s: 0.05 },
        // Full mode: each row settles 0.2 s at its own clock and is timed over ~0.15 s (the
        // 2026-11-22 H100 repeat check without settling: 45 of 154 GEMM rows moved > 3%).
        (false, true) => Reps { warmup: 3, reps: 15, min_batch_s: 10e-3, max_iters: 2000, settle_s: 0.2 },
    }
}

/// Run the selected benchmarks on every visible GPU (single-GPU ones on GPU 0).
pub fn run(opts: &Options, progress: &dyn Progress) -> Result<Measurements, CalibrateError> {
    let t0 = Instant::now();
    std::env::set_var("NCCL_NVLS_ENABLE", "0");
    cudarc::driver::result::init()?;
    let n = cudarc::driver::result::device::get_count()? as usize;
    if n == 0 {
        let vis = std::env::var("CUDA_VISIBLE_DEVICES").map(|v| format!(" (CUDA_VISIBLE_DEVICES=`{v}`)")).unwrap_or_default();
        return Err(CalibrateError::NoGpu(vis));
    }
    progress.stage("compiling kernels", n as u64);
    let mut gpus = Vec::new();
    for i in 0..n {
        gpus.push(Gpu::open(i)?);
        progress.step();
    }
    let g0 = &gpus[0];
    let mut m = Measurements {
        gpu_name: g0.name.clone(),
        gpu_uuids: gpus.iter().map(|g| g.uuid.clone()).collect(),
        n_gpus: n as u32,
        compute_capability: g0.cc,
        n_sms: g0.n_sms,
        l2_bytes: g0.l2_bytes,
        memory_bytes: g0.total_mem,
        ..Default::default()
    };
    let (mut maj, mut min) = (0, 0);
    if unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut maj, &mut min) } == cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS {
        m.nvrtc_version = Some(format!("{maj}.{min}"));
    }
    let nvml = match power::open(opts.nvml_lib.as_deref()) {
        Ok(n) => Some(n),
        Err(e) => {
            m.notes.push(format!("NVML unavailable ({e}): no power, clock or temperature readings"));
            progress.note(m.notes.last().unwrap());
            None
        }
    };
    if let Some(nv) = &nvml {
        let f = power::facts(nv, &g0.uuid);
        m.driver_version = f.driver_version;
        m.cuda_driver_version = f.cuda_driver_version;
        m.power_limit_w = f.power_limit_w;
        m.max_sm_clock_mhz = f.max_sm_clock_mhz;
        m.max_mem_clock_mhz = f.max_mem_clock_mhz;
    }
    let ctx = Ctx { opts, gpus: &gpus, nvml: nvml.as_ref(), progress };
    for b in Bench::ALL {
        if !opts.benches.contains(&b) {
            continue;
        }
        if let Err(e) = run_bench(b, &ctx, &mut m) {
            if !opts.keep_going {
                return Err(e);
            }
            m.failed.push(b);
            m.notes.push(format!("{}: FAILED: {e}", b.name()));
            progress.note(m.notes.last().unwrap());
        }
    }
    m.wall_s = t0.elapsed().as_secs_f64();
    Ok(m)
}

struct Ctx<'a> {
    opts: &'a Options,
    gpus: &'a [Gpu],
    nvml: Option<&'a nvml_wrapper::Nvml>,
    progress: &'a dyn Progress,
}

fn run_bench(b: Bench, c: &Ctx, m: &mut Measurements) -> Result<(), CalibrateError> {
    let (opts, gpus, progress) = (c.opts, c.gpus, c.progress);
    let g0 = &gpus[0];
    let n = gpus.len();
    let q = opts.quick;
    let sm_clock = || c.nvml.and_then(|nv| power::sm_clock(nv, &g0.uuid));
    match b {
        Bench::Launch => {
            progress.stage("launch overhead", 1);
            m.launch = memory::launch(g0, if q { 200 } else { 1000 })?;
            progress.step();
        }
        Bench::Hbm => {
            let sizes = if q { collectives::sizes(1 << 20, 4 << 30, 4) } else { collectives::sizes(1 << 20, 4 << 30, 2) };
            progress.stage("memory bandwidth", (sizes.len() * memory::MemKernel::ALL.len()) as u64);
            m.hbm = memory::hbm(g0, &sizes, reps(q, false), || progress.step())?;
        }
        Bench::Elementwise => {
            let rows: Vec<u64> = if q { vec![1024, 8192, 32768] } else { vec![256, 1024, 4096, 8192, 16384, 32768] };
            progress.stage("elementwise ops", (rows.len() * memory::EltOp::ALL.len()) as u64);
            m.elementwise = memory::elementwise(g0, &rows, reps(q, false), || progress.step())?;
        }
        Bench::Gemm => {
            let ge = gemm::Gemm::new(g0)?;
            m.cublaslt_version = Some(gemm::Gemm::version());
            let dtypes: Vec<Dtype> = opts.dtypes.iter().copied().filter(|d| gemm::Gemm::supports(*d, g0.cc)).collect();
            for d in &opts.dtypes {
                if !dtypes.contains(d) {
                    m.notes.push(format!("gemm: `{}` skipped: no such tensor-core path on compute capability {}.{}", d.name(), g0.cc.0, g0.cc.1));
                }
            }
            let mut jobs: Vec<(Dtype, Vec<GemmShape>)> = Vec::new();
            for &d in &dtypes {
                let mut shapes = gemm::llm_shapes(q);
                if d == Dtype::Bf16 {
                    shapes.extend(gemm::wave_shapes(q));
                }
                jobs.push((d, shapes));
            }
            progress.stage("gemm (cuBLASLt)", jobs.iter().map(|j| j.1.len() as u64).sum());
            // Heat-soak first: under the power cap the SM clock falls from its maximum to its
            // sustained value over the first seconds of GEMM load, so rows measured on a cool GPU
            // and rows measured later disagree (the 2026-11-22 H200 repeat check: 33 of 152 GEMM
            // rows differed by more than 3%, at clocks from 1400 to 1980 MHz). Running the
            // reference GEMM for a while first puts every row at the sustained clock.
            heat_soak(&ge, q, "gemm", "the grid", m)?;
            for (i, (d, shapes)) in jobs.iter().enumerate() {
                let ops = ge.operands(*d, shapes, 100 + i as u32 * 10)?;
                for &s in shapes {
                    let row = ge.measure(&ops, s, GEMM_ALGOS, reps(q, true), &sm_clock)?;
                    m.gemm.push(row);
                    progress.step();
                }
            }
        }
        Bench::Attention => {
            let ge = gemm::Gemm::new(g0)?;
            m.cublaslt_version = Some(gemm::Gemm::version());
            if !gemm::Gemm::supports(Dtype::Bf16, g0.cc) {
                m.notes.push(format!("attention: skipped, no bf16 tensor-core path on compute capability {}.{}", g0.cc.0, g0.cc.1));
                return Ok(());
            }
            let cases: Vec<attention::Case> = attention::prefill_cases(q).into_iter().chain(attention::decode_cases(q)).collect();
            progress.stage("attention (batched)", (cases.len() * attention::Product::BOTH.len()) as u64);
            // Rows at the sustained clock, as in the GEMM group. Right after that group (it runs
            // just before this one) the GPU is already there.
            if opts.benches.contains(&Bench::Gemm) && !m.failed.contains(&Bench::Gemm) {
                m.notes.push("attention: measured right after the GEMM grid (no separate heat soak)".into());
            } else {
                heat_soak(&ge, q, "attention", "the batched GEMMs", m)?;
            }
            let shapes = attention::batched_shapes(&cases);
            let ops = ge.batched_operands(Dtype::Bf16, &shapes, 500)?;
            let n_algos = GEMM_ALGOS;
            for case in cases {
                for p in attention::Product::BOTH {
                    match attention::measure(&ge, &ops, case, p, n_algos, reps(q, true), &sm_clock) {
                        Ok(row) => m.attention.push(row),
                        // A shape cuBLASLt has no kernel for is noted and skipped, not fatal.
                        Err(CalibrateError::NoAlgorithm(what)) => {
                            m.notes.push(format!("attention: {} {} skipped: no cuBLASLt algorithm for {what}", case.regime.name(), p.name()));
                            progress.note(m.notes.last().unwrap());
                        }
                        Err(e) => return Err(e),
                    }
                    progress.step();
                }
            }
        }
        Bench::P2p if n > 1 => {
            let sizes = if q { collectives::sizes(8, 1 << 30, 16) } else { collectives::sizes(8, 1 << 30, 4) };
            progress.stage("p2p copies", (n * (n - 1)) as u64);
            for a in 0..n {
                for b in 0..n {
                    if a != b {
                        m.p2p.extend(collectives::p2p(&gpus[a], &gpus[b], &sizes, reps(q, false))?);
                        progress.step();
                    }
                }
            }
        }
        Bench::Nccl if n > 1 => {
            m.nccl_version = collectives::nccl_version();
            let max: u64 = 4 << 30;
            let sizes = if q { collectives::sizes(8, max, 8) } else { collectives::sizes(8, max, 2) };
            // The whole node and its power-of-two prefixes (0..2, 0..4, ...).
            let mut group_sizes: Vec<usize> = (1..).map(|k| 1usize << k).take_while(|&g| g < n).collect();
            group_sizes.push(n);
            let ops = [CollectiveOp::AllReduce, CollectiveOp::AllGather, CollectiveOp::ReduceScatter, CollectiveOp::AllToAll, CollectiveOp::SendRecv];
            progress.stage("nccl collectives", (group_sizes.len() * ops.len() * sizes.len()) as u64);
            for &gs in &group_sizes {
                let members: Vec<&Gpu> = gpus.iter().take(gs).collect();
                let group = collectives::Group::new(members, max as usize, 300)?;
                let err = group.check_all_reduce(1 << 20)?;
                if err.is_nan() || err >= 0.02 {
                    return Err(CalibrateError::Check {
                        what: format!("nccl all_reduce on {gs} GPUs"),
                        detail: format!("result differs from the host sum by {err:.3e}"),
                    });
                }
                if gs == n {
                    m.all_reduce_check_err = Some(err);
                }
                for op in ops {
                    for &s in &sizes {
                        if group.valid_size(op, s) {
                            let heavy = s >= 64 << 20;
                            m.collectives.push(group.measure(op, s, reps(q, heavy))?);
                        }
                        progress.step();
                    }
                }
            }
        }
        Bench::P2p | Bench::Nccl => m.notes.push(format!("{}: skipped, one GPU", b.name())),
        Bench::Power => match c.nvml {
            None => m.notes.push("power: skipped, NVML unavailable".into()),
            Some(nv) => {
                let secs = opts.power_seconds.unwrap_or(if q { 4.0 } else { 12.0 });
                progress.stage("power phases", 4);
                power_phases(g0, nv, Duration::from_secs_f64(secs), m, progress)?;
                if n > 1 {
                    progress.stage("power, all GPUs at once", 1);
                    node_power(gpus, nv, Duration::from_secs_f64(secs), m)?;
                    progress.step();
                }
            }
        },
    }
    Ok(())
}

/// Run the reference bf16 8192^3 GEMM for [`GEMM_SOAK_S`] so that the rows after it run at the
/// sustained clock (see the GEMM group), and note it under `group`.
fn heat_soak(ge: &gemm::Gemm, quick: bool, group: &str, before: &str, m: &mut Measurements) -> Result<(), CalibrateError> {
    let soak = Duration::from_secs(GEMM_SOAK_S[usize::from(!quick)]);
    let reference = GemmShape { m: 8192, n: 8192, k: 8192 };
    let soak_ops = ge.operands(Dtype::Bf16, &[reference], 7)?;
    let soaked = ge.sustain(&soak_ops, reference, Instant::now() + soak)?;
    drop(soak_ops);
    m.notes.push(format!("{group}: heat-soaked {} s ({soaked} bf16 8192^3 GEMMs) before {before}", soak.as_secs()));
    Ok(())
}

/// Every GPU of the node runs bf16 8192^3 GEMMs at once, as data- and tensor-parallel training
/// does, each sampled by NVML: what each GPU draws, its SM clock and GEMM rate when all are
/// loaded (the slowest sets a synchronous job's pace), and the node's GPU power.
fn node_power(gpus: &[Gpu], nv: &nvml_wrapper::Nvml, d: Duration, m: &mut Measurements) -> Result<(), CalibrateError> {
    let shape = GemmShape { m: 8192, n: 8192, k: 8192 };
    let phases: Vec<Result<power::Phase, CalibrateError>> = std::thread::scope(|s| {
        let handles: Vec<_> = gpus
            .iter()
            .enumerate()
            .map(|(i, g)| {
                s.spawn(move || -> Result<power::Phase, CalibrateError> {
                    g.ctx.bind_to_thread()?;
                    let ge = gemm::Gemm::new(g)?;
                    let ops = ge.operands(Dtype::Bf16, &[shape], 950 + i as u32)?;
                    let t = Instant::now();
                    let (count, _, mut p) = power::sample_phase(nv, &g.uuid, "gemm-node", d, 0.4, |until| ge.sustain(&ops, shape, until))?;
                    p.gemm_tflops = Some(count as f64 * shape.flops() / t.elapsed().as_secs_f64() / 1e12);
                    Ok(p)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(CalibrateError::Check { what: "node power".into(), detail: "a GPU's load thread panicked".into() })))
            .collect()
    });
    for (i, p) in phases.into_iter().enumerate() {
        m.node_power.push((i, p?));
    }
    let (w, mhz, tf): (Vec<f64>, Vec<f64>, Vec<f64>) = (
        m.node_power.iter().map(|(_, p)| p.power_w_mean).collect(),
        m.node_power.iter().map(|(_, p)| p.sm_clock_mhz_mean).collect(),
        m.node_power.iter().map(|(_, p)| p.gemm_tflops.unwrap_or(f64::NAN)).collect(),
    );
    let range = |v: &[f64], digits: usize| {
        let (lo, hi) = v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
        format!("{lo:.digits$}-{hi:.digits$}")
    };
    m.notes.push(format!(
        "power, all {} GPUs under bf16 8192^3 GEMMs at once: {} W each ({:.0} W in all), SM clock {} MHz, {} TFLOP/s per GPU (power_node.csv)",
        gpus.len(),
        range(&w, 0),
        w.iter().sum::<f64>(),
        range(&mhz, 0),
        range(&tf, 0)
    ));
    Ok(())
}

fn power_phases(g: &Gpu, nv: &nvml_wrapper::Nvml, d: Duration, m: &mut Measurements, progress: &dyn Progress) -> Result<(), CalibrateError> {
    let settle = 0.4;
    let ge = gemm::Gemm::new(g)?;
    let shape = GemmShape { m: 8192, n: 8192, k: 8192 };
    let ops = ge.operands(Dtype::Bf16, &[shape], 900)?;
    let copy_bytes: usize = 2 << 30;
    let src = g.alloc(copy_bytes)?;
    let dst = g.alloc(copy_bytes)?;
    g.fill_random(&src, gpu::Elem::F32, 901, 1.0)?;
    let side = g.ctx.new_stream()?;
    let copy_on = |stream: &cudarc::driver::CudaStream| -> Result<(), CalibrateError> {
        g.ctx.bind_to_thread()?;
        unsafe { cudarc::driver::result::memcpy_dtod_async(dst.ptr, src.ptr, copy_bytes, stream.cu_stream())? };
        Ok(())
    };

    let (_, s, p) = power::sample_phase(nv, &g.uuid, "idle", d, settle, |until| {
        std::thread::sleep(until.saturating_duration_since(Instant::now()));
        Ok(())
    })?;
    m.power_samples.extend(s);
    m.power_phases.push(p);
    progress.step();

    let t = Instant::now();
    let (count, s, mut p) = power::sample_phase(nv, &g.uuid, "gemm", d, settle, |until| ge.sustain(&ops, shape, until))?;
    p.gemm_tflops = Some(count as f64 * shape.flops() / t.elapsed().as_secs_f64() / 1e12);
    m.power_samples.extend(s);
    m.power_phases.push(p);
    progress.step();

    let t = Instant::now();
    let (count, s, mut p) = power::sample_phase(nv, &g.uuid, "hbm", d, settle, |until| {
        let mut c = 0u64;
        while Instant::now() < until {
            for _ in 0..8 {
                copy_on(&g.stream)?;
                c += 1;
            }
            g.stream.synchronize()?;
        }
        Ok(c)
    })?;
    p.hbm_gb_per_s = Some(count as f64 * 2.0 * copy_bytes as f64 / t.elapsed().as_secs_f64() / 1e9);
    m.power_samples.extend(s);
    m.power_phases.push(p);
    progress.step();

    let t = Instant::now();
    let (counts, s, mut p) = power::sample_phase(nv, &g.uuid, "mixed", d, settle, |until| {
        let plan_until = until;
        let mut copies = 0u64;
        let mut gemms = 0u64;
        while Instant::now() < plan_until {
            for _ in 0..2 {
                copy_on(&side)?;
                copies += 1;
            }
            gemms += ge.sustain(&ops, shape, Instant::now())?; // 16 GEMMs, then waits for them
            side.synchronize()?;
        }
        Ok((gemms, copies))
    })?;
    let el = t.elapsed().as_secs_f64();
    p.gemm_tflops = Some(counts.0 as f64 * shape.flops() / el / 1e12);
    p.hbm_gb_per_s = Some(counts.1 as f64 * 2.0 * copy_bytes as f64 / el / 1e9);
    m.power_samples.extend(s);
    m.power_phases.push(p);
    progress.step();
    Ok(())
}
