//! Carrying out a handoff: the guards (another handoff in progress, blocking rules, the loop
//! guard), the strategy choice, the wire actions of each strategy and when they go out (held
//! messages and standby switches wait for the turn boundary), and the bookkeeping of who is
//! active (history, events, the way back).

use std::time::Instant;

use serde_json::json;

use super::{Action, CommandError, Orchestrator, Phase, Timer};
use crate::agents::events::{CallEvent, TriggerKind};
use crate::agents::phrases::PhraseRule;
use crate::agents::registry::{Isolation, Mode, Scheduling};
use crate::agents::setup::history_turns;
use crate::agents::strategy::{self, Situation, Strategy};
use crate::agents::{prompts, tools};
use crate::model::gemini::wire::{
    ClientContent, Content, ContextUpdate, FunctionResponseScheduling, ToolsWrapper,
};

/// Why a handoff is refused while another is carried out.
pub(super) const UNDER_WAY: &str = "another handoff is in progress";

/// The model call a handoff decision came from.
#[derive(Clone, Debug)]
pub(super) struct CallCtx {
    pub id: String,
    pub name: String,
    pub non_blocking: bool,
    /// A generated transfer tool (answered by the orchestrator), not a routing tool.
    pub transfer: bool,
}

impl CallCtx {
    pub fn sched(&self) -> Option<FunctionResponseScheduling> {
        self.non_blocking
            .then_some(FunctionResponseScheduling::WhenIdle)
    }
}

/// Whom a handoff goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Target {
    Agent(u32),
    /// Back to the agent before the lead (or the primary).
    Back,
    /// This agent's part ends.
    Leave(u32),
}

pub(super) struct Request {
    pub target: Target,
    pub trigger: TriggerKind,
    pub phrase_rule: Option<PhraseRule>,
    pub reason: String,
    pub summary: Option<String>,
    pub call: Option<CallCtx>,
    pub manual: bool,
}

impl Request {
    /// An operator's command (admin API): no phrase, summary or model call behind it.
    fn operator(target: Target, reason: String) -> Request {
        Request {
            target,
            trigger: TriggerKind::Manual,
            phrase_rule: None,
            reason,
            summary: None,
            call: None,
            manual: true,
        }
    }
}

/// Who takes over, with what the model is told and why (for the history).
#[derive(Clone, Debug)]
pub(super) struct Switch {
    pub members: Vec<u32>,
    /// For the model: a transfer's summary, or what the caller last said.
    pub context: Option<String>,
    /// For the agent history: the summary, or the trigger's reason.
    pub why: String,
    pub strategy: Strategy,
}

/// A handoff whose new session is being prepared (or, cold, is to be opened).
pub(super) struct Standby {
    pub switch: Switch,
    pub from: String,
    pub cold: bool,
    /// Cold: the close-then-open was requested.
    pub sent: bool,
    pub ready: bool,
    /// Cold: reopening the previous agents after a failed replacement.
    pub restore: bool,
    /// Transcript lines when the setup was made; later ones go into the greeting prompt.
    pub lines_at_setup: usize,
}

/// A turn-completing `clientContent` waiting for the turn boundary; `switch`: the agents that
/// take over when it goes out (an injected brief), none for a greeting prompt.
pub(super) struct Held {
    content: ClientContent,
    switch: Option<Switch>,
}

/// A handoff waiting for the new agent's first audio.
pub(super) struct Announced {
    pub from: String,
    pub strategy: Strategy,
}

impl Orchestrator {
    /// The active set after `target`, or `None` when nothing would change.
    fn next_members(&self, target: Target) -> Option<Vec<u32>> {
        let lead = self.lead();
        let next = match target {
            Target::Agent(t) if self.members.contains(&t) => {
                if t == lead {
                    return None;
                }
                vec![t]
            }
            Target::Agent(t) if self.reg.agent(t).policy.mode == Mode::Joint => {
                let mut v = vec![t];
                v.extend(self.members.iter().copied());
                v
            }
            Target::Agent(t) => vec![t],
            Target::Leave(a) if a != lead => {
                self.members.iter().copied().filter(|&m| m != a).collect()
            }
            Target::Back | Target::Leave(_) => {
                if self.members.len() > 1 {
                    self.members[1..].to_vec()
                } else {
                    let back = self.return_to.last().copied().unwrap_or(self.reg.primary);
                    if back == lead {
                        return None;
                    }
                    vec![back]
                }
            }
        };
        (next != self.members).then_some(next)
    }

    /// Decides and starts a handoff: `Ok(false)` when it changes nothing (absorbed by one already
    /// decided, or the target already leads), `Err` with the reason when it was blocked (the
    /// `handoff_blocked` event already sent).
    pub(super) fn begin_handoff(&mut self, req: Request, now: Instant) -> Result<bool, String> {
        let from = self.lead();
        if self.pending.is_some() && !req.manual {
            // Another signal (the announcing agent's words, a routing tool's arguments) of the
            // handoff already decided: absorbed. Transfer calls are answered in `calls`.
            return Ok(false);
        }
        let Some(next) = self.next_members(req.target) else {
            if let Some(c) = req.call.as_ref().filter(|c| c.transfer) {
                let msg = format!("{} is already speaking", self.reg.agent(self.lead()).name);
                let r = tools::output(&c.id, &c.name, json!({ "status": msg }), c.sched());
                self.actions.push_back(Action::ToolResponse(r));
            }
            return Ok(false);
        };
        let to = next[0];
        let entering: Vec<u32> = next
            .iter()
            .copied()
            .filter(|m| !self.members.contains(m))
            .collect();
        // An operator's command may follow a handoff already carried in place (the new agent
        // not yet heard); only one still being carried out (a session being prepared, a message
        // waiting for the turn boundary) blocks it.
        let blocked = if self.handoff_under_way() {
            Some(UNDER_WAY.to_owned())
        } else if let Some(c) = entering.iter().find_map(|&m| {
            let data = &self.data;
            self.reg
                .agent(m)
                .blocked_when
                .iter()
                .find(|c| c.holds(data))
        }) {
            Some(format!("blocked: {}", c.describe()))
        } else {
            self.loop_guard(now, req.manual)
        };
        if let Some(reason) = blocked {
            let e = CallEvent::HandoffBlocked {
                from: self.id(from),
                to: self.id(to),
                trigger: req.trigger,
                reason: reason.clone(),
                at_ms: self.ms(now),
            };
            self.event(e);
            if let Some(c) = &req.call
                && c.transfer
            {
                let msg = format!(
                    "transfer to {} refused ({reason}); tell the caller and carry on",
                    self.reg.agent(to).name
                );
                let r = tools::error(&c.id, &c.name, &msg, c.sched());
                self.actions.push_back(Action::ToolResponse(r));
            }
            return Err(reason);
        }
        self.handoffs.push_back((now, req.manual));
        self.pending = Some(to);
        let lead_changes = to != from;
        let isolated = lead_changes
            && [to, from]
                .iter()
                .any(|&a| self.reg.agent(a).policy.isolation == Isolation::Isolated);
        let voice = next.iter().find_map(|&m| self.reg.agent(m).voice.clone());
        let situation = Situation {
            caps: self.caps,
            isolated,
            // An agent without a voice speaks in the session's.
            voice_changes: voice.is_some() && voice != self.session.voice,
            tools_change: tools::tool_names(&self.reg, &next) != self.session.tool_names,
            from_non_blocking_call: req.call.as_ref().is_some_and(|c| c.non_blocking),
        };
        let choice = strategy::choose(self.reg.agent(to).policy.strategy, &situation);
        let e = CallEvent::HandoffAnnouncement {
            from: self.id(from),
            to: self.id(to),
            strategy: choice.strategy,
            trigger: req.trigger,
            phrase_rule: req.phrase_rule,
            reason: req.reason.clone(),
            note: choice.note,
            at_ms: self.ms(now),
        };
        self.event(e);
        let last = self.last_caller.trim();
        // Seed 001: the activation summary is the transfer's, else the agent's template.
        let template = &self.reg.agent(to).summary_template;
        let summary = req.summary.clone().or_else(|| {
            (!template.is_empty()).then(|| {
                template
                    .replace("{reason}", &req.reason)
                    .replace("{caller}", last)
                    .replace("{from}", &self.reg.agent(from).name)
            })
        });
        let context = summary
            .clone()
            .or_else(|| (!last.is_empty()).then(|| format!("The caller said: \"{last}\"")));
        let context = self.with_resume(to, context);
        let sw = Switch {
            members: next.clone(),
            context: context.clone(),
            why: summary.unwrap_or_else(|| req.reason.clone()),
            strategy: choice.strategy,
        };
        match choice.strategy {
            Strategy::ContextUpdate | Strategy::Auto => {
                self.apply_members(sw);
                let update = self.update_in_place(&next, context.as_deref());
                // The update and the answer that makes the new agent speak go out once the
                // announcement is generated: a refusal then cuts nothing, and the new agent
                // cannot speak earlier anyway. A model paused on the call is answered at once.
                let paused = self.caps.calls_pause_speech
                    && req.call.as_ref().is_some_and(|c| !c.non_blocking);
                if paused {
                    self.actions.push_back(update);
                } else {
                    self.deferred.push_back(update);
                }
                match &req.call {
                    Some(c) if c.transfer => {
                        let v = json!({
                            "status": "transferred",
                            "agent": self.reg.agent(to).name,
                            "next": format!("continue as {}: greet the caller briefly", self.reg.agent(to).name),
                        });
                        let r = Action::ToolResponse(tools::output(&c.id, &c.name, v, c.sched()));
                        if paused {
                            self.actions.push_back(r);
                        } else {
                            self.deferred.push_back(r);
                        }
                    }
                    Some(c) => {
                        // A blocking or WHEN_IDLE routing answer makes the model speak; a
                        // SILENT one does not, so the new agent is prompted at the boundary.
                        let silent = c.non_blocking
                            && self
                                .reg
                                .tool(&c.name)
                                .is_some_and(|t| t.scheduling == Scheduling::Silent);
                        if silent && self.reg.agent(to).policy.greet {
                            let text =
                                prompts::greeting_prompt(&self.reg, to, context.as_deref(), &[]);
                            self.hold(text, None);
                        }
                    }
                    None => {
                        let caller_waits = self.phase == Phase::Idle && self.reply_owed;
                        if self.reg.agent(to).policy.greet && !caller_waits {
                            let text =
                                prompts::greeting_prompt(&self.reg, to, context.as_deref(), &[]);
                            self.hold(text, None);
                        }
                    }
                }
            }
            Strategy::ToolResponse => {
                self.apply_members(sw);
                let brief = prompts::brief(&self.reg, &next, context.as_deref());
                if let Some(c) = &req.call {
                    if c.transfer {
                        let v = json!({ "status": "transferred", "brief": brief });
                        let sched = Some(FunctionResponseScheduling::WhenIdle);
                        let r = tools::output(&c.id, &c.name, v, sched);
                        self.actions.push_back(Action::ToolResponse(r));
                    } else {
                        self.attach_brief(&c.id, brief);
                    }
                }
            }
            Strategy::InjectTurn => {
                // The agents change when the brief goes out: until then the model speaks as
                // the old ones.
                self.ack_transferring(&req);
                let brief = prompts::brief(&self.reg, &next, context.as_deref());
                self.hold(brief, Some(sw));
            }
            Strategy::Recreate | Strategy::RecreateCold => {
                self.ack_transferring(&req);
                let cold = choice.strategy == Strategy::RecreateCold;
                let sb = Standby {
                    switch: sw,
                    from: self.id(from),
                    cold,
                    sent: false,
                    ready: false,
                    restore: false,
                    lines_at_setup: self.lines.len(),
                };
                if !cold {
                    let setup = self.standby_setup(&sb);
                    self.actions.push_back(Action::PrepareStandby(setup));
                    let at = now + self.reg.timing.standby_timeout;
                    self.timers.set(Timer::StandbySetup, at);
                }
                self.standby = Some(sb);
            }
        }
        Ok(true)
    }

    /// The service refused `feature`, closing the session; the call resumes it. From now on
    /// handoffs are planned without the feature. A handoff already carried in place by it (its
    /// agents are active, not yet heard) goes on in the resumed session, whose setup holds the
    /// new agents' instruction and tools; the caller's last turn, which no resumption handle
    /// covers while the model answers it, is replayed to that session and the new lead answers
    /// it (a prompt on top would be a second trigger).
    pub(super) fn on_refused(&mut self, feature: crate::model::catalog::Feature, now: Instant) {
        use crate::model::catalog::Feature;
        feature.disable(&mut self.caps);
        let at_ms = self.ms(now);
        self.event(CallEvent::Notice {
            message: format!(
                "the model refused {feature}; the session resumes and handoffs carry on without it"
            ),
            at_ms,
        });
        if feature == Feature::ContextUpdate && self.pending.is_some() {
            self.deferred.clear();
            self.session.tool_names = tools::tool_names(&self.reg, &self.members);
        }
    }

    /// The loop guard: at most `max_handoffs` within the window. Operators are exempt both
    /// ways: their commands are never refused by it and never count toward it.
    fn loop_guard(&mut self, now: Instant, manual: bool) -> Option<String> {
        let g = &self.reg.guards;
        while self
            .handoffs
            .front()
            .is_some_and(|&(t, _)| now.saturating_duration_since(t) >= g.window)
        {
            self.handoffs.pop_front();
        }
        let counted = self.handoffs.iter().filter(|&&(_, op)| !op).count();
        (!manual && counted >= g.max_handoffs as usize).then(|| {
            format!(
                "loop guard: {counted} handoffs within {} s already",
                g.window.as_secs()
            )
        })
    }

    /// Answers a transfer call whose handoff goes out later, quietly: the answer the protocol
    /// requires, and no trigger (the handoff's own message makes the new agent speak).
    fn ack_transferring(&mut self, req: &Request) {
        if let Some(c) = req.call.as_ref().filter(|c| c.transfer) {
            let quiet = Some(FunctionResponseScheduling::Silent);
            let r = tools::output(&c.id, &c.name, json!({ "status": "transferring" }), quiet);
            self.actions.push_back(Action::ToolResponse(r));
        }
    }

    pub(super) fn standby_setup(&self, sb: &Standby) -> crate::agents::setup::SessionSetup {
        let sw = &sb.switch;
        let lead = self.reg.agent(sw.members[0]);
        let history = history_turns(&self.lines, lead.policy.history);
        self.setup_for(&sw.members, sw.context.as_deref(), history)
    }

    /// Queues a turn-completing `clientContent` for the turn boundary.
    pub(super) fn hold(&mut self, text: String, switch: Option<Switch>) {
        self.held.push_back(Held {
            content: ClientContent {
                turns: Some(vec![Content::text(Some("user"), text)]),
                turn_complete: Some(true),
            },
            switch,
        });
    }

    /// Makes the switch's agents the active ones: history, events, the way back, attribution.
    pub(super) fn apply_members(&mut self, sw: Switch) {
        let next = sw.members;
        let old = std::mem::replace(&mut self.members, next.clone());
        let (from, to) = (old[0], next[0]);
        for &m in old.iter().filter(|m| !next.contains(m)) {
            self.end_agent(m);
        }
        for &m in next.iter().filter(|m| !old.contains(m)) {
            let why = if m == to {
                sw.why.clone()
            } else {
                String::new()
            };
            self.start_agent(m, true, why);
        }
        if from != to {
            if self.return_to.last() == Some(&to) {
                self.return_to.pop();
            } else {
                self.return_to.push(from);
            }
        }
        self.summary = sw.context;
        self.reroute = None;
        self.timers.stop(Timer::Reroute);
        self.caller_turns_since_handoff = 0;
        self.line_before_handoff = !self.caller_line.is_empty();
        self.announced = Some(Announced {
            from: self.id(from),
            strategy: sw.strategy,
        });
    }

    /// The turn boundary: nothing being generated, no BLOCKING call unanswered, and no reply
    /// owed to the caller (or the model has not started it within `held_timeout`).
    fn at_boundary(&self, now: Instant) -> bool {
        if self.blocking_call_open() {
            return false;
        }
        match self.phase {
            Phase::Generating => false,
            Phase::Generated => true,
            Phase::Idle => {
                !self.reply_owed
                    || self
                        .hold_started
                        .is_some_and(|t| now >= t + self.reg.timing.held_timeout)
            }
        }
    }

    /// Sends what waits for the turn boundary, if this is one.
    pub(super) fn try_release(&mut self, now: Instant) {
        let waiting = !self.held.is_empty()
            || self
                .standby
                .as_ref()
                .is_some_and(|s| (s.cold && !s.sent) || (!s.cold && s.ready));
        if !waiting {
            return;
        }
        if !self.at_boundary(now) {
            if self.hold_started.is_none() && self.phase == Phase::Idle {
                self.hold_started = Some(now);
                let at = now + self.reg.timing.held_timeout;
                self.timers.set(Timer::HeldMessage, at);
            }
            return;
        }
        self.hold_started = None;
        self.timers.stop(Timer::HeldMessage);
        let pending = self
            .standby
            .as_ref()
            .map(|s| (s.cold, s.sent, s.ready, s.switch.members[0]));
        if let Some((cold, sent, ready, lead)) = pending {
            if cold && !sent {
                let lines = self.lines.len();
                if let Some(sb) = self.standby.as_mut() {
                    sb.sent = true;
                    sb.lines_at_setup = lines;
                }
                if let Some(sb) = self.standby.as_ref() {
                    let setup = self.standby_setup(sb);
                    self.actions.push_back(Action::RecreateCold(setup));
                }
                let at = now + self.reg.timing.standby_timeout;
                self.timers.set(Timer::StandbySetup, at);
            } else if !cold && ready {
                let tag = self.tag(lead);
                self.actions
                    .push_back(Action::SwitchToStandby { agent: tag });
                self.finish_standby();
            }
            return;
        }
        let speaking_turn = self.phase == Phase::Generated;
        while let Some(h) = self.held.pop_front() {
            if let Some(sw) = h.switch {
                self.apply_members(sw);
            }
            self.actions.push_back(Action::ClientContent(h.content));
            self.reply_owed = true;
            if speaking_turn {
                self.own_interrupt = true;
            }
        }
    }

    /// A handoff is still being carried out: a session being prepared, or a message waiting for
    /// the turn boundary (an operator's handoff command now is refused "not now").
    pub fn handoff_under_way(&self) -> bool {
        self.standby.is_some() || !self.held.is_empty()
    }

    /// An operator's command refused with `e`, unless another handoff is being carried out: who
    /// leads and who is active are about to change, so "not now" is the answer that holds.
    fn unless_busy(&self, e: CommandError) -> CommandError {
        if self.handoff_under_way() {
            CommandError::Blocked(UNDER_WAY.to_owned())
        } else {
            e
        }
    }

    pub(super) fn on_activate(&mut self, agent: &str, now: Instant) -> Result<(), CommandError> {
        if self.reg.find(agent).is_none()
            && let Some(person) = self.reg.person(agent)
        {
            let index = person.index;
            return self
                .begin_person(index, TriggerKind::Manual, None, now)
                .map_err(CommandError::Blocked);
        }
        let a = self
            .reg
            .find(agent)
            .ok_or_else(|| CommandError::UnknownAgent(agent.to_owned()))?;
        let (index, name) = (a.index, a.name.clone());
        let request = Request::operator(
            Target::Agent(index),
            format!("an operator brought in {name}"),
        );
        let begun = self
            .begin_handoff(request, now)
            .map_err(CommandError::Blocked)?;
        if !begun {
            return Err(self.unless_busy(CommandError::AlreadyLeads(agent.to_owned())));
        }
        Ok(())
    }

    /// An operator ends the part of an agent that does not lead (the other member of a joint
    /// call). The lead goes on speaking, so this is no handoff: nothing is announced or heard and
    /// nothing counts toward the loop guard. The agent's part ends (`agent_end`), and once the
    /// turn being generated is done the session takes the instruction and tools without it in
    /// place, or, on a model that cannot update them, a note in the conversation that the agent
    /// has left (no turn: nothing is said); the tool filter refuses the agent's tools from then
    /// on. A model that takes neither mid-call refuses the command.
    fn leave_beside_the_lead(&mut self, agent: u32) -> Result<(), CommandError> {
        if self.handoff_under_way() {
            return Err(CommandError::Blocked(UNDER_WAY.to_owned()));
        }
        if !self.caps.update_instructions && !self.caps.mid_session_client_content {
            // Nothing reaches this model mid-call without making it speak or replacing its
            // session: it would go on answering as the agent said to be gone.
            return Err(CommandError::CannotLeave(
                self.reg.agent(agent).name.clone(),
            ));
        }
        self.members.retain(|&m| m != agent);
        self.end_agent(agent);
        if !self.caps.update_instructions {
            // A note in the conversation, without a turn: the model is told who is left.
            let lead = self.reg.agent(self.lead()).name.clone();
            let text = format!(
                "[{} has left the call. From now on only {lead} speaks: answer only as {lead}, in \
                 {lead}'s area.]",
                self.reg.agent(agent).name
            );
            self.deferred
                .push_back(Action::ClientContent(ClientContent {
                    turns: Some(vec![Content::text(Some("user"), text)]),
                    turn_complete: Some(false),
                }));
        } else {
            let members = self.members.clone();
            let summary = self.summary.clone();
            let update = self.update_in_place(&members, summary.as_deref());
            self.deferred.push_back(update);
        }
        Ok(())
    }

    /// The in-place update that makes `members` the session's agents: their instruction (with
    /// `context`), and their tools where the model replaces tools in place (then the session's
    /// tool names follow).
    fn update_in_place(&mut self, members: &[u32], context: Option<&str>) -> Action {
        let instruction = prompts::system_instruction_for(
            &self.reg,
            members,
            context,
            tools::handoffs_by_words(&self.caps),
        );
        let tools = self.caps.update_tools.then(|| ToolsWrapper {
            tools: tools::declarations(&self.reg, members, &self.caps),
        });
        if tools.is_some() {
            self.session.tool_names = tools::tool_names(&self.reg, members);
        }
        Action::ContextUpdate(ContextUpdate {
            system_instruction: Some(Content::text(None, instruction)),
            tools,
        })
    }

    pub(super) fn on_deactivate(&mut self, agent: &str, now: Instant) -> Result<(), CommandError> {
        let a = self
            .reg
            .find(agent)
            .ok_or_else(|| CommandError::UnknownAgent(agent.to_owned()))?;
        let (index, name) = (a.index, a.name.clone());
        if !self.members.contains(&index) {
            return Err(self.unless_busy(CommandError::NotActive(agent.to_owned())));
        }
        if self.next_members(Target::Leave(index)).is_none() {
            return Err(self.unless_busy(CommandError::LastAgent));
        }
        if index != self.lead() {
            return self.leave_beside_the_lead(index);
        }
        let request = Request::operator(
            Target::Leave(index),
            format!("an operator ended {name}'s part"),
        );
        self.begin_handoff(request, now)
            .map_err(CommandError::Blocked)?;
        Ok(())
    }
}
