//! The preview namespace's ResourceQuota and LimitRange, which exist before any pod of the
//! preview does. The quota is sized from the spec: the per-pod limits (the preview's own, or the
//! operator's defaults) times the pods a rollout can hold at once, capped by the operator's
//! flags; it also forbids what a preview has no use for (node ports, load balancers, volumes).
//!
//! A rollout (strategy maxSurge 1, maxUnavailable 0: see deployment.rs) holds the replicas, one
//! surge pod, and the old pods that are terminating: those still count against a quota until
//! their grace period ends, so a quota of `replicas + 1` would refuse the next new pod while an
//! old one shuts down, and the preview would report pods refused in the middle of an ordinary
//! image update. The quota therefore allows `2 x replicas + 1` pods.

use crate::config::Config;
use crate::quantity::{self, BadQuantity};
use k8s_openapi::api::core::v1::{LimitRange, LimitRangeItem, LimitRangeSpec, ResourceQuota, ResourceQuotaSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::collections::BTreeMap;
use vesper_api::PreviewEnvironment;

pub const QUOTA_NAME: &str = "preview";
pub const LIMIT_RANGE_NAME: &str = "preview";

/// The container's requests and limits: the spec's, else the operator's defaults.
pub struct PodResources {
    pub cpu_request: String,
    pub memory_request: String,
    pub cpu_limit: String,
    pub memory_limit: String,
}

pub fn pod_resources(pe: &PreviewEnvironment, cfg: &Config) -> PodResources {
    let get = |which: &str, key: &str, default: &str| -> String {
        let r = pe.spec.resources.as_ref();
        let list = match which {
            "requests" => r.and_then(|r| r.requests.as_ref()),
            _ => r.and_then(|r| r.limits.as_ref()),
        };
        list.and_then(|l| l.get(key)).map(|q| q.0.clone()).unwrap_or_else(|| default.to_string())
    };
    let cpu_limit = get("limits", "cpu", &cfg.default_cpu_limit);
    let memory_limit = get("limits", "memory", &cfg.default_memory_limit);
    PodResources {
        // A limit without a request makes the request equal to the limit (as Kubernetes does).
        cpu_request: get(
            "requests",
            "cpu",
            if has(pe, "limits", "cpu") { &cpu_limit } else { &cfg.default_cpu_request },
        ),
        memory_request: get(
            "requests",
            "memory",
            if has(pe, "limits", "memory") { &memory_limit } else { &cfg.default_memory_request },
        ),
        cpu_limit,
        memory_limit,
    }
}

fn has(pe: &PreviewEnvironment, which: &str, key: &str) -> bool {
    let r = pe.spec.resources.as_ref();
    let list =
        if which == "requests" { r.and_then(|r| r.requests.as_ref()) } else { r.and_then(|r| r.limits.as_ref()) };
    list.is_some_and(|l| l.contains_key(key))
}

fn q(s: String) -> Quantity {
    Quantity(s)
}

/// The ResourceQuota of a preview's namespace.
pub fn resource_quota(pe: &PreviewEnvironment, cfg: &Config, namespace: &str) -> Result<ResourceQuota, BadQuantity> {
    let r = pod_resources(pe, cfg);
    let pods = 2 * (pe.spec.replicas.max(0) as u128) + 1;
    let cap = |v: u128, max: &str| -> Result<u128, BadQuantity> { Ok(v.min(quantity::milli(max)?)) };
    let hard = BTreeMap::from([
        ("pods".to_string(), q(pods.to_string())),
        (
            "requests.cpu".to_string(),
            q(quantity::cpu(cap(quantity::milli(&r.cpu_request)? * pods, &cfg.quota_max_cpu)?)),
        ),
        ("limits.cpu".to_string(), q(quantity::cpu(cap(quantity::milli(&r.cpu_limit)? * pods, &cfg.quota_max_cpu)?))),
        (
            "requests.memory".to_string(),
            q(quantity::memory(cap(quantity::milli(&r.memory_request)? * pods, &cfg.quota_max_memory)?)),
        ),
        (
            "limits.memory".to_string(),
            q(quantity::memory(cap(quantity::milli(&r.memory_limit)? * pods, &cfg.quota_max_memory)?)),
        ),
        ("services".to_string(), q("2".into())),
        ("services.nodeports".to_string(), q("0".into())),
        ("services.loadbalancers".to_string(), q("0".into())),
        ("persistentvolumeclaims".to_string(), q("0".into())),
    ]);
    Ok(ResourceQuota {
        metadata: crate::meta::object_meta(pe, namespace, QUOTA_NAME),
        spec: Some(ResourceQuotaSpec { hard: Some(hard), ..Default::default() }),
        status: None,
    })
}

/// The LimitRange of a preview's namespace: defaults for containers that set nothing, and the
/// per-container maximum.
pub fn limit_range(pe: &PreviewEnvironment, cfg: &Config, namespace: &str) -> LimitRange {
    let pair = |cpu: &str, mem: &str| {
        BTreeMap::from([("cpu".to_string(), q(cpu.into())), ("memory".to_string(), q(mem.into()))])
    };
    LimitRange {
        metadata: crate::meta::object_meta(pe, namespace, LIMIT_RANGE_NAME),
        spec: Some(LimitRangeSpec {
            limits: vec![LimitRangeItem {
                type_: "Container".into(),
                default: Some(pair(&cfg.default_cpu_limit, &cfg.default_memory_limit)),
                default_request: Some(pair(&cfg.default_cpu_request, &cfg.default_memory_request)),
                max: Some(pair(&cfg.max_cpu_per_container, &cfg.max_memory_per_container)),
                ..Default::default()
            }],
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pe(spec: serde_json::Value) -> PreviewEnvironment {
        serde_json::from_value(json!({"apiVersion": "vesper.eventide.dev/v1alpha1", "kind": "PreviewEnvironment",
            "metadata": {"name": "pr-1", "namespace": "team-a", "uid": "u-1"}, "spec": spec}))
        .unwrap()
    }

    #[test]
    fn quota_is_sized_from_the_spec_and_capped() {
        let cfg = Config::default();
        let q = resource_quota(&pe(json!({"image": "app:v1", "replicas": 2})), &cfg, "ns").unwrap();
        let hard = q.spec.unwrap().hard.unwrap();
        assert_eq!(hard["pods"].0, "5");
        assert_eq!(hard["limits.cpu"].0, "2500m");
        assert_eq!(hard["limits.memory"].0, "2560Mi");
        assert_eq!(hard["requests.cpu"].0, "500m");
        assert_eq!(hard["services.nodeports"].0, "0");
        let big = pe(json!({"image": "app:v1", "replicas": 5, "resources": {"limits": {"cpu": "2", "memory": "4Gi"}}}));
        let hard = resource_quota(&big, &cfg, "ns").unwrap().spec.unwrap().hard.unwrap();
        assert_eq!(hard["limits.cpu"].0, "6");
        assert_eq!(hard["limits.memory"].0, "12Gi");
        // Requests default to the limits the spec sets.
        assert_eq!(hard["requests.cpu"].0, "6");
    }
}
