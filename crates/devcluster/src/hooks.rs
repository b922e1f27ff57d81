//! Per-kind behaviour of the write path that the generic registry delegates to, as the
//! apiserver's strategies do: which pruning, defaults and validation rules apply to a kind
//! (built-in kinds: their schemas and the apiserver's rules; custom resources: their CRD's
//! schema and CEL rules, src/validation/), CRDs compute their status and (un)register their
//! resources, namespaces enter `Terminating`, and so on.

use crate::cluster::Cluster;
use crate::errors::{ApiError, ApiResult};
use crate::field::{FieldError, Path};
use crate::meta;
use crate::names;
use crate::registry::ResourceDef;
use crate::validation::{cel, structural};
use serde_json::{Value, json};

fn is(def: &ResourceDef, group: &str, plural: &str) -> bool {
    !def.is_custom() && def.group == group && def.plural == plural
}

/// Drop fields the kind's schema does not declare; return their paths (for `fieldValidation`).
pub fn prune(def: &ResourceDef, obj: &mut Value) -> Vec<String> {
    match &def.schema {
        Some(s) => structural::prune(obj, s.schema()),
        None => vec![],
    }
}

/// Apply the kind's defaults.
pub fn default(def: &ResourceDef, obj: &mut Value) {
    if def.is_custom() {
        if let Some(s) = &def.schema {
            structural::apply_defaults(obj, s.schema());
        }
    } else {
        crate::builtin::defaults::apply_defaults(&def.group, &def.kind, obj);
        if def.group == "apiextensions.k8s.io" && def.kind == "CustomResourceDefinition" {
            crate::crd::apply_defaults(obj);
        }
    }
}

/// What the real server rejects while decoding a built-in object (bad quantities, bad base64,
/// values of the wrong type): a 400 with the decoder's message.
pub fn decode_check(def: &ResourceDef, obj: &Value) -> Result<(), String> {
    if def.is_custom() {
        return Ok(());
    }
    crate::builtin::validate::decode_check(&def.group, &def.kind, obj)?;
    if let Some(s) = &def.schema {
        let type_errors: Vec<String> = structural::validate(obj, s.schema())
            .into_iter()
            .filter(|e| e.detail.contains(" must be of type "))
            .map(|e| e.detail)
            .collect();
        if !type_errors.is_empty() {
            return Err(format!(
                "{kind} in version \"{v}\" cannot be handled as a {kind}: {}",
                type_errors.join(", "),
                kind = def.kind,
                v = def.version
            ));
        }
    }
    Ok(())
}

/// Every validation error of an object about to be written (`old` on update).
pub fn validate(_cl: &Cluster, def: &ResourceDef, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let meta_path = Path::new("metadata");
    let empty = Value::Object(Default::default());
    let meta = obj.get("metadata").unwrap_or(&empty);
    let mut errs = vec![];
    if def.is_custom() {
        errs.extend(names::validate_object_meta(meta, def.namespaced, def.name_rule, &meta_path));
        if let Some(old) = old {
            let old_meta = old.get("metadata").unwrap_or(&empty);
            errs.extend(names::validate_object_meta_update(meta, old_meta, &meta_path));
        }
        if let Some(s) = &def.schema {
            match old {
                Some(old) => errs.extend(structural::validate_update(obj, old, s.schema())),
                None => errs.extend(structural::validate(obj, s.schema())),
            }
            // CEL rules run unless an error makes their input meaningless, as upstream.
            match cel::blocking_error(&errs) {
                Some(e) => errs.push(e),
                None => errs.extend(cel::validate(obj, old, s.schema())),
            }
        }
    } else {
        // The built-in validation includes the object meta checks with the kind's name rule.
        errs.extend(crate::builtin::validate::validate(&def.group, &def.kind, obj, old));
        // The admission policy kinds' own checks compile their CEL, so they live with the
        // policy evaluator rather than among the built-in rules.
        match (def.group.as_str(), def.kind.as_str()) {
            ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => {
                errs.extend(crate::admission::policy::validate_policy(obj))
            }
            ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding") => {
                errs.extend(crate::admission::policy::validate_binding(obj))
            }
            _ => {}
        }
        if def.group == "apiextensions.k8s.io" && def.kind == "CustomResourceDefinition" {
            errs.extend(crate::crd::validate(obj, old));
        }
    }
    errs
}

/// Before an object (served form) is stored: kind-specific checks and fields the server sets.
pub fn before_write(cl: &Cluster, def: &ResourceDef, obj: &mut Value, old: Option<&Value>) -> ApiResult<()> {
    if is(def, "apiextensions.k8s.io", "customresourcedefinitions") {
        crate::crd::compute_status(cl, obj, old);
    }
    if is(def, "", "services") && old.is_none() {
        allocate_service_ips(cl, obj)?;
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
pub fn after_write(cl: &Cluster, def: &ResourceDef, stored: &Value, old: Option<&Value>) {
    cl.index().put(
        &crate::index::Key::new(&def.storage.group, &def.storage.resource, meta::namespace(stored), meta::name(stored)),
        stored,
    );
    // A new namespace has its default ServiceAccount and root CA at once, so pods can be
    // created in it right away (the controllers keep them there afterwards).
    if is(def, "", "namespaces")
        && old.is_none()
        && !meta::is_deleting(stored)
        && let Some(seed) = cl.on_namespace_created.get()
    {
        seed(cl, meta::name(stored));
    }
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
    cl.index().remove(
        &crate::index::Key::new(&def.storage.group, &def.storage.resource, meta::namespace(stored), meta::name(stored)),
        stored,
    );
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
    // A pod waits for the kubelet while its grace period is not 0.
    if is(def, "", "pods")
        && obj.pointer("/metadata/deletionGracePeriodSeconds").and_then(Value::as_i64).unwrap_or(0) > 0
    {
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
        Some("binding") if is(def, "", "pods") => Ok(()),
        Some("token") if is(def, "", "serviceaccounts") => Ok(()),
        Some(s)
            if !def.is_custom()
                && crate::registry::extra_subresources(&def.group, &def.plural).iter().any(|x| x.name == s) =>
        {
            Ok(())
        }
        Some(_) => Err(ApiError::not_found_path()),
    }
}

/// Fields the server allocated that an update may omit (a Service's cluster IPs).
pub fn preserve_on_update(def: &ResourceDef, cur: &Value, new: &mut Value) {
    // A pod's ephemeral containers change only through `pods/ephemeralcontainers`
    // (podStrategy.PrepareForUpdate keeps the old ones).
    if is(def, "", "pods")
        && let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut)
    {
        match cur.pointer("/spec/ephemeralContainers") {
            Some(v) => spec.insert("ephemeralContainers".into(), v.clone()),
            None => spec.remove("ephemeralContainers"),
        };
    }
    if is(def, "certificates.k8s.io", "certificatesigningrequests")
        && let Some(m) = new.as_object_mut()
    {
        // `csrStrategy.PrepareForUpdate`: an update of the CSR itself changes metadata only.
        for k in ["spec", "status"] {
            match cur.get(k) {
                Some(v) => m.insert(k.into(), v.clone()),
                None => m.remove(k),
            };
        }
    }
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

/// The grace period a pod delete records: the request's, else the pod's
/// `terminationGracePeriodSeconds`, else 30; 0 for a pod no node runs. None for other kinds.
pub fn pod_grace(def: &ResourceDef, cur: &Value, requested: Option<i64>) -> Option<i64> {
    if !is(def, "", "pods") {
        return None;
    }
    let scheduled = cur.pointer("/spec/nodeName").and_then(Value::as_str).is_some_and(|n| !n.is_empty());
    let terminal = matches!(cur.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded") | Some("Failed"));
    if !scheduled || terminal {
        return Some(0);
    }
    Some(
        requested
            .or_else(|| cur.pointer("/spec/terminationGracePeriodSeconds").and_then(Value::as_i64))
            .unwrap_or(30)
            .max(0),
    )
}

/// ClusterIP and NodePort allocation of a new Service, as the Service REST storage does it: a
/// free address of 10.96.0.0/12 (10.96.0.1 is the `kubernetes` Service's), `None` for headless,
/// nothing for ExternalName; node ports from 30000-32767 for NodePort and LoadBalancer.
fn allocate_service_ips(cl: &Cluster, obj: &mut Value) -> ApiResult<()> {
    let _guard = cl.ip_alloc.lock().unwrap_or_else(|e| e.into_inner());
    let (services, _) = cl.store.list(&crate::registry::GroupResource::new("", "services"), None);
    let svc_type = obj.pointer("/spec/type").and_then(Value::as_str).unwrap_or("ClusterIP").to_string();
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else { return Ok(()) };
    if svc_type == "ExternalName" {
        return Ok(());
    }
    let requested = spec.get("clusterIP").and_then(Value::as_str).unwrap_or("").to_string();
    let used: std::collections::BTreeSet<String> = services
        .iter()
        .filter_map(|s| s.pointer("/spec/clusterIP").and_then(Value::as_str).map(str::to_string))
        .collect();
    let ip = if requested == "None" {
        "None".to_string()
    } else if !requested.is_empty() {
        if used.contains(&requested) {
            return Err(ApiError::invalid(
                "",
                "Service",
                meta::name(obj),
                &[crate::field::FieldError::invalid(
                    "spec.clusterIPs",
                    Value::Array(vec![requested.clone().into()]),
                    format!("failed to allocate IP {requested}: provided IP is already allocated"),
                )],
            ));
        }
        requested
    } else {
        (10..=(16 * 256 * 256 - 2))
            .map(|n: u32| format!("10.{}.{}.{}", 96 + n / 65536, (n / 256) % 256, n % 256))
            .find(|ip| !used.contains(ip))
            .unwrap_or_else(|| "10.111.255.254".to_string())
    };
    spec.insert("clusterIP".into(), ip.clone().into());
    spec.insert("clusterIPs".into(), json!([ip]));
    if ip != "None" || !spec.contains_key("ipFamilies") {
        spec.entry("ipFamilies").or_insert_with(|| json!(["IPv4"]));
        spec.entry("ipFamilyPolicy").or_insert_with(|| json!("SingleStack"));
    }
    if svc_type == "NodePort" || svc_type == "LoadBalancer" {
        let used_ports: std::collections::BTreeSet<i64> = services
            .iter()
            .flat_map(|s| s.pointer("/spec/ports").and_then(Value::as_array).cloned().unwrap_or_default())
            .filter_map(|p| p.get("nodePort").and_then(Value::as_i64))
            .collect();
        let mut next = 30000i64;
        if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
            for p in ports {
                if p.get("nodePort").and_then(Value::as_i64).is_none_or(|n| n == 0) {
                    while used_ports.contains(&next) {
                        next += 1;
                    }
                    if let Some(pm) = p.as_object_mut() {
                        pm.insert("nodePort".into(), next.into());
                    }
                    next += 1;
                }
            }
        }
    }
    Ok(())
}

/// What a write through one of `registry::extra_subresources` makes of the stored object: only
/// the part that subresource owns changes (the registries' `PrepareForUpdate`). `None` for other
/// writes.
pub fn subresource_update(def: &ResourceDef, sub: Option<&str>, cur: &Value, new: &Value) -> Option<Value> {
    match sub? {
        // pkg/registry/certificates/certificates/strategy.go `csrApprovalStrategy`: only the
        // conditions change; new ones get their timestamps.
        "approval" if is(def, "certificates.k8s.io", "certificatesigningrequests") => {
            let mut out = cur.clone();
            let now = meta::now();
            let mut conds = new.pointer("/status/conditions").cloned().unwrap_or(Value::Null);
            for c in conds.as_array_mut().into_iter().flatten() {
                if let Some(m) = c.as_object_mut() {
                    for k in ["lastUpdateTime", "lastTransitionTime"] {
                        if m.get(k).is_none_or(Value::is_null) {
                            m.insert(k.into(), now.clone().into());
                        }
                    }
                }
            }
            if let Some(m) = out.as_object_mut() {
                let status = m.entry("status").or_insert_with(|| json!({}));
                if let Some(sm) = status.as_object_mut() {
                    if conds.is_null() {
                        sm.remove("conditions");
                    } else {
                        sm.insert("conditions".into(), conds);
                    }
                }
            }
            Some(out)
        }
        // pkg/registry/core/pod/strategy.go `podEphemeralContainersStrategy`: only
        // `spec.ephemeralContainers` changes.
        "ephemeralcontainers" if is(def, "", "pods") => {
            let mut out = cur.clone();
            if let Some(spec) = out.get_mut("spec").and_then(Value::as_object_mut) {
                match new.pointer("/spec/ephemeralContainers") {
                    Some(v) if !v.is_null() => spec.insert("ephemeralContainers".into(), v.clone()),
                    _ => spec.remove("ephemeralContainers"),
                };
            }
            Some(out)
        }
        _ => None,
    }
}

/// Fields the server sets on create from who creates (a CertificateSigningRequest's requester:
/// `spec.username`, `uid`, `groups`, `extra`, and no status, as its strategy's
/// `PrepareForCreate`).
pub fn on_create(def: &ResourceDef, obj: &mut Value, user: Option<&crate::auth::rbac::UserInfo>) {
    if !is(def, "certificates.k8s.io", "certificatesigningrequests") {
        return;
    }
    let Some(m) = obj.as_object_mut() else { return };
    m.remove("status");
    let Some(u) = user else { return };
    if let Some(spec) = m.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("username".into(), u.name.clone().into());
        if u.uid.is_empty() {
            spec.remove("uid");
        } else {
            spec.insert("uid".into(), u.uid.clone().into());
        }
        spec.insert("groups".into(), json!(u.groups));
        if u.extra.is_empty() {
            spec.remove("extra");
        } else {
            spec.insert("extra".into(), json!(u.extra));
        }
    }
}
