//! `baton demo`: a fixture call end to end — a bundled scenario's caller (seed 000 unless told)
//! through the Gemini Live wire protocol to the embedded mock model (or any Live endpoint) and
//! back through playout. Prints a per-turn timeline with each handoff where it was heard and a
//! latency table; writes the caller's stereo recording, a timeline picture and a `summary.json`
//! whose names are fixed for every later report. A scenario of several calls (seed 001) prints
//! each call under its own heading, writes `call<n>.wav` for the n-th, and has `summary.json`'s
//! top-level figures cover every call, each call's own in its `call_list`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::backend::ModelBackend;
use crate::call::{self, CallOptions};
use crate::leg::fixture::FixtureCaller;
use crate::mock;
use crate::model::catalog::{self, ModelInfo};
use crate::model::gemini::endpoint::{Backend, DEVELOPER_API_BASE, Endpoint, Secret};
use crate::model::gemini::session::SessionConfig;
use crate::model::handle::{OpenError, Protocol};

mod args;
pub mod handoffs;
mod mcp;
mod meta;
mod outcome;
mod phone;
mod picture;
mod render;
/// The call files of a scenario: itself, then `<scenario>/call*.toml` in name order.
mod scenarios;
mod store;
mod summary;

pub use args::{DemoArgs, DemoError, parse_strategy};
pub use meta::ScenarioMeta;
pub use outcome::{CallOutcome, DemoOutcome};
pub use phone::PersonRecording;
pub use render::render;
pub use scenarios::{
    bundled, bundled_scenarios, default_scenario, list_scenarios, resolve_scenario, scenario_path,
};
pub use store::scenario_calls;
use summary::summarize_calls;
pub use summary::{CallSummary, DemoSummary, Figures, InCall, P95, P99, UPLINK_NOTE};

/// The runtime a call runs on: a paused-clock current-thread runtime when accelerated.
pub fn runtime(realtime: bool) -> Result<tokio::runtime::Runtime, DemoError> {
    runtime_with(realtime, true, None)
}

/// [`runtime`], with `on_thread_start` run on each thread the real-time runtime starts (an
/// accelerated call runs on the calling thread). An accelerated runtime has the I/O driver
/// only with `io`: a call whose model is the mock in process and whose agent set reaches
/// nothing over the network ([`Registry::reaches_network`](crate::agents::Registry)) needs
/// none, and on a paused clock every advance of time is a park, which the I/O driver makes an
/// `epoll_wait`, a look for child processes to reap and, whenever a timer becomes the earliest,
/// an eventfd write (about 8 % of such a call's CPU).
pub fn runtime_with(
    realtime: bool,
    io: bool,
    on_thread_start: Option<Arc<dyn Fn() + Send + Sync>>,
) -> Result<tokio::runtime::Runtime, DemoError> {
    if realtime {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        if let Some(f) = on_thread_start {
            b.on_thread_start(move || f());
        }
        b.enable_all().build()
    } else {
        let mut b = tokio::runtime::Builder::new_current_thread();
        if io {
            b.enable_io();
        }
        b.enable_time().start_paused(true).build()
    }
    .map_err(|e| DemoError::Runtime(e.to_string()))
}

/// Runs the demo on its own runtime: a paused-clock runtime when accelerated.
pub fn run(args: &DemoArgs) -> Result<DemoOutcome, DemoError> {
    // A person's phone is a real SIP peer on loopback sockets: such a call runs in real time.
    let realtime = args.realtime || args.model_url.is_some() || calls_a_person(args);
    runtime(realtime)?.block_on(run_async(args, realtime))
}

async fn run_async(args: &DemoArgs, realtime: bool) -> Result<DemoOutcome, DemoError> {
    let first = resolve_scenario(args.scenario.as_deref())?;
    let paths = store::scenario_calls(&first);
    out_dir(&args.out)?;
    let store = store::open(args, paths.len() > 1).await?;
    let caller = args.caller.clone().or(Some("demo-caller".to_owned()));
    let mut calls: Vec<crate::server::attach::Ran> = Vec::new();
    let mut metas: Vec<ScenarioMeta> = Vec::new();
    let mut written: Vec<summary::Written> = Vec::new();
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
        let person = match &outcome.person {
            Some(p) => Some(write_person(&args.out, i, p)?),
            None => None,
        };
        written.push(summary::Written {
            recording: wav_path,
            person,
        });
        metas.push(outcome.meta);
        calls.push(ran);
    }
    store::finish(&store).await;
    if calls.is_empty() {
        return Err(DemoError::NoSession);
    }
    let mut summary = summarize_calls(&calls, &metas, &written, args, realtime);
    let timeline = picture::draw(&args.out, &calls, &metas, realtime)?;
    summary.timeline = timeline.as_ref().map(|p| p.display().to_string());
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
        metas,
        timeline,
    })
}

/// Makes `--out` (and its parents) unless it is there; refuses a path that is a file, or under
/// one, naming it.
fn out_dir(out: &Path) -> Result<(), DemoError> {
    make_dir(out).map_err(|e| match e {
        MakeDirError::NotADir(at) => DemoError::Usage(format!(
            "--out {}: not a directory{at}; --out must be a directory (the demo writes call.wav, \
             summary.json and the timeline picture into it)",
            out.display()
        )),
        MakeDirError::Io(reason) => DemoError::Output {
            path: out.to_path_buf(),
            reason,
        },
    })
}

/// Why an output directory could not be made.
#[derive(Debug)]
pub enum MakeDirError {
    /// The path is a file (empty), or lies under one (` (<file> is a file)`).
    NotADir(String),
    /// Anything else, in words.
    Io(String),
}

/// Makes `dir` and its parents unless it is there (for a command's output directory).
pub fn make_dir(dir: &Path) -> Result<(), MakeDirError> {
    let not_a_dir = |file: &Path| {
        MakeDirError::NotADir(if file == dir {
            String::new()
        } else {
            format!(" ({} is a file)", file.display())
        })
    };
    if dir.exists() && !dir.is_dir() {
        return Err(not_a_dir(dir));
    }
    std::fs::create_dir_all(dir).map_err(|e| match dir.ancestors().find(|a| a.exists()) {
        Some(a) if !a.is_dir() => not_a_dir(a),
        _ => MakeDirError::Io(e.to_string()),
    })
}

/// Writes what the person heard (right) and said (left) as `person.wav` (`person<n>.wav` for
/// the n-th call of a scenario).
fn write_person(out: &Path, i: usize, p: &phone::PersonRecording) -> Result<PathBuf, DemoError> {
    let path = match i {
        0 => out.join("person.wav"),
        n => out.join(format!("person{}.wav", n + 1)),
    };
    crate::audio::wav::write_stereo(&path, p.rate, &p.said, &p.heard).map_err(|e| {
        DemoError::Output {
            path: path.clone(),
            reason: e.to_string(),
        }
    })?;
    Ok(path)
}

/// The person's lines in the demo: what Ravi says after taking the call, then after the caller's
/// next turn.
const PERSON_LINES: [&str; 2] = [
    "audio-fixtures/clips/warm/ravi_hello.wav",
    "audio-fixtures/clips/warm/ravi_bye.wav",
];

/// Whether the call `args` names has a person reached by a warm transfer (whose phone the demo
/// plays on loopback).
fn calls_a_person(args: &DemoArgs) -> bool {
    prepare(args)
        .ok()
        .and_then(|p| p.registry)
        .is_some_and(|r| warm_people(&r))
}

fn warm_people(reg: &crate::agents::Registry) -> bool {
    reg.people
        .iter()
        .any(|p| p.human.handover == crate::transfer::Handover::Warm)
}

/// Starts the person's phone and points every warm person of `reg` at it.
async fn start_phone(reg: &mut crate::agents::Registry) -> Result<phone::Phone, DemoError> {
    let mut lines = Vec::new();
    let mut rate = 16_000;
    for l in PERSON_LINES {
        let path = bundled(l);
        let pcm = crate::audio::wav::read(&path).map_err(|e| DemoError::Output {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        rate = pcm.rate;
        lines.push(pcm.samples);
    }
    let phone = phone::Phone::start(phone::Lines { rate, lines }).await?;
    for p in &mut reg.people {
        if p.human.handover != crate::transfer::Handover::Warm {
            continue;
        }
        let user = match &p.human.destination {
            crate::transfer::Destination::Sip(uri) => uri
                .split_once(':')
                .and_then(|(_, rest)| rest.split_once('@'))
                .map_or_else(|| p.id.clone(), |(user, _)| user.to_owned()),
            crate::transfer::Destination::Number(_) => p.id.clone(),
        };
        p.human.destination =
            crate::transfer::Destination::Sip(format!("sip:{user}@127.0.0.1:{}", phone.port));
        p.human.trunk = None;
    }
    Ok(phone)
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
    prepare_at(args, resolve_scenario(args.scenario.as_deref())?)
}

/// [`prepare`] for the scenario file at `path`.
fn prepare_at(args: &DemoArgs, path: PathBuf) -> Result<Prepared, DemoError> {
    if is_wav(&path) {
        return Err(DemoError::Usage(format!(
            "{}: a WAV recording, not a scenario file; bench a recording with `baton bench \
             fixtures --fixture {}` (the scenario format is in docs/scenarios.md)",
            path.display(),
            path.display()
        )));
    }
    let scenario = mock::Scenario::load(&path).map_err(|e| DemoError::Scenario(e.to_string()))?;
    let caller_wav = scenario
        .caller
        .clone()
        .ok_or_else(|| DemoError::NoCaller(path.clone()))?;
    let fixture = FixtureCaller::from_wav(&caller_wav, args.leg_codec)?;
    let registry = registry_for(args, &scenario)?;
    Ok(Prepared {
        path,
        scenario,
        fixture,
        registry,
    })
}

/// A caller recording (any rate, channels, length) played against the mock's default script:
/// every caller turn answered with the default reply, or by `args.agents`'s agents. The scenario
/// is named after the file.
pub fn prepare_fixture(args: &DemoArgs, wav: &Path) -> Result<Prepared, DemoError> {
    let fixture = FixtureCaller::from_wav(wav, args.leg_codec)?;
    let mut scenario = mock::Scenario::builtin();
    scenario.name = wav.file_name().map_or_else(
        || wav.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    scenario.description = format!(
        "{}, every caller turn answered with the mock's default reply",
        wav.display()
    );
    scenario.caller = Some(wav.to_path_buf());
    let registry = registry_for(args, &scenario)?;
    Ok(Prepared {
        path: wav.to_path_buf(),
        scenario,
        fixture,
        registry,
    })
}

/// The agent set a call of `scenario` runs: `args.agents`, else the scenario's, else none.
fn registry_for(
    args: &DemoArgs,
    scenario: &mock::Scenario,
) -> Result<Option<crate::agents::Registry>, DemoError> {
    match args.agents.clone().or_else(|| scenario.agents.clone()) {
        Some(p) => Ok(Some(
            crate::agents::load(&p).map_err(|e| DemoError::Agents(e.to_string()))?,
        )),
        None => Ok(None),
    }
}

/// A file that is a WAV recording: named `.wav`, or starting with a RIFF header.
fn is_wav(path: &Path) -> bool {
    use std::io::Read;
    if path
        .extension()
        .is_some_and(|x| x.eq_ignore_ascii_case("wav"))
    {
        return true;
    }
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok_and(|()| &magic == b"RIFF")
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
        // Past a minute no reply would come inside any scenario's turn.
        if ms > 60_000 {
            return Err(DemoError::Usage(format!(
                "--first-audio-ms {ms}: give the model's first-audio latency in ms, 0 to 60000"
            )));
        }
        scenario.timing.first_audio = std::time::Duration::from_millis(ms);
    }
    if let Some(x) = args.model_speed {
        if !(x.is_finite() && (0.25..=100.0).contains(&x)) {
            return Err(DemoError::Usage(format!(
                "--model-speed {x}: give a generation speed between 0.25 and 100 (× real time)"
            )));
        }
        scenario.timing.speed = x;
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
        system_instruction: Some("You are a friendly financial advisor on a helpline.".into()),
        ..Default::default()
    };
    let mut bundled_mcp = None;
    let mut phone = None;
    let registry = match prepared.registry.clone() {
        Some(mut reg) => {
            if let Some(s) = &args.strategy {
                let strategy = parse_strategy(s)?;
                for a in &mut reg.agents {
                    a.policy.strategy = strategy;
                }
            }
            bundled_mcp = mcp::start(&mut reg, realtime).await?;
            if warm_people(&reg) {
                if !realtime {
                    return Err(DemoError::Usage(format!(
                        "{}: a warm transfer dials the person's phone over SIP, which runs in \
                         real time; add --realtime",
                        scenario_path.display()
                    )));
                }
                phone = Some(start_phone(&mut reg).await?);
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
        description: scenario.description.clone(),
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
        scripted_faults: {
            let f = &scenario.faults;
            f.go_away_after.is_some()
                || f.late_pong.is_some()
                || f.garbage_every.is_some()
                || f.refuse_resume
                || !f.drops.is_empty()
        },
        agents: registry
            .iter()
            .flat_map(|reg| &reg.agents)
            .map(|a| handoffs::AgentMeta {
                id: a.id.clone(),
                name: a.name.clone(),
                strategy: a.policy.strategy.as_str().to_owned(),
            })
            .collect(),
    };
    let mut mock_opts = mock::MockOptions::new(Arc::new(scenario));
    if openai {
        mock_opts.openai = Some(mock::openai::OpenAiOptions::default());
    }
    let opts = Arc::new(mock_opts);
    let mut _server = None;
    // The model the call addresses: --model, else the one the profile imitates (the embedded
    // mock's, or a separate mock's of the same profile).
    let protocol = if openai {
        Protocol::OpenAi
    } else {
        Protocol::Gemini
    };
    let model = catalog::lookup(
        protocol,
        args.model.as_deref().unwrap_or_else(|| opts.model_id()),
    );
    let backend = match (&args.model_url, realtime) {
        (Some(url), _) if openai => openai_backend(url, args, model)?,
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
            let endpoint = Endpoint::new(url, Backend::DeveloperApi, "v1beta", key)?;
            ModelBackend::Gemini { endpoint, model }
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
                    &model.id,
                    crate::model::openai::wire::Api::Ga,
                    None,
                )
                .map_err(OpenError::from)?;
                ModelBackend::OpenAi { endpoint, model }
            } else {
                let endpoint = Endpoint::new(&url, Backend::DeveloperApi, "v1beta", None)?;
                ModelBackend::Gemini { endpoint, model }
            }
        }
        (None, false) => ModelBackend::in_process_as(opts.clone(), model),
    };
    session_cfg.model = backend.model().id.clone();
    if let Some(s) = &args.strategy {
        let strategy = parse_strategy(s)?;
        if let Some(missing) =
            crate::agents::strategy::unplayable(strategy, &backend.capabilities())
        {
            return Err(DemoError::Usage(format!(
                "strategy {} cannot run on {} ({}): the model has {missing}",
                strategy.as_str(),
                meta.profile,
                backend.model().id
            )));
        }
    }

    // A phone caller (`--leg-codec pcmu8k`) is heard and answered in μ-law where the model
    // takes it (OpenAI Realtime), as a served bridge call is.
    session_cfg.phone_law = fixture.law();
    let agents = registry.map(|reg| {
        call::Agents::start(
            reg,
            backend.capabilities(),
            backend.clone(),
            &mut session_cfg,
        )
    });
    let prepared_at = std::time::Instant::now();
    let open = async {
        let session = backend.open(&session_cfg).await?;
        Ok::<_, OpenError>((session, agents))
    };
    // The fixture starts when the call is ready (after the caller's contexts have loaded).
    let started = std::sync::Mutex::new(None);
    let leg = || {
        let (leg, recording) = fixture.start();
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
            dialer: phone.as_ref().map(|p: &phone::Phone| p.dialer.clone()),
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
    if let Some(b) = bundled_mcp {
        b.stop().await;
    }
    let person = match phone {
        Some(p) => p.finish().await,
        None => None,
    };
    let recording = started.lock().ok().and_then(|mut g| g.take());
    let recording = match recording {
        Some(r) => r.await.unwrap_or_default(),
        None => Default::default(),
    };
    let outcome = CallOutcome {
        meta,
        report: ran.report.clone(),
        recording,
        person,
        prepare_wall: prepared_at.saturating_duration_since(started_at),
        call_wall: prepared_at.elapsed(),
    };
    Ok((outcome, ran))
}

/// The `--profile` that selects the OpenAI Realtime protocol.
pub const OPENAI_PROFILE: &str = "openai";

/// An OpenAI Realtime endpoint at `url` (a base such as `ws://127.0.0.1:9300/v1` or
/// `wss://api.openai.com/v1`) for `model` (`--model`, default gpt-realtime); the key
/// comes from `--api-key-env` (OPENAI_API_KEY while that names the Gemini default).
fn openai_backend(url: &str, args: &DemoArgs, model: ModelInfo) -> Result<ModelBackend, DemoError> {
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
    let endpoint = OpenAiEndpoint::new(url, &model.id, crate::model::openai::wire::Api::Ga, key)
        .map_err(OpenError::from)?;
    Ok(ModelBackend::OpenAi { endpoint, model })
}
