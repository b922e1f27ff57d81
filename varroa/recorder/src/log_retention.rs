//! Retention of console logs and archived artifacts: the logs and artifacts of the runs that
//! retention pruned are deleted from the store (the gateway's `--log-store`, here the recorder's
//! own `--log-store`). A build's artifacts are under its cell's prefix
//! ([`varroa_blobs::artifacts::ArtifactKey`]); the queue keeps the run's cell (migration 0006;
//! a row queued before it has none, and the build's artifacts under every cell are deleted).
//!
//! A log's life is tied to its run row through a queue table, `log_deletions` (migration 0004):
//!
//! 1. The runs statement of [`crate::retention`] inserts the key of every run it deletes
//!    (cluster, namespace, controller, job, build) into `log_deletions`, **in the same
//!    statement**, when the recorder has a log store. A run is never gone without its log being
//!    queued, whatever fails afterwards.
//! 2. This pruner drains the queue: in one transaction it takes up to
//!    [`crate::RetentionSettings::log_batch`] rows (`FOR UPDATE SKIP LOCKED`: replicas take
//!    different rows, and nothing else waits for them), deletes every object under each build's
//!    log prefix ([`varroa_blobs::logs::Logs::delete`]), and only then deletes the build's row,
//!    then commits.
//! 3. A store failure (away, refusing, slower than its bounds) stops the round: the build's row
//!    gets `attempts + 1` and `last_error`, is kept, and goes after the others next time; the
//!    error is logged and counted (`varroa_recorder_log_prune_errors_total`), and the pruner
//!    tries again after [`crate::RetentionSettings::log_retry`]. Ingestion and the row
//!    retention never wait for the store: they run in other tasks, on other sessions.
//!
//! Every step is safe to repeat: a recorder that dies after deleting objects and before its
//! commit leaves the rows, and the next round deletes nothing twice (deleting a log that is gone
//! is harmless). A queued key that cannot name a log (not a [`varroa_blobs::LogKey`]: the
//! gateway never writes such a log) is dropped with a warning.
//!
//! Why a queue and not a sweep of the bucket by age: the run row decides a build's life (a
//! build's log goes when its record goes, not by the age of its objects, which a long or resumed
//! build spreads out), a sweep would list the whole bucket every time (millions of objects, paid
//! per request), and the queue makes the work exact, resumable and shared by replicas. An S3
//! lifecycle rule on `logs/` longer than the retention is an optional backstop for logs no run
//! row names (docs/varroa/data-plane.md, "Retention").

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio_postgres::Client;
use varroa_blobs::artifacts::{ArtifactKey, Artifacts};
use varroa_blobs::logs::{LogKey, Logs};
use varroa_blobs::store::BlobError;

use crate::DbSettings;
use crate::consumer;
use crate::metrics::Metrics;
use crate::retention::RetentionSettings;

/// What one drain of the queue did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogsPruned {
    /// Builds whose logs were deleted (their rows with them), including builds that had no log.
    pub logs: u64,
    /// Log objects deleted from the store.
    pub objects: u64,
    /// Archived artifacts deleted from the store.
    pub artifacts: u64,
    /// Builds whose deletion the store failed (their rows are kept).
    pub failed: u64,
    /// Queued keys that cannot name a log, dropped.
    pub invalid: u64,
    /// Transactions run.
    pub transactions: u64,
}

const TAKE_SQL: &str = "SELECT cluster, namespace, controller, job, build, cell FROM log_deletions \
     ORDER BY attempts, queued_at LIMIT $1 FOR UPDATE SKIP LOCKED";

const DONE_SQL: &str = "DELETE FROM log_deletions \
     WHERE cluster = $1 AND namespace = $2 AND controller = $3 AND job = $4 AND build = $5";

const FAILED_SQL: &str = "UPDATE log_deletions SET attempts = attempts + 1, last_error = $6 \
     WHERE cluster = $1 AND namespace = $2 AND controller = $3 AND job = $4 AND build = $5";

/// Drains `log_deletions` into `logs` in transactions of at most `batch` builds, until the queue
/// is empty, the store fails (the round stops there), or `stop` turns true (between builds).
pub async fn drain(
    client: &mut Client,
    logs: &Logs,
    batch: i64,
    metrics: &Metrics,
    stop: &watch::Receiver<bool>,
) -> Result<LogsPruned, tokio_postgres::Error> {
    let batch = batch.max(1);
    let artifacts = Artifacts::new(logs.store().clone());
    let mut pruned = LogsPruned::default();
    let stopped = || *stop.borrow();
    while !stopped() {
        let tx = client.transaction().await?;
        let rows = tx.query(TAKE_SQL, &[&batch]).await?;
        pruned.transactions += 1;
        let mut store_failed = false;
        for row in &rows {
            if stopped() {
                break;
            }
            let (cluster, namespace, controller, job, build): (String, String, String, String, i64) =
                (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
            let cell: Option<i32> = row.get(5);
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
                [&cluster, &namespace, &controller, &job, &build];
            let key = u64::try_from(build)
                .map_err(|_| "build: not a build number".to_owned())
                .and_then(|b| LogKey::new(&cluster, &namespace, &controller, &job, b).map_err(|e| e.to_string()));
            let key = match key {
                Ok(k) => k,
                Err(why) => {
                    tracing::warn!(%cluster, %namespace, %controller, %job, build, reason = %why,
                        "a queued log deletion names no log the gateway could have written; dropped");
                    tx.execute(DONE_SQL, &params).await?;
                    pruned.invalid += 1;
                    metrics.log_prune("invalid");
                    continue;
                }
            };
            let deleted = match logs.delete(&key).await {
                Ok(d) => delete_artifacts(&artifacts, &key, cell).await.map(|a| (d.objects, a)),
                Err(e) => Err(e),
            };
            match deleted {
                Ok((objects, archived)) => {
                    tx.execute(DONE_SQL, &params).await?;
                    pruned.logs += 1;
                    pruned.objects += objects;
                    pruned.artifacts += archived;
                    metrics.log_prune(if objects + archived > 0 { "deleted" } else { "absent" });
                    metrics.pruned_log_objects(objects);
                    metrics.pruned_artifact_objects(archived);
                }
                Err(e) => {
                    let message = e.to_string();
                    tracing::warn!(log = %key.prefix(), error = %message,
                        "the log store failed to delete a pruned run's log; its row is kept and tried again later");
                    let with_error: [&(dyn tokio_postgres::types::ToSql + Sync); 6] =
                        [&cluster, &namespace, &controller, &job, &build, &message];
                    tx.execute(FAILED_SQL, &with_error).await?;
                    pruned.failed += 1;
                    metrics.log_prune("failed");
                    store_failed = true;
                    break;
                }
            }
        }
        tx.commit().await?;
        if store_failed || (rows.len() as i64) < batch {
            break;
        }
    }
    Ok(pruned)
}

/// Deletes the archived artifacts of the build of `key`: under the prefix of `cell`, or, when the
/// queue row has none (queued before migration 0006), under every cell's prefix; how many.
async fn delete_artifacts(artifacts: &Artifacts, key: &LogKey, cell: Option<i32>) -> Result<u64, BlobError> {
    let (cluster, namespace, controller) = (key.cluster(), key.namespace(), key.controller());
    let cells = match cell.and_then(|c| u32::try_from(c).ok()) {
        Some(c) => vec![c],
        None => artifacts.cells(cluster, namespace, controller).await?,
    };
    let mut deleted = 0;
    for cell in cells {
        // The parts were checked as a LogKey; the same checks make an ArtifactKey.
        let Ok(k) = ArtifactKey::new(cluster, namespace, controller, cell, key.job(), key.build()) else { continue };
        deleted += artifacts.delete(&k).await?;
    }
    Ok(deleted)
}

/// How many builds wait in `log_deletions`.
pub async fn queued(client: &Client) -> Result<i64, tokio_postgres::Error> {
    Ok(client.query_one("SELECT count(*) FROM log_deletions", &[]).await?.get(0))
}

/// The pruner's loop (see the module docs): a drain once the schema is there, then after every
/// retention round that queued logs (`wake`), every `settings.interval`, and `settings.log_retry`
/// after the store failed.
pub(crate) async fn run(
    db: DbSettings,
    settings: RetentionSettings,
    logs: Logs,
    metrics: Arc<Metrics>,
    mut schema: watch::Receiver<bool>,
    mut stop: watch::Receiver<bool>,
    wake: Arc<Notify>,
) {
    tokio::select! {
        r = schema.wait_for(|ready| *ready) => if r.is_err() { return },
        _ = stop.wait_for(|s| *s) => return,
    }
    let mut client: Option<Client> = None;
    while !*stop.borrow() {
        if client.as_ref().is_none_or(|c| c.is_closed()) {
            client = session(&db).await.ok();
        }
        let wait = match client.as_mut() {
            None => {
                metrics.pg_error("log_retention");
                Duration::from_secs(30).min(settings.interval)
            }
            Some(c) => match drain(c, &logs, settings.log_batch, &metrics, &stop).await {
                Ok(p) => {
                    if let Ok(n) = queued(c).await {
                        metrics.set_log_deletions_queued(n);
                    }
                    if p.logs > 0 || p.invalid > 0 {
                        tracing::info!(?p, store = logs.store().url(), "retention deleted the logs of pruned runs");
                    }
                    if p.failed > 0 { settings.log_retry } else { settings.interval }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "log retention failed in PostgreSQL; trying again soon");
                    metrics.pg_error("log_retention");
                    client = None;
                    Duration::from_secs(30).min(settings.interval)
                }
            },
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = wake.notified() => {}
            _ = stop.wait_for(|s| *s) => break,
        }
    }
}

/// A session for the pruner: the recorder's, but one that may sit in its transaction while the
/// store deletes a build's objects (each request is bounded by the store: seconds).
async fn session(db: &DbSettings) -> Result<Client, String> {
    let client = consumer::session(db).await?;
    client.batch_execute("SET idle_in_transaction_session_timeout = '300s'").await.map_err(|e| e.to_string())?;
    Ok(client)
}
