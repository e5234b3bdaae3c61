//! `moe.toml` and `moe.csv` beside a profile's `profile.toml`: what `calibrate --moe` measured
//! (scenarios/workloads/moe_probe.py's table, kept verbatim in `moe.csv`; `moe.toml` says where and
//! when). Loaded into `Profile::moe`; `cost::grouped` reads it.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{parse_toml, read_file, ConfigError, Problems};
use gpuplan_core::hardware::profile::{GroupedGemmPoint, GroupedKernel, GroupedLayout, MoeIndexKernel, MoeIndexPoint, MoeKernels};
use gpuplan_core::hardware::Dtype;
use gpuplan_core::units::Seconds;

/// The file beside a profile's `profile.toml` that `calibrate --moe` writes.
pub const MOE_FILE: &str = "moe.toml";
/// The probe's table, beside it.
pub const MOE_TABLE: &str = "moe.csv";
/// The table's header, as the probe prints it.
pub const MOE_HEADER: &str = "probe,dtype,layout,experts,tokens,k,n,top_k,gpu_us,wall_us,flops,bytes,reps";

const HINT: &str = "write it again with `gpuplan calibrate --moe` (or `--moe-from` the probe's table, unchanged)";

/// `moe.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoeFile {
    pub schema_version: u32,
    /// Machine, date, software and command.
    pub provenance: String,
    /// Rows of `moe.csv` read: grouped GEMMs and index kernels.
    pub grouped_rows: usize,
    pub index_rows: usize,
}

/// Read `moe.toml` and the `moe.csv` beside it.
pub fn load(toml_path: &Path) -> Result<MoeKernels, ConfigError> {
    let text = read_file(toml_path)?;
    let wire: MoeFile = parse_toml(toml_path, &text)?;
    if wire.schema_version != 1 {
        return Err(ConfigError::invalid(toml_path, "schema_version", wire.schema_version, "is not supported (this gpuplan reads 1)").with_hint(HINT));
    }
    let csv_path = toml_path.with_file_name(MOE_TABLE);
    let table = read_file(&csv_path)?;
    let (grouped, index) = parse_table(&csv_path, &table)?;
    if grouped.len() != wire.grouped_rows || index.len() != wire.index_rows {
        return Err(ConfigError::invalid(
            toml_path,
            "grouped_rows, index_rows",
            format!("{}, {}", wire.grouped_rows, wire.index_rows),
            format!("do not match `{}` ({} and {} rows)", csv_path.display(), grouped.len(), index.len()),
        )
        .with_hint(HINT));
    }
    Ok(MoeKernels { provenance: wire.provenance, grouped, index })
}

/// The probe's table: grouped GEMM rows and index-kernel rows (`#` lines are its notes). Every bad
/// row is reported with its line, column and value.
pub fn parse_table(path: &Path, table: &str) -> Result<(Vec<GroupedGemmPoint>, Vec<MoeIndexPoint>), ConfigError> {
    let mut p = Problems::default();
    let (mut grouped, mut index) = (Vec::new(), Vec::new());
    let mut header_seen = false;
    for (i, line) in table.lines().enumerate() {
        let ln = i + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if !header_seen {
            if line != MOE_HEADER {
                return Err(ConfigError::invalid(path, &format!("line {ln}"), line, format!("is not the probe's header `{MOE_HEADER}`")).with_hint(HINT));
            }
            header_seen = true;
            continue;
        }
        let c: Vec<&str> = line.split(',').collect();
        if c.len() != 13 {
            p.push(ConfigError::invalid(path, &format!("line {ln}"), line, format!("has {} columns, expected 13", c.len())).with_hint(HINT));
            continue;
        }
        let bad = |col: &str, v: &str, what: &str| ConfigError::invalid(path, &format!("line {ln}, column `{col}`"), v, what.to_string()).with_hint(HINT);
        let count = |j: usize, col: &str| -> Result<u64, ConfigError> {
            c[j].parse::<u64>().ok().filter(|v| *v >= 1).ok_or_else(|| bad(col, c[j], "must be a whole number, 1 or more"))
        };
        let micros = |j: usize, col: &str| -> Result<f64, ConfigError> {
            c[j].parse::<f64>().ok().filter(|v| v.is_finite() && *v > 0.0).ok_or_else(|| bad(col, c[j], "must be a positive number of microseconds"))
        };
        let row = (|| -> Result<(), ConfigError> {
            if let Some(kernel) = GroupedKernel::ALL.into_iter().find(|k| k.name() == c[0]) {
                let dtype = match c[1] {
                    "bf16" => Dtype::Bf16,
                    "fp32" => Dtype::Fp32,
                    "fp8" => Dtype::Fp8,
                    v => return Err(bad("dtype", v, "is not bf16, fp32 or fp8")),
                };
                let layout = match c[2] {
                    "mk" => GroupedLayout::Mk,
                    "k" => GroupedLayout::K,
                    v => return Err(bad("layout", v, "is not mk or k")),
                };
                // The fallback's wall clock (host launches included) where the probe took it.
                let time = if c[9].is_empty() { micros(8, "gpu_us")? } else { micros(9, "wall_us")? };
                grouped.push(GroupedGemmPoint {
                    kernel,
                    dtype,
                    layout,
                    experts: count(3, "experts")?,
                    tokens: count(4, "tokens")?,
                    k: count(5, "k")?,
                    n: count(6, "n")?,
                    time: Seconds::us(time),
                });
            } else if let Some(kernel) = MoeIndexKernel::parse(c[0]) {
                let bytes = c[11].parse::<f64>().ok().filter(|v| v.is_finite() && *v > 0.0).ok_or_else(|| bad("bytes", c[11], "must be a positive number"))?;
                index.push(MoeIndexPoint {
                    kernel,
                    experts: count(3, "experts")?,
                    tokens: count(4, "tokens")?,
                    hidden: count(5, "k")?,
                    top_k: count(7, "top_k")?,
                    time: Seconds::us(micros(8, "gpu_us")?),
                    bytes,
                });
            } else {
                return Err(bad("probe", c[0], "is not a kernel the MoE probe times (grouped_mm, bmm, scaled_grouped_mm, or an index kernel)"));
            }
            Ok(())
        })();
        if let Err(e) = row {
            p.push(e);
        }
    }
    if !header_seen {
        p.push(ConfigError::invalid(path, "header", "", format!("no `{MOE_HEADER}` line")).with_hint(HINT));
    }
    p.finish()?;
    Ok((grouped, index))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_rows_and_names_a_bad_one() {
        let t = format!(
            "{MOE_HEADER}\n# gpu=X\ngrouped_mm,bf16,mk,64,256,2048,1536,0,208.995,,1e11,5e8,50\ngrouped_mm,fp32,k,8,16,2048,1536,0,180.0,200.0,1e9,1e8,10\ngather_rows,bf16,,8,4096,2048,0,2,20.5,,0,3.4e7,20\n"
        );
        let (g, i) = parse_table(Path::new("moe.csv"), &t).unwrap();
        assert_eq!(g.len(), 2);
        assert_eq!(g[1].time, Seconds::us(200.0), "the fallback's wall clock is its time");
        assert_eq!((i[0].kernel, i[0].hidden, i[0].top_k), (MoeIndexKernel::GatherRows, 2048, 2));
        let bad = t.replace("grouped_mm,fp32,k", "grouped_mm,fp64,k").replace("gather_rows", "gather_rowz");
        let e = parse_table(Path::new("moe.csv"), &bad).unwrap_err().to_string();
        assert!(e.contains("line 4, column `dtype`") && e.contains("`fp64`"), "{e}");
        assert!(e.contains("line 5, column `probe`") && e.contains("`gather_rowz`"), "{e}");
        let e = parse_table(Path::new("moe.csv"), "a,b\n").unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("header"), "{e}");
    }
}
