//! Build claims end to end: a plain HTTP client plays the Varroa Jenkins plugin on the mite's
//! plugin listener (`POST /v1/claims`, docs/varroa/plugin-protocol.md); the mite forwards over its
//! real gRPC stream to the real gateway, which asks the ledger with a core NATS request on a real
//! nats-server. The ledger is played by a NATS subscriber in the queue group `varroa-ledger` on
//! `varroa.claims.>` answering JSON `LedgerAnswer`s (the real one is the recorder's). What the
//! tests check is what the plugin gets, how soon, and what the ledger was asked.

mod common;

use common::*;
use futures::StreamExt;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use varroa_link::claims::{LedgerAnswer, LedgerRequest, QUEUE_GROUP, WhenLedgerDown};
use varroa_mite::link::{self, MiteHandle};
use varroa_mite::settings::{ClaimSettings, RunSettings};

/// What the ledger double answers a request: after how long, and what (`None`: nothing at all).
type Behaviour = dyn Fn(&LedgerRequest) -> (Duration, Option<Value>) + Send + Sync;

/// The ledger, played by a queue subscriber on `varroa.claims.>`.
struct Ledger {
    seen: Arc<Mutex<Vec<(String, LedgerRequest)>>>,
    /// How many answers it sent (a slow answer counts once it is out).
    answered: Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Ledger {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Ledger {
    async fn start(
        nats_url: &str,
        behaviour: impl Fn(&LedgerRequest) -> (Duration, Option<Value>) + Send + Sync + 'static,
    ) -> Ledger {
        let behaviour: Arc<Behaviour> = Arc::new(behaviour);
        let client = async_nats::connect(nats_url).await.unwrap();
        let mut sub = client.queue_subscribe("varroa.claims.>", QUEUE_GROUP.to_string()).await.unwrap();
        // The server has the subscription once the flush's PONG is back.
        client.flush().await.unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        let answered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = answered.clone();
        let task = tokio::spawn(async move {
            while let Some(msg) = sub.next().await {
                let request: LedgerRequest = serde_json::from_slice(&msg.payload).unwrap();
                let (delay, answer) = behaviour(&request);
                record.lock().unwrap().push((msg.subject.to_string(), request));
                let (Some(reply), Some(answer)) = (msg.reply, answer) else { continue };
                let client = client.clone();
                let count = count.clone();
                tokio::spawn(async move {
                    // The ledger's own slowness (its database), not a wait of the test.
                    tokio::time::sleep(delay).await;
                    client.publish(reply, serde_json::to_vec(&answer).unwrap().into()).await.unwrap();
                    client.flush().await.unwrap();
                    count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                });
            }
        });
        Ledger { seen, answered, task }
    }

    fn seen(&self) -> Vec<(String, LedgerRequest)> {
        self.seen.lock().unwrap().clone()
    }
}

fn answer(a: LedgerAnswer) -> Option<Value> {
    Some(serde_json::to_value(a).unwrap())
}

fn gate_on(when: WhenLedgerDown) -> ClaimSettings {
    ClaimSettings { gate: true, when_ledger_down: when }
}

async fn connected(mite: &MiteHandle) {
    eventually("the mite's stream is up", || async { mite.status().connected.then_some(()) }).await;
}

/// A mite of `settings` with `claims`, connected; its plugin address and token.
async fn start_mite(settings: &RunSettings, claims: ClaimSettings) -> (MiteHandle, SocketAddr, String) {
    let mite = link::start_with(settings.clone(), claims).await.unwrap();
    connected(&mite).await;
    let addr = mite.plugin_addr.unwrap();
    (mite, addr, plugin_token(settings))
}

/// `POST /v1/claims`, and how long the answer took.
async fn post_claim(addr: SocketAddr, token: &str, body: &Value) -> (Reply, Duration) {
    let t = Instant::now();
    let r = call(addr, "POST", "/v1/claims", Some(&format!("Bearer {token}")), serde_json::to_vec(body).unwrap()).await;
    (r, t.elapsed())
}

fn claim(id: &str, trigger: &str, budget_ms: u64) -> Value {
    json!({"v": 1, "id": id, "job": "team-a/app", "trigger": trigger, "budget_ms": budget_ms})
}

fn gateway_health(w: &World) -> SocketAddr {
    w.gw.as_ref().unwrap().health_addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_claim_passes_through_with_the_number_and_the_ledger_sees_the_certificate_and_hello() {
    let w = World::start().await;
    let ledger = Ledger::start(&w.nats_url, |r| {
        let build = if r.controller == "other" { 7 } else { 42 };
        (Duration::ZERO, answer(LedgerAnswer::Granted { build }))
    })
    .await;
    let mut settings = w.settings("mite");
    settings.cell = 2;
    let (mite, addr, token) = start_mite(&settings, gate_on(WhenLedgerDown::FailClosed)).await;

    let (r, _) = post_claim(addr, &token, &claim("q-4711", "timer:2026-12-03T08:00Z", 5000)).await;
    assert_eq!((r.status, r.body.clone()), (200, json!({"decision": "granted", "build": 42})), "{r:?}");
    let seen = ledger.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let (subject, req) = &seen[0];
    assert_eq!(subject, "varroa.claims.test.team-a.ci");
    assert_eq!(
        (req.cluster.as_str(), req.namespace.as_str(), req.controller.as_str(), req.cell),
        ("test", NS, CTRL, 2),
        "stamped from the gateway, the certificate and the hello"
    );
    assert_eq!(
        (req.id.as_str(), req.job.as_str(), req.trigger.as_str()),
        ("q-4711", "team-a/app", "timer:2026-12-03T08:00Z")
    );
    // Each hop kept its share: 5000 -> the mite hands on 4750 -> the gateway hands on 4500 or less.
    assert!(req.budget_ms <= 4500 && req.budget_ms > 4000, "{req:?}");
    assert_eq!(req.validate(subject), Ok(()), "what the real ledger checks");

    // A claim body cannot name a controller at all...
    let mut sneaky = claim("q-1", "timer:1", 5000);
    sneaky["namespace"] = json!("team-b");
    let (r, _) = post_claim(addr, &token, &sneaky).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.error().starts_with("namespace:"), "{r:?}");
    // ...and another tenant's mite claims under its own certificate only.
    w.write_mite_cert("team-b", "other", "other");
    let mut other = w.settings("other");
    other.namespace = "team-b".into();
    other.controller = "other".into();
    let (other_mite, other_addr, other_token) = start_mite(&other, gate_on(WhenLedgerDown::FailClosed)).await;
    let (r, _) = post_claim(other_addr, &other_token, &claim("q-4711", "timer:2026-12-03T08:00Z", 5000)).await;
    assert_eq!(r.body, json!({"decision": "granted", "build": 7}), "{r:?}");
    let seen = ledger.seen();
    assert_eq!(seen.len(), 2, "the malformed claim never reached the ledger: {seen:?}");
    assert_eq!(seen[1].0, "varroa.claims.test.team-b.other");
    assert_eq!((seen[1].1.namespace.as_str(), seen[1].1.controller.as_str(), seen[1].1.cell), ("team-b", "other", 0));

    let health = mite.health_addr.unwrap();
    assert_eq!(metric(health, "varroa_mite_plugin_claims_total{outcome=\"granted\"}").await, 1);
    assert_eq!(metric(health, "varroa_mite_messages_sent_total{kind=\"claim_request\"}").await, 1);
    assert_eq!(metric(gateway_health(&w), "varroa_gateway_claims_total{decision=\"granted\"}").await, 2);
    assert_eq!(metric(gateway_health(&w), "varroa_gateway_claim_seconds_count").await, 2);
    mite.shutdown().await;
    other_mite.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_retry_and_rejected_pass_through() {
    let w = World::start().await;
    let _ledger = Ledger::start(&w.nats_url, |r| {
        let a = match r.trigger.as_str() {
            "scm:refused" => LedgerAnswer::Refused { holder: 1 },
            "scm:retry" => LedgerAnswer::Retry { after_ms: 700, reason: "the ledger's database is away".into() },
            _ => LedgerAnswer::Rejected { error: "trigger: not a trigger this ledger knows".into() },
        };
        (Duration::ZERO, answer(a))
    })
    .await;
    let settings = w.settings("mite");
    let (mite, addr, token) = start_mite(&settings, gate_on(WhenLedgerDown::FailClosed)).await;

    let (r, _) = post_claim(addr, &token, &claim("c-1", "scm:refused", 2000)).await;
    assert_eq!((r.status, r.body.clone()), (200, json!({"decision": "refused", "holder": 1})), "{r:?}");
    let (r, _) = post_claim(addr, &token, &claim("c-2", "scm:retry", 2000)).await;
    assert_eq!(
        (r.status, r.body.clone()),
        (200, json!({"decision": "retry", "after_ms": 700, "reason": "the ledger's database is away"})),
        "{r:?}"
    );
    let (r, _) = post_claim(addr, &token, &claim("c-3", "scm:odd", 2000)).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.error(), "trigger: not a trigger this ledger knows", "{r:?}");

    let health = mite.health_addr.unwrap();
    for (outcome, n) in [("refused", 1), ("retry", 1), ("rejected", 1)] {
        assert_eq!(
            metric(health, &format!("varroa_mite_plugin_claims_total{{outcome=\"{outcome}\"}}")).await,
            n,
            "{outcome}"
        );
    }
    assert_eq!(metric(health, "varroa_mite_plugin_claims_undecided_total{why=\"ledger_retry\"}").await, 1);
    let gw = gateway_health(&w);
    for decision in ["refused", "retry", "rejected"] {
        assert_eq!(
            metric(gw, &format!("varroa_gateway_claims_total{{decision=\"{decision}\"}}")).await,
            1,
            "{decision}"
        );
    }
    mite.shutdown().await;

    // Under failOpen the ledger's retry runs the build ungated.
    let (mite, addr, token) = start_mite(&settings, gate_on(WhenLedgerDown::FailOpen)).await;
    let (r, _) = post_claim(addr, &token, &claim("c-2", "scm:retry", 2000)).await;
    assert_eq!((r.status, r.body["decision"].as_str()), (200, Some("ungated")), "{r:?}");
    let reason = r.body["reason"].as_str().unwrap();
    assert!(reason.contains("failOpen") && reason.contains("database is away"), "{r:?}");
    mite.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_gate_off_claims_are_ungated_without_touching_nats() {
    let w = World::start().await;
    let ledger = Ledger::start(&w.nats_url, |_| (Duration::ZERO, answer(LedgerAnswer::Granted { build: 1 }))).await;
    let settings = w.settings("mite");
    let (mite, addr, token) = start_mite(&settings, ClaimSettings::default()).await;
    let (r, elapsed) = post_claim(addr, &token, &claim("c-1", "timer:1", 5000)).await;
    assert_eq!((r.status, r.body["decision"].as_str()), (200, Some("ungated")), "{r:?}");
    assert!(r.body["reason"].as_str().unwrap().contains("gate is off"), "{r:?}");
    assert!(elapsed < Duration::from_secs(1), "answered at once: {elapsed:?}");
    assert!(ledger.seen().is_empty(), "the ledger was not asked");
    assert_eq!(metric(gateway_health(&w), "varroa_gateway_messages_total{kind=\"claim_request\"}").await, 0);
    assert_eq!(metric(mite.health_addr.unwrap(), "varroa_mite_plugin_claims_total{outcome=\"ungated\"}").await, 1);
    mite.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_ledger_subscribed_fail_closed_answers_retry_and_fail_open_answers_ungated() {
    let w = World::start().await;
    let settings = w.settings("mite");
    let (mite, addr, token) = start_mite(&settings, gate_on(WhenLedgerDown::FailClosed)).await;
    let (r, elapsed) = post_claim(addr, &token, &claim("c-1", "timer:1", 5000)).await;
    assert_eq!((r.status, r.body["decision"].as_str()), (200, Some("retry")), "{r:?}");
    assert_eq!(r.body["after_ms"], 1000, "the gateway's retry: {r:?}");
    assert!(r.body["reason"].as_str().unwrap().contains("no responders"), "{r:?}");
    assert!(elapsed < Duration::from_secs(2), "no responders is known at once: {elapsed:?}");
    let health = mite.health_addr.unwrap();
    assert_eq!(metric(health, "varroa_mite_plugin_claims_undecided_total{why=\"ledger_down\"}").await, 1);
    mite.shutdown().await;

    let (mite, addr, token) = start_mite(&settings, gate_on(WhenLedgerDown::FailOpen)).await;
    let (r, _) = post_claim(addr, &token, &claim("c-1", "timer:1", 5000)).await;
    assert_eq!((r.status, r.body["decision"].as_str()), (200, Some("ungated")), "{r:?}");
    let reason = r.body["reason"].as_str().unwrap();
    assert!(reason.contains("failOpen") && reason.contains("no responders"), "{r:?}");
    assert_eq!(metric(mite.health_addr.unwrap(), "varroa_mite_plugin_claims_total{outcome=\"fail_open\"}").await, 1);
    let gw = gateway_health(&w);
    assert_eq!(metric(gw, "varroa_gateway_claims_ledger_down_total{why=\"no_responders\"}").await, 2);
    mite.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_slower_than_the_budget_is_not_used_and_the_mite_answers_within_the_budget() {
    let w = World::start().await;
    let ledger =
        Ledger::start(&w.nats_url, |_| (Duration::from_secs(3), answer(LedgerAnswer::Granted { build: 9 }))).await;
    let settings = w.settings("mite");
    let (mite, addr, token) = start_mite(&settings, gate_on(WhenLedgerDown::FailClosed)).await;
    let budget = Duration::from_millis(1500);
    let (r, elapsed) = post_claim(addr, &token, &claim("slow-1", "timer:1", budget.as_millis() as u64)).await;
    assert!(elapsed < budget, "the mite answered within the plugin's budget: {elapsed:?}");
    assert_eq!((r.status, r.body["decision"].as_str()), (200, Some("retry")), "the late grant is not used: {r:?}");
    assert!(r.body["reason"].as_str().unwrap().contains("did not answer within"), "{r:?}");
    let seen = ledger.seen();
    assert_eq!(seen.len(), 1);
    assert!(seen[0].1.budget_ms <= 1215, "the ledger was told what is left of the budget: {:?}", seen[0].1);
    assert_eq!(metric(gateway_health(&w), "varroa_gateway_claims_ledger_down_total{why=\"timeout\"}").await, 1);

    // The grant arrives later; nobody waits for it and the mite goes on serving.
    eventually("the slow ledger answered", || async {
        (ledger.answered.load(std::sync::atomic::Ordering::SeqCst) == 1).then_some(())
    })
    .await;
    let (r, _) = post_claim(addr, &token, &claim("c-2", "timer:2", 100)).await;
    assert_eq!(r.body["decision"], "retry", "{r:?}");
    assert!(mite.status().connected);
    mite.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_gateway_stream_down_claims_are_retry_or_ungated_per_setting() {
    let mut w = World::start().await;
    let ledger = Ledger::start(&w.nats_url, |_| (Duration::ZERO, answer(LedgerAnswer::Granted { build: 3 }))).await;
    let closed = w.settings("mite");
    w.write_mite_cert(NS, CTRL, "mite-1");
    let mut open = w.settings("mite-1");
    open.cell = 1;
    let (closed_mite, closed_addr, closed_token) = start_mite(&closed, gate_on(WhenLedgerDown::FailClosed)).await;
    let (open_mite, open_addr, open_token) = start_mite(&open, gate_on(WhenLedgerDown::FailOpen)).await;

    w.gw.take().unwrap().shutdown().await;
    for m in [&closed_mite, &open_mite] {
        eventually("the mite sees its stream down", || async { (!m.status().connected).then_some(()) }).await;
    }
    let (r, elapsed) = post_claim(closed_addr, &closed_token, &claim("c-1", "timer:1", 5000)).await;
    assert_eq!(
        (r.status, r.body["decision"].as_str(), r.body["after_ms"].as_u64()),
        (200, Some("retry"), Some(1000)),
        "{r:?}"
    );
    assert!(r.body["reason"].as_str().unwrap().contains("stream to the gateway is down"), "{r:?}");
    assert!(elapsed < Duration::from_secs(1), "answered at once: {elapsed:?}");
    let (r, _) = post_claim(open_addr, &open_token, &claim("c-1", "timer:1", 5000)).await;
    assert_eq!((r.status, r.body["decision"].as_str()), (200, Some("ungated")), "{r:?}");
    let reason = r.body["reason"].as_str().unwrap();
    assert!(reason.contains("failOpen") && reason.contains("stream to the gateway is down"), "{r:?}");
    assert!(ledger.seen().is_empty());
    let health = closed_mite.health_addr.unwrap();
    assert_eq!(metric(health, "varroa_mite_plugin_claims_undecided_total{why=\"stream_down\"}").await, 1);

    // Back: the same claim is granted.
    w.start_gateway().await;
    connected(&closed_mite).await;
    let (r, _) = post_claim(closed_addr, &closed_token, &claim("c-1", "timer:1", 5000)).await;
    assert_eq!(r.body, json!({"decision": "granted", "build": 3}), "{r:?}");
    closed_mite.shutdown().await;
    open_mite.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_claims_are_400_naming_the_field_and_counted() {
    let w = World::start().await;
    let ledger = Ledger::start(&w.nats_url, |_| (Duration::ZERO, answer(LedgerAnswer::Granted { build: 1 }))).await;
    let settings = w.settings("mite");
    let (mite, addr, token) = start_mite(&settings, gate_on(WhenLedgerDown::FailClosed)).await;
    let auth = format!("Bearer {token}");
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"{nope".to_vec(), "claim"),
        (b"[]".to_vec(), "claim"),
        (br#"{"v": 1, "id": "x", "job": "a"}"#.to_vec(), "trigger"),
        (br#"{"v": 2, "id": "x", "job": "a", "trigger": "t"}"#.to_vec(), "v"),
        (br#"{"v": 1, "id": "x y", "job": "a", "trigger": "t"}"#.to_vec(), "id"),
        (br#"{"v": 1, "id": "x", "job": "", "trigger": "t"}"#.to_vec(), "job"),
        (br#"{"v": 1, "id": "x", "job": "a", "trigger": "t\u0007"}"#.to_vec(), "trigger"),
        (br#"{"v": 1, "id": "x", "job": "a", "trigger": "t", "budget_ms": 5}"#.to_vec(), "budget_ms"),
        (br#"{"v": 1, "id": "x", "job": "a", "trigger": "t", "budget_ms": 60000}"#.to_vec(), "budget_ms"),
        (br#"{"v": 1, "id": "x", "job": "a", "trigger": "t", "cell": 1}"#.to_vec(), "cell"),
    ];
    let n = cases.len() as u64;
    for (body, field) in cases {
        let r = call(addr, "POST", "/v1/claims", Some(&auth), body.clone()).await;
        assert_eq!(r.status, 400, "{}: {r:?}", String::from_utf8_lossy(&body));
        assert!(r.error().starts_with(&format!("{field}: ")), "{}: {r:?}", String::from_utf8_lossy(&body));
    }
    let big = format!(
        r#"{{"v": 1, "id": "x", "job": "a", "trigger": "{}"}}"#,
        "t".repeat(varroa_link::claims::MAX_REQUEST_BYTES)
    );
    let r = call(addr, "POST", "/v1/claims", Some(&auth), big.into_bytes()).await;
    assert_eq!(r.status, 413, "{r:?}");
    assert!(r.error().contains("4096 bytes"), "{r:?}");
    let r = call(addr, "GET", "/v1/claims", Some(&auth), Vec::new()).await;
    assert_eq!((r.status, r.allow.as_deref()), (405, Some("POST")), "{r:?}");

    assert!(ledger.seen().is_empty(), "nothing malformed reached the ledger");
    let health = mite.health_addr.unwrap();
    assert_eq!(metric(health, "varroa_mite_plugin_claims_total{outcome=\"rejected\"}").await, n + 1);
    assert_eq!(metric(health, "varroa_mite_plugin_requests_total{outcome=\"bad_request\"}").await, n);
    assert_eq!(metric(health, "varroa_mite_plugin_requests_total{outcome=\"too_large\"}").await, 1);
    // The mite serves on.
    let (r, _) = post_claim(addr, &token, &claim("ok-1", "timer:1", 5000)).await;
    assert_eq!(r.body, json!({"decision": "granted", "build": 1}), "{r:?}");
    mite.shutdown().await;
}

/// The text of a log line without its ANSI colours.
fn plain(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn binary(w: &World, extra: &[(&str, &str)]) -> tokio::process::Command {
    let t = w.dir.path().join("mite");
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_varroa-mite"));
    cmd.arg("run")
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
        .env("VARROA_PLUGIN_TOKEN_FILE", w.dir.path().join("plugin-volume/token"))
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_reads_the_claim_settings_from_its_environment() {
    use tokio::io::AsyncBufReadExt;
    let w = World::start().await;
    for (var, value, want) in [
        ("VARROA_CLAIMS", "yes", "--claims (VARROA_CLAIMS) \"yes\": must be on or off"),
        ("VARROA_CLAIMS_WHEN_LEDGER_DOWN", "open", "(VARROA_CLAIMS_WHEN_LEDGER_DOWN) \"open\""),
    ] {
        let out = tokio::time::timeout(DEADLINE, binary(&w, &[(var, value)]).output()).await.unwrap().unwrap();
        assert_eq!(out.status.code(), Some(2), "{var}={value}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(want) && stderr.contains("fix:"), "{var}={value}: {stderr}");
        if var == "VARROA_CLAIMS_WHEN_LEDGER_DOWN" {
            assert!(stderr.contains("failClosed") && stderr.contains("failOpen"), "{stderr}");
        }
    }

    // On, failOpen, and no ledger: ungated, naming failOpen.
    let mut child =
        binary(&w, &[("VARROA_CLAIMS", "on"), ("VARROA_CLAIMS_WHEN_LEDGER_DOWN", "failOpen")]).spawn().unwrap();
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
    let token = std::fs::read_to_string(w.dir.path().join("plugin-volume/token")).unwrap();
    let (r, _) = post_claim(addr, &token, &claim("bin-1", "timer:1", 2000)).await;
    assert_eq!((r.status, r.body["decision"].as_str()), (200, Some("ungated")), "{r:?}");
    assert!(r.body["reason"].as_str().unwrap().contains("failOpen"), "{r:?}");
    // The ledger is there now: granted.
    let _ledger = Ledger::start(&w.nats_url, |_| (Duration::ZERO, answer(LedgerAnswer::Granted { build: 5 }))).await;
    let (r, _) = post_claim(addr, &token, &claim("bin-1", "timer:1", 2000)).await;
    assert_eq!(r.body, json!({"decision": "granted", "build": 5}), "{r:?}");

    let pid = child.id().unwrap() as libc::pid_t;
    // SAFETY: signalling our own child by its pid.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = tokio::time::timeout(DEADLINE, child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "{status:?}");
}

/// A TCP proxy in front of the gateway that can stop passing bytes (a gateway that hangs: the
/// stream stays open, nothing is answered).
struct FreezingProxy {
    addr: SocketAddr,
    frozen: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FreezingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FreezingProxy {
    async fn start(to: SocketAddr) -> FreezingProxy {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (frozen, rx) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let Ok(outbound) = tokio::net::TcpStream::connect(to).await else { continue };
                let (ri, wi) = inbound.into_split();
                let (ro, wo) = outbound.into_split();
                for (mut r, mut w) in [
                    (
                        Box::new(ri) as Box<dyn tokio::io::AsyncRead + Send + Unpin>,
                        Box::new(wo) as Box<dyn tokio::io::AsyncWrite + Send + Unpin>,
                    ),
                    (Box::new(ro), Box::new(wi)),
                ] {
                    let mut rx = rx.clone();
                    tokio::spawn(async move {
                        let mut buf = vec![0u8; 16 * 1024];
                        loop {
                            if rx.wait_for(|f| !*f).await.is_err() {
                                return;
                            }
                            let n = match r.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => n,
                            };
                            // Bytes read just before a freeze wait until it ends.
                            if rx.wait_for(|f| !*f).await.is_err() || w.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    });
                }
            }
        });
        FreezingProxy { addr, frozen, task }
    }

    fn freeze(&self, on: bool) {
        self.frozen.send_replace(on);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gateway_that_does_not_answer_is_waited_for_the_mites_share_only_and_claims_beyond_64_are_answered_at_once() {
    let w = World::start().await;
    let _ledger = Ledger::start(&w.nats_url, |_| (Duration::ZERO, answer(LedgerAnswer::Granted { build: 11 }))).await;
    let proxy = FreezingProxy::start(w.grpc_addr).await;
    let mut settings = w.settings("mite");
    settings.gateway_url = format!("https://{}", proxy.addr);
    let (mite, addr, token) = start_mite(&settings, gate_on(WhenLedgerDown::FailClosed)).await;
    let health = mite.health_addr.unwrap();

    proxy.freeze(true);
    // The mite waits for its share (900 of 1000 ms) and answers before the plugin's budget ends.
    let (r, elapsed) = post_claim(addr, &token, &claim("hang-1", "timer:1", 1000)).await;
    assert!(elapsed < Duration::from_millis(1000), "{elapsed:?}");
    assert!(elapsed >= Duration::from_millis(850), "it waited for its share: {elapsed:?}");
    assert_eq!((r.body["decision"].as_str(), r.body["after_ms"].as_u64()), (Some("retry"), Some(1000)), "{r:?}");
    assert!(r.body["reason"].as_str().unwrap().contains("no answer from the gateway within"), "{r:?}");

    // 64 claims wait; the 65th is answered at once as if the ledger were down.
    let waiting: Vec<_> = (0..64)
        .map(|i| {
            let token = token.clone();
            tokio::spawn(async move {
                post_claim(addr, &token, &claim(&format!("w-{i}"), &format!("timer:{i}"), 20_000)).await
            })
        })
        .collect();
    eventually("64 claims wait", || async {
        (metric(health, "varroa_mite_plugin_claims_in_flight").await == 64).then_some(())
    })
    .await;
    let (r, elapsed) = post_claim(addr, &token, &claim("w-65", "timer:65", 30_000)).await;
    assert_eq!((r.body["decision"].as_str(), r.body["after_ms"].as_u64()), (Some("retry"), Some(250)), "{r:?}");
    assert!(r.body["reason"].as_str().unwrap().contains("64 claims"), "{r:?}");
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
    assert_eq!(metric(health, "varroa_mite_plugin_claims_undecided_total{why=\"busy\"}").await, 1);

    // The gateway answers again: every waiting claim gets a decision (granted, or retry when the
    // gateway ended the silent stream meanwhile), none is left hanging.
    proxy.freeze(false);
    for h in waiting {
        let (r, _) = h.await.unwrap();
        assert_eq!(r.status, 200, "{r:?}");
        let d = r.body["decision"].as_str().unwrap();
        // Retry: the gateway's own bound (32 per stream), or the stream it ended meanwhile; never
        // a claim left unanswered until the mite's share ran out.
        let reason = r.body["reason"].as_str().unwrap_or_default();
        assert!(
            d == "granted" || (d == "retry" && !reason.contains("64 claims") && !reason.contains("no answer from")),
            "{r:?}"
        );
    }
    eventually("no claim waits", || async {
        (metric(health, "varroa_mite_plugin_claims_in_flight").await == 0).then_some(())
    })
    .await;
    mite.shutdown().await;
}
