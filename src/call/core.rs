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
use super::metrics::{CallReport, Reservoir, TurnRecord, ms, round2};
pub use super::outbox::{Live, ModelCommand, OpenFailed, OpenRequest, Outbox, SessionId, Task};
use super::reconnect::{Action, Cause, OpenFailure};
use super::resume::{CONTINUE_NOTE, ModelSource, Resume, Stopped};
use super::{CallError, CallOptions, downlink_resampler, resampler};
use crate::agents::CallEvent;
use crate::audio::Frame;
use crate::audio::playout::{PlayedKind, Playout, TurnTag};
use crate::audio::resample::StreamResampler;
use crate::audio::vad::{TurnDetector, VadEvent};
use crate::backend::ModelBackend;
use crate::leg::{LegCommand, LegEvent};
use crate::model::Capabilities;
use crate::model::gemini::wire::{
    ClientContent, ClientMessage, Content, FunctionResponse, ToolResponse,
};
use crate::model::handle::{Protocol, Wire};
use crate::model::session::{Outbound, SessionEvent, Written};
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
    /// Bound what the per-frame figures keep (`uplink_added_ms`, `downlink_added_ms`).
    uplink_sample: Reservoir,
    downlink_sample: Reservoir,
    /// The wire of every session of this call (all come from one backend and one set of
    /// settings): the protocol and, on OpenAI for a G.711 phone leg, that law both ways.
    pub(super) wire: Wire,
    pub(super) agents: Option<AgentsDriver>,
    pub(super) playout: Playout,
    pub(super) leg_rate: u32,
    /// The rate caller audio is sent to the model at (`Protocol::input_rate`).
    pub(super) up_rate: u32,
    pub(super) up: StreamResampler,
    pub(super) down: StreamResampler,
    pub(super) down_buf: Vec<i16>,
    /// Caller audio for the model not sent yet (`up_rate`), sent once the leg frames it came
    /// from (`up_gathered`) last `up_chunk`; `up_since` is when the first of them arrived (its
    /// `uplink_added_ms` start).
    pub(super) up_buf: Vec<i16>,
    pub(super) up_chunk: Duration,
    pub(super) up_gathered: Duration,
    pub(super) up_since: Option<tokio::time::Instant>,
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
    /// Caller and a person are bridged (a warm transfer connected): no model; the caller's
    /// frames go out through `poll_bridge`, the person's audio plays through this playout.
    bridged: Option<Bridged>,
}

/// The state of a bridge to a person.
#[derive(Debug, Default)]
struct Bridged {
    /// Caller frames for the person's leg, oldest first.
    out: std::collections::VecDeque<Frame>,
    /// Chunks of the person's audio queued.
    chunks: u64,
}

impl CallCore {
    /// A call on a leg at `leg_rate` whose media timeline starts at `media_zero`, with its first
    /// session `first` (on `wire`) live at `now`.
    pub fn new(
        leg_rate: u32,
        media_zero: Instant,
        first: Live,
        wire: Wire,
        opts: &CallOptions,
        agents: Option<Agents>,
        now: Instant,
    ) -> Result<CallCore, CallError> {
        let up_rate = wire.input_rate(leg_rate, opts.resample_input);
        let up = resampler(leg_rate, up_rate)?;
        let down = downlink_resampler(wire.output_rate(), leg_rate)?;
        let report = CallReport {
            uplink_resampler_delay_ms: ms(up.delay()),
            downlink_resampler_delay_ms: ms(down.delay()),
            ..Default::default()
        };
        // Sessions reopened take the first one's wire: a phone caller heard in G.711 stays in
        // it.
        let source = opts.model.clone().map(|mut m| {
            m.config.phone_law = wire.law;
            m
        });
        // A frame counts as handed to the socket when it arrives; gathered into a longer chunk
        // it goes up to a chunk less one frame later, so a handle covers it that much later.
        let mut policy = opts.reconnect.clone();
        policy.replay_margin += opts.uplink_chunk.saturating_sub(Duration::from_millis(20));
        let resume = (opts.model.is_some() || agents.is_some())
            .then(|| Resume::new(policy, source, media_zero, now));
        let mut call = CallCore {
            uplink_sample: Reservoir::default(),
            downlink_sample: Reservoir::default(),
            session: Some(first),
            wire,
            agents: agents.map(|mut a| {
                // Sessions a handoff opens take the first one's wire too.
                a.base.phone_law = wire.law;
                AgentsDriver::new(a, now, media_zero)
            }),
            playout: Playout::new(leg_rate, media_zero),
            leg_rate,
            up_rate,
            up,
            down,
            down_buf: Vec::new(),
            up_buf: Vec::with_capacity(1024),
            up_chunk: opts.uplink_chunk,
            up_gathered: Duration::ZERO,
            up_since: None,
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
            bridged: None,
        };
        call.apply_agent_actions(now);
        Ok(call)
    }

    /// Holds what playout queues in `law` (the leg's wire law for the whole call): half the
    /// memory, the same audio heard. Before the first model audio is queued.
    pub fn hold_playout_in(&mut self, law: crate::audio::g711::Law) {
        debug_assert!(self.playout.queued().is_zero());
        self.playout = Playout::holding(self.leg_rate, self.media_zero, Some(law));
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
        self.bridged.is_none()
            && self.session.is_none()
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
            Some(LegEvent::Stop(why)) => self.hang_up(why.to_string()),
            None => self.hang_up(crate::leg::CALLER_HUNG_UP),
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

    /// A session wrote a caller frame (`uplink_added_ms`). Only the current session is sent
    /// caller frames that carry their arrival (`uplink`; what is buffered or replayed carries
    /// none), so every stamp counts, also one taken after the session stopped being current.
    pub fn handle_written(&mut self, w: Written) {
        self.report.uplink_added_seen += 1;
        self.uplink_sample.push(
            &mut self.report.uplink_added_ms,
            ms(w.written_at.saturating_duration_since(w.received_at)),
        );
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
            Some(SessionEvent::Closed { code, reason }) if resumes => {
                tracing::warn!(
                    closed = %crate::leg::socket::closed_words(code, &reason),
                    "model session closed; reconnecting"
                );
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
                self.agents
                    .as_ref()
                    .filter(|_| self.bridged.is_none())
                    .and_then(AgentsDriver::deadline),
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

    /// The playout's next tick may run late, with the next input, on a leg that sends no idle
    /// silence: the playout is idle ([`Playout::is_idle`]) and nothing waits for a tick.
    pub fn idle_tick_may_wait(&self) -> bool {
        self.playout.is_idle()
            && self.bridged.is_none()
            && self.agents.as_ref().is_none_or(|a| !a.tick_work())
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
        if self.bridged.is_none()
            && self
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
        if let Some(b) = self.bridged.as_mut() {
            // Bounded: a person's leg that takes nothing for a second loses the oldest.
            if b.out.len() >= 50 {
                b.out.pop_front();
            }
            b.out.push_back(frame);
            return;
        }
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

/// The tag of inserted audio: no agent spoke it.
const INSERTED: TurnTag = TurnTag {
    agent: u32::MAX,
    turn: u64::MAX,
};

// Bridged to a person: once a warm transfer connects, the model leaves and the call carries
// the two people's audio — the caller's frames out to the person's leg, the person's audio
// through the caller's playout on the same 20 ms clock, so the caller's leg, its recording and
// its figures go on as before.
impl CallCore {
    /// Caller and person are bridged from `now`: every session closes (none is reopened) and
    /// the orchestrator stops deciding; the caller's frames go to [`CallCore::poll_bridge`].
    pub fn bridge(&mut self, now: Instant) {
        self.advance(now);
        if self.ended.is_some() || self.bridged.is_some() {
            return;
        }
        self.bridged = Some(Bridged::default());
        if let Some(s) = self.session.take() {
            self.out.close(s.id, false);
        }
        if let Some(r) = self.resume.as_mut() {
            r.abandon(&mut self.out);
        }
        self.resume = None;
        if let Some(a) = self.agents.as_mut() {
            a.close_standby(&mut self.out);
        }
        // Whatever the agent had left to say is not said over the person.
        self.playout.flush();
        self.turn_open = false;
        self.awaiting_first_audio = None;
    }

    /// True once [`CallCore::bridge`] was called.
    pub fn is_bridged(&self) -> bool {
        self.bridged.is_some()
    }

    /// The person's audio, already at the leg's rate, received at `received_at`: played to the
    /// caller from the next tick (running dry between packets is idle silence, not an underrun).
    pub fn handle_bridged_audio(&mut self, samples: &[i16], received_at: Instant) {
        let Some(b) = self.bridged.as_mut() else {
            return;
        };
        b.chunks += 1;
        self.play_inserted(samples, received_at);
    }

    /// Audio that is neither the model's nor the caller's (the person once bridged, hold music),
    /// already at the leg's rate: queued for the caller after whatever is queued, no turn of
    /// any agent (running dry after it is idle silence, not an underrun).
    pub fn play_inserted(&mut self, samples: &[i16], at: Instant) {
        self.playout.push(samples, INSERTED, at);
        self.playout.end_turn(INSERTED);
    }

    /// The next caller frame for the person's leg.
    pub fn poll_bridge(&mut self) -> Option<Frame> {
        self.bridged.as_mut()?.out.pop_front()
    }

    /// The orchestrator is still carrying out a handoff: an agent brought in now would be
    /// refused "not now" (false without an agent set).
    pub fn handoff_under_way(&self) -> bool {
        self.agents
            .as_ref()
            .is_some_and(AgentsDriver::handoff_under_way)
    }

    /// The model is generating a reply (audio may still arrive).
    pub fn generating(&self) -> bool {
        self.turn_open
    }

    /// The latest instant the shell has handed in.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Audio queued and not yet played to the leg.
    pub fn queued_audio(&self) -> Duration {
        self.playout.queued()
    }
}

// The call's downlink half: what the model sends (audio, transcripts, tool calls, turn and
// session signals) into the playout queue, the report and the orchestrator; and the 20 ms tick
// that releases one played frame to the leg.
impl CallCore {
    pub(super) fn on_model_event(&mut self, e: ModelEvent, at: Instant) {
        let own_interruption = self
            .agents
            .as_ref()
            .is_some_and(|a| a.expects_own_interruption());
        if let Some(a) = self.agents.as_mut() {
            a.on_model_event(&e, at, &mut self.out);
        }
        if matches!(e, ModelEvent::GenerationComplete) {
            // The turn's tail first: what the orchestrator sends now goes out with the whole
            // announcement queued (and measured so).
            self.end_model_turn(at);
        }
        self.apply_agent_actions(at);
        match e {
            ModelEvent::Audio { rate, samples } => {
                if let Some(r) = self.resume.as_mut() {
                    r.heard();
                }
                if rate != self.down.from_hz() {
                    match downlink_resampler(rate, self.leg_rate) {
                        Ok(r) => self.down = r,
                        Err(e) => {
                            self.report.protocol_errors.push(e.to_string());
                            return;
                        }
                    }
                }
                if !self.turn_open {
                    self.turn_open = true;
                    self.turn_no += 1;
                    tracing::trace!(
                        target: "baton::wire",
                        turn = self.turn_no,
                        queued_ms = ms(self.playout.queued()),
                        "first model audio of the turn"
                    );
                }
                let tag = TurnTag {
                    agent: self.agent,
                    turn: self.turn_no,
                };
                if let Some(a) = self.agents.as_mut() {
                    a.on_audio_queued(tag.agent, self.playout.queued());
                }
                self.down_buf.clear();
                self.down.process(&samples, &mut self.down_buf);
                self.playout.push(&self.down_buf, tag, at);
            }
            ModelEvent::GenerationComplete => {}
            ModelEvent::TurnComplete => {
                // No generationComplete came: the turn's tail is still in the resampler.
                self.end_model_turn(at);
            }
            ModelEvent::Interrupted => {
                if own_interruption {
                    // The answer to baton's own turn-completing message after generationComplete:
                    // the queued announcement keeps playing.
                    return;
                }
                if self.wire.protocol == Protocol::OpenAi
                    && !self.turn_open
                    && self.playout.queued().is_zero()
                {
                    // OpenAI reports caller speech after model audio as an interruption in case
                    // it is still playing; here it has all been played: nothing is cut.
                    return;
                }
                if self
                    .resume
                    .as_ref()
                    .is_some_and(super::resume::Resume::unheard)
                {
                    // A reconnected session cut a reply it had not sent any audio of; what is
                    // queued came from the session before and is not part of it.
                    return;
                }
                self.reconnect_barge_in();
                if let Some(s) = self.session {
                    // What the caller heard of the cut turn (OpenAI truncates its item there).
                    let frames = if self.heard.0 == self.turn_no {
                        self.heard.1
                    } else {
                        0
                    };
                    self.out
                        .model
                        .push_back(super::core::ModelCommand::BargeIn {
                            to: s.id,
                            heard_ms: frames * u64::from(crate::audio::frame::FRAME_MS),
                        });
                }
                self.playout.flush();
                // The cut turn's tail still in the resampler must not start the next reply.
                self.down_buf.clear();
                self.down.flush(&mut self.down_buf);
                self.down_buf.clear();
                self.report.interruptions += 1;
                if let Some(t) = self.current.and_then(|i| self.report.turns.get_mut(i)) {
                    t.interrupted = true;
                }
                self.turn_open = false;
                self.out.leg.push_back(LegCommand::Clear);
            }
            ModelEvent::InputTranscript { text, .. } => {
                if let Some(t) = self.report.turns.last_mut() {
                    t.caller_text.push_str(&text);
                }
            }
            ModelEvent::OutputTranscript { text, .. } => {
                let idx = self.awaiting_first_audio.map(|(i, _)| i).or(self.current);
                if let Some(t) = idx.and_then(|i| self.report.turns.get_mut(i)) {
                    if !t.agent_text.is_empty() && !text.starts_with(' ') {
                        t.agent_text.push(' ');
                    }
                    t.agent_text.push_str(&text);
                }
            }
            ModelEvent::ToolCall(calls) => {
                self.report.tool_calls += calls.len() as u64;
                if self.agents.is_none()
                    && let Some(s) = self.session
                {
                    self.out.message(s.id, no_backend_response(&calls));
                }
            }
            ModelEvent::ProtocolError(msg) => {
                tracing::warn!(error = %msg, "model sent something baton cannot use; carrying on");
                self.report.protocol_errors.push(msg);
            }
            ModelEvent::SetupComplete
            | ModelEvent::ToolCallCancellation(_)
            | ModelEvent::GoAway { .. }
            | ModelEvent::ResumptionUpdate { .. }
            | ModelEvent::Usage { .. } => {}
        }
    }

    /// The model's turn is generated: its tail out of the resampler into playout, and playout
    /// told the turn has ended (running dry after it is no underrun). Once per turn.
    fn end_model_turn(&mut self, at: Instant) {
        if !self.turn_open {
            return;
        }
        let tag = TurnTag {
            agent: self.agent,
            turn: self.turn_no,
        };
        self.down_buf.clear();
        self.down.flush(&mut self.down_buf);
        self.playout.push(&self.down_buf, tag, at);
        self.playout.end_turn(tag);
        self.turn_open = false;
    }

    pub(super) fn on_tick(&mut self, now: Instant) {
        if let Some(a) = self.agents.as_mut()
            && a.cold_pending()
            && self.playout.queued().is_zero()
        {
            a.run_cold(&mut self.session, &mut self.out);
        }
        if let Some(a) = self.agents.as_mut()
            && let Some(task) = a.due_transfer(self.playout.unheard(now).is_zero(), now)
        {
            self.out.tasks.push_back(task);
        }
        while let Some(played) = self.playout.poll_frame(now) {
            if let Some(cs) = played.chunk_start {
                let waited = now.saturating_duration_since(cs.received_at);
                self.report.downlink_added_seen += 1;
                self.downlink_sample.push(
                    &mut self.report.downlink_added_ms,
                    ms(waited.saturating_sub(cs.ahead)),
                );
            }
            if played.kind == PlayedKind::Voice
                && self.bridged.is_none()
                && played.tag != Some(INSERTED)
            {
                let ts_ms = ms(played.frame.ts);
                if let Some(tag) = played.tag {
                    self.reconnect_voice(tag.turn, played.frame.ts, self.last_voice_end);
                    if self.heard.0 == tag.turn {
                        self.heard.1 += 1;
                    } else {
                        self.heard = (tag.turn, 1);
                    }
                }
                // Sample-exact: where the model's audio ends in this frame (the rest is
                // padding), and where a joined turn starts.
                let at = |n: usize| {
                    played.frame.ts
                        + Duration::from_nanos(
                            n as u64 * 1_000_000_000 / u64::from(played.frame.rate.max(1)),
                        )
                };
                self.last_voice_end = at(played.audio);
                if let (Some(a), Some(tag)) = (self.agents.as_mut(), played.tag) {
                    let caller = self.vad.last_voiced_end();
                    let first_end = played.joined.map_or(played.audio, |(_, k)| k);
                    let ts = played.frame.ts;
                    a.on_voice_played(tag.agent, ts, at(first_end) - ts, caller, &mut self.report);
                    if let Some((next, k)) = played.joined {
                        let len = at(played.audio) - at(k);
                        a.on_voice_played(next.agent, at(k), len, caller, &mut self.report);
                    }
                }
                if let Some((idx, end)) = self.awaiting_first_audio.take() {
                    let v2v = ms(now.saturating_duration_since(end));
                    self.report.first_audio_ms.push(v2v);
                    if let Some(t) = self.report.turns.get_mut(idx) {
                        t.first_audio_ms = Some(v2v);
                        t.agent_start_ms = Some(ts_ms);
                    }
                    self.current = Some(idx);
                }
                if let Some(t) = self.current.and_then(|i| self.report.turns.get_mut(i)) {
                    t.agent_end_ms = Some(ts_ms + ms(played.frame.duration()));
                    if let (Some(a), Some(tag)) = (self.agents.as_ref(), played.tag) {
                        a.note_speaker(t, tag.agent);
                    }
                }
            }
            self.out.leg.push_back(LegCommand::Play {
                frame: played.frame,
                kind: played.kind,
            });
        }
    }
}

// Reconnects, around the reconnect machine ([`super::reconnect`]): the core feeds the machine
// the current session's events and losses, carries out its actions (close the old socket, open
// the next session in its own task, give up), installs the new session (history for a fresh
// one, then the replayed caller audio, then messages held meanwhile) and measures what the
// caller heard.
//
// `reconnect_gap_ms` is taken on the media timeline, like `handoff_gap_ms`. When the model
// owed the caller audio as the old session stopped — a reply being generated, or the caller's
// turn over and its reply not yet begun — the new session says that reply (again), and the gap
// is the silence before its first voiced frame: counted from the latest of the end of the last
// voiced frame played before it, the end of the caller's own speech, and the moment of the
// switch (the old session could not have answered earlier). 0 when queued audio covered the
// switch. When nothing was owed, nothing the caller would have heard is missing; the switch can
// only delay a reply that became owed while it was under way, and the gap is the part of the
// switch after the caller's turn ended (0 when nobody was waiting).
impl CallCore {
    /// The current session ended on its own.
    pub(super) fn session_lost(&mut self, cause: Cause, now: Instant) {
        if let Some(lost) = self.session.take() {
            self.out.drop_session(lost.id);
        }
        let Some(r) = self.resume.as_mut() else {
            return;
        };
        r.machine.on_session_lost(cause, now);
        self.after_stop(now);
        self.apply_resume_actions(now);
    }

    /// Feeds the machine an event of the current session.
    pub(super) fn resume_event(&mut self, e: &ModelEvent, at: Instant) {
        let Some(r) = self.resume.as_mut() else {
            return;
        };
        if let Some(a) = self.agents.as_ref()
            && a.session_epoch() != r.epoch
        {
            r.epoch = a.session_epoch();
            r.machine.on_session_replaced(at);
        }
        r.machine.on_model_event(e, at);
        if let ModelEvent::InputTranscript { finished: true, .. } = e
            && self.session.is_some_and(|s| !s.caps.resumption)
        {
            r.machine.on_transcribed(at);
        }
        match (self.agents.as_mut(), e) {
            (Some(a), _) => {
                let responded = a.take_responded();
                r.machine
                    .on_tool_responded(responded.iter().map(String::as_str), at);
            }
            // Without an agent set every call was answered at once (with an error result).
            (None, ModelEvent::ToolCall(calls)) if self.session.is_some() => {
                r.machine
                    .on_tool_responded(calls.iter().map(|c| c.id.as_str()), at);
            }
            (None, _) => {}
        }
        self.apply_resume_actions(at);
    }

    /// A caller frame (`leg_frame`, `dur` long, at the leg's rate; the uplink resampler has
    /// added what it made of it to `up_buf`, possibly nothing yet): the leg frame is kept for
    /// replay until a handle covers it, and `up_buf`, once it holds a chunk, is encoded for the
    /// session if one is live (or kept for the next one, between sessions).
    /// The ring keeps the leg's audio, not the model's, in one byte per sample on a G.711 leg
    /// ([`super::kept`]): at 8 kHz half its PCM; a replay decodes it and brings it to the
    /// session's rate as live audio goes.
    pub(super) fn uplink(
        &mut self,
        leg_frame: &[i16],
        dur: Duration,
        received_at: tokio::time::Instant,
        now: Instant,
    ) {
        if let Some(r) = self.resume.as_mut() {
            r.frame.clear();
            super::kept::encode(leg_frame, &mut r.frame);
            if !r.machine.on_uplink(&r.frame, dur, now) {
                // Reconnecting: the ring replays every frame the model did not take, those
                // gathered here among them.
                self.up_buf.clear();
                self.up_gathered = Duration::ZERO;
                self.up_since = None;
                return;
            }
        }
        let first = *self.up_since.get_or_insert(received_at);
        self.up_gathered += dur;
        if self.up_gathered < self.up_chunk {
            return;
        }
        self.up_gathered = Duration::ZERO;
        self.up_since = None;
        if self.up_buf.is_empty() {
            return;
        }
        let received_at = first;
        match (self.session, self.agents.as_mut()) {
            (Some(s), _) => {
                let json = self
                    .wire
                    .audio_message(&self.up_buf, self.up_rate, &mut self.scratch);
                self.out.send(
                    s.id,
                    Outbound::Text {
                        json,
                        received_at: Some(received_at),
                    },
                );
            }
            // Between sessions of a cold recreate: kept and delivered to the next session.
            (None, Some(a)) => a.buffer_uplink(Outbound::Text {
                json: self
                    .wire
                    .audio_message(&self.up_buf, self.up_rate, &mut self.scratch),
                received_at: Some(received_at),
            }),
            (None, None) => {}
        }
        self.up_buf.clear();
    }

    /// The session opened by a reconnect is up, or could not be opened.
    pub(super) fn on_reopened(
        &mut self,
        id: SessionId,
        result: Result<crate::model::Capabilities, OpenFailed>,
        now: Instant,
    ) {
        let Some(r) = self.resume.as_mut() else {
            return;
        };
        r.opening = None;
        match result {
            Ok(caps) => self.install(Live { id, caps }, now),
            Err(e) => {
                tracing::warn!(error = %e.reason, "model session could not be reopened");
                let why = if e.handle_refused {
                    OpenFailure::HandleRefused
                } else {
                    OpenFailure::Other
                };
                r.history = None;
                r.machine.on_open_failed(why, now);
            }
        }
        self.apply_resume_actions(now);
    }

    /// An event of the old session being closed (`None`: its events have ended).
    pub(super) fn on_old_session_event(&mut self, ev: Option<SessionEvent>, now: Instant) {
        let Some(r) = self.resume.as_mut() else {
            return;
        };
        match ev {
            Some(SessionEvent::Model(..)) => return,
            _ => {
                if let Some(old) = r.closing.take() {
                    self.out.drop_session(old);
                }
                r.machine.on_old_closed(now);
            }
        }
        self.apply_resume_actions(now);
    }

    /// Replayed caller audio (already at the session's rate) to session `id`; nothing when empty.
    fn send_replayed(&mut self, id: SessionId, samples: &[i16]) {
        if samples.is_empty() {
            return;
        }
        let json = self
            .wire
            .audio_message(samples, self.up_rate, &mut self.scratch);
        self.out.send(
            id,
            Outbound::Text {
                json,
                received_at: None,
            },
        );
    }

    /// The new session is up: history, replayed audio, held messages, in that order.
    fn install(&mut self, s: Live, now: Instant) {
        let Some(r) = self.resume.as_mut() else {
            return;
        };
        let mut replay = Vec::new();
        super::kept::decode(&r.machine.on_opened(now), &mut replay);
        // What was gathered for the old session is in the ring, replayed below.
        self.up_buf.clear();
        self.up_gathered = Duration::ZERO;
        self.up_since = None;
        if let Some(h) = r.history.take() {
            self.out.message(s.id, h);
        }
        if !replay.is_empty() {
            // The kept leg frames through a fresh resampler (the call's own carries on with the
            // live stream); delivered late on purpose: not counted as uplink latency.
            match StreamResampler::aligned(self.leg_rate, self.up_rate) {
                Ok(mut rs) => {
                    let mut out = Vec::new();
                    rs.process(&replay, &mut out);
                    rs.flush(&mut out);
                    // One message per chunk of the session's input, as live audio goes.
                    let per = (u64::from(self.up_rate) * self.up_chunk.as_millis() as u64 / 1000)
                        .max(1) as usize;
                    for chunk in out.chunks(per) {
                        self.send_replayed(s.id, chunk);
                    }
                }
                Err(e) => tracing::warn!(error = %e, "caller audio kept for replay not resent"),
            }
        }
        if let Some(a) = self.agents.as_mut() {
            a.set_holding(false);
            for m in a.take_held() {
                self.out.message(s.id, m);
            }
        }
        self.session = Some(s);
        let Some(r) = self.resume.as_mut() else {
            return;
        };
        r.unheard = true;
        let index = r.machine.records().len().saturating_sub(1);
        if let (Some(st), Some(rec)) = (r.stopped.take(), r.machine.records_mut().get_mut(index)) {
            rec.model_audio_queued_ms = round2(ms(st.queued));
            if st.owed {
                r.gaps.push((index, st.turn, st.media));
            } else if let Some((_, ended)) = self.awaiting_first_audio {
                // The caller is waiting for a reply: the switch delayed it by this much.
                rec.gap_ms = Some(round2(ms(now.saturating_duration_since(st.at.max(ended)))));
            } else {
                rec.gap_ms = Some(0.0);
            }
        }
    }

    /// The caller's words of a replayed turn, transcribed again by the reconnected session
    /// before it has said anything: already in the transcript, so not passed on twice.
    pub(super) fn replayed_transcript(&self, e: &ModelEvent) -> bool {
        let ModelEvent::InputTranscript { text, .. } = e else {
            return false;
        };
        let text = text.trim();
        self.resume.as_ref().is_some_and(Resume::unheard)
            && !text.is_empty()
            && self
                .report
                .turns
                .iter()
                .rev()
                .take(2)
                .any(|t| t.caller_text.trim_end().ends_with(text))
    }

    /// Carries out what the machine decided.
    pub(super) fn apply_resume_actions(&mut self, now: Instant) {
        loop {
            let Some(action) = self.resume.as_mut().and_then(|r| r.machine.poll_action()) else {
                return;
            };
            match action {
                Action::CloseCurrent => {
                    if let Some(old) = self.session.take() {
                        self.out.close(old.id, true);
                        if let Some(r) = self.resume.as_mut() {
                            r.closing = Some(old.id);
                        }
                    }
                    self.after_stop(now);
                }
                Action::Open { handle } => self.open_next(handle),
                Action::GiveUp { reason } => {
                    tracing::error!(%reason, "giving up on the model session");
                    self.hang_up(reason);
                    return;
                }
            }
        }
    }

    /// The old session is no longer used: close its turn, cancel its calls, note what the
    /// caller was hearing.
    fn after_stop(&mut self, now: Instant) {
        let Some(r) = self.resume.as_mut() else {
            return;
        };
        let abandoned = r.machine.abandoned_calls();
        let queued = self.playout.queued();
        r.stopped = Some(Stopped {
            at: now,
            media: now.saturating_duration_since(self.media_zero),
            turn: self.turn_no,
            queued,
            owed: self.turn_open || self.awaiting_first_audio.is_some(),
        });
        if let Some(a) = self.agents.as_mut() {
            a.set_holding(true);
            if !abandoned.is_empty() {
                a.on_model_event(
                    &ModelEvent::ToolCallCancellation(abandoned),
                    now,
                    &mut self.out,
                );
            }
        }
        if self.turn_open {
            // Nothing more of this turn will come: its tail goes to playout, which keeps playing.
            self.on_model_event(ModelEvent::TurnComplete, now);
        }
    }

    /// Opens the next session in its own task.
    fn open_next(&mut self, handle: Option<String>) {
        let Some(r) = self.resume.as_ref() else {
            return;
        };
        let (backend, mut cfg) = match (self.agents.as_ref(), r.source.as_ref()) {
            (Some(a), _) => (a.backend(), a.current_config()),
            (None, Some(src)) => (src.backend.clone(), src.config.clone()),
            (None, None) => return,
        };
        cfg.history_in_client_content = false;
        let mut history = None;
        match handle {
            Some(h) => cfg.resume_handle = Some(h),
            None => {
                cfg.resume_handle = None;
                let turns = match self.agents.as_ref() {
                    Some(a) => a.history(),
                    None => self.transcript(),
                };
                if !turns.is_empty() {
                    cfg.history_in_client_content = true;
                    cfg.system_instruction = Some(match cfg.system_instruction.take() {
                        Some(si) => format!("{si}\n\n{CONTINUE_NOTE}"),
                        None => CONTINUE_NOTE.to_owned(),
                    });
                    history = Some(ClientMessage::ClientContent(ClientContent {
                        turns: Some(turns),
                        turn_complete: Some(true),
                    }));
                }
            }
        }
        let id = self.out.open(OpenRequest {
            backend,
            config: cfg,
            standby_socket: true,
        });
        if let Some(r) = self.resume.as_mut() {
            r.history = history;
            r.opening = Some(id);
        }
    }

    /// The conversation so far as `user`/`model` turns (without an agent set).
    fn transcript(&self) -> Vec<Content> {
        let mut turns = Vec::new();
        for t in &self.report.turns {
            if !t.caller_text.trim().is_empty() {
                turns.push(Content::text(Some("user"), t.caller_text.trim()));
            }
            if !t.agent_text.trim().is_empty() {
                turns.push(Content::text(Some("model"), t.agent_text.trim()));
            }
        }
        turns
    }

    /// A voiced frame of `turn` plays at `ts`, after voice that ended at `prev_end`.
    pub(super) fn reconnect_voice(&mut self, turn: u64, ts: Duration, prev_end: Duration) {
        let Some(r) = self.resume.as_mut() else {
            return;
        };
        if r.gaps.is_empty() {
            return;
        }
        let from = prev_end.max(self.vad.last_voiced_end());
        let records = r.machine.records_mut();
        r.gaps.retain(|&(index, after, floor)| {
            if turn <= after {
                return true;
            }
            if let Some(rec) = records.get_mut(index) {
                rec.gap_ms = Some(round2(ms(ts.saturating_sub(from.max(floor)))));
            }
            false
        });
    }

    /// The caller barged in (playout is about to be flushed): a reconnect still waiting for its
    /// first new voiced frame owes the caller nothing more, and its gap is the silence the caller
    /// heard before starting to speak.
    pub(super) fn reconnect_barge_in(&mut self) {
        let Some(r) = self.resume.as_mut() else {
            return;
        };
        let spoke_at = self
            .report
            .turns
            .last()
            .map(|t| Duration::from_secs_f64(t.caller_start_ms.max(0.0) / 1000.0))
            .unwrap_or_default();
        let records = r.machine.records_mut();
        for (index, _, floor) in r.gaps.drain(..) {
            if let Some(rec) = records.get_mut(index) {
                let from = self.last_voice_end.max(floor);
                rec.gap_ms = Some(round2(ms(spoke_at.saturating_sub(from))));
            }
        }
    }

    /// Moves the reconnect records into the report.
    pub(super) fn finish_reconnects(&mut self) {
        let Some(r) = self.resume.take() else {
            return;
        };
        let records = r.machine.into_records();
        self.report.reconnect_gap_ms = records.iter().filter_map(|r| r.gap_ms).collect();
        self.report.audio_replayed_ms = round2(records.iter().map(|r| r.audio_replayed_ms).sum());
        self.report.audio_lost_ms = round2(records.iter().map(|r| r.audio_lost_ms).sum());
        self.report.reconnects = records;
    }
}
