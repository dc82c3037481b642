//! Reads (call start, the admin API) and the admin API's context updates. These are awaited by
//! their callers, never on the audio path: a call awaits [`Store::resumable_contexts`] only
//! before its audio starts, within a bound.

use serde_json::Value;
use sqlx::Row;
use sqlx::any::AnyRow;

use super::rows::json_of;
use super::sql::{begin, pause_active};
use super::{
    CallRow, ContextRow, ContextStatus, HandoffRow, HistoryRow, LineRow, Store, StoreError,
    ToolCallRow, now_ms,
};

const CONTEXT_COLUMNS: &str = "id, caller, agent, activation_summary, activation_call_id, \
    activation_position, context_data, status, created_at, updated_at, completed_at";

/// A change to a context asked for through the admin API.
#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextPatch {
    pub status: Option<ContextStatus>,
    pub context_data: Option<Value>,
    pub activation_summary: Option<String>,
}

fn context_row(r: &AnyRow) -> Result<ContextRow, StoreError> {
    let status: String = r.try_get("status")?;
    let data: String = r.try_get("context_data")?;
    Ok(ContextRow {
        id: r.try_get("id")?,
        caller: r.try_get("caller")?,
        agent: r.try_get("agent")?,
        activation_summary: r.try_get("activation_summary")?,
        activation_call_id: r.try_get("activation_call_id")?,
        activation_position: r.try_get("activation_position")?,
        context_data: json_of(&data),
        status: ContextStatus::parse(&status)
            .ok_or_else(|| StoreError::Invalid(format!("unknown context status {status:?}")))?,
        created_at: r.try_get("created_at")?,
        updated_at: r.try_get("updated_at")?,
        completed_at: r.try_get("completed_at")?,
    })
}

/// A query of whole call rows: the columns [`call_row`] reads, then `$rest`.
macro_rules! call_rows {
    ($rest:literal) => {
        concat!(
            "SELECT id, caller, leg, agent_set, started_at, ended_at, end_reason, figures, \
             recording FROM calls ",
            $rest
        )
    };
}

impl Store {
    /// Every context of a caller, newest first.
    pub async fn contexts(&self, caller: &str) -> Result<Vec<ContextRow>, StoreError> {
        let sql = format!(
            "SELECT {CONTEXT_COLUMNS} FROM agent_contexts WHERE caller = $1 \
             ORDER BY created_at DESC, id DESC"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(caller)
            .fetch_all(self.pool())
            .await?;
        rows.iter().map(context_row).collect()
    }

    /// The caller's contexts a new call may resume (active or paused), newest first.
    pub async fn resumable_contexts(&self, caller: &str) -> Result<Vec<ContextRow>, StoreError> {
        Ok(self
            .contexts(caller)
            .await?
            .into_iter()
            .filter(|c| c.status != ContextStatus::Completed)
            .collect())
    }

    pub async fn context(&self, id: &str) -> Result<ContextRow, StoreError> {
        let sql = format!("SELECT {CONTEXT_COLUMNS} FROM agent_contexts WHERE id = $1");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .fetch_optional(self.pool())
            .await?
            .ok_or_else(|| StoreError::NotFound {
                what: "context",
                id: id.to_owned(),
            })?;
        context_row(&row)
    }

    /// Applies an operator's change to one context; making it active pauses the caller's
    /// other active context in the same transaction.
    pub async fn update_context(
        &self,
        id: &str,
        patch: &ContextPatch,
    ) -> Result<ContextRow, StoreError> {
        let current = self.context(id).await?;
        let at = now_ms();
        let mut tx = begin(self).await?;
        if patch.status == Some(ContextStatus::Active) {
            pause_active(&mut tx, self.kind(), &current.caller, id, at).await?;
        }
        // The status and completion time come from the row as it is now, not as read above:
        // another instance may have paused or completed the context in between.
        let data = patch.context_data.as_ref().map(Value::to_string);
        sqlx::query(
            "UPDATE agent_contexts SET status = COALESCE($2, status), updated_at = $3, \
             completed_at = CASE WHEN COALESCE($2, status) = 'completed' \
             THEN COALESCE(completed_at, $3) ELSE NULL END, \
             context_data = COALESCE($4, context_data), \
             activation_summary = COALESCE($5, activation_summary) WHERE id = $1",
        )
        .bind(id)
        .bind(patch.status.map(ContextStatus::as_str))
        .bind(at)
        .bind(data)
        .bind(patch.activation_summary.as_deref())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        self.context(id).await
    }

    /// The latest calls, newest first.
    pub async fn calls(&self, limit: i64) -> Result<Vec<CallRow>, StoreError> {
        self.newest_calls(
            call_rows!("ORDER BY started_at DESC, id DESC LIMIT $1"),
            limit,
        )
        .await
    }

    /// The newest `limit` calls that have ended (a call still under way has no `ended_at`).
    pub async fn ended_calls(&self, limit: i64) -> Result<Vec<CallRow>, StoreError> {
        let sql =
            call_rows!("WHERE ended_at IS NOT NULL ORDER BY started_at DESC, id DESC LIMIT $1");
        self.newest_calls(sql, limit).await
    }

    async fn newest_calls(
        &self,
        sql: &'static str,
        limit: i64,
    ) -> Result<Vec<CallRow>, StoreError> {
        let rows = sqlx::query(sql).bind(limit).fetch_all(self.pool()).await?;
        rows.iter().map(call_row).collect()
    }

    pub async fn call(&self, id: &str) -> Result<CallRow, StoreError> {
        let row = sqlx::query(call_rows!("WHERE id = $1"))
            .bind(id)
            .fetch_optional(self.pool())
            .await?
            .ok_or_else(|| StoreError::NotFound {
                what: "call",
                id: id.to_owned(),
            })?;
        call_row(&row)
    }

    pub async fn transcript(&self, call_id: &str) -> Result<Vec<LineRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT seq, role, agent, text, at_ms FROM transcript_lines WHERE call_id = $1 ORDER BY seq",
        )
        .bind(call_id)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok(LineRow {
                    seq: r.try_get("seq")?,
                    role: r.try_get("role")?,
                    agent: r.try_get("agent")?,
                    text: r.try_get("text")?,
                    at_ms: r.try_get("at_ms")?,
                })
            })
            .collect()
    }

    pub async fn history(&self, call_id: &str) -> Result<Vec<HistoryRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT seq, agent, activated_at_ms, deactivated_at_ms, message_count, activation_summary \
             FROM agent_history WHERE call_id = $1 ORDER BY seq",
        )
        .bind(call_id)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok(HistoryRow {
                    seq: r.try_get("seq")?,
                    agent: r.try_get("agent")?,
                    activated_at_ms: r.try_get("activated_at_ms")?,
                    deactivated_at_ms: r.try_get("deactivated_at_ms")?,
                    message_count: r.try_get("message_count")?,
                    activation_summary: r.try_get("activation_summary")?,
                })
            })
            .collect()
    }

    pub async fn tool_calls(&self, call_id: &str) -> Result<Vec<ToolCallRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT seq, agent, tool, call_ref, turn, allowed, args, error, at_ms \
             FROM tool_calls WHERE call_id = $1 ORDER BY seq",
        )
        .bind(call_id)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                let args: Option<String> = r.try_get("args")?;
                let allowed: i64 = r.try_get("allowed")?;
                Ok(ToolCallRow {
                    seq: r.try_get("seq")?,
                    agent: r.try_get("agent")?,
                    tool: r.try_get("tool")?,
                    call_ref: r.try_get("call_ref")?,
                    turn: r.try_get("turn")?,
                    allowed: allowed != 0,
                    args: args.as_deref().map(json_of),
                    error: r.try_get("error")?,
                    at_ms: r.try_get("at_ms")?,
                })
            })
            .collect()
    }

    pub async fn handoffs(&self, call_id: &str) -> Result<Vec<HandoffRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT seq, from_agent, to_agent, strategy, trigger_kind, gap_ms, announcement_queued_ms, \
             trigger_to_wire_ms, heard_at_ms, at_ms FROM handoffs WHERE call_id = $1 ORDER BY seq",
        )
        .bind(call_id)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok(HandoffRow {
                    seq: r.try_get("seq")?,
                    from: r.try_get("from_agent")?,
                    to: r.try_get("to_agent")?,
                    strategy: r.try_get("strategy")?,
                    trigger: r.try_get("trigger_kind")?,
                    gap_ms: r.try_get("gap_ms")?,
                    announcement_queued_ms: r.try_get("announcement_queued_ms")?,
                    trigger_to_wire_ms: r.try_get("trigger_to_wire_ms")?,
                    heard_at_ms: r.try_get("heard_at_ms")?,
                    at_ms: r.try_get("at_ms")?,
                })
            })
            .collect()
    }

    /// Rows in a table (tests and benchmarks).
    pub async fn count(&self, table: Table) -> Result<i64, StoreError> {
        let sql = match table {
            Table::Calls => "SELECT COUNT(*) AS n FROM calls",
            Table::Lines => "SELECT COUNT(*) AS n FROM transcript_lines",
            Table::ToolCalls => "SELECT COUNT(*) AS n FROM tool_calls",
            Table::Contexts => "SELECT COUNT(*) AS n FROM agent_contexts",
        };
        let row = sqlx::query(sql).fetch_one(self.pool()).await?;
        Ok(row.try_get("n")?)
    }
}

/// Tables [`Store::count`] can count.
#[derive(Clone, Copy, Debug)]
pub enum Table {
    Calls,
    Lines,
    ToolCalls,
    Contexts,
}

fn call_row(r: &AnyRow) -> Result<CallRow, StoreError> {
    let figures: Option<String> = r.try_get("figures")?;
    Ok(CallRow {
        id: r.try_get("id")?,
        caller: r.try_get("caller")?,
        leg: r.try_get("leg")?,
        agent_set: r.try_get("agent_set")?,
        started_at: r.try_get("started_at")?,
        ended_at: r.try_get("ended_at")?,
        end_reason: r.try_get("end_reason")?,
        figures: figures.as_deref().map(json_of),
        recording: r.try_get("recording")?,
    })
}
