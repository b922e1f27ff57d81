//! The resource quota controller: `status.hard` follows `spec.hard`, and `status.used` is
//! recomputed from the objects in the namespace whenever they change (admission charges usage as
//! writes happen; this corrects it when objects go away or a charge was never used).

use super::{Controller, Key, def};
use crate::cluster::Cluster;
use crate::meta;
use crate::registry::GroupResource;
use crate::store::{Change, EventType};
use serde_json::Value;
use std::collections::BTreeSet;
use std::time::Duration;

pub struct QuotaController;

fn quotas() -> GroupResource {
    GroupResource::new("", "resourcequotas")
}

impl Controller for QuotaController {
    fn keys_for(&self, cl: &Cluster, c: &Change, out: &mut Vec<Key>) {
        if c.namespace.is_empty() || (c.gr.group.is_empty() && c.gr.resource == "events") {
            return;
        }
        if c.gr == quotas() {
            // Recount when the quota is new or its spec changed (not on its own status writes).
            if c.kind != EventType::Deleted && c.prev.as_ref().is_none_or(|p| p.get("spec") != c.object.get("spec")) {
                out.push(Key::of(c));
            }
            return;
        }
        // Usage is charged by admission as objects are written; the controller replenishes it when
        // objects go away (or pods finish), as the real replenishment controller does, so a charge
        // for an object about to be stored is never recounted away.
        let finished = |o: &Value| {
            matches!(o.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded") | Some("Failed"))
        };
        let replenish = c.kind == EventType::Deleted
            || (c.gr.group.is_empty()
                && c.gr.resource == "pods"
                && finished(&c.object)
                && !c.prev.as_ref().is_some_and(|p| finished(p)));
        if !replenish {
            return;
        }
        for q in cl.store.list(&quotas(), Some(&c.namespace)).0 {
            out.push(Key::new("", "resourcequotas", &c.namespace, meta::name(&q)));
        }
    }

    fn all_keys(&self, cl: &Cluster, out: &mut Vec<Key>) {
        let (all, _) = cl.store.list(&quotas(), None);
        out.extend(all.iter().map(|q| Key::new("", "resourcequotas", meta::namespace(q), meta::name(q))));
    }

    fn reconcile(&self, cl: &Cluster, key: &Key) -> Option<Duration> {
        let q = super::get(cl, key)?;
        let qdef = def(cl, "", "resourcequotas")?;
        // Every namespaced resource whose objects the quota may count.
        let mut grs: BTreeSet<GroupResource> = [
            "pods",
            "services",
            "persistentvolumeclaims",
            "configmaps",
            "secrets",
            "resourcequotas",
            "replicationcontrollers",
        ]
        .iter()
        .map(|r| GroupResource::new("", r))
        .collect();
        for k in q.pointer("/spec/hard").and_then(Value::as_object).into_iter().flat_map(|m| m.keys()) {
            if let Some(rest) = k.strip_prefix("count/") {
                let (resource, group) = rest.split_once('.').unwrap_or((rest, ""));
                grs.insert(GroupResource::new(group, resource));
            }
        }
        let mut objects: Vec<(String, String, std::sync::Arc<Value>)> = vec![];
        for gr in &grs {
            for o in cl.store.list(gr, Some(&key.namespace)).0 {
                objects.push((gr.group.clone(), gr.resource.clone(), o));
            }
        }
        let triples: Vec<(&str, &str, &Value)> =
            objects.iter().map(|(g, r, o)| (g.as_str(), r.as_str(), &**o)).collect();
        let status = crate::admission::quota::recompute_status(&q, &triples);
        super::write_status(cl, &qdef, &q, status, "resourcequota-controller");
        None
    }
}
