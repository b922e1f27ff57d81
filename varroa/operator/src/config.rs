//! The operator's settings (its flags; each also read from the environment).

use std::net::SocketAddr;
use std::time::Duration;

/// Parses `90s`, `5m`, `2h`, `1d` (and a bare number of seconds).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num.parse().map_err(|_| format!("{s:?} is not a duration: write e.g. 90s, 5m, 2h or 1d"))?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86400,
        "ms" => return Ok(Duration::from_millis(n)),
        _ => return Err(format!("{s:?} is not a duration: the unit is one of ms, s, m, h, d")),
    };
    Ok(Duration::from_secs(secs))
}

/// One entry of `--ingress-annotation-allowlist`: an exact annotation key
/// (`nginx.ingress.kubernetes.io/proxy-body-size`), a key prefix ending in `/`
/// (`cert-manager.io/`: every annotation of that prefix), or a prefix ending in `*`
/// (`nginx.ingress.kubernetes.io/proxy-*`). A lone `*` allows everything.
pub fn parse_annotation_rule(s: &str) -> Result<String, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("an empty entry: write an annotation key, a prefix ending in '/' or one ending in '*'".into());
    }
    if t[..t.len() - 1].contains('*') {
        return Err(format!("{t:?}: '*' may only end an entry (a prefix such as nginx.ingress.kubernetes.io/proxy-*)"));
    }
    if t.chars().any(|c| c.is_whitespace() || c == ',') {
        return Err(format!("{t:?} is not an annotation key or prefix"));
    }
    Ok(t.to_string())
}

/// Whether an annotation `key` passes the allow-list `rules` (see [`parse_annotation_rule`]).
pub fn annotation_allowed(rules: &[String], key: &str) -> bool {
    rules.iter().any(|r| match r.strip_suffix('*') {
        Some(prefix) => key.starts_with(prefix),
        None if r.ends_with('/') => key.starts_with(r.as_str()),
        None => key == r,
    })
}

#[derive(Debug, Clone, clap::Args)]
pub struct Config {
    /// The mite sidecar's image.
    #[arg(long, env = "VARROA_MITE_IMAGE", default_value = "ghcr.io/eventide/varroa-mite:0.1.0")]
    pub mite_image: String,
    /// The image of the plugins-init step (installs and verifies the locked plugins); the mite
    /// image by default.
    #[arg(long, env = "VARROA_PLUGINS_INIT_IMAGE")]
    pub plugins_init_image: Option<String>,
    /// Where plugins come from when a controller declares no UpdateCenter.
    #[arg(long, env = "VARROA_DEFAULT_UPDATE_SITE", default_value = "https://updates.jenkins.io")]
    pub default_update_site: String,
    /// The gateway the mites dial (host:port). Changing it rolls every controller's pod.
    #[arg(long, env = "VARROA_GATEWAY_ENDPOINT", default_value = "varroa-gateway.varroa-system.svc:8443")]
    pub gateway_endpoint: String,
    /// The Secret (`namespace/name`, keys tls.crt and tls.key) holding the gateway CA that issues
    /// the mites' client certificates. Changing the CA rolls every controller's pod.
    #[arg(long, env = "VARROA_GATEWAY_CA_SECRET", default_value = "varroa-system/varroa-gateway-ca")]
    pub gateway_ca_secret: String,
    /// Validity of a mite's client certificate.
    #[arg(long, env = "VARROA_MITE_CERT_VALIDITY", default_value = "30d", value_parser = parse_duration)]
    pub mite_cert_validity: Duration,
    /// Renew a mite's certificate this long before it expires.
    #[arg(long, env = "VARROA_MITE_CERT_RENEW_BEFORE", default_value = "10d", value_parser = parse_duration)]
    pub mite_cert_renew_before: Duration,
    /// The NATS server(s) of the control link (`nats://host:4222`, comma-separated). Without it
    /// the control link is off: no mite state is read, no desired configuration is handed over,
    /// and running controllers stop at `Running`.
    #[arg(long, env = "VARROA_NATS_URL")]
    pub nats_url: Option<String>,
    /// A file with the operator's NATS user and password (`user=...` and `password=...` lines),
    /// read again on every reconnect, so a rotated password needs no restart.
    #[arg(long, env = "VARROA_NATS_CREDENTIALS_FILE")]
    pub nats_credentials_file: Option<std::path::PathBuf>,
    /// JetStream replicas of the varroa_mites and varroa_desired buckets, when the operator is
    /// the first to create them (3 for the three-node NATS install).
    #[arg(long, env = "VARROA_NATS_BUCKET_REPLICAS", default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(1..=5))]
    pub nats_bucket_replicas: u64,
    /// The cluster's name in activity subjects (`activity.<cluster>.<ns>.<ctrl>`, where the
    /// operator publishes lifecycle activity when `--nats-url` is set); a DNS-1123 label,
    /// checked at start-up.
    #[arg(long, env = "VARROA_CLUSTER", default_value = "local")]
    pub cluster: String,
    /// The installation runs varroa-recorder and PostgreSQL (the build record store), so build
    /// claims are on: every mite is started with `VARROA_CLAIMS=on` and a queued build asks the
    /// ledger for its number (what a controller does while the ledger is away is its
    /// `claims.whenLedgerDown`). Off (the default): `VARROA_CLAIMS=off`, Jenkins numbers builds
    /// itself. Changing it rolls every controller's pod.
    #[arg(long, env = "VARROA_BUILD_RECORDS", default_value_t = false, num_args = 0..=1,
          require_equals = true, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub build_records: bool,
    /// A mite whose last heartbeat (written by the gateway every 10s by default) is older than
    /// this counts as lost: its controller shows `Mite unreachable`.
    #[arg(long, env = "VARROA_MITE_HEARTBEAT_TIMEOUT", default_value = "45s", value_parser = parse_duration)]
    pub mite_heartbeat_timeout: Duration,
    /// How often every controller is reconciled even when nothing changed.
    #[arg(long, env = "VARROA_RESYNC_INTERVAL", default_value = "5m", value_parser = parse_duration)]
    pub resync_interval: Duration,
    /// The granularity of status.lastReconciledAt: a clean pass writes the stamp when the stored
    /// one is older than this (so a steady controller costs one status write per interval, and
    /// a no-op pass within it writes nothing).
    #[arg(long, env = "VARROA_STAMP_INTERVAL", default_value = "5m", value_parser = parse_duration)]
    pub stamp_interval: Duration,
    /// How long a Failed controller waits before the operator tries again.
    #[arg(long, env = "VARROA_FAILED_DWELL", default_value = "2m", value_parser = parse_duration)]
    pub failed_dwell: Duration,
    /// Default grace period of an unready cell (controllers with cells above 1) before it is
    /// replaced, when the controller sets none.
    #[arg(long, env = "VARROA_CELL_UNREADY_GRACE", default_value = "10m", value_parser = parse_duration)]
    pub cell_unready_grace: Duration,
    /// Address of /healthz, /readyz and /metrics.
    #[arg(long, env = "VARROA_HEALTH_ADDR", default_value = "0.0.0.0:8081")]
    pub health_addr: SocketAddr,
    /// Elect a leader through a Lease, so that several replicas can run (one reconciles).
    #[arg(long, env = "VARROA_LEADER_ELECT", default_value_t = false, num_args = 0..=1,
          require_equals = true, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Namespace of the leader Lease.
    #[arg(long, env = "VARROA_LEADER_ELECTION_NAMESPACE", default_value = "varroa-system")]
    pub leader_election_namespace: String,
    /// After SIGTERM, how long in-flight reconciles may take before they are cancelled; then the
    /// Lease is released and the process exits 0. Keep it at least 10s below the pod's
    /// terminationGracePeriodSeconds.
    #[arg(long, env = "VARROA_SHUTDOWN_GRACE", default_value = "20s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,
    /// The longest one reconcile of a controller may take; past it the reconcile is stopped,
    /// counted as an error (`timeout`) and retried with backoff. Keep it above --fetch-timeout.
    #[arg(long, env = "VARROA_RECONCILE_TIMEOUT", default_value = "120s", value_parser = parse_duration)]
    pub reconcile_timeout: Duration,
    /// How many objects are reconciled at once. Each reconcile in flight holds a connection to
    /// the API server (HTTP/1.1) and its buffers: without a bound, a thousand objects created at
    /// once opened about a thousand connections, which then sat in the client's pool.
    #[arg(long, env = "VARROA_MAX_CONCURRENT_RECONCILES", default_value_t = 32,
          value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub max_concurrent_reconciles: u16,
    /// How long connecting to the Kubernetes API may take.
    #[arg(long, env = "VARROA_KUBE_CONNECT_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub kube_connect_timeout: Duration,
    /// How long the Kubernetes API may stay silent in a response before the request fails (watches
    /// carry a bookmark about every minute, so keep it above 60s).
    #[arg(long, env = "VARROA_KUBE_READ_TIMEOUT", default_value = "120s", value_parser = parse_duration)]
    pub kube_read_timeout: Duration,
    /// The most bytes one Git or OCI bundle input may bring (its files, and the transfer that
    /// brings them); a transfer that passes it is stopped. Default 64 MiB.
    #[arg(long, env = "VARROA_FETCH_MAX_BYTES", default_value_t = varroa_sources::DEFAULT_MAX_BYTES,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub fetch_max_bytes: u64,
    /// The longest one fetch of a bundle input may take; at the limit the transfer is stopped
    /// and its connection closed.
    #[arg(long, env = "VARROA_FETCH_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub fetch_timeout: Duration,
    /// Fetch bundle inputs from any host, including loopback, link-local, the metadata service,
    /// the API server and the operator's own file system (file:// URLs). For development only.
    #[arg(long, env = "VARROA_FETCH_ALLOW_PRIVATE_HOSTS", default_value_t = false, num_args = 0..=1,
          require_equals = true, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub fetch_allow_private_hosts: bool,
    /// Hosts (`name`, `address`, or either with `:port`, as written in inputs) that bundle inputs
    /// may be fetched from even though they resolve to a refused address. Comma-separated.
    #[arg(long, env = "VARROA_FETCH_ALLOWED_HOSTS", value_delimiter = ',')]
    pub fetch_allowed_hosts: Vec<String>,
    /// Addresses or CIDR ranges bundle inputs may never be fetched from, besides loopback,
    /// link-local, metadata and unspecified ones: the Kubernetes API server's endpoints. The
    /// address of the API server the operator talks to is added on its own. Comma-separated.
    #[arg(long, env = "VARROA_FETCH_DENIED_ADDRESSES", value_delimiter = ',',
          value_parser = clap::value_parser!(varroa_sources::AddressRange))]
    pub fetch_denied_addresses: Vec<varroa_sources::AddressRange>,
    /// Annotations a Controller's settings may put on its Ingress (they configure the ingress
    /// controller, which may run snippets with its own rights): exact keys, prefixes ending in
    /// `/`, or prefixes ending in `*`. Comma-separated; empty (the default): none pass. Others
    /// are left out of the Ingress and logged.
    #[arg(long, env = "VARROA_INGRESS_ANNOTATION_ALLOWLIST", value_delimiter = ',',
          value_parser = parse_annotation_rule)]
    pub ingress_annotation_allowlist: Vec<String>,
}

impl Config {
    /// The image of plugins-init.
    pub fn plugins_init_image(&self) -> &str {
        self.plugins_init_image.as_deref().unwrap_or(&self.mite_image)
    }

    /// Checks the flags together, before anything connects: each error names the flag and the
    /// fix (clap has checked each flag's own syntax).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let label = |flag: &'static str, value: &str| {
            crate::activity::check_cluster(value).map_err(|e| ConfigError { flag, message: e.to_string() })
        };
        label("--cluster", &self.cluster)?;
        let (ns, name) = self.gateway_ca();
        label("--gateway-ca-secret", &ns)?;
        if !is_dns1123_subdomain(&name) {
            return Err(ConfigError {
                flag: "--gateway-ca-secret",
                message: format!(
                    "{name:?} is not a Secret name (lowercase letters, digits, '-' and '.', at most 253): write NAMESPACE/NAME"
                ),
            });
        }
        if self.leader_elect {
            label("--leader-election-namespace", &self.leader_election_namespace)?;
        }
        if self.mite_cert_renew_before >= self.mite_cert_validity {
            return Err(ConfigError {
                flag: "--mite-cert-renew-before",
                message: format!(
                    "{} is not shorter than --mite-cert-validity ({}): every certificate would be renewed at once, on every pass; make it shorter",
                    exact(self.mite_cert_renew_before),
                    exact(self.mite_cert_validity)
                ),
            });
        }
        let positive = [
            ("--mite-cert-validity", self.mite_cert_validity),
            ("--mite-heartbeat-timeout", self.mite_heartbeat_timeout),
            ("--resync-interval", self.resync_interval),
            ("--stamp-interval", self.stamp_interval),
            ("--reconcile-timeout", self.reconcile_timeout),
            ("--kube-connect-timeout", self.kube_connect_timeout),
            ("--kube-read-timeout", self.kube_read_timeout),
            ("--fetch-timeout", self.fetch_timeout),
        ];
        if let Some((flag, _)) = positive.iter().find(|(_, d)| d.is_zero()) {
            return Err(ConfigError { flag, message: "0 is not allowed: give a duration such as 30s".into() });
        }
        if self.gateway_endpoint.trim().is_empty() {
            return Err(ConfigError { flag: "--gateway-endpoint", message: "empty: give host:port".into() });
        }
        if self.nats_url.as_deref().is_some_and(|u| u.trim().is_empty()) {
            return Err(ConfigError {
                flag: "--nats-url",
                message: "empty: give nats://host:4222, or leave it out to run without a gateway".into(),
            });
        }
        Ok(())
    }

    /// The gateway CA Secret's namespace and name.
    pub fn gateway_ca(&self) -> (String, String) {
        match self.gateway_ca_secret.split_once('/') {
            Some((ns, n)) => (ns.to_string(), n.to_string()),
            None => ("varroa-system".to_string(), self.gateway_ca_secret.clone()),
        }
    }

    /// The timeouts of every request to the API server.
    pub fn client_timeouts(&self) -> opkit::process::ClientTimeouts {
        opkit::process::ClientTimeouts { connect: self.kube_connect_timeout, read: self.kube_read_timeout }
    }

    /// How bundle inputs are fetched: the limits of the `--fetch-*` flags.
    pub fn fetch_options(&self) -> varroa_sources::FetchOptions {
        varroa_sources::FetchOptions {
            max_bytes: self.fetch_max_bytes,
            timeout: self.fetch_timeout,
            allow_private_hosts: self.fetch_allow_private_hosts,
            allowed_hosts: self.fetch_allowed_hosts.clone(),
            denied_addresses: self.fetch_denied_addresses.clone(),
            ..varroa_sources::FetchOptions::default()
        }
    }

    /// Defaults, for tests and the library.
    pub fn for_tests() -> Config {
        Config {
            mite_image: "ghcr.io/eventide/varroa-mite:test".into(),
            plugins_init_image: Some("ghcr.io/eventide/varroa-plugins-init:test".into()),
            default_update_site: "https://updates.jenkins.io".into(),
            gateway_endpoint: "varroa-gateway.varroa-system.svc:8443".into(),
            gateway_ca_secret: "varroa-system/varroa-gateway-ca".into(),
            mite_cert_validity: Duration::from_secs(30 * 86400),
            mite_cert_renew_before: Duration::from_secs(10 * 86400),
            nats_url: None,
            nats_credentials_file: None,
            nats_bucket_replicas: 1,
            cluster: "local".into(),
            build_records: false,
            mite_heartbeat_timeout: Duration::from_secs(45),
            resync_interval: Duration::from_secs(300),
            stamp_interval: Duration::from_secs(300),
            failed_dwell: Duration::from_secs(120),
            cell_unready_grace: Duration::from_secs(600),
            health_addr: "127.0.0.1:0".parse().unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 0))),
            leader_elect: false,
            leader_election_namespace: "varroa-system".into(),
            shutdown_grace: Duration::from_secs(20),
            reconcile_timeout: Duration::from_secs(120),
            max_concurrent_reconciles: 32,
            kube_connect_timeout: Duration::from_secs(10),
            kube_read_timeout: Duration::from_secs(120),
            fetch_max_bytes: varroa_sources::DEFAULT_MAX_BYTES,
            fetch_timeout: varroa_sources::DEFAULT_TIMEOUT,
            fetch_allow_private_hosts: false,
            fetch_allowed_hosts: Vec::new(),
            fetch_denied_addresses: Vec::new(),
            ingress_annotation_allowlist: Vec::new(),
        }
    }
}

/// A flag the operator cannot run with, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{flag}: {message}")]
pub struct ConfigError {
    /// The flag.
    pub flag: &'static str,
    /// What is wrong and the fix.
    pub message: String,
}

/// A duration as the flags take it: `7d`, `1d2h`, `90s`, `0s`.
fn exact(d: Duration) -> String {
    let s = d.as_secs();
    if s == 0 {
        return format!("{}ms", d.as_millis());
    }
    let parts = [(s / 86400, "d"), (s % 86400 / 3600, "h"), (s % 3600 / 60, "m"), (s % 60, "s")];
    parts.iter().filter(|(n, _)| *n > 0).map(|(n, u)| format!("{n}{u}")).collect()
}

/// A DNS-1123 subdomain (a Secret's name): lowercase alphanumerics, `-` and `.`, starting and
/// ending alphanumeric, at most 253.
fn is_dns1123_subdomain(s: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !s.is_empty()
        && s.len() <= 253
        && s.bytes().all(|b| alnum(b) || b == b'-' || b == b'.')
        && s.bytes().next().is_some_and(alnum)
        && s.bytes().last().is_some_and(alnum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_checked_together_naming_the_flag() {
        assert_eq!(Config::for_tests().validate(), Ok(()));
        let err = |f: fn(&mut Config)| {
            let mut c = Config::for_tests();
            f(&mut c);
            c.validate().unwrap_err()
        };
        assert_eq!(err(|c| c.cluster = "prod.eu".into()).flag, "--cluster");
        assert_eq!(err(|c| c.gateway_ca_secret = "Varroa/ca".into()).flag, "--gateway-ca-secret");
        let e = err(|c| c.gateway_ca_secret = "varroa-system/CA_1".into());
        assert!(e.to_string().starts_with("--gateway-ca-secret: \"CA_1\" is not a Secret name"), "{e}");
        let e = err(|c| c.mite_cert_renew_before = c.mite_cert_validity);
        assert_eq!(e.flag, "--mite-cert-renew-before", "{e}");
        assert!(e.message.starts_with("30d is not shorter than --mite-cert-validity (30d)"), "{e}");
        assert_eq!(err(|c| c.resync_interval = Duration::ZERO).flag, "--resync-interval");
        assert_eq!(err(|c| c.nats_url = Some(" ".into())).flag, "--nats-url");
        assert_eq!(err(|c| c.gateway_endpoint = String::new()).flag, "--gateway-endpoint");
        assert_eq!(
            err(|c| {
                c.leader_elect = true;
                c.leader_election_namespace = "Bad_NS".into();
            })
            .flag,
            "--leader-election-namespace"
        );
        let mut c = Config::for_tests();
        c.gateway_ca_secret = "my-ca.example".into();
        assert_eq!(c.validate(), Ok(()), "a bare name is in varroa-system");
    }

    #[test]
    fn switches_are_bare_or_take_a_value() {
        use clap::Parser;
        let parse = |args: &[&str]| {
            Flags::try_parse_from(args).map(|f| (f.config.leader_elect, f.config.fetch_allow_private_hosts))
        };
        assert_eq!(parse(&["op"]).ok(), Some((false, false)));
        assert_eq!(parse(&["op", "--leader-elect", "--fetch-allow-private-hosts"]).ok(), Some((true, true)));
        assert_eq!(
            parse(&["op", "--leader-elect=true", "--fetch-allow-private-hosts=false"]).ok(),
            Some((true, false))
        );
        assert_eq!(parse(&["op", "--leader-elect=false"]).ok(), Some((false, false)));
        // A switch never takes the next argument (it could be `run`, or a flag's value).
        assert!(parse(&["op", "--leader-elect", "false"]).is_err(), "--leader-elect=false, not --leader-elect false");
        assert!(parse(&["op", "--leader-elect=maybe"]).is_err());
    }

    #[test]
    fn annotation_rules_are_exact_keys_or_prefixes() {
        let rules: Vec<String> = ["cert-manager.io/", "nginx.ingress.kubernetes.io/proxy-*", "example.com/exact"]
            .iter()
            .map(|r| parse_annotation_rule(r).expect("valid"))
            .collect();
        assert!(annotation_allowed(&rules, "cert-manager.io/cluster-issuer"));
        assert!(annotation_allowed(&rules, "nginx.ingress.kubernetes.io/proxy-body-size"));
        assert!(!annotation_allowed(&rules, "nginx.ingress.kubernetes.io/server-snippet"));
        assert!(annotation_allowed(&rules, "example.com/exact"));
        assert!(!annotation_allowed(&rules, "example.com/exactly"));
        assert!(!annotation_allowed(&[], "cert-manager.io/cluster-issuer"), "empty by default: nothing passes");
        assert!(annotation_allowed(&["*".to_string()], "anything/at-all"));
        assert!(parse_annotation_rule("").is_err());
        assert!(parse_annotation_rule("a*b").unwrap_err().contains("may only end"));
    }

    #[derive(clap::Parser)]
    struct Flags {
        #[command(flatten)]
        config: Config,
    }

    fn build_records(args: &[&str]) -> Result<bool, clap::Error> {
        use clap::Parser;
        Flags::try_parse_from(std::iter::once("varroa-operator").chain(args.iter().copied()))
            .map(|f| f.config.build_records)
    }

    #[test]
    fn build_records_is_off_unless_asked_for() {
        assert!(!build_records(&[]).expect("parses"));
        assert!(build_records(&["--build-records"]).expect("the bare flag"));
        assert!(build_records(&["--build-records=true"]).expect("parses"));
        assert!(!build_records(&["--build-records=false"]).expect("parses"));
        assert!(build_records(&["--build-records=yes"]).is_err(), "true or false only");
    }
}
