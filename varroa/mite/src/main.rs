//! `varroa-mite`: one binary, one subcommand per role. `main` parses flags and dispatches; each
//! subcommand is a library function with its own tests: `run` is [`varroa_mite::link`] with
//! [`varroa_mite::settings`], `install-plugins` is [`varroa_mite::plugins`].

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use varroa_mite::plugins::{InstallOptions, install};
use varroa_mite::settings::RunArgs;

/// The Varroa mite: the sidecar next to each Jenkins controller.
#[derive(Parser, Debug)]
#[command(name = "varroa-mite", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Keep the stream to the gateway: observe Jenkins, report it, apply the desired
    /// configuration (the `mite` container).
    Run(Box<RunArgs>),
    /// Download the locked plugins, verify each against its SHA-256 and install them atomically
    /// (the plugins-init container).
    InstallPlugins(InstallPluginsArgs),
    /// Copy the configuration Jenkins boots with (the ConfigMap's jenkins.yaml) into the JCasC
    /// directory the mite applies to (the casc-init container).
    SeedCasc(SeedCascArgs),
}

#[derive(Args, Debug)]
struct SeedCascArgs {
    /// A YAML file to seed (repeatable); the directory ends up holding exactly these.
    #[arg(long = "from", required = true)]
    from: Vec<PathBuf>,
    /// The JCasC directory (CASC_JENKINS_CONFIG), created when missing.
    #[arg(long = "to", env = "VARROA_CASC_DIR")]
    to: PathBuf,
}

#[derive(Args, Debug)]
struct InstallPluginsArgs {
    /// plugins.txt: `name:version` lines.
    #[arg(long, env = "VARROA_PLUGINS_FILE")]
    plugins: PathBuf,
    /// plugins-sha256.txt: `<hex>  <name>.hpi` lines (sha256sum format).
    #[arg(long, env = "VARROA_PLUGINS_SHA256_FILE")]
    sha256: PathBuf,
    /// The update site root; plugins come from <site>/download/plugins/<name>/<version>/<name>.hpi.
    #[arg(long, env = "VARROA_UPDATE_SITE")]
    update_site: String,
    /// Where the digests of plugins the lock does not list (pins, plugins an input needs) come
    /// from: the update site's plugin-versions.json. Default: <update-site>/current/plugin-versions.json,
    /// as updates.jenkins.io lays it out. `none` refuses every unlocked plugin.
    #[arg(long, env = "VARROA_PLUGIN_INFO")]
    plugin_info: Option<String>,
    /// Destination directory (the image's /usr/share/jenkins/ref/plugins); plugins land as <name>.jpi.
    #[arg(long, env = "VARROA_PLUGINS_DEST")]
    dest: PathBuf,
    /// The largest plugin accepted, in bytes.
    #[arg(long, default_value_t = 256 << 20)]
    max_size: u64,
    /// Tries per plugin on transient failures (connection errors, timeouts, 5xx, 429).
    #[arg(long, default_value_t = 5)]
    attempts: u32,
    /// First back-off between tries, in milliseconds (doubles each try).
    #[arg(long, default_value_t = 500)]
    initial_backoff_ms: u64,
    /// Longest back-off between tries, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    max_backoff_ms: u64,
    /// The most one download may take, in seconds.
    #[arg(long, default_value_t = 300)]
    timeout_secs: u64,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::InstallPlugins(args) => install_plugins(args).await,
        Command::Run(args) => run(*args).await,
        Command::SeedCasc(args) => match varroa_mite::apply::seed(&args.from, &args.to) {
            Ok(names) => {
                tracing::info!(dir = %args.to.display(), files = ?names, "JCasC directory seeded");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("varroa-mite seed-casc: {e}");
                ExitCode::from(1)
            }
        },
    }
}

async fn run(a: RunArgs) -> ExitCode {
    let (settings, claims) = match a.validate().and_then(|s| Ok((s, a.claim_settings()?))) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("varroa-mite run: {e}");
            return ExitCode::from(2);
        }
    };
    tracing::info!(
        namespace = %settings.namespace, controller = %settings.controller, cell = settings.cell,
        gateway = %settings.gateway_url, jenkins = %settings.jenkins_url, plugin_listen = ?settings.plugin_listen,
        claims_gate = claims.gate, when_ledger_down = claims.when_ledger_down.as_str(),
        "varroa-mite starting"
    );
    let mite = match varroa_mite::link::start_full(settings, claims, a.inventory_settings()).await {
        Ok(m) => m,
        Err(e) => {
            eprintln!("varroa-mite run: {e}");
            return ExitCode::FAILURE;
        }
    };
    let signal = stop_signal().await;
    tracing::info!(signal, "stopping: closing the gateway stream");
    mite.shutdown().await;
    ExitCode::SUCCESS
}

/// SIGTERM (the kubelet stopping the pod) or SIGINT.
async fn stop_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        // Without signal handlers, only a kill stops the mite.
        std::future::pending::<()>().await;
        return "none";
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    }
}

async fn install_plugins(a: InstallPluginsArgs) -> ExitCode {
    let plugin_info = match a.plugin_info.as_deref() {
        Some("none") => None,
        Some(url) => Some(url.to_string()),
        None => Some(varroa_mite::plugins::default_plugin_info(&a.update_site)),
    };
    let opts = InstallOptions {
        plugin_info,
        max_size: a.max_size,
        attempts: a.attempts,
        initial_backoff: Duration::from_millis(a.initial_backoff_ms),
        max_backoff: Duration::from_millis(a.max_backoff_ms),
        timeout: Duration::from_secs(a.timeout_secs),
        ..InstallOptions::new(a.plugins, a.sha256, &a.update_site, a.dest)
    };
    match install(&opts).await {
        Ok(installed) => {
            let fetched = installed.iter().filter(|p| p.downloaded).count();
            println!(
                "installed {} plugin(s) into {} ({fetched} downloaded, {} already in place)",
                installed.len(),
                opts.dest.display(),
                installed.len() - fetched
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("varroa-mite install-plugins: {e}");
            ExitCode::FAILURE
        }
    }
}
