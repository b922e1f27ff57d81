//! Jobs, as kube-controller-manager's job controller runs them (pkg/controller/job/
//! job_controller.go, 1.33) and the TTL-after-finished controller (pkg/controller/
//! ttlafterfinished) deletes them.
//!
//! - Pods from the template, `parallelism` at a time until `completions` succeeded (NonIndexed),
//!   or one per completion index (Indexed: the `batch.kubernetes.io/job-completion-index`
//!   annotation and label, `JOB_COMPLETION_INDEX` env, hostname `<job>-<index>`,
//!   `status.completedIndexes`). Without `completions`, the Job is done when one pod succeeded
//!   and none is left running. Pods are named `<job>-<random>` (`<job>-<index>-<random>`),
//!   carry the template's labels (the API server defaults `batch.kubernetes.io/controller-uid`,
//!   `batch.kubernetes.io/job-name` and the legacy `controller-uid`, `job-name`), a controller
//!   owner reference and the `batch.kubernetes.io/job-tracking` finalizer.
//! - Finished pods are counted as upstream tracks them: first listed in
//!   `status.uncountedTerminatedPods`, then their finalizer is removed, then they move to
//!   `succeeded`/`failed`. A pod deleted before it finished counts as failed.
//! - Failures (failed pods, and container restarts with `restartPolicy: OnFailure`) beyond
//!   `backoffLimit` fail the Job (`BackoffLimitExceeded`), as does running longer than
//!   `activeDeadlineSeconds` (`DeadlineExceeded`). A replacement for a failed pod waits the
//!   job back-off (10s doubling, at most 6m) after the last failure.
//! - The 1.31+ terminal conditions: `SuccessCriteriaMet` (or `FailureTarget`) as soon as the
//!   outcome is known, then `Complete` (or `Failed`) once no pod is left running or
//!   terminating; `completionTime` on success. `suspend` deletes the active pods (condition
//!   `Suspended`, reason `JobSuspended`; `JobResumed` on resume, `startTime` reset).
//! - Status as 1.33 writes it: `active`, `succeeded`, `failed` (omitted when 0), `ready` and
//!   `terminating` (always), `uncountedTerminatedPods: {}`, `startTime`, events
//!   `SuccessfulCreate`, `SuccessfulDelete`, `Completed`, `BackoffLimitExceeded`, ...
//!
//! A Job whose `spec.managedBy` names another controller is left to it.
//!
//! Differences: `podFailurePolicy`, `successPolicy`, `backoffLimitPerIndex`,
//! `maxFailedIndexes` and `podReplacementPolicy: Failed` are stored but not acted on; the
//! back-off exponent counts every failure of the Job (upstream: failures since the last
//! success). Times (`startTime`, `completionTime`, deadlines, TTLs) use the cluster's
//! [`crate::clock::Clock`].

use super::event;
use super::replicaset::{owned_pods, pod_from_template};
use super::{Controller, Key, def};
use crate::cluster::Cluster;
use crate::conditions::pod_ready;
use crate::meta;
use crate::ops::{self, DeleteOpts, WriteOpts};
use crate::registry::GroupResource;
use crate::store::{Change, EventType};
use serde_json::{Map, Value, json};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

const MANAGER: &str = "job-controller";
const TTL_MANAGER: &str = "ttl-after-finished-controller";
/// The finalizer the job controller puts on its pods until it counted them.
pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
/// The annotation and label of an Indexed Job's pod.
pub const INDEX_KEY: &str = "batch.kubernetes.io/job-completion-index";

pub struct JobController;
pub struct TtlAfterFinished;

fn jobs() -> GroupResource {
    GroupResource::new("batch", "jobs")
}

fn phase(p: &Value) -> &str {
    p.pointer("/status/phase").and_then(Value::as_str).unwrap_or("")
}

fn has_finalizer(p: &Value) -> bool {
    meta::finalizers(p).iter().any(|f| f == TRACKING_FINALIZER)
}

/// The Job a pod's controller reference names.
fn owner_job(p: &Value) -> Option<(&str, &str)> {
    p.pointer("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| {
            r.get("controller").and_then(Value::as_bool) == Some(true)
                && r.get("kind").and_then(Value::as_str) == Some("Job")
                && r.get("apiVersion").and_then(Value::as_str) == Some("batch/v1")
        })
        .and_then(|r| Some((r.get("name")?.as_str()?, r.get("uid")?.as_str()?)))
}

/// A Job's terminal condition (`Complete` or `Failed`) is True.
pub fn finished(job: &Value) -> Option<&'static str> {
    let conds = crate::conditions::of(job.get("status"));
    ["Complete", "Failed"].into_iter().find(|t| crate::conditions::is_true(&conds, t))
}

/// Set a Job condition (`type, status, lastProbeTime, lastTransitionTime, reason, message`;
/// both times move when the status changes, as upstream's `newCondition`/`updateCondition`).
fn set_condition(conds: &mut Vec<Value>, type_: &str, status: &str, reason: &str, message: &str, now: &str) -> bool {
    if let Some(c) = conds.iter_mut().find(|c| c.get("type").and_then(Value::as_str) == Some(type_)) {
        let same = c.get("status").and_then(Value::as_str) == Some(status)
            && c.get("reason").and_then(Value::as_str).unwrap_or("") == reason
            && c.get("message").and_then(Value::as_str).unwrap_or("") == message;
        if same {
            return false;
        }
        *c = json!({"type": type_, "status": status, "lastProbeTime": now, "lastTransitionTime": now, "reason": reason, "message": message});
        return true;
    }
    conds.push(json!({"type": type_, "status": status, "lastProbeTime": now, "lastTransitionTime": now, "reason": reason, "message": message}));
    true
}

/// `1,3-5,7` -> {1,3,4,5,7}; malformed parts are skipped.
pub fn parse_indexes(s: &str, completions: i64) -> BTreeSet<i64> {
    let mut out = BTreeSet::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.parse::<i64>(), b.parse::<i64>()) {
            for i in a.max(0)..=b.min(completions - 1) {
                out.insert(i);
            }
        }
    }
    out
}

/// {1,3,4,5,7} -> `1,3-5,7` (status.completedIndexes).
pub fn format_indexes(set: &BTreeSet<i64>) -> String {
    let mut parts: Vec<String> = vec![];
    let mut iter = set.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end += 1;
            iter.next();
        }
        parts.push(if start == end { start.to_string() } else { format!("{start}-{end}") });
    }
    parts.join(",")
}

fn pod_index(p: &Value) -> Option<i64> {
    p.pointer("/metadata/annotations")
        .and_then(|a| a.get(INDEX_KEY))
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
}

/// The job back-off before a replacement pod: 10s doubling per failure, at most 6 minutes
/// (pkg/controller/job/backoff_utils.go, `DefaultJobPodFailureBackOff`/`MaxJobPodFailureBackOff`).
fn backoff(failures: i64) -> Duration {
    if failures <= 0 {
        return Duration::ZERO;
    }
    let secs = 10u64.saturating_mul(1u64 << (failures - 1).min(10) as u32);
    Duration::from_secs(secs.min(360))
}

/// When a failed pod finished (its containers' latest `finishedAt`).
fn failed_at(p: &Value) -> Option<i64> {
    p.pointer("/status/containerStatuses")?
        .as_array()?
        .iter()
        .filter_map(|c| {
            c.pointer("/state/terminated/finishedAt").or_else(|| c.pointer("/lastState/terminated/finishedAt"))
        })
        .filter_map(Value::as_str)
        .filter_map(super::unix)
        .max()
}

fn restarts(p: &Value) -> i64 {
    ["initContainerStatuses", "containerStatuses"]
        .iter()
        .filter_map(|f| p.get("status").and_then(|s| s.get(*f)).and_then(Value::as_array))
        .flatten()
        .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
        .sum()
}

fn uids(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).map(str::to_string).collect()
}

/// Remove the tracking finalizer from a pod (a JSON patch would race less; the store is local).
fn remove_finalizer(cl: &Cluster, pod: &Value) -> bool {
    let Some(pdef) = def(cl, "", "pods") else { return false };
    let Some(cur) = cl.store.get(&pdef.storage, meta::namespace(pod), meta::name(pod)) else { return true };
    if !has_finalizer(&cur) {
        return true;
    }
    let mut next = (*cur).clone();
    if let Some(m) = meta::meta_mut(&mut next)
        && let Some(Value::Array(f)) = m.get_mut("finalizers")
    {
        f.retain(|x| x.as_str() != Some(TRACKING_FINALIZER));
        if f.is_empty() {
            m.remove("finalizers");
        }
    }
    super::write_object(cl, &pdef, &cur, next, MANAGER)
}

/// Delete a pod of the Job (the kubelet stops it; the Job counts it once it is gone).
fn delete_pod(cl: &Cluster, job: &Value, pod: &Value) {
    let Some(pdef) = def(cl, "", "pods") else { return };
    let opts = DeleteOpts { precondition_uid: Some(meta::uid(pod).to_string()), ..Default::default() };
    match ops::delete(cl, &pdef, meta::namespace(pod), meta::name(pod), &opts) {
        Ok(_) => event(cl, job, "Normal", "SuccessfulDelete", &format!("Deleted pod: {}", meta::name(pod)), MANAGER),
        Err(e) if e.code == 404 => {}
        Err(e) => tracing::debug!(pod = meta::name(pod), error = %e.message, "job pod delete failed"),
    }
}

/// A new pod of the Job (with its completion index when Indexed).
fn new_pod(job: &Value, index: Option<i64>) -> Value {
    let template = job.pointer("/spec/template").cloned().unwrap_or_else(|| json!({}));
    let mut extra = vec![];
    if let Some(i) = index {
        extra.push((INDEX_KEY.to_string(), i.to_string()));
    }
    let mut pod = pod_from_template(job, &template, None, &extra);
    let name = meta::name(job);
    if let Some(m) = meta::meta_mut(&mut pod) {
        if let Some(i) = index {
            m.insert("generateName".into(), format!("{name}-{i}-").into());
            let ann = m.entry("annotations").or_insert_with(|| json!({}));
            if let Some(a) = ann.as_object_mut() {
                a.insert(INDEX_KEY.into(), i.to_string().into());
            }
        }
        let fins = m.entry("finalizers").or_insert_with(|| json!([]));
        if let Some(f) = fins.as_array_mut()
            && !f.iter().any(|x| x.as_str() == Some(TRACKING_FINALIZER))
        {
            f.push(TRACKING_FINALIZER.into());
        }
    }
    if let Some(i) = index
        && let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut)
    {
        spec.entry("hostname").or_insert_with(|| format!("{name}-{i}").into());
        let env = json!({"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {"apiVersion": "v1",
            "fieldPath": format!("metadata.annotations['{INDEX_KEY}']")}}});
        for field in ["initContainers", "containers"] {
            for c in spec.get_mut(field).and_then(Value::as_array_mut).into_iter().flatten() {
                if let Some(c) = c.as_object_mut() {
                    let list = c.entry("env").or_insert_with(|| json!([]));
                    if let Some(l) = list.as_array_mut()
                        && !l.iter().any(|e| e.get("name").and_then(Value::as_str) == Some("JOB_COMPLETION_INDEX"))
                    {
                        l.push(env.clone());
                    }
                }
            }
        }
    }
    pod
}

/// What a sync found about the Job's pods.
#[derive(Default)]
struct Census {
    active: Vec<Arc<Value>>,
    terminating: usize,
    ready: usize,
    /// Finished pods still holding the finalizer (to be listed as uncounted).
    newly_succeeded: Vec<String>,
    newly_failed: Vec<String>,
    succeeded_indexes: BTreeSet<i64>,
    last_failure: Option<i64>,
    restarts: i64,
}

fn census(pods: &[Arc<Value>], indexed: bool, completions: i64) -> Census {
    let mut c = Census::default();
    for p in pods {
        let ph = phase(p);
        let deleting = meta::is_deleting(p);
        let terminal = matches!(ph, "Succeeded" | "Failed");
        if ph == "Succeeded" {
            if indexed && let Some(i) = pod_index(p).filter(|i| *i >= 0 && *i < completions) {
                c.succeeded_indexes.insert(i);
            }
            if has_finalizer(p) {
                c.newly_succeeded.push(meta::uid(p).to_string());
            }
        } else if ph == "Failed" || deleting {
            if has_finalizer(p) && (terminal || deleting) {
                c.newly_failed.push(meta::uid(p).to_string());
            }
            if let Some(t) = failed_at(p) {
                c.last_failure = Some(c.last_failure.map_or(t, |l: i64| l.max(t)));
            }
        }
        if deleting && !terminal {
            c.terminating += 1;
        }
        if !terminal && !deleting {
            if pod_ready(p) {
                c.ready += 1;
            }
            c.restarts += restarts(p);
            c.active.push(p.clone());
        }
    }
    c
}

impl JobController {
    /// A pod that still holds the tracking finalizer but whose Job is gone (or going) is let go.
    fn release_orphan(&self, cl: &Cluster, key: &Key) {
        let Some(pod) = super::get(cl, key) else { return };
        if !has_finalizer(&pod) {
            return;
        }
        let job = owner_job(&pod)
            .and_then(|(name, uid)| cl.store.get(&jobs(), &key.namespace, name).filter(|j| meta::uid(j) == uid));
        let release = match &job {
            None => true,
            Some(j) => meta::is_deleting(j) || finished(j).is_some() && matches!(phase(&pod), "Succeeded" | "Failed"),
        };
        if release {
            remove_finalizer(cl, &pod);
        }
    }

    fn sync(&self, cl: &Cluster, key: &Key) -> Option<Duration> {
        let job = super::get(cl, key)?;
        // `spec.managedBy` naming another controller (JobManagedBy, on by default since 1.32):
        // the Job is that controller's to run.
        if job.pointer("/spec/managedBy").and_then(Value::as_str).is_some_and(|m| m != "kubernetes.io/job-controller") {
            return None;
        }
        let pods = owned_pods(cl, &job);
        if meta::is_deleting(&job) {
            for p in pods.iter().filter(|p| has_finalizer(p)) {
                remove_finalizer(cl, p);
            }
            return None;
        }
        if finished(&job).is_some() {
            for p in pods.iter().filter(|p| has_finalizer(p) && matches!(phase(p), "Succeeded" | "Failed")) {
                remove_finalizer(cl, p);
            }
            return None;
        }
        let jdef = def(cl, "batch", "jobs")?;
        let pdef = def(cl, "", "pods")?;
        let clock = &cl.options.clock;
        let now_s = clock.now().as_second();
        let now = clock.now_rfc3339();
        let spec = job.get("spec").cloned().unwrap_or_default();
        let int = |f: &str| spec.get(f).and_then(Value::as_i64);
        let parallelism = int("parallelism").unwrap_or(1).max(0);
        let completions = int("completions");
        let backoff_limit = int("backoffLimit").unwrap_or(6);
        let suspend = spec.get("suspend").and_then(Value::as_bool) == Some(true);
        let indexed = spec.get("completionMode").and_then(Value::as_str) == Some("Indexed");
        let on_failure = spec.pointer("/template/spec/restartPolicy").and_then(Value::as_str) == Some("OnFailure");
        let old = job.get("status").cloned().unwrap_or_else(|| json!({}));
        let mut conds = crate::conditions::of(Some(&old));

        // Uncounted pods whose finalizer is gone are counted now.
        let by_uid: HashMap<&str, &Arc<Value>> = pods.iter().map(|p| (meta::uid(p), p)).collect();
        let mut succeeded = old.get("succeeded").and_then(Value::as_i64).unwrap_or(0);
        let mut failed = old.get("failed").and_then(Value::as_i64).unwrap_or(0);
        let mut unc_s = uids(old.pointer("/uncountedTerminatedPods/succeeded"));
        let mut unc_f = uids(old.pointer("/uncountedTerminatedPods/failed"));
        unc_s.retain(|u| {
            let keep = by_uid.get(u.as_str()).is_some_and(|p| has_finalizer(p));
            if !keep {
                succeeded += 1;
            }
            keep
        });
        unc_f.retain(|u| {
            let keep = by_uid.get(u.as_str()).is_some_and(|p| has_finalizer(p));
            if !keep {
                failed += 1;
            }
            keep
        });
        let completions_n = completions.unwrap_or(0);
        let c = census(&pods, indexed, completions_n);
        for u in &c.newly_succeeded {
            if !unc_s.contains(u) {
                unc_s.push(u.clone());
            }
        }
        for u in &c.newly_failed {
            if !unc_f.contains(u) {
                unc_f.push(u.clone());
            }
        }
        let mut completed =
            parse_indexes(old.get("completedIndexes").and_then(Value::as_str).unwrap_or(""), completions_n);
        completed.extend(c.succeeded_indexes.iter().copied());
        if indexed {
            // An Indexed Job counts succeeded indexes (upstream: `succeededIndexes.total()`).
            succeeded = completed.len() as i64 - unc_s.len().min(completed.len()) as i64;
        }
        let succeeded_total = succeeded + unc_s.len() as i64;
        let failed_total = failed + unc_f.len() as i64;
        let failures = failed_total + if on_failure { c.restarts } else { 0 };

        let mut start_time = old.get("startTime").and_then(Value::as_str).map(str::to_string);
        let mut requeue: Option<Duration> = None;
        let mut at_most = |d: Duration| requeue = Some(requeue.map_or(d, |r: Duration| r.min(d)));

        // Suspension.
        let was_suspended = crate::conditions::is_true(&conds, "Suspended");
        if suspend {
            if !was_suspended {
                set_condition(&mut conds, "Suspended", "True", "JobSuspended", "Job suspended", &now);
                event(cl, &job, "Normal", "Suspended", "Job suspended", MANAGER);
            }
            start_time = None;
        } else {
            if was_suspended {
                set_condition(&mut conds, "Suspended", "False", "JobResumed", "Job resumed", &now);
                event(cl, &job, "Normal", "Resumed", "Job resumed", MANAGER);
                start_time = None;
            }
            if start_time.is_none() {
                start_time = Some(now.clone());
            }
        }

        // The outcome, once known, is kept (1.31+: SuccessCriteriaMet / FailureTarget first).
        let mut failure = crate::conditions::find(&conds, "FailureTarget")
            .filter(|_| crate::conditions::is_true(&conds, "FailureTarget"))
            .map(|c| {
                (
                    c.get("reason").and_then(Value::as_str).unwrap_or("").to_string(),
                    c.get("message").and_then(Value::as_str).unwrap_or("").to_string(),
                )
            });
        let mut success = crate::conditions::is_true(&conds, "SuccessCriteriaMet");
        if failure.is_none() && !success && !suspend {
            if failures > backoff_limit {
                failure = Some((
                    "BackoffLimitExceeded".to_string(),
                    "Job has reached the specified backoff limit".to_string(),
                ));
            } else if let (Some(ads), Some(st)) =
                (int("activeDeadlineSeconds"), start_time.as_deref().and_then(super::unix))
            {
                if now_s >= st + ads {
                    failure = Some((
                        "DeadlineExceeded".to_string(),
                        "Job was active longer than specified deadline".to_string(),
                    ));
                } else {
                    at_most(Duration::from_secs((st + ads - now_s).max(1) as u64));
                }
            }
            if failure.is_none() {
                success = match completions {
                    Some(n) if indexed => completed.len() as i64 >= n,
                    Some(n) => succeeded_total >= n,
                    None => succeeded_total > 0 && c.active.is_empty(),
                };
            }
            if let Some((reason, message)) = &failure {
                set_condition(&mut conds, "FailureTarget", "True", reason, message, &now);
                event(cl, &job, "Warning", reason, message, MANAGER);
            } else if success {
                set_condition(
                    &mut conds,
                    "SuccessCriteriaMet",
                    "True",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                    &now,
                );
            }
        }

        // Pods: remove what is not wanted, create what is missing.
        let mut active = c.active.clone();
        let mut terminating = c.terminating;
        if failure.is_some() || success || suspend {
            for p in &active {
                delete_pod(cl, &job, p);
                terminating += 1;
            }
            active.clear();
        } else {
            let want = match completions {
                Some(n) if indexed => parallelism.min(n - completed.len() as i64),
                Some(n) => parallelism.min(n - succeeded_total),
                None if succeeded_total > 0 => (active.len() as i64).min(parallelism),
                None => parallelism,
            }
            .max(0) as usize;
            if active.len() > want {
                let mut ranked = active.clone();
                ranked.sort_by_key(|p| {
                    (pod_ready(p), std::cmp::Reverse(meta::meta_str(p, "creationTimestamp").unwrap_or("").to_string()))
                });
                for p in ranked.iter().take(active.len() - want) {
                    delete_pod(cl, &job, p);
                    terminating += 1;
                }
                let gone: BTreeSet<String> =
                    ranked.iter().take(active.len() - want).map(|p| meta::uid(p).to_string()).collect();
                active.retain(|p| !gone.contains(meta::uid(p)));
            } else if active.len() < want {
                // The job back-off after a failure.
                let wait = c.last_failure.map(|t| t + backoff(failed_total).as_secs() as i64 - now_s).unwrap_or(0);
                if failed_total > 0 && wait > 0 {
                    at_most(Duration::from_secs(wait as u64));
                } else {
                    let mut indexes: Vec<Option<i64>> = vec![];
                    if indexed {
                        let running: BTreeSet<i64> = active.iter().filter_map(|p| pod_index(p)).collect();
                        indexes = (0..completions_n)
                            .filter(|i| !completed.contains(i) && !running.contains(i))
                            .map(Some)
                            .take(want - active.len())
                            .collect();
                    } else {
                        indexes.resize(want - active.len(), None);
                    }
                    for ix in indexes {
                        match ops::create(cl, &pdef, &key.namespace, new_pod(&job, ix), &WriteOpts::system(MANAGER)) {
                            Ok(w) => {
                                event(
                                    cl,
                                    &job,
                                    "Normal",
                                    "SuccessfulCreate",
                                    &format!("Created pod: {}", meta::name(&w.object)),
                                    MANAGER,
                                );
                                active.push(Arc::new(w.object));
                            }
                            Err(e) => {
                                event(
                                    cl,
                                    &job,
                                    "Warning",
                                    "FailedCreate",
                                    &format!("Error creating: {}", e.message),
                                    MANAGER,
                                );
                                at_most(Duration::from_secs(5));
                                break;
                            }
                        }
                    }
                }
            }
        }

        // Finished once nothing runs or terminates and every finished pod is counted.
        let settled = active.is_empty() && terminating == 0 && unc_s.is_empty() && unc_f.is_empty();
        let mut completion_time = old.get("completionTime").cloned();
        if settled && let Some((reason, message)) = &failure {
            set_condition(&mut conds, "Failed", "True", reason, message, &now);
        } else if settled && success {
            set_condition(
                &mut conds,
                "Complete",
                "True",
                "CompletionsReached",
                "Reached expected number of succeeded pods",
                &now,
            );
            completion_time = Some(now.clone().into());
            event(cl, &job, "Normal", "Completed", "Job completed", MANAGER);
        }

        let mut status = Map::new();
        if !conds.is_empty() {
            status.insert("conditions".into(), Value::Array(conds));
        }
        if let Some(st) = &start_time {
            status.insert("startTime".into(), st.clone().into());
        }
        if let Some(ct) = completion_time {
            status.insert("completionTime".into(), ct);
        }
        for (k, v) in [("active", active.len() as i64), ("succeeded", succeeded), ("failed", failed)] {
            if v != 0 {
                status.insert(k.into(), v.into());
            }
        }
        if indexed && !completed.is_empty() {
            status.insert("completedIndexes".into(), format_indexes(&completed).into());
        }
        let mut unc = Map::new();
        if !unc_s.is_empty() {
            unc.insert("succeeded".into(), json!(unc_s));
        }
        if !unc_f.is_empty() {
            unc.insert("failed".into(), json!(unc_f));
        }
        status.insert("uncountedTerminatedPods".into(), Value::Object(unc));
        status.insert("terminating".into(), terminating.into());
        status.insert("ready".into(), active.iter().filter(|p| pod_ready(p)).count().into());
        let status = Value::Object(status);

        // Record first, then release the pods' finalizers (upstream's order: a crash between
        // the two never loses a count).
        let recorded = if job.get("status") == Some(&status) {
            true
        } else {
            let mut next = (*job).clone();
            next["status"] = status;
            let opts = WriteOpts { subresource: Some("status".into()), ..WriteOpts::system(MANAGER) };
            match ops::update(cl, &jdef, &key.namespace, &key.name, next, &opts) {
                Ok(_) => true,
                Err(e) => {
                    tracing::debug!(job = key.name, error = %e.message, "job status update failed");
                    at_most(Duration::from_millis(200));
                    false
                }
            }
        };
        if recorded {
            for u in unc_s.iter().chain(unc_f.iter()) {
                if let Some(p) = by_uid.get(u.as_str()) {
                    remove_finalizer(cl, p);
                }
            }
        }
        requeue
    }
}

impl Controller for JobController {
    fn keys_for(&self, _cl: &Cluster, c: &Change, out: &mut Vec<Key>) {
        if c.gr == jobs() {
            if c.kind != EventType::Deleted {
                out.push(Key::of(c));
            }
        } else if c.gr.group.is_empty() && c.gr.resource == "pods" {
            for obj in [Some(&c.object), c.prev.as_ref()].into_iter().flatten() {
                if let Some((name, _)) = owner_job(obj) {
                    out.push(Key::new("batch", "jobs", &c.namespace, name));
                }
            }
            if c.kind != EventType::Deleted && has_finalizer(&c.object) {
                out.push(Key::of(c));
            }
        }
    }

    fn all_keys(&self, cl: &Cluster, out: &mut Vec<Key>) {
        let (all, _) = cl.store.list(&jobs(), None);
        out.extend(all.iter().map(|o| Key::new("batch", "jobs", meta::namespace(o), meta::name(o))));
        let (pods, _) = cl.store.list(&GroupResource::new("", "pods"), None);
        out.extend(
            pods.iter().filter(|p| has_finalizer(p)).map(|p| Key::new("", "pods", meta::namespace(p), meta::name(p))),
        );
    }

    fn reconcile(&self, cl: &Cluster, key: &Key) -> Option<Duration> {
        if key.gr.resource == "pods" {
            self.release_orphan(cl, key);
            return None;
        }
        self.sync(cl, key)
    }
}

/// When a finished Job expires: its finish time plus `ttlSecondsAfterFinished`.
fn expires_at(job: &Value) -> Option<i64> {
    let ttl = job.pointer("/spec/ttlSecondsAfterFinished").and_then(Value::as_i64)?;
    let kind = finished(job)?;
    let conds = crate::conditions::of(job.get("status"));
    let done = job
        .pointer("/status/completionTime")
        .and_then(Value::as_str)
        .filter(|_| kind == "Complete")
        .or_else(|| crate::conditions::find(&conds, kind)?.get("lastTransitionTime")?.as_str())
        .and_then(super::unix)?;
    Some(done + ttl)
}

impl Controller for TtlAfterFinished {
    fn keys_for(&self, _cl: &Cluster, c: &Change, out: &mut Vec<Key>) {
        if c.gr == jobs() && c.kind != EventType::Deleted {
            out.push(Key::of(c));
        }
    }

    fn all_keys(&self, cl: &Cluster, out: &mut Vec<Key>) {
        let (all, _) = cl.store.list(&jobs(), None);
        out.extend(all.iter().map(|o| Key::new("batch", "jobs", meta::namespace(o), meta::name(o))));
    }

    /// pkg/controller/ttlafterfinished: a finished Job with `ttlSecondsAfterFinished` is deleted
    /// (background propagation, uid precondition) once that many seconds passed.
    fn reconcile(&self, cl: &Cluster, key: &Key) -> Option<Duration> {
        let job = super::get(cl, key)?;
        if meta::is_deleting(&job) {
            return None;
        }
        let at = expires_at(&job)?;
        let now = cl.options.clock.now().as_second();
        if now < at {
            return Some(Duration::from_secs((at - now) as u64));
        }
        let jdef = def(cl, "batch", "jobs")?;
        let opts = DeleteOpts {
            propagation_policy: Some("Background".into()),
            precondition_uid: Some(meta::uid(&job).to_string()),
            ..Default::default()
        };
        if let Err(e) = ops::delete(cl, &jdef, &key.namespace, &key.name, &opts)
            && e.code != 404
        {
            tracing::debug!(job = key.name, manager = TTL_MANAGER, error = %e.message, "TTL delete failed");
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completed_indexes_round_trip() {
        let s = parse_indexes("0,2-4,7", 8);
        assert_eq!(s.iter().copied().collect::<Vec<_>>(), vec![0, 2, 3, 4, 7]);
        assert_eq!(format_indexes(&s), "0,2-4,7");
        assert_eq!(parse_indexes("1-9,x,3-", 3).len(), 2);
        assert_eq!(format_indexes(&BTreeSet::new()), "");
    }

    #[test]
    fn backoff_doubles_to_six_minutes() {
        assert_eq!(backoff(0), Duration::ZERO);
        assert_eq!(backoff(1), Duration::from_secs(10));
        assert_eq!(backoff(3), Duration::from_secs(40));
        assert_eq!(backoff(40), Duration::from_secs(360));
    }

    #[test]
    fn indexed_pods_carry_their_index() {
        let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "n", "uid": "u"},
            "spec": {"template": {"metadata": {"labels": {"job-name": "j"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        let p = new_pod(&job, Some(2));
        assert_eq!(p["metadata"]["generateName"], "j-2-");
        assert_eq!(p["metadata"]["annotations"][INDEX_KEY], "2");
        assert_eq!(p["metadata"]["labels"][INDEX_KEY], "2");
        assert_eq!(p["metadata"]["finalizers"], json!([TRACKING_FINALIZER]));
        assert_eq!(p["spec"]["hostname"], "j-2");
        assert_eq!(p["spec"]["containers"][0]["env"][0]["name"], "JOB_COMPLETION_INDEX");
        assert_eq!(new_pod(&job, None)["metadata"]["generateName"], "j-");
    }
}
