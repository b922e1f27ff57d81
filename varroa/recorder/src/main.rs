//! `varroa-recorder`: see the library docs and docs/varroa/data-plane.md.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use varroa_link::nats::ConnectSettings;
use varroa_recorder::db::DbSettings;
use varroa_recorder::{ConsumerSettings, LedgerSettings, RecorderConfig, RetentionSettings};

/// The Varroa recorder: build records, activity and the claim ledger in PostgreSQL.
#[derive(Debug, Parser)]
#[command(name = "varroa-recorder", version, about)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Args)]
struct Database {
    /// The PostgreSQL database (`postgres://user@host:5432/dbname`; the password from
    /// --database-password-file).
    #[arg(long, env = "VARROA_DATABASE_URL")]
    database_url: String,
    /// A file holding the database password, re-read on every connection.
    #[arg(long, env = "VARROA_DATABASE_PASSWORD_FILE")]
    database_password_file: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct Run {
    #[command(flatten)]
    database: Database,
    /// The NATS server URL(s), comma-separated.
    #[arg(long, env = "VARROA_NATS_URL", default_value = "nats://127.0.0.1:4222")]
    nats_url: String,
    /// The NATS credentials file (`user=...` and `password=...` lines), re-read on every
    /// reconnect. Without it the recorder connects without authentication.
    #[arg(long, env = "VARROA_NATS_CREDENTIALS_FILE")]
    nats_credentials_file: Option<PathBuf>,
    /// The plain-HTTP address of /healthz, /readyz and /metrics.
    #[arg(long, env = "VARROA_RECORDER_HEALTH_LISTEN", default_value = "0.0.0.0:8080")]
    health_listen: SocketAddr,
    /// JetStream replicas of varroa_builds and varroa_activity when the recorder creates them
    /// (3 on a 3-node NATS).
    #[arg(long, env = "VARROA_NATS_STREAM_REPLICAS", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=5))]
    stream_replicas: u64,
    /// The most events pulled and applied in one PostgreSQL transaction.
    #[arg(long, env = "VARROA_RECORDER_BATCH_SIZE", default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=2000))]
    batch_size: u64,
    /// How long JetStream waits for a recorder to acknowledge a message before it hands it to
    /// another (a recorder killed mid-batch delays those events by this much). The consumer is
    /// shared: give every replica the same value.
    #[arg(long, env = "VARROA_RECORDER_ACK_WAIT_SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    ack_wait_seconds: u64,
    /// Days build records and activity are kept; 0 keeps them forever.
    #[arg(long, env = "VARROA_RECORDER_RETENTION_DAYS", default_value_t = 90, value_parser = clap::value_parser!(u32).range(0..=36500))]
    retention_days: u32,
    /// The log store the gateway writes console logs to (the gateway's --log-store:
    /// `file:///var/lib/varroa/logs`, or `s3://bucket/prefix?endpoint=https://host:port&region=name`,
    /// credentials from the AWS environment or --log-store-credentials-file): the logs of the runs
    /// retention deletes are deleted from it. Without it, logs are not pruned.
    #[arg(long, env = "VARROA_LOG_STORE")]
    log_store: Option<String>,
    /// An S3 credentials file (`access_key_id=...`, `secret_access_key=...`, optionally
    /// `session_token=...` lines), re-read when it changes. Without it: the AWS environment.
    #[arg(long, env = "VARROA_LOG_STORE_CREDENTIALS_FILE", requires = "log_store")]
    log_store_credentials_file: Option<PathBuf>,
    /// Do not answer build claims (the ledger runs in every replica by default; claims then go
    /// to the replicas that run it).
    #[arg(long, env = "VARROA_RECORDER_NO_LEDGER")]
    no_ledger: bool,
    /// PostgreSQL sessions of the claims ledger.
    #[arg(long, env = "VARROA_RECORDER_LEDGER_CONNECTIONS", default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=256))]
    ledger_connections: u64,
    /// Claims decided at once; beyond that a claim is answered retry.
    #[arg(long, env = "VARROA_RECORDER_LEDGER_MAX_IN_FLIGHT", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    ledger_max_in_flight: u64,
    /// This replica's name in NATS' connection list [default: $POD_NAME, else the hostname].
    #[arg(long, env = "VARROA_RECORDER_REPLICA")]
    replica: Option<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Consume varroa_builds and varroa_activity into PostgreSQL, answer build claims, prune by
    /// age, serve health and metrics (migrates the schema first).
    Run(Box<Run>),
    /// Bring the schema up to date and exit (run also does this at start).
    Migrate {
        #[command(flatten)]
        database: Database,
    },
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
        .unwrap_or_else(|| "varroa-recorder".to_owned())
}

async fn run(args: Run) -> anyhow::Result<()> {
    let replica = replica_name(args.replica);
    let config = RecorderConfig {
        database: DbSettings {
            url: args.database.database_url,
            password_file: args.database.database_password_file,
            application_name: format!("varroa-recorder/{replica}"),
        },
        nats: ConnectSettings {
            url: args.nats_url,
            credentials_file: args.nats_credentials_file,
            name: format!("varroa-recorder/{replica}"),
            max_reconnect_delay: Duration::from_secs(5),
        },
        health_listen: args.health_listen,
        consumers: ConsumerSettings {
            batch_size: args.batch_size as usize,
            ack_wait: Duration::from_secs(args.ack_wait_seconds),
            stream_replicas: args.stream_replicas as usize,
        },
        retention: RetentionSettings {
            days: args.retention_days,
            log_store: args
                .log_store
                .filter(|u| !u.is_empty())
                .map(|url| varroa_blobs::StoreSettings { url, credentials_file: args.log_store_credentials_file }),
            ..Default::default()
        },
    };
    let ledger = (!args.no_ledger).then_some(LedgerSettings {
        connections: args.ledger_connections as usize,
        max_in_flight: args.ledger_max_in_flight as usize,
    });
    let mut running = varroa_recorder::start_with_ledger(config, ledger).await.context("starting varroa-recorder")?;
    tracing::info!(health = %running.health_addr, %replica, "varroa-recorder running");
    let mut term =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).context("SIGTERM handler")?;
    let fatal = tokio::select! {
        _ = tokio::signal::ctrl_c() => None,
        _ = term.recv() => None,
        reason = running.fatal() => Some(reason),
    };
    tracing::info!("shutting down");
    running.shutdown().await;
    match fatal {
        None => Ok(()),
        Some(reason) => Err(anyhow::anyhow!(reason).context("varroa-recorder cannot run against this database")),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .init();
    // One crypto provider for the process (rustls panics when two are compiled in and none chosen).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args = Args::parse();
    match args.command {
        Command::Run(run_args) => run(*run_args).await?,
        Command::Migrate { database } => {
            let settings = DbSettings {
                url: database.database_url,
                password_file: database.database_password_file,
                application_name: "varroa-recorder migrate".into(),
            };
            let mut client = settings.connect().await.context("varroa-recorder migrate")?;
            let applied = varroa_recorder::migrate::migrate(&mut client).await.context("varroa-recorder migrate")?;
            if applied.is_empty() {
                println!("schema up to date (version {})", varroa_recorder::migrate::latest());
            } else {
                println!("applied migrations {applied:?}; schema at version {}", varroa_recorder::migrate::latest());
            }
        }
    }
    Ok(())
}
