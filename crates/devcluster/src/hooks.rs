//! Per-kind behaviour of the write path that the generic registry delegates to, as the
//! apiserver's strategies do: CRDs compute their status and (un)register their resources,
//! namespaces enter `Terminating`, and so on.

use crate::cluster::Cluster;
use crate::errors::{ApiError, ApiResult};
use crate::meta;
use crate::registry::ResourceDef;
use serde_json::{Value, json};

fn is(def: &ResourceDef, group: &str, plural: &str) -> bool {
    !def.is_custom() && def.group == group && def.plural == plural
}

/// Before an object (served form) is stored: kind-specific checks and fields the server sets.
pub fn before_write(cl: &Cluster, def: &ResourceDef, obj: &mut Value, old: Option<&Value>) -> ApiResult<()> {
    if is(def, "apiextensions.k8s.io", "customresourcedefinitions") {
        crate::crd::compute_status(obj, old, &cl.registry);
    }
    if is(def, "", "namespaces") {
        let deleting = meta::is_deleting(obj);
        if let Some(m) = obj.as_object_mut() {
            let status = m.entry("status").or_insert_with(|| json!({}));
            if let Some(sm) = status.as_object_mut() {
                sm.insert("phase".into(), if deleting { "Terminating" } else { "Active" }.into());
            }
        }
    }
    Ok(())
}

/// After an object was stored (stored form).
pub fn after_write(cl: &Cluster, def: &ResourceDef, stored: &Value, _old: Option<&Value>) {
    if is(def, "apiextensions.k8s.io", "customresourcedefinitions") {
        let name = meta::name(stored);
        if crate::crd::is_established(stored) {
            cl.registry.set_crd(name, crate::crd::resource_defs(stored));
        } else {
            cl.registry.remove_crd(name);
        }
    }
}

/// After an object was removed from the store.
pub fn after_delete(cl: &Cluster, def: &ResourceDef, stored: &Value) {
    if is(def, "apiextensions.k8s.io", "customresourcedefinitions") {
        cl.registry.remove_crd(meta::name(stored));
    }
}

/// The finalizer a delete adds when no propagation policy is given (none: background).
pub fn default_delete_finalizer(_def: &ResourceDef) -> Option<&'static str> {
    None
}

/// Finalizers the server itself adds when an object is deleted.
pub fn deletion_finalizers(def: &ResourceDef, _cur: &Value) -> Vec<String> {
    if is(def, "apiextensions.k8s.io", "customresourcedefinitions") {
        return vec![crate::crd::CLEANUP_FINALIZER.to_string()];
    }
    vec![]
}

/// Whether something other than metadata.finalizers keeps a deleting object (a namespace's
/// `spec.finalizers`).
pub fn deletion_blocked(def: &ResourceDef, obj: &Value) -> bool {
    if !meta::finalizers(obj).is_empty() {
        return true;
    }
    is(def, "", "namespaces")
        && obj.pointer("/spec/finalizers").and_then(Value::as_array).is_some_and(|a| !a.is_empty())
}

/// An object has just been marked deleting.
pub fn on_deleting(def: &ResourceDef, obj: &mut Value) {
    if is(def, "", "namespaces")
        && let Some(m) = obj.as_object_mut()
    {
        let status = m.entry("status").or_insert_with(|| json!({}));
        if let Some(sm) = status.as_object_mut() {
            sm.insert("phase".into(), "Terminating".into());
        }
    }
}

/// Reject writes a kind does not allow through this endpoint.
pub fn check_subresource(def: &ResourceDef, sub: Option<&str>) -> ApiResult<()> {
    match sub {
        None => Ok(()),
        Some("status") if def.status => Ok(()),
        Some("scale") if def.scale.is_some() => Ok(()),
        Some("finalize") if is(def, "", "namespaces") => Ok(()),
        Some(_) => Err(ApiError::not_found_path()),
    }
}

/// Fields the server allocated that an update may omit (a Service's cluster IPs).
pub fn preserve_on_update(def: &ResourceDef, cur: &Value, new: &mut Value) {
    if is(def, "", "services")
        && let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut)
    {
        for k in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            if !spec.contains_key(k)
                && let Some(v) = cur.pointer(&format!("/spec/{k}"))
            {
                spec.insert(k.into(), v.clone());
            }
        }
    }
}
