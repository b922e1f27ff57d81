//! Validation of built-in kinds with the real apiserver's messages and field paths
//! (Kubernetes 1.33: `pkg/apis/core/validation`, `pkg/apis/apps/validation`,
//! `pkg/apis/batch/validation`, `pkg/apis/networking/validation`, `pkg/apis/rbac/validation`,
//! `pkg/apis/coordination/validation`), for the checks users run into. It runs on the
//! defaulted object (as upstream, validation follows defaulting).
//!
//! Not everything upstream checks is here: see the module's report. Bad values that are Go
//! structs or typed maps upstream (`map[string]string{...}`) carry the JSON value here, so
//! their printed form differs; field paths and details are the same.
//!
//! `decode_check` reports what the real server rejects while *decoding* the body (400
//! BadRequest, not 422): malformed quantities and base64.

use crate::builtin::quantity::{Quantity, parse_quantity_value};
use crate::field::{FieldError, Path};
use crate::names::{self, NameRule};
use serde_json::{Map, Value};

type Errs = Vec<FieldError>;

/// The name rule of a built-in kind (upstream's `Validate<Kind>Name`).
pub fn name_rule(group: &str, kind: &str) -> NameRule {
    match (group, kind) {
        ("", "Namespace") => NameRule::Dns1123Label,
        ("", "Service") => NameRule::Dns1035Label,
        ("rbac.authorization.k8s.io", _)
        | ("autoscaling", "HorizontalPodAutoscaler")
        | ("apiregistration.k8s.io", "APIService") => NameRule::PathSegment,
        _ => NameRule::Dns1123Subdomain,
    }
}

/// Whether a built-in kind is namespaced.
pub fn is_namespaced(group: &str, kind: &str) -> bool {
    !matches!(
        (group, kind),
        ("", "Namespace" | "Node" | "PersistentVolume")
            | ("rbac.authorization.k8s.io", "ClusterRole" | "ClusterRoleBinding")
            | ("scheduling.k8s.io", "PriorityClass")
            | ("storage.k8s.io", _)
            | ("networking.k8s.io", "IngressClass")
            | ("apiextensions.k8s.io", _)
            | ("admissionregistration.k8s.io", _)
            | ("certificates.k8s.io", "CertificateSigningRequest")
            | ("apiregistration.k8s.io", _)
            | ("", "ComponentStatus")
    )
}

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn arr<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key).and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn map<'a>(v: &'a Value, key: &str) -> Option<&'a Map<String, Value>> {
    v.get(key).and_then(Value::as_object)
}

fn int(v: &Value, key: &str) -> Option<i64> {
    v.get(key).and_then(Value::as_i64)
}

fn present(v: &Value, key: &str) -> bool {
    v.get(key).is_some_and(|x| !x.is_null())
}

fn nonneg(v: &Value, key: &str, p: &Path, errs: &mut Errs) {
    if let Some(n) = int(v, key) {
        errs.extend(names::validate_nonnegative_field(n, &p.child(key)));
    }
}

fn dns_label(value: &str, p: &Path, errs: &mut Errs) {
    for m in names::is_dns1123_label(value) {
        errs.push(FieldError::invalid(p, value, m));
    }
}

fn one_of(value: &str, p: &Path, allowed: &[&str], errs: &mut Errs) {
    if value.is_empty() {
        errs.push(FieldError::required(p, ""));
    } else if !allowed.contains(&value) {
        errs.push(FieldError::not_supported(p, value, allowed));
    }
}

/// Validate a built-in object on create (`old: None`) or update. Kinds without specific rules
/// get the metadata checks only.
pub fn validate(group: &str, kind: &str, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let meta_path = Path::new("metadata");
    let meta = obj.get("metadata").cloned().unwrap_or(Value::Object(Map::new()));
    match old {
        None => errs.extend(names::validate_object_meta(
            &meta,
            is_namespaced(group, kind),
            name_rule(group, kind),
            &meta_path,
        )),
        Some(o) => {
            let old_meta = o.get("metadata").cloned().unwrap_or(Value::Object(Map::new()));
            errs.extend(names::validate_object_meta_update(&meta, &old_meta, &meta_path));
        }
    }
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    let sp = Path::new("spec");
    match (group, kind) {
        ("", "Pod") => {
            pod_spec(&spec, &sp, true, &mut errs);
            if let Some(o) = old {
                pod_update(obj, o, &mut errs);
            }
        }
        ("", "PodTemplate") => {
            pod_template(obj.get("template").unwrap_or(&Value::Null), &Path::new("template"), &mut errs)
        }
        ("", "Service") => service(obj, old, &mut errs),
        ("", "ConfigMap") => config_map(obj, old, &mut errs),
        ("", "Secret") => secret(obj, old, &mut errs),
        ("", "Namespace") => {
            for (i, f) in arr(&spec, "finalizers").iter().enumerate() {
                let f = f.as_str().unwrap_or_default();
                let p = sp.child("finalizers").index(i);
                let msgs = names::is_qualified_name(f);
                if !msgs.is_empty() {
                    errs.extend(msgs.into_iter().map(|m| FieldError::invalid(&p, f, m)));
                } else if !f.contains('/') && f != "kubernetes" {
                    errs.push(FieldError::invalid(
                        &p,
                        f,
                        "name is neither a standard finalizer name nor is it fully qualified",
                    ));
                }
            }
        }
        ("", "ResourceQuota") => {
            resource_list_nonneg(&spec, "hard", &sp, &mut errs);
        }
        ("", "LimitRange") => limit_range(&spec, &sp, &mut errs),
        ("", "PersistentVolumeClaim") => {
            if arr(&spec, "accessModes").is_empty() && old.is_none() {
                errs.push(FieldError::required(sp.child("accessModes"), "at least 1 access mode is required"));
            }
            let requests = spec.get("resources").and_then(|r| r.get("requests"));
            if requests.and_then(|r| r.get("storage")).is_none() && old.is_none() {
                errs.push(FieldError::required(sp.child("resources").key("storage"), ""));
            }
            if let Some(r) = spec.get("resources") {
                resource_list_nonneg(r, "requests", &sp.child("resources"), &mut errs);
            }
        }
        ("apps", "Deployment" | "ReplicaSet" | "DaemonSet" | "StatefulSet") => {
            workload(kind, &spec, &sp, &mut errs);
            if let Some(o) = old {
                let old_spec = o.get("spec").unwrap_or(&Value::Null);
                errs.extend(names::validate_immutable_field(
                    spec.get("selector"),
                    old_spec.get("selector"),
                    &sp.child("selector"),
                ));
                if kind == "StatefulSet" {
                    stateful_set_update(&spec, old_spec, &mut errs);
                }
            }
        }
        ("batch", "Job") => {
            job_spec(&spec, &sp, &mut errs);
            if let Some(o) = old {
                let old_spec = o.get("spec").unwrap_or(&Value::Null);
                for f in ["selector", "completionMode"] {
                    errs.extend(names::validate_immutable_field(spec.get(f), old_spec.get(f), &sp.child(f)));
                }
            }
        }
        ("batch", "CronJob") => cron_job(obj, &spec, &sp, old.is_none(), &mut errs),
        ("certificates.k8s.io", "CertificateSigningRequest") => csr(obj, old, &mut errs),
        ("", "ReplicationController") => replication_controller(&spec, &sp, &mut errs),
        ("apiregistration.k8s.io", "APIService") => {
            // kube-aggregator's ValidateAPIService: the name is `<version>.<group>`.
            let (version, group) = (s(&spec, "version"), s(&spec, "group"));
            let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
            let want = format!("{version}.{group}");
            if name != want {
                errs.push(FieldError::invalid(
                    "metadata.name",
                    name,
                    format!("must be `spec.version+\".\"+spec.group`: {want:?}"),
                ));
            }
            if version.is_empty() {
                errs.push(FieldError::required(sp.child("version"), ""));
            }
            for (f, max) in [("groupPriorityMinimum", 20000), ("versionPriority", 1000)] {
                let v = int(&spec, f).unwrap_or(0);
                if v <= 0 || v > max {
                    errs.push(FieldError::invalid(sp.child(f), v, format!("must be positive and less than {max}")));
                }
            }
        }
        ("networking.k8s.io", "Ingress") => ingress(&spec, &sp, &mut errs),
        ("networking.k8s.io", "NetworkPolicy") => network_policy(&spec, &sp, &mut errs),
        ("coordination.k8s.io", "Lease") => {
            if let Some(d) = int(&spec, "leaseDurationSeconds")
                && d <= 0
            {
                errs.push(FieldError::invalid(sp.child("leaseDurationSeconds"), d, "must be greater than 0"));
            }
            nonneg(&spec, "leaseTransitions", &sp, &mut errs);
        }
        ("rbac.authorization.k8s.io", "Role" | "ClusterRole") => {
            for (i, r) in arr(obj, "rules").iter().enumerate() {
                policy_rule(r, kind == "Role", &Path::new("rules").index(i), &mut errs);
            }
        }
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => role_binding(obj, kind, old, &mut errs),
        _ => {}
    }
    errs
}

// ---------------------------------------------------------------------------------------------
// Pods
// ---------------------------------------------------------------------------------------------

fn pod_template(template: &Value, p: &Path, errs: &mut Errs) {
    let tmeta = template.get("metadata").unwrap_or(&Value::Null);
    errs.extend(names::validate_labels(tmeta.get("labels"), &p.child("metadata").child("labels")));
    errs.extend(names::validate_annotations(tmeta.get("annotations"), &p.child("metadata").child("annotations")));
    pod_spec(template.get("spec").unwrap_or(&Value::Null), &p.child("spec"), false, errs);
}

/// `ValidatePodSpec` (the common parts).
fn pod_spec(spec: &Value, p: &Path, is_pod: bool, errs: &mut Errs) {
    let mut volume_names: Vec<&str> = Vec::new();
    for (i, v) in arr(spec, "volumes").iter().enumerate() {
        let vp = p.child("volumes").index(i);
        let name = s(v, "name");
        if name.is_empty() {
            errs.push(FieldError::required(vp.child("name"), ""));
        } else {
            dns_label(name, &vp.child("name"), errs);
            if volume_names.contains(&name) {
                errs.push(FieldError::duplicate(vp.child("name"), name));
            }
        }
        volume_names.push(name);
        let sources = v.as_object().map_or(0, |o| o.iter().filter(|(k, x)| *k != "name" && !x.is_null()).count());
        if sources == 0 {
            errs.push(FieldError::required(&vp, "must specify a volume type"));
        } else if sources > 1 {
            errs.push(FieldError::forbidden(&vp, "may not specify more than 1 volume type"));
        }
    }
    let containers = arr(spec, "containers");
    let mut all_names: Vec<&str> = Vec::new();
    for (key, list) in [("initContainers", arr(spec, "initContainers")), ("containers", containers)] {
        for (i, c) in list.iter().enumerate() {
            let cp = p.child(key).index(i);
            let name = s(c, "name");
            if !name.is_empty() && all_names.contains(&name) {
                errs.push(FieldError::duplicate(cp.child("name"), name));
            }
            all_names.push(name);
            container(c, &cp, &volume_names, key == "containers", errs);
        }
    }
    if containers.is_empty() {
        errs.push(FieldError::required(p.child("containers"), ""));
    }
    one_of(s(spec, "restartPolicy"), &p.child("restartPolicy"), &["Always", "OnFailure", "Never"], errs);
    one_of(
        s(spec, "dnsPolicy"),
        &p.child("dnsPolicy"),
        &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"],
        errs,
    );
    for key in ["serviceAccountName", "nodeName"] {
        let v = s(spec, key);
        if !v.is_empty() {
            for m in names::is_dns1123_subdomain(v) {
                errs.push(FieldError::invalid(p.child(key), v, m));
            }
        }
    }
    errs.extend(names::validate_labels(spec.get("nodeSelector"), &p.child("nodeSelector")));
    nonneg(spec, "terminationGracePeriodSeconds", p, errs);
    if let Some(ads) = int(spec, "activeDeadlineSeconds")
        && !(1..=i64::from(i32::MAX)).contains(&ads)
    {
        errs.push(FieldError::invalid(
            p.child("activeDeadlineSeconds"),
            ads,
            names::inclusive_range_error(1, i64::from(i32::MAX)),
        ));
    }
    let _ = is_pod;
}

/// `validateContainerCommon` and the container-specific checks.
fn container(c: &Value, p: &Path, volumes: &[&str], regular: bool, errs: &mut Errs) {
    let name = s(c, "name");
    if name.is_empty() {
        errs.push(FieldError::required(p.child("name"), ""));
    } else {
        dns_label(name, &p.child("name"), errs);
    }
    if s(c, "image").is_empty() {
        errs.push(FieldError::required(p.child("image"), ""));
    }
    // ports
    let mut port_names: Vec<&str> = Vec::new();
    for (i, port) in arr(c, "ports").iter().enumerate() {
        let pp = p.child("ports").index(i);
        let pname = s(port, "name");
        if !pname.is_empty() {
            let msgs = names::is_valid_port_name(pname);
            if !msgs.is_empty() {
                errs.extend(msgs.into_iter().map(|m| FieldError::invalid(pp.child("name"), pname, m)));
            } else if port_names.contains(&pname) {
                errs.push(FieldError::duplicate(pp.child("name"), pname));
            } else {
                port_names.push(pname);
            }
        }
        match int(port, "containerPort") {
            None | Some(0) => errs.push(FieldError::required(pp.child("containerPort"), "")),
            Some(n) => errs.extend(
                names::is_valid_port_num(n).into_iter().map(|m| FieldError::invalid(pp.child("containerPort"), n, m)),
            ),
        }
        if let Some(h) = int(port, "hostPort").filter(|h| *h != 0) {
            errs.extend(
                names::is_valid_port_num(h).into_iter().map(|m| FieldError::invalid(pp.child("hostPort"), h, m)),
            );
        }
        one_of(s(port, "protocol"), &pp.child("protocol"), &["SCTP", "TCP", "UDP"], errs);
    }
    // env (RelaxedEnvironmentVariableValidation is on in 1.33)
    for (i, e) in arr(c, "env").iter().enumerate() {
        let ep = p.child("env").index(i);
        let ename = s(e, "name");
        if ename.is_empty() {
            errs.push(FieldError::required(ep.child("name"), ""));
        }
        for m in names::is_relaxed_env_var_name(ename) {
            errs.push(FieldError::invalid(ep.child("name"), ename, m));
        }
        if let Some(vf) = e.get("valueFrom").filter(|v| v.is_object()) {
            let n = ["fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef"]
                .iter()
                .filter(|k| present(vf, k))
                .count();
            let vfp = ep.child("valueFrom");
            if !s(e, "value").is_empty() && n != 0 {
                errs.push(FieldError::invalid(&vfp, "", "may not be specified when `value` is not empty"));
            } else if n == 0 {
                errs.push(FieldError::invalid(
                    &vfp,
                    "",
                    "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
                ));
            } else if n > 1 {
                errs.push(FieldError::invalid(&vfp, "", "may not have more than one field specified at a time"));
            }
        }
    }
    // volume mounts
    let mut mount_paths: Vec<&str> = Vec::new();
    for (i, m) in arr(c, "volumeMounts").iter().enumerate() {
        let mp = p.child("volumeMounts").index(i);
        let mname = s(m, "name");
        if mname.is_empty() {
            errs.push(FieldError::required(mp.child("name"), ""));
        }
        if !volumes.contains(&mname) {
            errs.push(FieldError::not_found(mp.child("name"), mname));
        }
        let path = s(m, "mountPath");
        if path.is_empty() {
            errs.push(FieldError::required(mp.child("mountPath"), ""));
        }
        if mount_paths.contains(&path) {
            errs.push(FieldError::invalid(mp.child("mountPath"), path, "must be unique"));
        }
        mount_paths.push(path);
    }
    // policies
    one_of(s(c, "imagePullPolicy"), &p.child("imagePullPolicy"), &["Always", "IfNotPresent", "Never"], errs);
    one_of(
        s(c, "terminationMessagePolicy"),
        &p.child("terminationMessagePolicy"),
        &["File", "FallbackToLogsOnError"],
        errs,
    );
    // probes
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        let Some(pr) = c.get(probe).filter(|x| x.is_object()) else { continue };
        let prp = p.child(probe);
        if !regular {
            errs.push(FieldError::forbidden(&prp, "may not be set for init containers without restartPolicy=Always"));
            continue;
        }
        handler(pr, &prp, errs);
        for f in ["initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold", "failureThreshold"] {
            nonneg(pr, f, &prp, errs);
        }
        if probe != "readinessProbe"
            && let Some(st) = int(pr, "successThreshold")
            && st != 1
        {
            errs.push(FieldError::invalid(prp.child("successThreshold"), st, "must be 1"));
        }
    }
    resources(c.get("resources").unwrap_or(&Value::Null), &p.child("resources"), errs);
}

fn handler(h: &Value, p: &Path, errs: &mut Errs) {
    let n = ["exec", "httpGet", "tcpSocket", "grpc"].iter().filter(|k| present(h, k)).count();
    if n == 0 {
        errs.push(FieldError::required(p, "must specify a handler type"));
    } else if n > 1 {
        errs.push(FieldError::forbidden(p, "may not specify more than 1 handler type"));
    }
    for k in ["httpGet", "tcpSocket"] {
        if let Some(port) = h.get(k).and_then(|x| x.get("port")) {
            port_num_or_name(port, &p.child(k).child("port"), errs);
        }
    }
}

fn port_num_or_name(port: &Value, p: &Path, errs: &mut Errs) {
    match port {
        Value::String(name) => {
            errs.extend(names::is_valid_port_name(name).into_iter().map(|m| FieldError::invalid(p, name.as_str(), m)))
        }
        other => {
            let n = other.as_i64().unwrap_or(0);
            errs.extend(names::is_valid_port_num(n).into_iter().map(|m| FieldError::invalid(p, n, m)));
        }
    }
}

/// `ValidateResourceRequirements`: non-negative quantities, whole numbers for integer
/// resources, requests not above limits.
fn resources(r: &Value, p: &Path, errs: &mut Errs) {
    let parse = |list: Option<&Map<String, Value>>| -> Vec<(String, Quantity)> {
        list.into_iter()
            .flatten()
            .filter_map(|(k, v)| parse_quantity_value(v).ok().flatten().map(|q| (k.clone(), q)))
            .collect()
    };
    let limits = parse(map(r, "limits"));
    let requests = parse(map(r, "requests"));
    for (which, list) in [("limits", &limits), ("requests", &requests)] {
        for (name, q) in list {
            let qp = p.child(which).key(name);
            if q.sign() < 0 {
                errs.push(FieldError::invalid(&qp, q.to_canonical(), names::IS_NEGATIVE_ERROR_MSG));
            }
            let integer = name.starts_with("hugepages-")
                || name == "nvidia.com/gpu"
                || name.contains('/') && !name.starts_with("kubernetes.io/");
            if integer && name.contains('/') && q.milli_value() % 1000 != 0 {
                errs.push(FieldError::invalid(&qp, q.to_canonical(), "must be an integer"));
            }
        }
    }
    for (name, req) in &requests {
        if let Some((_, lim)) = limits.iter().find(|(n, _)| n == name)
            && req > lim
        {
            errs.push(FieldError::invalid(
                p.child("requests").key(name),
                req.to_canonical(),
                format!("must be less than or equal to {name} limit of {}", lim.to_canonical()),
            ));
        }
    }
}

/// `ValidatePodUpdate`: only some spec fields may change.
/// `ValidatePodEphemeralContainersUpdate` and `validateEphemeralContainers`: existing ephemeral
/// containers stay as they are, new ones have unique names and none of the fields an ephemeral
/// container may not have.
fn ephemeral_containers_update(new: &Value, old: &Value, errs: &mut Errs) {
    let p = Path::new("spec").child("ephemeralContainers");
    let list =
        |v: &Value| v.pointer("/spec/ephemeralContainers").and_then(Value::as_array).cloned().unwrap_or_default();
    let (new_list, old_list) = (list(new), list(old));
    let name_of = |c: &Value| c.get("name").and_then(Value::as_str).unwrap_or("").to_string();
    for o in &old_list {
        match new_list.iter().position(|c| name_of(c) == name_of(o)) {
            None => errs.push(FieldError::forbidden(
                p.clone(),
                format!("existing ephemeral containers {:?} may not be removed", name_of(o)),
            )),
            Some(i) if new_list[i] != *o => errs.push(FieldError::forbidden(
                p.index(i),
                format!("existing ephemeral containers {:?} may not be changed", name_of(o)),
            )),
            Some(_) => {}
        }
    }
    let mut names: std::collections::BTreeSet<String> = ["containers", "initContainers"]
        .iter()
        .flat_map(|k| arr(new.get("spec").unwrap_or(&Value::Null), k).iter().map(name_of).collect::<Vec<_>>())
        .collect();
    for (i, c) in new_list.iter().enumerate() {
        if old_list.iter().any(|o| name_of(o) == name_of(c)) {
            names.insert(name_of(c));
            continue;
        }
        let cp = p.index(i);
        if name_of(c).is_empty() {
            errs.push(FieldError::required(cp.child("name"), ""));
        } else if !names.insert(name_of(c)) {
            errs.push(FieldError::duplicate(cp.child("name"), name_of(c)));
        }
        if s(c, "image").is_empty() {
            errs.push(FieldError::required(cp.child("image"), ""));
        }
        for f in [
            "ports",
            "livenessProbe",
            "readinessProbe",
            "startupProbe",
            "lifecycle",
            "resources",
            "resizePolicy",
            "restartPolicy",
        ] {
            let set = match c.get(f) {
                None | Some(Value::Null) => false,
                Some(Value::Object(m)) => !m.is_empty(),
                Some(Value::Array(a)) => !a.is_empty(),
                Some(_) => true,
            };
            if set {
                errs.push(FieldError::forbidden(cp.child(f), "cannot be set for an Ephemeral Container"));
            }
        }
    }
}

fn pod_update(new: &Value, old: &Value, errs: &mut Errs) {
    ephemeral_containers_update(new, old, errs);
    let strip = |v: &Value| -> Value {
        let mut spec = v.get("spec").cloned().unwrap_or(Value::Null);
        if let Some(o) = spec.as_object_mut() {
            for k in [
                "activeDeadlineSeconds",
                "tolerations",
                "terminationGracePeriodSeconds",
                "schedulingGates",
                "ephemeralContainers",
            ] {
                o.remove(k);
            }
            for key in ["containers", "initContainers"] {
                if let Some(list) = o.get_mut(key).and_then(Value::as_array_mut) {
                    for c in list.iter_mut().filter_map(Value::as_object_mut) {
                        c.remove("image");
                    }
                }
            }
        }
        spec
    };
    if strip(new) != strip(old) {
        errs.push(FieldError::forbidden(
            "spec",
            "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
        ));
    }
}

// ---------------------------------------------------------------------------------------------
// Workloads
// ---------------------------------------------------------------------------------------------

/// Whether a label selector (matchLabels + matchExpressions) matches a set of labels.
fn selector_matches(sel: &Value, labels: &Map<String, Value>) -> bool {
    let label = |k: &str| labels.get(k).and_then(Value::as_str);
    let ml_ok = map(sel, "matchLabels").into_iter().flatten().all(|(k, v)| label(k) == v.as_str());
    let me_ok = arr(sel, "matchExpressions").iter().all(|e| {
        let key = s(e, "key");
        let values: Vec<&str> = arr(e, "values").iter().filter_map(Value::as_str).collect();
        match s(e, "operator") {
            "In" => label(key).is_some_and(|v| values.contains(&v)),
            "NotIn" => label(key).is_none_or(|v| !values.contains(&v)),
            "Exists" => label(key).is_some(),
            "DoesNotExist" => label(key).is_none(),
            _ => false,
        }
    });
    ml_ok && me_ok
}

/// `ValidateReplicationControllerSpec`: a non-empty selector (a plain label map) the template's
/// labels match, non-negative counts, a template that always restarts.
fn replication_controller(spec: &Value, p: &Path, errs: &mut Errs) {
    nonneg(spec, "replicas", p, errs);
    nonneg(spec, "minReadySeconds", p, errs);
    let selector = map(spec, "selector").cloned().unwrap_or_default();
    if selector.is_empty() {
        errs.push(FieldError::required(p.child("selector"), ""));
    }
    let tp = p.child("template");
    match spec.get("template").filter(|t| t.is_object()) {
        None => errs.push(FieldError::required(&tp, "")),
        Some(t) => {
            let labels =
                t.get("metadata").and_then(|m| m.get("labels")).and_then(Value::as_object).cloned().unwrap_or_default();
            if !selector.is_empty() && !selector.iter().all(|(k, v)| labels.get(k) == Some(v)) {
                errs.push(FieldError::invalid(
                    tp.child("metadata").child("labels"),
                    Value::Object(labels),
                    "`selector` does not match template `labels`",
                ));
            }
            let policy = t.pointer("/spec/restartPolicy").and_then(Value::as_str).unwrap_or("Always");
            if policy != "Always" {
                errs.push(FieldError::not_supported(tp.child("spec").child("restartPolicy"), policy, &["Always"]));
            }
            pod_template(t, &tp, errs);
        }
    }
}

fn workload(kind: &str, spec: &Value, p: &Path, errs: &mut Errs) {
    nonneg(spec, "replicas", p, errs);
    nonneg(spec, "minReadySeconds", p, errs);
    nonneg(spec, "revisionHistoryLimit", p, errs);
    let selector = spec.get("selector").filter(|x| x.is_object());
    match selector {
        None => errs.push(FieldError::required(p.child("selector"), "")),
        Some(sel) => {
            errs.extend(names::validate_label_selector(Some(sel), &p.child("selector")));
            let n = map(sel, "matchLabels").map_or(0, Map::len) + arr(sel, "matchExpressions").len();
            if n == 0 {
                let what = match kind {
                    "StatefulSet" => "statefulset",
                    "DaemonSet" => "daemonset",
                    _ => "deployment",
                };
                errs.push(FieldError::invalid(
                    p.child("selector"),
                    sel.clone(),
                    format!("empty selector is invalid for {what}"),
                ));
            }
        }
    }
    let tp = p.child("template");
    match spec.get("template").filter(|t| t.is_object()) {
        None => errs.push(FieldError::required(&tp, "")),
        Some(t) => {
            let labels =
                t.get("metadata").and_then(|m| m.get("labels")).and_then(Value::as_object).cloned().unwrap_or_default();
            if let Some(sel) = selector
                && (map(sel, "matchLabels").is_some_and(|m| !m.is_empty()) || !arr(sel, "matchExpressions").is_empty())
                && !selector_matches(sel, &labels)
            {
                errs.push(FieldError::invalid(
                    tp.child("metadata").child("labels"),
                    Value::Object(labels),
                    "`selector` does not match template `labels`",
                ));
            }
            if kind == "StatefulSet" && !arr(spec, "volumeClaimTemplates").is_empty() {
                // The claims of volumeClaimTemplates become volumes of the pods: mounts may name them.
                let mut t = t.clone();
                let claims: Vec<Value> = arr(spec, "volumeClaimTemplates")
                    .iter()
                    .filter_map(|c| c.pointer("/metadata/name").and_then(Value::as_str))
                    .map(|n| serde_json::json!({"name": n, "persistentVolumeClaim": {"claimName": n}}))
                    .collect();
                if let Some(ps) = t.get_mut("spec").and_then(Value::as_object_mut) {
                    let vols = ps.entry("volumes").or_insert_with(|| Value::Array(vec![]));
                    if let Some(v) = vols.as_array_mut() {
                        for c in claims {
                            if !v.iter().any(|x| x.get("name") == c.get("name")) {
                                v.push(c);
                            }
                        }
                    }
                }
                pod_template(&t, &tp, errs);
            } else {
                pod_template(t, &tp, errs);
            }
            let rp =
                t.get("spec").map(|s| s.get("restartPolicy").and_then(Value::as_str).unwrap_or_default()).unwrap_or("");
            if rp != "Always" && !rp.is_empty() {
                errs.push(FieldError::not_supported(tp.child("spec").child("restartPolicy"), rp, &["Always"]));
            }
            if t.get("spec").is_some_and(|s| present(s, "activeDeadlineSeconds")) {
                let v = t.get("spec").and_then(|s| s.get("activeDeadlineSeconds")).cloned().unwrap_or(Value::Null);
                errs.push(FieldError::invalid(
                    tp.child("spec").child("activeDeadlineSeconds"),
                    v,
                    format!("activeDeadlineSeconds in {kind} is not Supported"),
                ));
            }
        }
    }
    match kind {
        "Deployment" => {
            if let Some(st) = spec.get("strategy") {
                let sp = p.child("strategy");
                match s(st, "type") {
                    "Recreate" => {
                        if present(st, "rollingUpdate") {
                            errs.push(FieldError::forbidden(
                                sp.child("rollingUpdate"),
                                "may not be specified when strategy `type` is 'Recreate'",
                            ));
                        }
                    }
                    "RollingUpdate" => {
                        if let Some(ru) = st.get("rollingUpdate") {
                            rolling_update(ru, &sp.child("rollingUpdate"), errs);
                        }
                    }
                    other => {
                        errs.push(FieldError::not_supported(sp.child("type"), other, &["Recreate", "RollingUpdate"]))
                    }
                }
            }
            if let Some(pds) = int(spec, "progressDeadlineSeconds") {
                errs.extend(names::validate_nonnegative_field(pds, &p.child("progressDeadlineSeconds")));
                if pds <= int(spec, "minReadySeconds").unwrap_or(0) {
                    errs.push(FieldError::invalid(
                        p.child("progressDeadlineSeconds"),
                        pds,
                        "must be greater than minReadySeconds",
                    ));
                }
            }
        }
        "StatefulSet" => {
            let pmp = s(spec, "podManagementPolicy");
            if pmp != "OrderedReady" && pmp != "Parallel" {
                errs.push(FieldError::invalid(
                    p.child("podManagementPolicy"),
                    pmp,
                    "must be 'OrderedReady' or 'Parallel'",
                ));
            }
            if let Some(us) = spec.get("updateStrategy") {
                let t = s(us, "type");
                if t != "RollingUpdate" && t != "OnDelete" {
                    errs.push(FieldError::invalid(
                        p.child("updateStrategy"),
                        us.clone(),
                        "must be 'RollingUpdate' or 'OnDelete'",
                    ));
                }
                if let Some(part) = us.get("rollingUpdate").and_then(|r| int(r, "partition")) {
                    errs.extend(names::validate_nonnegative_field(
                        part,
                        &p.child("updateStrategy").child("rollingUpdate").child("partition"),
                    ));
                }
            }
        }
        "DaemonSet" => {
            if let Some(us) = spec.get("updateStrategy") {
                let t = s(us, "type");
                if t != "RollingUpdate" && t != "OnDelete" {
                    errs.push(FieldError::not_supported(
                        p.child("updateStrategy").child("type"),
                        t,
                        &["OnDelete", "RollingUpdate"],
                    ));
                }
            }
        }
        _ => {}
    }
}

fn rolling_update(ru: &Value, p: &Path, errs: &mut Errs) {
    let pct = |v: &Value, field: &str, errs: &mut Errs| -> Option<i64> {
        match v.get(field) {
            Some(Value::String(sv)) => {
                let msgs = names::is_valid_percent(sv);
                if !msgs.is_empty() {
                    errs.extend(msgs.into_iter().map(|m| FieldError::invalid(p.child(field), sv.as_str(), m)));
                    return None;
                }
                let n = sv.trim_end_matches('%').parse::<i64>().ok()?;
                if n > 100 {
                    errs.push(FieldError::invalid(p.child(field), sv.as_str(), "must not be greater than 100%"));
                }
                Some(n)
            }
            Some(n) => {
                let n = n.as_i64()?;
                errs.extend(names::validate_nonnegative_field(n, &p.child(field)));
                Some(n)
            }
            None => None,
        }
    };
    let mu = pct(ru, "maxUnavailable", errs);
    let ms = pct(ru, "maxSurge", errs);
    if mu == Some(0) && ms == Some(0) {
        errs.push(FieldError::invalid(
            p.child("maxUnavailable"),
            ru.get("maxUnavailable").cloned().unwrap_or(Value::Null),
            "may not be 0 when `maxSurge` is 0",
        ));
    }
}

fn stateful_set_update(new: &Value, old: &Value, errs: &mut Errs) {
    let strip = |v: &Value| -> Value {
        let mut v = v.clone();
        if let Some(o) = v.as_object_mut() {
            for k in [
                "replicas",
                "ordinals",
                "template",
                "updateStrategy",
                "persistentVolumeClaimRetentionPolicy",
                "minReadySeconds",
            ] {
                o.remove(k);
            }
        }
        v
    };
    if strip(new) != strip(old) {
        errs.push(FieldError::forbidden(
            "spec",
            "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
        ));
    }
}

fn job_spec(spec: &Value, p: &Path, errs: &mut Errs) {
    for f in ["parallelism", "completions", "backoffLimit"] {
        nonneg(spec, f, p, errs);
    }
    if let Some(ads) = int(spec, "activeDeadlineSeconds")
        && ads <= 0
    {
        errs.push(FieldError::invalid(p.child("activeDeadlineSeconds"), ads, "must be greater than 0"));
    }
    let tp = p.child("template");
    let Some(t) = spec.get("template").filter(|t| t.is_object()) else {
        errs.push(FieldError::required(&tp, ""));
        return;
    };
    if let Some(sel) = spec.get("selector").filter(|x| x.is_object()) {
        errs.extend(names::validate_label_selector(Some(sel), &p.child("selector")));
        let labels =
            t.get("metadata").and_then(|m| m.get("labels")).and_then(Value::as_object).cloned().unwrap_or_default();
        if !selector_matches(sel, &labels) {
            errs.push(FieldError::invalid(
                tp.child("metadata").child("labels"),
                Value::Object(labels),
                "`selector` does not match template `labels`",
            ));
        }
    }
    pod_template(t, &tp, errs);
    let rp = t.get("spec").and_then(|s| s.get("restartPolicy")).and_then(Value::as_str).unwrap_or_default();
    if rp != "OnFailure" && rp != "Never" {
        errs.push(FieldError::not_supported(tp.child("spec").child("restartPolicy"), rp, &["OnFailure", "Never"]));
    }
}

fn cron_job(obj: &Value, spec: &Value, p: &Path, create: bool, errs: &mut Errs) {
    let name = obj.get("metadata").map(|m| s(m, "name")).unwrap_or_default();
    if create && name.len() > 52 {
        errs.push(FieldError::invalid("metadata.name", name, "must be no more than 52 characters"));
    }
    // pkg/apis/batch/validation `validateScheduleFormat` and `validateTimeZone`: robfig/cron's
    // ParseStandard decides, and a time zone goes in `timeZone`, not the schedule.
    let schedule = s(spec, "schedule");
    let time_zone = spec.get("timeZone").and_then(Value::as_str);
    if schedule.is_empty() {
        errs.push(FieldError::required(p.child("schedule"), ""));
    } else {
        if let Err(e) = crate::cron::Schedule::parse(schedule) {
            errs.push(FieldError::invalid(p.child("schedule"), schedule, e));
        }
        if schedule.contains("TZ") {
            let msg = if create {
                "cannot use TZ or CRON_TZ in schedule, use timeZone field instead"
            } else if time_zone.is_some() {
                "cannot use both timeZone field and TZ or CRON_TZ in schedule"
            } else {
                ""
            };
            if !msg.is_empty() {
                errs.push(FieldError::invalid(p.child("schedule"), schedule, msg));
            }
        }
    }
    if let Some(tz) = time_zone {
        let msg = if tz.is_empty() {
            Some("timeZone must be nil or non-empty string".to_string())
        } else if tz.eq_ignore_ascii_case("local") {
            Some("timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones".to_string())
        } else if jiff::tz::TimeZone::get(tz).is_err() {
            Some(format!("unknown time zone {tz}"))
        } else {
            None
        };
        if let Some(m) = msg {
            errs.push(FieldError::invalid(p.child("timeZone"), tz, m));
        }
    }
    let cp = s(spec, "concurrencyPolicy");
    if !["Allow", "Forbid", "Replace"].contains(&cp) {
        if cp.is_empty() {
            errs.push(FieldError::required(p.child("concurrencyPolicy"), ""));
        } else {
            errs.push(FieldError::not_supported(p.child("concurrencyPolicy"), cp, &["Allow", "Forbid", "Replace"]));
        }
    }
    for f in ["startingDeadlineSeconds", "successfulJobsHistoryLimit", "failedJobsHistoryLimit"] {
        nonneg(spec, f, p, errs);
    }
    if let Some(js) = spec.get("jobTemplate").and_then(|j| j.get("spec")) {
        job_spec(js, &p.child("jobTemplate").child("spec"), errs);
    }
}

// ---------------------------------------------------------------------------------------------
// CertificateSigningRequests (pkg/apis/certificates/validation/validation.go)

/// The key usages a CertificateSigningRequest may ask for (certificates/v1 `KeyUsage`).
pub const CSR_USAGES: &[&str] = &[
    "signing",
    "digital signature",
    "content commitment",
    "key encipherment",
    "key agreement",
    "data encipherment",
    "cert sign",
    "crl sign",
    "encipher only",
    "decipher only",
    "any",
    "server auth",
    "client auth",
    "code signing",
    "email protection",
    "s/mime",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "timestamping",
    "ocsp signing",
    "microsoft sgc",
    "netscape sgc",
];

/// The PEM `CERTIFICATE REQUEST` block of `spec.request` (base64 in JSON), as `ParseCSR` finds it.
pub fn csr_request_der(spec: &Value) -> Result<Vec<u8>, String> {
    use base64::Engine;
    let raw = base64::engine::general_purpose::STANDARD.decode(s(spec, "request")).unwrap_or_default();
    let text = String::from_utf8_lossy(&raw);
    let bad = || "PEM block type must be CERTIFICATE REQUEST".to_string();
    let begin = "-----BEGIN CERTIFICATE REQUEST-----";
    let start = text.find(begin).ok_or_else(bad)? + begin.len();
    let end = text[start..].find("-----END CERTIFICATE REQUEST-----").ok_or_else(bad)? + start;
    let body: String = text[start..end].chars().filter(|c| !c.is_whitespace()).collect();
    // A DER SEQUENCE.
    match base64::engine::general_purpose::STANDARD.decode(body) {
        Ok(der) if der.first() == Some(&0x30) => Ok(der),
        _ => Err("asn1: structure error: tags don't match".to_string()),
    }
}

fn csr(obj: &Value, old: Option<&Value>, errs: &mut Errs) {
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    let p = Path::new("spec");
    if old.is_none() {
        if let Err(e) = csr_request_der(spec) {
            let shown = spec.get("request").cloned().unwrap_or(Value::Null);
            errs.push(FieldError::invalid(p.child("request"), shown, e));
        }
        let usages = arr(spec, "usages");
        if usages.is_empty() {
            errs.push(FieldError::required(p.child("usages"), "usages must be provided"));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, u) in usages.iter().enumerate() {
            let u = u.as_str().unwrap_or_default();
            if !CSR_USAGES.contains(&u) {
                errs.push(FieldError::not_supported(p.child("usages").index(i), u, CSR_USAGES));
            } else if !seen.insert(u) {
                errs.push(FieldError::duplicate(p.child("usages").index(i), u));
            }
        }
        let signer = s(spec, "signerName");
        if signer.is_empty() {
            errs.push(FieldError::required(p.child("signerName"), ""));
        } else {
            // `ValidateSignerName`: a domain, a '/', a path.
            match signer.split_once('/') {
                None => errs.push(FieldError::invalid(
                    p.child("signerName"),
                    signer,
                    "must be a fully qualified domain and path of the form 'example.com/signer-name'",
                )),
                Some((domain, path)) => {
                    if !domain.contains('.') || domain.split('.').any(|l| !names::is_dns1123_label(l).is_empty()) {
                        errs.push(FieldError::invalid(
                            p.child("signerName"),
                            signer,
                            "the domain must be a fully qualified domain name",
                        ));
                    } else if path.is_empty() || path.len() > 1024 {
                        errs.push(FieldError::invalid(
                            p.child("signerName"),
                            signer,
                            "validating path: must be non-empty, at most 1024 characters",
                        ));
                    }
                }
            }
        }
        if let Some(e) = int(spec, "expirationSeconds")
            && e < 600
        {
            errs.push(FieldError::invalid(
                p.child("expirationSeconds"),
                e,
                "may not specify a duration less than 600 seconds (10 minutes)",
            ));
        }
    }
    // Conditions: unique types, Approved xor Denied, both only True.
    let sp = Path::new("status").child("conditions");
    let conds = obj.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut seen = std::collections::BTreeSet::new();
    for (i, c) in conds.iter().enumerate() {
        let t = s(c, "type");
        let st = s(c, "status");
        if t.is_empty() {
            errs.push(FieldError::required(sp.index(i).child("type"), ""));
        }
        if st.is_empty() {
            errs.push(FieldError::required(sp.index(i).child("status"), ""));
        } else if !["True", "False", "Unknown"].contains(&st) {
            errs.push(FieldError::not_supported(sp.index(i).child("status"), st, &["False", "True", "Unknown"]));
        } else if matches!(t, "Approved" | "Denied") && st != "True" {
            errs.push(FieldError::not_supported(sp.index(i).child("status"), st, &["True"]));
        }
        if matches!(t, "Approved" | "Denied" | "Failed") && !seen.insert(t.to_string()) {
            errs.push(FieldError::duplicate(sp.index(i).child("type"), t));
        }
    }
    if seen.contains("Approved") && seen.contains("Denied") {
        errs.push(FieldError::invalid(
            sp.clone(),
            Value::Array(conds.clone()),
            "Approved and Denied conditions are mutually exclusive",
        ));
    }
    if let Some(o) = old {
        let old_conds = o.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default();
        for t in ["Approved", "Denied"] {
            let had = old_conds.iter().any(|c| s(c, "type") == t);
            if had && !conds.iter().any(|c| s(c, "type") == t) {
                errs.push(FieldError::forbidden(
                    sp.clone(),
                    format!("updates may not remove a condition of type {t:?}"),
                ));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Services, config
// ---------------------------------------------------------------------------------------------

fn service(obj: &Value, old: Option<&Value>, errs: &mut Errs) {
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    let p = Path::new("spec");
    let ty = s(spec, "type");
    let headless = s(spec, "clusterIP") == "None";
    let ports = arr(spec, "ports");
    if !["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"].contains(&ty) {
        errs.push(FieldError::not_supported(
            p.child("type"),
            ty,
            &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"],
        ));
    }
    if ports.is_empty() && !headless && ty != "ExternalName" {
        errs.push(FieldError::required(p.child("ports"), ""));
    }
    if ty == "ExternalName" {
        let en = s(spec, "externalName");
        if en.is_empty() {
            errs.push(FieldError::required(p.child("externalName"), ""));
        }
    }
    let mut port_names: Vec<&str> = Vec::new();
    let mut keys: Vec<(i64, &str)> = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let pp = p.child("ports").index(i);
        let name = s(port, "name");
        if ports.len() > 1 && name.is_empty() {
            errs.push(FieldError::required(pp.child("name"), ""));
        } else if !name.is_empty() {
            dns_label(name, &pp.child("name"), errs);
            if port_names.contains(&name) {
                errs.push(FieldError::duplicate(pp.child("name"), name));
            }
            port_names.push(name);
        }
        let num = int(port, "port").unwrap_or(0);
        errs.extend(names::is_valid_port_num(num).into_iter().map(|m| FieldError::invalid(pp.child("port"), num, m)));
        let proto = s(port, "protocol");
        one_of(proto, &pp.child("protocol"), &["SCTP", "TCP", "UDP"], errs);
        if let Some(tp) = port.get("targetPort") {
            port_num_or_name(tp, &pp.child("targetPort"), errs);
        }
        if ty == "ClusterIP" && int(port, "nodePort").unwrap_or(0) != 0 {
            errs.push(FieldError::forbidden(pp.child("nodePort"), "may not be used when `type` is 'ClusterIP'"));
        }
        if keys.contains(&(num, proto)) {
            errs.push(FieldError::duplicate(&pp, serde_json::json!({"port": num, "protocol": proto})));
        }
        keys.push((num, proto));
    }
    errs.extend(names::validate_labels(spec.get("selector"), &p.child("selector")));
    if let Some(o) = old {
        let old_spec = o.get("spec").unwrap_or(&Value::Null);
        if ty != "ExternalName" && s(old_spec, "type") != "ExternalName" {
            let new_ips: Vec<&str> = arr(spec, "clusterIPs").iter().filter_map(Value::as_str).collect();
            let old_ips: Vec<&str> = arr(old_spec, "clusterIPs").iter().filter_map(Value::as_str).collect();
            let changed = match (new_ips.first(), old_ips.first()) {
                (Some(n), Some(o)) => n != o,
                (None, Some(_)) => false,
                _ => false,
            } || (!s(spec, "clusterIP").is_empty()
                && !s(old_spec, "clusterIP").is_empty()
                && s(spec, "clusterIP") != s(old_spec, "clusterIP"));
            let both_headless = headless && s(old_spec, "clusterIP") == "None";
            if changed && !both_headless {
                errs.push(FieldError::invalid(
                    p.child("clusterIPs").index(0),
                    spec.get("clusterIPs").cloned().unwrap_or(Value::Null),
                    "may not change once set",
                ));
            }
        }
    }
}

/// `core.MaxSecretSize`: 1 MiB, also the limit of a ConfigMap.
pub const MAX_SECRET_SIZE: usize = 1024 * 1024;

fn config_keys(obj: &Value, key: &str, errs: &mut Errs) {
    if let Some(m) = map(obj, key) {
        for k in m.keys() {
            for msg in names::is_config_map_key(k) {
                errs.push(FieldError::invalid(Path::new(key).key(k), k.as_str(), msg));
            }
        }
    }
}

fn decoded_len(v: &Value) -> usize {
    v.as_str()
        .and_then(|s| base64::Engine::decode(&base64::engine::general_purpose::STANDARD, s).ok())
        .map_or(0, |b| b.len())
}

fn immutable_checks(obj: &Value, old: Option<&Value>, fields: &[&str], errs: &mut Errs) {
    let Some(o) = old else { return };
    if o.get("immutable").and_then(Value::as_bool) != Some(true) {
        return;
    }
    if obj.get("immutable").and_then(Value::as_bool) != Some(true) {
        errs.push(FieldError::forbidden("immutable", "field is immutable when `immutable` is set"));
    }
    for f in fields {
        let norm = |v: Option<&Value>| v.filter(|x| x.as_object().is_some_and(|m| !m.is_empty())).cloned();
        if norm(obj.get(*f)) != norm(o.get(*f)) {
            errs.push(FieldError::forbidden(*f, "field is immutable when `immutable` is set"));
        }
    }
}

fn config_map(obj: &Value, old: Option<&Value>, errs: &mut Errs) {
    config_keys(obj, "data", errs);
    config_keys(obj, "binaryData", errs);
    let data = map(obj, "data");
    let binary = map(obj, "binaryData");
    for k in data.into_iter().flat_map(|m| m.keys()) {
        if binary.is_some_and(|b| b.contains_key(k)) {
            errs.push(FieldError::invalid(
                Path::new("data").key(k),
                k.as_str(),
                "duplicate of key present in binaryData",
            ));
        }
    }
    for k in binary.into_iter().flat_map(|m| m.keys()) {
        if data.is_some_and(|d| d.contains_key(k)) {
            errs.push(FieldError::invalid(
                Path::new("binaryData").key(k),
                k.as_str(),
                "duplicate of key present in data",
            ));
        }
    }
    let total: usize = data.into_iter().flatten().map(|(_, v)| v.as_str().map_or(0, str::len)).sum::<usize>()
        + binary.into_iter().flatten().map(|(_, v)| decoded_len(v)).sum::<usize>();
    if total > MAX_SECRET_SIZE {
        errs.push(FieldError::too_long("", MAX_SECRET_SIZE));
    }
    immutable_checks(obj, old, &["data", "binaryData"], errs);
}

fn secret(obj: &Value, old: Option<&Value>, errs: &mut Errs) {
    config_keys(obj, "data", errs);
    let data = map(obj, "data");
    let total: usize = data.into_iter().flatten().map(|(_, v)| decoded_len(v)).sum();
    if total > MAX_SECRET_SIZE {
        errs.push(FieldError::too_long("data", MAX_SECRET_SIZE));
    }
    let has = |k: &str| data.is_some_and(|d| d.contains_key(k));
    let dp = Path::new("data");
    match s(obj, "type") {
        "kubernetes.io/service-account-token" => {
            let ann = obj.get("metadata").and_then(|m| m.get("annotations"));
            if ann
                .and_then(|a| a.get("kubernetes.io/service-account.name"))
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                errs.push(FieldError::required("metadata.annotations[kubernetes.io/service-account.name]", ""));
            }
        }
        "kubernetes.io/dockercfg" if !has(".dockercfg") => errs.push(FieldError::required(dp.key(".dockercfg"), "")),
        "kubernetes.io/dockerconfigjson" if !has(".dockerconfigjson") => {
            errs.push(FieldError::required(dp.key(".dockerconfigjson"), ""))
        }
        "kubernetes.io/ssh-auth" if !has("ssh-privatekey") => {
            errs.push(FieldError::required(dp.key("ssh-privatekey"), ""))
        }
        "kubernetes.io/tls" => {
            for k in ["tls.crt", "tls.key"] {
                if !has(k) {
                    errs.push(FieldError::required(dp.key(k), ""));
                }
            }
        }
        _ => {}
    }
    if let Some(o) = old {
        errs.extend(names::validate_immutable_field(obj.get("type"), o.get("type"), &Path::new("type")));
    }
    immutable_checks(obj, old, &["data"], errs);
}

fn resource_list_nonneg(parent: &Value, key: &str, p: &Path, errs: &mut Errs) {
    for (k, v) in map(parent, key).into_iter().flatten() {
        if let Ok(Some(q)) = parse_quantity_value(v)
            && q.sign() < 0
        {
            errs.push(FieldError::invalid(p.child(key).key(k), q.to_canonical(), names::IS_NEGATIVE_ERROR_MSG));
        }
    }
}

fn limit_range(spec: &Value, p: &Path, errs: &mut Errs) {
    for (i, item) in arr(spec, "limits").iter().enumerate() {
        let ip = p.child("limits").index(i);
        one_of(s(item, "type"), &ip.child("type"), &["Pod", "Container", "PersistentVolumeClaim"], errs);
        for k in ["max", "min", "default", "defaultRequest", "maxLimitRequestRatio"] {
            resource_list_nonneg(item, k, &ip, errs);
        }
        let q =
            |k: &str, r: &str| map(item, k).and_then(|m| m.get(r)).and_then(|v| parse_quantity_value(v).ok().flatten());
        for r in map(item, "min").into_iter().flat_map(|m| m.keys()) {
            if let (Some(min), Some(max)) = (q("min", r), q("max", r))
                && min > max
            {
                errs.push(FieldError::invalid(
                    ip.child("min").key(r),
                    min.to_canonical(),
                    format!("min value {} is greater than max value {}", min.to_canonical(), max.to_canonical()),
                ));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Networking, RBAC
// ---------------------------------------------------------------------------------------------

fn ingress_backend(b: &Value, p: &Path, errs: &mut Errs) {
    let svc = b.get("service").filter(|x| x.is_object());
    let res = present(b, "resource");
    match (svc, res) {
        (Some(_), true) => errs.push(FieldError::invalid(p, "", "cannot set both resource and service backends")),
        (None, false) => errs.push(FieldError::invalid(p, "", "resource or service backend is required")),
        (Some(svc), false) => {
            let name = s(svc, "name");
            for m in names::is_dns1035_label(name) {
                errs.push(FieldError::invalid(p.child("service").child("name"), name, m));
            }
            let pp = p.child("service").child("port");
            let port = svc.get("port").unwrap_or(&Value::Null);
            let pname = s(port, "name");
            let pnum = int(port, "number").unwrap_or(0);
            match (!pname.is_empty(), pnum != 0) {
                (true, true) => errs.push(FieldError::invalid(&pp, "", "cannot set both port name & port number")),
                (true, false) => errs.extend(
                    names::is_valid_port_name(pname)
                        .into_iter()
                        .map(|m| FieldError::invalid(pp.child("name"), pname, m)),
                ),
                (false, true) => errs.extend(
                    names::is_valid_port_num(pnum)
                        .into_iter()
                        .map(|m| FieldError::invalid(pp.child("number"), pnum, m)),
                ),
                (false, false) => errs.push(FieldError::required(&pp, "port name or number is required")),
            }
        }
        (None, true) => {}
    }
}

fn ingress(spec: &Value, p: &Path, errs: &mut Errs) {
    let rules = arr(spec, "rules");
    if rules.is_empty() && !present(spec, "defaultBackend") {
        errs.push(FieldError::invalid(
            p,
            Value::Array(Vec::new()),
            "either `defaultBackend` or `rules` must be specified",
        ));
    }
    if let Some(b) = spec.get("defaultBackend").filter(|b| b.is_object()) {
        ingress_backend(b, &p.child("defaultBackend"), errs);
    }
    for (i, r) in rules.iter().enumerate() {
        let rp = p.child("rules").index(i);
        let host = s(r, "host");
        if !host.is_empty() {
            if host.parse::<std::net::IpAddr>().is_ok() {
                errs.push(FieldError::invalid(rp.child("host"), host, "must be a DNS name, not an IP address"));
            }
            let msgs = if host.starts_with('*') {
                names::is_wildcard_dns1123_subdomain(host)
            } else {
                names::is_dns1123_subdomain(host)
            };
            errs.extend(msgs.into_iter().map(|m| FieldError::invalid(rp.child("host"), host, m)));
        }
        let Some(http) = r.get("http").filter(|h| h.is_object()) else { continue };
        let hp = rp.child("http");
        let paths = arr(http, "paths");
        if paths.is_empty() {
            errs.push(FieldError::required(hp.child("paths"), ""));
        }
        for (j, path) in paths.iter().enumerate() {
            let pp = hp.child("paths").index(j);
            let pt = s(path, "pathType");
            if pt.is_empty() {
                errs.push(FieldError::required(pp.child("pathType"), "pathType must be specified"));
                continue;
            }
            if !["Exact", "Prefix", "ImplementationSpecific"].contains(&pt) {
                errs.push(FieldError::not_supported(
                    pp.child("pathType"),
                    pt,
                    &["Exact", "ImplementationSpecific", "Prefix"],
                ));
                continue;
            }
            let pv = s(path, "path");
            if pt != "ImplementationSpecific" && !pv.starts_with('/') {
                errs.push(FieldError::invalid(pp.child("path"), pv, "must be an absolute path"));
            }
            ingress_backend(path.get("backend").unwrap_or(&Value::Null), &pp.child("backend"), errs);
        }
    }
}

fn network_policy(spec: &Value, p: &Path, errs: &mut Errs) {
    errs.extend(names::validate_label_selector(spec.get("podSelector"), &p.child("podSelector")));
    for (rules, peers) in [("ingress", "from"), ("egress", "to")] {
        for (i, r) in arr(spec, rules).iter().enumerate() {
            let rp = p.child(rules).index(i);
            for (j, port) in arr(r, "ports").iter().enumerate() {
                let pp = rp.child("ports").index(j);
                let proto = s(port, "protocol");
                if !proto.is_empty() && !["SCTP", "TCP", "UDP"].contains(&proto) {
                    errs.push(FieldError::not_supported(pp.child("protocol"), proto, &["SCTP", "TCP", "UDP"]));
                }
                if let Some(pv) = port.get("port") {
                    port_num_or_name(pv, &pp.child("port"), errs);
                }
            }
            for (j, peer) in arr(r, peers).iter().enumerate() {
                let pp = rp.child(peers).index(j);
                errs.extend(names::validate_label_selector(peer.get("podSelector"), &pp.child("podSelector")));
                errs.extend(names::validate_label_selector(
                    peer.get("namespaceSelector"),
                    &pp.child("namespaceSelector"),
                ));
            }
        }
    }
    let types = arr(spec, "policyTypes");
    for (i, t) in types.iter().enumerate() {
        let t = t.as_str().unwrap_or_default();
        if t != "Ingress" && t != "Egress" {
            errs.push(FieldError::not_supported(p.child("policyTypes").index(i), t, &["Ingress", "Egress"]));
        }
    }
    if types.len() > 2 {
        errs.push(FieldError::invalid(
            p.child("policyTypes"),
            Value::Array(types.to_vec()),
            "may not specify more than two policyTypes",
        ));
    }
}

fn policy_rule(r: &Value, namespaced: bool, p: &Path, errs: &mut Errs) {
    if arr(r, "verbs").is_empty() {
        errs.push(FieldError::required(p.child("verbs"), "verbs must contain at least one value"));
    }
    let urls = arr(r, "nonResourceURLs");
    if !urls.is_empty() {
        if namespaced {
            errs.push(FieldError::invalid(
                p.child("nonResourceURLs"),
                Value::Array(urls.to_vec()),
                "namespaced rules cannot apply to non-resource URLs",
            ));
        }
        if !arr(r, "apiGroups").is_empty() || !arr(r, "resources").is_empty() || !arr(r, "resourceNames").is_empty() {
            errs.push(FieldError::invalid(
                p.child("nonResourceURLs"),
                Value::Array(urls.to_vec()),
                "rules cannot apply to both regular resources and non-resource URLs",
            ));
        }
        return;
    }
    if arr(r, "apiGroups").is_empty() {
        errs.push(FieldError::required(p.child("apiGroups"), "resource rules must supply at least one api group"));
    }
    if arr(r, "resources").is_empty() {
        errs.push(FieldError::required(p.child("resources"), "resource rules must supply at least one resource"));
    }
}

fn role_binding(obj: &Value, kind: &str, old: Option<&Value>, errs: &mut Errs) {
    let rr = obj.get("roleRef").unwrap_or(&Value::Null);
    let rp = Path::new("roleRef");
    let rr_group = s(rr, "apiGroup");
    if rr_group != "rbac.authorization.k8s.io" {
        errs.push(FieldError::not_supported(rp.child("apiGroup"), rr_group, &["rbac.authorization.k8s.io"]));
    }
    let rk = s(rr, "kind");
    let allowed: &[&str] = if kind == "RoleBinding" { &["Role", "ClusterRole"] } else { &["ClusterRole"] };
    if !allowed.contains(&rk) {
        errs.push(FieldError::not_supported(rp.child("kind"), rk, allowed));
    }
    let rn = s(rr, "name");
    if rn.is_empty() {
        errs.push(FieldError::required(rp.child("name"), ""));
    } else {
        errs.extend(
            names::is_valid_path_segment_name(rn).into_iter().map(|m| FieldError::invalid(rp.child("name"), rn, m)),
        );
    }
    for (i, sub) in arr(obj, "subjects").iter().enumerate() {
        let sp = Path::new("subjects").index(i);
        let name = s(sub, "name");
        if name.is_empty() {
            errs.push(FieldError::required(sp.child("name"), ""));
        }
        let group = s(sub, "apiGroup");
        match s(sub, "kind") {
            "ServiceAccount" => {
                if !name.is_empty() {
                    errs.extend(
                        names::validate_name(NameRule::Dns1123Subdomain, name, false)
                            .into_iter()
                            .map(|m| FieldError::invalid(sp.child("name"), name, m)),
                    );
                }
                if !group.is_empty() {
                    errs.push(FieldError::not_supported(sp.child("apiGroup"), group, &[""]));
                }
                if kind == "ClusterRoleBinding" && s(sub, "namespace").is_empty() {
                    errs.push(FieldError::required(sp.child("namespace"), ""));
                }
            }
            "User" | "Group" => {
                if group != "rbac.authorization.k8s.io" {
                    errs.push(FieldError::not_supported(sp.child("apiGroup"), group, &["rbac.authorization.k8s.io"]));
                }
            }
            other => {
                errs.push(FieldError::not_supported(sp.child("kind"), other, &["ServiceAccount", "User", "Group"]))
            }
        }
    }
    if let Some(o) = old
        && o.get("roleRef") != obj.get("roleRef")
    {
        errs.push(FieldError::invalid(&rp, rr.clone(), "cannot change roleRef"));
    }
}

// ---------------------------------------------------------------------------------------------
// Decode-time errors
// ---------------------------------------------------------------------------------------------

/// `base64.StdEncoding` decoding as Go does it (padding required, `\r`/`\n` skipped), for the
/// exact `illegal base64 data at input byte N` offsets.
pub fn go_base64_error(src: &str) -> Option<usize> {
    let b = src.as_bytes();
    let valid = |c: u8| c.is_ascii_alphanumeric() || c == b'+' || c == b'/';
    let mut si = 0;
    while si < b.len() {
        let mut j = 0;
        let mut done = false;
        while j < 4 {
            let Some(&c) = b.get(si) else {
                return match j {
                    0 => None,
                    _ => Some(si - j),
                };
            };
            si += 1;
            if valid(c) {
                j += 1;
                continue;
            }
            if c == b'\n' || c == b'\r' {
                continue;
            }
            if c != b'=' {
                return Some(si - 1);
            }
            match j {
                0 | 1 => return Some(si - 1),
                2 => {
                    while si < b.len() && (b.get(si) == Some(&b'\n') || b.get(si) == Some(&b'\r')) {
                        si += 1;
                    }
                    if si == b.len() {
                        return Some(b.len());
                    }
                    if b.get(si) != Some(&b'=') {
                        return Some(si - 1);
                    }
                    si += 1;
                }
                _ => {}
            }
            while si < b.len() && (b.get(si) == Some(&b'\n') || b.get(si) == Some(&b'\r')) {
                si += 1;
            }
            if si < b.len() {
                return Some(si);
            }
            done = true;
            break;
        }
        if done {
            return None;
        }
    }
    None
}

/// What the real server rejects while decoding a built-in object into its Go type: a
/// malformed quantity (resources, ResourceQuota, LimitRange, PVC, emptyDir sizeLimit) or
/// malformed base64 (Secret `data`, ConfigMap `binaryData`). Returns the full message of the
/// 400 BadRequest Status: `<Kind> in version "v1" cannot be handled as a <Kind>: <error>`.
pub fn decode_check(group: &str, kind: &str, obj: &Value) -> Result<(), String> {
    let fail = |e: String| {
        let version = "v1";
        let _ = group;
        format!("{kind} in version \"{version}\" cannot be handled as a {kind}: {e}")
    };
    // Resource lists (maps of quantities) and single quantities.
    let mut lists: Vec<Option<&Value>> = Vec::new();
    let mut quantities: Vec<&Value> = Vec::new();
    let spec = obj.get("spec");
    let mut pod_specs: Vec<&Value> = Vec::new();
    match (group, kind) {
        ("", "Pod") => pod_specs.extend(spec),
        ("apps", _) | ("batch", "Job") | ("", "ReplicationController") => {
            pod_specs.extend(spec.and_then(|s| s.get("template")).and_then(|t| t.get("spec")))
        }
        ("batch", "CronJob") => pod_specs.extend(
            spec.and_then(|s| s.get("jobTemplate"))
                .and_then(|j| j.get("spec"))
                .and_then(|s| s.get("template"))
                .and_then(|t| t.get("spec")),
        ),
        _ => {}
    }
    for ps in &pod_specs {
        for key in ["containers", "initContainers", "ephemeralContainers"] {
            for c in arr(ps, key) {
                let r = c.get("resources");
                lists.push(r.and_then(|r| r.get("limits")));
                lists.push(r.and_then(|r| r.get("requests")));
            }
        }
        lists.push(ps.get("overhead"));
        for v in arr(ps, "volumes") {
            if let Some(q) = v.get("emptyDir").and_then(|e| e.get("sizeLimit")) {
                quantities.push(q);
            }
        }
    }
    match (group, kind) {
        ("", "ResourceQuota") => {
            lists.push(spec.and_then(|s| s.get("hard")));
        }
        ("", "LimitRange") => {
            for item in spec.map(|s| arr(s, "limits")).unwrap_or_default() {
                for k in ["max", "min", "default", "defaultRequest", "maxLimitRequestRatio"] {
                    lists.push(item.get(k));
                }
            }
        }
        ("", "PersistentVolumeClaim") => {
            let r = spec.and_then(|s| s.get("resources"));
            lists.push(r.and_then(|r| r.get("requests")));
            lists.push(r.and_then(|r| r.get("limits")));
        }
        ("", "Node") => {
            let st = obj.get("status");
            lists.push(st.and_then(|s| s.get("capacity")));
            lists.push(st.and_then(|s| s.get("allocatable")));
        }
        _ => {}
    }
    let listed = lists.into_iter().flatten().filter_map(Value::as_object).flat_map(|m| m.values());
    for q in listed.chain(quantities) {
        parse_quantity_value(q).map_err(fail)?;
    }
    let b64_key = match (group, kind) {
        ("", "Secret") => Some("data"),
        ("", "ConfigMap") => Some("binaryData"),
        _ => None,
    };
    if let Some(key) = b64_key {
        for v in map(obj, key).into_iter().flat_map(|m| m.values()) {
            match v {
                Value::String(s) => {
                    if let Some(at) = go_base64_error(s) {
                        return Err(fail(format!("illegal base64 data at input byte {at}")));
                    }
                }
                Value::Null => {}
                _ => {
                    return Err(fail("json: cannot unmarshal non-string into Go value of type []uint8".into()));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin::defaults::apply_defaults;
    use proptest::prelude::*;
    use serde_json::json;

    fn check(group: &str, kind: &str, obj: Value, old: Option<Value>) -> Vec<String> {
        let mut obj = obj;
        apply_defaults(group, kind, &mut obj);
        let old = old.map(|mut o| {
            apply_defaults(group, kind, &mut o);
            o
        });
        validate(group, kind, &obj, old.as_ref()).iter().map(ToString::to_string).collect()
    }

    fn deployment(labels: Value, selector: Value) -> Value {
        json!({"metadata": {"name": "web", "namespace": "default"}, "spec": {"selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}})
    }

    #[test]
    fn pod_errors() {
        let errs = check("", "Pod", json!({"metadata": {"name": "p", "namespace": "d"}, "spec": {}}), None);
        assert_eq!(errs, vec!["spec.containers: Required value"]);
        let errs = check(
            "",
            "Pod",
            json!({"metadata": {"name": "p", "namespace": "d"}, "spec": {"restartPolicy": "Sometimes", "containers": [
                {"name": "a"}, {"name": "a", "image": "x", "ports": [{"containerPort": 70000}],
                 "env": [{"name": "A=B"}], "volumeMounts": [{"name": "data", "mountPath": "/d"}],
                 "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "2"}}},
                {"name": "Bad_Name", "image": "x"}]}}),
            None,
        );
        assert!(errs.contains(&"spec.containers[0].image: Required value".to_string()), "{errs:?}");
        assert!(errs.contains(&"spec.containers[1].name: Duplicate value: \"a\"".to_string()));
        assert!(errs.contains(&"spec.containers[1].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive".to_string()));
        assert!(errs.contains(&"spec.containers[1].env[0].name: Invalid value: \"A=B\": a valid environment variable name must consist only of printable ASCII characters other than '='".to_string()));
        assert!(errs.contains(&"spec.containers[1].volumeMounts[0].name: Not found: \"data\"".to_string()));
        assert!(errs.contains(&"spec.containers[1].resources.requests[cpu]: Invalid value: \"2\": must be less than or equal to cpu limit of 1".to_string()));
        assert!(errs.iter().any(|e| {
            e.starts_with("spec.containers[2].name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 label")
        }));
        assert!(errs.contains(&"spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"".to_string()));
        let ok = check(
            "",
            "Pod",
            json!({"metadata": {"name": "p", "namespace": "d"}, "spec": {"containers": [{"name": "a", "image": "nginx",
            "livenessProbe": {"httpGet": {"port": "http"}}, "ports": [{"name": "http", "containerPort": 80}]}]}}),
            None,
        );
        assert!(ok.is_empty(), "{ok:?}");
    }

    #[test]
    fn workload_selectors() {
        let errs = check("apps", "Deployment", deployment(json!({"app": "web"}), json!({"app": "other"})), None);
        assert_eq!(
            errs,
            vec![
                "spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"web\"}: `selector` does not match template `labels`"
            ]
        );
        assert!(check("apps", "Deployment", deployment(json!({"app": "web"}), json!({"app": "web"})), None).is_empty());
        let mut d = deployment(json!({"app": "web"}), json!({"app": "web"}));
        if let Some(spec) = d.get_mut("spec").and_then(Value::as_object_mut) {
            spec.remove("selector");
            spec.insert("replicas".into(), json!(-1));
        }
        let errs = check("apps", "Deployment", d, None);
        assert_eq!(
            errs,
            vec![
                "spec.replicas: Invalid value: -1: must be greater than or equal to 0",
                "spec.selector: Required value"
            ]
        );
        let mut new = deployment(json!({"app": "web", "v": "2"}), json!({"app": "web", "v": "2"}));
        if let Some(m) = new.get_mut("metadata").and_then(Value::as_object_mut) {
            m.insert("resourceVersion".into(), json!("3"));
        }
        let errs = check("apps", "Deployment", new, Some(deployment(json!({"app": "web"}), json!({"app": "web"}))));
        assert_eq!(errs.len(), 1);
        assert!(errs[0].starts_with("spec.selector: Invalid value: "));
        assert!(errs[0].ends_with(": field is immutable"));
        let sts = json!({"metadata": {"name": "db", "namespace": "d"}, "spec": {"selector": {"matchLabels": {}},
            "template": {"spec": {"containers": [{"name": "a", "image": "x"}]}}}});
        let errs = check("apps", "StatefulSet", sts, None);
        assert!(errs.iter().any(|e| e.ends_with("empty selector is invalid for statefulset")), "{errs:?}");
    }

    #[test]
    fn job_restart_policy() {
        let job = json!({"metadata": {"name": "j", "namespace": "d"}, "spec": {"template": {"spec": {"containers": [{"name": "a", "image": "x"}]}}}});
        assert_eq!(
            check("batch", "Job", job, None),
            vec![
                "spec.template.spec.restartPolicy: Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\""
            ]
        );
        let cj = json!({"metadata": {"name": "c", "namespace": "d"}, "spec": {"schedule": "* * *", "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "a", "image": "x"}]}}}}}});
        assert_eq!(
            check("batch", "CronJob", cj, None),
            vec!["spec.schedule: Invalid value: \"* * *\": expected exactly 5 fields, found 3: * * *"]
        );
    }

    #[test]
    fn services() {
        let errs = check(
            "",
            "Service",
            json!({"metadata": {"name": "1svc", "namespace": "d"}, "spec": {"type": "Foo"}}),
            None,
        );
        assert!(errs[0].starts_with("metadata.name: Invalid value: \"1svc\": a DNS-1035 label"), "{errs:?}");
        assert!(errs.contains(&"spec.type: Unsupported value: \"Foo\": supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\"".to_string()));
        assert!(errs.contains(&"spec.ports: Required value".to_string()));
        let headless = check(
            "",
            "Service",
            json!({"metadata": {"name": "s", "namespace": "d"}, "spec": {"clusterIP": "None"}}),
            None,
        );
        assert!(headless.is_empty(), "{headless:?}");
        let errs = check(
            "",
            "Service",
            json!({"metadata": {"name": "s", "namespace": "d"}, "spec": {"ports": [{"port": 80}, {"port": 0, "name": "b"}]}}),
            None,
        );
        assert_eq!(
            errs,
            vec![
                "spec.ports[0].name: Required value",
                "spec.ports[1].port: Invalid value: 0: must be between 1 and 65535, inclusive",
                "spec.ports[1].targetPort: Invalid value: 0: must be between 1 and 65535, inclusive",
            ]
        );
        let old = json!({"metadata": {"name": "s", "namespace": "d"}, "spec": {"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"], "ports": [{"port": 80}]}});
        let new = json!({"metadata": {"name": "s", "namespace": "d", "resourceVersion": "2"}, "spec": {"clusterIP": "10.0.0.2", "clusterIPs": ["10.0.0.2"], "ports": [{"port": 80}]}});
        let errs = check("", "Service", new, Some(old));
        assert_eq!(errs, vec!["spec.clusterIPs[0]: Invalid value: []string{\"10.0.0.2\"}: may not change once set"]);
    }

    #[test]
    fn config_maps_and_secrets() {
        let errs =
            check("", "ConfigMap", json!({"metadata": {"name": "c", "namespace": "d"}, "data": {"a b": "x"}}), None);
        assert_eq!(errs.len(), 1);
        assert!(errs[0].starts_with(
            "data[a b]: Invalid value: \"a b\": a valid config key must consist of alphanumeric characters"
        ));
        let big = "x".repeat(MAX_SECRET_SIZE + 1);
        let errs =
            check("", "ConfigMap", json!({"metadata": {"name": "c", "namespace": "d"}, "data": {"a": big}}), None);
        assert_eq!(errs, vec![": Too long: may not be more than 1048576 bytes"]);
        let old = json!({"metadata": {"name": "c", "namespace": "d"}, "immutable": true, "data": {"a": "1"}});
        let new = json!({"metadata": {"name": "c", "namespace": "d", "resourceVersion": "2"}, "immutable": true, "data": {"a": "2"}});
        assert_eq!(
            check("", "ConfigMap", new, Some(old)),
            vec!["data: Forbidden: field is immutable when `immutable` is set"]
        );
        let errs = check(
            "",
            "Secret",
            json!({"metadata": {"name": "s", "namespace": "d"}, "type": "kubernetes.io/tls", "data": {"tls.crt": "eA=="}}),
            None,
        );
        assert_eq!(errs, vec!["data[tls.key]: Required value"]);
        let old = json!({"metadata": {"name": "s", "namespace": "d"}, "type": "Opaque"});
        let new = json!({"metadata": {"name": "s", "namespace": "d", "resourceVersion": "1"}, "type": "x/y"});
        assert_eq!(check("", "Secret", new, Some(old)), vec!["type: Invalid value: \"x/y\": field is immutable"]);
    }

    #[test]
    fn rbac_ingress_lease_namespace() {
        let errs = check(
            "rbac.authorization.k8s.io",
            "Role",
            json!({"metadata": {"name": "system:r", "namespace": "d"}, "rules": [{"apiGroups": [""], "resources": ["pods"]}]}),
            None,
        );
        assert_eq!(errs, vec!["rules[0].verbs: Required value: verbs must contain at least one value"]);
        let errs = check(
            "rbac.authorization.k8s.io",
            "ClusterRoleBinding",
            json!({"metadata": {"name": "b"}, "roleRef": {"kind": "Role", "name": "r"},
            "subjects": [{"kind": "ServiceAccount", "name": "sa"}]}),
            None,
        );
        assert_eq!(
            errs,
            vec![
                "roleRef.kind: Unsupported value: \"Role\": supported values: \"ClusterRole\"",
                "subjects[0].namespace: Required value",
            ]
        );
        let errs = check(
            "networking.k8s.io",
            "Ingress",
            json!({"metadata": {"name": "i", "namespace": "d"}, "spec": {"rules": [{"host": "a.com", "http": {"paths": [
            {"path": "/", "backend": {"service": {"name": "s", "port": {"number": 80}}}},
            {"path": "x", "pathType": "Prefix", "backend": {"service": {"name": "s"}}}]}}]}}),
            None,
        );
        assert_eq!(
            errs,
            vec![
                "spec.rules[0].http.paths[0].pathType: Required value: pathType must be specified",
                "spec.rules[0].http.paths[1].path: Invalid value: \"x\": must be an absolute path",
                "spec.rules[0].http.paths[1].backend.service.port: Required value: port name or number is required",
            ]
        );
        let errs = check(
            "coordination.k8s.io",
            "Lease",
            json!({"metadata": {"name": "l", "namespace": "d"}, "spec": {"leaseDurationSeconds": 0}}),
            None,
        );
        assert_eq!(errs, vec!["spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"]);
        let errs = check("", "Namespace", json!({"metadata": {"name": "a.b"}}), None);
        assert_eq!(errs, vec!["metadata.name: Invalid value: \"a.b\": must not contain dots"]);
        let errs = check(
            "",
            "ResourceQuota",
            json!({"metadata": {"name": "q", "namespace": "d"}, "spec": {"hard": {"cpu": "-1"}}}),
            None,
        );
        assert_eq!(errs, vec!["spec.hard[cpu]: Invalid value: \"-1\": must be greater than or equal to 0"]);
    }

    #[test]
    fn decode_errors() {
        let bad = json!({"spec": {"containers": [{"name": "a", "resources": {"limits": {"cpu": "abc"}}}]}});
        assert_eq!(
            decode_check("", "Pod", &bad),
            Err("Pod in version \"v1\" cannot be handled as a Pod: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'".to_string())
        );
        assert_eq!(
            decode_check("", "Pod", &json!({"spec": {"containers": [{"resources": {"limits": {"cpu": 0.5}}}]}})),
            Ok(())
        );
        assert_eq!(
            decode_check("", "Secret", &json!({"data": {"a": "abc"}})),
            Err("Secret in version \"v1\" cannot be handled as a Secret: illegal base64 data at input byte 0"
                .to_string())
        );
        assert_eq!(go_base64_error("aGk="), None);
        assert_eq!(go_base64_error("aGk"), Some(0));
        assert_eq!(go_base64_error("a$=="), Some(1));
        assert_eq!(go_base64_error("aG=="), None);
        assert_eq!(go_base64_error("aGk=x"), Some(4));
        assert_eq!(go_base64_error("aG=x"), Some(2));
        assert_eq!(go_base64_error("aG\n=="), None);
    }

    proptest! {
        #[test]
        fn base64_agrees_with_a_strict_decoder(s in "[A-Za-z0-9+/=]{0,16}") {
            let ours = go_base64_error(&s).is_none();
            let theirs = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, &s).is_ok();
            // Go is lenient about non-zero trailing bits; the base64 crate is not.
            if theirs { prop_assert!(ours, "{}", s); }
        }

        #[test]
        fn validate_never_panics(v in prop_oneof![Just(json!(null)), Just(json!(1)), Just(json!("x")), Just(json!([1])),
            Just(json!({"containers": [null, 1, {"ports": "x", "env": [1]}]})), Just(json!({"rules": 1, "ports": [{}]}))]) {
            for (g, k) in [("", "Pod"), ("apps", "Deployment"), ("apps", "StatefulSet"), ("", "Service"), ("batch", "CronJob"),
                           ("networking.k8s.io", "Ingress"), ("networking.k8s.io", "NetworkPolicy"), ("", "ConfigMap"),
                           ("", "Secret"), ("rbac.authorization.k8s.io", "RoleBinding"), ("", "LimitRange")] {
                let obj = json!({"metadata": v.clone(), "spec": v.clone(), "data": v.clone(), "rules": v.clone(), "roleRef": v.clone()});
                let _ = validate(g, k, &obj, None);
                let _ = validate(g, k, &obj, Some(&obj));
                let _ = decode_check(g, k, &obj);
            }
        }
    }
}
