//! The reconciliation of a Controller and the watches that trigger it. Each pass runs from the
//! top and is safe to repeat:
//!
//! 1. resolve and render the configuration (settings, bundle, profile, agents, RBAC) from the
//!    caches, fetching Git and OCI inputs (the last good revision is kept on a failed fetch);
//! 2. read the gateway CA; without a readable configuration or CA the controller is Blocked: the
//!    status says why, the pass ends in an error (so lastReconciledAt goes stale), and it is
//!    retried with a growing delay;
//! 3. the ServiceAccount, the agents' RoleBinding (to the ClusterRole varroa-jenkins-agents), the
//!    ConfigMap, the mite's certificate Secret (issued again before expiry or when the CA
//!    changed), the Services, the StatefulSet and the Ingress (unless another Controller's
//!    Ingress serves its host), each compared and written only when it differs; an object the
//!    API server refuses (400, 403, 422), or one of its name that is not the controller's
//!    (OwnershipConflict), makes the controller Failed for a dwell;
//! 4. for a controller with cells, replace a cell unready past its grace period;
//! 5. the status (phase, conditions, attention), written only when it changed or when
//!    lastReconciledAt is older than the stamp interval, an Event for every change, and the
//!    lifecycle activity of what the write changed (crate::activity; only with NATS).

use crate::config::Config;
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::mite::MiteSource;
use crate::status::{self, Inputs};
use futures::StreamExt;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller as KubeController};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use std::sync::Arc;
use varroa_api::Controller;
use varroa_api::lifecycle::LABEL_CONTROLLER;

pub use crate::context::{Context, MANAGER, MITES_READY_WAIT, SWEEP_INTERVAL, key_of};

/// The whole reconciliation of one Controller, in order.
async fn reconcile_steps(c: &Controller, ctx: &Context) -> Result<Action> {
    if c.metadata.deletion_timestamp.is_some() {
        // Owner references take everything down with it.
        return Ok(Action::await_change());
    }
    // The caches must have listed once: a class not yet seen is not a missing class.
    let _ = ctx.world_ready.clone().wait_for(|r| *r).await;
    if let Some(left) = ctx.dwelling(c) {
        return Ok(Action::requeue(left));
    }
    // 1-2. The configuration, its update site and the gateway CA; the first that is missing
    // blocks (the status says why, the pass ends in an error).
    let inputs = match crate::dereference::inputs(ctx, c).await? {
        Ok(inputs) => inputs,
        Err(blocked) => {
            let workload = crate::dereference::workload(ctx, c).await?;
            ctx.finish(c, status_inputs(c, Err(&blocked.reason), None, None, &workload, &blocked.mite, ctx), false)
                .await?;
            return Err(Error::Blocked(blocked.reason));
        }
    };
    // 3. Every object, built from the inputs, written in order.
    let desired = crate::desired::build(c, &inputs, &ctx.config);
    let (ingress_conflict, mite_configuration) = (desired.ingress_conflict.clone(), desired.mite_configuration.clone());
    let r = &inputs.rendered;
    if let Err(e) = crate::apply::apply(ctx, c, &inputs.ca, desired).await {
        // Refused by the API server, or not the controller's: Failed for a dwell.
        let failure = match &e {
            Error::OwnershipConflict { .. } => Some(status::Failure {
                reason: varroa_api::lifecycle::REASON_OWNERSHIP_CONFLICT.into(),
                message: e.to_string(),
            }),
            _ => e.refusal().map(|message| status::Failure { reason: "ProvisioningRefused".into(), message }),
        };
        let Some(failure) = failure else { return Err(e) };
        let workload = crate::dereference::workload(ctx, c).await?;
        ctx.finish(c, status_inputs(c, Ok(r), Some(failure), None, &workload, &inputs.mite, ctx), false).await?;
        ctx.start_dwell(c);
        return Ok(Action::requeue(ctx.config.failed_dwell));
    }
    // 4-5. Cells past their grace; the status.
    let workload = crate::dereference::workload(ctx, c).await?;
    let next_cell_check = crate::apply::replace_stuck_cells(ctx, c, r, &workload.pods).await?;
    ctx.finish(c, status_inputs(c, Ok(r), None, ingress_conflict, &workload, &inputs.mite, ctx), true).await?;
    // 6. The desired configuration, to the mites (reloadable changes reach Jenkins without a
    // restart; restart-class ones rolled the pods above).
    let ns = c.namespace().unwrap_or_default();
    if ctx.mites.publish_desired(&ns, &c.name_any(), mite_configuration).await? {
        ctx.metrics.writes.record("DesiredConfiguration", opkit::apply::Outcome::Updated);
    }
    let next = next_cell_check.map_or(ctx.config.resync_interval, |n| n.min(ctx.config.resync_interval));
    Ok(Action::requeue(next))
}

/// What the status of a pass is computed from.
fn status_inputs<'a>(
    c: &'a Controller,
    rendered: std::result::Result<&'a varroa_config::Rendered, &'a crate::error::Blocker>,
    failed: Option<status::Failure>,
    ingress_conflict: Option<String>,
    workload: &'a crate::dereference::Workload,
    mite: &'a crate::mite::MiteState,
    ctx: &Context,
) -> Inputs<'a> {
    Inputs {
        controller: c,
        rendered,
        failed,
        ingress_conflict,
        stateful_set: workload.stateful_set.as_ref(),
        pods: &workload.pods,
        mite,
        now: ctx.kit.clock.now(),
    }
}

/// What ends a reconcile: an [`Error`], or `--reconcile-timeout`.
pub type ReconcileError = opkit::reconcile::ReconcileError<Error>;

/// Reconcile one controller within `--reconcile-timeout`: the steps, metrics, and the error's
/// backoff.
pub async fn reconcile(c: Arc<Controller>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let key = key_of(&c);
    let pass = opkit::reconcile::Pass {
        kind: "Controller",
        key: &key,
        limit: ctx.config.reconcile_timeout,
        metrics: &ctx.metrics.reconcile,
        backoff: &ctx.failures,
    };
    let result = pass.run(Error::metric_label, reconcile_steps(&c, &ctx)).await;
    ctx.tracked_objects();
    result
}

/// Retry a failed or timed-out controller with a growing delay (1s doubling to 5m).
pub fn error_policy(c: Arc<Controller>, _err: &ReconcileError, ctx: Arc<Context>) -> Action {
    Action::requeue(ctx.failures.next(&key_of(&c)))
}

fn controller_of<K: Resource>(obj: &K) -> Option<ObjectRef<Controller>> {
    let name = obj.meta().labels.as_ref()?.get(LABEL_CONTROLLER)?;
    Some(ObjectRef::new(name).within(obj.meta().namespace.as_deref()?))
}

/// Run the controller until `shutdown` resolves.
pub async fn run(
    client: Client,
    config: Config,
    metrics: Arc<Metrics>,
    mites: Arc<dyn MiteSource>,
    activity: crate::activity::Publisher,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let controllers: Api<Controller> = Api::all(client.clone());
    let limits = kube::runtime::controller::Config::default().concurrency(config.max_concurrent_reconciles);
    // The Controllers' watch as kube's Controller::new makes it, with a look at each event on
    // the way (deletions are lifecycle activity).
    let (store, writer) = kube::runtime::reflector::store();
    // The phase gauge counts from this cache.
    metrics.controllers.attach(store.clone());
    let (world, world_changes) = crate::world::start(&client, store.clone());
    let mite_changes = mite_stream(mites.changes());
    let (caches, writers) = crate::cache::Caches::new();
    let ctx = Arc::new(Context::new(client.clone(), config, metrics, mites, world.clone(), activity, caches));
    let seen = ctx.clone();
    // Without their managedFields (nothing reads them; they are much of a Controller's size in
    // the cache).
    let watch = watcher(controllers, opkit::cache::paged(watcher::Config::default()))
        .modify(|c| c.managed_fields_mut().clear())
        .inspect(move |e| {
            if let Ok(e) = e {
                seen.observe(e);
            }
        });
    let kc = KubeController::for_stream(kube::runtime::reflector(writer, watch).applied_objects(), store.clone())
        .with_config(limits);
    let triggers = futures::stream::select(world_changes, mite_changes);
    // Controllers have no finalizer: what is kept about deleted ones is dropped by a sweep
    // against the controller's cache (complete once it has listed).
    let sweeper = {
        let (ctx, store) = (ctx.clone(), store.clone());
        async move {
            if store.wait_until_ready().await.is_err() {
                return std::future::pending::<()>().await;
            }
            let mut tick = tokio::time::interval(SWEEP_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                ctx.sweep(&store.state());
            }
        }
    };
    // A new gateway CA reissues every certificate and rolls every pod at once.
    let ca_changes = crate::certs::gateway_ca_changes(client.clone(), &ctx.config, ctx.gateway_ca.clone());
    // The controller's objects: each watch fills a cache (crate::cache) and triggers its owner.
    let s = crate::cache::streams(&client, writers);
    let controller = kc
        .owns_stream(s.stateful_sets)
        .owns_stream(s.config_maps)
        .owns_stream(s.services)
        .owns_stream(s.service_accounts)
        .owns_stream(s.role_bindings)
        .owns_stream(s.ingresses)
        .watches_stream(s.pods, |p| controller_of(&p))
        .reconcile_on(triggers)
        .reconcile_all_on(ca_changes)
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "controller");
            }
        });
    tokio::select! {
        () = controller => {}
        () = sweeper => {}
    }
}

fn mite_stream(
    rx: tokio::sync::broadcast::Receiver<(String, String)>,
) -> std::pin::Pin<Box<dyn futures::Stream<Item = ObjectRef<Controller>> + Send>> {
    Box::pin(futures::stream::unfold(rx, |mut rx| async move {
        loop {
            match rx.recv().await {
                Ok((ns, name)) => return Some((ObjectRef::new(&name).within(&ns), rx)),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
            }
        }
    }))
}
