//! varroa-operator: provisions Jenkins controllers from `varroa.dev/v1alpha1` resources (the
//! default command), or shows a controller's resolved configuration without a cluster
//! (`render`), or prints the CRDs (`crds`), or a freshly generated gateway CA Secret
//! (`gateway-ca`).

use clap::{Parser, Subcommand};
use std::sync::Arc;
use varroa_operator::{gateway_ca_cmd, render_cmd};

/// The operator's flags go after `run`, or without it (`varroa-operator --cluster x` and
/// `varroa-operator run --cluster x` are the same); flags before `run` are refused, with an error that says so.
#[derive(Parser, Debug)]
#[command(
    name = "varroa-operator",
    version,
    about = "Provisions Jenkins controllers from Controller resources",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    config: varroa_operator::Config,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the operator (the default): the same flags as without a command.
    Run(Box<RunArgs>),
    /// Resolve and render controllers from YAML files, without a cluster: the settings with the
    /// layer each came from, the plugins, the JCasC values with the input that set each, and
    /// the rendered jenkins.yaml, plugins.txt and plugins-sha256.txt. Exit 1 when a controller
    /// is blocked.
    Render(render_cmd::RenderArgs),
    /// Print the CustomResourceDefinitions of varroa.dev/v1alpha1 (as deploy/varroa/crds.yaml).
    Crds,
    /// Print a `kubernetes.io/tls` Secret holding a freshly generated gateway CA (tls.crt,
    /// tls.key), for development installs: `varroa-operator gateway-ca | kubectl apply -f -`.
    GatewayCa(gateway_ca_cmd::GatewayCaArgs),
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    #[command(flatten)]
    config: varroa_operator::Config,
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    let default_filter = match cli.command {
        Some(Command::Render(_)) | Some(Command::Crds) | Some(Command::GatewayCa(_)) => "warn",
        _ => "info,kube=warn",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default_filter.into()),
        )
        .with_writer(std::io::stderr)
        .init();
    if let Some(Command::Crds) = cli.command {
        print!("{}", varroa_api::crd_yaml());
        return;
    }
    if let Some(Command::GatewayCa(args)) = &cli.command {
        std::process::exit(gateway_ca_cmd::run(args));
    }
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            std::process::exit(1);
        }
    };
    let config = match cli.command {
        Some(Command::Render(args)) => std::process::exit(rt.block_on(render_cmd::run(args))),
        Some(Command::Run(run)) => run.config,
        _ => cli.config,
    };
    let code = match rt.block_on(run(config)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e:#}");
            1
        }
    };
    std::process::exit(code);
}

async fn run(mut config: varroa_operator::Config) -> anyhow::Result<()> {
    // The flags together (the cluster name goes into activity subjects, the CA Secret's name into
    // requests, ...): refuse a bad one before anything starts.
    config.validate()?;
    // Every request has a connect and a read timeout: a dead connection fails instead of hanging.
    let kube_config = opkit::process::kube_config(config.client_timeouts())
        .await
        .map_err(|e| anyhow::anyhow!("connecting to the Kubernetes API (in-cluster config or KUBECONFIG): {e}"))?;
    // Bundle inputs may never reach the API server the operator talks to (nor its in-cluster
    // Service address).
    let mut api_hosts: Vec<String> = kube_config.cluster_url.host().map(str::to_string).into_iter().collect();
    api_hosts.extend(std::env::var("KUBERNETES_SERVICE_HOST").ok());
    for host in api_hosts {
        config.fetch_denied_addresses.extend(varroa_operator::fetch::api_server_addresses(&host).await);
    }
    let metrics = Arc::new(varroa_operator::metrics::Metrics::new());
    // The client counts its requests by verb and resource (varroa_api_requests_total).
    let client = opkit::client::counted(kube_config, &metrics.requests)
        .map_err(|e| anyhow::anyhow!("connecting to the Kubernetes API (in-cluster config or KUBECONFIG): {e}"))?;
    let mut registry = prometheus_client::registry::Registry::default();
    metrics.register(&mut registry);
    registry.register_collector(Box::new(opkit::process::HeapInUse));
    let options = opkit::process::ProcessOptions {
        lease_name: "varroa-operator".into(),
        health_addr: config.health_addr,
        metrics_addr: None,
        leader_elect: config.leader_elect,
        leader_election_namespace: config.leader_election_namespace.clone(),
        shutdown_grace: config.shutdown_grace,
        lease_timing: opkit::leader::LeaseTiming::default(),
    };
    // The control link: mite state from varroa_mites, desired configuration to varroa_desired;
    // lifecycle activity on activity.<cluster>.* over the same connection.
    let (mites, activity): (Arc<dyn varroa_operator::mite::MiteSource>, _) = match &config.nats_url {
        Some(url) => {
            let settings = varroa_operator::link::LinkSettings {
                nats: varroa_link::nats::ConnectSettings {
                    url: url.clone(),
                    credentials_file: config.nats_credentials_file.clone(),
                    name: format!("varroa-operator/{}", std::env::var("POD_NAME").unwrap_or_default()),
                    max_reconnect_delay: std::time::Duration::from_secs(10),
                },
                heartbeat_timeout: config.mite_heartbeat_timeout,
                replicas: usize::try_from(config.nats_bucket_replicas).unwrap_or(1),
            };
            let link = varroa_operator::link::KvLink::start(settings)
                .await
                .map_err(|e| anyhow::anyhow!("the control link (--nats-url {url}): {e}"))?;
            let activity = varroa_operator::activity::Publisher::nats(link.client(), &config.cluster)
                .map_err(|e| anyhow::anyhow!("--cluster: {e}"))?;
            tracing::info!(target: "varroa_operator", nats = %url, cluster = %config.cluster, "control link on: mite state from varroa_mites, desired configuration to varroa_desired, lifecycle activity on activity.{}.*", config.cluster);
            (link, activity)
        }
        None => {
            tracing::warn!(target: "varroa_operator", "no --nats-url: the control link is off; running controllers stop at Running, configuration changes reach Jenkins only when its pod restarts, and no lifecycle activity is published");
            (Arc::new(varroa_operator::mite::NoGateway::default()), varroa_operator::activity::Publisher::off())
        }
    };
    activity.register(&mut registry);
    // Signals, health, leader election, shutdown (opkit::process): a controller that stops by
    // itself or a lost Lease ends the process with an error (exit 1), SIGTERM with Ok (exit 0).
    opkit::process::run(client.clone(), options, Arc::new(registry), move |shutdown| {
        varroa_operator::run(client, config, metrics, mites, activity, shutdown)
    })
    .await
    .map_err(anyhow::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<(Option<&'static str>, varroa_operator::Config), clap::Error> {
        let cli = Cli::try_parse_from(std::iter::once("varroa-operator").chain(args.iter().copied()))?;
        Ok(match cli.command {
            Some(Command::Run(run)) => (Some("run"), run.config),
            Some(_) => (Some("other"), cli.config),
            None => (None, cli.config),
        })
    }

    #[test]
    fn the_flags_go_before_run_or_after_it_and_switches_are_bare() {
        Cli::command().debug_assert();
        let (cmd, before) = parse(&["--cluster", "prod", "--leader-elect"]).expect("before");
        assert_eq!((cmd, before.cluster.as_str(), before.leader_elect), (None, "prod", true));
        let (cmd, after) = parse(&["run", "--cluster", "prod", "--leader-elect"]).expect("after run");
        assert_eq!((cmd, after.cluster.as_str(), after.leader_elect), (Some("run"), "prod", true));
        // A bare switch does not take `run` as its value: `run` stays the command, and flags on
        // both sides of it are refused, not merged.
        let e = parse(&["--leader-elect", "run"]).unwrap_err().to_string();
        assert!(e.contains("the subcommand 'run' cannot be used with '--leader-elect"), "{e}");
        assert!(!parse(&["run", "--leader-elect=false"]).expect("=false").1.leader_elect);
        assert!(parse(&["--leader-elect", "false"]).is_err(), "--leader-elect=false, not --leader-elect false");
        let e = parse(&["--leader-elect", "run", "--cluster", "prod"]).unwrap_err().to_string();
        assert!(e.contains("cannot be used with"), "{e}");
    }
}
