//! varroa-recorder: the build record store's writer. It drains two JetStream streams into
//! PostgreSQL and prunes by age:
//!
//! - `varroa_builds` (build events and job schedules, published by the gateway) into `runs`,
//!   `stages`, `test_summaries` and `job_schedules` ([`ingest`]);
//! - `varroa_activity` (activity events published on `activity.>`; the recorder creates the
//!   stream, 72 h, when it is missing) into `activity` ([`activity`]);
//! - retention ([`retention`]): rows older than `--retention-days` (90; 0 keeps them), at start
//!   and every hour, in batches; with `--log-store`, the console logs of the runs it deletes, from
//!   the log store, through the queue table `log_deletions` ([`log_retention`]);
//! - the build claims ledger ([`ledger`]): claim requests on `varroa.claims.>` (queue group
//!   `varroa-ledger`) decided in PostgreSQL (`claims`, `claim_sequences`), one transaction per
//!   claim: granted with the job's next gap-free number, the same answer again for the same claim
//!   id, refused naming the cell holding the trigger, or `retry` when PostgreSQL is away or slower
//!   than the claim's budget.
//!
//! The guarantees, for operators:
//!
//! - **Replicas share the work.** Every replica pulls from one durable consumer per stream
//!   (`varroa-recorder`); JetStream hands each message to one pull request at a time, so N
//!   replicas split the stream. Events are applied in whatever order they come: every write is an
//!   idempotent upsert that gives the same rows in any order ([`ingest`] says how per table).
//! - **At least once, applied once.** A batch is applied in one transaction, which also records
//!   the events' ids (`processed_events`); its messages are acknowledged only after the commit.
//!   A recorder killed between the two, or a message delivered twice (a retried publish after
//!   the stream's duplicate window, a redelivery), finds the ids and changes nothing.
//! - **Malformed messages** are terminated (never redelivered), counted and logged with the
//!   reason; the rest of their batch is applied.
//! - **PostgreSQL down**: nothing is acknowledged, the batch is redelivered later, the recorder
//!   reconnects with back-off forever and `/readyz` says why it is not ready. **NATS down**:
//!   the client reconnects (re-reading its credential file) and the consumers resume; the
//!   streams keep what was published meanwhile (7 days for builds, 72 h for activity).
//!
//! Modules:
//!
//! - [`consumer`]: the loop that drains a stream (pull requests, ack after commit, back-off);
//! - [`ingest`] and [`activity`]: decoding and checking messages, and the SQL;
//! - [`retention`]: pruning by age; [`log_retention`]: deleting the logs of pruned runs;
//! - [`ledger`]: the build claims ledger;
//! - [`migrate`]: the checked-in schema (`migrations/`), applied at start (under an advisory
//!   lock: replicas starting together apply it once) and by `varroa-recorder migrate`;
//! - [`db`]: connecting to PostgreSQL (the password re-read from its file on every connection);
//! - [`metrics`]: what `/metrics` serves;
//! - `testing` (cargo feature `testing`): a real PostgreSQL in a temporary directory for tests.
//!
//! [`start`] runs all of it in the background and returns at once, like the binary
//! (`varroa-recorder run`) does; docs/varroa/data-plane.md describes the paths, the schema and
//! the guarantees.

pub mod activity;
pub mod consumer;
pub mod db;
pub mod ingest;
pub mod ledger;
pub mod log_retention;
pub mod metrics;
pub mod migrate;
pub mod retention;
#[cfg(feature = "testing")]
pub mod testing;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use opkit::health::{HealthServer, Readiness};
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use varroa_link::nats::ConnectSettings;

pub use consumer::ConsumerSettings;
pub use db::DbSettings;
pub use ledger::LedgerSettings;
pub use retention::RetentionSettings;

use consumer::{Backoff, Context, Health, sleep_or_stop};
use metrics::Metrics;

/// Everything the recorder needs to run.
#[derive(Debug, Clone)]
pub struct RecorderConfig {
    /// The database.
    pub database: DbSettings,
    /// NATS.
    pub nats: ConnectSettings,
    /// The plain-HTTP address of `/healthz`, `/readyz` and `/metrics`.
    pub health_listen: SocketAddr,
    /// The consumers.
    pub consumers: ConsumerSettings,
    /// Retention.
    pub retention: RetentionSettings,
}

/// Errors starting the recorder (what is retried instead is not one: an unreachable database or
/// NATS server).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The database settings are unusable.
    #[error(transparent)]
    Database(#[from] db::DbError),
    /// NATS could not be set up (an invalid URL).
    #[error(transparent)]
    Nats(#[from] varroa_link::nats::NatsError),
    /// The health server cannot listen.
    #[error("health server on {addr}: {message}")]
    Health {
        /// The address.
        addr: SocketAddr,
        /// Why.
        message: String,
    },
    /// A setting is out of range.
    #[error("{0}")]
    Setting(String),
    /// The log store's URL or credentials file is unusable (a store that is away is not an
    /// error: log retention tries again until it answers).
    #[error("--log-store: {0}")]
    LogStore(#[from] varroa_blobs::StoreError),
}

/// A started recorder.
pub struct RunningRecorder {
    /// The health/metrics address.
    pub health_addr: SocketAddr,
    /// Readiness: PostgreSQL migrated and reachable, NATS connected, both consumers open, the
    /// ledger (when it runs) subscribed.
    pub readiness: Readiness,
    /// The metrics (what `/metrics` serves).
    pub metrics: Arc<Metrics>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    fatal: watch::Receiver<Option<String>>,
}

impl std::fmt::Debug for RunningRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningRecorder").field("health_addr", &self.health_addr).finish_non_exhaustive()
    }
}

impl RunningRecorder {
    /// Finishes the batches in hand (applied and acknowledged, or given back), stops and waits
    /// for every task.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }

    /// Waits until the recorder cannot go on (the database's schema is one it must not write
    /// into: edited, or newer than this recorder); the reason.
    pub async fn fatal(&mut self) -> String {
        match self.fatal.wait_for(Option::is_some).await {
            Ok(reason) => reason.clone().unwrap_or_default(),
            Err(_) => std::future::pending().await,
        }
    }
}

/// Starts the recorder in the background and returns at once: the schema is migrated, then the
/// streams are drained, retention runs and the ledger answers claims (with the default
/// [`LedgerSettings`]), each retrying with back-off until PostgreSQL and NATS answer.
pub async fn start(config: RecorderConfig) -> Result<RunningRecorder, StartError> {
    start_with_ledger(config, Some(LedgerSettings::default())).await
}

/// [`start`], with the ledger's settings, or without the ledger (`None`: claims are left to
/// other replicas).
pub async fn start_with_ledger(
    config: RecorderConfig,
    ledger: Option<LedgerSettings>,
) -> Result<RunningRecorder, StartError> {
    // A typo in the URL or an unreadable password file stops the start with the reason.
    config.database.config()?;
    if config.consumers.batch_size == 0 {
        return Err(StartError::Setting("--batch-size must be at least 1".into()));
    }
    if ledger.as_ref().is_some_and(|l| l.connections == 0 || l.max_in_flight == 0) {
        return Err(StartError::Setting("--ledger-connections and --ledger-max-in-flight must be at least 1".into()));
    }
    let log_store = config.retention.log_store.as_ref().map(varroa_blobs::BlobStore::open).transpose()?;
    match &log_store {
        Some(store) => tracing::info!(
            store = store.url(),
            days = config.retention.days,
            "console logs of pruned runs are deleted from the log store"
        ),
        None => tracing::warn!(
            "console logs are not pruned: no log store; set --log-store (VARROA_LOG_STORE) and \
             --log-store-credentials-file to the gateway's to delete the logs of pruned runs"
        ),
    }
    let metrics = Arc::new(Metrics::default());
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let readiness = Readiness::new();
    readiness.set_not_ready("migrating the schema");
    let health = HealthServer::bind(config.health_listen, readiness.clone(), Arc::new(registry))
        .await
        .map_err(|e| StartError::Health { addr: config.health_listen, message: e.to_string() })?;
    let health_addr = health.local_addr();
    let (nats, connects) = varroa_link::nats::connect_watching(&config.nats).await?;
    let js = async_nats::jetstream::new(nats.clone());

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let (schema_tx, schema_rx) = watch::channel(false);
    let (fatal_tx, fatal_rx) = watch::channel(None);
    let mut tasks = Vec::new();
    tasks.push(tokio::spawn({
        let mut stop = shutdown_rx.clone();
        async move {
            let until = async move {
                let _ = stop.wait_for(|s| *s).await;
            };
            if let Err(e) = health.serve(until).await {
                tracing::error!(error = %e, "health server stopped");
            }
        }
    }));
    tasks.push(tokio::spawn(migrate_task(
        config.database.clone(),
        metrics.clone(),
        schema_tx,
        fatal_tx,
        shutdown_rx.clone(),
    )));

    let cx = Context {
        metrics: metrics.clone(),
        db: config.database.clone(),
        js,
        nats: nats.clone(),
        connects,
        stop: shutdown_rx.clone(),
        schema: schema_rx.clone(),
        settings: config.consumers.clone(),
    };
    let builds = Arc::new(Health::default());
    let activity = Arc::new(Health::default());
    tasks.push(tokio::spawn(consumer::run::<consumer::Builds>(cx.clone(), builds.clone())));
    tasks.push(tokio::spawn(consumer::run::<consumer::Activity>(cx, activity.clone())));
    let ledger_health = ledger.map(|settings| {
        let health = Arc::new(ledger::LedgerHealth::default());
        let mut db = config.database.clone();
        db.application_name = format!("{} ledger", db.application_name);
        let cx = ledger::LedgerContext {
            nats: nats.clone(),
            metrics: metrics.clone(),
            pool: Arc::new(ledger::Pool::new(db, settings.connections)),
            settings,
            schema: schema_rx.clone(),
            stop: shutdown_rx.clone(),
        };
        tasks.push(tokio::spawn(ledger::run(cx, health.clone())));
        health
    });
    let logs_queued = Arc::new(tokio::sync::Notify::new());
    if let Some(store) = log_store {
        tasks.push(tokio::spawn(log_retention::run(
            config.database.clone(),
            config.retention.clone(),
            varroa_blobs::Logs::new(store),
            metrics.clone(),
            schema_rx.clone(),
            shutdown_rx.clone(),
            logs_queued.clone(),
        )));
    }
    tasks.push(tokio::spawn(retention_task(
        config.database.clone(),
        config.retention.clone(),
        metrics.clone(),
        schema_rx.clone(),
        shutdown_rx.clone(),
        logs_queued,
    )));
    tasks.push(tokio::spawn({
        let (ready, mut stop, schema) = (readiness.clone(), shutdown_rx.clone(), schema_rx);
        async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stop.wait_for(|s| *s) => break,
                }
                let reason = if !*schema.borrow() {
                    Some("migrating the schema (is PostgreSQL reachable?)".to_owned())
                } else if nats.connection_state() != async_nats::connection::State::Connected {
                    Some(format!("NATS {}", nats.connection_state()))
                } else if ledger_health.as_ref().is_some_and(|l| !l.subscribed.load(Ordering::Relaxed)) {
                    Some("the ledger is subscribing to varroa.claims.>".to_owned())
                } else {
                    [("varroa_builds", &builds), ("varroa_activity", &activity)].iter().find_map(|(stream, h)| {
                        if !h.consumer.load(Ordering::Relaxed) {
                            Some(format!("opening the {stream} consumer"))
                        } else if !h.pg.load(Ordering::Relaxed) {
                            Some(format!("PostgreSQL unreachable for {stream}"))
                        } else {
                            None
                        }
                    })
                };
                match reason {
                    None => ready.set_ready(),
                    Some(r) => ready.set_not_ready(r),
                }
            }
            ready.set_not_ready("shutting down");
        }
    }));
    Ok(RunningRecorder { health_addr, readiness, metrics, shutdown: shutdown_tx, tasks, fatal: fatal_rx })
}

async fn migrate_task(
    db: DbSettings,
    metrics: Arc<Metrics>,
    schema: watch::Sender<bool>,
    fatal: watch::Sender<Option<String>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut backoff = Backoff::new();
    while !*stop.borrow() {
        let attempt = async {
            let mut client = db.connect().await.map_err(|e| (false, e.to_string()))?;
            migrate::migrate(&mut client).await.map_err(|e| {
                let fatal = matches!(e, migrate::MigrateError::Changed { .. } | migrate::MigrateError::Newer { .. });
                (fatal, e.to_string())
            })
        };
        match attempt.await {
            Ok(applied) => {
                tracing::info!(?applied, version = migrate::latest(), "schema up to date");
                let _ = schema.send(true);
                return;
            }
            Err((true, e)) => {
                tracing::error!(error = %e, "the database's schema is not one this recorder may write into");
                let _ = fatal.send(Some(e));
                return;
            }
            Err((false, e)) => {
                tracing::warn!(error = %e, "cannot migrate the schema yet; retrying");
                metrics.pg_error("connect");
            }
        }
        sleep_or_stop(backoff.next(), &mut stop).await;
    }
}

async fn retention_task(
    db: DbSettings,
    settings: RetentionSettings,
    metrics: Arc<Metrics>,
    mut schema: watch::Receiver<bool>,
    mut stop: watch::Receiver<bool>,
    logs_queued: Arc<tokio::sync::Notify>,
) {
    tokio::select! {
        r = schema.wait_for(|ready| *ready) => if r.is_err() { return },
        _ = stop.wait_for(|s| *s) => return,
    }
    let mut client: Option<tokio_postgres::Client> = None;
    while !*stop.borrow() {
        if client.as_ref().is_none_or(|c| c.is_closed()) {
            client = consumer::session(&db).await.ok();
        }
        let wait = match &client {
            None => {
                metrics.pg_error("retention");
                Duration::from_secs(30).min(settings.interval)
            }
            Some(c) => match retention::prune(c, &settings, jiff::Timestamp::now(), &metrics, &stop).await {
                Ok(p) => {
                    if p.logs_queued > 0 {
                        // The log pruner deletes them now rather than at its next round.
                        logs_queued.notify_one();
                    }
                    let nothing = retention::Pruned { statements: p.statements, ..Default::default() };
                    if p != nothing {
                        tracing::info!(?p, days = settings.days, "retention pruned old rows");
                    }
                    settings.interval
                }
                Err(e) => {
                    tracing::warn!(error = %e, "retention failed; trying again soon");
                    metrics.pg_error("retention");
                    client = None;
                    Duration::from_secs(30).min(settings.interval)
                }
            },
        };
        if sleep_or_stop(wait, &mut stop).await {
            break;
        }
    }
}
