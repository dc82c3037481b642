//! The OpenAI mock's session configuration: the full default session `session.created` shows,
//! the partial merge of each `session.update` (only fields present change; `audio`, `audio.input`
//! and `audio.output` merge key by key; `null` clears), the checks the service makes (formats,
//! `voice` fixed once the model has spoken, `model` never changes, the session `type`), and the
//! parsed view the engine acts on. Both dialects: the GA nested shape and the flat beta shape.

use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::model::openai::wire::{Api, AudioFormat};

/// A refused `session.update`: becomes an `error` event; the session stays as it was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub code: &'static str,
    pub message: String,
    pub param: Option<String>,
}

impl Refusal {
    pub fn invalid(param: &str, message: impl Into<String>) -> Self {
        Refusal {
            code: "invalid_value",
            message: message.into(),
            param: Some(param.to_owned()),
        }
    }
}

/// Server VAD as configured.
#[derive(Clone, Debug, PartialEq)]
pub struct Vad {
    pub silence: Duration,
    pub create_response: bool,
    pub interrupt_response: bool,
}

/// What the engine needs from the effective session.
#[derive(Clone, Debug, PartialEq)]
pub struct View {
    pub input: AudioFormat,
    pub output: AudioFormat,
    /// `None`: manual turns.
    pub vad: Option<Vad>,
    pub transcription: bool,
    pub voice: Option<Value>,
    pub tools: Vec<String>,
    pub audio_out: bool,
}

/// The effective session configuration of one connection.
#[derive(Clone, Debug)]
pub struct SessionState {
    api: Api,
    session: Value,
    view: View,
}

/// Default instructions, as `session.created` shows them.
pub const DEFAULT_INSTRUCTIONS: &str = "Your knowledge cutoff is 2023-10. You are a helpful, witty, and friendly AI. Act like a human, but remember that you aren't a human and that you can't do human things in the real world.";

fn default_vad() -> Value {
    json!({"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300,
           "silence_duration_ms": 500, "idle_timeout_ms": null, "create_response": true,
           "interrupt_response": true})
}

impl SessionState {
    /// The session as `session.created` shows it for a connection to `model`.
    pub fn new(api: Api, model: &str, id: &str, expires_at: u64) -> Self {
        let session = match api {
            Api::Ga => json!({
                "type": "realtime", "object": "realtime.session", "id": id, "model": model,
                "output_modalities": ["audio"], "instructions": DEFAULT_INSTRUCTIONS,
                "tools": [], "tool_choice": "auto", "max_output_tokens": "inf",
                "tracing": null, "truncation": "auto", "prompt": null, "include": null,
                "expires_at": expires_at,
                "audio": {
                    "input": {"format": {"type": "audio/pcm", "rate": 24000}, "transcription": null,
                              "noise_reduction": null, "turn_detection": default_vad()},
                    "output": {"format": {"type": "audio/pcm", "rate": 24000}, "voice": "alloy",
                               "speed": 1.0}
                }
            }),
            Api::Beta => json!({
                "object": "realtime.session", "id": id, "model": model,
                "modalities": ["text", "audio"], "instructions": DEFAULT_INSTRUCTIONS,
                "voice": "alloy", "input_audio_format": "pcm16", "output_audio_format": "pcm16",
                "input_audio_transcription": null, "input_audio_noise_reduction": null,
                "turn_detection": default_vad(), "tools": [], "tool_choice": "auto",
                "temperature": 0.8, "max_response_output_tokens": "inf", "speed": 1.0,
                "tracing": null, "expires_at": expires_at
            }),
        };
        let mut st = SessionState {
            api,
            view: View {
                input: AudioFormat::PCM24K,
                output: AudioFormat::PCM24K,
                vad: None,
                transcription: false,
                voice: None,
                tools: Vec::new(),
                audio_out: true,
            },
            session: Value::Null,
        };
        // The defaults above always parse.
        if let Ok(view) = parse(api, &session) {
            st.view = view;
        }
        st.session = session;
        st
    }

    /// The full effective session (`session.created` / `session.updated`).
    pub fn session(&self) -> &Value {
        &self.session
    }

    pub fn view(&self) -> &View {
        &self.view
    }

    /// Applies a `session.update`'s session object. `spoke`: the model has produced audio.
    pub fn update(&mut self, update: &Value, spoke: bool) -> Result<(), Refusal> {
        let Some(update) = update.as_object() else {
            return Err(Refusal::invalid("session", "session must be an object"));
        };
        if self.api == Api::Ga {
            match update.get("type").and_then(Value::as_str) {
                Some("realtime") => {}
                Some(other) => {
                    return Err(Refusal::invalid(
                        "session.type",
                        format!(
                            "Invalid value: '{other}'. This connection is a 'realtime' session."
                        ),
                    ));
                }
                None => {
                    return Err(Refusal {
                        code: "missing_required_parameter",
                        message: "Missing required parameter: 'session.type'.".into(),
                        param: Some("session.type".into()),
                    });
                }
            }
        }
        let mut next = self.session.clone();
        merge(&mut next, update, 0);
        if next.get("model") != self.session.get("model") {
            return Err(Refusal::invalid(
                "session.model",
                "The model of a session cannot be changed.",
            ));
        }
        let view = parse(self.api, &next)?;
        if spoke && view.voice != self.view.voice {
            return Err(Refusal {
                code: "cannot_update_voice",
                message: "Cannot update a conversation's voice if assistant audio is present."
                    .into(),
                param: Some(voice_param(self.api).into()),
            });
        }
        self.session = next;
        self.view = view;
        Ok(())
    }
}

fn voice_param(api: Api) -> &'static str {
    match api {
        Api::Ga => "session.audio.output.voice",
        Api::Beta => "session.voice",
    }
}

/// Merges `update` into `base`: objects at `audio` (depth 0) and `input`/`output` (depth 1) merge
/// key by key, a replaced `turn_detection` gets the service defaults for fields it leaves out,
/// everything else is replaced.
fn merge(base: &mut Value, update: &Map<String, Value>, depth: usize) {
    if !base.is_object() {
        *base = Value::Object(Map::new());
    }
    let Some(obj) = base.as_object_mut() else {
        return;
    };
    for (k, v) in update {
        let nested = match (depth, k.as_str()) {
            (0, "audio") | (1, "input" | "output") => v.as_object(),
            _ => None,
        };
        match nested {
            Some(inner) => merge(
                obj.entry(k.clone()).or_insert(Value::Null),
                inner,
                depth + 1,
            ),
            None if k == "turn_detection"
                && v.get("type").and_then(Value::as_str) == Some("server_vad") =>
            {
                let mut td = default_vad();
                if let (Some(td), Some(given)) = (td.as_object_mut(), v.as_object()) {
                    for (tk, tv) in given {
                        td.insert(tk.clone(), tv.clone());
                    }
                }
                obj.insert(k.clone(), td);
            }
            None => {
                obj.insert(k.clone(), v.clone());
            }
        }
    }
}

/// Reads and checks the effective session.
fn parse(api: Api, s: &Value) -> Result<View, Refusal> {
    let (input, output, td, transcription, voice, modalities, td_param) = match api {
        Api::Ga => (
            ga_format(
                s.pointer("/audio/input/format"),
                "session.audio.input.format",
            )?,
            ga_format(
                s.pointer("/audio/output/format"),
                "session.audio.output.format",
            )?,
            s.pointer("/audio/input/turn_detection"),
            s.pointer("/audio/input/transcription"),
            s.pointer("/audio/output/voice").cloned(),
            s.get("output_modalities"),
            "session.audio.input.turn_detection",
        ),
        Api::Beta => (
            beta_format(s.get("input_audio_format"), "session.input_audio_format")?,
            beta_format(s.get("output_audio_format"), "session.output_audio_format")?,
            s.get("turn_detection"),
            s.get("input_audio_transcription"),
            s.get("voice").cloned(),
            s.get("modalities"),
            "session.turn_detection",
        ),
    };
    let modalities: Vec<&str> = modalities
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let audio_out = match (api, modalities.as_slice()) {
        (Api::Ga, ["audio"]) | (Api::Beta, ["text", "audio"] | ["audio", "text"]) => true,
        (_, ["text"]) => false,
        _ => {
            return Err(Refusal::invalid(
                "session.output_modalities",
                format!(
                    "Invalid modalities: {modalities:?}. Supported combinations are: ['text'] and ['audio']."
                ),
            ));
        }
    };
    let vad = match td {
        None | Some(Value::Null) => None,
        Some(td) => Some(vad(td, td_param)?),
    };
    let tools = s
        .get("tools")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|t| t.get("name").and_then(Value::as_str).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    Ok(View {
        input,
        output,
        vad,
        transcription: transcription.is_some_and(|t| !t.is_null()),
        voice,
        tools,
        audio_out,
    })
}

fn vad(td: &Value, param: &str) -> Result<Vad, Refusal> {
    let kind = td.get("type").and_then(Value::as_str).unwrap_or("");
    let silence = match kind {
        "server_vad" => td
            .get("silence_duration_ms")
            .and_then(Value::as_u64)
            .unwrap_or(500),
        // Semantic VAD ends turns by meaning; the mock uses a medium silence window.
        "semantic_vad" => 800,
        other => {
            return Err(Refusal::invalid(
                &format!("{param}.type"),
                format!(
                    "Invalid value: '{other}'. Supported values are: 'server_vad' and 'semantic_vad'."
                ),
            ));
        }
    };
    let flag = |k: &str| td.get(k).and_then(Value::as_bool).unwrap_or(true);
    Ok(Vad {
        silence: Duration::from_millis(silence),
        create_response: flag("create_response"),
        interrupt_response: flag("interrupt_response"),
    })
}

fn ga_format(f: Option<&Value>, param: &str) -> Result<AudioFormat, Refusal> {
    let Some(f) = f else {
        return Ok(AudioFormat::PCM24K);
    };
    match f.get("type").and_then(Value::as_str) {
        Some("audio/pcm") => match f.get("rate") {
            None | Some(Value::Null) => Ok(AudioFormat::PCM24K),
            Some(r) if r.as_u64() == Some(24_000) => Ok(AudioFormat::PCM24K),
            Some(r) => Err(Refusal::invalid(
                &format!("{param}.rate"),
                format!(
                    "Invalid value: {r}. Only a 24000 Hz sample rate is supported for audio/pcm."
                ),
            )),
        },
        Some("audio/pcmu") => Ok(AudioFormat::Pcmu),
        Some("audio/pcma") => Ok(AudioFormat::Pcma),
        other => Err(Refusal::invalid(
            &format!("{param}.type"),
            format!(
                "Invalid value: {other:?}. Supported values are: 'audio/pcm', 'audio/pcmu', and 'audio/pcma'."
            ),
        )),
    }
}

fn beta_format(f: Option<&Value>, param: &str) -> Result<AudioFormat, Refusal> {
    match f.and_then(Value::as_str) {
        None => Ok(AudioFormat::PCM24K),
        Some(name) => match AudioFormat::from_beta_name(name) {
            AudioFormat::Other => Err(Refusal::invalid(
                param,
                format!(
                    "Invalid value: '{name}'. Supported values are: 'pcm16', 'g711_ulaw', and 'g711_alaw'."
                ),
            )),
            f => Ok(f),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ga() -> SessionState {
        SessionState::new(Api::Ga, "gpt-realtime", "sess_1", 0)
    }

    #[test]
    fn partial_updates_merge_and_keep_the_rest() {
        let mut s = ga();
        assert_eq!(
            s.view().vad.as_ref().map(|v| v.silence),
            Some(Duration::from_millis(500))
        );
        s.update(
            &json!({"type": "realtime", "instructions": "Be brief.",
                    "audio": {"input": {"format": {"type": "audio/pcmu"},
                                        "turn_detection": {"type": "server_vad", "silence_duration_ms": 300}}}}),
            false,
        )
        .unwrap();
        assert_eq!(s.session()["instructions"], "Be brief.");
        assert_eq!(s.view().input, AudioFormat::Pcmu);
        assert_eq!(s.view().output, AudioFormat::PCM24K, "output untouched");
        assert_eq!(s.session()["audio"]["output"]["voice"], "alloy");
        assert_eq!(
            s.session()["audio"]["input"]["turn_detection"]["threshold"],
            0.5
        );
        assert_eq!(
            s.view().vad.as_ref().map(|v| v.silence),
            Some(Duration::from_millis(300))
        );
        s.update(
            &json!({"type": "realtime", "audio": {"input": {"turn_detection": null}}}),
            false,
        )
        .unwrap();
        assert_eq!(s.view().vad, None);
    }

    #[test]
    fn refusals_leave_the_session_unchanged() {
        let mut s = ga();
        let before = s.session().clone();
        let cases = [
            (
                json!({"type": "realtime", "audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}}),
                "rate",
            ),
            (
                json!({"type": "realtime", "audio": {"output": {"format": {"type": "audio/opus"}}}}),
                "format.type",
            ),
            (
                json!({"type": "realtime", "model": "gpt-other"}),
                "session.model",
            ),
            (json!({"type": "transcription"}), "session.type"),
            (json!({"instructions": "x"}), "session.type"),
            (
                json!({"type": "realtime", "output_modalities": ["text", "audio"]}),
                "output_modalities",
            ),
        ];
        for (update, param) in cases {
            let r = s.update(&update, false).unwrap_err();
            assert!(
                r.param.as_deref().unwrap_or("").contains(param),
                "{update}: {r:?}"
            );
        }
        assert_eq!(s.session(), &before);
        // The voice may change until the model has spoken.
        let voice = json!({"type": "realtime", "audio": {"output": {"voice": "marin"}}});
        s.update(&voice, false).unwrap();
        let r = s
            .update(
                &json!({"type": "realtime", "audio": {"output": {"voice": "cedar"}}}),
                true,
            )
            .unwrap_err();
        assert_eq!(r.code, "cannot_update_voice");
        s.update(&voice, true).unwrap();
    }

    #[test]
    fn beta_shape() {
        let mut s = SessionState::new(Api::Beta, "gpt-4o-realtime-preview", "sess_2", 0);
        s.update(&json!({"input_audio_format": "g711_ulaw", "input_audio_transcription": {"model": "whisper-1"}}), false)
            .unwrap();
        assert_eq!(s.view().input, AudioFormat::Pcmu);
        assert!(s.view().transcription);
        let r = s
            .update(&json!({"output_audio_format": "opus"}), false)
            .unwrap_err();
        assert_eq!(r.param.as_deref(), Some("session.output_audio_format"));
    }
}
