//! Reading and writing run records (`.jsonl`, one record a line); the types are
//! `gpuplan_core::record`, re-exported here.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use serde::Deserialize;

pub use gpuplan_core::record::*;

/// Read the JSON document a serving job prints after `serve-summary-json:`.
pub fn serve_metrics_from_summary_json(text: &str) -> Result<ServeMetrics, String> {
    #[derive(Deserialize)]
    struct Throughput {
        requests_per_s: f64,
        output_tokens_per_s: f64,
        total_tokens_per_s: Option<f64>,
    }
    #[derive(Deserialize)]
    struct Requests {
        completed: u64,
    }
    #[derive(Deserialize)]
    struct Wire {
        qps: Option<f64>,
        max_batch: Option<u64>,
        token_budget: Option<u64>,
        requests: Requests,
        duration_s: f64,
        throughput: Throughput,
        ttft_s: LatencyDist,
        tpot_s: LatencyDist,
        e2e_latency_s: LatencyDist,
        queueing_s: LatencyDist,
        requests_csv: Option<String>,
    }
    let w: Wire = serde_json::from_str(text.trim()).map_err(|e| e.to_string())?;
    Ok(ServeMetrics {
        qps: w.qps,
        max_batch: w.max_batch,
        token_budget: w.token_budget,
        requests_completed: w.requests.completed,
        duration_s: w.duration_s,
        requests_per_s: w.throughput.requests_per_s,
        output_tokens_per_s: w.throughput.output_tokens_per_s,
        total_tokens_per_s: w.throughput.total_tokens_per_s,
        ttft_s: w.ttft_s,
        tpot_s: w.tpot_s,
        e2e_latency_s: w.e2e_latency_s,
        queueing_s: w.queueing_s,
        requests_csv: w.requests_csv,
        energy_j_per_output_token: None,
    })
}

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("cannot write `{path}`")]
    Write { path: String, source: std::io::Error },
    #[error("cannot read `{path}`")]
    Read { path: String, source: std::io::Error },
    #[error("{path}:{line}: not a run record")]
    Parse { path: String, line: usize, source: serde_json::Error },
    #[error("{path}:{line}: `schema_version` = {found}, this gpuplan reads {SCHEMA_VERSION}")]
    Version { path: String, line: usize, found: u64 },
    #[error("{path}:{line}: `{field}` = {value}: {message}")]
    Field { path: String, line: usize, field: String, value: String, message: String },
    #[error("not a run-record file (records are appended only to an empty file or a .jsonl of run records): {reason}")]
    NotRecords { path: String, reason: String },
}

/// Whether records may be appended to `path`: it does not exist, is empty, or every line of it
/// is a run record. Anything else (`notes.txt`, a torn JSON file) is refused, never appended to.
pub fn check_appendable(path: &Path) -> Result<(), RecordError> {
    match std::fs::read(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(RecordError::Read { path: path.display().to_string(), source }),
        Ok(bytes) => appendable(&path.display().to_string(), &bytes),
    }
}

fn appendable(path: &str, bytes: &[u8]) -> Result<(), RecordError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    let not = |reason: String| RecordError::NotRecords { path: path.into(), reason };
    let text = std::str::from_utf8(bytes).map_err(|e| not(format!("{path}: not UTF-8 text ({e})")))?;
    parse_jsonl(path, text).map(|_| ()).map_err(|e| {
        let mut reason = e.to_string();
        let mut src = std::error::Error::source(&e);
        while let Some(s) = src {
            reason.push_str(&format!(": {s}"));
            src = s.source();
        }
        not(reason)
    })
}

/// Append one record as one line, under an exclusive lock, never touching what is there.
pub fn append(path: &Path, rec: &RunRecord) -> Result<(), RecordError> {
    let werr = |source| RecordError::Write { path: path.display().to_string(), source };
    let mut line = serde_json::to_string(rec).expect("a run record serializes");
    line.push('\n');
    let mut f = std::fs::OpenOptions::new().create(true).read(true).append(true).open(path).map_err(werr)?;
    f.lock().map_err(werr)?;
    // Under the lock, what is there must be run records (checked before the job too).
    let mut there = Vec::new();
    f.read_to_end(&mut there).map_err(werr)?;
    appendable(&path.display().to_string(), &there)?;
    // If the file does not end in a newline (a torn or hand-edited last line), start a new one.
    let len = f.metadata().map_err(werr)?.len();
    if len > 0 {
        let mut last = [0u8; 1];
        f.seek(SeekFrom::Start(len - 1)).map_err(werr)?;
        f.read_exact(&mut last).map_err(werr)?;
        if last[0] != b'\n' {
            line.insert(0, '\n');
        }
    }
    f.write_all(line.as_bytes()).map_err(werr)?;
    f.sync_data().map_err(werr)?;
    f.unlock().map_err(werr)?;
    Ok(())
}

/// Read every record of a `.jsonl` file (blank lines skipped).
pub fn read_all(path: &Path) -> Result<Vec<RunRecord>, RecordError> {
    let p = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| RecordError::Read { path: p.clone(), source })?;
    parse_jsonl(&p, &text)
}

pub fn parse_jsonl(path: &str, text: &str) -> Result<Vec<RunRecord>, RecordError> {
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(l).map_err(|source| RecordError::Parse { path: path.into(), line: i + 1, source })?;
        let found = v.get("schema_version").and_then(|x| x.as_u64()).unwrap_or(0);
        if found != u64::from(SCHEMA_VERSION) {
            return Err(RecordError::Version { path: path.into(), line: i + 1, found });
        }
        // The field a value is wrong in, by its path in the record (`metrics.step_time_s_median`).
        let value_at = |field: &str| {
            let ptr = format!("/{}", field.replace(['.', '['], "/").replace(']', ""));
            v.pointer(&ptr).map_or("(missing)".to_string(), |x| format!("`{x}`"))
        };
        let rec = serde_path_to_error::deserialize::<_, RunRecord>(&v).map_err(|e| {
            let at = e.path().to_string();
            let message = e.into_inner().to_string();
            let (field, value, message) = match message.strip_prefix("missing field `").and_then(|r| r.strip_suffix('`')) {
                Some(name) if at == "." => (name.to_string(), "(missing)".to_string(), "is required".to_string()),
                Some(name) => (format!("{at}.{name}"), "(missing)".to_string(), "is required".to_string()),
                None => (at.clone(), value_at(&at), message),
            };
            RecordError::Field { path: path.into(), line: i + 1, field, value, message }
        })?;
        out.push(rec);
    }
    Ok(out)
}
