//! What a cluster does on its own, observed through kube's client as a user of a real cluster
//! observes it: namespace lifecycle, garbage collection, workload controllers and the simulated
//! kubelet, fault injection, nodes, admission (Pod Security, ResourceQuota, LimitRange),
//! authentication and RBAC, leases and events.
//!
//! Messages and reasons are the upstream ones; each group of tests names the upstream source it
//! was checked against. Every wait is on a watch (kube's `await_condition`, or a watcher over a
//! list) under a timeout: no fixed sleeps.

use devcluster::faults::{Fault, FaultRule};
use devcluster::{DevCluster, Options};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, ReplicaSet, StatefulSet};
use k8s_openapi::api::authentication::v1::{SelfSubjectReview, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Endpoints, Event, LimitRange, Namespace, NamespaceCondition, Node, PersistentVolume,
    PersistentVolumeClaim, Pod, PodCondition, ResourceQuota, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Resource;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::core::Status;
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::watcher;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::time::Duration;

/// How long any one wait may take before the test fails.
const WAIT: Duration = Duration::from_secs(30);

// ---- helpers --------------------------------------------------------------------------------

fn from_json<T: DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("test object deserializes")
}

/// An object as JSON, cut short, for failure messages.
fn dump<T: Serialize>(o: &T) -> String {
    let s = serde_json::to_string(o).unwrap_or_else(|e| format!("<unserializable: {e}>"));
    if s.len() > 6000 { format!("{}...", &s[..6000]) } else { s }
}

/// The Status of a call that must fail with an API error.
fn api_error<T: Debug>(r: Result<T, kube::Error>, what: &str) -> Status {
    match r {
        Err(kube::Error::Api(s)) => *s,
        other => panic!("{what}: expected an API error, got {other:?}"),
    }
}

/// Wait (on a watch) until the named object exists and satisfies `cond`; return it.
async fn wait_for<K>(api: &Api<K>, name: &str, what: &str, cond: impl Fn(&K) -> bool) -> K
where
    K: Clone + Debug + Send + DeserializeOwned + Serialize + Resource + 'static,
{
    let c = move |o: Option<&K>| o.is_some_and(&cond);
    match tokio::time::timeout(WAIT, await_condition(api.clone(), name, c)).await {
        Ok(Ok(Some(o))) => o,
        Ok(Ok(None)) => panic!("{what}: {name} is gone"),
        Ok(Err(e)) => panic!("{what}: the watch failed: {e}"),
        Err(_) => {
            let now = api.get_opt(name).await.ok().flatten();
            panic!("timed out waiting for {what}; {name} is now {}", dump(&now))
        }
    }
}

/// Wait (on a watch) until the named object is gone.
async fn wait_gone<K>(api: &Api<K>, name: &str, uid: &str, what: &str)
where
    K: Clone + Debug + Send + DeserializeOwned + Serialize + Resource + 'static,
{
    match tokio::time::timeout(WAIT, await_condition(api.clone(), name, conditions::is_deleted(uid))).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => panic!("{what}: the watch failed: {e}"),
        Err(_) => {
            let now = api.get_opt(name).await.ok().flatten();
            panic!("timed out waiting for {what}; {name} is now {}", dump(&now))
        }
    }
}

/// Wait (on a watcher over the list `cfg` selects) until `pred` holds for the whole list;
/// return the list.
async fn wait_list<K>(api: &Api<K>, cfg: watcher::Config, what: &str, pred: impl Fn(&[K]) -> bool) -> Vec<K>
where
    K: Clone + Debug + Send + DeserializeOwned + Serialize + Resource + 'static,
{
    let key = |o: &K| {
        format!("{}/{}", o.meta().namespace.clone().unwrap_or_default(), o.meta().name.clone().unwrap_or_default())
    };
    let mut last: Vec<K> = vec![];
    let run = async {
        let mut stream = watcher(api.clone(), cfg).boxed();
        let mut init: BTreeMap<String, K> = BTreeMap::new();
        let mut cur: BTreeMap<String, K> = BTreeMap::new();
        let mut synced = false;
        while let Some(ev) = stream.try_next().await.expect("the watcher runs") {
            match ev {
                watcher::Event::Init => init.clear(),
                watcher::Event::InitApply(o) => {
                    init.insert(key(&o), o);
                }
                watcher::Event::InitDone => {
                    cur = std::mem::take(&mut init);
                    synced = true;
                }
                watcher::Event::Apply(o) => {
                    cur.insert(key(&o), o);
                }
                watcher::Event::Delete(o) => {
                    cur.remove(&key(&o));
                }
            }
            if synced {
                last = cur.values().cloned().collect();
                if pred(&last) {
                    return;
                }
            }
        }
    };
    if tokio::time::timeout(WAIT, run).await.is_err() {
        panic!("timed out waiting for {what}; the list is now {}", dump(&last));
    }
    last
}

fn labels(sel: &str) -> watcher::Config {
    watcher::Config::default().labels(sel)
}

async fn create_ns(client: &kube::Client, name: &str, labels: &[(&str, &str)]) -> Namespace {
    let l: BTreeMap<String, String> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let ns: Namespace =
        from_json(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": l}}));
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.expect("namespace created")
}

fn configmap(name: &str) -> ConfigMap {
    from_json(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}}))
}

fn deployment(name: &str, replicas: i32, image: &str) -> Deployment {
    from_json(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": image, "ports": [{"name": "http", "containerPort": 8080}]}]},
            },
        },
    }))
}

fn dcond<'a>(d: &'a Deployment, t: &str) -> Option<&'a DeploymentCondition> {
    d.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == t)
}

fn dcond_is(d: &Deployment, t: &str, status: &str, reason: &str) -> bool {
    dcond(d, t).is_some_and(|c| c.status == status && c.reason.as_deref() == Some(reason))
}

fn pod_cond<'a>(p: &'a Pod, t: &str) -> Option<&'a PodCondition> {
    p.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == t)
}

fn pod_ready(p: &Pod) -> bool {
    pod_cond(p, "Ready").is_some_and(|c| c.status == "True")
}

fn ns_cond<'a>(n: &'a Namespace, t: &str) -> Option<&'a NamespaceCondition> {
    n.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == t)
}

fn phase(p: &Pod) -> &str {
    p.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

fn name_of<K: Resource>(o: &K) -> String {
    o.meta().name.clone().expect("objects have names")
}

fn uid_of<K: Resource>(o: &K) -> String {
    o.meta().uid.clone().expect("stored objects have uids")
}

/// A Deployment that reached its desired state: every replica updated, ready and available,
/// and the controller said so in Progressing.
fn deployment_complete(d: &Deployment, replicas: i32) -> bool {
    let Some(s) = &d.status else { return false };
    s.observed_generation == d.metadata.generation
        && s.replicas == Some(replicas)
        && s.updated_replicas == Some(replicas)
        && s.ready_replicas == Some(replicas)
        && s.available_replicas == Some(replicas)
        && dcond_is(d, "Available", "True", "MinimumReplicasAvailable")
        && dcond_is(d, "Progressing", "True", "NewReplicaSetAvailable")
}

async fn wait_deployment_complete(api: &Api<Deployment>, name: &str, replicas: i32) -> Deployment {
    wait_for(api, name, "the Deployment to complete", |d| deployment_complete(d, replicas)).await
}

/// The ReplicaSets a Deployment controls.
async fn replica_sets_of(client: &kube::Client, d: &Deployment) -> Vec<ReplicaSet> {
    let ns = d.metadata.namespace.as_deref().expect("namespaced");
    let uid = uid_of(d);
    let all = Api::<ReplicaSet>::namespaced(client.clone(), ns).list(&ListParams::default()).await.expect("list rs");
    all.items
        .into_iter()
        .filter(|rs| rs.metadata.owner_references.iter().flatten().any(|r| r.uid == uid && r.controller == Some(true)))
        .collect()
}

fn revision(rs: &ReplicaSet) -> Option<&str> {
    rs.metadata.annotations.as_ref()?.get("deployment.kubernetes.io/revision").map(String::as_str)
}

/// A kubeconfig like the admin's, with another token (or none: anonymous).
fn kubeconfig_with_token(dc: &DevCluster, token: Option<&str>) -> String {
    let yaml = dc.kubeconfig_yaml();
    let mut out = String::new();
    let mut lines = yaml.lines().peekable();
    while let Some(line) = lines.next() {
        if line == "  user:" && lines.peek().is_some_and(|l| l.trim_start().starts_with("token:")) {
            lines.next();
            match token {
                Some(t) => out.push_str(&format!("  user:\n    token: {t}\n")),
                None => out.push_str("  user: {}\n"),
            }
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    assert_ne!(out.trim_end(), yaml.trim_end(), "the token line was replaced");
    out
}

/// A raw request with extra headers (impersonation), decoded as T.
async fn raw<T: DeserializeOwned>(
    client: &kube::Client,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> Result<T, kube::Error> {
    let mut b = http::Request::builder().method(method).uri(path);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let bytes = match body {
        Some(v) => {
            b = b.header("content-type", "application/json");
            serde_json::to_vec(&v).expect("json body")
        }
        None => vec![],
    };
    client.request::<T>(b.body(bytes).expect("a valid request")).await
}

fn self_subject_review_body() -> Value {
    json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
}

/// The value of an RFC 9110 quoted-string (`"a \"b\""` -> `a "b"`).
fn unquote(s: &str) -> String {
    let inner = s.strip_prefix('"').and_then(|s| s.strip_suffix('"')).expect("a quoted string");
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The pod name inside `pods "NAME" is forbidden: ...`, and the rest after the name.
fn split_pod_forbidden(msg: &str) -> (String, String) {
    let rest = msg.strip_prefix("pods \"").unwrap_or_else(|| panic!("not a pod refusal: {msg}"));
    let (name, tail) = rest.split_once('"').unwrap_or_else(|| panic!("no pod name in: {msg}"));
    (name.to_string(), tail.to_string())
}

/// A generated pod name of a ReplicaSet: `<rs>-` and five characters.
fn is_generated_from(name: &str, rs: &str) -> bool {
    name.strip_prefix(&format!("{rs}-")).is_some_and(|s| s.len() == 5 && s.chars().all(|c| c.is_ascii_alphanumeric()))
}

// ---- 1. namespaces ----------------------------------------------------------------------------

#[tokio::test]
async fn system_namespaces_exist_and_are_active() {
    let dc = DevCluster::start().await.expect("cluster starts");
    let api: Api<Namespace> = Api::all(dc.client());
    for name in ["default", "kube-system", "kube-public"] {
        let ns = api.get(name).await.unwrap_or_else(|e| panic!("namespace {name}: {e}"));
        assert_eq!(ns.status.and_then(|s| s.phase).as_deref(), Some("Active"), "{name}");
        assert_eq!(ns.spec.and_then(|s| s.finalizers), Some(vec!["kubernetes".to_string()]), "{name}");
    }
}

#[tokio::test]
async fn deleting_a_namespace_deletes_its_content_and_then_the_namespace() {
    let dc = DevCluster::start().await.expect("cluster starts");
    let client = dc.client();
    let ns = create_ns(&client, "doomed", &[]).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "doomed");
    cms.create(&PostParams::default(), &configmap("settings")).await.expect("configmap created");
    let deps: Api<Deployment> = Api::namespaced(client.clone(), "doomed");
    deps.create(&PostParams::default(), &deployment("web", 2, "example.com/web:v1")).await.expect("deployment");
    wait_deployment_complete(&deps, "web", 2).await;

    // The namespace registry answers the delete with the namespace, now Terminating
    // (pkg/registry/core/namespace/storage: Delete sets the phase with the deletionTimestamp).
    let nsapi: Api<Namespace> = Api::all(client.clone());
    let res = nsapi.delete("doomed", &DeleteParams::default()).await.expect("namespace delete accepted");
    let terminating = res.left().expect("the namespace is returned while its content goes");
    assert!(terminating.metadata.deletion_timestamp.is_some());
    assert_eq!(terminating.status.and_then(|s| s.phase).as_deref(), Some("Terminating"));
    assert_eq!(terminating.spec.and_then(|s| s.finalizers), Some(vec!["kubernetes".to_string()]));

    wait_gone(&nsapi, "doomed", &uid_of(&ns), "the namespace to be removed").await;
    // Listing in a namespace that does not exist is an empty list, not an error.
    assert!(cms.list(&ListParams::default()).await.expect("list configmaps").items.is_empty());
    assert!(deps.list(&ListParams::default()).await.expect("list deployments").items.is_empty());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "doomed");
    assert!(pods.list(&ListParams::default()).await.expect("list pods").items.is_empty());
    let rss: Api<ReplicaSet> = Api::namespaced(client.clone(), "doomed");
    assert!(rss.list(&ListParams::default()).await.expect("list rs").items.is_empty());
    let err = api_error(nsapi.get("doomed").await, "get the deleted namespace");
    assert_eq!((err.code, err.reason.as_str()), (404, "NotFound"));
    assert_eq!(err.message, "namespaces \"doomed\" not found");
}

/// A namespace whose only remaining content is held by a finalizer; returns the namespace as
/// the controller reported it (both "remaining" conditions True).
async fn held_terminating_namespace(client: &kube::Client, name: &str) -> Namespace {
    create_ns(client, name, &[]).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), name);
    let mut keep = configmap("keep");
    keep.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cms.create(&PostParams::default(), &keep).await.expect("configmap with a finalizer");
    let nsapi: Api<Namespace> = Api::all(client.clone());
    nsapi.delete(name, &DeleteParams::default()).await.expect("namespace delete accepted");
    wait_for(&nsapi, name, "the namespace to report its remaining finalizers", |n| {
        ns_cond(n, "NamespaceFinalizersRemaining").is_some_and(|c| c.status == "True")
            && ns_cond(n, "NamespaceContentRemaining").is_some_and(|c| c.status == "True")
    })
    .await
}

// Conditions and messages: pkg/controller/namespace/deletion/status_condition_utils.go.
#[tokio::test]
async fn a_finalizer_keeps_a_terminating_namespace_until_it_is_removed() {
    let dc = DevCluster::start().await.expect("cluster starts");
    let client = dc.client();
    let ns = held_terminating_namespace(&client, "held").await;
    assert_eq!(ns.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Terminating"));
    let c = ns_cond(&ns, "NamespaceFinalizersRemaining").expect("condition");
    assert_eq!(c.reason.as_deref(), Some("SomeFinalizersRemain"));
    assert_eq!(
        c.message.as_deref(),
        Some("Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances")
    );
    let c = ns_cond(&ns, "NamespaceContentRemaining").expect("condition");
    assert_eq!(c.reason.as_deref(), Some("SomeResourcesRemain"));
    let c = ns_cond(&ns, "NamespaceDeletionContentFailure").expect("condition");
    assert_eq!(
        (c.status.as_str(), c.reason.as_deref(), c.message.as_deref()),
        ("False", Some("ContentDeleted"), Some("All content successfully deleted, may be waiting on finalization"))
    );
    let c = ns_cond(&ns, "NamespaceDeletionDiscoveryFailure").expect("condition");
    assert_eq!(
        (c.status.as_str(), c.reason.as_deref(), c.message.as_deref()),
        ("False", Some("ResourcesDiscovered"), Some("All resources successfully discovered"))
    );

    // The rest of the content is gone; the held object waits with a deletionTimestamp.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "held");
    let left = cms.list(&ListParams::default()).await.expect("list").items;
    assert_eq!(left.iter().map(name_of).collect::<Vec<_>>(), vec!["keep".to_string()]);
    assert!(left[0].metadata.deletion_timestamp.is_some());
    let nsapi: Api<Namespace> = Api::all(client.clone());
    assert!(nsapi.get("held").await.expect("still there").metadata.deletion_timestamp.is_some());

    cms.patch("keep", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await
        .expect("finalizer removed");
    wait_gone(&nsapi, "held", &uid_of(&ns), "the namespace to go once its content is gone").await;
}

// `fmt.Sprintf("%s.%s has %d resource instances", gvr.Resource, gvr.Group, n)`: a core
// resource is written `configmaps.` (status_condition_utils.go, ProcessContentTotals).
#[tokio::test]
async fn the_remaining_content_condition_names_resources_as_upstream() {
    let dc = DevCluster::start().await.expect("cluster starts");
    let ns = held_terminating_namespace(&dc.client(), "held").await;
    let c = ns_cond(&ns, "NamespaceContentRemaining").expect("condition");
    assert_eq!(c.message.as_deref(), Some("Some resources are remaining: configmaps. has 1 resource instances"));
}

// plugin/pkg/admission/namespace/lifecycle/admission.go: 403 with the message below and a
// NamespaceTerminating cause on field metadata.namespace.
#[tokio::test]
async fn creating_in_a_terminating_namespace_is_forbidden() {
    let dc = DevCluster::start().await.expect("cluster starts");
    let client = dc.client();
    held_terminating_namespace(&client, "held").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "held");
    let err = api_error(cms.create(&PostParams::default(), &configmap("new")).await, "create in a terminating ns");
    assert_eq!((err.code, err.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        err.message,
        "configmaps \"new\" is forbidden: unable to create new content in namespace held because it is being terminated"
    );
    // Updates of what is there are still allowed.
    cms.patch("keep", &PatchParams::default(), &Patch::Merge(json!({"data": {"k": "w"}})))
        .await
        .expect("updates are allowed in a terminating namespace");
}

#[tokio::test]
async fn the_terminating_namespace_refusal_carries_the_namespace_terminating_cause() {
    let dc = DevCluster::start().await.expect("cluster starts");
    let client = dc.client();
    held_terminating_namespace(&client, "held").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "held");
    let err = api_error(cms.create(&PostParams::default(), &configmap("new")).await, "create in a terminating ns");
    let causes = err.details.map(|d| d.causes).unwrap_or_default();
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert_eq!(causes[0].reason, "NamespaceTerminating");
    assert_eq!(causes[0].message, "namespace held is being terminated");
    assert_eq!(causes[0].field, "metadata.namespace");
}

// The apiserver's own Service, Endpoints and EndpointSlice (pkg/controlplane/reconcilers).
#[tokio::test]
async fn the_kubernetes_service_points_at_the_api_server() {
    let dc = DevCluster::start().await.expect("cluster starts");
    let client = dc.client();
    let port = i32::from(dc.addr().port());
    let host = dc.addr().ip().to_string();
    assert_eq!(dc.url(), format!("https://{host}:{port}"));

    let svc = Api::<Service>::namespaced(client.clone(), "default").get("kubernetes").await.expect("service");
    let spec = svc.spec.expect("spec");
    assert_eq!(spec.cluster_ip.as_deref(), Some("10.96.0.1"));
    assert_eq!(spec.cluster_ips, Some(vec!["10.96.0.1".to_string()]));
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    let ports = spec.ports.expect("ports");
    assert_eq!(ports.len(), 1);
    assert_eq!(
        (ports[0].name.as_deref(), ports[0].port, ports[0].protocol.as_deref()),
        (Some("https"), 443, Some("TCP"))
    );
    assert_eq!(serde_json::to_value(&ports[0].target_port).expect("json"), json!(port));

    let ep = Api::<Endpoints>::namespaced(client.clone(), "default").get("kubernetes").await.expect("endpoints");
    let subsets = ep.subsets.expect("subsets");
    assert_eq!(subsets.len(), 1);
    let addrs: Vec<&str> = subsets[0].addresses.iter().flatten().map(|a| a.ip.as_str()).collect();
    assert_eq!(addrs, vec![host.as_str()]);
    let p = &subsets[0].ports.as_ref().expect("ports")[0];
    assert_eq!((p.name.as_deref(), p.port, p.protocol.as_deref()), (Some("https"), port, Some("TCP")));

    let slice = Api::<EndpointSlice>::namespaced(client.clone(), "default").get("kubernetes").await.expect("slice");
    assert_eq!(slice.address_type, "IPv4");
    assert_eq!(
        slice.metadata.labels.as_ref().and_then(|l| l.get("kubernetes.io/service-name")).map(String::as_str),
        Some("kubernetes")
    );
    assert_eq!(slice.endpoints.len(), 1);
    assert_eq!(slice.endpoints[0].addresses, vec![host.clone()]);
    assert_eq!(slice.endpoints[0].conditions.as_ref().and_then(|c| c.ready), Some(true));
    let p = &slice.ports.as_ref().expect("ports")[0];
    assert_eq!((p.name.as_deref(), p.port, p.protocol.as_deref()), (Some("https"), Some(port), Some("TCP")));
}

// ---- 2. garbage collection ----------------------------------------------------------------------

#[tokio::test]
async fn background_deletion_of_a_deployment_removes_its_replicasets_and_pods() {
    let dc = DevCluster::start().await.expect("cluster starts");
    let client = dc.client();
    let deps: Api<Deployment> = Api::default_namespaced(client.clone());
    deps.create(&PostParams::default(), &deployment("web", 2, "example.com/web:v1")).await.expect("created");
    let d = wait_deployment_complete(&deps, "web", 2).await;
    assert_eq!(replica_sets_of(&client, &d).await.len(), 1);

    let res = deps.delete("web", &DeleteParams::background()).await.expect("deleted");
    assert!(res.is_right(), "a background delete removes the owner at once: {res:?}");
    let rss: Api<ReplicaSet> = Api::default_namespaced(client.clone());
    wait_list(&rss, labels("app=web"), "the ReplicaSets to be collected", |l| l.is_empty()).await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    wait_list(&pods, labels("app=web"), "the pods to be collected", |l| l.is_empty()).await;
}

#[tokio::test]
async fn foreground_deletion_keeps_the_owner_until_its_dependents_are_gone() {
    let dc = DevCluster::start().await.expect("cluster starts");
    let client = dc.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let owner = cms.create(&PostParams::default(), &configmap("owner")).await.expect("owner");
    let mut child = configmap("child");
    child.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    child.metadata.owner_references = Some(vec![from_json(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid_of(&owner), "blockOwnerDeletion": true,
    }))]);
    let child = cms.create(&PostParams::default(), &child).await.expect("child");

    let res = cms.delete("owner", &DeleteParams::foreground()).await.expect("delete accepted");
    let pending = res.left().expect("the owner is returned while it waits for its dependents");
    assert!(pending.metadata.deletion_timestamp.is_some());
    assert_eq!(pending.metadata.finalizers, Some(vec!["foregroundDeletion".to_string()]));

    // The collector deletes the child, which waits on its own finalizer; the owner waits on it.
    wait_for(&cms, "child", "the child to be deleted", |c| c.metadata.deletion_timestamp.is_some()).await;
    let still = cms.get("owner").await.expect("the owner waits for its dependent");
    assert!(still.metadata.deletion_timestamp.is_some());
    assert_eq!(still.metadata.finalizers, Some(vec!["foregroundDeletion".to_string()]));

    cms.patch("child", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await
        .expect("child finalizer removed");
    wait_gone(&cms, "child", &uid_of(&child), "the child to go").await;
    wait_gone(&cms, "owner", &uid_of(&owner), "the owner to go after its dependent").await;
}

#[tokio::test]
async fn orphan_deletion_leaves_the_dependents_without_the_owner_reference() {
    let dc = DevCluster::start().await.expect("cluster starts");
    let client = dc.client();
    let deps: Api<Deployment> = Api::default_namespaced(client.clone());
    deps.create(&PostParams::default(), &deployment("web", 2, "example.com/web:v1")).await.expect("created");
    let d = wait_deployment_complete(&deps, "web", 2).await;
    let rs_name = name_of(&replica_sets_of(&client, &d).await[0]);

    let res = deps.delete("web", &DeleteParams::orphan()).await.expect("delete accepted");
    let pending = res.left().expect("the owner is returned with the orphan finalizer");
    assert!(pending.metadata.deletion_timestamp.is_some());
    assert_eq!(pending.metadata.finalizers, Some(vec!["orphan".to_string()]));
    wait_gone(&deps, "web", &uid_of(&d), "the Deployment to go").await;

    let rss: Api<ReplicaSet> = Api::default_namespaced(client.clone());
    let rs = rss.get(&rs_name).await.expect("the ReplicaSet is orphaned, not deleted");
    assert_eq!(rs.metadata.owner_references.unwrap_or_default(), vec![], "its reference to the Deployment is removed");
    assert!(rs.metadata.deletion_timestamp.is_none());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let list = pods.list(&ListParams::default().labels("app=web")).await.expect("pods").items;
    assert_eq!(list.len(), 2);
    for p in &list {
        let refs = p.metadata.owner_references.as_ref().expect("pods keep their owner");
        assert_eq!(refs.len(), 1);
        assert_eq!((refs[0].kind.as_str(), refs[0].name.as_str()), ("ReplicaSet", rs_name.as_str()));
        assert!(p.metadata.deletion_timestamp.is_none());
    }
}

#[tokio::test]
async fn an_object_whose_owner_does_not_exist_is_collected() {
    let dc = DevCluster::start().await.expect("cluster starts");
    let cms: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let mut c = configmap("dangling");
    c.metadata.owner_references = Some(vec![from_json(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "name": "ghost", "uid": "6f0f4f2c-7b1e-4c52-9d0a-000000000000",
    }))]);
    let c = cms.create(&PostParams::default(), &c).await.expect("created");
    wait_gone(&cms, "dangling", &uid_of(&c), "the dependent of a missing owner to be collected").await;
}

// ---- 3. workloads -----------------------------------------------------------------------------

// Conditions: pkg/controller/deployment/util/deployment_util.go (MinimumReplicasAvailable,
// NewReplicaSetAvailable and their messages).
#[tokio::test]
async fn a_deployment_becomes_available_with_the_real_status() {
    let dc = DevCluster::start().await.expect("cluster starts");
    let client = dc.client();
    let deps: Api<Deployment> = Api::default_namespaced(client.clone());
    deps.create(&PostParams::default(), &deployment("web", 2, "example.com/web:v1")).await.expect("created");
    let d = wait_deployment_complete(&deps, "web", 2).await;

    let rss = replica_sets_of(&client, &d).await;
    assert_eq!(rss.len(), 1);
    let rs = &rss[0];
    let rs_name = name_of(rs);
    let hash = rs.metadata.labels.as_ref().and_then(|l| l.get("pod-template-hash")).expect("pod-template-hash");
    assert_eq!(rs_name, format!("web-{hash}"));
    assert_eq!(revision(rs), Some("1"));
    assert_eq!(rs.spec.as_ref().and_then(|s| s.replicas), Some(2));

    let s = d.status.as_ref().expect("status");
    assert_eq!(s.observed_generation, Some(1));
    assert_eq!(
        (s.replicas, s.updated_replicas, s.ready_replicas, s.available_replicas, s.unavailable_replicas),
        (Some(2), Some(2), Some(2), Some(2), None)
    );
    let a = dcond(&d, "Available").expect("Available");
    assert_eq!(a.message.as_deref(), Some("Deployment has minimum availability."));
    let p = dcond(&d, "Progressing").expect("Progressing");
    assert_eq!(p.message.as_deref(), Some(format!("ReplicaSet \"{rs_name}\" has successfully progressed.").as_str()));

    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let list = pods.list(&ListParams::default().labels("app=web")).await.expect("pods").items;
    assert_eq!(list.len(), 2);
    for p in &list {
        assert!(is_generated_from(&name_of(p), &rs_name), "{}", name_of(p));
        assert_eq!(phase(p), "Running");
        assert!(pod_ready(p));
        let r = &p.metadata.owner_references.as_ref().expect("owner")[0];
        assert_eq!((r.kind.as_str(), r.name.as_str(), r.controller), ("ReplicaSet", rs_name.as_str(), Some(true)));
        assert!(p.status.as_ref().and_then(|s| s.pod_ip.as_ref()).is_some(), "pods get an IP");
    }
}

#[tokio::test]
async fn a_template_change_rolls_out_a_new_replicaset() {
    let dc = DevCluster::start().await.expect("cluster starts");
    let client = dc.client();
    let deps: Api<Deployment> = Api::default_namespaced(client.clone());
    deps.create(&PostParams::default(), &deployment("web", 3, "example.com/web:v1")).await.expect("created");
    let d1 = wait_deployment_complete(&deps, "web", 3).await;
    let old_rs = name_of(&replica_sets_of(&client, &d1).await[0]);

    let p = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "example.com/web:v2"}]}}}});
    deps.patch("web", &PatchParams::default(), &Patch::Strategic(p)).await.expect("image changed");
    let d2 = wait_for(&deps, "web", "the rollout to finish", |d| {
        d.metadata.generation == Some(2) && deployment_complete(d, 3)
    })
    .await;

    let mut rss = replica_sets_of(&client, &d2).await;
    rss.sort_by_key(|r| revision(r).map(str::to_string));
    assert_eq!(rss.len(), 2, "{}", dump(&rss));
    assert_eq!(name_of(&rss[0]), old_rs);
    assert_eq!((revision(&rss[0]), rss[0].spec.as_ref().and_then(|s| s.replicas)), (Some("1"), Some(0)));
    let new_rs = name_of(&rss[1]);
    assert_eq!((revision(&rss[1]), rss[1].spec.as_ref().and_then(|s| s.replicas)), (Some("2"), Some(3)));
    let msg = dcond(&d2, "Progressing").and_then(|c| c.message.clone());
    assert_eq!(msg, Some(format!("ReplicaSet \"{new_rs}\" has successfully progressed.")));

    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let list = wait_list(&pods, labels("app=web"), "only new pods to remain", |l| {
        l.len() == 3 && l.iter().all(|p| is_generated_from(&name_of(p), &new_rs) && pod_ready(p))
    })
    .await;
    for p in &list {
        let image = p.spec.as_ref().map(|s| s.containers[0].image.clone());
        assert_eq!(image, Some(Some("example.com/web:v2".to_string())));
    }
}

fn deployment_revision(d: &Deployment) -> Option<&str> {
    d.metadata.annotations.as_ref()?.get("deployment.kubernetes.io/revision").map(String::as_str)
}

// deployment/util SetDeploymentRevision: the controller annotates the Deployment with the
// revision of its newest ReplicaSet (what `kubectl rollout history` and users read).
#[tokio::test]
async fn a_deployment_is_annotated_with_its_current_revision() {
    let dc = DevCluster::start().await.expect("cluster starts");
    let deps: Api<Deployment> = Api::default_namespaced(dc.client());
    deps.create(&PostParams::default(), &deployment("web", 1, "example.com/web:v1")).await.expect("created");
    wait_for(&deps, "web", "revision 1", |d| deployment_revision(d) == Some("1")).await;
    let p = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "example.com/web:v2"}]}}}});
    deps.patch("web", &PatchParams::default(), &Patch::Strategic(p)).await.expect("image changed");
    wait_for(&deps, "web", "revision 2", |d| deployment_revision(d) == Some("2")).await;
}

fn statefulset(name: &str, replicas: i32) -> StatefulSet {
    from_json(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas, "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "db", "image": "example.com/db:v1"}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}],
        },
    }))
}

#[tokio::test]
async fn a_statefulset_keeps_ordinal_pods_and_their_claims() {
    let dc = DevCluster::start().await.expect("cluster starts");
    let client = dc.client();
    let svcs: Api<Service> = Api::default_namespaced(client.clone());
    let headless: Service = from_json(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db"},
        "spec": {"clusterIP": "None", "selector": {"app": "db"}, "ports": [{"port": 5432}]}}));
    svcs.create(&PostParams::default(), &headless).await.expect("headless service");
    let sts: Api<StatefulSet> = Api::default_namespaced(client.clone());
    sts.create(&PostParams::default(), &statefulset("db", 3)).await.expect("created");
    let ready = |s: &StatefulSet, n: i32| {
        s.status.as_ref().is_some_and(|st| {
            st.replicas == n && st.ready_replicas.unwrap_or(0) == n && st.observed_generation == s.metadata.generation
        })
    };
    let s1 = wait_for(&sts, "db", "three ready replicas", |s| ready(s, 3)).await;
    let rev1 = s1.status.as_ref().and_then(|s| s.update_revision.clone()).expect("updateRevision");
    assert_eq!(s1.status.as_ref().and_then(|s| s.current_revision.clone()), Some(rev1.clone()));

    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let list = pods.list(&ListParams::default().labels("app=db")).await.expect("pods").items;
    let names: BTreeSet<String> = list.iter().map(name_of).collect();
    assert_eq!(names, ["db-0", "db-1", "db-2"].iter().map(|s| s.to_string()).collect());
    for p in &list {
        let spec = p.spec.as_ref().expect("spec");
        assert_eq!(spec.hostname.as_deref(), Some(name_of(p).as_str()));
        assert_eq!(spec.subdomain.as_deref(), Some("db"));
        let claim =
            spec.volumes.iter().flatten().find(|v| v.name == "data").and_then(|v| v.persistent_volume_claim.clone());
        assert_eq!(claim.map(|c| c.claim_name), Some(format!("data-{}", name_of(p))));
    }
    let pvcs: Api<PersistentVolumeClaim> = Api::default_namespaced(client.clone());
    let claims = wait_list(&pvcs, labels("app=db"), "three bound claims", |l| {
        l.len() == 3 && l.iter().all(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
    })
    .await;
    let uids: BTreeMap<String, String> = claims.iter().map(|c| (name_of(c), uid_of(c))).collect();
    assert_eq!(uids.keys().cloned().collect::<Vec<_>>(), vec!["data-db-0", "data-db-1", "data-db-2"]);

    // Scale to zero: the pods go, the claims stay.
    sts.patch("db", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 0}}))).await.expect("scaled");
    wait_list(&pods, labels("app=db"), "the pods to go", |l| l.is_empty()).await;
    wait_for(&sts, "db", "zero replicas reported", |s| ready(s, 0)).await;
    let kept: BTreeMap<String, String> = pvcs
        .list(&ListParams::default().labels("app=db"))
        .await
        .expect("pvcs")
        .items
        .iter()
        .map(|c| (name_of(c), uid_of(c)))
        .collect();
    assert_eq!(kept, uids, "scaling down keeps the claims");

    // Back to three: the same claims are used again.
    sts.patch("db", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 3}}))).await.expect("scaled");
    wait_for(&sts, "db", "three ready replicas again", |s| ready(s, 3)).await;
    let again: BTreeMap<String, String> = pvcs
        .list(&ListParams::default().labels("app=db"))
        .await
        .expect("pvcs")
        .items
        .iter()
        .map(|c| (name_of(c), uid_of(c)))
        .collect();
    assert_eq!(again, uids);

    // A template change rolls every pod; currentRevision catches up with updateRevision.
    let p = json!({"spec": {"template": {"metadata": {"annotations": {"example.com/rollout": "2"}}}}});
    sts.patch("db", &PatchParams::default(), &Patch::Merge(p)).await.expect("template changed");
    let s2 = wait_for(&sts, "db", "the rollout to finish", |s| {
        s.status.as_ref().is_some_and(|st| {
            st.update_revision.as_deref().is_some_and(|r| r != rev1)
                && st.current_revision == st.update_revision
                && st.updated_replicas == Some(3)
                && st.ready_replicas == Some(3)
                && st.observed_generation == s.metadata.generation
        })
    })
    .await;
    let rev2 = s2.status.and_then(|s| s.update_revision).expect("updateRevision");
    let list = wait_list(&pods, labels("app=db"), "every pod on the new revision", |l| {
        l.len() == 3
            && l.iter().all(|p| {
                pod_ready(p)
                    && p.metadata.labels.as_ref().and_then(|l| l.get("controller-revision-hash")) == Some(&rev2)
            })
    })
    .await;
    assert_eq!(list.len(), 3);
}

// A dynamically provisioned claim is bound to a PersistentVolume named `pvc-<claim uid>`
// (external-provisioner), recorded in spec.volumeName and the volume's claimRef.
#[tokio::test]
async fn a_bound_claim_names_its_volume() {
    let dc = DevCluster::start().await.expect("cluster starts");
    let client = dc.client();
    let pvcs: Api<PersistentVolumeClaim> = Api::default_namespaced(client.clone());
    let claim: PersistentVolumeClaim = from_json(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}));
    let claim = pvcs.create(&PostParams::default(), &claim).await.expect("claim");
    let bound = wait_for(&pvcs, "data", "the claim to bind", |c| {
        c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
    })
    .await;
    let volume = bound.spec.and_then(|s| s.volume_name).expect("spec.volumeName");
    assert_eq!(volume, format!("pvc-{}", uid_of(&claim)));
    let pv = Api::<PersistentVolume>::all(client.clone()).get(&volume).await.expect("the volume exists");
    let cref = pv.spec.and_then(|s| s.claim_ref).expect("claimRef");
    assert_eq!((cref.namespace.as_deref(), cref.name.as_deref()), (Some("default"), Some("data")));
    assert_eq!(pv.status.and_then(|s| s.phase).as_deref(), Some("Bound"));
}

#[tokio::test]
async fn services_get_a_cluster_ip_and_endpoints_list_ready_pods() {
    let dc = DevCluster::start().await.expect("cluster starts");
    let client = dc.client();
    let deps: Api<Deployment> = Api::default_namespaced(client.clone());
    deps.create(&PostParams::default(), &deployment("web", 2, "example.com/web:v1")).await.expect("created");
    let svcs: Api<Service> = Api::default_namespaced(client.clone());
    let svc: Service = from_json(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": "http"}]}}));
    let svc = svcs.create(&PostParams::default(), &svc).await.expect("service");
    let spec = svc.spec.expect("spec");
    let ip: std::net::Ipv4Addr = spec.cluster_ip.as_deref().expect("clusterIP").parse().expect("an IPv4 address");
    let octets = ip.octets();
    assert!(octets[0] == 10 && (96..112).contains(&octets[1]), "{ip} is in 10.96.0.0/12");
    assert_ne!(ip.to_string(), "10.96.0.1", "that address is the kubernetes Service's");
    assert_eq!(spec.cluster_ips, Some(vec![ip.to_string()]));
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));

    wait_deployment_complete(&deps, "web", 2).await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let pod_ips = |l: &[Pod]| -> BTreeSet<String> {
        l.iter().filter(|p| pod_ready(p)).filter_map(|p| p.status.as_ref().and_then(|s| s.pod_ip.clone())).collect()
    };
    let list = pods.list(&ListParams::default().labels("app=web")).await.expect("pods").items;
    let want = pod_ips(&list);
    assert_eq!(want.len(), 2);
    let eps: Api<Endpoints> = Api::default_namespaced(client.clone());
    let ep_ips = |e: &Endpoints| -> BTreeSet<String> {
        e.subsets.iter().flatten().flat_map(|s| s.addresses.iter().flatten()).map(|a| a.ip.clone()).collect()
    };
    let ep = wait_for(&eps, "web", "the endpoints of both pods", |e| ep_ips(e) == want).await;
    let subset = &ep.subsets.as_ref().expect("subsets")[0];
    assert!(subset.not_ready_addresses.is_none());
    let ports = subset.ports.as_ref().expect("ports");
    assert_eq!(ports.len(), 1);
    assert_eq!((ports[0].name.as_deref(), ports[0].port, ports[0].protocol.as_deref()), (None, 8080, Some("TCP")));
    for a in subset.addresses.iter().flatten() {
        let t = a.target_ref.as_ref().expect("targetRef");
        assert_eq!(t.kind.as_deref(), Some("Pod"));
        assert!(a.node_name.is_some());
    }

    // The EndpointSlice says the same.
    let slices: Api<EndpointSlice> = Api::default_namespaced(client.clone());
    let sl = wait_list(&slices, labels("kubernetes.io/service-name=web"), "the slice of both pods", |l| {
        l.len() == 1
            && l[0].endpoints.iter().flat_map(|e| e.addresses.clone()).collect::<BTreeSet<_>>() == want
            && l[0].endpoints.iter().all(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
    })
    .await;
    assert_eq!(sl[0].address_type, "IPv4");
    assert_eq!(sl[0].ports.as_ref().and_then(|p| p[0].port), Some(8080));

    // Scaling up adds the new pod's address.
    deps.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 3}}))).await.expect("scale");
    wait_for(&deps, "web", "three replicas", |d| d.metadata.generation == Some(2) && deployment_complete(d, 3)).await;
    let list = pods.list(&ListParams::default().labels("app=web")).await.expect("pods").items;
    let want3 = pod_ips(&list);
    assert_eq!(want3.len(), 3);
    wait_for(&eps, "web", "the endpoints of three pods", |e| ep_ips(e) == want3).await;
}

// ---- 4. faults --------------------------------------------------------------------------------

fn first_container_status(p: &Pod) -> Option<&k8s_openapi::api::core::v1::ContainerStatus> {
    p.status.as_ref()?.container_statuses.as_ref()?.first()
}

fn waiting_reason(p: &Pod) -> Option<&str> {
    first_container_status(p)?.state.as_ref()?.waiting.as_ref()?.reason.as_deref()
}

#[tokio::test]
async fn an_image_that_cannot_be_pulled_never_becomes_available() {
    let image = "example.com/app:missing";
    let opts = Options { faults: vec![FaultRule::new(image, Fault::ImagePull)], ..Default::default() };
    let dc = DevCluster::start_with(opts).await.expect("cluster starts");
    let client = dc.client();
    let deps: Api<Deployment> = Api::default_namespaced(client.clone());
    deps.create(&PostParams::default(), &deployment("web", 1, image)).await.expect("created");
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let list = wait_list(&pods, labels("app=web"), "the pod to back off pulling", |l| {
        l.len() == 1 && waiting_reason(&l[0]) == Some("ImagePullBackOff")
    })
    .await;
    let p = &list[0];
    assert_eq!(phase(p), "Pending");
    assert!(!pod_ready(p));
    let cs = first_container_status(p).expect("status");
    assert_eq!((cs.ready, cs.restart_count, cs.started), (false, 0, Some(false)));
    // kubelet images/image_manager.go: `Back-off pulling image %q` (with the last pull error
    // appended on recent kubelets).
    let msg = cs.state.as_ref().and_then(|s| s.waiting.as_ref()).and_then(|w| w.message.clone()).expect("message");
    assert!(msg.starts_with(&format!("Back-off pulling image \"{image}\"")), "{msg}");

    let d = wait_for(&deps, "web", "the Deployment to count the pod", |d| {
        d.status.as_ref().is_some_and(|s| s.replicas == Some(1) && s.unavailable_replicas == Some(1))
    })
    .await;
    assert!(dcond_is(&d, "Available", "False", "MinimumReplicasUnavailable"), "{}", dump(&d.status));
    let a = dcond(&d, "Available").expect("Available");
    assert_eq!(a.message.as_deref(), Some("Deployment does not have minimum availability."));
    let s = d.status.expect("status");
    assert_eq!((s.ready_replicas, s.available_replicas, s.updated_replicas), (None, None, Some(1)));
}

#[tokio::test]
async fn a_crash_looping_container_backs_off_with_its_exit_code() {
    let image = "example.com/app:crash";
    let opts =
        Options { faults: vec![FaultRule::new(image, Fault::CrashLoop { exit_code: 137 })], ..Default::default() };
    let dc = DevCluster::start_with(opts).await.expect("cluster starts");
    let client = dc.client();
    let deps: Api<Deployment> = Api::default_namespaced(client.clone());
    deps.create(&PostParams::default(), &deployment("web", 1, image)).await.expect("created");
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let list = wait_list(&pods, labels("app=web"), "the pod to crash-loop", |l| {
        l.len() == 1 && waiting_reason(&l[0]) == Some("CrashLoopBackOff")
    })
    .await;
    let p = &list[0];
    assert_eq!(phase(p), "Running");
    let cs = first_container_status(p).expect("status");
    assert!(cs.restart_count >= 1, "restartCount {}", cs.restart_count);
    assert!(!cs.ready);
    let term = cs.last_state.as_ref().and_then(|s| s.terminated.as_ref()).expect("lastState.terminated");
    assert_eq!(term.exit_code, 137);
    assert_eq!(term.reason.as_deref(), Some("Error"));
    // kuberuntime: `back-off %s restarting failed container=%s pod=%s`, pod as name_ns(uid).
    let msg = cs.state.as_ref().and_then(|s| s.waiting.as_ref()).and_then(|w| w.message.clone()).expect("message");
    let pod_ref = format!("pod={}_default({})", name_of(p), uid_of(p));
    assert!(
        msg.starts_with("back-off ") && msg.ends_with(&format!("restarting failed container=app {pod_ref}")),
        "{msg}"
    );
    let ready = pod_cond(p, "Ready").expect("Ready");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_deref(), ready.message.as_deref()),
        ("False", Some("ContainersNotReady"), Some("containers with unready status: [app]"))
    );
    let d = wait_for(&deps, "web", "the Deployment to count the pod", |d| {
        d.status.as_ref().is_some_and(|s| s.unavailable_replicas == Some(1))
    })
    .await;
    assert!(dcond_is(&d, "Available", "False", "MinimumReplicasUnavailable"));
}

#[tokio::test]
async fn faults_set_at_run_time_make_running_pods_unready_and_back() {
    let image = "example.com/app:v1";
    let dc = DevCluster::start().await.expect("cluster starts");
    let client = dc.client();
    let deps: Api<Deployment> = Api::default_namespaced(client.clone());
    deps.create(&PostParams::default(), &deployment("web", 1, image)).await.expect("created");
    let svcs: Api<Service> = Api::default_namespaced(client.clone());
    let svc: Service = from_json(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}}));
    svcs.create(&PostParams::default(), &svc).await.expect("service");
    wait_deployment_complete(&deps, "web", 1).await;

    dc.set_faults(vec![FaultRule::new(image, Fault::Unready)]);
    assert_eq!(dc.faults(), vec![FaultRule::new(image, Fault::Unready)]);
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let list = wait_list(&pods, labels("app=web"), "the pod to turn unready", |l| {
        l.len() == 1 && pod_cond(&l[0], "Ready").is_some_and(|c| c.status == "False")
    })
    .await;
    let p = &list[0];
    assert_eq!(phase(p), "Running");
    let cs = first_container_status(p).expect("status");
    assert!(cs.state.as_ref().and_then(|s| s.running.as_ref()).is_some(), "the container runs");
    assert_eq!((cs.ready, cs.started, cs.restart_count), (false, Some(true), 0));
    let ready = pod_cond(p, "Ready").expect("Ready");
    assert_eq!(ready.reason.as_deref(), Some("ContainersNotReady"));
    assert_eq!(ready.message.as_deref(), Some("containers with unready status: [app]"));
    let pod_ip = p.status.as_ref().and_then(|s| s.pod_ip.clone()).expect("podIP");

    wait_for(&deps, "web", "the Deployment to lose availability", |d| {
        dcond_is(d, "Available", "False", "MinimumReplicasUnavailable")
    })
    .await;
    // An unready pod is listed under notReadyAddresses.
    let eps: Api<Endpoints> = Api::default_namespaced(client.clone());
    let ep = wait_for(&eps, "web", "the pod to move to notReadyAddresses", |e| {
        e.subsets.iter().flatten().any(|s| s.not_ready_addresses.iter().flatten().any(|a| a.ip == pod_ip))
    })
    .await;
    assert!(ep.subsets.iter().flatten().all(|s| s.addresses.is_none()), "{}", dump(&ep));

    dc.set_faults(vec![]);
    wait_for(&deps, "web", "the Deployment to be available again", |d| {
        dcond_is(d, "Available", "True", "MinimumReplicasAvailable")
            && d.status.as_ref().and_then(|s| s.ready_replicas) == Some(1)
    })
    .await;
}

#[tokio::test]
async fn the_deadline_fault_reports_progress_deadline_exceeded() {
    let image = "example.com/app:slow";
    let opts = Options { faults: vec![FaultRule::new(image, Fault::Deadline)], ..Default::default() };
    let dc = DevCluster::start_with(opts).await.expect("cluster starts");
    let client = dc.client();
    let deps: Api<Deployment> = Api::default_namespaced(client.clone());
    deps.create(&PostParams::default(), &deployment("web", 1, image)).await.expect("created");
    let d = wait_for(&deps, "web", "ProgressDeadlineExceeded", |d| {
        dcond_is(d, "Progressing", "False", "ProgressDeadlineExceeded")
    })
    .await;
    let rs = name_of(&replica_sets_of(&client, &d).await[0]);
    // deployment/util: `ReplicaSet %q has timed out progressing.`
    let msg = dcond(&d, "Progressing").and_then(|c| c.message.clone());
    assert_eq!(msg, Some(format!("ReplicaSet \"{rs}\" has timed out progressing.")));
    assert!(dcond_is(&d, "Available", "False", "MinimumReplicasUnavailable"));
    // The pod runs and never gets ready, as with `unready`.
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    wait_list(&pods, labels("app=web"), "the pod to run unready", |l| {
        l.len() == 1 && phase(&l[0]) == "Running" && pod_cond(&l[0], "Ready").is_some_and(|c| c.status == "False")
    })
    .await;
}

#[tokio::test]
async fn a_short_progress_deadline_expires_for_pods_that_never_get_ready() {
    let image = "example.com/app:unready";
    let opts = Options { faults: vec![FaultRule::new(image, Fault::Unready)], ..Default::default() };
    let dc = DevCluster::start_with(opts).await.expect("cluster starts");
    let client = dc.client();
    let deps: Api<Deployment> = Api::default_namespaced(client.clone());
    let mut d = deployment("web", 1, image);
    d.spec.as_mut().expect("spec").progress_deadline_seconds = Some(1);
    deps.create(&PostParams::default(), &d).await.expect("created");
    let d = wait_for(&deps, "web", "ProgressDeadlineExceeded", |d| {
        dcond_is(d, "Progressing", "False", "ProgressDeadlineExceeded")
    })
    .await;
    let rs = name_of(&replica_sets_of(&client, &d).await[0]);
    let msg = dcond(&d, "Progressing").and_then(|c| c.message.clone());
    assert_eq!(msg, Some(format!("ReplicaSet \"{rs}\" has timed out progressing.")));
}

// ---- 5. nodes ---------------------------------------------------------------------------------

fn node_address(n: &Node, t: &str) -> Option<String> {
    n.status.as_ref()?.addresses.as_ref()?.iter().find(|a| a.type_ == t).map(|a| a.address.clone())
}

#[tokio::test]
async fn three_ready_nodes_whose_addresses_change_under_a_watch() {
    let dc = DevCluster::start_with(Options { nodes: 3, ..Default::default() }).await.expect("cluster starts");
    let nodes: Api<Node> = Api::all(dc.client());
    let list = nodes.list(&ListParams::default()).await.expect("nodes");
    let names: Vec<String> = list.items.iter().map(name_of).collect();
    assert_eq!(names, vec!["devcluster-node-1", "devcluster-node-2", "devcluster-node-3"]);
    for n in &list.items {
        let ready =
            n.status.as_ref().and_then(|s| s.conditions.as_ref()).and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
        assert_eq!(ready.map(|c| c.status.as_str()), Some("True"), "{}", name_of(n));
        assert!(node_address(n, "InternalIP").is_some(), "{}", dump(&n.status));
        assert!(node_address(n, "ExternalIP").is_some(), "{}", dump(&n.status));
    }
    let internal: BTreeSet<String> = list.items.iter().filter_map(|n| node_address(n, "InternalIP")).collect();
    assert_eq!(internal.len(), 3, "nodes have distinct addresses");

    let rv = list.metadata.resource_version.expect("list resourceVersion");
    let mut stream = nodes.watch(&WatchParams::default().timeout(20), &rv).await.expect("watch").boxed();
    dc.set_node_addresses("devcluster-node-2", "10.0.0.42", Some("198.51.100.7")).expect("addresses changed");
    let seen = tokio::time::timeout(WAIT, async {
        while let Some(ev) = stream.try_next().await.expect("watch event") {
            if let WatchEvent::Modified(n) = ev
                && name_of(&n) == "devcluster-node-2"
            {
                return n;
            }
        }
        panic!("the watch ended without the change")
    })
    .await
    .expect("the watch sees the address change");
    assert_eq!(node_address(&seen, "InternalIP").as_deref(), Some("10.0.0.42"));
    assert_eq!(node_address(&seen, "ExternalIP").as_deref(), Some("198.51.100.7"));
    assert_eq!(node_address(&seen, "Hostname").as_deref(), Some("devcluster-node-2"));
    let err = dc.set_node_addresses("devcluster-node-9", "10.0.0.9", None).expect_err("no such node");
    assert!(err.to_string().contains("devcluster-node-9"), "{err}");
}

#[tokio::test]
async fn pods_spread_over_the_nodes() {
    let dc = DevCluster::start_with(Options { nodes: 3, ..Default::default() }).await.expect("cluster starts");
    let client = dc.client();
    let deps: Api<Deployment> = Api::default_namespaced(client.clone());
    deps.create(&PostParams::default(), &deployment("web", 6, "example.com/web:v1")).await.expect("created");
    wait_deployment_complete(&deps, "web", 6).await;
    let nodes: BTreeMap<String, String> = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("nodes")
        .items
        .iter()
        .map(|n| (name_of(n), node_address(n, "InternalIP").expect("InternalIP")))
        .collect();
    let pods = Api::<Pod>::default_namespaced(client.clone()).list(&ListParams::default().labels("app=web")).await;
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    for p in pods.expect("pods").items {
        let node = p.spec.as_ref().and_then(|s| s.node_name.clone()).expect("scheduled");
        let host_ip = p.status.as_ref().and_then(|s| s.host_ip.clone());
        assert_eq!(host_ip.as_ref(), nodes.get(&node), "hostIP is the node's InternalIP");
        *per_node.entry(node).or_default() += 1;
    }
    assert_eq!(per_node.len(), 3, "every node runs some of the pods: {per_node:?}");
    assert!(per_node.values().all(|n| *n == 2), "{per_node:?}");
}

// ---- 6. admission -----------------------------------------------------------------------------

fn plain_pod(name: &str) -> Pod {
    from_json(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "app", "image": "example.com/app:v1"}]}}))
}

fn restricted_pod(name: &str) -> Pod {
    from_json(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "securityContext": {"runAsNonRoot": true, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "app", "image": "example.com/app:v1",
                "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]}}))
}

/// What `restricted` says of a container `app` with no security context
/// (pod-security-admission policy checks; the order is the checks' order).
const RESTRICTED_DETAIL: &str = r#"allowPrivilegeEscalation != false (container "app" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container "app" must set securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or container "app" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container "app" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")"#;

#[tokio::test]
async fn pod_security_restricted_rejects_root_pods_and_admits_compliant_ones() {
    let dc = DevCluster::start().await.expect("cluster starts");
    let client = dc.client();
    create_ns(&client, "secure", &[("pod-security.kubernetes.io/enforce", "restricted")]).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "secure");
    let err = api_error(pods.create(&PostParams::default(), &plain_pod("root")).await, "a root pod");
    assert_eq!((err.code, err.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        err.message,
        format!("pods \"root\" is forbidden: violates PodSecurity \"restricted:latest\": {RESTRICTED_DETAIL}")
    );
    assert!(pods.get_opt("root").await.expect("get").is_none());

    pods.create(&PostParams::default(), &restricted_pod("ok")).await.expect("a compliant pod is admitted");
    wait_for(&pods, "ok", "the compliant pod to run", |p| phase(p) == "Running" && pod_ready(p)).await;
}

/// Create a Deployment with a raw POST; return the Warning headers of the 201.
async fn create_deployment_warnings(client: &kube::Client, ns: &str, d: &Deployment) -> Vec<String> {
    let body = serde_json::to_vec(d).expect("json");
    let req = http::Request::post(format!("/apis/apps/v1/namespaces/{ns}/deployments"))
        .header("content-type", "application/json")
        .body(kube::client::Body::from(body))
        .expect("request");
    let res = client.send(req).await.expect("sent");
    assert_eq!(res.status(), http::StatusCode::CREATED);
    res.headers().get_all("warning").iter().map(|v| v.to_str().expect("ascii").to_string()).collect()
}

// pod-security-admission admission.go: a workload's pod template is checked against the warn
// (and audit) level only; enforce applies to the pods themselves. So the warning needs the warn
// label, and the refusal shows up when the ReplicaSet creates pods.
#[tokio::test]
async fn a_deployment_of_refused_pods_warns_and_reports_failed_create() {
    let dc = DevCluster::start().await.expect("cluster starts");
    let client = dc.client();
    create_ns(&client, "enforced", &[("pod-security.kubernetes.io/enforce", "restricted")]).await;
    let none = create_deployment_warnings(&client, "enforced", &deployment("web", 1, "example.com/web:v1")).await;
    assert_eq!(none, Vec::<String>::new(), "enforce alone does not warn about templates");

    let ps = [("pod-security.kubernetes.io/enforce", "restricted"), ("pod-security.kubernetes.io/warn", "restricted")];
    create_ns(&client, "secure", &ps).await;
    // The create succeeds with a Warning header (kubectl prints it as `Warning: ...`).
    let warnings = create_deployment_warnings(&client, "secure", &deployment("web", 1, "example.com/web:v1")).await;
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let (code_agent, text) = warnings[0].split_at(6);
    assert_eq!(code_agent, "299 - ");
    assert_eq!(unquote(text), format!("would violate PodSecurity \"restricted:latest\": {RESTRICTED_DETAIL}"));

    // replica_set_utils.go calculateStatus: ReplicaFailure True FailedCreate, the API's refusal
    // as the message; the Deployment copies it (progress.go getReplicaFailures).
    let rss: Api<ReplicaSet> = Api::namespaced(client.clone(), "secure");
    let failed = |rs: &ReplicaSet| {
        rs.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "ReplicaFailure"))
            .cloned()
    };
    let list = wait_list(&rss, labels("app=web"), "the ReplicaSet to report FailedCreate", |l| {
        l.len() == 1 && failed(&l[0]).is_some()
    })
    .await;
    let rs_name = name_of(&list[0]);
    let c = failed(&list[0]).expect("condition");
    assert_eq!((c.status.as_str(), c.reason.as_deref()), ("True", Some("FailedCreate")));
    let msg = c.message.expect("message");
    let (pod, rest) = split_pod_forbidden(&msg);
    assert!(is_generated_from(&pod, &rs_name), "{msg}");
    assert_eq!(rest, format!(" is forbidden: violates PodSecurity \"restricted:latest\": {RESTRICTED_DETAIL}"));
    assert_eq!(list[0].status.as_ref().map(|s| s.replicas), Some(0));

    let deps: Api<Deployment> = Api::namespaced(client.clone(), "secure");
    let d = wait_for(&deps, "web", "the Deployment to report ReplicaFailure", |d| {
        dcond_is(d, "ReplicaFailure", "True", "FailedCreate")
    })
    .await;
    let dm = dcond(&d, "ReplicaFailure").and_then(|c| c.message.clone()).expect("message");
    let (_, drest) = split_pod_forbidden(&dm);
    assert_eq!(drest, rest);
    assert!(dcond_is(&d, "Available", "False", "MinimumReplicasUnavailable"));
}

// plugin/pkg/admission/resourcequota/controller.go: `exceeded quota: %s, requested: %s, used:
// %s, limited: %s`, each a sorted `name=quantity` list.
#[tokio::test]
async fn a_resource_quota_refuses_what_exceeds_it_and_tracks_usage() {
    let dc = DevCluster::start().await.expect("cluster starts");
    let client = dc.client();
    create_ns(&client, "capped", &[]).await;
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), "capped");
    let q: ResourceQuota = from_json(json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q"},
        "spec": {"hard": {"pods": "2", "requests.cpu": "1"}}}));
    quotas.create(&PostParams::default(), &q).await.expect("quota");
    let used = |q: &ResourceQuota, k: &str| -> Option<String> {
        q.status.as_ref()?.used.as_ref()?.get(k).map(|v| v.0.clone())
    };
    let q0 = wait_for(&quotas, "q", "the quota status", |q| used(q, "pods").is_some()).await;
    assert_eq!((used(&q0, "pods").as_deref(), used(&q0, "requests.cpu").as_deref()), (Some("0"), Some("0")));
    let hard = q0.status.as_ref().and_then(|s| s.hard.clone()).expect("status.hard");
    assert_eq!(hard.get("pods").map(|v| v.0.as_str()), Some("2"));

    let pods: Api<Pod> = Api::namespaced(client.clone(), "capped");
    let with_cpu = |name: &str, cpu: &str| -> Pod {
        from_json(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "app", "image": "example.com/app:v1", "resources": {"requests": {"cpu": cpu}}}]}}))
    };
    // Usage is charged at admission and recomputed by the quota controller; each step waits
    // for status.used to show the pods created so far (see the concurrent-create test below).
    let settled = |n: &'static str| move |q: &ResourceQuota| used(q, "pods").as_deref() == Some(n);
    pods.create(&PostParams::default(), &with_cpu("a", "600m")).await.expect("within the quota");
    wait_for(&quotas, "q", "usage of one pod", settled("1")).await;
    let err = api_error(pods.create(&PostParams::default(), &with_cpu("b", "600m")).await, "over requests.cpu");
    assert_eq!((err.code, err.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        err.message,
        "pods \"b\" is forbidden: exceeded quota: q, requested: requests.cpu=600m, used: requests.cpu=600m, limited: requests.cpu=1"
    );
    pods.create(&PostParams::default(), &with_cpu("c", "200m")).await.expect("within the quota");
    wait_for(&quotas, "q", "usage of two pods", settled("2")).await;
    let err = api_error(pods.create(&PostParams::default(), &with_cpu("d", "100m")).await, "over pods");
    assert_eq!(
        err.message,
        "pods \"d\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2"
    );

    let q2 = wait_for(&quotas, "q", "usage of two pods", |q| used(q, "pods").as_deref() == Some("2")).await;
    assert_eq!(used(&q2, "requests.cpu").as_deref(), Some("800m"));
    // Deleting a pod gives its share back.
    let a = pods.get("a").await.expect("pod a");
    pods.delete("a", &DeleteParams::default()).await.expect("deleted");
    wait_gone(&pods, "a", &uid_of(&a), "pod a to go").await;
    let q3 = wait_for(&quotas, "q", "usage of one pod", |q| used(q, "pods").as_deref() == Some("1")).await;
    assert_eq!(used(&q3, "requests.cpu").as_deref(), Some("200m"));
    pods.create(&PostParams::default(), &with_cpu("e", "700m")).await.expect("room again");
}

// Quota admission charges usage with an optimistic-concurrency update of the quota before the
// object is stored, retrying on conflict, so creates never exceed `hard`, however fast or
// concurrent they are (plugin/pkg/admission/resourcequota/controller.go checkQuotas). Here, in
// five namespaces, ten pods are created at once against `pods: 3`.
#[tokio::test]
async fn concurrent_creates_never_exceed_a_quota() {
    let dc = DevCluster::start().await.expect("cluster starts");
    let client = dc.client();
    for round in 0..5 {
        let ns = format!("quota-{round}");
        create_ns(&client, &ns, &[]).await;
        let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), &ns);
        let q: ResourceQuota =
            from_json(json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q"},
            "spec": {"hard": {"pods": "3"}}}));
        quotas.create(&PostParams::default(), &q).await.expect("quota");
        wait_for(&quotas, "q", "the quota status", |q| q.status.as_ref().and_then(|s| s.used.as_ref()).is_some()).await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let creates = (0..10).map(|i| {
            let pods = pods.clone();
            async move { pods.create(&PostParams::default(), &plain_pod(&format!("p{i}"))).await }
        });
        let mut admitted = 0;
        for r in futures::future::join_all(creates).await {
            match r {
                Ok(_) => admitted += 1,
                Err(kube::Error::Api(s)) if s.code == 403 => {
                    assert!(
                        s.message.contains("exceeded quota: q, requested: pods=1, used: pods=3, limited: pods=3"),
                        "{ns}: {}",
                        s.message
                    );
                }
                Err(e) => panic!("{ns}: create failed: {e}"),
            }
        }
        assert_eq!(admitted, 3, "{ns}: the quota allows three pods");
        let stored = pods.list(&ListParams::default()).await.expect("pods").items.len();
        assert_eq!(stored, 3, "{ns}");
    }
}

// plugin/pkg/admission/limitranger/admission.go: defaults merged into containers with the
// `kubernetes.io/limit-ranger` annotation; `maximum %s usage per %s is %s, but limit is %s`.
#[tokio::test]
async fn a_limit_range_defaults_container_resources_and_enforces_its_maximum() {
    let dc = DevCluster::start().await.expect("cluster starts");
    let client = dc.client();
    create_ns(&client, "limited", &[]).await;
    let lrs: Api<LimitRange> = Api::namespaced(client.clone(), "limited");
    let lr: LimitRange = from_json(json!({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "defaults"},
        "spec": {"limits": [{"type": "Container",
            "default": {"cpu": "500m", "memory": "256Mi"},
            "defaultRequest": {"cpu": "100m", "memory": "128Mi"},
            "max": {"cpu": "1", "memory": "1Gi"}}]}}));
    lrs.create(&PostParams::default(), &lr).await.expect("limit range");

    let pods: Api<Pod> = Api::namespaced(client.clone(), "limited");
    let p = pods.create(&PostParams::default(), &plain_pod("plain")).await.expect("defaulted pod");
    let r = p.spec.as_ref().and_then(|s| s.containers[0].resources.clone()).expect("resources");
    let q = |m: &Option<BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>, k: &str| {
        m.as_ref().and_then(|m| m.get(k)).map(|v| v.0.clone())
    };
    assert_eq!((q(&r.requests, "cpu"), q(&r.requests, "memory")), (Some("100m".into()), Some("128Mi".into())));
    assert_eq!((q(&r.limits, "cpu"), q(&r.limits, "memory")), (Some("500m".into()), Some("256Mi".into())));
    assert_eq!(
        p.metadata.annotations.as_ref().and_then(|a| a.get("kubernetes.io/limit-ranger")).map(String::as_str),
        Some("LimitRanger plugin set: cpu, memory request for container app; cpu, memory limit for container app")
    );

    let big: Pod = from_json(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "big"},
        "spec": {"containers": [{"name": "app", "image": "example.com/app:v1", "resources": {"limits": {"cpu": "2"}}}]}}));
    let err = api_error(pods.create(&PostParams::default(), &big).await, "over the maximum");
    assert_eq!((err.code, err.reason.as_str()), (403, "Forbidden"));
    assert_eq!(err.message, "pods \"big\" is forbidden: maximum cpu usage per Container is 1, but limit is 2");
}

// The pod strategy's PrepareForCreate computes status.qosClass after mutating admission
// (handlers/create.go runs admission before the store's BeforeCreate), so LimitRange defaults
// count: requests < limits is Burstable.
#[tokio::test]
async fn a_pod_defaulted_by_a_limit_range_has_the_qos_class_of_its_defaults() {
    let dc = DevCluster::start().await.expect("cluster starts");
    let client = dc.client();
    let lrs: Api<LimitRange> = Api::default_namespaced(client.clone());
    let lr: LimitRange = from_json(json!({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "defaults"},
        "spec": {"limits": [{"type": "Container",
            "default": {"cpu": "500m"}, "defaultRequest": {"cpu": "100m"}}]}}));
    lrs.create(&PostParams::default(), &lr).await.expect("limit range");
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let p = pods.create(&PostParams::default(), &plain_pod("plain")).await.expect("defaulted pod");
    assert_eq!(p.status.and_then(|s| s.qos_class).as_deref(), Some("Burstable"));
    let running = wait_for(&pods, "plain", "the pod to run", |p| phase(p) == "Running").await;
    assert_eq!(running.status.and_then(|s| s.qos_class).as_deref(), Some("Burstable"));
}

// ---- 7. authentication and authorization --------------------------------------------------------

struct Bot {
    client: kube::Client,
    sa_uid: String,
}

/// Namespaces team-a and team-b; ServiceAccount team-a/bot bound to a Role that may get and
/// list configmaps in team-a; a client with a TokenRequest token of it.
async fn bot(dc: &DevCluster) -> Bot {
    let admin = dc.client();
    create_ns(&admin, "team-a", &[]).await;
    create_ns(&admin, "team-b", &[]).await;
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), "team-a");
    let sa: ServiceAccount =
        from_json(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "bot"}}));
    let sa = sas.create(&PostParams::default(), &sa).await.expect("service account");
    let role: Role = from_json(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "cm-reader"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]}));
    Api::<Role>::namespaced(admin.clone(), "team-a").create(&PostParams::default(), &role).await.expect("role");
    let rb: RoleBinding = from_json(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": "team-a"}]}));
    Api::<RoleBinding>::namespaced(admin.clone(), "team-a").create(&PostParams::default(), &rb).await.expect("binding");

    let tr = TokenRequest {
        spec: TokenRequestSpec { audiences: vec![], expiration_seconds: Some(3600), ..Default::default() },
        ..Default::default()
    };
    let tr = sas.create_token_request("bot", &PostParams::default(), &tr).await.expect("token request");
    let token = tr.status.map(|s| s.token).expect("a token");
    assert!(!token.is_empty());
    let client = devcluster::client_for(&kubeconfig_with_token(dc, Some(&token))).await.expect("bot client");
    Bot { client, sa_uid: uid_of(&sa) }
}

const BOT: &str = "system:serviceaccount:team-a:bot";

// handlers/patch.go and update.go: a patch (apply) or update that would create the object is
// also authorized as a `create`, with the request's other attributes.
#[tokio::test]
async fn an_apply_that_would_create_needs_the_create_verb() {
    let dc = DevCluster::start().await.expect("cluster starts");
    let bot = bot(&dc).await;
    let admin = dc.client();
    let role: Role = from_json(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "cm-patcher"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["patch", "update"]}]}));
    Api::<Role>::namespaced(admin.clone(), "team-a").create(&PostParams::default(), &role).await.expect("role");
    let rb: RoleBinding = from_json(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "patcher"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-patcher"},
        "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": "team-a"}]}));
    Api::<RoleBinding>::namespaced(admin.clone(), "team-a").create(&PostParams::default(), &rb).await.expect("binding");
    let cms: Api<ConfigMap> = Api::namespaced(bot.client.clone(), "team-a");
    let body = |v: &str| {
        Patch::Apply(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"v": v}}),
        )
    };
    let err = api_error(cms.patch("settings", &PatchParams::apply("bot"), &body("1")).await, "apply creating");
    assert_eq!((err.code, err.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        err.message,
        format!(
            r#"configmaps "settings" is forbidden: User "{BOT}" cannot create resource "configmaps" in API group "" in the namespace "team-a""#
        )
    );
    assert!(Api::<ConfigMap>::namespaced(admin.clone(), "team-a").get_opt("settings").await.expect("get").is_none());
    // Once the object exists, patch alone is enough.
    Api::<ConfigMap>::namespaced(admin.clone(), "team-a")
        .create(&PostParams::default(), &configmap("settings"))
        .await
        .expect("admin creates it");
    let out = cms.patch("settings", &PatchParams::apply("bot"), &body("2")).await.expect("apply to an existing object");
    assert_eq!(out.data.expect("data")["v"], "2");
}

#[tokio::test]
async fn a_service_account_token_authenticates_as_the_service_account() {
    let dc = DevCluster::start().await.expect("cluster starts");
    let bot = bot(&dc).await;
    let ssr: SelfSubjectReview = from_json(self_subject_review_body());
    let me =
        Api::<SelfSubjectReview>::all(bot.client.clone()).create(&PostParams::default(), &ssr).await.expect("review");
    let info = me.status.and_then(|s| s.user_info).expect("userInfo");
    assert_eq!(info.username.as_deref(), Some(BOT));
    assert_eq!(info.uid.as_deref(), Some(bot.sa_uid.as_str()));
    let groups = info.groups.unwrap_or_default();
    for g in ["system:serviceaccounts", "system:serviceaccounts:team-a", "system:authenticated"] {
        assert!(groups.iter().any(|x| x == g), "{g} missing from {groups:?}");
    }
}

// RBAC denials: staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go
// forbiddenMessage.
#[tokio::test]
async fn a_narrow_role_allows_what_it_grants_and_nothing_else() {
    let dc = DevCluster::start().await.expect("cluster starts");
    let bot = bot(&dc).await;
    let mine: Api<ConfigMap> = Api::namespaced(bot.client.clone(), "team-a");
    let list = mine.list(&ListParams::default()).await.expect("the bot may list configmaps in team-a");
    assert!(list.items.iter().any(|c| name_of(c) == "kube-root-ca.crt"));
    mine.get("kube-root-ca.crt").await.expect("and get them");

    let forbidden = |e: Status, want: String| {
        assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"), "{}", e.message);
        assert_eq!(e.message, want);
    };
    let secrets: Api<Secret> = Api::namespaced(bot.client.clone(), "team-a");
    forbidden(
        api_error(secrets.list(&ListParams::default()).await, "list secrets"),
        format!(
            "secrets is forbidden: User \"{BOT}\" cannot list resource \"secrets\" in API group \"\" in the namespace \"team-a\""
        ),
    );
    forbidden(
        api_error(secrets.get("token").await, "get a secret"),
        format!(
            "secrets \"token\" is forbidden: User \"{BOT}\" cannot get resource \"secrets\" in API group \"\" in the namespace \"team-a\""
        ),
    );
    let theirs: Api<ConfigMap> = Api::namespaced(bot.client.clone(), "team-b");
    forbidden(
        api_error(theirs.list(&ListParams::default()).await, "list configmaps in team-b"),
        format!(
            "configmaps is forbidden: User \"{BOT}\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"team-b\""
        ),
    );
    let everywhere: Api<ConfigMap> = Api::all(bot.client.clone());
    forbidden(
        api_error(everywhere.list(&ListParams::default()).await, "list configmaps everywhere"),
        format!(
            "configmaps is forbidden: User \"{BOT}\" cannot list resource \"configmaps\" in API group \"\" at the cluster scope"
        ),
    );
    forbidden(
        api_error(mine.create(&PostParams::default(), &configmap("x")).await, "create a configmap"),
        format!(
            "configmaps is forbidden: User \"{BOT}\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"team-a\""
        ),
    );
}

// plugin/pkg/auth/authorizer/rbac/rbac.go: `RBAC: allowed by %s`, the binding described as
// `RoleBinding "name/ns" of Role "role" to ServiceAccount "sa/ns"`; a denial has no reason.
#[tokio::test]
async fn self_subject_access_reviews_answer_for_the_service_account() {
    let dc = DevCluster::start().await.expect("cluster starts");
    let bot = bot(&dc).await;
    let reviews: Api<SelfSubjectAccessReview> = Api::all(bot.client.clone());
    let ask = |verb: &str, resource: &str, ns: &str| -> SelfSubjectAccessReview {
        from_json(json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"verb": verb, "resource": resource, "namespace": ns}}}))
    };
    let yes = reviews.create(&PostParams::default(), &ask("list", "configmaps", "team-a")).await.expect("review");
    let s = yes.status.expect("status");
    assert!(s.allowed);
    assert_eq!(
        s.reason.as_deref(),
        Some(r#"RBAC: allowed by RoleBinding "reader/team-a" of Role "cm-reader" to ServiceAccount "bot/team-a""#)
    );
    for (verb, resource, ns) in
        [("list", "secrets", "team-a"), ("get", "configmaps", "team-b"), ("delete", "configmaps", "team-a")]
    {
        let no = reviews.create(&PostParams::default(), &ask(verb, resource, ns)).await.expect("review");
        let s = no.status.expect("status");
        assert!(!s.allowed, "{verb} {resource} in {ns}");
        assert_eq!((s.denied, s.reason.as_deref().unwrap_or("")), (None, ""), "{verb} {resource} in {ns}");
    }
}

// staging/src/k8s.io/apiserver/pkg/endpoints/filters/impersonation.go: a service-account user
// gets the service-account groups and system:authenticated; an unauthorized attempt is 403 on
// the `impersonate` verb.
#[tokio::test]
async fn impersonation_works_for_the_admin_and_is_forbidden_for_the_service_account() {
    let dc = DevCluster::start().await.expect("cluster starts");
    let bot = bot(&dc).await;
    let admin = dc.client();
    let path = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
    let as_bot = [("Impersonate-User", BOT)];
    let me: SelfSubjectReview =
        raw(&admin, "POST", path, &as_bot, Some(self_subject_review_body())).await.expect("review");
    let info = me.status.and_then(|s| s.user_info).expect("userInfo");
    assert_eq!(info.username.as_deref(), Some(BOT));
    assert_eq!(
        info.groups,
        Some(vec![
            "system:serviceaccounts".into(),
            "system:serviceaccounts:team-a".into(),
            "system:authenticated".into()
        ])
    );
    // Acting as the bot, the admin has the bot's rights.
    let err: Status = api_error(
        raw::<Value>(&admin, "GET", "/api/v1/namespaces/team-a/secrets", &as_bot, None).await,
        "list secrets as the bot",
    );
    assert_eq!(err.code, 403);
    assert_eq!(
        err.message,
        format!(
            "secrets is forbidden: User \"{BOT}\" cannot list resource \"secrets\" in API group \"\" in the namespace \"team-a\""
        )
    );
    let cms: Value = raw(&admin, "GET", "/api/v1/namespaces/team-a/configmaps", &as_bot, None)
        .await
        .expect("the bot may list these");
    assert_eq!(cms["kind"], "ConfigMapList");

    let err = api_error(
        raw::<Value>(
            &bot.client,
            "GET",
            "/api/v1/namespaces/team-a/configmaps",
            &[("Impersonate-User", "admin")],
            None,
        )
        .await,
        "the bot impersonating the admin",
    );
    assert_eq!((err.code, err.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        err.message,
        format!(
            "users \"admin\" is forbidden: User \"{BOT}\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
        )
    );
    let err = api_error(
        raw::<Value>(
            &bot.client,
            "GET",
            "/api/v1/namespaces/team-a/configmaps",
            &[("Impersonate-Group", "system:masters"), ("Impersonate-User", "bot")],
            None,
        )
        .await,
        "the bot impersonating a master",
    );
    assert_eq!(err.code, 403);
    assert!(err.message.contains(&format!("User \"{BOT}\" cannot impersonate resource")), "{}", err.message);
}

#[tokio::test]
async fn a_token_stops_working_when_its_service_account_is_deleted() {
    let dc = DevCluster::start().await.expect("cluster starts");
    let bot = bot(&dc).await;
    let mine: Api<ConfigMap> = Api::namespaced(bot.client.clone(), "team-a");
    mine.list(&ListParams::default()).await.expect("works while the service account exists");
    let sas: Api<ServiceAccount> = Api::namespaced(dc.client(), "team-a");
    sas.delete("bot", &DeleteParams::default()).await.expect("deleted");
    wait_gone(&sas, "bot", &bot.sa_uid, "the service account to go").await;
    let err = api_error(mine.list(&ListParams::default()).await, "a token of a deleted service account");
    assert_eq!((err.code, err.reason.as_str(), err.message.as_str()), (401, "Unauthorized", "Unauthorized"));

    // A new service account of the same name is another identity: the old token stays dead.
    let sa: ServiceAccount =
        from_json(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "bot"}}));
    sas.create(&PostParams::default(), &sa).await.expect("recreated");
    let err = api_error(mine.list(&ListParams::default()).await, "the old token after the name is reused");
    assert_eq!(err.code, 401);
}

#[tokio::test]
async fn anonymous_requests_are_system_anonymous_and_bad_tokens_are_unauthorized() {
    let dc = DevCluster::start().await.expect("cluster starts");
    let anon = devcluster::client_for(&kubeconfig_with_token(&dc, None)).await.expect("anonymous client");
    let version: Value = raw(&anon, "GET", "/version", &[], None).await.expect("/version is public");
    assert!(version.get("gitVersion").is_some(), "{version}");
    let err = api_error(Api::<Namespace>::all(anon.clone()).list(&ListParams::default()).await, "anonymous list");
    assert_eq!((err.code, err.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        err.message,
        "namespaces is forbidden: User \"system:anonymous\" cannot list resource \"namespaces\" in API group \"\" at the cluster scope"
    );
    let bad = devcluster::client_for(&kubeconfig_with_token(&dc, Some("not-a-token"))).await.expect("client");
    let err = api_error(Api::<Namespace>::all(bad).list(&ListParams::default()).await, "a bad token");
    assert_eq!((err.code, err.reason.as_str(), err.message.as_str()), (401, "Unauthorized", "Unauthorized"));
}

// ---- 8. leases and events -----------------------------------------------------------------------

const LEASE: &str = "leader";
const LEASE_SECONDS: i32 = 15;

fn now_micro() -> MicroTime {
    MicroTime(Timestamp::now())
}

/// One round of client-go's leaderelection tryAcquireOrRenew against the Lease API: create the
/// lease if absent; renew it if held; take it over if expired; else back off. Optimistic
/// concurrency decides races: a 409 (AlreadyExists on create, Conflict on update) loses.
async fn try_acquire_or_renew(api: &Api<Lease>, me: &str) -> Result<bool, Status> {
    let current = api.get_opt(LEASE).await.map_err(|e| match e {
        kube::Error::Api(s) => *s,
        other => panic!("get lease: {other}"),
    })?;
    let result = match current {
        None => {
            let mut lease: Lease = from_json(json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": LEASE},
                "spec": {"holderIdentity": me, "leaseDurationSeconds": LEASE_SECONDS, "leaseTransitions": 0}}));
            let spec = lease.spec.as_mut().expect("spec");
            spec.acquire_time = Some(now_micro());
            spec.renew_time = Some(now_micro());
            api.create(&PostParams::default(), &lease).await
        }
        Some(mut lease) => {
            let spec = lease.spec.get_or_insert_with(Default::default);
            let holder = spec.holder_identity.clone().unwrap_or_default();
            let duration = SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(LEASE_SECONDS)));
            let expired = spec.renew_time.as_ref().is_none_or(|r| r.0 + duration < Timestamp::now());
            if holder != me {
                if !expired {
                    return Ok(false);
                }
                spec.holder_identity = Some(me.to_string());
                spec.acquire_time = Some(now_micro());
                spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            }
            spec.renew_time = Some(now_micro());
            // The object carries the resourceVersion it was read at.
            api.replace(LEASE, &PostParams::default(), &lease).await
        }
    };
    match result {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Err(*s),
        Err(other) => panic!("lease write failed: {other}"),
    }
}

fn holder(l: &Lease) -> Option<String> {
    l.spec.as_ref()?.holder_identity.clone()
}

#[tokio::test]
async fn lease_based_leader_election_never_has_two_leaders() {
    let dc = DevCluster::start().await.expect("cluster starts");
    let client = dc.client();
    let a: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let b: Api<Lease> = Api::namespaced(client.clone(), "kube-system");

    // Both find no lease and create it at once: one wins, the other gets 409 AlreadyExists.
    let lease: Lease = from_json(json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": LEASE}, "spec": {"leaseDurationSeconds": LEASE_SECONDS}}));
    let mut la = lease.clone();
    la.spec.as_mut().expect("spec").holder_identity = Some("a".into());
    let mut lb = lease;
    lb.spec.as_mut().expect("spec").holder_identity = Some("b".into());
    let pp = PostParams::default();
    let (ra, rb) = tokio::join!(a.create(&pp, &la), b.create(&pp, &lb));
    let (winner, loser_err) = match (ra, rb) {
        (Ok(_), Err(e)) => ("a", e),
        (Err(e), Ok(_)) => ("b", e),
        other => panic!("exactly one create must win: {other:?}"),
    };
    let e = api_error::<Lease>(Err(loser_err), "the losing create");
    assert_eq!((e.code, e.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(e.message, "leases.coordination.k8s.io \"leader\" already exists");
    assert_eq!(holder(&a.get(LEASE).await.expect("lease")).as_deref(), Some(winner));

    // The winner renews; the other sees a live lease and stays a follower.
    let other = if winner == "a" { "b" } else { "a" };
    assert_eq!(try_acquire_or_renew(&a, winner).await, Ok(true));
    assert_eq!(try_acquire_or_renew(&b, other).await, Ok(false));
    assert_eq!(holder(&a.get(LEASE).await.expect("lease")).as_deref(), Some(winner));

    // The leader stops renewing: its lease expires. Two contenders read it at the same
    // resourceVersion and both try to take it over: one update wins, the other is a Conflict.
    let stale = MicroTime(Timestamp::now() - SignedDuration::from_secs(60));
    a.patch(LEASE, &PatchParams::default(), &Patch::Merge(json!({"spec": {"renewTime": stale}})))
        .await
        .expect("lease made stale");
    let read = a.get(LEASE).await.expect("lease");
    let take = |who: &str| {
        let mut l = read.clone();
        let spec = l.spec.as_mut().expect("spec");
        spec.holder_identity = Some(who.to_string());
        spec.acquire_time = Some(now_micro());
        spec.renew_time = Some(now_micro());
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        l
    };
    let (tc, td) = (take("c"), take("d"));
    let (rc, rd) = tokio::join!(a.replace(LEASE, &pp, &tc), b.replace(LEASE, &pp, &td));
    let (leader, loser_err) = match (rc, rd) {
        (Ok(_), Err(e)) => ("c", e),
        (Err(e), Ok(_)) => ("d", e),
        other => panic!("exactly one takeover must win: {other:?}"),
    };
    let e = api_error::<Lease>(Err(loser_err), "the losing takeover");
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        e.message,
        "Operation cannot be fulfilled on leases.coordination.k8s.io \"leader\": the object has been modified; please apply your changes to the latest version and try again"
    );
    let now = a.get(LEASE).await.expect("lease");
    assert_eq!(holder(&now).as_deref(), Some(leader));
    assert_eq!(now.spec.as_ref().and_then(|s| s.lease_transitions), Some(1));

    // Many concurrent rounds: only the holder ever succeeds, and the lease agrees.
    let follower = if leader == "c" { "d" } else { "c" };
    for round in 0..20 {
        let (rl, rf) = tokio::join!(try_acquire_or_renew(&a, leader), try_acquire_or_renew(&b, follower));
        let holders: Vec<&str> =
            [(leader, &rl), (follower, &rf)].into_iter().filter(|(_, r)| **r == Ok(true)).map(|(w, _)| w).collect();
        assert!(holders.len() <= 1, "round {round}: two leaders {holders:?}");
        assert!(!holders.contains(&follower), "round {round}: the follower took a live lease");
        if let Err(e) = &rl {
            assert_eq!(e.code, 409, "round {round}");
        }
        let l = a.get(LEASE).await.expect("lease");
        assert_eq!(holder(&l).as_deref(), Some(leader), "round {round}");
    }
    assert_eq!(a.get(LEASE).await.expect("lease").spec.and_then(|s| s.lease_transitions), Some(1));
}

// Events: the deployment controller's ScalingReplicaSet (`Scaled up replica set %s from 0 to
// %d`, sync.go) and the replicaset controller's FailedCreate (`Error creating: %v`,
// controller_utils.go CreatePods), found with involvedObject field selectors. client-go's
// recorder names an event `<object>.<hex unix nanos>` (tools/record/event.go makeEvent).
#[tokio::test]
async fn controller_events_are_found_by_involved_object() {
    let dc = DevCluster::start().await.expect("cluster starts");
    let client = dc.client();
    create_ns(&client, "capped", &[]).await;
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), "capped");
    let q: ResourceQuota = from_json(json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q"},
        "spec": {"hard": {"pods": "1"}}}));
    quotas.create(&PostParams::default(), &q).await.expect("quota");
    wait_for(&quotas, "q", "the quota status", |q| q.status.as_ref().and_then(|s| s.used.as_ref()).is_some()).await;

    let deps: Api<Deployment> = Api::namespaced(client.clone(), "capped");
    deps.create(&PostParams::default(), &deployment("web", 2, "example.com/web:v1")).await.expect("created");
    let rss: Api<ReplicaSet> = Api::namespaced(client.clone(), "capped");
    let list = wait_list(&rss, labels("app=web"), "the ReplicaSet", |l| l.len() == 1).await;
    let rs = name_of(&list[0]);

    let events: Api<Event> = Api::namespaced(client.clone(), "capped");
    let fields = "involvedObject.kind=Deployment,involvedObject.name=web,reason=ScalingReplicaSet";
    let evs =
        wait_list(&events, watcher::Config::default().fields(fields), "ScalingReplicaSet", |l| !l.is_empty()).await;
    assert_eq!(evs.len(), 1, "{}", dump(&evs));
    let ev = &evs[0];
    assert_eq!(ev.type_.as_deref(), Some("Normal"));
    assert_eq!(ev.message.as_deref(), Some(format!("Scaled up replica set {rs} from 0 to 2").as_str()));
    assert_eq!(ev.source.as_ref().and_then(|s| s.component.as_deref()), Some("deployment-controller"));
    assert_eq!(ev.involved_object.namespace.as_deref(), Some("capped"));
    assert_eq!(ev.involved_object.api_version.as_deref(), Some("apps/v1"));
    let suffix = name_of(ev).strip_prefix("web.").map(str::to_string).unwrap_or_default();
    assert!(!suffix.is_empty() && suffix.chars().all(|c| c.is_ascii_hexdigit()), "{}", name_of(ev));

    let fields = format!("involvedObject.kind=ReplicaSet,involvedObject.name={rs},reason=FailedCreate");
    let evs = wait_list(&events, watcher::Config::default().fields(&fields), "FailedCreate", |l| !l.is_empty()).await;
    let ev = &evs[0];
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    assert_eq!(ev.source.as_ref().and_then(|s| s.component.as_deref()), Some("replicaset-controller"));
    let msg = ev.message.clone().expect("message");
    let rest = msg.strip_prefix("Error creating: ").unwrap_or_else(|| panic!("{msg}"));
    let (pod, tail) = split_pod_forbidden(rest);
    assert!(is_generated_from(&pod, &rs), "{msg}");
    assert_eq!(tail, " is forbidden: exceeded quota: q, requested: pods=1, used: pods=1, limited: pods=1");

    // Selectors narrow: nothing of this kind for another name.
    let none = events
        .list(&ListParams::default().fields("involvedObject.kind=Deployment,involvedObject.name=other"))
        .await
        .expect("list");
    assert!(none.items.is_empty());
}
