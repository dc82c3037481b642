//! The registry of live calls: a capacity limit (calls beyond it are refused, not queued), a count
//! for health and drain, one hang-up signal every call listens to when a drain runs out, and the
//! calls that are listed (`GET /calls`) with their event feeds (`WS /calls/{id}/events`), and a
//! feed of finished calls with their figures (for tests and operator tools).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, broadcast, watch};

use crate::call::metrics::CallReport;

/// A call that ended: who it was and its report, or why it failed.
#[derive(Clone, Debug)]
pub struct FinishedCall {
    /// The Twilio stream, empty if the stream never started.
    pub stream_sid: String,
    pub outcome: Result<Arc<CallReport>, String>,
}

/// Why an instance takes no new call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unready {
    /// A drain has started: calls in progress run on, new ones go elsewhere.
    Draining,
    /// Every slot (`limits.max_calls`) is taken.
    Full,
}

impl Unready {
    pub fn as_str(self) -> &'static str {
        match self {
            Unready::Draining => "draining",
            Unready::Full => "full",
        }
    }
}

/// Finished calls kept for a subscriber that falls behind.
const FINISHED_BACKLOG: usize = 1024;

pub use super::live::LiveCall;

/// Shared between the server and every call task.
#[derive(Clone)]
pub struct CallRegistry {
    inner: Arc<Inner>,
}

struct Inner {
    max: usize,
    active: AtomicUsize,
    /// Admitted calls that have ended.
    ended: AtomicU64,
    draining: AtomicBool,
    /// Turns true once a drain is asked for (SIGTERM, `POST /admin/drain`).
    drain: watch::Sender<bool>,
    idle: Notify,
    hangup: watch::Sender<bool>,
    finished: broadcast::Sender<FinishedCall>,
    /// Listed calls by id, and WHIP session secrets → call id.
    listed: Mutex<Listed>,
}

#[derive(Default)]
struct Listed {
    calls: HashMap<String, Arc<LiveCall>>,
    sessions: HashMap<String, String>,
}

/// Held by a call for its whole life; dropping it frees the slot (and unlists the call).
pub struct CallSlot {
    inner: Arc<Inner>,
    /// Turns true when the server wants every call to end now.
    pub hangup: watch::Receiver<bool>,
    live: Option<Arc<LiveCall>>,
}

impl CallSlot {
    /// Lists the call under a fresh random id, reachable by `session` (a WHIP session secret)
    /// too when given. Returns the call's feed; calling it again returns the same one.
    pub fn go_live(
        &mut self,
        leg: &'static str,
        session: Option<String>,
    ) -> Result<Arc<LiveCall>, getrandom::Error> {
        if let Some(live) = &self.live {
            return Ok(live.clone());
        }
        let mut listed = lock(&self.inner.listed);
        let live = loop {
            let id = random_hex(8)?;
            if !listed.calls.contains_key(&id) {
                break Arc::new(LiveCall::new(id, leg, session));
            }
        };
        listed.calls.insert(live.id.clone(), live.clone());
        if let Some(s) = &live.session {
            listed.sessions.insert(s.clone(), live.id.clone());
        }
        self.live = Some(live.clone());
        Ok(live)
    }
}

impl Drop for CallSlot {
    fn drop(&mut self) {
        if let Some(live) = self.live.take() {
            let mut listed = lock(&self.inner.listed);
            listed.calls.remove(&live.id);
            if let Some(s) = &live.session {
                listed.sessions.remove(s);
            }
            drop(listed);
            live.mark_ended();
        }
        self.inner.ended.fetch_add(1, Ordering::Relaxed);
        if self.inner.active.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.inner.idle.notify_waiters();
        }
    }
}

impl CallRegistry {
    pub fn new(max: usize) -> Self {
        let (hangup, _) = watch::channel(false);
        CallRegistry {
            inner: Arc::new(Inner {
                max,
                active: AtomicUsize::new(0),
                ended: AtomicU64::new(0),
                draining: AtomicBool::new(false),
                drain: watch::channel(false).0,
                idle: Notify::new(),
                hangup,
                finished: broadcast::channel(FINISHED_BACKLOG).0,
                listed: Mutex::new(Listed::default()),
            }),
        }
    }

    /// A slot for a new call, or `None` when full or draining.
    pub fn try_admit(&self) -> Option<CallSlot> {
        if self.draining() {
            return None;
        }
        let mut n = self.inner.active.load(Ordering::Acquire);
        loop {
            if n >= self.inner.max {
                return None;
            }
            match self
                .inner
                .active
                .compare_exchange(n, n + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(actual) => n = actual,
            }
        }
        Some(CallSlot {
            inner: self.inner.clone(),
            hangup: self.inner.hangup.subscribe(),
            live: None,
        })
    }

    /// Calls admitted and since ended (refused calls never count).
    pub fn ended(&self) -> u64 {
        self.inner.ended.load(Ordering::Relaxed)
    }

    /// Every call that ends from now on.
    pub fn subscribe_finished(&self) -> broadcast::Receiver<FinishedCall> {
        self.inner.finished.subscribe()
    }

    /// Announces a call's end (no subscriber: nothing happens).
    pub fn report_finished(&self, call: FinishedCall) {
        let _ = self.inner.finished.send(call);
    }

    /// The configured limit of simultaneous calls.
    pub fn max(&self) -> usize {
        self.inner.max
    }

    /// Listed calls, oldest first.
    pub fn list(&self) -> Vec<Arc<LiveCall>> {
        let mut v: Vec<_> = lock(&self.inner.listed).calls.values().cloned().collect();
        v.sort_by_key(|c| c.started_unix_ms);
        v
    }

    /// A listed call by id.
    pub fn get(&self, id: &str) -> Option<Arc<LiveCall>> {
        lock(&self.inner.listed).calls.get(id).cloned()
    }

    /// A listed call by its WHIP session secret.
    pub fn by_session(&self, secret: &str) -> Option<Arc<LiveCall>> {
        let listed = lock(&self.inner.listed);
        let id = listed.sessions.get(secret)?;
        listed.calls.get(id).cloned()
    }

    pub fn active(&self) -> usize {
        self.inner.active.load(Ordering::Acquire)
    }

    pub fn draining(&self) -> bool {
        self.inner.draining.load(Ordering::Acquire)
    }

    /// Refuses new calls from now on; true if this call started the drain.
    pub fn start_draining(&self) -> bool {
        let first = !self.inner.draining.swap(true, Ordering::AcqRel);
        self.inner.drain.send_replace(true);
        first
    }

    /// Resolves once a drain has started.
    pub async fn drain_started(&self) {
        let mut rx = self.inner.drain.subscribe();
        let _ = rx.wait_for(|d| *d).await;
    }

    /// Why a new call would be refused now, if it would.
    pub fn unready(&self) -> Option<Unready> {
        if self.draining() {
            Some(Unready::Draining)
        } else if self.active() >= self.inner.max {
            Some(Unready::Full)
        } else {
            None
        }
    }

    /// Tells every call to hang up now.
    pub fn hang_up_all(&self) {
        self.inner.hangup.send_replace(true);
    }

    /// Waits until no call is active, at most `limit`; true if idle.
    pub async fn wait_idle(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let notified = self.inner.idle.notified();
            if self.active() == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.active() == 0;
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding the lock leaves plain maps behind; they are still consistent.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `bytes` random bytes from the OS, as lowercase hex (16 bytes: an unguessable 128-bit id).
pub fn random_hex(bytes: usize) -> Result<String, getrandom::Error> {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn capacity_drain_and_hangup() {
        let reg = CallRegistry::new(2);
        let a = reg.try_admit().unwrap();
        let mut b = reg.try_admit().unwrap();
        assert!(reg.try_admit().is_none(), "over capacity");
        assert_eq!(reg.unready(), Some(Unready::Full));
        drop(a);
        assert_eq!(reg.active(), 1);
        assert_eq!(reg.unready(), None);
        assert!(reg.start_draining());
        assert!(!reg.start_draining(), "a second drain changes nothing");
        reg.drain_started().await;
        assert_eq!(reg.unready(), Some(Unready::Draining));
        assert!(reg.try_admit().is_none(), "draining refuses new calls");
        assert!(!reg.wait_idle(Duration::from_secs(1)).await);
        reg.hang_up_all();
        b.hangup.changed().await.unwrap();
        assert!(*b.hangup.borrow());
        let waiter = tokio::spawn({
            let reg = reg.clone();
            async move { reg.wait_idle(Duration::from_secs(10)).await }
        });
        drop(b);
        assert!(waiter.await.unwrap());
    }

    #[tokio::test]
    async fn listed_calls_come_and_go_with_their_slots() {
        let reg = CallRegistry::new(4);
        let mut a = reg.try_admit().unwrap();
        let live = a.go_live("webrtc", Some("s3cret".into())).unwrap();
        assert_eq!(live.id.len(), 16);
        assert!(Arc::ptr_eq(&live, &a.go_live("webrtc", None).unwrap()));
        let _b = reg.try_admit().unwrap();
        assert_eq!(reg.list().len(), 1, "only calls that went live are listed");
        assert!(reg.get(&live.id).is_some());
        assert!(Arc::ptr_eq(&reg.by_session("s3cret").unwrap(), &live));
        assert!(reg.by_session("guess").is_none());
        drop(a);
        assert!(reg.list().is_empty());
        assert!(reg.by_session("s3cret").is_none());
        assert!(live.ended());
        assert_ne!(random_hex(16).unwrap(), random_hex(16).unwrap());
    }
}
