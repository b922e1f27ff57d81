//! The plugin's build events end to end: a plain HTTP client plays the Varroa Jenkins plugin on
//! the mite's plugin listener (docs/varroa/plugin-protocol.md); the mite forwards over its real
//! gRPC stream to the real gateway, which stores in a real nats-server's `varroa_builds` stream.
//! What the tests check is what a user checks: the HTTP answers the plugin gets and the messages
//! a JetStream consumer reads back from the stream.

mod common;

use common::*;
use serde_json::json;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use varroa_mite::link::{self, MiteHandle};

async fn connected(mite: &MiteHandle) {
    eventually("the mite's stream is up", || async { mite.status().connected.then_some(()) }).await;
}

fn ids(stored: &[Stored]) -> Vec<String> {
    let mut ids: Vec<String> = stored.iter().map(|s| s.record.event.id.clone()).collect();
    ids.sort();
    ids
}

fn sorted(v: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_land_in_varroa_builds_stamped_from_the_certificate_and_repeats_are_stored_once() {
    let w = World::start().await;
    let mut settings = w.settings("mite");
    settings.cell = 2;
    let mite = link::start(settings.clone()).await.unwrap();
    let addr = mite.plugin_addr.unwrap();
    connected(&mite).await;
    let token = plugin_token(&settings);

    // An event that claims another tenant: the stamp comes from the certificate, not from it.
    let mut sneaky = event("app#42:finished", 42, "finished");
    sneaky["namespace"] = json!("team-b");
    sneaky["controller"] = json!("evil");
    sneaky["cluster"] = json!("elsewhere");
    sneaky["cell"] = json!(7);
    let events = [event("app#42:started", 42, "started"), event("app#42:stage:7", 42, "stage_finished"), sneaky];
    for round in 0..3 {
        let r = post_events(addr, &token, &events).await;
        assert_eq!(r.status, 200, "round {round}: {r:?}");
        assert_eq!(r.content_type, "application/json");
        assert_eq!(r.body, json!({"accepted": 3, "rejected": []}), "round {round}");
    }

    let stored = stored_events(&w.js).await;
    assert_eq!(ids(&stored), sorted(&["app#42:started", "app#42:stage:7", "app#42:finished"]), "one message per event");
    for s in &stored {
        assert_eq!(s.subject, "varroa.builds.test.team-a.ci");
        let r = &s.record;
        assert_eq!((r.cluster.as_str(), r.namespace.as_str(), r.controller.as_str(), r.cell), ("test", NS, CTRL, 2));
        assert_eq!(s.msg_id, format!("test/team-a/ci/{}", r.event.id));
        assert_eq!(r.event.job, "team-a/app");
        assert_eq!(r.event.build, Some(42));
    }
    let finished = stored.iter().find(|s| s.record.event.id == "app#42:finished").unwrap();
    assert_eq!(finished.record.event.body.kind(), "finished");

    let health = mite.health_addr.unwrap();
    assert_eq!(metric(health, "varroa_mite_plugin_events_total{outcome=\"accepted\"}").await, 9);
    assert_eq!(metric(health, "varroa_mite_plugin_requests_total{outcome=\"ok\"}").await, 3);
    assert_eq!(metric(health, "varroa_mite_messages_sent_total{kind=\"build_events\"}").await, 3);
    mite.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_event_is_rejected_naming_the_field_and_the_others_are_stored() {
    let w = World::start().await;
    let settings = w.settings("mite");
    let mite = link::start(settings.clone()).await.unwrap();
    let addr = mite.plugin_addr.unwrap();
    connected(&mite).await;
    let token = plugin_token(&settings);

    let mut no_build = event("no-build", 1, "started");
    no_build["build"] = json!(0);
    let bad_kind = event("bad-kind", 1, "exploded");
    let mut no_id = event("x", 1, "started");
    no_id.as_object_mut().unwrap().remove("id");
    let mut bad_stage = event("bad-stage", 1, "stage_finished");
    bad_stage["stage"].as_object_mut().unwrap().remove("result");
    let events = [event("good-1", 1, "started"), no_build, bad_kind, no_id, bad_stage, event("good-2", 1, "finished")];
    let r = post_events(addr, &token, &events).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["accepted"], 2, "{r:?}");
    let rejected = r.body["rejected"].as_array().unwrap();
    let fields: Vec<(&str, &str)> = rejected
        .iter()
        .map(|x| {
            let error = x["error"].as_str().unwrap();
            (x["id"].as_str().unwrap(), error.split(':').next().unwrap())
        })
        .collect();
    assert_eq!(
        fields,
        [("no-build", "build"), ("bad-kind", "kind"), ("", "id"), ("bad-stage", "stage.result")],
        "{r:?}"
    );

    assert_eq!(ids(&stored_events(&w.js).await), sorted(&["good-1", "good-2"]), "the valid ones are stored");
    let health = mite.health_addr.unwrap();
    assert_eq!(metric(health, "varroa_mite_plugin_events_total{outcome=\"rejected\"}").await, 4);
    mite.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_that_are_not_events_and_other_endpoints_get_a_clear_json_error() {
    let w = World::start().await;
    let settings = w.settings("mite");
    let mite = link::start(settings.clone()).await.unwrap();
    let addr = mite.plugin_addr.unwrap();
    connected(&mite).await;
    let auth = format!("Bearer {}", plugin_token(&settings));
    let auth = Some(auth.as_str());
    let post = |path: &'static str, body: Vec<u8>| call(addr, "POST", path, auth, body);

    let r = post("/v1/events", b"{nope".to_vec()).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.error().contains("not JSON"), "{r:?}");
    for body in [json!({"evts": []}), json!([event("a", 1, "started")]), json!({"events": {"id": "a"}})] {
        let r = post("/v1/events", serde_json::to_vec(&body).unwrap()).await;
        assert_eq!(r.status, 400, "{body}: {r:?}");
        assert!(r.error().contains("{\"events\": [...]}"), "{r:?}");
    }
    let many: Vec<_> = (0..501).map(|i| event(&format!("e{i}"), 1, "started")).collect();
    let r = post_events(addr, &plugin_token(&settings), &many).await;
    assert_eq!(r.status, 413, "{r:?}");
    assert!(r.error().contains("at most 500"), "{r:?}");
    let huge = format!("{{\"events\": [], \"pad\": \"{}\"}}", "x".repeat(varroa_link::builds::MAX_REQUEST_BYTES));
    let r = post("/v1/events", huge.into_bytes()).await;
    assert_eq!(r.status, 413, "{r:?}");
    assert!(r.error().contains("larger than 1048576 bytes"), "{r:?}");
    let r = post("/v1/events", br#"{"events": []}"#.to_vec()).await;
    assert_eq!((r.status, r.body.clone()), (200, json!({"accepted": 0, "rejected": []})));

    let r = post("/v1/claims", br#"{"v": 1, "id": "c", "job": "app", "trigger": "timer", "budget_ms": 5000}"#.to_vec())
        .await;
    // The gate is off in this mite (tests/claims.rs has it on): Jenkins numbers the build.
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body["decision"], "ungated", "{r:?}");
    // Console logs are served (tests/logs.rs): a chunk without its offset is refused as such.
    let r = post("/v1/logs/team-a%2Fapp/42", b"log".to_vec()).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.error().contains("offset: missing"), "{r:?}");
    let r = call(addr, "GET", "/v1/events", auth, Vec::new()).await;
    assert_eq!((r.status, r.allow.as_deref()), (405, Some("POST")), "{r:?}");
    let r = post("/v2/events", br#"{"events": []}"#.to_vec()).await;
    assert_eq!(r.status, 404, "{r:?}");
    assert!(r.error().contains("/v1/events"), "the 404 names what is served: {r:?}");

    let stream = w.js.get_stream(varroa_link::builds::STREAM).await;
    assert!(stored_events(&w.js).await.is_empty() && stream.is_ok(), "nothing stored");
    let health = mite.health_addr.unwrap();
    assert_eq!(metric(health, "varroa_mite_plugin_requests_total{outcome=\"bad_request\"}").await, 5);
    assert_eq!(metric(health, "varroa_mite_plugin_requests_total{outcome=\"too_large\"}").await, 2);
    assert_eq!(metric(health, "varroa_mite_plugin_claims_total{outcome=\"ungated\"}").await, 1);
    mite.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_wrong_token_is_refused_and_a_restarted_mite_writes_a_new_one() {
    use std::os::unix::fs::PermissionsExt;
    let w = World::start().await;
    let settings = w.settings("mite");
    let mite = link::start(settings.clone()).await.unwrap();
    let addr = mite.plugin_addr.unwrap();
    connected(&mite).await;
    let token = plugin_token(&settings);
    assert!(token.len() == 64 && token.bytes().all(|b| b.is_ascii_hexdigit()), "{token:?}");
    let mode = std::fs::metadata(&settings.plugin_token_file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o640);

    let body = || serde_json::to_vec(&json!({"events": [event("t-1", 1, "started")]})).unwrap();
    let wrong = format!("Bearer {}", "0".repeat(64));
    let basic = format!("Basic {token}");
    for auth in [None, Some(wrong.as_str()), Some(basic.as_str()), Some("Bearer")] {
        let r = call(addr, "POST", "/v1/events", auth, body()).await;
        assert_eq!(r.status, 401, "{auth:?}: {r:?}");
        assert!(r.error().contains("token"), "{r:?}");
    }
    // Every path needs the token.
    let r = call(addr, "POST", "/v1/claims", None, Vec::new()).await;
    assert_eq!(r.status, 401, "{r:?}");
    assert!(stored_events(&w.js).await.is_empty(), "nothing stored without the token");
    let health = mite.health_addr.unwrap();
    assert_eq!(metric(health, "varroa_mite_plugin_requests_total{outcome=\"unauthorized\"}").await, 5);

    // A restarted mite writes a new token: the old one is refused, the file's new one works.
    mite.shutdown().await;
    let mite = link::start(settings.clone()).await.unwrap();
    let addr = mite.plugin_addr.unwrap();
    connected(&mite).await;
    let fresh = plugin_token(&settings);
    assert_ne!(fresh, token);
    let r = call(addr, "POST", "/v1/events", Some(&format!("Bearer {token}")), body()).await;
    assert_eq!(r.status, 401, "{r:?}");
    let r = call(addr, "POST", "/v1/events", Some(&format!("Bearer {fresh}")), body()).await;
    assert_eq!((r.status, r.body["accepted"].as_u64()), (200, Some(1)), "{r:?}");
    mite.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_gateway_stopped_the_plugin_is_told_to_retry_and_the_same_request_is_stored_when_it_is_back() {
    let mut w = World::start().await;
    let settings = w.settings("mite");
    let mite = link::start(settings.clone()).await.unwrap();
    let addr = mite.plugin_addr.unwrap();
    connected(&mite).await;
    let token = plugin_token(&settings);
    let before = [event("gw-1", 7, "started")];
    assert_eq!(post_events(addr, &token, &before).await.status, 200);

    w.gw.take().unwrap().shutdown().await;
    eventually("the mite sees the stream down", || async { (!mite.status().connected).then_some(()) }).await;
    let during = [event("gw-2", 7, "stage_finished"), event("gw-3", 7, "finished")];
    let r = post_events(addr, &token, &during).await;
    assert_eq!(r.status, 503, "{r:?}");
    assert!(r.retry_after.is_some_and(|s| s >= 1), "{r:?}");
    assert!(r.error().contains("stream to the gateway is down"), "{r:?}");

    w.start_gateway().await;
    connected(&mite).await;
    let r = post_events(addr, &token, &during).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, json!({"accepted": 2, "rejected": []}));
    assert_eq!(ids(&stored_events(&w.js).await), sorted(&["gw-1", "gw-2", "gw-3"]));
    let health = mite.health_addr.unwrap();
    assert_eq!(metric(health, "varroa_mite_plugin_events_total{outcome=\"retry\"}").await, 2);
    assert_eq!(metric(health, "varroa_mite_plugin_requests_total{outcome=\"stream_down\"}").await, 1);
    mite.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_nats_stopped_the_plugin_is_told_to_retry_and_the_same_request_is_stored_once_when_it_is_back() {
    let mut w = World::start().await;
    let settings = w.settings("mite");
    let mite = link::start(settings.clone()).await.unwrap();
    let addr = mite.plugin_addr.unwrap();
    connected(&mite).await;
    let token = plugin_token(&settings);
    assert_eq!(post_events(addr, &token, &[event("n-1", 9, "started")]).await.status, 200);

    w.nats.stop();
    let during = [event("n-2", 9, "test_summary"), event("n-3", 9, "finished")];
    let mut during = during.to_vec();
    during[0]["total"] = json!(10);
    during[0]["failed"] = json!(1);
    during[0]["skipped"] = json!(0);
    let r = post_events(addr, &token, &during).await;
    assert_eq!(r.status, 503, "{r:?}");
    assert!(r.retry_after.is_some_and(|s| s >= 1), "{r:?}");
    assert!(r.error().contains("cannot store the events now"), "{r:?}");
    assert!(mite.status().connected, "the gateway stream stays up while NATS is away");

    w.nats.start_again().unwrap();
    // As the plugin does: the same request again until it is stored.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let r = post_events(addr, &token, &during).await;
        if r.status == 200 {
            assert_eq!(r.body, json!({"accepted": 2, "rejected": []}), "{r:?}");
            break;
        }
        assert_eq!(r.status, 503, "{r:?}");
        assert!(tokio::time::Instant::now() < deadline, "still {r:?} a minute after NATS came back");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Publishes buffered during the outage may have landed too: still one message per event.
    assert_eq!(ids(&stored_events(&w.js).await), sorted(&["n-1", "n-2", "n-3"]));
    let health = mite.health_addr.unwrap();
    assert!(metric(health, "varroa_mite_plugin_requests_total{outcome=\"gateway_retry\"}").await >= 1);
    mite.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_beyond_the_in_flight_bound_are_told_to_retry_at_once() {
    let w = World::start().await;
    let settings = w.settings("mite");
    let mite = link::start(settings.clone()).await.unwrap();
    let addr = mite.plugin_addr.unwrap();
    let health = mite.health_addr.unwrap();
    connected(&mite).await;
    let token = plugin_token(&settings);

    // Sixteen plugins that send their headers and only part of the body.
    let mut slow = Vec::new();
    for _ in 0..varroa_mite::plugin::MAX_IN_FLIGHT {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let head = format!(
            "POST /v1/events HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"events\": ["
        );
        s.write_all(head.as_bytes()).await.unwrap();
        slow.push(s);
    }
    let in_flight = "varroa_mite_plugin_requests_in_flight";
    eventually("sixteen requests in flight", || async { (metric(health, in_flight).await == 16).then_some(()) }).await;
    let r = post_events(addr, &token, &[event("b-1", 3, "started")]).await;
    assert_eq!((r.status, r.retry_after), (503, Some(1)), "{r:?}");
    assert!(r.error().contains("serving 16 requests"), "{r:?}");

    drop(slow);
    eventually("the slow requests are gone", || async { (metric(health, in_flight).await == 0).then_some(()) }).await;
    let r = post_events(addr, &token, &[event("b-1", 3, "started")]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(metric(health, "varroa_mite_plugin_requests_total{outcome=\"busy\"}").await, 1);
    mite.shutdown().await;
}

/// Removes ANSI colour sequences from a log line.
fn plain(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_serves_the_plugin_from_its_environment() {
    use tokio::io::AsyncBufReadExt;
    let w = World::start().await;
    let t = w.dir.path().join("mite");
    let token_file = w.dir.path().join("plugin-volume/token");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_varroa-mite"))
        .arg("run")
        .env_clear()
        .env("VARROA_CONTROLLER", CTRL)
        .env("VARROA_NAMESPACE", NS)
        .env("VARROA_GATEWAY_ENDPOINT", w.grpc_addr.to_string())
        .env("VARROA_GATEWAY_SERVER_NAME", "localhost")
        .env("VARROA_JENKINS_URL", w.jenkins.url())
        .env("POD_NAME", "ci-0")
        .env("VARROA_TLS_CERT", t.join("tls.crt"))
        .env("VARROA_TLS_KEY", t.join("tls.key"))
        .env("VARROA_TLS_CA", t.join("ca.crt"))
        .env("VARROA_JENKINS_USER", "admin")
        .env("VARROA_JENKINS_TOKEN_FILE", w.dir.path().join("jenkins-token"))
        .env("VARROA_CASC_DIR", w.dir.path().join("casc"))
        .env("VARROA_HEALTH_LISTEN", "off")
        .env("VARROA_PLUGIN_LISTEN", "127.0.0.1:0")
        .env("VARROA_PLUGIN_TOKEN_FILE", &token_file)
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // The listener's address is in the log; the rest of the log is drained so the pipe never fills.
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let (addr_tx, addr_rx) = tokio::sync::oneshot::channel::<SocketAddr>();
    tokio::spawn(async move {
        let mut addr_tx = Some(addr_tx);
        while let Ok(Some(line)) = lines.next_line().await {
            let line = plain(&line);
            if line.contains("plugin listener up")
                && let Some(a) = line.split("addr=").nth(1).and_then(|a| a.split_whitespace().next())
                && let Some(tx) = addr_tx.take()
            {
                let _ = tx.send(a.parse().unwrap());
            }
        }
    });
    let addr = tokio::time::timeout(DEADLINE, addr_rx).await.unwrap().unwrap();
    w.wait_entry("the binary's stream is up", |e| e.connected).await;
    let token = std::fs::read_to_string(&token_file).unwrap();
    let r = post_events(addr, &token, &[event("bin-1", 5, "started")]).await;
    assert_eq!(r.status, 200, "{r:?}");
    let stored = stored_events(&w.js).await;
    assert_eq!(ids(&stored), ["bin-1"]);
    assert_eq!(stored[0].record.cell, 0, "the cell from POD_NAME");

    let pid = child.id().unwrap() as libc::pid_t;
    // SAFETY: signalling our own child by its pid.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = tokio::time::timeout(DEADLINE, child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "{status:?}");
}
