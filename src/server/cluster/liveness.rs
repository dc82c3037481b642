//! Whether this instance may judge others (sans-IO): it marks an instance gone only after its
//! own heartbeats have reached the database for a whole stale window. After a database outage
//! every instance's heartbeat is old; an instance that has just reconnected waits until the
//! others have had the time to heartbeat again, so an outage never makes healthy instances
//! look dead.

use std::time::Duration;

use tokio::time::Instant;

/// A change worth a log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// The first heartbeat failed after successes (or at start).
    Lost,
    /// A heartbeat succeeded after failures; the outage lasted this long.
    Regained(Duration),
}

/// The heartbeat's standing.
#[derive(Clone, Debug)]
pub struct Liveness {
    stale_after: Duration,
    healthy_since: Option<Instant>,
    failing_since: Option<Instant>,
}

impl Liveness {
    pub fn new(stale_after: Duration) -> Liveness {
        Liveness {
            stale_after,
            healthy_since: None,
            failing_since: None,
        }
    }

    /// A heartbeat's outcome at `now`.
    pub fn handle_beat(&mut self, ok: bool, now: Instant) -> Option<Change> {
        if ok {
            let regained = self.failing_since.take().map(|t| Change::Regained(now - t));
            self.healthy_since.get_or_insert(now);
            regained
        } else {
            self.healthy_since = None;
            if self.failing_since.is_none() {
                self.failing_since = Some(now);
                Some(Change::Lost)
            } else {
                None
            }
        }
    }

    /// True once heartbeats have succeeded without a break for the stale window.
    pub fn may_sweep(&self, now: Instant) -> bool {
        self.healthy_since
            .is_some_and(|t| now.saturating_duration_since(t) >= self.stale_after)
    }

    /// When [`Self::may_sweep`] turns true, if heartbeats keep succeeding.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.healthy_since.map(|t| t + self.stale_after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweeps_only_after_a_whole_window_of_good_heartbeats() {
        let t0 = Instant::now();
        let s = Duration::from_secs(5);
        let mut l = Liveness::new(s);
        assert!(!l.may_sweep(t0));
        assert_eq!(l.handle_beat(true, t0), None);
        assert_eq!(l.poll_timeout(), Some(t0 + s));
        assert!(!l.may_sweep(t0 + Duration::from_secs(4)));
        assert!(l.may_sweep(t0 + s));
        // An outage: no sweeping until a fresh window has passed.
        let t1 = t0 + Duration::from_secs(10);
        assert_eq!(l.handle_beat(false, t1), Some(Change::Lost));
        assert_eq!(l.handle_beat(false, t1 + Duration::from_secs(1)), None);
        assert!(!l.may_sweep(t1 + Duration::from_secs(1)));
        let t2 = t1 + Duration::from_secs(3);
        assert_eq!(
            l.handle_beat(true, t2),
            Some(Change::Regained(Duration::from_secs(3)))
        );
        assert!(!l.may_sweep(t2 + Duration::from_secs(4)));
        assert!(l.may_sweep(t2 + s));
    }
}
