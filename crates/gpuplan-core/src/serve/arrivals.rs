//! Request streams: arrival processes, length distributions and trace replay. Seeded and
//! deterministic (xoshiro256** seeded by SplitMix64; no global state).

/// One request of the workload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Arrival {
    /// Seconds from the start.
    pub at: f64,
    pub input_len: u32,
    pub output_len: u32,
}

/// xoshiro256** (Blackman and Vigna), seeded through SplitMix64.
#[derive(Debug, Clone)]
pub struct Rng([u64; 4]);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut z = seed;
        let mut next = || {
            z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut x = z;
            x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            x ^ (x >> 31)
        };
        Rng([next(), next(), next(), next()])
    }
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.0;
        let out = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        out
    }
    /// Uniform in (0, 1].
    pub fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }
    pub fn exponential(&mut self, mean: f64) -> f64 {
        -mean * self.unit().ln()
    }
    pub fn normal(&mut self) -> f64 {
        // Box-Muller, one of the pair.
        let (u, v) = (self.unit(), self.unit());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
    /// Gamma(shape, scale) by Marsaglia and Tsang (2000); shape < 1 by the boost U^(1/shape).
    pub fn gamma(&mut self, shape: f64, scale: f64) -> f64 {
        if shape < 1.0 {
            let u = self.unit();
            return self.gamma(shape + 1.0, scale) * u.powf(1.0 / shape);
        }
        let d = shape - 1.0 / 3.0;
        let c = 1.0 / (9.0 * d).sqrt();
        loop {
            let x = self.normal();
            let v = (1.0 + c * x).powi(3);
            if v <= 0.0 {
                continue;
            }
            let u = self.unit();
            if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
                return d * v * scale;
            }
        }
    }
}

/// How requests arrive.
#[derive(Debug, Clone, PartialEq)]
pub enum Process {
    /// Exponential inter-arrival times at `qps`.
    Poisson { qps: f64 },
    /// Gamma inter-arrival times with mean 1/qps and coefficient of variation `cv` (cv = 1 is
    /// Poisson; cv > 1 is bursty). vLLM's `benchmark_serving.py --burstiness` is 1/cv^2.
    Gamma { qps: f64, cv: f64 },
    /// Evenly spaced at `qps`.
    Constant { qps: f64 },
}

impl Process {
    pub fn qps(&self) -> f64 {
        match *self {
            Process::Poisson { qps } | Process::Gamma { qps, .. } | Process::Constant { qps } => qps,
        }
    }
    pub fn with_qps(&self, qps: f64) -> Process {
        match *self {
            Process::Poisson { .. } => Process::Poisson { qps },
            Process::Gamma { cv, .. } => Process::Gamma { qps, cv },
            Process::Constant { .. } => Process::Constant { qps },
        }
    }
    fn gap(&self, rng: &mut Rng) -> f64 {
        match *self {
            Process::Poisson { qps } => rng.exponential(1.0 / qps),
            Process::Gamma { qps, cv } => {
                let shape = 1.0 / (cv * cv);
                rng.gamma(shape, 1.0 / (qps * shape))
            }
            Process::Constant { qps } => 1.0 / qps,
        }
    }
}

/// A token-length distribution.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Lengths {
    Fixed(u32),
    /// Uniform integers in [lo, hi].
    Uniform {
        lo: u32,
        hi: u32,
    },
    /// Lognormal with this mean and log-space standard deviation `sigma`.
    Lognormal {
        mean: f64,
        sigma: f64,
    },
}

impl Lengths {
    pub fn sample(&self, rng: &mut Rng) -> u32 {
        match *self {
            Lengths::Fixed(n) => n,
            Lengths::Uniform { lo, hi } => lo + (rng.next_u64() % (hi - lo + 1) as u64) as u32,
            Lengths::Lognormal { mean, sigma } => {
                let mu = mean.ln() - 0.5 * sigma * sigma;
                (mu + sigma * rng.normal()).exp().round().max(1.0).min(u32::MAX as f64) as u32
            }
        }
    }
    pub fn mean(&self) -> f64 {
        match *self {
            Lengths::Fixed(n) => n as f64,
            Lengths::Uniform { lo, hi } => (lo as f64 + hi as f64) / 2.0,
            Lengths::Lognormal { mean, .. } => mean,
        }
    }
    /// The text form `parse` reads.
    pub fn spec(&self) -> String {
        match *self {
            Lengths::Fixed(n) => n.to_string(),
            Lengths::Uniform { lo, hi } => format!("uniform:{lo}:{hi}"),
            Lengths::Lognormal { mean, sigma } => format!("lognormal:{mean}:{sigma}"),
        }
    }
    /// Parse `512`, `uniform:128:1024` or `lognormal:512` / `lognormal:512:0.8` (sigma 1 by default).
    pub fn parse(text: &str) -> Result<Lengths, String> {
        let parts: Vec<&str> = text.split(':').collect();
        let num = |s: &str| s.trim().parse::<f64>().map_err(|_| format!("`{s}` is not a number"));
        let int = |s: &str| -> Result<u32, String> {
            let v = num(s)?;
            if v >= 1.0 && v.fract() == 0.0 && v <= u32::MAX as f64 {
                Ok(v as u32)
            } else {
                Err(format!("`{s}` must be a positive integer"))
            }
        };
        match parts.as_slice() {
            [n] => Ok(Lengths::Fixed(int(n)?)),
            ["fixed", n] => Ok(Lengths::Fixed(int(n)?)),
            ["uniform", lo, hi] => {
                let (lo, hi) = (int(lo)?, int(hi)?);
                if lo > hi {
                    return Err(format!("uniform bounds {lo} > {hi}"));
                }
                Ok(Lengths::Uniform { lo, hi })
            }
            ["lognormal", m] | ["lognormal", m, _] => {
                let mean = num(m)?;
                let sigma = if parts.len() == 3 { num(parts[2])? } else { 1.0 };
                if !(mean >= 1.0 && mean.is_finite() && sigma >= 0.0 && sigma.is_finite()) {
                    return Err(format!("lognormal needs a mean >= 1 and sigma >= 0, got {mean} and {sigma}"));
                }
                Ok(Lengths::Lognormal { mean, sigma })
            }
            _ => Err(format!("`{text}` is not a length distribution; give N, uniform:LO:HI or lognormal:MEAN[:SIGMA]")),
        }
    }
}

/// Requests arriving in `[0, duration_s)`: arrival times from `process`, each request's
/// input and output lengths (same seed, same stream). Lengths are clamped so that
/// input + output <= `max_len` (the model's context). At most `limits::serve::MAX_REQUESTS` + 1
/// requests are drawn: more than the limit means the stream was cut there (a bursty stream can
/// draw many more than qps x duration), which the caller refuses (`exceeds_limit`).
pub fn generate(process: &Process, input: Lengths, output: Lengths, duration_s: f64, seed: u64, max_len: u32) -> Vec<Arrival> {
    let cap = crate::limits::serve::MAX_REQUESTS as usize + 1;
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(((process.qps() * duration_s * 1.05) as usize + 16).min(cap));
    // The first request goes out at t = 0, as in vLLM's `benchmark_serving.py`.
    let mut t = 0.0;
    while t < duration_s && out.len() < cap {
        let i = input.sample(&mut rng).min(max_len.saturating_sub(1)).max(1);
        let o = output.sample(&mut rng).min(max_len - i).max(1);
        out.push(Arrival { at: t, input_len: i, output_len: o });
        t += process.gap(&mut rng);
    }
    out
}

/// `n` requests all queued at t = 0, as trtllm-bench's offline throughput mode sends them, with
/// lengths drawn as [`generate`] draws them.
pub fn offline(n: u64, input: Lengths, output: Lengths, seed: u64, max_len: u32) -> Vec<Arrival> {
    let mut rng = Rng::new(seed);
    (0..n.min(crate::limits::serve::MAX_REQUESTS + 1))
        .map(|_| {
            let i = input.sample(&mut rng).min(max_len.saturating_sub(1)).max(1);
            let o = output.sample(&mut rng).min(max_len - i).max(1);
            Arrival { at: 0.0, input_len: i, output_len: o }
        })
        .collect()
}

/// Whether a stream `generate` drew was cut at the limit on requests.
pub fn exceeds_limit(arrivals: &[Arrival]) -> bool {
    arrivals.len() as u64 > crate::limits::serve::MAX_REQUESTS
}

/// Read a trace CSV with a header naming `arrival_s`, `input_len` and `output_len` (other
/// columns ignored). Arrival times are taken relative to the first row's (a trace of Unix-epoch
/// timestamps starts at 0); they must be finite, non-negative and in order (each at or after the
/// one before), and the trace must hold at least one request. Errors name the line, the column
/// and the value.
pub fn read_trace(text: &str) -> Result<Vec<Arrival>, String> {
    let mut rdr = csv::ReaderBuilder::new().trim(csv::Trim::All).from_reader(text.as_bytes());
    let headers = rdr.headers().map_err(|e| e.to_string())?.clone();
    let col = |name: &str| {
        headers.iter().position(|h| h == name).ok_or_else(|| format!("no `{name}` column (columns: {})", headers.iter().collect::<Vec<_>>().join(", ")))
    };
    let (a, i, o) = (col("arrival_s")?, col("input_len")?, col("output_len")?);
    let mut out: Vec<Arrival> = Vec::new();
    let mut first = None;
    for (n, rec) in rdr.records().enumerate() {
        let rec = rec.map_err(|e| format!("row {}: {e}", n + 2))?;
        let line = rec.position().map_or(n as u64 + 2, |p| p.line());
        let get = |c: usize| rec.get(c).unwrap_or("");
        let at_col = |c: usize| format!("line {line}, column {} (`{}`)", c + 1, &headers[c]);
        let at: f64 = get(a).parse().map_err(|_| format!("{}: `{}` is not a number", at_col(a), get(a)))?;
        let len = |c: usize| -> Result<u32, String> {
            match get(c).parse::<u32>() {
                Ok(v) if v >= 1 => Ok(v),
                _ => Err(format!("{}: `{}` is not a positive integer\nhint: token counts from 1 to {}", at_col(c), get(c), u32::MAX)),
            }
        };
        let (il, ol) = (len(i)?, len(o)?);
        if !(at >= 0.0 && at.is_finite()) {
            return Err(format!(
                "{}: `{}` is not a non-negative time\nhint: seconds from the start of the trace (or Unix timestamps: times are taken from the first row's)",
                at_col(a),
                get(a)
            ));
        }
        let t0 = *first.get_or_insert(at);
        let rel = at - t0;
        if let Some(prev) = out.last().filter(|p| rel < p.at) {
            return Err(format!(
                "{}: `{}` is before the row above it ({} s after the first)\nhint: sort the trace by arrival time",
                at_col(a),
                get(a),
                prev.at
            ));
        }
        out.push(Arrival { at: rel, input_len: il, output_len: ol });
    }
    if out.is_empty() {
        return Err("holds no requests (a header and no rows)\nhint: one row per request: arrival_s,input_len,output_len".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poisson_and_gamma_have_the_asked_rate_and_cv() {
        for (p, cv) in [(Process::Poisson { qps: 50.0 }, 1.0), (Process::Gamma { qps: 50.0, cv: 3.0 }, 3.0), (Process::Gamma { qps: 50.0, cv: 0.5 }, 0.5)] {
            let a = generate(&p, Lengths::Fixed(10), Lengths::Fixed(10), 4000.0, 7, 1 << 20);
            let gaps: Vec<f64> = a.windows(2).map(|w| w[1].at - w[0].at).collect();
            let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
            let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
            assert!((1.0 / mean / 50.0 - 1.0).abs() < 0.03, "{p:?} rate {}", 1.0 / mean);
            assert!((var.sqrt() / mean / cv - 1.0).abs() < 0.06, "{p:?} cv {}", var.sqrt() / mean);
        }
    }

    #[test]
    fn lognormal_mean_and_parse() {
        let l = Lengths::parse("lognormal:400:0.7").unwrap();
        let mut r = Rng::new(1);
        let n = 200_000;
        let m = (0..n).map(|_| l.sample(&mut r) as f64).sum::<f64>() / n as f64;
        assert!((m / 400.0 - 1.0).abs() < 0.01, "{m}");
        assert_eq!(Lengths::parse("128").unwrap(), Lengths::Fixed(128));
        for t in ["128", "uniform:1:4", "lognormal:400:0.7"] {
            assert_eq!(Lengths::parse(&Lengths::parse(t).unwrap().spec()).unwrap(), Lengths::parse(t).unwrap());
        }
        assert_eq!(Lengths::parse("uniform:1:4").unwrap(), Lengths::Uniform { lo: 1, hi: 4 });
        assert!(Lengths::parse("uniform:4:1").is_err());
        assert!(Lengths::parse("zipf:3").is_err());
    }

    #[test]
    fn same_seed_same_stream() {
        let p = Process::Gamma { qps: 10.0, cv: 2.0 };
        let l = Lengths::Lognormal { mean: 100.0, sigma: 1.0 };
        assert_eq!(generate(&p, l, l, 100.0, 3, 4096), generate(&p, l, l, 100.0, 3, 4096));
        assert_ne!(generate(&p, l, l, 100.0, 3, 4096), generate(&p, l, l, 100.0, 4, 4096));
    }

    #[test]
    fn trace_reads_relative_to_the_first_arrival_in_order() {
        let t = "arrival_s,input_len,output_len,note\n1732400000.5,10,3,a\n1732400000.75,20,4,b\n";
        let a = read_trace(t).unwrap();
        assert_eq!(a[0], Arrival { at: 0.0, input_len: 10, output_len: 3 });
        assert_eq!(a[1], Arrival { at: 0.25, input_len: 20, output_len: 4 });
        assert!(read_trace("t,input_len,output_len\n1,2,3\n").unwrap_err().contains("arrival_s"));
        let e = read_trace("arrival_s,input_len,output_len\n0.5,10,3\n0.1,20,4\n").unwrap_err();
        assert!(e.contains("line 3, column 1 (`arrival_s`): `0.1` is before"), "{e}");
        let e = read_trace("arrival_s,input_len,output_len\n-1,10,3\n").unwrap_err();
        assert!(e.contains("line 2, column 1 (`arrival_s`): `-1`"), "{e}");
        let e = read_trace("arrival_s,input_len,output_len\n0,0,3\n").unwrap_err();
        assert!(e.contains("line 2, column 2 (`input_len`): `0`"), "{e}");
        assert!(read_trace("arrival_s,input_len,output_len\n").unwrap_err().contains("no requests"));
    }
}
