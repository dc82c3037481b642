//! The sans-IO core of the mock model: one [`MockSession`] per connection. It is driven like
//! quinn-proto or str0m and never reads a clock or touches a socket:
//!
//! ```text
//! loop {
//!     feed one input:  session.handle_frame(bytes, now) / handle_message(msg, now)
//!                      or, when the deadline passed, session.handle_timeout(now)
//!     drain:           while let Some(o) = session.poll_transmit() { send o }
//!     sleep until:     session.poll_timeout()   (None: wait for input only)
//! }
//! ```
//!
//! After an [`Outgoing::Close`] nothing more is produced and input is ignored. Time never goes
//! backwards: an older `now` counts as the latest one seen.
//!
//! Behaviour (reference §12.1): `setup` first → `setupComplete`; caller turns from the VAD,
//! `activityEnd`, `audioStreamEnd`, `clientContent{turnComplete:true}` or `realtimeInput.text`;
//! each turn takes the next scripted reply, streamed in bursts faster than real time, then
//! `generationComplete`, then `turnComplete` once the client has played it; barge-in →
//! `interrupted`, `toolCallCancellation`, `turnComplete`; BLOCKING tool calls pause generation until
//! their `toolResponse`.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::inbound::{self, Rejection};
use super::listen::{self, Heard, Listener};
use super::scenario::{Scenario, Turn};
use super::setup::{self, Backend, Behavior, Endpoint, Profile, SessionConfig};
use super::speak::{self, ReplyStream, Rng, content};
use super::timers::{Timer, Timers};
use crate::model::gemini::wire::{
    ClientContent, ClientMessage, Content, ContextUpdate, FunctionCall, RealtimeInput,
    ServerContent, ServerMessage, SetupComplete, ToolCall, ToolCallCancellation, ToolResponse,
    Transcription, UsageMetadata,
};

/// Something to send to the client. `Close` happens once per session, so the size difference
/// is not worth an allocation per message.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Outgoing {
    /// A server message, to be sent as JSON (binary frame).
    Message(ServerMessage),
    /// Close the WebSocket with this code and reason; the session is over.
    Close { code: u16, reason: String },
}

#[derive(Debug, PartialEq, Eq)]
enum Stage {
    /// Waiting for [`Timer::Reply`].
    Thinking,
    /// A BLOCKING call is out; generation resumes on its response.
    AwaitingTool(String),
    /// Sending bursts on [`Timer::Burst`].
    Streaming,
    /// All audio sent; waiting for the client's playback to end ([`Timer::TurnComplete`]).
    Playing,
}

/// The model's turn in progress (from the end of the caller's turn to `turnComplete`).
#[derive(Debug)]
struct ModelTurn {
    script: Turn,
    stage: Stage,
    tool_called: bool,
    stream: Option<ReplyStream>,
    /// Function-call ids issued in this turn.
    calls: Vec<String>,
}

/// A function call the client has not answered yet.
#[derive(Debug)]
struct PendingCall {
    id: String,
    name: String,
    behavior: Behavior,
}

/// One mock-model session (one WebSocket connection).
#[derive(Debug)]
pub struct MockSession {
    scenario: Arc<Scenario>,
    endpoint: Endpoint,
    profile: Profile,
    config: Option<SessionConfig>,
    listener: Option<Listener>,
    closed: bool,
    now: Option<Instant>,
    out: VecDeque<Outgoing>,
    timers: Timers,
    rng: Rng,
    /// Caller turns so far (each consumes one scripted turn).
    caller_turns: usize,
    turn: Option<ModelTurn>,
    /// Caller turns that ended (at the instant given) while the model was talking under
    /// `NO_INTERRUPTION`; answered in order after the current turn.
    queued: VecDeque<(Turn, Instant)>,
    /// Unanswered function calls, oldest first.
    pending_calls: Vec<PendingCall>,
    /// Calls cancelled by a barge-in: a late response to them is not an error.
    cancelled_calls: HashSet<String>,
    next_call_id: u64,
    history: Vec<Content>,
    prompt_tokens: u64,
}

impl MockSession {
    /// A session for a client that connected to `endpoint`, following `scenario`.
    pub fn new(scenario: Arc<Scenario>, endpoint: Endpoint, profile: Profile) -> Self {
        let seed = scenario.timing.seed;
        MockSession {
            scenario,
            endpoint,
            profile,
            config: None,
            listener: None,
            closed: false,
            now: None,
            out: VecDeque::new(),
            timers: Timers::default(),
            rng: Rng::new(seed),
            caller_turns: 0,
            turn: None,
            queued: VecDeque::new(),
            pending_calls: Vec::new(),
            cancelled_calls: HashSet::new(),
            next_call_id: 1,
            history: Vec::new(),
            prompt_tokens: 0,
        }
    }

    /// The next thing to send, if any. Poll until `None` after every `handle_*` call.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Outgoing> {
        self.out.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) wants to be called next (`None`: only input
    /// can change anything). Poll again after every `handle_*` call.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.closed {
            None
        } else {
            self.timers.next()
        }
    }

    /// The session has closed (an [`Outgoing::Close`] was queued).
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// The model-behaviour profile this session follows.
    pub fn profile(&self) -> Profile {
        self.profile
    }

    /// The effective configuration once `setup` was accepted.
    pub fn config(&self) -> Option<&SessionConfig> {
        self.config.as_ref()
    }

    /// Ends the session with `rejection` (also used by the shell for transport-level errors).
    pub fn close(&mut self, rejection: Rejection) {
        if self.closed {
            return;
        }
        // Re-checked here: the fields are public, so the length limit may not have been applied.
        let rejection = Rejection::new(rejection.code, rejection.reason);
        self.closed = true;
        self.timers.stop_all();
        self.out.push_back(Outgoing::Close {
            code: rejection.code,
            reason: rejection.reason,
        });
    }

    /// One raw WebSocket message (text or binary payload) from the client.
    pub fn handle_frame(&mut self, frame: &[u8], now: Instant) {
        if self.closed {
            return;
        }
        match inbound::parse(frame) {
            Ok(msg) => self.handle_message(msg, now),
            Err(r) => self.close(r),
        }
    }

    /// One parsed client message.
    pub fn handle_message(&mut self, msg: ClientMessage, now: Instant) {
        if self.closed {
            return;
        }
        let now = self.advance(now);
        let result = match (msg, self.config.is_some()) {
            (ClientMessage::Setup(s), false) => self.on_setup(&s),
            (ClientMessage::Setup(_), true) => Err(Rejection::invalid(
                "setup may be sent only once, as the first message",
            )),
            (_, false) => Err(Rejection::invalid(
                "the first message must be setup; wait for setupComplete before sending anything else",
            )),
            (ClientMessage::RealtimeInput(ri), true) => self.on_realtime_input(ri, now),
            (ClientMessage::ClientContent(cc), true) => self.on_client_content(cc, now),
            (ClientMessage::ToolResponse(tr), true) => self.on_tool_response(tr, now),
            (ClientMessage::ContextUpdate(cu), true) => self.on_context_update(cu),
        };
        if let Err(r) = result {
            self.close(r);
        }
    }

    /// Fires every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.closed {
            return;
        }
        let now = self.advance(now);
        while let Some(t) = self.timers.pop_due(now) {
            match t {
                Timer::Reply => self.start_reply(now),
                Timer::Burst => self.send_burst(now),
                Timer::TurnComplete => self.complete_turn(now),
            }
        }
    }

    fn advance(&mut self, now: Instant) -> Instant {
        let now = self.now.map_or(now, |last| last.max(now));
        self.now = Some(now);
        now
    }

    fn send(&mut self, m: ServerMessage) {
        self.out.push_back(Outgoing::Message(m));
    }

    /// `START_OF_ACTIVITY_INTERRUPTS` (also the answer before setup).
    fn interrupts(&self) -> bool {
        self.config.as_ref().is_none_or(|c| c.interrupts)
    }

    // -- client messages ------------------------------------------------------------------------

    fn on_setup(&mut self, s: &crate::model::gemini::wire::Setup) -> Result<(), Rejection> {
        let config = setup::validate(s, &self.endpoint)?;
        let silence = config.silence.unwrap_or(self.scenario.timing.silence);
        self.listener = Some(Listener::new(config.auto_vad, silence));
        if let Some(si) = &config.system_instruction {
            self.prompt_tokens += speak::text_tokens(si);
        }
        self.config = Some(config);
        self.send(ServerMessage {
            setup_complete: Some(SetupComplete::default()),
            ..Default::default()
        });
        Ok(())
    }

    fn on_realtime_input(&mut self, ri: RealtimeInput, now: Instant) -> Result<(), Rejection> {
        let n = ri.fields_set();
        if n != 1 {
            return Err(Rejection::invalid(format!(
                "realtimeInput must set exactly one of audio, audioStreamEnd, video, text, \
                 activityStart, activityEnd, mediaChunks; got {n}"
            )));
        }
        let mut heard = Vec::new();
        let blob = match (&ri.audio, &ri.media_chunks) {
            (Some(b), _) => Some((b, "realtimeInput.audio")),
            // Deprecated: only the first blob counts; non-audio chunks are video frames.
            (None, Some(chunks)) => chunks
                .first()
                .filter(|b| {
                    b.mime_type
                        .as_deref()
                        .is_some_and(|m| m.trim_start().starts_with("audio/"))
                })
                .map(|b| (b, "realtimeInput.mediaChunks[0]")),
            _ => None,
        };
        if let Some((blob, at)) = blob {
            let audio = listen::decode_audio(blob, at)?;
            self.prompt_tokens += speak::audio_tokens(audio.duration());
            if let Some(l) = self.listener.as_mut() {
                l.audio(&audio, &mut heard);
            }
        } else if ri.audio_stream_end == Some(true) {
            heard.extend(self.listener.as_mut().and_then(Listener::audio_stream_end));
        } else if ri.activity_start.is_some() {
            if let Some(l) = self.listener.as_mut() {
                heard.extend(l.activity_start()?);
            }
        } else if ri.activity_end.is_some() {
            if let Some(l) = self.listener.as_mut() {
                heard.extend(l.activity_end()?);
            }
        } else if let Some(text) = &ri.text {
            self.prompt_tokens += (text.len() as u64).div_ceil(4);
            self.caller_turn_ended(now, false);
        }
        for h in heard {
            match h {
                Heard::SpeechStart => self.caller_started(now),
                Heard::TurnEnd { audio } => self.caller_turn_ended(now, audio),
            }
        }
        Ok(())
    }

    fn on_client_content(&mut self, cc: ClientContent, now: Instant) -> Result<(), Rejection> {
        let turns = cc.turns.unwrap_or_default();
        for (i, t) in turns.iter().enumerate() {
            match t.role.as_deref() {
                None | Some("user" | "model") => {}
                Some("system") if self.endpoint.backend == Backend::Vertex => {}
                Some(other) => {
                    return Err(Rejection::invalid(format!(
                        "clientContent.turns[{i}].role {other:?}: Please use a valid role: user, model."
                    )));
                }
            }
        }
        for t in turns {
            self.prompt_tokens += speak::text_tokens(&t);
            self.history.push(t);
        }
        if cc.turn_complete == Some(true) {
            // Proto: a client turn interrupts any current generation.
            self.caller_turn_ended(now, false);
        }
        Ok(())
    }

    fn on_tool_response(&mut self, tr: ToolResponse, now: Instant) -> Result<(), Rejection> {
        for (i, fr) in tr
            .function_responses
            .unwrap_or_default()
            .into_iter()
            .enumerate()
        {
            let id = match (&fr.id, self.endpoint.backend) {
                (Some(id), _) => id.clone(),
                // Vertex tolerates a missing id: match the oldest call of that name.
                (None, Backend::Vertex) => match self.call_by_name(fr.name.as_deref()) {
                    Some(id) => id,
                    None => continue,
                },
                (None, Backend::DevApi) => {
                    return Err(Rejection::invalid(format!(
                        "toolResponse.functionResponses[{i}].id is required"
                    )));
                }
            };
            if self.cancelled_calls.contains(&id) {
                continue;
            }
            let Some(pos) = self.pending_calls.iter().position(|c| c.id == id) else {
                return Err(Rejection::invalid(format!(
                    "function response id {id:?} not found among the outstanding function calls"
                )));
            };
            // A NON_BLOCKING function may answer in several parts (`willContinue`).
            let more = self.pending_calls[pos].behavior == Behavior::NonBlocking
                && fr.will_continue == Some(true);
            if !more {
                self.pending_calls.remove(pos);
            }
            if let Some(v) = &fr.response {
                self.prompt_tokens += (v.to_string().len() as u64).div_ceil(4);
            }
            let first_audio = self.scenario.timing.first_audio;
            if let Some(turn) = self.turn.as_mut()
                && turn.stage == Stage::AwaitingTool(id)
            {
                turn.stage = Stage::Thinking;
                self.timers.set(Timer::Reply, now + first_audio);
            }
        }
        Ok(())
    }

    fn on_context_update(&mut self, cu: ContextUpdate) -> Result<(), Rejection> {
        let functions = match &cu.tools {
            Some(w) => Some(setup::functions(&w.tools, "contextUpdate.tools.tools")?),
            None => None,
        };
        let Some(config) = self.config.as_mut() else {
            return Ok(());
        };
        if let Some(si) = cu.system_instruction {
            config.system_instruction = Some(si);
        }
        if let Some(f) = functions {
            config.functions = f;
        }
        Ok(())
    }

    /// The oldest outstanding call of the function `name`.
    fn call_by_name(&self, name: Option<&str>) -> Option<String> {
        let name = name?;
        self.pending_calls
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.id.clone())
    }

    // -- turn taking ----------------------------------------------------------------------------

    /// The caller started speaking (VAD or `activityStart`).
    fn caller_started(&mut self, now: Instant) {
        if self.turn.is_some() && self.interrupts() {
            self.interrupt(now);
        }
    }

    /// The caller's turn is over (`audio`: it had audio, so it is transcribed). A model turn still
    /// in progress is interrupted, or under `NO_INTERRUPTION` the new turn waits for it.
    fn caller_turn_ended(&mut self, now: Instant, audio: bool) {
        let script = self.scenario.turn(self.caller_turns);
        self.caller_turns += 1;
        if audio
            && self.config.as_ref().is_some_and(|c| c.input_transcription)
            && let Some(t) = &script.input_text
        {
            self.history.push(Content::text(Some("user"), t.clone()));
            self.send(content(ServerContent {
                input_transcription: Some(Transcription {
                    text: Some(t.clone()),
                    finished: Some(true),
                }),
                ..Default::default()
            }));
        }
        if self.turn.is_some() {
            if !self.interrupts() {
                self.queued.push_back((script, now));
                return;
            }
            self.interrupt(now);
        }
        self.begin_turn(script, now + self.scenario.timing.first_audio);
    }

    fn begin_turn(&mut self, script: Turn, reply_at: Instant) {
        self.turn = Some(ModelTurn {
            script,
            stage: Stage::Thinking,
            tool_called: false,
            stream: None,
            calls: Vec::new(),
        });
        self.timers.set(Timer::Reply, reply_at);
    }

    /// [`Timer::Reply`]: the scripted tool call, or the first audio.
    fn start_reply(&mut self, now: Instant) {
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        if !turn.tool_called
            && let Some(call) = turn.script.tool_call.clone()
        {
            turn.tool_called = true;
            let id = format!("call-{}", self.next_call_id);
            self.next_call_id += 1;
            let behavior = self
                .config
                .as_ref()
                .map_or(Behavior::Blocking, |c| c.behavior(&call.name));
            turn.calls.push(id.clone());
            self.pending_calls.push(PendingCall {
                id: id.clone(),
                name: call.name.clone(),
                behavior,
            });
            let blocking = behavior == Behavior::Blocking;
            if blocking {
                turn.stage = Stage::AwaitingTool(id.clone());
            }
            self.send(ServerMessage {
                tool_call: Some(ToolCall {
                    function_calls: vec![FunctionCall {
                        id: Some(id),
                        name: Some(call.name),
                        args: Some(call.args),
                    }],
                }),
                ..Default::default()
            });
            if blocking {
                return;
            }
        }
        let transcribe = self.config.as_ref().is_some_and(|c| c.output_transcription);
        if let Some(turn) = self.turn.as_mut() {
            turn.stream = Some(ReplyStream::new(
                &turn.script.reply,
                self.scenario.timing.chunk,
                transcribe,
            ));
            turn.stage = Stage::Streaming;
        }
        self.send_burst(now);
    }

    /// [`Timer::Burst`]: `burst` chunks back to back, then a pause that holds the average speed.
    fn send_burst(&mut self, now: Instant) {
        let scenario = self.scenario.clone();
        let timing = &scenario.timing;
        let Some(stream) = self.turn.as_mut().and_then(|t| t.stream.as_mut()) else {
            return;
        };
        let before = stream.sent_audio();
        let messages = stream.burst(timing.burst, now);
        let produced = stream.sent_audio().saturating_sub(before);
        let done = stream.done();
        let play_end = stream.play_end().unwrap_or(now);
        for m in messages {
            self.send(m);
        }
        if done {
            self.send(content(ServerContent {
                generation_complete: Some(true),
                ..Default::default()
            }));
            if let Some(turn) = self.turn.as_mut() {
                turn.stage = Stage::Playing;
            }
            // The client plays from the first chunk on; the turn is over when it has played all.
            self.timers.set(Timer::TurnComplete, play_end.max(now));
        } else {
            let pause = produced.div_f64(timing.speed) + self.rng.duration_up_to(timing.jitter);
            self.timers.set(Timer::Burst, now + pause);
        }
    }

    /// [`Timer::TurnComplete`]: the reply has been played.
    fn complete_turn(&mut self, now: Instant) {
        let Some(turn) = self.turn.take() else {
            return;
        };
        self.finish(turn, false);
        if let Some((script, ended)) = self.queued.pop_front() {
            let at = (ended + self.scenario.timing.first_audio).max(now);
            self.begin_turn(script, at);
        }
    }

    /// Barge-in or a new client turn: stop talking, `interrupted`, cancel the turn's calls,
    /// `turnComplete`.
    fn interrupt(&mut self, _now: Instant) {
        let Some(turn) = self.turn.take() else {
            return;
        };
        self.timers.stop(Timer::Reply);
        self.timers.stop(Timer::Burst);
        self.timers.stop(Timer::TurnComplete);
        self.finish(turn, true);
    }

    /// Sends the end of `turn` and records what was said in the history.
    fn finish(&mut self, turn: ModelTurn, interrupted: bool) {
        if interrupted {
            self.send(content(ServerContent {
                interrupted: Some(true),
                ..Default::default()
            }));
            let ids: Vec<String> = turn
                .calls
                .iter()
                .filter(|id| self.pending_calls.iter().any(|c| &c.id == *id))
                .cloned()
                .collect();
            self.pending_calls.retain(|c| !ids.contains(&c.id));
            if !ids.is_empty() {
                self.cancelled_calls.extend(ids.iter().cloned());
                self.send(ServerMessage {
                    tool_call_cancellation: Some(ToolCallCancellation { ids }),
                    ..Default::default()
                });
            }
        }
        let (spoken, text) = turn
            .stream
            .as_ref()
            .map_or((Duration::ZERO, String::new()), |s| {
                (s.sent_audio(), s.sent_text().to_owned())
            });
        // Only what was actually sent stays in the history.
        if !text.is_empty() {
            self.history.push(Content::text(Some("model"), text));
        }
        let response = speak::audio_tokens(spoken);
        let prompt = self.prompt_tokens;
        self.prompt_tokens += response;
        let (response_token_count, candidates_token_count) = match self.endpoint.backend {
            Backend::DevApi => (Some(response), None),
            Backend::Vertex => (None, Some(response)),
        };
        self.send(ServerMessage {
            server_content: Some(ServerContent {
                turn_complete: Some(true),
                ..Default::default()
            }),
            usage_metadata: Some(UsageMetadata {
                prompt_token_count: Some(prompt),
                response_token_count,
                candidates_token_count,
                total_token_count: Some(prompt + response),
            }),
            ..Default::default()
        });
    }
}

#[cfg(test)]
#[path = "engine_tests/mod.rs"]
mod tests;
