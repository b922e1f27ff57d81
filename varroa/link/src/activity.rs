//! Activity events: what happened to a controller, published on core NATS for the live feed
//! (the BFF's SSE fan-out) and captured by the recorder's `varroa_activity` stream (72 h) for the
//! activity table.
//!
//! Subjects: `activity.<cluster>.<ns>.<controller>` for a controller's events and
//! `activity.<cluster>._global` for the rest ([`controller_subject`], [`global_subject`]). The
//! cluster name is a DNS-1123 label like the other tokens, so subjects split unambiguously on `.`;
//! `_global` cannot collide with a namespace (namespaces have no `_`).
//!
//! The payload is one JSON [`ActivityEvent`] (camelCase). `id` is unique per event, so a consumer
//! that sees one twice (at-least-once delivery) can drop the copy. `kind` is a CamelCase word from
//! a small fixed set per `source` (the gateway's, for mite-observed changes, are the `MITE_*`
//! constants here); readers must accept kinds they do not know.

use std::time::Duration;

use async_nats::jetstream;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::kv::{ControllerKey, KvError};

/// The JetStream stream that captures every activity subject for the recorder, which drains it
/// into the `activity` table. Publishers keep publishing on core NATS: the stream stores what is
/// published on its subjects, whether it exists yet or not (events published while it does not
/// are only seen live).
pub const STREAM: &str = "varroa_activity";
/// The subjects [`STREAM`] captures: every controller's and the global activity.
pub const STREAM_SUBJECTS: &str = "activity.>";
/// How long [`STREAM`] keeps an event the recorder has not consumed (a recorder down longer than
/// this loses the oldest activity; the live feed is unaffected).
pub const STREAM_MAX_AGE: Duration = Duration::from_secs(72 * 3600);

/// The settings of [`STREAM`]. `replicas` is the JetStream replica count (1 for one server).
pub fn stream_config(replicas: usize) -> jetstream::stream::Config {
    jetstream::stream::Config {
        name: STREAM.to_owned(),
        description: Some("Varroa: activity events (published on core NATS, drained by the recorder)".into()),
        subjects: vec![STREAM_SUBJECTS.to_owned()],
        retention: jetstream::stream::RetentionPolicy::Limits,
        storage: jetstream::stream::StorageType::File,
        max_age: STREAM_MAX_AGE,
        num_replicas: replicas.max(1),
        discard: jetstream::stream::DiscardPolicy::Old,
        ..Default::default()
    }
}

/// Opens [`STREAM`], creating it with [`stream_config`] when it does not exist yet.
pub async fn open_stream(js: &jetstream::Context, replicas: usize) -> Result<jetstream::stream::Stream, KvError> {
    js.get_or_create_stream(stream_config(replicas))
        .await
        .map_err(|e| KvError::Stream { stream: STREAM, message: e.to_string() })
}

/// `source` of events the gateway publishes from what a mite reports.
pub const SOURCE_MITE: &str = "mite";
/// A mite stream opened.
pub const MITE_CONNECTED: &str = "MiteConnected";
/// A mite stream closed (the message says why).
pub const MITE_DISCONNECTED: &str = "MiteDisconnected";
/// Jenkins reports another version.
pub const JENKINS_VERSION_CHANGED: &str = "JenkinsVersionChanged";
/// Jenkins started quieting down (no new builds start).
pub const QUIET_DOWN_STARTED: &str = "QuietDownStarted";
/// Jenkins stopped quieting down.
pub const QUIET_DOWN_CANCELLED: &str = "QuietDownCancelled";
/// Jenkins' mode changed (`NORMAL`, `EXCLUSIVE`).
pub const MODE_CHANGED: &str = "ModeChanged";
/// A desired configuration was applied.
pub const APPLY_SUCCEEDED: &str = "ApplySucceeded";
/// A desired configuration was refused by Jenkins or drifted (the message is Jenkins').
pub const APPLY_FAILED: &str = "ApplyFailed";

/// One activity event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActivityEvent {
    /// Unique per event (random hex), for deduplication.
    pub id: String,
    /// When it happened (the publisher's clock).
    pub time: Timestamp,
    /// The cluster name.
    pub cluster: String,
    /// The controller's namespace (empty for a global event).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The controller's name (empty for a global event).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub controller: String,
    /// Who observed it: `mite`, `operator`, `user`.
    pub source: String,
    /// What happened, CamelCase (e.g. [`MITE_CONNECTED`]).
    pub kind: String,
    /// A sentence for people.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The cell, for events about one cell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cell: Option<u32>,
}

fn check_cluster(cluster: &str) -> Result<(), KvError> {
    // Same rules as a namespace: reuse the key validation.
    ControllerKey::new(cluster, "x").map(|_| ()).map_err(|e| match e {
        KvError::InvalidName { value, reason, .. } => KvError::InvalidName { field: "cluster", value, reason },
        other => other,
    })
}

/// `activity.<cluster>.<ns>.<controller>`; fails when `cluster` is not a DNS-1123 label.
pub fn controller_subject(cluster: &str, controller: &ControllerKey) -> Result<String, KvError> {
    check_cluster(cluster)?;
    Ok(format!("activity.{cluster}.{controller}"))
}

/// `activity.<cluster>._global`; fails when `cluster` is not a DNS-1123 label.
pub fn global_subject(cluster: &str) -> Result<String, KvError> {
    check_cluster(cluster)?;
    Ok(format!("activity.{cluster}._global"))
}

/// The events a change of a mite's merged observation means (version, quiet-down, mode);
/// queue and executor counts change all the time and are not activity. A value seen for the first
/// time (the first observation of a new mite) is not a change, except quieting down.
pub fn observation_changes(old: &crate::kv::Observation, new: &crate::kv::Observation) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if let (Some(o), Some(v)) = (&old.version, &new.version)
        && o != v
    {
        out.push((JENKINS_VERSION_CHANGED, format!("Jenkins reports version {v} (was {o})")));
    }
    match (old.quieting_down, new.quieting_down) {
        (Some(true), Some(false)) => out.push((QUIET_DOWN_CANCELLED, "Jenkins stopped quieting down".to_owned())),
        (a, Some(true)) if a != Some(true) => {
            out.push((QUIET_DOWN_STARTED, "Jenkins is quieting down: no new builds start".to_owned()))
        }
        _ => {}
    }
    if old.mode.is_some()
        && new.mode != old.mode
        && let Some(m) = &new.mode
    {
        out.push((MODE_CHANGED, format!("Jenkins mode is now {m}")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::Observation;

    #[test]
    fn the_stream_captures_every_activity_subject_for_three_days() {
        let cfg = stream_config(3);
        assert_eq!((cfg.name.as_str(), cfg.subjects.as_slice()), (STREAM, ["activity.>".to_owned()].as_slice()));
        assert_eq!(cfg.max_age, Duration::from_secs(72 * 3600));
        assert_eq!(cfg.num_replicas, 3);
        assert_eq!(stream_config(0).num_replicas, 1);
    }

    #[test]
    fn subjects_and_their_validation() {
        let c = ControllerKey::new("team-a", "ci").unwrap();
        assert_eq!(controller_subject("prod-eu", &c).unwrap(), "activity.prod-eu.team-a.ci");
        assert_eq!(global_subject("prod-eu").unwrap(), "activity.prod-eu._global");
        let err = controller_subject("prod.eu", &c).unwrap_err().to_string();
        assert!(err.contains("cluster") && err.contains("prod.eu"), "{err}");
    }

    #[test]
    fn only_meaningful_observation_changes_are_activity() {
        let old = Observation {
            version: Some("2.479.1".into()),
            mode: Some("NORMAL".into()),
            quieting_down: Some(false),
            queue_length: Some(1),
            ..Default::default()
        };
        let mut new = old.clone();
        new.queue_length = Some(9);
        assert!(observation_changes(&old, &new).is_empty());
        new.quieting_down = Some(true);
        new.version = Some("2.480".into());
        let kinds: Vec<&str> = observation_changes(&old, &new).iter().map(|(k, _)| *k).collect();
        assert_eq!(kinds, [JENKINS_VERSION_CHANGED, QUIET_DOWN_STARTED]);
        assert!(observation_changes(&old, &new)[0].1.contains("was 2.479.1"));
        let back = Observation { quieting_down: Some(false), ..new.clone() };
        assert_eq!(observation_changes(&new, &back)[0].0, QUIET_DOWN_CANCELLED);
        // The first full observation after a hello is not a "mode change".
        let first = Observation { mode: Some("NORMAL".into()), ..Default::default() };
        assert!(observation_changes(&Observation::default(), &first).is_empty());
    }
}
