//! One call: wires a caller leg, a model session (two while a warm standby is prepared), playout
//! and, when the call has an agent set, the orchestrator; measures everything.
//!
//! A single task per call selects over the leg's frames, the session's events, the playout
//! deadline and (with agents) tool results, standby sessions and the orchestrator's timer; input
//! that is ready at a tick's instant is taken before that tick is played. Uplink: leg frame →
//! energy VAD (for voice-to-voice timing) → resample to the model's input rate → JSON → the
//! session's protocol core, written by this task's next poll of the session. Downlink: model audio → resample to the leg's rate → playout queue; every 20 ms tick
//! playout releases exactly one frame to the leg. The clock is tokio's, so the same code runs in
//! real time or on a paused (accelerated) clock.

pub mod agents;
pub mod core;
#[cfg(test)]
mod core_tests;
mod gate;
mod kept;
pub mod metrics;
mod no_answer;
mod occasional;
pub mod outbox;
pub mod reconnect;
pub mod recording;
pub mod resume;
mod samples;
mod standby;
pub mod tap;
pub mod warm;

use std::future::poll_fn;
use std::task::Poll;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::agents::runner::ToolTasks;
use crate::audio::resample::StreamResampler;
use crate::backend::ModelBackend;
use crate::leg::{LegCommand, LegEvent, LegHandle, Refused};
use crate::model::gemini::session::SessionConfig;
use crate::model::handle::{ModelSession, OpenError};
use crate::model::session::{Outbound, SessionEvent};
pub use agents::Agents;
pub use core::CallCore;
pub use metrics::{CallReport, HandoffRecord, ReconnectRecord, TurnRecord};
use outbox::{Live, ModelCommand, OpenFailed, OpenRequest, SessionId, Task, TransferRequest};
pub use reconnect::ReconnectPolicy;
pub use resume::ModelSource;
use standby::{Standby, Taker};

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
    /// Where the caller's leg takes blind transfers to a person (a SIP call's REFER, a Twilio
    /// call's REST redirect); without one, a transfer an agent asks for ends `unavailable` and
    /// the caller stays.
    pub transfer: Option<crate::leg::sip::transfer::TransferPort>,
    /// Where a warm transfer dials the person (the daemon's SIP trunks); without one, a warm
    /// transfer ends `unavailable` and the caller stays.
    pub dialer: Option<std::sync::Arc<dyn warm::Dialer>>,
    /// Where a warm transfer records the person's leg (left: the person, right: what they
    /// heard — the brief, then the caller), written off the audio path like the call's own.
    pub person_recording: Option<std::path::PathBuf>,
    /// Gemini: caller audio at 8–16 kHz is resampled to the model's 16 kHz here rather than sent
    /// at the leg's own rate (`[model] resample_input`).
    pub resample_input: bool,
    /// Caller audio is sent to the model once this much of it is gathered (`[model]
    /// uplink_chunk_ms`; 20 ms: each frame as it comes).
    pub uplink_chunk: Duration,
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
            transfer: None,
            dialer: None,
            person_recording: None,
            resample_input: false,
            uplink_chunk: Duration::from_millis(20),
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

/// Tool results queued toward the call at most; a tool finishing beyond that waits in its own
/// task until the call has read the others.
const TOOL_RESULTS: usize = 16;

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
///
/// The shell of [`CallCore`]: one task selects over the leg, the call's sessions, the command
/// inbox, opened sessions and tool results, and one sleep (re-armed, never recreated) until the
/// core's `poll_timeout`; each wake-up feeds the core one input and carries out what it decided.
pub async fn run_with_agents(
    mut leg: LegHandle,
    session: ModelSession,
    mut opts: CallOptions,
    agents: Option<Agents>,
) -> Result<CallReport, CallError> {
    let sink = agents.as_ref().and_then(|a| a.events.clone());
    let first = Live {
        id: SessionId(0),
        caps: session.capabilities(),
    };
    let mut core = CallCore::new(
        leg.rate,
        leg.started_at.into_std(),
        first,
        session.wire(),
        &opts,
        agents,
        Instant::now().into_std(),
    )?;
    if let Some(law) = leg.law {
        core.hold_playout_in(law);
    }
    let mut sessions = Sessions::new(SessionId(0), session);
    let standby = core.standby_backend().map(Standby::spawn);
    let mut hangup = opts.hangup.take();
    // One wait for the whole call: a fresh `watch` wait per pass locked the channel's waiter
    // list twice a pass (enter and leave).
    let mut shutdown = std::pin::pin!(wait_true(&mut hangup));
    let mut shutting_down = false;
    let mut commands = opts
        .commands
        .take()
        .and_then(|i| i.take())
        .map(occasional::Occasional::new);
    let tap = opts.recording.take();
    let transfer_port = opts.transfer.take();
    let dialer = opts.dialer.take();
    let person_recording = opts.person_recording.take();
    // Boxed: a warm transfer's state (its brief session's core among it, ~8 KiB) is rare, and
    // inline it would size every call's task for it.
    let mut warm: Option<Box<warm::Warm>> = None;
    // A blind transfer under way (the person and what their `on_no_answer` says), and what an
    // unanswered one left to do.
    let mut blind: Option<(String, crate::transfer::OnNoAnswer)> = None;
    let mut after: Option<no_answer::Aftermath> = None;
    let mut transfer_events: Option<crate::transfer::EventReceiver> = None;
    let (opened_tx, opened_rx) = mpsc::channel(4);
    let mut opened_rx = occasional::Occasional::new(opened_rx);
    let (tool_tx, tool_rx) = mpsc::channel(TOOL_RESULTS);
    let mut tool_rx = occasional::Occasional::new(tool_rx);
    let mut tools = ToolTasks::default();
    let mut leg_open = true;
    let sleep = tokio::time::sleep_until(Instant::from_std(core.poll_timeout().0));
    tokio::pin!(sleep);
    loop {
        // What the sessions wrote since the last pass: figures only, so they are taken here
        // rather than woken for (every caller frame makes one).
        sessions.written(&mut core);
        // Carry out what the core decided.
        while let Some(cmd) = core.poll_leg() {
            if let (Some(t), LegCommand::Play { frame, .. }) = (&tap, &cmd) {
                t.agent(frame);
            }
            if let (Some(w), LegCommand::Play { kind, .. }) = (warm.as_mut(), &cmd) {
                w.caller_played(*kind, &mut core);
            }
            if let (Some(a), LegCommand::Play { kind, .. }) = (after.as_mut(), &cmd) {
                a.caller_played(*kind);
            }
            if !leg_open {
                if let LegCommand::Play { frame, .. } = cmd {
                    core.recycle(frame);
                }
                continue;
            }
            match leg.send(cmd) {
                // A leg that wrote the frame out in place hands its buffer back for the next tick.
                Ok(Some(frame)) => core.recycle(frame),
                Ok(None) => {}
                // A leg task that far behind loses this frame; the call goes on.
                Err(Refused::Full(LegCommand::Play { frame, .. })) => core.recycle(frame),
                Err(Refused::Full(_)) => {}
                Err(Refused::Gone(cmd)) => {
                    leg_open = false;
                    if let LegCommand::Play { frame, .. } = cmd {
                        core.recycle(frame);
                    }
                }
            }
        }
        if leg_open {
            // A leg driven from this task writes now, not on its next poll.
            leg.flush().await;
        }
        if let Some(w) = warm.as_mut() {
            w.bridge_out(&mut core);
            w.flush().await;
        }
        while let Some(cmd) = core.poll_model() {
            sessions.carry_out(cmd);
        }
        while let Some(task) = core.poll_task() {
            match task {
                Task::Open { id, request } => {
                    let taker = request
                        .standby_socket
                        .then(|| standby.as_ref().map(Standby::taker))
                        .flatten();
                    let tx = opened_tx.clone();
                    tokio::spawn(async move {
                        let OpenRequest {
                            backend, config, ..
                        } = *request;
                        // Boxed: a session opens rarely, and the channel's first block of
                        // slots is made with every call.
                        let opened = Box::new(open_session(&backend, &config, taker).await);
                        let _ = tx.send((id, opened)).await;
                    });
                }
                Task::RunTool(run) => tools.spawn(run, tool_tx.clone()),
                Task::CancelTools { ids, reason } => tools.cancel(&ids, &reason),
                Task::Transfer(req) if req.plan == crate::transfer::Handover::Warm => {
                    let now = Instant::now().into_std();
                    match (dialer.as_ref(), warm.is_some()) {
                        (Some(d), false) => {
                            let mut w = warm::Warm::start(
                                *req,
                                d.clone(),
                                leg.rate,
                                person_recording.clone(),
                                opts.resample_input,
                                now,
                            );
                            w.handle_timeout(&mut core, now);
                            warm = Some(Box::new(w));
                        }
                        (None, _) => core.handle_transfer(
                            warm::unavailable(
                                &req,
                                "warm transfers dial the person over SIP: configure [sip] \
                                 listen and a trunk ([sip.trunks.<name>]) or give the person a \
                                 SIP URI",
                            ),
                            now,
                        ),
                        (Some(_), true) => core.handle_transfer(
                            warm::unavailable(&req, "another warm transfer is under way"),
                            now,
                        ),
                    }
                }
                Task::Transfer(req) => {
                    blind = Some((req.to.clone(), req.settings.on_no_answer.clone()));
                    match ask_transfer(*req, transfer_port.as_ref()) {
                        Ok(rx) => transfer_events = Some(rx),
                        Err(refusal) => {
                            core.handle_transfer(refusal, Instant::now().into_std());
                        }
                    }
                }
            }
        }
        while let Some(ev) = core.poll_event() {
            if let Some(s) = &sink {
                s.send(&ev);
            }
        }
        if let Some(w) = warm.as_mut() {
            w.check_ending(&mut core);
        }
        if let Some(a) = after.as_mut() {
            let now = core.now();
            a.check(&mut core, now);
            if a.is_done() {
                after = None;
            }
        }
        if warm.as_ref().is_some_and(|w| w.is_over()) {
            warm = None;
        }
        if core.ended().is_some() {
            if let Some(mut a) = after.take() {
                a.let_go("the call ended first");
            }
            if let Some(mut w) = warm.take() {
                w.caller_gone(&mut core, Instant::now().into_std());
                while let Some(ev) = core.poll_event() {
                    if let Some(s) = &sink {
                        s.send(&ev);
                    }
                }
            }
            break;
        }
        let (mut deadline, why) = core.poll_timeout();
        // An idle playout's tick on a leg that sends no idle silence runs with the caller's
        // next frame (due every 20 ms) instead of waking the task for it; the sleep stays as
        // the bound. Before any input the ticks already due run first, as they would have.
        let idle_slack = why == core::Reason::Playout
            && warm.is_none()
            && after.is_none()
            && !leg.idle_ticks()
            && core.idle_tick_may_wait();
        if idle_slack {
            deadline += IDLE_SLACK;
        }
        if let Some(at) = warm.as_ref().and_then(|w| w.poll_timeout()) {
            deadline = deadline.min(at);
        }
        if let Some(at) = after.as_ref().and_then(no_answer::Aftermath::deadline) {
            deadline = deadline.min(at);
        }
        let deadline = Instant::from_std(deadline);
        if sleep.deadline() != deadline {
            sleep.as_mut().reset(deadline);
        }
        // Counted only when the task had to wait for it (a pass that finds input ready is not
        // a wake-up).
        crate::wakeups::counted(async {
            tokio::select! {
                biased;
                () = &mut shutdown, if !shutting_down => {
                    shutting_down = true;
                    core.hang_up("server is shutting down");
                }
                (id, ev) = sessions.next() => {
                    if ev.is_none() {
                        sessions.forget(id);
                    }
                    let now = Instant::now().into_std();
                    if idle_slack {
                        ticks_due(&mut core, now);
                    }
                    core.handle_model(id, ev, now);
                }
                Some((id, opened)) = opened_rx.recv() => {
                    let opened = match *opened {
                        Ok(s) => {
                            let caps = s.capabilities();
                            sessions.add(id, s);
                            Ok(caps)
                        }
                        Err(e) => Err(OpenFailed {
                            handle_refused: e.setup_refused_as_invalid(),
                            reason: e.to_string(),
                        }),
                    };
                    core.handle_opened(id, opened, Instant::now().into_std());
                }
                Some(input) = tool_rx.recv() => core.handle_tool_result(*input, Instant::now().into_std()),
                ev = next_transfer_event(&mut transfer_events) => match ev {
                    Some(ev) => {
                        let now = Instant::now().into_std();
                        if let Some(a) = no_answer::after_blind(&mut blind, &ev, now)
                            && let Some(mut old) = after.replace(a)
                        {
                            old.let_go("another transfer's outcome came first");
                        }
                        core.handle_transfer(ev, now);
                        if let Some(a) = after.as_mut() {
                            a.after_report(&mut core, now);
                        }
                    }
                    None => transfer_events = None,
                },
                cmd = next_command(&mut commands) => {
                    let tap::CallCommand::Agents { input, reply } = cmd;
                    let result = core.handle_command(input, Instant::now().into_std());
                    if let Some(r) = reply {
                        let _ = r.send(result);
                    }
                }
                ev = leg.recv() => {
                    if let (Some(t), Some(LegEvent::Frame { frame, .. })) = (&tap, &ev) {
                        t.caller(frame);
                    }
                    let now = Instant::now().into_std();
                    if idle_slack {
                        ticks_due(&mut core, now);
                    }
                    core.handle_leg(ev, now);
                }
                wake = next_warm(&mut warm) => {
                    if let Some(w) = warm.as_mut() {
                        w.handle(wake, &mut core, Instant::now().into_std());
                    }
                }
                () = &mut sleep => {
                    let now = Instant::now().into_std();
                    core.handle_timeout(now);
                    if let Some(w) = warm.as_mut() {
                        w.handle_timeout(&mut core, now);
                    }
                }
            }
        })
        .await;
    }
    // Frames written just before the end: the current session is read once more, without
    // waiting, for the writes it has yet to report.
    if let Some(cur) = core.current_session()
        && let Some(s) = sessions.get(cur)
    {
        while s.try_event().is_some() {}
    }
    sessions.written(&mut core);
    Ok(core.finish(None))
}

/// The call's open model sessions, by id, behind one [`gate::Gate`]: the call's loop polls
/// them (`next`) when one of them woke or was given something to write, not on every pass. A
/// warm transfer's brief polls its own `list` on every pass, without the gate.
struct Sessions {
    pub(super) list: Vec<(SessionId, ModelSession)>,
    gate: gate::Gate,
}

impl Sessions {
    pub(super) fn new(id: SessionId, session: ModelSession) -> Self {
        Sessions {
            list: vec![(id, session)],
            gate: gate::Gate::default(),
        }
    }

    /// A session just opened: polled on the next pass (it has yet to register its wakers).
    fn add(&mut self, id: SessionId, session: ModelSession) {
        self.list.push((id, session));
        self.gate.open();
    }

    /// The next event of any session (`None`: that session's events have ended); never without
    /// a session.
    async fn next(&mut self) -> (SessionId, Option<SessionEvent>) {
        let Sessions { list, gate } = self;
        poll_fn(|cx| {
            gate.poll(cx, |cx| {
                for (id, s) in list.iter_mut() {
                    if let Poll::Ready(ev) = s.poll_event(cx) {
                        return Poll::Ready((*id, ev));
                    }
                }
                Poll::Pending
            })
        })
        .await
    }

    /// Hands the core every caller frame the sessions report written.
    fn written(&mut self, core: &mut CallCore) {
        for (_, s) in &mut self.list {
            while let Some(w) = s.take_written() {
                core.handle_written(w);
            }
        }
    }

    /// Session `id`, to be given something: the gate opens, so the next pass writes it.
    fn get(&mut self, id: SessionId) -> Option<&mut ModelSession> {
        self.gate.open();
        self.list.iter_mut().find(|(i, _)| *i == id).map(|(_, s)| s)
    }

    fn forget(&mut self, id: SessionId) {
        self.list.retain(|(i, _)| *i != id);
    }

    fn carry_out(&mut self, cmd: ModelCommand) {
        match cmd {
            ModelCommand::Send { to, out } => {
                if let Some(s) = self.get(to) {
                    s.send(out);
                }
            }
            ModelCommand::Message { to, msg } => {
                if let Some(s) = self.get(to) {
                    s.send_message(&msg);
                }
            }
            ModelCommand::BargeIn { to, heard_ms } => {
                if let Some(s) = self.get(to) {
                    s.barge_in(heard_ms);
                }
            }
            ModelCommand::Drop { to } => self.forget(to),
            ModelCommand::Close { to, watch } => {
                if let Some(s) = self.get(to) {
                    s.send(Outbound::Close);
                }
                if !watch {
                    self.forget(to);
                }
            }
        }
    }
}

/// Opens a session on the standby socket if one is ready (only the setup goes out), else dials.
/// A standby socket found dead when used (closed before answering) costs a dial, not a try.
async fn open_session(
    backend: &ModelBackend,
    cfg: &SessionConfig,
    standby: Option<Taker>,
) -> Result<ModelSession, OpenError> {
    let dialed = match standby {
        Some(t) => t.take(backend).await,
        None => None,
    };
    if let Some(d) = dialed {
        match backend.start(d, cfg).await {
            Err(e) if e.stale_socket() => {
                tracing::debug!(error = %e, "standby model socket was stale; dialing");
            }
            opened => return opened,
        }
    }
    backend.open(cfg).await
}

/// Asks the leg's transfer port for a blind transfer; the events come back on the receiver.
/// Without a port (the leg cannot hand the caller on) or with its dialog gone, the refusal is
/// the transfer's one typed event.
fn ask_transfer(
    req: TransferRequest,
    port: Option<&crate::leg::sip::transfer::TransferPort>,
) -> Result<crate::transfer::EventReceiver, crate::transfer::Event> {
    use crate::transfer::{BlindVia, Event, Plan, Report};
    let plan = Plan::Blind(BlindVia::SipRefer);
    let refuse = |target, reason: &str| {
        let e = Event::Finished(Report::unavailable(plan, target, reason));
        tracing::warn!(to = %req.to, reason, "transfer to a person not attempted");
        e
    };
    let Some(port) = port else {
        return Err(refuse(
            req.target.clone(),
            "the caller's leg cannot be handed on: blind transfers need a SIP call (REFER) or a \
             Twilio call with twilio.auth_token_env set (REST redirect)",
        ));
    };
    let (tx, rx) = crate::transfer::events::channel();
    let ask = crate::leg::sip::transfer::BlindTransfer {
        target: req.target.clone(),
        settings: req.settings.clone(),
        events: tx,
    };
    match port.try_send(ask) {
        Ok(()) => Ok(rx),
        Err(mpsc::error::TrySendError::Full(_)) => Err(refuse(
            req.target.clone(),
            "other transfers of this call are waiting",
        )),
        Err(mpsc::error::TrySendError::Closed(_)) => Err(refuse(
            req.target.clone(),
            "the caller's SIP dialog has ended",
        )),
    }
}

/// How late an idle playout's tick may run when its leg sends no idle silence: one tick, so
/// the caller's next frame (every 20 ms) nearly always carries it.
const IDLE_SLACK: std::time::Duration = std::time::Duration::from_millis(20);

/// Runs the core's timers and ticks that fell due before `now`, ahead of an input arriving then.
fn ticks_due(core: &mut CallCore, now: std::time::Instant) {
    if core.poll_timeout().0 < now {
        core.handle_timeout(now);
    }
}

/// What woke the warm transfer under way; never without one.
async fn next_warm(warm: &mut Option<Box<warm::Warm>>) -> warm::Wake {
    match warm {
        Some(w) => w.next().await,
        None => std::future::pending().await,
    }
}

/// The next event of the transfer under way; never without one.
async fn next_transfer_event(
    rx: &mut Option<crate::transfer::EventReceiver>,
) -> Option<crate::transfer::Event> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// The next operator command; never resolves without a channel or once every sender is gone.
async fn next_command(
    rx: &mut Option<occasional::Occasional<Box<tap::CallCommand>>>,
) -> tap::CallCommand {
    if let Some(r) = rx.as_mut() {
        if let Some(c) = r.recv().await {
            return *c;
        }
        *rx = None;
    }
    std::future::pending().await
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
