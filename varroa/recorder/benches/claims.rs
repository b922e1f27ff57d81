//! The build claims benchmark (`cargo bench -p varroa-recorder --bench claims`): the round trip
//! of a claim through NATS and the ledger, against its floors in the same run.
//!
//! One real PostgreSQL (`varroa_recorder::testing::PgServer`: `fsync=off`,
//! `synchronous_commit=off`, so the figures are CPU and round trips, not a disk) and one real
//! nats-server. Each phase runs with 1, 10 and 100 concurrent claimers; every claim is a new
//! trigger (granted: the full transaction, the job's number taken), claimer `k` claiming for job
//! `team/app-<k mod 10>` (one job with one claimer: its claims never wait for each other).
//!
//! 1. **echo**: a bare NATS request/reply (a responder that sends the payload back), the bus's
//!    floor.
//! 2. **direct**: the ledger's transaction (`ledger::decide` on a `ledger::Pool` of 16 sessions,
//!    as the ledger uses) called straight, without NATS: the database's floor.
//! 3. **ledger**: a `LedgerRequest` as the gateway sends it, through NATS to a running recorder
//!    (`varroa_recorder::start_with_ledger`, 16 sessions, 128 decisions in flight so that 100
//!    claimers fit) and back.
//!
//! Environment: `VARROA_BENCH_CLAIMS` (claims per phase and concurrency, default 2000). Prints a
//! Markdown table (p50 and p99 of the round trip, and claims per second).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use varroa_link::claims::{LedgerAnswer, LedgerRequest};
use varroa_link::nats::ConnectSettings;
use varroa_link::testing::NatsServer;
use varroa_recorder::ledger::{self, Decision, Pool};
use varroa_recorder::testing::PgServer;
use varroa_recorder::{ConsumerSettings, DbSettings, LedgerSettings, RecorderConfig, RetentionSettings};

const LEVELS: [usize; 3] = [1, 10, 100];

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn request(phase: &str, level: usize, claimer: usize, n: usize) -> LedgerRequest {
    LedgerRequest {
        cluster: "bench".into(),
        namespace: "team-a".into(),
        controller: "ci".into(),
        cell: (claimer % 2) as u32,
        id: format!("{phase}-{level}-{claimer}-{n}"),
        job: format!("team/app-{level}-{}", claimer % 10),
        trigger: format!("timer:{claimer}:{n}"),
        budget_ms: 10_000,
    }
}

const SUBJECT: &str = "varroa.claims.bench.team-a.ci";

/// Runs `claims` operations over `level` concurrent claimers; the latency of each.
async fn run<F, Fut>(level: usize, claims: usize, op: F) -> (Vec<Duration>, Duration)
where
    F: Fn(usize, usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let op = Arc::new(op);
    let per = claims.div_ceil(level);
    let start = Instant::now();
    let tasks: Vec<_> = (0..level)
        .map(|k| {
            let op = op.clone();
            tokio::spawn(async move {
                let mut lat = Vec::with_capacity(per);
                for n in 0..per {
                    let t = Instant::now();
                    op(k, n).await;
                    lat.push(t.elapsed());
                }
                lat
            })
        })
        .collect();
    let mut all = Vec::with_capacity(per * level);
    for t in tasks {
        all.extend(t.await.expect("claimer"));
    }
    (all, start.elapsed())
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

fn expect_granted(a: &LedgerAnswer) {
    assert!(matches!(a, LedgerAnswer::Granted { .. }), "a new trigger is granted: {a:?}");
}

#[tokio::main]
async fn main() {
    let claims = env("VARROA_BENCH_CLAIMS", 2000);
    let pg = tokio::task::spawn_blocking(PgServer::start).await.expect("join").expect("PostgreSQL");
    let nats = NatsServer::start().expect("nats-server");
    let nc = async_nats::connect(nats.url()).await.expect("nats");
    let mut rows: Vec<(&str, usize, usize, f64, f64, f64)> = Vec::new();

    // 1. echo
    let responder = async_nats::connect(nats.url()).await.expect("nats");
    let mut sub = responder.subscribe("bench.echo").await.expect("subscribe");
    responder.flush().await.expect("flush");
    let echo = tokio::spawn({
        let responder = responder.clone();
        async move {
            while let Some(m) = sub.next().await {
                if let Some(reply) = m.reply {
                    let _ = responder.publish(reply, m.payload).await;
                }
            }
        }
    });
    let body = serde_json::to_vec(&request("echo", 0, 0, 0)).expect("json");
    for level in LEVELS {
        let (nc, body) = (nc.clone(), body.clone());
        let (mut lat, took) = run(level, claims, move |_, _| {
            let (nc, body) = (nc.clone(), body.clone());
            async move {
                nc.request("bench.echo", body.into()).await.expect("echo");
            }
        })
        .await;
        lat.sort();
        eprintln!("echo x{level}: {took:?}");
        rows.push((
            "NATS echo",
            level,
            lat.len(),
            percentile(&lat, 0.5),
            percentile(&lat, 0.99),
            lat.len() as f64 / took.as_secs_f64(),
        ));
    }
    echo.abort();

    // 2. direct
    let url = pg.create_database("direct").await.expect("database");
    let db = DbSettings { url: url.clone(), password_file: None, application_name: "claims bench".into() };
    {
        let mut c = db.connect().await.expect("connect");
        varroa_recorder::migrate::migrate(&mut c).await.expect("migrate");
    }
    let pool = Arc::new(Pool::new(db, LedgerSettings::default().connections));
    for level in LEVELS {
        let pool = pool.clone();
        let (mut lat, took) = run(level, claims, move |k, n| {
            let pool = pool.clone();
            async move {
                let req = request("direct", level, k, n);
                let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
                let lease = pool.get(deadline).await.expect("a session");
                let d = ledger::decide(lease.session(), &req, Duration::from_secs(10)).await.expect("decided");
                assert!(matches!(d, Decision::Granted(_)), "{d:?}");
                lease.release();
            }
        })
        .await;
        lat.sort();
        eprintln!("direct x{level}: {took:?}");
        rows.push((
            "PostgreSQL direct",
            level,
            lat.len(),
            percentile(&lat, 0.5),
            percentile(&lat, 0.99),
            lat.len() as f64 / took.as_secs_f64(),
        ));
    }

    // 3. ledger
    let url = pg.create_database("ledger").await.expect("database");
    let config = RecorderConfig {
        database: DbSettings { url, password_file: None, application_name: "varroa-recorder bench".into() },
        nats: ConnectSettings {
            url: nats.url(),
            credentials_file: None,
            name: "varroa-recorder bench".into(),
            max_reconnect_delay: Duration::from_secs(1),
        },
        health_listen: "127.0.0.1:0".parse().expect("address"),
        consumers: ConsumerSettings { batch_size: 256, ack_wait: Duration::from_secs(30), stream_replicas: 1 },
        retention: RetentionSettings::default(),
    };
    // 100 claimers: room for all of them in flight (the default, 64, answers the rest retry).
    let settings = LedgerSettings { max_in_flight: 128, ..LedgerSettings::default() };
    let recorder = varroa_recorder::start_with_ledger(config, Some(settings)).await.expect("recorder");
    // Until the schema is migrated and the ledger subscribed, the answer is retry or no one.
    let probe = serde_json::to_vec(&request("probe", 0, 0, 0)).expect("json");
    let ready_by = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(Ok(m)) = tokio::time::timeout(Duration::from_secs(2), nc.request(SUBJECT, probe.clone().into())).await
            && let Ok(a) = serde_json::from_slice::<LedgerAnswer>(&m.payload)
            && matches!(a, LedgerAnswer::Granted { .. })
        {
            break;
        }
        assert!(Instant::now() < ready_by, "the ledger did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for level in LEVELS {
        let nc = nc.clone();
        let (mut lat, took) = run(level, claims, move |k, n| {
            let nc = nc.clone();
            async move {
                let body = serde_json::to_vec(&request("ledger", level, k, n)).expect("json");
                let m = nc.request(SUBJECT, body.into()).await.expect("answered");
                expect_granted(&serde_json::from_slice(&m.payload).expect("a LedgerAnswer"));
            }
        })
        .await;
        lat.sort();
        eprintln!("ledger x{level}: {took:?}");
        rows.push((
            "NATS + ledger",
            level,
            lat.len(),
            percentile(&lat, 0.5),
            percentile(&lat, 0.99),
            lat.len() as f64 / took.as_secs_f64(),
        ));
    }
    recorder.shutdown().await;

    println!("\n{claims} claims per row, each a new trigger (granted)\n");
    println!("| path | claimers | claims | p50 ms | p99 ms | claims/s |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (path, level, n, p50, p99, rate) in rows {
        println!("| {path} | {level} | {n} | {p50:.2} | {p99:.2} | {rate:.0} |");
    }
}
