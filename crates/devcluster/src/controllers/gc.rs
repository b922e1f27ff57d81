//! Garbage collection by ownerReferences, as kube-controller-manager's garbage collector does it:
//! - an object whose owners are all gone is deleted (background), and references to owners that
//!   are gone are removed from an object that still has a live owner;
//! - an owner deleted in the foreground (`foregroundDeletion` finalizer) has its dependents
//!   deleted and stays until they are gone;
//! - an owner deleted with `orphan` propagation has its dependents' references to it removed,
//!   then goes.

use super::{Controller, Key};
use crate::cluster::Cluster;
use crate::meta;
use crate::ops::{self, WriteOpts};
use crate::request::BodyFormat;
use crate::store::{Change, EventType};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::Duration;

const MANAGER: &str = "generic-garbage-collector";
const FOREGROUND: &str = "foregroundDeletion";
const ORPHAN: &str = "orphan";

pub struct GarbageCollector;

fn owner_refs(obj: &Value) -> Vec<Value> {
    obj.pointer("/metadata/ownerReferences").and_then(Value::as_array).cloned().unwrap_or_default()
}

fn owner_uids(obj: &Value) -> Vec<String> {
    owner_refs(obj).iter().filter_map(|r| r.get("uid").and_then(Value::as_str)).map(str::to_string).collect()
}

fn has_gc_finalizer(obj: &Value) -> bool {
    meta::is_deleting(obj) && meta::finalizers(obj).iter().any(|f| f == FOREGROUND || f == ORPHAN)
}

/// Remove one finalizer from an object (merge patch pinned to the version read).
fn drop_finalizer(cl: &Cluster, key: &Key, obj: &Value, finalizer: &str) {
    let Some(def) = cl.registry.by_storage(&key.gr).into_iter().next() else { return };
    let fins: Vec<String> = meta::finalizers(obj).into_iter().filter(|f| f != finalizer).collect();
    let patch = json!({"metadata": {"finalizers": fins, "resourceVersion": crate::store::object_rv(obj).to_string()}});
    let body = serde_json::to_vec(&patch).unwrap_or_default();
    let _ = ops::patch(cl, &def, &key.namespace, &key.name, BodyFormat::MergePatch, &body, &WriteOpts::system(MANAGER));
}

/// Rewrite an object's ownerReferences keeping only those `keep` accepts.
fn retain_refs(cl: &Cluster, key: &Key, obj: &Value, keep: &dyn Fn(&Value) -> bool) {
    let Some(def) = cl.registry.by_storage(&key.gr).into_iter().next() else { return };
    let refs: Vec<Value> = owner_refs(obj).into_iter().filter(|r| keep(r)).collect();
    let patch = json!({"metadata": {"ownerReferences": if refs.is_empty() { Value::Null } else { Value::Array(refs) }, "resourceVersion": crate::store::object_rv(obj).to_string()}});
    let body = serde_json::to_vec(&patch).unwrap_or_default();
    let _ = ops::patch(cl, &def, &key.namespace, &key.name, BodyFormat::MergePatch, &body, &WriteOpts::system(MANAGER));
}

enum OwnerState {
    Present {
        foreground_deleting: bool,
    },
    Absent,
    /// The owner's kind is not served (yet): keep the dependent, as upstream does for
    /// unresolvable owners.
    Unknown,
}

fn owner_state(cl: &Cluster, dependent: &Key, r: &Value) -> OwnerState {
    let av = r.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = r.get("kind").and_then(Value::as_str).unwrap_or("");
    let name = r.get("name").and_then(Value::as_str).unwrap_or("");
    let uid = r.get("uid").and_then(Value::as_str).unwrap_or("");
    let Some(def) = cl.registry.find_kind(av, kind) else { return OwnerState::Unknown };
    let ns = if def.namespaced { dependent.namespace.as_str() } else { "" };
    match cl.store.get(&def.storage, ns, name) {
        Some(o) if meta::uid(&o) == uid => OwnerState::Present {
            foreground_deleting: meta::is_deleting(&o) && meta::finalizers(&o).iter().any(|f| f == FOREGROUND),
        },
        _ => OwnerState::Absent,
    }
}

fn dependents_of(cl: &Cluster, uid: &str) -> Vec<Key> {
    cl.index().dependents(uid, None)
}

impl Controller for GarbageCollector {
    fn keys_for(&self, cl: &Cluster, c: &Change, out: &mut Vec<Key>) {
        let key = Key::of(c);
        let uid = meta::uid(&c.object);
        let idx = cl.index();
        if c.kind == EventType::Deleted {
            // Its dependents may now be garbage; owners waiting in the foreground may be done.
            out.extend(idx.dependents(uid, None));
            for ou in owner_uids(&c.object) {
                if let Some(k) = idx.by_uid(&ou) {
                    out.push(k);
                }
            }
            return;
        }
        if !owner_uids(&c.object).is_empty() {
            out.push(key.clone());
        }
        if has_gc_finalizer(&c.object) {
            out.push(key);
            out.extend(idx.dependents(uid, None));
        }
    }

    fn all_keys(&self, cl: &Cluster, out: &mut Vec<Key>) {
        let mut seen = BTreeSet::new();
        for d in cl.registry.all() {
            if !seen.insert(d.storage.clone()) {
                continue;
            }
            for o in cl.store.list(&d.storage, None).0 {
                if !owner_uids(&o).is_empty() || has_gc_finalizer(&o) {
                    out.push(Key {
                        gr: d.storage.clone(),
                        namespace: meta::namespace(&o).to_string(),
                        name: meta::name(&o).to_string(),
                    });
                }
            }
        }
    }

    fn reconcile(&self, cl: &Cluster, key: &Key) -> Option<Duration> {
        let obj = super::get(cl, key)?;
        let uid = meta::uid(&obj).to_string();
        if meta::is_deleting(&obj) {
            let fins = meta::finalizers(&obj);
            if fins.iter().any(|f| f == ORPHAN) {
                for dk in dependents_of(cl, &uid) {
                    if let Some(dep) = super::get(cl, &dk) {
                        retain_refs(cl, &dk, &dep, &|r| r.get("uid").and_then(Value::as_str) != Some(uid.as_str()));
                    }
                }
                drop_finalizer(cl, key, &obj, ORPHAN);
                return None;
            }
            if fins.iter().any(|f| f == FOREGROUND) {
                let mut left = 0;
                for dk in dependents_of(cl, &uid) {
                    let Some(dep) = super::get(cl, &dk) else { continue };
                    if !owner_uids(&dep).contains(&uid) {
                        continue;
                    }
                    left += 1;
                    if !meta::is_deleting(&dep)
                        && let Some(d) = cl.registry.by_storage(&dk.gr).into_iter().next()
                    {
                        // Dependents of a foreground deletion are deleted in the foreground too.
                        let opts =
                            ops::DeleteOpts { propagation_policy: Some("Foreground".into()), ..Default::default() };
                        let _ = ops::delete(cl, &d, &dk.namespace, &dk.name, &opts);
                    }
                }
                if left == 0 {
                    drop_finalizer(cl, key, &obj, FOREGROUND);
                }
            }
            return None;
        }
        let refs = owner_refs(&obj);
        if refs.is_empty() {
            return None;
        }
        let mut present = 0;
        let mut absent = BTreeSet::new();
        let mut owner_in_foreground = false;
        for r in &refs {
            match owner_state(cl, key, r) {
                OwnerState::Present { foreground_deleting } => {
                    present += 1;
                    if foreground_deleting {
                        owner_in_foreground = true;
                    }
                }
                OwnerState::Absent => {
                    absent.insert(r.get("uid").and_then(Value::as_str).unwrap_or("").to_string());
                }
                OwnerState::Unknown => present += 1,
            }
        }
        let def = cl.registry.by_storage(&key.gr).into_iter().next()?;
        if present == 0 {
            super::delete(cl, &def, &key.namespace, &key.name);
        } else if owner_in_foreground {
            let opts = ops::DeleteOpts { propagation_policy: Some("Foreground".into()), ..Default::default() };
            let _ = ops::delete(cl, &def, &key.namespace, &key.name, &opts);
        } else if !absent.is_empty() {
            retain_refs(cl, key, &obj, &|r| !absent.contains(r.get("uid").and_then(Value::as_str).unwrap_or("")));
        }
        None
    }
}
