//! Setting `status.conditions` the way the Kubernetes API conventions require.
//!
//! Mirrors `meta.SetStatusCondition` from k8s.io/apimachinery (pkg/api/meta/conditions.go) and
//! the validation the API server applies to `metav1.Condition` (`ValidateConditions`):
//!
//! - one entry per `type`; a new type is appended, an existing one is updated in place (the order
//!   of the list never changes, so a status write does not reshuffle it);
//! - `lastTransitionTime` is set when the condition first appears and when its `status` changes,
//!   and is kept when only `reason`, `message` or `observedGeneration` change;
//! - `reason` is required and CamelCase (`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`, at most 1024
//!   characters), `status` is one of `True`, `False`, `Unknown`, `type` is a qualified name
//!   (`Ready`, `example.com/Ready`), `message` at most 32768 characters, and
//!   `observedGeneration` not negative.
//!
//! [`set_condition`] reports whether anything changed (write the status only then) and whether
//! the status transitioned (record an Event only then). Times are whole seconds, as `metav1.Time`
//! is serialized, so a condition read back from the server compares equal to the one written.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::{Timestamp, TimestampRound, Unit};

use crate::error::{Error, Result};

/// The status of a condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    /// `"True"`, `"False"` or `"Unknown"`, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

impl From<bool> for ConditionStatus {
    fn from(b: bool) -> Self {
        if b { ConditionStatus::True } else { ConditionStatus::False }
    }
}

impl std::fmt::Display for ConditionStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a controller wants a condition to say. `lastTransitionTime` is not part of it: it is
/// derived from the condition already in the list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DesiredCondition {
    pub type_: String,
    pub status: ConditionStatus,
    pub reason: String,
    pub message: String,
    pub observed_generation: Option<i64>,
}

impl DesiredCondition {
    /// A condition without `observedGeneration`.
    pub fn new(
        type_: impl Into<String>,
        status: ConditionStatus,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        DesiredCondition {
            type_: type_.into(),
            status,
            reason: reason.into(),
            message: message.into(),
            observed_generation: None,
        }
    }

    /// Set `observedGeneration` (pass the object's `metadata.generation`).
    pub fn observed_generation(mut self, generation: Option<i64>) -> Self {
        self.observed_generation = generation;
        self
    }

    /// Check the fields as the API server's `ValidateConditions` does.
    pub fn validate(&self) -> Result<()> {
        validate_type(&self.type_)?;
        validate_reason(&self.reason)?;
        if self.message.len() > 32768 {
            return Err(Error::invalid("condition message", "must be at most 32768 characters"));
        }
        if let Some(g) = self.observed_generation
            && g < 0
        {
            return Err(Error::invalid(
                "condition observedGeneration",
                format!("{g} must be greater than or equal to 0"),
            ));
        }
        Ok(())
    }
}

/// What [`set_condition`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConditionChange {
    /// Some field of the list changed: the status needs writing.
    pub changed: bool,
    /// The condition's `status` changed, or the condition is new: record an Event.
    pub transitioned: bool,
    /// The status before the call (`None` when the condition was not in the list).
    pub previous_status: Option<String>,
}

/// Set `desired` in `conditions`, with `now` as the transition time if the status transitions.
///
/// Returns an error (and leaves the list alone) when `desired` would not pass the API server's
/// validation.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    desired: DesiredCondition,
    now: Timestamp,
) -> Result<ConditionChange> {
    desired.validate()?;
    let status = desired.status.as_str();
    let Some(existing) = conditions.iter_mut().find(|c| c.type_ == desired.type_) else {
        conditions.push(Condition {
            last_transition_time: Time(whole_seconds(now)),
            message: desired.message,
            observed_generation: desired.observed_generation,
            reason: desired.reason,
            status: status.to_string(),
            type_: desired.type_,
        });
        return Ok(ConditionChange { changed: true, transitioned: true, previous_status: None });
    };
    let previous_status = Some(existing.status.clone());
    let mut changed = false;
    let mut transitioned = false;
    if existing.status != status {
        existing.status = status.to_string();
        existing.last_transition_time = Time(whole_seconds(now));
        changed = true;
        transitioned = true;
    }
    if existing.reason != desired.reason {
        existing.reason = desired.reason;
        changed = true;
    }
    if existing.message != desired.message {
        existing.message = desired.message;
        changed = true;
    }
    if existing.observed_generation != desired.observed_generation {
        existing.observed_generation = desired.observed_generation;
        changed = true;
    }
    Ok(ConditionChange { changed, transitioned, previous_status })
}

/// The condition of type `type_`, if present.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of type `type_` is present with status `True`.
pub fn is_condition_true(conditions: &[Condition], type_: &str) -> bool {
    find_condition(conditions, type_).is_some_and(|c| c.status == "True")
}

/// Remove the condition of type `type_`; returns whether it was there.
pub fn remove_condition(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

fn whole_seconds(t: Timestamp) -> Timestamp {
    t.round(TimestampRound::new().smallest(Unit::Second).mode(k8s_openapi::jiff::RoundMode::Trunc)).unwrap_or(t)
}

/// `Ready` or `example.com/Ready`: a Kubernetes qualified name.
fn validate_type(t: &str) -> Result<()> {
    let field = "condition type";
    let (prefix, name) = match t.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, t),
    };
    if let Some(p) = prefix {
        let dns_ok = !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !label.starts_with('-')
                    && !label.ends_with('-')
            });
        if !dns_ok {
            return Err(Error::invalid(
                field,
                format!("{t:?}: the prefix must be a lowercase DNS subdomain, e.g. example.com/Ready"),
            ));
        }
    }
    let alnum = |b: u8| b.is_ascii_alphanumeric();
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name.bytes().next().is_some_and(alnum)
        && name.bytes().last().is_some_and(alnum)
        && name.bytes().all(|b| alnum(b) || b == b'-' || b == b'_' || b == b'.');
    if !name_ok {
        return Err(Error::invalid(
            field,
            format!(
                "{t:?}: must be a qualified name (at most 63 alphanumerics, '-', '_' or '.', starting and ending \
                 with an alphanumeric), e.g. Ready"
            ),
        ));
    }
    Ok(())
}

/// CamelCase: `^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`, at most 1024 characters.
fn validate_reason(r: &str) -> Result<()> {
    let field = "condition reason";
    if r.is_empty() {
        return Err(Error::invalid(field, "must not be empty: use a CamelCase word such as ReconcileSucceeded"));
    }
    if r.len() > 1024 {
        return Err(Error::invalid(field, "must be at most 1024 characters"));
    }
    let bytes = r.as_bytes();
    let first_ok = bytes[0].is_ascii_alphabetic();
    let middle_ok = bytes.iter().all(|&b| b.is_ascii_alphanumeric() || b == b'_' || b == b',' || b == b':');
    let last_ok = bytes.last().is_some_and(|&b| b.is_ascii_alphanumeric() || b == b'_');
    if !(first_ok && middle_ok && last_ok) {
        return Err(Error::invalid(
            field,
            format!(
                "{r:?} must start with a letter and contain only letters, digits, '_', ',' or ':' (CamelCase, \
                 e.g. ReconcileSucceeded)"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).unwrap()
    }

    fn ready(status: ConditionStatus, reason: &str, message: &str) -> DesiredCondition {
        DesiredCondition::new("Ready", status, reason, message)
    }

    #[test]
    fn a_new_condition_is_appended_and_is_a_transition() {
        let mut list = vec![];
        let ch = set_condition(
            &mut list,
            ready(ConditionStatus::False, "Pending", "waiting").observed_generation(Some(1)),
            t(0),
        )
        .unwrap();
        assert_eq!(ch, ConditionChange { changed: true, transitioned: true, previous_status: None });
        assert_eq!(list.len(), 1);
        let c = &list[0];
        assert_eq!(
            (c.type_.as_str(), c.status.as_str(), c.reason.as_str(), c.message.as_str()),
            ("Ready", "False", "Pending", "waiting")
        );
        assert_eq!(c.observed_generation, Some(1));
        assert_eq!(c.last_transition_time, Time(t(0)));
    }

    #[test]
    fn same_condition_again_changes_nothing() {
        let mut list = vec![];
        set_condition(&mut list, ready(ConditionStatus::True, "Available", "ok"), t(0)).unwrap();
        let before = list.clone();
        let ch = set_condition(&mut list, ready(ConditionStatus::True, "Available", "ok"), t(60)).unwrap();
        assert_eq!(ch, ConditionChange { changed: false, transitioned: false, previous_status: Some("True".into()) });
        assert_eq!(list, before);
    }

    #[test]
    fn reason_message_generation_change_keeps_the_transition_time() {
        let mut list = vec![];
        set_condition(&mut list, ready(ConditionStatus::False, "Pending", "a").observed_generation(Some(1)), t(0))
            .unwrap();
        let ch = set_condition(
            &mut list,
            ready(ConditionStatus::False, "Progressing", "b").observed_generation(Some(2)),
            t(30),
        )
        .unwrap();
        assert!(ch.changed && !ch.transitioned);
        let c = &list[0];
        assert_eq!((c.reason.as_str(), c.message.as_str(), c.observed_generation), ("Progressing", "b", Some(2)));
        assert_eq!(c.last_transition_time, Time(t(0)), "status did not change: time kept");
        // observedGeneration alone is a change too.
        let ch = set_condition(
            &mut list,
            ready(ConditionStatus::False, "Progressing", "b").observed_generation(Some(3)),
            t(40),
        )
        .unwrap();
        assert!(ch.changed && !ch.transitioned);
    }

    #[test]
    fn status_change_is_a_transition_with_a_new_time() {
        let mut list = vec![];
        set_condition(&mut list, DesiredCondition::new("Degraded", ConditionStatus::False, "AsExpected", ""), t(0))
            .unwrap();
        set_condition(&mut list, ready(ConditionStatus::Unknown, "Pending", ""), t(0)).unwrap();
        let ch = set_condition(&mut list, ready(ConditionStatus::True, "Available", "up"), t(90)).unwrap();
        assert_eq!(ch, ConditionChange { changed: true, transitioned: true, previous_status: Some("Unknown".into()) });
        assert_eq!(list[1].last_transition_time, Time(t(90)));
        assert_eq!(list[0].last_transition_time, Time(t(0)), "other conditions untouched");
        assert_eq!(list.iter().map(|c| c.type_.as_str()).collect::<Vec<_>>(), ["Degraded", "Ready"], "order kept");
    }

    #[test]
    fn times_are_whole_seconds_like_the_wire_format() {
        let mut list = vec![];
        let now = Timestamp::from_nanosecond(1_700_000_000_987_654_321).unwrap();
        set_condition(&mut list, ready(ConditionStatus::True, "Available", ""), now).unwrap();
        let json = serde_json::to_value(&list[0]).unwrap();
        let back: Condition = serde_json::from_value(json).unwrap();
        assert_eq!(back, list[0], "round trip through JSON is lossless");
    }

    #[test]
    fn invalid_input_is_rejected_and_the_list_left_alone() {
        let mut list = vec![];
        for (d, field) in [
            (ready(ConditionStatus::True, "", "m"), "condition reason"),
            (ready(ConditionStatus::True, "not camel case", "m"), "condition reason"),
            (ready(ConditionStatus::True, "1Starts", "m"), "condition reason"),
            (ready(ConditionStatus::True, "Ends:", "m"), "condition reason"),
            (DesiredCondition::new("", ConditionStatus::True, "Ok", ""), "condition type"),
            (DesiredCondition::new("Bad/Type/x", ConditionStatus::True, "Ok", ""), "condition type"),
            (DesiredCondition::new("Example.com/Ready", ConditionStatus::True, "Ok", ""), "condition type"),
            (ready(ConditionStatus::True, "Ok", "").observed_generation(Some(-1)), "condition observedGeneration"),
            (ready(ConditionStatus::True, "Ok", &"x".repeat(32769)), "condition message"),
        ] {
            match set_condition(&mut list, d.clone(), t(0)) {
                Err(Error::Invalid { field: f, .. }) => assert_eq!(f, field, "{d:?}"),
                other => panic!("{d:?} gave {other:?}"),
            }
        }
        assert!(list.is_empty());
        for ok in ["Ready", "example.com/Ready", "vesper.eventide.dev/Expired", "Pod_Ready.2"] {
            DesiredCondition::new(ok, ConditionStatus::True, "A_b,c:d", "").validate().unwrap();
        }
    }

    #[test]
    fn find_is_true_and_remove() {
        let mut list = vec![];
        set_condition(&mut list, ready(ConditionStatus::True, "Available", ""), t(0)).unwrap();
        set_condition(&mut list, DesiredCondition::new("Degraded", false.into(), "AsExpected", ""), t(0)).unwrap();
        assert!(is_condition_true(&list, "Ready"));
        assert!(!is_condition_true(&list, "Degraded"));
        assert!(!is_condition_true(&list, "Missing"));
        assert_eq!(find_condition(&list, "Degraded").map(|c| c.reason.as_str()), Some("AsExpected"));
        assert!(remove_condition(&mut list, "Ready"));
        assert!(!remove_condition(&mut list, "Ready"));
        assert_eq!(list.len(), 1);
    }
}
