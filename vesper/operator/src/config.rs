//! The operator's settings (its flags; each also read from the environment). Quantities and CIDR
//! ranges are parsed here, by clap, so a bad value stops the binary at start-up with a message
//! naming the flag and the value, instead of failing every preview later.

use crate::cidr::CidrList;
use k8s_quantity::Quantity;
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
    #[arg(long, env = "VESPER_DEFAULT_CPU_REQUEST", default_value = "100m", value_parser = parse_quantity)]
    pub default_cpu_request: Quantity,
    /// Memory request of a preview container that sets none.
    #[arg(long, env = "VESPER_DEFAULT_MEMORY_REQUEST", default_value = "128Mi", value_parser = parse_quantity)]
    pub default_memory_request: Quantity,
    /// CPU limit of a preview container that sets none.
    #[arg(long, env = "VESPER_DEFAULT_CPU_LIMIT", default_value = "500m", value_parser = parse_quantity)]
    pub default_cpu_limit: Quantity,
    /// Memory limit of a preview container that sets none.
    #[arg(long, env = "VESPER_DEFAULT_MEMORY_LIMIT", default_value = "512Mi", value_parser = parse_quantity)]
    pub default_memory_limit: Quantity,
    /// Largest CPU limit one preview container may have (LimitRange max).
    #[arg(long, env = "VESPER_MAX_CPU_PER_CONTAINER", default_value = "2", value_parser = parse_quantity)]
    pub max_cpu_per_container: Quantity,
    /// Largest memory limit one preview container may have (LimitRange max).
    #[arg(long, env = "VESPER_MAX_MEMORY_PER_CONTAINER", default_value = "2Gi", value_parser = parse_quantity)]
    pub max_memory_per_container: Quantity,
    /// Cap of a preview's CPU quota (limits.cpu), however many replicas it asks for.
    #[arg(long, env = "VESPER_QUOTA_MAX_CPU", default_value = "6", value_parser = parse_quantity)]
    pub quota_max_cpu: Quantity,
    /// Cap of a preview's memory quota (limits.memory).
    #[arg(long, env = "VESPER_QUOTA_MAX_MEMORY", default_value = "12Gi", value_parser = parse_quantity)]
    pub quota_max_memory: Quantity,
    /// Ephemeral-storage request (container writable layer and logs) of a preview container
    /// that sets none.
    #[arg(long, env = "VESPER_DEFAULT_EPHEMERAL_STORAGE_REQUEST", default_value = "64Mi", value_parser = parse_quantity)]
    pub default_ephemeral_storage_request: Quantity,
    /// Ephemeral-storage limit of a preview container that sets none: past it the kubelet evicts
    /// the pod.
    #[arg(long, env = "VESPER_DEFAULT_EPHEMERAL_STORAGE_LIMIT", default_value = "1Gi", value_parser = parse_quantity)]
    pub default_ephemeral_storage_limit: Quantity,
    /// Largest ephemeral-storage limit one preview container may have (LimitRange max).
    #[arg(long, env = "VESPER_MAX_EPHEMERAL_STORAGE_PER_CONTAINER", default_value = "2Gi", value_parser = parse_quantity)]
    pub max_ephemeral_storage_per_container: Quantity,
    /// Cap of a preview's ephemeral-storage quota (requests and limits.ephemeral-storage).
    #[arg(long, env = "VESPER_QUOTA_MAX_EPHEMERAL_STORAGE", default_value = "8Gi", value_parser = parse_quantity)]
    pub quota_max_ephemeral_storage: Quantity,
    /// Size limit of the writable /tmp (an emptyDir) of a preview's pods: past it the kubelet
    /// evicts the pod.
    #[arg(long, env = "VESPER_TMP_SIZE_LIMIT", default_value = "256Mi", value_parser = parse_quantity)]
    pub tmp_size_limit: Quantity,
    /// The cluster's pod ranges (comma-separated CIDRs), denied to previews. Added to the ranges
    /// discovered from `Node.spec.podCIDRs`; set it where nodes do not report them (some CNIs).
    #[arg(long, env = "VESPER_CLUSTER_POD_CIDRS", default_value = "")]
    pub cluster_pod_cidrs: CidrList,
    /// The cluster's Service ranges (comma-separated CIDRs, the API server's
    /// --service-cluster-ip-range), denied to previews.
    #[arg(long, env = "VESPER_CLUSTER_SERVICE_CIDRS", default_value = "")]
    pub cluster_service_cidrs: CidrList,
    /// More CIDRs denied to previews (comma-separated), besides the built-in private, link-local
    /// and metadata ranges and the cluster's own addresses (docs/vesper/security.md).
    #[arg(long, env = "VESPER_DENY_EGRESS_CIDRS", default_value = "")]
    pub deny_egress_cidrs: CidrList,
    /// CIDRs previews may reach although a denied range covers them (comma-separated), e.g. an
    /// internal package mirror, or 169.254.20.10/32 for NodeLocal DNSCache. The addresses of the
    /// nodes and of the API server stay denied inside them.
    #[arg(long, env = "VESPER_ALLOW_EGRESS_CIDRS", default_value = "")]
    pub allow_egress_cidrs: CidrList,
    /// Seconds a rollout may make no progress before the preview is Failed (the Deployment's
    /// progressDeadlineSeconds).
    #[arg(long, env = "VESPER_PROGRESS_DEADLINE_SECONDS", default_value_t = 600)]
    pub progress_deadline_seconds: i32,
    /// How long before expiry a preview reports `ExpiringSoon` and a Warning event.
    #[arg(long, env = "VESPER_EXPIRY_WARNING", default_value = "1h", value_parser = parse_duration)]
    pub expiry_warning: Duration,
    /// Run containers with a read-only root filesystem (with a writable /tmp).
    #[arg(long, env = "VESPER_READ_ONLY_ROOT_FILESYSTEM", default_value_t = true, num_args = 0..=1,
          require_equals = true, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub read_only_root_filesystem: bool,
    /// Where /metrics is served.
    #[arg(long, env = "VESPER_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Where /healthz and /readyz are served (may equal --metrics-addr).
    #[arg(long, env = "VESPER_HEALTH_ADDR", default_value = "0.0.0.0:8081")]
    pub health_addr: SocketAddr,
    /// Elect a leader through a Lease, so that replicas of the operator do not fight.
    #[arg(long, env = "VESPER_LEADER_ELECT", default_value_t = false, num_args = 0..=1,
          require_equals = true, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Namespace of the leader election Lease (the operator's own namespace).
    #[arg(long, env = "VESPER_LEADER_ELECTION_NAMESPACE", default_value = "vesper-system")]
    pub leader_election_namespace: String,
    /// After SIGTERM, how long in-flight reconciles may take before they are cancelled; then the
    /// Lease is released and the process exits 0. Keep it at least 10s below the pod's
    /// terminationGracePeriodSeconds.
    #[arg(long, env = "VESPER_SHUTDOWN_GRACE", default_value = "20s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,
    /// The longest one reconcile of a preview may take; past it the reconcile is stopped, counted
    /// as an error (`timeout`) and retried with backoff.
    #[arg(long, env = "VESPER_RECONCILE_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub reconcile_timeout: Duration,
    /// How many objects are reconciled at once. Each reconcile in flight holds a connection to
    /// the API server (HTTP/1.1) and its buffers: without a bound, a thousand objects created at
    /// once opened about a thousand connections, which then sat in the client's pool.
    #[arg(long, env = "VESPER_MAX_CONCURRENT_RECONCILES", default_value_t = 32,
          value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub max_concurrent_reconciles: u16,
    /// How long connecting to the Kubernetes API may take.
    #[arg(long, env = "VESPER_KUBE_CONNECT_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub kube_connect_timeout: Duration,
    /// How long the Kubernetes API may stay silent in a response before the request fails (watches
    /// carry a bookmark about every minute, so keep it above 60s).
    #[arg(long, env = "VESPER_KUBE_READ_TIMEOUT", default_value = "120s", value_parser = parse_duration)]
    pub kube_read_timeout: Duration,
}

/// A quantity flag: exact, as the API server parses it (`500m`, `1.5Gi`, `1e3`), not negative.
pub fn parse_quantity(s: &str) -> Result<Quantity, String> {
    match k8s_quantity::parse_quantity(s.trim()) {
        Ok(q) if q.is_negative() => Err(format!("{s:?} is negative: use e.g. 500m, 2, 128Mi, 1.5Gi")),
        Ok(q) => Ok(q),
        Err(e) => Err(format!("{s:?} is not a Kubernetes quantity ({e}): use e.g. 500m, 2, 128Mi, 1.5Gi")),
    }
}

/// A default of this file, known to parse.
fn q(s: &str) -> Quantity {
    k8s_quantity::parse_quantity(s).unwrap_or_else(|_| Quantity::zero())
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

impl Config {
    /// The timeouts of every request to the API server.
    pub fn client_timeouts(&self) -> opkit::process::ClientTimeouts {
        opkit::process::ClientTimeouts { connect: self.kube_connect_timeout, read: self.kube_read_timeout }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            preview_domain: None,
            ingress_class: None,
            ingress_namespace: "ingress-nginx".into(),
            tls_secret: None,
            default_cpu_request: q("100m"),
            default_memory_request: q("128Mi"),
            default_cpu_limit: q("500m"),
            default_memory_limit: q("512Mi"),
            max_cpu_per_container: q("2"),
            max_memory_per_container: q("2Gi"),
            quota_max_cpu: q("6"),
            quota_max_memory: q("12Gi"),
            default_ephemeral_storage_request: q("64Mi"),
            default_ephemeral_storage_limit: q("1Gi"),
            max_ephemeral_storage_per_container: q("2Gi"),
            quota_max_ephemeral_storage: q("8Gi"),
            tmp_size_limit: q("256Mi"),
            cluster_pod_cidrs: CidrList::default(),
            cluster_service_cidrs: CidrList::default(),
            deny_egress_cidrs: CidrList::default(),
            allow_egress_cidrs: CidrList::default(),
            progress_deadline_seconds: 600,
            expiry_warning: Duration::from_secs(3600),
            read_only_root_filesystem: true,
            metrics_addr: SocketAddr::from(([0, 0, 0, 0], 8080)),
            health_addr: SocketAddr::from(([0, 0, 0, 0], 8081)),
            leader_elect: false,
            leader_election_namespace: "vesper-system".into(),
            shutdown_grace: Duration::from_secs(20),
            reconcile_timeout: Duration::from_secs(60),
            max_concurrent_reconciles: 32,
            kube_connect_timeout: Duration::from_secs(10),
            kube_read_timeout: Duration::from_secs(120),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Flags {
        #[command(flatten)]
        config: Config,
    }

    fn parse(args: &[&str]) -> Result<Config, String> {
        Flags::try_parse_from(std::iter::once("vesper-operator").chain(args.iter().copied()))
            .map(|f| f.config)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_flag_defaults_are_the_default_config() {
        let cfg = parse(&[]).expect("the defaults parse");
        assert_eq!(format!("{cfg:?}"), format!("{:?}", Config::default()));
    }

    #[test]
    fn quantities_are_exact_and_bad_ones_name_the_flag() {
        let cfg =
            parse(&["--quota-max-cpu=1e3", "--quota-max-memory=2Pi", "--default-cpu-request=100u"]).expect("valid");
        assert_eq!(cfg.quota_max_cpu.value(), 1000);
        assert_eq!(cfg.quota_max_memory.value(), 2 << 50);
        assert_eq!(cfg.default_cpu_request.scaled_value(-6), 100);
        for (flag, bad) in [("--default-memory-limit", "lots"), ("--tmp-size-limit", "1Gb"), ("--quota-max-cpu", "-1")]
        {
            let e = parse(&[&format!("{flag}={bad}")]).expect_err(bad);
            assert!(e.contains(flag) && e.contains(bad), "{e}");
        }
    }

    #[test]
    fn cidr_flags_are_validated() {
        let cfg = parse(&["--allow-egress-cidrs=10.1.0.0/16,fd00:1::/64", "--deny-egress-cidrs="]).expect("valid");
        assert_eq!(cfg.allow_egress_cidrs.to_string(), "10.1.0.0/16,fd00:1::/64");
        assert!(cfg.deny_egress_cidrs.0.is_empty());
        for flag in ["--allow-egress-cidrs", "--deny-egress-cidrs", "--cluster-pod-cidrs", "--cluster-service-cidrs"] {
            let e = parse(&[&format!("{flag}=10.0.0.0/8,10.0.0.0/33")]).expect_err(flag);
            assert!(e.contains(flag) && e.contains("10.0.0.0/33"), "{e}");
        }
    }
}
