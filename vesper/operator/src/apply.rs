//! The **apply** step: the writes of a pass, in the seed's order. [`apply`] destructures
//! [`Desired`], so an object added to it cannot be left unwritten.
//!
//! Every object is compared with what it should be and written only when it differs
//! (opkit's compare-then-write, through the context's kit): a hand edit is restored (with a
//! `Restored` Warning Event), and a pass that changes nothing writes nothing. An object of a
//! name Vesper uses that Vesper did not make for this preview is never touched: the pass stops
//! with [`Error::Conflict`], which the controller turns into the status `NamespaceConflict`.

use crate::cache::Caches;
use crate::context::Context;
use crate::desired::Desired;
use crate::error::{Error, Result};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::networking::v1::Ingress;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ObjectMeta};
use opkit::apply::Hint;
use vesper_api::PreviewEnvironment;

/// Write what differs of `desired`: the namespace (whose live metadata, `None` when absent, the
/// pass has read), then the quota, the limits and the NetworkPolicy, and only then the
/// Deployment, the Service and the Ingress (or the deletion of an Ingress of ours when there is
/// no preview domain any more).
pub async fn apply(
    ctx: &Context,
    pe: &PreviewEnvironment,
    live_namespace: Option<&ObjectMeta>,
    desired: Desired,
) -> Result<()> {
    let Desired { namespace, quota, limits, network_policy, deployment, service, ingress } = desired;
    let ns = namespace.name_any();
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    let made = ctx
        .kit
        .ensure(pe, &namespaces, &namespace, &opkit::apply::Guard::ANY, live_namespace.into())
        .await
        .map_err(Error::Apply)?;
    // In a namespace this pass created, nothing can exist yet: each object is created without
    // a read first. Otherwise the cache's metadata is the hint.
    let new = made.outcome == opkit::apply::Outcome::Created;
    let (c, at) = (&ctx.caches, Some(ns.as_str()));
    // Before any pod: a failure here leaves the Deployment unwritten.
    let quota_hint = c.quota_hint(&ns);
    let hint = match &quota_hint {
        _ if new => Hint::New,
        Some((meta, content)) => Hint::Whole(meta, *content),
        None => Hint::Unknown,
    };
    ensure_owned(ctx, pe, &ns, &quota, hint).await?;
    owned(ctx, pe, &ns, &limits, new, Caches::meta(&c.limits, at, crate::quota::LIMIT_RANGE_NAME)).await?;
    owned(ctx, pe, &ns, &network_policy, new, Caches::meta(&c.policies, at, crate::networkpolicy::NAME)).await?;
    // The workload and its routes.
    let cached_deployment = c.deployment(&ns, crate::deployment::NAME).map(|d| d.metadata);
    owned(ctx, pe, &ns, &deployment, new, cached_deployment).await?;
    owned(ctx, pe, &ns, &service, new, Caches::meta(&c.services, at, crate::service::NAME)).await?;
    let cached_ingress = Caches::meta(&c.ingresses, at, crate::ingress::NAME);
    match ingress {
        Some(ingress) => owned(ctx, pe, &ns, &ingress, new, cached_ingress).await?,
        None => {
            if cached_ingress.is_some_and(|i| crate::meta::is_ours(&i, pe)) {
                let api: Api<Ingress> = Api::namespaced(ctx.client.clone(), &ns);
                ctx.kit.delete(&api, crate::ingress::NAME, &DeleteParams::default()).await.map_err(Error::Write)?;
            }
        }
    }
    Ok(())
}

/// Make sure an object in the preview's namespace is what it should be: one that is not this
/// preview's is refused ([`Error::Conflict`]); otherwise it is written only when it differs.
/// `new`: its namespace was created by this pass, so it cannot exist yet and is created without a
/// read. Otherwise, when `cached` (its metadata in the watch cache) is the version verified
/// before, nothing is sent; else the ownership check and the comparison share one read.
async fn owned<K>(
    ctx: &Context,
    pe: &PreviewEnvironment,
    namespace: &str,
    desired: &K,
    new: bool,
    cached: Option<ObjectMeta>,
) -> Result<()>
where
    K: opkit::apply::NamespacedObject,
{
    let hint = if new { Hint::New } else { cached.as_ref().into() };
    ensure_owned(ctx, pe, namespace, desired, hint).await
}

/// [`owned`] with the hint made.
async fn ensure_owned<K>(
    ctx: &Context,
    pe: &PreviewEnvironment,
    namespace: &str,
    desired: &K,
    hint: Hint<'_>,
) -> Result<()>
where
    K: opkit::apply::NamespacedObject,
{
    let api: Api<K> = Api::namespaced(ctx.client.clone(), namespace);
    let is_ours = |meta: &ObjectMeta| crate::meta::is_ours(meta, pe);
    let guard = opkit::apply::Guard { is_ours: &is_ours, recreate: &|_| false };
    match ctx.kit.ensure(pe, &api, desired, &guard, hint).await {
        Ok(_) => Ok(()),
        Err(opkit::Error::NotOwned { .. }) => Err(Error::Conflict {
            kind: K::kind(&()).into_owned(),
            namespace: namespace.into(),
            name: desired.meta().name.clone().unwrap_or_default(),
        }),
        Err(e) => Err(Error::Apply(e)),
    }
}
