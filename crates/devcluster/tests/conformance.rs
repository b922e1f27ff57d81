//! What clients written by other people expect of an API server, checked with their tools: the
//! real `kubectl` and kube's typed `Api`s. Each test names the upstream behaviour it checks
//! (kubernetes/kubernetes, staging/src/k8s.io/... unless said otherwise).

mod support;

use devcluster::DevCluster;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet};
use k8s_openapi::api::authentication::v1::TokenReview;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::core::{GroupVersionKind, Status};
use serde_json::{Value, json};
use std::time::Duration;
use support::kubectl::Kubectl;

async fn start() -> (DevCluster, kube::Client) {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let client = dc.client();
    (dc, client)
}

fn status(res: Result<impl std::fmt::Debug, kube::Error>) -> Status {
    match res {
        Err(kube::Error::Api(s)) => *s,
        other => panic!("expected an API error Status, got {other:?}"),
    }
}

/// A raw request through kube's client (for what its typed API does not offer).
async fn raw(client: &kube::Client, method: &str, path: &str, body: Option<Value>) -> Result<Value, kube::Error> {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(body.map(|b| serde_json::to_vec(&b).expect("json")).unwrap_or_default())
        .expect("a request");
    client.request::<Value>(req).await
}

fn widget(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec}),
    )
    .expect("a widget")
}

async fn widget_crd(client: &kube::Client, plural: &str) -> (Api<DynamicObject>, CustomResourceDefinition) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let kind = "Widget";
    let crd = json!({
        "metadata": {"name": format!("{plural}.example.com")},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": plural, "singular": "widget", "kind": kind, "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object",
                "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}}}}]},
    });
    let made = crds.create(&PostParams::default(), &serde_json::from_value(crd).unwrap()).await.expect("the CRD");
    let name = made.metadata.name.clone().unwrap();
    support::wait::wait_for(&crds, &name, "the CRD to be established", |c| {
        c.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Established" && c.status == "True"))
    })
    .await;
    let gvk = GroupVersionKind::gvk("example.com", "v1", kind);
    let ar = ApiResource::from_gvk_with_plural(&gvk, plural);
    (Api::namespaced_with(client.clone(), "default", &ar), made)
}

// ---------------------------------------------------------------------------------------------
// 1. server-side apply fills list-map keys from their defaults (protocol: TCP)

fn web_deployment() -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27", "ports": [{"containerPort": 80, "name": "http"}]}]},
            },
        },
    })
}

fn web_service() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
    })
}

#[tokio::test]
async fn server_side_apply_of_ports_without_protocol() {
    // sigs.k8s.io/structured-merge-diff typed/helpers.go keyedAssociativeListItemToPathElement
    // takes a missing key field from the schema's default; the real OpenAPI has
    // `default: TCP` for ContainerPort.protocol and ServicePort.protocol (+default="TCP").
    let (_dc, client) = start().await;
    let deps: Api<Deployment> = Api::default_namespaced(client.clone());
    let svcs: Api<Service> = Api::default_namespaced(client.clone());
    let pp = PatchParams::apply("my-controller").force();
    let d = deps.patch("web", &pp, &Patch::Apply(web_deployment())).await.expect("the Deployment applies");
    let ports = d.spec.unwrap().template.spec.unwrap().containers[0].ports.clone().unwrap();
    assert_eq!(ports.len(), 1);
    assert_eq!(ports[0].protocol.as_deref(), Some("TCP"), "defaulted as a real server does");
    let s = svcs.patch("web", &pp, &Patch::Apply(web_service())).await.expect("the Service applies");
    assert_eq!(s.spec.unwrap().ports.unwrap()[0].protocol.as_deref(), Some("TCP"));

    // A controller re-applies on every reconcile: no conflict with itself, no duplicated port.
    let again = deps.patch("web", &pp, &Patch::Apply(web_deployment())).await.expect("the re-apply succeeds");
    assert_eq!(again.metadata.generation, Some(1), "an unchanged apply changes no spec");
    let ports = again.spec.unwrap().template.spec.unwrap().containers[0].ports.clone().unwrap();
    assert_eq!(ports.len(), 1);
    let again = svcs.patch("web", &pp, &Patch::Apply(web_service())).await.expect("the Service re-applies");
    assert_eq!(again.spec.unwrap().ports.unwrap().len(), 1);

    // Naming the protocol explicitly addresses the same item (key containerPort=80,protocol=TCP).
    let mut explicit = web_deployment();
    explicit["spec"]["template"]["spec"]["containers"][0]["ports"][0]["protocol"] = json!("TCP");
    let d = deps.patch("web", &pp, &Patch::Apply(explicit)).await.expect("applies with the protocol named");
    assert_eq!(d.spec.unwrap().template.spec.unwrap().containers[0].ports.as_ref().unwrap().len(), 1);
    // The applied configuration's port is owned with its defaulted key.
    let mf = serde_json::to_string(&d.metadata.managed_fields).unwrap();
    assert!(mf.contains(r#"k:{\"containerPort\":80,\"protocol\":\"TCP\"}"#), "{mf}");

    // Changing the port of one that omits the protocol replaces it (pruned by its owner).
    let mut moved = web_deployment();
    moved["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = json!(8080);
    let d = deps.patch("web", &pp, &Patch::Apply(moved)).await.expect("applies the new port");
    let ports = d.spec.unwrap().template.spec.unwrap().containers[0].ports.clone().unwrap();
    assert_eq!(ports.iter().map(|p| p.container_port).collect::<Vec<_>>(), vec![8080]);
}

#[tokio::test]
async fn kubectl_server_side_apply_of_an_ordinary_deployment() {
    let (dc, client) = start().await;
    let k = Kubectl::new(&dc);
    let manifest = format!(
        "{}\n---\n{}",
        serde_json::to_string(&web_deployment()).unwrap(),
        serde_json::to_string(&web_service()).unwrap()
    );
    let f = k.write("web.yaml", &manifest);
    let out = k.ok(&["apply", "--server-side", "-f", &f]);
    assert!(out.contains("deployment.apps/web serverside-applied"), "{out}");
    assert!(out.contains("service/web serverside-applied"), "{out}");
    let out = k.ok(&["apply", "--server-side", "-f", &f]);
    assert!(out.contains("deployment.apps/web serverside-applied"), "{out}");
    let d: Deployment = Api::default_namespaced(client).get("web").await.expect("get");
    let port = &d.spec.unwrap().template.spec.unwrap().containers[0].ports.clone().unwrap()[0];
    assert_eq!((port.container_port, port.protocol.as_deref()), (80, Some("TCP")));
    // An item that omits a key without a default is still refused as upstream.
    let bad = k.write(
        "bad.yaml",
        r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "x", "volumeMounts": [{"name": "v"}]}]}}"#,
    );
    let err = k.fails(&["apply", "--server-side", "-f", &bad]);
    assert!(err.contains("mountPath"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// 2. DELETE answers the object or a Status, per registry

#[tokio::test]
async fn delete_answers_as_each_registry_does() {
    // apiserver/pkg/registry/generic/registry/store.go finalizeDelete: the deleted object for
    // stores with ReturnDeletedObject (pods, services, serviceaccounts, ...), else a Success
    // Status whose details name the resource (kind: the plural), group and uid.
    let (_dc, client) = start().await;
    let pp = PostParams::default();
    let dp = DeleteParams::default();

    let svcs: Api<Service> = Api::default_namespaced(client.clone());
    svcs.create(&pp, &serde_json::from_value(web_service()).unwrap()).await.expect("service");
    let res = svcs.delete("web", &dp).await.expect("delete service");
    let s = res.left().expect("a Service delete answers the Service");
    assert_eq!(s.metadata.name.as_deref(), Some("web"));

    let sas: Api<ServiceAccount> = Api::default_namespaced(client.clone());
    sas.create(&pp, &serde_json::from_value(json!({"metadata": {"name": "robot"}})).unwrap()).await.expect("sa");
    assert!(sas.delete("robot", &dp).await.expect("delete sa").is_left(), "a ServiceAccount answers itself");

    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let cm = cms.create(&pp, &serde_json::from_value(json!({"metadata": {"name": "c"}})).unwrap()).await.expect("cm");
    let st = cms.delete("c", &dp).await.expect("delete cm").right().expect("a ConfigMap delete answers a Status");
    let d = st.details.clone().expect("details");
    assert_eq!((d.name.as_str(), d.group.as_str(), d.kind.as_str()), ("c", "", "configmaps"));
    assert_eq!(Some(d.uid), cm.metadata.uid);
    assert!(st.is_success(), "{st:?}");
    assert_eq!(status(cms.get("c").await).code, 404);
    // The Status as sent: no code, the resource as `kind` (store.go: "Yes we set Kind field to
    // resource").
    cms.create(&pp, &serde_json::from_value(json!({"metadata": {"name": "c2"}})).unwrap()).await.expect("cm");
    let sent = raw(&client, "DELETE", "/api/v1/namespaces/default/configmaps/c2", None).await.expect("delete c2");
    assert_eq!((sent["kind"].as_str(), sent["status"].as_str()), (Some("Status"), Some("Success")), "{sent}");
    assert_eq!(sent["details"]["kind"], "configmaps");
    assert!(sent.get("code").is_none(), "{sent}");
    let secrets: Api<Secret> = Api::default_namespaced(client.clone());
    secrets.create(&pp, &serde_json::from_value(json!({"metadata": {"name": "s"}})).unwrap()).await.expect("secret");
    assert!(secrets.delete("s", &dp).await.expect("delete secret").is_right());
    let rss: Api<ReplicaSet> = Api::default_namespaced(client.clone());
    let rs = json!({"metadata": {"name": "rs"}, "spec": {"replicas": 0, "selector": {"matchLabels": {"a": "b"}},
        "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}});
    rss.create(&pp, &serde_json::from_value(rs).unwrap()).await.expect("rs");
    assert!(rss.delete("rs", &DeleteParams::background()).await.expect("delete rs").is_right());

    // Custom resources: a Status when gone at once, the object while a finalizer keeps it.
    let (api, _) = widget_crd(&client, "widgets").await;
    api.create(&pp, &widget("w1", json!({"size": 1}))).await.expect("w1");
    let st = api.delete("w1", &dp).await.expect("delete w1").right().expect("a CR deleted at once answers a Status");
    let d = st.details.expect("details");
    assert_eq!((d.group.as_str(), d.kind.as_str()), ("example.com", "widgets"));
    let mut kept = widget("w2", json!({"size": 1}));
    kept.metadata.finalizers = Some(vec!["example.com/keep".into()]);
    api.create(&pp, &kept).await.expect("w2");
    let o = api.delete("w2", &dp).await.expect("delete w2").left().expect("a CR kept by a finalizer answers itself");
    assert!(o.metadata.deletion_timestamp.is_some(), "{o:?}");
}

#[tokio::test]
async fn delete_codes_are_200_unless_orphan_dependents_is_false() {
    // apiserver/pkg/endpoints/handlers/delete.go: 202 only when the object stays and the
    // client sent orphanDependents: false; 200 otherwise, also for an object that stays.
    let (_dc, client) = start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let code = |name: &str, body: Value| {
        let req = http::Request::builder()
            .method("DELETE")
            .uri(format!("/api/v1/namespaces/default/configmaps/{name}"))
            .header("content-type", "application/json")
            .body(kube::client::Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap();
        let client = client.clone();
        async move { client.send(req).await.expect("delete answered").status().as_u16() }
    };
    for name in ["a", "b", "c"] {
        let cm = json!({"metadata": {"name": name, "finalizers": ["example.com/x"]}});
        cms.create(&PostParams::default(), &serde_json::from_value(cm).unwrap()).await.expect("cm");
    }
    assert_eq!(code("a", json!({})).await, 200);
    assert_eq!(code("b", json!({"orphanDependents": false})).await, 202);
    assert_eq!(code("c", json!({"propagationPolicy": "Foreground"})).await, 200);
    let plain = json!({"metadata": {"name": "d"}});
    cms.create(&PostParams::default(), &serde_json::from_value(plain).unwrap()).await.expect("cm");
    assert_eq!(code("d", json!({"orphanDependents": false})).await, 200, "gone at once");
}

#[tokio::test]
async fn deletecollection_answers_the_list_it_deleted_from() {
    // Store.DeleteCollection: the items as listed before their delete, at the list's version.
    let (_dc, client) = start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let kept = json!({"metadata": {"name": "kept", "labels": {"sweep": "yes"}, "finalizers": ["example.com/x"]}});
    cms.create(&PostParams::default(), &serde_json::from_value(kept).unwrap()).await.expect("cm");
    let plain = json!({"metadata": {"name": "plain", "labels": {"sweep": "yes"}}});
    let plain = cms.create(&PostParams::default(), &serde_json::from_value(plain).unwrap()).await.expect("cm");
    let res = cms
        .delete_collection(&DeleteParams::default(), &ListParams::default().labels("sweep=yes"))
        .await
        .expect("deletecollection");
    let list = res.left().expect("the list");
    assert_eq!(list.items.len(), 2);
    assert!(list.items.iter().all(|c| c.metadata.deletion_timestamp.is_none()), "as listed: {list:?}");
    let listed_plain = list.items.iter().find(|c| c.metadata.name.as_deref() == Some("plain")).unwrap();
    assert_eq!(listed_plain.metadata.resource_version, plain.metadata.resource_version);
    let kept = cms.get("kept").await.expect("kept by its finalizer");
    assert!(kept.metadata.deletion_timestamp.is_some());
}

// ---------------------------------------------------------------------------------------------
// 3. built-in objects carry the fields Go always writes

#[tokio::test]
async fn new_objects_carry_the_fields_without_omitempty() {
    let (dc, client) = start().await;
    let pp = PostParams::default();
    let dss: Api<DaemonSet> = Api::default_namespaced(client.clone());
    let ds = json!({"metadata": {"name": "agent"}, "spec": {"selector": {"matchLabels": {"a": "agent"}},
        "template": {"metadata": {"labels": {"a": "agent"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}});
    let made = dss.create(&pp, &serde_json::from_value(ds).unwrap()).await.expect("daemonset");
    let st = made.status.expect("a DaemonSet has a status from the start");
    assert_eq!(
        (st.current_number_scheduled, st.number_misscheduled, st.desired_number_scheduled, st.number_ready),
        (0, 0, 0, 0)
    );
    let k = Kubectl::new(&dc);
    let out: Value = serde_json::from_str(&k.ok(&["get", "ds", "agent", "-o", "json"])).expect("json");
    for f in ["currentNumberScheduled", "numberMisscheduled", "desiredNumberScheduled", "numberReady"] {
        assert!(out["status"].get(f).is_some(), "status.{f} in {}", out["status"]);
    }
    // `kubectl get -o yaml` of a fresh object shows what a real cluster shows.
    assert_eq!(out["spec"]["template"]["metadata"]["creationTimestamp"], Value::Null);
    assert!(out["spec"]["template"]["metadata"].as_object().unwrap().contains_key("creationTimestamp"));
    assert_eq!(out["spec"]["template"]["spec"]["containers"][0]["resources"], json!({}));

    let rss: Api<ReplicaSet> = Api::default_namespaced(client.clone());
    let rs = json!({"metadata": {"name": "rs"}, "spec": {"replicas": 0, "selector": {"matchLabels": {"a": "b"}},
        "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}});
    rss.create(&pp, &serde_json::from_value(rs).unwrap()).await.expect("rs");
    let got = raw(&client, "GET", "/apis/apps/v1/namespaces/default/replicasets/rs", None).await.expect("get rs");
    assert_eq!(got["status"]["replicas"], json!(0), "{}", got["status"]);

    // Pod conditions carry lastProbeTime: null, container statuses their counters.
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let p = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}});
    pods.create(&pp, &serde_json::from_value(p).unwrap()).await.expect("pod");
    support::wait::wait_for(&pods, "p", "the pod to run", |p| {
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
    })
    .await;
    let got = raw(&client, "GET", "/api/v1/namespaces/default/pods/p", None).await.expect("get pod");
    let cond = &got["status"]["conditions"][0];
    assert!(cond.as_object().unwrap().contains_key("lastProbeTime"), "{cond}");
    let cs = &got["status"]["containerStatuses"][0];
    for f in ["ready", "restartCount", "image", "imageID", "lastState"] {
        assert!(cs.get(f).is_some(), "containerStatuses[0].{f} in {cs}");
    }
}

// ---------------------------------------------------------------------------------------------
// 4. TokenReview audiences

async fn token(client: &kube::Client, sa: &str, audiences: &[&str]) -> String {
    let body =
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"audiences": audiences}});
    let tr = raw(client, "POST", &format!("/api/v1/namespaces/default/serviceaccounts/{sa}/token"), Some(body))
        .await
        .expect("a token");
    tr["status"]["token"].as_str().expect("status.token").to_string()
}

async fn review(client: &kube::Client, token: &str, audiences: &[&str]) -> TokenReview {
    let mut spec = json!({"token": token});
    if !audiences.is_empty() {
        spec["audiences"] = json!(audiences);
    }
    let api: Api<TokenReview> = Api::all(client.clone());
    api.create(&PostParams::default(), &serde_json::from_value(json!({"spec": spec})).unwrap()).await.expect("review")
}

#[tokio::test]
async fn token_review_audiences_are_the_intersection() {
    // pkg/registry/authentication/tokenreview/storage.go and pkg/serviceaccount/jwt.go.
    let (_dc, client) = start().await;
    let sas: Api<ServiceAccount> = Api::default_namespaced(client.clone());
    sas.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "robot"}})).unwrap())
        .await
        .expect("sa");
    let issuer = "https://kubernetes.default.svc.cluster.local";

    let vault = token(&client, "robot", &["vault", "nats"]).await;
    let st = review(&client, &vault, &["nats", "other"]).await.status.expect("status");
    assert_eq!(st.authenticated, Some(true));
    assert_eq!(st.audiences, Some(vec!["nats".to_string()]));
    assert_eq!(st.user.unwrap().username.as_deref(), Some("system:serviceaccount:default:robot"));

    // No audience in the review: the server's; a token for others is not authenticated.
    let st = review(&client, &vault, &[]).await.status.expect("status");
    assert_ne!(st.authenticated, Some(true));
    assert_eq!(
        st.error.as_deref(),
        Some(format!(r#"token audiences ["vault" "nats"] is invalid for the target audiences ["{issuer}"]"#).as_str())
    );
    assert_eq!(st.audiences, None);
    let st = review(&client, &vault, &["other"]).await.status.expect("status");
    assert_ne!(st.authenticated, Some(true));
    assert!(st.error.unwrap().contains(r#"invalid for the target audiences ["other"]"#));

    // Not a token any authenticator claims: not authenticated, no error; a token of this
    // issuer that does not verify: an error.
    let st = review(&client, "not-a-jwt", &[]).await.status.expect("status");
    assert_eq!((st.authenticated, st.error.as_deref()), (None, None));
    let tampered = format!("{}.AAAA", &vault[..vault.rfind('.').expect("a JWT")]);
    let st = review(&client, &tampered, &["nats"]).await.status.expect("status");
    assert_ne!(st.authenticated, Some(true));
    assert!(st.error.is_some(), "{st:?}");
    let default = token(&client, "robot", &[]).await;
    let st = review(&client, &default, &[]).await.status.expect("status");
    assert_eq!((st.authenticated, st.audiences), (Some(true), Some(vec![issuer.to_string()])));
    let st = review(&client, &default, &["x", issuer]).await.status.expect("status");
    assert_eq!(st.audiences, Some(vec![issuer.to_string()]));
}

// ---------------------------------------------------------------------------------------------
// 5. field selectors match Go zero values

#[tokio::test]
async fn field_selectors_match_unset_fields_as_go_zero_values() {
    let (dc, client) = start().await;
    let nodes: Api<Node> = Api::all(client.clone());
    let all = nodes.list(&ListParams::default()).await.expect("nodes").items;
    assert!(!all.is_empty());
    let schedulable = nodes.list(&ListParams::default().fields("spec.unschedulable=false")).await.expect("list");
    assert_eq!(schedulable.items.len(), all.len(), "no node sets spec.unschedulable: all match false");
    let name = all[0].metadata.name.clone().unwrap();
    let k = Kubectl::new(&dc);
    k.ok(&["cordon", &name]);
    let schedulable = nodes.list(&ListParams::default().fields("spec.unschedulable=false")).await.expect("list");
    assert_eq!(schedulable.items.len(), all.len() - 1);
    let cordoned = nodes.list(&ListParams::default().fields("spec.unschedulable!=false")).await.expect("list");
    assert_eq!(cordoned.items.iter().filter_map(|n| n.metadata.name.clone()).collect::<Vec<_>>(), vec![name.clone()]);
    k.ok(&["uncordon", &name]);

    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let p = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}});
    pods.create(&PostParams::default(), &serde_json::from_value(p).unwrap()).await.expect("pod");
    let host = pods.list(&ListParams::default().fields("spec.hostNetwork=false")).await.expect("list");
    assert_eq!(host.items.len(), 1, "a pod without hostNetwork matches false");

    let rss: Api<ReplicaSet> = Api::default_namespaced(client.clone());
    let rs = json!({"metadata": {"name": "rs"}, "spec": {"replicas": 0, "selector": {"matchLabels": {"a": "b"}},
        "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}});
    rss.create(&PostParams::default(), &serde_json::from_value(rs).unwrap()).await.expect("rs");
    let zero = rss.list(&ListParams::default().fields("status.replicas=0")).await.expect("list");
    assert_eq!(zero.items.len(), 1);
}

// ---------------------------------------------------------------------------------------------
// 6. deleting a CRD: the cleanup finalizer, Terminating, its objects first

const WAIT: Duration = Duration::from_secs(20);

#[tokio::test]
async fn deleting_a_crd_cleans_up_its_objects_first() {
    // apiextensions-apiserver pkg/controller/finalizer/crd_finalizer.go and
    // pkg/apiserver/customresource_handler.go (create refused while terminating).
    let (_dc, client) = start().await;
    let (api, _) = widget_crd(&client, "widgets").await;
    let pp = PostParams::default();
    let mut kept = widget("kept", json!({"size": 1}));
    kept.metadata.finalizers = Some(vec!["example.com/keep".into()]);
    api.create(&pp, &kept).await.expect("kept");
    api.create(&pp, &widget("plain", json!({"size": 2}))).await.expect("plain");

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let answered = crds.delete("widgets.example.com", &DeleteParams::default()).await.expect("delete the CRD");
    let crd = answered.left().expect("the CRD stays while it is cleaned up and is answered");
    assert!(crd.metadata.deletion_timestamp.is_some());
    assert!(
        crd.metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| f.iter().any(|f| f == "customresourcecleanup.apiextensions.k8s.io")),
        "{:?}",
        crd.metadata.finalizers
    );
    let rv = crd.metadata.resource_version.clone().unwrap();
    let mut events = crds
        .watch(&WatchParams::default().fields("metadata.name=widgets.example.com"), &rv)
        .await
        .expect("watch")
        .boxed();

    // The CRD turns Terminating; its objects are deleted, the kept one waits for its finalizer.
    let terminating = support::wait::wait_for(&crds, "widgets.example.com", "the Terminating condition", |c| {
        c.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Terminating" && c.status == "True"))
    })
    .await;
    let cond = terminating.status.unwrap().conditions.unwrap().into_iter().find(|c| c.type_ == "Terminating").unwrap();
    assert_eq!(
        (cond.reason.as_deref(), cond.message.as_deref()),
        (Some("InstanceDeletionInProgress"), Some("CustomResource deletion is in progress"))
    );
    support::wait::wait_for(&api, "kept", "the kept widget to be deleting", |w| {
        w.metadata.deletion_timestamp.is_some()
    })
    .await;
    let gone = tokio::time::timeout(WAIT, async {
        loop {
            if matches!(api.get("plain").await, Err(kube::Error::Api(s)) if s.code == 404) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(gone.is_ok(), "the widget without finalizers goes");

    // No new objects of a terminating CRD.
    let err = status(api.create(&pp, &widget("late", json!({}))).await);
    assert_eq!((err.code, err.reason.as_str()), (405, "MethodNotAllowed"), "{err:?}");
    assert_eq!(err.message, "create not allowed while custom resource definition is terminating");

    // The CRD is still there; it goes when the kept widget's finalizer is removed.
    crds.get("widgets.example.com").await.expect("the CRD waits for its objects");
    api.patch("kept", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await
        .expect("finalizer removed");
    let mut saw_modified = false;
    let deleted = tokio::time::timeout(WAIT, async {
        while let Some(ev) = events.try_next().await.expect("watch event") {
            match ev {
                WatchEvent::Modified(c) => {
                    assert!(c.metadata.deletion_timestamp.is_some());
                    saw_modified = true;
                }
                WatchEvent::Deleted(_) => return true,
                _ => {}
            }
        }
        false
    })
    .await;
    assert_eq!(deleted, Ok(true), "the watch sees the CRD deleted");
    assert!(saw_modified, "the watch saw the CRD still there first");
    assert_eq!(status(crds.get("widgets.example.com").await).code, 404);
}

// ---------------------------------------------------------------------------------------------
// 7. multi-version CRDs: each version's schema

async fn two_version_crd(client: &kube::Client) -> (Api<DynamicObject>, Api<DynamicObject>) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let schema = |props: Value| json!({"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": props}}}});
    let crd = json!({
        "metadata": {"name": "gadgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [
                {"name": "v1", "served": true, "storage": true, "schema": schema(json!({
                    "color": {"type": "string", "default": "red"},
                    "replicas": {"type": "integer"}}))},
                {"name": "v2", "served": true, "storage": false, "schema": schema(json!({
                    "color": {"type": "string", "default": "blue"},
                    "replicas": {"type": "integer", "maximum": 5},
                    "extra": {"type": "string"}}))},
            ]},
    });
    crds.create(&PostParams::default(), &serde_json::from_value(crd).unwrap()).await.expect("the CRD");
    support::wait::wait_for(&crds, "gadgets.example.com", "the CRD to be established", |c| {
        c.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Established" && c.status == "True"))
    })
    .await;
    let api = |v: &str| {
        let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("example.com", v, "Gadget"), "gadgets");
        Api::<DynamicObject>::namespaced_with(client.clone(), "default", &ar)
    };
    (api("v1"), api("v2"))
}

fn gadget(version: &str, name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({"apiVersion": format!("example.com/{version}"), "kind": "Gadget",
        "metadata": {"name": name}, "spec": spec}))
    .expect("a gadget")
}

#[tokio::test]
async fn each_version_of_a_crd_prunes_defaults_and_validates_with_its_schema() {
    // apiextensions-apiserver pkg/apiserver/customresource_handler.go: requests are decoded,
    // pruned, defaulted and validated with the schema of their version; the stored object is
    // pruned with the storage version's (schemaCoercingConverter); reads apply the storage
    // version's defaults (unstructuredDefaulter on decode) and prune with the version read.
    let (_dc, client) = start().await;
    let (v1, v2) = two_version_crd(&client).await;
    let pp = PostParams::default();

    let a = v1.create(&pp, &gadget("v1", "a", json!({"replicas": 9}))).await.expect("v1 has no maximum");
    assert_eq!(a.data["spec"]["color"], "red", "v1's default");
    let err = status(v2.create(&pp, &gadget("v2", "b", json!({"replicas": 9}))).await);
    assert_eq!(err.code, 422, "v2's maximum: {err:?}");
    assert!(err.message.contains("spec.replicas"), "{}", err.message);
    let b = v2.create(&pp, &gadget("v2", "b", json!({"replicas": 3, "extra": "x"}))).await.expect("v2 create");
    assert_eq!(b.types.as_ref().unwrap().api_version, "example.com/v2");
    assert_eq!(b.data["spec"]["color"], "blue", "v2's default on a v2 request");
    // `extra` is unknown to the storage version: not stored.
    assert!(b.data["spec"].get("extra").is_none(), "{}", b.data);
    let b1 = v1.get("b").await.expect("read through v1");
    assert_eq!(b1.types.as_ref().unwrap().api_version, "example.com/v1");
    assert_eq!(b1.data["spec"], json!({"color": "blue", "replicas": 3}));
    // Unknown fields of v1 writes through v2's view: pruned too.
    let a2 = v2.get("a").await.expect("read through v2");
    assert_eq!(a2.data["spec"], json!({"color": "red", "replicas": 9}));

    // A default added to the storage version later shows on read, without a write.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let patch = json!([{"op": "add", "path": "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/mode",
        "value": {"type": "string", "default": "fast"}}]);
    crds.patch(
        "gadgets.example.com",
        &PatchParams::default(),
        &Patch::<Value>::Json(serde_json::from_value(patch).unwrap()),
    )
    .await
    .expect("CRD patched");
    let read = tokio::time::timeout(WAIT, async {
        loop {
            let a = v1.get("a").await.expect("get");
            if a.data["spec"].get("mode").is_some() {
                return a;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the new default applies on read");
    assert_eq!(read.data["spec"]["mode"], "fast");
    assert_eq!(read.metadata.resource_version, a.metadata.resource_version, "nothing was written");
    let list = v1.list(&ListParams::default()).await.expect("list");
    assert!(list.items.iter().all(|g| g.data["spec"]["mode"] == "fast"));
    // v2 does not know `mode`: pruned from its view.
    assert!(v2.get("a").await.expect("get v2").data["spec"].get("mode").is_none());
}
