//! What a demo run is asked (`baton demo`'s options and their defaults) and how it can fail.

use std::path::PathBuf;

use crate::call::CallError;
use crate::leg::fixture::LegCodec;
use crate::model::handle::OpenError;

/// Options of one demo run.
#[derive(Clone, Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    baton demo                                  # seed 000: a handoff there and back, accelerated\n  \
    baton demo --scenario demo                  # the single-agent call\n  \
    baton demo --realtime --leg-codec pcmu8k    # real pace over loopback sockets, phone codec\n  \
    baton demo --json > summary.json            # the summary on stdout\n  \
    baton demo --model-url ws://127.0.0.1:9300  # against a separate `baton mock-model`\n  \
    GEMINI_API_KEY=... baton demo --model-url wss://generativelanguage.googleapis.com")]
pub struct DemoArgs {
    /// Scenario: a bundled name (see --list) or a file (default: seed000). It names the caller
    /// fixture, the mock model's script and, for multi-agent calls, the agent set.
    #[arg(long, value_name = "NAME|FILE")]
    pub scenario: Option<String>,
    /// List the bundled scenarios, one per line, name first.
    #[arg(long)]
    pub list: bool,
    /// Carry every handoff with this strategy: auto, context_update, tool_response, inject_turn,
    /// recreate, recreate_cold (default: each agent's configured policy).
    #[arg(long, value_name = "STRATEGY", value_parser = strategy_name)]
    pub strategy: Option<String>,
    /// The model profile: gemini-3.8, gemini-2.5 or gemini-3.1 (the embedded mock's Gemini Live
    /// behaviour; default: the scenario's), or openai: the OpenAI Realtime protocol (the embedded
    /// mock's OpenAI profile, or with --model-url an OpenAI Realtime endpoint such as
    /// `baton mock-model --profile openai` or wss://api.openai.com/v1).
    #[arg(long, value_name = "PROFILE", value_parser = profile_name)]
    pub profile: Option<String>,
    /// Run this agent set instead of the scenario's.
    #[arg(long, value_name = "FILE")]
    pub agents: Option<PathBuf>,
    /// The embedded mock's first-audio latency in ms (default: the scenario's).
    #[arg(long, value_name = "MS")]
    pub first_audio_ms: Option<u64>,
    /// The embedded mock's generation speed, × real time (default: the scenario's, 4.0 for the
    /// bundled ones; 1.0 generates at real pace, as a model whose audio arrives as it is spoken).
    #[arg(long, value_name = "X")]
    pub model_speed: Option<f64>,
    /// Run at real pace over loopback sockets (default: accelerated on a virtual clock).
    #[arg(long)]
    pub realtime: bool,
    /// The directory to write call.wav (call2.wav… for the further calls of a scenario of several),
    /// summary.json and the timeline picture into; made when missing.
    #[arg(long, value_name = "DIR", default_value = "out/demo")]
    pub out: PathBuf,
    /// Print the summary JSON on stdout instead of the tables.
    #[arg(long)]
    pub json: bool,
    /// Another Live endpoint (ws:// or wss://): a `baton mock-model`, or the real service.
    /// Implies --realtime.
    #[arg(long, value_name = "URL")]
    pub model_url: Option<String>,
    /// Model id sent in setup (or, for OpenAI, in the URL); what it takes in place comes from
    /// baton's model table. Default: the model the profile imitates (gemini-3.8:
    /// models/gemini-3.8-live, gemini-2.5: models/gemini-2.5-flash-native-audio-preview-12-2025,
    /// gemini-3.1: models/gemini-3.1-flash-live-preview, openai: gpt-realtime).
    #[arg(long, value_name = "MODEL")]
    pub model: Option<String>,
    /// Environment variable holding the API key for --model-url (never pass the key itself).
    #[arg(long, value_name = "VAR", default_value = "GEMINI_API_KEY")]
    pub api_key_env: String,
    /// How the caller's audio travels: l16-16k (app/browser) or pcmu8k (phone, G.711 μ-law).
    #[arg(long, default_value = "l16-16k")]
    pub leg_codec: LegCodec,
    /// Keep the call(s) in this store: sqlite://FILE or postgres://… (default: none, except for a
    /// scenario of several calls, which gets a fresh `sqlite://<out>/baton.db`).
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
            model_speed: None,
            agents: None,
            realtime: false,
            out: PathBuf::from("out/demo"),
            json: false,
            model_url: None,
            model: None,
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
    Call(#[from] CallError),
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

/// Checks `--strategy` as clap reads it, so a wrong name is a usage error (exit 2) like any other.
fn strategy_name(s: &str) -> Result<String, DemoError> {
    parse_strategy(s).map(|_| s.to_owned())
}

/// Checks `--profile` as clap reads it: a Gemini profile or `openai`.
fn profile_name(s: &str) -> Result<String, String> {
    s.parse::<crate::mock::profile::ProfileArg>()
        .map(|_| s.to_owned())
        .map_err(|e| format!("{e}, or openai"))
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
