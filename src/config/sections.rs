//! The sections of the daemon's TOML file as typed values: what each key means and its default.
//! Parsing and validation live in the parent module.

use serde::Deserialize;

/// The whole configuration.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub server: ServerConfig,
    #[serde(default)]
    pub model: ModelConfig,
    #[serde(default)]
    pub twilio: TwilioConfig,
    #[serde(default)]
    pub telnyx: TelnyxConfig,
    #[serde(default)]
    pub exotel: ExotelConfig,
    #[serde(default)]
    pub limits: LimitsConfig,
    #[serde(default)]
    pub log: LogConfig,
    #[serde(default)]
    pub agents: AgentsConfig,
    #[serde(default)]
    pub webrtc: crate::leg::webrtc::config::WebrtcConfig,
    #[serde(default)]
    pub audiosocket: AudioSocketConfig,
    /// SIP trunks and PBXs (`[sip]`, see `src/leg/sip/config.rs`).
    #[serde(default)]
    pub sip: crate::leg::sip::config::SipConfig,
    /// Keypad tones to and from the agent (`[keypad]`, see `src/leg/keypad.rs`).
    #[serde(default)]
    pub keypad: crate::leg::keypad::KeypadConfig,
    #[serde(default)]
    pub resume: ResumeConfig,
    #[serde(default)]
    pub store: StoreConfig,
    /// MCP servers every call's agents may take tools from (`[mcp.<name>]`, see `src/mcp/`).
    #[serde(default)]
    pub mcp: std::collections::BTreeMap<String, crate::mcp::McpServerSection>,
    #[serde(default)]
    pub cluster: ClusterConfig,
    /// OpenTelemetry traces of finished calls over OTLP/HTTP (off by default).
    #[serde(default)]
    pub traces: crate::traces::TracesConfig,
}

/// Many instances on one PostgreSQL store (see README "Running many instances"): the registry
/// with heartbeats, placement of new calls, and admin commands carried to the instance holding
/// a call over `LISTEN/NOTIFY`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// Join the instances sharing the store when the store is PostgreSQL (a SQLite store, or
    /// none, always runs alone).
    pub enabled: bool,
    /// This instance's name in the registry (letters, digits, `-`, `_`); empty: a fresh random
    /// one at each start.
    pub instance_id: String,
    /// The origin (and optional path prefix) bridges and browsers reach *this* instance at,
    /// e.g. "<https://baton-2.example.com>" or "<https://lb.example.com/i/baton-2>"; answer
    /// documents place calls there. Empty: `server.public_url` (or `http://<listen>`).
    pub advertise_url: String,
    /// How often the instance records its state and load, and reads the others'.
    pub heartbeat_ms: u64,
    /// An instance whose heartbeat is older than this is marked gone and its calls failed.
    pub stale_after_ms: u64,
    /// How long an admin command waits for the instance holding the call to answer.
    pub command_timeout_ms: u64,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            enabled: true,
            instance_id: String::new(),
            advertise_url: String::new(),
            heartbeat_ms: 1000,
            stale_after_ms: 5000,
            command_timeout_ms: 2000,
        }
    }
}

/// The Asterisk AudioSocket listener (raw TCP); off unless `listen` is set.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AudioSocketConfig {
    /// Address Asterisk connects to, e.g. "127.0.0.1:9092". Empty: no AudioSocket listener.
    pub listen: String,
}

/// Surviving `goAway` and dropped sockets (see README "Surviving goAway and drops").
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ResumeConfig {
    /// Resume attempts after an unexpected drop before a fresh session is tried.
    pub tries: u32,
    /// Wait before attempt 1, 2, 3 … (the last value repeats).
    pub backoff_ms: Vec<u64>,
    /// Fresh sessions (re-seeded from the transcript) tried after resumption is given up.
    pub fresh_tries: u32,
    /// Caller audio handed to the socket within this of a handle's arrival is replayed anyway
    /// (at least the round trip to the service plus its input lag).
    pub replay_margin_ms: u64,
    /// Caller audio kept for replay.
    pub max_replay_s: u64,
    /// After `goAway`, switch at the latest this long before its `timeLeft` runs out.
    pub go_away_margin_s: u64,
    /// WebSocket ping interval while nothing arrives (0: no pings, no dead-socket detection).
    pub keepalive_ping_s: u64,
    /// Nothing received for this long with a ping outstanding: the socket is dead.
    pub keepalive_dead_s: u64,
    /// Keep one model socket per call dialed ahead (TCP, TLS, WebSocket upgrade; no setup), so
    /// that a reconnect only sends its setup.
    pub standby: bool,
}

impl Default for ResumeConfig {
    fn default() -> Self {
        ResumeConfig {
            tries: 3,
            backoff_ms: vec![0, 100, 400],
            fresh_tries: 2,
            replay_margin_ms: 500,
            max_replay_s: 60,
            go_away_margin_s: 5,
            keepalive_ping_s: 10,
            keepalive_dead_s: 45,
            standby: true,
        }
    }
}

impl ResumeConfig {
    /// The call's reconnect policy.
    pub fn policy(&self) -> crate::call::ReconnectPolicy {
        use std::time::Duration;
        crate::call::ReconnectPolicy {
            tries: self.tries,
            backoff: self
                .backoff_ms
                .iter()
                .map(|&ms| Duration::from_millis(ms))
                .collect(),
            fresh_tries: self.fresh_tries,
            go_away_margin: Duration::from_secs(self.go_away_margin_s),
            replay_margin: Duration::from_millis(self.replay_margin_ms),
            max_replay: Duration::from_secs(self.max_replay_s),
            standby: self.standby,
            ..crate::call::ReconnectPolicy::default()
        }
    }

    /// The session keepalive.
    pub fn keepalive(&self) -> crate::model::gemini::keepalive::KeepaliveConfig {
        use std::time::Duration;
        crate::model::gemini::keepalive::KeepaliveConfig {
            ping_every: (self.keepalive_ping_s > 0)
                .then(|| Duration::from_secs(self.keepalive_ping_s)),
            dead_after: Duration::from_secs(self.keepalive_dead_s),
        }
    }
}

/// Where calls, transcripts and agent contexts are kept (see `src/store/`); empty url: nowhere.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// `sqlite://PATH` (relative to the working directory) or `postgres://USER@HOST/DB`.
    pub url: String,
    /// NAME of an environment variable holding the URL instead (one with a password).
    pub url_env: String,
    /// Writes waiting for the store at most; more are dropped, counted and logged.
    pub queue: usize,
    /// How long a call may wait for the caller's contexts before its audio starts.
    pub read_timeout_ms: u64,
    /// A folder for per-call stereo recordings (left: caller, right: agent); empty: none.
    pub recordings: String,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            url: String::new(),
            url_env: String::new(),
            queue: 10_000,
            read_timeout_ms: 300,
            recordings: String::new(),
        }
    }
}

/// Which agent set calls run (multi-agent handoffs); none: one agent with `model.instruction`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentsConfig {
    /// An agent set file (see config/agents/README.md), relative to this config file.
    pub set: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address to listen on.
    pub listen: String,
    /// The public origin bridges reach baton at (`https://baton.example.com`); used for the
    /// TwiML stream URL and for X-Twilio-Signature validation. Empty: derived from `listen`.
    pub public_url: String,
    /// On SIGTERM/SIGINT, how long active calls may run before they are ended.
    pub drain_timeout_s: u64,
    /// Name of the environment variable holding the API bearer tokens (comma-separated) that
    /// every endpoint but `/healthz` and the Twilio-signed ones requires. Empty: no tokens, which
    /// only a loopback `listen` (or `--insecure-no-auth`) allows.
    pub auth_tokens_env: String,
    /// Threads that run calls, one current-thread runtime each; a call runs entirely on the
    /// least-loaded one. 0: one per core.
    pub shards: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:8080".into(),
            public_url: String::new(),
            drain_timeout_s: 30,
            auth_tokens_env: String::new(),
            shards: 0,
        }
    }
}

/// Which model backend calls use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// The embedded mock model (in-process).
    #[default]
    Mock,
    /// Gemini Developer API (API key).
    Gemini,
    /// Vertex AI (OAuth2 access token).
    Vertex,
    /// OpenAI Realtime (API key; `credential_env` defaults to `OPENAI_API_KEY`).
    Openai,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    pub backend: BackendKind,
    /// Endpoint base URL (`wss://…` or `ws://127.0.0.1:9300` for a separate `baton mock-model`).
    /// Empty: the backend's default (the service, or the in-process mock).
    pub url: String,
    /// Model id sent in setup (OpenAI: in the URL). Empty: the backend's default (the embedded
    /// mock: the model its scenario's profile imitates; gemini and a separate mock:
    /// models/gemini-3.8-live; openai: gpt-realtime). Vertex needs the full resource name.
    pub model: String,
    /// What the model takes in place, where baton's model table does not know it (or knows it
    /// wrong); each key left out keeps the table's value.
    pub capabilities: CapabilitiesConfig,
    /// API version path segment; empty means the backend's default.
    pub api_version: String,
    /// Name of the environment variable holding the credential (never the credential itself),
    /// read once when baton starts.
    pub credential_env: String,
    /// A program and its arguments (run directly, no shell) whose standard output, trimmed, is
    /// the credential: run at start and every `credential_refresh_s`, for credentials that
    /// expire (Vertex's OAuth2 access tokens: `["gcloud", "auth", "print-access-token"]`). Not
    /// with `credential_env`.
    pub credential_command: Option<Vec<String>>,
    /// How often `credential_command` runs again, in seconds (default 300: a token a metadata
    /// server hands out may have only minutes left, and one run is cheap).
    pub credential_refresh_s: u64,
    /// Mock scenario file (backend = mock), relative to the config file.
    pub scenario: String,
    /// System instruction for the session.
    pub instruction: String,
    /// Prebuilt voice name.
    pub voice: String,
    /// A PEM file of extra CA certificates trusted for `wss://` model endpoints (a private
    /// gateway), relative to this config file; added to the platform's roots, never replacing
    /// verification.
    pub ca_file: String,
    /// `contextWindowCompression`: a sliding window once the context reaches this many tokens
    /// (0: no compression; sessions without it end after ~15 min of audio).
    pub compression_trigger_tokens: u64,
    /// What the window shrinks the context to (0: the service's default, half the trigger).
    pub compression_target_tokens: u64,
    /// backend = mock: the model profile — empty (the scenario's Gemini Live profile),
    /// "openai" (the OpenAI Realtime protocol: in-process, or at `url` for a separate
    /// `baton mock-model --profile openai`), or, for the embedded mock, a Gemini profile
    /// ("gemini-3.8", "gemini-2.5", "gemini-3.1") in place of the scenario's.
    pub profile: String,
    /// backend = openai: the beta dialect (`OpenAI-Beta: realtime=v1`) instead of GA.
    pub beta: bool,
    /// Caller audio goes as PCM at the model's native rate, resampled here, instead of as the
    /// leg has it (the default). Gemini Live: a leg at 8–16 kHz is otherwise sent at its own
    /// rate, declared in its MIME type (the service resamples it: no resampler delay, half the
    /// bytes of a phone call). OpenAI Realtime: a bridge leg in G.711 (Twilio and the other
    /// bridges in μ-law or A-law) is otherwise heard and answered in its own law at 8 kHz
    /// (`audio/pcmu`, `audio/pcma`: no resampler either way); with this, 24 kHz PCM both ways.
    pub resample_input: bool,
    /// Caller audio is sent to the model once this many ms of it are gathered (20, 40, 60, 80 or
    /// 100: whole 20 ms frames): 20, the
    /// default, sends each 20 ms frame as it arrives; 40 halves the messages (and the model
    /// socket's writes, baton's largest cost per call) for up to 20 ms more before the model
    /// hears the caller.
    pub uplink_chunk_ms: u64,
}

/// `[model.capabilities]`: what a model takes inside a live session (see
/// `crate::model::catalog`).
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CapabilitiesConfig {
    /// `contextUpdate` (OpenAI: `session.update`) of instructions and tools.
    pub context_update: Option<bool>,
    /// Functions declared NON_BLOCKING, answered with a `scheduling`.
    pub non_blocking_tools: Option<bool>,
    /// `clientContent` after the first turn.
    pub mid_session_client_content: Option<bool>,
    /// Initial history in `clientContent` under `historyConfig`.
    pub history_config: Option<bool>,
    /// A function call made mid-utterance pauses the model's speech until answered.
    pub calls_pause_speech: Option<bool>,
}

impl From<CapabilitiesConfig> for crate::model::catalog::Override {
    fn from(c: CapabilitiesConfig) -> Self {
        crate::model::catalog::Override {
            context_update: c.context_update,
            non_blocking_tools: c.non_blocking_tools,
            mid_session_client_content: c.mid_session_client_content,
            history_config: c.history_config,
            calls_pause_speech: c.calls_pause_speech,
        }
    }
}

impl ModelConfig {
    /// The protocol is OpenAI Realtime (the service, or the mock's OpenAI profile).
    pub fn openai(&self) -> bool {
        self.backend == BackendKind::Openai
            || (self.backend == BackendKind::Mock && self.profile == "openai")
    }

    /// The model sessions address and what baton will use of it: `model` (or the backend's
    /// default, `embedded` being the embedded mock's own model id) looked up in baton's model
    /// table, with `[model.capabilities]` applied.
    pub fn model_info(&self, embedded: Option<&str>) -> crate::model::catalog::ModelInfo {
        use crate::model::handle::Protocol;
        let protocol = if self.openai() {
            Protocol::OpenAi
        } else {
            Protocol::Gemini
        };
        let id = match (self.model.trim(), embedded) {
            ("", Some(e)) => e,
            ("", None) if self.openai() => crate::model::catalog::DEFAULT_OPENAI_MODEL,
            ("", None) => crate::model::catalog::DEFAULT_GEMINI_MODEL,
            (m, _) => m,
        };
        crate::model::catalog::resolve(protocol, id, &self.capabilities.into())
    }
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            backend: BackendKind::Mock,
            url: String::new(),
            model: String::new(),
            capabilities: CapabilitiesConfig::default(),
            api_version: String::new(),
            credential_env: String::new(),
            credential_command: None,
            credential_refresh_s: 300,
            scenario: String::new(),
            instruction: "You are a friendly assistant on a phone line. Keep answers short.".into(),
            voice: String::new(),
            ca_file: String::new(),
            compression_trigger_tokens: 0,
            compression_target_tokens: 0,
            profile: String::new(),
            beta: false,
            resample_input: false,
            uplink_chunk_ms: 20,
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TwilioConfig {
    /// Name of the environment variable holding the Twilio auth token. When that variable is
    /// set, every `/twilio` upgrade must carry a valid X-Twilio-Signature.
    pub auth_token_env: String,
    /// Turn signature validation off even when a token is configured (local testing only).
    pub disable_signature_check: bool,
    /// If set, `start.accountSid` must equal this.
    pub account_sid: String,
    /// The stream `<Parameter>` naming the caller (their agent contexts follow them across
    /// calls); empty: `From`.
    pub caller_parameter: String,
    /// Twilio's REST API, where a call is redirected to `<Dial>` when an agent hands the caller
    /// to a person (a blind transfer; basic auth with the account SID and the auth token of
    /// `auth_token_env`); empty: `https://api.twilio.com`.
    pub rest_base_url: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelnyxConfig {
    /// Name of the environment variable holding the stream's `stream_auth_token`. When that
    /// variable is set, every `/telnyx` upgrade must carry it in `x-telnyx-streaming-auth-token`.
    pub stream_auth_token_env: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExotelConfig {
    /// Name of the environment variable holding `KEY:TOKEN`. When that variable is set, every
    /// `/exotel` upgrade must carry it as `Authorization: Basic` (a stream URL of the form
    /// `wss://KEY:TOKEN@host/exotel`).
    pub basic_auth_env: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Calls served at once; more are refused with 503.
    pub max_calls: usize,
    /// Bound of each per-call queue between a leg and its call, in 20 ms frames (legs with a
    /// task of their own: WebRTC, the microphone; the bridges, AudioSocket, `/stream` and SIP
    /// run in their call's task), and of the caller audio kept while the session opens.
    pub leg_queue_frames: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_calls: 200,
            leg_queue_frames: 100,
        }
    }
}

/// Log output format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Human,
    Json,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    pub format: LogFormat,
    /// A tracing filter such as `info` or `baton=debug`.
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: LogFormat::Human,
            level: "info".into(),
        }
    }
}
