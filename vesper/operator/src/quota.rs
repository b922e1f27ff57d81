//! The preview namespace's ResourceQuota and LimitRange, which exist before any pod of the
//! preview does. The quota is sized from the spec: the per-pod limits (the preview's own, or the
//! operator's defaults) times the pods a rollout can hold at once, capped by the operator's
//! flags; it also forbids what a preview has no use for (node ports, load balancers, volumes).
//! CPU, memory and ephemeral storage (the containers' writable layers, logs and the /tmp
//! emptyDir) are each bounded per container by the LimitRange and per preview by the quota, so
//! one preview cannot fill a node's disk.
//!
//! Quantities are exact (the `k8s-quantity` crate, the API server's own parser): `1e3`, `2Pi`,
//! `100u` are valid, and a value Kubernetes would refuse fails the preview with its field named.
//! Every quantity is written in the spelling the server stores, so an unchanged reconcile
//! writes nothing.
//!
//! A rollout (strategy maxSurge 1, maxUnavailable 0: see deployment.rs) holds the replicas, one
//! surge pod, and the old pods that are terminating: those still count against a quota until
//! their grace period ends, so a quota of `replicas + 1` would refuse the next new pod while an
//! old one shuts down, and the preview would report pods refused in the middle of an ordinary
//! image update. The quota therefore allows `2 x replicas + 1` pods.

use crate::config::Config;
use crate::error::InvalidQuantity;
use k8s_openapi::api::core::v1::{
    LimitRange, LimitRangeItem, LimitRangeSpec, ResourceQuota, ResourceQuotaSpec, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as Q;
use k8s_quantity::Quantity;
use std::collections::BTreeMap;
use vesper_api::PreviewEnvironment;

pub const QUOTA_NAME: &str = "preview";
pub const LIMIT_RANGE_NAME: &str = "preview";

/// The resources a preview's container gets, each a request and a limit.
pub const RESOURCES: [&str; 3] = ["cpu", "memory", "ephemeral-storage"];

/// The container's requests and limits, by resource name (`cpu`, `memory`,
/// `ephemeral-storage`): the spec's, else the operator's defaults. Exact quantities.
#[derive(Debug, Clone, PartialEq)]
pub struct PodResources {
    pub requests: BTreeMap<&'static str, Quantity>,
    pub limits: BTreeMap<&'static str, Quantity>,
}

fn defaults<'a>(cfg: &'a Config, resource: &str) -> (&'a Quantity, &'a Quantity) {
    match resource {
        "cpu" => (&cfg.default_cpu_request, &cfg.default_cpu_limit),
        "memory" => (&cfg.default_memory_request, &cfg.default_memory_limit),
        _ => (&cfg.default_ephemeral_storage_request, &cfg.default_ephemeral_storage_limit),
    }
}

/// A quantity of the preview's spec, parsed exactly, or an error naming its field.
fn spec_quantity(pe: &PreviewEnvironment, which: &str, resource: &str) -> Result<Option<Quantity>, InvalidQuantity> {
    let r = pe.spec.resources.as_ref();
    let list =
        if which == "requests" { r.and_then(|r| r.requests.as_ref()) } else { r.and_then(|r| r.limits.as_ref()) };
    let Some(raw) = list.and_then(|l| l.get(resource)) else { return Ok(None) };
    let field = format!("spec.resources.{which}.{resource}");
    match k8s_quantity::parse_quantity(raw.0.trim()) {
        Ok(q) if q.is_negative() => {
            Err(InvalidQuantity { field, value: raw.0.clone(), reason: "it is negative".into() })
        }
        Ok(q) => Ok(Some(q)),
        Err(e) => Err(InvalidQuantity { field, value: raw.0.clone(), reason: e.to_string() }),
    }
}

/// Check the quantities of the preview's spec the operator uses (requests and limits of cpu,
/// memory and ephemeral-storage), without the operator's settings: the first bad one, named.
pub fn validate_spec(pe: &PreviewEnvironment) -> Result<(), InvalidQuantity> {
    for resource in RESOURCES {
        for which in ["requests", "limits"] {
            spec_quantity(pe, which, resource)?;
        }
    }
    Ok(())
}

/// The container's resources. A limit without a request makes the request equal to the limit
/// (as Kubernetes does). Fails, naming the field, on a quantity Kubernetes would not parse.
pub fn pod_resources(pe: &PreviewEnvironment, cfg: &Config) -> Result<PodResources, InvalidQuantity> {
    let mut out = PodResources { requests: BTreeMap::new(), limits: BTreeMap::new() };
    for resource in RESOURCES {
        let (default_request, default_limit) = defaults(cfg, resource);
        let limit = spec_quantity(pe, "limits", resource)?;
        let request = match spec_quantity(pe, "requests", resource)? {
            Some(r) => r,
            None => limit.clone().unwrap_or_else(|| default_request.clone()),
        };
        // Each pod's values as the server stores them (rounded up to 1m), so the quota holds
        // exactly what the pods count: 3 pods of `100u` use 3m, not 300u.
        let mut limit = limit.unwrap_or_else(|| default_limit.clone());
        let mut request = request;
        limit.round_up(-3);
        request.round_up(-3);
        out.requests.insert(resource, request);
        out.limits.insert(resource, limit);
    }
    Ok(out)
}

/// A resource list as the API server stores it (rounded up to 1m, canonical), so that the
/// stored object compares equal to the desired one and an unchanged reconcile writes nothing.
pub fn resource_list<'a>(items: impl IntoIterator<Item = (&'a str, &'a Quantity)>) -> BTreeMap<String, Q> {
    items.into_iter().map(|(k, v)| (k.to_string(), Q(v.resource_list_form()))).collect()
}

impl PodResources {
    /// The container's `resources`.
    pub fn requirements(&self) -> ResourceRequirements {
        ResourceRequirements {
            requests: Some(resource_list(self.requests.iter().map(|(k, v)| (*k, v)))),
            limits: Some(resource_list(self.limits.iter().map(|(k, v)| (*k, v)))),
            ..Default::default()
        }
    }
}

/// The ResourceQuota of a preview's namespace.
pub fn resource_quota(
    pe: &PreviewEnvironment,
    cfg: &Config,
    namespace: &str,
) -> Result<ResourceQuota, InvalidQuantity> {
    let r = pod_resources(pe, cfg)?;
    let pods = 2 * i64::from(pe.spec.replicas.max(0)) + 1;
    let mut hard = BTreeMap::from([
        ("pods".to_string(), Q(pods.to_string())),
        ("services".to_string(), Q("2".into())),
        ("services.nodeports".to_string(), Q("0".into())),
        ("services.loadbalancers".to_string(), Q("0".into())),
        ("persistentvolumeclaims".to_string(), Q("0".into())),
    ]);
    for resource in RESOURCES {
        let cap = match resource {
            "cpu" => &cfg.quota_max_cpu,
            "memory" => &cfg.quota_max_memory,
            _ => &cfg.quota_max_ephemeral_storage,
        };
        for (which, list) in [("requests", &r.requests), ("limits", &r.limits)] {
            let per_pod = list.get(resource).cloned().unwrap_or_else(Quantity::zero);
            let total = per_pod.mul(pods).min(cap.clone());
            hard.insert(format!("{which}.{resource}"), Q(total.resource_list_form()));
        }
    }
    Ok(ResourceQuota {
        metadata: crate::meta::object_meta(pe, namespace, QUOTA_NAME),
        spec: Some(ResourceQuotaSpec { hard: Some(hard), ..Default::default() }),
        status: None,
    })
}

/// The LimitRange of a preview's namespace: defaults for containers that set nothing, and the
/// per-container maximum.
pub fn limit_range(pe: &PreviewEnvironment, cfg: &Config, namespace: &str) -> LimitRange {
    let max = |r: &str| match r {
        "cpu" => &cfg.max_cpu_per_container,
        "memory" => &cfg.max_memory_per_container,
        _ => &cfg.max_ephemeral_storage_per_container,
    };
    LimitRange {
        metadata: crate::meta::object_meta(pe, namespace, LIMIT_RANGE_NAME),
        spec: Some(LimitRangeSpec {
            limits: vec![LimitRangeItem {
                type_: "Container".into(),
                default: Some(resource_list(RESOURCES.map(|r| (r, defaults(cfg, r).1)))),
                default_request: Some(resource_list(RESOURCES.map(|r| (r, defaults(cfg, r).0)))),
                max: Some(resource_list(RESOURCES.map(|r| (r, max(r))))),
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
        // Ephemeral storage: 64Mi requested, 1Gi limit per pod, 5 pods, capped at 8Gi.
        assert_eq!(hard["requests.ephemeral-storage"].0, "320Mi");
        assert_eq!(hard["limits.ephemeral-storage"].0, "5Gi");
        let big = pe(json!({"image": "app:v1", "replicas": 5, "resources": {"limits": {"cpu": "2", "memory": "4Gi"}}}));
        let hard = resource_quota(&big, &cfg, "ns").unwrap().spec.unwrap().hard.unwrap();
        assert_eq!(hard["limits.cpu"].0, "6");
        assert_eq!(hard["limits.memory"].0, "12Gi");
        // Requests default to the limits the spec sets.
        assert_eq!(hard["requests.cpu"].0, "6");
    }

    #[test]
    fn quantities_a_float_parser_refused_are_exact() {
        let cfg = Config::default();
        let p = pe(json!({"image": "app:v1", "replicas": 1, "resources": {
            "requests": {"cpu": "100u", "memory": "1e8"},
            "limits": {"cpu": "1.5", "memory": "0.25Gi", "ephemeral-storage": "1e9"}}}));
        let r = pod_resources(&p, &cfg).expect("valid quantities");
        assert_eq!(
            serde_json::to_value(r.requirements()).expect("json"),
            json!({"requests": {"cpu": "1m", "ephemeral-storage": "1e9", "memory": "100e6"},
                   "limits": {"cpu": "1500m", "ephemeral-storage": "1e9", "memory": "256Mi"}})
        );
        let hard = resource_quota(&p, &cfg, "ns").expect("quota").spec.expect("spec").hard.expect("hard");
        assert_eq!(hard["requests.cpu"].0, "3m");
        assert_eq!(hard["limits.cpu"].0, "4500m");
        assert_eq!(hard["requests.memory"].0, "300e6");
        assert_eq!(hard["limits.memory"].0, "768Mi");
        assert_eq!(hard["limits.ephemeral-storage"].0, "3e9");
        let big = pe(json!({"image": "app:v1", "resources": {"limits": {"memory": "2Pi"}}}));
        let hard = resource_quota(&big, &cfg, "ns").expect("quota").spec.expect("spec").hard.expect("hard");
        assert_eq!(hard["limits.memory"].0, "12Gi");
    }

    #[test]
    fn a_bad_quantity_names_its_field() {
        let p = pe(json!({"image": "app:v1", "resources": {"limits": {"memory": "lots"}}}));
        let e = resource_quota(&p, &Config::default(), "ns").expect_err("lots is no quantity");
        let text = e.to_string();
        assert!(text.contains("spec.resources.limits.memory") && text.contains("\"lots\""), "{text}");
        let p = pe(json!({"image": "app:v1", "resources": {"requests": {"cpu": "-1"}}}));
        let text = pod_resources(&p, &Config::default()).expect_err("negative").to_string();
        assert!(text.contains("spec.resources.requests.cpu"), "{text}");
    }

    #[test]
    fn the_limit_range_bounds_ephemeral_storage() {
        let lr = limit_range(&pe(json!({"image": "app:v1"})), &Config::default(), "ns");
        assert_eq!(
            serde_json::to_value(lr.spec).expect("json"),
            json!({"limits": [{"type": "Container",
                "default": {"cpu": "500m", "ephemeral-storage": "1Gi", "memory": "512Mi"},
                "defaultRequest": {"cpu": "100m", "ephemeral-storage": "64Mi", "memory": "128Mi"},
                "max": {"cpu": "2", "ephemeral-storage": "2Gi", "memory": "2Gi"}}]})
        );
    }
}
