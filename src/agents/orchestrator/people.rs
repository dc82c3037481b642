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
use crate::agents::matching::Keyword;
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
    /// Decides a transfer to person `index`; `call`: the transfer tool call it came from. `Err`
    /// with the reason when it was blocked (the `handoff_blocked` event already sent).
    pub(super) fn begin_person(
        &mut self,
        index: u32,
        trigger: TriggerKind,
        call: Option<(CallCtx, String)>,
        now: Instant,
    ) -> Result<(), String> {
        let Some(person) = self.reg.people.get(index as usize).cloned() else {
            return Ok(());
        };
        let from = self.lead();
        if let (Some(run), Some((c, _))) = (&self.person, &call)
            && run.index == index
        {
            // The same transfer's other signal (the announcing words decided it first): the
            // call is answered as its protocol requires, quietly, with no second trigger.
            let v = json!({ "status": "putting_through", "to": person.name });
            let quiet = Some(FunctionResponseScheduling::Silent);
            let r = tools::output(&c.id, &c.name, v, quiet);
            self.actions.push_back(Action::ToolResponse(r));
            return Ok(());
        }
        let busy = if self.person.is_some() {
            Some("a transfer to a person is already under way")
        } else if self.pending.is_some() || self.handoff_under_way() {
            Some(super::handoff::UNDER_WAY)
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
            return Err(reason.to_owned());
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
        Ok(())
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

    /// A person the active agents may hand the caller to whose name or alias is in `norm` (the
    /// agent's normalised words).
    pub(super) fn person_named_in(&self, norm: &str) -> Option<u32> {
        tools::reachable_people(&self.reg, &self.members)
            .into_iter()
            .filter_map(|i| self.reg.people.get(i as usize))
            .find(|p| {
                std::iter::once(&p.name)
                    .chain(p.aliases.iter())
                    .filter_map(|n| Keyword::new(n))
                    .any(|k| k.found_in(norm))
            })
            .map(|p| p.index)
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

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::agents::{Action, Input, Orchestrator};
    use crate::model::ToolCallRequest;
    use crate::model::catalog::lookup;
    use crate::model::handle::Protocol;

    const SET: &str = r#"
[set]
name = "desk"
[agents.advisor]
name = "Asha"
role = "primary"
instruction = "You are Asha."
[agents.ravi]
kind = "human"
name = "Ravi"
[agents.ravi.destination]
to = "sip:ravi@pbx.example.com"
transfer = "blind"
"#;

    fn orch(model: &str) -> (Orchestrator, Instant) {
        let reg = crate::agents::parse(SET, Path::new("desk.toml")).unwrap();
        let caps = lookup(Protocol::Gemini, model).capabilities;
        let t0 = Instant::now();
        let mut o = Orchestrator::new(Arc::new(reg), caps, t0);
        while o.poll_action().is_some() {}
        (o, t0)
    }

    fn drain(o: &mut Orchestrator) -> Vec<Action> {
        std::iter::from_fn(|| o.poll_action()).collect()
    }

    fn handovers(actions: &[Action]) -> Vec<&PersonHandover> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::HandToPerson(h) => Some(h),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_tool_call_hands_over_once_and_a_failure_is_told_at_the_boundary() {
        let (mut o, t0) = orch("models/gemini-2.5-flash-native-audio-preview-09-2025");
        let call = |id: &str| {
            Input::ToolCall(ToolCallRequest {
                id: id.into(),
                name: "transfer_to_ravi".into(),
                args: serde_json::json!({"summary": "wants schemes"}),
            })
        };
        o.handle(Input::ModelAudio, t0).unwrap();
        o.handle(call("c1"), t0).unwrap();
        let a = drain(&mut o);
        let h = handovers(&a);
        assert_eq!(h.len(), 1, "{a:?}");
        assert_eq!(h[0].person, "ravi");
        assert_eq!(h[0].from, "advisor");
        assert_eq!(h[0].summary, "wants schemes");
        assert!(
            a.iter()
                .any(|x| matches!(x, Action::ToolResponse(r) if r.id.as_deref() == Some("c1"))),
            "the call is answered: {a:?}"
        );
        // A second call while it is under way is refused, with no second handover.
        o.handle(call("c2"), t0).unwrap();
        let a = drain(&mut o);
        assert!(handovers(&a).is_empty(), "{a:?}");
        // Busy: nothing said mid-turn; at the boundary the model is told why.
        o.handle(
            Input::PersonTransferEnded {
                outcome: crate::transfer::Outcome::Busy { status: 486 },
            },
            t0 + Duration::from_secs(1),
        )
        .unwrap();
        let during = drain(&mut o);
        assert!(
            !during.iter().any(|x| matches!(x, Action::ClientContent(_))),
            "{during:?}"
        );
        o.handle(Input::TurnComplete, t0 + Duration::from_secs(2))
            .unwrap();
        let after = drain(&mut o);
        let told = after.iter().find_map(|x| match x {
            Action::ClientContent(cc) => serde_json::to_string(cc).ok(),
            _ => None,
        });
        let told = told.unwrap_or_else(|| panic!("the model is told: {after:?}"));
        assert!(
            told.contains("could not be put through to Ravi: the line was busy"),
            "{told}"
        );
        assert_eq!(o.transferring_to(), None);
    }

    #[test]
    fn on_a_model_that_hands_off_by_words_the_announcement_decides() {
        let (mut o, t0) = orch("models/gemini-3.1-flash-live-preview");
        assert!(
            o.tools_json().is_empty(),
            "no transfer tool on a model whose calls pause speech"
        );
        let setup = o.initial_setup();
        assert!(
            setup
                .system_instruction
                .contains("\"Let me put you through to Ravi.\""),
            "{}",
            setup.system_instruction
        );
        o.handle(
            Input::AgentTranscript {
                text: "Let me put you through to Ravi.".into(),
                finished: false,
            },
            t0,
        )
        .unwrap();
        let a = drain(&mut o);
        let h = handovers(&a);
        assert_eq!(h.len(), 1, "{a:?}");
        assert_eq!(o.transferring_to(), Some("ravi"));
        let asked = a.iter().find_map(|x| match x {
            Action::Event(CallEvent::TransferRequested { trigger, .. }) => Some(*trigger),
            _ => None,
        });
        assert_eq!(asked, Some(TriggerKind::AgentPhrase));
    }

    #[test]
    fn an_operator_reaches_a_person_by_name() {
        let (mut o, t0) = orch("models/gemini-2.5-flash-native-audio-preview-09-2025");
        o.handle(
            Input::Activate {
                agent: "ravi".into(),
            },
            t0,
        )
        .unwrap();
        let a = drain(&mut o);
        assert_eq!(handovers(&a).len(), 1, "{a:?}");
        assert_eq!(
            o.handle(
                Input::Activate {
                    agent: "nobody".into()
                },
                t0
            ),
            Err(crate::agents::CommandError::UnknownAgent("nobody".into()))
        );
    }
}
