//! Lifecycle activity: what the operator changes about a Controller, published as
//! [`ActivityEvent`]s (source [`SOURCE_OPERATOR`]) on core NATS, the third source of the activity
//! path (the gateway publishes what the mites observe; the recorder's stream `varroa_activity`
//! captures `activity.>` for the activity table; the BFF fans it out live).
//!
//! **What is published.** [`changes`] compares the status a pass replaced with the one it wrote
//! (a pure function, tested from fixtures): the first status of a Controller
//! ([`CONTROLLER_CREATED`], also on `activity.<cluster>._global`), a phase transition
//! ([`PHASE_CHANGED`], "Provisioning -> Running: why"), an attention signal appearing or clearing
//! ([`BLOCKED`], [`BOOT_FAILED`], [`PLUGIN_ROLL_FAILED`], [`APPLY_FAILED`], [`MITE_UNREACHABLE`]
//! and their `...Cleared`; phase Failed is a [`PHASE_CHANGED`]), and the power-state changes the
//! operator acts on ([`STOPPED`], [`STARTED`], [`HIBERNATED`], [`WOKEN`], naming what asked:
//! `spec.powerState`, the inactivity policy, a wake request or the removed
//! `varroa.dev/hibernated` mark). [`Seen`] follows the Controllers' watch for
//! [`CONTROLLER_DELETED`] (controllers have no finalizer: the deletion is seen in the watch, or in
//! the next list when the watch was away), published on both subjects as well.
//!
//! **Only real transitions.** The comparison is with the stored status (the one the write
//! replaced), never with what this process remembers: a pass that writes nothing publishes
//! nothing, and a restarted operator publishes nothing for controllers whose status it does not
//! change. A Controller deleted while no operator ran is not announced (no watch saw it).
//!
//! **At most once.** [`Publisher`] hands each event to a bounded queue drained by one task into
//! the NATS client (core NATS publish, no acknowledgement): a reconcile never waits for NATS. An
//! event that does not fit the queue (NATS away long enough for the client's buffer and the queue
//! to fill) is dropped and logged; `varroa_activity_events_total{outcome}` counts `published`
//! (handed to the client), `dropped` and `failed`. Events of one controller keep their order.

use crate::mite::MiteState;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;
use kube::runtime::watcher;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use tokio::sync::mpsc;
use varroa_api::lifecycle::{REASON_STREAM_LOST, condition};
use varroa_api::{Controller, ControllerPhase, ControllerStatus, PowerState};
use varroa_link::activity::ActivityEvent;
use varroa_link::kv::{self, ControllerKey, KvError};

/// `source` of the operator's events.
pub const SOURCE_OPERATOR: &str = "operator";
/// A Controller got its first status (also on the global subject).
pub const CONTROLLER_CREATED: &str = "ControllerCreated";
/// A Controller was deleted (also on the global subject).
pub const CONTROLLER_DELETED: &str = "ControllerDeleted";
/// `status.phase` changed: "Provisioning -> Running: Jenkins runs; the mite stream is not up".
pub const PHASE_CHANGED: &str = "PhaseChanged";
/// `ReconcileBlocked=True` appeared (the message names the fix).
pub const BLOCKED: &str = "Blocked";
/// `ReconcileBlocked` cleared.
pub const BLOCKED_CLEARED: &str = "BlockedCleared";
/// `JenkinsBootFailed=True` appeared.
pub const BOOT_FAILED: &str = "BootFailed";
/// `JenkinsBootFailed` cleared.
pub const BOOT_FAILED_CLEARED: &str = "BootFailedCleared";
/// `PluginRollFailed=True` appeared.
pub const PLUGIN_ROLL_FAILED: &str = "PluginRollFailed";
/// `PluginRollFailed` cleared.
pub const PLUGIN_ROLL_FAILED_CLEARED: &str = "PluginRollFailedCleared";
/// `status.lastApplyResult` became a failure (or a failure of another digest): the attention
/// signal Apply failed. The mite source's own `ApplyFailed` (published by the gateway) is each
/// cell's attempt; this one is the controller's signal, once until it clears.
pub const APPLY_FAILED: &str = "ApplyFailed";
/// `status.lastApplyResult` succeeded again.
pub const APPLY_FAILED_CLEARED: &str = "ApplyFailedCleared";
/// `MiteConnected=False` with reason `StreamLost` appeared (Mite unreachable: also when a
/// gateway died and nobody said the stream closed).
pub const MITE_UNREACHABLE: &str = "MiteUnreachable";
/// The lost stream is no longer lost (connected again, or no stream expected).
pub const MITE_UNREACHABLE_CLEARED: &str = "MiteUnreachableCleared";
/// The controller reached Stopped: `spec.powerState: Stopped` scaled it to zero.
pub const STOPPED: &str = "Stopped";
/// A Stopped controller was scaled up again (`spec.powerState: Running`).
pub const STARTED: &str = "Started";
/// The inactivity policy parked the controller (phase Hibernated).
pub const HIBERNATED: &str = "Hibernated";
/// A Hibernated controller was scaled up again (a wake request, or its mark removed by hand).
pub const WOKEN: &str = "Woken";

/// Every kind the operator publishes.
pub const KINDS: [&str; 17] = [
    CONTROLLER_CREATED,
    CONTROLLER_DELETED,
    PHASE_CHANGED,
    BLOCKED,
    BLOCKED_CLEARED,
    BOOT_FAILED,
    BOOT_FAILED_CLEARED,
    PLUGIN_ROLL_FAILED,
    PLUGIN_ROLL_FAILED_CLEARED,
    APPLY_FAILED,
    APPLY_FAILED_CLEARED,
    MITE_UNREACHABLE,
    MITE_UNREACHABLE_CLEARED,
    STOPPED,
    STARTED,
    HIBERNATED,
    WOKEN,
];

/// One event to publish about a controller: its kind and a sentence for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub kind: &'static str,
    pub message: String,
    /// Also published on `activity.<cluster>._global`.
    pub global: bool,
}

fn change(kind: &'static str, message: String) -> Change {
    Change { kind, message, global: false }
}

/// What a pass knew about why the power state is what it is.
#[derive(Debug, Clone, Default)]
pub struct Causes {
    pub power_state: PowerState,
    /// The mite source asked to wake it.
    pub wake_requested: bool,
    /// `hibernation.idleAfter` of the resolved settings, as written.
    pub idle_after: Option<String>,
}

impl Causes {
    /// The causes of a pass over `c`.
    pub fn of(c: &Controller, mite: &MiteState, rendered: Option<&varroa_config::Rendered>) -> Causes {
        Causes {
            power_state: c.spec.power_state,
            wake_requested: mite.wake_requested,
            idle_after: rendered
                .and_then(|r| r.settings.settings.hibernation.as_ref())
                .and_then(|h| h.idle_after.clone()),
        }
    }
}

fn find<'a>(s: &'a ControllerStatus, type_: &str) -> Option<&'a Condition> {
    s.conditions.iter().find(|c| c.type_ == type_)
}

fn is_true(s: &ControllerStatus, type_: &str) -> bool {
    find(s, type_).is_some_and(|c| c.status == "True")
}

fn stream_lost(s: &ControllerStatus) -> bool {
    find(s, condition::MITE_CONNECTED).is_some_and(|c| c.status == "False" && c.reason == REASON_STREAM_LOST)
}

fn apply_failure(s: &ControllerStatus) -> Option<&varroa_api::ApplyResult> {
    s.last_apply_result.as_ref().filter(|r| !r.succeeded)
}

fn phase_name(p: Option<ControllerPhase>) -> String {
    p.unwrap_or(ControllerPhase::Pending).to_string()
}

/// Why the status is in its phase: the Failed condition's reason and message, else the Ready
/// condition's message.
fn phase_reason(s: &ControllerStatus) -> String {
    if s.phase == Some(ControllerPhase::Failed)
        && let Some(f) = find(s, condition::FAILED).filter(|c| c.status == "True")
    {
        return format!("{}: {}", f.reason, f.message);
    }
    find(s, condition::READY).map(|c| c.message.clone()).unwrap_or_default()
}

/// The events of one status write: `old` is the stored status it replaced (None: the Controller
/// had none), `new` the one written. Equal statuses (or ones differing only in fields that are
/// no activity, such as lastReconciledAt) give nothing.
pub fn changes(old: Option<&ControllerStatus>, new: &ControllerStatus, why: &Causes) -> Vec<Change> {
    let mut out = Vec::new();
    let blank = ControllerStatus::default();
    if old.is_none() {
        out.push(Change { global: true, ..change(CONTROLLER_CREATED, String::new()) });
    }
    let old = old.unwrap_or(&blank);

    // The phase, then what the operator did to the power state.
    if old.phase != new.phase {
        let reason = phase_reason(new);
        let mut m = format!("{} -> {}", phase_name(old.phase), phase_name(new.phase));
        if !reason.is_empty() {
            m.push_str(": ");
            m.push_str(&reason);
        }
        out.push(change(PHASE_CHANGED, m));
        let (was, now) = (old.phase, new.phase);
        let running = why.power_state == PowerState::Running;
        match now {
            Some(ControllerPhase::Stopped) => out.push(change(
                STOPPED,
                "spec.powerState is Stopped: Jenkins is scaled to zero (its volume and configuration stay)".into(),
            )),
            Some(ControllerPhase::Hibernated) => out.push(change(
                HIBERNATED,
                match &why.idle_after {
                    Some(d) => format!(
                        "the inactivity policy parked it: no builds, no queue and no user activity for hibernation.idleAfter ({d})"
                    ),
                    None => "the inactivity policy parked it".into(),
                },
            )),
            Some(ControllerPhase::Failed) => {}
            _ if was == Some(ControllerPhase::Stopped) && running => {
                out.push(change(STARTED, "spec.powerState is Running: Jenkins is scaled up again".into()))
            }
            _ if was == Some(ControllerPhase::Hibernated) && running => out.push(change(
                WOKEN,
                if why.wake_requested {
                    "a wake request (a webhook, a cron trigger due soon or a user opening it): Jenkins is scaled up again"
                        .into()
                } else {
                    format!(
                        "the {} mark was removed from its StatefulSet: Jenkins is scaled up again",
                        varroa_api::lifecycle::ANNOTATION_HIBERNATED
                    )
                },
            )),
            _ => {}
        }
    }

    // The attention signals, each on its own (the attention field shows only the first).
    let signals: [(&str, &'static str, &'static str, &str); 3] = [
        (condition::RECONCILE_BLOCKED, BLOCKED, BLOCKED_CLEARED, "the operator can proceed again"),
        (condition::JENKINS_BOOT_FAILED, BOOT_FAILED, BOOT_FAILED_CLEARED, "Jenkins no longer fails to boot"),
        (condition::PLUGIN_ROLL_FAILED, PLUGIN_ROLL_FAILED, PLUGIN_ROLL_FAILED_CLEARED, "plugins-init no longer fails"),
    ];
    for (type_, raised, cleared, clear_text) in signals {
        match (is_true(old, type_), is_true(new, type_)) {
            (false, true) => {
                let c = find(new, type_);
                let m = c.map(|c| c.message.clone()).filter(|m| !m.is_empty());
                out.push(change(
                    raised,
                    m.unwrap_or_else(|| format!("{type_} ({})", c.map(|c| c.reason.as_str()).unwrap_or(""))),
                ));
            }
            (true, false) => out.push(change(cleared, clear_text.into())),
            _ => {}
        }
    }
    match (apply_failure(old), apply_failure(new)) {
        (before, Some(now)) if before.is_none_or(|b| b.digest != now.digest) => out.push(change(
            APPLY_FAILED,
            format!(
                "configuration {} not applied: {}",
                if now.digest.is_empty() { "(no digest)" } else { &now.digest },
                now.message
            ),
        )),
        (Some(_), None) if new.last_apply_result.is_some() => out.push(change(
            APPLY_FAILED_CLEARED,
            format!(
                "configuration {} applied",
                new.last_apply_result.as_ref().map(|r| r.digest.as_str()).unwrap_or_default()
            ),
        )),
        _ => {}
    }
    match (stream_lost(old), stream_lost(new)) {
        (false, true) => out
            .push(change(MITE_UNREACHABLE, "the mite's stream to the gateway was lost; the pod stays in place".into())),
        (true, false) => out.push(change(
            MITE_UNREACHABLE_CLEARED,
            if is_true(new, condition::MITE_CONNECTED) {
                "the mite's stream to the gateway is up again".into()
            } else {
                "no mite stream is expected any more".into()
            },
        )),
        _ => {}
    }
    out
}

/// The Controllers the watch has shown, to tell a deletion (see the module docs). Pure: fed the
/// watch's events, it answers which controllers went.
#[derive(Debug, Default)]
pub struct Seen {
    /// uid -> (namespace, name).
    live: HashMap<String, (String, String)>,
    /// The uids listed since the watch restarted (a list in progress).
    relisting: Option<HashSet<String>>,
}

impl Seen {
    /// The controllers (`namespace`, `name`) `event` shows deleted: a watched deletion, or those
    /// missing from a completed list (deleted while the watch was away). The first list of a
    /// process only learns what exists.
    pub fn observe(&mut self, event: &watcher::Event<Controller>) -> Vec<(String, String)> {
        let key = |c: &Controller| (c.namespace().unwrap_or_default(), c.name_any());
        match event {
            watcher::Event::Init => {
                self.relisting = Some(HashSet::new());
                vec![]
            }
            watcher::Event::InitApply(c) | watcher::Event::Apply(c) => {
                let uid = c.uid().unwrap_or_default();
                if let (watcher::Event::InitApply(_), Some(r)) = (event, self.relisting.as_mut()) {
                    r.insert(uid.clone());
                }
                self.live.insert(uid, key(c));
                vec![]
            }
            watcher::Event::Delete(c) => {
                self.live.remove(&c.uid().unwrap_or_default());
                vec![key(c)]
            }
            watcher::Event::InitDone => {
                let Some(listed) = self.relisting.take() else { return vec![] };
                let gone: Vec<String> = self.live.keys().filter(|u| !listed.contains(*u)).cloned().collect();
                let mut out: Vec<(String, String)> = gone.iter().filter_map(|u| self.live.remove(u)).collect();
                out.sort();
                if self.live.capacity() > 4 * self.live.len().max(16) {
                    self.live.shrink_to_fit();
                }
                out
            }
        }
    }

    /// Controllers kept (for `varroa_tracked_objects`).
    pub fn len(&self) -> usize {
        self.live.len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: String,
}

/// How many events wait for the NATS client at most; more are dropped (logged, counted).
pub const QUEUE: usize = 1024;

struct Outgoing {
    subject: String,
    event: ActivityEvent,
}

struct Inner {
    cluster: String,
    tx: mpsc::Sender<Outgoing>,
}

/// Publishes the operator's activity (see the module docs); [`Publisher::off`] without NATS.
/// Cheap to clone.
#[derive(Clone)]
pub struct Publisher {
    inner: Option<Arc<Inner>>,
    outcomes: Family<OutcomeLabels, Counter>,
}

impl Default for Publisher {
    fn default() -> Self {
        Publisher::off()
    }
}

/// A unique event id: 12 random bytes in hex (as the gateway's session ids).
pub fn event_id() -> String {
    let mut b = [0u8; 12];
    // ring's system RNG; without an entropy source the bytes stay zero and the recorder keeps
    // the first such event only (logged there): better than no activity.
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Checks that `cluster` can name activity subjects (a DNS-1123 label), as `--cluster` must.
pub fn check_cluster(cluster: &str) -> Result<(), KvError> {
    varroa_link::activity::global_subject(cluster).map(|_| ())
}

impl Publisher {
    /// Publishes nothing (no `--nats-url`).
    pub fn off() -> Publisher {
        Publisher { inner: None, outcomes: Family::default() }
    }

    /// Publishes with `client` for `cluster` (checked: a DNS-1123 label). Starts the task that
    /// drains the queue into the client, so it needs a Tokio runtime.
    pub fn nats(client: async_nats::Client, cluster: &str) -> Result<Publisher, KvError> {
        check_cluster(cluster)?;
        let (tx, mut rx) = mpsc::channel::<Outgoing>(QUEUE);
        let outcomes: Family<OutcomeLabels, Counter> = Family::default();
        let counts = outcomes.clone();
        tokio::spawn(async move {
            while let Some(o) = rx.recv().await {
                let outcome = match client.publish(o.subject.clone(), kv::encode(&o.event)).await {
                    Ok(()) => "published",
                    Err(e) => {
                        tracing::warn!(subject = %o.subject, kind = %o.event.kind, id = %o.event.id, error = %e, "cannot publish an activity event; it is lost");
                        "failed"
                    }
                };
                counts.get_or_create(&OutcomeLabels { outcome: outcome.into() }).inc();
            }
        });
        Ok(Publisher { inner: Some(Arc::new(Inner { cluster: cluster.to_owned(), tx })), outcomes })
    }

    /// Whether events go anywhere.
    pub fn is_on(&self) -> bool {
        self.inner.is_some()
    }

    /// `varroa_activity_events_total{outcome}`: `published` (handed to the NATS client),
    /// `dropped` (the queue was full), `failed` (the client refused it).
    pub fn outcomes(&self) -> Family<OutcomeLabels, Counter> {
        self.outcomes.clone()
    }

    /// How many events had `outcome`.
    pub fn count(&self, outcome: &str) -> u64 {
        self.outcomes.get_or_create(&OutcomeLabels { outcome: outcome.into() }).get()
    }

    /// Registers [`Publisher::outcomes`] under the prefix `varroa_`.
    pub fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        registry.sub_registry_with_prefix("varroa").register(
            "activity_events",
            "Activity events of the operator, by outcome (published: handed to the NATS client; dropped: the queue was full while NATS was away; failed)",
            self.outcomes.clone(),
        );
    }

    fn event(&self, inner: &Inner, namespace: &str, name: &str, kind: &str, message: String) -> ActivityEvent {
        ActivityEvent {
            id: event_id(),
            time: jiff::Timestamp::now(),
            cluster: inner.cluster.clone(),
            namespace: namespace.to_owned(),
            controller: name.to_owned(),
            source: SOURCE_OPERATOR.to_owned(),
            kind: kind.to_owned(),
            message,
            cell: None,
        }
    }

    fn send(&self, inner: &Inner, subject: String, event: ActivityEvent) {
        let (kind, id) = (event.kind.clone(), event.id.clone());
        if let Err(e) = inner.tx.try_send(Outgoing { subject: subject.clone(), event }) {
            let why = match e {
                mpsc::error::TrySendError::Full(_) => "the queue is full (NATS away?)",
                mpsc::error::TrySendError::Closed(_) => "the publisher stopped",
            };
            tracing::warn!(%subject, %kind, %id, "activity event dropped: {why}");
            self.outcomes.get_or_create(&OutcomeLabels { outcome: "dropped".into() }).inc();
        }
    }

    /// Publishes `changes` of the controller `namespace/name` (fire and forget, in order).
    /// Changes marked global are also published on `activity.<cluster>._global`, as an event of
    /// its own (no namespace or controller; the message names the controller).
    pub fn publish(&self, namespace: &str, name: &str, changes: Vec<Change>) {
        let Some(inner) = &self.inner else { return };
        if changes.is_empty() {
            return;
        }
        let subject = match ControllerKey::new(namespace, name)
            .and_then(|k| varroa_link::activity::controller_subject(&inner.cluster, &k))
        {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(controller = %format!("{namespace}/{name}"), error = %e, "no activity subject for this controller");
                return;
            }
        };
        for c in changes {
            let message = if c.message.is_empty() { default_message(c.kind, namespace, name) } else { c.message };
            if c.global {
                let global = match varroa_link::activity::global_subject(&inner.cluster) {
                    Ok(s) => s,
                    Err(_) => continue, // checked when the publisher was made
                };
                let text = if message.contains(&format!("{namespace}/{name}")) {
                    message.clone()
                } else {
                    format!("controller {namespace}/{name}: {message}")
                };
                let ev = self.event(inner, "", "", c.kind, text);
                self.send(inner, subject.clone(), self.event(inner, namespace, name, c.kind, message));
                self.send(inner, global, ev);
            } else {
                self.send(inner, subject.clone(), self.event(inner, namespace, name, c.kind, message));
            }
        }
    }

    /// Publishes that the controller `namespace/name` was deleted (both subjects).
    pub fn deleted(&self, namespace: &str, name: &str) {
        self.publish(namespace, name, vec![Change { kind: CONTROLLER_DELETED, message: String::new(), global: true }]);
    }
}

fn default_message(kind: &str, namespace: &str, name: &str) -> String {
    match kind {
        CONTROLLER_CREATED => format!("controller {namespace}/{name} created"),
        CONTROLLER_DELETED => format!("controller {namespace}/{name} deleted"),
        other => other.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn cond(type_: &str, status: &str, reason: &str, message: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
            observed_generation: Some(1),
        }
    }

    fn status(phase: ControllerPhase, conditions: Vec<Condition>) -> ControllerStatus {
        ControllerStatus { phase: Some(phase), conditions, ..Default::default() }
    }

    fn ready(phase: ControllerPhase, message: &str) -> Condition {
        let ok = matches!(phase, ControllerPhase::Running | ControllerPhase::Connected);
        cond(condition::READY, if ok { "True" } else { "False" }, &phase.to_string(), message)
    }

    fn kinds(c: &[Change]) -> Vec<&'static str> {
        c.iter().map(|c| c.kind).collect()
    }

    fn running() -> Causes {
        Causes::default()
    }

    #[test]
    fn the_kinds_are_camel_case_words_and_distinct() {
        let set: HashSet<&str> = KINDS.iter().copied().collect();
        assert_eq!(set.len(), KINDS.len());
        for k in KINDS {
            assert!(k.chars().next().is_some_and(|c| c.is_ascii_uppercase()), "{k}");
            assert!(k.chars().all(|c| c.is_ascii_alphanumeric()), "{k}");
        }
    }

    #[test]
    fn a_first_status_is_a_creation_on_both_subjects_and_a_phase() {
        let new = status(
            ControllerPhase::Provisioning,
            vec![ready(ControllerPhase::Provisioning, "creating or rolling the Jenkins pod")],
        );
        let c = changes(None, &new, &running());
        assert_eq!(kinds(&c), [CONTROLLER_CREATED, PHASE_CHANGED]);
        assert!(c[0].global && !c[1].global);
        assert_eq!(c[1].message, "Pending -> Provisioning: creating or rolling the Jenkins pod");
    }

    #[test]
    fn the_same_status_or_only_a_new_stamp_is_no_activity() {
        let s = status(ControllerPhase::Connected, vec![ready(ControllerPhase::Connected, "x")]);
        assert!(changes(Some(&s), &s, &running()).is_empty());
        let stamped = ControllerStatus { last_reconciled_at: Some(Time(jiff::Timestamp::now())), ..s.clone() };
        assert!(changes(Some(&s), &stamped, &running()).is_empty());
    }

    #[test]
    fn a_phase_change_names_both_phases_and_why() {
        let old = status(ControllerPhase::Provisioning, vec![]);
        let new = status(
            ControllerPhase::Running,
            vec![ready(ControllerPhase::Running, "Jenkins runs; the mite stream is not up")],
        );
        let c = changes(Some(&old), &new, &running());
        assert_eq!(
            c,
            [change(PHASE_CHANGED, "Provisioning -> Running: Jenkins runs; the mite stream is not up".into())]
        );
        let failed = status(
            ControllerPhase::Failed,
            vec![cond(
                condition::FAILED,
                "True",
                "OwnershipConflict",
                "ConfigMap team-a/ci exists and is not this Controller's",
            )],
        );
        let c = changes(Some(&new), &failed, &running());
        assert_eq!(kinds(&c), [PHASE_CHANGED]);
        assert_eq!(
            c[0].message,
            "Running -> Failed: OwnershipConflict: ConfigMap team-a/ci exists and is not this Controller's"
        );
    }

    #[test]
    fn power_state_changes_name_what_asked() {
        let connected = status(ControllerPhase::Connected, vec![]);
        let stopped = status(ControllerPhase::Stopped, vec![]);
        let provisioning = status(ControllerPhase::Provisioning, vec![]);
        let hibernated = status(ControllerPhase::Hibernated, vec![]);
        let stop = Causes { power_state: PowerState::Stopped, ..Default::default() };
        // Connected -> Provisioning while the pod goes is a phase change only.
        assert_eq!(kinds(&changes(Some(&connected), &provisioning, &stop)), [PHASE_CHANGED]);
        let c = changes(Some(&provisioning), &stopped, &stop);
        assert_eq!(kinds(&c), [PHASE_CHANGED, STOPPED]);
        assert!(c[1].message.contains("spec.powerState is Stopped"), "{}", c[1].message);
        let c = changes(Some(&stopped), &provisioning, &running());
        assert_eq!(kinds(&c), [PHASE_CHANGED, STARTED]);
        assert!(c[1].message.contains("spec.powerState is Running"));
        // Parked by the policy, woken by a request or by hand.
        let idle = Causes { idle_after: Some("30m".into()), ..Default::default() };
        let c = changes(Some(&provisioning), &hibernated, &idle);
        assert_eq!(kinds(&c), [PHASE_CHANGED, HIBERNATED]);
        assert!(c[1].message.contains("hibernation.idleAfter (30m)"), "{}", c[1].message);
        let wake = Causes { wake_requested: true, ..Default::default() };
        let c = changes(Some(&hibernated), &provisioning, &wake);
        assert_eq!(kinds(&c), [PHASE_CHANGED, WOKEN]);
        assert!(c[1].message.contains("a wake request"));
        let c = changes(Some(&hibernated), &provisioning, &running());
        assert!(c[1].message.contains("varroa.dev/hibernated mark was removed"), "{}", c[1].message);
        // Stopping a parked controller is a stop, not a wake.
        assert_eq!(kinds(&changes(Some(&hibernated), &stopped, &stop)), [PHASE_CHANGED, STOPPED]);
        // A start that the API server refuses is a Failed phase, not a start.
        let failed = status(ControllerPhase::Failed, vec![]);
        assert_eq!(kinds(&changes(Some(&stopped), &failed, &running())), [PHASE_CHANGED]);
    }

    #[test]
    fn attention_signals_appear_and_clear_each_once() {
        let base = status(ControllerPhase::Running, vec![]);
        let blocked = status(
            ControllerPhase::Running,
            vec![
                cond(
                    condition::RECONCILE_BLOCKED,
                    "True",
                    "ConfigurationInvalid",
                    "ControllerClass big does not exist: create it",
                ),
                cond(condition::JENKINS_BOOT_FAILED, "True", "CrashLoopBackOff", "container jenkins is crash-looping"),
                cond(condition::PLUGIN_ROLL_FAILED, "False", "NoFailure", ""),
                cond(condition::MITE_CONNECTED, "False", REASON_STREAM_LOST, "lost"),
            ],
        );
        let c = changes(Some(&base), &blocked, &running());
        assert_eq!(kinds(&c), [BLOCKED, BOOT_FAILED, MITE_UNREACHABLE]);
        assert_eq!(c[0].message, "ControllerClass big does not exist: create it");
        // The same signals again: nothing; a new message alone is no transition either.
        let mut again = blocked.clone();
        again.conditions[0].message = "ControllerClass bigger does not exist".into();
        assert!(changes(Some(&blocked), &again, &running()).is_empty());
        let fixed = status(
            ControllerPhase::Running,
            vec![
                cond(condition::RECONCILE_BLOCKED, "False", "Resolved", ""),
                cond(condition::JENKINS_BOOT_FAILED, "False", "NoFailure", ""),
                cond(condition::MITE_CONNECTED, "True", "StreamActive", "up"),
            ],
        );
        let c = changes(Some(&blocked), &fixed, &running());
        assert_eq!(kinds(&c), [BLOCKED_CLEARED, BOOT_FAILED_CLEARED, MITE_UNREACHABLE_CLEARED]);
        assert!(c[2].message.contains("up again"));
        // Never connected is not unreachable.
        let never =
            status(ControllerPhase::Running, vec![cond(condition::MITE_CONNECTED, "False", "NotConnected", "")]);
        assert!(changes(Some(&base), &never, &running()).is_empty());
    }

    #[test]
    fn an_apply_failure_is_raised_per_digest_and_cleared_by_a_success() {
        let result = |ok: bool, digest: &str| varroa_api::ApplyResult {
            succeeded: ok,
            message: if ok { String::new() } else { "unknown root key".into() },
            digest: digest.into(),
            time: None,
        };
        let with = |r| ControllerStatus { last_apply_result: Some(r), ..status(ControllerPhase::Connected, vec![]) };
        let ok_a = with(result(true, "sha256:a"));
        let bad_b = with(result(false, "sha256:b"));
        let c = changes(Some(&ok_a), &bad_b, &running());
        assert_eq!(c, [change(APPLY_FAILED, "configuration sha256:b not applied: unknown root key".into())]);
        assert!(changes(Some(&bad_b), &bad_b, &running()).is_empty());
        let bad_c = with(result(false, "sha256:c"));
        assert_eq!(kinds(&changes(Some(&bad_b), &bad_c, &running())), [APPLY_FAILED]);
        let ok_c = with(result(true, "sha256:c"));
        let c = changes(Some(&bad_c), &ok_c, &running());
        assert_eq!(c, [change(APPLY_FAILED_CLEARED, "configuration sha256:c applied".into())]);
    }

    fn ctrl(ns: &str, name: &str, uid: &str) -> Controller {
        let mut c = Controller::new(name, Default::default());
        c.metadata.namespace = Some(ns.into());
        c.metadata.uid = Some(uid.into());
        c
    }

    #[test]
    fn deletions_from_the_watch_and_from_a_relist_but_not_from_the_first_list() {
        let mut seen = Seen::default();
        let (a, b, c) = (ctrl("t", "a", "1"), ctrl("t", "b", "2"), ctrl("t", "c", "3"));
        // Start-up: what exists is learnt, nothing is deleted.
        assert!(seen.observe(&watcher::Event::Init).is_empty());
        for x in [&a, &b] {
            assert!(seen.observe(&watcher::Event::InitApply(x.clone())).is_empty());
        }
        assert!(seen.observe(&watcher::Event::InitDone).is_empty());
        assert!(seen.observe(&watcher::Event::Apply(c.clone())).is_empty());
        assert_eq!(seen.len(), 3);
        assert_eq!(seen.observe(&watcher::Event::Delete(a.clone())), [("t".to_string(), "a".to_string())]);
        // The watch was away while b went: the next list tells.
        seen.observe(&watcher::Event::Init);
        seen.observe(&watcher::Event::InitApply(c.clone()));
        assert_eq!(seen.observe(&watcher::Event::InitDone), [("t".to_string(), "b".to_string())]);
        assert_eq!(seen.len(), 1);
        seen.observe(&watcher::Event::Delete(c));
        assert!(seen.is_empty(), "nothing kept once every controller is gone");
    }

    #[tokio::test]
    async fn off_publishes_nothing_and_a_bad_cluster_is_refused() {
        let off = Publisher::off();
        assert!(!off.is_on());
        off.publish("t", "a", vec![change(PHASE_CHANGED, "x".into())]);
        assert_eq!(off.count("dropped") + off.count("published"), 0);
        let err = check_cluster("prod.eu").unwrap_err().to_string();
        assert!(err.contains("cluster") && err.contains("prod.eu"), "{err}");
        check_cluster("local").expect("the default is a label");
    }

    #[test]
    fn event_ids_are_random_hex() {
        let (a, b) = (event_id(), event_id());
        assert_eq!(a.len(), 24);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
