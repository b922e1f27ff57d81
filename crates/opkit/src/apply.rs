//! Compare, then write: the objects a controller owns are written only when they differ.
//!
//! [`ensure`] reads the live object and writes the desired one with server-side apply
//! (`PATCH` with `application/apply-patch+yaml`, `force=true`, the caller's field manager), the
//! write `kubectl apply --server-side --force-conflicts` makes, but only when the comparison
//! below finds a difference. A reconcile that changes nothing therefore sends reads only, and
//! the object's `resourceVersion` stays put (no watch event, no wake-up of other controllers).
//!
//! # The comparison
//!
//! Both objects are turned into JSON. From the desired object, the fields the server owns are
//! dropped first: `status` (written through the status subresource, never by apply) and
//! `metadata.{uid, resourceVersion, generation, creationTimestamp, managedFields, selfLink,
//! deletionTimestamp, deletionGracePeriodSeconds}`. That cleaned JSON is also the body applied.
//! Then the object is up to date when both hold:
//!
//! 1. **desired ⊆ live** ([`first_difference`]):
//!    - an object matches when every key the desired object sets matches the live value under
//!      the same key; keys only the live object has (server defaults, labels or annotations other
//!      managers added) are ignored;
//!    - a list matches when it has the same length and each element matches the live element at
//!      the same index (so order matters and an extra live element is a difference);
//!    - numbers match by value (`1` matches `1.0`); strings, booleans exactly;
//!    - a desired `null`, `{}`, `[]`, `""`, `false` or `0` also matches a missing live field,
//!      because the API server omits empty optional fields (Go's `omitempty`).
//! 2. **owned ⊆ desired** ([`first_owned_not_desired`]): every field that this field manager's
//!    `Apply` entry in `metadata.managedFields` owns is still set in the desired object. A field
//!    the controller stopped setting is then removed by the next apply, as server-side apply
//!    removes fields a manager no longer applies. List items are matched by their key
//!    (`k:{"name":"x"}`), a key field missing from the desired item counts as matching (the server
//!    may have defaulted it, as `protocol` of a container port).
//!
//! What the comparison cannot see: values the server rewrites into another spelling (a quantity
//! `1000m` is stored as `1`): write them in canonical form, or every reconcile writes.
//!
//! [`WriteCounter`] counts outcomes (and exports them as a Prometheus counter) so that tests can
//! prove that a reconcile of an up-to-date object writes nothing.

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use kube::Resource;
use kube::api::{Api, Patch, PatchParams};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// What [`ensure`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The object did not exist and was created.
    Created,
    /// The object differed and was written.
    Updated,
    /// The object already matched: nothing was written.
    Unchanged,
    /// The object was deleted (recorded by callers that delete; [`ensure`] never deletes).
    Deleted,
}

impl Outcome {
    /// `created`, `updated` or `unchanged` (the metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Created => "created",
            Outcome::Updated => "updated",
            Outcome::Unchanged => "unchanged",
            Outcome::Deleted => "deleted",
        }
    }

    /// Whether a write was sent.
    pub fn wrote(self) -> bool {
        self != Outcome::Unchanged
    }
}

/// Metadata fields the server sets; never compared, never applied.
const SERVER_METADATA: &[&str] = &[
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// Make sure the live object matches `desired`, writing it with server-side apply (forced, as
/// `field_manager`) only when it does not. See the [module documentation](self) for the
/// comparison. `desired` needs `metadata.name`; its namespace is the `api`'s.
pub async fn ensure<K>(api: &Api<K>, desired: &K, field_manager: &str) -> Result<Outcome>
where
    K: Resource + Clone + Debug + Serialize + DeserializeOwned,
{
    let body = apply_body(desired)?;
    let name = desired
        .meta()
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| Error::invalid("metadata.name", "the desired object needs a name"))?;
    let kind = body.get("kind").and_then(Value::as_str).unwrap_or("object").to_string();
    let what =
        format!("{kind} {}", desired.meta().namespace.as_deref().map_or(name.to_string(), |ns| format!("{ns}/{name}")));
    if field_manager.is_empty() {
        return Err(Error::invalid("field manager", "must not be empty: use the controller's name"));
    }

    let live = api.get_opt(name).await.map_err(|e| Error::kube(format!("get {what}"), e))?;
    let outcome = match &live {
        None => Outcome::Created,
        Some(live) => {
            let live = serde_json::to_value(live)
                .map_err(|source| Error::Json { action: format!("serializing live {what}"), source })?;
            let stale = first_difference(&body, &live).map(|p| format!("{p} differs")).or_else(|| {
                first_owned_not_desired(&live, field_manager, &body).map(|p| format!("{p} is no longer desired"))
            });
            match stale {
                None => {
                    tracing::debug!(object = %what, "up to date, not written");
                    return Ok(Outcome::Unchanged);
                }
                Some(why) => {
                    tracing::info!(object = %what, field_manager, "{why}: applying");
                    Outcome::Updated
                }
            }
        }
    };
    if outcome == Outcome::Created {
        tracing::info!(object = %what, field_manager, "absent: creating");
    }
    let params = PatchParams::apply(field_manager).force();
    api.patch(name, &params, &Patch::Apply(&body)).await.map_err(|e| Error::kube(format!("apply {what}"), e))?;
    Ok(outcome)
}

/// The JSON written by [`ensure`]: `desired` without `status` and server-set metadata.
pub fn apply_body<K: Serialize>(desired: &K) -> Result<Value> {
    let mut v = serde_json::to_value(desired)
        .map_err(|source| Error::Json { action: "serializing the desired object".into(), source })?;
    let Some(obj) = v.as_object_mut() else {
        return Err(Error::invalid("desired object", "does not serialize to a JSON object"));
    };
    for field in ["apiVersion", "kind"] {
        if obj.get(field).and_then(Value::as_str).is_none_or(str::is_empty) {
            return Err(Error::invalid(field, "server-side apply needs apiVersion and kind: set the type meta"));
        }
    }
    obj.remove("status");
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        for f in SERVER_METADATA {
            meta.remove(*f);
        }
    }
    Ok(v)
}

/// The first JSON path (`.spec.template.spec.containers[0].image`) where `desired` is not a
/// subset of `live`, or `None` when it is. See the [module documentation](self).
pub fn first_difference(desired: &Value, live: &Value) -> Option<String> {
    let mut path = String::new();
    if subset(desired, Some(live), &mut path) { None } else { Some(path_or_root(path)) }
}

fn path_or_root(p: String) -> String {
    if p.is_empty() { ".".to_string() } else { p }
}

/// Whether `d` is a subset of `l`; on `false`, `path` is where they differ.
fn subset(d: &Value, l: Option<&Value>, path: &mut String) -> bool {
    let l = match l {
        None | Some(Value::Null) => return is_empty_value(d),
        Some(l) => l,
    };
    match (d, l) {
        (Value::Object(dm), Value::Object(lm)) => {
            for (k, dv) in dm {
                let len = path.len();
                path.push('.');
                path.push_str(k);
                if !subset(dv, lm.get(k), path) {
                    return false;
                }
                path.truncate(len);
            }
            true
        }
        (Value::Array(da), Value::Array(la)) => {
            if da.len() != la.len() {
                return false;
            }
            for (i, (dv, lv)) in da.iter().zip(la).enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                if !subset(dv, Some(lv), path) {
                    return false;
                }
                path.truncate(len);
            }
            true
        }
        (Value::Number(dn), Value::Number(ln)) => match (dn.as_i64(), ln.as_i64()) {
            (Some(a), Some(b)) => a == b,
            _ => dn.as_f64().is_some_and(|a| ln.as_f64() == Some(a)),
        },
        (Value::Null, _) => false,
        _ => d == l,
    }
}

/// What Go's `omitempty` leaves out of the server's answer.
fn is_empty_value(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

/// The first field that `field_manager` owns through server-side apply (its `Apply` entry in the
/// live object's `metadata.managedFields`, main resource only) but `desired` no longer sets, or
/// `None`. Such a field would be removed by the next apply.
pub fn first_owned_not_desired(live: &Value, field_manager: &str, desired: &Value) -> Option<String> {
    let entries = live.pointer("/metadata/managedFields")?.as_array()?;
    for e in entries {
        let mine = e.get("manager").and_then(Value::as_str) == Some(field_manager)
            && e.get("operation").and_then(Value::as_str) == Some("Apply")
            && e.get("subresource").and_then(Value::as_str).is_none_or(str::is_empty);
        if !mine {
            continue;
        }
        if let Some(fields) = e.get("fieldsV1").and_then(Value::as_object) {
            let mut path = String::new();
            if !owned_covered(fields, desired, &mut path) {
                return Some(path_or_root(path));
            }
        }
    }
    None
}

/// Whether every field in the `fieldsV1` set `fields` is set in `desired`.
fn owned_covered(fields: &Map<String, Value>, desired: &Value, path: &mut String) -> bool {
    for (key, sub) in fields {
        let len = path.len();
        let child = if let Some(name) = key.strip_prefix("f:") {
            path.push('.');
            path.push_str(name);
            desired.as_object().and_then(|m| m.get(name)).filter(|v| !v.is_null())
        } else if let Some(k) = key.strip_prefix("k:") {
            path.push_str(&format!("[{k}]"));
            let Ok(Value::Object(want)) = serde_json::from_str::<Value>(k) else { continue };
            desired.as_array().and_then(|items| items.iter().find(|item| key_matches(item, &want)))
        } else if let Some(v) = key.strip_prefix("v:") {
            path.push_str(&format!("[{v}]"));
            let Ok(want) = serde_json::from_str::<Value>(v) else { continue };
            desired.as_array().and_then(|items| items.iter().find(|item| **item == want))
        } else if let Some(i) = key.strip_prefix("i:") {
            path.push_str(&format!("[{i}]"));
            let Ok(i) = i.parse::<usize>() else { continue };
            desired.as_array().and_then(|items| items.get(i))
        } else {
            // "." (the node itself) and anything this version does not know.
            continue;
        };
        let Some(child) = child else { return false };
        if let Some(sub) = sub.as_object()
            && !owned_covered(sub, child, path)
        {
            return false;
        }
        path.truncate(len);
    }
    true
}

/// A list item matches a `k:{...}` key when no key field it sets differs and at least one matches.
fn key_matches(item: &Value, want: &Map<String, Value>) -> bool {
    let Some(item) = item.as_object() else { return false };
    let mut matched = false;
    for (k, v) in want {
        match item.get(k) {
            Some(iv) if iv == v => matched = true,
            Some(_) => return false,
            None => {}
        }
    }
    matched
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WriteLabels {
    kind: String,
    outcome: String,
}

/// Counts [`ensure`] outcomes; clones share the counts. Export them with
/// [`WriteCounter::register`] as `<prefix>_apply_total{kind, outcome}`.
#[derive(Clone, Debug, Default)]
pub struct WriteCounter {
    totals: Arc<[AtomicU64; 4]>,
    family: Family<WriteLabels, Counter>,
}

impl WriteCounter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Register the counter as `apply` (exported as `apply_total`) in `registry`; use
    /// `registry.sub_registry_with_prefix("vesper")` for a prefix.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "apply",
            "Writes to the API and the compare-then-write checks that needed none, by kind and outcome (created, updated, deleted, unchanged)",
            self.family.clone(),
        );
    }

    /// Count one outcome for `kind`.
    pub fn record(&self, kind: &str, outcome: Outcome) {
        self.totals[index(outcome)].fetch_add(1, Ordering::Relaxed);
        self.family.get_or_create(&WriteLabels { kind: kind.to_string(), outcome: outcome.as_str().to_string() }).inc();
    }

    /// How many times `outcome` happened, over all kinds.
    pub fn get(&self, outcome: Outcome) -> u64 {
        self.totals[index(outcome)].load(Ordering::Relaxed)
    }

    /// Writes sent: created, updated and deleted.
    pub fn writes(&self) -> u64 {
        self.get(Outcome::Created) + self.get(Outcome::Updated) + self.get(Outcome::Deleted)
    }

    /// [`ensure`], counted.
    pub async fn ensure<K>(&self, api: &Api<K>, desired: &K, field_manager: &str) -> Result<Outcome>
    where
        K: Resource + Clone + Debug + Serialize + DeserializeOwned,
    {
        let outcome = ensure(api, desired, field_manager).await?;
        let kind = apply_body(desired)?.get("kind").and_then(Value::as_str).unwrap_or_default().to_string();
        self.record(&kind, outcome);
        Ok(outcome)
    }
}

fn index(o: Outcome) -> usize {
    match o {
        Outcome::Created => 0,
        Outcome::Updated => 1,
        Outcome::Unchanged => 2,
        Outcome::Deleted => 3,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn subset_ignores_what_only_the_live_object_has() {
        let d = json!({"metadata": {"name": "a", "labels": {"app": "x"}}, "spec": {"replicas": 2}});
        let l = json!({"metadata": {"name": "a", "uid": "u", "labels": {"app": "x", "team": "y"}},
                       "spec": {"replicas": 2, "strategy": {"type": "RollingUpdate"}}, "status": {}});
        assert_eq!(first_difference(&d, &l), None);
    }

    #[test]
    fn subset_reports_the_first_differing_path() {
        let l = json!({"spec": {"containers": [{"name": "a", "image": "x:1"}, {"name": "b", "image": "y"}]}});
        let d = json!({"spec": {"containers": [{"name": "a", "image": "x:2"}, {"name": "b"}]}});
        assert_eq!(first_difference(&d, &l).as_deref(), Some(".spec.containers[0].image"));
        let d = json!({"spec": {"containers": [{"name": "a"}]}});
        assert_eq!(first_difference(&d, &l).as_deref(), Some(".spec.containers"), "length differs");
        let d = json!({"spec": {"containers": [{"name": "b"}, {"name": "a"}]}});
        assert_eq!(first_difference(&d, &l).as_deref(), Some(".spec.containers[0].name"), "order matters");
        assert_eq!(first_difference(&json!({"data": {"k": "v"}}), &json!({})).as_deref(), Some(".data"));
        assert_eq!(first_difference(&json!(1), &json!("1")).as_deref(), Some("."));
    }

    #[test]
    fn numbers_match_by_value_and_empty_values_match_absent_ones() {
        assert_eq!(first_difference(&json!({"a": 1}), &json!({"a": 1.0})), None);
        assert!(first_difference(&json!({"a": 1}), &json!({"a": 2})).is_some());
        let d = json!({"a": {}, "b": [], "c": "", "d": false, "e": 0, "f": null});
        assert_eq!(first_difference(&d, &json!({})), None);
        assert!(first_difference(&json!({"f": null}), &json!({"f": 1})).is_some(), "null means unset");
        assert!(first_difference(&json!({"d": true}), &json!({})).is_some());
    }

    #[test]
    fn apply_body_drops_server_fields_and_needs_type_meta() {
        let cm = k8s_openapi::api::core::v1::ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some("a".into()),
                uid: Some("u".into()),
                resource_version: Some("7".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let b = apply_body(&cm).unwrap();
        assert_eq!(b, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}));
        let untyped = kube::api::DynamicObject { types: None, metadata: Default::default(), data: json!({}) };
        assert!(matches!(apply_body(&untyped), Err(Error::Invalid { .. })));
    }

    #[test]
    fn owned_fields_must_still_be_desired() {
        let live = json!({"metadata": {"managedFields": [
            {"manager": "other", "operation": "Apply", "fieldsV1": {"f:metadata": {"f:labels": {"f:team": {}}}}},
            {"manager": "op", "operation": "Update", "fieldsV1": {"f:data": {"f:old": {}}}},
            {"manager": "op", "operation": "Apply", "fieldsV1": {
                "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                "f:spec": {"f:ports": {"k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}, "f:port": {}}},
                           "f:finalizers": {"v:\"a\"": {}}}}}
        ]}});
        let desired = json!({"metadata": {"labels": {"app": "x"}},
                             "spec": {"ports": [{"port": 80}], "finalizers": ["a"]}});
        assert_eq!(first_owned_not_desired(&live, "op", &desired), None, "defaulted key field protocol");
        let desired = json!({"metadata": {"labels": {}}, "spec": {"ports": [{"port": 80}], "finalizers": ["a"]}});
        assert_eq!(first_owned_not_desired(&live, "op", &desired).as_deref(), Some(".metadata.labels.app"));
        let desired =
            json!({"metadata": {"labels": {"app": "x"}}, "spec": {"ports": [{"port": 81}], "finalizers": ["a"]}});
        assert_eq!(
            first_owned_not_desired(&live, "op", &desired).as_deref(),
            Some(".spec.ports[{\"port\":80,\"protocol\":\"TCP\"}]")
        );
        let desired =
            json!({"metadata": {"labels": {"app": "x"}}, "spec": {"ports": [{"port": 80}], "finalizers": []}});
        assert_eq!(first_owned_not_desired(&live, "op", &desired).as_deref(), Some(".spec.finalizers[\"a\"]"));
        assert_eq!(first_owned_not_desired(&live, "nobody", &json!({})), None);
    }

    #[test]
    fn counter_counts_per_outcome_and_exports() {
        let c = WriteCounter::new();
        let mut reg = Registry::with_prefix("t");
        c.register(&mut reg);
        c.record("ConfigMap", Outcome::Created);
        c.clone().record("ConfigMap", Outcome::Unchanged);
        c.record("Service", Outcome::Unchanged);
        assert_eq!((c.get(Outcome::Created), c.get(Outcome::Updated), c.get(Outcome::Unchanged)), (1, 0, 2));
        assert_eq!(c.writes(), 1);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &reg).unwrap();
        assert!(text.contains("t_apply_total{kind=\"ConfigMap\",outcome=\"unchanged\"} 1"), "{text}");
        assert!(text.contains("t_apply_total{kind=\"Service\",outcome=\"unchanged\"} 1"), "{text}");
    }
}
