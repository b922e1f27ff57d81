//! `varroa-mite run`'s settings: flags with environment fallbacks, validated at start-up.
//!
//! The environment names are the ones the operator's StatefulSet gives the `mite` container
//! (`varroa/operator/src/objects.rs`): `VARROA_CONTROLLER`, `VARROA_NAMESPACE`,
//! `VARROA_GATEWAY_ENDPOINT`, `VARROA_JENKINS_URL`, `POD_NAME`, and the certificate Secret mounted
//! at `/var/run/varroa/tls`. The rest have defaults the operator can rely on
//! (docs/varroa/mite.md lists them). A bad value stops the mite before it dials anything, with
//! an error naming the flag, its environment variable and the fix: a sidecar that starts with a
//! wrong setting would otherwise only show up as "never connected".

use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use varroa_link::claims::{ENV_CLAIMS, ENV_WHEN_LEDGER_DOWN, WhenLedgerDown};

/// The flags of `varroa-mite run`.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// The Controller this mite serves (its name).
    #[arg(long, env = "VARROA_CONTROLLER")]
    pub controller: Option<String>,
    /// The Controller's namespace.
    #[arg(long, env = "VARROA_NAMESPACE")]
    pub namespace: Option<String>,
    /// The gateway, `host:port` or `https://host:port`.
    #[arg(long, env = "VARROA_GATEWAY_ENDPOINT")]
    pub gateway_endpoint: Option<String>,
    /// The name the gateway's certificate must carry, when it is not the endpoint's host.
    #[arg(long, env = "VARROA_GATEWAY_SERVER_NAME")]
    pub gateway_server_name: Option<String>,
    /// The mite's client certificate (the Controller's `<name>-mite-tls` Secret).
    #[arg(long, env = "VARROA_TLS_CERT", default_value = "/var/run/varroa/tls/tls.crt")]
    pub tls_cert: PathBuf,
    /// The client certificate's key.
    #[arg(long, env = "VARROA_TLS_KEY", default_value = "/var/run/varroa/tls/tls.key")]
    pub tls_key: PathBuf,
    /// The gateway CA (trusted for the gateway's server certificate).
    #[arg(long, env = "VARROA_TLS_CA", default_value = "/var/run/varroa/tls/ca.crt")]
    pub tls_ca: PathBuf,
    /// Jenkins' root URL (the `jenkins` container on the pod).
    #[arg(long, env = "VARROA_JENKINS_URL", default_value = "http://127.0.0.1:8080")]
    pub jenkins_url: String,
    /// The Jenkins user whose API token the mite uses.
    #[arg(long, env = "VARROA_JENKINS_USER", default_value = "varroa-mite")]
    pub jenkins_user: String,
    /// A file holding that user's API token (read on every request).
    #[arg(long, env = "VARROA_JENKINS_TOKEN_FILE", default_value = "/var/run/varroa/jenkins/token")]
    pub jenkins_token_file: PathBuf,
    /// The most one Jenkins request may take, in seconds.
    #[arg(long, env = "VARROA_JENKINS_TIMEOUT_SECONDS", default_value_t = 10)]
    pub jenkins_timeout_seconds: u64,
    /// The JCasC directory the mite writes (the directory `CASC_JENKINS_CONFIG` names).
    #[arg(long, env = "VARROA_CASC_DIR", default_value = "/var/jenkins_home/casc_configs")]
    pub casc_dir: PathBuf,
    /// The cell ordinal; default: the trailing `-N` of `POD_NAME` (StatefulSet pods), else 0.
    #[arg(long, env = "VARROA_CELL")]
    pub cell: Option<String>,
    /// The pod's name (the downward API); gives the cell ordinal.
    #[arg(long, env = "POD_NAME")]
    pub pod_name: Option<String>,
    /// How often Jenkins is observed, in seconds.
    #[arg(long, env = "VARROA_OBSERVE_INTERVAL_SECONDS", default_value_t = 5)]
    pub observe_interval_seconds: u64,
    /// How often the applied configuration is compared with Jenkins' export (drift), in seconds.
    #[arg(long, env = "VARROA_DRIFT_INTERVAL_SECONDS", default_value_t = 300)]
    pub drift_interval_seconds: u64,
    /// How often the Varroa plugin's trigger inventory (`GET {jenkins}/varroa/inventory`) is
    /// asked for, in seconds; changed job schedules go to the records as `job_schedule` events.
    #[arg(long = "inventory-interval", env = "VARROA_INVENTORY_INTERVAL_SECONDS", default_value_t = 60)]
    pub inventory_interval_seconds: u64,
    /// The longest back-off between two dials of the gateway, in seconds.
    #[arg(long, env = "VARROA_MAX_BACKOFF_SECONDS", default_value_t = 30)]
    pub max_backoff_seconds: u64,
    /// `/healthz`, `/readyz` (the stream is up) and `/metrics`; `off` turns it off.
    #[arg(long, env = "VARROA_HEALTH_LISTEN", default_value = "0.0.0.0:8081")]
    pub health_listen: String,
    /// The listener the Varroa Jenkins plugin posts build events to (the pod's loopback:
    /// docs/varroa/plugin-protocol.md); `off` turns it off.
    #[arg(long, env = "VARROA_PLUGIN_LISTEN", default_value = "127.0.0.1:8787")]
    pub plugin_listen: String,
    /// Where the mite writes the plugin's bearer token at start (a volume both containers mount).
    #[arg(long, env = "VARROA_PLUGIN_TOKEN_FILE", default_value = "/var/run/varroa/plugin/token")]
    pub plugin_token_file: PathBuf,
    /// The build claim gate: `on` asks the ledger (through the gateway) for every queued build;
    /// `off` (the default) answers the plugin `ungated` at once. The operator sets `on` when the
    /// installation has a build record store.
    #[arg(long, env = "VARROA_CLAIMS")]
    pub claims: Option<String>,
    /// What the mite answers a claim when no decision can be had from the ledger in time:
    /// `failClosed` (the default: retry) or `failOpen` (ungated).
    #[arg(long, env = "VARROA_CLAIMS_WHEN_LEDGER_DOWN")]
    pub claims_when_ledger_down: Option<String>,
}

/// The build claim settings of `varroa-mite run` (docs/varroa/mite.md, "Build claims").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClaimSettings {
    /// The gate is on: claims are forwarded to the ledger. Off: answered `ungated` at once.
    pub gate: bool,
    /// What to answer when the ledger cannot decide in time.
    pub when_ledger_down: WhenLedgerDown,
}

/// Validated settings of `varroa-mite run`.
#[derive(Debug, Clone)]
pub struct RunSettings {
    /// The Controller's namespace.
    pub namespace: String,
    /// The Controller's name.
    pub controller: String,
    /// The cell ordinal.
    pub cell: u32,
    /// `https://host:port`.
    pub gateway_url: String,
    /// The server name to verify, when not the URL's host.
    pub gateway_server_name: Option<String>,
    /// Client certificate, key and CA files (re-read before every dial).
    pub tls_cert: PathBuf,
    /// The key.
    pub tls_key: PathBuf,
    /// The gateway CA.
    pub tls_ca: PathBuf,
    /// Jenkins' root URL.
    pub jenkins_url: String,
    /// The Jenkins user.
    pub jenkins_user: String,
    /// The API token file.
    pub jenkins_token_file: PathBuf,
    /// Per-request timeout.
    pub jenkins_timeout: Duration,
    /// The JCasC directory.
    pub casc_dir: PathBuf,
    /// Observation period.
    pub observe_interval: Duration,
    /// Drift check period.
    pub drift_interval: Duration,
    /// First back-off between dials.
    pub initial_backoff: Duration,
    /// Longest back-off between dials.
    pub max_backoff: Duration,
    /// The health listener, if any.
    pub health_listen: Option<SocketAddr>,
    /// The plugin listener, if any.
    pub plugin_listen: Option<SocketAddr>,
    /// The file the plugin token is written to.
    pub plugin_token_file: PathBuf,
}

/// A setting that cannot work, naming the flag, its variable and the fix.
#[derive(Debug, thiserror::Error)]
#[error("invalid --{flag} ({env}) {value:?}: {reason}; fix: {fix}")]
pub struct SettingsError {
    /// The flag.
    pub flag: &'static str,
    /// Its environment variable.
    pub env: &'static str,
    /// The value given.
    pub value: String,
    /// What is wrong.
    pub reason: String,
    /// What to do.
    pub fix: &'static str,
}

fn err(
    flag: &'static str,
    env: &'static str,
    value: &str,
    reason: impl Into<String>,
    fix: &'static str,
) -> SettingsError {
    SettingsError { flag, env, value: value.to_owned(), reason: reason.into(), fix }
}

/// Whether `s` is a DNS-1123 label (what Kubernetes requires of namespaces and, here, of
/// Controller names: they name a StatefulSet and a Service).
fn dns_label(s: &str) -> Result<(), &'static str> {
    if s.is_empty() {
        return Err("empty");
    }
    if s.len() > 63 {
        return Err("longer than 63 characters");
    }
    if !s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') {
        return Err("only lowercase letters, digits and '-' are allowed");
    }
    if s.starts_with('-') || s.ends_with('-') {
        return Err("must start and end with a letter or digit");
    }
    Ok(())
}

/// The cell ordinal of a StatefulSet pod name (`<statefulset>-<ordinal>`).
pub fn ordinal_of(pod_name: &str) -> Option<u32> {
    let (_, n) = pod_name.rsplit_once('-')?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) || (n.len() > 1 && n.starts_with('0')) {
        return None;
    }
    n.parse().ok()
}

impl RunArgs {
    /// Validates the flags into [`RunSettings`].
    pub fn validate(&self) -> Result<RunSettings, SettingsError> {
        let namespace = self.namespace.clone().unwrap_or_default();
        dns_label(&namespace).map_err(|r| {
            err("namespace", "VARROA_NAMESPACE", &namespace, r, "set the Controller's namespace (the operator sets it)")
        })?;
        let controller = self.controller.clone().unwrap_or_default();
        dns_label(&controller).map_err(|r| {
            err("controller", "VARROA_CONTROLLER", &controller, r, "set the Controller's name (the operator sets it)")
        })?;

        let endpoint = self.gateway_endpoint.clone().unwrap_or_default();
        let gateway_url = gateway_url(&endpoint).map_err(|r| {
            err(
                "gateway-endpoint",
                "VARROA_GATEWAY_ENDPOINT",
                &endpoint,
                r,
                "use host:port or https://host:port, e.g. varroa-gateway.varroa-system.svc:8443",
            )
        })?;

        let jenkins_url = self.jenkins_url.trim_end_matches('/').to_string();
        if !(jenkins_url.starts_with("http://") || jenkins_url.starts_with("https://"))
            || jenkins_url.split_once("://").is_some_and(|(_, rest)| rest.is_empty())
        {
            return Err(err(
                "jenkins-url",
                "VARROA_JENKINS_URL",
                &self.jenkins_url,
                "not an http(s) URL",
                "use Jenkins' root URL on the pod, e.g. http://127.0.0.1:8080",
            ));
        }
        if self.jenkins_user.trim().is_empty() {
            return Err(err(
                "jenkins-user",
                "VARROA_JENKINS_USER",
                &self.jenkins_user,
                "empty",
                "name the Jenkins user the API token belongs to",
            ));
        }
        if self.jenkins_timeout_seconds == 0 || self.jenkins_timeout_seconds > 600 {
            return Err(err(
                "jenkins-timeout-seconds",
                "VARROA_JENKINS_TIMEOUT_SECONDS",
                &self.jenkins_timeout_seconds.to_string(),
                "must be between 1 and 600",
                "use a few seconds (default 10)",
            ));
        }

        let cell = match (&self.cell, &self.pod_name) {
            (Some(c), _) => c.trim().parse::<u32>().map_err(|e| {
                err("cell", "VARROA_CELL", c, e.to_string(), "use the cell ordinal, a number (0 for the first cell)")
            })?,
            (None, Some(pod)) if !pod.is_empty() => ordinal_of(pod).ok_or_else(|| {
                err(
                    "pod-name",
                    "POD_NAME",
                    pod,
                    "does not end in -<ordinal> as StatefulSet pods do",
                    "give the pod's name through the downward API (metadata.name), or set --cell",
                )
            })?,
            _ => 0,
        };

        let interval = |flag, env, v: u64, max: u64, fix| {
            if v == 0 || v > max {
                Err(err(flag, env, &v.to_string(), format!("must be between 1 and {max}"), fix))
            } else {
                Ok(Duration::from_secs(v))
            }
        };
        let observe_interval = interval(
            "observe-interval-seconds",
            "VARROA_OBSERVE_INTERVAL_SECONDS",
            self.observe_interval_seconds,
            3600,
            "use a few seconds (default 5)",
        )?;
        let drift_interval = interval(
            "drift-interval-seconds",
            "VARROA_DRIFT_INTERVAL_SECONDS",
            self.drift_interval_seconds,
            86_400,
            "use minutes (default 300)",
        )?;
        let max_backoff = interval(
            "max-backoff-seconds",
            "VARROA_MAX_BACKOFF_SECONDS",
            self.max_backoff_seconds,
            3600,
            "use tens of seconds (default 30)",
        )?;

        let health_listen = match self.health_listen.trim() {
            "off" | "" => None,
            a => Some(a.parse::<SocketAddr>().map_err(|e| {
                err("health-listen", "VARROA_HEALTH_LISTEN", a, e.to_string(), "use ip:port, e.g. 0.0.0.0:8081, or off")
            })?),
        };

        let plugin_listen = match self.plugin_listen.trim() {
            "off" | "" => None,
            a => Some(a.parse::<SocketAddr>().map_err(|e| {
                err(
                    "plugin-listen",
                    "VARROA_PLUGIN_LISTEN",
                    a,
                    e.to_string(),
                    "use ip:port on the pod's loopback, e.g. 127.0.0.1:8787, or off",
                )
            })?),
        };
        let token = &self.plugin_token_file;
        if plugin_listen.is_some() && (token.as_os_str().is_empty() || token.file_name().is_none()) {
            return Err(err(
                "plugin-token-file",
                "VARROA_PLUGIN_TOKEN_FILE",
                &token.display().to_string(),
                "not a file path",
                "name a file on a volume the jenkins container also mounts, e.g. /var/run/varroa/plugin/token",
            ));
        }

        Ok(RunSettings {
            namespace,
            controller,
            cell,
            gateway_url,
            gateway_server_name: self.gateway_server_name.clone().filter(|s| !s.is_empty()),
            tls_cert: self.tls_cert.clone(),
            tls_key: self.tls_key.clone(),
            tls_ca: self.tls_ca.clone(),
            jenkins_url,
            jenkins_user: self.jenkins_user.trim().to_string(),
            jenkins_token_file: self.jenkins_token_file.clone(),
            jenkins_timeout: Duration::from_secs(self.jenkins_timeout_seconds),
            casc_dir: self.casc_dir.clone(),
            observe_interval,
            drift_interval,
            initial_backoff: Duration::from_millis(500).min(max_backoff),
            max_backoff,
            health_listen,
            plugin_listen,
            plugin_token_file: self.plugin_token_file.clone(),
        })
    }
}

impl RunArgs {
    /// The trigger inventory's settings (`--inventory-interval`, at least 1 s).
    pub fn inventory_settings(&self) -> crate::inventory::InventorySettings {
        crate::inventory::InventorySettings { interval: Duration::from_secs(self.inventory_interval_seconds.max(1)) }
    }

    /// Validates the claim flags (`--claims`, `--claims-when-ledger-down`) into
    /// [`ClaimSettings`].
    pub fn claim_settings(&self) -> Result<ClaimSettings, SettingsError> {
        let gate = match self.claims.as_deref().map(str::trim) {
            None | Some("" | "off") => false,
            Some("on") => true,
            Some(other) => {
                return Err(err(
                    "claims",
                    ENV_CLAIMS,
                    other,
                    "must be on or off",
                    "use on (the installation has a build record store) or off (Jenkins numbers builds itself)",
                ));
            }
        };
        let when_ledger_down = match self.claims_when_ledger_down.as_deref().map(str::trim) {
            None | Some("") => WhenLedgerDown::default(),
            Some(v) => v.parse::<WhenLedgerDown>().map_err(|reason| {
                err(
                    "claims-when-ledger-down",
                    ENV_WHEN_LEDGER_DOWN,
                    v,
                    reason,
                    "use failClosed (the default: builds wait while the ledger is away) or failOpen (builds run ungated)",
                )
            })?,
        };
        Ok(ClaimSettings { gate, when_ledger_down })
    }
}

/// `https://host:port` from `host:port` or `https://host:port`.
fn gateway_url(endpoint: &str) -> Result<String, String> {
    let e = endpoint.trim().trim_end_matches('/');
    if e.is_empty() {
        return Err("empty".into());
    }
    if e.starts_with("http://") {
        return Err("plain http: the gateway speaks only mutual TLS".into());
    }
    let rest = e.strip_prefix("https://").unwrap_or(e);
    if rest.contains('/') || rest.contains("://") {
        return Err("has a path or another scheme".into());
    }
    let Some((host, port)) = rest.rsplit_once(':') else { return Err("no port".into()) };
    if host.is_empty() {
        return Err("no host".into());
    }
    port.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| format!("port {port:?} is not a port number"))?;
    Ok(format!("https://{rest}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    fn args(extra: &[&str]) -> RunArgs {
        let mut flags = vec![("--namespace", "team-a"), ("--controller", "ci"), ("--gateway-endpoint", "gw.svc:8443")];
        for pair in extra.chunks(2) {
            flags.retain(|(f, _)| *f != pair[0]);
            flags.push((pair[0], pair[1]));
        }
        let v = std::iter::once("x").chain(flags.iter().flat_map(|(f, v)| [*f, *v]));
        Cli::try_parse_from(v).unwrap().run
    }

    #[test]
    fn defaults_and_the_cell_from_the_pod_name() {
        let s = args(&["--pod-name", "ci-2"]).validate().unwrap();
        assert_eq!(s.cell, 2);
        assert_eq!(s.gateway_url, "https://gw.svc:8443");
        assert_eq!(s.tls_cert, PathBuf::from("/var/run/varroa/tls/tls.crt"));
        assert_eq!(s.health_listen, Some("0.0.0.0:8081".parse().unwrap()));
        assert_eq!(s.plugin_listen, Some("127.0.0.1:8787".parse().unwrap()));
        assert_eq!(s.plugin_token_file, PathBuf::from("/var/run/varroa/plugin/token"));
        assert_eq!(args(&["--plugin-listen", "off"]).validate().unwrap().plugin_listen, None);
        assert_eq!(args(&["--pod-name", "ci-2", "--cell", "5"]).validate().unwrap().cell, 5);
        assert_eq!(args(&[]).validate().unwrap().cell, 0);
        assert_eq!(ordinal_of("my-ci-10"), Some(10));
        assert_eq!(ordinal_of("ci-01"), None);
        assert_eq!(ordinal_of("ci"), None);
    }

    #[test]
    fn the_claim_gate_is_off_and_fails_closed_unless_told() {
        assert_eq!(args(&[]).claim_settings().unwrap(), ClaimSettings::default());
        assert_eq!(
            ClaimSettings::default(),
            ClaimSettings { gate: false, when_ledger_down: WhenLedgerDown::FailClosed }
        );
        assert!(!args(&["--claims", "off"]).claim_settings().unwrap().gate);
        let on = args(&["--claims", "on", "--claims-when-ledger-down", "failOpen"]).claim_settings().unwrap();
        assert_eq!(on, ClaimSettings { gate: true, when_ledger_down: WhenLedgerDown::FailOpen });
    }

    #[test]
    fn bad_values_name_the_flag_and_the_fix() {
        let cases: &[(&[&str], &str)] = &[
            (&["--gateway-endpoint", "http://gw:8443"], "--gateway-endpoint (VARROA_GATEWAY_ENDPOINT)"),
            (&["--gateway-endpoint", "gw"], "no port"),
            (&["--namespace", "Team_A"], "--namespace (VARROA_NAMESPACE)"),
            (&["--pod-name", "jenkins"], "--pod-name (POD_NAME)"),
            (&["--cell", "x"], "--cell (VARROA_CELL)"),
            (&["--observe-interval-seconds", "0"], "--observe-interval-seconds"),
            (&["--health-listen", "nope"], "--health-listen"),
            (&["--jenkins-url", "127.0.0.1:8080"], "--jenkins-url"),
            (&["--plugin-listen", "localhost"], "--plugin-listen (VARROA_PLUGIN_LISTEN)"),
            (&["--plugin-token-file", "/"], "--plugin-token-file (VARROA_PLUGIN_TOKEN_FILE)"),
        ];
        for (extra, want) in cases {
            let e = args(extra).validate().unwrap_err().to_string();
            assert!(e.contains(want) && e.contains("fix:"), "{extra:?}: {e}");
        }
        for (extra, want) in [
            (["--claims", "yes"], "--claims (VARROA_CLAIMS) \"yes\": must be on or off"),
            (["--claims-when-ledger-down", "open"], "--claims-when-ledger-down (VARROA_CLAIMS_WHEN_LEDGER_DOWN)"),
        ] {
            let e = args(&extra).claim_settings().unwrap_err().to_string();
            assert!(e.contains(want) && e.contains("fix:"), "{extra:?}: {e}");
        }
        let e = args(&["--claims-when-ledger-down", "open"]).claim_settings().unwrap_err().to_string();
        assert!(e.contains("failClosed") && e.contains("failOpen"), "{e}");
        let missing = Cli::try_parse_from(["x"]).unwrap().run.validate().unwrap_err().to_string();
        assert!(missing.contains("--namespace"), "{missing}");
    }
}
