//! GEMM through cuBLASLt: `C[m,n] = A[m,k] B[k,n]`, "TN" in cuBLAS's column-major terms (A stored
//! k x m, B stored k x n, both with k contiguous; the layout FP8 requires, used for every dtype so
//! the grid compares like with like). FLOPs = 2 m n k.
//!
//! For each shape the top heuristic algorithms (up to `n_algos`) are each timed briefly and the
//! fastest is then measured; `calibrate` asks for one (the heuristic's choice, as PyTorch makes it:
//! see `GEMM_ALGOS`).
//!
//! A strided batch (`batch` > 1, for [`super::attention`]) runs `batch` such GEMMs in one call:
//! the operands of batch element `b` start `b * m * k`, `b * k * n` and `b * m * n` elements in
//! (packed back to back), set through `CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT` (int32) and
//! `CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET` (int64, in elements) on all three layouts.
//! With `batch` = 1 neither attribute is set: the plain GEMM path is what it always was.

use std::ffi::c_void;

use cudarc::cublaslt::sys as lt;

use super::gpu::{time_op, DevBuf, Elem, Gpu, Reps};
use super::stats::Percentiles;
use super::CalibrateError;
use gpuplan_core::hardware::Dtype;

/// cuBLASLt workspace (what PyTorch allows on Hopper).
pub const WORKSPACE_BYTES: usize = 32 << 20;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GemmShape {
    pub m: u64,
    pub n: u64,
    pub k: u64,
}

impl GemmShape {
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64
    }
}

#[derive(Debug, Clone)]
pub struct GemmRow {
    pub dtype: Dtype,
    pub shape: GemmShape,
    /// Seconds per GEMM.
    pub time: Percentiles,
    pub sm_clock_mhz: Option<f64>,
    /// cuBLASLt's own estimate of waves for the chosen algorithm.
    pub waves: f32,
    /// Index of the chosen algorithm among the heuristic's list (0 = its first choice).
    pub algo_index: usize,
    /// Largest relative error of the sampled output elements against a float64 dot product.
    pub check_rel_err: f64,
}

/// One timed (batched) GEMM: what [`Gemm::measure_batched`] returns.
#[derive(Debug, Clone)]
pub struct Timed {
    /// Seconds per call (the whole batch).
    pub time: Percentiles,
    pub sm_clock_mhz: Option<f64>,
    /// cuBLASLt's own estimate of waves for the chosen algorithm.
    pub waves: f32,
    /// Index of the chosen algorithm among the heuristic's list (0 = its first choice).
    pub algo_index: usize,
    /// Largest relative error of the sampled output elements against a float64 dot product.
    pub check_rel_err: f64,
}

struct Types {
    ab: lt::cudaDataType_t,
    cd: lt::cudaDataType_t,
    compute: lt::cublasComputeType_t,
    in_elem: Elem,
    out_elem: Elem,
}

fn types(dtype: Dtype) -> Option<Types> {
    use lt::cublasComputeType_t::*;
    use lt::cudaDataType_t::*;
    Some(match dtype {
        Dtype::Bf16 => Types { ab: CUDA_R_16BF, cd: CUDA_R_16BF, compute: CUBLAS_COMPUTE_32F, in_elem: Elem::Bf16, out_elem: Elem::Bf16 },
        Dtype::Fp16 => Types { ab: CUDA_R_16F, cd: CUDA_R_16F, compute: CUBLAS_COMPUTE_32F, in_elem: Elem::F16, out_elem: Elem::F16 },
        Dtype::Tf32 => Types { ab: CUDA_R_32F, cd: CUDA_R_32F, compute: CUBLAS_COMPUTE_32F_FAST_TF32, in_elem: Elem::F32, out_elem: Elem::F32 },
        Dtype::Fp8 => Types { ab: CUDA_R_8F_E4M3, cd: CUDA_R_16BF, compute: CUBLAS_COMPUTE_32F, in_elem: Elem::E4m3, out_elem: Elem::Bf16 },
        _ => return None,
    })
}

fn check(st: lt::cublasStatus_t) -> Result<(), CalibrateError> {
    if st == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(CalibrateError::Cublas(format!("{st:?}")))
    }
}

pub struct Gemm<'g> {
    gpu: &'g Gpu,
    handle: lt::cublasLtHandle_t,
    workspace: DevBuf,
}

impl Drop for Gemm<'_> {
    fn drop(&mut self) {
        unsafe {
            let _ = lt::cublasLtDestroy(self.handle);
        }
    }
}

struct Plan {
    desc: lt::cublasLtMatmulDesc_t,
    a: lt::cublasLtMatrixLayout_t,
    b: lt::cublasLtMatrixLayout_t,
    c: lt::cublasLtMatrixLayout_t,
    algos: Vec<lt::cublasLtMatmulHeuristicResult_t>,
}

impl Drop for Plan {
    fn drop(&mut self) {
        unsafe {
            let _ = lt::cublasLtMatmulDescDestroy(self.desc);
            let _ = lt::cublasLtMatrixLayoutDestroy(self.a);
            let _ = lt::cublasLtMatrixLayoutDestroy(self.b);
            let _ = lt::cublasLtMatrixLayoutDestroy(self.c);
        }
    }
}

/// Buffers for one dtype, sized for the largest shape (or batch) of the grid.
pub struct Operands {
    pub dtype: Dtype,
    a: DevBuf,
    b: DevBuf,
    c: DevBuf,
}

impl<'g> Gemm<'g> {
    pub fn new(gpu: &'g Gpu) -> Result<Gemm<'g>, CalibrateError> {
        gpu.ctx.bind_to_thread()?;
        let mut handle = std::ptr::null_mut();
        check(unsafe { lt::cublasLtCreate(&mut handle) })?;
        let workspace = gpu.alloc(WORKSPACE_BYTES)?;
        Ok(Gemm { gpu, handle, workspace })
    }

    pub fn version() -> usize {
        unsafe { lt::cublasLtGetVersion() }
    }

    pub fn supports(dtype: Dtype, cc: (i32, i32)) -> bool {
        match dtype {
            Dtype::Fp8 => cc >= (8, 9),
            Dtype::Bf16 | Dtype::Tf32 => cc >= (8, 0),
            Dtype::Fp16 => true,
            _ => false,
        }
    }

    /// Allocate and randomly fill operands big enough for every shape in `shapes`.
    pub fn operands(&self, dtype: Dtype, shapes: &[GemmShape], seed: u32) -> Result<Operands, CalibrateError> {
        let batched: Vec<(GemmShape, u64)> = shapes.iter().map(|&s| (s, 1)).collect();
        self.batched_operands(dtype, &batched, seed)
    }

    /// Allocate and randomly fill operands big enough for every (shape, batch) in `shapes`.
    pub fn batched_operands(&self, dtype: Dtype, shapes: &[(GemmShape, u64)], seed: u32) -> Result<Operands, CalibrateError> {
        let t = types(dtype).ok_or_else(|| CalibrateError::Unsupported(format!("GEMM in `{}`", dtype.name())))?;
        let max_a = shapes.iter().map(|(s, b)| b * s.m * s.k).max().unwrap_or(1) as usize;
        let max_b = shapes.iter().map(|(s, b)| b * s.k * s.n).max().unwrap_or(1) as usize;
        let max_c = shapes.iter().map(|(s, b)| b * s.m * s.n).max().unwrap_or(1) as usize;
        let a = self.gpu.alloc(max_a * t.in_elem.size())?;
        let b = self.gpu.alloc(max_b * t.in_elem.size())?;
        let c = self.gpu.alloc(max_c * t.out_elem.size())?;
        // Values in [-1, 1): sums of k products stay far from overflow in every dtype.
        self.gpu.fill_random(&a, t.in_elem, seed, 1.0)?;
        self.gpu.fill_random(&b, t.in_elem, seed.wrapping_add(1), 1.0)?;
        self.gpu.fill_random(&c, t.out_elem, seed.wrapping_add(2), 1.0)?;
        Ok(Operands { dtype, a, b, c })
    }

    fn plan(&self, dtype: Dtype, s: GemmShape, batch: u64, n_algos: usize) -> Result<Plan, CalibrateError> {
        use lt::cublasLtMatmulDescAttributes_t::*;
        let t = types(dtype).ok_or_else(|| CalibrateError::Unsupported(format!("GEMM in `{}`", dtype.name())))?;
        unsafe {
            let mut desc = std::ptr::null_mut();
            check(lt::cublasLtMatmulDescCreate(&mut desc, t.compute, lt::cudaDataType_t::CUDA_R_32F))?;
            let ta: i32 = 1; // CUBLAS_OP_T
            let tb: i32 = 0; // CUBLAS_OP_N
            check(lt::cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta as *const _ as *const c_void, std::mem::size_of_val(&ta)))?;
            check(lt::cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb as *const _ as *const c_void, std::mem::size_of_val(&tb)))?;
            let mut a = std::ptr::null_mut();
            let mut b = std::ptr::null_mut();
            let mut c = std::ptr::null_mut();
            check(lt::cublasLtMatrixLayoutCreate(&mut a, t.ab, s.k, s.m, s.k as i64))?;
            check(lt::cublasLtMatrixLayoutCreate(&mut b, t.ab, s.k, s.n, s.k as i64))?;
            check(lt::cublasLtMatrixLayoutCreate(&mut c, t.cd, s.m, s.n, s.m as i64))?;
            // Owns the layouts from here on, so that every error path below destroys them.
            let mut plan = Plan { desc, a, b, c, algos: Vec::new() };
            if batch > 1 {
                let count = i32::try_from(batch).map_err(|_| CalibrateError::Unsupported(format!("a batch of {batch} GEMMs (cuBLASLt counts in int32)")))?;
                for (layout, stride) in [(a, s.m * s.k), (b, s.k * s.n), (c, s.m * s.n)] {
                    let stride = stride as i64;
                    check(lt::cublasLtMatrixLayoutSetAttribute(
                        layout,
                        lt::cublasLtMatrixLayoutAttribute_t::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                        &count as *const i32 as *const c_void,
                        std::mem::size_of::<i32>(),
                    ))?;
                    check(lt::cublasLtMatrixLayoutSetAttribute(
                        layout,
                        lt::cublasLtMatrixLayoutAttribute_t::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                        &stride as *const i64 as *const c_void,
                        std::mem::size_of::<i64>(),
                    ))?;
                }
            }
            let mut pref = std::ptr::null_mut();
            check(lt::cublasLtMatmulPreferenceCreate(&mut pref))?;
            let ws = WORKSPACE_BYTES as u64;
            check(lt::cublasLtMatmulPreferenceSetAttribute(
                pref,
                lt::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                &ws as *const _ as *const c_void,
                8,
            ))?;
            let mut results: Vec<lt::cublasLtMatmulHeuristicResult_t> = vec![std::mem::zeroed(); n_algos.max(1)];
            let mut got = 0;
            let st = lt::cublasLtMatmulAlgoGetHeuristic(self.handle, desc, a, b, c, c, pref, results.len() as i32, results.as_mut_ptr(), &mut got);
            let _ = lt::cublasLtMatmulPreferenceDestroy(pref);
            let none = || {
                CalibrateError::NoAlgorithm(format!(
                    "{} {}x{}x{}{}",
                    dtype.name(),
                    s.m,
                    s.n,
                    s.k,
                    if batch > 1 { format!(" x {batch}") } else { String::new() }
                ))
            };
            // NOT_SUPPORTED: no heuristic for this configuration at all.
            if st == lt::cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED {
                return Err(none());
            }
            check(st)?;
            results.truncate(got.max(0) as usize);
            results.retain(|r| r.state == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS);
            if results.is_empty() {
                return Err(none());
            }
            plan.algos = results;
            Ok(plan)
        }
    }

    fn launch(&self, plan: &Plan, algo: usize, ops: &Operands) -> Result<(), CalibrateError> {
        let alpha: f32 = 1.0;
        let beta: f32 = 0.0;
        let r = &plan.algos[algo];
        unsafe {
            check(lt::cublasLtMatmul(
                self.handle,
                plan.desc,
                &alpha as *const f32 as *const c_void,
                ops.a.ptr as *const c_void,
                plan.a,
                ops.b.ptr as *const c_void,
                plan.b,
                &beta as *const f32 as *const c_void,
                ops.c.ptr as *const c_void,
                plan.c,
                ops.c.ptr as *mut c_void,
                plan.c,
                &r.algo,
                self.workspace.ptr as *mut c_void,
                WORKSPACE_BYTES,
                self.gpu.stream.cu_stream() as lt::cudaStream_t,
            ))
        }
    }

    /// Measure one shape: try up to `n_algos` heuristic picks, time the fastest with `reps`.
    pub fn measure(&self, ops: &Operands, s: GemmShape, n_algos: usize, reps: Reps, sm_clock: &dyn Fn() -> Option<f64>) -> Result<GemmRow, CalibrateError> {
        let t = self.measure_batched(ops, s, 1, n_algos, reps, sm_clock)?;
        Ok(GemmRow {
            dtype: ops.dtype,
            shape: s,
            time: t.time,
            sm_clock_mhz: t.sm_clock_mhz,
            waves: t.waves,
            algo_index: t.algo_index,
            check_rel_err: t.check_rel_err,
        })
    }

    /// Measure a strided batch of `batch` GEMMs of shape `s` in one cuBLASLt call (`batch` = 1:
    /// one plain GEMM), as [`Gemm::measure`] does; times are per call.
    pub fn measure_batched(
        &self,
        ops: &Operands,
        s: GemmShape,
        batch: u64,
        n_algos: usize,
        reps: Reps,
        sm_clock: &dyn Fn() -> Option<f64>,
    ) -> Result<Timed, CalibrateError> {
        let plan = self.plan(ops.dtype, s, batch, n_algos)?;
        let mut best = (0usize, f64::INFINITY);
        if plan.algos.len() > 1 {
            let trial = Reps { warmup: 1, reps: 3, min_batch_s: reps.min_batch_s / 2.0, max_iters: reps.max_iters, settle_s: 0.0 };
            for i in 0..plan.algos.len() {
                let t = time_op(&self.gpu.ctx, &self.gpu.stream, trial, || self.launch(&plan, i, ops))?;
                let p = Percentiles::of(&t).map(|p| p.p50).unwrap_or(f64::INFINITY);
                if p < best.1 {
                    best = (i, p);
                }
            }
        }
        let algo = best.0;
        let mut clock = None;
        let mut times = Vec::new();
        // Read the clock while the timed batches run: enqueue, sample, then wait.
        let samples = time_op(&self.gpu.ctx, &self.gpu.stream, reps, || {
            let r = self.launch(&plan, algo, ops);
            if clock.is_none() && times.len() > 8 {
                clock = sm_clock();
            }
            times.push(());
            r
        })?;
        let time = Percentiles::of(&samples).ok_or_else(|| CalibrateError::Check { what: "gemm".into(), detail: "no valid timings".into() })?;
        let check_rel_err = self.check_output(ops, s, batch)?;
        if check_rel_err.is_nan() || check_rel_err >= 0.05 {
            let batched = if batch > 1 { format!(" x {batch}") } else { String::new() };
            return Err(CalibrateError::Check {
                what: format!("gemm {} {}x{}x{}{batched}", ops.dtype.name(), s.m, s.n, s.k),
                detail: format!("sampled outputs differ from a float64 reference by {check_rel_err:.3e} (relative)"),
            });
        }
        Ok(Timed { time, sm_clock_mhz: clock, waves: plan.algos[algo].wavesCount, algo_index: algo, check_rel_err })
    }

    /// Compare a few output elements with a float64 dot product of the same (decoded) inputs.
    /// Error is relative to the root-sum-square of the products (the natural scale of a sum of
    /// k random-signed terms), so it is meaningful even where the output is near zero. In a
    /// batch, the samples come from the first, last and two middle batch elements.
    fn check_output(&self, ops: &Operands, s: GemmShape, batch: u64) -> Result<f64, CalibrateError> {
        let t = types(ops.dtype).expect("checked in plan");
        let (ie, oe) = (t.in_elem.size(), t.out_elem.size());
        let mut worst: f64 = 0.0;
        let last = batch.max(1) - 1;
        let picks = [(0, 0, 0), (last, s.m - 1, s.n - 1), (batch / 2, s.m / 2, s.n / 3), (batch / 3, s.m / 3 + 1, s.n / 2 + 1)];
        for (bi, i, j) in picks {
            // Clamped for tiny dimensions (decode-like GEMMs with m = 1).
            let (i, j) = (i.min(s.m - 1), j.min(s.n - 1));
            let arow = self.gpu.read_bytes(ops.a.ptr_at((bi * s.m * s.k + i * s.k) as usize * ie), s.k as usize * ie)?;
            let bcol = self.gpu.read_bytes(ops.b.ptr_at((bi * s.k * s.n + j * s.k) as usize * ie), s.k as usize * ie)?;
            let c = self.gpu.read_bytes(ops.c.ptr_at((bi * s.m * s.n + i + j * s.m) as usize * oe), oe)?;
            let (mut dot, mut rss) = (0.0f64, 0.0f64);
            for l in 0..s.k as usize {
                let p = t.in_elem.decode(&arow[l * ie..]) * t.in_elem.decode(&bcol[l * ie..]);
                dot += p;
                rss += p * p;
            }
            let got = t.out_elem.decode(&c);
            let err = (got - dot).abs() / (rss.sqrt() + dot.abs()).max(1e-30);
            worst = worst.max(if err.is_nan() { f64::INFINITY } else { err });
        }
        Ok(worst)
    }

    /// Run `shape` back to back, 16 at a time, until `until` (at least 16; power phases).
    /// Returns the number of GEMMs run.
    pub fn sustain(&self, ops: &Operands, s: GemmShape, until: std::time::Instant) -> Result<u64, CalibrateError> {
        let plan = self.plan(ops.dtype, s, 1, 1)?;
        let mut n = 0u64;
        loop {
            for _ in 0..16 {
                self.launch(&plan, 0, ops)?;
                n += 1;
            }
            self.gpu.stream.synchronize()?;
            if std::time::Instant::now() >= until {
                return Ok(n);
            }
        }
    }
}

/// The shapes an LLM layer produces: m = tokens, (n, k) = (out, in) features of the projections
/// of Llama-3-8B/70B-like models (QKV, O, gate/up, down), a non-multiple-of-128 pair, and the
/// reference 8192^3. The full grid's row counts cover serving's prefill chunks (128-2048 tokens)
/// at every doubling from 256: between two measured row counts the cost model interpolates the
/// measurements (`CostModel::gemm_efficiency`), and a 2048/512 gap priced an 8B model's
/// 768-1024-token prefill 5-8% slow (calibration/runs/serve/FIT.md).
pub fn llm_shapes(quick: bool) -> Vec<GemmShape> {
    let ms: &[u64] = if quick { &[2048, 8192] } else { &[256, 512, 1024, 2048, 8192, 16384] };
    let nks: &[(u64, u64)] = if quick {
        &[(6144, 4096), (4096, 14336), (28672, 8192), (5000, 4000)]
    } else {
        &[(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (10240, 8192), (28672, 8192), (8192, 28672), (5000, 4000), (1024, 8192)]
    };
    let mut out = vec![GemmShape { m: 8192, n: 8192, k: 8192 }];
    for &m in ms {
        for &(n, k) in nks {
            out.push(GemmShape { m, n, k });
        }
    }
    out
}

/// Wave quantization: m = k = 8192, n stepping across multiples of the tile width.
pub fn wave_shapes(quick: bool) -> Vec<GemmShape> {
    // n = 8192 itself is the reference shape, measured first in `llm_shapes`.
    let ns: &[u64] = if quick { &[8064, 8320] } else { &[7936, 8064, 8128, 8200, 8256, 8320, 8448, 8704] };
    ns.iter().map(|&n| GemmShape { m: 8192, n, k: 8192 }).collect()
}
