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
//! - **`POST /v1/claims`, `POST /v1/logs/...`**: specified, not built: `501`.
//! - At most [`MAX_IN_FLIGHT`] requests are served at once; more get `503` with `Retry-After: 1`.
//!
//! The link's session ([`crate::link`]) owns the other end: while a stream is welcomed it
//! installs a sender in the [`BatchSlot`]; it numbers each batch, keeps its responder until the
//! gateway's `EventsAck` with that number arrives, and fails every one still waiting when the
//! stream ends, so the plugin gets `503` and sends the events again (the gateway's JetStream
//! deduplicates by event id).

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
use varroa_link::builds::{MAX_EVENTS_PER_BATCH, MAX_REQUEST_BYTES, parse_event, raw_id};
use varroa_link::proto::v1 as pb;

/// The most plugin requests served at once.
pub const MAX_IN_FLIGHT: usize = 16;
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

/// Where the current gateway stream takes batches: empty while no stream is welcomed.
#[derive(Clone, Default)]
pub(crate) struct BatchSlot(Arc<Mutex<Option<mpsc::Sender<OutboundBatch>>>>);

impl BatchSlot {
    fn current(&self) -> Option<mpsc::Sender<OutboundBatch>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Makes `tx` the current stream's sender until the guard drops.
    pub(crate) fn install(&self, tx: mpsc::Sender<OutboundBatch>) -> SlotGuard {
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
    in_flight: Gauge,
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
            "varroa_mite_plugin_requests_in_flight",
            "Event requests of the plugin being served now",
            self.in_flight.clone(),
        );
    }
    fn request(&self, outcome: &'static str) {
        self.requests.get_or_create(&Outcome { outcome }).inc();
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
        metrics: Arc<PluginMetrics>,
    ) -> std::io::Result<PluginServer> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State { token, slot, permits: Arc::new(Semaphore::new(MAX_IN_FLIGHT)), metrics });
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
        tracing::info!(%addr, "plugin listener up (POST /v1/events)");
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
        "/v1/claims" if post => Answer::error(
            StatusCode::NOT_IMPLEMENTED,
            "not_implemented",
            "build claims are not built yet in this mite: run the build as if the gate were off",
        ),
        p if p.starts_with("/v1/logs/") && post => Answer::error(
            StatusCode::NOT_IMPLEMENTED,
            "not_implemented",
            "console log chunks are not built yet in this mite: keep the log in Jenkins",
        ),
        "/v1/events" | "/v1/claims" => Answer::method("POST", &req.method),
        p if p.starts_with("/v1/logs/") => Answer::method("POST", &req.method),
        p => Answer::error(
            StatusCode::NOT_FOUND,
            "not_found",
            format!(
                "no such endpoint {:?}: this mite serves POST /v1/events (docs/varroa/plugin-protocol.md)",
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
    let Some(tx) = state.slot.current() else {
        return retry(
            "stream_down",
            RETRY_STREAM_DOWN,
            "the mite's stream to the gateway is down (it is reconnecting); keep the events and retry".into(),
        );
    };
    let (respond, answer) = oneshot::channel();
    let forwarded = tokio::time::timeout(ACK_TIMEOUT, async move {
        tx.send(OutboundBatch { events: valid, respond }).await.map_err(|_| "the gateway stream ended".to_owned())?;
        answer.await.map_err(|_| "the gateway stream ended before the batch was acknowledged".to_owned())?
    })
    .await;
    match forwarded {
        Ok(Ok(ack)) if ack.retry_after_ms > 0 => retry(
            "gateway_retry",
            u64::from(ack.retry_after_ms).div_ceil(1000),
            "the gateway cannot store the events now (NATS or JetStream unavailable, or busy); keep them and retry"
                .into(),
        ),
        Ok(Ok(ack)) => {
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
        Ok(Err(why)) => retry("stream_down", RETRY_STREAM_DOWN, format!("{why}; keep the events and retry")),
        Err(_) => retry(
            "ack_timeout",
            RETRY_ACK_TIMEOUT,
            format!("the gateway did not acknowledge the events within {ACK_TIMEOUT:?}; keep them and retry"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
