//! The `MiteLink` service: one stream per mite cell.
//!
//! A stream goes through:
//!
//! 1. **Who.** The connection's [`PeerInfo`] must carry a mite identity (the handshake already
//!    proved the certificate chains to the CA and is unexpired); the first message must be a
//!    `Hello`, within [`GatewayOptions::hello_timeout`], whose `identity` equals the
//!    certificate's URI SAN and whose names are valid key parts; when the controller's desired
//!    entry says how many cells it has, the cell ordinal must be below that. Anything else ends
//!    the stream with `UNAUTHENTICATED`, `PERMISSION_DENIED` or `INVALID_ARGUMENT`, logged with
//!    the peer address and identities (never certificates or keys).
//! 2. **One stream per cell.** A newer stream for the same (identity, cell) *replaces* the older
//!    one, which is sent an `Error { code: "replaced" }` and closed. Replacing (rather than
//!    refusing the newcomer) is what a reconnecting mite needs: its old connection may be
//!    half-open for minutes (a dead NAT entry, a killed node) before keepalives notice, and the
//!    mite must not be locked out meanwhile. Across replicas the same holds through the
//!    `varroa_mites` entry: it records the stream's random `session`, every write is a
//!    compare-and-set on the entry's revision, and a replica whose write finds another session
//!    there ends its stream as replaced (and never writes `connected: false` over the newer one).
//! 3. **State.** The entry is written on hello (`connected`, `since`, replica, session,
//!    heartbeat; the observation and last apply result of the previous stream are kept), on every
//!    observation delta (merged) and apply result (coalesced: at most one write per
//!    [`MIN_WRITE_INTERVAL`]), on heartbeats at most once per heartbeat
//!    interval, and with `connected: false` when the stream ends. A write that fails (NATS down)
//!    leaves the entry dirty and is retried every second; the stream stays up meanwhile.
//! 4. **Desired.** The controller's current desired entry is sent after the `Welcome`, and each
//!    new one as the `varroa_desired` watch delivers it; a digest is sent once per stream.
//! 5. **Liveness.** A stream silent for three heartbeat intervals is closed
//!    (`Error { code: "heartbeat_timeout" }`).
//! 6. **Build events.** Each `BuildEvents` batch is stored in its own task (heartbeats and
//!    desired pushes never wait for JetStream), at most [`MAX_BATCHES_IN_FLIGHT`] per stream
//!    (more are answered retry at once). Every event is checked again
//!    ([`builds::parse_event_bytes`]: the mite runs in the tenant's pod, so nothing it sends is
//!    trusted but its certificate), stamped with the gateway's cluster, the certificate's
//!    namespace and controller and the hello's cell ([`builds::RecordedEvent`]), and published
//!    to `varroa.builds.<cluster>.<ns>.<controller>` with `Nats-Msg-Id` scoped the same way.
//!    The `EventsAck` is sent once JetStream acknowledged every publish (a duplicate it dropped
//!    counts as accepted); any failure, or no acknowledgement within [`PUBLISH_TIMEOUT`], answers
//!    the whole batch with `retry_after_ms` and the mite sends it again whole.
//! 7. **Console logs.** Each `LogChunk` is written in its own task, at most
//!    [`MAX_LOG_CHUNKS_IN_FLIGHT`] per stream (more are answered retry at once), under
//!    `logs/<cluster>/<ns>/<controller>/` of this stream's certificate (the chunk names only its
//!    job and build: a tenant cannot write another controller's log). The job, build and size are
//!    checked again; [`varroa_blobs::LogWriter`] gives the offset semantics (a conditional create
//!    per chunk, a retry answered as the first time, a conflict with the stored end). The
//!    `LogAck` is sent once the write landed; a store that fails, or does not answer within
//!    [`LOG_WRITE_TIMEOUT`], answers retry. After each landed chunk a [`varroa_blobs::Notice`] is
//!    published on core NATS (`varroa.logs.<cluster>.<ns>.<controller>`) for live tails.
//! 8. **Build claims.** Each `ClaimRequest` is decided in its own task, at most
//!    [`MAX_CLAIMS_IN_FLIGHT`] per stream (more are answered `LEDGER_DOWN` with
//!    [`CLAIM_BUSY_RETRY_AFTER_MS`] at once). The claim is checked again
//!    ([`claims::check_fields`], the budget), stamped into a [`claims::LedgerRequest`] with the
//!    gateway's cluster, the certificate's namespace and controller and the hello's cell (never
//!    from the claim), and asked as a core NATS request on [`claims::subject`] with the gateway's
//!    share of the budget as timeout ([`claims::forward_budget`]). The ledger's granted,
//!    refused, retry and rejected become the `ClaimAnswer`'s decision; no responders, no answer
//!    in time, NATS not connected or an unreadable reply answer `LEDGER_DOWN` with
//!    [`CLAIM_RETRY_AFTER_MS`] and an error saying which.
//! 9. **Archived artifacts.** Each `ArtifactRequest` is signed in its own task, at most
//!    [`MAX_ARTIFACT_REQUESTS_IN_FLIGHT`] per stream (more are answered retry at once). The job,
//!    build and every file are checked again ([`varroa_link::artifacts::check_files`]: plain
//!    relative paths, at most 1,000 files of at most 5 GiB, every key at most 1024 bytes), and
//!    one presigned `PUT` URL per file is signed under
//!    `artifacts/<cluster>/<ns>/<controller>/cell-<n>/` of this stream's certificate and hello
//!    ([`varroa_blobs::Artifacts`]), valid for [`varroa_link::artifacts::URL_EXPIRY`]. A
//!    directory store cannot presign: `UNSUPPORTED`, and the plugin uses Jenkins' own archiving.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::kv::{Store, UpdateErrorKind};
use futures::Stream;
use jiff::Timestamp;
use tokio::sync::Semaphore;
use tokio::sync::{mpsc, watch};
use tonic::{Request, Response, Status, Streaming};
use varroa_link::builds;
use varroa_link::claims;
use varroa_link::kv::{self, ApplyResultRecord, ControllerKey, MiteEntry, MiteKey};
use varroa_link::proto::v1::{
    self as pb, GatewayMessage, MiteMessage, gateway_message, mite_link_server::MiteLink, mite_message,
};

use crate::conn::PeerInfo;
use crate::desired::DesiredCache;
use crate::metrics::Metrics;

/// How the service behaves.
#[derive(Debug, Clone)]
pub struct GatewayOptions {
    /// This replica's name (written into `varroa_mites` and the `Welcome`).
    pub replica: String,
    /// How often mites send heartbeats (told in the `Welcome`).
    pub heartbeat_interval: Duration,
    /// How long the first message (`Hello`) may take.
    pub hello_timeout: Duration,
    /// The most streams this replica holds; further ones are refused with `RESOURCE_EXHAUSTED`
    /// (the mite retries, and the Service may send it to another replica).
    pub max_streams: usize,
    /// The cluster name in activity subjects (`activity.<cluster>.<ns>.<ctrl>`); a DNS-1123 label.
    pub cluster: String,
}

/// Publishes activity events on core NATS (see [`varroa_link::activity`]). Fire and forget: the
/// client buffers while reconnecting; an event lost to a long outage is logged, not retried.
#[derive(Clone)]
pub struct Activity {
    client: async_nats::Client,
    cluster: String,
}

impl Activity {
    /// Publishes with `client` for `cluster`.
    pub fn new(client: async_nats::Client, cluster: String) -> Self {
        Activity { client, cluster }
    }

    async fn publish(&self, key: &MiteKey, kind: &'static str, message: String) {
        let Ok(subject) = varroa_link::activity::controller_subject(&self.cluster, &key.controller) else {
            return; // the cluster name is validated at start-up
        };
        let event = varroa_link::activity::ActivityEvent {
            id: session_id(),
            time: now(),
            cluster: self.cluster.clone(),
            namespace: key.controller.namespace().to_owned(),
            controller: key.controller.controller().to_owned(),
            source: varroa_link::activity::SOURCE_MITE.to_owned(),
            kind: kind.to_owned(),
            message,
            cell: Some(key.cell),
        };
        if let Err(e) = self.client.publish(subject, kv::encode(&event)).await {
            tracing::warn!(error = %e, mite = %key, kind, "cannot publish activity");
        }
    }
}

/// The highest cell ordinal accepted when the controller's cell count is unknown.
pub const MAX_CELL: u32 = 9_999;
/// How often a dirty entry is written again after a failed write.
const RETRY_EVERY: Duration = Duration::from_secs(1);
/// The shortest time between two writes of one cell's entry (observations and apply results
/// arriving faster are coalesced into one write).
pub const MIN_WRITE_INTERVAL: Duration = Duration::from_millis(200);
/// How long one KV operation may take before it counts as failed.
const KV_TIMEOUT: Duration = Duration::from_secs(5);
/// The most `BuildEvents` batches one stream has being stored at once; more are answered with
/// [`BUSY_RETRY_AFTER_MS`] at once.
pub const MAX_BATCHES_IN_FLIGHT: usize = 4;
/// How long storing one batch may take (every publish acknowledged by JetStream).
pub const PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);
/// The retry asked for when JetStream did not store a batch (NATS down, stream unavailable).
pub const STORE_RETRY_AFTER_MS: u32 = 2_000;
/// The retry asked for when the stream has [`MAX_BATCHES_IN_FLIGHT`] batches in flight, or the
/// `varroa_builds` stream is not open yet.
pub const BUSY_RETRY_AFTER_MS: u32 = 1_000;
/// The longest error text of a rejected event.
const MAX_REJECTION_TEXT: usize = 512;
/// The most `LogChunk`s one stream has being written at once; more are answered retry
/// ([`BUSY_RETRY_AFTER_MS`]) at once.
pub const MAX_LOG_CHUNKS_IN_FLIGHT: usize = 4;
/// How long writing one chunk may take (below the mite's 10 s wait for the ack, so the mite hears
/// "retry" rather than nothing).
pub const LOG_WRITE_TIMEOUT: Duration = Duration::from_secs(8);
/// The retry asked for when the log store failed.
pub const LOG_RETRY_AFTER_MS: u32 = 2_000;
/// The retry asked for when this gateway has no log store at all (a library user that did not
/// configure one; the binary always has one).
pub const NO_LOG_STORE_RETRY_AFTER_MS: u32 = 30_000;

/// The most `ArtifactRequest`s one stream has being signed at once; more are answered retry
/// ([`BUSY_RETRY_AFTER_MS`]) at once.
pub const MAX_ARTIFACT_REQUESTS_IN_FLIGHT: usize = 4;
/// How long signing one request's URLs may take (below the mite's 10 s wait).
pub const ARTIFACT_SIGN_TIMEOUT: Duration = Duration::from_secs(8);
/// The retry asked for when signing failed (the store's credentials are unavailable).
pub const ARTIFACT_RETRY_AFTER_MS: u32 = 2_000;

/// The most `ClaimRequest`s one stream has waiting for the ledger at once; more are answered
/// `LEDGER_DOWN` with [`CLAIM_BUSY_RETRY_AFTER_MS`] at once.
pub const MAX_CLAIMS_IN_FLIGHT: usize = 32;
/// The retry asked for when the ledger could not be asked or did not answer in time.
pub const CLAIM_RETRY_AFTER_MS: u32 = 1_000;
/// The retry asked for when the stream has [`MAX_CLAIMS_IN_FLIGHT`] claims in flight.
pub const CLAIM_BUSY_RETRY_AFTER_MS: u32 = 250;

/// Where console log chunks go: the log store, and NATS for the live-tail notices.
pub struct LogSink {
    /// The chunk writer (with its per-build end cache).
    pub writer: varroa_blobs::LogWriter,
    /// Where the notices are published; `None`: none are.
    pub nats: Option<async_nats::Client>,
}

/// Where build events are published: the JetStream context, once the `varroa_builds` stream is
/// open.
#[derive(Clone)]
pub struct BuildsSink {
    /// The JetStream context.
    pub js: async_nats::jetstream::Context,
    /// The stream's replicas, should it have to be created again.
    pub replicas: usize,
}

/// The state the streams share.
pub struct Shared {
    options: GatewayOptions,
    mites: watch::Receiver<Option<Store>>,
    builds: watch::Receiver<Option<BuildsSink>>,
    desired: Arc<DesiredCache>,
    metrics: Arc<Metrics>,
    /// Local streams by cell: the session id and the sender that tells it it was replaced.
    sessions: Mutex<HashMap<MiteKey, (String, watch::Sender<bool>)>>,
    /// Becomes true when the replica shuts down: every stream ends (`shutting_down`).
    stopping: watch::Receiver<bool>,
    activity: Option<Activity>,
    logs: Option<Arc<LogSink>>,
    /// Where build claims are asked (core NATS request/reply); `None`: answered `LEDGER_DOWN`.
    ledger: Option<async_nats::Client>,
    /// Where archived artifacts go (the log store); `None`: answered `UNSUPPORTED`.
    artifacts: Option<Arc<varroa_blobs::Artifacts>>,
}

/// The service (cheap to clone).
#[derive(Clone)]
pub struct Gateway {
    shared: Arc<Shared>,
}

impl Gateway {
    /// A service writing into the `varroa_mites` store once `mites` holds one, build events
    /// into `varroa_builds` once `builds` holds its context, console logs into `logs`, and asking
    /// the ledger for build claims with `ledger`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        options: GatewayOptions,
        mites: watch::Receiver<Option<Store>>,
        builds: watch::Receiver<Option<BuildsSink>>,
        desired: Arc<DesiredCache>,
        metrics: Arc<Metrics>,
        stopping: watch::Receiver<bool>,
        activity: Option<Activity>,
        logs: Option<Arc<LogSink>>,
        ledger: Option<async_nats::Client>,
        artifacts: Option<Arc<varroa_blobs::Artifacts>>,
    ) -> Self {
        Gateway {
            shared: Arc::new(Shared {
                options,
                mites,
                builds,
                desired,
                metrics,
                sessions: Mutex::default(),
                stopping,
                activity,
                logs,
                ledger,
                artifacts,
            }),
        }
    }

    /// How many streams this replica holds.
    pub fn stream_count(&self) -> usize {
        self.shared.sessions.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

type Outbound = Pin<Box<dyn Stream<Item = Result<GatewayMessage, Status>> + Send>>;

fn now() -> Timestamp {
    Timestamp::now()
}

fn session_id() -> String {
    let mut b = [0u8; 12];
    // ring's system RNG; a failure (no entropy source) would leave zeros, still unique enough
    // together with the replica name and time for telling streams apart.
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn message(kind: gateway_message::Kind) -> GatewayMessage {
    GatewayMessage { kind: Some(kind) }
}

#[tonic::async_trait]
impl MiteLink for Gateway {
    type ConnectStream = Outbound;

    async fn connect(&self, request: Request<Streaming<MiteMessage>>) -> Result<Response<Outbound>, Status> {
        let s = &self.shared;
        let Some(peer) = request.extensions().get::<PeerInfo>().cloned() else {
            s.metrics.refused("no_peer_info");
            return Err(Status::unauthenticated("no verified client certificate"));
        };
        let cert_identity = match peer.identity {
            Ok(id) => id,
            Err(reason) => {
                tracing::warn!(peer = %peer.addr, %reason, "stream refused: the client certificate names no mite identity");
                s.metrics.refused("no_identity");
                return Err(Status::permission_denied(format!(
                    "the client certificate names no mite identity: {reason}"
                )));
            }
        };
        if *s.stopping.borrow() {
            return Err(Status::unavailable("this gateway replica is shutting down; dial again"));
        }
        let Some(store) = s.mites.borrow().clone() else {
            s.metrics.refused("not_ready");
            return Err(Status::unavailable("the gateway is not connected to NATS yet; retry"));
        };
        let mut inbound = request.into_inner();
        let hello = match tokio::time::timeout(s.options.hello_timeout, inbound.message()).await {
            Ok(Ok(Some(MiteMessage { kind: Some(mite_message::Kind::Hello(h)) }))) => h,
            Ok(Ok(Some(_))) => {
                s.metrics.refused("no_hello");
                return Err(Status::invalid_argument("the first message must be a Hello"));
            }
            Ok(Ok(None)) | Ok(Err(_)) => {
                s.metrics.refused("no_hello");
                return Err(Status::cancelled("the stream ended before a Hello"));
            }
            Err(_) => {
                s.metrics.refused("hello_timeout");
                return Err(Status::deadline_exceeded(format!("no Hello within {:?}", s.options.hello_timeout)));
            }
        };
        let cert_uri = cert_identity.uri();
        if hello.identity != cert_uri {
            let claimed = kv::bounded(&hello.identity, kv::MAX_SHORT_FIELD);
            tracing::warn!(peer = %peer.addr, certificate = %cert_uri, %claimed, "stream refused: the hello claims another identity");
            s.metrics.refused("identity_mismatch");
            return Err(Status::permission_denied(format!(
                "the hello names {claimed:?} but the client certificate is {cert_uri}"
            )));
        }
        let controller = ControllerKey::new(&cert_identity.namespace, &cert_identity.controller).map_err(|e| {
            s.metrics.refused("invalid_name");
            Status::invalid_argument(e.to_string())
        })?;
        let cells = s.desired.current(&controller).and_then(|d| d.cells);
        let limit = cells.map(|c| c.saturating_sub(1)).unwrap_or(MAX_CELL);
        if hello.cell > limit || cells == Some(0) {
            tracing::warn!(peer = %peer.addr, identity = %cert_uri, cell = hello.cell, ?cells, "stream refused: cell ordinal out of range");
            s.metrics.refused("cell_out_of_range");
            return Err(Status::permission_denied(format!(
                "cell {} is out of range: the controller has {} cell(s)",
                hello.cell,
                cells.map_or_else(|| format!("at most {}", MAX_CELL + 1), |c| c.to_string())
            )));
        }
        let key = controller.cell(hello.cell);
        {
            let sessions = s.sessions.lock().unwrap_or_else(|p| p.into_inner());
            if sessions.len() >= s.options.max_streams && !sessions.contains_key(&key) {
                tracing::warn!(peer = %peer.addr, mite = %key, max = s.options.max_streams, "stream refused: this replica is full");
                s.metrics.refused("full");
                return Err(Status::resource_exhausted(format!(
                    "this gateway replica holds its maximum of {} streams; retry (another replica may take it)",
                    s.options.max_streams
                )));
            }
        }
        let session = session_id();
        let (replaced_tx, replaced_rx) = watch::channel(false);
        if let Some((_, old)) =
            s.sessions.lock().unwrap_or_else(|p| p.into_inner()).insert(key.clone(), (session.clone(), replaced_tx))
        {
            tracing::info!(mite = %key, "a newer stream replaces this cell's open stream");
            let _ = old.send(true);
        }
        tracing::info!(
            peer = %peer.addr,
            mite = %key,
            jenkins = %kv::bounded(&hello.jenkins_version, kv::MAX_SHORT_FIELD),
            mite_version = %kv::bounded(&hello.mite_version, kv::MAX_SHORT_FIELD),
            "mite connected"
        );
        s.metrics.stream(1);

        let (tx, rx) = mpsc::channel::<Result<GatewayMessage, Status>>(16);
        let welcome = pb::Welcome {
            gateway_replica: s.options.replica.clone(),
            heartbeat_interval_seconds: s.options.heartbeat_interval.as_secs().max(1) as u32,
        };
        // Room for 16: cannot be full yet.
        let _ = tx.try_send(Ok(message(gateway_message::Kind::Welcome(welcome))));
        let mut session = Session {
            shared: self.shared.clone(),
            store,
            key,
            controller,
            id: session,
            entry: MiteEntry::default(),
            revision: None,
            dirty: true,
            landed: false,
            last_write: None,
            last_sent_digest: None,
            hello,
            batches: Arc::new(Semaphore::new(MAX_BATCHES_IN_FLIGHT)),
            log_chunks: Arc::new(Semaphore::new(MAX_LOG_CHUNKS_IN_FLIGHT)),
            claims: Arc::new(Semaphore::new(MAX_CLAIMS_IN_FLIGHT)),
            artifact_requests: Arc::new(Semaphore::new(MAX_ARTIFACT_REQUESTS_IN_FLIGHT)),
        };
        // Everything from here runs in the session's own task: the handler returns at once, so a
        // client that goes away while the entry is written cannot leave a registered session
        // without a task to end it.
        tokio::spawn(async move {
            session.first_write().await;
            let text =
                format!("mite of cell {} connected to gateway {}", session.key.cell, session.shared.options.replica);
            session.activity(varroa_link::activity::MITE_CONNECTED, text).await;
            session.run(inbound, tx, replaced_rx).await
        });
        let stream = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
        Ok(Response::new(Box::pin(stream)))
    }
}

struct Session {
    shared: Arc<Shared>,
    store: Store,
    key: MiteKey,
    controller: ControllerKey,
    id: String,
    entry: MiteEntry,
    revision: Option<u64>,
    dirty: bool,
    landed: bool,
    last_write: Option<Instant>,
    last_sent_digest: Option<String>,
    hello: pb::Hello,
    /// Permits for build-event batches being stored.
    batches: Arc<Semaphore>,
    /// Permits for log chunks being written.
    log_chunks: Arc<Semaphore>,
    /// Permits for build claims waiting for the ledger.
    claims: Arc<Semaphore>,
    /// Permits for artifact requests being signed.
    artifact_requests: Arc<Semaphore>,
}

/// Where a stream's events come from: what the gateway stamps on them.
struct Stamp {
    cluster: String,
    controller: ControllerKey,
    key: MiteKey,
}

/// The id of an event the gateway refuses, when it has a usable one.
fn id_of(bytes: &[u8]) -> String {
    if bytes.len() > builds::MAX_EVENT_BYTES {
        return String::new();
    }
    serde_json::from_slice::<serde_json::Value>(bytes).map(|v| builds::raw_id(&v)).unwrap_or_default()
}

/// Checks, stamps and publishes one batch; the `EventsAck` to send.
async fn store_batch(shared: &Shared, sink: &BuildsSink, stamp: &Stamp, batch: pb::BuildEvents) -> pb::EventsAck {
    let m = &shared.metrics;
    let received = now();
    let mut rejected = Vec::new();
    let mut records = Vec::with_capacity(batch.events.len());
    for bytes in &batch.events {
        match builds::parse_event_bytes(bytes) {
            Ok(event) => records.push(builds::RecordedEvent {
                cluster: stamp.cluster.clone(),
                namespace: stamp.controller.namespace().to_owned(),
                controller: stamp.controller.controller().to_owned(),
                cell: stamp.key.cell,
                received,
                event,
            }),
            Err(e) => rejected
                .push(pb::RejectedEvent { id: id_of(bytes), error: kv::bounded(&e.to_string(), MAX_REJECTION_TEXT) }),
        }
    }
    if let Some(first) = rejected.first() {
        m.build_events("rejected", rejected.len());
        tracing::warn!(
            mite = %stamp.key,
            batch = batch.batch,
            rejected = rejected.len(),
            first_id = %first.id,
            first_error = %kv::bounded(&first.error, kv::MAX_SHORT_FIELD),
            "build events rejected as malformed"
        );
    }
    let ack = |accepted: usize, rejected: Vec<pb::RejectedEvent>, retry_after_ms: u32| pb::EventsAck {
        batch: batch.batch,
        accepted: accepted as u32,
        rejected,
        retry_after_ms,
    };
    if records.is_empty() {
        m.build_batch("rejected");
        return ack(0, rejected, 0);
    }
    let subject = builds::subject(&stamp.cluster, &stamp.controller);
    let publish = async {
        // Every publish first (JetStream pipelines them), then every acknowledgement.
        let mut pending = Vec::with_capacity(records.len());
        for r in &records {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert(async_nats::header::NATS_MESSAGE_ID, r.msg_id().as_str());
            pending.push(sink.js.publish_with_headers(subject.clone(), headers, kv::encode(r)).await?);
        }
        let mut duplicates = 0;
        for p in pending {
            if p.await?.duplicate {
                duplicates += 1;
            }
        }
        Ok::<usize, async_nats::jetstream::context::PublishError>(duplicates)
    };
    let failure = match tokio::time::timeout(PUBLISH_TIMEOUT, publish).await {
        Ok(Ok(duplicates)) => {
            m.build_batch("stored");
            m.build_events("stored", records.len() - duplicates);
            m.build_events("duplicate", duplicates);
            tracing::debug!(mite = %stamp.key, batch = batch.batch, events = records.len(), duplicates, "build events stored");
            return ack(records.len(), rejected, 0);
        }
        Ok(Err(e)) => {
            if e.kind() == async_nats::jetstream::context::PublishErrorKind::StreamNotFound {
                // Someone deleted the stream: create it again for the mite's retry.
                let reopen = builds::open_stream(&sink.js, sink.replicas);
                match tokio::time::timeout(KV_TIMEOUT, reopen).await {
                    Ok(Ok(_)) => tracing::warn!("the {} stream was missing; created it again", builds::STREAM),
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "the {} stream is missing and cannot be created", builds::STREAM)
                    }
                    Err(_) => {}
                }
            }
            e.to_string()
        }
        Err(_) => format!("JetStream did not acknowledge within {PUBLISH_TIMEOUT:?}"),
    };
    tracing::warn!(mite = %stamp.key, batch = batch.batch, events = records.len(), error = %failure,
        "cannot store build events now; the mite will send the batch again");
    m.build_batch("retry");
    m.build_events("retry", records.len());
    ack(0, Vec::new(), STORE_RETRY_AFTER_MS)
}

fn log_ack(
    id: u64,
    outcome: pb::LogOutcome,
    next: u64,
    complete: bool,
    retry_after_ms: u32,
    error: String,
) -> pb::LogAck {
    pb::LogAck {
        id,
        outcome: outcome as i32,
        next,
        complete,
        retry_after_ms,
        error: kv::bounded(&error, MAX_REJECTION_TEXT),
    }
}

/// Writes one chunk; the `LogAck` to send. A landed chunk is announced on core NATS.
async fn write_log_chunk(
    shared: &Shared,
    sink: &LogSink,
    mite: &MiteKey,
    key: &varroa_blobs::LogKey,
    chunk: pb::LogChunk,
) -> pb::LogAck {
    use varroa_blobs::{ChunkError, ChunkOutcome};
    let m = &shared.metrics;
    let len = chunk.data.len();
    let write = sink.writer.write_chunk(key, chunk.offset, chunk.data.into(), chunk.last);
    let outcome = match tokio::time::timeout(LOG_WRITE_TIMEOUT, write).await {
        Ok(r) => r,
        Err(_) => {
            m.log_chunk("retry", 0);
            tracing::warn!(%mite, log = %key.prefix(), offset = chunk.offset, "the log store did not answer within {LOG_WRITE_TIMEOUT:?}; the mite will send the chunk again");
            return log_ack(
                chunk.id,
                pb::LogOutcome::Retry,
                0,
                false,
                LOG_RETRY_AFTER_MS,
                format!("the log store did not answer within {LOG_WRITE_TIMEOUT:?}; keep the log and retry"),
            );
        }
    };
    match outcome {
        Ok(ChunkOutcome::Stored { next, duplicate, complete }) => {
            m.log_chunk(if duplicate { "duplicate" } else { "stored" }, if duplicate { 0 } else { len });
            if let Some(nats) = &sink.nats {
                let subject = varroa_blobs::logs::notice_subject(key.cluster(), key.namespace(), key.controller());
                let notice =
                    varroa_blobs::Notice { job: key.job().to_owned(), build: key.build(), next, last: complete };
                if let Err(e) = nats.publish(subject, kv::encode(&notice)).await {
                    tracing::debug!(error = %e, "cannot publish a log notice (live tails poll the store anyway)");
                }
            }
            log_ack(chunk.id, pb::LogOutcome::Stored, next, complete, 0, String::new())
        }
        Ok(ChunkOutcome::Conflict { next, complete }) => {
            m.log_chunk("conflict", 0);
            tracing::debug!(%mite, log = %key.prefix(), offset = chunk.offset, next, complete, "log chunk not at the stored end");
            let error = if complete {
                format!("the log of {} is complete at {next} bytes: nothing more is stored", key.describe())
            } else {
                format!(
                    "offset {} is not the stored end of the log of {}: it is stored up to {next}; send from there",
                    chunk.offset,
                    key.describe()
                )
            };
            log_ack(chunk.id, pb::LogOutcome::Conflict, next, complete, 0, error)
        }
        Err(ChunkError::Invalid(why)) => {
            m.log_chunk("refused", 0);
            log_ack(chunk.id, pb::LogOutcome::Refused, 0, false, 0, why)
        }
        Err(ChunkError::Store(e)) => {
            m.log_chunk("retry", 0);
            tracing::warn!(%mite, log = %key.prefix(), offset = chunk.offset, error = %e, "cannot write a log chunk now; the mite will send it again");
            log_ack(
                chunk.id,
                pb::LogOutcome::Retry,
                0,
                false,
                LOG_RETRY_AFTER_MS,
                format!("the log store cannot take the chunk now ({e}); keep the log and retry"),
            )
        }
    }
}

/// The metric label of a decision.
fn decision_label(decision: i32) -> &'static str {
    match pb::ClaimDecision::try_from(decision).unwrap_or(pb::ClaimDecision::Unspecified) {
        pb::ClaimDecision::Granted => "granted",
        pb::ClaimDecision::Refused => "refused",
        pb::ClaimDecision::Retry => "retry",
        pb::ClaimDecision::Rejected => "rejected",
        pb::ClaimDecision::LedgerDown | pb::ClaimDecision::Unspecified => "ledger_down",
    }
}

fn ledger_down(id: u64, retry_after_ms: u32, error: String) -> pb::ClaimAnswer {
    pb::ClaimAnswer {
        id,
        decision: pb::ClaimDecision::LedgerDown as i32,
        retry_after_ms,
        error: kv::bounded(&error, MAX_REJECTION_TEXT),
        ..Default::default()
    }
}

/// Asks the ledger within `share`; the answer, and why it is `LEDGER_DOWN` when it is.
async fn ask_ledger(
    client: &async_nats::Client,
    subject: String,
    request: &claims::LedgerRequest,
    share: Duration,
    id: u64,
) -> (pb::ClaimAnswer, Option<&'static str>) {
    use async_nats::RequestErrorKind;
    let down = |why, error: String| (ledger_down(id, CLAIM_RETRY_AFTER_MS, error), Some(why));
    if client.connection_state() != async_nats::connection::State::Connected {
        return down("nats_down", "NATS is not connected: the ledger cannot be asked now".into());
    }
    let ms = share.as_millis();
    let ask = client
        .send_request(subject.clone(), async_nats::Request::new().payload(kv::encode(request)).timeout(Some(share)));
    // The request's own timeout should end it; this bounds it whatever the client does.
    let reply = match tokio::time::timeout(share, ask).await {
        Ok(Ok(reply)) => reply,
        Ok(Err(e)) => {
            return match e.kind() {
                RequestErrorKind::NoResponders => down(
                    "no_responders",
                    format!("no ledger answers on {subject} (no responders: is the recorder's ledger running?)"),
                ),
                RequestErrorKind::TimedOut => down(
                    "timeout",
                    format!("the ledger did not answer within {ms} ms (the gateway's share of the budget)"),
                ),
                _ => down("nats_down", format!("cannot ask the ledger over NATS: {e}")),
            };
        }
        Err(_) => {
            return down(
                "timeout",
                format!("the ledger did not answer within {ms} ms (the gateway's share of the budget)"),
            );
        }
    };
    let answer = match serde_json::from_slice::<claims::LedgerAnswer>(&reply.payload) {
        Ok(a) => a,
        Err(e) => {
            return down("bad_reply", format!("the ledger's reply on {subject} is not a LedgerAnswer: {e}"));
        }
    };
    let decided = |decision: pb::ClaimDecision| pb::ClaimAnswer { id, decision: decision as i32, ..Default::default() };
    let answer = match answer {
        claims::LedgerAnswer::Granted { build } if (1..=builds::MAX_BUILD).contains(&build) => {
            pb::ClaimAnswer { build, ..decided(pb::ClaimDecision::Granted) }
        }
        claims::LedgerAnswer::Granted { build } => {
            return down("bad_reply", format!("the ledger granted build {build}, not a build number (1 to 2^53)"));
        }
        claims::LedgerAnswer::Refused { holder } => pb::ClaimAnswer {
            holder,
            error: format!("cell {holder} holds this trigger"),
            ..decided(pb::ClaimDecision::Refused)
        },
        claims::LedgerAnswer::Retry { after_ms, reason } => {
            let after = Duration::from_millis(after_ms).clamp(claims::MIN_RETRY_AFTER, claims::MAX_RETRY_AFTER);
            pb::ClaimAnswer {
                retry_after_ms: after.as_millis() as u32,
                error: kv::bounded(&reason, MAX_REJECTION_TEXT),
                ..decided(pb::ClaimDecision::Retry)
            }
        }
        claims::LedgerAnswer::Rejected { error } => {
            pb::ClaimAnswer { error: kv::bounded(&error, MAX_REJECTION_TEXT), ..decided(pb::ClaimDecision::Rejected) }
        }
    };
    (answer, None)
}

enum Write {
    Done,
    Failed,
    Replaced,
}

enum End {
    Closed,
    ShuttingDown,
    Replaced,
    HeartbeatTimeout,
}

impl Session {
    async fn activity(&self, kind: &'static str, message: String) {
        if let Some(a) = &self.shared.activity {
            a.publish(&self.key, kind, message).await;
        }
    }

    /// Reads the cell's entry (keeping its observation and last apply) and writes the new stream.
    async fn first_write(&mut self) {
        let previous = match tokio::time::timeout(KV_TIMEOUT, self.store.entry(self.key.to_string())).await {
            Ok(Ok(e)) => e,
            _ => None,
        };
        if let Some(prev) = previous {
            if let Ok(old) = kv::decode_mite(&prev.key, &prev.value) {
                self.entry.observation = old.observation;
                self.entry.last_apply_result = old.last_apply_result;
            }
            self.revision = Some(prev.revision);
        }
        let t = now();
        self.entry.connected = true;
        self.entry.since = Some(t);
        self.entry.last_heartbeat = Some(t);
        self.entry.gateway_replica = self.shared.options.replica.clone();
        self.entry.session = self.id.clone();
        self.entry.jenkins_version = kv::bounded(&self.hello.jenkins_version, kv::MAX_SHORT_FIELD);
        self.entry.plugin_digest = kv::bounded(&self.hello.plugin_digest, kv::MAX_SHORT_FIELD);
        self.entry.mite_version = kv::bounded(&self.hello.mite_version, kv::MAX_SHORT_FIELD);
        // On hello, this stream takes the cell over whoever wrote it before.
        let _ = self.write().await;
    }

    /// Writes the entry. Until this stream's first write lands, a revision conflict is resolved in
    /// its favour (the hello takes the cell over); afterwards a conflict with another session
    /// means this stream was replaced.
    async fn write(&mut self) -> Write {
        let take_over = !self.landed;
        let key = self.key.to_string();
        for _ in 0..3 {
            let value = kv::encode(&self.entry);
            let result = match self.revision {
                Some(rev) => tokio::time::timeout(KV_TIMEOUT, self.store.update(&key, value, rev))
                    .await
                    .map(|r| r.map_err(|e| e.kind() == UpdateErrorKind::WrongLastRevision)),
                None => tokio::time::timeout(KV_TIMEOUT, self.store.create(&key, value))
                    .await
                    .map(|r| r.map_err(|e| e.kind() == async_nats::jetstream::kv::CreateErrorKind::AlreadyExists)),
            };
            match result {
                Ok(Ok(rev)) => {
                    self.revision = Some(rev);
                    self.landed = true;
                    self.dirty = false;
                    self.last_write = Some(Instant::now());
                    return Write::Done;
                }
                Ok(Err(true)) => {
                    // Someone else wrote the entry: take it over (hello), or see who.
                    match tokio::time::timeout(KV_TIMEOUT, self.store.entry(&key)).await {
                        Ok(Ok(Some(current))) => {
                            let theirs =
                                kv::decode_mite(&current.key, &current.value).map(|e| e.session).unwrap_or_default();
                            if !take_over
                                && theirs != self.id
                                && current.operation == async_nats::jetstream::kv::Operation::Put
                            {
                                return Write::Replaced;
                            }
                            self.revision = Some(current.revision);
                        }
                        Ok(Ok(None)) => self.revision = None,
                        _ => break,
                    }
                }
                Ok(Err(false)) | Err(_) => break,
            }
        }
        self.shared.metrics.kv_write_error();
        tracing::warn!(mite = %self.key, "cannot write varroa_mites; retrying");
        self.dirty = true;
        Write::Failed
    }

    /// Starts storing a batch of build events in its own task, or answers it at once (too many in
    /// flight, the stream not open yet, an oversized batch).
    fn build_events(&self, batch: pb::BuildEvents, tx: &mpsc::Sender<Result<GatewayMessage, Status>>) {
        let m = &self.shared.metrics;
        let n = batch.events.len();
        let answer_now = |ack: pb::EventsAck| {
            if tx.try_send(Ok(message(gateway_message::Kind::EventsAck(ack)))).is_err() {
                tracing::warn!(mite = %self.key, "cannot queue an EventsAck: the mite does not read its stream");
            }
        };
        if n > builds::MAX_EVENTS_PER_BATCH {
            tracing::warn!(mite = %self.key, batch = batch.batch, events = n, max = builds::MAX_EVENTS_PER_BATCH,
                "build events rejected: the batch is larger than the protocol allows");
            m.build_batch("oversized");
            m.build_events("rejected", n);
            let error = format!(
                "batch: {n} events, at most {} in one BuildEvents; split the plugin's request",
                builds::MAX_EVENTS_PER_BATCH
            );
            let rejected = vec![pb::RejectedEvent { id: String::new(), error }];
            return answer_now(pb::EventsAck { batch: batch.batch, accepted: 0, rejected, retry_after_ms: 0 });
        }
        let retry = |outcome: &'static str, ms: u32| {
            m.build_batch(outcome);
            m.build_events("retry", n);
            answer_now(pb::EventsAck { batch: batch.batch, retry_after_ms: ms, ..Default::default() });
        };
        let Some(sink) = self.shared.builds.borrow().clone() else {
            return retry("not_ready", BUSY_RETRY_AFTER_MS);
        };
        let Ok(permit) = self.batches.clone().try_acquire_owned() else {
            tracing::debug!(mite = %self.key, batch = batch.batch, "{MAX_BATCHES_IN_FLIGHT} batches in flight; asking the mite to retry");
            return retry("busy", BUSY_RETRY_AFTER_MS);
        };
        let stamp = Stamp {
            cluster: self.shared.options.cluster.clone(),
            controller: self.controller.clone(),
            key: self.key.clone(),
        };
        let shared = self.shared.clone();
        let tx = tx.clone();
        let wait = shared.options.heartbeat_interval * 3;
        tokio::spawn(async move {
            let ack = store_batch(&shared, &sink, &stamp, batch).await;
            let msg = Ok(message(gateway_message::Kind::EventsAck(ack)));
            if let Ok(Err(_)) | Err(_) = tokio::time::timeout(wait, tx.send(msg)).await {
                tracing::debug!(mite = %stamp.key, "the stream ended before its EventsAck could be sent");
            }
            drop(permit);
        });
    }

    /// Starts writing a log chunk in its own task, or answers it at once (malformed, too many in
    /// flight, no log store).
    fn log_chunk(&self, chunk: pb::LogChunk, tx: &mpsc::Sender<Result<GatewayMessage, Status>>) {
        let m = &self.shared.metrics;
        let answer_now = |ack: pb::LogAck| {
            if tx.try_send(Ok(message(gateway_message::Kind::LogAck(ack)))).is_err() {
                tracing::warn!(mite = %self.key, "cannot queue a LogAck: the mite does not read its stream");
            }
        };
        let id = chunk.id;
        let refuse = |error: String| {
            m.log_chunk("refused", 0);
            tracing::warn!(mite = %self.key, id, error = %kv::bounded(&error, kv::MAX_SHORT_FIELD), "log chunk refused as malformed");
            answer_now(log_ack(id, pb::LogOutcome::Refused, 0, false, 0, error));
        };
        let retry = |outcome: &'static str, ms: u32, error: String| {
            m.log_chunk(outcome, 0);
            answer_now(log_ack(id, pb::LogOutcome::Retry, 0, false, ms, error));
        };
        if chunk.data.len() > varroa_blobs::logs::MAX_CHUNK_BYTES {
            return refuse(format!(
                "the chunk is {} bytes, at most {}: send smaller chunks",
                chunk.data.len(),
                varroa_blobs::logs::MAX_CHUNK_BYTES
            ));
        }
        let key = match varroa_blobs::LogKey::new(
            &self.shared.options.cluster,
            self.controller.namespace(),
            self.controller.controller(),
            &chunk.job,
            chunk.build,
        ) {
            Ok(k) => k,
            Err(e) => return refuse(e.to_string()),
        };
        let Some(sink) = self.shared.logs.clone() else {
            return retry(
                "no_store",
                NO_LOG_STORE_RETRY_AFTER_MS,
                "this gateway has no log store (--log-store); keep the log".into(),
            );
        };
        let Ok(permit) = self.log_chunks.clone().try_acquire_owned() else {
            return retry(
                "busy",
                BUSY_RETRY_AFTER_MS,
                format!("{MAX_LOG_CHUNKS_IN_FLIGHT} chunks of this controller cell are being written; retry"),
            );
        };
        let shared = self.shared.clone();
        let mite = self.key.clone();
        let tx = tx.clone();
        let wait = shared.options.heartbeat_interval * 3;
        tokio::spawn(async move {
            let ack = write_log_chunk(&shared, &sink, &mite, &key, chunk).await;
            let msg = Ok(message(gateway_message::Kind::LogAck(ack)));
            if let Ok(Err(_)) | Err(_) = tokio::time::timeout(wait, tx.send(msg)).await {
                tracing::debug!(%mite, "the stream ended before its LogAck could be sent");
            }
            drop(permit);
        });
    }

    /// Starts signing an artifact request's URLs in its own task, or answers it at once
    /// (malformed, no store that presigns, too many in flight).
    fn artifact_request(&self, req: pb::ArtifactRequest, tx: &mpsc::Sender<Result<GatewayMessage, Status>>) {
        let m = self.shared.metrics.clone();
        let id = req.id;
        let answer_now = |answer: pb::ArtifactAnswer| {
            if tx.try_send(Ok(message(gateway_message::Kind::ArtifactAnswer(answer)))).is_err() {
                tracing::warn!(mite = %self.key, "cannot queue an ArtifactAnswer: the mite does not read its stream");
            }
        };
        let answer = |outcome: pb::ArtifactOutcome, retry_after_ms: u32, error: String| pb::ArtifactAnswer {
            id,
            outcome: outcome as i32,
            retry_after_ms,
            error: kv::bounded(&error, MAX_REJECTION_TEXT),
            ..Default::default()
        };
        let refuse = |error: String| {
            m.artifact_request("refused", 0);
            tracing::warn!(mite = %self.key, id, error = %kv::bounded(&error, kv::MAX_SHORT_FIELD), "artifact request refused as malformed");
            answer_now(answer(pb::ArtifactOutcome::Refused, 0, error));
        };
        let key = match varroa_blobs::ArtifactKey::new(
            &self.shared.options.cluster,
            self.controller.namespace(),
            self.controller.controller(),
            self.key.cell,
            &req.job,
            req.build,
        ) {
            Ok(k) => k,
            Err(e) => return refuse(e.to_string()),
        };
        if let Err(e) = varroa_link::artifacts::check_files(req.files.iter().map(|f| (f.path.as_str(), f.size))) {
            return refuse(e.to_string());
        }
        let Some(artifacts) = self.shared.artifacts.clone().filter(|a| a.store().can_presign()) else {
            m.artifact_request("unsupported", 0);
            let store = self.shared.artifacts.as_ref().map_or("none".to_owned(), |a| a.store().url().to_owned());
            return answer_now(answer(
                pb::ArtifactOutcome::Unsupported,
                0,
                format!(
                    "artifacts need an s3:// store: this gateway's store ({store}) cannot presign upload URLs; archive \
                     with Jenkins' own archiving"
                ),
            ));
        };
        let Ok(permit) = self.artifact_requests.clone().try_acquire_owned() else {
            m.artifact_request("busy", 0);
            return answer_now(answer(
                pb::ArtifactOutcome::Retry,
                BUSY_RETRY_AFTER_MS,
                format!(
                    "{MAX_ARTIFACT_REQUESTS_IN_FLIGHT} artifact requests of this controller cell are being signed; retry"
                ),
            ));
        };
        let files: Vec<(String, u64)> = req.files.into_iter().map(|f| (f.path, f.size)).collect();
        let mite = self.key.clone();
        let tx = tx.clone();
        let wait = self.shared.options.heartbeat_interval * 3;
        tokio::spawn(async move {
            let signed = tokio::time::timeout(ARTIFACT_SIGN_TIMEOUT, artifacts.sign_puts(&key, &files)).await;
            let reply = match signed {
                Ok(Ok(s)) => {
                    m.artifact_request("signed", s.uploads.len());
                    tracing::debug!(%mite, build = %key.describe(), files = s.uploads.len(), "artifact upload URLs signed");
                    let expires = s.expires.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
                    pb::ArtifactAnswer {
                        id,
                        outcome: pb::ArtifactOutcome::Signed as i32,
                        uploads: s
                            .uploads
                            .into_iter()
                            .map(|(path, url)| pb::ArtifactUpload { path, url: url.to_string() })
                            .collect(),
                        expires_at_unix_ms: i64::try_from(expires.as_millis()).unwrap_or(i64::MAX),
                        ..Default::default()
                    }
                }
                Ok(Err(varroa_blobs::SignError::Invalid(e))) => {
                    m.artifact_request("refused", 0);
                    tracing::warn!(%mite, id, error = %e, "artifact request refused as malformed");
                    pb::ArtifactAnswer {
                        id,
                        outcome: pb::ArtifactOutcome::Refused as i32,
                        error: kv::bounded(&e.to_string(), MAX_REJECTION_TEXT),
                        ..Default::default()
                    }
                }
                Ok(Err(e @ varroa_blobs::SignError::Unsupported { .. })) => {
                    m.artifact_request("unsupported", 0);
                    pb::ArtifactAnswer {
                        id,
                        outcome: pb::ArtifactOutcome::Unsupported as i32,
                        error: kv::bounded(&e.to_string(), MAX_REJECTION_TEXT),
                        ..Default::default()
                    }
                }
                Ok(Err(varroa_blobs::SignError::Store(e))) => {
                    m.artifact_request("retry", 0);
                    tracing::warn!(%mite, id, error = %e, "cannot sign artifact upload URLs now");
                    pb::ArtifactAnswer {
                        id,
                        outcome: pb::ArtifactOutcome::Retry as i32,
                        retry_after_ms: ARTIFACT_RETRY_AFTER_MS,
                        error: kv::bounded(&format!("cannot sign upload URLs now ({e}); retry"), MAX_REJECTION_TEXT),
                        ..Default::default()
                    }
                }
                Err(_) => {
                    m.artifact_request("retry", 0);
                    pb::ArtifactAnswer {
                        id,
                        outcome: pb::ArtifactOutcome::Retry as i32,
                        retry_after_ms: ARTIFACT_RETRY_AFTER_MS,
                        error: format!("signing did not finish within {ARTIFACT_SIGN_TIMEOUT:?}; retry"),
                        ..Default::default()
                    }
                }
            };
            let msg = Ok(message(gateway_message::Kind::ArtifactAnswer(reply)));
            if let Ok(Err(_)) | Err(_) = tokio::time::timeout(wait, tx.send(msg)).await {
                tracing::debug!(%mite, "the stream ended before its ArtifactAnswer could be sent");
            }
            drop(permit);
        });
    }

    /// Starts asking the ledger for a claim in its own task, or answers it at once (malformed, too
    /// many in flight, no budget left, no NATS client).
    fn claim_request(&self, req: pb::ClaimRequest, tx: &mpsc::Sender<Result<GatewayMessage, Status>>) {
        let started = Instant::now();
        let m = self.shared.metrics.clone();
        let id = req.id;
        let wait = self.shared.options.heartbeat_interval * 3;
        let answer_now = |answer: pb::ClaimAnswer| {
            m.claim(decision_label(answer.decision), started.elapsed().as_secs_f64());
            // A burst of claims answered at once can fill the stream's queue: the mite waits for
            // every answer, so one that does not fit now is sent as soon as it does.
            match tx.try_send(Ok(message(gateway_message::Kind::ClaimAnswer(answer)))) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(msg)) => {
                    let tx = tx.clone();
                    let mite = self.key.clone();
                    tokio::spawn(async move {
                        if let Ok(Err(_)) | Err(_) = tokio::time::timeout(wait, tx.send(msg)).await {
                            tracing::warn!(%mite, "cannot send a ClaimAnswer: the mite does not read its stream");
                        }
                    });
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {}
            }
        };
        let down = |why: &'static str, retry_after_ms: u32, error: String| {
            m.claim_ledger_down(why);
            tracing::debug!(mite = %self.key, id, why, error = %error, "build claim answered LEDGER_DOWN");
            answer_now(ledger_down(id, retry_after_ms, error));
        };
        let checked = claims::check_fields(&req.claim_id, &req.job, &req.trigger).and_then(|()| {
            let max = claims::MAX_BUDGET.as_millis() as u32;
            if req.budget_ms == 0 || req.budget_ms > max {
                return Err(claims::ClaimError {
                    field: "budget_ms".into(),
                    reason: format!("{} is outside 1 to {max}", req.budget_ms),
                });
            }
            Ok(())
        });
        if let Err(e) = checked {
            tracing::warn!(mite = %self.key, id, error = %kv::bounded(&e.to_string(), kv::MAX_SHORT_FIELD), "build claim rejected as malformed");
            return answer_now(pb::ClaimAnswer {
                id,
                decision: pb::ClaimDecision::Rejected as i32,
                error: kv::bounded(&e.to_string(), MAX_REJECTION_TEXT),
                ..Default::default()
            });
        }
        let Some(client) = self.shared.ledger.clone() else {
            return down("nats_down", CLAIM_RETRY_AFTER_MS, "this gateway has no NATS client to ask the ledger".into());
        };
        let Ok(permit) = self.claims.clone().try_acquire_owned() else {
            return down(
                "busy",
                CLAIM_BUSY_RETRY_AFTER_MS,
                format!("{MAX_CLAIMS_IN_FLIGHT} claims of this controller cell are waiting for the ledger; retry"),
            );
        };
        let budget = Duration::from_millis(u64::from(req.budget_ms));
        let Some(share) = claims::forward_budget(budget.saturating_sub(started.elapsed())) else {
            return down(
                "budget",
                CLAIM_RETRY_AFTER_MS,
                format!("the claim's budget ({} ms) leaves nothing to ask the ledger with", req.budget_ms),
            );
        };
        let subject = claims::subject(&self.shared.options.cluster, &self.controller);
        let ledger_request = claims::LedgerRequest {
            cluster: self.shared.options.cluster.clone(),
            namespace: self.controller.namespace().to_owned(),
            controller: self.controller.controller().to_owned(),
            cell: self.key.cell,
            id: req.claim_id,
            job: req.job,
            trigger: req.trigger,
            budget_ms: share.as_millis() as u64,
        };
        let mite = self.key.clone();
        let tx = tx.clone();
        tokio::spawn(async move {
            let (answer, why) = ask_ledger(&client, subject, &ledger_request, share, id).await;
            if let Some(why) = why {
                m.claim_ledger_down(why);
                tracing::warn!(%mite, claim = %ledger_request.id, why, error = %answer.error, "the ledger did not decide a build claim");
            }
            m.claim(decision_label(answer.decision), started.elapsed().as_secs_f64());
            let msg = Ok(message(gateway_message::Kind::ClaimAnswer(answer)));
            if let Ok(Err(_)) | Err(_) = tokio::time::timeout(wait, tx.send(msg)).await {
                tracing::debug!(%mite, "the stream ended before its ClaimAnswer could be sent");
            }
            drop(permit);
        });
    }

    /// Sends `current` unless this stream already got its digest. False when the mite does not
    /// take it within three heartbeat intervals (it stopped reading: the stream is ended).
    async fn send_desired(
        &mut self,
        tx: &mpsc::Sender<Result<GatewayMessage, Status>>,
        current: &crate::desired::Current,
    ) -> bool {
        let Some(d) = current else { return true };
        if self.last_sent_digest.as_deref() == Some(d.digest.as_str()) {
            return true;
        }
        let wait = self.shared.options.heartbeat_interval * 3;
        let msg = Ok(message(gateway_message::Kind::Desired(d.to_message())));
        match tokio::time::timeout(wait, tx.send(msg)).await {
            Ok(Ok(())) => {
                tracing::info!(mite = %self.key, digest = %d.digest, "desired configuration sent");
                self.shared.metrics.desired_pushed();
                self.last_sent_digest = Some(d.digest.clone());
                true
            }
            Ok(Err(_)) => false,
            Err(_) => {
                tracing::warn!(mite = %self.key, "the mite does not read its stream; closing it");
                false
            }
        }
    }

    /// When the next write is due after one just attempted: soon again if it failed, else none.
    fn after_write(&self) -> Option<tokio::time::Instant> {
        self.dirty.then(|| tokio::time::Instant::now() + RETRY_EVERY)
    }

    /// Schedules a write of a change: at once, or when [`MIN_WRITE_INTERVAL`] since the last one
    /// has passed (a chatty mite costs at most a few writes a second), keeping an earlier one.
    fn schedule(&self, pending: Option<tokio::time::Instant>, after: Duration) -> Option<tokio::time::Instant> {
        let now = tokio::time::Instant::now();
        let at = match self.last_write {
            Some(t) => (tokio::time::Instant::from_std(t) + after).max(now),
            None => now,
        };
        Some(pending.map_or(at, |p| p.min(at)))
    }

    async fn run(
        mut self,
        mut inbound: Streaming<MiteMessage>,
        tx: mpsc::Sender<Result<GatewayMessage, Status>>,
        mut replaced: watch::Receiver<bool>,
    ) {
        let heartbeat = self.shared.options.heartbeat_interval;
        let mut desired = self.shared.desired.subscribe(&self.controller);
        let current = desired.borrow_and_update().clone();
        let mut deadline = tokio::time::Instant::now() + heartbeat * 3;
        // When the entry must be written next (a change, a heartbeat, a retry); None: nothing to write.
        let mut pending = self.after_write();
        let mut stopping = self.shared.stopping.clone();
        if !self.send_desired(&tx, &current).await {
            return self.finish(End::Closed, &tx).await;
        }
        let end = loop {
            let write_at = pending.unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(3600));
            tokio::select! {
                msg = inbound.message() => {
                    let msg = match msg {
                        Ok(Some(m)) => m,
                        Ok(None) | Err(_) => break End::Closed,
                    };
                    deadline = tokio::time::Instant::now() + heartbeat * 3;
                    self.entry.last_heartbeat = Some(now());
                    match msg.kind {
                        Some(mite_message::Kind::Heartbeat(_)) => {
                            self.shared.metrics.message("heartbeat");
                            // Heartbeats are written at most once per interval.
                            pending = self.schedule(pending, heartbeat);
                        }
                        Some(mite_message::Kind::Observation(delta)) => {
                            self.shared.metrics.message("observation");
                            let before = self.entry.observation.clone();
                            if self.entry.observation.merge(&delta) {
                                pending = self.schedule(pending, MIN_WRITE_INTERVAL);
                                for (kind, text) in varroa_link::activity::observation_changes(&before, &self.entry.observation) {
                                    self.activity(kind, text).await;
                                }
                            }
                        }
                        Some(mite_message::Kind::ApplyResult(r)) => {
                            self.shared.metrics.message("apply_result");
                            let record = ApplyResultRecord::from(&r);
                            tracing::info!(mite = %self.key, digest = %record.digest, succeeded = r.succeeded, "apply result");
                            let (kind, text) = if r.succeeded {
                                (varroa_link::activity::APPLY_SUCCEEDED, format!("configuration {} applied", record.digest))
                            } else {
                                (varroa_link::activity::APPLY_FAILED, format!("configuration {} not applied: {}", record.digest, record.message))
                            };
                            self.activity(kind, text).await;
                            self.entry.last_apply_result = Some(record);
                            pending = self.schedule(pending, MIN_WRITE_INTERVAL);
                        }
                        Some(mite_message::Kind::BuildEvents(batch)) => {
                            self.shared.metrics.message("build_events");
                            self.build_events(batch, &tx);
                        }
                        Some(mite_message::Kind::LogChunk(chunk)) => {
                            self.shared.metrics.message("log_chunk");
                            self.log_chunk(chunk, &tx);
                        }
                        Some(mite_message::Kind::ArtifactRequest(req)) => {
                            self.shared.metrics.message("artifact_request");
                            self.artifact_request(req, &tx);
                        }
                        Some(mite_message::Kind::ClaimRequest(req)) => {
                            self.shared.metrics.message("claim_request");
                            self.claim_request(req, &tx);
                        }
                        Some(mite_message::Kind::Hello(_)) => {
                            self.shared.metrics.message("hello_again");
                            let _ = tx.try_send(Err(Status::invalid_argument("Hello is only valid as the first message")));
                            break End::Closed;
                        }
                        None => self.shared.metrics.message("unknown"),
                    }
                }
                _ = tokio::time::sleep_until(write_at), if pending.is_some() => {
                    if let Write::Replaced = self.write().await {
                        break End::Replaced;
                    }
                    pending = self.after_write();
                }
                changed = desired.changed() => {
                    if changed.is_err() {
                        break End::Closed;
                    }
                    let current = desired.borrow_and_update().clone();
                    if !self.send_desired(&tx, &current).await {
                        break End::Closed;
                    }
                }
                _ = replaced.changed() => break End::Replaced,
                res = stopping.changed() => {
                    if res.is_err() || *stopping.borrow() {
                        break End::ShuttingDown;
                    }
                }
                _ = tokio::time::sleep_until(deadline) => break End::HeartbeatTimeout,
                _ = tx.closed() => break End::Closed,
            }
        };
        self.finish(end, &tx).await;
    }

    async fn finish(mut self, end: End, tx: &mpsc::Sender<Result<GatewayMessage, Status>>) {
        let s = self.shared.clone();
        s.metrics.stream(-1);
        let ours = {
            let mut sessions = s.sessions.lock().unwrap_or_else(|p| p.into_inner());
            let ours = sessions.get(&self.key).is_some_and(|(id, _)| *id == self.id);
            if ours {
                sessions.remove(&self.key);
            }
            ours
        };
        s.desired.release(&self.controller);
        let error = |code: &str, text: &str| {
            message(gateway_message::Kind::Error(pb::Error { code: code.into(), message: text.into() }))
        };
        let reason = match end {
            End::Replaced => "replaced",
            End::HeartbeatTimeout => "no message for three heartbeat intervals",
            End::ShuttingDown => "the gateway replica shut down",
            End::Closed => "the stream closed",
        };
        match end {
            End::Replaced => {
                tracing::info!(mite = %self.key, "stream replaced by a newer one");
                let _ = tx.try_send(Ok(error(
                    varroa_link::error_codes::REPLACED,
                    "a newer stream for this controller cell took over",
                )));
                return;
            }
            End::HeartbeatTimeout => {
                tracing::warn!(mite = %self.key, "no message for three heartbeat intervals; closing the stream");
                let _ = tx.try_send(Ok(error(
                    varroa_link::error_codes::HEARTBEAT_TIMEOUT,
                    "no message for three heartbeat intervals",
                )));
            }
            End::ShuttingDown => {
                let _ = tx.try_send(Ok(error(
                    varroa_link::error_codes::SHUTTING_DOWN,
                    "this gateway replica is shutting down; dial again",
                )));
            }
            End::Closed => tracing::info!(mite = %self.key, "mite disconnected"),
        }
        if !ours || !self.landed {
            return;
        }
        self.entry.connected = false;
        self.entry.disconnected_at = Some(now());
        // Only if the entry is still this session's (a write conflict with another means replaced).
        if let Write::Replaced = self.write().await {
            return;
        }
        self.activity(
            varroa_link::activity::MITE_DISCONNECTED,
            format!("mite of cell {} disconnected: {reason}", self.key.cell),
        )
        .await;
    }
}
