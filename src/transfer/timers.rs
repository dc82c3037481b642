//! A transfer's timer table: one slot per [`Timer`]; the earliest armed slot is the next
//! deadline, reported with its reason. Firing early is harmless: each handler re-checks the
//! stage it acts on.

use std::time::Instant;

use serde::Serialize;

/// Why a transfer wants to be woken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Timer {
    /// Blind: the announcement's end was never reported; the transfer goes out anyway.
    Announcement = 0,
    /// Blind: the REFER (or the REST redirect) has had no final answer in time.
    Refer = 1,
    /// Warm: the person's phone has rung out.
    Ring = 2,
    /// Warm: the answering-machine heuristic gave no verdict in time.
    Screen = 3,
    /// Warm: the person neither accepted nor declined after the brief.
    Decision = 4,
    /// The caller has heard nothing since being switched for this long: the gap is reported.
    DeadAir = 5,
}

const ALL: [Timer; 6] = [
    Timer::Announcement,
    Timer::Refer,
    Timer::Ring,
    Timer::Screen,
    Timer::Decision,
    Timer::DeadAir,
];

#[derive(Debug, Default)]
pub(super) struct Timers([Option<Instant>; 6]);

impl Timers {
    pub fn set(&mut self, t: Timer, at: Instant) {
        self.0[t as usize] = Some(at);
    }
    pub fn stop(&mut self, t: Timer) {
        self.0[t as usize] = None;
    }
    /// The earliest armed deadline and its reason.
    pub fn next(&self) -> Option<(Instant, Timer)> {
        ALL.into_iter()
            .filter_map(|t| self.0[t as usize].map(|at| (at, t)))
            .min_by_key(|&(at, _)| at)
    }
    /// The earliest timer due at `now`, disarmed.
    pub fn pop_due(&mut self, now: Instant) -> Option<Timer> {
        let (at, t) = self.next()?;
        (at <= now).then(|| {
            self.stop(t);
            t
        })
    }
}
