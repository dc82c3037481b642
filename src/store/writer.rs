//! Every write goes through one bounded queue to a writer task. Producers (the call loop, the
//! call's recorder) use [`StoreWriter::write`], a `try_send`: when the queue is full the write is
//! dropped, counted and logged, and the producer carries on at once. The writer task drains the
//! queue in batches, each batch in one transaction; a batch that fails is retried write by
//! write, so one bad write costs only itself.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use sqlx::{Any, Transaction};
use tokio::sync::{mpsc, oneshot};

use super::{ContextStatus, HandoffRow, HistoryRow, Kind, Store, StoreError};

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

/// One write. Times are ms since the Unix epoch unless named `_ms` (then: since the call began).
#[derive(Debug)]
pub enum Write {
    CallStarted {
        id: String,
        caller: Option<String>,
        leg: String,
        agent_set: Option<String>,
        at: i64,
    },
    Line {
        call_id: String,
        seq: i64,
        role: String,
        agent: String,
        text: String,
        at_ms: i64,
    },
    ToolCall {
        call_id: String,
        seq: i64,
        agent: String,
        tool: String,
        call_ref: String,
        turn: i64,
        allowed: bool,
        args: Option<String>,
        error: Option<String>,
        at_ms: i64,
    },
    /// The call ended: its figures, agent history and handoffs.
    CallEnded {
        id: String,
        at: i64,
        end_reason: String,
        figures: String,
        history: Vec<HistoryRow>,
        handoffs: Vec<HandoffRow>,
    },
    Recording {
        call_id: String,
        path: String,
    },
    /// A new active context; any other active context of the caller is paused first.
    ContextActivated {
        id: String,
        caller: String,
        agent: String,
        summary: String,
        call_id: Option<String>,
        position: Option<i64>,
        data: String,
        at: i64,
    },
    /// A paused context becomes active again (others of the caller are paused first).
    ContextResumed {
        id: String,
        caller: String,
        call_id: Option<String>,
        position: Option<i64>,
        at: i64,
    },
    /// A context's status (and, if given, working state) changes.
    ContextStatus {
        id: String,
        status: ContextStatus,
        data: Option<String>,
        at: i64,
    },
    /// Answered once every write queued before it is applied (used by tests and at shutdown).
    Barrier(oneshot::Sender<()>),
}

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

/// What every write of one writer shares.
#[derive(Clone, Copy)]
struct Ctx<'a> {
    kind: Kind,
    /// The instance the writer writes for, if any.
    instance: Option<&'a str>,
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

/// A transaction; on PostgreSQL at READ COMMITTED whatever the server's default, which the
/// per-caller lock relies on (a statement after the lock must see what the lock's previous
/// holder committed).
pub(super) async fn begin(store: &Store) -> Result<Transaction<'static, Any>, StoreError> {
    let mut tx = store.pool().begin().await?;
    if store.kind() == Kind::Postgres {
        sqlx::query("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
            .execute(&mut *tx)
            .await?;
    }
    Ok(tx)
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
            Write::CallEnded { .. } => "call_ended",
            Write::Recording { .. } => "recording",
            Write::ContextActivated { .. } => "context_activated",
            Write::ContextResumed { .. } => "context_resumed",
            Write::ContextStatus { .. } => "context_status",
            Write::Barrier(_) => "barrier",
        }
    }
}

/// On PostgreSQL, the per-caller advisory lock (held to the end of the transaction; taking it
/// again in the same transaction is free). Nothing on SQLite, which serialises writers.
async fn lock_caller(
    tx: &mut Transaction<'static, Any>,
    kind: Kind,
    caller: &str,
) -> Result<(), StoreError> {
    if kind == Kind::Postgres {
        sqlx::query(
            "SELECT 1 FROM (SELECT pg_advisory_xact_lock(hashtextextended($1, 0))) AS locked",
        )
        .bind(caller)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

/// Pauses the caller's active context, if any other than `except`.
///
/// On PostgreSQL the transaction first takes a per-caller advisory lock (released at commit), so
/// two instances activating contexts for one caller take turns: the second sees the first's row
/// and pauses it, instead of failing on the one-active-context index. SQLite serialises writers
/// by itself.
pub(super) async fn pause_active(
    tx: &mut Transaction<'static, Any>,
    kind: Kind,
    caller: &str,
    except: &str,
    at: i64,
) -> Result<(), StoreError> {
    lock_caller(tx, kind, caller).await?;
    sqlx::query(
        "UPDATE agent_contexts SET status = 'paused', updated_at = $2 \
         WHERE caller = $1 AND status = 'active' AND id <> $3",
    )
    .bind(caller)
    .bind(at)
    .bind(except)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// The SQL of one write.
async fn apply(
    ctx: Ctx<'_>,
    tx: &mut Transaction<'static, Any>,
    w: &Write,
) -> Result<(), StoreError> {
    let kind = ctx.kind;
    match w {
        Write::CallStarted {
            id,
            caller,
            leg,
            agent_set,
            at,
        } => {
            sqlx::query(
                "INSERT INTO calls (id, caller, leg, agent_set, started_at, instance_id) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING",
            )
            .bind(id)
            .bind(caller.as_deref())
            .bind(leg)
            .bind(agent_set.as_deref())
            .bind(at)
            .bind(ctx.instance)
            .execute(&mut **tx)
            .await?;
        }
        Write::Line {
            call_id,
            seq,
            role,
            agent,
            text,
            at_ms,
        } => {
            sqlx::query(
                "INSERT INTO transcript_lines (call_id, seq, role, agent, text, at_ms) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (call_id, seq) DO NOTHING",
            )
            .bind(call_id)
            .bind(seq)
            .bind(role)
            .bind(agent)
            .bind(text)
            .bind(at_ms)
            .execute(&mut **tx)
            .await?;
        }
        Write::ToolCall {
            call_id,
            seq,
            agent,
            tool,
            call_ref,
            turn,
            allowed,
            args,
            error,
            at_ms,
        } => {
            sqlx::query(
                "INSERT INTO tool_calls (call_id, seq, agent, tool, call_ref, turn, allowed, args, error, at_ms) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT (call_id, seq) DO NOTHING",
            )
            .bind(call_id)
            .bind(seq)
            .bind(agent)
            .bind(tool)
            .bind(call_ref)
            .bind(turn)
            .bind(i64::from(*allowed))
            .bind(args.as_deref())
            .bind(error.as_deref())
            .bind(at_ms)
            .execute(&mut **tx)
            .await?;
        }
        Write::CallEnded {
            id,
            at,
            end_reason,
            figures,
            history,
            handoffs,
        } => {
            sqlx::query(
                "UPDATE calls SET ended_at = $2, end_reason = $3, figures = $4 WHERE id = $1",
            )
            .bind(id)
            .bind(at)
            .bind(end_reason)
            .bind(figures)
            .execute(&mut **tx)
            .await?;
            for h in history {
                sqlx::query(
                    "INSERT INTO agent_history (call_id, seq, agent, activated_at_ms, deactivated_at_ms, \
                     message_count, activation_summary) VALUES ($1, $2, $3, $4, $5, $6, $7) \
                     ON CONFLICT (call_id, seq) DO NOTHING",
                )
                .bind(id)
                .bind(h.seq)
                .bind(&h.agent)
                .bind(h.activated_at_ms)
                .bind(h.deactivated_at_ms)
                .bind(h.message_count)
                .bind(&h.activation_summary)
                .execute(&mut **tx)
                .await?;
            }
            for h in handoffs {
                sqlx::query(
                    "INSERT INTO handoffs (call_id, seq, from_agent, to_agent, strategy, trigger_kind, \
                     gap_ms, announcement_queued_ms, trigger_to_wire_ms, heard_at_ms, at_ms) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
                     ON CONFLICT (call_id, seq) DO NOTHING",
                )
                .bind(id)
                .bind(h.seq)
                .bind(&h.from)
                .bind(&h.to)
                .bind(&h.strategy)
                .bind(&h.trigger)
                .bind(h.gap_ms)
                .bind(h.announcement_queued_ms)
                .bind(h.trigger_to_wire_ms)
                .bind(h.heard_at_ms)
                .bind(h.at_ms)
                .execute(&mut **tx)
                .await?;
            }
        }
        Write::Recording { call_id, path } => {
            sqlx::query("UPDATE calls SET recording = $2 WHERE id = $1")
                .bind(call_id)
                .bind(path)
                .execute(&mut **tx)
                .await?;
        }
        Write::ContextActivated {
            id,
            caller,
            agent,
            summary,
            call_id,
            position,
            data,
            at,
        } => {
            pause_active(tx, kind, caller, id, *at).await?;
            sqlx::query(
                "INSERT INTO agent_contexts (id, caller, agent, activation_summary, activation_call_id, \
                 activation_position, context_data, status, created_at, updated_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, 'active', $8, $8) \
                 ON CONFLICT (id) DO UPDATE SET status = 'active', updated_at = $8",
            )
            .bind(id)
            .bind(caller)
            .bind(agent)
            .bind(summary)
            .bind(call_id.as_deref())
            .bind(*position)
            .bind(data)
            .bind(at)
            .execute(&mut **tx)
            .await?;
        }
        Write::ContextResumed {
            id,
            caller,
            call_id,
            position,
            at,
        } => {
            pause_active(tx, kind, caller, id, *at).await?;
            sqlx::query(
                "UPDATE agent_contexts SET status = 'active', updated_at = $2, completed_at = NULL, \
                 activation_call_id = COALESCE($3, activation_call_id), \
                 activation_position = COALESCE($4, activation_position) WHERE id = $1",
            )
            .bind(id)
            .bind(at)
            .bind(call_id.as_deref())
            .bind(*position)
            .execute(&mut **tx)
            .await?;
        }
        Write::ContextStatus {
            id,
            status,
            data,
            at,
        } => {
            if *status == ContextStatus::Active {
                return Err(StoreError::Invalid(
                    "a context becomes active through ContextResumed (which pauses the others)"
                        .into(),
                ));
            }
            let completed = (*status == ContextStatus::Completed).then_some(*at);
            sqlx::query(
                "UPDATE agent_contexts SET status = $2, updated_at = $3, completed_at = $4, \
                 context_data = COALESCE($5, context_data) WHERE id = $1",
            )
            .bind(id)
            .bind(status.as_str())
            .bind(at)
            .bind(completed)
            .bind(data.as_deref())
            .execute(&mut **tx)
            .await?;
        }
        Write::Barrier(_) => {}
    }
    Ok(())
}
