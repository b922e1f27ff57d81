//! End to end: the operator (as `varroa-system/varroa-operator` with exactly
//! deploy/varroa/operator-rbac.yaml) against devcluster and its fault injection, checked the way a user
//! checks a controller: phase, attention, conditions, events and every object made for it.

mod support;

use devcluster::faults::{Fault, FaultRule};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::json;
use std::time::Duration;
use support::*;
use varroa_api::ControllerPhase;
use varroa_api::lifecycle::{ANNOTATION_RESTART_DIGEST, condition};
use varroa_operator::Config;
use varroa_operator::mite::MiteState;

fn restart_digest(sts: &StatefulSet) -> String {
    sts.spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get(ANNOTATION_RESTART_DIGEST).cloned())
        .expect("the pod template's restart digest")
}

async fn pod_uid(env: &Env, name: &str) -> String {
    env.obj::<Pod>(&format!("{name}-0")).await.uid().expect("uid")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_reaches_running_then_connected_with_every_object_checked() {
    let env = Env::start(config()).await;
    env.create("ci", json!({"ingress": {"host": "jenkins.team-a.example.com", "tlsSecretName": "ci-tls"}})).await;
    let c = env.wait_phase("ci", ControllerPhase::Running).await;
    let st = c.status.clone().expect("status");
    assert_eq!(st.attention, None);
    assert!(st.last_reconciled_at.is_some());
    assert!(st.config_digest.as_deref().is_some_and(|d| d.starts_with("sha256:")));
    let resolved = st.resolved.clone().expect("resolved");
    assert_eq!(resolved.version_profile.as_deref(), Some("lts"));
    assert_eq!(resolved.bundle.as_deref(), Some("varroa-starter"));
    assert_eq!(condition(&c, condition::READY).map(|x| x.status.as_str()), Some("True"));
    assert_eq!(condition(&c, condition::MITE_CONNECTED).map(|x| x.reason.as_str()), Some("NotConnected"));

    // Every object, named after the controller and owned by it.
    let uid = c.uid().expect("uid");
    let owned = |o: &dyn Fn() -> Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>| {
        o().iter().any(|r| r.uid == uid && r.controller == Some(true))
    };
    let sa: ServiceAccount = env.obj("ci").await;
    assert!(owned(&|| sa.owner_references().to_vec()));
    // The agents' rights come from the shipped ClusterRole, bound to the controller's
    // ServiceAccount; the operator writes no Role.
    let rb: RoleBinding = env.obj("ci-agents").await;
    assert_eq!((rb.role_ref.kind.as_str(), rb.role_ref.name.as_str()), ("ClusterRole", "varroa-jenkins-agents"));
    let subjects = rb.subjects.clone().unwrap_or_default();
    assert_eq!(subjects.len(), 1);
    assert_eq!((subjects[0].name.as_str(), subjects[0].namespace.as_deref()), ("ci", Some(TEAM)));
    assert!(Api::<Role>::namespaced(env.admin.clone(), TEAM).get_opt("ci-agents").await.expect("get").is_none());
    let cm: ConfigMap = env.obj("ci").await;
    let data = cm.data.clone().expect("data");
    assert!(data["jenkins.yaml"].contains("numExecutors: 0"));
    assert!(data["jenkins.yaml"].contains("jenkinsUrl: http://ci.team-a.svc.cluster.local:8080/"));
    assert!(data["jenkins.yaml"].contains("url: https://jenkins.team-a.example.com/"));
    assert!(data["plugins.txt"].contains("git:5.7.0\n"));
    let secret: Secret = env.obj("ci-mite-tls").await;
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
    let crt = String::from_utf8(secret.data.clone().unwrap()["tls.crt"].0.clone()).unwrap();
    assert_eq!(varroa_pki::identity_of(&crt).expect("an identity").to_string(), "team-a/ci");
    let svc: Service = env.obj("ci").await;
    assert_eq!(svc.spec.as_ref().unwrap().ports.as_ref().unwrap()[0].port, 8080);
    let headless: Service = env.obj("ci-headless").await;
    assert_eq!(headless.spec.as_ref().unwrap().cluster_ip.as_deref(), Some("None"));
    let ing: Ingress = env.obj("ci").await;
    assert_eq!(
        ing.spec.as_ref().unwrap().rules.as_ref().unwrap()[0].host.as_deref(),
        Some("jenkins.team-a.example.com")
    );
    let sts: StatefulSet = env.obj("ci").await;
    assert!(owned(&|| sts.owner_references().to_vec()));
    let spec = sts.spec.clone().unwrap();
    assert_eq!(spec.replicas, Some(1));
    assert_eq!(spec.service_name.as_deref(), Some("ci-headless"));
    let pod_spec = spec.template.spec.clone().unwrap();
    let names: Vec<&str> = pod_spec.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["jenkins", "mite"]);
    assert_eq!(pod_spec.init_containers.as_ref().unwrap()[0].name, "plugins-init");
    // ADR 0004: the mite's Jenkins token in its Secret, Jenkins seeing that key alone, and the
    // writable JCasC directory seeded from the ConfigMap before Jenkins starts.
    let token = secret.data.clone().unwrap()["jenkins-token"].0.clone();
    assert!(token.len() == 64 && token.iter().all(u8::is_ascii_hexdigit), "a random hex token");
    let casc_init = &pod_spec.init_containers.as_ref().unwrap()[1];
    assert_eq!(casc_init.name, "casc-init");
    assert_eq!(
        casc_init.args.clone().unwrap(),
        ["seed-casc", "--from", "/var/jenkins_config/jenkins.yaml", "--to", "/var/jenkins_home/casc_configs"]
    );
    let env_of = |c: &k8s_openapi::api::core::v1::Container, k: &str| {
        c.env.clone().unwrap_or_default().into_iter().find(|e| e.name == k).and_then(|e| e.value)
    };
    let (jenkins, mite) = (&pod_spec.containers[0], &pod_spec.containers[1]);
    assert_eq!(env_of(jenkins, "CASC_JENKINS_CONFIG").as_deref(), Some("/var/jenkins_home/casc_configs"));
    assert_eq!(env_of(mite, "VARROA_CASC_DIR").as_deref(), Some("/var/jenkins_home/casc_configs"));
    assert_eq!(env_of(jenkins, "VARROA_MITE_USER"), env_of(mite, "VARROA_JENKINS_USER"));
    assert_eq!(env_of(mite, "VARROA_JENKINS_TOKEN_FILE").as_deref(), Some("/var/run/varroa/tls/jenkins-token"));
    let token_volume = pod_spec.volumes.clone().unwrap().into_iter().find(|v| v.name == "mite-token").expect("volume");
    let items = token_volume.secret.and_then(|s| s.items).expect("only chosen keys");
    assert_eq!(items.iter().map(|i| i.key.as_str()).collect::<Vec<_>>(), ["jenkins-token"]);
    assert_eq!(pod_spec.containers[0].image.as_deref(), Some(JENKINS));
    let claim = &spec.volume_claim_templates.as_ref().unwrap()[0];
    assert_eq!(
        claim.spec.as_ref().unwrap().resources.as_ref().unwrap().requests.as_ref().unwrap()["storage"].0,
        "10Gi"
    );
    // The pod runs under Pod Security restricted (the namespace enforces it) and is ready.
    let pod: Pod = env.obj("ci-0").await;
    assert!(pod.status.as_ref().unwrap().container_statuses.as_ref().unwrap().iter().all(|c| c.ready));
    let pvc: PersistentVolumeClaim = env.obj("jenkins-home-ci-0").await;
    assert!(pvc.spec.is_some());

    // The mite connects: Connected, the normal steady state.
    env.mites.set("team-a", "ci", MiteState { connected: true, ..Default::default() });
    let c = env.wait_phase("ci", ControllerPhase::Connected).await;
    assert_eq!(condition(&c, condition::MITE_CONNECTED).map(|x| x.status.as_str()), Some("True"));
    // The stream is lost: Running, "Mite unreachable", and the pod stays.
    let before = pod_uid(&env, "ci").await;
    env.mites.set("team-a", "ci", MiteState { connected: false, lost: true, ..Default::default() });
    let c = env.wait("ci", "Mite unreachable", |c| attention_of(c).as_deref() == Some("Mite unreachable")).await;
    assert_eq!(phase_of(&c), Some(ControllerPhase::Running));
    assert_eq!(pod_uid(&env, "ci").await, before, "a lost mite stream keeps the pod");
    // A failed apply shows as "Apply failed" (it outranks the lost stream).
    env.mites.set(
        "team-a",
        "ci",
        MiteState {
            connected: true,
            lost: false,
            last_apply: Some(varroa_api::ApplyResult {
                succeeded: false,
                message: "jenkins.yaml: unknown key 'numExecutorz'".into(),
                digest: "sha256:abc".into(),
                time: None,
            }),
            ..Default::default()
        },
    );
    env.wait("ci", "Apply failed", |c| attention_of(c).as_deref() == Some("Apply failed")).await;
    let events = env.events_of("ci").await;
    assert!(events.iter().any(|e| e.reason.as_deref() == Some("PhaseRunning")), "phase events: {events:#?}");

    // Deleting the controller deletes what was made for it; the volume stays (Retain).
    env.controllers().delete("ci", &DeleteParams::default()).await.expect("delete");
    let sts_api: Api<StatefulSet> = Api::namespaced(env.admin.clone(), TEAM);
    let gone = tokio::time::timeout(WAIT, async {
        loop {
            if sts_api.get_opt("ci").await.expect("get").is_none() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(gone.is_ok(), "the StatefulSet is collected with its Controller");
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(env.admin.clone(), TEAM);
    assert!(pvcs.get_opt("jenkins-home-ci-0").await.expect("get").is_some(), "the volume is kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jcasc_change_does_not_roll_the_pod_and_a_plugin_change_does() {
    // Pods take a moment to start, so the roll is observable (instant, it could finish between
    // two passes of the operator).
    let options = devcluster::Options { pod_startup: Duration::from_millis(300), ..Default::default() };
    let env = Env::start_with(options, config()).await;
    env.apply(
        "apiVersion: varroa.dev/v1alpha1\nkind: CatalogItem\nmetadata: {name: msg, namespace: team-a}\nspec: {casc: {jenkins: {systemMessage: one}}}\n---\napiVersion: varroa.dev/v1alpha1\nkind: ComposedBundle\nmetadata: {name: b, namespace: team-a}\nspec: {inputs: [{catalogItem: {name: varroa-starter}}, {catalogItem: {name: msg}}]}\n",
    )
    .await;
    env.create("ci", json!({"composedBundleRef": {"name": "b"}})).await;
    env.wait_phase("ci", ControllerPhase::Running).await;
    let sts: StatefulSet = env.obj("ci").await;
    let digest = restart_digest(&sts);
    let pod = pod_uid(&env, "ci").await;

    // JCasC only: the ConfigMap changes, the pod template does not.
    env.apply("apiVersion: varroa.dev/v1alpha1\nkind: CatalogItem\nmetadata: {name: msg, namespace: team-a}\nspec: {casc: {jenkins: {systemMessage: two}}}\n").await;
    let cms: Api<ConfigMap> = Api::namespaced(env.admin.clone(), TEAM);
    let r = tokio::time::timeout(WAIT, async {
        loop {
            let cm = cms.get("ci").await.expect("cm");
            if cm.data.unwrap_or_default().get("jenkins.yaml").is_some_and(|y| y.contains("systemMessage: two")) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(r.is_ok(), "the ConfigMap follows the catalog item");
    env.settle("ci").await;
    let sts: StatefulSet = env.obj("ci").await;
    assert_eq!(restart_digest(&sts), digest, "a JCasC change must not roll the pod");
    assert_eq!(pod_uid(&env, "ci").await, pod);
    let c = env.wait_phase("ci", ControllerPhase::Running).await;
    assert_eq!(
        c.status.unwrap().config_digest.as_deref(),
        Some(cms.get("ci").await.unwrap().annotations()["varroa.dev/config-digest"].as_str())
    );

    // A plugin pin: restart-class, the pod rolls through Provisioning back to Running.
    env.patch_spec("ci", json!({"plugins": [{"name": "timestamper", "version": "1.28"}]})).await;
    env.wait("ci", "Provisioning while the pod rolls", |c| phase_of(c) == Some(ControllerPhase::Provisioning)).await;
    env.wait_phase("ci", ControllerPhase::Running).await;
    let sts: StatefulSet = env.obj("ci").await;
    assert_ne!(restart_digest(&sts), digest);
    assert_ne!(pod_uid(&env, "ci").await, pod, "a plugin change rolls the pod");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_scales_to_zero_and_back() {
    let env = Env::start(config()).await;
    env.create("ci", json!({})).await;
    env.wait_phase("ci", ControllerPhase::Running).await;
    env.patch_spec("ci", json!({"powerState": "Stopped"})).await;
    let c = env.wait_phase("ci", ControllerPhase::Stopped).await;
    assert_eq!(attention_of(&c), None);
    let sts: StatefulSet = env.obj("ci").await;
    assert_eq!(sts.spec.unwrap().replicas, Some(0));
    let pods: Api<Pod> = Api::namespaced(env.admin.clone(), TEAM);
    assert!(pods.get_opt("ci-0").await.unwrap().is_none());
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(env.admin.clone(), TEAM);
    assert!(pvcs.get_opt("jenkins-home-ci-0").await.unwrap().is_some(), "the volume stays while stopped");
    env.patch_spec("ci", json!({"powerState": "Running"})).await;
    env.wait_phase("ci", ControllerPhase::Running).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_looping_jenkins_is_boot_failed_with_exit_code_and_restarts() {
    let env = Env::start(config()).await;
    env.dc.set_faults(vec![FaultRule::new(JENKINS, Fault::CrashLoop { exit_code: 137 })]);
    env.create("ci", json!({})).await;
    let c = env
        .wait("ci", "Boot failed with a restart", |c| {
            attention_of(c).as_deref() == Some("Boot failed")
                && condition(c, condition::JENKINS_BOOT_FAILED).is_some_and(|x| !x.message.contains(", 0 restarts"))
        })
        .await;
    let cond = condition(&c, condition::JENKINS_BOOT_FAILED).expect("the condition");
    assert_eq!((cond.status.as_str(), cond.reason.as_str()), ("True", "CrashLoopBackOff"));
    assert!(cond.message.contains("exit code 137"), "{}", cond.message);
    assert!(cond.message.contains("restarts"), "{}", cond.message);
    assert_eq!(phase_of(&c), Some(ControllerPhase::Provisioning), "not ready: still provisioning");
    // Fixed: the attention clears.
    env.dc.set_faults(vec![]);
    env.controllers().get("ci").await.unwrap();
    let pods: Api<Pod> = Api::namespaced(env.admin.clone(), TEAM);
    pods.delete("ci-0", &DeleteParams::default()).await.expect("delete the pod");
    env.wait("ci", "no attention", |c| attention_of(c).is_none() && phase_of(c) == Some(ControllerPhase::Running))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_plugins_init_is_plugin_roll_failed() {
    let cfg = config();
    let env = Env::start(cfg.clone()).await;
    env.dc.set_faults(vec![FaultRule::new(cfg.plugins_init_image(), Fault::CrashLoop { exit_code: 3 })]);
    env.create("ci", json!({})).await;
    let c = env.wait("ci", "Plugin roll failed", |c| attention_of(c).as_deref() == Some("Plugin roll failed")).await;
    let cond = condition(&c, condition::PLUGIN_ROLL_FAILED).expect("the condition");
    assert!(cond.message.contains("exit code 3") && cond.message.contains("plugins-init"), "{}", cond.message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_controller_goes_stale_while_a_boot_failed_one_stays_fresh() {
    let mut cfg = config();
    cfg.stamp_interval = Duration::from_millis(500);
    cfg.resync_interval = Duration::from_millis(500);
    let env = Env::start(cfg).await;
    env.dc.set_faults(vec![FaultRule::new("jenkins/jenkins:2.479.3-crashing", Fault::CrashLoop { exit_code: 1 })]);
    env.apply(
        "apiVersion: varroa.dev/v1alpha1\nkind: JenkinsVersionProfile\nmetadata: {name: crashing}\nspec:\n  jenkinsVersion: \"2.479.3\"\n  image: jenkins/jenkins:2.479.3-crashing\n  plugins:\n  - {name: git, version: \"5.7.0\", sha256: \"2222222222222222222222222222222222222222222222222222222222222222\"}\n  - {name: configuration-as-code, version: \"1\", sha256: \"1111111111111111111111111111111111111111111111111111111111111111\"}\n  - {name: kubernetes, version: \"1\", sha256: \"4444444444444444444444444444444444444444444444444444444444444444\"}\n  - {name: workflow-aggregator, version: \"1\", sha256: \"5555555555555555555555555555555555555555555555555555555555555555\"}\n",
    )
    .await;
    env.create("blocked", json!({})).await;
    env.create("booting", json!({"versionProfile": "crashing"})).await;
    env.wait_phase("blocked", ControllerPhase::Running).await;
    // A pin against the lock: Blocked, the message names the pin, the lock and the fix.
    env.patch_spec("blocked", json!({"plugins": [{"name": "git", "version": "5.6.0"}]})).await;
    let b = env.wait("blocked", "Blocked", |c| attention_of(c).as_deref() == Some("Blocked")).await;
    let msg = condition(&b, condition::RECONCILE_BLOCKED).unwrap().message.clone();
    assert!(msg.contains("git:5.6.0") && msg.contains("locks git:5.7.0") && msg.contains("remove the pin"), "{msg}");
    assert_eq!(phase_of(&b), Some(ControllerPhase::Running), "the phase still says where it is");
    let blocked_stamp = b.status.unwrap().last_reconciled_at.expect("a stamp from before").0;
    let first = env.wait("booting", "Boot failed", |c| attention_of(c).as_deref() == Some("Boot failed")).await;
    let first_stamp = first.status.unwrap().last_reconciled_at.expect("stamped").0;
    // The boot-failed controller's stamp advances; the blocked one's does not.
    let later = env
        .wait("booting", "a newer stamp", |c| {
            c.status.as_ref().and_then(|s| s.last_reconciled_at.as_ref()).is_some_and(|t| t.0 > first_stamp)
        })
        .await;
    assert_eq!(attention_of(&later).as_deref(), Some("Boot failed"));
    let b = env.controllers().get("blocked").await.unwrap();
    assert_eq!(b.status.unwrap().last_reconciled_at.unwrap().0, blocked_stamp, "a Blocked controller goes stale");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_class_change_reaches_every_controller_of_the_class() {
    let env = Env::start(config()).await;
    env.apply("apiVersion: varroa.dev/v1alpha1\nkind: ControllerClass\nmetadata: {name: small}\nspec: {jvmOptions: [\"-Xmx1g\"]}\n").await;
    for n in ["one", "two", "other"] {
        let spec = if n == "other" { json!({}) } else { json!({"className": "small"}) };
        env.create(n, spec).await;
    }
    for n in ["one", "two", "other"] {
        env.wait_phase(n, ControllerPhase::Running).await;
    }
    let other_digest = restart_digest(&env.obj::<StatefulSet>("other").await);
    env.apply("apiVersion: varroa.dev/v1alpha1\nkind: ControllerClass\nmetadata: {name: small}\nspec: {jvmOptions: [\"-Xmx2g\"]}\n").await;
    let sts: Api<StatefulSet> = Api::namespaced(env.admin.clone(), TEAM);
    for n in ["one", "two"] {
        let r = tokio::time::timeout(WAIT, async {
            loop {
                let s = sts.get(n).await.unwrap();
                let env_vars = s.spec.unwrap().template.spec.unwrap().containers[0].env.clone().unwrap_or_default();
                if env_vars.iter().any(|e| e.name == "JAVA_OPTS" && e.value.as_deref() == Some("-Xmx2g")) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        assert!(r.is_ok(), "controller {n} got the class's new JVM options");
    }
    env.settle("other").await;
    assert_eq!(restart_digest(&env.obj::<StatefulSet>("other").await), other_digest, "not of the class: untouched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_no_op_reconcile_and_an_operator_restart_write_nothing() {
    let mut env = Env::start(config()).await;
    env.create("one", json!({"ingress": {"host": "one.example.com"}})).await;
    env.create("two", json!({"cells": 2})).await;
    env.wait_phase("one", ControllerPhase::Running).await;
    env.wait_phase("two", ControllerPhase::Running).await;
    env.settle("one").await;
    env.settle("two").await;
    let m = env.metrics();
    let before = m.writes.writes();
    env.settle("one").await;
    env.settle("two").await;
    assert_eq!(m.writes.writes(), before, "a reconcile that changes nothing writes nothing");

    let one_rv = env.controllers().get("one").await.unwrap().resource_version();
    let sts_rv = env.obj::<StatefulSet>("one").await.resource_version();
    env.stop_operator().await;
    env.start_operator(config());
    env.settle("one").await;
    env.settle("two").await;
    let m = env.metrics();
    assert_eq!(m.writes.writes(), 0, "an operator restart writes nothing");
    assert!(m.writes.get(opkit::apply::Outcome::Unchanged) > 0);
    assert_eq!(env.obj::<StatefulSet>("one").await.resource_version(), sts_rv);
    let c = env.controllers().get("one").await.unwrap();
    assert_ne!(c.resource_version(), None);
    let _ = one_rv;
    let pods: Api<Pod> = Api::namespaced(env.admin.clone(), TEAM);
    assert_eq!(pods.list(&ListParams::default().labels("varroa.dev/controller=two")).await.unwrap().items.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_controller_hibernates_and_wakes_on_request() {
    let env = Env::start(config()).await;
    env.create("ci", json!({"hibernation": {"idleAfter": "2h"}})).await;
    env.wait_phase("ci", ControllerPhase::Running).await;
    let digest = restart_digest(&env.obj::<StatefulSet>("ci").await);
    // Idle, but not long enough: nothing happens.
    env.mites.set("team-a", "ci", MiteState { idle_for: Some(Duration::from_secs(3600)), ..Default::default() });
    env.settle("ci").await;
    assert_eq!(env.obj::<StatefulSet>("ci").await.spec.unwrap().replicas, Some(1));
    // Idle past the policy: parked at zero, phase Hibernated, the volume kept.
    env.mites.set("team-a", "ci", MiteState { idle_for: Some(Duration::from_secs(3 * 3600)), ..Default::default() });
    let c = env.wait_phase("ci", ControllerPhase::Hibernated).await;
    assert_eq!(attention_of(&c), None, "hibernation needs no attention");
    let sts: StatefulSet = env.obj("ci").await;
    assert_eq!(sts.spec.clone().unwrap().replicas, Some(0));
    assert_eq!(restart_digest(&sts), digest, "parking changes no pod setting");
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(env.admin.clone(), TEAM);
    assert!(pvcs.get_opt("jenkins-home-ci-0").await.unwrap().is_some());
    // It stays parked when the mite's idle report is gone (the pod is gone with it)...
    env.mites.set("team-a", "ci", MiteState::default());
    env.settle("ci").await;
    assert_eq!(phase_of(&env.controllers().get("ci").await.unwrap()), Some(ControllerPhase::Hibernated));
    // ...until something asks to wake it.
    env.mites.set("team-a", "ci", MiteState { wake_requested: true, ..Default::default() });
    env.wait_phase("ci", ControllerPhase::Running).await;
    let events = env.events_of("ci").await;
    assert!(events.iter().any(|e| e.reason.as_deref() == Some("PhaseHibernated")), "{events:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_gateway_ca_reissues_the_certificate_and_rolls_the_pod() {
    let env = Env::start(config()).await;
    env.create("ci", json!({})).await;
    env.wait_phase("ci", ControllerPhase::Running).await;
    let digest = restart_digest(&env.obj::<StatefulSet>("ci").await);
    let pod = pod_uid(&env, "ci").await;
    let token_before = env.obj::<Secret>("ci-mite-tls").await.data.unwrap()["jenkins-token"].0.clone();
    let ca = install_gateway_ca(&env.admin, "rotated gateway CA").await;
    // No touch: the operator watches the CA Secret (by name) and reconciles every controller.
    let secrets: Api<Secret> = Api::namespaced(env.admin.clone(), TEAM);
    let r = tokio::time::timeout(WAIT, async {
        loop {
            let s = secrets.get("ci-mite-tls").await.expect("secret");
            let crt = String::from_utf8(s.data.unwrap()["tls.crt"].0.clone()).unwrap();
            if varroa_pki::issuer_fingerprint_matches(&crt, &ca) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(r.is_ok(), "the mite certificate is issued again by the new CA");
    let token_after = secrets.get("ci-mite-tls").await.expect("secret").data.unwrap()["jenkins-token"].0.clone();
    assert_eq!(token_after, token_before, "a new certificate keeps the mite's Jenkins token");
    // A new CA is restart-class: the pod template changes and the pod rolls.
    let sts: Api<StatefulSet> = Api::namespaced(env.admin.clone(), TEAM);
    let pods: Api<Pod> = Api::namespaced(env.admin.clone(), TEAM);
    let r = tokio::time::timeout(WAIT, async {
        loop {
            let rolled = restart_digest(&sts.get("ci").await.unwrap()) != digest
                && pods.get_opt("ci-0").await.unwrap().is_some_and(|p| p.uid().as_deref() != Some(pod.as_str()));
            if rolled {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(r.is_ok(), "the pod template changed and the pod rolled");
    env.wait("ci", "Running again", |c| phase_of(c) == Some(ControllerPhase::Running)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unready_cell_is_replaced_after_its_grace_and_a_single_controller_is_not() {
    let mut cfg = config();
    cfg.cell_unready_grace = Duration::from_millis(800);
    let env = Env::start(cfg).await;
    env.dc.set_faults(vec![FaultRule::new(JENKINS, Fault::Unready)]);
    env.create("cells", json!({"cells": 2})).await;
    env.create("single", json!({})).await;
    let pods: Api<Pod> = Api::namespaced(env.admin.clone(), TEAM);
    let single = tokio::time::timeout(WAIT, async {
        loop {
            if let Some(p) = pods.get_opt("single-0").await.unwrap() {
                return p.uid().unwrap();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the single controller's pod");
    let replaced = tokio::time::timeout(WAIT, async {
        loop {
            let events = env.events_of("cells").await;
            if let Some(e) = events.iter().find(|e| e.reason.as_deref() == Some("CellReplaced")) {
                return e.note.clone().unwrap_or_default();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("a CellReplaced event");
    assert!(replaced.contains("was unready for") && replaced.contains("replaced"), "{replaced}");
    env.settle("single").await;
    assert_eq!(pods.get("single-0").await.unwrap().uid().unwrap(), single, "a single controller is never replaced");
    assert!(env.events_of("single").await.iter().all(|e| e.reason.as_deref() != Some("CellReplaced")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_the_api_server_refuses_fails_the_controller_until_fixed() {
    // Every annotation passes the allow-list here, so the invalid key reaches the API server.
    let env = Env::start(Config { ingress_annotation_allowlist: vec!["*".into()], ..config() }).await;
    env.create("ci", json!({"ingress": {"host": "ci.example.com", "annotations": {"not a valid key!": "x"}}})).await;
    let c = env.wait_phase("ci", ControllerPhase::Failed).await;
    assert_eq!(attention_of(&c).as_deref(), Some("Failed"));
    let cond = condition(&c, condition::FAILED).expect("the Failed condition");
    assert_eq!((cond.status.as_str(), cond.reason.as_str()), ("True", "ProvisioningRefused"));
    assert!(cond.message.contains("Ingress") && cond.message.contains("not a valid key!"), "{}", cond.message);
    let stamp = c.status.as_ref().and_then(|s| s.last_reconciled_at.clone());
    // During the dwell nothing is retried (the stamp does not move)...
    env.touch("ci").await;
    let again = env.controllers().get("ci").await.unwrap();
    assert_eq!(again.status.and_then(|s| s.last_reconciled_at), stamp);
    // ...and a fix (a new generation) ends it at once.
    env.patch_spec("ci", json!({"ingress": {"annotations": null}})).await;
    let c = env.wait_phase("ci", ControllerPhase::Running).await;
    assert_eq!(condition(&c, condition::FAILED).map(|x| x.status.as_str()), Some("False"));
}
