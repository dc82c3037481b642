//! OpenAI Realtime wire types: serde mirrors of the `openai` Python SDK's
//! `types/realtime/*` JSON (snake_case, only fields the SDK has).
//!
//! - Client events are an internally tagged enum ([`ClientEvent`], `{"type":"session.update",…}`),
//!   GA names; the session object has a GA shape ([`Session`]) and the flat beta shape
//!   ([`BetaSession`], sent with `OpenAI-Beta: realtime=v1`).
//! - A server event is one flat struct of options ([`ServerEvent`]) plus its `type` string, read
//!   into [`EventKind`], which maps the GA name and the beta name of the same event to one variant.
//!   Unknown event types, unknown fields and unknown enum values are tolerated.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::audio::g711::Law;

mod server;
pub use server::*;

/// Which dialect of the protocol: GA (no header) or beta (`OpenAI-Beta: realtime=v1`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Api {
    #[default]
    Ga,
    Beta,
}

/// `Some(None)` for an explicit `null` (a cleared field), `None` when absent.
fn double_option<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

// ---------------------------------------------------------------------------------------------
// Session configuration (GA)
// ---------------------------------------------------------------------------------------------

/// The audio format of one direction (`realtime_audio_formats.py`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum AudioFormat {
    /// PCM16 little-endian, mono; only 24 kHz is supported.
    #[serde(rename = "audio/pcm")]
    Pcm {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rate: Option<u32>,
    },
    /// G.711 μ-law, 8 kHz.
    #[serde(rename = "audio/pcmu")]
    Pcmu,
    /// G.711 A-law, 8 kHz.
    #[serde(rename = "audio/pcma")]
    Pcma,
    #[serde(other)]
    Other,
}

impl AudioFormat {
    /// `audio/pcm` at 24 kHz, the default in both directions.
    pub const PCM24K: AudioFormat = AudioFormat::Pcm { rate: Some(24_000) };

    /// A G.711 law's format, or 24 kHz PCM for none.
    pub const fn of_law(law: Option<Law>) -> AudioFormat {
        match law {
            Some(Law::Ulaw) => AudioFormat::Pcmu,
            Some(Law::Alaw) => AudioFormat::Pcma,
            None => AudioFormat::PCM24K,
        }
    }

    /// The G.711 law of this format, if it is one.
    pub const fn law(&self) -> Option<Law> {
        match self {
            AudioFormat::Pcmu => Some(Law::Ulaw),
            AudioFormat::Pcma => Some(Law::Alaw),
            AudioFormat::Pcm { .. } | AudioFormat::Other => None,
        }
    }

    /// Sample rate of the audio in this format (`None`: a format baton does not know).
    pub fn rate(&self) -> Option<u32> {
        match self {
            AudioFormat::Pcm { .. } => Some(24_000),
            AudioFormat::Pcmu | AudioFormat::Pcma => Some(8_000),
            AudioFormat::Other => None,
        }
    }

    /// The beta name (`pcm16`, `g711_ulaw`, `g711_alaw`).
    pub fn beta_name(&self) -> &'static str {
        match self {
            AudioFormat::Pcmu => "g711_ulaw",
            AudioFormat::Pcma => "g711_alaw",
            AudioFormat::Pcm { .. } | AudioFormat::Other => "pcm16",
        }
    }

    /// Reads a beta name.
    pub fn from_beta_name(s: &str) -> AudioFormat {
        match s {
            "pcm16" => AudioFormat::PCM24K,
            "g711_ulaw" => AudioFormat::Pcmu,
            "g711_alaw" => AudioFormat::Pcma,
            _ => AudioFormat::Other,
        }
    }
}

/// `audio.input.turn_detection` (server or semantic VAD).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnDetection {
    /// `server_vad` or `semantic_vad`.
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_padding_ms: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub silence_duration_ms: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create_response: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupt_response: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout_ms: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eagerness: Option<String>,
}

impl TurnDetection {
    /// `server_vad` with the service defaults except as given.
    pub fn server_vad(silence_duration_ms: Option<u32>) -> Self {
        TurnDetection {
            kind: "server_vad".into(),
            silence_duration_ms,
            create_response: Some(true),
            interrupt_response: Some(true),
            ..Default::default()
        }
    }
}

/// `audio.input.transcription`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Transcription {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AudioInput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<AudioFormat>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise_reduction: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcription: Option<Transcription>,
    /// `Some(None)` is sent as `null`: manual turns (no VAD).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "double_option"
    )]
    pub turn_detection: Option<Option<TurnDetection>>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AudioOutput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<AudioFormat>,
    /// A built-in voice name or `{"id": …}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub voice: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed: Option<f32>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AudioConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<AudioInput>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<AudioOutput>,
}

/// A function the model may call (`realtime_function_tool.py`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FunctionTool {
    /// Always `function`.
    #[serde(rename = "type")]
    pub kind: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of the arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
}

impl FunctionTool {
    pub fn new(name: impl Into<String>, description: Option<String>, parameters: Value) -> Self {
        FunctionTool {
            kind: "function".into(),
            name: name.into(),
            description,
            parameters: Some(parameters),
        }
    }
}

/// The GA session object of `session.update` (`realtime_session_create_request.py`); every field
/// but `type` is optional and only present fields change.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Session {
    /// Always `realtime` for a conversation session.
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_modalities: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio: Option<AudioConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<FunctionTool>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncation: Option<Value>,
}

impl Default for Session {
    fn default() -> Self {
        Session {
            kind: "realtime".into(),
            model: None,
            instructions: None,
            output_modalities: None,
            audio: None,
            tools: None,
            tool_choice: None,
            max_output_tokens: None,
            truncation: None,
        }
    }
}

/// The flat beta session object (`types/beta/realtime/session_update_event.py`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BetaSession {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// `["text"]` or `["text","audio"]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modalities: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub voice: Option<Value>,
    /// `pcm16`, `g711_ulaw` or `g711_alaw`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_audio_format: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_audio_format: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_audio_transcription: Option<Transcription>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "double_option"
    )]
    pub turn_detection: Option<Option<TurnDetection>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<FunctionTool>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
}

/// The session object of a `session.update`, in either dialect.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SessionUpdate {
    Ga(Session),
    Beta(BetaSession),
}

// ---------------------------------------------------------------------------------------------
// Conversation items
// ---------------------------------------------------------------------------------------------

/// One content part of a message item.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ContentPart {
    /// `input_text`, `input_audio`, `output_text`, `output_audio` (beta: `text`, `audio`).
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcript: Option<String>,
}

/// A conversation item (`conversation_item.py`), the kinds baton creates or reads.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum Item {
    #[serde(rename = "message")]
    Message {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// `system`, `user` or `assistant`.
        role: String,
        #[serde(default)]
        content: Vec<ContentPart>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<String>,
    },
    #[serde(rename = "function_call")]
    FunctionCall {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_id: Option<String>,
        #[serde(default)]
        name: String,
        #[serde(default)]
        arguments: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<String>,
    },
    #[serde(rename = "function_call_output")]
    FunctionCallOutput {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        call_id: String,
        /// The result, as a string (JSON text by convention).
        output: String,
    },
    #[serde(other)]
    Other,
}

impl Item {
    /// A `system` (or `user`) message with one `input_text` part.
    pub fn text(role: &str, text: impl Into<String>) -> Self {
        Item::Message {
            id: None,
            role: role.into(),
            content: vec![ContentPart {
                kind: "input_text".into(),
                text: Some(text.into()),
                ..Default::default()
            }],
            status: None,
        }
    }

    /// The answer to a function call.
    pub fn function_output(call_id: impl Into<String>, output: impl Into<String>) -> Self {
        Item::FunctionCallOutput {
            id: None,
            call_id: call_id.into(),
            output: output.into(),
        }
    }
}

/// `response.create`'s optional per-response overrides (the ones baton uses).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ResponseParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// `auto` (default) or `none` (out of band, not written to the conversation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_modalities: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<FunctionTool>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

// ---------------------------------------------------------------------------------------------
// Client → server
// ---------------------------------------------------------------------------------------------

/// One client event (GA names; the beta names of these events are the same). `session.update`
/// is sent once or twice per session, so its size is not worth boxing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum ClientEvent {
    #[serde(rename = "session.update")]
    SessionUpdate {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        event_id: Option<String>,
        session: SessionUpdate,
    },
    #[serde(rename = "input_audio_buffer.append")]
    InputAudioBufferAppend {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        event_id: Option<String>,
        /// Base64 of audio in the session's input format.
        audio: String,
    },
    #[serde(rename = "input_audio_buffer.commit")]
    InputAudioBufferCommit {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        event_id: Option<String>,
    },
    #[serde(rename = "input_audio_buffer.clear")]
    InputAudioBufferClear {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        event_id: Option<String>,
    },
    #[serde(rename = "conversation.item.create")]
    ConversationItemCreate {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        event_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        previous_item_id: Option<String>,
        item: Item,
    },
    #[serde(rename = "conversation.item.truncate")]
    ConversationItemTruncate {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        event_id: Option<String>,
        item_id: String,
        content_index: u32,
        audio_end_ms: u64,
    },
    #[serde(rename = "response.create")]
    ResponseCreate {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        event_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        response: Option<ResponseParams>,
    },
    #[serde(rename = "response.cancel")]
    ResponseCancel {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        event_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        response_id: Option<String>,
    },
}

impl ClientEvent {
    /// The `type` string of this event.
    pub fn kind(&self) -> &'static str {
        match self {
            ClientEvent::SessionUpdate { .. } => "session.update",
            ClientEvent::InputAudioBufferAppend { .. } => "input_audio_buffer.append",
            ClientEvent::InputAudioBufferCommit { .. } => "input_audio_buffer.commit",
            ClientEvent::InputAudioBufferClear { .. } => "input_audio_buffer.clear",
            ClientEvent::ConversationItemCreate { .. } => "conversation.item.create",
            ClientEvent::ConversationItemTruncate { .. } => "conversation.item.truncate",
            ClientEvent::ResponseCreate { .. } => "response.create",
            ClientEvent::ResponseCancel { .. } => "response.cancel",
        }
    }

    /// The client-chosen `event_id`, echoed in `error.event_id`.
    pub fn event_id(&self) -> Option<&str> {
        match self {
            ClientEvent::SessionUpdate { event_id, .. }
            | ClientEvent::InputAudioBufferAppend { event_id, .. }
            | ClientEvent::InputAudioBufferCommit { event_id }
            | ClientEvent::InputAudioBufferClear { event_id }
            | ClientEvent::ConversationItemCreate { event_id, .. }
            | ClientEvent::ConversationItemTruncate { event_id, .. }
            | ClientEvent::ResponseCreate { event_id, .. }
            | ClientEvent::ResponseCancel { event_id, .. } => event_id.as_deref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn client_events_have_the_sdk_shape() {
        let ev = ClientEvent::SessionUpdate {
            event_id: None,
            session: SessionUpdate::Ga(Session {
                instructions: Some("Be brief.".into()),
                audio: Some(AudioConfig {
                    input: Some(AudioInput {
                        format: Some(AudioFormat::Pcmu),
                        turn_detection: Some(None),
                        ..Default::default()
                    }),
                    output: Some(AudioOutput {
                        format: Some(AudioFormat::PCM24K),
                        ..Default::default()
                    }),
                }),
                ..Default::default()
            }),
        };
        assert_eq!(
            serde_json::to_value(&ev).unwrap(),
            json!({"type": "session.update", "session": {"type": "realtime",
                "instructions": "Be brief.",
                "audio": {"input": {"format": {"type": "audio/pcmu"}, "turn_detection": null},
                          "output": {"format": {"type": "audio/pcm", "rate": 24000}}}}})
        );
        let ev = ClientEvent::ConversationItemCreate {
            event_id: None,
            previous_item_id: None,
            item: Item::function_output("call_1", "{\"ok\":true}"),
        };
        assert_eq!(
            serde_json::to_value(&ev).unwrap(),
            json!({"type": "conversation.item.create", "item": {"type": "function_call_output",
                "call_id": "call_1", "output": "{\"ok\":true}"}})
        );
        let back: ClientEvent = serde_json::from_value(serde_json::to_value(&ev).unwrap()).unwrap();
        assert_eq!(back, ev);
    }

    #[test]
    fn explicit_null_turn_detection_survives_a_round_trip() {
        let input: AudioInput = serde_json::from_value(json!({"turn_detection": null})).unwrap();
        assert_eq!(input.turn_detection, Some(None));
        let input: AudioInput = serde_json::from_value(json!({})).unwrap();
        assert_eq!(input.turn_detection, None);
    }

    #[test]
    fn ga_and_beta_names_map_to_one_kind() {
        for (ga, beta) in [
            ("response.output_audio.delta", "response.audio.delta"),
            ("response.output_audio.done", "response.audio.done"),
            (
                "response.output_audio_transcript.delta",
                "response.audio_transcript.delta",
            ),
        ] {
            let k = EventKind::parse(ga);
            assert_eq!(k, EventKind::parse(beta));
            assert_eq!(k.name(Api::Ga), ga);
            assert_eq!(k.name(Api::Beta), beta);
        }
        assert_eq!(
            EventKind::parse("mcp_list_tools.completed"),
            EventKind::Other
        );
    }

    #[test]
    fn unknown_formats_and_items_decode_as_other() {
        let f: AudioFormat = serde_json::from_value(json!({"type": "audio/opus"})).unwrap();
        assert_eq!(f, AudioFormat::Other);
        let i: Item = serde_json::from_value(json!({"type": "mcp_call", "id": "x"})).unwrap();
        assert_eq!(i, Item::Other);
    }
}
