//! The build claims ledger (docs/varroa/data-plane.md, "Build claims"; the shapes are
//! `varroa_link::claims`).
//!
//! - **On the bus.** Every recorder replica subscribes `varroa.claims.>` in the queue group
//!   `varroa-ledger`, so each request reaches one replica. A request is a JSON
//!   [`LedgerRequest`] (at most [`MAX_REQUEST_BYTES`]), checked field by field ([`parse`]) and
//!   against the subject it came on ([`LedgerRequest::validate`]); a malformed one is answered
//!   `rejected` naming the field, counted and logged. A request without a reply subject cannot be
//!   answered: it is counted (`dropped`) and dropped. At most `max_in_flight` decisions run at
//!   once; beyond that the answer is `retry` after [`BUSY_RETRY`].
//! - **The decision** ([`decide`]) is one PostgreSQL transaction: the claim's id or its trigger
//!   already in `claims` gives the same answer again (granted with the same build to the claim
//!   that holds it; refused, naming the holder's cell, to any other claim of that trigger, even
//!   from the same cell: a trigger runs once); otherwise the job's next number is taken from
//!   `claim_sequences` (`INSERT ... ON CONFLICT DO UPDATE SET last_build = last_build + 1`) and the
//!   claim inserted (`ON CONFLICT DO NOTHING`), in the same statement. A number is only used when
//!   that transaction commits, so the numbers of a job are gap-free across every cell and every
//!   replica. Two claims racing for one trigger: the second waits for the first's row, inserts
//!   nothing, rolls back (giving its number back) and reads again: refused.
//! - **The budget.** A request's `budget_ms` is what is left of the plugin's wait. The ledger
//!   keeps a share of it for its answer ([`varroa_link::claims::forward_budget`]) and decides in
//!   the rest (the wait for a session, a `statement_timeout` in the transaction and a timeout
//!   around all of it); what is not decided by then is rolled back and answered `retry`.
//! - **PostgreSQL down.** The sessions ([`Pool`]) are made on demand; after a failed connection
//!   the pool does not try again for a back-off (100 ms doubling to 2 s), and answers at once
//!   meanwhile, so every claim is answered `retry` promptly while PostgreSQL is away, and granted
//!   again once it is back.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;
use tokio_postgres::{Client, Statement};
use varroa_link::claims::{self, ClaimError, LedgerAnswer, LedgerRequest};

use crate::db::DbSettings;
use crate::ingest::{ErrorClass, classify};
use crate::metrics::Metrics;

/// The largest request read (a [`LedgerRequest`] with the longest id, job and trigger in 4-byte
/// characters is under 4 KiB of JSON).
pub const MAX_REQUEST_BYTES: usize = 8 * 1024;
/// The `retry` delay when PostgreSQL is away or failing.
pub const DOWN_RETRY: Duration = Duration::from_millis(1000);
/// The `retry` delay when the decision did not fit the budget.
pub const SLOW_RETRY: Duration = Duration::from_millis(500);
/// The `retry` delay when too many decisions are in flight.
pub const BUSY_RETRY: Duration = Duration::from_millis(200);
/// How often a claim whose insert met a concurrent one is read again before it is answered
/// `retry` (one re-read always settles it; this only bounds a pathological case).
const ATTEMPTS: u32 = 4;

/// How the ledger runs.
#[derive(Debug, Clone)]
pub struct LedgerSettings {
    /// PostgreSQL sessions the ledger keeps (decisions beyond that wait for one, within their
    /// budget).
    pub connections: usize,
    /// Decisions in flight at once; beyond that a claim is answered `retry`.
    pub max_in_flight: usize,
}

impl Default for LedgerSettings {
    fn default() -> Self {
        LedgerSettings { connections: 16, max_in_flight: 64 }
    }
}

fn err(field: &str, reason: impl Into<String>) -> ClaimError {
    ClaimError { field: field.to_owned(), reason: reason.into() }
}

/// Parses a request, naming the field that is wrong (fields it does not know are ignored). The
/// fields' values are checked by [`LedgerRequest::validate`].
pub fn parse(bytes: &[u8]) -> Result<LedgerRequest, ClaimError> {
    if bytes.len() > MAX_REQUEST_BYTES {
        return Err(err("request", format!("larger than {MAX_REQUEST_BYTES} bytes")));
    }
    let raw: Value = serde_json::from_slice(bytes).map_err(|e| err("request", format!("not JSON: {e}")))?;
    let Some(obj) = raw.as_object() else {
        return Err(err("request", "must be a JSON object"));
    };
    for field in ["cluster", "namespace", "controller", "cell", "id", "job", "trigger", "budget_ms"] {
        let Some(v) = obj.get(field) else {
            return Err(err(field, "missing"));
        };
        let ok = match field {
            "cell" => v.as_u64().is_some_and(|n| u32::try_from(n).is_ok()),
            "budget_ms" => v.is_u64(),
            _ => v.is_string(),
        };
        if !ok {
            let want = match field {
                "cell" => "an integer 0 to 4294967295",
                "budget_ms" => "a non-negative integer",
                _ => "a string",
            };
            return Err(err(field, format!("must be {want}")));
        }
    }
    serde_json::from_value(raw).map_err(|e| err("request", e.to_string()))
}

/// What PostgreSQL decided for a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// A new grant: the job's next number.
    Granted(u64),
    /// This claim was granted before, with this number.
    Repeated(u64),
    /// Another claim holds the trigger; the holder's cell.
    Refused(u32),
    /// The claim id was granted for another job or trigger (a claim id names one queue item).
    Rejected(String),
    /// The insert met concurrent claims [`ATTEMPTS`] times.
    Contended,
}

impl Decision {
    /// The `decision` label of `varroa_recorder_claims_total`.
    pub fn label(&self) -> &'static str {
        match self {
            Decision::Granted(_) => "granted",
            Decision::Repeated(_) => "repeated",
            Decision::Refused(_) => "refused",
            Decision::Rejected(_) => "rejected",
            Decision::Contended => "retry",
        }
    }

    /// The answer on the bus.
    pub fn answer(&self) -> LedgerAnswer {
        match self {
            Decision::Granted(b) | Decision::Repeated(b) => LedgerAnswer::Granted { build: *b },
            Decision::Refused(holder) => LedgerAnswer::Refused { holder: *holder },
            Decision::Rejected(e) => LedgerAnswer::Rejected { error: e.clone() },
            Decision::Contended => retry(SLOW_RETRY, "the claim met concurrent claims of its trigger; ask again"),
        }
    }
}

fn retry(after: Duration, reason: impl Into<String>) -> LedgerAnswer {
    let after = after.clamp(claims::MIN_RETRY_AFTER, claims::MAX_RETRY_AFTER);
    LedgerAnswer::Retry { after_ms: after.as_millis() as u64, reason: reason.into() }
}

/// The claim's id and trigger as stored: `claim_id, job, trigger, cell, build` of the rows
/// holding the id or the trigger (at most two).
const READ_SQL: &str = "SELECT claim_id, job, trigger, cell, build FROM claims \
     WHERE cluster = $1 AND namespace = $2 AND controller = $3 \
       AND (claim_id = $4 OR (job = $5 AND trigger = $6))";

/// The job's next number and the claim, in one statement: no row when the claim's trigger or id
/// was inserted by a concurrent transaction (which this one waited for).
const GRANT_SQL: &str = "WITH seq AS ( \
         INSERT INTO claim_sequences AS s (cluster, namespace, controller, job, last_build) \
         VALUES ($1, $2, $3, $5, 1) \
         ON CONFLICT (cluster, namespace, controller, job) DO UPDATE SET last_build = s.last_build + 1 \
         RETURNING last_build \
     ) \
     INSERT INTO claims (cluster, namespace, controller, job, trigger, claim_id, cell, build) \
     SELECT $1, $2, $3, $5, $6, $4, $7, last_build FROM seq \
     ON CONFLICT DO NOTHING \
     RETURNING build";

/// A PostgreSQL session of the ledger, with its statements prepared.
pub struct Session {
    client: Client,
    read: Statement,
    grant: Statement,
}

impl Session {
    /// Prepares the ledger's statements on `client`.
    pub async fn new(client: Client) -> Result<Session, tokio_postgres::Error> {
        let read = client.prepare(READ_SQL).await?;
        let grant = client.prepare(GRANT_SQL).await?;
        Ok(Session { client, read, grant })
    }

    /// Whether the connection is gone.
    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }
}

/// Decides `req` in PostgreSQL (see the module docs); every statement is bounded by
/// `statement_timeout`. The session is left outside any transaction on success and on an error
/// PostgreSQL returned; after any error it is safest dropped.
pub async fn decide(
    s: &Session,
    req: &LedgerRequest,
    statement_timeout: Duration,
) -> Result<Decision, tokio_postgres::Error> {
    let ms = statement_timeout.as_millis().clamp(1, i32::MAX as u128);
    let begin = format!("BEGIN; SET LOCAL statement_timeout = {ms}");
    let cell = i32::try_from(req.cell).unwrap_or(i32::MAX);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let key: [&(dyn tokio_postgres::types::ToSql + Sync); 6] =
            [&req.cluster, &req.namespace, &req.controller, &req.id, &req.job, &req.trigger];
        // BEGIN and the read go out together (one round trip).
        let (began, rows) = tokio::join!(s.client.batch_execute(&begin), s.client.query(&s.read, &key));
        let outcome = async {
            began?;
            let rows = rows?;
            if let Some(d) = settled(req, &rows) {
                return Ok(Some(d));
            }
            let granted = s
                .client
                .query_opt(
                    &s.grant,
                    &[&req.cluster, &req.namespace, &req.controller, &req.id, &req.job, &req.trigger, &cell],
                )
                .await?;
            Ok(granted.map(|r| Decision::Granted(r.get::<_, i64>(0) as u64)))
        }
        .await;
        match outcome {
            Ok(Some(Decision::Granted(b))) => {
                s.client.batch_execute("COMMIT").await?;
                return Ok(Decision::Granted(b));
            }
            Ok(Some(d)) => {
                s.client.batch_execute("ROLLBACK").await?;
                return Ok(d);
            }
            Ok(None) => {
                // A concurrent claim of this trigger (or id) committed first: give the number
                // back and read what it decided.
                s.client.batch_execute("ROLLBACK").await?;
            }
            Err(e) if classify(&e) == ErrorClass::Retry => {
                s.client.batch_execute("ROLLBACK").await?;
                tracing::debug!(error = %e, attempt, "claim transaction conflict; deciding again");
            }
            Err(e) => {
                let _ = s.client.batch_execute("ROLLBACK").await;
                return Err(e);
            }
        }
        if attempt >= ATTEMPTS {
            return Ok(Decision::Contended);
        }
    }
}

/// The answer the stored rows already give, if any.
fn settled(req: &LedgerRequest, rows: &[tokio_postgres::Row]) -> Option<Decision> {
    let rows: Vec<(String, String, String, i32, i64)> =
        rows.iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4))).collect();
    if let Some((_, job, trigger, cell, build)) = rows.iter().find(|r| r.0 == req.id) {
        if *job != req.job || *trigger != req.trigger {
            return Some(Decision::Rejected(
                err(
                    "id",
                    format!(
                        "claim {:?} was granted for job {job:?} trigger {trigger:?} (build {build}); a claim id names one queue item",
                        req.id
                    ),
                )
                .to_string(),
            ));
        }
        return Some(if *cell as u32 == req.cell {
            Decision::Repeated(*build as u64)
        } else {
            Decision::Refused(*cell as u32)
        });
    }
    rows.first().map(|(_, _, _, cell, _)| Decision::Refused(*cell as u32))
}

/// Why no session could be had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolError {
    /// Every session is in use until the deadline.
    Busy,
    /// PostgreSQL cannot be reached (the last reason).
    Down(String),
}

struct Gate {
    /// No connection is tried before this, after a failure.
    closed_until: Option<Instant>,
    backoff: Duration,
    last_error: String,
}

/// The ledger's PostgreSQL sessions: at most `size`, made on demand, a lost one replaced on the
/// next use; after a failed connection no new one is tried for a back-off (see the module docs).
pub struct Pool {
    db: DbSettings,
    idle: std::sync::Mutex<Vec<Session>>,
    slots: Semaphore,
    gate: std::sync::Mutex<Gate>,
}

/// A session taken from the [`Pool`]: it goes back with [`Lease::release`]; dropped otherwise
/// (an error or a timeout may have left it inside a transaction).
pub struct Lease<'a> {
    pool: &'a Pool,
    session: Option<Session>,
    _slot: tokio::sync::SemaphorePermit<'a>,
}

impl Lease<'_> {
    /// The session.
    pub fn session(&self) -> &Session {
        self.session.as_ref().expect("a lease holds its session until released")
    }

    /// Gives the session back for the next decision.
    pub fn release(mut self) {
        if let Some(s) = self.session.take()
            && !s.is_closed()
            && let Ok(mut idle) = self.pool.idle.lock()
        {
            idle.push(s);
        }
    }
}

const GATE_FIRST: Duration = Duration::from_millis(100);
const GATE_MAX: Duration = Duration::from_secs(2);

impl Pool {
    /// A pool of at most `size` sessions on `db`.
    pub fn new(db: DbSettings, size: usize) -> Pool {
        Pool {
            db,
            idle: std::sync::Mutex::new(Vec::new()),
            slots: Semaphore::new(size.max(1)),
            gate: std::sync::Mutex::new(Gate { closed_until: None, backoff: GATE_FIRST, last_error: String::new() }),
        }
    }

    /// A session, by `deadline`.
    pub async fn get(&self, deadline: Instant) -> Result<Lease<'_>, PoolError> {
        let slot = match tokio::time::timeout_at(deadline, self.slots.acquire()).await {
            Ok(Ok(p)) => p,
            _ => return Err(PoolError::Busy),
        };
        loop {
            let s = self.idle.lock().ok().and_then(|mut i| i.pop());
            match s {
                Some(s) if s.is_closed() => continue,
                Some(s) => return Ok(Lease { pool: self, session: Some(s), _slot: slot }),
                None => break,
            }
        }
        if let Ok(g) = self.gate.lock()
            && let Some(until) = g.closed_until
            && Instant::now() < until
        {
            return Err(PoolError::Down(g.last_error.clone()));
        }
        let made = tokio::time::timeout_at(deadline, async {
            let client = self.db.connect().await.map_err(|e| e.to_string())?;
            Session::new(client).await.map_err(|e| format!("preparing the ledger's statements: {e}"))
        })
        .await
        .unwrap_or_else(|_| Err("PostgreSQL did not accept a connection within the budget".into()));
        let mut g = self.gate.lock().unwrap_or_else(|e| e.into_inner());
        match made {
            Ok(s) => {
                g.closed_until = None;
                g.backoff = GATE_FIRST;
                Ok(Lease { pool: self, session: Some(s), _slot: slot })
            }
            Err(e) => {
                g.closed_until = Some(Instant::now() + g.backoff);
                g.backoff = (g.backoff * 2).min(GATE_MAX);
                g.last_error = e.clone();
                Err(PoolError::Down(e))
            }
        }
    }
}

/// What the ledger reports for readiness.
#[derive(Debug, Default)]
pub struct LedgerHealth {
    /// Subscribed to `varroa.claims.>`.
    pub subscribed: AtomicBool,
}

/// What the ledger task needs.
pub(crate) struct LedgerContext {
    pub nats: async_nats::Client,
    pub metrics: Arc<Metrics>,
    pub pool: Arc<Pool>,
    pub settings: LedgerSettings,
    pub schema: watch::Receiver<bool>,
    pub stop: watch::Receiver<bool>,
}

/// Answers claims until `cx.stop`, then waits (a few seconds at most) for the decisions in
/// flight.
pub(crate) async fn run(cx: LedgerContext, health: Arc<LedgerHealth>) {
    let in_flight = Arc::new(Semaphore::new(cx.settings.max_in_flight.max(1)));
    let mut stop = cx.stop.clone();
    let mut backoff = crate::consumer::Backoff::new();
    let subject = format!("{}.>", claims::SUBJECT_PREFIX);
    while !*stop.borrow() {
        let mut sub = match cx.nats.queue_subscribe(subject.clone(), claims::QUEUE_GROUP.to_owned()).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, %subject, "cannot subscribe the claims subject; retrying");
                cx.metrics.nats_error("claims");
                crate::consumer::sleep_or_stop(backoff.next(), &mut stop).await;
                continue;
            }
        };
        // The server has the subscription before the ledger says it is ready.
        if let Err(e) = cx.nats.flush().await {
            tracing::debug!(error = %e, "flush after subscribing");
        }
        tracing::info!(%subject, queue = claims::QUEUE_GROUP, "answering build claims");
        health.subscribed.store(true, Ordering::Relaxed);
        backoff.reset();
        loop {
            let msg = tokio::select! {
                m = sub.next() => m,
                _ = stop.wait_for(|s| *s) => break,
            };
            let Some(msg) = msg else {
                tracing::warn!("the claims subscription ended; subscribing again");
                cx.metrics.nats_error("claims");
                break;
            };
            handle(&cx, &in_flight, msg);
        }
        health.subscribed.store(false, Ordering::Relaxed);
        let _ = sub.unsubscribe().await;
        if !*stop.borrow() {
            crate::consumer::sleep_or_stop(backoff.next(), &mut stop).await;
        }
    }
    let all = cx.settings.max_in_flight.max(1) as u32;
    let _ = tokio::time::timeout(Duration::from_secs(5), in_flight.acquire_many(all)).await;
}

fn handle(cx: &LedgerContext, in_flight: &Arc<Semaphore>, msg: async_nats::Message) {
    let received = Instant::now();
    let Some(reply) = msg.reply.clone() else {
        tracing::warn!(subject = %msg.subject, "a claim without a reply subject cannot be answered; dropped");
        cx.metrics.claim("dropped", None);
        return;
    };
    let req = parse(&msg.payload).and_then(|r| r.validate(msg.subject.as_str()).map(|()| r));
    let req = match req {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(subject = %msg.subject, error = %e, "malformed claim rejected");
            answer(cx, reply, &LedgerAnswer::Rejected { error: e.to_string() }, "rejected", received);
            return;
        }
    };
    let Ok(permit) = in_flight.clone().try_acquire_owned() else {
        let a = retry(BUSY_RETRY, format!("the ledger has {} decisions in flight", cx.settings.max_in_flight));
        answer(cx, reply, &a, "retry", received);
        return;
    };
    if !*cx.schema.borrow() {
        answer(
            cx,
            reply,
            &retry(DOWN_RETRY, "the ledger's schema is being migrated (is PostgreSQL reachable?)"),
            "retry",
            received,
        );
        return;
    }
    let (nats, metrics, pool) = (cx.nats.clone(), cx.metrics.clone(), cx.pool.clone());
    tokio::spawn(async move {
        let (a, label) = decide_in_budget(&pool, &metrics, &req, received).await;
        if matches!(a, LedgerAnswer::Retry { .. } | LedgerAnswer::Rejected { .. }) {
            tracing::debug!(id = %req.id, job = %req.job, answer = ?a, "claim not granted");
        }
        answer_with(&nats, &metrics, reply, &a, label, received).await;
        drop(permit);
    });
}

/// Decides within the request's budget (less the ledger's share for its answer).
pub(crate) async fn decide_in_budget(
    pool: &Pool,
    metrics: &Metrics,
    req: &LedgerRequest,
    received: Instant,
) -> (LedgerAnswer, &'static str) {
    let budget = Duration::from_millis(req.budget_ms).min(claims::MAX_BUDGET);
    let within = claims::forward_budget(budget).unwrap_or(budget / 2);
    let deadline = received + within;
    let decided = tokio::time::timeout_at(deadline, async {
        let lease = pool.get(deadline).await?;
        // PostgreSQL gives up a little before the deadline, so the session stays usable.
        let left = deadline.saturating_duration_since(Instant::now()).saturating_sub(Duration::from_millis(5));
        match decide(lease.session(), req, left.max(Duration::from_millis(1))).await {
            Ok(d) => {
                lease.release();
                Ok(d)
            }
            Err(e) => Err(PoolError::Down(e.to_string())),
        }
    })
    .await;
    match decided {
        Ok(Ok(d)) => (d.answer(), d.label()),
        Ok(Err(PoolError::Busy)) => (
            retry(SLOW_RETRY, format!("no PostgreSQL session free within the budget ({} ms)", within.as_millis())),
            "retry",
        ),
        Ok(Err(PoolError::Down(e))) => {
            metrics.pg_error("claims");
            tracing::warn!(error = %e, "the ledger cannot decide: PostgreSQL failed");
            (retry(DOWN_RETRY, format!("the ledger's database failed: {e}")), "retry")
        }
        Err(_) => {
            metrics.pg_error("claims");
            (
                retry(SLOW_RETRY, format!("PostgreSQL did not decide within the budget ({} ms)", within.as_millis())),
                "retry",
            )
        }
    }
}

fn answer(cx: &LedgerContext, reply: async_nats::Subject, a: &LedgerAnswer, label: &'static str, received: Instant) {
    let (nats, metrics, a) = (cx.nats.clone(), cx.metrics.clone(), a.clone());
    tokio::spawn(async move { answer_with(&nats, &metrics, reply, &a, label, received).await });
}

async fn answer_with(
    nats: &async_nats::Client,
    metrics: &Metrics,
    reply: async_nats::Subject,
    a: &LedgerAnswer,
    label: &'static str,
    received: Instant,
) {
    let body = serde_json::to_vec(a).unwrap_or_default();
    if let Err(e) = nats.publish(reply, body.into()).await {
        tracing::warn!(error = %e, "cannot send a claim's answer");
        metrics.nats_error("claims");
    }
    metrics.claim(label, Some(received.elapsed().as_secs_f64()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_naming_the_field() {
        let good = r#"{"cluster":"prod","namespace":"team-a","controller":"ci","cell":1,"id":"q-1","job":"app","trigger":"timer:1","budget_ms":4000,"later":true}"#;
        let r = parse(good.as_bytes()).unwrap();
        assert_eq!((r.cell, r.budget_ms), (1, 4000));
        for (body, field) in [
            ("nope", "request"),
            ("[1]", "request"),
            (
                r#"{"namespace":"team-a","controller":"ci","cell":1,"id":"q","job":"a","trigger":"t","budget_ms":1}"#,
                "cluster",
            ),
            (
                r#"{"cluster":"p","namespace":"team-a","controller":"ci","cell":-1,"id":"q","job":"a","trigger":"t","budget_ms":1}"#,
                "cell",
            ),
            (
                r#"{"cluster":"p","namespace":"team-a","controller":"ci","cell":1,"id":7,"job":"a","trigger":"t","budget_ms":1}"#,
                "id",
            ),
            (
                r#"{"cluster":"p","namespace":"team-a","controller":"ci","cell":1,"id":"q","job":"a","trigger":"t","budget_ms":"5"}"#,
                "budget_ms",
            ),
        ] {
            assert_eq!(parse(body.as_bytes()).unwrap_err().field, field, "{body}");
        }
        assert_eq!(parse(&vec![b' '; MAX_REQUEST_BYTES + 1]).unwrap_err().field, "request");
    }

    #[test]
    fn retries_ask_for_a_delay_in_range() {
        let LedgerAnswer::Retry { after_ms, .. } = retry(Duration::ZERO, "x") else { panic!() };
        assert_eq!(after_ms, claims::MIN_RETRY_AFTER.as_millis() as u64);
        for d in [DOWN_RETRY, SLOW_RETRY, BUSY_RETRY] {
            assert!((claims::MIN_RETRY_AFTER..=claims::MAX_RETRY_AFTER).contains(&d));
        }
    }
}
