//! The sans-IO core of the OpenAI mock: one [`RealtimeSession`] per connection, driven like the
//! Gemini mock's [`MockSession`](crate::mock::MockSession) and never reading a clock:
//!
//! ```text
//! loop {
//!     feed one input:  session.handle_frame(bytes, now), or at the deadline handle_timeout(now)
//!     drain:           while let Some(o) = session.poll_transmit() { send o }
//!     sleep until:     session.poll_timeout()
//! }
//! ```
//!
//! Behaviour (reference §12.2): `session.created` at once; `session.update` → `session.updated`
//! with the full effective config (or an `error`, the session unchanged); caller audio runs through
//! the energy VAD at the session's input format (`audio/pcm` 24 kHz or G.711) giving
//! `speech_started` → `speech_stopped` → `committed` → the user item → its transcription, then (with
//! `create_response`) a response; manual turns with `commit` / `clear`. Each caller turn (a
//! committed buffer or a user text item) takes the next scripted `[[turn]]`; a turn with a
//! `tool_call` whose function the session declares answers with a function call first and speaks
//! the reply in the response created after its `function_call_output`. Errors are `error` events
//! and the socket stays open; the session ends with `session_expired` at its lifetime.
//!
//! Multi-agent handoffs, as the Gemini mock does them (see [`crate::mock::persona`]): the session
//! keeps the *active persona*, the one the wire last named — in `session.update` instructions,
//! system or user text items, or a function call's output — and speaks in its voice. A caller
//! turn whose script hands off (`[turn.handoff]` with a `tool_call`) is answered with the
//! announcement and then, in the same response, the transfer call. When the active persona
//! changed since the model last spoke, the next response is the handoff reply in the new voice;
//! a transfer answered without naming another persona is acknowledged with an empty response. A
//! user text item that is a scripted caller line positions the script there (history for a new
//! session); one that names a persona is an instruction and takes no scripted turn.
//!
//! A brief session (a warm transfer's brief to the person, [`crate::mock::brief`]) is one whose
//! `session.update` instructions contain the scenario's `[brief]` marker: its turns follow the
//! brief's script instead of the `[[turn]]`s, and no persona is noted. The answer's function call
//! ends its response; the response after its output says `answer_reply`, or nothing.
//!
//! This file holds the state, the input dispatch and caller audio; `items.rs` the conversation
//! items and truncation; `respond.rs` runs the responses, whose plan and speech stream are
//! `response.rs`'s.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::b64::STANDARD;
use base64::Engine as _;
use serde_json::{Value, json};

use super::config::{Refusal, SessionState};
use super::response::Response;
use crate::mock::listen::{Audio, Heard, Listener};
use crate::mock::scenario::Scenario;
use crate::model::openai::wire::{Api, AudioFormat, ClientEvent, EventKind};

/// Something to send to the client.
#[derive(Clone, Debug, PartialEq)]
pub enum Outgoing {
    /// A server event, sent as a text frame.
    Event(Value),
    /// Close the WebSocket; the session is over.
    Close { code: u16, reason: String },
}

/// The largest `input_audio_buffer.append` payload the service takes (15 MiB of base64).
pub const MAX_APPEND_BYTES: usize = 15 * 1024 * 1024;

/// The session's timers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Timer {
    /// The response in progress produces its first output.
    Reply = 0,
    /// The next burst of audio deltas.
    Burst = 1,
    /// The session reaches its lifetime.
    Expire = 2,
}

const TIMERS: [Timer; 3] = [Timer::Reply, Timer::Burst, Timer::Expire];

/// One conversation item the mock remembers (for `previous_item_id`, truncation, deletion).
#[derive(Clone, Debug)]
pub(super) struct ItemRecord {
    pub id: String,
    /// Assistant audio produced for it (truncation may not go past this).
    pub audio_ms: Option<u64>,
}

/// One mock OpenAI Realtime session (one WebSocket connection).
#[derive(Debug)]
pub struct RealtimeSession {
    pub(super) scenario: Arc<Scenario>,
    pub(super) api: Api,
    pub(super) state: SessionState,
    pub(super) out: VecDeque<Outgoing>,
    timers: [Option<Instant>; 3],
    now: Option<Instant>,
    closed: bool,
    started: bool,
    lifetime: Duration,
    next_id: u64,
    listener: Listener,
    /// Caller audio appended in this session (media time) and since the last commit.
    input_ms: u64,
    buffer_samples: usize,
    /// The user item of the caller turn being spoken, with its `audio_start_ms`.
    speech: Option<(String, u64)>,
    /// Caller turns so far (each takes the next scripted turn).
    pub(super) caller_turns: usize,
    /// The scripted turn of the latest caller turn, not answered yet.
    pub(super) unanswered: Option<usize>,
    pub(super) items: Vec<ItemRecord>,
    pub(super) response: Option<Response>,
    /// A function call waiting for its output: its `call_id` and scripted turn.
    pub(super) pending_call: Option<(String, usize)>,
    /// The scripted turn whose function call was answered: the next response speaks its reply.
    pub(super) answered: Option<usize>,
    /// The model has produced audio (the voice is fixed from now on).
    pub(super) spoke: bool,
    /// The persona the wire last named (index into the scenario's personas).
    pub(super) active: Option<usize>,
    /// The persona of the model's latest speech in this session (`None`: it has not spoken).
    pub(super) voice: Option<Option<usize>>,
    /// The script was positioned by history items (a session continuing a call).
    pub(super) resumed: bool,
    /// A transfer call was answered without naming another persona: nothing to say about it.
    pub(super) acked: bool,
    /// The scripted turn whose transfer call (made after its announcement) awaits its output.
    pub(super) handoff_call: Option<usize>,
    /// The session is a warm transfer's brief (its instructions named the `[brief]` marker).
    pub(super) brief: bool,
}

impl RealtimeSession {
    /// A session for a client that connected to `model` in `api`'s dialect, following `scenario`,
    /// closing after `lifetime`.
    pub fn new(scenario: Arc<Scenario>, api: Api, model: &str, lifetime: Duration) -> Self {
        let silence = scenario.timing.silence;
        let state = SessionState::new(api, model, "sess_mock0001", lifetime.as_secs());
        let vad_silence = state.view().vad.as_ref().map_or(silence, |v| v.silence);
        RealtimeSession {
            scenario,
            api,
            state,
            out: VecDeque::new(),
            timers: [None; 3],
            now: None,
            closed: false,
            started: false,
            lifetime,
            next_id: 1,
            listener: Listener::new(true, vad_silence),
            input_ms: 0,
            buffer_samples: 0,
            speech: None,
            caller_turns: 0,
            unanswered: None,
            items: Vec::new(),
            response: None,
            pending_call: None,
            answered: None,
            spoke: false,
            active: None,
            voice: None,
            resumed: false,
            acked: false,
            handoff_call: None,
            brief: false,
        }
    }

    /// Sends `session.created` and arms the lifetime; call once, on connect.
    pub fn start(&mut self, now: Instant) {
        if self.started {
            return;
        }
        self.started = true;
        let now = self.advance(now);
        let session = self.state.session().clone();
        self.emit(EventKind::SessionCreated, json!({"session": session}));
        self.set_timer(Timer::Expire, now + self.lifetime);
    }

    /// The next thing to send, if any. Poll until `None` after every `handle_*` call.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Outgoing> {
        self.out.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) wants to be called next.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.closed {
            None
        } else {
            self.timers.iter().flatten().min().copied()
        }
    }

    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// The session is a warm transfer's brief (see [`crate::mock::brief`]).
    pub fn is_brief(&self) -> bool {
        self.brief
    }

    /// The effective session configuration (`session.updated`'s `session`).
    pub fn session(&self) -> &Value {
        self.state.session()
    }

    /// Ends the session with a close frame.
    pub fn close(&mut self, code: u16, reason: &str) {
        if !self.closed {
            self.closed = true;
            self.timers = [None; 3];
            self.out.push_back(Outgoing::Close {
                code,
                reason: reason.into(),
            });
        }
    }

    /// Fires every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.closed {
            return;
        }
        let now = self.advance(now);
        while let Some(t) = self.pop_due(now) {
            match t {
                Timer::Reply => self.first_output(now),
                Timer::Burst => self.burst(now),
                Timer::Expire => {
                    let minutes = self.lifetime.as_secs() / 60;
                    self.error(
                        "invalid_request_error",
                        "session_expired",
                        format!("Your session hit the maximum duration of {minutes} minutes."),
                        None,
                        None,
                    );
                    self.close(1000, "session expired");
                }
            }
        }
    }

    /// One client frame (a text or binary WebSocket payload).
    pub fn handle_frame(&mut self, frame: &[u8], now: Instant) {
        if self.closed {
            return;
        }
        let now = self.advance(now);
        let v: Value = match serde_json::from_slice(frame) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) | Err(_) => {
                return self.error(
                    "invalid_request_error",
                    "invalid_json",
                    "The client event is not a JSON object.".into(),
                    None,
                    None,
                );
            }
        };
        let event_id = v.get("event_id").and_then(Value::as_str).map(str::to_owned);
        let kind = v
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let result = match kind.as_str() {
            "session.update" => self.on_session_update(&v),
            "conversation.item.delete" => self.on_item_delete(&v),
            "conversation.item.retrieve" | "output_audio_buffer.clear" => Err(Refusal {
                code: "unsupported",
                message: format!("The mock does not support '{kind}'."),
                param: Some("type".into()),
            }),
            _ => match serde_path_to_error::deserialize::<_, ClientEvent>(&v) {
                Ok(ev) => self.on_event(ev, now),
                Err(e) if kind.is_empty() || !known(&kind) => Err(Refusal::invalid(
                    "type",
                    format!("Invalid value: '{kind}'. {e}", e = e.inner()),
                )),
                Err(e) => Err(Refusal::invalid(
                    &e.path().to_string(),
                    format!("Invalid '{kind}' event: {}", e.inner()),
                )),
            },
        };
        if let Err(r) = result {
            self.error(
                "invalid_request_error",
                r.code,
                r.message,
                r.param,
                event_id,
            );
        }
    }

    fn on_event(&mut self, ev: ClientEvent, now: Instant) -> Result<(), Refusal> {
        match ev {
            ClientEvent::SessionUpdate { .. } => Ok(()),
            ClientEvent::InputAudioBufferAppend { audio, .. } => self.on_append(&audio, now),
            ClientEvent::InputAudioBufferCommit { .. } => self.on_commit(now),
            ClientEvent::InputAudioBufferClear { .. } => {
                self.buffer_samples = 0;
                self.speech = None;
                self.emit_plain("input_audio_buffer.cleared", json!({}));
                Ok(())
            }
            ClientEvent::ConversationItemCreate {
                previous_item_id,
                item,
                ..
            } => self.on_item_create(previous_item_id, item),
            ClientEvent::ConversationItemTruncate {
                item_id,
                content_index,
                audio_end_ms,
                ..
            } => self.on_truncate(&item_id, content_index, audio_end_ms),
            ClientEvent::ResponseCreate { response, .. } => {
                let oob = response
                    .as_ref()
                    .and_then(|r| r.conversation.as_deref())
                    .is_some_and(|c| c == "none");
                self.on_response_create(oob, now)
            }
            ClientEvent::ResponseCancel { .. } => self.on_response_cancel(),
        }
    }

    fn on_session_update(&mut self, v: &Value) -> Result<(), Refusal> {
        let Some(update) = v.get("session") else {
            return Err(Refusal {
                code: "missing_required_parameter",
                message: "Missing required parameter: 'session'.".into(),
                param: Some("session".into()),
            });
        };
        self.state.update(update, self.spoke)?;
        if let Some(text) = update.get("instructions").and_then(Value::as_str) {
            self.brief = self.scenario.brief.as_ref().is_some_and(|b| b.names(text));
            self.note_persona(text);
        }
        let silence = self.state.view().vad.as_ref().map(|v| v.silence);
        if let Some(silence) = silence {
            self.listener = Listener::new(true, silence);
        }
        let session = self.state.session().clone();
        self.emit(EventKind::SessionUpdated, json!({"session": session}));
        Ok(())
    }

    fn on_append(&mut self, audio: &str, now: Instant) -> Result<(), Refusal> {
        if audio.len() > MAX_APPEND_BYTES {
            return Err(Refusal::invalid(
                "audio",
                "Audio content exceeds the 15 MiB limit of one append.",
            ));
        }
        let bytes = STANDARD
            .decode(audio)
            .map_err(|e| Refusal::invalid("audio", format!("Invalid base64 audio: {e}")))?;
        let view = self.state.view().clone();
        let mut samples = Vec::new();
        let rate: u32 = match view.input {
            AudioFormat::Pcmu => {
                crate::audio::g711::decode_ulaw(&bytes, &mut samples);
                8_000
            }
            AudioFormat::Pcma => {
                crate::audio::g711::decode_alaw(&bytes, &mut samples);
                8_000
            }
            _ => {
                if bytes.len() % 2 != 0 {
                    return Err(Refusal::invalid(
                        "audio",
                        "audio/pcm audio must be 16-bit samples (an even number of bytes).",
                    ));
                }
                samples.extend(
                    bytes
                        .chunks_exact(2)
                        .map(|b| i16::from_le_bytes([b[0], b[1]])),
                );
                24_000
            }
        };
        let start_ms = self.input_ms;
        self.buffer_samples += samples.len();
        self.input_ms += samples.len() as u64 * 1000 / u64::from(rate);
        let Some(vad) = view.vad else {
            return Ok(());
        };
        let mut heard = Vec::new();
        self.listener.audio(&Audio { rate, samples }, &mut heard);
        for h in heard {
            match h {
                Heard::SpeechStart => {
                    let item = self.new_id("item");
                    let at = start_ms.saturating_sub(300);
                    self.speech = Some((item.clone(), at));
                    self.emit(
                        EventKind::SpeechStarted,
                        json!({"audio_start_ms": at, "item_id": item}),
                    );
                    if vad.interrupt_response && self.response.is_some() {
                        self.cancel_response("turn_detected");
                    }
                }
                Heard::TurnEnd { .. } => {
                    let (item, _) = self
                        .speech
                        .take()
                        .unwrap_or_else(|| (self.new_id("item"), start_ms));
                    self.emit(
                        EventKind::SpeechStopped,
                        json!({"audio_end_ms": self.input_ms, "item_id": item}),
                    );
                    self.commit(item);
                    if vad.create_response {
                        if self.response.is_some() {
                            // Without interrupt_response the reply in progress runs on.
                            continue;
                        }
                        self.start_response(false, now);
                    }
                }
            }
        }
        Ok(())
    }

    fn on_commit(&mut self, _now: Instant) -> Result<(), Refusal> {
        if self.buffer_samples == 0 {
            return Err(Refusal {
                code: "input_audio_buffer_commit_empty",
                message: "Error committing input audio buffer: the buffer is empty.".into(),
                param: None,
            });
        }
        let item = match self.speech.take() {
            Some((item, _)) => item,
            None => self.new_id("item"),
        };
        self.commit(item);
        Ok(())
    }

    /// The buffer becomes user item `item`: `committed`, the item, its transcription; the caller
    /// turn takes the next scripted turn.
    fn commit(&mut self, item: String) {
        self.buffer_samples = 0;
        let previous = self.items.last().map(|i| i.id.clone());
        self.emit(
            EventKind::Committed,
            json!({"item_id": item, "previous_item_id": previous}),
        );
        let turn = self.caller_turns;
        self.caller_turns += 1;
        self.unanswered = Some(turn);
        let content = json!([{"type": "input_audio", "transcript": null}]);
        let record = json!({"id": item, "type": "message", "role": "user", "status": "completed",
                            "object": "realtime.item", "content": content});
        self.add_item(record, previous, None, true);
        if self.state.view().transcription {
            let text = (!self.brief)
                .then(|| self.scenario.turns.get(turn)?.input_text.clone())
                .flatten()
                .unwrap_or_default();
            if !text.is_empty() {
                self.emit(
                    EventKind::InputTranscriptionDelta,
                    json!({"item_id": item, "content_index": 0, "delta": text}),
                );
            }
            let seconds = (text.split_whitespace().count() as f64 * 0.4).max(0.5);
            self.emit(
                EventKind::InputTranscriptionCompleted,
                json!({"item_id": item, "content_index": 0, "transcript": text,
                       "usage": {"type": "duration", "seconds": seconds}}),
            );
        }
    }

    // -- personas -------------------------------------------------------------------------------

    /// `text` (an instruction, a prompt, a function output) names the active persona, if it
    /// names one; true when it did.
    pub(super) fn note_persona(&mut self, text: &str) -> bool {
        if self.brief {
            return false;
        }
        let markers = self.scenario.markers();
        match crate::mock::persona::named_in(&markers, text) {
            Some(p) => {
                self.active = Some(p);
                true
            }
            None => false,
        }
    }

    /// The scripted caller line `text` is, at or after the script's position.
    pub(super) fn scripted_line(&self, text: &str) -> Option<usize> {
        if self.brief {
            return None;
        }
        let text = text.trim();
        (self.caller_turns..self.scenario.turns.len())
            .find(|&j| self.scenario.turns[j].input_text.as_deref().map(str::trim) == Some(text))
    }

    // -- plumbing -------------------------------------------------------------------------------

    pub(super) fn new_id(&mut self, prefix: &str) -> String {
        let n = self.next_id;
        self.next_id += 1;
        format!("{prefix}_mock{n:06}")
    }

    /// Queues event `kind` (named for the session's dialect) with `fields`.
    pub(super) fn emit(&mut self, kind: EventKind, fields: Value) {
        self.emit_plain(kind.name(self.api), fields);
    }

    /// Queues an event by name; `event_id` and `type` are added.
    pub(super) fn emit_plain(&mut self, name: &str, mut fields: Value) {
        let id = self.new_id("event");
        if let Some(obj) = fields.as_object_mut() {
            obj.insert("type".into(), Value::String(name.to_owned()));
            obj.insert("event_id".into(), Value::String(id));
        }
        self.out.push_back(Outgoing::Event(fields));
    }

    /// Queues an `error` event; the session carries on.
    pub(super) fn error(
        &mut self,
        kind: &str,
        code: &str,
        message: String,
        param: Option<String>,
        event_id: Option<String>,
    ) {
        self.emit(
            EventKind::Error,
            json!({"error": {"type": kind, "code": code, "message": message,
                             "param": param, "event_id": event_id}}),
        );
    }

    pub(super) fn set_timer(&mut self, t: Timer, at: Instant) {
        self.timers[t as usize] = Some(at);
    }

    pub(super) fn stop_timer(&mut self, t: Timer) {
        self.timers[t as usize] = None;
    }

    fn pop_due(&mut self, now: Instant) -> Option<Timer> {
        let t = TIMERS
            .into_iter()
            .filter(|&t| self.timers[t as usize].is_some_and(|at| at <= now))
            .min_by_key(|&t| self.timers[t as usize])?;
        self.stop_timer(t);
        Some(t)
    }

    fn advance(&mut self, now: Instant) -> Instant {
        let now = self.now.map_or(now, |last| last.max(now));
        self.now = Some(now);
        now
    }
}

/// Client event types the service knows (a bad one of these is a field error, not a bad type).
fn known(kind: &str) -> bool {
    [
        "input_audio_buffer.append",
        "input_audio_buffer.commit",
        "input_audio_buffer.clear",
        "conversation.item.create",
        "conversation.item.truncate",
        "response.create",
        "response.cancel",
    ]
    .contains(&kind)
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
