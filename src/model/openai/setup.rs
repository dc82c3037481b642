//! An OpenAI Realtime session's settings ([`SessionConfig`]) and the `session.update` events they
//! make: the first one that configures the session, and the partial one a handoff sends to swap
//! instructions and tools in place.

use std::time::Duration;

use serde_json::Value;

use super::wire::{
    Api, AudioConfig, AudioFormat, AudioInput, AudioOutput, BetaSession, ClientEvent, FunctionTool,
    Session as WireSession, SessionUpdate, Transcription, TurnDetection,
};
use crate::model::gemini::keepalive::KeepaliveConfig;

/// How the session is configured by its first `session.update`.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// `gpt-realtime`, `gpt-realtime-mini`, … (sent in the URL; the session's model never changes).
    pub model: String,
    pub instructions: Option<String>,
    pub tools: Vec<FunctionTool>,
    /// A built-in voice such as `marin`; fixed once the model has spoken.
    pub voice: Option<String>,
    /// What baton sends: `audio/pcm` (24 kHz) or G.711 (8 kHz, straight from a phone leg).
    pub input_format: AudioFormat,
    /// What the model speaks.
    pub output_format: AudioFormat,
    /// Input transcription model (e.g. `gpt-4o-mini-transcribe`); `None`: no caller transcripts.
    pub transcription: Option<String>,
    /// Server VAD; `None`: manual turns (`input_audio_buffer.commit` + `response.create`).
    pub turn_detection: Option<TurnDetection>,
    /// How long to wait for `session.updated`.
    pub setup_timeout: Duration,
    /// WebSocket pings and dead-socket detection.
    pub keepalive: KeepaliveConfig,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            model: "gpt-realtime".into(),
            instructions: None,
            tools: Vec::new(),
            voice: None,
            input_format: AudioFormat::PCM24K,
            output_format: AudioFormat::PCM24K,
            transcription: Some("gpt-4o-mini-transcribe".into()),
            turn_detection: Some(TurnDetection::server_vad(None)),
            setup_timeout: Duration::from_secs(15),
            keepalive: KeepaliveConfig::default(),
        }
    }
}

impl SessionConfig {
    /// The `session.update` that sets the session up, in `api`'s shape.
    pub fn session_update(&self, api: Api) -> ClientEvent {
        let transcription = self.transcription.as_ref().map(|m| Transcription {
            model: Some(m.clone()),
            ..Default::default()
        });
        let session = match api {
            Api::Ga => SessionUpdate::Ga(WireSession {
                instructions: self.instructions.clone(),
                output_modalities: Some(vec!["audio".into()]),
                audio: Some(AudioConfig {
                    input: Some(AudioInput {
                        format: Some(self.input_format.clone()),
                        transcription,
                        turn_detection: Some(self.turn_detection.clone()),
                        ..Default::default()
                    }),
                    output: Some(AudioOutput {
                        format: Some(self.output_format.clone()),
                        voice: self.voice.clone().map(Value::String),
                        ..Default::default()
                    }),
                }),
                tools: Some(self.tools.clone()),
                ..Default::default()
            }),
            Api::Beta => SessionUpdate::Beta(BetaSession {
                instructions: self.instructions.clone(),
                modalities: Some(vec!["text".into(), "audio".into()]),
                voice: self.voice.clone().map(Value::String),
                input_audio_format: Some(self.input_format.beta_name().into()),
                output_audio_format: Some(self.output_format.beta_name().into()),
                input_audio_transcription: transcription,
                turn_detection: Some(self.turn_detection.clone()),
                tools: Some(self.tools.clone()),
                ..Default::default()
            }),
        };
        ClientEvent::SessionUpdate {
            event_id: None,
            session,
        }
    }
}

/// A partial `session.update` that swaps instructions and/or tools in place (a handoff); the
/// new settings apply from the next response, the voice stays.
pub fn update_event(
    api: Api,
    instructions: Option<&str>,
    tools: Option<&[FunctionTool]>,
) -> ClientEvent {
    let session = match api {
        Api::Ga => SessionUpdate::Ga(WireSession {
            instructions: instructions.map(str::to_owned),
            tools: tools.map(<[FunctionTool]>::to_vec),
            ..Default::default()
        }),
        Api::Beta => SessionUpdate::Beta(BetaSession {
            instructions: instructions.map(str::to_owned),
            tools: tools.map(<[FunctionTool]>::to_vec),
            ..Default::default()
        }),
    };
    ClientEvent::SessionUpdate {
        event_id: None,
        session,
    }
}

#[cfg(test)]
#[path = "setup_tests.rs"]
mod tests;
