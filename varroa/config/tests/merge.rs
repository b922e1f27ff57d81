//! The JCasC merge (`varroa_config::merge`): one test per rule of the module doc, then the
//! promised algebra (idempotence, identity, associativity, later scalars win) as properties
//! over generated JCasC-like documents.

use proptest::prelude::*;
use serde_json::{Map, Value, json};
use varroa_config::merge::{CHOICE_PATHS, MergeError, Origins, canonical, identity, merge, merge_into};

/// Merges `docs` in order over an empty document, each labelled, as a bundle's inputs are.
fn merge_labelled(docs: &[(&str, Value)]) -> (Result<Value, MergeError>, Origins) {
    let mut out = json!({});
    let mut origins = Origins::new();
    for (label, doc) in docs {
        if let Err(e) = merge_into(&mut out, doc, label, &mut origins) {
            return (Err(e), origins);
        }
    }
    (Ok(out), origins)
}

/// The serialized bytes, so that key order is asserted too (`Value` equality ignores it).
fn bytes(v: &Value) -> String {
    serde_json::to_string(v).unwrap()
}

// ---------------------------------------------------------------------------------------------
// Rule 1: maps merge deeply, the later scalar wins.

#[test]
fn maps_merge_deeply_and_the_later_scalar_wins() {
    let a = json!({
        "jenkins": {"systemMessage": "from a", "numExecutors": 2, "nodeProperties": {"x": 1}},
        "unclassified": {"location": {"adminAddress": "ops@example.org"}}
    });
    let b = json!({
        "jenkins": {"systemMessage": "from b", "mode": "EXCLUSIVE", "nodeProperties": {"y": 2}},
        "unclassified": {"location": {"url": "https://ci.example.org/"}},
        "tool": {"git": {"installations": []}}
    });
    let merged = merge(&a, &b).unwrap();
    assert_eq!(
        merged,
        json!({
            "jenkins": {
                "systemMessage": "from b",
                "numExecutors": 2,
                "nodeProperties": {"x": 1, "y": 2},
                "mode": "EXCLUSIVE"
            },
            "unclassified": {"location": {"adminAddress": "ops@example.org", "url": "https://ci.example.org/"}},
            "tool": {"git": {"installations": []}}
        })
    );
    // The other way round, a's scalar wins.
    assert_eq!(merge(&b, &a).unwrap()["jenkins"]["systemMessage"], json!("from a"));
}

#[test]
fn a_later_scalar_of_another_type_or_null_replaces_the_earlier_scalar() {
    let merged =
        merge(&json!({"a": {"b": 1, "c": "x", "d": true}}), &json!({"a": {"b": "one", "c": null, "d": 3}})).unwrap();
    assert_eq!(merged, json!({"a": {"b": "one", "c": null, "d": 3}}));
}

// ---------------------------------------------------------------------------------------------
// Rule 2: a choice path is replaced whole.

#[test]
fn security_realm_is_replaced_whole_never_mixed() {
    let a = json!({"jenkins": {
        "systemMessage": "kept",
        "securityRealm": {"local": {"allowsSignup": false, "users": [{"id": "admin", "password": "x"}]}}
    }});
    let b = json!({"jenkins": {"securityRealm": {"oic": {"clientId": "varroa", "serverConfiguration": {}}}}});
    let merged = merge(&a, &b).unwrap();
    assert_eq!(merged["jenkins"]["securityRealm"], b["jenkins"]["securityRealm"]);
    assert!(merged["jenkins"]["securityRealm"].get("local").is_none(), "local and oic mixed: {merged}");
    assert_eq!(merged["jenkins"]["systemMessage"], json!("kept"));

    // Same implementation on both sides: still the later one whole (no deep merge of its fields).
    let c = json!({"jenkins": {"securityRealm": {"local": {"allowsSignup": true}}}});
    let merged = merge(&a, &c).unwrap();
    assert_eq!(merged["jenkins"]["securityRealm"], json!({"local": {"allowsSignup": true}}));
}

#[test]
fn every_choice_path_takes_the_later_value_even_of_another_shape() {
    for path in CHOICE_PATHS {
        let (parent, key) = path.split_once('.').unwrap();
        let earlier = json!({ parent: { key: {"impl1": {"x": 1}} } });
        for later_value in [json!({"impl2": {"y": 2}}), json!("plain"), json!(["l1"])] {
            let later = json!({ parent: { key: later_value.clone() } });
            let merged = merge(&earlier, &later).unwrap_or_else(|e| panic!("{path}: {e}"));
            assert_eq!(merged[parent][key], later_value, "{path}");
        }
    }
}

#[test]
fn a_choice_key_elsewhere_than_its_path_merges_deeply() {
    let a = json!({"unclassified": {"securityRealm": {"local": {"x": 1}}}});
    let b = json!({"unclassified": {"securityRealm": {"oic": {"y": 2}}}});
    assert_eq!(
        merge(&a, &b).unwrap(),
        json!({"unclassified": {"securityRealm": {"local": {"x": 1}, "oic": {"y": 2}}}})
    );
}

// ---------------------------------------------------------------------------------------------
// Rule 3: lists of named items merge by identity.

#[test]
fn identity_of_named_and_typed_items() {
    assert_eq!(identity(&json!({"name": "k8s", "x": 1})).as_deref(), Some("name=k8s"));
    assert_eq!(identity(&json!({"id": "git-creds", "name": "n"})).as_deref(), Some("id=git-creds"));
    assert_eq!(identity(&json!({"kubernetes": {"name": "k8s"}})).as_deref(), Some("kubernetes[name=k8s]"));
    assert_eq!(identity(&json!({"usernamePassword": {"id": "c"}})).as_deref(), Some("usernamePassword[id=c]"));
    assert_eq!(identity(&json!({"x": 1})), None);
    assert_eq!(identity(&json!({"a": {"name": "n"}, "b": 1})), None);
    assert_eq!(identity(&json!("name")), None);
}

#[test]
fn typed_items_merge_in_place_and_new_items_are_appended() {
    let a = json!({"jenkins": {"clouds": [
        {"kubernetes": {"name": "k8s", "serverUrl": "https://a", "namespace": "ci"}},
        {"kubernetes": {"name": "other"}}
    ]}});
    let b = json!({"jenkins": {"clouds": [
        {"kubernetes": {"name": "new"}},
        {"kubernetes": {"name": "k8s", "serverUrl": "https://b", "templates": [{"name": "maven"}]}}
    ]}});
    let merged = merge(&a, &b).unwrap();
    assert_eq!(
        bytes(&merged),
        bytes(&json!({"jenkins": {"clouds": [
            {"kubernetes": {"name": "k8s", "serverUrl": "https://b", "namespace": "ci", "templates": [{"name": "maven"}]}},
            {"kubernetes": {"name": "other"}},
            {"kubernetes": {"name": "new"}}
        ]}}))
    );
}

#[test]
fn items_named_by_name_or_id_merge_by_identity() {
    let a = json!({
        "unclassified": {"globalLibraries": {"libraries": [
            {"name": "shared", "defaultVersion": "main", "implicit": false},
            {"name": "tools", "defaultVersion": "v1"}
        ]}},
        "credentials": {"system": {"domainCredentials": [{"credentials": [
            {"id": "git", "username": "bot", "scope": "GLOBAL"}
        ]}]}}
    });
    let b = json!({
        "unclassified": {"globalLibraries": {"libraries": [
            {"name": "shared", "implicit": true},
            {"name": "extra"}
        ]}},
        "credentials": {"system": {"domainCredentials": [{"credentials": [
            {"id": "registry", "username": "pusher"},
            {"id": "git", "username": "bot2"}
        ]}]}}
    });
    let merged = merge(&a, &b).unwrap();
    assert_eq!(
        merged["unclassified"]["globalLibraries"]["libraries"],
        json!([
            {"name": "shared", "defaultVersion": "main", "implicit": true},
            {"name": "tools", "defaultVersion": "v1"},
            {"name": "extra"}
        ])
    );
    // The domainCredentials item itself has no identity: it is a plain item, so b's (different)
    // item is appended rather than merged.
    assert_eq!(
        merged["credentials"]["system"]["domainCredentials"],
        json!([
            {"credentials": [{"id": "git", "username": "bot", "scope": "GLOBAL"}]},
            {"credentials": [{"id": "registry", "username": "pusher"}, {"id": "git", "username": "bot2"}]}
        ])
    );
    // Directly at a named list: merged by id in place, new ones appended.
    let a = json!({"creds": [{"id": "git", "username": "bot", "scope": "GLOBAL"}, {"id": "ssh"}]});
    let b = json!({"creds": [{"id": "registry"}, {"id": "git", "username": "bot2"}]});
    assert_eq!(
        merge(&a, &b).unwrap()["creds"],
        json!([{"id": "git", "username": "bot2", "scope": "GLOBAL"}, {"id": "ssh"}, {"id": "registry"}])
    );
}

#[test]
fn named_item_lists_nested_in_named_items_merge_by_identity_too() {
    let a = json!({"jenkins": {"clouds": [{"kubernetes": {"name": "k8s", "templates": [
        {"name": "maven", "label": "maven", "containers": [{"name": "jnlp", "image": "agent:1"}]}
    ]}}]}});
    let b = json!({"jenkins": {"clouds": [{"kubernetes": {"name": "k8s", "templates": [
        {"name": "maven", "containers": [{"name": "jnlp", "image": "agent:2"}, {"name": "mvn"}]},
        {"name": "node"}
    ]}}]}});
    assert_eq!(
        merge(&a, &b).unwrap(),
        json!({"jenkins": {"clouds": [{"kubernetes": {"name": "k8s", "templates": [
            {"name": "maven", "label": "maven", "containers": [{"name": "jnlp", "image": "agent:2"}, {"name": "mvn"}]},
            {"name": "node"}
        ]}}]}})
    );
}

// ---------------------------------------------------------------------------------------------
// Rule 4: other lists are unions.

#[test]
fn plain_lists_are_unions_in_order_without_duplicates() {
    let a = json!({"jenkins": {"agentProtocols": ["JNLP4-connect", "Ping"], "matrix": [{"a": 1}]}});
    let b = json!({"jenkins": {"agentProtocols": ["CLI2", "Ping", "CLI2", "JNLP4-connect", "Zeta"], "matrix": [{"a": 1}, {"a": 2}]}});
    let merged = merge(&a, &b).unwrap();
    assert_eq!(merged["jenkins"]["agentProtocols"], json!(["JNLP4-connect", "Ping", "CLI2", "Zeta"]));
    assert_eq!(merged["jenkins"]["matrix"], json!([{"a": 1}, {"a": 2}]));
    // An equal item is a duplicate whatever its key order; a different one is not.
    let merged = merge(&json!({"l": [{"a": 1, "b": 2}]}), &json!({"l": [{"b": 2, "a": 1}, {"a": 1}]})).unwrap();
    assert_eq!(merged["l"], json!([{"a": 1, "b": 2}, {"a": 1}]));
}

// ---------------------------------------------------------------------------------------------
// Rule 5: conflicts name the path and both inputs.

fn conflict(first: Value, second: Value) -> (MergeError, String) {
    let (res, _) = merge_labelled(&[("bundle-a/casc.yaml", first), ("bundle-b/casc.yaml", second)]);
    let err = res.expect_err("the merge must fail");
    let shown = err.to_string();
    (err, shown)
}

#[test]
fn scalar_then_map_is_a_conflict_naming_path_and_both_inputs() {
    let (err, shown) =
        conflict(json!({"jenkins": {"systemMessage": "hi"}}), json!({"jenkins": {"systemMessage": {"text": "hi"}}}));
    assert_eq!(
        err,
        MergeError::Conflict {
            path: "jenkins.systemMessage".into(),
            earlier: "bundle-a/casc.yaml".into(),
            earlier_kind: "a scalar",
            later: "bundle-b/casc.yaml".into(),
            later_kind: "a map",
        }
    );
    for part in ["jenkins.systemMessage", "bundle-a/casc.yaml", "bundle-b/casc.yaml"] {
        assert!(shown.contains(part), "{part:?} missing from: {shown}");
    }
}

#[test]
fn list_then_map_and_map_then_scalar_are_conflicts() {
    let cases = [
        (
            json!({"jenkins": {"agentProtocols": ["Ping"]}}),
            json!({"jenkins": {"agentProtocols": {"x": 1}}}),
            "a list",
            "a map",
        ),
        (
            json!({"jenkins": {"nodeProperties": {"x": 1}}}),
            json!({"jenkins": {"nodeProperties": "none"}}),
            "a map",
            "a scalar",
        ),
        (
            json!({"jenkins": {"nodeProperties": {"x": 1}}}),
            json!({"jenkins": {"nodeProperties": ["x"]}}),
            "a map",
            "a list",
        ),
        (
            json!({"jenkins": {"agentProtocols": ["Ping"]}}),
            json!({"jenkins": {"agentProtocols": "Ping"}}),
            "a list",
            "a scalar",
        ),
        (
            json!({"jenkins": {"agentProtocols": 3}}),
            json!({"jenkins": {"agentProtocols": ["Ping"]}}),
            "a scalar",
            "a list",
        ),
    ];
    for (first, second, earlier_kind, later_kind) in cases {
        let (err, shown) = conflict(first.clone(), second.clone());
        let MergeError::Conflict { path, earlier, earlier_kind: ek, later, later_kind: lk } = err else {
            panic!("{first} + {second}: expected a conflict, got {err:?}");
        };
        assert_eq!(path, "jenkins.".to_string() + first["jenkins"].as_object().unwrap().keys().next().unwrap());
        assert_eq!((earlier.as_str(), later.as_str()), ("bundle-a/casc.yaml", "bundle-b/casc.yaml"), "{shown}");
        assert_eq!((ek, lk), (earlier_kind, later_kind), "{shown}");
        for part in [path.as_str(), "bundle-a/casc.yaml", "bundle-b/casc.yaml"] {
            assert!(shown.contains(part), "{part:?} missing from: {shown}");
        }
    }
}

#[test]
fn a_conflict_inside_a_named_item_names_the_item_and_the_earlier_input_that_set_it() {
    let (res, _) = merge_labelled(&[
        ("base.yaml", json!({"jenkins": {"numExecutors": 1}})),
        (
            "clouds.yaml",
            json!({"jenkins": {"clouds": [{"kubernetes": {"name": "k8s", "templates": [{"name": "m"}]}}]}}),
        ),
        ("team.yaml", json!({"jenkins": {"clouds": [{"kubernetes": {"name": "k8s", "templates": "none"}}]}})),
    ]);
    let err = res.unwrap_err();
    let shown = err.to_string();
    assert!(
        matches!(&err, MergeError::Conflict { path, earlier, later, .. }
        if path == "jenkins.clouds[kubernetes[name=k8s]].kubernetes.templates"
            && earlier == "clouds.yaml" && later == "team.yaml"),
        "{err:?}"
    );
    assert!(shown.contains("jenkins.clouds[kubernetes[name=k8s]].kubernetes.templates"), "{shown}");
}

// ---------------------------------------------------------------------------------------------
// A document listing one identity twice is refused.

#[test]
fn a_document_listing_an_identity_twice_is_refused() {
    let doc = json!({"jenkins": {"clouds": [
        {"kubernetes": {"name": "k8s", "namespace": "a"}},
        {"kubernetes": {"name": "k8s", "namespace": "b"}}
    ]}});
    let (res, _) = merge_labelled(&[("base.yaml", json!({"jenkins": {}})), ("team/clouds.yaml", doc)]);
    let err = res.unwrap_err();
    assert_eq!(
        err,
        MergeError::DuplicateIdentity {
            input: "team/clouds.yaml".into(),
            path: "jenkins.clouds".into(),
            identity: "kubernetes[name=k8s]".into(),
        }
    );
    let shown = err.to_string();
    for part in ["team/clouds.yaml", "jenkins.clouds", "kubernetes[name=k8s]"] {
        assert!(shown.contains(part), "{part:?} missing from: {shown}");
    }

    // By `name`, nested in a named item: the path names the item.
    let doc =
        json!({"jenkins": {"clouds": [{"kubernetes": {"name": "k8s", "templates": [{"name": "m"}, {"name": "m"}]}}]}});
    assert_eq!(
        merge(&json!({}), &doc).unwrap_err(),
        MergeError::DuplicateIdentity {
            input: "the later document".into(),
            path: "jenkins.clouds[kubernetes[name=k8s]].kubernetes.templates".into(),
            identity: "name=m".into(),
        }
    );
}

// ---------------------------------------------------------------------------------------------
// Origins.

#[test]
fn merge_into_records_the_input_that_set_each_value_last() {
    let (res, origins) = merge_labelled(&[
        (
            "a.yaml",
            json!({"jenkins": {"systemMessage": "a", "numExecutors": 1, "clouds": [
            {"kubernetes": {"name": "k8s", "serverUrl": "https://a", "namespace": "ci"}}
        ], "securityRealm": {"local": {"allowsSignup": false}}}}),
        ),
        (
            "b.yaml",
            json!({"jenkins": {"systemMessage": "b", "clouds": [
            {"kubernetes": {"name": "k8s", "serverUrl": "https://b"}}
        ], "securityRealm": {"oic": {"clientId": "varroa"}}, "agentProtocols": ["Ping"]}}),
        ),
    ]);
    res.unwrap();
    let origin = |p: &str| origins.get(p).map(String::as_str);
    assert_eq!(origin("jenkins.systemMessage"), Some("b.yaml"));
    assert_eq!(origin("jenkins.numExecutors"), Some("a.yaml"));
    assert_eq!(origin("jenkins.clouds[kubernetes[name=k8s]].kubernetes.serverUrl"), Some("b.yaml"));
    assert_eq!(origin("jenkins.clouds[kubernetes[name=k8s]].kubernetes.namespace"), Some("a.yaml"));
    assert_eq!(origin("jenkins.securityRealm.oic.clientId"), Some("b.yaml"));
    assert_eq!(origin("jenkins.agentProtocols[0]"), Some("b.yaml"));
    // The replaced realm's values are forgotten: nothing of `local` is reported as configured.
    assert!(
        !origins.keys().any(|k| k.starts_with("jenkins.securityRealm.local")),
        "stale origins of a replaced choice: {origins:?}"
    );
}

#[test]
fn a_replaced_choice_shorthand_is_no_longer_credited_to_its_input() {
    // JCasC accepts a symbol shorthand (`authorizationStrategy: unsecured`); a later input
    // replaces it whole with a configured strategy: nothing of a.yaml remains there.
    let (res, origins) = merge_labelled(&[
        ("a.yaml", json!({"jenkins": {"authorizationStrategy": "unsecured"}})),
        (
            "b.yaml",
            json!({"jenkins": {"authorizationStrategy": {"loggedInUsersCanDoAnything": {"allowAnonymousRead": false}}}}),
        ),
    ]);
    res.unwrap();
    assert_eq!(
        origins.get("jenkins.authorizationStrategy.loggedInUsersCanDoAnything.allowAnonymousRead").map(String::as_str),
        Some("b.yaml")
    );
    assert!(
        origins.iter().all(|(_, label)| label != "a.yaml"),
        "a.yaml's replaced value is still credited: {origins:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// canonical.

#[test]
fn canonical_sorts_keys_recursively_and_keeps_list_order() {
    let v = json!({"b": 1, "a": {"d": [{"z": 1, "y": 2}, 3, "c"], "c": 2}});
    assert_eq!(bytes(&canonical(&v)), r#"{"a":{"c":2,"d":[{"y":2,"z":1},3,"c"]},"b":1}"#);
    let same = json!({"a": {"c": 2, "d": [{"y": 2, "z": 1}, 3, "c"]}, "b": 1});
    assert_eq!(bytes(&canonical(&v)), bytes(&canonical(&same)));
    assert_eq!(canonical(&canonical(&v)), canonical(&v));
}

// ---------------------------------------------------------------------------------------------
// Properties.
//
// Documents follow a JCasC-like schema where a key always has the same shape ("a"/"b" maps,
// "c"/"d"/"name" scalars, "l" plain lists, "items" lists of named items with unique identities,
// "jenkins.securityRealm" a choice of any shape), so merges mostly succeed; `messy_doc` mixes
// shapes freely to check that both groupings fail together.

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        (0i64..3).prop_map(Value::from),
        any::<bool>().prop_map(Value::from),
        prop::sample::select(vec!["x", "y", "z"]).prop_map(Value::from),
        Just(Value::Null),
    ]
}

fn plain_list() -> impl Strategy<Value = Value> {
    let item = prop_oneof![3 => scalar(), 1 => (0i64..2).prop_map(|n| json!({"c": n}))];
    prop::collection::vec(item, 0..4).prop_map(Value::Array)
}

/// A map of the schema; `depth` bounds the nesting of maps.
fn schema_map(depth: u32) -> BoxedStrategy<Map<String, Value>> {
    let scalars = (prop::option::of(scalar()), prop::option::of(scalar()), prop::option::of(scalar()));
    let lists = prop::option::of(plain_list());
    if depth == 0 {
        return (scalars, lists)
            .prop_map(|((c, d, name), l)| {
                let mut m = Map::new();
                put(&mut m, "c", c);
                put(&mut m, "d", d);
                put(&mut m, "name", name);
                put(&mut m, "l", l);
                m
            })
            .boxed();
    }
    let sub = || prop::option::of(schema_map(depth - 1).prop_map(Value::Object));
    (scalars, lists, sub(), sub(), prop::option::of(named_list(depth - 1)))
        .prop_map(|((c, d, name), l, a, b, items)| {
            let mut m = Map::new();
            put(&mut m, "a", a);
            put(&mut m, "c", c);
            put(&mut m, "items", items);
            put(&mut m, "l", l);
            put(&mut m, "b", b);
            put(&mut m, "d", d);
            put(&mut m, "name", name);
            m
        })
        .boxed()
}

fn put(m: &mut Map<String, Value>, key: &str, v: Option<Value>) {
    if let Some(v) = v {
        m.insert(key.to_string(), v);
    }
}

/// A list of named items with unique identities: `{name: n, ..}`, `{id: n, ..}` or the typed
/// `{kubernetes|docker: {name: n, ..}}`.
fn named_list(depth: u32) -> BoxedStrategy<Value> {
    let ident = (0u8..3, prop::sample::select(vec!["n1", "n2", "n3"]));
    prop::collection::btree_map(ident, schema_map(depth), 0..4)
        .prop_map(|m| m.into_iter().collect::<Vec<_>>())
        .prop_shuffle()
        .prop_map(|entries| {
            Value::Array(
                entries
                    .into_iter()
                    .map(|((form, n), mut body)| {
                        body.remove("name");
                        body.remove("id");
                        let mut item = Map::new();
                        match form {
                            0 => {
                                item.insert("name".into(), json!(n));
                                item.extend(body);
                                Value::Object(item)
                            }
                            1 => {
                                item.insert("id".into(), json!(n));
                                item.extend(body);
                                Value::Object(item)
                            }
                            _ => {
                                let ty = if n == "n3" { "docker" } else { "kubernetes" };
                                item.insert("name".into(), json!(n));
                                item.extend(body);
                                json!({ ty: item })
                            }
                        }
                    })
                    .collect(),
            )
        })
        .boxed()
}

fn realm() -> impl Strategy<Value = Value> {
    prop_oneof![
        (any::<bool>(), prop::sample::subsequence(vec!["admin", "dev"], 0..=2)).prop_map(|(signup, users)| {
            let users: Vec<Value> = users.into_iter().map(|u| json!({"id": u})).collect();
            json!({"local": {"allowsSignup": signup, "users": users}})
        }),
        prop::sample::select(vec!["varroa", "other"]).prop_map(|c| json!({"oic": {"clientId": c}})),
        scalar(),
    ]
}

/// A whole document: the schema map plus an optional `jenkins` with a choice path.
fn doc() -> impl Strategy<Value = Value> {
    (schema_map(2), prop::option::of((prop::option::of(realm()), schema_map(1)))).prop_map(|(mut m, jenkins)| {
        if let Some((realm, mut j)) = jenkins {
            put(&mut j, "securityRealm", realm);
            m.insert("jenkins".into(), Value::Object(j));
        }
        Value::Object(m)
    })
}

/// A document where a key may be a map, a list or a scalar: merges may conflict.
fn messy_doc() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        scalar(),
        prop::collection::vec(scalar(), 0..3).prop_map(Value::Array),
        prop::sample::select(vec!["n1", "n2"]).prop_map(|n| json!([{"name": n, "c": 1}])),
    ];
    let keys = prop::sample::select(vec!["a", "b", "c", "securityRealm"]);
    let value = leaf.prop_recursive(3, 24, 3, move |inner| {
        prop_oneof![
            prop::collection::vec((keys.clone(), inner.clone()), 0..3)
                .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
            (prop::sample::select(vec!["n1", "n2"]), inner).prop_map(|(n, v)| json!([{"name": n, "a": v}])),
        ]
    });
    prop::collection::vec((prop::sample::select(vec!["a", "b", "jenkins"]), value), 0..3)
        .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect()))
        .prop_filter("lists each identity once", |d| merge(&json!({}), d).is_ok())
}

/// JSON pointers and values of the scalar leaves reached through maps only (not into lists).
fn scalar_leaves(v: &Value, pointer: String, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                scalar_leaves(v, format!("{pointer}/{k}"), out);
            }
        }
        Value::Array(_) => {}
        scalar => out.push((pointer, scalar.clone())),
    }
}

/// Whether `pointer` is at or under a choice path.
fn under_choice(pointer: &str) -> bool {
    CHOICE_PATHS.iter().any(|c| {
        let p = format!("/{}", c.replace('.', "/"));
        pointer == p || pointer.starts_with(&format!("{p}/"))
    })
}

fn assoc(a: &Value, b: &Value, c: &Value) -> Result<(), TestCaseError> {
    let left = merge(a, b).and_then(|ab| merge(&ab, c));
    let right = merge(b, c).and_then(|bc| merge(a, &bc));
    match (left, right) {
        (Ok(l), Ok(r)) => {
            prop_assert_eq!(bytes(&canonical(&l)), bytes(&canonical(&r)));
        }
        (Err(_), Err(_)) => {}
        (l, r) => prop_assert!(false, "one grouping failed: (a+b)+c = {:?}, a+(b+c) = {:?}", l, r),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn merge_is_idempotent(a in doc()) {
        prop_assert_eq!(bytes(&merge(&a, &a).unwrap()), bytes(&a));
    }

    #[test]
    fn the_empty_document_is_the_identity(a in doc()) {
        prop_assert_eq!(bytes(&merge(&a, &json!({})).unwrap()), bytes(&a));
        prop_assert_eq!(bytes(&merge(&json!({}), &a).unwrap()), bytes(&a));
    }

    #[test]
    fn merge_is_associative(a in doc(), b in doc(), c in doc()) {
        assoc(&a, &b, &c)?;
    }

    #[test]
    fn merge_is_associative_or_fails_both_ways_on_conflicting_shapes(a in messy_doc(), b in messy_doc(), c in messy_doc()) {
        assoc(&a, &b, &c)?;
    }

    #[test]
    fn messy_documents_are_idempotent_and_have_the_empty_identity(a in messy_doc()) {
        prop_assert_eq!(bytes(&merge(&a, &a).unwrap()), bytes(&a));
        prop_assert_eq!(bytes(&merge(&a, &json!({})).unwrap()), bytes(&a));
        prop_assert_eq!(bytes(&merge(&json!({}), &a).unwrap()), bytes(&a));
    }

    #[test]
    fn the_later_scalars_win_and_the_earlier_ones_stay(a in doc(), b in doc()) {
        let Ok(m) = merge(&a, &b) else { return Ok(()) };
        let mut later = Vec::new();
        scalar_leaves(&b, String::new(), &mut later);
        for (p, v) in &later {
            prop_assert_eq!(m.pointer(p), Some(v), "b's {} lost", p);
        }
        let mut earlier = Vec::new();
        scalar_leaves(&a, String::new(), &mut earlier);
        for (p, v) in &earlier {
            let replaced_choice = CHOICE_PATHS.iter().any(|c| {
                let cp = format!("/{}", c.replace('.', "/"));
                (*p == cp || p.starts_with(&format!("{cp}/"))) && b.pointer(&cp).is_some()
            });
            if b.pointer(p).is_none() && !replaced_choice {
                prop_assert_eq!(m.pointer(p), Some(v), "a's {} lost though b does not set it", p);
            }
        }
        // A choice path b sets is b's value whole.
        for c in CHOICE_PATHS {
            let cp = format!("/{}", c.replace('.', "/"));
            if let Some(v) = b.pointer(&cp) {
                prop_assert_eq!(m.pointer(&cp), Some(v));
            }
        }
        // b's plain-list items are all in the merged list; b's named items are all there.
        for (p, bl) in lists(&b) {
            let ml = m.pointer(&p).and_then(Value::as_array).expect("b's list is in the merge");
            for item in bl.as_array().unwrap() {
                match identity(item) {
                    None => prop_assert!(ml.contains(item), "{} of {} missing", item, p),
                    Some(id) => prop_assert!(ml.iter().any(|x| identity(x).as_deref() == Some(id.as_str()))),
                }
            }
        }
    }

    #[test]
    fn origins_name_the_last_input_setting_each_scalar(a in doc(), b in doc(), c in doc()) {
        let docs = [("A", a), ("B", b), ("C", c)];
        let (res, origins) = merge_labelled(&docs);
        let Ok(m) = res else { return Ok(()) };
        let mut leaves = Vec::new();
        scalar_leaves(&m, String::new(), &mut leaves);
        for (p, _) in leaves {
            let last = docs.iter().rev().find(|(_, d)| d.pointer(&p).is_some()).map(|(l, _)| *l);
            let dotted = p.trim_start_matches('/').replace('/', ".");
            prop_assert_eq!(origins.get(&dotted).map(String::as_str), last, "origin of {}", dotted);
        }
    }
}

/// The lists reached through maps only, by pointer, outside choice paths.
fn lists(v: &Value) -> Vec<(String, Value)> {
    fn walk(v: &Value, p: String, out: &mut Vec<(String, Value)>) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    walk(v, format!("{p}/{k}"), out);
                }
            }
            Value::Array(_) if !under_choice(&p) => out.push((p, v.clone())),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(v, String::new(), &mut out);
    out
}
