//! Every write goes through one bounded queue to a writer task. Producers (the call loop, the
//! call's recorder) use [`StoreWriter::write`], a `try_send`: when the queue is full the write is
//! dropped, counted and logged, and the producer carries on at once. The writer task drains the
//! queue in batches, each batch in one transaction; a batch that fails is retried write by
//! write, so one bad write costs only itself.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use super::sql::{Ctx, apply, begin, lock_caller};
pub use super::write::Write;
use super::{Store, StoreError};

/// Most writes applied in one transaction.
const BATCH: usize = 256;

/// Attempts at a write on its own after its batch failed, while it loses conflicts with other
/// transactions.
const RETRIES: u32 = 3;

/// The back-off before the second attempt (doubled before each later one).
const RETRY_BACKOFF: Duration = Duration::from_millis(10);

/// How long the writer holds a batch while the database cannot be reached (a restart, a
/// failover), trying again with a growing pause, before it gives the batch up write by write.
/// Meanwhile new writes wait in the queue (beyond it they are dropped and counted, as always).
pub const OUTAGE_HOLD: Duration = Duration::from_secs(30);

/// The longest pause between two tries during an outage.
const OUTAGE_STEP_MAX: Duration = Duration::from_millis(500);

/// Counters of one writer (all since it started).
#[derive(Debug, Default)]
pub struct WriterStats {
    /// Writes accepted into the queue.
    pub queued: AtomicU64,
    /// Writes applied.
    pub written: AtomicU64,
    /// Writes dropped because the queue was full (or the writer had stopped).
    pub dropped: AtomicU64,
    /// Writes the database refused (after a retry).
    pub failed: AtomicU64,
    /// Transactions committed.
    pub batches: AtomicU64,
}

/// A snapshot of [`WriterStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct WriterCounts {
    pub queued: u64,
    pub written: u64,
    pub dropped: u64,
    pub failed: u64,
    pub batches: u64,
}

/// The producers' handle (cheap to clone).
#[derive(Clone, Debug)]
pub struct StoreWriter {
    tx: mpsc::Sender<Write>,
    stats: Arc<WriterStats>,
}

impl StoreWriter {
    /// Spawns the writer task over `store` with a queue of `capacity` writes. The task ends when
    /// every handle is dropped and the queue is drained.
    pub fn spawn(store: Store, capacity: usize) -> (StoreWriter, tokio::task::JoinHandle<()>) {
        Self::spawn_as(store, capacity, None)
    }

    /// As [`StoreWriter::spawn`], for the instance named `instance`: the calls it starts are
    /// recorded as held by it (`calls.instance_id`), so that when it stops answering the other
    /// instances can end them.
    pub fn spawn_as(
        store: Store,
        capacity: usize,
        instance: Option<String>,
    ) -> (StoreWriter, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let stats = Arc::new(WriterStats::default());
        let task = tokio::spawn(run(store, rx, stats.clone(), instance));
        (StoreWriter { tx, stats }, task)
    }

    /// Queues a write without waiting; false when it was dropped (queue full or writer gone).
    pub fn write(&self, w: Write) -> bool {
        match self.tx.try_send(w) {
            Ok(()) => {
                self.stats.queued.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(e) => {
                let n = self.stats.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                // 1, 10, 100, ...: every loss is counted, the log is not flooded.
                if n.is_power_of_two() || n.is_multiple_of(1000) {
                    let why = match e {
                        mpsc::error::TrySendError::Full(_) => "the store queue is full",
                        mpsc::error::TrySendError::Closed(_) => "the store writer has stopped",
                    };
                    tracing::warn!(dropped_total = n, "store write dropped: {why}");
                }
                false
            }
        }
    }

    /// Waits (off the audio path only) until every write queued so far is applied; false if the
    /// writer is gone or did not answer within `limit`.
    pub async fn flush(&self, limit: Duration) -> bool {
        let (tx, rx) = oneshot::channel();
        let fut = async { self.tx.send(Write::Barrier(tx)).await.is_ok() && rx.await.is_ok() };
        tokio::time::timeout(limit, fut).await.unwrap_or(false)
    }

    pub fn counts(&self) -> WriterCounts {
        let s = &self.stats;
        WriterCounts {
            queued: s.queued.load(Ordering::Relaxed),
            written: s.written.load(Ordering::Relaxed),
            dropped: s.dropped.load(Ordering::Relaxed),
            failed: s.failed.load(Ordering::Relaxed),
            batches: s.batches.load(Ordering::Relaxed),
        }
    }

    /// Writes waiting in the queue.
    pub fn backlog(&self) -> usize {
        self.tx.max_capacity() - self.tx.capacity()
    }
}

async fn run(
    store: Store,
    mut rx: mpsc::Receiver<Write>,
    stats: Arc<WriterStats>,
    instance: Option<String>,
) {
    let ctx = Ctx {
        kind: store.kind(),
        instance: instance.as_deref(),
    };
    let mut batch = Vec::with_capacity(BATCH);
    let mut barriers = Vec::new();
    while rx.recv_many(&mut batch, BATCH).await > 0 {
        let writes: Vec<Write> = batch
            .drain(..)
            .filter_map(|w| match w {
                Write::Barrier(b) => {
                    barriers.push(b);
                    None
                }
                w => Some(w),
            })
            .collect();
        if !writes.is_empty() {
            apply_batch(&store, ctx, writes, &stats).await;
        }
        for b in barriers.drain(..) {
            let _ = b.send(());
        }
    }
    let c = stats.dropped.load(Ordering::Relaxed);
    if c > 0 {
        tracing::warn!(
            dropped_total = c,
            "store writer stopped; writes were dropped"
        );
    }
}

async fn apply_batch(store: &Store, ctx: Ctx<'_>, writes: Vec<Write>, stats: &WriterStats) {
    let n = writes.len() as u64;
    // While the database cannot be reached the batch is held and tried again; once it answers,
    // it goes in whole. Only an outage longer than OUTAGE_HOLD costs writes.
    let mut held = Duration::ZERO;
    let mut step = Duration::from_millis(20);
    loop {
        match apply_together(store, ctx, &writes).await {
            Ok(()) => {
                if !held.is_zero() {
                    tracing::info!(
                        held_ms = held.as_millis() as u64,
                        writes = n,
                        "store answers again; held writes applied"
                    );
                }
                stats.written.fetch_add(n, Ordering::Relaxed);
                stats.batches.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Err(StoreError::Unavailable(e)) if held < OUTAGE_HOLD => {
                if held.is_zero() {
                    tracing::warn!(error = %e, writes = n, "store unavailable; holding writes until it answers");
                }
                tokio::time::sleep(step).await;
                held += step;
                step = (step * 2).min(OUTAGE_STEP_MAX);
            }
            Err(_) => break,
        }
    }
    apply_one_by_one(store, ctx, &writes, stats).await;
}

/// The whole batch in one transaction.
async fn apply_together(store: &Store, ctx: Ctx<'_>, writes: &[Write]) -> Result<(), StoreError> {
    {
        let mut tx = begin(store).await?;
        // Every caller whose contexts this batch activates, locked up front in one order, so
        // two instances' batches cannot deadlock on each other's callers.
        let mut callers: Vec<&str> = writes.iter().filter_map(Write::activates_for).collect();
        callers.sort_unstable();
        callers.dedup();
        for caller in callers {
            lock_caller(&mut tx, store.kind(), caller).await?;
        }
        for w in writes {
            apply(ctx, &mut tx, w).await?;
        }
        tx.commit().await?;
        Ok(())
    }
}

async fn apply_one_by_one(store: &Store, ctx: Ctx<'_>, writes: &[Write], stats: &WriterStats) {
    // One write spoilt the batch (or the database hiccupped): each on its own. A write that
    // lost a conflict with another transaction is tried again after a pause; one the database
    // refuses for what it is fails once and is counted; if the database cannot be reached, the
    // rest of the batch is counted as failed at once rather than waiting out the pool's timeout
    // for every write.
    let mut unavailable = false;
    for w in writes {
        let mut result = Err(StoreError::Unavailable("not attempted".into()));
        if !unavailable {
            for attempt in 0..RETRIES {
                if attempt > 0 {
                    tokio::time::sleep(RETRY_BACKOFF * (1 << (attempt - 1))).await;
                }
                result = async {
                    let mut tx = begin(store).await?;
                    apply(ctx, &mut tx, w).await?;
                    tx.commit().await?;
                    Ok::<_, StoreError>(())
                }
                .await;
                if !matches!(result, Err(StoreError::Conflict(_))) {
                    break;
                }
            }
            unavailable = matches!(result, Err(StoreError::Unavailable(_)));
        }
        match result {
            Ok(()) => {
                stats.written.fetch_add(1, Ordering::Relaxed);
                stats.batches.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                stats.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, write = w.kind(), "store write failed; dropped");
            }
        }
    }
}

impl Write {
    /// The caller whose active context this write changes, if it activates or resumes one.
    fn activates_for(&self) -> Option<&str> {
        match self {
            Write::ContextActivated { caller, .. } | Write::ContextResumed { caller, .. } => {
                Some(caller)
            }
            _ => None,
        }
    }

    /// A short name for logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Write::CallStarted { .. } => "call_started",
            Write::Line { .. } => "line",
            Write::ToolCall { .. } => "tool_call",
            Write::ToolFailed { .. } => "tool_failed",
            Write::CallEnded { .. } => "call_ended",
            Write::Recording { .. } => "recording",
            Write::ContextActivated { .. } => "context_activated",
            Write::ContextResumed { .. } => "context_resumed",
            Write::ContextStatus { .. } => "context_status",
            Write::Barrier(_) => "barrier",
        }
    }
}
