//! Build events: what the Varroa Jenkins plugin reports about builds (docs/varroa/plugin-protocol.md),
//! carried plugin -> mite -> gateway -> JetStream stream [`STREAM`] -> `varroa-recorder` ->
//! PostgreSQL (docs/varroa/data-plane.md).
//!
//! Three shapes, one per hop:
//!
//! - [`BuildEvent`]: one event as the plugin sends it (`POST /v1/events` on the mite), JSON with a
//!   `kind` tag. [`parse_event`] parses and validates one, naming the field that is wrong; the mite
//!   checks every event before it forwards it, and the gateway checks again (the mite is in the
//!   tenant's pod, so the gateway trusts nothing it sends but its certificate).
//! - On the gRPC stream, a batch is the events' JSON bytes (`BuildEvents`, answered by one
//!   `EventsAck`); see `proto/varroa/link/v1/link.proto`.
//! - [`RecordedEvent`]: what the gateway publishes on [`subject`]: the event, stamped with the
//!   cluster, namespace, controller and cell *from the mite's certificate and stream*, never from
//!   the event, so that one tenant cannot write another's records. The JetStream message id
//!   ([`msg_id`]) is scoped the same way, so one tenant's ids cannot shadow another's in the
//!   stream's duplicate window.
//!
//! Delivery is at least once end to end: a batch is acknowledged to the plugin only after
//! JetStream stored every event; a retry is deduplicated by the stream (within
//! [`DUPLICATE_WINDOW`]) and, after it, by the recorder (it records processed event ids).

use std::time::Duration;

use async_nats::jetstream;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::kv::ControllerKey;

/// The JetStream stream of build events and job schedules.
pub const STREAM: &str = "varroa_builds";
/// The subjects of [`STREAM`]: `varroa.builds.<cluster>.<namespace>.<controller>`.
pub const SUBJECT_PREFIX: &str = "varroa.builds";
/// The event version this code reads and writes (`v`).
pub const VERSION: u32 = 1;
/// The most events in one request of the plugin, and in one batch on the stream.
pub const MAX_EVENTS_PER_BATCH: usize = 500;
/// The largest single event, as JSON bytes.
pub const MAX_EVENT_BYTES: usize = 16 * 1024;
/// The largest request body the mite reads from the plugin.
pub const MAX_REQUEST_BYTES: usize = 1024 * 1024;
/// How long JetStream remembers message ids to drop a retried publish.
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(20 * 60);
/// How long the stream keeps events the recorder has not consumed (a recorder down longer than
/// this loses the oldest).
pub const MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);
/// The longest event id.
pub const MAX_ID: usize = 200;
/// The longest job name.
pub const MAX_JOB: usize = 512;
/// The longest free-text field (trigger, cause, node, stage name, schedule spec).
pub const MAX_TEXT: usize = 256;
/// The most schedules of one job.
pub const MAX_SCHEDULES: usize = 32;
/// The highest build number (JSON numbers are exact up to 2^53).
pub const MAX_BUILD: u64 = 1 << 53;

/// A build's or stage's result, as Jenkins names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum BuildResult {
    /// Passed.
    Success,
    /// Passed with test failures.
    Unstable,
    /// Failed.
    Failure,
    /// Not built (a skipped stage, a build that never ran).
    NotBuilt,
    /// Stopped by someone or something.
    Aborted,
}

impl BuildResult {
    /// The name as Jenkins spells it (`SUCCESS`).
    pub fn as_str(self) -> &'static str {
        match self {
            BuildResult::Success => "SUCCESS",
            BuildResult::Unstable => "UNSTABLE",
            BuildResult::Failure => "FAILURE",
            BuildResult::NotBuilt => "NOT_BUILT",
            BuildResult::Aborted => "ABORTED",
        }
    }
}

/// A pipeline stage (a flow node of the build).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stage {
    /// The flow node id, 1 to 64 characters.
    pub id: String,
    /// The stage's name.
    pub name: String,
    /// When it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<Timestamp>,
    /// Its result (`stage_finished` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<BuildResult>,
    /// How long it ran (`stage_finished` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
}

/// One schedule of a job (a cron trigger, SCM polling).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schedule {
    /// `cron` or `scm` (readers accept others).
    pub trigger: String,
    /// The spec as Jenkins has it (`H/15 * * * *`).
    pub spec: String,
    /// When it fires next, if Jenkins says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<Timestamp>,
}

/// What happened: the `kind` of an event and the fields that kind carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EventBody {
    /// The build entered the queue with its number.
    Queued {
        /// What triggered it (`timer`, `scm`, `user:<name>`, `upstream:<job>#<n>`, `remote`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trigger: Option<String>,
    },
    /// It started running.
    Started {
        /// Why it runs (Jenkins' cause, short).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cause: Option<String>,
        /// The node (agent) it runs on.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node: Option<String>,
    },
    /// A stage started.
    StageStarted {
        /// The stage.
        stage: Stage,
    },
    /// A stage finished.
    StageFinished {
        /// The stage, with result and duration.
        stage: Stage,
    },
    /// The build finished.
    Finished {
        /// Its result.
        result: BuildResult,
        /// How long it ran.
        duration_ms: u64,
    },
    /// The build's test results.
    TestSummary {
        /// Tests run.
        total: u64,
        /// Tests failed.
        failed: u64,
        /// Tests skipped.
        skipped: u64,
        /// How long the tests took.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        duration_ms: Option<u64>,
    },
    /// A job's schedules as the trigger inventory has them now (an empty list: none any more).
    /// Carries no `build`.
    JobSchedule {
        /// The schedules.
        schedules: Vec<Schedule>,
    },
}

impl EventBody {
    /// The `kind` as it is spelled on the wire.
    pub fn kind(&self) -> &'static str {
        match self {
            EventBody::Queued { .. } => "queued",
            EventBody::Started { .. } => "started",
            EventBody::StageStarted { .. } => "stage_started",
            EventBody::StageFinished { .. } => "stage_finished",
            EventBody::Finished { .. } => "finished",
            EventBody::TestSummary { .. } => "test_summary",
            EventBody::JobSchedule { .. } => "job_schedule",
        }
    }
}

/// One build event as the plugin sends it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildEvent {
    /// The event version ([`VERSION`]).
    pub v: u32,
    /// Unique per event and the same on every retry: the deduplication key end to end.
    pub id: String,
    /// When it happened (Jenkins' clock).
    pub time: Timestamp,
    /// The job's full name (`folder/job`).
    pub job: String,
    /// The build number; absent only for `job_schedule`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<u64>,
    /// The kind and its fields.
    #[serde(flatten)]
    pub body: EventBody,
}

/// Why an event is refused: the field and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct EventError {
    /// The field (`id`, `stage.name`, `kind`, or `event` for the whole).
    pub field: String,
    /// What is wrong, and the fix where it is not obvious.
    pub reason: String,
}

fn err(field: &str, reason: impl Into<String>) -> EventError {
    EventError { field: field.to_owned(), reason: reason.into() }
}

fn check_text(field: &str, value: &str, max: usize, allow_empty: bool) -> Result<(), EventError> {
    if !allow_empty && value.is_empty() {
        return Err(err(field, "must not be empty"));
    }
    if value.chars().count() > max {
        return Err(err(field, format!("longer than {max} characters")));
    }
    if value.chars().any(char::is_control) {
        return Err(err(field, "must not contain control characters"));
    }
    Ok(())
}

fn check_opt(field: &str, value: &Option<String>) -> Result<(), EventError> {
    value.as_deref().map_or(Ok(()), |v| check_text(field, v, MAX_TEXT, true))
}

/// Whether `id` is a valid event id: 1 to [`MAX_ID`] of `[A-Za-z0-9._:#/@+-]`.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_ID && id.bytes().all(|b| b.is_ascii_alphanumeric() || b"._:#/@+-".contains(&b))
}

fn check_stage(stage: &Stage, finished: bool) -> Result<(), EventError> {
    if stage.id.is_empty() || stage.id.len() > 64 || stage.id.chars().any(char::is_control) {
        return Err(err("stage.id", "must be 1 to 64 characters without control characters"));
    }
    check_text("stage.name", &stage.name, MAX_TEXT, false)?;
    if finished {
        if stage.result.is_none() {
            return Err(err("stage.result", "a stage_finished event needs the stage's result"));
        }
        if stage.duration_ms.is_none() {
            return Err(err("stage.duration_ms", "a stage_finished event needs the stage's duration"));
        }
    }
    Ok(())
}

impl BuildEvent {
    /// Checks every field against docs/varroa/plugin-protocol.md.
    pub fn validate(&self) -> Result<(), EventError> {
        if self.v != VERSION {
            return Err(err("v", format!("version {} is not known; this side reads version {VERSION}", self.v)));
        }
        if !valid_id(&self.id) {
            return Err(err("id", format!("must be 1 to {MAX_ID} of A-Z a-z 0-9 . _ : # / @ + -")));
        }
        check_text("job", &self.job, MAX_JOB, false)?;
        match (&self.body, self.build) {
            (EventBody::JobSchedule { .. }, Some(_)) => {
                return Err(err("build", "a job_schedule event carries no build number"));
            }
            (EventBody::JobSchedule { .. }, None) => {}
            (_, None) => return Err(err("build", "missing: every event but job_schedule names its build")),
            (_, Some(b)) if b == 0 || b > MAX_BUILD => {
                return Err(err("build", format!("must be between 1 and {MAX_BUILD}")));
            }
            _ => {}
        }
        match &self.body {
            EventBody::Queued { trigger } => check_opt("trigger", trigger),
            EventBody::Started { cause, node } => {
                check_opt("cause", cause)?;
                check_opt("node", node)
            }
            EventBody::StageStarted { stage } => check_stage(stage, false),
            EventBody::StageFinished { stage } => check_stage(stage, true),
            EventBody::Finished { .. } => Ok(()),
            EventBody::TestSummary { total, failed, skipped, .. } => {
                if failed.saturating_add(*skipped) > *total {
                    return Err(err("failed", "failed plus skipped is more than total"));
                }
                Ok(())
            }
            EventBody::JobSchedule { schedules } => {
                if schedules.len() > MAX_SCHEDULES {
                    return Err(err("schedules", format!("more than {MAX_SCHEDULES}")));
                }
                for s in schedules {
                    check_text("schedules.trigger", &s.trigger, 32, false)?;
                    check_text("schedules.spec", &s.spec, MAX_TEXT, false)?;
                }
                Ok(())
            }
        }
    }

    /// The build number, 0 for `job_schedule`.
    pub fn build_number(&self) -> u64 {
        self.build.unwrap_or(0)
    }
}

/// The `id` of a raw event, when it has a usable one (for naming a refused event).
pub fn raw_id(raw: &serde_json::Value) -> String {
    match raw.get("id").and_then(|v| v.as_str()) {
        Some(id) if valid_id(id) => id.to_owned(),
        _ => String::new(),
    }
}

/// Parses and validates one event from its JSON.
pub fn parse_event(raw: &serde_json::Value) -> Result<BuildEvent, EventError> {
    if !raw.is_object() {
        return Err(err("event", "must be a JSON object"));
    }
    let size = serde_json::to_vec(raw).map(|v| v.len()).unwrap_or(usize::MAX);
    if size > MAX_EVENT_BYTES {
        return Err(err("event", format!("larger than {MAX_EVENT_BYTES} bytes")));
    }
    if raw.get("v").and_then(|v| v.as_u64()).is_some_and(|v| v != u64::from(VERSION)) {
        return Err(err("v", format!("this side reads version {VERSION}")));
    }
    if let Some(kind) = raw.get("kind").and_then(|v| v.as_str())
        && !KINDS.contains(&kind)
    {
        return Err(err("kind", format!("{kind:?} is not one of {}", KINDS.join(", "))));
    }
    let event: BuildEvent = serde_json::from_value(raw.clone()).map_err(|e| err(&field_of(&e, raw), e.to_string()))?;
    event.validate()?;
    Ok(event)
}

/// Parses and validates one event from JSON bytes.
pub fn parse_event_bytes(bytes: &[u8]) -> Result<BuildEvent, EventError> {
    if bytes.len() > MAX_EVENT_BYTES {
        return Err(err("event", format!("larger than {MAX_EVENT_BYTES} bytes")));
    }
    let raw: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| err("event", format!("not JSON: {e}")))?;
    parse_event(&raw)
}

/// The kinds, as spelled on the wire.
pub const KINDS: [&str; 7] =
    ["queued", "started", "stage_started", "stage_finished", "finished", "test_summary", "job_schedule"];

/// The field serde complains about, from its message (`missing field `x``, `unknown variant `X``:
/// the field holding `X`). serde loses the path inside a flattened enum, so it is found again.
fn field_of(e: &serde_json::Error, raw: &serde_json::Value) -> String {
    let text = e.to_string();
    let quoted =
        |prefix: &str| text.strip_prefix(prefix).and_then(|rest| rest.find('`').map(|end| rest[..end].to_owned()));
    if let Some(field) = quoted("missing field `") {
        return field;
    }
    if let Some(value) = quoted("unknown variant `") {
        let holds = |v: &serde_json::Value| v.as_str() == Some(value.as_str());
        if let Some(obj) = raw.as_object() {
            for (k, v) in obj {
                if holds(v) {
                    return k.clone();
                }
                if let Some(inner) = v.as_object()
                    && let Some((ik, _)) = inner.iter().find(|(_, iv)| holds(iv))
                {
                    return format!("{k}.{ik}");
                }
            }
        }
    }
    "event".to_owned()
}

/// An event as the gateway publishes it: stamped with where it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedEvent {
    /// The cluster name (the gateway's `--cluster`).
    pub cluster: String,
    /// The controller's namespace, from the mite's certificate.
    pub namespace: String,
    /// The controller's name, from the mite's certificate.
    pub controller: String,
    /// The cell whose plugin sent it (the stream's hello).
    pub cell: u32,
    /// When the gateway received it (its clock).
    pub received: Timestamp,
    /// The event.
    pub event: BuildEvent,
}

impl RecordedEvent {
    /// The JetStream message id: the event id, scoped by cluster, namespace and controller.
    pub fn msg_id(&self) -> String {
        msg_id(&self.cluster, &self.namespace, &self.controller, &self.event.id)
    }
}

/// The JetStream message id of event `id` of a controller.
pub fn msg_id(cluster: &str, namespace: &str, controller: &str, id: &str) -> String {
    format!("{cluster}/{namespace}/{controller}/{id}")
}

/// `varroa.builds.<cluster>.<namespace>.<controller>` (the cluster a DNS-1123 label, validated
/// by the gateway at start-up).
pub fn subject(cluster: &str, controller: &ControllerKey) -> String {
    format!("{SUBJECT_PREFIX}.{cluster}.{controller}")
}

/// The stream's settings. `replicas` is the JetStream replica count (1 for one server).
pub fn stream_config(replicas: usize) -> jetstream::stream::Config {
    jetstream::stream::Config {
        name: STREAM.to_owned(),
        description: Some(
            "Varroa: build events and job schedules (written by the gateway, read by the recorder)".into(),
        ),
        subjects: vec![format!("{SUBJECT_PREFIX}.>")],
        retention: jetstream::stream::RetentionPolicy::Limits,
        storage: jetstream::stream::StorageType::File,
        max_age: MAX_AGE,
        duplicate_window: DUPLICATE_WINDOW,
        max_message_size: (MAX_EVENT_BYTES + 1024) as i32,
        num_replicas: replicas.max(1),
        discard: jetstream::stream::DiscardPolicy::Old,
        ..Default::default()
    }
}

/// Opens the stream, creating it with [`stream_config`] when it does not exist yet.
pub async fn open_stream(
    js: &jetstream::Context,
    replicas: usize,
) -> Result<jetstream::stream::Stream, crate::kv::KvError> {
    js.get_or_create_stream(stream_config(replicas))
        .await
        .map_err(|e| crate::kv::KvError::Stream { stream: STREAM, message: e.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn started() -> serde_json::Value {
        json!({"v": 1, "id": "app#42:started", "time": "2026-12-03T08:00:00.120Z", "job": "team-a/app",
               "build": 42, "kind": "started", "cause": "timer", "extra": "ignored"})
    }

    #[test]
    fn every_kind_round_trips_and_unknown_fields_are_ignored() {
        let e = parse_event(&started()).unwrap();
        assert_eq!(e.build, Some(42));
        assert_eq!(e.body, EventBody::Started { cause: Some("timer".into()), node: None });
        let stage = json!({"v": 1, "id": "s1", "time": "2026-12-03T08:00:01Z", "job": "app", "build": 1,
            "kind": "stage_finished", "stage": {"id": "7", "name": "Build", "result": "SUCCESS", "duration_ms": 1300}});
        let e = parse_event(&stage).unwrap();
        assert_eq!(e.body.kind(), "stage_finished");
        let back: serde_json::Value = serde_json::to_value(&e).unwrap();
        assert_eq!(parse_event(&back).unwrap(), e);
        let sched = json!({"v": 1, "id": "app:schedule:1", "time": "2026-12-03T08:00:01Z", "job": "app",
            "kind": "job_schedule", "schedules": [{"trigger": "cron", "spec": "H/15 * * * *"}]});
        assert_eq!(parse_event(&sched).unwrap().build, None);
    }

    #[test]
    fn refusals_name_the_field() {
        let field = |v: serde_json::Value| parse_event(&v).unwrap_err().field;
        let mut e = started();
        e["id"] = json!("has space");
        assert_eq!(field(e), "id");
        let mut e = started();
        e["kind"] = json!("exploded");
        assert_eq!(field(e), "kind");
        let mut e = started();
        e.as_object_mut().unwrap().remove("build");
        assert_eq!(field(e), "build");
        let mut e = started();
        e["build"] = json!(0);
        assert_eq!(field(e), "build");
        let mut e = started();
        e["job"] = json!("a\u{0}b");
        assert_eq!(field(e), "job");
        let mut e = started();
        e["v"] = json!(2);
        assert_eq!(field(e), "v");
        let mut e = started();
        e.as_object_mut().unwrap().remove("time");
        assert_eq!(field(e), "time");
        let fin = json!({"v": 1, "id": "f", "time": "2026-12-03T08:00:01Z", "job": "app", "build": 1,
            "kind": "finished", "result": "GREAT", "duration_ms": 5});
        assert_eq!(field(fin), "result");
        let stage = json!({"v": 1, "id": "s1", "time": "2026-12-03T08:00:01Z", "job": "app", "build": 1,
            "kind": "stage_finished", "stage": {"id": "7", "name": "Build"}});
        assert_eq!(field(stage), "stage.result");
        let tests = json!({"v": 1, "id": "t", "time": "2026-12-03T08:00:01Z", "job": "app", "build": 1,
            "kind": "test_summary", "total": 3, "failed": 2, "skipped": 2});
        assert_eq!(field(tests), "failed");
        assert_eq!(parse_event(&json!([1])).unwrap_err().field, "event");
        let big = json!({"v": 1, "id": "x", "time": "2026-12-03T08:00:01Z", "job": "a".repeat(MAX_EVENT_BYTES), "build": 1, "kind": "started"});
        assert_eq!(field(big), "event");
        assert_eq!(parse_event_bytes(b"{nope").unwrap_err().field, "event");
    }

    #[test]
    fn subjects_and_ids_are_scoped_by_controller() {
        let c = ControllerKey::new("team-a", "ci").unwrap();
        assert_eq!(subject("prod", &c), "varroa.builds.prod.team-a.ci");
        assert_eq!(msg_id("prod", "team-a", "ci", "x#1"), "prod/team-a/ci/x#1");
        let cfg = stream_config(1);
        assert_eq!(cfg.subjects, ["varroa.builds.>"]);
        assert_eq!(cfg.duplicate_window, DUPLICATE_WINDOW);
    }
}
