//! The Varroa plugin's console logs (docs/varroa/plugin-protocol.md, "Console logs"): each
//! build's console text, as `consoleText` serves it, sent to the mite in chunks,
//! `POST {plugin-url}/v1/logs/{job}/{build}?offset=N[&final=true]`.
//!
//! - One sender per build: its chunks go one at a time, in order, the next only after the
//!   previous one's `200`; several builds send at once, at most [`LogsConfig::max_in_flight`]
//!   chunks in flight over all builds (the mite answers `503` beyond 4).
//! - A chunk when the oldest unsent byte is [`LogsConfig::chunk_interval`] old (a second of
//!   output, times the time scale: at 0 at once) or [`LogsConfig::chunk_bytes`] (256 KiB) are
//!   waiting, at most [`LogsConfig::max_chunk`] (1 MiB); the final chunk (`final=true`, empty if
//!   nothing is left) when the build's log is closed (it finished).
//! - `200`: on from `next`; `complete: true`: done. `409`: on from `next` (nothing, if complete).
//!   `503`, another `5xx`, `404`, a refused connection or a timeout: the same chunk again after
//!   `Retry-After`, else the back-off (1 s doubling to 30 s). `401`: the token file is read again
//!   and the chunk resent at once (a second `401` backs off). `400`: the chunk is dropped, logged
//!   once, and the log is marked final where it ends (an empty final chunk), so readers stop
//!   waiting; nothing more of that build is sent. `413`: the chunk is halved.
//! - **Bounded memory**: a build's unsent bytes are held in memory, at most
//!   [`LogsConfig::max_unsent_per_build`] per build and [`LogsConfig::max_unsent_total`] over all
//!   builds. Output beyond a bound is not kept: the log is cut there (what was held is sent, then
//!   the final chunk at that point), counted in `cut` and warned about once per build. The stored
//!   log is then a prefix of `consoleText`. (The real plugin reads the unsent log from the build
//!   directory and has no such bound; the double holds the console in memory.)

use crate::client::{self, Http, Token};
use crate::plugin::PluginError;
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, Semaphore, watch};

/// How logs are sent.
#[derive(Debug, Clone)]
pub struct LogsConfig {
    /// `VARROA_PLUGIN_URL`.
    pub url: String,
    /// `VARROA_PLUGIN_TOKEN_FILE`.
    pub token_file: PathBuf,
    /// A chunk goes when its oldest byte is this old (1 s; the double scales it by its time
    /// scale).
    pub chunk_interval: Duration,
    /// ... or when this many bytes wait (256 KiB).
    pub chunk_bytes: usize,
    /// The largest chunk (1 MiB, the mite's limit).
    pub max_chunk: usize,
    /// Chunks in flight over all builds (4).
    pub max_in_flight: usize,
    /// Unsent bytes held per build (4 MiB); output beyond it cuts the log.
    pub max_unsent_per_build: usize,
    /// Unsent bytes held over all builds (64 MiB); output beyond it cuts the logs it reaches.
    pub max_unsent_total: usize,
    /// One request's timeout (30 s: the mite waits up to 10 s for the gateway).
    pub request_timeout: Duration,
    /// The first back-off (1 s).
    pub backoff_initial: Duration,
    /// The longest back-off (30 s).
    pub backoff_max: Duration,
}

impl LogsConfig {
    /// The protocol's defaults.
    pub fn new(url: impl Into<String>, token_file: impl Into<PathBuf>) -> LogsConfig {
        LogsConfig {
            url: url.into(),
            token_file: token_file.into(),
            chunk_interval: Duration::from_secs(1),
            chunk_bytes: 256 << 10,
            max_chunk: 1 << 20,
            max_in_flight: 4,
            max_unsent_per_build: 4 << 20,
            max_unsent_total: 64 << 20,
            request_timeout: Duration::from_secs(30),
            backoff_initial: Duration::from_secs(1),
            backoff_max: Duration::from_secs(30),
        }
    }
}

/// What the logs client did so far (`GET /__double/plugin`, `logs`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LogCounters {
    /// Logs opened (one per build that started).
    pub opened: u64,
    /// Logs the mite answered complete.
    pub complete: u64,
    /// Chunks answered `200`.
    pub chunks: u64,
    /// Bytes the mite acknowledged.
    pub bytes: u64,
    /// Requests made.
    pub requests: u64,
    /// Attempts to send again (`503`, `5xx`, `404`, `401`, refused connections, timeouts).
    pub retries: u64,
    /// `409` answers.
    pub conflicts: u64,
    /// Chunks answered `400` (dropped; their log was marked final there).
    pub rejected: u64,
    /// Logs cut at a memory bound.
    pub cut: u64,
    /// Logs given up (the store's end is before what this side still holds).
    pub abandoned: u64,
    /// Unsent bytes held now.
    pub held_bytes: u64,
    /// What went wrong last, if anything did since the last `200`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

#[derive(Debug)]
struct Inner {
    config: LogsConfig,
    base: String,
    http: Http,
    token: Token,
    slots: Semaphore,
    held: AtomicUsize,
    counters: Mutex<LogCounters>,
    stopped: watch::Sender<bool>,
}

impl Inner {
    fn counters(&self) -> MutexGuard<'_, LogCounters> {
        self.counters.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The logs client.
#[derive(Debug)]
pub struct LogsClient {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct LogState {
    /// The log offset of `unsent[0]`.
    base: u64,
    unsent: Vec<u8>,
    /// When the oldest unsent byte arrived.
    oldest: Option<Instant>,
    /// No more output: send the rest and the final chunk.
    closed: bool,
    /// Output is not kept any more (cut at a bound, or a chunk was refused).
    ignoring: bool,
    /// Incoming bytes the store already holds (a `409` said its log ends further on).
    skip: u64,
    /// Nothing more will be sent.
    done: bool,
}

#[derive(Debug)]
struct Log {
    job: String,
    build: u64,
    state: Mutex<LogState>,
    work: Notify,
}

impl Log {
    fn state(&self) -> MutexGuard<'_, LogState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A build's open log: [`LogHandle::append`] what it prints, [`LogHandle::close`] when it ends.
#[derive(Debug)]
pub struct LogHandle {
    log: Arc<Log>,
    inner: Arc<Inner>,
}

impl LogHandle {
    /// Appends console bytes (never waits; beyond a bound the log is cut).
    pub fn append(&self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let mut st = self.log.state();
        if st.ignoring || st.closed || st.done {
            return;
        }
        let mut bytes = bytes;
        if st.skip > 0 {
            let n = (st.skip.min(bytes.len() as u64)) as usize;
            st.skip -= n as u64;
            st.base += n as u64;
            bytes = &bytes[n..];
            if bytes.is_empty() {
                return;
            }
        }
        let cfg = &self.inner.config;
        let total = self.inner.held.load(Ordering::Relaxed);
        if st.unsent.len() + bytes.len() > cfg.max_unsent_per_build || total + bytes.len() > cfg.max_unsent_total {
            st.ignoring = true;
            st.closed = true;
            self.inner.counters().cut += 1;
            tracing::warn!(
                job = %self.log.job,
                build = self.log.build,
                at = st.base + st.unsent.len() as u64,
                per_build = cfg.max_unsent_per_build,
                total = cfg.max_unsent_total,
                "the unsent console log reached its memory bound: the log is cut here and marked final"
            );
        } else {
            self.inner.held.fetch_add(bytes.len(), Ordering::Relaxed);
            st.unsent.extend_from_slice(bytes);
            st.oldest.get_or_insert_with(Instant::now);
        }
        drop(st);
        self.log.work.notify_one();
    }

    /// The build's log is closed: what is left goes, with the final chunk.
    pub fn close(&self) {
        self.log.state().closed = true;
        self.log.work.notify_one();
    }
}

/// What one chunk came to.
enum Sent {
    /// `200`/`409`: the store's log ends at `next`; `complete`: nothing more to send.
    At { next: u64, complete: bool, conflict: bool },
    /// `400`.
    Rejected(String),
    /// `413`.
    TooLarge,
    /// `401`.
    Unauthorized,
    /// Send the same chunk again, after this or the back-off.
    Again(Option<Duration>, String),
}

#[derive(serde::Deserialize)]
struct Position {
    next: u64,
    #[serde(default)]
    complete: bool,
}

/// `{job}` of the path: every folder segment percent-encoded (RFC 3986 unreserved characters
/// stay), folders separated by `/`.
pub fn job_path(job: &str) -> String {
    job.split('/')
        .map(|seg| {
            let mut out = String::with_capacity(seg.len());
            for b in seg.bytes() {
                if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                    out.push(b as char);
                } else {
                    out.push_str(&format!("%{b:02X}"));
                }
            }
            out
        })
        .collect::<Vec<_>>()
        .join("/")
}

impl LogsClient {
    /// Checks the URL and reads the token file (a missing one is read before the first request).
    pub fn new(config: LogsConfig) -> Result<LogsClient, PluginError> {
        let base = client::base_url(&config.url)?;
        Ok(LogsClient {
            inner: Arc::new(Inner {
                http: client::http(config.request_timeout),
                token: Token::new(config.token_file.clone()),
                slots: Semaphore::new(config.max_in_flight.max(1)),
                held: AtomicUsize::new(0),
                counters: Mutex::new(LogCounters::default()),
                stopped: watch::Sender::new(false),
                base,
                config,
            }),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &LogsConfig {
        &self.inner.config
    }

    /// The counters now.
    pub fn counters(&self) -> LogCounters {
        let mut c = self.inner.counters().clone();
        c.held_bytes = self.inner.held.load(Ordering::Relaxed) as u64;
        c
    }

    /// Stops every sender (what is unsent stays unsent).
    pub fn close(&self) {
        self.inner.stopped.send_replace(true);
    }

    /// Opens the log of a build that started and starts its sender on the current runtime.
    pub fn open(&self, job: &str, build: u64) -> LogHandle {
        self.inner.counters().opened += 1;
        let log =
            Arc::new(Log { job: job.to_owned(), build, state: Mutex::new(LogState::default()), work: Notify::new() });
        let (inner, l) = (self.inner.clone(), log.clone());
        tokio::spawn(async move {
            let mut stopped = inner.stopped.subscribe();
            tokio::select! {
                _ = sender(&inner, &l) => {}
                _ = stopped.wait_for(|s| *s) => {}
            }
            // Whatever is still held is let go.
            let mut st = l.state();
            inner.held.fetch_sub(st.unsent.len(), Ordering::Relaxed);
            st.unsent = Vec::new();
            st.done = true;
        });
        LogHandle { log, inner: self.inner.clone() }
    }
}

/// Drops the first `n` unsent bytes (acknowledged, or held by the store already).
fn advance(inner: &Inner, st: &mut LogState, to: u64) {
    let have = st.unsent.len() as u64;
    let n = to.saturating_sub(st.base).min(have) as usize;
    st.unsent.drain(..n);
    inner.held.fetch_sub(n, Ordering::Relaxed);
    st.base += n as u64;
    if to > st.base {
        // The store is ahead of what this side has been given so far.
        st.skip = to - st.base;
        st.base = to;
    }
    st.oldest = if st.unsent.is_empty() { None } else { Some(Instant::now()) };
}

async fn sender(inner: &Inner, log: &Log) {
    let cfg = &inner.config;
    let mut limit = cfg.max_chunk.max(1);
    let mut rejected_once = false;
    loop {
        // Wait for a chunk to be due.
        let (offset, chunk, last) = loop {
            let work = log.work.notified();
            tokio::pin!(work);
            work.as_mut().enable();
            let wait = {
                let st = log.state();
                if st.done {
                    return;
                }
                let age = st.oldest.map(|t| t.elapsed());
                let due = st.closed
                    || st.unsent.len() >= cfg.chunk_bytes
                    || age.is_some_and(|a| a >= cfg.chunk_interval && !st.unsent.is_empty());
                if due {
                    let len = st.unsent.len().min(limit);
                    let last = st.closed && len == st.unsent.len();
                    break (st.base, Bytes::copy_from_slice(&st.unsent[..len]), last);
                }
                age.map(|a| cfg.chunk_interval.saturating_sub(a))
            };
            match wait {
                Some(d) => {
                    let _ = tokio::time::timeout(d, work).await;
                }
                None => work.await,
            }
        };
        // Send it until it lands (or cannot).
        let mut failures: u32 = 0;
        let mut reread = false;
        let outcome = loop {
            let token = inner.token.get();
            let sent = {
                let _slot = inner.slots.acquire().await;
                post(inner, log, offset, &chunk, last, token.as_deref()).await
            };
            let wait = match sent {
                Sent::Unauthorized => {
                    inner.counters().last_error = Some("401: the token is not the mite's".into());
                    if !reread && inner.token.reread(token.as_deref()) {
                        reread = true;
                        inner.counters().retries += 1;
                        continue;
                    }
                    reread = true;
                    failures = failures.saturating_add(1);
                    client::backoff(cfg.backoff_initial, cfg.backoff_max, failures)
                }
                Sent::Again(after, reason) => {
                    failures = failures.saturating_add(1);
                    reread = false;
                    let wait = after.unwrap_or_else(|| client::backoff(cfg.backoff_initial, cfg.backoff_max, failures));
                    tracing::debug!(job = %log.job, build = log.build, offset, retry_in = ?wait, reason, "console log chunk not stored; sending it again");
                    inner.counters().last_error = Some(reason);
                    wait
                }
                other => break other,
            };
            inner.counters().retries += 1;
            tokio::time::sleep(wait).await;
        };
        let mut st = log.state();
        match outcome {
            Sent::At { next, complete, conflict } => {
                limit = cfg.max_chunk.max(1);
                let mut c = inner.counters();
                if conflict {
                    c.conflicts += 1;
                } else {
                    c.chunks += 1;
                    c.bytes += chunk.len() as u64;
                    c.last_error = None;
                }
                if complete {
                    c.complete += 1;
                    drop(c);
                    st.done = true;
                    return;
                }
                drop(c);
                if next < st.base {
                    // The store lost what this side no longer holds: nothing can fill the gap.
                    inner.counters().abandoned += 1;
                    tracing::error!(job = %log.job, build = log.build, next, held_from = st.base, "the stored console log ends before what is still held; giving it up");
                    st.done = true;
                    return;
                }
                if last && !conflict {
                    // The final chunk landed (a mite that does not say `complete` still took it).
                    st.done = true;
                    let held = st.unsent.len();
                    inner.held.fetch_sub(held, Ordering::Relaxed);
                    st.unsent = Vec::new();
                    return;
                }
                advance(inner, &mut st, next);
            }
            Sent::Rejected(error) => {
                inner.counters().rejected += 1;
                if !rejected_once {
                    tracing::error!(job = %log.job, build = log.build, offset, error, "the mite refused a console log chunk (400): the log stops here and is marked final");
                }
                if rejected_once || (last && chunk.is_empty()) {
                    st.done = true;
                    return;
                }
                rejected_once = true;
                // Nothing more is kept or sent but the empty final chunk at this offset.
                let held = st.unsent.len();
                inner.held.fetch_sub(held, Ordering::Relaxed);
                st.unsent = Vec::new();
                st.oldest = None;
                st.ignoring = true;
                st.closed = true;
            }
            Sent::TooLarge => {
                limit = (chunk.len() / 2).max(1);
                tracing::warn!(job = %log.job, build = log.build, bytes = chunk.len(), now = limit, "the mite answered 413 to a console log chunk; sending smaller ones");
                if chunk.len() <= 1 {
                    st.done = true;
                    return;
                }
            }
            Sent::Unauthorized | Sent::Again(..) => {}
        }
    }
}

async fn post(inner: &Inner, log: &Log, offset: u64, chunk: &Bytes, last: bool, token: Option<&str>) -> Sent {
    let mut uri = format!("{}/v1/logs/{}/{}?offset={offset}", inner.base, job_path(&log.job), log.build);
    if last {
        uri.push_str("&final=true");
    }
    let mut req = Request::builder()
        .method(Method::POST)
        .uri(uri)
        .header(http::header::CONTENT_TYPE, "application/octet-stream")
        .header(http::header::ACCEPT, "application/json");
    if let Some(t) = token {
        req = req.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let req = match req.body(Full::new(chunk.clone())) {
        Ok(r) => r,
        Err(e) => return Sent::Rejected(format!("building the request: {e}")),
    };
    inner.counters().requests += 1;
    let a = match client::exchange(&inner.http, req, inner.config.request_timeout).await {
        Ok(a) => a,
        Err(reason) => return Sent::Again(None, reason),
    };
    let position = || serde_json::from_slice::<Position>(&a.body).ok();
    match a.status {
        StatusCode::OK => match position() {
            Some(p) => Sent::At { next: p.next, complete: p.complete, conflict: false },
            None => Sent::At { next: offset + chunk.len() as u64, complete: last, conflict: false },
        },
        StatusCode::CONFLICT => match position() {
            Some(p) => Sent::At { next: p.next, complete: p.complete, conflict: true },
            None => Sent::Again(None, format!("409 without a position: {}", a.error())),
        },
        StatusCode::BAD_REQUEST => Sent::Rejected(a.error()),
        StatusCode::PAYLOAD_TOO_LARGE => Sent::TooLarge,
        StatusCode::UNAUTHORIZED => Sent::Unauthorized,
        s => Sent::Again(a.retry_after, format!("{} {}", s.as_u16(), a.error())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_paths_encode_each_segment() {
        assert_eq!(job_path("team/my app"), "team/my%20app");
        assert_eq!(job_path("a+b/ü~x"), "a%2Bb/%C3%BC~x");
    }
}
