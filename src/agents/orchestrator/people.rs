//! Handing the caller to a person (a `kind = "human"` agent): the decision (the person's
//! `transfer_to_<id>` tool, or an operator's activation), what the model is answered (carry on
//! announcing, then stop), the [`Action::HandToPerson`] the call carries out once the
//! announcement has played, and the outcome fed back: on success the call is the person's; on
//! any other the caller stays with the agent, who is told why at the next turn boundary.

use std::time::Instant;

use serde_json::json;

use super::handoff::CallCtx;
use super::{Action, Orchestrator};
use crate::agents::events::{CallEvent, TriggerKind};
use crate::agents::tools;
use crate::model::gemini::wire::FunctionResponseScheduling;
use crate::transfer::{HumanAgent, Outcome};

/// A transfer to a person for the call to carry out once the announcement has played to its end.
#[derive(Clone, Debug, PartialEq)]
pub struct PersonHandover {
    /// The person's agent id.
    pub person: String,
    pub name: String,
    /// The agent handing the caller over.
    pub from: String,
    pub human: HumanAgent,
    /// What the agent said about the caller (the tool's `summary`; empty for an operator's).
    pub summary: String,
}

/// A transfer to a person under way.
#[derive(Clone, Debug)]
pub(super) struct PersonRun {
    pub index: u32,
}

impl Orchestrator {
    /// Decides a transfer to person `index`; `call`: the transfer tool call it came from.
    pub(super) fn begin_person(
        &mut self,
        index: u32,
        trigger: TriggerKind,
        call: Option<(CallCtx, String)>,
        now: Instant,
    ) {
        let Some(person) = self.reg.people.get(index as usize).cloned() else {
            return;
        };
        let from = self.lead();
        let busy = if self.person.is_some() {
            Some("a transfer to a person is already under way")
        } else if self.pending.is_some() || self.standby.is_some() || !self.held.is_empty() {
            Some("another handoff is in progress")
        } else {
            None
        };
        if let Some(reason) = busy {
            let e = CallEvent::HandoffBlocked {
                from: self.id(from),
                to: person.id.clone(),
                trigger,
                reason: reason.to_owned(),
                at_ms: self.ms(now),
            };
            self.event(e);
            if let Some((c, _)) = &call {
                let msg = format!(
                    "putting the caller through to {} refused ({reason}); tell the caller and carry on",
                    person.name
                );
                let r = tools::error(&c.id, &c.name, &msg, c.sched());
                self.actions.push_back(Action::ToolResponse(r));
            }
            return;
        }
        self.person = Some(PersonRun { index });
        let summary = call.as_ref().map(|(_, s)| s.clone()).unwrap_or_default();
        let e = CallEvent::TransferRequested {
            from: self.id(from),
            to: person.id.clone(),
            destination: person.human.destination.to_string(),
            plan: person.human.handover,
            trigger,
            summary: summary.clone(),
            at_ms: self.ms(now),
        };
        self.event(e);
        if let Some((c, _)) = &call {
            // The model finishes its announcement and then says nothing more: a non-blocking
            // call is answered SILENT so it starts no turn; a blocking one resumes the paused
            // announcement.
            let sched = c.non_blocking.then_some(FunctionResponseScheduling::Silent);
            let v = json!({
                "status": "putting_through",
                "to": person.name,
                "next": "finish your announcement, then say nothing more; you will be told if it does not work",
            });
            let r = tools::output(&c.id, &c.name, v, sched);
            self.actions.push_back(Action::ToolResponse(r));
        }
        self.actions.push_back(Action::HandToPerson(PersonHandover {
            person: person.id.clone(),
            name: person.name.clone(),
            from: self.id(from),
            human: person.human.clone(),
            summary,
        }));
    }

    /// The transfer ended: on success the caller is the person's; otherwise the agent is told
    /// why (at the next turn boundary, as a turn that makes it speak) and carries on.
    pub(super) fn on_person_outcome(&mut self, outcome: &Outcome) {
        let Some(run) = self.person.take() else {
            return;
        };
        if outcome.succeeded() {
            return;
        }
        let name = self
            .reg
            .people
            .get(run.index as usize)
            .map(|p| p.name.clone())
            .unwrap_or_default();
        let text = format!(
            "[transfer] The caller could not be put through to {name}: {}. Tell the caller so in \
             one sentence and carry on helping them.",
            outcome.describe()
        );
        self.hold(text, None);
    }

    /// The person a transfer is under way to, if any.
    pub fn transferring_to(&self) -> Option<&str> {
        let run = self.person.as_ref()?;
        self.reg
            .people
            .get(run.index as usize)
            .map(|p| p.id.as_str())
    }
}
