//! `baton demo`: one fixture call end to end — the bundled caller conversation through the Gemini
//! Live wire protocol to the embedded mock model (or any Live endpoint) and back through playout.
//! Prints a per-turn timeline and a latency table; writes the caller's stereo recording and a
//! `summary.json` whose names are fixed for every later report.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use crate::call::backend::ModelBackend;
use crate::call::metrics::{Summary, round2, summarize};
use crate::call::{self, CallOptions, CallReport};
use crate::leg::fixture::{FixtureCaller, LegCodec};
use crate::mock;
use crate::model::gemini::endpoint::{Backend, DEVELOPER_API_BASE, Endpoint, Secret};
use crate::model::gemini::session::SessionConfig;
use crate::model::handle::OpenError;

/// Options of one demo run.
#[derive(Clone, Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    baton demo                                  # bundled call, embedded mock, accelerated\n  \
    baton demo --realtime --leg-codec pcmu8k    # real pace over loopback sockets, phone codec\n  \
    baton demo --json > summary.json            # the summary on stdout\n  \
    baton demo --model-url ws://127.0.0.1:9300  # against a separate `baton mock-model`\n  \
    GEMINI_API_KEY=... baton demo --model-url wss://generativelanguage.googleapis.com")]
pub struct DemoArgs {
    /// Scenario: a bundled name (see --list) or a file. It names the caller fixture, the mock
    /// model's script and, for multi-agent calls, the agent set.
    #[arg(long, value_name = "NAME|FILE")]
    pub scenario: Option<String>,
    /// List the bundled scenarios, one per line, name first.
    #[arg(long)]
    pub list: bool,
    /// Carry every handoff with this strategy: auto, context_update, tool_response, inject_turn,
    /// recreate, recreate_cold (default: each agent's configured policy).
    #[arg(long, value_name = "STRATEGY")]
    pub strategy: Option<String>,
    /// The model profile: gemini-3.8, gemini-2.5 or gemini-3.1 (the embedded mock's Gemini Live
    /// behaviour; default: the scenario's), or openai: the OpenAI Realtime protocol (the embedded
    /// mock's OpenAI profile, or with --model-url an OpenAI Realtime endpoint such as
    /// `baton mock-model --profile openai` or wss://api.openai.com/v1).
    #[arg(long, value_name = "PROFILE")]
    pub profile: Option<String>,
    /// Run this agent set instead of the scenario's.
    #[arg(long, value_name = "FILE")]
    pub agents: Option<PathBuf>,
    /// The embedded mock's first-audio latency in ms (default: the scenario's).
    #[arg(long, value_name = "MS")]
    pub first_audio_ms: Option<u64>,
    /// Run at real pace over loopback sockets (default: accelerated on a virtual clock).
    #[arg(long)]
    pub realtime: bool,
    /// Where to write call.wav and summary.json.
    #[arg(long, value_name = "DIR", default_value = "out/demo")]
    pub out: PathBuf,
    /// Print the summary JSON on stdout instead of the tables.
    #[arg(long)]
    pub json: bool,
    /// Another Live endpoint (ws:// or wss://): a `baton mock-model`, or the real service.
    /// Implies --realtime.
    #[arg(long, value_name = "URL")]
    pub model_url: Option<String>,
    /// Model id sent in setup.
    #[arg(long, default_value = "models/gemini-3.8-live")]
    pub model: String,
    /// Environment variable holding the API key for --model-url (never pass the key itself).
    #[arg(long, value_name = "VAR", default_value = "GEMINI_API_KEY")]
    pub api_key_env: String,
    /// How the caller's audio travels: l16-16k (app/browser) or pcmu8k (phone, G.711 μ-law).
    #[arg(long, default_value = "l16-16k")]
    pub leg_codec: LegCodec,
    /// Keep the call(s) in this store: sqlite://FILE or postgres://… (default: none, except for a
    /// scenario of several calls, which gets a fresh sqlite://<out>/baton.db).
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// The caller's identity (agent contexts follow it across calls); default "demo-caller".
    #[arg(long, value_name = "ID")]
    pub caller: Option<String>,
}

impl Default for DemoArgs {
    /// The same defaults as the command line.
    fn default() -> Self {
        DemoArgs {
            scenario: None,
            list: false,
            strategy: None,
            profile: None,
            first_audio_ms: None,
            agents: None,
            realtime: false,
            out: PathBuf::from("out/demo"),
            json: false,
            model_url: None,
            model: "models/gemini-3.8-live".into(),
            api_key_env: "GEMINI_API_KEY".into(),
            leg_codec: LegCodec::L16k16,
            store: None,
            caller: None,
        }
    }
}

/// The demo could not run.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("scenario: {0}")]
    Scenario(String),
    #[error("agent set: {0}")]
    Agents(String),
    #[error("{0}")]
    Usage(String),
    #[error("the scenario {0} names no caller fixture (`caller = \"…wav\"`)")]
    NoCaller(PathBuf),
    #[error(transparent)]
    Fixture(#[from] crate::leg::fixture::FixtureError),
    #[error(transparent)]
    Endpoint(#[from] crate::model::gemini::endpoint::EndpointError),
    #[error(transparent)]
    Session(#[from] OpenError),
    #[error(transparent)]
    Call(#[from] call::CallError),
    #[error("mock model: {0}")]
    Mock(String),
    #[error("{var} is not set: the real service needs an API key in that environment variable")]
    MissingKey { var: String },
    #[error("cannot write {path}: {reason}")]
    Output { path: PathBuf, reason: String },
    #[error("cannot start the runtime: {0}")]
    Runtime(String),
    #[error("store: {0}")]
    Store(String),
    #[error("the model session could not be opened")]
    NoSession,
}

/// `summary.json`: names fixed across baton's reports.
#[derive(Clone, Debug, Serialize)]
pub struct DemoSummary {
    pub calls: u32,
    pub turns: usize,
    pub first_audio_ms: P95,
    pub uplink_added_ms: P99,
    pub downlink_added_ms: P99,
    pub underruns: u64,
    pub handoffs: Vec<crate::call::HandoffRecord>,
    pub handoff_gap_ms: Option<P95>,
    /// Model session switches (goAway, drops) and what they cost.
    pub reconnects: Vec<crate::call::ReconnectRecord>,
    pub reconnect_gap_ms: Option<P95>,
    pub audio_replayed_ms: f64,
    pub audio_lost_ms: f64,
    pub recording: String,
    pub mode: &'static str,
    pub leg_codec: &'static str,
    pub end_reason: String,
    /// Every call of a scenario of several calls (the fields above are the first one's).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub call_list: Vec<serde_json::Value>,
}

/// `{"p50","p95","max"}`; null where there were no samples.
#[derive(Clone, Debug, Default, Serialize)]
pub struct P95 {
    pub p50: Option<f64>,
    pub p95: Option<f64>,
    pub max: Option<f64>,
}

/// `{"p50","p99","max"}`; null where there were no samples.
#[derive(Clone, Debug, Default, Serialize)]
pub struct P99 {
    pub p50: Option<f64>,
    pub p99: Option<f64>,
    pub max: Option<f64>,
}

impl From<Summary> for P95 {
    fn from(s: Summary) -> Self {
        P95 {
            p50: s.p50.map(round2),
            p95: s.p95.map(round2),
            max: s.max.map(round2),
        }
    }
}

impl From<Summary> for P99 {
    fn from(s: Summary) -> Self {
        P99 {
            p50: s.p50.map(round2),
            p99: s.p99.map(round2),
            max: s.max.map(round2),
        }
    }
}

/// A bundled file: under the current directory when run from a checkout, else next to the
/// sources the binary was built from.
pub fn bundled(relative: &str) -> PathBuf {
    let local = Path::new(relative);
    if local.exists() {
        return local.to_path_buf();
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// Where the bundled demo scenario lives.
pub fn default_scenario() -> PathBuf {
    bundled("audio-fixtures/scenarios/demo.toml")
}

/// A scenario argument: a bundled name, or a path.
pub fn scenario_path(arg: &str) -> PathBuf {
    if arg.ends_with(".toml") || arg.contains('/') {
        PathBuf::from(arg)
    } else {
        bundled(&format!("audio-fixtures/scenarios/{arg}.toml"))
    }
}

/// The bundled scenario files, sorted by name (what `--list` shows).
pub fn bundled_scenarios() -> Result<Vec<PathBuf>, DemoError> {
    let dir = bundled("audio-fixtures/scenarios");
    let entries = std::fs::read_dir(&dir)
        .map_err(|e| DemoError::Scenario(format!("{}: {e}", dir.display())))?;
    let mut names: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    names.sort();
    Ok(names)
}

/// The bundled scenarios: `name  description`, one per line, sorted.
pub fn list_scenarios() -> Result<String, DemoError> {
    let mut out = String::new();
    for p in bundled_scenarios()? {
        let name = p
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let s = mock::Scenario::load(&p).map_err(|e| DemoError::Scenario(e.to_string()))?;
        let agents = s
            .agents
            .as_ref()
            .and_then(|a| a.file_stem())
            .map(|a| format!(" [agents: {}]", a.to_string_lossy()))
            .unwrap_or_default();
        out.push_str(&format!("{name}  {}{agents}\n", s.description));
    }
    Ok(out)
}

/// Parses a `--strategy` name.
pub fn parse_strategy(s: &str) -> Result<crate::agents::strategy::Strategy, DemoError> {
    use crate::agents::strategy::Strategy;
    Ok(match s {
        "auto" => Strategy::Auto,
        "context_update" => Strategy::ContextUpdate,
        "tool_response" => Strategy::ToolResponse,
        "inject_turn" => Strategy::InjectTurn,
        "recreate" => Strategy::Recreate,
        "recreate_cold" => Strategy::RecreateCold,
        other => {
            return Err(DemoError::Usage(format!(
                "unknown strategy {other:?}: use auto, context_update, tool_response, inject_turn, recreate or recreate_cold"
            )));
        }
    })
}

/// Everything a demo run produced.
pub struct DemoOutcome {
    pub summary: DemoSummary,
    /// The first call's report.
    pub report: CallReport,
    /// Every call, in order, with its contexts, sidecars and store id.
    pub calls: Vec<crate::server::attach::Ran>,
}

/// What one call's scenario set up, after the command line's overrides.
#[derive(Clone, Debug, Serialize)]
pub struct ScenarioMeta {
    /// The scenario's `name`.
    pub name: String,
    pub path: PathBuf,
    /// The embedded mock's profile (the scenario's unless overridden).
    pub profile: String,
    /// The embedded mock's configured first-audio latency (ms).
    pub model_first_audio_ms: f64,
    /// The VAD silence window that ends a caller turn (ms).
    pub silence_ms: f64,
    /// The agents the scenario's personas speak as: `(id, name)`.
    pub personas: Vec<(String, String)>,
    /// The call ran an agent set.
    pub agent_set: bool,
    /// Length of the caller fixture (s).
    pub caller_s: f64,
    /// The model was the embedded mock (so its configured latency is what the call met).
    pub embedded_mock: bool,
}

/// One call without the demo's files: its report, what the caller heard, and how long the parts
/// took on the wall clock.
pub struct CallOutcome {
    pub meta: ScenarioMeta,
    pub report: CallReport,
    pub recording: crate::leg::fixture::Recording,
    /// Loading the scenario, its clips, the caller fixture and the agent set (by [`run_call`]),
    /// then copying them and setting up the model backend.
    pub prepare_wall: std::time::Duration,
    /// Opening the session and running the call to its end.
    pub call_wall: std::time::Duration,
}

/// The runtime a call runs on: a paused-clock current-thread runtime when accelerated.
pub fn runtime(realtime: bool) -> Result<tokio::runtime::Runtime, DemoError> {
    if realtime {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
    }
    .map_err(|e| DemoError::Runtime(e.to_string()))
}

/// Runs the demo on its own runtime: a paused-clock runtime when accelerated.
pub fn run(args: &DemoArgs) -> Result<DemoOutcome, DemoError> {
    let realtime = args.realtime || args.model_url.is_some();
    runtime(realtime)?.block_on(run_async(args, realtime))
}

async fn run_async(args: &DemoArgs, realtime: bool) -> Result<DemoOutcome, DemoError> {
    let first = args
        .scenario
        .as_deref()
        .map_or_else(default_scenario, scenario_path);
    let paths = crate::demo_store::scenario_calls(&first);
    std::fs::create_dir_all(&args.out).map_err(|e| DemoError::Output {
        path: args.out.clone(),
        reason: e.to_string(),
    })?;
    let store = crate::demo_store::open(args, paths.len() > 1).await?;
    let caller = args.caller.clone().or(Some("demo-caller".to_owned()));
    let mut calls: Vec<crate::server::attach::Ran> = Vec::new();
    let mut summary = None;
    for (i, p) in paths.iter().enumerate() {
        let wav_path = match i {
            0 => args.out.join("call.wav"),
            n => args.out.join(format!("call{}.wav", n + 1)),
        };
        let prepared = prepare_at(args, p.clone())?;
        let (outcome, ran) =
            run_prepared_with(&prepared, args, realtime, &store, caller.clone()).await?;
        outcome
            .recording
            .write(&wav_path)
            .map_err(|e| DemoError::Output {
                path: wav_path.clone(),
                reason: e.to_string(),
            })?;
        summary.get_or_insert_with(|| summarize_call(&outcome.report, &wav_path, args, realtime));
        calls.push(ran);
    }
    crate::demo_store::flush(&store).await;
    let mut summary = summary.ok_or(DemoError::NoSession)?;
    if calls.len() > 1 {
        summary.calls = calls.len() as u32;
        summary.call_list = calls.iter().map(crate::demo_store::call_json).collect();
    }
    let json_path = args.out.join("summary.json");
    let json = serde_json::to_string_pretty(&summary).unwrap_or_default();
    std::fs::write(&json_path, format!("{json}\n")).map_err(|e| DemoError::Output {
        path: json_path.clone(),
        reason: e.to_string(),
    })?;
    let report = calls
        .first()
        .map(|c| c.report.clone())
        .ok_or(DemoError::NoSession)?;
    Ok(DemoOutcome {
        summary,
        report,
        calls,
    })
}

/// The summary of one call (the demo's `summary.json`, before a scenario's further calls).
fn summarize_call(
    report: &CallReport,
    wav_path: &Path,
    args: &DemoArgs,
    realtime: bool,
) -> DemoSummary {
    DemoSummary {
        calls: 1,
        turns: report.turns.len(),
        first_audio_ms: summarize(&report.first_audio_ms).into(),
        uplink_added_ms: summarize(&report.uplink_added_ms).into(),
        downlink_added_ms: summarize(&report.downlink_added_ms).into(),
        underruns: report.underruns,
        handoffs: report.handoffs.clone(),
        handoff_gap_ms: (!report.handoffs.is_empty()).then(|| {
            let gaps: Vec<f64> = report.handoffs.iter().filter_map(|h| h.gap_ms).collect();
            summarize(&gaps).into()
        }),
        reconnects: report.reconnects.clone(),
        reconnect_gap_ms: (!report.reconnects.is_empty())
            .then(|| summarize(&report.reconnect_gap_ms).into()),
        audio_replayed_ms: report.audio_replayed_ms,
        audio_lost_ms: report.audio_lost_ms,
        recording: wav_path.display().to_string(),
        mode: if realtime { "realtime" } else { "accelerated" },
        leg_codec: args.leg_codec.name(),
        end_reason: report.end_reason.clone(),
        call_list: Vec::new(),
    }
}

/// Runs one call as `baton demo` does (`realtime` as [`run`] decides it) without writing files.
pub async fn run_call(args: &DemoArgs, realtime: bool) -> Result<CallOutcome, DemoError> {
    let started_at = std::time::Instant::now();
    let prepared = prepare(args)?;
    let loaded = started_at.elapsed();
    let mut outcome = run_prepared(&prepared, args, realtime).await?;
    outcome.prepare_wall += loaded;
    Ok(outcome)
}

/// A scenario's files loaded once (clips, caller fixture, agent set), for any number of calls.
#[derive(Clone, Debug)]
pub struct Prepared {
    pub path: PathBuf,
    pub scenario: mock::Scenario,
    pub fixture: FixtureCaller,
    pub registry: Option<crate::agents::Registry>,
}

/// Loads what `args` names: the scenario (`args.scenario`), its caller fixture through
/// `args.leg_codec`, and the agent set (`args.agents` or the scenario's).
pub fn prepare(args: &DemoArgs) -> Result<Prepared, DemoError> {
    let path = args
        .scenario
        .as_deref()
        .map_or_else(default_scenario, scenario_path);
    prepare_at(args, path)
}

/// [`prepare`] for the scenario file at `path`.
fn prepare_at(args: &DemoArgs, path: PathBuf) -> Result<Prepared, DemoError> {
    let scenario = mock::Scenario::load(&path).map_err(|e| DemoError::Scenario(e.to_string()))?;
    let caller_wav = scenario
        .caller
        .clone()
        .ok_or_else(|| DemoError::NoCaller(path.clone()))?;
    let fixture = FixtureCaller::from_wav(&caller_wav, args.leg_codec)?;
    let registry = match args.agents.clone().or_else(|| scenario.agents.clone()) {
        Some(p) => Some(crate::agents::load(&p).map_err(|e| DemoError::Agents(e.to_string()))?),
        None => None,
    };
    Ok(Prepared {
        path,
        scenario,
        fixture,
        registry,
    })
}

/// Runs one call of a prepared scenario with `args`'s overrides (profile, first-audio latency,
/// strategy) and model; `args.scenario`, `args.agents` and `args.leg_codec` were used by
/// [`prepare`].
pub async fn run_prepared(
    prepared: &Prepared,
    args: &DemoArgs,
    realtime: bool,
) -> Result<CallOutcome, DemoError> {
    run_prepared_with(prepared, args, realtime, &None, None)
        .await
        .map(|(outcome, _)| outcome)
}

/// [`run_prepared`] with a store and the caller's identity (their agent contexts).
async fn run_prepared_with(
    prepared: &Prepared,
    args: &DemoArgs,
    realtime: bool,
    store: &Option<crate::server::attach::StoreHandle>,
    caller: Option<String>,
) -> Result<(CallOutcome, crate::server::attach::Ran), DemoError> {
    let started_at = std::time::Instant::now();
    let scenario_path = prepared.path.clone();
    let mut scenario = prepared.scenario.clone();
    if let Some(ms) = args.first_audio_ms {
        scenario.timing.first_audio = std::time::Duration::from_millis(ms);
    }
    let openai = args.profile.as_deref() == Some(OPENAI_PROFILE);
    if let Some(p) = args.profile.as_deref().filter(|_| !openai) {
        scenario.profile = p
            .parse()
            .map_err(|e: crate::mock::profile::UnknownProfile| {
                DemoError::Usage(format!("{e}, or {OPENAI_PROFILE}"))
            })?;
    }
    let fixture = prepared.fixture.clone();
    let silence = scenario.timing.silence;

    let mut session_cfg = SessionConfig {
        model: args.model.clone(),
        system_instruction: Some("You are a friendly financial advisor on a helpline.".into()),
        ..Default::default()
    };
    let registry = match prepared.registry.clone() {
        Some(mut reg) => {
            if let Some(s) = &args.strategy {
                let strategy = parse_strategy(s)?;
                for a in &mut reg.agents {
                    a.policy.strategy = strategy;
                }
            }
            Some(Arc::new(reg))
        }
        None if args.strategy.is_some() => {
            return Err(DemoError::Usage(format!(
                "--strategy needs a scenario with an agent set; {} has none (try --list)",
                scenario_path.display()
            )));
        }
        None => None,
    };
    let meta = ScenarioMeta {
        name: scenario.name.clone(),
        path: scenario_path.clone(),
        profile: if openai {
            OPENAI_PROFILE.to_owned()
        } else {
            scenario.profile.name().to_owned()
        },
        model_first_audio_ms: scenario.timing.first_audio.as_secs_f64() * 1000.0,
        silence_ms: silence.as_secs_f64() * 1000.0,
        personas: scenario
            .personas
            .iter()
            .map(|p| (p.id.clone(), p.marker.clone()))
            .collect(),
        agent_set: registry.is_some(),
        caller_s: fixture.duration().as_secs_f64(),
        embedded_mock: args.model_url.is_none(),
    };
    let mut mock_opts = mock::MockOptions::new(Arc::new(scenario));
    if openai {
        mock_opts.openai = Some(mock::openai::OpenAiOptions::default());
    }
    let opts = Arc::new(mock_opts);
    let mut _server = None;
    let backend = match (&args.model_url, realtime) {
        (Some(url), _) if openai => openai_backend(url, args)?,
        (Some(url), _) => {
            let key = std::env::var(&args.api_key_env)
                .ok()
                .filter(|k| !k.is_empty())
                .map(Secret::new);
            if key.is_none() && url.starts_with(DEVELOPER_API_BASE) {
                return Err(DemoError::MissingKey {
                    var: args.api_key_env.clone(),
                });
            }
            ModelBackend::Remote(Endpoint::new(url, Backend::DeveloperApi, "v1beta", key)?)
        }
        (None, true) => {
            let server = mock::bind("127.0.0.1:0", opts.clone(), None)
                .await
                .map_err(|e| DemoError::Mock(e.to_string()))?
                .spawn();
            let url = server.base_url().to_owned();
            _server = Some(server);
            if openai {
                let endpoint = crate::model::openai::endpoint::Endpoint::new(
                    &format!("{url}/v1"),
                    crate::call::backend::MOCK_OPENAI_MODEL,
                    crate::model::openai::wire::Api::Ga,
                    None,
                )
                .map_err(OpenError::from)?;
                ModelBackend::OpenAi(crate::call::backend::OpenAiRemote {
                    endpoint,
                    capabilities: opts.capabilities(),
                })
            } else {
                ModelBackend::Remote(Endpoint::new(&url, Backend::DeveloperApi, "v1beta", None)?)
            }
        }
        (None, false) => ModelBackend::InProcessMock(opts.clone()),
    };

    let agents = registry.map(|reg| {
        let caps = match &backend {
            ModelBackend::Remote(_) if args.model_url.is_none() => opts.capabilities(),
            other => other.capabilities(),
        };
        call::Agents::start(reg, caps, backend.clone(), &mut session_cfg)
    });
    let prepared_at = std::time::Instant::now();
    let open = async {
        let session = backend.open(&session_cfg).await?;
        Ok::<_, OpenError>((session, agents))
    };
    // The fixture starts when the call is ready (after the caller's contexts have loaded).
    let started = std::sync::Mutex::new(None);
    let leg = || {
        let (leg, recording) = fixture.spawn();
        if let Ok(mut g) = started.lock() {
            *g = Some(recording);
        }
        leg
    };
    let attach = crate::server::attach::Attach {
        store: store.clone(),
        live: None,
        opts: CallOptions {
            caller_silence: silence,
            model: Some(call::ModelSource {
                backend: backend.clone(),
                config: session_cfg.clone(),
            }),
            ..Default::default()
        },
    };
    let info = crate::server::attach::CallInfo {
        leg: "fixture",
        caller,
    };
    let ran = crate::server::attach::run_attached(open, leg, info, attach)
        .await
        .map_err(|e| match e {
            crate::server::attach::RunError::NoSession(e) => DemoError::Session(e),
            crate::server::attach::RunError::Failed(e) => DemoError::Call(e),
        })?;
    let recording = started.lock().ok().and_then(|mut g| g.take());
    let recording = match recording {
        Some(r) => r.await.unwrap_or_default(),
        None => Default::default(),
    };
    let outcome = CallOutcome {
        meta,
        report: ran.report.clone(),
        recording,
        prepare_wall: prepared_at.saturating_duration_since(started_at),
        call_wall: prepared_at.elapsed(),
    };
    Ok((outcome, ran))
}

/// The `--profile` that selects the OpenAI Realtime protocol.
pub const OPENAI_PROFILE: &str = "openai";

/// An OpenAI Realtime endpoint at `url` (a base such as `ws://127.0.0.1:9300/v1` or
/// `wss://api.openai.com/v1`); the model is `--model` unless that is a Gemini model name, the key
/// comes from `--api-key-env` (OPENAI_API_KEY while that names the Gemini default).
fn openai_backend(url: &str, args: &DemoArgs) -> Result<ModelBackend, DemoError> {
    use crate::model::openai::endpoint::{DEFAULT_KEY_ENV, Endpoint as OpenAiEndpoint};
    let var = if args.api_key_env == "GEMINI_API_KEY" {
        DEFAULT_KEY_ENV
    } else {
        args.api_key_env.as_str()
    };
    let key = std::env::var(var)
        .ok()
        .filter(|k| !k.is_empty())
        .map(Secret::new);
    if key.is_none() && url.starts_with(crate::model::openai::endpoint::OPENAI_BASE) {
        return Err(DemoError::MissingKey {
            var: var.to_owned(),
        });
    }
    let model = if args.model.starts_with("models/") || args.model.contains("gemini") {
        crate::call::backend::MOCK_OPENAI_MODEL
    } else {
        args.model.as_str()
    };
    let endpoint = OpenAiEndpoint::new(url, model, crate::model::openai::wire::Api::Ga, key)
        .map_err(OpenError::from)?;
    Ok(ModelBackend::OpenAi(crate::call::backend::OpenAiRemote {
        endpoint,
        capabilities: crate::model::openai::CAPABILITIES,
    }))
}

/// The human-readable timeline and latency table.
pub fn render(outcome: &DemoOutcome) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let r = &outcome.report;
    let _ = writeln!(
        s,
        "turn  caller speech (s)   agent audio (s)     first_audio  what was said"
    );
    for t in &r.turns {
        let agent = match (t.agent_start_ms, t.agent_end_ms) {
            (Some(a), Some(b)) => format!("{:>6.2} – {:<6.2}", a / 1000.0, b / 1000.0),
            _ => format!("{:^15}", "(no reply)"),
        };
        let v2v = t
            .first_audio_ms
            .map_or("—".to_owned(), |v| format!("{v:.0} ms"));
        let _ = writeln!(
            s,
            "{:>4}  {:>6.2} – {:<6.2}  {agent}  {v2v:>11}  caller: {}",
            t.index + 1,
            t.caller_start_ms / 1000.0,
            t.caller_end_ms / 1000.0,
            quote(&t.caller_text),
        );
        let who = if t.agent.is_empty() {
            "agent"
        } else {
            t.agent.as_str()
        };
        let _ = writeln!(
            s,
            "{:>55}{who}: {}{}",
            "",
            quote(&t.agent_text),
            if t.interrupted { " [interrupted]" } else { "" }
        );
    }
    if !r.handoffs.is_empty() {
        let _ = writeln!(
            s,
            "\nhandoff                                   strategy        trigger          gap_ms  announcement queued"
        );
        for h in &r.handoffs {
            let gap = h
                .gap_ms
                .map_or("not heard".to_owned(), |g| format!("{g:.0}"));
            let queued = h
                .announcement_queued_ms
                .map_or("—".to_owned(), |q| format!("{q:.0} ms"));
            let _ = writeln!(
                s,
                "{:<41} {:<15} {:<16} {gap:>6}  {queued}",
                format!("{} → {}", h.from, h.to),
                h.strategy,
                h.trigger
            );
        }
    }
    if !r.reconnects.is_empty() {
        let _ = writeln!(
            s,
            "\nreconnect at (s)  cause        outcome    tries  gap_ms  queued_ms  replayed_ms  lost_ms"
        );
        for c in &r.reconnects {
            let gap = c.gap_ms.map_or("—".to_owned(), |g| format!("{g:.0}"));
            let _ = writeln!(
                s,
                "{:>16.2}  {:<12} {:<10} {:>5}  {gap:>6}  {:>9.0}  {:>11.0}  {:>7.0}",
                c.at_ms / 1000.0,
                c.cause,
                c.outcome,
                c.attempts,
                c.model_audio_queued_ms,
                c.audio_replayed_ms,
                c.audio_lost_ms
            );
        }
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "figure               p50       p95/p99   max       samples"
    );
    let row = |name: &str, v: &[f64], tail: f64| {
        let sm = summarize(v);
        let f = |x: Option<f64>| x.map_or("—".to_owned(), |x| format!("{x:.2}"));
        let tailv = if tail >= 99.0 { sm.p99 } else { sm.p95 };
        format!(
            "{name:<20} {:<9} {:<9} {:<9} {}\n",
            f(sm.p50),
            f(tailv),
            f(sm.max),
            v.len()
        )
    };
    s.push_str(&row("first_audio_ms", &r.first_audio_ms, 95.0));
    s.push_str(&row("uplink_added_ms", &r.uplink_added_ms, 99.0));
    s.push_str(&row("downlink_added_ms", &r.downlink_added_ms, 99.0));
    if !r.reconnects.is_empty() {
        s.push_str(&row("reconnect_gap_ms", &r.reconnect_gap_ms, 95.0));
        let _ = writeln!(
            s,
            "audio_replayed_ms    {:.0} (total)\naudio_lost_ms        {:.0} (total)",
            r.audio_replayed_ms, r.audio_lost_ms
        );
    }
    let _ = writeln!(s, "underruns            {}", r.underruns);
    let _ = writeln!(
        s,
        "\nmode {}, leg {}; resampler delay up {:.2} ms, down {:.2} ms; {} frames played ({} voiced), {} late ticks",
        outcome.summary.mode,
        outcome.summary.leg_codec,
        r.uplink_resampler_delay_ms,
        r.downlink_resampler_delay_ms,
        r.frames_played,
        r.voice_frames,
        r.late_ticks
    );
    if !r.protocol_errors.is_empty() {
        let _ = writeln!(
            s,
            "{} model frames could not be used: {}",
            r.protocol_errors.len(),
            r.protocol_errors[0]
        );
    }
    let _ = writeln!(s, "call ended: {}", r.end_reason);
    s.push_str(&crate::demo_store::render_calls(outcome));
    let _ = writeln!(
        s,
        "recording: {} (left = caller, right = agent as heard)",
        outcome.summary.recording
    );
    s
}

fn quote(t: &str) -> String {
    let t = t.trim();
    if t.is_empty() {
        "—".into()
    } else {
        format!("\"{t}\"")
    }
}
