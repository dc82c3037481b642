//! The call's shell around the reconnect machine ([`super::reconnect`]): it feeds the machine
//! the current session's events and losses, carries out its actions (close the old socket, open
//! the next session in its own task, give up), installs the new session (history for a fresh
//! one, then the replayed caller audio, then messages held meanwhile) and measures what the
//! caller heard.
//!
//! `reconnect_gap_ms` is taken on the media timeline, like `handoff_gap_ms`. When the model
//! owed the caller audio as the old session stopped — a reply being generated, or the caller's
//! turn over and its reply not yet begun — the new session says that reply (again), and the gap
//! is the silence before its first voiced frame: counted from the latest of the end of the last
//! voiced frame played before it, the end of the caller's own speech, and the moment of the
//! switch (the old session could not have answered earlier). 0 when queued audio covered the
//! switch. When nothing was owed, nothing the caller would have heard is missing; the switch can
//! only delay a reply that became owed while it was under way, and the gap is the part of the
//! switch after the caller's turn ended (0 when nobody was waiting).

use std::time::{Duration, Instant};

use super::core::CallCore;
use super::metrics::{ms, round2};
use super::outbox::{Live, OpenFailed, OpenRequest, SessionId};
use super::reconnect::{Action, Cause, OpenFailure, ReconnectPolicy, Reconnector};
use crate::audio::resample::StreamResampler;
use crate::backend::ModelBackend;
use crate::model::ModelEvent;
use crate::model::gemini::session::SessionConfig;
use crate::model::gemini::wire::{ClientContent, ClientMessage, Content};
use crate::model::session::{Outbound, SessionEvent};

/// Said to a fresh session that continues a call, after its own instruction.
pub const CONTINUE_NOTE: &str = "The call is already under way and the conversation so far is \
    in the history. Do not greet the caller or introduce yourself again; continue from the \
    caller's last words.";

/// Where the call's sessions come from when it must open another one (without an agent set; an
/// agent set brings its own).
#[derive(Clone, Debug)]
pub struct ModelSource {
    pub backend: ModelBackend,
    pub config: SessionConfig,
}

/// What the caller was hearing when the old session stopped.
#[derive(Debug)]
struct Stopped {
    at: Instant,
    /// The switch on the media timeline.
    media: Duration,
    turn: u64,
    queued: Duration,
    /// The model owed the caller audio.
    owed: bool,
}

/// The reconnect state of a call.
pub(super) struct Resume {
    /// Keeps each uplink frame's PCM for replay.
    pub(super) machine: Reconnector<Box<[i16]>>,
    source: Option<ModelSource>,
    /// The session being opened.
    opening: Option<SessionId>,
    /// Sent first on the session being opened (a fresh session's history).
    history: Option<ClientMessage>,
    /// The old session, closing.
    closing: Option<SessionId>,
    stopped: Option<Stopped>,
    /// Records waiting for the first voiced frame of a turn after `.1`, and the media time the
    /// silence is counted from at the earliest.
    gaps: Vec<(usize, u64, Duration)>,
    epoch: u64,
    /// The session opened by the last reconnect has not sent audio yet.
    unheard: bool,
}

impl Resume {
    pub(super) fn new(policy: ReconnectPolicy, source: Option<ModelSource>, now: Instant) -> Self {
        Resume {
            machine: Reconnector::new(policy, now),
            source,
            opening: None,
            history: None,
            closing: None,
            stopped: None,
            gaps: Vec::new(),
            epoch: 0,
            unheard: false,
        }
    }

    /// Where sessions come from without an agent set.
    pub(super) fn source(&self) -> Option<&ModelSource> {
        self.source.as_ref()
    }

    /// The session being opened.
    pub(super) fn opening(&self) -> Option<SessionId> {
        self.opening
    }

    /// The old session being closed.
    pub(super) fn closing(&self) -> Option<SessionId> {
        self.closing
    }

    /// The session opened by the last reconnect has sent no audio yet: an `interrupted` from it
    /// cuts nothing the caller could hear (the queued audio is the old session's).
    pub(super) fn unheard(&self) -> bool {
        self.unheard
    }

    /// The current session sent audio.
    pub(super) fn heard(&mut self) {
        self.unheard = false;
    }

    pub(super) fn deadline(&self) -> Option<Instant> {
        self.machine.poll_timeout()
    }

    /// The call is ending: stop opening, close what is closing.
    pub(super) fn abandon(&mut self, out: &mut super::outbox::Outbox) {
        self.opening = None;
        if let Some(id) = self.closing.take() {
            out.close(id, false);
        }
    }
}

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

    /// A caller frame (`leg_frame`, `dur` long, at the leg's rate; `up_buf` holds what the uplink
    /// resampler made of it for the model, possibly nothing yet): the leg frame is kept for
    /// replay until a handle covers it, and `up_buf` is encoded for the session if one is live.
    /// The ring keeps the leg's PCM, not the model's: at 8 kHz half the bytes of 16 kHz, a third
    /// of an encoded message; a replay resamples it again.
    pub(super) fn uplink(
        &mut self,
        leg_frame: &[i16],
        dur: Duration,
        received_at: tokio::time::Instant,
        now: Instant,
    ) {
        if let Some(r) = self.resume.as_mut()
            && !r.machine.on_uplink(Box::from(leg_frame), dur, now)
        {
            return;
        }
        if self.up_buf.is_empty() {
            return;
        }
        match (self.session, self.agents.as_mut()) {
            (Some(s), _) => {
                let json = self.protocol.audio_message(&self.up_buf, &mut self.scratch);
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
                json: self.protocol.audio_message(&self.up_buf, &mut self.scratch),
                received_at: Some(received_at),
            }),
            (None, None) => {}
        }
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
            Some(SessionEvent::Model(..) | SessionEvent::Written { .. }) => return,
            _ => {
                if let Some(old) = r.closing.take() {
                    self.out.drop_session(old);
                }
                r.machine.on_old_closed(now);
            }
        }
        self.apply_resume_actions(now);
    }

    /// The new session is up: history, replayed audio, held messages, in that order.
    fn install(&mut self, s: Live, now: Instant) {
        let Some(r) = self.resume.as_mut() else {
            return;
        };
        let replay = r.machine.on_opened(now);
        if let Some(h) = r.history.take() {
            self.out.message(s.id, h);
        }
        if !replay.is_empty() {
            // The kept leg frames through a fresh resampler (the call's own carries on with the
            // live stream); delivered late on purpose: not counted as uplink latency.
            match StreamResampler::aligned(self.leg_rate, self.protocol.input_rate()) {
                Ok(mut rs) => {
                    let mut out = Vec::new();
                    for samples in &replay {
                        out.clear();
                        rs.process(samples, &mut out);
                        if !out.is_empty() {
                            let json = self.protocol.audio_message(&out, &mut self.scratch);
                            self.out.send(
                                s.id,
                                Outbound::Text {
                                    json,
                                    received_at: None,
                                },
                            );
                        }
                    }
                    out.clear();
                    rs.flush(&mut out);
                    if !out.is_empty() {
                        let json = self.protocol.audio_message(&out, &mut self.scratch);
                        self.out.send(
                            s.id,
                            Outbound::Text {
                                json,
                                received_at: None,
                            },
                        );
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
