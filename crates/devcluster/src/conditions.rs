//! Conditions as controllers write them: `lastTransitionTime` moves only when the status
//! changes, `lastUpdateTime` (Deployments) when anything about the condition changes.

use serde_json::{Map, Value};

pub fn find<'a>(conds: &'a [Value], type_: &str) -> Option<&'a Value> {
    conds.iter().find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
}

pub fn is_true(conds: &[Value], type_: &str) -> bool {
    find(conds, type_).and_then(|c| c.get("status")).and_then(Value::as_str) == Some("True")
}

/// Whether a pod's `Ready` condition is true (`podutil.IsPodReady`).
pub fn pod_ready(pod: &Value) -> bool {
    is_true(&of(pod.get("status")), "Ready")
}

/// The conditions array of a status, or empty.
pub fn of(status: Option<&Value>) -> Vec<Value> {
    status.and_then(|s| s.get("conditions")).and_then(Value::as_array).cloned().unwrap_or_default()
}

/// How a kind writes its conditions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// type, status, lastUpdateTime, lastTransitionTime, reason, message (apps/v1).
    Workload,
    /// type, status, lastProbeTime, lastTransitionTime, reason, message (core/v1 Pod).
    Pod,
    /// type, status, lastTransitionTime, reason, message (metav1.Condition-like, Namespace).
    Plain,
}

/// Set a condition, keeping its place in the list and its transition time when the status
/// did not change.
pub fn set(conds: &mut Vec<Value>, style: Style, type_: &str, status: &str, reason: &str, message: &str, now: &str) {
    let old = conds.iter().position(|c| c.get("type").and_then(Value::as_str) == Some(type_));
    let prev = old.map(|i| conds[i].clone());
    let same_status = prev.as_ref().and_then(|p| p.get("status")).and_then(Value::as_str) == Some(status);
    let same_all = same_status
        && prev.as_ref().and_then(|p| p.get("reason")).and_then(Value::as_str).unwrap_or("") == reason
        && prev.as_ref().and_then(|p| p.get("message")).and_then(Value::as_str).unwrap_or("") == message;
    let ltt = match (&prev, same_status) {
        (Some(p), true) => p.get("lastTransitionTime").cloned().unwrap_or_else(|| now.into()),
        _ => Value::from(now),
    };
    let mut c = Map::new();
    c.insert("type".into(), type_.into());
    c.insert("status".into(), status.into());
    match style {
        Style::Workload => {
            let lut = match (&prev, same_all) {
                (Some(p), true) => p.get("lastUpdateTime").cloned().unwrap_or_else(|| now.into()),
                _ => Value::from(now),
            };
            c.insert("lastUpdateTime".into(), lut);
        }
        Style::Pod => {
            c.insert("lastProbeTime".into(), Value::Null);
        }
        Style::Plain => {}
    }
    c.insert("lastTransitionTime".into(), ltt);
    if !reason.is_empty() {
        c.insert("reason".into(), reason.into());
    }
    if !message.is_empty() {
        c.insert("message".into(), message.into());
    }
    match old {
        Some(i) => conds[i] = Value::Object(c),
        None => conds.push(Value::Object(c)),
    }
}

pub fn remove(conds: &mut Vec<Value>, type_: &str) {
    conds.retain(|c| c.get("type").and_then(Value::as_str) != Some(type_));
}
