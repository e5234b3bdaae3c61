//! Run the job: its output goes through to the given sinks unchanged while its lines (split at
//! `\n` and `\r`, so tqdm's progress updates count) come back with the time their first byte arrived.

use std::io::{Read, Write};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

pub struct JobEnd {
    pub status: ExitStatus,
    pub timed_out: bool,
}

/// Start `argv`, copy its stdout/stderr to `out`/`err`, call `on_line(stream, line, t_s)` for
/// each line, and wait. After `timeout` the job gets SIGTERM (torchrun passes it to its
/// workers), then SIGKILL 15 s later. Output that comes more than 2 s after the job exited (from
/// a grandchild still holding its pipes) is not read.
pub fn run(
    argv: &[String],
    timeout: Option<Duration>,
    t0: Instant,
    out: impl Write + Send + 'static,
    err: impl Write + Send + 'static,
    mut on_line: impl FnMut(Stream, &str, f64),
) -> std::io::Result<JobEnd> {
    let (prog, args) = argv.split_first().ok_or_else(|| std::io::Error::other("no command given"))?;
    let mut child = Command::new(prog).args(args).stdin(Stdio::inherit()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    let stdout = child.stdout.take().expect("piped");
    let stderr = child.stderr.take().expect("piped");
    let (tx, rx) = mpsc::channel::<(Stream, String, f64)>();
    let tx2 = tx.clone();
    // Detached: a grandchild that outlives the job may hold the pipes open; we stop reading
    // `GRACE` after the job itself has ended.
    std::thread::spawn(move || pump(stdout, out, Stream::Stdout, t0, tx));
    std::thread::spawn(move || pump(stderr, err, Stream::Stderr, t0, tx2));
    const GRACE: Duration = Duration::from_secs(2);
    let mut timed_out = false;
    let mut term_at: Option<Instant> = None;
    let mut killed = false;
    let mut ended: Option<(ExitStatus, Instant)> = None;
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok((st, line, at)) => on_line(st, &line, at),
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if ended.is_none() {
            if let Some(st) = child.try_wait()? {
                ended = Some((st, Instant::now()));
            }
        }
        if let Some((_, at)) = ended {
            if at.elapsed() > GRACE {
                break;
            }
            continue;
        }
        if let Some(limit) = timeout {
            if !timed_out && t0.elapsed() > limit {
                timed_out = true;
                term_at = Some(Instant::now());
                // SAFETY: kill(2) on our own child's pid, which has not been reaped yet.
                unsafe {
                    libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
                }
            }
        }
        if let Some(t) = term_at {
            if !killed && t.elapsed() > Duration::from_secs(15) {
                let _ = child.kill();
                killed = true;
            }
        }
    }
    // Lines still queued arrived before the end.
    while let Ok((st, line, at)) = rx.try_recv() {
        on_line(st, &line, at);
    }
    let status = match ended {
        Some((st, _)) => st,
        None => child.wait()?,
    };
    Ok(JobEnd { status, timed_out })
}

fn pump(mut src: impl Read, mut sink: impl Write, st: Stream, t0: Instant, tx: mpsc::Sender<(Stream, String, f64)>) {
    let mut buf = [0u8; 16384];
    let mut line: Vec<u8> = Vec::new();
    // A line's time is when its first byte arrived. A tqdm bar is written as `\r` and the bar in
    // one write and ended only by the next write's `\r` or `\n` (the next redraw, 0.1 s or more
    // later): its terminator's time would be the next redraw's, not its own.
    let mut started: Option<f64> = None;
    loop {
        let n = match src.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let _ = sink.write_all(&buf[..n]);
        let _ = sink.flush();
        let at = t0.elapsed().as_secs_f64();
        for &b in &buf[..n] {
            if b == b'\n' || b == b'\r' {
                if !line.is_empty() {
                    let _ = tx.send((st, String::from_utf8_lossy(&line).into_owned(), started.unwrap_or(at)));
                    line.clear();
                }
                started = None;
            } else {
                started.get_or_insert(at);
                line.push(b);
            }
        }
    }
    if !line.is_empty() {
        let _ = tx.send((st, String::from_utf8_lossy(&line).into_owned(), started.unwrap_or_else(|| t0.elapsed().as_secs_f64())));
    }
}
