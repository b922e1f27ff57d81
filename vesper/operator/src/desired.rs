//! The **build** step: every object a preview should have, as one [`Desired`] value, from the
//! preview, the operator's flags and the cluster's addresses alone. Pure: no request, no clock,
//! so it is tested from fixtures with no API server (tests/build_fixtures.rs).

use crate::config::Config;
use crate::error::InvalidQuantity;
use crate::hostaddresses::ClusterAddresses;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{LimitRange, Namespace, ResourceQuota, Service};
use k8s_openapi::api::networking::v1::{Ingress, NetworkPolicy};
use serde::Serialize;
use vesper_api::PreviewEnvironment;

/// Every object of one preview, in the order they are written (crate::apply): the namespace;
/// the quota, the limits and the network isolation, before any pod can run; the workload and its
/// routes.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Desired {
    pub namespace: Namespace,
    pub quota: ResourceQuota,
    pub limits: LimitRange,
    pub network_policy: NetworkPolicy,
    pub deployment: Deployment,
    pub service: Service,
    /// With a preview domain; without one, an Ingress of the preview's is deleted.
    pub ingress: Option<Ingress>,
}

impl Desired {
    /// The preview's URL: `https://` its Ingress's host, when it has one.
    pub fn url(&self) -> Option<String> {
        let host = self.ingress.as_ref()?.spec.as_ref()?.rules.as_ref()?.first()?.host.as_ref()?;
        Some(format!("https://{host}"))
    }
}

/// The objects of `pe`, whose namespace is `namespace`. Fails, naming the field, on a quantity of
/// the spec Kubernetes would not parse: then nothing is written (not even the namespace).
pub fn build(
    pe: &PreviewEnvironment,
    cfg: &Config,
    namespace: &str,
    hosts: &ClusterAddresses,
) -> Result<Desired, InvalidQuantity> {
    Ok(Desired {
        namespace: crate::namespace::namespace(pe, namespace),
        quota: crate::quota::resource_quota(pe, cfg, namespace)?,
        limits: crate::quota::limit_range(pe, cfg, namespace),
        network_policy: crate::networkpolicy::network_policy(pe, cfg, namespace, hosts),
        deployment: crate::deployment::deployment(pe, cfg, namespace),
        service: crate::service::service(pe, namespace),
        ingress: crate::ingress::host(pe, cfg).map(|h| crate::ingress::ingress(pe, cfg, namespace, &h)),
    })
}
