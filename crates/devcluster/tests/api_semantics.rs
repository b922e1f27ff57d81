//! API semantics a client relies on, checked through kube's client and raw HTTP against
//! devcluster exactly as one would check them against a real kube-apiserver: list and watch
//! options, write preconditions, the four patch types, metadata rules, subresources, defaulting
//! and validation, content negotiation, and the two Event APIs.
//!
//! Where the expected answer is not obvious, the comment names the upstream source it comes from
//! (kubernetes/kubernetes, staging/src/k8s.io/...).

use devcluster::{DevCluster, Options};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent, Namespace, Node, Pod, Service};
use k8s_openapi::api::events::v1::Event as EventsV1Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Resource;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, Preconditions,
    WatchEvent, WatchParams,
};
use kube::core::Status;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// helpers

const WAIT: Duration = Duration::from_secs(20);

fn cm(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "data": data.iter().map(|(k, v)| (k.to_string(), Value::from(*v))).collect::<serde_json::Map<_, _>>(),
    }))
    .expect("a ConfigMap literal")
}

fn labelled_cm(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    let mut c = cm(name, &[("k", "v")]);
    c.metadata.labels = Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
    c
}

fn pod(name: &str, node: Option<&str>, labels: &[(&str, &str)]) -> Pod {
    let mut p: Pod = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]},
    }))
    .expect("a Pod literal");
    if let Some(n) = node {
        p.spec.as_mut().expect("spec").node_name = Some(n.to_string());
    }
    p.metadata.labels = Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
    p
}

fn deployment(name: &str, replicas: i32) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]},
            },
        },
    }))
    .expect("a Deployment literal")
}

fn rv_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.resource_version.clone().expect("a stored object has a resourceVersion")
}

fn rv_num(rv: &str) -> u64 {
    rv.parse().unwrap_or_else(|e| panic!("resourceVersion {rv:?} is an integer here: {e}"))
}

fn names<K: Resource>(items: &[K]) -> BTreeSet<String> {
    items.iter().filter_map(|i| i.meta().name.clone()).collect()
}

fn set(v: &[&str]) -> BTreeSet<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// The Status of a failed call; anything else is a test failure.
fn status(res: Result<impl std::fmt::Debug, kube::Error>) -> Status {
    match res {
        Err(kube::Error::Api(s)) => *s,
        other => panic!("expected an API error Status, got {other:?}"),
    }
}

fn assert_status(s: &Status, code: u16, reason: &str, message: &str) {
    assert_eq!((s.code, s.reason.as_str(), s.message.as_str()), (code, reason, message), "{s:?}");
}

/// A raw request through the client's authenticated transport: status, headers, body.
async fn raw(
    client: &kube::Client,
    method: http::Method,
    uri: &str,
    accept: Option<&str>,
    body: Option<(&str, Vec<u8>)>,
) -> (http::StatusCode, http::HeaderMap, Vec<u8>) {
    use http_body_util::BodyExt;
    let mut b = http::Request::builder().method(method).uri(uri);
    if let Some(a) = accept {
        b = b.header(http::header::ACCEPT, a);
    }
    let bytes = match body {
        Some((ct, bytes)) => {
            b = b.header(http::header::CONTENT_TYPE, ct);
            bytes
        }
        None => vec![],
    };
    let req = b.body(kube::client::Body::from(bytes)).expect("the request builds");
    let res = client.send(req).await.unwrap_or_else(|e| panic!("sending {uri}: {e}"));
    let (parts, body) = res.into_parts();
    let bytes = body.collect().await.expect("the response body is read").to_bytes().to_vec();
    (parts.status, parts.headers, bytes)
}

async fn raw_json(client: &kube::Client, uri: &str, accept: &str) -> (http::StatusCode, Value) {
    let (code, _, body) = raw(client, http::Method::GET, uri, Some(accept), None).await;
    let v = serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("GET {uri} answered non-JSON ({e}): {}", String::from_utf8_lossy(&body)));
    (code, v)
}

fn content_type(h: &http::HeaderMap) -> String {
    h.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_string()
}

fn keys(v: &Value) -> Vec<String> {
    v.as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default()
}

/// Every key of `got` appears in `order`, and in the same relative order.
fn assert_keys_in_order(got: &[String], order: &[&str], what: &str) {
    let mut last = None;
    for k in got {
        let pos = order.iter().position(|o| o == k).unwrap_or_else(|| panic!("{what}: unexpected key {k} in {got:?}"));
        if let Some(l) = last {
            assert!(pos > l, "{what}: keys {got:?} are not in the order {order:?}");
        }
        last = Some(pos);
    }
}

/// Collect a watch stream until it ends (the server closed it), bounded by `WAIT`.
async fn drain<K: Clone + std::fmt::Debug>(
    stream: impl futures::Stream<Item = Result<WatchEvent<K>, kube::Error>>,
) -> Vec<WatchEvent<K>> {
    tokio::time::timeout(WAIT, stream.try_collect::<Vec<_>>())
        .await
        .expect("the server ends the watch when timeoutSeconds is up")
        .expect("the watch stream is well formed")
}

async fn next_event<K: Clone + std::fmt::Debug>(
    s: &mut (impl futures::Stream<Item = Result<WatchEvent<K>, kube::Error>> + Unpin),
) -> WatchEvent<K> {
    tokio::time::timeout(WAIT, s.try_next())
        .await
        .expect("a watch event arrives in time")
        .expect("the watch stream is well formed")
        .expect("the watch stream is still open")
}

// ---------------------------------------------------------------------------------------------
// 1. lists: resourceVersion, resourceVersion=0, field and label selectors

#[tokio::test]
async fn lists_carry_a_resource_version_and_accept_resource_version_zero() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let made = api.create(&PostParams::default(), &cm("listed", &[])).await.expect("create");

    let list = api.list(&ListParams::default()).await.expect("list");
    let list_rv = list.metadata.resource_version.clone().expect("a list has metadata.resourceVersion");
    assert!(rv_num(&list_rv) >= rv_num(&rv_of(&made.metadata)), "list rv {list_rv} is older than a write it shows");
    assert!(names(&list.items).contains("listed"));

    // resourceVersion=0: "any version", served from the cache on a real server.
    let any = api.list(&ListParams::default().match_any()).await.expect("list at resourceVersion=0");
    assert!(any.metadata.resource_version.as_deref().is_some_and(|rv| !rv.is_empty()));
    assert!(names(&any.items).contains("kube-root-ca.crt"), "{:?}", names(&any.items));
    let (code, body) =
        raw_json(&dc.client(), "/api/v1/namespaces/default/configmaps?resourceVersion=0", "application/json").await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["kind"], "ConfigMapList");
    assert!(body["metadata"]["resourceVersion"].as_str().is_some_and(|rv| !rv.is_empty()), "{body}");
}

#[tokio::test]
async fn exact_match_at_resource_version_zero_is_refused() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    // ValidateListOptions (apimachinery/pkg/apis/meta/internalversion/validation): Exact at 0 is
    // refused, wrapped by the list handler in NewInvalid(ListOptions.meta.k8s.io, "").
    let req = http::Request::get("/api/v1/namespaces/default/configmaps?resourceVersion=0&resourceVersionMatch=Exact")
        .body(vec![])
        .expect("request");
    let err = status(dc.client().request_text(req).await);
    assert_status(
        &err,
        422,
        "Invalid",
        "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
    );
}

#[tokio::test]
async fn metadata_name_and_namespace_field_selectors_work_on_every_kind() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let nss: Api<Namespace> = Api::all(dc.client());
    nss.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "fs-other"}})).expect("ns"))
        .await
        .expect("create namespace");
    for ns in ["default", "fs-other"] {
        let api: Api<ConfigMap> = Api::namespaced(dc.client(), ns);
        api.create(&PostParams::default(), &cm("shared", &[])).await.expect("create");
    }
    let all: Api<ConfigMap> = Api::all(dc.client());
    let both = all.list(&ListParams::default().fields("metadata.name=shared")).await.expect("list");
    let got: BTreeSet<_> = both.items.iter().filter_map(|c| c.metadata.namespace.clone()).collect();
    assert_eq!(got, set(&["default", "fs-other"]));
    let one = all
        .list(&ListParams::default().fields("metadata.name=shared,metadata.namespace=fs-other"))
        .await
        .expect("list");
    assert_eq!(one.items.len(), 1);
    assert_eq!(one.items[0].metadata.namespace.as_deref(), Some("fs-other"));
    let not_default = all
        .list(&ListParams::default().fields("metadata.name==shared,metadata.namespace!=default"))
        .await
        .expect("list");
    assert_eq!(not_default.items.len(), 1);

    // Cluster-scoped kinds: metadata.name.
    let ns_named = nss.list(&ListParams::default().fields("metadata.name=fs-other")).await.expect("list namespaces");
    assert_eq!(names(&ns_named.items), set(&["fs-other"]));
}

#[tokio::test]
async fn pod_field_selectors_status_phase_and_spec_node_name() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let pods: Api<Pod> = Api::default_namespaced(dc.client());
    pods.create(&PostParams::default(), &pod("fs-a", Some("fs-node-a"), &[("suite", "fs")])).await.expect("create a");
    pods.create(&PostParams::default(), &pod("fs-b", Some("fs-node-b"), &[("suite", "fs")])).await.expect("create b");
    // Terminal phases, which nothing moves a pod out of.
    for (name, phase) in [("fs-a", "Succeeded"), ("fs-b", "Failed")] {
        pods.patch_status(name, &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": phase}})))
            .await
            .unwrap_or_else(|e| panic!("setting {name} to {phase}: {e}"));
    }
    let sel = |f: &str| ListParams::default().labels("suite=fs").fields(f);
    assert_eq!(names(&pods.list(&sel("spec.nodeName=fs-node-a")).await.expect("list").items), set(&["fs-a"]));
    assert_eq!(names(&pods.list(&sel("spec.nodeName!=fs-node-a")).await.expect("list").items), set(&["fs-b"]));
    assert_eq!(names(&pods.list(&sel("status.phase=Succeeded")).await.expect("list").items), set(&["fs-a"]));
    assert_eq!(names(&pods.list(&sel("status.phase=Failed")).await.expect("list").items), set(&["fs-b"]));
    assert_eq!(
        names(&pods.list(&sel("status.phase=Failed,spec.nodeName=fs-node-a")).await.expect("list").items),
        set(&[])
    );
    assert_eq!(
        names(&pods.list(&sel("metadata.namespace=default")).await.expect("list").items),
        set(&["fs-a", "fs-b"])
    );

    // A label the Pod conversion does not list: fmt.Errorf("field label not supported: %s")
    // turned into a 400 by the list handler (endpoints/handlers/get.go).
    let err = status(pods.list(&ListParams::default().fields("spec.containers=x")).await);
    assert_status(&err, 400, "BadRequest", "field label not supported: spec.containers");
}

#[tokio::test]
async fn pod_field_selector_spec_host_means_spec_node_name() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let pods: Api<Pod> = Api::default_namespaced(dc.client());
    pods.create(&PostParams::default(), &pod("host-a", Some("fs-node-a"), &[("suite", "host")])).await.expect("create");
    pods.create(&PostParams::default(), &pod("host-b", Some("fs-node-b"), &[("suite", "host")])).await.expect("create");
    // pkg/apis/core/v1/conversion.go: case "spec.host": return "spec.nodeName", value, nil
    let lp = ListParams::default().labels("suite=host").fields("spec.host=fs-node-b");
    assert_eq!(names(&pods.list(&lp).await.expect("list with spec.host").items), set(&["host-b"]));
}

#[tokio::test]
async fn node_field_selector_spec_unschedulable() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let nodes: Api<Node> = Api::all(dc.client());
    let node = |name: &str, unschedulable: bool| -> Node {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"unschedulable": unschedulable}}))
            .expect("a Node literal")
    };
    nodes.create(&PostParams::default(), &node("fs-cordoned", true)).await.expect("create cordoned node");
    nodes.create(&PostParams::default(), &node("fs-open", false)).await.expect("create open node");
    let cordoned =
        names(&nodes.list(&ListParams::default().fields("spec.unschedulable=true")).await.expect("list").items);
    assert!(cordoned.contains("fs-cordoned") && !cordoned.contains("fs-open"), "{cordoned:?}");
    let open = names(&nodes.list(&ListParams::default().fields("spec.unschedulable=false")).await.expect("list").items);
    assert!(open.contains("fs-open") && !open.contains("fs-cordoned"), "{open:?}");
    let by_name = names(&nodes.list(&ListParams::default().fields("metadata.name=fs-open")).await.expect("list").items);
    assert_eq!(by_name, set(&["fs-open"]));
    let err = status(nodes.list(&ListParams::default().fields("spec.podCIDR=10.0.0.0/24")).await);
    assert_status(&err, 400, "BadRequest", "field label not supported: spec.podCIDR");
}

#[tokio::test]
async fn node_field_selector_refuses_metadata_namespace() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let nodes: Api<Node> = Api::all(dc.client());
    // pkg/apis/core/v1/conversion.go: the Node conversion accepts only metadata.name and
    // spec.unschedulable.
    let err = status(nodes.list(&ListParams::default().fields("metadata.namespace=default")).await);
    assert_status(&err, 400, "BadRequest", "field label not supported: metadata.namespace");
}

#[tokio::test]
async fn event_field_selectors_on_the_involved_object() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let events: Api<CoreEvent> = Api::default_namespaced(dc.client());
    for (name, kind, target) in
        [("ev-1", "Pod", "ev-target"), ("ev-2", "ConfigMap", "ev-target"), ("ev-3", "Pod", "ev-other")]
    {
        events
            .create(&PostParams::default(), &core_event(name, kind, target, "Tested", "a message"))
            .await
            .expect("create");
    }
    let pick = |f: &str| ListParams::default().fields(f);
    assert_eq!(
        names(&events.list(&pick("involvedObject.name=ev-target")).await.expect("list").items),
        set(&["ev-1", "ev-2"])
    );
    assert_eq!(
        names(&events.list(&pick("involvedObject.name=ev-target,involvedObject.kind=Pod")).await.expect("list").items),
        set(&["ev-1"])
    );
    assert_eq!(
        names(
            &events
                .list(&pick("involvedObject.namespace=default,involvedObject.name=ev-other"))
                .await
                .expect("list")
                .items
        ),
        set(&["ev-3"])
    );
    assert_eq!(
        names(&events.list(&pick("involvedObject.kind=ConfigMap,reason=Tested")).await.expect("list").items),
        set(&["ev-2"])
    );
    let err = status(events.list(&pick("message=a message")).await);
    assert_status(&err, 400, "BadRequest", "field label not supported: message");
}

#[tokio::test]
async fn field_labels_of_kinds_without_a_conversion_get_the_default_message() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let cms: Api<ConfigMap> = Api::default_namespaced(dc.client());
    // ConfigMap registers no conversion, so runtime.DefaultMetaV1FieldSelectorConversion answers
    // (apimachinery/pkg/runtime/conversion.go; the documented `kubectl get ingress
    // --field-selector foo.bar=baz` error on kubernetes.io shows the same text).
    let err = status(cms.list(&ListParams::default().fields("data.k=v")).await);
    assert_status(
        &err,
        400,
        "BadRequest",
        "\"data.k\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"",
    );
}

#[tokio::test]
async fn unknown_field_labels_and_bad_label_selectors_are_400() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let cms: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let err = status(cms.list(&ListParams::default().fields("data.k=v")).await);
    assert_eq!((err.code, err.reason.as_str()), (400, "BadRequest"), "{err:?}");
    // The same through a watch.
    let err = status(cms.watch(&WatchParams::default().fields("data.k=v").timeout(1), "0").await.map(|_| ()));
    assert_eq!((err.code, err.reason.as_str()), (400, "BadRequest"), "{err:?}");

    // labels.Parse fails on an invalid key: "unable to parse requirement: ..." as a 400.
    let err = status(cms.list(&ListParams::default().labels("foo+bar=baz")).await);
    assert_eq!((err.code, err.reason.as_str()), (400, "BadRequest"), "{err:?}");
    assert!(err.message.starts_with("unable to parse requirement: "), "{}", err.message);
    assert!(err.message.contains("\"foo+bar\""), "{}", err.message);
    assert!(err.message.contains("name part must consist of alphanumeric characters"), "{}", err.message);
}

// ---------------------------------------------------------------------------------------------
// 2. watch: bookmarks, timeoutSeconds, sendInitialEvents, label-selector transitions

#[tokio::test]
async fn watch_sends_bookmarks_only_when_allowed() {
    let dc = DevCluster::start_with(Options { bookmark_interval: Duration::from_millis(100), ..Default::default() })
        .await
        .expect("devcluster starts");
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let made = api.create(&PostParams::default(), &cm("bm", &[])).await.expect("create");
    let rv = rv_of(&made.metadata);

    // kube's WatchParams ask for bookmarks by default (allowWatchBookmarks=true).
    let mut s = api.watch(&WatchParams::default().timeout(10), &rv).await.expect("watch").boxed();
    let bookmark = loop {
        match next_event(&mut s).await {
            WatchEvent::Bookmark(b) => break b,
            WatchEvent::Error(e) => panic!("watch error {e:?}"),
            _ => {}
        }
    };
    // A bookmark is an object of the watched kind carrying only a resourceVersion.
    assert_eq!((bookmark.types.api_version.as_str(), bookmark.types.kind.as_str()), ("v1", "ConfigMap"));
    assert!(rv_num(&bookmark.metadata.resource_version) >= rv_num(&rv));
    assert!(!bookmark.metadata.annotations.contains_key("k8s.io/initial-events-end"));
    drop(s);

    // Without allowWatchBookmarks: none, however long the watch lasts.
    let s = api.watch(&WatchParams::default().disable_bookmarks().timeout(1), &rv).await.expect("watch");
    let events = drain(s).await;
    assert!(events.iter().all(|e| !matches!(e, WatchEvent::Bookmark(_))), "{events:?}");
}

#[tokio::test]
async fn watch_timeout_seconds_ends_the_stream() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let made = api.create(&PostParams::default(), &cm("to", &[])).await.expect("create");
    let started = Instant::now();
    let s = api.watch(&WatchParams::default().timeout(1), &rv_of(&made.metadata)).await.expect("watch");
    let events = drain(s).await;
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(900), "the stream ended after {took:?}, before timeoutSeconds=1");
    assert!(events.iter().all(|e| matches!(e, WatchEvent::Bookmark(_))), "nothing changed, yet {events:?}");
}

#[tokio::test]
async fn send_initial_events_replays_state_then_marks_the_end_with_a_bookmark() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let mut last_rv = 0;
    for name in ["init-a", "init-b"] {
        let c = api.create(&PostParams::default(), &labelled_cm(name, &[("batch", "init")])).await.expect("create");
        last_rv = rv_num(&rv_of(&c.metadata));
    }
    // sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true
    let wp = WatchParams::streaming_lists().labels("batch=init").timeout(10);
    let mut s = api.watch(&wp, "").await.expect("streaming list").boxed();
    let mut initial = BTreeSet::new();
    let end = loop {
        match next_event(&mut s).await {
            WatchEvent::Added(c) => {
                initial.insert(c.metadata.name.expect("name"));
            }
            WatchEvent::Bookmark(b) => break b,
            other => panic!("unexpected {other:?} among the initial events"),
        }
    };
    assert_eq!(initial, set(&["init-a", "init-b"]));
    assert_eq!(end.metadata.annotations.get("k8s.io/initial-events-end").map(String::as_str), Some("true"));
    assert!(rv_num(&end.metadata.resource_version) >= last_rv, "the end bookmark is older than the state it closes");
    // Then the watch goes on with changes.
    api.create(&PostParams::default(), &labelled_cm("init-c", &[("batch", "init")])).await.expect("create");
    loop {
        match next_event(&mut s).await {
            WatchEvent::Added(c) => {
                assert_eq!(c.metadata.name.as_deref(), Some("init-c"));
                break;
            }
            WatchEvent::Bookmark(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test]
async fn send_initial_events_requires_resource_version_match_not_older_than() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    // validateWatchOptions (apimachinery/pkg/apis/meta/internalversion/validation/validation.go)
    // wrapped in NewInvalid(ListOptions.meta.k8s.io, "") by the list handler.
    let req = http::Request::get(
        "/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true&allowWatchBookmarks=true&timeoutSeconds=2",
    )
    .body(vec![])
    .expect("request");
    let err = status(tokio::time::timeout(WAIT, dc.client().request_text(req)).await.expect("an answer in time"));
    assert_status(
        &err,
        422,
        "Invalid",
        "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
    );
    let details = err.details.expect("details");
    assert_eq!((details.group.as_str(), details.kind.as_str()), ("meta.k8s.io", "ListOptions"));
    assert_eq!(details.causes.len(), 1, "{:?}", details.causes);
    assert_eq!(details.causes[0].reason, "FieldValueForbidden");
    assert_eq!(details.causes[0].field, "resourceVersionMatch");
}

#[tokio::test]
async fn resource_version_match_on_a_watch_needs_send_initial_events() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    // validateWatchOptions: resourceVersionMatch without sendInitialEvents is forbidden.
    let req = http::Request::get(
        "/api/v1/namespaces/default/configmaps?watch=true&resourceVersionMatch=NotOlderThan&resourceVersion=1&timeoutSeconds=2",
    )
    .body(vec![])
    .expect("request");
    let err = status(tokio::time::timeout(WAIT, dc.client().request_text(req)).await.expect("an answer in time"));
    assert_status(
        &err,
        422,
        "Invalid",
        "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
    );
}

#[tokio::test]
async fn send_initial_events_without_bookmarks_replays_state_without_the_end_bookmark() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let client = dc.client();
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    api.create(&PostParams::default(), &labelled_cm("nb", &[("batch", "nb")])).await.expect("create");
    // validateWatchOptions has no rule about allowWatchBookmarks; the cacher only skips the
    // initial-events-end bookmark (storage/cacher/cacher.go getBookmarkAfterResourceVersionLockedFunc
    // returns 0 unless AllowWatchBookmarks).
    let req = http::Request::get(
        "/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&labelSelector=batch%3Dnb&timeoutSeconds=1",
    )
    .body(vec![])
    .expect("request");
    let s = client.request_events::<ConfigMap>(req).await.expect("the watch is accepted");
    let events = drain(s).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(matches!(&events[0], WatchEvent::Added(c) if c.metadata.name.as_deref() == Some("nb")), "{events:?}");
}

#[tokio::test]
async fn label_selector_watch_turns_label_changes_into_added_and_deleted() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let made = api.create(&PostParams::default(), &labelled_cm("lw", &[("team", "b")])).await.expect("create");
    let from = rv_of(&made.metadata);
    let relabel = |team: &'static str| {
        let api = api.clone();
        async move {
            let p = Patch::Merge(json!({"metadata": {"labels": {"team": team}}}));
            rv_of(&api.patch("lw", &PatchParams::default(), &p).await.expect("relabel").metadata)
        }
    };
    let rv_in = relabel("a").await;
    api.patch("lw", &PatchParams::default(), &Patch::Merge(json!({"data": {"k": "v2"}}))).await.expect("edit");
    let rv_out = relabel("b").await;
    let rv_back = relabel("a").await;
    api.delete("lw", &DeleteParams::default()).await.expect("delete");

    let s = api.watch(&WatchParams::default().labels("team=a").timeout(2), &from).await.expect("watch");
    let events: Vec<_> = drain(s).await.into_iter().filter(|e| !matches!(e, WatchEvent::Bookmark(_))).collect();
    let summary: Vec<String> = events
        .iter()
        .map(|e| match e {
            WatchEvent::Added(c) => format!("ADDED {}", rv_of(&c.metadata)),
            WatchEvent::Modified(c) => format!("MODIFIED {}", c.data.as_ref().expect("data")["k"]),
            WatchEvent::Deleted(c) => format!("DELETED {}", rv_of(&c.metadata)),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(summary.len(), 5, "{summary:?}");
    assert_eq!(summary[0], format!("ADDED {rv_in}"));
    assert_eq!(summary[1], "MODIFIED v2");
    // Leaving the selection is a DELETED carrying the object as it was (still team=a) at the
    // resourceVersion of the change (storage/cacher/cache_watcher.go convertToWatchEvent).
    assert_eq!(summary[2], format!("DELETED {rv_out}"));
    assert_eq!(summary[3], format!("ADDED {rv_back}"));
    assert!(summary[4].starts_with("DELETED "), "{summary:?}");
}

#[tokio::test]
async fn leaving_a_label_selector_sends_the_previous_object() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let made = api.create(&PostParams::default(), &labelled_cm("prev", &[("team", "a")])).await.expect("create");
    let p = Patch::Merge(json!({"metadata": {"labels": {"team": "b"}}}));
    let moved = api.patch("prev", &PatchParams::default(), &p).await.expect("relabel");
    let s =
        api.watch(&WatchParams::default().labels("team=a").timeout(1), &rv_of(&made.metadata)).await.expect("watch");
    let events: Vec<_> = drain(s).await.into_iter().filter(|e| !matches!(e, WatchEvent::Bookmark(_))).collect();
    // storage/cacher/cache_watcher.go convertToWatchEvent: "return a delete event with the
    // previous object content, but with the event's resource version".
    match events.as_slice() {
        [WatchEvent::Deleted(c)] => {
            assert_eq!(c.metadata.labels.as_ref().expect("labels")["team"], "a", "{c:?}");
            assert_eq!(c.metadata.resource_version, moved.metadata.resource_version);
        }
        other => panic!("expected one DELETED, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// 3. writes: generateName, dryRun, optimistic concurrency, preconditions, deletecollection

#[tokio::test]
async fn generate_name_appends_five_random_characters() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let mut c = cm("", &[]);
    c.metadata.name = None;
    c.metadata.generate_name = Some("gen-".into());
    let mut seen = BTreeSet::new();
    for _ in 0..3 {
        let made = api.create(&PostParams::default(), &c).await.expect("create with generateName");
        let name = made.metadata.name.clone().expect("a generated name");
        let suffix = name.strip_prefix("gen-").unwrap_or_else(|| panic!("{name} keeps the prefix"));
        // apiserver/pkg/storage/names: utilrand.String(5) over "bcdfghjklmnpqrstvwxz2456789".
        assert_eq!(suffix.len(), 5, "{name}");
        assert!(suffix.chars().all(|ch| "bcdfghjklmnpqrstvwxz2456789".contains(ch)), "{name}");
        assert_eq!(made.metadata.generate_name.as_deref(), Some("gen-"));
        api.get(&name).await.expect("the generated name is stored");
        seen.insert(name);
    }
    assert_eq!(seen.len(), 3);
}

#[tokio::test]
async fn dry_run_all_persists_nothing() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let dry = PostParams { dry_run: true, ..Default::default() };

    let out = api.create(&dry, &cm("dry-new", &[("a", "1")])).await.expect("dry-run create");
    assert_eq!(out.metadata.name.as_deref(), Some("dry-new"));
    assert!(api.get_opt("dry-new").await.expect("get").is_none(), "a dry-run create was stored");

    let real = api.create(&PostParams::default(), &cm("dry", &[("a", "1")])).await.expect("create");
    let rv = rv_of(&real.metadata);

    let mut changed = real.clone();
    changed.data = Some([("a".to_string(), "2".to_string())].into());
    let out = api.replace("dry", &dry, &changed).await.expect("dry-run update");
    assert_eq!(out.data.as_ref().expect("data")["a"], "2", "the answer shows the would-be object");
    let out = api
        .patch("dry", &PatchParams::default().dry_run(), &Patch::Merge(json!({"data": {"b": "3"}})))
        .await
        .expect("dry-run patch");
    assert_eq!(out.data.as_ref().expect("data").get("b").map(String::as_str), Some("3"));
    api.delete("dry", &DeleteParams::default().dry_run()).await.expect("dry-run delete");

    let now = api.get("dry").await.expect("still there after a dry-run delete");
    assert_eq!(rv_of(&now.metadata), rv, "a dry-run write changed the stored object");
    assert_eq!(now.data, real.data);
}

#[tokio::test]
async fn dry_run_create_of_an_existing_name_conflicts() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    api.create(&PostParams::default(), &cm("dry", &[("a", "1")])).await.expect("create");
    // registry/generic/registry/dryrun.go DryRunnableStorage.Create: with dryRun it reads the key
    // and returns storage.NewKeyExistsError when it is there.
    let err = status(api.create(&PostParams { dry_run: true, ..Default::default() }, &cm("dry", &[])).await);
    assert_status(&err, 409, "AlreadyExists", "configmaps \"dry\" already exists");
}

#[tokio::test]
async fn update_conflicts_on_a_stale_resource_version() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let first = api.create(&PostParams::default(), &cm("occ", &[("v", "0")])).await.expect("create");
    api.patch("occ", &PatchParams::default(), &Patch::Merge(json!({"data": {"v": "1"}}))).await.expect("patch");

    let mut stale = first.clone();
    stale.data = Some([("v".to_string(), "stale".to_string())].into());
    let err = status(api.replace("occ", &PostParams::default(), &stale).await);
    assert_status(
        &err,
        409,
        "Conflict",
        "Operation cannot be fulfilled on configmaps \"occ\": the object has been modified; please apply your changes to the latest version and try again",
    );
}

#[tokio::test]
async fn update_without_resource_version_is_unconditional() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let first = api.create(&PostParams::default(), &cm("occ", &[("v", "0")])).await.expect("create");
    api.patch("occ", &PatchParams::default(), &Patch::Merge(json!({"data": {"v": "1"}}))).await.expect("patch");
    // pkg/registry/core/configmap/strategy.go: AllowUnconditionalUpdate() is true, so
    // registry.Store.Update takes the stored resourceVersion when the body has none.
    let mut blind = first.clone();
    blind.metadata.resource_version = None;
    blind.data = Some([("v".to_string(), "blind".to_string())].into());
    let out = api.replace("occ", &PostParams::default(), &blind).await.expect("unconditional update");
    assert_eq!(out.data.as_ref().expect("data")["v"], "blind");
    assert!(rv_num(&rv_of(&out.metadata)) > rv_num(&rv_of(&first.metadata)));
}

#[tokio::test]
async fn delete_with_matching_preconditions_deletes() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let made = api.create(&PostParams::default(), &cm("pre", &[])).await.expect("create");
    let pre = |uid: &str, rv: &str| {
        DeleteParams::default()
            .preconditions(Preconditions { uid: Some(uid.to_string()), resource_version: Some(rv.to_string()) })
    };
    let uid = made.metadata.uid.clone().expect("uid");
    let err = status(api.delete("pre", &pre("00000000-0000-0000-0000-000000000000", &rv_of(&made.metadata))).await);
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"), "{err:?}");
    let err = status(api.delete("pre", &pre(&uid, "1")).await);
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"), "{err:?}");
    api.get("pre").await.expect("a failed precondition deletes nothing");
    api.delete("pre", &pre(&uid, &rv_of(&made.metadata))).await.expect("matching preconditions delete");
    assert!(api.get_opt("pre").await.expect("get").is_none());
}

#[tokio::test]
async fn delete_preconditions_conflict_with_the_real_messages() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let made = api.create(&PostParams::default(), &cm("pre", &[])).await.expect("create");
    let uid = made.metadata.uid.clone().expect("uid");
    let rv = rv_of(&made.metadata);

    // rest.BeforeDelete (apiserver/pkg/registry/rest/delete.go): the resource in the message is
    // GroupResource{gvk.Group, gvk.Kind}, so "ConfigMap".
    let dp = |uid: Option<&str>, rv: Option<&str>| {
        DeleteParams::default()
            .preconditions(Preconditions { uid: uid.map(str::to_string), resource_version: rv.map(str::to_string) })
    };
    let wrong_uid = "00000000-0000-0000-0000-000000000000";
    let err = status(api.delete("pre", &dp(Some(wrong_uid), None)).await);
    assert_status(
        &err,
        409,
        "Conflict",
        &format!(
            "Operation cannot be fulfilled on ConfigMap \"pre\": the UID in the precondition ({wrong_uid}) does not match the UID in record ({uid}). The object might have been deleted and then recreated"
        ),
    );
    let err = status(api.delete("pre", &dp(None, Some("1"))).await);
    assert_status(
        &err,
        409,
        "Conflict",
        &format!(
            "Operation cannot be fulfilled on ConfigMap \"pre\": the ResourceVersion in the precondition (1) does not match the ResourceVersion in record ({rv}). The object might have been modified"
        ),
    );
    api.get("pre").await.expect("a failed precondition deletes nothing");
    api.delete("pre", &dp(Some(&uid), Some(&rv))).await.expect("matching preconditions delete");
    assert!(api.get_opt("pre").await.expect("get").is_none());
}

#[tokio::test]
async fn deletecollection_with_a_label_selector_deletes_only_matching_objects() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    for (name, sweep) in [("dc-1", "yes"), ("dc-2", "yes"), ("dc-3", "no")] {
        api.create(&PostParams::default(), &labelled_cm(name, &[("sweep", sweep)])).await.expect("create");
    }
    api.create(&PostParams::default(), &cm("dc-unlabelled", &[])).await.expect("create");
    let res = api
        .delete_collection(&DeleteParams::default(), &ListParams::default().labels("sweep=yes"))
        .await
        .expect("deletecollection");
    let deleted = res.left().expect("deletecollection answers the list of deleted objects");
    assert_eq!(names(&deleted.items), set(&["dc-1", "dc-2"]));
    let left = names(&api.list(&ListParams::default()).await.expect("list").items);
    assert_eq!(left, set(&["dc-3", "dc-unlabelled", "kube-root-ca.crt"]));
}

// ---------------------------------------------------------------------------------------------
// 4. patches

#[tokio::test]
async fn json_merge_patch_and_json_patch() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    api.create(&PostParams::default(), &cm("mp", &[("keep", "1"), ("drop", "2")])).await.expect("create");
    let out = api
        .patch(
            "mp",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"l": "x"}}, "data": {"drop": null, "add": "3"}})),
        )
        .await
        .expect("merge patch");
    let data = out.data.expect("data");
    assert_eq!(data.keys().cloned().collect::<BTreeSet<_>>(), set(&["add", "keep"]));
    assert_eq!(out.metadata.labels.expect("labels")["l"], "x");

    let ops: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/data/keep", "value": "1"},
        {"op": "replace", "path": "/data/keep", "value": "10"},
        {"op": "add", "path": "/data/new", "value": "n"},
        {"op": "remove", "path": "/data/add"},
    ]))
    .expect("a JSON patch");
    let patch: Patch<()> = Patch::Json(ops);
    let out = api.patch("mp", &PatchParams::default(), &patch).await.expect("json patch");
    let data = out.data.expect("data");
    assert_eq!((data["keep"].as_str(), data["new"].as_str(), data.get("add")), ("10", "n", None));
    let rv = rv_of(&out.metadata);

    // A failing `test` op: NewGenericServerResponse(422, ...) in endpoints/handlers/patch.go,
    // whose message is the generic one for 422.
    let ops: json_patch::Patch = serde_json::from_value(
        json!([{"op": "test", "path": "/data/keep", "value": "nope"}, {"op": "remove", "path": "/data/keep"}]),
    )
    .expect("a JSON patch");
    let patch: Patch<()> = Patch::Json(ops);
    let err = status(api.patch("mp", &PatchParams::default(), &patch).await);
    assert_status(&err, 422, "Invalid", "the server rejected our request due to an error in our request");
    let now = api.get("mp").await.expect("get");
    assert_eq!(rv_of(&now.metadata), rv, "a failed JSON patch wrote something");
    assert_eq!(now.data.expect("data")["keep"], "10");
}

#[tokio::test]
async fn strategic_merge_patch_merges_containers_by_name_and_deletes_env_entries() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let api: Api<Deployment> = Api::default_namespaced(dc.client());
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "smp"},
        "spec": {
            "selector": {"matchLabels": {"app": "smp"}},
            "template": {
                "metadata": {"labels": {"app": "smp"}},
                "spec": {"containers": [
                    {"name": "app", "image": "nginx:1.25", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
                    {"name": "sidecar", "image": "busybox:1.36", "env": [{"name": "S", "value": "s"}]},
                ]},
            },
        },
    }))
    .expect("a Deployment literal");
    api.create(&PostParams::default(), &d).await.expect("create");
    let patch = Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [
        {"name": "app", "image": "nginx:1.27", "env": [{"name": "B", "$patch": "delete"}, {"name": "C", "value": "3"}]},
    ]}}}}));
    let out = api.patch("smp", &PatchParams::default(), &patch).await.expect("strategic merge patch");
    let containers = out.spec.expect("spec").template.spec.expect("pod spec").containers;
    let order: Vec<_> = containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(order, ["app", "sidecar"], "containers are merged by name, not replaced");
    let app = &containers[0];
    assert_eq!(app.image.as_deref(), Some("nginx:1.27"));
    let env: BTreeSet<_> = app
        .env
        .as_ref()
        .expect("env")
        .iter()
        .map(|e| format!("{}={}", e.name, e.value.as_deref().unwrap_or("")))
        .collect();
    assert_eq!(env, set(&["A=1", "C=3"]));
    let sidecar = &containers[1];
    assert_eq!(sidecar.image.as_deref(), Some("busybox:1.36"));
    assert_eq!(sidecar.env.as_ref().expect("env").len(), 1);
}

#[tokio::test]
async fn server_side_apply_owns_fields_conflicts_and_forces() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let applied = |data: Value| {
        Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": data}))
    };

    let out = api
        .patch("ssa", &PatchParams::apply("mgr"), &applied(json!({"a": "1", "b": "2", "c": "3"})))
        .await
        .expect("apply creates");
    assert!(out.metadata.uid.is_some());
    let out =
        api.patch("ssa", &PatchParams::apply("mgr"), &applied(json!({"a": "1", "c": "3"}))).await.expect("re-apply");
    assert_eq!(out.data.expect("data").keys().cloned().collect::<BTreeSet<_>>(), set(&["a", "c"]), "b was dropped");

    // managedfields/internal/conflict.go: NewConflictError.
    let err = status(api.patch("ssa", &PatchParams::apply("other"), &applied(json!({"a": "x"}))).await);
    assert_status(&err, 409, "Conflict", "Apply failed with 1 conflict: conflict with \"mgr\": .data.a");
    let causes = err.details.expect("details").causes;
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert_eq!(
        (causes[0].reason.as_str(), causes[0].message.as_str(), causes[0].field.as_str()),
        ("FieldManagerConflict", "conflict with \"mgr\"", ".data.a")
    );

    let out = api
        .patch("ssa", &PatchParams::apply("other").force(), &applied(json!({"a": "x"})))
        .await
        .expect("forced apply");
    let data = out.data.clone().expect("data");
    assert_eq!((data["a"].as_str(), data["c"].as_str()), ("x", "3"));
    let managed = out.metadata.managed_fields.expect("managedFields");
    let entry = |m: &str| {
        managed.iter().find(|e| e.manager.as_deref() == Some(m)).unwrap_or_else(|| panic!("no {m} in {managed:?}"))
    };
    for (m, owns, not) in [("mgr", "f:c", "f:a"), ("other", "f:a", "f:c")] {
        let e = entry(m);
        assert_eq!(e.operation.as_deref(), Some("Apply"));
        assert_eq!(e.api_version.as_deref(), Some("v1"));
        let fields = &e.fields_v1.as_ref().expect("fieldsV1").0["f:data"];
        assert!(fields.get(owns).is_some() && fields.get(not).is_none(), "{m}: {fields}");
    }
}

#[tokio::test]
async fn server_side_apply_to_status_records_its_fields_and_drops_what_it_stops_applying() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let api: Api<Service> = Api::default_namespaced(dc.client());
    let svc: Service = serde_json::from_value(json!({"metadata": {"name": "lb"},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "protocol": "TCP"}]}}))
    .expect("a service");
    api.create(&PostParams::default(), &svc).await.expect("create");
    let apply = |ingress: Value| {
        Patch::Apply(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "lb"},
            "status": {"loadBalancer": {"ingress": ingress}}}))
    };
    let out = api
        .patch_status("lb", &PatchParams::apply("lb-controller").force(), &apply(json!([{"ip": "203.0.113.9"}])))
        .await
        .expect("apply to /status");
    // The entry names the subresource (fieldmanager: managedFieldsUpdater with subresource).
    let managed = out.metadata.managed_fields.expect("managedFields");
    let entry = managed
        .iter()
        .find(|e| e.manager.as_deref() == Some("lb-controller"))
        .unwrap_or_else(|| panic!("no lb-controller entry in {managed:?}"));
    assert_eq!((entry.operation.as_deref(), entry.subresource.as_deref()), (Some("Apply"), Some("status")));
    let fields = serde_json::to_string(&entry.fields_v1.as_ref().expect("fieldsV1").0).expect("json");
    assert_eq!(fields, r#"{"f:status":{"f:loadBalancer":{"f:ingress":{}}}}"#);
    // Applying the status without the ingress removes it: the applier owned it alone.
    let out = api
        .patch_status(
            "lb",
            &PatchParams::apply("lb-controller").force(),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "lb"}, "status": {}})),
        )
        .await
        .expect("second apply to /status");
    let lb = out.status.and_then(|s| s.load_balancer).and_then(|l| l.ingress);
    assert!(lb.as_ref().is_none_or(|i| i.is_empty()), "the dropped ingress stays: {lb:?}");
}

// ---------------------------------------------------------------------------------------------
// 5. metadata, status and scale subresources

#[tokio::test]
async fn creation_timestamp_cannot_be_changed() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let made = api.create(&PostParams::default(), &cm("imm", &[("v", "0")])).await.expect("create");
    let old = || Some(Time(k8s_openapi::jiff::Timestamp::from_second(1_000_000_000).expect("a timestamp")));

    // rest.BeforeUpdate keeps the stored creationTimestamp, whatever an update says.
    let mut older = made.clone();
    older.metadata.creation_timestamp = old();
    older.data = Some([("v".to_string(), "1".to_string())].into());
    let out = api.replace("imm", &PostParams::default(), &older).await.expect("update");
    assert_eq!(out.metadata.creation_timestamp, made.metadata.creation_timestamp);
    assert_eq!(out.data.as_ref().expect("data")["v"], "1");
    let p = Patch::Merge(json!({"metadata": {"creationTimestamp": "2001-09-09T01:46:40Z"}, "data": {"v": "2"}}));
    let out = api.patch("imm", &PatchParams::default(), &p).await.expect("patch");
    assert_eq!(out.metadata.creation_timestamp, made.metadata.creation_timestamp);
    // An update without uid keeps the stored one.
    let mut no_uid = out.clone();
    no_uid.metadata.uid = None;
    let out = api.replace("imm", &PostParams::default(), &no_uid).await.expect("update without uid");
    assert_eq!(out.metadata.uid, made.metadata.uid);
}

#[tokio::test]
async fn uid_cannot_be_changed_by_a_patch() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let made = api.create(&PostParams::default(), &cm("imm", &[("v", "0")])).await.expect("create");
    let other_uid = "00000000-0000-0000-0000-000000000000";
    // A patch has no uid precondition: the changed uid reaches ValidateObjectMetaUpdate.
    let err =
        status(api.patch("imm", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"uid": other_uid}}))).await);
    assert_status(
        &err,
        422,
        "Invalid",
        &format!("ConfigMap \"imm\" is invalid: metadata.uid: Invalid value: \"{other_uid}\": field is immutable"),
    );
    assert_eq!(api.get("imm").await.expect("get").metadata.uid, made.metadata.uid);
}

#[tokio::test]
async fn uid_in_an_update_body_is_a_precondition() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let made = api.create(&PostParams::default(), &cm("imm", &[("v", "0")])).await.expect("create");
    let uid = made.metadata.uid.clone().expect("uid");
    // rest.defaultUpdatedObjectInfo.Preconditions() turns the body's uid into a storage
    // precondition; storage.Preconditions.Check fails with "Precondition failed: UID in
    // precondition: ..., UID in object meta: ..." and InterpretUpdateError makes it a Conflict.
    let other_uid = "00000000-0000-0000-0000-000000000000";
    let mut foreign = made.clone();
    foreign.metadata.uid = Some(other_uid.into());
    foreign.data = Some([("v".to_string(), "1".to_string())].into());
    let err = status(api.replace("imm", &PostParams::default(), &foreign).await);
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"), "{err:?}");
    assert!(err.message.starts_with("Operation cannot be fulfilled on configmaps \"imm\": "), "{}", err.message);
    assert!(
        err.message
            .contains(&format!("Precondition failed: UID in precondition: {other_uid}, UID in object meta: {uid}")),
        "{}",
        err.message
    );
    assert_eq!(api.get("imm").await.expect("get").data.expect("data")["v"], "0");
}

#[tokio::test]
async fn generation_tracks_spec_changes_only() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let deps: Api<Deployment> = Api::default_namespaced(dc.client());
    let made = deps.create(&PostParams::default(), &deployment("gen", 1)).await.expect("create");
    assert_eq!(made.metadata.generation, Some(1));
    let out = deps
        .patch("gen", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"tier": "web"}}})))
        .await
        .expect("label patch");
    assert_eq!(out.metadata.generation, Some(1), "a metadata change bumped generation");
    let out = deps
        .patch("gen", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 3}})))
        .await
        .expect("spec patch");
    assert_eq!(out.metadata.generation, Some(2));
    let out = deps
        .patch("gen", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 3}})))
        .await
        .expect("no-op spec patch");
    assert_eq!(out.metadata.generation, Some(2), "an unchanged spec bumped generation");

    let cms: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let c = cms.create(&PostParams::default(), &cm("nogen", &[("a", "1")])).await.expect("create");
    assert_eq!(c.metadata.generation, None, "ConfigMaps have no generation");
    let c =
        cms.patch("nogen", &PatchParams::default(), &Patch::Merge(json!({"data": {"a": "2"}}))).await.expect("patch");
    assert_eq!(c.metadata.generation, None);
}

#[tokio::test]
async fn deployment_status_subresource_splits_spec_and_status_writes() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let deps: Api<Deployment> = Api::default_namespaced(dc.client());
    let mut d = deployment("st", 2);
    d.status = Some(serde_json::from_value(json!({"collisionCount": 9})).expect("status"));
    let made = deps.create(&PostParams::default(), &d).await.expect("create");
    assert_ne!(made.status.and_then(|s| s.collision_count), Some(9), "create kept a client-written status");

    let out = deps
        .patch(
            "st",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}, "status": {"collisionCount": 5}})),
        )
        .await
        .expect("patch the main resource");
    assert_eq!(out.metadata.labels.expect("labels")["touched"], "yes");
    assert_ne!(out.status.and_then(|s| s.collision_count), Some(5), "the main resource wrote status");

    let out = deps
        .patch_status(
            "st",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 7}, "status": {"collisionCount": 4}})),
        )
        .await
        .expect("patch /status");
    assert_eq!(out.spec.expect("spec").replicas, Some(2), "/status wrote spec");
    assert_eq!(out.status.expect("status").collision_count, Some(4));
    assert_eq!(out.metadata.generation, Some(1));
}

const GADGET_CRD: &str = "gadgets.test.devcluster.io";

async fn install_gadget_crd(client: &kube::Client) -> ApiResource {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": GADGET_CRD},
        "spec": {
            "group": "test.devcluster.io",
            "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                    "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
                }}},
                "subresources": {"status": {}},
            }],
        },
    }))
    .expect("a CRD literal");
    crds.create(&PostParams::default(), &crd).await.expect("create CRD");
    let cond =
        kube::runtime::wait::await_condition(crds, GADGET_CRD, kube::runtime::wait::conditions::is_crd_established());
    tokio::time::timeout(WAIT, cond).await.expect("the CRD is established in time").expect("waiting for the CRD");
    ApiResource {
        group: "test.devcluster.io".into(),
        version: "v1".into(),
        api_version: "test.devcluster.io/v1".into(),
        kind: "Gadget".into(),
        plural: "gadgets".into(),
    }
}

#[tokio::test]
async fn custom_resource_status_subresource_splits_spec_and_status_writes() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let ar = install_gadget_crd(&dc.client()).await;
    let api: Api<DynamicObject> = Api::default_namespaced_with(dc.client(), &ar);
    let g = DynamicObject::new("g1", &ar).data(json!({"spec": {"size": 1}, "status": {"phase": "Made"}}));
    // customResourceStrategy.PrepareForCreate drops status and sets generation 1.
    let made = api.create(&PostParams::default(), &g).await.expect("create");
    assert_eq!(made.data.get("status"), None, "create kept status");
    assert_eq!(made.metadata.generation, Some(1));

    let out = api
        .patch(
            "g1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 2}, "status": {"phase": "Hacked"}})),
        )
        .await
        .expect("patch the main resource");
    assert_eq!(out.data["spec"]["size"], 2);
    assert_eq!(out.data.get("status"), None, "the main resource wrote status");
    assert_eq!(out.metadata.generation, Some(2));

    let out = api
        .patch_status(
            "g1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 9}, "status": {"phase": "Ready"}})),
        )
        .await
        .expect("patch /status");
    assert_eq!(out.data["spec"]["size"], 2, "/status wrote spec");
    assert_eq!(out.data["status"]["phase"], "Ready");
    assert_eq!(out.metadata.generation, Some(2), "a status write bumped generation");
    let now = api.get("g1").await.expect("get");
    assert_eq!((now.data["spec"]["size"].as_i64(), now.data["status"]["phase"].as_str()), (Some(2), Some("Ready")));
}

#[tokio::test]
async fn deployment_scale_subresource() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let deps: Api<Deployment> = Api::default_namespaced(dc.client());
    let made = deps.create(&PostParams::default(), &deployment("sc", 2)).await.expect("create");

    let (code, raw_scale) =
        raw_json(&dc.client(), "/apis/apps/v1/namespaces/default/deployments/sc/scale", "application/json").await;
    assert_eq!(code, 200, "{raw_scale}");
    assert_eq!((raw_scale["apiVersion"].as_str(), raw_scale["kind"].as_str()), (Some("autoscaling/v1"), Some("Scale")));

    let scale = deps.get_scale("sc").await.expect("get scale");
    assert_eq!(scale.metadata.name.as_deref(), Some("sc"));
    assert_eq!(scale.metadata.uid, made.metadata.uid, "the Scale carries the Deployment's uid");
    assert_eq!(scale.spec.as_ref().and_then(|s| s.replicas), Some(2));
    // registry/apps/deployment/storage: Selector is the label selector in string form.
    assert_eq!(scale.status.as_ref().and_then(|s| s.selector.as_deref()), Some("app=sc"));

    let out = deps
        .patch_scale("sc", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 4}})))
        .await
        .expect("patch scale");
    assert_eq!(out.spec.and_then(|s| s.replicas), Some(4));
    assert_eq!(deps.get("sc").await.expect("get").spec.expect("spec").replicas, Some(4));

    // A PUT carries the version it read: wait until the controllers have finished writing the
    // Deployment's status for the new size, as a client would retry on a conflict otherwise.
    let settled = |d: Option<&Deployment>| {
        d.is_some_and(|d| {
            let st = d.status.as_ref();
            st.and_then(|s| s.observed_generation) == d.metadata.generation
                && st.and_then(|s| s.available_replicas) == Some(4)
                && st.and_then(|s| s.replicas) == Some(4)
        })
    };
    tokio::time::timeout(Duration::from_secs(30), kube::runtime::wait::await_condition(deps.clone(), "sc", settled))
        .await
        .expect("the deployment settles")
        .expect("watch");
    let current = deps.get_scale("sc").await.expect("get scale");
    let mut next: Scale = current.clone();
    next.spec.get_or_insert_with(Default::default).replicas = Some(1);
    let out = deps.replace_scale("sc", &PostParams::default(), &next).await.expect("replace scale");
    assert_eq!(out.spec.and_then(|s| s.replicas), Some(1));
    assert_eq!(deps.get("sc").await.expect("get").spec.expect("spec").replicas, Some(1));

    // The Scale's resourceVersion is the Deployment's: a stale one conflicts.
    let err = status(deps.replace_scale("sc", &PostParams::default(), &next).await);
    assert_status(
        &err,
        409,
        "Conflict",
        "Operation cannot be fulfilled on deployments.apps \"sc\": the object has been modified; please apply your changes to the latest version and try again",
    );
}

// ---------------------------------------------------------------------------------------------
// 6. defaulting and validation

#[tokio::test]
async fn deployment_and_pod_template_defaults() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let deps: Api<Deployment> = Api::default_namespaced(dc.client());
    let digest = format!("nginx@sha256:{}", "a".repeat(64));
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "defaults"},
        "spec": {
            "selector": {"matchLabels": {"app": "defaults"}},
            "template": {
                "metadata": {"labels": {"app": "defaults"}},
                "spec": {"containers": [
                    {"name": "untagged", "image": "nginx"},
                    {"name": "latest", "image": "nginx:latest"},
                    {"name": "tagged", "image": "nginx:1.27"},
                    {"name": "digest", "image": digest},
                ]},
            },
        },
    }))
    .expect("a Deployment literal");
    deps.create(&PostParams::default(), &d).await.expect("create");
    // Read back through the API, as a client sees it (pkg/apis/apps/v1/defaults.go,
    // pkg/apis/core/v1/defaults.go).
    let got = deps.get("defaults").await.expect("get");
    let spec = got.spec.expect("spec");
    assert_eq!(spec.replicas, Some(1));
    assert_eq!(spec.revision_history_limit, Some(10));
    assert_eq!(spec.progress_deadline_seconds, Some(600));
    let strategy = spec.strategy.expect("strategy");
    assert_eq!(strategy.type_.as_deref(), Some("RollingUpdate"));
    let ru = strategy.rolling_update.expect("rollingUpdate");
    assert_eq!(ru.max_unavailable, Some(IntOrString::String("25%".into())));
    assert_eq!(ru.max_surge, Some(IntOrString::String("25%".into())));

    let pod = spec.template.spec.expect("pod spec");
    assert_eq!(pod.restart_policy.as_deref(), Some("Always"));
    assert_eq!(pod.dns_policy.as_deref(), Some("ClusterFirst"));
    assert_eq!(pod.scheduler_name.as_deref(), Some("default-scheduler"));
    assert_eq!(pod.termination_grace_period_seconds, Some(30));
    assert!(pod.security_context.is_some(), "securityContext defaults to {{}}");
    let pull: Vec<_> =
        pod.containers.iter().map(|c| (c.name.as_str(), c.image_pull_policy.as_deref().unwrap_or("<unset>"))).collect();
    assert_eq!(
        pull,
        [("untagged", "Always"), ("latest", "Always"), ("tagged", "IfNotPresent"), ("digest", "IfNotPresent")]
    );
    for c in &pod.containers {
        assert_eq!(c.termination_message_path.as_deref(), Some("/dev/termination-log"), "{}", c.name);
        assert_eq!(c.termination_message_policy.as_deref(), Some("File"), "{}", c.name);
    }

    // A bare Pod gets the same pod-level defaults.
    let pods: Api<Pod> = Api::default_namespaced(dc.client());
    let mut p = pod_literal_untagged();
    p.metadata.name = Some("bare".into());
    pods.create(&PostParams::default(), &p).await.expect("create pod");
    let got = pods.get("bare").await.expect("get pod").spec.expect("spec");
    assert_eq!(got.restart_policy.as_deref(), Some("Always"));
    assert_eq!(got.dns_policy.as_deref(), Some("ClusterFirst"));
    assert_eq!(got.enable_service_links, Some(true));
    let c = &got.containers[0];
    assert_eq!(c.image_pull_policy.as_deref(), Some("Always"));
    assert_eq!(c.termination_message_path.as_deref(), Some("/dev/termination-log"));
}

fn pod_literal_untagged() -> Pod {
    serde_json::from_value(json!({"metadata": {}, "spec": {"containers": [{"name": "main", "image": "busybox"}]}}))
        .expect("a Pod literal")
}

#[tokio::test]
async fn service_defaults() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let svcs: Api<Service> = Api::default_namespaced(dc.client());
    let s: Service = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80}]},
    }))
    .expect("a Service literal");
    svcs.create(&PostParams::default(), &s).await.expect("create");
    let spec = svcs.get("web").await.expect("get").spec.expect("spec");
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    assert_eq!(spec.session_affinity.as_deref(), Some("None"));
    let port = &spec.ports.expect("ports")[0];
    assert_eq!(port.protocol.as_deref(), Some("TCP"));
    assert_eq!(port.target_port, Some(IntOrString::Int(80)), "targetPort defaults to port");
    assert!(spec.cluster_ip.as_deref().is_some_and(|ip| !ip.is_empty() && ip != "None"), "a ClusterIP is allocated");
}

#[tokio::test]
async fn validation_errors_carry_the_real_messages() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let cms: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let err = status(cms.create(&PostParams::default(), &cm("Bad_Name", &[])).await);
    let detail = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    assert_status(
        &err,
        422,
        "Invalid",
        &format!("ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": {detail}"),
    );
    let details = err.details.expect("details");
    assert_eq!((details.kind.as_str(), details.name.as_str()), ("ConfigMap", "Bad_Name"));
    assert_eq!(details.causes.len(), 1, "{:?}", details.causes);
    assert_eq!(
        (details.causes[0].reason.as_str(), details.causes[0].field.as_str()),
        ("FieldValueInvalid", "metadata.name")
    );
    assert_eq!(details.causes[0].message, format!("Invalid value: \"Bad_Name\": {detail}"));

    // pkg/apis/core/validation: validateContainers answers Required for an empty list.
    let pods: Api<Pod> = Api::default_namespaced(dc.client());
    let p: Pod =
        serde_json::from_value(json!({"metadata": {"name": "empty"}, "spec": {"containers": []}})).expect("pod");
    let err = status(pods.create(&PostParams::default(), &p).await);
    assert_status(&err, 422, "Invalid", "Pod \"empty\" is invalid: spec.containers: Required value");
}

#[tokio::test]
async fn deployment_selector_mismatch_has_the_real_message() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    // pkg/apis/apps/validation: ValidatePodTemplateSpecForReplicaSet reports template.Labels
    // (a map[string]string), printed by field.Error with %#v.
    let deps: Api<Deployment> = Api::default_namespaced(dc.client());
    let mut d = deployment("mismatch", 1);
    d.spec.as_mut().expect("spec").template.metadata.as_mut().expect("template metadata").labels =
        Some([("app".to_string(), "other".to_string())].into());
    let err = status(deps.create(&PostParams::default(), &d).await);
    assert_status(
        &err,
        422,
        "Invalid",
        "Deployment.apps \"mismatch\" is invalid: spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"other\"}: `selector` does not match template `labels`",
    );
    let details = err.details.expect("details");
    assert_eq!((details.group.as_str(), details.kind.as_str()), ("apps", "Deployment"));
}

// ---------------------------------------------------------------------------------------------
// 7. content negotiation, Table, PartialObjectMetadata, serialization

#[tokio::test]
async fn protobuf_first_accept_gets_an_acceptable_answer() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let client = dc.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    cms.create(&PostParams::default(), &cm("neg", &[("a", "1")])).await.expect("create");
    let accept = "application/vnd.kubernetes.protobuf, application/json";
    let (code, headers, body) =
        raw(&client, http::Method::GET, "/api/v1/namespaces/default/configmaps/neg", Some(accept), None).await;
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    // A real server answers protobuf for built-in kinds; JSON is the other type the client
    // listed. Either is a correct negotiation, and the body must be what the header says.
    let ct = content_type(&headers);
    if ct.starts_with("application/vnd.kubernetes.protobuf") {
        assert!(body.starts_with(b"k8s\0"), "protobuf body without the k8s magic");
    } else {
        assert!(ct.starts_with("application/json"), "answered {ct:?} to Accept: {accept}");
        let v: Value = serde_json::from_slice(&body).expect("a JSON body");
        assert_eq!((v["kind"].as_str(), v["data"]["a"].as_str()), (Some("ConfigMap"), Some("1")));
    }

    // Custom resources have no protobuf form: JSON it is (apiextensions-apiserver serves only
    // JSON and YAML for them).
    let ar = install_gadget_crd(&client).await;
    let gadgets: Api<DynamicObject> = Api::default_namespaced_with(client.clone(), &ar);
    gadgets
        .create(&PostParams::default(), &DynamicObject::new("neg", &ar).data(json!({"spec": {"size": 1}})))
        .await
        .expect("create gadget");
    let (code, headers, body) = raw(
        &client,
        http::Method::GET,
        "/apis/test.devcluster.io/v1/namespaces/default/gadgets/neg",
        Some(accept),
        None,
    )
    .await;
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    assert!(content_type(&headers).starts_with("application/json"), "{headers:?}");
    let v: Value = serde_json::from_slice(&body).expect("a JSON body");
    assert_eq!(v["kind"], "Gadget");
}

#[tokio::test]
async fn table_for_pods_has_the_kubectl_columns() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let client = dc.client();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    pods.create(&PostParams::default(), &pod("tabled", None, &[])).await.expect("create");
    let accept = "application/json;as=Table;v=v1;g=meta.k8s.io";
    // pkg/printers/internalversion/printers.go: podColumnDefinitions.
    let want_cols = ["Name", "Ready", "Status", "Restarts", "Age", "IP", "Node", "Nominated Node", "Readiness Gates"];
    let want_prio = [0, 0, 0, 0, 0, 1, 1, 1, 1];
    for uri in ["/api/v1/namespaces/default/pods", "/api/v1/namespaces/default/pods/tabled"] {
        let (code, table) = raw_json(&client, uri, accept).await;
        assert_eq!(code, 200, "{table}");
        assert_eq!((table["kind"].as_str(), table["apiVersion"].as_str()), (Some("Table"), Some("meta.k8s.io/v1")));
        let cols = table["columnDefinitions"].as_array().expect("columnDefinitions");
        let names: Vec<_> = cols.iter().map(|c| c["name"].as_str().unwrap_or("")).collect();
        assert_eq!(names, want_cols, "{uri}");
        let prio: Vec<_> = cols.iter().map(|c| c["priority"].as_i64().unwrap_or(0)).collect();
        assert_eq!(prio, want_prio, "{uri}");
        assert_eq!(cols[0]["format"], "name");
        let rows = table["rows"].as_array().expect("rows");
        let row =
            rows.iter().find(|r| r["cells"][0] == "tabled").unwrap_or_else(|| panic!("no row for the pod: {table}"));
        assert_eq!(row["cells"].as_array().map(Vec::len), Some(want_cols.len()));
        assert!(
            row["cells"][1].as_str().is_some_and(|r| r.ends_with("/1")),
            "READY counts the pod's one container: {row}"
        );
        // includeObject defaults to Metadata.
        assert_eq!(row["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(row["object"]["metadata"]["name"], "tabled");
    }
}

#[tokio::test]
async fn tables_carry_the_resource_version() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let client = dc.client();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let made = pods.create(&PostParams::default(), &pod("tabled", None, &[])).await.expect("create");
    let accept = "application/json;as=Table;v=v1;g=meta.k8s.io";
    // pkg/printers/tablegenerator.go GenerateTable: the list's resourceVersion, or the object's.
    let (_, list) = raw_json(&client, "/api/v1/namespaces/default/pods", accept).await;
    assert!(list["metadata"]["resourceVersion"].as_str().is_some_and(|rv| !rv.is_empty()), "{list}");
    let (_, one) = raw_json(&client, "/api/v1/namespaces/default/pods/tabled", accept).await;
    let rv = one["metadata"]["resourceVersion"].as_str().unwrap_or_else(|| panic!("no resourceVersion: {one}"));
    assert!(rv_num(rv) >= rv_num(&rv_of(&made.metadata)), "{one}");
}

#[tokio::test]
async fn partial_object_metadata_through_get_list_and_metadata_watcher() {
    // Deprecated in kube 5 in favour of `watcher(Api<PartialObjectMeta<K>>)`; both make the same
    // metadata-only list and watch requests.
    #[allow(deprecated)]
    use kube::runtime::metadata_watcher;
    use kube::runtime::watcher;
    let dc = DevCluster::start().await.expect("devcluster starts");
    let client = dc.client();
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    api.create(&PostParams::default(), &labelled_cm("meta", &[("mw", "yes")])).await.expect("create");

    let m = api.get_metadata("meta").await.expect("get_metadata");
    let types = m.types.expect("typed");
    assert_eq!((types.api_version.as_str(), types.kind.as_str()), ("meta.k8s.io/v1", "PartialObjectMetadata"));
    assert_eq!(m.metadata.labels.expect("labels")["mw"], "yes");
    let list = api.list_metadata(&ListParams::default().labels("mw=yes")).await.expect("list_metadata");
    assert_eq!(list.items.iter().filter_map(|i| i.metadata.name.as_deref()).collect::<Vec<_>>(), ["meta"]);

    let (code, one) = raw_json(
        &client,
        "/api/v1/namespaces/default/configmaps/meta",
        "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
    )
    .await;
    assert_eq!(code, 200, "{one}");
    assert_eq!(one["kind"], "PartialObjectMetadata");
    assert!(one.get("data").is_none(), "PartialObjectMetadata carries no data: {one}");
    let (code, many) = raw_json(
        &client,
        "/api/v1/namespaces/default/configmaps?labelSelector=mw%3Dyes",
        "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
    )
    .await;
    assert_eq!(code, 200, "{many}");
    assert_eq!(
        (many["kind"].as_str(), many["apiVersion"].as_str()),
        (Some("PartialObjectMetadataList"), Some("meta.k8s.io/v1"))
    );
    let item = &many["items"][0];
    assert_eq!(
        (item["kind"].as_str(), item["metadata"]["name"].as_str()),
        (Some("PartialObjectMetadata"), Some("meta"))
    );
    assert!(item.get("data").is_none(), "{item}");

    #[allow(deprecated)]
    let mut s = metadata_watcher(api.clone(), watcher::Config::default().labels("mw=yes")).boxed();
    let saw_change = tokio::time::timeout(WAIT, async {
        let mut seen_initial = false;
        while let Some(ev) = s.try_next().await.expect("metadata watcher") {
            match ev {
                watcher::Event::InitApply(m) => seen_initial |= m.metadata.name.as_deref() == Some("meta"),
                watcher::Event::InitDone => {
                    assert!(seen_initial, "the initial list missed the object");
                    let p = Patch::Merge(json!({"metadata": {"annotations": {"touched": "yes"}}}));
                    api.patch("meta", &PatchParams::default(), &p).await.expect("annotate");
                }
                watcher::Event::Apply(m)
                    if m.metadata.annotations.as_ref().and_then(|a| a.get("touched")).map(String::as_str)
                        == Some("yes") =>
                {
                    return true;
                }
                _ => {}
            }
        }
        false
    })
    .await
    .expect("the metadata watcher sees the change in time");
    assert!(saw_change);
}

#[tokio::test]
async fn built_in_kinds_serialize_kind_and_api_version_first() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let client = dc.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    cms.create(&PostParams::default(), &labelled_cm("ser", &[("a", "b")])).await.expect("create");
    let deps: Api<Deployment> = Api::default_namespaced(client.clone());
    deps.create(&PostParams::default(), &deployment("ser", 1)).await.expect("create");
    // Go's encoding/json writes struct fields in declaration order: TypeMeta first, then
    // ObjectMeta, then the kind's own fields (k8s.io/api/core/v1/types.go).
    for (uri, prefix, order) in [
        (
            "/api/v1/namespaces/default/configmaps/ser",
            "{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"ser\",",
            &["kind", "apiVersion", "metadata", "immutable", "data", "binaryData"][..],
        ),
        (
            "/apis/apps/v1/namespaces/default/deployments/ser",
            "{\"kind\":\"Deployment\",\"apiVersion\":\"apps/v1\",\"metadata\":{\"name\":\"ser\",",
            &["kind", "apiVersion", "metadata", "spec", "status"][..],
        ),
    ] {
        let (code, _, body) = raw(&client, http::Method::GET, uri, Some("application/json"), None).await;
        assert_eq!(code, 200);
        let text = String::from_utf8(body).expect("UTF-8 JSON");
        assert!(text.starts_with(prefix), "{uri} answered {text}");
        let v: Value = serde_json::from_str(&text).expect("JSON");
        assert_keys_in_order(&keys(&v), order, uri);
    }
    // Lists too: kind and apiVersion, then metadata, then items.
    let (_, _, body) =
        raw(&client, http::Method::GET, "/api/v1/namespaces/default/configmaps", Some("application/json"), None).await;
    let text = String::from_utf8(body).expect("UTF-8 JSON");
    assert!(text.starts_with("{\"kind\":\"ConfigMapList\",\"apiVersion\":\"v1\",\"metadata\":{"), "{text}");
}

#[tokio::test]
async fn object_meta_serializes_in_go_field_order() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let client = dc.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    cms.create(&PostParams::default(), &labelled_cm("ser", &[("a", "b")])).await.expect("create");
    // apimachinery/pkg/apis/meta/v1/types.go: the declaration order of ObjectMeta's fields.
    let meta_order = [
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    ];
    let (code, _, body) =
        raw(&client, http::Method::GET, "/api/v1/namespaces/default/configmaps/ser", Some("application/json"), None)
            .await;
    assert_eq!(code, 200);
    let v: Value = serde_json::from_slice(&body).expect("JSON");
    assert_keys_in_order(&keys(&v["metadata"]), &meta_order, "ConfigMap metadata");
}

// ---------------------------------------------------------------------------------------------
// 8. Events through both APIs

fn core_event(name: &str, kind: &str, target: &str, reason: &str, message: &str) -> CoreEvent {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "involvedObject": {"apiVersion": "v1", "kind": kind, "name": target, "namespace": "default"},
        "reason": reason,
        "message": message,
        "type": "Normal",
        "source": {"component": "api-semantics"},
        "firstTimestamp": "2024-01-01T00:00:00Z",
        "lastTimestamp": "2024-01-01T00:00:00Z",
        "count": 1,
    }))
    .expect("a core/v1 Event literal")
}

#[tokio::test]
async fn an_events_v1_event_is_a_core_v1_event() {
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let dc = DevCluster::start().await.expect("devcluster starts");
    let cms: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let target = cms.create(&PostParams::default(), &cm("ev-subject", &[])).await.expect("create");
    let recorder = Recorder::new(
        dc.client(),
        Reporter { controller: "api-semantics-test".into(), instance: Some("test-0".into()) },
    );
    let ev = Event {
        type_: EventType::Warning,
        reason: "Tested".into(),
        note: Some("recorded through events.k8s.io/v1".into()),
        action: "Testing".into(),
        secondary: None,
    };
    recorder.publish(&ev, &target.object_ref(&())).await.expect("publish through events.k8s.io/v1");

    // pkg/apis/events/v1/conversion.go: regarding -> involvedObject, note -> message,
    // reportingController -> reportingComponent.
    let core: Api<CoreEvent> = Api::default_namespaced(dc.client());
    let found = core.list(&ListParams::default().fields("involvedObject.name=ev-subject")).await.expect("list core/v1");
    assert_eq!(found.items.len(), 1, "{:?}", found.items);
    let e = &found.items[0];
    assert_eq!(e.involved_object.kind.as_deref(), Some("ConfigMap"));
    assert_eq!(e.involved_object.name.as_deref(), Some("ev-subject"));
    assert_eq!(e.involved_object.namespace.as_deref(), Some("default"));
    assert_eq!(e.involved_object.uid, target.metadata.uid);
    assert_eq!(e.message.as_deref(), Some("recorded through events.k8s.io/v1"));
    assert_eq!(e.reason.as_deref(), Some("Tested"));
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    assert_eq!(e.action.as_deref(), Some("Testing"));
    assert_eq!(e.reporting_component.as_deref(), Some("api-semantics-test"));
    assert_eq!(e.reporting_instance.as_deref(), Some("test-0"));
    assert!(e.event_time.is_some());
    let by_reason = core
        .list(&ListParams::default().fields("involvedObject.kind=ConfigMap,reason=Tested,type=Warning"))
        .await
        .expect("list");
    assert_eq!(names(&by_reason.items), names(&found.items));
}

#[tokio::test]
async fn a_core_v1_event_is_an_events_v1_event() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let core: Api<CoreEvent> = Api::default_namespaced(dc.client());
    core.create(&PostParams::default(), &core_event("legacy.1", "Pod", "ev-pod", "Legacy", "written through core/v1"))
        .await
        .expect("create core/v1 Event");
    let found = core.list(&ListParams::default().fields("involvedObject.name=ev-pod")).await.expect("list core/v1");
    assert_eq!(names(&found.items), set(&["legacy.1"]));

    let events: Api<EventsV1Event> = Api::default_namespaced(dc.client());
    let e = events.get("legacy.1").await.expect("the same Event through events.k8s.io/v1");
    let regarding = e.regarding.expect("regarding");
    assert_eq!((regarding.kind.as_deref(), regarding.name.as_deref()), (Some("Pod"), Some("ev-pod")));
    assert_eq!(e.note.as_deref(), Some("written through core/v1"));
    assert_eq!(e.reason.as_deref(), Some("Legacy"));
    assert_eq!(e.type_.as_deref(), Some("Normal"));
    assert_eq!(e.deprecated_count, Some(1));
    assert_eq!(e.deprecated_source.and_then(|s| s.component).as_deref(), Some("api-semantics"));
    assert!(e.deprecated_first_timestamp.is_some() && e.deprecated_last_timestamp.is_some());
    // events.k8s.io/v1 selects on regarding.*, mapped to involvedObject.* (the selectable-field
    // conversions of the events group).
    let by_regarding =
        events.list(&ListParams::default().fields("regarding.name=ev-pod")).await.expect("list events.k8s.io");
    assert_eq!(names(&by_regarding.items), set(&["legacy.1"]));
}
