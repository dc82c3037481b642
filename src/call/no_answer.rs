//! What a transfer to a person that nobody answered leaves the call to do, as the human agent's
//! `on_no_answer` says: bring in another agent of the set (as an operator would, once the
//! outcome has reached the orchestrator, which tells the agent why), or end the call once the
//! agent has said why — its reply played out after a silence, or at a guard. `"return"` leaves
//! nothing to do. Blind and warm transfers share it; a blind one's outcome is read from its
//! events by [`after_blind`], past the steps that come before it.

use std::time::{Duration, Instant};

use super::CallCore;
use crate::audio::playout::PlayedKind;
use crate::transfer::{Event, OnNoAnswer, Outcome};

/// The longest the agent is given to say why before a `hang_up` transfer ends the call.
pub const ENDING_GUARD: Duration = Duration::from_secs(30);

/// A blind transfer under way: the person, and what their `on_no_answer` says.
pub(super) type Blind = (String, OnNoAnswer);

/// What an event `ev` of the blind transfer under way (`blind`) leaves to do at `now`: its
/// outcome (`Finished`) ends the wait and says what, by [`Aftermath::after`]; every step before
/// it (announcing, referring, following, …) leaves `blind` waiting for that outcome.
pub(super) fn after_blind(
    blind: &mut Option<Blind>,
    ev: &Event,
    now: Instant,
) -> Option<Aftermath> {
    let Event::Finished(report) = ev else {
        return None;
    };
    let (person, on_no_answer) = blind.take()?;
    Aftermath::after(&person, &on_no_answer, &report.outcome, now)
}

/// What is left to do after an unanswered transfer to `person`.
#[derive(Debug)]
pub(super) struct Aftermath {
    person: String,
    hand_to: Option<String>,
    /// The outcome has reached the orchestrator: `hand_to` may be brought in.
    reported: bool,
    ending: Option<Ending>,
}

#[derive(Clone, Copy, Debug)]
struct Ending {
    /// The caller has heard silence since (what was playing at the outcome is over).
    quiet: bool,
    /// The agent's reply has started playing after that silence.
    heard: bool,
    guard: Instant,
}

impl Aftermath {
    /// Nothing to do yet, for a transfer to `person`.
    pub(super) fn new(person: &str) -> Aftermath {
        Aftermath {
            person: person.to_owned(),
            hand_to: None,
            reported: false,
            ending: None,
        }
    }

    /// What `on_no_answer` asks after `outcome` (at `now`); `None` when nothing is left to do.
    pub(super) fn after(
        person: &str,
        on_no_answer: &OnNoAnswer,
        outcome: &Outcome,
        now: Instant,
    ) -> Option<Aftermath> {
        if !matches!(outcome, Outcome::NoAnswer { .. }) {
            return None;
        }
        let mut a = Aftermath::new(person);
        match on_no_answer {
            OnNoAnswer::Return => return None,
            OnNoAnswer::Agent(agent) => a.hand_to(agent.clone()),
            OnNoAnswer::HangUp => a.end_call(now),
        }
        Some(a)
    }

    /// Bring `agent` in once the outcome is reported.
    pub(super) fn hand_to(&mut self, agent: String) {
        self.hand_to = Some(agent);
    }

    /// End the call once the agent has said why.
    pub(super) fn end_call(&mut self, now: Instant) {
        self.ending = Some(Ending {
            quiet: false,
            heard: false,
            guard: now + ENDING_GUARD,
        });
    }

    /// What was left to do will not be done (`why`): a named agent still waiting to be brought
    /// in is said in the log, not dropped silently.
    pub(super) fn let_go(&mut self, why: &str) {
        if let Some(agent) = self.hand_to.take() {
            tracing::warn!(%agent, person = %self.person, why, "the no-answer agent was not brought in");
        }
    }

    /// Nothing is left to do.
    pub(super) fn is_done(&self) -> bool {
        self.hand_to.is_none() && self.ending.is_none()
    }

    /// When the ending's guard falls.
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.ending.map(|e| e.guard)
    }

    /// The outcome has reached the orchestrator: the named agent is brought in.
    pub(super) fn after_report(&mut self, caller: &mut CallCore, now: Instant) {
        self.reported = true;
        self.bring_in(caller, now);
    }

    /// Brings the named agent in once the outcome is reported and no handoff is being carried
    /// out: the orchestrator holds the agent's notice of the outcome for the turn boundary when
    /// the agent is speaking, and would refuse the agent "not now" until it has gone out, so the
    /// agent waits for it (checked every pass) instead of being dropped.
    fn bring_in(&mut self, caller: &mut CallCore, now: Instant) {
        if !self.reported || caller.handoff_under_way() {
            return;
        }
        let Some(agent) = self.hand_to.take() else {
            return;
        };
        let input = crate::agents::Input::Activate {
            agent: agent.clone(),
        };
        match caller.handle_command(input, now) {
            // The agent that asked for the transfer is the one named: it carries on.
            Ok(()) | Err(crate::agents::CommandError::AlreadyLeads(_)) => {}
            Err(e) => {
                tracing::warn!(%agent, error = %e, "the no-answer agent could not be brought in");
            }
        }
    }

    /// A frame was played to the caller.
    pub(super) fn caller_played(&mut self, kind: PlayedKind) {
        if let Some(e) = self.ending.as_mut() {
            if kind == PlayedKind::Voice {
                e.heard |= e.quiet;
            } else {
                e.quiet = true;
            }
        }
    }

    /// Brings the named agent in once nothing holds it back; ends the call when the agent's
    /// reply has played out, or the guard has passed by `now`.
    pub(super) fn check(&mut self, caller: &mut CallCore, now: Instant) {
        self.bring_in(caller, now);
        let Some(e) = self.ending else { return };
        let said = e.heard && caller.queued_audio().is_zero() && !caller.generating();
        if said || e.guard <= now {
            self.ending = None;
            caller.hang_up(format!(
                "{} did not answer; the call ends as configured",
                self.person
            ));
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::transfer::{BlindVia, Destination, Plan, Report, Stage};

    /// The outcome of a blind transfer by REFER to Ravi.
    pub(in crate::call) fn finished(outcome: Outcome) -> Event {
        let target = Destination::Sip("sip:ravi@127.0.0.1:5999".into());
        Event::Finished(Report {
            outcome,
            status: Some(480),
            ..Report::unavailable(Plan::Blind(BlindVia::SipRefer), target, "")
        })
    }

    /// A blind transfer's steps come before its outcome (announcing, referring, following, done,
    /// then finished, each one event): none of them is the outcome, and none may use up what the
    /// outcome is to be read with.
    #[test]
    fn a_blind_transfers_steps_leave_it_waiting_for_its_outcome() {
        let now = Instant::now();
        let mut blind = Some(("ravi".to_owned(), OnNoAnswer::HangUp));
        for stage in [
            Stage::Announcing,
            Stage::Referring,
            Stage::Following,
            Stage::Done,
        ] {
            assert!(after_blind(&mut blind, &Event::Stage { stage }, now).is_none());
            assert!(blind.is_some(), "still waiting after {stage:?}");
        }
        let no_answer = finished(Outcome::NoAnswer { status: Some(480) });
        let a = after_blind(&mut blind, &no_answer, now).expect("the call is to end");
        assert_eq!(a.deadline(), Some(now + ENDING_GUARD));
        assert!(blind.is_none(), "one outcome per transfer");
        // Answered: nothing is left to do.
        let mut blind = Some(("ravi".to_owned(), OnNoAnswer::HangUp));
        assert!(after_blind(&mut blind, &finished(Outcome::Transferred), now).is_none());
        assert!(blind.is_none());
    }

    #[test]
    fn only_an_unanswered_transfer_leaves_anything_to_do() {
        let now = Instant::now();
        let no_answer = Outcome::NoAnswer { status: None };
        let agent = OnNoAnswer::Agent("desk".into());
        assert!(Aftermath::after("ravi", &agent, &Outcome::Declined, now).is_none());
        assert!(Aftermath::after("ravi", &OnNoAnswer::Return, &no_answer, now).is_none());
        let a = Aftermath::after("ravi", &agent, &no_answer, now).unwrap();
        assert_eq!(a.hand_to.as_deref(), Some("desk"));
        let mut a = Aftermath::after("ravi", &OnNoAnswer::HangUp, &no_answer, now).unwrap();
        assert_eq!(a.deadline(), Some(now + ENDING_GUARD));
        // Voice still playing at the outcome is not the reply saying why.
        a.caller_played(PlayedKind::Voice);
        assert!(a.ending.is_some_and(|e| !e.heard));
        a.caller_played(PlayedKind::Silence);
        a.caller_played(PlayedKind::Voice);
        assert!(a.ending.is_some_and(|e| e.heard));
    }
}
