//! Reading nccl-tests output logs (`all_reduce_perf` and friends), so users can calibrate a
//! multi-node fabric from runs they already have.
//!
//! The op comes from the `# Collective test starting: all_reduce_perf` line newer versions print,
//! or else from the file name (`all_reduce`, `all_gather`, `reduce_scatter`, `alltoall`,
//! `sendrecv`). Ranks are the `#  Rank  N Group ... on HOST device ...` lines; intra-node when all
//! name one host. Rows use the out-of-place time.

use std::path::Path;

use gpuplan_core::hardware::profile::CollectiveOp;

#[derive(Debug, Clone, PartialEq)]
pub struct NcclTestsRow {
    pub size_bytes: u64,
    pub time_us: f64,
    pub algbw_gb_per_s: f64,
    pub busbw_gb_per_s: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NcclTestsRun {
    pub op: CollectiveOp,
    pub n_ranks: u32,
    pub n_hosts: u32,
    /// The device name of rank 0, as the log prints it.
    pub gpu_name: Option<String>,
    pub rows: Vec<NcclTestsRow>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum NcclTestsError {
    #[error("{path}: cannot tell which collective this log measured\nhint: name the file after the test (e.g. `all_reduce_perf.log`), or keep the `# Collective test starting:` line")]
    UnknownOp { path: String },
    #[error("{path}: no `#  Rank` lines, so the number of ranks is unknown\nhint: import the whole log as nccl-tests printed it")]
    NoRanks { path: String },
    #[error("{path}:{line}:{column}: `{field}` = `{value}` {why} in the result row `{text}`\nhint: import the log as nccl-tests printed it; a row with NaN, a negative or a word in a number column is not a measurement")]
    BadRow { path: String, line: usize, column: usize, field: &'static str, value: String, text: String, why: &'static str },
    #[error("{path}: no result rows")]
    Empty { path: String },
}

pub fn op_from_name(s: &str) -> Option<CollectiveOp> {
    let s = s.to_ascii_lowercase().replace('-', "_");
    // Order matters: "reduce_scatter" contains "reduce", "all_reduce" is checked first by name.
    if s.contains("all_reduce") || s.contains("allreduce") {
        Some(CollectiveOp::AllReduce)
    } else if s.contains("reduce_scatter") || s.contains("reducescatter") {
        Some(CollectiveOp::ReduceScatter)
    } else if s.contains("all_gather") || s.contains("allgather") {
        Some(CollectiveOp::AllGather)
    } else if s.contains("alltoall") || s.contains("all_to_all") {
        Some(CollectiveOp::AllToAll)
    } else if s.contains("sendrecv") || s.contains("send_recv") {
        Some(CollectiveOp::SendRecv)
    } else {
        None
    }
}

/// Parse one log. A log holding several tests (one after another, each with its own
/// `Collective test starting` line) gives several runs.
pub fn parse(path: &Path, text: &str) -> Result<Vec<NcclTestsRun>, NcclTestsError> {
    let p = path.display().to_string();
    let file_op = path.file_name().and_then(|n| op_from_name(&n.to_string_lossy()));
    let mut ranks: Vec<String> = Vec::new(); // host of each rank line
    let mut gpu_name: Option<String> = None;
    let mut runs: Vec<NcclTestsRun> = Vec::new();
    let mut cur_op: Option<CollectiveOp> = None;
    let mut cur_rows: Vec<NcclTestsRow> = Vec::new();
    let flush = |op: Option<CollectiveOp>,
                 rows: &mut Vec<NcclTestsRow>,
                 ranks: &[String],
                 gpu_name: &Option<String>,
                 runs: &mut Vec<NcclTestsRun>|
     -> Result<(), NcclTestsError> {
        if rows.is_empty() {
            return Ok(());
        }
        let op = op.or(file_op).ok_or_else(|| NcclTestsError::UnknownOp { path: p.clone() })?;
        if ranks.is_empty() {
            return Err(NcclTestsError::NoRanks { path: p.clone() });
        }
        let mut hosts: Vec<&String> = ranks.iter().collect();
        hosts.sort();
        hosts.dedup();
        runs.push(NcclTestsRun { op, n_ranks: ranks.len() as u32, n_hosts: hosts.len() as u32, gpu_name: gpu_name.clone(), rows: std::mem::take(rows) });
        Ok(())
    };
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix('#') {
            let rest = rest.trim();
            if let Some(name) = rest.strip_prefix("Collective test starting:") {
                flush(cur_op, &mut cur_rows, &ranks, &gpu_name, &mut runs)?;
                cur_op = op_from_name(name.trim());
            } else if rest.starts_with("Rank") {
                let toks: Vec<&str> = rest.split_whitespace().collect();
                let host = toks.iter().position(|w| *w == "on").and_then(|k| toks.get(k + 1)).map(|h| h.to_string()).unwrap_or_default();
                // Each new test reprints its rank list; keep the latest list.
                if toks.get(1) == Some(&"0") {
                    ranks.clear();
                    gpu_name = rest.split_once(']').map(|(_, n)| n.trim().to_string()).filter(|n| !n.is_empty());
                }
                ranks.push(host);
            }
            continue;
        }
        let toks: Vec<&str> = t.split_whitespace().collect();
        // A result row starts with its size and count. A line that looks like one (a number,
        // NaN or a sign in either of its first two columns) is read in full or refused: never
        // used with a nonsense value, never dropped silently.
        let numberish = |s: &str| s.parse::<f64>().is_ok() || s.starts_with('-') || s.starts_with('+');
        if toks.len() < 6 || !(numberish(toks[0]) || numberish(toks[1])) {
            continue;
        }
        let column = |tok: &str| line[..(tok.as_ptr() as usize - line.as_ptr() as usize)].chars().count() + 1;
        let bad = |k: usize, field: &'static str, why: &'static str| {
            let tok = toks.get(k).copied().unwrap_or("");
            let col = if tok.is_empty() { line.chars().count() + 1 } else { column(tok) };
            NcclTestsError::BadRow { path: p.clone(), line: i + 1, column: col, field, value: tok.to_string(), text: t.to_string(), why }
        };
        let size: u64 = toks[0].parse().map_err(|_| bad(0, "size", "is not a whole number of bytes"))?;
        let _count: u64 = toks[1].parse().map_err(|_| bad(1, "count", "is not a whole number of elements"))?;
        // size count type redop [root] time algbw busbw #wrong [time algbw busbw #wrong]
        let rest = toks.len().saturating_sub(4);
        let off = match rest {
            9 | 5 => 1, // with a root column
            8 | 4 => 0,
            _ => return Err(bad(toks.len() - 1, "columns", "ends a row of the wrong width (expected 8 to 13 columns)")),
        };
        let num = |k: usize, field: &'static str, time: bool| -> Result<f64, NcclTestsError> {
            let at = 4 + off + k;
            let v = toks.get(at).and_then(|s| s.parse::<f64>().ok()).ok_or_else(|| bad(at, field, "is not a number"))?;
            match (v.is_finite(), time) {
                (false, _) => Err(bad(at, field, "is not finite")),
                (true, true) if v <= 0.0 => Err(bad(at, field, "must be positive (microseconds)")),
                (true, false) if v < 0.0 => Err(bad(at, field, "must not be negative (GB/s)")),
                _ => Ok(v),
            }
        };
        cur_rows.push(NcclTestsRow {
            size_bytes: size,
            time_us: num(0, "time", true)?,
            algbw_gb_per_s: num(1, "algbw", false)?,
            busbw_gb_per_s: num(2, "busbw", false)?,
        });
    }
    flush(cur_op, &mut cur_rows, &ranks, &gpu_name, &mut runs)?;
    if runs.is_empty() {
        return Err(NcclTestsError::Empty { path: p });
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "\
# nThread 1 nGpus 1 minBytes 8 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid   1001 on     node-a device  0 [0x18] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid   1002 on     node-a device  1 [0x2a] NVIDIA H100 80GB HBM3
#  Rank  2 Group  0 Pid   1003 on     node-b device  0 [0x18] NVIDIA H100 80GB HBM3
#  Rank  3 Group  0 Pid   1004 on     node-b device  1 [0x2a] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2     float     sum      -1    35.05    0.00    0.00      0    34.54    0.00    0.00      0
  1073741824     268435456     float     sum      -1   9000.0  119.30  178.96      0   8990.0  119.44  179.16      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 89.48
";

    #[test]
    fn parses_rows_ranks_and_hosts() {
        let runs = parse(Path::new("logs/all_reduce_perf.log"), LOG).unwrap();
        assert_eq!(runs.len(), 1);
        let r = &runs[0];
        assert_eq!((r.op, r.n_ranks, r.n_hosts), (CollectiveOp::AllReduce, 4, 2));
        assert_eq!(r.rows.len(), 2);
        assert_eq!(r.gpu_name.as_deref(), Some("NVIDIA H100 80GB HBM3"));
        assert_eq!(r.rows[1], NcclTestsRow { size_bytes: 1073741824, time_us: 9000.0, algbw_gb_per_s: 119.30, busbw_gb_per_s: 178.96 });
    }

    /// Issue 22: NaN, negative or text in a row is refused with its line and column.
    #[test]
    fn nonsense_rows_are_refused_with_line_and_column() {
        let row = "  1073741824     268435456     float     sum      -1   9000.0  119.30  178.96      0   8990.0  119.44  179.16      0";
        for (from, to, field) in [
            ("9000.0", "NaN", "time"),
            ("119.30", "-119.30", "algbw"),
            ("178.96", "fast", "busbw"),
            ("1073741824", "-8", "size"),
            ("1073741824", "nan", "size"),
        ] {
            let text = LOG.replace(row, &row.replacen(from, to, 1));
            let e = parse(Path::new("all_reduce_perf.log"), &text).unwrap_err();
            let NcclTestsError::BadRow { line, column, field: f, value, .. } = &e else { panic!("{e}") };
            assert_eq!((*line, *f, value.as_str()), (13, field, to), "{e}");
            assert_eq!(&row.replacen(from, to, 1)[*column - 1..][..to.len()], to, "{e}");
            assert!(e.to_string().contains("all_reduce_perf.log:13:"), "{e}");
        }
    }

    #[test]
    fn op_from_the_starting_line_wins() {
        let text = format!("# Collective test starting: all_gather_perf\n{LOG}");
        let runs = parse(Path::new("x/all_reduce.txt"), &text).unwrap();
        assert_eq!(runs[0].op, CollectiveOp::AllGather);
    }

    #[test]
    fn errors_say_what_is_missing() {
        let e = parse(Path::new("run.log"), LOG).unwrap_err();
        assert_eq!(e, NcclTestsError::UnknownOp { path: "run.log".into() });
        assert!(e.to_string().contains("hint: name the file after the test"), "{e}");
        let no_ranks: String = LOG.lines().filter(|l| !l.contains("Rank")).map(|l| format!("{l}\n")).collect();
        assert!(matches!(parse(Path::new("all_reduce.log"), &no_ranks), Err(NcclTestsError::NoRanks { .. })));
        assert!(matches!(parse(Path::new("all_reduce.log"), "# nothing\n"), Err(NcclTestsError::Empty { .. })));
    }

    #[test]
    fn rows_without_root_column_parse() {
        let text = "#  Rank  0 Group  0 Pid 1 on h device 0 [0] GPU\n        1024           256     float    none   10.0   0.10   0.05      0   10.0   0.10   0.05      0\n";
        let runs = parse(Path::new("all_gather_perf.log"), text).unwrap();
        assert_eq!(runs[0].rows[0].time_us, 10.0);
    }
}
