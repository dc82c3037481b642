//! One transfer of the caller to a person, blind or warm, as a sans-IO state machine: it is told
//! what happened on the caller's leg, the person's leg and the brief (`handle`, with the time),
//! and answers with what to do (`poll_action`), what to report (`poll_event`: stages, one typed
//! outcome with its timings, dead air) and when to wake it (`poll_timeout`, with the reason). It
//! never reads a clock, opens a socket or plays audio.
//!
//! Two rules it keeps whatever order inputs arrive in:
//! - **The person's leg is released exactly when the transfer stops needing it**: CANCEL while
//!   the INVITE has no final answer, BYE once answered. A 200 that crosses a CANCEL (the caller
//!   hung up, or the ring timed out, at the instant the person answered) is answered with BYE.
//! - **Nothing from the person's leg reaches the model before a real answer**: ringback and
//!   early media are discarded ([`PersonAudio::Discard`]); the answered leg goes to the
//!   answering-machine screen, then to the brief, then to the caller.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::amd::Verdict;
use super::destination::{Destination, HumanAgent, OnNoAnswer};
use super::sipfrag;
use super::timers::{Timer, Timers};

/// How a blind transfer leaves the caller's leg.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BlindVia {
    /// SIP REFER on the caller's dialog; progress followed through NOTIFY.
    SipRefer,
    /// Twilio's REST API redirects the call to `<Dial>`.
    TwilioRedirect,
}

/// Blind or warm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Plan {
    Blind(BlindVia),
    Warm,
}

/// Timings and choices of one transfer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Warm: the person's phone rings this long before the transfer is unanswered.
    pub ring_timeout: Duration,
    /// Warm: after the brief, the person has this long to accept or decline.
    pub decision_timeout: Duration,
    /// Warm: screen the answered leg for a machine, giving the verdict this long at most.
    pub screen: Option<Duration>,
    /// What the caller is handed to when the person does not answer.
    pub on_no_answer: OnNoAnswer,
    /// Blind: the longest an announcement may take before the transfer goes out regardless.
    pub announcement_guard: Duration,
    /// Blind: the longest wait for the REFER's final NOTIFY (or the redirect's answer).
    pub refer_timeout: Duration,
    /// A gap the caller hears after a switch is reported at most this long.
    pub dead_air_cap: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            ring_timeout: super::destination::DEFAULT_RING_TIMEOUT,
            decision_timeout: super::destination::DEFAULT_DECISION_TIMEOUT,
            screen: None,
            on_no_answer: OnNoAnswer::Return,
            announcement_guard: Duration::from_secs(60),
            refer_timeout: super::destination::DEFAULT_RING_TIMEOUT + Duration::from_secs(15),
            dead_air_cap: Duration::from_secs(10),
        }
    }
}

/// How long the screen may take beyond the heuristic's own window.
pub const SCREEN_WINDOW: Duration = Duration::from_secs(6);

impl Settings {
    /// The settings a configured human agent implies.
    pub fn for_agent(h: &HumanAgent) -> Settings {
        Settings {
            ring_timeout: h.ring_timeout,
            decision_timeout: h.decision_timeout,
            screen: h.screen.then_some(SCREEN_WINDOW),
            on_no_answer: h.on_no_answer.clone(),
            refer_timeout: h.ring_timeout + Duration::from_secs(15),
            ..Settings::default()
        }
    }
}

/// Where a transfer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Blind: the agent's announcement is playing to the caller.
    Announcing,
    /// Blind: the REFER or the redirect is out, waiting for its answer.
    Referring,
    /// Blind: the REFER was accepted; its NOTIFYs report the referred call's progress.
    Following,
    /// Warm: the person's INVITE is out, nothing heard back yet.
    Dialing,
    /// Warm: the person's phone rings (or plays early media).
    Ringing,
    /// Warm: answered; the answering-machine heuristic listens.
    Screening,
    /// Warm: the brief plays to the person.
    Briefing,
    /// Warm: the brief is over; waiting for the person's accept or decline.
    Deciding,
    /// Warm: caller and person are bridged.
    Bridged,
    /// Over; see the outcome.
    Done,
}

/// Where audio from the person's leg goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PersonAudio {
    /// Dropped: ringback, early media, hold music, a leg not yet answered.
    Discard,
    /// To the answering-machine heuristic only.
    Screen,
    /// To the brief (the private channel that speaks to the person and hears their answer).
    Brief,
    /// To the caller, bridged.
    Caller,
}

/// Why a transfer failed without a SIP final status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "via")]
pub enum Failure {
    /// The REST API refused or could not be reached.
    Rest {
        http_status: Option<u16>,
        code: Option<u32>,
        message: String,
    },
    /// The SIP stack failed (transport error, transaction timeout) without a final status.
    Sip { message: String },
    /// Nothing came in time.
    Timeout { waited_for: &'static str },
}

/// How one transfer ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Outcome {
    /// Warm: the person accepted; caller and person are bridged.
    Connected,
    /// Blind: the referred call was answered (final 2xx NOTIFY), or Twilio took the redirect.
    Transferred,
    /// The person declined: after the brief, or with 603 on their phone.
    Declined,
    /// 486 Busy Here or 600 Busy Everywhere.
    Busy { status: u16 },
    /// Rang out (the ring timeout), or 408 / 480 from the far end.
    NoAnswer { status: Option<u16> },
    /// Warm: the brief played and the person neither accepted nor declined in time.
    NoDecision,
    /// Warm: the answering-machine heuristic heard a machine or music.
    Machine,
    /// Any other final status.
    Rejected { status: u16, reason: String },
    /// No final status: the REST API or the SIP stack failed, or a wait timed out.
    Failed { failure: Failure },
    /// The caller hung up first.
    CallerHungUp { stage: Stage },
    /// The person hung up before accepting.
    PersonHungUp { stage: Stage },
    /// Nothing was attempted: the caller's leg cannot be handed on this way (a fixture, WebRTC
    /// or AudioSocket call; a blind transfer on a leg with no REFER or redirect).
    Unavailable { reason: String },
}

impl Outcome {
    /// The label outcomes are counted under.
    pub fn kind(&self) -> &'static str {
        match self {
            Outcome::Connected => "connected",
            Outcome::Transferred => "transferred",
            Outcome::Declined => "declined",
            Outcome::Busy { .. } => "busy",
            Outcome::NoAnswer { .. } => "no_answer",
            Outcome::NoDecision => "no_decision",
            Outcome::Machine => "machine",
            Outcome::Rejected { .. } => "rejected",
            Outcome::Failed { .. } => "failed",
            Outcome::CallerHungUp { .. } => "caller_hung_up",
            Outcome::PersonHungUp { .. } => "person_hung_up",
            Outcome::Unavailable { .. } => "unavailable",
        }
    }

    /// Why the caller is not with the person, in words an agent can say (or a log can carry).
    pub fn describe(&self) -> String {
        match self {
            Outcome::Connected | Outcome::Transferred => "they were put through".into(),
            Outcome::Declined => "the person declined the call".into(),
            Outcome::Busy { .. } => "the line was busy".into(),
            Outcome::NoAnswer { .. } => "nobody answered".into(),
            Outcome::NoDecision => "the person did not say whether they would take the call".into(),
            Outcome::Machine => "an answering machine picked up".into(),
            Outcome::Rejected { status, reason } => {
                format!("the call was refused ({status} {reason})")
            }
            Outcome::Failed { failure } => match failure {
                Failure::Rest { message, .. } | Failure::Sip { message } => {
                    format!("the transfer failed ({message})")
                }
                Failure::Timeout { waited_for } => {
                    format!("the transfer failed (no {waited_for} in time)")
                }
            },
            Outcome::CallerHungUp { .. } => "the caller hung up".into(),
            Outcome::PersonHungUp { .. } => "the person hung up".into(),
            Outcome::Unavailable { reason } => {
                format!("this call cannot be transferred ({reason})")
            }
        }
    }

    /// The person is now talking to the caller (or the caller's leg went to them).
    pub fn succeeded(&self) -> bool {
        matches!(self, Outcome::Connected | Outcome::Transferred)
    }

    /// A final non-2xx SIP status, classified.
    pub fn of_status(status: u16, reason: &str) -> Outcome {
        match status {
            486 | 600 => Outcome::Busy { status },
            603 => Outcome::Declined,
            408 | 480 => Outcome::NoAnswer {
                status: Some(status),
            },
            _ => Outcome::Rejected {
                status,
                reason: reason.to_owned(),
            },
        }
    }
}

impl Report {
    /// The report of a transfer that was never attempted ([`Outcome::Unavailable`]).
    pub fn unavailable(plan: Plan, target: Destination, reason: impl Into<String>) -> Report {
        Report {
            plan,
            target,
            outcome: Outcome::Unavailable {
                reason: reason.into(),
            },
            status: None,
            setup_ms: None,
            ring_ms: None,
            total_ms: 0,
        }
    }
}

/// What happened, fed to [`Transfer::handle`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input<'a> {
    /// Blind: the announcement's last frame was played to the caller.
    AnnouncementPlayed,
    /// Blind (SIP): the final response to the REFER.
    ReferAnswered { status: u16 },
    /// Blind (SIP): a NOTIFY on the REFER's subscription; its `message/sipfrag` body.
    Notify { sipfrag: &'a [u8] },
    /// Blind (Twilio): the REST API took the redirect.
    Redirected,
    /// Warm: 180 on the person's leg.
    Ringing,
    /// Warm: 183 with early media (ringback, an announcement, music).
    EarlyMedia,
    /// Warm: 200 on the person's leg.
    Answered,
    /// A final non-2xx on the person's leg (warm) or to the REFER's call.
    Rejected { status: u16, reason: &'a str },
    /// The person's leg or the redirect failed without a final status.
    Failed(Failure),
    /// Warm: the answering-machine heuristic's verdict.
    Screened(Verdict),
    /// Warm: the brief has finished playing to the person.
    BriefPlayed,
    /// Warm: the person accepted (speech or a key), during or after the brief.
    Accepted,
    /// Warm: the person declined.
    Declined,
    /// The person's leg ended (BYE).
    PersonHungUp,
    /// The caller's leg ended.
    CallerHungUp,
}

/// What the shell must do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "action")]
pub enum Action {
    /// Blind (SIP): send REFER with `Refer-To: target` on the caller's dialog.
    Refer { target: Destination },
    /// Blind (Twilio): redirect the caller's call to `<Dial>target</Dial>` through the REST API.
    Redirect { target: Destination },
    /// Blind, transferred: baton's part of the caller's call is over (BYE after the final
    /// NOTIFY; on Twilio the stream ends).
    LeaveCall,
    /// Warm: place the INVITE to the person.
    Dial {
        target: Destination,
        ring_timeout: Duration,
    },
    /// Warm: CANCEL the person's INVITE (no final answer yet).
    CancelPerson,
    /// Warm: BYE to the person (answered).
    HangUpPerson,
    /// Where the person's audio goes from now on.
    RoutePersonAudio(PersonAudio),
    /// Warm: start the brief to the person (their leg only, never the caller's).
    StartBrief,
    /// Warm: bridge caller and person; the model and the brief leave.
    Bridge,
    /// The caller is back with the agent, who says why.
    ReturnToAgent { outcome: Outcome },
    /// No answer, configured to hand the caller to another agent.
    HandTo { agent: String, outcome: Outcome },
    /// No answer, configured to end: the agent says why, then the call ends.
    EndCall { outcome: Outcome },
    /// Bridged, and the person hung up: the caller's call ends.
    HangUpCaller,
}

/// The typed record of how a transfer ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Report {
    pub plan: Plan,
    pub target: Destination,
    pub outcome: Outcome,
    /// The SIP status the outcome came from, when one did.
    pub status: Option<u16>,
    /// Request to the person's answer, minus the time their phone rang (`transfer_setup_ms`);
    /// set when the person answered (warm) or the referred call did (blind).
    pub setup_ms: Option<u64>,
    /// From the first ringing to the answer (or to the end when there was none).
    pub ring_ms: Option<u64>,
    /// Request to outcome.
    pub total_ms: u64,
}

/// What a transfer reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "event")]
pub enum Event {
    /// It moved to this stage.
    Stage { stage: Stage },
    /// It ended (once per transfer).
    Finished(Report),
    /// After a switch of what the caller hears (bridge, return to the agent), the caller heard
    /// nothing for this long (`transfer_dead_air_ms`); `capped` when it was cut at the cap.
    DeadAir { ms: u64, capped: bool },
    /// A NOTIFY body that is not a sipfrag status line, ignored.
    BadNotify { error: String },
    /// This many more bad NOTIFYs, ignored, with the last one's error: what the channel to the
    /// requester reports in place of a run of them ([`super::events`]).
    MoreBadNotifies { count: u32, last_error: String },
}

impl Event {
    /// How many ignored NOTIFYs this event reports: one alone, or a run counted.
    pub fn bad_notifies(&self) -> u32 {
        match self {
            Event::BadNotify { .. } => 1,
            Event::MoreBadNotifies { count, .. } => *count,
            _ => 0,
        }
    }

    /// The error of the (last) ignored NOTIFY this event reports.
    pub fn bad_notify_error(&self) -> Option<&str> {
        match self {
            Event::BadNotify { error } => Some(error),
            Event::MoreBadNotifies { last_error, .. } => Some(last_error),
            _ => None,
        }
    }
}

/// The person's INVITE, as far as releasing it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Leg {
    /// Not dialled (blind, or before `new`).
    None,
    /// INVITE out, no final response.
    Pending,
    /// Answered.
    Up,
    /// CANCEL sent; a 200 may still cross it.
    Cancelling,
    /// Over without an answer (a final non-2xx, a failure, the 487 to our CANCEL).
    Gone,
    /// Was answered; now hung up (by either side).
    Released,
}

/// One transfer. See the module docs.
#[derive(Debug)]
pub struct Transfer {
    plan: Plan,
    target: Destination,
    settings: Settings,
    stage: Stage,
    leg: Leg,
    person_audio: PersonAudio,
    requested: Instant,
    now: Instant,
    ring_start: Option<Instant>,
    answered: Option<Instant>,
    outcome: Option<Outcome>,
    /// When the caller was switched (bridge, return) and has heard nothing since.
    gap_since: Option<Instant>,
    dead_air: Duration,
    timers: Timers,
    actions: VecDeque<Action>,
    events: VecDeque<Event>,
}

impl Transfer {
    /// A transfer requested at `now`. Warm transfers dial at once; blind ones wait for the
    /// announcement.
    pub fn new(plan: Plan, target: Destination, settings: Settings, now: Instant) -> Transfer {
        let mut t = Transfer {
            plan,
            target,
            settings,
            stage: Stage::Done,
            leg: Leg::None,
            person_audio: PersonAudio::Discard,
            requested: now,
            now,
            ring_start: None,
            answered: None,
            outcome: None,
            gap_since: None,
            dead_air: Duration::ZERO,
            timers: Timers::default(),
            actions: VecDeque::with_capacity(8),
            events: VecDeque::with_capacity(8),
        };
        match plan {
            Plan::Blind(_) => {
                t.timers
                    .set(Timer::Announcement, now + t.settings.announcement_guard);
                t.enter(Stage::Announcing);
            }
            Plan::Warm => {
                t.actions
                    .push_back(Action::RoutePersonAudio(PersonAudio::Discard));
                t.actions.push_back(Action::Dial {
                    target: t.target.clone(),
                    ring_timeout: t.settings.ring_timeout,
                });
                t.leg = Leg::Pending;
                t.timers.set(Timer::Ring, now + t.settings.ring_timeout);
                t.enter(Stage::Dialing);
            }
        }
        t
    }

    pub fn stage(&self) -> Stage {
        self.stage
    }

    pub fn outcome(&self) -> Option<&Outcome> {
        self.outcome.as_ref()
    }

    /// Where the person's audio goes now (the per-frame path reads this).
    pub fn person_audio(&self) -> PersonAudio {
        self.person_audio
    }

    /// Dead air the caller has heard so far, in total.
    pub fn dead_air(&self) -> Duration {
        self.dead_air
    }

    /// Feeds one input at `now`. Inputs that do not apply to the current stage are ignored.
    pub fn handle(&mut self, input: Input<'_>, now: Instant) {
        let now = self.tick(now);
        match input {
            Input::CallerHungUp => self.on_caller_hung_up(now),
            Input::Answered => self.on_answered(now),
            Input::PersonHungUp => self.on_person_hung_up(now),
            Input::Rejected { status, reason } => self.on_rejected(status, reason, now),
            Input::Failed(failure) => self.on_failed(failure, now),
            Input::Ringing | Input::EarlyMedia => {
                if matches!(self.stage, Stage::Dialing | Stage::Ringing) {
                    self.ring_start.get_or_insert(now);
                    self.enter(Stage::Ringing);
                }
            }
            Input::AnnouncementPlayed => self.send_blind(now),
            Input::ReferAnswered { status } => self.on_refer_answered(status, now),
            Input::Notify { sipfrag } => self.on_notify(sipfrag, now),
            Input::Redirected => {
                if self.plan == Plan::Blind(BlindVia::TwilioRedirect)
                    && self.stage == Stage::Referring
                {
                    self.answered = Some(now);
                    self.actions.push_back(Action::LeaveCall);
                    self.finish(Outcome::Transferred, None, now);
                }
            }
            Input::Screened(verdict) => {
                if self.stage == Stage::Screening {
                    self.timers.stop(Timer::Screen);
                    match verdict {
                        Verdict::Machine => {
                            self.release_person();
                            self.give_back(Outcome::Machine, None, now);
                        }
                        Verdict::Human | Verdict::Unknown => self.start_brief(),
                    }
                }
            }
            Input::BriefPlayed => {
                if self.stage == Stage::Briefing {
                    self.timers
                        .set(Timer::Decision, now + self.settings.decision_timeout);
                    self.enter(Stage::Deciding);
                }
            }
            Input::Accepted => {
                if matches!(self.stage, Stage::Briefing | Stage::Deciding) {
                    self.timers.stop(Timer::Decision);
                    self.route(PersonAudio::Caller);
                    self.actions.push_back(Action::Bridge);
                    self.gap_since = Some(now);
                    self.timers
                        .set(Timer::DeadAir, now + self.settings.dead_air_cap);
                    self.enter(Stage::Bridged);
                    self.finish(Outcome::Connected, None, now);
                }
            }
            Input::Declined => {
                if matches!(self.stage, Stage::Briefing | Stage::Deciding) {
                    self.release_person();
                    self.give_back(Outcome::Declined, None, now);
                }
            }
        }
    }

    /// Tells the transfer whether the frame the caller was just played (starting at `now`) was
    /// audible. Cheap: one comparison unless a switch is waiting for its first sound.
    pub fn handle_caller_frame(&mut self, audible: bool, now: Instant) {
        if audible && self.gap_since.is_some() {
            let now = self.tick(now);
            self.close_gap(now, false);
        }
    }

    /// A switch of what the caller hears is waiting for its first sound: the shell reports
    /// each played frame through [`Transfer::handle_caller_frame`] (and may skip the check
    /// otherwise).
    pub fn awaits_sound(&self) -> bool {
        self.gap_since.is_some()
    }

    /// Fires the timers due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        let now = self.tick(now);
        while let Some(timer) = self.timers.pop_due(now) {
            match timer {
                Timer::Announcement => self.send_blind(now),
                Timer::Refer => {
                    if matches!(self.stage, Stage::Referring | Stage::Following) {
                        let waited_for = match self.plan {
                            Plan::Blind(BlindVia::TwilioRedirect) => "the REST API's answer",
                            _ => "the REFER's final NOTIFY",
                        };
                        self.give_back(
                            Outcome::Failed {
                                failure: Failure::Timeout { waited_for },
                            },
                            None,
                            now,
                        );
                    }
                }
                Timer::Ring => {
                    if matches!(self.stage, Stage::Dialing | Stage::Ringing) {
                        self.release_person();
                        self.give_back(Outcome::NoAnswer { status: None }, None, now);
                    }
                }
                Timer::Screen => {
                    if self.stage == Stage::Screening {
                        self.start_brief();
                    }
                }
                Timer::Decision => {
                    if self.stage == Stage::Deciding {
                        self.release_person();
                        self.give_back(Outcome::NoDecision, None, now);
                    }
                }
                Timer::DeadAir => {
                    if self.gap_since.is_some() {
                        self.close_gap(now, true);
                    }
                }
            }
        }
    }

    /// The next action for the shell, in order.
    #[must_use]
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// The next event to report, in order.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When to call [`Transfer::handle_timeout`] next, and why.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<(Instant, Timer)> {
        self.timers.next()
    }

    /// True once the outcome is known, nothing is left to release and no gap is being timed:
    /// the shell may drop the transfer after draining its actions and events.
    pub fn is_over(&self) -> bool {
        self.outcome.is_some()
            && self.gap_since.is_none()
            && matches!(self.leg, Leg::None | Leg::Gone | Leg::Released)
            && self.stage != Stage::Bridged
    }

    // --- inputs -------------------------------------------------------------------------

    fn on_caller_hung_up(&mut self, now: Instant) {
        if self.gap_since.is_some() {
            self.close_gap(now, false);
        }
        self.release_person();
        self.route(PersonAudio::Discard);
        match self.stage {
            Stage::Done => {}
            Stage::Bridged => self.enter(Stage::Done),
            stage => {
                self.stop_all_but_dead_air();
                self.enter(Stage::Done);
                self.finish(Outcome::CallerHungUp { stage }, None, now);
            }
        }
    }

    fn on_answered(&mut self, now: Instant) {
        match self.leg {
            Leg::Pending => {}
            // The 200 crossed our CANCEL, or came after we gave up: the leg is up and nobody
            // wants it. (RFC 3261 §9.1: a 2xx after CANCEL is ACKed and hung up.)
            Leg::Cancelling | Leg::Gone => {
                self.leg = Leg::Released;
                self.actions.push_back(Action::HangUpPerson);
                return;
            }
            // A retransmitted 200, or one after the leg was released: nothing more to do.
            Leg::Up | Leg::Released | Leg::None => return,
        }
        self.leg = Leg::Up;
        self.timers.stop(Timer::Ring);
        self.answered = Some(now);
        match self.settings.screen {
            Some(window) => {
                self.route(PersonAudio::Screen);
                self.timers.set(Timer::Screen, now + window);
                self.enter(Stage::Screening);
            }
            None => self.start_brief(),
        }
    }

    fn on_person_hung_up(&mut self, now: Instant) {
        let was = self.leg;
        match was {
            Leg::None | Leg::Gone | Leg::Released => return,
            Leg::Up => self.leg = Leg::Released,
            Leg::Pending | Leg::Cancelling => self.leg = Leg::Gone,
        }
        self.route(PersonAudio::Discard);
        match self.stage {
            Stage::Bridged => {
                self.actions.push_back(Action::HangUpCaller);
                self.enter(Stage::Done);
            }
            Stage::Screening | Stage::Briefing | Stage::Deciding => {
                let stage = self.stage;
                self.give_back(Outcome::PersonHungUp { stage }, None, now);
            }
            Stage::Dialing | Stage::Ringing if was == Leg::Pending => {
                // A BYE before any answer is not SIP; the stack reports the leg's end this way
                // when it gave up without a final status.
                self.give_back(
                    Outcome::Failed {
                        failure: Failure::Sip {
                            message: "the person's leg ended before any final answer".into(),
                        },
                    },
                    None,
                    now,
                );
            }
            _ => {}
        }
    }

    fn on_rejected(&mut self, status: u16, reason: &str, now: Instant) {
        match self.leg {
            Leg::Pending => {
                self.leg = Leg::Gone;
                if matches!(self.stage, Stage::Dialing | Stage::Ringing) {
                    self.give_back(Outcome::of_status(status, reason), Some(status), now);
                }
            }
            // The 487 to our CANCEL, or a late answer to an abandoned INVITE.
            Leg::Cancelling => self.leg = Leg::Gone,
            Leg::None => {
                // Blind: the referred call's final status through some other path than NOTIFY.
                if matches!(self.stage, Stage::Referring | Stage::Following) {
                    self.give_back(Outcome::of_status(status, reason), Some(status), now);
                }
            }
            Leg::Up | Leg::Gone | Leg::Released => {}
        }
    }

    fn on_failed(&mut self, failure: Failure, now: Instant) {
        match self.leg {
            Leg::Pending | Leg::Up => {
                self.leg = if self.leg == Leg::Up {
                    Leg::Released
                } else {
                    Leg::Gone
                };
                if !matches!(self.stage, Stage::Bridged | Stage::Done) {
                    self.give_back(Outcome::Failed { failure }, None, now);
                } else if self.stage == Stage::Bridged {
                    self.route(PersonAudio::Discard);
                    self.actions.push_back(Action::HangUpCaller);
                    self.enter(Stage::Done);
                }
            }
            Leg::Cancelling => self.leg = Leg::Gone,
            Leg::None => {
                if matches!(self.stage, Stage::Referring | Stage::Following) {
                    self.give_back(Outcome::Failed { failure }, None, now);
                }
            }
            Leg::Gone | Leg::Released => {}
        }
    }

    fn send_blind(&mut self, now: Instant) {
        let Plan::Blind(via) = self.plan else { return };
        if self.stage != Stage::Announcing {
            return;
        }
        self.timers.stop(Timer::Announcement);
        let target = self.target.clone();
        self.actions.push_back(match via {
            BlindVia::SipRefer => Action::Refer { target },
            BlindVia::TwilioRedirect => Action::Redirect { target },
        });
        self.timers
            .set(Timer::Refer, now + self.settings.refer_timeout);
        self.enter(Stage::Referring);
    }

    fn on_refer_answered(&mut self, status: u16, now: Instant) {
        if self.plan != Plan::Blind(BlindVia::SipRefer) || self.stage != Stage::Referring {
            return;
        }
        match status {
            100..=199 => {}
            200..=299 => self.enter(Stage::Following),
            _ => self.give_back(
                Outcome::Rejected {
                    status,
                    reason: "the REFER was refused".into(),
                },
                Some(status),
                now,
            ),
        }
    }

    fn on_notify(&mut self, body: &[u8], now: Instant) {
        // A NOTIFY may overtake the REFER's 202 (RFC 3515 §2.4.4): accept it while referring.
        if self.plan != Plan::Blind(BlindVia::SipRefer)
            || !matches!(self.stage, Stage::Referring | Stage::Following)
        {
            return;
        }
        let line = match sipfrag::parse(body) {
            Ok(line) => line,
            Err(e) => {
                self.events.push_back(Event::BadNotify {
                    error: e.to_string(),
                });
                return;
            }
        };
        match line.status {
            100..=179 => self.enter(Stage::Following),
            180..=199 => {
                self.ring_start.get_or_insert(now);
                self.enter(Stage::Following);
            }
            200..=299 => {
                self.answered = Some(now);
                self.actions.push_back(Action::LeaveCall);
                self.finish(Outcome::Transferred, Some(line.status), now);
            }
            status => self.give_back(Outcome::of_status(status, &line.reason), Some(status), now),
        }
    }

    // --- steps --------------------------------------------------------------------------

    fn start_brief(&mut self) {
        self.timers.stop(Timer::Screen);
        self.route(PersonAudio::Brief);
        self.actions.push_back(Action::StartBrief);
        self.enter(Stage::Briefing);
    }

    /// CANCEL or BYE the person's leg, whichever its state needs; nothing if it is not up.
    fn release_person(&mut self) {
        match self.leg {
            Leg::Pending => {
                self.leg = Leg::Cancelling;
                self.actions.push_back(Action::CancelPerson);
            }
            Leg::Up => {
                self.leg = Leg::Released;
                self.actions.push_back(Action::HangUpPerson);
            }
            Leg::None | Leg::Cancelling | Leg::Gone | Leg::Released => {}
        }
    }

    /// The transfer did not happen: the caller is handed back, and hears the agent again.
    fn give_back(&mut self, outcome: Outcome, status: Option<u16>, now: Instant) {
        self.stop_all_but_dead_air();
        self.route(PersonAudio::Discard);
        let action = match (&outcome, &self.settings.on_no_answer) {
            (Outcome::NoAnswer { .. }, OnNoAnswer::Agent(agent)) => Action::HandTo {
                agent: agent.clone(),
                outcome: outcome.clone(),
            },
            (Outcome::NoAnswer { .. }, OnNoAnswer::HangUp) => Action::EndCall {
                outcome: outcome.clone(),
            },
            _ => Action::ReturnToAgent {
                outcome: outcome.clone(),
            },
        };
        self.actions.push_back(action);
        // Warm transfers keep the agent talking to the caller throughout, so a gap here is the
        // agent's silence in answering; blind ones had handed the leg away.
        self.gap_since = Some(now);
        self.timers
            .set(Timer::DeadAir, now + self.settings.dead_air_cap);
        self.enter(Stage::Done);
        self.finish(outcome, status, now);
    }

    fn finish(&mut self, outcome: Outcome, status: Option<u16>, now: Instant) {
        if self.outcome.is_some() {
            return;
        }
        if outcome.succeeded() {
            self.stop_all_but_dead_air();
            if self.stage != Stage::Bridged {
                self.enter(Stage::Done);
            }
        }
        let ms = |d: Duration| d.as_millis().min(u128::from(u64::MAX)) as u64;
        let ring_ms = self
            .ring_start
            .map(|r| ms(self.answered.unwrap_or(now).saturating_duration_since(r)));
        let setup_ms = self.answered.map(|a| {
            let to_answer = a.saturating_duration_since(self.requested);
            let ring = self
                .ring_start
                .map(|r| a.saturating_duration_since(r))
                .unwrap_or_default();
            ms(to_answer.saturating_sub(ring))
        });
        self.events.push_back(Event::Finished(Report {
            plan: self.plan,
            target: self.target.clone(),
            outcome: outcome.clone(),
            status,
            setup_ms,
            ring_ms,
            total_ms: ms(now.saturating_duration_since(self.requested)),
        }));
        self.outcome = Some(outcome);
    }

    fn close_gap(&mut self, now: Instant, capped: bool) {
        let Some(since) = self.gap_since.take() else {
            return;
        };
        self.timers.stop(Timer::DeadAir);
        let gap = now.saturating_duration_since(since);
        self.dead_air += gap;
        self.events.push_back(Event::DeadAir {
            ms: gap.as_millis().min(u128::from(u64::MAX)) as u64,
            capped,
        });
    }

    fn stop_all_but_dead_air(&mut self) {
        for t in [
            Timer::Announcement,
            Timer::Refer,
            Timer::Ring,
            Timer::Screen,
            Timer::Decision,
        ] {
            self.timers.stop(t);
        }
    }

    fn route(&mut self, to: PersonAudio) {
        if self.person_audio != to {
            self.person_audio = to;
            self.actions.push_back(Action::RoutePersonAudio(to));
        }
    }

    fn enter(&mut self, stage: Stage) {
        if self.stage != stage {
            self.stage = stage;
            self.events.push_back(Event::Stage { stage });
        }
    }

    /// Time never goes backwards: an older `now` counts as the latest seen.
    fn tick(&mut self, now: Instant) -> Instant {
        self.now = self.now.max(now);
        self.now
    }
}
