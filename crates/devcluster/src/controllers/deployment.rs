//! Deployments: one ReplicaSet per pod template (named `<deployment>-<pod-template-hash>`),
//! rolled with the RollingUpdate or Recreate strategy, old ReplicaSets trimmed to
//! `revisionHistoryLimit`, and the status a real deployment controller writes: counts,
//! `observedGeneration`, and the Available / Progressing / ReplicaFailure conditions with their
//! real reasons (MinimumReplicasAvailable, NewReplicaSetCreated, ReplicaSetUpdated,
//! NewReplicaSetAvailable, ProgressDeadlineExceeded, FailedCreate).

use super::event;
use super::{Controller, Key, def};
use crate::cluster::Cluster;
use crate::conditions::{self, Style};
use crate::faults::{self, Fault};
use crate::meta;
use crate::ops::{self, WriteOpts};
use crate::store::{Change, EventType};
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::Duration;

const MANAGER: &str = "deployment-controller";
const REVISION: &str = "deployment.kubernetes.io/revision";

pub struct DeploymentController;

/// FNV-32a.
fn fnv32a(data: &[u8]) -> u32 {
    let mut h: u32 = 0x811c9dc5;
    for b in data {
        h ^= *b as u32;
        h = h.wrapping_mul(0x01000193);
    }
    h
}

/// `rand.SafeEncodeString`: the characters of a string mapped onto an alphabet without vowels
/// (no words), as the apiserver's names use.
pub(crate) fn safe_encode(s: &str) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    s.bytes().map(|b| ALPHANUMS[b as usize % ALPHANUMS.len()] as char).collect()
}

/// The pod-template-hash of a template (FNV-32a of its JSON and the collision count).
pub(crate) fn template_hash(template: &Value, collision_count: i64) -> String {
    let mut data = serde_json::to_vec(template).unwrap_or_default();
    if collision_count > 0 {
        data.extend_from_slice(collision_count.to_string().as_bytes());
    }
    safe_encode(&fnv32a(&data).to_string())
}

/// maxSurge / maxUnavailable: an int, or a percentage of `total` (surge rounds up,
/// unavailable down).
pub(crate) fn resolve(v: Option<&Value>, total: i64, default_pct: i64, round_up: bool) -> i64 {
    match v {
        Some(Value::Number(n)) => n.as_i64().unwrap_or(0),
        Some(Value::String(s)) if s.ends_with('%') => {
            let pct: i64 = s.trim_end_matches('%').parse().unwrap_or(default_pct);
            if round_up { (pct * total + 99) / 100 } else { pct * total / 100 }
        }
        Some(Value::String(s)) => s.parse().unwrap_or(0),
        _ => {
            if round_up {
                (default_pct * total + 99) / 100
            } else {
                default_pct * total / 100
            }
        }
    }
}

fn replicas_of(o: &Value) -> i64 {
    o.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(0)
}

fn status_i(o: &Value, f: &str) -> i64 {
    o.pointer(&format!("/status/{f}")).and_then(Value::as_i64).unwrap_or(0)
}

fn revision(o: &Value) -> i64 {
    o.pointer("/metadata/annotations")
        .and_then(|a| a.get(REVISION))
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Template equality ignoring the pod-template-hash label.
fn same_template(rs: &Value, template: &Value) -> bool {
    let mut t = rs.pointer("/spec/template").cloned().unwrap_or_default();
    if let Some(l) = t.pointer_mut("/metadata/labels").and_then(Value::as_object_mut) {
        l.remove("pod-template-hash");
        if l.is_empty()
            && let Some(m) = t.get_mut("metadata").and_then(Value::as_object_mut)
        {
            m.remove("labels");
        }
    }
    t == *template
}

/// Set spec.replicas of a ReplicaSet (and the deployment's annotations on it).
fn scale_rs(cl: &Cluster, d: &Value, rs: &Value, to: i64, max_surge: i64) -> Option<Value> {
    let rsdef = def(cl, "apps", "replicasets")?;
    let from = replicas_of(rs);
    let mut next = rs.clone();
    if let Some(spec) = next.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("replicas".into(), to.into());
    }
    let desired = replicas_of(d);
    if let Some(m) = crate::meta::meta_mut(&mut next) {
        let ann = m.entry("annotations").or_insert_with(|| json!({}));
        if let Some(a) = ann.as_object_mut() {
            a.insert("deployment.kubernetes.io/desired-replicas".into(), desired.to_string().into());
            a.insert("deployment.kubernetes.io/max-replicas".into(), (desired + max_surge).to_string().into());
        }
    }
    if next == *rs {
        return Some(next);
    }
    match ops::update(cl, &rsdef, meta::namespace(rs), meta::name(rs), next, &WriteOpts::system(MANAGER)) {
        Ok(w) => {
            if from != to {
                let verb = if to > from { "up" } else { "down" };
                event(
                    cl,
                    d,
                    "Normal",
                    "ScalingReplicaSet",
                    &format!("Scaled {verb} replica set {} from {from} to {to}", meta::name(rs)),
                    MANAGER,
                );
            }
            Some(w.object)
        }
        Err(_) => None,
    }
}

impl Controller for DeploymentController {
    fn keys_for(&self, _cl: &Cluster, c: &Change, out: &mut Vec<Key>) {
        if c.gr.group == "apps" && c.gr.resource == "deployments" && c.kind != EventType::Deleted {
            out.push(Key::of(c));
        } else if c.gr.group == "apps" && c.gr.resource == "replicasets" {
            for obj in [Some(&c.object), c.prev.as_ref()].into_iter().flatten() {
                if let Some(refs) = obj.pointer("/metadata/ownerReferences").and_then(Value::as_array)
                    && let Some(owner) = refs.iter().find(|r| {
                        r.get("controller").and_then(Value::as_bool) == Some(true)
                            && r.get("kind").and_then(Value::as_str) == Some("Deployment")
                    })
                    && let Some(name) = owner.get("name").and_then(Value::as_str)
                {
                    out.push(Key::new("apps", "deployments", &c.namespace, name));
                }
            }
        }
    }

    fn all_keys(&self, cl: &Cluster, out: &mut Vec<Key>) {
        let (all, _) = cl.store.list(&crate::registry::GroupResource::new("apps", "deployments"), None);
        out.extend(all.iter().map(|o| Key::new("apps", "deployments", meta::namespace(o), meta::name(o))));
    }

    fn reconcile(&self, cl: &Cluster, key: &Key) -> Option<Duration> {
        let d = super::get(cl, key)?;
        if meta::is_deleting(&d) {
            return None;
        }
        let ddef = def(cl, "apps", "deployments")?;
        let rsdef = def(cl, "apps", "replicasets")?;
        let desired = d.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1).max(0);
        let template = d.pointer("/spec/template").cloned().unwrap_or_else(|| json!({}));
        let collision = d.pointer("/status/collisionCount").and_then(Value::as_i64).unwrap_or(0);
        let hash = template_hash(&template, collision);
        let recreate = d.pointer("/spec/strategy/type").and_then(Value::as_str) == Some("Recreate");
        let ru = d.pointer("/spec/strategy/rollingUpdate");
        let (mut max_surge, mut max_unavailable) = if recreate {
            (0, desired)
        } else {
            (
                resolve(ru.and_then(|r| r.get("maxSurge")), desired, 25, true),
                resolve(ru.and_then(|r| r.get("maxUnavailable")), desired, 25, false),
            )
        };
        if max_surge == 0 && max_unavailable == 0 {
            max_unavailable = 1;
        }
        max_surge = max_surge.max(0);
        let paused = d.pointer("/spec/paused").and_then(Value::as_bool) == Some(true);

        let mut all: Vec<Value> =
            super::replicaset::owned(cl, &d, &crate::registry::GroupResource::new("apps", "replicasets"))
                .into_iter()
                .map(|a| (*a).clone())
                .collect();
        all.sort_by_key(|rs| {
            (revision(rs), rs.pointer("/metadata/creationTimestamp").and_then(Value::as_str).unwrap_or("").to_string())
        });
        let new_idx = all.iter().position(|rs| same_template(rs, &template));
        let mut created_new: Option<String> = None;
        let mut new_rs: Option<Value> = new_idx.map(|i| all.remove(i));
        let mut old: Vec<Value> = all;
        let old_total: i64 = old.iter().map(replicas_of).sum();

        if new_rs.is_none() && !paused {
            let initial = if recreate {
                if old_total > 0 || old.iter().any(|r| status_i(r, "replicas") > 0) { 0 } else { desired }
            } else if old_total == 0 {
                desired
            } else {
                desired.min((desired + max_surge - old_total).max(0))
            };
            let next_rev = old.iter().map(revision).max().unwrap_or(0) + 1;
            let mut labels =
                template.pointer("/metadata/labels").and_then(Value::as_object).cloned().unwrap_or_default();
            labels.insert("pod-template-hash".into(), hash.clone().into());
            let mut rs_template = template.clone();
            if let Some(m) = crate::meta::meta_mut(&mut rs_template) {
                m.insert("labels".into(), Value::Object(labels.clone()));
            }
            let mut selector = d.pointer("/spec/selector").cloned().unwrap_or_else(|| json!({}));
            if let Some(sel) = selector.as_object_mut() {
                let ml = sel.entry("matchLabels").or_insert_with(|| json!({}));
                if let Some(ml) = ml.as_object_mut() {
                    ml.insert("pod-template-hash".into(), hash.clone().into());
                }
            }
            let name = format!("{}-{hash}", key.name);
            let rs = json!({
                "apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": name, "namespace": key.namespace, "labels": Value::Object(labels),
                    "annotations": {REVISION: next_rev.to_string(),
                        "deployment.kubernetes.io/desired-replicas": desired.to_string(),
                        "deployment.kubernetes.io/max-replicas": (desired + max_surge).to_string()},
                    "ownerReferences": [super::controller_ref(&d)]},
                "spec": {"replicas": initial, "minReadySeconds": d.pointer("/spec/minReadySeconds").cloned().unwrap_or(json!(0)),
                    "selector": selector, "template": rs_template},
            });
            match ops::create(cl, &rsdef, &key.namespace, rs, &WriteOpts::system(MANAGER)) {
                Ok(w) => {
                    event(
                        cl,
                        &d,
                        "Normal",
                        "ScalingReplicaSet",
                        &format!("Scaled up replica set {name} from 0 to {initial}"),
                        MANAGER,
                    );
                    created_new = Some(name);
                    new_rs = Some(w.object);
                }
                Err(e) => {
                    tracing::debug!(deployment = %key.name, error = %e.message, "creating the ReplicaSet failed");
                    return Some(Duration::from_secs(5));
                }
            }
        }

        // The new ReplicaSet carries the highest revision (a rollback makes an old one new
        // again), and the Deployment the revision of its new ReplicaSet.
        if let Some(n) = new_rs.clone() {
            let max_old = old.iter().map(revision).max().unwrap_or(0);
            if revision(&n) <= max_old {
                let mut next = n.clone();
                if let Some(m) = crate::meta::meta_mut(&mut next) {
                    let ann = m.entry("annotations").or_insert_with(|| json!({}));
                    if let Some(a) = ann.as_object_mut() {
                        a.insert(REVISION.into(), (max_old + 1).to_string().into());
                    }
                }
                if let Ok(w) =
                    ops::update(cl, &rsdef, &key.namespace, meta::name(&n), next, &WriteOpts::system(MANAGER))
                {
                    new_rs = Some(w.object);
                }
            }
            let rev = new_rs.as_ref().map(revision).unwrap_or(0).to_string();
            let current = d.pointer("/metadata/annotations").and_then(|a| a.get(REVISION)).and_then(Value::as_str);
            if current != Some(rev.as_str()) {
                let patch = json!({"metadata": {"annotations": {REVISION: rev}}});
                let body = serde_json::to_vec(&patch).unwrap_or_default();
                let _ = ops::patch(
                    cl,
                    &ddef,
                    &key.namespace,
                    &key.name,
                    crate::request::BodyFormat::MergePatch,
                    &body,
                    &WriteOpts::system(MANAGER),
                );
            }
        }

        if !paused && let Some(n) = new_rs.clone() {
            if recreate {
                let mut old_running = false;
                for o in old.iter_mut() {
                    if replicas_of(o) > 0
                        && let Some(u) = scale_rs(cl, &d, o, 0, max_surge)
                    {
                        *o = u;
                    }
                    if status_i(o, "replicas") > 0 {
                        old_running = true;
                    }
                }
                if !old_running && replicas_of(&n) != desired {
                    new_rs = scale_rs(cl, &d, &n, desired, max_surge).or(Some(n));
                }
            } else {
                // Scale the new ReplicaSet up within maxSurge.
                let total: i64 = old.iter().map(replicas_of).sum::<i64>() + replicas_of(&n);
                let mut target = replicas_of(&n);
                if target < desired {
                    let room = desired + max_surge - total;
                    if room > 0 {
                        target += room.min(desired - target);
                    }
                } else if target > desired {
                    target = desired;
                }
                let n2 =
                    if target != replicas_of(&n) { scale_rs(cl, &d, &n, target, max_surge).unwrap_or(n) } else { n };
                // Scale old ones down within maxUnavailable: unhealthy pods first, then as much
                // as availability allows.
                let min_available = desired - max_unavailable;
                let available: i64 = old.iter().map(|r| status_i(r, "availableReplicas")).sum::<i64>()
                    + status_i(&n2, "availableReplicas");
                let mut budget = (available - min_available).max(0);
                for o in old.iter_mut() {
                    let r = replicas_of(o);
                    if r == 0 {
                        continue;
                    }
                    let unhealthy = (r - status_i(o, "availableReplicas")).max(0);
                    let down = (unhealthy + budget).min(r);
                    budget = (budget - (down - unhealthy).max(0)).max(0);
                    if down > 0
                        && let Some(u) = scale_rs(cl, &d, o, r - down, max_surge)
                    {
                        *o = u;
                    }
                }
                new_rs = Some(n2);
            }
        }

        // Keep revisionHistoryLimit old ReplicaSets that are scaled to zero.
        let limit = d.pointer("/spec/revisionHistoryLimit").and_then(Value::as_i64).unwrap_or(10).max(0) as usize;
        let idle: Vec<&Value> = old.iter().filter(|r| replicas_of(r) == 0 && status_i(r, "replicas") == 0).collect();
        if idle.len() > limit {
            for r in &idle[..idle.len() - limit] {
                super::delete(cl, &rsdef, &key.namespace, meta::name(r));
            }
        }

        // Status.
        let rs_all: Vec<&Value> = old.iter().chain(new_rs.iter()).collect();
        let replicas: i64 = rs_all.iter().map(|r| status_i(r, "replicas")).sum();
        let ready: i64 = rs_all.iter().map(|r| status_i(r, "readyReplicas")).sum();
        let available: i64 = rs_all.iter().map(|r| status_i(r, "availableReplicas")).sum();
        let total_spec: i64 = rs_all.iter().map(|r| replicas_of(r)).sum();
        let updated = new_rs.as_ref().map_or(0, |r| status_i(r, "replicas"));
        let generation = d.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(1);
        let old_status = d.get("status").cloned().unwrap_or_else(|| json!({}));
        let now = meta::now();
        let now_s = jiff::Timestamp::now().as_second();
        let mut conds = conditions::of(Some(&old_status));
        if available >= desired - max_unavailable {
            conditions::set(
                &mut conds,
                Style::Workload,
                "Available",
                "True",
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.",
                &now,
            );
        } else {
            conditions::set(
                &mut conds,
                Style::Workload,
                "Available",
                "False",
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.",
                &now,
            );
        }
        let new_name = new_rs.as_ref().map(|r| meta::name(r).to_string()).unwrap_or_default();
        let deadline = d.pointer("/spec/progressDeadlineSeconds").and_then(Value::as_i64);
        let mut requeue = None;
        let complete = updated == desired && replicas == desired && available == desired;
        let progressed = updated > status_i(&d, "updatedReplicas")
            || replicas < status_i(&d, "replicas")
            || ready > status_i(&d, "readyReplicas")
            || available > status_i(&d, "availableReplicas")
            || old_status.get("observedGeneration").and_then(Value::as_i64) != Some(generation);
        let deadline_fault = {
            let rules = cl.faults();
            template
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .chain(template.pointer("/spec/initContainers").and_then(Value::as_array).into_iter().flatten())
                .filter_map(|c| c.get("image").and_then(Value::as_str))
                .any(|img| faults::find(&rules, img) == Some(Fault::Deadline))
        };
        if deadline.is_some() && !paused {
            let cur = conditions::find(&conds, "Progressing").cloned();
            let timed_out = |c: &Option<Value>| -> bool {
                let Some(limit) = deadline else { return false };
                c.as_ref()
                    .and_then(|c| c.get("lastUpdateTime").and_then(Value::as_str).and_then(super::unix))
                    .is_some_and(|t| now_s >= t + limit)
            };
            if complete && !deadline_fault {
                conditions::set(
                    &mut conds,
                    Style::Workload,
                    "Progressing",
                    "True",
                    "NewReplicaSetAvailable",
                    &format!("ReplicaSet {new_name:?} has successfully progressed."),
                    &now,
                );
            } else if deadline_fault || (!progressed && created_new.is_none() && timed_out(&cur)) {
                conditions::set(
                    &mut conds,
                    Style::Workload,
                    "Progressing",
                    "False",
                    "ProgressDeadlineExceeded",
                    &format!("ReplicaSet {new_name:?} has timed out progressing."),
                    &now,
                );
            } else if let Some(n) = &created_new {
                conditions::set(
                    &mut conds,
                    Style::Workload,
                    "Progressing",
                    "True",
                    "NewReplicaSetCreated",
                    &format!("Created new replica set {n:?}"),
                    &now,
                );
            } else if progressed || cur.is_none() {
                conditions::set(
                    &mut conds,
                    Style::Workload,
                    "Progressing",
                    "True",
                    "ReplicaSetUpdated",
                    &format!("ReplicaSet {new_name:?} is progressing."),
                    &now,
                );
                if let Some(c) = conds.iter_mut().find(|c| c.get("type").and_then(Value::as_str) == Some("Progressing"))
                    && let Some(m) = c.as_object_mut()
                {
                    m.insert("lastUpdateTime".into(), now.clone().into());
                }
            }
            // Look again when the deadline passes.
            let c = conditions::find(&conds, "Progressing");
            let still = c.and_then(|c| c.get("status")).and_then(Value::as_str) == Some("True")
                && c.and_then(|c| c.get("reason")).and_then(Value::as_str) != Some("NewReplicaSetAvailable");
            if still
                && let (Some(limit), Some(t)) =
                    (deadline, c.and_then(|c| c.get("lastUpdateTime")).and_then(Value::as_str).and_then(super::unix))
            {
                requeue = Some(Duration::from_secs((t + limit - now_s).max(1) as u64));
            }
        }
        let failure =
            new_rs.as_ref().and_then(|r| conditions::find(&conditions::of(r.get("status")), "ReplicaFailure").cloned());
        match failure {
            Some(f) if f.get("status").and_then(Value::as_str) == Some("True") => {
                let msg = f.get("message").and_then(Value::as_str).unwrap_or("");
                conditions::set(&mut conds, Style::Workload, "ReplicaFailure", "True", "FailedCreate", msg, &now);
            }
            _ => conditions::remove(&mut conds, "ReplicaFailure"),
        }
        let order = ["Available", "Progressing", "ReplicaFailure"];
        conds.sort_by_key(|c| {
            order.iter().position(|o| c.get("type").and_then(Value::as_str) == Some(o)).unwrap_or(order.len())
        });
        let mut status = Map::new();
        status.insert("observedGeneration".into(), generation.into());
        status.insert("replicas".into(), replicas.into());
        status.insert("updatedReplicas".into(), updated.into());
        status.insert("readyReplicas".into(), ready.into());
        status.insert("availableReplicas".into(), available.into());
        status.insert("unavailableReplicas".into(), (total_spec - available).max(0).into());
        status.insert("conditions".into(), Value::Array(conds));
        if collision > 0 {
            status.insert("collisionCount".into(), collision.into());
        }
        // Zero counts are omitted, as the real controller's JSON does.
        status.retain(|k, v| k == "observedGeneration" || k == "conditions" || v.as_i64() != Some(0));
        super::write_status(cl, &ddef, &d, Value::Object(status), MANAGER);
        let _: Option<Arc<Value>> = None;
        requeue
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn surge_and_unavailable_round_like_upstream() {
        assert_eq!(resolve(Some(&json!("25%")), 10, 25, true), 3);
        assert_eq!(resolve(Some(&json!("25%")), 10, 25, false), 2);
        assert_eq!(resolve(None, 1, 25, true), 1);
        assert_eq!(resolve(None, 1, 25, false), 0);
        assert_eq!(resolve(Some(&json!(2)), 10, 25, true), 2);
        assert_eq!(safe_encode("12"), "56");
        assert_ne!(template_hash(&json!({"a": 1}), 0), template_hash(&json!({"a": 2}), 0));
    }
}
