//! `baton bench fixtures`: plans the sweep (scenarios × profiles × strategies × repetitions), runs
//! the calls on worker threads with progress, and hands the results to the report writers.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::demo::{self, DemoArgs};
use crate::leg::fixture::LegCodec;
use crate::mock::profile::{PROFILES, Profile};
use crate::model::gemini::endpoint::DEVELOPER_API_BASE;

use super::capture::{self, Warnings};
use super::host::{self, Machine};
use super::report::{self, ReportError, RunInfo};
use super::samples::{CallResult, CallSample, CallerFormat, Cell, Clocks, ok};

mod progress;

use progress::{Finished, Progress};

/// Every strategy `baton demo --strategy` takes, in the order reports list them.
pub const STRATEGIES: [&str; 6] = [
    "auto",
    "context_update",
    "tool_response",
    "inject_turn",
    "recreate",
    "recreate_cold",
];

/// Which model the calls talk to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ModelKind {
    /// The embedded mock (in process when accelerated, on a loopback socket in real time), or a
    /// `baton mock-model` given by --model-url.
    Mock,
    /// The real Gemini Live service (real time; the key from --api-key-env).
    Gemini,
}

/// Command-line arguments of `baton bench fixtures`.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "Examples:\n  \
    baton bench fixtures                                   # every bundled scenario, accelerated\n  \
    baton bench fixtures --scenario seed000 --strategy all --profile all --calls 3\n  \
    baton bench fixtures --scenario demo --realtime --calls 2\n  \
    baton bench fixtures --model-url ws://127.0.0.1:9300   # a `baton mock-model`\n  \
    baton bench fixtures --fixture my-call.wav             # your recording, any rate or channels\n  \
    GEMINI_API_KEY=... baton bench fixtures --model gemini --scenario demo\n\n\
    Scenario files (the mock's script, the caller's WAV, faults, agents): docs/scenarios.md")]
pub struct FixturesArgs {
    /// Scenarios: bundled names (see `baton demo --list`), files, a comma list, or `all`
    /// (default: `all`, or none when --fixture is given).
    #[arg(long, value_name = "NAME|FILE|all")]
    pub scenario: Option<String>,
    /// Caller recordings to bench (WAV of any rate, channel count and length; a comma list or
    /// the option repeated). Each is one scenario named after its file: the embedded mock
    /// answers every caller turn with its default reply (with --agents, that agent set).
    #[arg(long, value_name = "FILE.wav", value_delimiter = ',')]
    pub fixture: Vec<PathBuf>,
    /// Calls per scenario, profile and strategy.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub calls: u32,
    /// Real pace over loopback sockets: baton's own latency (default: accelerated).
    #[arg(long, conflicts_with = "accelerated")]
    pub realtime: bool,
    /// Virtual clock, in-process mock: the modelled delays, and throughput (the default).
    #[arg(long)]
    pub accelerated: bool,
    /// Handoff strategies: one, a comma list, or `all` (default: each agent's configured policy).
    /// Scenarios without an agent set run once, with none.
    #[arg(long, value_name = "LIST|all")]
    pub strategy: Option<String>,
    /// Embedded mock profiles: gemini-3.8, gemini-2.5, gemini-3.1, openai (the OpenAI Realtime
    /// protocol), a comma list, or `all` (the Gemini ones)
    /// (default: each scenario's).
    #[arg(long, value_name = "LIST|all")]
    pub profile: Option<String>,
    /// Run this agent set instead of each scenario's.
    #[arg(long, value_name = "FILE")]
    pub agents: Option<PathBuf>,
    /// The embedded mock's first-audio latency in ms (default: the scenario's).
    #[arg(long, value_name = "MS")]
    pub first_audio_ms: Option<u64>,
    /// The embedded mock's generation speed, × real time (default: the scenario's; 1.0: real
    /// pace, where a handoff's silence is set by the model's first-audio latency).
    #[arg(long, value_name = "X")]
    pub model_speed: Option<f64>,
    /// The model: the mock (embedded, or --model-url) or the real Gemini service.
    #[arg(long, value_enum, default_value = "mock")]
    pub model: ModelKind,
    /// A Live endpoint (ws:// or wss://): a `baton mock-model`, or the service's. Implies
    /// --realtime.
    #[arg(long, value_name = "URL")]
    pub model_url: Option<String>,
    /// Model id sent in setup (default: the model each profile imitates; with --model gemini:
    /// models/gemini-3.8-live).
    #[arg(long, value_name = "ID")]
    pub model_id: Option<String>,
    /// Environment variable holding the API key (never pass the key itself).
    #[arg(long, value_name = "VAR", default_value = "GEMINI_API_KEY")]
    pub api_key_env: String,
    /// How the caller's audio travels: l16-16k or pcmu8k.
    #[arg(long, default_value = "l16-16k")]
    pub leg_codec: LegCodec,
    /// Calls run at once, each on its own thread and runtime (default: the cores). Real-time
    /// calls mostly wait, so more than the cores is fine there.
    #[arg(long, value_name = "N")]
    pub jobs: Option<usize>,
    /// Where report.md, report.json and the plots go.
    #[arg(long, value_name = "DIR", default_value = "out/bench/fixtures")]
    pub report: PathBuf,
}

impl Default for FixturesArgs {
    /// The same defaults as the command line.
    fn default() -> Self {
        FixturesArgs {
            scenario: None,
            fixture: Vec::new(),
            calls: 1,
            realtime: false,
            accelerated: false,
            strategy: None,
            profile: None,
            agents: None,
            first_audio_ms: None,
            model_speed: None,
            model: ModelKind::Mock,
            model_url: None,
            model_id: None,
            api_key_env: "GEMINI_API_KEY".into(),
            leg_codec: LegCodec::L16k16,
            jobs: None,
            report: PathBuf::from("out/bench/fixtures"),
        }
    }
}

/// Why a fixture run failed.
#[derive(Debug, thiserror::Error)]
pub enum FixturesError {
    #[error("{0}")]
    Usage(String),
    /// The error names the file; it is not a `source`, so it is printed once.
    #[error("{error}")]
    Scenario {
        scenario: String,
        error: demo::DemoError,
    },
    #[error("{var} is not set: the real service needs an API key in that environment variable")]
    MissingKey { var: String },
    #[error(transparent)]
    Report(#[from] report::ReportError),
    #[error("{failed} of {total} calls failed (first: {first}); the report is in {}", report.display())]
    CallsFailed {
        failed: usize,
        total: usize,
        first: String,
        report: PathBuf,
    },
}

/// The sweep, with each scenario's files loaded once.
pub struct Plan {
    pub cells: Vec<Cell>,
    pub prepared: Vec<demo::Prepared>,
    /// Cells the sweep leaves out, each with why (a strategy the profile's model cannot carry).
    pub left_out: Vec<String>,
}

fn cpu_since(before: Option<Duration>) -> Option<Duration> {
    Some(host::cpu_time()?.saturating_sub(before?))
}

/// Runs the benchmark described by `args` and writes its report.
pub fn run(args: &FixturesArgs) -> Result<(), FixturesError> {
    let remote = args.model_url.is_some() || args.model == ModelKind::Gemini;
    let realtime = args.realtime || remote;
    let model_url = match (args.model, &args.model_url) {
        (_, Some(url)) => Some(url.clone()),
        (ModelKind::Gemini, None) => Some(DEVELOPER_API_BASE.to_owned()),
        (ModelKind::Mock, None) => None,
    };
    if args.calls == 0 {
        return Err(FixturesError::Usage("--calls must be at least 1".into()));
    }
    if remote && args.profile.is_some() {
        return Err(FixturesError::Usage(
            "--profile chooses the embedded mock's behaviour; a remote model has its own".into(),
        ));
    }
    if model_url
        .as_deref()
        .is_some_and(|u| u.starts_with(DEVELOPER_API_BASE))
        && std::env::var(&args.api_key_env).map_or(true, |k| k.is_empty())
    {
        return Err(FixturesError::MissingKey {
            var: args.api_key_env.clone(),
        });
    }
    let machine = Machine::detect();
    let load_cpu = host::cpu_time();
    let load_started = Instant::now();
    let plan = plan(args)?;
    let (load_wall, load_cpu) = (load_started.elapsed(), cpu_since(load_cpu));
    // A request refused above leaves nothing behind; a good one gets its directory now.
    report_dir(&args.report)?;
    let cells = &plan.cells;
    let jobs = args
        .jobs
        .unwrap_or_else(host::cores)
        .clamp(1, cells.len() * args.calls as usize);
    let template = DemoArgs {
        agents: args.agents.clone(),
        first_audio_ms: args.first_audio_ms,
        model_speed: args.model_speed,
        realtime,
        model_url,
        model: args.model_id.clone(),
        api_key_env: args.api_key_env.clone(),
        leg_codec: args.leg_codec,
        ..DemoArgs::default()
    };

    let cpu_before = host::cpu_time();
    let started = Instant::now();
    let results = execute(&plan, args.calls, jobs, &template, realtime);
    let clocks = Clocks {
        wall: started.elapsed(),
        cpu: cpu_since(cpu_before),
        load_wall,
        load_cpu,
        workers: jobs,
    };

    let info = RunInfo {
        command: command_line(),
        machine,
        mode: if realtime { "realtime" } else { "accelerated" },
        model: match (&template.model_url, args.model) {
            (None, _) => "embedded mock".to_owned(),
            (Some(_), ModelKind::Gemini) => format!(
                "Gemini Live ({})",
                args.model_id
                    .as_deref()
                    .unwrap_or(crate::model::catalog::DEFAULT_GEMINI_MODEL)
            ),
            (Some(url), ModelKind::Mock) => format!("mock at {url}"),
        },
        leg_codec: args.leg_codec.name(),
        calls_per_cell: args.calls,
        left_out: plan.left_out.clone(),
    };
    let written = write(&args.report, &info, cells, &results, clocks)?;
    eprintln!(
        "bench fixtures: {} call{} in {:.1} s; report {}",
        results.len(),
        if results.len() == 1 { "" } else { "s" },
        clocks.wall.as_secs_f64(),
        written.display()
    );
    let failed: Vec<&String> = results
        .iter()
        .filter_map(|r| r.outcome.as_ref().err())
        .collect();
    match failed.first() {
        None => Ok(()),
        Some(first) => Err(FixturesError::CallsFailed {
            failed: failed.len(),
            total: results.len(),
            first: (*first).clone(),
            report: written,
        }),
    }
}

/// The cells of the sweep, scenarios in the given order, then profiles, then strategies; loads
/// each scenario's files.
pub fn plan(args: &FixturesArgs) -> Result<Plan, FixturesError> {
    let named = match args.scenario.as_deref().map(str::trim) {
        None if !args.fixture.is_empty() => None,
        None | Some("all") => Some("all"),
        Some(given) => Some(given),
    };
    let scenarios: Vec<PathBuf> = match named {
        None => Vec::new(),
        Some("all") => demo::bundled_scenarios().map_err(|error| FixturesError::Scenario {
            scenario: "all".into(),
            error,
        })?,
        Some(given) => list(given).map(demo::scenario_path).collect(),
    };
    if scenarios.is_empty() && args.fixture.is_empty() {
        return Err(FixturesError::Usage("no scenario to run".into()));
    }
    let profiles: Vec<Option<String>> = match args.profile.as_deref().map(str::trim) {
        None => vec![None],
        Some("all") => PROFILES.iter().map(|p| Some(p.name().to_owned())).collect(),
        Some(given) => list(given)
            .map(|p| {
                if p == demo::OPENAI_PROFILE {
                    return Ok(Some(p.to_owned()));
                }
                p.parse::<Profile>()
                    .map(|p| Some(p.name().to_owned()))
                    .map_err(|e| FixturesError::Usage(format!("{e}, or {}", demo::OPENAI_PROFILE)))
            })
            .collect::<Result<_, _>>()?,
    };
    let strategies: Vec<Option<String>> = match args.strategy.as_deref().map(str::trim) {
        None => vec![None],
        Some("all") => STRATEGIES.iter().map(|s| Some((*s).to_owned())).collect(),
        Some(given) => list(given)
            .map(|s| {
                demo::parse_strategy(s)
                    .map(|st| Some(st.as_str().to_owned()))
                    .map_err(|e| FixturesError::Usage(e.to_string()))
            })
            .collect::<Result<_, _>>()?,
    };
    let mut cells = Vec::new();
    let mut prepared = Vec::new();
    let mut left_out = Vec::new();
    let fixtures = args.fixture.iter().map(|wav| (wav, true));
    for (path, is_fixture) in scenarios.iter().map(|p| (p, false)).chain(fixtures) {
        let demo_args = DemoArgs {
            scenario: Some(path.display().to_string()),
            agents: args.agents.clone(),
            leg_codec: args.leg_codec,
            ..DemoArgs::default()
        };
        let mut loaded = if is_fixture {
            demo::prepare_fixture(&demo_args, path)
        } else {
            demo::prepare(&demo_args)
        }
        .map_err(|error| FixturesError::Scenario {
            scenario: path.display().to_string(),
            error,
        })?;
        // The sweep reads each call's report, not what its caller heard.
        loaded.fixture.record = false;
        // Two recordings with one file name (or a recording named like a scenario) stay apart.
        let base = loaded.scenario.name.clone();
        let mut n = 1;
        while cells
            .iter()
            .any(|c: &Cell| c.scenario_name == loaded.scenario.name)
        {
            n += 1;
            loaded.scenario.name = format!("{base} ({n})");
        }
        let caller = loaded
            .scenario
            .caller
            .as_deref()
            .and_then(CallerFormat::read);
        let strategies: &[Option<String>] = if loaded.registry.is_some() {
            &strategies
        } else {
            &[None]
        };
        for profile in &profiles {
            for strategy in strategies {
                // A strategy the profile's model can never carry is refused by the call; the
                // sweep leaves that cell out and says why.
                if let Some(s) = strategy
                    .as_deref()
                    .and_then(|s| demo::parse_strategy(s).ok())
                    && args.model_url.is_none()
                {
                    let p = profile
                        .clone()
                        .unwrap_or_else(|| loaded.scenario.profile.name().to_owned());
                    if let Some(missing) = unplayable_on(s, &p) {
                        let why = format!(
                            "{} on {p}: {} left out (the model has {missing})",
                            loaded.scenario.name,
                            s.as_str()
                        );
                        eprintln!("bench fixtures: {why}");
                        left_out.push(why);
                        continue;
                    }
                }
                cells.push(Cell {
                    scenario: path.clone(),
                    prepared: prepared.len(),
                    scenario_name: loaded.scenario.name.clone(),
                    strategy: strategy.clone(),
                    profile: profile.clone(),
                    caller: caller.clone(),
                });
            }
        }
        prepared.push(loaded);
    }
    if cells.is_empty() {
        return Err(FixturesError::Usage(format!(
            "nothing to run: every cell was left out ({}); choose a strategy the profile's model \
             can carry, or another --profile",
            left_out.join("; ")
        )));
    }
    Ok(Plan {
        cells,
        prepared,
        left_out,
    })
}

/// What the model of the embedded mock's `profile` lacks to carry `s` at all, if anything.
fn unplayable_on(s: crate::agents::Strategy, profile: &str) -> Option<&'static str> {
    use crate::model::catalog;
    use crate::model::handle::Protocol;
    let info = if profile == demo::OPENAI_PROFILE {
        catalog::lookup(Protocol::OpenAi, catalog::DEFAULT_OPENAI_MODEL)
    } else {
        let p: Profile = profile.parse().ok()?;
        catalog::lookup(Protocol::Gemini, p.model_id())
    };
    crate::agents::strategy::unplayable(s, &info.capabilities)
}

fn list(s: &str) -> impl Iterator<Item = &str> {
    s.split(',').map(str::trim).filter(|x| !x.is_empty())
}

/// Runs every cell `calls` times on `jobs` worker threads; results come back in cell order.
fn execute(
    plan: &Plan,
    calls: u32,
    jobs: usize,
    template: &DemoArgs,
    realtime: bool,
) -> Vec<CallResult> {
    let cells = &plan.cells;
    let work: Vec<(usize, u32)> = (0..cells.len())
        .flat_map(|c| (0..calls).map(move |r| (c, r)))
        .collect();
    let total = work.len();
    let audio = |c: usize| {
        plan.prepared[cells[c].prepared]
            .fixture
            .duration()
            .as_secs_f64()
    };
    let audio_total: f64 = work.iter().map(|&(c, _)| audio(c)).sum();
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel::<CallResult>();
    let mut progress = Progress::new(total as u64, audio_total, jobs, realtime);
    let mut results = Vec::with_capacity(total);
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            let tx = tx.clone();
            let (work, next) = (&work, &next);
            scope.spawn(move || {
                while let Some(&(cell, rep)) = work.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let warnings: Warnings = Warnings::default();
                    let began = std::time::Instant::now();
                    let outcome = run_one(plan, &cells[cell], template, realtime, &warnings);
                    let took = began.elapsed();
                    let warnings = warnings.lock().map(|w| w.clone()).unwrap_or_default();
                    let result = CallResult {
                        cell,
                        rep,
                        outcome,
                        warnings,
                        took,
                    };
                    if tx.send(result).is_err() {
                        return;
                    }
                }
            });
        }
        drop(tx);
        for result in rx {
            let cell = &cells[result.cell];
            let what = [cell.scenario_name.clone(), describe(cell)].join(" ");
            progress.done(Finished {
                what: what.trim(),
                ok: result.outcome.is_ok(),
                audio_s: audio(result.cell),
                took: result.took,
                warnings: result.warnings.len(),
                expected: result
                    .outcome
                    .as_ref()
                    .is_ok_and(|s| s.meta.scripted_faults),
            });
            results.push(result);
        }
    });
    progress.finish();
    results.sort_by_key(|r| (r.cell, r.rep));
    results
}

/// One call of `cell`; whatever it logs at WARN or ERROR goes to `warnings` (its threads are
/// marked for the call).
fn run_one(
    plan: &Plan,
    cell: &Cell,
    template: &DemoArgs,
    realtime: bool,
    warnings: &Warnings,
) -> Result<CallSample, String> {
    let args = DemoArgs {
        strategy: cell.strategy.clone(),
        profile: cell.profile.clone(),
        ..template.clone()
    };
    let sink = warnings.clone();
    let mark: std::sync::Arc<dyn Fn() + Send + Sync> =
        std::sync::Arc::new(move || capture::mark_thread(Some(sink.clone())));
    capture::mark_thread(Some(warnings.clone()));
    let prepared = &plan.prepared[cell.prepared];
    // An accelerated call that opens no socket of its own runs without the I/O driver.
    let io = prepared
        .registry
        .as_ref()
        .is_some_and(|r| r.reaches_network());
    let rt = demo::runtime_with(realtime, io, Some(mark)).map_err(|e| e.to_string());
    let outcome = rt.and_then(|rt| {
        let outcome = rt
            .block_on(demo::run_prepared(prepared, &args, realtime))
            .map_err(|e| format!("{} {}: {e}", cell.scenario_name, describe(cell)));
        // Background tasks of a paused-clock runtime (the in-process mock's connection) end
        // with it.
        drop(rt);
        outcome
    });
    capture::mark_thread(None);
    let outcome = outcome?;
    Ok(CallSample {
        meta: outcome.meta,
        report: outcome.report,
        call_wall: outcome.prepare_wall + outcome.call_wall,
    })
}

fn describe(cell: &Cell) -> String {
    [cell.profile.as_deref(), cell.strategy.as_deref()]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The process's command line, shell-quoted where needed.
fn command_line() -> String {
    std::env::args()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=,:@+".contains(c))
            {
                a
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Makes `--report` before any call runs, so that a path that cannot hold the report (a file,
/// or under one) is refused at once rather than after a long run.
fn report_dir(dir: &Path) -> Result<(), FixturesError> {
    demo::make_dir(dir).map_err(|e| match e {
        demo::MakeDirError::NotADir(at) => FixturesError::Usage(format!(
            "--report {}: not a directory{at}; --report must be a directory (report.md, \
             report.json and the plots are written into it)",
            dir.display()
        )),
        demo::MakeDirError::Io(reason) => FixturesError::Report(ReportError::Output {
            path: dir.to_path_buf(),
            reason,
        }),
    })
}

/// Builds the report, draws its plots and writes everything into `dir`; returns `report.md`.
pub fn write(
    dir: &Path,
    info: &RunInfo,
    cells: &[Cell],
    results: &[CallResult],
    clocks: Clocks,
) -> Result<PathBuf, ReportError> {
    let output = |path: &Path, e: std::io::Error| ReportError::Output {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    std::fs::create_dir_all(dir).map_err(|e| output(dir, e))?;
    let mut report = report::build(info, cells, results, clocks);
    let samples: Vec<(&Cell, &CallSample)> = ok(results).map(|(c, s)| (&cells[c], s)).collect();
    super::figures::draw(dir, &mut report, &samples, info.mode)?;

    let json_path = dir.join("report.json");
    let json = serde_json::to_string_pretty(&report).map_err(|e| ReportError::Output {
        path: json_path.clone(),
        reason: e.to_string(),
    })?;
    std::fs::write(&json_path, format!("{json}\n")).map_err(|e| output(&json_path, e))?;
    let md_path = dir.join("report.md");
    std::fs::write(&md_path, super::markdown::render(&report)).map_err(|e| output(&md_path, e))?;
    Ok(md_path)
}

#[cfg(test)]
mod tests {
    use super::{FixturesError, report_dir};

    #[test]
    fn a_report_path_that_is_a_file_is_refused_before_any_call() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("call.wav");
        std::fs::write(&file, b"").unwrap();
        for path in [file.clone(), file.join("sub")] {
            let e = report_dir(&path).unwrap_err();
            assert!(matches!(e, FixturesError::Usage(_)), "{e}");
            assert!(e.to_string().contains("not a directory"), "{e}");
        }
        let fresh = dir.path().join("a/b");
        report_dir(&fresh).unwrap();
        assert!(fresh.is_dir());
    }
}
