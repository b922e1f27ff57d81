//! Faults mid-stream, each against its own real PostgreSQL and nats-server: PostgreSQL stopped
//! and started again, NATS restarted, the recorder binary killed with SIGKILL. Every event ends
//! up applied exactly once and the rows are those of the events applied straight.

mod common;

use std::time::Duration;

use common::*;
use varroa_link::builds::RecordedEvent;

fn stream_of_events() -> Vec<RecordedEvent> {
    many_builds(&stamp("prod", "team-a", "ci"), 5, 25)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_stopped_mid_stream_then_started_records_every_event_exactly_once() {
    let mut h = Harness::start().await;
    let r = h
        .recorder(|c| {
            c.consumers.batch_size = 20;
            c.consumers.ack_wait = Duration::from_secs(3);
        })
        .await;
    let events = stream_of_events();
    let total = events.len() as i64;
    let publisher = h.publish_paced(&events, 10, Duration::from_millis(10));
    eventually("the first events recorded", || async {
        (h.count("SELECT count(*) FROM processed_events").await? >= 100).then_some(())
    })
    .await;
    tokio::task::block_in_place(|| h.pg.stop());
    eventually("the recorder notices and says it is not ready", || async {
        let errors = r.metrics.pg_errors("builds") + r.metrics.pg_errors("connect");
        (errors > 0 && r.readiness.check().is_err()).then_some(())
    })
    .await;
    let (status, body) = http_get(r.health_addr, "/readyz").await.unwrap();
    assert_eq!(status, 503);
    assert!(body.contains("PostgreSQL"), "{body}");
    publisher.await.unwrap();
    tokio::task::block_in_place(|| h.pg.start_again()).unwrap();
    h.wait_processed(total).await;
    wait_ready(&r).await;
    assert_eq!(r.metrics.events_total("applied"), total as u64, "every event applied exactly once");
    let want = reference(&h.pg, "reference", &events).await;
    assert_eq!(dump(&h.db().await.unwrap(), None).await, want, "none lost, none doubled");
    r.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nats_restarted_mid_stream_loses_nothing() {
    let mut h = Harness::start().await;
    let r = h
        .recorder(|c| {
            c.consumers.batch_size = 20;
            c.consumers.ack_wait = Duration::from_secs(3);
        })
        .await;
    let events = stream_of_events();
    let total = events.len() as i64;
    let publisher = h.publish_paced(&events, 10, Duration::from_millis(10));
    eventually("the first events recorded", || async {
        (h.count("SELECT count(*) FROM processed_events").await? >= 100).then_some(())
    })
    .await;
    tokio::task::block_in_place(|| h.nats.restart()).unwrap();
    publisher.await.unwrap();
    h.wait_processed(total).await;
    assert_eq!(r.metrics.events_total("applied"), total as u64, "every event applied exactly once");
    let want = reference(&h.pg, "reference", &events).await;
    assert_eq!(dump(&h.db().await.unwrap(), None).await, want);
    wait_ready(&r).await;
    r.shutdown().await;
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn recorder_binary(h: &Harness, health: u16) -> tokio::process::Child {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_varroa-recorder"))
        .arg("run")
        .env("VARROA_DATABASE_URL", &h.db_url)
        .env("VARROA_NATS_URL", h.nats.url())
        .env("VARROA_RECORDER_HEALTH_LISTEN", format!("127.0.0.1:{health}"))
        .env("VARROA_RECORDER_BATCH_SIZE", "50")
        .env("VARROA_RECORDER_ACK_WAIT_SECONDS", "2")
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .expect("the varroa-recorder binary runs")
}

fn applied_in(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("varroa_recorder_events_total{") && l.contains(r#"outcome="applied""#))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_binary_killed_mid_stream_and_started_again_loses_and_doubles_nothing() {
    let h = Harness::start().await;
    let events = many_builds(&stamp("prod", "team-a", "ci"), 10, 25);
    let total = events.len() as i64;
    let first_port = free_port();
    let mut first = recorder_binary(&h, first_port);
    let first_addr = ([127, 0, 0, 1], first_port).into();
    wait_ready_at(first_addr).await;
    let publisher = h.publish_paced(&events, 20, Duration::from_millis(10));
    eventually("the first recorder is recording", || async {
        (h.count("SELECT count(*) FROM processed_events").await? >= 300).then_some(())
    })
    .await;
    first.start_kill().unwrap();
    let status = first.wait().await.unwrap();
    assert!(!status.success(), "SIGKILL: {status}");
    // Once its sessions are gone, whatever it sent is committed or rolled back: what it
    // committed (it may not have acknowledged all of it).
    eventually("the killed recorder's sessions are gone", || async {
        let n =
            h.count("SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'varroa-recorder/%'").await?;
        (n == 0).then_some(())
    })
    .await;
    let committed = h.count("SELECT count(*) FROM processed_events").await.unwrap();
    assert!(committed < total, "killed mid-stream: {committed} of {total}");

    let second_port = free_port();
    let mut second = recorder_binary(&h, second_port);
    let second_addr = ([127, 0, 0, 1], second_port).into();
    wait_ready_at(second_addr).await;
    publisher.await.unwrap();
    h.wait_processed(total).await;
    let want = reference(&h.pg, "reference", &events).await;
    assert_eq!(dump(&h.db().await.unwrap(), None).await, want, "nothing lost");
    let applied = applied_in(&metrics_text(second_addr).await);
    assert_eq!(applied as i64, total - committed, "the second applied exactly what the first had not committed");

    // SIGTERM: the batch in hand is finished and the process exits cleanly.
    let pid = second.id().unwrap() as i32;
    // SAFETY: kill(2) on the pid of a child we spawned and have not reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = tokio::time::timeout(DEADLINE, second.wait()).await.expect("exits after SIGTERM").unwrap();
    assert!(status.success(), "{status}");
}

#[test]
fn the_binary_documents_its_flags_and_their_variables() {
    let out =
        std::process::Command::new(env!("CARGO_BIN_EXE_varroa-recorder")).args(["run", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--database-url",
        "VARROA_DATABASE_URL",
        "--database-password-file",
        "--nats-url",
        "VARROA_NATS_URL",
        "--nats-credentials-file",
        "--health-listen",
        "--stream-replicas",
        "--batch-size",
        "--ack-wait-seconds",
        "--retention-days",
        "[default: 90]",
    ] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_varroa-recorder"))
        .args(["run", "--database-url", "postgres://x@127.0.0.1:1/db", "--batch-size", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--batch-size"), "{}", String::from_utf8_lossy(&out.stderr));
}
