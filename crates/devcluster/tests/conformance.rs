//! What clients written by other people expect of an API server, checked with their tools: the
//! real `kubectl` and kube's typed `Api`s. Each test names the upstream behaviour it checks
//! (kubernetes/kubernetes, staging/src/k8s.io/... unless said otherwise).

mod support;

use devcluster::DevCluster;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, PostParams};
use kube::core::{GroupVersionKind, Status};
use serde_json::{Value, json};

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
