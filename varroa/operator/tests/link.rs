//! The control link from the operator's side, with a real nats-server (JetStream) and the
//! operator's real `KvLink`: what a gateway writes into `varroa_mites` drives the phase and the
//! `MiteConnected` condition, a heartbeat that stops is a lost stream within the timeout, an
//! apply result shows in the status, and the rendered JCasC lands in `varroa_desired` (once per
//! digest, again after a JCasC change, without rolling the pod; gone with its Controller).
//!
//! The test plays the gateway by writing the bucket entries a gateway writes
//! (`varroa_link::kv::MiteEntry`); the gateway itself is tested in varroa-gateway.

mod support;

use async_nats::jetstream::kv::Store;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::DeleteParams;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use support::{Env, TEAM, WAIT, attention_of, condition, config, phase_of};
use varroa_api::ControllerPhase;
use varroa_api::lifecycle::{ANNOTATION_RESTART_DIGEST, condition as cond};
use varroa_link::kv::{self, ApplyResultRecord, DesiredEntry, MiteEntry};
use varroa_link::testing::NatsServer;
use varroa_operator::link::{KvLink, LinkSettings};

const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(2);

async fn link(nats: &NatsServer) -> Arc<KvLink> {
    KvLink::start(LinkSettings {
        nats: varroa_link::nats::ConnectSettings {
            url: nats.url(),
            credentials_file: None,
            name: "varroa-operator/test".into(),
            max_reconnect_delay: Duration::from_secs(1),
        },
        heartbeat_timeout: HEARTBEAT_TIMEOUT,
        replicas: 1,
    })
    .await
    .expect("the link starts")
}

async fn buckets(nats: &NatsServer) -> (Store, Store) {
    let client = async_nats::connect(nats.url()).await.expect("connect to NATS");
    let js = async_nats::jetstream::new(client);
    (kv::open_mites(&js, 1).await.expect("mites bucket"), kv::open_desired(&js, 1).await.expect("desired bucket"))
}

async fn desired_of(store: &Store, key: &str) -> Option<(DesiredEntry, u64)> {
    let e = store.entry(key).await.expect("read the desired bucket")?;
    if !matches!(e.operation, async_nats::jetstream::kv::Operation::Put) {
        return None;
    }
    Some((kv::decode_desired(key, &e.value).expect("a desired entry"), e.revision))
}

async fn wait_desired(
    store: &Store,
    key: &str,
    what: &str,
    ok: impl Fn(Option<&DesiredEntry>) -> bool,
) -> Option<(DesiredEntry, u64)> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let got = desired_of(store, key).await;
        if ok(got.as_ref().map(|(e, _)| e)) {
            return got;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting until {what}: {got:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The entry a gateway writes for a mite that just said hello (and then on each heartbeat).
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

fn restart_digest(sts: &StatefulSet) -> String {
    sts.spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get(ANNOTATION_RESTART_DIGEST).cloned())
        .expect("the pod template's restart digest")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mite_state_from_jetstream_drives_the_phase_and_the_jcasc_reaches_the_desired_bucket() {
    let nats = NatsServer::start().expect("nats-server starts (make deps installs it)");
    let (mites, desired) = buckets(&nats).await;
    let mut env = Env::cluster().await;
    env.start_operator_with(config(), link(&nats).await);
    env.apply(
        "apiVersion: varroa.dev/v1alpha1\nkind: CatalogItem\nmetadata: {name: msg, namespace: team-a}\nspec: {casc: {jenkins: {systemMessage: one}}}\n---\napiVersion: varroa.dev/v1alpha1\nkind: ComposedBundle\nmetadata: {name: b, namespace: team-a}\nspec: {inputs: [{catalogItem: {name: varroa-starter}}, {catalogItem: {name: msg}}]}\n",
    )
    .await;
    env.create("ci", json!({"composedBundleRef": {"name": "b"}})).await;

    // No mite yet: Running, never connected.
    let c = env.wait_phase("ci", ControllerPhase::Running).await;
    assert_eq!(condition(&c, cond::MITE_CONNECTED).map(|x| x.status.as_str()), Some("False"));

    // The rendered jenkins.yaml is handed to the mites, with the cell count.
    let cms: kube::Api<ConfigMap> = kube::Api::namespaced(env.admin.clone(), TEAM);
    let cm_yaml = |cm: ConfigMap| cm.data.unwrap_or_default().get("jenkins.yaml").cloned().unwrap_or_default();
    let (entry, revision) =
        wait_desired(&desired, "team-a.ci", "the desired entry is written", |e| e.is_some()).await.expect("entry");
    assert!(entry.digest.starts_with("sha256:"), "{entry:?}");
    assert_eq!(entry.cells, Some(1));
    assert_eq!(entry.files.keys().collect::<Vec<_>>(), ["jenkins.yaml"]);
    assert_eq!(entry.files["jenkins.yaml"], cm_yaml(cms.get("ci").await.expect("cm")));
    assert!(entry.files["jenkins.yaml"].contains("systemMessage: one"));

    // The gateway reports the mite: Connected.
    mites.put("team-a.ci.0", kv::encode(&hello())).await.expect("put");
    let c = env.wait_phase("ci", ControllerPhase::Connected).await;
    assert_eq!(condition(&c, cond::MITE_CONNECTED).map(|x| x.status.as_str()), Some("True"));

    // The mite applied the digest: the result is in the status.
    let applied = MiteEntry {
        last_apply_result: Some(ApplyResultRecord {
            digest: entry.digest.clone(),
            succeeded: true,
            finished_at: Some(jiff::Timestamp::now()),
            ..Default::default()
        }),
        ..hello()
    };
    mites.put("team-a.ci.0", kv::encode(&applied)).await.expect("put");
    let c = env
        .wait("ci", "the apply result in the status", |c| {
            c.status.as_ref().and_then(|s| s.last_apply_result.as_ref()).is_some_and(|r| r.digest == entry.digest)
        })
        .await;
    assert!(c.status.and_then(|s| s.last_apply_result).is_some_and(|r| r.succeeded));

    // A reconcile that changes nothing writes nothing to the bucket.
    env.settle("ci").await;
    assert_eq!(
        desired_of(&desired, "team-a.ci").await.map(|(_, r)| r),
        Some(revision),
        "the same digest is not written again"
    );

    // A JCasC change: a new desired entry, and the pod template stays (no restart).
    let sts: StatefulSet = env.obj("ci").await;
    let before = restart_digest(&sts);
    env.apply("apiVersion: varroa.dev/v1alpha1\nkind: CatalogItem\nmetadata: {name: msg, namespace: team-a}\nspec: {casc: {jenkins: {systemMessage: two}}}\n").await;
    let (changed, _) = wait_desired(&desired, "team-a.ci", "the new JCasC is handed over", |e| {
        e.is_some_and(|e| e.files.get("jenkins.yaml").is_some_and(|y| y.contains("systemMessage: two")))
    })
    .await
    .expect("entry");
    assert_ne!(changed.digest, entry.digest);
    env.settle("ci").await;
    assert_eq!(restart_digest(&env.obj::<StatefulSet>("ci").await), before, "a JCasC change does not roll the pod");

    // The mite refuses it: Apply failed, with Jenkins' message.
    let refused = MiteEntry {
        last_apply_result: Some(ApplyResultRecord {
            digest: changed.digest.clone(),
            succeeded: false,
            message: "Invalid configuration elements for type: class jenkins.model.Jenkins : systemMesage".into(),
            finished_at: Some(jiff::Timestamp::now()),
            ..Default::default()
        }),
        ..hello()
    };
    mites.put("team-a.ci.0", kv::encode(&refused)).await.expect("put");
    let c = env.wait("ci", "Apply failed", |c| attention_of(c).as_deref() == Some("Apply failed")).await;
    let r = c.status.and_then(|s| s.last_apply_result).expect("a result");
    assert!(r.message.contains("systemMesage"), "{r:?}");

    // The heartbeats stop (the gateway replica died): Mite unreachable within the timeout, and
    // nobody had to write anything for it. A fixed apply first, so the attention is the stream's.
    mites.put("team-a.ci.0", kv::encode(&applied)).await.expect("put");
    let c = env
        .wait("ci", "Mite unreachable after the heartbeats stop", |c| {
            attention_of(c).as_deref() == Some("Mite unreachable")
        })
        .await;
    assert_eq!(phase_of(&c), Some(ControllerPhase::Running));
    assert_eq!(
        condition(&c, cond::MITE_CONNECTED).map(|x| x.reason.as_str()),
        Some(varroa_api::lifecycle::REASON_STREAM_LOST)
    );

    // The Controller goes: its desired entry goes too.
    env.controllers().delete("ci", &DeleteParams::default()).await.expect("delete");
    wait_desired(&desired, "team-a.ci", "the desired entry is deleted with its Controller", |e| e.is_none()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_recovers_from_a_nats_restart_by_itself() {
    let mut nats = NatsServer::start().expect("nats-server starts (make deps installs it)");
    let mut env = Env::cluster().await;
    env.start_operator_with(config(), link(&nats).await);
    env.create("ci", json!({})).await;
    env.wait_phase("ci", ControllerPhase::Running).await;
    let (mites, desired) = buckets(&nats).await;
    wait_desired(&desired, "team-a.ci", "the desired entry is written", |e| e.is_some()).await;
    mites.put("team-a.ci.0", kv::encode(&hello())).await.expect("put");
    env.wait_phase("ci", ControllerPhase::Connected).await;

    // NATS goes away and comes back on the same port with the same store.
    nats.restart().expect("nats-server restarts");
    let (mites, desired) = buckets(&nats).await;
    // What the gateway writes after the restart reaches the operator: its watch reopened.
    let applied = MiteEntry {
        last_apply_result: Some(ApplyResultRecord {
            digest: "sha256:after-restart".into(),
            succeeded: true,
            finished_at: Some(jiff::Timestamp::now()),
            ..Default::default()
        }),
        ..hello()
    };
    mites.put("team-a.ci.0", kv::encode(&applied)).await.expect("put");
    env.wait("ci", "the apply result written after the NATS restart", |c| {
        c.status.as_ref().and_then(|s| s.last_apply_result.as_ref()).is_some_and(|r| r.digest == "sha256:after-restart")
    })
    .await;
    // And what the operator writes reaches the bucket again: a deleted entry is written back
    // at the next change of the controller.
    desired.delete("team-a.ci").await.expect("delete");
    env.apply("apiVersion: varroa.dev/v1alpha1\nkind: CatalogItem\nmetadata: {name: msg, namespace: team-a}\nspec: {casc: {jenkins: {systemMessage: back}}}\n---\napiVersion: varroa.dev/v1alpha1\nkind: ComposedBundle\nmetadata: {name: b, namespace: team-a}\nspec: {inputs: [{catalogItem: {name: varroa-starter}}, {catalogItem: {name: msg}}]}\n").await;
    env.patch_spec("ci", json!({"composedBundleRef": {"name": "b"}})).await;
    wait_desired(&desired, "team-a.ci", "the desired entry is written after the restart", |e| {
        e.is_some_and(|e| e.files.get("jenkins.yaml").is_some_and(|y| y.contains("systemMessage: back")))
    })
    .await;
}

/// The operator's NATS password is rotated (in NATS first, then in its credentials file, as a
/// platform team rotates a Secret): the operator recovers by itself, without a restart. It reads
/// what the gateway writes after the rotation and writes the desired configuration again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_picks_up_a_rotated_nats_password_from_its_file() {
    let mut nats = NatsServer::start_with_auth("varroa", "first-password").expect("nats-server starts");
    let dir = tempfile::tempdir().expect("tempdir");
    let creds = dir.path().join("credentials");
    NatsServer::write_credentials(&creds, "varroa", "first-password").expect("write credentials");
    let link = KvLink::start(LinkSettings {
        nats: varroa_link::nats::ConnectSettings {
            url: nats.url(),
            credentials_file: Some(creds.clone()),
            name: "varroa-operator/test".into(),
            max_reconnect_delay: Duration::from_millis(500),
        },
        heartbeat_timeout: Duration::from_secs(30),
        replicas: 1,
    })
    .await
    .expect("the link starts");
    // The test's own hands, with whatever password NATS has now.
    let nats_url = nats.url();
    let buckets_as = |password: &'static str| {
        let url = nats_url.clone();
        async move {
            let client = async_nats::ConnectOptions::with_user_and_password("varroa".into(), password.into())
                .connect(url)
                .await
                .expect("connect to NATS");
            let js = async_nats::jetstream::new(client);
            (
                kv::open_mites(&js, 1).await.expect("mites bucket"),
                kv::open_desired(&js, 1).await.expect("desired bucket"),
            )
        }
    };
    let mut env = Env::cluster().await;
    env.start_operator_with(config(), link);
    env.create("ci", json!({})).await;
    let (mites, desired) = buckets_as("first-password").await;
    wait_desired(&desired, "team-a.ci", "the desired entry is written", |e| e.is_some()).await;
    mites.put("team-a.ci.0", kv::encode(&hello())).await.expect("put");
    env.wait_phase("ci", ControllerPhase::Connected).await;

    // Rotated in NATS: the operator's connection is dropped and its retries are refused ...
    nats.set_password("second-password").expect("rotate in NATS");
    // ... until its file has the new password; the next reconnect reads it.
    NatsServer::write_credentials(&creds, "varroa", "second-password").expect("rotate the file");
    let (mites, desired) = buckets_as("second-password").await;
    let applied = MiteEntry {
        last_apply_result: Some(ApplyResultRecord {
            digest: "sha256:after-rotation".into(),
            succeeded: true,
            finished_at: Some(jiff::Timestamp::now()),
            ..Default::default()
        }),
        ..hello()
    };
    mites.put("team-a.ci.0", kv::encode(&applied)).await.expect("put");
    env.wait("ci", "the apply result written after the rotation", |c| {
        c.status
            .as_ref()
            .and_then(|s| s.last_apply_result.as_ref())
            .is_some_and(|r| r.digest == "sha256:after-rotation")
    })
    .await;
    desired.delete("team-a.ci").await.expect("delete");
    env.apply("apiVersion: varroa.dev/v1alpha1\nkind: CatalogItem\nmetadata: {name: msg, namespace: team-a}\nspec: {casc: {jenkins: {systemMessage: rotated}}}\n---\napiVersion: varroa.dev/v1alpha1\nkind: ComposedBundle\nmetadata: {name: b, namespace: team-a}\nspec: {inputs: [{catalogItem: {name: varroa-starter}}, {catalogItem: {name: msg}}]}\n").await;
    env.patch_spec("ci", json!({"composedBundleRef": {"name": "b"}})).await;
    wait_desired(&desired, "team-a.ci", "the desired entry is written with the new password", |e| {
        e.is_some_and(|e| e.files.get("jenkins.yaml").is_some_and(|y| y.contains("systemMessage: rotated")))
    })
    .await;
}
