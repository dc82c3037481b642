//! A Gemini Live session's settings ([`SessionConfig`]) and the `setup` message they make: the
//! model, instructions, tools, voice, transcription, VAD window, history, resumption and
//! context compression. The protocol core sends it first; the session handle opens with it.

use std::time::Duration;

use serde_json::Value;

use super::keepalive::KeepaliveConfig;
use super::wire::{self, ClientMessage, Content, Setup};

/// How the session is configured at setup.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// `models/…` (Developer API) or a full Vertex resource name.
    pub model: String,
    pub system_instruction: Option<String>,
    /// `Tool` objects as JSON (`{"functionDeclarations":[…]}`).
    pub tools: Vec<Value>,
    /// A prebuilt voice name such as `Kore`.
    pub voice: Option<String>,
    /// Ask for input and output transcriptions.
    pub transcription: bool,
    /// Server VAD silence window; `None` leaves the service default.
    pub silence_duration_ms: Option<u32>,
    /// How long to wait for `setupComplete`.
    pub setup_timeout: Duration,
    /// Ask the server to take history as `clientContent` before any realtime input
    /// (`historyConfig.initialHistoryInClientContent`), for a session that continues a call.
    pub history_in_client_content: bool,
    /// Request session resumption handles (`sessionResumption`); on by default, since a
    /// `goAway` or a dropped socket can only be survived with one.
    pub resumption: bool,
    /// Resume the session this handle names (a `sessionResumptionUpdate.newHandle` that came
    /// with `resumable: true`).
    pub resume_handle: Option<String>,
    /// `contextWindowCompression` (a sliding window), for sessions longer than ~15 min of audio.
    pub compression: Option<Compression>,
    /// WebSocket pings and dead-socket detection.
    pub keepalive: KeepaliveConfig,
    /// The G.711 law of a phone caller whose leg carries it for the whole call at 8 kHz: an
    /// OpenAI Realtime session is then set up to take and speak it (`audio/pcmu`,
    /// `audio/pcma`), so the call resamples nothing either way. Gemini Live takes PCM only and
    /// ignores it.
    pub phone_law: Option<crate::audio::g711::Law>,
}

/// `contextWindowCompression.slidingWindow`: when the context reaches `trigger_tokens`, the
/// oldest turns are dropped down to `target_tokens` (`None`: the service's defaults, 80 % of the
/// context window and half of the trigger).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Compression {
    pub trigger_tokens: Option<u64>,
    pub target_tokens: Option<u64>,
}

impl Compression {
    fn to_json(self) -> Value {
        let mut window = serde_json::Map::new();
        if let Some(t) = self.target_tokens {
            window.insert("targetTokens".into(), t.into());
        }
        let mut v = serde_json::Map::new();
        if let Some(t) = self.trigger_tokens {
            v.insert("triggerTokens".into(), t.into());
        }
        v.insert("slidingWindow".into(), Value::Object(window));
        Value::Object(v)
    }
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            model: "models/gemini-3.8-live".into(),
            system_instruction: None,
            tools: Vec::new(),
            voice: None,
            transcription: true,
            silence_duration_ms: None,
            setup_timeout: Duration::from_secs(15),
            history_in_client_content: false,
            resumption: true,
            resume_handle: None,
            compression: None,
            keepalive: KeepaliveConfig::default(),
            phone_law: None,
        }
    }
}

impl SessionConfig {
    /// The `setup` message this config sends.
    pub fn setup_message(&self) -> ClientMessage {
        let model = if self.model.starts_with("models/") || self.model.starts_with("projects/") {
            self.model.clone()
        } else {
            format!("models/{}", self.model)
        };
        let speech_config = self
            .voice
            .as_ref()
            .map(|v| serde_json::json!({"voiceConfig": {"prebuiltVoiceConfig": {"voiceName": v}}}));
        let realtime_input_config = self
            .silence_duration_ms
            .map(|ms| wire::RealtimeInputConfig {
                automatic_activity_detection: Some(wire::AutomaticActivityDetection {
                    silence_duration_ms: Some(ms),
                    ..Default::default()
                }),
                ..Default::default()
            });
        let transcription = self.transcription.then(|| serde_json::json!({}));
        ClientMessage::Setup(Setup {
            model,
            generation_config: Some(wire::GenerationConfig {
                response_modalities: Some(vec!["AUDIO".into()]),
                speech_config,
                ..Default::default()
            }),
            system_instruction: self
                .system_instruction
                .as_ref()
                .map(|t| Content::text(None, t.clone())),
            tools: (!self.tools.is_empty()).then(|| self.tools.clone()),
            realtime_input_config,
            input_audio_transcription: transcription.clone(),
            output_audio_transcription: transcription,
            history_config: self
                .history_in_client_content
                .then_some(wire::HistoryConfig {
                    initial_history_in_client_content: Some(true),
                }),
            session_resumption: (self.resumption || self.resume_handle.is_some()).then(|| {
                wire::SessionResumptionConfig {
                    handle: self.resume_handle.clone(),
                    transparent: None,
                }
            }),
            context_window_compression: self.compression.map(Compression::to_json),
            ..Default::default()
        })
    }
}
