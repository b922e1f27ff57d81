//! An operator process as Kubernetes expects one to behave, and as client-go's leader election
//! and controller-runtime's manager make Go controllers behave:
//!
//! - `/healthz`, `/readyz` and `/metrics` are served from the start. A standby (leader election
//!   on, the Lease held by another replica) is Ready while it waits.
//! - With leader election only the Lease holder runs the controller.
//! - **The controller ends by itself** (its start-up list failed, its watch stream ended, it
//!   returned an error): the process logs why, turns not ready, releases the Lease (so a standby
//!   takes over at its next try instead of after the Lease expires) and [`run`] returns
//!   [`Stopped::Controller`] or [`Stopped::ControllerEnded`]: the binary exits non-zero and the
//!   pod restarts. Before, the elector kept renewing the Lease of a process that reconciled
//!   nothing, and the standby never took over.
//! - **SIGTERM or Ctrl-C**: the controller stops taking work (its shutdown future resolves) and
//!   in-flight reconciles get [`ProcessOptions::shutdown_grace`] to finish; past it they are
//!   cancelled (they are idempotent and the next leader repeats them). Only then is the Lease
//!   released, so two replicas never write at once; [`run`] returns `Ok` and the binary exits 0.
//!   A last safety net exits with status 1 if stopping takes [`HARD_STOP_AFTER`] more than the
//!   grace (an API server that never answers the release).
//! - **The Lease is lost** (a renewal did not succeed within the renew deadline, or another
//!   holder is written in it): the controller is dropped at once, cancelling its in-flight
//!   reconciles, as client-go's `OnStoppedLeading` does, and [`run`] returns
//!   [`Stopped::LostLease`]: the binary exits non-zero and the pod restarts as a candidate. A stop
//!   that was asked for is never mistaken for a lost Lease: the Lease is released only after the
//!   controller has stopped.
//!
//! [`kube_config`] builds the client configuration with explicit connect and read timeouts, so
//! that no request (a renewal, a reconcile's read) waits on a dead connection forever.

use crate::Error;
use crate::health::{HealthServer, Readiness};
use crate::leader::{LeaderElector, LeaseTiming, default_identity};
use prometheus_client::registry::Registry;
use std::fmt::{Debug, Display};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How much longer than the shutdown grace stopping may take (releasing the Lease, closing the
/// health servers) before the process exits with status 1 regardless.
pub const HARD_STOP_AFTER: Duration = Duration::from_secs(10);

/// How long releasing the Lease may take once the controller has stopped.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// How the process runs.
#[derive(Debug, Clone)]
pub struct ProcessOptions {
    /// The name of the leader Lease (the operator's name).
    pub lease_name: String,
    /// Where `/healthz`, `/readyz` and `/metrics` are served.
    pub health_addr: SocketAddr,
    /// A second address serving the same endpoints (e.g. metrics on their own port), if any.
    pub metrics_addr: Option<SocketAddr>,
    /// Run the controller only while holding the Lease.
    pub leader_elect: bool,
    /// The namespace of the Lease.
    pub leader_election_namespace: String,
    /// How long in-flight reconciles may take after a stop was asked for (SIGTERM); keep it below
    /// the pod's `terminationGracePeriodSeconds` minus [`HARD_STOP_AFTER`].
    pub shutdown_grace: Duration,
    /// The leader election timings (client-go's defaults: 15 s, 10 s, 2 s).
    pub lease_timing: LeaseTiming,
}

/// Resolves when the controller must stop taking work.
pub type Shutdown = Pin<Box<dyn Future<Output = ()> + Send + Sync + 'static>>;

/// Why [`run`] ended other than by a requested stop. Each one should end the process with a
/// non-zero status.
#[derive(Debug, thiserror::Error)]
pub enum Stopped<E> {
    /// The controller returned an error (a start-up list failed, say).
    #[error("the controller stopped with an error: {0:#}")]
    Controller(E),
    /// The controller returned without a stop being asked for (its streams ended).
    #[error("the controller stopped although no stop was asked for (its watch streams ended)")]
    ControllerEnded,
    /// Another replica holds the Lease now, or it could not be renewed in time.
    #[error("lost the leader lease: stopped reconciling at once")]
    LostLease,
    /// The process could not start (the health server could not bind, bad Lease timings).
    #[error(transparent)]
    Process(#[from] Error),
}

impl<E> Stopped<E> {
    /// A short label for logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Stopped::Controller(_) => "controller_error",
            Stopped::ControllerEnded => "controller_ended",
            Stopped::LostLease => "lost_lease",
            Stopped::Process(_) => "process",
        }
    }
}

/// The timeouts of every request to the API server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientTimeouts {
    /// Connecting (TCP and TLS).
    pub connect: Duration,
    /// Waiting for the next bytes of a response. Watches carry a bookmark about every minute
    /// (the API server's, and devcluster's, default), so a value above that leaves a quiet watch
    /// alone; a watch silent for longer is reconnected by kube's watcher from where it was.
    pub read: Duration,
}

impl Default for ClientTimeouts {
    fn default() -> Self {
        ClientTimeouts { connect: Duration::from_secs(10), read: Duration::from_secs(120) }
    }
}

impl ClientTimeouts {
    /// Set these timeouts on a client configuration. The read timeout counts from when a request
    /// is written (not from when its pooled connection went idle).
    pub fn apply(&self, config: &mut kube::Config) {
        config.connect_timeout = Some(self.connect);
        config.read_timeout = Some(self.read);
        config.reset_reader_on_write = true;
    }
}

/// The client configuration (in-cluster, or `$KUBECONFIG` / `~/.kube/config`) with `timeouts`.
/// Give memory the process freed back to the system. glibc's allocator keeps freed memory
/// mapped for reuse, so after an operator drops the state of many deleted objects its resident
/// size would stay at the peak; `malloc_trim(0)` releases the free pages of every arena. A no-op
/// on other allocators and platforms. Call it after dropping a large amount of state, not on a
/// hot path (it walks the heap).
pub fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only inspects and trims the allocator's own free lists; it takes no
    // pointers from us and is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Bytes the allocator has handed out and not got back (glibc's `mallinfo2`: `uordblks`, in
/// use in the arenas, plus `hblkhd`, in large mmapped blocks). Unlike the resident size, this
/// falls when the process drops state, whatever the allocator keeps mapped for reuse. None on
/// other allocators and platforms.
pub fn heap_in_use_bytes() -> Option<u64> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 only reads the allocator's statistics and returns them by value.
        let info = unsafe { libc::mallinfo2() };
        Some(u64::try_from(info.uordblks.saturating_add(info.hblkhd)).unwrap_or(u64::MAX))
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    None
}

/// The gauge `process_heap_in_use_bytes` ([`heap_in_use_bytes`], read at each scrape), for an
/// operator's `/metrics`: `registry.register_collector(Box::new(HeapInUse))`.
#[derive(Debug, Clone, Copy, Default)]
pub struct HeapInUse;

impl prometheus_client::collector::Collector for HeapInUse {
    fn encode(&self, mut encoder: prometheus_client::encoding::DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        let Some(bytes) = heap_in_use_bytes() else { return Ok(()) };
        let gauge = prometheus_client::metrics::gauge::ConstGauge::new(i64::try_from(bytes).unwrap_or(i64::MAX));
        let metric = encoder.encode_descriptor(
            "process_heap_in_use_bytes",
            "Bytes of heap the process uses (allocated, not freed), whatever the allocator keeps mapped",
            None,
            gauge.metric_type(),
        )?;
        gauge.encode(metric)
    }
}

pub async fn kube_config(timeouts: ClientTimeouts) -> Result<kube::Config, kube::config::InferConfigError> {
    let mut config = kube::Config::infer().await?;
    timeouts.apply(&mut config);
    Ok(config)
}

async fn stop_signal() -> &'static str {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = ctrl_c.await;
            return "SIGINT";
        }
    };
    tokio::select! {
        _ = ctrl_c => "SIGINT",
        _ = term.recv() => "SIGTERM",
    }
}

/// A one-way flag: set once, awaited by many.
#[derive(Clone)]
struct Flag(Arc<watch::Sender<bool>>);

impl Flag {
    fn new() -> Flag {
        Flag(Arc::new(watch::channel(false).0))
    }

    fn set(&self) {
        self.0.send_replace(true);
    }

    fn is_set(&self) -> bool {
        *self.0.borrow()
    }

    fn wait(&self) -> impl Future<Output = ()> + Send + Sync + 'static {
        let mut rx = self.0.subscribe();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    }
}

/// Runs `controller` (given the future that says when to stop taking work) as described in the
/// module documentation. `Ok` only when a stop was asked for.
pub async fn run<F, Fut, E>(
    client: kube::Client,
    options: ProcessOptions,
    registry: Arc<Registry>,
    controller: F,
) -> Result<(), Stopped<E>>
where
    F: FnOnce(Shutdown) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: Display + Debug,
{
    let readiness = Readiness::new();
    readiness.set_not_ready("starting");
    // `stop`: a signal asked the controller to stop taking work. `release`: the controller has
    // stopped; the elector releases the Lease and the health servers close.
    let (stop, release) = (Flag::new(), Flag::new());
    let health = HealthServer::bind(options.health_addr, readiness.clone(), registry.clone()).await?;
    tracing::info!(addr = %health.local_addr(), "serving /healthz, /readyz and /metrics");
    let mut servers = vec![tokio::spawn(health.serve(release.wait()))];
    if let Some(addr) = options.metrics_addr.filter(|a| *a != options.health_addr) {
        let m = HealthServer::bind(addr, readiness.clone(), registry.clone()).await?;
        tracing::info!(addr = %m.local_addr(), "serving /metrics");
        servers.push(tokio::spawn(m.serve(release.wait())));
    }
    let grace = options.shutdown_grace;
    let signals = tokio::spawn({
        let stop = stop.clone();
        async move {
            let signal = stop_signal().await;
            tracing::info!(
                signal,
                grace_seconds = grace.as_secs_f64(),
                "shutting down: no new work, in-flight reconciles may finish within the grace period"
            );
            stop.set();
            // The last resort: the steps below are bounded, but an API server that accepts
            // connections and never answers must not keep the process alive.
            tokio::time::sleep(grace + HARD_STOP_AFTER).await;
            tracing::error!(seconds = (grace + HARD_STOP_AFTER).as_secs(), "stopping took too long: exiting");
            std::process::exit(1);
        }
    });

    let mut elector_task = None;
    let mut leading = None;
    if options.leader_elect {
        let identity = default_identity();
        let mut elector = LeaderElector::new(
            client.clone(),
            &options.leader_election_namespace,
            &options.lease_name,
            &identity,
            options.lease_timing,
        )?;
        let mut rx = elector.subscribe();
        elector_task = Some(tokio::spawn({
            let until = release.wait();
            async move { elector.run(until).await }
        }));
        tracing::info!(%identity, "waiting for the leader lease");
        readiness.set_ready();
        let acquired = tokio::select! {
            r = rx.wait_for(|l| *l) => r.is_ok(),
            _ = stop.wait() => false,
        };
        if !acquired {
            let outcome = if stop.is_set() {
                Ok(())
            } else {
                Err(Stopped::Process(Error::invalid("leader election", "the elector ended before leading")))
            };
            return finish(outcome, &readiness, &release, elector_task, servers, signals).await;
        }
        leading = Some(rx);
    }
    readiness.set_ready();
    let lost = async move {
        match leading {
            Some(mut rx) => {
                let _ = rx.wait_for(|l| !*l).await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::pin!(lost);
    // Boxed, so that dropping it below really drops the controller (and cancels its reconciles).
    let mut work = Box::pin(controller(Box::pin(stop.wait())));
    let outcome = tokio::select! {
        r = &mut work => Some(r),
        () = &mut lost => None,
        () = stop.wait() => {
            readiness.set_not_ready("shutting down");
            tokio::select! {
                r = tokio::time::timeout(grace, &mut work) => match r {
                    Ok(r) => Some(r),
                    Err(_) => {
                        tracing::warn!(
                            grace_seconds = grace.as_secs_f64(),
                            "in-flight reconciles did not finish within the grace period: cancelled (the next leader repeats them)"
                        );
                        Some(Ok(()))
                    }
                },
                () = &mut lost => None,
            }
        }
    };
    let outcome = match outcome {
        // Dropping the controller below cancels its reconciles: nothing is written any more.
        None => {
            tracing::error!("lost the leader lease: stopping reconciling at once and exiting");
            Err(Stopped::LostLease)
        }
        Some(Ok(())) if stop.is_set() => {
            tracing::info!("the controller stopped");
            Ok(())
        }
        Some(Ok(())) => {
            tracing::error!("the controller stopped although no stop was asked for: releasing the lease and exiting");
            Err(Stopped::ControllerEnded)
        }
        Some(Err(e)) => {
            tracing::error!(error = %format!("{e:#}"), "the controller stopped with an error: releasing the lease and exiting");
            Err(Stopped::Controller(e))
        }
    };
    drop(work);
    finish(outcome, &readiness, &release, elector_task, servers, signals).await
}

/// Turn not ready, release the Lease (bounded), close the health servers, and say how it ended.
async fn finish<E>(
    outcome: Result<(), Stopped<E>>,
    readiness: &Readiness,
    release: &Flag,
    elector_task: Option<tokio::task::JoinHandle<()>>,
    servers: Vec<tokio::task::JoinHandle<crate::Result<()>>>,
    signals: tokio::task::JoinHandle<()>,
) -> Result<(), Stopped<E>> {
    readiness.set_not_ready("stopping");
    release.set();
    if let Some(t) = elector_task
        && tokio::time::timeout(RELEASE_TIMEOUT, t).await.is_err()
    {
        tracing::warn!("releasing the lease took longer than {RELEASE_TIMEOUT:?}: it will expire instead");
    }
    for s in servers {
        let _ = s.await;
    }
    signals.abort();
    outcome
}
