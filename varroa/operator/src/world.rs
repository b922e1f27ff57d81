//! The objects a controller's configuration draws on, kept by reflectors (watch caches), so a
//! reconcile reads them from memory; and the map from a change of one of them to the
//! controllers it reaches.

use futures::{Stream, StreamExt};
use kube::runtime::reflector::{self, ObjectRef, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::pin::Pin;
use std::sync::Arc;
use varroa_api::{
    CatalogItem, ComposedBundle, Controller, ControllerClass, JenkinsRole, JenkinsRoleBinding, JenkinsVersionProfile,
    PodTemplate, ProvisioningDefaults, UpdateCenter,
};
use varroa_config::World;

/// The caches.
#[derive(Clone)]
pub struct WorldStores {
    pub defaults: Store<ProvisioningDefaults>,
    pub classes: Store<ControllerClass>,
    pub profiles: Store<JenkinsVersionProfile>,
    pub bundles: Store<ComposedBundle>,
    pub catalog_items: Store<CatalogItem>,
    pub pod_templates: Store<PodTemplate>,
    pub roles: Store<JenkinsRole>,
    pub bindings: Store<JenkinsRoleBinding>,
    pub update_centers: Store<UpdateCenter>,
}

fn cloned<K: Clone + Resource>(s: &Store<K>) -> Vec<K>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    let mut v: Vec<K> = s.state().iter().map(|o| (**o).clone()).collect();
    v.sort_by_key(|o| (o.meta().namespace.clone(), o.meta().name.clone()));
    v
}

impl WorldStores {
    /// The world a controller in `namespace` sees (fetched remote inputs are added by the
    /// caller).
    pub fn world_for(&self, namespace: &str) -> World {
        let in_ns = |m: &kube::core::ObjectMeta| m.namespace.as_deref() == Some(namespace);
        World {
            defaults: self
                .defaults
                .state()
                .iter()
                .find(|d| d.name_any() == varroa_api::DEFAULTS_NAME)
                .map(|d| (**d).clone()),
            classes: cloned(&self.classes),
            profiles: cloned(&self.profiles),
            bundles: cloned(&self.bundles).into_iter().filter(|o| in_ns(&o.metadata)).collect(),
            catalog_items: cloned(&self.catalog_items).into_iter().filter(|o| in_ns(&o.metadata)).collect(),
            pod_templates: cloned(&self.pod_templates).into_iter().filter(|o| in_ns(&o.metadata)).collect(),
            jenkins_roles: cloned(&self.roles),
            jenkins_role_bindings: cloned(&self.bindings),
            fetched: Default::default(),
        }
    }

    /// Whether every cache has listed once.
    pub async fn wait_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.defaults.wait_until_ready().await?;
        self.classes.wait_until_ready().await?;
        self.profiles.wait_until_ready().await?;
        self.bundles.wait_until_ready().await?;
        self.catalog_items.wait_until_ready().await?;
        self.pod_templates.wait_until_ready().await?;
        self.roles.wait_until_ready().await?;
        self.bindings.wait_until_ready().await?;
        self.update_centers.wait_until_ready().await
    }
}

/// Which controllers a change reaches.
#[derive(Clone, Copy)]
enum Reach {
    /// Every controller (defaults, profiles, Jenkins RBAC, update centers).
    All,
    /// Controllers naming this class.
    Class,
    /// Controllers in the object's namespace.
    Namespace,
}

type Triggers = Pin<Box<dyn Stream<Item = ObjectRef<Controller>> + Send>>;

fn cache<K>(client: &Client, controllers: Store<Controller>, reach: Reach) -> (Store<K>, Triggers)
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store::<K>();
    let api: Api<K> = Api::all(client.clone());
    let stream = reflector(writer, watcher(api, opkit::cache::paged(watcher::Config::default())).default_backoff())
        .touched_objects()
        .filter_map(|r| async move { r.ok() })
        .flat_map(move |obj: K| {
            let name = obj.name_any();
            let ns = obj.namespace();
            let refs: Vec<ObjectRef<Controller>> = controllers
                .state()
                .iter()
                .filter(|c| match reach {
                    Reach::All => true,
                    Reach::Class => c.spec.class_name.as_deref() == Some(name.as_str()),
                    Reach::Namespace => c.namespace() == ns,
                })
                .map(|c| ObjectRef::from_obj(&**c))
                .collect();
            futures::stream::iter(refs)
        });
    (reader, Box::pin(stream))
}

/// Starts the caches; the returned stream yields the controllers each change reaches (it must
/// be polled: it drives the caches).
pub fn start(client: &Client, controllers: Store<Controller>) -> (WorldStores, Triggers) {
    let (defaults, t1) = cache::<ProvisioningDefaults>(client, controllers.clone(), Reach::All);
    let (classes, t2) = cache::<ControllerClass>(client, controllers.clone(), Reach::Class);
    let (profiles, t3) = cache::<JenkinsVersionProfile>(client, controllers.clone(), Reach::All);
    let (bundles, t4) = cache::<ComposedBundle>(client, controllers.clone(), Reach::Namespace);
    let (catalog_items, t5) = cache::<CatalogItem>(client, controllers.clone(), Reach::Namespace);
    let (pod_templates, t6) = cache::<PodTemplate>(client, controllers.clone(), Reach::Namespace);
    let (roles, t7) = cache::<JenkinsRole>(client, controllers.clone(), Reach::All);
    let (bindings, t8) = cache::<JenkinsRoleBinding>(client, controllers.clone(), Reach::All);
    let (update_centers, t9) = cache::<UpdateCenter>(client, controllers, Reach::All);
    let stores = WorldStores {
        defaults,
        classes,
        profiles,
        bundles,
        catalog_items,
        pod_templates,
        roles,
        bindings,
        update_centers,
    };
    let all = futures::stream::select_all(vec![t1, t2, t3, t4, t5, t6, t7, t8, t9]);
    (stores, Box::pin(all))
}

/// Shared handle.
pub type SharedWorld = Arc<WorldStores>;
