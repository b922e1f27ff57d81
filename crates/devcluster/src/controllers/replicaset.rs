//! ReplicaSets (and ReplicationControllers, their core/v1 predecessor, which kube-controller-manager
//! runs with the same code: pkg/controller/replication wraps pkg/controller/replicaset): keep
//! `spec.replicas` pods from the template, owned by the ReplicaSet; report replicas, ready and
//! available counts; say why pods cannot be created (`ReplicaFailure`, reason `FailedCreate`,
//! with the API's refusal as the message, and a `FailedCreate` event).

use super::{Controller, Key, def, event};
use crate::cluster::Cluster;
use crate::conditions::{self, Style, pod_ready};
use crate::meta;
use crate::ops::{self, WriteOpts};
use crate::store::{Change, EventType};
use serde_json::{Map, Value, json};
use std::time::Duration;

pub struct ReplicaSetController;

/// What differs between the controllers of replicated pods: the kind that owns the pods, where
/// it is stored, and the name it writes and records events as.
pub(crate) struct Replicated {
    pub group: &'static str,
    pub resource: &'static str,
    pub kind: &'static str,
    pub manager: &'static str,
}

const REPLICA_SETS: Replicated =
    Replicated { group: "apps", resource: "replicasets", kind: "ReplicaSet", manager: "replicaset-controller" };

fn active(pod: &Value) -> bool {
    !meta::is_deleting(pod)
        && !matches!(pod.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded") | Some("Failed"))
}

/// The pods a workload controls: in its namespace, with a controller reference to its uid.
pub(crate) fn owned_pods(cl: &Cluster, owner: &Value) -> Vec<std::sync::Arc<Value>> {
    owned(cl, owner, &crate::registry::GroupResource::new("", "pods"))
}

/// The objects of a resource whose controller is `owner` (from the owner index).
pub(crate) fn owned(cl: &Cluster, owner: &Value, gr: &crate::registry::GroupResource) -> Vec<std::sync::Arc<Value>> {
    let uid = meta::uid(owner);
    let keys = cl.index().dependents(uid, Some(gr));
    let mut out: Vec<std::sync::Arc<Value>> =
        keys.iter().filter_map(|k| super::get(cl, k)).filter(|p| super::controller_uid(p) == Some(uid)).collect();
    out.sort_by(|a, b| meta::name(a).cmp(meta::name(b)));
    out
}

/// A pod for a workload: the template's metadata and spec, a controller reference, a name.
pub(crate) fn pod_from_template(
    owner: &Value,
    template: &Value,
    name: Option<String>,
    extra_labels: &[(String, String)],
) -> Value {
    let tmeta = template.get("metadata").cloned().unwrap_or_else(|| json!({}));
    let mut md = Map::new();
    match name {
        Some(n) => {
            md.insert("name".into(), n.into());
        }
        None => {
            md.insert("generateName".into(), format!("{}-", meta::name(owner)).into());
        }
    }
    md.insert("namespace".into(), meta::namespace(owner).into());
    let mut labels = tmeta.get("labels").and_then(Value::as_object).cloned().unwrap_or_default();
    for (k, v) in extra_labels {
        labels.insert(k.clone(), v.clone().into());
    }
    if !labels.is_empty() {
        md.insert("labels".into(), Value::Object(labels));
    }
    if let Some(a) = tmeta.get("annotations") {
        md.insert("annotations".into(), a.clone());
    }
    if let Some(f) = tmeta.get("finalizers") {
        md.insert("finalizers".into(), f.clone());
    }
    md.insert("ownerReferences".into(), json!([super::controller_ref(owner)]));
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": Value::Object(md), "spec": template.get("spec").cloned().unwrap_or_else(|| json!({}))})
}

/// Pods to delete first when scaling down: unscheduled, pending, not ready, then the newest.
fn deletion_rank(p: &Value) -> (u8, u8, u8, std::cmp::Reverse<String>) {
    let scheduled = p.pointer("/spec/nodeName").and_then(Value::as_str).is_some_and(|n| !n.is_empty());
    let running = p.pointer("/status/phase").and_then(Value::as_str) == Some("Running");
    let created = p.pointer("/metadata/creationTimestamp").and_then(Value::as_str).unwrap_or("").to_string();
    (scheduled as u8, running as u8, pod_ready(p) as u8, std::cmp::Reverse(created))
}

impl Replicated {
    pub(crate) fn keys_for(&self, c: &Change, out: &mut Vec<Key>) {
        if c.gr.group == self.group && c.gr.resource == self.resource && c.kind != EventType::Deleted {
            out.push(Key::of(c));
        } else if c.gr.group.is_empty() && c.gr.resource == "pods" {
            // A pod changed: its ReplicaSet recounts.
            for obj in [Some(&c.object), c.prev.as_ref()].into_iter().flatten() {
                if let Some(r) = obj.pointer("/metadata/ownerReferences").and_then(Value::as_array)
                    && let Some(owner) = r.iter().find(|r| {
                        r.get("controller").and_then(Value::as_bool) == Some(true)
                            && r.get("kind").and_then(Value::as_str) == Some(self.kind)
                    })
                    && let Some(name) = owner.get("name").and_then(Value::as_str)
                {
                    out.push(Key::new(self.group, self.resource, &c.namespace, name));
                }
            }
        }
    }

    pub(crate) fn all_keys(&self, cl: &Cluster, out: &mut Vec<Key>) {
        let (all, _) = cl.store.list(&crate::registry::GroupResource::new(self.group, self.resource), None);
        out.extend(all.iter().map(|o| Key::new(self.group, self.resource, meta::namespace(o), meta::name(o))));
    }

    pub(crate) fn reconcile(&self, cl: &Cluster, key: &Key) -> Option<Duration> {
        let rs = super::get(cl, key)?;
        if meta::is_deleting(&rs) {
            return None;
        }
        let rsdef = def(cl, self.group, self.resource)?;
        let pdef = def(cl, "", "pods")?;
        let want = rs.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1).max(0) as usize;
        let mut pods: Vec<std::sync::Arc<Value>> = owned_pods(cl, &rs).into_iter().filter(|p| active(p)).collect();
        let mut failure: Option<String> = None;
        let mut requeue = None;
        if pods.len() < want {
            let template = rs.pointer("/spec/template").cloned().unwrap_or_else(|| json!({}));
            for _ in pods.len()..want {
                let pod = pod_from_template(&rs, &template, None, &[]);
                match ops::create(cl, &pdef, &key.namespace, pod, &WriteOpts::system(self.manager)) {
                    Ok(w) => {
                        event(
                            cl,
                            &rs,
                            "Normal",
                            "SuccessfulCreate",
                            &format!("Created pod: {}", meta::name(&w.object)),
                            self.manager,
                        );
                        pods.push(std::sync::Arc::new(w.object));
                    }
                    Err(e) => {
                        event(
                            cl,
                            &rs,
                            "Warning",
                            "FailedCreate",
                            &format!("Error creating: {}", e.message),
                            self.manager,
                        );
                        failure = Some(e.message);
                        requeue = Some(Duration::from_secs(5));
                        break;
                    }
                }
            }
        } else if pods.len() > want {
            let mut ranked = pods.clone();
            ranked.sort_by_key(|p| deletion_rank(p));
            let excess = pods.len() - want;
            for p in ranked.iter().take(excess) {
                super::delete(cl, &pdef, &key.namespace, meta::name(p));
                event(cl, &rs, "Normal", "SuccessfulDelete", &format!("Deleted pod: {}", meta::name(p)), self.manager);
            }
            let gone: Vec<String> = ranked.iter().take(excess).map(|p| meta::name(p).to_string()).collect();
            pods.retain(|p| !gone.contains(&meta::name(p).to_string()));
        }
        let labels_match = |p: &Value| {
            let want = rs.pointer("/spec/template/metadata/labels").and_then(Value::as_object);
            want.is_none_or(|w| w.iter().all(|(k, v)| meta::labels(p).and_then(|l| l.get(k)) == Some(v)))
        };
        let ready = pods.iter().filter(|p| pod_ready(p)).count();
        let now = meta::now();
        let mut conds = conditions::of(rs.get("status"));
        match &failure {
            Some(msg) => conditions::set(&mut conds, Style::Plain, "ReplicaFailure", "True", "FailedCreate", msg, &now),
            None => conditions::remove(&mut conds, "ReplicaFailure"),
        }
        let mut status = Map::new();
        status.insert("replicas".into(), pods.len().into());
        status.insert("fullyLabeledReplicas".into(), pods.iter().filter(|p| labels_match(p)).count().into());
        status.insert("readyReplicas".into(), ready.into());
        status.insert("availableReplicas".into(), ready.into());
        status.insert("observedGeneration".into(), rs.pointer("/metadata/generation").cloned().unwrap_or(json!(1)));
        if !conds.is_empty() {
            status.insert("conditions".into(), Value::Array(conds));
        }
        // The real controller omits zero counts.
        status.retain(|k, v| k == "replicas" || v.as_u64() != Some(0));
        super::write_status(cl, &rsdef, &rs, Value::Object(status), self.manager);
        requeue
    }
}

impl Controller for ReplicaSetController {
    fn keys_for(&self, _cl: &Cluster, c: &Change, out: &mut Vec<Key>) {
        REPLICA_SETS.keys_for(c, out);
    }

    fn all_keys(&self, cl: &Cluster, out: &mut Vec<Key>) {
        REPLICA_SETS.all_keys(cl, out);
    }

    fn reconcile(&self, cl: &Cluster, key: &Key) -> Option<Duration> {
        REPLICA_SETS.reconcile(cl, key)
    }
}
