//! varroa-gateway: the gRPC server (mutual TLS) the mites dial; keeps their state in JetStream
//! and pushes desired configuration down.
//!
//! The pieces, in the order a connection meets them:
//!
//! - [`conn`]: the accept loop and TLS handshake ([`tls`]: mutual TLS whose CA file is re-read
//!   for every new handshake, so a rotated CA needs no restart).
//! - [`service`]: the `MiteLink.Connect` stream: identity checks, one stream per cell, the
//!   `varroa_mites` entry, desired configuration pushed down.
//! - [`desired`]: the mirror of the `varroa_desired` bucket the streams read.
//! - Build events: [`service`] stores each `BuildEvents` batch in the `varroa_builds` stream
//!   (opened here with the buckets) and answers it with an `EventsAck`.
//! - Console logs: [`service`] writes each `LogChunk` to the log store ([`start_with`]'s
//!   `--log-store`, through [`varroa_blobs`]) and answers it with a `LogAck`.
//! - Build claims: [`service`] asks the ledger for each `ClaimRequest` with a core NATS request
//!   on `varroa.claims.<cluster>.<ns>.<controller>` and answers it with a `ClaimAnswer`.
//! - NATS through [`varroa_link::nats::connect`]: the credential is re-read from its file on
//!   every reconnect, so a rotated password needs no restart either.
//!
//! Several replicas run behind one Service and share nothing but NATS. docs/varroa/gateway.md is
//! the operating guide.

pub mod conn;
pub mod desired;
pub mod metrics;
pub mod service;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use opkit::health::{HealthServer, Readiness};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use varroa_link::nats::ConnectSettings;
use varroa_link::proto::v1::mite_link_server::MiteLinkServer;

pub use service::{Gateway, GatewayOptions};
pub use tls::{ReloadingTls, TlsFiles};

/// Everything the gateway needs to run.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// The gRPC (mutual TLS) listen address.
    pub listen: SocketAddr,
    /// The plain-HTTP address of `/healthz`, `/readyz` and `/metrics`.
    pub health_listen: SocketAddr,
    /// The TLS files.
    pub tls: TlsFiles,
    /// How to reach NATS.
    pub nats: ConnectSettings,
    /// JetStream replicas of the buckets when the gateway creates them.
    pub bucket_replicas: usize,
    /// The stream behaviour.
    pub options: GatewayOptions,
}

/// Errors starting the gateway.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The TLS files are not usable.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// A listen address cannot be bound.
    #[error("cannot listen on {addr} ({what}): {source}")]
    Listen {
        /// Which listener.
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The health server failed to start.
    #[error("health server: {0}")]
    Health(String),
    /// The cluster name is not usable in activity subjects.
    #[error("--cluster: {0}")]
    Cluster(varroa_link::kv::KvError),
    /// NATS could not be set up (an invalid URL; an unreachable server is retried instead).
    #[error(transparent)]
    Nats(#[from] varroa_link::nats::NatsError),
    /// The log store's URL or credentials file is unusable (a store that is away is not an
    /// error: chunks are answered retry until it answers).
    #[error("--log-store: {0}")]
    LogStore(#[from] varroa_blobs::StoreError),
}

/// A started gateway.
pub struct RunningGateway {
    /// The gRPC address it listens on.
    pub grpc_addr: SocketAddr,
    /// The health/metrics address.
    pub health_addr: SocketAddr,
    /// The service (for inspection in tests).
    pub gateway: Gateway,
    /// Readiness (ready once the buckets and the `varroa_builds` stream are open and NATS is
    /// connected).
    pub readiness: Readiness,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    connects: watch::Receiver<u64>,
}

impl RunningGateway {
    /// Stops accepting, ends the streams (the mites reconnect elsewhere) and waits for the tasks.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }

    /// How many times the NATS connection was made (1 after the first; +1 per reconnect).
    pub fn nats_connections(&self) -> u64 {
        *self.connects.borrow()
    }
}

/// Binds the listeners and starts serving; returns at once (NATS is connected in the background,
/// and streams are refused with `UNAVAILABLE` until it is). Without a log store: log chunks are
/// answered retry ([`start_with`] gives one).
pub async fn start(config: GatewayConfig) -> Result<RunningGateway, StartError> {
    start_with(config, None).await
}

/// [`start`], writing console logs into the store `log_store` names (the binary's `--log-store`).
pub async fn start_with(
    config: GatewayConfig,
    log_store: Option<varroa_blobs::StoreSettings>,
) -> Result<RunningGateway, StartError> {
    varroa_link::activity::global_subject(&config.options.cluster).map_err(StartError::Cluster)?;
    let log_store = log_store.map(|s| varroa_blobs::BlobStore::open(&s)).transpose()?;
    let metrics = Arc::new(metrics::Metrics::default());
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let m = metrics.clone();
    let tls = Arc::new(ReloadingTls::new(config.tls.clone(), move |ok| m.tls_reload(ok))?);
    let listener = TcpListener::bind(config.listen).await.map_err(|source| StartError::Listen {
        what: "gRPC",
        addr: config.listen,
        source,
    })?;
    let grpc_addr =
        listener.local_addr().map_err(|source| StartError::Listen { what: "gRPC", addr: config.listen, source })?;
    let readiness = Readiness::new();
    readiness.set_not_ready("connecting to NATS");
    let health = HealthServer::bind(config.health_listen, readiness.clone(), Arc::new(registry))
        .await
        .map_err(|e| StartError::Health(e.to_string()))?;
    let health_addr = health.local_addr();

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let (client, connects) = varroa_link::nats::connect_watching(&config.nats).await?;
    let connects_for_watch = connects.clone();
    let (mites_tx, mites_rx) = watch::channel(None);
    let (builds_tx, builds_rx) = watch::channel(None);
    let desired = Arc::new(desired::DesiredCache::default());
    let activity = service::Activity::new(client.clone(), config.options.cluster.clone());
    let artifacts = log_store.clone().map(|store| Arc::new(varroa_blobs::Artifacts::new(store)));
    let logs = log_store.map(|store| {
        tracing::info!(store = %store.url(), "console logs go to this store");
        Arc::new(service::LogSink {
            writer: varroa_blobs::LogWriter::new(varroa_blobs::Logs::new(store)),
            nats: Some(client.clone()),
        })
    });
    let gateway = Gateway::new(
        config.options.clone(),
        mites_rx,
        builds_rx,
        desired.clone(),
        metrics.clone(),
        shutdown_rx.clone(),
        Some(activity),
        logs,
        Some(client.clone()),
        artifacts,
    );

    let mut tasks = Vec::new();
    // gRPC: our accept loop feeds tonic.
    let (conn_tx, mut conn_rx) = mpsc::channel::<conn::MiteConn>(64);
    tasks.push(tokio::spawn(conn::accept_loop(listener, tls, metrics.clone(), conn_tx)));
    let incoming = futures::stream::poll_fn(move |cx| conn_rx.poll_recv(cx).map(|c| c.map(Ok::<_, std::io::Error>)));
    let server = MiteLinkServer::new(gateway.clone())
        .max_decoding_message_size(varroa_link::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(varroa_link::MAX_MESSAGE_BYTES);
    let keepalive = config.options.heartbeat_interval.max(Duration::from_secs(5));
    let grpc = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(keepalive))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
        .max_concurrent_streams(Some(8))
        .add_service(server)
        .serve_with_incoming_shutdown(incoming, stopped(shutdown_rx.clone()));
    tasks.push(tokio::spawn(async move {
        if let Err(e) = grpc.await {
            tracing::error!(error = %e, "gRPC server stopped");
        }
    }));
    tasks.push(tokio::spawn({
        let rx = shutdown_rx.clone();
        async move {
            if let Err(e) = health.serve(stopped(rx)).await {
                tracing::error!(error = %e, "health server stopped");
            }
        }
    }));
    // NATS: open the buckets and the varroa_builds stream (retrying), then watch varroa_desired
    // and track readiness.
    let replicas = config.bucket_replicas;
    let ready = readiness.clone();
    let mut stop = shutdown_rx.clone();
    tasks.push(tokio::spawn(async move {
        let js = async_nats::jetstream::new(client.clone());
        let mut backoff = Duration::from_millis(100);
        let (mites, desired_store) = loop {
            let opened = async {
                let m = varroa_link::kv::open_mites(&js, replicas).await?;
                let d = varroa_link::kv::open_desired(&js, replicas).await?;
                varroa_link::builds::open_stream(&js, replicas).await?;
                Ok::<_, varroa_link::kv::KvError>((m, d))
            };
            tokio::select! {
                r = opened => match r {
                    Ok(stores) => break stores,
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot open the JetStream buckets and stream yet; retrying");
                        ready.set_not_ready(format!("NATS: {e}"));
                    }
                },
                _ = stop.wait_for(|s| *s) => return,
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {},
                _ = stop.wait_for(|s| *s) => return,
            }
            backoff = (backoff * 2).min(Duration::from_secs(5));
        };
        let _ = mites_tx.send(Some(mites));
        let _ = builds_tx.send(Some(service::BuildsSink { js: js.clone(), replicas }));
        let watcher = tokio::spawn(desired::watch_desired(desired_store, desired, connects_for_watch));
        // Readiness follows the NATS connection.
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    match client.connection_state() {
                        async_nats::connection::State::Connected => ready.set_ready(),
                        other => ready.set_not_ready(format!("NATS {other}")),
                    }
                }
                _ = stop.wait_for(|s| *s) => break,
            }
        }
        watcher.abort();
    }));
    Ok(RunningGateway { grpc_addr, health_addr, gateway, readiness, shutdown: shutdown_tx, tasks, connects })
}
