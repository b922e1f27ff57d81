//! The cluster's own addresses, which previews may not reach: every address of every node,
//! every address the API server is served at (the endpoints of `default/kubernetes`), and the
//! pod ranges the nodes report (`Node.spec.podCIDRs`, set by the node IPAM controller or the
//! CNI; not every CNI sets them, hence `--cluster-pod-cidrs`). They are watched, and every
//! preview's NetworkPolicy follows when they change.

use crate::cidr::Cidr;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Endpoints, Node};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::{Arc, RwLock};
use tokio::sync::watch;

/// Addresses of nodes (all address types that are IPs: InternalIP, ExternalIP).
pub fn node_addresses(nodes: &[Node]) -> BTreeSet<IpAddr> {
    nodes
        .iter()
        .filter_map(|n| n.status.as_ref()?.addresses.as_ref())
        .flatten()
        .filter_map(|a| a.address.parse().ok())
        .collect()
}

/// The pod ranges of the nodes (`spec.podCIDRs`, else `spec.podCIDR`); a value that is no CIDR
/// is skipped with a warning.
pub fn node_pod_cidrs(nodes: &[Node]) -> BTreeSet<Cidr> {
    let mut out = BTreeSet::new();
    for n in nodes {
        let Some(spec) = n.spec.as_ref() else { continue };
        let listed = spec.pod_cidrs.clone().unwrap_or_default();
        for c in listed.iter().chain(spec.pod_cidr.iter()) {
            match c.parse() {
                Ok(c) => {
                    out.insert(c);
                }
                Err(e) => tracing::warn!(node = ?n.metadata.name, error = %e, "ignoring a pod range of a node"),
            }
        }
    }
    out
}

/// What the cluster is made of, as previews must not reach it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterAddresses {
    /// Node and API server addresses.
    pub hosts: BTreeSet<IpAddr>,
    /// Pod ranges the nodes report.
    pub pod_cidrs: BTreeSet<Cidr>,
}

impl ClusterAddresses {
    fn of(nodes: &[Node], endpoints: Option<&Endpoints>, slices: &[EndpointSlice]) -> ClusterAddresses {
        let mut hosts = node_addresses(nodes);
        hosts.extend(apiserver_addresses(endpoints, slices));
        ClusterAddresses { hosts, pod_cidrs: node_pod_cidrs(nodes) }
    }
}

/// Addresses of the API server, from the `kubernetes` Endpoints and EndpointSlices.
pub fn apiserver_addresses(endpoints: Option<&Endpoints>, slices: &[EndpointSlice]) -> BTreeSet<IpAddr> {
    let mut out = BTreeSet::new();
    if let Some(ep) = endpoints {
        for s in ep.subsets.iter().flatten() {
            out.extend(s.addresses.iter().flatten().filter_map(|a| a.ip.parse::<IpAddr>().ok()));
            out.extend(s.not_ready_addresses.iter().flatten().filter_map(|a| a.ip.parse::<IpAddr>().ok()));
        }
    }
    for s in slices {
        out.extend(s.endpoints.iter().flat_map(|e| e.addresses.iter()).filter_map(|a| a.parse::<IpAddr>().ok()));
    }
    out
}

/// The current set of cluster addresses, shared with the reconciler.
#[derive(Debug, Clone, Default)]
pub struct HostAddresses {
    inner: Arc<RwLock<ClusterAddresses>>,
}

impl HostAddresses {
    pub fn get(&self) -> ClusterAddresses {
        self.inner.read().map(|g| g.clone()).unwrap_or_default()
    }

    fn set(&self, v: ClusterAddresses) -> bool {
        let Ok(mut g) = self.inner.write() else { return false };
        if *g == v {
            return false;
        }
        *g = v;
        true
    }

    /// Read the addresses once, then keep them current; `changed` ticks on every change. Returns
    /// when the first read is done, so the first reconciles see the addresses.
    pub async fn start(client: kube::Client) -> Result<(HostAddresses, watch::Receiver<u64>), kube::Error> {
        let nodes_api: Api<Node> = Api::all(client.clone());
        let eps_api: Api<Endpoints> = Api::namespaced(client.clone(), "default");
        let slices_api: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
        let slice_selector = "kubernetes.io/service-name=kubernetes";
        let nodes = nodes_api.list(&Default::default()).await?.items;
        let eps = eps_api.get_opt("kubernetes").await?;
        let slices = slices_api.list(&kube::api::ListParams::default().labels(slice_selector)).await?.items;
        let addrs = HostAddresses::default();
        addrs.set(ClusterAddresses::of(&nodes, eps.as_ref(), &slices));
        let (tx, rx) = watch::channel(0u64);
        let shared = addrs.clone();
        tokio::spawn(async move {
            // Each kind keeps what it has seen plus, during a (re)list, the buffer that replaces
            // it when the list completes, so a relist never publishes a partial set. They start
            // from the first read: the kinds' watches finish their lists at different moments,
            // and a set computed before all had would miss addresses (the NetworkPolicy of
            // every preview would briefly allow them).
            let mut nodes = Kind::seeded(nodes);
            let mut eps = Kind::seeded(eps);
            let mut slices = Kind::seeded(slices);
            enum Ev {
                N(Box<watcher::Event<Node>>),
                E(watcher::Event<Endpoints>),
                S(watcher::Event<EndpointSlice>),
            }
            // Backoff: an unreachable API server is retried with growing delays, not in a hot loop.
            let n = watcher(nodes_api, opkit::cache::paged(watcher::Config::default()))
                .default_backoff()
                .map(|e| e.map(|e| Ev::N(Box::new(e))));
            let e = watcher(eps_api, watcher::Config::default().fields("metadata.name=kubernetes"))
                .default_backoff()
                .map(|e| e.map(Ev::E));
            let s = watcher(slices_api, watcher::Config::default().labels(slice_selector))
                .default_backoff()
                .map(|e| e.map(Ev::S));
            let mut events = futures::stream::select_all([n.boxed(), e.boxed(), s.boxed()]);
            let mut ticks = 0u64;
            while let Some(ev) = events.next().await {
                let changed = match ev {
                    Ok(Ev::N(ev)) => nodes.apply(*ev),
                    Ok(Ev::E(ev)) => eps.apply(ev),
                    Ok(Ev::S(ev)) => slices.apply(ev),
                    Err(e) => {
                        tracing::warn!(error = %e, "watching the cluster's addresses");
                        false
                    }
                };
                if !changed {
                    continue;
                }
                let list: Vec<Node> = nodes.seen.values().cloned().collect();
                let sl: Vec<EndpointSlice> = slices.seen.values().cloned().collect();
                let all = ClusterAddresses::of(&list, eps.seen.values().next(), &sl);
                if !list.is_empty() && shared.set(all) {
                    ticks += 1;
                    if tx.send(ticks).is_err() {
                        return;
                    }
                }
            }
        });
        Ok((addrs, rx))
    }
}

/// What a watcher has shown of one kind, by name.
struct Kind<K> {
    seen: std::collections::BTreeMap<String, K>,
    listing: Option<std::collections::BTreeMap<String, K>>,
}

impl<K> Default for Kind<K> {
    fn default() -> Self {
        Kind { seen: Default::default(), listing: None }
    }
}

impl<K: kube::Resource> Kind<K> {
    fn seeded(objects: impl IntoIterator<Item = K>) -> Self {
        Kind { seen: objects.into_iter().map(|o| (kube::ResourceExt::name_any(&o), o)).collect(), listing: None }
    }

    /// Fold one event in; true when `seen` changed.
    fn apply(&mut self, ev: watcher::Event<K>) -> bool {
        match ev {
            watcher::Event::Init => {
                self.listing = Some(Default::default());
                false
            }
            watcher::Event::InitApply(o) => {
                self.listing.get_or_insert_with(Default::default).insert(kube::ResourceExt::name_any(&o), o);
                false
            }
            watcher::Event::InitDone => {
                self.seen = self.listing.take().unwrap_or_default();
                true
            }
            watcher::Event::Apply(o) => {
                self.seen.insert(kube::ResourceExt::name_any(&o), o);
                true
            }
            watcher::Event::Delete(o) => self.seen.remove(&kube::ResourceExt::name_any(&o)).is_some(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pod_ranges_come_from_the_nodes() {
        let nodes: Vec<Node> = serde_json::from_value(json!([
            {"metadata": {"name": "a"}, "spec": {"podCIDR": "10.244.0.0/24", "podCIDRs": ["10.244.0.0/24", "fd00:10:244::/64"]}},
            {"metadata": {"name": "b"}, "spec": {"podCIDR": "10.244.1.0/24"}},
            {"metadata": {"name": "c"}, "spec": {"podCIDRs": ["not-a-range"]}},
            {"metadata": {"name": "d"}},
        ]))
        .expect("nodes");
        let got: Vec<String> = node_pod_cidrs(&nodes).iter().map(ToString::to_string).collect();
        assert_eq!(got, ["10.244.0.0/24", "10.244.1.0/24", "fd00:10:244::/64"]);
    }
}
