//! The recorder's ingest benchmark (`cargo bench -p varroa-recorder --bench ingest`): how fast
//! build events become rows, against the cheapest way to write the same rows.
//!
//! Every phase runs against a real PostgreSQL of its own database on one server
//! (`varroa_recorder::testing::PgServer`: a test server, `fsync=off` and
//! `synchronous_commit=off`, so the figures are the recorder's and PostgreSQL's CPU, not a disk's).
//! The events are whole builds (queued, started, two stages started and finished, a test
//! summary, finished: eight events, five rows plus eight processed ids per build), in the order
//! the plugin sends them, over many jobs of one controller.
//!
//! 1. **writer**: `ingest::Writer::apply` in batches of `--batch-size` (256), one transaction
//!    each: the processed-ids insert, the folding, the upserts.
//! 2. **raw**: the floor: the same final rows (`processed_events`, `runs`, `stages`,
//!    `test_summaries`) written with plain batched `INSERT ... SELECT * FROM unnest(...)`, no
//!    conflict handling, in as many transactions of at most 256 rows.
//! 3. **stream**: end to end: the events already in `varroa_builds` (a real nats-server), a
//!    recorder started (`varroa_recorder::start`, batches of 256), until `processed_events` holds
//!    them all.
//!
//! Environment: `VARROA_BENCH_BUILDS` (default 10000, i.e. 80,000 events), `VARROA_BENCH_RUNS`
//! (each phase this many times, the median reported; default 3). Prints a Markdown table for
//! docs/benchmarks.md.

use std::time::{Duration, Instant};

use async_nats::jetstream;
use jiff::{SignedDuration, Timestamp};
use tokio_postgres::types::ToSql;
use varroa_link::builds::{self, BuildEvent, BuildResult, EventBody, RecordedEvent, Stage};
use varroa_link::kv::ControllerKey;
use varroa_link::nats::ConnectSettings;
use varroa_link::testing::NatsServer;
use varroa_recorder::ingest::Writer;
use varroa_recorder::testing::PgServer;
use varroa_recorder::{ConsumerSettings, DbSettings, RecorderConfig, RetentionSettings};

const BATCH: usize = 256;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn event(job: &str, build: u64, kind: &str, ms: i64, body: EventBody) -> RecordedEvent {
    let t0: Timestamp = "2026-12-03T08:00:00Z".parse().expect("a timestamp");
    let time = t0 + SignedDuration::from_millis(ms);
    RecordedEvent {
        cluster: "bench".into(),
        namespace: "team-a".into(),
        controller: "ci".into(),
        cell: 0,
        received: time,
        event: BuildEvent {
            v: 1,
            id: format!("{job}#{build}:{kind}"),
            time,
            job: job.into(),
            build: Some(build),
            body,
        },
    }
}

fn stage(id: &str, name: &str, result: Option<BuildResult>, duration_ms: Option<u64>) -> Stage {
    Stage { id: id.into(), name: name.into(), started: None, result, duration_ms }
}

fn events(builds: usize) -> Vec<RecordedEvent> {
    let mut out = Vec::with_capacity(builds * 8);
    for i in 0..builds {
        let job = format!("team/app-{}", i % 100);
        let b = (i / 100 + 1) as u64;
        let base = i as i64 * 10_000;
        out.push(event(&job, b, "queued", base, EventBody::Queued { trigger: Some("timer".into()) }));
        out.push(event(&job, b, "started", base + 1, EventBody::Started { cause: Some("timer".into()), node: None }));
        for (n, (id, name)) in [("3", "Build"), ("7", "Test")].into_iter().enumerate() {
            let t = base + 2 + n as i64 * 2;
            let s = format!("stage_started:{id}");
            out.push(event(&job, b, &s, t, EventBody::StageStarted { stage: stage(id, name, None, None) }));
            let f = format!("stage_finished:{id}");
            let done = stage(id, name, Some(BuildResult::Success), Some(1000));
            out.push(event(&job, b, &f, t + 1, EventBody::StageFinished { stage: done }));
        }
        let tests = EventBody::TestSummary { total: 100, failed: 0, skipped: 3, duration_ms: Some(900) };
        out.push(event(&job, b, "test_summary", base + 7, tests));
        let end = EventBody::Finished { result: BuildResult::Success, duration_ms: 7000 };
        out.push(event(&job, b, "finished", base + 8, end));
    }
    out
}

async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.expect("connect");
    tokio::spawn(conn);
    client
}

async fn fresh(pg: &PgServer, name: &str) -> (String, tokio_postgres::Client) {
    let url = pg.create_database(name).await.expect("create database");
    let mut c = connect(&url).await;
    varroa_recorder::migrate::migrate(&mut c).await.expect("migrate");
    (url, c)
}

async fn rows(c: &tokio_postgres::Client) -> i64 {
    let sql = "SELECT (SELECT count(*) FROM processed_events) + (SELECT count(*) FROM runs) \
               + (SELECT count(*) FROM stages) + (SELECT count(*) FROM test_summaries)";
    c.query_one(sql, &[]).await.expect("count").get(0)
}

async fn writer_phase(pg: &PgServer, name: &str, events: &[RecordedEvent]) -> (Duration, i64) {
    let (url, c) = fresh(pg, name).await;
    let mut w = Writer::new(c).await.expect("writer");
    let start = Instant::now();
    for chunk in events.chunks(BATCH) {
        w.apply(chunk).await.expect("apply");
    }
    let took = start.elapsed();
    (took, rows(&connect(&url).await).await)
}

/// The floor: the same final rows, plain batched INSERTs.
async fn raw_phase(pg: &PgServer, name: &str, events: &[RecordedEvent], builds: usize) -> (Duration, i64) {
    let (_, mut c) = fresh(pg, name).await;
    let ids: Vec<String> = events.iter().map(RecordedEvent::msg_id).collect();
    let keys: Vec<(String, i64)> =
        (0..builds).map(|i| (format!("team/app-{}", i % 100), (i / 100 + 1) as i64)).collect();
    let t: Timestamp = "2026-12-03T08:00:00Z".parse().expect("a timestamp");
    let start = Instant::now();
    for chunk in ids.chunks(BATCH) {
        let tx = c.transaction().await.expect("tx");
        tx.execute("INSERT INTO processed_events (msg_id) SELECT * FROM unnest($1::text[])", &[&chunk])
            .await
            .expect("ids");
        tx.commit().await.expect("commit");
    }
    for chunk in keys.chunks(BATCH) {
        let jobs: Vec<&str> = chunk.iter().map(|k| k.0.as_str()).collect();
        let nums: Vec<i64> = chunk.iter().map(|k| k.1).collect();
        let n = chunk.len();
        let (ts, cells, res, dur) = (vec![t; n], vec![0i32; n], vec!["SUCCESS"; n], vec![7000i64; n]);
        let tx = c.transaction().await.expect("tx");
        let params: [&(dyn ToSql + Sync); 9] = [&jobs, &nums, &cells, &ts, &ts, &ts, &res, &dur, &vec!["timer"; n]];
        tx.execute(
            "INSERT INTO runs (cluster, namespace, controller, job, build, cell, queued_at, started_at, finished_at, result, duration_ms, trigger) \
             SELECT 'bench', 'team-a', 'ci', * FROM unnest($1::text[], $2::int8[], $3::int4[], $4::timestamptz[], $5::timestamptz[], \
                                                         $6::timestamptz[], $7::text[], $8::int8[], $9::text[])",
            &params,
        )
        .await
        .expect("runs");
        let params: [&(dyn ToSql + Sync); 4] = [&jobs, &nums, &ts, &dur];
        tx.execute(
            "INSERT INTO test_summaries (cluster, namespace, controller, job, build, total, failed, skipped, duration_ms, event_time) \
             SELECT 'bench', 'team-a', 'ci', j, b, 100, 0, 3, d, t FROM unnest($1::text[], $2::int8[], $3::timestamptz[], $4::int8[]) AS u(j, b, t, d)",
            &params,
        )
        .await
        .expect("tests");
        tx.commit().await.expect("commit");
    }
    let stage_keys: Vec<(&str, i64, &str)> =
        keys.iter().flat_map(|k| [(k.0.as_str(), k.1, "3"), (k.0.as_str(), k.1, "7")]).collect();
    for chunk in stage_keys.chunks(BATCH) {
        let jobs: Vec<&str> = chunk.iter().map(|k| k.0).collect();
        let nums: Vec<i64> = chunk.iter().map(|k| k.1).collect();
        let sids: Vec<&str> = chunk.iter().map(|k| k.2).collect();
        let ts = vec![t; chunk.len()];
        let tx = c.transaction().await.expect("tx");
        let params: [&(dyn ToSql + Sync); 4] = [&jobs, &nums, &sids, &ts];
        tx.execute(
            "INSERT INTO stages (cluster, namespace, controller, job, build, stage_id, name, started_at, result, duration_ms) \
             SELECT 'bench', 'team-a', 'ci', j, b, s, 'stage', t, 'SUCCESS', 1000 FROM unnest($1::text[], $2::int8[], $3::text[], $4::timestamptz[]) AS u(j, b, s, t)",
            &params,
        )
        .await
        .expect("stages");
        tx.commit().await.expect("commit");
    }
    let took = start.elapsed();
    (took, rows(&c).await)
}

async fn stream_phase(pg: &PgServer, name: &str, events: &[RecordedEvent]) -> (Duration, i64) {
    let (url, c) = fresh(pg, name).await;
    let nats = NatsServer::start().expect("nats-server");
    let nc = async_nats::connect(nats.url()).await.expect("nats");
    let js = jetstream::new(nc);
    builds::open_stream(&js, 1).await.expect("stream");
    for chunk in events.chunks(500) {
        let mut acks = Vec::with_capacity(chunk.len());
        for e in chunk {
            let key = ControllerKey::new(&e.namespace, &e.controller).expect("key");
            let mut headers = async_nats::HeaderMap::new();
            headers.insert(async_nats::header::NATS_MESSAGE_ID, e.msg_id().as_str());
            let payload = serde_json::to_vec(e).expect("json");
            acks.push(
                js.publish_with_headers(builds::subject(&e.cluster, &key), headers, payload.into())
                    .await
                    .expect("publish"),
            );
        }
        for a in acks {
            a.await.expect("stored");
        }
    }
    let config = RecorderConfig {
        database: DbSettings { url, password_file: None, application_name: "varroa-recorder bench".into() },
        nats: ConnectSettings {
            url: nats.url(),
            credentials_file: None,
            name: "varroa-recorder bench".into(),
            max_reconnect_delay: Duration::from_secs(1),
        },
        health_listen: "127.0.0.1:0".parse().expect("address"),
        consumers: ConsumerSettings { batch_size: BATCH, ack_wait: Duration::from_secs(30), stream_replicas: 1 },
        retention: RetentionSettings::default(),
    };
    let start = Instant::now();
    let r = varroa_recorder::start(config).await.expect("recorder");
    let want = events.len() as i64;
    loop {
        let n: i64 = c.query_one("SELECT count(*) FROM processed_events", &[]).await.expect("count").get(0);
        if n >= want {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(600), "the recorder did not finish");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = start.elapsed();
    r.shutdown().await;
    (took, rows(&c).await)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    let builds = env("VARROA_BENCH_BUILDS", 10_000);
    let runs = env("VARROA_BENCH_RUNS", 3).max(1);
    let pg = tokio::task::spawn_blocking(PgServer::start).await.expect("join").expect("PostgreSQL");
    let events = events(builds);
    let mut results: Vec<(&str, Vec<f64>, Vec<f64>, i64)> = Vec::new();
    for phase in ["writer", "raw", "stream"] {
        let (mut per_event, mut per_row, mut total_rows) = (Vec::new(), Vec::new(), 0);
        for run in 0..runs {
            let name = format!("{phase}_{run}");
            let (took, rows) = match phase {
                "writer" => writer_phase(&pg, &name, &events).await,
                "raw" => raw_phase(&pg, &name, &events, builds).await,
                _ => stream_phase(&pg, &name, &events).await,
            };
            let secs = took.as_secs_f64();
            eprintln!("{phase} run {run}: {secs:.2} s, {rows} rows");
            per_event.push(events.len() as f64 / secs);
            per_row.push(rows as f64 / secs);
            total_rows = rows;
        }
        results.push((phase, per_event, per_row, total_rows));
    }
    println!("\n{} builds, {} events, batches of {BATCH}, median of {runs} runs\n", builds, events.len());
    println!("| phase | events/s | rows/s | rows |");
    println!("|---|---:|---:|---:|");
    for (phase, e, r, rows) in results {
        let events_s = if phase == "raw" { "-".to_owned() } else { format!("{:.0}", median(e)) };
        println!("| {phase} | {events_s} | {:.0} | {rows} |", median(r));
    }
}
