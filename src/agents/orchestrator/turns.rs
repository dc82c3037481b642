//! Model turns and transcripts: when a model turn starts (and which agent it is attributed to),
//! the caller's and the agent's lines as they complete, each tagged with its agent, and the
//! message counts of the agent history (an agent's lines, each toward its latest activation).

use std::time::Instant;

use super::{Action, Orchestrator, Phase, Timer};
use crate::agents::events::{CallEvent, Speaker, TranscriptLine};
use crate::agents::matching::append_fragment;

impl Orchestrator {
    /// Audio, words or a call from the model: a new turn starts unless one is being generated.
    pub(super) fn model_activity(&mut self, now: Instant) {
        if self.phase == Phase::Generating {
            return;
        }
        self.phase = Phase::Generating;
        self.close_caller_line(now);
        self.close_agent_line(now);
        self.reply_owed = false;
        self.own_interrupt = false;
        self.hold_started = None;
        self.timers.stop(Timer::HeldMessage);
        self.turn += 1;
        self.agent_fired = false;
        let speaker = self.pick_speaker();
        self.turn_agent = speaker;
        if speaker != self.attributed {
            self.attributed = speaker;
            let tag = self.tag(speaker);
            self.actions.push_back(Action::Attribute(tag));
        }
        if let Some(a) = self.announced.take() {
            self.pending = None;
            let e = CallEvent::HandoffComplete {
                from: a.from,
                to: self.id(speaker),
                strategy: a.strategy,
                gap_ms: None,
                at_ms: self.ms(now),
            };
            self.event(e);
        }
    }

    pub(super) fn on_caller(&mut self, text: &str, finished: bool, now: Instant) {
        if !text.trim().is_empty() {
            if self.caller_line.is_empty() {
                self.caller_listener = self.lead();
            }
            append_fragment(&mut self.caller_line, text);
            self.last_caller = self.caller_line.clone();
            self.reply_owed = true;
            self.check_caller_words(now);
        }
        if finished {
            self.close_caller_line(now);
        }
    }

    pub(super) fn close_caller_line(&mut self, now: Instant) {
        let text = std::mem::take(&mut self.caller_line);
        self.caller_fired = false;
        if text.trim().is_empty() {
            return;
        }
        if !std::mem::take(&mut self.line_before_handoff) {
            self.caller_turns_since_handoff += 1;
        }
        self.push_line(
            Speaker::Caller,
            self.caller_listener,
            text.trim().to_owned(),
            now,
        );
    }

    pub(super) fn close_agent_line(&mut self, now: Instant) {
        let text = std::mem::take(&mut self.agent_line);
        if text.trim().is_empty() {
            return;
        }
        self.push_line(Speaker::Agent, self.turn_agent, text.trim().to_owned(), now);
    }

    fn push_line(&mut self, role: Speaker, agent: u32, text: String, now: Instant) {
        let line = TranscriptLine {
            role,
            agent: self.id(agent),
            text,
            at_ms: self.ms(now),
        };
        // An agent's message counts toward the activation its agent last began (an announcement
        // ends after its handoff closed that activation, and still counts): the rule the admin
        // API's live view follows from this event, so live and stored counts agree.
        if role == Speaker::Agent
            && let Some(h) = self
                .history
                .iter_mut()
                .rev()
                .find(|h| h.agent == line.agent)
        {
            h.message_count += 1;
        }
        self.event(CallEvent::Transcript {
            role,
            agent_id: line.agent.clone(),
            text: line.text.clone(),
            at_ms: line.at_ms,
        });
        self.lines.push(line);
    }
}
