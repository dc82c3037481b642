//! Gemini Live wire types: serde mirrors of the google-genai SDK's `LiveClientMessage` and
//! `LiveServerMessage` JSON (camelCase, only fields the SDK has). Client messages are an
//! externally tagged enum (`{"setup":{…}}`); a server message is a flat struct of options because
//! one frame may carry several parts. Unknown server fields are ignored; unknown enum values
//! decode to an `Other` variant instead of failing.

use serde::{Deserialize, Serialize};
use serde_json::Value;

// ---------------------------------------------------------------------------------------------
// Shared content types
// ---------------------------------------------------------------------------------------------

/// Inline bytes with a MIME type; `data` is base64 on the wire.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Blob {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
}

/// A function call requested by the model.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FunctionCall {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
}

/// Scheduling of a NON_BLOCKING function's response.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum FunctionResponseScheduling {
    SchedulingUnspecified,
    Silent,
    WhenIdle,
    Interrupt,
    #[serde(other)]
    Other,
}

/// The client's answer to a [`FunctionCall`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FunctionResponse {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub will_continue: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling: Option<FunctionResponseScheduling>,
}

/// One part of a [`Content`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Part {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline_data: Option<Blob>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function_call: Option<FunctionCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function_response: Option<FunctionResponse>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thought: Option<bool>,
}

impl Part {
    pub fn text(t: impl Into<String>) -> Self {
        Part {
            text: Some(t.into()),
            ..Part::default()
        }
    }
}

/// A turn of content: `role` is `user` or `model`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Content {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default)]
    pub parts: Vec<Part>,
}

impl Content {
    pub fn text(role: Option<&str>, t: impl Into<String>) -> Self {
        Content {
            role: role.map(str::to_owned),
            parts: vec![Part::text(t)],
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Client → server
// ---------------------------------------------------------------------------------------------

/// One client message: exactly one top-level key on the wire. `setup` is sent once per session,
/// so its size is not worth boxing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ClientMessage {
    Setup(Setup),
    ClientContent(ClientContent),
    RealtimeInput(RealtimeInput),
    ToolResponse(ToolResponse),
    ContextUpdate(ContextUpdate),
}

/// `setup`: the first message of a session. Options without a typed field here (e.g. `proactivity`)
/// are carried as raw JSON so nothing the caller configured is lost.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Setup {
    #[serde(default)]
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation_config: Option<GenerationConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_instruction: Option<Content>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub realtime_input_config: Option<RealtimeInputConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_resumption: Option<SessionResumptionConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window_compression: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_audio_transcription: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_audio_transcription: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proactivity: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_config: Option<HistoryConfig>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GenerationConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_modalities: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speech_config: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking_config: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_resolution: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RealtimeInputConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub automatic_activity_detection: Option<AutomaticActivityDetection>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activity_handling: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_coverage: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AutomaticActivityDetection {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_of_speech_sensitivity: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_of_speech_sensitivity: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_padding_ms: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub silence_duration_ms: Option<u32>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionResumptionConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transparent: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_history_in_client_content: Option<bool>,
}

/// `clientContent`: ordered turns appended to the history.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientContent {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turns: Option<Vec<Content>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_complete: Option<bool>,
}

/// `realtimeInput`: exactly one field per message.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RealtimeInput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_chunks: Option<Vec<Blob>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio: Option<Blob>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio_stream_end: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub video: Option<Blob>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activity_start: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activity_end: Option<Value>,
}

impl RealtimeInput {
    /// How many of the oneof-like fields are set (the protocol allows exactly one).
    pub fn fields_set(&self) -> usize {
        [
            self.media_chunks.is_some(),
            self.audio.is_some(),
            self.audio_stream_end.is_some(),
            self.video.is_some(),
            self.text.is_some(),
            self.activity_start.is_some(),
            self.activity_end.is_some(),
        ]
        .into_iter()
        .filter(|&b| b)
        .count()
    }
}

/// `toolResponse`: answers to function calls, matched by id.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResponse {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function_responses: Option<Vec<FunctionResponse>>,
}

/// `contextUpdate`: replaces the system instruction and/or tools mid-session, in order, no turn.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextUpdate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_instruction: Option<Content>,
    /// Wrapped on the wire: `{"tools": {"tools": [...]}}`; present (even empty) replaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<ToolsWrapper>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolsWrapper {
    #[serde(default)]
    pub tools: Vec<Value>,
}

// ---------------------------------------------------------------------------------------------
// Server → client
// ---------------------------------------------------------------------------------------------

/// One server message. Several parts may be present at once; process all of them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerMessage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup_complete: Option<SetupComplete>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_content: Option<ServerContent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call: Option<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_cancellation: Option<ToolCallCancellation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub go_away: Option<GoAway>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_resumption_update: Option<SessionResumptionUpdate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_metadata: Option<UsageMetadata>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SetupComplete {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerContent {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_turn: Option<Content>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_complete: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation_complete: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_transcription: Option<Transcription>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_transcription: Option<Transcription>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for_input: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_complete_reason: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Transcription {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCall {
    #[serde(default)]
    pub function_calls: Vec<FunctionCall>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallCancellation {
    #[serde(default)]
    pub ids: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GoAway {
    /// Proto `Duration` JSON, e.g. `"50s"` or `"0.5s"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_left: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionResumptionUpdate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_handle: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumable: Option<bool>,
    /// int64 as a JSON string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_consumed_client_message_index: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageMetadata {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_token_count: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_token_count: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidates_token_count: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_token_count: Option<u64>,
}

/// Parses a proto `Duration` JSON string (`"50s"`, `"1.5s"`).
pub fn parse_duration(s: &str) -> Option<std::time::Duration> {
    let secs: f64 = s.strip_suffix('s')?.parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| std::time::Duration::from_secs_f64(secs))
}

/// Formats a proto `Duration` JSON string.
pub fn format_duration(d: std::time::Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{:.3}s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn client_messages_have_one_camel_case_key() {
        let m = ClientMessage::RealtimeInput(RealtimeInput {
            audio: Some(Blob {
                mime_type: Some("audio/pcm;rate=16000".into()),
                data: Some("AAA=".into()),
            }),
            ..Default::default()
        });
        assert_eq!(
            serde_json::to_value(&m).unwrap(),
            json!({"realtimeInput":{"audio":{"mimeType":"audio/pcm;rate=16000","data":"AAA="}}})
        );
        let cu = ClientMessage::ContextUpdate(ContextUpdate {
            system_instruction: Some(Content::text(None, "x")),
            tools: Some(ToolsWrapper { tools: vec![] }),
        });
        assert_eq!(
            serde_json::to_value(&cu).unwrap(),
            json!({"contextUpdate":{"systemInstruction":{"parts":[{"text":"x"}]},"tools":{"tools":[]}}})
        );
    }

    #[test]
    fn server_message_tolerates_unknown_fields_and_values() {
        let m: ServerMessage = serde_json::from_value(json!({
            "serverContent": {"modelTurn": {"parts": [{"inlineData": {"mimeType": "audio/pcm;rate=24000", "data": "AAA="}}]},
                              "somethingNew": 1, "turnComplete": true},
            "usageMetadata": {"totalTokenCount": 5, "trafficType": "X"},
            "brandNewKind": {}
        }))
        .unwrap();
        let sc = m.server_content.unwrap();
        assert_eq!(sc.turn_complete, Some(true));
        assert_eq!(m.usage_metadata.unwrap().total_token_count, Some(5));
        let fr: FunctionResponse =
            serde_json::from_value(json!({"scheduling": "SOMETHING_ELSE"})).unwrap();
        assert_eq!(fr.scheduling, Some(FunctionResponseScheduling::Other));
    }

    #[test]
    fn durations() {
        assert_eq!(
            parse_duration("50s"),
            Some(std::time::Duration::from_secs(50))
        );
        assert_eq!(
            parse_duration("0.5s"),
            Some(std::time::Duration::from_millis(500))
        );
        assert_eq!(parse_duration("5"), None);
        assert_eq!(parse_duration("-1s"), None);
        assert_eq!(format_duration(std::time::Duration::from_secs(50)), "50s");
        assert_eq!(
            format_duration(std::time::Duration::from_millis(1500)),
            "1.500s"
        );
    }
}
