//! ComponentStatuses (core/v1, deprecated since 1.19 but still served): the scheduler, the
//! controller-manager and etcd-0, each `Healthy` with message `ok`, as the apiserver's
//! componentstatus REST (pkg/registry/core/componentstatus) answers when its probes pass
//! (devcluster's own scheduler, controllers and store are in-process, so they always do). The
//! resource is read-only (get, list).

use super::{Controller, Key, def};
use crate::cluster::Cluster;
use crate::ops::{self, WriteOpts};
use crate::store::Change;
use serde_json::json;
use std::time::Duration;

pub struct ComponentStatuses;

const COMPONENTS: [&str; 3] = ["controller-manager", "etcd-0", "scheduler"];

impl Controller for ComponentStatuses {
    fn keys_for(&self, _cl: &Cluster, c: &Change, out: &mut Vec<Key>) {
        if c.gr.group.is_empty() && c.gr.resource == "componentstatuses" {
            out.push(Key::new("", "componentstatuses", "", ""));
        }
    }

    fn all_keys(&self, _cl: &Cluster, out: &mut Vec<Key>) {
        out.push(Key::new("", "componentstatuses", "", ""));
    }

    fn reconcile(&self, cl: &Cluster, _key: &Key) -> Option<Duration> {
        let cdef = def(cl, "", "componentstatuses")?;
        for name in COMPONENTS {
            if cl.store.get(&cdef.storage, "", name).is_none() {
                let obj = json!({"apiVersion": "v1", "kind": "ComponentStatus", "metadata": {"name": name},
                    "conditions": [{"type": "Healthy", "status": "True", "message": "ok"}]});
                let _ = ops::create(cl, &cdef, "", obj, &WriteOpts::system("kube-apiserver"));
            }
        }
        None
    }
}
