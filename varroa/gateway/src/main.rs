//! `varroa-gateway`: the server the mites dial (see the library docs and docs/varroa/gateway.md).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use varroa_gateway::{GatewayConfig, GatewayOptions, TlsFiles};
use varroa_link::nats::ConnectSettings;

/// The Varroa gateway: gRPC over mutual TLS for the mites, state in NATS JetStream.
#[derive(Debug, Parser)]
#[command(name = "varroa-gateway", version, about)]
struct Args {
    /// The gRPC listen address (mutual TLS).
    #[arg(long, env = "VARROA_GATEWAY_LISTEN", default_value = "0.0.0.0:8443")]
    listen: SocketAddr,
    /// The plain-HTTP address of /healthz, /readyz and /metrics.
    #[arg(long, env = "VARROA_GATEWAY_HEALTH_LISTEN", default_value = "0.0.0.0:8080")]
    health_listen: SocketAddr,
    /// The server certificate chain (PEM), re-read on change.
    #[arg(long, env = "VARROA_GATEWAY_TLS_CERT")]
    tls_cert: PathBuf,
    /// The server certificate's key (PEM, PKCS#8), re-read on change.
    #[arg(long, env = "VARROA_GATEWAY_TLS_KEY")]
    tls_key: PathBuf,
    /// The CA bundle client certificates must chain to (tls.crt of the gateway-ca Secret),
    /// re-read for every new handshake when it changed.
    #[arg(long, env = "VARROA_GATEWAY_TLS_CA")]
    tls_ca: PathBuf,
    /// The NATS server URL(s), comma-separated.
    #[arg(long, env = "VARROA_NATS_URL", default_value = "nats://127.0.0.1:4222")]
    nats_url: String,
    /// The NATS credentials file (`user=...` and `password=...` lines), re-read on every
    /// reconnect. Without it the gateway connects without authentication.
    #[arg(long, env = "VARROA_NATS_CREDENTIALS_FILE")]
    nats_credentials_file: Option<PathBuf>,
    /// JetStream replicas for the buckets when the gateway creates them (3 on a 3-node NATS).
    #[arg(long, env = "VARROA_NATS_BUCKET_REPLICAS", default_value_t = 1)]
    bucket_replicas: usize,
    /// This replica's name, written into varroa_mites [default: $POD_NAME, else the hostname].
    #[arg(long, env = "VARROA_GATEWAY_REPLICA")]
    replica: Option<String>,
    /// How often mites send heartbeats, in seconds (a stream silent for three is closed).
    #[arg(long, env = "VARROA_GATEWAY_HEARTBEAT_SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    heartbeat_seconds: u64,
    /// The most mite streams this replica holds (further ones are refused; the mites retry).
    #[arg(long, env = "VARROA_GATEWAY_MAX_STREAMS", default_value_t = 5000)]
    max_streams: usize,
    /// The cluster's name in activity subjects (activity.<cluster>.<ns>.<ctrl>); a DNS-1123 label.
    #[arg(long, env = "VARROA_CLUSTER", default_value = "local")]
    cluster: String,
    /// Where console logs are written: a local directory (`file:///var/lib/varroa/logs`, created
    /// on the first write) or S3 (`s3://bucket/prefix?endpoint=https://host:port&region=name`;
    /// credentials from the AWS environment or --log-store-credentials-file). Archived artifacts
    /// are signed for the same store, and need the S3 one (a directory cannot presign URLs).
    #[arg(long, env = "VARROA_LOG_STORE", default_value = varroa_blobs::store::DEFAULT_URL)]
    log_store: String,
    /// An S3 credentials file (`access_key_id=...`, `secret_access_key=...`, optionally
    /// `session_token=...` lines), re-read when it changes. Without it: the AWS environment.
    #[arg(long, env = "VARROA_LOG_STORE_CREDENTIALS_FILE")]
    log_store_credentials_file: Option<PathBuf>,
    /// How long a mite may take to send its Hello, in seconds.
    #[arg(long, env = "VARROA_GATEWAY_HELLO_TIMEOUT_SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=300))]
    hello_timeout_seconds: u64,
}

fn replica_name(flag: Option<String>) -> String {
    flag.filter(|s| !s.is_empty())
        .or_else(|| std::env::var("POD_NAME").ok().filter(|s| !s.is_empty()))
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
        })
        .unwrap_or_else(|| "varroa-gateway".to_owned())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .init();
    // One crypto provider for the process (rustls panics when two are compiled in and none chosen).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args = Args::parse();
    let replica = replica_name(args.replica);
    let config = GatewayConfig {
        listen: args.listen,
        health_listen: args.health_listen,
        tls: TlsFiles { cert: args.tls_cert, key: args.tls_key, ca: args.tls_ca },
        nats: ConnectSettings {
            url: args.nats_url,
            credentials_file: args.nats_credentials_file,
            name: format!("varroa-gateway/{replica}"),
            max_reconnect_delay: Duration::from_secs(5),
        },
        bucket_replicas: args.bucket_replicas,
        options: GatewayOptions {
            replica: replica.clone(),
            heartbeat_interval: Duration::from_secs(args.heartbeat_seconds),
            hello_timeout: Duration::from_secs(args.hello_timeout_seconds),
            cluster: args.cluster,
            max_streams: args.max_streams,
        },
    };
    let log_store =
        varroa_blobs::StoreSettings { url: args.log_store, credentials_file: args.log_store_credentials_file };
    let running = varroa_gateway::start_with(config, Some(log_store)).await.context("starting varroa-gateway")?;
    tracing::info!(grpc = %running.grpc_addr, health = %running.health_addr, %replica, "varroa-gateway serving");
    let mut term =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).context("SIGTERM handler")?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term.recv() => {},
    }
    tracing::info!("shutting down");
    running.shutdown().await;
    Ok(())
}
