//! NCCL collectives over the GPUs of this node, and P2P copies between pairs.
//!
//! One thread drives every GPU of a group (`ncclCommInitAll`, each operation issued for all ranks
//! between `ncclGroupStart`/`ncclGroupEnd`), as nccl-tests does with `-g N`. Sizes and bandwidths
//! follow nccl-tests' definitions (doc/PERFORMANCE.md there):
//! - size: all_reduce, reduce_scatter (input), all_gather (output), all_to_all (per-rank send
//!   buffer) and send_recv: the number of bytes in the buffer the test names;
//! - algbw = size / time; busbw = algbw * factor, with factor 2(n-1)/n for all_reduce, (n-1)/n for
//!   all_gather, reduce_scatter and all_to_all, 1 for send_recv.
//!
//! Time is the largest over ranks of the event-timed span, divided by the operations in it.

use std::ffi::c_void;

use cudarc::driver::sys as dsys;
use cudarc::nccl::{result as nres, sys as nsys};

use super::gpu::{DevBuf, Elem, Gpu, Reps, Timer};
use super::stats::Percentiles;
use super::CalibrateError;
use gpuplan_core::hardware::profile::CollectiveOp;

#[derive(Debug, Clone)]
pub struct CollRow {
    pub op: CollectiveOp,
    pub n_ranks: u32,
    pub size_bytes: u64,
    /// Seconds per operation.
    pub time: Percentiles,
}

impl CollRow {
    pub fn algbw(&self, t: f64) -> f64 {
        self.size_bytes as f64 / t
    }
    pub fn busbw(&self, t: f64) -> f64 {
        self.algbw(t) * self.op.busbw_factor(self.n_ranks)
    }
}

#[derive(Debug, Clone)]
pub struct P2pRow {
    pub src: usize,
    pub dst: usize,
    pub peer_access: bool,
    pub size_bytes: u64,
    pub time: Percentiles,
}

fn nccl_err(e: nres::NcclError) -> CalibrateError {
    CalibrateError::Nccl(format!("{e:?}"))
}

pub fn nccl_version() -> Option<String> {
    nres::get_nccl_version().ok().map(|v| format!("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100))
}

/// Communicators for a group of GPUs (indices into `gpus`), with send/recv buffers of `max_bytes`.
pub struct Group<'g> {
    pub members: Vec<&'g Gpu>,
    comms: Vec<nsys::ncclComm_t>,
    send: Vec<DevBuf>,
    recv: Vec<DevBuf>,
}

impl Drop for Group<'_> {
    fn drop(&mut self) {
        for (g, c) in self.members.iter().zip(&self.comms) {
            let _ = g.stream.synchronize();
            unsafe {
                let _ = nres::comm_destroy(*c);
            }
        }
    }
}

impl<'g> Group<'g> {
    pub fn new(members: Vec<&'g Gpu>, max_bytes: usize, seed: u32) -> Result<Group<'g>, CalibrateError> {
        // NVLink multicast (NVLS) stays off: it can take a shared host's GPUs out of service.
        std::env::set_var("NCCL_NVLS_ENABLE", "0");
        let ordinals: Vec<i32> = members.iter().map(|g| g.ordinal as i32).collect();
        let mut comms = vec![std::ptr::null_mut(); members.len()];
        unsafe { nres::comm_init_all(comms.as_mut_ptr(), members.len() as i32, ordinals.as_ptr()) }.map_err(nccl_err)?;
        let mut send = Vec::new();
        let mut recv = Vec::new();
        for (r, g) in members.iter().enumerate() {
            let s = g.alloc(max_bytes)?;
            let d = g.alloc(max_bytes)?;
            g.fill_random(&s, Elem::Bf16, seed + r as u32, 1.0)?;
            g.fill_random(&d, Elem::Bf16, seed + 100 + r as u32, 1.0)?;
            send.push(s);
            recv.push(d);
        }
        Ok(Group { members, comms, send, recv })
    }

    fn n(&self) -> usize {
        self.members.len()
    }

    /// Enqueue one `op` of `size` bytes (bf16) on every rank.
    fn issue(&self, op: CollectiveOp, size: u64) -> Result<(), CalibrateError> {
        let n = self.n();
        let bf16 = nsys::ncclDataType_t::ncclBfloat16;
        let sum = nsys::ncclRedOp_t::ncclSum;
        nres::group_start().map_err(nccl_err)?;
        for r in 0..n {
            let g = self.members[r];
            let stream = g.stream.cu_stream() as nsys::cudaStream_t;
            let (s, d) = (self.send[r].ptr as *const c_void, self.recv[r].ptr as *mut c_void);
            let comm = self.comms[r];
            let count = (size / 2) as usize;
            unsafe {
                match op {
                    CollectiveOp::AllReduce => nres::all_reduce(s, d, count, bf16, sum, comm, stream),
                    CollectiveOp::AllGather => nres::all_gather(s, d, count / n, bf16, comm, stream),
                    CollectiveOp::ReduceScatter => nres::reduce_scatter(s, d, count / n, bf16, sum, comm, stream),
                    CollectiveOp::AllToAll => {
                        let chunk = count / n;
                        let mut res = Ok(nres::NcclStatus::Success);
                        for p in 0..n {
                            let off = (p * chunk * 2) as u64;
                            res = nres::send((self.send[r].ptr + off) as *const c_void, chunk, bf16, p as i32, comm, stream);
                            if res.is_err() {
                                break;
                            }
                            res = nres::recv((self.recv[r].ptr + off) as *mut c_void, chunk, bf16, p as i32, comm, stream);
                            if res.is_err() {
                                break;
                            }
                        }
                        res
                    }
                    CollectiveOp::SendRecv => {
                        let to = ((r + 1) % n) as i32;
                        let from = ((r + n - 1) % n) as i32;
                        nres::send(s, count, bf16, to, comm, stream).and_then(|_| nres::recv(d, count, bf16, from, comm, stream))
                    }
                }
            }
            .map_err(nccl_err)?;
        }
        nres::group_end().map_err(nccl_err)?;
        Ok(())
    }

    fn sync_all(&self) -> Result<(), CalibrateError> {
        for g in &self.members {
            g.stream.synchronize()?;
        }
        Ok(())
    }

    /// Can `op` run at `size` on this group (counts divide evenly, at least one element a rank)?
    pub fn valid_size(&self, op: CollectiveOp, size: u64) -> bool {
        let n = self.n() as u64;
        let elems = size / 2;
        size.is_multiple_of(2)
            && match op {
                CollectiveOp::AllReduce | CollectiveOp::SendRecv => elems >= 1,
                _ => elems >= n && elems.is_multiple_of(n),
            }
    }

    pub fn measure(&self, op: CollectiveOp, size: u64, r: Reps) -> Result<CollRow, CalibrateError> {
        let timers: Vec<Timer> = self.members.iter().map(|g| Timer::new(&g.ctx)).collect::<Result<_, _>>()?;
        for _ in 0..r.warmup.max(1) {
            self.issue(op, size)?;
        }
        self.sync_all()?;
        let span = |iters: usize| -> Result<f64, CalibrateError> {
            for (g, t) in self.members.iter().zip(&timers) {
                t.start(&g.stream)?;
            }
            for _ in 0..iters {
                self.issue(op, size)?;
            }
            for (g, t) in self.members.iter().zip(&timers) {
                t.stop(&g.stream)?;
            }
            let mut worst: f64 = 0.0;
            for t in &timers {
                worst = worst.max(t.seconds()?);
            }
            Ok(worst / iters as f64)
        };
        let one = span(1)?.max(1e-7);
        let iters = ((r.min_batch_s / one).ceil() as usize).clamp(1, r.max_iters.max(1));
        let mut samples = Vec::with_capacity(r.reps);
        for _ in 0..r.reps {
            samples.push(span(iters)?);
        }
        let time = Percentiles::of(&samples).ok_or_else(|| CalibrateError::Check { what: op.name().into(), detail: "no valid timings".into() })?;
        Ok(CollRow { op, n_ranks: self.n() as u32, size_bytes: size, time })
    }

    /// All-reduce `elems` bf16 values and compare a prefix with the host-side sum.
    pub fn check_all_reduce(&self, elems: usize) -> Result<f64, CalibrateError> {
        let size = (elems * 2) as u64;
        self.issue(CollectiveOp::AllReduce, size)?;
        self.sync_all()?;
        let k = elems.min(4096);
        let mut want = vec![0f64; k];
        for (r, g) in self.members.iter().enumerate() {
            let b = g.read_bytes(self.send[r].ptr, k * 2)?;
            for (i, w) in want.iter_mut().enumerate() {
                *w += Elem::Bf16.decode(&b[i * 2..]);
            }
        }
        let mut worst: f64 = 0.0;
        for (r, g) in self.members.iter().enumerate() {
            let b = g.read_bytes(self.recv[r].ptr, k * 2)?;
            for (i, w) in want.iter().enumerate() {
                let got = Elem::Bf16.decode(&b[i * 2..]);
                let err = (got - w).abs() / (self.n() as f64);
                worst = worst.max(if err.is_nan() { f64::INFINITY } else { err });
            }
        }
        Ok(worst)
    }
}

/// Sizes from `lo` to `hi` bytes, multiplying by `step`.
pub fn sizes(lo: u64, hi: u64, step: u64) -> Vec<u64> {
    let mut v = Vec::new();
    let mut s = lo;
    while s <= hi {
        v.push(s);
        s *= step;
    }
    v
}

/// Copy `size` bytes from `src` to `dst` GPU, timed on the source's stream.
pub fn p2p(src: &Gpu, dst: &Gpu, sizes: &[u64], r: Reps) -> Result<Vec<P2pRow>, CalibrateError> {
    let max = *sizes.iter().max().unwrap_or(&1) as usize;
    let mut can = 0i32;
    unsafe { dsys::cuDeviceCanAccessPeer(&mut can, src.ctx.cu_device(), dst.ctx.cu_device()) }.result()?;
    if can == 1 {
        src.ctx.bind_to_thread()?;
        let res = unsafe { dsys::cuCtxEnablePeerAccess(dst.ctx.cu_ctx(), 0) };
        if res != dsys::cudaError_enum::CUDA_SUCCESS && res != dsys::cudaError_enum::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
            res.result()?;
        }
    }
    let a = src.alloc(max)?;
    let b = dst.alloc(max)?;
    src.fill_random(&a, Elem::F32, 7, 1.0)?;
    let mut rows = Vec::new();
    for &size in sizes {
        let t = super::gpu::time_op(&src.ctx, &src.stream, r, || {
            unsafe {
                cudarc::driver::result::memcpy_peer_async(dst.ctx.cu_ctx(), b.ptr, src.ctx.cu_ctx(), a.ptr, size as usize, src.stream.cu_stream())?;
            }
            Ok(())
        })?;
        let time = Percentiles::of(&t).ok_or_else(|| CalibrateError::Check { what: "p2p".into(), detail: "no valid timings".into() })?;
        rows.push(P2pRow { src: src.ordinal, dst: dst.ordinal, peer_access: can == 1, size_bytes: size, time });
    }
    // Check: the last copy's first bytes arrived.
    src.stream.synchronize()?;
    let n = (max.min(4096)) & !3;
    if src.read_bytes(a.ptr, n)? != dst.read_bytes(b.ptr, n)? {
        return Err(CalibrateError::Check { what: format!("p2p {} -> {}", src.ordinal, dst.ordinal), detail: "copied bytes differ".into() });
    }
    Ok(rows)
}
