//! The local APIService objects (apiregistration.k8s.io/v1) a real cluster lists: one per
//! served group-version, as kube-apiserver's autoregistration registers the built-in ones
//! (label `kube-aggregator.kubernetes.io/automanaged: onstart`, the priorities of
//! pkg/controlplane/apiserver/aggregator.go and cmd/kube-apiserver/app/aggregator.go) and the
//! crd-autoregister controller registers each CRD group-version (`automanaged: "true"`,
//! `groupPriorityMinimum: 1000`, `versionPriority: 100`), removing it when no CRD serves it
//! any more. None has a `spec.service` (all are local): `Available=True`, reason `Local`. A
//! deleted or edited automanaged APIService comes back as it was.

use super::{Controller, Key, def};
use crate::cluster::Cluster;
use crate::meta;
use crate::ops::{self, WriteOpts};
use crate::registry::GroupResource;
use crate::store::Change;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

const MANAGER: &str = "kube-apiserver";
const AUTOMANAGED: &str = "kube-aggregator.kubernetes.io/automanaged";

pub struct ApiServiceRegistration;

fn apiservices() -> GroupResource {
    GroupResource::new("apiregistration.k8s.io", "apiservices")
}

/// (groupPriorityMinimum, versionPriority) of a built-in group-version.
fn priority(group: &str, version: &str) -> (i64, i64) {
    match (group, version) {
        ("", _) => (18000, 1),
        ("apiregistration.k8s.io", _) => (18000, 15),
        ("apps", _) => (17800, 15),
        ("events.k8s.io", _) => (17750, 15),
        ("authentication.k8s.io", _) => (17700, 15),
        ("authorization.k8s.io", _) => (17600, 15),
        ("autoscaling", "v2") => (17500, 30),
        ("autoscaling", _) => (17500, 15),
        ("batch", _) => (17400, 15),
        ("certificates.k8s.io", _) => (17300, 15),
        ("networking.k8s.io", _) => (17200, 15),
        ("policy", _) => (17100, 15),
        ("rbac.authorization.k8s.io", _) => (17000, 15),
        ("storage.k8s.io", _) => (16800, 15),
        ("apiextensions.k8s.io", _) | ("admissionregistration.k8s.io", _) => (16700, 15),
        ("scheduling.k8s.io", _) => (16600, 15),
        ("coordination.k8s.io", _) => (16500, 15),
        ("node.k8s.io", _) => (16300, 15),
        ("discovery.k8s.io", _) => (16200, 15),
        ("flowcontrol.apiserver.k8s.io", _) => (16100, 21),
        _ => (1000, 100),
    }
}

/// The APIServices that should exist: name -> object (without status).
fn desired(cl: &Cluster) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for d in cl.registry.all() {
        let name = format!("{}.{}", d.version, d.group);
        if out.contains_key(&name) {
            continue;
        }
        let (gp, vp) = if d.is_custom() { (1000, 100) } else { priority(&d.group, &d.version) };
        let managed = if d.is_custom() { "true" } else { "onstart" };
        let mut spec = json!({"version": d.version, "groupPriorityMinimum": gp, "versionPriority": vp});
        if !d.group.is_empty() {
            spec["group"] = d.group.clone().into();
        }
        out.insert(
            name.clone(),
            json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                "metadata": {"name": name, "labels": {AUTOMANAGED: managed}}, "spec": spec}),
        );
    }
    out
}

fn available_status(cur: Option<&Value>) -> Value {
    let old = cur.and_then(|o| o.pointer("/status/conditions/0/lastTransitionTime")).cloned();
    json!({"conditions": [{"type": "Available", "status": "True",
        "lastTransitionTime": old.unwrap_or_else(|| meta::now().into()),
        "reason": "Local", "message": "Local APIServices are always available"}]})
}

impl Controller for ApiServiceRegistration {
    fn keys_for(&self, _cl: &Cluster, c: &Change, out: &mut Vec<Key>) {
        if c.gr == apiservices()
            || (c.gr.group == "apiextensions.k8s.io" && c.gr.resource == "customresourcedefinitions")
        {
            out.push(Key::new("apiregistration.k8s.io", "apiservices", "", ""));
        }
    }

    fn all_keys(&self, _cl: &Cluster, out: &mut Vec<Key>) {
        out.push(Key::new("apiregistration.k8s.io", "apiservices", "", ""));
    }

    fn reconcile(&self, cl: &Cluster, _key: &Key) -> Option<Duration> {
        let adef = def(cl, "apiregistration.k8s.io", "apiservices")?;
        let want = desired(cl);
        let (have, _) = cl.store.list(&apiservices(), None);
        for cur in &have {
            let name = meta::name(cur);
            let managed = meta::labels(cur).and_then(|l| l.get(AUTOMANAGED)).is_some();
            if managed && !want.contains_key(name) {
                super::delete(cl, &adef, "", name);
            }
        }
        for (name, obj) in want {
            let cur = have.iter().find(|o| meta::name(o) == name).cloned();
            let cur = match cur {
                None => match ops::create(cl, &adef, "", obj, &WriteOpts::system(MANAGER)) {
                    Ok(w) => std::sync::Arc::new(w.object),
                    Err(e) => {
                        tracing::debug!(name, error = %e.message, "APIService create failed");
                        continue;
                    }
                },
                Some(cur) => {
                    // Only those it manages are kept as registered.
                    let managed = meta::labels(&cur).and_then(|l| l.get(AUTOMANAGED)).is_some();
                    if managed && cur.get("spec") != obj.get("spec") {
                        let mut next = (*cur).clone();
                        next["spec"] = obj["spec"].clone();
                        super::write_object(cl, &adef, &cur, next, MANAGER);
                    }
                    match cl.store.get(&adef.storage, "", &name) {
                        Some(c) => c,
                        None => continue,
                    }
                }
            };
            if cur.pointer("/spec/service").is_none_or(Value::is_null) {
                super::write_status(cl, &adef, &cur, available_status(Some(&cur)), MANAGER);
            }
        }
        None
    }
}
