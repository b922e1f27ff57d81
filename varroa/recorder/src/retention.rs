//! Retention: rows older than `--retention-days` are deleted, at start and every hour.
//!
//! - `runs` by `finished_at`, or `recorded_at` for a run that never finished, together with their
//!   `stages` and `test_summaries` in the same statement (a run is never left without its stages,
//!   nor a stage without its run); with a log store ([`RetentionSettings::log_store`]) the same
//!   statement queues each deleted run's console log for deletion (`log_deletions`, drained by
//!   [`crate::log_retention`]);
//! - `activity` by `time`;
//! - `claims` (the ledger's grants) by `granted_at`: a claim asked again after that is a new
//!   claim. The ledger's `claim_sequences` are never pruned (numbers must not start again);
//! - `processed_events` by `processed_at`, but never before the builds stream could still
//!   redeliver the event ([`processed_keep`]): an event of a pruned run that came again would
//!   otherwise bring the run back.
//!
//! Each statement deletes at most [`RetentionSettings::batch_rows`] rows (runs, for the runs
//! statement) and commits on its own; retention loops until a statement deletes fewer. Rows it
//! finds locked (an ingest transaction writing them) are skipped this round (`FOR UPDATE SKIP
//! LOCKED`), so ingestion never waits for retention longer than one short statement.
//! `job_schedules` are the current schedules of each job, not history, and are kept.
//! With `--retention-days 0` build records and activity are kept forever.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use tokio::sync::watch;
use tokio_postgres::Client;

use crate::metrics::Metrics;

/// How retention runs.
#[derive(Debug, Clone)]
pub struct RetentionSettings {
    /// Days build records and activity are kept; 0 keeps them forever.
    pub days: u32,
    /// How often retention runs (it also runs once at start).
    pub interval: Duration,
    /// The most rows one DELETE statement removes.
    pub batch_rows: i64,
    /// The log store the gateway writes (`--log-store`): the console logs of pruned runs are
    /// deleted from it ([`crate::log_retention`]). `None`: logs are not pruned.
    pub log_store: Option<varroa_blobs::StoreSettings>,
    /// The most builds whose logs one transaction of the log pruner deletes.
    pub log_batch: i64,
    /// How soon the log pruner tries again after the store failed.
    pub log_retry: Duration,
}

impl Default for RetentionSettings {
    fn default() -> Self {
        RetentionSettings {
            days: 90,
            interval: Duration::from_secs(3600),
            batch_rows: 5000,
            log_store: None,
            log_batch: 100,
            log_retry: Duration::from_secs(60),
        }
    }
}

const DAY: Duration = Duration::from_secs(24 * 3600);

/// How long an applied event id is remembered: the retention, and at least as long as
/// `varroa_builds` keeps a message plus a day (whatever the retention, even forever: after that
/// no redelivery can come).
pub fn processed_keep(days: u32) -> Duration {
    let floor = varroa_link::builds::MAX_AGE + DAY;
    if days == 0 { floor } else { (DAY * days).max(floor) }
}

/// What one run of retention deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pruned {
    /// `runs` rows.
    pub runs: u64,
    /// `stages` rows.
    pub stages: u64,
    /// `test_summaries` rows.
    pub test_summaries: u64,
    /// `activity` rows.
    pub activity: u64,
    /// `claims` rows.
    pub claims: u64,
    /// `processed_events` rows.
    pub processed_events: u64,
    /// Logs of deleted runs queued for deletion (`log_deletions` rows).
    pub logs_queued: u64,
    /// DELETE statements run.
    pub statements: u64,
}

/// The runs statement; with `queue_logs`, it also queues the deleted runs' logs.
fn runs_sql(queue_logs: bool) -> String {
    let (queue, queued) = if queue_logs {
        (
            ", queued AS ( \
                 INSERT INTO log_deletions (cluster, namespace, controller, job, build, cell) \
                 SELECT cluster, namespace, controller, job, build, cell FROM gone_runs \
                 ON CONFLICT DO NOTHING \
                 RETURNING 1 \
             )",
            "(SELECT count(*) FROM queued)",
        )
    } else {
        ("", "0::bigint")
    };
    format!(
        "WITH doomed AS ( \
             SELECT cluster, namespace, controller, job, build FROM runs \
             WHERE COALESCE(finished_at, recorded_at) < $1 \
             LIMIT $2 FOR UPDATE SKIP LOCKED \
         ), gone_stages AS ( \
             DELETE FROM stages s USING doomed d \
             WHERE s.cluster = d.cluster AND s.namespace = d.namespace AND s.controller = d.controller \
               AND s.job = d.job AND s.build = d.build \
             RETURNING 1 \
         ), gone_tests AS ( \
             DELETE FROM test_summaries t USING doomed d \
             WHERE t.cluster = d.cluster AND t.namespace = d.namespace AND t.controller = d.controller \
               AND t.job = d.job AND t.build = d.build \
             RETURNING 1 \
         ), gone_runs AS ( \
             DELETE FROM runs r USING doomed d \
             WHERE r.cluster = d.cluster AND r.namespace = d.namespace AND r.controller = d.controller \
               AND r.job = d.job AND r.build = d.build \
             RETURNING r.cluster, r.namespace, r.controller, r.job, r.build, r.cell \
         ){queue} \
         SELECT (SELECT count(*) FROM gone_runs), (SELECT count(*) FROM gone_stages), \
                (SELECT count(*) FROM gone_tests), {queued}"
    )
}

const ACTIVITY_SQL: &str = "DELETE FROM activity WHERE id IN ( \
         SELECT id FROM activity WHERE time < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)";

const CLAIMS_SQL: &str = "DELETE FROM claims WHERE (cluster, namespace, controller, job, trigger) IN ( \
         SELECT cluster, namespace, controller, job, trigger FROM claims WHERE granted_at < $1 \
         LIMIT $2 FOR UPDATE SKIP LOCKED)";

const PROCESSED_SQL: &str = "DELETE FROM processed_events WHERE msg_id IN ( \
         SELECT msg_id FROM processed_events WHERE processed_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)";

fn before(now: Timestamp, keep: Duration) -> Timestamp {
    let keep = SignedDuration::try_from(keep).unwrap_or(SignedDuration::MAX);
    now.checked_sub(keep).unwrap_or(Timestamp::MIN)
}

/// Deletes what is older than the settings keep, as of `now`, in batches; stops early (between
/// statements) when `stop` turns true.
pub async fn prune(
    client: &Client,
    settings: &RetentionSettings,
    now: Timestamp,
    metrics: &Metrics,
    stop: &watch::Receiver<bool>,
) -> Result<Pruned, tokio_postgres::Error> {
    let batch = settings.batch_rows.max(1);
    let mut pruned = Pruned::default();
    let stopped = || *stop.borrow();
    if settings.days > 0 {
        let cutoff = before(now, DAY * settings.days);
        let runs = client.prepare(&runs_sql(settings.log_store.is_some())).await?;
        while !stopped() {
            let row = client.query_one(&runs, &[&cutoff, &batch]).await?;
            let (r, s, t, q): (i64, i64, i64, i64) = (row.get(0), row.get(1), row.get(2), row.get(3));
            pruned.logs_queued += q as u64;
            pruned.statements += 1;
            metrics.retention_statement();
            pruned.runs += r as u64;
            pruned.stages += s as u64;
            pruned.test_summaries += t as u64;
            metrics.pruned("runs", r as u64);
            metrics.pruned("stages", s as u64);
            metrics.pruned("test_summaries", t as u64);
            if r < batch {
                break;
            }
        }
        let activity = client.prepare(ACTIVITY_SQL).await?;
        while !stopped() {
            let n = client.execute(&activity, &[&cutoff, &batch]).await?;
            pruned.statements += 1;
            metrics.retention_statement();
            pruned.activity += n;
            metrics.pruned("activity", n);
            if (n as i64) < batch {
                break;
            }
        }
        let claims = client.prepare(CLAIMS_SQL).await?;
        while !stopped() {
            let n = client.execute(&claims, &[&cutoff, &batch]).await?;
            pruned.statements += 1;
            metrics.retention_statement();
            pruned.claims += n;
            metrics.pruned("claims", n);
            if (n as i64) < batch {
                break;
            }
        }
    }
    let cutoff = before(now, processed_keep(settings.days));
    let processed = client.prepare(PROCESSED_SQL).await?;
    while !stopped() {
        let n = client.execute(&processed, &[&cutoff, &batch]).await?;
        pruned.statements += 1;
        metrics.retention_statement();
        pruned.processed_events += n;
        metrics.pruned("processed_events", n);
        if (n as i64) < batch {
            break;
        }
    }
    Ok(pruned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applied_ids_outlive_the_stream_whatever_the_retention() {
        let floor = varroa_link::builds::MAX_AGE + DAY;
        assert_eq!(processed_keep(0), floor, "records kept forever: ids only as long as a redelivery can come");
        assert_eq!(processed_keep(1), floor);
        assert_eq!(processed_keep(90), DAY * 90);
        let now: Timestamp = "2026-12-03T08:00:00Z".parse().unwrap();
        assert_eq!(before(now, DAY).to_string(), "2026-12-02T08:00:00Z");
        assert_eq!(before(now, Duration::MAX), Timestamp::MIN);
    }
}
