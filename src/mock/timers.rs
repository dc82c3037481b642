//! The mock session's timer table: one slot per [`Timer`], the earliest armed one is the session's
//! next deadline. Firing early is harmless: each handler checks the state it acts on.

use std::time::Instant;

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

/// Every timer, in the order they fire when due at the same instant.
const TIMERS: [Timer; 7] = [
    Timer::Reply,
    Timer::Burst,
    Timer::TurnComplete,
    Timer::GoAway,
    Timer::GoAwayClose,
    Timer::Drop,
    Timer::Garbage,
];

#[derive(Debug, Default)]
pub struct Timers([Option<Instant>; 7]);

impl Timers {
    pub fn set(&mut self, t: Timer, at: Instant) {
        self.0[t as usize] = Some(at);
    }
    pub fn stop(&mut self, t: Timer) {
        self.0[t as usize] = None;
    }
    pub fn stop_all(&mut self) {
        self.0 = Default::default();
    }
    pub fn next(&self) -> Option<Instant> {
        self.0.iter().flatten().min().copied()
    }
    /// The earliest timer due at `now`, disarmed.
    pub fn pop_due(&mut self, now: Instant) -> Option<Timer> {
        let t = TIMERS
            .into_iter()
            .filter(|&t| self.0[t as usize].is_some_and(|at| at <= now))
            .min_by_key(|&t| self.0[t as usize])?;
        self.stop(t);
        Some(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn earliest_due_first_then_disarmed() {
        let t0 = Instant::now();
        let mut t = Timers::default();
        assert_eq!(t.next(), None);
        t.set(Timer::TurnComplete, t0 + Duration::from_millis(5));
        t.set(Timer::Burst, t0 + Duration::from_millis(9));
        assert_eq!(t.next(), Some(t0 + Duration::from_millis(5)));
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
