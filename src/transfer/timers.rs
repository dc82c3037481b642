//! A transfer's timer table: one slot per [`Timer`]; the earliest armed slot is the next
//! deadline, reported with its reason. Firing early is harmless: each handler re-checks the
//! stage it acts on.

use crate::deadlines::{Deadlines, Reason};

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

impl Reason for Timer {
    const ALL: &'static [Timer] = &[
        Timer::Announcement,
        Timer::Refer,
        Timer::Ring,
        Timer::Screen,
        Timer::Decision,
        Timer::DeadAir,
    ];
    fn slot(self) -> usize {
        self as usize
    }
}

pub(super) type Timers = Deadlines<Timer, 6>;
