//! The orchestrator: a pure state machine that decides handoffs between agents and says how to
//! carry them out. It never reads a clock and never touches a socket; the call layer drives it:
//!
//! ```text
//! loop {
//!     feed one input:  orch.handle(input, now)        (or Input::Timeout when the deadline passed)
//!     drain:           while let Some(a) = orch.poll_action() { carry a out }
//!     sleep until:     orch.poll_timeout()            (None: wait for input only)
//! }
//! ```
//!
//! Time never goes backwards: an older `now` counts as the latest one seen.
//!
//! Feed model events in the order they arrive ([`Orchestrator::handle_model_event`] maps a
//! [`ModelEvent`]); feed the model's *first audio of each turn* before pushing it to playout,
//! because the [`Action::Attribute`] it may produce tags that audio. Apply actions in order:
//! actions that send on "the session" mean the active one, which changes at
//! [`Action::SwitchToStandby`] / [`Action::RecreateCold`].
//!
//! **Invariant:** no action flushes playout or cuts a turn being generated. `contextUpdate` and
//! `toolResponse` add no turn and go out at once; every `clientContent` that makes the model
//! speak, every session switch and every cold recreation waits for the turn boundary (see
//! [`super::strategy`]). One caveat the call layer handles: a server that models playback may
//! answer a turn-completing `clientContent` sent after `generationComplete` with `interrupted`
//! for audio it already sent in full; while [`Orchestrator::expects_own_interruption`] is true
//! such an `interrupted` is the handoff's, not the caller's, and playout must not be flushed.

mod calls;
mod decide;
mod handoff;
mod people;
mod sidecars;
mod standby;
mod timers;
mod turns;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

pub use self::people::PersonHandover;
pub use self::timers::Timer;
use self::timers::Timers;
use super::contexts::Resumable;
use super::events::{AgentActivation, CallEvent, TranscriptLine};
use super::matching::append_fragment;
use super::registry::{Registry, Tool};
use super::setup::SessionSetup;
use super::{prompts, tools};
use crate::model::gemini::wire::{ClientContent, ContextUpdate, FunctionResponse};
use crate::model::{Capabilities, ModelEvent, ToolCallRequest};

/// An agent as actions name it: `index` tags audio ([`crate::audio::playout::TurnTag::agent`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentTag {
    pub index: u32,
    pub id: String,
}

/// Something that happened, fed with [`Orchestrator::handle`].
#[derive(Clone, Debug, PartialEq)]
pub enum Input {
    /// A fragment of the caller's words (`finished`: the line is complete).
    CallerTranscript {
        text: String,
        finished: bool,
    },
    /// A fragment of the model's words.
    AgentTranscript {
        text: String,
        finished: bool,
    },
    /// Model audio arrived (at least the first chunk of each turn; repeats are cheap).
    ModelAudio,
    /// The model called a function.
    ToolCall(ToolCallRequest),
    /// The model cancelled these calls (barge-in); their results are no longer wanted.
    ToolCallCancelled(Vec<String>),
    GenerationComplete,
    TurnComplete,
    Interrupted,
    /// The result of an [`Action::RunTool`] (`Err`: a message for the model, never a secret).
    ToolResult {
        call_id: String,
        result: Result<Value, String>,
    },
    /// The session of an [`Action::PrepareStandby`] / [`Action::RecreateCold`] is set up
    /// (its history sent).
    StandbyReady,
    /// That session could not be set up.
    StandbyFailed {
        reason: String,
    },
    /// An operator brings an agent in (bypasses the loop guard, without counting toward it, and
    /// stickiness; not blocking rules).
    Activate {
        agent: String,
    },
    /// An operator ends an agent's part (the caller goes back to the agent before it).
    Deactivate {
        agent: String,
    },
    /// Collected call data changed (e.g. `dicom_status`).
    CallData {
        key: String,
        value: String,
    },
    /// A sidecar agent's result, to be fed to the live session without interrupting it.
    SidecarResult {
        sidecar: String,
        text: String,
        deliver: super::registry::Delivery,
    },
    /// The transfer of an [`Action::HandToPerson`] ended with this outcome.
    PersonTransferEnded {
        outcome: crate::transfer::Outcome,
    },
    /// The deadline of [`Orchestrator::poll_timeout`] passed.
    Timeout,
    /// The service refused `feature` (closing the session; the call resumes it without): plan
    /// with what is left, and carry a handoff that relied on it another way.
    Refused {
        feature: crate::model::catalog::Feature,
    },
}

/// Something the call layer must do, from [`Orchestrator::poll_action`].
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Send `{"contextUpdate": …}` on the session now (in-order, adds no turn).
    ContextUpdate(ContextUpdate),
    /// Send `{"toolResponse": {"functionResponses": [this]}}` on the session now.
    ToolResponse(FunctionResponse),
    /// Send `{"clientContent": …}` on the session now; emitted only at a turn boundary.
    ClientContent(ClientContent),
    /// Run a configured tool (see [`super::runner`]) and feed [`Input::ToolResult`].
    RunTool(ToolRun),
    /// Open a second session with this setup while the current one keeps speaking; send its
    /// history after `setupComplete`, then feed [`Input::StandbyReady`] (or `StandbyFailed`).
    PrepareStandby(SessionSetup),
    /// Make the standby the active session now (a turn boundary): route caller audio to it,
    /// close the old one without flushing playout. The old session's audio already queued plays;
    /// its later events are not fed any more.
    SwitchToStandby { agent: AgentTag },
    /// Close the standby session; it will not be used.
    DiscardStandby { reason: String },
    /// Close the session, then open one with this setup (the cold baseline); feed
    /// [`Input::StandbyReady`] once it is set up.
    RecreateCold(SessionSetup),
    /// Tag model audio from now on (until the next `Attribute`) with this agent.
    Attribute(AgentTag),
    /// Hand the caller to a person once the announcement now playing has played to its end,
    /// then feed [`Input::PersonTransferEnded`].
    HandToPerson(PersonHandover),
    /// A per-call event (serialise with [`CallEvent::to_json_line`]).
    Event(CallEvent),
}

/// A tool to run for a model call.
#[derive(Clone, Debug)]
pub struct ToolRun {
    pub call_id: String,
    pub agent: String,
    pub tool: Arc<Tool>,
    pub args: Value,
}

impl PartialEq for ToolRun {
    fn eq(&self, o: &Self) -> bool {
        self.call_id == o.call_id
            && self.agent == o.agent
            && self.tool.name == o.tool.name
            && self.args == o.args
    }
}

/// An operator command that cannot be carried out.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CommandError {
    #[error("no agent {0:?} in this set")]
    UnknownAgent(String),
    #[error("agent {0:?} is not active")]
    NotActive(String),
    #[error("agent {0:?} already leads the call")]
    AlreadyLeads(String),
    #[error("the primary agent is the only one active; there is no one to hand the caller to")]
    LastAgent,
    #[error("this call runs no agent set")]
    NoAgents,
    /// The model takes no change of instruction or conversation mid-call, so an agent beside
    /// the lead cannot be dropped without a handoff.
    #[error(
        "{0} cannot leave while another agent leads: this model takes no instruction update or \
         conversation note mid-call; deactivate the lead to hand the caller back instead"
    )]
    CannotLeave(String),
    /// Refused for now (another handoff still being carried out, a `blocked_when` condition):
    /// asking again later may succeed.
    #[error("not now: {0}")]
    Blocked(String),
}

/// Where the model's current turn is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// No model turn in progress.
    Idle,
    /// Audio, words or a call of a turn arrived; no `generationComplete` yet.
    Generating,
    /// `generationComplete` arrived: nothing more will be generated for this turn.
    Generated,
}

/// What the live session currently carries.
#[derive(Clone, Debug, PartialEq)]
struct SessionView {
    tool_names: Vec<String>,
    voice: Option<String>,
    /// Bumped when the session is replaced; calls of an older session are dropped.
    epoch: u32,
}

/// The orchestrator of one call.
pub struct Orchestrator {
    reg: Arc<Registry>,
    caps: Capabilities,
    start: Instant,
    now: Instant,
    /// Active agents, the lead first.
    members: Vec<u32>,
    summary: Option<String>,
    session: SessionView,
    phase: Phase,
    turn: u64,
    turn_agent: u32,
    attributed: u32,
    /// The model owes a reply (the caller spoke, or we asked it to speak).
    reply_owed: bool,
    own_interrupt: bool,
    caller_line: String,
    /// The lead when the caller's current line began (the agent the caller spoke to).
    caller_listener: u32,
    caller_fired: bool,
    last_caller: String,
    agent_line: String,
    agent_fired: bool,
    lines: Vec<TranscriptLine>,
    history: Vec<AgentActivation>,
    data: BTreeMap<String, String>,
    /// When each handoff was carried out, and whether an operator commanded it (the loop guard
    /// counts only the others: an operator's commands neither pass it nor use it up).
    handoffs: VecDeque<(Instant, bool)>,
    caller_turns_since_handoff: u32,
    /// The caller's line in progress began before the last handoff (it does not count).
    line_before_handoff: bool,
    return_to: Vec<u32>,
    calls: Vec<calls::PendingCall>,
    held: VecDeque<handoff::Held>,
    hold_started: Option<Instant>,
    standby: Option<handoff::Standby>,
    announced: Option<handoff::Announced>,
    reroute: Option<decide::Reroute>,
    timers: Timers,
    actions: VecDeque<Action>,
    /// The caller's contexts from earlier calls (seed 001), by agent.
    resumes: Vec<Resumable>,
    /// Sidecar results waiting for a quiet moment.
    sidecar_out: VecDeque<sidecars::Pending>,
    /// The agent a decided handoff goes to, until that agent is first heard (or the handoff
    /// fails): every other signal of the same handoff is absorbed.
    pending: Option<u32>,
    /// In-place messages of a handoff (and the answer that makes the new agent speak) waiting
    /// for the announcing turn's generation to complete, so that a service refusing one cuts no
    /// speech being generated.
    deferred: VecDeque<Action>,
    /// A transfer to a person under way.
    person: Option<people::PersonRun>,
}

impl Orchestrator {
    /// A call starting with the set's primary agent, on a model with `caps`.
    pub fn new(reg: Arc<Registry>, caps: Capabilities, now: Instant) -> Orchestrator {
        let primary = reg.primary;
        let members = vec![primary];
        let session = SessionView {
            tool_names: tools::tool_names(&reg, &members),
            voice: reg.agent(primary).voice.clone(),
            epoch: 0,
        };
        let mut o = Orchestrator {
            reg,
            caps,
            start: now,
            now,
            members,
            summary: None,
            session,
            phase: Phase::Idle,
            turn: 0,
            turn_agent: primary,
            attributed: primary,
            reply_owed: false,
            own_interrupt: false,
            caller_line: String::new(),
            caller_listener: primary,
            caller_fired: false,
            last_caller: String::new(),
            agent_line: String::new(),
            agent_fired: false,
            lines: Vec::new(),
            history: Vec::new(),
            data: BTreeMap::new(),
            handoffs: VecDeque::new(),
            caller_turns_since_handoff: 0,
            line_before_handoff: false,
            return_to: Vec::new(),
            calls: Vec::new(),
            held: VecDeque::new(),
            hold_started: None,
            standby: None,
            announced: None,
            reroute: None,
            timers: Timers::default(),
            actions: VecDeque::new(),
            resumes: Vec::new(),
            sidecar_out: VecDeque::new(),
            pending: None,
            deferred: VecDeque::new(),
            person: None,
        };
        o.start_agent(primary, false, String::new());
        let tag = o.tag(primary);
        o.actions.push_back(Action::Attribute(tag));
        o
    }

    /// Event times (`at_ms`) counted from `zero` from now on: the call's media start, where its
    /// turn and reconnect times count from (the leg may start well before the orchestrator, when
    /// the model session opens first, or after it). The primary's activation stays at 0: it is
    /// the call's agent from its first moment.
    pub fn time_from(&mut self, zero: Instant) {
        self.start = zero;
    }

    /// `at` in milliseconds on the call's timeline (as every `at_ms` of its events).
    pub fn at_ms(&self, at: Instant) -> u64 {
        self.ms(at)
    }

    /// The caller's paused contexts from earlier calls: a handoff to one of their agents tells
    /// the agent the earlier summary and working state ([`super::contexts::resume_brief`]).
    pub fn resume_contexts(&mut self, contexts: Vec<Resumable>) {
        self.resumes = contexts;
    }

    /// What the model is told about a handoff to `to`: a resumed context's brief first.
    fn with_resume(&self, to: u32, context: Option<String>) -> Option<String> {
        let id = &self.reg.agent(to).id;
        match self.resumes.iter().find(|r| &r.agent == id) {
            Some(r) => Some(super::contexts::resume_brief(r, context.as_deref())),
            None => context,
        }
    }

    /// The setup of the call's first session (the primary's instruction, tools and voice).
    pub fn initial_setup(&self) -> SessionSetup {
        self.setup_for(&self.members, None, Vec::new())
    }

    /// The setup of a session that continues the call as it is now (the active agents'
    /// instruction, tools and voice), without history: for a session resumed after a dropped
    /// socket, or, with [`super::setup::history_turns`] of the transcript, a fresh one.
    pub fn session_setup(&self) -> SessionSetup {
        self.setup_for(&self.members, self.summary.as_deref(), Vec::new())
    }

    /// Feeds one input. Only operator commands can fail.
    pub fn handle(&mut self, input: Input, now: Instant) -> Result<(), CommandError> {
        self.now = self.now.max(now);
        let now = self.now;
        // An operator's command: its in-place update and any prompt go out below, in that order,
        // like those of every other handoff.
        let mut command = Ok(());
        match input {
            Input::CallerTranscript { text, finished } => self.on_caller(&text, finished, now),
            Input::AgentTranscript { text, .. } => {
                self.model_activity(now);
                append_fragment(&mut self.agent_line, &text);
                self.check_agent_words(now);
            }
            Input::ModelAudio => self.model_activity(now),
            Input::ToolCall(req) => self.on_tool_call(req, now),
            Input::ToolCallCancelled(ids) => self.cancel_calls(&ids),
            Input::GenerationComplete => {
                if self.phase == Phase::Generating {
                    self.phase = Phase::Generated;
                }
                self.close_agent_line(now);
            }
            Input::TurnComplete => {
                self.phase = Phase::Idle;
                self.close_agent_line(now);
            }
            Input::Interrupted => {
                if std::mem::take(&mut self.own_interrupt) {
                    // The server cut the announcement's playback for our own turn.
                } else {
                    self.reply_owed = true;
                }
                self.phase = Phase::Idle;
                self.close_agent_line(now);
            }
            Input::ToolResult { call_id, result } => self.on_tool_result(&call_id, result, now),
            Input::StandbyReady => self.on_standby_ready(),
            Input::StandbyFailed { reason } => self.on_standby_failed(&reason, false, now),
            Input::Activate { agent } => command = self.on_activate(&agent, now),
            Input::Deactivate { agent } => command = self.on_deactivate(&agent, now),
            Input::CallData { key, value } => {
                if self.data.get(&key) != Some(&value) {
                    self.data.insert(key, value);
                    self.check_call_data(now);
                }
            }
            Input::SidecarResult {
                sidecar,
                text,
                deliver,
            } => self.on_sidecar(sidecar, text, deliver, now),
            Input::PersonTransferEnded { outcome } => self.on_person_outcome(&outcome),
            Input::Timeout => self.on_timeout(now),
            Input::Refused { feature } => self.on_refused(feature, now),
        }
        self.release_deferred();
        self.try_release(now);
        self.release_sidecars(now);
        command
    }

    /// Feeds a model event (a tool call with several functions becomes several inputs).
    pub fn handle_model_event(&mut self, ev: &ModelEvent, now: Instant) {
        let inputs: Vec<Input> = match ev {
            ModelEvent::Audio { .. } => vec![Input::ModelAudio],
            ModelEvent::InputTranscript { text, finished } => vec![Input::CallerTranscript {
                text: text.clone(),
                finished: *finished,
            }],
            ModelEvent::OutputTranscript { text, finished } => vec![Input::AgentTranscript {
                text: text.clone(),
                finished: *finished,
            }],
            ModelEvent::GenerationComplete => vec![Input::GenerationComplete],
            ModelEvent::TurnComplete => vec![Input::TurnComplete],
            ModelEvent::Interrupted => vec![Input::Interrupted],
            ModelEvent::ToolCall(calls) => calls.iter().cloned().map(Input::ToolCall).collect(),
            ModelEvent::ToolCallCancellation(ids) => vec![Input::ToolCallCancelled(ids.clone())],
            _ => vec![],
        };
        for i in inputs {
            // Model events are never operator commands, so they cannot fail.
            let _ = self.handle(i, now);
        }
    }

    /// The next thing to do; poll until `None` after every input.
    #[must_use]
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When to feed [`Input::Timeout`], and why; `None`: only inputs matter.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<(Instant, Timer)> {
        self.timers.next()
    }

    /// True while an `interrupted` from the server would be the answer to the orchestrator's own
    /// turn-completing `clientContent` (sent after `generationComplete`), not a barge-in: the call
    /// layer keeps playout then.
    pub fn expects_own_interruption(&self) -> bool {
        self.own_interrupt
    }

    /// A model turn is being generated (no `generationComplete` yet).
    pub fn generating(&self) -> bool {
        self.phase == Phase::Generating
    }

    /// The active agents, the lead first.
    pub fn active(&self) -> Vec<AgentTag> {
        self.members.iter().map(|&m| self.tag(m)).collect()
    }

    /// The call's agent history so far.
    pub fn history(&self) -> &[AgentActivation] {
        &self.history
    }

    /// The transcript so far (complete lines), each tagged with its agent.
    pub fn transcript(&self) -> &[TranscriptLine] {
        &self.lines
    }

    pub fn call_data(&self) -> &BTreeMap<String, String> {
        &self.data
    }

    pub fn registry(&self) -> &Arc<Registry> {
        &self.reg
    }

    /// The `tools` list the model should see for the active agents.
    pub fn tools_json(&self) -> Vec<Value> {
        tools::declarations(&self.reg, &self.members, &self.caps)
    }

    /// What the orchestrator plans with (less than at the start once the service refused
    /// something).
    pub fn capabilities(&self) -> Capabilities {
        self.caps
    }

    /// Sends the deferred in-place messages once the announcing turn is generated (or at once
    /// when nothing is being generated).
    fn release_deferred(&mut self) {
        if self.phase != Phase::Generating {
            self.actions.extend(self.deferred.drain(..));
        }
    }

    // -- shared helpers ------------------------------------------------------------------------

    fn ms(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.start).as_millis() as u64
    }

    fn tag(&self, i: u32) -> AgentTag {
        AgentTag {
            index: i,
            id: self.reg.agent(i).id.clone(),
        }
    }

    fn id(&self, i: u32) -> String {
        self.reg.agent(i).id.clone()
    }

    fn lead(&self) -> u32 {
        self.members.first().copied().unwrap_or(self.reg.primary)
    }

    fn event(&mut self, e: CallEvent) {
        self.actions.push_back(Action::Event(e));
    }

    fn setup_for(
        &self,
        members: &[u32],
        summary: Option<&str>,
        history: Vec<crate::model::gemini::wire::Content>,
    ) -> SessionSetup {
        // An agent without a voice keeps the session's.
        let voice = members
            .iter()
            .find_map(|&m| self.reg.agent(m).voice.clone())
            .or_else(|| self.session.voice.clone());
        SessionSetup {
            agent: self.id(members.first().copied().unwrap_or(self.reg.primary)),
            agents: members.iter().map(|&m| self.id(m)).collect(),
            system_instruction: prompts::system_instruction_for(
                &self.reg,
                members,
                summary,
                tools::handoffs_by_words(&self.caps),
            ),
            tools: tools::declarations(&self.reg, members, &self.caps),
            voice,
            history,
        }
    }

    fn start_agent(&mut self, i: u32, handoff: bool, summary: String) {
        let at_ms = self.ms(self.now);
        let id = self.id(i);
        self.resumes.retain(|r| r.agent != id);
        self.history.push(AgentActivation {
            agent: self.id(i),
            activated_at_ms: at_ms,
            deactivated_at_ms: None,
            message_count: 0,
            activation_summary: summary.clone(),
        });
        let a = self.reg.agent(i);
        let e = CallEvent::AgentStart {
            agent_id: a.id.clone(),
            agent_name: a.name.clone(),
            handoff,
            summary,
            at_ms,
        };
        self.event(e);
    }

    fn end_agent(&mut self, i: u32) {
        let at_ms = self.ms(self.now);
        let id = self.id(i);
        let Some(h) = self
            .history
            .iter_mut()
            .rev()
            .find(|h| h.agent == id && h.deactivated_at_ms.is_none())
        else {
            return;
        };
        h.deactivated_at_ms = Some(at_ms);
        let e = CallEvent::AgentEnd {
            agent_id: id,
            message_count: h.message_count,
            duration_ms: at_ms.saturating_sub(h.activated_at_ms),
            at_ms,
        };
        self.event(e);
    }

    fn on_timeout(&mut self, now: Instant) {
        while let Some(t) = self.timers.pop_due(now) {
            match t {
                Timer::ToolResult => self.expire_calls(now),
                Timer::StandbySetup => self.on_standby_failed("not ready in time", true, now),
                Timer::HeldMessage => {} // try_release (after every input) re-checks the boundary
                Timer::Reroute => self.reroute = None,
            }
        }
    }
}
