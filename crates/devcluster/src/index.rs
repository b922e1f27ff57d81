//! Indexes of the stored objects, which the controllers look things up in (as informers'
//! indexers are): dependents by owner uid, objects by uid, pods and pod IPs by node, and
//! events by what they say, so no reconcile scans a whole namespace. The write path keeps them
//! current as each write is stored (`hooks::after_write`, `after_delete`); the controllers
//! rebuild them from the store when they resync. They know objects only, not who reads them,
//! so `Cluster` holds them without depending on the controllers.

use crate::meta;
use crate::registry::{GroupResource, Registry};
use crate::store::{Change, Store};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};

/// An object as the indexes name it and the controllers reconcile it: storage group-resource,
/// namespace ("" for cluster scope), name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub gr: GroupResource,
    pub namespace: String,
    pub name: String,
}

impl Key {
    pub fn new(group: &str, resource: &str, namespace: &str, name: &str) -> Key {
        Key { gr: GroupResource::new(group, resource), namespace: namespace.to_string(), name: name.to_string() }
    }

    pub fn of(change: &Change) -> Key {
        Key { gr: change.gr.clone(), namespace: change.namespace.clone(), name: change.name.clone() }
    }
}

#[derive(Debug, Default)]
pub struct Indexes {
    /// owner uid -> dependents
    dependents: HashMap<String, BTreeSet<Key>>,
    /// dependent -> its owner uids
    owners_of: HashMap<Key, Vec<String>>,
    /// uid -> object
    by_uid: HashMap<String, Key>,
    /// node -> pods on it
    pods_on: HashMap<String, BTreeSet<Key>>,
    /// pod -> (node, pod IP)
    pod_place: HashMap<Key, (String, String)>,
    /// (involved uid, reason, message) -> event
    events: HashMap<(String, String, String), Key>,
}

fn owner_uids(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|r| r.get("uid").and_then(Value::as_str)).map(str::to_string).collect())
        .unwrap_or_default()
}

fn is_pods(gr: &GroupResource) -> bool {
    gr.group.is_empty() && gr.resource == "pods"
}

fn event_key(obj: &Value) -> Option<(String, String, String)> {
    Some((
        obj.pointer("/involvedObject/uid")?.as_str()?.to_string(),
        obj.get("reason")?.as_str()?.to_string(),
        obj.get("message")?.as_str()?.to_string(),
    ))
}

impl Indexes {
    /// Forget everything about an object.
    fn forget(&mut self, key: &Key, obj: Option<&Value>) {
        if let Some(old) = self.owners_of.remove(key) {
            for u in old {
                if let Some(s) = self.dependents.get_mut(&u) {
                    s.remove(key);
                    if s.is_empty() {
                        self.dependents.remove(&u);
                    }
                }
            }
        }
        if let Some((node, _)) = self.pod_place.remove(key)
            && let Some(s) = self.pods_on.get_mut(&node)
        {
            s.remove(key);
        }
        if let Some(o) = obj {
            let uid = meta::uid(o);
            if self.by_uid.get(uid) == Some(key) {
                self.by_uid.remove(uid);
            }
            if key.gr.group.is_empty()
                && key.gr.resource == "events"
                && let Some(ek) = event_key(o)
                && self.events.get(&ek) == Some(key)
            {
                self.events.remove(&ek);
            }
        }
    }

    /// Record the current state of an object.
    pub fn put(&mut self, key: &Key, obj: &Value) {
        self.forget(key, None);
        let owners = owner_uids(obj);
        for u in &owners {
            self.dependents.entry(u.clone()).or_default().insert(key.clone());
        }
        if !owners.is_empty() {
            self.owners_of.insert(key.clone(), owners);
        }
        let uid = meta::uid(obj);
        if !uid.is_empty() {
            self.by_uid.insert(uid.to_string(), key.clone());
        }
        if is_pods(&key.gr)
            && let Some(node) = obj.pointer("/spec/nodeName").and_then(Value::as_str).filter(|n| !n.is_empty())
        {
            let ip = obj.pointer("/status/podIP").and_then(Value::as_str).unwrap_or("").to_string();
            self.pods_on.entry(node.to_string()).or_default().insert(key.clone());
            self.pod_place.insert(key.clone(), (node.to_string(), ip));
        }
        if key.gr.group.is_empty()
            && key.gr.resource == "events"
            && let Some(ek) = event_key(obj)
        {
            self.events.insert(ek, key.clone());
        }
    }

    /// An object was removed.
    pub fn remove(&mut self, key: &Key, obj: &Value) {
        self.forget(key, Some(obj));
    }

    /// Build everything again from the store.
    pub fn rebuild(&mut self, registry: &Registry, store: &Store) {
        *self = Indexes::default();
        let mut seen = BTreeSet::new();
        for d in registry.all() {
            if !seen.insert(d.storage.clone()) {
                continue;
            }
            for o in store.list(&d.storage, None).0 {
                let key = Key::new(&d.storage.group, &d.storage.resource, meta::namespace(&o), meta::name(&o));
                self.put(&key, &o);
            }
        }
    }

    /// The dependents of an owner, in one storage resource (or all when `gr` is None).
    pub fn dependents(&self, owner_uid: &str, gr: Option<&GroupResource>) -> Vec<Key> {
        self.dependents
            .get(owner_uid)
            .map(|s| s.iter().filter(|k| gr.is_none_or(|g| &k.gr == g)).cloned().collect())
            .unwrap_or_default()
    }

    pub fn by_uid(&self, uid: &str) -> Option<Key> {
        self.by_uid.get(uid).cloned()
    }

    pub fn pods_on(&self, node: &str) -> usize {
        self.pods_on.get(node).map_or(0, BTreeSet::len)
    }

    /// Pod IPs in use on a node.
    pub fn pod_ips_on(&self, node: &str) -> BTreeSet<String> {
        self.pods_on
            .get(node)
            .into_iter()
            .flatten()
            .filter_map(|k| self.pod_place.get(k))
            .map(|(_, ip)| ip.clone())
            .filter(|ip| !ip.is_empty())
            .collect()
    }

    /// The event recorded about an object with this reason and message.
    pub fn event(&self, involved_uid: &str, reason: &str, message: &str) -> Option<Key> {
        self.events.get(&(involved_uid.to_string(), reason.to_string(), message.to_string())).cloned()
    }
}
