//! The end-to-end harness: a devcluster with the CRD and the shipped RBAC installed, and the
//! operator running in-process as the `vesper-system/vesper-operator` service account (so a
//! missing permission shows), with a clock the test can move forward.

#![allow(dead_code)]

use devcluster::DevCluster;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::runtime::wait::{Condition, await_condition, conditions};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, CustomResourceExt, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;
use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use vesper_api::{Phase, PreviewEnvironment};
use vesper_operator::Config;
use vesper_operator::clock::Clock;
use vesper_operator::metrics::Metrics;

/// The namespace the tests' previews live in.
pub const TEAM: &str = "team-a";
/// The namespace of the ingress controller (the operator's default `--ingress-namespace`).
pub const INGRESS_NS: &str = "ingress-nginx";
/// How long any one wait may take (generous: tests run in parallel on a small machine).
pub const WAIT: Duration = Duration::from_secs(90);

/// The operator, running in a task of the test's runtime; stopped when dropped.
pub struct Operator {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    pub metrics: Arc<Metrics>,
}

impl Operator {
    /// Ask it to stop (graceful shutdown: reconciles in flight finish) and wait until it did.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            let r =
                tokio::time::timeout(WAIT, t).await.expect("the operator stops in time").expect("the operator task");
            r.expect("the operator ran without error");
        }
    }

    /// Whether the operator has ended (it should not, until stopped).
    pub fn finished(&self) -> bool {
        self.task.as_ref().is_none_or(|t| t.is_finished())
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
    /// The cluster admin (the test's own hands).
    pub admin: Client,
    /// The operator's service account, with exactly deploy/vesper/rbac.yaml.
    pub sa: Client,
    /// The service account's client configuration: each operator started gets a client of its
    /// own from it, counting its requests into its metrics (as the binary's does).
    sa_config: kube::Config,
    pub clock: Clock,
    touches: AtomicU64,
}

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
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "warn,vesper_operator=info".into()),
            )
            .with_test_writer()
            .try_init();
        let dc = DevCluster::start_with(options).await.expect("devcluster starts");
        let admin = dc.client();
        install_crd(&admin).await;
        apply_rbac(&admin).await;
        let namespaces: Api<Namespace> = Api::all(admin.clone());
        for ns in [INGRESS_NS, TEAM] {
            namespaces
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(json!({"metadata": {"name": ns}})).expect("a namespace"),
                )
                .await
                .unwrap_or_else(|e| panic!("create namespace {ns}: {e}"));
        }
        let (sa, sa_config) = service_account_client(&dc, &admin).await;
        Env { dc, admin, sa, sa_config, clock: Clock::default(), op: None, touches: AtomicU64::new(0) }
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
        assert!(self.op.is_none(), "an operator is already running");
        let metrics = Arc::new(Metrics::new());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let shutdown = async move {
            let _ = rx.await;
        };
        let client = opkit::client::counted(self.sa_config.clone(), &metrics.requests)
            .expect("a client for the service account");
        let task = tokio::spawn(vesper_operator::run_with_clock(
            client,
            config,
            metrics.clone(),
            self.clock.clone(),
            shutdown,
        ));
        self.op = Some(Operator { stop: Some(tx), task: Some(task), metrics });
    }

    /// Stop the running operator and wait until it has stopped.
    pub async fn stop_operator(&mut self) {
        let op = self.op.take().expect("an operator runs");
        op.stop().await;
    }

    pub fn metrics(&self) -> Arc<Metrics> {
        self.op.as_ref().expect("an operator runs").metrics.clone()
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
        let n = self.touches.fetch_add(1, Ordering::Relaxed);
        self.previews()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"e2e.example.com/touched": n.to_string()}}})),
            )
            .await
            .unwrap_or_else(|e| panic!("touch preview {name}: {e}"))
    }

    /// Let the operator settle on the preview: touch it and wait until a reconcile ran, twice, so
    /// that no reconcile queued by an earlier change is still to come.
    pub async fn settle(&self, name: &str) {
        let m = self.metrics();
        for _ in 0..2 {
            let r0 = reconciles_ok(&m) + reconciles_failed(&m);
            self.touch(name).await;
            eventually("the operator reconciled the touched preview", || {
                reconciles_ok(&m) + reconciles_failed(&m) > r0
            })
            .await;
        }
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
        let api = self.previews();
        let c = move |o: Option<&PreviewEnvironment>| o.is_some_and(&cond);
        match tokio::time::timeout(WAIT, await_condition(api.clone(), name, c)).await {
            Ok(Ok(Some(pe))) => pe,
            Ok(Ok(None)) => panic!("preview {name} is gone while waiting for: {what}"),
            Ok(Err(e)) => panic!("watching preview {name}: {e}"),
            Err(_) => {
                let now = api.get_opt(name).await.ok().flatten();
                let running = self.op.as_ref().is_some_and(|o| !o.finished());
                panic!(
                    "timed out waiting for preview {name}: {what}\noperator running: {running}\nthe preview: {}",
                    serde_json::to_string_pretty(&now).unwrap_or_default()
                )
            }
        }
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
    pub async fn obj<K>(&self, ns: &str, name: &str) -> K
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()> + Clone + Debug + DeserializeOwned,
    {
        Api::<K>::namespaced(self.admin.clone(), ns)
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("get {} {ns}/{name}: {e}", K::kind(&())))
    }

    /// Events about a preview (events.k8s.io, in TEAM).
    pub async fn events_of(&self, name: &str) -> Vec<Event> {
        let api: Api<Event> = Api::namespaced(self.admin.clone(), TEAM);
        api.list(&Default::default())
            .await
            .expect("list events")
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .filter(|e| e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("PreviewEnvironment"))
            .collect()
    }

    /// Wait for an Event about the preview with this reason and type; return it.
    pub async fn wait_event(&self, name: &str, reason: &str, type_: &str) -> Event {
        self.wait_event_with(name, reason, type_, "").await
    }

    /// Wait for an Event about the preview with this reason and type whose note contains `note`.
    pub async fn wait_event_with(&self, name: &str, reason: &str, type_: &str, note: &str) -> Event {
        let api: Api<Event> = Api::namespaced(self.admin.clone(), TEAM);
        let matches = |e: &Event| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && e.reason.as_deref() == Some(reason)
                && e.type_.as_deref() == Some(type_)
                && e.note.as_deref().unwrap_or_default().contains(note)
        };
        let stream = watcher(api, watcher::Config::default()).applied_objects();
        let found = tokio::time::timeout(WAIT, async {
            let mut s = std::pin::pin!(stream);
            while let Some(e) = s.try_next().await.expect("watch events") {
                if matches(&e) {
                    return e;
                }
            }
            panic!("the event watch ended")
        })
        .await;
        match found {
            Ok(e) => e,
            Err(_) => {
                let seen: Vec<(Option<String>, Option<String>, Option<String>)> =
                    self.events_of(name).await.into_iter().map(|e| (e.type_, e.reason, e.note)).collect();
                panic!("no {type_} event {reason} about {name}; events: {seen:#?}")
            }
        }
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

/// Wait (polling, for in-process state that has no watch) until `f` holds.
pub async fn eventually(what: &str, f: impl Fn() -> bool) {
    let r = tokio::time::timeout(WAIT, async {
        while !f() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(r.is_ok(), "timed out waiting until {what}");
}

/// Wait until the object with this uid is deleted.
pub async fn wait_deleted<K>(api: Api<K>, name: &str, uid: &str)
where
    K: Clone + Debug + Send + DeserializeOwned + Resource + 'static,
{
    let r = tokio::time::timeout(WAIT, await_condition(api.clone(), name, conditions::is_deleted(uid))).await;
    match r {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => panic!("watching {name}: {e}"),
        Err(_) => {
            let now = api.get_opt(name).await.ok().flatten();
            panic!("timed out waiting for {name} to be deleted; it is: {now:#?}")
        }
    }
}

/// Wait until an object satisfies a condition.
pub async fn wait_for<K>(api: Api<K>, name: &str, what: &str, cond: impl Condition<K>) -> K
where
    K: Clone + Debug + Send + DeserializeOwned + Resource + 'static,
{
    match tokio::time::timeout(WAIT, await_condition(api.clone(), name, cond)).await {
        Ok(Ok(Some(o))) => o,
        Ok(Ok(None)) => panic!("{name} is gone while waiting for: {what}"),
        Ok(Err(e)) => panic!("watching {name}: {e}"),
        Err(_) => {
            let now = api.get_opt(name).await.ok().flatten();
            panic!("timed out waiting for {name}: {what}; it is: {now:#?}")
        }
    }
}

async fn install_crd(admin: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    crds.create(&PostParams::default(), &PreviewEnvironment::crd()).await.expect("the CRD is accepted");
    wait_for(crds, "previewenvironments.vesper.eventide.dev", "Established", conditions::is_crd_established()).await;
}

/// deploy/vesper/rbac.yaml, every document created as the admin.
async fn apply_rbac(admin: &Client) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/vesper/rbac.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let mut docs = vec![String::new()];
    for line in text.lines() {
        if line.trim_end() == "---" {
            docs.push(String::new());
        } else if let Some(d) = docs.last_mut() {
            d.push_str(line);
            d.push('\n');
        }
    }
    let mut created = 0;
    for doc in docs.iter().filter(|d| d.lines().any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))) {
        let v = devcluster::request::decode_body(doc.as_bytes(), true)
            .unwrap_or_else(|e| panic!("rbac.yaml: {e:?}\n{doc}"));
        let obj: DynamicObject =
            serde_json::from_value(v).unwrap_or_else(|e| panic!("rbac.yaml: not an object: {e}\n{doc}"));
        let tm = obj.types.clone().expect("apiVersion and kind");
        let (group, version) = tm.api_version.rsplit_once('/').unwrap_or(("", tm.api_version.as_str()));
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, &tm.kind));
        let api: Api<DynamicObject> = match obj.namespace() {
            Some(ns) => Api::namespaced_with(admin.clone(), &ns, &ar),
            None => Api::all_with(admin.clone(), &ar),
        };
        api.create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("create {} {}: {e}", tm.kind, obj.name_any()));
        created += 1;
    }
    assert_eq!(created, 6, "rbac.yaml: the namespace, account, ClusterRole and binding, Role and binding");
}

/// A client authenticated as `vesper-system/vesper-operator` with a TokenRequest token, built
/// from the admin kubeconfig's server and CA.
async fn service_account_client(dc: &DevCluster, admin: &Client) -> (Client, kube::Config) {
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), "vesper-system");
    let tr = TokenRequest {
        spec: TokenRequestSpec { audiences: vec![], expiration_seconds: Some(3600), ..Default::default() },
        ..Default::default()
    };
    let token = sas
        .create_token_request("vesper-operator", &PostParams::default(), &tr)
        .await
        .expect("a token for vesper-system/vesper-operator")
        .status
        .expect("the TokenRequest's status")
        .token;
    let kc = kube::config::Kubeconfig::from_yaml(dc.kubeconfig_yaml()).expect("the admin kubeconfig");
    let mut v = serde_json::to_value(&kc).expect("kubeconfig as JSON");
    v["users"] = json!([{"name": "vesper-operator", "user": {"token": token}}]);
    v["contexts"][0]["context"]["user"] = json!("vesper-operator");
    // JSON is YAML.
    let kc = kube::config::Kubeconfig::from_yaml(&v.to_string()).expect("the service account's kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("a client configuration for the service account");
    (Client::try_from(config.clone()).expect("a client for the service account"), config)
}

/// Watch a kind (all namespaces, the admin's view) and keep every version seen, until dropped.
pub struct Recorder<K> {
    pub seen: Arc<std::sync::Mutex<Vec<K>>>,
    task: tokio::task::JoinHandle<()>,
}

impl<K> Recorder<K>
where
    K: Clone + Debug + Send + Sync + DeserializeOwned + Resource + 'static,
    K::DynamicType: Default,
{
    pub async fn start(api: Api<K>, cfg: watcher::Config) -> Recorder<K> {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let s2 = seen.clone();
        let task = tokio::spawn(async move {
            let mut ready = Some(ready_tx);
            let mut stream = std::pin::pin!(watcher(api, cfg));
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => s2.lock().expect("lock").push(o),
                    Ok(watcher::Event::InitDone) => {
                        if let Some(r) = ready.take() {
                            let _ = r.send(());
                        }
                    }
                    _ => {}
                }
            }
        });
        let _ = tokio::time::timeout(WAIT, ready_rx).await;
        Recorder { seen, task }
    }

    pub fn all(&self) -> Vec<K> {
        self.seen.lock().expect("lock").clone()
    }
}

impl<K> Drop for Recorder<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}
