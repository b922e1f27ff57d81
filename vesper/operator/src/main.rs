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

async fn run(config: vesper_operator::Config) -> anyhow::Result<()> {
    // Every request has a connect and a read timeout: a dead connection fails instead of hanging.
    let kube_config = opkit::process::kube_config(config.client_timeouts())
        .await
        .map_err(|e| anyhow::anyhow!("connecting to the Kubernetes API (in-cluster config or KUBECONFIG): {e}"))?;
    let metrics = Arc::new(vesper_operator::metrics::Metrics::new());
    // The client counts its requests by verb and resource (vesper_api_requests_total).
    let client = opkit::client::counted(kube_config, &metrics.requests)
        .map_err(|e| anyhow::anyhow!("connecting to the Kubernetes API (in-cluster config or KUBECONFIG): {e}"))?;
    let mut registry = prometheus_client::registry::Registry::default();
    metrics.register(&mut registry);
    registry.register_collector(Box::new(opkit::process::HeapInUse));
    let options = opkit::process::ProcessOptions {
        lease_name: "vesper-operator".into(),
        health_addr: config.health_addr,
        metrics_addr: Some(config.metrics_addr),
        leader_elect: config.leader_elect,
        leader_election_namespace: config.leader_election_namespace.clone(),
        shutdown_grace: config.shutdown_grace,
        lease_timing: opkit::leader::LeaseTiming::default(),
    };
    // Signals, health, leader election, shutdown (opkit::process): a controller that stops by
    // itself or a lost Lease ends the process with an error (exit 1), SIGTERM with Ok (exit 0).
    opkit::process::run(client.clone(), options, Arc::new(registry), move |shutdown| {
        vesper_operator::run(client, config, metrics, shutdown)
    })
    .await
    .map_err(anyhow::Error::from)
}
