//! `calibrate --host`: the framework's host costs on this node. Runs the probe shipped in the
//! repository (`scenarios/workloads/host_probe.py`: PyTorch and transformers timing the pieces of
//! a decode step with the GPU nearly idle), or reads a table it printed before (`--host-from`), and
//! fits `host.toml` (`config::profile::HostFile`) from its rows:
//! - `hf_decode_layer_us`, `hf_decode_fixed_us`: the line through the `hf_decode_step` rows (a
//!   whole one-token step of a small transformers Llama at two depths, flash backend): slope per
//!   layer and intercept;
//! - `hf_generate_layer_us`, `hf_generate_fixed_us`: the same line through the `hf_generate_step`
//!   rows, less the loop's;
//! - `sdpa_cudnn_plan_us`: the median over the probed shapes of `sdpa_decode_new` less
//!   `sdpa_decode_same` of the same shape (an attention call whose KV length is new, less one of a
//!   known length: cuDNN's execution-plan build);
//! - `op_dispatch_us`: the `op_dispatch` row.
//!
//! Nothing is fitted on run records here: these are the probe's own timings.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use gpuplan_config::profile::HostFile;

/// The probe script, relative to the repository root (the current directory when it runs).
pub const PROBE_SCRIPT: &str = "scenarios/workloads/host_probe.py";

#[derive(Debug, thiserror::Error)]
pub enum HostProbeError {
    #[error("could not start `python3 {script}`: {source}\nhint: `calibrate --host` runs the probe with the node's Python, which needs torch and transformers; run it from the repository root")]
    Spawn { script: String, source: std::io::Error },
    #[error("`python3 {script}` failed ({status}):\n{stderr}")]
    Failed { script: String, status: String, stderr: String },
    #[error("host probe table, line {line}: {problem}\nhint: give the CSV that scenarios/workloads/host_probe.py printed, unchanged")]
    Table { line: usize, problem: String },
}

/// Run the probe; its stdout (the table).
pub fn run_probe(script: &Path, quick: bool) -> Result<String, HostProbeError> {
    let mut cmd = Command::new("python3");
    cmd.arg(script);
    if quick {
        cmd.arg("--quick");
    }
    let out = cmd.output().map_err(|source| HostProbeError::Spawn { script: script.display().to_string(), source })?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(20).collect();
        return Err(HostProbeError::Failed {
            script: script.display().to_string(),
            status: out.status.to_string(),
            stderr: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[derive(Debug, Clone, PartialEq)]
struct Row {
    probe: String,
    shape: (u64, u64, u64, u64),
    layers: u64,
    us: f64,
}

/// The probe's rows (lines starting with `#` are its notes; the header is skipped).
fn rows(table: &str) -> Result<Vec<Row>, HostProbeError> {
    let mut out = Vec::new();
    let mut r = csv::ReaderBuilder::new().has_headers(false).flexible(true).comment(Some(b'#')).from_reader(table.as_bytes());
    for (i, rec) in r.records().enumerate() {
        let line = i + 1;
        let rec = rec.map_err(|e| HostProbeError::Table { line, problem: e.to_string() })?;
        if rec.get(0) == Some("probe") {
            continue;
        }
        if rec.len() != 9 {
            return Err(HostProbeError::Table {
                line,
                problem: format!("{} columns, expected 9 (probe,detail,b,hq,hkv,d,layers,us_per_call,n_calls)", rec.len()),
            });
        }
        let num = |k: usize| -> Result<f64, HostProbeError> {
            let v = rec[k].trim();
            v.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x >= 0.0)
                .ok_or_else(|| HostProbeError::Table { line, problem: format!("column {} = `{v}` is not a number 0 or more", k + 1) })
        };
        out.push(Row {
            probe: rec[0].to_string(),
            shape: (num(2)? as u64, num(3)? as u64, num(4)? as u64, num(5)? as u64),
            layers: num(6)? as u64,
            us: num(7)?,
        });
    }
    Ok(out)
}

/// Slope and intercept of the line through the two depths of `probe`.
fn line(rows: &[Row], probe: &str) -> Result<(f64, f64), HostProbeError> {
    let pts: Vec<&Row> = rows.iter().filter(|r| r.probe == probe).collect();
    let (a, b) = match (pts.iter().min_by_key(|r| r.layers), pts.iter().max_by_key(|r| r.layers)) {
        (Some(a), Some(b)) if a.layers != b.layers => (a, b),
        _ => return Err(HostProbeError::Table { line: 0, problem: format!("needs `{probe}` rows at two depths") }),
    };
    let slope = (b.us - a.us) / (b.layers - a.layers) as f64;
    Ok((slope, a.us - slope * a.layers as f64))
}

/// `host.toml` from the probe's table.
pub fn fit(table: &str, provenance: &str) -> Result<HostFile, HostProbeError> {
    let rows = rows(table)?;
    let (layer, fixed) = line(&rows, "hf_decode_step")?;
    let (g_layer, g_fixed) = line(&rows, "hf_generate_step")?;
    let mut same: BTreeMap<(u64, u64, u64, u64), f64> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.probe == "sdpa_decode_same") {
        same.insert(r.shape, r.us);
    }
    let mut plans: Vec<f64> = rows.iter().filter(|r| r.probe == "sdpa_decode_new").filter_map(|r| same.get(&r.shape).map(|s| (r.us - s).max(0.0))).collect();
    if plans.is_empty() {
        return Err(HostProbeError::Table { line: 0, problem: "needs `sdpa_decode_new` and `sdpa_decode_same` rows of the same shapes".into() });
    }
    plans.sort_by(f64::total_cmp);
    let n = plans.len();
    let plan = if n % 2 == 1 { plans[n / 2] } else { 0.5 * (plans[n / 2 - 1] + plans[n / 2]) };
    let dispatch =
        rows.iter().find(|r| r.probe == "op_dispatch").map(|r| r.us).ok_or(HostProbeError::Table { line: 0, problem: "no `op_dispatch` row".into() })?;
    Ok(HostFile {
        schema_version: 1,
        provenance: provenance.to_string(),
        hf_decode_layer_us: layer,
        hf_decode_fixed_us: fixed,
        hf_generate_layer_us: (g_layer - layer).max(0.0),
        hf_generate_fixed_us: (g_fixed - fixed).max(0.0),
        sdpa_cudnn_plan_us: plan,
        op_dispatch_us: dispatch,
        fitted_on: format!(
            "host.csv: hf_decode_step and hf_generate_step rows (line through two depths), the median of sdpa_decode_new - sdpa_decode_same over {n} shapes, op_dispatch"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "probe,detail,b,hq,hkv,d,layers,us_per_call,n_calls\n\
# gpu=X\n\
op_dispatch,\"torch.add\",0,0,0,0,0,10.0,100\n\
sdpa_decode_new,\"a\",1,32,8,64,0,50000,40\n\
sdpa_decode_same,\"a\",1,32,8,64,0,80,40\n\
sdpa_decode_new,\"b\",1,24,8,128,0,60000,40\n\
sdpa_decode_same,\"b\",1,24,8,128,0,100,40\n\
sdpa_decode_new,\"c\",1,16,8,128,0,40000,40\n\
sdpa_decode_same,\"c\",1,16,8,128,0,100,40\n\
hf_decode_step,\"s\",1,4,2,64,2,2000,40\n\
hf_generate_step,\"g\",1,4,2,64,2,2400,40\n\
hf_decode_step,\"s\",1,4,2,64,10,7200,40\n\
hf_generate_step,\"g\",1,4,2,64,10,8000,40\n";

    #[test]
    fn fits_lines_and_the_plan_median() {
        let f = fit(TABLE, "test").unwrap();
        assert!((f.hf_decode_layer_us - 650.0).abs() < 1e-9);
        assert!((f.hf_decode_fixed_us - 700.0).abs() < 1e-9);
        assert!((f.hf_generate_layer_us - 50.0).abs() < 1e-9);
        assert!((f.hf_generate_fixed_us - 300.0).abs() < 1e-9);
        assert!((f.sdpa_cudnn_plan_us - 49920.0).abs() < 1e-9);
        assert_eq!(f.op_dispatch_us, 10.0);
    }

    #[test]
    fn a_broken_table_names_its_line() {
        let bad = "probe,detail,b,hq,hkv,d,layers,us_per_call,n_calls\nop_dispatch,x,0,0,0,0,0,abc,1\n";
        let e = fit(bad, "t").unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("`abc`"), "{e}");
        let missing = "op_dispatch,x,0,0,0,0,0,1,1\n";
        assert!(fit(missing, "t").unwrap_err().to_string().contains("hf_decode_step"));
    }
}
