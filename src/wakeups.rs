//! Counts wake-ups of the tasks on a call's per-frame path: each time the call's task resumes
//! after waiting (it drives a bridge leg's socket and the model session's). Legs with a task of
//! their own (SIP, WebRTC, AudioSocket, `/stream`) are not counted. It is the
//! figure `baton bench load` divides by calls and 20 ms frames (`baton_task_wakeups_total` on
//! `/metrics`). One relaxed atomic add per wake-up; nothing else on the hot path.

use std::sync::atomic::{AtomicU64, Ordering};

static WAKEUPS: AtomicU64 = AtomicU64::new(0);

/// A task on the per-frame path woke up.
#[inline]
pub fn note() {
    WAKEUPS.fetch_add(1, Ordering::Relaxed);
}

/// Wake-ups since the process started.
pub fn total() -> u64 {
    WAKEUPS.load(Ordering::Relaxed)
}

/// Awaits `fut`, counting a wake-up each time it is polled again after having had to wait: the
/// wake-ups of the task that awaits it, and none for a pass that found its input ready.
pub async fn counted<F: std::future::Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    let mut waited = false;
    std::future::poll_fn(|cx| {
        if std::mem::take(&mut waited) {
            note();
        }
        let r = fut.as_mut().poll(cx);
        waited = r.is_pending();
        r
    })
    .await
}
