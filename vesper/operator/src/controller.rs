//! The reconciliation of a preview and the watches that trigger it. Each reconciliation runs the
//! same steps from the top and is safe to repeat (the seed's flowchart):
//!
//! 1. being deleted? delete the namespace, wait until it is gone, remove the finalizer;
//! 2. otherwise add the finalizer; TTL passed? phase Expired, delete the preview;
//! 3. the namespace (labelled with the preview's UID and Pod Security `restricted`);
//! 4. a namespace or object Vesper did not create? phase Failed, reason NamespaceConflict, and
//!    check again after 1s, doubling to 5 minutes (its deletion wakes no watch of ours);
//! 5. ResourceQuota and LimitRange, then the NetworkPolicy (all before any pod can run);
//! 6. the Deployment, the Service, the Ingress (when there is a preview domain);
//! 7. the status, then come back when the TTL (or its warning) is due.
//!
//! Every object is compared with what it should be and written only when it differs, so a hand
//! edit is restored and a reconcile that changes nothing writes nothing. The first step that
//! fails ends the run: the Ready condition says why (ReconcileError) and the preview is retried
//! with a growing delay.

use crate::cache::{self, Caches};
use crate::error::{Error, Result};
use crate::status;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{LimitRange, Namespace, Pod, ResourceQuota, Service};
use k8s_openapi::api::networking::v1::{Ingress, NetworkPolicy};
use kube::api::{Api, DeleteParams, ListParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;
use vesper_api::PreviewEnvironment;

pub use crate::context::{Context, MANAGER, key_of};

/// Make sure an object in the preview's namespace is what it should be: refuse to touch one
/// that is not Vesper's, write only when it differs. `cached` is the object's metadata in the
/// watch cache: when it is the version verified before, nothing is sent; otherwise the
/// ownership check and the comparison share one read of the live object.
async fn ensure_owned<K>(
    ctx: &Context,
    pe: &PreviewEnvironment,
    namespace: &str,
    desired: &K,
    cached: Option<kube::api::ObjectMeta>,
) -> Result<opkit::apply::Applied>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned,
{
    let api: Api<K> = Api::namespaced(ctx.client.clone(), namespace);
    let is_ours = |meta: &kube::api::ObjectMeta| crate::meta::is_ours(meta, pe);
    let guard = opkit::apply::Guard { is_ours: &is_ours, recreate: &|_| false };
    match ctx.metrics.writes.ensure_cached(&api, desired, MANAGER, &guard, cached.as_ref()).await {
        Ok(applied) => {
            ctx.restored(pe, &applied).await;
            Ok(applied)
        }
        Err(opkit::Error::NotOwned { .. }) => Err(Error::Conflict {
            kind: K::kind(&()).into_owned(),
            namespace: namespace.into(),
            name: desired.meta().name.clone().unwrap_or_default(),
        }),
        Err(e) => Err(e.into()),
    }
}

/// The whole reconciliation of one preview.
async fn reconcile_steps(pe: &PreviewEnvironment, ctx: &Context) -> Result<Action> {
    // 1. Being deleted?
    if pe.metadata.deletion_timestamp.is_some() {
        return crate::finalizer::cleanup(pe, ctx).await;
    }
    // 2. The finalizer; the TTL.
    crate::finalizer::ensure(pe, ctx).await?;
    let now = ctx.clock.now();
    let expires_at = match crate::ttl::expires_at(pe) {
        Ok(t) => t,
        Err(e) => {
            ctx.apply(pe, status::failed(pe, "InvalidSpec", &e.to_string(), now)).await?;
            return Ok(Action::await_change());
        }
    };
    if now >= expires_at {
        ctx.apply(pe, status::expired(pe, expires_at, now)).await?;
        if ctx.first_expiry(pe) {
            ctx.metrics.expirations.inc();
        }
        let api: Api<PreviewEnvironment> = Api::namespaced(ctx.client.clone(), &pe.namespace().unwrap_or_default());
        match api.delete(&pe.name_any(), &DeleteParams::default()).await {
            Ok(_) => ctx.metrics.writes.record("PreviewEnvironment", opkit::apply::Outcome::Deleted),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
        return Ok(Action::await_change());
    }
    // 3/4. The namespace, ours or a conflict.
    let ns_name = crate::naming::namespace_name(&pe.namespace().unwrap_or_default(), &pe.name_any());
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    // The cache says whose the namespace is; anything but "ours" (absent, or someone else's) is
    // read from the API server before acting on it.
    let live = match Caches::meta(&ctx.caches.namespaces, None, &ns_name) {
        Some(m) if crate::meta::is_ours(&m, pe) => Some(m),
        _ => namespaces.get_opt(&ns_name).await?.map(|n| n.metadata),
    };
    if let Some(live) = &live {
        if !crate::meta::is_ours(live, pe) {
            let msg = format!(
                "namespace {ns_name} exists and was not created by Vesper for this preview (it lacks the label {}={}); Vesper does not touch it: delete it or rename the preview",
                vesper_api::LABEL_PREVIEW_UID,
                pe.uid().unwrap_or_default()
            );
            ctx.apply(pe, status::failed(pe, "NamespaceConflict", &msg, now)).await?;
            return Ok(Action::requeue(ctx.blocked_retry(&key_of(pe))));
        }
        if live.deletion_timestamp.is_some() {
            return Ok(Action::requeue(Duration::from_secs(5)));
        }
    }
    let desired_ns = crate::namespace::namespace(pe, &ns_name);
    let applied = ctx
        .metrics
        .writes
        .ensure_cached(&namespaces, &desired_ns, MANAGER, &opkit::apply::Guard::ANY, live.as_ref())
        .await?;
    ctx.restored(pe, &applied).await;
    // 5. Quota, limits, network isolation: before any pod.
    let cfg = &ctx.config;
    let c = &ctx.caches;
    let ns = Some(ns_name.as_str());
    let guarded = async {
        let quota = crate::quota::resource_quota(pe, cfg, &ns_name)?;
        ensure_owned(ctx, pe, &ns_name, &quota, Caches::meta(&c.quotas, ns, crate::quota::QUOTA_NAME)).await?;
        let limits = crate::quota::limit_range(pe, cfg, &ns_name);
        ensure_owned(ctx, pe, &ns_name, &limits, Caches::meta(&c.limits, ns, crate::quota::LIMIT_RANGE_NAME)).await?;
        let hosts = ctx.hosts.get();
        let policy = crate::networkpolicy::network_policy(pe, cfg, &ns_name, &hosts);
        ensure_owned(ctx, pe, &ns_name, &policy, Caches::meta(&c.policies, ns, crate::networkpolicy::NAME)).await?;
        // 6. The workload and its routes.
        let cached_dep = c.deployment(&ns_name, crate::deployment::NAME);
        let deployment = crate::deployment::deployment(pe, cfg, &ns_name);
        ensure_owned(ctx, pe, &ns_name, &deployment, cached_dep.as_ref().map(|d| d.metadata.clone())).await?;
        let service = crate::service::service(pe, &ns_name);
        ensure_owned(ctx, pe, &ns_name, &service, Caches::meta(&c.services, ns, crate::service::NAME)).await?;
        let host = crate::ingress::host(pe, cfg);
        match &host {
            Some(h) => {
                let ingress = crate::ingress::ingress(pe, cfg, &ns_name, h);
                ensure_owned(ctx, pe, &ns_name, &ingress, Caches::meta(&c.ingresses, ns, crate::ingress::NAME)).await?;
            }
            None => {
                if let Some(i) = Caches::meta(&c.ingresses, ns, crate::ingress::NAME)
                    && crate::meta::is_ours(&i, pe)
                {
                    let ingresses: Api<Ingress> = Api::namespaced(ctx.client.clone(), &ns_name);
                    match ingresses.delete(crate::ingress::NAME, &DeleteParams::default()).await {
                        Ok(_) => ctx.metrics.writes.record("Ingress", opkit::apply::Outcome::Deleted),
                        Err(kube::Error::Api(s)) if s.code == 404 => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }
        Ok::<_, Error>((host, cached_dep))
    };
    let (host, cached_dep) = match guarded.await {
        Ok(h) => h,
        Err(Error::Conflict { kind, namespace, name }) => {
            let msg = format!(
                "{kind} {name:?} in namespace {namespace:?} exists and was not created by Vesper for this preview; Vesper does not touch it: delete it"
            );
            ctx.apply(pe, status::failed(pe, "NamespaceConflict", &msg, now)).await?;
            return Ok(Action::requeue(ctx.blocked_retry(&key_of(pe))));
        }
        Err(e) => return Err(e),
    };
    ctx.blocked.reset(&key_of(pe));
    // 7. Status, from what the Deployment and its pods report. The cached Deployment serves
    // when it is the version just verified or written; one the cache has not caught up with is
    // read (its spec may have just changed, and the status must not call the old one Ready).
    let key = opkit::apply::ObjectKey {
        kind: "Deployment".into(),
        namespace: ns_name.clone(),
        name: crate::deployment::NAME.into(),
    };
    let dep = match cached_dep {
        Some(d) if ctx.metrics.writes.verified().is_current(&key, &d.metadata) => Some(d),
        _ => Api::<Deployment>::namespaced(ctx.client.clone(), &ns_name).get_opt(crate::deployment::NAME).await?,
    };
    let uid = pe.uid().unwrap_or_default();
    let pod_list = match ctx.caches.pods_of(&ns_name, &uid) {
        Some(pods) => pods,
        None => {
            let selector = format!("{}={uid}", vesper_api::LABEL_PREVIEW_UID);
            let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns_name);
            pods.list(&ListParams::default().labels(&selector)).await?.items
        }
    };
    let computed = status::compute(status::Inputs {
        pe,
        deployment: dep.as_ref(),
        pods: &pod_list,
        namespace: &ns_name,
        url: host.map(|h| format!("https://{h}")),
        expires_at,
        expiry_warning: ctx.config.expiry_warning,
        now,
    });
    ctx.apply(pe, computed).await?;
    Ok(Action::requeue(crate::ttl::next_wakeup(now, expires_at, ctx.config.expiry_warning)))
}

/// What ends a reconcile: an [`Error`], or `--reconcile-timeout`.
pub type ReconcileError = opkit::reconcile::ReconcileError<Error>;

/// Reconcile one preview within `--reconcile-timeout`: the steps, metrics, and on failure the
/// Ready condition saying why.
pub async fn reconcile(pe: Arc<PreviewEnvironment>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let key = key_of(&pe);
    let pass = opkit::reconcile::Pass {
        kind: "PreviewEnvironment",
        key: &key,
        limit: ctx.config.reconcile_timeout,
        metrics: &ctx.metrics.reconcile,
        backoff: &ctx.failures,
    };
    let result = pass.run(Error::metric_label, reconcile_steps(&pe, &ctx)).await;
    if let Err(e) = &result
        && pe.metadata.deletion_timestamp.is_none()
        && let Err(e2) = ctx.apply(&pe, status::reconcile_error(&pe, &e.to_string(), ctx.clock.now())).await
    {
        tracing::warn!(preview = %key, error = %e2, "could not record the error in the status");
    }
    ctx.tracked_objects();
    result
}

/// Retry a failed or timed-out preview with a growing delay (1s doubling to 5m); an error in
/// its spec is not retried (the status says what to fix, and a new generation reconciles it
/// again).
pub fn error_policy(pe: Arc<PreviewEnvironment>, err: &ReconcileError, ctx: Arc<Context>) -> Action {
    if err.failed().is_some_and(Error::is_invalid_spec) {
        return Action::await_change();
    }
    Action::requeue(ctx.failures.next(&key_of(&pe)))
}

/// The preview an object made for it belongs to.
fn owner<K: Resource>(obj: &K) -> Option<ObjectRef<PreviewEnvironment>> {
    let (ns, name) = crate::meta::preview_of(obj.meta())?;
    Some(ObjectRef::new(&name).within(&ns))
}

/// Run the controller until `shutdown` resolves: previews, and the objects made for them
/// (found across namespaces by label), and the cluster's addresses (every preview's
/// NetworkPolicy follows them).
pub async fn run(
    ctx: Arc<Context>,
    writers: crate::cache::Writers,
    address_changes: tokio::sync::watch::Receiver<u64>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let client = ctx.client.clone();
    let w = writers;
    let changes = futures::stream::unfold(address_changes, |mut rx| async move {
        rx.changed().await.ok()?;
        Some(((), rx))
    });
    let limits = kube::runtime::controller::Config::default().concurrency(ctx.config.max_concurrent_reconciles);
    // The previews, without their managedFields (nothing reads them; they are most of a preview's
    // size in the cache).
    let (previews, preview_writer) = kube::runtime::reflector::store();
    let preview_stream = watcher(Api::<PreviewEnvironment>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .modify(|pe| pe.managed_fields_mut().clear())
        .reflect(preview_writer)
        .applied_objects();
    // What the operator makes for previews: each watch fills a cache (crate::cache) and triggers
    // the preview it belongs to.
    Controller::for_stream(preview_stream, previews)
        .with_config(limits)
        .watches_stream(cache::metadata::<Namespace>(&client, w.namespaces), |o| owner(&o))
        .watches_stream(cache::metadata::<ResourceQuota>(&client, w.quotas), |o| owner(&o))
        .watches_stream(cache::metadata::<LimitRange>(&client, w.limits), |o| owner(&o))
        .watches_stream(cache::metadata::<NetworkPolicy>(&client, w.policies), |o| owner(&o))
        .watches_stream(cache::deployments(&client, w.deployments), |o| owner(&o))
        .watches_stream(cache::metadata::<Service>(&client, w.services), |o| owner(&o))
        .watches_stream(cache::metadata::<Ingress>(&client, w.ingresses), |o| owner(&o))
        .watches_stream(cache::pods(&client, w.pods), |o| owner(&o))
        .reconcile_all_on(changes)
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "controller");
            }
        })
        .await;
}
