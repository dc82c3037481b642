//! The registry of live calls: a capacity limit (calls beyond it are refused, not queued), a count
//! for health and drain, one hang-up signal every call listens to when a drain runs out, and a
//! feed of finished calls with their figures (for tests and operator tools).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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

/// Finished calls kept for a subscriber that falls behind.
const FINISHED_BACKLOG: usize = 1024;

/// Shared between the server and every call task.
#[derive(Clone)]
pub struct CallRegistry {
    inner: Arc<Inner>,
}

struct Inner {
    max: usize,
    active: AtomicUsize,
    draining: AtomicBool,
    idle: Notify,
    hangup: watch::Sender<bool>,
    finished: broadcast::Sender<FinishedCall>,
}

/// Held by a call for its whole life; dropping it frees the slot.
pub struct CallSlot {
    inner: Arc<Inner>,
    /// Turns true when the server wants every call to end now.
    pub hangup: watch::Receiver<bool>,
}

impl Drop for CallSlot {
    fn drop(&mut self) {
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
                draining: AtomicBool::new(false),
                idle: Notify::new(),
                hangup,
                finished: broadcast::channel(FINISHED_BACKLOG).0,
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
        })
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

    pub fn active(&self) -> usize {
        self.inner.active.load(Ordering::Acquire)
    }

    pub fn draining(&self) -> bool {
        self.inner.draining.load(Ordering::Acquire)
    }

    pub fn start_draining(&self) {
        self.inner.draining.store(true, Ordering::Release);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn capacity_drain_and_hangup() {
        let reg = CallRegistry::new(2);
        let a = reg.try_admit().unwrap();
        let mut b = reg.try_admit().unwrap();
        assert!(reg.try_admit().is_none(), "over capacity");
        drop(a);
        assert_eq!(reg.active(), 1);
        reg.start_draining();
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
}
