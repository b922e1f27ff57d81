//! `vesper-operator`: run the Vesper operator, or print its CRD.

use clap::{Parser, Subcommand};
use std::sync::Arc;

#[derive(Parser)]
#[command(name = "vesper-operator", version, about = "Isolated, self-expiring preview environments on Kubernetes")]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    config: vesper_operator::Config,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the operator (the default).
    Run,
    /// Print the PreviewEnvironment CRD (YAML).
    Crd,
}

fn main() -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    if let Some(Cmd::Crd) = cli.cmd {
        print!("{}", vesper_api::crd_yaml());
        return Ok(());
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,kube=warn".into()),
        )
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(run(cli.config))
}

async fn shutdown_signal() {
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

async fn run(config: vesper_operator::Config) -> anyhow::Result<()> {
    let client = kube::Client::try_default()
        .await
        .map_err(|e| anyhow::anyhow!("connecting to the Kubernetes API (in-cluster config or KUBECONFIG): {e}"))?;
    let metrics = Arc::new(vesper_operator::metrics::Metrics::new());
    let mut registry = prometheus_client::registry::Registry::default();
    metrics.register(&mut registry);
    let registry = Arc::new(registry);
    let readiness = opkit::health::Readiness::new();
    readiness.set_not_ready("starting");
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stop_requested = {
        let rx = stop_rx.clone();
        move || *rx.borrow()
    };
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    let health = opkit::health::HealthServer::bind(config.health_addr, readiness.clone(), registry.clone()).await?;
    tracing::info!(addr = %health.local_addr(), "serving /healthz, /readyz and /metrics");
    let health_task = tokio::spawn(health.serve(stopped()));
    let metrics_task = if config.metrics_addr != config.health_addr {
        let m = opkit::health::HealthServer::bind(config.metrics_addr, readiness.clone(), registry.clone()).await?;
        tracing::info!(addr = %m.local_addr(), "serving /metrics");
        Some(tokio::spawn(m.serve(stopped())))
    } else {
        None
    };
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("shutting down");
        let _ = stop_tx.send(true);
        // In-flight reconciles get a grace period, not forever (an unreachable API server must
        // not keep the process alive).
        tokio::time::sleep(std::time::Duration::from_secs(15)).await;
        tracing::warn!("shutdown took longer than 15s: exiting");
        std::process::exit(1);
    });

    // With leader election, only the leader runs the controller; losing the Lease ends the
    // process (as client-go's OnStoppedLeading), so the pod restarts as a candidate.
    let mut elector_task = None;
    let mut leading = None;
    if config.leader_elect {
        let identity = opkit::leader::default_identity();
        let mut elector = opkit::leader::LeaderElector::new(
            client.clone(),
            &config.leader_election_namespace,
            "vesper-operator",
            &identity,
            opkit::leader::LeaseTiming::default(),
        )?;
        let mut rx = elector.subscribe();
        elector_task = Some(tokio::spawn({
            let s = stopped();
            async move { elector.run(s).await }
        }));
        tracing::info!(%identity, "waiting for the leader lease");
        readiness.set_ready();
        tokio::select! {
            r = rx.wait_for(|l| *l) => { r.map_err(|_| anyhow::anyhow!("leader election ended"))?; }
            _ = stopped() => return Ok(()),
        }
        leading = Some(rx);
    }
    readiness.set_ready();
    let lost = async move {
        if let Some(mut rx) = leading {
            let _ = rx.wait_for(|l| !*l).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    let lost_lease = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let shutdown = {
        let s = stopped();
        let lost_lease = lost_lease.clone();
        async move {
            tokio::select! {
                _ = s => {}
                _ = lost => {
                    // On SIGTERM the elector releases the Lease, which also reads as "not
                    // leading": that is a requested stop, not a lost lease.
                    if !stop_requested() {
                        tracing::error!("lost the leader lease: stopping");
                        lost_lease.store(true, std::sync::atomic::Ordering::SeqCst);
                    }
                }
            }
        }
    };
    let result = vesper_operator::run(client, config, metrics, shutdown).await;
    if lost_lease.load(std::sync::atomic::Ordering::SeqCst) {
        // As client-go's OnStoppedLeading: end the process (the health server would otherwise
        // keep it alive and Ready, reconciling nothing), so the pod restarts as a candidate.
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
