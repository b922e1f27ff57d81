//! The cluster's own controllers, clients of the store through its change feed as
//! kube-controller-manager and the kubelet are clients of the apiserver. Each controller says
//! which objects a change concerns and reconciles one object at a time; the runner queues keys,
//! runs reconciles, and keeps timers for controllers that need to look again later (rollout
//! deadlines, crash-loop restarts, pod start-up delays).
//!
//! Every write a controller makes goes through `ops`, the same verbs the API serves, so
//! admission, validation and watches see controller writes exactly like client writes.

pub mod apiservice;
pub mod componentstatus;
pub mod crds;
pub mod cronjob;
pub mod csr;
pub mod daemonset;
pub mod deployment;
pub mod disruption;
pub mod endpoints;
pub mod gc;
pub mod job;
pub mod kubelet;
pub mod namespace;
pub mod quota;
pub mod replicaset;
pub mod replicationcontroller;
pub mod statefulset;

use crate::cluster::Cluster;
pub(crate) use crate::index::Key;
use crate::runtime::Runtime;
use crate::store::{Change, StoreError};
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// One controller.
pub trait Controller: Send + Sync {
    /// The keys this change asks the controller to look at.
    fn keys_for(&self, cl: &Cluster, change: &Change, out: &mut Vec<Key>);
    /// Every key it is responsible for: at start, and after the change feed was lost.
    fn all_keys(&self, cl: &Cluster, out: &mut Vec<Key>);
    /// Make one object what it should be. `Some(d)`: look at it again after `d`.
    fn reconcile(&self, cl: &Cluster, key: &Key) -> Option<Duration>;
}

/// The controllers every devcluster runs; the kubelet starts pods of `--run` images on the
/// process runtime `rt`.
pub fn all(rt: &Arc<Runtime>) -> Vec<Box<dyn Controller>> {
    vec![
        Box::new(namespace::NamespaceController),
        Box::new(crds::CrdCleanup),
        Box::new(apiservice::ApiServiceRegistration),
        Box::new(componentstatus::ComponentStatuses),
        Box::new(gc::GarbageCollector),
        Box::new(deployment::DeploymentController),
        Box::new(replicaset::ReplicaSetController),
        Box::new(replicationcontroller::ReplicationManager),
        Box::new(disruption::DisruptionController),
        Box::new(statefulset::StatefulSetController),
        Box::new(statefulset::VolumeBinder),
        Box::new(daemonset::DaemonSetController),
        Box::new(job::JobController),
        Box::new(job::TtlAfterFinished),
        Box::new(cronjob::CronJobController),
        Box::new(csr::CsrSigner),
        Box::new(kubelet::Kubelet { runtime: rt.clone() }),
        Box::new(endpoints::EndpointsController),
        Box::new(quota::QuotaController),
    ]
}

struct Runner {
    cl: Arc<Cluster>,
    ctrls: Vec<Box<dyn Controller>>,
    queue: BTreeSet<(usize, Key)>,
    timers: BinaryHeap<Reverse<(Instant, usize, Key)>>,
}

impl Runner {
    fn resync(&mut self) {
        self.cl.index().rebuild(&self.cl.registry, &self.cl.store);
        let mut keys = vec![];
        for (i, c) in self.ctrls.iter().enumerate() {
            keys.clear();
            c.all_keys(&self.cl, &mut keys);
            for k in keys.drain(..) {
                self.queue.insert((i, k));
            }
        }
    }

    fn dispatch(&mut self, change: &Change) {
        let mut keys = vec![];
        for (i, c) in self.ctrls.iter().enumerate() {
            keys.clear();
            c.keys_for(&self.cl, change, &mut keys);
            for k in keys.drain(..) {
                self.queue.insert((i, k));
            }
        }
    }

    /// Run everything queued; return how many reconciles ran.
    fn drain(&mut self) -> usize {
        let now = Instant::now();
        while let Some(Reverse((at, _, _))) = self.timers.peek() {
            if *at > now {
                break;
            }
            if let Some(Reverse((_, i, k))) = self.timers.pop() {
                self.queue.insert((i, k));
            }
        }
        let batch = std::mem::take(&mut self.queue);
        let n = batch.len();
        for (i, key) in batch {
            let ctrl = &self.ctrls[i];
            if let Some(after) = ctrl.reconcile(&self.cl, &key) {
                self.timers.push(Reverse((Instant::now() + after, i, key)));
            }
        }
        n
    }
}

/// Hand the write path what the controllers must do inside it, before a write returns (called
/// once at start-up, before `bootstrap` creates the first namespaces): a new namespace gets its
/// default ServiceAccount and root CA ConfigMap at once (`namespace::seed`), so a pod can be
/// created in it right away. Everything else the controllers do follows the change feed.
pub fn install(cl: &Cluster) {
    let _ = cl.on_namespace_created.set(namespace::seed);
}

/// Run the controllers until `stop` turns true.
pub async fn run(cl: Arc<Cluster>, rt: Arc<Runtime>, mut stop: watch::Receiver<bool>) {
    let mut notify = cl.store.subscribe();
    let mut cursor = cl.store.current_rv();
    let mut r = Runner { cl: cl.clone(), ctrls: all(&rt), queue: BTreeSet::new(), timers: BinaryHeap::new() };
    r.resync();
    loop {
        match cl.store.changes_since(cursor, 4096) {
            Ok(changes) => {
                for c in &changes {
                    cursor = c.rv;
                    r.dispatch(c);
                }
            }
            Err(StoreError::Gone { .. }) => {
                cursor = cl.store.current_rv();
                r.resync();
            }
            Err(_) => {}
        }
        if r.drain() > 0 || cl.store.current_rv() != cursor {
            tokio::task::yield_now().await;
            continue;
        }
        let next_timer = r.timers.peek().map(|Reverse((at, _, _))| *at);
        tokio::select! {
            _ = stop.changed() => return,
            _ = cl.kick.notified() => r.resync(),
            changed = notify.changed() => if changed.is_err() { return },
            _ = async {
                match next_timer {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending::<()>().await,
                }
            } => {}
        }
    }
}

/// Run every controller over everything once, synchronously, until nothing more changes (used
/// at start, so a new cluster is complete when `DevCluster::start` returns).
pub fn settle(cl: &Arc<Cluster>, rt: &Arc<Runtime>) {
    let mut r = Runner { cl: cl.clone(), ctrls: all(rt), queue: BTreeSet::new(), timers: BinaryHeap::new() };
    let mut cursor = cl.store.current_rv();
    r.resync();
    for _ in 0..16 {
        r.drain();
        match cl.store.changes_since(cursor, usize::MAX) {
            Ok(changes) if changes.is_empty() => return,
            Ok(changes) => {
                for c in &changes {
                    cursor = c.rv;
                    r.dispatch(c);
                }
            }
            Err(_) => return,
        }
    }
}

// ---- helpers shared by the controllers ------------------------------------------------------

/// Lookups and writes every controller makes (src/client.rs; the process runtime and
/// bootstrap make them too).
pub(crate) use crate::client::{def, delete, event, get, list_ns, write_object, write_status};
use serde_json::Value;

/// The uid of the controller owner of an object.
pub(crate) fn controller_uid(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))?
        .get("uid")?
        .as_str()
}

/// An owner reference marking `owner` as the controller.
pub(crate) fn controller_ref(owner: &Value) -> Value {
    serde_json::json!({
        "apiVersion": owner.get("apiVersion").cloned().unwrap_or(Value::Null),
        "kind": owner.get("kind").cloned().unwrap_or(Value::Null),
        "name": crate::meta::name(owner),
        "uid": crate::meta::uid(owner),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// Seconds since the unix epoch of an RFC 3339 timestamp.
pub(crate) fn unix(ts: &str) -> Option<i64> {
    crate::duration::parse_rfc3339(ts).map(|(s, _)| s)
}
