//! The JetStream key-value buckets of the control link and their JSON entries.
//!
//! | bucket | key | value | written by | read by |
//! |---|---|---|---|---|
//! | [`MITES_BUCKET`] `varroa_mites` | `<ns>.<controller>.<cell>` ([`MiteKey`]) | [`MiteEntry`] | the gateway | operator, BFF |
//! | [`DESIRED_BUCKET`] `varroa_desired` | `<ns>.<controller>` ([`ControllerKey`]) | [`DesiredEntry`] | the operator | the gateway |
//!
//! **Keys.** NATS KV keys are subjects: tokens separated by `.`, made of `[-/_=.a-zA-Z0-9]`,
//! no empty token, no wildcard. Kubernetes namespaces are DNS-1123 labels (`[a-z0-9-]`, at most
//! 63 characters) and so are the Controllers' names here: a Controller's name becomes the name of
//! its StatefulSet and Service, which Kubernetes requires to be a DNS label. Neither can hold a
//! `.`, so `.` is a safe separator and every key parses back unambiguously. The key types
//! validate their parts and refuse anything else (a Controller name with a dot, say) with an
//! error naming the field, instead of writing a key another reader would split differently.
//! Watching one controller's cells is `<ns>.<controller>.*`.
//!
//! **Buckets.** History 1 (only the current value matters: every reader wants the latest state,
//! and old values would only cost disk), file storage (state survives a NATS restart), a bounded
//! value size ([`MITES_MAX_VALUE_BYTES`], [`DESIRED_MAX_VALUE_BYTES`]; the server refuses larger
//! writes, so a runaway entry cannot fill the bucket), no max age (entries go when their
//! Controller goes: the operator deletes them). [`open_mites`] and [`open_desired`] bind to a
//! bucket that exists or create it with these settings, so the writer and the readers can start in
//! any order.
//!
//! **Values** are JSON (camelCase, like the Kubernetes objects they end up in), so `nats kv get`
//! shows something a person can read. Unknown fields are ignored when reading, so a newer writer
//! can add fields.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use async_nats::jetstream;
use async_nats::jetstream::kv::{Config, Store};
use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// The bucket of mite state (one entry per controller cell), written by the gateway.
pub const MITES_BUCKET: &str = "varroa_mites";
/// The bucket of desired configuration (one entry per controller), written by the operator.
pub const DESIRED_BUCKET: &str = "varroa_desired";
/// The largest [`MiteEntry`] the mites bucket accepts, in bytes.
pub const MITES_MAX_VALUE_BYTES: i32 = 64 * 1024;
/// The largest [`DesiredEntry`] the desired bucket accepts, in bytes (1 MiB, NATS' default
/// `max_payload`: a larger JCasC would need the server's limit raised first).
pub const DESIRED_MAX_VALUE_BYTES: i32 = 1024 * 1024;

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum KvError {
    /// A key part is not a DNS-1123 label.
    #[error(
        "invalid {field} {value:?} in a control-link key: {reason}; fix: use the Kubernetes name as stored (a DNS-1123 label: lowercase letters, digits and '-', at most 63 characters)"
    )]
    InvalidName {
        /// Which part (`namespace`, `controller`).
        field: &'static str,
        /// The value given.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A key that does not have the expected shape.
    #[error("invalid key {key:?} in bucket {bucket}: expected {expected}")]
    InvalidKey {
        /// The bucket.
        bucket: &'static str,
        /// The key read.
        key: String,
        /// The shape expected.
        expected: &'static str,
    },
    /// A value that is not the entry's JSON.
    #[error("invalid value of {key:?} in bucket {bucket}: {source}")]
    InvalidValue {
        /// The bucket.
        bucket: &'static str,
        /// The key.
        key: String,
        /// The JSON error.
        source: serde_json::Error,
    },
    /// Binding to or creating a bucket failed.
    #[error("cannot open or create JetStream key-value bucket {bucket}: {message}")]
    Bucket {
        /// The bucket.
        bucket: &'static str,
        /// NATS' error.
        message: String,
    },
    /// Binding to or creating a stream failed.
    #[error("cannot open or create JetStream stream {stream}: {message}")]
    Stream {
        /// The stream.
        stream: &'static str,
        /// NATS' error.
        message: String,
    },
}

fn check_label(field: &'static str, value: &str) -> Result<(), KvError> {
    let bad = |reason| Err(KvError::InvalidName { field, value: value.to_owned(), reason });
    if value.is_empty() {
        return bad("empty");
    }
    if value.len() > 63 {
        return bad("longer than 63 characters");
    }
    if !value.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') {
        return bad("only lowercase letters, digits and '-' are allowed");
    }
    if value.starts_with('-') || value.ends_with('-') {
        return bad("must start and end with a letter or digit");
    }
    Ok(())
}

/// The key of a controller in `varroa_desired`: `<namespace>.<controller>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ControllerKey {
    namespace: String,
    controller: String,
}

impl ControllerKey {
    /// Validates both names (DNS-1123 labels).
    pub fn new(namespace: &str, controller: &str) -> Result<Self, KvError> {
        check_label("namespace", namespace)?;
        check_label("controller", controller)?;
        Ok(Self { namespace: namespace.to_owned(), controller: controller.to_owned() })
    }
    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }
    /// The Controller's name.
    pub fn controller(&self) -> &str {
        &self.controller
    }
    /// The key of one of this controller's cells in `varroa_mites`.
    pub fn cell(&self, cell: u32) -> MiteKey {
        MiteKey { controller: self.clone(), cell }
    }
    /// The subject filter matching every cell of this controller in `varroa_mites`.
    pub fn cells_filter(&self) -> String {
        format!("{self}.*")
    }
}

impl fmt::Display for ControllerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.namespace, self.controller)
    }
}

impl FromStr for ControllerKey {
    type Err = KvError;
    fn from_str(key: &str) -> Result<Self, KvError> {
        let invalid = || KvError::InvalidKey {
            bucket: DESIRED_BUCKET,
            key: key.to_owned(),
            expected: "<namespace>.<controller>",
        };
        let (ns, ctrl) = key.split_once('.').ok_or_else(invalid)?;
        ControllerKey::new(ns, ctrl).map_err(|_| invalid())
    }
}

/// The key of one controller cell in `varroa_mites`: `<namespace>.<controller>.<cell>`, the cell
/// in plain decimal.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MiteKey {
    /// The controller.
    pub controller: ControllerKey,
    /// The cell ordinal (0 for a single-instance controller).
    pub cell: u32,
}

impl fmt::Display for MiteKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.controller, self.cell)
    }
}

impl FromStr for MiteKey {
    type Err = KvError;
    fn from_str(key: &str) -> Result<Self, KvError> {
        let invalid = || KvError::InvalidKey {
            bucket: MITES_BUCKET,
            key: key.to_owned(),
            expected: "<namespace>.<controller>.<cell>",
        };
        let mut parts = key.split('.');
        let (Some(ns), Some(ctrl), Some(cell), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
            return Err(invalid());
        };
        let plain =
            !cell.is_empty() && cell.bytes().all(|b| b.is_ascii_digit()) && (cell == "0" || !cell.starts_with('0'));
        if !plain {
            return Err(invalid());
        }
        let cell = cell.parse().map_err(|_| invalid())?;
        Ok(MiteKey { controller: ControllerKey::new(ns, ctrl).map_err(|_| invalid())?, cell })
    }
}

/// What the gateway knows about one mite stream (`varroa_mites`).
///
/// An entry with `connected: true` whose `lastHeartbeat` is older than the reader's threshold
/// belongs to a gateway replica that died without closing it: treat it as lost.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MiteEntry {
    /// A stream is open now (as far as the gateway replica that wrote this knows).
    pub connected: bool,
    /// When the current (or last) stream opened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Timestamp>,
    /// The gateway replica holding (or that held) the stream.
    #[serde(default)]
    pub gateway_replica: String,
    /// A random id of the stream; a newer stream for the same cell replaces it, and the replica of
    /// the old one no longer writes the entry.
    #[serde(default)]
    pub session: String,
    /// When the gateway last heard from the mite (a heartbeat or any message), written at most
    /// once per heartbeat interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat: Option<Timestamp>,
    /// When the stream closed (set with `connected: false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disconnected_at: Option<Timestamp>,
    /// The Jenkins version from the hello.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub jenkins_version: String,
    /// The plugin digest from the hello.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub plugin_digest: String,
    /// The mite's version from the hello.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mite_version: String,
    /// What the mite observes, merged from its deltas (kept across reconnects).
    #[serde(default)]
    pub observation: Observation,
    /// The last apply result the mite reported (kept across reconnects).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_apply_result: Option<ApplyResultRecord>,
}

/// The merged observation of a mite. `None` is "not reported yet".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Observation {
    /// The Jenkins version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The Jenkins mode (`NORMAL`, `EXCLUSIVE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Jenkins is quieting down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quieting_down: Option<bool>,
    /// Items in the build queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_length: Option<u32>,
    /// Executors running a build.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy_executors: Option<u32>,
    /// Idle executors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_executors: Option<u32>,
    /// Seconds Jenkins has been idle (no builds, no queue, no user activity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_for_seconds: Option<u64>,
}

/// The longest short string field kept from a mite (versions, modes, digests, paths), in bytes.
pub const MAX_SHORT_FIELD: usize = 256;
/// The longest apply message kept (Jenkins' error), in bytes.
pub const MAX_APPLY_MESSAGE: usize = 8 * 1024;
/// The most drift paths kept per apply result.
pub const MAX_DRIFT_PATHS: usize = 64;

/// `s` cut to at most `max` bytes at a character boundary, with `…` when cut: what a mite sends
/// is bounded before it is stored, so one entry always fits [`MITES_MAX_VALUE_BYTES`].
pub fn bounded(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

impl Observation {
    /// Merges a delta: every field the delta sets replaces this one's; the rest stay. Strings are
    /// [`bounded`] to [`MAX_SHORT_FIELD`]. Returns whether anything changed.
    pub fn merge(&mut self, delta: &crate::proto::v1::Observation) -> bool {
        let before = self.clone();
        let mut d = delta.clone();
        d.version = d.version.map(|v| bounded(&v, MAX_SHORT_FIELD));
        d.mode = d.mode.map(|v| bounded(&v, MAX_SHORT_FIELD));
        if d.version.is_some() {
            self.version = d.version;
        }
        if d.mode.is_some() {
            self.mode = d.mode;
        }
        if d.quieting_down.is_some() {
            self.quieting_down = d.quieting_down;
        }
        if d.queue_length.is_some() {
            self.queue_length = d.queue_length;
        }
        if d.busy_executors.is_some() {
            self.busy_executors = d.busy_executors;
        }
        if d.idle_executors.is_some() {
            self.idle_executors = d.idle_executors;
        }
        if d.idle_for_seconds.is_some() {
            self.idle_for_seconds = d.idle_for_seconds;
        }
        *self != before
    }
}

/// The last apply a mite reported.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApplyResultRecord {
    /// The digest applied.
    pub digest: String,
    /// Jenkins accepted it.
    pub succeeded: bool,
    /// Jenkins' message on failure.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Paths that drifted from what was asked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drift_paths: Vec<String>,
    /// When the apply finished (the mite's clock); `None` if the mite sent none or an
    /// out-of-range time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Timestamp>,
}

impl From<&crate::proto::v1::ApplyResult> for ApplyResultRecord {
    /// Bounded: the digest and each path to [`MAX_SHORT_FIELD`], the message to
    /// [`MAX_APPLY_MESSAGE`], at most [`MAX_DRIFT_PATHS`] paths (the last says how many more).
    fn from(r: &crate::proto::v1::ApplyResult) -> Self {
        let mut drift_paths: Vec<String> =
            r.drift_paths.iter().take(MAX_DRIFT_PATHS).map(|p| bounded(p, MAX_SHORT_FIELD)).collect();
        if r.drift_paths.len() > MAX_DRIFT_PATHS {
            drift_paths.push(format!("… and {} more", r.drift_paths.len() - MAX_DRIFT_PATHS));
        }
        ApplyResultRecord {
            digest: bounded(&r.digest, MAX_SHORT_FIELD),
            succeeded: r.succeeded,
            message: bounded(&r.message, MAX_APPLY_MESSAGE),
            drift_paths,
            finished_at: (r.finished_at_unix_ms > 0)
                .then(|| Timestamp::from_millisecond(r.finished_at_unix_ms).ok())
                .flatten(),
        }
    }
}

/// A controller's desired configuration (`varroa_desired`), written by the operator.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DesiredEntry {
    /// The digest identifying this configuration.
    pub digest: String,
    /// The rendered files, by path relative to the JCasC directory.
    pub files: BTreeMap<String, String>,
    /// The controller's cell count (`spec.cells`), when the operator knows it: the gateway then
    /// refuses hellos naming a cell ordinal at or above it. Absent: any ordinal is accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cells: Option<u32>,
}

impl DesiredEntry {
    /// The protocol message carrying this entry to a mite.
    pub fn to_message(&self) -> crate::proto::v1::Desired {
        crate::proto::v1::Desired {
            digest: self.digest.clone(),
            files: self.files.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        }
    }
}

/// Serializes an entry to the JSON stored in a bucket.
pub fn encode<T: Serialize>(entry: &T) -> bytes::Bytes {
    // Serializing these plain structs (strings, numbers, maps with string keys) cannot fail.
    serde_json::to_vec(entry).unwrap_or_default().into()
}

/// Parses a [`MiteEntry`] read from `varroa_mites` under `key`.
pub fn decode_mite(key: &str, value: &[u8]) -> Result<MiteEntry, KvError> {
    serde_json::from_slice(value).map_err(|source| KvError::InvalidValue {
        bucket: MITES_BUCKET,
        key: key.to_owned(),
        source,
    })
}

/// Parses a [`DesiredEntry`] read from `varroa_desired` under `key`.
pub fn decode_desired(key: &str, value: &[u8]) -> Result<DesiredEntry, KvError> {
    serde_json::from_slice(value).map_err(|source| KvError::InvalidValue {
        bucket: DESIRED_BUCKET,
        key: key.to_owned(),
        source,
    })
}

/// The settings of a bucket of this module (see the module docs). `replicas` is the JetStream
/// replica count (1 for a single server; 3 for the three-node install).
pub fn bucket_config(bucket: &'static str, replicas: usize) -> Config {
    let (max_value_size, description) = match bucket {
        DESIRED_BUCKET => {
            (DESIRED_MAX_VALUE_BYTES, "Varroa: desired configuration per controller (written by the operator)")
        }
        _ => (MITES_MAX_VALUE_BYTES, "Varroa: mite state per controller cell (written by the gateway)"),
    };
    Config {
        bucket: bucket.to_owned(),
        description: description.to_owned(),
        history: 1,
        max_value_size,
        storage: jetstream::stream::StorageType::File,
        num_replicas: replicas.max(1),
        ..Default::default()
    }
}

/// Binds to `varroa_mites`, creating it (with [`bucket_config`]) when it does not exist.
pub async fn open_mites(js: &jetstream::Context, replicas: usize) -> Result<Store, KvError> {
    open(js, MITES_BUCKET, replicas).await
}

/// Binds to `varroa_desired`, creating it (with [`bucket_config`]) when it does not exist.
pub async fn open_desired(js: &jetstream::Context, replicas: usize) -> Result<Store, KvError> {
    open(js, DESIRED_BUCKET, replicas).await
}

async fn open(js: &jetstream::Context, bucket: &'static str, replicas: usize) -> Result<Store, KvError> {
    if let Ok(store) = js.get_key_value(bucket).await {
        return Ok(store);
    }
    match js.create_key_value(bucket_config(bucket, replicas)).await {
        Ok(store) => Ok(store),
        // Another component created it in between: bind to theirs.
        Err(create) => {
            js.get_key_value(bucket).await.map_err(|_| KvError::Bucket { bucket, message: create.to_string() })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_refuse_what_would_split_differently() {
        let c = ControllerKey::new("team-a", "ci").unwrap();
        assert_eq!(c.to_string(), "team-a.ci");
        assert_eq!(c.cell(2).to_string(), "team-a.ci.2");
        assert_eq!(c.cells_filter(), "team-a.ci.*");
        assert_eq!("team-a.ci".parse::<ControllerKey>().unwrap(), c);
        assert_eq!("team-a.ci.2".parse::<MiteKey>().unwrap(), c.cell(2));
        let err = ControllerKey::new("team-a", "ci.prod").unwrap_err().to_string();
        assert!(err.contains("controller") && err.contains("DNS-1123 label"), "{err}");
        assert!(ControllerKey::new("", "ci").is_err());
        assert!(ControllerKey::new("Team", "ci").is_err());
        assert!(ControllerKey::new("a", &"x".repeat(64)).is_err());
        for bad in ["team-a.ci.02", "team-a.ci.", "team-a.ci.-1", "team-a.ci.1.2", "team-a.ci", "team-a.ci.99999999999"]
        {
            assert!(bad.parse::<MiteKey>().is_err(), "{bad}");
        }
        assert!("team-a".parse::<ControllerKey>().is_err());
        assert!("team-a.ci.x".parse::<ControllerKey>().is_err());
    }

    #[test]
    fn observation_deltas_merge_field_by_field() {
        let mut o = Observation::default();
        let d =
            crate::proto::v1::Observation { queue_length: Some(3), mode: Some("NORMAL".into()), ..Default::default() };
        assert!(o.merge(&d));
        assert!(!o.merge(&d), "the same delta again changes nothing");
        let d2 = crate::proto::v1::Observation { queue_length: Some(0), ..Default::default() };
        assert!(o.merge(&d2));
        assert_eq!(o.queue_length, Some(0));
        assert_eq!(o.mode.as_deref(), Some("NORMAL"));
    }

    #[test]
    fn entries_are_camel_case_json_and_tolerate_unknown_fields() {
        let e = MiteEntry { connected: true, gateway_replica: "gw-0".into(), ..Default::default() };
        let json = String::from_utf8(encode(&e).to_vec()).unwrap();
        assert!(json.contains("\"gatewayReplica\":\"gw-0\""), "{json}");
        let back = decode_mite("a.b.0", br#"{"connected":true,"gatewayReplica":"gw-0","future":1}"#).unwrap();
        assert_eq!(back.gateway_replica, "gw-0");
        let d = decode_desired("a.b", br#"{"digest":"sha256:1","files":{"jenkins.yaml":"x: 1"}}"#).unwrap();
        assert_eq!(d.to_message().files.get("jenkins.yaml").map(String::as_str), Some("x: 1"));
        assert!(decode_desired("a.b", b"{").unwrap_err().to_string().contains("varroa_desired"));
    }

    #[test]
    fn what_a_mite_sends_is_bounded_so_an_entry_always_fits() {
        assert_eq!(bounded("short", 10), "short");
        let cut = bounded(&"é".repeat(100), 11);
        assert!(cut.len() <= 11 && cut.ends_with('…'), "{cut}");
        let huge = crate::proto::v1::ApplyResult {
            digest: "d".repeat(10_000),
            message: "m".repeat(100_000),
            drift_paths: vec!["p".repeat(10_000); 10_000],
            ..Default::default()
        };
        let mut entry = MiteEntry { last_apply_result: Some(ApplyResultRecord::from(&huge)), ..Default::default() };
        let o = crate::proto::v1::Observation {
            version: Some("v".repeat(100_000)),
            mode: Some("m".repeat(100_000)),
            ..Default::default()
        };
        entry.observation.merge(&o);
        entry.jenkins_version = bounded(&"j".repeat(100_000), MAX_SHORT_FIELD);
        let size = encode(&entry).len();
        assert!(size < MITES_MAX_VALUE_BYTES as usize, "{size} bytes");
        assert_eq!(entry.last_apply_result.unwrap().drift_paths.last().unwrap(), "… and 9936 more");
    }

    #[test]
    fn apply_results_keep_a_valid_time_only() {
        let r = crate::proto::v1::ApplyResult {
            digest: "d".into(),
            finished_at_unix_ms: 1_700_000_000_000,
            ..Default::default()
        };
        assert!(ApplyResultRecord::from(&r).finished_at.is_some());
        let r = crate::proto::v1::ApplyResult { finished_at_unix_ms: i64::MAX, ..Default::default() };
        assert!(ApplyResultRecord::from(&r).finished_at.is_none());
    }
}
