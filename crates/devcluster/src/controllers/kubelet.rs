//! The simulated kubelet and scheduler: a pod is bound to a Ready node, gets an IP, and its status
//! moves to Running and Ready with the fields a real kubelet writes (conditions, container
//! statuses with image IDs, start times) — or fails the way the fault rules say (image pull
//! back-off, crash loop with exit code and growing restart count, never ready). A deleted pod is
//! removed once its (simulated) containers stopped.

use super::{Controller, Key, def};
use crate::cluster::Cluster;
use crate::conditions::{self, Style};
use crate::faults::{self, Fault};
use crate::image::{container_id, image_and_id};
use crate::meta;
use crate::ops::{self, DeleteOpts, WriteOpts};
use crate::registry::GroupResource;
use crate::runtime::Runtime;
use crate::store::Change;
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

const MANAGER: &str = "kubelet";

pub struct Kubelet {
    /// Where pods of `--run` images run (`crate::runtime`).
    pub runtime: Arc<Runtime>,
}

fn pods() -> GroupResource {
    GroupResource::new("", "pods")
}

/// Nodes a pod can go to: Ready and schedulable.
fn schedulable_nodes(cl: &Cluster) -> Vec<String> {
    let (nodes, _) = cl.store.list(&GroupResource::new("", "nodes"), None);
    nodes
        .iter()
        .filter(|n| n.pointer("/spec/unschedulable").and_then(Value::as_bool) != Some(true))
        .filter(|n| conditions::is_true(&conditions::of(n.get("status")), "Ready"))
        .map(|n| meta::name(n).to_string())
        .collect()
}

/// Bind a pod to the node with the fewest pods.
fn schedule(cl: &Cluster, pod: &Value) -> bool {
    let nodes = schedulable_nodes(cl);
    let Some(pdef) = def(cl, "", "pods") else { return false };
    if nodes.is_empty() {
        let now = meta::now();
        let mut status = pod.get("status").cloned().unwrap_or_else(|| json!({}));
        let mut conds = conditions::of(Some(&status));
        let (all_nodes, _) = cl.store.list(&GroupResource::new("", "nodes"), None);
        let total = all_nodes.len();
        let unschedulable = all_nodes
            .iter()
            .filter(|n| n.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true))
            .count();
        let not_ready = all_nodes
            .iter()
            .filter(|n| n.pointer("/spec/unschedulable").and_then(Value::as_bool) != Some(true))
            .filter(|n| !conditions::is_true(&conditions::of(n.get("status")), "Ready"))
            .count();
        // The scheduler's FitError message: reasons sorted, each with its node count.
        let mut reasons = vec![];
        if not_ready > 0 {
            reasons.push(format!("{not_ready} node(s) had untolerated taint {{node.kubernetes.io/not-ready: }}"));
        }
        if unschedulable > 0 {
            reasons.push(format!("{unschedulable} node(s) were unschedulable"));
        }
        reasons.sort();
        let msg = if total == 0 {
            "no nodes available to schedule pods.".to_string()
        } else {
            format!("{}.", reasons.join(", "))
        };
        conditions::set(
            &mut conds,
            Style::Pod,
            "PodScheduled",
            "False",
            "Unschedulable",
            &format!("0/{total} nodes are available: {msg}"),
            &now,
        );
        if let Some(m) = status.as_object_mut() {
            m.insert("phase".into(), "Pending".into());
            m.insert("conditions".into(), Value::Array(conds));
        }
        super::write_status(cl, &pdef, pod, status, "default-scheduler");
        return false;
    }
    let Some(node) = ({
        let idx = cl.index();
        nodes.iter().min_by_key(|n| (idx.pods_on(n), n.to_string())).cloned()
    }) else {
        return false;
    };
    let body = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": meta::name(pod)}, "target": {"kind": "Node", "name": node}});
    let opts = WriteOpts { subresource: Some("binding".into()), ..WriteOpts::system("default-scheduler") };
    ops::update(cl, &pdef, meta::namespace(pod), meta::name(pod), body, &opts).is_ok()
}

/// The lowest free pod address of the node (10.244.N.x, then 10.245.N.x, ... for node N).
fn allocate_pod_ip(cl: &Cluster, node: &str) -> String {
    let index = node.rsplit('-').next().and_then(|s| s.parse::<u32>().ok()).unwrap_or(1).saturating_sub(1) % 256;
    let used: BTreeSet<String> = cl.index().pod_ips_on(node);
    for second in 244..=254u32 {
        for host in 2..=254u32 {
            let ip = format!("10.{second}.{index}.{host}");
            if !used.contains(&ip) {
                return ip;
            }
        }
    }
    format!("10.244.{index}.1")
}

/// The crash-loop back-off: 10s doubling to 5m. Returns (restarts so far, seconds until the next).
fn crash_restarts(elapsed: i64) -> (i64, i64) {
    let mut t = 0;
    let mut backoff = 10;
    let mut restarts = 1;
    loop {
        if elapsed < t + backoff {
            return (restarts, t + backoff - elapsed);
        }
        t += backoff;
        restarts += 1;
        backoff = (backoff * 2).min(300);
    }
}

struct Computed {
    status: Value,
    requeue: Option<Duration>,
}

/// The status a kubelet would report now.
fn compute_status(cl: &Cluster, pod: &Value, node: &str) -> Computed {
    let now = meta::now();
    let now_s = jiff::Timestamp::now().as_second();
    let old = pod.get("status").cloned().unwrap_or_else(|| json!({}));
    let uid = meta::uid(pod);
    let rules = cl.faults();
    let start_time = old.get("startTime").and_then(Value::as_str).map(str::to_string).unwrap_or_else(|| now.clone());
    let start_s = super::unix(&start_time).unwrap_or(now_s);
    let created_s =
        pod.pointer("/metadata/creationTimestamp").and_then(Value::as_str).and_then(super::unix).unwrap_or(now_s);
    let startup = cl.options.pod_startup.as_secs() as i64;
    let starting = startup > 0 && now_s < created_s + startup;
    let mut requeue: Option<i64> = if starting { Some(created_s + startup - now_s) } else { None };

    let spec = pod.get("spec").cloned().unwrap_or_default();
    let containers = spec.get("containers").and_then(Value::as_array).cloned().unwrap_or_default();
    let inits = spec.get("initContainers").and_then(Value::as_array).cloned().unwrap_or_default();
    let old_statuses = |field: &str, name: &str| -> Option<Value> {
        old.get(field)?.as_array()?.iter().find(|c| c.get("name").and_then(Value::as_str) == Some(name)).cloned()
    };
    let running_since = |field: &str, name: &str| -> String {
        old_statuses(field, name)
            .and_then(|c| c.pointer("/state/running/startedAt").and_then(Value::as_str).map(str::to_string))
            .unwrap_or_else(|| now.clone())
    };

    // Init containers run to completion first, unless one fails.
    let mut init_statuses = vec![];
    let mut init_blocked: Option<String> = None;
    for c in &inits {
        let name = c.get("name").and_then(Value::as_str).unwrap_or("");
        let image = c.get("image").and_then(Value::as_str).unwrap_or("");
        let (img, image_id) = image_and_id(image);
        let st = if init_blocked.is_some() || starting {
            json!({"name": name, "state": {"waiting": {"reason": "PodInitializing"}}, "lastState": {}, "ready": false, "restartCount": 0, "image": img, "imageID": "", "started": false})
        } else {
            match faults::find(&rules, image) {
                Some(Fault::ImagePull) => {
                    init_blocked = Some(name.to_string());
                    json!({"name": name, "state": {"waiting": {"reason": "ImagePullBackOff", "message": format!("Back-off pulling image {image:?}")}}, "lastState": {}, "ready": false, "restartCount": 0, "image": img, "imageID": "", "started": false})
                }
                Some(Fault::CrashLoop { exit_code }) => {
                    init_blocked = Some(name.to_string());
                    let (restarts, next) = crash_restarts(now_s - start_s);
                    requeue = Some(requeue.map_or(next, |r| r.min(next)));
                    json!({"name": name,
                        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": format!("back-off {} restarting failed container={name} pod={}_{}({uid})", go_secs(next.max(10)), meta::name(pod), meta::namespace(pod))}},
                        "lastState": {"terminated": {"exitCode": exit_code, "reason": "Error", "startedAt": start_time, "finishedAt": start_time, "containerID": container_id(uid, name, restarts)}},
                        "ready": false, "restartCount": restarts, "image": img, "imageID": image_id, "containerID": container_id(uid, name, restarts), "started": false})
                }
                _ => json!({"name": name,
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": start_time, "finishedAt": start_time, "containerID": container_id(uid, name, 0)}},
                    "lastState": {}, "ready": true, "restartCount": 0, "image": img, "imageID": image_id, "containerID": container_id(uid, name, 0), "started": false}),
            }
        };
        init_statuses.push(st);
    }

    let mut statuses = vec![];
    let mut not_ready = vec![];
    let mut phase = "Running";
    let mut any_running = false;
    for c in &containers {
        let name = c.get("name").and_then(Value::as_str).unwrap_or("");
        let image = c.get("image").and_then(Value::as_str).unwrap_or("");
        let (img, image_id) = image_and_id(image);
        let st = if init_blocked.is_some() {
            phase = "Pending";
            json!({"name": name, "state": {"waiting": {"reason": "PodInitializing"}}, "lastState": {}, "ready": false, "restartCount": 0, "image": img, "imageID": "", "started": false})
        } else if starting {
            phase = "Pending";
            json!({"name": name, "state": {"waiting": {"reason": "ContainerCreating"}}, "lastState": {}, "ready": false, "restartCount": 0, "image": img, "imageID": "", "started": false})
        } else {
            match faults::find(&rules, image) {
                Some(Fault::ImagePull) => {
                    if !any_running {
                        phase = "Pending";
                    }
                    json!({"name": name, "state": {"waiting": {"reason": "ImagePullBackOff", "message": format!("Back-off pulling image {image:?}")}}, "lastState": {}, "ready": false, "restartCount": 0, "image": img, "imageID": "", "started": false})
                }
                Some(Fault::CrashLoop { exit_code }) => {
                    let (restarts, next) = crash_restarts(now_s - start_s);
                    requeue = Some(requeue.map_or(next, |r| r.min(next)));
                    json!({"name": name,
                        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": format!("back-off {} restarting failed container={name} pod={}_{}({uid})", go_secs(next.max(10)), meta::name(pod), meta::namespace(pod))}},
                        "lastState": {"terminated": {"exitCode": exit_code, "reason": "Error", "startedAt": start_time, "finishedAt": start_time, "containerID": container_id(uid, name, restarts)}},
                        "ready": false, "restartCount": restarts, "image": img, "imageID": image_id, "containerID": container_id(uid, name, restarts), "started": false})
                }
                Some(Fault::Unready) | Some(Fault::Deadline) => {
                    any_running = true;
                    json!({"name": name, "state": {"running": {"startedAt": running_since("containerStatuses", name)}}, "lastState": {}, "ready": false, "restartCount": 0, "image": img, "imageID": image_id, "containerID": container_id(uid, name, 0), "started": true})
                }
                // An exiting container of a Job's pod runs until `run_to_completion` ends it.
                Some(Fault::Exit { .. }) | None => {
                    any_running = true;
                    json!({"name": name, "state": {"running": {"startedAt": running_since("containerStatuses", name)}}, "lastState": {}, "ready": true, "restartCount": 0, "image": img, "imageID": image_id, "containerID": container_id(uid, name, 0), "started": true})
                }
            }
        };
        if st.get("ready") != Some(&Value::Bool(true)) {
            not_ready.push(name.to_string());
        }
        statuses.push(st);
    }
    if any_running {
        phase = "Running";
    }

    let mut conds = conditions::of(Some(&old));
    let ready = not_ready.is_empty() && init_blocked.is_none() && !starting;
    conditions::set(
        &mut conds,
        Style::Pod,
        "PodReadyToStartContainers",
        if starting { "False" } else { "True" },
        "",
        "",
        &now,
    );
    match &init_blocked {
        Some(n) => conditions::set(
            &mut conds,
            Style::Pod,
            "Initialized",
            "False",
            "ContainersNotInitialized",
            &format!("containers with incomplete status: [{n}]"),
            &now,
        ),
        None => conditions::set(&mut conds, Style::Pod, "Initialized", "True", "", "", &now),
    }
    let unready_msg = format!("containers with unready status: [{}]", not_ready.join(" "));
    if ready {
        conditions::set(&mut conds, Style::Pod, "Ready", "True", "", "", &now);
        conditions::set(&mut conds, Style::Pod, "ContainersReady", "True", "", "", &now);
    } else {
        conditions::set(&mut conds, Style::Pod, "Ready", "False", "ContainersNotReady", &unready_msg, &now);
        conditions::set(&mut conds, Style::Pod, "ContainersReady", "False", "ContainersNotReady", &unready_msg, &now);
    }
    conditions::set(&mut conds, Style::Pod, "PodScheduled", "True", "", "", &now);
    let order = ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"];
    conds.sort_by_key(|c| {
        order.iter().position(|o| c.get("type").and_then(Value::as_str) == Some(o)).unwrap_or(order.len())
    });

    let host_ip = crate::runtime::node_ip(cl, node).unwrap_or_else(|| "10.0.0.1".to_string());
    let pod_ip = match old.get("podIP").and_then(Value::as_str) {
        Some(ip) => ip.to_string(),
        None if spec.get("hostNetwork").and_then(Value::as_bool) == Some(true) => host_ip.clone(),
        None => allocate_pod_ip(cl, node),
    };
    let mut s = Map::new();
    s.insert("phase".into(), phase.into());
    s.insert("conditions".into(), Value::Array(conds));
    s.insert("hostIP".into(), host_ip.clone().into());
    s.insert("hostIPs".into(), json!([{"ip": host_ip}]));
    s.insert("podIP".into(), pod_ip.clone().into());
    s.insert("podIPs".into(), json!([{"ip": pod_ip}]));
    s.insert("startTime".into(), start_time.into());
    if !init_statuses.is_empty() {
        s.insert("initContainerStatuses".into(), Value::Array(init_statuses));
    }
    s.insert("containerStatuses".into(), Value::Array(statuses));
    s.insert(
        "qosClass".into(),
        old.get("qosClass").cloned().unwrap_or_else(|| crate::builtin::defaults::pod_qos_class(pod).into()),
    );
    Computed { status: Value::Object(s), requeue: requeue.map(|r| Duration::from_secs(r.max(1) as u64)) }
}

/// Go's Duration formatting of whole seconds (`10s`, `1m20s`, `5m0s`).
fn go_secs(s: i64) -> String {
    if s < 60 { format!("{s}s") } else { format!("{}m{}s", s / 60, s % 60) }
}

impl Controller for Kubelet {
    fn keys_for(&self, cl: &Cluster, c: &Change, out: &mut Vec<Key>) {
        if c.gr == pods() {
            // Deleted too: a runtime pod's processes end when its object is gone.
            out.push(Key::of(c));
        } else if c.gr.group.is_empty() && c.gr.resource == "nodes" {
            // A node that became schedulable: pending pods are looked at again.
            let (all, _) = cl.store.list(&pods(), None);
            out.extend(
                all.iter()
                    .filter(|p| p.pointer("/spec/nodeName").and_then(Value::as_str).is_none_or(str::is_empty))
                    .map(|p| Key::new("", "pods", meta::namespace(p), meta::name(p))),
            );
        }
    }

    fn all_keys(&self, cl: &Cluster, out: &mut Vec<Key>) {
        let (all, _) = cl.store.list(&pods(), None);
        out.extend(all.iter().map(|p| Key::new("", "pods", meta::namespace(p), meta::name(p))));
    }

    fn reconcile(&self, cl: &Cluster, key: &Key) -> Option<Duration> {
        let Some(pod) = super::get(cl, key) else {
            self.runtime.gone(&key.namespace, &key.name);
            return None;
        };
        if self.runtime.runs(&pod) {
            return reconcile_runtime_pod(cl, &self.runtime, &pod);
        }
        let pdef = def(cl, "", "pods")?;
        if meta::is_deleting(&pod) {
            // The containers stop at once; the pod object goes (or waits for its finalizers).
            let opts = DeleteOpts { grace_period_seconds: Some(0), ..Default::default() };
            let _ = ops::delete(cl, &pdef, &key.namespace, &key.name, &opts);
            return None;
        }
        let node = match pod.pointer("/spec/nodeName").and_then(Value::as_str).filter(|n| !n.is_empty()) {
            Some(n) => n.to_string(),
            None => {
                schedule(cl, &pod);
                return None;
            }
        };
        if matches!(pod.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded") | Some("Failed")) {
            return None;
        }
        let mut computed = compute_status(cl, &pod, &node);
        run_to_completion(cl, &pod, &mut computed);
        ephemeral_container_statuses(&pod, &mut computed);
        super::write_status(cl, &pdef, &pod, computed.status, MANAGER);
        computed.requeue
    }
}

// ---- pods of the process runtime ----------------------------------------------------------

/// A pod with a container of a `--run` image: scheduled as any pod, then run (and its status
/// written) by the process runtime (`crate::runtime`), which also ends its processes and removes
/// it when it is deleted. A deleted pod the runtime does not run goes at once.
fn reconcile_runtime_pod(cl: &Cluster, rt: &Arc<Runtime>, pod: &Value) -> Option<Duration> {
    let scheduled = pod.pointer("/spec/nodeName").and_then(Value::as_str).is_some_and(|n| !n.is_empty());
    if !scheduled && !meta::is_deleting(pod) {
        schedule(cl, pod);
        return None;
    }
    if (!scheduled || !rt.sync(pod))
        && meta::is_deleting(pod)
        && let Some(pdef) = def(cl, "", "pods")
    {
        let opts = DeleteOpts { grace_period_seconds: Some(0), ..Default::default() };
        let _ = ops::delete(cl, &pdef, meta::namespace(pod), meta::name(pod), &opts);
    }
    None
}

// ---- ephemeral containers (kubectl debug) --------------------------------------------------

/// A simulated ephemeral container runs from when it was added (`pods/ephemeralcontainers`),
/// as the kubelet reports it in `status.ephemeralContainerStatuses`; it is never restarted.
fn ephemeral_container_statuses(pod: &Value, computed: &mut Computed) {
    let Some(list) = pod.pointer("/spec/ephemeralContainers").and_then(Value::as_array) else { return };
    let now = meta::now();
    let uid = meta::uid(pod);
    let old: Vec<Value> =
        pod.pointer("/status/ephemeralContainerStatuses").and_then(Value::as_array).cloned().unwrap_or_default();
    let statuses: Vec<Value> = list
        .iter()
        .map(|c| {
            let name = c.get("name").and_then(Value::as_str).unwrap_or("");
            let (img, image_id) = image_and_id(c.get("image").and_then(Value::as_str).unwrap_or(""));
            let since = old
                .iter()
                .find(|o| o.get("name").and_then(Value::as_str) == Some(name))
                .and_then(|o| o.pointer("/state/running/startedAt").cloned())
                .unwrap_or_else(|| now.clone().into());
            json!({"name": name, "state": {"running": {"startedAt": since}}, "lastState": {}, "ready": false,
                "restartCount": 0, "image": img, "imageID": image_id, "containerID": container_id(uid, name, 0)})
        })
        .collect();
    if let Some(s) = computed.status.as_object_mut() {
        s.insert("ephemeralContainerStatuses".into(), Value::Array(statuses));
    }
}

// ---- run-to-completion containers (Jobs' pods) -------------------------------------------

/// A simulated container of a Job's pod (`restartPolicy` Never or OnFailure) exits once it ran
/// `Options::job_pod_duration`: with 0, or the code of an `exit:CODE` fault rule. As a kubelet
/// reports it (pkg/kubelet/kubelet_pods.go `getPhase`, `generateAPIPodStatus`): the container
/// `terminated` (reason `Completed` or `Error`); `Never` makes the pod `Succeeded` when every
/// container exited 0 and `Failed` otherwise, with `Ready`/`ContainersReady` False (reason
/// `PodCompleted`/`PodFailed`); `OnFailure` restarts a failed container with the crash-loop
/// back-off (restart counts the Job controller counts against `backoffLimit`) and the pod is
/// `Succeeded` once all exit 0. Other pods are left as computed (they run until deleted).
fn run_to_completion(cl: &Cluster, pod: &Value, computed: &mut Computed) {
    let owned_by_job =
        pod.pointer("/metadata/ownerReferences").and_then(Value::as_array).into_iter().flatten().any(|r| {
            r.get("controller").and_then(Value::as_bool) == Some(true)
                && r.get("kind").and_then(Value::as_str) == Some("Job")
        });
    let policy = pod.pointer("/spec/restartPolicy").and_then(Value::as_str).unwrap_or("Always");
    if !owned_by_job || !matches!(policy, "Never" | "OnFailure") {
        return;
    }
    let Some(statuses) = computed.status.get("containerStatuses").and_then(Value::as_array).cloned() else { return };
    // Only once every container runs (not pulling, not starting).
    if statuses.is_empty() || statuses.iter().any(|c| c.pointer("/state/running").is_none()) {
        return;
    }
    let rules = cl.faults();
    let now_ms = jiff::Timestamp::now().as_millisecond();
    let duration_ms = cl.options.job_pod_duration.as_millis() as i64;
    let images: std::collections::HashMap<&str, &str> = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| {
            (c.get("name").and_then(Value::as_str).unwrap_or(""), c.get("image").and_then(Value::as_str).unwrap_or(""))
        })
        .collect();
    let mut next_ms: Option<i64> = None;
    let mut out = vec![];
    let (mut all_done, mut any_failed, mut restarting) = (true, false, false);
    for st in statuses {
        let name = st.get("name").and_then(Value::as_str).unwrap_or("").to_string();
        let started = st.pointer("/state/running/startedAt").and_then(Value::as_str).unwrap_or("").to_string();
        let started_s = super::unix(&started).unwrap_or(now_ms / 1000);
        // startedAt has whole seconds: count from the end of that second, so a container never
        // exits before it ran the whole duration.
        let finish_ms = started_s * 1000 + 999 + duration_ms;
        if now_ms < finish_ms {
            all_done = false;
            next_ms = Some(next_ms.map_or(finish_ms - now_ms, |n: i64| n.min(finish_ms - now_ms)));
            out.push(st);
            continue;
        }
        let code = match faults::find(&rules, images.get(name.as_str()).copied().unwrap_or("")) {
            Some(Fault::Exit { exit_code }) => exit_code,
            _ => 0,
        };
        let finished = crate::clock::format_rfc3339(finish_ms / 1000);
        let cid = st.get("containerID").cloned().unwrap_or(Value::Null);
        let terminated = json!({"exitCode": code, "reason": if code == 0 { "Completed" } else { "Error" },
            "startedAt": started, "finishedAt": finished, "containerID": cid});
        let mut next = st.clone();
        if code != 0 && policy == "OnFailure" {
            // Restarted in place with the crash-loop back-off, as `crash-loop` faults are.
            all_done = false;
            restarting = true;
            let (restarts, wait) = crash_restarts((now_ms - finish_ms) / 1000);
            next_ms = Some(next_ms.map_or(wait * 1000, |n| n.min(wait * 1000)));
            next["state"] = json!({"waiting": {"reason": "CrashLoopBackOff", "message": format!("back-off {} restarting failed container={name} pod={}_{}({})", go_secs(wait.max(10)), meta::name(pod), meta::namespace(pod), meta::uid(pod))}});
            next["lastState"] = json!({"terminated": terminated});
            next["restartCount"] = restarts.into();
            next["ready"] = false.into();
            next["started"] = false.into();
        } else {
            any_failed |= code != 0;
            next["state"] = json!({"terminated": terminated});
            next["ready"] = false.into();
            next["started"] = false.into();
        }
        out.push(next);
    }
    let now = meta::now();
    let mut conds = conditions::of(Some(&computed.status));
    let s = match computed.status.as_object_mut() {
        Some(s) => s,
        None => return,
    };
    s.insert("containerStatuses".into(), Value::Array(out.clone()));
    if all_done {
        let (phase, reason) = if any_failed { ("Failed", "PodFailed") } else { ("Succeeded", "PodCompleted") };
        s.insert("phase".into(), phase.into());
        conditions::set(&mut conds, Style::Pod, "PodReadyToStartContainers", "False", "", "", &now);
        conditions::set(&mut conds, Style::Pod, "Initialized", "True", "PodCompleted", "", &now);
        conditions::set(&mut conds, Style::Pod, "Ready", "False", reason, "", &now);
        conditions::set(&mut conds, Style::Pod, "ContainersReady", "False", reason, "", &now);
        s.insert("conditions".into(), Value::Array(conds));
    } else if restarting || out.iter().any(|c| c.pointer("/state/terminated").is_some()) {
        let unready: Vec<&str> = out
            .iter()
            .filter(|c| c.get("ready") != Some(&Value::Bool(true)))
            .filter_map(|c| c.get("name").and_then(Value::as_str))
            .collect();
        let msg = format!("containers with unready status: [{}]", unready.join(" "));
        conditions::set(&mut conds, Style::Pod, "Ready", "False", "ContainersNotReady", &msg, &now);
        conditions::set(&mut conds, Style::Pod, "ContainersReady", "False", "ContainersNotReady", &msg, &now);
        s.insert("conditions".into(), Value::Array(conds));
    }
    if let Some(ms) = next_ms {
        let d = Duration::from_millis(ms.max(1) as u64);
        computed.requeue = Some(computed.requeue.map_or(d, |r| r.min(d)));
    } else if all_done {
        computed.requeue = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crash_loop_backoff_doubles_to_five_minutes() {
        assert_eq!(crash_restarts(0), (1, 10));
        assert_eq!(crash_restarts(10), (2, 20));
        assert_eq!(crash_restarts(35), (3, 35));
        assert_eq!(go_secs(300), "5m0s");
    }
}
