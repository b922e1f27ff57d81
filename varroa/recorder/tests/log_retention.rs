//! Retention of console logs against a real PostgreSQL and real log stores (a directory in a temp
//! dir, S3 on a real moto server): the logs of pruned runs go with their rows through the
//! `log_deletions` queue, recent logs stay, a failing store keeps the queue rows (ingestion and
//! row retention go on) until it is back, `--retention-days 0` deletes nothing, two pruners
//! draining one queue never do the same work twice, and a pruned run's archived artifacts (on S3,
//! uploaded through presigned URLs) go with its log, under the run's cell's prefix.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use varroa_blobs::logs::{LogKey, LogWriter, Logs};
use varroa_blobs::store::{BlobStore, StoreSettings};
use varroa_blobs::testing::{MotoServer, TcpProxy};
use varroa_recorder::metrics::Metrics;
use varroa_recorder::{RetentionSettings, log_retention, retention};

const JOB: &str = "team/my app";

fn key(job: &str, build: u64) -> LogKey {
    LogKey::new("prod", "team-a", "ci", job, build).unwrap()
}

/// The run `job #build`, finished `age` ago.
async fn seed_run(c: &tokio_postgres::Client, job: &str, build: i64, age: &str) {
    c.execute(
        &format!(
            "INSERT INTO runs (cluster, namespace, controller, job, build, cell, started_at, finished_at, result, recorded_at)
             VALUES ('prod', 'team-a', 'ci', $1, $2, 0, now() - interval '{age}', now() - interval '{age}', 'SUCCESS',
                     now() - interval '{age}')"
        ),
        &[&job, &build],
    )
    .await
    .unwrap();
}

/// The log of `k` as the gateway writes it: three chunks and the final one (4 objects with the
/// marker).
async fn write_log(writer: &LogWriter, k: &LogKey) {
    let line = |n: u64| Bytes::from(format!("build {} line {n}\n", k.build()));
    let mut offset = 0;
    for n in 0..3 {
        let data = line(n);
        let len = data.len() as u64;
        writer.write_chunk(k, offset, data, n == 2).await.unwrap();
        offset += len;
    }
}

async fn read_log(logs: &Logs, k: &LogKey) -> Vec<u8> {
    let state = logs.state(k).await.unwrap();
    let mut out = Vec::new();
    for c in &state.chunks {
        out.extend_from_slice(&logs.read_chunk(k, *c, 0).await.unwrap());
    }
    out
}

fn settings_with(store: StoreSettings) -> RetentionSettings {
    RetentionSettings {
        days: 90,
        log_store: Some(store),
        log_retry: Duration::from_millis(200),
        ..RetentionSettings::default()
    }
}

/// Builds 1 to 3 of `JOB` are 100 days old, build 4 a day; `quiet #1` is old and has no log.
/// Every build of `JOB` has a log in `store`.
async fn seed(h: &Harness, writer: &LogWriter) {
    let mut c = h.db().await.unwrap();
    varroa_recorder::migrate::migrate(&mut c).await.unwrap();
    for b in 1..=3 {
        seed_run(&c, JOB, b, "100 days").await;
    }
    seed_run(&c, JOB, 4, "1 day").await;
    seed_run(&c, "quiet", 1, "100 days").await;
    for b in 1..=4 {
        write_log(writer, &key(JOB, b)).await;
    }
}

/// The old runs' rows and every object of their logs go; the recent build's log is whole.
async fn old_logs_go_with_their_runs(store: StoreSettings) {
    let h = Harness::start().await;
    let logs = Logs::new(BlobStore::open(&store).unwrap());
    let writer = LogWriter::new(logs.clone());
    seed(&h, &writer).await;
    let recent = read_log(&logs, &key(JOB, 4)).await;

    let r = h.recorder(|c| c.retention = settings_with(store.clone())).await;
    eventually("the old runs' logs deleted", || async {
        let m = &r.metrics;
        (m.log_deletions("deleted") == 3 && m.log_deletions("absent") == 1).then_some(())
    })
    .await;
    assert_eq!(r.metrics.pruned_rows("runs"), 4);
    assert_eq!(h.count("SELECT count(*) FROM runs").await, Some(1), "the recent run stays");
    assert_eq!(h.count("SELECT count(*) FROM log_deletions").await, Some(0), "the queue is drained");
    for b in 1..=3 {
        assert!(!logs.state(&key(JOB, b)).await.unwrap().exists(), "build {b}'s log is gone");
    }
    assert_eq!(read_log(&logs, &key(JOB, 4)).await, recent, "the recent build's log is untouched");
    assert_eq!(logs.state(&key(JOB, 4)).await.unwrap().complete, Some(recent.len() as u64));
    let text = metrics_text(r.health_addr).await;
    assert_eq!(sample(&text, r#"varroa_recorder_log_deletions_total{outcome="deleted"}"#), 3.0, "{text}");
    assert_eq!(sample(&text, "varroa_recorder_pruned_log_objects_total"), 12.0, "3 chunks and a marker each");
    assert_eq!(sample(&text, r#"varroa_recorder_log_deletions_total{outcome="failed"}"#), 0.0);
    r.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn old_logs_go_with_their_runs_in_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("logs-store");
    old_logs_go_with_their_runs(StoreSettings::new(format!("file://{}", root.display()))).await;
    // Nothing is left of the old builds, not even their directories.
    let job_dir = root.join("logs/prod/team-a/ci/team%2Fmy%20app");
    let mut left: Vec<String> =
        std::fs::read_dir(&job_dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    left.sort();
    assert_eq!(left, ["4"], "only the recent build's directory is left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn old_logs_go_with_their_runs_on_s3() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let moto = tokio::task::spawn_blocking(MotoServer::start).await.unwrap().expect("moto_server");
    moto.create_bucket("varroa-logs").unwrap();
    old_logs_go_with_their_runs(moto.settings(&moto.endpoint(), "varroa-logs", "prod")).await;
}

/// The store is cut: the runs go anyway, their logs stay queued (ingestion goes on); once the
/// store is back the logs go and the queue empties.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_store_keeps_the_queue_until_it_is_back() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let moto = tokio::task::spawn_blocking(MotoServer::start).await.unwrap().expect("moto_server");
    moto.create_bucket("varroa-logs").unwrap();
    let direct = Logs::new(BlobStore::open(&moto.settings(&moto.endpoint(), "varroa-logs", "prod")).unwrap());
    let h = Harness::start().await;
    seed(&h, &LogWriter::new(direct.clone())).await;
    let proxy = TcpProxy::start(([127, 0, 0, 1], moto.port()).into()).unwrap();
    proxy.cut();

    let through_proxy = moto.settings(&proxy.endpoint(), "varroa-logs", "prod");
    let r = h.recorder(|c| c.retention = settings_with(through_proxy)).await;
    eventually("the runs pruned and the store's failure counted", || async {
        let m = &r.metrics;
        (m.pruned_rows("runs") == 4 && m.log_deletions("failed") >= 2).then_some(())
    })
    .await;
    assert_eq!(h.count("SELECT count(*) FROM runs").await, Some(1), "row retention does not wait for the store");
    assert_eq!(h.count("SELECT count(*) FROM log_deletions").await, Some(4), "every queued build is kept");
    assert!(
        h.count("SELECT count(*) FROM log_deletions WHERE attempts > 0 AND last_error LIKE '%varroa-logs%'").await
            >= Some(1),
        "the failure is recorded on the row"
    );
    for b in 1..=3 {
        assert!(direct.state(&key(JOB, b)).await.unwrap().exists(), "build {b}'s log is still there");
    }
    // Ingestion goes on meanwhile.
    let s = stamp("prod", "team-a", "ci");
    h.publish(&build_events(&s, "fresh", 1, 0, jiff::Timestamp::now())).await;
    h.wait_processed(8).await;
    assert_eq!(h.count("SELECT count(*) FROM runs WHERE job = 'fresh'").await, Some(1));
    assert_eq!(r.metrics.log_deletions("deleted"), 0);

    proxy.restore();
    eventually("the logs deleted once the store is back", || async {
        (h.count("SELECT count(*) FROM log_deletions").await? == 0).then_some(())
    })
    .await;
    assert_eq!((r.metrics.log_deletions("deleted"), r.metrics.log_deletions("absent")), (3, 1));
    for b in 1..=3 {
        assert!(!direct.state(&key(JOB, b)).await.unwrap().exists(), "build {b}'s log is gone");
    }
    assert!(direct.state(&key(JOB, 4)).await.unwrap().complete.is_some(), "the recent log stays");
    eventually("the queue gauge at 0", || async { (r.metrics.log_deletions_queued() == 0).then_some(()) }).await;
    r.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_forever_nothing_is_queued_and_no_log_is_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let store = StoreSettings::new(format!("file://{}", dir.path().join("logs").display()));
    let logs = Logs::new(BlobStore::open(&store).unwrap());
    let h = Harness::start().await;
    seed(&h, &LogWriter::new(logs.clone())).await;
    let mut c = h.db().await.unwrap();
    let metrics = Metrics::default();
    let (_tx, stop) = tokio::sync::watch::channel(false);
    let settings = RetentionSettings { days: 0, ..settings_with(store) };
    let pruned = retention::prune(&c, &settings, jiff::Timestamp::now(), &metrics, &stop).await.unwrap();
    assert_eq!((pruned.runs, pruned.logs_queued), (0, 0));
    let drained = log_retention::drain(&mut c, &logs, settings.log_batch, &metrics, &stop).await.unwrap();
    assert_eq!(drained.logs + drained.failed + drained.invalid, 0, "{drained:?}");
    assert_eq!(h.count("SELECT count(*) FROM runs").await, Some(5));
    for b in 1..=4 {
        assert!(logs.state(&key(JOB, b)).await.unwrap().complete.is_some(), "build {b}'s log stays");
    }
}

/// Two pruners (two replicas) drain one queue at once: every build is handled exactly once
/// (`FOR UPDATE SKIP LOCKED`), a key that names no log is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_pruners_share_the_queue_without_doing_anything_twice() {
    let dir = tempfile::tempdir().unwrap();
    let store = StoreSettings::new(format!("file://{}", dir.path().join("logs").display()));
    let logs = Logs::new(BlobStore::open(&store).unwrap());
    let writer = LogWriter::new(logs.clone());
    let h = Harness::start().await;
    let mut c = h.db().await.unwrap();
    varroa_recorder::migrate::migrate(&mut c).await.unwrap();
    for b in 1..=60 {
        write_log(&writer, &key(JOB, b)).await;
    }
    c.batch_execute(&format!(
        "INSERT INTO log_deletions (cluster, namespace, controller, job, build)
           SELECT 'prod', 'team-a', 'ci', '{JOB}', g FROM generate_series(1, 60) g;
         INSERT INTO log_deletions (cluster, namespace, controller, job, build)
           VALUES ('prod', 'Not_A_Namespace', 'ci', 'x', 1)"
    ))
    .await
    .unwrap();
    let mut c2 = h.db().await.unwrap();
    let metrics = Metrics::default();
    let (_tx, stop) = tokio::sync::watch::channel(false);
    let (a, b) = tokio::join!(
        log_retention::drain(&mut c, &logs, 7, &metrics, &stop),
        log_retention::drain(&mut c2, &logs, 7, &metrics, &stop)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.logs + b.logs, 60, "{a:?} {b:?}");
    assert_eq!(a.objects + b.objects, 240, "each log's objects deleted once: {a:?} {b:?}");
    assert_eq!(a.invalid + b.invalid, 1);
    assert_eq!(metrics.log_deletions("absent"), 0, "no build was deleted twice");
    assert_eq!(h.count("SELECT count(*) FROM log_deletions").await, Some(0));
    for n in [1, 30, 60] {
        assert!(!logs.state(&key(JOB, n)).await.unwrap().exists(), "build {n}'s log is gone");
    }
}

/// An unusable log store stops the start, naming the flag and the fix (nothing is contacted).
#[tokio::test]
async fn an_unusable_log_store_stops_the_start_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let config = |store: StoreSettings| varroa_recorder::RecorderConfig {
        database: varroa_recorder::DbSettings {
            url: "postgres://varroa@127.0.0.1:1/records".into(),
            password_file: None,
            application_name: "test".into(),
        },
        nats: varroa_link::nats::ConnectSettings {
            url: "nats://127.0.0.1:1".into(),
            credentials_file: None,
            name: "test".into(),
            max_reconnect_delay: Duration::from_millis(500),
        },
        health_listen: "127.0.0.1:0".parse().unwrap(),
        consumers: varroa_recorder::ConsumerSettings {
            batch_size: 16,
            ack_wait: Duration::from_secs(30),
            stream_replicas: 1,
        },
        retention: settings_with(store),
    };
    for (store, why) in [
        (StoreSettings::new("s3://Bad_Bucket/x"), "lowercase"),
        (StoreSettings::new("/var/lib/varroa/logs"), "not a URL"),
        (
            StoreSettings { credentials_file: Some(dir.path().join("missing")), ..StoreSettings::new("s3://logs/x") },
            "credentials file",
        ),
    ] {
        let e = varroa_recorder::start(config(store)).await.unwrap_err().to_string();
        assert!(e.starts_with("--log-store: ") && e.contains(why), "{e}");
    }
}

/// Uploads `files` of `key` as the plugin does: presigned PUT URLs from the store, then a PUT each.
async fn archive(
    artifacts: &varroa_blobs::artifacts::Artifacts,
    key: &varroa_blobs::artifacts::ArtifactKey,
    files: &[&str],
) {
    let sizes: Vec<(String, u64)> = files.iter().map(|f| (f.to_string(), f.len() as u64)).collect();
    let signed = artifacts.sign_puts(key, &sizes).await.unwrap();
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    for ((path, _), (_, url)) in sizes.iter().zip(&signed.uploads) {
        let r = http.put(url.to_string()).body(path.clone().into_bytes()).send().await.unwrap();
        assert!(r.status().is_success(), "{path}: {}", r.status());
    }
}

/// A pruned run's archived artifacts go with its log, under the prefix of the cell that ran it;
/// another cell's files and a recent build's stay. A queue row without a cell (queued before
/// migration 0006) deletes the build's files under every cell.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pruned_runs_artifacts_go_with_its_log() {
    use varroa_blobs::artifacts::{ArtifactKey, Artifacts};
    let _ = rustls::crypto::ring::default_provider().install_default();
    let moto = tokio::task::spawn_blocking(MotoServer::start).await.unwrap().expect("moto_server");
    moto.create_bucket("varroa-logs").unwrap();
    let store = moto.settings(&moto.endpoint(), "varroa-logs", "prod");
    let artifacts = Artifacts::new(BlobStore::open(&store).unwrap());
    let h = Harness::start().await;
    let writer = LogWriter::new(Logs::new(BlobStore::open(&store).unwrap()));
    seed(&h, &writer).await;
    let art = |cell: u32, build: u64| ArtifactKey::new("prod", "team-a", "ci", cell, JOB, build).unwrap();
    // Build 1 ran on cell 0 (its run row); cell 1 has files under the same number; build 4 is recent.
    archive(&artifacts, &art(0, 1), &["target/app.jar", "reports/index.html"]).await;
    archive(&artifacts, &art(1, 1), &["other.txt"]).await;
    archive(&artifacts, &art(0, 4), &["target/app.jar"]).await;
    // A row queued before migration 0006, without a cell, for a build with files on two cells.
    let c = h.db().await.unwrap();
    c.batch_execute("INSERT INTO log_deletions (cluster, namespace, controller, job, build) VALUES ('prod', 'team-a', 'ci', 'old', 9)")
        .await
        .unwrap();
    let old = |cell: u32| ArtifactKey::new("prod", "team-a", "ci", cell, "old", 9).unwrap();
    archive(&artifacts, &old(0), &["a"]).await;
    archive(&artifacts, &old(2), &["b"]).await;

    let r = h.recorder(|c| c.retention = settings_with(store.clone())).await;
    eventually("the pruned runs' logs and artifacts deleted", || async {
        (h.count("SELECT count(*) FROM log_deletions").await == Some(0) && r.metrics.log_deletions("deleted") >= 4)
            .then_some(())
    })
    .await;
    let paths = |list: Vec<varroa_blobs::artifacts::Artifact>| list.into_iter().map(|a| a.path).collect::<Vec<_>>();
    assert!(artifacts.list(&art(0, 1)).await.unwrap().is_empty(), "the pruned run's files are gone");
    assert_eq!(paths(artifacts.list(&art(1, 1)).await.unwrap()), ["other.txt"], "another cell's files stay");
    assert_eq!(paths(artifacts.list(&art(0, 4)).await.unwrap()), ["target/app.jar"], "the recent build's stay");
    assert!(artifacts.list(&old(0)).await.unwrap().is_empty() && artifacts.list(&old(2)).await.unwrap().is_empty());
    let text = metrics_text(r.health_addr).await;
    assert_eq!(sample(&text, "varroa_recorder_pruned_artifact_objects_total"), 4.0, "{text}");
    r.shutdown().await;
}
