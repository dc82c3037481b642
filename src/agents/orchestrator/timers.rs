//! The orchestrator's timer table: one slot per [`Timer`]; the earliest armed slot is the next
//! deadline, reported with its reason. Firing early is harmless: each handler re-checks the state
//! it acts on.

use crate::deadlines::{Deadlines, Reason};

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

impl Reason for Timer {
    const ALL: &'static [Timer] = &[
        Timer::ToolResult,
        Timer::StandbySetup,
        Timer::HeldMessage,
        Timer::Reroute,
    ];
    fn slot(self) -> usize {
        self as usize
    }
}

pub type Timers = Deadlines<Timer, 4>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

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
