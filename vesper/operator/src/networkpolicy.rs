//! The preview namespace's NetworkPolicy: pods of the preview accept connections only from
//! each other and from the ingress controller's namespace, and may reach anything but the
//! cluster itself (every node address, every API server address, and the denied extra CIDRs,
//! by default the cloud metadata address). DNS to kube-system stays open.
//!
//! What it does not stop (see docs/vesper/security.md): traffic to and from the pod's own node
//! is always allowed by NetworkPolicy; whether a Service IP such as `kubernetes.default` is
//! matched by `ipBlock` depends on the CNI; and none of it is enforced without a CNI that
//! enforces NetworkPolicies.

use crate::config::Config;
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use vesper_api::PreviewEnvironment;

pub const NAME: &str = "preview-isolation";

fn ns_selector(ns: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some(BTreeMap::from([("kubernetes.io/metadata.name".to_string(), ns.to_string())])),
        ..Default::default()
    }
}

fn everything() -> LabelSelector {
    LabelSelector::default()
}

/// The denied CIDRs of one family (`v6`), sorted, de-duplicated.
fn denied(hosts: &BTreeSet<IpAddr>, extra: &[String], v6: bool) -> Vec<String> {
    let mut out: BTreeSet<String> = hosts
        .iter()
        .filter(|ip| ip.is_ipv6() == v6)
        .map(|ip| if v6 { format!("{ip}/128") } else { format!("{ip}/32") })
        .collect();
    for c in extra {
        let c = c.trim();
        if c.is_empty() {
            continue;
        }
        let is_v6 = c.contains(':');
        if is_v6 == v6 {
            out.insert(c.to_string());
        }
    }
    out.into_iter().collect()
}

pub fn network_policy(
    pe: &PreviewEnvironment,
    cfg: &Config,
    namespace: &str,
    hosts: &BTreeSet<IpAddr>,
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
    let mut world = vec![];
    for (cidr, v6) in [("0.0.0.0/0", false), ("::/0", true)] {
        let except = denied(hosts, &cfg.deny_egress_cidrs, v6);
        world.push(NetworkPolicyPeer {
            ip_block: Some(IPBlock { cidr: cidr.into(), except: if except.is_empty() { None } else { Some(except) } }),
            ..Default::default()
        });
    }
    let egress = vec![
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
        NetworkPolicyEgressRule { to: Some(world), ..Default::default() },
    ];
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
    use serde_json::json;

    #[test]
    fn denies_the_cluster_and_metadata() {
        let pe: PreviewEnvironment =
            serde_json::from_value(json!({"apiVersion": "vesper.eventide.dev/v1alpha1", "kind": "PreviewEnvironment",
            "metadata": {"name": "pr-1", "namespace": "team-a", "uid": "u"}, "spec": {"image": "app:v1"}}))
            .unwrap();
        let hosts: BTreeSet<IpAddr> =
            ["10.0.0.1", "203.0.113.1", "fd00::1"].iter().map(|s| s.parse().unwrap()).collect();
        let np = network_policy(&pe, &Config::default(), "ns", &hosts);
        let v = serde_json::to_value(&np).unwrap();
        let world = &v["spec"]["egress"][2]["to"];
        assert_eq!(
            world[0]["ipBlock"],
            json!({"cidr": "0.0.0.0/0", "except": ["10.0.0.1/32", "169.254.169.254/32", "203.0.113.1/32"]})
        );
        assert_eq!(world[1]["ipBlock"], json!({"cidr": "::/0", "except": ["fd00::1/128"]}));
        assert_eq!(
            v["spec"]["ingress"][1]["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
            "ingress-nginx"
        );
        assert_eq!(v["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
    }
}
