//! Admission, as the apiserver's chain runs it on every write (after decoding and defaulting):
//! mutating plugins (LimitRanger defaults) before the object is validated, validating plugins
//! (NamespaceLifecycle is in `ops`; PodSecurity, LimitRanger, ResourceQuota here) after.
//! Writes of the cluster's own controllers go through it too, as they would on a real cluster: a
//! ReplicaSet whose pods a quota refuses reports `FailedCreate`.

pub mod limitrange;
pub mod podsecurity;
pub mod quota;

use crate::cluster::Cluster;
use crate::errors::{ApiError, ApiResult};
use crate::meta;
use crate::registry::{GroupResource, ResourceDef};
use serde_json::Value;

fn list(cl: &Cluster, resource: &str, ns: &str) -> Vec<Value> {
    cl.store.list(&GroupResource::new("", resource), Some(ns)).0.iter().map(|o| (**o).clone()).collect()
}

fn is(def: &ResourceDef, group: &str, plural: &str) -> bool {
    !def.is_custom() && def.group == group && def.plural == plural
}

/// Mutating admission: LimitRange defaults into a new pod's containers.
pub fn mutate(cl: &Cluster, def: &ResourceDef, obj: &mut Value, old: Option<&Value>, subresource: Option<&str>) {
    if subresource.is_some() || old.is_some() || !is(def, "", "pods") {
        return;
    }
    let lrs = list(cl, "limitranges", meta::namespace(obj));
    if !lrs.is_empty() {
        limitrange::default_pod(obj, &lrs);
    }
}

fn forbidden(def: &ResourceDef, obj: &Value, msg: &str) -> ApiError {
    let name = match meta::name(obj) {
        "" => meta::meta_str(obj, "generateName").unwrap_or("Unknown"),
        n => n,
    };
    ApiError::forbidden(&def.group, &def.plural, name, msg)
}

/// The Pod Security policy of a namespace.
fn pod_security_policy(cl: &Cluster, ns: &str) -> podsecurity::NamespacePolicy {
    let nsobj = cl.store.get(&GroupResource::new("", "namespaces"), "", ns);
    podsecurity::namespace_policy_with_errors(nsobj.as_deref().and_then(meta::labels)).0
}

/// Validating admission. Returns the warnings to send back; quota usage is charged here (not on
/// dry runs).
pub fn validate(
    cl: &Cluster,
    def: &ResourceDef,
    obj: &Value,
    old: Option<&Value>,
    subresource: Option<&str>,
    dry_run: bool,
) -> ApiResult<Vec<String>> {
    let mut warnings = vec![];
    if def.is_custom() {
        return Ok(warnings);
    }
    let ns = meta::namespace(obj);
    // Namespaces: the Pod Security labels must be valid; tightening them warns about pods
    // that would be refused.
    if is(def, "", "namespaces") && subresource.is_none() {
        let errs = podsecurity::namespace_label_errors(old.map(meta::labels), meta::labels(obj));
        if !errs.is_empty() {
            return Err(ApiError::invalid("", "Namespace", meta::name(obj), &errs));
        }
        if let Some(old) = old {
            let before = podsecurity::namespace_policy_with_errors(meta::labels(old)).0;
            let after = podsecurity::namespace_policy_with_errors(meta::labels(obj)).0;
            if podsecurity::namespace_update_needs_pod_check(&before, &after) {
                let pods = list(cl, "pods", meta::name(obj));
                warnings.extend(podsecurity::namespace_update_warnings(&after.enforce, meta::name(obj), &pods));
            }
        }
    }
    // Pods: enforce; workloads: warn.
    if is(def, "", "pods") && subresource.is_none_or(|s| !podsecurity::is_ignored_pod_subresource(s)) {
        let significant = old.is_none_or(|o| podsecurity::is_significant_pod_update(obj, o));
        if significant {
            let policy = pod_security_policy(cl, ns);
            let empty = Value::Object(Default::default());
            let eval = podsecurity::evaluate(
                &policy,
                obj.get("metadata").unwrap_or(&empty),
                obj.get("spec").unwrap_or(&empty),
                true,
            );
            if let Some(msg) = eval.forbidden {
                return Err(forbidden(def, obj, &msg));
            }
            warnings.extend(eval.warnings);
        }
    } else if subresource.is_none()
        && let Some((pm, ps)) = podsecurity::pod_template_of(&def.group, &def.kind, obj)
    {
        let policy = pod_security_policy(cl, ns);
        warnings.extend(podsecurity::evaluate(&policy, pm, ps, false).warnings);
    }
    if subresource.is_some() || ns.is_empty() {
        return Ok(warnings);
    }
    // LimitRanger.
    if is(def, "", "pods") && old.is_none() {
        let lrs = list(cl, "limitranges", ns);
        limitrange::validate_pod(obj, &lrs).map_err(|m| forbidden(def, obj, &m))?;
    }
    if is(def, "", "persistentvolumeclaims") && !old.is_some_and(meta::is_deleting) {
        let lrs = list(cl, "limitranges", ns);
        limitrange::validate_pvc(obj, &lrs).map_err(|m| forbidden(def, obj, &m))?;
    }
    // ResourceQuota.
    let mut quotas = list(cl, "resourcequotas", ns);
    if !quotas.is_empty() {
        quotas.sort_by(|a, b| meta::name(a).cmp(meta::name(b)));
        let updates = quota::admit(&quotas, &def.storage.group, &def.storage.resource, obj, old)
            .map_err(|m| forbidden(def, obj, &m))?;
        if !dry_run && let Some(qdef) = cl.registry.get("", "v1", "resourcequotas") {
            for (name, used) in updates {
                if let Some(q) = quotas.iter().find(|q| meta::name(q) == name) {
                    let mut status = q.get("status").cloned().unwrap_or_default();
                    if let Some(m) = status.as_object_mut() {
                        m.insert("used".into(), quota::resource_list_to_json(&used));
                    }
                    crate::controllers::write_status(cl, &qdef, q, status, "resourcequota-admission");
                }
            }
        }
    }
    Ok(warnings)
}
