//! The data plane's throughput benchmark (`cargo bench -p varroa-operator --bench dataplane`):
//! how fast build events and console logs go from the plugin through the mite and the gateway
//! into their stores, each against the cheapest way to put the same bytes in the same store, in
//! the same run.
//!
//! Every measurement starts a world of its own: a real nats-server (`NatsServer`, JetStream), the
//! real gateway in-process (`varroa_gateway::start_with`, mutual TLS with certificates from
//! varroa-pki, a `file://` log store in a tempdir), the Jenkins double as the mite's Jenkins, and
//! the real mite in-process (`varroa_mite::link::start`: its plugin listener on loopback, its gRPC
//! stream to the gateway). A plain HTTP client (reqwest, keep-alive) plays the plugin. Build events
//! are also followed into a real PostgreSQL (`PgServer`, `fsync=off`, one fresh database per
//! measurement) by a recorder in-process (`varroa_recorder::start`, batches of 256), started and
//! ready before the first request. Everything runs on one tokio runtime (two workers on the
//! development VM); nats-server and PostgreSQL are processes of their own.
//!
//! 1. **Build events**: `VARROA_BENCH_EVENTS` (20,000) events of whole builds (queued, started,
//!    two stages started and finished, a test summary, finished: eight per build, over 100 jobs),
//!    posted to the mite's `POST /v1/events` in requests of 500, each sender sending its builds'
//!    events oldest first and the next request only after the previous one's `200`. Measured with
//!    one sender (one request in flight: how the plugin sends) and with four senders owning
//!    disjoint builds (four requests in flight: the gateway's bound per stream). Reported: events/s
//!    until the last `200` (stored in JetStream, acknowledged to the plugin), and until
//!    `processed_events` holds them all (in PostgreSQL). The floor: the same events as the gateway
//!    stores them (`RecordedEvent` JSON, `Nats-Msg-Id`, on `varroa.builds.bench.team-a.ci`)
//!    published straight to JetStream into `varroa_link::builds::stream_config` on a fresh
//!    nats-server, the same batches of 500 (every publish pipelined, then every ack awaited, as the
//!    gateway does) and the same senders; the same recorder reading them into a fresh database.
//! 2. **Console logs**: `VARROA_BENCH_LOG_MIB` (64) MiB of log text as four builds' logs sent at
//!    once, each chunk by chunk in order (`POST /v1/logs/team/app-N/1?offset=N`, `final=true` on the
//!    last), the next chunk of a build only after the previous one's `200`: in chunks of 256 KiB
//!    and of 16 KiB. Reported: MiB/s until every log is complete in the store. The floor: the same
//!    chunks written straight with object_store (`LocalFileSystem` with fsync, `PutMode::Create`,
//!    the same paths, the `complete` marker after the last) into a fresh tempdir, the same four
//!    writers; and, between the two, varroa_blobs' `LogWriter::write_chunk` (the gateway's own
//!    writer) without the mite and the gateway around it.
//!
//! A `503` is waited out as the plugin does (`Retry-After`) and counted; none is expected (the
//! senders never exceed the four in flight the mite and the gateway allow). Every measurement is
//! checked afterwards: the stream's message count, `processed_events` and `runs`, each log's
//! stored length and marker. `VARROA_BENCH_RUNS` (3): each measurement this many times in turns
//! (floor, then Varroa), the median reported. Prints a Markdown table for docs/benchmarks.md, with
//! the machine's CPUs and load average before and after.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use async_nats::jetstream;
use bytes::Bytes;
use jiff::{SignedDuration, Timestamp};
use object_store::path::{Path as ObjectPath, PathPart};
use object_store::{ObjectStore, ObjectStoreExt};
use varroa_blobs::logs::{LogKey, LogWriter, Logs};
use varroa_blobs::{BlobStore, StoreSettings};
use varroa_gateway::{GatewayConfig, GatewayOptions, RunningGateway, TlsFiles};
use varroa_jenkins_double::{JenkinsDouble, Options};
use varroa_link::builds::{self, BuildEvent, BuildResult, EventBody, RecordedEvent, Stage};
use varroa_link::kv::ControllerKey;
use varroa_link::nats::ConnectSettings;
use varroa_link::testing::NatsServer;
use varroa_mite::link::MiteHandle;
use varroa_mite::settings::RunSettings;
use varroa_pki::{CertificateAuthority, MiteIdentity};
use varroa_recorder::testing::PgServer;
use varroa_recorder::{ConsumerSettings, DbSettings, RecorderConfig, RetentionSettings, RunningRecorder};

const CLUSTER: &str = "bench";
const NS: &str = "team-a";
const CTRL: &str = "ci";
/// Events per request (the protocol's most, as the plugin fills them).
const BATCH: usize = builds::MAX_EVENTS_PER_BATCH;
/// Builds whose logs are sent at once.
const LOG_BUILDS: usize = 4;
const DAY: Duration = Duration::from_secs(86_400);
/// Anything slower than this is a failure, not a figure.
const TIMEOUT: Duration = Duration::from_secs(600);
const TOKEN: &str = "0123456789abcdef0123456789abcdef";

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

// ---------------------------------------------------------------------------------------------
// The events.

fn event(job: &str, build: u64, kind: &str, ms: i64, body: EventBody) -> BuildEvent {
    let t0: Timestamp = "2026-12-03T08:00:00Z".parse().expect("a timestamp");
    BuildEvent {
        v: 1,
        id: format!("{job}#{build}:{kind}"),
        time: t0 + SignedDuration::from_millis(ms),
        job: job.into(),
        build: Some(build),
        body,
    }
}

fn stage(id: &str, name: &str, result: Option<BuildResult>, duration_ms: Option<u64>) -> Stage {
    Stage { id: id.into(), name: name.into(), started: None, result, duration_ms }
}

/// The events of `builds` whole builds, as the plugin sends them (each build's in order).
fn build_events(builds: usize) -> Vec<Vec<BuildEvent>> {
    (0..builds)
        .map(|i| {
            let job = format!("team/app-{}", i % 100);
            let b = (i / 100 + 1) as u64;
            let base = i as i64 * 10_000;
            let mut out = Vec::with_capacity(8);
            out.push(event(&job, b, "queued", base, EventBody::Queued { trigger: Some("timer".into()) }));
            out.push(event(
                &job,
                b,
                "started",
                base + 1,
                EventBody::Started { cause: Some("timer".into()), node: None },
            ));
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
            out
        })
        .collect()
}

/// `n` events (whole builds, the last one cut if `n` is no multiple of eight) split among
/// `senders`, each sender owning whole builds; each sender's events in requests of [`BATCH`].
fn workload(n: usize, senders: usize) -> Vec<Vec<Vec<BuildEvent>>> {
    let all = build_events(n.div_ceil(8));
    let per = all.len().div_ceil(senders);
    let mut left = n;
    all.chunks(per.max(1))
        .map(|builds| {
            let mut events: Vec<BuildEvent> = builds.iter().flatten().cloned().collect();
            events.truncate(left);
            left -= events.len();
            events.chunks(BATCH).map(<[BuildEvent]>::to_vec).collect()
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The world: nats-server, the gateway, the Jenkins double, the mite.

struct World {
    nats: NatsServer,
    gw: RunningGateway,
    mite: MiteHandle,
    _jenkins: JenkinsDouble,
    plugin: SocketAddr,
    token: String,
    log_store: StoreSettings,
    dir: tempfile::TempDir,
}

impl World {
    async fn start() -> World {
        let dir = tempfile::tempdir().expect("a tempdir");
        let d = dir.path();
        let ca = CertificateAuthority::generate("varroa bench gateway CA", DAY).expect("a CA");
        let server = ca.issue_server(&["localhost".into()], DAY, SystemTime::now()).expect("a server certificate");
        let tls = TlsFiles { cert: d.join("tls.crt"), key: d.join("tls.key"), ca: d.join("ca.crt") };
        std::fs::write(&tls.cert, &server.cert_pem).expect("write tls.crt");
        std::fs::write(&tls.key, &server.key_pem).expect("write tls.key");
        std::fs::write(&tls.ca, ca.cert_pem()).expect("write ca.crt");
        let nats = NatsServer::start().expect("nats-server (make deps installs it)");
        let log_store = StoreSettings::new(format!("file://{}", d.join("log-store").display()));
        let config = GatewayConfig {
            listen: "127.0.0.1:0".parse().expect("an address"),
            health_listen: "127.0.0.1:0".parse().expect("an address"),
            tls,
            nats: connect_settings(&nats, "varroa-gateway/bench"),
            bucket_replicas: 1,
            options: GatewayOptions {
                replica: "varroa-gateway-bench".into(),
                heartbeat_interval: Duration::from_secs(5),
                hello_timeout: Duration::from_secs(10),
                cluster: CLUSTER.into(),
                max_streams: 100,
            },
        };
        let gw = varroa_gateway::start_with(config, Some(log_store.clone())).await.expect("the gateway starts");
        let ready = gw.readiness.clone();
        until("the gateway is ready", || ready.is_ready()).await;

        let casc = d.join("casc");
        std::fs::create_dir(&casc).expect("mkdir casc");
        std::fs::write(casc.join("jenkins.yaml"), "jenkins:\n  systemMessage: bench\n").expect("write jenkins.yaml");
        std::fs::write(d.join("jenkins-token"), format!("{TOKEN}\n")).expect("write the Jenkins token");
        let jenkins = JenkinsDouble::start(Options {
            api_token: Some(TOKEN.into()),
            casc_config: Some(casc.display().to_string()),
            version: "2.479.3".into(),
            ..Default::default()
        })
        .await
        .expect("the Jenkins double starts");

        let m = d.join("mite");
        std::fs::create_dir(&m).expect("mkdir mite");
        let cert = ca.issue_mite(&MiteIdentity::new(NS, CTRL), DAY, SystemTime::now()).expect("a mite certificate");
        std::fs::write(m.join("tls.crt"), &cert.cert_pem).expect("write the mite's tls.crt");
        std::fs::write(m.join("tls.key"), &cert.key_pem).expect("write the mite's tls.key");
        std::fs::write(m.join("ca.crt"), ca.cert_pem()).expect("write the mite's ca.crt");
        let settings = RunSettings {
            namespace: NS.into(),
            controller: CTRL.into(),
            cell: 0,
            gateway_url: format!("https://{}", gw.grpc_addr),
            gateway_server_name: Some("localhost".into()),
            tls_cert: m.join("tls.crt"),
            tls_key: m.join("tls.key"),
            tls_ca: m.join("ca.crt"),
            jenkins_url: jenkins.url(),
            jenkins_user: "admin".into(),
            jenkins_token_file: d.join("jenkins-token"),
            jenkins_timeout: Duration::from_secs(5),
            casc_dir: casc,
            // Observations and drift checks are not what is measured: rarely.
            observe_interval: Duration::from_secs(30),
            drift_interval: Duration::from_secs(3600),
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
            health_listen: None,
            plugin_listen: Some("127.0.0.1:0".parse().expect("an address")),
            plugin_token_file: d.join("plugin").join("token"),
        };
        let mite = varroa_mite::link::start(settings.clone()).await.expect("the mite starts");
        until("the mite's stream is up", || mite.status().connected).await;
        let token = std::fs::read_to_string(&settings.plugin_token_file).expect("the plugin token");
        let plugin = mite.plugin_addr.expect("the plugin listener");
        World { nats, gw, mite, _jenkins: jenkins, plugin, token: token.trim().to_owned(), log_store, dir }
    }

    async fn stop(self) {
        self.mite.shutdown().await;
        self.gw.shutdown().await;
        drop(self.nats);
        drop(self.dir);
    }
}

fn connect_settings(nats: &NatsServer, name: &str) -> ConnectSettings {
    ConnectSettings {
        url: nats.url(),
        credentials_file: None,
        name: name.into(),
        max_reconnect_delay: Duration::from_millis(500),
    }
}

async fn until(what: &str, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < Duration::from_secs(30), "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn pg_connect(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.expect("connect to PostgreSQL");
    tokio::spawn(conn);
    client
}

/// A recorder on `nats` writing into a fresh database `name`, ready; and a client of it.
async fn recorder(pg: &PgServer, nats: &NatsServer, name: &str) -> (RunningRecorder, tokio_postgres::Client) {
    let url = pg.create_database(name).await.expect("create a database");
    let config = RecorderConfig {
        database: DbSettings {
            url: url.clone(),
            password_file: None,
            application_name: "varroa-recorder bench".into(),
        },
        nats: connect_settings(nats, "varroa-recorder/bench"),
        health_listen: "127.0.0.1:0".parse().expect("an address"),
        consumers: ConsumerSettings { batch_size: 256, ack_wait: Duration::from_secs(30), stream_replicas: 1 },
        retention: RetentionSettings::default(),
    };
    let r = varroa_recorder::start(config).await.expect("the recorder starts");
    let ready = r.readiness.clone();
    until("the recorder is ready", || ready.is_ready()).await;
    (r, pg_connect(&url).await)
}

async fn processed(c: &tokio_postgres::Client) -> i64 {
    c.query_one("SELECT count(*) FROM processed_events", &[]).await.expect("count processed_events").get(0)
}

/// Waits until `processed_events` holds `want` rows; then checks the rows.
async fn wait_recorded(c: &tokio_postgres::Client, want: usize, builds: usize, start: Instant) -> Duration {
    loop {
        let n = processed(c).await;
        if n >= want as i64 {
            break;
        }
        assert!(start.elapsed() < TIMEOUT, "the recorder did not finish: {n} of {want}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = start.elapsed();
    assert_eq!(processed(c).await, want as i64, "every event once in processed_events");
    let runs: i64 = c.query_one("SELECT count(*) FROM runs", &[]).await.expect("count runs").get(0);
    assert_eq!(runs, builds as i64, "one row per build");
    took
}

async fn stream_messages(js: &jetstream::Context) -> u64 {
    let mut s = js.get_stream(builds::STREAM).await.expect("the varroa_builds stream");
    s.info().await.expect("its info").state.messages
}

/// What one build-events measurement saw.
struct EventsRun {
    acked: Duration,
    recorded: Duration,
    retries: u64,
}

/// Through the mite and the gateway: `senders` plugins' worth of requests at once.
async fn events_varroa(pg: &PgServer, db: &str, n: usize, senders: usize) -> EventsRun {
    let w = World::start().await;
    let (rec, c) = recorder(pg, &w.nats, db).await;
    let work = workload(n, senders);
    let builds = n.div_ceil(8);
    let bodies: Vec<Vec<Bytes>> = work
        .iter()
        .map(|requests| {
            requests
                .iter()
                .map(|events| serde_json::to_vec(&serde_json::json!({ "events": events })).expect("JSON").into())
                .collect()
        })
        .collect();
    let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().expect("an HTTP client");
    let url = format!("http://{}/v1/events", w.plugin);
    let auth = format!("Bearer {}", w.token);
    let retries = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = bodies
        .into_iter()
        .map(|requests| {
            let (http, url, auth, retries) = (http.clone(), url.clone(), auth.clone(), retries.clone());
            tokio::spawn(async move {
                for body in requests {
                    loop {
                        let rsp = http
                            .post(&url)
                            .header("authorization", &auth)
                            .header("content-type", "application/json")
                            .body(body.clone())
                            .send()
                            .await
                            .expect("the mite answers");
                        let status = rsp.status().as_u16();
                        let retry_after = retry_after(&rsp);
                        let v: serde_json::Value = rsp.json().await.expect("a JSON answer");
                        match status {
                            200 => {
                                let rejected = v["rejected"].as_array().map_or(0, Vec::len);
                                assert_eq!(rejected, 0, "nothing rejected: {v}");
                                break;
                            }
                            503 => {
                                retries.fetch_add(1, Ordering::Relaxed);
                                tokio::time::sleep(retry_after).await;
                            }
                            _ => panic!("the mite answered {status}: {v}"),
                        }
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("a sender");
    }
    let acked = start.elapsed();
    let recorded = wait_recorded(&c, n, builds, start).await;
    let js = jetstream::new(async_nats::connect(w.nats.url()).await.expect("connect to NATS"));
    assert_eq!(stream_messages(&js).await, n as u64, "one message per event in varroa_builds");
    rec.shutdown().await;
    w.stop().await;
    EventsRun { acked, recorded, retries: retries.load(Ordering::Relaxed) }
}

fn retry_after(rsp: &reqwest::Response) -> Duration {
    let secs = rsp.headers().get("retry-after").and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
    Duration::from_secs(secs.unwrap_or(1))
}

/// The floor: the same events, as the gateway stores them, published straight to JetStream.
async fn events_floor(pg: &PgServer, db: &str, n: usize, senders: usize) -> EventsRun {
    let nats = NatsServer::start().expect("nats-server");
    let client = varroa_link::nats::connect(&connect_settings(&nats, "bench/floor")).await.expect("connect to NATS");
    let js = jetstream::new(client);
    js.get_or_create_stream(builds::stream_config(1)).await.expect("the varroa_builds stream");
    let (rec, c) = recorder(pg, &nats, db).await;
    let work = workload(n, senders);
    let builds = n.div_ceil(8);
    let subject = builds::subject(CLUSTER, &ControllerKey::new(NS, CTRL).expect("a controller key"));
    let start = Instant::now();
    let tasks: Vec<_> = work
        .into_iter()
        .map(|requests| {
            let (js, subject) = (js.clone(), subject.clone());
            tokio::spawn(async move {
                for events in requests {
                    // As the gateway stamps them.
                    let received = Timestamp::now();
                    let mut pending = Vec::with_capacity(events.len());
                    for event in events {
                        let r = RecordedEvent {
                            cluster: CLUSTER.into(),
                            namespace: NS.into(),
                            controller: CTRL.into(),
                            cell: 0,
                            received,
                            event,
                        };
                        let mut headers = async_nats::HeaderMap::new();
                        headers.insert(async_nats::header::NATS_MESSAGE_ID, r.msg_id().as_str());
                        let payload = Bytes::from(serde_json::to_vec(&r).expect("JSON"));
                        pending
                            .push(js.publish_with_headers(subject.clone(), headers, payload).await.expect("publish"));
                    }
                    for p in pending {
                        let ack = p.await.expect("stored");
                        assert!(!ack.duplicate, "no event twice");
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("a publisher");
    }
    let acked = start.elapsed();
    let recorded = wait_recorded(&c, n, builds, start).await;
    assert_eq!(stream_messages(&js).await, n as u64, "one message per event in varroa_builds");
    rec.shutdown().await;
    drop(js);
    drop(nats);
    EventsRun { acked, recorded, retries: 0 }
}

// ---------------------------------------------------------------------------------------------
// The logs.

/// `LOG_BUILDS` logs of `total / LOG_BUILDS` bytes each: console-like lines.
fn logs_text(total: usize) -> Vec<Bytes> {
    let each = total / LOG_BUILDS;
    (0..LOG_BUILDS)
        .map(|b| {
            let mut out = Vec::with_capacity(each + 128);
            let mut i = 0u64;
            while out.len() < each {
                out.extend_from_slice(
                    format!(
                        "[2026-12-03T08:00:{:02}.{:03}Z] build {b} step {i}: compiling module {i} of the project\n",
                        i % 60,
                        i % 1000
                    )
                    .as_bytes(),
                );
                i += 1;
            }
            out.truncate(each);
            Bytes::from(out)
        })
        .collect()
}

fn log_job(b: usize) -> String {
    format!("team/app-{b}")
}

/// Through the mite and the gateway: each build's chunks in order, the builds at once.
async fn logs_varroa(logs: &[Bytes], chunk: usize) -> (Duration, u64) {
    let w = World::start().await;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().expect("an HTTP client");
    let retries = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = logs
        .iter()
        .enumerate()
        .map(|(b, log)| {
            let (http, log, retries) = (http.clone(), log.clone(), retries.clone());
            let base = format!("http://{}/v1/logs/{}/1", w.plugin, log_job(b));
            let auth = format!("Bearer {}", w.token);
            tokio::spawn(async move {
                let mut offset = 0;
                while offset < log.len() {
                    let end = (offset + chunk).min(log.len());
                    let last = end == log.len();
                    let fin = if last { "&final=true" } else { "" };
                    let rsp = http
                        .post(format!("{base}?offset={offset}{fin}"))
                        .header("authorization", &auth)
                        .header("content-type", "application/octet-stream")
                        .body(log.slice(offset..end))
                        .send()
                        .await
                        .expect("the mite answers");
                    let status = rsp.status().as_u16();
                    let wait = retry_after(&rsp);
                    let v: serde_json::Value = rsp.json().await.expect("a JSON answer");
                    match status {
                        200 => {
                            assert_eq!(v["next"].as_u64(), Some(end as u64), "{v}");
                            assert_eq!(v["complete"].as_bool(), Some(last), "{v}");
                            offset = end;
                        }
                        503 => {
                            retries.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(wait).await;
                        }
                        _ => panic!("the mite answered {status}: {v}"),
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("a sender");
    }
    let took = start.elapsed();
    let stored = Logs::new(BlobStore::open(&w.log_store).expect("the log store"));
    for (b, log) in logs.iter().enumerate() {
        let key = LogKey::new(CLUSTER, NS, CTRL, &log_job(b), 1).expect("a log key");
        let s = stored.state(&key).await.expect("the log's state");
        assert_eq!((s.end, s.complete), (log.len() as u64, Some(log.len() as u64)), "{} stored whole", log_job(b));
        assert_eq!(s.chunks.len(), log.len().div_ceil(chunk), "one object per chunk");
    }
    w.stop().await;
    (took, retries.load(Ordering::Relaxed))
}

fn part(s: &str) -> PathPart<'_> {
    PathPart::parse(s).unwrap_or_else(|_| PathPart::from(s))
}

/// The floor: the same chunks written straight with object_store, as the log store writes them
/// (a conditional create, fsynced; the marker after the last).
async fn logs_floor(logs: &[Bytes], chunk: usize) -> Duration {
    let dir = tempfile::tempdir().expect("a tempdir");
    let store: Arc<dyn ObjectStore> = Arc::new(object_store::local::LocalFileSystem::new().with_fsync(true));
    let root = ObjectPath::from_absolute_path(dir.path().join("log-store")).expect("a store root");
    let start = Instant::now();
    let tasks: Vec<_> = logs
        .iter()
        .enumerate()
        .map(|(b, log)| {
            let (store, log) = (store.clone(), log.clone());
            let key = LogKey::new(CLUSTER, NS, CTRL, &log_job(b), 1).expect("a log key");
            let dir = key.prefix().split('/').fold(root.clone(), |p, s| p.join(part(s)));
            tokio::spawn(async move {
                let opts = || object_store::PutOptions { mode: object_store::PutMode::Create, ..Default::default() };
                let mut offset = 0;
                let mut chunks = 0;
                while offset < log.len() {
                    let end = (offset + chunk).min(log.len());
                    let path = dir.clone().join(part(&varroa_blobs::logs::chunk_name(offset as u64)));
                    store.put_opts(&path, log.slice(offset..end).into(), opts()).await.expect("put a chunk");
                    offset = end;
                    chunks += 1;
                }
                let marker = serde_json::json!({"v": 1, "length": log.len(), "chunks": chunks}).to_string();
                store
                    .put(&dir.clone().join(part(varroa_blobs::logs::MARKER)), Bytes::from(marker).into())
                    .await
                    .expect("put the marker");
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("a writer");
    }
    start.elapsed()
}

/// Between the two: the gateway's own writer (`LogWriter::write_chunk`) on the same kind of
/// store, without the mite, the gateway and their transport.
async fn logs_writer(logs: &[Bytes], chunk: usize) -> Duration {
    let dir = tempfile::tempdir().expect("a tempdir");
    let settings = StoreSettings::new(format!("file://{}", dir.path().join("log-store").display()));
    let writer = Arc::new(LogWriter::new(Logs::new(BlobStore::open(&settings).expect("the log store"))));
    let start = Instant::now();
    let tasks: Vec<_> = logs
        .iter()
        .enumerate()
        .map(|(b, log)| {
            let (writer, log) = (writer.clone(), log.clone());
            let key = LogKey::new(CLUSTER, NS, CTRL, &log_job(b), 1).expect("a log key");
            tokio::spawn(async move {
                let mut offset = 0;
                while offset < log.len() {
                    let end = (offset + chunk).min(log.len());
                    let last = end == log.len();
                    let out = writer.write_chunk(&key, offset as u64, log.slice(offset..end), last).await;
                    match out {
                        Ok(varroa_blobs::logs::ChunkOutcome::Stored { next, duplicate: false, complete })
                            if next == end as u64 && complete == last => {}
                        other => panic!("chunk at {offset}: {other:?}"),
                    }
                    offset = end;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("a writer");
    }
    start.elapsed()
}

// ---------------------------------------------------------------------------------------------

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn range(v: &[f64]) -> (f64, f64) {
    (v.iter().copied().fold(f64::INFINITY, f64::min), v.iter().copied().fold(0.0, f64::max))
}

/// A figure: the median, and the range when there is more than one run.
fn figure(v: &[f64], digits: usize) -> String {
    let m = median(v.to_vec());
    if v.len() < 2 {
        return format!("{m:.digits$}");
    }
    let (lo, hi) = range(v);
    format!("{m:.digits$} ({lo:.digits$} to {hi:.digits$})")
}

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .try_init();
    let n = env("VARROA_BENCH_EVENTS", 20_000).max(1);
    let runs = env("VARROA_BENCH_RUNS", 3).max(1);
    let log_bytes = env("VARROA_BENCH_LOG_MIB", 64).max(1) << 20;
    let load_before = loadavg();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let pg = tokio::task::spawn_blocking(PgServer::start).await.expect("join").expect("PostgreSQL (make deps)");

    // Build events: (senders, [floor acked, floor recorded, varroa acked, varroa recorded]) in events/s.
    let mut events: Vec<(usize, [Vec<f64>; 4])> = Vec::new();
    let mut event_retries = 0;
    for senders in [1, 4] {
        let mut figs: [Vec<f64>; 4] = Default::default();
        for run in 0..runs {
            let f = events_floor(&pg, &format!("floor_{senders}_{run}"), n, senders).await;
            let v = events_varroa(&pg, &format!("varroa_{senders}_{run}"), n, senders).await;
            eprintln!(
                "events, {senders} in flight, run {run}: floor acked {:.2} s, recorded {:.2} s; \
                 varroa acked {:.2} s, recorded {:.2} s, {} retries",
                f.acked.as_secs_f64(),
                f.recorded.as_secs_f64(),
                v.acked.as_secs_f64(),
                v.recorded.as_secs_f64(),
                v.retries
            );
            event_retries += v.retries;
            for (i, d) in [f.acked, f.recorded, v.acked, v.recorded].into_iter().enumerate() {
                figs[i].push(n as f64 / d.as_secs_f64());
            }
        }
        events.push((senders, figs));
    }

    // Console logs: (chunk, [floor, writer, varroa]) in MiB/s.
    let texts = logs_text(log_bytes);
    let total: usize = texts.iter().map(Bytes::len).sum();
    let mib = total as f64 / (1u64 << 20) as f64;
    let mut logs: Vec<(usize, [Vec<f64>; 3])> = Vec::new();
    let mut log_retries = 0;
    for chunk in [256 << 10, 16 << 10] {
        let mut figs: [Vec<f64>; 3] = Default::default();
        for run in 0..runs {
            let f = logs_floor(&texts, chunk).await;
            let lw = logs_writer(&texts, chunk).await;
            let (v, retries) = logs_varroa(&texts, chunk).await;
            eprintln!(
                "logs, {} KiB chunks, run {run}: floor {:.2} s, LogWriter {:.2} s, varroa {:.2} s, {retries} retries",
                chunk >> 10,
                f.as_secs_f64(),
                lw.as_secs_f64(),
                v.as_secs_f64()
            );
            log_retries += retries;
            for (i, d) in [f, lw, v].into_iter().enumerate() {
                figs[i].push(mib / d.as_secs_f64());
            }
        }
        logs.push((chunk, figs));
    }
    let load_after = loadavg();

    println!(
        "\n{n} build events ({} builds, requests of {BATCH}); {mib:.0} MiB of console logs as {LOG_BUILDS} \
         builds' logs at once; median (range) of {runs} runs. {cpus} CPUs; load average {load_before} before, \
         {load_after} after. \
         503 answers waited out: {event_retries} (events), {log_retries} (logs).\n",
        n.div_ceil(8)
    );
    println!("| measure | through mite + gateway | floor | the floor |");
    println!("|---|---:|---:|---|");
    for (senders, f) in &events {
        let flight = match senders {
            1 => "1 request in flight (the plugin)".to_owned(),
            n => format!("{n} requests in flight"),
        };
        let publish = "raw JetStream publish, every ack awaited";
        row(&format!("build events/s stored in JetStream (acked to the plugin), {flight}"), &f[2], &f[0], publish, 0);
        let what = "raw JetStream publish, the same recorder";
        row(&format!("build events/s in PostgreSQL (`processed_events`), {flight}"), &f[3], &f[1], what, 0);
    }
    for (chunk, f) in &logs {
        let kib = chunk >> 10;
        let put = "object_store put (create, fsync) of the same chunks";
        row(&format!("console log MiB/s, {kib} KiB chunks, {LOG_BUILDS} logs at once"), &f[2], &f[0], put, 1);
        row(&format!("console log MiB/s, {kib} KiB chunks, varroa_blobs LogWriter alone"), &f[1], &f[0], "the same", 1);
    }
}

/// One line of the table: the figure, its share of the floor's median, the floor.
fn row(measure: &str, figures: &[f64], floor: &[f64], what: &str, digits: usize) {
    let share = 100.0 * median(figures.to_vec()) / median(floor.to_vec());
    let (v, f) = (figure(figures, digits), figure(floor, digits));
    println!("| {measure} | {v} ({share:.0}% of the floor) | {f} | {what} |");
}
