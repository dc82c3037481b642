//! The orchestrator's timer table: one slot per [`Timer`]; the earliest armed slot is the next
//! deadline, reported with its reason. Firing early is harmless: each handler re-checks the state
//! it acts on.

use std::time::Instant;

use serde::Serialize;

/// Why the orchestrator wants to be woken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Timer {
    /// A tool result is overdue: the model gets an error result instead of waiting forever.
    ToolResult = 0,
    /// A warm standby session (or a cold replacement) is overdue: the handoff is abandoned.
    StandbySetup = 1,
    /// A message held for the turn boundary waited for the model's reply long enough.
    HeldMessage = 2,
    /// An agent's "let me transfer you" named nobody and the caller said nothing that picks one.
    Reroute = 3,
}

const ALL: [Timer; 4] = [
    Timer::ToolResult,
    Timer::StandbySetup,
    Timer::HeldMessage,
    Timer::Reroute,
];

#[derive(Debug, Default)]
pub struct Timers([Option<Instant>; 4]);

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn earliest_first_with_its_reason() {
        let t0 = Instant::now();
        let mut t = Timers::default();
        assert_eq!(t.next(), None);
        t.set(Timer::Reroute, t0 + Duration::from_secs(30));
        t.set(Timer::HeldMessage, t0 + Duration::from_secs(3));
        assert_eq!(
            t.next(),
            Some((t0 + Duration::from_secs(3), Timer::HeldMessage))
        );
        assert_eq!(t.pop_due(t0), None);
        let late = t0 + Duration::from_secs(31);
        assert_eq!(t.pop_due(late), Some(Timer::HeldMessage));
        assert_eq!(t.pop_due(late), Some(Timer::Reroute));
        assert_eq!(t.pop_due(late), None);
    }
}
