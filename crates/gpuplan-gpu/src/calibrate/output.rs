//! From measurements to files: fits into the profile wire format, raw CSVs (unit-suffixed
//! headers), `meta.toml`, and the folder's README. The folder is written atomically by
//! `config::profile::write_profile_dir`.

use std::collections::BTreeMap;

use serde::Serialize;

use super::attention::{AttnRow, Product, Regime};
use super::collectives::{CollRow, P2pRow};
use super::fit;
use super::gemm::GemmRow;
use super::memory::{EltRow, LaunchRow, MemRow};
use super::nccl_tests::NcclTestsRun;
use super::power::{Phase, Sample};
use super::stats::Percentiles;
use super::Measurements;
use gpuplan_config::profile::{
    AttentionBmmWire, CollectiveWire, ElementwiseWire, GemmWire, L2Wire, P2pWire, PowerActivityWire, PowerPhaseWire, PowerWire, ProfileFile, StreamWire,
    SCHEMA_VERSION,
};
use gpuplan_core::hardware::profile::CollectiveOp;

/// Who ran what, where, when: the provenance of a profile.
#[derive(Debug, Clone, Serialize)]
pub struct Meta {
    pub name: String,
    pub command: String,
    pub date_utc: String,
    pub git_sha: String,
    pub gpuplan_version: String,
    pub host: String,
    pub mode: String,
    pub gpu_name: String,
    pub gpu_count: u32,
    pub gpu_uuids: Vec<String>,
    pub compute_capability: String,
    pub multiprocessors: u32,
    pub l2_bytes: u64,
    pub memory_bytes: u64,
    pub driver_version: String,
    pub cuda_driver_version: String,
    pub nvrtc_version: String,
    pub cublaslt_version: String,
    pub nccl_version: String,
    pub power_limit_w: f64,
    pub max_sm_clock_mhz: f64,
    pub max_mem_clock_mhz: f64,
    pub libraries: BTreeMap<String, String>,
    pub environment: BTreeMap<String, String>,
    pub wall_s: f64,
    pub notes: Vec<String>,
}

/// The text of `profile.toml`: a header line, then the profile.
pub fn profile_text(pf: &ProfileFile) -> String {
    format!("# gpuplan calibration profile, schema {SCHEMA_VERSION}. Written by `gpuplan calibrate`; see meta.toml and README.md beside it.\n{}", pf.to_toml())
}

/// A profile's default name from the GPU's name and count, in kebab case (`h200-2x`).
pub fn default_name(gpu: &str, n: u32) -> String {
    let base: String =
        gpu.to_ascii_lowercase().replace("nvidia", "").split(|c: char| !c.is_ascii_alphanumeric()).filter(|s| !s.is_empty()).collect::<Vec<_>>().join("-");
    format!("{base}-{n}x")
}

/// `s` quoted for a POSIX shell where it needs it, for the command line kept in `meta.toml`.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=,:".contains(c)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// A number written with `D` decimals (`{:.D}`), as the raw tables write times, rates and clocks.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Fixed<const D: usize>(f64);

impl<const D: usize> Serialize for Fixed<D> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("{:.*}", D, self.0))
    }
}

/// A number in scientific notation with two decimals (`{:.2e}`), as the check errors are written.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Sci2(f64);

impl Serialize for Sci2 {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("{:.2e}", self.0))
    }
}

/// p10, p50 and p90 of a time in microseconds, the `time_us_p10`, `time_us_p50`, `time_us_p90`
/// columns.
fn us(p: Percentiles) -> [Fixed<3>; 3] {
    [Fixed(p.p10 * 1e6), Fixed(p.p50 * 1e6), Fixed(p.p90 * 1e6)]
}

/// One table: a header row of the row struct's field names (unit-suffixed), then a row per
/// record. A table without records is its header alone.
pub(super) fn table<R: Serialize + Default>(rows: impl IntoIterator<Item = R>) -> Vec<u8> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let mut empty = true;
    for r in rows {
        w.serialize(r).expect("in-memory csv");
        empty = false;
    }
    if empty {
        // The csv writer takes the header from the first record: write a default one, keep the header.
        w.serialize(R::default()).expect("in-memory csv");
        let mut bytes = w.into_inner().expect("in-memory csv");
        let end = bytes.iter().position(|&b| b == b'\n').map_or(bytes.len(), |i| i + 1);
        bytes.truncate(end);
        return bytes;
    }
    w.into_inner().expect("in-memory csv")
}

/// A row of `launch.csv`.
#[derive(Debug, Default, Serialize)]
struct LaunchCsv {
    what: &'static str,
    time_us_p10: Fixed<3>,
    time_us_p50: Fixed<3>,
    time_us_p90: Fixed<3>,
}

impl From<&LaunchRow> for LaunchCsv {
    fn from(r: &LaunchRow) -> Self {
        let [time_us_p10, time_us_p50, time_us_p90] = us(r.time);
        LaunchCsv { what: r.what, time_us_p10, time_us_p50, time_us_p90 }
    }
}

/// A row of `hbm.csv`.
#[derive(Debug, Default, Serialize)]
struct HbmCsv {
    kernel: &'static str,
    size_bytes: u64,
    bytes_moved: u64,
    time_us_p10: Fixed<3>,
    time_us_p50: Fixed<3>,
    time_us_p90: Fixed<3>,
    bandwidth_gb_per_s_p50: Fixed<1>,
}

impl From<&MemRow> for HbmCsv {
    fn from(r: &MemRow) -> Self {
        let [time_us_p10, time_us_p50, time_us_p90] = us(r.time);
        HbmCsv {
            kernel: r.kernel.name(),
            size_bytes: r.size_bytes,
            bytes_moved: r.bytes_moved,
            time_us_p10,
            time_us_p50,
            time_us_p90,
            bandwidth_gb_per_s_p50: Fixed(r.bytes_moved as f64 / r.time.p50 / 1e9),
        }
    }
}

/// A row of `elementwise.csv`.
#[derive(Debug, Default, Serialize)]
struct ElementwiseCsv {
    op: &'static str,
    rows: u64,
    cols: u64,
    bytes_moved: u64,
    time_us_p10: Fixed<3>,
    time_us_p50: Fixed<3>,
    time_us_p90: Fixed<3>,
    bandwidth_gb_per_s_p50: Fixed<1>,
    check_max_rel_err: Sci2,
}

impl From<&EltRow> for ElementwiseCsv {
    fn from(r: &EltRow) -> Self {
        let [time_us_p10, time_us_p50, time_us_p90] = us(r.time);
        ElementwiseCsv {
            op: r.op.name(),
            rows: r.rows,
            cols: r.cols,
            bytes_moved: r.bytes_moved,
            time_us_p10,
            time_us_p50,
            time_us_p90,
            bandwidth_gb_per_s_p50: Fixed(r.bytes_moved as f64 / r.time.p50 / 1e9),
            check_max_rel_err: Sci2(r.check_err),
        }
    }
}

/// A row of `gemm.csv`; it ends with the columns of every timed cuBLASLt row (as `attention.csv`):
/// SM clock, waves, algorithm index, check error.
#[derive(Debug, Default, Serialize)]
struct GemmCsv {
    dtype: &'static str,
    m: u64,
    n: u64,
    k: u64,
    time_us_p10: Fixed<3>,
    time_us_p50: Fixed<3>,
    time_us_p90: Fixed<3>,
    tflops_p50: Fixed<1>,
    sm_clock_mhz: Option<Fixed<0>>,
    waves: Fixed<2>,
    algo_index: usize,
    check_max_rel_err: Sci2,
}

impl From<&GemmRow> for GemmCsv {
    fn from(r: &GemmRow) -> Self {
        let [time_us_p10, time_us_p50, time_us_p90] = us(r.time);
        GemmCsv {
            dtype: r.dtype.name(),
            m: r.shape.m,
            n: r.shape.n,
            k: r.shape.k,
            time_us_p10,
            time_us_p50,
            time_us_p90,
            tflops_p50: Fixed(r.shape.flops() / r.time.p50 / 1e12),
            sm_clock_mhz: r.sm_clock_mhz.map(Fixed),
            waves: Fixed(r.waves.into()),
            algo_index: r.algo_index,
            check_max_rel_err: Sci2(r.check_rel_err),
        }
    }
}

/// A row of `attention.csv`: one per (regime, product); times are per call (the whole batch),
/// `bytes_moved` is A + B read and C written once each. Ends with the timed cuBLASLt columns as
/// `gemm.csv`.
#[derive(Debug, Default, Serialize)]
struct AttentionCsv {
    regime: &'static str,
    product: &'static str,
    dtype: &'static str,
    batch: u64,
    seq_q: u64,
    seq_kv: u64,
    head_dim: u64,
    m: u64,
    n: u64,
    k: u64,
    time_us_p10: Fixed<3>,
    time_us_p50: Fixed<3>,
    time_us_p90: Fixed<3>,
    tflops_p50: Fixed<1>,
    bytes_moved: u64,
    bandwidth_gb_per_s_p50: Fixed<1>,
    sm_clock_mhz: Option<Fixed<0>>,
    waves: Fixed<2>,
    algo_index: usize,
    check_max_rel_err: Sci2,
}

impl From<&AttnRow> for AttentionCsv {
    fn from(r: &AttnRow) -> Self {
        let (c, s) = (r.case, r.shape());
        let [time_us_p10, time_us_p50, time_us_p90] = us(r.time);
        AttentionCsv {
            regime: c.regime.name(),
            product: r.product.name(),
            dtype: "bf16",
            batch: c.batch,
            seq_q: c.seq_q,
            seq_kv: c.seq_kv,
            head_dim: c.head_dim,
            m: s.m,
            n: s.n,
            k: s.k,
            time_us_p10,
            time_us_p50,
            time_us_p90,
            tflops_p50: Fixed(r.flops_per_s() / 1e12),
            bytes_moved: c.bytes(r.product),
            bandwidth_gb_per_s_p50: Fixed(r.bytes_per_s() / 1e9),
            sm_clock_mhz: r.sm_clock_mhz.map(Fixed),
            waves: Fixed(r.waves.into()),
            algo_index: r.algo_index,
            check_max_rel_err: Sci2(r.check_rel_err),
        }
    }
}

/// A row of `p2p.csv`.
#[derive(Debug, Default, Serialize)]
struct P2pCsv {
    src_gpu: usize,
    dst_gpu: usize,
    peer_access: bool,
    size_bytes: u64,
    time_us_p10: Fixed<3>,
    time_us_p50: Fixed<3>,
    time_us_p90: Fixed<3>,
    bandwidth_gb_per_s_p50: Fixed<2>,
}

impl From<&P2pRow> for P2pCsv {
    fn from(r: &P2pRow) -> Self {
        let [time_us_p10, time_us_p50, time_us_p90] = us(r.time);
        P2pCsv {
            src_gpu: r.src,
            dst_gpu: r.dst,
            peer_access: r.peer_access,
            size_bytes: r.size_bytes,
            time_us_p10,
            time_us_p50,
            time_us_p90,
            bandwidth_gb_per_s_p50: Fixed(r.size_bytes as f64 / r.time.p50 / 1e9),
        }
    }
}

/// A row of `collectives.csv`.
#[derive(Debug, Default, Serialize)]
struct CollectiveCsv {
    op: &'static str,
    n_ranks: u32,
    size_bytes: u64,
    dtype: &'static str,
    time_us_p10: Fixed<3>,
    time_us_p50: Fixed<3>,
    time_us_p90: Fixed<3>,
    algbw_gb_per_s_p50: Fixed<3>,
    busbw_gb_per_s_p50: Fixed<3>,
}

impl From<&CollRow> for CollectiveCsv {
    fn from(r: &CollRow) -> Self {
        let [time_us_p10, time_us_p50, time_us_p90] = us(r.time);
        CollectiveCsv {
            op: r.op.name(),
            n_ranks: r.n_ranks,
            size_bytes: r.size_bytes,
            dtype: "bf16",
            time_us_p10,
            time_us_p50,
            time_us_p90,
            algbw_gb_per_s_p50: Fixed(r.algbw(r.time.p50) / 1e9),
            busbw_gb_per_s_p50: Fixed(r.busbw(r.time.p50) / 1e9),
        }
    }
}

/// A row of `power.csv`: one load phase; also the columns of `power_node.csv` after its `gpu`.
#[derive(Debug, Default, Serialize)]
struct PhaseCsv {
    load: &'static str,
    duration_s: Fixed<2>,
    settled_samples: usize,
    power_w_mean: Fixed<1>,
    power_w_p10: Fixed<1>,
    power_w_p50: Fixed<1>,
    power_w_p90: Fixed<1>,
    sm_clock_mhz_mean: Fixed<0>,
    temperature_c_mean: Fixed<1>,
    gemm_tflops: Option<Fixed<1>>,
    hbm_gb_per_s: Option<Fixed<1>>,
}

impl From<&Phase> for PhaseCsv {
    fn from(p: &Phase) -> Self {
        PhaseCsv {
            load: p.load,
            duration_s: Fixed(p.duration_s),
            settled_samples: p.n_samples,
            power_w_mean: Fixed(p.power_w_mean),
            power_w_p10: Fixed(p.power_w.p10),
            power_w_p50: Fixed(p.power_w.p50),
            power_w_p90: Fixed(p.power_w.p90),
            sm_clock_mhz_mean: Fixed(p.sm_clock_mhz_mean),
            temperature_c_mean: Fixed(p.temperature_c_mean),
            gemm_tflops: p.gemm_tflops.map(Fixed),
            hbm_gb_per_s: p.hbm_gb_per_s.map(Fixed),
        }
    }
}

/// The first column of `power_node.csv` (a row is `(GpuCsv, PhaseCsv)`).
#[derive(Debug, Default, Serialize)]
struct GpuCsv {
    gpu: usize,
}

/// A row of `power_samples.csv`: one NVML sample.
#[derive(Debug, Default, Serialize)]
struct PowerSampleCsv {
    load: &'static str,
    time_s: Fixed<3>,
    power_w: Fixed<1>,
    sm_clock_mhz: Fixed<0>,
    temperature_c: Fixed<0>,
}

impl From<&Sample> for PowerSampleCsv {
    fn from(s: &Sample) -> Self {
        PowerSampleCsv {
            load: s.load,
            time_s: Fixed(s.t_s),
            power_w: Fixed(s.power_w),
            sm_clock_mhz: Fixed(s.sm_clock_mhz),
            temperature_c: Fixed(s.temperature_c),
        }
    }
}

/// Raw tables, one CSV each, named as they will be written.
pub fn csvs(m: &Measurements) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = Vec::new();
    let mut add = |name: &str, bytes: Vec<u8>| out.push((name.into(), bytes));
    if !m.launch.is_empty() {
        add("launch.csv", table(m.launch.iter().map(LaunchCsv::from)));
    }
    if !m.hbm.is_empty() {
        add("hbm.csv", table(m.hbm.iter().map(HbmCsv::from)));
    }
    if !m.elementwise.is_empty() {
        add("elementwise.csv", table(m.elementwise.iter().map(ElementwiseCsv::from)));
    }
    if !m.gemm.is_empty() {
        add("gemm.csv", table(m.gemm.iter().map(GemmCsv::from)));
    }
    if !m.attention.is_empty() {
        add("attention.csv", table(m.attention.iter().map(AttentionCsv::from)));
    }
    if !m.p2p.is_empty() {
        add("p2p.csv", table(m.p2p.iter().map(P2pCsv::from)));
    }
    if !m.collectives.is_empty() {
        add("collectives.csv", table(m.collectives.iter().map(CollectiveCsv::from)));
    }
    if !m.node_power.is_empty() {
        add("power_node.csv", table(m.node_power.iter().map(|(gpu, p)| (GpuCsv { gpu: *gpu }, PhaseCsv::from(p)))));
    }
    if !m.power_phases.is_empty() {
        add("power.csv", table(m.power_phases.iter().map(PhaseCsv::from)));
        add("power_samples.csv", table(m.power_samples.iter().map(PowerSampleCsv::from)));
    }
    out
}

/// The `attention_bmm` table: for each prefill (s, d) measured with both products, their FLOPs
/// over the sum of their median times (the two run back to back in attention, with equal FLOPs),
/// sorted by head_dim then seq_len. A case missing one product is left out with a note.
pub fn attention_table(rows: &[AttnRow]) -> (Vec<AttentionBmmWire>, Vec<String>) {
    let mut cases: BTreeMap<(u64, u64), [Option<&AttnRow>; 2]> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.case.regime == Regime::Prefill) {
        let slot = cases.entry((r.case.head_dim, r.case.seq_q)).or_default();
        slot[match r.product {
            Product::Qk => 0,
            Product::Pv => 1,
        }] = Some(r);
    }
    let mut out = Vec::new();
    let mut notes = Vec::new();
    for ((d, s), pair) in cases {
        let [Some(qk), Some(pv)] = pair else {
            notes.push(format!("attention s={s} d={d}: only one of QK^T and PV measured, left out of `attention_bmm`"));
            continue;
        };
        let flops = qk.case.flops(Product::Qk) + pv.case.flops(Product::Pv);
        let clocks: Vec<f64> = [qk.sm_clock_mhz, pv.sm_clock_mhz].into_iter().flatten().collect();
        out.push(AttentionBmmWire {
            seq_len: s,
            head_dim: d,
            batch: qk.case.batch,
            qk_tflops: qk.flops_per_s() / 1e12,
            pv_tflops: pv.flops_per_s() / 1e12,
            achieved_tflops: flops / (qk.time.p50 + pv.time.p50) / 1e12,
            sm_clock_mhz: (!clocks.is_empty()).then(|| clocks.iter().sum::<f64>() / clocks.len() as f64),
        });
    }
    (out, notes)
}

/// Fit latency + size * factor / busbw per (op, group size).
pub fn collective_fits(rows: &[CollRow], intra_node: bool, source: &str) -> (Vec<CollectiveWire>, Vec<String>) {
    let mut groups: BTreeMap<(CollectiveOp, u32), Vec<&CollRow>> = BTreeMap::new();
    for r in rows {
        groups.entry((r.op, r.n_ranks)).or_default().push(r);
    }
    let mut out = Vec::new();
    let mut notes = Vec::new();
    for ((op, n), rs) in groups {
        let f = op.busbw_factor(n);
        let pts: Vec<(f64, f64)> = rs.iter().map(|r| (r.size_bytes as f64 * f, r.time.p50)).collect();
        match fit::latency_bandwidth(&pts) {
            Ok(lf) => out.push(CollectiveWire {
                op: op.name().into(),
                n_ranks: n,
                intra_node,
                latency_us: lf.latency * 1e6,
                busbw_gb_per_s: lf.bandwidth / 1e9,
                peak_busbw_gb_per_s: rs.iter().map(|r| r.busbw(r.time.p50)).fold(0.0, f64::max) / 1e9,
                min_size_bytes: rs.iter().map(|r| r.size_bytes).min().unwrap_or(0),
                max_size_bytes: rs.iter().map(|r| r.size_bytes).max().unwrap_or(0),
                n_points: lf.n_points as u32,
                rms_rel_err: lf.rms_rel_err,
                source: source.into(),
            }),
            Err(e) => notes.push(format!("{} on {n} ranks: no fit ({e})", op.name())),
        }
    }
    (out, notes)
}

/// Collective rows from nccl-tests runs (out-of-place p50 only: p10 = p50 = p90).
pub fn rows_from_nccl_tests(runs: &[NcclTestsRun]) -> Vec<(CollRow, bool)> {
    let mut out = Vec::new();
    for run in runs {
        for r in &run.rows {
            let t = r.time_us * 1e-6;
            out.push((CollRow { op: run.op, n_ranks: run.n_ranks, size_bytes: r.size_bytes, time: Percentiles { p10: t, p50: t, p90: t } }, run.n_hosts <= 1));
        }
    }
    out
}

/// Fit everything the profile holds.
pub fn profile(m: &Measurements, name: &str, provenance: &str) -> (ProfileFile, Vec<String>) {
    let mut notes = Vec::new();
    let mut pf = ProfileFile {
        schema_version: SCHEMA_VERSION,
        name: name.into(),
        gpu_name: m.gpu_name.clone(),
        n_gpus: m.n_gpus,
        provenance: provenance.into(),
        kernel_launch_us: m.launch.iter().find(|r| r.what == "kernel_launch_back_to_back").map(|r| r.time.p50 * 1e6),
        stream: None,
        l2: None,
        power: None,
        power_activity: None,
        power_phases: Vec::new(),
        collectives: Vec::new(),
        p2p: Vec::new(),
        elementwise: Vec::new(),
        gemm: Vec::new(),
        attention_bmm: Vec::new(),
    };
    // Stream fit: the driver's device-to-device copy (the faster of the copies measured, and what
    // `Tensor.copy_` runs) at sizes well past L2 (HBM, not cache).
    let big = 4 * m.l2_bytes.max(1);
    let pts: Vec<(f64, f64)> =
        m.hbm.iter().filter(|r| r.kernel == super::memory::MemKernel::DriverCopy && r.size_bytes >= big).map(|r| (r.bytes_moved as f64, r.time.p50)).collect();
    match fit::latency_bandwidth(&pts) {
        Ok(f) => {
            pf.stream = Some(StreamWire {
                latency_us: f.latency * 1e6,
                bandwidth_gb_per_s: f.bandwidth / 1e9,
                fitted_on: format!(
                    "hbm.csv kernel=memcpy_dtod, {} sizes >= {} bytes (4x L2), bytes = read + written, rms rel err {:.3}",
                    f.n_points, big, f.rms_rel_err
                ),
            })
        }
        Err(e) if !m.hbm.is_empty() => notes.push(format!("stream: no fit ({e})")),
        Err(_) => {}
    }
    if let Some(best) = m
        .hbm
        .iter()
        .filter(|r| r.kernel == super::memory::MemKernel::Read && r.size_bytes * 2 <= m.l2_bytes)
        .max_by(|a, b| (a.bytes_moved as f64 / a.time.p50).total_cmp(&(b.bytes_moved as f64 / b.time.p50)))
    {
        pf.l2 = Some(L2Wire { read_bandwidth_gb_per_s: best.bytes_moved as f64 / best.time.p50 / 1e9, at_size_bytes: best.size_bytes, l2_bytes: m.l2_bytes });
    }
    pf.gemm = m
        .gemm
        .iter()
        .map(|r| GemmWire {
            dtype: r.dtype.name().into(),
            m: r.shape.m,
            n: r.shape.n,
            k: r.shape.k,
            achieved_tflops: r.shape.flops() / r.time.p50 / 1e12,
            sm_clock_mhz: r.sm_clock_mhz.or(m.max_sm_clock_mhz).unwrap_or(f64::NAN),
        })
        .collect();
    let (table, n) = attention_table(&m.attention);
    pf.attention_bmm = table;
    notes.extend(n);
    pf.elementwise = m
        .elementwise
        .iter()
        .map(|r| ElementwiseWire {
            op: r.op.name().into(),
            rows: r.rows,
            cols: r.cols,
            bytes: r.bytes_moved,
            achieved_gb_per_s: r.bytes_moved as f64 / r.time.p50 / 1e9,
        })
        .collect();
    let mut pairs: BTreeMap<(usize, usize), Vec<(f64, f64)>> = BTreeMap::new();
    for r in &m.p2p {
        pairs.entry((r.src, r.dst)).or_default().push((r.size_bytes as f64, r.time.p50));
    }
    for ((s, d), pts) in pairs {
        match fit::latency_bandwidth(&pts) {
            Ok(f) => pf.p2p.push(P2pWire {
                src: s as u32,
                dst: d as u32,
                latency_us: f.latency * 1e6,
                bandwidth_gb_per_s: f.bandwidth / 1e9,
                peak_bandwidth_gb_per_s: pts.iter().map(|(x, t)| x / t).fold(0.0, f64::max) / 1e9,
            }),
            Err(e) => notes.push(format!("p2p {s}->{d}: no fit ({e})")),
        }
    }
    let (c, n) = collective_fits(&m.collectives, true, "calibrate");
    pf.collectives = c;
    notes.extend(n);
    // Power.
    let phase = |name: &str| m.power_phases.iter().find(|p| p.load == name);
    pf.power_phases = m
        .power_phases
        .iter()
        .map(|p| PowerPhaseWire {
            load: p.load.into(),
            duration_s: p.duration_s,
            power_w: p.power_w_mean,
            sm_clock_mhz: p.sm_clock_mhz_mean,
            temperature_c: p.temperature_c_mean,
            gemm_tflops: p.gemm_tflops,
            hbm_gb_per_s: p.hbm_gb_per_s,
        })
        .collect();
    if let (Some(idle), Some(g), Some(h)) = (phase("idle"), phase("gemm"), phase("hbm")) {
        pf.power = Some(PowerWire {
            idle_w: idle.power_w_mean,
            gemm_load_w: g.power_w_mean,
            gemm_clock_mhz: g.sm_clock_mhz_mean,
            hbm_load_w: h.power_w_mean,
            power_limit_w: m.power_limit_w.unwrap_or(f64::NAN),
            max_clock_mhz: m.max_sm_clock_mhz.unwrap_or(f64::NAN),
        });
        if let (Some(gt), Some(hb)) = (g.gemm_tflops, h.hbm_gb_per_s) {
            let mut pts = vec![(0.0, 0.0, idle.power_w_mean), (1.0, 0.0, g.power_w_mean), (0.0, 1.0, h.power_w_mean)];
            if let Some(mx) = phase("mixed") {
                pts.push((mx.gemm_tflops.unwrap_or(0.0) / gt, mx.hbm_gb_per_s.unwrap_or(0.0) / hb, mx.power_w_mean));
            }
            match fit::power_plane(&pts) {
                Ok((i, a, b)) => pf.power_activity = Some(PowerActivityWire { idle_w: i, gemm_w: a, hbm_w: b }),
                Err(e) => notes.push(format!("power: no activity fit ({e})")),
            }
        }
    }
    (pf, notes)
}

pub fn meta_toml(meta: &Meta) -> String {
    toml::to_string(meta).expect("meta serializes")
}

pub fn readme(meta: &Meta, pf: &ProfileFile, files: &[String]) -> String {
    let mut s = format!("# Calibration profile `{}`\n\n", meta.name);
    s.push_str(&format!(
        "Measured by `gpuplan calibrate` on {} x {} ({}), {} UTC, driver {}, CUDA driver API {}, NCCL {}, in {:.0} s ({} mode).\n\n",
        meta.gpu_count, meta.gpu_name, meta.host, meta.date_utc, meta.driver_version, meta.cuda_driver_version, meta.nccl_version, meta.wall_s, meta.mode
    ));
    s.push_str(&format!("Command (run from the repository root):\n\n```\n{}\n```\n\n", meta.command));
    s.push_str("Files: `profile.toml` (fits, read by `gpuplan --calibration`), `meta.toml` (provenance)");
    for f in files {
        s.push_str(&format!(", `{f}`"));
    }
    s.push_str(".\nTimes are p10/p50/p90 over repetitions, each the mean of a batch timed with CUDA events after warm-up, on random inputs.\n\n");
    s.push_str("Headline numbers (p50):\n\n");
    if let Some(g) = pf.gemm.iter().find(|g| g.dtype == "bf16" && g.m == 8192 && g.n == 8192 && g.k == 8192) {
        s.push_str(&format!("- cuBLASLt bf16 8192^3: {:.0} TFLOP/s (SM clock {:.0} MHz)\n", g.achieved_tflops, g.sm_clock_mhz));
    }
    for d in ["fp16", "tf32", "fp8"] {
        if let Some(g) = pf.gemm.iter().find(|g| g.dtype == d && g.m == 8192 && g.n == 8192 && g.k == 8192) {
            s.push_str(&format!("- cuBLASLt {d} 8192^3: {:.0} TFLOP/s\n", g.achieved_tflops));
        }
    }
    let mut dims: Vec<u64> = pf.attention_bmm.iter().map(|a| a.head_dim).collect();
    dims.dedup();
    for d in dims {
        let pts: Vec<String> = pf.attention_bmm.iter().filter(|a| a.head_dim == d).map(|a| format!("s={} {:.0}", a.seq_len, a.achieved_tflops)).collect();
        s.push_str(&format!("- attention-like bf16 batched GEMMs (QK^T + PV), d={d}: {} TFLOP/s\n", pts.join(", ")));
    }
    if let Some(st) = &pf.stream {
        s.push_str(&format!("- HBM copy fit: {:.0} GB/s (read + write), {:.1} us latency\n", st.bandwidth_gb_per_s, st.latency_us));
    }
    if let Some(l2) = &pf.l2 {
        s.push_str(&format!("- L2-resident read: {:.0} GB/s at {} bytes\n", l2.read_bandwidth_gb_per_s, l2.at_size_bytes));
    }
    if let Some(k) = pf.kernel_launch_us {
        s.push_str(&format!("- kernel launch, back to back: {k:.2} us\n"));
    }
    for c in &pf.collectives {
        s.push_str(&format!(
            "- {} on {} GPUs: latency {:.1} us, fitted busbw {:.0} GB/s, peak busbw {:.0} GB/s\n",
            c.op, c.n_ranks, c.latency_us, c.busbw_gb_per_s, c.peak_busbw_gb_per_s
        ));
    }
    for p in &pf.p2p {
        s.push_str(&format!("- P2P copy GPU {} -> {}: {:.0} GB/s peak, {:.1} us latency\n", p.src, p.dst, p.peak_bandwidth_gb_per_s, p.latency_us));
    }
    if let Some(p) = &pf.power {
        s.push_str(&format!(
            "- power: idle {:.0} W, sustained bf16 GEMM {:.0} W at {:.0} MHz SM clock (limit {:.0} W, max clock {:.0} MHz), HBM copy {:.0} W\n",
            p.idle_w, p.gemm_load_w, p.gemm_clock_mhz, p.power_limit_w, p.max_clock_mhz, p.hbm_load_w
        ));
    }
    if !meta.notes.is_empty() {
        s.push_str("\nNotes:\n\n");
        for n in &meta.notes {
            s.push_str(&format!("- {n}\n"));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn default_names_are_kebab_case() {
        assert_eq!(default_name("NVIDIA H200", 2), "h200-2x");
        assert_eq!(default_name("NVIDIA H100 80GB HBM3", 1), "h100-80gb-hbm3-1x");
    }

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("--only=gemm,hbm"), "--only=gemm,hbm");
        assert_eq!(shell_quote("a b"), "'a b'");
    }

    use super::*;
    use crate::calibrate::memory::{MemKernel, MemRow};
    use crate::calibrate::power::Phase;

    fn exact(t: f64) -> Percentiles {
        Percentiles { p10: t, p50: t, p90: t }
    }

    fn phase(load: &'static str, w: f64, mhz: f64, tf: Option<f64>, gb: Option<f64>) -> Phase {
        Phase {
            load,
            duration_s: 10.0,
            power_w_mean: w,
            power_w: exact(w),
            sm_clock_mhz_mean: mhz,
            temperature_c_mean: 50.0,
            n_samples: 100,
            gemm_tflops: tf,
            hbm_gb_per_s: gb,
        }
    }

    fn attn_row(regime: Regime, s_q: u64, s_kv: u64, d: u64, p: Product, tflops: f64) -> AttnRow {
        use crate::calibrate::attention::Case;
        let case = Case { regime, seq_q: s_q, seq_kv: s_kv, head_dim: d, batch: (1 << 29) / (s_q * s_kv) };
        AttnRow {
            case,
            product: p,
            time: exact(case.flops(p) / (tflops * 1e12)),
            sm_clock_mhz: Some(if p == Product::Qk { 1500.0 } else { 1600.0 }),
            waves: 10.0,
            algo_index: 0,
            check_rel_err: 1e-3,
        }
    }

    #[test]
    fn attention_table_from_synthetic_rows() {
        // QK^T at 300 and PV at 600 TFLOP/s: equal FLOPs, so together 2 / (1/300 + 1/600) = 400.
        let mut rows = vec![
            attn_row(Regime::Prefill, 8192, 8192, 128, Product::Qk, 300.0),
            attn_row(Regime::Prefill, 8192, 8192, 128, Product::Pv, 600.0),
            attn_row(Regime::Prefill, 512, 512, 128, Product::Pv, 200.0),
            attn_row(Regime::Prefill, 512, 512, 128, Product::Qk, 200.0),
            attn_row(Regime::Prefill, 2048, 2048, 64, Product::Qk, 250.0),
            // Decode rows never enter the table.
            attn_row(Regime::Decode, 8, 4096, 128, Product::Qk, 20.0),
            attn_row(Regime::Decode, 8, 4096, 128, Product::Pv, 20.0),
        ];
        rows[3].sm_clock_mhz = None;
        let (table, notes) = attention_table(&rows);
        // (d, s) order; d = 64 has only QK^T, so it is left out with a note.
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("s=2048 d=64"), "{notes:?}");
        let got: Vec<(u64, u64, u64)> = table.iter().map(|a| (a.head_dim, a.seq_len, a.batch)).collect();
        assert_eq!(got, vec![(128, 512, 2048), (128, 8192, 8)]);
        let t = &table[1];
        assert!((t.qk_tflops - 300.0).abs() < 1e-9, "{t:?}");
        assert!((t.pv_tflops - 600.0).abs() < 1e-9, "{t:?}");
        assert!((t.achieved_tflops - 400.0).abs() < 1e-9, "{t:?}");
        assert_eq!(t.sm_clock_mhz, Some(1550.0));
        assert!((table[0].achieved_tflops - 200.0).abs() < 1e-9);
        assert_eq!(table[0].sm_clock_mhz, Some(1600.0));

        // Through `profile`: the table lands in the wire file and loads as the domain table.
        let m = Measurements { gpu_name: "Synthetic".into(), n_gpus: 1, attention: rows.clone(), ..Default::default() };
        let (pf, notes) = profile(&m, "synthetic", "unit test");
        assert_eq!(pf.attention_bmm, table);
        assert_eq!(notes.len(), 1);
        let d = pf.to_domain(std::path::Path::new("synthetic/profile.toml")).unwrap();
        assert_eq!(d.attention_bmm.len(), 2);
        assert!((d.attention_bmm[1].achieved.as_tflops() - 400.0).abs() < 1e-9);

        // The raw CSV: one row per measured product, decode rows with their bandwidth.
        let files = csvs(&m);
        let text = String::from_utf8(files.iter().find(|(n, _)| n == "attention.csv").unwrap().1.clone()).unwrap();
        let mut lines = text.lines();
        assert_eq!(lines.next().unwrap(), "regime,product,dtype,batch,seq_q,seq_kv,head_dim,m,n,k,time_us_p10,time_us_p50,time_us_p90,tflops_p50,bytes_moved,bandwidth_gb_per_s_p50,sm_clock_mhz,waves,algo_index,check_max_rel_err");
        assert_eq!(lines.clone().count(), rows.len());
        // Decode QK^T, g = 8, s_kv = 4096, d = 128, batch 2^29 / 2^15 = 16384 (synthetic batch):
        // m n k = 8 x 4096 x 128.
        let decode = lines.find(|l| l.starts_with("decode,qk")).unwrap();
        let f: Vec<&str> = decode.split(',').collect();
        assert_eq!(&f[..10], &["decode", "qk", "bf16", "16384", "8", "4096", "128", "8", "4096", "128"]);
        assert_eq!(f[13], "20.0");
        let bytes: u64 = f[14].parse().unwrap();
        assert_eq!(bytes, 16384 * (8 * 128 + 128 * 4096 + 8 * 4096) * 2);
    }

    #[test]
    fn fits_recover_the_parameters_of_synthetic_measurements() {
        let mut m = Measurements { gpu_name: "Synthetic".into(), n_gpus: 2, l2_bytes: 50 << 20, ..Default::default() };
        // all_reduce on 2 ranks: 12 us + size * 2(n-1)/n / 300 GB/s.
        for e in 3..=32 {
            let size = 1u64 << e;
            let t = 12e-6 + size as f64 * 1.0 / 300e9;
            m.collectives.push(CollRow { op: CollectiveOp::AllReduce, n_ranks: 2, size_bytes: size, time: exact(t) });
        }
        // HBM: 3 us + bytes / 4300 GB/s for the driver copy; a slower kernel copy that must be ignored.
        for e in 20..=32 {
            let size = 1u64 << e;
            let t = 3e-6 + 2.0 * size as f64 / 4300e9;
            m.hbm.push(MemRow { kernel: MemKernel::DriverCopy, size_bytes: size, bytes_moved: 2 * size, time: exact(t) });
            m.hbm.push(MemRow { kernel: MemKernel::Copy, size_bytes: size, bytes_moved: 2 * size, time: exact(t * 1.1) });
        }
        m.power_phases = vec![
            phase("idle", 100.0, 1980.0, None, None),
            phase("gemm", 700.0, 1450.0, Some(650.0), None),
            phase("hbm", 600.0, 1980.0, None, Some(4200.0)),
            phase("mixed", 100.0 + 600.0 * 0.9 + 500.0 * 0.1, 1470.0, Some(650.0 * 0.9), Some(4200.0 * 0.1)),
        ];
        m.power_limit_w = Some(700.0);
        m.max_sm_clock_mhz = Some(1980.0);
        let (pf, notes) = profile(&m, "synthetic", "unit test");
        assert!(notes.is_empty(), "{notes:?}");
        let ar = &pf.collectives[0];
        assert_eq!((ar.op.as_str(), ar.n_ranks), ("all_reduce", 2));
        assert!((ar.latency_us - 12.0).abs() < 0.1, "{ar:?}");
        assert!((ar.busbw_gb_per_s - 300.0).abs() < 1.0, "{ar:?}");
        let st = pf.stream.as_ref().unwrap();
        assert!((st.bandwidth_gb_per_s - 4300.0).abs() < 5.0 && (st.latency_us - 3.0).abs() < 0.1, "{st:?}");
        let pw = pf.power.as_ref().unwrap();
        assert_eq!((pw.idle_w, pw.gemm_load_w, pw.gemm_clock_mhz, pw.hbm_load_w), (100.0, 700.0, 1450.0, 600.0));
        let pa = pf.power_activity.as_ref().unwrap();
        assert!((pa.idle_w - 100.0).abs() < 1e-6 && (pa.gemm_w - 600.0).abs() < 1e-6 && (pa.hbm_w - 500.0).abs() < 1e-6, "{pa:?}");
        // And the result is a valid profile.
        let d = pf.to_domain(std::path::Path::new("synthetic/profile.toml")).unwrap();
        assert_eq!(d.collectives.len(), 1);
        // The CSVs carry unit-suffixed headers.
        let files = csvs(&m);
        let coll = files.iter().find(|(n, _)| n == "collectives.csv").unwrap();
        assert!(String::from_utf8_lossy(&coll.1)
            .starts_with("op,n_ranks,size_bytes,dtype,time_us_p10,time_us_p50,time_us_p90,algbw_gb_per_s_p50,busbw_gb_per_s_p50\n"));
        // Node power: one row per GPU, its index first; the single-GPU phases keep their file.
        assert!(!files.iter().any(|(n, _)| n == "power_node.csv"));
        m.node_power = vec![(0, phase("gemm-node", 690.0, 1480.0, Some(660.0), None)), (1, phase("gemm-node", 695.0, 1510.0, Some(680.0), None))];
        let files = csvs(&m);
        let node = String::from_utf8_lossy(&files.iter().find(|(n, _)| n == "power_node.csv").unwrap().1).into_owned();
        let lines: Vec<&str> = node.lines().collect();
        assert_eq!(lines[0], "gpu,load,duration_s,settled_samples,power_w_mean,power_w_p10,power_w_p50,power_w_p90,sm_clock_mhz_mean,temperature_c_mean,gemm_tflops,hbm_gb_per_s");
        assert_eq!(lines.len(), 3);
        assert!(lines[2].starts_with("1,gemm-node,") && lines[2].contains(",695.0,") && lines[2].contains(",1510,"), "{node}");
        let power = String::from_utf8_lossy(&files.iter().find(|(n, _)| n == "power.csv").unwrap().1).into_owned();
        assert!(power.starts_with("load,duration_s,") && power.lines().count() == 5, "{power}");
    }

    /// Two rows of every table, with values that exercise each column's format: rounding, an
    /// absent clock or rate (empty field), scientific notation, an f32 column.
    fn every_table() -> Measurements {
        use crate::calibrate::gemm::GemmShape;
        use crate::calibrate::memory::EltOp;
        use gpuplan_core::hardware::Dtype;
        let t = |p10: f64, p50: f64, p90: f64| Percentiles { p10, p50, p90 };
        let mut m = Measurements { gpu_name: "Synthetic".into(), n_gpus: 2, ..Default::default() };
        m.launch = vec![
            LaunchRow { what: "kernel_launch_back_to_back", time: t(2.1234e-6, 2.25e-6, 3.0005e-6) },
            LaunchRow { what: "event_record", time: t(1e-7, 1.5e-7, 1.0e-3) },
        ];
        m.hbm = vec![
            MemRow { kernel: MemKernel::Read, size_bytes: 1 << 30, bytes_moved: 1 << 30, time: t(2.4e-4, 2.5e-4, 2.61e-4) },
            MemRow { kernel: MemKernel::DriverCopy, size_bytes: 4096, bytes_moved: 8192, time: t(3e-6, 3.3333e-6, 4e-6) },
        ];
        m.elementwise = vec![
            EltRow { op: EltOp::RmsNorm, rows: 8192, cols: 4096, bytes_moved: 3 << 26, time: t(5e-5, 5.5e-5, 6e-5), check_err: 1.234e-3 },
            EltRow { op: EltOp::Softmax, rows: 1, cols: 3, bytes_moved: 24, time: t(1e-6, 1e-6, 1e-6), check_err: 0.0 },
        ];
        m.gemm = vec![
            GemmRow {
                dtype: Dtype::Bf16,
                shape: GemmShape { m: 8192, n: 8192, k: 8192 },
                time: t(1.5e-3, 1.6e-3, 1.7e-3),
                sm_clock_mhz: Some(1755.4),
                waves: 3.125,
                algo_index: 2,
                check_rel_err: 4.5e-3,
            },
            GemmRow {
                dtype: Dtype::Fp8,
                shape: GemmShape { m: 1, n: 128, k: 64 },
                time: t(4e-6, 4.2e-6, 5e-6),
                sm_clock_mhz: None,
                waves: 0.015,
                algo_index: 0,
                check_rel_err: 0.0,
            },
        ];
        m.attention = vec![
            attn_row(Regime::Prefill, 2048, 2048, 128, Product::Pv, 333.3),
            AttnRow { sm_clock_mhz: None, ..attn_row(Regime::Decode, 4, 8192, 64, Product::Qk, 12.5) },
        ];
        m.p2p = vec![
            P2pRow { src: 0, dst: 1, peer_access: true, size_bytes: 1 << 28, time: t(6e-4, 6.1e-4, 6.5e-4) },
            P2pRow { src: 1, dst: 0, peer_access: false, size_bytes: 1024, time: t(1e-5, 1.1e-5, 1.2e-5) },
        ];
        m.collectives = vec![
            CollRow { op: CollectiveOp::AllReduce, n_ranks: 2, size_bytes: 1 << 26, time: t(3e-4, 3.1e-4, 3.3e-4) },
            CollRow { op: CollectiveOp::AllGather, n_ranks: 8, size_bytes: 8, time: t(1e-5, 1.2e-5, 1.5e-5) },
        ];
        m.power_phases = vec![phase("idle", 101.26, 1980.4, None, None), phase("gemm", 699.95, 1455.5, Some(651.25), Some(12.04))];
        m.power_samples = vec![
            Sample { load: "idle", t_s: 0.1005, power_w: 100.05, sm_clock_mhz: 1980.5, temperature_c: 40.0 },
            Sample { load: "gemm", t_s: 12.3456, power_w: 700.0, sm_clock_mhz: 1454.49, temperature_c: 71.5 },
        ];
        m.node_power = vec![(0, phase("gemm-node", 690.0, 1480.0, Some(660.0), None)), (1, phase("gemm-node", 695.05, 1510.5, None, Some(1.25)))];
        m
    }

    /// The bytes of every table, as `calibrate` has written them since before the tables were row
    /// structs: a profile's CSVs do not change with the code that writes them.
    #[test]
    fn every_table_writes_the_same_bytes() {
        let only_phases = Measurements { power_phases: every_table().power_phases, ..Default::default() };
        let mut got = String::new();
        for (n, b) in csvs(&every_table()).into_iter().chain(csvs(&only_phases)).chain(csvs(&Measurements::default())) {
            got += &format!("=== {n}\n{}", String::from_utf8(b).unwrap());
        }
        assert_eq!(got, GOLDEN);
    }

    const GOLDEN: &str = r#"=== launch.csv
what,time_us_p10,time_us_p50,time_us_p90
kernel_launch_back_to_back,2.123,2.250,3.000
event_record,0.100,0.150,1000.000
=== hbm.csv
kernel,size_bytes,bytes_moved,time_us_p10,time_us_p50,time_us_p90,bandwidth_gb_per_s_p50
read,1073741824,1073741824,240.000,250.000,261.000,4295.0
memcpy_dtod,4096,8192,3.000,3.333,4.000,2.5
=== elementwise.csv
op,rows,cols,bytes_moved,time_us_p10,time_us_p50,time_us_p90,bandwidth_gb_per_s_p50,check_max_rel_err
rmsnorm,8192,4096,201326592,50.000,55.000,60.000,3660.5,1.23e-3
softmax,1,3,24,1.000,1.000,1.000,0.0,0.00e0
=== gemm.csv
dtype,m,n,k,time_us_p10,time_us_p50,time_us_p90,tflops_p50,sm_clock_mhz,waves,algo_index,check_max_rel_err
bf16,8192,8192,8192,1500.000,1600.000,1700.000,687.2,1755,3.12,2,4.50e-3
fp8,1,128,64,4.000,4.200,5.000,0.0,,0.01,0,0.00e0
=== attention.csv
regime,product,dtype,batch,seq_q,seq_kv,head_dim,m,n,k,time_us_p10,time_us_p50,time_us_p90,tflops_p50,bytes_moved,bandwidth_gb_per_s_p50,sm_clock_mhz,waves,algo_index,check_max_rel_err
prefill,pv,bf16,128,2048,2048,128,2048,128,2048,412.358,412.358,412.358,333.3,1207959552,2929.4,1600,10.00,0,1.00e-3
decode,qk,bf16,16384,4,8192,64,4,8192,64,5497.558,5497.558,5497.558,12.5,18261999616,3321.8,,10.00,0,1.00e-3
=== p2p.csv
src_gpu,dst_gpu,peer_access,size_bytes,time_us_p10,time_us_p50,time_us_p90,bandwidth_gb_per_s_p50
0,1,true,268435456,600.000,610.000,650.000,440.06
1,0,false,1024,10.000,11.000,12.000,0.09
=== collectives.csv
op,n_ranks,size_bytes,dtype,time_us_p10,time_us_p50,time_us_p90,algbw_gb_per_s_p50,busbw_gb_per_s_p50
all_reduce,2,67108864,bf16,300.000,310.000,330.000,216.480,216.480
all_gather,8,8,bf16,10.000,12.000,15.000,0.001,0.001
=== power_node.csv
gpu,load,duration_s,settled_samples,power_w_mean,power_w_p10,power_w_p50,power_w_p90,sm_clock_mhz_mean,temperature_c_mean,gemm_tflops,hbm_gb_per_s
0,gemm-node,10.00,100,690.0,690.0,690.0,690.0,1480,50.0,660.0,
1,gemm-node,10.00,100,695.0,695.0,695.0,695.0,1510,50.0,,1.2
=== power.csv
load,duration_s,settled_samples,power_w_mean,power_w_p10,power_w_p50,power_w_p90,sm_clock_mhz_mean,temperature_c_mean,gemm_tflops,hbm_gb_per_s
idle,10.00,100,101.3,101.3,101.3,101.3,1980,50.0,,
gemm,10.00,100,700.0,700.0,700.0,700.0,1456,50.0,651.2,12.0
=== power_samples.csv
load,time_s,power_w,sm_clock_mhz,temperature_c
idle,0.101,100.0,1980,40
gemm,12.346,700.0,1454,72
=== power.csv
load,duration_s,settled_samples,power_w_mean,power_w_p10,power_w_p50,power_w_p90,sm_clock_mhz_mean,temperature_c_mean,gemm_tflops,hbm_gb_per_s
idle,10.00,100,101.3,101.3,101.3,101.3,1980,50.0,,
gemm,10.00,100,700.0,700.0,700.0,700.0,1456,50.0,651.2,12.0
=== power_samples.csv
load,time_s,power_w,sm_clock_mhz,temperature_c
"#;

    /// Every table reads back with the csv reader, one field per header column; and `attention.csv`
    /// with `profile.toml` loads through the profile reader, its decode rows as the decode bandwidth
    /// (bytes over the two products' p50 times, as the CSV rounds them).
    #[test]
    fn tables_round_trip_through_the_profile_reader() {
        let mut m = every_table();
        m.attention.push(attn_row(Regime::Prefill, 2048, 2048, 128, Product::Qk, 300.0));
        m.attention.push(attn_row(Regime::Decode, 4, 8192, 64, Product::Pv, 10.0));
        m.gemm.retain(|g| g.sm_clock_mhz.is_some());
        for (name, bytes) in csvs(&m) {
            let mut r = csv::Reader::from_reader(bytes.as_slice());
            let width = r.headers().unwrap().len();
            let n = r.records().map(|rec| assert_eq!(rec.unwrap().len(), width, "{name}")).count();
            assert!(n > 0 || name == "power_samples.csv", "{name}");
        }
        let (pf, _) = profile(&m, "round-trip", "unit test");
        let dir = std::env::temp_dir().join(format!("gpuplan-output-round-trip-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("profile.toml"), pf.to_toml()).unwrap();
        let attention = csvs(&m).into_iter().find(|(n, _)| n == "attention.csv").unwrap().1;
        std::fs::write(dir.join("attention.csv"), &attention).unwrap();
        let loaded = gpuplan_config::profile::load_profile(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        let p = loaded.unwrap();
        assert_eq!(p.attention_bmm.len(), 1);
        assert_eq!(p.attention_decode.len(), 1, "{:?}", p.attention_decode);
        let d = &p.attention_decode[0];
        assert_eq!((d.rows, d.seq_kv, d.head_dim), (4, 8192, 64));
        let decode: Vec<&AttnRow> = m.attention.iter().filter(|r| r.case.regime == Regime::Decode).collect();
        let bytes: u64 = decode.iter().map(|r| r.case.bytes(r.product)).sum();
        let secs: f64 = decode.iter().map(|r| (r.time.p50 * 1e9).round() / 1e9).sum();
        let want = bytes as f64 / secs / 1e9;
        assert!((d.bandwidth.as_gb_per_s() - want).abs() < 1e-9 * want, "{} vs {want}", d.bandwidth.as_gb_per_s());
    }
}
