//! What every cluster has from its first moment: the system namespaces and the bootstrap RBAC
//! roles (`cluster-admin`, `admin`, `edit`, `view`) with the binding of `system:masters`.
//! Created only when missing, so a restarted cluster keeps what users changed.

use crate::cluster::Cluster;
use crate::ops::{self, WriteOpts};
use serde_json::{Value, json};

const MANAGER: &str = "kube-apiserver";

fn ensure(cl: &Cluster, group: &str, plural: &str, obj: Value) {
    let Some(def) = cl.registry.get(group, "v1", plural) else { return };
    let name = crate::meta::name(&obj).to_string();
    if cl.store.get(&def.storage, "", &name).is_none()
        && let Err(e) = ops::create(cl, &def, "", obj, &WriteOpts::system(MANAGER))
    {
        tracing::warn!(%name, error = %e.message, "bootstrap object not created");
    }
}

fn bootstrap_meta(name: &str, aggregate_to: &[&str]) -> Value {
    let mut labels = serde_json::Map::new();
    labels.insert("kubernetes.io/bootstrapping".into(), "rbac-defaults".into());
    for a in aggregate_to {
        labels.insert(format!("rbac.authorization.k8s.io/aggregate-to-{a}"), "true".into());
    }
    json!({"name": name, "labels": labels, "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}})
}

const READ: [&str; 3] = ["get", "list", "watch"];
const WRITE: [&str; 8] = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];

fn view_rules() -> Value {
    json!([
        {"apiGroups": [""], "resources": ["configmaps", "endpoints", "persistentvolumeclaims", "persistentvolumeclaims/status", "pods", "replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts", "services", "services/status"], "verbs": READ},
        {"apiGroups": [""], "resources": ["bindings", "events", "limitranges", "namespaces/status", "pods/log", "pods/status", "replicationcontrollers/status", "resourcequotas", "resourcequotas/status"], "verbs": READ},
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": READ},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": READ},
        {"apiGroups": ["apps"], "resources": ["controllerrevisions", "daemonsets", "daemonsets/status", "deployments", "deployments/scale", "deployments/status", "replicasets", "replicasets/scale", "replicasets/status", "statefulsets", "statefulsets/scale", "statefulsets/status"], "verbs": READ},
        {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers", "horizontalpodautoscalers/status"], "verbs": READ},
        {"apiGroups": ["batch"], "resources": ["cronjobs", "cronjobs/status", "jobs", "jobs/status"], "verbs": READ},
        {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets", "poddisruptionbudgets/status"], "verbs": READ},
        {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses", "ingresses/status", "networkpolicies"], "verbs": READ},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": READ},
    ])
}

fn edit_rules() -> Value {
    let mut rules = view_rules().as_array().cloned().unwrap_or_default();
    rules.extend(
        json!([
            {"apiGroups": [""], "resources": ["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"], "verbs": ["create", "delete", "deletecollection", "patch", "update"]},
            {"apiGroups": [""], "resources": ["configmaps", "endpoints", "persistentvolumeclaims", "replicationcontrollers", "replicationcontrollers/scale", "secrets", "serviceaccounts", "services", "services/proxy"], "verbs": ["create", "delete", "deletecollection", "patch", "update"]},
            {"apiGroups": [""], "resources": ["secrets"], "verbs": READ},
            {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]},
            {"apiGroups": ["apps"], "resources": ["daemonsets", "deployments", "deployments/rollback", "deployments/scale", "replicasets", "replicasets/scale", "statefulsets", "statefulsets/scale"], "verbs": ["create", "delete", "deletecollection", "patch", "update"]},
            {"apiGroups": ["batch"], "resources": ["cronjobs", "jobs"], "verbs": ["create", "delete", "deletecollection", "patch", "update"]},
            {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses", "networkpolicies"], "verbs": ["create", "delete", "deletecollection", "patch", "update"]},
            {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["create", "delete", "deletecollection", "patch", "update"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": WRITE},
        ])
        .as_array()
        .cloned()
        .unwrap_or_default(),
    );
    Value::Array(rules)
}

fn admin_rules() -> Value {
    let mut rules = edit_rules().as_array().cloned().unwrap_or_default();
    rules.extend(
        json!([
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["rolebindings", "roles"], "verbs": WRITE},
            {"apiGroups": ["authorization.k8s.io"], "resources": ["localsubjectaccessreviews"], "verbs": ["create"]},
        ])
        .as_array()
        .cloned()
        .unwrap_or_default(),
    );
    Value::Array(rules)
}

/// Create what is missing.
pub fn run(cl: &Cluster) {
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        ensure(cl, "", "namespaces", json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
    }
    let rbac = "rbac.authorization.k8s.io";
    ensure(
        cl,
        rbac,
        "clusterroles",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": bootstrap_meta("cluster-admin", &[]),
            "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}, {"nonResourceURLs": ["*"], "verbs": ["*"]}]}),
    );
    for (name, rules, agg) in
        [("admin", admin_rules(), "admin"), ("edit", edit_rules(), "edit"), ("view", view_rules(), "view")]
    {
        let mut meta = bootstrap_meta(
            name,
            match name {
                "edit" => &["admin"][..],
                "view" => &["edit"][..],
                _ => &[][..],
            },
        );
        if let Some(m) = meta.as_object_mut() {
            m.insert("name".into(), name.into());
        }
        ensure(
            cl,
            rbac,
            "clusterroles",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta,
                "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {format!("rbac.authorization.k8s.io/aggregate-to-{agg}"): "true"}}]},
                "rules": rules}),
        );
    }
    ensure(
        cl,
        rbac,
        "clusterrolebindings",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": bootstrap_meta("cluster-admin", &[]),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:masters"}]}),
    );
    for obj in crate::auth::rbac::bootstrap_policy() {
        let plural = if obj.get("kind").and_then(Value::as_str) == Some("ClusterRole") {
            "clusterroles"
        } else {
            "clusterrolebindings"
        };
        ensure(cl, rbac, plural, obj);
    }
    nodes(cl);
    kubernetes_service(cl);
    // CRDs stored before a restart serve their resources again.
    if let Some(crd) = cl.registry.get("apiextensions.k8s.io", "v1", "customresourcedefinitions") {
        let (crds, _) = cl.store.list(&crd.storage, None);
        for c in crds {
            crate::hooks::after_write(cl, &crd, &c, None);
        }
    }
}

/// The simulated nodes: `devcluster-node-N` with an InternalIP (10.0.0.N) and an ExternalIP
/// (203.0.113.N, a documentation range), Ready, with the usual labels and capacity.
fn nodes(cl: &Cluster) {
    let now = crate::meta::now();
    for i in 1..=cl.options.nodes {
        let name = format!("devcluster-node-{i}");
        let cond = |t: &str, s: &str, reason: &str, msg: &str| json!({"type": t, "status": s, "lastHeartbeatTime": now, "lastTransitionTime": now, "reason": reason, "message": msg});
        ensure(
            cl,
            "",
            "nodes",
            json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {
                    "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                    "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
                    "node.kubernetes.io/instance-type": "devcluster"}},
                "spec": {"podCIDR": format!("10.244.{}.0/24", i - 1), "podCIDRs": [format!("10.244.{}.0/24", i - 1)]},
            }),
        );
        // Creation drops status (it is a subresource): write it as the kubelet would.
        if let Some(ndef) = cl.registry.get("", "v1", "nodes")
            && let Some(node) = cl.store.get(&ndef.storage, "", &name)
            && node.get("status").and_then(|s| s.get("addresses")).is_none()
        {
            let status = json!({
                "capacity": {"cpu": "8", "memory": "32Gi", "pods": "250", "ephemeral-storage": "100Gi"},
                "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "250", "ephemeral-storage": "100Gi"},
                "conditions": [
                    cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                    cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                    cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                    cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
                ],
                "addresses": [
                    {"type": "InternalIP", "address": format!("10.0.0.{i}")},
                    {"type": "ExternalIP", "address": format!("203.0.113.{i}")},
                    {"type": "Hostname", "address": name},
                ],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "nodeInfo": {"machineID": crate::meta::new_uid().replace('-', ""), "systemUUID": crate::meta::new_uid(), "bootID": crate::meta::new_uid(),
                    "kernelVersion": "6.1.0-devcluster", "osImage": "devcluster (simulated node)", "containerRuntimeVersion": "devcluster://1.0.0",
                    "kubeletVersion": "v1.33.0", "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"},
            });
            crate::client::write_status(cl, &ndef, &node, status, "kubelet");
        }
    }
}

/// The `kubernetes` Service in `default` (ClusterIP 10.96.0.1, port 443) with Endpoints and an
/// EndpointSlice naming the API server's own address, as the apiserver maintains them.
fn kubernetes_service(cl: &Cluster) {
    let url = cl.server_url();
    let hostport = url.trim_start_matches("https://");
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) => (h.trim_start_matches('[').trim_end_matches(']').to_string(), p.parse::<i64>().unwrap_or(6443)),
        None => ("127.0.0.1".to_string(), 6443),
    };
    let host = if host == "0.0.0.0" || host == "::" { "127.0.0.1".to_string() } else { host };
    let labels = json!({"component": "apiserver", "provider": "kubernetes"});
    if let Some(sdef) = cl.registry.get("", "v1", "services")
        && cl.store.get(&sdef.storage, "default", "kubernetes").is_none()
    {
        let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kubernetes", "namespace": "default", "labels": labels},
            "spec": {"clusterIP": "10.96.0.1", "clusterIPs": ["10.96.0.1"], "type": "ClusterIP", "sessionAffinity": "None",
                "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}]}});
        let _ = ops::create(cl, &sdef, "default", svc, &WriteOpts::system(MANAGER));
    }
    // The endpoints follow the address the server listens on now (it may change across restarts).
    if let Some(edef) = cl.registry.get("", "v1", "endpoints") {
        let ep = json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "kubernetes", "namespace": "default", "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
            "subsets": [{"addresses": [{"ip": host}], "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}]});
        upsert(cl, &edef, "default", "kubernetes", ep);
    }
    if let Some(sdef) = cl.registry.get("discovery.k8s.io", "v1", "endpointslices") {
        let slice = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "kubernetes", "namespace": "default", "labels": {"kubernetes.io/service-name": "kubernetes"}},
            "addressType": if host.contains(':') { "IPv6" } else { "IPv4" },
            "endpoints": [{"addresses": [host], "conditions": {"ready": true}}],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}]});
        upsert(cl, &sdef, "default", "kubernetes", slice);
    }
}

fn upsert(cl: &Cluster, def: &crate::registry::ResourceDef, ns: &str, name: &str, obj: Value) {
    match cl.store.get(&def.storage, ns, name) {
        None => {
            let _ = ops::create(cl, def, ns, obj, &WriteOpts::system(MANAGER));
        }
        Some(cur) => {
            let mut next = (*cur).clone();
            if let (Some(m), Some(o)) = (next.as_object_mut(), obj.as_object()) {
                for (k, v) in o {
                    if k != "metadata" {
                        m.insert(k.clone(), v.clone());
                    }
                }
            }
            crate::client::write_object(cl, def, &cur, next, MANAGER);
        }
    }
}
