//! Namespaces: a live namespace gets the `kube-root-ca.crt` ConfigMap and the `default`
//! ServiceAccount (root-ca-cert-publisher and serviceaccounts controllers); a deleted one has its
//! content deleted, waiting on finalizers, with the real deletion conditions in its status, and
//! goes away once empty (the namespace controller).

use super::{Controller, Key, def};
use crate::cluster::Cluster;
use crate::conditions::{self, Style};
use crate::meta;
use crate::ops::{self, DeleteOpts, WriteOpts};
use crate::store::{Change, EventType};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

const MANAGER: &str = "kube-controller-manager";

pub struct NamespaceController;

fn ns_key(name: &str) -> Key {
    Key::new("", "namespaces", "", name)
}

/// Make sure a live namespace has its root CA ConfigMap and default ServiceAccount.
pub fn seed(cl: &Cluster, ns: &str) {
    if let Some(cm) = def(cl, "", "configmaps")
        && cl.store.get(&cm.storage, ns, "kube-root-ca.crt").is_none()
    {
        let obj = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "kube-root-ca.crt", "namespace": ns,
                "annotations": {"kubernetes.io/description": "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."}},
            "data": {"ca.crt": cl.creds.ca_cert_pem},
        });
        let _ = ops::create(cl, &cm, ns, obj, &WriteOpts::system("kube-controller-manager"));
    }
    if let Some(sa) = def(cl, "", "serviceaccounts")
        && cl.store.get(&sa.storage, ns, "default").is_none()
    {
        let obj =
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": ns}});
        let _ = ops::create(cl, &sa, ns, obj, &WriteOpts::system("kube-controller-manager"));
    }
}

/// Delete what a terminating namespace holds, record what remains in its conditions, and
/// finalize it when it is empty.
fn finish(cl: &Cluster, ns_obj: &Value) {
    let ns = meta::name(ns_obj);
    let mut remaining: BTreeMap<String, usize> = BTreeMap::new();
    let mut by_finalizer: BTreeMap<String, usize> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for d in cl.registry.all() {
        if !d.namespaced || !seen.insert(d.storage.clone()) {
            continue;
        }
        let (items, _) = cl.store.list(&d.storage, Some(ns));
        if items.is_empty() {
            continue;
        }
        for o in &items {
            if !meta::is_deleting(o) {
                let opts = DeleteOpts { propagation_policy: Some("Background".into()), ..Default::default() };
                let _ = ops::delete(cl, &d, ns, meta::name(o), &opts);
            }
        }
        // Count what is still there after this pass.
        let (left, _) = cl.store.list(&d.storage, Some(ns));
        if !left.is_empty() {
            // Upstream prints "%s.%s" of resource and group: "configmaps." for the core group.
            remaining.insert(format!("{}.{}", d.storage.resource, d.storage.group), left.len());
            for o in &left {
                for f in meta::finalizers(o) {
                    *by_finalizer.entry(f).or_default() += 1;
                }
            }
        }
    }
    let Some(nsdef) = def(cl, "", "namespaces") else { return };
    let now = meta::now();
    let mut conds = conditions::of(ns_obj.get("status"));
    let plain = Style::Plain;
    conditions::set(
        &mut conds,
        plain,
        "NamespaceDeletionDiscoveryFailure",
        "False",
        "ResourcesDiscovered",
        "All resources successfully discovered",
        &now,
    );
    conditions::set(
        &mut conds,
        plain,
        "NamespaceDeletionGroupVersionParsingFailure",
        "False",
        "ParsedGroupVersions",
        "All legacy kube types successfully parsed",
        &now,
    );
    conditions::set(
        &mut conds,
        plain,
        "NamespaceDeletionContentFailure",
        "False",
        "ContentDeleted",
        "All content successfully deleted, may be waiting on finalization",
        &now,
    );
    if remaining.is_empty() {
        conditions::set(
            &mut conds,
            plain,
            "NamespaceContentRemaining",
            "False",
            "ContentRemoved",
            "All content successfully removed",
            &now,
        );
    } else {
        let parts: Vec<String> = remaining.iter().map(|(gr, n)| format!("{gr} has {n} resource instances")).collect();
        conditions::set(
            &mut conds,
            plain,
            "NamespaceContentRemaining",
            "True",
            "SomeResourcesRemain",
            &format!("Some resources are remaining: {}", parts.join(", ")),
            &now,
        );
    }
    if by_finalizer.is_empty() {
        conditions::set(
            &mut conds,
            plain,
            "NamespaceFinalizersRemaining",
            "False",
            "ContentHasNoFinalizers",
            "All content-preserving finalizers finished",
            &now,
        );
    } else {
        let parts: Vec<String> = by_finalizer.iter().map(|(f, n)| format!("{f} in {n} resource instances")).collect();
        conditions::set(
            &mut conds,
            plain,
            "NamespaceFinalizersRemaining",
            "True",
            "SomeFinalizersRemain",
            &format!("Some content in the namespace has finalizers remaining: {}", parts.join(", ")),
            &now,
        );
    }
    let mut status = ns_obj.get("status").cloned().unwrap_or_else(|| json!({}));
    if let Some(m) = status.as_object_mut() {
        m.insert("phase".into(), "Terminating".into());
        m.insert("conditions".into(), Value::Array(conds));
    }
    super::write_status(cl, &nsdef, ns_obj, status, MANAGER);
    if !remaining.is_empty() {
        return;
    }
    let Some(cur) = cl.store.get(&nsdef.storage, "", ns) else { return };
    let fins: Vec<Value> = cur
        .pointer("/spec/finalizers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter(|f| *f != "kubernetes").cloned().collect())
        .unwrap_or_default();
    let body = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": ns, "resourceVersion": crate::store::object_rv(&cur).to_string()},
        "spec": {"finalizers": fins}});
    let opts = WriteOpts { subresource: Some("finalize".into()), ..WriteOpts::system(MANAGER) };
    let _ = ops::update(cl, &nsdef, "", ns, body, &opts);
}

impl Controller for NamespaceController {
    fn keys_for(&self, cl: &Cluster, c: &Change, out: &mut Vec<Key>) {
        if c.gr.group.is_empty() && c.gr.resource == "namespaces" {
            if c.kind != EventType::Deleted {
                out.push(ns_key(&c.name));
            }
            return;
        }
        if c.namespace.is_empty() {
            return;
        }
        let seeded = c.gr.group.is_empty()
            && ((c.gr.resource == "configmaps" && c.name == "kube-root-ca.crt")
                || (c.gr.resource == "serviceaccounts" && c.name == "default"));
        let ns = ns_key(&c.namespace);
        match super::get(cl, &ns) {
            Some(n) if meta::is_deleting(&n) => out.push(ns),
            Some(_) if seeded && c.kind == EventType::Deleted => out.push(ns),
            _ => {}
        }
    }

    fn all_keys(&self, cl: &Cluster, out: &mut Vec<Key>) {
        let (all, _) = cl.store.list(&crate::registry::GroupResource::new("", "namespaces"), None);
        out.extend(all.iter().map(|n| ns_key(meta::name(n))));
    }

    fn reconcile(&self, cl: &Cluster, key: &Key) -> Option<Duration> {
        let ns = super::get(cl, key)?;
        if meta::is_deleting(&ns) {
            finish(cl, &ns);
        } else {
            seed(cl, &key.name);
        }
        None
    }
}
