//! The cluster's own controllers, clients of the store through its change feed as
//! kube-controller-manager is a client of the apiserver:
//! - namespaces: every namespace gets the `kube-root-ca.crt` ConfigMap and the `default`
//!   ServiceAccount; a deleted namespace has its content deleted (waiting for finalizers) and then
//!   goes away;
//! - CRD cleanup: a deleted CRD has its custom resources deleted, then goes away.

use crate::cluster::Cluster;
use crate::meta;
use crate::ops::{self, DeleteOpts, WriteOpts};
use crate::registry::{GroupResource, ResourceDef};
use crate::store::StoreError;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::sync::Arc;
use tokio::sync::watch;

const MANAGER: &str = "kube-controller-manager";

fn def(cl: &Cluster, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceDef>> {
    cl.registry.get(group, version, plural)
}

fn namespaces_gr() -> GroupResource {
    GroupResource::new("", "namespaces")
}

/// Make sure a live namespace has its root CA ConfigMap and default ServiceAccount.
fn seed_namespace(cl: &Cluster, ns: &str) {
    if let Some(cm) = def(cl, "", "v1", "configmaps")
        && cl.store.get(&cm.storage, ns, "kube-root-ca.crt").is_none()
    {
        let obj = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "kube-root-ca.crt", "namespace": ns,
                "annotations": {"kubernetes.io/description": "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."}},
            "data": {"ca.crt": cl.creds.ca_cert_pem},
        });
        let _ = ops::create(cl, &cm, ns, obj, &WriteOpts::system(MANAGER));
    }
    if let Some(sa) = def(cl, "", "v1", "serviceaccounts")
        && cl.store.get(&sa.storage, ns, "default").is_none()
    {
        let obj =
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": ns}});
        let _ = ops::create(cl, &sa, ns, obj, &WriteOpts::system(MANAGER));
    }
}

/// Delete what a terminating namespace holds; when it is empty, finalize it.
fn finish_namespace(cl: &Cluster, ns: &str) {
    let mut remaining = 0usize;
    let mut seen = BTreeSet::new();
    for d in cl.registry.all() {
        if !d.namespaced || !seen.insert(d.storage.clone()) {
            continue;
        }
        let (items, _) = cl.store.list(&d.storage, Some(ns));
        for o in items {
            remaining += 1;
            if !meta::is_deleting(&o) {
                let _ = ops::delete(cl, &d, ns, meta::name(&o), &DeleteOpts::default());
            }
        }
    }
    if remaining > 0 {
        return;
    }
    let Some(nsdef) = def(cl, "", "v1", "namespaces") else { return };
    let Some(cur) = cl.store.get(&nsdef.storage, "", ns) else { return };
    let fins: Vec<Value> = cur
        .pointer("/spec/finalizers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter(|f| *f != "kubernetes").cloned().collect())
        .unwrap_or_default();
    let mut body =
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}, "spec": {"finalizers": fins}});
    if let Some(m) = body.get_mut("metadata").and_then(Value::as_object_mut) {
        m.insert("resourceVersion".into(), crate::store::object_rv(&cur).to_string().into());
    }
    let opts = WriteOpts { subresource: Some("finalize".into()), ..WriteOpts::system(MANAGER) };
    let _ = ops::update(cl, &nsdef, "", ns, body, &opts);
}

/// Delete the custom resources of a deleting CRD; when none remain, remove its cleanup finalizer.
fn finish_crd(cl: &Cluster, crd_name: &str) {
    let Some(crd_def) = def(cl, "apiextensions.k8s.io", "v1", "customresourcedefinitions") else { return };
    let Some(crd) = cl.store.get(&crd_def.storage, "", crd_name) else { return };
    let group = crd.pointer("/spec/group").and_then(Value::as_str).unwrap_or("");
    let plural = crd.pointer("/spec/names/plural").and_then(Value::as_str).unwrap_or("");
    let gr = GroupResource::new(group, plural);
    let (items, _) = cl.store.list(&gr, None);
    if !items.is_empty() {
        if let Some(d) = cl.registry.by_storage(&gr).into_iter().next() {
            for o in items {
                if !meta::is_deleting(&o) {
                    let _ = ops::delete(cl, &d, meta::namespace(&o), meta::name(&o), &DeleteOpts::default());
                }
            }
        }
        return;
    }
    let fins: Vec<String> = meta::finalizers(&crd).into_iter().filter(|f| f != crate::crd::CLEANUP_FINALIZER).collect();
    let patch = json!({"metadata": {"finalizers": fins, "resourceVersion": crate::store::object_rv(&crd).to_string()}});
    let body = serde_json::to_vec(&patch).unwrap_or_default();
    let _ = ops::patch(
        cl,
        &crd_def,
        "",
        crd_name,
        crate::request::BodyFormat::MergePatch,
        &body,
        &WriteOpts::system(MANAGER),
    );
}

/// One pass over everything: used at start and whenever the change feed was lost.
pub fn resync(cl: &Cluster) {
    let (namespaces, _) = cl.store.list(&namespaces_gr(), None);
    for n in namespaces {
        if meta::is_deleting(&n) {
            finish_namespace(cl, meta::name(&n));
        } else {
            seed_namespace(cl, meta::name(&n));
        }
    }
    let crds = GroupResource::new("apiextensions.k8s.io", "customresourcedefinitions");
    let (all, _) = cl.store.list(&crds, None);
    for c in all {
        if meta::is_deleting(&c) {
            finish_crd(cl, meta::name(&c));
        }
    }
}

/// Run the controllers until `stop` turns true.
pub async fn run(cl: Arc<Cluster>, mut stop: watch::Receiver<bool>) {
    let mut notify = cl.store.subscribe();
    let mut cursor = cl.store.current_rv();
    resync(&cl);
    loop {
        let changes = match cl.store.changes_since(cursor, 4096) {
            Ok(c) => c,
            Err(StoreError::Gone { .. }) => {
                cursor = cl.store.current_rv();
                resync(&cl);
                continue;
            }
            Err(_) => vec![],
        };
        if changes.is_empty() {
            tokio::select! {
                _ = stop.changed() => return,
                r = notify.changed() => if r.is_err() { return },
            }
            continue;
        }
        let mut dirty_ns: BTreeSet<String> = BTreeSet::new();
        let mut seed_ns: BTreeSet<String> = BTreeSet::new();
        let mut dirty_crds: BTreeSet<String> = BTreeSet::new();
        for c in &changes {
            cursor = c.rv;
            if c.gr == namespaces_gr() {
                if c.kind != crate::store::EventType::Deleted {
                    if meta::is_deleting(&c.object) {
                        dirty_ns.insert(c.name.clone());
                    } else {
                        seed_ns.insert(c.name.clone());
                    }
                }
                continue;
            }
            if !c.namespace.is_empty() {
                // Content of a terminating namespace changed (an object went away): look again.
                if let Some(n) = cl.store.get(&namespaces_gr(), "", &c.namespace) {
                    if meta::is_deleting(&n) {
                        dirty_ns.insert(c.namespace.clone());
                    } else if c.kind == crate::store::EventType::Deleted
                        && ((c.gr.resource == "configmaps" && c.name == "kube-root-ca.crt")
                            || (c.gr.resource == "serviceaccounts" && c.name == "default"))
                        && c.gr.group.is_empty()
                    {
                        seed_ns.insert(c.namespace.clone());
                    }
                }
            }
            if c.gr.group == "apiextensions.k8s.io" && c.gr.resource == "customresourcedefinitions" {
                if c.kind != crate::store::EventType::Deleted && meta::is_deleting(&c.object) {
                    dirty_crds.insert(c.name.clone());
                }
            } else if c.kind == crate::store::EventType::Deleted && !c.gr.group.is_empty() {
                let crd_name = format!("{}.{}", c.gr.resource, c.gr.group);
                dirty_crds.insert(crd_name);
            }
        }
        for ns in seed_ns {
            seed_namespace(&cl, &ns);
        }
        for ns in dirty_ns {
            finish_namespace(&cl, &ns);
        }
        for crd in dirty_crds {
            let gr = GroupResource::new("apiextensions.k8s.io", "customresourcedefinitions");
            if cl.store.get(&gr, "", &crd).is_some_and(|o| meta::is_deleting(&o)) {
                finish_crd(&cl, &crd);
            }
        }
        tokio::task::yield_now().await;
    }
}
