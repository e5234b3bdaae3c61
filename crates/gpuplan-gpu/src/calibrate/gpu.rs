//! One GPU as the benchmarks see it: context, stream, raw device buffers, the embedded kernels
//! (compiled by NVRTC for this GPU's architecture) and event timing.
//!
//! Buffers are raw `cuMemAlloc` pointers rather than `CudaSlice`s so that no per-launch event
//! tracking sits inside the timed loops.

use std::sync::Arc;

use cudarc::driver::{result as dres, sys, CudaContext, CudaFunction, CudaModule, CudaStream, LaunchConfig, PushKernelArg};

use super::CalibrateError;

/// The CUDA sources, embedded at build time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelSource {
    /// Random fills per dtype (`kernels/init.cu`).
    Init,
    /// HBM read, write, copy and the empty kernel (`kernels/hbm.cu`).
    Hbm,
    /// RMSNorm, SiLU*mul and softmax in bf16 (`kernels/elementwise.cu`).
    Elementwise,
}

impl KernelSource {
    pub const ALL: [KernelSource; 3] = [KernelSource::Init, KernelSource::Hbm, KernelSource::Elementwise];
    pub fn source(self) -> &'static str {
        match self {
            KernelSource::Init => include_str!("../../kernels/init.cu"),
            KernelSource::Hbm => include_str!("../../kernels/hbm.cu"),
            KernelSource::Elementwise => include_str!("../../kernels/elementwise.cu"),
        }
    }
    pub fn file(self) -> &'static str {
        match self {
            KernelSource::Init => "kernels/init.cu",
            KernelSource::Hbm => "kernels/hbm.cu",
            KernelSource::Elementwise => "kernels/elementwise.cu",
        }
    }
}

/// Every kernel the benchmarks launch, with the source it lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kernel {
    FillF32,
    FillBf16,
    FillF16,
    FillE4m3,
    HbmRead,
    HbmWrite,
    HbmCopy,
    Empty,
    RmsNormBf16,
    SiluMulBf16,
    SoftmaxBf16,
}

impl Kernel {
    pub const ALL: [Kernel; 11] = [
        Kernel::FillF32,
        Kernel::FillBf16,
        Kernel::FillF16,
        Kernel::FillE4m3,
        Kernel::HbmRead,
        Kernel::HbmWrite,
        Kernel::HbmCopy,
        Kernel::Empty,
        Kernel::RmsNormBf16,
        Kernel::SiluMulBf16,
        Kernel::SoftmaxBf16,
    ];
    pub fn symbol(self) -> &'static str {
        match self {
            Kernel::FillF32 => "fill_f32",
            Kernel::FillBf16 => "fill_bf16",
            Kernel::FillF16 => "fill_f16",
            Kernel::FillE4m3 => "fill_e4m3",
            Kernel::HbmRead => "hbm_read",
            Kernel::HbmWrite => "hbm_write",
            Kernel::HbmCopy => "hbm_copy",
            Kernel::Empty => "empty_kernel",
            Kernel::RmsNormBf16 => "rmsnorm_bf16",
            Kernel::SiluMulBf16 => "silu_mul_bf16",
            Kernel::SoftmaxBf16 => "softmax_bf16",
        }
    }
    pub fn source(self) -> KernelSource {
        match self {
            Kernel::FillF32 | Kernel::FillBf16 | Kernel::FillF16 | Kernel::FillE4m3 => KernelSource::Init,
            Kernel::HbmRead | Kernel::HbmWrite | Kernel::HbmCopy | Kernel::Empty => KernelSource::Hbm,
            Kernel::RmsNormBf16 | Kernel::SiluMulBf16 | Kernel::SoftmaxBf16 => KernelSource::Elementwise,
        }
    }
}

/// A device allocation, freed on drop.
pub struct DevBuf {
    pub ptr: sys::CUdeviceptr,
    pub bytes: usize,
    ctx: Arc<CudaContext>,
}

impl DevBuf {
    pub fn ptr_at(&self, offset_bytes: usize) -> sys::CUdeviceptr {
        debug_assert!(offset_bytes <= self.bytes);
        self.ptr + offset_bytes as u64
    }
}

impl Drop for DevBuf {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            unsafe {
                let _ = dres::free_sync(self.ptr);
            }
        }
    }
}

/// Element types the fills know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Elem {
    F32,
    Bf16,
    F16,
    E4m3,
}

impl Elem {
    pub fn size(self) -> usize {
        match self {
            Elem::F32 => 4,
            Elem::Bf16 | Elem::F16 => 2,
            Elem::E4m3 => 1,
        }
    }
    fn fill_kernel(self) -> Kernel {
        match self {
            Elem::F32 => Kernel::FillF32,
            Elem::Bf16 => Kernel::FillBf16,
            Elem::F16 => Kernel::FillF16,
            Elem::E4m3 => Kernel::FillE4m3,
        }
    }
    /// Decode one element from its little-endian bytes (for the cheap host-side checks).
    pub fn decode(self, b: &[u8]) -> f64 {
        match self {
            Elem::F32 => f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            Elem::Bf16 => f64::from(f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16)),
            Elem::F16 => f16_to_f64(u16::from_le_bytes([b[0], b[1]])),
            Elem::E4m3 => e4m3_to_f64(b[0]),
        }
    }
}

pub fn f16_to_f64(h: u16) -> f64 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((h >> 10) & 0x1f);
    let man = f64::from(h & 0x3ff);
    match exp {
        0 => sign * man * 2f64.powi(-24),
        31 => {
            if man == 0.0 {
                sign * f64::INFINITY
            } else {
                f64::NAN
            }
        }
        e => sign * (1.0 + man / 1024.0) * 2f64.powi(e - 15),
    }
}

pub fn e4m3_to_f64(b: u8) -> f64 {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((b >> 3) & 0xf);
    let man = f64::from(b & 7);
    if exp == 0xf && b & 7 == 7 {
        return f64::NAN;
    }
    match exp {
        0 => sign * man / 8.0 * 2f64.powi(-6),
        e => sign * (1.0 + man / 8.0) * 2f64.powi(e - 7),
    }
}

pub struct Gpu {
    pub ordinal: usize,
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub name: String,
    pub uuid: String,
    pub cc: (i32, i32),
    pub n_sms: u32,
    pub l2_bytes: u64,
    pub total_mem: u64,
    modules: Vec<(KernelSource, Arc<CudaModule>)>,
}

fn uuid_string(u: &sys::CUuuid) -> String {
    let b: Vec<u8> = u.bytes.iter().map(|&c| c as u8).collect();
    let hex: Vec<String> = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("GPU-{}-{}-{}-{}-{}", hex[0..4].concat(), hex[4..6].concat(), hex[6..8].concat(), hex[8..10].concat(), hex[10..16].concat())
}

impl Gpu {
    /// Open device `ordinal`, make a stream and compile the kernels for its architecture.
    pub fn open(ordinal: usize) -> Result<Gpu, CalibrateError> {
        let ctx = CudaContext::new(ordinal)?;
        // The benchmarks use raw pointers on one stream per GPU: no automatic event tracking.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream()?;
        let name = ctx.name()?;
        let uuid = uuid_string(&ctx.uuid()?);
        let cc = ctx.compute_capability()?;
        let n_sms = ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
        let l2_bytes = ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as u64;
        let total_mem = ctx.total_mem()? as u64;
        let mut gpu = Gpu { ordinal, ctx, stream, name, uuid, cc, n_sms, l2_bytes, total_mem, modules: Vec::new() };
        gpu.compile()?;
        Ok(gpu)
    }

    fn compile(&mut self) -> Result<(), CalibrateError> {
        // PTX for this GPU's virtual architecture; the driver compiles it to its machine code.
        let arch: &'static str = Box::leak(format!("compute_{}{}", self.cc.0, self.cc.1).into_boxed_str());
        for src in KernelSource::ALL {
            let opts = cudarc::nvrtc::CompileOptions { arch: Some(arch), options: vec!["-std=c++17".into()], ..Default::default() };
            let ptx =
                cudarc::nvrtc::compile_ptx_with_opts(src.source(), opts).map_err(|e| CalibrateError::Compile { file: src.file(), detail: e.to_string() })?;
            let module = self.ctx.load_module(ptx)?;
            self.modules.push((src, module));
        }
        Ok(())
    }

    pub fn function(&self, k: Kernel) -> Result<CudaFunction, CalibrateError> {
        let m = self
            .modules
            .iter()
            .find(|(s, _)| *s == k.source())
            .map(|(_, m)| m.clone())
            .ok_or(CalibrateError::Compile { file: k.source().file(), detail: "module not loaded".into() })?;
        Ok(m.load_function(k.symbol())?)
    }

    pub fn alloc(&self, bytes: usize) -> Result<DevBuf, CalibrateError> {
        self.ctx.bind_to_thread()?;
        let ptr = unsafe { dres::malloc_sync(bytes.max(256))? };
        Ok(DevBuf { ptr, bytes, ctx: self.ctx.clone() })
    }

    /// Fill `buf` with uniform random values of `elem` in [-scale, scale), seeded.
    pub fn fill_random(&self, buf: &DevBuf, elem: Elem, seed: u32, scale: f32) -> Result<(), CalibrateError> {
        let f = self.function(elem.fill_kernel())?;
        let n = (buf.bytes / elem.size()) as u64;
        let cfg = LaunchConfig { grid_dim: (self.n_sms * 8, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        unsafe {
            self.stream.launch_builder(&f).arg(&buf.ptr).arg(&n).arg(&seed).arg(&scale).launch(cfg)?;
        }
        self.stream.synchronize()?;
        Ok(())
    }

    pub fn read_bytes(&self, ptr: sys::CUdeviceptr, n: usize) -> Result<Vec<u8>, CalibrateError> {
        self.stream.synchronize()?;
        self.ctx.bind_to_thread()?;
        let mut v = vec![0u8; n];
        unsafe { dres::memcpy_dtoh_sync(&mut v, ptr)? };
        Ok(v)
    }

    pub fn write_bytes(&self, ptr: sys::CUdeviceptr, data: &[u8]) -> Result<(), CalibrateError> {
        self.stream.synchronize()?;
        self.ctx.bind_to_thread()?;
        unsafe { dres::memcpy_htod_sync(ptr, data)? };
        Ok(())
    }

    /// A grid that fills the GPU for grid-stride kernels.
    pub fn stream_grid(&self, n_items: u64, block: u32) -> LaunchConfig {
        let max_blocks = u64::from(self.n_sms) * 4;
        let blocks = n_items.div_ceil(u64::from(block)).clamp(1, max_blocks) as u32;
        LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (block, 1, 1), shared_mem_bytes: 0 }
    }
}

/// Seconds between two timing events recorded on `stream` around `iters` calls of `body`.
pub struct Timer {
    start: cudarc::driver::CudaEvent,
    end: cudarc::driver::CudaEvent,
}

impl Timer {
    pub fn new(ctx: &Arc<CudaContext>) -> Result<Timer, CalibrateError> {
        let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        Ok(Timer { start: ctx.new_event(flags)?, end: ctx.new_event(flags)? })
    }
    pub fn start(&self, stream: &CudaStream) -> Result<(), CalibrateError> {
        Ok(self.start.record(stream)?)
    }
    pub fn stop(&self, stream: &CudaStream) -> Result<(), CalibrateError> {
        Ok(self.end.record(stream)?)
    }
    /// Waits for the end event; returns seconds.
    pub fn seconds(&self) -> Result<f64, CalibrateError> {
        let ms = self.start.elapsed_ms(&self.end)?;
        Ok(f64::from(ms) * 1e-3)
    }
}

/// How long to warm up and how many timed repetitions to take.
#[derive(Debug, Clone, Copy)]
pub struct Reps {
    pub warmup: usize,
    pub reps: usize,
    /// Each repetition runs the body enough times to last about this long (seconds), so that
    /// launch gaps and event resolution do not dominate small operations.
    pub min_batch_s: f64,
    pub max_iters: usize,
    /// Seconds of untimed back-to-back runs between warm-up and timing, so that the power
    /// controller settles at this operation's own sustained clock (under the power cap a GEMM
    /// that follows a hungrier one starts at that one's lower clock and climbs for tens of ms).
    pub settle_s: f64,
}

/// Time `body` (which enqueues one operation on `stream`): warm up, size a batch, then `reps`
/// batches; returns seconds per operation for each batch.
pub fn time_op(
    gpu_ctx: &Arc<CudaContext>,
    stream: &CudaStream,
    r: Reps,
    mut body: impl FnMut() -> Result<(), CalibrateError>,
) -> Result<Vec<f64>, CalibrateError> {
    let timer = Timer::new(gpu_ctx)?;
    for _ in 0..r.warmup.max(1) {
        body()?;
    }
    // One timed op to size the batch.
    timer.start(stream)?;
    body()?;
    timer.stop(stream)?;
    let one = timer.seconds()?.max(1e-7);
    let iters = ((r.min_batch_s / one).ceil() as usize).clamp(1, r.max_iters.max(1));
    if r.settle_s > 0.0 {
        let n = ((r.settle_s / one).ceil() as usize).min(1_000_000);
        timer.start(stream)?;
        for _ in 0..n {
            body()?;
        }
        timer.stop(stream)?;
        timer.seconds()?; // waits for the settle runs to finish
    }
    let mut out = Vec::with_capacity(r.reps);
    for _ in 0..r.reps {
        timer.start(stream)?;
        for _ in 0..iters {
            body()?;
        }
        timer.stop(stream)?;
        out.push(timer.seconds()? / iters as f64);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoders_match_known_values() {
        assert_eq!(Elem::Bf16.decode(&0x3f80u16.to_le_bytes()), 1.0);
        assert_eq!(f16_to_f64(0x3c00), 1.0);
        assert_eq!(f16_to_f64(0xc000), -2.0);
        assert_eq!(f16_to_f64(0x0001), 2f64.powi(-24));
        assert_eq!(e4m3_to_f64(0x38), 1.0); // exp 7, man 0
        assert_eq!(e4m3_to_f64(0xb8), -1.0);
        assert_eq!(e4m3_to_f64(0x7e), 448.0);
        assert!(e4m3_to_f64(0x7f).is_nan());
    }

    #[test]
    fn every_kernel_symbol_is_in_its_source() {
        for k in Kernel::ALL {
            assert!(k.source().source().contains(&format!("void {}(", k.symbol())), "{k:?}");
        }
    }
}
