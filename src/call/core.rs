//! The call as one sans-IO state machine: every rule of a call (uplink VAD, resampling and
//! encoding, playout and underrun accounting, barge-in, first-audio timing, when a handoff's wire
//! message goes out, when a reconnect happens and what it replays) decided from events and a
//! clock, with no socket, task or timer of its own.
//!
//! ```text
//! loop {
//!     feed one input:  handle_leg / handle_model / handle_opened / handle_tool_result /
//!                      handle_command / hang_up   (or handle_timeout(now) at poll_timeout())
//!     drain:           poll_leg, poll_model, poll_task, poll_event; carry each out
//!     stop when:       ended() is Some
//!     sleep until:     poll_timeout()
//! }
//! ```
//!
//! Sessions are named by [`SessionId`]: the shell holds the sockets and routes each
//! [`ModelCommand`] to its session; the core knows which id is the current session, the one being
//! closed by a reconnect and a handoff's warm standby. Opening a session and running a tool are
//! the shell's [`Task`]s; their outcomes come back as `handle_opened` / `handle_tool_result`.

use std::time::{Duration, Instant};

use super::agents::{Agents, AgentsDriver};
use super::metrics::{CallReport, TurnRecord, ms};
pub use super::outbox::{Live, ModelCommand, OpenFailed, OpenRequest, Outbox, SessionId, Task};
use super::resume::{ModelSource, Resume};
use super::{CallError, CallOptions, downlink_resampler, resampler};
use crate::agents::CallEvent;
use crate::audio::Frame;
use crate::audio::playout::Playout;
use crate::audio::resample::StreamResampler;
use crate::audio::vad::{TurnDetector, VadEvent};
use crate::backend::ModelBackend;
use crate::leg::{LegCommand, LegEvent};
use crate::model::Capabilities;
use crate::model::gemini::wire::{ClientMessage, FunctionResponse, ToolResponse};
use crate::model::handle::Protocol;
use crate::model::session::SessionEvent;
use crate::model::{ModelEvent, ToolCallRequest};

/// Why the core wants to be woken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The next 20 ms playout tick.
    Playout,
    /// The orchestrator's timer (a handoff's fallback, a turn boundary wait).
    Orchestrator,
    /// The reconnect machine's timer (a `goAway` deadline, a close wait, a back-off).
    Reconnect,
}

/// The state of one call between events.
pub struct CallCore {
    pub(super) session: Option<Live>,
    /// The wire protocol of every session of this call (all come from one backend).
    pub(super) protocol: Protocol,
    pub(super) agents: Option<AgentsDriver>,
    pub(super) playout: Playout,
    pub(super) leg_rate: u32,
    pub(super) up: StreamResampler,
    pub(super) down: StreamResampler,
    pub(super) down_buf: Vec<i16>,
    pub(super) up_buf: Vec<i16>,
    pub(super) scratch: Vec<u8>,
    pub(super) vad: TurnDetector,
    pub(super) report: CallReport,
    /// Agent index tagged on model audio.
    pub(super) agent: u32,
    pub(super) turn_no: u64,
    pub(super) turn_open: bool,
    pub(super) last_voiced_at: Option<Instant>,
    pub(super) awaiting_first_audio: Option<(usize, Instant)>,
    pub(super) current: Option<usize>,
    /// Session resumption and reconnects (`None`: the call ends with its session).
    pub(super) resume: Option<Resume>,
    /// Where the last voiced frame played ends (media time).
    pub(super) last_voice_end: Duration,
    /// Media time zero (the leg's start).
    pub(super) media_zero: Instant,
    /// Voiced frames of model turn `.0` handed to the leg (what the caller heard of it).
    pub(super) heard: (u64, u64),
    pub(super) out: Outbox,
    /// The latest instant the shell has handed in.
    pub(super) now: Instant,
    /// The call is over, for this reason.
    ended: Option<String>,
}

impl CallCore {
    /// A call on a leg at `leg_rate` whose media timeline starts at `media_zero`, with its first
    /// session `first` (protocol `protocol`) live at `now`.
    pub fn new(
        leg_rate: u32,
        media_zero: Instant,
        first: Live,
        protocol: Protocol,
        opts: &CallOptions,
        agents: Option<Agents>,
        now: Instant,
    ) -> Result<CallCore, CallError> {
        let up = resampler(leg_rate, protocol.input_rate())?;
        let down = downlink_resampler(protocol.output_rate(), leg_rate)?;
        let report = CallReport {
            uplink_resampler_delay_ms: ms(up.delay()),
            downlink_resampler_delay_ms: ms(down.delay()),
            ..Default::default()
        };
        let resume = (opts.model.is_some() || agents.is_some())
            .then(|| Resume::new(opts.reconnect.clone(), opts.model.clone(), now));
        let mut call = CallCore {
            session: Some(first),
            protocol,
            agents: agents.map(|a| AgentsDriver::new(a, now)),
            playout: Playout::new(leg_rate, media_zero),
            leg_rate,
            up,
            down,
            down_buf: Vec::new(),
            up_buf: Vec::with_capacity(1024),
            scratch: Vec::with_capacity(2048),
            vad: TurnDetector::new(opts.caller_silence),
            report,
            agent: 0,
            turn_no: 0,
            turn_open: false,
            last_voiced_at: None,
            awaiting_first_audio: None,
            current: None,
            resume,
            last_voice_end: Duration::ZERO,
            media_zero,
            heard: (0, 0),
            out: Outbox::default(),
            now,
            ended: None,
        };
        call.apply_agent_actions(now);
        Ok(call)
    }

    /// Where the call's standby socket is to be dialed, if it keeps one: the sessions' own
    /// source, else the agent set's backend.
    pub fn standby_backend(&self) -> Option<ModelBackend> {
        let r = self.resume.as_ref()?;
        if !r.machine.policy().standby {
            return None;
        }
        r.source()
            .map(|s: &ModelSource| s.backend.clone())
            .or_else(|| self.agents.as_ref().map(AgentsDriver::backend))
    }

    fn advance(&mut self, now: Instant) -> Instant {
        self.now = self.now.max(now);
        self.now
    }

    /// The call has ended, for this reason: nothing more is to be fed in.
    pub fn ended(&self) -> Option<&str> {
        self.ended.as_deref()
    }

    /// Ends the call from baton's side: the leg is hung up, every session closed.
    pub fn hang_up(&mut self, reason: impl Into<String>) {
        if self.ended.is_some() {
            return;
        }
        self.ended = Some(reason.into());
        self.out.leg.push_back(LegCommand::Hangup);
        if let Some(s) = self.session {
            // Still read: its late `Written` reports go into the report.
            self.out.close(s.id, true);
        }
        if let Some(r) = self.resume.as_mut() {
            r.abandon(&mut self.out);
        }
        if let Some(a) = self.agents.as_mut() {
            a.close_standby(&mut self.out);
        }
    }

    /// No session, none being opened and none about to be: the call cannot go on.
    fn model_lost(&self) -> bool {
        self.session.is_none()
            && self.agents.as_ref().is_none_or(|a| !a.reopening())
            && self.resume.as_ref().is_none_or(|r| !r.machine.switching())
    }

    fn check_model_lost(&mut self) {
        if self.model_lost() {
            self.hang_up("no model session could be reopened after a handoff");
        }
    }

    /// Something from the caller's leg (`None`: the leg is gone).
    pub fn handle_leg(&mut self, ev: Option<LegEvent>, now: Instant) {
        let now = self.advance(now);
        match ev {
            Some(LegEvent::Frame { frame, received_at }) => {
                self.on_caller_frame(frame, received_at, now)
            }
            Some(LegEvent::Dtmf { digit }) => tracing::debug!(%digit, "caller pressed a key"),
            Some(LegEvent::Heard { .. }) => {}
            Some(LegEvent::Stop) | None => self.hang_up("caller hung up"),
        }
    }

    /// Something from session `id` (`None`: its events have ended).
    pub fn handle_model(&mut self, id: SessionId, ev: Option<SessionEvent>, now: Instant) {
        let now = self.advance(now);
        if self.session.is_some_and(|s| s.id == id) {
            self.on_session_event(ev, now);
        } else if self
            .resume
            .as_ref()
            .is_some_and(|r| r.closing() == Some(id))
        {
            self.on_old_session_event(ev, now);
        } else if self
            .agents
            .as_ref()
            .is_some_and(|a| a.standby_id() == Some(id))
        {
            if let Some(a) = self.agents.as_mut() {
                a.on_standby_event(ev, now, &mut self.out);
            }
            self.apply_agent_actions(now);
            self.check_model_lost();
        }
    }

    fn on_session_event(&mut self, ev: Option<SessionEvent>, now: Instant) {
        let resumes = self.resume.is_some();
        match ev {
            Some(SessionEvent::Model(e, _)) if self.replayed_transcript(&e) => {}
            Some(SessionEvent::Model(e, at)) => {
                let at = at.into_std();
                if !matches!(e, ModelEvent::Audio { .. }) {
                    tracing::trace!(target: "baton::wire", event = ?e, "model event");
                }
                let resumable = resumes.then(|| e.clone());
                self.on_model_event(e, at);
                if let Some(e) = resumable {
                    self.resume_event(&e, at);
                }
            }
            Some(SessionEvent::Written {
                received_at,
                written_at,
            }) => {
                self.report
                    .uplink_added_ms
                    .push(ms(written_at.saturating_duration_since(received_at)));
            }
            Some(SessionEvent::Closed { code, reason }) if resumes => {
                tracing::warn!(?code, %reason, "model session closed; reconnecting");
                self.session_lost(super::reconnect::Cause::Closed(code), now);
                if let Some(feature) = crate::model::catalog::refused_feature(code, &reason) {
                    tracing::warn!(%feature, "the model refused {feature}: this call goes on without it");
                    if let Some(a) = self.agents.as_mut() {
                        a.on_refused(feature, now);
                    }
                    self.apply_agent_actions(now);
                }
            }
            Some(SessionEvent::Dead { silent_for }) if resumes => {
                tracing::warn!(?silent_for, "model socket dead; reconnecting");
                self.session_lost(super::reconnect::Cause::Dead, now);
            }
            Some(SessionEvent::Closed { code, reason }) => {
                self.hang_up(match code {
                    Some(c) => format!("model closed the session (code {c}): {reason}"),
                    None => format!("model connection lost: {reason}"),
                });
            }
            Some(SessionEvent::Dead { silent_for }) => {
                self.hang_up(format!(
                    "model socket dead: nothing received for {silent_for:?}"
                ));
            }
            None if resumes => {
                self.session_lost(super::reconnect::Cause::Closed(None), now);
            }
            None => {
                self.hang_up("model session ended");
            }
        }
    }

    /// The session the shell opened as `id` is up (`Ok`, with what its model can do) or could
    /// not be opened.
    pub fn handle_opened(
        &mut self,
        id: SessionId,
        result: Result<Capabilities, OpenFailed>,
        now: Instant,
    ) {
        let now = self.advance(now);
        if self
            .resume
            .as_ref()
            .is_some_and(|r| r.opening() == Some(id))
        {
            self.on_reopened(id, result, now);
        } else if self
            .agents
            .as_ref()
            .is_some_and(|a| a.opening_id() == Some(id))
        {
            let mut session = self.session;
            if let Some(a) = self.agents.as_mut() {
                a.on_opened(id, result, now, &mut session, &mut self.out);
            }
            self.session = session;
            self.apply_agent_actions(now);
            self.check_model_lost();
        } else if result.is_ok() {
            // Opened for a call that no longer wants it (ended, or the open was abandoned).
            self.out.close(id, false);
        }
    }

    /// A tool run for the orchestrator finished.
    pub fn handle_tool_result(&mut self, input: crate::agents::Input, now: Instant) {
        let now = self.advance(now);
        if let Some(a) = self.agents.as_mut() {
            a.on_tool_result(input, now);
        }
        self.apply_agent_actions(now);
        self.check_model_lost();
    }

    /// An input from outside the call (an operator's trigger, a sidecar's result): fed to the
    /// orchestrator, refused when the call has none.
    pub fn handle_command(
        &mut self,
        input: crate::agents::Input,
        now: Instant,
    ) -> Result<(), crate::agents::CommandError> {
        let now = self.advance(now);
        let result = match self.agents.as_mut() {
            Some(a) => a.command(input, now),
            None => Err(crate::agents::CommandError::NoAgents),
        };
        self.apply_agent_actions(now);
        result
    }

    /// An event of the transfer to a person the shell asked of the leg: on the call's feed and
    /// to the orchestrator; once the caller is with the person, baton's part of the call ends.
    pub fn handle_transfer(&mut self, ev: crate::transfer::Event, now: Instant) {
        let now = self.advance(now);
        let handed = self
            .agents
            .as_mut()
            .and_then(|a| a.on_transfer_event(ev, now));
        self.apply_agent_actions(now);
        if let Some(person) = handed {
            self.hang_up(format!("transferred to {person}"));
        }
    }

    /// The earliest instant the core must be woken at, and why.
    pub fn poll_timeout(&self) -> (Instant, Reason) {
        let mut next = (self.playout.poll_timeout(), Reason::Playout);
        let others = [
            (
                self.agents.as_ref().and_then(AgentsDriver::deadline),
                Reason::Orchestrator,
            ),
            (
                self.resume.as_ref().and_then(Resume::deadline),
                Reason::Reconnect,
            ),
        ];
        for (at, why) in others {
            if let Some(at) = at
                && at <= next.0
            {
                next = (at, why);
            }
        }
        next
    }

    /// Time has come to `now`: the reconnect machine's and the orchestrator's timers that are
    /// due, then the playout ticks that are due (input that arrived by a tick's instant has been
    /// fed before it).
    pub fn handle_timeout(&mut self, now: Instant) {
        let now = self.advance(now);
        if self
            .resume
            .as_ref()
            .and_then(Resume::deadline)
            .is_some_and(|at| at <= now)
        {
            if let Some(r) = self.resume.as_mut() {
                r.machine.handle_timeout(now);
            }
            self.apply_resume_actions(now);
        }
        if self.ended.is_some() {
            return;
        }
        if self
            .agents
            .as_ref()
            .and_then(AgentsDriver::deadline)
            .is_some_and(|at| at <= now)
        {
            if let Some(a) = self.agents.as_mut() {
                a.on_timeout(now);
            }
            self.apply_agent_actions(now);
            self.check_model_lost();
            if self.ended.is_some() {
                return;
            }
        }
        if self.playout.poll_timeout() <= now {
            self.on_tick(now);
        }
    }

    /// The next command for the caller's leg.
    pub fn poll_leg(&mut self) -> Option<LegCommand> {
        self.out.leg.pop_front()
    }

    /// The next command for one of the call's model sessions.
    pub fn poll_model(&mut self) -> Option<ModelCommand> {
        self.out.model.pop_front()
    }

    /// The next asynchronous job for the shell (open a session, run or stop a tool).
    pub fn poll_task(&mut self) -> Option<Task> {
        self.out.tasks.pop_front()
    }

    /// The next call event for the call's listeners (an agent set's listeners).
    pub fn poll_event(&mut self) -> Option<CallEvent> {
        self.agents.as_mut()?.poll_listener_event()
    }

    /// Hands a played frame the leg did not take back for reuse.
    pub fn recycle(&mut self, frame: Frame) {
        self.playout.recycle(frame);
    }

    /// The current session, if the call has one.
    pub fn current_session(&self) -> Option<SessionId> {
        self.session.map(|s| s.id)
    }

    /// The report so far (the call goes on).
    pub fn report(&self) -> &CallReport {
        &self.report
    }

    fn on_caller_frame(&mut self, frame: Frame, received_at: tokio::time::Instant, now: Instant) {
        let received = received_at.into_std();
        let before = self.vad.last_voiced_end();
        let vad_event = self.vad.push(&frame.samples, frame.ts, frame.duration());
        if self.vad.last_voiced_end() != before {
            self.last_voiced_at = Some(received);
        }
        match vad_event {
            Some(VadEvent::SpeechStart(ts)) => {
                self.awaiting_first_audio = None;
                self.report.turns.push(TurnRecord {
                    index: self.report.turns.len(),
                    caller_start_ms: ms(ts),
                    ..Default::default()
                });
            }
            Some(VadEvent::SpeechEnd(ts)) => {
                if let Some(t) = self.report.turns.last_mut() {
                    t.caller_end_ms = ms(ts);
                    self.awaiting_first_audio = self.last_voiced_at.map(|at| (t.index, at));
                }
            }
            None => {}
        }
        self.up_buf.clear();
        self.up.process(&frame.samples, &mut self.up_buf);
        self.uplink(&frame.samples, frame.duration(), received_at, now);
    }

    /// Carries out what the orchestrator decided.
    pub(super) fn apply_agent_actions(&mut self, now: Instant) {
        let unheard = self.playout.unheard(now);
        let mut session = self.session;
        if let Some(a) = self.agents.as_mut()
            && let Some(agent) =
                a.apply_actions(now, self.now, unheard, &mut session, &mut self.out)
        {
            self.agent = agent;
        }
        self.session = session;
    }

    /// The call's report, ending with `end_reason` (or the reason the call ended with).
    pub fn finish(mut self, end_reason: Option<String>) -> CallReport {
        self.finish_reconnects();
        let stats = self.playout.stats();
        self.report.underruns = stats.underruns;
        self.report.late_ticks = stats.late_ticks;
        self.report.frames_played = stats.frames;
        self.report.voice_frames = stats.voice_frames;
        self.report.playout_flushed_samples = stats.flushed_samples;
        self.report.end_reason = end_reason.or(self.ended.take()).unwrap_or_default();
        if let Some(a) = self.agents.take() {
            a.finish(&mut self.report);
        }
        self.report
    }
}

/// Without an agent set, every tool call is answered with an error result so a BLOCKING call
/// never stalls the session.
pub(super) fn no_backend_response(calls: &[ToolCallRequest]) -> ClientMessage {
    ClientMessage::ToolResponse(ToolResponse {
        function_responses: Some(
            calls
                .iter()
                .map(|c| FunctionResponse {
                    id: Some(c.id.clone()),
                    name: Some(c.name.clone()),
                    response: Some(serde_json::json!({
                        "error": format!("no backend is configured for tool '{}'", c.name)
                    })),
                    ..Default::default()
                })
                .collect(),
        ),
    })
}
