//! DaemonSets, as kube-controller-manager's daemon controller runs them
//! (pkg/controller/daemon/daemon_controller.go, update.go, util/daemonset_util.go):
//!
//! - One pod per node that should run it: a Ready node whose labels match the template's
//!   `nodeSelector` and `requiredDuringSchedulingIgnoredDuringExecution` node affinity
//!   (`matchExpressions` with In/NotIn/Exists/DoesNotExist/Gt/Lt, `matchFields` on
//!   `metadata.name`), and whose `NoSchedule`/`NoExecute` taints the pod tolerates. Cordoned
//!   nodes count, as upstream (daemon pods tolerate `node.kubernetes.io/unschedulable`).
//! - The pod carries the tolerations upstream adds (not-ready, unreachable, disk/memory/pid
//!   pressure, unschedulable; network-unavailable with host networking), the labels
//!   `controller-revision-hash` and `pod-template-generation`, a controller reference, and is
//!   pinned to its node by node affinity on `metadata.name` (upstream's
//!   `ReplaceDaemonSetPodNodeNameNodeAffinity`); the controller binds it there as the default
//!   scheduler would.
//! - Pods on nodes that should not run one, extra pods on a node, and failed pods are deleted.
//! - Updates: a ControllerRevision per template (`<name>-<hash>`), `RollingUpdate` (old pods
//!   replaced node by node within `maxUnavailable`, default 1, or with `maxSurge` a new pod
//!   beside the old one, which goes once the new one is ready) or `OnDelete` (only new pods get
//!   the new template).
//! - Status as upstream writes it: `currentNumberScheduled`, `numberMisscheduled`,
//!   `desiredNumberScheduled`, `numberReady` (always present), `updatedNumberScheduled`,
//!   `numberAvailable`, `numberUnavailable`, `observedGeneration`; `kubectl rollout status`
//!   works on them.
//!
//! Differences: `minReadySeconds` is not waited for (available = ready); preferred affinity and
//! pod (anti-)affinity are ignored.

use super::deployment::{resolve, template_hash};
use super::event;
use super::replicaset::{owned_pods, pod_from_template};
use super::statefulset::ensure_revision;
use super::{Controller, Key, def};
use crate::cluster::Cluster;
use crate::conditions::pod_ready;
use crate::meta;
use crate::ops::{self, WriteOpts};
use crate::registry::GroupResource;
use crate::store::{Change, EventType};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

const MANAGER: &str = "daemonset-controller";
const REVISION_LABEL: &str = "controller-revision-hash";
const GENERATION_LABEL: &str = "pod-template-generation";

pub struct DaemonSetController;

fn daemonsets() -> GroupResource {
    GroupResource::new("apps", "daemonsets")
}

/// `nodeSelectorRequirement` against a node's labels (or, for `matchFields`, its name).
fn requirement_matches(req: &Value, value_of: &dyn Fn(&str) -> Option<String>) -> bool {
    let key = req.get("key").and_then(Value::as_str).unwrap_or("");
    let values: Vec<&str> =
        req.get("values").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
    let v = value_of(key);
    match req.get("operator").and_then(Value::as_str).unwrap_or("") {
        "In" => v.is_some_and(|v| values.contains(&v.as_str())),
        "NotIn" => v.is_none_or(|v| !values.contains(&v.as_str())),
        "Exists" => v.is_some(),
        "DoesNotExist" => v.is_none(),
        op @ ("Gt" | "Lt") => {
            let (Some(v), Some(bound)) =
                (v.and_then(|v| v.parse::<i64>().ok()), values.first().and_then(|b| b.parse::<i64>().ok()))
            else {
                return false;
            };
            if op == "Gt" { v > bound } else { v < bound }
        }
        _ => false,
    }
}

/// Whether a pod spec's `nodeSelector` and required node affinity admit a node.
pub(crate) fn node_matches(spec: &Value, node: &Value) -> bool {
    let labels = meta::labels(node).cloned().unwrap_or_default();
    let label = |k: &str| labels.get(k).and_then(Value::as_str).map(str::to_string);
    let name = meta::name(node).to_string();
    let field = |k: &str| (k == "metadata.name").then(|| name.clone());
    if let Some(sel) = spec.get("nodeSelector").and_then(Value::as_object)
        && !sel.iter().all(|(k, v)| labels.get(k) == Some(v))
    {
        return false;
    }
    let terms = spec
        .pointer("/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
        .and_then(Value::as_array);
    match terms {
        None => true,
        // The terms are ORed; a term's requirements ANDed; an empty term matches nothing.
        Some(terms) => terms.iter().any(|t| {
            let exprs = t.get("matchExpressions").and_then(Value::as_array).cloned().unwrap_or_default();
            let fields = t.get("matchFields").and_then(Value::as_array).cloned().unwrap_or_default();
            (!exprs.is_empty() || !fields.is_empty())
                && exprs.iter().all(|r| requirement_matches(r, &label))
                && fields.iter().all(|r| requirement_matches(r, &field))
        }),
    }
}

/// `ToleratesTaint` over the taints with one of `effects`.
pub(crate) fn tolerates(tolerations: &[Value], taints: &[Value], effects: &[&str]) -> bool {
    taints.iter().filter(|t| effects.contains(&t.get("effect").and_then(Value::as_str).unwrap_or(""))).all(|taint| {
        let tk = taint.get("key").and_then(Value::as_str).unwrap_or("");
        let tv = taint.get("value").and_then(Value::as_str).unwrap_or("");
        let te = taint.get("effect").and_then(Value::as_str).unwrap_or("");
        tolerations.iter().any(|t| {
            let effect = t.get("effect").and_then(Value::as_str).unwrap_or("");
            let key = t.get("key").and_then(Value::as_str).unwrap_or("");
            let op = t.get("operator").and_then(Value::as_str).unwrap_or("Equal");
            (effect.is_empty() || effect == te)
                && (key.is_empty() && op == "Exists" || key == tk)
                && match op {
                    "Exists" => true,
                    _ => t.get("value").and_then(Value::as_str).unwrap_or("") == tv,
                }
        })
    })
}

/// The tolerations every daemon pod gets (`AddOrUpdateDaemonPodTolerations`).
fn daemon_tolerations(spec: &Value) -> Vec<Value> {
    let mut out = vec![
        json!({"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}),
        json!({"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"}),
        json!({"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"}),
        json!({"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"}),
        json!({"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"}),
        json!({"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}),
    ];
    if spec.get("hostNetwork").and_then(Value::as_bool) == Some(true) {
        out.push(
            json!({"key": "node.kubernetes.io/network-unavailable", "operator": "Exists", "effect": "NoSchedule"}),
        );
    }
    out
}

/// Whether a node should run the DaemonSet's pod, and whether a pod already there may stay
/// (`NodeShouldRunDaemonPod`: an untolerated NoSchedule taint keeps new pods off, only NoExecute
/// evicts).
fn should_run(ds: &Value, node: &Value) -> (bool, bool) {
    let spec = ds.pointer("/spec/template/spec").cloned().unwrap_or_default();
    let ready = crate::conditions::is_true(&crate::conditions::of(node.get("status")), "Ready");
    let mut tolerations = spec.get("tolerations").and_then(Value::as_array).cloned().unwrap_or_default();
    tolerations.extend(daemon_tolerations(&spec));
    let taints = node.pointer("/spec/taints").and_then(Value::as_array).cloned().unwrap_or_default();
    let fits = ready && !meta::is_deleting(node) && node_matches(&spec, node);
    (
        fits && tolerates(&tolerations, &taints, &["NoSchedule", "NoExecute"]),
        fits && tolerates(&tolerations, &taints, &["NoExecute"]),
    )
}

/// A new daemon pod for a node.
fn new_pod(ds: &Value, node: &str, hash: &str) -> Value {
    let template = ds.pointer("/spec/template").cloned().unwrap_or_else(|| json!({}));
    let generation = ds.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(1);
    let extra =
        [(REVISION_LABEL.to_string(), hash.to_string()), (GENERATION_LABEL.to_string(), generation.to_string())];
    let mut pod = pod_from_template(ds, &template, None, &extra);
    if let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) {
        let pin = json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]});
        let affinity = spec.entry("affinity").or_insert_with(|| json!({}));
        affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] =
            json!({"nodeSelectorTerms": [pin]});
        let host_network = spec.get("hostNetwork").cloned().unwrap_or(Value::Null);
        let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
        if let Some(list) = tolerations.as_array_mut() {
            for t in daemon_tolerations(&json!({"hostNetwork": host_network})) {
                let same = |x: &Value| x.get("key") == t.get("key") && x.get("effect") == t.get("effect");
                if !list.iter().any(same) {
                    list.push(t);
                }
            }
        }
    }
    pod
}

fn pod_hash(p: &Value) -> &str {
    meta::labels(p).and_then(|l| l.get(REVISION_LABEL)).and_then(Value::as_str).unwrap_or("")
}

fn node_of(p: &Value) -> String {
    // A pod not yet bound is pinned by its affinity.
    p.pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .or_else(|| {
            p.pointer("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0/matchFields/0/values/0")
                .and_then(Value::as_str)
        })
        .unwrap_or("")
        .to_string()
}

impl DaemonSetController {
    fn sync(&self, cl: &Cluster, key: &Key) -> Option<Duration> {
        let ds = super::get(cl, key)?;
        if meta::is_deleting(&ds) {
            return None;
        }
        let dsdef = def(cl, "apps", "daemonsets")?;
        let pdef = def(cl, "", "pods")?;
        let template = ds.pointer("/spec/template").cloned().unwrap_or_else(|| json!({}));
        let hash = template_hash(&template, ds.pointer("/status/collisionCount").and_then(Value::as_i64).unwrap_or(0));
        ensure_revision(cl, &ds, &hash, MANAGER);
        let (nodes, _) = cl.store.list(&GroupResource::new("", "nodes"), None);
        let pods: Vec<Arc<Value>> = owned_pods(cl, &ds).into_iter().filter(|p| !meta::is_deleting(p)).collect();
        let mut by_node: BTreeMap<String, Vec<Arc<Value>>> = BTreeMap::new();
        for p in &pods {
            by_node.entry(node_of(p)).or_default().push(p.clone());
        }
        let mut requeue = None;
        let delete = |p: &Value| {
            super::delete(cl, &pdef, &key.namespace, meta::name(p));
            event(cl, &ds, "Normal", "SuccessfulDelete", &format!("Deleted pod: {}", meta::name(p)), MANAGER);
        };

        // Which nodes should run a pod; misscheduled pods, duplicates and failed pods go.
        let mut desired = 0usize;
        let mut misscheduled = 0usize;
        let mut wanted: Vec<String> = vec![];
        for node in &nodes {
            let name = meta::name(node).to_string();
            let here = by_node.get(&name).cloned().unwrap_or_default();
            let (run, stay) = should_run(&ds, node);
            if run {
                desired += 1;
                wanted.push(name.clone());
                let (failed, alive): (Vec<_>, Vec<_>) =
                    here.iter().partition(|p| p.pointer("/status/phase").and_then(Value::as_str) == Some("Failed"));
                for p in &failed {
                    delete(p);
                    requeue = Some(Duration::from_secs(1));
                }
                // Keep the oldest pod of the current template and the oldest of an older one
                // (both exist only while a surge replaces the old); the rest go.
                let mut alive: Vec<&Arc<Value>> = alive;
                alive.sort_by_key(|p| meta::meta_str(p, "creationTimestamp").unwrap_or("").to_string());
                let newest = alive.iter().find(|p| pod_hash(p) == hash).map(|p| (*p).clone());
                let oldest_old = alive.iter().find(|p| pod_hash(p) != hash).map(|p| (*p).clone());
                for p in &alive {
                    let keep =
                        [&newest, &oldest_old].iter().any(|k| k.as_ref().is_some_and(|k| meta::uid(k) == meta::uid(p)));
                    if !keep {
                        delete(p);
                    }
                }
                // The node's pods: the current one first.
                by_node.insert(name, newest.into_iter().chain(oldest_old).collect());
            } else if !here.is_empty() {
                misscheduled += 1;
                if !stay {
                    for p in &here {
                        delete(p);
                    }
                    by_node.remove(&name);
                }
            }
        }
        // Pods on nodes that are gone.
        let known: std::collections::BTreeSet<String> = nodes.iter().map(|n| meta::name(n).to_string()).collect();
        for (n, ps) in &by_node {
            if !known.contains(n) {
                for p in ps {
                    delete(p);
                }
            }
        }

        // Rolling update (update.go `rollingUpdate`): with maxSurge, a node gets its new pod
        // beside the old one, which goes once the new one is ready; otherwise old pods are
        // deleted within maxUnavailable and replaced.
        let on_delete = ds.pointer("/spec/updateStrategy/type").and_then(Value::as_str) == Some("OnDelete");
        let is_new = |p: &Value| pod_hash(p) == hash;
        let mut surge_nodes: Vec<String> = vec![];
        if !on_delete {
            let ru = ds.pointer("/spec/updateStrategy/rollingUpdate");
            let max_surge = resolve(ru.and_then(|r| r.get("maxSurge")), desired as i64, 0, true).max(0);
            if max_surge > 0 {
                let mut surging = wanted
                    .iter()
                    .filter(|n| by_node.get(*n).is_some_and(|ps| ps.len() == 2 && !pod_ready(&ps[0])))
                    .count() as i64;
                for n in &wanted {
                    let Some(ps) = by_node.get(n).cloned() else { continue };
                    match ps.as_slice() {
                        [new, old] if is_new(new) && pod_ready(new) => {
                            delete(old);
                            by_node.insert(n.clone(), vec![new.clone()]);
                        }
                        [old] if !is_new(old) && (surging < max_surge || !pod_ready(old)) => {
                            surge_nodes.push(n.clone());
                            surging += 1;
                        }
                        _ => {}
                    }
                }
            } else {
                let max_unavailable = match ru.and_then(|r| r.get("maxUnavailable")) {
                    None => 1,
                    v => resolve(v, desired as i64, 0, false).max(0),
                }
                .max(if desired > 0 { 1 } else { 0 });
                let unavailable = wanted
                    .iter()
                    .filter(|n| by_node.get(*n).and_then(|ps| ps.first()).is_none_or(|p| !pod_ready(p)))
                    .count() as i64;
                let mut budget = max_unavailable - unavailable;
                // Old unavailable pods first: replacing them costs nothing.
                let mut old: Vec<(bool, String)> = wanted
                    .iter()
                    .filter_map(|n| {
                        let p = by_node.get(n)?.first()?;
                        (!is_new(p)).then(|| (pod_ready(p), n.clone()))
                    })
                    .collect();
                old.sort();
                for (ready, n) in old {
                    if ready && budget <= 0 {
                        break;
                    }
                    if let Some(ps) = by_node.get(&n).cloned() {
                        for p in &ps {
                            delete(p);
                        }
                        by_node.insert(n, vec![]);
                        if ready {
                            budget -= 1;
                        }
                    }
                }
            }
        }

        // Create the missing pods, bound to their nodes.
        for n in &wanted {
            if by_node.get(n).is_some_and(|ps| !ps.is_empty()) && !surge_nodes.contains(n) {
                continue;
            }
            match ops::create(cl, &pdef, &key.namespace, new_pod(&ds, n, &hash), &WriteOpts::system(MANAGER)) {
                Ok(w) => {
                    let pname = meta::name(&w.object).to_string();
                    event(cl, &ds, "Normal", "SuccessfulCreate", &format!("Created pod: {pname}"), MANAGER);
                    let _ = ops::bind(cl, &pdef, &key.namespace, &pname, n);
                    let mut ps = vec![Arc::new(w.object)];
                    ps.extend(by_node.remove(n).unwrap_or_default());
                    by_node.insert(n.clone(), ps);
                }
                Err(e) => {
                    event(cl, &ds, "Warning", "FailedCreate", &format!("Error creating: {}", e.message), MANAGER);
                    requeue = Some(Duration::from_secs(5));
                }
            }
        }

        // Status.
        let on_wanted = |f: &dyn Fn(&Value) -> bool| {
            wanted.iter().filter(|n| by_node.get(*n).is_some_and(|ps| ps.iter().any(|p| f(p)))).count()
        };
        let current = on_wanted(&|_| true);
        let ready = on_wanted(&|p| pod_ready(p));
        let updated = on_wanted(&|p| pod_hash(p) == hash);
        let mut status = Map::new();
        status.insert("currentNumberScheduled".into(), current.into());
        status.insert("numberMisscheduled".into(), misscheduled.into());
        status.insert("desiredNumberScheduled".into(), desired.into());
        status.insert("numberReady".into(), ready.into());
        status.insert("observedGeneration".into(), ds.pointer("/metadata/generation").cloned().unwrap_or(json!(1)));
        for (k, v) in
            [("updatedNumberScheduled", updated), ("numberAvailable", ready), ("numberUnavailable", desired - ready)]
        {
            if v != 0 {
                status.insert(k.into(), v.into());
            }
        }
        if let Some(c) = ds.pointer("/status/collisionCount") {
            status.insert("collisionCount".into(), c.clone());
        }
        if let Some(c) = ds.pointer("/status/conditions") {
            status.insert("conditions".into(), c.clone());
        }
        super::write_status(cl, &dsdef, &ds, Value::Object(status), MANAGER);
        requeue
    }
}

impl Controller for DaemonSetController {
    fn keys_for(&self, cl: &Cluster, c: &Change, out: &mut Vec<Key>) {
        if c.gr == daemonsets() && c.kind != EventType::Deleted {
            out.push(Key::of(c));
        } else if c.gr.group.is_empty() && c.gr.resource == "pods" {
            for obj in [Some(&c.object), c.prev.as_ref()].into_iter().flatten() {
                if let Some(r) = obj.pointer("/metadata/ownerReferences").and_then(Value::as_array)
                    && let Some(owner) = r.iter().find(|r| {
                        r.get("controller").and_then(Value::as_bool) == Some(true)
                            && r.get("kind").and_then(Value::as_str) == Some("DaemonSet")
                    })
                    && let Some(name) = owner.get("name").and_then(Value::as_str)
                {
                    out.push(Key::new("apps", "daemonsets", &c.namespace, name));
                }
            }
        } else if c.gr.group.is_empty() && c.gr.resource == "nodes" {
            // A node came, went or changed: every DaemonSet looks again.
            self.all_keys(cl, out);
        }
    }

    fn all_keys(&self, cl: &Cluster, out: &mut Vec<Key>) {
        let (all, _) = cl.store.list(&daemonsets(), None);
        out.extend(all.iter().map(|o| Key::new("apps", "daemonsets", meta::namespace(o), meta::name(o))));
    }

    fn reconcile(&self, cl: &Cluster, key: &Key) -> Option<Duration> {
        self.sync(cl, key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, labels: Value, taints: Value) -> Value {
        json!({"metadata": {"name": name, "labels": labels}, "spec": {"taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    }

    #[test]
    fn selectors_affinity_and_taints() {
        let n = node("n1", json!({"disk": "ssd", "zone": "a", "cores": "8"}), json!([]));
        assert!(node_matches(&json!({"nodeSelector": {"disk": "ssd"}}), &n));
        assert!(!node_matches(&json!({"nodeSelector": {"disk": "hdd"}}), &n));
        let aff = |exprs: Value| json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": exprs}]}}}});
        assert!(node_matches(&aff(json!([{"key": "zone", "operator": "In", "values": ["a", "b"]}])), &n));
        assert!(!node_matches(&aff(json!([{"key": "zone", "operator": "NotIn", "values": ["a"]}])), &n));
        assert!(node_matches(&aff(json!([{"key": "cores", "operator": "Gt", "values": ["4"]}])), &n));
        assert!(!node_matches(&aff(json!([{"key": "gpu", "operator": "Exists"}])), &n));
        let tainted = node("n2", json!({}), json!([{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]));
        let ds = json!({"spec": {"template": {"spec": {}}}});
        assert_eq!(should_run(&ds, &tainted), (false, true), "NoSchedule: no new pod, the old one stays");
        let evicting = node("n5", json!({}), json!([{"key": "dedicated", "effect": "NoExecute"}]));
        assert_eq!(should_run(&ds, &evicting), (false, false));
        let tol = json!({"spec": {"template": {"spec": {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "db"}]}}}});
        assert!(should_run(&tol, &tainted).0);
        let cordoned =
            node("n3", json!({}), json!([{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]));
        assert!(should_run(&ds, &cordoned).0, "daemon pods tolerate cordoned nodes");
        let prefer = node("n4", json!({}), json!([{"key": "x", "effect": "PreferNoSchedule"}]));
        assert!(should_run(&ds, &prefer).0);
    }

    #[test]
    fn pods_are_pinned_and_tolerant() {
        let ds = json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "d", "namespace": "n", "uid": "u", "generation": 2},
            "spec": {"template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        let p = new_pod(&ds, "node-1", "abc");
        assert_eq!(p["metadata"]["labels"][REVISION_LABEL], "abc");
        assert_eq!(p["metadata"]["labels"][GENERATION_LABEL], "2");
        assert_eq!(
            p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
                [0]["matchFields"][0]["values"][0],
            "node-1"
        );
        assert_eq!(p["spec"]["tolerations"].as_array().unwrap().len(), 6);
        assert_eq!(node_of(&p), "node-1");
    }
}
