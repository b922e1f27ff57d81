//! An operator process as Kubernetes expects one to behave: `/healthz`, `/readyz` and
//! `/metrics` served from the start; with leader election only the Lease holder runs the
//! controller (the others stay Ready, waiting); SIGTERM or Ctrl-C stops it gracefully, with a
//! grace period after which the process exits; losing the Lease ends the process with status 1
//! (as client-go's `OnStoppedLeading`), so the pod restarts as a candidate. A stop that was asked
//! for is never mistaken for a lost Lease (releasing the Lease on SIGTERM also reads as "not
//! leading").

use crate::Error;
use crate::health::{HealthServer, Readiness};
use crate::leader::{LeaderElector, LeaseTiming, default_identity};
use prometheus_client::registry::Registry;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

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
    /// How long in-flight work may take after a stop was asked for.
    pub shutdown_grace: Duration,
}

/// Resolves when the controller must stop.
pub type Shutdown = Pin<Box<dyn Future<Output = ()> + Send + Sync + 'static>>;

async fn stop_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = ctrl_c.await;
            return;
        }
    };
    tokio::select! {
        _ = ctrl_c => {}
        _ = term.recv() => {}
    }
}

/// Runs `controller` (given the future that says when to stop) as described in the module
/// documentation, until it returns.
pub async fn run<F, Fut, E>(
    client: kube::Client,
    options: ProcessOptions,
    registry: Arc<Registry>,
    controller: F,
) -> Result<(), E>
where
    F: FnOnce(Shutdown) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: From<Error>,
{
    let readiness = Readiness::new();
    readiness.set_not_ready("starting");
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = {
        let rx = stop_rx.clone();
        move || {
            let mut rx = rx.clone();
            async move {
                let _ = rx.wait_for(|s| *s).await;
            }
        }
    };
    let stop_requested = {
        let rx = stop_rx.clone();
        move || *rx.borrow()
    };
    let health = HealthServer::bind(options.health_addr, readiness.clone(), registry.clone()).await?;
    tracing::info!(addr = %health.local_addr(), "serving /healthz, /readyz and /metrics");
    let health_task = tokio::spawn(health.serve(stopped()));
    let metrics_task = match options.metrics_addr.filter(|a| *a != options.health_addr) {
        Some(addr) => {
            let m = HealthServer::bind(addr, readiness.clone(), registry.clone()).await?;
            tracing::info!(addr = %m.local_addr(), "serving /metrics");
            Some(tokio::spawn(m.serve(stopped())))
        }
        None => None,
    };
    let grace = options.shutdown_grace;
    tokio::spawn(async move {
        stop_signal().await;
        tracing::info!("shutting down");
        let _ = stop_tx.send(true);
        // In-flight work gets a grace period, not forever (an unreachable API server must not
        // keep the process alive).
        tokio::time::sleep(grace).await;
        tracing::warn!(grace_seconds = grace.as_secs(), "shutdown took longer than the grace period: exiting");
        std::process::exit(1);
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
            LeaseTiming::default(),
        )?;
        let mut rx = elector.subscribe();
        elector_task = Some(tokio::spawn({
            let s = stopped();
            async move { elector.run(s).await }
        }));
        tracing::info!(%identity, "waiting for the leader lease");
        readiness.set_ready();
        tokio::select! {
            r = rx.wait_for(|l| *l) => {
                if r.is_err() {
                    return Err(Error::invalid("leader election", "the elector ended before leading").into());
                }
            }
            _ = stopped() => return Ok(()),
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
    let lost_lease = Arc::new(AtomicBool::new(false));
    let shutdown: Shutdown = {
        let s = stopped();
        let lost_lease = lost_lease.clone();
        Box::pin(async move {
            tokio::select! {
                _ = s => {}
                _ = lost => {
                    if !stop_requested() {
                        tracing::error!("lost the leader lease: stopping");
                        lost_lease.store(true, Ordering::SeqCst);
                    }
                }
            }
        })
    };
    let result = controller(shutdown).await;
    if lost_lease.load(Ordering::SeqCst) {
        std::process::exit(1);
    }
    let _ = health_task.await;
    if let Some(t) = metrics_task {
        let _ = t.await;
    }
    if let Some(t) = elector_task {
        let _ = t.await;
    }
    result
}
