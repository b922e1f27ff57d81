//! Kubernetes Events about the objects a controller manages.
//!
//! Writes `events.k8s.io/v1` Events the way client-go's new event recorder
//! (`k8s.io/client-go/tools/events`) does: one Event per (object, related object, type, reason,
//! action), later repeats within six minutes counted in `series` instead of new objects,
//! `reportingController`/`reportingInstance` set. The API server serves the same Events
//! through `core/v1` (`involvedObject`, `reason`, `reportingComponent`), which is what
//! `kubectl describe` shows.
//!
//! The reporting controller's name is fixed once, reasons and actions are checked against the
//! API's limits before the request (a clear error instead of a 422), notes longer than the API's
//! 1 kB are shortened instead of rejected, and errors say which object the event was about.
//!
//! # Why not `kube::runtime::events::Recorder`
//! kube's recorder keeps a copy of every Event it wrote in the last six minutes, for series,
//! and drops old ones only when it publishes again. After a burst (a thousand objects created
//! and deleted) an idle operator kept tens of MiB of Events about objects long gone, until some
//! later Event; a memory test of the Varroa operator caught it. What this recorder keeps per
//! series is small (the Event's name and count), swept by age on publishing, bounded in number
//! ([`MAX_SERIES`]), and dropped at once for an object that is gone ([`EventPublisher::forget`]).
//!
//! RBAC: `create` and `patch` on `events` in group `events.k8s.io`.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Patch, PatchParams, PostParams};
pub use kube::runtime::events::EventType;
use kube::{Api, Client};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// The longest `note` the events.k8s.io API accepts (1 kB).
pub const MAX_NOTE_BYTES: usize = 1024;
/// The longest `reason` and `action` the events.k8s.io API accepts.
pub const MAX_REASON_LEN: usize = 128;

/// How long a repeat still joins the series of the Event before it (client-go's and kube's
/// six minutes).
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);
/// The most series kept at once; beyond it the oldest is dropped (its next repeat starts a new
/// Event).
pub const MAX_SERIES: usize = 4096;

/// What identifies a series: who the Event is about and what it says (the note may differ).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SeriesKey {
    regarding: RefKey,
    related: Option<RefKey>,
    warning: bool,
    reason: String,
    action: String,
}

/// An object reference by what names it: kind, namespace, name and uid.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct RefKey {
    kind: String,
    namespace: String,
    name: String,
    uid: String,
}

impl RefKey {
    fn of(r: &ObjectReference) -> RefKey {
        let s = |v: &Option<String>| v.clone().unwrap_or_default();
        RefKey { kind: s(&r.kind), namespace: s(&r.namespace), name: s(&r.name), uid: s(&r.uid) }
    }
}

/// The Event a series counts into.
#[derive(Debug, Clone)]
struct Series {
    namespace: String,
    name: String,
    count: i32,
    last: Instant,
}

/// What a reconcile wants an Event to say about its object: a change worth telling (a condition
/// that transitioned, an object restored). The status functions of both operators return these,
/// purely; [`EventPublisher::note`] records them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// `Warning` (something needs a human's attention) or `Normal`.
    pub warning: bool,
    /// CamelCase (`PhaseReady`, `Restored`).
    pub reason: String,
    /// The human-readable detail.
    pub message: String,
}

impl Note {
    /// A `Normal` note.
    pub fn normal(reason: impl Into<String>, message: impl Into<String>) -> Note {
        Note { warning: false, reason: reason.into(), message: message.into() }
    }

    /// A `Warning` note.
    pub fn warning(reason: impl Into<String>, message: impl Into<String>) -> Note {
        Note { warning: true, reason: reason.into(), message: message.into() }
    }
}

/// Publishes Events on behalf of one controller. Cheap to clone; share one per controller so that
/// repeats are counted in one series.
#[derive(Clone)]
pub struct EventPublisher {
    client: Client,
    controller: String,
    instance: String,
    series: Arc<Mutex<HashMap<SeriesKey, Series>>>,
    /// Where each Event written is counted (`Event` `created`), when set.
    writes: Option<crate::apply::WriteCounter>,
}

impl std::fmt::Debug for EventPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventPublisher").field("controller", &self.controller).finish()
    }
}

impl EventPublisher {
    /// `controller` is the reporting controller (`vesper.eventide.dev/operator`); `instance` tells
    /// replicas apart (the pod name; the controller name is used when `None`).
    pub fn new(client: Client, controller: impl Into<String>, instance: Option<String>) -> Self {
        let controller = controller.into();
        let instance = instance.unwrap_or_else(|| controller.clone());
        EventPublisher { client, controller, instance, series: Arc::default(), writes: None }
    }

    /// Count every Event this publisher writes in `writes` (as `Event` `created`), as the
    /// operators count all their writes.
    pub fn counting(mut self, writes: crate::apply::WriteCounter) -> Self {
        self.writes = Some(writes);
        self
    }

    /// Record `note` about `regarding`, and about `related` when given (the object restored,
    /// say), with `action` (`Reconcile`, `Restore`). An Event that cannot be written is logged
    /// (target `opkit::events`), not returned: an Event is worth a try, never a failed
    /// reconcile.
    pub async fn note(
        &self,
        regarding: &ObjectReference,
        related: Option<&ObjectReference>,
        action: &str,
        note: &Note,
    ) {
        let type_ = if note.warning { EventType::Warning } else { EventType::Normal };
        match self.publish_related(regarding, related, type_, &note.reason, action, Some(&note.message)).await {
            Ok(()) => {
                if let Some(w) = &self.writes {
                    w.record("Event", crate::apply::Outcome::Created);
                }
            }
            Err(e) => tracing::warn!(object = %describe(regarding), error = %e, "could not record an event"),
        }
    }

    /// Record that the compare-then-write restored an object of `regarding` someone else had
    /// changed (a `Warning`, reason `Restored`, action `Restore`, about the object too), and log
    /// it; nothing for any other outcome.
    pub async fn restored(&self, regarding: &ObjectReference, applied: &crate::apply::Applied) {
        let Some(message) = applied.restore_note() else { return };
        tracing::warn!(object = %describe(regarding), "{message}");
        self.note(regarding, Some(&applied.reference), "Restore", &Note::warning("Restored", message)).await;
    }

    /// Forget the series of Events about the object with `uid` (it is gone): a controller calls
    /// this where it forgets everything else it kept about an object.
    pub fn forget(&self, uid: &str) {
        self.retain_objects(|u| u != uid);
    }

    /// Keep only the series about objects whose uid `keep` accepts (a controller's sweep against
    /// its cache of live objects).
    pub fn retain_objects(&self, keep: impl Fn(&str) -> bool) {
        if let Ok(mut s) = self.series.lock() {
            s.retain(|k, _| keep(&k.regarding.uid));
            shrink(&mut s);
        }
    }

    /// How many series are kept (for the operators' tracked-objects gauges and tests).
    pub fn tracked_series(&self) -> usize {
        self.series.lock().map(|s| s.len()).unwrap_or(0)
    }

    /// The reporting controller's name.
    pub fn controller(&self) -> &str {
        &self.controller
    }

    /// Publish an Event about `regarding` (get one with `kube::Resource::object_ref`).
    ///
    /// `reason` is CamelCase (`Provisioned`), `action` what the controller did or tried
    /// (`Reconcile`, `CreateNamespace`), `note` the human-readable detail.
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: Option<&str>,
    ) -> Result<()> {
        self.publish_related(regarding, None, type_, reason, action, note).await
    }

    /// [`EventPublisher::publish`] with a second object the Event is about (`related`: the
    /// object a controller restored, say). Repeats are counted per (regarding, related) pair.
    pub async fn publish_related(
        &self,
        regarding: &ObjectReference,
        related: Option<&ObjectReference>,
        type_: EventType,
        reason: &str,
        action: &str,
        note: Option<&str>,
    ) -> Result<()> {
        check_word("event reason", reason)?;
        check_word("event action", action)?;
        let note = note.map(|n| truncate(n, MAX_NOTE_BYTES));
        let what = describe(regarding);
        tracing::debug!(object = %what, ?type_, reason, action, "publishing event");
        let key = SeriesKey {
            regarding: RefKey::of(regarding),
            related: related.map(RefKey::of),
            warning: matches!(type_, EventType::Warning),
            reason: reason.to_string(),
            action: action.to_string(),
        };
        let now = Instant::now();
        let repeat = self.series.lock().ok().and_then(|mut s| {
            s.retain(|_, v| now.duration_since(v.last) < SERIES_WINDOW);
            s.get(&key).cloned()
        });
        let err = |e| Error::kube(format!("publishing event {reason} about {what}"), e);
        if let Some(prev) = repeat {
            let count = prev.count.saturating_add(1);
            let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), &prev.namespace);
            let patch = serde_json::json!({
                "series": EventSeries { count, last_observed_time: MicroTime(jiff::Timestamp::now()) }
            });
            match api.patch(&prev.name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(_) => {
                    self.remember(key, Series { count, last: now, ..prev });
                    return Ok(());
                }
                // The Event expired or was deleted: start a new one.
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(err(e)),
            }
        }
        let event = self.new_event(regarding, related, type_, reason, action, note);
        let namespace = event.metadata.namespace.clone().unwrap_or_default();
        let name = event.metadata.name.clone().unwrap_or_default();
        let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), &namespace);
        api.create(&PostParams::default(), &event).await.map_err(err)?;
        self.remember(key, Series { namespace, name, count: 1, last: now });
        Ok(())
    }

    fn remember(&self, key: SeriesKey, series: Series) {
        let Ok(mut s) = self.series.lock() else { return };
        if s.len() >= MAX_SERIES
            && !s.contains_key(&key)
            && let Some(oldest) = s.iter().min_by_key(|(_, v)| v.last).map(|(k, _)| k.clone())
        {
            s.remove(&oldest);
        }
        s.insert(key, series);
    }

    /// A new Event, as client-go's recorder makes one: named after the object and the time,
    /// in the object's namespace (`default` for cluster-scoped objects).
    fn new_event(
        &self,
        regarding: &ObjectReference,
        related: Option<&ObjectReference>,
        type_: EventType,
        reason: &str,
        action: &str,
        note: Option<String>,
    ) -> K8sEvent {
        let now = jiff::Timestamp::now();
        let base = regarding.name.clone().unwrap_or_else(|| self.controller.clone());
        K8sEvent {
            action: Some(action.to_string()),
            reason: Some(reason.to_string()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            related: related.cloned(),
            note,
            metadata: ObjectMeta {
                namespace: Some(regarding.namespace.clone().unwrap_or_else(|| "default".to_string())),
                name: Some(format!("{base}.{:x}", now.as_nanosecond())),
                ..Default::default()
            },
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            type_: Some(match type_ {
                EventType::Normal => "Normal".to_string(),
                EventType::Warning => "Warning".to_string(),
            }),
            ..Default::default()
        }
    }

    /// A `Normal` Event: something happened as expected.
    pub async fn normal(&self, regarding: &ObjectReference, reason: &str, action: &str, note: &str) -> Result<()> {
        self.publish(regarding, EventType::Normal, reason, action, Some(note)).await
    }

    /// A `Warning` Event: something needs a human's attention.
    pub async fn warning(&self, regarding: &ObjectReference, reason: &str, action: &str, note: &str) -> Result<()> {
        self.publish(regarding, EventType::Warning, reason, action, Some(note)).await
    }
}

/// Give a map's spare capacity back once most of it is unused (a map keeps its largest size).
fn shrink<K: std::hash::Hash + Eq, V>(m: &mut HashMap<K, V>) {
    if m.capacity() > 64 && m.len() < m.capacity() / 4 {
        m.shrink_to_fit();
    }
}

fn describe(r: &ObjectReference) -> String {
    let kind = r.kind.as_deref().unwrap_or("object");
    let name = r.name.as_deref().unwrap_or("?");
    match r.namespace.as_deref() {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

fn check_word(field: &str, v: &str) -> Result<()> {
    if v.is_empty() {
        return Err(Error::invalid(field, "must not be empty"));
    }
    if v.len() > MAX_REASON_LEN {
        return Err(Error::invalid(field, format!("must be at most {MAX_REASON_LEN} characters, got {}", v.len())));
    }
    Ok(())
}

/// Cut `s` to at most `max` bytes on a character boundary, marking the cut with "...".
fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max.saturating_sub(3);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_notes_are_cut_on_a_char_boundary() {
        assert_eq!(truncate("short", 10), "short");
        let long = "é".repeat(600);
        let cut = truncate(&long, MAX_NOTE_BYTES);
        assert!(cut.len() <= MAX_NOTE_BYTES && cut.ends_with("..."));
    }

    #[test]
    fn reasons_are_checked() {
        assert!(check_word("event reason", "Provisioned").is_ok());
        assert!(matches!(check_word("event reason", ""), Err(Error::Invalid { .. })));
        assert!(matches!(check_word("event action", &"A".repeat(129)), Err(Error::Invalid { .. })));
    }
}
