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
    // CRDs stored before a restart serve their resources again.
    if let Some(crd) = cl.registry.get("apiextensions.k8s.io", "v1", "customresourcedefinitions") {
        let (crds, _) = cl.store.list(&crd.storage, None);
        for c in crds {
            crate::hooks::after_write(cl, &crd, &c, None);
        }
    }
}
