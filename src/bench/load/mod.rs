//! `baton bench load`: a concurrency sweep of Twilio-protocol calls against `baton serve`.
//!
//! Three processes per step, so baton's own CPU and memory are measured alone:
//! * `baton mock-model` (the model), on a free loopback port;
//! * `baton serve` with a generated config (`serve.toml` in the report folder) whose `model.url`
//!   points at that mock;
//! * `baton bench load-client` ([`client`]): the N callers, in one tokio process.
//!
//! The binary spawned is the current executable. Every step starts fresh processes, so each
//! step's RSS and counters are its own. During a step `/proc/<pid>/stat` and `/proc/<pid>/status`
//! of each process are read every 100 ms. The **steady window** runs from the moment every call
//! has started to the moment the first one ends (with `--call-seconds`, the calls churn: from
//! every caller's first call started to the first caller done); CPU % and RSS are taken over it.
//!
//! Figures per step (see the report's glossary for the exact definitions):
//! * egress jitter: `|interval − 20 ms|` between consecutive `media` messages **as the load
//!   client received them** (within a burst of agent audio), pooled over all calls: p50/p99/max.
//!   It includes loopback delivery and the client's own scheduling delay, which the client
//!   measures separately (`client.tick_late_ms`); baton's own view of its send intervals comes
//!   from `/metrics` (`baton_egress_jitter_ms`) as a cross-check;
//! * underruns and late ticks: **from the server** (`baton_underruns_total`,
//!   `baton_late_ticks_total` on `/metrics`, the playout's own counts, recorded as each call
//!   ends), because an underrun is sent as a silent `media` frame and cannot be told from quiet
//!   speech by the caller; late frames: received intervals longer than 20 ms + `--late-ms`;
//! * CPU % of one core and CPU ms per call-second; RSS idle, steady (median) and peak; RSS per
//!   call and the slope of steady RSS over calls across steps (least squares, KiB/call); over a
//!   window of a minute or more, the RSS drift after warm-up (a soak's flatness).
//!
//! A step **holds** when every call started and ran to its end, jitter p99 ≤ `--max-jitter-ms`
//! and there were 0 underruns. `--target URL` drives any Twilio-protocol server instead (CPU and
//! RSS only with `--target-pid`; underruns only if it serves baton's `/metrics`).

pub mod client;
pub mod procs;
mod progress;
pub mod report;
mod step;
mod under;

use progress::Progress;
use step::{Trace, run_step};
use under::{Scrape, Under, scrape, spawn_baton, target, wait_idle};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::Serialize;

pub use client::{ClientLine, ClientReport, LoadClientArgs, Pct};
use procs::{ChildGuard, ProcSample};

/// Command-line arguments of `baton bench load`.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "Examples:\n  \
    cargo build --release\n  \
    target/release/baton bench load --calls 50,100,200 --duration 20\n  \
    target/release/baton bench load --calls 100,250,500,1000,1500 --duration 20 --report out/bench/load\n  \
    baton bench load --target ws://10.0.0.5:8080/twilio --target-pid 4242 --calls 100,200\n\n\
    Writes report.md, report.json and jitter/cpu/rss plots (SVG + PNG) to --report.")]
pub struct LoadArgs {
    /// Concurrent calls of each step, comma-separated.
    #[arg(
        long,
        value_name = "N,N,…",
        value_delimiter = ',',
        default_value = "50,100,200"
    )]
    pub calls: Vec<usize>,
    /// Seconds each step lasts (each call, without --call-seconds).
    #[arg(long, value_name = "S", default_value_t = 20.0)]
    pub duration: f64,
    /// Calls churn: each lasts this many seconds and is replaced by a new one as it ends, so a
    /// step holds its number of calls for --duration while they come and go (a soak of a
    /// trunk's traffic rather than of N calls lasting the whole step). The first call of each
    /// caller is shorter by a spread amount, so hang-ups and new calls do not line up.
    #[arg(long, value_name = "S")]
    pub call_seconds: Option<f64>,
    /// Seconds over which the calls of a step start (evenly spread).
    #[arg(long, value_name = "S", default_value_t = 1.0)]
    pub ramp: f64,
    /// Where report.md, report.json and the plots go.
    #[arg(long, value_name = "DIR", default_value = "out/bench/load")]
    pub report: PathBuf,
    /// Drive this Twilio-protocol server instead of spawning `baton serve`.
    #[arg(long, value_name = "URL")]
    pub target: Option<String>,
    /// With --target: the server's process id, for its CPU and RSS.
    #[arg(long, value_name = "PID", requires = "target")]
    pub target_pid: Option<u32>,
    /// What every caller says (looped). Default: the bundled four-turn conversation.
    #[arg(long, value_name = "WAV")]
    pub fixture: Option<PathBuf>,
    /// The jitter budget: a step holds if its p99 is at most this.
    #[arg(long, value_name = "MS", default_value_t = 5.0)]
    pub max_jitter_ms: f64,
    /// Worker threads of the load client (default: one per core; 1: a single-threaded runtime).
    #[arg(long)]
    pub client_threads: Option<usize>,
    /// The load client's pause before each wait, in µs (`baton bench load-client --batch-us`).
    #[arg(long, value_name = "US", default_value_t = 0)]
    pub client_batch_us: u64,
    /// Threads of the spawned mock model (`baton mock-model --threads`).
    #[arg(long, value_name = "N", default_value_t = 1, conflicts_with = "target")]
    pub mock_threads: u16,
    /// The spawned mock model's pause before each wait, in µs (`baton mock-model --batch-us`):
    /// the caller audio of many calls is read in one wake-up.
    #[arg(
        long,
        value_name = "US",
        default_value_t = 1000,
        conflicts_with = "target"
    )]
    pub mock_batch_us: u64,
    /// The spawned `baton serve` keeps every call in this store (`[store] url`, e.g.
    /// `sqlite://out/bench/load.db`), to measure its cost on playout.
    #[arg(long, value_name = "URL", conflicts_with = "target")]
    pub store: Option<String>,
    /// The spawned `baton serve` runs this agent set (its events feed the store), with the mock
    /// model playing `--scenario`.
    #[arg(
        long,
        value_name = "FILE",
        requires = "scenario",
        conflicts_with = "target"
    )]
    pub agents: Option<PathBuf>,
    /// The mock model's scenario (with --agents, one scripted for that set, e.g.
    /// audio-fixtures/scenarios/seed000.toml).
    #[arg(long, value_name = "FILE", conflicts_with = "target")]
    pub scenario: Option<PathBuf>,
    /// The spawned mock model's profile (`baton mock-model --profile`: gemini-3.8, the
    /// default, gemini-2.5, gemini-3.1 or openai), addressed by the spawned `baton serve` as
    /// the real model it imitates.
    #[arg(long, value_name = "PROFILE", value_parser = parse_profile, conflicts_with = "target")]
    pub profile: Option<String>,
    /// The spawned `baton serve` sends caller audio as PCM at the model's native rate
    /// (`[model] resample_input = true`) rather than as the phone leg has it.
    #[arg(long, conflicts_with = "target")]
    pub resample_input: bool,
    /// The spawned `baton serve` sends caller audio to the model in chunks of this many ms
    /// (`[model] uplink_chunk_ms`: 20, 40, 60, 80 or 100; 20, the daemon's default, is each
    /// frame).
    #[arg(long, value_name = "MS", conflicts_with = "target", value_parser = parse_chunk_ms)]
    pub uplink_chunk_ms: Option<u64>,
}

/// A chunk `[model] uplink_chunk_ms` takes: a whole number of 20 ms frames, up to 100 ms.
fn parse_chunk_ms(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(ms) if (20..=100).contains(&ms) && ms.is_multiple_of(20) => Ok(ms),
        _ => Err(format!("{s:?}: use 20, 40, 60, 80 or 100")),
    }
}

/// A profile `baton mock-model --profile` takes.
fn parse_profile(s: &str) -> Result<String, String> {
    s.parse::<crate::mock::profile::ProfileArg>()
        .map(|_| s.trim().to_owned())
        .map_err(|e| format!("{e}, or openai"))
}

/// Why a load sweep failed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{0}")]
    Args(String),
    #[error("cannot start {what}: {reason}")]
    Spawn { what: String, reason: String },
    #[error("{0}")]
    Io(String),
    #[error("the load client failed: {0}")]
    Client(String),
    #[error(transparent)]
    Plot(#[from] crate::plot::PlotError),
}

/// CPU and memory of one process over a step.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ProcFigures {
    /// CPU time over the steady window ÷ its wall time, in % of one core.
    pub cpu_pct: Option<f64>,
    /// CPU ms over the steady window ÷ (calls × window seconds).
    pub cpu_ms_per_call_s: Option<f64>,
    /// Before the first call (KiB).
    pub rss_idle_kib: Option<u64>,
    /// After one 2-second call and 10 s with none live, before the step (KiB): a daemon that has
    /// served a call, with the call path's code resident.
    pub rss_warm_kib: Option<u64>,
    /// Its private part (RssAnon, KiB).
    pub anon_warm_kib: Option<u64>,
    /// Median over the steady window (KiB).
    pub rss_steady_kib: Option<u64>,
    /// Largest over the step (KiB).
    pub rss_peak_kib: Option<u64>,
    /// 10 s after the step's last call ended (KiB): what the daemon gives back.
    pub rss_after_kib: Option<u64>,
    /// The private part of the resident set (RssAnon) before the first call, median over the
    /// steady window and 10 s after the last call (KiB): memory the process holds, without the
    /// executable's pages that the first calls bring in.
    pub anon_idle_kib: Option<u64>,
    pub anon_steady_kib: Option<u64>,
    pub anon_after_kib: Option<u64>,
}

/// One step of the sweep.
#[derive(Clone, Debug, Serialize)]
pub struct Step {
    pub calls: usize,
    pub started: usize,
    pub failed: usize,
    pub failures: BTreeMap<String, u64>,
    pub ends: BTreeMap<String, u64>,
    /// Calls placed over the step: `calls`, or more when calls churn (`--call-seconds`).
    pub calls_placed: usize,
    /// Seconds between the last call start and the first call end.
    pub window_s: f64,
    /// Receive intervals behind `jitter_ms`.
    pub intervals: usize,
    /// `|receive interval − 20 ms|` as the load client saw it, pooled over calls.
    pub jitter_ms: Pct,
    /// Distribution of each call's own p99 (median call, worst call).
    pub call_p99_ms: Pct,
    /// Received frames more than `late_ms` behind the 20 ms cadence (client view).
    pub late_frames: u64,
    /// The server's underruns (from its `/metrics`).
    pub underruns: Option<u64>,
    /// The server's playout ticks released a full tick late (from its `/metrics`).
    pub late_ticks: Option<u64>,
    /// Wake-ups of baton's per-call tasks per call per 20 ms frame in the window (from its
    /// `/metrics` counter `baton_task_wakeups_total`).
    pub wakeups_per_call_frame: Option<f64>,
    /// Upper bound of the p99 of baton's own send-interval deviation (its `/metrics` histogram
    /// bucket holding the 99th percentile).
    pub server_send_jitter_p99_le_ms: Option<f64>,
    pub media_received: u64,
    pub frames_sent: u64,
    pub baton: ProcFigures,
    /// (steady − warm) ÷ calls, KiB (idle when there is no warm reading).
    pub rss_per_call_kib: Option<f64>,
    /// Over a steady window of 60 s or more: the window after its first fifth (warm-up) in four
    /// equal slices, each slice's median RSS (KiB)…
    pub rss_slices_kib: Vec<u64>,
    /// …and the largest minus the smallest of them, in % of the smallest: how flat memory
    /// stays under a constant load.
    pub rss_drift_pct: Option<f64>,
    /// RSS 10 s after the step's last call against the warm daemon before it, in %: what the
    /// daemon gave back.
    pub rss_after_vs_warm_pct: Option<f64>,
    /// The same of the private resident set (RssAnon), KiB.
    pub anon_per_call_kib: Option<f64>,
    pub mock_cpu_pct: Option<f64>,
    pub client_cpu_pct: Option<f64>,
    /// The mock model's CPU ms over the steady window ÷ (calls × window seconds): the rig's
    /// model side, per call, in the same unit as baton's.
    pub mock_cpu_ms_per_call_s: Option<f64>,
    /// The load client's CPU ms per call-second (the rig's caller side).
    pub client_cpu_ms_per_call_s: Option<f64>,
    /// The process that used the most CPU over the steady window (`baton`, `mock` or `client`):
    /// when it is not `baton`, the rig, not baton, is what limits the step.
    pub busiest: Option<&'static str>,
    /// CPU used by everything else on the machine over the steady window (% of one core): the
    /// whole machine's busy time (`/proc/stat`) minus baton, the mock and the client.
    pub other_cpu_pct: Option<f64>,
    /// The 1-minute load average when the step began.
    pub loadavg_before: Option<f64>,
    /// How late the client's own send timers fired (its scheduling delay).
    pub client_tick_late_ms: Pct,
    pub held: bool,
    /// Why the step did not hold.
    pub failed_because: Vec<String>,
}

/// The sweep's result (`report.json`).
#[derive(Clone, Debug, Serialize)]
pub struct LoadReport {
    pub command: String,
    pub machine: Machine,
    /// `spawned baton serve` or the --target URL.
    pub target: String,
    pub duration_s: f64,
    /// Each call's length when calls churn (`--call-seconds`).
    pub call_seconds: Option<f64>,
    pub ramp_s: f64,
    pub max_jitter_ms: f64,
    pub steps: Vec<Step>,
    /// Least-squares slope of steady RSS over calls, KiB per call.
    pub rss_slope_kib_per_call: Option<f64>,
    /// Its intercept (the fitted RSS at 0 calls), KiB.
    pub rss_intercept_kib: Option<f64>,
    /// The largest step that held.
    pub largest_held: Option<usize>,
    pub notes: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    pub cores: usize,
    pub cpu: String,
    pub mem_mib: u64,
    pub kernel: String,
    /// `release` or `debug`: the build of the baton that ran.
    pub build: String,
}

impl Machine {
    pub fn probe() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
            .unwrap_or_else(|| "unknown".into());
        let mem_mib = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines()
                    .find_map(|l| l.strip_prefix("MemTotal:"))
                    .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            })
            .map_or(0, |k| k / 1024);
        Machine {
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu,
            mem_mib,
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_owned())
                .unwrap_or_default(),
            build: if cfg!(debug_assertions) {
                "debug".into()
            } else {
                "release".into()
            },
        }
    }
}

/// Runs the sweep described by `args`.
pub fn run(args: &LoadArgs) -> Result<(), LoadError> {
    if args.calls.is_empty() || args.calls.contains(&0) {
        return Err(LoadError::Args(
            "--calls needs positive step sizes, e.g. --calls 50,100,200".into(),
        ));
    }
    if args.ramp < 0.0 || args.duration < args.ramp + 1.0 {
        return Err(LoadError::Args(format!(
            "--duration ({}) must exceed --ramp ({}) by at least 1 s so all calls overlap",
            args.duration, args.ramp
        )));
    }
    if let Some(s) = args.call_seconds
        && !(s >= 1.0 && s <= args.duration)
    {
        return Err(LoadError::Args(format!(
            "--call-seconds ({s}) must be at least 1 and at most --duration ({})",
            args.duration
        )));
    }
    // What the spawned processes would only find out later, in their logs: said here, at once.
    match (&args.target, args.target_pid) {
        (None, Some(_)) => {
            return Err(LoadError::Args(
                "--target-pid goes with --target (the server it names); without --target baton \
                 serve is spawned and measured anyway"
                    .into(),
            ));
        }
        (Some(t), _) => {
            crate::dial::check_url(t).map_err(|e| LoadError::Args(format!("--target {e}")))?;
        }
        _ => {}
    }
    if let Some(f) = &args.fixture {
        crate::leg::twilio::caller::CallerOptions::from_wav(f)
            .map_err(|e| LoadError::Args(format!("--fixture: {e}")))?;
    }
    if let Some(url) = &args.store {
        crate::store::check_url(url).map_err(|e| LoadError::Args(format!("--store: {e}")))?;
    }
    let max = *args.calls.iter().max().unwrap_or(&1);
    if let Some(limit) = procs::open_files_limit() {
        // baton holds two sockets per call (caller and model); the client one.
        let need = 2 * max as u64 + 256;
        if limit < need {
            return Err(LoadError::Args(format!(
                "the open-files limit is {limit}, too low for {max} calls (baton needs about {need}); \
                 raise it first, e.g. `ulimit -n {}`",
                need.max(4096)
            )));
        }
    }
    let exe = std::env::current_exe()
        .map_err(|e| LoadError::Io(format!("cannot find the baton executable: {e}")))?;
    let logs = args.report.join("logs");
    std::fs::create_dir_all(&logs)
        .map_err(|e| LoadError::Io(format!("cannot create {}: {e}", logs.display())))?;
    let ticks = procs::clock_ticks();
    procs::kill_on_signal();
    let mut progress = Progress::new(args.calls.len());
    let mut steps = Vec::new();
    for (i, &n) in args.calls.iter().enumerate() {
        progress.begin(i, n, args.duration + args.ramp);
        let step = run_step(args, &exe, n, ticks, &mut progress)?;
        progress.end(&step);
        if i == 0 && step.started == 0 {
            // Not a result: the target was never reached, so nothing was measured. (A later
            // step that starts nothing — a server that fell over at the step before — is a
            // result: it did not hold, and the report keeps the steps that did.)
            return Err(LoadError::Client(format!(
                "no call of the step reached {} ({:?}); see {}",
                args.target.as_deref().unwrap_or("the spawned baton serve"),
                step.failures,
                logs.display()
            )));
        }
        steps.push(step);
    }
    let mut notes = Vec::new();
    let machine = Machine::probe();
    if machine.build == "debug" {
        notes.push("debug build: figures are not representative; use cargo build --release".into());
    }
    if args.target.is_none() {
        notes.push(format!(
            "the load client and the mock model run on the same {} core(s) as baton and compete \
             with it for CPU; the jitter figures include the client's own scheduling delay \
             (client_tick_late_ms)",
            machine.cores
        ));
    }
    let (slope, intercept) = rss_fit(&steps);
    let report = LoadReport {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        machine,
        target: args.target.clone().unwrap_or_else(|| {
            let mut t = "spawned baton serve".to_owned();
            if let Some(p) = &args.profile {
                t += &format!(", mock profile {p}");
            }
            if args.resample_input {
                t += ", resample_input";
            }
            if let Some(ms) = args.uplink_chunk_ms {
                t += &format!(", uplink_chunk_ms {ms}");
            }
            if let Some(a) = &args.agents {
                t += &format!(", agent set {}", a.display());
            }
            if let Some(st) = &args.store {
                t += &format!(", store {st}");
            }
            t
        }),
        duration_s: args.duration,
        call_seconds: args.call_seconds,
        ramp_s: args.ramp,
        max_jitter_ms: args.max_jitter_ms,
        largest_held: steps.iter().filter(|s| s.held).map(|s| s.calls).max(),
        steps,
        rss_slope_kib_per_call: slope,
        rss_intercept_kib: intercept,
        notes,
    };
    report::write(&report, &args.report)?;
    print!("{}", report::summary(&report, &args.report));
    Ok(())
}

/// Least-squares line through (calls, steady RSS); `None` with fewer than two distinct sizes.
pub fn rss_fit(steps: &[Step]) -> (Option<f64>, Option<f64>) {
    let pts: Vec<(f64, f64)> = steps
        .iter()
        .filter_map(|s| {
            let up = s.started.min(s.calls);
            Some((up as f64, s.baton.rss_steady_kib? as f64))
        })
        .collect();
    if pts.len() < 2 {
        return (None, None);
    }
    let n = pts.len() as f64;
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if sxx == 0.0 {
        return (None, None);
    }
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let slope = sxy / sxx;
    (Some(slope), Some(my - slope * mx))
}
