//! `varroa-mite run`: the mite's one stream to the gateway.
//!
//! Three tasks, so that a slow Jenkins never stalls the stream and a broken stream never loses
//! what Jenkins said:
//!
//! - the **observer** reads Jenkins every `observe_interval` ([`JenkinsClient::observe`]) into a
//!   watch channel holding the latest [`JenkinsView`] (up with an observation, or down with the
//!   reason). Only the latest value matters, so nothing queues up while the gateway is away.
//! - the **applier** owns the [`Applier`] and the latest desired configuration. It applies each
//!   Desired the gateway pushes (the same digest again only re-checks drift: see
//!   [`crate::apply`]), re-checks drift every `drift_interval`, retries while Jenkins cannot be
//!   asked, and queues [`pb::ApplyResult`]s for the stream. A digest Jenkins refused is not
//!   tried again (its result stands until the operator writes another digest).
//! - the **link** dials the gateway and keeps one `Connect` stream: Hello, then the full
//!   observation, then deltas only when something changed, apply results, and a heartbeat every
//!   interval the Welcome gives. It reconnects forever with capped exponential back-off and full
//!   jitter (AWS' "full jitter": a random delay between zero and the capped exponential), reset
//!   after each stream the gateway welcomed. Each new stream starts with the *full* current
//!   observation, so the gateway's merged state is whole again whatever was lost in between.
//!
//! **Jenkins down or slow.** The stream stays up (heartbeats do not depend on Jenkins). The
//! protocol has no field for "Jenkins is not answering", so the mite says it with what the proto
//! has: a Hello with an empty `jenkins_version` (the proto: "empty when not yet known") and, on a
//! stream already open, an Observation whose `version` is the empty string. When Jenkins answers
//! again, the next observation carries every field. docs/varroa/mite.md describes it.
//!
//! **Identity.** The Hello names `spiffe://varroa.dev/ns/<namespace>/controller/<controller>`
//! from the settings; the gateway refuses it unless the certificate's URI SAN is the same. Before
//! each dial the mite reads the certificate (re-read every time, so a rotated Secret is used at
//! the next reconnect) and logs a clear error when it names another controller.
//!
//! **Build events.** The plugin listener ([`crate::plugin`]) hands each request's checked events
//! to the current stream as one batch with a responder. The link numbers the batch, sends it as
//! `BuildEvents`, and completes the responder when the gateway's `EventsAck` with that number
//! arrives; every batch still waiting when the stream ends is failed (the plugin is answered 503
//! and sends the events again). Between streams no batch is taken: the plugin is answered 503 at
//! once.
//!
//! **Console logs.** The same, chunk by chunk: each plugin chunk is numbered, sent as a
//! `LogChunk`, and answered when the gateway's `LogAck` with that number arrives (the write
//! landed in the log store, or why not); the chunks still waiting when the stream ends are failed
//! (503: the plugin sends them again, and the store does not write a chunk twice).
//!
//! **Build claims.** The same again, claim by claim: each is numbered, sent as a
//! `ClaimRequest`, and answered when the gateway's `ClaimAnswer` with that number arrives. The
//! plugin listener waits only for its share of the claim's budget; an answer arriving after it
//! finds nobody waiting and is dropped. The claims still waiting when the stream ends are failed
//! at once (the listener answers them as the controller's whenLedgerDown says).
//!
//! **Archived artifacts.** The same once more: each request for upload URLs is numbered, sent as
//! an `ArtifactRequest`, and answered when the gateway's `ArtifactAnswer` with that number
//! arrives; the requests still waiting when the stream ends are failed (503: the plugin asks
//! again).
//!
//! **Shutdown.** [`MiteHandle::shutdown`] (SIGTERM in the binary) half-closes the request stream,
//! waits briefly for the gateway to end the response stream, and returns.

use crate::apply::{Applier, ApplyError, DesiredConfig};
use crate::inventory::{InventoryMetrics, InventorySettings};
use crate::jenkins::{ClientConfig, JenkinsClient, Observation};
use crate::plugin::{BatchSlot, Outbound, PluginMetrics, PluginServer};
use crate::settings::{ClaimSettings, RunSettings};
use opkit::health::{HealthServer, Readiness};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tonic::Code;
use varroa_link::client::GatewayAddress;
use varroa_link::proto::v1::{self as pb, gateway_message, mite_link_client::MiteLinkClient, mite_message};
use varroa_pki::MiteIdentity;

/// The largest TLS file read (certificate, key, CA bundle).
const MAX_TLS_FILE: u64 = 1 << 20;
/// How long the gateway may take to answer the Hello.
const WELCOME_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a shutdown waits for the gateway to end the stream.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(3);

/// What the mite last saw of Jenkins.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum JenkinsView {
    /// Not asked yet.
    #[default]
    Unknown,
    /// Jenkins answered.
    Up(Observation),
    /// Jenkins did not answer (unreachable, too slow, an error); the reason.
    Down(String),
}

/// The state of the link, for health checks and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkStatus {
    /// A stream is open and welcomed.
    pub connected: bool,
    /// The replica that welcomed the current (or last) stream.
    pub gateway_replica: String,
    /// Streams the gateway welcomed since start.
    pub sessions: u64,
    /// Dials or streams that failed since start.
    pub failures: u64,
    /// Why the last dial or stream failed.
    pub last_error: Option<String>,
}

/// Errors that stop `run` before it starts.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The Jenkins client could not be built.
    #[error("cannot set up the Jenkins client: {0}")]
    Jenkins(#[from] crate::jenkins::JenkinsError),
    /// The health listener could not be bound.
    #[error("cannot listen on --health-listen {addr}: {reason}; fix: choose a free port, or off")]
    Health {
        /// The address.
        addr: SocketAddr,
        /// Why.
        reason: String,
    },
    /// The plugin token could not be written.
    #[error(
        "cannot write the plugin token --plugin-token-file {path}: {reason}; fix: mount a writable volume there (the pod's plugin emptyDir), or set --plugin-listen off"
    )]
    PluginToken {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The plugin listener could not be bound.
    #[error("cannot listen on --plugin-listen {addr}: {reason}; fix: choose a free port, or off")]
    PluginListen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        reason: String,
    },
}

/// Why one stream ended (or never started).
#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error("cannot read {what} {path}: {reason}; fix: mount the Controller's mite certificate Secret there")]
    TlsFile { what: &'static str, path: String, reason: String },
    #[error("{0}")]
    Dial(String),
    #[error("the gateway refused this mite ({code:?}): {message}{fix}")]
    Refused { code: Code, message: String, fix: &'static str },
    #[error("the gateway ended the stream: {0}")]
    Ended(String),
}

#[derive(Debug)]
enum SessionEnd {
    Shutdown,
    Closed(String),
}

/// The mite's metrics.
#[derive(Default)]
struct Metrics {
    stream_up: Gauge,
    jenkins_up: Gauge,
    dials: Family<Vec<(String, String)>, Counter>,
    applies: Family<Vec<(String, String)>, Counter>,
    messages: Family<Vec<(String, String)>, Counter>,
}

impl Metrics {
    fn register(self: &Arc<Self>, r: &mut Registry) {
        r.register("varroa_mite_stream_up", "1 while the gateway stream is open", self.stream_up.clone());
        r.register("varroa_mite_jenkins_up", "1 while Jenkins answers the mite", self.jenkins_up.clone());
        r.register("varroa_mite_dials", "Gateway dials by outcome", self.dials.clone());
        r.register("varroa_mite_applies", "Desired configurations handled by outcome", self.applies.clone());
        r.register("varroa_mite_messages_sent", "Messages sent to the gateway by kind", self.messages.clone());
    }
    fn inc(f: &Family<Vec<(String, String)>, Counter>, key: &str, value: &str) {
        f.get_or_create(&vec![(key.to_string(), value.to_string())]).inc();
    }
}

/// A running mite.
pub struct MiteHandle {
    /// The health listener's address, if any.
    pub health_addr: Option<SocketAddr>,
    /// The plugin listener's address, if any.
    pub plugin_addr: Option<SocketAddr>,
    status: watch::Receiver<LinkStatus>,
    jenkins: watch::Receiver<JenkinsView>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl MiteHandle {
    /// The link's state now.
    pub fn status(&self) -> LinkStatus {
        self.status.borrow().clone()
    }
    /// A receiver of the link's state.
    pub fn watch_status(&self) -> watch::Receiver<LinkStatus> {
        self.status.clone()
    }
    /// What the mite last saw of Jenkins.
    pub fn jenkins(&self) -> JenkinsView {
        self.jenkins.borrow().clone()
    }
    /// Closes the stream cleanly and waits for every task.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Starts the observer, the applier, the link and the health listener; returns at once. The
/// build claim gate is off ([`start_with`] sets it).
pub async fn start(settings: RunSettings) -> Result<MiteHandle, RunError> {
    start_with(settings, ClaimSettings::default()).await
}

/// [`start`], with the build claim settings (`--claims`, `--claims-when-ledger-down`).
pub async fn start_with(settings: RunSettings, claims: ClaimSettings) -> Result<MiteHandle, RunError> {
    start_full(settings, claims, InventorySettings::default()).await
}

/// [`start_with`], with the trigger inventory's settings (`--inventory-interval`).
pub async fn start_full(
    settings: RunSettings,
    claims: ClaimSettings,
    inventory: InventorySettings,
) -> Result<MiteHandle, RunError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut jcfg = ClientConfig::new(&settings.jenkins_url, &settings.jenkins_user, &settings.jenkins_token_file);
    jcfg.timeout = settings.jenkins_timeout;
    let client = Arc::new(JenkinsClient::new(jcfg)?);
    let metrics = Arc::new(Metrics::default());
    let plugin_metrics = Arc::new(PluginMetrics::default());
    let inventory_metrics = Arc::new(InventoryMetrics::default());
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    plugin_metrics.register(&mut registry);
    inventory_metrics.register(&mut registry);
    let readiness = Readiness::new();
    readiness.set_not_ready("connecting to the gateway");
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = Vec::new();

    // The plugin listener first: its token must be in place before the plugin looks.
    let batches = BatchSlot::default();
    let plugin = match settings.plugin_listen {
        Some(addr) => {
            let path = &settings.plugin_token_file;
            let token = crate::plugin::write_token(path)
                .map_err(|e| RunError::PluginToken { path: path.display().to_string(), reason: e.to_string() })?;
            let server = PluginServer::bind(addr, token, batches.clone(), claims, plugin_metrics)
                .await
                .map_err(|e| RunError::PluginListen { addr, reason: e.to_string() })?;
            tracing::info!(token_file = %path.display(), "plugin token written");
            Some(server)
        }
        None => None,
    };

    let health_addr = match settings.health_listen {
        Some(addr) => {
            let server = HealthServer::bind(addr, readiness.clone(), Arc::new(registry))
                .await
                .map_err(|e| RunError::Health { addr, reason: e.to_string() })?;
            let local = server.local_addr();
            let stop = stop_rx.clone();
            tasks.push(tokio::spawn(async move {
                if let Err(e) = server.serve(stopped(stop)).await {
                    tracing::error!(error = %e, "health server stopped");
                }
            }));
            Some(local)
        }
        None => None,
    };
    let plugin_addr = plugin.as_ref().map(PluginServer::local_addr);
    if let Some(server) = plugin {
        tasks.push(tokio::spawn(server.serve(stopped(stop_rx.clone()))));
    }

    let (jenkins_tx, jenkins_rx) = watch::channel(JenkinsView::Unknown);
    tasks.push(tokio::spawn(observe_loop(
        client.clone(),
        settings.observe_interval,
        jenkins_tx,
        metrics.clone(),
        stop_rx.clone(),
    )));

    if plugin_addr.is_some() {
        tasks.push(tokio::spawn(crate::inventory::run(
            client.clone(),
            inventory,
            batches.clone(),
            inventory_metrics,
            stop_rx.clone(),
        )));
    }

    let (desired_tx, desired_rx) = watch::channel(None::<DesiredConfig>);
    let (results_tx, results_rx) = mpsc::channel(16);
    let applier = Applier::new(client, settings.casc_dir.clone());
    tasks.push(tokio::spawn(apply_loop(
        applier,
        desired_rx,
        results_tx,
        settings.drift_interval,
        settings.observe_interval,
        metrics.clone(),
        stop_rx.clone(),
    )));

    let (status_tx, status_rx) = watch::channel(LinkStatus::default());
    let link = Link {
        settings,
        jenkins: jenkins_rx.clone(),
        desired: desired_tx,
        results: results_rx,
        status: status_tx,
        readiness,
        metrics,
        batches,
        stop: stop_rx,
    };
    tasks.push(tokio::spawn(link.run()));
    Ok(MiteHandle { health_addr, plugin_addr, status: status_rx, jenkins: jenkins_rx, stop: stop_tx, tasks })
}

async fn stopped(mut rx: watch::Receiver<bool>) {
    until(&mut rx).await
}

/// Resolves once a stop is asked (or the sender is gone); holds no guard across awaits.
async fn until(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

async fn observe_loop(
    client: Arc<JenkinsClient>,
    interval: Duration,
    tx: watch::Sender<JenkinsView>,
    metrics: Arc<Metrics>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let view = tokio::select! {
            r = client.observe() => match r {
                Ok(o) => JenkinsView::Up(o),
                Err(e) => JenkinsView::Down(e.to_string()),
            },
            _ = until(&mut stop) => return,
        };
        metrics.jenkins_up.set(matches!(view, JenkinsView::Up(_)) as i64);
        tx.send_if_modified(|cur| {
            if *cur == view {
                return false;
            }
            match (&*cur, &view) {
                (JenkinsView::Up(_) | JenkinsView::Unknown, JenkinsView::Down(why)) => {
                    tracing::warn!(reason = %why, "Jenkins does not answer; the stream stays up and says so")
                }
                (JenkinsView::Down(_), JenkinsView::Up(o)) => {
                    tracing::info!(version = %o.version, "Jenkins answers again")
                }
                _ => {}
            }
            *cur = view;
            true
        });
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = until(&mut stop) => return,
        }
    }
}

fn result_message(r: &crate::apply::ApplyResult) -> pb::ApplyResult {
    pb::ApplyResult {
        digest: r.digest.clone(),
        succeeded: r.succeeded,
        message: if r.succeeded { String::new() } else { r.message.clone() },
        drift_paths: r.drift.clone(),
        finished_at_unix_ms: now_ms(),
    }
}

async fn apply_loop(
    mut applier: Applier,
    mut desired_rx: watch::Receiver<Option<DesiredConfig>>,
    results: mpsc::Sender<pb::ApplyResult>,
    drift_interval: Duration,
    retry_interval: Duration,
    metrics: Arc<Metrics>,
    mut stop: watch::Receiver<bool>,
) {
    // The digest Jenkins refused (not tried again), and the digest whose result was last queued.
    let mut refused: Option<String> = None;
    let mut reported: Option<String> = None;
    let mut retry = false;
    let mut work = false;
    loop {
        let desired = desired_rx.borrow_and_update().clone();
        if let (true, Some(d)) = (work, desired) {
            retry = false;
            if refused.as_deref() == Some(d.digest.as_str()) {
                tracing::debug!(digest = %d.digest, "Jenkins refused this digest before; not trying it again");
            } else {
                let outcome = tokio::select! {
                    r = applier.apply(&d) => r,
                    _ = until(&mut stop) => return,
                };
                let result = match outcome {
                    Ok(r) => {
                        let label = match (r.succeeded, r.applied) {
                            (false, _) => "refused",
                            (true, true) => "applied",
                            (true, false) => "unchanged",
                        };
                        Metrics::inc(&metrics.applies, "outcome", label);
                        if r.succeeded {
                            refused = None;
                            tracing::info!(digest = %r.digest, applied = r.applied, drift = ?r.drift, "{}", r.message);
                        } else {
                            refused = Some(d.digest.clone());
                            tracing::warn!(digest = %r.digest, message = %r.message, "Jenkins refused the configuration");
                        }
                        let send = r.applied || !r.succeeded || reported.as_deref() != Some(d.digest.as_str());
                        send.then(|| result_message(&r))
                    }
                    Err(ApplyError::Jenkins { source, .. }) => {
                        Metrics::inc(&metrics.applies, "outcome", "jenkins_unavailable");
                        tracing::warn!(digest = %d.digest, error = %source, "cannot apply now: Jenkins does not answer; retrying");
                        retry = true;
                        None
                    }
                    Err(e @ ApplyError::Io { .. }) => {
                        Metrics::inc(&metrics.applies, "outcome", "io");
                        tracing::error!(error = %e, "cannot write the JCasC directory");
                        refused = Some(d.digest.clone());
                        Some(pb::ApplyResult {
                            digest: d.digest.clone(),
                            succeeded: false,
                            message: e.to_string(),
                            drift_paths: Vec::new(),
                            finished_at_unix_ms: now_ms(),
                        })
                    }
                };
                if let Some(m) = result {
                    reported = Some(m.digest.clone());
                    tokio::select! {
                        r = results.send(m) => if r.is_err() { return },
                        _ = until(&mut stop) => return,
                    }
                }
            }
        }
        let wait = if retry { retry_interval } else { drift_interval };
        tokio::select! {
            r = desired_rx.changed() => {
                if r.is_err() {
                    return;
                }
                work = true;
            }
            _ = tokio::time::sleep(wait) => {
                // Periodically: re-check the live digest for drift (apply re-applies only then).
                let live = applier.state().last_applied.clone();
                work = retry || (live.is_some() && live == desired_rx.borrow().as_ref().map(|d| d.digest.clone()));
            }
            _ = until(&mut stop) => return,
        }
    }
}

/// A delta as the protocol carries it.
fn delta_message(now: &Observation, before: Option<&Observation>) -> Option<pb::Observation> {
    let idle_for = |since: Option<u64>| since.map(|t| now_secs().saturating_sub(t)).unwrap_or(0);
    let Some(before) = before else {
        return Some(pb::Observation {
            version: Some(now.version.clone()),
            mode: Some(now.mode.clone()),
            quieting_down: Some(now.quieting_down),
            queue_length: Some(now.queue_length),
            busy_executors: Some(now.busy_executors),
            idle_executors: Some(now.idle_executors),
            idle_for_seconds: Some(idle_for(now.idle_since_unix)),
        });
    };
    let d = now.delta(before);
    if d.is_empty() {
        return None;
    }
    let m = pb::Observation {
        version: d.version,
        mode: d.mode,
        quieting_down: d.quieting_down,
        queue_length: d.queue_length,
        busy_executors: d.busy_executors,
        idle_executors: d.idle_executors,
        idle_for_seconds: d.idle_since_unix.map(idle_for),
    };
    // A plugins digest change alone has no field here (it needs a pod restart anyway).
    (m != pb::Observation::default()).then_some(m)
}

/// A random duration in [0, cap] (full jitter).
fn jitter(cap: Duration) -> Duration {
    use ring::rand::SecureRandom;
    let mut b = [0u8; 8];
    if ring::rand::SystemRandom::new().fill(&mut b).is_err() {
        return cap / 2;
    }
    let ms = cap.as_millis() as u64;
    Duration::from_millis(u64::from_le_bytes(b) % (ms + 1))
}

/// The capped exponential delay before attempt `attempt` (0-based), before jitter.
pub fn backoff_cap(initial: Duration, max: Duration, attempt: u32) -> Duration {
    initial.saturating_mul(1u32 << attempt.min(20)).min(max)
}

fn read_bounded(what: &'static str, path: &Path) -> Result<String, SessionError> {
    let e = |reason: String| SessionError::TlsFile { what, path: path.display().to_string(), reason };
    let meta = std::fs::metadata(path).map_err(|x| e(x.to_string()))?;
    if meta.len() > MAX_TLS_FILE {
        return Err(e(format!("larger than {MAX_TLS_FILE} bytes")));
    }
    std::fs::read_to_string(path).map_err(|x| e(x.to_string()))
}

/// A gateway refusal, with the fix when there is one.
fn refusal(status: tonic::Status) -> SessionError {
    let fix = match status.code() {
        Code::PermissionDenied => {
            "; fix: the certificate must be this Controller's (<name>-mite-tls) and the cell below spec.cells"
        }
        Code::Unavailable => "; the gateway is not ready (NATS?): retrying",
        _ => "",
    };
    SessionError::Refused { code: status.code(), message: status.message().to_string(), fix }
}

struct Link {
    settings: RunSettings,
    jenkins: watch::Receiver<JenkinsView>,
    desired: watch::Sender<Option<DesiredConfig>>,
    results: mpsc::Receiver<pb::ApplyResult>,
    status: watch::Sender<LinkStatus>,
    readiness: Readiness,
    metrics: Arc<Metrics>,
    /// Where the plugin listener hands build-event batches to the current stream.
    batches: BatchSlot,
    stop: watch::Receiver<bool>,
}

/// What was sent on one stream and not acknowledged yet (build-event batches, log chunks), by
/// number. Dropping it (the stream ended, however) fails every one, so the plugin is told to
/// send them again.
struct Pending<T> {
    what: &'static str,
    next: u64,
    waiting: HashMap<u64, oneshot::Sender<Result<T, String>>>,
}

impl<T> Pending<T> {
    fn new(what: &'static str) -> Self {
        Pending { what, next: 0, waiting: HashMap::new() }
    }

    /// Numbers one and keeps its responder (forgetting the responders nobody waits on).
    fn add(&mut self, respond: oneshot::Sender<Result<T, String>>) -> u64 {
        self.next += 1;
        self.waiting.retain(|_, r| !r.is_closed());
        self.waiting.insert(self.next, respond);
        self.next
    }

    fn complete(&mut self, id: u64, ack: T) {
        match self.waiting.remove(&id) {
            Some(r) => {
                let _ = r.send(Ok(ack));
            }
            None => tracing::debug!(id, what = self.what, "an ack nobody waits on (answered late)"),
        }
    }
}

impl<T> Drop for Pending<T> {
    fn drop(&mut self) {
        for (_, r) in self.waiting.drain() {
            let _ = r.send(Err(format!("the gateway stream ended before the {} was acknowledged", self.what)));
        }
    }
}

impl Link {
    fn identity(&self) -> MiteIdentity {
        MiteIdentity::new(&self.settings.namespace, &self.settings.controller)
    }

    async fn run(mut self) {
        let mut attempt: u32 = 0;
        loop {
            if *self.stop.borrow() {
                break;
            }
            let welcomed_before = self.status.borrow().sessions;
            let outcome = self.session().await;
            self.metrics.stream_up.set(0);
            let reason = match outcome {
                Ok(SessionEnd::Shutdown) => break,
                Ok(SessionEnd::Closed(why)) => why,
                Err(e) => e.to_string(),
            };
            if self.status.borrow().sessions > welcomed_before {
                attempt = 0;
            }
            let delay = jitter(backoff_cap(self.settings.initial_backoff, self.settings.max_backoff, attempt));
            attempt = attempt.saturating_add(1);
            tracing::warn!(error = %reason, retry_in = ?delay, "gateway stream not up; reconnecting");
            self.readiness.set_not_ready(format!("gateway stream down: {reason}"));
            self.status.send_modify(|s| {
                s.connected = false;
                s.failures += 1;
                s.last_error = Some(reason);
            });
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = until(&mut self.stop) => break,
            }
        }
        self.readiness.set_not_ready("shutting down");
        self.status.send_modify(|s| s.connected = false);
    }

    /// Reads the TLS files, dials, sends the Hello and waits for the Welcome.
    async fn dial(
        &mut self,
    ) -> Result<(tonic::Streaming<pb::GatewayMessage>, mpsc::Sender<pb::MiteMessage>, pb::Welcome), SessionError> {
        let s = &self.settings;
        let ca = read_bounded("the gateway CA", &s.tls_ca)?;
        let cert = read_bounded("the mite certificate", &s.tls_cert)?;
        let key = read_bounded("the mite key", &s.tls_key)?;
        let me = self.identity();
        match varroa_pki::identity_of(&cert) {
            Ok(id) if id.namespace == me.namespace && id.controller == me.controller => {}
            Ok(id) => tracing::error!(
                certificate = %id.uri(), expected = %me.uri(), file = %s.tls_cert.display(),
                "the mite certificate names another controller: the gateway will refuse it; fix: mount this Controller's <name>-mite-tls Secret"
            ),
            Err(e) => {
                tracing::error!(file = %s.tls_cert.display(), error = %e, "the mite certificate names no mite identity")
            }
        }
        let mut address = GatewayAddress::new(s.gateway_url.clone());
        address.server_name = s.gateway_server_name.clone();
        let channel = match varroa_link::client::channel(&address, &ca, &cert, &key).await {
            Ok(c) => c,
            Err(e) => {
                Metrics::inc(&self.metrics.dials, "outcome", "unreachable");
                return Err(SessionError::Dial(e.to_string()));
            }
        };
        let mut client = MiteLinkClient::new(channel)
            .max_decoding_message_size(varroa_link::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(varroa_link::MAX_MESSAGE_BYTES);

        // The Hello carries the Jenkins version: on the first dial, give the observer its first
        // answer (bounded by the Jenkins timeout), so the entry has it from the start.
        if *self.jenkins.borrow() == JenkinsView::Unknown {
            let wait = s.jenkins_timeout + Duration::from_secs(1);
            let _ = tokio::time::timeout(wait, self.jenkins.wait_for(|v| *v != JenkinsView::Unknown)).await;
        }
        let jenkins_now = self.jenkins.borrow_and_update().clone();
        let (jenkins_version, plugin_digest) = match &jenkins_now {
            JenkinsView::Up(o) => (o.version.clone(), o.plugins_digest.clone()),
            _ => (String::new(), String::new()),
        };
        let hello = pb::Hello {
            identity: me.uri(),
            cell: s.cell,
            jenkins_version,
            plugin_digest,
            mite_version: env!("CARGO_PKG_VERSION").to_string(),
        };
        let (tx, mut rx) = mpsc::channel::<pb::MiteMessage>(64);
        let _ = tx.try_send(pb::MiteMessage { kind: Some(mite_message::Kind::Hello(hello)) });
        let outbound = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
        let response = match tokio::time::timeout(WELCOME_TIMEOUT, client.connect(outbound)).await {
            Ok(Ok(r)) => r,
            Ok(Err(status)) => {
                Metrics::inc(&self.metrics.dials, "outcome", "refused");
                return Err(refusal(status));
            }
            Err(_) => return Err(SessionError::Dial(format!("no answer to the stream within {WELCOME_TIMEOUT:?}"))),
        };
        let mut inbound = response.into_inner();
        let first = match tokio::time::timeout(WELCOME_TIMEOUT, inbound.message()).await {
            Ok(Ok(m)) => m,
            Ok(Err(status)) => {
                Metrics::inc(&self.metrics.dials, "outcome", "refused");
                return Err(refusal(status));
            }
            Err(_) => return Err(SessionError::Dial(format!("no Welcome within {WELCOME_TIMEOUT:?}"))),
        };
        let welcome = match first.and_then(|m| m.kind) {
            Some(gateway_message::Kind::Welcome(w)) => w,
            Some(gateway_message::Kind::Error(e)) => {
                return Err(SessionError::Ended(format!("{}: {}", e.code, e.message)));
            }
            other => return Err(SessionError::Ended(format!("expected a Welcome first, got {other:?}"))),
        };
        Ok((inbound, tx, welcome))
    }

    /// One dial and, if welcomed, one stream until it ends.
    async fn session(&mut self) -> Result<SessionEnd, SessionError> {
        // A stop during the dial ends it at once (nothing to close yet).
        let mut stop = self.stop.clone();
        let (mut inbound, tx, welcome) = tokio::select! {
            r = self.dial() => r?,
            _ = until(&mut stop) => return Ok(SessionEnd::Shutdown),
        };
        // From now until this function returns, the plugin's batches come to this stream (taken
        // before the status says connected, so that whoever sees connected can send).
        let (batch_tx, mut batch_rx) = mpsc::channel::<Outbound>(
            crate::plugin::MAX_IN_FLIGHT + crate::plugin::MAX_LOG_IN_FLIGHT + crate::plugin::MAX_CLAIMS_IN_FLIGHT,
        );
        let _slot = self.batches.install(batch_tx);
        let mut pending = Pending::<pb::EventsAck>::new("batch");
        let mut pending_logs = Pending::<pb::LogAck>::new("chunk");
        let mut pending_claims = Pending::<pb::ClaimAnswer>::new("claim");
        let mut pending_artifacts = Pending::<pb::ArtifactAnswer>::new("artifact request");
        let s = &self.settings;
        Metrics::inc(&self.metrics.dials, "outcome", "welcomed");
        self.metrics.stream_up.set(1);
        self.readiness.set_ready();
        self.status.send_modify(|st| {
            st.connected = true;
            st.gateway_replica = welcome.gateway_replica.clone();
            st.sessions += 1;
        });
        tracing::info!(replica = %welcome.gateway_replica, cell = s.cell, "gateway stream up");
        let heartbeat = Duration::from_secs(u64::from(welcome.heartbeat_interval_seconds.clamp(1, 3600)));
        let send_timeout = heartbeat * 3;

        // What this stream has been told of Jenkins: None until the first (full) observation.
        let mut sent: Option<Observation> = None;
        let mut said_down = false;
        let metrics = self.metrics.clone();
        let send = |m: pb::MiteMessage| {
            let tx = tx.clone();
            let metrics = metrics.clone();
            async move {
                let kind = match &m.kind {
                    Some(mite_message::Kind::Observation(_)) => "observation",
                    Some(mite_message::Kind::ApplyResult(_)) => "apply_result",
                    Some(mite_message::Kind::Heartbeat(_)) => "heartbeat",
                    Some(mite_message::Kind::BuildEvents(_)) => "build_events",
                    Some(mite_message::Kind::LogChunk(_)) => "log_chunk",
                    Some(mite_message::Kind::ClaimRequest(_)) => "claim_request",
                    Some(mite_message::Kind::ArtifactRequest(_)) => "artifact_request",
                    _ => "hello",
                };
                match tokio::time::timeout(send_timeout, tx.send(m)).await {
                    Ok(Ok(())) => {
                        Metrics::inc(&metrics.messages, "kind", kind);
                        Ok(())
                    }
                    Ok(Err(_)) => Err(SessionError::Ended("the stream closed".into())),
                    Err(_) => Err(SessionError::Ended("the gateway stopped reading the stream".into())),
                }
            }
        };
        let observation = |o: pb::Observation| pb::MiteMessage { kind: Some(mite_message::Kind::Observation(o)) };

        // The first message after the Welcome: the whole current observation.
        self.jenkins.mark_changed();
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + heartbeat, heartbeat);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                // A stop wins over everything else, so the stream is always closed cleanly.
                biased;
                _ = until(&mut self.stop) => {
                    // Half-close our side; the gateway then ends the stream and marks us disconnected.
                    drop(tx);
                    let _ = tokio::time::timeout(CLOSE_TIMEOUT, async {
                        while let Ok(Some(_)) = inbound.message().await {}
                    }).await;
                    tracing::info!("gateway stream closed");
                    return Ok(SessionEnd::Shutdown);
                }
                msg = inbound.message() => match msg {
                    Ok(Some(m)) => match m.kind {
                        Some(gateway_message::Kind::Desired(d)) => {
                            tracing::info!(digest = %d.digest, files = d.files.len(), "desired configuration received");
                            let files = d.files.into_iter().collect();
                            self.desired.send_replace(Some(DesiredConfig { digest: d.digest, files }));
                        }
                        Some(gateway_message::Kind::Error(e)) => {
                            return Ok(SessionEnd::Closed(format!("the gateway ended the stream: {}: {}", e.code, e.message)));
                        }
                        Some(gateway_message::Kind::EventsAck(ack)) => pending.complete(ack.batch, ack),
                        Some(gateway_message::Kind::LogAck(ack)) => pending_logs.complete(ack.id, ack),
                        Some(gateway_message::Kind::ClaimAnswer(answer)) => pending_claims.complete(answer.id, answer),
                        Some(gateway_message::Kind::ArtifactAnswer(answer)) => pending_artifacts.complete(answer.id, answer),
                        Some(gateway_message::Kind::Welcome(_)) | None => {}
                    },
                    Ok(None) => return Ok(SessionEnd::Closed("the gateway closed the stream".into())),
                    Err(status) => return Err(refusal(status)),
                },
                changed = self.jenkins.changed() => {
                    if changed.is_err() {
                        return Ok(SessionEnd::Shutdown);
                    }
                    let view = self.jenkins.borrow_and_update().clone();
                    match view {
                        JenkinsView::Up(o) => {
                            if let Some(m) = delta_message(&o, sent.as_ref()) {
                                send(observation(m)).await?;
                            }
                            sent = Some(o);
                            said_down = false;
                        }
                        JenkinsView::Down(_) if !said_down => {
                            send(observation(pb::Observation { version: Some(String::new()), ..Default::default() })).await?;
                            // When Jenkins is back, everything is sent again.
                            sent = None;
                            said_down = true;
                        }
                        _ => {}
                    }
                }
                Some(out) = batch_rx.recv() => match out {
                    Outbound::Events(b) => {
                        let batch = pending.add(b.respond);
                        let events = pb::BuildEvents { batch, events: b.events };
                        send(pb::MiteMessage { kind: Some(mite_message::Kind::BuildEvents(events)) }).await?;
                    }
                    Outbound::Log(c) => {
                        let mut chunk = c.chunk;
                        chunk.id = pending_logs.add(c.respond);
                        send(pb::MiteMessage { kind: Some(mite_message::Kind::LogChunk(chunk)) }).await?;
                    }
                    Outbound::Claim(c) => {
                        let mut claim = c.claim;
                        claim.id = pending_claims.add(c.respond);
                        send(pb::MiteMessage { kind: Some(mite_message::Kind::ClaimRequest(claim)) }).await?;
                    }
                    Outbound::Artifacts(a) => {
                        let mut request = a.request;
                        request.id = pending_artifacts.add(a.respond);
                        send(pb::MiteMessage { kind: Some(mite_message::Kind::ArtifactRequest(request)) }).await?;
                    }
                },
                r = self.results.recv() => {
                    let Some(r) = r else { return Ok(SessionEnd::Shutdown) };
                    send(pb::MiteMessage { kind: Some(mite_message::Kind::ApplyResult(r)) }).await?;
                }
                _ = ticker.tick() => {
                    // While idle, refresh how long (the operator's hibernation compares it).
                    if let Some(since) = sent.as_ref().and_then(|o| o.idle_since_unix) {
                        let idle = pb::Observation { idle_for_seconds: Some(now_secs().saturating_sub(since)), ..Default::default() };
                        send(observation(idle)).await?;
                    }
                    send(pb::MiteMessage { kind: Some(mite_message::Kind::Heartbeat(pb::Heartbeat { sent_at_unix_ms: now_ms() })) }).await?;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_the_cap_and_jitter_stays_below_it() {
        let (i, m) = (Duration::from_millis(500), Duration::from_secs(30));
        assert_eq!(backoff_cap(i, m, 0), i);
        assert_eq!(backoff_cap(i, m, 3), Duration::from_secs(4));
        assert_eq!(backoff_cap(i, m, 40), m);
        for _ in 0..100 {
            assert!(jitter(Duration::from_secs(2)) <= Duration::from_secs(2));
        }
    }

    #[test]
    fn deltas_carry_only_changes_and_the_first_carries_all() {
        let o = Observation {
            version: "2.479.3".into(),
            mode: "NORMAL".into(),
            quieting_down: false,
            queue_length: 0,
            busy_executors: 0,
            idle_executors: 2,
            idle_since_unix: Some(now_secs()),
            plugins_digest: "sha256:x".into(),
        };
        let full = delta_message(&o, None).unwrap();
        assert_eq!(full.version.as_deref(), Some("2.479.3"));
        assert_eq!(full.idle_executors, Some(2));
        assert!(delta_message(&o, Some(&o)).is_none());
        let busy = Observation { busy_executors: 1, idle_executors: 1, idle_since_unix: None, ..o.clone() };
        let d = delta_message(&busy, Some(&o)).unwrap();
        assert_eq!(
            d,
            pb::Observation {
                busy_executors: Some(1),
                idle_executors: Some(1),
                idle_for_seconds: Some(0),
                ..Default::default()
            }
        );
        let plugins = Observation { plugins_digest: "sha256:y".into(), ..o.clone() };
        assert!(delta_message(&plugins, Some(&o)).is_none());
    }
}
