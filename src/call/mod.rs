//! One call: wires a caller leg, a model session (two while a warm standby is prepared), playout
//! and, when the call has an agent set, the orchestrator; measures everything.
//!
//! A single task per call selects over the leg's frames, the session's events, the playout
//! deadline and (with agents) tool results, standby sessions and the orchestrator's timer; input
//! that is ready at a tick's instant is taken before that tick is played. Uplink: leg frame →
//! energy VAD (for voice-to-voice timing) → resample to the model's input rate → JSON → writer
//! channel. Downlink: model audio → resample to the leg's rate → playout queue; every 20 ms tick
//! playout releases exactly one frame to the leg. The clock is tokio's, so the same code runs in
//! real time or on a paused (accelerated) clock.

pub mod agents;
pub mod backend;
mod downlink;
pub mod metrics;
pub mod reconnect;
pub mod recording;
pub mod resume;
mod standby;
pub mod tap;

use std::time::Duration;

use tokio::time::{Instant, sleep_until};

use crate::audio::playout::{PlayedKind, Playout, TurnTag};
use crate::audio::resample::StreamResampler;
use crate::audio::vad::{TurnDetector, VadEvent};
use crate::leg::{LegCommand, LegEvent, LegHandle};
use crate::model::gemini::wire::{ClientMessage, FunctionResponse, ToolResponse};
use crate::model::handle::{ModelSession, Protocol};
use crate::model::session::{Outbound, SessionEvent};
use crate::model::{ModelEvent, ToolCallRequest};
pub use agents::Agents;
use agents::AgentsDriver;
use metrics::ms;
pub use metrics::{CallReport, HandoffRecord, ReconnectRecord, TurnRecord};
pub use reconnect::ReconnectPolicy;
pub use resume::ModelSource;

/// Knobs of the call's own measurement.
#[derive(Clone, Debug)]
pub struct CallOptions {
    /// Silence that ends a caller turn for `first_audio_ms` bookkeeping (not sent to the model).
    pub caller_silence: Duration,
    /// When this turns true the call hangs up (server drain deadline).
    pub hangup: Option<tokio::sync::watch::Receiver<bool>>,
    /// Where to open another session when the service sends `goAway` or the socket drops
    /// (a call with an agent set uses the set's). Without either, the call ends with its
    /// session.
    pub model: Option<ModelSource>,
    pub reconnect: ReconnectPolicy,
    /// Commands from outside the call (an operator's trigger, a sidecar's result).
    pub commands: Option<tap::Inbox>,
    /// A recording of both directions, written off the audio path.
    pub recording: Option<recording::AudioTap>,
}

impl Default for CallOptions {
    fn default() -> Self {
        CallOptions {
            caller_silence: Duration::from_millis(500),
            hangup: None,
            model: None,
            reconnect: ReconnectPolicy::default(),
            commands: None,
            recording: None,
        }
    }
}

/// A failure that prevented the call from running at all.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("unsupported rate pair {from} Hz -> {to} Hz: {reason}")]
    Resampler { from: u32, to: u32, reason: String },
}

fn resampler(from: u32, to: u32) -> Result<StreamResampler, CallError> {
    StreamResampler::new(from, to).map_err(|e| CallError::Resampler {
        from,
        to,
        reason: e.to_string(),
    })
}

/// The model's audio into the leg's rate, each reply time-aligned (no filter delay of silence
/// in front of it), so replies played back to back join sample to sample.
fn downlink_resampler(from: u32, to: u32) -> Result<StreamResampler, CallError> {
    StreamResampler::aligned(from, to).map_err(|e| CallError::Resampler {
        from,
        to,
        reason: e.to_string(),
    })
}

/// Runs a call with one agent and no orchestrator.
pub async fn run(
    leg: LegHandle,
    session: ModelSession,
    opts: CallOptions,
) -> Result<CallReport, CallError> {
    run_with_agents(leg, session, opts, None).await
}

/// Runs the call until the leg stops or the model session ends. With `agents`, the orchestrator
/// sees every model event and its actions are carried out on the wire.
pub async fn run_with_agents(
    mut leg: LegHandle,
    session: ModelSession,
    mut opts: CallOptions,
    agents: Option<Agents>,
) -> Result<CallReport, CallError> {
    let mut call = Call::new(&leg, session, &opts, agents)?;
    let mut hangup = opts.hangup.take();
    let mut commands = opts.commands.take().and_then(|i| i.take());
    call.tap = opts.recording.take();
    let end_reason = loop {
        crate::wakeups::note();
        if let Some(reason) = call.gave_up.take() {
            call.hang_up(&leg);
            break reason;
        }
        let deadline = Instant::from_std(call.playout.poll_timeout());
        let agents_deadline = call.agents.as_ref().and_then(AgentsDriver::deadline);
        let resume_deadline = call.resume.as_ref().and_then(resume::Resume::deadline);
        tokio::select! {
            biased;
            _ = wait_true(&mut hangup) => {
                call.hang_up(&leg);
                break "server is shutting down".to_owned();
            }
            ev = recv_session(&mut call.session) => match ev {
                Some(SessionEvent::Model(e, _)) if call.replayed_transcript(&e) => {}
                Some(SessionEvent::Model(e, at)) => {
                    if !matches!(e, ModelEvent::Audio { .. }) {
                        tracing::trace!(target: "baton::wire", event = ?e, "model event");
                    }
                    let resumable = call.resume.is_some().then(|| e.clone());
                    call.on_model_event(e, at, &leg);
                    if let Some(e) = resumable {
                        call.resume_event(&e, at, &leg);
                    }
                }
                Some(SessionEvent::Written { received_at, written_at }) => {
                    call.report.uplink_added_ms.push(ms(written_at.saturating_duration_since(received_at)));
                }
                Some(SessionEvent::Closed { code, reason }) if call.resume.is_some() => {
                    tracing::warn!(?code, %reason, "model session closed; reconnecting");
                    let now = Instant::now();
                    call.session_lost(reconnect::Cause::Closed(code), now, &leg);
                    if let Some(feature) = crate::model::catalog::refused_feature(code, &reason) {
                        tracing::warn!(%feature, "the model refused {feature}: this call goes on without it");
                        if let Some(a) = call.agents.as_mut() {
                            a.on_refused(feature, now);
                        }
                        call.apply_agent_actions(now);
                    }
                }
                Some(SessionEvent::Dead { silent_for }) if call.resume.is_some() => {
                    tracing::warn!(?silent_for, "model socket dead; reconnecting");
                    call.session_lost(reconnect::Cause::Dead, Instant::now(), &leg);
                }
                Some(SessionEvent::Closed { code, reason }) => {
                    let _ = leg.commands.send(LegCommand::Hangup);
                    break match code {
                        Some(c) => format!("model closed the session (code {c}): {reason}"),
                        None => format!("model connection lost: {reason}"),
                    };
                }
                Some(SessionEvent::Dead { silent_for }) => {
                    let _ = leg.commands.send(LegCommand::Hangup);
                    break format!("model socket dead: nothing received for {silent_for:?}");
                }
                None if call.resume.is_some() => {
                    call.session_lost(reconnect::Cause::Closed(None), Instant::now(), &leg);
                }
                None => {
                    let _ = leg.commands.send(LegCommand::Hangup);
                    break "model session ended".to_owned();
                }
            },
            w = resume::wake(&mut call.resume) => call.on_resume_wake(w, &leg),
            _ = sleep_until_opt(resume_deadline) => {
                let now = Instant::now();
                if let Some(r) = call.resume.as_mut() {
                    r.machine.handle_timeout(now);
                }
                call.apply_resume_actions(now, &leg);
            }
            wake = agents::wake(&mut call.agents) => {
                let now = Instant::now();
                if let Some(a) = call.agents.as_mut() {
                    a.on_wake(wake, now, &mut call.session);
                }
                call.apply_agent_actions(now);
                if call.model_lost() {
                    call.hang_up(&leg);
                    break "no model session could be reopened after a handoff".to_owned();
                }
            }
            _ = sleep_until_opt(agents_deadline) => {
                let now = Instant::now();
                if let Some(a) = call.agents.as_mut() {
                    a.on_timeout(now);
                }
                call.apply_agent_actions(now);
                if call.model_lost() {
                    call.hang_up(&leg);
                    break "no model session could be reopened after a handoff".to_owned();
                }
            }
            cmd = tap::recv(&mut commands) => {
                let now = Instant::now();
                call.on_command(cmd, now);
                call.apply_agent_actions(now);
            }
            ev = leg.events.recv() => match ev {
                Some(LegEvent::Frame { frame, received_at }) => call.on_caller_frame(frame, received_at),
                Some(LegEvent::Dtmf { digit }) => tracing::debug!(%digit, "caller pressed a key"),
                Some(LegEvent::Heard { .. }) => {}
                Some(LegEvent::Stop) | None => {
                    call.hang_up(&leg);
                    break "caller hung up".to_owned();
                }
            },
            _ = sleep_until(deadline) => call.on_tick(Instant::now(), &leg),
        }
    };
    Ok(call.finish(end_reason))
}

/// The state of one call between events.
struct Call {
    session: Option<ModelSession>,
    /// The wire protocol of every session of this call (all come from one backend).
    protocol: Protocol,
    agents: Option<AgentsDriver>,
    playout: Playout,
    leg_rate: u32,
    up: StreamResampler,
    down: StreamResampler,
    down_buf: Vec<i16>,
    up_buf: Vec<i16>,
    scratch: Vec<u8>,
    vad: TurnDetector,
    report: CallReport,
    /// Agent index tagged on model audio.
    agent: u32,
    turn_no: u64,
    turn_open: bool,
    last_voiced_at: Option<Instant>,
    awaiting_first_audio: Option<(usize, Instant)>,
    current: Option<usize>,
    leg_open: bool,
    /// Session resumption and reconnects (`None`: the call ends with its session).
    resume: Option<resume::Resume>,
    /// The reconnect gave up: the call ends with this reason.
    gave_up: Option<String>,
    /// Where the last voiced frame played ends (media time).
    last_voice_end: Duration,
    /// Media time zero (the leg's start).
    media_zero: Instant,
    tap: Option<recording::AudioTap>,
    /// Voiced frames of model turn `.0` handed to the leg (what the caller heard of it).
    heard: (u64, u64),
}

impl Call {
    fn new(
        leg: &LegHandle,
        session: ModelSession,
        opts: &CallOptions,
        agents: Option<Agents>,
    ) -> Result<Call, CallError> {
        let protocol = session.protocol();
        let up = resampler(leg.rate, protocol.input_rate())?;
        let down = downlink_resampler(protocol.output_rate(), leg.rate)?;
        let report = CallReport {
            uplink_resampler_delay_ms: ms(up.delay()),
            downlink_resampler_delay_ms: ms(down.delay()),
            ..Default::default()
        };
        let resume = (opts.model.is_some() || agents.is_some()).then(|| {
            resume::Resume::new(opts.reconnect.clone(), opts.model.clone(), Instant::now())
        });
        let mut call = Call {
            session: Some(session),
            protocol,
            agents: agents.map(AgentsDriver::new),
            playout: Playout::new(leg.rate, leg.started_at.into_std()),
            leg_rate: leg.rate,
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
            leg_open: true,
            resume,
            gave_up: None,
            last_voice_end: Duration::ZERO,
            media_zero: leg.started_at,
            tap: None,
            heard: (0, 0),
        };
        if let (Some(r), Some(a)) = (call.resume.as_mut(), call.agents.as_ref()) {
            r.keep_standby(a.backend());
        }
        call.apply_agent_actions(Instant::now());
        Ok(call)
    }

    /// No session, none being opened and none about to be: the call cannot go on.
    fn model_lost(&self) -> bool {
        self.session.is_none()
            && self.agents.as_ref().is_none_or(|a| !a.reopening())
            && self.resume.as_ref().is_none_or(|r| !r.machine.switching())
    }

    fn hang_up(&mut self, leg: &LegHandle) {
        let _ = leg.commands.send(LegCommand::Hangup);
        if let Some(s) = &self.session {
            s.send(Outbound::Close);
        }
        if let Some(r) = self.resume.as_mut() {
            r.abandon();
        }
        if let Some(a) = self.agents.as_mut() {
            a.close_standby();
        }
    }

    fn on_caller_frame(&mut self, frame: crate::audio::Frame, received_at: Instant) {
        if let Some(t) = &self.tap {
            t.caller(&frame);
        }
        let before = self.vad.last_voiced_end();
        let vad_event = self.vad.push(&frame.samples, frame.ts, frame.duration());
        if self.vad.last_voiced_end() != before {
            self.last_voiced_at = Some(received_at);
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
        self.uplink(&frame.samples, frame.duration(), received_at);
    }

    /// A command from outside: fed to the orchestrator (refused when the call has none).
    fn on_command(&mut self, cmd: tap::CallCommand, now: Instant) {
        let tap::CallCommand::Agents { input, reply } = cmd;
        let result = match self.agents.as_mut() {
            Some(a) => a.command(input, now),
            None => Err(crate::agents::CommandError::NoAgents),
        };
        if let Some(r) = reply {
            let _ = r.send(result);
        }
    }

    /// Carries out what the orchestrator decided.
    fn apply_agent_actions(&mut self, now: Instant) {
        if let Some(a) = self.agents.as_mut()
            && let Some(agent) =
                a.apply_actions(now, self.playout.unheard(now.into_std()), &mut self.session)
        {
            self.agent = agent;
        }
    }

    fn finish(mut self, end_reason: String) -> CallReport {
        // Late `Written` reports for frames sent just before the end.
        if let Some(s) = self.session.as_mut() {
            while let Ok(ev) = s.events().try_recv() {
                if let SessionEvent::Written {
                    received_at,
                    written_at,
                } = ev
                {
                    self.report
                        .uplink_added_ms
                        .push(ms(written_at.saturating_duration_since(received_at)));
                }
            }
        }
        self.finish_reconnects();
        let stats = self.playout.stats();
        self.report.underruns = stats.underruns;
        self.report.late_ticks = stats.late_ticks;
        self.report.frames_played = stats.frames;
        self.report.voice_frames = stats.voice_frames;
        self.report.playout_flushed_samples = stats.flushed_samples;
        self.report.end_reason = end_reason;
        if let Some(a) = self.agents.take() {
            a.finish(&mut self.report);
        }
        self.report
    }
}

async fn recv_session(s: &mut Option<ModelSession>) -> Option<SessionEvent> {
    match s {
        Some(s) => s.events().recv().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Resolves when the watched flag is (or becomes) true; never without a watch.
async fn wait_true(w: &mut Option<tokio::sync::watch::Receiver<bool>>) {
    match w {
        Some(rx) => {
            if rx.wait_for(|v| *v).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending::<()>().await,
    }
}

/// Without an agent set, every tool call is answered with an error result so a BLOCKING call
/// never stalls the session.
fn no_backend_response(calls: &[ToolCallRequest]) -> ClientMessage {
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
