//! A CustomResourceDefinition derived with kube's `CustomResource` + `KubeSchema`, installed the
//! way an operator installs it, and the real apiserver's behaviour for its custom resources:
//! schema validation (types, required, enum, pattern, bounds, sizes, int-or-string, nullable),
//! defaulting, pruning and `fieldValidation`, CEL rules and transition rules, printer columns,
//! the published OpenAPI v3 schema, the scale subresource, name conflicts, invalid CRDs, and what
//! deleting a CRD does to its objects.
//!
//! Expected texts are the Kubernetes 1.33 ones (devcluster reports v1.33). Where they come from:
//! - schema errors: k8s.io/apiextensions-apiserver/pkg/apiserver/validation/validation.go
//!   (`kubeOpenAPIResultToFieldErrors`) over the messages of k8s.io/kube-openapi
//!   pkg/validation/errors/schema.go ("%s in body must be of type %s: %q", "should be less than or
//!   equal to %v", "should match '%s'", "should be at least %d chars long", "should have at least
//!   %d items"); type errors carry the JSON type name of the bad value as their value.
//! - `field.Error` formatting: k8s.io/apimachinery/pkg/util/validation/field/errors.go. In 1.33 a
//!   nil bad value prints as `"null"` (quoted); JSON rendering of values came with
//!   kubernetes/kubernetes#132314 in 1.34. TooLong says "may not be more than N bytes"
//!   (kubernetes/kubernetes#128553).
//! - CEL: apiextensions-apiserver/pkg/apiserver/schema/cel/validation.go: the value of a rule
//!   error is the schema type ("object", "string"), the detail is the message, the evaluated
//!   messageExpression, or "failed rule: <rule>"; a `reason` of FieldValueForbidden makes a
//!   `Forbidden` error; root rules are reported on the nil path, printed `<nil>`; transition rules
//!   (`oldSelf`) are skipped on create.
//! - customresource strategy: when a "blocking" schema error exists (Required, NotSupported,
//!   TooLong, TooMany, TypeInvalid), CEL is not run and the cause
//!   `<nil>: Invalid value: "null": some validation rules were not checked because the object was
//!   invalid; correct the existing errors to complete validation` is added.
//! - kube-openapi validates object properties in Go map order, so the order of several schema
//!   causes is not fixed: the tests compare causes as a set.

use devcluster::DevCluster;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::Status;
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, CustomResource, CustomResourceExt, KubeSchema, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::time::Duration;

const GROUP: &str = "crdtest.example.com";
const CRD_NAME: &str = "gadgets.crdtest.example.com";
const QUALIFIED: &str = "Gadget.crdtest.example.com";
const SKIPPED_RULES: &str = "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation";

/// A Gadget: the custom resource every test here installs.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "crdtest.example.com",
    version = "v1",
    kind = "Gadget",
    namespaced,
    doc = "A Gadget is a thing the tests build.",
    status = "GadgetStatus",
    shortname = "gd",
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".spec.replicas", description = "desired replicas"),
    printcolumn(name = "Mode", type_ = "string", json_path = ".spec.mode"),
    selectable = ".spec.mode",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    validation = Rule::new("self.metadata.name != 'reserved'").message("the name reserved is reserved")
)]
#[x_kube(
    validation = Rule::new("self.replicas % 2 == 0 || self.mode == 'Slow'")
        .message(Message::Expression("'replicas must be even in Fast mode, got ' + string(self.replicas)".into())),
    validation = Rule::new("!has(self.limit) || self.limit <= 100")
        .field_path(".limit")
        .reason(Reason::FieldValueForbidden)
        .message("limit too high")
)]
#[serde(rename_all = "camelCase")]
pub struct GadgetSpec {
    /// How many copies to run.
    #[schemars(range(min = 0, max = 10))]
    pub replicas: i32,
    /// A short lowercase title.
    #[schemars(length(min = 3, max = 12), regex(pattern = r"^[a-z][a-z0-9-]*$"))]
    #[x_kube(validation = Rule::new("!self.startsWith('x')").message("title must not start with x"))]
    pub title: String,
    pub mode: Mode,
    #[serde(default = "default_color")]
    #[x_kube(validation = "self != 'black'")]
    pub color: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 3))]
    pub tags: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<IntOrString>,
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("region is immutable"))]
    pub region: String,
    #[serde(default)]
    pub nickname: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserved_object")]
    pub extra: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
}

fn default_color() -> String {
    "blue".into()
}

fn preserved_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "object", "nullable": true, "x-kubernetes-preserve-unknown-fields": true})
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
pub enum Mode {
    Fast,
    Slow,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, schemars::JsonSchema)]
pub struct GadgetStatus {
    pub replicas: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
}

fn spec(replicas: i32, mode: Mode) -> GadgetSpec {
    GadgetSpec {
        replicas,
        title: "gizmo".into(),
        mode,
        color: "red".into(),
        tags: Some(vec!["a".into()]),
        port: Some(IntOrString::Int(8080)),
        region: "eu".into(),
        nickname: None,
        extra: None,
        limit: None,
    }
}

/// A valid Gadget body as raw JSON, for the tests that send what a typed client cannot.
fn valid_body(name: &str) -> Value {
    json!({
        "apiVersion": "crdtest.example.com/v1",
        "kind": "Gadget",
        "metadata": {"name": name},
        "spec": {"replicas": 2, "title": "gizmo", "mode": "Slow", "color": "red", "region": "eu"}
    })
}

fn with_spec(name: &str, changes: Value) -> Value {
    let mut body = valid_body(name);
    for (k, v) in changes.as_object().expect("changes are an object") {
        if v.is_null() && k.starts_with('-') {
            body["spec"].as_object_mut().expect("spec is an object").remove(&k[1..]);
        } else {
            body["spec"][k] = v.clone();
        }
    }
    body
}

/// Install the Gadget CRD and wait until it is established, as an operator does.
async fn install(client: &Client) -> Api<Gadget> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &Gadget::crd()).await.expect("the derived CRD is accepted");
    tokio::time::timeout(Duration::from_secs(10), await_condition(crds, CRD_NAME, conditions::is_crd_established()))
        .await
        .expect("the CRD is established within 10s")
        .expect("waiting for the CRD");
    Api::default_namespaced(client.clone())
}

fn dynamic(client: &Client) -> Api<DynamicObject> {
    Api::default_namespaced_with(client.clone(), &ApiResource::erase::<Gadget>(&()))
}

async fn create_raw(client: &Client, body: Value) -> Result<DynamicObject, kube::Error> {
    let obj: DynamicObject = serde_json::from_value(body).expect("the body is a DynamicObject");
    dynamic(client).create(&PostParams::default(), &obj).await
}

fn status_of(r: Result<impl std::fmt::Debug, kube::Error>) -> Status {
    match r {
        Err(kube::Error::Api(s)) => *s,
        other => panic!("expected an API error Status, got {other:?}"),
    }
}

/// Check a 422 Invalid Status for a Gadget: every cause (reason, field, message) is there, in
/// any order, and the message lists every cause as `field: message`, in brackets when there are
/// several, as `errors.NewInvalid` and `utilerrors.Aggregate` print them.
fn assert_invalid(s: &Status, name: &str, causes: &[(&str, &str, &str)]) {
    assert_eq!(s.code, 422, "{s:?}");
    assert_eq!(s.reason, "Invalid", "{s:?}");
    let details = s.details.as_ref().expect("a 422 has details");
    assert_eq!(details.name, name, "{s:?}");
    assert_eq!(details.group, GROUP, "{s:?}");
    assert_eq!(details.kind, "Gadget", "{s:?}");
    let mut got: Vec<(String, String, String)> =
        details.causes.iter().map(|c| (c.reason.clone(), c.field.clone(), c.message.clone())).collect();
    let mut want: Vec<(String, String, String)> =
        causes.iter().map(|(r, f, m)| (r.to_string(), f.to_string(), m.to_string())).collect();
    got.sort();
    want.sort();
    assert_eq!(got, want, "causes of {}", s.message);
    let prefix = format!("{QUALIFIED} {name:?} is invalid: ");
    let items: Vec<String> = causes.iter().map(|(_, f, m)| format!("{f}: {m}")).collect();
    if items.len() == 1 {
        assert_eq!(s.message, format!("{prefix}{}", items[0]));
    } else {
        let inner = s
            .message
            .strip_prefix(&format!("{prefix}["))
            .and_then(|m| m.strip_suffix(']'))
            .unwrap_or_else(|| panic!("not a bracketed list: {}", s.message));
        let expected_len = items.iter().map(String::len).sum::<usize>() + 2 * (items.len() - 1);
        assert_eq!(inner.len(), expected_len, "message {}", s.message);
        for item in &items {
            assert!(inner.contains(item.as_str()), "{item:?} missing from {}", s.message);
        }
    }
}

/// The cause the apiserver adds when a blocking schema error kept the CEL rules from running.
fn skipped() -> (&'static str, &'static str, &'static str) {
    (
        "FieldValueInvalid",
        "<nil>",
        "Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
    )
}

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
        .expect("the request is sent");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let bytes = resp.into_body().collect_bytes().await.expect("the body is read");
    (status, headers, bytes.to_vec())
}

fn json_of(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(bytes)))
}

#[tokio::test]
async fn the_derived_crd_is_established_and_serves_its_kind() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let gadgets = install(&dc.client()).await;

    let crds: Api<CustomResourceDefinition> = Api::all(dc.client());
    let crd = crds.get(CRD_NAME).await.expect("the CRD is stored");
    let status = crd.status.expect("the CRD has a status");
    let accepted = status.accepted_names.expect("acceptedNames are set");
    assert_eq!(accepted.kind, "Gadget");
    assert_eq!(accepted.plural, "gadgets");
    assert_eq!(accepted.singular.as_deref(), Some("gadget"));
    assert_eq!(accepted.list_kind.as_deref(), Some("GadgetList"));
    assert_eq!(accepted.short_names, Some(vec!["gd".to_string()]));
    assert_eq!(status.stored_versions, Some(vec!["v1".to_string()]));
    let conds = status.conditions.unwrap_or_default();
    let cond = |t: &str| conds.iter().find(|c| c.type_ == t).unwrap_or_else(|| panic!("no {t} condition"));
    // apiextensions-apiserver naming and establishing controllers.
    assert_eq!(
        (cond("NamesAccepted").status.as_str(), cond("NamesAccepted").reason.as_deref()),
        ("True", Some("NoConflicts"))
    );
    assert_eq!(cond("NamesAccepted").message.as_deref(), Some("no conflicts found"));
    assert_eq!(
        (cond("Established").status.as_str(), cond("Established").reason.as_deref()),
        ("True", Some("InitialNamesAccepted"))
    );
    assert_eq!(cond("Established").message.as_deref(), Some("the initial names have been accepted"));

    let made = gadgets.create(&PostParams::default(), &Gadget::new("one", spec(2, Mode::Fast))).await.expect("create");
    assert_eq!(made.spec, spec(2, Mode::Fast));
    assert_eq!(made.metadata.generation, Some(1));
    assert_eq!(made.status, None);
    gadgets.create(&PostParams::default(), &Gadget::new("two", spec(1, Mode::Slow))).await.expect("create");
    let got = gadgets.get("one").await.expect("get");
    assert_eq!(got.spec, made.spec);
    assert_eq!(got.metadata.uid, made.metadata.uid);
    let names: Vec<String> =
        gadgets.list(&ListParams::default()).await.expect("list").items.iter().map(|g| g.name_any()).collect();
    assert_eq!(names, vec!["one", "two"]);

    // The selectable field works as a field selector.
    let slow = gadgets.list(&ListParams::default().fields("spec.mode=Slow")).await.expect("list by spec.mode");
    assert_eq!(slow.items.iter().map(|g| g.name_any()).collect::<Vec<_>>(), vec!["two"]);
}

#[tokio::test]
async fn defaults_are_applied_on_create_and_visible_on_read() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    install(&dc.client()).await;
    let api = dynamic(&dc.client());

    // color omitted: defaulted.
    let made = create_raw(&dc.client(), with_spec("omitted", json!({"-color": null}))).await.expect("create");
    assert_eq!(made.data["spec"]["color"], "blue");
    assert_eq!(api.get("omitted").await.expect("get").data["spec"]["color"], "blue");

    // color null (not nullable): the null is pruned, then the default applies.
    let made = create_raw(&dc.client(), with_spec("nulled", json!({"color": null}))).await.expect("create");
    assert_eq!(made.data["spec"]["color"], "blue");
    assert_eq!(api.get("nulled").await.expect("get").data["spec"]["color"], "blue");

    // nickname is nullable: an explicit null is kept, and not defaulted.
    let made = create_raw(&dc.client(), with_spec("nullable", json!({"nickname": null}))).await.expect("create");
    let spec = made.data["spec"].as_object().expect("spec");
    assert_eq!(spec.get("nickname"), Some(&Value::Null), "{spec:?}");
    let read = api.get("nullable").await.expect("get");
    assert_eq!(read.data["spec"].as_object().expect("spec").get("nickname"), Some(&Value::Null));

    // int-or-string takes both.
    create_raw(&dc.client(), with_spec("port-int", json!({"port": 8080}))).await.expect("an integer port");
    let named = create_raw(&dc.client(), with_spec("port-name", json!({"port": "http"}))).await.expect("a named port");
    assert_eq!(named.data["spec"]["port"], "http");
}

#[tokio::test]
async fn a_wrong_json_type_is_reported_with_the_type_it_had() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    install(&dc.client()).await;
    let c = dc.client();

    let s = status_of(create_raw(&c, with_spec("t1", json!({"replicas": "three"}))).await);
    assert_invalid(
        &s,
        "t1",
        &[
            (
                "FieldValueTypeInvalid",
                "spec.replicas",
                "Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\"",
            ),
            skipped(),
        ],
    );
    assert!(s.message.ends_with(&format!("<nil>: Invalid value: \"null\": {SKIPPED_RULES}]")), "{}", s.message);

    let s = status_of(create_raw(&c, with_spec("t2", json!({"port": true}))).await);
    assert_invalid(
        &s,
        "t2",
        &[
            (
                "FieldValueTypeInvalid",
                "spec.port",
                "Invalid value: \"boolean\": spec.port in body must be of type integer,string: \"boolean\"",
            ),
            skipped(),
        ],
    );

    let s = status_of(create_raw(&c, with_spec("t3", json!({"tags": "a"}))).await);
    assert_invalid(
        &s,
        "t3",
        &[
            (
                "FieldValueTypeInvalid",
                "spec.tags",
                "Invalid value: \"string\": spec.tags in body must be of type array: \"string\"",
            ),
            skipped(),
        ],
    );

    // Nothing was stored.
    let list = dynamic(&c).list(&ListParams::default()).await.expect("list");
    assert!(list.items.is_empty(), "{:?}", list.items);
}

#[tokio::test]
async fn required_enum_and_size_limits_block_the_rules() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    install(&dc.client()).await;
    let c = dc.client();

    let s = status_of(create_raw(&c, with_spec("r1", json!({"-title": null}))).await);
    assert_invalid(&s, "r1", &[("FieldValueRequired", "spec.title", "Required value"), skipped()]);

    let s = status_of(create_raw(&c, with_spec("r2", json!({"mode": "Turbo"}))).await);
    assert_invalid(
        &s,
        "r2",
        &[
            (
                "FieldValueNotSupported",
                "spec.mode",
                "Unsupported value: \"Turbo\": supported values: \"Fast\", \"Slow\"",
            ),
            skipped(),
        ],
    );

    let s = status_of(create_raw(&c, with_spec("r3", json!({"title": "abcdefghijklm"}))).await);
    assert_invalid(
        &s,
        "r3",
        &[("FieldValueTooLong", "spec.title", "Too long: may not be more than 12 bytes"), skipped()],
    );

    let s = status_of(create_raw(&c, with_spec("r4", json!({"tags": ["a", "b", "c", "d"]}))).await);
    assert_invalid(
        &s,
        "r4",
        &[("FieldValueTooMany", "spec.tags", "Too many: 4: must have at most 3 items"), skipped()],
    );

    // A missing spec (required at the root).
    let mut body = valid_body("r5");
    body.as_object_mut().expect("object").remove("spec");
    let s = status_of(create_raw(&c, body).await);
    assert_invalid(&s, "r5", &[("FieldValueRequired", "spec", "Required value"), skipped()]);
}

#[tokio::test]
async fn pattern_bounds_and_minimums_are_reported_with_the_value() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    install(&dc.client()).await;
    let c = dc.client();
    let cases: Vec<(&str, Value, &str, &str)> = vec![
        (
            "b1",
            json!({"replicas": 11}),
            "spec.replicas",
            "Invalid value: 11: spec.replicas in body should be less than or equal to 10",
        ),
        (
            "b2",
            json!({"replicas": -1}),
            "spec.replicas",
            "Invalid value: -1: spec.replicas in body should be greater than or equal to 0",
        ),
        (
            "b3",
            json!({"title": "ab"}),
            "spec.title",
            "Invalid value: \"ab\": spec.title in body should be at least 3 chars long",
        ),
        (
            "b4",
            json!({"title": "Abc"}),
            "spec.title",
            "Invalid value: \"Abc\": spec.title in body should match '^[a-z][a-z0-9-]*$'",
        ),
        ("b5", json!({"tags": []}), "spec.tags", "Invalid value: 0: spec.tags in body should have at least 1 items"),
    ];
    for (name, change, field, message) in cases {
        let s = status_of(create_raw(&c, with_spec(name, change)).await);
        // Not blocking: the rules ran (and passed), so no "not checked" cause.
        assert_invalid(&s, name, &[("FieldValueInvalid", field, message)]);
    }
}

#[tokio::test]
async fn cel_rules_report_message_expression_field_path_and_reason() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    install(&dc.client()).await;
    let c = dc.client();

    // A rule without a message.
    let s = status_of(create_raw(&c, with_spec("c1", json!({"color": "black"}))).await);
    assert_invalid(
        &s,
        "c1",
        &[("FieldValueInvalid", "spec.color", "Invalid value: \"string\": failed rule: self != 'black'")],
    );

    // A rule with a message, on a string field.
    let s = status_of(create_raw(&c, with_spec("c2", json!({"title": "xylophone"}))).await);
    assert_invalid(
        &s,
        "c2",
        &[("FieldValueInvalid", "spec.title", "Invalid value: \"string\": title must not start with x")],
    );

    // messageExpression, evaluated against the object.
    let s = status_of(create_raw(&c, with_spec("c3", json!({"replicas": 3, "mode": "Fast"}))).await);
    assert_invalid(
        &s,
        "c3",
        &[("FieldValueInvalid", "spec", "Invalid value: \"object\": replicas must be even in Fast mode, got 3")],
    );

    // fieldPath and reason.
    let s = status_of(create_raw(&c, with_spec("c4", json!({"limit": 101}))).await);
    assert_invalid(&s, "c4", &[("FieldValueForbidden", "spec.limit", "Forbidden: limit too high")]);

    // A rule on the root sees metadata.name and reports on the nil path.
    let s = status_of(create_raw(&c, valid_body("reserved")).await);
    assert_invalid(
        &s,
        "reserved",
        &[("FieldValueInvalid", "<nil>", "Invalid value: \"object\": the name reserved is reserved")],
    );

    // Passing values are accepted.
    create_raw(&c, with_spec("c5", json!({"replicas": 4, "mode": "Fast", "limit": 100}))).await.expect("valid");
}

#[tokio::test]
async fn several_bad_fields_are_all_reported() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    install(&dc.client()).await;
    let c = dc.client();

    // Non-blocking schema errors and failing rules together: every one is reported.
    let mut body = with_spec("reserved", json!({"replicas": 11, "mode": "Fast", "title": "Ab", "color": "black"}));
    body["metadata"]["name"] = json!("reserved");
    let s = status_of(create_raw(&c, body).await);
    assert_invalid(
        &s,
        "reserved",
        &[
            (
                "FieldValueInvalid",
                "spec.replicas",
                "Invalid value: 11: spec.replicas in body should be less than or equal to 10",
            ),
            // kube-openapi's string validator stops at the first failure (maxLength, minLength,
            // pattern): "Ab" is reported too short, not also unmatched.
            (
                "FieldValueInvalid",
                "spec.title",
                "Invalid value: \"Ab\": spec.title in body should be at least 3 chars long",
            ),
            ("FieldValueInvalid", "spec.color", "Invalid value: \"string\": failed rule: self != 'black'"),
            ("FieldValueInvalid", "spec", "Invalid value: \"object\": replicas must be even in Fast mode, got 11"),
            ("FieldValueInvalid", "<nil>", "Invalid value: \"object\": the name reserved is reserved"),
        ],
    );

    // Blocking errors together: all of them, then the note that the rules did not run.
    let s = status_of(
        create_raw(
            &c,
            with_spec("multi", json!({"mode": "Turbo", "-region": null, "replicas": "x", "color": "black"})),
        )
        .await,
    );
    assert_invalid(
        &s,
        "multi",
        &[
            (
                "FieldValueNotSupported",
                "spec.mode",
                "Unsupported value: \"Turbo\": supported values: \"Fast\", \"Slow\"",
            ),
            ("FieldValueRequired", "spec.region", "Required value"),
            (
                "FieldValueTypeInvalid",
                "spec.replicas",
                "Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\"",
            ),
            skipped(),
        ],
    );
    assert!(s.message.ends_with(&format!("<nil>: Invalid value: \"null\": {SKIPPED_RULES}]")), "{}", s.message);
}

#[tokio::test]
async fn a_transition_rule_makes_a_field_immutable_and_a_rejected_write_changes_nothing() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let gadgets = install(&dc.client()).await;

    // On create the transition rule is not evaluated: any region is fine.
    let made = gadgets.create(&PostParams::default(), &Gadget::new("imm", spec(2, Mode::Fast))).await.expect("create");

    let mut changed = made.clone();
    changed.spec.region = "us".into();
    let s = status_of(gadgets.replace("imm", &PostParams::default(), &changed).await);
    assert_invalid(
        &s,
        "imm",
        &[("FieldValueInvalid", "spec.region", "Invalid value: \"string\": region is immutable")],
    );

    let s = status_of(
        gadgets
            .patch("imm", &PatchParams::default(), &Patch::Merge(json!({"spec": {"region": "ap", "replicas": 4}})))
            .await,
    );
    assert_invalid(
        &s,
        "imm",
        &[("FieldValueInvalid", "spec.region", "Invalid value: \"string\": region is immutable")],
    );

    // A schema error on update is refused too.
    let s = status_of(
        gadgets.patch("imm", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 12}}))).await,
    );
    assert_invalid(
        &s,
        "imm",
        &[(
            "FieldValueInvalid",
            "spec.replicas",
            "Invalid value: 12: spec.replicas in body should be less than or equal to 10",
        )],
    );

    // Nothing of the rejected writes was stored.
    let stored = gadgets.get("imm").await.expect("get");
    assert_eq!(stored.spec, made.spec);
    assert_eq!(stored.metadata.resource_version, made.metadata.resource_version);
    assert_eq!(stored.metadata.generation, Some(1));

    // Changing something else is fine, and the region stays.
    let ok = gadgets
        .patch("imm", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 6}})))
        .await
        .expect("a mutable field changes");
    assert_eq!(ok.spec.replicas, 6);
    assert_eq!(ok.spec.region, "eu");
    assert_eq!(ok.metadata.generation, Some(2));
}

#[tokio::test]
async fn unknown_fields_are_pruned_warned_about_or_refused() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    install(&dc.client()).await;
    let c = dc.client();
    let path = "/apis/crdtest.example.com/v1/namespaces/default/gadgets";
    let ct = [("content-type", "application/json")];
    let body = |name: &str| {
        let mut b = with_spec(name, json!({"bogus": 1, "extra": {"anything": {"deep": [1, "two"]}}}));
        b["bogusTop"] = json!(true);
        serde_json::to_vec(&b).expect("json")
    };
    let warnings = |h: &http::HeaderMap| -> Vec<String> {
        h.get_all("warning").iter().map(|v| v.to_str().expect("ascii warning").to_string()).collect()
    };

    // No fieldValidation: the server default, Warn. Pruned, with one warning per field.
    let (code, headers, bytes) = raw(&c, "POST", path, &ct, body("warned")).await;
    assert_eq!(code, 201, "{}", String::from_utf8_lossy(&bytes));
    let created = json_of(&bytes);
    assert!(created.get("bogusTop").is_none(), "{created}");
    assert!(created["spec"].get("bogus").is_none(), "{created}");
    // x-kubernetes-preserve-unknown-fields keeps whatever is below it.
    assert_eq!(created["spec"]["extra"], json!({"anything": {"deep": [1, "two"]}}));
    let mut w = warnings(&headers);
    w.sort();
    assert_eq!(w, vec![r#"299 - "unknown field \"bogusTop\"""#, r#"299 - "unknown field \"spec.bogus\"""#]);
    let (_, _, stored) = raw(&c, "GET", &format!("{path}/warned"), &[], vec![]).await;
    let stored = json_of(&stored);
    assert!(stored.get("bogusTop").is_none() && stored["spec"].get("bogus").is_none(), "{stored}");
    assert_eq!(stored["spec"]["extra"], json!({"anything": {"deep": [1, "two"]}}));

    // Ignore: pruned silently.
    let (code, headers, bytes) = raw(&c, "POST", &format!("{path}?fieldValidation=Ignore"), &ct, body("ignored")).await;
    assert_eq!(code, 201, "{}", String::from_utf8_lossy(&bytes));
    assert!(json_of(&bytes)["spec"].get("bogus").is_none());
    assert!(warnings(&headers).is_empty(), "{:?}", warnings(&headers));
}

// The create handler wraps decoding errors in transformDecodeError (apiserver/pkg/endpoints/
// handlers/create.go): "%s in version %q cannot be handled as a %s: %v". Recorded from a real
// server: `Widget in version "v1" cannot be handled as a Widget: strict decoding error: unknown
// field "spec.colour"`.
#[tokio::test]
async fn strict_field_validation_refuses_unknown_fields() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    install(&dc.client()).await;
    let c = dc.client();
    let path = "/apis/crdtest.example.com/v1/namespaces/default/gadgets";
    let ct = [("content-type", "application/json")];
    // Strict: 400 naming the unknown field, nothing stored.
    let mut strict = with_spec("strict", json!({"bogus": 1}));
    strict["spec"]["extra"] = json!({"free": 1});
    let (code, _, bytes) =
        raw(&c, "POST", &format!("{path}?fieldValidation=Strict"), &ct, serde_json::to_vec(&strict).expect("json"))
            .await;
    assert_eq!(code, 400);
    assert_eq!(
        json_of(&bytes),
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "Gadget in version \"v1\" cannot be handled as a Gadget: strict decoding error: unknown field \"spec.bogus\"",
            "reason": "BadRequest", "code": 400
        })
    );
    let (code, _, _) = raw(&c, "GET", &format!("{path}/strict"), &[], vec![]).await;
    assert_eq!(code, 404);
}

#[tokio::test]
async fn printer_columns_appear_in_a_table() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let gadgets = install(&dc.client()).await;
    gadgets.create(&PostParams::default(), &Gadget::new("alpha", spec(2, Mode::Fast))).await.expect("create");
    gadgets.create(&PostParams::default(), &Gadget::new("beta", spec(3, Mode::Slow))).await.expect("create");

    let accept = [("accept", "application/json;as=Table;v=v1;g=meta.k8s.io")];
    let (code, _, bytes) =
        raw(&dc.client(), "GET", "/apis/crdtest.example.com/v1/namespaces/default/gadgets", &accept, vec![]).await;
    assert_eq!(code, 200);
    let table = json_of(&bytes);
    assert_eq!(table["kind"], "Table");
    assert_eq!(table["apiVersion"], "meta.k8s.io/v1");
    // apiextensions-apiserver tableconvertor.New: Name first, then the CRD's columns (no Age when
    // the CRD has columns of its own).
    let defs = table["columnDefinitions"].as_array().expect("columnDefinitions");
    assert_eq!(defs.len(), 3, "{defs:?}");
    assert_eq!(
        defs[0],
        json!({"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names", "priority": 0})
    );
    assert_eq!(
        defs[1],
        json!({"name": "Replicas", "type": "integer", "format": "", "description": "desired replicas", "priority": 0})
    );
    assert_eq!((defs[2]["name"].as_str(), defs[2]["type"].as_str()), (Some("Mode"), Some("string")));
    let rows = table["rows"].as_array().expect("rows");
    let cells: Vec<&Value> = rows.iter().map(|r| &r["cells"]).collect();
    assert_eq!(cells, vec![&json!(["alpha", 2, "Fast"]), &json!(["beta", 3, "Slow"])]);
    assert_eq!(rows[0]["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(rows[0]["object"]["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(rows[0]["object"]["metadata"]["name"], "alpha");

    // One object as a table.
    let (code, _, bytes) =
        raw(&dc.client(), "GET", "/apis/crdtest.example.com/v1/namespaces/default/gadgets/beta", &accept, vec![]).await;
    assert_eq!(code, 200);
    let one = json_of(&bytes);
    assert_eq!(one["rows"].as_array().map(Vec::len), Some(1));
    assert_eq!(one["rows"][0]["cells"], json!(["beta", 3, "Slow"]));
}

// tableconvertor.New: `desc := fmt.Sprintf("Custom resource definition column (in JSONPath
// format): %s", col.JSONPath)` unless the column has a description.
#[tokio::test]
async fn a_printer_column_without_a_description_is_described_by_its_json_path() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    install(&dc.client()).await;
    let accept = [("accept", "application/json;as=Table;v=v1;g=meta.k8s.io")];
    let (code, _, bytes) =
        raw(&dc.client(), "GET", "/apis/crdtest.example.com/v1/namespaces/default/gadgets", &accept, vec![]).await;
    assert_eq!(code, 200);
    assert_eq!(
        json_of(&bytes)["columnDefinitions"][2],
        json!({"name": "Mode", "type": "string", "format": "", "description": "Custom resource definition column (in JSONPath format): .spec.mode", "priority": 0})
    );
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
async fn the_openapi_v3_document_describes_the_kind() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    install(&dc.client()).await;
    let c = dc.client();

    let (code, _, bytes) = raw(&c, "GET", "/openapi/v3", &[], vec![]).await;
    assert_eq!(code, 200);
    let index = json_of(&bytes);
    let url = index["paths"]["apis/crdtest.example.com/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap_or_else(|| panic!("the CRD's group-version is listed: {index}"))
        .to_string();
    assert!(url.starts_with("/openapi/v3/apis/crdtest.example.com/v1?hash="), "{url}");

    let (code, _, bytes) = raw(&c, "GET", &url, &[], vec![]).await;
    assert_eq!(code, 200);
    let doc = json_of(&bytes);
    // The apiserver names CR schemas by reversed group, version and kind.
    let schema = &doc["components"]["schemas"]["com.example.crdtest.v1.Gadget"];
    assert_eq!(
        schema["x-kubernetes-group-version-kind"],
        json!([{"group": "crdtest.example.com", "kind": "Gadget", "version": "v1"}])
    );
    assert_eq!(schema["description"], "A Gadget is a thing the tests build.");
    assert_eq!(schema["type"], "object");
    let spec = resolve(&doc, &schema["properties"]["spec"]);
    assert_eq!(spec["properties"]["replicas"]["description"], "How many copies to run.");
    assert_eq!(spec["properties"]["replicas"]["type"], "integer");
    assert_eq!(spec["properties"]["title"]["description"], "A short lowercase title.");
    assert_eq!(spec["properties"]["mode"]["enum"], json!(["Fast", "Slow"]));
    let metadata = resolve(&doc, &schema["properties"]["metadata"]);
    assert!(
        metadata["properties"]["name"]["description"].as_str().is_some_and(|d| d.starts_with("Name must be unique"))
    );
    assert!(schema["properties"]["apiVersion"]["description"].is_string());
    assert!(schema["properties"]["kind"]["description"].is_string());
    let item = &doc["paths"]["/apis/crdtest.example.com/v1/namespaces/{namespace}/gadgets/{name}"];
    assert_eq!(
        item["get"]["x-kubernetes-group-version-kind"],
        json!({"group": "crdtest.example.com", "kind": "Gadget", "version": "v1"})
    );
}

// apiextensions-apiserver/pkg/controller/openapi/builder: buildListSchema publishes
// `<reversed group>.<version>.<ListKind>` with its own x-kubernetes-group-version-kind, its
// `items` a $ref to the kind and `metadata` a ListMeta.
#[tokio::test]
async fn the_openapi_v3_document_has_the_list_kind() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    install(&dc.client()).await;
    let c = dc.client();
    let (_, _, bytes) = raw(&c, "GET", "/openapi/v3", &[], vec![]).await;
    let url = json_of(&bytes)["paths"]["apis/crdtest.example.com/v1"]["serverRelativeURL"]
        .as_str()
        .expect("the CRD's group-version is listed")
        .to_string();
    let (_, _, bytes) = raw(&c, "GET", &url, &[], vec![]).await;
    let doc = json_of(&bytes);
    let list = &doc["components"]["schemas"]["com.example.crdtest.v1.GadgetList"];
    assert_eq!(
        list["x-kubernetes-group-version-kind"],
        json!([{"group": "crdtest.example.com", "kind": "GadgetList", "version": "v1"}])
    );
    assert_eq!(list["required"], json!(["items"]));
    let items = &list["properties"]["items"];
    assert_eq!(items["type"], "array");
    assert_eq!(items["items"]["$ref"], "#/components/schemas/com.example.crdtest.v1.Gadget");
}

#[tokio::test]
async fn the_scale_subresource_reads_and_writes_the_replicas_paths() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let gadgets = install(&dc.client()).await;
    gadgets.create(&PostParams::default(), &Gadget::new("sc", spec(2, Mode::Slow))).await.expect("create");
    gadgets
        .patch_status(
            "sc",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 2, "selector": "app=sc"}})),
        )
        .await
        .expect("status written through the status subresource");

    let scale = gadgets.get_scale("sc").await.expect("get scale");
    assert_eq!(scale.metadata.name.as_deref(), Some("sc"));
    assert_eq!(scale.metadata.namespace.as_deref(), Some("default"));
    assert_eq!(scale.spec.as_ref().and_then(|s| s.replicas), Some(2));
    let st = scale.status.as_ref().expect("scale status");
    assert_eq!(st.replicas, 2);
    assert_eq!(st.selector.as_deref(), Some("app=sc"));

    let scaled = gadgets
        .patch_scale("sc", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 5}})))
        .await
        .expect("patch scale");
    assert_eq!(scaled.spec.as_ref().and_then(|s| s.replicas), Some(5));
    let g = gadgets.get("sc").await.expect("get");
    assert_eq!(g.spec.replicas, 5);
    assert_eq!(g.metadata.generation, Some(2));
    assert_eq!(g.status.as_ref().map(|s| s.replicas), Some(2), "the scale write leaves status alone");
}

#[tokio::test]
async fn a_scale_write_is_validated_as_the_custom_resource() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let gadgets = install(&dc.client()).await;
    gadgets.create(&PostParams::default(), &Gadget::new("sv", spec(2, Mode::Slow))).await.expect("create");
    // The scale REST storage of a CR updates the CR through its own strategy, so the error is the
    // CR's 422.
    let s = status_of(
        gadgets.patch_scale("sv", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 11}}))).await,
    );
    assert_invalid(
        &s,
        "sv",
        &[(
            "FieldValueInvalid",
            "spec.replicas",
            "Invalid value: 11: spec.replicas in body should be less than or equal to 10",
        )],
    );
    assert_eq!(gadgets.get("sv").await.expect("get").spec.replicas, 2);
}

#[tokio::test]
async fn deleting_the_crd_removes_its_objects_and_its_endpoints() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let c = dc.client();
    let gadgets = install(&c).await;
    for n in ["d1", "d2"] {
        gadgets.create(&PostParams::default(), &Gadget::new(n, spec(2, Mode::Slow))).await.expect("create");
    }
    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    let uid = crds.get(CRD_NAME).await.expect("get crd").metadata.uid.expect("uid");
    crds.delete(CRD_NAME, &DeleteParams::default()).await.expect("delete the CRD");
    tokio::time::timeout(
        Duration::from_secs(20),
        await_condition(crds.clone(), CRD_NAME, conditions::is_deleted(&uid)),
    )
    .await
    .expect("the CRD is gone within 20s")
    .expect("waiting for deletion");

    // The objects and the endpoints are gone: the path now belongs to nobody (404 page not found).
    for path in [
        "/apis/crdtest.example.com/v1/namespaces/default/gadgets/d1",
        "/apis/crdtest.example.com/v1/namespaces/default/gadgets",
        "/apis/crdtest.example.com/v1",
    ] {
        let (code, _, body) = raw(&c, "GET", path, &[], vec![]).await;
        assert_eq!(code, 404, "{path}: {}", String::from_utf8_lossy(&body));
    }
    let (_, _, bytes) = raw(&c, "GET", "/apis", &[], vec![]).await;
    let groups = json_of(&bytes);
    let names: Vec<&str> =
        groups["groups"].as_array().expect("groups").iter().filter_map(|g| g["name"].as_str()).collect();
    assert!(!names.contains(&GROUP), "{names:?}");

    // Installing it again starts empty.
    let gadgets = install(&c).await;
    assert!(gadgets.list(&ListParams::default()).await.expect("list").items.is_empty());
}

fn crd_with_spec_schema(plural: &str, spec_schema: Value) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{GROUP}")},
        "spec": {
            "group": GROUP,
            "names": {"kind": "Thing", "plural": plural},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec_schema}}}
            }]
        }
    })
}

async fn create_crd(client: &Client, body: Value) -> Result<CustomResourceDefinition, kube::Error> {
    let crd: CustomResourceDefinition = serde_json::from_value(body).expect("a CRD body");
    Api::<CustomResourceDefinition>::all(client.clone()).create(&PostParams::default(), &crd).await
}

#[tokio::test]
async fn a_crd_whose_schema_has_a_property_without_a_type_is_rejected() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let c = dc.client();
    let body =
        crd_with_spec_schema("things", json!({"type": "object", "properties": {"size": {"description": "no type"}}}));
    let s = status_of(create_crd(&c, body).await);
    let field = "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[size].type";
    assert_eq!(s.code, 422);
    assert_eq!(s.reason, "Invalid");
    assert_eq!(
        s.message,
        format!(
            "CustomResourceDefinition.apiextensions.k8s.io \"things.{GROUP}\" is invalid: {field}: Required value: must not be empty for specified object fields"
        )
    );
    let d = s.details.expect("details");
    assert_eq!(
        (d.name.as_str(), d.group.as_str(), d.kind.as_str()),
        ("things.crdtest.example.com", "apiextensions.k8s.io", "CustomResourceDefinition")
    );
    assert_eq!(d.causes.len(), 1, "{:?}", d.causes);
    assert_eq!(d.causes[0].reason, "FieldValueRequired");
    assert_eq!(d.causes[0].field, field);
    assert_eq!(d.causes[0].message, "Required value: must not be empty for specified object fields");
    let crds: Api<CustomResourceDefinition> = Api::all(c);
    assert!(crds.get_opt("things.crdtest.example.com").await.expect("get").is_none());
}

#[tokio::test]
async fn a_crd_with_a_rule_that_does_not_compile_is_rejected() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let c = dc.client();
    let body = crd_with_spec_schema(
        "things",
        json!({
            "type": "object",
            "properties": {"size": {"type": "integer"}},
            "x-kubernetes-validations": [{"rule": "self.missing > 0"}]
        }),
    );
    let s = status_of(create_crd(&c, body).await);
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"), "{s:?}");
    let d = s.details.expect("details");
    assert_eq!(d.causes.len(), 1, "{:?}", d.causes);
    let cause = &d.causes[0];
    assert_eq!(cause.reason, "FieldValueInvalid");
    assert_eq!(
        cause.field,
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule"
    );
    // The value is the Go rule struct; the detail is CEL's compiler output.
    assert!(cause.message.starts_with("Invalid value: "), "{}", cause.message);
    assert!(cause.message.contains("compilation failed: ERROR: <input>:1:"), "{}", cause.message);
    assert!(cause.message.contains("undefined field 'missing'"), "{}", cause.message);
    assert!(
        Api::<CustomResourceDefinition>::all(c).get_opt("things.crdtest.example.com").await.expect("get").is_none()
    );
}

// NamingConditionController.getAcceptedNamesForGroup collects the accepted plural, singular and
// short names of every CRD of the group; a plural found there is a PluralConflict.
#[tokio::test]
async fn a_crd_whose_plural_is_already_claimed_is_not_accepted_nor_served() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let c = dc.client();
    install(&c).await;

    // "gadget" is the singular of gadgets.crdtest.example.com: a second CRD may not claim it as
    // its plural (apiextensions-apiserver NamingConditionController: PluralConflict).
    let body = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadget.crdtest.example.com"},
        "spec": {
            "group": GROUP,
            "names": {"kind": "Thing", "plural": "gadget", "singular": "thing"},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    });
    create_crd(&c, body).await.expect("the CRD itself is valid");
    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    let not_accepted = |crd: Option<&CustomResourceDefinition>| {
        crd.and_then(|c| c.status.as_ref())
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "NamesAccepted" && c.status == "False"))
    };
    let crd = tokio::time::timeout(
        Duration::from_secs(10),
        await_condition(crds, "gadget.crdtest.example.com", not_accepted),
    )
    .await
    .expect("NamesAccepted=False within 10s")
    .expect("waiting")
    .expect("the CRD exists");
    let status = crd.status.expect("status");
    let conds = status.conditions.expect("conditions");
    let names = conds.iter().find(|c| c.type_ == "NamesAccepted").expect("NamesAccepted");
    assert_eq!(names.reason.as_deref(), Some("PluralConflict"));
    assert_eq!(names.message.as_deref(), Some("\"gadget\" is already in use"));
    let est = conds.iter().find(|c| c.type_ == "Established").expect("Established");
    assert_eq!(
        (est.status.as_str(), est.reason.as_deref(), est.message.as_deref()),
        ("False", Some("NotAccepted"), Some("not all names are accepted"))
    );
    // The names without a conflict are accepted; the plural is not.
    let accepted = status.accepted_names.expect("acceptedNames");
    assert_eq!(accepted.plural, "");
    assert_eq!(accepted.kind, "Thing");

    // Not served: no endpoint, not in discovery; the first CRD is untouched.
    let (code, _, _) = raw(&c, "GET", "/apis/crdtest.example.com/v1/namespaces/default/gadget", &[], vec![]).await;
    assert_eq!(code, 404);
    let (code, _, bytes) = raw(&c, "GET", "/apis/crdtest.example.com/v1", &[], vec![]).await;
    assert_eq!(code, 200);
    let list = json_of(&bytes);
    let mut served: Vec<&str> =
        list["resources"].as_array().expect("resources").iter().filter_map(|r| r["name"].as_str()).collect();
    served.sort();
    assert_eq!(served, vec!["gadgets", "gadgets/scale", "gadgets/status"]);
    let gadgets: Api<Gadget> = Api::default_namespaced(c.clone());
    gadgets
        .create(&PostParams::default(), &Gadget::new("still", spec(2, Mode::Slow)))
        .await
        .expect("gadgets still served");
}

async fn wait_names_not_accepted(client: &Client, name: &str) -> CustomResourceDefinition {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let not_accepted = |crd: Option<&CustomResourceDefinition>| {
        crd.and_then(|c| c.status.as_ref())
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "NamesAccepted" && c.status == "False"))
    };
    tokio::time::timeout(Duration::from_secs(10), await_condition(crds, name, not_accepted))
        .await
        .expect("NamesAccepted=False within 10s")
        .expect("waiting")
        .expect("the CRD exists")
}

// The naming controller checks plural, singular, short names, kind and list kind in that order;
// each conflict overwrites the reason and message, so a kind clash ends as ListKindConflict (the
// list kind clashes too). Names without a conflict are accepted, the others stay empty.
#[tokio::test]
async fn a_crd_whose_kind_is_already_claimed_is_not_accepted_nor_served() {
    let dc = DevCluster::start().await.expect("devcluster starts");
    let c = dc.client();
    install(&c).await;
    let body = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gizmos.crdtest.example.com"},
        "spec": {
            "group": GROUP,
            "names": {"kind": "Gadget", "plural": "gizmos", "singular": "gizmo"},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    });
    create_crd(&c, body).await.expect("the CRD itself is valid");
    let crd = wait_names_not_accepted(&c, "gizmos.crdtest.example.com").await;
    let status = crd.status.expect("status");
    let conds = status.conditions.expect("conditions");
    let names = conds.iter().find(|c| c.type_ == "NamesAccepted").expect("NamesAccepted");
    assert_eq!(names.reason.as_deref(), Some("ListKindConflict"));
    assert_eq!(names.message.as_deref(), Some("\"GadgetList\" is already in use"));
    let est = conds.iter().find(|c| c.type_ == "Established").expect("Established");
    assert_eq!((est.status.as_str(), est.reason.as_deref()), ("False", Some("NotAccepted")));
    let accepted = status.accepted_names.expect("acceptedNames");
    assert_eq!((accepted.plural.as_str(), accepted.singular.as_deref()), ("gizmos", Some("gizmo")));
    assert_eq!((accepted.kind.as_str(), accepted.list_kind.as_deref()), ("", None));

    let (code, _, _) = raw(&c, "GET", "/apis/crdtest.example.com/v1/namespaces/default/gizmos", &[], vec![]).await;
    assert_eq!(code, 404);
}
