//! What the recorder's tests share: a real PostgreSQL and a real nats-server per test, events
//! published as the gateway publishes them, the rows a user would query, and condition waits.
#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

use async_nats::jetstream;
use jiff::{SignedDuration, Timestamp};
use varroa_link::builds::{self, BuildEvent, BuildResult, EventBody, RecordedEvent, Schedule, Stage};
use varroa_link::kv::ControllerKey;
use varroa_link::nats::ConnectSettings;
use varroa_link::testing::NatsServer;
use varroa_recorder::testing::PgServer;
use varroa_recorder::{ConsumerSettings, DbSettings, RecorderConfig, RetentionSettings, RunningRecorder};

/// How long a condition may take to become true.
pub const DEADLINE: Duration = Duration::from_secs(90);

/// Polls `f` until it returns `Some`, or panics naming `what` after [`DEADLINE`].
pub async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// A PostgreSQL and a NATS of this test's own, the builds stream created as the gateway does.
pub struct Harness {
    pub pg: PgServer,
    pub nats: NatsServer,
    pub db_url: String,
    pub nc: async_nats::Client,
    pub js: jetstream::Context,
}

pub async fn connect(url: &str) -> Option<tokio_postgres::Client> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.ok()?;
    tokio::spawn(conn);
    Some(client)
}

impl Harness {
    pub async fn start() -> Harness {
        // RUST_LOG=varroa_recorder=debug shows what the recorder does.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
            .with_test_writer()
            .try_init();
        let pg = tokio::task::spawn_blocking(PgServer::start).await.unwrap().expect("PostgreSQL fixture");
        let db_url = pg.create_database("records").await.unwrap();
        let nats = NatsServer::start().expect("nats-server fixture");
        let nc = async_nats::connect(nats.url()).await.unwrap();
        let js = jetstream::new(nc.clone());
        builds::open_stream(&js, 1).await.unwrap();
        Harness { pg, nats, db_url, nc, js }
    }

    /// The recorder's configuration for this harness (health on a free port, batches of 256).
    pub fn config(&self) -> RecorderConfig {
        RecorderConfig {
            database: DbSettings {
                url: self.db_url.clone(),
                password_file: None,
                application_name: "varroa-recorder test".into(),
            },
            nats: ConnectSettings {
                url: self.nats.url(),
                credentials_file: None,
                name: "varroa-recorder test".into(),
                max_reconnect_delay: Duration::from_millis(500),
            },
            health_listen: "127.0.0.1:0".parse().unwrap(),
            consumers: ConsumerSettings { batch_size: 256, ack_wait: Duration::from_secs(30), stream_replicas: 1 },
            retention: RetentionSettings::default(),
        }
    }

    /// Starts a recorder with [`Harness::config`] changed by `change`, and waits until it is ready.
    pub async fn recorder(&self, change: impl FnOnce(&mut RecorderConfig)) -> RunningRecorder {
        let mut config = self.config();
        change(&mut config);
        let r = varroa_recorder::start(config).await.unwrap();
        wait_ready(&r).await;
        r
    }

    /// A session on the records database (a new one each time: PostgreSQL may have restarted).
    pub async fn db(&self) -> Option<tokio_postgres::Client> {
        connect(&self.db_url).await
    }

    /// `SELECT count(*) ...` on the records database; `None` while PostgreSQL is away.
    pub async fn count(&self, sql: &str) -> Option<i64> {
        let c = self.db().await?;
        c.query_one(sql, &[]).await.ok().map(|r| r.get(0))
    }

    /// Waits until `processed_events` holds `n` ids.
    pub async fn wait_processed(&self, n: i64) {
        eventually(&format!("{n} events recorded"), || async {
            (self.count("SELECT count(*) FROM processed_events").await? == n).then_some(())
        })
        .await
    }

    /// Publishes as the gateway does (subject of the controller, `Nats-Msg-Id` the scoped id),
    /// every publish first, then every acknowledgement. Retries what NATS did not take.
    pub async fn publish(&self, events: &[RecordedEvent]) {
        publish_raw_to(&self.js, &raw_of(events)).await
    }

    /// [`Harness::publish`] with the message ids given.
    pub async fn publish_with_ids(&self, events: &[(RecordedEvent, String)]) {
        let raw: Vec<(String, Vec<u8>, String)> =
            events.iter().map(|(e, id)| (subject_of(e), serde_json::to_vec(e).unwrap(), id.clone())).collect();
        publish_raw_to(&self.js, &raw).await
    }

    /// Publishes `(subject, payload, msg id)` triples.
    pub async fn publish_raw(&self, messages: &[(String, Vec<u8>, String)]) {
        publish_raw_to(&self.js, messages).await
    }

    /// Publishes `events` in the background, `chunk` at a time with `pause` between chunks (a
    /// steady stream for the fault tests), retrying what NATS did not take.
    pub fn publish_paced(
        &self,
        events: &[RecordedEvent],
        chunk: usize,
        pause: Duration,
    ) -> tokio::task::JoinHandle<()> {
        let (js, raw) = (self.js.clone(), raw_of(events));
        tokio::spawn(async move {
            for part in raw.chunks(chunk) {
                publish_raw_to(&js, part).await;
                tokio::time::sleep(pause).await;
            }
        })
    }
}

/// `(subject, payload, msg id)` of events, as the gateway publishes them.
pub fn raw_of(events: &[RecordedEvent]) -> Vec<(String, Vec<u8>, String)> {
    events.iter().map(|e| (subject_of(e), serde_json::to_vec(e).unwrap(), e.msg_id())).collect()
}

/// Publishes `(subject, payload, msg id)` triples to the stream, retrying until JetStream
/// acknowledges each (a retried publish that was stored after all is dropped by the stream's
/// duplicate window).
pub async fn publish_raw_to(js: &jetstream::Context, messages: &[(String, Vec<u8>, String)]) {
    for chunk in messages.chunks(500) {
        let mut left: Vec<&(String, Vec<u8>, String)> = chunk.iter().collect();
        let deadline = tokio::time::Instant::now() + DEADLINE;
        while !left.is_empty() {
            assert!(tokio::time::Instant::now() < deadline, "JetStream did not take the events");
            let mut pending = Vec::new();
            for m in &left {
                let mut headers = async_nats::HeaderMap::new();
                headers.insert(async_nats::header::NATS_MESSAGE_ID, m.2.as_str());
                pending.push(js.publish_with_headers(m.0.clone(), headers, m.1.clone().into()).await);
            }
            // Together: each acknowledgement lost with a restarting server times out on its own.
            let acked = futures::future::join_all(pending.into_iter().map(|p| async move {
                match p {
                    Ok(ack) => ack.await.is_ok(),
                    Err(_) => false,
                }
            }))
            .await;
            let again: Vec<_> = left.iter().zip(acked).filter(|(_, ok)| !ok).map(|(m, _)| *m).collect();
            if !again.is_empty() {
                // NATS is away (a fault test): try again shortly.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            left = again;
        }
    }
}

/// `GET path` on a plain-HTTP server: the status code and the body.
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes()).await.ok()?;
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut raw)).await.ok()?.ok()?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let body =
        if head.to_ascii_lowercase().contains("transfer-encoding: chunked") { unchunk(body) } else { body.to_owned() };
    Some((status, body))
}

fn unchunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else { break };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// Waits until `/readyz` at `addr` answers 200.
pub async fn wait_ready_at(addr: std::net::SocketAddr) {
    eventually("the recorder is ready", || async { (http_get(addr, "/readyz").await?.0 == 200).then_some(()) }).await;
}

/// Waits until `/readyz` of the recorder is 200.
pub async fn wait_ready(r: &RunningRecorder) {
    wait_ready_at(r.health_addr).await
}

/// `/metrics` of a recorder at `addr`.
pub async fn metrics_text(addr: std::net::SocketAddr) -> String {
    http_get(addr, "/metrics").await.expect("/metrics answers").1
}

/// The value of the sample `line` (the name with its labels) in a `/metrics` text, 0 if absent.
pub fn sample(text: &str, line: &str) -> f64 {
    text.lines().find_map(|l| l.strip_prefix(line).and_then(|rest| rest.trim().parse::<f64>().ok())).unwrap_or(0.0)
}

pub fn subject_of(e: &RecordedEvent) -> String {
    builds::subject(&e.cluster, &ControllerKey::new(&e.namespace, &e.controller).unwrap())
}

/// Where events come from: what the gateway stamps.
#[derive(Debug, Clone)]
pub struct Stamp {
    pub cluster: String,
    pub namespace: String,
    pub controller: String,
}

pub fn stamp(cluster: &str, namespace: &str, controller: &str) -> Stamp {
    Stamp { cluster: cluster.into(), namespace: namespace.into(), controller: controller.into() }
}

pub fn t0() -> Timestamp {
    "2026-12-03T08:00:00Z".parse().unwrap()
}

pub fn at(t: Timestamp, ms: i64) -> Timestamp {
    t + SignedDuration::from_millis(ms)
}

pub fn recorded(s: &Stamp, cell: u32, event: BuildEvent) -> RecordedEvent {
    RecordedEvent {
        cluster: s.cluster.clone(),
        namespace: s.namespace.clone(),
        controller: s.controller.clone(),
        cell,
        received: event.time,
        event,
    }
}

fn event(job: &str, build: Option<u64>, id: String, time: Timestamp, body: EventBody) -> BuildEvent {
    BuildEvent { v: 1, id, time, job: job.into(), build, body }
}

/// The eight events of one build, in the order the plugin sends them: queued, started, two
/// stages (the first `stage_started` names the stage differently and a little later than its
/// `stage_finished`, the second `stage_finished` carries no start time), a test summary and
/// the end (UNSTABLE, 6 s). `cell` sends the `started`; the others come from cell `cell + 1`.
pub fn build_events(s: &Stamp, job: &str, number: u64, cell: u32, t: Timestamp) -> Vec<RecordedEvent> {
    let id = |kind: &str| format!("{job}#{number}:{kind}");
    let b = Some(number);
    let other = cell + 1;
    vec![
        recorded(s, other, event(job, b, id("queued"), t, EventBody::Queued { trigger: Some("timer".into()) })),
        recorded(
            s,
            cell,
            event(
                job,
                b,
                id("started"),
                at(t, 1000),
                EventBody::Started { cause: Some("Started by timer".into()), node: Some("agent-1".into()) },
            ),
        ),
        recorded(
            s,
            other,
            event(
                job,
                b,
                id("stage_started:3"),
                at(t, 2100),
                EventBody::StageStarted {
                    stage: Stage {
                        id: "3".into(),
                        name: "Build (starting)".into(),
                        started: Some(at(t, 2100)),
                        result: None,
                        duration_ms: None,
                    },
                },
            ),
        ),
        recorded(
            s,
            other,
            event(
                job,
                b,
                id("stage_finished:3"),
                at(t, 3000),
                EventBody::StageFinished {
                    stage: Stage {
                        id: "3".into(),
                        name: "Build".into(),
                        started: Some(at(t, 2000)),
                        result: Some(BuildResult::Success),
                        duration_ms: Some(1000),
                    },
                },
            ),
        ),
        recorded(
            s,
            other,
            event(
                job,
                b,
                id("stage_started:7"),
                at(t, 3000),
                EventBody::StageStarted {
                    stage: Stage {
                        id: "7".into(),
                        name: "Test".into(),
                        started: None,
                        result: None,
                        duration_ms: None,
                    },
                },
            ),
        ),
        recorded(
            s,
            other,
            event(
                job,
                b,
                id("stage_finished:7"),
                at(t, 5000),
                EventBody::StageFinished {
                    stage: Stage {
                        id: "7".into(),
                        name: "Test".into(),
                        started: None,
                        result: Some(BuildResult::Unstable),
                        duration_ms: Some(2000),
                    },
                },
            ),
        ),
        recorded(
            s,
            other,
            event(
                job,
                b,
                id("test_summary"),
                at(t, 5500),
                EventBody::TestSummary { total: 10, failed: 1, skipped: 2, duration_ms: Some(1500) },
            ),
        ),
        recorded(
            s,
            other,
            event(
                job,
                b,
                id("finished"),
                at(t, 6000),
                EventBody::Finished { result: BuildResult::Unstable, duration_ms: 6000 },
            ),
        ),
    ]
}

/// A `job_schedule` event of `job` at `time` with one cron spec.
pub fn schedule_event(s: &Stamp, job: &str, n: u32, time: Timestamp, spec: &str) -> RecordedEvent {
    recorded(
        s,
        0,
        event(
            job,
            None,
            format!("{job}:schedule:{n}"),
            time,
            EventBody::JobSchedule {
                schedules: vec![Schedule { trigger: "cron".into(), spec: spec.into(), next: Some(at(time, 60_000)) }],
            },
        ),
    )
}

/// `builds` builds of `jobs` jobs of a controller, and two schedule changes per job (the later
/// one wins whatever the order).
pub fn many_builds(s: &Stamp, jobs: usize, builds: u64) -> Vec<RecordedEvent> {
    let mut out = Vec::new();
    for j in 0..jobs {
        let job = format!("team/app-{j}");
        for b in 1..=builds {
            out.extend(build_events(s, &job, b, (b % 3) as u32, at(t0(), (b as i64) * 60_000)));
        }
        out.push(schedule_event(s, &job, 1, at(t0(), 1000), "H/15 * * * *"));
        out.push(schedule_event(s, &job, 2, at(t0(), 2000), "H 2 * * *"));
    }
    out
}

/// A small deterministic shuffle (xorshift), so that a failure can be replayed.
pub fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut x = seed.max(1);
    for i in (1..items.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        items.swap(i, (x % (i as u64 + 1)) as usize);
    }
}

/// The rows a user would query, as JSON lines sorted (without `recorded_at`, which is the
/// recorder's clock), optionally of one controller and without its name (to compare two).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dump {
    pub runs: Vec<String>,
    pub stages: Vec<String>,
    pub tests: Vec<String>,
    pub schedules: Vec<String>,
}

pub async fn dump(c: &tokio_postgres::Client, controller: Option<&str>) -> Dump {
    let cols = |list: &str| if controller.is_some() { list.replace("controller, ", "") } else { list.to_owned() };
    let q = |table: &str, list: &str| {
        format!(
            "SELECT row_to_json(t)::text FROM (SELECT {} FROM {table} WHERE ($1::text IS NULL OR controller = $1)) t ORDER BY 1",
            cols(list)
        )
    };
    let rows = |sql: String| async move {
        c.query(&sql, &[&controller]).await.unwrap().iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>()
    };
    Dump {
        runs: rows(q(
            "runs",
            "cluster, namespace, controller, job, build, cell, trigger, cause, node, queued_at, started_at, finished_at, result, duration_ms, status",
        ))
        .await,
        stages: rows(q(
            "stages",
            "cluster, namespace, controller, job, build, stage_id, name, started_at, result, duration_ms",
        ))
        .await,
        tests: rows(q(
            "test_summaries",
            "cluster, namespace, controller, job, build, total, failed, skipped, duration_ms, event_time",
        ))
        .await,
        schedules: rows(q("job_schedules", "cluster, namespace, controller, job, schedules, event_time")).await,
    }
}

/// The rows `events` give when applied straight to a fresh database of `pg` in one batch
/// through the recorder's writer: the oracle the stream tests compare with.
pub async fn reference(pg: &PgServer, name: &str, events: &[RecordedEvent]) -> Dump {
    let url = pg.create_database(name).await.unwrap();
    let mut c = connect(&url).await.unwrap();
    varroa_recorder::migrate::migrate(&mut c).await.unwrap();
    let mut w = varroa_recorder::ingest::Writer::new(c).await.unwrap();
    w.apply(events).await.unwrap();
    let c = connect(&url).await.unwrap();
    dump(&c, None).await
}
