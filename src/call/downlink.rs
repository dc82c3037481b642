//! The call's downlink half: what the model sends (audio, transcripts, tool calls, turn and
//! session signals) into the playout queue, the report and the orchestrator; and the 20 ms tick
//! that releases one played frame to the leg.

use std::time::{Duration, Instant};

use super::core::{CallCore, no_backend_response};
use super::downlink_resampler;
use super::metrics::ms;
use crate::audio::playout::{PlayedKind, TurnTag};
use crate::leg::LegCommand;
use crate::model::ModelEvent;
use crate::model::handle::Protocol;

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
                if self.protocol == Protocol::OpenAi
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
                self.report
                    .downlink_added_ms
                    .push(ms(waited.saturating_sub(cs.ahead)));
            }
            if played.kind == PlayedKind::Voice {
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
