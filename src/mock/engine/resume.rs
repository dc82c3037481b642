//! Session resumption in the mock (reference §12.1 item 10): with `sessionResumption` in `setup`,
//! a `sessionResumptionUpdate{newHandle, resumable: true}` right after `setupComplete` and after
//! every turn that leaves the model idle (no reply being generated or waiting, no function call
//! unanswered), and `{resumable: false}` when a reply starts. A `setup` carrying a handle restores
//! the conversation the handle was issued for — script position, history, active persona, the
//! VAD's state — or is refused: 1011 while a socket of that session is still open, 1007 for an
//! unknown or expired handle (the real code is unconfirmed) and for a different `model`.
//!
//! A scenario `greeting` is said unprompted at the start of a session that has neither a handle
//! nor initial history (a fresh conversation); a session that continues one never greets.

use std::time::Instant;

use super::super::inbound::Rejection;
use super::{MockSession, Plan, ResumeState};
use crate::model::gemini::wire::{ServerMessage, SessionResumptionUpdate, Setup};

impl MockSession {
    /// Before the setup is applied: restore the state a handle names, or start a new lineage.
    pub(super) fn resume_setup(&mut self, s: &Setup, now: Instant) -> Result<(), Rejection> {
        let Some(sr) = &s.session_resumption else {
            self.store.start_fresh(self.conn);
            return Ok(());
        };
        self.resumption = true;
        let Some(handle) = sr.handle.as_deref().filter(|h| !h.is_empty()) else {
            self.store.start_fresh(self.conn);
            return Ok(());
        };
        let faults = self.faults.clone();
        let state = self.store.resume(
            handle,
            self.conn,
            &s.model,
            faults.refuse_resume,
            faults.handle_ttl,
            now,
        )?;
        self.active = state.active;
        self.voice = state.voice;
        self.caller_turns = state.caller_turns;
        self.history = state.history.clone();
        self.prompt_tokens = state.prompt_tokens;
        self.next_call_id = state.next_call_id;
        self.wedged = state.wedged;
        self.listener = state.listener.clone();
        self.restored = true;
        Ok(())
    }

    /// After `setupComplete`: the first handle, then a greeting for a fresh conversation.
    pub(super) fn after_setup(&mut self, now: Instant) {
        self.maybe_issue_handle();
        let history = self.config.as_ref().is_some_and(|c| c.initial_history);
        if let Some(greeting) = self.scenario.greeting.clone()
            && !history
            && !self.restored
            && !self.brief
        {
            self.store.note(self.conn, |c| c.greeted = true);
            let plan = Plan {
                reply: greeting,
                persona: self.active,
                tool_call: None,
                handoff_call: None,
                script: None,
            };
            self.begin_turn(plan, now + self.scenario.timing.first_audio);
        }
    }

    /// Nothing is being generated or awaited.
    fn idle(&self) -> bool {
        self.turn.is_none()
            && self.queued.is_empty()
            && self.pending_calls.is_empty()
            && !self.history_open
    }

    /// Issues a resumable handle if the session asked for them and the model is idle.
    pub(super) fn maybe_issue_handle(&mut self) {
        if !self.resumption || self.closed || !self.idle() {
            return;
        }
        let state = ResumeState {
            model: self
                .config
                .as_ref()
                .map(|c| c.model.clone())
                .unwrap_or_default(),
            active: self.active,
            voice: self.voice,
            caller_turns: self.caller_turns,
            history: self.history.clone(),
            prompt_tokens: self.prompt_tokens,
            next_call_id: self.next_call_id,
            listener: self.listener.clone(),
            wedged: self.wedged,
        };
        let handle = self.store.issue(self.conn, state);
        self.send_resumption(Some(handle));
    }

    /// `{resumable: false}`: resuming now would lose the reply being generated.
    pub(super) fn not_resumable(&mut self) {
        if self.resumption {
            self.send_resumption(None);
        }
    }

    fn send_resumption(&mut self, handle: Option<String>) {
        let resumable = handle.is_some();
        self.send(ServerMessage {
            session_resumption_update: Some(SessionResumptionUpdate {
                new_handle: Some(handle.unwrap_or_default()),
                resumable: Some(resumable),
                last_consumed_client_message_index: None,
            }),
            ..Default::default()
        });
    }
}
