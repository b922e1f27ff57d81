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
//! The steps are a pipeline (ADR-0009): **dereference** (crate::dereference: reads, from the
//! watch caches), **build** (crate::desired: every object, pure), **apply** (crate::apply: the
//! writes, in this order), **status** (crate::status: pure), each written through the context's
//! kit (opkit::reconcile::Kit).
//!
//! Every object is compared with what it should be and written only when it differs, so a hand
//! edit is restored and a reconcile that changes nothing writes nothing. The first step that
//! fails ends the run: the Ready condition says why (ReconcileError) and the preview is retried
//! with a growing delay.

use crate::cache;
use crate::error::{Error, Result};
use crate::status;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{LimitRange, Namespace, Service};
use k8s_openapi::api::networking::v1::{Ingress, NetworkPolicy};
use kube::api::{Api, DeleteParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use std::sync::Arc;
use std::time::Duration;
use vesper_api::PreviewEnvironment;

pub use crate::context::{Context, MANAGER, key_of};

/// The whole reconciliation of one preview, in the flowchart's order.
async fn reconcile_steps(pe: &PreviewEnvironment, ctx: &Context) -> Result<Action> {
    // 1. Being deleted?
    if pe.metadata.deletion_timestamp.is_some() {
        return crate::finalizer::cleanup(pe, ctx).await;
    }
    // 2. The finalizer; the TTL.
    crate::finalizer::ensure(pe, ctx).await?;
    let now = ctx.kit.clock.now();
    let expires_at = match crate::ttl::expires_at(pe) {
        Ok(t) => t,
        Err(e) => {
            ctx.apply(pe, status::failed(pe, "InvalidSpec", &e.to_string(), now)).await?;
            return Ok(Action::await_change());
        }
    };
    if now >= expires_at {
        return expire(pe, ctx, expires_at, now).await;
    }
    // 3/4. The namespace: absent, ours, someone else's, or going away.
    let ns = crate::naming::namespace_name(&pe.namespace().unwrap_or_default(), &pe.name_any());
    let live = crate::dereference::namespace(ctx, pe, &ns).await?;
    if let Some(live) = &live {
        if !crate::meta::is_ours(live, pe) {
            let msg = format!(
                "namespace {ns} exists and was not created by Vesper for this preview (it lacks the label {}={}); Vesper does not touch it: delete it or rename the preview",
                vesper_api::LABEL_PREVIEW_UID,
                pe.uid().unwrap_or_default()
            );
            return conflict(pe, ctx, &msg, now).await;
        }
        if live.deletion_timestamp.is_some() {
            return Ok(Action::requeue(Duration::from_secs(5)));
        }
    }
    // 5/6. Every object, built from the spec, written in order: quota, limits and network
    // isolation before any pod; the workload and its routes.
    let desired = crate::desired::build(pe, &ctx.config, &ns, &ctx.hosts.get())?;
    let url = desired.url();
    match crate::apply::apply(ctx, pe, live.as_ref(), desired).await {
        Ok(()) => ctx.blocked.reset(&key_of(pe)),
        Err(Error::Conflict { kind, namespace, name }) => {
            let msg = format!(
                "{kind} {name:?} in namespace {namespace:?} exists and was not created by Vesper for this preview; Vesper does not touch it: delete it"
            );
            return conflict(pe, ctx, &msg, now).await;
        }
        Err(e) => return Err(e),
    }
    // 7. The status, from what the Deployment and its pods report; come back when the TTL (or
    // its warning) is due.
    let workload = crate::dereference::workload(ctx, pe, &ns).await?;
    let computed = status::compute(status::Inputs {
        pe,
        deployment: workload.deployment.as_ref(),
        pods: &workload.pods,
        namespace: &ns,
        url,
        expires_at,
        expiry_warning: ctx.config.expiry_warning,
        now,
    });
    ctx.apply(pe, computed).await?;
    Ok(Action::requeue(crate::ttl::next_wakeup(now, expires_at, ctx.config.expiry_warning)))
}

/// The TTL passed: phase Expired, and the preview deleted (its finalizer then deletes the
/// namespace).
async fn expire(
    pe: &PreviewEnvironment,
    ctx: &Context,
    expires_at: jiff::Timestamp,
    now: jiff::Timestamp,
) -> Result<Action> {
    ctx.apply(pe, status::expired(pe, expires_at, now)).await?;
    if ctx.first_expiry(pe) {
        ctx.metrics.expirations.inc();
    }
    let api: Api<PreviewEnvironment> = Api::namespaced(ctx.client.clone(), &pe.namespace().unwrap_or_default());
    ctx.kit.delete(&api, &pe.name_any(), &DeleteParams::default()).await.map_err(Error::Write)?;
    Ok(Action::await_change())
}

/// A namespace or object of the preview's is not Vesper's: phase Failed (NamespaceConflict),
/// and a look again after a growing delay (its deletion wakes no watch of ours).
async fn conflict(pe: &PreviewEnvironment, ctx: &Context, message: &str, now: jiff::Timestamp) -> Result<Action> {
    ctx.apply(pe, status::failed(pe, "NamespaceConflict", message, now)).await?;
    Ok(Action::requeue(ctx.blocked_retry(&key_of(pe))))
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
        && let Err(e2) = ctx.apply(&pe, status::reconcile_error(&pe, &e.to_string(), ctx.kit.clock.now())).await
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
    // The phase gauge counts from this cache.
    ctx.metrics.previews.attach(previews.clone());
    let preview_stream =
        watcher(Api::<PreviewEnvironment>::all(client.clone()), opkit::cache::paged(watcher::Config::default()))
            .default_backoff()
            .modify(|pe| pe.managed_fields_mut().clear())
            .reflect(preview_writer)
            .applied_objects();
    // What the operator makes for previews: each watch fills a cache (crate::cache) and triggers
    // the preview it belongs to.
    Controller::for_stream(preview_stream, previews)
        .with_config(limits)
        .watches_stream(cache::metadata::<Namespace>(&client, w.namespaces), |o| owner(&o))
        .watches_stream(cache::quotas(&client, w.quotas), |o| owner(&o))
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
