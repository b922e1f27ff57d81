//! The schema: checked-in migrations (`migrations/NNNN_name.sql`), applied in order at start
//! (`varroa-recorder run`) and by `varroa-recorder migrate`.
//!
//! - Applied migrations are recorded in `schema_migrations` (version, name, SHA-256 of the text,
//!   when), each in the same transaction as its SQL, so a migration is applied whole or not at all.
//! - Several recorder replicas may start at once: the migration runs under a PostgreSQL advisory
//!   lock ([`LOCK_KEY`]), so one applies and the others find the work done.
//! - A migration already applied whose text changed since is refused (a checked-in migration is
//!   never edited: add a new one), and so is a database migrated by a newer recorder than this one
//!   (a rollback of the recorder must not write into a schema it does not know).

use sha2::{Digest, Sha256};
use tokio_postgres::Client;

/// One migration.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// Its number (the file's `NNNN`), applied in increasing order.
    pub version: i64,
    /// Its name (the rest of the file name).
    pub name: &'static str,
    /// The SQL.
    pub sql: &'static str,
}

/// The migrations this recorder knows, in order.
pub const MIGRATIONS: &[Migration] = &[
    Migration { version: 1, name: "build_records", sql: include_str!("../migrations/0001_build_records.sql") },
    Migration { version: 2, name: "retention_by_age", sql: include_str!("../migrations/0002_retention_by_age.sql") },
    Migration { version: 3, name: "claims", sql: include_str!("../migrations/0003_claims.sql") },
    Migration { version: 4, name: "log_deletions", sql: include_str!("../migrations/0004_log_deletions.sql") },
    Migration {
        version: 5,
        name: "job_schedules_by_controller",
        sql: include_str!("../migrations/0005_job_schedules_by_controller.sql"),
    },
    Migration {
        version: 6,
        name: "artifact_deletions",
        sql: include_str!("../migrations/0006_artifact_deletions.sql"),
    },
];

/// The advisory lock key the migration holds (`'varroa-recorder migrate'` as a number).
pub const LOCK_KEY: i64 = 0x7661_7272_6f61_6d31;

/// Why the schema cannot be brought up to date.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// PostgreSQL refused a statement.
    #[error("migration {version} ({name}): {source}")]
    Apply {
        /// The migration.
        version: i64,
        /// Its name.
        name: &'static str,
        /// PostgreSQL's error.
        source: tokio_postgres::Error,
    },
    /// Reading or locking the migration table failed.
    #[error("cannot read schema_migrations: {0}")]
    Table(#[source] tokio_postgres::Error),
    /// A checked-in migration was edited after it was applied.
    #[error(
        "migration {version} ({name}) was applied with another text (checksum {applied}, this recorder has {ours}); fix: never edit an applied migration, add a new one"
    )]
    Changed {
        /// The migration.
        version: i64,
        /// Its name.
        name: String,
        /// The checksum recorded.
        applied: String,
        /// This recorder's.
        ours: String,
    },
    /// A newer recorder migrated the database.
    #[error(
        "the database is at schema version {database}, newer than this recorder knows ({ours}); fix: run a varroa-recorder of the version that migrated it, or newer"
    )]
    Newer {
        /// The database's highest version.
        database: i64,
        /// This recorder's highest.
        ours: i64,
    },
}

fn checksum(sql: &str) -> String {
    Sha256::digest(sql.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// The highest version this recorder knows.
pub fn latest() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// Brings the schema up to date; returns the versions it applied (empty when it was already).
pub async fn migrate(client: &mut Client) -> Result<Vec<i64>, MigrateError> {
    client.execute("SELECT pg_advisory_lock($1)", &[&LOCK_KEY]).await.map_err(MigrateError::Table)?;
    let result = migrate_locked(client).await;
    // The lock also goes with the session; unlock so a pooled session does not keep it.
    let _ = client.execute("SELECT pg_advisory_unlock($1)", &[&LOCK_KEY]).await;
    result
}

async fn migrate_locked(client: &mut Client) -> Result<Vec<i64>, MigrateError> {
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (
                version    bigint      PRIMARY KEY,
                name       text        NOT NULL,
                checksum   text        NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now()
            )",
        )
        .await
        .map_err(MigrateError::Table)?;
    let rows = client
        .query("SELECT version, name, checksum FROM schema_migrations ORDER BY version", &[])
        .await
        .map_err(MigrateError::Table)?;
    let applied: Vec<(i64, String, String)> = rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect();
    if let Some((newest, _, _)) = applied.last()
        && *newest > latest()
    {
        return Err(MigrateError::Newer { database: *newest, ours: latest() });
    }
    let mut done = Vec::new();
    for m in MIGRATIONS {
        let ours = checksum(m.sql);
        if let Some((_, name, sum)) = applied.iter().find(|(v, _, _)| *v == m.version) {
            if *sum != ours {
                return Err(MigrateError::Changed {
                    version: m.version,
                    name: name.clone(),
                    applied: sum.clone(),
                    ours,
                });
            }
            continue;
        }
        let apply = |source| MigrateError::Apply { version: m.version, name: m.name, source };
        let tx = client.transaction().await.map_err(apply)?;
        tx.batch_execute(m.sql).await.map_err(apply)?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
            &[&m.version, &m.name, &ours],
        )
        .await
        .map_err(apply)?;
        tx.commit().await.map_err(apply)?;
        tracing::info!(version = m.version, name = m.name, "schema migration applied");
        done.push(m.version);
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_numbered_in_order_from_one() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i as i64 + 1, "{}", m.name);
            assert!(!m.sql.trim().is_empty());
        }
        let files: Vec<String> = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(files.len(), MIGRATIONS.len(), "every file in migrations/ is listed in MIGRATIONS: {files:?}");
    }
}
