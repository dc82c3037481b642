//! The call's side of the orchestrator: feeds it every model event, carries out its actions on
//! the wire (context updates, tool responses, injected turns, tools run in their own tasks, a warm
//! standby session opened while the current one speaks, a cold recreation), and measures each
//! handoff on the caller's timeline: `handoff_gap_ms` is the silence between the last voiced
//! frame of the announcing agent and the first voiced frame of the next one, as played out.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

mod timeline;

use super::metrics::{CallReport, HandoffRecord, TurnRecord, ms, round2};
use super::outbox::{Live, OpenFailed, OpenRequest, Outbox, SessionId, Task};
use crate::agents::{Action, CallEvent, Input, Orchestrator, SessionSetup};
use crate::backend::ModelBackend;
use crate::model::ModelEvent;
use crate::model::gemini::session::SessionConfig;
use crate::model::gemini::wire::{ClientMessage, ToolResponse};
use crate::model::session::{Outbound, SessionEvent};

/// Caller audio messages kept while no session is open (a cold recreation): 30 s of 20 ms
/// frames, more with `[model] uplink_chunk_ms` (a message per chunk).
const MAX_BUFFERED_UPLINK: usize = 1500;

/// What a call with an agent set needs.
pub struct Agents {
    pub orchestrator: Orchestrator,
    /// Where standby and recreated sessions come from.
    pub backend: ModelBackend,
    /// The session settings every new session starts from (model, VAD, transcription).
    pub base: SessionConfig,
    /// What the model can do in place (the orchestrator planned with the same value).
    pub capabilities: crate::model::Capabilities,
    /// Listeners of the call's events (store recorder, live feed, sidecars), if any. A
    /// `handoff_complete` reaches them once its gap is measured.
    pub events: Option<super::tap::EventSink>,
}

impl Agents {
    /// A call starting with `reg`'s primary agent: puts the primary's instruction, tools and
    /// voice into `cfg` (the first session's settings) and keeps `cfg` as the base of every
    /// later session.
    pub fn start(
        reg: std::sync::Arc<crate::agents::Registry>,
        capabilities: crate::model::Capabilities,
        backend: ModelBackend,
        cfg: &mut SessionConfig,
    ) -> Agents {
        // The runtime's clock (paused and advanced in accelerated runs), as the call's shell
        // reads it.
        let now = tokio::time::Instant::now().into_std();
        let orchestrator = Orchestrator::new(reg, capabilities, now);
        orchestrator.initial_setup().apply(cfg);
        Agents {
            orchestrator,
            backend,
            base: cfg.clone(),
            capabilities,
            events: None,
        }
    }
}

/// A session being opened for a handoff.
struct Opening {
    id: SessionId,
    cold: bool,
    /// Sent first on it (a fresh session's history).
    history: Option<ClientMessage>,
}

struct Pending {
    from: String,
    to: String,
    strategy: String,
    trigger: String,
    at_ms: u64,
    /// The input that triggered the handoff arrived at baton → its first wire message queued.
    trigger_to_wire_ms: Option<f64>,
    /// Why the strategy that carried it is not the one configured (or what happened to it).
    note: Option<String>,
    /// Audio still queued when the message that made the new agent speak went out.
    queued_at_trigger_ms: Option<f64>,
}

impl Pending {
    /// Adds `why` to what the record says happened to the handoff.
    fn add_note(&mut self, why: String) {
        self.note = Some(match self.note.take() {
            Some(n) => format!("{n}; {why}"),
            None => why,
        });
    }
}

/// Drives one call's orchestrator.
pub struct AgentsDriver {
    orch: Orchestrator,
    caps: crate::model::Capabilities,
    /// A cold recreation waits until the announcement has been heard (the baseline closes the
    /// session when the agent has finished speaking, then opens the next one).
    deferred_cold: Option<SessionSetup>,
    backend: ModelBackend,
    base: SessionConfig,
    opening: Option<Opening>,
    standby: Option<Live>,
    pending_uplink: Vec<Outbound>,
    uplink_dropped: u64,
    names: HashMap<u32, String>,
    /// Announced handoffs, by target id, waiting for the target's first audio.
    announced: Vec<Pending>,
    /// Handoffs whose first audio has arrived, waiting to be heard.
    completing: Vec<Pending>,
    last_pushed_agent: Option<u32>,
    queued_at_switch: HashMap<u32, f64>,
    last_voice: Option<(u32, Duration)>,
    /// When the input being handled arrived (a model frame's arrival, or a wake-up).
    input_at: Instant,
    /// An announced handoff whose wire message is not sent yet.
    awaiting_wire: Option<(String, Instant)>,
    events: Vec<CallEvent>,
    handoffs: Vec<HandoffRecord>,
    /// The call has listeners: events for them wait in `to_listeners`.
    listened: bool,
    to_listeners: VecDeque<CallEvent>,
    /// Bumped whenever a handoff replaces the call's session.
    session_epoch: u64,
    /// A reconnect is under way: messages for the session wait in `held`.
    holding: bool,
    held: Vec<ClientMessage>,
    /// Tool calls answered since the call last asked.
    responded: Vec<String>,
    /// A `generationComplete` arrived since the actions were last carried out.
    generation_done: bool,
    /// A transfer to a person waiting for the announcement to play to its end (asked at `.1`).
    handover: Option<(crate::agents::PersonHandover, Instant)>,
    /// The person a transfer is under way to (asked of the leg).
    transferring: Option<String>,
}

impl AgentsDriver {
    /// Drives `a`'s orchestrator from `now` in a call whose media timeline starts at
    /// `media_zero`: every event's `at_ms` counts from there, as the call's turn times do.
    pub fn new(a: Agents, now: Instant, media_zero: Instant) -> AgentsDriver {
        let mut orch = a.orchestrator;
        orch.time_from(media_zero);
        // Every agent's id by index, for the voices heard (an `Attribute` names them again).
        let names = orch
            .registry()
            .agents
            .iter()
            .map(|ag| (ag.index, ag.id.clone()))
            .collect();
        AgentsDriver {
            orch,
            caps: a.capabilities,
            deferred_cold: None,
            backend: a.backend,
            base: a.base,
            opening: None,
            standby: None,
            pending_uplink: Vec::new(),
            uplink_dropped: 0,
            names,
            announced: Vec::new(),
            completing: Vec::new(),
            last_pushed_agent: None,
            queued_at_switch: HashMap::new(),
            last_voice: None,
            input_at: now,
            awaiting_wire: None,
            events: Vec::new(),
            handoffs: Vec::new(),
            listened: a.events.is_some(),
            to_listeners: VecDeque::new(),
            session_epoch: 0,
            holding: false,
            held: Vec::new(),
            responded: Vec::new(),
            generation_done: false,
            handover: None,
            transferring: None,
        }
    }

    /// Where sessions come from.
    pub fn backend(&self) -> ModelBackend {
        self.backend.clone()
    }

    /// The settings of a session that continues the call now: the base settings with the
    /// active agents' instruction, tools and voice.
    pub fn current_config(&self) -> SessionConfig {
        let mut cfg = self.base.clone();
        self.orch.session_setup().apply(&mut cfg);
        cfg
    }

    /// The whole transcript as `user`/`model` turns, for a fresh session.
    pub fn history(&self) -> Vec<crate::model::gemini::wire::Content> {
        crate::agents::setup::history_turns(
            self.orch.transcript(),
            crate::agents::registry::HistoryTransfer::All,
        )
    }

    /// Changes whenever a handoff replaces the call's session.
    pub fn session_epoch(&self) -> u64 {
        self.session_epoch
    }

    /// While a reconnect is under way, messages for the session are kept (not dropped).
    pub fn set_holding(&mut self, on: bool) {
        self.holding = on;
    }

    /// The messages kept while holding, in order.
    pub fn take_held(&mut self) -> Vec<ClientMessage> {
        std::mem::take(&mut self.held)
    }

    /// Ids of the tool calls answered since the last call.
    pub fn take_responded(&mut self) -> Vec<String> {
        std::mem::take(&mut self.responded)
    }

    /// The next event for the call's listeners.
    pub fn poll_listener_event(&mut self) -> Option<CallEvent> {
        self.to_listeners.pop_front()
    }

    /// The handoff session being opened.
    pub fn opening_id(&self) -> Option<SessionId> {
        self.opening.as_ref().map(|o| o.id)
    }

    /// The warm standby session.
    pub fn standby_id(&self) -> Option<SessionId> {
        self.standby.map(|s| s.id)
    }

    fn send(&mut self, session: &Option<Live>, msg: ClientMessage, out: &mut Outbox) {
        match session {
            Some(s) => out.message(s.id, msg),
            None if self.holding => self.held.push(msg),
            None => {
                tracing::warn!("no model session to send to (between sessions); message dropped")
            }
        }
    }

    /// When the orchestrator wants to be woken.
    pub fn deadline(&self) -> Option<Instant> {
        self.orch.poll_timeout().map(|(at, _)| at)
    }

    pub fn expects_own_interruption(&self) -> bool {
        self.orch.expects_own_interruption()
    }

    pub fn on_model_event(&mut self, e: &ModelEvent, at: Instant, out: &mut Outbox) {
        self.input_at = at;
        if matches!(e, ModelEvent::GenerationComplete) {
            self.generation_done = true;
        }
        if let ModelEvent::ToolCallCancellation(ids) = e {
            out.tasks.push_back(Task::CancelTools {
                ids: ids.clone(),
                reason: "the caller interrupted".to_owned(),
            });
        }
        self.orch.handle_model_event(e, at);
    }

    pub fn on_timeout(&mut self, now: Instant) {
        self.input_at = now;
        let _ = self.orch.handle(Input::Timeout, now);
    }

    /// The service refused `feature` (and closed the session, which the call resumes): the
    /// orchestrator plans without it from now on, and messages are shaped without it.
    pub fn on_refused(&mut self, feature: crate::model::catalog::Feature, now: Instant) {
        self.input_at = now;
        feature.disable(&mut self.caps);
        let _ = self.orch.handle(Input::Refused { feature }, now);
        let note = format!(
            "{feature} refused by the model (1007); the resumed session, set up for the new \
             agent, carried it"
        );
        // The handoff in flight, when it went by the feature refused: what carries it now is a
        // session made anew with the new agent's setup, a recreate.
        use crate::agents::Strategy;
        use crate::model::catalog::Feature;
        let by = match feature {
            Feature::ContextUpdate => Strategy::ContextUpdate,
            Feature::ClientContent => Strategy::InjectTurn,
            Feature::NonBlocking => Strategy::ToolResponse,
        };
        if let Some(p) = self
            .announced
            .last_mut()
            .filter(|p| p.strategy == by.as_str())
        {
            p.note = Some(format!("{} was tried; {note}", p.strategy));
            p.strategy = Strategy::Recreate.as_str().to_owned();
        }
    }

    /// An input from outside the call (an operator's command, a sidecar's result).
    pub fn command(
        &mut self,
        input: Input,
        now: Instant,
    ) -> Result<(), crate::agents::CommandError> {
        self.input_at = now;
        self.orch.handle(input, now)
    }

    /// A handoff is still being carried out (see [`crate::agents::Orchestrator::handoff_under_way`]).
    pub fn handoff_under_way(&self) -> bool {
        self.orch.handoff_under_way()
    }

    /// True while a session is being opened or a cold recreation waits to run.
    pub fn reopening(&self) -> bool {
        self.opening.is_some() || self.deferred_cold.is_some()
    }

    pub fn buffer_uplink(&mut self, out: Outbound) {
        if self.pending_uplink.len() < MAX_BUFFERED_UPLINK {
            // Delivered late on purpose: not counted as uplink latency.
            let out = match out {
                Outbound::Text { json, .. } => Outbound::Text {
                    json,
                    received_at: None,
                },
                other => other,
            };
            self.pending_uplink.push(out);
        } else {
            self.uplink_dropped += 1;
        }
    }

    pub fn close_standby(&mut self, out: &mut Outbox) {
        if let Some(s) = self.standby.take() {
            out.close(s.id, false);
        }
        self.opening = None;
    }

    /// A tool run for the orchestrator finished.
    pub fn on_tool_result(&mut self, input: Input, now: Instant) {
        self.input_at = now;
        let _ = self.orch.handle(input, now);
    }

    /// The handoff session `id` is up (or could not be opened).
    pub fn on_opened(
        &mut self,
        id: SessionId,
        result: Result<crate::model::Capabilities, OpenFailed>,
        now: Instant,
        session: &mut Option<Live>,
        out: &mut Outbox,
    ) {
        self.input_at = now;
        let Some(Opening { cold, history, .. }) = self.opening.take() else {
            return;
        };
        match result {
            Ok(caps) => {
                let s = Live { id, caps };
                if let Some(h) = history {
                    out.message(id, h);
                }
                if cold {
                    for o in self.pending_uplink.drain(..) {
                        out.send(id, o);
                    }
                    self.session_epoch += 1;
                    *session = Some(s);
                } else {
                    self.standby = Some(s);
                }
                let _ = self.orch.handle(Input::StandbyReady, now);
            }
            Err(e) => {
                let reason = e.reason;
                tracing::warn!(%reason, "handoff session could not be opened");
                let _ = self.orch.handle(Input::StandbyFailed { reason }, now);
            }
        }
    }

    /// An event of the warm standby session (`None`: its events have ended).
    pub fn on_standby_event(&mut self, ev: Option<SessionEvent>, now: Instant, out: &mut Outbox) {
        self.input_at = now;
        let reason = match ev {
            Some(SessionEvent::Model(..)) => return,
            Some(SessionEvent::Dead { silent_for }) => {
                format!(
                    "standby session silent for {:.1} s (dead socket)",
                    silent_for.as_secs_f64()
                )
            }
            Some(SessionEvent::Closed { code, reason }) => {
                format!(
                    "standby session {}",
                    crate::leg::socket::closed_words(code, &reason)
                )
            }
            None => "standby session ended".to_owned(),
        };
        if let Some(s) = self.standby.take() {
            out.drop_session(s.id);
        }
        let _ = self.orch.handle(Input::StandbyFailed { reason }, now);
    }

    /// Carries out every pending action; returns the agent index to tag audio with, if it changed.
    /// `queued`: what the caller will still hear of the current agent from now (queued in
    /// playout, and the rest of the frame on the wire).
    /// `wall`: when the input being handled was handed to the call (the wire message goes out
    /// then).
    pub fn apply_actions(
        &mut self,
        now: Instant,
        wall: Instant,
        queued: Duration,
        session: &mut Option<Live>,
        out: &mut Outbox,
    ) -> Option<u32> {
        let mut attributed = None;
        if std::mem::take(&mut self.generation_done)
            && let Some(p) = self.announced.last_mut()
            && p.queued_at_trigger_ms.is_some()
        {
            // A trigger sent while the announcement was being generated (a WHEN_IDLE answer)
            // takes effect once it is generated: the model cannot start the next turn sooner.
            p.queued_at_trigger_ms = Some(ms(queued));
        }
        while let Some(action) = self.orch.poll_action() {
            if matches!(
                action,
                Action::ContextUpdate(_)
                    | Action::ToolResponse(_)
                    | Action::ClientContent(_)
                    | Action::SwitchToStandby { .. }
            ) && let Some(p) = self.announced.last_mut()
            {
                // The last message before the new agent is heard is what made it speak.
                p.queued_at_trigger_ms = Some(ms(queued));
            }
            if matches!(
                action,
                Action::ContextUpdate(_)
                    | Action::ToolResponse(_)
                    | Action::ClientContent(_)
                    | Action::PrepareStandby(_)
                    | Action::RecreateCold(_)
            ) && let Some((to, since)) = self.awaiting_wire.take()
                && let Some(p) = self.announced.iter_mut().rev().find(|p| p.to == to)
            {
                p.trigger_to_wire_ms = Some(ms(wall.saturating_duration_since(since)));
            }
            match action {
                Action::ContextUpdate(cu) => {
                    self.send(session, ClientMessage::ContextUpdate(cu), out);
                }
                Action::ToolResponse(fr) => {
                    self.responded.extend(fr.id.clone());
                    self.send(
                        session,
                        ClientMessage::ToolResponse(ToolResponse {
                            function_responses: Some(vec![fr]),
                        }),
                        out,
                    );
                }
                Action::ClientContent(cc) => {
                    let msg = self.client_content(cc);
                    self.send(session, msg, out);
                }
                Action::RunTool(run) => out.tasks.push_back(Task::RunTool(run)),
                Action::PrepareStandby(setup) => self.open(&setup, false, out),
                Action::SwitchToStandby { .. } => {
                    if let Some(next) = self.standby.take() {
                        self.session_epoch += 1;
                        if let Some(old) = session.replace(next) {
                            // Its audio is all received (the switch waits for a turn boundary)
                            // and keeps playing from the queue; only the socket goes.
                            out.close(old.id, false);
                        }
                    }
                }
                Action::DiscardStandby { reason } => {
                    tracing::info!(%reason, "standby session discarded");
                    self.close_standby(out);
                }
                Action::RecreateCold(setup) => self.deferred_cold = Some(setup),
                Action::Attribute(tag) => {
                    self.names.insert(tag.index, tag.id);
                    attributed = Some(tag.index);
                }
                Action::HandToPerson(h) => self.handover = Some((h, now)),
                Action::Event(ev) => self.on_event(ev, now),
            }
        }
        attributed
    }

    /// The transfer to a person that is due now, if one waits: the announcing turn is generated
    /// and nothing of it is left to play (`drained`), or the wait passed its guard.
    pub fn due_transfer(&mut self, drained: bool, now: Instant) -> Option<Task> {
        let (h, since) = self.handover.as_ref()?;
        let settings = crate::transfer::Settings::for_agent(&h.human);
        let warm = h.human.handover == crate::transfer::Handover::Warm;
        // A warm transfer dials at once: the caller stays with the agent while the phone rings.
        let announced = warm || (drained && !self.orch.generating());
        if !announced && now < *since + settings.announcement_guard {
            return None;
        }
        let (h, _) = self.handover.take()?;
        self.transferring = Some(h.person.clone());
        let brief = warm.then(|| Box::new(self.brief_request(&h)));
        Some(Task::Transfer(Box::new(super::outbox::TransferRequest {
            to: h.person,
            target: h.human.destination,
            trunk: h.human.trunk,
            settings,
            plan: h.human.handover,
            brief,
            hold: h.human.hold,
        })))
    }

    /// The brief session for a warm transfer to `h`: the call's model and voice, told whom it
    /// briefs and what the agent learned, with the two answers as its only tools.
    fn brief_request(&self, h: &crate::agents::PersonHandover) -> super::outbox::BriefRequest {
        let name = &h.name;
        let summary = if h.summary.trim().is_empty() {
            "the agent noted nothing beyond the request for you".to_owned()
        } else {
            h.summary.trim().to_owned()
        };
        let mut config = self.base.clone();
        config.system_instruction = Some(format!(
            "You are briefing {name}, who is about to take a transferred call. You speak to \
             {name} only; the caller cannot hear you and is waiting with the agent {from}. What \
             {from} learned from the caller: {summary}\n\nSay in one or two short sentences who \
             is calling and what they need, then ask {name} whether they will take the call. \
             When {name} says yes, call accept_transfer. When {name} says no or cannot, call \
             decline_transfer with their reason. Do not help with the request yourself.",
            from = h.from,
        ));
        config.tools = crate::agents::tools::brief_declarations(name);
        // The person's leg is not the caller's: the brief speaks PCM, at the person's rate.
        config.phone_law = None;
        config.resume_handle = None;
        config.history_in_client_content = false;
        super::outbox::BriefRequest {
            name: name.clone(),
            backend: self.backend.clone(),
            config,
            start: format!("The person has answered. Brief {name} now."),
        }
    }

    /// An event of the transfer under way: on the call's event feed, and its outcome to the
    /// orchestrator. Returns the person when the caller has been handed to them.
    pub fn on_transfer_event(
        &mut self,
        ev: crate::transfer::Event,
        now: Instant,
    ) -> Option<String> {
        self.input_at = now;
        let to = self.transferring.clone().unwrap_or_default();
        let finished = match &ev {
            crate::transfer::Event::Finished(r) => Some(r.outcome.clone()),
            _ => None,
        };
        let e = CallEvent::Transfer {
            to: to.clone(),
            step: ev,
            at_ms: self.orch.at_ms(now),
        };
        self.on_event(e, now);
        let outcome = finished?;
        self.transferring = None;
        let _ = self.orch.handle(
            Input::PersonTransferEnded {
                outcome: outcome.clone(),
            },
            now,
        );
        // A blind transfer hands the caller's leg away; a warm one keeps it (bridged).
        matches!(outcome, crate::transfer::Outcome::Transferred).then_some(to)
    }

    /// True while a cold recreation waits for the announcement to finish playing.
    /// Work that waits for a playout tick (a cold recreation for the playout to drain, a
    /// transfer for the announcement to be heard).
    pub fn tick_work(&self) -> bool {
        self.deferred_cold.is_some() || self.handover.is_some()
    }

    pub fn cold_pending(&self) -> bool {
        self.deferred_cold.is_some()
    }

    /// The announcement has been heard: close the session, then open the next one.
    pub fn run_cold(&mut self, session: &mut Option<Live>, out: &mut Outbox) {
        if let Some(setup) = self.deferred_cold.take() {
            if let Some(old) = session.take() {
                out.close(old.id, false);
            }
            self.open(&setup, true, out);
        }
    }

    /// A prompt turn as the model accepts it: models that refuse mid-session client content
    /// (gemini-3.1) take the same words as realtime text, which starts a turn without touching
    /// the history.
    fn client_content(&self, cc: crate::model::gemini::wire::ClientContent) -> ClientMessage {
        use crate::model::gemini::wire::RealtimeInput;
        if !self.caps.mid_session_client_content
            && cc.turn_complete == Some(true)
            && let Some(text) = single_user_text(&cc)
        {
            return ClientMessage::RealtimeInput(RealtimeInput {
                text: Some(text),
                ..Default::default()
            });
        }
        ClientMessage::ClientContent(cc)
    }

    fn open(&mut self, setup: &SessionSetup, cold: bool, out: &mut Outbox) {
        let mut cfg = self.base.clone();
        setup.apply(&mut cfg);
        cfg.history_in_client_content = !setup.history.is_empty();
        let history = setup.history_message();
        let id = out.open(OpenRequest {
            backend: self.backend.clone(),
            config: cfg,
            standby_socket: false,
        });
        self.opening = Some(Opening { id, cold, history });
    }

    fn on_event(&mut self, ev: CallEvent, _now: Instant) {
        if self.listened && !matches!(ev, CallEvent::HandoffComplete { .. }) {
            self.to_listeners.push_back(ev.clone());
        }
        match &ev {
            CallEvent::HandoffAnnouncement {
                from,
                to,
                strategy,
                trigger,
                at_ms,
                note,
                ..
            } => {
                self.announced.push(Pending {
                    from: from.clone(),
                    to: to.clone(),
                    strategy: strategy.as_str().to_owned(),
                    trigger: serde_json::to_value(trigger)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default(),
                    at_ms: *at_ms,
                    trigger_to_wire_ms: None,
                    note: note.clone(),
                    queued_at_trigger_ms: None,
                });
                self.awaiting_wire = Some((to.clone(), self.input_at));
            }
            CallEvent::HandoffComplete { to, .. } => {
                // Its gap is known once the new agent is heard.
                if let Some(p) = self.take_announced(to) {
                    self.completing.push(p);
                }
                return self.events.push(ev);
            }
            CallEvent::HandoffBlocked {
                from, to, reason, ..
            } => {
                tracing::info!(%from, %to, %reason, "handoff blocked");
            }
            CallEvent::HandoffFailed { to, reason, .. } => {
                // Never heard, and for this reason (not superseded by a later one).
                if let Some(i) = self.announced.iter().rposition(|p| &p.to == to) {
                    let mut p = self.announced.remove(i);
                    p.add_note(format!("failed: {reason}"));
                    self.handoffs.push(timeline::unheard(p));
                }
            }
            _ => {}
        }
        self.events.push(ev);
    }
}

/// The text of a client content that is one user turn of text parts.
fn single_user_text(cc: &crate::model::gemini::wire::ClientContent) -> Option<String> {
    let turns = cc.turns.as_ref()?;
    let [turn] = turns.as_slice() else {
        return None;
    };
    if turn.role.as_deref().is_some_and(|r| r != "user") {
        return None;
    }
    let texts: Option<Vec<&str>> = turn.parts.iter().map(|p| p.text.as_deref()).collect();
    texts.map(|t| t.join(" "))
}
