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
//! their `toolResponse`. Text or client content that arrives after `generationComplete` (while the
//! client is still playing) cuts nothing: the finished turn gets its `turnComplete` at once and the
//! next reply's playback is modelled to follow the queued audio.
//!
//! Multi-agent handoffs: the session keeps the *active persona* (the agent the wire last named,
//! [`super::persona`]) and speaks in its voice; handoff follow-ups, `scheduling` of NON_BLOCKING
//! responses and initial history follow the rules in [`super::scenario`]'s module doc. What the
//! model generation allows (contextUpdate, NON_BLOCKING, mid-session client content) is its
//! [`Profile`]'s.
//!
//! Brief sessions (a warm transfer's brief to the person, [`super::brief`]): a session whose
//! `setup` system instruction contains the scenario's `[brief]` marker follows the brief's script
//! instead of the `[[turn]]`s; personas, the greeting and input transcriptions of scripted lines
//! play no part in it.
//!
//! Layout: this file holds the session state and its public face; `engine/inputs.rs` handles
//! client messages, `engine/turns.rs` turn taking and replies.

mod faults;
mod inputs;
mod resume;
mod turns;

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use super::faults::{DropRule, Faults};
use super::inbound::{self, Rejection};
use super::listen::Listener;
use super::resume::{ResumeState, Resumption};
use super::rng::Rng;
use super::scenario::{Reply, Scenario, ScriptedToolCall};
use super::setup::{Behavior, Endpoint, Profile, SessionConfig};
use super::speak::ReplyStream;
use super::timers::{Timer, Timers};
use crate::model::Capabilities;
use crate::model::gemini::wire::{ClientMessage, Content, ServerMessage};

/// Something to send to the client. `Close` happens once per session, so the size difference
/// is not worth an allocation per message.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Outgoing {
    /// A server message, to be sent as JSON (binary frame).
    Message(ServerMessage),
    /// Close the WebSocket with this code and reason; the session is over.
    Close { code: u16, reason: String },
    /// Drop the connection without a close frame (the client sees 1006); the session is over.
    Drop,
    /// Stop reading and writing but keep the socket open (a dead socket); the session is over.
    Hang,
    /// Send these bytes as a binary frame as they are (a garbage frame).
    Raw(Vec<u8>),
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

/// What the model will say in one turn, decided when the turn begins.
#[derive(Clone, Debug)]
struct Plan {
    reply: Reply,
    /// The persona speaking (index into the scenario's personas).
    persona: Option<usize>,
    /// Emitted before the first audio.
    tool_call: Option<ScriptedToolCall>,
    /// Emitted after the first burst (a model-driven handoff).
    handoff_call: Option<ScriptedToolCall>,
    /// The scripted turn this reply belongs to.
    script: Option<usize>,
}

/// The model's turn in progress (from the end of the caller's turn to `turnComplete`).
#[derive(Debug)]
struct ModelTurn {
    plan: Plan,
    stage: Stage,
    tool_called: bool,
    handoff_called: bool,
    stream: Option<ReplyStream>,
    /// Function-call ids issued in this turn.
    calls: Vec<String>,
    /// A `WHEN_IDLE` response arrived during generation: follow up (for this scripted turn) once
    /// generation is complete.
    when_idle: Option<Option<usize>>,
}

/// A function call the client has not answered yet.
#[derive(Debug)]
struct PendingCall {
    id: String,
    name: String,
    behavior: Behavior,
    /// The scripted turn that made the call.
    script: Option<usize>,
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
    /// Turns that ended (at the instant given) while the model could not be cut (under
    /// `NO_INTERRUPTION`, or during a BLOCKING call on older models); answered in order after the
    /// current turn.
    queued: VecDeque<(Plan, Instant)>,
    /// Unanswered function calls, oldest first.
    pending_calls: Vec<PendingCall>,
    /// Calls cancelled by a barge-in: a late response to them is not an error.
    cancelled_calls: HashSet<String>,
    next_call_id: u64,
    history: Vec<Content>,
    prompt_tokens: u64,
    /// The persona the wire last named.
    active: Option<usize>,
    /// The persona of the model's latest turn in this session; `None` before the first.
    voice: Option<Option<usize>>,
    /// `clientContent` is initial history until the first `turnComplete:true`.
    history_open: bool,
    /// User turns of the initial history, in order.
    history_users: Vec<String>,
    /// The session ingested initial history and the model has not spoken since.
    resumed: bool,
    /// gemini-2.5 quirk: voice turns get no reply until a `clientContent{turnComplete:true}`.
    wedged: bool,
    /// The client is still playing audio of a turn that ended without a cut, until then.
    playing_until: Option<Instant>,
    /// Handles, open sockets and audio records shared with the server's other connections.
    store: Arc<Resumption>,
    conn: u64,
    faults: Arc<Faults>,
    fault_rng: Rng,
    /// Drop rules (by index) not fired yet on this connection, with their earliest moment.
    armed: Vec<(usize, DropRule, Instant)>,
    /// Sends nothing more (after `goAway` with `silent_after_go_away`).
    silent: bool,
    /// The client asked for resumption handles.
    resumption: bool,
    /// The session continues an earlier one (a resumption handle).
    restored: bool,
    /// The session is a warm transfer's brief (its setup named the scenario's `[brief]` marker).
    brief: bool,
}

impl MockSession {
    /// A session for a client that connected to `endpoint`, following `scenario`, behaving like
    /// `profile`.
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
            active: None,
            voice: None,
            history_open: false,
            history_users: Vec::new(),
            resumed: false,
            wedged: false,
            playing_until: None,
            store: Arc::new(Resumption::default()),
            conn: 0,
            faults: Arc::new(Faults::default()),
            fault_rng: Rng::new(1),
            armed: Vec::new(),
            silent: false,
            resumption: false,
            restored: false,
            brief: false,
        }
    }

    /// The session as connection `conn` of a server: handles and audio records in `store`,
    /// faults injected as `faults` says.
    pub fn with_server(mut self, store: Arc<Resumption>, conn: u64, faults: Arc<Faults>) -> Self {
        self.conn = conn;
        self.fault_rng = Rng::new(faults.seed ^ conn.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        self.faults = faults;
        self.store = store;
        self
    }

    /// The connection id given by [`MockSession::with_server`].
    pub fn connection(&self) -> u64 {
        self.conn
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
            self.timers.next().map(|(at, _)| at)
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

    /// What a client can do in place in this session.
    pub fn capabilities(&self) -> Capabilities {
        self.profile.capabilities()
    }

    /// The id of the persona the model speaks as now (`None`: no persona named yet).
    pub fn persona(&self) -> Option<&str> {
        let i = self.active?;
        self.scenario.personas.get(i).map(|p| p.id.as_str())
    }

    /// The session is a warm transfer's brief (see [`super::brief`]).
    pub fn is_brief(&self) -> bool {
        self.brief
    }

    /// How many scripted turns the session has consumed (or skipped with initial history).
    pub fn script_position(&self) -> usize {
        self.caller_turns
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
            (ClientMessage::Setup(s), false) => self.on_setup(&s, now),
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
                Timer::GoAway | Timer::GoAwayClose | Timer::Drop | Timer::Garbage => {
                    self.on_fault_timer(t, now)
                }
            }
        }
    }

    fn advance(&mut self, now: Instant) -> Instant {
        let now = self.now.map_or(now, |last| last.max(now));
        self.now = Some(now);
        now
    }

    fn send(&mut self, m: ServerMessage) {
        if !self.silent {
            self.out.push_back(Outgoing::Message(m));
        }
    }

    /// The persona markers the wire is searched for (none in a brief session).
    fn markers(&self) -> Vec<&str> {
        if self.brief {
            Vec::new()
        } else {
            self.scenario.markers()
        }
    }

    /// `START_OF_ACTIVITY_INTERRUPTS` (also the answer before setup).
    fn interrupts(&self) -> bool {
        self.config.as_ref().is_none_or(|c| c.interrupts)
    }
}

#[cfg(test)]
#[path = "engine_tests/mod.rs"]
mod tests;
