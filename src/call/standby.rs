//! The call's standby socket: one model socket dialed ahead (TCP, TLS and the WebSocket upgrade
//! done, nothing sent), so that a reconnect only sends its setup — with the newest handle, or a
//! fresh session's — and a drop costs the caller no connect. It lives in its own task, is
//! re-dialed as soon as it is used, and is re-dialed with back-off when the server closes it
//! while idle (never an error for the call), or when it has waited [`Redial::MAX_AGE`]: a
//! service may count a connection's lifetime from its connect (OpenAI's session limit, Gemini's
//! connection lifetime), so a socket dialed long ago would give the next session less time. It is
//! not a session: nothing counts it as one. (Not
//! to be confused with the warm standby *session* of a handoff, which is set up and primed.)

use std::pin::Pin;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::backend::ModelBackend;
use crate::model::handle::OpenError;
use crate::model::session::{Dialed, sleep_until_opt};

/// How long one dial may take before it counts as failed.
const DIAL_TIMEOUT: Duration = Duration::from_secs(15);

/// When to dial again, sans-IO: at once after the socket was used or after an idle socket that
/// lived long enough (the server's idle limit), with a doubling back-off after failed dials and
/// sockets closed soon after they were dialed (a server that refuses idle sockets is not
/// hammered).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Redial {
    failures: u32,
}

impl Redial {
    /// An idle socket that lived this long was closed for being idle, not refused.
    pub(super) const HEALTHY: Duration = Duration::from_secs(10);
    /// A standby socket older than this is replaced by a fresh one.
    pub(super) const MAX_AGE: Duration = Duration::from_secs(120);
    const FIRST: Duration = Duration::from_millis(250);
    const MAX: Duration = Duration::from_secs(30);

    /// The socket was handed to a session: dial the next one now.
    pub(super) fn used(&mut self) -> Duration {
        self.failures = 0;
        Duration::ZERO
    }

    /// A dial succeeded.
    pub(super) fn dialed(&mut self) {
        self.failures = 0;
    }

    /// A dial failed: wait before the next.
    pub(super) fn failed(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        Self::FIRST
            .saturating_mul(1 << (self.failures - 1).min(8))
            .min(Self::MAX)
    }

    /// When a socket dialed at `at` is to be replaced.
    pub(super) fn replace_at(at: Instant) -> Instant {
        at + Self::MAX_AGE
    }

    /// The idle socket ended after `lived`.
    pub(super) fn idle_closed(&mut self, lived: Duration) -> Duration {
        if lived >= Self::HEALTHY {
            self.used()
        } else {
            self.failed()
        }
    }
}

type Request = oneshot::Sender<Option<Dialed>>;

/// The handle the call keeps; dropping it closes the standby socket and ends its task.
pub(super) struct Standby {
    target: String,
    requests: mpsc::Sender<Request>,
}

/// What a session opener takes the standby socket with (from its own task).
#[derive(Clone)]
pub(super) struct Taker {
    target: String,
    requests: mpsc::Sender<Request>,
}

impl Standby {
    /// Starts dialing `backend`'s standby socket.
    pub(super) fn spawn(backend: ModelBackend) -> Self {
        let (tx, rx) = mpsc::channel(4);
        let target = backend.dial_target();
        tokio::spawn(run(backend, rx));
        Standby {
            target,
            requests: tx,
        }
    }

    pub(super) fn taker(&self) -> Taker {
        Taker {
            target: self.target.clone(),
            requests: self.requests.clone(),
        }
    }
}

impl Taker {
    /// The standby socket if one is ready for `backend`'s target (else `None` at once: the
    /// caller dials); a new one is dialed behind it.
    pub(super) async fn take(&self, backend: &ModelBackend) -> Option<Dialed> {
        if backend.dial_target() != self.target {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        self.requests.try_send(tx).ok()?;
        rx.await.ok().flatten()
    }
}

type Dialing = Pin<Box<dyn Future<Output = Result<Dialed, OpenError>> + Send>>;

fn dial(backend: &ModelBackend) -> Dialing {
    let backend = backend.clone();
    Box::pin(async move {
        match tokio::time::timeout(DIAL_TIMEOUT, backend.dial()).await {
            Ok(r) => r,
            Err(_) => Err(OpenError::SetupTimeout {
                awaited: "WebSocket upgrade",
                after: DIAL_TIMEOUT,
            }),
        }
    })
}

async fn run(backend: ModelBackend, mut requests: mpsc::Receiver<Request>) {
    let mut redial = Redial::default();
    let mut ready: Option<(Dialed, Instant)> = None;
    let mut dialing: Option<Dialing> = Some(dial(&backend));
    let mut next_dial: Option<Instant> = None;
    loop {
        let replace = ready.as_ref().map(|(_, at)| Redial::replace_at(*at));
        tokio::select! {
            req = requests.recv() => match req {
                None => break,
                Some(reply) => {
                    let taken = ready.take().map(|(d, _)| d);
                    if taken.is_some() {
                        next_dial = Some(Instant::now() + redial.used());
                    }
                    let _ = reply.send(taken);
                }
            },
            r = async {
                match dialing.as_mut() {
                    Some(f) => f.await,
                    None => std::future::pending().await,
                }
            } => {
                dialing = None;
                match r {
                    Ok(d) => {
                        redial.dialed();
                        ready = Some((d, Instant::now()));
                    }
                    Err(e) => {
                        let wait = redial.failed();
                        tracing::debug!(error = %e, ?wait, "standby model socket could not be dialed");
                        next_dial = Some(Instant::now() + wait);
                    }
                }
            }
            () = async {
                match ready.as_mut() {
                    Some((d, _)) => d.idle_until_closed().await,
                    None => std::future::pending().await,
                }
            } => {
                let lived = ready.take().map(|(_, at)| at.elapsed()).unwrap_or_default();
                let wait = redial.idle_closed(lived);
                tracing::debug!(?lived, ?wait, "standby model socket closed while idle");
                next_dial = Some(Instant::now() + wait);
            }
            () = sleep_until_opt(replace) => {
                if let Some((old, _)) = ready.take() {
                    tokio::spawn(old.close());
                }
                tracing::debug!("standby model socket replaced: it waited its longest");
                dialing = Some(dial(&backend));
            }
            () = sleep_until_opt(next_dial), if dialing.is_none() && ready.is_none() => {
                next_dial = None;
                dialing = Some(dial(&backend));
            }
        }
    }
    if let Some((d, _)) = ready {
        d.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redial_backs_off_after_failures_and_resets_when_used() {
        let mut r = Redial::default();
        assert_eq!(r.used(), Duration::ZERO);
        assert_eq!(r.failed(), Duration::from_millis(250));
        assert_eq!(r.failed(), Duration::from_millis(500));
        assert_eq!(r.failed(), Duration::from_secs(1));
        for _ in 0..20 {
            r.failed();
        }
        assert_eq!(r.failed(), Duration::from_secs(30));
        r.dialed();
        assert_eq!(r.failed(), Duration::from_millis(250));
        r.dialed();
        assert_eq!(r.used(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unused_socket_is_replaced_after_its_longest_wait() {
        use std::sync::Arc;
        let store = crate::mock::resume::Resumption::capturing();
        let opts = Arc::new(crate::mock::MockOptions {
            resumption: store.clone(),
            ..crate::mock::MockOptions::new(Arc::new(crate::mock::Scenario::builtin()))
        });
        let standby = Standby::spawn(ModelBackend::in_process(opts));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(store.sockets(), 1, "one socket dialed ahead");
        tokio::time::sleep(Redial::MAX_AGE - Duration::from_secs(2)).await;
        assert_eq!(store.sockets(), 1, "not replaced before its time");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(store.sockets(), 2, "replaced once it waited its longest");
        drop(standby);
    }

    #[test]
    fn an_idle_close_redials_at_once_only_after_a_healthy_life() {
        let mut r = Redial::default();
        // The server's idle limit: dial again at once, as often as it takes.
        assert_eq!(r.idle_closed(Duration::from_secs(60)), Duration::ZERO);
        assert_eq!(r.idle_closed(Redial::HEALTHY), Duration::ZERO);
        // Closed right away, again and again: backed off.
        assert_eq!(
            r.idle_closed(Duration::from_millis(5)),
            Duration::from_millis(250)
        );
        assert_eq!(
            r.idle_closed(Duration::from_millis(5)),
            Duration::from_millis(500)
        );
        assert_eq!(r.idle_closed(Duration::from_secs(11)), Duration::ZERO);
        assert_eq!(
            r.idle_closed(Duration::from_millis(5)),
            Duration::from_millis(250)
        );
    }
}
