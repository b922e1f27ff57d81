//! The watch caches a reconcile reads the controller's own objects from, instead of asking the
//! API server (ADR-0009, opkit::cache). Each watch (by the label
//! `app.kubernetes.io/managed-by=varroa`, or for pods the controller label) also triggers the
//! Controller it belongs to:
//!
//! - metadata only for the ServiceAccount, the RoleBinding, the ConfigMap and the Services: the
//!   compare-then-write reads one only when its cached metadata is not the version it verified;
//! - whole objects (without `managedFields`) for the StatefulSet and the pods, whose state the
//!   status reads (trimmed to it: a StatefulSet's pod template and a pod's spec are dropped), and
//!   the Ingresses, whose hosts another Controller's Ingress may not take.
//!
//! Nothing waits for a cache: what one does not hold yet is read from the API server.

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{ObjectMeta, PartialObjectMeta};
use kube::runtime::reflector::{self, ObjectRef, Store, store::Writer};
use kube::runtime::watcher;
use kube::{Api, Client, Resource};
use varroa_api::lifecycle::{LABEL_CONTROLLER, LABEL_MANAGED_BY, MANAGED_BY};

/// The stores of the watched kinds.
#[derive(Clone)]
pub struct Caches {
    pub service_accounts: Store<PartialObjectMeta<ServiceAccount>>,
    pub role_bindings: Store<PartialObjectMeta<RoleBinding>>,
    pub config_maps: Store<PartialObjectMeta<ConfigMap>>,
    pub services: Store<PartialObjectMeta<Service>>,
    pub ingresses: Store<Ingress>,
    pub stateful_sets: Store<StatefulSet>,
    pub pods: Store<Pod>,
}

/// The writing halves of [`Caches`], consumed by the watches of `controller::run`.
pub struct Writers {
    pub service_accounts: Writer<PartialObjectMeta<ServiceAccount>>,
    pub role_bindings: Writer<PartialObjectMeta<RoleBinding>>,
    pub config_maps: Writer<PartialObjectMeta<ConfigMap>>,
    pub services: Writer<PartialObjectMeta<Service>>,
    pub ingresses: Writer<Ingress>,
    pub stateful_sets: Writer<StatefulSet>,
    pub pods: Writer<Pod>,
}

impl Caches {
    /// Empty stores and the writers that fill them.
    pub fn new() -> (Caches, Writers) {
        let (service_accounts, wsa) = reflector::store();
        let (role_bindings, wrb) = reflector::store();
        let (config_maps, wcm) = reflector::store();
        let (services, wsv) = reflector::store();
        let (ingresses, wing) = reflector::store();
        let (stateful_sets, wsts) = reflector::store();
        let (pods, wpod) = reflector::store();
        (
            Caches { service_accounts, role_bindings, config_maps, services, ingresses, stateful_sets, pods },
            Writers {
                service_accounts: wsa,
                role_bindings: wrb,
                config_maps: wcm,
                services: wsv,
                ingresses: wing,
                stateful_sets: wsts,
                pods: wpod,
            },
        )
    }

    /// The cached metadata of `K` `name` in `namespace`, for the kinds cached whole or by
    /// metadata: the compare-then-write's hint.
    pub fn meta_of<K: Cached>(&self, namespace: &str, name: &str) -> Option<ObjectMeta> {
        K::lookup(self, namespace, name)
    }

    /// The pods of controller `name` in `namespace`; `None` until the pod cache has listed.
    pub fn pods_of(&self, namespace: &str, name: &str) -> Option<Vec<Pod>> {
        if !opkit::cache::is_ready(&self.pods) {
            return None;
        }
        let pods = self.pods.state_filter(|p| {
            p.meta().namespace.as_deref() == Some(namespace)
                && p.meta().labels.as_ref().and_then(|l| l.get(LABEL_CONTROLLER)).map(String::as_str) == Some(name)
        });
        Some(pods.into_iter().map(|p| (*p).clone()).collect())
    }

    /// The cached StatefulSet `name` in `namespace`.
    pub fn stateful_set(&self, namespace: &str, name: &str) -> Option<StatefulSet> {
        self.stateful_sets.get(&ObjectRef::new(name).within(namespace)).map(|s| (*s).clone())
    }

    /// Every Ingress Varroa made; `None` until the cache has listed.
    pub fn all_ingresses(&self) -> Option<Vec<Ingress>> {
        if !opkit::cache::is_ready(&self.ingresses) {
            return None;
        }
        Some(self.ingresses.state().into_iter().map(|i| (*i).clone()).collect())
    }
}

/// A kind whose objects [`Caches`] holds.
pub trait Cached {
    fn lookup(caches: &Caches, namespace: &str, name: &str) -> Option<ObjectMeta>;
}

macro_rules! cached {
    ($kind:ty, $field:ident) => {
        impl Cached for $kind {
            fn lookup(caches: &Caches, namespace: &str, name: &str) -> Option<ObjectMeta> {
                opkit::cache::meta_of(&caches.$field, Some(namespace), name)
            }
        }
    };
}
cached!(ServiceAccount, service_accounts);
cached!(RoleBinding, role_bindings);
cached!(ConfigMap, config_maps);
cached!(Service, services);
cached!(Ingress, ingresses);
cached!(StatefulSet, stateful_sets);

/// Drop what neither the status nor the compare-then-write's hint reads from a StatefulSet: of
/// its spec all but the replicas (the pod template is most of its size). Its metadata (the hint,
/// the hibernation marker) and status stay whole.
pub fn trim_stateful_set(s: &mut StatefulSet) {
    if let Some(spec) = s.spec.as_mut() {
        *spec =
            StatefulSetSpec { replicas: spec.replicas, service_name: spec.service_name.take(), ..Default::default() };
    }
}

/// The watch configuration of what Varroa makes: its label.
pub fn ours() -> watcher::Config {
    watcher::Config::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY}"))
}

/// The triggers and caches of every kind, for `controller::run`.
pub struct Streams<A, B, C, D, E, F, G> {
    pub service_accounts: A,
    pub role_bindings: B,
    pub config_maps: C,
    pub services: D,
    pub ingresses: E,
    pub stateful_sets: F,
    pub pods: G,
}

/// The watches that fill `w`, each a stream of the objects it saw change or go.
#[allow(clippy::type_complexity)]
pub fn streams(
    client: &Client,
    w: Writers,
) -> Streams<
    impl futures::Stream<Item = Result<PartialObjectMeta<ServiceAccount>, watcher::Error>> + Send + 'static,
    impl futures::Stream<Item = Result<PartialObjectMeta<RoleBinding>, watcher::Error>> + Send + 'static,
    impl futures::Stream<Item = Result<PartialObjectMeta<ConfigMap>, watcher::Error>> + Send + 'static,
    impl futures::Stream<Item = Result<PartialObjectMeta<Service>, watcher::Error>> + Send + 'static,
    impl futures::Stream<Item = Result<Ingress, watcher::Error>> + Send + 'static,
    impl futures::Stream<Item = Result<StatefulSet, watcher::Error>> + Send + 'static,
    impl futures::Stream<Item = Result<Pod, watcher::Error>> + Send + 'static,
> {
    let c = client;
    Streams {
        service_accounts: opkit::cache::metadata(Api::all(c.clone()), ours(), w.service_accounts),
        role_bindings: opkit::cache::metadata(Api::all(c.clone()), ours(), w.role_bindings),
        config_maps: opkit::cache::metadata(Api::all(c.clone()), ours(), w.config_maps),
        services: opkit::cache::metadata(Api::all(c.clone()), ours(), w.services),
        ingresses: opkit::cache::objects(Api::all(c.clone()), ours(), w.ingresses, |_| {}),
        stateful_sets: opkit::cache::objects(Api::all(c.clone()), ours(), w.stateful_sets, trim_stateful_set),
        pods: opkit::cache::objects(
            Api::all(c.clone()),
            watcher::Config::default().labels(LABEL_CONTROLLER),
            w.pods,
            opkit::cache::trim_pod,
        ),
    }
}
