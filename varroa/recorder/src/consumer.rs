//! The loop that drains a stream into PostgreSQL, the same for `varroa_builds` and
//! `varroa_activity`.
//!
//! - One durable pull consumer per stream, [`CONSUMER`], shared by every recorder replica:
//!   each replica's pull requests take the next messages not yet handed to anyone, so replicas
//!   split the work without coordinating. Nothing relies on the order messages are applied in.
//! - A pull request asks for up to `--batch-size` messages and expires after [`FETCH_EXPIRES`];
//!   what arrives is applied as soon as no further message comes within [`LINGER`] (or the batch
//!   is full), so a quiet stream is recorded within milliseconds and a busy one in full batches.
//! - A message that cannot be decoded or checked is terminated (`AckKind::Term`): counted,
//!   logged with its reason, never redelivered. The others of its batch are applied.
//! - A batch is applied in one transaction; every message of it is acknowledged after the
//!   commit (at least once: a kill between commit and acknowledgement only brings a redelivery
//!   that the processed ids turn into a no-op).
//! - A PostgreSQL error: nothing is acknowledged, the batch is negatively acknowledged with a
//!   delay, the session is dropped, and the loop backs off and reconnects, forever. A deadlock
//!   or serialization failure is retried at once; an error about the data itself (a value
//!   PostgreSQL cannot hold) is narrowed down to the message by applying the batch one by one,
//!   and only that message is terminated.
//! - On shutdown the pull request in hand is finished (what it brings is applied and
//!   acknowledged), then the loop ends.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, AckKind, consumer::PullConsumer};
use futures::StreamExt;
use tokio::sync::watch;
use varroa_link::activity::ActivityEvent;
use varroa_link::builds::RecordedEvent;

use crate::activity::{self, ActivityWriter, Inserted};
use crate::db::DbSettings;
use crate::ingest::{self, ErrorClass, Outcome, Writer, classify};
use crate::metrics::Metrics;

/// The durable consumer's name on both streams.
pub const CONSUMER: &str = "varroa-recorder";
/// How long a pull request waits for messages.
pub const FETCH_EXPIRES: Duration = Duration::from_secs(1);
/// How long a partial batch waits for one more message before it is applied.
pub const LINGER: Duration = Duration::from_millis(5);
/// The most messages delivered and not yet acknowledged, over all replicas.
pub const MAX_ACK_PENDING: i64 = 10_000;
/// The delay before JetStream redelivers a batch PostgreSQL did not take.
pub const NAK_DELAY: Duration = Duration::from_secs(1);
/// How long one batch may take in PostgreSQL before its session is given up.
pub const APPLY_TIMEOUT: Duration = Duration::from_secs(60);
/// Deadlocks and serialization failures retried before a batch is given back.
const RETRIES: u32 = 3;
/// How often the consumer's backlog is read for `varroa_recorder_consumer_pending`.
const PENDING_EVERY: Duration = Duration::from_secs(10);

/// The settings of the consumers.
#[derive(Debug, Clone)]
pub struct ConsumerSettings {
    /// The most messages in one pull request and one transaction.
    pub batch_size: usize,
    /// How long JetStream waits for an acknowledgement before it redelivers.
    pub ack_wait: Duration,
    /// JetStream replicas of the streams when the recorder creates them.
    pub stream_replicas: usize,
}

/// The consumer's configuration (the same from every replica).
pub fn consumer_config(stream: &str, ack_wait: Duration) -> jetstream::consumer::pull::Config {
    jetstream::consumer::pull::Config {
        durable_name: Some(CONSUMER.to_owned()),
        description: Some(format!("varroa-recorder: {stream} into PostgreSQL; every replica pulls from it")),
        deliver_policy: jetstream::consumer::DeliverPolicy::All,
        ack_policy: jetstream::consumer::AckPolicy::Explicit,
        ack_wait,
        // PostgreSQL may be away for long: redeliver until it is back.
        max_deliver: -1,
        max_ack_pending: MAX_ACK_PENDING,
        ..Default::default()
    }
}

/// What a loop reports for readiness.
#[derive(Debug, Default)]
pub struct Health {
    /// Its PostgreSQL session is up (and its last use worked).
    pub pg: AtomicBool,
    /// Its stream and consumer are open.
    pub consumer: AtomicBool,
}

/// One stream's flow into PostgreSQL.
pub(crate) trait Sink: Send + Sync + 'static {
    type Item: Send + Sync;
    type Writer: Send;
    /// The stream.
    const STREAM: &'static str;
    /// The operation label of its PostgreSQL errors.
    const OPERATION: &'static str;
    fn stream_config(replicas: usize) -> jetstream::stream::Config;
    /// Decodes one message; `Err((kind label, reason))`.
    fn decode(subject: &str, payload: &[u8]) -> Result<Self::Item, (&'static str, String)>;
    fn writer(
        client: tokio_postgres::Client,
    ) -> impl Future<Output = Result<Self::Writer, tokio_postgres::Error>> + Send;
    /// Applies `items` in one transaction; for each, whether it was new.
    fn apply<'a>(
        writer: &'a mut Self::Writer,
        items: &'a [Self::Item],
    ) -> impl Future<Output = Result<Vec<bool>, tokio_postgres::Error>> + Send + 'a;
    fn count(metrics: &Metrics, item: &Self::Item, new: bool);
    /// The kind label of an item.
    fn kind(item: &Self::Item) -> &'static str;
    fn count_malformed(metrics: &Metrics, kind: &'static str);
    /// Whether the writer's session is gone.
    fn closed(writer: &Self::Writer) -> bool;
}

/// `varroa_builds` into runs, stages, test summaries and job schedules.
pub(crate) struct Builds;

impl Sink for Builds {
    type Item = RecordedEvent;
    type Writer = Writer;
    const STREAM: &'static str = varroa_link::builds::STREAM;
    const OPERATION: &'static str = "builds";
    fn stream_config(replicas: usize) -> jetstream::stream::Config {
        varroa_link::builds::stream_config(replicas)
    }
    fn decode(subject: &str, payload: &[u8]) -> Result<RecordedEvent, (&'static str, String)> {
        ingest::decode(subject, payload).map_err(|m| (m.kind, m.reason))
    }
    async fn writer(client: tokio_postgres::Client) -> Result<Writer, tokio_postgres::Error> {
        Writer::new(client).await
    }
    async fn apply<'a>(writer: &'a mut Writer, items: &'a [RecordedEvent]) -> Result<Vec<bool>, tokio_postgres::Error> {
        Ok(writer.apply(items).await?.into_iter().map(|o| o == Outcome::Applied).collect())
    }
    fn count(metrics: &Metrics, item: &RecordedEvent, new: bool) {
        metrics.event(item.event.body.kind(), if new { "applied" } else { "duplicate" }, 1);
    }
    fn kind(item: &RecordedEvent) -> &'static str {
        item.event.body.kind()
    }
    fn count_malformed(metrics: &Metrics, kind: &'static str) {
        metrics.event(kind, "malformed", 1);
    }
    fn closed(writer: &Writer) -> bool {
        writer.is_closed()
    }
}

/// `varroa_activity` into the activity table.
pub(crate) struct Activity;

impl Sink for Activity {
    type Item = ActivityEvent;
    type Writer = ActivityWriter;
    const STREAM: &'static str = varroa_link::activity::STREAM;
    const OPERATION: &'static str = "activity";
    fn stream_config(replicas: usize) -> jetstream::stream::Config {
        varroa_link::activity::stream_config(replicas)
    }
    fn decode(subject: &str, payload: &[u8]) -> Result<ActivityEvent, (&'static str, String)> {
        activity::decode(subject, payload).map_err(|m| ("activity", m.0))
    }
    async fn writer(client: tokio_postgres::Client) -> Result<ActivityWriter, tokio_postgres::Error> {
        ActivityWriter::new(client).await
    }
    async fn apply<'a>(
        writer: &'a mut ActivityWriter,
        items: &'a [ActivityEvent],
    ) -> Result<Vec<bool>, tokio_postgres::Error> {
        Ok(writer.insert(items).await?.into_iter().map(|o| o == Inserted::New).collect())
    }
    fn count(metrics: &Metrics, _item: &ActivityEvent, new: bool) {
        metrics.activity(if new { "inserted" } else { "duplicate" }, 1);
    }
    fn kind(_item: &ActivityEvent) -> &'static str {
        "activity"
    }
    fn count_malformed(metrics: &Metrics, _kind: &'static str) {
        metrics.activity("malformed", 1);
    }
    fn closed(writer: &ActivityWriter) -> bool {
        writer.is_closed()
    }
}

/// What a loop shares with the rest of the recorder.
#[derive(Clone)]
pub(crate) struct Context {
    pub metrics: Arc<Metrics>,
    pub db: DbSettings,
    pub js: jetstream::Context,
    pub nats: async_nats::Client,
    pub connects: watch::Receiver<u64>,
    pub stop: watch::Receiver<bool>,
    pub schema: watch::Receiver<bool>,
    pub settings: ConsumerSettings,
}

/// Exponential back-off from 100 ms to 5 s.
pub(crate) struct Backoff(Duration);

impl Backoff {
    pub(crate) fn new() -> Backoff {
        Backoff(Duration::from_millis(100))
    }
    pub(crate) fn reset(&mut self) {
        self.0 = Duration::from_millis(100);
    }
    /// The wait before the next attempt (and doubles the one after).
    pub(crate) fn next(&mut self) -> Duration {
        let d = self.0;
        self.0 = (self.0 * 2).min(Duration::from_secs(5));
        d
    }
}

/// Sleeps `d`, or less when `stop` turns true; whether it was stopped.
pub(crate) async fn sleep_or_stop(d: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    let stopped = tokio::select! {
        _ = tokio::time::sleep(d) => None,
        _ = stop.wait_for(|s| *s) => Some(true),
    };
    stopped.unwrap_or_else(|| *stop.borrow())
}

async fn open_consumer<S: Sink>(cx: &Context) -> Result<PullConsumer, String> {
    let stream =
        cx.js.get_or_create_stream(S::stream_config(cx.settings.stream_replicas)).await.map_err(|e| e.to_string())?;
    stream.create_consumer(consumer_config(S::STREAM, cx.settings.ack_wait)).await.map_err(|e| e.to_string())
}

/// Connects a session for a loop: the session settings, then the writer's statements.
pub(crate) async fn session(db: &DbSettings) -> Result<tokio_postgres::Client, String> {
    let client = db.connect().await.map_err(|e| e.to_string())?;
    // A statement stuck behind a lock or a slow disk is given up, and the batch redelivered.
    client
        .batch_execute("SET statement_timeout = '30s'; SET idle_in_transaction_session_timeout = '60s'")
        .await
        .map_err(|e| e.to_string())?;
    Ok(client)
}

enum Next {
    Message(Box<jetstream::Message>),
    /// The pull request ended (expired, fulfilled, or its subscription closed).
    End,
    /// A status that ends the pull request (the consumer was deleted, ...).
    Error(String),
    /// A partial batch waited long enough.
    Flush,
    /// Shutdown was asked for.
    Stop,
    /// NATS reconnected: the pull request is gone with the old connection.
    Reconnected,
}

/// Drains `S::STREAM` until `cx.stop` (see the module docs).
pub(crate) async fn run<S: Sink>(cx: Context, health: Arc<Health>) {
    let mut stop = cx.stop.clone();
    let mut schema = cx.schema.clone();
    tokio::select! {
        r = schema.wait_for(|ready| *ready) => if r.is_err() { return },
        _ = stop.wait_for(|s| *s) => return,
    }
    let mut connects = cx.connects.clone();
    let mut backoff = Backoff::new();
    let mut writer: Option<S::Writer> = None;
    let mut consumer: Option<PullConsumer> = None;
    let mut pending_read = Instant::now() - PENDING_EVERY;
    let n = cx.settings.batch_size.max(1);
    while !*stop.borrow() {
        let Some(c) = consumer.as_mut() else {
            match open_consumer::<S>(&cx).await {
                Ok(c) => {
                    tracing::info!(stream = S::STREAM, consumer = CONSUMER, "consuming");
                    consumer = Some(c);
                    health.consumer.store(true, Ordering::Relaxed);
                }
                Err(e) => {
                    tracing::warn!(stream = S::STREAM, error = %e, "cannot open the stream and its consumer yet; retrying");
                    cx.metrics.nats_error("open");
                    health.consumer.store(false, Ordering::Relaxed);
                    sleep_or_stop(backoff.next(), &mut stop).await;
                }
            }
            continue;
        };
        if writer.is_none() {
            let made = async {
                let client = session(&cx.db).await?;
                S::writer(client).await.map_err(|e| e.to_string())
            };
            match made.await {
                Ok(w) => {
                    writer = Some(w);
                    health.pg.store(true, Ordering::Relaxed);
                }
                Err(e) => {
                    tracing::warn!(stream = S::STREAM, error = %e, "cannot reach PostgreSQL; retrying");
                    cx.metrics.pg_error("connect");
                    health.pg.store(false, Ordering::Relaxed);
                    sleep_or_stop(backoff.next(), &mut stop).await;
                }
            }
            continue;
        }
        if pending_read.elapsed() >= PENDING_EVERY {
            pending_read = Instant::now();
            if let Ok(Ok(info)) = tokio::time::timeout(Duration::from_secs(5), c.info()).await {
                cx.metrics.set_pending(S::STREAM, info.num_pending + info.num_ack_pending as u64);
            }
        }
        connects.borrow_and_update();
        let mut batch = match c.batch().max_messages(n).expires(FETCH_EXPIRES).messages().await {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(stream = S::STREAM, error = %e, "cannot pull from the consumer; opening it again");
                cx.metrics.nats_error("fetch");
                consumer = None;
                health.consumer.store(false, Ordering::Relaxed);
                sleep_or_stop(backoff.next(), &mut stop).await;
                continue;
            }
        };
        // Drain this pull request.
        let mut buf: Vec<jetstream::Message> = Vec::with_capacity(n);
        let mut draining: Option<tokio::time::Instant> = None;
        let mut failed = false;
        loop {
            let next = {
                let deadline = draining.unwrap_or_else(|| tokio::time::Instant::now() + FETCH_EXPIRES * 10);
                let linger = async {
                    if buf.is_empty() { std::future::pending::<()>().await } else { tokio::time::sleep(LINGER).await }
                };
                tokio::select! {
                    m = batch.next() => match m {
                        Some(Ok(m)) => Next::Message(Box::new(m)),
                        Some(Err(e)) => Next::Error(e.to_string()),
                        None => Next::End,
                    },
                    _ = linger => Next::Flush,
                    _ = stop.wait_for(|s| *s), if draining.is_none() => Next::Stop,
                    _ = tokio::time::sleep_until(deadline), if draining.is_some() => Next::End,
                    r = connects.changed() => if r.is_ok() { Next::Reconnected } else { Next::End },
                }
            };
            let end = match next {
                Next::Message(m) => {
                    buf.push(*m);
                    if buf.len() < n {
                        continue;
                    }
                    false
                }
                Next::Flush => false,
                Next::Stop => {
                    // Finish the pull request in hand: what it still brings is applied too.
                    draining = Some(tokio::time::Instant::now() + FETCH_EXPIRES + Duration::from_millis(500));
                    if buf.is_empty() {
                        continue;
                    }
                    false
                }
                Next::End | Next::Reconnected => true,
                Next::Error(e) => {
                    tracing::warn!(stream = S::STREAM, error = %e, "the pull request ended with an error; opening the consumer again");
                    cx.metrics.nats_error("fetch");
                    consumer = None;
                    health.consumer.store(false, Ordering::Relaxed);
                    true
                }
            };
            if !buf.is_empty() {
                let msgs = std::mem::take(&mut buf);
                if process::<S>(&cx, &mut writer, msgs, &health).await {
                    backoff.reset();
                } else {
                    failed = true;
                }
            }
            if end || failed {
                break;
            }
        }
        if failed && draining.is_none() {
            sleep_or_stop(backoff.next(), &mut stop).await;
        }
        if draining.is_some() {
            break;
        }
    }
    // Acknowledgements are published asynchronously: send them before the process goes.
    let _ = tokio::time::timeout(Duration::from_secs(5), cx.nats.flush()).await;
    tracing::info!(stream = S::STREAM, "stopped consuming");
}

async fn ack_all(msgs: &[&jetstream::Message], kind: AckKind) {
    for m in msgs {
        if let Err(e) = m.ack_with(kind).await {
            // Redelivered later; the processed ids make that a no-op.
            tracing::debug!(error = %e, "acknowledgement not sent");
        }
    }
}

fn describe(m: &jetstream::Message) -> (u64, i64) {
    m.info().map(|i| (i.stream_sequence, i.delivered)).unwrap_or((0, 0))
}

/// Applies one batch; false when PostgreSQL failed (nothing of it acknowledged).
async fn process<S: Sink>(
    cx: &Context,
    writer: &mut Option<S::Writer>,
    msgs: Vec<jetstream::Message>,
    health: &Health,
) -> bool {
    let mut valid = Vec::with_capacity(msgs.len());
    let mut items = Vec::with_capacity(msgs.len());
    for m in &msgs {
        match S::decode(m.subject.as_str(), &m.payload) {
            Ok(item) => {
                valid.push(m);
                items.push(item);
            }
            Err((kind, reason)) => terminate::<S>(cx, m, kind, &reason).await,
        }
    }
    if items.is_empty() {
        return true;
    }
    let Some(w) = writer.as_mut() else {
        ack_all(&valid, AckKind::Nak(Some(NAK_DELAY))).await;
        return false;
    };
    let started = Instant::now();
    let mut attempt = 0;
    let result = loop {
        match tokio::time::timeout(APPLY_TIMEOUT, S::apply(w, &items)).await {
            Ok(Ok(outcomes)) => break Ok(outcomes),
            Ok(Err(e)) if classify(&e) == ErrorClass::Retry && attempt < RETRIES => {
                attempt += 1;
                tracing::debug!(stream = S::STREAM, error = %e, attempt, "transaction conflict; applying again");
            }
            Ok(Err(e)) => break Err(Some(e)),
            Err(_) => break Err(None),
        }
    };
    match result {
        Ok(outcomes) => {
            cx.metrics.batch_applied(started.elapsed().as_secs_f64(), true);
            tracing::debug!(stream = S::STREAM, messages = items.len(), new = outcomes.iter().filter(|n| **n).count(),
                elapsed = ?started.elapsed(), "batch committed");
            for (item, new) in items.iter().zip(&outcomes) {
                S::count(&cx.metrics, item, *new);
            }
            ack_all(&valid, AckKind::Ack).await;
            health.pg.store(true, Ordering::Relaxed);
            true
        }
        Err(Some(e)) if classify(&e) == ErrorClass::Data => {
            tracing::warn!(stream = S::STREAM, error = %e, events = items.len(), "PostgreSQL refused a batch's data; applying it one event at a time");
            for (m, item) in valid.iter().zip(&items) {
                match S::apply(w, std::slice::from_ref(item)).await {
                    Ok(outcomes) => {
                        S::count(&cx.metrics, item, outcomes.first().copied().unwrap_or(false));
                        ack_all(&[m], AckKind::Ack).await;
                    }
                    Err(e) if classify(&e) == ErrorClass::Data => {
                        terminate::<S>(cx, m, S::kind(item), &format!("PostgreSQL cannot store it: {e}")).await;
                    }
                    Err(e) => {
                        give_back::<S>(cx, writer, &valid, &e.to_string(), health).await;
                        return false;
                    }
                }
            }
            cx.metrics.batch_applied(started.elapsed().as_secs_f64(), true);
            true
        }
        Err(e) => {
            let reason = e.map_or_else(|| format!("no answer within {APPLY_TIMEOUT:?}"), |e| e.to_string());
            give_back::<S>(cx, writer, &valid, &reason, health).await;
            false
        }
    }
}

async fn terminate<S: Sink>(cx: &Context, m: &jetstream::Message, kind: &'static str, reason: &str) {
    let (seq, delivered) = describe(m);
    tracing::warn!(stream = S::STREAM, subject = %m.subject, sequence = seq, delivered, %reason,
        "malformed message terminated (it is not redelivered)");
    S::count_malformed(&cx.metrics, kind);
    if let Err(e) = m.ack_with(AckKind::Term).await {
        tracing::debug!(error = %e, "termination not sent; the message comes back and is refused again");
    }
}

/// PostgreSQL failed: the batch goes back to JetStream, the session is dropped.
async fn give_back<S: Sink>(
    cx: &Context,
    writer: &mut Option<S::Writer>,
    valid: &[&jetstream::Message],
    reason: &str,
    health: &Health,
) {
    tracing::warn!(stream = S::STREAM, error = %reason, messages = valid.len(),
        "PostgreSQL did not take the batch; it is redelivered later");
    cx.metrics.pg_error(S::OPERATION);
    cx.metrics.batch_applied(0.0, false);
    ack_all(valid, AckKind::Nak(Some(NAK_DELAY))).await;
    if writer.as_ref().is_some_and(|w| S::closed(w)) {
        tracing::info!(stream = S::STREAM, "the PostgreSQL session is gone; reconnecting");
    }
    // A new session either way: the old one may be in any state.
    health.pg.store(false, Ordering::Relaxed);
    *writer = None;
}
