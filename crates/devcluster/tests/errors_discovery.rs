//! Errors and discovery over raw HTTP through kube's client: the status codes and `Status`
//! bodies of the real apiserver for bad paths, methods, bodies and credentials; the legacy and
//! aggregated discovery documents; kube's `Discovery`; the OpenAPI v3 index and documents;
//! `/version` and `/healthz`.
//!
//! Where the expectations come from (Kubernetes 1.33, which devcluster reports):
//! - unknown paths fall through every handler to k8s.io/apiserver/pkg/util/notfoundhandler, which
//!   calls `http.NotFound`: a plain `404 page not found`. A path under a served group-version that
//!   no route matches is answered by go-restful through `serviceErrorHandler`
//!   (apiserver/pkg/server/handler.go) with `NewGenericServerResponse`, as is a method with no
//!   route (405, "the server does not allow this method on the requested resource").
//! - `errors.NewNotFound`/`NewAlreadyExists`/`NewInvalid`/`NewBadRequest`/
//!   `NewRequestEntityTooLargeError` (apimachinery/pkg/api/errors); the body limit is
//!   `MaxRequestBodyBytes` = 3 MiB ("Request entity too large: limit is 3145728").
//! - 415: apiserver/pkg/endpoints/handlers/negotiation `errUnsupportedMediaType` listing the
//!   serializers of the group (JSON, YAML, protobuf for built-ins; CBOR only behind an alpha gate).
//! - decoding failures: handlers/create.go `transformDecodeError`; namespace mismatch:
//!   rest.BeforeCreate ("the namespace of the provided object does not match the namespace sent
//!   on the request").
//! - 401: `filters.Unauthorized` writes `NewUnauthorized("Unauthorized")`. devcluster has no
//!   anonymous user (as `--anonymous-auth=false`), so a request without a token is 401 too.
//! - discovery: endpoints/installer.go sorts the paths of a group-version and the verbs of each
//!   resource; a resource's group/version are set only when its kind lives elsewhere (Scale);
//!   aggregated discovery (`ConvertGroupVersionIntoToDiscovery`) copies those into responseKind.

use devcluster::DevCluster;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, PostParams};
use kube::discovery::Scope;
use kube::runtime::wait::{await_condition, conditions};
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestRunner};
use serde_json::{Value, json};
use std::time::Duration;

/// Raw request through the kube client; returns status, headers and body.
async fn raw(
    client: &Client,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> (u16, http::HeaderMap, Vec<u8>) {
    let mut b = http::Request::builder().method(method).uri(path);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let req = b.body(kube::client::Body::from(body)).expect("a valid request");
    let resp = tokio::time::timeout(Duration::from_secs(20), client.send(req))
        .await
        .expect("the server answers within 20s")
        .expect("the request is sent and answered");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let bytes = tokio::time::timeout(Duration::from_secs(20), resp.into_body().collect_bytes())
        .await
        .expect("the body arrives within 20s")
        .expect("the body is read");
    (status, headers, bytes.to_vec())
}

async fn get(client: &Client, path: &str) -> (u16, http::HeaderMap, Vec<u8>) {
    raw(client, "GET", path, &[], vec![]).await
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn json_of(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(bytes)))
}

fn content_type(h: &http::HeaderMap) -> &str {
    h.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("")
}

const CM_PATH: &str = "/api/v1/namespaces/default/configmaps";
const JSON: (&str, &str) = ("content-type", "application/json");

fn cm_body(name: &str) -> Vec<u8> {
    serde_json::to_vec(
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "1"}}),
    )
    .expect("json")
}

fn status_body(code: u16, reason: &str, message: &str, details: Option<Value>) -> Value {
    let mut s = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason});
    if let Some(d) = details {
        s["details"] = d;
    }
    s["code"] = json!(code);
    s
}

/// Assert a Status response: code, `application/json`, and the body (compared as JSON).
fn assert_status(
    resp: &(u16, http::HeaderMap, Vec<u8>),
    code: u16,
    reason: &str,
    message: &str,
    details: Option<Value>,
) {
    assert_eq!(resp.0, code, "{}", text(&resp.2));
    assert_eq!(content_type(&resp.1), "application/json", "{}", text(&resp.2));
    assert_eq!(json_of(&resp.2), status_body(code, reason, message, details));
}

#[tokio::test]
async fn unknown_paths_are_404() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let c = dc.client();
    // No handler serves the group: the not-found handler at the end of the chain.
    for path in ["/apis/nope/v1/things", "/apis/nope", "/nothing/here"] {
        let (code, headers, body) = get(&c, path).await;
        assert_eq!(code, 404, "{path}");
        assert_eq!(text(&body), "404 page not found\n", "{path}");
        assert_eq!(content_type(&headers), "text/plain; charset=utf-8", "{path}");
    }
}

#[tokio::test]
async fn an_unknown_resource_of_a_served_group_version_is_a_404_status() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let c = dc.client();
    for path in ["/api/v1/namespaces/default/things", "/apis/apps/v1/namespaces/default/things"] {
        let resp = get(&c, path).await;
        assert_status(&resp, 404, "NotFound", "the server could not find the requested resource", Some(json!({})));
    }
}

#[tokio::test]
async fn a_missing_object_is_404_with_the_status_fields_in_order() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let c = dc.client();
    let (code, headers, body) = get(&c, "/api/v1/namespaces/default/configmaps/nope").await;
    assert_eq!(code, 404);
    assert_eq!(content_type(&headers), "application/json");
    // The exact text: metav1.Status fields in their Go declaration order.
    assert_eq!(
        text(&body).trim_end(),
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"configmaps \"nope\" not found","reason":"NotFound","details":{"name":"nope","kind":"configmaps"},"code":404}"#
    );
    let (code, _, body) = get(&c, "/apis/apps/v1/namespaces/default/deployments/nope").await;
    assert_eq!(code, 404);
    assert_eq!(
        text(&body).trim_end(),
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"deployments.apps \"nope\" not found","reason":"NotFound","details":{"name":"nope","group":"apps","kind":"deployments"},"code":404}"#
    );
}

// The status and scale stores of the real registries do not allow create on update
// (`AllowCreateOnUpdate` is false for them, and a custom resource's status REST is built the same
// way): a server-side apply, a PUT or a merge patch to the status of a missing object is 404,
// and nothing is created. An operator that writes the status of an object just deleted sees
// NotFound, not a 422 about the spec its status-only body lacks.
#[tokio::test]
async fn writing_the_status_of_a_missing_object_is_404_and_creates_nothing() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let c = dc.client();
    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    crds.create(&PostParams::default(), &widget_crd()).await.expect("create CRD");
    tokio::time::timeout(
        Duration::from_secs(10),
        await_condition(crds, "widgets.disco.example.com", conditions::is_crd_established()),
    )
    .await
    .expect("established within 10s")
    .expect("waiting");
    let apply = ("content-type", "application/apply-patch+yaml");
    let merge = ("content-type", "application/merge-patch+json");
    let cases = [
        ("/apis/disco.example.com/v1/widgets/gone", "disco.example.com", "widgets", "Widget", "disco.example.com/v1"),
        ("/apis/apps/v1/namespaces/default/deployments/gone", "apps", "deployments", "Deployment", "apps/v1"),
    ];
    for (path, group, plural, kind, api_version) in cases {
        let body =
            json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "gone"}, "status": {"replicas": 1}});
        let bytes = serde_json::to_vec(&body).expect("JSON");
        for (method, headers, query) in
            [("PATCH", [apply], "?fieldManager=op&force=true"), ("PATCH", [merge], ""), ("PUT", [JSON], "")]
        {
            let resp = raw(&c, method, &format!("{path}/status{query}"), &headers, bytes.clone()).await;
            assert_eq!(resp.0, 404, "{method} {path}/status ({headers:?}): {}", text(&resp.2));
            let status = json_of(&resp.2);
            assert_eq!(status["reason"], "NotFound", "{}", text(&resp.2));
            assert_eq!(status["details"]["kind"], plural);
            if !group.is_empty() {
                assert_eq!(status["details"]["group"], group);
            }
            assert_eq!(get(&c, path).await.0, 404, "{method} {path}/status created the object");
        }
    }
}

// NewGenericServerResponse always sets Details, so the body has `"details":{}`.
#[tokio::test]
async fn a_method_without_a_route_is_405() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let c = dc.client();
    let msg = "the server does not allow this method on the requested resource";
    // POST to an object path.
    let resp = raw(&c, "POST", &format!("{CM_PATH}/x"), &[JSON], cm_body("x")).await;
    assert_status(&resp, 405, "MethodNotAllowed", msg, Some(json!({})));
    // PUT to a collection.
    let resp = raw(&c, "PUT", CM_PATH, &[JSON], cm_body("x")).await;
    assert_status(&resp, 405, "MethodNotAllowed", msg, Some(json!({})));
    // Nothing was created.
    assert_eq!(get(&c, &format!("{CM_PATH}/x")).await.0, 404);
}

#[tokio::test]
async fn creating_an_existing_name_is_409() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let c = dc.client();
    let first = raw(&c, "POST", CM_PATH, &[JSON], cm_body("dup")).await;
    assert_eq!(first.0, 201, "{}", text(&first.2));
    let resp = raw(&c, "POST", CM_PATH, &[JSON], cm_body("dup")).await;
    assert_eq!(
        text(&resp.2).trim_end(),
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"configmaps \"dup\" already exists","reason":"AlreadyExists","details":{"name":"dup","kind":"configmaps"},"code":409}"#
    );
    assert_eq!(resp.0, 409);
}

#[tokio::test]
async fn a_body_over_three_mebibytes_is_413() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let c = dc.client();
    let big = "x".repeat(3 * 1024 * 1024);
    let body = serde_json::to_vec(
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"}, "data": {"a": big}}),
    )
    .expect("json");
    let resp = raw(&c, "POST", CM_PATH, &[JSON], body).await;
    assert_status(&resp, 413, "RequestEntityTooLarge", "Request entity too large: limit is 3145728", None);
    assert_eq!(get(&c, &format!("{CM_PATH}/big")).await.0, 404);
}

// Recorded from a real server: 'the body of the request was in an unknown format - accepted media
// types include: application/json, application/yaml, application/vnd.kubernetes.protobuf'.
#[tokio::test]
async fn an_unknown_content_type_is_415() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let c = dc.client();
    let resp = raw(&c, "POST", CM_PATH, &[("content-type", "text/plain")], cm_body("t")).await;
    assert_status(
        &resp,
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf",
        None,
    );
}

#[tokio::test]
async fn an_invalid_object_is_422_with_its_causes() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let c = dc.client();
    let resp = raw(&c, "POST", CM_PATH, &[JSON], cm_body("Bad_Name")).await;
    let detail = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    assert_status(
        &resp,
        422,
        "Invalid",
        &format!("ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": {detail}"),
        Some(json!({
            "name": "Bad_Name",
            "kind": "ConfigMap",
            "causes": [{"reason": "FieldValueInvalid", "message": format!("Invalid value: \"Bad_Name\": {detail}"), "field": "metadata.name"}]
        })),
    );
}

fn bad_request_message(resp: &(u16, http::HeaderMap, Vec<u8>)) -> String {
    assert_eq!(resp.0, 400, "{}", text(&resp.2));
    let s = json_of(&resp.2);
    assert_eq!(
        (s["kind"].as_str(), s["status"].as_str(), s["reason"].as_str(), s["code"].as_u64()),
        (Some("Status"), Some("Failure"), Some("BadRequest"), Some(400)),
        "{s}"
    );
    s["message"].as_str().expect("a message").to_string()
}

/// Nothing but the root CA ConfigMap is stored in default.
async fn assert_nothing_stored(c: &Client) {
    let (_, _, list) = get(c, CM_PATH).await;
    let names: Vec<String> = json_of(&list)["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    assert_eq!(names, vec!["kube-root-ca.crt"]);
}

// The decoder cannot find the kind (serializer/json meta.go: "couldn't get version/kind; json
// parse error: %v"), so transformDecodeError summarizes the body: its first 30 bytes when it
// starts with '{', then " ...".
#[tokio::test]
async fn malformed_json_is_400() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let c = dc.client();
    let resp =
        raw(&c, "POST", CM_PATH, &[JSON], br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"#.to_vec()).await;
    assert_eq!(
        bad_request_message(&resp),
        r#"the object provided is unrecognized (must be of type ConfigMap): couldn't get version/kind; json parse error: unexpected end of JSON input ({"apiVersion":"v1","kind":"Con ...)"#
    );
    assert_nothing_stored(&c).await;
}

// YAMLToJSON fails before the kind is known (go-yaml: "yaml: line N: ..."), so
// transformDecodeError reports "the object provided is unrecognized" with the body summarized,
// in hex when it does not start with '{'.
#[tokio::test]
async fn malformed_yaml_is_400() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let c = dc.client();
    let body = b"kind: ConfigMap\n  metadata: [\n".to_vec();
    let hex: String = body.iter().map(|b| format!("{b:02x}")).collect();
    let resp = raw(&c, "POST", CM_PATH, &[("content-type", "application/yaml")], body).await;
    let m = bad_request_message(&resp);
    assert!(m.starts_with("the object provided is unrecognized (must be of type ConfigMap): "), "{m}");
    assert!(m.contains("yaml: "), "{m}");
    assert!(m.ends_with(&format!(" ({hex})")), "{m}");
    assert_nothing_stored(&c).await;
}

// A Secret decodes, then fails to convert into the endpoint's ConfigMap; transformDecodeError
// then says "%s in version %q cannot be handled as a %s: %v".
#[tokio::test]
async fn a_body_of_another_kind_is_400() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let c = dc.client();
    let secret =
        serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}})).expect("json");
    let m = bad_request_message(&raw(&c, "POST", CM_PATH, &[JSON], secret).await);
    assert!(m.starts_with("Secret in version \"v1\" cannot be handled as a ConfigMap: "), "{m}");
    assert_nothing_stored(&c).await;
}

// apps/v1 has no ConfigMap kind: decoding fails in UseOrCreateObject ("no kind \"ConfigMap\" is
// registered for version \"apps/v1\" ..."), before the handler's API-version check is reached.
#[tokio::test]
async fn a_body_of_another_api_version_is_400() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let c = dc.client();
    let other = serde_json::to_vec(&json!({"apiVersion": "apps/v1", "kind": "ConfigMap", "metadata": {"name": "o"}}))
        .expect("json");
    let m = bad_request_message(&raw(&c, "POST", CM_PATH, &[JSON], other).await);
    assert!(m.starts_with("ConfigMap in version \"apps/v1\" cannot be handled as a ConfigMap: "), "{m}");
    assert_nothing_stored(&c).await;
}

#[tokio::test]
async fn a_namespace_in_the_body_that_differs_from_the_url_is_400() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let c = dc.client();
    let elsewhere = serde_json::to_vec(
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "n", "namespace": "kube-system"}}),
    )
    .expect("json");
    let resp = raw(&c, "POST", CM_PATH, &[JSON], elsewhere).await;
    assert_status(
        &resp,
        400,
        "BadRequest",
        "the namespace of the provided object does not match the namespace sent on the request",
        None,
    );
    assert_nothing_stored(&c).await;
    assert_eq!(get(&c, "/api/v1/namespaces/kube-system/configmaps/n").await.0, 404);
}

async fn client_with_token(dc: &DevCluster, token: Option<&str>) -> Client {
    let mut kc = kube::config::Kubeconfig::from_yaml(dc.kubeconfig_yaml()).expect("the kubeconfig parses");
    for named in &mut kc.auth_infos {
        if let Some(info) = named.auth_info.as_mut() {
            info.token = token.map(|t| t.to_string().into());
        }
    }
    let config = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .expect("a config from the kubeconfig");
    Client::try_from(config).expect("a client")
}

#[tokio::test]
async fn requests_without_valid_credentials_are_401() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    // A token that does not verify is 401.
    let c = client_with_token(&dc, Some("not-the-token")).await;
    let resp = get(&c, CM_PATH).await;
    assert_eq!(
        text(&resp.2).trim_end(),
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}"#
    );
    assert_eq!(resp.0, 401);
    let err = Api::<ConfigMap>::default_namespaced(c.clone())
        .create(&PostParams::default(), &serde_json::from_slice(&cm_body("u")).expect("a ConfigMap"))
        .await
        .expect_err("no write without credentials");
    match err {
        kube::Error::Api(s) => assert_eq!((s.code, s.reason.as_str()), (401, "Unauthorized")),
        other => panic!("{other:?}"),
    }
    // No token at all: the anonymous user (anonymous auth is on by default, as upstream), whom
    // RBAC allows nothing but the public endpoints.
    let anon = client_with_token(&dc, None).await;
    let resp = get(&anon, CM_PATH).await;
    assert_eq!(resp.0, 403, "{}", text(&resp.2));
    assert_eq!(
        json_of(&resp.2)["message"],
        "configmaps is forbidden: User \"system:anonymous\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"default\""
    );
    assert_eq!(get(&anon, "/version").await.0, 200);
    assert_eq!(get(&dc.client(), &format!("{CM_PATH}/u")).await.0, 404);
}

#[test]
fn garbage_bodies_never_get_a_5xx_or_a_hang() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a runtime");
    let dc = rt.block_on(DevCluster::start()).expect("devcluster starts");
    let c = dc.client();
    let made = rt.block_on(raw(&c, "POST", CM_PATH, &[JSON], cm_body("target")));
    assert_eq!(made.0, 201, "{}", text(&made.2));
    let target = format!("{CM_PATH}/target");
    let endpoints: Vec<(&str, String, &str)> = vec![
        ("POST", CM_PATH.to_string(), "application/json"),
        ("POST", "/apis/apps/v1/namespaces/default/deployments".to_string(), "application/json"),
        ("POST", CM_PATH.to_string(), "application/yaml"),
        ("PUT", target.clone(), "application/json"),
        ("PATCH", target.clone(), "application/merge-patch+json"),
        ("PATCH", target.clone(), "application/strategic-merge-patch+json"),
        ("PATCH", target, "application/json-patch+json"),
    ];
    let mut runner =
        TestRunner::new(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() });
    let garbage = prop_oneof![
        prop::collection::vec(any::<u8>(), 1..512),
        // Mostly-JSON garbage: structural characters, quotes, keys the server knows.
        prop::collection::vec(
            prop::sample::select(vec![
                "{",
                "}",
                "[",
                "]",
                ":",
                ",",
                "\"",
                "null",
                "1e999",
                "-",
                "\"kind\"",
                "\"apiVersion\"",
                "\"metadata\"",
                "\"v1\"",
                "\"ConfigMap\"",
                "\"name\"",
                "\\u0000",
                "true",
                "\n",
            ]),
            1..64
        )
        .prop_map(|parts| parts.concat().into_bytes()),
    ];
    let result = runner.run(&(garbage, 0..endpoints.len()), |(body, i)| {
        let (method, path, ct) = &endpoints[i];
        let (code, _, resp) = rt.block_on(raw(&c, method, path, &[("content-type", ct)], body.clone()));
        prop_assert!(
            (400..500).contains(&code),
            "{method} {path} ({ct}) with {:?} answered {code}: {}",
            String::from_utf8_lossy(&body),
            text(&resp)
        );
        Ok(())
    });
    result.expect("every garbage body gets a 4xx");
    // The server still works.
    let after = rt.block_on(get(&c, &format!("{CM_PATH}/target")));
    assert_eq!(after.0, 200);
    drop(c);
    drop(dc);
}

fn without_hash(mut v: Value) -> Value {
    if let Some(m) = v.as_object_mut() {
        let h = m.remove("storageVersionHash");
        assert!(h.as_ref().and_then(Value::as_str).is_some_and(|s| !s.is_empty()), "a storageVersionHash: {h:?}");
    }
    v
}

fn resource<'a>(list: &'a Value, name: &str) -> &'a Value {
    list["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("{name} not listed"))
}

const ALL_VERBS: [&str; 8] = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];

#[tokio::test]
async fn legacy_discovery_of_the_core_group() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let c = dc.client();

    let (code, _, body) = get(&c, "/api").await;
    assert_eq!(code, 200);
    assert_eq!(
        json_of(&body),
        json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": dc.addr().to_string()}]
        })
    );

    let (code, _, body) = get(&c, "/api/v1").await;
    assert_eq!(code, 200);
    let list = json_of(&body);
    assert_eq!((list["kind"].as_str(), list["groupVersion"].as_str()), (Some("APIResourceList"), Some("v1")));
    assert_eq!(
        without_hash(resource(&list, "configmaps").clone()),
        json!({"name": "configmaps", "singularName": "configmap", "namespaced": true, "kind": "ConfigMap", "verbs": ALL_VERBS, "shortNames": ["cm"]})
    );
    assert_eq!(
        without_hash(resource(&list, "pods").clone()),
        json!({"name": "pods", "singularName": "pod", "namespaced": true, "kind": "Pod", "verbs": ALL_VERBS, "shortNames": ["po"], "categories": ["all"]})
    );
    assert_eq!(
        resource(&list, "pods/status"),
        &json!({"name": "pods/status", "singularName": "", "namespaced": true, "kind": "Pod", "verbs": ["get", "patch", "update"]})
    );
    assert_eq!(
        without_hash(resource(&list, "nodes").clone()),
        json!({"name": "nodes", "singularName": "node", "namespaced": false, "kind": "Node", "verbs": ALL_VERBS, "shortNames": ["no"]})
    );
}

// The namespace REST storage has no DeleteCollection (recorded /api/v1 documents list namespaces
// with verbs create, delete, get, list, patch, update, watch), and namespaces/finalize.
#[tokio::test]
async fn legacy_discovery_of_namespaces() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let (_, _, body) = get(&dc.client(), "/api/v1").await;
    let list = json_of(&body);
    assert_eq!(
        without_hash(resource(&list, "namespaces").clone()),
        json!({"name": "namespaces", "singularName": "namespace", "namespaced": false, "kind": "Namespace", "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"], "shortNames": ["ns"]})
    );
    assert_eq!(
        resource(&list, "namespaces/finalize"),
        &json!({"name": "namespaces/finalize", "singularName": "", "namespaced": false, "kind": "Namespace", "verbs": ["update"]})
    );
}

#[tokio::test]
async fn legacy_discovery_of_apps() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let c = dc.client();

    let (code, _, body) = get(&c, "/apis").await;
    assert_eq!(code, 200);
    let groups = json_of(&body);
    assert_eq!((groups["kind"].as_str(), groups["apiVersion"].as_str()), (Some("APIGroupList"), Some("v1")));
    let apps =
        groups["groups"].as_array().expect("groups").iter().find(|g| g["name"] == "apps").expect("apps is listed");
    assert_eq!(
        apps,
        &json!({"name": "apps", "versions": [{"groupVersion": "apps/v1", "version": "v1"}], "preferredVersion": {"groupVersion": "apps/v1", "version": "v1"}})
    );

    let (code, _, body) = get(&c, "/apis/apps").await;
    assert_eq!(code, 200);
    assert_eq!(
        json_of(&body),
        json!({"kind": "APIGroup", "apiVersion": "v1", "name": "apps", "versions": [{"groupVersion": "apps/v1", "version": "v1"}], "preferredVersion": {"groupVersion": "apps/v1", "version": "v1"}})
    );

    let (code, _, body) = get(&c, "/apis/apps/v1").await;
    assert_eq!(code, 200);
    let list = json_of(&body);
    assert_eq!(
        (list["kind"].as_str(), list["apiVersion"].as_str(), list["groupVersion"].as_str()),
        (Some("APIResourceList"), Some("v1"), Some("apps/v1"))
    );
    assert_eq!(
        without_hash(resource(&list, "deployments").clone()),
        json!({"name": "deployments", "singularName": "deployment", "namespaced": true, "kind": "Deployment", "verbs": ALL_VERBS, "shortNames": ["deploy"], "categories": ["all"]})
    );
    assert_eq!(
        resource(&list, "deployments/status"),
        &json!({"name": "deployments/status", "singularName": "", "namespaced": true, "kind": "Deployment", "verbs": ["get", "patch", "update"]})
    );
    assert_eq!(
        resource(&list, "deployments/scale"),
        &json!({"name": "deployments/scale", "singularName": "", "namespaced": true, "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"]})
    );
}

// APIInstaller.Install sorts the paths of a group-version before registering them.
#[tokio::test]
async fn legacy_discovery_lists_resources_in_path_order() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let (_, _, body) = get(&dc.client(), "/apis/apps/v1").await;
    let list = json_of(&body);
    let names: Vec<&str> =
        list["resources"].as_array().expect("resources").iter().filter_map(|r| r["name"].as_str()).collect();
    assert_eq!(
        names,
        vec![
            "controllerrevisions",
            "daemonsets",
            "daemonsets/status",
            "deployments",
            "deployments/scale",
            "deployments/status",
            "replicasets",
            "replicasets/scale",
            "replicasets/status",
            "statefulsets",
            "statefulsets/scale",
            "statefulsets/status",
        ]
    );
}

const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

#[tokio::test]
async fn aggregated_discovery_says_what_it_is() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let c = dc.client();

    let (code, headers, body) = raw(&c, "GET", "/apis", &[("accept", AGGREGATED)], vec![]).await;
    assert_eq!(code, 200);
    assert_eq!(content_type(&headers), AGGREGATED);
    let doc = json_of(&body);
    assert_eq!(
        (doc["kind"].as_str(), doc["apiVersion"].as_str()),
        (Some("APIGroupDiscoveryList"), Some("apidiscovery.k8s.io/v2"))
    );
    let apps = doc["items"].as_array().expect("items").iter().find(|g| g["metadata"]["name"] == "apps").expect("apps");
    let v1 = &apps["versions"][0];
    assert_eq!((v1["version"].as_str(), v1["freshness"].as_str()), (Some("v1"), Some("Current")));
    let deployments = v1["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .find(|r| r["resource"] == "deployments")
        .expect("deployments");
    assert_eq!(deployments["scope"], "Namespaced");
    assert_eq!(deployments["singularResource"], "deployment");
    assert_eq!(deployments["verbs"], json!(ALL_VERBS));
    assert_eq!(deployments["shortNames"], json!(["deploy"]));
    assert_eq!(deployments["categories"], json!(["all"]));
    assert_eq!(deployments["responseKind"]["kind"], "Deployment");
    let mut subs: Vec<&str> = deployments["subresources"]
        .as_array()
        .expect("subresources")
        .iter()
        .filter_map(|s| s["subresource"].as_str())
        .collect();
    subs.sort();
    assert_eq!(subs, vec!["scale", "status"]);
    // The core group is at /api.
    let (code, headers, body) = raw(&c, "GET", "/api", &[("accept", AGGREGATED)], vec![]).await;
    assert_eq!(code, 200);
    assert_eq!(content_type(&headers), AGGREGATED);
    let core = json_of(&body);
    let items = core["items"].as_array().expect("items");
    assert_eq!(items.len(), 1);
    let pods = items[0]["versions"][0]["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .find(|r| r["resource"] == "pods")
        .expect("pods");
    assert_eq!(pods["scope"], "Namespaced");
    assert_eq!(pods["shortNames"], json!(["po"]));
    // Without the Accept, the legacy form.
    let (_, headers, body) = get(&c, "/apis").await;
    assert_eq!(content_type(&headers), "application/json");
    assert_eq!(json_of(&body)["kind"], "APIGroupList");
}

// ConvertGroupVersionIntoToDiscovery copies the legacy APIResource's group and version, which
// are empty unless the kind lives in another group-version (Scale), and appends subresources in
// the sorted order of their paths.
#[tokio::test]
async fn aggregated_discovery_of_a_built_in_resource() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let (_, _, body) = raw(&dc.client(), "GET", "/apis", &[("accept", AGGREGATED)], vec![]).await;
    let doc = json_of(&body);
    let apps = doc["items"].as_array().expect("items").iter().find(|g| g["metadata"]["name"] == "apps").expect("apps");
    let deployments = apps["versions"][0]["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .find(|r| r["resource"] == "deployments")
        .expect("deployments");
    assert_eq!(
        deployments,
        &json!({
            "resource": "deployments",
            "responseKind": {"group": "", "version": "", "kind": "Deployment"},
            "scope": "Namespaced",
            "singularResource": "deployment",
            "verbs": ALL_VERBS,
            "shortNames": ["deploy"],
            "categories": ["all"],
            "subresources": [
                {"subresource": "scale", "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"}, "verbs": ["get", "patch", "update"]},
                {"subresource": "status", "responseKind": {"group": "", "version": "", "kind": "Deployment"}, "verbs": ["get", "patch", "update"]}
            ]
        })
    );
}

fn widget_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.disco.example.com"},
        "spec": {
            "group": "disco.example.com",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "shortNames": ["wdg"]},
            "scope": "Cluster",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"replicas": {"type": "integer"}}},
                    "status": {"type": "object", "properties": {"replicas": {"type": "integer"}}}
                }}},
                "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}}
            }]
        }
    }))
    .expect("a CRD")
}

#[tokio::test]
async fn kube_discovery_finds_built_in_groups_and_an_established_crd() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let c = dc.client();

    for aggregated in [false, true] {
        let d = if aggregated {
            kube::Discovery::new(c.clone()).run_aggregated().await
        } else {
            kube::Discovery::new(c.clone()).run().await
        }
        .expect("discovery runs");
        for g in ["", "apps", "batch", "rbac.authorization.k8s.io", "apiextensions.k8s.io", "coordination.k8s.io"] {
            assert!(d.has_group(g), "group {g:?} (aggregated: {aggregated})");
        }
        assert!(!d.has_group("disco.example.com"));
        let (ar, caps) = d.get("apps").and_then(|g| g.recommended_kind("Deployment")).expect("Deployment");
        assert_eq!((ar.plural.as_str(), ar.api_version.as_str()), ("deployments", "apps/v1"));
        assert_eq!(caps.scope, Scope::Namespaced);
        let mut subs: Vec<&str> = caps.subresources.iter().map(|(r, _)| r.plural.as_str()).collect();
        subs.sort();
        assert_eq!(subs, vec!["scale", "status"], "aggregated: {aggregated}");
        let (ns, ns_caps) = d.get("").and_then(|g| g.recommended_kind("Namespace")).expect("Namespace");
        assert_eq!((ns.plural.as_str(), ns_caps.scope.clone()), ("namespaces", Scope::Cluster));
    }

    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    crds.create(&PostParams::default(), &widget_crd()).await.expect("create CRD");
    tokio::time::timeout(
        Duration::from_secs(10),
        await_condition(crds, "widgets.disco.example.com", conditions::is_crd_established()),
    )
    .await
    .expect("established within 10s")
    .expect("waiting");

    for aggregated in [false, true] {
        let d = if aggregated {
            kube::Discovery::new(c.clone()).run_aggregated().await
        } else {
            kube::Discovery::new(c.clone()).run().await
        }
        .expect("discovery runs");
        let g = d.get("disco.example.com").unwrap_or_else(|| panic!("the CRD's group (aggregated: {aggregated})"));
        assert_eq!(g.preferred_version(), Some("v1"));
        let (ar, caps) = g.recommended_kind("Widget").expect("Widget");
        assert_eq!((ar.plural.as_str(), ar.api_version.as_str()), ("widgets", "disco.example.com/v1"));
        assert_eq!(caps.scope, Scope::Cluster);
        let mut subs: Vec<&str> = caps.subresources.iter().map(|(r, _)| r.plural.as_str()).collect();
        subs.sort();
        assert_eq!(subs, vec!["scale", "status"]);
        assert!(caps.supports_operation("watch") && caps.supports_operation("deletecollection"));
    }

    // The CRD's group in aggregated discovery: a CRD's responseKind carries its group-version.
    let (_, _, body) = raw(&c, "GET", "/apis", &[("accept", AGGREGATED)], vec![]).await;
    let doc = json_of(&body);
    let disco = doc["items"]
        .as_array()
        .expect("items")
        .iter()
        .find(|g| g["metadata"]["name"] == "disco.example.com")
        .expect("group");
    let widgets = &disco["versions"][0]["resources"][0];
    assert_eq!(widgets["resource"], "widgets");
    assert_eq!(widgets["responseKind"], json!({"group": "disco.example.com", "version": "v1", "kind": "Widget"}));
    assert_eq!(widgets["scope"], "Cluster");
    assert_eq!(widgets["shortNames"], json!(["wdg"]));
}

/// Follow `$ref` (and the `allOf: [{$ref}]` wrapper) into `components.schemas`.
fn resolve<'a>(doc: &'a Value, mut node: &'a Value) -> &'a Value {
    for _ in 0..8 {
        let r = node
            .get("$ref")
            .or_else(|| node.get("allOf").and_then(|a| a.get(0)).and_then(|x| x.get("$ref")))
            .and_then(Value::as_str);
        match r.and_then(|r| r.strip_prefix("#/components/schemas/")) {
            Some(name) => node = &doc["components"]["schemas"][name],
            None => return node,
        }
    }
    node
}

#[tokio::test]
async fn openapi_v3_index_and_the_apps_document() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let c = dc.client();

    let (code, _, body) = get(&c, "/openapi/v3").await;
    assert_eq!(code, 200);
    let index = json_of(&body);
    let mut urls = vec![];
    for gv in ["api/v1", "apis/apps/v1"] {
        let url = index["paths"][gv]["serverRelativeURL"].as_str().unwrap_or_else(|| panic!("{gv} listed: {index}"));
        assert!(url.starts_with(&format!("/openapi/v3/{gv}?hash=")), "{url}");
        urls.push(url.to_string());
    }

    let (code, _, body) = get(&c, &urls[1]).await;
    assert_eq!(code, 200);
    let doc = json_of(&body);
    let item = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"];
    let patch = &item["patch"];
    assert_eq!(
        patch["x-kubernetes-group-version-kind"],
        json!({"group": "apps", "kind": "Deployment", "version": "v1"})
    );
    assert_eq!(patch["x-kubernetes-action"], "patch");
    let params = patch["parameters"].as_array().expect("operation parameters");
    let fv = params.iter().find(|p| p["name"] == "fieldValidation").expect("a fieldValidation parameter");
    assert_eq!(fv["in"], "query");
    assert_eq!(fv["schema"]["type"], "string");
    let content = patch["requestBody"]["content"].as_object().expect("patch content types");
    for ct in [
        "application/apply-patch+yaml",
        "application/json-patch+json",
        "application/merge-patch+json",
        "application/strategic-merge-patch+json",
    ] {
        assert!(content.contains_key(ct), "{ct} missing from {:?}", content.keys().collect::<Vec<_>>());
    }

    let deployment = &doc["components"]["schemas"]["io.k8s.api.apps.v1.Deployment"];
    assert_eq!(
        deployment["x-kubernetes-group-version-kind"],
        json!([{"group": "apps", "kind": "Deployment", "version": "v1"}])
    );
    let dspec = resolve(&doc, &deployment["properties"]["spec"]);
    let template = resolve(&doc, &dspec["properties"]["template"]);
    let pod_spec = resolve(&doc, &template["properties"]["spec"]);
    let containers = &pod_spec["properties"]["containers"];
    assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
    assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");
    assert_eq!(containers["type"], "array");
    assert!(resolve(&doc, &containers["items"])["properties"]["image"].is_object());

    // The core document too.
    let (code, _, body) = get(&c, &urls[0]).await;
    assert_eq!(code, 200);
    let core = json_of(&body);
    assert_eq!(
        core["components"]["schemas"]["io.k8s.api.core.v1.ConfigMap"]["x-kubernetes-group-version-kind"],
        json!([{"group": "", "kind": "ConfigMap", "version": "v1"}])
    );
}

#[tokio::test]
async fn version_and_healthz() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let c = dc.client();
    let (code, headers, body) = get(&c, "/version").await;
    assert_eq!(code, 200);
    assert_eq!(content_type(&headers), "application/json");
    let v = json_of(&body);
    assert_eq!((v["major"].as_str(), v["minor"].as_str()), (Some("1"), Some("33")));
    assert!(v["gitVersion"].as_str().is_some_and(|g| g.starts_with("v1.33.")), "{v}");
    for key in ["gitCommit", "gitTreeState", "buildDate", "goVersion", "compiler", "platform"] {
        assert!(v[key].is_string(), "{key} in {v}");
    }
    let info = c.apiserver_version().await.expect("kube reads /version");
    assert_eq!(info.major, "1");

    let (code, headers, body) = get(&c, "/healthz").await;
    assert_eq!((code, text(&body).as_str()), (200, "ok"));
    assert_eq!(content_type(&headers), "text/plain; charset=utf-8");
}
