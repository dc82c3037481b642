//! The mock session's timer table: one slot per [`Timer`], the earliest armed one is the session's
//! next deadline. Firing early is harmless: each handler checks the state it acts on.

use crate::deadlines::{Deadlines, Reason};

/// The session's timers, one slot each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timer {
    /// The model starts its reply (tool call or first audio).
    Reply = 0,
    /// The next burst of audio chunks.
    Burst = 1,
    /// The client has played the reply: send `turnComplete`.
    TurnComplete = 2,
    /// Send the scripted `goAway`.
    GoAway = 3,
    /// The `goAway`'s time is up: close 1011.
    GoAwayClose = 4,
    /// A scripted drop at a fixed moment.
    Drop = 5,
    /// Send the next garbage frame.
    Garbage = 6,
}

impl Reason for Timer {
    const ALL: &'static [Timer] = &[
        Timer::Reply,
        Timer::Burst,
        Timer::TurnComplete,
        Timer::GoAway,
        Timer::GoAwayClose,
        Timer::Drop,
        Timer::Garbage,
    ];
    fn slot(self) -> usize {
        self as usize
    }
}

pub type Timers = Deadlines<Timer, 7>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn earliest_due_first_then_disarmed() {
        let t0 = Instant::now();
        let mut t = Timers::default();
        assert_eq!(t.next(), None);
        t.set(Timer::TurnComplete, t0 + Duration::from_millis(5));
        t.set(Timer::Burst, t0 + Duration::from_millis(9));
        assert_eq!(
            t.next().map(|(at, _)| at),
            Some(t0 + Duration::from_millis(5))
        );
        assert_eq!(t.pop_due(t0), None);
        let late = t0 + Duration::from_millis(10);
        assert_eq!(t.pop_due(late), Some(Timer::TurnComplete));
        assert_eq!(t.pop_due(late), Some(Timer::Burst));
        assert_eq!(t.pop_due(late), None);
        t.set(Timer::Reply, t0);
        t.stop_all();
        assert_eq!(t.next(), None);
    }
}
