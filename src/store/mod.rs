//! The store: calls, transcript lines (each tagged with role and agent), agent history, tool
//! calls, handoffs with their figures, and seed 001's agent contexts (who works for a caller, why
//! it was brought in, its working state, `active | paused | completed`, at most one active per
//! caller).
//!
//! One schema and one set of queries for both databases, chosen by the URL:
//! `sqlite://out/baton.db` (embedded, the default) or `postgres://…` (several instances sharing
//! one store). The driver is sqlx's `Any` (no compile-time query checking, so no database is
//! needed to build); the schema lives in `migrations/` and is applied, versioned, at open.
//!
//! ```text
//! call loop ──try_send──▶ [bounded queue] ──▶ writer task ──batches in one transaction──▶ DB
//!            (full: the write is dropped, counted and logged; the audio path never waits)
//! call start ──read (bounded wait, before the call's audio starts)──▶ resumable contexts
//! admin API  ──reads, context updates──▶ DB
//! ```
//!
//! Modules: [`migrations`] (the versioned schema), [`instances`] (the registry of instances sharing
//! one PostgreSQL), [`mod@write`] (one write as producers hand it over), [`writer`] (the queue and
//! the writer task), `sql` (the SQL of every write), [`read`] (queries and the admin API's context
//! updates), [`rows`] (what reads return), [`recorder`] (one call's events into writes, and its
//! live view).

pub mod instances;
pub mod migrations;
pub mod read;
pub mod recorder;
pub mod rows;
mod sql;
pub mod write;
pub mod writer;

use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyPool, Executor};

pub use rows::{CallRow, ContextRow, ContextStatus, HandoffRow, HistoryRow, LineRow, ToolCallRow};
pub use write::Write;
pub use writer::{StoreWriter, WriterStats};

/// A store operation that failed. Messages never carry the URL's password.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store URL {url:?}: {reason}")]
    Url { url: String, reason: String },
    #[error("cannot open the store at {url}: {reason}")]
    Open { url: String, reason: String },
    #[error("store schema migration failed: {0}")]
    Migrate(String),
    #[error("store query failed: {0}")]
    Query(String),
    /// The database gave way to another transaction (a deadlock, a serialisation failure, a
    /// busy SQLite file): the same write may succeed if tried again.
    #[error("store query failed (conflict; may be retried): {0}")]
    Conflict(String),
    /// The database cannot be reached (no connection within the pool's timeout, a broken
    /// connection): retrying write by write would only wait the timeout again for each.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    #[error("the store did not answer within {0} ms")]
    Timeout(u64),
    #[error("no {what} {id:?}")]
    NotFound { what: &'static str, id: String },
    #[error("{0}")]
    Invalid(String),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        // PostgreSQL: deadlock_detected, serialization_failure, lock_not_available.
        // SQLite: SQLITE_BUSY and SQLITE_LOCKED, with their extended codes.
        const CONFLICT: [&str; 9] = [
            "40P01", "40001", "55P03", "5", "6", "261", "262", "517", "773",
        ];
        match &e {
            sqlx::Error::Database(db)
                if db.code().is_some_and(|c| CONFLICT.contains(&c.as_ref())) =>
            {
                StoreError::Conflict(e.to_string())
            }
            // PostgreSQL shutting down, restarting or refusing connections for now (class 57P:
            // admin_shutdown, crash_shutdown, cannot_connect_now; class 08: connection
            // exceptions): the next connection may work.
            sqlx::Error::Database(db)
                if db
                    .code()
                    .is_some_and(|c| c.starts_with("57P") || c.starts_with("08")) =>
            {
                StoreError::Unavailable(e.to_string())
            }
            sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::WorkerCrashed => StoreError::Unavailable(e.to_string()),
            _ => StoreError::Query(e.to_string()),
        }
    }
}

/// Which database a URL names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Postgres,
}

/// An open, migrated store (a connection pool; cheap to clone).
#[derive(Clone, Debug)]
pub struct Store {
    pool: AnyPool,
    kind: Kind,
    shown: String,
}

/// The URL with any password replaced by `***`.
pub fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        _ => url.to_owned(),
    }
}

/// Milliseconds since the Unix epoch (the store's timestamps).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A new id: the time in ms and 48 random bits, in hex (sortable by creation, unique across
/// instances without coordination).
pub fn new_id(prefix: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    format!(
        "{prefix}{:011x}{:012x}",
        now_ms(),
        h.finish() & 0xffff_ffff_ffff
    )
}

/// Whether `url` names a store baton opens (SQLite or PostgreSQL), before trying to reach it.
pub fn check_url(url: &str) -> Result<(), StoreError> {
    kind_of(url).map(|_| ())
}

fn kind_of(url: &str) -> Result<Kind, StoreError> {
    if url.starts_with("sqlite:") {
        Ok(Kind::Sqlite)
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Kind::Postgres)
    } else {
        Err(StoreError::Url {
            url: redact(url),
            reason: "use sqlite://PATH (e.g. sqlite://out/baton.db) or postgres://USER@HOST/DB"
                .into(),
        })
    }
}

/// `sqlite://PATH` made to create the file (and its folder) when missing.
fn sqlite_url(url: &str) -> Result<String, StoreError> {
    if url.contains(":memory:") || url.contains("mode=") {
        return Ok(url.to_owned());
    }
    let path = url
        .trim_start_matches("sqlite:")
        .trim_start_matches("//")
        .split('?')
        .next()
        .unwrap_or_default();
    if path.is_empty() {
        return Err(StoreError::Url {
            url: url.to_owned(),
            reason: "no file path: use sqlite://out/baton.db".into(),
        });
    }
    if let Some(dir) = std::path::Path::new(path).parent()
        && !dir.as_os_str().is_empty()
    {
        // Made when missing (out/ in a fresh checkout), and said so: a mistyped path would
        // otherwise put the calls somewhere nobody looks.
        let made = !dir.exists();
        std::fs::create_dir_all(dir).map_err(|e| StoreError::Open {
            url: url.to_owned(),
            reason: format!("cannot create {}: {e}", dir.display()),
        })?;
        if made {
            tracing::info!(dir = %dir.display(), "created the store's directory");
        }
    }
    let sep = if url.contains('?') { '&' } else { '?' };
    Ok(format!("{url}{sep}mode=rwc"))
}

/// How long [`Store::close`] waits for the database.
pub const CLOSE_WAIT: Duration = Duration::from_secs(5);

impl Store {
    /// Opens the database the URL names and brings its schema up to date.
    pub async fn open(url: &str) -> Result<Store, StoreError> {
        Store::open_with(url, Duration::from_secs(5)).await
    }

    /// As [`Store::open`], waiting at most `connect` for a connection.
    pub async fn open_with(url: &str, connect: Duration) -> Result<Store, StoreError> {
        sqlx::any::install_default_drivers();
        let kind = kind_of(url)?;
        let shown = redact(url);
        let real = match kind {
            Kind::Sqlite => sqlite_url(url)?,
            Kind::Postgres => url.to_owned(),
        };
        let opts = AnyConnectOptions::from_str(&real).map_err(|e| StoreError::Url {
            url: shown.clone(),
            reason: e.to_string(),
        })?;
        let memory = real.contains(":memory:");
        let pool = AnyPoolOptions::new()
            // An in-memory SQLite database lives in one connection.
            .max_connections(match (kind, memory) {
                (Kind::Sqlite, true) => 1,
                (Kind::Sqlite, false) => 4,
                (Kind::Postgres, _) => 8,
            })
            .acquire_timeout(connect)
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    if kind == Kind::Sqlite {
                        conn.execute("PRAGMA synchronous = NORMAL").await?;
                        conn.execute("PRAGMA busy_timeout = 5000").await?;
                    }
                    Ok(())
                })
            })
            .connect_with(opts)
            .await
            .map_err(|e| StoreError::Open {
                url: shown.clone(),
                reason: e.to_string(),
            })?;
        if kind == Kind::Sqlite && !memory {
            // Readers (admin API, call start) do not wait for the writer. Switching the journal
            // mode needs the file to itself and SQLite answers "locked" at once, without its busy
            // wait, while another process opens the same new file: try again for up to a second.
            let mut tries = 0;
            loop {
                match pool.execute("PRAGMA journal_mode = WAL").await {
                    Ok(_) => break,
                    Err(e) => match StoreError::from(e) {
                        StoreError::Conflict(_) if tries < 50 => {
                            tries += 1;
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        e => return Err(e),
                    },
                }
            }
        }
        migrations::run(&pool).await?;
        Ok(Store { pool, kind, shown })
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The URL, password redacted.
    pub fn url(&self) -> &str {
        &self.shown
    }

    pub(crate) fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// Closes every connection. SQLite first folds its write-ahead log into the database file,
    /// so that the file alone holds every call (a copy of the `.db` without its `-wal` is whole).
    /// A store stalled by another connection's lock is let go after [`CLOSE_WAIT`] (its
    /// connections end with the process).
    pub async fn close(&self) {
        if tokio::time::timeout(CLOSE_WAIT, self.fold_and_close())
            .await
            .is_err()
        {
            tracing::warn!(
                store = %self.shown,
                wait_s = CLOSE_WAIT.as_secs(),
                "store: not closed in time (a connection is still busy); let go"
            );
        }
    }

    async fn fold_and_close(&self) {
        if self.kind == Kind::Sqlite {
            // One row: (busy, log pages, pages folded in); busy = 1 when a reader held it back.
            let done = sqlx::query_as::<_, (i64, i64, i64)>("PRAGMA wal_checkpoint(TRUNCATE)")
                .fetch_one(&self.pool)
                .await;
            match done {
                Ok((0, _, _)) => {}
                Ok(_) => tracing::warn!(
                    store = %self.shown,
                    "store: another connection held the write-ahead log at close; its last writes are in the -wal file beside the database"
                ),
                Err(e) => tracing::warn!(
                    store = %self.shown,
                    error = %e,
                    "store: the write-ahead log was not folded in at close"
                ),
            }
        }
        self.pool.close().await;
    }
}
