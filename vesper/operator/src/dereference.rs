//! The **dereference** steps: what a pass reads, from the watch caches (crate::cache) wherever
//! they hold the answer, from the API server otherwise (at start, before a cache has listed, or
//! when the cache cannot be trusted for the question).

use crate::context::Context;
use crate::error::Result;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, ObjectMeta};
use vesper_api::PreviewEnvironment;

/// The preview's namespace as it is: `None` when it does not exist. The cache answers when it
/// holds the namespace as ours; anything else (absent, or someone else's) is read from the API
/// server before the pass acts on it (a cache may not have seen a deletion or a creation yet).
pub async fn namespace(ctx: &Context, pe: &PreviewEnvironment, name: &str) -> Result<Option<ObjectMeta>> {
    match crate::cache::Caches::meta(&ctx.caches.namespaces, None, name) {
        Some(m) if crate::meta::is_ours(&m, pe) => Ok(Some(m)),
        _ => Ok(Api::<Namespace>::all(ctx.client.clone()).get_opt(name).await?.map(|n| n.metadata)),
    }
}

/// What the status is computed from: the preview's Deployment and its pods.
pub struct Workload {
    pub deployment: Option<Deployment>,
    pub pods: Vec<Pod>,
}

/// The Deployment and pods of the preview in `namespace`. The cached Deployment serves when it
/// is the version this process last wrote or verified; one the cache has not caught up with is
/// read (its spec may have just changed, and the status must not call the old one Ready). The
/// pods come from the cache once it has listed.
pub async fn workload(ctx: &Context, pe: &PreviewEnvironment, namespace: &str) -> Result<Workload> {
    let key = opkit::apply::ObjectKey {
        kind: "Deployment".into(),
        namespace: namespace.to_string(),
        name: crate::deployment::NAME.into(),
    };
    let deployment = match ctx.caches.deployment(namespace, crate::deployment::NAME) {
        Some(d) if ctx.metrics.writes.verified().is_current(&key, &d.metadata) => Some(d),
        _ => Api::<Deployment>::namespaced(ctx.client.clone(), namespace).get_opt(crate::deployment::NAME).await?,
    };
    let uid = pe.uid().unwrap_or_default();
    let pods = match ctx.caches.pods_of(namespace, &uid) {
        Some(pods) => pods,
        None => {
            let selector = format!("{}={uid}", vesper_api::LABEL_PREVIEW_UID);
            let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
            pods.list(&ListParams::default().labels(&selector)).await?.items
        }
    };
    Ok(Workload { deployment, pods })
}
