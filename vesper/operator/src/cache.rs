//! The watch caches a reconcile reads from, instead of asking the API server (ADR-0009).
//!
//! Every kind the operator makes for a preview is watched across namespaces by its label
//! `app.kubernetes.io/managed-by=vesper`, and the watch both triggers the preview's reconcile and
//! fills a store (a reflector):
//!
//! - the quota whole but for its status (which the quota controller moves with every pod: such
//!   an update triggers nothing and costs no read);
//! - metadata only (`PartialObjectMeta`) for the namespace, the limit range, the
//!   network policy, the Service and the Ingress: the reconcile compares their content with a
//!   read of its own, and only when the cached metadata says the object changed since it was last
//!   verified (opkit's [`Cached`](opkit::apply::Cached) hint);
//! - whole objects for the Deployment and the pods, whose status the preview's status is made
//!   from; a pod keeps only what that reads (its name, labels, deletion, container states and
//!   conditions).
//!
//! `managedFields` are dropped from everything cached: they are the largest part of most objects
//! and nothing here reads them (the compare-then-write reads them from its own read).
//!
//! Reconciles do not wait for the caches: an object a cache does not hold (yet) is read from the
//! API server, so a cache that has not listed (at start, or a kind whose RBAC is missing, where
//! the read's error names it) costs reads, never a wrong answer. (Waiting inside a reconcile
//! would also be a deadlock: the watches that fill the stores are polled by the same controller.)
//!
//! A cache can be behind the API server, never ahead: a hint that an object is unchanged is
//! trusted only when its resourceVersion is the one the operator verified, and every change it
//! has not seen yet is a watch event that triggers the reconcile again once the store has it.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{LimitRange, Namespace, Pod, PodSpec, ResourceQuota, Service};
use k8s_openapi::api::networking::v1::{Ingress, NetworkPolicy};
use kube::api::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::{reflector, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use std::fmt::Debug;

/// The stores of the watched kinds.
#[derive(Clone)]
pub struct Caches {
    pub namespaces: Store<PartialObjectMeta<Namespace>>,
    pub quotas: Store<ResourceQuota>,
    pub limits: Store<PartialObjectMeta<LimitRange>>,
    pub policies: Store<PartialObjectMeta<NetworkPolicy>>,
    pub services: Store<PartialObjectMeta<Service>>,
    pub ingresses: Store<PartialObjectMeta<Ingress>>,
    pub deployments: Store<Deployment>,
    pub pods: Store<Pod>,
}

/// The writing halves of [`Caches`], consumed by the watches of `controller::run`.
pub struct Writers {
    pub namespaces: Writer<PartialObjectMeta<Namespace>>,
    pub quotas: Writer<ResourceQuota>,
    pub limits: Writer<PartialObjectMeta<LimitRange>>,
    pub policies: Writer<PartialObjectMeta<NetworkPolicy>>,
    pub services: Writer<PartialObjectMeta<Service>>,
    pub ingresses: Writer<PartialObjectMeta<Ingress>>,
    pub deployments: Writer<Deployment>,
    pub pods: Writer<Pod>,
}

impl Caches {
    /// Empty stores and the writers that fill them.
    pub fn new() -> (Caches, Writers) {
        let (namespaces, wn) = reflector::store();
        let (quotas, wq) = reflector::store();
        let (limits, wl) = reflector::store();
        let (policies, wp) = reflector::store();
        let (services, ws) = reflector::store();
        let (ingresses, wi) = reflector::store();
        let (deployments, wd) = reflector::store();
        let (pods, wpo) = reflector::store();
        (
            Caches { namespaces, quotas, limits, policies, services, ingresses, deployments, pods },
            Writers {
                namespaces: wn,
                quotas: wq,
                limits: wl,
                policies: wp,
                services: ws,
                ingresses: wi,
                deployments: wd,
                pods: wpo,
            },
        )
    }

    /// The pods in `namespace` with the preview UID label `uid`; `None` while the pod cache has
    /// not listed them yet (the caller lists them).
    pub fn pods_of(&self, namespace: &str, uid: &str) -> Option<Vec<Pod>> {
        if !opkit::cache::is_ready(&self.pods) {
            return None;
        }
        let pods = self.pods.state_filter(|p| {
            p.namespace().as_deref() == Some(namespace)
                && p.labels().get(vesper_api::LABEL_PREVIEW_UID).map(String::as_str) == Some(uid)
        });
        Some(pods.into_iter().map(|p| (*p).clone()).collect())
    }

    /// The cached metadata of the object `name` (in `namespace`), as the compare-then-write's
    /// hint.
    pub fn meta<K>(
        store: &Store<PartialObjectMeta<K>>,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<kube::api::ObjectMeta>
    where
        K: Resource<DynamicType = ()> + Clone + 'static,
    {
        opkit::cache::meta_of(store, namespace, name)
    }

    /// The compare-then-write's hint for the preview's ResourceQuota in `namespace`: the whole
    /// cached object (its status is not cached), so a quota whose usage moved needs no read.
    pub fn quota_hint(&self, namespace: &str) -> Option<(kube::api::ObjectMeta, u64)> {
        let q = self.quotas.get(&ObjectRef::new(crate::quota::QUOTA_NAME).within(namespace))?;
        let json = serde_json::to_value(&*q).ok()?;
        Some((q.metadata.clone(), opkit::apply::content_digest(&json)))
    }

    /// The Deployment `name` in `namespace`, when cached.
    pub fn deployment(&self, namespace: &str, name: &str) -> Option<Deployment> {
        self.deployments.get(&ObjectRef::new(name).within(namespace)).map(|d| (*d).clone())
    }
}

/// The watch configuration of everything the operator makes: its label.
pub fn ours() -> watcher::Config {
    watcher::Config::default().labels(&format!("{}={}", vesper_api::LABEL_MANAGED_BY, vesper_api::MANAGED_BY))
}

/// A metadata-only watch of `K` across namespaces that fills `writer`, as a stream of the
/// objects it saw change or go.
pub fn metadata<K>(
    client: &Client,
    writer: Writer<PartialObjectMeta<K>>,
) -> impl futures::Stream<Item = Result<PartialObjectMeta<K>, watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    opkit::cache::metadata(Api::all(client.clone()), ours(), writer)
}

/// A watch of the ResourceQuotas that fills `writer`, without their status: the quota
/// controller updates a quota's usage with every pod, and that neither triggers a reconcile nor
/// costs the next one a read (opkit::cache::objects_without_status).
pub fn quotas(
    client: &Client,
    writer: Writer<ResourceQuota>,
) -> impl futures::Stream<Item = Result<ResourceQuota, watcher::Error>> + Send + 'static {
    opkit::cache::objects_without_status(Api::all(client.clone()), ours(), writer, |q| q.status = None)
}

/// A watch of the Deployments that fills `writer`, keeping what the status reads (their
/// status is read, so not metadata only).
pub fn deployments(
    client: &Client,
    writer: Writer<Deployment>,
) -> impl futures::Stream<Item = Result<Deployment, watcher::Error>> + Send + 'static {
    opkit::cache::objects(Api::all(client.clone()), ours(), writer, trim_deployment)
}

/// Drop what neither the status nor the compare-then-write's hint reads from a Deployment: of
/// its spec all but the replicas and the containers' names and images (the status tells a
/// rollout of a new image by them). Its metadata (the hint) and status stay whole.
pub fn trim_deployment(d: &mut Deployment) {
    if let Some(spec) = d.spec.as_mut() {
        spec.strategy = None;
        spec.template.metadata = None;
        if let Some(pod) = spec.template.spec.as_mut() {
            let containers = std::mem::take(&mut pod.containers)
                .into_iter()
                .map(|c| k8s_openapi::api::core::v1::Container { name: c.name, image: c.image, ..Default::default() })
                .collect();
            *pod = PodSpec { containers, ..Default::default() };
        }
    }
    if let Some(s) = d.status.as_mut() {
        for c in s.conditions.iter_mut().flatten() {
            c.last_update_time = None;
        }
    }
}

/// A watch of the previews' pods that fills `writer`, keeping only what the status reads.
pub fn pods(
    client: &Client,
    writer: Writer<Pod>,
) -> impl futures::Stream<Item = Result<Pod, watcher::Error>> + Send + 'static {
    opkit::cache::objects(Api::all(client.clone()), ours(), writer, opkit::cache::trim_pod)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trimmed_deployment_keeps_what_the_status_and_the_hint_read() {
        let pe: vesper_api::PreviewEnvironment = serde_json::from_value(serde_json::json!({
            "apiVersion": "vesper.eventide.dev/v1alpha1", "kind": "PreviewEnvironment",
            "metadata": {"name": "pr-1", "namespace": "team-a", "uid": "u", "creationTimestamp": "2026-11-01T10:00:00Z"},
            "spec": {"image": "shop:2", "replicas": 2}}))
        .expect("a preview");
        let mut d = crate::deployment::deployment(&pe, &crate::Config::default(), "ns");
        d.metadata.generation = Some(3);
        d.metadata.resource_version = Some("42".into());
        d.status = serde_json::from_value(serde_json::json!({"observedGeneration": 3, "replicas": 2,
            "updatedReplicas": 2, "availableReplicas": 2, "readyReplicas": 2,
            "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
                "message": "ok", "lastUpdateTime": "2026-11-01T10:00:05Z"}]}))
        .expect("a status");
        let mut trimmed = d.clone();
        trim_deployment(&mut trimmed);
        assert_eq!(trimmed.metadata, d.metadata, "the compare-then-write's hint reads the metadata");
        assert!(
            serde_json::to_string(&trimmed).expect("json").len() * 2 < serde_json::to_string(&d).expect("json").len()
        );
        let status = |d: &Deployment| {
            crate::status::compute(crate::status::Inputs {
                pe: &pe,
                deployment: Some(d),
                pods: &[],
                namespace: "ns",
                url: None,
                expires_at: jiff::Timestamp::MAX,
                expiry_warning: std::time::Duration::from_secs(60),
                now: "2026-11-01T10:01:00Z".parse().expect("a time"),
            })
        };
        assert_eq!(status(&trimmed), status(&d));
        assert_eq!(status(&trimmed).status.phase, Some(vesper_api::Phase::Ready));
    }

    #[test]
    fn a_trimmed_pod_keeps_what_the_status_reads() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "app-1", "namespace": "pv-a", "labels": {"vesper.eventide.dev/preview-uid": "u"},
                "managedFields": [{"manager": "kubelet"}], "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "app-x", "uid": "r"}]},
            "spec": {"containers": [{"name": "app", "image": "shop:1"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "app", "image": "shop:1", "imageID": "shop@sha256:ab", "ready": true, "restartCount": 0,
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}}, "lastState": {"terminated": {"exitCode": 1}}}]}
        }))
        .expect("a pod");
        let mut trimmed = pod.clone();
        opkit::cache::trim_pod(&mut trimmed);
        assert_eq!(trimmed.spec, Some(PodSpec::default()));
        assert_eq!(trimmed.status.as_ref().and_then(|s| s.pod_ip.clone()), None);
        // What the status step reads is the same for both.
        assert_eq!(
            crate::status::resolved_image(std::slice::from_ref(&pod)),
            crate::status::resolved_image(std::slice::from_ref(&trimmed))
        );
        assert_eq!(crate::status::pod_problem(&[pod]), crate::status::pod_problem(&[trimmed]));
    }
}
