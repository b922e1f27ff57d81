//! The end-to-end harness: a devcluster with the Varroa CRDs, the shipped RBAC
//! (deploy/varroa/operator-rbac.yaml, with the agents' ClusterRole) and admission policy
//! (deploy/varroa/admission-policy.yaml) and a gateway CA installed, the example configuration applied, and
//! the operator running in-process as `varroa-system/varroa-operator`, with a mite source the
//! test drives. What is not Varroa's (the cluster fixture, the service account, waits, Events)
//! is optest's.

#![allow(dead_code)]

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
pub use optest::cluster::apply_yaml;
// What the tests use of optest, under the names they know (each test uses some).
#[allow(unused_imports)]
pub use optest::{WAIT, eventually, repo};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use varroa_api::{Controller, ControllerPhase};
use varroa_operator::Config;
use varroa_operator::metrics::Metrics;
use varroa_operator::mite::StaticMites;

/// The namespace of the tests' controllers.
pub const TEAM: &str = "team-a";
/// The Jenkins image of the test profile.
pub const JENKINS: &str = "jenkins/jenkins:2.479.3-lts-jdk17";

/// The cluster with Varroa's CRDs, RBAC, admission policy, test world and gateway CA, the admin,
/// the operator's service account and the operator when it runs, with its metrics; and the mite
/// state the test drives. `env.dc`, `env.admin`, `env.sa`, `env.op` are the fixture's.
pub struct Env {
    fixture: optest::Fixture<Arc<Metrics>>,
    pub mites: StaticMites,
}

optest::deref_to_fixture!(Env, fixture, Arc<Metrics>);

/// The operator settings of the tests.
pub fn config() -> Config {
    Config::for_tests()
}

/// The test world: a profile, defaults naming it, a namespace (Pod Security restricted).
pub const WORLD: &str = r#"
apiVersion: varroa.dev/v1alpha1
kind: JenkinsVersionProfile
metadata: {name: lts}
spec:
  jenkinsVersion: "2.479.3"
  image: jenkins/jenkins:2.479.3-lts-jdk17
  plugins:
  - {name: configuration-as-code, version: "1909.vb_b_f59a_27d013", sha256: "1111111111111111111111111111111111111111111111111111111111111111"}
  - {name: git, version: "5.7.0", sha256: "2222222222222222222222222222222222222222222222222222222222222222"}
  - {name: job-dsl, version: "1.90", sha256: "3333333333333333333333333333333333333333333333333333333333333333"}
  - {name: kubernetes, version: "4313.va_9b_4fe2a_0e34", sha256: "4444444444444444444444444444444444444444444444444444444444444444"}
  - {name: workflow-aggregator, version: "600.vb_57cdd26fdd7", sha256: "5555555555555555555555555555555555555555555555555555555555555555"}
  - {name: role-strategy, version: "756.v978cb_392eb_d3", sha256: "6666666666666666666666666666666666666666666666666666666666666666"}
---
apiVersion: varroa.dev/v1alpha1
kind: ProvisioningDefaults
metadata: {name: default}
spec:
  versionProfile: lts
  resources:
    requests: {cpu: 500m, memory: 1Gi}
  storage: {size: 10Gi}
---
apiVersion: v1
kind: Namespace
metadata:
  name: team-a
  labels:
    pod-security.kubernetes.io/enforce: restricted
"#;

impl Env {
    /// A cluster ready for the operator (not started yet).
    pub async fn cluster() -> Env {
        Self::cluster_with(devcluster::Options::default()).await
    }

    /// A cluster with these devcluster options (e.g. a pod startup time).
    pub async fn cluster_with(options: devcluster::Options) -> Env {
        optest::init_tracing("warn,varroa_operator=info");
        let fixture = optest::Fixture::start(options, ("varroa-system", "varroa-operator"), async |admin| {
            optest::cluster::apply_file(admin, "deploy/varroa/crds.yaml").await;
            let crds: Vec<String> = varroa_api::crds().iter().map(|c| c.name_any()).collect();
            optest::cluster::wait_established(admin, &crds.iter().map(String::as_str).collect::<Vec<_>>()).await;
            optest::cluster::apply_file(admin, "deploy/varroa/operator-rbac.yaml").await;
            optest::cluster::apply_file(admin, "deploy/varroa/admission-policy.yaml").await;
            apply_yaml(admin, WORLD).await;
            install_gateway_ca(admin, "gateway CA").await;
        })
        .await;
        Env { fixture, mites: StaticMites::default() }
    }

    pub async fn start(config: Config) -> Env {
        Self::start_with(devcluster::Options::default(), config).await
    }

    pub async fn start_with(options: devcluster::Options, config: Config) -> Env {
        let mut env = Env::cluster_with(options).await;
        env.start_operator(config);
        env
    }

    pub fn start_operator(&mut self, config: Config) {
        let mites = Arc::new(self.mites.clone());
        self.start_operator_with(config, mites);
    }

    /// The operator with another source of mite state (the real control link).
    pub fn start_operator_with(&mut self, config: Config, mites: Arc<dyn varroa_operator::mite::MiteSource>) {
        self.start_operator_publishing(config, mites, varroa_operator::activity::Publisher::off());
    }

    /// The operator with a source of mite state and a lifecycle activity publisher.
    pub fn start_operator_publishing(
        &mut self,
        config: Config,
        mites: Arc<dyn varroa_operator::mite::MiteSource>,
        activity: varroa_operator::activity::Publisher,
    ) {
        let metrics = Arc::new(Metrics::new());
        let client = self.sa.clone();
        self.fixture.start_operator(metrics.clone(), move |shutdown| {
            varroa_operator::run(client, config, metrics, mites, activity, shutdown)
        });
    }

    pub fn metrics(&self) -> Arc<Metrics> {
        self.operator().clone()
    }

    pub fn controllers(&self) -> Api<Controller> {
        Api::namespaced(self.admin.clone(), TEAM)
    }

    /// Apply YAML documents as the admin.
    pub async fn apply(&self, yaml: &str) {
        apply_yaml(&self.admin, yaml).await;
    }

    pub async fn create(&self, name: &str, spec: serde_json::Value) -> Controller {
        let c: Controller = serde_json::from_value(json!({
            "apiVersion": "varroa.dev/v1alpha1", "kind": "Controller",
            "metadata": {"name": name, "namespace": TEAM}, "spec": spec,
        }))
        .expect("a Controller");
        self.controllers().create(&PostParams::default(), &c).await.unwrap_or_else(|e| panic!("create {name}: {e}"))
    }

    pub async fn patch_spec(&self, name: &str, spec: serde_json::Value) -> Controller {
        self.controllers()
            .patch(name, &PatchParams::default(), &Patch::Merge(json!({"spec": spec})))
            .await
            .unwrap_or_else(|e| panic!("patch {name}: {e}"))
    }

    /// An annotation nobody reads: a watch event without a spec change.
    pub async fn touch(&self, name: &str) {
        optest::touch(&self.controllers(), name).await;
    }

    /// Wait until the controller satisfies `f`; on timeout, fail with its status.
    pub async fn wait(&self, name: &str, what: &str, f: impl Fn(&Controller) -> bool) -> Controller {
        let cond = move |c: Option<&Controller>| c.is_some_and(&f);
        optest::wait::wait_for_explained(self.controllers(), name, &format!("controller {what}"), cond, |now| {
            format!("it is: {}", serde_json::to_string_pretty(&now.map(|c| c.status)).unwrap_or_default())
        })
        .await
    }

    pub async fn wait_phase(&self, name: &str, phase: ControllerPhase) -> Controller {
        self.wait(name, &format!("phase {phase} for its generation"), |c| {
            phase_of(c) == Some(phase) && c.status.as_ref().and_then(|s| s.observed_generation) == c.metadata.generation
        })
        .await
    }

    pub async fn obj<K: optest::Namespaced>(&self, name: &str) -> K {
        Api::<K>::namespaced(self.admin.clone(), TEAM)
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("get {} {TEAM}/{name}: {e}", K::kind(&())))
    }

    pub async fn events_of(&self, name: &str) -> Vec<Event> {
        optest::events::about(&self.admin, TEAM, "Controller", name).await
    }

    /// Let the operator settle: touch the controller and wait until two more reconciles ran.
    pub async fn settle(&self, name: &str) {
        let m = self.metrics();
        optest::settle(&self.controllers(), name, || reconciles(&m)).await;
    }
}

pub fn phase_of(c: &Controller) -> Option<ControllerPhase> {
    c.status.as_ref().and_then(|s| s.phase)
}

pub fn attention_of(c: &Controller) -> Option<String> {
    c.status.as_ref().and_then(|s| s.attention.clone())
}

pub fn condition<'a>(
    c: &'a Controller,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    c.status.as_ref()?.conditions.iter().find(|x| x.type_ == type_)
}

/// Reconciles ended (ok or error).
pub fn reconciles(m: &Metrics) -> u64 {
    // One guard at a time: a Family's guard holds its lock (a second get_or_create that must
    // insert would wait on it forever).
    let ok = m.reconcile.count("ok");
    let failed = m.reconcile.count("error");
    ok + failed
}

/// A gateway CA in varroa-system/varroa-gateway-ca (what an installation provides).
pub async fn install_gateway_ca(admin: &Client, cn: &str) -> varroa_pki::CertificateAuthority {
    let ca = varroa_pki::CertificateAuthority::generate(cn, Duration::from_secs(365 * 86400)).expect("a CA");
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "varroa-gateway-ca", "namespace": "varroa-system"},
        "type": "kubernetes.io/tls",
        "stringData": {"tls.crt": ca.cert_pem(), "tls.key": ca.key_pem()},
    }))
    .expect("a Secret");
    let api: Api<Secret> = Api::namespaced(admin.clone(), "varroa-system");
    api.patch("varroa-gateway-ca", &PatchParams::apply("e2e").force(), &Patch::Apply(&secret))
        .await
        .expect("the gateway CA Secret");
    ca
}
