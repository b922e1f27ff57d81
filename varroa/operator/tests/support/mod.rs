//! The end-to-end harness: a devcluster with the Varroa CRDs, the shipped RBAC
//! (deploy/varroa/rbac.yaml, with the agents' ClusterRole) and admission policy
//! (deploy/varroa/admission-policy.yaml) and a gateway CA installed, the example configuration applied, and
//! the operator running in-process as `varroa-system/varroa-operator`, with a mite source the
//! test drives.

#![allow(dead_code)]

use devcluster::DevCluster;
use futures::TryStreamExt;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;
use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use varroa_api::{Controller, ControllerPhase};
use varroa_operator::Config;
use varroa_operator::metrics::Metrics;
use varroa_operator::mite::StaticMites;

/// The namespace of the tests' controllers.
pub const TEAM: &str = "team-a";
/// The Jenkins image of the test profile.
pub const JENKINS: &str = "jenkins/jenkins:2.479.3-lts-jdk17";
/// How long any one wait may take (tests run in parallel on a small machine).
pub const WAIT: Duration = Duration::from_secs(90);

pub struct Operator {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    pub metrics: Arc<Metrics>,
}

impl Operator {
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            let r = tokio::time::timeout(WAIT, t).await.expect("the operator stops in time").expect("the task");
            r.expect("the operator ran without error");
        }
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

pub struct Env {
    /// First, so that it is dropped (stopped) before the cluster it talks to.
    pub op: Option<Operator>,
    pub dc: DevCluster,
    pub admin: Client,
    pub sa: Client,
    pub mites: StaticMites,
    touches: AtomicU64,
}

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
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "warn,varroa_operator=info".into()),
            )
            .with_test_writer()
            .try_init();
        let dc = DevCluster::start_with(options).await.expect("devcluster starts");
        let admin = dc.client();
        apply_yaml(&admin, &std::fs::read_to_string(repo("deploy/varroa/crds.yaml")).expect("crds")).await;
        for crd in varroa_api::crds() {
            let api: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
                Api::all(admin.clone());
            let name = crd.name_any();
            tokio::time::timeout(
                WAIT,
                kube::runtime::wait::await_condition(api, &name, kube::runtime::wait::conditions::is_crd_established()),
            )
            .await
            .expect("established in time")
            .expect("watch");
        }
        apply_yaml(&admin, &std::fs::read_to_string(repo("deploy/varroa/rbac.yaml")).expect("rbac")).await;
        let policy = std::fs::read_to_string(repo("deploy/varroa/admission-policy.yaml")).expect("admission policy");
        apply_yaml(&admin, &policy).await;
        apply_yaml(&admin, WORLD).await;
        install_gateway_ca(&admin, "gateway CA").await;
        let sa = service_account_client(&dc, &admin).await;
        Env { dc, admin, sa, mites: StaticMites::default(), op: None, touches: AtomicU64::new(0) }
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
        assert!(self.op.is_none(), "an operator is already running");
        let metrics = Arc::new(Metrics::new());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let shutdown = async move {
            let _ = rx.await;
        };
        let task =
            tokio::spawn(varroa_operator::run(self.sa.clone(), config, metrics.clone(), mites, activity, shutdown));
        self.op = Some(Operator { stop: Some(tx), task: Some(task), metrics });
    }

    pub async fn stop_operator(&mut self) {
        self.op.take().expect("an operator runs").stop().await;
    }

    pub fn metrics(&self) -> Arc<Metrics> {
        self.op.as_ref().expect("an operator runs").metrics.clone()
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
        let n = self.touches.fetch_add(1, Ordering::Relaxed);
        self.controllers()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"e2e.example.com/touched": n.to_string()}}})),
            )
            .await
            .unwrap_or_else(|e| panic!("touch {name}: {e}"));
    }

    /// Wait until the controller satisfies `f`.
    pub async fn wait(&self, name: &str, what: &str, f: impl Fn(&Controller) -> bool) -> Controller {
        let api = self.controllers();
        let stream =
            watcher(api.clone(), watcher::Config::default().fields(&format!("metadata.name={name}"))).applied_objects();
        let r = tokio::time::timeout(WAIT, async {
            let mut s = std::pin::pin!(stream);
            while let Some(c) = s.try_next().await.expect("watch") {
                if f(&c) {
                    return c;
                }
            }
            panic!("watch ended")
        })
        .await;
        match r {
            Ok(c) => c,
            Err(_) => {
                let now = api.get_opt(name).await.ok().flatten();
                panic!(
                    "timed out waiting for controller {name}: {what}\nit is: {}",
                    serde_json::to_string_pretty(&now.map(|c| c.status)).unwrap_or_default()
                )
            }
        }
    }

    pub async fn wait_phase(&self, name: &str, phase: ControllerPhase) -> Controller {
        self.wait(name, &format!("phase {phase} for its generation"), |c| {
            phase_of(c) == Some(phase) && c.status.as_ref().and_then(|s| s.observed_generation) == c.metadata.generation
        })
        .await
    }

    pub async fn obj<K>(&self, name: &str) -> K
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()> + Clone + Debug + DeserializeOwned,
    {
        Api::<K>::namespaced(self.admin.clone(), TEAM)
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("get {} {TEAM}/{name}: {e}", K::kind(&())))
    }

    pub async fn events_of(&self, name: &str) -> Vec<Event> {
        let api: Api<Event> = Api::namespaced(self.admin.clone(), TEAM);
        api.list(&Default::default())
            .await
            .expect("list events")
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .filter(|e| e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("Controller"))
            .collect()
    }

    /// Let the operator settle: touch the controller and wait until two more reconciles ran.
    pub async fn settle(&self, name: &str) {
        for _ in 0..2 {
            let before = reconciles(&self.metrics());
            self.touch(name).await;
            let m = self.metrics();
            eventually("a reconcile after the touch", || reconciles(&m) > before).await;
        }
    }
}

pub fn repo(path: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(path)
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

/// Wait (polling in-process state that has no watch) until `f` holds.
pub async fn eventually(what: &str, f: impl Fn() -> bool) {
    let r = tokio::time::timeout(WAIT, async {
        while !f() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(r.is_ok(), "timed out waiting until {what}");
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

/// Creates (server-side apply) every document of a YAML stream as the admin.
pub async fn apply_yaml(admin: &Client, text: &str) {
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(text).expect("YAML");
    for doc in docs.into_iter().filter(|d| !d.is_null()) {
        let obj: DynamicObject = serde_json::from_value(doc).expect("an object");
        let tm = obj.types.clone().expect("apiVersion and kind");
        let (group, version) = tm.api_version.rsplit_once('/').unwrap_or(("", tm.api_version.as_str()));
        let mut ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, &tm.kind));
        if let Some(crd) =
            varroa_api::crds().into_iter().find(|c| c.spec.names.kind == tm.kind && group == "varroa.dev")
        {
            ar.plural = crd.spec.names.plural;
        }
        let api: Api<DynamicObject> = match obj.namespace() {
            Some(ns) => Api::namespaced_with(admin.clone(), &ns, &ar),
            None => Api::all_with(admin.clone(), &ar),
        };
        api.patch(&obj.name_any(), &PatchParams::apply("e2e").force(), &Patch::Apply(&obj))
            .await
            .unwrap_or_else(|e| panic!("apply {} {}: {e}", tm.kind, obj.name_any()));
    }
}

async fn service_account_client(dc: &DevCluster, admin: &Client) -> Client {
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), "varroa-system");
    let tr = TokenRequest {
        spec: TokenRequestSpec { audiences: vec![], expiration_seconds: Some(3600), ..Default::default() },
        ..Default::default()
    };
    let token = sas
        .create_token_request("varroa-operator", &PostParams::default(), &tr)
        .await
        .expect("a token for varroa-system/varroa-operator")
        .status
        .expect("status")
        .token;
    let kc = kube::config::Kubeconfig::from_yaml(dc.kubeconfig_yaml()).expect("the admin kubeconfig");
    let mut v = serde_json::to_value(&kc).expect("kubeconfig as JSON");
    v["users"] = json!([{"name": "varroa-operator", "user": {"token": token}}]);
    v["contexts"][0]["context"]["user"] = json!("varroa-operator");
    devcluster::client_for(&v.to_string()).await.expect("a client for the service account")
}

#[allow(unused)]
fn _unused(_: Namespace) {}
