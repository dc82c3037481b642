//! Pure encoding and decoding of OpenAI Realtime events: client events to JSON text, server
//! frames to [`ModelEvent`]s. No sockets, no clock. The uplink `input_audio_buffer.append` has a
//! hand-written fast path (checked against the serde form in tests), built 50 times a second.
//!
//! Unlike Gemini, a server event alone does not say everything baton needs: which audio format
//! the deltas are in (the session's), whether a response is in progress (so a caller's
//! `speech_started` is a barge-in), which assistant item is playing and how much of its audio was
//! produced (for `conversation.item.truncate`). [`Decoder`] keeps that state.
//!
//! Mapping (one server event → events, in this order):
//!
//! | server event | [`ModelEvent`]s |
//! |---|---|
//! | first `session.updated` | `SetupComplete` |
//! | `input_audio_buffer.speech_started` while a response is in progress, or after model audio since the caller last spoke, unless the session's VAD has `interrupt_response: false` (the client then decides) | `Interrupted` |
//! | `response.output_audio.delta` | `Audio` (24 kHz PCM, or G.711 decoded to 8 kHz PCM) |
//! | `response.output_audio_transcript.delta` / `.done` | `OutputTranscript` (`.done` carries the full text only if no delta did) |
//! | `conversation.item.input_audio_transcription.delta` / `.completed` | `InputTranscript` (likewise) |
//! | `response.function_call_arguments.done` | `ToolCall` (one call; `id` is the `call_id`) |
//! | `response.done` completed / incomplete | `GenerationComplete`, `TurnComplete`, `Usage` |
//! | `response.done` cancelled | `Interrupted` (unless already reported), `TurnComplete`, `Usage` |
//! | `response.done` failed | `ProtocolError` (its status details), `TurnComplete`, `Usage` |
//! | `error` | `ProtocolError` naming the error's `code` |
//! | anything else (item bookkeeping, `rate_limits.updated`, unknown types) | nothing |

use std::collections::HashSet;

use crate::b64::{STANDARD, STANDARD_NO_PAD};
use base64::Engine;
use serde_json::Value;

use super::wire::{self, AudioFormat, ClientEvent, EventKind, ServerEvent};
use crate::model::decode::decode_object;
use crate::model::{ModelEvent, ToolCallRequest};

pub use crate::model::decode::DecodeError;

/// Largest server frame accepted (audio deltas are a few KiB; `session.updated` echoes tools).
pub const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// Serialises a client event as JSON text.
pub fn encode(ev: &ClientEvent) -> String {
    // These plain structs (string keys only, no custom Serialize) always serialise.
    serde_json::to_string(ev).unwrap_or_default()
}

/// Writes `{"type":"input_audio_buffer.append","audio":"…"}` for PCM16 LE samples into `out`
/// (cleared first), reusing its allocation; `scratch` holds the raw bytes. For a `audio/pcm`
/// session the samples must be 24 kHz.
pub fn encode_append_pcm16(samples: &[i16], scratch: &mut Vec<u8>, out: &mut String) {
    scratch.clear();
    crate::audio::push_pcm16le(samples, scratch);
    encode_append_bytes(scratch, out);
}

/// Writes `{"type":"input_audio_buffer.append","audio":"…"}` for audio already in the session's
/// input format (G.711 codes from a phone leg go through untouched).
pub fn encode_append_bytes(bytes: &[u8], out: &mut String) {
    out.clear();
    out.push_str(r#"{"type":"input_audio_buffer.append","audio":""#);
    STANDARD.encode_string(bytes, out);
    out.push_str(r#""}"#);
}

/// Parses one server frame (the service sends text frames; binary is accepted too).
pub fn decode(frame: &[u8]) -> Result<ServerEvent, DecodeError> {
    decode_object(frame, MAX_FRAME_BYTES)
}

/// Decodes one base64 audio delta in `format` into PCM16 samples appended to `out`; returns the
/// sample rate.
pub fn decode_audio(data: &str, format: &AudioFormat, out: &mut Vec<i16>) -> Result<u32, String> {
    let bytes = STANDARD
        .decode(data)
        .or_else(|_| STANDARD_NO_PAD.decode(data))
        .map_err(|e| format!("audio is not base64: {e}"))?;
    match format {
        AudioFormat::Pcm { .. } => {
            if bytes.len() % 2 != 0 {
                return Err(format!(
                    "audio has an odd byte count ({}) for PCM16",
                    bytes.len()
                ));
            }
            out.extend(
                bytes
                    .chunks_exact(2)
                    .map(|b| i16::from_le_bytes([b[0], b[1]])),
            );
            Ok(24_000)
        }
        AudioFormat::Pcmu => {
            crate::audio::g711::decode_ulaw(&bytes, out);
            Ok(8_000)
        }
        AudioFormat::Pcma => {
            crate::audio::g711::decode_alaw(&bytes, out);
            Ok(8_000)
        }
        AudioFormat::Other => Err("the session's output format is not one baton knows".into()),
    }
}

/// Whether the session's VAD cancels responses on caller speech (`interrupt_response`, default
/// true), in either dialect (`None`: not stated).
pub fn server_interrupts(session: &Value) -> Option<bool> {
    let td = session
        .pointer("/audio/input/turn_detection")
        .or_else(|| session.get("turn_detection"))?;
    if td.is_null() {
        return Some(false);
    }
    Some(
        td.get("interrupt_response")
            .and_then(Value::as_bool)
            .unwrap_or(true),
    )
}

/// The output format a `session.created` / `session.updated` session object declares, in either
/// dialect (`None`: not stated).
pub fn output_format(session: &Value) -> Option<AudioFormat> {
    stated_format(session, "/audio/output/format", "output_audio_format")
}

/// The caller-audio format a `session.updated` session object declares, in either dialect
/// (`None`: not stated).
pub fn input_format(session: &Value) -> Option<AudioFormat> {
    stated_format(session, "/audio/input/format", "input_audio_format")
}

/// A direction's format: the GA object at `ga`, else the beta name at `beta`.
fn stated_format(session: &Value, ga: &str, beta: &str) -> Option<AudioFormat> {
    if let Some(f) = session.pointer(ga) {
        return serde_json::from_value(f.clone()).ok();
    }
    session
        .get(beta)
        .and_then(Value::as_str)
        .map(AudioFormat::from_beta_name)
}

/// The assistant audio item being played: what `conversation.item.truncate` needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AudioItem {
    pub item_id: String,
    /// Samples of it received so far, at `rate`.
    pub samples: u64,
    pub rate: u32,
}

impl AudioItem {
    /// Audio of this item produced so far, in whole milliseconds.
    pub fn produced_ms(&self) -> u64 {
        self.samples * 1000 / u64::from(self.rate.max(1))
    }
}

/// The protocol state baton tracks across server events (see the module doc).
#[derive(Clone, Debug)]
pub struct Decoder {
    format: AudioFormat,
    /// Caller speech interrupts the model (server VAD with `interrupt_response`).
    server_interrupts: bool,
    setup_done: bool,
    /// The caller-audio format the first `session.updated` stated, if it stated one.
    confirmed_input: Option<AudioFormat>,
    /// The response in progress (between `response.created` and `response.done`).
    response: Option<String>,
    /// `Interrupted` was already reported for the response in progress.
    interrupted: bool,
    /// Model audio arrived since the caller last started speaking.
    audio_since_speech: bool,
    item: Option<AudioItem>,
    /// Items whose transcript arrived in deltas (their `.done`/`.completed` adds no text).
    input_deltas: HashSet<String>,
    output_deltas: HashSet<String>,
}

impl Decoder {
    /// `format`: the output format baton asked for (until the server states its own).
    pub fn new(format: AudioFormat) -> Self {
        Decoder {
            format,
            server_interrupts: true,
            setup_done: false,
            confirmed_input: None,
            response: None,
            interrupted: false,
            audio_since_speech: false,
            item: None,
            input_deltas: HashSet::new(),
            output_deltas: HashSet::new(),
        }
    }

    /// The response in progress, if any.
    pub fn active_response(&self) -> Option<&str> {
        self.response.as_deref()
    }

    /// The latest assistant item that carried audio.
    pub fn audio_item(&self) -> Option<&AudioItem> {
        self.item.as_ref()
    }

    /// The caller-audio format the service confirmed in answer to the setup (`None`: its
    /// `session.updated` did not say, or has not arrived).
    pub fn confirmed_input(&self) -> Option<&AudioFormat> {
        self.confirmed_input.as_ref()
    }

    /// The effective output format.
    pub fn format(&self) -> &AudioFormat {
        &self.format
    }

    /// What to send when the caller barged in having heard `heard_ms` of the current item (see
    /// [`barge_in`]).
    pub fn barge_in(&self, heard_ms: u64) -> Vec<ClientEvent> {
        barge_in(self.active_response(), self.audio_item(), heard_ms)
    }

    /// Turns one server event into model events appended to `out` (see the module doc).
    pub fn into_events(&mut self, ev: ServerEvent, out: &mut Vec<ModelEvent>) {
        match ev.event_kind() {
            EventKind::SessionCreated | EventKind::SessionUpdated => {
                if let Some(f) = ev.session.as_ref().and_then(output_format) {
                    self.format = f;
                }
                if let Some(i) = ev.session.as_ref().and_then(server_interrupts) {
                    self.server_interrupts = i;
                }
                if ev.event_kind() == EventKind::SessionUpdated && !self.setup_done {
                    self.setup_done = true;
                    self.confirmed_input = ev.session.as_ref().and_then(input_format);
                    out.push(ModelEvent::SetupComplete);
                }
            }
            EventKind::SpeechStarted => {
                let playing = self.response.is_some() || self.audio_since_speech;
                if playing && !self.interrupted && self.server_interrupts {
                    out.push(ModelEvent::Interrupted);
                    self.interrupted = self.response.is_some();
                }
                self.audio_since_speech = false;
            }
            EventKind::ResponseCreated => {
                self.response = Some(
                    ev.response
                        .and_then(|r| r.id)
                        .or(ev.response_id)
                        .unwrap_or_default(),
                );
                self.interrupted = false;
            }
            EventKind::AudioDelta => self.audio(ev, out),
            EventKind::TranscriptDelta => {
                let item = ev.item_id.unwrap_or_default();
                let text = ev.delta.unwrap_or_default();
                self.output_deltas.insert(item);
                out.push(ModelEvent::OutputTranscript {
                    text,
                    finished: false,
                });
            }
            EventKind::TranscriptDone => {
                let item = ev.item_id.unwrap_or_default();
                let had = self.output_deltas.remove(&item);
                out.push(ModelEvent::OutputTranscript {
                    text: if had {
                        String::new()
                    } else {
                        ev.transcript.unwrap_or_default()
                    },
                    finished: true,
                });
            }
            EventKind::InputTranscriptionDelta => {
                self.input_deltas.insert(ev.item_id.unwrap_or_default());
                out.push(ModelEvent::InputTranscript {
                    text: ev.delta.unwrap_or_default(),
                    finished: false,
                });
            }
            EventKind::InputTranscriptionCompleted => {
                let had = self.input_deltas.remove(&ev.item_id.unwrap_or_default());
                out.push(ModelEvent::InputTranscript {
                    text: if had {
                        String::new()
                    } else {
                        ev.transcript.unwrap_or_default()
                    },
                    finished: true,
                });
            }
            EventKind::InputTranscriptionFailed => {
                let why = ev.error.map(|e| e.message).unwrap_or_default();
                out.push(ModelEvent::ProtocolError(format!(
                    "input transcription of item {} failed: {why}",
                    ev.item_id.unwrap_or_default()
                )));
            }
            EventKind::FunctionCallArgumentsDone => out.extend(tool_call(ev)),
            EventKind::ResponseDone => self.response_done(ev, out),
            EventKind::Error => {
                let e = ev.error.unwrap_or_default();
                out.push(ModelEvent::ProtocolError(error_text(&e)));
            }
            EventKind::SpeechStopped
            | EventKind::Committed
            | EventKind::AudioDone
            | EventKind::ItemTruncated
            | EventKind::RateLimitsUpdated
            | EventKind::Other => {}
        }
    }

    fn audio(&mut self, ev: ServerEvent, out: &mut Vec<ModelEvent>) {
        let item_id = ev.item_id.unwrap_or_default();
        let mut samples = Vec::new();
        match decode_audio(
            ev.delta.as_deref().unwrap_or(""),
            &self.format,
            &mut samples,
        ) {
            Ok(rate) => {
                match &mut self.item {
                    Some(item) if item.item_id == item_id && item.rate == rate => {
                        item.samples += samples.len() as u64;
                    }
                    _ => {
                        self.item = Some(AudioItem {
                            item_id,
                            samples: samples.len() as u64,
                            rate,
                        })
                    }
                }
                self.audio_since_speech = true;
                out.push(ModelEvent::Audio { rate, samples });
            }
            Err(e) => out.push(ModelEvent::ProtocolError(format!(
                "{} of item {item_id}: {e}",
                ev.kind
            ))),
        }
    }

    fn response_done(&mut self, ev: ServerEvent, out: &mut Vec<ModelEvent>) {
        let response = ev.response.unwrap_or_default();
        let status = response.status.as_deref().unwrap_or("completed");
        match status {
            "cancelled" => {
                if !self.interrupted {
                    out.push(ModelEvent::Interrupted);
                }
            }
            "failed" => {
                let details = response
                    .status_details
                    .as_ref()
                    .and_then(|d| d.error.as_ref())
                    .map(Value::to_string)
                    .unwrap_or_default();
                out.push(ModelEvent::ProtocolError(format!(
                    "response {} failed: {details}",
                    response.id.as_deref().unwrap_or("")
                )));
            }
            _ => out.push(ModelEvent::GenerationComplete),
        }
        out.push(ModelEvent::TurnComplete);
        if let Some(u) = response.usage {
            out.push(ModelEvent::Usage {
                total_tokens: u.total_tokens,
            });
        }
        self.response = None;
        self.interrupted = false;
    }
}

/// `error` → the text of a [`ModelEvent::ProtocolError`]: `model error <code> (<type>): <message>`.
pub fn error_text(e: &wire::ErrorBody) -> String {
    let code = e.code.as_deref().unwrap_or("no_code");
    let mut s = format!("model error {code} ({}): {}", e.kind, e.message);
    if let Some(p) = &e.param {
        s.push_str(&format!(" [param {p}]"));
    }
    if let Some(id) = &e.event_id {
        s.push_str(&format!(" [event {id}]"));
    }
    s
}

/// The code of an error [`ModelEvent::ProtocolError`] made by [`error_text`].
pub fn error_code(protocol_error: &str) -> Option<&str> {
    protocol_error
        .strip_prefix("model error ")?
        .split_whitespace()
        .next()
}

fn tool_call(ev: ServerEvent) -> Vec<ModelEvent> {
    let raw = ev.arguments.unwrap_or_default();
    let id = ev.call_id.unwrap_or_default();
    let name = ev.name.unwrap_or_default();
    let mut out = Vec::with_capacity(2);
    let args = if raw.trim().is_empty() {
        Value::Object(Default::default())
    } else {
        match serde_json::from_str::<Value>(&raw) {
            Ok(v) => v,
            Err(e) => {
                out.push(ModelEvent::ProtocolError(format!(
                    "function call {id} ({name}): arguments are not JSON ({e}); passed on as a string"
                )));
                Value::String(raw)
            }
        }
    };
    out.push(ModelEvent::ToolCall(vec![ToolCallRequest {
        id,
        name,
        args,
    }]));
    out
}

/// Barge-in: the caller heard `heard_ms` of `item` before speaking. Returns `response.cancel`
/// (only while `response` is in progress: cancelling none is an error) and
/// `conversation.item.truncate` of `item` at what was heard (never past what was produced: the
/// service refuses that), so the server's history holds only what the caller heard.
pub fn barge_in(
    response: Option<&str>,
    item: Option<&AudioItem>,
    heard_ms: u64,
) -> Vec<ClientEvent> {
    let mut out = Vec::with_capacity(2);
    if response.is_some() {
        out.push(ClientEvent::ResponseCancel {
            event_id: None,
            response_id: None,
        });
    }
    if let Some(item) = item {
        out.push(ClientEvent::ConversationItemTruncate {
            event_id: None,
            item_id: item.item_id.clone(),
            content_index: 0,
            audio_end_ms: heard_ms.min(item.produced_ms()),
        });
    }
    out
}

#[cfg(test)]
#[path = "codec_tests.rs"]
mod tests;
