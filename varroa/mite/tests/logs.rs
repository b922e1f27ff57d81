//! Console logs end to end: reqwest plays the Varroa Jenkins plugin on the mite's plugin listener
//! (`POST /v1/logs/{job}/{build}?offset=N[&final=true]`, docs/varroa/plugin-protocol.md); the
//! mite forwards each chunk over its real gRPC stream to the real gateway, which writes it to a
//! real store (a directory, or S3 on a real moto server) and announces it on a real nats-server.
//! What the tests check is what a user checks: the HTTP answers, the objects in the store, the
//! bytes read back, the notices and the counters.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use futures::StreamExt;
use varroa_blobs::logs::{LogKey, Logs, MAX_CHUNK_BYTES};
use varroa_blobs::store::BlobStore;
use varroa_blobs::testing::{MotoServer, TcpProxy};
use varroa_mite::link::{self, MiteHandle};

async fn connected(mite: &MiteHandle) {
    eventually("the mite's stream is up", || async { mite.status().connected.then_some(()) }).await;
}

/// `POST /v1/logs/<path>` with `data` as the plugin sends it.
async fn post_raw(addr: SocketAddr, token: &str, path_and_query: &str, data: Vec<u8>) -> Reply {
    let rsp = reqwest::Client::new()
        .post(format!("http://{addr}/v1/logs/{path_and_query}"))
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/octet-stream")
        .body(data)
        .send();
    let rsp = tokio::time::timeout(DEADLINE, rsp).await.unwrap().unwrap();
    let header = |name: &str| rsp.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let status = rsp.status().as_u16();
    let retry_after = header("retry-after").map(|v| v.parse().unwrap());
    let content_type = header("content-type").unwrap_or_default();
    let bytes = rsp.bytes().await.unwrap();
    let body = serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("not JSON ({e}): {bytes:?}"));
    Reply { status, retry_after, content_type, allow: None, body }
}

/// A chunk at `offset` of `team/my app` build `build`.
async fn post_chunk(addr: SocketAddr, token: &str, build: u64, offset: u64, data: &[u8], last: bool) -> Reply {
    let fin = if last { "&final=true" } else { "" };
    post_raw(addr, token, &format!("team/my%20app/{build}?offset={offset}{fin}"), data.to_vec()).await
}

/// Plays the plugin sending a whole log in chunks of `size`: a 503 waits (Retry-After, shortened
/// to 200 ms for the test) and sends the same chunk again, a 409 goes on from `next`. Returns how
/// many 503s it saw.
async fn send_log(addr: SocketAddr, token: &str, build: u64, log: &[u8], size: usize) -> u32 {
    let mut offset = 0usize;
    let mut retries = 0;
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        assert!(Instant::now() < deadline, "the log was not stored in time");
        let end = (offset + size).min(log.len());
        let last = end == log.len();
        let r = post_chunk(addr, token, build, offset as u64, &log[offset..end], last).await;
        match r.status {
            200 => {
                assert_eq!(r.body["next"], end as u64, "{r:?}");
                if last {
                    assert_eq!(r.body["complete"], true, "{r:?}");
                    return retries;
                }
                offset = end;
            }
            409 => offset = r.body["next"].as_u64().unwrap() as usize,
            503 => {
                assert!(r.retry_after.is_some(), "{r:?}");
                retries += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            _ => panic!("unexpected answer {r:?}"),
        }
    }
}

fn logs_of(w: &World) -> Logs {
    Logs::new(BlobStore::open(&w.log_store).unwrap())
}

fn key(ns: &str, ctrl: &str, build: u64) -> LogKey {
    LogKey::new("test", ns, ctrl, "team/my app", build).unwrap()
}

/// The stored log's bytes, and whether it is complete.
async fn stored(logs: &Logs, key: &LogKey) -> (Vec<u8>, bool) {
    let s = logs.state(key).await.unwrap();
    let mut out = Vec::new();
    for c in &s.chunks {
        out.extend_from_slice(&logs.read_chunk(key, *c, 0).await.unwrap());
    }
    (out, s.complete == Some(s.end))
}

fn a_log(lines: usize) -> Vec<u8> {
    (0..lines).flat_map(|i| format!("[{i:05}] step {i} of the build did its work\n").into_bytes()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunks_in_order_end_complete_and_a_repeated_chunk_is_written_once() {
    let w = World::start().await;
    let settings = w.settings("mite");
    let mite = link::start(settings.clone()).await.unwrap();
    let addr = mite.plugin_addr.unwrap();
    connected(&mite).await;
    let token = plugin_token(&settings);
    let nats = async_nats::connect(&w.nats_url).await.unwrap();
    let mut notices = nats.subscribe("varroa.logs.test.team-a.ci").await.unwrap();
    nats.flush().await.unwrap();

    let r = post_chunk(addr, &token, 5, 0, b"Started by timer\n", false).await;
    assert_eq!((r.status, r.content_type.as_str()), (200, "application/json"), "{r:?}");
    assert_eq!(r.body, serde_json::json!({"next": 17, "complete": false}));
    // The same chunk three times: written once, answered the same.
    for round in 0..3 {
        let r = post_chunk(addr, &token, 5, 17, b"[Pipeline] stage\n", false).await;
        assert_eq!((r.status, &r.body["next"]), (200, &serde_json::json!(34)), "round {round}: {r:?}");
    }
    let r = post_chunk(addr, &token, 5, 34, b"Finished: SUCCESS\n", true).await;
    assert_eq!(r.body, serde_json::json!({"next": 52, "complete": true}), "{r:?}");
    let logs = logs_of(&w);
    let (bytes, complete) = stored(&logs, &key("team-a", "ci", 5)).await;
    assert_eq!(bytes, b"Started by timer\n[Pipeline] stage\nFinished: SUCCESS\n");
    assert!(complete);
    assert_eq!(logs.state(&key("team-a", "ci", 5)).await.unwrap().chunks.len(), 3, "one object per chunk");

    // Each landed chunk was announced on core NATS.
    let mut seen = Vec::new();
    while seen.len() < 5 {
        let m = tokio::time::timeout(DEADLINE, notices.next()).await.unwrap().unwrap();
        let n: varroa_blobs::Notice = serde_json::from_slice(&m.payload).unwrap();
        seen.push((n.job, n.build, n.next, n.last));
    }
    assert_eq!(seen[0], ("team/my app".to_string(), 5, 17, false));
    assert_eq!(seen[4], ("team/my app".to_string(), 5, 52, true));

    // A longer log in 1 MiB chunks, the largest the protocol allows.
    let big: Vec<u8> = a_log(60_000);
    assert_eq!(big.len().div_ceil(MAX_CHUNK_BYTES), 3);
    assert_eq!(send_log(addr, &token, 6, &big, MAX_CHUNK_BYTES).await, 0);
    assert_eq!(stored(&logs, &key("team-a", "ci", 6)).await, (big, true));

    let health = mite.health_addr.unwrap();
    // 5 answered stored (2 of them retries found stored), then 3 chunks of the long log.
    assert_eq!(metric(health, "varroa_mite_plugin_log_chunks_total{outcome=\"stored\"}").await, 8);
    let gw = w.gw.as_ref().unwrap().health_addr;
    assert_eq!(metric(gw, "varroa_gateway_log_chunks_total{outcome=\"duplicate\"}").await, 2);
    assert_eq!(metric(gw, "varroa_gateway_log_chunks_total{outcome=\"stored\"}").await, 6);
    mite.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_or_an_offset_inside_the_log_is_409_with_the_stored_end() {
    let w = World::start().await;
    let settings = w.settings("mite");
    let mite = link::start(settings.clone()).await.unwrap();
    let addr = mite.plugin_addr.unwrap();
    connected(&mite).await;
    let token = plugin_token(&settings);

    assert_eq!(post_chunk(addr, &token, 1, 0, b"0123456789", false).await.status, 200);
    for offset in [20, 5, 11] {
        let r = post_chunk(addr, &token, 1, offset, b"abc", false).await;
        assert_eq!(r.status, 409, "offset {offset}: {r:?}");
        assert_eq!((&r.body["next"], &r.body["complete"]), (&serde_json::json!(10), &serde_json::json!(false)));
        assert!(r.error().contains("stored up to 10"), "{r:?}");
    }
    assert_eq!(post_chunk(addr, &token, 1, 10, b"abc", true).await.status, 200);
    let r = post_chunk(addr, &token, 1, 13, b"more", false).await;
    assert_eq!((r.status, &r.body["complete"]), (409, &serde_json::json!(true)), "{r:?}");
    assert!(r.error().contains("complete at 13 bytes"), "{r:?}");
    assert_eq!(stored(&logs_of(&w), &key("team-a", "ci", 1)).await, (b"0123456789abc".to_vec(), true));
    mite.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_are_refused_with_reasons_counted_and_nothing_crashes() {
    let w = World::start().await;
    let settings = w.settings("mite");
    let mite = link::start(settings.clone()).await.unwrap();
    let addr = mite.plugin_addr.unwrap();
    connected(&mite).await;
    let token = plugin_token(&settings);

    let cases: [(&str, Vec<u8>, u16, &str); 9] = [
        ("team/app/7", b"x".to_vec(), 400, "offset: missing"),
        ("team/app/7?offset=minus", b"x".to_vec(), 400, "offset \"minus\""),
        ("team/app/7?offset=-1", b"x".to_vec(), 400, "offset \"-1\""),
        ("team/a%0Apt/7?offset=0", b"x".to_vec(), 400, "control characters"),
        ("team/app/0?offset=0", b"x".to_vec(), 400, "build \"0\""),
        ("app?offset=0", b"x".to_vec(), 400, "no build number"),
        ("team/app/7?offset=0&final=maybe", b"x".to_vec(), 400, "final \"maybe\""),
        ("team/app/7?offset=0", Vec::new(), 400, "only the final chunk"),
        ("team/app/7?offset=0", vec![b'x'; MAX_CHUNK_BYTES + 1], 413, "send smaller chunks"),
    ];
    for (path, body, status, why) in cases {
        let r = post_raw(addr, &token, path, body).await;
        assert_eq!(r.status, status, "{path}: {r:?}");
        assert!(r.error().contains(why), "{path}: {r:?}");
    }
    // Garbage of every kind later, the mite still serves and the log is whole.
    let r = post_raw(addr, &token, "team/app/7?offset=0", b"fine\n".to_vec()).await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = post_raw(addr, &token, "team/app/7?offset=5&final=true", Vec::new()).await;
    assert_eq!(r.body, serde_json::json!({"next": 5, "complete": true}), "an empty final chunk ends the log");
    let health = mite.health_addr.unwrap();
    assert_eq!(metric(health, "varroa_mite_plugin_log_chunks_total{outcome=\"refused\"}").await, 9);
    assert_eq!(metric(health, "varroa_mite_plugin_requests_total{outcome=\"bad_request\"}").await, 8);
    assert_eq!(metric(health, "varroa_mite_plugin_requests_total{outcome=\"too_large\"}").await, 1);
    assert!(mite.status().connected);
    mite.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_directory_is_503_not_acknowledged_and_the_resent_log_ends_complete_in_order() {
    let w = World::start().await;
    let settings = w.settings("mite");
    let mite = link::start(settings.clone()).await.unwrap();
    let addr = mite.plugin_addr.unwrap();
    connected(&mite).await;
    let token = plugin_token(&settings);
    let log = a_log(400);

    assert_eq!(post_chunk(addr, &token, 3, 0, &log[..1000], false).await.status, 200);
    // The controller's directory becomes a file: no write can land (not even as root).
    let root = w.dir.path().join("log-store");
    let ctrl = root.join("logs/test/team-a/ci");
    let aside = w.dir.path().join("aside");
    std::fs::rename(&ctrl, &aside).unwrap();
    std::fs::write(&ctrl, "not a directory").unwrap();
    let r = post_chunk(addr, &token, 3, 1000, &log[1000..2000], false).await;
    assert_eq!((r.status, r.retry_after), (503, Some(2)), "{r:?}");
    assert!(r.error().contains("log store cannot take the chunk now"), "{r:?}");

    // The plugin keeps sending; the store comes back after a while; the log ends whole.
    let sender = tokio::spawn({
        let (token, log) = (token.clone(), log.clone());
        async move { send_log(addr, &token, 3, &log, 1000).await }
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    std::fs::remove_file(&ctrl).unwrap();
    std::fs::rename(&aside, &ctrl).unwrap();
    let retries = tokio::time::timeout(DEADLINE, sender).await.unwrap().unwrap();
    assert!(retries >= 2, "the plugin was told to retry while the store failed ({retries})");
    assert_eq!(stored(&logs_of(&w), &key("team-a", "ci", 3)).await, (log, true));
    let gw = w.gw.as_ref().unwrap().health_addr;
    assert!(metric(gw, "varroa_gateway_log_chunks_total{outcome=\"retry\"}").await >= 3);
    mite.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_s3_an_unreachable_store_is_503_and_the_resent_log_ends_complete_in_order() {
    let moto = MotoServer::start().unwrap();
    moto.create_bucket("varroa-logs").unwrap();
    let proxy = TcpProxy::start(format!("127.0.0.1:{}", moto.port()).parse().unwrap()).unwrap();
    let w = World::start_with_log_store(Some(moto.settings(&proxy.endpoint(), "varroa-logs", "eu"))).await;
    let settings = w.settings("mite");
    let mite = link::start(settings.clone()).await.unwrap();
    let addr = mite.plugin_addr.unwrap();
    connected(&mite).await;
    let token = plugin_token(&settings);
    let log = a_log(300);

    assert_eq!(post_chunk(addr, &token, 4, 0, &log[..700], false).await.status, 200);
    proxy.cut();
    let r = post_chunk(addr, &token, 4, 700, &log[700..1400], false).await;
    assert_eq!(r.status, 503, "{r:?}");
    let sender = tokio::spawn({
        let (token, log) = (token.clone(), log.clone());
        async move { send_log(addr, &token, 4, &log, 700).await }
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    proxy.restore();
    let retries = tokio::time::timeout(Duration::from_secs(60), sender).await.unwrap().unwrap();
    assert!(retries >= 1, "{retries}");
    let logs = Logs::new(BlobStore::open(&moto.settings(&moto.endpoint(), "varroa-logs", "eu")).unwrap());
    assert_eq!(stored(&logs, &key("team-a", "ci", 4)).await, (log, true));
    mite.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_writes_under_its_own_certificate_only_and_a_stream_down_is_503() {
    let mut w = World::start().await;
    // Another tenant's mite, with its own certificate.
    w.write_mite_cert("team-b", "other", "other");
    let mut settings = w.settings("other");
    settings.namespace = "team-b".into();
    settings.controller = "other".into();
    let mite = link::start(settings.clone()).await.unwrap();
    let addr = mite.plugin_addr.unwrap();
    connected(&mite).await;
    let token = plugin_token(&settings);
    // Nothing in the request can name another controller: the path has only the job and build.
    let r =
        post_raw(addr, &token, "..%2F..%2Fteam-a%2Fci%2Fteam%2Fmy%20app/8?offset=0&namespace=team-a", b"x".to_vec())
            .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(post_chunk(addr, &token, 8, 0, b"theirs\n", true).await.status, 200);
    let logs = logs_of(&w);
    assert_eq!(stored(&logs, &key("team-b", "other", 8)).await, (b"theirs\n".to_vec(), true));
    assert!(!logs.state(&key("team-a", "ci", 8)).await.unwrap().exists(), "nothing under team-a/ci");
    let odd = LogKey::new("test", "team-b", "other", "../../team-a/ci/team/my app", 8).unwrap();
    assert_eq!(stored(&logs, &odd).await.0, b"x", "a job named with dots is just a job name, under team-b/other");
    let escaped = w.dir.path().join("log-store/logs/test/team-b/other");
    let jobs: Vec<String> =
        std::fs::read_dir(&escaped).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert!(jobs.iter().all(|j| !j.contains('/')), "{jobs:?}");

    // The gateway goes away: 503 until the stream is back.
    w.gw.take().unwrap().shutdown().await;
    eventually("the mite sees the stream down", || async { (!mite.status().connected).then_some(()) }).await;
    let r = post_chunk(addr, &token, 9, 0, b"x", false).await;
    assert_eq!((r.status, r.retry_after), (503, Some(2)), "{r:?}");
    assert!(r.error().contains("stream to the gateway is down"), "{r:?}");
    mite.shutdown().await;
}
