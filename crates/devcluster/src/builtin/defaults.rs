//! Defaulting of built-in kinds, as the real apiserver applies it when it decodes a request
//! body (Kubernetes 1.33, default feature gates):
//! `pkg/apis/core/v1/defaults.go`, `pkg/apis/apps/v1/defaults.go`,
//! `pkg/apis/batch/v1/defaults.go`, `pkg/apis/networking/v1/defaults.go`,
//! `pkg/apis/rbac/v1/defaults.go`, `pkg/apis/discovery/v1/defaults.go`,
//! `pkg/apis/scheduling/v1/defaults.go`, `pkg/apis/storage/v1/defaults.go`, the declarative
//! `+default=` markers of k8s.io/api, and the generated `zz_generated.defaults.go` that walks
//! into nested types (pod templates, volumes, probes, resource lists).
//!
//! Also mirrored because they happen on the same decode: quantities are re-encoded in their
//! canonical form and resource lists rounded up to milli-units (`0.5` → `500m`, `100u` → `1m`),
//! and a Secret's `stringData` is merged into `data` (the v1 conversion).
//!
//! `prepare_for_create` holds what registry strategies do on create (status reset, generation
//! 1, Pod QoS class, Namespace finalizer, Job selector). The cluster IPs and IP family fields
//! the Service REST storage fills are not here: they are set with the cluster IP
//! (src/hooks.rs).

use crate::builtin::quantity::parse_quantity_value;
use base64::Engine;
use serde_json::{Map, Value, json};

fn obj_mut<'a>(v: &'a mut Value, key: &str) -> Option<&'a mut Map<String, Value>> {
    v.get_mut(key).and_then(Value::as_object_mut)
}

/// The object at `key`, created as `{}` when absent or null. `None` when `v` is not an object
/// or the key holds a non-object.
fn ensure_obj<'a>(v: &'a mut Value, key: &str) -> Option<&'a mut Value> {
    let o = v.as_object_mut()?;
    let slot = o.entry(key.to_string()).or_insert_with(|| json!({}));
    if slot.is_null() {
        *slot = json!({});
    }
    if slot.is_object() { Some(slot) } else { None }
}

fn is_unset(v: &Value, key: &str) -> bool {
    match v.get(key) {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        _ => false,
    }
}

/// Set `key` to `value` when it is absent, null or "" (Go's zero value for strings and nil
/// pointers).
fn default_field(v: &mut Value, key: &str, value: Value) {
    if is_unset(v, key)
        && let Some(o) = v.as_object_mut()
    {
        o.insert(key.to_string(), value);
    }
}

/// Like `default_field`, but also replaces a zero number (Go's zero value for an int field).
fn default_nonzero(v: &mut Value, key: &str, value: Value) {
    let zero = v.get(key).is_some_and(|x| x.as_f64() == Some(0.0));
    if (zero || is_unset(v, key))
        && let Some(o) = v.as_object_mut()
    {
        o.insert(key.to_string(), value);
    }
}

fn for_each_item(v: &mut Value, key: &str, mut f: impl FnMut(&mut Value)) {
    if let Some(items) = v.get_mut(key).and_then(Value::as_array_mut) {
        items.iter_mut().filter(|i| i.is_object()).for_each(&mut f);
    }
}

fn with_obj(v: &mut Value, key: &str, f: impl FnOnce(&mut Value)) {
    if let Some(child) = v.get_mut(key).filter(|c| c.is_object()) {
        f(child);
    }
}

/// `MatchResources` of admission policies: `Equivalent`, empty selectors, rules of any scope.
fn match_resources(m: &mut Value) {
    default_field(m, "matchPolicy", json!("Equivalent"));
    default_field(m, "namespaceSelector", json!({}));
    default_field(m, "objectSelector", json!({}));
    for key in ["resourceRules", "excludeResourceRules"] {
        for_each_item(m, key, |r| default_field(r, "scope", json!("*")));
    }
}

/// Apply the real server's defaults for a built-in kind. Unknown kinds are left untouched.
/// Malformed parts (wrong JSON types) are skipped, never an error: validation reports them.
pub fn apply_defaults(group: &str, kind: &str, obj: &mut Value) {
    if !obj.is_object() {
        return;
    }
    match (group, kind) {
        ("", "Pod") => {
            set_defaults_pod(obj);
            with_obj(obj, "spec", pod_spec);
        }
        ("", "PodTemplate") => with_obj(obj, "template", pod_template),
        ("", "ReplicationController") => {
            replication_controller(obj);
        }
        ("", "Service") => service(obj),
        ("", "Secret") => secret(obj),
        ("", "Namespace") => namespace(obj),
        ("", "PersistentVolumeClaim") => {
            pvc(obj);
        }
        ("", "PersistentVolume") => persistent_volume(obj),
        ("", "Node") => node(obj),
        ("", "Endpoints") => {
            for_each_item(obj, "subsets", |s| for_each_item(s, "ports", |p| default_field(p, "protocol", json!("TCP"))))
        }
        ("", "ResourceQuota") => {
            with_obj(obj, "spec", |s| resource_list(s, "hard"));
            with_obj(obj, "status", |s| {
                resource_list(s, "hard");
                resource_list(s, "used");
            });
        }
        ("", "LimitRange") => with_obj(obj, "spec", |s| for_each_item(s, "limits", limit_range_item)),
        ("apps", "Deployment") => deployment(obj),
        ("apps", "ReplicaSet") => {
            if let Some(spec) = ensure_obj(obj, "spec") {
                default_field(spec, "replicas", json!(1));
                with_obj(spec, "template", pod_template);
            }
        }
        ("apps", "StatefulSet") => stateful_set(obj),
        ("apps", "DaemonSet") => daemon_set(obj),
        ("batch", "Job") => job(obj),
        ("batch", "CronJob") => cron_job(obj),
        ("networking.k8s.io", "NetworkPolicy") => network_policy(obj),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => with_obj(obj, "spec", |s| {
            default_field(s, "failurePolicy", json!("Fail"));
            with_obj(s, "matchConstraints", match_resources);
        }),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding") => {
            with_obj(obj, "spec", |s| with_obj(s, "matchResources", match_resources))
        }
        ("networking.k8s.io", "IngressClass") => {
            with_obj(obj, "spec", |s| with_obj(s, "parameters", |p| default_field(p, "scope", json!("Cluster"))))
        }
        ("discovery.k8s.io", "EndpointSlice") => for_each_item(obj, "ports", |p| {
            default_field(p, "protocol", json!("TCP"));
            if p.get("name").is_none_or(Value::is_null)
                && let Some(o) = p.as_object_mut()
            {
                o.insert("name".into(), json!(""));
            }
        }),
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => {
            with_obj(obj, "roleRef", |r| default_field(r, "apiGroup", json!("rbac.authorization.k8s.io")));
            for_each_item(obj, "subjects", |s| {
                let kind = s.get("kind").and_then(Value::as_str).unwrap_or_default().to_string();
                match kind.as_str() {
                    "User" | "Group" => default_field(s, "apiGroup", json!("rbac.authorization.k8s.io")),
                    "ServiceAccount" => default_field(s, "apiGroup", json!("")),
                    _ => {}
                }
            });
        }
        ("scheduling.k8s.io", "PriorityClass") => default_field(obj, "preemptionPolicy", json!("PreemptLowerPriority")),
        ("storage.k8s.io", "StorageClass") => {
            default_field(obj, "reclaimPolicy", json!("Delete"));
            default_field(obj, "volumeBindingMode", json!("Immediate"));
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------------
// Quantities
// ---------------------------------------------------------------------------------------------

/// `SetDefaults_ResourceList`: every quantity rounded up to milli-units, then (as the JSON
/// encoder does) written in canonical form. Unparseable values are left for validation.
fn resource_list(parent: &mut Value, key: &str) {
    if let Some(map) = obj_mut(parent, key) {
        for v in map.values_mut() {
            if let Ok(Some(mut q)) = parse_quantity_value(v) {
                q.round_up(-3);
                *v = Value::String(q.to_canonical());
            }
        }
    }
}

/// A single quantity field, canonicalized (no rounding).
fn quantity_field(parent: &mut Value, key: &str) {
    if let Some(v) = parent.get_mut(key)
        && let Ok(Some(q)) = parse_quantity_value(v)
    {
        *v = Value::String(q.to_canonical());
    }
}

fn resource_requirements(parent: &mut Value, key: &str) {
    with_obj(parent, key, |r| {
        resource_list(r, "limits");
        resource_list(r, "requests");
    });
}

// ---------------------------------------------------------------------------------------------
// Pods
// ---------------------------------------------------------------------------------------------

/// `SetDefaults_Pod` (only on Pods, not on templates): requests default to limits,
/// `enableServiceLinks: true`, host-network ports get `hostPort = containerPort`.
fn set_defaults_pod(pod: &mut Value) {
    let Some(spec) = ensure_obj(pod, "spec") else { return };
    for key in ["containers", "initContainers"] {
        for_each_item(spec, key, |c| {
            let Some(limits) = c.get("resources").and_then(|r| r.get("limits")).and_then(Value::as_object).cloned()
            else {
                return;
            };
            let Some(resources) = ensure_obj(c, "resources") else { return };
            let Some(requests) = ensure_obj(resources, "requests").and_then(Value::as_object_mut) else {
                return;
            };
            for (k, v) in limits {
                requests.entry(k).or_insert(v);
            }
        });
    }
    default_field(spec, "enableServiceLinks", json!(true));
    if spec.get("hostNetwork").and_then(Value::as_bool) == Some(true) {
        for key in ["containers", "initContainers"] {
            for_each_item(spec, key, |c| {
                for_each_item(c, "ports", |p| {
                    let cp = p.get("containerPort").cloned().unwrap_or(Value::Null);
                    default_nonzero(p, "hostPort", cp);
                })
            });
        }
    }
}

fn pod_template(template: &mut Value) {
    with_obj(template, "spec", pod_spec);
}

/// `SetDefaults_PodSpec` and everything the generated defaulters reach from a PodSpec.
fn pod_spec(spec: &mut Value) {
    default_field(spec, "dnsPolicy", json!("ClusterFirst"));
    default_field(spec, "restartPolicy", json!("Always"));
    default_field(spec, "securityContext", json!({}));
    default_field(spec, "terminationGracePeriodSeconds", json!(30));
    default_field(spec, "schedulerName", json!("default-scheduler"));
    for_each_item(spec, "volumes", volume);
    for key in ["initContainers", "containers", "ephemeralContainers"] {
        for_each_item(spec, key, container);
    }
    resource_list(spec, "overhead");
}

/// `SetDefaults_Container` plus the generated walk into ports, env, resources, probes and
/// lifecycle handlers.
fn container(c: &mut Value) {
    if is_unset(c, "imagePullPolicy") {
        let image = c.get("image").and_then(Value::as_str).unwrap_or_default();
        let policy = if image_tag(image).as_deref() == Some("latest") { "Always" } else { "IfNotPresent" };
        default_field(c, "imagePullPolicy", json!(policy));
    }
    default_field(c, "terminationMessagePath", json!("/dev/termination-log"));
    default_field(c, "terminationMessagePolicy", json!("File"));
    for_each_item(c, "ports", |p| default_field(p, "protocol", json!("TCP")));
    for_each_item(c, "env", |e| {
        with_obj(e, "valueFrom", |vf| with_obj(vf, "fieldRef", |f| default_field(f, "apiVersion", json!("v1"))))
    });
    resource_requirements(c, "resources");
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        with_obj(c, probe, |p| {
            default_nonzero(p, "timeoutSeconds", json!(1));
            default_nonzero(p, "periodSeconds", json!(10));
            default_nonzero(p, "successThreshold", json!(1));
            default_nonzero(p, "failureThreshold", json!(3));
            handler(p);
        });
    }
    with_obj(c, "lifecycle", |l| {
        with_obj(l, "postStart", handler);
        with_obj(l, "preStop", handler);
    });
}

/// Probe and lifecycle handlers: `SetDefaults_HTTPGetAction` (path `/`, scheme `HTTP`) and
/// the `+default=""` of `GRPCAction.service`.
fn handler(h: &mut Value) {
    with_obj(h, "httpGet", |g| {
        default_field(g, "path", json!("/"));
        default_field(g, "scheme", json!("HTTP"));
    });
    with_obj(h, "grpc", |g| {
        if g.get("service").is_none_or(Value::is_null)
            && let Some(o) = g.as_object_mut()
        {
            o.insert("service".into(), json!(""));
        }
    });
}

/// `parsers.ParseImageName`'s tag: the explicit tag, `latest` when there is neither tag nor
/// digest, `None` for a digest-only reference or an unparseable one (both give IfNotPresent).
pub fn image_tag(image: &str) -> Option<String> {
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    if let Some(d) = digest {
        let ok = d.split_once(':').is_some_and(|(alg, hex)| {
            !alg.is_empty()
                && alg.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'.' | b'-' | b'_'))
                && hex.len() >= 32
                && hex.bytes().all(|b| b.is_ascii_hexdigit())
        });
        if !ok {
            return None;
        }
    }
    let last_slash = name.rfind('/').map_or(0, |i| i + 1);
    let (repo, tag) = match name.get(last_slash..).and_then(|tail| tail.rfind(':')) {
        Some(i) => {
            let split = last_slash + i;
            (name.get(..split)?, name.get(split + 1..))
        }
        None => (name, None),
    };
    if !valid_repository(repo) {
        return None;
    }
    match tag {
        Some(t) => {
            let ok = !t.is_empty()
                && t.len() <= 128
                && t.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
                && t.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
            if ok { Some(t.to_string()) } else { None }
        }
        None if digest.is_none() => Some("latest".to_string()),
        None => None,
    }
}

/// The name grammar of the docker reference library, simplified: an optional domain
/// (`host[:port]`, recognised as in `splitDockerDomain`) and lowercase path components.
fn valid_repository(repo: &str) -> bool {
    if repo.is_empty() || repo.len() > 255 {
        return false;
    }
    let mut parts: Vec<&str> = repo.split('/').collect();
    if parts.len() > 1
        && let Some(first) = parts.first().copied()
        && (first.contains('.') || first.contains(':') || first == "localhost" || first.to_lowercase() != first)
    {
        let (host, port) = match first.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (first, None),
        };
        let host_ok = !host.is_empty() && host.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-'));
        let port_ok = port.is_none_or(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        if !(host_ok && port_ok) {
            return false;
        }
        parts.remove(0);
    }
    parts.iter().all(|c| {
        let b = c.as_bytes();
        !b.is_empty()
            && b.first().is_some_and(|x| x.is_ascii_lowercase() || x.is_ascii_digit())
            && b.last().is_some_and(|x| x.is_ascii_lowercase() || x.is_ascii_digit())
            && b.iter().all(|x| x.is_ascii_lowercase() || x.is_ascii_digit() || matches!(x, b'.' | b'_' | b'-'))
    })
}

const VOLUME_MODE_644: i64 = 420;

/// `SetDefaults_Volume` and the per-source defaults reached from a Volume.
fn volume(v: &mut Value) {
    let has_source = v.as_object().is_some_and(|o| o.iter().any(|(k, val)| k != "name" && !val.is_null()));
    if !has_source && let Some(o) = v.as_object_mut() {
        o.insert("emptyDir".into(), json!({}));
    }
    with_obj(v, "emptyDir", |e| quantity_field(e, "sizeLimit"));
    with_obj(v, "hostPath", |h| {
        if h.get("type").is_none_or(Value::is_null)
            && let Some(o) = h.as_object_mut()
        {
            o.insert("type".into(), json!(""));
        }
    });
    for key in ["secret", "configMap", "projected"] {
        with_obj(v, key, |s| default_field(s, "defaultMode", json!(VOLUME_MODE_644)));
    }
    with_obj(v, "downwardAPI", |d| {
        default_field(d, "defaultMode", json!(VOLUME_MODE_644));
        downward_items(d);
    });
    with_obj(v, "projected", |p| {
        for_each_item(p, "sources", |s| {
            with_obj(s, "serviceAccountToken", |t| default_field(t, "expirationSeconds", json!(3600)));
            with_obj(s, "downwardAPI", downward_items);
        })
    });
    with_obj(v, "iscsi", |i| default_field(i, "iscsiInterface", json!("default")));
    with_obj(v, "rbd", |r| {
        default_field(r, "pool", json!("rbd"));
        default_field(r, "user", json!("admin"));
        default_field(r, "keyring", json!("/etc/ceph/keyring"));
    });
    with_obj(v, "azureDisk", |a| {
        default_field(a, "cachingMode", json!("ReadWrite"));
        default_field(a, "fsType", json!("ext4"));
        default_field(a, "readOnly", json!(false));
        default_field(a, "kind", json!("Shared"));
    });
    with_obj(v, "scaleIO", |s| {
        default_field(s, "storageMode", json!("ThinProvisioned"));
        default_field(s, "fsType", json!("xfs"));
    });
    with_obj(v, "ephemeral", |e| {
        with_obj(e, "volumeClaimTemplate", |t| with_obj(t, "spec", pvc_spec));
    });
}

fn downward_items(d: &mut Value) {
    for_each_item(d, "items", |i| with_obj(i, "fieldRef", |f| default_field(f, "apiVersion", json!("v1"))));
}

// ---------------------------------------------------------------------------------------------
// Other core kinds
// ---------------------------------------------------------------------------------------------

fn replication_controller(obj: &mut Value) {
    // SetDefaults_ReplicationController: selector and labels from the template's labels.
    let labels = obj
        .get("spec")
        .and_then(|s| s.get("template"))
        .and_then(|t| t.get("metadata"))
        .and_then(|m| m.get("labels"))
        .filter(|l| l.is_object())
        .cloned();
    if let Some(labels) = labels {
        if let Some(spec) = ensure_obj(obj, "spec")
            && spec.get("selector").and_then(Value::as_object).is_none_or(Map::is_empty)
            && let Some(o) = spec.as_object_mut()
        {
            o.insert("selector".into(), labels.clone());
        }
        if let Some(meta) = ensure_obj(obj, "metadata")
            && meta.get("labels").and_then(Value::as_object).is_none_or(Map::is_empty)
            && let Some(o) = meta.as_object_mut()
        {
            o.insert("labels".into(), labels);
        }
    }
    if let Some(spec) = ensure_obj(obj, "spec") {
        default_field(spec, "replicas", json!(1));
        with_obj(spec, "template", pod_template);
    }
}

/// `SetDefaults_Service`. `ipFamilyPolicy`/`ipFamilies` are not defaults upstream (the REST
/// storage sets them, src/hooks.rs does here).
fn service(obj: &mut Value) {
    let Some(spec) = ensure_obj(obj, "spec") else { return };
    default_field(spec, "sessionAffinity", json!("None"));
    let affinity = spec.get("sessionAffinity").and_then(Value::as_str).unwrap_or_default().to_string();
    if affinity == "None" {
        if let Some(o) = spec.as_object_mut() {
            o.remove("sessionAffinityConfig");
        }
    } else if affinity == "ClientIP" {
        let has_timeout = spec
            .get("sessionAffinityConfig")
            .and_then(|c| c.get("clientIP"))
            .and_then(|c| c.get("timeoutSeconds"))
            .is_some_and(|t| !t.is_null());
        if !has_timeout && let Some(o) = spec.as_object_mut() {
            o.insert("sessionAffinityConfig".into(), json!({"clientIP": {"timeoutSeconds": 10800}}));
        }
    }
    default_field(spec, "type", json!("ClusterIP"));
    for_each_item(spec, "ports", |p| {
        default_field(p, "protocol", json!("TCP"));
        let target_unset = match p.get("targetPort") {
            None | Some(Value::Null) => true,
            Some(Value::String(s)) => s.is_empty(),
            Some(n) => n.as_f64() == Some(0.0),
        };
        if target_unset {
            let port = p.get("port").cloned().unwrap_or(json!(0));
            if let Some(o) = p.as_object_mut() {
                o.insert("targetPort".into(), port);
            }
        }
    });
    let ty = spec.get("type").and_then(Value::as_str).unwrap_or_default().to_string();
    let has_external_ips = spec.get("externalIPs").and_then(Value::as_array).is_some_and(|a| !a.is_empty());
    if ty == "LoadBalancer" || ty == "NodePort" || (ty == "ClusterIP" && has_external_ips) {
        default_field(spec, "externalTrafficPolicy", json!("Cluster"));
    }
    if matches!(ty.as_str(), "NodePort" | "LoadBalancer" | "ClusterIP") {
        default_field(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    if ty == "LoadBalancer" {
        default_field(spec, "allocateLoadBalancerNodePorts", json!(true));
        if let Some(status) = obj.get_mut("status") {
            with_obj(status, "loadBalancer", |lb| {
                for_each_item(lb, "ingress", |i| {
                    if !is_unset(i, "ip") {
                        default_field(i, "ipMode", json!("VIP"));
                    }
                })
            });
        }
    }
}

/// `SetDefaults_Secret` (type Opaque) after the v1 conversion, which merges `stringData` into
/// `data` (base64-encoded, overriding keys of the same name) and drops `stringData`.
fn secret(obj: &mut Value) {
    if let Some(Value::Object(string_data)) = obj.as_object_mut().and_then(|o| o.remove("stringData"))
        && let Some(data) = ensure_obj(obj, "data").and_then(Value::as_object_mut)
    {
        for (k, v) in string_data {
            let s = v.as_str().unwrap_or_default();
            data.insert(k, json!(base64::engine::general_purpose::STANDARD.encode(s.as_bytes())));
        }
    }
    default_field(obj, "type", json!("Opaque"));
}

/// `SetDefaults_Namespace` (label `kubernetes.io/metadata.name`) and
/// `SetDefaults_NamespaceStatus` (phase Active).
fn namespace(obj: &mut Value) {
    let name = obj.get("metadata").and_then(|m| m.get("name")).and_then(Value::as_str).unwrap_or_default().to_string();
    if !name.is_empty()
        && let Some(meta) = ensure_obj(obj, "metadata")
        && let Some(labels) = ensure_obj(meta, "labels").and_then(Value::as_object_mut)
    {
        labels.insert("kubernetes.io/metadata.name".into(), json!(name));
    }
    if let Some(status) = ensure_obj(obj, "status") {
        default_field(status, "phase", json!("Active"));
    }
}

fn pvc_spec(spec: &mut Value) {
    default_field(spec, "volumeMode", json!("Filesystem"));
    resource_requirements(spec, "resources");
}

/// `SetDefaults_PersistentVolumeClaim` + `..Spec`: status phase Pending, volumeMode Filesystem.
fn pvc(obj: &mut Value) {
    if let Some(spec) = ensure_obj(obj, "spec") {
        pvc_spec(spec);
    }
    if let Some(status) = ensure_obj(obj, "status") {
        default_field(status, "phase", json!("Pending"));
        resource_list(status, "capacity");
        resource_list(status, "allocatedResources");
    }
}

fn persistent_volume(obj: &mut Value) {
    if let Some(spec) = ensure_obj(obj, "spec") {
        default_field(spec, "persistentVolumeReclaimPolicy", json!("Retain"));
        default_field(spec, "volumeMode", json!("Filesystem"));
        resource_list(spec, "capacity");
        with_obj(spec, "hostPath", |h| {
            if h.get("type").is_none_or(Value::is_null)
                && let Some(o) = h.as_object_mut()
            {
                o.insert("type".into(), json!(""));
            }
        });
    }
    if let Some(status) = ensure_obj(obj, "status") {
        default_field(status, "phase", json!("Pending"));
    }
}

/// `SetDefaults_NodeStatus`: allocatable defaults to capacity.
fn node(obj: &mut Value) {
    let Some(status) = obj.get_mut("status").filter(|s| s.is_object()) else { return };
    resource_list(status, "capacity");
    resource_list(status, "allocatable");
    if status.get("allocatable").is_none_or(Value::is_null)
        && let Some(capacity) = status.get("capacity").filter(|c| c.is_object()).cloned()
        && let Some(o) = status.as_object_mut()
    {
        o.insert("allocatable".into(), capacity);
    }
}

/// `SetDefaults_LimitRangeItem`: for `type: Container`, default ← max, defaultRequest ←
/// default, then defaultRequest ← min.
fn limit_range_item(item: &mut Value) {
    for key in ["max", "min", "default", "defaultRequest", "maxLimitRequestRatio"] {
        resource_list(item, key);
    }
    if item.get("type").and_then(Value::as_str) != Some("Container") {
        return;
    }
    let get = |item: &Value, k: &str| item.get(k).and_then(Value::as_object).cloned().unwrap_or_default();
    let max = get(item, "max");
    let min = get(item, "min");
    let mut default = get(item, "default");
    for (k, v) in max {
        default.entry(k).or_insert(v);
    }
    let mut default_request = get(item, "defaultRequest");
    for (k, v) in default.iter().chain(min.iter()) {
        default_request.entry(k.clone()).or_insert_with(|| v.clone());
    }
    if let Some(o) = item.as_object_mut() {
        o.insert("default".into(), Value::Object(default));
        o.insert("defaultRequest".into(), Value::Object(default_request));
    }
}

// ---------------------------------------------------------------------------------------------
// apps, batch, networking
// ---------------------------------------------------------------------------------------------

fn deployment(obj: &mut Value) {
    let Some(spec) = ensure_obj(obj, "spec") else { return };
    default_field(spec, "replicas", json!(1));
    if let Some(strategy) = ensure_obj(spec, "strategy") {
        default_field(strategy, "type", json!("RollingUpdate"));
        if strategy.get("type").and_then(Value::as_str) == Some("RollingUpdate")
            && let Some(ru) = ensure_obj(strategy, "rollingUpdate")
        {
            default_field(ru, "maxUnavailable", json!("25%"));
            default_field(ru, "maxSurge", json!("25%"));
        }
    }
    default_field(spec, "revisionHistoryLimit", json!(10));
    default_field(spec, "progressDeadlineSeconds", json!(600));
    with_obj(spec, "template", pod_template);
}

fn daemon_set(obj: &mut Value) {
    let Some(spec) = ensure_obj(obj, "spec") else { return };
    if let Some(strategy) = ensure_obj(spec, "updateStrategy") {
        default_field(strategy, "type", json!("RollingUpdate"));
        if strategy.get("type").and_then(Value::as_str) == Some("RollingUpdate")
            && let Some(ru) = ensure_obj(strategy, "rollingUpdate")
        {
            default_field(ru, "maxUnavailable", json!(1));
            default_field(ru, "maxSurge", json!(0));
        }
    }
    default_field(spec, "revisionHistoryLimit", json!(10));
    with_obj(spec, "template", pod_template);
}

fn stateful_set(obj: &mut Value) {
    let Some(spec) = ensure_obj(obj, "spec") else { return };
    default_field(spec, "podManagementPolicy", json!("OrderedReady"));
    if let Some(strategy) = ensure_obj(spec, "updateStrategy") {
        if is_unset(strategy, "type") {
            default_field(strategy, "type", json!("RollingUpdate"));
            default_field(strategy, "rollingUpdate", json!({}));
        }
        if strategy.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
            with_obj(strategy, "rollingUpdate", |ru| default_field(ru, "partition", json!(0)));
        }
    }
    if let Some(policy) = ensure_obj(spec, "persistentVolumeClaimRetentionPolicy") {
        default_field(policy, "whenDeleted", json!("Retain"));
        default_field(policy, "whenScaled", json!("Retain"));
    }
    default_field(spec, "replicas", json!(1));
    default_field(spec, "revisionHistoryLimit", json!(10));
    with_obj(spec, "template", pod_template);
    for_each_item(spec, "volumeClaimTemplates", pvc);
}

/// `SetDefaults_Job` (1.33: backoffLimitPerIndex, podReplacementPolicy, podFailurePolicy).
fn job(obj: &mut Value) {
    let template_labels = obj
        .get("spec")
        .and_then(|s| s.get("template"))
        .and_then(|t| t.get("metadata"))
        .and_then(|m| m.get("labels"))
        .filter(|l| l.is_object())
        .cloned();
    if let Some(spec) = ensure_obj(obj, "spec") {
        if is_unset(spec, "completions") && is_unset(spec, "parallelism") {
            default_field(spec, "completions", json!(1));
        }
        default_field(spec, "parallelism", json!(1));
        let per_index = !is_unset(spec, "backoffLimitPerIndex");
        default_field(spec, "backoffLimit", json!(if per_index { i64::from(i32::MAX) } else { 6 }));
        default_field(spec, "completionMode", json!("NonIndexed"));
        default_field(spec, "suspend", json!(false));
        let has_pfp = spec.get("podFailurePolicy").is_some_and(Value::is_object);
        if has_pfp {
            with_obj(spec, "podFailurePolicy", |p| {
                for_each_item(p, "rules", |r| {
                    for_each_item(r, "onPodConditions", |c| default_field(c, "status", json!("True")))
                })
            });
        }
        default_field(spec, "podReplacementPolicy", json!(if has_pfp { "Failed" } else { "TerminatingOrFailed" }));
        with_obj(spec, "template", pod_template);
    }
    if let Some(labels) = template_labels
        && let Some(meta) = ensure_obj(obj, "metadata")
        && meta.get("labels").and_then(Value::as_object).is_none_or(Map::is_empty)
        && let Some(o) = meta.as_object_mut()
    {
        o.insert("labels".into(), labels);
    }
}

fn cron_job(obj: &mut Value) {
    let Some(spec) = ensure_obj(obj, "spec") else { return };
    default_field(spec, "concurrencyPolicy", json!("Allow"));
    default_field(spec, "suspend", json!(false));
    default_field(spec, "successfulJobsHistoryLimit", json!(3));
    default_field(spec, "failedJobsHistoryLimit", json!(1));
    with_obj(spec, "jobTemplate", |jt| with_obj(jt, "spec", |js| with_obj(js, "template", pod_template)));
}

/// `SetDefaults_NetworkPolicy` and `SetDefaults_NetworkPolicyPort`.
fn network_policy(obj: &mut Value) {
    let Some(spec) = ensure_obj(obj, "spec") else { return };
    for rules in ["ingress", "egress"] {
        for_each_item(spec, rules, |r| for_each_item(r, "ports", |p| default_field(p, "protocol", json!("TCP"))));
    }
    if spec.get("policyTypes").and_then(Value::as_array).is_none_or(Vec::is_empty) {
        let egress = spec.get("egress").and_then(Value::as_array).is_some_and(|e| !e.is_empty());
        let types = if egress { json!(["Ingress", "Egress"]) } else { json!(["Ingress"]) };
        if let Some(o) = spec.as_object_mut() {
            o.insert("policyTypes".into(), types);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Registry strategies on create
// ---------------------------------------------------------------------------------------------

/// What the registry strategies' `PrepareForCreate` (and the Job strategy's selector
/// generation) do to a new object, after defaulting:
/// - status reset (the client's status is ignored): `{}` for workloads, Pod `{phase: Pending,
///   qosClass}`, Namespace `{phase: Active}`, PVC `{phase: Pending}`, Service
///   `{loadBalancer: {}}`;
/// - `metadata.generation: 1` for kinds that track generation;
/// - Namespace: `spec.finalizers` gains `kubernetes`;
/// - Job (unless `manualSelector: true`): selector and template labels from `metadata.uid`
///   (set the uid first).
pub fn prepare_for_create(group: &str, kind: &str, obj: &mut Value) {
    if !obj.is_object() {
        return;
    }
    let generation = matches!(
        (group, kind),
        ("apps", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet")
            | ("batch", "Job" | "CronJob")
            | ("", "ReplicationController")
            | ("networking.k8s.io", "Ingress" | "NetworkPolicy" | "IngressClass")
            | ("policy", "PodDisruptionBudget")
            | ("discovery.k8s.io", "EndpointSlice")
            | ("apiextensions.k8s.io", "CustomResourceDefinition")
    );
    if generation && let Some(meta) = ensure_obj(obj, "metadata").and_then(Value::as_object_mut) {
        meta.insert("generation".into(), json!(1));
    }
    let status = match (group, kind) {
        ("apps", _) | ("batch", _) | ("", "ReplicationController") | ("policy", "PodDisruptionBudget") => {
            Some(json!({}))
        }
        ("networking.k8s.io", "Ingress") => Some(json!({"loadBalancer": {}})),
        ("", "Service") => Some(json!({"loadBalancer": {}})),
        ("", "PersistentVolumeClaim") => Some(json!({"phase": "Pending"})),
        ("", "Namespace") => Some(json!({"phase": "Active"})),
        ("", "Pod") => Some(json!({"phase": "Pending", "qosClass": pod_qos_class(obj)})),
        _ => None,
    };
    if let (Some(s), Some(o)) = (status, obj.as_object_mut()) {
        o.insert("status".into(), s);
    }
    match (group, kind) {
        ("", "Namespace") => {
            if let Some(spec) = ensure_obj(obj, "spec")
                && let Some(fins) = ensure_array(spec, "finalizers")
                && !fins.iter().any(|f| f == "kubernetes")
            {
                fins.push(json!("kubernetes"));
            }
        }
        ("batch", "Job") => job_generate_selector(obj),
        _ => {}
    }
}

fn ensure_array<'a>(v: &'a mut Value, key: &str) -> Option<&'a mut Vec<Value>> {
    let o = v.as_object_mut()?;
    let slot = o.entry(key.to_string()).or_insert_with(|| json!([]));
    if slot.is_null() {
        *slot = json!([]);
    }
    slot.as_array_mut()
}

/// The Job strategy's `generateSelector`.
fn job_generate_selector(obj: &mut Value) {
    let meta = obj.get("metadata");
    let uid = meta.and_then(|m| m.get("uid")).and_then(Value::as_str).unwrap_or_default().to_string();
    let name = meta.and_then(|m| m.get("name")).and_then(Value::as_str).unwrap_or_default().to_string();
    let Some(spec) = ensure_obj(obj, "spec") else { return };
    if spec.get("manualSelector").and_then(Value::as_bool) == Some(true) {
        return;
    }
    if let Some(template) = ensure_obj(spec, "template")
        && let Some(tmeta) = ensure_obj(template, "metadata")
        && let Some(labels) = ensure_obj(tmeta, "labels").and_then(Value::as_object_mut)
    {
        for key in ["job-name", "batch.kubernetes.io/job-name"] {
            labels.entry(key.to_string()).or_insert_with(|| json!(name));
        }
        for key in ["controller-uid", "batch.kubernetes.io/controller-uid"] {
            labels.entry(key.to_string()).or_insert_with(|| json!(uid));
        }
    }
    if let Some(selector) = ensure_obj(spec, "selector")
        && let Some(ml) = ensure_obj(selector, "matchLabels").and_then(Value::as_object_mut)
    {
        ml.entry("batch.kubernetes.io/controller-uid".to_string()).or_insert_with(|| json!(uid));
    }
}

/// `qos.GetPodQOS` (container-level resources; cpu and memory only): `BestEffort`,
/// `Guaranteed` or `Burstable`.
pub fn pod_qos_class(pod: &Value) -> &'static str {
    use crate::builtin::quantity::Quantity;
    use std::collections::BTreeMap;
    let mut requests: BTreeMap<String, Quantity> = BTreeMap::new();
    let mut limits: BTreeMap<String, Quantity> = BTreeMap::new();
    let mut guaranteed = true;
    let spec = pod.get("spec");
    let containers = ["initContainers", "containers"]
        .iter()
        .filter_map(|k| spec.and_then(|s| s.get(*k)).and_then(Value::as_array))
        .flatten();
    for c in containers {
        let res = c.get("resources");
        let mut limit_found = (false, false);
        for (which, map) in [("requests", &mut requests), ("limits", &mut limits)] {
            let Some(list) = res.and_then(|r| r.get(which)).and_then(Value::as_object) else { continue };
            for (name, v) in list {
                if name != "cpu" && name != "memory" {
                    continue;
                }
                let Ok(Some(q)) = parse_quantity_value(v) else { continue };
                if which == "limits" {
                    if name == "cpu" {
                        limit_found.0 = true;
                    } else {
                        limit_found.1 = true;
                    }
                }
                if q.sign() > 0 {
                    let total = match map.get(name) {
                        Some(prev) => prev.add(&q),
                        None => q,
                    };
                    map.insert(name.clone(), total);
                }
            }
        }
        if limit_found != (true, true) {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return "BestEffort";
    }
    if guaranteed {
        for (name, req) in &requests {
            if limits.get(name) != Some(req) {
                guaranteed = false;
            }
        }
    }
    if guaranteed && requests.len() == limits.len() { "Guaranteed" } else { "Burstable" }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn defaulted(group: &str, kind: &str, v: Value) -> Value {
        let mut v = v;
        apply_defaults(group, kind, &mut v);
        v
    }

    #[test]
    fn pod_defaults_match_the_real_server() {
        let pod = defaulted(
            "",
            "Pod",
            json!({"metadata": {"name": "p"}, "spec": {"containers": [
                {"name": "a", "image": "nginx", "ports": [{"containerPort": 80}],
                 "env": [{"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                 "resources": {"limits": {"cpu": "0.5", "memory": "1024Mi"}},
                 "livenessProbe": {"httpGet": {"port": 80}}},
                {"name": "b", "image": "nginx:1.25"},
                {"name": "c", "image": "nginx@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
                {"name": "d", "image": "registry.local:5000/team/app:latest"}
            ], "volumes": [{"name": "v"}, {"name": "cm", "configMap": {"name": "x"}}, {"name": "s", "secret": {"secretName": "x"}}]}}),
        );
        let spec = &pod["spec"];
        assert_eq!(spec["dnsPolicy"], "ClusterFirst");
        assert_eq!(spec["restartPolicy"], "Always");
        assert_eq!(spec["schedulerName"], "default-scheduler");
        assert_eq!(spec["securityContext"], json!({}));
        assert_eq!(spec["terminationGracePeriodSeconds"], 30);
        assert_eq!(spec["enableServiceLinks"], true);
        let a = &spec["containers"][0];
        assert_eq!(a["imagePullPolicy"], "Always");
        assert_eq!(a["terminationMessagePath"], "/dev/termination-log");
        assert_eq!(a["terminationMessagePolicy"], "File");
        assert_eq!(a["ports"][0]["protocol"], "TCP");
        assert_eq!(a["env"][0]["valueFrom"]["fieldRef"]["apiVersion"], "v1");
        assert_eq!(a["resources"]["limits"], json!({"cpu": "500m", "memory": "1Gi"}));
        assert_eq!(a["resources"]["requests"], json!({"cpu": "500m", "memory": "1Gi"}));
        assert_eq!(
            a["livenessProbe"],
            json!({"httpGet": {"port": 80, "path": "/", "scheme": "HTTP"}, "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3})
        );
        assert_eq!(spec["containers"][1]["imagePullPolicy"], "IfNotPresent");
        assert_eq!(spec["containers"][2]["imagePullPolicy"], "IfNotPresent");
        assert_eq!(spec["containers"][3]["imagePullPolicy"], "Always");
        assert_eq!(spec["volumes"][0]["emptyDir"], json!({}));
        assert_eq!(spec["volumes"][1]["configMap"]["defaultMode"], 420);
        assert_eq!(spec["volumes"][2]["secret"]["defaultMode"], 420);
    }

    #[test]
    fn image_tags() {
        assert_eq!(image_tag("nginx").as_deref(), Some("latest"));
        assert_eq!(image_tag("nginx:1.2").as_deref(), Some("1.2"));
        assert_eq!(image_tag("localhost:5000/nginx").as_deref(), Some("latest"));
        assert_eq!(image_tag("NGINX"), None);
        assert_eq!(image_tag(""), None);
        assert_eq!(
            image_tag("nginx:latest@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
                .as_deref(),
            Some("latest")
        );
    }

    #[test]
    fn templates_get_pod_spec_defaults_but_not_pod_only_ones() {
        let d = defaulted(
            "apps",
            "Deployment",
            json!({"spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}},
                   "spec": {"containers": [{"name": "a", "image": "x:1", "resources": {"limits": {"cpu": "1"}}}]}}}}),
        );
        let spec = &d["spec"];
        assert_eq!(spec["replicas"], 1);
        assert_eq!(
            spec["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
        );
        assert_eq!(spec["revisionHistoryLimit"], 10);
        assert_eq!(spec["progressDeadlineSeconds"], 600);
        let pod = &spec["template"]["spec"];
        assert_eq!(pod["restartPolicy"], "Always");
        assert!(pod.get("enableServiceLinks").is_none());
        assert!(pod["containers"][0]["resources"].get("requests").is_none());
        // Recreate keeps no rollingUpdate.
        let d = defaulted("apps", "Deployment", json!({"spec": {"strategy": {"type": "Recreate"}}}));
        assert_eq!(d["spec"]["strategy"], json!({"type": "Recreate"}));
    }

    #[test]
    fn statefulset_daemonset_job_cronjob() {
        let s = defaulted(
            "apps",
            "StatefulSet",
            json!({"spec": {"volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"resources": {"requests": {"storage": "1Gi"}}}}]}}),
        );
        let spec = &s["spec"];
        assert_eq!(spec["podManagementPolicy"], "OrderedReady");
        assert_eq!(spec["updateStrategy"], json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}));
        assert_eq!(
            spec["persistentVolumeClaimRetentionPolicy"],
            json!({"whenDeleted": "Retain", "whenScaled": "Retain"})
        );
        assert_eq!(spec["replicas"], 1);
        assert_eq!(spec["revisionHistoryLimit"], 10);
        assert_eq!(spec["volumeClaimTemplates"][0]["spec"]["volumeMode"], "Filesystem");
        assert_eq!(spec["volumeClaimTemplates"][0]["status"], json!({"phase": "Pending"}));
        let ds = defaulted("apps", "DaemonSet", json!({"spec": {}}));
        assert_eq!(
            ds["spec"]["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
        );
        let j =
            defaulted("batch", "Job", json!({"spec": {"template": {"metadata": {"labels": {"x": "y"}}, "spec": {}}}}));
        assert_eq!(j["spec"]["completions"], 1);
        assert_eq!(j["spec"]["parallelism"], 1);
        assert_eq!(j["spec"]["backoffLimit"], 6);
        assert_eq!(j["spec"]["completionMode"], "NonIndexed");
        assert_eq!(j["spec"]["suspend"], false);
        assert_eq!(j["spec"]["podReplacementPolicy"], "TerminatingOrFailed");
        assert_eq!(j["metadata"]["labels"], json!({"x": "y"}));
        let j = defaulted("batch", "Job", json!({"spec": {"parallelism": 3}}));
        assert!(j["spec"].get("completions").is_none());
        let c = defaulted("batch", "CronJob", json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {}}}}}}));
        assert_eq!(c["spec"]["concurrencyPolicy"], "Allow");
        assert_eq!(c["spec"]["successfulJobsHistoryLimit"], 3);
        assert_eq!(c["spec"]["failedJobsHistoryLimit"], 1);
        assert_eq!(c["spec"]["jobTemplate"]["spec"]["template"]["spec"]["dnsPolicy"], "ClusterFirst");
        assert!(c["spec"]["jobTemplate"]["spec"].get("backoffLimit").is_none());
    }

    #[test]
    fn service_secret_namespace_networkpolicy_limitrange() {
        let s = defaulted(
            "",
            "Service",
            json!({"spec": {"selector": {"a": "b"}, "ports": [{"port": 80}, {"port": 443, "targetPort": "https"}]}}),
        );
        assert_eq!(
            s["spec"],
            json!({"selector": {"a": "b"}, "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}, {"port": 443, "targetPort": "https", "protocol": "TCP"}],
                   "sessionAffinity": "None", "type": "ClusterIP", "internalTrafficPolicy": "Cluster"})
        );
        let lb = defaulted("", "Service", json!({"spec": {"type": "LoadBalancer", "sessionAffinity": "ClientIP"}}));
        assert_eq!(lb["spec"]["externalTrafficPolicy"], "Cluster");
        assert_eq!(lb["spec"]["allocateLoadBalancerNodePorts"], true);
        assert_eq!(lb["spec"]["sessionAffinityConfig"]["clientIP"]["timeoutSeconds"], 10800);
        let en = defaulted("", "Service", json!({"spec": {"type": "ExternalName", "externalName": "x.com"}}));
        assert!(en["spec"].get("internalTrafficPolicy").is_none() && en["spec"].get("ipFamilies").is_none());
        let sec = defaulted("", "Secret", json!({"data": {"a": "eA=="}, "stringData": {"b": "hi", "a": "y"}}));
        assert_eq!(sec, json!({"data": {"a": "eQ==", "b": "aGk="}, "type": "Opaque"}));
        let ns = defaulted("", "Namespace", json!({"metadata": {"name": "dev"}}));
        assert_eq!(ns["metadata"]["labels"]["kubernetes.io/metadata.name"], "dev");
        assert_eq!(ns["status"]["phase"], "Active");
        let np =
            defaulted("networking.k8s.io", "NetworkPolicy", json!({"spec": {"egress": [{"ports": [{"port": 53}]}]}}));
        assert_eq!(np["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
        assert_eq!(np["spec"]["egress"][0]["ports"][0]["protocol"], "TCP");
        let np = defaulted("networking.k8s.io", "NetworkPolicy", json!({"spec": {"podSelector": {}}}));
        assert_eq!(np["spec"]["policyTypes"], json!(["Ingress"]));
        let lr = defaulted(
            "",
            "LimitRange",
            json!({"spec": {"limits": [{"type": "Container", "max": {"cpu": "2"}, "min": {"memory": "64Mi"}}]}}),
        );
        assert_eq!(lr["spec"]["limits"][0]["default"], json!({"cpu": "2"}));
        assert_eq!(lr["spec"]["limits"][0]["defaultRequest"], json!({"cpu": "2", "memory": "64Mi"}));
        let rb = defaulted(
            "rbac.authorization.k8s.io",
            "RoleBinding",
            json!({"roleRef": {"kind": "Role", "name": "r"}, "subjects": [{"kind": "User", "name": "u"}, {"kind": "ServiceAccount", "name": "s"}]}),
        );
        assert_eq!(rb["roleRef"]["apiGroup"], "rbac.authorization.k8s.io");
        assert_eq!(rb["subjects"][0]["apiGroup"], "rbac.authorization.k8s.io");
        assert_eq!(rb["subjects"][1]["apiGroup"], "");
        let cm = defaulted("", "ConfigMap", json!({"data": {"a": "b"}}));
        assert_eq!(cm, json!({"data": {"a": "b"}}));
        let pvc =
            defaulted("", "PersistentVolumeClaim", json!({"spec": {"resources": {"requests": {"storage": "1.5Gi"}}}}));
        assert_eq!(pvc["spec"]["volumeMode"], "Filesystem");
        assert_eq!(pvc["spec"]["resources"]["requests"]["storage"], "1536Mi");
        assert_eq!(pvc["status"]["phase"], "Pending");
    }

    #[test]
    fn prepare_for_create_effects() {
        let mut pod = defaulted(
            "",
            "Pod",
            json!({"spec": {"containers": [{"name": "a", "image": "x", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}, "status": {"phase": "Running"}}),
        );
        prepare_for_create("", "Pod", &mut pod);
        assert_eq!(pod["status"], json!({"phase": "Pending", "qosClass": "Guaranteed"}));
        assert_eq!(pod_qos_class(&json!({"spec": {"containers": [{"name": "a"}]}})), "BestEffort");
        assert_eq!(
            pod_qos_class(&json!({"spec": {"containers": [{"resources": {"requests": {"cpu": "1"}}}]}})),
            "Burstable"
        );
        let mut ns = json!({"metadata": {"name": "x"}, "spec": {"finalizers": ["a/b"]}});
        prepare_for_create("", "Namespace", &mut ns);
        assert_eq!(ns["spec"]["finalizers"], json!(["a/b", "kubernetes"]));
        let mut d = json!({"metadata": {"name": "d"}, "spec": {}, "status": {"replicas": 3}});
        prepare_for_create("apps", "Deployment", &mut d);
        assert_eq!(d["status"], json!({}));
        assert_eq!(d["metadata"]["generation"], 1);
        let mut j = json!({"metadata": {"name": "j", "uid": "u-1"}, "spec": {"template": {"spec": {}}}});
        prepare_for_create("batch", "Job", &mut j);
        assert_eq!(j["spec"]["selector"], json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}}));
        assert_eq!(j["spec"]["template"]["metadata"]["labels"]["batch.kubernetes.io/job-name"], "j");
        assert_eq!(j["spec"]["template"]["metadata"]["labels"]["controller-uid"], "u-1");
    }

    #[test]
    fn defaulting_is_idempotent() {
        let first = defaulted(
            "apps",
            "StatefulSet",
            json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "x"}]}}}}),
        );
        let second = defaulted("apps", "StatefulSet", first.clone());
        assert_eq!(first, second);
    }

    proptest! {
        #[test]
        fn never_panics_on_odd_shapes(spec in prop_oneof![
            Just(json!(null)), Just(json!(1)), Just(json!("x")), Just(json!([])),
            Just(json!({"containers": "x"})), Just(json!({"containers": [1, null, {"image": 3, "ports": [7]}]})),
            Just(json!({"template": {"spec": {"volumes": [{"name": 1, "secret": 2}]}}})),
        ], image in "\\PC{0,30}") {
            for (g, k) in [("", "Pod"), ("apps", "Deployment"), ("", "Service"), ("batch", "Job"), ("", "LimitRange"),
                           ("networking.k8s.io", "NetworkPolicy"), ("", "Secret"), ("", "Namespace")] {
                let mut obj = json!({"metadata": spec.clone(), "spec": spec.clone(), "status": spec.clone(), "stringData": spec.clone()});
                apply_defaults(g, k, &mut obj);
                prepare_for_create(g, k, &mut obj);
            }
            let _ = image_tag(&image);
        }
    }
}
