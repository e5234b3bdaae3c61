//! Chrome trace (Trace Event format, opened by Perfetto and chrome://tracing): one process per
//! pipeline stage, one thread per stream.

use gpuplan_core::sim::{SimResult, Span};

/// The trace as JSON: `{"traceEvents": [...]}` with complete events (`ph: "X"`), times in
/// microseconds, plus metadata naming processes and threads.
pub fn chrome_trace(result: &SimResult, scenario_name: &str) -> serde_json::Value {
    let tracks = ["compute", "tp comm", "cp comm", "ep comm", "dp comm", "p2p"];
    let tid = |t: &str| tracks.iter().position(|x| *x == t).unwrap_or(tracks.len()) as u64;
    let mut events: Vec<serde_json::Value> = Vec::new();
    let mut stages: Vec<u32> = result.spans.iter().map(|s| s.stage).collect();
    stages.sort_unstable();
    stages.dedup();
    for st in &stages {
        events.push(serde_json::json!({"ph": "M", "name": "process_name", "pid": st, "args": {"name": format!("stage {st} (representative rank)")}}));
        for (i, t) in tracks.iter().enumerate() {
            events.push(serde_json::json!({"ph": "M", "name": "thread_name", "pid": st, "tid": i, "args": {"name": t}}));
        }
    }
    for Span { stage, track, name, start, end } in &result.spans {
        events.push(serde_json::json!({
            "ph": "X", "name": name, "cat": track, "pid": stage, "tid": tid(track),
            "ts": start.0 as f64 * 1e-6, "dur": (end.0 - start.0) as f64 * 1e-6,
        }));
    }
    serde_json::json!({
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"scenario": scenario_name, "step_time_s": result.prediction.step_time.value(), "generator": "gpuplan simulate"},
    })
}
