//! Builds: configurable pipeline jobs whose runs produce the build events the Varroa plugin sends
//! (docs/varroa/plugin-protocol.md), and the console text and `api/json` Jenkins serves for them.
//!
//! A run of a job produces, in order: `queued`, `started`, `stage_started`/`stage_finished` per
//! stage, `test_summary` (when the job has tests) and `finished`. Event ids are deterministic,
//! `<job>#<build>:<kind>[:<stage id>]` ([`event_id`]), so a retried or replayed run has the same
//! ids. A build's timeline is the one configured: the queued time comes from the double's
//! [`Clock`], every later time is that plus the configured durations, and every `duration_ms` is
//! the configured one. The build itself runs for the configured durations times the time scale
//! (0: at once), so tests and the load generator run long builds fast with the same records.
//!
//! Build numbers come from a [`BuildNumbers`]: Jenkins' own, per job from 1 ([`LocalNumbers`],
//! the gate off), or a build claim's ([`crate::claims::ClaimsClient`]: granted, refused, or
//! ungated and then Jenkins' own). Every queue item has a trigger (the same on every cell for
//! the same cause) and a claim id (stable for the item, unique to this double); its fate
//! ([`QueueItem`]) says whether it ran, with which number, or was refused or dropped.
//!
//! With a [`LogsClient`], every build's console text goes to the mite as it grows
//! ([`crate::logs`]).

use crate::logs::LogsClient;
use crate::plugin::PluginClient;
use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Debug;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::watch;
use varroa_link::builds::{
    BuildEvent, BuildResult, EventBody, MAX_ID, MAX_JOB, MAX_SCHEDULES, MAX_TEXT, Schedule, Stage, VERSION,
};

/// One pipeline stage of a job.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageConfig {
    /// The flow node id (1 to 64 characters); default: the stage's position, from 1.
    #[serde(default)]
    pub id: Option<String>,
    /// The stage's name.
    pub name: String,
    /// How long it runs.
    #[serde(default, alias = "durationMs")]
    pub duration_ms: u64,
    /// Its result (default `SUCCESS`). `FAILURE` or `ABORTED` skips the stages after it
    /// (`NOT_BUILT`), as declarative pipelines do.
    #[serde(default)]
    pub result: Option<BuildResult>,
    /// Lines it prints.
    #[serde(default)]
    pub console: Vec<String>,
}

/// A job's test results (JUnit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestsConfig {
    /// Tests run.
    pub total: u64,
    /// Tests failed (the build is `UNSTABLE` at least when any did).
    #[serde(default)]
    pub failed: u64,
    /// Tests skipped.
    #[serde(default)]
    pub skipped: u64,
    /// How long they took (reported, not waited for).
    #[serde(default, alias = "durationMs")]
    pub duration_ms: Option<u64>,
}

/// A job the double can run.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobConfig {
    /// The full name, folders separated by `/` (`team-a/app`).
    pub name: String,
    /// The stages, in order.
    #[serde(default)]
    pub stages: Vec<StageConfig>,
    /// The test results, if the job publishes any (no `test_summary` event without them).
    #[serde(default)]
    pub tests: Option<TestsConfig>,
    /// Lines printed before the first stage.
    #[serde(default)]
    pub console: Vec<String>,
    /// The build's result; default: derived from the stages and the tests.
    #[serde(default)]
    pub result: Option<BuildResult>,
    /// What triggers it (`user:<name>`, `timer`, `scm`, `remote`, `upstream:<job>#<n>`); default
    /// `user:admin`. Also the `started` event's cause.
    #[serde(default)]
    pub trigger: Option<String>,
    /// How long a build waits in the queue (the quiet period).
    #[serde(default, alias = "queueMs")]
    pub queue_ms: u64,
    /// The agent it runs on; default `built-in`.
    #[serde(default)]
    pub node: Option<String>,
    /// Its triggers' schedules (`{trigger: cron, spec: "H/15 * * * *", next}`), served at
    /// `GET /varroa/inventory` as the plugin's trigger inventory; none by default.
    #[serde(default)]
    pub schedules: Vec<Schedule>,
    /// The files its builds archive (`{path, content}` or `{path, size}`), uploaded through the
    /// plugin's artifacts client when a build finishes; none by default.
    #[serde(default)]
    pub artifacts: Vec<crate::artifacts::ArtifactConfig>,
}

impl JobConfig {
    /// A job with `stages` stages of `duration_ms` each, all passing, and no tests.
    pub fn simple(name: &str, stages: usize, duration_ms: u64) -> JobConfig {
        JobConfig {
            name: name.into(),
            stages: (1..=stages)
                .map(|n| StageConfig {
                    id: None,
                    name: format!("Stage {n}"),
                    duration_ms,
                    result: None,
                    console: vec![format!("running stage {n}")],
                })
                .collect(),
            tests: None,
            console: Vec::new(),
            result: None,
            trigger: None,
            queue_ms: 0,
            node: None,
            schedules: Vec::new(),
            artifacts: Vec::new(),
        }
    }

    /// The trigger, defaulted.
    pub fn trigger(&self) -> &str {
        self.trigger.as_deref().unwrap_or("user:admin")
    }

    /// The stage ids, defaulted.
    pub fn stage_ids(&self) -> Vec<String> {
        self.stages.iter().enumerate().map(|(n, s)| s.id.clone().unwrap_or_else(|| (n + 1).to_string())).collect()
    }

    /// Checks the job, naming the field that is wrong.
    pub fn validate(&self) -> Result<(), JobsError> {
        let bad = |field: String, reason: String| JobsError::Invalid { job: self.name.clone(), field, reason };
        check_job_name(&self.name).map_err(|r| bad("name".into(), r))?;
        let mut ids = BTreeSet::new();
        for (n, (stage, id)) in self.stages.iter().zip(self.stage_ids()).enumerate() {
            if stage.name.is_empty()
                || stage.name.chars().count() > MAX_TEXT
                || stage.name.chars().any(char::is_control)
            {
                return Err(bad(
                    format!("stages[{n}].name"),
                    format!("must be 1 to {MAX_TEXT} characters without control characters"),
                ));
            }
            if id.is_empty() || id.len() > 64 || id.chars().any(char::is_control) {
                return Err(bad(
                    format!("stages[{n}].id"),
                    "must be 1 to 64 characters without control characters".into(),
                ));
            }
            if !ids.insert(id.clone()) {
                return Err(bad(format!("stages[{n}].id"), format!("{id:?} is used by an earlier stage")));
            }
            if let Some(l) = stage.console.iter().find(|l| l.contains('\n')) {
                return Err(bad(format!("stages[{n}].console"), format!("{l:?}: one line per item, no newlines")));
            }
        }
        if let Some(t) = &self.tests
            && t.failed.saturating_add(t.skipped) > t.total
        {
            return Err(bad("tests.failed".into(), "failed plus skipped is more than total".into()));
        }
        let trigger = self.trigger();
        if trigger.is_empty() || trigger.chars().count() > MAX_TEXT || trigger.chars().any(char::is_control) {
            return Err(bad(
                "trigger".into(),
                format!("must be 1 to {MAX_TEXT} characters without control characters"),
            ));
        }
        if self.schedules.len() > MAX_SCHEDULES {
            return Err(bad("schedules".into(), format!("at most {MAX_SCHEDULES}")));
        }
        for (n, s) in self.schedules.iter().enumerate() {
            if s.trigger.is_empty() || s.trigger.chars().count() > 32 || s.trigger.chars().any(char::is_control) {
                return Err(bad(
                    format!("schedules[{n}].trigger"),
                    "must be 1 to 32 characters without control characters (cron, scm)".into(),
                ));
            }
            if s.spec.is_empty() || s.spec.chars().count() > MAX_TEXT || s.spec.chars().any(char::is_control) {
                return Err(bad(
                    format!("schedules[{n}].spec"),
                    format!("must be 1 to {MAX_TEXT} characters without control characters"),
                ));
            }
        }
        if let Some(node) = &self.node
            && (node.chars().count() > MAX_TEXT || node.chars().any(char::is_control))
        {
            return Err(bad("node".into(), format!("at most {MAX_TEXT} characters without control characters")));
        }
        if let Some(l) = self.console.iter().find(|l| l.contains('\n')) {
            return Err(bad("console".into(), format!("{l:?}: one line per item, no newlines")));
        }
        Ok(())
    }
}

/// A jobs file is invalid.
#[derive(Debug, thiserror::Error)]
pub enum JobsError {
    /// It cannot be read.
    #[error("reading the jobs file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// It is not YAML or JSON of the expected shape.
    #[error(
        "the jobs file{path}: {reason}; expected `jobs: [{{name, stages: [{{name, duration_ms, result}}], tests: {{total, failed, skipped}}, console: [..], result}}]`"
    )]
    Parse {
        /// ` <file>` when read from one.
        path: String,
        /// The parser's words (with the line).
        reason: String,
    },
    /// A job is not valid.
    #[error("job {job:?}: {field}: {reason}")]
    Invalid {
        /// The job's name.
        job: String,
        /// The field.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// Two jobs have one name.
    #[error("job {0:?} is configured twice")]
    Duplicate(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JobsFile {
    jobs: Vec<JobConfig>,
}

/// Parses jobs from YAML or JSON: `{"jobs": [...]}` or the list alone.
pub fn parse_jobs(text: &str) -> Result<Vec<JobConfig>, JobsError> {
    let parse_err = |e: serde_saphyr::Error| JobsError::Parse { path: String::new(), reason: e.to_string() };
    // The shape first, then the typed parse (whose messages name the field and the line).
    let shape: serde_json::Value = serde_saphyr::from_str(text).map_err(parse_err)?;
    let jobs = match shape {
        serde_json::Value::Array(_) => serde_saphyr::from_str::<Vec<JobConfig>>(text).map_err(parse_err)?,
        serde_json::Value::Object(_) => serde_saphyr::from_str::<JobsFile>(text).map_err(parse_err)?.jobs,
        _ => {
            return Err(JobsError::Parse {
                path: String::new(),
                reason: "the top level is neither a list of jobs nor a mapping with `jobs`".into(),
            });
        }
    };
    let mut names = BTreeSet::new();
    for j in &jobs {
        j.validate()?;
        if !names.insert(j.name.clone()) {
            return Err(JobsError::Duplicate(j.name.clone()));
        }
    }
    Ok(jobs)
}

/// Reads and parses a jobs file.
pub fn load_jobs(path: &Path) -> Result<Vec<JobConfig>, JobsError> {
    let text =
        std::fs::read_to_string(path).map_err(|source| JobsError::Read { path: path.display().to_string(), source })?;
    parse_jobs(&text).map_err(|e| match e {
        JobsError::Parse { reason, .. } => JobsError::Parse { path: format!(" {}", path.display()), reason },
        other => other,
    })
}

/// Jenkins' rules for an item's full name (`Jenkins.checkGoodName` for every segment).
pub fn check_job_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.chars().count() > MAX_JOB {
        return Err(format!("must be 1 to {MAX_JOB} characters"));
    }
    for segment in name.split('/') {
        if segment.is_empty() {
            return Err("empty folder or job name (leading, trailing or doubled `/`)".into());
        }
        if segment == "." || segment == ".." {
            return Err(format!("{segment:?} is not an allowed name"));
        }
        if let Some(c) = segment.chars().find(|c| c.is_control() || "?*\\%!@#$^&|<>[]:;".contains(*c)) {
            return Err(format!("{c:?} is an unsafe character (Jenkins refuses ?*\\%!@#$^&|<>[]:; in names)"));
        }
        if segment.ends_with('.') {
            return Err(format!("{segment:?}: a name cannot end with '.'"));
        }
        if segment.trim() != segment {
            return Err(format!("{segment:?}: a name cannot start or end with a space"));
        }
    }
    Ok(())
}

fn escape_id_part(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"._:#/@-".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("+{b:02X}"));
        }
    }
    out
}

fn hashed(s: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, s.as_bytes());
    let hex: String = d.as_ref().iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("h.{hex}")
}

/// The event id `<job>#<build>:<kind>[:<stage id>]`. Bytes an id cannot hold (a space, `+`,
/// non-ASCII) are written `+XX`; a job name or stage id that makes the id longer than the protocol
/// allows is replaced by `h.` and 32 hex digits of its SHA-256. Either way it is the same for the
/// same build, and valid per [`varroa_link::builds::valid_id`].
pub fn event_id(job: &str, build: u64, kind: &str, stage: Option<&str>) -> String {
    let compose = |j: &str, s: Option<&str>| match s {
        Some(s) => format!("{j}#{build}:{kind}:{s}"),
        None => format!("{j}#{build}:{kind}"),
    };
    let (job_e, stage_e) = (escape_id_part(job), stage.map(escape_id_part));
    let id = compose(&job_e, stage_e.as_deref());
    if id.len() <= MAX_ID {
        return id;
    }
    let id = compose(&hashed(job), stage_e.as_deref());
    if id.len() <= MAX_ID {
        return id;
    }
    compose(&hashed(job), stage.map(hashed).as_deref())
}

/// The double's clock: what Jenkins' clock says.
pub trait Clock: Send + Sync + Debug {
    /// Now.
    fn now(&self) -> Timestamp;
}

/// The system's clock, to the millisecond (as Jenkins keeps times).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let now = Timestamp::now();
        Timestamp::from_millisecond(now.as_millisecond()).unwrap_or(now)
    }
}

/// A clock that says what it is told (tests).
#[derive(Debug)]
pub struct FixedClock(Mutex<Timestamp>);

impl FixedClock {
    /// Starts at `t`.
    pub fn new(t: Timestamp) -> FixedClock {
        FixedClock(Mutex::new(t))
    }

    /// Sets the time.
    pub fn set(&self, t: Timestamp) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = t;
    }
}

impl Clock for FixedClock {
    fn now(&self) -> Timestamp {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A boxed future (the numbering is asynchronous: claims ask the mite).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a queued build was told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// Run as this number.
    Granted(u64),
    /// Drop the queue item: this cell holds the trigger.
    Refused {
        /// The cell that holds the trigger.
        holder: u32,
    },
    /// Run with Jenkins' own number (the next of the job, `nextBuildNumber`).
    Ungated {
        /// Why.
        reason: String,
    },
}

/// Where build numbers come from.
pub trait BuildNumbers: Send + Sync + Debug {
    /// Whether queued builds ask [`BuildNumbers::claim`]. When not (the gate is off), Jenkins
    /// numbers every build at once as it is queued, in queue order.
    fn gated(&self) -> bool;

    /// Asks whether the queued build of `job` with `trigger` may run; `claim_id` is stable for
    /// the queue item. An `Err` drops the item from the queue (a malformed claim, or one that
    /// waited too long; the implementation logs why).
    fn claim<'a>(&'a self, job: &'a str, trigger: &'a str, claim_id: &'a str) -> BoxFuture<'a, Result<Claim, String>>;
}

/// Jenkins' own numbering, the gate off: per job, from 1 (`nextBuildNumber`).
#[derive(Debug, Default)]
pub struct LocalNumbers;

impl BuildNumbers for LocalNumbers {
    fn gated(&self) -> bool {
        false
    }

    fn claim<'a>(&'a self, _: &'a str, _: &'a str, _: &'a str) -> BoxFuture<'a, Result<Claim, String>> {
        Box::pin(async { Ok(Claim::Ungated { reason: "the gate is off".into() }) })
    }
}

/// Where a queue item is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemState {
    /// Waiting for its build claim's decision.
    Claiming,
    /// Numbered, in its quiet period.
    Queued,
    /// Its build runs.
    Running,
    /// Its build finished.
    Finished,
    /// Refused: another cell runs its trigger. No events were sent.
    Refused,
    /// Dropped: its claim was malformed or waited too long. No events were sent.
    Dropped,
}

impl ItemState {
    /// Refused, dropped or finished: nothing more happens to it.
    pub fn is_final(self) -> bool {
        matches!(self, ItemState::Finished | ItemState::Refused | ItemState::Dropped)
    }

    /// Numbered, refused or dropped: the claim is decided.
    pub fn is_decided(self) -> bool {
        self != ItemState::Claiming
    }

    /// In Jenkins' queue (`/queue/api/json`).
    pub fn in_queue(self) -> bool {
        matches!(self, ItemState::Claiming | ItemState::Queued)
    }
}

/// A queue item and what became of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueItem {
    /// Jenkins' queue item id (per double, from 1).
    pub queue_id: u64,
    /// The job.
    pub job: String,
    /// Its trigger: the claim's and the `queued` event's.
    pub trigger: String,
    /// Its claim id (`q-<instance>-<queue id>`).
    pub claim_id: String,
    /// Where it is.
    pub state: ItemState,
    /// Its build number, once it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build: Option<u64>,
    /// The number came from a granted claim (else Jenkins' own).
    pub granted: bool,
    /// The cell holding its trigger, when refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<u32>,
    /// Why it was dropped, or ran ungated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When it was queued (milliseconds since the epoch, Jenkins' clock).
    pub in_queue_since: i64,
}

/// One step of a build: at `at_ms` (configured milliseconds after it was queued), append
/// `console` and send `event`.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Configured milliseconds after the build was queued.
    pub at_ms: u64,
    /// The event.
    pub event: BuildEvent,
    /// Console lines printed at that point.
    pub console: Vec<String>,
}

/// A result's severity, as Jenkins orders them (`Result.ordinal`).
fn severity(r: BuildResult) -> u8 {
    match r {
        BuildResult::Success => 0,
        BuildResult::Unstable => 1,
        BuildResult::Failure => 2,
        BuildResult::NotBuilt => 3,
        BuildResult::Aborted => 4,
    }
}

fn worse(a: BuildResult, b: BuildResult) -> BuildResult {
    if severity(b) > severity(a) { b } else { a }
}

/// Jenkins' short description of a cause, and its class.
fn cause_of(trigger: &str) -> (&'static str, String) {
    if let Some(user) = trigger.strip_prefix("user:") {
        return ("hudson.model.Cause$UserIdCause", format!("Started by user {user}"));
    }
    if let Some(up) = trigger.strip_prefix("upstream:") {
        let (job, n) = up.rsplit_once('#').unwrap_or((up, "?"));
        return ("hudson.model.Cause$UpstreamCause", format!("Started by upstream project \"{job}\" build number {n}"));
    }
    match trigger {
        "timer" => ("hudson.triggers.TimerTrigger$TimerTriggerCause", "Started by timer".into()),
        "scm" => ("hudson.triggers.SCMTrigger$SCMTriggerCause", "Started by an SCM change".into()),
        "remote" => ("hudson.model.Cause$RemoteCause", "Started by remote host 127.0.0.1".into()),
        other => ("hudson.model.Cause", format!("Started by {other}")),
    }
}

fn plus(t: Timestamp, ms: u64) -> Timestamp {
    t.checked_add(SignedDuration::from_millis(ms.min(i64::MAX as u64) as i64)).unwrap_or(t)
}

/// The build's result as configured: set, or the worst of its stages (a `NOT_BUILT` stage was
/// skipped and does not count) and `UNSTABLE` when tests failed.
pub fn result_of(job: &JobConfig) -> BuildResult {
    if let Some(r) = job.result {
        return r;
    }
    let mut r = BuildResult::Success;
    for s in &job.stages {
        match s.result.unwrap_or(BuildResult::Success) {
            BuildResult::NotBuilt | BuildResult::Success => {}
            other => r = worse(r, other),
        }
        if matches!(s.result, Some(BuildResult::Failure | BuildResult::Aborted)) {
            break;
        }
    }
    if job.tests.is_some_and(|t| t.failed > 0) {
        r = worse(r, BuildResult::Unstable);
    }
    r
}

/// Every step of build `number` of `job`, queued at `queued` with the job's trigger: its events
/// in order, their times, and its console.
pub fn plan(job: &JobConfig, number: u64, queued: Timestamp) -> Vec<Step> {
    plan_triggered(job, number, queued, job.trigger())
}

/// [`plan`] for a queue item with its own trigger (`queued.trigger`); the cause (`started.cause`,
/// the console's first line) stays the job's.
pub fn plan_triggered(job: &JobConfig, number: u64, queued: Timestamp, queue_trigger: &str) -> Vec<Step> {
    let name = job.name.as_str();
    let event = |kind: &str, stage: Option<&str>, at_ms: u64, body: EventBody| BuildEvent {
        v: VERSION,
        id: event_id(name, number, kind, stage),
        time: plus(queued, at_ms),
        job: name.to_owned(),
        build: Some(number),
        body,
    };
    let trigger = job.trigger().to_owned();
    let node = job.node.clone().unwrap_or_else(|| "built-in".into());
    let mut steps = Vec::new();
    steps.push(Step {
        at_ms: 0,
        event: event("queued", None, 0, EventBody::Queued { trigger: Some(queue_trigger.to_owned()) }),
        console: Vec::new(),
    });
    let start = job.queue_ms;
    let mut console = vec![
        cause_of(&trigger).1,
        "[Pipeline] Start of Pipeline".into(),
        "[Pipeline] node".into(),
        format!(
            "Running on {} in /var/jenkins_home/workspace/{name}",
            if node == "built-in" { "Jenkins" } else { &node }
        ),
        "[Pipeline] {".into(),
    ];
    console.extend(job.console.iter().cloned());
    steps.push(Step {
        at_ms: start,
        event: event("started", None, start, EventBody::Started { cause: Some(trigger), node: Some(node) }),
        console,
    });
    let mut at = start;
    let mut stopped = false;
    for (stage, id) in job.stages.iter().zip(job.stage_ids()) {
        let (result, duration) = if stopped {
            (BuildResult::NotBuilt, 0)
        } else {
            (stage.result.unwrap_or(BuildResult::Success), stage.duration_ms)
        };
        let started = plus(queued, at);
        let mut lines = vec!["[Pipeline] stage".into(), format!("[Pipeline] {{ ({})", stage.name)];
        if stopped {
            lines.push(format!("Stage \"{}\" skipped due to earlier failure(s)", stage.name));
        } else {
            lines.extend(stage.console.iter().cloned());
        }
        let body = |result, duration_ms| Stage {
            id: id.clone(),
            name: stage.name.clone(),
            started: Some(started),
            result,
            duration_ms,
        };
        steps.push(Step {
            at_ms: at,
            event: event("stage_started", Some(&id), at, EventBody::StageStarted { stage: body(None, None) }),
            console: lines,
        });
        at += duration;
        let mut end = Vec::new();
        match result {
            BuildResult::Failure if !stopped => end.push("ERROR: script returned exit code 1".to_owned()),
            BuildResult::Aborted if !stopped => end.push("Aborted by admin".to_owned()),
            _ => {}
        }
        end.extend(["[Pipeline] }".to_owned(), "[Pipeline] // stage".to_owned()]);
        steps.push(Step {
            at_ms: at,
            event: event(
                "stage_finished",
                Some(&id),
                at,
                EventBody::StageFinished { stage: body(Some(result), Some(duration)) },
            ),
            console: end,
        });
        if matches!(result, BuildResult::Failure | BuildResult::Aborted) {
            stopped = true;
        }
    }
    let mut tail =
        vec!["[Pipeline] }".to_owned(), "[Pipeline] // node".to_owned(), "[Pipeline] End of Pipeline".to_owned()];
    if let Some(t) = job.tests {
        tail.push("Recording test results".into());
        steps.push(Step {
            at_ms: at,
            event: event(
                "test_summary",
                None,
                at,
                EventBody::TestSummary {
                    total: t.total,
                    failed: t.failed,
                    skipped: t.skipped,
                    duration_ms: t.duration_ms,
                },
            ),
            console: std::mem::take(&mut tail),
        });
    }
    let result = result_of(job);
    tail.push(format!("Finished: {}", result.as_str()));
    steps.push(Step {
        at_ms: at,
        event: event("finished", None, at, EventBody::Finished { result, duration_ms: at - start }),
        console: tail,
    });
    steps
}

/// A build as Jenkins shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct BuildRecord {
    /// The job's full name.
    pub job: String,
    /// The number.
    pub number: u64,
    /// The queue item's id.
    pub queue_id: u64,
    /// What caused it (the job's trigger: `user:admin`, `timer`, ...; its `CauseAction`).
    pub trigger: String,
    /// Its queue item's trigger (`queued.trigger`, the claim's).
    pub queue_trigger: String,
    /// When it started (`timestamp`).
    pub started: Timestamp,
    /// Still running.
    pub building: bool,
    /// Its result once finished.
    pub result: Option<BuildResult>,
    /// How long it ran, once finished (0 before, as Jenkins reports).
    pub duration_ms: u64,
    /// Its test results, once recorded.
    pub tests: Option<TestsConfig>,
    /// Its console text so far.
    pub console: String,
    /// The console text was cut at the bound.
    pub console_truncated: bool,
}

#[derive(Debug, Default)]
struct JobRecords {
    builds: BTreeMap<u64, BuildRecord>,
    /// The highest number given (Jenkins' `nextBuildNumber` is one more).
    highest: u64,
}

/// Why builds cannot be run.
#[derive(Debug, thiserror::Error)]
pub enum BuildsError {
    /// No such job is configured.
    #[error("no job {job:?} is configured (configured: {known}); fix: add it to the jobs file (--jobs-file)")]
    NoSuchJob {
        /// The name asked.
        job: String,
        /// The names there are.
        known: String,
    },
    /// A build did not run: its claim was refused, or it was dropped from the queue.
    #[error("build of {job:?} did not run: {reason}")]
    NotRun {
        /// The job.
        job: String,
        /// Why.
        reason: String,
    },
    /// A trigger is not valid.
    #[error("trigger {trigger:?}: must be 1 to {MAX_TEXT} characters without control characters")]
    Trigger {
        /// The trigger.
        trigger: String,
    },
}

/// How builds run.
#[derive(Debug, Clone)]
pub struct BuildsOptions {
    /// The jobs.
    pub jobs: Vec<JobConfig>,
    /// Real time per configured millisecond: 1 runs builds as long as configured, 0 at once.
    pub time_scale: f64,
    /// Jenkins' clock.
    pub clock: Arc<dyn Clock>,
    /// Where build numbers come from.
    pub numbers: Arc<dyn BuildNumbers>,
    /// The plugin's client; without it builds run and send nothing (Jenkins without the plugin).
    pub plugin: Option<Arc<PluginClient>>,
    /// The plugin's console log sender; without it logs are only served (`consoleText`).
    pub logs: Option<Arc<LogsClient>>,
    /// The plugin's artifacts client: a finished build of a job with `artifacts` uploads them.
    pub artifacts: Option<crate::artifacts::ArtifactsClient>,
    /// This double's instance, in its claim ids (`q-<instance>-<queue id>`), so two cells' queue
    /// items never share an id. Default: 8 random hex digits.
    pub instance: String,
    /// Wait for room in the plugin's buffer instead of dropping (the load generator; the real
    /// plugin never blocks a build).
    pub wait_for_room: bool,
    /// Builds kept per job; older ones are discarded (a build discarder).
    pub keep_builds: usize,
    /// The most console bytes kept per build; what comes after is cut.
    pub max_console_bytes: usize,
}

impl Default for BuildsOptions {
    fn default() -> Self {
        BuildsOptions {
            jobs: Vec::new(),
            time_scale: 1.0,
            clock: Arc::new(SystemClock),
            numbers: Arc::new(LocalNumbers),
            plugin: None,
            logs: None,
            artifacts: None,
            instance: format!("{:08x}", crate::rand_u64() as u32),
            wait_for_room: false,
            keep_builds: 100,
            max_console_bytes: 1 << 20,
        }
    }
}

/// The jobs and their builds.
#[derive(Debug)]
pub struct Builds {
    jobs: std::sync::RwLock<BTreeMap<String, Arc<JobConfig>>>,
    opts: BuildsOptions,
    records: Mutex<HashMap<String, JobRecords>>,
    changed: watch::Sender<u64>,
    stopped: watch::Sender<bool>,
    queue_ids: AtomicU64,
    events: AtomicU64,
    items: Mutex<BTreeMap<u64, QueueItem>>,
    refused: AtomicU64,
    dropped: AtomicU64,
}

/// The most queue items whose fate is kept (the oldest final ones go first).
pub const MAX_ITEMS: usize = 100_000;

impl Builds {
    /// The jobs and how they run.
    pub fn new(opts: BuildsOptions) -> Arc<Builds> {
        let jobs = opts.jobs.iter().map(|j| (j.name.clone(), Arc::new(j.clone()))).collect();
        Arc::new(Builds {
            jobs: std::sync::RwLock::new(jobs),
            opts,
            records: Mutex::new(HashMap::new()),
            changed: watch::Sender::new(0),
            stopped: watch::Sender::new(false),
            queue_ids: AtomicU64::new(0),
            events: AtomicU64::new(0),
            items: Mutex::new(BTreeMap::new()),
            refused: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        })
    }

    fn records(&self) -> MutexGuard<'_, HashMap<String, JobRecords>> {
        self.records.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn touch(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Ends every running build where it is and stops the plugin's client: the double is gone.
    pub fn stop(&self) {
        self.stopped.send_replace(true);
        if let Some(p) = &self.opts.plugin {
            p.close();
        }
        if let Some(l) = &self.opts.logs {
            l.close();
        }
    }

    /// The console log sender, if there is one.
    pub fn logs(&self) -> Option<&Arc<LogsClient>> {
        self.opts.logs.as_ref()
    }

    /// The artifacts client, if there is one.
    pub fn artifacts(&self) -> Option<&crate::artifacts::ArtifactsClient> {
        self.opts.artifacts.as_ref()
    }

    /// Where build numbers come from.
    pub fn numbers(&self) -> &Arc<dyn BuildNumbers> {
        &self.opts.numbers
    }

    fn items(&self) -> MutexGuard<'_, BTreeMap<u64, QueueItem>> {
        self.items.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn update_item(&self, queue_id: u64, f: impl FnOnce(&mut QueueItem)) {
        if let Some(i) = self.items().get_mut(&queue_id) {
            f(i);
        }
        self.touch();
    }

    /// Queue items and their fates, oldest first (at most [`MAX_ITEMS`] are kept); `job`: of that
    /// job only.
    pub fn queue_items_of(&self, job: Option<&str>) -> Vec<QueueItem> {
        self.items().values().filter(|i| job.is_none_or(|j| i.job == j)).cloned().collect()
    }

    /// One queue item.
    pub fn queue_item(&self, queue_id: u64) -> Option<QueueItem> {
        self.items().get(&queue_id).cloned()
    }

    /// Queue items refused and dropped so far (never run, no events).
    pub fn refused_and_dropped(&self) -> (u64, u64) {
        (self.refused.load(Ordering::Relaxed), self.dropped.load(Ordering::Relaxed))
    }

    /// Waits until every one of these queue items is decided (numbered, refused or dropped).
    pub async fn wait_decided(&self, queue_ids: &[u64]) {
        let mut rx = self.changed.subscribe();
        let decided = |s: &Self| {
            let items = s.items();
            queue_ids.iter().all(|id| items.get(id).is_none_or(|i| i.state.is_decided()))
        };
        let _ = rx.wait_for(|_| decided(self)).await;
    }

    /// The plugin's client, if there is one.
    pub fn plugin(&self) -> Option<&Arc<PluginClient>> {
        self.opts.plugin.as_ref()
    }

    fn job_map(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<JobConfig>>> {
        self.jobs.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The configured jobs, by name.
    pub fn jobs(&self) -> Vec<Arc<JobConfig>> {
        self.job_map().values().cloned().collect()
    }

    /// One configured job.
    pub fn job(&self, name: &str) -> Option<Arc<JobConfig>> {
        self.job_map().get(name).cloned()
    }

    /// Adds jobs, or replaces those of the same name (what a job-dsl seed job does in Jenkins:
    /// `PUT /__double/jobs`). Every job is checked first; on an error none is changed. Builds
    /// already running keep the definition they started with.
    pub fn define(&self, jobs: Vec<JobConfig>) -> Result<(), JobsError> {
        for j in &jobs {
            j.validate()?;
        }
        let mut map = self.jobs.write().unwrap_or_else(|e| e.into_inner());
        for j in jobs {
            map.insert(j.name.clone(), Arc::new(j));
        }
        drop(map);
        self.touch();
        Ok(())
    }

    /// Whether `name` is a folder of some configured job.
    pub fn is_folder(&self, name: &str) -> bool {
        let prefix = format!("{name}/");
        self.job_map().keys().any(|j| j.starts_with(&prefix))
    }

    /// Events produced so far (sent to the plugin's client or not).
    pub fn events_produced(&self) -> u64 {
        self.events.load(Ordering::Relaxed)
    }

    fn job_arc(&self, name: &str) -> Result<Arc<JobConfig>, BuildsError> {
        let jobs = self.job_map();
        jobs.get(name).cloned().ok_or_else(|| BuildsError::NoSuchJob {
            job: name.to_owned(),
            known: if jobs.is_empty() { "none".into() } else { jobs.keys().cloned().collect::<Vec<_>>().join(", ") },
        })
    }

    async fn emit(&self, event: &BuildEvent) {
        self.events.fetch_add(1, Ordering::Relaxed);
        let Some(plugin) = &self.opts.plugin else { return };
        let sent = if self.opts.wait_for_room { plugin.submit_waiting(event).await } else { plugin.submit(event) };
        if let Err(e) = sent {
            tracing::warn!(error = %e, "build event not sent");
        }
    }

    /// A new queue item of `job` with `trigger` (the job's trigger and the queue id when none).
    fn new_item(&self, job: &JobConfig, trigger: Option<String>) -> Result<QueueItem, BuildsError> {
        let queue_id = self.queue_ids.fetch_add(1, Ordering::Relaxed) + 1;
        let trigger = trigger.unwrap_or_else(|| format!("{}:{queue_id}", job.trigger()));
        if trigger.is_empty() || trigger.chars().count() > MAX_TEXT || trigger.chars().any(char::is_control) {
            return Err(BuildsError::Trigger { trigger });
        }
        let item = QueueItem {
            queue_id,
            job: job.name.clone(),
            claim_id: format!("q-{}-{queue_id}", self.opts.instance),
            trigger,
            state: ItemState::Claiming,
            build: None,
            granted: false,
            holder: None,
            reason: None,
            in_queue_since: self.opts.clock.now().as_millisecond(),
        };
        let mut items = self.items();
        items.insert(queue_id, item.clone());
        if items.len() > MAX_ITEMS {
            let old: Vec<u64> = items
                .values()
                .filter(|i| i.state.is_final())
                .take(items.len() - MAX_ITEMS)
                .map(|i| i.queue_id)
                .collect();
            for id in old {
                items.remove(&id);
            }
        }
        Ok(item)
    }

    /// The next of Jenkins' own numbers of `job`; or records that a claim gave `granted` (Jenkins'
    /// `nextBuildNumber` is then set past it).
    fn take_number(&self, job: &str, granted: Option<u64>) -> u64 {
        let mut records = self.records();
        let r = records.entry(job.to_owned()).or_default();
        let n = granted.unwrap_or(r.highest + 1);
        r.highest = r.highest.max(n);
        n
    }

    /// The item has its number: it is queued (`queued` sent); its steps.
    async fn numbered(
        &self,
        job: &JobConfig,
        item: &QueueItem,
        number: u64,
        granted: bool,
        reason: Option<String>,
    ) -> Vec<Step> {
        let since = Timestamp::from_millisecond(item.in_queue_since).unwrap_or_else(|_| self.opts.clock.now());
        let steps = plan_triggered(job, number, since, &item.trigger);
        self.update_item(item.queue_id, |i| {
            i.state = ItemState::Queued;
            i.build = Some(number);
            i.granted = granted;
            i.reason = reason;
        });
        self.emit(&steps[0].event).await;
        steps
    }

    /// Asks the claim (while the double runs) and acts on the decision; the number and steps when
    /// the build is to run.
    async fn settle(&self, job: &JobConfig, item: &QueueItem) -> Result<(u64, Vec<Step>), String> {
        let mut stopped = self.stopped.subscribe();
        let decision = tokio::select! {
            d = self.opts.numbers.claim(&job.name, &item.trigger, &item.claim_id) => d,
            _ = stopped.wait_for(|s| *s) => Err("the double stopped".to_owned()),
        };
        match decision {
            Ok(Claim::Granted(n)) => {
                let n = self.take_number(&job.name, Some(n));
                Ok((n, self.numbered(job, item, n, true, None).await))
            }
            Ok(Claim::Ungated { reason }) => {
                let n = self.take_number(&job.name, None);
                Ok((n, self.numbered(job, item, n, false, Some(reason)).await))
            }
            Ok(Claim::Refused { holder }) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                tracing::info!(job = %job.name, trigger = %item.trigger, holder, "build claim refused: cell {holder} runs this trigger; the queue item is dropped");
                self.update_item(item.queue_id, |i| {
                    i.state = ItemState::Refused;
                    i.holder = Some(holder);
                });
                Err(format!("refused: cell {holder} holds trigger {:?}", item.trigger))
            }
            Err(reason) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                self.update_item(item.queue_id, |i| {
                    i.state = ItemState::Dropped;
                    i.reason = Some(reason.clone());
                });
                Err(reason)
            }
        }
    }

    /// Queues a build: takes its number without asking (the gate off) and sends `queued`.
    async fn queue_local(&self, job: &JobConfig, item: &QueueItem) -> (u64, Vec<Step>) {
        let n = self.take_number(&job.name, None);
        (n, self.numbered(job, item, n, false, None).await)
    }

    async fn run_queued(&self, job: &JobConfig, number: u64, queue_id: u64, steps: Vec<Step>) {
        let mut at = 0;
        let mut log = None;
        for step in steps.into_iter().skip(1) {
            self.pause(step.at_ms.saturating_sub(at)).await;
            if *self.stopped.borrow() {
                return;
            }
            at = step.at_ms;
            let trigger = self.items().get(&queue_id).map(|i| i.trigger.clone());
            if let EventBody::Started { .. } = step.event.body {
                log = self.opts.logs.as_ref().map(|l| l.open(&job.name, number));
                self.update_item(queue_id, |i| i.state = ItemState::Running);
            }
            let printed = self.record(job, number, queue_id, trigger, &step);
            if let Some(l) = &log {
                l.append(printed.as_bytes());
            }
            if let EventBody::Finished { .. } = step.event.body {
                if let Some(l) = &log {
                    l.close();
                }
                self.update_item(queue_id, |i| i.state = ItemState::Finished);
            }
            self.emit(&step.event).await;
            if let (EventBody::Finished { .. }, Some(a)) = (&step.event.body, &self.opts.artifacts)
                && !job.artifacts.is_empty()
            {
                a.spawn(&job.name, number, job.artifacts.clone());
            }
            self.touch();
        }
    }

    async fn pause(&self, configured_ms: u64) {
        let real = configured_ms as f64 * self.opts.time_scale;
        if real >= 1.0 {
            let mut stopped = self.stopped.subscribe();
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs_f64(real / 1000.0)) => {}
                _ = stopped.wait_for(|s| *s) => {}
            }
        } else {
            // Builds at full speed still let the sender and the server run.
            tokio::task::yield_now().await;
        }
    }

    /// Records the step; what it printed to the console (as appended to `consoleText`).
    fn record(
        &self,
        job: &JobConfig,
        number: u64,
        queue_id: u64,
        queue_trigger: Option<String>,
        step: &Step,
    ) -> String {
        let mut printed = String::new();
        let mut records = self.records();
        let r = records.entry(job.name.clone()).or_default();
        if let EventBody::Started { .. } = step.event.body {
            r.builds.insert(
                number,
                BuildRecord {
                    job: job.name.clone(),
                    number,
                    queue_id,
                    trigger: job.trigger().to_owned(),
                    queue_trigger: queue_trigger.unwrap_or_else(|| job.trigger().to_owned()),
                    started: step.event.time,
                    building: true,
                    result: None,
                    duration_ms: 0,
                    tests: None,
                    console: String::new(),
                    console_truncated: false,
                },
            );
            // The oldest finished builds go; a running one is never discarded.
            while r.builds.len() > self.opts.keep_builds.max(1) {
                let Some(old) = r.builds.values().find(|b| !b.building).map(|b| b.number) else { break };
                r.builds.remove(&old);
            }
        }
        let Some(b) = r.builds.get_mut(&number) else { return printed };
        for line in &step.console {
            if b.console_truncated {
                break;
            }
            if b.console.len() + line.len() + 1 > self.opts.max_console_bytes {
                const CUT: &str = "[varroa-jenkins-double: console text cut here, at its bound]\n";
                b.console.push_str(CUT);
                printed.push_str(CUT);
                b.console_truncated = true;
                break;
            }
            b.console.push_str(line);
            b.console.push('\n');
            printed.push_str(line);
            printed.push('\n');
        }
        match &step.event.body {
            EventBody::TestSummary { total, failed, skipped, duration_ms } => {
                b.tests =
                    Some(TestsConfig { total: *total, failed: *failed, skipped: *skipped, duration_ms: *duration_ms })
            }
            EventBody::Finished { result, duration_ms } => {
                b.building = false;
                b.result = Some(*result);
                b.duration_ms = *duration_ms;
            }
            _ => {}
        }
        printed
    }

    /// Queues `count` builds of `job` with the job's trigger and runs them in the background, all
    /// at once (pipeline jobs allow concurrent builds); returns the numbers of those that got one,
    /// in queue order, once every claim is decided, and a handle that ends when all have finished.
    pub async fn trigger(
        self: &Arc<Self>,
        job: &str,
        count: usize,
    ) -> Result<(Vec<u64>, tokio::task::JoinHandle<()>), BuildsError> {
        let (ids, all) = self.queue_builds(job, vec![None; count]).await?;
        self.wait_decided(&ids).await;
        let numbers = ids.iter().filter_map(|id| self.queue_item(*id).and_then(|i| i.build)).collect();
        Ok((numbers, all))
    }

    /// Queues a build of `job` per trigger (`None`: the job's trigger and the queue id, unique to
    /// this double) and runs them in the background; returns their queue ids once all are queued
    /// (with the gate off, also numbered and `queued` sent; with it, their claims are asked in the
    /// background: [`Builds::wait_decided`]), and a handle that ends when all have finished or
    /// were refused or dropped.
    pub async fn queue_builds(
        self: &Arc<Self>,
        job: &str,
        triggers: Vec<Option<String>>,
    ) -> Result<(Vec<u64>, tokio::task::JoinHandle<()>), BuildsError> {
        let job = self.job_arc(job)?;
        let mut ids = Vec::with_capacity(triggers.len());
        let mut runs = tokio::task::JoinSet::new();
        let gated = self.opts.numbers.gated();
        for trigger in triggers {
            let item = match self.new_item(&job, trigger) {
                Ok(i) => i,
                Err(e) => {
                    // The builds already queued run on.
                    runs.detach_all();
                    return Err(e);
                }
            };
            ids.push(item.queue_id);
            let (me, job) = (self.clone(), job.clone());
            if gated {
                runs.spawn(async move {
                    if let Ok((number, steps)) = me.settle(&job, &item).await {
                        me.run_queued(&job, number, item.queue_id, steps).await;
                    }
                });
            } else {
                let (number, steps) = self.queue_local(&job, &item).await;
                runs.spawn(async move { me.run_queued(&job, number, item.queue_id, steps).await });
            }
        }
        self.touch();
        let all = tokio::spawn(async move { while runs.join_next().await.is_some() {} });
        Ok((ids, all))
    }

    /// Runs one build of `job` to its end; returns its number (an error when its claim was
    /// refused or it was dropped).
    pub async fn run(&self, job: &str) -> Result<u64, BuildsError> {
        let job = self.job_arc(job)?;
        let item = self.new_item(&job, None)?;
        let (number, steps) = if self.opts.numbers.gated() {
            self.settle(&job, &item).await.map_err(|reason| BuildsError::NotRun { job: job.name.clone(), reason })?
        } else {
            self.queue_local(&job, &item).await
        };
        self.run_queued(&job, number, item.queue_id, steps).await;
        Ok(number)
    }

    /// A build, if it started and was not discarded.
    pub fn build(&self, job: &str, number: u64) -> Option<BuildRecord> {
        self.records().get(job).and_then(|r| r.builds.get(&number).cloned())
    }

    /// The kept builds of a job, newest first.
    pub fn builds_of(&self, job: &str) -> Vec<BuildRecord> {
        self.records().get(job).map(|r| r.builds.values().rev().cloned().collect()).unwrap_or_default()
    }

    /// Whether a build of the job waits in the queue.
    pub fn in_queue(&self, job: &str) -> bool {
        self.items().values().any(|i| i.job == job && i.state.in_queue())
    }

    /// The queue item id of a build, queued or started.
    pub fn queue_id_of(&self, job: &str, number: u64) -> Option<u64> {
        if let Some(b) = self.build(job, number) {
            return Some(b.queue_id);
        }
        self.items().values().find(|i| i.job == job && i.build == Some(number)).map(|i| i.queue_id)
    }

    /// The items waiting in the queue (for a claim, or in their quiet period), oldest first.
    pub fn queue_items(&self) -> Vec<QueueItem> {
        self.items().values().filter(|i| i.state.in_queue()).cloned().collect()
    }

    /// How many builds are running.
    pub fn running(&self) -> usize {
        self.records().values().map(|r| r.builds.values().filter(|b| b.building).count()).sum()
    }

    /// The next build number as Jenkins would show it (`nextBuildNumber`).
    pub fn next_number(&self, job: &str) -> u64 {
        self.records().get(job).map_or(1, |r| r.highest + 1)
    }

    /// A receiver that changes on every step of every build (wait on a condition with
    /// `wait_for`). Drop the borrow `wait_for` returns at once: while it lives, no build can take
    /// its next step.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Waits until the build finished (it may not have started yet).
    pub async fn wait_finished(&self, job: &str, number: u64) {
        let mut rx = self.changed.subscribe();
        let _ = rx.wait_for(|_| self.build(job, number).is_some_and(|b| !b.building)).await;
    }
}

/// A permalink's build (`lastBuild`, `lastSuccessfulBuild`, ...), Jenkins' definitions
/// (`hudson/model/PermalinkProjectAction.java`).
pub fn permalink(builds: &[BuildRecord], name: &str) -> Option<u64> {
    let done = |b: &&BuildRecord| !b.building;
    let result = |b: &BuildRecord| b.result.unwrap_or(BuildResult::NotBuilt);
    let mut newest = builds.iter();
    let found = match name {
        "lastBuild" => newest.next(),
        "lastCompletedBuild" => newest.find(done),
        "lastSuccessfulBuild" => newest.find(|b| done(b) && severity(result(b)) <= 1),
        "lastStableBuild" => newest.find(|b| done(b) && result(b) == BuildResult::Success),
        "lastFailedBuild" => newest.find(|b| done(b) && result(b) == BuildResult::Failure),
        "lastUnstableBuild" => newest.find(|b| done(b) && result(b) == BuildResult::Unstable),
        "lastUnsuccessfulBuild" => newest.find(|b| done(b) && result(b) != BuildResult::Success),
        _ => None,
    };
    found.map(|b| b.number)
}

/// The permalinks there are.
pub const PERMALINKS: [&str; 7] = [
    "lastBuild",
    "lastCompletedBuild",
    "lastSuccessfulBuild",
    "lastStableBuild",
    "lastFailedBuild",
    "lastUnstableBuild",
    "lastUnsuccessfulBuild",
];

/// Jenkins' ball colour of a job (`hudson/model/BallColor.java`), `_anime` while building.
pub fn color(builds: &[BuildRecord]) -> String {
    let last_done = builds.iter().find(|b| !b.building);
    let base = match last_done.and_then(|b| b.result) {
        Some(BuildResult::Success) => "blue",
        Some(BuildResult::Unstable) => "yellow",
        Some(BuildResult::Failure) => "red",
        Some(BuildResult::Aborted) => "aborted",
        Some(BuildResult::NotBuilt) | None => "notbuilt",
    };
    if builds.first().is_some_and(|b| b.building) { format!("{base}_anime") } else { base.to_owned() }
}

/// The cause of a trigger as Jenkins exports it in a build's `CauseAction`.
pub fn cause_json(trigger: &str) -> serde_json::Value {
    let (class, text) = cause_of(trigger);
    let mut v = serde_json::json!({"_class": class, "shortDescription": text});
    if let Some(user) = trigger.strip_prefix("user:") {
        v["userId"] = user.into();
        v["userName"] = user.into();
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use varroa_link::builds::valid_id;

    fn t0() -> Timestamp {
        "2026-12-03T08:00:00Z".parse().unwrap()
    }

    fn job() -> JobConfig {
        parse_jobs(
            "jobs:\n- name: team-a/app\n  queue_ms: 5\n  console: [hello]\n  stages:\n  - {name: Build, duration_ms: 1300, console: [compiling]}\n  - {name: Test, duration_ms: 200, result: UNSTABLE}\n  tests: {total: 10, failed: 1, skipped: 2}\n",
        )
        .unwrap()
        .remove(0)
    }

    #[test]
    fn a_plan_has_every_event_in_order_with_ids_times_and_durations() {
        let steps = plan(&job(), 7, t0());
        let kinds: Vec<&str> = steps.iter().map(|s| s.event.body.kind()).collect();
        assert_eq!(
            kinds,
            [
                "queued",
                "started",
                "stage_started",
                "stage_finished",
                "stage_started",
                "stage_finished",
                "test_summary",
                "finished"
            ]
        );
        let ids: Vec<&str> = steps.iter().map(|s| s.event.id.as_str()).collect();
        assert_eq!(ids[0], "team-a/app#7:queued");
        assert_eq!(ids[3], "team-a/app#7:stage_finished:1");
        assert_eq!(ids[7], "team-a/app#7:finished");
        for s in &steps {
            s.event.validate().unwrap();
            assert_eq!(s.event.build, Some(7));
        }
        assert_eq!(steps[1].event.time, "2026-12-03T08:00:00.005Z".parse().unwrap());
        match &steps[5].event.body {
            EventBody::StageFinished { stage } => {
                assert_eq!(stage.result, Some(BuildResult::Unstable));
                assert_eq!(stage.duration_ms, Some(200));
                assert_eq!(stage.started, Some("2026-12-03T08:00:01.305Z".parse().unwrap()));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(steps[7].event.body, EventBody::Finished { result: BuildResult::Unstable, duration_ms: 1500 });
        assert_eq!(steps[7].event.time, "2026-12-03T08:00:01.505Z".parse().unwrap());
        let console: Vec<String> = steps.iter().flat_map(|s| s.console.clone()).collect();
        assert_eq!(console[0], "Started by user admin");
        assert!(console.contains(&"hello".to_string()) && console.contains(&"[Pipeline] { (Build)".to_string()));
        assert_eq!(console.last().unwrap(), "Finished: UNSTABLE");
        assert_eq!(plan(&job(), 7, t0()), steps, "deterministic");
    }

    #[test]
    fn results_are_derived_and_a_failure_skips_the_rest() {
        let mut j = JobConfig::simple("app", 3, 10);
        assert_eq!(result_of(&j), BuildResult::Success);
        j.stages[1].result = Some(BuildResult::Failure);
        assert_eq!(result_of(&j), BuildResult::Failure);
        let steps = plan(&j, 1, t0());
        match &steps.iter().rev().find(|s| s.event.body.kind() == "stage_finished").unwrap().event.body {
            EventBody::StageFinished { stage } => {
                assert_eq!((stage.result, stage.duration_ms), (Some(BuildResult::NotBuilt), Some(0)))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            steps.last().unwrap().event.body,
            EventBody::Finished { result: BuildResult::Failure, duration_ms: 20 }
        );
        j.result = Some(BuildResult::Aborted);
        assert_eq!(result_of(&j), BuildResult::Aborted);
        let mut j = JobConfig::simple("app", 1, 0);
        j.stages[0].result = Some(BuildResult::NotBuilt);
        j.tests = Some(TestsConfig { total: 3, failed: 0, skipped: 3, duration_ms: None });
        assert_eq!(result_of(&j), BuildResult::Success);
    }

    #[test]
    fn ids_stay_valid_for_any_name() {
        let id = event_id("my job+x/ü", 3, "stage_started", Some("7 a"));
        assert_eq!(id, "my+20job+2Bx/+C3+BC#3:stage_started:7+20a");
        assert!(valid_id(&id));
        let long = "a".repeat(MAX_JOB);
        let id = event_id(&long, u64::MAX, "stage_finished", Some(&"é".repeat(32)));
        assert!(valid_id(&id), "{id}");
        assert_eq!(id, event_id(&long, u64::MAX, "stage_finished", Some(&"é".repeat(32))));
        assert!(valid_id(&event_id(&long, 1, "finished", None)));
    }

    #[test]
    fn jobs_files_name_what_is_wrong() {
        let err = |text: &str| parse_jobs(text).unwrap_err().to_string();
        assert!(parse_jobs(r#"[{"name": "app"}]"#).unwrap()[0].stages.is_empty());
        assert!(
            parse_jobs(r#"{"jobs": [{"name": "a", "stages": [{"name": "B", "durationMs": 5}]}]}"#).unwrap()[0].stages
                [0]
            .duration_ms
                == 5
        );
        assert!(
            err("jobs: [{name: app, stages: [{name: B, duration: 5}]}]").contains("duration"),
            "{}",
            err("jobs: [{name: app, stages: [{name: B, duration: 5}]}]")
        );
        assert!(err("jobs: [{name: 'a:b'}]").contains("name"));
        assert!(err("jobs: [{name: a/}]").contains("name"));
        assert!(err("jobs: [{name: a}, {name: a}]").contains("twice"));
        assert!(err("jobs: [{name: a, stages: [{name: B}, {name: C, id: '1'}]}]").contains("stages[1].id"));
        assert!(err("jobs: [{name: a, tests: {total: 1, failed: 2}}]").contains("tests.failed"));
        assert!(err("jobs: [{name: a, stages: [{name: B, result: GREAT}]}]").contains("GREAT"));
        assert!(err("42").contains("neither"));
    }

    #[test]
    fn the_documented_jobs_file_parses() {
        let doc = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/varroa/jenkins-double.md"));
        let block = doc.split("```yaml\njobs:").nth(1).and_then(|b| b.split("```").next()).expect("the example");
        let jobs = parse_jobs(&format!("jobs:{block}")).unwrap();
        assert_eq!(jobs[0].name, "team-a/app");
        assert_eq!(jobs[0].stage_ids(), ["1", "2", "42"]);
        assert_eq!(result_of(&jobs[0]), BuildResult::Failure);
    }

    #[tokio::test]
    async fn builds_run_keep_their_console_and_numbers_per_job() {
        let mut a = JobConfig::simple("a", 2, 1_000_000);
        a.console = vec!["x".repeat(100)];
        let builds = Builds::new(BuildsOptions {
            jobs: vec![a, JobConfig::simple("f/b", 1, 0)],
            time_scale: 0.0,
            keep_builds: 2,
            max_console_bytes: 300,
            ..Default::default()
        });
        assert_eq!(builds.run("a").await.unwrap(), 1);
        assert_eq!(builds.run("f/b").await.unwrap(), 1);
        let (numbers, all) = builds.trigger("a", 2).await.unwrap();
        assert_eq!(numbers, [2, 3]);
        all.await.unwrap();
        assert!(builds.build("a", 1).is_none(), "discarded: two builds are kept");
        let b = builds.build("a", 3).unwrap();
        assert_eq!((b.building, b.result, b.duration_ms), (false, Some(BuildResult::Success), 2_000_000));
        assert!(b.console_truncated && b.console.len() < 400, "{}", b.console);
        assert_eq!(builds.next_number("a"), 4);
        assert_eq!(permalink(&builds.builds_of("a"), "lastBuild"), Some(3));
        assert!(builds.is_folder("f") && !builds.is_folder("a"));
        assert!(matches!(builds.run("nope").await, Err(BuildsError::NoSuchJob { .. })));
        assert_eq!(builds.events_produced(), 3 * 7 + 5);
    }
}
