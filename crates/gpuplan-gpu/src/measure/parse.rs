//! Log parsers: step times, throughput, memory reports and out-of-memory markers from a job's
//! output lines.
//!
//! Formats: gpuplan's reference workload (`scenarios/workloads/train_llama.py`), Megatron-LM,
//! torchtitan, the Hugging Face Trainer (tqdm progress and its final metrics dict), and a user
//! regex. `Auto` tries each known format on every line; the first that matches names the format
//! of the run.

use regex::Regex;

/// Which log format to read.
#[derive(Debug, Clone)]
pub enum LogFormat {
    Auto,
    Gpuplan,
    Megatron,
    Torchtitan,
    HfTrainer,
    /// Named groups: `time_s` or `time_ms` (step time), or `tps` (tokens/s, with tokens per step
    /// known from the scenario); optional `step` and `tokens`.
    Regex(Regex),
}

impl LogFormat {
    pub fn name(&self) -> &'static str {
        match self {
            LogFormat::Auto => "auto",
            LogFormat::Gpuplan => "gpuplan",
            LogFormat::Megatron => "megatron",
            LogFormat::Torchtitan => "torchtitan",
            LogFormat::HfTrainer => "hf-trainer",
            LogFormat::Regex(_) => "regex",
        }
    }
}

/// One timing sample read from the log.
#[derive(Debug, Clone, PartialEq)]
pub struct StepSample {
    /// The step number the log gives, if any.
    pub step: Option<u64>,
    /// Seconds per optimizer step (or per forward pass / token step in inference); `None` when
    /// the log gives only a throughput.
    pub step_time_s: Option<f64>,
    /// How many steps this sample stands for (Megatron and torchtitan log every N steps and
    /// report the mean over them).
    pub n_steps: u64,
    /// Tokens per step, all ranks, when the log says.
    pub tokens: Option<f64>,
    /// Tokens per second as the log reports it (torchtitan: per GPU).
    pub tokens_per_s: Option<f64>,
    /// Seconds since the job started at which the line arrived.
    pub at_s: f64,
}

/// Peak memory as the job itself reports it, for one rank.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MemReport {
    pub rank: u32,
    pub max_allocated_bytes: Option<f64>,
    pub max_reserved_bytes: Option<f64>,
}

/// What one line told us.
#[derive(Debug, Clone, PartialEq)]
pub enum LineEvent {
    Step(StepSample),
    Mem(MemReport),
    /// The job says it ran out of memory.
    Oom(String),
    /// key=value facts the job reports about itself (our workload's `config` line, params).
    Facts(Vec<(String, String)>),
    /// A whole-run throughput summary (HF Trainer's `train_steps_per_second`), used only when
    /// no step lines were seen.
    RunSummary {
        steps_per_s: f64,
    },
    /// A serving job's request statistics (`serve-summary-json: {...}`).
    Serve(Box<super::record::ServeMetrics>),
}

struct Patterns {
    kv: Regex,
    megatron_iter: Regex,
    megatron_mem: Regex,
    titan_step: Regex,
    titan_mem: Regex,
    titan_tps: Regex,
    tqdm: Regex,
    hf_summary: Regex,
    ansi: Regex,
    oom: Regex,
    rank_prefix: Regex,
}

impl Patterns {
    fn new() -> Self {
        let r = |s: &str| Regex::new(s).expect("built-in pattern");
        Patterns {
            kv: r(r"([A-Za-z_][A-Za-z0-9_]*)=(\S+)"),
            megatron_iter: r(r"iteration\s+(\d+)\s*/\s*\d+\s*\|.*?elapsed time per iteration \(ms\):\s*([0-9.]+)"),
            megatron_mem: r(
                r"\[Rank (\d+)\].*memory \(MB\)\s*\|\s*allocated:\s*([0-9.]+)\s*\|\s*max allocated:\s*([0-9.]+)\s*\|\s*reserved:\s*([0-9.]+)\s*\|\s*max reserved:\s*([0-9.]+)",
            ),
            titan_step: r(r"\bstep:\s*(\d+)\s+.*?\bloss:"),
            titan_mem: r(r"\bmemory:\s*([0-9.]+)\s*GiB"),
            titan_tps: r(r"\btps:\s*([0-9,]+(?:\.[0-9]+)?)"),
            tqdm: r(r"\|\s*(\d+)/(\d+)\s*\[[^\]]*?,\s*([0-9.]+|\?)(it/s|s/it)\]"),
            // The Trainer's own final metrics dict: printed by its ProgressCallback with the values
            // as strings (`'train_steps_per_second': '16.37'`), by a user's `print(out.metrics)`
            // as numbers.
            hf_summary: r(r"'train_steps_per_second':\s*'?([0-9.eE+-]+)'?"),
            ansi: r(r"\x1b\[[0-9;]*m"),
            oom: r(
                r"(?i)(gpuplan-workload: oom|CUDA out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED|RESOURCE_EXHAUSTED: Out of memory|cudaErrorMemoryAllocation|NCCL error.*out of memory)",
            ),
            rank_prefix: r(r"^\[(?:rank|Rank)(\d+)\]:?"),
        }
    }
}

/// Reads a job's lines one at a time. Keeps the state that formats without a step time need
/// (torchtitan: the previous step line's number and arrival time).
pub struct LogParser {
    format: LogFormat,
    detected: Option<&'static str>,
    p: Patterns,
    prev_titan: Option<(u64, f64)>,
    /// The last step count a tqdm progress line reported and when that count first arrived: tqdm
    /// redraws its bar (after each logged metrics dict, at a refresh, at the end) with the same
    /// count, which is one step, not two.
    last_tqdm: Option<(u64, f64)>,
    /// The total of the first tqdm bar seen (the Trainer's training bar: `max_steps`); a bar with
    /// another total (evaluation's, a data-preparation bar) is not the training steps.
    tqdm_total: Option<u64>,
}

impl LogParser {
    pub fn new(format: LogFormat) -> Self {
        LogParser { format, detected: None, p: Patterns::new(), prev_titan: None, last_tqdm: None, tqdm_total: None }
    }

    /// The format that matched first (`None` if no line matched yet).
    pub fn detected_format(&self) -> Option<&'static str> {
        match &self.format {
            LogFormat::Auto => self.detected,
            f => self.detected.map(|_| f.name()),
        }
    }

    /// Feed one line (without its line ending) that arrived `at_s` seconds after the start.
    pub fn feed(&mut self, raw: &str, at_s: f64) -> Vec<LineEvent> {
        let stripped;
        let line = if raw.contains('\x1b') {
            stripped = self.p.ansi.replace_all(raw, "").into_owned();
            stripped.as_str()
        } else {
            raw
        };
        let mut out = Vec::new();
        if let Some(m) = self.p.oom.find(line) {
            out.push(LineEvent::Oom(line.trim().chars().take(300).collect::<String>()));
            let _ = m;
        }
        let try_all = matches!(self.format, LogFormat::Auto);
        let mut matched: Option<&'static str> = None;
        if let LogFormat::Regex(re) = &self.format {
            if let Some(ev) = parse_regex(re, line, at_s) {
                out.push(ev);
                matched = Some("regex");
            }
        }
        if matched.is_none() && (try_all || matches!(self.format, LogFormat::Gpuplan)) {
            let evs = self.parse_gpuplan(line, at_s);
            if !evs.is_empty() {
                out.extend(evs);
                matched = Some("gpuplan");
            }
        }
        if matched.is_none() && (try_all || matches!(self.format, LogFormat::Megatron)) {
            if let Some(ev) = self.parse_megatron(line, at_s) {
                out.push(ev);
                matched = Some("megatron");
            }
        }
        if matched.is_none() && (try_all || matches!(self.format, LogFormat::Torchtitan)) {
            let evs = self.parse_torchtitan(line, at_s);
            if !evs.is_empty() {
                out.extend(evs);
                matched = Some("torchtitan");
            }
        }
        if matched.is_none() && (try_all || matches!(self.format, LogFormat::HfTrainer)) {
            if let Some(ev) = self.parse_hf(line, at_s) {
                out.push(ev);
                matched = Some("hf-trainer");
            }
        }
        if let Some(m) = matched {
            // Facts and memory lines do not decide the format; step lines do.
            if self.detected.is_none() && out.iter().any(|e| matches!(e, LineEvent::Step(_) | LineEvent::RunSummary { .. })) {
                self.detected = Some(m);
            }
        }
        out
    }

    fn parse_gpuplan(&self, line: &str, at_s: f64) -> Vec<LineEvent> {
        let line = line.trim();
        let kv = |l: &str| -> Vec<(String, String)> { self.p.kv.captures_iter(l).map(|c| (c[1].to_string(), c[2].to_string())).collect() };
        let get = |kvs: &[(String, String)], k: &str| kvs.iter().find(|(a, _)| a == k).and_then(|(_, v)| v.parse::<f64>().ok());
        let mut out = Vec::new();
        if line.starts_with("step=") {
            let kvs = kv(line);
            if let Some(t) = get(&kvs, "step_time_s") {
                out.push(LineEvent::Step(StepSample {
                    step: get(&kvs, "step").map(|s| s as u64),
                    step_time_s: Some(t),
                    n_steps: 1,
                    tokens: get(&kvs, "tokens"),
                    tokens_per_s: get(&kvs, "tokens_per_s"),
                    at_s,
                }));
                out.push(LineEvent::Mem(MemReport {
                    rank: 0,
                    max_allocated_bytes: get(&kvs, "max_mem_alloc_bytes"),
                    max_reserved_bytes: get(&kvs, "max_mem_reserved_bytes"),
                }));
            }
        } else if line.starts_with("summary ") {
            let kvs = kv(line);
            out.push(LineEvent::Mem(MemReport {
                rank: get(&kvs, "rank").unwrap_or(0.0) as u32,
                max_allocated_bytes: get(&kvs, "max_mem_alloc_bytes"),
                max_reserved_bytes: get(&kvs, "max_mem_reserved_bytes"),
            }));
            out.push(LineEvent::Facts(kvs));
        } else if line.starts_with("config ") {
            out.push(LineEvent::Facts(kv(line)));
        } else if let Some(doc) = line.strip_prefix("serve-summary-json:") {
            match super::record::serve_metrics_from_summary_json(doc) {
                Ok(m) => out.push(LineEvent::Serve(Box::new(m))),
                Err(e) => out.push(LineEvent::Facts(vec![("serve_summary_error".into(), e)])),
            }
        }
        out
    }

    fn parse_megatron(&self, line: &str, at_s: f64) -> Option<LineEvent> {
        if let Some(c) = self.p.megatron_iter.captures(line) {
            let ms: f64 = c[2].parse().ok()?;
            return Some(LineEvent::Step(StepSample {
                step: c[1].parse().ok(),
                step_time_s: Some(ms * 1e-3),
                n_steps: 1,
                tokens: None,
                tokens_per_s: None,
                at_s,
            }));
        }
        if let Some(c) = self.p.megatron_mem.captures(line) {
            let mib = |s: &str| s.parse::<f64>().ok().map(|v| v * 1024.0 * 1024.0);
            return Some(LineEvent::Mem(MemReport { rank: c[1].parse().unwrap_or(0), max_allocated_bytes: mib(&c[3]), max_reserved_bytes: mib(&c[5]) }));
        }
        None
    }

    fn parse_torchtitan(&mut self, line: &str, at_s: f64) -> Vec<LineEvent> {
        let Some(c) = self.p.titan_step.captures(line) else { return Vec::new() };
        let Ok(step) = c[1].parse::<u64>() else { return Vec::new() };
        let rank = self.p.rank_prefix.captures(line).and_then(|c| c[1].parse().ok()).unwrap_or(0);
        let tps = self.p.titan_tps.captures(line).and_then(|c| c[1].replace(',', "").parse::<f64>().ok());
        let mut out = Vec::new();
        // torchtitan prints no step time: it is the time between two step lines over the steps
        // between them. The first line gives none.
        let (step_time_s, n_steps) = match self.prev_titan {
            Some((ps, pt)) if step > ps && at_s > pt => (Some((at_s - pt) / (step - ps) as f64), step - ps),
            _ => (None, 1),
        };
        if rank == 0 {
            self.prev_titan = Some((step, at_s));
            out.push(LineEvent::Step(StepSample { step: Some(step), step_time_s, n_steps, tokens: None, tokens_per_s: tps, at_s }));
        }
        if let Some(m) = self.p.titan_mem.captures(line) {
            // torchtitan's `memory:` is the peak reserved memory of that rank.
            let gib: f64 = m[1].parse().unwrap_or(f64::NAN);
            out.push(LineEvent::Mem(MemReport { rank, max_allocated_bytes: None, max_reserved_bytes: Some(gib * 1024.0 * 1024.0 * 1024.0) }));
        }
        out
    }

    /// The Hugging Face Trainer's log. Its tqdm bar is redrawn at most every 0.1 s (tqdm's
    /// `mininterval`), and at every logged metrics dict (`logging_steps`: tqdm's `write` redraws the
    /// bar after the line), so one redraw may stand for many steps; the rate it prints is an
    /// exponential average over the redraws (tqdm's `smoothing` 0.3) that still carries the first,
    /// slow steps many redraws later (a 9 ms smoke step read as 28 ms). A redraw's step time is
    /// therefore the time since the previous redraw's arrival over the steps between their counts
    /// (`StepSample::n_steps`), as torchtitan's step lines are read; the first redraw, with no
    /// previous one, keeps the bar's own rate. Only bars with the first bar's total count (an
    /// evaluation bar has its own). The final metrics dict's `train_steps_per_second`
    /// (whole run, warm-up and compilation included) is used only where no bar was seen.
    fn parse_hf(&mut self, line: &str, at_s: f64) -> Option<LineEvent> {
        if let Some(c) = self.p.tqdm.captures(line) {
            let n: u64 = c[1].parse().ok()?;
            let total: u64 = c[2].parse().ok()?;
            if *self.tqdm_total.get_or_insert(total) != total {
                return None;
            }
            // A redraw of a count already seen (or an earlier one) is not a new step.
            if self.last_tqdm.is_some_and(|(last, _)| n <= last) {
                return None;
            }
            let prev = self.last_tqdm.replace((n, at_s));
            let (step_time_s, n_steps) = match prev {
                Some((pn, pt)) if at_s > pt => (Some((at_s - pt) / (n - pn) as f64), n - pn),
                _ => {
                    // The bar's own rate (`?` before the first step: no time).
                    let v: Option<f64> = c[3].parse().ok().filter(|v: &f64| *v > 0.0);
                    (v.map(|v| if &c[4] == "it/s" { 1.0 / v } else { v }), 1)
                }
            };
            if n == 0 {
                return None;
            }
            return Some(LineEvent::Step(StepSample { step: Some(n), step_time_s, n_steps, tokens: None, tokens_per_s: None, at_s }));
        }
        if let Some(c) = self.p.hf_summary.captures(line) {
            let v: f64 = c[1].parse().ok()?;
            if v > 0.0 {
                return Some(LineEvent::RunSummary { steps_per_s: v });
            }
        }
        None
    }
}

fn parse_regex(re: &Regex, line: &str, at_s: f64) -> Option<LineEvent> {
    let c = re.captures(line)?;
    let num = |name: &str| c.name(name).and_then(|m| m.as_str().replace(',', "").parse::<f64>().ok());
    let step_time_s = num("time_s").or_else(|| num("time_ms").map(|ms| ms * 1e-3));
    let tps = num("tps");
    if step_time_s.is_none() && tps.is_none() {
        return None;
    }
    Some(LineEvent::Step(StepSample { step: num("step").map(|s| s as u64), step_time_s, n_steps: 1, tokens: num("tokens"), tokens_per_s: tps, at_s }))
}

/// Check a `--step-regex` before the job starts: it must compile and name a time or a throughput.
pub fn step_regex(s: &str) -> Result<Regex, String> {
    let re = Regex::new(s).map_err(|e| format!("`--step-regex` does not compile: {e}"))?;
    let names: Vec<&str> = re.capture_names().flatten().collect();
    if !names.iter().any(|n| matches!(*n, "time_s" | "time_ms" | "tps")) {
        return Err("`--step-regex` names no group `time_s`, `time_ms` or `tps`".into());
    }
    Ok(re)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(format: LogFormat, lines: &[(&str, f64)]) -> Vec<StepSample> {
        let mut p = LogParser::new(format);
        lines.iter().flat_map(|(l, t)| p.feed(l, *t)).filter_map(|e| if let LineEvent::Step(s) = e { Some(s) } else { None }).collect()
    }

    #[test]
    fn gpuplan_step_and_summary() {
        let mut p = LogParser::new(LogFormat::Auto);
        let ev = p.feed("step=4 step_time_s=0.250000 tokens=8192 tokens_per_s=32768.0 max_mem_alloc_bytes=1000 max_mem_reserved_bytes=2000", 3.0);
        assert_eq!(p.detected_format(), Some("gpuplan"));
        assert!(matches!(&ev[0], LineEvent::Step(s) if s.step == Some(4) && s.step_time_s == Some(0.25) && s.tokens == Some(8192.0)));
        let ev = p.feed("summary rank=1 world=2 mode=train params=123 steps=10 median_step_time_s=0.25 max_mem_alloc_bytes=11 max_mem_reserved_bytes=22", 4.0);
        assert!(ev.contains(&LineEvent::Mem(MemReport { rank: 1, max_allocated_bytes: Some(11.0), max_reserved_bytes: Some(22.0) })));
    }

    #[test]
    fn megatron() {
        let l = " [2024-05-01 10:00:00] iteration       20/     100 | consumed samples:        10240 | elapsed time per iteration (ms): 1234.5 | throughput per GPU (TFLOP/s/GPU): 402.1 | learning rate: 1.0E-04 | global batch size:   512 | lm loss: 7.1E+00 | loss scale: 1.0 | grad norm: 1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |";
        let s = steps(LogFormat::Auto, &[(l, 10.0)]);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].step, Some(20));
        assert!((s[0].step_time_s.unwrap() - 1.2345).abs() < 1e-12);
        let mut p = LogParser::new(LogFormat::Megatron);
        let ev =
            p.feed("[Rank 3] (after 10 iterations) memory (MB) | allocated: 1000.0 | max allocated: 2048.0 | reserved: 3000.0 | max reserved: 4096.0", 1.0);
        assert_eq!(
            ev,
            vec![LineEvent::Mem(MemReport { rank: 3, max_allocated_bytes: Some(2048.0 * 1048576.0), max_reserved_bytes: Some(4096.0 * 1048576.0) })]
        );
    }

    #[test]
    fn torchtitan_times_from_line_gaps() {
        let l1 = "[rank0]:[titan] 2025-03-01 12:00:00,000 - root - INFO - \x1b[31mstep: 10  \x1b[32mloss:  7.8765  \x1b[33mmemory: 30.12GiB(31.70%)  \x1b[34mtps: 5,123  \x1b[36mtflops: 200.12  \x1b[35mmfu: 20.25%\x1b[39m";
        let l2 =
            "[rank0]:[titan] 2025-03-01 12:00:05,000 - root - INFO - step: 20  loss:  6.1  memory: 30.50GiB(32.00%)  tps: 5,200  tflops: 203.0  mfu: 20.5%";
        let s = steps(LogFormat::Auto, &[(l1, 1.0), (l2, 6.0)]);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].step_time_s, None);
        assert_eq!(s[0].tokens_per_s, Some(5123.0));
        assert_eq!(s[1].n_steps, 10);
        assert!((s[1].step_time_s.unwrap() - 0.5).abs() < 1e-12);
    }

    #[test]
    fn hf_trainer_tqdm_and_summary() {
        let s =
            steps(LogFormat::Auto, &[(" 10%|█         | 10/100 [00:05<00:45,  2.00it/s]", 5.0), (" 20%|██        | 20/100 [00:25<01:30,  1.50s/it]", 25.0)]);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].step, Some(10));
        // The first redraw keeps the bar's own rate; the next is the time between the two
        // redraws over the 10 steps between their counts (20 s / 10), not the bar's 1.5 s/it.
        assert!((s[0].step_time_s.unwrap() - 0.5).abs() < 1e-12);
        assert!((s[1].step_time_s.unwrap() - 2.0).abs() < 1e-12);
        assert_eq!(s[1].n_steps, 10);
        let mut p = LogParser::new(LogFormat::HfTrainer);
        let ev = p.feed("{'train_runtime': 120.5, 'train_samples_per_second': 42.1, 'train_steps_per_second': 0.83, 'train_loss': 2.1, 'epoch': 1.0}", 130.0);
        assert_eq!(ev, vec![LineEvent::RunSummary { steps_per_s: 0.83 }]);
        assert_eq!(p.detected_format(), Some("hf-trainer"));
        // The Trainer's ProgressCallback prints the same dict with its values as strings.
        let mut p = LogParser::new(LogFormat::HfTrainer);
        let ev = p.feed(
            "{'train_runtime': '3.665', 'train_samples_per_second': '16.37', 'train_steps_per_second': '16.37', 'train_loss': '6.989', 'epoch': '0.9677'}",
            4.0,
        );
        assert_eq!(ev, vec![LineEvent::RunSummary { steps_per_s: 16.37 }]);
        // The bar's first line, before any step (`?it/s`), times nothing but starts the clock.
        let s = steps(LogFormat::HfTrainer, &[("  0%|          | 0/60 [00:00<?, ?it/s]", 1.0), ("  2%|▏         | 1/60 [00:02<02:46,  2.82s/it]", 3.5)]);
        assert_eq!(s.len(), 1);
        assert!((s[0].step_time_s.unwrap() - 2.5).abs() < 1e-12);
        // tqdm redraws the bar with the same count after a logged metrics dict: one step, not two
        // (issue 19: 82 step lines for a 40-step Trainer run).
        let s = steps(
            LogFormat::HfTrainer,
            &[
                (" 5%|▌         | 2/40 [00:01<00:19,  1.90it/s]", 1.0),
                ("{'loss': 10.4, 'grad_norm': 3.1, 'learning_rate': 5e-05, 'epoch': 0.05}", 1.1),
                (" 5%|▌         | 2/40 [00:01<00:19,  1.90it/s]", 1.1),
                (" 8%|▊         | 3/40 [00:01<00:19,  1.95it/s]", 1.6),
            ],
        );
        assert_eq!(s.iter().map(|x| x.step).collect::<Vec<_>>(), vec![Some(2), Some(3)]);
        // An evaluation bar (another total) between training redraws is not training steps.
        let s = steps(
            LogFormat::HfTrainer,
            &[
                (" 5%|▌         | 2/40 [00:01<00:19,  1.90it/s]", 1.0),
                (" 60%|██████    | 6/10 [00:00<00:00, 20.0it/s]", 1.2),
                (" 8%|▊         | 3/40 [00:01<00:19,  1.95it/s]", 1.6),
            ],
        );
        assert_eq!(s.iter().map(|x| x.step).collect::<Vec<_>>(), vec![Some(2), Some(3)]);
        assert!((s[1].step_time_s.unwrap() - 0.6).abs() < 1e-12);
    }

    #[test]
    fn user_regex() {
        let re = step_regex(r"it (?P<step>\d+) took (?P<time_ms>[0-9.]+) ms").unwrap();
        let s = steps(LogFormat::Regex(re), &[("it 7 took 250.0 ms", 1.0), ("noise", 2.0)]);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].step, Some(7));
        assert!((s[0].step_time_s.unwrap() - 0.25).abs() < 1e-12);
        assert!(step_regex(r"(?P<step>\d+)").is_err());
        assert!(step_regex(r"(").is_err());
    }

    #[test]
    fn oom_markers() {
        for l in [
            "gpuplan-workload: oom rank=0 CUDA out of memory. Tried to allocate 2.00 GiB",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 139.81 GiB",
            "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
            "[rank1]: torch.OutOfMemoryError: CUDA out of memory.",
        ] {
            let mut p = LogParser::new(LogFormat::Auto);
            assert!(p.feed(l, 0.0).iter().any(|e| matches!(e, LineEvent::Oom(_))), "{l}");
        }
        let mut p = LogParser::new(LogFormat::Auto);
        assert!(!p.feed("step=1 step_time_s=0.1 tokens=10", 0.0).iter().any(|e| matches!(e, LineEvent::Oom(_))));
    }
}
