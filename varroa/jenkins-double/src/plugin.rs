//! The Varroa Jenkins plugin's side of the localhost protocol (docs/varroa/plugin-protocol.md):
//! the client that posts build events to the mite.
//!
//! The real plugin is Java and cannot be built here; this client plays it in tests and in the
//! demo, and it is the load generator's sender (`varroa-jenkins-double load`).
//!
//! - **Token**: read from the token file (`VARROA_PLUGIN_TOKEN_FILE`) when the client starts and
//!   again after a `401` (a restarted mite wrote a new one). A file that is missing or empty is read
//!   again before every attempt until it is there (the mite may start after Jenkins).
//! - **Batches**: `POST <url>/v1/events` with `{"events": [...]}`, at most
//!   [`MAX_EVENTS_PER_BATCH`] events and [`MAX_REQUEST_BYTES`] bytes, oldest first, one request at
//!   a time: a build's events are sent in the order they were submitted.
//! - **Answers**: `200`: the accepted events are dropped from the buffer; the rejected ones are
//!   logged and dropped too, never sent again. `503` (with `Retry-After`), another `5xx`, a `404`,
//!   a refused connection or a timeout: the events stay, and the batch is sent again after the
//!   back-off (1 s doubling to 30 s; `Retry-After` replaces it for that attempt). `401`: the token
//!   file is read again and the batch resent. `400` (the body is not a list of events: a bug on
//!   this side) drops the batch as rejected. `413`: the batch is halved.
//! - **Buffer**: bounded ([`PluginConfig::max_events`], [`PluginConfig::max_bytes`]; 10,000 events
//!   or 16 MiB). When full, the oldest *stage* events go first, then the oldest others but
//!   `finished`, then the oldest `finished`. Events in a request in flight are counted but never
//!   dropped. Drops are counted and warned about at most once a minute. Jenkins never blocks a
//!   build on the record store, so [`PluginClient::submit`] never waits; the load generator uses
//!   [`PluginClient::submit_waiting`], which waits for room instead of dropping.

use bytes::Bytes;
use http::{Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::Serialize;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, watch};
use varroa_link::builds::{BuildEvent, EventBody, MAX_EVENT_BYTES, MAX_EVENTS_PER_BATCH, MAX_REQUEST_BYTES};

/// The longest `Retry-After` honoured; a longer one is cut to this (a broken header must not stop
/// the sender for hours).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// How the client reaches the mite, and its limits.
#[derive(Debug, Clone)]
pub struct PluginConfig {
    /// `VARROA_PLUGIN_URL`: the mite's plugin listener, `http://127.0.0.1:8787`.
    pub url: String,
    /// `VARROA_PLUGIN_TOKEN_FILE`: the file the mite writes the bearer token to.
    pub token_file: PathBuf,
    /// The most events held (queued and in flight). Default 10,000.
    pub max_events: usize,
    /// The most bytes of event JSON held. Default 16 MiB.
    pub max_bytes: usize,
    /// The most events in one request (capped at [`MAX_EVENTS_PER_BATCH`]).
    pub batch_size: usize,
    /// One request's timeout, answer included. The mite answers once JetStream stored the events.
    pub request_timeout: Duration,
    /// The first back-off after a failed attempt.
    pub backoff_initial: Duration,
    /// The longest back-off.
    pub backoff_max: Duration,
    /// The least time between two warnings about dropped events.
    pub warn_interval: Duration,
}

impl PluginConfig {
    /// The protocol's defaults for a mite at `url` and a token in `token_file`.
    pub fn new(url: impl Into<String>, token_file: impl Into<PathBuf>) -> PluginConfig {
        PluginConfig {
            url: url.into(),
            token_file: token_file.into(),
            max_events: 10_000,
            max_bytes: 16 << 20,
            batch_size: MAX_EVENTS_PER_BATCH,
            request_timeout: Duration::from_secs(30),
            backoff_initial: Duration::from_secs(1),
            backoff_max: Duration::from_secs(30),
            warn_interval: Duration::from_secs(60),
        }
    }
}

/// Why the client cannot start, or an event cannot be taken.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// `VARROA_PLUGIN_URL` is not an `http://` URL.
    #[error(
        "invalid plugin URL {url:?} (VARROA_PLUGIN_URL): {reason}; fix: the mite's loopback listener, e.g. http://127.0.0.1:8787"
    )]
    Url {
        /// The URL given.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// One event is larger than the protocol allows; it is not taken.
    #[error("event {id} is {bytes} bytes as JSON, more than the {MAX_EVENT_BYTES} one event may have")]
    TooLarge {
        /// The event's id.
        id: String,
        /// Its size.
        bytes: usize,
    },
}

/// What the client did so far: the status endpoint's and the tests' view.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Counters {
    /// Events taken by [`PluginClient::submit`] (dropped or not).
    pub submitted: u64,
    /// Events the mite accepted.
    pub sent: u64,
    /// Events held: queued or in a request in flight.
    pub pending: u64,
    /// Of those, in a request in flight.
    pub in_flight: u64,
    /// Bytes of event JSON held.
    pub pending_bytes: u64,
    /// Events the mite refused (named in `rejected`, or a whole batch answered `400`); never resent.
    pub rejected: u64,
    /// Events dropped because the buffer was full (`varroa_plugin_events_dropped_total`).
    pub dropped: u64,
    /// Requests made, answered or not.
    pub requests: u64,
    /// Requests that did not store their events (to be retried).
    pub failures: u64,
    /// Times the token file was read.
    pub token_reads: u64,
    /// What went wrong last, if anything did since the last success.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// The buffer classes, in the order they are dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Stage = 0,
    Other = 1,
    Finished = 2,
}

fn class_of(body: &EventBody) -> Class {
    match body {
        EventBody::StageStarted { .. } | EventBody::StageFinished { .. } => Class::Stage,
        EventBody::Finished { .. } => Class::Finished,
        _ => Class::Other,
    }
}

/// One event held: its JSON, serialized once.
#[derive(Debug, Clone)]
struct Item {
    seq: u64,
    id: String,
    class: Class,
    json: Bytes,
}

/// The bounded buffer: one FIFO per class, merged by submission order when a batch is taken.
#[derive(Debug)]
struct Buffer {
    queues: [VecDeque<Item>; 3],
    queued: usize,
    queued_bytes: usize,
    in_flight: usize,
    in_flight_bytes: usize,
    max_events: usize,
    max_bytes: usize,
    next_seq: u64,
}

impl Buffer {
    fn new(max_events: usize, max_bytes: usize) -> Buffer {
        Buffer {
            queues: Default::default(),
            queued: 0,
            queued_bytes: 0,
            in_flight: 0,
            in_flight_bytes: 0,
            max_events: max_events.max(1),
            max_bytes: max_bytes.max(1),
            next_seq: 0,
        }
    }

    fn held(&self) -> usize {
        self.queued + self.in_flight
    }

    fn held_bytes(&self) -> usize {
        self.queued_bytes + self.in_flight_bytes
    }

    fn has_room_for(&self, bytes: usize) -> bool {
        self.held() == 0 || (self.held() < self.max_events && self.held_bytes() + bytes <= self.max_bytes)
    }

    /// Adds an event, then drops by the policy while over a bound; returns how many were dropped.
    fn push(&mut self, id: String, class: Class, json: Bytes) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.queued += 1;
        self.queued_bytes += json.len();
        self.queues[class as usize].push_back(Item { seq, id, class, json });
        let mut dropped = 0;
        // The last event held stays, however large: a bound smaller than one event must not lose
        // every event.
        while (self.held() > self.max_events || self.held_bytes() > self.max_bytes)
            && self.queued > 0
            && self.held() > 1
        {
            let Some(q) = self.queues.iter_mut().find(|q| !q.is_empty()) else { break };
            if let Some(item) = q.pop_front() {
                self.queued -= 1;
                self.queued_bytes -= item.json.len();
                dropped += 1;
            }
        }
        dropped
    }

    /// The oldest events, at most `max` of them and `max_bytes` of request body.
    fn take(&mut self, max: usize, max_bytes: usize) -> Vec<Item> {
        let mut out = Vec::new();
        let mut bytes = 0;
        while out.len() < max {
            let oldest = (0..3).filter_map(|c| self.queues[c].front().map(|i| (i.seq, c))).min();
            let Some((_, c)) = oldest else { break };
            let len = self.queues[c].front().map(|i| i.json.len()).unwrap_or(0);
            if !out.is_empty() && bytes + len + 1 > max_bytes {
                break;
            }
            let Some(item) = self.queues[c].pop_front() else { break };
            bytes += len + 1;
            self.queued -= 1;
            self.queued_bytes -= len;
            self.in_flight += 1;
            self.in_flight_bytes += len;
            out.push(item);
        }
        out
    }

    /// The batch in flight is done with (stored, rejected or given up).
    fn done(&mut self, batch: &[Item]) {
        for i in batch {
            self.in_flight -= 1;
            self.in_flight_bytes -= i.json.len();
        }
    }

    /// The batch in flight goes back to the front: it is older than anything queued.
    fn put_back(&mut self, batch: Vec<Item>) {
        self.done(&batch);
        for item in batch.into_iter().rev() {
            self.queued += 1;
            self.queued_bytes += item.json.len();
            self.queues[item.class as usize].push_front(item);
        }
    }
}

struct State {
    buffer: Buffer,
    counters: Counters,
    token: Option<String>,
    dropped_unwarned: u64,
    last_warning: Option<Instant>,
}

struct Inner {
    config: PluginConfig,
    endpoint: Uri,
    state: Mutex<State>,
    /// Wakes the sender: something was queued.
    work: Notify,
    /// Wakes [`PluginClient::submit_waiting`]: room was made.
    room: Notify,
    counters: watch::Sender<Counters>,
    http: Client<HttpConnector, Full<Bytes>>,
}

impl Inner {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Publishes the counters after a change (the caller holds the state).
    fn publish(&self, st: &mut State) {
        st.counters.pending = st.buffer.held() as u64;
        st.counters.in_flight = st.buffer.in_flight as u64;
        st.counters.pending_bytes = st.buffer.held_bytes() as u64;
        self.counters.send_replace(st.counters.clone());
    }

    /// Reads the token file; `sending`: a request waits on it (else it is the read at start, when
    /// the mite may not have written it yet).
    fn read_token(&self, st: &mut State, sending: bool) {
        st.counters.token_reads += 1;
        let path = &self.config.token_file;
        let problem = match std::fs::read_to_string(path) {
            Ok(t) if !t.trim().is_empty() => {
                st.token = Some(t.trim().to_owned());
                return;
            }
            Ok(_) => "it is empty".to_owned(),
            Err(e) => e.to_string(),
        };
        st.token = None;
        if sending {
            tracing::warn!(path = %path.display(), problem, "cannot read the plugin token file (VARROA_PLUGIN_TOKEN_FILE); sending without a token, the mite writes it when it starts");
        } else {
            tracing::info!(path = %path.display(), problem, "no plugin token yet (VARROA_PLUGIN_TOKEN_FILE); read again before the first request");
        }
    }

    fn note_drops(&self, st: &mut State, dropped: u64) {
        if dropped == 0 {
            return;
        }
        st.counters.dropped += dropped;
        st.dropped_unwarned += dropped;
        if st.last_warning.is_none_or(|t| t.elapsed() >= self.config.warn_interval) {
            tracing::warn!(
                dropped = st.dropped_unwarned,
                dropped_total = st.counters.dropped,
                max_events = self.config.max_events,
                max_bytes = self.config.max_bytes,
                "the build event buffer is full (the mite is not taking events): dropped the oldest stage events first; build records will miss detail"
            );
            st.last_warning = Some(Instant::now());
            st.dropped_unwarned = 0;
        }
    }
}

/// The client. Dropping it stops the sender; what is still buffered is lost (as when Jenkins
/// stops).
pub struct PluginClient {
    inner: Arc<Inner>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for PluginClient {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl std::fmt::Debug for PluginClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginClient").field("url", &self.inner.config.url).finish_non_exhaustive()
    }
}

/// `<url>/v1/events`, for an `http://` URL.
fn endpoint(url: &str) -> Result<Uri, PluginError> {
    let bad = |reason: &str| PluginError::Url { url: url.to_owned(), reason: reason.to_owned() };
    let base = url.trim().trim_end_matches('/');
    let uri: Uri = format!("{base}/v1/events").parse().map_err(|e: http::uri::InvalidUri| bad(&e.to_string()))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some(other) => {
            return Err(bad(&format!(
                "scheme {other}: the plugin protocol is plain HTTP on the pod's loopback (http://)"
            )));
        }
        None => return Err(bad("no scheme: it must start with http://")),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(bad("no host"));
    }
    if uri.query().is_some() {
        return Err(bad("a query is not allowed"));
    }
    Ok(uri)
}

impl PluginClient {
    /// Reads the token file and starts the sender on the current tokio runtime. A missing token
    /// file is not an error: it is read again before the first request.
    pub fn start(config: PluginConfig) -> Result<PluginClient, PluginError> {
        let endpoint = endpoint(&config.url)?;
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(config.request_timeout));
        let http = Client::builder(TokioExecutor::new()).pool_idle_timeout(Duration::from_secs(30)).build(connector);
        let state = State {
            buffer: Buffer::new(config.max_events, config.max_bytes),
            counters: Counters::default(),
            token: None,
            dropped_unwarned: 0,
            last_warning: None,
        };
        let inner = Arc::new(Inner {
            config,
            endpoint,
            state: Mutex::new(state),
            work: Notify::new(),
            room: Notify::new(),
            counters: watch::Sender::new(Counters::default()),
            http,
        });
        {
            let mut st = inner.state();
            inner.read_token(&mut st, false);
            inner.publish(&mut st);
        }
        let task = tokio::spawn(sender(inner.clone()));
        Ok(PluginClient { inner, task })
    }

    /// Stops the sender (what is buffered stays unsent; the counters stay readable).
    pub fn close(&self) {
        self.task.abort();
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &PluginConfig {
        &self.inner.config
    }

    fn encode(event: &BuildEvent) -> Result<Bytes, PluginError> {
        let json = serde_json::to_vec(event).unwrap_or_default();
        if json.len() > MAX_EVENT_BYTES {
            return Err(PluginError::TooLarge { id: event.id.clone(), bytes: json.len() });
        }
        Ok(Bytes::from(json))
    }

    /// Queues an event and returns at once; when the buffer is full, the drop policy makes room
    /// (the event itself may be what is dropped, when it is the oldest of the lowest class).
    pub fn submit(&self, event: &BuildEvent) -> Result<(), PluginError> {
        let json = Self::encode(event)?;
        let inner = &self.inner;
        let mut st = inner.state();
        st.counters.submitted += 1;
        let dropped = st.buffer.push(event.id.clone(), class_of(&event.body), json);
        inner.note_drops(&mut st, dropped);
        inner.publish(&mut st);
        drop(st);
        inner.work.notify_one();
        Ok(())
    }

    /// Queues an event once there is room for it, so nothing is dropped: what a load generator
    /// does (the real plugin never waits; see [`PluginClient::submit`]).
    pub async fn submit_waiting(&self, event: &BuildEvent) -> Result<(), PluginError> {
        let json = Self::encode(event)?;
        let inner = &self.inner;
        loop {
            let room = inner.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            {
                let mut st = inner.state();
                if st.buffer.has_room_for(json.len()) {
                    st.counters.submitted += 1;
                    let dropped = st.buffer.push(event.id.clone(), class_of(&event.body), json);
                    inner.note_drops(&mut st, dropped);
                    inner.publish(&mut st);
                    drop(st);
                    inner.work.notify_one();
                    return Ok(());
                }
            }
            room.await;
        }
    }

    /// The counters now.
    pub fn counters(&self) -> Counters {
        self.inner.counters.borrow().clone()
    }

    /// A receiver of the counters, updated on every change (wait on a condition with
    /// `wait_for`). Drop the borrow `wait_for` returns at once: while it lives, the client cannot
    /// update its counters, so it cannot take or send events.
    pub fn watch(&self) -> watch::Receiver<Counters> {
        self.inner.counters.subscribe()
    }

    /// Waits until nothing is pending, at most `timeout`; whether it got there.
    pub async fn flush(&self, timeout: Duration) -> bool {
        let mut rx = self.watch();
        tokio::time::timeout(timeout, rx.wait_for(|c| c.pending == 0)).await.is_ok_and(|r| r.is_ok())
    }
}

/// What one request came to.
#[derive(Debug)]
enum Outcome {
    /// Stored; these ids were refused, with the mite's reasons.
    Stored(Vec<(String, String)>),
    /// The token is not (or no longer) the mite's.
    Unauthorized,
    /// The body is not a list of events.
    BadRequest(String),
    /// The body is too large.
    TooLarge,
    /// Not stored now; retry after the given delay, or the back-off.
    Retry { after: Option<Duration>, reason: String },
}

#[derive(serde::Deserialize)]
struct Answer {
    #[serde(default)]
    rejected: Vec<Rejected>,
}

#[derive(serde::Deserialize)]
struct Rejected {
    #[serde(default)]
    id: String,
    #[serde(default)]
    error: String,
}

/// `Retry-After`: delay-seconds, or an HTTP-date (RFC 9110 section 10.2.3).
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    let delay = if let Ok(secs) = value.parse::<u64>() {
        Duration::from_secs(secs)
    } else {
        let when = jiff::fmt::rfc2822::parse(value).ok()?.timestamp();
        let secs = when.as_second() - jiff::Timestamp::now().as_second();
        Duration::from_secs(secs.max(0) as u64)
    };
    Some(delay.min(MAX_RETRY_AFTER))
}

fn body_of(batch: &[Item]) -> Bytes {
    let mut body = Vec::with_capacity(batch.iter().map(|i| i.json.len() + 1).sum::<usize>() + 16);
    body.extend_from_slice(b"{\"events\":[");
    for (n, item) in batch.iter().enumerate() {
        if n > 0 {
            body.push(b',');
        }
        body.extend_from_slice(&item.json);
    }
    body.extend_from_slice(b"]}");
    Bytes::from(body)
}

async fn post(inner: &Inner, token: Option<&str>, body: Bytes) -> Outcome {
    let mut req = Request::builder()
        .method(Method::POST)
        .uri(inner.endpoint.clone())
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json");
    if let Some(t) = token {
        req = req.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let req = match req.body(Full::new(body)) {
        Ok(r) => r,
        Err(e) => return Outcome::Retry { after: None, reason: format!("building the request: {e}") },
    };
    let exchange = async {
        let rsp = inner.http.request(req).await.map_err(|e| {
            use std::error::Error;
            let mut text = e.to_string();
            let mut source = e.source();
            while let Some(s) = source {
                text = format!("{text}: {s}");
                source = s.source();
            }
            text
        })?;
        let status = rsp.status();
        let retry_after = rsp.headers().get(http::header::RETRY_AFTER).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let body = Limited::new(rsp.into_body(), MAX_REQUEST_BYTES)
            .collect()
            .await
            .map(|b| b.to_bytes())
            .map_err(|e| format!("reading the answer: {e}"))?;
        Ok::<_, String>((status, retry_after, body))
    };
    let (status, retry_after, body) = match tokio::time::timeout(inner.config.request_timeout, exchange).await {
        Err(_) => {
            return Outcome::Retry {
                after: None,
                reason: format!("no answer within {:?}", inner.config.request_timeout),
            };
        }
        Ok(Err(e)) => return Outcome::Retry { after: None, reason: e },
        Ok(Ok(x)) => x,
    };
    let error_text = || {
        serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
            .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned())
    };
    match status {
        StatusCode::OK => match serde_json::from_slice::<Answer>(&body) {
            Ok(a) => Outcome::Stored(a.rejected.into_iter().map(|r| (r.id, r.error)).collect()),
            Err(e) => {
                tracing::warn!(error = %e, "the mite's 200 answer is not {{accepted, rejected}}; taking every event as stored");
                Outcome::Stored(Vec::new())
            }
        },
        StatusCode::UNAUTHORIZED => Outcome::Unauthorized,
        StatusCode::BAD_REQUEST => Outcome::BadRequest(error_text()),
        StatusCode::PAYLOAD_TOO_LARGE => Outcome::TooLarge,
        s => Outcome::Retry {
            after: retry_after.as_deref().and_then(parse_retry_after),
            reason: format!("{} {}", s.as_u16(), error_text()),
        },
    }
}

/// The sender: one request at a time, oldest events first.
async fn sender(inner: Arc<Inner>) {
    let mut failures: u32 = 0;
    let mut batch_limit = inner.config.batch_size.clamp(1, MAX_EVENTS_PER_BATCH);
    // A 401 is answered by reading the token again and resending at once, once; a second 401 in a
    // row backs off (the mite may not have written its new token yet).
    let mut reread_after_401 = false;
    loop {
        let (batch, token) = loop {
            let work = inner.work.notified();
            tokio::pin!(work);
            work.as_mut().enable();
            {
                let mut st = inner.state();
                let batch = st.buffer.take(batch_limit, MAX_REQUEST_BYTES - 16);
                if !batch.is_empty() && st.token.is_none() {
                    inner.read_token(&mut st, true);
                }
                if !batch.is_empty() {
                    st.counters.requests += 1;
                    inner.publish(&mut st);
                    break (batch, st.token.clone());
                }
            }
            work.await;
        };
        let outcome = post(&inner, token.as_deref(), body_of(&batch)).await;
        let mut delay = None;
        {
            let mut st = inner.state();
            match outcome {
                Outcome::Stored(refused) => {
                    let mut rejected = 0u64;
                    for (id, error) in &refused {
                        if batch.iter().any(|i| &i.id == id) {
                            rejected += 1;
                            tracing::warn!(id, error, "the mite rejected a build event; it is not sent again");
                        } else {
                            tracing::warn!(id, error, "the mite rejected an event this request did not carry");
                        }
                    }
                    let rejected = rejected.min(batch.len() as u64);
                    st.counters.rejected += rejected;
                    st.counters.sent += batch.len() as u64 - rejected;
                    st.counters.last_error = None;
                    st.buffer.done(&batch);
                    failures = 0;
                    reread_after_401 = false;
                }
                Outcome::BadRequest(error) => {
                    tracing::error!(
                        events = batch.len(),
                        error,
                        "the mite answered 400 to a batch of events: dropped as rejected (a bug on this side)"
                    );
                    st.counters.rejected += batch.len() as u64;
                    st.counters.last_error = Some(format!("400 {error}"));
                    st.buffer.done(&batch);
                }
                Outcome::TooLarge if batch.len() > 1 => {
                    batch_limit = (batch.len() / 2).max(1);
                    tracing::warn!(
                        events = batch.len(),
                        now = batch_limit,
                        "the mite answered 413; sending smaller batches"
                    );
                    st.buffer.put_back(batch);
                }
                Outcome::TooLarge => {
                    tracing::error!(id = %batch[0].id, "the mite answered 413 to a single event: dropped as rejected");
                    st.counters.rejected += 1;
                    st.buffer.done(&batch);
                }
                Outcome::Unauthorized => {
                    st.counters.failures += 1;
                    st.counters.last_error = Some("401: the token is not the mite's".into());
                    let used = st.token.clone();
                    inner.read_token(&mut st, true);
                    st.buffer.put_back(batch);
                    if reread_after_401 || st.token == used {
                        failures = failures.saturating_add(1);
                        delay = Some(backoff(&inner.config, failures));
                        // Read again before the next attempt too.
                        st.token = None;
                        tracing::warn!(path = %inner.config.token_file.display(), "the mite answered 401 and the token file holds no newer token; backing off");
                    } else {
                        tracing::info!("the mite answered 401; read the token file again, resending");
                    }
                    reread_after_401 = true;
                }
                Outcome::Retry { after, reason } => {
                    st.counters.failures += 1;
                    failures = failures.saturating_add(1);
                    let wait = after.unwrap_or_else(|| backoff(&inner.config, failures));
                    tracing::warn!(events = batch.len(), retry_in = ?wait, reason, "build events not stored by the mite; kept, retrying");
                    st.counters.last_error = Some(reason);
                    st.buffer.put_back(batch);
                    delay = Some(wait);
                    reread_after_401 = false;
                }
            }
            inner.publish(&mut st);
        }
        inner.room.notify_waiters();
        if let Some(d) = delay {
            tokio::time::sleep(d).await;
        }
    }
}

/// The back-off after `failures` failed attempts in a row: initial, doubling, capped.
fn backoff(config: &PluginConfig, failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(30);
    config.backoff_initial.saturating_mul(1u32 << exp).min(config.backoff_max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push(b: &mut Buffer, id: &str, class: Class) -> u64 {
        b.push(id.into(), class, Bytes::from(format!("\"{id}\"")))
    }

    fn ids(b: &mut Buffer) -> Vec<String> {
        let batch = b.take(usize::MAX, usize::MAX);
        let out = batch.iter().map(|i| i.id.clone()).collect();
        b.done(&batch);
        out
    }

    #[test]
    fn a_full_buffer_drops_stage_events_first_then_others_then_finished() {
        let mut b = Buffer::new(4, usize::MAX);
        push(&mut b, "q", Class::Other);
        push(&mut b, "s1", Class::Stage);
        push(&mut b, "s2", Class::Stage);
        push(&mut b, "f1", Class::Finished);
        assert_eq!(push(&mut b, "s3", Class::Stage), 1);
        assert_eq!(push(&mut b, "t", Class::Other), 1);
        // s1 and s2 went; s3 is the only stage event left and goes next.
        assert_eq!(push(&mut b, "f2", Class::Finished), 1);
        assert_eq!(push(&mut b, "f3", Class::Finished), 1, "then the oldest other: q");
        assert_eq!(push(&mut b, "f4", Class::Finished), 1, "then t");
        assert_eq!(push(&mut b, "s4", Class::Stage), 1, "a new stage event is the first to go");
        assert_eq!(push(&mut b, "f5", Class::Finished), 1, "finished last: the oldest, f1");
        assert_eq!(ids(&mut b), ["f2", "f3", "f4", "f5"]);
    }

    #[test]
    fn batches_keep_submission_order_and_a_failed_one_goes_back_to_the_front() {
        let mut b = Buffer::new(100, usize::MAX);
        for (id, c) in [("a", Class::Other), ("b", Class::Stage), ("c", Class::Finished), ("d", Class::Stage)] {
            push(&mut b, id, c);
        }
        let first = b.take(2, usize::MAX);
        assert_eq!(first.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!((b.queued, b.in_flight), (2, 2));
        push(&mut b, "e", Class::Other);
        b.put_back(first);
        assert_eq!(ids(&mut b), ["a", "b", "c", "d", "e"]);
        assert_eq!((b.held(), b.held_bytes()), (0, 0));
    }

    #[test]
    fn events_in_flight_are_counted_but_never_dropped() {
        let mut b = Buffer::new(3, usize::MAX);
        push(&mut b, "s1", Class::Stage);
        push(&mut b, "s2", Class::Stage);
        let flying = b.take(2, usize::MAX);
        push(&mut b, "f", Class::Finished);
        assert_eq!(push(&mut b, "s3", Class::Stage), 1, "only queued events can go: s3 itself");
        assert!(!b.has_room_for(1));
        b.done(&flying);
        assert_eq!(ids(&mut b), ["f"]);
    }

    #[test]
    fn the_byte_bound_and_the_request_size_are_kept() {
        // Each event is 4 bytes of JSON ("ab" with quotes).
        let mut b = Buffer::new(100, 10);
        push(&mut b, "s1", Class::Stage);
        push(&mut b, "o1", Class::Other);
        assert_eq!(push(&mut b, "o2", Class::Other), 1);
        assert_eq!(b.held_bytes(), 8);
        let batch = b.take(10, 6);
        assert_eq!(batch.len(), 1, "a second event would pass the request size");
        assert!(b.has_room_for(0) && !b.has_room_for(4));
        b.done(&batch);
        // One event larger than the bound still gets in when nothing else is there.
        let mut b = Buffer::new(100, 2);
        assert!(b.has_room_for(4));
        assert_eq!(push(&mut b, "xx", Class::Finished), 0);
        assert_eq!(push(&mut b, "yy", Class::Finished), 1);
        assert_eq!(ids(&mut b), ["yy"]);
    }

    #[test]
    fn back_off_doubles_to_the_cap_and_retry_after_is_read() {
        let c = PluginConfig::new("http://127.0.0.1:1", "/nonexistent");
        let secs: Vec<u64> = (1..=8).map(|n| backoff(&c, n).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(backoff(&c, u32::MAX), Duration::from_secs(30));
        assert_eq!(parse_retry_after(" 7 "), Some(Duration::from_secs(7)));
        assert_eq!(parse_retry_after("100000"), Some(MAX_RETRY_AFTER));
        assert_eq!(parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT"), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("soon"), None);
    }

    #[test]
    fn the_url_must_be_plain_http() {
        assert_eq!(endpoint("http://127.0.0.1:8787").unwrap().to_string(), "http://127.0.0.1:8787/v1/events");
        assert_eq!(endpoint("http://127.0.0.1:8787/").unwrap().path(), "/v1/events");
        for bad in ["https://127.0.0.1:8787", "127.0.0.1:8787", "http://", "ftp://x", "http://h/?a=b"] {
            let e = endpoint(bad).unwrap_err().to_string();
            assert!(e.contains("VARROA_PLUGIN_URL"), "{bad}: {e}");
        }
    }
}
