//! Server → client: the flat [`ServerEvent`] and [`EventKind`], which maps the GA and beta name
//! of one event to one variant.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Api;

// ---------------------------------------------------------------------------------------------

/// The server events baton acts on; GA and beta names of one event map to one variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    SessionCreated,
    SessionUpdated,
    SpeechStarted,
    SpeechStopped,
    Committed,
    ResponseCreated,
    /// `response.output_audio.delta` (beta `response.audio.delta`).
    AudioDelta,
    /// `response.output_audio.done` (beta `response.audio.done`).
    AudioDone,
    /// `response.output_audio_transcript.delta` (beta `response.audio_transcript.delta`).
    TranscriptDelta,
    TranscriptDone,
    InputTranscriptionDelta,
    InputTranscriptionCompleted,
    InputTranscriptionFailed,
    FunctionCallArgumentsDone,
    ResponseDone,
    ItemTruncated,
    RateLimitsUpdated,
    Error,
    /// Any other event (item bookkeeping, text deltas, MCP …): nothing for baton to do.
    Other,
}

impl EventKind {
    pub fn parse(s: &str) -> EventKind {
        match s {
            "session.created" => EventKind::SessionCreated,
            "session.updated" => EventKind::SessionUpdated,
            "input_audio_buffer.speech_started" => EventKind::SpeechStarted,
            "input_audio_buffer.speech_stopped" => EventKind::SpeechStopped,
            "input_audio_buffer.committed" => EventKind::Committed,
            "response.created" => EventKind::ResponseCreated,
            "response.output_audio.delta" | "response.audio.delta" => EventKind::AudioDelta,
            "response.output_audio.done" | "response.audio.done" => EventKind::AudioDone,
            "response.output_audio_transcript.delta" | "response.audio_transcript.delta" => {
                EventKind::TranscriptDelta
            }
            "response.output_audio_transcript.done" | "response.audio_transcript.done" => {
                EventKind::TranscriptDone
            }
            "conversation.item.input_audio_transcription.delta" => {
                EventKind::InputTranscriptionDelta
            }
            "conversation.item.input_audio_transcription.completed" => {
                EventKind::InputTranscriptionCompleted
            }
            "conversation.item.input_audio_transcription.failed" => {
                EventKind::InputTranscriptionFailed
            }
            "response.function_call_arguments.done" => EventKind::FunctionCallArgumentsDone,
            "response.done" => EventKind::ResponseDone,
            "conversation.item.truncated" => EventKind::ItemTruncated,
            "rate_limits.updated" => EventKind::RateLimitsUpdated,
            "error" => EventKind::Error,
            _ => EventKind::Other,
        }
    }

    /// The event's name in `api` (events without a beta name have the GA one).
    pub fn name(self, api: Api) -> &'static str {
        let beta = api == Api::Beta;
        match self {
            EventKind::SessionCreated => "session.created",
            EventKind::SessionUpdated => "session.updated",
            EventKind::SpeechStarted => "input_audio_buffer.speech_started",
            EventKind::SpeechStopped => "input_audio_buffer.speech_stopped",
            EventKind::Committed => "input_audio_buffer.committed",
            EventKind::ResponseCreated => "response.created",
            EventKind::AudioDelta if beta => "response.audio.delta",
            EventKind::AudioDelta => "response.output_audio.delta",
            EventKind::AudioDone if beta => "response.audio.done",
            EventKind::AudioDone => "response.output_audio.done",
            EventKind::TranscriptDelta if beta => "response.audio_transcript.delta",
            EventKind::TranscriptDelta => "response.output_audio_transcript.delta",
            EventKind::TranscriptDone if beta => "response.audio_transcript.done",
            EventKind::TranscriptDone => "response.output_audio_transcript.done",
            EventKind::InputTranscriptionDelta => {
                "conversation.item.input_audio_transcription.delta"
            }
            EventKind::InputTranscriptionCompleted => {
                "conversation.item.input_audio_transcription.completed"
            }
            EventKind::InputTranscriptionFailed => {
                "conversation.item.input_audio_transcription.failed"
            }
            EventKind::FunctionCallArgumentsDone => "response.function_call_arguments.done",
            EventKind::ResponseDone => "response.done",
            EventKind::ItemTruncated => "conversation.item.truncated",
            EventKind::RateLimitsUpdated => "rate_limits.updated",
            EventKind::Error => "error",
            EventKind::Other => "",
        }
    }
}

/// `error.error` (`realtime_error.py`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    #[serde(default, rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    #[serde(default)]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub param: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_id: Option<String>,
}

/// `response.usage`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
}

/// `response.status_details`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StatusDetails {
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
}

/// The response object of `response.created` / `response.done` (`realtime_response.py`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Response {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `in_progress`, `completed`, `cancelled`, `failed`, `incomplete`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_details: Option<StatusDetails>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Output items, kept as JSON (baton reads function calls from their own events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Vec<Value>>,
}

/// Any server event: its `type` and the union of the fields baton reads. Fields of other events
/// are ignored.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerEvent {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_item_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_index: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_index: Option<u32>,
    /// Base64 audio (audio deltas) or text (transcript deltas).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcript: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio_start_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio_end_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Function-call arguments: JSON text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
    /// `session.created` / `session.updated`: the effective configuration (either dialect).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<Response>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

impl ServerEvent {
    pub fn event_kind(&self) -> EventKind {
        EventKind::parse(&self.kind)
    }
}
