//! Calibration profiles written by `gpuplan calibrate`: `calibration/profiles/<name>/profile.toml`
//! (fits and per-shape GEMM efficiency) beside raw CSVs and `meta.toml`.
//!
//! Wire format (schema 1). Keys carry units. `gemm`, `attention_bmm`, `collectives`, `stream`,
//! `kernel_launch_us` and `power` become the domain `Profile`; `l2`, `p2p`, `elementwise`,
//! `power_activity` and `power_phases` are recorded for people and later models and are checked
//! but not converted. Every table is optional: profiles written before `attention_bmm` existed
//! load unchanged.
//! Interpolation policy (for `cost`): GEMM points are samples of achieved FLOP/s per (dtype, m, n,
//! k), looked up nearest in log-space, never extrapolated past the grid without saying so;
//! `attention_bmm` points are achieved FLOP/s per (seq_len, head_dim), interpolated linearly in
//! log seq_len within the nearest head_dim's points and clamped to their range (`cost`);
//! collective fits hold for any size (latency + size * factor / busbw) within the fitted range.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{catalog, parse_toml, read_file, ConfigError, Problems};
use gpuplan_core::hardware::profile::{
    AttentionBmmPoint, AttentionDecodePoint, CollectiveFit, CollectiveOp, GemmPoint, HostProbe, PowerProfile, Profile, StreamFit,
};
use gpuplan_core::hardware::Dtype;
use gpuplan_core::units::{BytesPerSec, FlopsPerSec, Hertz, Seconds, Watts};

pub const SCHEMA_VERSION: u32 = 1;
/// The file inside a profile folder.
pub const PROFILE_FILE: &str = "profile.toml";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileFile {
    pub schema_version: u32,
    pub name: String,
    pub gpu_name: String,
    pub n_gpus: u32,
    /// Machine, date and command.
    pub provenance: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_launch_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<StreamWire>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l2: Option<L2Wire>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power: Option<PowerWire>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_activity: Option<PowerActivityWire>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub power_phases: Vec<PowerPhaseWire>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub collectives: Vec<CollectiveWire>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub p2p: Vec<P2pWire>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub elementwise: Vec<ElementwiseWire>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gemm: Vec<GemmWire>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attention_bmm: Vec<AttentionBmmWire>,
}

/// time = latency + bytes / bandwidth for a memory-bound copy (bytes read + written).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamWire {
    pub latency_us: f64,
    pub bandwidth_gb_per_s: f64,
    /// Which rows were fitted (kernel, sizes).
    pub fitted_on: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct L2Wire {
    /// Best read bandwidth at a size that fits in L2 (bytes read / time).
    pub read_bandwidth_gb_per_s: f64,
    pub at_size_bytes: u64,
    pub l2_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PowerWire {
    pub idle_w: f64,
    pub gemm_load_w: f64,
    pub gemm_clock_mhz: f64,
    pub hbm_load_w: f64,
    pub power_limit_w: f64,
    pub max_clock_mhz: f64,
}

/// watts = idle_w + gemm_w * gemm_util + hbm_w * hbm_util, utilizations relative to the GEMM-only
/// and HBM-only phases.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PowerActivityWire {
    pub idle_w: f64,
    pub gemm_w: f64,
    pub hbm_w: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PowerPhaseWire {
    pub load: String,
    pub duration_s: f64,
    pub power_w: f64,
    pub sm_clock_mhz: f64,
    pub temperature_c: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gemm_tflops: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hbm_gb_per_s: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CollectiveWire {
    pub op: String,
    pub n_ranks: u32,
    pub intra_node: bool,
    pub latency_us: f64,
    pub busbw_gb_per_s: f64,
    /// Best busbw measured (usually at the largest sizes).
    pub peak_busbw_gb_per_s: f64,
    pub min_size_bytes: u64,
    pub max_size_bytes: u64,
    pub n_points: u32,
    pub rms_rel_err: f64,
    /// `calibrate` or the nccl-tests log it came from.
    pub source: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct P2pWire {
    pub src: u32,
    pub dst: u32,
    pub latency_us: f64,
    pub bandwidth_gb_per_s: f64,
    pub peak_bandwidth_gb_per_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ElementwiseWire {
    pub op: String,
    pub rows: u64,
    pub cols: u64,
    pub bytes: u64,
    pub achieved_gb_per_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GemmWire {
    pub dtype: String,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub achieved_tflops: f64,
    pub sm_clock_mhz: f64,
}

/// Attention-like batched GEMMs in bf16 at one (s, d): QK^T (s x s x d) and PV (s x d x s) over
/// `batch` (sequence, head) pairs, from `attention.csv`'s prefill rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttentionBmmWire {
    /// s_q = s_kv.
    pub seq_len: u64,
    pub head_dim: u64,
    /// Sequence-heads in the measured batch.
    pub batch: u64,
    pub qk_tflops: f64,
    pub pv_tflops: f64,
    /// Both products: their FLOPs over the sum of their median times (what `cost` reads).
    pub achieved_tflops: f64,
    /// Mean of the two rows' SM clock readings, when NVML gave them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_clock_mhz: Option<f64>,
}

pub fn op_from_str(s: &str) -> Option<CollectiveOp> {
    [CollectiveOp::AllReduce, CollectiveOp::AllGather, CollectiveOp::ReduceScatter, CollectiveOp::AllToAll, CollectiveOp::SendRecv]
        .into_iter()
        .find(|o| o.name() == s)
}

/// `path` may be a profile folder (holding `profile.toml`), the file itself, or a name under
/// `calibration/profiles/` in the data roots.
pub fn resolve_profile(name_or_path: &str) -> Result<PathBuf, ConfigError> {
    let p = Path::new(name_or_path);
    if catalog::is_dir(p) && catalog::is_file(&p.join(PROFILE_FILE)) {
        return Ok(p.join(PROFILE_FILE));
    }
    if catalog::is_file(p) {
        return Ok(p.to_path_buf());
    }
    for root in super::data_roots() {
        let c = root.join("calibration/profiles").join(name_or_path).join(PROFILE_FILE);
        if catalog::is_file(&c) {
            return Ok(c);
        }
    }
    Err(ConfigError::UnknownName {
        what: "calibration profile",
        name: name_or_path.to_string(),
        hint: Some("give a profile folder, its `profile.toml`, or a name under `calibration/profiles/`".into()),
    })
}

pub fn load_profile(path: &Path) -> Result<Profile, ConfigError> {
    let file = if catalog::is_dir(path) { path.join(PROFILE_FILE) } else { path.to_path_buf() };
    let text = read_file(&file)?;
    let wire: ProfileFile = parse_toml(&file, &text)?;
    let mut profile = wire.to_domain(&file)?;
    check_against_datasheet(&file, &profile)?;
    let raw = file.with_file_name("attention.csv");
    if catalog::is_file(&raw) {
        profile.attention_decode = read_attention_decode(&raw)?;
    }
    let host = file.with_file_name(HOST_FILE);
    if catalog::is_file(&host) {
        let text = read_file(&host)?;
        let wire: HostFile = parse_toml(&host, &text)?;
        profile.host = Some(wire.to_domain(&host)?);
    }
    let moe = file.with_file_name(super::moe::MOE_FILE);
    if catalog::is_file(&moe) {
        profile.moe = Some(super::moe::load(&moe)?);
    }
    Ok(profile)
}

/// The file beside a profile's `profile.toml` that `calibrate --host` writes.
pub const HOST_FILE: &str = "host.toml";

/// `host.toml`: the framework's host costs that `calibrate --host` fitted from its probe's table
/// (`host.csv` beside it); see `HostProbe` for what each is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostFile {
    pub schema_version: u32,
    /// Machine, date, software and command.
    pub provenance: String,
    pub hf_decode_layer_us: f64,
    pub hf_decode_fixed_us: f64,
    pub hf_generate_layer_us: f64,
    pub hf_generate_fixed_us: f64,
    pub sdpa_cudnn_plan_us: f64,
    pub op_dispatch_us: f64,
    /// Which rows of the probe's table each value comes from.
    pub fitted_on: String,
}

impl HostFile {
    pub fn to_domain(&self, path: &Path) -> Result<HostProbe, ConfigError> {
        let mut p = Problems::default();
        if self.schema_version != 1 {
            p.push(ConfigError::invalid(path, "schema_version", self.schema_version, "is not 1").with_hint("write it again with `gpuplan calibrate --host`"));
        }
        for (key, v) in [
            ("hf_decode_layer_us", self.hf_decode_layer_us),
            ("hf_decode_fixed_us", self.hf_decode_fixed_us),
            ("hf_generate_layer_us", self.hf_generate_layer_us),
            ("hf_generate_fixed_us", self.hf_generate_fixed_us),
            ("sdpa_cudnn_plan_us", self.sdpa_cudnn_plan_us),
            ("op_dispatch_us", self.op_dispatch_us),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                p.push(
                    ConfigError::invalid(path, key, v, "must be a finite number of microseconds, 0 or more")
                        .with_hint("write it again with `gpuplan calibrate --host`"),
                );
            }
        }
        p.finish()?;
        Ok(HostProbe {
            provenance: self.provenance.clone(),
            hf_decode_layer: Seconds::us(self.hf_decode_layer_us),
            hf_decode_fixed: Seconds::us(self.hf_decode_fixed_us),
            hf_generate_layer: Seconds::us(self.hf_generate_layer_us),
            hf_generate_fixed: Seconds::us(self.hf_generate_fixed_us),
            sdpa_cudnn_plan: Seconds::us(self.sdpa_cudnn_plan_us),
            op_dispatch: Seconds::us(self.op_dispatch_us),
            in_period: false,
        })
    }
}

/// A measurement cannot beat the hardware: every GEMM row of a profile measured on a GPU the catalog
/// knows must stay within `MAX_OVER_PEAK` of that GPU's datasheet peak for its dtype, scaled from
/// the spec clock to the GPU's maximum clock (what boost can reach).
fn check_against_datasheet(path: &Path, profile: &Profile) -> Result<(), ConfigError> {
    /// Headroom for timer and clock-reading noise over the peak at the maximum clock.
    const MAX_OVER_PEAK: f64 = 1.05;
    let Some(gpu) = super::system::gpu_by_driver_name(&profile.gpu_name) else { return Ok(()) };
    let boost = gpu.max_clock.value.value() / gpu.spec_clock.value.value();
    let mut p = Problems::default();
    for (i, g) in profile.gemm.iter().enumerate() {
        if let Some(peak) = gpu.peak.get(g.dtype) {
            let limit = peak.value.value() * boost * MAX_OVER_PEAK;
            p.check(g.achieved.value() <= limit, || {
                ConfigError::invalid(
                    path,
                    &format!("gemm row {} ({:?} {}x{}x{})", i + 1, g.dtype, g.m, g.n, g.k),
                    format!("{:.0} TFLOP/s", g.achieved.value() / 1e12),
                    format!("is above {} peak at its maximum clock ({:.0} TFLOP/s)", gpu.name, limit / 1e12),
                )
                .with_hint("a GEMM row is a measurement and cannot beat the datasheet; re-run `gpuplan calibrate` or fix the CSV")
            });
        }
    }
    p.finish()
}

/// The `decode` rows of a profile's `attention.csv`: per (rows, keys, head dim), QK^T and PV
/// together, bytes moved over the sum of their p50 times.
fn read_attention_decode(path: &Path) -> Result<Vec<AttentionDecodePoint>, ConfigError> {
    let bad = |row: usize, what: String| ConfigError::invalid(path, &format!("row {row}"), what, "is not a row of gpuplan calibrate's attention.csv");
    let text = super::read_file(path)?;
    let mut r = csv::Reader::from_reader(text.as_bytes());
    let headers = r.headers().map_err(|e| bad(0, e.to_string()))?.clone();
    let col = |name: &str| headers.iter().position(|h| h == name).ok_or_else(|| bad(0, format!("no column `{name}`")));
    let (regime, rows, keys, dim, time, bytes) = (col("regime")?, col("seq_q")?, col("seq_kv")?, col("head_dim")?, col("time_us_p50")?, col("bytes_moved")?);
    let mut sums: std::collections::BTreeMap<(u64, u64, u64), (f64, f64)> = Default::default();
    for (i, rec) in r.records().enumerate() {
        let rec = rec.map_err(|e| bad(i + 2, e.to_string()))?;
        if rec.get(regime) != Some("decode") {
            continue;
        }
        let num = |c: usize| {
            rec.get(c)
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|v| v.is_finite() && *v > 0.0)
                .ok_or_else(|| bad(i + 2, format!("`{}`", rec.get(c).unwrap_or(""))))
        };
        let key = (num(rows)? as u64, num(keys)? as u64, num(dim)? as u64);
        let e = sums.entry(key).or_insert((0.0, 0.0));
        e.0 += num(bytes)?;
        e.1 += num(time)? * 1e-6;
    }
    Ok(sums
        .into_iter()
        .map(|((rows, seq_kv, head_dim), (b, t))| AttentionDecodePoint { rows, seq_kv, head_dim, bandwidth: BytesPerSec::gb_per_s(b / t / 1e9) })
        .collect())
}

fn pos(p: &mut Problems, path: &Path, key: &str, v: f64) {
    p.check(v.is_finite() && v > 0.0, || ConfigError::invalid(path, key, v, "must be positive"));
}
fn nonneg(p: &mut Problems, path: &Path, key: &str, v: f64) {
    p.check(v.is_finite() && v >= 0.0, || ConfigError::invalid(path, key, v, "must be zero or positive"));
}

impl ProfileFile {
    /// Check every value and build the domain profile; reports every problem at once.
    pub fn to_domain(&self, path: &Path) -> Result<Profile, ConfigError> {
        let mut p = Problems::default();
        p.check(self.schema_version == SCHEMA_VERSION, || {
            ConfigError::invalid(path, "schema_version", self.schema_version, format!("is not supported (this gpuplan reads {SCHEMA_VERSION})"))
        });
        p.check(self.n_gpus >= 1, || ConfigError::invalid(path, "n_gpus", self.n_gpus, "must be at least 1"));
        let mut gemm = Vec::new();
        for (i, g) in self.gemm.iter().enumerate() {
            let key = format!("gemm[{i}]");
            let dtype = Dtype::parse(&g.dtype);
            p.check(dtype.is_some(), || {
                ConfigError::invalid(path, &format!("{key}.dtype"), &g.dtype, "is not a known dtype").with_hint("one of: fp4, fp8, bf16, fp16, tf32, fp32")
            });
            for (k, v) in [("m", g.m), ("n", g.n), ("k", g.k)] {
                p.check(v > 0, || ConfigError::invalid(path, &format!("{key}.{k}"), v, "must be positive"));
            }
            pos(&mut p, path, &format!("{key}.achieved_tflops"), g.achieved_tflops);
            pos(&mut p, path, &format!("{key}.sm_clock_mhz"), g.sm_clock_mhz);
            if let Some(dtype) = dtype {
                gemm.push(GemmPoint { dtype, m: g.m, n: g.n, k: g.k, achieved: FlopsPerSec::tflops(g.achieved_tflops), sm_clock: Hertz::mhz(g.sm_clock_mhz) });
            }
        }
        let mut attention_bmm = Vec::new();
        for (i, a) in self.attention_bmm.iter().enumerate() {
            let key = format!("attention_bmm[{i}]");
            for (k, v) in [("seq_len", a.seq_len), ("head_dim", a.head_dim), ("batch", a.batch)] {
                p.check(v > 0, || ConfigError::invalid(path, &format!("{key}.{k}"), v, "must be positive"));
            }
            for (k, v) in [("qk_tflops", a.qk_tflops), ("pv_tflops", a.pv_tflops), ("achieved_tflops", a.achieved_tflops)] {
                pos(&mut p, path, &format!("{key}.{k}"), v);
            }
            if let Some(c) = a.sm_clock_mhz {
                pos(&mut p, path, &format!("{key}.sm_clock_mhz"), c);
            }
            let twin = self.attention_bmm[..i].iter().any(|b| (b.seq_len, b.head_dim) == (a.seq_len, a.head_dim));
            p.check(!twin, || {
                ConfigError::invalid(path, &key, format!("seq_len = {}, head_dim = {}", a.seq_len, a.head_dim), "appears twice")
                    .with_hint("keep one point per (seq_len, head_dim)")
            });
            attention_bmm.push(AttentionBmmPoint { seq_len: a.seq_len, head_dim: a.head_dim, achieved: FlopsPerSec::tflops(a.achieved_tflops) });
        }
        let mut collectives = Vec::new();
        for (i, c) in self.collectives.iter().enumerate() {
            let key = format!("collectives[{i}]");
            let op = op_from_str(&c.op);
            p.check(op.is_some(), || {
                ConfigError::invalid(path, &format!("{key}.op"), &c.op, "is not a known collective")
                    .with_hint("one of: all_reduce, all_gather, reduce_scatter, all_to_all, send_recv")
            });
            p.check(c.n_ranks >= 2, || ConfigError::invalid(path, &format!("{key}.n_ranks"), c.n_ranks, "must be at least 2"));
            nonneg(&mut p, path, &format!("{key}.latency_us"), c.latency_us);
            pos(&mut p, path, &format!("{key}.busbw_gb_per_s"), c.busbw_gb_per_s);
            if let Some(op) = op {
                collectives.push(CollectiveFit {
                    op,
                    n_ranks: c.n_ranks,
                    intra_node: c.intra_node,
                    latency: Seconds::us(c.latency_us),
                    busbw: BytesPerSec::gb_per_s(c.busbw_gb_per_s),
                });
            }
        }
        let stream = self.stream.as_ref().map(|s| {
            nonneg(&mut p, path, "stream.latency_us", s.latency_us);
            pos(&mut p, path, "stream.bandwidth_gb_per_s", s.bandwidth_gb_per_s);
            StreamFit { latency: Seconds::us(s.latency_us), bandwidth: BytesPerSec::gb_per_s(s.bandwidth_gb_per_s) }
        });
        if let Some(k) = self.kernel_launch_us {
            pos(&mut p, path, "kernel_launch_us", k);
        }
        let power = self.power.as_ref().map(|w| {
            for (k, v) in [
                ("power.idle_w", w.idle_w),
                ("power.gemm_load_w", w.gemm_load_w),
                ("power.gemm_clock_mhz", w.gemm_clock_mhz),
                ("power.hbm_load_w", w.hbm_load_w),
                ("power.power_limit_w", w.power_limit_w),
                ("power.max_clock_mhz", w.max_clock_mhz),
            ] {
                pos(&mut p, path, k, v);
            }
            PowerProfile {
                idle: Watts::new(w.idle_w),
                gemm_load: Watts::new(w.gemm_load_w),
                gemm_clock: Hertz::mhz(w.gemm_clock_mhz),
                hbm_load: Watts::new(w.hbm_load_w),
                power_limit: Watts::new(w.power_limit_w),
                max_clock: Hertz::mhz(w.max_clock_mhz),
            }
        });
        for (i, e) in self.p2p.iter().enumerate() {
            nonneg(&mut p, path, &format!("p2p[{i}].latency_us"), e.latency_us);
            pos(&mut p, path, &format!("p2p[{i}].bandwidth_gb_per_s"), e.bandwidth_gb_per_s);
        }
        for (i, e) in self.elementwise.iter().enumerate() {
            pos(&mut p, path, &format!("elementwise[{i}].achieved_gb_per_s"), e.achieved_gb_per_s);
        }
        p.finish()?;
        Ok(Profile {
            name: self.name.clone(),
            gpu_name: self.gpu_name.clone(),
            n_gpus: self.n_gpus,
            provenance: self.provenance.clone(),
            gemm,
            attention_bmm,
            attention_decode: Vec::new(),
            stream,
            kernel_launch: self.kernel_launch_us.map(Seconds::us),
            collectives,
            power,
            host: None,
            moe: None,
            measured_gpu: None,
        })
    }

    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("profile wire structs always serialize")
    }
}

/// Write `contents` to `path` atomically: a temporary file in the same folder, then a rename.
pub fn write_atomic(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "file".into());
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    std::fs::write(&tmp, contents)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// Every file `gpuplan calibrate` (a measurement or an nccl-tests import) writes into a profile
/// folder: with `--force` these are replaced or, when this run does not write them, removed (a
/// stale `attention.csv` would be read with the new profile); anything else there is left alone.
pub const PROFILE_FILES: &[&str] = &[
    "profile.toml",
    "meta.toml",
    "README.md",
    "launch.csv",
    "hbm.csv",
    "elementwise.csv",
    "gemm.csv",
    "attention.csv",
    "p2p.csv",
    "collectives.csv",
    "power_node.csv",
    "power.csv",
    "power_samples.csv",
];

/// Write a whole profile folder atomically: fill `<dir>.tmp-<pid>`, then rename it into place.
/// An existing folder is replaced only with `force`, and then only the files calibrate writes
/// (`PROFILE_FILES`): each is moved in by a rename, and one of them this run does not write is
/// removed; other files in the folder stay.
pub fn write_profile_dir(dir: &Path, files: &[(String, Vec<u8>)], force: bool) -> Result<(), ProfileWriteError> {
    if dir.exists() && !force {
        return Err(ProfileWriteError::Exists { path: dir.to_path_buf() });
    }
    let parent = dir.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ProfileWriteError::Io { path, source }
    };
    std::fs::create_dir_all(parent).map_err(io(parent))?;
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "profile".into());
    let tmp = parent.join(format!(".{name}.tmp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(io(&tmp))?;
    for (file, bytes) in files {
        let p = tmp.join(file);
        std::fs::write(&p, bytes).map_err(io(&p))?;
    }
    if dir.is_dir() {
        for (file, _) in files {
            std::fs::rename(tmp.join(file), dir.join(file)).map_err(io(&dir.join(file)))?;
        }
        for stale in PROFILE_FILES.iter().filter(|f| !files.iter().any(|(n, _)| n == *f)) {
            let p = dir.join(stale);
            if p.is_file() {
                std::fs::remove_file(&p).map_err(io(&p))?;
            }
        }
        let _ = std::fs::remove_dir_all(&tmp);
    } else if dir.exists() {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(ProfileWriteError::NotAFolder { path: dir.to_path_buf() });
    } else {
        std::fs::rename(&tmp, dir).map_err(io(dir))?;
    }
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum ProfileWriteError {
    #[error("`{path}` already exists\nhint: pass `--force` to replace it, or choose another `--name`")]
    Exists { path: PathBuf },
    #[error("cannot write `{path}`")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("`{path}` exists and is not a folder\nhint: choose another `--name` or `--out-dir`")]
    NotAFolder { path: PathBuf },
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> ProfileFile {
        ProfileFile {
            schema_version: 1,
            name: "test".into(),
            gpu_name: "NVIDIA H200".into(),
            n_gpus: 2,
            provenance: "unit test".into(),
            kernel_launch_us: Some(2.5),
            stream: Some(StreamWire { latency_us: 3.0, bandwidth_gb_per_s: 4200.0, fitted_on: "copy".into() }),
            l2: None,
            power: Some(PowerWire { idle_w: 90.0, gemm_load_w: 690.0, gemm_clock_mhz: 1500.0, hbm_load_w: 450.0, power_limit_w: 700.0, max_clock_mhz: 1980.0 }),
            power_activity: None,
            power_phases: vec![],
            collectives: vec![CollectiveWire {
                op: "all_reduce".into(),
                n_ranks: 2,
                intra_node: true,
                latency_us: 12.0,
                busbw_gb_per_s: 340.0,
                peak_busbw_gb_per_s: 346.0,
                min_size_bytes: 8,
                max_size_bytes: 4 << 30,
                n_points: 30,
                rms_rel_err: 0.1,
                source: "calibrate".into(),
            }],
            p2p: vec![],
            elementwise: vec![],
            gemm: vec![GemmWire { dtype: "bf16".into(), m: 8192, n: 8192, k: 8192, achieved_tflops: 790.0, sm_clock_mhz: 1980.0 }],
            attention_bmm: vec![],
        }
    }

    fn attention_point(seq_len: u64, head_dim: u64, achieved_tflops: f64) -> AttentionBmmWire {
        AttentionBmmWire {
            seq_len,
            head_dim,
            batch: (1 << 29) / (seq_len * seq_len),
            qk_tflops: achieved_tflops * 0.8,
            pv_tflops: achieved_tflops * 1.3,
            achieved_tflops,
            sm_clock_mhz: Some(1500.0),
        }
    }

    #[test]
    fn the_attention_table_round_trips_through_toml() {
        let mut f = sample();
        f.attention_bmm = vec![attention_point(512, 64, 350.0), attention_point(8192, 128, 610.0)];
        f.attention_bmm[0].sm_clock_mhz = None;
        let text = f.to_toml();
        assert!(text.contains("[[attention_bmm]]"), "{text}");
        let back: ProfileFile = parse_toml(Path::new("p.toml"), &text).unwrap();
        assert_eq!(back, f);
        let d = back.to_domain(Path::new("p.toml")).unwrap();
        let got: Vec<(u64, u64, f64)> = d.attention_bmm.iter().map(|a| (a.seq_len, a.head_dim, a.achieved.as_tflops())).collect();
        assert_eq!(got, vec![(512, 64, 350.0), (8192, 128, 610.0)]);
    }

    #[test]
    fn profiles_without_the_attention_table_still_load() {
        // A profile as written before the table existed: no `attention_bmm` key at all.
        let text = sample().to_toml();
        assert!(!text.contains("attention_bmm"));
        let back: ProfileFile = parse_toml(Path::new("p.toml"), &text).unwrap();
        let d = back.to_domain(Path::new("p.toml")).unwrap();
        assert!(d.attention_bmm.is_empty());
        assert_eq!(d.gemm.len(), 1);
    }

    #[test]
    fn bad_attention_points_are_reported() {
        let mut f = sample();
        f.attention_bmm =
            vec![attention_point(8192, 128, 610.0), attention_point(8192, 128, 600.0), AttentionBmmWire { seq_len: 0, ..attention_point(512, 64, -1.0) }];
        let e = f.to_domain(Path::new("p.toml")).unwrap_err().to_string();
        assert!(e.contains("`attention_bmm[1]`") && e.contains("appears twice"), "{e}");
        assert!(e.contains("`attention_bmm[2].seq_len` = `0` must be positive"), "{e}");
        assert!(e.contains("`attention_bmm[2].achieved_tflops` = `-1` must be positive"), "{e}");
        // Unknown keys inside a point are rejected like everywhere else.
        let point = "\n[[attention_bmm]]\nseq_len = 512\nhead_dim = 64\nbatch = 2048\nqk_tflops = 1.0\npv_tflops = 1.0\nachieved_tflops = 1.0\n";
        let good = format!("{}{point}", sample().to_toml());
        assert!(parse_toml::<ProfileFile>(Path::new("p.toml"), &good).is_ok());
        let bad = format!("{}{point}seq = 3\n", sample().to_toml());
        assert!(parse_toml::<ProfileFile>(Path::new("p.toml"), &bad).is_err());
    }

    #[test]
    fn round_trips_through_toml() {
        let f = sample();
        let text = f.to_toml();
        let back: ProfileFile = parse_toml(Path::new("p.toml"), &text).unwrap();
        assert_eq!(back, f);
        let d = back.to_domain(Path::new("p.toml")).unwrap();
        assert_eq!(d.collectives[0].op, CollectiveOp::AllReduce);
        assert!((d.gemm[0].achieved.as_tflops() - 790.0).abs() < 1e-9);
        assert!((d.stream.unwrap().bandwidth.as_gb_per_s() - 4200.0).abs() < 1e-9);
    }

    #[test]
    fn reports_every_bad_value() {
        let mut f = sample();
        f.gemm[0].dtype = "bf17".into();
        f.collectives[0].busbw_gb_per_s = -1.0;
        let e = f.to_domain(Path::new("p.toml")).unwrap_err().to_string();
        assert!(e.contains("`gemm[0].dtype` = `bf17` is not a known dtype"), "{e}");
        assert!(e.contains("`collectives[0].busbw_gb_per_s` = `-1` must be positive"), "{e}");
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let text = sample().to_toml().replace("n_gpus = 2", "n_gpus = 2\nn_gpu = 3");
        assert!(parse_toml::<ProfileFile>(Path::new("p.toml"), &text).is_err());
    }

    #[test]
    fn profile_dirs_are_not_overwritten_without_force() {
        let base = std::env::temp_dir().join(format!("gpuplan-profile-test-{}", std::process::id()));
        let dir = base.join("p");
        let files = vec![("profile.toml".to_string(), sample().to_toml().into_bytes())];
        write_profile_dir(&dir, &files, false).unwrap();
        assert!(matches!(write_profile_dir(&dir, &files, false), Err(ProfileWriteError::Exists { .. })));
        write_profile_dir(&dir, &files, true).unwrap();
        let loaded = load_profile(&dir).unwrap();
        assert_eq!(loaded.n_gpus, 2);
        let leftovers: Vec<_> = std::fs::read_dir(&base).unwrap().filter_map(|e| e.ok()).map(|e| e.file_name()).collect();
        assert_eq!(leftovers.len(), 1, "{leftovers:?}");
        // `--force` replaces only calibrate's files: a note of the user's stays, a stale
        // attention table of an earlier run goes.
        std::fs::write(dir.join("notes.txt"), "mine").unwrap();
        std::fs::write(dir.join("attention.csv"), "stale").unwrap();
        write_profile_dir(&dir, &files, true).unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("notes.txt")).unwrap(), "mine");
        assert!(!dir.join("attention.csv").exists());
        let leftovers: Vec<_> = std::fs::read_dir(&base).unwrap().filter_map(|e| e.ok()).map(|e| e.file_name()).collect();
        assert_eq!(leftovers.len(), 1, "{leftovers:?}");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
