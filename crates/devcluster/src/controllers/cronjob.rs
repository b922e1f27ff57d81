//! CronJobs, as kube-controller-manager's cronjob_controllerv2 runs them
//! (pkg/controller/cronjob/cronjob_controllerv2.go and utils.go, 1.33):
//!
//! - The schedule is standard cron (robfig/cron's `ParseStandard`: five fields, names of months
//!   and weekdays, ranges, lists, steps, `?`, the descriptors `@yearly`/`@annually`,
//!   `@monthly`, `@weekly`, `@daily`/`@midnight`, `@hourly`, a `TZ=`/`CRON_TZ=` prefix),
//!   evaluated in `spec.timeZone` (the IANA database of this machine) or UTC.
//! - At each scheduled time (the most recent one missed since `status.lastScheduleTime`, or the
//!   creation, and not older than `startingDeadlineSeconds`) a Job
//!   `<cronjob>-<scheduled unix time in minutes>` is created from `jobTemplate`, owned by the
//!   CronJob, annotated `batch.kubernetes.io/cronjob-scheduled-timestamp`.
//! - `concurrencyPolicy`: `Allow` runs Jobs side by side, `Forbid` skips a run while one is
//!   active (event `JobAlreadyActive`), `Replace` deletes the active ones first.
//! - `status.active` lists the running Jobs, `lastScheduleTime` and `lastSuccessfulTime`
//!   follow; finished Jobs beyond `successfulJobsHistoryLimit`/`failedJobsHistoryLimit` are
//!   deleted oldest first; `suspend` stops new runs.
//!
//! Time is the cluster's [`crate::clock::Clock`], so a test advances it rather than waiting
//! for the schedule (`DevCluster::advance_clock`). Difference: `@every DURATION` schedules are
//! refused as unparseable.

use super::event;
use super::replicaset::owned;
use super::{Controller, Key, def};
use crate::cluster::Cluster;
use crate::cron::Schedule;
use crate::meta;
use crate::ops::{self, DeleteOpts, WriteOpts};
use crate::registry::GroupResource;
use crate::store::{Change, EventType};
use jiff::Timestamp;
use jiff::tz::TimeZone;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::Duration;

const MANAGER: &str = "cronjob-controller";
/// The annotation naming the time a CronJob's Job was scheduled for.
pub const SCHEDULED_TIMESTAMP: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

pub struct CronJobController;

fn cronjobs() -> GroupResource {
    GroupResource::new("batch", "cronjobs")
}

// ---- the controller -------------------------------------------------------------------------

/// The most recent scheduled time in (earliest, now], and how many were missed
/// (upstream `mostRecentScheduleTime`).
fn most_recent(sched: &Schedule, tz: &TimeZone, earliest: Timestamp, now: Timestamp) -> (Option<Timestamp>, usize) {
    let mut last = None;
    let mut missed = 0;
    let mut t = earliest;
    while let Some(n) = sched.next(t, tz) {
        if n > now {
            break;
        }
        last = Some(n);
        missed += 1;
        t = n;
        if missed > 1000 {
            // Jump close to now: only the latest matters.
            t = now.checked_sub(jiff::SignedDuration::from_hours(24 * 32)).unwrap_or(now).max(t);
        }
    }
    (last, missed)
}

fn job_ref(job: &Value) -> Value {
    json!({"kind": "Job", "namespace": meta::namespace(job), "name": meta::name(job), "uid": meta::uid(job),
        "apiVersion": "batch/v1", "resourceVersion": meta::meta_str(job, "resourceVersion").unwrap_or("")})
}

/// A Job of the CronJob for a scheduled time (upstream `getJobFromTemplate2`).
fn job_for(cj: &Value, scheduled: Timestamp, tz: &TimeZone) -> Value {
    let tmpl = cj.pointer("/spec/jobTemplate").cloned().unwrap_or_else(|| json!({}));
    let mut md = Map::new();
    md.insert("name".into(), format!("{}-{}", meta::name(cj), scheduled.as_second() / 60).into());
    md.insert("namespace".into(), meta::namespace(cj).into());
    if let Some(l) = tmpl.pointer("/metadata/labels") {
        md.insert("labels".into(), l.clone());
    }
    let mut ann = tmpl.pointer("/metadata/annotations").and_then(Value::as_object).cloned().unwrap_or_default();
    let stamp = scheduled.to_zoned(tz.clone()).strftime("%Y-%m-%dT%H:%M:%S%:z").to_string().replace("+00:00", "Z");
    ann.insert(SCHEDULED_TIMESTAMP.into(), stamp.into());
    md.insert("annotations".into(), Value::Object(ann));
    md.insert("ownerReferences".into(), json!([super::controller_ref(cj)]));
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": Value::Object(md),
        "spec": tmpl.get("spec").cloned().unwrap_or_else(|| json!({}))})
}

fn delete_job(cl: &Cluster, cj: &Value, job: &Value) {
    let Some(jdef) = def(cl, "batch", "jobs") else { return };
    let opts = DeleteOpts { propagation_policy: Some("Background".into()), ..Default::default() };
    match ops::delete(cl, &jdef, meta::namespace(job), meta::name(job), &opts) {
        Ok(_) => event(cl, cj, "Normal", "SuccessfulDelete", &format!("Deleted job {}", meta::name(job)), MANAGER),
        Err(e) if e.code == 404 => {}
        Err(e) => tracing::debug!(job = meta::name(job), error = %e.message, "cronjob job delete failed"),
    }
}

/// When a finished Job started (for history ordering): its start time, else creation.
fn started(job: &Value) -> String {
    job.pointer("/status/startTime")
        .and_then(Value::as_str)
        .or_else(|| meta::meta_str(job, "creationTimestamp"))
        .unwrap_or("")
        .to_string()
}

impl CronJobController {
    fn sync(&self, cl: &Cluster, key: &Key) -> Option<Duration> {
        let cj = super::get(cl, key)?;
        if meta::is_deleting(&cj) {
            return None;
        }
        let cjdef = def(cl, "batch", "cronjobs")?;
        let jdef = def(cl, "batch", "jobs")?;
        let clock = &cl.options.clock;
        let now = clock.now();
        let jobs: Vec<Arc<Value>> = owned(cl, &cj, &GroupResource::new("batch", "jobs"));
        let old = cj.get("status").cloned().unwrap_or_else(|| json!({}));
        let mut status = old.as_object().cloned().unwrap_or_default();

        // status.active: running Jobs only; finished ones noted.
        let mut active: Vec<Value> = vec![];
        let mut last_success = old.get("lastSuccessfulTime").cloned();
        let was_active: Vec<String> = old
            .get("active")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|r| r.get("uid").and_then(Value::as_str).map(str::to_string))
            .collect();
        for j in &jobs {
            match super::job::finished(j) {
                None if !meta::is_deleting(j) => active.push(job_ref(j)),
                None => {}
                Some(kind) => {
                    if was_active.iter().any(|u| u == meta::uid(j)) {
                        event(
                            cl,
                            &cj,
                            "Normal",
                            "SawCompletedJob",
                            &format!("Saw completed job: {}, status: {kind}", meta::name(j)),
                            MANAGER,
                        );
                    }
                    if kind == "Complete"
                        && let Some(ct) = j.pointer("/status/completionTime").and_then(Value::as_str)
                        && last_success
                            .as_ref()
                            .and_then(Value::as_str)
                            .is_none_or(|l| super::unix(l) < super::unix(ct))
                    {
                        last_success = Some(ct.into());
                    }
                }
            }
        }

        // History limits: the oldest finished Jobs beyond the limits go.
        for (kind, field, default) in
            [("Complete", "successfulJobsHistoryLimit", 3), ("Failed", "failedJobsHistoryLimit", 1)]
        {
            let limit =
                cj.pointer(&format!("/spec/{field}")).and_then(Value::as_i64).unwrap_or(default).max(0) as usize;
            let mut done: Vec<&Arc<Value>> =
                jobs.iter().filter(|j| super::job::finished(j) == Some(kind) && !meta::is_deleting(j)).collect();
            if done.len() > limit {
                done.sort_by_key(|j| started(j));
                for j in &done[..done.len() - limit] {
                    delete_job(cl, &cj, j);
                }
            }
        }

        let mut requeue = None;
        let suspended = cj.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true);
        let schedule = cj.pointer("/spec/schedule").and_then(Value::as_str).unwrap_or("");
        let parsed = Schedule::parse(schedule);
        let tz_name = cj.pointer("/spec/timeZone").and_then(Value::as_str).map(str::to_string);
        let tz = match tz_name.clone().or_else(|| parsed.as_ref().ok().and_then(|s| s.tz.clone())) {
            Some(n) => TimeZone::get(&n).ok(),
            None => Some(TimeZone::UTC),
        };
        match (&parsed, &tz) {
            (Err(e), _) => {
                event(
                    cl,
                    &cj,
                    "Warning",
                    "UnparseableSchedule",
                    &format!("unparseable schedule: {schedule:?} : {e}"),
                    MANAGER,
                );
            }
            (_, None) => {
                let n = tz_name.unwrap_or_default();
                event(
                    cl,
                    &cj,
                    "Warning",
                    "UnknownTimeZone",
                    &format!("invalid timeZone: {n:?}: unknown time zone {n}"),
                    MANAGER,
                );
            }
            (Ok(sched), Some(tz)) if !suspended => {
                let created = meta::meta_str(&cj, "creationTimestamp").and_then(super::unix).unwrap_or(now.as_second());
                let mut earliest =
                    old.get("lastScheduleTime").and_then(Value::as_str).and_then(super::unix).unwrap_or(created);
                let deadline = cj.pointer("/spec/startingDeadlineSeconds").and_then(Value::as_i64);
                if let Some(d) = deadline {
                    earliest = earliest.max(now.as_second() - d);
                }
                let earliest = Timestamp::from_second(earliest).unwrap_or(now);
                let (recent, missed) = most_recent(sched, tz, earliest, now);
                if missed > 100 {
                    event(
                        cl,
                        &cj,
                        "Warning",
                        "TooManyMissedTimes",
                        &format!(
                            "too many missed start times: {missed}. Set or decrease .spec.startingDeadlineSeconds or check clock skew"
                        ),
                        MANAGER,
                    );
                }
                if let Some(at) = recent {
                    let too_late = deadline.is_some_and(|d| at.as_second() + d < now.as_second());
                    let name = format!("{}-{}", meta::name(&cj), at.as_second() / 60);
                    let exists = cl.store.get(&jdef.storage, &key.namespace, &name).is_some();
                    let policy = cj.pointer("/spec/concurrencyPolicy").and_then(Value::as_str).unwrap_or("Allow");
                    if too_late {
                        event(
                            cl,
                            &cj,
                            "Warning",
                            "MissSchedule",
                            &format!("Missed scheduled time to start a job: {}", at.strftime("%Y-%m-%dT%H:%M:%SZ")),
                            MANAGER,
                        );
                    } else if exists {
                    } else if policy == "Forbid" && !active.is_empty() {
                        event(
                            cl,
                            &cj,
                            "Normal",
                            "JobAlreadyActive",
                            "Not starting job because prior execution is running and concurrency policy is Forbid",
                            MANAGER,
                        );
                    } else {
                        if policy == "Replace" {
                            for j in jobs.iter().filter(|j| super::job::finished(j).is_none()) {
                                delete_job(cl, &cj, j);
                            }
                            active.clear();
                        }
                        match ops::create(cl, &jdef, &key.namespace, job_for(&cj, at, tz), &WriteOpts::system(MANAGER))
                        {
                            Ok(w) => {
                                event(
                                    cl,
                                    &cj,
                                    "Normal",
                                    "SuccessfulCreate",
                                    &format!("Created job {}", meta::name(&w.object)),
                                    MANAGER,
                                );
                                active.push(job_ref(&w.object));
                                status.insert(
                                    "lastScheduleTime".into(),
                                    crate::clock::format_rfc3339(at.as_second()).into(),
                                );
                            }
                            Err(e) if e.code == 409 => {}
                            Err(e) => {
                                event(
                                    cl,
                                    &cj,
                                    "Warning",
                                    "FailedCreate",
                                    &format!("Error creating job: {}", e.message),
                                    MANAGER,
                                );
                                requeue = Some(Duration::from_secs(5));
                            }
                        }
                    }
                }
                if requeue.is_none()
                    && let Some(next) = sched.next(now, tz)
                {
                    let ms = (next.as_millisecond() - now.as_millisecond()).max(0) as u64 + 100;
                    requeue = Some(Duration::from_millis(ms));
                }
            }
            _ => {}
        }

        if active.is_empty() {
            status.remove("active");
        } else {
            status.insert("active".into(), Value::Array(active));
        }
        if let Some(ls) = last_success {
            status.insert("lastSuccessfulTime".into(), ls);
        }
        super::write_status(cl, &cjdef, &cj, Value::Object(status), MANAGER);
        requeue
    }
}

impl Controller for CronJobController {
    fn keys_for(&self, _cl: &Cluster, c: &Change, out: &mut Vec<Key>) {
        if c.gr == cronjobs() && c.kind != EventType::Deleted {
            out.push(Key::of(c));
        } else if c.gr.group == "batch" && c.gr.resource == "jobs" {
            for obj in [Some(&c.object), c.prev.as_ref()].into_iter().flatten() {
                if let Some(r) = obj.pointer("/metadata/ownerReferences").and_then(Value::as_array)
                    && let Some(owner) = r.iter().find(|r| {
                        r.get("controller").and_then(Value::as_bool) == Some(true)
                            && r.get("kind").and_then(Value::as_str) == Some("CronJob")
                    })
                    && let Some(name) = owner.get("name").and_then(Value::as_str)
                {
                    out.push(Key::new("batch", "cronjobs", &c.namespace, name));
                }
            }
        }
    }

    fn all_keys(&self, cl: &Cluster, out: &mut Vec<Key>) {
        let (all, _) = cl.store.list(&cronjobs(), None);
        out.extend(all.iter().map(|o| Key::new("batch", "cronjobs", meta::namespace(o), meta::name(o))));
    }

    fn reconcile(&self, cl: &Cluster, key: &Key) -> Option<Duration> {
        self.sync(cl, key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn most_recent_counts_missed_times() {
        let s = Schedule::parse("*/10 * * * *").unwrap();
        let (t, n) = most_recent(&s, &TimeZone::UTC, at("2026-01-01T00:00:00Z"), at("2026-01-01T01:05:00Z"));
        assert_eq!((t.unwrap().to_string().as_str(), n), ("2026-01-01T01:00:00Z", 6));
    }
}
