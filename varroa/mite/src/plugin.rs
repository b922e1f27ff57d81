//! The plugin listener: what the Varroa Jenkins plugin sends the mite over the pod's loopback
//! (docs/varroa/plugin-protocol.md), and its way to the gateway.
//!
//! - **Token.** At start the mite writes 32 random bytes, hex-encoded, to `--plugin-token-file`
//!   ([`write_token`]: a temporary file in the same directory, mode 0640, fsync, rename; the
//!   directory is created when missing). Every request must carry `Authorization: Bearer
//!   <token>`, compared in constant time; anything else is `401`.
//! - **`POST /v1/events`.** A body of at most [`MAX_REQUEST_BYTES`] (`413`), `{"events": [...]}`
//!   (`400` otherwise), at most [`MAX_EVENTS_PER_BATCH`] events (`413`: the plugin halves the
//!   batch). Each event is checked with [`parse_event`]; the malformed ones are answered as
//!   `rejected` (`{id, error}`, the error naming the field) and the others are forwarded over
//!   the current gateway stream as one `BuildEvents` batch. The answer waits for the batch's
//!   `EventsAck` (at most [`ACK_TIMEOUT`]): `200 {"accepted", "rejected"}` once JetStream stored
//!   them; `503` with `Retry-After` when the stream is down, the ack does not come in time, or
//!   the gateway says retry (NATS or JetStream unavailable).
//! - **`POST /v1/logs/{job}/{build}?offset=N[&final=true]`.** A chunk of a build's console log:
//!   the job is the path between `/v1/logs/` and the last `/`, percent-decoded (`team/app` or
//!   `team%2Fapp`), checked as the protocol's `job`; the build 1 to 2^53; `offset` required, at
//!   most 2^53; the body the bytes, at most [`MAX_CHUNK_BYTES`] (`413`), empty only when final.
//!   Anything malformed is `400` naming it. The chunk goes over the current gateway stream as a
//!   `LogChunk`; the answer waits for its `LogAck` (at most [`ACK_TIMEOUT`]): `200 {"next",
//!   "complete"}` once the write landed in the log store, `409 {"next", "complete", "error"}` when
//!   the offset is not the stored end (send from `next`), `503` with `Retry-After` when the stream
//!   is down, the ack is late, or the store cannot take it now. At most [`MAX_LOG_IN_FLIGHT`]
//!   chunks are forwarded at once (more: `503`, `Retry-After: 1`), which bounds the memory of
//!   chunks in flight to 4 MiB.
//! - **`POST /v1/claims`.** A queued build's claim ([`claims::parse_request`]: `400` naming the
//!   field, `413` above [`claims::MAX_REQUEST_BYTES`]). With the gate off
//!   ([`ClaimSettings::gate`]) it is answered `ungated` at once. With it on, the deadline is the
//!   request's arrival plus the claim's budget; the claim goes over the current gateway stream
//!   as a `ClaimRequest` whose `budget_ms` is [`claims::forward_budget`] of what is left, and the
//!   mite waits for the `ClaimAnswer` with its number until that share is spent (the rest is the
//!   mite's own, to answer). Granted, refused and rejected (`400`) pass through; the ledger's
//!   retry, the gateway's `LEDGER_DOWN`, the stream being down, no answer in time or more than
//!   [`MAX_CLAIMS_IN_FLIGHT`] claims at once are answered as the controller's
//!   [`WhenLedgerDown`] says: `retry` (failClosed) or `ungated` (failOpen). An answer that
//!   arrives later is dropped.
//! - **`POST /v1/artifacts/{job}/{build}`.** A finished build's request for upload URLs of its
//!   archived artifacts (the job and build as in `/v1/logs`; the body
//!   [`artifacts::parse_request`]: `{"v": 1, "files": [{"path", "size"}]}`, `400` naming the field:
//!   a path with `..`, `.` or empty segments, absolute, with a backslash or control characters,
//!   more than 1,000 files, a file over 5 GiB; `413` above [`artifacts::MAX_REQUEST_BYTES`]). It
//!   goes over the current gateway stream as an `ArtifactRequest`; the answer waits for its
//!   `ArtifactAnswer` (at most [`ACK_TIMEOUT`]): `200 {"uploads": [{"path", "url"}], "expires"}`,
//!   `400` (the gateway refused it), `501` (the gateway's store cannot presign: an `s3://` store
//!   is needed; the plugin archives with Jenkins' own archiving), `503` with `Retry-After` (the
//!   stream is down, no answer in time, the gateway cannot sign now).
//! - At most [`MAX_IN_FLIGHT`] requests are served at once; more get `503` with `Retry-After: 1`.
//!
//! The link's session ([`crate::link`]) owns the other end: while a stream is welcomed it
//! installs a sender in the [`BatchSlot`]; it numbers each batch (and each chunk), keeps its
//! responder until the gateway's `EventsAck` (`LogAck`) with that number arrives, and fails every
//! one still waiting when the stream ends, so the plugin gets `503` and sends again (the
//! gateway's JetStream deduplicates events by id; the log store does not write a chunk twice).

use crate::settings::ClaimSettings;
use bytes::Bytes;
use http::request::Parts;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc, oneshot};
use varroa_link::artifacts;
use varroa_link::builds::{MAX_EVENTS_PER_BATCH, MAX_REQUEST_BYTES, parse_event, raw_id};
use varroa_link::claims::{self, WhenLedgerDown};
use varroa_link::proto::v1 as pb;

/// The most plugin requests served at once.
pub const MAX_IN_FLIGHT: usize = 16;
/// The most log chunks forwarded to the gateway at once (the gateway writes at most as many per
/// stream at once).
pub const MAX_LOG_IN_FLIGHT: usize = 4;
/// The largest log chunk.
pub const MAX_CHUNK_BYTES: usize = varroa_blobs::logs::MAX_CHUNK_BYTES;
/// The most build claims waiting for their answer at once; more are answered as if the ledger
/// were down, with [`BUSY_CLAIM_RETRY_AFTER`].
pub const MAX_CLAIMS_IN_FLIGHT: usize = 64;
/// The `after_ms` of a `retry` the mite decides itself (the stream is down, no answer in time).
pub const CLAIM_RETRY_AFTER: Duration = Duration::from_millis(1_000);
/// The `after_ms` of a `retry` because [`MAX_CLAIMS_IN_FLIGHT`] claims are waiting already.
pub const BUSY_CLAIM_RETRY_AFTER: Duration = Duration::from_millis(250);
/// How long a request waits for the gateway's acknowledgement of its batch.
pub const ACK_TIMEOUT: Duration = Duration::from_secs(10);
/// How long reading a request's headers, and then its body, may take.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of a request body read to answer it: a body larger than [`MAX_REQUEST_BYTES`] is
/// read (and dropped) up to this before the `413`, so that the plugin sees the answer rather
/// than a connection reset; a larger one is answered at once.
const DRAIN_MAX: u64 = 4 * MAX_REQUEST_BYTES as u64;
/// How long a shutdown waits for requests in flight.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(3);
/// The longest error text of one rejected event.
const MAX_ERROR_TEXT: usize = 512;
/// `Retry-After` when the gateway stream is down (the mite is reconnecting).
const RETRY_STREAM_DOWN: u64 = 2;
/// `Retry-After` when the gateway did not answer in time.
const RETRY_ACK_TIMEOUT: u64 = 5;

/// A batch for the gateway, and where its answer goes: the `EventsAck`, or why there is none.
#[derive(Debug)]
pub(crate) struct OutboundBatch {
    /// The events' JSON, each already checked.
    pub events: Vec<Vec<u8>>,
    /// Completed with the gateway's ack, or with the reason the stream could not carry it.
    pub respond: oneshot::Sender<Result<pb::EventsAck, String>>,
}

/// A log chunk for the gateway, and where its answer goes.
#[derive(Debug)]
pub(crate) struct OutboundChunk {
    /// The chunk (its `id` is set by the link).
    pub chunk: pb::LogChunk,
    /// Completed with the gateway's ack, or with the reason the stream could not carry it.
    pub respond: oneshot::Sender<Result<pb::LogAck, String>>,
}

/// A build claim for the gateway, and where its answer goes.
#[derive(Debug)]
pub(crate) struct OutboundClaim {
    /// The claim (its `id` is set by the link).
    pub claim: pb::ClaimRequest,
    /// Completed with the gateway's answer, or with the reason the stream could not carry it.
    pub respond: oneshot::Sender<Result<pb::ClaimAnswer, String>>,
}

/// An artifact request for the gateway, and where its answer goes.
#[derive(Debug)]
pub(crate) struct OutboundArtifacts {
    /// The request (its `id` is set by the link).
    pub request: pb::ArtifactRequest,
    /// Completed with the gateway's answer, or with the reason the stream could not carry it.
    pub respond: oneshot::Sender<Result<pb::ArtifactAnswer, String>>,
}

/// What the plugin listener hands the current stream.
#[derive(Debug)]
pub(crate) enum Outbound {
    /// A batch of build events.
    Events(OutboundBatch),
    /// A console log chunk.
    Log(OutboundChunk),
    /// A build claim.
    Claim(OutboundClaim),
    /// An artifact request.
    Artifacts(OutboundArtifacts),
}

/// Where the current gateway stream takes batches and chunks: empty while no stream is
/// welcomed.
#[derive(Clone, Default)]
pub(crate) struct BatchSlot(Arc<Mutex<Option<mpsc::Sender<Outbound>>>>);

impl BatchSlot {
    fn current(&self) -> Option<mpsc::Sender<Outbound>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Makes `tx` the current stream's sender until the guard drops.
    pub(crate) fn install(&self, tx: mpsc::Sender<Outbound>) -> SlotGuard {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
        SlotGuard(self.clone())
    }
}

/// Empties the [`BatchSlot`] when the stream that installed it ends.
pub(crate) struct SlotGuard(BatchSlot);

impl Drop for SlotGuard {
    fn drop(&mut self) {
        *self.0.0.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// Writes a new token (32 random bytes, hex) to `path` atomically, mode 0640, creating the
/// directory; returns it.
pub fn write_token(path: &Path) -> std::io::Result<String> {
    use ring::rand::SecureRandom;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut bytes = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| std::io::Error::other("the system's random number generator failed"))?;
    let token = crate::hex(&bytes);
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir)?;
    let name = path.file_name().ok_or_else(|| std::io::Error::other("not a file path"))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = dir.join(tmp_name);
    let result = (|| {
        let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o640).open(&tmp)?;
        // The umask may have taken bits away; the pod's fsGroup needs group read.
        f.set_permissions(std::fs::Permissions::from_mode(0o640))?;
        f.write_all(token.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        // The rename is durable once the directory is synced (best effort: some file systems
        // refuse to open a directory for syncing).
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map(|()| token)
}

/// Equal in time independent of where `a` and `b` differ (their lengths are not secret).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// Whether the request carries `Authorization: Bearer <token>`.
fn authorized(value: Option<&HeaderValue>, token: &str) -> bool {
    let Some(v) = value.and_then(|v| v.to_str().ok()) else { return false };
    let Some((scheme, given)) = v.split_once(' ') else { return false };
    scheme.eq_ignore_ascii_case("bearer") && constant_time_eq(given.trim().as_bytes(), token.as_bytes())
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Outcome {
    outcome: &'static str,
}

/// The listener's metrics.
#[derive(Default)]
pub(crate) struct PluginMetrics {
    requests: Family<Outcome, Counter>,
    events: Family<Outcome, Counter>,
    log_chunks: Family<Outcome, Counter>,
    log_bytes: Counter,
    in_flight: Gauge,
    claims: Family<Outcome, Counter>,
    claims_undecided: Family<Why, Counter>,
    claims_in_flight: Gauge,
    artifact_requests: Family<Outcome, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Why {
    why: &'static str,
}

impl PluginMetrics {
    pub(crate) fn register(&self, r: &mut Registry) {
        r.register("varroa_mite_plugin_requests", "Requests of the Jenkins plugin by outcome", self.requests.clone());
        r.register(
            "varroa_mite_plugin_events",
            "Build events from the plugin by outcome (accepted: stored in JetStream; rejected: malformed; retry: answered 503)",
            self.events.clone(),
        );
        r.register(
            "varroa_mite_plugin_log_chunks",
            "Console log chunks from the plugin by outcome (stored, conflict, refused: malformed, retry: answered 503)",
            self.log_chunks.clone(),
        );
        r.register(
            "varroa_mite_plugin_log_bytes",
            "Console log bytes the gateway acknowledged as stored",
            self.log_bytes.clone(),
        );
        r.register(
            "varroa_mite_plugin_requests_in_flight",
            "Event requests of the plugin being served now",
            self.in_flight.clone(),
        );
        r.register(
            "varroa_mite_plugin_claims",
            "Build claims of the plugin by what it was answered (granted, refused, retry, ungated: the gate is off, fail_open: ungated because the ledger could not decide, rejected: malformed)",
            self.claims.clone(),
        );
        r.register(
            "varroa_mite_plugin_claims_undecided",
            "Build claims the ledger did not decide, by why (ledger_retry, ledger_down: the gateway said so, stream_down, timeout, busy); answered per whenLedgerDown",
            self.claims_undecided.clone(),
        );
        r.register(
            "varroa_mite_plugin_artifact_requests",
            "Artifact upload requests of the plugin by outcome (signed, refused: malformed, unsupported: the store cannot presign, retry: answered 503)",
            self.artifact_requests.clone(),
        );
        r.register(
            "varroa_mite_plugin_claims_in_flight",
            "Build claims waiting for the ledger's answer now",
            self.claims_in_flight.clone(),
        );
    }
    fn artifacts(&self, outcome: &'static str) {
        self.artifact_requests.get_or_create(&Outcome { outcome }).inc();
    }
    fn claim(&self, outcome: &'static str) {
        self.claims.get_or_create(&Outcome { outcome }).inc();
    }
    fn request(&self, outcome: &'static str) {
        self.requests.get_or_create(&Outcome { outcome }).inc();
    }
    fn log_chunk(&self, outcome: &'static str) {
        self.log_chunks.get_or_create(&Outcome { outcome }).inc();
    }
    fn events(&self, outcome: &'static str, n: usize) {
        if n > 0 {
            self.events.get_or_create(&Outcome { outcome }).inc_by(n as u64);
        }
    }
}

/// A request's place among the [`MAX_IN_FLIGHT`], counted in the gauge while it is held.
struct InFlight {
    _permit: tokio::sync::OwnedSemaphorePermit,
    gauge: Gauge,
}

impl InFlight {
    fn new(permit: tokio::sync::OwnedSemaphorePermit, gauge: &Gauge) -> InFlight {
        gauge.inc();
        InFlight { _permit: permit, gauge: gauge.clone() }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

struct State {
    token: String,
    slot: BatchSlot,
    permits: Arc<Semaphore>,
    log_permits: Arc<Semaphore>,
    claim_permits: Arc<Semaphore>,
    claims: ClaimSettings,
    metrics: Arc<PluginMetrics>,
}

/// A bound plugin listener, not serving yet.
pub(crate) struct PluginServer {
    listener: TcpListener,
    addr: SocketAddr,
    state: Arc<State>,
}

impl PluginServer {
    pub(crate) async fn bind(
        addr: SocketAddr,
        token: String,
        slot: BatchSlot,
        claims: ClaimSettings,
        metrics: Arc<PluginMetrics>,
    ) -> std::io::Result<PluginServer> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State {
            token,
            slot,
            permits: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            log_permits: Arc::new(Semaphore::new(MAX_LOG_IN_FLIGHT)),
            claim_permits: Arc::new(Semaphore::new(MAX_CLAIMS_IN_FLIGHT)),
            claims,
            metrics,
        });
        Ok(PluginServer { listener, addr, state })
    }

    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves until `shutdown` completes, then waits briefly for the requests in flight.
    pub(crate) async fn serve(self, shutdown: impl Future<Output = ()>) {
        let PluginServer { listener, addr, state } = self;
        if !addr.ip().is_loopback() {
            tracing::warn!(%addr, "the plugin listener is not on a loopback address: anything that reaches it can try tokens");
        }
        tracing::info!(%addr, claims_gate = state.claims.gate, when_ledger_down = state.claims.when_ledger_down.as_str(),
            "plugin listener up (POST /v1/events, POST /v1/claims, POST /v1/logs/{{job}}/{{build}})");
        let graceful = GracefulShutdown::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = listener.accept() => {
                    let (stream, peer) = match accepted {
                        Ok(v) => v,
                        Err(e) => {
                            tracing::warn!(error = %e, "plugin listener: accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let state = state.clone();
                    let svc = service_fn(move |req| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(handle(&state, req).await) }
                    });
                    let conn = hyper::server::conn::http1::Builder::new()
                        .timer(TokioTimer::new())
                        .header_read_timeout(READ_TIMEOUT)
                        .serve_connection(TokioIo::new(stream), svc);
                    let conn = graceful.watch(conn);
                    tokio::spawn(async move {
                        if let Err(e) = conn.await {
                            tracing::debug!(%peer, error = %e, "plugin connection ended with an error");
                        }
                    });
                }
            }
        }
        drop(listener);
        if tokio::time::timeout(SHUTDOWN_TIMEOUT, graceful.shutdown()).await.is_err() {
            tracing::warn!("plugin requests still open after {SHUTDOWN_TIMEOUT:?}; dropped");
        }
    }
}

/// An answer: status, JSON body, and the headers some statuses need.
struct Answer {
    status: StatusCode,
    body: Value,
    retry_after: Option<u64>,
    allow: Option<&'static str>,
    outcome: &'static str,
}

impl Answer {
    fn error(status: StatusCode, outcome: &'static str, text: impl Into<String>) -> Answer {
        Answer { status, body: json!({ "error": text.into() }), retry_after: None, allow: None, outcome }
    }
    fn retry(outcome: &'static str, seconds: u64, text: impl Into<String>) -> Answer {
        Answer { retry_after: Some(seconds.max(1)), ..Answer::error(StatusCode::SERVICE_UNAVAILABLE, outcome, text) }
    }
    fn method(allow: &'static str, method: &Method) -> Answer {
        Answer {
            allow: Some(allow),
            ..Answer::error(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                format!("method {method} is not allowed here; use {allow}"),
            )
        }
    }
    fn into_response(self) -> Response<Full<Bytes>> {
        let body = serde_json::to_vec(&self.body).unwrap_or_else(|_| b"{}".to_vec());
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = self.status;
        let h = r.headers_mut();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(s) = self.retry_after {
            h.insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        if let Some(a) = self.allow {
            h.insert(header::ALLOW, HeaderValue::from_static(a));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        r
    }
}

async fn handle(state: &State, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let mut body = Some(body);
    let answer = route(state, &parts, &mut body).await;
    // A body not read yet is read and dropped (bounded) before the answer: closing a connection
    // with unread data resets it, and the client could lose the answer.
    if let Some(b) = body {
        let _ = read_body(b, declared_length(&parts), 0).await;
    }
    state.metrics.request(answer.outcome);
    answer.into_response()
}

fn declared_length(parts: &Parts) -> Option<u64> {
    parts.headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse().ok())
}

enum BodyError {
    TooLarge,
    Timeout,
    Read(String),
}

/// Reads a body of at most `keep` bytes; a larger one is read on (and dropped) up to
/// [`DRAIN_MAX`], then refused.
async fn read_body(mut body: Incoming, declared: Option<u64>, keep: usize) -> Result<Bytes, BodyError> {
    if declared.is_some_and(|n| n > DRAIN_MAX) {
        return Err(BodyError::TooLarge);
    }
    let read = async {
        let mut buf = Vec::new();
        let mut total = 0u64;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| BodyError::Read(e.to_string()))?;
            if let Ok(data) = frame.into_data() {
                total += data.len() as u64;
                if total > DRAIN_MAX {
                    return Err(BodyError::TooLarge);
                }
                if total <= keep as u64 {
                    buf.extend_from_slice(&data);
                }
            }
        }
        if total > keep as u64 { Err(BodyError::TooLarge) } else { Ok(Bytes::from(buf)) }
    };
    tokio::time::timeout(READ_TIMEOUT, read).await.unwrap_or(Err(BodyError::Timeout))
}

async fn route(state: &State, req: &Parts, body: &mut Option<Incoming>) -> Answer {
    if !authorized(req.headers.get(header::AUTHORIZATION), &state.token) {
        return Answer::error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong token; fix: send Authorization: Bearer <the token file's contents>, and read the file \
             again (a restarted mite writes a new token)",
        );
    }
    let path = req.uri.path().to_owned();
    let post = req.method == Method::POST;
    match path.as_str() {
        "/v1/events" if post => match body.take() {
            Some(b) => events(state, req, b).await,
            None => Answer::error(StatusCode::BAD_REQUEST, "bad_request", "no body"),
        },
        "/v1/claims" if post => match body.take() {
            Some(b) => claim(state, req, b).await,
            None => Answer::error(StatusCode::BAD_REQUEST, "bad_request", "no body"),
        },
        p if p.starts_with("/v1/logs/") && post => match body.take() {
            Some(b) => logs(state, req, b).await,
            None => Answer::error(StatusCode::BAD_REQUEST, "bad_request", "no body"),
        },
        p if p.starts_with("/v1/artifacts/") && post => match body.take() {
            Some(b) => artifact_urls(state, req, b).await,
            None => Answer::error(StatusCode::BAD_REQUEST, "bad_request", "no body"),
        },
        "/v1/events" | "/v1/claims" => Answer::method("POST", &req.method),
        p if p.starts_with("/v1/logs/") || p.starts_with("/v1/artifacts/") => Answer::method("POST", &req.method),
        p => Answer::error(
            StatusCode::NOT_FOUND,
            "not_found",
            format!(
                "no such endpoint {:?}: this mite serves POST /v1/events, POST /v1/claims, POST \
                 /v1/logs/{{job}}/{{build}}?offset=N and POST /v1/artifacts/{{job}}/{{build}} \
                 (docs/varroa/plugin-protocol.md)",
                varroa_link::kv::bounded(p, 128)
            ),
        ),
    }
}

async fn events(state: &State, req: &Parts, body: Incoming) -> Answer {
    let Ok(permit) = state.permits.clone().try_acquire_owned() else {
        return Answer::retry("busy", 1, format!("the mite is serving {MAX_IN_FLIGHT} requests already; retry"));
    };
    let _in_flight = InFlight::new(permit, &state.metrics.in_flight);
    let too_large = || {
        Answer::error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("the body is larger than {MAX_REQUEST_BYTES} bytes; send fewer events per request"),
        )
    };
    let body = match read_body(body, declared_length(req), MAX_REQUEST_BYTES).await {
        Ok(b) => b,
        Err(BodyError::TooLarge) => return too_large(),
        Err(BodyError::Read(e)) => {
            return Answer::error(StatusCode::BAD_REQUEST, "bad_request", format!("cannot read the body: {e}"));
        }
        Err(BodyError::Timeout) => {
            return Answer::error(
                StatusCode::REQUEST_TIMEOUT,
                "timeout",
                format!("the body did not arrive within {READ_TIMEOUT:?}"),
            );
        }
    };
    let shape = "send {\"events\": [...]}, a JSON object with a list of events";
    let doc: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return Answer::error(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("the body is not JSON ({e}); {shape}"),
            );
        }
    };
    let Some(list) = doc.get("events").and_then(Value::as_array) else {
        return Answer::error(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("the body has no \"events\" list; {shape}"),
        );
    };
    if list.len() > MAX_EVENTS_PER_BATCH {
        return Answer::error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("{} events in one request; at most {MAX_EVENTS_PER_BATCH}: send smaller batches", list.len()),
        );
    }

    let mut rejected = Vec::new();
    let mut valid = Vec::with_capacity(list.len());
    for raw in list {
        match parse_event(raw) {
            // The event as the plugin sent it (fields this mite does not know included): the
            // gateway checks it again and reads what it knows.
            Ok(_) => valid.push(serde_json::to_vec(raw).unwrap_or_default()),
            Err(e) => rejected.push(json!({
                "id": raw_id(raw),
                "error": varroa_link::kv::bounded(&e.to_string(), MAX_ERROR_TEXT),
            })),
        }
    }
    state.metrics.events("rejected", rejected.len());
    if !rejected.is_empty() {
        tracing::info!(
            rejected = rejected.len(),
            first = %rejected[0],
            "build events rejected as malformed (answered to the plugin, not sent again)"
        );
    }
    if valid.is_empty() {
        return Answer {
            status: StatusCode::OK,
            body: json!({"accepted": 0, "rejected": rejected}),
            retry_after: None,
            allow: None,
            outcome: "ok",
        };
    }
    let n = valid.len();
    let retry = |outcome, seconds, text: String| {
        state.metrics.events("retry", n);
        Answer::retry(outcome, seconds, text)
    };
    let forwarded = forward_events(&state.slot, valid).await;
    match forwarded {
        Err(ForwardError::NoStream) => retry(
            "stream_down",
            RETRY_STREAM_DOWN,
            "the mite's stream to the gateway is down (it is reconnecting); keep the events and retry".into(),
        ),
        Ok(ack) if ack.retry_after_ms > 0 => retry(
            "gateway_retry",
            u64::from(ack.retry_after_ms).div_ceil(1000),
            "the gateway cannot store the events now (NATS or JetStream unavailable, or busy); keep them and retry"
                .into(),
        ),
        Ok(ack) => {
            state.metrics.events("accepted", ack.accepted as usize);
            state.metrics.events("rejected", ack.rejected.len());
            if !ack.rejected.is_empty() {
                tracing::warn!(rejected = ack.rejected.len(), first_id = %ack.rejected[0].id, first_error = %ack.rejected[0].error,
                    "the gateway rejected build events this mite accepted");
            }
            rejected.extend(
                ack.rejected
                    .into_iter()
                    .map(|r| json!({"id": r.id, "error": varroa_link::kv::bounded(&r.error, MAX_ERROR_TEXT)})),
            );
            Answer {
                status: StatusCode::OK,
                body: json!({"accepted": ack.accepted, "rejected": rejected}),
                retry_after: None,
                allow: None,
                outcome: "ok",
            }
        }
        Err(ForwardError::Ended(why)) => {
            retry("stream_down", RETRY_STREAM_DOWN, format!("{why}; keep the events and retry"))
        }
        Err(ForwardError::Timeout) => retry(
            "ack_timeout",
            RETRY_ACK_TIMEOUT,
            format!("the gateway did not acknowledge the events within {ACK_TIMEOUT:?}; keep them and retry"),
        ),
    }
}

/// Why a batch of events was not acknowledged.
#[derive(Debug)]
pub(crate) enum ForwardError {
    /// No stream is welcomed now (the mite is reconnecting).
    NoStream,
    /// The stream ended before the batch's ack.
    Ended(String),
    /// No ack within [`ACK_TIMEOUT`].
    Timeout,
}

impl std::fmt::Display for ForwardError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ForwardError::NoStream => f.write_str("the mite's stream to the gateway is down (it is reconnecting)"),
            ForwardError::Ended(why) => f.write_str(why),
            ForwardError::Timeout => write!(f, "the gateway did not acknowledge within {ACK_TIMEOUT:?}"),
        }
    }
}

/// Forwards checked events over the current stream as one `BuildEvents` batch and waits (at most
/// [`ACK_TIMEOUT`]) for its `EventsAck`: the one way the plugin's events and the trigger
/// inventory's ([`crate::inventory`]) take to the gateway.
pub(crate) async fn forward_events(slot: &BatchSlot, events: Vec<Vec<u8>>) -> Result<pb::EventsAck, ForwardError> {
    let Some(tx) = slot.current() else { return Err(ForwardError::NoStream) };
    exchange(tx, ACK_TIMEOUT, "the batch was acknowledged", |respond| {
        Outbound::Events(OutboundBatch { events, respond })
    })
    .await
}

/// Sends the message `outbound` makes (around the answer's sender) on the stream `tx` and waits
/// at most `limit` for the gateway's answer: the one exchange every kind of plugin traffic
/// (events, log chunks, claims, artifact requests) has with the gateway. `awaited` names the
/// answer in the error when the stream ends first (`the chunk was acknowledged`).
async fn exchange<T>(
    tx: mpsc::Sender<Outbound>,
    limit: Duration,
    awaited: &str,
    outbound: impl FnOnce(oneshot::Sender<Result<T, String>>) -> Outbound,
) -> Result<T, ForwardError> {
    let (respond, answer) = oneshot::channel();
    let forwarded = tokio::time::timeout(limit, async move {
        tx.send(outbound(respond)).await.map_err(|_| "the gateway stream ended".to_owned())?;
        answer.await.map_err(|_| format!("the gateway stream ended before {awaited}"))?
    })
    .await;
    match forwarded {
        Ok(Ok(a)) => Ok(a),
        Ok(Err(why)) => Err(ForwardError::Ended(why)),
        Err(_) => Err(ForwardError::Timeout),
    }
}

/// An answer of `200` with a claim decision.
fn decided(answer: &claims::Answer) -> Answer {
    Answer {
        status: StatusCode::OK,
        body: serde_json::to_value(answer).unwrap_or_else(|_| json!({})),
        retry_after: None,
        allow: None,
        outcome: "ok",
    }
}

/// Why a claim was not decided by the ledger, and how soon the plugin may ask again.
struct Undecided {
    why: &'static str,
    after: Duration,
    reason: String,
}

/// The answer when the ledger could not decide: the controller's `whenLedgerDown`.
fn undecided(state: &State, u: Undecided) -> Answer {
    state.metrics.claims_undecided.get_or_create(&Why { why: u.why }).inc();
    let reason = varroa_link::kv::bounded(&u.reason, MAX_ERROR_TEXT);
    match state.claims.when_ledger_down {
        WhenLedgerDown::FailClosed => {
            state.metrics.claim("retry");
            let after = u.after.clamp(claims::MIN_RETRY_AFTER, claims::MAX_RETRY_AFTER);
            decided(&claims::Answer::Retry { after_ms: after.as_millis() as u64, reason })
        }
        WhenLedgerDown::FailOpen => {
            state.metrics.claim("fail_open");
            decided(&claims::Answer::Ungated {
                reason: format!("failOpen: no decision from the ledger ({reason}); run with Jenkins' own number"),
            })
        }
    }
}

async fn claim(state: &State, req: &Parts, body: Incoming) -> Answer {
    // The plugin's wait started when it sent the request; its budget counts from here.
    let arrived = tokio::time::Instant::now();
    let m = &state.metrics;
    let body = match read_body(body, declared_length(req), claims::MAX_REQUEST_BYTES).await {
        Ok(b) => b,
        Err(BodyError::TooLarge) => {
            m.claim("rejected");
            return Answer::error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!("claim: larger than {} bytes", claims::MAX_REQUEST_BYTES),
            );
        }
        Err(BodyError::Read(e)) => {
            return Answer::error(StatusCode::BAD_REQUEST, "bad_request", format!("cannot read the body: {e}"));
        }
        Err(BodyError::Timeout) => {
            return Answer::error(
                StatusCode::REQUEST_TIMEOUT,
                "timeout",
                format!("the body did not arrive within {READ_TIMEOUT:?}"),
            );
        }
    };
    let request = match claims::parse_request(&body) {
        Ok(r) => r,
        Err(e) => {
            m.claim("rejected");
            tracing::info!(error = %e, "build claim rejected as malformed");
            return Answer::error(
                StatusCode::BAD_REQUEST,
                "bad_request",
                varroa_link::kv::bounded(&e.to_string(), MAX_ERROR_TEXT),
            );
        }
    };
    if !state.claims.gate {
        m.claim("ungated");
        return decided(&claims::Answer::Ungated {
            reason: "the build claim gate is off in this mite (VARROA_CLAIMS is not on: the installation has no \
                     build record store)"
                .into(),
        });
    }
    let deadline = arrived + request.budget();
    let Ok(permit) = state.claim_permits.clone().try_acquire_owned() else {
        return undecided(
            state,
            Undecided {
                why: "busy",
                after: BUSY_CLAIM_RETRY_AFTER,
                reason: format!("the mite has {MAX_CLAIMS_IN_FLIGHT} claims waiting for the ledger already"),
            },
        );
    };
    let _in_flight = InFlight::new(permit, &m.claims_in_flight);
    let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
    let Some(share) = claims::forward_budget(remaining) else {
        return undecided(
            state,
            Undecided {
                why: "timeout",
                after: CLAIM_RETRY_AFTER,
                reason: format!("the claim's budget ({remaining:?} left) leaves nothing to ask the ledger with"),
            },
        );
    };
    let Some(tx) = state.slot.current() else {
        return undecided(
            state,
            Undecided {
                why: "stream_down",
                after: CLAIM_RETRY_AFTER,
                reason: "the mite's stream to the gateway is down (it is reconnecting)".into(),
            },
        );
    };
    let claim = pb::ClaimRequest {
        id: 0,
        claim_id: request.id.clone(),
        job: request.job.clone(),
        trigger: request.trigger.clone(),
        budget_ms: share.as_millis().min(u128::from(u32::MAX)) as u32,
    };
    // The mite's own share (remaining - share) is for answering: the gateway's answer is waited
    // for until `share` is spent, and one arriving after that is dropped with the receiver.
    let forwarded =
        exchange(tx, share, "the claim was answered", |respond| Outbound::Claim(OutboundClaim { claim, respond }))
            .await;
    let a = match forwarded {
        Ok(a) => a,
        Err(e @ (ForwardError::Ended(_) | ForwardError::NoStream)) => {
            return undecided(state, Undecided { why: "stream_down", after: CLAIM_RETRY_AFTER, reason: e.to_string() });
        }
        Err(ForwardError::Timeout) => {
            return undecided(
                state,
                Undecided {
                    why: "timeout",
                    after: CLAIM_RETRY_AFTER,
                    reason: format!(
                        "no answer from the gateway within {} ms of the claim's {} ms budget",
                        share.as_millis(),
                        request.budget().as_millis()
                    ),
                },
            );
        }
    };
    let error = varroa_link::kv::bounded(&a.error, MAX_ERROR_TEXT);
    let gateway_after = |ms: u32| if ms == 0 { CLAIM_RETRY_AFTER } else { Duration::from_millis(u64::from(ms)) };
    match pb::ClaimDecision::try_from(a.decision).unwrap_or(pb::ClaimDecision::Unspecified) {
        pb::ClaimDecision::Granted if (1..=varroa_link::builds::MAX_BUILD).contains(&a.build) => {
            m.claim("granted");
            tracing::debug!(claim = %request.id, job = %request.job, build = a.build, "build claim granted");
            decided(&claims::Answer::Granted { build: a.build })
        }
        pb::ClaimDecision::Granted => undecided(
            state,
            Undecided {
                why: "ledger_down",
                after: CLAIM_RETRY_AFTER,
                reason: format!("the gateway granted the claim without a usable build number ({})", a.build),
            },
        ),
        pb::ClaimDecision::Refused => {
            m.claim("refused");
            decided(&claims::Answer::Refused { holder: a.holder })
        }
        pb::ClaimDecision::Rejected => {
            m.claim("rejected");
            tracing::warn!(claim = %request.id, error = %error, "the gateway rejected a build claim this mite accepted");
            Answer::error(
                StatusCode::BAD_REQUEST,
                "bad_request",
                if error.is_empty() { "the gateway rejected the claim as malformed".into() } else { error },
            )
        }
        pb::ClaimDecision::Retry => undecided(
            state,
            Undecided {
                why: "ledger_retry",
                after: gateway_after(a.retry_after_ms),
                reason: if error.is_empty() { "the ledger cannot decide now".into() } else { error },
            },
        ),
        pb::ClaimDecision::LedgerDown | pb::ClaimDecision::Unspecified => undecided(
            state,
            Undecided {
                why: "ledger_down",
                after: gateway_after(a.retry_after_ms),
                reason: if error.is_empty() { "the gateway could not ask the ledger".into() } else { error },
            },
        ),
    }
}

/// A console log request's target: the job, the build, the offset, whether it is final.
#[derive(Debug, PartialEq, Eq)]
struct LogTarget {
    job: String,
    build: u64,
    offset: u64,
    last: bool,
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok())?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Parses `/v1/logs/{job}/{build}` and `?offset=N[&final=true]`; the error names what is wrong
/// and the fix.
fn log_target(path: &str, query: Option<&str>) -> Result<LogTarget, String> {
    let shape = "POST /v1/logs/{job}/{build}?offset=N[&final=true], the job's folders separated by '/' and each \
                 percent-encoded";
    let rest = path.strip_prefix("/v1/logs/").unwrap_or_default();
    let Some((raw_job, raw_build)) = rest.rsplit_once('/') else {
        return Err(format!("no build number in the path; send {shape}"));
    };
    let job = percent_decode(raw_job).ok_or_else(|| format!("job: not valid percent-encoded UTF-8; send {shape}"))?;
    if let Some(why) = varroa_blobs::logs::job_problem(&job) {
        return Err(format!("job {:?}: {why}", varroa_link::kv::bounded(&job, 128)));
    }
    let build = match raw_build.parse::<u64>() {
        Ok(n) if (1..=varroa_link::builds::MAX_BUILD).contains(&n) && raw_build.bytes().all(|b| b.is_ascii_digit()) => {
            n
        }
        _ => {
            return Err(format!(
                "build {:?}: not a build number (1 to 2^53); send {shape}",
                varroa_link::kv::bounded(raw_build, 32)
            ));
        }
    };
    let (mut offset, mut last) = (None, false);
    for pair in query.unwrap_or_default().split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "offset" => {
                offset = match v.parse::<u64>() {
                    Ok(n) if n <= varroa_blobs::logs::MAX_OFFSET && v.bytes().all(|b| b.is_ascii_digit()) => Some(n),
                    _ => {
                        return Err(format!(
                            "offset {:?}: not a byte offset (0 to 2^53); send ?offset=<where the chunk starts in the log>",
                            varroa_link::kv::bounded(v, 32)
                        ));
                    }
                }
            }
            "final" => {
                last = match v {
                    "true" => true,
                    "false" => false,
                    _ => {
                        return Err(format!(
                            "final {:?}: true or false (only the last chunk is final)",
                            varroa_link::kv::bounded(v, 32)
                        ));
                    }
                }
            }
            _ => {} // parameters this mite does not know are ignored
        }
    }
    let offset = offset.ok_or_else(|| format!("offset: missing; send {shape}"))?;
    Ok(LogTarget { job, build, offset, last })
}

async fn logs(state: &State, req: &Parts, body: Incoming) -> Answer {
    let m = &state.metrics;
    let target = match log_target(req.uri.path(), req.uri.query()) {
        Ok(t) => t,
        Err(e) => {
            m.log_chunk("refused");
            return Answer::error(StatusCode::BAD_REQUEST, "bad_request", e);
        }
    };
    let Ok(permit) = state.log_permits.clone().try_acquire_owned() else {
        m.log_chunk("retry");
        return Answer::retry(
            "busy",
            1,
            format!("the mite is forwarding {MAX_LOG_IN_FLIGHT} log chunks already; keep the log and retry"),
        );
    };
    let _in_flight = InFlight::new(permit, &m.in_flight);
    let data = match read_body(body, declared_length(req), MAX_CHUNK_BYTES).await {
        Ok(b) => b,
        Err(BodyError::TooLarge) => {
            m.log_chunk("refused");
            return Answer::error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!("the chunk is larger than {MAX_CHUNK_BYTES} bytes; send smaller chunks"),
            );
        }
        Err(BodyError::Read(e)) => {
            return Answer::error(StatusCode::BAD_REQUEST, "bad_request", format!("cannot read the body: {e}"));
        }
        Err(BodyError::Timeout) => {
            return Answer::error(
                StatusCode::REQUEST_TIMEOUT,
                "timeout",
                format!("the body did not arrive within {READ_TIMEOUT:?}"),
            );
        }
    };
    if data.is_empty() && !target.last {
        m.log_chunk("refused");
        return Answer::error(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "an empty chunk: only the final chunk (&final=true) may be empty",
        );
    }
    let retry = |outcome, seconds, text: String| {
        m.log_chunk("retry");
        Answer::retry(outcome, seconds, text)
    };
    let Some(tx) = state.slot.current() else {
        return retry(
            "stream_down",
            RETRY_STREAM_DOWN,
            "the mite's stream to the gateway is down (it is reconnecting); keep the log and retry".into(),
        );
    };
    let len = data.len();
    let chunk = pb::LogChunk {
        id: 0,
        job: target.job,
        build: target.build,
        offset: target.offset,
        data: data.to_vec(),
        last: target.last,
    };
    let forwarded = exchange(tx, ACK_TIMEOUT, "the chunk was acknowledged", |respond| {
        Outbound::Log(OutboundChunk { chunk, respond })
    })
    .await;
    let ack = match forwarded {
        Ok(ack) => ack,
        Err(e @ (ForwardError::Ended(_) | ForwardError::NoStream)) => {
            return retry("stream_down", RETRY_STREAM_DOWN, format!("{e}; keep the log and retry"));
        }
        Err(ForwardError::Timeout) => {
            return retry(
                "ack_timeout",
                RETRY_ACK_TIMEOUT,
                format!("the gateway did not acknowledge the chunk within {ACK_TIMEOUT:?}; keep the log and retry"),
            );
        }
    };
    let error = varroa_link::kv::bounded(&ack.error, MAX_ERROR_TEXT);
    match pb::LogOutcome::try_from(ack.outcome).unwrap_or(pb::LogOutcome::Unspecified) {
        pb::LogOutcome::Stored => {
            m.log_chunk("stored");
            m.log_bytes.inc_by(len as u64);
            Answer {
                status: StatusCode::OK,
                body: json!({"next": ack.next, "complete": ack.complete}),
                retry_after: None,
                allow: None,
                outcome: "ok",
            }
        }
        pb::LogOutcome::Conflict => {
            m.log_chunk("conflict");
            Answer {
                status: StatusCode::CONFLICT,
                body: json!({"next": ack.next, "complete": ack.complete, "error": error}),
                retry_after: None,
                allow: None,
                outcome: "conflict",
            }
        }
        pb::LogOutcome::Refused => {
            m.log_chunk("refused");
            Answer::error(StatusCode::BAD_REQUEST, "bad_request", error)
        }
        pb::LogOutcome::Retry | pb::LogOutcome::Unspecified => retry(
            "gateway_retry",
            u64::from(ack.retry_after_ms).div_ceil(1000),
            if error.is_empty() {
                "the gateway cannot store the chunk now; keep the log and retry".into()
            } else {
                error
            },
        ),
    }
}

/// Parses `/v1/artifacts/{job}/{build}`; the error names what is wrong and the fix.
fn artifact_target(path: &str) -> Result<(String, u64), String> {
    let shape = "POST /v1/artifacts/{job}/{build}, the job's folders separated by '/' and each percent-encoded";
    let rest = path.strip_prefix("/v1/artifacts/").unwrap_or_default();
    let Some((raw_job, raw_build)) = rest.rsplit_once('/') else {
        return Err(format!("build: no build number in the path; send {shape}"));
    };
    let job = percent_decode(raw_job).ok_or_else(|| format!("job: not valid percent-encoded UTF-8; send {shape}"))?;
    if let Some(why) = varroa_blobs::logs::job_problem(&job) {
        return Err(format!("job {:?}: {why}", varroa_link::kv::bounded(&job, 128)));
    }
    match raw_build.parse::<u64>() {
        Ok(n) if (1..=varroa_link::builds::MAX_BUILD).contains(&n) && raw_build.bytes().all(|b| b.is_ascii_digit()) => {
            Ok((job, n))
        }
        _ => Err(format!(
            "build {:?}: not a build number (1 to 2^53); send {shape}",
            varroa_link::kv::bounded(raw_build, 32)
        )),
    }
}

async fn artifact_urls(state: &State, req: &Parts, body: Incoming) -> Answer {
    let m = &state.metrics;
    let refused = |status: StatusCode, outcome: &'static str, text: String| {
        m.artifacts("refused");
        Answer::error(status, outcome, varroa_link::kv::bounded(&text, MAX_ERROR_TEXT))
    };
    let (job, build) = match artifact_target(req.uri.path()) {
        Ok(t) => t,
        Err(e) => return refused(StatusCode::BAD_REQUEST, "bad_request", e),
    };
    let Ok(permit) = state.permits.clone().try_acquire_owned() else {
        m.artifacts("retry");
        return Answer::retry("busy", 1, format!("the mite is serving {MAX_IN_FLIGHT} requests already; retry"));
    };
    let _in_flight = InFlight::new(permit, &m.in_flight);
    let body = match read_body(body, declared_length(req), artifacts::MAX_REQUEST_BYTES).await {
        Ok(b) => b,
        Err(BodyError::TooLarge) => {
            return refused(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!("request: larger than {} bytes; ask for fewer files at once", artifacts::MAX_REQUEST_BYTES),
            );
        }
        Err(BodyError::Read(e)) => {
            return Answer::error(StatusCode::BAD_REQUEST, "bad_request", format!("cannot read the body: {e}"));
        }
        Err(BodyError::Timeout) => {
            return Answer::error(
                StatusCode::REQUEST_TIMEOUT,
                "timeout",
                format!("the body did not arrive within {READ_TIMEOUT:?}"),
            );
        }
    };
    let request = match artifacts::parse_request(&body) {
        Ok(r) => r,
        Err(e) => {
            tracing::info!(error = %e, "artifact request refused as malformed");
            return refused(StatusCode::BAD_REQUEST, "bad_request", e.to_string());
        }
    };
    let retry = |outcome: &'static str, seconds: u64, text: String| {
        m.artifacts("retry");
        Answer::retry(outcome, seconds, text)
    };
    let Some(tx) = state.slot.current() else {
        return retry(
            "stream_down",
            RETRY_STREAM_DOWN,
            "the mite's stream to the gateway is down (it is reconnecting); keep the artifacts and retry".into(),
        );
    };
    let request = pb::ArtifactRequest {
        id: 0,
        job,
        build,
        files: request.files.into_iter().map(|f| pb::ArtifactFile { path: f.path, size: f.size }).collect(),
    };
    let forwarded = exchange(tx, ACK_TIMEOUT, "the request was answered", |respond| {
        Outbound::Artifacts(OutboundArtifacts { request, respond })
    })
    .await;
    let a = match forwarded {
        Ok(a) => a,
        Err(e @ (ForwardError::Ended(_) | ForwardError::NoStream)) => {
            return retry("stream_down", RETRY_STREAM_DOWN, format!("{e}; retry"));
        }
        Err(ForwardError::Timeout) => {
            return retry(
                "ack_timeout",
                RETRY_ACK_TIMEOUT,
                format!("the gateway did not answer within {ACK_TIMEOUT:?}; retry"),
            );
        }
    };
    let error = varroa_link::kv::bounded(&a.error, MAX_ERROR_TEXT);
    match pb::ArtifactOutcome::try_from(a.outcome).unwrap_or(pb::ArtifactOutcome::Unspecified) {
        pb::ArtifactOutcome::Signed => {
            m.artifacts("signed");
            let expires = artifacts::expires_text(a.expires_at_unix_ms);
            let answer = artifacts::Answer {
                uploads: a.uploads.into_iter().map(|u| artifacts::Upload { path: u.path, url: u.url }).collect(),
                expires,
            };
            Answer {
                status: StatusCode::OK,
                body: serde_json::to_value(&answer).unwrap_or_default(),
                retry_after: None,
                allow: None,
                outcome: "ok",
            }
        }
        pb::ArtifactOutcome::Refused => refused(
            StatusCode::BAD_REQUEST,
            "bad_request",
            if error.is_empty() { "the gateway refused the request as malformed".into() } else { error },
        ),
        pb::ArtifactOutcome::Unsupported => {
            m.artifacts("unsupported");
            Answer::error(
                StatusCode::NOT_IMPLEMENTED,
                "unsupported",
                if error.is_empty() {
                    "artifacts need an s3:// store; archive with Jenkins' own archiving".into()
                } else {
                    error
                },
            )
        }
        pb::ArtifactOutcome::Retry | pb::ArtifactOutcome::Unspecified => retry(
            "gateway_retry",
            u64::from(a.retry_after_ms).div_ceil(1000),
            if error.is_empty() { "the gateway cannot sign upload URLs now; retry".into() } else { error },
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn artifact_paths_parse_or_name_what_is_wrong() {
        assert_eq!(artifact_target("/v1/artifacts/team/my%20app/42"), Ok(("team/my app".into(), 42)));
        assert_eq!(artifact_target("/v1/artifacts/team%2Fapp/1"), Ok(("team/app".into(), 1)));
        for (bad, starts) in [
            ("/v1/artifacts/app", "build"),
            ("/v1/artifacts/app/0", "build \"0\""),
            ("/v1/artifacts/app/+1", "build"),
            ("/v1/artifacts/a%0Ab/1", "job"),
            ("/v1/artifacts/a%zz/1", "job"),
            ("/v1/artifacts//1", "job"),
        ] {
            let e = artifact_target(bad).unwrap_err();
            assert!(e.starts_with(starts), "{bad}: {e}");
        }
    }

    #[test]
    fn log_paths_and_queries_parse_or_name_what_is_wrong() {
        let t = |job: &str, build, offset, last| LogTarget { job: job.into(), build, offset, last };
        assert_eq!(log_target("/v1/logs/team/app/42", Some("offset=0")), Ok(t("team/app", 42, 0, false)));
        assert_eq!(log_target("/v1/logs/team%2Fapp/42", Some("offset=7&final=true")), Ok(t("team/app", 42, 7, true)));
        assert_eq!(log_target("/v1/logs/my%20app/1", Some("x=y&offset=3&final=false")), Ok(t("my app", 1, 3, false)));
        for (path, query, why) in [
            ("/v1/logs/app", Some("offset=0"), "no build number"),
            ("/v1/logs/app/0", Some("offset=0"), "build \"0\""),
            ("/v1/logs/app/x7", Some("offset=0"), "build \"x7\""),
            ("/v1/logs/app/+7", Some("offset=0"), "build \"+7\""),
            ("/v1/logs//7", Some("offset=0"), "job \"\": must not be empty"),
            ("/v1/logs/a%0Ab/7", Some("offset=0"), "control characters"),
            ("/v1/logs/a%ZZ/7", Some("offset=0"), "percent-encoded"),
            ("/v1/logs/a%FF/7", Some("offset=0"), "UTF-8"),
            ("/v1/logs/app/7", None, "offset: missing"),
            ("/v1/logs/app/7", Some("offset=-1"), "offset \"-1\""),
            ("/v1/logs/app/7", Some("offset=9007199254740993"), "0 to 2^53"),
            ("/v1/logs/app/7", Some("offset=1&final=yes"), "final \"yes\""),
        ] {
            let e = log_target(path, query).unwrap_err();
            assert!(e.contains(why), "{path}?{query:?}: {e}");
        }
    }

    #[test]
    fn tokens_compare_whole_and_only_as_bearer() {
        let t = "ab".repeat(32);
        assert!(authorized(Some(&HeaderValue::from_str(&format!("Bearer {t}")).unwrap()), &t));
        assert!(authorized(Some(&HeaderValue::from_str(&format!("bearer {t}")).unwrap()), &t));
        assert!(!authorized(Some(&HeaderValue::from_str(&format!("Basic {t}")).unwrap()), &t));
        assert!(!authorized(Some(&HeaderValue::from_str(&format!("Bearer {}", &t[..63])).unwrap()), &t));
        assert!(!authorized(Some(&HeaderValue::from_static("Bearer")), &t));
        assert!(!authorized(None, &t));
        assert!(constant_time_eq(b"abc", b"abc") && !constant_time_eq(b"abc", b"abd"));
    }

    #[test]
    fn the_token_file_is_written_atomically_with_mode_0640() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/plugin/token");
        let first = write_token(&path).unwrap();
        assert_eq!(first.len(), 64);
        assert!(first.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), first);
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o640);
        let second = write_token(&path).unwrap();
        assert_ne!(first, second, "every start writes a new token");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), second);
        let names: Vec<_> =
            std::fs::read_dir(path.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["token"], "no temporary file is left behind");
    }
}
