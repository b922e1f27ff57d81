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
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
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
    /// How a pass writes: owned objects, deletions, the status, Events; and the clock.
    pub kit: opkit::reconcile::Kit<Controller>,
    pub mites: Arc<dyn MiteSource>,
    pub world: WorldStores,
    /// The caches of the controllers' own objects (crate::cache).
    pub caches: crate::cache::Caches,
    pub fetcher: varroa_sources::Fetcher,
    /// The gateway CA, kept current by the watch of its Secret.
    pub gateway_ca: crate::certs::GatewayCa,
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
        // A pass on a cached Controller older than the operator's last status write does not
        // write the same status again, whatever its lastReconciledAt stamp says.
        let same_but_stamp = |a: &ControllerStatus, b: &ControllerStatus| {
            ControllerStatus { last_reconciled_at: None, ..a.clone() }
                == ControllerStatus { last_reconciled_at: None, ..b.clone() }
        };
        let kit =
            opkit::reconcile::Kit::new(client.clone(), MANAGER, metrics.writes.clone(), opkit::clock::Clock::default())
                .comparing_status_with(same_but_stamp);
        let fetcher = crate::fetch::fetcher(&config);
        Context {
            client,
            config,
            metrics,
            kit,
            mites,
            world,
            caches,
            fetcher,
            gateway_ca: Default::default(),
            activity,
            seen: Mutex::default(),
            world_ready,
            failures: opkit::reconcile::Backoff::new(Duration::from_secs(1), Duration::from_secs(300)),
            dwell: Mutex::new(HashMap::new()),
        }
    }

    /// Computes and writes the status; `clean` passes earn a lastReconciledAt. The lifecycle
    /// activity of what the write changed is published, and an Event recorded for each change.
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
        let written = self.kit.write_status(c, &st).await.map_err(Error::from_kit)?;
        if let opkit::status::Written::Replaced(before) = written {
            let changes = crate::activity::changes(before.as_ref(), &st, &causes);
            self.activity.publish(&c.namespace().unwrap_or_default(), &c.name_any(), changes);
        }
        for n in &notes {
            self.kit.note(c, n).await;
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
    /// dwell (by `namespace/name`), the kit's Event series and status writes in flight (by uid),
    /// and the
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
        self.kit.retain(|uid| uids.contains(uid));
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

    /// How many entries this process keeps about controllers (backoff, dwell, the kit's verified
    /// objects, event series and status writes in flight, mite state, controllers seen); zero
    /// once every controller it saw is gone. Also exported as the gauge `varroa_tracked_objects`.
    pub fn tracked_objects(&self) -> usize {
        let n = self.failures.len()
            + self.dwell.lock().map(|m| m.len()).unwrap_or(0)
            + self.kit.tracked()
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
