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

use super::replicaset::{event, owned};
use super::{Controller, Key, def};
use crate::cluster::Cluster;
use crate::meta;
use crate::ops::{self, DeleteOpts, WriteOpts};
use crate::registry::GroupResource;
use crate::store::{Change, EventType};
use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};
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

// ---- schedules ------------------------------------------------------------------------------

/// A parsed cron schedule: one bit per allowed value of each field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    minute: u64,
    hour: u64,
    dom: u64,
    month: u64,
    dow: u64,
    /// Day of month or of week was `*` or `?` (then both must match; otherwise either).
    dom_star: bool,
    dow_star: bool,
    /// From a `TZ=`/`CRON_TZ=` prefix.
    pub tz: Option<String>,
}

const MONTHS: [&str; 12] = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];
const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

fn parse_value(s: &str, names: &[&str], offset: u32) -> Result<u32, String> {
    if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(s)) {
        return Ok(i as u32 + offset);
    }
    s.parse::<u32>().map_err(|_| format!("failed to parse int from {s}: strconv.Atoi: parsing {s:?}: invalid syntax"))
}

/// One field (robfig/cron `getField`/`getRange`): returns the bits and whether it was a star.
fn parse_field(field: &str, min: u32, max: u32, names: &[&str], offset: u32) -> Result<(u64, bool), String> {
    let mut bits = 0u64;
    let mut star = false;
    for part in field.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (r, Some(s)),
            None => (part, None),
        };
        let (lo, hi, is_star) = if range == "*" || range == "?" {
            (min, max, true)
        } else if let Some((a, b)) = range.split_once('-') {
            (parse_value(a, names, offset)?, parse_value(b, names, offset)?, false)
        } else {
            let v = parse_value(range, names, offset)?;
            (v, if step.is_some() { max } else { v }, false)
        };
        let step = match step {
            Some(s) => {
                let n = s.parse::<u32>().map_err(|_| {
                    format!("failed to parse int from {s}: strconv.Atoi: parsing {s:?}: invalid syntax")
                })?;
                if n == 0 {
                    return Err(format!("step of range should be a positive number: {part}"));
                }
                n
            }
            None => 1,
        };
        if lo < min {
            return Err(format!("beginning of range ({lo}) below minimum ({min}): {part}"));
        }
        if hi > max {
            return Err(format!("end of range ({hi}) above maximum ({max}): {part}"));
        }
        if lo > hi {
            return Err(format!("beginning of range ({lo}) beyond end of range ({hi}): {part}"));
        }
        star |= is_star && step == 1;
        let mut v = lo;
        while v <= hi {
            bits |= 1 << v;
            v += step;
        }
    }
    Ok((bits, star))
}

impl Schedule {
    /// Parse a schedule as `cron.ParseStandard` does; the error is robfig/cron's message.
    pub fn parse(spec: &str) -> Result<Schedule, String> {
        let mut spec = spec.trim();
        let mut tz = None;
        for prefix in ["TZ=", "CRON_TZ="] {
            if let Some(rest) = spec.strip_prefix(prefix) {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                if TimeZone::get(name).is_err() {
                    return Err(format!("provided bad location {name}: unknown time zone {name}"));
                }
                tz = Some(name.to_string());
                spec = tail.trim();
            }
        }
        if spec.is_empty() {
            return Err("empty spec string".into());
        }
        let expanded = match spec.to_ascii_lowercase().as_str() {
            "@yearly" | "@annually" => "0 0 1 1 *".to_string(),
            "@monthly" => "0 0 1 * *".to_string(),
            "@weekly" => "0 0 * * 0".to_string(),
            "@daily" | "@midnight" => "0 0 * * *".to_string(),
            "@hourly" => "0 * * * *".to_string(),
            s if s.starts_with('@') => return Err(format!("unrecognized descriptor: {spec}")),
            _ => spec.to_string(),
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(format!("expected exactly 5 fields, found {}: {spec}", fields.len()));
        }
        let (minute, _) = parse_field(fields[0], 0, 59, &[], 0)?;
        let (hour, _) = parse_field(fields[1], 0, 23, &[], 0)?;
        let (dom, dom_star) = parse_field(fields[2], 1, 31, &[], 0)?;
        let (month, _) = parse_field(fields[3], 1, 12, &MONTHS, 1)?;
        let (dow, dow_star) = parse_field(fields[4], 0, 6, &DAYS, 0)?;
        Ok(Schedule { minute, hour, dom, month, dow, dom_star, dow_star, tz })
    }

    fn day_matches(&self, t: &DateTime) -> bool {
        let dom = self.dom & (1 << t.day()) != 0;
        let dow = self.dow & (1 << t.weekday().to_sunday_zero_offset()) != 0;
        if self.dom_star || self.dow_star { dom && dow } else { dom || dow }
    }

    /// The first scheduled time strictly after `after`, in `tz` (robfig/cron `SpecSchedule.Next`:
    /// skip whole months, days, hours, then minutes). `None` within five years: never.
    pub fn next(&self, after: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        let start = after.to_zoned(tz.clone()).datetime();
        // The next whole minute.
        let mut t = start.with().second(0).subsec_nanosecond(0).build().ok()?.checked_add(1.minute()).ok()?;
        let limit = t.year() + 5;
        while t.year() <= limit {
            if self.month & (1 << t.month()) == 0 {
                t = t.first_of_month().checked_add(1.month()).ok()?.start_of_day();
                continue;
            }
            if !self.day_matches(&t) {
                t = t.checked_add(1.day()).ok()?.start_of_day();
                continue;
            }
            if self.hour & (1 << t.hour()) == 0 {
                t = t.with().minute(0).build().ok()?.checked_add(1.hour()).ok()?;
                continue;
            }
            if self.minute & (1 << t.minute()) == 0 {
                t = t.checked_add(1.minute()).ok()?;
                continue;
            }
            return tz.to_ambiguous_zoned(t).compatible().ok().map(|z| z.timestamp()).filter(|ts| *ts > after);
        }
        None
    }
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
    fn name(&self) -> &'static str {
        "cronjob"
    }

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

    fn next(spec: &str, after: &str, tz: &str) -> String {
        let tz = TimeZone::get(tz).unwrap();
        Schedule::parse(spec).unwrap().next(at(after), &tz).unwrap().to_string()
    }

    #[test]
    fn schedules_parse_like_robfig_cron() {
        assert!(Schedule::parse("*/5 * * * *").is_ok());
        assert!(Schedule::parse("0 9 * JAN-MAR mon-fri").is_ok());
        assert!(Schedule::parse("@hourly").is_ok());
        assert!(Schedule::parse("TZ=Europe/Berlin 0 9 * * *").unwrap().tz.as_deref() == Some("Europe/Berlin"));
        assert_eq!(Schedule::parse("* * * *").unwrap_err(), "expected exactly 5 fields, found 4: * * * *");
        assert_eq!(Schedule::parse("61 * * * *").unwrap_err(), "end of range (61) above maximum (59): 61");
        assert!(Schedule::parse("@every 5m").unwrap_err().contains("unrecognized descriptor"));
        assert!(Schedule::parse("*/0 * * * *").is_err());
        assert!(Schedule::parse("x * * * *").is_err());
    }

    #[test]
    fn next_times() {
        assert_eq!(next("*/5 * * * *", "2026-01-01T00:02:30Z", "UTC"), "2026-01-01T00:05:00Z");
        assert_eq!(next("@hourly", "2026-01-01T00:00:00Z", "UTC"), "2026-01-01T01:00:00Z");
        assert_eq!(next("0 0 29 2 *", "2026-03-01T00:00:00Z", "UTC"), "2028-02-29T00:00:00Z");
        // Either day field matches when both are restricted.
        assert_eq!(next("0 0 13 * 5", "2026-01-01T00:00:00Z", "UTC"), "2026-01-02T00:00:00Z");
        // A star day of month: the weekday alone decides.
        assert_eq!(next("0 0 * * 1", "2026-01-01T00:00:00Z", "UTC"), "2026-01-05T00:00:00Z");
        assert_eq!(next("0 9 * * *", "2026-06-01T00:00:00Z", "Europe/Berlin"), "2026-06-01T07:00:00Z");
    }

    #[test]
    fn most_recent_counts_missed_times() {
        let s = Schedule::parse("*/10 * * * *").unwrap();
        let (t, n) = most_recent(&s, &TimeZone::UTC, at("2026-01-01T00:00:00Z"), at("2026-01-01T01:05:00Z"));
        assert_eq!((t.unwrap().to_string().as_str(), n), ("2026-01-01T01:00:00Z", 6));
    }
}
