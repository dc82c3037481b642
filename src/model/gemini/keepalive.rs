//! The session's keepalive, sans-IO: when to send a WebSocket ping and when to call the socket
//! dead. The service answers pings slowly (8–30 s measured, reference §8.2 item 1), so a late pong
//! is never a failure on its own: *any* inbound frame (a message, a pong, a ping) proves the
//! socket alive, and the socket is declared dead only when nothing at all has arrived for
//! `dead_after` while at least one ping has gone unanswered. With the defaults (ping every 10 s,
//! dead after 45 s) the longest healthy silence, a ping sent just after the last frame and
//! answered 30 s late, is 40 s.
//!
//! Driving rule: call [`Keepalive::on_frame`] for every inbound frame; sleep until
//! [`Keepalive::poll_timeout`]; then call [`Keepalive::handle_timeout`] and carry out what it
//! returns. Time never goes backwards: an older `now` counts as the latest one seen.

use std::time::Duration;

use tokio::time::Instant;

/// Keepalive settings of one session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeepaliveConfig {
    /// Interval between pings while nothing arrives; `None`: never ping (and never call the
    /// socket dead, since an idle healthy session may be silent for any time).
    pub ping_every: Option<Duration>,
    /// Nothing received for this long, with a ping outstanding: the socket is dead.
    pub dead_after: Duration,
}

impl Default for KeepaliveConfig {
    fn default() -> Self {
        KeepaliveConfig {
            ping_every: Some(Duration::from_secs(10)),
            dead_after: Duration::from_secs(45),
        }
    }
}

/// What the keepalive wants done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeepaliveAction {
    /// Send a WebSocket ping.
    Ping,
    /// Nothing has arrived for `silent_for` although pings were sent: treat as a dropped socket.
    Dead { silent_for: Duration },
}

/// The keepalive state of one socket.
#[derive(Debug)]
pub struct Keepalive {
    cfg: KeepaliveConfig,
    now: Instant,
    last_rx: Instant,
    next_ping: Option<Instant>,
    /// A ping went out after the last inbound frame.
    outstanding: bool,
    dead: bool,
}

impl Keepalive {
    /// A socket that has just received a frame at `now` (its `setupComplete`).
    pub fn new(cfg: KeepaliveConfig, now: Instant) -> Self {
        Keepalive {
            cfg,
            now,
            last_rx: now,
            next_ping: cfg.ping_every.map(|p| now + p),
            outstanding: false,
            dead: false,
        }
    }

    fn advance(&mut self, now: Instant) -> Instant {
        self.now = self.now.max(now);
        self.now
    }

    /// Any inbound frame arrived.
    pub fn on_frame(&mut self, now: Instant) {
        let now = self.advance(now);
        self.last_rx = now;
        self.outstanding = false;
        self.next_ping = self.cfg.ping_every.map(|p| now + p);
    }

    /// When [`handle_timeout`](Self::handle_timeout) wants to run; `None` once dead or when
    /// pings are off.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.dead {
            return None;
        }
        let dead_at = self.outstanding.then(|| self.last_rx + self.cfg.dead_after);
        match (self.next_ping, dead_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Fires what is due at `now`: `Dead` before `Ping` when both are.
    pub fn handle_timeout(&mut self, now: Instant) -> Option<KeepaliveAction> {
        if self.dead {
            return None;
        }
        let now = self.advance(now);
        let silent_for = now.saturating_duration_since(self.last_rx);
        if self.outstanding && silent_for >= self.cfg.dead_after {
            self.dead = true;
            return Some(KeepaliveAction::Dead { silent_for });
        }
        match (self.next_ping, self.cfg.ping_every) {
            (Some(at), Some(every)) if at <= now => {
                self.outstanding = true;
                self.next_ping = Some(now + every);
                Some(KeepaliveAction::Ping)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    /// Runs the keepalive to `until`, with inbound frames at `rx` (seconds from start); returns
    /// the ping times and the death time.
    fn run(cfg: KeepaliveConfig, rx: &[u64], until: u64) -> (Vec<u64>, Option<u64>) {
        let t0 = Instant::now();
        let mut k = Keepalive::new(cfg, t0);
        let mut pings = Vec::new();
        let mut rx = rx.iter().copied().peekable();
        loop {
            let next_rx = rx.peek().map(|&r| t0 + s(r));
            let next = match (k.poll_timeout(), next_rx) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => match a.or(b) {
                    Some(t) => t,
                    None => return (pings, None),
                },
            };
            if next > t0 + s(until) {
                return (pings, None);
            }
            if Some(next) == next_rx {
                rx.next();
                k.on_frame(next);
                continue;
            }
            match k.handle_timeout(next) {
                Some(KeepaliveAction::Ping) => pings.push((next - t0).as_secs()),
                Some(KeepaliveAction::Dead { .. }) => {
                    return (pings, Some((next - t0).as_secs()));
                }
                None => {}
            }
        }
    }

    #[test]
    fn pongs_thirty_seconds_late_keep_an_idle_session_alive() {
        // Pings at 10, 20, 30 … each answered 30 s later; nothing else arrives.
        let cfg = KeepaliveConfig::default();
        let pongs: Vec<u64> = (1..40).map(|i| i * 10 + 30).collect();
        let (pings, dead) = run(cfg, &pongs, 400);
        assert_eq!(dead, None);
        assert_eq!(&pings[..3], &[10, 20, 30]);
    }

    #[test]
    fn a_silent_socket_is_dead_after_the_configured_time() {
        let cfg = KeepaliveConfig::default();
        let (pings, dead) = run(cfg, &[5], 400);
        assert_eq!(dead, Some(50), "last frame at 5 s + 45 s");
        assert_eq!(pings, [15, 25, 35, 45]);
    }

    #[test]
    fn traffic_postpones_pings_and_pings_off_never_declare_death() {
        let cfg = KeepaliveConfig::default();
        let rx: Vec<u64> = (1..100).map(|i| i * 5).collect();
        let (pings, dead) = run(cfg, &rx, 300);
        assert!(pings.is_empty() && dead.is_none());
        let off = KeepaliveConfig {
            ping_every: None,
            ..cfg
        };
        assert_eq!(run(off, &[], 1000), (vec![], None));
    }
}
