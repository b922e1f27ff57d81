//! Retention against a real PostgreSQL: old rows go in batches, with their stages and test
//! summaries; new ones, job schedules and recently applied event ids stay.

mod common;

use common::*;
use varroa_recorder::RetentionSettings;
use varroa_recorder::metrics::Metrics;
use varroa_recorder::retention;

/// Runs of job `job`, builds 1..=n, finished `finished` ago (NULL: never) and recorded
/// `recorded` ago, each with two stages and a test summary.
async fn seed_runs(c: &tokio_postgres::Client, job: &str, n: i32, finished: Option<&str>, recorded: &str) {
    let finished = finished.map_or("NULL".to_owned(), |f| format!("now() - interval '{f}'"));
    let result = if finished == "NULL" { "NULL" } else { "'SUCCESS'" };
    c.batch_execute(&format!(
        "INSERT INTO runs (cluster, namespace, controller, job, build, cell, started_at, finished_at, result, recorded_at)
           SELECT 'prod', 'team-a', 'ci', '{job}', g, 0, now() - interval '{recorded}', {finished}, {result},
                  now() - interval '{recorded}'
           FROM generate_series(1, {n}) g;
         INSERT INTO stages (cluster, namespace, controller, job, build, stage_id, name, recorded_at)
           SELECT 'prod', 'team-a', 'ci', '{job}', g, s::text, 'stage ' || s, now() - interval '{recorded}'
           FROM generate_series(1, {n}) g, generate_series(1, 2) s;
         INSERT INTO test_summaries (cluster, namespace, controller, job, build, total, failed, skipped, event_time, recorded_at)
           SELECT 'prod', 'team-a', 'ci', '{job}', g, 3, 0, 0, now(), now() - interval '{recorded}'
           FROM generate_series(1, {n}) g;"
    ))
    .await
    .unwrap();
}

async fn seed_ids(c: &tokio_postgres::Client, prefix: &str, n: i32, age: &str) {
    c.batch_execute(&format!(
        "INSERT INTO processed_events (msg_id, processed_at)
           SELECT 'prod/team-a/ci/{prefix}-' || g, now() - interval '{age}' FROM generate_series(1, {n}) g"
    ))
    .await
    .unwrap();
}

async fn seed_activity(c: &tokio_postgres::Client, prefix: &str, n: i32, age: &str) {
    c.batch_execute(&format!(
        "INSERT INTO activity (id, time, cluster, source, kind)
           SELECT '{prefix}-' || g, now() - interval '{age}', 'prod', 'operator', 'Note' FROM generate_series(1, {n}) g"
    ))
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retention_prunes_old_rows_in_batches_and_keeps_new_ones() {
    let h = Harness::start().await;
    let mut c = h.db().await.unwrap();
    varroa_recorder::migrate::migrate(&mut c).await.unwrap();
    seed_runs(&c, "old", 250, Some("100 days"), "100 days").await;
    seed_runs(&c, "stuck", 5, None, "100 days").await; // never finished: by when it was recorded
    seed_runs(&c, "late", 3, Some("10 days"), "100 days").await; // finished recently: kept
    seed_runs(&c, "new", 10, Some("1 day"), "1 day").await;
    seed_activity(&c, "old", 120, "100 days").await;
    seed_activity(&c, "new", 5, "1 hour").await;
    seed_ids(&c, "old", 130, "100 days").await;
    seed_ids(&c, "recent", 5, "20 days").await;
    c.batch_execute(
        "INSERT INTO job_schedules (cluster, namespace, controller, job, schedules, event_time)
         VALUES ('prod', 'team-a', 'ci', 'old', '[]', now() - interval '200 days')",
    )
    .await
    .unwrap();
    // The ledger's grants: 150 old, 3 recent; the job's sequence is never pruned.
    c.batch_execute(
        "INSERT INTO claims (cluster, namespace, controller, job, trigger, claim_id, cell, build, granted_at)
         SELECT 'prod', 'team-a', 'ci', 'app', 't:' || n, 'q-' || n, 0, n,
                now() - CASE WHEN n <= 150 THEN interval '100 days' ELSE interval '1 day' END
         FROM generate_series(1, 153) AS n;
         INSERT INTO claim_sequences (cluster, namespace, controller, job, last_build)
         VALUES ('prod', 'team-a', 'ci', 'app', 153)",
    )
    .await
    .unwrap();

    // At start, in statements of at most 100 rows.
    let r = h.recorder(|c| c.retention = RetentionSettings { days: 90, batch_rows: 100, ..Default::default() }).await;
    eventually("the old rows pruned", || async {
        let m = &r.metrics;
        (m.pruned_rows("runs") == 255
            && m.pruned_rows("activity") == 120
            && m.pruned_rows("claims") == 150
            && m.pruned_rows("processed_events") == 130)
            .then_some(())
    })
    .await;
    assert_eq!(r.metrics.pruned_rows("stages"), 510, "the stages went with their runs");
    assert_eq!(r.metrics.pruned_rows("test_summaries"), 255);
    // runs 100 + 100 + 55, activity 100 + 20, claims 100 + 50, processed ids 100 + 30.
    assert_eq!(r.metrics.retention_statements(), 9);
    let count = |sql: &'static str| h.count(sql);
    assert_eq!(count("SELECT count(*) FROM runs").await, Some(13));
    assert_eq!(count("SELECT count(*) FROM runs WHERE job IN ('late', 'new')").await, Some(13));
    assert_eq!(count("SELECT count(*) FROM stages").await, Some(26));
    assert_eq!(count("SELECT count(*) FROM stages WHERE job IN ('old', 'stuck')").await, Some(0));
    assert_eq!(count("SELECT count(*) FROM test_summaries").await, Some(13));
    assert_eq!(count("SELECT count(*) FROM activity").await, Some(5));
    assert_eq!(count("SELECT count(*) FROM processed_events").await, Some(5));
    assert_eq!(count("SELECT count(*) FROM job_schedules").await, Some(1), "current schedules are not history");
    assert_eq!(count("SELECT count(*) FROM claims WHERE build > 150").await, Some(3));
    assert_eq!(count("SELECT count(*) FROM claims").await, Some(3));
    assert_eq!(count("SELECT count(*) FROM log_deletions").await, Some(0), "no log store: no log is queued");
    assert_eq!(
        count("SELECT last_build FROM claim_sequences").await,
        Some(153),
        "the sequence is never pruned: numbers do not start again"
    );
    let text = metrics_text(r.health_addr).await;
    assert_eq!(sample(&text, r#"varroa_recorder_pruned_rows_total{table="runs"}"#), 255.0, "{text}");
    r.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_forever_the_records_stay_and_applied_ids_outlive_the_stream_only() {
    let h = Harness::start().await;
    let mut c = h.db().await.unwrap();
    varroa_recorder::migrate::migrate(&mut c).await.unwrap();
    seed_runs(&c, "old", 20, Some("3000 days"), "3000 days").await;
    seed_activity(&c, "old", 10, "3000 days").await;
    seed_ids(&c, "old", 150, "9 days").await; // past the stream's 7 days and a day
    seed_ids(&c, "recent", 7, "6 days").await; // the stream could still redeliver these
    let metrics = Metrics::default();
    let (_tx, stop) = tokio::sync::watch::channel(false);
    let settings = RetentionSettings { days: 0, batch_rows: 100, ..Default::default() };
    let pruned = retention::prune(&c, &settings, jiff::Timestamp::now(), &metrics, &stop).await.unwrap();
    assert_eq!((pruned.runs, pruned.activity, pruned.processed_events), (0, 0, 150));
    assert_eq!(pruned.statements, 2, "100 + 50");
    assert_eq!(h.count("SELECT count(*) FROM runs").await, Some(20));
    assert_eq!(h.count("SELECT count(*) FROM activity").await, Some(10));
    assert_eq!(h.count("SELECT count(*) FROM processed_events").await, Some(7));
}
