//! When and how a call replaces its model session, sans-IO: the decisions of reference §10 as a
//! state machine that takes events and a clock and returns actions. The call's shell
//! (`call/resume.rs`) opens and closes sockets; this module never does.
//!
//! ```text
//! loop {
//!     feed one input:  on_model_event / on_uplink / on_session_lost / on_opened / on_open_failed
//!                      (or handle_timeout(now) when poll_timeout() has passed)
//!     drain:           while let Some(a) = poll_action() { carry a out }
//!     sleep until:     poll_timeout()
//! }
//! ```
//!
//! Time never goes backwards: an older `now` counts as the latest one seen.
//!
//! **Planned switch (`goAway`).** A deadline is armed at `timeLeft − margin` (the margin is
//! [`ReconnectPolicy::go_away_margin`], at most half of `timeLeft`). The switch happens at the
//! first *quiet point*: generation complete, a `resumable: true` handle received since the model
//! last spoke or called a tool, and no tool call unanswered — or at the deadline, whichever comes
//! first (a server that goes silent after `goAway` cannot stall it: the deadline is a timer).
//! Switch sequence: [`Action::CloseCurrent`] (the service refuses a resume while the old socket is
//! open), then, once the shell reports the old socket closed (or after
//! [`ReconnectPolicy::close_wait`]), [`Action::Open`] with the handle.
//!
//! **Unexpected drop** (a close frame with any code, a socket error, a dead socket): the socket is
//! already gone, so the machine opens at once, then retries with [`field@ReconnectPolicy::backoff`]
//! until [`ReconnectPolicy::tries`] resumes have failed. A refused handle (the service answers its
//! `setup` with a close, code 1007/1008) is dropped at once, as is any handle after the budget:
//! then a fresh session is opened, re-seeded by the shell from baton's own transcript, up to
//! [`ReconnectPolicy::fresh_tries`] times; after that [`Action::GiveUp`].
//!
//! **Caller audio.** Every uplink frame goes through [`Reconnector::on_uplink`] and stays in a
//! ring until a handle covers it. The rule: *a handle arriving at `t` covers the frames handed to
//! that same session's socket at or before `t − replay_margin`*. The server makes a handle from
//! the input it has consumed, and a frame handed to the socket more than one round trip (plus the
//! server's input lag) before the handle arrived has been consumed; the margin bounds both, so
//! frames younger than it are kept and sent again (a duplicate at worst, never a loss). When the
//! new session is in, every frame in the ring is sent to it in order ([`Reconnector::on_opened`]):
//! frames the old session had already been given count as `audio_replayed_ms`, frames that
//! arrived during the switch are simply late. A frame pushed out of a full ring before any handle
//! covered it counts as `audio_lost_ms` if a switch follows.
//!
//! **Without resumption** (OpenAI Realtime) no handle ever comes and every reopen is fresh,
//! re-seeded from the transcript. The shell reports each finished caller transcription
//! ([`Reconnector::on_transcribed`]): the caller's words up to then are in the transcript a fresh
//! session is given, so the frames handed to the socket before it (by the same margin) are covered
//! as by a handle, and only the untranscribed rest is replayed.
//!
//! **Tool calls.** A handle is only resumable while no call is outstanding, so a resumed (or
//! fresh) session never knows a call that was outstanding when its predecessor died; a response
//! with that id would be refused. Such calls are reported by [`Reconnector::abandoned_calls`] for
//! the shell to cancel (as the service cancels calls on barge-in); the replayed caller audio makes
//! the new session answer the turn again, calling the tool again. Tool responses produced while no
//! session is open for calls the next session does know are queued by the shell and sent after
//! the replay.

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use std::time::Instant;

pub use self::types::{Action, Cause, OpenFailure, ReconnectPolicy};
use super::metrics::{ReconnectRecord, ms, round2};
use super::samples::Samples;
use crate::model::ModelEvent;

#[path = "reconnect_types.rs"]
mod types;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Live,
    /// `goAway` received; waiting for a quiet point until the deadline.
    Draining {
        deadline: Instant,
    },
    /// The old socket is being closed.
    Closing {
        until: Instant,
    },
    Backoff {
        until: Instant,
    },
    Opening,
    Failed,
}

/// One uplink frame kept for replay (its samples are the next `len` of the ring's samples).
/// 16 bytes: a call keeps one per 20 ms of caller audio not yet covered by a handle, often
/// seconds of it.
#[derive(Debug, Clone, Copy)]
struct Kept {
    len: u32,
    /// Its duration in µs (a frame is milliseconds long).
    dur_us: u32,
    /// The session it was handed to ([`NOT_HANDED`] if none) …
    epoch: u32,
    /// … and when, in whole milliseconds after the machine's start, rounded up: a handle covers
    /// the frame no earlier than it would by the exact instant.
    at_ms: u32,
}

/// [`Kept::epoch`] of a frame no session has had (no call reaches that many sessions).
const NOT_HANDED: u32 = u32::MAX;

impl Kept {
    fn new(len: usize, dur: Duration) -> Kept {
        Kept {
            len: u32::try_from(len).unwrap_or(u32::MAX),
            dur_us: u32::try_from(dur.as_micros()).unwrap_or(u32::MAX),
            epoch: NOT_HANDED,
            at_ms: 0,
        }
    }

    fn dur(&self) -> Duration {
        Duration::from_micros(u64::from(self.dur_us))
    }

    fn handed(&self) -> bool {
        self.epoch != NOT_HANDED
    }

    /// Handed to session `epoch` at `at`.
    fn hand(&mut self, epoch: u32, at: Instant, start: Instant) {
        let since = at.saturating_duration_since(start);
        let ms = since.as_millis() + u128::from(!since.subsec_nanos().is_multiple_of(1_000_000));
        self.epoch = epoch;
        self.at_ms = u32::try_from(ms).unwrap_or(u32::MAX);
    }

    /// The session it was handed to and when (as kept: to the millisecond, rounded up).
    fn handed_at(&self, start: Instant) -> Option<(u32, Instant)> {
        self.handed().then(|| {
            (
                self.epoch,
                start + Duration::from_millis(u64::from(self.at_ms)),
            )
        })
    }
}

/// The reconnect in progress.
#[derive(Debug)]
struct Attempt {
    cause: Cause,
    at: Instant,
    opened: u32,
    resumes: u32,
    fresh: u32,
    resuming: bool,
}

/// The reconnect state of one call. `S` is the unit of what is kept of each uplink frame for
/// replay (the shell keeps the frame at the leg's rate as bytes of `call::kept`, one per sample
/// on a G.711 leg, and decodes and resamples them when replaying). Frames are kept end to end in
/// blocks: no allocation per frame.
#[derive(Debug)]
pub struct Reconnector<S> {
    policy: ReconnectPolicy,
    /// Where `at_ms` counts from.
    start: Instant,
    now: Instant,
    state: State,
    epoch: u32,
    handle: Option<String>,
    /// A resumable handle arrived since the model last spoke or called a tool.
    handle_fresh: bool,
    generating: bool,
    outstanding: HashSet<String>,
    abandoned: Vec<String>,
    ring: VecDeque<Kept>,
    /// The kept frames' samples, oldest first.
    samples: Samples<S>,
    ring_dur: Duration,
    /// Audio pushed out of the ring after a session had it but before a handle covered it, and
    /// when the last such frame was handed to its session.
    evicted: Duration,
    evicted_upto: Option<(u32, Instant)>,
    /// Audio pushed out of the ring before any session had it: lost for sure.
    dropped: Duration,
    attempt: Option<Attempt>,
    actions: VecDeque<Action>,
    records: Vec<ReconnectRecord>,
}

impl<S: Copy> Reconnector<S> {
    /// A call whose first session is live at `now` (also where `at_ms` counts from, unless
    /// [`Reconnector::timed_from`] says otherwise).
    pub fn new(policy: ReconnectPolicy, now: Instant) -> Self {
        Reconnector {
            policy,
            start: now,
            now,
            state: State::Live,
            epoch: 0,
            handle: None,
            handle_fresh: false,
            generating: false,
            outstanding: HashSet::new(),
            abandoned: Vec::new(),
            ring: VecDeque::new(),
            samples: Samples::default(),
            ring_dur: Duration::ZERO,
            evicted: Duration::ZERO,
            evicted_upto: None,
            dropped: Duration::ZERO,
            attempt: None,
            actions: VecDeque::new(),
            records: Vec::new(),
        }
    }

    /// `at_ms` counted from `zero` instead: the leg's media start, the timeline of the caller's
    /// turns and of what the caller heard (the first session may open well after the leg).
    pub fn timed_from(mut self, zero: Instant) -> Self {
        self.start = zero;
        self
    }

    fn advance(&mut self, now: Instant) -> Instant {
        self.now = self.now.max(now);
        self.now
    }

    pub fn policy(&self) -> &ReconnectPolicy {
        &self.policy
    }

    /// Uplink may go to the current session.
    pub fn is_live(&self) -> bool {
        matches!(self.state, State::Live | State::Draining { .. })
    }

    /// A switch is under way (no session to send to).
    pub fn switching(&self) -> bool {
        matches!(
            self.state,
            State::Closing { .. } | State::Backoff { .. } | State::Opening
        )
    }

    pub fn failed(&self) -> bool {
        self.state == State::Failed
    }

    /// The latest resumable handle.
    pub fn handle(&self) -> Option<&str> {
        self.handle.as_deref()
    }

    /// Caller audio kept for replay.
    pub fn kept(&self) -> Duration {
        self.ring_dur
    }

    /// Reconnects so far (the last one may still be in progress).
    pub fn records(&self) -> &[ReconnectRecord] {
        &self.records
    }

    pub fn records_mut(&mut self) -> &mut [ReconnectRecord] {
        &mut self.records
    }

    pub fn into_records(self) -> Vec<ReconnectRecord> {
        self.records
    }

    /// The next thing to do; poll until `None` after every input.
    #[must_use]
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When to call [`handle_timeout`](Self::handle_timeout); `None`: only inputs matter.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            State::Draining { deadline } => Some(deadline),
            State::Closing { until } | State::Backoff { until } => Some(until),
            State::Live | State::Opening | State::Failed => None,
        }
    }

    /// Tool calls the dead session left unanswered; the shell cancels them. Drained.
    pub fn abandoned_calls(&mut self) -> Vec<String> {
        std::mem::take(&mut self.abandoned)
    }

    /// An event of the current session.
    pub fn on_model_event(&mut self, e: &ModelEvent, now: Instant) {
        let now = self.advance(now);
        if !self.is_live() {
            return;
        }
        match e {
            ModelEvent::ResumptionUpdate {
                handle: Some(h),
                resumable: true,
            } => {
                self.handle = Some(h.clone());
                self.handle_fresh = true;
                // The service makes a resumable handle only with no call executing.
                self.outstanding.clear();
                self.cover(now);
            }
            ModelEvent::ResumptionUpdate { .. } => self.handle_fresh = false,
            ModelEvent::Audio { .. } | ModelEvent::OutputTranscript { .. } => {
                self.generating = true;
                self.handle_fresh = false;
            }
            ModelEvent::ToolCall(calls) => {
                self.handle_fresh = false;
                self.outstanding.extend(calls.iter().map(|c| c.id.clone()));
            }
            ModelEvent::ToolCallCancellation(ids) => {
                for id in ids {
                    self.outstanding.remove(id);
                }
            }
            ModelEvent::GenerationComplete | ModelEvent::TurnComplete | ModelEvent::Interrupted => {
                self.generating = false
            }
            ModelEvent::GoAway { time_left } if self.state == State::Live => {
                let left = time_left.unwrap_or_default();
                let margin = self.policy.go_away_margin.min(left / 2);
                self.state = State::Draining {
                    deadline: now + left.saturating_sub(margin),
                };
            }
            _ => {}
        }
        self.check_quiet(now);
    }

    /// Baton answered these tool calls.
    pub fn on_tool_responded<'a>(&mut self, ids: impl IntoIterator<Item = &'a str>, now: Instant) {
        let now = self.advance(now);
        for id in ids {
            self.outstanding.remove(id);
        }
        self.check_quiet(now);
    }

    /// A caller frame (`dur` of audio) kept until a handle covers it. Returns whether to send it
    /// to the current session now; `false` while there is no session (it is replayed to the
    /// next).
    pub fn on_uplink(&mut self, frame: &[S], dur: Duration, now: Instant) -> bool {
        let now = self.advance(now);
        let live = self.is_live();
        let mut kept = Kept::new(frame.len(), dur);
        if live {
            kept.hand(self.epoch, now, self.start);
        }
        self.ring.push_back(kept);
        self.samples.push(frame);
        // What the ring holds is counted as kept (to the µs), so that popping it subtracts the same.
        self.ring_dur += kept.dur();
        while self.ring_dur > self.policy.max_replay {
            let Some(old) = self.pop_kept() else {
                break;
            };
            match old.handed_at(self.start) {
                Some(h) => {
                    self.evicted += old.dur();
                    self.evicted_upto = Some(h);
                }
                None => self.dropped += old.dur(),
            }
        }
        live
    }

    /// The session was replaced by a handoff (a warm standby or a cold recreation): its handle
    /// means nothing for the new one, and the audio the old one heard reached the new one as
    /// transferred history.
    pub fn on_session_replaced(&mut self, now: Instant) {
        self.advance(now);
        self.epoch += 1;
        self.handle = None;
        self.handle_fresh = false;
        self.generating = false;
        self.outstanding.clear();
        while self.ring.front().is_some_and(Kept::handed) {
            self.pop_kept();
        }
        self.evicted = Duration::ZERO;
        self.evicted_upto = None;
    }

    /// The current session ended without being asked to (or, while closing, as asked).
    pub fn on_session_lost(&mut self, cause: Cause, now: Instant) {
        let now = self.advance(now);
        match self.state {
            State::Live | State::Draining { .. } => {
                let cause = if matches!(self.state, State::Draining { .. }) {
                    Cause::GoAway
                } else {
                    cause
                };
                self.begin(cause, now);
                self.state = State::Backoff {
                    until: now + self.policy.backoff(0),
                };
                self.handle_timeout(now);
            }
            State::Closing { .. } => self.on_old_closed(now),
            State::Backoff { .. } | State::Opening | State::Failed => {}
        }
    }

    /// The socket closed by [`Action::CloseCurrent`] has ended.
    pub fn on_old_closed(&mut self, now: Instant) {
        self.advance(now);
        if matches!(self.state, State::Closing { .. }) {
            self.open();
        }
    }

    /// The session asked for by [`Action::Open`] is up (its `setupComplete` arrived). Returns
    /// the samples of every kept frame, in order, to send to it before anything else.
    pub fn on_opened(&mut self, now: Instant) -> Vec<S> {
        let now = self.advance(now);
        if self.state != State::Opening {
            return Vec::new();
        }
        self.state = State::Live;
        self.epoch += 1;
        self.handle_fresh = false;
        self.generating = false;
        self.outstanding.clear();
        let mut replayed = Duration::ZERO;
        for k in &mut self.ring {
            if k.handed() {
                replayed += k.dur();
            }
            k.hand(self.epoch, now, self.start);
        }
        let out: Vec<S> = self.samples.iter().collect();
        if let Some(a) = self.attempt.take() {
            if !a.resuming {
                // A new conversation: the old lineage's handle restores nothing of it.
                self.handle = None;
            }
            self.records.push(ReconnectRecord {
                cause: a.cause.label(),
                outcome: if a.resuming { "resumed" } else { "reseeded" }.into(),
                attempts: a.opened,
                at_ms: round2(ms(a.at.saturating_duration_since(self.start))),
                gap_ms: None,
                audio_replayed_ms: round2(ms(replayed)),
                audio_lost_ms: round2(ms(
                    std::mem::take(&mut self.evicted) + std::mem::take(&mut self.dropped)
                )),
                ..Default::default()
            });
        }
        out
    }

    /// The session asked for by [`Action::Open`] could not be opened.
    pub fn on_open_failed(&mut self, why: OpenFailure, now: Instant) {
        let now = self.advance(now);
        if self.state != State::Opening {
            return;
        }
        let Some(a) = self.attempt.as_ref() else {
            return;
        };
        let (resuming, opened) = (a.resuming, a.opened);
        if resuming && why == OpenFailure::HandleRefused {
            self.handle = None;
            self.open();
            return;
        }
        self.state = State::Backoff {
            until: now + self.policy.backoff(opened),
        };
    }

    /// Fires what is due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        let now = self.advance(now);
        match self.state {
            State::Draining { deadline } if now >= deadline => {
                self.begin(Cause::GoAway, now);
                self.close_current(now);
            }
            State::Closing { until } if now >= until => self.open(),
            State::Backoff { until } if now >= until => self.open(),
            _ => {}
        }
    }

    fn check_quiet(&mut self, now: Instant) {
        if matches!(self.state, State::Draining { .. })
            && !self.generating
            && self.handle_fresh
            && self.outstanding.is_empty()
        {
            self.begin(Cause::GoAway, now);
            self.close_current(now);
        }
    }

    fn close_current(&mut self, now: Instant) {
        self.actions.push_back(Action::CloseCurrent);
        self.state = State::Closing {
            until: now + self.policy.close_wait,
        };
    }

    /// The current session stops being usable: remember why and what it left undone.
    fn begin(&mut self, cause: Cause, now: Instant) {
        self.abandoned.extend(self.outstanding.drain());
        self.abandoned.sort();
        self.generating = false;
        self.handle_fresh = false;
        self.attempt = Some(Attempt {
            cause,
            at: now,
            opened: 0,
            resumes: 0,
            fresh: 0,
            resuming: false,
        });
    }

    /// The next open: resume while the budget and a handle last, then fresh, then give up.
    fn open(&mut self) {
        let (tries, fresh_tries) = (self.policy.tries, self.policy.fresh_tries);
        let handle = self.handle.clone();
        let Some(a) = self.attempt.as_mut() else {
            return;
        };
        let next = match handle {
            Some(h) if a.resumes < tries => {
                a.resumes += 1;
                a.resuming = true;
                Some(Action::Open { handle: Some(h) })
            }
            _ if a.fresh < fresh_tries => {
                a.fresh += 1;
                a.resuming = false;
                Some(Action::Open { handle: None })
            }
            _ => None,
        };
        match next {
            Some(action) => {
                a.opened += 1;
                self.state = State::Opening;
                self.actions.push_back(action);
            }
            None => {
                let reason = format!(
                    "no model session could be reopened after {} attempts ({})",
                    a.opened,
                    a.cause.label()
                );
                self.records.push(ReconnectRecord {
                    cause: a.cause.label(),
                    outcome: "failed".into(),
                    attempts: a.opened,
                    at_ms: round2(ms(a.at.saturating_duration_since(self.start))),
                    audio_lost_ms: round2(ms(self.ring_dur + self.evicted + self.dropped)),
                    ..Default::default()
                });
                self.attempt = None;
                self.state = State::Failed;
                self.actions.push_back(Action::GiveUp { reason });
            }
        }
    }

    /// A session without resumption finished transcribing the caller at `now`: the frames it
    /// covers are in the transcript a fresh session is seeded with.
    pub fn on_transcribed(&mut self, now: Instant) {
        let now = self.advance(now);
        if self.is_live() {
            self.cover(now);
        }
    }

    /// Drops the oldest kept frame and its samples.
    fn pop_kept(&mut self) -> Option<Kept> {
        let k = self.ring.pop_front()?;
        self.ring_dur = self.ring_dur.saturating_sub(k.dur());
        self.samples.drop_front(k.len as usize);
        Some(k)
    }

    /// A handle arrived at `now`: drop the frames it covers.
    fn cover(&mut self, now: Instant) {
        let epoch = self.epoch;
        let Some(limit) = now.checked_sub(self.policy.replay_margin) else {
            return;
        };
        while self.ring.front().is_some_and(|k| {
            k.handed_at(self.start)
                .is_some_and(|(e, at)| e == epoch && at <= limit)
        }) {
            self.pop_kept();
        }
        if self
            .evicted_upto
            .is_some_and(|(e, at)| e == epoch && at <= limit)
        {
            self.evicted = Duration::ZERO;
            self.evicted_upto = None;
        }
    }
}

#[cfg(test)]
#[path = "reconnect_tests.rs"]
mod tests;
