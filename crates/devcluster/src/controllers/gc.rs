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
use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

const MANAGER: &str = "generic-garbage-collector";
const FOREGROUND: &str = "foregroundDeletion";
const ORPHAN: &str = "orphan";

#[derive(Default)]
struct Index {
    /// owner uid -> dependents
    dependents: HashMap<String, BTreeSet<Key>>,
    /// dependent -> its owner uids
    owners: HashMap<Key, Vec<String>>,
    /// uid -> object key (to find an owner from a dependent)
    by_uid: HashMap<String, Key>,
}

impl Index {
    fn set(&mut self, key: &Key, uid: &str, owner_uids: Vec<String>) {
        if let Some(old) = self.owners.remove(key) {
            for u in old {
                if let Some(s) = self.dependents.get_mut(&u) {
                    s.remove(key);
                    if s.is_empty() {
                        self.dependents.remove(&u);
                    }
                }
            }
        }
        for u in &owner_uids {
            self.dependents.entry(u.clone()).or_default().insert(key.clone());
        }
        if !owner_uids.is_empty() {
            self.owners.insert(key.clone(), owner_uids);
        }
        if !uid.is_empty() {
            self.by_uid.insert(uid.to_string(), key.clone());
        }
    }

    fn remove(&mut self, key: &Key, uid: &str) {
        self.set(key, "", vec![]);
        if self.by_uid.get(uid) == Some(key) {
            self.by_uid.remove(uid);
        }
    }
}

#[derive(Default)]
pub struct GarbageCollector {
    index: Mutex<Index>,
}

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

impl GarbageCollector {
    fn lock(&self) -> std::sync::MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn dependents_of(&self, uid: &str) -> Vec<Key> {
        self.lock().dependents.get(uid).map(|s| s.iter().cloned().collect()).unwrap_or_default()
    }
}

impl Controller for GarbageCollector {
    fn name(&self) -> &'static str {
        "garbage-collector"
    }

    fn keys_for(&self, _cl: &Cluster, c: &Change, out: &mut Vec<Key>) {
        let key = Key::of(c);
        let uid = meta::uid(&c.object).to_string();
        let mut idx = self.lock();
        if c.kind == EventType::Deleted {
            // Its dependents may now be garbage; owners waiting in the foreground may be done.
            if let Some(deps) = idx.dependents.get(&uid) {
                out.extend(deps.iter().cloned());
            }
            for ou in owner_uids(&c.object) {
                if let Some(k) = idx.by_uid.get(&ou) {
                    out.push(k.clone());
                }
            }
            idx.remove(&key, &uid);
            return;
        }
        let owners = owner_uids(&c.object);
        if !owners.is_empty() {
            out.push(key.clone());
        }
        if has_gc_finalizer(&c.object) {
            out.push(key.clone());
            if let Some(deps) = idx.dependents.get(&uid) {
                out.extend(deps.iter().cloned());
            }
        }
        idx.set(&key, &uid, owners);
    }

    fn all_keys(&self, cl: &Cluster, out: &mut Vec<Key>) {
        let mut idx = self.lock();
        *idx = Index::default();
        let mut seen = BTreeSet::new();
        for d in cl.registry.all() {
            if !seen.insert(d.storage.clone()) {
                continue;
            }
            let (items, _) = cl.store.list(&d.storage, None);
            for o in items {
                let key = Key {
                    gr: d.storage.clone(),
                    namespace: meta::namespace(&o).to_string(),
                    name: meta::name(&o).to_string(),
                };
                let owners = owner_uids(&o);
                if !owners.is_empty() || has_gc_finalizer(&o) {
                    out.push(key.clone());
                }
                idx.set(&key, meta::uid(&o), owners);
            }
        }
    }

    fn reconcile(&self, cl: &Cluster, key: &Key) -> Option<Duration> {
        let obj = super::get(cl, key)?;
        let uid = meta::uid(&obj).to_string();
        if meta::is_deleting(&obj) {
            let fins = meta::finalizers(&obj);
            if fins.iter().any(|f| f == ORPHAN) {
                for dk in self.dependents_of(&uid) {
                    if let Some(dep) = super::get(cl, &dk) {
                        retain_refs(cl, &dk, &dep, &|r| r.get("uid").and_then(Value::as_str) != Some(uid.as_str()));
                    }
                }
                drop_finalizer(cl, key, &obj, ORPHAN);
                return None;
            }
            if fins.iter().any(|f| f == FOREGROUND) {
                let mut left = 0;
                for dk in self.dependents_of(&uid) {
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
