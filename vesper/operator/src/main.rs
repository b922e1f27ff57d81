//! `vesper-operator`: run the Vesper operator, or print its CRD.

use clap::{Parser, Subcommand};
use std::sync::Arc;

/// The operator's flags go after `run`, or without it (`vesper-operator --preview-domain x` and
/// `vesper-operator run --preview-domain x` are the same); flags before `run` are refused, with an error that says so.
#[derive(Parser)]
#[command(
    name = "vesper-operator",
    version,
    about = "Isolated, self-expiring preview environments on Kubernetes",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    config: vesper_operator::Config,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the operator (the default): the same flags as without a command.
    Run(Box<RunArgs>),
    /// Print the PreviewEnvironment CRD (YAML).
    Crd,
}

#[derive(clap::Args)]
struct RunArgs {
    #[command(flatten)]
    config: vesper_operator::Config,
}

fn main() -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    let config = match cli.cmd {
        Some(Cmd::Crd) => {
            print!("{}", vesper_api::crd_yaml());
            return Ok(());
        }
        Some(Cmd::Run(run)) => run.config,
        None => cli.config,
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,kube=warn".into()),
        )
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(run(config))
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<(Option<&'static str>, vesper_operator::Config), clap::Error> {
        let cli = Cli::try_parse_from(std::iter::once("vesper-operator").chain(args.iter().copied()))?;
        Ok(match cli.cmd {
            Some(Cmd::Run(run)) => (Some("run"), run.config),
            Some(Cmd::Crd) => (Some("crd"), cli.config),
            None => (None, cli.config),
        })
    }

    #[test]
    fn the_flags_go_before_run_or_after_it_and_switches_are_bare() {
        Cli::command().debug_assert();
        let (cmd, before) = parse(&["--preview-domain", "preview.example.com", "--leader-elect"]).expect("before");
        assert_eq!(
            (cmd, before.preview_domain.as_deref(), before.leader_elect),
            (None, Some("preview.example.com"), true)
        );
        let (cmd, after) =
            parse(&["run", "--preview-domain", "preview.example.com", "--leader-elect"]).expect("after run");
        assert_eq!(
            (cmd, after.preview_domain.as_deref(), after.leader_elect),
            (Some("run"), Some("preview.example.com"), true)
        );
        // A bare switch does not take `run` as its value: `run` stays the command, and flags on
        // both sides of it are refused, not merged.
        let e = parse(&["--leader-elect", "run"]).unwrap_err().to_string();
        assert!(e.contains("the subcommand 'run' cannot be used with '--leader-elect"), "{e}");
        assert!(!parse(&["run", "--leader-elect=false"]).expect("=false").1.leader_elect);
        assert!(!parse(&["--read-only-root-filesystem=false"]).expect("=false").1.read_only_root_filesystem);
        assert!(parse(&["--leader-elect", "false"]).is_err(), "--leader-elect=false, not --leader-elect false");
        let e = parse(&["--leader-elect", "run", "--preview-domain", "x.example.com"]).unwrap_err().to_string();
        assert!(e.contains("cannot be used with"), "{e}");
    }
}
