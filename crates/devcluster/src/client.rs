//! The in-process client of the cluster's own components (the controllers, the process runtime,
//! bootstrap): lookups, compare-then-write updates, background deletes and Events, all through
//! `ops`, the verbs the API serves, so admission, validation and watches see these writes
//! exactly like a client's.

use crate::cluster::Cluster;
use crate::index::Key;
use crate::meta;
use crate::ops::{self, DeleteOpts, WriteOpts};
use crate::registry::{GroupResource, ResourceDef};
use serde_json::{Value, json};
use std::sync::Arc;

/// The registry entry of a built-in resource (always present).
pub(crate) fn def(cl: &Cluster, group: &str, plural: &str) -> Option<Arc<ResourceDef>> {
    cl.registry.get(group, "v1", plural)
}

/// The stored object of a key.
pub(crate) fn get(cl: &Cluster, key: &Key) -> Option<Arc<Value>> {
    cl.store.get(&key.gr, &key.namespace, &key.name)
}

/// Objects of a resource in a namespace.
pub(crate) fn list_ns(cl: &Cluster, group: &str, resource: &str, ns: &str) -> Vec<Arc<Value>> {
    cl.store.list(&GroupResource::new(group, resource), Some(ns)).0
}

/// Replace an object's status when it differs (compare, then write). Errors are logged: the
/// next change or resync tries again.
pub fn write_status(cl: &Cluster, def: &ResourceDef, obj: &Value, status: Value, manager: &str) {
    if obj.get("status") == Some(&status) {
        return;
    }
    let mut next = obj.clone();
    if let Some(m) = next.as_object_mut() {
        m.insert("status".into(), status);
    }
    let opts = WriteOpts { subresource: Some("status".into()), ..WriteOpts::system(manager) };
    if let Err(e) = ops::update(cl, def, meta::namespace(obj), meta::name(obj), next, &opts) {
        tracing::debug!(manager, name = meta::name(obj), error = %e.message, "status update failed");
    }
}

/// Replace an object's spec-side content (compare, then write).
pub fn write_object(cl: &Cluster, def: &ResourceDef, cur: &Value, next: Value, manager: &str) -> bool {
    if *cur == next {
        return false;
    }
    match ops::update(cl, def, meta::namespace(cur), meta::name(cur), next, &WriteOpts::system(manager)) {
        Ok(_) => true,
        Err(e) => {
            tracing::debug!(manager, name = meta::name(cur), error = %e.message, "update failed");
            false
        }
    }
}

/// Delete in the background (what controllers and the garbage collector do).
pub(crate) fn delete(cl: &Cluster, def: &ResourceDef, ns: &str, name: &str) {
    let opts = DeleteOpts { propagation_policy: Some("Background".into()), ..Default::default() };
    if let Err(e) = ops::delete(cl, def, ns, name, &opts)
        && e.code != 404
    {
        tracing::debug!(name, error = %e.message, "delete failed");
    }
}

/// Record an event about an object (core/v1, as controllers' recorders do); a repeat of the
/// same event bumps its count, as the recorders' aggregation does.
pub(crate) fn event(cl: &Cluster, obj: &Value, type_: &str, reason: &str, message: &str, component: &str) {
    let Some(edef) = def(cl, "", "events") else { return };
    let ns = match meta::namespace(obj) {
        "" => "default",
        n => n,
    };
    let now = meta::now();
    let uid = meta::uid(obj);
    let same = cl.index().event(uid, reason, message).and_then(|k| get(cl, &k));
    if let Some(e) = same {
        let mut next = (*e).clone();
        let count = e.get("count").and_then(Value::as_i64).unwrap_or(1) + 1;
        if let Some(m) = next.as_object_mut() {
            m.insert("count".into(), count.into());
            m.insert("lastTimestamp".into(), now.into());
        }
        let _ = write_object(cl, &edef, &e, next, component);
        return;
    }
    // Named as the event recorder names them: <object>.<unix nanos in hex>.
    let nanos = jiff::Timestamp::now().as_nanosecond();
    let ev = json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": format!("{}.{:x}", meta::name(obj), nanos), "namespace": ns},
        "involvedObject": {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "name": meta::name(obj),
            "namespace": meta::namespace(obj), "uid": meta::uid(obj), "resourceVersion": meta::meta_str(obj, "resourceVersion").unwrap_or("")},
        "reason": reason, "message": message, "type": type_,
        "source": {"component": component}, "reportingComponent": component, "reportingInstance": "devcluster",
        "firstTimestamp": now, "lastTimestamp": now, "count": 1, "eventTime": Value::Null,
    });
    let _ = ops::create(cl, &edef, ns, ev, &WriteOpts::system(component));
}
