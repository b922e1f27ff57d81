//! StatefulSets: ordinal pods `<name>-0..N-1` with stable hostnames, a PersistentVolumeClaim per
//! ordinal and volumeClaimTemplate (`<claim>-<name>-<ordinal>`, kept unless the retention
//! policy says otherwise), OrderedReady or Parallel management, rolling updates from the
//! highest ordinal down to the partition, ControllerRevisions, and the real status fields
//! (readyReplicas, currentRevision, updateRevision, ...). Also the volume binder that moves a
//! pending PVC to Bound, as a provisioner would.

use super::deployment::template_hash;
use super::replicaset::pod_from_template;
use super::{Controller, Key, def};
use crate::cluster::Cluster;
use crate::conditions::pod_ready;
use crate::meta;
use crate::ops::{self, WriteOpts};
use crate::store::{Change, EventType};
use serde_json::{Map, Value, json};
use std::time::Duration;

const MANAGER: &str = "statefulset-controller";
const REVISION_LABEL: &str = "controller-revision-hash";

pub struct StatefulSetController;

fn ordinal(sts: &str, pod: &str) -> Option<usize> {
    pod.strip_prefix(sts)?.strip_prefix('-')?.parse().ok()
}

fn claim_name(vct: &Value, sts: &str, i: usize) -> String {
    format!("{}-{sts}-{i}", meta::name(vct))
}

fn selector_labels(sts: &Value) -> Map<String, Value> {
    sts.pointer("/spec/selector/matchLabels").and_then(Value::as_object).cloned().unwrap_or_default()
}

/// Make sure the ControllerRevision of the current template exists; return its name (also the
/// DaemonSet controller's: both store `{spec: {template}}` as upstream's `getPatch` does).
pub(crate) fn ensure_revision(cl: &Cluster, sts: &Value, hash: &str, manager: &str) -> String {
    let name = format!("{}-{hash}", meta::name(sts));
    let Some(crdef) = def(cl, "apps", "controllerrevisions") else { return name };
    let ns = meta::namespace(sts);
    if cl.store.get(&crdef.storage, ns, &name).is_some() {
        return name;
    }
    let uid = meta::uid(sts);
    let existing = super::list_ns(cl, "apps", "controllerrevisions", ns)
        .iter()
        .filter(|r| super::controller_uid(r) == Some(uid))
        .filter_map(|r| r.get("revision").and_then(Value::as_i64))
        .max()
        .unwrap_or(0);
    let mut labels = selector_labels(sts);
    labels.insert(REVISION_LABEL.into(), name.clone().into());
    let mut template = sts.pointer("/spec/template").cloned().unwrap_or_else(|| json!({}));
    if let Some(m) = template.as_object_mut() {
        m.insert("$patch".into(), "replace".into());
    }
    let rev = json!({
        "apiVersion": "apps/v1", "kind": "ControllerRevision",
        "metadata": {"name": name, "namespace": ns, "labels": Value::Object(labels), "ownerReferences": [super::controller_ref(sts)]},
        "data": {"spec": {"template": template}},
        "revision": existing + 1,
    });
    let _ = ops::create(cl, &crdef, ns, rev, &WriteOpts::system(manager));
    name
}

/// Create the PVCs of one ordinal that do not exist yet.
fn ensure_claims(cl: &Cluster, sts: &Value, i: usize) {
    let Some(pvcdef) = def(cl, "", "persistentvolumeclaims") else { return };
    let ns = meta::namespace(sts);
    let name = meta::name(sts);
    let delete_with_set =
        sts.pointer("/spec/persistentVolumeClaimRetentionPolicy/whenDeleted").and_then(Value::as_str) == Some("Delete");
    for vct in sts.pointer("/spec/volumeClaimTemplates").and_then(Value::as_array).into_iter().flatten() {
        let cname = claim_name(vct, name, i);
        if cl.store.get(&pvcdef.storage, ns, &cname).is_some() {
            continue;
        }
        let mut labels = vct.pointer("/metadata/labels").and_then(Value::as_object).cloned().unwrap_or_default();
        labels.extend(selector_labels(sts));
        let mut md = json!({"name": cname, "namespace": ns, "labels": Value::Object(labels)});
        if delete_with_set {
            let mut r = super::controller_ref(sts);
            if let Some(m) = r.as_object_mut() {
                m.insert("controller".into(), true.into());
            }
            md["ownerReferences"] = json!([r]);
        }
        let pvc = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": md,
            "spec": vct.get("spec").cloned().unwrap_or_else(|| json!({}))});
        let _ = ops::create(cl, &pvcdef, ns, pvc, &WriteOpts::system(MANAGER));
    }
}

/// Make the claims of a removed ordinal owned by its pod, when the policy deletes them on
/// scale-down (the garbage collector then removes them with the pod).
fn release_claims(cl: &Cluster, sts: &Value, pod: &Value, i: usize) {
    if sts.pointer("/spec/persistentVolumeClaimRetentionPolicy/whenScaled").and_then(Value::as_str) != Some("Delete") {
        return;
    }
    let Some(pvcdef) = def(cl, "", "persistentvolumeclaims") else { return };
    for vct in sts.pointer("/spec/volumeClaimTemplates").and_then(Value::as_array).into_iter().flatten() {
        let cname = claim_name(vct, meta::name(sts), i);
        if let Some(pvc) = cl.store.get(&pvcdef.storage, meta::namespace(sts), &cname) {
            let mut next = (*pvc).clone();
            if let Some(m) = crate::meta::meta_mut(&mut next) {
                m.insert("ownerReferences".into(), json!([{"apiVersion": "v1", "kind": "Pod", "name": meta::name(pod), "uid": meta::uid(pod), "controller": false, "blockOwnerDeletion": true}]));
            }
            super::write_object(cl, &pvcdef, &pvc, next, MANAGER);
        }
    }
}

fn new_pod(sts: &Value, i: usize, revision: &str) -> Value {
    let name = format!("{}-{i}", meta::name(sts));
    let template = sts.pointer("/spec/template").cloned().unwrap_or_else(|| json!({}));
    let extra = vec![
        (REVISION_LABEL.to_string(), revision.to_string()),
        ("statefulset.kubernetes.io/pod-name".to_string(), name.clone()),
        ("apps.kubernetes.io/pod-index".to_string(), i.to_string()),
    ];
    let mut pod = pod_from_template(sts, &template, Some(name.clone()), &extra);
    if let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("hostname".into(), name.clone().into());
        if let Some(svc) = sts.pointer("/spec/serviceName").and_then(Value::as_str).filter(|s| !s.is_empty()) {
            spec.insert("subdomain".into(), svc.into());
        }
        let volumes = spec.entry("volumes").or_insert_with(|| json!([]));
        if let Some(vs) = volumes.as_array_mut() {
            for vct in sts.pointer("/spec/volumeClaimTemplates").and_then(Value::as_array).into_iter().flatten() {
                let vname = meta::name(vct);
                if !vs.iter().any(|v| v.get("name").and_then(Value::as_str) == Some(vname)) {
                    vs.push(json!({"name": vname, "persistentVolumeClaim": {"claimName": claim_name(vct, meta::name(sts), i)}}));
                }
            }
            if vs.is_empty() {
                spec.remove("volumes");
            }
        }
    }
    pod
}

impl Controller for StatefulSetController {
    fn keys_for(&self, _cl: &Cluster, c: &Change, out: &mut Vec<Key>) {
        if c.gr.group == "apps" && c.gr.resource == "statefulsets" && c.kind != EventType::Deleted {
            out.push(Key::of(c));
        } else if c.gr.group.is_empty() && c.gr.resource == "pods" {
            for obj in [Some(&c.object), c.prev.as_ref()].into_iter().flatten() {
                if let Some(refs) = obj.pointer("/metadata/ownerReferences").and_then(Value::as_array)
                    && let Some(owner) = refs.iter().find(|r| {
                        r.get("controller").and_then(Value::as_bool) == Some(true)
                            && r.get("kind").and_then(Value::as_str) == Some("StatefulSet")
                    })
                    && let Some(name) = owner.get("name").and_then(Value::as_str)
                {
                    out.push(Key::new("apps", "statefulsets", &c.namespace, name));
                }
            }
        }
    }

    fn all_keys(&self, cl: &Cluster, out: &mut Vec<Key>) {
        let (all, _) = cl.store.list(&crate::registry::GroupResource::new("apps", "statefulsets"), None);
        out.extend(all.iter().map(|o| Key::new("apps", "statefulsets", meta::namespace(o), meta::name(o))));
    }

    fn reconcile(&self, cl: &Cluster, key: &Key) -> Option<Duration> {
        let sts = super::get(cl, key)?;
        if meta::is_deleting(&sts) {
            return None;
        }
        let stsdef = def(cl, "apps", "statefulsets")?;
        let pdef = def(cl, "", "pods")?;
        let want = sts.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1).max(0) as usize;
        let template = sts.pointer("/spec/template").cloned().unwrap_or_else(|| json!({}));
        let update_rev = ensure_revision(cl, &sts, &template_hash(&template, 0), MANAGER);
        let parallel = sts.pointer("/spec/podManagementPolicy").and_then(Value::as_str) == Some("Parallel");
        let on_delete = sts.pointer("/spec/updateStrategy/type").and_then(Value::as_str) == Some("OnDelete");
        let partition =
            sts.pointer("/spec/updateStrategy/rollingUpdate/partition").and_then(Value::as_i64).unwrap_or(0).max(0)
                as usize;

        let mut pods: Vec<(usize, std::sync::Arc<Value>)> = super::replicaset::owned_pods(cl, &sts)
            .into_iter()
            .filter_map(|p| ordinal(&key.name, meta::name(&p)).map(|i| (i, p)))
            .collect();
        pods.sort_by_key(|(i, _)| *i);
        let healthy = |p: &Value| !meta::is_deleting(p) && pod_ready(p);
        let all_healthy = pods.iter().all(|(_, p)| healthy(p));

        // Create missing ordinals below `want` (in order unless Parallel).
        for i in 0..want {
            if pods.iter().any(|(j, _)| *j == i) {
                continue;
            }
            if !parallel && !pods.iter().filter(|(j, _)| *j < i).all(|(_, p)| healthy(p)) {
                break;
            }
            ensure_claims(cl, &sts, i);
            match ops::create(cl, &pdef, &key.namespace, new_pod(&sts, i, &update_rev), &WriteOpts::system(MANAGER)) {
                Ok(w) => pods.push((i, std::sync::Arc::new(w.object))),
                Err(e) => {
                    super::event(
                        cl,
                        &sts,
                        "Warning",
                        "FailedCreate",
                        &format!("create Pod {}-{i} in StatefulSet {} failed error: {}", key.name, key.name, e.message),
                        MANAGER,
                    );
                    break;
                }
            }
            if !parallel {
                break;
            }
        }
        pods.sort_by_key(|(i, _)| *i);
        // Remove ordinals at or above `want`, highest first.
        let excess: Vec<(usize, std::sync::Arc<Value>)> = pods.iter().filter(|(i, _)| *i >= want).cloned().collect();
        for (i, p) in excess.iter().rev() {
            if meta::is_deleting(p) {
                if !parallel {
                    break;
                }
                continue;
            }
            if !parallel && !all_healthy {
                break;
            }
            release_claims(cl, &sts, p, *i);
            super::delete(cl, &pdef, &key.namespace, meta::name(p));
            if !parallel {
                break;
            }
        }
        // Rolling update: replace outdated pods from the highest ordinal down to the partition,
        // one at a time, when every pod is healthy.
        if !on_delete
            && all_healthy
            && excess.is_empty()
            && let Some((_, p)) = pods.iter().rev().find(|(i, p)| {
                *i < want
                    && *i >= partition
                    && meta::labels(p).and_then(|l| l.get(REVISION_LABEL)).and_then(Value::as_str)
                        != Some(update_rev.as_str())
            })
        {
            super::delete(cl, &pdef, &key.namespace, meta::name(p));
        }

        // Status.
        let live: Vec<&std::sync::Arc<Value>> =
            pods.iter().filter(|(i, p)| *i < want || !meta::is_deleting(p)).map(|(_, p)| p).collect();
        let rev_of =
            |p: &Value| meta::labels(p).and_then(|l| l.get(REVISION_LABEL)).and_then(Value::as_str).map(str::to_string);
        let updated = live.iter().filter(|p| rev_of(p).as_deref() == Some(update_rev.as_str())).count();
        let current_rev = sts
            .pointer("/status/currentRevision")
            .and_then(Value::as_str)
            .map(str::to_string)
            .filter(|_| updated < want)
            .unwrap_or_else(|| update_rev.clone());
        let current = live.iter().filter(|p| rev_of(p).as_deref() == Some(current_rev.as_str())).count();
        let ready = live.iter().filter(|p| pod_ready(p)).count();
        let mut status = Map::new();
        status.insert("observedGeneration".into(), sts.pointer("/metadata/generation").cloned().unwrap_or(json!(1)));
        status.insert("replicas".into(), live.len().into());
        status.insert("readyReplicas".into(), ready.into());
        status.insert("currentReplicas".into(), current.into());
        status.insert("updatedReplicas".into(), updated.into());
        status.insert("currentRevision".into(), current_rev.into());
        status.insert("updateRevision".into(), update_rev.into());
        status.insert("collisionCount".into(), 0.into());
        status.insert("availableReplicas".into(), ready.into());
        status.retain(|k, v| {
            matches!(k.as_str(), "replicas" | "availableReplicas" | "observedGeneration") || v.as_u64() != Some(0)
        });
        super::write_status(cl, &stsdef, &sts, Value::Object(status), MANAGER);
        None
    }
}

/// Moves pending PersistentVolumeClaims to Bound, with the requested capacity, as a dynamic
/// provisioner and the volume binder would.
pub struct VolumeBinder;

impl Controller for VolumeBinder {
    fn keys_for(&self, _cl: &Cluster, c: &Change, out: &mut Vec<Key>) {
        if c.gr.group.is_empty() && c.gr.resource == "persistentvolumeclaims" {
            if c.kind == EventType::Deleted {
                // Its volume is released (reclaim policy Delete: deleted).
                out.push(Key::new("", "persistentvolumes", "", &format!("pvc-{}", meta::uid(&c.object))));
            } else {
                out.push(Key::of(c));
            }
        }
    }

    fn all_keys(&self, cl: &Cluster, out: &mut Vec<Key>) {
        let (all, _) = cl.store.list(&crate::registry::GroupResource::new("", "persistentvolumeclaims"), None);
        out.extend(all.iter().map(|o| Key::new("", "persistentvolumeclaims", meta::namespace(o), meta::name(o))));
    }

    fn reconcile(&self, cl: &Cluster, key: &Key) -> Option<Duration> {
        if key.gr.resource == "persistentvolumes" {
            let pv = super::get(cl, key)?;
            let claim_ns = pv.pointer("/spec/claimRef/namespace").and_then(Value::as_str).unwrap_or("");
            let claim = pv.pointer("/spec/claimRef/name").and_then(Value::as_str).unwrap_or("");
            let claim_uid = pv.pointer("/spec/claimRef/uid").and_then(Value::as_str).unwrap_or("");
            let bound =
                cl.store.get(&crate::registry::GroupResource::new("", "persistentvolumeclaims"), claim_ns, claim);
            if bound.is_none_or(|c| meta::uid(&c) != claim_uid)
                && pv.pointer("/spec/persistentVolumeReclaimPolicy").and_then(Value::as_str) == Some("Delete")
                && let Some(pvdef) = def(cl, "", "persistentvolumes")
            {
                super::delete(cl, &pvdef, "", &key.name);
            }
            return None;
        }
        let pvc = super::get(cl, key)?;
        if meta::is_deleting(&pvc)
            || (pvc.pointer("/status/phase").and_then(Value::as_str) == Some("Bound")
                && pvc.pointer("/spec/volumeName").and_then(Value::as_str).is_some_and(|v| !v.is_empty()))
        {
            return None;
        }
        let pvcdef = def(cl, "", "persistentvolumeclaims")?;
        let pvdef = def(cl, "", "persistentvolumes")?;
        let storage = pvc.pointer("/spec/resources/requests/storage").cloned().unwrap_or(json!("1Gi"));
        let modes = pvc.pointer("/spec/accessModes").cloned().unwrap_or(json!(["ReadWriteOnce"]));
        // A dynamically provisioned volume, `pvc-<claim uid>`, bound to the claim.
        let pv_name = format!("pvc-{}", meta::uid(&pvc));
        if cl.store.get(&pvdef.storage, "", &pv_name).is_none() {
            let mut spec = json!({
                "capacity": {"storage": storage}, "accessModes": modes,
                "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": key.namespace, "name": key.name,
                    "uid": meta::uid(&pvc), "resourceVersion": meta::meta_str(&pvc, "resourceVersion").unwrap_or("")},
                "persistentVolumeReclaimPolicy": "Delete", "volumeMode": pvc.pointer("/spec/volumeMode").cloned().unwrap_or(json!("Filesystem")),
                "hostPath": {"path": format!("/var/lib/devcluster/volumes/{pv_name}"), "type": ""},
            });
            if let Some(sc) = pvc.pointer("/spec/storageClassName").and_then(Value::as_str) {
                spec["storageClassName"] = json!(sc);
            }
            let pv = json!({"apiVersion": "v1", "kind": "PersistentVolume",
                "metadata": {"name": pv_name, "annotations": {"pv.kubernetes.io/provisioned-by": "devcluster.io/hostpath"}},
                "spec": spec});
            if let Ok(w) = ops::create(cl, &pvdef, "", pv, &WriteOpts::system("persistentvolume-binder-controller")) {
                super::write_status(
                    cl,
                    &pvdef,
                    &w.object,
                    json!({"phase": "Bound"}),
                    "persistentvolume-binder-controller",
                );
            }
        }
        if pvc.pointer("/spec/volumeName").and_then(Value::as_str).is_none_or(str::is_empty) {
            let mut next = (*pvc).clone();
            if let Some(spec) = next.get_mut("spec").and_then(Value::as_object_mut) {
                spec.insert("volumeName".into(), pv_name.clone().into());
            }
            if let Some(m) = crate::meta::meta_mut(&mut next) {
                let ann = m.entry("annotations").or_insert_with(|| json!({}));
                if let Some(a) = ann.as_object_mut() {
                    a.insert("pv.kubernetes.io/bind-completed".into(), "yes".into());
                    a.insert("pv.kubernetes.io/bound-by-controller".into(), "yes".into());
                }
            }
            super::write_object(cl, &pvcdef, &pvc, next, "persistentvolume-binder-controller");
        }
        let pvc = super::get(cl, key)?;
        let status = json!({"phase": "Bound", "accessModes": modes, "capacity": {"storage": storage}});
        super::write_status(cl, &pvcdef, &pvc, status, "persistentvolume-binder-controller");
        None
    }
}
