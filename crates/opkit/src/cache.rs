//! Watch caches of the objects an operator owns, which its reconciles read instead of asking the
//! API server (ADR-0009): each watch fills a reflector store and yields the objects it saw change
//! or go, as the trigger stream of kube's `Controller::watches_stream`/`owns_stream`.
//!
//! - [`metadata`]: metadata only (`PartialObjectMeta`), for objects whose content the reconcile
//!   compares with a read of its own, and only when the cached metadata says the object changed
//!   since it was last verified ([`ensure_cached`](crate::apply::ensure_cached));
//! - [`objects`]: whole objects, for those whose status the reconcile reads, trimmed by the
//!   caller to what it reads.
//!
//! Every list behind a cache is read in pages of [`LIST_PAGE`] objects (kube's default is 500):
//! a page is decoded whole, managedFields and all, before the trim, so with the nine lists of
//! a starting operator at once the page size sets the peak of its memory (ADR-0009).
//!
//! `managedFields` are dropped from everything cached: they are the largest part of most objects
//! and a reconcile never reads them from a cache (the compare-then-write reads its own).
//!
//! Reconciles must not wait for a cache: the watches that fill the stores are polled by the same
//! controller, which stops polling them while its reconciles are all busy. An object a cache does
//! not hold (yet) is read from the API server instead ([`is_ready`] tells a cache that has listed
//! from one that has not), so a cache that has not listed, at start or for a kind the operator's
//! RBAC does not let it list, costs reads, never a wrong answer.

use std::fmt::Debug;
use std::hash::Hash;

use futures::Stream;
use kube::api::{ObjectMeta, PartialObjectMeta};
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;

/// How many objects one page of a cache's list holds. Smaller than kube's default of 500: the
/// Varroa operator restarting with 500 Controllers held 141 MiB of decoded list pages at its
/// peak with pages of 500, and its peak resident size fell from 194 to 93 MiB with pages of
/// 100 and to 75 MiB with pages of 50, for the same restart time (docs/benchmarks.md).
pub const LIST_PAGE: u32 = 50;

/// `config`, listing in pages of [`LIST_PAGE`]: for every watch an operator runs.
pub fn paged(config: watcher::Config) -> watcher::Config {
    config.page_size(LIST_PAGE)
}

/// A metadata-only watch of `api`'s objects that `config` selects, filling `writer`; yields each
/// object it saw change or go.
pub fn metadata<K>(
    api: Api<PartialObjectMeta<K>>,
    config: watcher::Config,
    writer: Writer<PartialObjectMeta<K>>,
) -> impl Stream<Item = Result<PartialObjectMeta<K>, watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    watcher(api, paged(config))
        .default_backoff()
        .modify(|o| o.managed_fields_mut().clear())
        .reflect(writer)
        .touched_objects()
}

/// A watch of `api`'s objects that `config` selects, each passed through `trim` (after its
/// `managedFields` are dropped) before it fills `writer`; yields each object it saw change or go.
pub fn objects<K>(
    api: Api<K>,
    config: watcher::Config,
    writer: Writer<K>,
    mut trim: impl FnMut(&mut K) + Send + 'static,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    watcher(api, paged(config))
        .default_backoff()
        .modify(move |o| {
            o.managed_fields_mut().clear();
            trim(o);
        })
        .reflect(writer)
        .touched_objects()
}

/// [`objects`], for a kind whose status the reconcile does not read: each object's status is
/// dropped before it fills `writer`, and the stream yields an object only when what an operator
/// owns of it changed (its content, labels, annotations, owner references, finalizers, deletion:
/// [`significant_digest`]), when it is new, or when it goes. A status update (a ResourceQuota's
/// usage, moved by every pod) fills the cache and triggers no reconcile; the cached content
/// lets the compare-then-write see it needs no request either
/// ([`Hint::Whole`](crate::apply::Hint::Whole)).
pub fn objects_without_status<K>(
    api: Api<K>,
    config: watcher::Config,
    writer: Writer<K>,
    clear_status: fn(&mut K),
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + serde::Serialize + Debug + Send + Sync + 'static,
{
    use futures::StreamExt;
    type Key = (Option<String>, String);
    let key = |o: &K| (o.meta().namespace.clone(), o.meta().name.clone().unwrap_or_default());
    let mut last: std::collections::HashMap<Key, u64> = Default::default();
    let mut listed: std::collections::HashSet<Key> = Default::default();
    watcher(api, paged(config))
        .default_backoff()
        .modify(move |o| {
            o.managed_fields_mut().clear();
            clear_status(o);
        })
        .reflect(writer)
        .filter_map(move |event| {
            let out = match event {
                Ok(watcher::Event::Init) => {
                    listed.clear();
                    None
                }
                Ok(watcher::Event::InitApply(o)) | Ok(watcher::Event::Apply(o)) => {
                    let k = key(&o);
                    listed.insert(k.clone());
                    let digest = significant_digest(&o);
                    (last.insert(k, digest) != Some(digest)).then_some(Ok(o))
                }
                Ok(watcher::Event::InitDone) => {
                    // Objects gone while the watch was down: forget them.
                    last.retain(|k, _| listed.contains(k));
                    listed.clear();
                    None
                }
                Ok(watcher::Event::Delete(o)) => {
                    last.remove(&key(&o));
                    Some(Ok(o))
                }
                Err(e) => Some(Err(e)),
            };
            futures::future::ready(out)
        })
}

/// What an operator owns of an object, as one digest: its content
/// ([`content_digest`](crate::apply::content_digest)), labels, annotations, owner references,
/// finalizers and whether it is being deleted.
pub fn significant_digest<K: Resource + serde::Serialize>(o: &K) -> u64 {
    use std::hash::Hasher;
    let m = o.meta();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    crate::apply::content_digest(&serde_json::to_value(o).unwrap_or_default()).hash(&mut h);
    (&m.labels, &m.annotations, &m.finalizers, m.deletion_timestamp.is_some()).hash(&mut h);
    serde_json::to_string(&m.owner_references).unwrap_or_default().hash(&mut h);
    h.finish()
}

/// Drop from a pod what an operator's status never reads from it, for a pod cache: its spec,
/// owner references and generated name, and of its status all but the phase, the conditions and
/// the container states (name, image, imageID, ready, restart count, state, last state), of its
/// containers and of its init containers. Both operators cache their pods so (Vesper reads the
/// app container's state and image, Varroa the jenkins and plugins-init containers').
pub fn trim_pod(p: &mut k8s_openapi::api::core::v1::Pod) {
    use k8s_openapi::api::core::v1::{ContainerStatus, PodSpec};
    let trim = |c: &mut ContainerStatus| {
        c.allocated_resources = None;
        c.allocated_resources_status = None;
        c.resources = None;
        c.volume_mounts = None;
        c.user = None;
        c.container_id = None;
    };
    p.metadata.owner_references = None;
    p.metadata.generate_name = None;
    p.spec = Some(PodSpec::default());
    if let Some(s) = p.status.as_mut() {
        s.host_ip = None;
        s.host_ips = None;
        s.pod_ip = None;
        s.pod_ips = None;
        s.ephemeral_container_statuses = None;
        s.message = None;
        s.nominated_node_name = None;
        s.qos_class = None;
        s.resource_claim_statuses = None;
        s.start_time = None;
        s.container_statuses.iter_mut().flatten().for_each(trim);
        s.init_container_statuses.iter_mut().flatten().for_each(trim);
    }
}

/// Whether a store has had its first full list, without waiting. (kube's store readiness keeps
/// one waiter: do not use this on a store some task awaits `wait_until_ready` on.)
pub fn is_ready<K>(store: &Store<K>) -> bool
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    futures::FutureExt::now_or_never(store.wait_until_ready()).is_some_and(|r| r.is_ok())
}

/// The cached metadata of `name` (in `namespace`, for a namespaced kind): the hint of
/// [`ensure_cached`](crate::apply::ensure_cached). `None` when the store does not hold it.
pub fn meta_of<K>(store: &Store<K>, namespace: Option<&str>, name: &str) -> Option<ObjectMeta>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let mut r = ObjectRef::new(name);
    if let Some(ns) = namespace {
        r = r.within(ns);
    }
    store.get(&r).map(|o| o.meta().clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::PartialObjectMetaExt;
    use kube::runtime::reflector;

    #[test]
    fn a_store_is_ready_after_its_first_list_and_serves_metadata() {
        let (store, mut writer) = reflector::store::<PartialObjectMeta<ConfigMap>>();
        assert!(!is_ready(&store));
        let cm = ObjectMeta {
            name: Some("app".into()),
            namespace: Some("team-a".into()),
            resource_version: Some("7".into()),
            ..Default::default()
        }
        .into_response_partial::<ConfigMap>();
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitApply(cm));
        assert!(!is_ready(&store), "ready only once the list is complete");
        writer.apply_watcher_event(&watcher::Event::InitDone);
        assert!(is_ready(&store));
        let meta = meta_of(&store, Some("team-a"), "app").expect("cached");
        assert_eq!(meta.resource_version.as_deref(), Some("7"));
        assert!(meta_of(&store, Some("team-b"), "app").is_none());
    }
}
