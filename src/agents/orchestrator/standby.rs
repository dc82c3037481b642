//! The standby session of a `recreate` handoff (and the cold replacement of `recreate_cold`):
//! taking over once it is active, and giving the handoff up when it fails or is late (a failed
//! cold replacement reopens the agents that were active, since their session is closed).

use std::time::Instant;

use super::handoff::{Standby, Switch};
use super::{Action, Orchestrator, Phase, Timer};
use crate::agents::events::{CallEvent, Speaker};
use crate::agents::registry::HistoryTransfer;
use crate::agents::setup::history_turns;
use crate::agents::strategy::Strategy;
use crate::agents::{prompts, tools};
use crate::model::gemini::wire::{ClientContent, Content};

impl Orchestrator {
    /// The new session is active: its agents take over and the lead is prompted to speak.
    pub(super) fn finish_standby(&mut self) {
        let Some(sb) = self.standby.take() else {
            return;
        };
        self.timers.stop(Timer::StandbySetup);
        self.drop_calls();
        self.session.epoch += 1;
        self.session.tool_names = tools::tool_names(&self.reg, &sb.switch.members);
        if let Some(v) = sb
            .switch
            .members
            .iter()
            .find_map(|&m| self.reg.agent(m).voice.clone())
        {
            self.session.voice = Some(v);
        }
        self.phase = Phase::Idle;
        self.own_interrupt = false;
        if sb.restore {
            return;
        }
        let missed: Vec<_> = self
            .lines
            .iter()
            .skip(sb.lines_at_setup)
            .filter(|l| l.role == Speaker::Caller)
            .cloned()
            .collect();
        let lead = sb.switch.members[0];
        let context = sb.switch.context.clone();
        self.apply_members(sb.switch);
        if let Some(a) = self.announced.as_mut() {
            a.from = sb.from;
        }
        let text = prompts::greeting_prompt(&self.reg, lead, context.as_deref(), &missed);
        self.actions.push_back(Action::ClientContent(ClientContent {
            turns: Some(vec![Content::text(Some("user"), text)]),
            turn_complete: Some(true),
        }));
        self.reply_owed = true;
    }

    pub(super) fn on_standby_ready(&mut self) {
        match self.standby.as_mut() {
            Some(sb) if sb.cold && sb.sent => self.finish_standby(),
            Some(sb) if !sb.cold => {
                // Set up in time: from here the switch waits only for the turn boundary.
                sb.ready = true;
                self.timers.stop(Timer::StandbySetup);
            }
            _ => {}
        }
    }

    /// The standby (or cold replacement) failed or is overdue: the handoff is abandoned.
    pub(super) fn on_standby_failed(&mut self, reason: &str, overdue: bool, now: Instant) {
        let Some(sb) = self.standby.take() else {
            return;
        };
        self.pending = None;
        self.timers.stop(Timer::StandbySetup);
        if overdue && !sb.cold {
            self.actions.push_back(Action::DiscardStandby {
                reason: reason.to_owned(),
            });
        }
        let e = CallEvent::HandoffFailed {
            from: sb.from.clone(),
            to: self.id(sb.switch.members[0]),
            reason: format!("{} session: {reason}", sb.switch.strategy.as_str()),
            at_ms: self.ms(now),
        };
        self.event(e);
        if sb.cold && sb.sent && !sb.restore {
            // The old session is closed already: reopen the agents that were active.
            let members = self.members.clone();
            let history = history_turns(&self.lines, HistoryTransfer::All);
            let setup = self.setup_for(&members, self.summary.as_deref(), history);
            self.actions.push_back(Action::RecreateCold(setup));
            self.timers
                .set(Timer::StandbySetup, now + self.reg.timing.standby_timeout);
            self.standby = Some(Standby {
                switch: Switch {
                    members,
                    context: self.summary.clone(),
                    why: String::new(),
                    strategy: Strategy::RecreateCold,
                },
                from: sb.from,
                cold: true,
                sent: true,
                ready: false,
                restore: true,
                lines_at_setup: self.lines.len(),
            });
        }
    }
}
