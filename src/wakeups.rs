//! Counts wake-ups of the tasks on a call's per-frame path: each pass of the leg driver and
//! writer, the call loop and the model session's shell after an await. It is the
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
