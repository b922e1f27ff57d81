//! Conversion between a served version and the stored form.
//!
//! Built-in kinds and CRDs with conversion strategy `None` only change `apiVersion`. Events are
//! stored as core/v1 Events and served as events.k8s.io/v1 too, with the field renames the real
//! server's conversion applies, so an event written by kube's `Recorder` (events.k8s.io) shows in
//! `kubectl describe` (core/v1, field selector on involvedObject).

use crate::registry::{Conversion, ResourceDef};
use serde_json::{Map, Value};

/// events.k8s.io/v1 field <-> core/v1 field.
const EVENT_RENAMES: [(&str, &str); 7] = [
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

fn rename(obj: &mut Value, pairs: impl Iterator<Item = (&'static str, &'static str)>) {
    let Value::Object(m) = obj else { return };
    let mut out = Map::with_capacity(m.len());
    let pairs: Vec<(&str, &str)> = pairs.collect();
    for (k, v) in std::mem::take(m) {
        let new_key = pairs.iter().find(|(from, _)| *from == k).map(|(_, to)| to.to_string()).unwrap_or(k);
        out.insert(new_key, v);
    }
    *m = out;
}

fn set_type(obj: &mut Value, api_version: &str, kind: &str) {
    if let Value::Object(m) = obj {
        m.insert("apiVersion".into(), api_version.into());
        m.insert("kind".into(), kind.into());
    }
}

/// The stored form of an object written through `def`.
pub fn to_storage(def: &ResourceDef, mut obj: Value) -> Value {
    match def.conversion {
        Conversion::None => {
            let av = if def.group.is_empty() {
                def.storage_version.clone()
            } else {
                format!("{}/{}", def.group, def.storage_version)
            };
            set_type(&mut obj, &av, &def.kind);
            crate::crd::coerce_for_storage(def, &mut obj);
        }
        Conversion::EventsV1 => {
            rename(&mut obj, EVENT_RENAMES.into_iter());
            set_type(&mut obj, "v1", "Event");
        }
    }
    obj
}

/// Whether stored objects are served unchanged by `def`.
pub fn served_as_stored(def: &ResourceDef) -> bool {
    def.conversion == Conversion::None && def.version == def.storage_version && def.storage_schema.is_none()
}

/// The object as served by `def`.
pub fn from_storage(def: &ResourceDef, stored: &Value) -> Value {
    if served_as_stored(def) && stored.get("apiVersion").and_then(Value::as_str) == Some(def.api_version().as_str()) {
        // Stored objects are canonical already: nothing to convert.
        return stored.clone();
    }
    let mut obj = stored.clone();
    match def.conversion {
        Conversion::None => {
            crate::crd::coerce_for_read(def, &mut obj);
            set_type(&mut obj, &def.api_version(), &def.kind);
        }
        Conversion::EventsV1 => {
            rename(&mut obj, EVENT_RENAMES.into_iter().map(|(a, b)| (b, a)));
            set_type(&mut obj, "events.k8s.io/v1", "Event");
        }
    }
    crate::meta::canonicalize(&mut obj, def.is_custom());
    obj
}
