//! deploy/varroa/nats.yaml's accounts, run by a real nats-server: each component's NATS user can
//! do what that component does (the operator through its real `KvLink`; the gateway's part
//! played with its bucket operations and publishes; the recorder through its real consumer) and
//! is refused what belongs to the others.

use futures::StreamExt;
use serde_json::Value;
use std::time::Duration;
use varroa_link::builds::{self, RecordedEvent};
use varroa_link::kv::{self, DesiredEntry, MiteEntry};
use varroa_link::nats::ConnectSettings;
use varroa_link::testing::NatsServer;
use varroa_operator::link::{KvLink, LinkSettings};
use varroa_operator::mite::MiteSource;

fn accounts_conf() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/varroa/nats.yaml");
    let text = std::fs::read_to_string(&path).expect("deploy/varroa/nats.yaml");
    for doc in text.split("\n---\n") {
        let Ok(v) = serde_saphyr::from_str::<Value>(doc) else { continue };
        if v["kind"] == "ConfigMap" && v["metadata"]["name"] == "varroa-nats-config" {
            assert!(v["data"]["nats.conf"].as_str().is_some_and(|c| c.contains("include ./accounts.conf")));
            return v["data"]["accounts.conf"].as_str().expect("accounts.conf").to_string();
        }
    }
    panic!("no ConfigMap varroa-nats-config in {}", path.display());
}

fn settings(nats: &NatsServer, dir: &std::path::Path, user: &str, password: &str) -> ConnectSettings {
    let file = dir.join(user);
    NatsServer::write_credentials(&file, user, password).expect("credentials file");
    ConnectSettings {
        url: nats.url(),
        credentials_file: Some(file),
        name: user.into(),
        max_reconnect_delay: Duration::from_secs(1),
    }
}

/// Whether a KV put is accepted within a few seconds (a refused publish gets no ack).
async fn put_ok(store: &async_nats::jetstream::kv::Store, key: &str, value: bytes::Bytes) -> bool {
    matches!(tokio::time::timeout(Duration::from_secs(3), store.put(key, value)).await, Ok(Ok(_)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_component_user_can_do_its_part_and_not_the_others() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let nats = NatsServer::start_with_config(
        &accounts_conf(),
        &[
            ("OPERATOR_PASSWORD", "operator-secret"),
            ("GATEWAY_PASSWORD", "gateway-secret"),
            ("RECORDER_PASSWORD", "recorder-secret"),
        ],
    )
    .expect("nats-server starts with the shipped accounts");
    let dir = tempfile::tempdir().expect("tempdir");

    // Nobody gets in without a user.
    assert!(
        tokio::time::timeout(Duration::from_secs(3), async_nats::connect(nats.url()))
            .await
            .map_or(true, |r| r.is_err()),
        "anonymous connections are refused"
    );

    // The gateway's part: create and write varroa_mites, read varroa_desired, publish activity.
    let gw = varroa_link::nats::connect(&settings(&nats, dir.path(), "varroa-gateway", "gateway-secret"))
        .await
        .expect("gateway");
    let gw_js = async_nats::jetstream::new(gw.clone());
    let mites = kv::open_mites(&gw_js, 1).await.expect("the gateway creates varroa_mites");
    let entry = MiteEntry {
        connected: true,
        since: Some(jiff::Timestamp::now()),
        last_heartbeat: Some(jiff::Timestamp::now()),
        ..Default::default()
    };
    assert!(put_ok(&mites, "team-a.ci.0", kv::encode(&entry)).await, "the gateway writes mite state");
    gw.publish("activity.local.team-a.ci", "connected".into()).await.expect("publish");
    gw.flush().await.expect("the server takes the activity publish");

    // The operator's part, through its real link: reads the mite state, writes the desired entry.
    let link = KvLink::start(LinkSettings {
        nats: settings(&nats, dir.path(), "varroa-operator", "operator-secret"),
        heartbeat_timeout: Duration::from_secs(60),
        replicas: 1,
    })
    .await
    .expect("the operator connects");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !link.state("team-a", "ci").connected {
        assert!(tokio::time::Instant::now() < deadline, "the operator reads varroa_mites");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let desired = DesiredEntry {
        digest: "sha256:one".into(),
        files: [("jenkins.yaml".to_string(), "jenkins: {}\n".to_string())].into(),
        cells: Some(1),
    };
    assert_eq!(link.publish_desired("team-a", "ci", desired).await, Ok(true), "the operator writes varroa_desired");

    // The gateway sees it (its watch of varroa_desired).
    let desired_gw = kv::open_desired(&gw_js, 1).await.expect("the gateway reads varroa_desired");
    let mut watch = desired_gw.watch_with_history(">").await.expect("watch");
    let seen = tokio::time::timeout(Duration::from_secs(10), watch.next())
        .await
        .expect("an entry")
        .expect("some")
        .expect("ok");
    assert_eq!(kv::decode_desired(&seen.key, &seen.value).expect("entry").digest, "sha256:one");

    // Each is refused the other's writes.
    assert!(
        !put_ok(&desired_gw, "team-a.ci", kv::encode(&DesiredEntry::default())).await,
        "the gateway may not write varroa_desired"
    );
    let op = varroa_link::nats::connect(&settings(&nats, dir.path(), "varroa-operator", "operator-secret"))
        .await
        .expect("operator");
    let op_js = async_nats::jetstream::new(op.clone());
    let mites_op = kv::open_mites(&op_js, 1).await.expect("the operator opens varroa_mites to read it");
    assert!(
        !put_ok(&mites_op, "team-a.ci.0", kv::encode(&MiteEntry::default())).await,
        "the operator may not write varroa_mites"
    );
}

/// The build data plane's users: the gateway stores build events in varroa_builds (and cannot
/// read them back); the recorder, through its real consumer, reads them into PostgreSQL (and
/// cannot publish build events or touch the control link's buckets).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_stores_build_events_the_recorder_records_them_and_neither_does_more() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let nats = NatsServer::start_with_config(
        &accounts_conf(),
        &[
            ("OPERATOR_PASSWORD", "operator-secret"),
            ("GATEWAY_PASSWORD", "gateway-secret"),
            ("RECORDER_PASSWORD", "recorder-secret"),
        ],
    )
    .expect("nats-server starts with the shipped accounts");
    let dir = tempfile::tempdir().expect("tempdir");

    // The gateway's part: open varroa_builds and publish a stamped event with its message id.
    let gw = varroa_link::nats::connect(&settings(&nats, dir.path(), "varroa-gateway", "gateway-secret"))
        .await
        .expect("gateway");
    let gw_js = async_nats::jetstream::new(gw.clone());
    builds::open_stream(&gw_js, 1).await.expect("the gateway creates varroa_builds");
    let event = |id: &str, body: serde_json::Value| RecordedEvent {
        cluster: "local".into(),
        namespace: "team-a".into(),
        controller: "ci".into(),
        cell: 0,
        received: jiff::Timestamp::now(),
        event: builds::parse_event(
            &serde_json::json!({"v": 1, "id": id, "time": "2026-12-03T08:00:00Z", "job": "app", "build": 1})
                .as_object()
                .map(|o| {
                    let mut o = o.clone();
                    o.extend(body.as_object().cloned().unwrap_or_default());
                    serde_json::Value::Object(o)
                })
                .expect("an object"),
        )
        .expect("a valid event"),
    };
    let subject = builds::subject("local", &kv::ControllerKey::new("team-a", "ci").expect("a key"));
    for e in [
        event("app#1:started", serde_json::json!({"kind": "started"})),
        event("app#1:finished", serde_json::json!({"kind": "finished", "result": "SUCCESS", "duration_ms": 1200})),
    ] {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", e.msg_id().as_str());
        let ack = gw_js
            .publish_with_headers(subject.clone(), headers, kv::encode(&e))
            .await
            .expect("the gateway may publish build events");
        tokio::time::timeout(Duration::from_secs(5), ack).await.expect("in time").expect("JetStream stores it");
    }
    // ... but not read them: creating a consumer on varroa_builds is refused.
    let stream = gw_js.get_stream(builds::STREAM).await.expect("stream info");
    let refused = tokio::time::timeout(
        Duration::from_secs(5),
        stream.create_consumer(async_nats::jetstream::consumer::pull::Config {
            durable_name: Some("snoop".into()),
            ..Default::default()
        }),
    )
    .await;
    assert!(!matches!(refused, Ok(Ok(_))), "the gateway may not read varroa_builds");

    // The recorder's part, through its real consumer, into a real PostgreSQL.
    let pg = varroa_recorder::testing::PgServer::start().expect("PostgreSQL starts");
    let db = pg.create_database("records").await.expect("a database");
    let recorder = varroa_recorder::start(varroa_recorder::RecorderConfig {
        database: varroa_recorder::DbSettings { url: db, password_file: None, application_name: "recorder".into() },
        nats: settings(&nats, dir.path(), "varroa-recorder", "recorder-secret"),
        health_listen: "127.0.0.1:0".parse().expect("an address"),
        consumers: varroa_recorder::ConsumerSettings {
            batch_size: 64,
            ack_wait: Duration::from_secs(30),
            stream_replicas: 1,
        },
        retention: Default::default(),
    })
    .await
    .expect("the recorder starts");
    let (pgc, conn) = tokio_postgres::connect(&pg.config("records"), tokio_postgres::NoTls).await.expect("connect");
    tokio::spawn(conn);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let row = pgc.query_opt("SELECT result, duration_ms FROM runs WHERE job = 'app' AND build = 1", &[]).await;
        if let Ok(Some(ref r)) = row
            && r.get::<_, Option<String>>(0).as_deref() == Some("SUCCESS")
        {
            assert_eq!(r.get::<_, Option<i64>>(1), Some(1200));
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the recorder records the build: {row:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The recorder may not publish build events or write the control link's buckets.
    let rec = varroa_link::nats::connect(&settings(&nats, dir.path(), "varroa-recorder", "recorder-secret"))
        .await
        .expect("recorder");
    let rec_js = async_nats::jetstream::new(rec.clone());
    let forged = tokio::time::timeout(Duration::from_secs(3), async {
        rec_js.publish(subject.clone(), "{}".into()).await.ok()?.await.ok()
    })
    .await;
    assert!(!matches!(forged, Ok(Some(_))), "the recorder may not publish build events");
    assert!(
        tokio::time::timeout(Duration::from_secs(3), kv::open_mites(&rec_js, 1)).await.map_or(true, |r| r.is_err()),
        "the recorder may not open varroa_mites"
    );
    recorder.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_asks_build_claims_and_the_recorder_answers_them_and_nobody_else_listens() {
    use varroa_link::claims::{LedgerAnswer, LedgerRequest};
    let nats = NatsServer::start_with_config(
        &accounts_conf(),
        &[
            ("OPERATOR_PASSWORD", "operator-secret"),
            ("GATEWAY_PASSWORD", "gateway-secret"),
            ("RECORDER_PASSWORD", "recorder-secret"),
        ],
    )
    .expect("nats-server starts with the shipped accounts");
    let dir = tempfile::tempdir().expect("tempdir");
    let gw = varroa_link::nats::connect(&settings(&nats, dir.path(), "varroa-gateway", "gateway-secret"))
        .await
        .expect("gateway");

    // The gateway may not listen on the claims subjects: a claim published there does not reach it.
    let mut snoop = gw.subscribe("varroa.claims.>").await.expect("subscribe is sent");
    let mut snoop_queue =
        gw.queue_subscribe("varroa.claims.>", "varroa-ledger".into()).await.expect("subscribe is sent");
    gw.flush().await.expect("flush");
    let gw2 = varroa_link::nats::connect(&settings(&nats, dir.path(), "varroa-gateway", "gateway-secret"))
        .await
        .expect("a second gateway connection");
    gw2.publish("varroa.claims.local.team-a.ci", "{}".into()).await.expect("the gateway may publish claims");
    gw2.flush().await.expect("the server takes the claim");
    for sub in [&mut snoop, &mut snoop_queue] {
        let got = tokio::time::timeout(Duration::from_secs(2), sub.next()).await;
        assert!(!matches!(got, Ok(Some(_))), "the gateway may not subscribe varroa.claims.>: {got:?}");
    }

    // The recorder's ledger, with the recorder's user, answers the gateway's claim request.
    let pg = varroa_recorder::testing::PgServer::start().expect("PostgreSQL starts");
    let db = pg.create_database("records").await.expect("a database");
    let recorder = varroa_recorder::start(varroa_recorder::RecorderConfig {
        database: varroa_recorder::DbSettings { url: db, password_file: None, application_name: "recorder".into() },
        nats: settings(&nats, dir.path(), "varroa-recorder", "recorder-secret"),
        health_listen: "127.0.0.1:0".parse().expect("an address"),
        consumers: varroa_recorder::ConsumerSettings {
            batch_size: 64,
            ack_wait: Duration::from_secs(30),
            stream_replicas: 1,
        },
        retention: Default::default(),
    })
    .await
    .expect("the recorder starts");
    let req = LedgerRequest {
        cluster: "local".into(),
        namespace: "team-a".into(),
        controller: "ci".into(),
        cell: 0,
        id: "q-1".into(),
        job: "app".into(),
        trigger: "timer:1".into(),
        budget_ms: 4000,
    };
    let body: bytes::Bytes = serde_json::to_vec(&req).expect("json").into();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let answer = loop {
        // No responders until the ledger subscribed; retry until its schema is migrated.
        let got =
            tokio::time::timeout(Duration::from_secs(5), gw.request("varroa.claims.local.team-a.ci", body.clone()))
                .await;
        let last = match got {
            Ok(Ok(msg)) => {
                let a: LedgerAnswer = serde_json::from_slice(&msg.payload).expect("a LedgerAnswer");
                if !matches!(a, LedgerAnswer::Retry { .. }) {
                    break a;
                }
                format!("{a:?}")
            }
            other => format!("{other:?}"),
        };
        assert!(tokio::time::Instant::now() < deadline, "the recorder answers the gateway's claim: {last}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(answer, LedgerAnswer::Granted { build: 1 }, "the recorder may answer claims");
    // The snooping subscriptions still see nothing.
    for sub in [&mut snoop, &mut snoop_queue] {
        let got = tokio::time::timeout(Duration::from_millis(500), sub.next()).await;
        assert!(!matches!(got, Ok(Some(_))), "the gateway never receives claims: {got:?}");
    }
    recorder.shutdown().await;
}
