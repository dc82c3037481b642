//! The registry of instances sharing one PostgreSQL (`instances`, migration 0002): each instance
//! registers itself and heartbeats its state and load; any instance may mark one that stopped
//! heartbeating as gone, which ends the calls it held as failed (their callers' active agent
//! contexts are paused, so their next call resumes them). Times are the database's clock
//! (`clock_timestamp()`), so instances on machines whose clocks disagree still agree on ages.
//!
//! PostgreSQL only: a SQLite store belongs to one instance and needs no registry.

use sqlx::Row;
use sqlx::any::AnyRow;

use super::{Kind, Store, StoreError};

/// The database's clock in ms since the Unix epoch.
const NOW_MS: &str = "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)";

/// What an instance says of itself at each heartbeat.
#[derive(Clone, Debug)]
pub struct Beat<'a> {
    pub id: &'a str,
    /// The origin bridges reach it at (`cluster.advertise_url`).
    pub url: &'a str,
    pub capacity: i64,
    pub active_calls: i64,
    /// `ready`, `full` or `draining`.
    pub state: &'a str,
}

/// One instance as the registry holds it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct InstanceRow {
    pub id: String,
    pub url: String,
    pub capacity: i64,
    pub active_calls: i64,
    /// `ready`, `full`, `draining`, `gone` (stopped heartbeating) or `stopped` (exited cleanly).
    pub state: String,
    pub started_at: i64,
    pub heartbeat_at: i64,
    /// Milliseconds since its last heartbeat, by the database's clock when read.
    pub heartbeat_age_ms: i64,
}

/// An instance marked gone by [`Store::sweep_stale`], and what was done about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Swept {
    pub id: String,
    /// Its calls still open in the store, now ended as failed.
    pub calls_ended: u64,
    /// Active agent contexts of those calls, now paused (resumable).
    pub contexts_paused: u64,
}

/// Who holds a call, as the store says.
#[derive(Clone, Debug, PartialEq)]
pub struct CallOwner {
    /// The holding instance (none for calls recorded before the registry, or by a lone one).
    pub instance: Option<String>,
    /// Why it ended, once it has.
    pub ended: Option<String>,
    /// The holder's registry row, if it has one.
    pub holder: Option<InstanceRow>,
}

/// The end reason written for the calls of an instance that stopped heartbeating.
pub fn failed_reason(instance: &str) -> String {
    format!("instance failed: {instance} stopped heartbeating")
}

fn instance_row(r: &AnyRow) -> Result<InstanceRow, StoreError> {
    Ok(InstanceRow {
        id: r.try_get("id")?,
        url: r.try_get("url")?,
        capacity: r.try_get("capacity")?,
        active_calls: r.try_get("active_calls")?,
        state: r.try_get("state")?,
        started_at: r.try_get("started_at")?,
        heartbeat_at: r.try_get("heartbeat_at")?,
        heartbeat_age_ms: r.try_get("age_ms")?,
    })
}

impl Store {
    fn registry_kind(&self) -> Result<(), StoreError> {
        match self.kind() {
            Kind::Postgres => Ok(()),
            Kind::Sqlite => Err(StoreError::Invalid(
                "the instance registry needs a PostgreSQL store (store.url = \"postgres://…\")"
                    .into(),
            )),
        }
    }

    /// Registers the instance or records its heartbeat (state, load, the time). Returns the
    /// state the registry held for it before (`None`: it was not registered; `gone`: another
    /// instance had given it up, and this heartbeat brings it back).
    pub async fn heartbeat(&self, b: &Beat<'_>) -> Result<Option<String>, StoreError> {
        self.registry_kind()?;
        let sql = format!(
            "WITH prev AS (SELECT state FROM instances WHERE id = $1) \
             INSERT INTO instances (id, url, capacity, active_calls, state, started_at, heartbeat_at) \
             VALUES ($1, $2, $3, $4, $5, {NOW_MS}, {NOW_MS}) \
             ON CONFLICT (id) DO UPDATE SET url = $2, capacity = $3, active_calls = $4, state = $5, \
             heartbeat_at = {NOW_MS} \
             RETURNING (SELECT state FROM prev) AS previous"
        );
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(b.id)
            .bind(b.url)
            .bind(b.capacity)
            .bind(b.active_calls)
            .bind(b.state)
            .fetch_one(self.pool())
            .await?;
        Ok(row.try_get("previous")?)
    }

    /// Marks the instance as having exited cleanly (it holds no calls any more).
    pub async fn deregister(&self, id: &str) -> Result<(), StoreError> {
        self.registry_kind()?;
        let sql = format!(
            "UPDATE instances SET state = 'stopped', active_calls = 0, heartbeat_at = {NOW_MS} \
             WHERE id = $1"
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    /// Every registered instance (those stopped or gone for more than a day are forgotten).
    pub async fn instances(&self) -> Result<Vec<InstanceRow>, StoreError> {
        self.registry_kind()?;
        let sql = format!(
            "SELECT id, url, capacity, active_calls, state, started_at, heartbeat_at, \
             {NOW_MS} - heartbeat_at AS age_ms FROM instances \
             WHERE state NOT IN ('gone', 'stopped') OR heartbeat_at > {NOW_MS} - 86400000 \
             ORDER BY id"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .fetch_all(self.pool())
            .await?;
        rows.iter().map(instance_row).collect()
    }

    /// Marks every live-looking instance whose last heartbeat is older than `stale_ms` as gone,
    /// ends the calls it held as failed and pauses their active agent contexts, all in one
    /// transaction. Two instances sweeping at once never both take the same instance.
    pub async fn sweep_stale(&self, stale_ms: i64) -> Result<Vec<Swept>, StoreError> {
        self.registry_kind()?;
        let mut tx = super::sql::begin(self).await?;
        let sql = format!(
            "UPDATE instances SET state = 'gone' \
             WHERE state IN ('ready', 'full', 'draining') AND heartbeat_at < {NOW_MS} - $1 \
             RETURNING id"
        );
        let gone: Vec<String> = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(stale_ms)
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(|r| r.try_get("id"))
            .collect::<Result<_, _>>()?;
        let mut out = Vec::new();
        for id in gone {
            let reason = failed_reason(&id);
            let sql = format!(
                "UPDATE calls SET ended_at = {NOW_MS}, end_reason = $2 \
                 WHERE instance_id = $1 AND ended_at IS NULL"
            );
            let calls_ended = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(&id)
                .bind(&reason)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            let sql = format!(
                "UPDATE agent_contexts SET status = 'paused', updated_at = {NOW_MS} \
                 WHERE status = 'active' AND activation_call_id IN \
                 (SELECT id FROM calls WHERE instance_id = $1 AND end_reason = $2)"
            );
            let contexts_paused = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(&id)
                .bind(&reason)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            out.push(Swept {
                id,
                calls_ended,
                contexts_paused,
            });
        }
        tx.commit().await?;
        Ok(out)
    }

    /// The instance that holds (or held) a call, with its registry row; `None` for an unknown
    /// call.
    pub async fn call_owner(&self, call: &str) -> Result<Option<CallOwner>, StoreError> {
        self.registry_kind()?;
        let sql = format!(
            "SELECT c.instance_id AS owner, c.ended_at AS ended_at, c.end_reason AS end_reason, \
             i.id AS id, i.url AS url, \
             i.capacity AS capacity, i.active_calls AS active_calls, i.state AS state, \
             i.started_at AS started_at, i.heartbeat_at AS heartbeat_at, \
             {NOW_MS} - i.heartbeat_at AS age_ms \
             FROM calls c LEFT JOIN instances i ON i.id = c.instance_id WHERE c.id = $1"
        );
        let Some(r) = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(call)
            .fetch_optional(self.pool())
            .await?
        else {
            return Ok(None);
        };
        let ended_at: Option<i64> = r.try_get("ended_at")?;
        let end_reason: Option<String> = r.try_get("end_reason")?;
        let holder_id: Option<String> = r.try_get("id")?;
        Ok(Some(CallOwner {
            instance: r.try_get("owner")?,
            ended: ended_at.map(|_| end_reason.unwrap_or_default()),
            holder: match holder_id {
                Some(_) => Some(instance_row(&r)?),
                None => None,
            },
        }))
    }
}
