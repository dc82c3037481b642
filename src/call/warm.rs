//! A warm transfer inside the caller's call task: the shell around one
//! [`Transfer`] of plan `Warm`. It dials the person through a
//! [`Dialer`] (the daemon's SIP trunks) while the caller stays with the agent, follows the
//! INVITE, and once the person answers drives their leg in the same task as the caller's:
//! ringback and early media are dropped, the answering-machine screen hears the answered leg,
//! then a brief session — a second model session on a [`CallCore`] of its own, speaking to the
//! person only — briefs them. The person's answer is a key (1 accepts, 2 declines) or the brief's
//! `accept_transfer` / `decline_transfer` call. On accept the caller's core is bridged
//! ([`CallCore::bridge`]) and the two people's audio crosses here, resampled between the legs'
//! rates; on every other outcome the person's leg is released (CANCEL or BYE) and the caller stays
//! with the agent, who is told why. Every event of the transfer goes to the caller's core
//! ([`CallCore::handle_transfer`]): the call's feed, metrics and the orchestrator.

use std::future::poll_fn;
use std::task::Poll;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::no_answer::Aftermath;
use super::outbox::{BriefRequest, Live, SessionId, TransferRequest};
use super::{CallCore, CallOptions, Sessions, open_session};
use crate::agents::tools::{ACCEPT_TRANSFER, DECLINE_TRANSFER};
use crate::audio::Frame;
use crate::audio::playout::PlayedKind;
use crate::audio::resample::StreamResampler;
use crate::leg::{LegCommand, LegEvent, LegHandle, Refused};
use crate::model::gemini::wire::{ClientContent, ClientMessage, Content, RealtimeInput};
use crate::model::handle::ModelSession;
use crate::model::session::SessionEvent;
use crate::model::{Capabilities, ModelEvent};
use crate::transfer::{
    Action, Destination, Event, Failure, Input, PersonAudio, Plan, Report, Screen, Stage, Transfer,
};

pub mod progress;

/// The key that accepts the call on the person's phone.
pub const ACCEPT_KEY: char = '1';
/// The key that declines it.
pub const DECLINE_KEY: char = '2';

/// Places the person's call: the daemon's SIP side implements it.
pub trait Dialer: Send + Sync + std::fmt::Debug {
    /// Starts calling `req.target`. Progress and the outcome come on the returned channel
    /// ([`progress::channel`]: bounded, the newest provisional answer then the outcome);
    /// dropping (or firing) its `cancel` sends CANCEL while the phone rings. A request that
    /// cannot be placed at all (no trunk, a bad address) reports `Failed` on the channel.
    fn dial(&self, req: DialRequest) -> Dialing;
}

/// Whom to call.
#[derive(Clone, Debug)]
pub struct DialRequest {
    pub target: Destination,
    /// The trunk a number is dialled on; a SIP URI is called directly.
    pub trunk: Option<String>,
    /// How long the person's phone may ring; the transfer decides before this runs out.
    pub ring_timeout: Duration,
}

/// A call to the person under way.
pub struct Dialing {
    pub progress: progress::ProgressReceiver,
    pub cancel: oneshot::Sender<()>,
}

/// What the person's INVITE did.
pub enum PersonProgress {
    Ringing,
    EarlyMedia,
    /// 200: their leg, ready to carry audio both ways. Dropping it hangs up (BYE).
    Answered(LegHandle),
    /// A final non-2xx.
    Final {
        status: u16,
        reason: String,
    },
    /// No final status: transport failure, timeout, no trunk.
    Failed(String),
}

impl From<crate::leg::sip::call::Placing> for PersonProgress {
    fn from(p: crate::leg::sip::call::Placing) -> Self {
        use crate::leg::sip::call::{Outcome, Placing, Progress};
        match p {
            Placing::Progress(Progress::Ringing) => PersonProgress::Ringing,
            Placing::Progress(Progress::EarlyMedia) => PersonProgress::EarlyMedia,
            Placing::Answered(leg) => PersonProgress::Answered(leg),
            Placing::NotAnswered(outcome) => match outcome {
                Outcome::Answered => PersonProgress::Failed("answered without media".into()),
                Outcome::Busy { status } => PersonProgress::Final {
                    status,
                    reason: "Busy".into(),
                },
                Outcome::NoAnswer {
                    status: Some(status),
                } => PersonProgress::Final {
                    status,
                    reason: "No answer".into(),
                },
                Outcome::NoAnswer { status: None } => {
                    PersonProgress::Failed("the person's phone rang out".into())
                }
                Outcome::Rejected { status, reason } => PersonProgress::Final { status, reason },
                Outcome::Failed { reason } => PersonProgress::Failed(reason),
            },
        }
    }
}

/// What woke the transfer.
pub(super) enum Wake {
    Progress(Option<PersonProgress>),
    Person(Option<LegEvent>),
    Opened(Result<ModelSession, String>),
    Brief(SessionId, Option<SessionEvent>),
}

/// The brief: its own core on the person's leg, and its session.
struct Brief {
    core: CallCore,
    sessions: Sessions,
    /// The model has said something and finished generating it.
    generated: bool,
    spoke: bool,
    played: bool,
}

/// One warm transfer under way in a call.
pub(super) struct Warm {
    to: String,
    machine: Transfer,
    dialer: std::sync::Arc<dyn Dialer>,
    trunk: Option<String>,
    dialing: Option<progress::ProgressReceiver>,
    cancel: Option<oneshot::Sender<()>>,
    person: Option<LegHandle>,
    brief_req: Option<Box<BriefRequest>>,
    opening: Option<oneshot::Receiver<Result<ModelSession, String>>>,
    brief: Option<Brief>,
    screen: Option<Screen>,
    caller_rate: u32,
    /// Person → caller and caller → person, once bridged.
    to_caller: Option<StreamResampler>,
    to_person: Option<StreamResampler>,
    buf: Vec<i16>,
    /// Where the person's leg is recorded, and the recording once they answered.
    recording: Option<std::path::PathBuf>,
    tap: Option<super::recording::AudioTap>,
    /// What an unanswered transfer leaves to do (`on_no_answer`).
    after: Aftermath,
    /// Hold audio at the caller's rate and where it has got to (looped), when configured.
    hold: Option<(Vec<i16>, usize)>,
    /// The brief's session is sent the person's audio as the call's sessions are sent the
    /// caller's (`CallOptions::resample_input`).
    resample_input: bool,
    /// When the next frame of silence goes to the person, while they are answered and nothing
    /// else speaks to them (see [`Warm::keep_media`]).
    quiet_at: Option<Instant>,
    quiet_buf: Vec<i16>,
}

/// One frame of the silence the person's leg carries while nothing speaks to them.
const QUIET_FRAME: Duration = Duration::from_millis(crate::audio::frame::FRAME_MS as u64);

/// When the frame of silence after the one due at `at` and sent at `now` is due: 20 ms on, on
/// a steady clock; when that is already past (the task was held up), 20 ms from now, so the
/// leg never gets a burst.
fn next_quiet(at: Instant, now: Instant) -> Instant {
    let next = at + QUIET_FRAME;
    if next <= now { now + QUIET_FRAME } else { next }
}

/// The person's INVITE's next progress; pending forever once it has none.
async fn next_progress(rx: &mut Option<progress::ProgressReceiver>) -> Option<PersonProgress> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// A warm transfer could not start: the refusal is its one event.
pub(super) fn unavailable(req: &TransferRequest, reason: &str) -> Event {
    tracing::warn!(to = %req.to, reason, "warm transfer to a person not attempted");
    Event::Finished(Report::unavailable(Plan::Warm, req.target.clone(), reason))
}

impl Warm {
    /// Starts `req` at `now`: the person's phone starts ringing at once.
    pub(super) fn start(
        req: TransferRequest,
        dialer: std::sync::Arc<dyn Dialer>,
        caller_rate: u32,
        recording: Option<std::path::PathBuf>,
        resample_input: bool,
        now: Instant,
    ) -> Warm {
        let machine = Transfer::new(Plan::Warm, req.target, req.settings, now);
        let after = Aftermath::new(&req.to);
        // Resampled once, at the transfer's start, to the caller's rate.
        let hold = req.hold.as_ref().and_then(|h| {
            crate::audio::resample::resample_all(&h.samples, h.rate, caller_rate)
                .map_err(|e| tracing::warn!(error = %e, "the hold audio cannot be played"))
                .ok()
                .filter(|s| !s.is_empty())
                .map(|s| (s, 0))
        });
        Warm {
            to: req.to,
            machine,
            dialer,
            trunk: req.trunk,
            dialing: None,
            cancel: None,
            person: None,
            brief_req: req.brief,
            opening: None,
            brief: None,
            screen: None,
            caller_rate,
            to_caller: None,
            to_person: None,
            buf: Vec::with_capacity(1024),
            recording,
            tap: None,
            after,
            hold,
            resample_input,
            quiet_at: None,
            quiet_buf: Vec::new(),
        }
    }

    /// True once nothing is left to do: the outcome is reported, the person's leg released and
    /// nothing is bridged.
    pub(super) fn is_over(&self) -> bool {
        self.machine.is_over() && self.person.is_none() && self.after.is_done()
    }

    /// The earliest instant the transfer (or its brief) must be woken at.
    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        let machine = self.machine.poll_timeout().map(|(at, _)| at);
        let brief = self.brief.as_ref().map(|b| b.core.poll_timeout().0);
        let ending = self.after.deadline();
        [machine, brief, ending, self.quiet_at]
            .into_iter()
            .flatten()
            .min()
    }

    /// What woke the transfer next; pending forever when nothing can.
    pub(super) async fn next(&mut self) -> Wake {
        let dialing = &mut self.dialing;
        let others = poll_fn(|cx| {
            if let Some(rx) = self.opening.as_mut()
                && let Poll::Ready(r) = std::pin::Pin::new(rx).poll(cx)
            {
                let r = r.unwrap_or_else(|_| Err("its task ended".into()));
                return Poll::Ready(Wake::Opened(r));
            }
            if let Some(b) = self.brief.as_mut() {
                for (id, s) in &mut b.sessions.list {
                    if let Poll::Ready(ev) = s.poll_event(cx) {
                        return Poll::Ready(Wake::Brief(*id, ev));
                    }
                }
            }
            if let Some(leg) = self.person.as_mut()
                && let Poll::Ready(ev) = leg.poll_event(cx)
            {
                return Poll::Ready(Wake::Person(ev));
            }
            Poll::Pending
        });
        tokio::select! {
            biased;
            p = next_progress(dialing) => Wake::Progress(p),
            w = others => w,
        }
    }

    /// Feeds what woke it, then carries out what the transfer decided.
    pub(super) fn handle(&mut self, wake: Wake, caller: &mut CallCore, now: Instant) {
        match wake {
            Wake::Progress(None) => self.dialing = None,
            Wake::Progress(Some(p)) => self.on_progress(p, now),
            Wake::Person(ev) => self.on_person(ev, caller, now),
            Wake::Opened(r) => {
                self.opening = None;
                self.on_opened(r, now);
            }
            Wake::Brief(id, ev) => self.on_brief_event(id, ev, now),
        }
        self.drive(caller, now);
    }

    /// Time has come to `now`.
    pub(super) fn handle_timeout(&mut self, caller: &mut CallCore, now: Instant) {
        if self.machine.poll_timeout().is_some_and(|(at, _)| at <= now) {
            self.machine.handle_timeout(now);
        }
        if let Some(b) = self.brief.as_mut()
            && b.core.poll_timeout().0 <= now
        {
            b.core.handle_timeout(now);
        }
        self.after.check(caller, now);
        self.drive(caller, now);
        self.send_quiet(now);
    }

    /// From the answer until the bridge, the person's leg carries media even when nothing
    /// speaks to them (screening, the brief's session still opening, or it failed or ended
    /// while they decide): a phone or gateway that hears no RTP may take the call for dead, a
    /// NAT in front of it learns nothing, and a phone that waits for media before it lets its
    /// user speak or press keys would wait for ever. While the brief's core runs it paces the
    /// leg (silence between its words); once bridged, the caller's frames do.
    fn keep_media(&mut self, now: Instant) {
        let silent = self.person.is_some() && self.brief.is_none() && self.to_person.is_none();
        match (silent, self.quiet_at) {
            (true, None) => self.quiet_at = Some(now),
            (false, Some(_)) => self.quiet_at = None,
            _ => {}
        }
    }

    /// The frame of silence due by `now`, if one is (see [`next_quiet`]).
    fn send_quiet(&mut self, now: Instant) {
        let Some(at) = self.quiet_at else {
            return;
        };
        let Some(leg) = self.person.as_mut() else {
            self.quiet_at = None;
            return;
        };
        if at > now {
            return;
        }
        let ts = now.saturating_duration_since(leg.started_at.into_std());
        // One buffer of silence, handed back by a leg that writes it in place.
        let mut samples = std::mem::take(&mut self.quiet_buf);
        samples.clear();
        samples.resize(crate::audio::frame::samples_per_frame(leg.rate), 0);
        let frame = Frame {
            rate: leg.rate,
            ts,
            samples,
        };
        if let Ok(Some(back)) = leg.send(LegCommand::Play {
            frame,
            kind: PlayedKind::Silence,
        }) {
            self.quiet_buf = back.samples;
        }
        self.quiet_at = Some(next_quiet(at, now));
    }

    /// The frame just played to the caller: a switch's dead air ends at the first frame that
    /// carries its new source's audio (the person's, once bridged; the agent's, once back) —
    /// what baton inserts, not the silences the person or the agent leave themselves.
    pub(super) fn caller_played(&mut self, kind: PlayedKind, caller: &mut CallCore) {
        let now = caller.now();
        self.hold_music(caller, now);
        if self.machine.awaits_sound() {
            self.machine
                .handle_caller_frame(kind == PlayedKind::Voice, now);
        }
        self.after.caller_played(kind);
    }

    /// While the person is dialled and briefed, the caller hears the hold audio whenever the
    /// agent is silent: one frame queued as the last one plays, so the agent's next words
    /// follow at most a frame later.
    fn hold_music(&mut self, caller: &mut CallCore, now: Instant) {
        let waiting = matches!(
            self.machine.stage(),
            Stage::Dialing | Stage::Ringing | Stage::Screening | Stage::Briefing | Stage::Deciding
        );
        let Some((samples, pos)) = self.hold.as_mut() else {
            return;
        };
        if !waiting || !caller.queued_audio().is_zero() || caller.generating() {
            return;
        }
        let spf = crate::audio::frame::samples_per_frame(self.caller_rate);
        self.buf.clear();
        while self.buf.len() < spf {
            let take = (spf - self.buf.len()).min(samples.len() - *pos);
            self.buf.extend_from_slice(&samples[*pos..*pos + take]);
            *pos = (*pos + take) % samples.len();
        }
        caller.play_inserted(&self.buf, now);
    }

    /// A `hang_up` transfer ends the call once the agent's reply saying why has played out.
    pub(super) fn check_ending(&mut self, caller: &mut CallCore) {
        let now = caller.now();
        self.after.check(caller, now);
    }

    /// The caller's call is ending: the person's phone stops ringing (CANCEL) or is hung up
    /// (BYE), whatever stage the transfer is in.
    pub(super) fn caller_gone(&mut self, caller: &mut CallCore, now: Instant) {
        self.machine.handle(Input::CallerHungUp, now);
        self.drive(caller, now);
        // Whatever the machine said, nothing of the person's side outlives the caller.
        self.release_person();
        self.after.let_go("the call ended first");
    }

    fn on_progress(&mut self, p: PersonProgress, now: Instant) {
        match p {
            PersonProgress::Ringing => self.machine.handle(Input::Ringing, now),
            PersonProgress::EarlyMedia => self.machine.handle(Input::EarlyMedia, now),
            PersonProgress::Answered(leg) => {
                self.cancel = None;
                if let Some(path) = &self.recording {
                    // The writer task ends, and finalises the file, when the tap goes.
                    let (tap, _writer) = super::recording::spawn(path, leg.rate, 1000);
                    self.tap = Some(tap);
                }
                self.person = Some(leg);
                self.machine.handle(Input::Answered, now);
            }
            PersonProgress::Final { status, reason } => {
                self.cancel = None;
                self.machine.handle(
                    Input::Rejected {
                        status,
                        reason: &reason,
                    },
                    now,
                );
            }
            PersonProgress::Failed(message) => {
                self.cancel = None;
                self.machine
                    .handle(Input::Failed(Failure::Sip { message }), now);
            }
        }
    }

    fn on_person(&mut self, ev: Option<LegEvent>, caller: &mut CallCore, now: Instant) {
        if let (Some(t), Some(LegEvent::Frame { frame, .. })) = (&self.tap, &ev) {
            t.caller(frame);
        }
        match ev {
            Some(LegEvent::Frame { frame, received_at }) => match self.machine.person_audio() {
                PersonAudio::Discard => {}
                PersonAudio::Screen => {
                    if let Some(d) = self.screen.as_mut().and_then(|s| s.push(&frame.samples)) {
                        self.machine.handle(Input::Screened(d.verdict), now);
                    }
                }
                PersonAudio::Brief => {
                    if let Some(b) = self.brief.as_mut() {
                        b.core
                            .handle_leg(Some(LegEvent::Frame { frame, received_at }), now);
                    }
                }
                PersonAudio::Caller => {
                    let Some(to_caller) = self.to_caller.as_mut() else {
                        return;
                    };
                    self.buf.clear();
                    to_caller.process(&frame.samples, &mut self.buf);
                    caller.handle_bridged_audio(&self.buf, received_at.into_std());
                }
            },
            Some(LegEvent::Dtmf { digit }) => {
                if matches!(self.machine.stage(), Stage::Briefing | Stage::Deciding) {
                    match digit {
                        ACCEPT_KEY => self.machine.handle(Input::Accepted, now),
                        DECLINE_KEY => self.machine.handle(Input::Declined, now),
                        _ => tracing::debug!(%digit, "the person pressed a key that means nothing"),
                    }
                }
            }
            Some(LegEvent::Heard { .. }) => {}
            Some(LegEvent::Stop(_)) | None => {
                self.person = None;
                self.tap = None;
                self.machine.handle(Input::PersonHungUp, now);
            }
        }
    }

    fn on_opened(&mut self, r: Result<ModelSession, String>, now: Instant) {
        let r = r.map_err(|e| tracing::warn!(error = %e, "the brief session could not be opened"));
        let (Ok(mut session), Some(req), Some(leg)) = (r, self.brief_req.take(), &self.person)
        else {
            // No brief (the session could not be opened, or the person is gone): the person
            // still decides by key until the decision timeout.
            tracing::warn!("no brief; the person decides by key");
            self.machine.handle(Input::BriefPlayed, now);
            return;
        };
        let caps = session.capabilities();
        tracing::debug!(person = %self.to, "the brief session is open");
        let first = Live {
            id: SessionId(0),
            caps,
        };
        let opts = CallOptions {
            resample_input: self.resample_input,
            ..CallOptions::default()
        };
        let core = match CallCore::new(
            leg.rate,
            leg.started_at.into_std(),
            first,
            session.wire(),
            &opts,
            None,
            now,
        ) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "the brief cannot run on the person's leg");
                self.machine.handle(Input::BriefPlayed, now);
                return;
            }
        };
        session.send_message(&start_message(&caps, &req.start));
        self.brief = Some(Brief {
            core,
            sessions: Sessions::new(SessionId(0), session),
            generated: false,
            spoke: false,
            played: false,
        });
    }

    fn on_brief_event(&mut self, id: SessionId, ev: Option<SessionEvent>, now: Instant) {
        let Some(b) = self.brief.as_mut() else {
            return;
        };
        let mut ev = ev;
        if let Some(SessionEvent::Model(ModelEvent::ToolCall(calls), at)) =
            ev.take_if(|e| matches!(e, SessionEvent::Model(ModelEvent::ToolCall(_), _)))
        {
            let (answers, others): (Vec<_>, Vec<_>) = calls
                .into_iter()
                .partition(|c| c.name == ACCEPT_TRANSFER || c.name == DECLINE_TRANSFER);
            for c in &answers {
                let input = if c.name == ACCEPT_TRANSFER {
                    Input::Accepted
                } else {
                    Input::Declined
                };
                self.machine.handle(input, now);
            }
            if others.is_empty() {
                return;
            }
            // Any other call is answered with an error by the brief's core, so a blocking one
            // never stalls the brief.
            tracing::debug!(calls = ?others, "the brief called tools it was not given");
            ev = Some(SessionEvent::Model(ModelEvent::ToolCall(others), at));
        }
        match &ev {
            Some(SessionEvent::Model(ModelEvent::Audio { .. }, _)) => b.spoke = true,
            Some(SessionEvent::Model(
                ModelEvent::GenerationComplete | ModelEvent::TurnComplete,
                _,
            )) if b.spoke => b.generated = true,
            _ => {}
        }
        if ev.is_none() {
            b.sessions.forget(id);
        }
        b.core.handle_model(id, ev, now);
    }

    /// Carries out the brief's and the transfer's decisions until neither has any.
    fn drive(&mut self, caller: &mut CallCore, now: Instant) {
        self.run_brief(now);
        while let Some(action) = self.machine.poll_action() {
            self.carry_out(action, caller, now);
        }
        while let Some(ev) = self.machine.poll_event() {
            caller.handle_transfer(ev, now);
        }
        self.after.after_report(caller, now);
        self.bridge_out(caller);
        self.keep_media(now);
    }

    fn run_brief(&mut self, now: Instant) {
        let Some(b) = self.brief.as_mut() else {
            return;
        };
        while let Some(cmd) = b.core.poll_leg() {
            match (self.person.as_mut(), cmd) {
                (Some(leg), cmd @ LegCommand::Play { .. }) => {
                    if let (Some(t), LegCommand::Play { frame, .. }) = (&self.tap, &cmd) {
                        t.agent(frame);
                    }
                    let refused = leg.send(cmd).err();
                    // A frame the leg did not take is lost to the person; its buffer is reused.
                    if let Some(
                        Refused::Full(LegCommand::Play { frame, .. })
                        | Refused::Gone(LegCommand::Play { frame, .. }),
                    ) = refused
                    {
                        b.core.recycle(frame);
                    }
                }
                // The brief never clears or hangs up the person's leg: the transfer does.
                (_, LegCommand::Play { frame, .. }) => b.core.recycle(frame),
                _ => {}
            }
        }
        // The person's frames the brief's session wrote: its own figures, taken as the call's are.
        b.sessions.written(&mut b.core);
        while let Some(cmd) = b.core.poll_model() {
            b.sessions.carry_out(cmd);
        }
        while b.core.poll_task().is_some() {}
        while b.core.poll_event().is_some() {}
        if b.generated && !b.played && b.core.queued_audio().is_zero() {
            b.played = true;
            self.machine.handle(Input::BriefPlayed, now);
        }
        if b.core.ended().is_some() {
            if !b.played {
                // The brief's session ended before it finished: the person decides by key.
                b.played = true;
                self.machine.handle(Input::BriefPlayed, now);
            }
            // An ended core paces nothing (its deadline would stay in the past): the
            // transfer's own silence takes over the person's leg.
            self.close_brief();
        }
    }

    fn carry_out(&mut self, action: Action, caller: &mut CallCore, now: Instant) {
        match action {
            Action::Dial {
                target,
                ring_timeout,
            } => {
                let d = self.dialer.dial(DialRequest {
                    target,
                    trunk: self.trunk.clone(),
                    // The transfer's own ring timer decides; the INVITE outlives it a little.
                    ring_timeout: ring_timeout + Duration::from_secs(5),
                });
                self.dialing = Some(d.progress);
                self.cancel = Some(d.cancel);
            }
            Action::CancelPerson => {
                if let Some(c) = self.cancel.take() {
                    let _ = c.send(());
                }
            }
            Action::HangUpPerson => self.release_person(),
            Action::RoutePersonAudio(PersonAudio::Screen) => {
                let rate = self.person.as_ref().map_or(8000, |l| l.rate);
                self.screen = Some(Screen::new(rate, crate::transfer::amd::Settings::default()));
            }
            Action::RoutePersonAudio(_) => {}
            Action::StartBrief => self.open_brief(),
            Action::Bridge => {
                self.close_brief();
                let person = self.person.as_ref().map_or(self.caller_rate, |l| l.rate);
                let pair = (
                    StreamResampler::new(person, self.caller_rate),
                    StreamResampler::new(self.caller_rate, person),
                );
                match pair {
                    (Ok(a), Ok(b)) => {
                        self.to_caller = Some(a);
                        self.to_person = Some(b);
                    }
                    (Err(e), _) | (_, Err(e)) => tracing::error!(
                        error = %e, person, caller = self.caller_rate,
                        "no resampler between the legs: the bridge carries no audio"
                    ),
                }
                caller.bridge(now);
                tracing::info!(person = %self.to, "caller and person bridged");
            }
            Action::ReturnToAgent { .. } => {
                // The outcome reaches the orchestrator with the report; the agent says why.
                self.close_brief();
            }
            Action::HandTo { agent, .. } => {
                self.close_brief();
                self.after.hand_to(agent);
            }
            Action::EndCall { .. } => {
                self.close_brief();
                self.after.end_call(now);
            }
            Action::HangUpCaller => caller.hang_up(format!("{} hung up", self.to)),
            other => tracing::warn!(action = ?other, "not a warm transfer's action"),
        }
    }

    fn open_brief(&mut self) {
        let Some(req) = self.brief_req.as_ref() else {
            tracing::warn!("no brief session to open");
            return;
        };
        tracing::debug!(person = %self.to, "opening the brief session");
        let (tx, rx) = oneshot::channel();
        let backend = req.backend.clone();
        let config = req.config.clone();
        tokio::spawn(async move {
            let opened = open_session(&backend, &config, None).await;
            let _ = tx.send(opened.map_err(|e| e.to_string()));
        });
        self.opening = Some(rx);
    }

    fn close_brief(&mut self) {
        self.opening = None;
        self.brief_req = None;
        if let Some(mut b) = self.brief.take() {
            for (_, s) in &mut b.sessions.list {
                s.send(crate::model::session::Outbound::Close);
            }
        }
    }

    /// Caller frames the bridge took, out to the person's leg at its rate.
    pub(super) fn bridge_out(&mut self, caller: &mut CallCore) {
        while let Some(frame) = caller.poll_bridge() {
            let Some(leg) = self.person.as_mut() else {
                caller.recycle(frame);
                continue;
            };
            let rate = leg.rate;
            let Some(to_person) = self.to_person.as_mut() else {
                caller.recycle(frame);
                continue;
            };
            let mut out = Frame {
                rate,
                ts: frame.ts,
                samples: Vec::with_capacity(frame.samples.len()),
            };
            to_person.process(&frame.samples, &mut out.samples);
            caller.recycle(frame);
            if let Some(t) = &self.tap {
                t.agent(&out);
            }
            let _ = leg.send(LegCommand::Play {
                frame: out,
                kind: PlayedKind::Voice,
            });
        }
    }

    /// The person's leg goes: CANCEL if it rings, BYE if answered.
    fn release_person(&mut self) {
        self.close_brief();
        if let Some(c) = self.cancel.take() {
            let _ = c.send(());
        }
        if let Some(mut leg) = self.person.take() {
            let _ = leg.send(LegCommand::Hangup);
        }
        self.tap = None;
    }

    /// Pushes what was written to the person's leg.
    pub(super) async fn flush(&mut self) {
        if let Some(leg) = self.person.as_mut() {
            leg.flush().await;
        }
    }
}

/// The text turn that starts the brief, as the model takes it: models that refuse mid-session
/// client content take it as realtime text.
fn start_message(caps: &Capabilities, text: &str) -> ClientMessage {
    if caps.mid_session_client_content {
        ClientMessage::ClientContent(ClientContent {
            turns: Some(vec![Content::text(Some("user"), text)]),
            turn_complete: Some(true),
        })
    } else {
        ClientMessage::RealtimeInput(RealtimeInput {
            text: Some(text.to_owned()),
            ..Default::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silence_to_the_person_keeps_a_steady_clock_and_never_bursts() {
        let t0 = Instant::now();
        let ms = |n: u64| Duration::from_millis(n);
        // On time, or a little late: the next frame stays on the 20 ms grid.
        assert_eq!(next_quiet(t0, t0), t0 + ms(20));
        assert_eq!(next_quiet(t0, t0 + ms(7)), t0 + ms(20));
        // Held up past the next frame's time: 20 ms from now, not a frame due at once.
        assert_eq!(next_quiet(t0, t0 + ms(20)), t0 + ms(40));
        assert_eq!(next_quiet(t0, t0 + ms(95)), t0 + ms(115));
    }

    #[test]
    fn the_start_turn_suits_the_model() {
        let mut caps = Capabilities {
            mid_session_client_content: true,
            ..Default::default()
        };
        assert!(matches!(
            start_message(&caps, "go"),
            ClientMessage::ClientContent(_)
        ));
        caps.mid_session_client_content = false;
        match start_message(&caps, "go") {
            ClientMessage::RealtimeInput(r) => assert_eq!(r.text.as_deref(), Some("go")),
            other => panic!("{other:?}"),
        }
    }
}
