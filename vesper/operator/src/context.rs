//! What every reconcile of a preview shares: the client, the flags, the caches, the metrics and
//! events, and what the process keeps per preview (back-off, blocked retries, expiries). The
//! reconcile steps (controller.rs) and the deletion path (finalizer.rs) both use it; it uses
//! neither, so the two do not depend on each other.

use crate::config::Config;
use crate::error::Result;
use crate::hostaddresses::HostAddresses;
use crate::metrics::Metrics;
use crate::status::{self, Computed};
use kube::{Client, ResourceExt};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use vesper_api::PreviewEnvironment;

/// The field manager of everything the operator writes.
pub const MANAGER: &str = "vesper-operator";

/// What every reconcile shares.
pub struct Context {
    pub client: Client,
    pub config: Config,
    pub hosts: HostAddresses,
    pub metrics: Arc<Metrics>,
    /// How a pass writes: owned objects, deletions, the status, Events; and the clock.
    pub kit: opkit::reconcile::Kit<PreviewEnvironment>,
    /// The watch caches reconciles read from (crate::cache).
    pub caches: crate::cache::Caches,
    /// Failed reconciles and their retry delay (1s doubling to 5m).
    pub(crate) failures: opkit::reconcile::Backoff,
    /// UIDs of previews this process has expired and not yet released, so an expiry is counted
    /// once however many reconciles see it before the deletion lands.
    expired: Mutex<std::collections::HashSet<String>>,
    /// Previews blocked by a namespace or object Vesper did not create, and how often they were
    /// checked again: someone else's object carries none of Vesper's labels, so its deletion
    /// wakes no watch, and the preview is retried on a growing delay instead.
    pub(crate) blocked: opkit::reconcile::Backoff,
}

impl Context {
    pub fn new(
        client: Client,
        config: Config,
        hosts: HostAddresses,
        metrics: Arc<Metrics>,
        clock: opkit::clock::Clock,
        caches: crate::cache::Caches,
    ) -> Context {
        let kit = opkit::reconcile::Kit::new(client.clone(), MANAGER, metrics.writes.clone(), clock);
        Context {
            client,
            config,
            hosts,
            metrics,
            kit,
            caches,
            failures: opkit::reconcile::Backoff::new(Duration::from_secs(1), Duration::from_secs(300)),
            expired: Mutex::new(Default::default()),
            blocked: opkit::reconcile::Backoff::new(Duration::from_secs(1), Duration::from_secs(300)),
        }
    }

    /// Write the status a pass computed, and record the Events its changes call for (and, the
    /// first time a preview is Ready, how long that took).
    pub(crate) async fn apply(&self, pe: &PreviewEnvironment, computed: Computed) -> Result<()> {
        let phase = computed.status.phase;
        let became_ready = phase == Some(vesper_api::Phase::Ready)
            && pe.status.as_ref().and_then(|s| s.phase) != Some(vesper_api::Phase::Ready);
        let written = self.kit.write_status(pe, &computed.status).await.map_err(crate::error::Error::Write)?;
        if written.wrote()
            && became_ready
            && pe
                .status
                .as_ref()
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == status::READY))
                .is_none_or(|c| c.status != "True")
            && let Some(created) = pe.metadata.creation_timestamp.as_ref()
        {
            let secs = self.kit.clock.now().duration_since(created.0).as_secs_f64().max(0.0);
            if pe.status.as_ref().and_then(|s| s.phase).is_none_or(|p| p == vesper_api::Phase::Pending) {
                self.metrics.time_to_ready.observe(secs);
            }
        }
        for n in &computed.notes {
            self.kit.note(pe, n).await;
        }
        Ok(())
    }

    /// Note that the preview expired; true the first time for this preview.
    pub(crate) fn first_expiry(&self, pe: &PreviewEnvironment) -> bool {
        self.expired.lock().map(|mut e| e.insert(pe.uid().unwrap_or_default())).unwrap_or(true)
    }

    /// Forget a preview that is gone (its finalizer released, or deleted without it): every entry
    /// this process keeps for it (backoff, conflict retries, expiry, verified objects, Event
    /// series, a status write in flight).
    pub fn forget(&self, pe: &PreviewEnvironment) {
        let uid = pe.uid().unwrap_or_default();
        if let Ok(mut e) = self.expired.lock() {
            e.remove(&uid);
        }
        // A preview recreated under the same name starts its retries afresh.
        self.blocked.reset(&key_of(pe));
        self.failures.reset(&key_of(pe));
        self.kit.forget(&uid);
        let ns = crate::naming::namespace_name(&pe.namespace().unwrap_or_default(), &pe.name_any());
        self.metrics.writes.verified().forget_namespace(&ns);
        self.tracked_objects();
    }

    /// How many entries this process keeps about previews (backoff, conflict retries, expiries,
    /// and the kit's verified objects, event series and status writes in flight); zero once
    /// every preview it saw is gone. Also exported as the gauge `vesper_tracked_objects`.
    pub fn tracked_objects(&self) -> usize {
        let n = self.failures.len()
            + self.blocked.len()
            + self.expired.lock().map(|e| e.len()).unwrap_or(0)
            + self.kit.tracked();
        self.metrics.tracked_objects.set(i64::try_from(n).unwrap_or(i64::MAX));
        n
    }

    /// When to check a blocked preview again: 1s, doubling to 5 minutes.
    pub(crate) fn blocked_retry(&self, key: &str) -> Duration {
        self.blocked.next(key)
    }
}

/// `namespace/name` of a preview.
pub fn key_of(pe: &PreviewEnvironment) -> String {
    format!("{}/{}", pe.namespace().unwrap_or_default(), pe.name_any())
}
