//! What every reconcile of a Controller shares ([`Context`]): the client, the flags, the caches,
//! the mite source, metrics, events, and the state kept between passes (failures and their
//! back-off, Failed dwells, the last status written), swept when controllers go. The pipeline
//! that uses it is crate::controller; crate::certs issues the mites' certificates with it. Both
//! depend on this module and not on each other (the controller/certs cycle is gone).

use crate::config::Config;
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::mite::MiteSource;
use crate::status::{self, Inputs};
use crate::world::WorldStores;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use varroa_api::{Controller, ControllerStatus};

/// The field manager of everything the operator writes.
pub const MANAGER: &str = "varroa-operator";

/// What every reconcile shares.
pub struct Context {
    pub client: Client,
    pub config: Config,
    pub metrics: Arc<Metrics>,
    pub events: opkit::events::EventPublisher,
    pub mites: Arc<dyn MiteSource>,
    pub world: WorldStores,
    /// The caches of the controllers' own objects (crate::cache).
    pub caches: crate::cache::Caches,
    pub fetcher: varroa_sources::Fetcher,
    /// The lifecycle activity (published on NATS, or nowhere).
    pub activity: crate::activity::Publisher,
    /// The Controllers the watch has shown, to tell a deletion (only with activity on).
    pub(crate) seen: Mutex<crate::activity::Seen>,
    /// True once every cache has listed (set by one task: kube's store readiness wakes only one
    /// waiter, so concurrent reconciles must not wait on it directly).
    pub(crate) world_ready: tokio::sync::watch::Receiver<bool>,
    /// Failed reconciles and their retry delay (1s doubling to 5m).
    pub(crate) failures: opkit::reconcile::Backoff,
    /// Failed controllers and when their dwell ends.
    pub(crate) dwell: Mutex<HashMap<String, (Instant, Option<i64>)>>,
    /// The last status written per controller (by uid), with the resourceVersion it was written
    /// over: a pass that runs on a cached object older than that write (the watch has not
    /// delivered it yet) does not write the same status again.
    pub(crate) written: Mutex<HashMap<String, (String, ControllerStatus)>>,
}

impl Context {
    pub fn new(
        client: Client,
        config: Config,
        metrics: Arc<Metrics>,
        mites: Arc<dyn MiteSource>,
        world: WorldStores,
        activity: crate::activity::Publisher,
        caches: crate::cache::Caches,
    ) -> Context {
        let (tx, world_ready) = tokio::sync::watch::channel(false);
        let w = world.clone();
        let m = mites.clone();
        tokio::spawn(async move {
            if w.wait_ready().await.is_ok() {
                // The mite source's first copy too (bounded: NATS may be away), so that a
                // restarted operator does not report a connected controller as Running (and
                // publish it) before it has read the mites' state.
                if tokio::time::timeout(MITES_READY_WAIT, m.ready()).await.is_err() {
                    tracing::warn!(
                        "the mite source did not deliver its state within {MITES_READY_WAIT:?}; reconciling without it"
                    );
                }
                let _ = tx.send(true);
            }
        });
        let events = opkit::events::EventPublisher::new(client.clone(), MANAGER, std::env::var("POD_NAME").ok());
        let fetcher = crate::fetch::fetcher(&config);
        Context {
            client,
            config,
            metrics,
            events,
            mites,
            world,
            caches,
            fetcher,
            activity,
            seen: Mutex::default(),
            world_ready,
            failures: opkit::reconcile::Backoff::new(Duration::from_secs(1), Duration::from_secs(300)),
            dwell: Mutex::new(HashMap::new()),
            written: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) async fn event(&self, c: &Controller, note: &status::Note) {
        self.event_related(c, None, "Reconcile", note).await
    }

    /// [`Context::event`], also about a `related` object (the one restored, say).
    pub(crate) async fn event_related(
        &self,
        c: &Controller,
        related: Option<&k8s_openapi::api::core::v1::ObjectReference>,
        action: &str,
        note: &status::Note,
    ) {
        use opkit::events::EventType;
        let r = c.object_ref(&());
        let type_ = if note.warning { EventType::Warning } else { EventType::Normal };
        let res = self.events.publish_related(&r, related, type_, &note.reason, action, Some(&note.message)).await;
        match res {
            Ok(()) => self.metrics.writes.record("Event", opkit::apply::Outcome::Created),
            Err(e) => tracing::warn!(controller = %key_of(c), error = %e, "could not record an event"),
        }
    }

    /// Writes the status when it differs from the stored one (server-side apply on /status).
    /// Returns the stored status the write replaced (`Some(None)`: the Controller had none), or
    /// `None` when nothing was written.
    pub(crate) async fn write_status(
        &self,
        c: &Controller,
        status: &ControllerStatus,
    ) -> Result<Option<Option<ControllerStatus>>> {
        if c.status.as_ref() == Some(status) {
            return Ok(None);
        }
        let uid = c.uid().unwrap_or_default();
        let rv = c.resource_version().unwrap_or_default();
        let same_but_stamp = |a: &ControllerStatus, b: &ControllerStatus| {
            ControllerStatus { last_reconciled_at: None, ..a.clone() }
                == ControllerStatus { last_reconciled_at: None, ..b.clone() }
        };
        // The stored status: this object's, unless it predates our own last write over it (the
        // watch has not delivered that write yet).
        let mut stored = c.status.clone();
        if let Ok(w) = self.written.lock()
            && let Some((over, last)) = w.get(&uid)
            && *over == rv
        {
            if same_but_stamp(last, status) {
                // This object predates our last write of this very status: nothing to do.
                return Ok(None);
            }
            stored = Some(last.clone());
        }
        let api: Api<Controller> = Api::namespaced(self.client.clone(), &c.namespace().unwrap_or_default());
        let body = serde_json::json!({
            "apiVersion": "varroa.dev/v1alpha1",
            "kind": "Controller",
            "status": serde_json::to_value(status).map_err(|e| Error::Serialize("status", e))?,
        });
        match api.patch_status(&c.name_any(), &PatchParams::apply(MANAGER).force(), &Patch::Apply(&body)).await {
            Ok(_) => {}
            // Deleted since this pass read it: there is no status left to write, and the sweep
            // forgets what was kept about it.
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(None),
            Err(e) => return Err(Error::kube(format!("writing the status of {}", key_of(c)), e)),
        }
        self.metrics.writes.record("ControllerStatus", opkit::apply::Outcome::Updated);
        if let Ok(mut w) = self.written.lock() {
            w.insert(uid, (rv, status.clone()));
        }
        Ok(Some(stored))
    }

    /// Computes and writes the status; `clean` passes earn a lastReconciledAt.
    pub(crate) async fn finish(&self, c: &Controller, inputs: Inputs<'_>, clean: bool) -> Result<()> {
        let old = c.status.clone().unwrap_or_default();
        let (mut st, notes) = status::compute(&inputs, old.last_reconciled_at.clone());
        if clean {
            let stale = old.last_reconciled_at.as_ref().is_none_or(|t| {
                let age = inputs.now.duration_since(t.0);
                age.as_secs_f64() >= self.config.stamp_interval.as_secs_f64()
            });
            if stale || st != old {
                st.last_reconciled_at = Some(Time(inputs.now));
            }
        }
        let causes = crate::activity::Causes::of(c, inputs.mite, inputs.rendered.as_ref().ok().copied());
        if let Some(before) = self.write_status(c, &st).await? {
            let changes = crate::activity::changes(before.as_ref(), &st, &causes);
            self.activity.publish(&c.namespace().unwrap_or_default(), &c.name_any(), changes);
        }
        self.metrics.controllers.set(&c.uid().unwrap_or_default(), st.phase);
        for n in &notes {
            self.event(c, n).await;
        }
        Ok(())
    }

    /// Follows the Controllers' watch: a deleted controller is published (with activity on).
    pub(crate) fn observe(&self, event: &watcher::Event<Controller>) {
        if !self.activity.is_on() {
            return;
        }
        let gone = match self.seen.lock() {
            Ok(mut s) => s.observe(event),
            Err(_) => return,
        };
        for (ns, name) in gone {
            self.activity.deleted(&ns, &name);
        }
    }

    /// The time left of a Failed controller's dwell (ended by a new generation).
    pub(crate) fn dwelling(&self, c: &Controller) -> Option<Duration> {
        let mut d = self.dwell.lock().ok()?;
        let key = key_of(c);
        let (until, generation) = *d.get(&key)?;
        if generation != c.metadata.generation || Instant::now() >= until {
            d.remove(&key);
            return None;
        }
        Some(until - Instant::now())
    }

    pub(crate) fn start_dwell(&self, c: &Controller) {
        if let Ok(mut d) = self.dwell.lock() {
            d.insert(key_of(c), (Instant::now() + self.config.failed_dwell, c.metadata.generation));
        }
    }

    /// Drop everything kept about controllers that are gone: `live` is every Controller that
    /// exists (the controller's cache). Controllers have no finalizer, so a deleted one is never
    /// reconciled again; [`run`] calls this every [`SWEEP_INTERVAL`] instead. Dropped: backoff and
    /// dwell (by `namespace/name`), the last status written and the phase (by uid), and the
    /// verified objects of the controller's namespace named `<name>` or `<name>-...` when no live
    /// controller there has that name (forgetting one too many costs one dry run, never a write).
    pub fn sweep(&self, live: &[Arc<Controller>]) {
        let before = self.tracked_objects();
        let keys: std::collections::HashSet<String> = live.iter().map(|c| key_of(c)).collect();
        let uids: std::collections::HashSet<String> = live.iter().filter_map(|c| c.uid()).collect();
        self.failures.retain(|k| keys.contains(k));
        if let Ok(mut d) = self.dwell.lock() {
            d.retain(|k, _| keys.contains(k));
            shrink(&mut d);
        }
        if let Ok(mut w) = self.written.lock() {
            w.retain(|uid, _| uids.contains(uid));
            shrink(&mut w);
        }
        self.metrics.controllers.retain(|uid| uids.contains(uid));
        self.events.retain_objects(|uid| uids.contains(uid));
        let live_keys: std::collections::HashSet<(String, String)> =
            live.iter().map(|c| (c.namespace().unwrap_or_default(), c.name_any())).collect();
        self.mites.sweep(&live_keys);
        // An object name `a-b-c` may belong to the controller `a-b-c`, `a-b` or `a`.
        let owned_by_live = |ns: &str, name: &str| {
            let mut candidate = name;
            loop {
                if keys.contains(&format!("{ns}/{candidate}")) {
                    return true;
                }
                match candidate.rfind('-') {
                    Some(i) => candidate = &candidate[..i],
                    None => return false,
                }
            }
        };
        self.metrics.writes.verified().forget(|k| !owned_by_live(&k.namespace, &k.name));
        let after = self.tracked_objects();
        // Many controllers went: hand their memory back instead of keeping the peak.
        if before > after + RELEASE_AFTER_DROPPED {
            opkit::process::release_freed_memory();
        }
    }

    /// How many entries this process keeps about controllers (backoff, dwell, last status
    /// written, phase, verified objects, event series); zero once every controller it saw is gone. Also
    /// exported as the gauge `varroa_tracked_objects`.
    pub fn tracked_objects(&self) -> usize {
        let n = self.failures.len()
            + self.dwell.lock().map(|m| m.len()).unwrap_or(0)
            + self.written.lock().map(|m| m.len()).unwrap_or(0)
            + self.metrics.controllers.len()
            + self.metrics.writes.verified().len()
            + self.events.tracked_series()
            + self.mites.tracked()
            + self.seen.lock().map(|s| s.len()).unwrap_or(0);
        self.metrics.tracked_objects.set(i64::try_from(n).unwrap_or(i64::MAX));
        n
    }
}

/// Give a map's spare capacity back once most of it is unused (a map keeps its largest size).
fn shrink<K: std::hash::Hash + Eq, V>(m: &mut HashMap<K, V>) {
    if m.capacity() > 4 * m.len().max(16) {
        m.shrink_to_fit();
    }
}

/// How many entries a sweep must drop before it returns freed memory to the system.
const RELEASE_AFTER_DROPPED: usize = 256;

/// How long the first reconciles wait for the mite source's first copy of the mites' state.
pub const MITES_READY_WAIT: Duration = Duration::from_secs(10);

/// How often state kept about deleted controllers is dropped (see [`Context::sweep`]).
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(10);

pub fn key_of(c: &Controller) -> String {
    format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any())
}
