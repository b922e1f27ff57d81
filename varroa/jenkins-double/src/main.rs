//! `varroa-jenkins-double`: the Jenkins double as a process, for devcluster's process runtime
//! (the `jenkins` container of a Varroa pod) and the demo. Flags fall back to environment
//! variables so the container's env configures it; `CASC_JENKINS_CONFIG` is the variable the
//! operator already sets for real Jenkins.

use clap::Parser;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use varroa_jenkins_double::plugin::PluginConfig;
use varroa_jenkins_double::{JenkinsDouble, Options};

/// A stand-in for Jenkins: the HTTP endpoints the mite uses, with Jenkins' status codes,
/// headers and payloads, plus fault switches under /__double/. Without a subcommand it serves
/// Jenkins.
#[derive(Parser, Debug)]
#[command(name = "varroa-jenkins-double", version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    jenkins: Args,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Serve a stand-in Jenkins update site: stand-in plugin files for any name and version under
    /// /download/plugins/, and /current/plugin-versions.json with their digests for the plugins
    /// named in --plugins-from.
    UpdateSite {
        /// Address to listen on (port 0 picks a free one; the URL is printed and written to
        /// --url-file).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// YAML files or directories whose plugin lists (`plugins: [{name, version}]`) the
        /// plugin-versions.json publishes.
        #[arg(long = "plugins-from")]
        plugins_from: Vec<PathBuf>,
        /// Write the site's URL here once it listens.
        #[arg(long)]
        url_file: Option<PathBuf>,
    },
    /// Run builds at full speed through the Varroa plugin's client against a mite, and print
    /// events/s and totals when the mite has answered for every event (exit status 1 when not
    /// every event was accepted).
    Load {
        /// The mite's plugin listener.
        #[arg(long = "plugin-url", env = "VARROA_PLUGIN_URL")]
        plugin_url: String,
        /// The file the mite writes the plugin token to.
        #[arg(long = "token-file", env = "VARROA_PLUGIN_TOKEN_FILE", default_value = DEFAULT_PLUGIN_TOKEN_FILE)]
        token_file: PathBuf,
        /// Jobs (load-1, load-2, ...).
        #[arg(long, default_value_t = 10)]
        jobs: usize,
        /// Builds per job.
        #[arg(long, default_value_t = 100)]
        builds: usize,
        /// Builds running at once.
        #[arg(long, default_value_t = 10)]
        concurrency: usize,
        /// Stages per build (each build sends 2 x stages + 4 events).
        #[arg(long, default_value_t = 3)]
        stages: usize,
        /// Events per request (at most 500).
        #[arg(long = "batch-size", default_value_t = varroa_link::builds::MAX_EVENTS_PER_BATCH)]
        batch_size: usize,
        /// Seconds to wait, after the last build, for the mite to answer for every event.
        #[arg(long = "flush-timeout", default_value_t = 120)]
        flush_timeout: u64,
        /// Ask a build claim (POST /v1/claims) for every build, each with a trigger of its own;
        /// the numbers are the ledger's (the mite needs VARROA_CLAIMS=on).
        #[arg(long)]
        claims: bool,
        /// Console lines (80 bytes each) every stage prints, sent as the build's log
        /// (POST /v1/logs/...); 0 sends no logs.
        #[arg(long = "console-lines", default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=100_000))]
        console_lines: u64,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a YAML file with every plugin digest (`sha256` of a `plugins` list item) replaced by
    /// the stand-in file's that `update-site` serves.
    Relock {
        /// The YAML file (a JenkinsVersionProfile, say).
        file: PathBuf,
    },
}

#[derive(clap::Args, Debug)]
struct Args {
    /// Address to listen on (Jenkins' HTTP port in the pod is 8080). Default: `$POD_IP:8080`
    /// when the pod's IP is given (the operator's StatefulSet sets `POD_IP` from the downward
    /// API; devcluster's pods share the host's network, so each double binds its own pod IP),
    /// else `127.0.0.1:8080`.
    #[arg(long, env = "JENKINS_DOUBLE_LISTEN")]
    listen: Option<SocketAddr>,
    /// The pod's IP (the downward API's `status.podIP`); gives the default listen address.
    #[arg(long = "pod-ip", env = "POD_IP")]
    pod_ip: Option<String>,
    /// The Jenkins version reported in X-Jenkins.
    #[arg(long = "jenkins-version", env = "JENKINS_DOUBLE_VERSION", default_value = "2.479.3")]
    jenkins_version: String,
    /// The user that API tokens belong to. The environment variable is the one the Varroa plugin
    /// reads in a real Jenkins pod (the operator sets it), so the same pod spec runs the double.
    #[arg(long, env = "VARROA_MITE_USER", default_value = "admin")]
    user: String,
    /// A file holding the user's API token (re-read on every request). Without it and without a
    /// password, security is off. The variable is the plugin's, as for `--user`.
    #[arg(long, env = "VARROA_MITE_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// A file holding the user's password (POSTs with it need a crumb).
    #[arg(long, env = "JENKINS_DOUBLE_PASSWORD_FILE")]
    password_file: Option<PathBuf>,
    /// JCasC sources: comma-separated files or directories, as Jenkins reads them.
    #[arg(long, env = "CASC_JENKINS_CONFIG")]
    casc_config: Option<String>,
    /// Directory of installed plugins (*.jpi, *.hpi) to report, e.g. /usr/share/jenkins/ref/plugins.
    #[arg(long, env = "JENKINS_DOUBLE_PLUGINS_DIR")]
    plugins_dir: Option<PathBuf>,
    /// Executors of the built-in node unless the configuration sets jenkins.numExecutors.
    #[arg(long, env = "JENKINS_DOUBLE_EXECUTORS", default_value_t = 2)]
    executors: u32,
    /// Job names listed in /api/json (comma-separated; not runnable, see --jobs-file).
    #[arg(long, env = "JENKINS_DOUBLE_JOBS", value_delimiter = ',')]
    jobs: Vec<String>,
    /// Pipeline jobs the double runs (POST /__double/builds, POST /job/<name>/build), YAML or
    /// JSON: `jobs: [{name, stages: [{name, duration_ms, result, console}], tests: {total,
    /// failed, skipped}, console, result, trigger, queue_ms}]`.
    #[arg(long = "jobs-file", env = "JENKINS_DOUBLE_JOBS_FILE")]
    jobs_file: Option<PathBuf>,
    /// The Varroa plugin's mite (the mite's plugin listener, http://127.0.0.1:8787). Without it,
    /// builds run and send nothing, as in a Jenkins without the plugin.
    #[arg(long = "plugin-url", env = "VARROA_PLUGIN_URL")]
    plugin_url: Option<String>,
    /// The file the mite writes the plugin token to (read at start and again after a 401).
    #[arg(long = "plugin-token-file", env = "VARROA_PLUGIN_TOKEN_FILE", default_value = DEFAULT_PLUGIN_TOKEN_FILE)]
    plugin_token_file: PathBuf,
    /// Real time per configured build millisecond: 1 runs builds as long as configured, 0.01 a
    /// hundred times faster, 0 at once (the events carry the configured times either way).
    #[arg(long = "time-scale", env = "JENKINS_DOUBLE_TIME_SCALE", default_value_t = 1.0)]
    time_scale: f64,
    /// Ask a build claim (POST {plugin-url}/v1/claims) for every queued build, as the Varroa
    /// plugin does: granted runs with the ledger's number, refused drops the queue item, ungated
    /// runs with Jenkins' own. Needs --plugin-url.
    /// The environment variable is the one the operator sets in the Jenkins container (and the
    /// mite's): `on` turns claims on, `off` (or unset) leaves them off.
    #[arg(long, env = "VARROA_CLAIMS", value_parser = on_off, num_args = 0..=1, default_missing_value = "on", default_value = "off")]
    claims: bool,
    /// A claim's budget_ms: how long one claim request waits for its answer (100 to 30000).
    #[arg(long = "claim-budget-ms", env = "JENKINS_DOUBLE_CLAIM_BUDGET_MS", default_value_t = 5000)]
    claim_budget_ms: u64,
    /// Seconds a queue item waits for a claim decision (retry answers, the mite away) before it is
    /// dropped.
    #[arg(long = "claim-wait-limit", env = "JENKINS_DOUBLE_CLAIM_WAIT_LIMIT", default_value_t = 3600)]
    claim_wait_limit: u64,
    /// Send every build's console text to the mite (POST {plugin-url}/v1/logs/...) when there is
    /// a plugin URL.
    #[arg(long = "console-logs", env = "JENKINS_DOUBLE_CONSOLE_LOGS", default_value_t = true, action = clap::ArgAction::Set)]
    console_logs: bool,
}

/// Where the mite writes the plugin token by default (docs/varroa/plugin-protocol.md).
const DEFAULT_PLUGIN_TOKEN_FILE: &str = "/var/run/varroa/plugin/token";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let logs = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()));
    if matches!(cli.command, Some(Command::Load { .. })) {
        // The report is the standard output; the logs go to the error output.
        logs.with_writer(std::io::stderr).init();
    } else {
        logs.init();
    }
    match cli.command {
        Some(Command::UpdateSite { listen, plugins_from, url_file }) => {
            return update_site(listen, plugins_from, url_file).await;
        }
        Some(Command::Load {
            plugin_url,
            token_file,
            jobs,
            builds,
            concurrency,
            stages,
            batch_size,
            flush_timeout,
            claims,
            console_lines,
            json,
        }) => {
            let plugin = PluginConfig { batch_size, ..PluginConfig::new(plugin_url, token_file) };
            let report = varroa_jenkins_double::load::run(varroa_jenkins_double::load::LoadOptions {
                plugin,
                jobs,
                builds,
                concurrency,
                stages,
                flush_timeout: Duration::from_secs(flush_timeout),
                claims,
                console_lines: console_lines as usize,
            })
            .await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                println!("{report}");
            }
            if !report.complete {
                anyhow::bail!(
                    "not every event was accepted, claim granted or log complete by the mite (see the counts above)"
                );
            }
            return Ok(());
        }
        Some(Command::Relock { file }) => {
            let text =
                std::fs::read_to_string(&file).map_err(|e| anyhow::anyhow!("reading {}: {e}", file.display()))?;
            print!("{}", varroa_jenkins_double::update_site::relock(&text, &file)?);
            return Ok(());
        }
        None => {}
    }
    let args = cli.jenkins;
    let password = match &args.password_file {
        Some(p) => Some(
            std::fs::read_to_string(p)
                .map_err(|e| anyhow::anyhow!("reading --password-file {}: {e}", p.display()))?
                .trim()
                .to_string(),
        ),
        None => None,
    };
    if let Some(p) = &args.token_file {
        std::fs::metadata(p).map_err(|e| anyhow::anyhow!("--token-file {}: {e}", p.display()))?;
    }
    let listen = listen_address(args.listen, args.pod_ip.as_deref())?;
    let build_jobs = match &args.jobs_file {
        Some(f) => varroa_jenkins_double::builds::load_jobs(f).map_err(|e| anyhow::anyhow!("--jobs-file: {e}"))?,
        None => Vec::new(),
    };
    let plugin = args
        .plugin_url
        .as_deref()
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(|u| PluginConfig::new(u, args.plugin_token_file.clone()));
    if plugin.is_none() {
        tracing::info!("no VARROA_PLUGIN_URL: builds run and send no events (Jenkins without the Varroa plugin)");
    }
    if args.claims && plugin.is_none() {
        anyhow::bail!("--claims (VARROA_CLAIMS=on) needs --plugin-url (VARROA_PLUGIN_URL): claims go to the mite");
    }
    let claims = args.claims.then(|| varroa_jenkins_double::ClaimsOptions {
        budget: Duration::from_millis(args.claim_budget_ms),
        wait_limit: Duration::from_secs(args.claim_wait_limit),
        ..Default::default()
    });
    let opts = Options {
        listen,
        version: args.jenkins_version,
        user: args.user,
        api_token: None,
        token_file: args.token_file,
        password,
        casc_config: args.casc_config,
        plugins: if args.plugins_dir.is_some() { Vec::new() } else { Options::default().plugins },
        plugins_dir: args.plugins_dir,
        num_executors: args.executors,
        jobs: args.jobs.into_iter().filter(|j| !j.is_empty()).collect(),
        build_jobs,
        plugin,
        time_scale: args.time_scale,
        claims,
        logs: args.console_logs.then(varroa_jenkins_double::LogsOptions::default),
        ..Options::default()
    };
    let double = JenkinsDouble::start(opts).await?;
    tracing::info!(url = %double.url(), jobs = double.builds().jobs().len(), plugin = ?double.plugin().map(|p| p.config().url.clone()), "Jenkins double is up");
    tokio::select! {
        _ = double_wait(double) => {}
        _ = tokio::signal::ctrl_c() => {}
        _ = sigterm() => {}
    }
    Ok(())
}

async fn update_site(listen: SocketAddr, plugins_from: Vec<PathBuf>, url_file: Option<PathBuf>) -> anyhow::Result<()> {
    use varroa_jenkins_double::update_site::{UpdateSite, plugins_in};
    let plugins = plugins_in(&plugins_from)?;
    let site = UpdateSite::start(listen, plugins.clone())
        .await
        .map_err(|e| anyhow::anyhow!("listening on --listen {listen}: {e}"))?;
    if let Some(f) = &url_file {
        std::fs::write(f, site.url()).map_err(|e| anyhow::anyhow!("writing --url-file {}: {e}", f.display()))?;
    }
    println!("{}", site.url());
    tracing::info!(url = %site.url(), published = plugins.len(), "stand-in update site is up");
    tokio::select! {
        _ = site.wait() => {}
        _ = tokio::signal::ctrl_c() => {}
        _ = sigterm() => {}
    }
    Ok(())
}

/// `--listen`, else `POD_IP:8080`, else `127.0.0.1:8080`.
fn listen_address(listen: Option<SocketAddr>, pod_ip: Option<&str>) -> anyhow::Result<SocketAddr> {
    if let Some(l) = listen {
        return Ok(l);
    }
    match pod_ip.map(str::trim).filter(|s| !s.is_empty()) {
        Some(ip) => {
            let ip: std::net::IpAddr = ip.parse().map_err(|e| {
                anyhow::anyhow!(
                    "invalid --pod-ip (POD_IP) {ip:?}: {e}; fix: set the pod's IP (fieldRef status.podIP) or --listen"
                )
            })?;
            Ok(SocketAddr::new(ip, 8080))
        }
        None => Ok(SocketAddr::from(([127, 0, 0, 1], 8080))),
    }
}

async fn double_wait(d: JenkinsDouble) {
    d.wait().await
}

#[cfg(unix)]
async fn sigterm() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut s) => {
            s.recv().await;
        }
        Err(_) => std::future::pending::<()>().await,
    }
}

#[cfg(not(unix))]
async fn sigterm() {
    std::future::pending::<()>().await
}

/// `on`/`off` (and `true`/`false`), as VARROA_CLAIMS is spelled.
fn on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" | "true" => Ok(true),
        "off" | "false" | "" => Ok(false),
        other => Err(format!("{other:?} is not on or off")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_are_on_or_off_as_the_operator_spells_them() {
        let parse = |args: &[&str]| Cli::try_parse_from(args).map(|c| c.jenkins.claims);
        assert_eq!(parse(&["varroa-jenkins-double"]).ok(), Some(false));
        assert_eq!(parse(&["varroa-jenkins-double", "--claims"]).ok(), Some(true));
        assert_eq!(parse(&["varroa-jenkins-double", "--claims", "off"]).ok(), Some(false));
        assert_eq!(parse(&["varroa-jenkins-double", "--claims=on"]).ok(), Some(true));
        assert!(parse(&["varroa-jenkins-double", "--claims", "maybe"]).is_err());
    }

    #[test]
    fn the_listen_address_is_the_flag_then_the_pod_ip_then_loopback() {
        let flag: SocketAddr = "127.0.0.1:0".parse().unwrap();
        assert_eq!(listen_address(Some(flag), Some("127.4.0.2")).unwrap(), flag);
        assert_eq!(listen_address(None, Some("127.4.0.2")).unwrap(), "127.4.0.2:8080".parse().unwrap());
        assert_eq!(listen_address(None, Some("fd00::7")).unwrap(), "[fd00::7]:8080".parse().unwrap());
        assert_eq!(listen_address(None, None).unwrap(), "127.0.0.1:8080".parse().unwrap());
        assert_eq!(listen_address(None, Some(" ")).unwrap(), "127.0.0.1:8080".parse().unwrap());
        let err = listen_address(None, Some("not-an-ip")).unwrap_err().to_string();
        assert!(err.contains("POD_IP") && err.contains("not-an-ip"), "{err}");
    }
}
