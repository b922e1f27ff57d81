//! Build events into the build record tables: [`decode`] checks one message of `varroa_builds`,
//! [`Writer::apply`] applies a batch of them in one transaction.
//!
//! A batch is applied like this, in one transaction:
//!
//! 1. `INSERT INTO processed_events ... ON CONFLICT DO NOTHING RETURNING msg_id` with every
//!    event's scoped id ([`RecordedEvent::msg_id`], computed from the message's content, not
//!    from its `Nats-Msg-Id` header): the ids it returns are the events not applied before; the
//!    others (and a second copy inside the batch) are duplicates and change nothing.
//! 2. The new events are folded, per row, into one change each (a build's `queued`, `started`,
//!    stage and test events of one batch make one `runs` change), and each table gets one
//!    multi-row upsert (`INSERT ... SELECT * FROM unnest($1::text[], ...) ON CONFLICT ... DO
//!    UPDATE`), its rows sorted by key: every transaction locks rows table by table in key
//!    order, so two replicas applying overlapping batches wait for each other and never
//!    deadlock.
//!
//! Every upsert is idempotent and independent of the order events arrive in:
//!
//! - `runs`: `queued` sets `queued_at` and `trigger`; `started` sets `started_at`, `cause`, `node`
//!   and `cell`; `finished` sets `finished_at`, `result` and `duration_ms`. Each kind writes only
//!   its own columns, so a `finished` before its `started` still ends right. Should a kind come
//!   twice with different ids, the later event time wins (a tie keeps what is there). `cell` is
//!   the `started` event's, else the cell of the event that created the row. Every event of a
//!   build creates the row if it is missing, so stages never lack their run.
//! - `stages`: `stage_finished` sets name, result, duration and, when it carries it, the start
//!   time; a `stage_started` fills in only what is not known yet (a `stage_started` after its
//!   `stage_finished` changes nothing it knows).
//! - `test_summaries` and `job_schedules`: the event with the latest time wins.

use std::collections::{BTreeMap, HashSet};

use jiff::Timestamp;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Statement};
use varroa_link::builds::{self, BuildEvent, EventBody, KINDS, RecordedEvent};
use varroa_link::kv::ControllerKey;

/// The `kind` label of a message too broken to name its kind.
pub const UNKNOWN_KIND: &str = "unknown";

/// Why a message cannot be recorded (it is terminated, never redelivered).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed {
    /// The event's kind when the message names a known one, else [`UNKNOWN_KIND`].
    pub kind: &'static str,
    /// What is wrong, naming the field.
    pub reason: String,
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

/// What applying an event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Its changes were written.
    Applied,
    /// It was applied before (or is a second copy in the same batch): nothing changed.
    Duplicate,
}

fn kind_of(payload: &[u8]) -> &'static str {
    let kind = serde_json::from_slice::<serde_json::Value>(payload)
        .ok()
        .and_then(|v| v.get("event").and_then(|e| e.get("kind")).and_then(|k| k.as_str()).map(str::to_owned));
    kind.and_then(|k| KINDS.iter().copied().find(|known| *known == k)).unwrap_or(UNKNOWN_KIND)
}

fn fits_bigint(field: &str, value: u64) -> Result<(), String> {
    if value > i64::MAX as u64 { Err(format!("{field}: {value} is larger than {}", i64::MAX)) } else { Ok(()) }
}

fn no_nul(field: &str, value: &str) -> Result<(), String> {
    if value.contains('\0') { Err(format!("{field}: must not contain NUL characters")) } else { Ok(()) }
}

/// What PostgreSQL cannot hold, on top of [`BuildEvent::validate`].
fn check_storable(e: &BuildEvent) -> Result<(), String> {
    match &e.body {
        EventBody::Finished { duration_ms, .. } => fits_bigint("duration_ms", *duration_ms),
        EventBody::StageStarted { stage } | EventBody::StageFinished { stage } => {
            no_nul("stage.id", &stage.id)?;
            fits_bigint("stage.duration_ms", stage.duration_ms.unwrap_or(0))
        }
        EventBody::TestSummary { total, failed, skipped, duration_ms } => {
            fits_bigint("total", *total)?;
            fits_bigint("failed", *failed)?;
            fits_bigint("skipped", *skipped)?;
            fits_bigint("duration_ms", duration_ms.unwrap_or(0))
        }
        EventBody::JobSchedule { .. } | EventBody::Queued { .. } | EventBody::Started { .. } => Ok(()),
    }
}

/// Decodes and checks one message of `varroa_builds` published on `subject`: a
/// [`RecordedEvent`] whose event passes [`BuildEvent::validate`], whose cluster, namespace and
/// controller are valid names and are the ones its subject names (the gateway publishes every
/// event on its controller's subject), and whose numbers fit the tables.
pub fn decode(subject: &str, payload: &[u8]) -> Result<RecordedEvent, Malformed> {
    let kind = || kind_of(payload);
    let malformed = |reason: String| Malformed { kind: kind(), reason };
    let record: RecordedEvent = serde_json::from_slice(payload)
        .map_err(|e| malformed(format!("not a recorded build event (the gateway's JSON): {e}")))?;
    let id = &record.event.id;
    record.event.validate().map_err(|e| malformed(format!("event {id:?}: {e}")))?;
    varroa_link::activity::global_subject(&record.cluster).map_err(|e| malformed(format!("event {id:?}: {e}")))?;
    let key = ControllerKey::new(&record.namespace, &record.controller)
        .map_err(|e| malformed(format!("event {id:?}: {e}")))?;
    let expected = builds::subject(&record.cluster, &key);
    if subject != expected {
        return Err(malformed(format!(
            "event {id:?} is stamped for {expected} but was published on {subject}: only the gateway publishes build events, on the subject of the controller it stamps"
        )));
    }
    if i32::try_from(record.cell).is_err() {
        return Err(malformed(format!("event {id:?}: cell {} is larger than {}", record.cell, i32::MAX)));
    }
    check_storable(&record.event).map_err(|e| malformed(format!("event {id:?}: {e}")))?;
    Ok(record)
}

/// How a PostgreSQL error is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// A deadlock or serialization failure: run the transaction again at once.
    Retry,
    /// The data cannot be stored (a data exception, a constraint, a limit): retrying the same
    /// input fails the same way, so the batch is applied event by event to find the one.
    Data,
    /// The server or the connection: reconnect, back off, let JetStream redeliver.
    Transient,
}

/// Classifies a PostgreSQL error by its SQLSTATE.
pub fn classify(e: &tokio_postgres::Error) -> ErrorClass {
    match e.code().map(|c| c.code()) {
        Some("40001" | "40P01") => ErrorClass::Retry,
        Some(code) if code.starts_with("22") || code.starts_with("23") || code.starts_with("54") => ErrorClass::Data,
        _ => ErrorClass::Transient,
    }
}

/// `(cluster, namespace, controller, job, build)`.
type RunKey = (String, String, String, String, i64);

#[derive(Debug, Default)]
struct RunChange {
    /// The cell of the first event of the batch for this run.
    first_cell: i32,
    queued: Option<(Timestamp, Option<String>)>,
    /// Time, cause, node, cell.
    started: Option<(Timestamp, Option<String>, Option<String>, i32)>,
    /// Time, result, duration.
    finished: Option<(Timestamp, &'static str, i64)>,
}

#[derive(Debug, Default)]
struct StageChange {
    /// Name and start time of the `stage_started` (the earliest, if several).
    started: Option<(String, Timestamp)>,
    /// Name, start time, result, duration of the `stage_finished`.
    finished: Option<(String, Option<Timestamp>, &'static str, i64)>,
}

/// A later event time replaces; a tie keeps the first.
fn later<T>(slot: &mut Option<T>, new: T, time: impl Fn(&T) -> Timestamp) {
    match slot {
        Some(old) if time(old) >= time(&new) => {}
        _ => *slot = Some(new),
    }
}

/// [`later`] for a map of `(time, value)`.
fn keep_latest<K: Ord, V>(map: &mut BTreeMap<K, (Timestamp, V)>, key: K, new: (Timestamp, V)) {
    match map.get(&key) {
        Some(old) if old.0 >= new.0 => {}
        _ => {
            map.insert(key, new);
        }
    }
}

fn i64_of(n: u64) -> i64 {
    // decode() refused anything larger.
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// `(time, total, failed, skipped, duration_ms)`.
type TestChange = (Timestamp, (i64, i64, i64, Option<i64>));

/// One batch folded into one change per row, each map sorted by key.
#[derive(Debug, Default)]
struct Changes {
    runs: BTreeMap<RunKey, RunChange>,
    stages: BTreeMap<(RunKey, String), StageChange>,
    tests: BTreeMap<RunKey, TestChange>,
    schedules: BTreeMap<(String, String, String, String), (Timestamp, serde_json::Value)>,
}

impl Changes {
    fn add(&mut self, r: &RecordedEvent) {
        let e = &r.event;
        let cell = i32::try_from(r.cell).unwrap_or(i32::MAX);
        if let EventBody::JobSchedule { schedules } = &e.body {
            let key = (r.cluster.clone(), r.namespace.clone(), r.controller.clone(), e.job.clone());
            let value = serde_json::to_value(schedules).unwrap_or_else(|_| serde_json::Value::Array(Vec::new()));
            keep_latest(&mut self.schedules, key, (e.time, value));
            return;
        }
        let key: RunKey =
            (r.cluster.clone(), r.namespace.clone(), r.controller.clone(), e.job.clone(), i64_of(e.build_number()));
        let run = self.runs.entry(key.clone()).or_insert_with(|| RunChange { first_cell: cell, ..Default::default() });
        match &e.body {
            EventBody::Queued { trigger } => later(&mut run.queued, (e.time, trigger.clone()), |q| q.0),
            EventBody::Started { cause, node } => {
                later(&mut run.started, (e.time, cause.clone(), node.clone(), cell), |s| s.0)
            }
            EventBody::Finished { result, duration_ms } => {
                later(&mut run.finished, (e.time, result.as_str(), i64_of(*duration_ms)), |f| f.0)
            }
            EventBody::StageStarted { stage } => {
                let change = self.stages.entry((key, stage.id.clone())).or_default();
                let started = stage.started.unwrap_or(e.time);
                match &change.started {
                    Some((_, t)) if *t <= started => {}
                    _ => change.started = Some((stage.name.clone(), started)),
                }
            }
            EventBody::StageFinished { stage } => {
                let change = self.stages.entry((key, stage.id.clone())).or_default();
                let result = stage.result.map_or("NOT_BUILT", |r| r.as_str());
                change.finished =
                    Some((stage.name.clone(), stage.started, result, i64_of(stage.duration_ms.unwrap_or(0))));
            }
            EventBody::TestSummary { total, failed, skipped, duration_ms } => {
                let value = (i64_of(*total), i64_of(*failed), i64_of(*skipped), duration_ms.map(i64_of));
                keep_latest(&mut self.tests, key, (e.time, value));
            }
            EventBody::JobSchedule { .. } => {}
        }
    }
}

/// Whether the incoming `queued` (`q`), `started` (`s`) or `finished` (`f`) of a `runs` change
/// replaces what the row has: it is there, and the row has none or an earlier one.
const RUN_Q: &str = "(EXCLUDED.queued_at IS NOT NULL AND (r.queued_at IS NULL OR EXCLUDED.queued_at > r.queued_at))";
const RUN_S: &str =
    "(EXCLUDED.started_at IS NOT NULL AND (r.started_at IS NULL OR EXCLUDED.started_at > r.started_at))";
const RUN_F: &str = "(EXCLUDED.result IS NOT NULL AND (r.result IS NULL OR EXCLUDED.finished_at > r.finished_at))";

fn runs_sql() -> String {
    let mut set = Vec::new();
    for (cond, cols) in [
        (RUN_Q, &["queued_at", "trigger"][..]),
        (RUN_S, &["started_at", "cause", "node", "cell"][..]),
        (RUN_F, &["finished_at", "result", "duration_ms"][..]),
    ] {
        for c in cols {
            set.push(format!("{c} = CASE WHEN {cond} THEN EXCLUDED.{c} ELSE r.{c} END"));
        }
    }
    format!(
        "INSERT INTO runs AS r (cluster, namespace, controller, job, build, cell, trigger, cause, node, \
                               queued_at, started_at, finished_at, result, duration_ms) \
         SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[], $6::int4[], \
                              $7::text[], $8::text[], $9::text[], \
                              $10::timestamptz[], $11::timestamptz[], $12::timestamptz[], $13::text[], $14::int8[]) \
         ON CONFLICT (cluster, namespace, controller, job, build) DO UPDATE SET {} \
         WHERE {RUN_Q} OR {RUN_S} OR {RUN_F}",
        set.join(", ")
    )
}

/// A stage: a `stage_finished` (`EXCLUDED.result` set) writes name, result, duration and its
/// start time if it has one; otherwise only what the row does not know yet is filled in.
const STAGES_SQL: &str = "INSERT INTO stages AS s (cluster, namespace, controller, job, build, stage_id, \
                                        name, started_at, result, duration_ms) \
     SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[], $6::text[], \
                          $7::text[], $8::timestamptz[], $9::text[], $10::int8[]) \
     ON CONFLICT (cluster, namespace, controller, job, build, stage_id) DO UPDATE SET \
         name = CASE WHEN EXCLUDED.result IS NOT NULL OR s.result IS NULL THEN EXCLUDED.name ELSE s.name END, \
         started_at = CASE WHEN EXCLUDED.result IS NOT NULL THEN COALESCE(EXCLUDED.started_at, s.started_at) \
                           WHEN s.result IS NOT NULL THEN COALESCE(s.started_at, EXCLUDED.started_at) \
                           ELSE LEAST(s.started_at, EXCLUDED.started_at) END, \
         result = COALESCE(EXCLUDED.result, s.result), \
         duration_ms = CASE WHEN EXCLUDED.result IS NOT NULL THEN EXCLUDED.duration_ms ELSE s.duration_ms END \
     WHERE EXCLUDED.result IS NOT NULL OR s.result IS NULL OR s.started_at IS NULL";

const TESTS_SQL: &str = "INSERT INTO test_summaries AS t (cluster, namespace, controller, job, build, \
                                               total, failed, skipped, duration_ms, event_time) \
     SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[], \
                          $6::int8[], $7::int8[], $8::int8[], $9::int8[], $10::timestamptz[]) \
     ON CONFLICT (cluster, namespace, controller, job, build) DO UPDATE SET \
         total = EXCLUDED.total, failed = EXCLUDED.failed, skipped = EXCLUDED.skipped, \
         duration_ms = EXCLUDED.duration_ms, event_time = EXCLUDED.event_time, recorded_at = now() \
     WHERE EXCLUDED.event_time > t.event_time";

const SCHEDULES_SQL: &str = "INSERT INTO job_schedules AS j (cluster, namespace, controller, job, schedules, event_time) \
     SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::jsonb[], $6::timestamptz[]) \
     ON CONFLICT (cluster, namespace, controller, job) DO UPDATE SET \
         schedules = EXCLUDED.schedules, event_time = EXCLUDED.event_time, recorded_at = now() \
     WHERE EXCLUDED.event_time > j.event_time";

const PROCESSED_SQL: &str = "INSERT INTO processed_events (msg_id) SELECT * FROM unnest($1::text[]) \
     ON CONFLICT (msg_id) DO NOTHING RETURNING msg_id";

/// The statements, prepared once per connection.
struct Statements {
    processed: Statement,
    runs: Statement,
    stages: Statement,
    tests: Statement,
    schedules: Statement,
}

/// Applies batches of build events over one PostgreSQL session (see the module docs).
pub struct Writer {
    client: Client,
    statements: Statements,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").field("closed", &self.client.is_closed()).finish()
    }
}

impl Writer {
    /// Prepares the statements on `client` (the schema must be migrated).
    pub async fn new(client: Client) -> Result<Writer, tokio_postgres::Error> {
        let statements = Statements {
            processed: client.prepare(PROCESSED_SQL).await?,
            runs: client.prepare(&runs_sql()).await?,
            stages: client.prepare(STAGES_SQL).await?,
            tests: client.prepare(TESTS_SQL).await?,
            schedules: client.prepare(SCHEDULES_SQL).await?,
        };
        Ok(Writer { client, statements })
    }

    /// Whether the session is gone (make a new writer).
    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// Applies `events` in one transaction; the outcome of each, in order. Nothing is written
    /// when it fails.
    pub async fn apply(&mut self, events: &[RecordedEvent]) -> Result<Vec<Outcome>, tokio_postgres::Error> {
        let ids: Vec<String> = events.iter().map(RecordedEvent::msg_id).collect();
        let mut unique: Vec<&str> = ids.iter().map(String::as_str).collect();
        unique.sort_unstable();
        unique.dedup();
        let st = &self.statements;
        let tx = self.client.transaction().await?;
        let rows = tx.query(&st.processed, &[&unique]).await?;
        let mut new: HashSet<String> = rows.iter().map(|r| r.get(0)).collect();
        let mut changes = Changes::default();
        let outcomes = events
            .iter()
            .zip(&ids)
            .map(|(event, id)| {
                if new.remove(id) {
                    changes.add(event);
                    Outcome::Applied
                } else {
                    Outcome::Duplicate
                }
            })
            .collect();
        if !changes.runs.is_empty() {
            let n = changes.runs.len();
            let mut k = RunKeys::with_capacity(n);
            let mut cell = Vec::with_capacity(n);
            let (mut trigger, mut cause, mut node) =
                (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
            let (mut queued, mut started, mut finished) =
                (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
            let (mut result, mut duration) = (Vec::with_capacity(n), Vec::with_capacity(n));
            for (key, run) in &changes.runs {
                k.push(key);
                cell.push(run.started.as_ref().map_or(run.first_cell, |s| s.3));
                queued.push(run.queued.as_ref().map(|q| q.0));
                trigger.push(run.queued.as_ref().and_then(|q| q.1.as_deref()));
                started.push(run.started.as_ref().map(|s| s.0));
                cause.push(run.started.as_ref().and_then(|s| s.1.as_deref()));
                node.push(run.started.as_ref().and_then(|s| s.2.as_deref()));
                finished.push(run.finished.as_ref().map(|f| f.0));
                result.push(run.finished.as_ref().map(|f| f.1));
                duration.push(run.finished.as_ref().map(|f| f.2));
            }
            let params: [&(dyn ToSql + Sync); 14] = [
                &k.cluster,
                &k.namespace,
                &k.controller,
                &k.job,
                &k.build,
                &cell,
                &trigger,
                &cause,
                &node,
                &queued,
                &started,
                &finished,
                &result,
                &duration,
            ];
            tx.execute(&st.runs, &params).await?;
        }
        if !changes.stages.is_empty() {
            let n = changes.stages.len();
            let mut k = RunKeys::with_capacity(n);
            let (mut id, mut name, mut started) = (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
            let (mut result, mut duration) = (Vec::with_capacity(n), Vec::with_capacity(n));
            for ((key, stage_id), stage) in &changes.stages {
                k.push(key);
                id.push(stage_id.as_str());
                match (&stage.finished, &stage.started) {
                    (Some((fname, fstarted, res, dur)), s) => {
                        name.push(fname.as_str());
                        started.push(fstarted.or(s.as_ref().map(|s| s.1)));
                        result.push(Some(*res));
                        duration.push(Some(*dur));
                    }
                    (None, Some((sname, sstarted))) => {
                        name.push(sname.as_str());
                        started.push(Some(*sstarted));
                        result.push(None);
                        duration.push(None);
                    }
                    (None, None) => unreachable!("a stage change is made by a stage event"),
                }
            }
            let params: [&(dyn ToSql + Sync); 10] =
                [&k.cluster, &k.namespace, &k.controller, &k.job, &k.build, &id, &name, &started, &result, &duration];
            tx.execute(&st.stages, &params).await?;
        }
        if !changes.tests.is_empty() {
            let n = changes.tests.len();
            let mut k = RunKeys::with_capacity(n);
            let (mut total, mut failed, mut skipped) =
                (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
            let (mut duration, mut time) = (Vec::with_capacity(n), Vec::with_capacity(n));
            for (key, (at, (tt, f, sk, d))) in &changes.tests {
                k.push(key);
                total.push(*tt);
                failed.push(*f);
                skipped.push(*sk);
                duration.push(*d);
                time.push(*at);
            }
            let params: [&(dyn ToSql + Sync); 10] = [
                &k.cluster,
                &k.namespace,
                &k.controller,
                &k.job,
                &k.build,
                &total,
                &failed,
                &skipped,
                &duration,
                &time,
            ];
            tx.execute(&st.tests, &params).await?;
        }
        if !changes.schedules.is_empty() {
            let n = changes.schedules.len();
            let (mut cl, mut ns, mut ct, mut jb) =
                (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
            let (mut value, mut time) = (Vec::with_capacity(n), Vec::with_capacity(n));
            for ((c, s, t, j), (at, v)) in &changes.schedules {
                cl.push(c.as_str());
                ns.push(s.as_str());
                ct.push(t.as_str());
                jb.push(j.as_str());
                value.push(v);
                time.push(*at);
            }
            let params: [&(dyn ToSql + Sync); 6] = [&cl, &ns, &ct, &jb, &value, &time];
            tx.execute(&st.schedules, &params).await?;
        }
        tx.commit().await?;
        Ok(outcomes)
    }
}

/// The key columns of a run (cluster, namespace, controller, job, build), as arrays.
struct RunKeys<'a> {
    cluster: Vec<&'a str>,
    namespace: Vec<&'a str>,
    controller: Vec<&'a str>,
    job: Vec<&'a str>,
    build: Vec<i64>,
}

impl<'a> RunKeys<'a> {
    fn with_capacity(n: usize) -> Self {
        RunKeys {
            cluster: Vec::with_capacity(n),
            namespace: Vec::with_capacity(n),
            controller: Vec::with_capacity(n),
            job: Vec::with_capacity(n),
            build: Vec::with_capacity(n),
        }
    }

    fn push(&mut self, key: &'a RunKey) {
        self.cluster.push(&key.0);
        self.namespace.push(&key.1);
        self.controller.push(&key.2);
        self.job.push(&key.3);
        self.build.push(key.4);
    }
}
