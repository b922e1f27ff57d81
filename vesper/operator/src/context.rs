//! What every reconcile of a preview shares: the client, the flags, the caches, the metrics and
//! events, and what the process keeps per preview (back-off, blocked retries, expiries). The
//! reconcile steps (controller.rs) and the deletion path (finalizer.rs) both use it; it uses
//! neither, so the two do not depend on each other.

use crate::config::Config;
use crate::error::{Error, Result};
use crate::hostaddresses::HostAddresses;
use crate::metrics::Metrics;
use crate::status::{self, Computed};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Resource, ResourceExt};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use vesper_api::{PreviewEnvironment, PreviewEnvironmentStatus};

/// The field manager of everything the operator writes.
pub const MANAGER: &str = "vesper-operator";

/// What every reconcile shares.
pub struct Context {
    pub client: Client,
    pub config: Config,
    pub hosts: HostAddresses,
    pub metrics: Arc<Metrics>,
    pub events: opkit::events::EventPublisher,
    pub clock: crate::clock::Clock,
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
        clock: crate::clock::Clock,
        caches: crate::cache::Caches,
    ) -> Context {
        let events = opkit::events::EventPublisher::new(client.clone(), MANAGER, std::env::var("POD_NAME").ok());
        Context {
            client,
            config,
            hosts,
            metrics,
            events,
            clock,
            caches,
            failures: opkit::reconcile::Backoff::new(Duration::from_secs(1), Duration::from_secs(300)),
            expired: Mutex::new(Default::default()),
            blocked: opkit::reconcile::Backoff::new(Duration::from_secs(1), Duration::from_secs(300)),
        }
    }

    /// Record an Event about the preview (failures to record are logged, not fatal).
    pub async fn event(&self, pe: &PreviewEnvironment, warning: bool, reason: &str, action: &str, note: &str) {
        self.event_related(pe, None, warning, reason, action, note).await
    }

    /// [`Context::event`], also about a `related` object (the one restored, say).
    async fn event_related(
        &self,
        pe: &PreviewEnvironment,
        related: Option<&k8s_openapi::api::core::v1::ObjectReference>,
        warning: bool,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        use opkit::events::EventType;
        let r = pe.object_ref(&());
        let type_ = if warning { EventType::Warning } else { EventType::Normal };
        let res = self.events.publish_related(&r, related, type_, reason, action, Some(note)).await;
        match res {
            Ok(()) => self.metrics.writes.record("Event", opkit::apply::Outcome::Created),
            Err(e) => tracing::warn!(preview = %pe.name_any(), error = %e, "could not record an event"),
        }
    }

    /// Write the status when it differs from the stored one (server-side apply on /status).
    pub async fn write_status(&self, pe: &PreviewEnvironment, status: PreviewEnvironmentStatus) -> Result<()> {
        if pe.status.as_ref() == Some(&status) {
            return Ok(());
        }
        let api: Api<PreviewEnvironment> = Api::namespaced(self.client.clone(), &pe.namespace().unwrap_or_default());
        let body = serde_json::json!({
            "apiVersion": "vesper.eventide.dev/v1alpha1",
            "kind": "PreviewEnvironment",
            "status": serde_json::to_value(&status).map_err(|e| Error::Serialize("status", e))?,
        });
        api.patch_status(&pe.name_any(), &PatchParams::apply(MANAGER).force(), &Patch::Apply(&body)).await?;
        self.metrics.writes.record("PreviewEnvironmentStatus", opkit::apply::Outcome::Updated);
        Ok(())
    }

    pub(crate) async fn apply(&self, pe: &PreviewEnvironment, computed: Computed) -> Result<()> {
        let phase = computed.status.phase;
        let became_ready = phase == Some(vesper_api::Phase::Ready)
            && pe.status.as_ref().and_then(|s| s.phase) != Some(vesper_api::Phase::Ready);
        self.write_status(pe, computed.status).await?;
        self.metrics.previews.set(&pe.uid().unwrap_or_default(), phase);
        if became_ready
            && pe
                .status
                .as_ref()
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == status::READY))
                .is_none_or(|c| c.status != "True")
            && let Some(created) = pe.metadata.creation_timestamp.as_ref()
        {
            let secs = self.clock.now().duration_since(created.0).as_secs_f64().max(0.0);
            if pe.status.as_ref().and_then(|s| s.phase).is_none_or(|p| p == vesper_api::Phase::Pending) {
                self.metrics.time_to_ready.observe(secs);
            }
        }
        for n in computed.notes {
            self.event(pe, n.warning, &n.reason, "Reconcile", &n.message).await;
        }
        Ok(())
    }

    /// Record a Warning Event when an object of the preview was changed by someone else and put
    /// back ("restore, do not trust").
    pub(crate) async fn restored(&self, pe: &PreviewEnvironment, applied: &opkit::apply::Applied) {
        let Some(note) = applied.restore_note() else { return };
        tracing::warn!(preview = %key_of(pe), "{note}");
        self.event_related(pe, Some(&applied.reference), true, "Restored", "Restore", &note).await;
    }

    /// Note that the preview expired; true the first time for this preview.
    pub(crate) fn first_expiry(&self, pe: &PreviewEnvironment) -> bool {
        self.expired.lock().map(|mut e| e.insert(pe.uid().unwrap_or_default())).unwrap_or(true)
    }

    /// Forget a preview that is gone (its finalizer released, or deleted without it): every entry
    /// this process keeps for it (backoff, conflict retries, expiry, phase, verified objects).
    pub fn forget(&self, pe: &PreviewEnvironment) {
        let uid = pe.uid().unwrap_or_default();
        if let Ok(mut e) = self.expired.lock() {
            e.remove(&uid);
        }
        // A preview recreated under the same name starts its retries afresh.
        self.blocked.reset(&key_of(pe));
        self.failures.reset(&key_of(pe));
        self.metrics.previews.set(&uid, None);
        self.events.forget(&uid);
        let ns = crate::naming::namespace_name(&pe.namespace().unwrap_or_default(), &pe.name_any());
        self.metrics.writes.verified().forget_namespace(&ns);
        self.tracked_objects();
    }

    /// How many entries this process keeps about previews (backoff, conflict retries, expiries,
    /// phases, verified objects, event series); zero once every preview it saw is gone. Also exported as the
    /// gauge `vesper_tracked_objects`.
    pub fn tracked_objects(&self) -> usize {
        let n = self.failures.len()
            + self.blocked.len()
            + self.expired.lock().map(|e| e.len()).unwrap_or(0)
            + self.metrics.previews.len()
            + self.metrics.writes.verified().len()
            + self.events.tracked_series();
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
