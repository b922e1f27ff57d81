//! The preview namespace's NetworkPolicy. Pods of the preview accept connections only from
//! each other and from the ingress controller's namespace. They may connect to each other, to
//! DNS (port 53, UDP and TCP, of the kube-dns pods in kube-system), and to the public internet:
//! `0.0.0.0/0` and `::/0` except
//!
//! - the private and special ranges of [`PRIVATE_RANGES`]: RFC 1918 (10/8, 172.16/12,
//!   192.168/16), carrier-grade NAT (100.64/10), link-local (169.254/16, fe80::/10, where the
//!   cloud metadata services answer), IPv6 unique local (fc00::/7), and the metadata addresses
//!   themselves ([`METADATA`]: 169.254.169.254, fd00:ec2::254);
//! - the cluster's own ranges and addresses: its pod ranges (`--cluster-pod-cidrs` and every
//!   node's `spec.podCIDRs`), its Service ranges (`--cluster-service-cidrs`), every node
//!   address and every API server address (hostaddresses.rs);
//! - the ranges of `--deny-egress-cidrs`.
//!
//! `--allow-egress-cidrs` opens ranges back: each one is an egress rule of its own (rules add
//! up, so it is reachable whatever the first rule's `except` says), with its own `except`: the
//! cluster's ranges and addresses, the metadata addresses and `--deny-egress-cidrs` entries that
//! lie strictly inside it stay denied. Only the generic private ranges are reopened.
//!
//! An `except` entry must be a strict subset of its `cidr` (the API server refuses the policy
//! otherwise), so each family has its own peer and an entry covered by another is left out (a
//! node's InternalIP inside 10/8 adds nothing, and its churn rewrites no policy).
//!
//! What it does not stop (see docs/vesper/security.md): traffic to and from the pod's own node
//! is always allowed by NetworkPolicy; whether a Service IP such as `kubernetes.default` is
//! matched by `ipBlock` depends on the CNI (kube-proxy rewrites it before some CNIs look); and
//! none of it is enforced without a CNI that enforces NetworkPolicies.

use crate::cidr::Cidr;
use crate::config::Config;
use crate::hostaddresses::ClusterAddresses;
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::{BTreeMap, BTreeSet};
use vesper_api::PreviewEnvironment;

pub const NAME: &str = "preview-isolation";

/// Ranges no preview reaches unless `--allow-egress-cidrs` opens them.
pub const PRIVATE_RANGES: [&str; 7] =
    ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16", "fe80::/10", "fc00::/7"];

/// The cloud metadata addresses (AWS, GCP, Azure, OpenStack: 169.254.169.254; AWS over IPv6:
/// fd00:ec2::254). Denied inside allowed ranges too, unless one is allowed exactly.
pub const METADATA: [&str; 2] = ["169.254.169.254/32", "fd00:ec2::254/128"];

fn ns_selector(ns: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some(BTreeMap::from([("kubernetes.io/metadata.name".to_string(), ns.to_string())])),
        ..Default::default()
    }
}

fn everything() -> LabelSelector {
    LabelSelector::default()
}

fn parsed(list: &[&str]) -> impl Iterator<Item = Cidr> {
    list.iter().filter_map(|c| c.parse().ok())
}

/// What stays denied even inside an allowed range: the cluster's own ranges and addresses, the
/// metadata addresses, and `--deny-egress-cidrs`.
fn always_denied(cfg: &Config, cluster: &ClusterAddresses) -> BTreeSet<Cidr> {
    let mut out: BTreeSet<Cidr> = cluster.hosts.iter().copied().map(Cidr::host).collect();
    out.extend(cluster.pod_cidrs.iter().copied());
    out.extend(cfg.cluster_pod_cidrs.iter().copied());
    out.extend(cfg.cluster_service_cidrs.iter().copied());
    out.extend(cfg.deny_egress_cidrs.iter().copied());
    out.extend(parsed(&METADATA));
    out
}

/// The ranges of `within` strictly inside `outer`, leaving out those covered by another one,
/// sorted by address.
fn except_within(outer: &Cidr, within: &BTreeSet<Cidr>) -> Vec<String> {
    let inside: Vec<&Cidr> = within.iter().filter(|c| outer.strictly_contains(c)).collect();
    inside.iter().filter(|c| !inside.iter().any(|o| o != *c && o.contains(c))).map(|c| c.to_string()).collect()
}

fn block(cidr: &Cidr, except: Vec<String>) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        ip_block: Some(IPBlock { cidr: cidr.to_string(), except: if except.is_empty() { None } else { Some(except) } }),
        ..Default::default()
    }
}

pub fn network_policy(
    pe: &PreviewEnvironment,
    cfg: &Config,
    namespace: &str,
    cluster: &ClusterAddresses,
) -> NetworkPolicy {
    let mut ingress = vec![NetworkPolicyIngressRule {
        from: Some(vec![NetworkPolicyPeer { pod_selector: Some(everything()), ..Default::default() }]),
        ..Default::default()
    }];
    if !cfg.ingress_namespace.is_empty() {
        ingress.push(NetworkPolicyIngressRule {
            from: Some(vec![NetworkPolicyPeer {
                namespace_selector: Some(ns_selector(&cfg.ingress_namespace)),
                ..Default::default()
            }]),
            ..Default::default()
        });
    }
    let dns_port = |proto: &str| NetworkPolicyPort {
        protocol: Some(proto.into()),
        port: Some(IntOrString::Int(53)),
        ..Default::default()
    };
    // The public internet, one peer per family; a family denied whole (a `/0` in
    // --deny-egress-cidrs) has none.
    let fixed = always_denied(cfg, cluster);
    let mut denied = fixed.clone();
    denied.extend(parsed(&PRIVATE_RANGES));
    let mut world = vec![];
    for all in ["0.0.0.0/0", "::/0"].iter().filter_map(|c| c.parse::<Cidr>().ok()) {
        if denied.iter().any(|d| d.contains(&all)) {
            continue;
        }
        world.push(block(&all, except_within(&all, &denied)));
    }
    let mut egress = vec![
        NetworkPolicyEgressRule {
            to: Some(vec![NetworkPolicyPeer { pod_selector: Some(everything()), ..Default::default() }]),
            ..Default::default()
        },
        NetworkPolicyEgressRule {
            to: Some(vec![NetworkPolicyPeer {
                namespace_selector: Some(ns_selector("kube-system")),
                pod_selector: Some(LabelSelector {
                    match_labels: Some(BTreeMap::from([("k8s-app".to_string(), "kube-dns".to_string())])),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ports: Some(vec![dns_port("UDP"), dns_port("TCP")]),
        },
    ];
    if !world.is_empty() {
        egress.push(NetworkPolicyEgressRule { to: Some(world), ..Default::default() });
    }
    // The allowed ranges, each a rule of its own; one strictly inside an always-denied range
    // (a pod range, say) opens nothing and is left out.
    for allowed in cfg.allow_egress_cidrs.iter() {
        if fixed.iter().any(|d| d.strictly_contains(allowed)) {
            continue;
        }
        egress.push(NetworkPolicyEgressRule {
            to: Some(vec![block(allowed, except_within(allowed, &fixed))]),
            ..Default::default()
        });
    }
    NetworkPolicy {
        metadata: crate::meta::object_meta(pe, namespace, NAME),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(everything()),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ingress: Some(ingress),
            egress: Some(egress),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cidr::CidrList;
    use serde_json::{Value, json};

    fn pe() -> PreviewEnvironment {
        serde_json::from_value(json!({"apiVersion": "vesper.eventide.dev/v1alpha1", "kind": "PreviewEnvironment",
            "metadata": {"name": "pr-1", "namespace": "team-a", "uid": "u"}, "spec": {"image": "app:v1"}}))
        .expect("a preview")
    }

    fn cluster() -> ClusterAddresses {
        ClusterAddresses {
            hosts: ["10.0.0.1", "203.0.113.1", "fd00::1", "2001:db8::1"]
                .iter()
                .filter_map(|s| s.parse().ok())
                .collect(),
            pod_cidrs: ["10.244.0.0/24", "10.244.1.0/24", "fd00:10:244::/64"]
                .iter()
                .filter_map(|s| s.parse().ok())
                .collect(),
        }
    }

    fn list(s: &str) -> CidrList {
        s.parse().unwrap_or_else(|e| panic!("{e}"))
    }

    fn policy(cfg: &Config) -> Value {
        serde_json::to_value(network_policy(&pe(), cfg, "ns", &cluster())).expect("json")
    }

    #[test]
    fn the_default_policy_exactly() {
        let v = policy(&Config::default());
        assert_eq!(v["metadata"]["name"], NAME);
        assert_eq!(
            v["spec"],
            json!({
                "podSelector": {},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [
                    {"from": [{"podSelector": {}}]},
                    {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}]},
                ],
                "egress": [
                    {"to": [{"podSelector": {}}]},
                    {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                             "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
                     "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
                    {"to": [
                        {"ipBlock": {"cidr": "0.0.0.0/0", "except": [
                            "10.0.0.0/8", "100.64.0.0/10", "169.254.0.0/16", "172.16.0.0/12", "192.168.0.0/16",
                            "203.0.113.1/32"]}},
                        {"ipBlock": {"cidr": "::/0", "except": ["2001:db8::1/128", "fc00::/7", "fe80::/10"]}},
                    ]},
                ],
            })
        );
    }

    #[test]
    fn flags_add_denied_ranges_and_open_allowed_ones() {
        let cfg = Config {
            cluster_service_cidrs: list("10.96.0.0/12,fd00:10:96::/112"),
            cluster_pod_cidrs: list("100.96.0.0/11"),
            deny_egress_cidrs: list("198.51.100.0/24,10.20.30.0/24"),
            allow_egress_cidrs: list("10.0.0.0/8,169.254.169.254/32,192.168.1.0/24,fd00::/8"),
            ..Config::default()
        };
        let v = policy(&cfg);
        let egress = v["spec"]["egress"].as_array().expect("egress").clone();
        assert_eq!(egress.len(), 7, "{egress:#?}");
        assert_eq!(
            egress[2]["to"],
            json!([
                {"ipBlock": {"cidr": "0.0.0.0/0", "except": [
                    "10.0.0.0/8", "100.64.0.0/10", "169.254.0.0/16", "172.16.0.0/12", "192.168.0.0/16",
                    "198.51.100.0/24", "203.0.113.1/32"]}},
                {"ipBlock": {"cidr": "::/0", "except": ["2001:db8::1/128", "fc00::/7", "fe80::/10"]}},
            ])
        );
        // 10/8 is reopened but for the cluster's node, pods and Services and the denied range.
        assert_eq!(
            egress[3],
            json!({"to": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": [
                "10.0.0.1/32", "10.20.30.0/24", "10.96.0.0/12", "10.244.0.0/24", "10.244.1.0/24"]}}]})
        );
        // The metadata address allowed exactly (GKE's metadata DNS) opens it.
        assert_eq!(egress[4], json!({"to": [{"ipBlock": {"cidr": "169.254.169.254/32"}}]}));
        assert_eq!(egress[5], json!({"to": [{"ipBlock": {"cidr": "192.168.1.0/24"}}]}));
        assert_eq!(
            egress[6],
            json!({"to": [{"ipBlock": {"cidr": "fd00::/8", "except": [
                "fd00::1/128", "fd00:10:96::/112", "fd00:10:244::/64", "fd00:ec2::254/128"]}}]})
        );
    }

    #[test]
    fn an_allowed_range_inside_a_cluster_range_opens_nothing() {
        let cfg = Config { allow_egress_cidrs: list("10.244.0.0/25,10.0.0.1/32"), ..Config::default() };
        let egress = policy(&cfg)["spec"]["egress"].as_array().expect("egress").clone();
        // 10.0.0.1/32 is exactly a node address: allowed exactly, opened (the flag says so).
        assert_eq!(egress.len(), 4, "{egress:#?}");
        assert_eq!(egress[3], json!({"to": [{"ipBlock": {"cidr": "10.0.0.1/32"}}]}));
    }

    #[test]
    fn a_family_denied_whole_has_no_world_peer() {
        let cfg = Config { deny_egress_cidrs: list("::/0"), ..Config::default() };
        let egress = policy(&cfg)["spec"]["egress"].as_array().expect("egress").clone();
        assert_eq!(egress[2]["to"].as_array().map(Vec::len), Some(1));
        assert_eq!(egress[2]["to"][0]["ipBlock"]["cidr"], "0.0.0.0/0");
    }

    #[test]
    fn every_except_is_a_strict_subset_of_its_cidr() {
        let cfg = Config {
            cluster_service_cidrs: list("10.96.0.0/12"),
            allow_egress_cidrs: list("0.0.0.0/1,10.0.0.0/8,fc00::/7"),
            ..Config::default()
        };
        let v = policy(&cfg);
        for rule in v["spec"]["egress"].as_array().expect("egress") {
            for peer in rule["to"].as_array().into_iter().flatten() {
                let Some(b) = peer.get("ipBlock") else { continue };
                let cidr: Cidr = b["cidr"].as_str().expect("cidr").parse().expect("a cidr");
                for e in b["except"].as_array().into_iter().flatten() {
                    let e: Cidr = e.as_str().expect("except").parse().expect("a cidr");
                    assert!(cidr.strictly_contains(&e), "{e} in {cidr}");
                }
            }
        }
    }
}
