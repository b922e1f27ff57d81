//! The end-to-end harness: a devcluster with the CRD and the shipped RBAC installed, and the
//! operator running in-process as the `vesper-system/vesper-operator` service account (so a
//! missing permission shows), with a clock the test can move forward. What is not Vesper's
//! (the cluster fixture, the service account, waits, Events) is optest's.

#![allow(dead_code)]

use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{CustomResourceExt, ResourceExt};
// What the tests use of optest, under the names they know (each test uses some).
#[allow(unused_imports)]
pub use optest::wait::Recorder;
#[allow(unused_imports)]
pub use optest::{WAIT, eventually, wait_deleted, wait_for};
use serde_json::json;
use std::sync::Arc;
use vesper_api::{Phase, PreviewEnvironment};
use vesper_operator::Config;
use vesper_operator::clock::Clock;
use vesper_operator::metrics::Metrics;

/// The namespace the tests' previews live in.
pub const TEAM: &str = "team-a";
/// The namespace of the ingress controller (the operator's default `--ingress-namespace`).
pub const INGRESS_NS: &str = "ingress-nginx";
/// The operator's namespace and ServiceAccount (deploy/vesper/operator-rbac.yaml).
const OPERATOR_NS: &str = "vesper-system";
const OPERATOR_SA: &str = "vesper-operator";

/// The cluster with the operator's CRD and RBAC, the admin, the operator's service account (with
/// exactly deploy/vesper/operator-rbac.yaml) and the operator when it runs, with its metrics; and the
/// clock the operator runs with. `env.dc`, `env.admin`, `env.sa`, `env.op` are the fixture's.
pub struct Env {
    fixture: optest::Fixture<Arc<Metrics>>,
    pub clock: Clock,
}

optest::deref_to_fixture!(Env, fixture, Arc<Metrics>);

/// The operator's settings the tests use unless they say otherwise.
pub fn config() -> Config {
    Config {
        preview_domain: Some("preview.example.com".into()),
        ingress_class: Some("nginx".into()),
        ..Config::default()
    }
}

/// A devcluster with 2 nodes.
pub fn cluster_options() -> devcluster::Options {
    devcluster::Options { nodes: 2, ..Default::default() }
}

impl Env {
    /// A cluster ready for the operator (not started yet).
    pub async fn cluster(options: devcluster::Options) -> Env {
        // The operator's warnings (failed reconciles) in the test's output: RUST_LOG to see more.
        optest::init_tracing("warn,vesper_operator=info");
        let fixture = optest::Fixture::start(options, (OPERATOR_NS, OPERATOR_SA), async |admin| {
            optest::cluster::install_crds(admin, &[PreviewEnvironment::crd()]).await;
            // deploy/vesper/operator-rbac.yaml, every document created as the admin.
            let rbac = optest::read("deploy/vesper/operator-rbac.yaml");
            let created = optest::cluster::write_yaml(admin, &rbac, optest::cluster::Write::Create).await;
            assert_eq!(
                created, 6,
                "operator-rbac.yaml: the namespace, account, ClusterRole and binding, Role and binding"
            );
            optest::cluster::create_namespaces(admin, &[INGRESS_NS, TEAM]).await;
        })
        .await;
        Env { fixture, clock: Clock::default() }
    }

    /// A cluster (2 nodes) with the operator running with `config`.
    pub async fn start(config: Config) -> Env {
        Self::start_with(cluster_options(), config).await
    }

    pub async fn start_with(options: devcluster::Options, config: Config) -> Env {
        let mut env = Env::cluster(options).await;
        env.start_operator(config);
        env
    }

    /// Start an operator (as the service account, with the env's clock and fresh metrics).
    pub fn start_operator(&mut self, config: Config) {
        let metrics = Arc::new(Metrics::new());
        let client = opkit::client::counted(self.sa_config.clone(), &metrics.requests)
            .expect("a client for the service account");
        let clock = self.clock.clone();
        self.fixture.start_operator(metrics.clone(), move |shutdown| {
            vesper_operator::run_with_clock(client, config, metrics, clock, shutdown)
        });
    }

    pub fn metrics(&self) -> Arc<Metrics> {
        self.operator().clone()
    }

    pub fn previews(&self) -> Api<PreviewEnvironment> {
        Api::namespaced(self.admin.clone(), TEAM)
    }

    /// Create a preview in TEAM.
    pub async fn create(&self, name: &str, spec: serde_json::Value) -> PreviewEnvironment {
        self.previews()
            .create(&PostParams::default(), &preview(name, spec))
            .await
            .unwrap_or_else(|e| panic!("create preview {name}: {e}"))
    }

    /// Change the spec (merge patch), as `kubectl patch --type merge` would.
    pub async fn patch_spec(&self, name: &str, spec: serde_json::Value) -> PreviewEnvironment {
        self.previews()
            .patch(name, &PatchParams::default(), &Patch::Merge(json!({"spec": spec})))
            .await
            .unwrap_or_else(|e| panic!("patch preview {name}: {e}"))
    }

    /// Change an annotation of the preview nobody reads: a watch event, no spec change.
    pub async fn touch(&self, name: &str) -> PreviewEnvironment {
        optest::touch(&self.previews(), name).await
    }

    /// Let the operator settle on the preview: touch it and wait until a reconcile ran, twice, so
    /// that no reconcile queued by an earlier change is still to come.
    pub async fn settle(&self, name: &str) {
        let m = self.metrics();
        optest::settle(&self.previews(), name, || reconciles_ok(&m) + reconciles_failed(&m)).await;
    }

    pub async fn get(&self, name: &str) -> PreviewEnvironment {
        self.previews().get(name).await.unwrap_or_else(|e| panic!("get preview {name}: {e}"))
    }

    /// Wait until the preview satisfies `cond`; on timeout, fail with what it looks like.
    pub async fn wait_pe(
        &self,
        name: &str,
        what: &str,
        cond: impl Fn(&PreviewEnvironment) -> bool,
    ) -> PreviewEnvironment {
        let c = move |o: Option<&PreviewEnvironment>| o.is_some_and(&cond);
        optest::wait::wait_for_explained(self.previews(), name, &format!("preview {what}"), c, |now| {
            let running = self.operator_running();
            format!(
                "operator running: {running}\nthe preview: {}",
                serde_json::to_string_pretty(&now).unwrap_or_default()
            )
        })
        .await
    }

    pub async fn wait_phase(&self, name: &str, phase: Phase) -> PreviewEnvironment {
        self.wait_pe(name, &format!("phase {phase}"), |pe| phase_of(pe) == Some(phase)).await
    }

    /// Ready for the current spec: phase Ready, the generation observed.
    pub async fn wait_ready(&self, name: &str) -> PreviewEnvironment {
        self.wait_pe(name, "phase Ready for the current generation", |pe| {
            phase_of(pe) == Some(Phase::Ready)
                && pe.status.as_ref().and_then(|s| s.observed_generation) == pe.metadata.generation
        })
        .await
    }

    /// Wait until the preview is gone.
    pub async fn wait_pe_gone(&self, name: &str) {
        let pe = self.previews().get_opt(name).await.expect("get preview");
        if let Some(pe) = pe {
            wait_deleted(self.previews(), name, &pe.uid().expect("a uid")).await;
        }
    }

    /// The preview's namespace name, as the docs spell it: `vesper-<ns>-<name>-<hash>`.
    pub fn ns_of(&self, name: &str) -> String {
        format!("vesper-{TEAM}-{name}-{}", hash8(TEAM, name))
    }

    /// An object in a preview namespace, as the admin reads it.
    pub async fn obj<K: optest::Namespaced>(&self, ns: &str, name: &str) -> K {
        Api::<K>::namespaced(self.admin.clone(), ns)
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("get {} {ns}/{name}: {e}", K::kind(&())))
    }

    /// Events about a preview (events.k8s.io, in TEAM).
    pub async fn events_of(&self, name: &str) -> Vec<Event> {
        optest::events::about(&self.admin, TEAM, "PreviewEnvironment", name).await
    }

    /// Wait for an Event about the preview with this reason and type; return it.
    pub async fn wait_event(&self, name: &str, reason: &str, type_: &str) -> Event {
        self.wait_event_with(name, reason, type_, "").await
    }

    /// Wait for an Event about the preview with this reason and type whose note contains `note`.
    pub async fn wait_event_with(&self, name: &str, reason: &str, type_: &str, note: &str) -> Event {
        let what = format!("{type_} {reason} saying {note:?}");
        optest::events::wait_for(&self.admin, TEAM, "PreviewEnvironment", name, &what, |e| {
            e.reason.as_deref() == Some(reason)
                && e.type_.as_deref() == Some(type_)
                && e.note.as_deref().unwrap_or_default().contains(note)
        })
        .await
    }
}

/// A PreviewEnvironment object.
pub fn preview(name: &str, spec: serde_json::Value) -> PreviewEnvironment {
    serde_json::from_value(json!({
        "apiVersion": "vesper.eventide.dev/v1alpha1", "kind": "PreviewEnvironment",
        "metadata": {"name": name, "namespace": TEAM}, "spec": spec,
    }))
    .expect("a PreviewEnvironment")
}

pub fn phase_of(pe: &PreviewEnvironment) -> Option<Phase> {
    pe.status.as_ref().and_then(|s| s.phase)
}

/// A condition of the preview's status.
pub fn condition<'a>(
    pe: &'a PreviewEnvironment,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    pe.status.as_ref()?.conditions.iter().find(|c| c.type_ == type_)
}

/// `(status, reason)` of a condition, for compact assertions.
pub fn cond(pe: &PreviewEnvironment, type_: &str) -> (String, String) {
    condition(pe, type_).map(|c| (c.status.clone(), c.reason.clone())).unwrap_or_default()
}

/// The first 8 hex digits of SHA-256 of `namespace/name` (the documented naming hash).
pub fn hash8(namespace: &str, name: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, format!("{namespace}/{name}").as_bytes());
    d.as_ref().iter().take(4).map(|b| format!("{b:02x}")).collect()
}

/// Successful reconciles so far.
pub fn reconciles_ok(m: &Metrics) -> u64 {
    m.reconcile.count("ok")
}

/// The operator's metrics whose names start with `prefix`, as Prometheus text.
pub fn metrics_text(m: &Metrics, prefix: &str) -> String {
    let mut reg = prometheus_client::registry::Registry::default();
    m.register(&mut reg);
    let mut text = String::new();
    let _ = prometheus_client::encoding::text::encode(&mut text, &reg);
    text.lines().filter(|l| l.starts_with(prefix)).filter(|l| !l.contains("_bucket")).collect::<Vec<_>>().join("\n")
}

/// Failed reconciles so far.
pub fn reconciles_failed(m: &Metrics) -> u64 {
    m.reconcile.count("error")
}
