//! The **dereference** steps: what a pass reads, from the watch caches (crate::world,
//! crate::cache) wherever they hold the answer, from the API server otherwise.
//!
//! [`inputs`] reads what the build needs: the configuration (resolved and rendered from the
//! cached ComposedBundles, profiles, classes, defaults and Jenkins RBAC, with remote inputs
//! fetched), its update site, the gateway CA, the mite's state, the StatefulSet (whose marker
//! says the controller is parked) and, when the controller asks for an Ingress, Varroa's
//! Ingresses (another Controller may serve its host). [`workload`] reads, after the writes, the
//! StatefulSet and pods the status is computed from.

use crate::context::Context;
use crate::error::{Blocker, Error, Result};
use crate::mite::MiteState;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::Ingress;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use varroa_api::Controller;
use varroa_api::lifecycle::{LABEL_CONTROLLER, LABEL_MANAGED_BY, MANAGED_BY};
use varroa_pki::CertificateAuthority;

/// What a pass knows before it builds anything.
pub struct Inputs {
    pub rendered: varroa_config::Rendered,
    /// The update site plugins-init downloads from.
    pub update_site: String,
    pub ca: std::sync::Arc<CertificateAuthority>,
    pub mite: MiteState,
    /// The controller's StatefulSet as it is (`None`: not created yet).
    pub stateful_set: Option<StatefulSet>,
    /// Varroa's Ingresses in every namespace; read only when the controller asks for an Ingress.
    pub ingresses: Vec<Ingress>,
}

/// Why a pass cannot build: the controller is Blocked, and the mite state (for its status).
pub struct Blocked {
    pub reason: Blocker,
    pub mite: MiteState,
}

/// The inputs of `c`'s build. The first that is missing blocks, in this order: the
/// configuration, its update site, the gateway CA.
pub async fn inputs(ctx: &Context, c: &Controller) -> Result<std::result::Result<Inputs, Blocked>> {
    let mite = ctx.mites.state(&c.namespace().unwrap_or_default(), &c.name_any());
    let resolved = async {
        let rendered = render(ctx, c).await?;
        let update_site = update_site(ctx, &rendered)?;
        let ca = crate::certs::gateway_ca(ctx).await?;
        Ok::<_, Blocker>((rendered, update_site, ca))
    };
    let (rendered, update_site, ca) = match resolved.await {
        Ok(v) => v,
        Err(reason) => return Ok(Err(Blocked { reason, mite })),
    };
    let stateful_set = stateful_set(ctx, c).await?;
    let ingresses = match crate::objects::ingress(c, &rendered, &ctx.config.ingress_annotation_allowlist) {
        Some(_) => ingresses(ctx).await?,
        None => Vec::new(),
    };
    Ok(Ok(Inputs { rendered, update_site, ca, mite, stateful_set, ingresses }))
}

/// Renders the configuration, fetching remote inputs (the last good revision is kept on a failed
/// fetch).
async fn render(ctx: &Context, c: &Controller) -> std::result::Result<varroa_config::Rendered, Blocker> {
    let ns = c.namespace().unwrap_or_default();
    let mut world = ctx.world.world_for(&ns);
    crate::fetch::fetch_inputs(&ctx.fetcher, c, &mut world, true).await;
    Ok(varroa_config::render(c, &world)?)
}

/// The update site plugins-init downloads from: the settings' UpdateCenter's, else the flag's.
fn update_site(ctx: &Context, r: &varroa_config::Rendered) -> std::result::Result<String, Blocker> {
    match &r.settings.settings.update_center {
        None => Ok(ctx.config.default_update_site.clone()),
        Some(name) => ctx
            .world
            .update_centers
            .state()
            .iter()
            .find(|u| u.name_any() == *name)
            .map(|u| u.spec.url.clone())
            .ok_or_else(|| Blocker::UnknownUpdateCenter { name: name.clone() }),
    }
}

/// Varroa's Ingresses in every namespace: from the cache once it has listed, else listed.
async fn ingresses(ctx: &Context) -> Result<Vec<Ingress>> {
    match ctx.caches.all_ingresses() {
        Some(cached) => Ok(cached),
        None => {
            let all: Api<Ingress> = Api::all(ctx.client.clone());
            let lp = ListParams::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY}"));
            Ok(all.list(&lp).await.map_err(|e| Error::kube("listing Varroa's Ingresses", e))?.items)
        }
    }
}

/// The controller's StatefulSet: the cached one when it is the version this process last wrote
/// or verified, else read (the cache may not have caught up with a write of this pass, and the
/// status must not report the spec before it).
pub async fn stateful_set(ctx: &Context, c: &Controller) -> Result<Option<StatefulSet>> {
    let ns = c.namespace().unwrap_or_default();
    let key = opkit::apply::ObjectKey { kind: "StatefulSet".into(), namespace: ns.clone(), name: c.name_any() };
    if let Some(cached) = ctx.caches.stateful_set(&ns, &c.name_any())
        && ctx.metrics.writes.verified().is_current(&key, &cached.metadata)
    {
        return Ok(Some(cached));
    }
    let sts: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), &ns);
    sts.get_opt(&c.name_any()).await.map_err(|e| Error::kube("reading the StatefulSet", e))
}

/// What the status is computed from: the StatefulSet and the controller's pods.
pub struct Workload {
    pub stateful_set: Option<StatefulSet>,
    pub pods: Vec<Pod>,
}

/// The StatefulSet (as [`stateful_set`] reads it) and the pods, from the cache once it has
/// listed.
pub async fn workload(ctx: &Context, c: &Controller) -> Result<Workload> {
    let ns = c.namespace().unwrap_or_default();
    let stateful_set = stateful_set(ctx, c).await?;
    let pods = match ctx.caches.pods_of(&ns, &c.name_any()) {
        Some(pods) => pods,
        None => {
            let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
            let lp = ListParams::default().labels(&format!("{LABEL_CONTROLLER}={}", c.name_any()));
            pods.list(&lp).await.map_err(|e| Error::kube("listing the pods", e))?.items
        }
    };
    Ok(Workload { stateful_set, pods })
}
