//! `calibrate --moe`: grouped GEMMs and MoE index kernels on this node. Runs the probe shipped
//! inside the binary (`scenarios/workloads/moe_probe.py`, compiled in with `include_str!` and
//! written to a temporary file, so it runs from any directory) with the node's Python and PyTorch,
//! or reads a table it printed before (`--moe-from`), checks every row
//! (`config::moe::parse_table`) and returns `moe.toml` (`config::moe::MoeFile`) for the table,
//! which is kept verbatim as `moe.csv`. Nothing is fitted: `cost::grouped` reads the times.

use std::path::Path;
use std::process::Command;

use gpuplan_config::moe::{parse_table, MoeFile};
use gpuplan_config::ConfigError;

/// The probe, as shipped.
pub const PROBE: &str = include_str!("../../../../scenarios/workloads/moe_probe.py");
/// Where it lives in the repository (for provenance lines).
pub const PROBE_SCRIPT: &str = "scenarios/workloads/moe_probe.py";

#[derive(Debug, thiserror::Error)]
pub enum MoeProbeError {
    #[error("could not write the MoE probe to `{path}`: {source}")]
    Write { path: String, source: std::io::Error },
    #[error("could not start `python3 {script}`: {source}\nhint: `calibrate --moe` runs the probe with the node's Python, which needs torch (2.9 or later) on a CUDA GPU")]
    Spawn { script: String, source: std::io::Error },
    #[error("`python3 {script}` failed ({status}):\n{stderr}\nhint: give `--moe-from` a table the probe printed before, or fix the node's Python")]
    Failed { script: String, status: String, stderr: String },
}

/// Run the shipped probe (`--quick`: a few shapes, under a minute); its stdout (the table).
pub fn run_probe(quick: bool) -> Result<String, MoeProbeError> {
    let dir = std::env::temp_dir().join(format!("gpuplan-moe-probe-{}", std::process::id()));
    let script = dir.join("moe_probe.py");
    let write = |e: std::io::Error| MoeProbeError::Write { path: script.display().to_string(), source: e };
    std::fs::create_dir_all(&dir).map_err(write)?;
    std::fs::write(&script, PROBE).map_err(write)?;
    let mut cmd = Command::new("python3");
    cmd.arg(&script);
    if quick {
        cmd.arg("--quick");
    }
    let out = cmd.output();
    let _ = std::fs::remove_dir_all(&dir);
    let out = out.map_err(|source| MoeProbeError::Spawn { script: PROBE_SCRIPT.into(), source })?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(20).collect();
        return Err(MoeProbeError::Failed {
            script: PROBE_SCRIPT.into(),
            status: out.status.to_string(),
            stderr: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `moe.toml` for the probe's `table` (checked row by row; `path` names it in errors).
pub fn fit(path: &Path, table: &str, provenance: &str) -> Result<MoeFile, ConfigError> {
    let (grouped, index) = parse_table(path, table)?;
    Ok(MoeFile { schema_version: 1, provenance: provenance.to_string(), grouped_rows: grouped.len(), index_rows: index.len() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_probe_prints_the_header_the_reader_expects() {
        assert!(PROBE.contains(&format!("HEADER = \"{}\"", gpuplan_config::moe::MOE_HEADER)));
    }

    #[test]
    fn counts_rows() {
        let t =
            format!("{}\ngrouped_mm,bf16,mk,8,16,2048,1536,0,30.0,,1e9,1e8,50\ncumsum,bf16,,8,4096,2048,0,2,5.0,,0,64,20\n", gpuplan_config::moe::MOE_HEADER);
        let f = fit(Path::new("t.csv"), &t, "p").unwrap();
        assert_eq!((f.grouped_rows, f.index_rows), (1, 1));
    }
}
