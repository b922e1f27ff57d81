//! Build events from the varroa_builds stream into the tables, against a real PostgreSQL and a
//! real nats-server: a whole build, any order, duplicates, malformed messages, two replicas.

mod common;

use common::*;
use varroa_link::builds::{self, RecordedEvent};
use varroa_recorder::ingest::{Outcome, Writer};
use varroa_recorder::testing::PgServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_whole_build_is_recorded_as_a_user_queries_it() {
    let h = Harness::start().await;
    let r = h.recorder(|_| {}).await;
    let s = stamp("prod", "team-a", "ci");
    let mut events = build_events(&s, "team/app", 42, 1, t0());
    events.push(schedule_event(&s, "team/app", 1, t0(), "H/15 * * * *"));
    h.publish(&events).await;
    h.wait_processed(events.len() as i64).await;

    let c = h.db().await.unwrap();
    let run = c
        .query_one(
            "SELECT status, result, duration_ms, cell, trigger, cause, node, \
                    queued_at::text, started_at::text, finished_at::text \
             FROM runs WHERE cluster = 'prod' AND namespace = 'team-a' AND controller = 'ci' AND job = 'team/app' AND build = 42",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(run.get::<_, String>(0), "finished");
    assert_eq!(run.get::<_, Option<String>>(1).as_deref(), Some("UNSTABLE"));
    assert_eq!(run.get::<_, Option<i64>>(2), Some(6000));
    assert_eq!(run.get::<_, i32>(3), 1, "the cell of the started event, not of the others");
    assert_eq!(run.get::<_, Option<String>>(4).as_deref(), Some("timer"));
    assert_eq!(run.get::<_, Option<String>>(5).as_deref(), Some("Started by timer"));
    assert_eq!(run.get::<_, Option<String>>(6).as_deref(), Some("agent-1"));
    c.batch_execute("SET TIME ZONE 'UTC'").await.unwrap();
    let times = c
        .query_one("SELECT queued_at::text, started_at::text, finished_at::text FROM runs WHERE build = 42", &[])
        .await
        .unwrap();
    assert_eq!(
        (times.get::<_, String>(0), times.get::<_, String>(1), times.get::<_, String>(2)),
        ("2026-12-03 08:00:00+00".into(), "2026-12-03 08:00:01+00".into(), "2026-12-03 08:00:06+00".into())
    );
    let stages: Vec<(String, String, String, String, i64)> = c
        .query(
            "SELECT stage_id, name, started_at::text, result, duration_ms FROM stages WHERE build = 42 ORDER BY stage_id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect();
    assert_eq!(
        stages,
        [
            ("3".into(), "Build".into(), "2026-12-03 08:00:02+00".into(), "SUCCESS".into(), 1000),
            ("7".into(), "Test".into(), "2026-12-03 08:00:03+00".into(), "UNSTABLE".into(), 2000),
        ],
        "the stage_finished's name and start; a start the stage_finished lacks comes from its stage_started"
    );
    let tests = c
        .query_one("SELECT total, failed, skipped, duration_ms FROM test_summaries WHERE build = 42", &[])
        .await
        .unwrap();
    assert_eq!((tests.get::<_, i64>(0), tests.get::<_, i64>(1), tests.get::<_, i64>(2)), (10, 1, 2));
    assert_eq!(tests.get::<_, Option<i64>>(3), Some(1500));
    let sched: serde_json::Value =
        c.query_one("SELECT schedules FROM job_schedules WHERE job = 'team/app'", &[]).await.unwrap().get(0);
    assert_eq!(sched[0]["spec"], "H/15 * * * *");

    // What operators see.
    assert_eq!(r.metrics.events("finished", "applied"), 1);
    assert_eq!(r.metrics.events_total("applied"), events.len() as u64);
    let text = metrics_text(r.health_addr).await;
    assert_eq!(sample(&text, r#"varroa_recorder_events_total{kind="stage_finished",outcome="applied"}"#), 2.0);
    assert!(sample(&text, "varroa_recorder_batch_apply_seconds_count") >= 1.0, "{text}");
    assert!(text.contains("varroa_recorder_pg_errors_total") || !text.contains("pg_errors_total{"), "{text}");
    assert_eq!(http_get(r.health_addr, "/healthz").await.map(|r| r.0), Some(200));
    r.shutdown().await;
}

/// Applies `events` through the writer in `chunks` (one transaction each) into a new database.
async fn apply_in(pg: &PgServer, name: &str, chunks: Vec<Vec<RecordedEvent>>) -> Dump {
    let url = pg.create_database(name).await.unwrap();
    let mut c = connect(&url).await.unwrap();
    varroa_recorder::migrate::migrate(&mut c).await.unwrap();
    let mut w = Writer::new(c).await.unwrap();
    for chunk in chunks {
        let outcomes = w.apply(&chunk).await.unwrap();
        assert!(outcomes.iter().all(|o| *o == Outcome::Applied));
    }
    dump(&connect(&url).await.unwrap(), None).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_order_and_any_batching_give_the_same_rows() {
    let pg = tokio::task::spawn_blocking(PgServer::start).await.unwrap().unwrap();
    let s = stamp("prod", "team-a", "ci");
    let events = many_builds(&s, 3, 8);
    let one_by_one = |list: &[RecordedEvent]| list.iter().map(|e| vec![e.clone()]).collect::<Vec<_>>();
    let in_order = apply_in(&pg, "in_order", one_by_one(&events)).await;
    let mut reversed_events = events.clone();
    reversed_events.reverse();
    let reversed = apply_in(&pg, "reversed", one_by_one(&reversed_events)).await;
    assert_eq!(in_order, reversed, "every event in its own transaction, last to first");
    let whole = apply_in(&pg, "whole", vec![reversed_events.clone()]).await;
    assert_eq!(in_order, whole, "all of them in one batch (folded per row)");
    for seed in [7, 1234, 99_999] {
        let mut shuffled = events.clone();
        shuffle(&mut shuffled, seed);
        let mut chunks = Vec::new();
        let mut rest = &shuffled[..];
        let mut size = 1 + (seed as usize % 5);
        while !rest.is_empty() {
            let take = size.min(rest.len());
            chunks.push(rest[..take].to_vec());
            rest = &rest[take..];
            size = size % 11 + 1;
        }
        let got = apply_in(&pg, &format!("shuffled_{seed}"), chunks).await;
        assert_eq!(in_order, got, "shuffled with seed {seed}, in batches of 1 to 11");
    }
    // And the rows are the right ones, not merely the same: a finished applied before its
    // started ends right, a stage_started after its stage_finished changed nothing it knew.
    assert_eq!(in_order.runs.len(), 24);
    let run: serde_json::Value = serde_json::from_str(&reversed.runs[0]).unwrap();
    assert_eq!((run["status"].as_str(), run["result"].as_str()), (Some("finished"), Some("UNSTABLE")));
    assert!(run["started_at"].is_string() && run["queued_at"].is_string());
    let stage: serde_json::Value = serde_json::from_str(&reversed.stages[0]).unwrap();
    assert_eq!((stage["stage_id"].as_str(), stage["name"].as_str()), (Some("3"), Some("Build")));
    assert!(stage["started_at"].as_str().unwrap().contains("08:01:02"), "{stage}");
    let sched: serde_json::Value = serde_json::from_str(&reversed.schedules[0]).unwrap();
    assert_eq!(sched["schedules"][0]["spec"], "H 2 * * *", "the later schedule wins in any order");
    assert_eq!(in_order.tests.len(), 24);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn events_out_of_order_on_the_stream_give_the_rows_of_events_in_order() {
    let h = Harness::start().await;
    // Small batches, so that a build's events span several transactions.
    let r = h.recorder(|c| c.consumers.batch_size = 3).await;
    let ordered = many_builds(&stamp("prod", "team-a", "in-order"), 2, 10);
    let mut reversed = many_builds(&stamp("prod", "team-a", "reversed"), 2, 10);
    reversed.reverse();
    let mut shuffled = many_builds(&stamp("prod", "team-a", "shuffled"), 2, 10);
    shuffle(&mut shuffled, 42);
    h.publish(&ordered).await;
    h.publish(&reversed).await;
    h.publish(&shuffled).await;
    h.wait_processed((ordered.len() * 3) as i64).await;
    let c = h.db().await.unwrap();
    let want = dump(&c, Some("in-order")).await;
    assert_eq!(want.runs.len(), 20);
    assert_eq!(dump(&c, Some("reversed")).await, want, "finished first, stage_started after stage_finished");
    assert_eq!(dump(&c, Some("shuffled")).await, want);
    r.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_same_event_three_times_changes_nothing() {
    let h = Harness::start().await;
    let r = h.recorder(|_| {}).await;
    let s = stamp("prod", "team-a", "ci");
    let events = build_events(&s, "team/app", 1, 0, t0());
    let n = events.len() as u64;
    h.publish(&events).await;
    h.wait_processed(n as i64).await;
    let c = h.db().await.unwrap();
    let before = every_row(&c).await;

    // The same message ids: the stream's duplicate window drops them.
    let info = h.js.get_stream(builds::STREAM).await.unwrap().info().await.unwrap().state.messages;
    h.publish(&events).await;
    h.publish(&events).await;
    let after = h.js.get_stream(builds::STREAM).await.unwrap().info().await.unwrap().state.messages;
    assert_eq!(after, info, "the stream dropped the retried publishes");

    // Other message ids (a retry after the duplicate window): the stream stores them, the
    // recorder's processed ids make them no-ops, whether in one batch or in later ones.
    let copies: Vec<(RecordedEvent, String)> =
        (1..=2).flat_map(|k| events.iter().map(move |e| (e.clone(), format!("{}#copy{k}", e.msg_id())))).collect();
    h.publish_with_ids(&copies).await;
    eventually("the copies counted as duplicates", || async {
        (r.metrics.events_total("duplicate") == 2 * n).then_some(())
    })
    .await;
    assert_eq!(r.metrics.events_total("applied"), n, "each event applied once");
    assert_eq!(h.count("SELECT count(*) FROM processed_events").await, Some(n as i64));
    assert_eq!(every_row(&c).await, before, "not a column changed, recorded_at included");
    r.shutdown().await;
}

/// Every row of runs, stages and test summaries, every column.
async fn every_row(c: &tokio_postgres::Client) -> Vec<String> {
    let sql = "SELECT row_to_json(t)::text FROM runs t UNION ALL SELECT row_to_json(t)::text FROM stages t \
               UNION ALL SELECT row_to_json(t)::text FROM test_summaries t ORDER BY 1";
    c.query(sql, &[]).await.unwrap().iter().map(|r| r.get::<_, String>(0)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_malformed_message_is_terminated_counted_and_the_rest_of_its_batch_applied() {
    let h = Harness::start().await;
    let r = h.recorder(|_| {}).await;
    let s = stamp("prod", "team-a", "ci");
    let good = build_events(&s, "team/app", 5, 0, t0());
    let subject = subject_of(&good[0]);
    let json = |e: &RecordedEvent| serde_json::to_value(e).unwrap();
    let mut bad_job = json(&good[1]);
    bad_job["event"]["job"] = "a\u{1}b".into();
    bad_job["event"]["id"] = "bad-job".into();
    let mut big_cell = json(&good[1]);
    big_cell["cell"] = (u64::from(u32::MAX)).into();
    big_cell["event"]["id"] = "big-cell".into();
    let mut huge = json(&good[7]);
    huge["event"]["duration_ms"] = u64::MAX.into();
    huge["event"]["id"] = "huge".into();
    let mut other_tenant = json(&good[1]);
    other_tenant["namespace"] = "team-b".into();
    other_tenant["event"]["id"] = "other-tenant".into();
    let mut raw: Vec<(String, Vec<u8>, String)> = Vec::new();
    let push = |raw: &mut Vec<_>, v: &serde_json::Value, id: &str| {
        raw.push((subject.clone(), serde_json::to_vec(v).unwrap(), id.to_owned()));
    };
    // Interleaved with the good ones, so that they share batches.
    for (i, e) in good.iter().enumerate() {
        push(&mut raw, &json(e), &e.msg_id());
        match i {
            0 => raw.push((subject.clone(), b"{not json".to_vec(), "m1".into())),
            1 => push(&mut raw, &bad_job, "m2"),
            2 => push(&mut raw, &big_cell, "m3"),
            3 => push(&mut raw, &huge, "m4"),
            4 => push(&mut raw, &other_tenant, "m5"),
            _ => {}
        }
    }
    h.publish_raw(&raw).await;
    h.wait_processed(good.len() as i64).await;
    eventually("five malformed messages counted", || async {
        (r.metrics.events_total("malformed") == 5).then_some(())
    })
    .await;
    assert_eq!(r.metrics.events(varroa_recorder::ingest::UNKNOWN_KIND, "malformed"), 1, "the one that is not JSON");
    assert_eq!(r.metrics.events("started", "malformed"), 3);
    assert_eq!(r.metrics.events("finished", "malformed"), 1);
    assert_eq!(h.count("SELECT count(*) FROM runs WHERE result = 'UNSTABLE' AND cell = 0").await, Some(1));
    assert_eq!(h.count("SELECT count(*) FROM runs").await, Some(1), "nothing of team-b was written");
    // Terminated: acknowledged for good, so nothing is pending or waiting for redelivery.
    let stream = h.js.get_stream(builds::STREAM).await.unwrap();
    let last = stream.clone().info().await.unwrap().state.last_sequence;
    let info = eventually("every message acknowledged or terminated", || async {
        let info = stream.consumer_info("varroa-recorder").await.ok()?;
        (info.ack_floor.stream_sequence == last).then_some(info)
    })
    .await;
    assert_eq!((info.num_ack_pending, info.num_pending, info.num_redelivered), (0, 0, 0), "{info:?}");
    r.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_share_one_stream_and_apply_every_event_once() {
    let h = Harness::start().await;
    let a = h.recorder(|c| c.consumers.batch_size = 10).await;
    let b = h.recorder(|c| c.consumers.batch_size = 10).await;
    let events = many_builds(&stamp("prod", "team-a", "ci"), 4, 25);
    h.publish(&events).await;
    h.wait_processed(events.len() as i64).await;
    let (ea, eb) = (a.metrics.events_total("applied"), b.metrics.events_total("applied"));
    assert_eq!(ea + eb, events.len() as u64, "every event applied once: {ea} + {eb}");
    assert!(ea > 0 && eb > 0, "both replicas took a share: {ea} and {eb}");
    let want = reference(&h.pg, "reference", &events).await;
    assert_eq!(dump(&h.db().await.unwrap(), None).await, want);
    a.shutdown().await;
    b.shutdown().await;
}
