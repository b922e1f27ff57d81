//! The merge of JCasC documents, in input order. The rules (docs/varroa/configuration.md):
//!
//! 1. Maps merge deeply; for a key both set, the later input's scalar wins.
//! 2. At a *choice* path ([`CHOICE_PATHS`], where JCasC expects exactly one implementation, as
//!    `jenkins.securityRealm`), the last input that sets it wins whole: two implementations are
//!    never mixed.
//! 3. Lists of *named* items (a map with `id` or `name`, or JCasC's one-key typed item such as
//!    `{kubernetes: {name: k8s}}`) merge by identity: an item whose identity an earlier input
//!    already listed is merged deeply into it, in place; new items are appended.
//! 4. Other lists are unions: later items are appended, exact duplicates dropped.
//! 5. A map meeting a scalar or a list (or a list meeting a scalar) at the same path cannot be
//!    merged: an error naming the path and both inputs.
//!
//! The merge is idempotent (`a + a = a`), has the empty map as identity, and is associative
//! (`(a + b) + c = a + (b + c)`) for documents whose lists list each identity once (a second
//! item with the same identity in one document is refused as ambiguous).

use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Paths (dotted, from the document root) where the later input replaces instead of merging.
pub const CHOICE_PATHS: &[&str] = &[
    "jenkins.securityRealm",
    "jenkins.authorizationStrategy",
    "jenkins.markupFormatter",
    "jenkins.crumbIssuer",
    "jenkins.projectNamingStrategy",
    "jenkins.labelAtoms",
];

/// A merge that cannot be done.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    #[error(
        "{later} sets {path} to {later_kind}, but {earlier} set it to {earlier_kind}: {earlier_kind} and {later_kind} cannot be merged; change one of the two inputs so both use the same shape"
    )]
    Conflict { path: String, earlier: String, earlier_kind: &'static str, later: String, later_kind: &'static str },
    #[error("{input} lists two items with the identity {identity} under {path}: keep one (merge them into one item)")]
    DuplicateIdentity { input: String, path: String, identity: String },
}

/// Where each value of a merged document came from: the path of every scalar, list item and map
/// key set, mapped to the label of the input that set it last.
pub type Origins = BTreeMap<String, String>;

/// Merges `later` into `base`, `later` winning. `origins` records, per path, which input set
/// it; `label` names `later` in errors and origins.
pub fn merge_into(base: &mut Value, later: &Value, label: &str, origins: &mut Origins) -> Result<(), MergeError> {
    check_identities(later, "", label)?;
    merge_at(base, later, "", label, origins)
}

/// Merges two documents without tracking origins (for tests and callers that need none).
pub fn merge(a: &Value, b: &Value) -> Result<Value, MergeError> {
    let mut out = a.clone();
    let mut origins = Origins::new();
    merge_into(&mut out, b, "the later document", &mut origins)?;
    Ok(out)
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Object(_) => "a map",
        Value::Array(_) => "a list",
        Value::Null => "null",
        _ => "a scalar",
    }
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_string() } else { format!("{path}.{key}") }
}

/// The identity of a list item: `name=x`/`id=x` of a map, or `type=x` of a typed item
/// `{type: {name: x}}`.
pub fn identity(item: &Value) -> Option<String> {
    let obj = item.as_object()?;
    let own = |m: &Map<String, Value>| -> Option<String> {
        for key in ["id", "name"] {
            if let Some(v) = m.get(key) {
                return Some(match v {
                    Value::String(s) => format!("{key}={s}"),
                    other => format!("{key}={other}"),
                });
            }
        }
        None
    };
    if let Some(id) = own(obj) {
        return Some(id);
    }
    if obj.len() == 1 {
        let (ty, inner) = obj.iter().next()?;
        let inner = inner.as_object()?;
        return own(inner).map(|id| format!("{ty}[{id}]"));
    }
    None
}

fn item_path(path: &str, item: &Value, index: usize) -> String {
    match identity(item) {
        Some(id) => format!("{path}[{id}]"),
        None => format!("{path}[{index}]"),
    }
}

/// Refuses a list that names one identity twice (the merge would be ambiguous).
fn check_identities(v: &Value, path: &str, label: &str) -> Result<(), MergeError> {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                check_identities(v, &child(path, k), label)?;
            }
        }
        Value::Array(items) => {
            let mut seen = std::collections::BTreeSet::new();
            for (i, item) in items.iter().enumerate() {
                if let Some(id) = identity(item)
                    && !seen.insert(id.clone())
                {
                    return Err(MergeError::DuplicateIdentity {
                        input: label.to_string(),
                        path: path.to_string(),
                        identity: id,
                    });
                }
                check_identities(item, &item_path(path, item, i), label)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// Records `label` as the origin of `path` and everything under it.
fn record(v: &Value, path: &str, label: &str, origins: &mut Origins) {
    // Values replaced wholesale: forget what was under them before.
    let prefix_dot = format!("{path}.");
    let prefix_idx = format!("{path}[");
    origins.retain(|k, _| !(k == path || k.starts_with(&prefix_dot) || k.starts_with(&prefix_idx)));
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, v) in m {
                record(v, &child(path, k), label, origins);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for (i, item) in items.iter().enumerate() {
                record(item, &item_path(path, item, i), label, origins);
            }
        }
        _ => {
            origins.insert(path.to_string(), label.to_string());
        }
    }
}

fn origin_of(path: &str, origins: &Origins) -> String {
    if let Some(o) = origins.get(path) {
        return o.clone();
    }
    let prefix_dot = format!("{path}.");
    let prefix_idx = format!("{path}[");
    origins
        .iter()
        .find(|(k, _)| k.starts_with(&prefix_dot) || k.starts_with(&prefix_idx))
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| "an earlier input".to_string())
}

fn merge_at(base: &mut Value, later: &Value, path: &str, label: &str, origins: &mut Origins) -> Result<(), MergeError> {
    if CHOICE_PATHS.contains(&path) {
        *base = later.clone();
        record(later, path, label, origins);
        return Ok(());
    }
    match (&mut *base, later) {
        (Value::Object(b), Value::Object(l)) => {
            if !l.is_empty() {
                // An empty map an earlier input set is now described by its keys.
                origins.remove(path);
            }
            for (k, lv) in l {
                let p = child(path, k);
                match b.get_mut(k) {
                    Some(bv) => merge_at(bv, lv, &p, label, origins)?,
                    None => {
                        b.insert(k.clone(), lv.clone());
                        record(lv, &p, label, origins);
                    }
                }
            }
            if l.is_empty() && b.is_empty() {
                origins.entry(path.to_string()).or_insert_with(|| label.to_string());
            }
            Ok(())
        }
        (Value::Array(b), Value::Array(l)) => {
            for (i, item) in l.iter().enumerate() {
                match identity(item) {
                    Some(id) => match b.iter_mut().find(|x| identity(x).as_deref() == Some(id.as_str())) {
                        Some(existing) => merge_at(existing, item, &format!("{path}[{id}]"), label, origins)?,
                        None => {
                            b.push(item.clone());
                            record(item, &format!("{path}[{id}]"), label, origins);
                        }
                    },
                    None => {
                        if !b.contains(item) {
                            let at = b.len();
                            b.push(item.clone());
                            record(item, &format!("{path}[{at}]"), label, origins);
                        }
                        let _ = i;
                    }
                }
            }
            Ok(())
        }
        (Value::Object(_), _) | (_, Value::Object(_)) | (Value::Array(_), _) | (_, Value::Array(_)) => {
            Err(MergeError::Conflict {
                path: path.to_string(),
                earlier: origin_of(path, origins),
                earlier_kind: kind(base),
                later: label.to_string(),
                later_kind: kind(later),
            })
        }
        (b, l) => {
            *b = l.clone();
            record(l, path, label, origins);
            Ok(())
        }
    }
}

/// A copy of `v` with every map's keys sorted, the canonical form rendered files use (so the
/// same configuration always gives the same bytes and digest, whatever the key order written).
pub fn canonical(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            Value::Object(keys.into_iter().map(|k| (k.clone(), canonical(&m[k]))).collect())
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}
