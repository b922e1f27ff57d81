//! Admission, as the apiserver's chain runs it on every write (after decoding and defaulting):
//! mutating plugins (LimitRanger defaults) before the object is validated, validating plugins
//! (NamespaceLifecycle is in `ops`; PodSecurity, LimitRanger, ResourceQuota here) after.
//! Writes of the cluster's own controllers go through it too, as they would on a real cluster: a
//! ReplicaSet whose pods a quota refuses reports `FailedCreate`.

pub mod limitrange;
pub mod podsecurity;
pub mod policy;
pub mod quota;

use crate::cluster::Cluster;
use crate::errors::{ApiError, ApiResult};
use crate::meta;
use crate::registry::{GroupResource, ResourceDef};
use serde_json::{Value, json};

fn list(cl: &Cluster, resource: &str, ns: &str) -> Vec<Value> {
    cl.store.list(&GroupResource::new("", resource), Some(ns)).0.iter().map(|o| (**o).clone()).collect()
}

fn is(def: &ResourceDef, group: &str, plural: &str) -> bool {
    !def.is_custom() && def.group == group && def.plural == plural
}

/// Mutating admission of a new pod, in the apiserver's plugin order: ServiceAccount (the
/// `default` account and its API-access volume), LimitRanger (container defaults),
/// DefaultTolerationSeconds, Priority. Then the QoS class is computed from the result.
pub fn mutate(
    cl: &Cluster,
    def: &ResourceDef,
    obj: &mut Value,
    old: Option<&Value>,
    subresource: Option<&str>,
) -> ApiResult<()> {
    if subresource.is_some() || old.is_some() || !is(def, "", "pods") {
        return Ok(());
    }
    service_account(cl, def, obj)?;
    let lrs = list(cl, "limitranges", meta::namespace(obj));
    if !lrs.is_empty() {
        limitrange::default_pod(obj, &lrs);
    }
    default_tolerations(obj);
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut)
        && !spec.contains_key("priorityClassName")
    {
        spec.entry("priority").or_insert(json!(0));
        spec.entry("preemptionPolicy").or_insert(json!("PreemptLowerPriority"));
    }
    let qos = crate::builtin::defaults::pod_qos_class(obj);
    if let Some(st) = obj.get_mut("status").and_then(Value::as_object_mut) {
        st.insert("qosClass".into(), qos.into());
    }
    Ok(())
}

const SA_TOKEN_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The ServiceAccount admission plugin: `serviceAccountName` defaults to `default`, the account
/// must exist, and unless automounting is off its token, the root CA and the namespace are
/// mounted at /var/run/secrets/kubernetes.io/serviceaccount from a `kube-api-access-*` volume.
fn service_account(cl: &Cluster, def: &ResourceDef, pod: &mut Value) -> ApiResult<()> {
    let ns = meta::namespace(pod).to_string();
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else { return Ok(()) };
    let name = spec
        .get("serviceAccountName")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or("default")
        .to_string();
    spec.insert("serviceAccountName".into(), name.clone().into());
    spec.insert("serviceAccount".into(), name.clone().into());
    let Some(sa) = cl.store.get(&GroupResource::new("", "serviceaccounts"), &ns, &name) else {
        let pod_name = meta::name(pod).to_string();
        return Err(ApiError::forbidden(
            &def.group,
            &def.plural,
            &pod_name,
            &format!("error looking up service account {ns}/{name}: serviceaccount {name:?} not found"),
        ));
    };
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else { return Ok(()) };
    let automount = spec
        .get("automountServiceAccountToken")
        .and_then(Value::as_bool)
        .or_else(|| sa.get("automountServiceAccountToken").and_then(Value::as_bool))
        .unwrap_or(true);
    if !automount {
        return Ok(());
    }
    let mounted = |c: &Value| {
        c.get("volumeMounts")
            .and_then(Value::as_array)
            .is_some_and(|ms| ms.iter().any(|m| m.get("mountPath").and_then(Value::as_str) == Some(SA_TOKEN_PATH)))
    };
    let containers = ["initContainers", "containers"];
    if containers.iter().all(|f| spec.get(*f).and_then(Value::as_array).is_none_or(|cs| cs.iter().all(mounted))) {
        return Ok(());
    }
    let vol_name = format!("kube-api-access-{}", &crate::meta::generate_name("")[..5]);
    let volumes = spec.entry("volumes").or_insert_with(|| json!([]));
    if let Some(vs) = volumes.as_array_mut() {
        vs.push(json!({"name": vol_name, "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}, "path": "namespace"}]}},
        ]}}));
    }
    for f in containers {
        if let Some(cs) = spec.get_mut(f).and_then(Value::as_array_mut) {
            for c in cs.iter_mut() {
                if mounted(c) {
                    continue;
                }
                if let Some(cm) = c.as_object_mut() {
                    let mounts = cm.entry("volumeMounts").or_insert_with(|| json!([]));
                    if let Some(ms) = mounts.as_array_mut() {
                        ms.push(json!({"name": vol_name, "readOnly": true, "mountPath": SA_TOKEN_PATH}));
                    }
                }
            }
        }
    }
    Ok(())
}

/// DefaultTolerationSeconds: pods tolerate not-ready and unreachable nodes for 300s.
fn default_tolerations(pod: &mut Value) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else { return };
    let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
    let Some(ts) = tolerations.as_array_mut() else { return };
    for key in ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"] {
        let has = ts.iter().any(|t| {
            t.get("key").and_then(Value::as_str) == Some(key)
                && t.get("effect").and_then(Value::as_str).is_none_or(|e| e == "NoExecute" || e.is_empty())
        }) || ts
            .iter()
            .any(|t| t.get("operator").and_then(Value::as_str) == Some("Exists") && t.get("key").is_none());
        if !has {
            ts.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
        }
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

/// How admission writes what it charges (a ResourceQuota's `status.used`): a status update
/// through the write path, handed in by its caller, `ops`, as upstream's quota admission
/// writes through the apiserver's loopback client; admission does not call the verbs itself.
/// Arguments: the resource, namespace and name, the object with its new status, the field
/// manager.
pub type UpdateStatus = fn(&Cluster, &ResourceDef, &str, &str, Value, &str) -> ApiResult<()>;

/// Validating admission. Returns the warnings to send back; quota usage is charged here (not on
/// dry runs), through `update_status`.
pub fn validate(
    cl: &Cluster,
    def: &ResourceDef,
    obj: &Value,
    old: Option<&Value>,
    subresource: Option<&str>,
    dry_run: bool,
    update_status: UpdateStatus,
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
    // ResourceQuota: the charge is written to the quota's status with a compare-and-swap on its
    // resourceVersion, and everything is evaluated again on a conflict, so concurrent writes
    // cannot both use the last unit of a quota.
    'charge: for _ in 0..64 {
        let mut quotas = list(cl, "resourcequotas", ns);
        if quotas.is_empty() {
            break;
        }
        quotas.sort_by(|a, b| meta::name(a).cmp(meta::name(b)));
        let updates = quota::admit(&quotas, &def.storage.group, &def.storage.resource, obj, old)
            .map_err(|m| forbidden(def, obj, &m))?;
        if dry_run {
            break;
        }
        let Some(qdef) = cl.registry.get("", "v1", "resourcequotas") else { break };
        for (name, used) in updates {
            let Some(q) = quotas.iter().find(|q| meta::name(q) == name) else { continue };
            let mut next = q.clone();
            if let Some(st) = next.as_object_mut().map(|m| m.entry("status").or_insert_with(|| json!({})))
                && let Some(m) = st.as_object_mut()
            {
                m.insert("used".into(), quota::resource_list_to_json(&used));
            }
            match update_status(cl, &qdef, ns, &name, next, "resourcequota-admission") {
                Ok(()) => {}
                Err(e) if e.code == 409 => continue 'charge,
                Err(e) => return Err(e),
            }
        }
        break;
    }
    Ok(warnings)
}
