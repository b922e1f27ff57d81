//! The operator's settings (its flags; each also read from the environment).

use std::net::SocketAddr;
use std::time::Duration;

#[derive(Debug, Clone, clap::Args)]
pub struct Config {
    /// Serve previews at `https://<name>-<namespace>-<hash>.<DOMAIN>` through an Ingress.
    /// Without it, no Ingress is made and previews have no URL.
    #[arg(long, env = "VESPER_PREVIEW_DOMAIN")]
    pub preview_domain: Option<String>,
    /// IngressClass of the previews' Ingresses (the cluster's default class when unset).
    #[arg(long, env = "VESPER_INGRESS_CLASS")]
    pub ingress_class: Option<String>,
    /// Namespace of the ingress controller: the only namespace (besides the preview itself) from
    /// which a preview's pods accept connections.
    #[arg(long, env = "VESPER_INGRESS_NAMESPACE", default_value = "ingress-nginx")]
    pub ingress_namespace: String,
    /// TLS Secret (in each preview namespace, e.g. a wildcard certificate replicated there) for
    /// the Ingress; without it the ingress controller's default certificate serves.
    #[arg(long, env = "VESPER_TLS_SECRET")]
    pub tls_secret: Option<String>,
    /// CPU request of a preview container that sets none.
    #[arg(long, env = "VESPER_DEFAULT_CPU_REQUEST", default_value = "100m")]
    pub default_cpu_request: String,
    /// Memory request of a preview container that sets none.
    #[arg(long, env = "VESPER_DEFAULT_MEMORY_REQUEST", default_value = "128Mi")]
    pub default_memory_request: String,
    /// CPU limit of a preview container that sets none.
    #[arg(long, env = "VESPER_DEFAULT_CPU_LIMIT", default_value = "500m")]
    pub default_cpu_limit: String,
    /// Memory limit of a preview container that sets none.
    #[arg(long, env = "VESPER_DEFAULT_MEMORY_LIMIT", default_value = "512Mi")]
    pub default_memory_limit: String,
    /// Largest CPU limit one preview container may have (LimitRange max).
    #[arg(long, env = "VESPER_MAX_CPU_PER_CONTAINER", default_value = "2")]
    pub max_cpu_per_container: String,
    /// Largest memory limit one preview container may have (LimitRange max).
    #[arg(long, env = "VESPER_MAX_MEMORY_PER_CONTAINER", default_value = "2Gi")]
    pub max_memory_per_container: String,
    /// Cap of a preview's CPU quota (limits.cpu), however many replicas it asks for.
    #[arg(long, env = "VESPER_QUOTA_MAX_CPU", default_value = "6")]
    pub quota_max_cpu: String,
    /// Cap of a preview's memory quota (limits.memory).
    #[arg(long, env = "VESPER_QUOTA_MAX_MEMORY", default_value = "12Gi")]
    pub quota_max_memory: String,
    /// CIDRs denied to previews besides the cluster's node and API server addresses
    /// (comma-separated). The cloud metadata address by default; on clouds where it also serves
    /// DNS, set this to "" and rely on other controls.
    #[arg(long, env = "VESPER_DENY_EGRESS_CIDRS", value_delimiter = ',', default_value = "169.254.169.254/32")]
    pub deny_egress_cidrs: Vec<String>,
    /// Seconds a rollout may make no progress before the preview is Failed (the Deployment's
    /// progressDeadlineSeconds).
    #[arg(long, env = "VESPER_PROGRESS_DEADLINE_SECONDS", default_value_t = 600)]
    pub progress_deadline_seconds: i32,
    /// How long before expiry a preview reports `ExpiringSoon` and a Warning event.
    #[arg(long, env = "VESPER_EXPIRY_WARNING", default_value = "1h", value_parser = parse_duration)]
    pub expiry_warning: Duration,
    /// Run containers with a read-only root filesystem (with a writable /tmp).
    #[arg(long, env = "VESPER_READ_ONLY_ROOT_FILESYSTEM", default_value_t = true, action = clap::ArgAction::Set)]
    pub read_only_root_filesystem: bool,
    /// Where /metrics is served.
    #[arg(long, env = "VESPER_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Where /healthz and /readyz are served (may equal --metrics-addr).
    #[arg(long, env = "VESPER_HEALTH_ADDR", default_value = "0.0.0.0:8081")]
    pub health_addr: SocketAddr,
    /// Elect a leader through a Lease, so that replicas of the operator do not fight.
    #[arg(long, env = "VESPER_LEADER_ELECT", default_value_t = false)]
    pub leader_elect: bool,
    /// Namespace of the leader election Lease (the operator's own namespace).
    #[arg(long, env = "VESPER_LEADER_ELECTION_NAMESPACE", default_value = "vesper-system")]
    pub leader_election_namespace: String,
}

/// `90s`, `30m`, `1h`, `1d`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let unit = s.chars().last().ok_or("an empty duration: use e.g. 30m, 1h")?;
    let n: u64 = s[..s.len() - unit.len_utf8()].parse().map_err(|_| format!("{s:?}: use e.g. 90s, 30m, 1h, 1d"))?;
    let secs = match unit {
        's' => n,
        'm' => n * 60,
        'h' => n * 3600,
        'd' => n * 86400,
        _ => return Err(format!("{s:?}: use e.g. 90s, 30m, 1h, 1d")),
    };
    Ok(Duration::from_secs(secs))
}

impl Default for Config {
    fn default() -> Self {
        Config {
            preview_domain: None,
            ingress_class: None,
            ingress_namespace: "ingress-nginx".into(),
            tls_secret: None,
            default_cpu_request: "100m".into(),
            default_memory_request: "128Mi".into(),
            default_cpu_limit: "500m".into(),
            default_memory_limit: "512Mi".into(),
            max_cpu_per_container: "2".into(),
            max_memory_per_container: "2Gi".into(),
            quota_max_cpu: "6".into(),
            quota_max_memory: "12Gi".into(),
            deny_egress_cidrs: vec!["169.254.169.254/32".into()],
            progress_deadline_seconds: 600,
            expiry_warning: Duration::from_secs(3600),
            read_only_root_filesystem: true,
            metrics_addr: SocketAddr::from(([0, 0, 0, 0], 8080)),
            health_addr: SocketAddr::from(([0, 0, 0, 0], 8081)),
            leader_elect: false,
            leader_election_namespace: "vesper-system".into(),
        }
    }
}
