//! Memory-bound benchmarks on one GPU: HBM/L2 read, write, copy (our kernels and the driver's
//! device-to-device copy), the elementwise ops of a training step, and launch overhead.

use cudarc::driver::{LaunchConfig, PushKernelArg};

use super::gpu::{time_op, Elem, Gpu, Kernel, Reps};
use super::stats::Percentiles;
use super::CalibrateError;

/// A memory-bound kernel and its byte formula.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemKernel {
    /// `hbm_read`: bytes = size.
    Read,
    /// `hbm_write`: bytes = size.
    Write,
    /// `hbm_copy`: bytes = 2 * size (read + write).
    Copy,
    /// `cuMemcpyDtoDAsync` (what `Tensor.copy_` uses): bytes = 2 * size.
    DriverCopy,
}

impl MemKernel {
    pub const ALL: [MemKernel; 4] = [MemKernel::Read, MemKernel::Write, MemKernel::Copy, MemKernel::DriverCopy];
    pub fn name(self) -> &'static str {
        match self {
            MemKernel::Read => "read",
            MemKernel::Write => "write",
            MemKernel::Copy => "copy",
            MemKernel::DriverCopy => "memcpy_dtod",
        }
    }
    /// Bytes moved through memory for a buffer of `size` bytes.
    pub fn bytes(self, size: u64) -> u64 {
        match self {
            MemKernel::Read | MemKernel::Write => size,
            MemKernel::Copy | MemKernel::DriverCopy => 2 * size,
        }
    }
}

#[derive(Debug, Clone)]
pub struct MemRow {
    pub kernel: MemKernel,
    pub size_bytes: u64,
    pub bytes_moved: u64,
    pub time: Percentiles,
}

pub fn hbm(gpu: &Gpu, sizes: &[u64], r: Reps, mut tick: impl FnMut()) -> Result<Vec<MemRow>, CalibrateError> {
    let max = *sizes.iter().max().unwrap_or(&(1 << 20)) as usize;
    let src = gpu.alloc(max)?;
    let dst = gpu.alloc(max)?;
    let partial = gpu.alloc(gpu.n_sms as usize * 4 * 4 * 4)?;
    gpu.fill_random(&src, Elem::F32, 11, 1.0)?;
    gpu.fill_random(&dst, Elem::F32, 12, 1.0)?;
    let fr = gpu.function(Kernel::HbmRead)?;
    let fw = gpu.function(Kernel::HbmWrite)?;
    let fc = gpu.function(Kernel::HbmCopy)?;
    let mut rows = Vec::new();
    for &size in sizes {
        let n4 = size / 16;
        let cfg = gpu.stream_grid(n4, 512);
        for k in MemKernel::ALL {
            let v = 0.5f32;
            let t = time_op(&gpu.ctx, &gpu.stream, r, || {
                unsafe {
                    match k {
                        MemKernel::Read => gpu.stream.launch_builder(&fr).arg(&src.ptr).arg(&partial.ptr).arg(&n4).launch(cfg).map(|_| ())?,
                        MemKernel::Write => gpu.stream.launch_builder(&fw).arg(&dst.ptr).arg(&n4).arg(&v).launch(cfg).map(|_| ())?,
                        MemKernel::Copy => gpu.stream.launch_builder(&fc).arg(&src.ptr).arg(&dst.ptr).arg(&n4).launch(cfg).map(|_| ())?,
                        MemKernel::DriverCopy => {
                            gpu.ctx.bind_to_thread()?;
                            cudarc::driver::result::memcpy_dtod_async(dst.ptr, src.ptr, size as usize, gpu.stream.cu_stream())?;
                        }
                    }
                }
                Ok(())
            })?;
            let time = Percentiles::of(&t).ok_or_else(|| CalibrateError::Check { what: "hbm".into(), detail: "no valid timings".into() })?;
            if matches!(k, MemKernel::Copy | MemKernel::DriverCopy) {
                // The tail of the copied range must equal the source.
                let n = (size as usize).min(4096);
                let off = size as usize - n;
                if gpu.read_bytes(src.ptr_at(off), n)? != gpu.read_bytes(dst.ptr_at(off), n)? {
                    return Err(CalibrateError::Check { what: format!("hbm {} {} B", k.name(), size), detail: "destination differs from source".into() });
                }
            }
            rows.push(MemRow { kernel: k, size_bytes: size, bytes_moved: k.bytes(size), time });
            tick();
        }
    }
    Ok(rows)
}

/// An elementwise op of a training step, bf16.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EltOp {
    RmsNorm,
    SiluMul,
    Softmax,
}

impl EltOp {
    pub const ALL: [EltOp; 3] = [EltOp::RmsNorm, EltOp::SiluMul, EltOp::Softmax];
    pub fn name(self) -> &'static str {
        match self {
            EltOp::RmsNorm => "rmsnorm",
            EltOp::SiluMul => "silu_mul",
            EltOp::Softmax => "softmax",
        }
    }
    /// Fewest bytes the op must move (each input read once, each output written once).
    pub fn bytes(self, rows: u64, cols: u64) -> u64 {
        match self {
            EltOp::RmsNorm => 2 * rows * cols * 2 + cols * 2,
            EltOp::SiluMul => 3 * rows * cols * 2,
            EltOp::Softmax => 2 * rows * cols * 2,
        }
    }
    /// Row length used: hidden size for the norm, FFN width for SiLU*mul, a 4k sequence for softmax.
    pub fn cols(self) -> u64 {
        match self {
            EltOp::RmsNorm => 8192,
            EltOp::SiluMul => 14336,
            EltOp::Softmax => 4096,
        }
    }
}

#[derive(Debug, Clone)]
pub struct EltRow {
    pub op: EltOp,
    pub rows: u64,
    pub cols: u64,
    pub bytes_moved: u64,
    pub time: Percentiles,
    pub check_err: f64,
}

pub fn elementwise(gpu: &Gpu, row_counts: &[u64], r: Reps, mut tick: impl FnMut()) -> Result<Vec<EltRow>, CalibrateError> {
    let max_elems = EltOp::ALL.iter().map(|o| o.cols()).max().unwrap() * row_counts.iter().max().copied().unwrap_or(1);
    let x = gpu.alloc(max_elems as usize * 2)?;
    let u = gpu.alloc(max_elems as usize * 2)?;
    let y = gpu.alloc(max_elems as usize * 2)?;
    let w = gpu.alloc(16384 * 2)?;
    gpu.fill_random(&x, Elem::Bf16, 21, 2.0)?;
    gpu.fill_random(&u, Elem::Bf16, 22, 1.0)?;
    gpu.fill_random(&w, Elem::Bf16, 23, 1.0)?;
    let fnorm = gpu.function(Kernel::RmsNormBf16)?;
    let fsilu = gpu.function(Kernel::SiluMulBf16)?;
    let fsoft = gpu.function(Kernel::SoftmaxBf16)?;
    let mut rows_out = Vec::new();
    for op in EltOp::ALL {
        let cols = op.cols();
        for &rows in row_counts {
            let c32 = cols as u32;
            let n8 = rows * cols / 8;
            let row_cfg = LaunchConfig { grid_dim: (rows as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
            let flat_cfg = gpu.stream_grid(n8, 256);
            let t = time_op(&gpu.ctx, &gpu.stream, r, || {
                unsafe {
                    match op {
                        EltOp::RmsNorm => gpu.stream.launch_builder(&fnorm).arg(&x.ptr).arg(&w.ptr).arg(&y.ptr).arg(&c32).launch(row_cfg).map(|_| ())?,
                        EltOp::SiluMul => gpu.stream.launch_builder(&fsilu).arg(&x.ptr).arg(&u.ptr).arg(&y.ptr).arg(&n8).launch(flat_cfg).map(|_| ())?,
                        EltOp::Softmax => gpu.stream.launch_builder(&fsoft).arg(&x.ptr).arg(&y.ptr).arg(&c32).launch(row_cfg).map(|_| ())?,
                    }
                }
                Ok(())
            })?;
            let time = Percentiles::of(&t).ok_or_else(|| CalibrateError::Check { what: op.name().into(), detail: "no valid timings".into() })?;
            let check_err = check_elementwise(gpu, op, cols, &x, &u, &w, &y)?;
            if check_err.is_nan() || check_err >= 0.03 {
                return Err(CalibrateError::Check {
                    what: format!("{} {rows}x{cols}", op.name()),
                    detail: format!("output differs from a float64 reference by {check_err:.3e}"),
                });
            }
            rows_out.push(EltRow { op, rows, cols, bytes_moved: op.bytes(rows, cols), time, check_err });
            tick();
        }
    }
    Ok(rows_out)
}

/// Row 0 of the output against a float64 computation of the same inputs.
fn check_elementwise(
    gpu: &Gpu,
    op: EltOp,
    cols: u64,
    x: &super::gpu::DevBuf,
    u: &super::gpu::DevBuf,
    w: &super::gpu::DevBuf,
    y: &super::gpu::DevBuf,
) -> Result<f64, CalibrateError> {
    let c = cols as usize;
    let dec = |b: &[u8]| -> Vec<f64> { b.chunks(2).map(|p| Elem::Bf16.decode(p)).collect() };
    let xs = dec(&gpu.read_bytes(x.ptr, c * 2)?);
    let ys = dec(&gpu.read_bytes(y.ptr, c * 2)?);
    let want: Vec<f64> = match op {
        EltOp::RmsNorm => {
            let ws = dec(&gpu.read_bytes(w.ptr, c * 2)?);
            let rms = (xs.iter().map(|v| v * v).sum::<f64>() / c as f64 + 1e-6).sqrt();
            xs.iter().zip(&ws).map(|(a, g)| a / rms * g).collect()
        }
        EltOp::SiluMul => {
            let us = dec(&gpu.read_bytes(u.ptr, c * 2)?);
            xs.iter().zip(&us).map(|(g, v)| g / (1.0 + (-g).exp()) * v).collect()
        }
        EltOp::Softmax => {
            let m = xs.iter().cloned().fold(f64::MIN, f64::max);
            let s: f64 = xs.iter().map(|v| (v - m).exp()).sum();
            xs.iter().map(|v| (v - m).exp() / s).collect()
        }
    };
    let scale = want.iter().map(|v| v.abs()).fold(0.0, f64::max).max(1e-30);
    let err = ys.iter().zip(&want).map(|(g, w)| (g - w).abs() / scale).fold(0.0, f64::max);
    Ok(if err.is_nan() { f64::INFINITY } else { err })
}

#[derive(Debug, Clone)]
pub struct LaunchRow {
    pub what: &'static str,
    pub time: Percentiles,
}

/// Launch overhead: back-to-back empty kernels (device-side time per launch, event-timed), and
/// the host round trip of one launch plus `cuStreamSynchronize` (wall clock).
pub fn launch(gpu: &Gpu, n: usize) -> Result<Vec<LaunchRow>, CalibrateError> {
    let f = gpu.function(Kernel::Empty)?;
    let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 };
    let r = Reps { warmup: 100, reps: 30, min_batch_s: 2e-3, max_iters: 10_000, settle_s: 0.0 };
    let t = time_op(&gpu.ctx, &gpu.stream, r, || {
        unsafe { gpu.stream.launch_builder(&f).launch(cfg)? };
        Ok(())
    })?;
    let back_to_back = Percentiles::of(&t).ok_or_else(|| CalibrateError::Check { what: "launch".into(), detail: "no valid timings".into() })?;
    let mut wall = Vec::with_capacity(n);
    for i in 0..n + 20 {
        let t0 = std::time::Instant::now();
        unsafe { gpu.stream.launch_builder(&f).launch(cfg)? };
        gpu.stream.synchronize()?;
        if i >= 20 {
            wall.push(t0.elapsed().as_secs_f64());
        }
    }
    let sync = Percentiles::of(&wall).ok_or_else(|| CalibrateError::Check { what: "launch".into(), detail: "no valid timings".into() })?;
    let mut empty_sync = Vec::with_capacity(n);
    for _ in 0..n {
        let t0 = std::time::Instant::now();
        gpu.stream.synchronize()?;
        empty_sync.push(t0.elapsed().as_secs_f64());
    }
    let idle_sync = Percentiles::of(&empty_sync).ok_or_else(|| CalibrateError::Check { what: "launch".into(), detail: "no valid timings".into() })?;
    Ok(vec![
        LaunchRow { what: "kernel_launch_back_to_back", time: back_to_back },
        LaunchRow { what: "launch_and_synchronize", time: sync },
        LaunchRow { what: "synchronize_idle_stream", time: idle_sync },
    ])
}
