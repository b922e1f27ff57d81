//! Kubernetes Events about the objects a controller manages.
//!
//! A thin layer over [`kube::runtime::events::Recorder`], which writes `events.k8s.io/v1` Events
//! the way client-go's new event recorder (`k8s.io/client-go/tools/events`) does: one Event per
//! (object, type, reason, action, reporter), later repeats counted in `series` instead of new
//! objects, `reportingController`/`reportingInstance` set. The API server serves the same Events
//! through `core/v1` (`involvedObject`, `reason`, `reportingComponent`), which is what
//! `kubectl describe` shows.
//!
//! What the layer adds: the reporting controller's name is fixed once, reasons and actions are
//! checked against the API's limits before the request (a clear error instead of a 422), notes
//! longer than the API's 1 kB are shortened instead of rejected, and errors say which object the
//! event was about.
//!
//! RBAC: `create` and `patch` on `events` in group `events.k8s.io`.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
pub use kube::runtime::events::EventType;
use kube::runtime::events::{Event, Recorder, Reporter};

use crate::error::{Error, Result};

/// The longest `note` the events.k8s.io API accepts (1 kB).
pub const MAX_NOTE_BYTES: usize = 1024;
/// The longest `reason` and `action` the events.k8s.io API accepts.
pub const MAX_REASON_LEN: usize = 128;

/// Publishes Events on behalf of one controller. Cheap to clone; share one per controller so that
/// repeats are counted in one series.
#[derive(Clone)]
pub struct EventPublisher {
    recorder: Recorder,
    controller: String,
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
        let reporter = Reporter { controller: controller.clone(), instance };
        EventPublisher { recorder: Recorder::new(client, reporter), controller }
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
        let event = Event {
            type_,
            reason: reason.to_string(),
            note: note.map(|n| truncate(n, MAX_NOTE_BYTES)),
            action: action.to_string(),
            secondary: related.cloned(),
        };
        let what = describe(regarding);
        tracing::debug!(object = %what, ?type_, reason, action, "publishing event");
        self.recorder
            .publish(&event, regarding)
            .await
            .map_err(|e| Error::kube(format!("publishing event {reason} about {what}"), e))
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
