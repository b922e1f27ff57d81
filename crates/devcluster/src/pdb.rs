//! PodDisruptionBudget helpers of both the disruption controller (src/controllers/disruption.rs),
//! which writes a budget's status, and the eviction subresource (src/eviction.rs), which reads
//! and decrements it: which pods a budget guards, and its `DisruptionAllowed` condition as
//! upstream's k8s.io/component-helpers/apps/poddisruptionbudget writes and checks it
//! (`UpdateDisruptionAllowedCondition`, `ConditionsAreUpToDate`).

use crate::meta;
use crate::selector::LabelSelector;
use serde_json::{Map, Value};

pub(crate) const GROUP: &str = "policy";
pub(crate) const RESOURCE: &str = "poddisruptionbudgets";

/// The pods a budget's `spec.selector` selects in its namespace (`getPodsForPdb`).
pub(crate) fn selector_of(pdb: &Value) -> Result<LabelSelector, String> {
    match pdb.pointer("/spec/selector") {
        None | Some(Value::Null) => Ok(LabelSelector::nothing()),
        Some(s) => LabelSelector::from_label_selector(s).map_err(|e| e.to_string()),
    }
}

/// Whether a budget guards a pod (the eviction handler's `getPodDisruptionBudgets`): same
/// namespace, a valid selector matching its labels.
pub(crate) fn guards(pdb: &Value, pod: &Value) -> bool {
    meta::namespace(pdb) == meta::namespace(pod) && selector_of(pdb).is_ok_and(|s| s.matches(meta::labels(pod)))
}

/// An integer field, 0 when absent.
pub(crate) fn int(v: Option<&Value>) -> i64 {
    v.and_then(Value::as_i64).unwrap_or(0)
}

/// Set the `DisruptionAllowed` condition from `disruptionsAllowed`
/// (`pdbhelper.UpdateDisruptionAllowedCondition`), as `metav1.Condition` with
/// `apimeta.SetStatusCondition`: the transition time moves only when the status does.
pub(crate) fn update_disruption_allowed_condition(status: &mut Map<String, Value>) {
    let allowed = int(status.get("disruptionsAllowed"));
    let (st, reason) = if allowed > 0 { ("True", "SufficientPods") } else { ("False", "InsufficientPods") };
    set_condition(status, st, reason, "");
}

pub(crate) fn set_condition(status: &mut Map<String, Value>, st: &str, reason: &str, message: &str) {
    let observed = int(status.get("observedGeneration"));
    let mut conds: Vec<Value> = status.get("conditions").and_then(Value::as_array).cloned().unwrap_or_default();
    let pos = conds.iter().position(|c| c.get("type").and_then(Value::as_str) == Some("DisruptionAllowed"));
    let ltt = match pos.map(|i| &conds[i]) {
        Some(old) if old.get("status").and_then(Value::as_str) == Some(st) => {
            old.get("lastTransitionTime").cloned().unwrap_or_else(|| meta::now().into())
        }
        _ => meta::now().into(),
    };
    let mut c = Map::new();
    c.insert("type".into(), "DisruptionAllowed".into());
    c.insert("status".into(), st.into());
    if observed != 0 {
        c.insert("observedGeneration".into(), observed.into());
    }
    c.insert("lastTransitionTime".into(), ltt);
    c.insert("reason".into(), reason.into());
    c.insert("message".into(), message.into());
    match pos {
        Some(i) => conds[i] = Value::Object(c),
        None => conds.push(Value::Object(c)),
    }
    status.insert("conditions".into(), Value::Array(conds));
}

/// `pdbhelper.ConditionsAreUpToDate`.
pub(crate) fn conditions_up_to_date(pdb: &Value) -> bool {
    let status = pdb.get("status");
    let conds = crate::conditions::of(status);
    let Some(c) = crate::conditions::find(&conds, "DisruptionAllowed") else { return false };
    if int(status.and_then(|s| s.get("observedGeneration"))) != int(pdb.pointer("/metadata/generation")) {
        return false;
    }
    let (st, reason) = (c.get("status").and_then(Value::as_str), c.get("reason").and_then(Value::as_str));
    if int(status.and_then(|s| s.get("disruptionsAllowed"))) > 0 {
        st == Some("True") && reason == Some("SufficientPods")
    } else {
        st == Some("False") && reason == Some("InsufficientPods")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_condition_keeps_its_transition_time_while_its_status_stays() {
        let mut st = Map::new();
        st.insert("disruptionsAllowed".into(), 1.into());
        st.insert("observedGeneration".into(), 2.into());
        update_disruption_allowed_condition(&mut st);
        let c = &st["conditions"][0];
        assert_eq!(c["reason"], "SufficientPods");
        assert_eq!(c["status"], "True");
        assert_eq!(c["observedGeneration"], 2);
        assert_eq!(c["message"], "");
        let mut old = st.clone();
        old["conditions"][0]["lastTransitionTime"] = json!("2020-01-01T00:00:00Z");
        update_disruption_allowed_condition(&mut old);
        assert_eq!(old["conditions"][0]["lastTransitionTime"], "2020-01-01T00:00:00Z");
        old.insert("disruptionsAllowed".into(), 0.into());
        update_disruption_allowed_condition(&mut old);
        assert_eq!(old["conditions"][0]["reason"], "InsufficientPods");
        assert_ne!(old["conditions"][0]["lastTransitionTime"], "2020-01-01T00:00:00Z");
    }

    #[test]
    fn null_selectors_guard_nothing_and_empty_ones_everything() {
        let pod = json!({"metadata": {"name": "p", "namespace": "d", "labels": {"app": "x"}}});
        let pdb = |sel: Value| json!({"metadata": {"name": "b", "namespace": "d"}, "spec": {"selector": sel}});
        assert!(!guards(&pdb(Value::Null), &pod));
        assert!(guards(&pdb(json!({})), &pod));
        assert!(guards(&pdb(json!({"matchLabels": {"app": "x"}})), &pod));
        assert!(!guards(&pdb(json!({"matchLabels": {"app": "y"}})), &pod));
        let other_ns = json!({"metadata": {"name": "b", "namespace": "e"}, "spec": {"selector": {}}});
        assert!(!guards(&other_ns, &pod));
    }
}
