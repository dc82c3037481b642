//! The schema's versions, embedded from `migrations/` (one file per version,
//! `NNNN_name.sql`), applied in order at open by sqlx's migrator: each version once, in a
//! transaction, recorded with its checksum in `_sqlx_migrations` (an edited, already applied
//! file is refused), under a lock on PostgreSQL so instances starting together do not race.

use sqlx::AnyPool;
use sqlx::SqlSafeStr;
use sqlx::migrate::{Migration, MigrationType, Migrator};

use super::StoreError;

/// `(version, file name)` of every migration, in order, and its SQL.
pub const MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "0001_initial.sql",
        include_str!("../../migrations/0001_initial.sql"),
    ),
    (
        2,
        "0002_instances.sql",
        include_str!("../../migrations/0002_instances.sql"),
    ),
];

/// The migrator over [`MIGRATIONS`].
pub fn migrator() -> Migrator {
    Migrator::with_migrations(
        MIGRATIONS
            .iter()
            .map(|&(version, file, sql)| {
                let name = file
                    .trim_end_matches(".sql")
                    .split_once('_')
                    .map_or(file, |(_, n)| n);
                Migration::new(
                    version,
                    name.to_owned().into(),
                    MigrationType::Simple,
                    sql.into_sql_str(),
                    false,
                )
            })
            .collect(),
    )
}

/// Brings the schema up to the latest version. Stores opened at once in one process migrate one
/// after the other; one opened at once by another process (SQLite has no migration lock) may
/// find the schema being created, so a failure is retried once, when that other is done.
pub async fn run(pool: &AnyPool) -> Result<(), StoreError> {
    static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _turn = ONE_AT_A_TIME.lock().await;
    let Err(first) = migrator().run(pool).await else {
        return Ok(());
    };
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    migrator()
        .run(pool)
        .await
        .map_err(|e| StoreError::Migrate(format!("{first}; retried: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_in_migrations_is_embedded_in_order() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".sql"))
            .collect();
        files.sort();
        let embedded: Vec<String> = MIGRATIONS.iter().map(|m| m.1.to_owned()).collect();
        assert_eq!(files, embedded);
        for (i, (v, f, _)) in MIGRATIONS.iter().enumerate() {
            assert_eq!(*v, i as i64 + 1);
            assert!(f.starts_with(&format!("{v:04}_")), "{f} is version {v}");
        }
    }
}
