//! `measure`: wrap a real run, sample NVML, parse its log, and make a run record.
//!
//! `run` starts the job with its output passed through, samples every GPU the job can see in a
//! thread, and hands the lines to `parse::LogParser`; `summarize` turns steps and samples into
//! `record::Metrics` (median step time after warm-up, tokens/s, peak memory, power and energy
//! over the steady window). With `nvml`, the one module besides `calibrate` that touches the GPU.

pub mod job;
pub mod nvml;
pub mod parse;
pub mod record;

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use parse::{LineEvent, LogFormat, LogParser, MemReport, StepSample};
use record::{Job, Machine, Metrics, RunRecord, Scenario, SCHEMA_VERSION};

/// How to run and read one job.
pub struct MeasureConfig {
    pub command: Vec<String>,
    pub scenario: Scenario,
    pub format: LogFormat,
    /// Steps to drop at the start (by step number where the log gives one).
    pub warmup: u64,
    pub sample_hz: f64,
    pub timeout: Option<Duration>,
    /// Sample these NVML indices instead of those `CUDA_VISIBLE_DEVICES` names.
    pub gpu_indices: Option<Vec<u32>>,
    pub run_id: Option<String>,
    pub split: Option<String>,
    pub note: Option<String>,
    pub log_file: Option<String>,
}

/// What the log gave, gathered over the run.
#[derive(Debug, Default)]
pub struct LogSummary {
    pub steps: Vec<StepSample>,
    pub mem: BTreeMap<u32, MemReport>,
    pub oom_line: Option<String>,
    pub facts: BTreeMap<String, String>,
    pub run_steps_per_s: Option<f64>,
    pub format: Option<&'static str>,
    pub serve: Option<record::ServeMetrics>,
}

impl LogSummary {
    pub fn absorb(&mut self, ev: LineEvent) {
        match ev {
            LineEvent::Step(s) => self.steps.push(s),
            LineEvent::Mem(m) => {
                let e = self.mem.entry(m.rank).or_insert(MemReport { rank: m.rank, ..Default::default() });
                e.max_allocated_bytes = max_opt(e.max_allocated_bytes, m.max_allocated_bytes);
                e.max_reserved_bytes = max_opt(e.max_reserved_bytes, m.max_reserved_bytes);
            }
            LineEvent::Oom(l) => {
                if self.oom_line.is_none() {
                    self.oom_line = Some(l);
                }
            }
            LineEvent::Facts(kvs) => {
                for (k, v) in kvs {
                    self.facts.insert(k, v);
                }
            }
            LineEvent::RunSummary { steps_per_s } => self.run_steps_per_s = Some(steps_per_s),
            LineEvent::Serve(m) => self.serve = Some(*m),
        }
    }
}

fn max_opt(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// Run status from how the job ended and what its log said.
pub fn status(exit_ok: bool, timed_out: bool, oom_seen: bool, n_steps: usize) -> &'static str {
    if timed_out {
        "timeout"
    } else if !exit_ok {
        if oom_seen {
            "oom"
        } else {
            "crashed"
        }
    } else if n_steps == 0 {
        if oom_seen {
            "oom"
        } else {
            "no_steps"
        }
    } else {
        "ok"
    }
}

pub fn median(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    Some(if n % 2 == 1 { v[n / 2] } else { 0.5 * (v[n / 2 - 1] + v[n / 2]) })
}

fn mean(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

/// Linear interpolation of a counter sampled at (t, value) points, clamped to the ends.
fn interp(points: &[(f64, f64)], t: f64) -> Option<f64> {
    let first = points.first()?;
    let last = points.last()?;
    if t <= first.0 {
        return Some(first.1);
    }
    if t >= last.0 {
        return Some(last.1);
    }
    let k = points.partition_point(|p| p.0 <= t);
    let (a, b) = (points[k - 1], points[k]);
    if b.0 <= a.0 {
        return Some(a.1);
    }
    Some(a.1 + (b.1 - a.1) * (t - a.0) / (b.0 - a.0))
}

/// Which samples are timed, and the steady window they span.
struct Steady {
    timed: Vec<StepSample>,
    dropped: u64,
    n_steps: u64,
    window: Option<(f64, f64)>,
}

fn steady(steps: &[StepSample], warmup: u64) -> Steady {
    // Each sample covers the steps since the previous one (the gap in step numbers).
    let mut covered = Vec::with_capacity(steps.len());
    let mut prev: Option<u64> = None;
    for s in steps {
        let c = match (s.step, prev) {
            (Some(n), Some(p)) if n > p => n - p,
            (Some(n), None) if s.n_steps <= 1 => n.max(1),
            _ => s.n_steps.max(1),
        };
        covered.push(c);
        if s.step.is_some() {
            prev = s.step;
        }
    }
    let have_numbers = steps.iter().all(|s| s.step.is_some());
    let mut first_timed = steps.len();
    for (i, s) in steps.iter().enumerate() {
        let keep = if have_numbers { s.step.unwrap_or(0).saturating_sub(covered[i]) >= warmup } else { i as u64 >= warmup };
        if keep && s.step_time_s.is_some() {
            first_timed = i;
            break;
        }
    }
    let mut dropped = first_timed as u64;
    if first_timed == steps.len() {
        // Too few steps to drop the warm-up: keep them all rather than nothing.
        first_timed = 0;
        dropped = 0;
    }
    let idx: Vec<usize> = (first_timed..steps.len()).filter(|&i| steps[i].step_time_s.is_some()).collect();
    let timed: Vec<StepSample> = idx.iter().map(|&i| steps[i].clone()).collect();
    let n_steps: u64 = idx.iter().map(|&i| covered[i]).sum();
    let window = match (idx.first(), idx.last()) {
        (Some(&f), Some(&l)) => {
            let start = if f > 0 { steps[f - 1].at_s } else { steps[f].at_s - steps[f].step_time_s.unwrap_or(0.0) * covered[f] as f64 };
            (steps[l].at_s > start).then_some((start, steps[l].at_s))
        }
        _ => None,
    };
    Steady { timed, dropped, n_steps, window }
}

/// Tokens per step from the scenario, when the log does not say.
pub fn scenario_tokens_per_step(s: &Scenario) -> Option<f64> {
    let n = f64::from(s.n_gpus.max(1));
    match s.mode.as_str() {
        "train" => Some((s.global_batch? * s.seq?) as f64),
        "prefill" => Some((s.batch? * s.seq?) as f64 * n / f64::from(s.tp.max(1) * s.pp.max(1))),
        "decode" => Some(s.batch? as f64 * n / f64::from(s.tp.max(1) * s.pp.max(1))),
        _ => None,
    }
}

/// Metrics from the log and the NVML series.
pub fn summarize(log: &LogSummary, series: &[Vec<nvml::GpuSample>], scenario: &Scenario, warmup: u64, sample_hz: f64) -> Metrics {
    let st = steady(&log.steps, warmup);
    let mut times: Vec<f64> = st.timed.iter().filter_map(|s| s.step_time_s).collect();
    let hf = log.format == Some("hf-trainer");
    let mut step_time_source = (hf && !times.is_empty()).then(|| "tqdm-redraw-gaps".to_string());
    if times.is_empty() {
        if let Some(r) = log.run_steps_per_s.filter(|r| *r > 0.0) {
            times.push(1.0 / r);
            step_time_source = Some("train_steps_per_second".into());
        }
    }
    let med = median(&times);
    // Serving iterations carry different token counts: throughput comes from the job's summary.
    let serve = scenario.mode == "serve";
    let tokens_per_step = if serve { None } else { log.steps.iter().find_map(|s| s.tokens).or_else(|| scenario_tokens_per_step(scenario)) };
    let n_ranks = log.mem.keys().max().map(|r| r + 1).unwrap_or(0);
    let by_rank = |f: fn(&MemReport) -> Option<f64>| (0..n_ranks).map(|r| log.mem.get(&r).and_then(f)).collect::<Vec<_>>();

    let mut m = Metrics {
        log_format: log.format.map(str::to_string),
        step_time_source,
        n_steps_parsed: log.steps.len() as u64,
        n_warmup_dropped: st.dropped,
        n_steps_timed: if st.timed.is_empty() { 0 } else { st.n_steps },
        step_time_s_median: med,
        step_time_s_mean: mean(&times),
        step_time_s_min: times.iter().copied().reduce(f64::min),
        step_time_s_max: times.iter().copied().reduce(f64::max),
        step_times_s: times.clone(),
        tokens_per_step,
        tokens_per_s: match (tokens_per_step, med, &log.serve) {
            (_, _, Some(sv)) if serve => Some(sv.output_tokens_per_s),
            (Some(t), Some(s), _) if s > 0.0 => Some(t / s),
            _ => None,
        },
        peak_mem_reserved_bytes_per_rank: by_rank(|m| m.max_reserved_bytes),
        peak_mem_allocated_bytes_per_rank: by_rank(|m| m.max_allocated_bytes),
        steady_window_s: st.window.map(|(a, b)| b - a),
        n_nvml_samples: series.first().map(|s| s.len() as u64).unwrap_or(0),
        nvml_sample_hz: sample_hz,
        ..Default::default()
    };
    for s in series {
        m.peak_mem_bytes_per_gpu_nvml.push(s.iter().filter_map(|x| x.mem_used_bytes).reduce(f64::max));
        m.mem_bytes_before_per_gpu_nvml.push(s.first().and_then(|x| x.mem_used_bytes));
    }
    if let Some((a, b)) = st.window {
        let mut total_j = 0.0;
        let mut all = true;
        for s in series {
            let e: Vec<(f64, f64)> = s.iter().filter_map(|x| x.energy_j.map(|j| (x.t_s, j))).collect();
            match (interp(&e, a), interp(&e, b)) {
                (Some(ea), Some(eb)) if e.len() >= 2 => {
                    total_j += eb - ea;
                    m.avg_power_w_per_gpu.push(Some((eb - ea) / (b - a)));
                }
                _ => {
                    all = false;
                    m.avg_power_w_per_gpu.push(None);
                }
            }
            let inside: Vec<&nvml::GpuSample> = s.iter().filter(|x| x.t_s >= a && x.t_s <= b).collect();
            let avg = |f: fn(&nvml::GpuSample) -> Option<f64>| mean(&inside.iter().filter_map(|x| f(x)).collect::<Vec<_>>());
            m.avg_power_w_per_gpu_sampled.push(avg(|x| x.power_w));
            m.avg_sm_clock_mhz_per_gpu.push(avg(|x| x.sm_clock_mhz));
            m.avg_gpu_util_pct_per_gpu.push(avg(|x| x.gpu_util_pct));
        }
        if all && !series.is_empty() && st.n_steps > 0 {
            let per_step = total_j / st.n_steps as f64;
            m.energy_j_per_step = Some(per_step);
            m.energy_j_per_token = tokens_per_step.filter(|t| *t > 0.0).map(|t| per_step / t);
            if serve {
                // Watts over the window / output tokens per second of the run.
                let watts = total_j / (b - a);
                m.energy_j_per_token = log.serve.as_ref().filter(|sv| sv.output_tokens_per_s > 0.0).map(|sv| watts / sv.output_tokens_per_s);
            }
        }
    }
    m
}

/// Run the job under NVML sampling and build its record. Job output goes to `out`/`err`;
/// `warn` gets measure's own messages.
pub fn run(cfg: &MeasureConfig, out: impl Write + Send + 'static, err: impl Write + Send + 'static, warn: &mut dyn FnMut(String)) -> anyhow::Result<RunRecord> {
    let cuda_visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let session = match nvml::open(cuda_visible.as_deref(), cfg.gpu_indices.as_deref()) {
        Ok(s) => Some(s),
        Err(e) => {
            warn(format!("no NVML samples: {e}"));
            None
        }
    };
    let nvml_error = if session.is_none() { Some("nvml could not be opened".to_string()) } else { None };
    let started = SystemTime::now();
    let t0 = Instant::now();
    let stop = AtomicBool::new(false);
    let mut log = LogSummary::default();
    let mut parser = LogParser::new(cfg.format.clone());
    let mut tail: std::collections::VecDeque<String> = Default::default();
    let (end, series) = std::thread::scope(|s| {
        let sampler = session.as_ref().map(|sess| {
            let stop = &stop;
            let hz = cfg.sample_hz;
            s.spawn(move || sess.sample_until(hz, t0, stop))
        });
        let end = job::run(&cfg.command, cfg.timeout, t0, out, err, |_st, line, at| {
            for ev in parser.feed(line, at) {
                log.absorb(ev);
            }
            if tail.len() == 20 {
                tail.pop_front();
            }
            tail.push_back(line.chars().take(400).collect());
        });
        stop.store(true, Ordering::Relaxed);
        let series = sampler.and_then(|h| h.join().ok()).unwrap_or_default();
        (end, series)
    });
    let duration_s = t0.elapsed().as_secs_f64();
    let end = end.map_err(|e| anyhow::anyhow!("cannot run `{}`: {e}", cfg.command.join(" ")))?;
    log.format = parser.detected_format();
    let metrics = summarize(&log, &series, &cfg.scenario, cfg.warmup, cfg.sample_hz);
    use std::os::unix::process::ExitStatusExt;
    let exit_code = end.status.code();
    let status = status(end.status.success(), end.timed_out, log.oom_line.is_some(), metrics.step_times_s.len());
    let inv = session.as_ref().map(|s| s.inventory.clone()).unwrap_or_default();
    let serve = log.serve.clone().map(|mut sv| {
        sv.energy_j_per_output_token = if cfg.scenario.mode == "serve" { metrics.energy_j_per_token } else { None };
        sv
    });
    let env = std::env::vars()
        .filter(|(k, _)| {
            k == "CUDA_VISIBLE_DEVICES"
                || k == "CUDA_DEVICE_ORDER"
                || k.starts_with("NCCL_")
                || k.starts_with("PYTORCH_")
                || k.starts_with("TORCH_")
                || k == "NVSHMEM_DISABLE_NVLS"
                || k == "OMP_NUM_THREADS"
        })
        .collect();
    Ok(RunRecord {
        schema_version: SCHEMA_VERSION,
        run_id: cfg.run_id.clone(),
        split: cfg.split.clone(),
        status: status.to_string(),
        exit_code,
        signal: end.status.signal(),
        scenario: cfg.scenario.clone(),
        metrics,
        machine: Machine {
            hostname: std::fs::read_to_string("/etc/hostname").ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()),
            gpu_name: inv.names.first().cloned(),
            n_gpus: inv.indices.len() as u32,
            gpu_indices: inv.indices.clone(),
            gpu_uuids: inv.uuids.clone(),
            driver_version: inv.driver_version.clone(),
            cuda_driver_version: inv.cuda_driver_version.clone(),
            power_limit_w: inv.power_limit_w,
            memory_total_bytes: inv.memory_total_bytes,
            nvml_error,
        },
        job: Job {
            command: cfg.command.clone(),
            cwd: std::env::current_dir().ok().map(|p| p.display().to_string()),
            started_utc: rfc3339(started),
            duration_s,
            env,
            reported: log.facts.clone(),
            oom_line: log.oom_line.clone(),
            tail: if status == "ok" { Vec::new() } else { tail.into_iter().collect() },
            log_file: cfg.log_file.clone(),
            gpuplan_version: env!("CARGO_PKG_VERSION").to_string(),
        },
        note: cfg.note.clone(),
        serve,
    })
}

/// UTC time as RFC 3339 with seconds (`2026-11-21T23:59:01Z`).
pub fn rfc3339(t: SystemTime) -> String {
    let secs = t.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(mo <= 2);
    format!("{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, (rem % 3600) / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(n: u64, t: f64, at: f64) -> StepSample {
        StepSample { step: Some(n), step_time_s: Some(t), n_steps: 1, tokens: Some(1000.0), tokens_per_s: None, at_s: at }
    }

    #[test]
    fn trainer_log_with_sparse_bar_redraws_reads_the_steps_time() {
        // Captured on the lent H100 (2026-11-25, scripts/device_trainerga.sh call 2, raw data in
        // calibration/runs/hf/raw/trainerga-h100-2026-11-25/): transformers.Trainer on the 2-layer
        // smoke model, 60 steps of about 10 ms, logging_steps 10, each output line with the time
        // its first byte arrived (scripts/stamp_lines.py, split and timed as `job` does). tqdm
        // redraws its bar every 0.1 s: one redraw per 6-11 steps. The job's own clock
        // (hf_trainer.py's `trainer_cb ... t_s=`, host time between on_step_end calls) is the truth.
        const LOG: &str = include_str!("../../../../calibration/runs/hf/raw/trainerga-h100-2026-11-25/call2/smoke-stamped.tsv");
        let warmup = 10;
        let mut log = LogSummary::default();
        let mut parser = LogParser::new(LogFormat::HfTrainer);
        let (mut clock, mut bar_rates) = (Vec::new(), Vec::new());
        let num = |l: &str, key: &str| l.split_whitespace().find_map(|kv| kv.strip_prefix(key)).and_then(|v| v.parse::<f64>().ok());
        let bar = regex::Regex::new(r"\| (\d+)/60 \[[^\]]*, *([0-9.]+)it/s\]").unwrap();
        for row in LOG.lines() {
            let (at, line) = row.split_once('\t').unwrap();
            for ev in parser.feed(line, at.parse().unwrap()) {
                log.absorb(ev);
            }
            if let (Some(n), Some(t)) = (num(line, "n="), num(line, "t_s=")) {
                if line.starts_with("trainer_cb") && n > warmup as f64 {
                    clock.push(t);
                }
            }
            // What the bar itself printed after the warm-up (`N/60 [..., R it/s]`).
            if let Some(c) = bar.captures(line) {
                if c[1].parse::<u64>().unwrap() > warmup {
                    bar_rates.push(1.0 / c[2].parse::<f64>().unwrap());
                }
            }
        }
        log.format = parser.detected_format();
        let sc = Scenario { mode: "train".into(), n_gpus: 1, ..Default::default() };
        let m = summarize(&log, &[], &sc, warmup, 20.0);
        let truth = median(&clock).unwrap();
        let got = m.step_time_s_median.unwrap();
        assert_eq!(m.step_time_source.as_deref(), Some("tqdm-redraw-gaps"));
        assert_eq!(m.n_steps_timed, 50, "{m:?}");
        assert!((got / truth - 1.0).abs() < 0.05, "measured {got} vs the job's clock {truth}");
        // The bar's own rate, an average that still carries the 1.9 s first step, reads it slow.
        assert!(median(&bar_rates).unwrap() > 1.5 * truth, "{bar_rates:?} vs {truth}");
    }

    #[test]
    fn warmup_window_power_energy() {
        // 6 steps of 0.5 s after a slow first one; 2 dropped as warm-up.
        let mut log = LogSummary::default();
        let mut at = 1.0;
        for (n, t) in [(1, 3.0), (2, 0.5), (3, 0.5), (4, 0.6), (5, 0.5), (6, 0.4)] {
            at += t;
            log.absorb(LineEvent::Step(step(n, t, at)));
        }
        // One GPU drawing 500 W all along: energy counter rises 500 J/s.
        let series = vec![(0..200)
            .map(|i| {
                let t = i as f64 * 0.05;
                nvml::GpuSample {
                    t_s: t,
                    power_w: Some(500.0),
                    energy_j: Some(1e6 + 500.0 * t),
                    mem_used_bytes: Some(1e9 + i as f64),
                    sm_clock_mhz: Some(1980.0),
                    gpu_util_pct: Some(100.0),
                }
            })
            .collect::<Vec<_>>()];
        let sc = Scenario { mode: "train".into(), n_gpus: 1, ..Default::default() };
        let m = summarize(&log, &series, &sc, 2, 20.0);
        assert_eq!(m.n_warmup_dropped, 2);
        assert_eq!(m.n_steps_timed, 4);
        assert_eq!(m.step_times_s, vec![0.5, 0.6, 0.5, 0.4]);
        assert_eq!(m.step_time_s_median, Some(0.5));
        assert_eq!(m.tokens_per_s, Some(2000.0));
        assert!((m.steady_window_s.unwrap() - 2.0).abs() < 1e-9);
        assert!((m.avg_power_w_per_gpu[0].unwrap() - 500.0).abs() < 1e-6);
        assert!((m.energy_j_per_step.unwrap() - 250.0).abs() < 1e-6);
        assert!((m.energy_j_per_token.unwrap() - 0.25).abs() < 1e-9);
        assert_eq!(m.peak_mem_bytes_per_gpu_nvml, vec![Some(1e9 + 199.0)]);
    }

    #[test]
    fn megatron_intervals_drop_the_first() {
        let s: Vec<StepSample> = [(10, 1.2, 12.0), (20, 1.0, 22.0), (30, 1.0, 32.0)]
            .iter()
            .map(|&(n, t, at)| StepSample { step: Some(n), step_time_s: Some(t), n_steps: 1, tokens: None, tokens_per_s: None, at_s: at })
            .collect();
        let st = steady(&s, 3);
        assert_eq!(st.dropped, 1);
        assert_eq!(st.n_steps, 20);
        assert_eq!(st.window, Some((12.0, 32.0)));
    }

    #[test]
    fn statuses() {
        assert_eq!(status(true, false, false, 5), "ok");
        assert_eq!(status(false, false, true, 0), "oom");
        assert_eq!(status(false, false, true, 3), "oom");
        assert_eq!(status(false, false, false, 3), "crashed");
        assert_eq!(status(true, false, false, 0), "no_steps");
        assert_eq!(status(false, true, false, 3), "timeout");
    }

    #[test]
    fn dates() {
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400)), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_305_600 + 3661)), "2026-11-22T01:01:01Z");
    }

    #[test]
    fn tokens_from_scenario() {
        let sc = Scenario { mode: "train".into(), n_gpus: 2, tp: 1, pp: 1, dp: 2, global_batch: Some(8), seq: Some(4096), ..Default::default() };
        assert_eq!(scenario_tokens_per_step(&sc), Some(32768.0));
        let sc = Scenario { mode: "decode".into(), n_gpus: 1, tp: 1, pp: 1, dp: 1, batch: Some(64), ..Default::default() };
        assert_eq!(scenario_tokens_per_step(&sc), Some(64.0));
    }
}
