//! Databases for the store's tests: a fresh SQLite file, or a fresh database on the PostgreSQL
//! server named by `BATON_TEST_POSTGRES_URL` (`eval "$(scripts/postgres.sh)"` starts one).
#![allow(dead_code)]

use sqlx::Executor;

/// A URL for one test: `sqlite` (a temp file kept alive by the returned guard) or `postgres`
/// (a new database), or `None` when PostgreSQL is not available (the test says SKIPPED; with
/// `CI` set it fails instead: CI runs the whole suite).
pub async fn url(kind: &str, test: &str) -> Option<(String, Option<tempfile::TempDir>)> {
    match kind {
        "sqlite" => {
            let dir = tempfile::tempdir().ok()?;
            let url = format!("sqlite://{}/baton.db", dir.path().display());
            Some((url, Some(dir)))
        }
        _ => {
            let Ok(base) = std::env::var("BATON_TEST_POSTGRES_URL") else {
                assert!(
                    std::env::var_os("CI").is_none(),
                    "{test}: BATON_TEST_POSTGRES_URL is not set and CI is: run \
                     eval \"$(scripts/postgres.sh)\" first (.ci/run does)"
                );
                eprintln!(
                    "SKIPPED {test} on PostgreSQL: BATON_TEST_POSTGRES_URL is not set \
                     (run: eval \"$(scripts/postgres.sh)\")"
                );
                return None;
            };
            sqlx::any::install_default_drivers();
            let name = baton::store::new_id("t_");
            let admin = sqlx::AnyPool::connect(&base)
                .await
                .unwrap_or_else(|e| panic!("BATON_TEST_POSTGRES_URL is set but unreachable: {e}"));
            admin
                .execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                .await
                .unwrap_or_else(|e| panic!("cannot create a test database: {e}"));
            admin.close().await;
            let mut u = url::Url::parse(&base).unwrap();
            u.set_path(&format!("/{name}"));
            Some((u.to_string(), None))
        }
    }
}

/// Defines `sqlite_<name>` and `postgres_<name>` tests running `body(url)`.
#[macro_export]
macro_rules! on_both {
    ($name:ident, $body:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let (url, _guard) = super::store_support::url("sqlite", stringify!($name))
                    .await
                    .expect("a temp dir");
                super::$body(&url).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                let Some((url, _guard)) =
                    super::store_support::url("postgres", stringify!($name)).await
                else {
                    return;
                };
                super::$body(&url).await;
            }
        }
    };
}
