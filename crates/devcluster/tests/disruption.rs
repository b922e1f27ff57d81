//! PodDisruptionBudgets and the `pods/eviction` subresource, as users meet them: the budget's
//! status as the disruption controller computes it (and `kubectl get pdb` shows it), evictions
//! with kube's `Api::<Pod>::evict` and raw requests (the exact Status bodies of
//! pkg/registry/core/pod/storage/eviction.go), and `kubectl drain`, which evicts when discovery
//! lists `pods/eviction` and retries while a budget refuses. Every wait is on a watch under a
//! timeout: no fixed sleeps.

mod support;

use devcluster::{DevCluster, Options};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, EvictParams, ListParams, Patch, PatchParams, PostParams};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::time::Duration;
use support::kubectl::Kubectl;
use support::wait::{wait_for, wait_gone, wait_list};

fn from_json<T: DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("test object deserializes")
}

/// A client as the admin that answers a 429 at once: kube 5's default client retries 429s
/// itself (up to 15 times, backing off to minutes), which hides the budget's answer.
async fn client(dc: &DevCluster) -> kube::Client {
    let kc = kube::config::Kubeconfig::from_yaml(dc.kubeconfig_yaml()).expect("kubeconfig");
    let mut config =
        kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.expect("a config from the kubeconfig");
    config.default_retry = false;
    kube::Client::try_from(config).expect("a client")
}

async fn cluster(opts: Options) -> (DevCluster, Kubectl) {
    let dc = DevCluster::start_with(opts).await.expect("devcluster starts");
    let k = Kubectl::new(&dc);
    (dc, k)
}

async fn deploy(dc: &DevCluster, name: &str, replicas: i32) -> Deployment {
    let d: Deployment = from_json(json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": "example.com/web:1"}]}}}}));
    Api::<Deployment>::namespaced(dc.client(), "default").create(&PostParams::default(), &d).await.expect("deployment")
}

async fn budget(dc: &DevCluster, name: &str, app: &str, spec: Value) -> PodDisruptionBudget {
    let mut s = json!({"selector": {"matchLabels": {"app": app}}});
    if let (Some(m), Some(extra)) = (s.as_object_mut(), spec.as_object()) {
        m.extend(extra.clone());
    }
    let p: PodDisruptionBudget = from_json(json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": name}, "spec": s}));
    Api::<PodDisruptionBudget>::namespaced(dc.client(), "default")
        .create(&PostParams::default(), &p)
        .await
        .expect("pdb")
}

/// Wait until the budget's status reads (currentHealthy, desiredHealthy, expectedPods,
/// disruptionsAllowed) for its generation.
async fn wait_status(dc: &DevCluster, name: &str, want: (i32, i32, i32, i32)) -> PodDisruptionBudget {
    let api = Api::<PodDisruptionBudget>::namespaced(dc.client(), "default");
    wait_for(&api, name, &format!("pdb {name} at {want:?}"), |p| {
        p.status.as_ref().is_some_and(|s| {
            (s.current_healthy, s.desired_healthy, s.expected_pods, s.disruptions_allowed) == want
                && s.observed_generation == p.metadata.generation
        })
    })
    .await
}

/// The running, Ready pods of an app, sorted by name.
async fn ready_pods(dc: &DevCluster, app: &str, n: usize) -> Vec<Pod> {
    let api = Api::<Pod>::namespaced(dc.client(), "default");
    let cfg = kube::runtime::watcher::Config::default().labels(&format!("app={app}"));
    let ready = |p: &Pod| {
        p.metadata.deletion_timestamp.is_none()
            && p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    };
    let mut pods =
        wait_list(&api, cfg, &format!("{n} ready pods of {app}"), |l| l.iter().filter(|p| ready(p)).count() == n).await;
    pods.retain(ready);
    pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    pods
}

fn name_of(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

/// POST an Eviction as raw JSON (optionally as another user): code, headers, body.
async fn post_eviction(
    dc: &DevCluster,
    pod: &str,
    body: Value,
    query: &str,
    as_user: Option<&str>,
) -> (http::StatusCode, http::HeaderMap, Value) {
    use http_body_util::BodyExt;
    let mut b = http::Request::builder()
        .method("POST")
        .uri(format!("/api/v1/namespaces/default/pods/{pod}/eviction{query}"))
        .header("content-type", "application/json");
    if let Some(u) = as_user {
        b = b.header("Impersonate-User", u);
    }
    let req = b.body(kube::client::Body::from(serde_json::to_vec(&body).expect("json"))).expect("request");
    let res = client(dc).await.send(req).await.expect("the eviction is answered");
    let (parts, body) = res.into_parts();
    let bytes = body.collect().await.expect("body").to_bytes();
    let v = serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("non-JSON answer ({e}): {bytes:?}"));
    (parts.status, parts.headers, v)
}

fn eviction(pod: &str) -> Value {
    json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": "default"}})
}

/// `kubectl get pdb NAME` as columns: header and the budget's row.
fn get_pdb(k: &Kubectl, name: &str) -> (Vec<String>, Vec<String>) {
    let out = k.ok(&["get", "pdb", name]);
    let mut lines = out.lines();
    let header = lines.next().expect("a header").split("  ").map(str::trim).filter(|s| !s.is_empty()).map(String::from);
    let row = lines.next().expect("a row").split_whitespace().map(String::from).collect();
    (header.collect(), row)
}

// ---- the budget's status --------------------------------------------------------------------

// pkg/controller/disruption: an integer minAvailable counts the pods found; eviction.go: a
// budget of one lets one eviction through, then answers 429 with the budget's numbers.
#[tokio::test(flavor = "multi_thread")]
async fn a_budget_of_one_lets_one_eviction_pass_and_refuses_the_next() {
    let (dc, k) = cluster(Options::default()).await;
    deploy(&dc, "web", 3).await;
    budget(&dc, "web", "web", json!({"minAvailable": 2})).await;
    let pods = ready_pods(&dc, "web", 3).await;
    let pdb = wait_status(&dc, "web", (3, 2, 3, 1)).await;
    let st = pdb.status.expect("status");
    let cond = st.conditions.as_ref().and_then(|c| c.iter().find(|c| c.type_ == "DisruptionAllowed")).expect("cond");
    assert_eq!((cond.status.as_str(), cond.reason.as_str(), cond.message.as_str()), ("True", "SufficientPods", ""));
    assert_eq!(cond.observed_generation, Some(1));
    assert!(st.disrupted_pods.as_ref().is_none_or(|d| d.is_empty()), "{:?}", st.disrupted_pods);

    let (header, row) = get_pdb(&k, "web");
    assert_eq!(header, ["NAME", "MIN AVAILABLE", "MAX UNAVAILABLE", "ALLOWED DISRUPTIONS", "AGE"]);
    assert_eq!(row[..4], ["web", "2", "N/A", "1"]);

    // Replacements of evicted pods stay Pending on the cordoned node: the budget stays spent.
    k.ok(&["cordon", "devcluster-node-1"]);
    let api = Api::<Pod>::namespaced(client(&dc).await, "default");
    let first = name_of(&pods[0]);
    let uid = pods[0].metadata.uid.clone().unwrap_or_default();
    api.evict(&first, &EvictParams::default()).await.expect("the first eviction passes");
    wait_gone(&api, &first, &uid, "the evicted pod").await;
    wait_status(&dc, "web", (2, 2, 3, 0)).await;
    let (_, row) = get_pdb(&k, "web");
    assert_eq!(row[..4], ["web", "2", "N/A", "0"]);

    // kube-rs sees the 429 and its message.
    let err = api.evict(&name_of(&pods[1]), &EvictParams::default()).await.expect_err("the second is refused");
    match err {
        kube::Error::Api(s) => {
            assert_eq!((s.code, s.reason.as_str()), (429, "TooManyRequests"));
            assert_eq!(s.message, "Cannot evict pod as it would violate the pod's disruption budget.");
        }
        other => panic!("not an API error: {other:?}"),
    }
    // The whole Status, as the apiserver writes it.
    let (code, headers, body) = post_eviction(&dc, &name_of(&pods[1]), eviction(&name_of(&pods[1])), "", None).await;
    assert_eq!(code, 429);
    assert!(headers.get("retry-after").is_none(), "{headers:?}");
    assert_eq!(
        body,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "Cannot evict pod as it would violate the pod's disruption budget.",
            "reason": "TooManyRequests",
            "details": {"causes": [{"reason": "DisruptionBudget",
                "message": "The disruption budget web needs 2 healthy pods and has 2 currently"}]},
            "code": 429})
    );
    assert!(api.get_opt(&name_of(&pods[1])).await.expect("get").is_some(), "a refused eviction deletes nothing");
    let cond = wait_status(&dc, "web", (2, 2, 3, 0)).await.status.and_then(|s| s.conditions).unwrap_or_default();
    assert!(
        cond.iter().any(|c| c.type_ == "DisruptionAllowed" && c.status == "False" && c.reason == "InsufficientPods")
    );

    // A Pending pod (the replacement) is evicted without asking the budget.
    let pending =
        wait_list(&api, kube::runtime::watcher::Config::default().labels("app=web"), "a pending replacement", |l| {
            l.iter().any(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending"))
        })
        .await
        .into_iter()
        .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending"))
        .expect("pending pod");
    let (code, _, body) = post_eviction(&dc, &name_of(&pending), eviction(&name_of(&pending)), "", None).await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(body, json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}));
}

// eviction.go: a second budget over the same pod is a 500; a name that differs from the URL's
// is a 400; a dry run deletes nothing and spends nothing; the deleted pod is marked
// DisruptionTarget first.
#[tokio::test(flavor = "multi_thread")]
async fn evictions_check_their_body_and_refuse_overlapping_budgets() {
    let (dc, _k) = cluster(Options::default()).await;
    deploy(&dc, "api", 2).await;
    budget(&dc, "api", "api", json!({"maxUnavailable": 1})).await;
    let pods = ready_pods(&dc, "api", 2).await;
    wait_status(&dc, "api", (2, 1, 2, 1)).await;
    let p = name_of(&pods[0]);

    let (code, _, body) = post_eviction(&dc, &p, eviction("other"), "", None).await;
    assert_eq!(
        (code.as_u16(), body["message"].as_str()),
        (400, Some("name in URL does not match name in Eviction object"))
    );
    let (code, _, body) =
        post_eviction(&dc, &p, json!({"apiVersion": "v1", "kind": "Eviction", "metadata": {"name": p}}), "", None)
            .await;
    assert_eq!(code, 400);
    assert_eq!(body["message"], "the API version in the data (v1) does not match the expected API version (policy/v1)");
    let (code, _, body) = post_eviction(&dc, "nope", eviction("nope"), "", None).await;
    assert_eq!((code.as_u16(), body["message"].as_str()), (404, Some("pods \"nope\" not found")));

    // A dry run: answered as a success, nothing changes.
    let (code, _, _) = post_eviction(&dc, &p, eviction(&p), "?dryRun=All", None).await;
    assert_eq!(code, 201);
    let api = Api::<Pod>::namespaced(dc.client(), "default");
    let still = api.get(&p).await.expect("the pod stays");
    assert!(still.metadata.deletion_timestamp.is_none());
    let pdb = Api::<PodDisruptionBudget>::namespaced(dc.client(), "default").get("api").await.expect("pdb");
    assert_eq!(pdb.status.as_ref().map(|s| s.disruptions_allowed), Some(1), "a dry run spends nothing");
    let mut both = eviction(&p);
    both["deleteOptions"] = json!({"dryRun": ["All"]});
    let (code, _, _) = post_eviction(&dc, &p, both, "", None).await;
    assert_eq!(code, 201);
    assert!(api.get(&p).await.expect("the pod stays").metadata.deletion_timestamp.is_none());

    // Two budgets over one pod.
    budget(&dc, "api-2", "api", json!({"minAvailable": 0})).await;
    let (code, _, body) = post_eviction(&dc, &p, eviction(&p), "", None).await;
    assert_eq!(code, 500);
    assert_eq!(
        body,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            "code": 500})
    );
    Api::<PodDisruptionBudget>::namespaced(dc.client(), "default")
        .delete("api-2", &Default::default())
        .await
        .expect("delete the second budget");

    // Watch the pod: the eviction marks it DisruptionTarget before deleting it.
    let uid = pods[0].metadata.uid.clone().unwrap_or_default();
    let rv = api.get(&p).await.expect("the pod").metadata.resource_version.unwrap_or_default();
    let wp = kube::api::WatchParams::default().fields(&format!("metadata.name={p}"));
    let mut events = api.watch(&wp, &rv).await.expect("a watch of the pod").boxed();
    let (code, _, _) = post_eviction(&dc, &p, eviction(&p), "", None).await;
    assert_eq!(code, 201);
    let marked = tokio::time::timeout(support::wait::WAIT, async {
        while let Some(ev) = events.try_next().await.expect("the watch runs") {
            if let kube::api::WatchEvent::Modified(m) = ev {
                let conds = m.status.and_then(|s| s.conditions).unwrap_or_default();
                if let Some(c) = conds.into_iter().find(|c| c.type_ == "DisruptionTarget") {
                    return Some(c);
                }
            }
        }
        None
    })
    .await
    .expect("the pod is marked in time")
    .expect("a DisruptionTarget condition before the pod goes");
    assert_eq!(
        (marked.status.as_str(), marked.reason.as_deref(), marked.message.as_deref()),
        ("True", Some("EvictionByEvictionAPI"), Some("Eviction API: evicting"))
    );
    wait_gone(&api, &p, &uid, "the evicted pod").await;

    // The eviction's deleteOptions reach the delete: a wrong uid precondition is a conflict
    // (upstream spends the budget first, as here: this is the test's last eviction).
    wait_status(&dc, "api", (2, 1, 2, 1)).await;
    let q = name_of(&pods[1]);
    let mut pinned = eviction(&q);
    pinned["deleteOptions"] = json!({"preconditions": {"uid": "not-the-uid"}});
    let (code, _, body) = post_eviction(&dc, &q, pinned, "", None).await;
    assert_eq!(code, 409, "{body}");
    assert!(
        body["message"].as_str().is_some_and(|m| m.contains("the UID in the precondition (not-the-uid)")),
        "{body}"
    );
    assert!(api.get(&q).await.expect("the pod stays").metadata.deletion_timestamp.is_none());
}

// Two evictions racing for a budget of one: the status update is pinned to the version read,
// so exactly one passes.
#[tokio::test(flavor = "multi_thread")]
async fn two_concurrent_evictions_never_both_pass_a_budget_of_one() {
    let (dc, k) = cluster(Options::default()).await;
    deploy(&dc, "race", 3).await;
    budget(&dc, "race", "race", json!({"minAvailable": 2})).await;
    let pods = ready_pods(&dc, "race", 3).await;
    wait_status(&dc, "race", (3, 2, 3, 1)).await;
    k.ok(&["cordon", "devcluster-node-1"]);
    let api = Api::<Pod>::namespaced(client(&dc).await, "default");
    let (a, b) = (name_of(&pods[0]), name_of(&pods[1]));
    let ep = EvictParams::default();
    let (ra, rb) = tokio::join!(api.evict(&a, &ep), api.evict(&b, &ep));
    let refused = |r: &Result<_, kube::Error>| matches!(r, Err(kube::Error::Api(s)) if s.code == 429);
    assert!((ra.is_ok() && refused(&rb)) || (rb.is_ok() && refused(&ra)), "exactly one eviction passes: {ra:?} {rb:?}");
}

// pkg/controller/disruption getExpectedScale: maxUnavailable (and percentages) count the
// controllers' replicas; a controller without a scale subresource fails the budget safe.
#[tokio::test(flavor = "multi_thread")]
async fn max_unavailable_percentages_count_the_controllers_scale() {
    let (dc, k) = cluster(Options::default()).await;
    deploy(&dc, "pct", 4).await;
    budget(&dc, "pct", "pct", json!({"maxUnavailable": "50%"})).await;
    budget(&dc, "pct-min", "pct", json!({"minAvailable": "30%"})).await;
    ready_pods(&dc, "pct", 4).await;
    wait_status(&dc, "pct", (4, 2, 4, 2)).await;
    // 30% of 4 rounds up to 2.
    wait_status(&dc, "pct-min", (4, 2, 4, 2)).await;
    let (_, row) = get_pdb(&k, "pct");
    assert_eq!(row[..4], ["pct", "N/A", "50%", "2"]);
    let (_, row) = get_pdb(&k, "pct-min");
    assert_eq!(row[..4], ["pct-min", "30%", "N/A", "2"]);

    // Scaling the Deployment changes what is expected: 50% of 3 unavailable rounds up to 2.
    k.ok(&["scale", "deployment/pct", "--replicas=3"]);
    wait_status(&dc, "pct", (3, 1, 3, 2)).await;
    wait_status(&dc, "pct-min", (3, 1, 3, 2)).await;

    // An integer maxUnavailable also reads the scale.
    budget(&dc, "pct-one", "pct", json!({"maxUnavailable": 1})).await;
    wait_status(&dc, "pct-one", (3, 2, 3, 1)).await;

    // Pods owned by a Job: no scale subresource, SyncFailed with upstream's message.
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "batch"},
        "spec": {"template": {"metadata": {"labels": {"app": "batch"}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "example.com/job:1"}]}}}});
    Api::<k8s_openapi::api::batch::v1::Job>::namespaced(dc.client(), "default")
        .create(&PostParams::default(), &from_json(job))
        .await
        .expect("job");
    budget(&dc, "batch", "batch", json!({"maxUnavailable": 1})).await;
    let api = Api::<PodDisruptionBudget>::namespaced(dc.client(), "default");
    let failed = wait_for(&api, "batch", "a SyncFailed budget", |p| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.reason == "SyncFailed"))
    })
    .await;
    let st = failed.status.expect("status");
    let c = st.conditions.unwrap_or_default().into_iter().find(|c| c.type_ == "DisruptionAllowed").expect("cond");
    assert_eq!(
        (c.status.as_str(), c.message.as_str(), st.disruptions_allowed),
        ("False", "jobs.batch does not implement the scale subresource", 0)
    );
}

// Authorization: an eviction is a `create` of `pods/eviction`.
#[tokio::test(flavor = "multi_thread")]
async fn an_eviction_needs_create_on_pods_eviction() {
    let (dc, k) = cluster(Options::default()).await;
    deploy(&dc, "rbac", 1).await;
    let pods = ready_pods(&dc, "rbac", 1).await;
    let p = name_of(&pods[0]);
    k.ok(&["create", "role", "pod-reader", "--verb=get,list,delete", "--resource=pods"]);
    k.ok(&["create", "rolebinding", "alice", "--role=pod-reader", "--user=alice"]);
    let (code, _, body) = post_eviction(&dc, &p, eviction(&p), "", Some("alice")).await;
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body["message"],
        format!(
            "pods \"{p}\" is forbidden: User \"alice\" cannot create resource \"pods/eviction\" in API group \"\" in the namespace \"default\""
        )
    );
    assert_eq!(k.run(&["auth", "can-i", "create", "pods/eviction", "--as=alice"]).status.code(), Some(1));
    k.ok(&["create", "role", "evicter", "--verb=create", "--resource=pods/eviction"]);
    k.ok(&["create", "rolebinding", "alice-evicts", "--role=evicter", "--user=alice"]);
    let (code, _, body) = post_eviction(&dc, &p, eviction(&p), "", Some("alice")).await;
    assert_eq!(code, 201, "{body}");
}

// kubectl drain evicts (discovery lists pods/eviction as policy/v1 Eviction), retries a 429
// every 5 seconds and reports why; `--disable-eviction` deletes instead, budget or not.
#[tokio::test(flavor = "multi_thread")]
async fn kubectl_drain_respects_the_budget_unless_eviction_is_disabled() {
    let (dc, k) = cluster(Options::default()).await;
    deploy(&dc, "db", 2).await;
    budget(&dc, "db", "db", json!({"minAvailable": 2})).await;
    let pods = ready_pods(&dc, "db", 2).await;
    wait_status(&dc, "db", (2, 2, 2, 0)).await;

    let out = k.run(&["drain", "devcluster-node-1", "--ignore-daemonsets", "--timeout=7s"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "drain cannot finish: {stderr}");
    assert!(
        stderr.contains("(will retry after 5s): Cannot evict pod as it would violate the pod's disruption budget."),
        "{stderr}"
    );
    assert!(stderr.contains("global timeout reached: 7s"), "{stderr}");
    let api = Api::<Pod>::namespaced(dc.client(), "default");
    for p in &pods {
        assert!(api.get(&name_of(p)).await.expect("the pod stays").metadata.deletion_timestamp.is_none());
    }

    let (stdout, _) =
        k.ok2(&["drain", "devcluster-node-1", "--ignore-daemonsets", "--disable-eviction", "--timeout=30s"]);
    for p in &pods {
        assert!(stdout.contains(&format!("pod/{} deleted", name_of(p))), "{stdout}");
        assert!(api.get_opt(&name_of(p)).await.expect("get").is_none_or(|x| x.metadata.uid != p.metadata.uid));
    }
    assert!(stdout.contains("node/devcluster-node-1 drained"), "{stdout}");
}

// A drain that a budget slows down but does not stop: the evicted pod's replacement starts on
// the other node, the budget allows the next eviction, and the drain finishes.
#[tokio::test(flavor = "multi_thread")]
async fn kubectl_drain_waits_for_the_budget_and_finishes() {
    let (dc, k) = cluster(Options { nodes: 2, pod_startup: Duration::from_secs(2), ..Default::default() }).await;
    deploy(&dc, "app", 3).await;
    budget(&dc, "app", "app", json!({"minAvailable": 2})).await;
    let pods = ready_pods(&dc, "app", 3).await;
    wait_status(&dc, "app", (3, 2, 3, 1)).await;
    let node_of = |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
    let busiest = ["devcluster-node-1", "devcluster-node-2"]
        .into_iter()
        .max_by_key(|n| pods.iter().filter(|p| node_of(p) == *n).count())
        .expect("a node");
    assert_eq!(pods.iter().filter(|p| node_of(p) == busiest).count(), 2, "3 pods over 2 nodes");

    let (stdout, stderr) = k.ok2(&["drain", busiest, "--ignore-daemonsets", "--timeout=60s"]);
    assert!(
        stderr.contains("Cannot evict pod as it would violate the pod's disruption budget."),
        "the second eviction waited for the first pod's replacement: {stderr}"
    );
    assert!(stdout.contains(&format!("node/{busiest} drained")), "{stdout}");
    assert_eq!(stdout.matches("evicted").count(), 2, "{stdout}");
    let left = Api::<Pod>::namespaced(dc.client(), "default").list(&ListParams::default().labels("app=app")).await;
    assert!(left.expect("list").items.iter().all(|p| node_of(p) != busiest));
}

// disruptedPods: an entry the eviction handler wrote counts the pod out until it is deleted,
// or until 2 minutes of the controllers' clock have passed.
#[tokio::test(flavor = "multi_thread")]
async fn disrupted_pods_expire_after_two_minutes() {
    let (dc, _k) = cluster(Options::default()).await;
    deploy(&dc, "slow", 2).await;
    budget(&dc, "slow", "slow", json!({"maxUnavailable": 1})).await;
    let pods = ready_pods(&dc, "slow", 2).await;
    wait_status(&dc, "slow", (2, 1, 2, 1)).await;
    // As if an eviction had been granted for a pod that never went.
    let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let api = Api::<PodDisruptionBudget>::namespaced(dc.client(), "default");
    let patch = json!({"status": {"disruptedPods": {name_of(&pods[0]): now}, "disruptionsAllowed": 0}});
    api.patch_status("slow", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("status");
    let held = wait_status(&dc, "slow", (1, 1, 2, 0)).await;
    assert!(held.status.and_then(|s| s.disrupted_pods).is_some_and(|d| d.contains_key(&name_of(&pods[0]))));

    dc.advance_clock(Duration::from_secs(121));
    let freed = wait_status(&dc, "slow", (2, 1, 2, 1)).await;
    assert!(freed.status.and_then(|s| s.disrupted_pods).is_none_or(|d| d.is_empty()));
    let events = Api::<k8s_openapi::api::core::v1::Event>::namespaced(dc.client(), "default")
        .list(&ListParams::default().fields(&format!("involvedObject.name={}", name_of(&pods[0]))))
        .await
        .expect("events");
    assert!(
        events.items.iter().any(|e| e.reason.as_deref() == Some("NotDeleted")),
        "a NotDeleted event: {:?}",
        events.items
    );
}

// eviction.go: a running pod that is not Ready may go without spending the budget only when the
// budget is met (IfHealthyBudget, the default) or its unhealthyPodEvictionPolicy is AlwaysAllow.
#[tokio::test(flavor = "multi_thread")]
async fn unready_pods_follow_the_unhealthy_pod_eviction_policy() {
    let faults = vec!["example.com/web:1=unready".parse().expect("a fault rule")];
    let (dc, _k) = cluster(Options { faults, ..Default::default() }).await;
    deploy(&dc, "sick", 2).await;
    budget(&dc, "sick", "sick", json!({"minAvailable": 1})).await;
    let api = Api::<Pod>::namespaced(dc.client(), "default");
    let cfg = kube::runtime::watcher::Config::default().labels("app=sick");
    let running = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
    let pods = wait_list(&api, cfg, "2 running, unready pods", |l| l.iter().filter(|p| running(p)).count() == 2).await;
    wait_status(&dc, "sick", (0, 1, 2, 0)).await;
    let p = name_of(&pods[0]);
    let (code, _, body) = post_eviction(&dc, &p, eviction(&p), "", None).await;
    assert_eq!(code, 429, "{body}");
    assert_eq!(
        body["details"]["causes"][0]["message"],
        "The disruption budget sick needs 1 healthy pods and has 0 currently"
    );

    let pdbs = Api::<PodDisruptionBudget>::namespaced(dc.client(), "default");
    let patch = json!({"spec": {"unhealthyPodEvictionPolicy": "AlwaysAllow"}});
    pdbs.patch("sick", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patch the budget");
    wait_status(&dc, "sick", (0, 1, 2, 0)).await;
    let (code, _, body) = post_eviction(&dc, &p, eviction(&p), "", None).await;
    assert_eq!(code, 201, "{body}");
    let after = pdbs.get("sick").await.expect("pdb").status.expect("status");
    assert!(after.disrupted_pods.is_none_or(|d| !d.contains_key(&p)), "an unhealthy pod spends nothing");
}
