//! Lifecycle activity (crate::activity), with a real nats-server, the operator's real `KvLink`
//! and publisher, and a subscriber on `activity.>` as the BFF's fan-out and the recorder's
//! stream see it:
//!
//! 1. a Controller's life: created (also on `_global`), Provisioning -> Running -> Connected
//!    (when a mite entry says so), stopped by `spec.powerState` and started again, deleted (also
//!    on `_global`); each transition once, and a reconcile that changes nothing publishes
//!    nothing;
//! 2. an operator restart publishes nothing for unchanged controllers (a Connected one and a
//!    Stopped one); a deletion after the restart is published;
//! 3. NATS away: reconciles go on (the status follows the spec) and nothing waits for NATS;
//!    once NATS is back, the next transition is published;
//! 4. `--cluster` must be a DNS-1123 label: the binary refuses another at start-up.
//!
//! The test plays the gateway by writing `varroa_mites` entries, as tests/link.rs does.

mod support;

use async_nats::jetstream::kv::Store;
use futures::StreamExt;
use kube::api::DeleteParams;
use serde_json::json;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::{Env, TEAM, WAIT, config};
use varroa_api::ControllerPhase;
use varroa_link::activity::ActivityEvent;
use varroa_link::kv::{self, MiteEntry};
use varroa_link::testing::NatsServer;
use varroa_operator::activity::{self as act, Publisher};
use varroa_operator::link::{KvLink, LinkSettings};

const CLUSTER: &str = "e2e";

async fn link(nats: &NatsServer) -> Arc<KvLink> {
    KvLink::start(LinkSettings {
        nats: varroa_link::nats::ConnectSettings {
            url: nats.url(),
            credentials_file: None,
            name: "varroa-operator/test".into(),
            max_reconnect_delay: Duration::from_millis(500),
        },
        // Long: the test writes one hello and no heartbeats.
        heartbeat_timeout: Duration::from_secs(600),
        replicas: 1,
    })
    .await
    .expect("the link starts")
}

async fn mites_bucket(nats: &NatsServer) -> Store {
    let client = async_nats::connect(nats.url()).await.expect("connect to NATS");
    kv::open_mites(&async_nats::jetstream::new(client), 1).await.expect("mites bucket")
}

fn hello() -> MiteEntry {
    let now = jiff::Timestamp::now();
    MiteEntry {
        connected: true,
        since: Some(now),
        gateway_replica: "varroa-gateway-0".into(),
        session: "s1".into(),
        last_heartbeat: Some(now),
        jenkins_version: "2.479.3".into(),
        ..Default::default()
    }
}

/// Everything published on `activity.>`, as (subject, event), in arrival order.
struct Feed {
    client: async_nats::Client,
    seen: Arc<Mutex<Vec<(String, ActivityEvent)>>>,
}

impl Feed {
    async fn subscribe(nats: &NatsServer) -> Feed {
        let client = async_nats::ConnectOptions::new()
            .retry_on_initial_connect()
            .max_reconnects(None)
            .connect(nats.url())
            .await
            .expect("connect to NATS");
        let mut sub = client.subscribe("activity.>").await.expect("subscribe");
        client.flush().await.expect("the subscription is in place");
        let seen: Arc<Mutex<Vec<(String, ActivityEvent)>>> = Arc::default();
        let s = seen.clone();
        tokio::spawn(async move {
            while let Some(m) = sub.next().await {
                let e: ActivityEvent = serde_json::from_slice(&m.payload)
                    .unwrap_or_else(|e| panic!("not an activity event on {}: {e}", m.subject));
                s.lock().expect("lock").push((m.subject.to_string(), e));
            }
        });
        Feed { client, seen }
    }

    fn all(&self) -> Vec<(String, ActivityEvent)> {
        self.seen.lock().expect("lock").clone()
    }

    /// The events about the controller `ci` of the test namespace, on its own subject.
    fn of(&self, name: &str) -> Vec<ActivityEvent> {
        let subject = format!("activity.{CLUSTER}.{TEAM}.{name}");
        self.all().into_iter().filter(|(s, _)| *s == subject).map(|(_, e)| e).collect()
    }

    fn global(&self) -> Vec<ActivityEvent> {
        let subject = format!("activity.{CLUSTER}._global");
        self.all().into_iter().filter(|(s, _)| *s == subject).map(|(_, e)| e).collect()
    }

    async fn wait(&self, what: &str, ok: impl Fn(&Feed) -> bool) {
        let deadline = tokio::time::Instant::now() + WAIT;
        while !ok(self) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for the activity feed: {what}\nit has:\n{}",
                lines(&self.all().into_iter().map(|(_, e)| e).collect::<Vec<_>>())
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until the event of `kind` whose message contains `text` arrived for `name`.
    async fn wait_for(&self, name: &str, kind: &str, text: &str) {
        self.wait(&format!("{kind} ({text}) about {name}"), |f| {
            f.of(name).iter().any(|e| e.kind == kind && e.message.contains(text))
        })
        .await
    }

    /// Waits until everything the operator's publisher handed to NATS has reached this
    /// subscriber: its count of published events is stable, both connections round-tripped.
    async fn quiet(&self, publisher: &Publisher, link: &KvLink) {
        let mut last = u64::MAX;
        loop {
            let now = publisher.count("published");
            if now == last {
                break;
            }
            last = now;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        link.client().flush().await.expect("the operator's connection round-trips");
        self.client.flush().await.expect("the feed's connection round-trips");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn lines(events: &[ActivityEvent]) -> String {
    events.iter().map(|e| format!("  {} {}: {}", e.controller, e.kind, e.message)).collect::<Vec<_>>().join("\n")
}

/// A compact form of a controller's events: the kind, and for a phase change its phases.
fn story(events: &[ActivityEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| match e.kind.as_str() {
            act::PHASE_CHANGED => e.message.split(':').next().unwrap_or_default().to_string(),
            k => k.to_string(),
        })
        .collect()
}

/// Whether `want` appears in `got` in order (other items may come between); `-> X` matches any
/// phase change into X.
fn in_order(got: &[String], want: &[&str]) -> bool {
    let mut it = got.iter();
    want.iter().all(|w| it.any(|g| g == w || (w.starts_with("-> ") && g.ends_with(w))))
}

fn start(env: &mut Env, link: Arc<KvLink>) -> Publisher {
    let publisher = Publisher::nats(link.client(), CLUSTER).expect("a publisher");
    env.start_operator_publishing(config(), link, publisher.clone());
    publisher
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controllers_life_is_published_once_per_transition() {
    let nats = NatsServer::start().expect("nats-server starts (make deps installs it)");
    let mites = mites_bucket(&nats).await;
    let feed = Feed::subscribe(&nats).await;
    let mut env = Env::cluster().await;
    let link = link(&nats).await;
    let publisher = start(&mut env, link.clone());
    let started = jiff::Timestamp::now();

    env.create("ci", json!({})).await;
    env.wait_phase("ci", ControllerPhase::Running).await;
    feed.wait_for("ci", act::PHASE_CHANGED, "Provisioning -> Running").await;
    mites.put("team-a.ci.0", kv::encode(&hello())).await.expect("put");
    env.wait_phase("ci", ControllerPhase::Connected).await;
    feed.wait_for("ci", act::PHASE_CHANGED, "Running -> Connected").await;

    // Nothing changes: nothing is published.
    feed.quiet(&publisher, &link).await;
    let (before, count) = (feed.all().len(), publisher.count("published"));
    env.settle("ci").await;
    feed.quiet(&publisher, &link).await;
    assert_eq!(publisher.count("published"), count, "a reconcile that changes nothing publishes nothing");
    assert_eq!(feed.all().len(), before, "{}", lines(&feed.of("ci")[before.min(feed.of("ci").len())..]));

    // Stopped by spec.powerState, started again.
    env.patch_spec("ci", json!({"powerState": "Stopped"})).await;
    env.wait_phase("ci", ControllerPhase::Stopped).await;
    feed.wait_for("ci", act::STOPPED, "spec.powerState is Stopped").await;
    env.patch_spec("ci", json!({"powerState": "Running"})).await;
    env.wait_phase("ci", ControllerPhase::Connected).await;
    feed.wait_for("ci", act::STARTED, "spec.powerState is Running").await;
    feed.wait_for("ci", act::PHASE_CHANGED, "Provisioning -> Connected").await;

    // Deleted: on its subject and on the cluster's.
    env.controllers().delete("ci", &DeleteParams::default()).await.expect("delete");
    feed.wait_for("ci", act::CONTROLLER_DELETED, "team-a/ci deleted").await;
    feed.wait("ControllerDeleted on _global", |f| f.global().iter().any(|e| e.kind == act::CONTROLLER_DELETED)).await;
    feed.quiet(&publisher, &link).await;

    let events = feed.of("ci");
    let got = story(&events);
    assert!(
        in_order(
            &got,
            &[
                act::CONTROLLER_CREATED,
                "Pending -> Provisioning",
                "Provisioning -> Running",
                "Running -> Connected",
                // Connected -> Provisioning while the pod goes, or straight to Stopped.
                "-> Stopped",
                act::STOPPED,
                "Stopped -> Provisioning",
                act::STARTED,
                "Provisioning -> Connected",
                act::CONTROLLER_DELETED,
            ]
        ),
        "the story of ci:\n{}",
        lines(&events)
    );
    // Only what happened, each once.
    let allowed: HashSet<&str> =
        [act::CONTROLLER_CREATED, act::PHASE_CHANGED, act::STOPPED, act::STARTED, act::CONTROLLER_DELETED].into();
    for e in &events {
        assert!(allowed.contains(e.kind.as_str()), "unexpected {}: {}\n{}", e.kind, e.message, lines(&events));
    }
    for w in got.windows(2) {
        assert_ne!(w[0], w[1], "a transition published twice:\n{}", lines(&events));
    }
    for k in [act::CONTROLLER_CREATED, act::STOPPED, act::STARTED, act::CONTROLLER_DELETED] {
        assert_eq!(events.iter().filter(|e| e.kind == k).count(), 1, "{k} once:\n{}", lines(&events));
    }
    // The events themselves.
    let mut ids = HashSet::new();
    for e in &events {
        assert_eq!((e.source.as_str(), e.cluster.as_str(), e.namespace.as_str()), ("operator", CLUSTER, TEAM));
        assert_eq!((e.controller.as_str(), e.cell), ("ci", None));
        assert!(e.id.len() == 24 && e.id.chars().all(|c| c.is_ascii_hexdigit()), "{}", e.id);
        assert!(ids.insert(e.id.clone()), "ids are unique");
        assert!(e.time >= started && e.time <= jiff::Timestamp::now(), "the operator's clock: {}", e.time);
    }
    let connected = events.iter().find(|e| e.message.starts_with("Running -> Connected")).expect("Connected");
    assert_eq!(connected.message, "Running -> Connected: Jenkins runs and its mite is connected");
    // The cluster-wide feed: created and deleted, as events of their own.
    let global = feed.global();
    assert_eq!(
        global.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>(),
        [act::CONTROLLER_CREATED, act::CONTROLLER_DELETED],
        "{}",
        lines(&global)
    );
    for e in &global {
        assert!(e.namespace.is_empty() && e.controller.is_empty(), "{e:?}");
        assert!(e.message.contains("team-a/ci"), "{e:?}");
        assert!(ids.insert(e.id.clone()), "a global event has its own id");
    }
    assert_eq!(publisher.count("dropped") + publisher.count("failed"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_restart_publishes_nothing_for_unchanged_controllers() {
    let nats = NatsServer::start().expect("nats-server starts (make deps installs it)");
    let mites = mites_bucket(&nats).await;
    let feed = Feed::subscribe(&nats).await;
    let mut env = Env::cluster().await;
    let first = link(&nats).await;
    let publisher = start(&mut env, first.clone());
    env.create("ci", json!({})).await;
    env.create("parked", json!({"powerState": "Stopped"})).await;
    env.create("gone", json!({})).await;
    mites.put("team-a.ci.0", kv::encode(&hello())).await.expect("put");
    env.wait_phase("ci", ControllerPhase::Connected).await;
    env.wait_phase("parked", ControllerPhase::Stopped).await;
    env.wait_phase("gone", ControllerPhase::Running).await;
    feed.wait_for("ci", act::PHASE_CHANGED, "-> Connected").await;
    feed.wait_for("parked", act::STOPPED, "spec.powerState").await;
    feed.quiet(&publisher, &first).await;
    env.stop_operator().await;
    drop(first);

    // Deleted while no operator runs: nobody saw it go (documented), and nothing else changed.
    env.controllers().delete("gone", &DeleteParams::default()).await.expect("delete");
    let before = feed.all().len();
    let second = link(&nats).await;
    let publisher = start(&mut env, second.clone());
    for name in ["ci", "parked"] {
        env.settle(name).await;
    }
    feed.quiet(&publisher, &second).await;
    assert_eq!(
        publisher.count("published"),
        0,
        "{}",
        lines(&feed.all()[before..].iter().map(|(_, e)| e.clone()).collect::<Vec<_>>())
    );
    assert_eq!(feed.all().len(), before);
    assert_eq!(support::phase_of(&env.controllers().get("ci").await.expect("ci")), Some(ControllerPhase::Connected));

    // What happens after the restart is published again.
    env.controllers().delete("parked", &DeleteParams::default()).await.expect("delete");
    feed.wait_for("parked", act::CONTROLLER_DELETED, "team-a/parked deleted").await;
    feed.quiet(&publisher, &second).await;
    assert_eq!(publisher.count("published"), 2, "ControllerDeleted on both subjects");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_away_holds_no_reconcile_back_and_publishing_resumes() {
    let mut nats = NatsServer::start().expect("nats-server starts (make deps installs it)");
    let feed = Feed::subscribe(&nats).await;
    let mut env = Env::cluster().await;
    let link = link(&nats).await;
    let publisher = start(&mut env, link.clone());
    env.create("ci", json!({})).await;
    env.wait_phase("ci", ControllerPhase::Running).await;
    feed.wait_for("ci", act::PHASE_CHANGED, "-> Running").await;

    // NATS goes away: the status still follows the spec (the lost events are logged).
    nats.stop();
    env.patch_spec("ci", json!({"powerState": "Stopped"})).await;
    env.wait_phase("ci", ControllerPhase::Stopped).await;
    env.patch_spec("ci", json!({"powerState": "Running"})).await;
    env.wait_phase("ci", ControllerPhase::Running).await;

    // Back: the next transition reaches the feed.
    nats.start_again().expect("nats-server starts again");
    let deadline = tokio::time::Instant::now() + WAIT;
    // Both ends reconnected (the feed's subscription is sent again on its reconnect: core NATS
    // delivers only to subscriptions in place).
    for c in [link.client(), feed.client.clone()] {
        while c.connection_state() != async_nats::connection::State::Connected {
            assert!(tokio::time::Instant::now() < deadline, "the clients reconnect to NATS");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        c.flush().await.expect("round trip");
    }
    // (Events of the outage may still arrive, from the client's buffer: at most once, not lost
    // for sure; the one wanted here is newer than the reconnect.)
    let back = jiff::Timestamp::now();
    env.patch_spec("ci", json!({"powerState": "Stopped"})).await;
    env.wait_phase("ci", ControllerPhase::Stopped).await;
    feed.wait("a Stopped published after NATS came back", |f| {
        f.of("ci").iter().any(|e| e.kind == act::STOPPED && e.time > back)
    })
    .await;
    assert!(publisher.count("published") > 0);
}

#[test]
fn the_binary_refuses_a_cluster_name_that_is_not_a_label() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_varroa-operator"))
        .args(["--cluster", "prod.eu"])
        .env_remove("KUBECONFIG")
        .env("HOME", "/nonexistent")
        .output()
        .expect("the binary runs");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--cluster") && err.contains("prod.eu"), "{err}");
    // Flags that only fail together are refused before anything connects too.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_varroa-operator"))
        .args(["--mite-cert-validity", "7d", "--mite-cert-renew-before", "10d"])
        .env_remove("KUBECONFIG")
        .env("HOME", "/nonexistent")
        .output()
        .expect("the binary runs");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("error: --mite-cert-renew-before: ") && err.contains("--mite-cert-validity"), "{err}");
}
