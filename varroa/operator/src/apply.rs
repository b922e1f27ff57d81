//! The **apply** step: the writes of a pass, in order. [`apply`] destructures [`Desired`], so an
//! object added to it cannot be left unwritten.
//!
//! Every object is compared with what it should be and written only when it differs (opkit's
//! compare-then-write, through the context's kit): a change someone else made is put back (a
//! `Restored` Warning Event on the Controller), and a pass that changes nothing writes nothing.
//! An existing object of the controller's names that is not the controller's
//! ([`crate::objects::is_ours`]) is left untouched: the pass ends in
//! [`Error::OwnershipConflict`].

use crate::context::{Context, key_of};
use crate::desired::Desired;
use crate::error::{Error, Result};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::Ingress;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ObjectMeta};
use std::time::Duration;
use varroa_api::Controller;
use varroa_pki::CertificateAuthority;

/// Write what differs of `desired`: the ServiceAccount, the agents' RoleBinding, the ConfigMap,
/// the mite's certificate Secret (issued from `ca` when missing, expiring or from another CA),
/// the Services, the StatefulSet, and the Ingress (or the deletion of the controller's Ingress
/// when it asks for none, or its host is taken).
pub async fn apply(ctx: &Context, c: &Controller, ca: &CertificateAuthority, desired: Desired) -> Result<()> {
    let Desired {
        service_account,
        agents_role_binding,
        config_map,
        mite_secret,
        service,
        headless_service,
        stateful_set,
        ingress,
        ingress_conflict: _,
        dropped_annotations,
        mite_configuration: _,
    } = desired;
    owned(ctx, c, &service_account).await?;
    // roleRef cannot change: a binding to the agents' Role of earlier versions is replaced.
    let role_ref = serde_json::to_value(&agents_role_binding.role_ref).unwrap_or_default();
    replacing(ctx, c, &agents_role_binding, |live| live.data.get("roleRef") != Some(&role_ref)).await?;
    owned(ctx, c, &config_map).await?;
    crate::certs::ensure_mite_secret(ctx, c, ca, &mite_secret).await?;
    owned(ctx, c, &service).await?;
    owned(ctx, c, &headless_service).await?;
    owned(ctx, c, &stateful_set).await?;
    if !dropped_annotations.is_empty() {
        tracing::info!(controller = %key_of(c), dropped = ?dropped_annotations, "Ingress annotations not in --ingress-annotation-allowlist left out");
    }
    match ingress {
        Some(i) => owned(ctx, c, &i).await,
        None => remove_ingress(ctx, c).await,
    }
}

/// Delete the controller's Ingress, if it has one.
async fn remove_ingress(ctx: &Context, c: &Controller) -> Result<()> {
    let ns = c.namespace().unwrap_or_default();
    let api: Api<Ingress> = Api::namespaced(ctx.client.clone(), &ns);
    // The cache answers once it has listed; before, the Ingress is read.
    let live = if opkit::cache::is_ready(&ctx.caches.ingresses) {
        ctx.caches.meta_of::<Ingress>(&ns, &c.name_any())
    } else {
        api.get_opt(&c.name_any()).await.map_err(|e| Error::kube("reading the Ingress", e))?.map(|i| i.metadata)
    };
    if live.is_some_and(|l| crate::objects::is_ours(&l, c)) {
        ctx.kit.delete(&api, &c.name_any(), &DeleteParams::default()).await.map_err(Error::from_kit)?;
    }
    Ok(())
}

/// Make sure one of the controller's objects is what it should be.
async fn owned<K>(ctx: &Context, c: &Controller, desired: &K) -> Result<()>
where
    K: opkit::apply::NamespacedObject + crate::cache::Cached,
{
    replacing(ctx, c, desired, |_| false).await
}

/// [`owned`], deleting the controller's live object first when `recreate` says a field that
/// cannot be changed must (a RoleBinding's roleRef). The ownership check, the recreate check and
/// the comparison share one read of the live object, or none when the cached metadata is the
/// version verified before.
async fn replacing<K>(
    ctx: &Context,
    c: &Controller,
    desired: &K,
    recreate: impl Fn(&DynamicObject) -> bool + Send + Sync,
) -> Result<()>
where
    K: opkit::apply::NamespacedObject + crate::cache::Cached,
{
    let ns = c.namespace().unwrap_or_default();
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &ns);
    let is_ours = |meta: &ObjectMeta| crate::objects::is_ours(meta, c);
    let guard = opkit::apply::Guard { is_ours: &is_ours, recreate: &recreate };
    let cached = ctx.caches.meta_of::<K>(&ns, desired.meta().name.as_deref().unwrap_or_default());
    match ctx.kit.ensure(c, &api, desired, &guard, cached.as_ref().into()).await {
        Ok(_) => Ok(()),
        Err(opkit::Error::NotOwned { .. }) => Err(Error::OwnershipConflict {
            kind: K::kind(&()).into_owned(),
            namespace: ns,
            name: desired.meta().name.clone().unwrap_or_default(),
            detail: String::new(),
        }),
        Err(e) => Err(e.into()),
    }
}

/// Deletes cells (of a controller with cells above 1) unready for longer than the grace
/// period; returns when to look again.
pub async fn replace_stuck_cells(
    ctx: &Context,
    c: &Controller,
    r: &varroa_config::Rendered,
    pods: &[Pod],
) -> Result<Option<Duration>> {
    let s = &r.settings.settings;
    if s.cells.unwrap_or(1) <= 1 {
        return Ok(None);
    }
    let grace = s
        .cell_unready_grace_period
        .as_deref()
        .and_then(|g| crate::config::parse_duration(g).ok())
        .unwrap_or(ctx.config.cell_unready_grace);
    let now = ctx.kit.clock.now();
    let mut next: Option<Duration> = None;
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &c.namespace().unwrap_or_default());
    for p in pods {
        if p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(ready) =
            p.status.as_ref().and_then(|s| s.conditions.as_ref()).and_then(|cs| cs.iter().find(|x| x.type_ == "Ready"))
        else {
            continue;
        };
        if ready.status == "True" {
            continue;
        }
        let since = ready.last_transition_time.as_ref().map(|t| t.0).unwrap_or(now);
        let unready_for = Duration::from_secs_f64(now.duration_since(since).as_secs_f64().max(0.0));
        if unready_for >= grace {
            ctx.kit.delete(&api, &p.name_any(), &DeleteParams::default()).await.map_err(Error::from_kit)?;
            let note = opkit::events::Note::warning(
                "CellReplaced",
                format!(
                    "cell {} was unready for {}s (grace {}s): replaced",
                    p.name_any(),
                    unready_for.as_secs(),
                    grace.as_secs()
                ),
            );
            ctx.kit.note(c, &note).await;
        } else {
            let left = grace - unready_for;
            next = Some(next.map_or(left, |n| n.min(left)));
        }
    }
    Ok(next)
}
