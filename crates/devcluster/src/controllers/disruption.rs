//! The disruption controller (kubernetes pkg/controller/disruption/disruption.go): the status of
//! every PodDisruptionBudget, which the eviction subresource (src/eviction.rs) reads and
//! decrements; the budget helpers both use are in src/pdb.rs.
//!
//! For a budget it finds the pods its selector matches in its namespace (a null selector matches
//! none, an empty one every pod, as policy/v1 says), then:
//! - `expectedPods` and `desiredHealthy`: an integer `minAvailable` is the desired count and the
//!   pods found are the expected ones; a percentage `minAvailable`, or any `maxUnavailable`, needs
//!   the scale of the pods' controllers (`getExpectedScale`): each pod's controller reference is
//!   resolved as upstream's finders do (ReplicationController, Deployment through its ReplicaSet,
//!   ReplicaSet, StatefulSet, then any kind with a `scale` subresource), and their
//!   `spec.replicas` are summed. Percentages round up (`GetScaledValueFromIntOrPercent`).
//! - `currentHealthy`: pods that are Ready, not being deleted, and not in `disruptedPods`.
//! - `disruptedPods`: the eviction handler's entries are kept until the pod is seen deleting
//!   and dropped 2 minutes (`DeletionTimeout`) after the eviction if it never was, with a
//!   `NotDeleted` event; the controller looks again when the first entry expires.
//! - `disruptionsAllowed` = currentHealthy - desiredHealthy (0 when negative or when no pod is
//!   expected), `observedGeneration`, and the `DisruptionAllowed` condition
//!   (`SufficientPods`/`InsufficientPods`, k8s.io/component-helpers apps/poddisruptionbudget).
//! - A budget that cannot be computed (a pod without a known controller for a percentage, a
//!   controller kind without a scale subresource, an invalid selector or value) gets
//!   `disruptionsAllowed: 0` and `DisruptionAllowed=False`, reason `SyncFailed`, with the error
//!   as message (`failSafe`). Unmanaged pods only get a `UnmanagedPods` warning event.
//!
//! Time: `disruptedPods` entries are written and expired with the controllers' clock
//! (`Cluster::options.clock`), so `DevCluster::advance_clock(2 minutes)` expires them; condition
//! transition times are the wall clock, as upstream's `SetStatusCondition`.

use super::{Controller, Key, def};
use crate::cluster::Cluster;
use crate::meta;
use crate::pdb::{
    GROUP, RESOURCE, conditions_up_to_date, guards, int, selector_of, set_condition,
    update_disruption_allowed_condition,
};
use crate::store::{Change, EventType};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

pub struct DisruptionController;

const MANAGER: &str = "disruption-controller";

/// How long an eviction's `disruptedPods` entry counts before the pod must be seen deleting
/// (`DeletionTimeout`).
pub const DELETION_TIMEOUT_SECS: i64 = 120;

/// `intstr.GetScaledValueFromIntOrPercent`, with its error messages.
fn scaled(v: &Value, total: i64, round_up: bool) -> Result<i64, String> {
    match v {
        Value::Number(n) => Ok(n.as_i64().unwrap_or(0)),
        Value::String(s) => {
            let Some(p) = s.strip_suffix('%') else {
                return Err("invalid value for IntOrString: invalid type: string is not a percentage".into());
            };
            let pct: i64 = p.parse().map_err(|_| {
                format!(
                    "invalid value for IntOrString: invalid value {s:?}: strconv.Atoi: parsing {p:?}: invalid syntax"
                )
            })?;
            let x = pct * total;
            Ok(if round_up { x.div_euclid(100) + i64::from(x.rem_euclid(100) != 0) } else { x.div_euclid(100) })
        }
        _ => Err("invalid value for IntOrString: invalid type: neither int nor percentage".into()),
    }
}

/// A pod's controller reference: (apiVersion, kind, name, uid).
fn controller_of(obj: &Value) -> Option<(&str, &str, &str, &str)> {
    let r = obj
        .pointer("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))?;
    let s = |f: &str| r.get(f).and_then(Value::as_str).unwrap_or("");
    Some((s("apiVersion"), s("kind"), s("name"), s("uid")))
}

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

fn replicas(o: &Value) -> i64 {
    o.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1)
}

/// The controller of a pod and its scale, by upstream's finders in their order
/// (`getPodReplicationController`, `getPodDeployment`, `getPodReplicaSet`, `getPodStatefulSet`,
/// `getScaleController`). `Ok(None)`: no controller found.
fn find_controller(
    cl: &Cluster,
    ns: &str,
    (api_version, kind, name, uid): (&str, &str, &str, &str),
) -> Result<Option<(String, i64)>, String> {
    let group = group_of(api_version);
    let get = |g: &str, r: &str, n: &str| cl.store.get(&crate::registry::GroupResource::new(g, r), ns, n);
    let found = |o: &Value| (meta::uid(o).to_string(), replicas(o));
    match (group, kind) {
        ("", "ReplicationController") => {
            if let Some(rc) = get("", "replicationcontrollers", name).filter(|o| meta::uid(o) == uid) {
                return Ok(Some(found(&rc)));
            }
        }
        ("apps", "ReplicaSet") => {
            if let Some(rs) = get("apps", "replicasets", name).filter(|o| meta::uid(o) == uid) {
                match controller_of(&rs) {
                    Some((av, "Deployment", dname, duid)) if group_of(av) == "apps" => {
                        if let Some(d) = get("apps", "deployments", dname).filter(|o| meta::uid(o) == duid) {
                            return Ok(Some(found(&d)));
                        }
                    }
                    _ => return Ok(Some(found(&rs))),
                }
            }
        }
        ("apps", "StatefulSet") => {
            if let Some(ss) = get("apps", "statefulsets", name).filter(|o| meta::uid(o) == uid) {
                return Ok(Some(found(&ss)));
            }
        }
        _ => {}
    }
    // getScaleController: any kind the API serves, through its scale subresource.
    let Some(d) = cl.registry.find_kind(api_version, kind) else { return Ok(None) };
    if d.scale.is_none() {
        return Err(format!(
            "{} does not implement the scale subresource",
            crate::errors::qualified(&d.group, &d.plural)
        ));
    }
    match crate::scale::get(cl, &d, ns, name) {
        Ok(s) if meta::uid(&s) == uid => Ok(Some((uid.to_string(), int(s.pointer("/spec/replicas"))))),
        Ok(_) => Ok(None),
        Err(e) if e.code == 404 => Ok(None),
        Err(e) => Err(e.message),
    }
}

/// `getExpectedScale`: the sum of the scales of the pods' controllers, and the pods without one.
fn expected_scale(cl: &Cluster, ns: &str, pods: &[Arc<Value>]) -> Result<(i64, Vec<String>), String> {
    let mut scales: BTreeMap<String, i64> = BTreeMap::new();
    let mut unmanaged = vec![];
    for p in pods {
        let Some(cref) = controller_of(p) else {
            unmanaged.push(meta::name(p).to_string());
            continue;
        };
        if scales.contains_key(cref.3) {
            continue;
        }
        match find_controller(cl, ns, cref)? {
            Some((uid, n)) => {
                scales.insert(uid, n);
            }
            None => return Err(format!("found no controllers for pod {:?}", meta::name(p))),
        }
    }
    Ok((scales.values().sum(), unmanaged))
}

/// `getExpectedPodCount`: (expectedCount, desiredHealthy, unmanaged pods).
fn expected_pod_count(cl: &Cluster, pdb: &Value, pods: &[Arc<Value>]) -> Result<(i64, i64, Vec<String>), String> {
    let ns = meta::namespace(pdb);
    if let Some(mu) = pdb.pointer("/spec/maxUnavailable").filter(|v| !v.is_null()) {
        let (expected, unmanaged) = expected_scale(cl, ns, pods)?;
        let max_unavailable = scaled(mu, expected, true)?;
        return Ok((expected, (expected - max_unavailable).max(0), unmanaged));
    }
    match pdb.pointer("/spec/minAvailable") {
        Some(Value::Number(n)) => Ok((pods.len() as i64, n.as_i64().unwrap_or(0), vec![])),
        Some(v @ Value::String(_)) => {
            let (expected, unmanaged) = expected_scale(cl, ns, pods)?;
            Ok((expected, scaled(v, expected, true)?, unmanaged))
        }
        _ => Ok((0, 0, vec![])),
    }
}

fn event(cl: &Cluster, obj: &Value, type_: &str, reason: &str, message: &str) {
    super::event(cl, obj, type_, reason, message, MANAGER);
}

fn sync(cl: &Cluster, pdb: &Value) -> Option<Duration> {
    match try_sync(cl, pdb) {
        Ok(recheck) => recheck,
        Err(e) => {
            // failSafe: no disruptions until the budget can be computed.
            let mut status = pdb.get("status").and_then(Value::as_object).cloned().unwrap_or_default();
            status.insert("disruptionsAllowed".into(), 0.into());
            set_condition(&mut status, "False", "SyncFailed", &e);
            write_status(cl, pdb, status);
            // As upstream, a fail-safe that was written is not retried until something changes.
            None
        }
    }
}

fn try_sync(cl: &Cluster, pdb: &Value) -> Result<Option<Duration>, String> {
    let ns = meta::namespace(pdb);
    let sel = selector_of(pdb)?;
    let pods: Vec<Arc<Value>> =
        super::list_ns(cl, "", "pods", ns).into_iter().filter(|p| sel.matches(meta::labels(p))).collect();
    if pods.is_empty() {
        event(cl, pdb, "Normal", "NoPods", "No matching pods found");
    }
    let (expected, desired, unmanaged) = expected_pod_count(cl, pdb, &pods).inspect_err(|e| {
        event(
            cl,
            pdb,
            "Warning",
            "CalculateExpectedPodCountFailed",
            &format!("Failed to calculate the number of expected pods: {e}"),
        )
    })?;
    if !unmanaged.is_empty() {
        let sel_text = pdb.pointer("/spec/selector").map(|s| s.to_string()).unwrap_or_default();
        event(
            cl,
            pdb,
            "Warning",
            "UnmanagedPods",
            &format!(
                "Pods selected by this PodDisruptionBudget (selector: {sel_text}) were found to be unmanaged. As a result, the status of the PDB cannot be calculated correctly, which may result in undefined behavior. To account for these pods please set \".spec.minAvailable\" field of the PDB to an integer value."
            ),
        );
    }
    let now = cl.options.clock.now().as_second();
    // buildDisruptedPodMap
    let old: Map<String, Value> =
        pdb.pointer("/status/disruptedPods").and_then(Value::as_object).cloned().unwrap_or_default();
    let mut disrupted = Map::new();
    let mut recheck: Option<i64> = None;
    for p in &pods {
        if meta::is_deleting(p) {
            continue;
        }
        let Some(at) = old.get(meta::name(p)) else { continue };
        let Some(t) = at.as_str().and_then(super::unix) else { continue };
        let expected_deletion = t + DELETION_TIMEOUT_SECS;
        if expected_deletion < now {
            event(
                cl,
                p,
                "Warning",
                "NotDeleted",
                &format!("Pod was expected by PDB {ns}/{} to be deleted but it wasn't", meta::name(pdb)),
            );
        } else {
            recheck = Some(recheck.map_or(expected_deletion, |r| r.min(expected_deletion)));
            disrupted.insert(meta::name(p).to_string(), at.clone());
        }
    }
    // countHealthyPods
    let healthy = pods
        .iter()
        .filter(|p| !meta::is_deleting(p))
        .filter(|p| {
            disrupted
                .get(meta::name(p))
                .and_then(Value::as_str)
                .and_then(super::unix)
                .is_none_or(|t| t + DELETION_TIMEOUT_SECS <= now)
        })
        .filter(|p| crate::conditions::pod_ready(p))
        .count() as i64;
    // updatePdbStatus
    let mut allowed = healthy - desired;
    if expected <= 0 || allowed <= 0 {
        allowed = 0;
    }
    let generation = int(pdb.pointer("/metadata/generation"));
    let cur = pdb.get("status");
    let field = |f: &str| int(cur.and_then(|s| s.get(f)));
    let cur_disrupted =
        cur.and_then(|s| s.get("disruptedPods")).and_then(Value::as_object).cloned().unwrap_or_default();
    let unchanged = field("currentHealthy") == healthy
        && field("desiredHealthy") == desired
        && field("expectedPods") == expected
        && field("disruptionsAllowed") == allowed
        && cur_disrupted == disrupted
        && field("observedGeneration") == generation
        && conditions_up_to_date(pdb);
    if !unchanged {
        let mut status = Map::new();
        status.insert("observedGeneration".into(), generation.into());
        if !disrupted.is_empty() {
            status.insert("disruptedPods".into(), Value::Object(disrupted));
        }
        status.insert("disruptionsAllowed".into(), allowed.into());
        status.insert("currentHealthy".into(), healthy.into());
        status.insert("desiredHealthy".into(), desired.into());
        status.insert("expectedPods".into(), expected.into());
        if let Some(c) = cur.and_then(|s| s.get("conditions")) {
            status.insert("conditions".into(), c.clone());
        }
        update_disruption_allowed_condition(&mut status);
        write_status(cl, pdb, status);
    }
    // Look again when the first disrupted pod's entry expires (the controllers' clock may be
    // moved forward meanwhile: advance_clock makes every controller look again).
    Ok(recheck.map(|at| Duration::from_secs((at - now).max(0) as u64 + 1)))
}

fn write_status(cl: &Cluster, pdb: &Value, status: Map<String, Value>) {
    let Some(d) = def(cl, GROUP, RESOURCE) else { return };
    super::write_status(cl, &d, pdb, Value::Object(status), MANAGER);
}

/// Whether a change of a workload changes the scale a budget may count.
fn scale_changed(c: &Change) -> bool {
    c.kind != EventType::Modified
        || c.prev.as_ref().and_then(|p| p.pointer("/spec/replicas")) != c.object.pointer("/spec/replicas")
        || c.prev.as_ref().and_then(|p| p.pointer("/metadata/ownerReferences"))
            != c.object.pointer("/metadata/ownerReferences")
}

impl Controller for DisruptionController {
    fn keys_for(&self, cl: &Cluster, c: &Change, out: &mut Vec<Key>) {
        let pdbs = || super::list_ns(cl, GROUP, RESOURCE, &c.namespace);
        match (c.gr.group.as_str(), c.gr.resource.as_str()) {
            (GROUP, RESOURCE) if c.kind != EventType::Deleted => out.push(Key::of(c)),
            ("", "pods") => {
                for pdb in pdbs() {
                    if guards(&pdb, &c.object) || c.prev.as_ref().is_some_and(|p| guards(&pdb, p)) {
                        out.push(Key::new(GROUP, RESOURCE, &c.namespace, meta::name(&pdb)));
                    }
                }
            }
            ("apps", "deployments" | "replicasets" | "statefulsets") | ("", "replicationcontrollers")
                if scale_changed(c) =>
            {
                out.extend(pdbs().iter().map(|p| Key::new(GROUP, RESOURCE, &c.namespace, meta::name(p))));
            }
            _ => {}
        }
    }

    fn all_keys(&self, cl: &Cluster, out: &mut Vec<Key>) {
        let (all, _) = cl.store.list(&crate::registry::GroupResource::new(GROUP, RESOURCE), None);
        out.extend(all.iter().map(|o| Key::new(GROUP, RESOURCE, meta::namespace(o), meta::name(o))));
    }

    fn reconcile(&self, cl: &Cluster, key: &Key) -> Option<Duration> {
        let pdb = super::get(cl, key)?;
        sync(cl, &pdb)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn percentages_round_up_and_strings_must_be_percentages() {
        assert_eq!(scaled(&json!("50%"), 3, true), Ok(2));
        assert_eq!(scaled(&json!("34%"), 3, true), Ok(2));
        assert_eq!(scaled(&json!("0%"), 3, true), Ok(0));
        assert_eq!(scaled(&json!("100%"), 3, true), Ok(3));
        assert_eq!(scaled(&json!(1), 3, true), Ok(1));
        assert_eq!(
            scaled(&json!("2"), 3, true),
            Err("invalid value for IntOrString: invalid type: string is not a percentage".to_string())
        );
        assert!(scaled(&json!("x%"), 3, true).unwrap_err().contains("strconv.Atoi: parsing \"x\": invalid syntax"));
    }
}
