//! The vocabulary of the reconnect machine: its policy, why a session is replaced, what the
//! shell must do and why an open failed.

use std::time::Duration;

/// How a call reconnects.
#[derive(Clone, Debug, PartialEq)]
pub struct ReconnectPolicy {
    /// Resume attempts after an unexpected drop before a fresh session is tried.
    pub tries: u32,
    /// Wait before attempt 1, 2, 3 … (the last value repeats).
    pub backoff: Vec<Duration>,
    /// Fresh (re-seeded) sessions tried after resumption is given up.
    pub fresh_tries: u32,
    /// Switch this long before `goAway`'s `timeLeft` runs out even without a quiet point (at most
    /// half of `timeLeft`).
    pub go_away_margin: Duration,
    /// Frames handed to the socket within this of a handle's arrival are not taken as covered.
    pub replay_margin: Duration,
    /// Caller audio kept for replay.
    pub max_replay: Duration,
    /// How long to wait for the old socket to close before opening the next one anyway.
    pub close_wait: Duration,
    /// Keep a socket dialed ahead (transport, TLS, upgrade; no setup) so that a reconnect only
    /// sends its setup.
    pub standby: bool,
}

impl Default for ReconnectPolicy {
    fn default() -> Self {
        ReconnectPolicy {
            tries: 3,
            backoff: vec![
                Duration::ZERO,
                Duration::from_millis(100),
                Duration::from_millis(400),
            ],
            fresh_tries: 2,
            go_away_margin: Duration::from_secs(5),
            replay_margin: Duration::from_millis(500),
            max_replay: Duration::from_secs(60),
            close_wait: Duration::from_secs(1),
            standby: true,
        }
    }
}

impl ReconnectPolicy {
    pub(super) fn backoff(&self, attempt: u32) -> Duration {
        let i = (attempt as usize).min(self.backoff.len().saturating_sub(1));
        self.backoff.get(i).copied().unwrap_or_default()
    }
}

/// Why the session is being replaced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cause {
    /// The service announced the connection's end.
    GoAway,
    /// The socket closed: with this close code, or `None` without a close frame (1006).
    Closed(Option<u16>),
    /// Nothing arrived for the keepalive's dead time.
    Dead,
}

impl Cause {
    /// The `cause` of a [`ReconnectRecord`](crate::call::metrics::ReconnectRecord).
    pub fn label(&self) -> String {
        match self {
            Cause::GoAway => "go_away".into(),
            Cause::Closed(code) => format!("closed:{}", code.unwrap_or(1006)),
            Cause::Dead => "dead_socket".into(),
        }
    }
}

/// Something the shell must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Stop using the current session and close its socket; report
    /// [`Reconnector::on_old_closed`](crate::call::reconnect::Reconnector::on_old_closed) when its
    /// reader has ended.
    CloseCurrent,
    /// Open a session: resuming `handle`, or (`None`) a fresh one re-seeded from the transcript.
    Open { handle: Option<String> },
    /// No session could be opened: the call cannot go on.
    GiveUp { reason: String },
}

/// Why an open failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenFailure {
    /// The service refused the handle (unknown, expired, invalid): never use it again.
    HandleRefused,
    /// Anything else (connect error, setup timeout, "previous socket still open"): retry.
    Other,
}
