//! CRD cleanup: a deleted CustomResourceDefinition first has its custom resources deleted
//! (waiting for their finalizers), then loses its cleanup finalizer and goes away.

use super::{Controller, Key, def};
use crate::cluster::Cluster;
use crate::meta;
use crate::registry::GroupResource;
use crate::store::{Change, EventType};
use serde_json::{Value, json};
use std::time::Duration;

pub struct CrdCleanup;

/// apiextensions-apiserver's finalizer controller writes as the apiserver.
const MANAGER: &str = "kube-apiserver";

fn crds() -> GroupResource {
    GroupResource::new("apiextensions.k8s.io", "customresourcedefinitions")
}

impl Controller for CrdCleanup {
    fn keys_for(&self, _cl: &Cluster, c: &Change, out: &mut Vec<Key>) {
        if c.gr == crds() {
            if c.kind != EventType::Deleted && meta::is_deleting(&c.object) {
                out.push(Key::of(c));
            }
        } else if c.kind == EventType::Deleted && !c.gr.group.is_empty() {
            // A custom resource went away: its CRD may be waiting for that.
            out.push(Key::new(
                "apiextensions.k8s.io",
                "customresourcedefinitions",
                "",
                &format!("{}.{}", c.gr.resource, c.gr.group),
            ));
        }
    }

    fn all_keys(&self, cl: &Cluster, out: &mut Vec<Key>) {
        let (all, _) = cl.store.list(&crds(), None);
        out.extend(
            all.iter()
                .filter(|c| meta::is_deleting(c))
                .map(|c| Key::new("apiextensions.k8s.io", "customresourcedefinitions", "", meta::name(c))),
        );
    }

    fn reconcile(&self, cl: &Cluster, key: &Key) -> Option<Duration> {
        let crd = super::get(cl, key)?;
        if !meta::is_deleting(&crd) {
            return None;
        }
        let crd_def = def(cl, "apiextensions.k8s.io", "customresourcedefinitions")?;
        if !meta::finalizers(&crd).iter().any(|f| f == crate::crd::CLEANUP_FINALIZER) {
            return None;
        }
        let group = crd.pointer("/spec/group").and_then(Value::as_str).unwrap_or("");
        let plural = crd.pointer("/spec/names/plural").and_then(Value::as_str).unwrap_or("");
        let gr = GroupResource::new(group, plural);
        if crate::crd::is_established(&crd) && !crate::crd::is_terminating(&crd) {
            // First the condition (the CRD's status is recomputed on write: deleting makes it
            // Terminating, InstanceDeletionInProgress), then the objects go.
            let status = crd.get("status").cloned().unwrap_or_else(|| json!({}));
            let opts =
                crate::ops::WriteOpts { subresource: Some("status".into()), ..crate::ops::WriteOpts::system(MANAGER) };
            let mut next = (*crd).clone();
            if let Some(m) = next.as_object_mut() {
                m.insert("status".into(), status);
            }
            if let Err(e) = crate::ops::update(cl, &crd_def, "", meta::name(&crd), next, &opts) {
                tracing::debug!(crd = meta::name(&crd), error = %e.message, "Terminating condition not written");
                return Some(Duration::from_millis(200));
            }
        }
        // A CRD that was never established has no objects to delete (upstream writes
        // Terminating=False, NeverEstablished, in the same update that drops the finalizer).
        let (items, _) = if crate::crd::is_established(&crd) { cl.store.list(&gr, None) } else { (vec![], 0) };
        if !items.is_empty() {
            if let Some(d) = cl.registry.by_storage(&gr).into_iter().next() {
                for o in items.iter().filter(|o| !meta::is_deleting(o)) {
                    super::delete(cl, &d, meta::namespace(o), meta::name(o));
                }
            }
            return None;
        }
        let fins: Vec<String> =
            meta::finalizers(&crd).into_iter().filter(|f| f != crate::crd::CLEANUP_FINALIZER).collect();
        let patch =
            json!({"metadata": {"finalizers": fins, "resourceVersion": crate::store::object_rv(&crd).to_string()}});
        let body = serde_json::to_vec(&patch).unwrap_or_default();
        let opts = crate::ops::WriteOpts::system(MANAGER);
        let _ =
            crate::ops::patch(cl, &crd_def, "", meta::name(&crd), crate::request::BodyFormat::MergePatch, &body, &opts);
        None
    }
}
