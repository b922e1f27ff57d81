//! The Events section of `describe`, as kubectl prints it: TYPE, REASON, AGE (with `(xN)` for a
//! repeated event), FROM, OBJECT (when asked for), MESSAGE; oldest first, newest last. Both
//! Event APIs (core/v1 and events.k8s.io/v1) read into the same [`EventLine`].

use crate::table::Table;
use crate::timefmt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event as CoreEvent, ObjectReference};
use k8s_openapi::api::events::v1::Event;

/// One event, as the section shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventLine {
    /// When it last happened: the series' last observation, else the last, the event's, the
    /// first time, else the object's creation.
    pub time: Option<Timestamp>,
    /// `Normal` or `Warning`.
    pub type_: String,
    /// `Started`, `BackOff`...
    pub reason: String,
    /// How many times it happened, when more than once.
    pub count: Option<i32>,
    /// The component that reported it.
    pub from: String,
    /// The object it is about: `Kind/name`.
    pub object: String,
    /// What it says, on one line.
    pub message: String,
}

/// Which columns the section has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Columns {
    /// TYPE, REASON, AGE, FROM, MESSAGE: the events of one object.
    Plain,
    /// An OBJECT column before MESSAGE: the events of several objects (a namespace's).
    WithObject,
}

fn kind_and_name(r: Option<&ObjectReference>) -> String {
    let kind = r.and_then(|r| r.kind.clone()).unwrap_or_default();
    let name = r.and_then(|r| r.name.clone()).unwrap_or_default();
    format!("{kind}/{name}")
}

fn first_nonempty(a: Option<String>, b: Option<String>) -> String {
    a.filter(|s| !s.is_empty()).or(b).unwrap_or_default()
}

impl From<CoreEvent> for EventLine {
    fn from(e: CoreEvent) -> EventLine {
        EventLine {
            time: e
                .series
                .as_ref()
                .and_then(|s| s.last_observed_time.as_ref().map(|t| t.0))
                .or(e.last_timestamp.as_ref().map(|t| t.0))
                .or(e.event_time.as_ref().map(|t| t.0))
                .or(e.first_timestamp.as_ref().map(|t| t.0))
                .or(e.metadata.creation_timestamp.as_ref().map(|t| t.0)),
            type_: e.type_.unwrap_or_default(),
            reason: e.reason.unwrap_or_default(),
            count: e.series.as_ref().and_then(|s| s.count).or(e.count).filter(|n| *n > 1),
            from: first_nonempty(e.reporting_component, e.source.and_then(|s| s.component)),
            object: kind_and_name(Some(&e.involved_object)),
            message: e.message.unwrap_or_default().replace('\n', " "),
        }
    }
}

impl From<Event> for EventLine {
    fn from(e: Event) -> EventLine {
        EventLine {
            time: e
                .series
                .as_ref()
                .map(|s| s.last_observed_time.0)
                .or(e.deprecated_last_timestamp.as_ref().map(|t| t.0))
                .or(e.event_time.as_ref().map(|t| t.0))
                .or(e.deprecated_first_timestamp.as_ref().map(|t| t.0))
                .or(e.metadata.creation_timestamp.as_ref().map(|t| t.0)),
            type_: e.type_.unwrap_or_default(),
            reason: e.reason.unwrap_or_default(),
            count: e.series.as_ref().map(|s| s.count).or(e.deprecated_count).filter(|n| *n > 1),
            from: first_nonempty(e.reporting_controller, e.deprecated_source.and_then(|s| s.component)),
            object: kind_and_name(e.regarding.as_ref()),
            message: e.note.unwrap_or_default().replace('\n', " "),
        }
    }
}

/// The section's lines, indented by two spaces: the `last` most recent events (`usize::MAX`
/// for all), oldest first; `  <none>` without events; `  <cannot read: …>` with the reason
/// when they could not be listed.
pub fn section<E: Into<EventLine>>(
    events: Result<Vec<E>, String>,
    now: Timestamp,
    last: usize,
    columns: Columns,
) -> String {
    let mut events: Vec<EventLine> = match events {
        Ok(e) => e.into_iter().map(Into::into).collect(),
        Err(e) => return format!("  <cannot read: {e}>\n"),
    };
    if events.is_empty() {
        return "  <none>\n".into();
    }
    events.sort_by_key(|e| e.time);
    let skip = events.len().saturating_sub(last);
    let mut headers = vec!["TYPE", "REASON", "AGE", "FROM"];
    if columns == Columns::WithObject {
        headers.push("OBJECT");
    }
    headers.push("MESSAGE");
    let mut t = Table::new(headers);
    for e in events.into_iter().skip(skip) {
        let age = timefmt::age_of(now, e.time);
        let mut row = vec![
            e.type_,
            e.reason,
            match e.count {
                Some(n) => format!("{age} (x{n})"),
                None => age,
            },
            e.from,
        ];
        if columns == Columns::WithObject {
            row.push(e.object);
        }
        row.push(e.message);
        t.row(row);
    }
    t.render("  ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> Timestamp {
        "2026-01-02T00:00:00Z".parse().unwrap()
    }

    #[test]
    fn events_k8s_io_events_read_oldest_first_with_their_count() {
        let events: Vec<Event> = serde_json::from_value(json!([
            {"metadata": {"name": "b"}, "eventTime": "2026-01-01T23:59:00.000000Z", "type": "Warning",
             "reason": "BootFailed", "reportingController": "varroa.dev/operator", "reportingInstance": "x",
             "action": "Reconcile", "note": "Jenkins did not\nstart", "regarding": {"kind": "Controller", "name": "a"},
             "series": {"count": 3, "lastObservedTime": "2026-01-01T23:58:00.000000Z"}},
            {"metadata": {"name": "a"}, "eventTime": "2026-01-01T23:50:00.000000Z", "type": "Normal",
             "reason": "Provisioned", "deprecatedSource": {"component": "old"}, "reportingController": "",
             "reportingInstance": "x", "action": "Reconcile", "note": "ready"},
        ]))
        .unwrap();
        assert_eq!(
            section(Ok(events), now(), usize::MAX, Columns::Plain),
            "  TYPE      REASON        AGE       FROM                  MESSAGE\n  \
             Normal    Provisioned   10m       old                   ready\n  \
             Warning   BootFailed    2m (x3)   varroa.dev/operator   Jenkins did not start\n"
        );
    }

    #[test]
    fn core_events_show_their_object_and_only_the_last_ones() {
        let events: Vec<CoreEvent> = serde_json::from_value(json!([
            {"metadata": {"name": "1"}, "involvedObject": {"kind": "Pod", "name": "p"}, "type": "Normal",
             "reason": "Pulled", "lastTimestamp": "2026-01-01T23:00:00Z", "source": {"component": "kubelet"},
             "message": "pulled", "count": 1},
            {"metadata": {"name": "2"}, "involvedObject": {"kind": "Pod", "name": "p"}, "type": "Warning",
             "reason": "BackOff", "lastTimestamp": "2026-01-01T23:30:00Z", "reportingComponent": "kubelet",
             "message": "back-off", "count": 4},
            {"metadata": {"name": "3", "creationTimestamp": "2026-01-01T23:40:00Z"},
             "involvedObject": {"kind": "Service", "name": "s"}, "reason": "Created", "message": "created"},
        ]))
        .unwrap();
        assert_eq!(
            section(Ok(events), now(), 2, Columns::WithObject),
            "  TYPE      REASON    AGE        FROM      OBJECT      MESSAGE\n  \
             Warning   BackOff   30m (x4)   kubelet   Pod/p       back-off\n  \
             \u{20}         Created   20m                  Service/s   created\n"
        );
    }

    #[test]
    fn no_events_and_unreadable_events_say_so() {
        assert_eq!(section(Ok(Vec::<Event>::new()), now(), usize::MAX, Columns::Plain), "  <none>\n");
        assert_eq!(
            section(Err::<Vec<Event>, _>("forbidden".into()), now(), usize::MAX, Columns::Plain),
            "  <cannot read: forbidden>\n"
        );
    }
}
