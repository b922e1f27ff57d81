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
use crate::error::{Blocker, Error, Result};
use crate::metrics::Metrics;
use crate::mite::MiteSource;
use crate::objects::{self, PodInputs};
use crate::status::{self, Inputs};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, DeleteParams, ListParams};
use kube::runtime::controller::{Action, Controller as KubeController};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;
use varroa_api::Controller;
use varroa_api::lifecycle::{LABEL_CONTROLLER, LABEL_MANAGED_BY, MANAGED_BY};

pub use crate::context::{Context, MANAGER, MITES_READY_WAIT, SWEEP_INTERVAL, key_of};

/// Make sure one of the controller's objects is what it should be; a change someone else made is
/// put back and recorded as a Warning Event (`Restored`) on the controller. An existing object of
/// that name that is not the controller's ([`objects::is_ours`]) is left untouched: the pass
/// ends in [`Error::OwnershipConflict`].
async fn ensure<K>(ctx: &Context, c: &Controller, desired: &K) -> Result<()>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
        + crate::cache::Cached,
{
    ensure_replacing(ctx, c, desired, |_| false).await
}

/// [`ensure`], deleting the controller's live object first when `recreate` says a field that
/// cannot be changed must (a RoleBinding's roleRef). The ownership check, the recreate check and
/// the comparison share one read of the live object.
async fn ensure_replacing<K>(
    ctx: &Context,
    c: &Controller,
    desired: &K,
    recreate: impl Fn(&kube::api::DynamicObject) -> bool + Send + Sync,
) -> Result<()>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
        + crate::cache::Cached,
{
    let ns = c.namespace().unwrap_or_default();
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &ns);
    let is_ours = |meta: &kube::api::ObjectMeta| objects::is_ours(meta, c);
    let guard = opkit::apply::Guard { is_ours: &is_ours, recreate: &recreate };
    // The cached metadata: when it is the version verified before, nothing is sent.
    let cached = ctx.caches.meta_of::<K>(&ns, desired.meta().name.as_deref().unwrap_or_default());
    let applied = match ctx.metrics.writes.ensure_cached(&api, desired, MANAGER, &guard, cached.as_ref()).await {
        Ok(applied) => applied,
        Err(opkit::Error::NotOwned { .. }) => {
            let name = desired.meta().name.clone().unwrap_or_default();
            let kind = K::kind(&()).into_owned();
            return Err(Error::OwnershipConflict { kind, namespace: ns, name, detail: String::new() });
        }
        Err(e) => return Err(e.into()),
    };
    if let Some(message) = applied.restore_note() {
        tracing::warn!(controller = %key_of(c), "{message}");
        let note = status::Note { warning: true, reason: "Restored".into(), message };
        ctx.event_related(c, Some(&applied.reference), "Restore", &note).await;
    }
    Ok(())
}

/// Renders the configuration, fetching remote inputs.
async fn render(ctx: &Context, c: &Controller) -> Result<varroa_config::Rendered, Blocker> {
    let ns = c.namespace().unwrap_or_default();
    let mut world = ctx.world.world_for(&ns);
    crate::fetch::fetch_inputs(&ctx.fetcher, c, &mut world, true).await;
    Ok(varroa_config::render(c, &world)?)
}

/// The update site plugins-init downloads from.
fn update_site(ctx: &Context, r: &varroa_config::Rendered) -> Result<String, Blocker> {
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

/// The controller's StatefulSet: the cached one when it is the version this process last wrote
/// or verified, else read (the cache may not have caught up with a write of this pass, and the
/// status must not report the spec before it).
async fn stateful_set(ctx: &Context, c: &Controller) -> Result<Option<StatefulSet>> {
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

async fn read_workload(ctx: &Context, c: &Controller) -> Result<(Option<StatefulSet>, Vec<Pod>)> {
    let ns = c.namespace().unwrap_or_default();
    let live = stateful_set(ctx, c).await?;
    let pods = match ctx.caches.pods_of(&ns, &c.name_any()) {
        Some(pods) => pods,
        None => {
            let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
            let lp = ListParams::default().labels(&format!("{LABEL_CONTROLLER}={}", c.name_any()));
            pods.list(&lp).await.map_err(|e| Error::kube("listing the pods", e))?.items
        }
    };
    Ok((live, pods))
}

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
    let ns = c.namespace().unwrap_or_default();
    let mite = ctx.mites.state(&ns, &c.name_any());

    // 1-2. Configuration and the gateway CA (the first that is missing blocks: the configuration,
    // its update site, the CA).
    let resolved = async {
        let r = render(ctx, c).await?;
        let site = update_site(ctx, &r)?;
        let ca = crate::certs::gateway_ca(ctx).await?;
        Ok::<_, Blocker>((r, ca, site))
    };
    let (r, ca, site) = match resolved.await {
        Ok(v) => v,
        Err(reason) => {
            let (sts, pods) = read_workload(ctx, c).await?;
            let now = jiff::Timestamp::now();
            let inputs = Inputs {
                controller: c,
                rendered: Err(&reason),
                failed: None,
                ingress_conflict: None,
                stateful_set: sts.as_ref(),
                pods: &pods,
                mite: &mite,
                now,
            };
            ctx.finish(c, inputs, false).await?;
            return Err(Error::Blocked(reason));
        }
    };

    // 3. The objects (hibernated: parked at zero until woken).
    let hibernated = hibernating(ctx, c, &r, &mite).await?;
    let pod_inputs = PodInputs { update_site: site, ca_fingerprint: &ca.fingerprint(), hibernated };
    let steps = async {
        ensure(ctx, c, &objects::service_account(c)).await?;
        // roleRef cannot change: a binding to the agents' Role of earlier versions is replaced.
        let binding = objects::agents_role_binding(c);
        let role_ref = serde_json::to_value(&binding.role_ref).unwrap_or_default();
        ensure_replacing(ctx, c, &binding, |live| live.data.get("roleRef") != Some(&role_ref)).await?;
        ensure(ctx, c, &objects::config_map(c, &r)).await?;
        crate::certs::ensure_mite_secret(ctx, c, &ca).await?;
        ensure(ctx, c, &objects::service(c)).await?;
        ensure(ctx, c, &objects::headless_service(c)).await?;
        ensure(ctx, c, &objects::stateful_set(c, &r, &ctx.config, &pod_inputs)).await?;
        let allowlist = &ctx.config.ingress_annotation_allowlist;
        let dropped = objects::dropped_annotations(&r, allowlist);
        if !dropped.is_empty() {
            tracing::info!(controller = %key_of(c), ?dropped, "Ingress annotations not in --ingress-annotation-allowlist left out");
        }
        let desired = objects::ingress(c, &r, allowlist);
        // A host another Controller's Ingress already serves is refused.
        let conflict = match &desired {
            Some(i) => {
                let existing = match ctx.caches.all_ingresses() {
                    Some(cached) => cached,
                    None => {
                        let all: Api<Ingress> = Api::all(ctx.client.clone());
                        let lp = ListParams::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY}"));
                        all.list(&lp).await.map_err(|e| Error::kube("listing Varroa's Ingresses", e))?.items
                    }
                };
                objects::host_conflict(c, i, &existing)
            }
            None => None,
        };
        match (desired, &conflict) {
            (Some(i), None) => ensure(ctx, c, &i).await?,
            _ => {
                let api: Api<Ingress> = Api::namespaced(ctx.client.clone(), &ns);
                // The cache answers once it has listed; before, the Ingress is read.
                let live = if opkit::cache::is_ready(&ctx.caches.ingresses) {
                    ctx.caches.meta_of::<Ingress>(&ns, &c.name_any())
                } else {
                    api.get_opt(&c.name_any())
                        .await
                        .map_err(|e| Error::kube("reading the Ingress", e))?
                        .map(|i| i.metadata)
                };
                if let Some(live) = live
                    && objects::is_ours(&live, c)
                {
                    match api.delete(&c.name_any(), &DeleteParams::default()).await {
                        Ok(_) => ctx.metrics.writes.record("Ingress", opkit::apply::Outcome::Deleted),
                        Err(kube::Error::Api(s)) if s.code == 404 => {}
                        Err(e) => return Err(Error::kube("deleting the Ingress", e)),
                    }
                }
            }
        }
        Ok::<_, Error>(conflict)
    };
    let ingress_conflict = match steps.await {
        Ok(conflict) => conflict,
        Err(e) => {
            let failure = match &e {
                Error::OwnershipConflict { .. } => Some(status::Failure {
                    reason: varroa_api::lifecycle::REASON_OWNERSHIP_CONFLICT.into(),
                    message: e.to_string(),
                }),
                _ => e.refusal().map(|message| status::Failure { reason: "ProvisioningRefused".into(), message }),
            };
            let Some(failure) = failure else { return Err(e) };
            let (sts, pods) = read_workload(ctx, c).await?;
            let inputs = Inputs {
                controller: c,
                rendered: Ok(&r),
                failed: Some(failure),
                ingress_conflict: None,
                stateful_set: sts.as_ref(),
                pods: &pods,
                mite: &mite,
                now: jiff::Timestamp::now(),
            };
            ctx.finish(c, inputs, false).await?;
            ctx.start_dwell(c);
            return Ok(Action::requeue(ctx.config.failed_dwell));
        }
    };

    // 4-5. Cells past their grace; the status.
    let (sts, pods) = read_workload(ctx, c).await?;
    let next_cell_check = replace_stuck_cells(ctx, c, &r, &pods).await?;
    let inputs = Inputs {
        controller: c,
        rendered: Ok(&r),
        failed: None,
        ingress_conflict,
        stateful_set: sts.as_ref(),
        pods: &pods,
        mite: &mite,
        now: jiff::Timestamp::now(),
    };
    ctx.finish(c, inputs, true).await?;
    // 6. The desired configuration, to the mites (reloadable changes reach Jenkins without a
    // restart; restart-class ones rolled the pods above).
    let entry = varroa_link::kv::DesiredEntry {
        digest: r.casc_digest.clone(),
        files: r
            .files
            .iter()
            .filter(|(k, _)| k.as_str() == "jenkins.yaml")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        cells: Some(u32::try_from(r.settings.settings.cells.unwrap_or(1).max(1)).unwrap_or(1)),
    };
    match ctx.mites.publish_desired(&ns, &c.name_any(), entry).await {
        Ok(true) => ctx.metrics.writes.record("DesiredConfiguration", opkit::apply::Outcome::Updated),
        Ok(false) => {}
        Err(e) => return Err(e.into()),
    }
    let mut next = ctx.config.resync_interval;
    if let Some(n) = next_cell_check {
        next = next.min(n);
    }
    Ok(Action::requeue(next))
}

/// Whether the controller is to be parked: it already is (its StatefulSet is marked) and nobody
/// asked to wake it, or its inactivity policy's idle period has passed.
async fn hibernating(
    ctx: &Context,
    c: &Controller,
    r: &varroa_config::Rendered,
    mite: &crate::mite::MiteState,
) -> Result<bool> {
    if c.spec.power_state == varroa_api::PowerState::Stopped || mite.wake_requested {
        return Ok(false);
    }
    let marked = stateful_set(ctx, c)
        .await?
        .is_some_and(|s| s.annotations().contains_key(varroa_api::lifecycle::ANNOTATION_HIBERNATED));
    if marked {
        return Ok(true);
    }
    let idle_after = r
        .settings
        .settings
        .hibernation
        .as_ref()
        .and_then(|h| h.idle_after.as_deref())
        .and_then(|d| crate::config::parse_duration(d).ok());
    Ok(matches!((idle_after, mite.idle_for), (Some(after), Some(idle)) if idle >= after))
}

/// Deletes cells (of a controller with cells above 1) unready for longer than the grace
/// period; returns when to look again.
async fn replace_stuck_cells(
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
    let now = jiff::Timestamp::now();
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
            api.delete(&p.name_any(), &DeleteParams::default())
                .await
                .map_err(|e| Error::kube(format!("replacing cell {}", p.name_any()), e))?;
            ctx.metrics.writes.record("Pod", opkit::apply::Outcome::Deleted);
            let note = status::Note {
                warning: true,
                reason: "CellReplaced".into(),
                message: format!(
                    "cell {} was unready for {}s (grace {}s): replaced",
                    p.name_any(),
                    unready_for.as_secs(),
                    grace.as_secs()
                ),
            };
            ctx.event(c, &note).await;
        } else {
            let left = grace - unready_for;
            next = Some(next.map_or(left, |n| n.min(left)));
        }
    }
    Ok(next)
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
    let (world, world_changes) = crate::world::start(&client, store.clone());
    let mite_changes = mite_stream(mites.changes());
    let (caches, writers) = crate::cache::Caches::new();
    let ctx = Arc::new(Context::new(client.clone(), config, metrics, mites, world.clone(), activity, caches));
    let seen = ctx.clone();
    let watch = watcher(controllers, watcher::Config::default()).inspect(move |e| {
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
    let ca_changes = crate::certs::gateway_ca_changes(client.clone(), &ctx.config);
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
