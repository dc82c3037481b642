//! `baton bench load-client`: many concurrent Twilio-protocol callers in one process, for
//! `baton bench load` (which runs it as a child so the server under test is measured alone) or by
//! hand from another machine.
//!
//! Each call is a [`caller::dial`] future on a multi-threaded runtime: it sends the fixture's
//! μ-law frames on its own 20 ms tick and timestamps every `media` message it receives. Starts are
//! spread evenly over `--ramp`; each call starts at a different point of the (looped) fixture so
//! the agent's turns are spread over time as in a real population of calls, and hangs up after
//! `--duration`. Nothing is recorded.
//!
//! With `--call-seconds S` the calls churn, as on a real trunk: each of the `--calls` callers
//! (a *line*) places calls of S seconds one after another until `--duration` is up, the next
//! dialled as soon as the last hangs up, so the server holds `--calls` calls throughout while
//! every S seconds each of them is a new one. The first call on line `i` of N lasts
//! `S·(i+1)/N`, so the lines' hang-ups and new calls are spread evenly rather than all at once.
//!
//! Progress and the result go to stdout as JSON lines: `{"event":"started",…}` once every line's
//! first call has started (or failed to), `{"event":"first_end"}` when the first line is done,
//! then `{"event":"report",…}` with [`ClientReport`].

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::leg::twilio::caller::{self, CallerEnd, CallerError, CallerOptions, CallerReport};

use super::LoadError;

/// Options of `baton bench load-client`.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "Example:\n  \
    baton bench load-client ws://127.0.0.1:8080/twilio --calls 200 --duration 20\n\n\
    Prints JSON lines on stdout: {\"event\":\"started\"}, {\"event\":\"first_end\"}, then\n\
    {\"event\":\"report\", …} with the receive cadence of the agent audio over all calls.")]
pub struct LoadClientArgs {
    /// The server's Media Streams WebSocket URL.
    pub url: String,
    /// Concurrent calls.
    #[arg(long, default_value_t = 10)]
    pub calls: usize,
    /// Seconds each line places calls for (each call lasts this long without --call-seconds).
    #[arg(long, value_name = "S", default_value_t = 20.0)]
    pub duration: f64,
    /// Seconds each call lasts, replaced by a new call as it ends until --duration is up (a
    /// churn soak). Default: one call per line, lasting --duration.
    #[arg(long, value_name = "S")]
    pub call_seconds: Option<f64>,
    /// Seconds over which call starts are spread evenly.
    #[arg(long, value_name = "S", default_value_t = 1.0)]
    pub ramp: f64,
    /// What every caller says (looped): a WAV of any rate. Default: the bundled four-turn
    /// conversation.
    #[arg(long, value_name = "WAV")]
    pub fixture: Option<PathBuf>,
    /// A received frame counts as late when it arrives more than this many ms after 20 ms since
    /// the previous one.
    #[arg(long, value_name = "MS", default_value_t = 5.0)]
    pub late_ms: f64,
    /// Worker threads of the client's runtime (default: one per core; 1: a single-threaded
    /// runtime).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Before each wait for the network or a timer, the client's threads pause this long, so
    /// that what arrives meanwhile is handled in one wake-up (see `baton mock-model --batch-us`).
    /// Receive times and send ticks are then late by up to US µs. Default 0: no pause.
    #[arg(long, value_name = "US", default_value_t = 0)]
    pub batch_us: u64,
}

/// p50/p99/max in ms.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Pct {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Pct {
    /// Nearest-rank percentiles of µs values, in ms (zeros when empty). Sorts `v`.
    pub fn of_us(v: &mut [u32]) -> Pct {
        if v.is_empty() {
            return Pct::default();
        }
        v.sort_unstable();
        let rank = |p: f64| {
            let r = (p * v.len() as f64).ceil() as usize;
            f64::from(v[r.clamp(1, v.len()) - 1]) / 1000.0
        };
        Pct {
            p50: rank(0.50),
            p99: rank(0.99),
            max: f64::from(v[v.len() - 1]) / 1000.0,
        }
    }
}

/// What the load client measured over all its calls.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ClientReport {
    /// Callers placing calls at once (`--calls`).
    pub lines: usize,
    /// Calls placed over the run: one per line, or more when calls churn.
    pub calls: usize,
    /// Calls whose stream started.
    pub started: usize,
    /// Calls that could not start, by cause.
    pub failures: BTreeMap<String, u64>,
    /// How started calls ended: `hung_up` (the caller, after `--duration`), `server_closed`,
    /// `connection_lost`.
    pub ends: BTreeMap<String, u64>,
    pub frames_sent: u64,
    pub media_received: u64,
    /// Runs of agent audio (pauses over 200 ms separate them).
    pub bursts: u64,
    pub bad_messages: u64,
    /// Receive intervals measured (consecutive `media` within a burst), over all calls.
    pub intervals: usize,
    /// `|receive interval − 20 ms|` over all calls' intervals pooled.
    pub jitter_ms: Pct,
    /// Each call's own p99 of that deviation: median and worst call.
    pub call_p99_ms: Pct,
    /// Intervals longer than 20 ms + `late_ms`.
    pub late_frames: u64,
    pub late_ms: f64,
    /// How late the callers' own 20 ms send timers fired: the client's scheduling delay, which
    /// is also in `jitter_ms`. Large values mean the client, not the server, was short of CPU.
    pub tick_late_ms: Pct,
    /// First start to last end.
    pub elapsed_s: f64,
}

/// One line of the client's output.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ClientLine {
    Started { started: usize, failed: usize },
    FirstEnd,
    Report(ClientReport),
}

fn emit(line: &ClientLine) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "{}",
        serde_json::to_string(line).unwrap_or_else(|_| "{}".into())
    );
    let _ = out.flush();
}

fn failure_kind(e: &CallerError) -> String {
    match e {
        CallerError::BadUrl { .. } => "bad_url".into(),
        CallerError::Refused { status, .. } => format!("http_{status}"),
        CallerError::Connect { reason, .. } if reason.contains("Too many open files") => {
            "too_many_open_files".into()
        }
        CallerError::Connect { .. } => "connect".into(),
        CallerError::ConnectTimeout { .. } => "connect_timeout".into(),
        CallerError::Start { .. } => "start".into(),
    }
}

/// Samples in one 20 ms frame at 8 kHz.
const FRAME: usize = crate::leg::twilio::stream::FRAME_SAMPLES;

/// The fixture looped (or cut) to `frames` 20 ms frames.
fn looped(samples: &[i16], frames: usize) -> Vec<i16> {
    let want = frames * FRAME;
    if samples.is_empty() {
        return vec![0; want];
    }
    samples.iter().copied().cycle().take(want).collect()
}

/// Runs the calls and prints the JSON lines.
pub fn run(args: &LoadClientArgs) -> Result<(), LoadError> {
    if args.calls == 0 || args.duration <= 0.0 || args.ramp < 0.0 {
        return Err(LoadError::Args(
            "--calls must be positive, --duration positive and --ramp not negative".into(),
        ));
    }
    if let Some(s) = args.call_seconds
        && !(s >= 1.0 && s <= args.duration)
    {
        return Err(LoadError::Args(format!(
            "--call-seconds ({s}) must be at least 1 and at most --duration ({})",
            args.duration
        )));
    }
    let fixture = args
        .fixture
        .clone()
        .unwrap_or_else(|| crate::demo::bundled("audio-fixtures/clips/caller_conversation.wav"));
    let base = CallerOptions::from_wav(&fixture).map_err(|e| LoadError::Args(e.to_string()))?;
    // One thread: every call on one current-thread runtime, with no hand-offs between workers.
    let mut rt = match args.threads {
        Some(1) => tokio::runtime::Builder::new_current_thread(),
        Some(t) => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(t.max(1));
            b
        }
        None => tokio::runtime::Builder::new_multi_thread(),
    };
    crate::mock::cli::batched(&mut rt, Duration::from_micros(args.batch_us));
    let rt = rt
        .enable_all()
        .build()
        .map_err(|e| LoadError::Io(format!("cannot start the runtime: {e}")))?;
    let report = rt.block_on(run_calls(args, base));
    emit(&ClientLine::Report(report));
    Ok(())
}

/// How long the calls of line `i` of `n` last, in 20 ms frames, over a line of `frames` frames:
/// one call of `frames`, or (churning) calls of `call` frames, the first `call·(i+1)/n` long.
fn call_lengths(i: usize, n: usize, frames: usize, call: Option<usize>) -> Vec<usize> {
    let Some(call) = call.filter(|&c| c > 0 && c < frames) else {
        return vec![frames];
    };
    let mut lengths = vec![(call * (i + 1) / n.max(1)).max(1)];
    let mut placed = lengths[0];
    while placed < frames {
        let next = call.min(frames - placed);
        lengths.push(next);
        placed += next;
    }
    lengths
}

async fn run_calls(args: &LoadClientArgs, base: CallerOptions) -> ClientReport {
    let n = args.calls;
    let frames = (args.duration * 50.0).round().max(1.0) as usize;
    let call_frames = args.call_seconds.map(|s| (s * 50.0).round() as usize);
    let fixture_frames = base.samples.len().div_ceil(FRAME).max(1);
    // One looped copy of the fixture, long enough for the line that starts furthest into it,
    // shared by every call: each says its own span of it (a copy per call was 960 KB per
    // call-minute of memory the client's caches had to stream through).
    let samples: Arc<[i16]> = looped(&base.samples, fixture_frames + frames).into();
    // Starts of each line's first call (and its failures), and of the calls that replace them.
    let first_started = Arc::new(AtomicUsize::new(0));
    let more_started = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let t0 = tokio::time::Instant::now();
    // (the line's last call, its result)
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..n {
        let at = t0 + Duration::from_secs_f64(args.ramp * i as f64 / n as f64);
        // Start each line at a different point of the fixture, evenly spread, so agent turns
        // do not line up; a line's next call goes on where its last one stopped.
        let mut offset = i * fixture_frames / n;
        let lengths = call_lengths(i, n, frames, call_frames);
        let last = lengths.len() - 1;
        let mut calls = Vec::with_capacity(lengths.len());
        for (k, len) in lengths.into_iter().enumerate() {
            let mut opts = base.clone();
            opts.samples = Arc::clone(&samples);
            opts.span = Some(offset * FRAME..(offset + len) * FRAME);
            offset += len;
            opts.max_tail = Duration::ZERO;
            opts.record_audio = false;
            opts.started = Some(if k == 0 {
                first_started.clone()
            } else {
                more_started.clone()
            });
            opts.call_sid = format!("CA{i:016}{k:016}");
            opts.stream_sid = format!("MZ{i:016}{k:016}");
            calls.push(opts);
        }
        let url = args.url.clone();
        let failed = failed.clone();
        let done = done_tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            for (k, opts) in calls.into_iter().enumerate() {
                let r = caller::dial(&url, opts).await;
                if r.is_err() && k == 0 {
                    failed.fetch_add(1, Ordering::AcqRel);
                }
                let _ = done.send((k == last, r));
            }
        });
    }
    drop(done_tx);

    let mut report = ClientReport {
        lines: n,
        late_ms: args.late_ms,
        ..Default::default()
    };
    let late_us = (20_000.0 + args.late_ms * 1000.0) as u32;
    let mut all_dev: Vec<u32> = Vec::new();
    let mut call_p99: Vec<u32> = Vec::new();
    let mut ticks: Vec<u32> = Vec::new();
    let mut announced_start = false;
    let mut announced_end = false;
    let mut lines_done = 0usize;
    let mut poll = tokio::time::interval(Duration::from_millis(20));
    loop {
        if !announced_start {
            let (s, f) = (
                first_started.load(Ordering::Acquire),
                failed.load(Ordering::Acquire),
            );
            if s + f >= n {
                announced_start = true;
                emit(&ClientLine::Started {
                    started: s,
                    failed: f,
                });
            }
        }
        let (line_done, r) = tokio::select! {
            r = done_rx.recv() => match r {
                Some(r) => r,
                None => break,
            },
            _ = poll.tick() => continue,
        };
        report.calls += 1;
        lines_done += usize::from(line_done);
        if line_done && !announced_end {
            if !announced_start {
                // A call ended before all had started (a failure or a very short call).
                let s = first_started.load(Ordering::Acquire);
                let f = failed.load(Ordering::Acquire);
                if s + f >= n {
                    announced_start = true;
                    emit(&ClientLine::Started {
                        started: s,
                        failed: f,
                    });
                }
            }
            if r.is_ok() && announced_start {
                announced_end = true;
                emit(&ClientLine::FirstEnd);
            }
        }
        match r {
            Err(e) => *report.failures.entry(failure_kind(&e)).or_default() += 1,
            Ok(c) => add_call(
                &mut report,
                &c,
                late_us,
                &mut all_dev,
                &mut call_p99,
                &mut ticks,
            ),
        }
        if lines_done == n {
            break;
        }
    }
    if !announced_start {
        emit(&ClientLine::Started {
            started: first_started.load(Ordering::Acquire),
            failed: failed.load(Ordering::Acquire),
        });
    }
    report.started = first_started.load(Ordering::Acquire) + more_started.load(Ordering::Acquire);
    report.intervals = all_dev.len();
    report.jitter_ms = Pct::of_us(&mut all_dev);
    report.call_p99_ms = Pct::of_us(&mut call_p99);
    report.tick_late_ms = Pct::of_us(&mut ticks);
    report.elapsed_s = t0.elapsed().as_secs_f64();
    report
}

fn add_call(
    report: &mut ClientReport,
    c: &CallerReport,
    late_us: u32,
    all_dev: &mut Vec<u32>,
    call_p99: &mut Vec<u32>,
    ticks: &mut Vec<u32>,
) {
    let end = match c.end {
        CallerEnd::HungUp => "hung_up",
        CallerEnd::ServerClosed { .. } => "server_closed",
        CallerEnd::ConnectionLost(_) => "connection_lost",
    };
    *report.ends.entry(end.into()).or_default() += 1;
    report.frames_sent += c.frames_sent;
    report.media_received += c.media_received;
    report.bursts += c.bursts;
    report.bad_messages += c.bad_messages;
    report.late_frames += c.intervals_us.iter().filter(|&&i| i > late_us).count() as u64;
    all_dev.extend(
        c.intervals_us
            .iter()
            .map(|&i| (i64::from(i) - 20_000).unsigned_abs() as u32),
    );
    if c.cadence.intervals > 0 {
        call_p99.push(c.cadence.p99_dev_us);
    }
    ticks.extend_from_slice(&c.tick_late_us);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_looping() {
        let mut v: Vec<u32> = (1..=100).map(|i| i * 1000).collect();
        let p = Pct::of_us(&mut v);
        assert_eq!((p.p50, p.p99, p.max), (50.0, 99.0, 100.0));
        assert_eq!(Pct::of_us(&mut []), Pct::default());
        let s: Vec<i16> = (0..320).map(|i| i as i16).collect();
        let l = looped(&s, 3);
        assert_eq!(l.len(), 480);
        assert_eq!((l[0], l[160], l[320], l[479]), (0, 160, 0, 159));
        assert_eq!(looped(&[], 2), vec![0; 320]);
    }

    #[test]
    fn churning_lines_fill_the_duration_with_staggered_calls() {
        // No churn: one call per line.
        assert_eq!(call_lengths(0, 4, 1000, None), [1000]);
        assert_eq!(call_lengths(3, 4, 1000, Some(1000)), [1000]);
        // Calls of 400 frames over 1000, the first a quarter longer per line.
        assert_eq!(call_lengths(0, 4, 1000, Some(400)), [100, 400, 400, 100]);
        assert_eq!(call_lengths(1, 4, 1000, Some(400)), [200, 400, 400]);
        assert_eq!(call_lengths(3, 4, 1000, Some(400)), [400, 400, 200]);
        for i in 0..4 {
            assert_eq!(
                call_lengths(i, 4, 1000, Some(400)).iter().sum::<usize>(),
                1000
            );
        }
    }

    #[test]
    fn lines_round_trip() {
        let line = serde_json::to_string(&ClientLine::Started {
            started: 3,
            failed: 1,
        })
        .unwrap();
        assert_eq!(line, r#"{"event":"started","started":3,"failed":1}"#);
        let back: ClientLine = serde_json::from_str(r#"{"event":"first_end"}"#).unwrap();
        assert!(matches!(back, ClientLine::FirstEnd));
    }
}
