//! baton's internal model vocabulary (the Gemini Live client messages the call and the
//! orchestrator speak) mapped onto OpenAI Realtime client events. Pure functions: no socket, no
//! clock; the session ([`super::session`]) sends what they return.
//!
//! | baton message | OpenAI Realtime |
//! |---|---|
//! | session settings (`setup`) | the first `session.update` ([`session_config`]); Gemini function declarations become function tools; a voice that is not an OpenAI voice is left to the service's default |
//! | `contextUpdate{systemInstruction, tools}` | partial `session.update` (instructions, tools) — never the voice, which is fixed once the model has spoken |
//! | `clientContent{turns}` | one `conversation.item.create` per turn (`user` → `input_text`, `model` → assistant text, `system` → system text); `turnComplete: true` asks for a response. Without it the turns are context, not a turn the model owes an answer: user turns become `system` items. The first one after a session opened with history (`history_in_client_content`) is that history: items with their roles, no response |
//! | `toolResponse` | a `function_call_output` per function response, then one response (none when every answer is `scheduling: SILENT`: it only adds to the conversation) |
//! | `realtimeInput.text` | a user text item and a response |
//! | `realtimeInput` audio | nothing: the call encodes caller audio for the session's protocol and rate itself ([`crate::model::handle::Protocol`]) |
//!
//! "A response" is [`Step::Respond`], not a `response.create`: the service refuses one while a
//! response is in progress (`conversation_already_has_active_response`), so the session decides
//! when it may go out (at once, or when the response in progress is done).

use serde_json::Value;

use super::setup::SessionConfig;
use super::wire::{Api, AudioFormat, ClientEvent, ContentPart, FunctionTool, Item, TurnDetection};
use crate::model::gemini::session::SessionConfig as BatonConfig;
use crate::model::gemini::wire::{
    ClientContent, ClientMessage, Content, FunctionResponse, FunctionResponseScheduling,
};

/// The built-in OpenAI Realtime voices.
pub const VOICES: [&str; 10] = [
    "alloy", "ash", "ballad", "coral", "echo", "sage", "shimmer", "verse", "marin", "cedar",
];

/// One thing to do on the OpenAI session for a baton message.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Send this client event now.
    Send(Box<ClientEvent>),
    /// Ask for a response (`response.create`) as soon as none is in progress.
    Respond,
}

/// What the translation remembers between messages of one session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Translator {
    pub api: Api,
    /// The next `clientContent` is the session's initial history.
    pub history_pending: bool,
}

impl Translator {
    pub fn new(api: Api, history_pending: bool) -> Self {
        Translator {
            api,
            history_pending,
        }
    }

    /// The steps that carry `msg` to an OpenAI Realtime session.
    pub fn translate(&mut self, msg: &ClientMessage) -> Vec<Step> {
        match msg {
            ClientMessage::Setup(s) => {
                let instructions = s.system_instruction.as_ref().map(content_text);
                let tools = s.tools.as_deref().map(function_tools);
                vec![Step::Send(Box::new(super::setup::update_event(
                    self.api,
                    instructions.as_deref(),
                    tools.as_deref(),
                )))]
            }
            ClientMessage::ContextUpdate(cu) => {
                let instructions = cu.system_instruction.as_ref().map(content_text);
                let tools = cu.tools.as_ref().map(|t| function_tools(&t.tools));
                if instructions.is_none() && tools.is_none() {
                    return Vec::new();
                }
                vec![Step::Send(Box::new(super::setup::update_event(
                    self.api,
                    instructions.as_deref(),
                    tools.as_deref(),
                )))]
            }
            ClientMessage::ClientContent(cc) => self.client_content(cc),
            ClientMessage::ToolResponse(tr) => {
                let responses = tr.function_responses.as_deref().unwrap_or_default();
                let mut steps: Vec<Step> = responses
                    .iter()
                    .filter_map(function_output)
                    .map(|item| Step::Send(Box::new(create(item))))
                    .collect();
                // `SILENT` answers add to the conversation only: no response for them.
                let quiet = responses
                    .iter()
                    .all(|r| r.scheduling == Some(FunctionResponseScheduling::Silent));
                if !steps.is_empty() && !quiet {
                    steps.push(Step::Respond);
                }
                steps
            }
            // Audio never travels as a message here: the call encodes it for the session's
            // wire and rate (`Wire::encode_audio`); activity signals have no equivalent
            // under server VAD.
            ClientMessage::RealtimeInput(ri) => match ri.text.as_deref() {
                Some(text) if !text.trim().is_empty() => {
                    vec![
                        Step::Send(Box::new(create(Item::text("user", text)))),
                        Step::Respond,
                    ]
                }
                _ => Vec::new(),
            },
        }
    }

    fn client_content(&mut self, cc: &ClientContent) -> Vec<Step> {
        let history = std::mem::take(&mut self.history_pending);
        let complete = cc.turn_complete == Some(true);
        // Context that must not make the model speak (a sidecar's notes) is a `system` item:
        // a user item would be a turn the model owes an answer.
        let context = !history && !complete;
        let mut steps: Vec<Step> = cc
            .turns
            .iter()
            .flatten()
            .filter_map(|t| {
                if context && matches!(t.role.as_deref(), None | Some("user")) {
                    let text = content_text(t);
                    (!text.trim().is_empty()).then(|| Item::text("system", text))
                } else {
                    turn_item(self.api, t)
                }
            })
            .map(|item| Step::Send(Box::new(create(item))))
            .collect();
        if !history && complete {
            steps.push(Step::Respond);
        }
        steps
    }
}

fn create(item: Item) -> ClientEvent {
    ClientEvent::ConversationItemCreate {
        event_id: None,
        previous_item_id: None,
        item,
    }
}

/// The text parts of a content, joined.
fn content_text(c: &Content) -> String {
    let texts: Vec<&str> = c.parts.iter().filter_map(|p| p.text.as_deref()).collect();
    texts.join("\n")
}

/// A turn as a conversation item: `user` (or no role) → user `input_text`; `model` → assistant
/// text (`output_text`, beta `text`); `system` → system `input_text`. A turn without text is
/// skipped (assistant audio items cannot be created).
fn turn_item(api: Api, t: &Content) -> Option<Item> {
    let text = content_text(t);
    if text.trim().is_empty() {
        return None;
    }
    Some(match t.role.as_deref() {
        Some("model" | "assistant") => Item::Message {
            id: None,
            role: "assistant".into(),
            content: vec![ContentPart {
                kind: match api {
                    Api::Ga => "output_text",
                    Api::Beta => "text",
                }
                .into(),
                text: Some(text),
                ..Default::default()
            }],
            status: None,
        },
        Some("system") => Item::text("system", text),
        _ => Item::text("user", text),
    })
}

/// A function response as a `function_call_output` (the output is the response's JSON, or its
/// text when it is a plain string); one without an id names no call and is skipped.
fn function_output(fr: &FunctionResponse) -> Option<Item> {
    let id = fr.id.as_deref().filter(|i| !i.is_empty())?;
    let output = match &fr.response {
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => "{}".to_owned(),
    };
    Some(Item::function_output(id, output))
}

/// Gemini `tools` (`[{"functionDeclarations":[…]}]`) as OpenAI function tools. The arguments'
/// schema is `parametersJsonSchema` as is, or `parameters` (an OpenAPI subset) with its type
/// names in lower case; tools other than function declarations (search, code execution) have no
/// OpenAI Realtime equivalent and are left out.
pub fn function_tools(tools: &[Value]) -> Vec<FunctionTool> {
    let mut out = Vec::new();
    for decl in tools
        .iter()
        .filter_map(|t| {
            t.get("functionDeclarations")
                .or(t.get("function_declarations"))
        })
        .filter_map(Value::as_array)
        .flatten()
    {
        let Some(name) = decl.get("name").and_then(Value::as_str) else {
            continue;
        };
        let description = decl
            .get("description")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let parameters = decl
            .get("parametersJsonSchema")
            .or(decl.get("parameters_json_schema"))
            .cloned()
            .or_else(|| decl.get("parameters").map(lower_types))
            .unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}}));
        out.push(FunctionTool::new(name, description, parameters));
    }
    out
}

/// An OpenAPI schema with `"type": "OBJECT"` etc. as JSON Schema's lower-case names.
fn lower_types(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| match (k.as_str(), v) {
                    ("type", Value::String(s)) => (k.clone(), Value::String(s.to_lowercase())),
                    _ => (k.clone(), lower_types(v)),
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(lower_types).collect()),
        other => other.clone(),
    }
}

/// An OpenAI voice name, if `voice` is one (Gemini voice names such as `Kore` are not).
pub fn openai_voice(voice: &str) -> Option<String> {
    let v = voice.trim().to_lowercase();
    VOICES.contains(&v.as_str()).then_some(v)
}

/// The OpenAI session settings for baton's session settings: the instruction, the tools, the
/// voice (an OpenAI one; else the service's default), server VAD with the configured silence,
/// transcription of the caller; `model` is the OpenAI model (the Gemini model name does not
/// apply). Resumption settings have no equivalent (a new connection is a new conversation).
pub fn session_config(cfg: &BatonConfig, model: &str) -> SessionConfig {
    SessionConfig {
        model: model.to_owned(),
        instructions: cfg.system_instruction.clone(),
        tools: function_tools(&cfg.tools),
        voice: cfg.voice.as_deref().and_then(openai_voice),
        transcription: cfg
            .transcription
            .then(|| SessionConfig::default().transcription)
            .flatten(),
        turn_detection: Some(TurnDetection::server_vad(cfg.silence_duration_ms)),
        // A phone caller's own G.711 law both ways, else 24 kHz PCM.
        input_format: AudioFormat::of_law(cfg.phone_law),
        output_format: AudioFormat::of_law(cfg.phone_law),
        setup_timeout: cfg.setup_timeout,
        keepalive: cfg.keepalive,
    }
}

#[cfg(test)]
#[path = "translate_tests.rs"]
mod tests;
