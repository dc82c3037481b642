//! The SQL of every write and the transactions it runs in: one writer's context (which database,
//! which instance), `begin` (READ COMMITTED on PostgreSQL), the per-caller lock that makes two
//! instances' context activations take turns, and [`apply`], one write's statements.

use sqlx::{Any, Transaction};

use super::write::Write;
use super::{ContextStatus, Kind, Store, StoreError};

/// What every write of one writer shares.
#[derive(Clone, Copy)]
pub(super) struct Ctx<'a> {
    pub(super) kind: Kind,
    /// The instance the writer writes for, if any.
    pub(super) instance: Option<&'a str>,
}

/// A transaction; on PostgreSQL at READ COMMITTED whatever the server's default, which the
/// per-caller lock relies on (a statement after the lock must see what the lock's previous
/// holder committed).
/// On SQLite the transaction takes the write lock at once (`BEGIN IMMEDIATE`): a deferred one that
/// reads and then writes fails with `SQLITE_BUSY` at once when another connection is writing,
/// whatever `busy_timeout` says; an immediate one waits its turn.
pub(super) async fn begin(store: &Store) -> Result<Transaction<'static, Any>, StoreError> {
    let mut tx = if store.kind() == Kind::Sqlite {
        store.pool().begin_with("BEGIN IMMEDIATE").await?
    } else {
        store.pool().begin().await?
    };
    if store.kind() == Kind::Postgres {
        sqlx::query("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
            .execute(&mut *tx)
            .await?;
    }
    Ok(tx)
}

/// On PostgreSQL, the per-caller advisory lock (held to the end of the transaction; taking it
/// again in the same transaction is free). Nothing on SQLite, which serialises writers.
pub(super) async fn lock_caller(
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
pub(super) async fn apply(
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
        Write::ToolFailed {
            call_id,
            call_ref,
            error,
        } => {
            // The call's latest call of that id (a model reuses ids only across sessions).
            sqlx::query(
                "UPDATE tool_calls SET error = $1 WHERE call_id = $2 AND seq = \
                 (SELECT MAX(seq) FROM tool_calls WHERE call_id = $2 AND call_ref = $3)",
            )
            .bind(error)
            .bind(call_id)
            .bind(call_ref)
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
