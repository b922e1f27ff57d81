//! Endpoints and EndpointSlices of Services with a selector: the addresses of the pods the
//! selector matches, ready or not, with the service's ports resolved against the pods' named
//! container ports (endpoints and endpointslice controllers).

use super::{Controller, Key, def};
use crate::cluster::Cluster;
use crate::meta;
use crate::ops::{self, WriteOpts};
use crate::selector::LabelSelector;
use crate::store::{Change, EventType};
use serde_json::{Map, Value, json};
use std::time::Duration;

pub struct EndpointsController;

const SLICE_MANAGER: &str = "endpointslice-controller.k8s.io";

fn resolve_port(port: &Value, pod: &Value) -> Option<i64> {
    match port.get("targetPort") {
        Some(Value::Number(n)) => n.as_i64(),
        Some(Value::String(name)) => pod
            .pointer("/spec/containers")?
            .as_array()?
            .iter()
            .flat_map(|c| c.get("ports").and_then(Value::as_array).cloned().unwrap_or_default())
            .find(|p| p.get("name").and_then(Value::as_str) == Some(name))?
            .get("containerPort")?
            .as_i64(),
        _ => port.get("port").and_then(Value::as_i64),
    }
}

fn sync_service(cl: &Cluster, svc: &Value) {
    let ns = meta::namespace(svc);
    let name = meta::name(svc);
    let Some(sel) = svc.pointer("/spec/selector").and_then(Value::as_object).filter(|s| !s.is_empty()) else { return };
    let selector = LabelSelector::from_label_selector(&json!({"matchLabels": sel})).unwrap_or_default();
    let pods: Vec<std::sync::Arc<Value>> = super::list_ns(cl, "", "pods", ns)
        .into_iter()
        .filter(|p| selector.matches(meta::labels(p)))
        .filter(|p| p.pointer("/status/podIP").and_then(Value::as_str).is_some())
        .filter(|p| !matches!(p.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded") | Some("Failed")))
        .collect();
    let ports: Vec<Value> = svc.pointer("/spec/ports").and_then(Value::as_array).cloned().unwrap_or_default();
    let target_ref = |p: &Value| json!({"kind": "Pod", "namespace": ns, "name": meta::name(p), "uid": meta::uid(p)});
    let (mut ready, mut not_ready) = (vec![], vec![]);
    let mut slice_endpoints = vec![];
    for p in &pods {
        let ip = p.pointer("/status/podIP").and_then(Value::as_str).unwrap_or("");
        let node = p.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or("");
        let is_ready = crate::conditions::pod_ready(p) && !meta::is_deleting(p);
        let addr = json!({"ip": ip, "nodeName": node, "targetRef": target_ref(p)});
        if is_ready {
            ready.push(addr)
        } else {
            not_ready.push(addr)
        }
        slice_endpoints.push(json!({"addresses": [ip], "conditions": {"ready": is_ready, "serving": is_ready, "terminating": meta::is_deleting(p)}, "nodeName": node, "targetRef": target_ref(p)}));
    }
    let first = pods.first();
    let ep_ports: Vec<Value> = ports
        .iter()
        .map(|sp| {
            let mut m = Map::new();
            if let Some(n) = sp.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()) {
                m.insert("name".into(), n.into());
            }
            let port =
                first.and_then(|p| resolve_port(sp, p)).or_else(|| sp.get("port").and_then(Value::as_i64)).unwrap_or(0);
            m.insert("port".into(), port.into());
            m.insert("protocol".into(), sp.get("protocol").cloned().unwrap_or(json!("TCP")));
            Value::Object(m)
        })
        .collect();
    // Endpoints.
    if let Some(epdef) = def(cl, "", "endpoints") {
        let mut subsets = vec![];
        if !pods.is_empty() {
            let mut s = Map::new();
            if !ready.is_empty() {
                s.insert("addresses".into(), Value::Array(ready));
            }
            if !not_ready.is_empty() {
                s.insert("notReadyAddresses".into(), Value::Array(not_ready));
            }
            s.insert("ports".into(), Value::Array(ep_ports.clone()));
            subsets.push(Value::Object(s));
        }
        let mut ep = json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": name, "namespace": ns, "labels": svc.pointer("/metadata/labels").cloned().unwrap_or(json!({}))}});
        if !subsets.is_empty() {
            ep["subsets"] = Value::Array(subsets.clone());
        }
        match cl.store.get(&epdef.storage, ns, name) {
            None => {
                let _ = ops::create(cl, &epdef, ns, ep, &WriteOpts::system("endpoint-controller"));
            }
            Some(cur) => {
                if cur.get("subsets").cloned().unwrap_or(json!([])) != Value::Array(subsets.clone()) {
                    let mut next = (*cur).clone();
                    if let Some(m) = next.as_object_mut() {
                        if subsets.is_empty() {
                            m.remove("subsets");
                        } else {
                            m.insert("subsets".into(), Value::Array(subsets));
                        }
                    }
                    super::write_object(cl, &epdef, &cur, next, "endpoint-controller");
                }
            }
        }
    }
    // EndpointSlice (one per service here).
    if let Some(esdef) = cl.registry.get("discovery.k8s.io", "v1", "endpointslices") {
        let existing = super::list_ns(cl, "discovery.k8s.io", "endpointslices", ns).into_iter().find(|s| {
            meta::labels(s).and_then(|l| l.get("kubernetes.io/service-name")).and_then(Value::as_str) == Some(name)
        });
        let body_ports = Value::Array(ep_ports);
        let body_eps = Value::Array(slice_endpoints);
        match existing {
            None => {
                let slice = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                    "metadata": {"generateName": format!("{name}-"), "namespace": ns,
                        "labels": {"kubernetes.io/service-name": name, "endpointslice.kubernetes.io/managed-by": SLICE_MANAGER},
                        "ownerReferences": [super::controller_ref(svc)]},
                    "addressType": "IPv4", "endpoints": body_eps, "ports": body_ports});
                let _ = ops::create(cl, &esdef, ns, slice, &WriteOpts::system(SLICE_MANAGER));
            }
            Some(cur) => {
                let mut next = (*cur).clone();
                if let Some(m) = next.as_object_mut() {
                    m.insert("endpoints".into(), body_eps);
                    m.insert("ports".into(), body_ports);
                }
                super::write_object(cl, &esdef, &cur, next, SLICE_MANAGER);
            }
        }
    }
}

impl Controller for EndpointsController {
    fn keys_for(&self, cl: &Cluster, c: &Change, out: &mut Vec<Key>) {
        if c.gr.group.is_empty() && c.gr.resource == "services" && c.kind != EventType::Deleted {
            out.push(Key::of(c));
        } else if c.gr.group.is_empty() && c.gr.resource == "pods" {
            for s in super::list_ns(cl, "", "services", &c.namespace) {
                let Some(sel) = s.pointer("/spec/selector").and_then(Value::as_object).filter(|s| !s.is_empty()) else {
                    continue;
                };
                let matches = |o: &Value| sel.iter().all(|(k, v)| meta::labels(o).and_then(|l| l.get(k)) == Some(v));
                if matches(&c.object) || c.prev.as_ref().is_some_and(|p| matches(p)) {
                    out.push(Key::new("", "services", &c.namespace, meta::name(&s)));
                }
            }
        }
    }

    fn all_keys(&self, cl: &Cluster, out: &mut Vec<Key>) {
        let (all, _) = cl.store.list(&crate::registry::GroupResource::new("", "services"), None);
        out.extend(all.iter().map(|o| Key::new("", "services", meta::namespace(o), meta::name(o))));
    }

    fn reconcile(&self, cl: &Cluster, key: &Key) -> Option<Duration> {
        let svc = super::get(cl, key)?;
        if !meta::is_deleting(&svc) {
            sync_service(cl, &svc);
        }
        None
    }
}
