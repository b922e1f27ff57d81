//! The varroa_activity stream drained into the activity table, against a real PostgreSQL and a
//! real nats-server; and a schema the recorder must not write into.

mod common;

use common::*;
use varroa_link::activity::{self, ActivityEvent};

fn event(id: &str, namespace: &str, controller: &str, kind: &str) -> ActivityEvent {
    ActivityEvent {
        id: id.into(),
        time: at(t0(), 0),
        cluster: "prod".into(),
        namespace: namespace.into(),
        controller: controller.into(),
        source: if namespace.is_empty() { "operator" } else { activity::SOURCE_MITE }.into(),
        kind: kind.into(),
        message: format!("{kind} happened\nsecond line"),
        cell: (!namespace.is_empty()).then_some(1),
    }
}

async fn publish(h: &Harness, subject: &str, payload: Vec<u8>) {
    // Core NATS, as the gateway publishes activity: the stream captures the subject.
    h.nc.publish(subject.to_owned(), payload.into()).await.unwrap();
    h.nc.flush().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn activity_is_drained_into_the_table_once_and_malformed_events_are_terminated() {
    let h = Harness::start().await;
    let r = h.recorder(|_| {}).await;
    let info =
        h.js.get_stream(activity::STREAM)
            .await
            .expect("the recorder created varroa_activity")
            .info()
            .await
            .unwrap()
            .clone();
    assert_eq!(info.config.subjects, ["activity.>"]);
    assert_eq!(info.config.max_age, activity::STREAM_MAX_AGE);

    let connected = event("a1", "team-a", "ci", activity::MITE_CONNECTED);
    let global = event("g1", "", "", "ClusterNote");
    let json = |e: &ActivityEvent| serde_json::to_vec(e).unwrap();
    publish(&h, "activity.prod.team-a.ci", json(&connected)).await;
    publish(&h, "activity.prod._global", json(&global)).await;
    publish(&h, "activity.prod.team-a.ci", json(&connected)).await; // the same event again
    publish(&h, "activity.prod._global", b"{not json".to_vec()).await;
    // Stamped for one controller, published on another's subject.
    publish(&h, "activity.prod.team-b.ci", json(&event("x1", "team-a", "ci", "ApplyFailed"))).await;
    eventually("two rows, a duplicate and two malformed counted", || async {
        let m = &r.metrics;
        let rows = h.count("SELECT count(*) FROM activity").await?;
        (rows == 2
            && m.activity_rows("inserted") == 2
            && m.activity_rows("duplicate") == 1
            && m.activity_rows("malformed") == 2)
            .then_some(())
    })
    .await;
    let c = h.db().await.unwrap();
    let row = c
        .query_one(
            "SELECT cluster, namespace, controller, cell, source, kind, message, time = $1 FROM activity WHERE id = 'a1'",
            &[&t0()],
        )
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, String>(0), row.get::<_, String>(1), row.get::<_, String>(2), row.get::<_, Option<i32>>(3)),
        ("prod".into(), "team-a".into(), "ci".into(), Some(1))
    );
    assert_eq!((row.get::<_, String>(4), row.get::<_, String>(5)), ("mite".into(), "MiteConnected".into()));
    assert_eq!(row.get::<_, String>(6), "MiteConnected happened\nsecond line");
    assert!(row.get::<_, bool>(7));
    let g = c.query_one("SELECT namespace, controller, cell FROM activity WHERE id = 'g1'", &[]).await.unwrap();
    assert_eq!(
        (g.get::<_, String>(0), g.get::<_, String>(1), g.get::<_, Option<i32>>(2)),
        ("".into(), "".into(), None)
    );
    let text = metrics_text(r.health_addr).await;
    assert_eq!(sample(&text, r#"varroa_recorder_activity_rows_total{outcome="malformed"}"#), 2.0, "{text}");

    // Published while no recorder runs: the stream keeps it, the next recorder drains it.
    r.shutdown().await;
    publish(&h, "activity.prod.team-a.ci", json(&event("a2", "team-a", "ci", activity::MITE_DISCONNECTED))).await;
    let r = h.recorder(|_| {}).await;
    eventually("the event published meanwhile is recorded", || async {
        (h.count("SELECT count(*) FROM activity WHERE id = 'a2'").await? == 1).then_some(())
    })
    .await;
    let stream = h.js.get_stream(activity::STREAM).await.unwrap();
    let last = stream.clone().info().await.unwrap().state.last_sequence;
    let info = eventually("every activity message acknowledged or terminated", || async {
        let info = stream.consumer_info("varroa-recorder").await.ok()?;
        (info.ack_floor.stream_sequence == last).then_some(info)
    })
    .await;
    assert_eq!((info.num_ack_pending, info.num_pending), (0, 0));
    r.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_migrated_by_a_newer_recorder_stops_this_one() {
    let h = Harness::start().await;
    let mut c = h.db().await.unwrap();
    varroa_recorder::migrate::migrate(&mut c).await.unwrap();
    c.execute("INSERT INTO schema_migrations (version, name, checksum) VALUES (999, 'future', 'x')", &[])
        .await
        .unwrap();
    let mut r = varroa_recorder::start(h.config()).await.unwrap();
    let reason = tokio::time::timeout(DEADLINE, r.fatal()).await.expect("the recorder gives up");
    assert!(reason.contains("schema version 999"), "{reason}");
    assert!(r.readiness.check().is_err(), "never ready against that schema");
    assert_eq!(h.count("SELECT count(*) FROM runs").await, Some(0));
    r.shutdown().await;
}
