//! `describe controller NAME`: the controller's state (power, phase, attention and the
//! condition behind it, cells, last reconcile and apply, config digest), its conditions, its
//! settings resolved against the cluster's ProvisioningDefaults and ControllerClass with the
//! layer each value came from, and the Events about it (oldest first, newest last).
//!
//! Only the Controller itself must be readable: what else cannot be read is said in its
//! section, not fatal.

use crate::client::Target;
use crate::controller;
use crate::error::Result;
use crate::error::readable;
use clikit::events::{self, Columns};
use clikit::table::Table;
use clikit::timefmt;
use jiff::Timestamp;
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde_json::Value;
use varroa_api::{Controller, ControllerClass, ProvisioningDefaults};

/// Run `describe controller NAME`.
pub async fn run(t: &Target, name: &str) -> Result<()> {
    let c = controller::get(t, name).await?;
    let now = Timestamp::now();
    let resolved = resolve(t, &c).await;
    let cells = resolved.as_ref().ok().and_then(|r| r.settings.cells);
    let mut out = summary(&c, cells, now);
    out.push_str(&conditions(&c, now));
    out.push_str("Settings (resolved; where each value came from):\n");
    out.push_str(&settings_section(resolved));
    out.push_str("Events:\n");
    out.push_str(&events::section(events(t, &c).await, now, usize::MAX, Columns::Plain));
    out!("{out}");
    Ok(())
}

fn none() -> String {
    "<none>".into()
}

/// The header: identity and what the status says. `cells`: the resolved `cells` setting.
pub fn summary(c: &Controller, cells: Option<i32>, now: Timestamp) -> String {
    let status = controller::status_of(c);
    let ago = |t: Timestamp| format!("{} ({} ago)", timefmt::moment(t), timefmt::age(timefmt::since(now, t)));
    let mut t = Table::new(["Name:".to_string(), c.name_any()]);
    t.row(["Namespace:".to_string(), c.namespace().unwrap_or_default()]);
    t.row(["Class:".to_string(), c.spec.class_name.clone().unwrap_or_else(none)]);
    t.row(["Power state:".to_string(), format!("{:?}", c.spec.power_state)]);
    t.row([
        "Phase:".to_string(),
        status
            .phase
            .map(|p| p.to_string())
            .unwrap_or_else(|| "Pending (no status yet: is the operator running?)".into()),
    ]);
    let attention = match varroa_api::attention(&status) {
        None => none(),
        Some(a) => match controller::attention_cause(&status, a) {
            Some(cause) => format!("{a} ({cause})"),
            None => a.to_string(),
        },
    };
    t.row(["Attention:".to_string(), attention]);
    t.row(["Cells:".to_string(), format!("{} ready", controller::ready_cells(c, cells))]);
    if let Some(r) = &status.resolved {
        let mut parts = vec![];
        if let Some(p) = &r.version_profile {
            parts.push(format!("profile {p}"));
        }
        if let Some(v) = &r.jenkins_version {
            parts.push(format!("Jenkins {v}"));
        }
        if let Some(b) = &r.bundle {
            parts.push(format!("bundle {b}"));
        }
        if let Some(n) = r.plugin_count {
            parts.push(format!("{n} plugins"));
        }
        t.row(["Resolved:".to_string(), if parts.is_empty() { none() } else { parts.join(", ") }]);
    }
    t.row([
        "Last reconciled:".to_string(),
        status.last_reconciled_at.as_ref().map(|r| ago(r.0)).unwrap_or_else(|| "<never>".into()),
    ]);
    let apply = match &status.last_apply_result {
        None => none(),
        Some(r) => {
            let mut s = if r.succeeded { "succeeded".to_string() } else { "FAILED".to_string() };
            if let Some(at) = &r.time {
                s.push_str(&format!(" at {}", ago(at.0)));
            }
            if !r.digest.is_empty() {
                s.push_str(&format!(", digest {}", r.digest));
            }
            if !r.message.is_empty() {
                s.push_str(&format!(": {}", r.message));
            }
            s
        }
    };
    t.row(["Mite:".to_string(), mite(&status, now)]);
    t.row(["Last apply:".to_string(), apply]);
    t.row(["Config digest:".to_string(), status.config_digest.clone().unwrap_or_else(none)]);
    let observed = status.observed_generation.map(|g| g.to_string()).unwrap_or_else(none);
    t.row(["Generation:".to_string(), format!("{} (status describes {observed})", c.metadata.generation.unwrap_or(0))]);
    t.render("")
}

/// The mite's stream, from the `MiteConnected` condition the operator keeps from the gateway's
/// `varroa_mites` entries: up since when, lost since when, or never up. (Heartbeats are not
/// in the status: a heartbeat a second would be a status write a second.)
pub fn mite(status: &varroa_api::ControllerStatus, now: Timestamp) -> String {
    let Some(c) = controller::condition(status, varroa_api::lifecycle::condition::MITE_CONNECTED) else {
        return none();
    };
    let at = c.last_transition_time.0;
    let when = format!("{} ({} ago)", timefmt::moment(at), timefmt::age(timefmt::since(now, at)));
    match (c.status.as_str(), c.reason.as_str()) {
        ("True", _) => format!("connected since {when}"),
        (_, varroa_api::lifecycle::REASON_STREAM_LOST) => format!("stream lost since {when}: {}", c.message),
        (_, reason) if c.message.is_empty() => format!("not connected ({reason})"),
        (_, reason) => format!("not connected ({reason}: {})", c.message),
    }
}

fn conditions(c: &Controller, now: Timestamp) -> String {
    let status = controller::status_of(c);
    if status.conditions.is_empty() {
        return "Conditions:\n  <none>\n".into();
    }
    let mut t = Table::new(["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"]);
    for cond in status.conditions {
        t.row([
            cond.type_,
            cond.status,
            cond.reason,
            timefmt::age(timefmt::since(now, cond.last_transition_time.0)),
            cond.message.replace('\n', " "),
        ]);
    }
    format!("Conditions:\n{}", t.render("  "))
}

/// The controller's settings resolved over the cluster's layers, or why they cannot be.
async fn resolve(t: &Target, c: &Controller) -> Result<varroa_config::ResolvedSettings, String> {
    let defaults = Api::<ProvisioningDefaults>::all(t.client.clone())
        .get_opt(varroa_api::DEFAULTS_NAME)
        .await
        .map_err(|e| format!("cannot read ProvisioningDefaults {}: {}", varroa_api::DEFAULTS_NAME, readable(&e)))?;
    let class = match &c.spec.class_name {
        Some(name) => Api::<ControllerClass>::all(t.client.clone())
            .get_opt(name)
            .await
            .map_err(|e| format!("cannot read ControllerClass {name}: {}", readable(&e)))?,
        None => None,
    };
    varroa_config::settings::resolve(c, class.as_ref(), defaults.as_ref()).map_err(|e| e.to_string())
}

/// The value at a provenance path of the resolved settings (`storage.size`, `plugins[git]`).
pub fn setting_value(settings: &Value, path: &str) -> String {
    if let Some(name) = path.strip_prefix("plugins[").and_then(|p| p.strip_suffix(']')) {
        return settings["plugins"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["name"] == name))
            .and_then(|p| p["version"].as_str())
            .unwrap_or_default()
            .to_string();
    }
    let v = path.split('.').fold(settings, |v, part| &v[part]);
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// `SETTING  VALUE  FROM` rows, one per resolved field, or the reason there are none.
pub fn settings_section(resolved: Result<varroa_config::ResolvedSettings, String>) -> String {
    let r = match resolved {
        Ok(r) => r,
        Err(e) => return format!("  <cannot resolve: {e}>\n"),
    };
    let settings = serde_json::to_value(&r.settings).unwrap_or_default();
    let mut t = Table::new(["SETTING", "VALUE", "FROM"]);
    for (path, layer) in &r.provenance {
        t.row([path.clone(), setting_value(&settings, path), layer.to_string()]);
    }
    t.render("  ")
}

/// Events about the controller (`regarding` it, events.k8s.io/v1, as the operator writes them;
/// core/v1 Events are the same objects).
async fn events(t: &Target, c: &Controller) -> Result<Vec<Event>, String> {
    let ns = c.namespace().unwrap_or_else(|| t.namespace.clone());
    let api: Api<Event> = Api::namespaced(t.client.clone(), &ns);
    let fields = format!("regarding.kind=Controller,regarding.name={}", c.name_any());
    let uid = c.uid();
    let mut items = api.list(&ListParams::default().fields(&fields)).await.map_err(|e| readable(&e))?.items;
    // Events of an earlier controller of the same name (or of another API's kind Controller)
    // are not this one's.
    items.retain(|e| {
        let r = e.regarding.as_ref();
        r.and_then(|r| r.uid.as_ref()).is_none_or(|u| Some(u) == uid.as_ref())
            && r.and_then(|r| r.api_version.as_deref()).is_none_or(|v| v.starts_with(varroa_api::GROUP))
    });
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn setting_values_are_found_by_path() {
        let v = json!({"storage": {"size": "50Gi"}, "cells": 2, "plugins": [{"name": "git", "version": "5.7.0"}],
                       "jvmOptions": ["-Xmx2g"]});
        assert_eq!(setting_value(&v, "storage.size"), "50Gi");
        assert_eq!(setting_value(&v, "cells"), "2");
        assert_eq!(setting_value(&v, "plugins[git]"), "5.7.0");
        assert_eq!(setting_value(&v, "jvmOptions"), "[\"-Xmx2g\"]");
        assert_eq!(setting_value(&v, "nope.deeper"), "");
    }

    #[test]
    fn the_mite_row_says_since_when_the_stream_is_up_or_lost() {
        let now: Timestamp = "2026-03-01T12:00:00Z".parse().unwrap();
        let status = |s: &str, reason: &str, message: &str| -> varroa_api::ControllerStatus {
            serde_json::from_value(json!({"conditions": [{
                "type": "MiteConnected", "status": s, "reason": reason, "message": message,
                "lastTransitionTime": "2026-03-01T11:58:00Z",
            }]}))
            .unwrap()
        };
        let up = mite(&status("True", "StreamActive", "the mite's stream to the gateway is up"), now);
        assert!(up.starts_with("connected since ") && up.contains("(2m ago)"), "{up}");
        let lost = mite(&status("False", "StreamLost", "the pod stays in place"), now);
        assert!(lost.starts_with("stream lost since ") && lost.ends_with(": the pod stays in place"), "{lost}");
        let never = mite(&status("False", "NotConnected", "no mite stream has been established yet"), now);
        assert_eq!(never, "not connected (NotConnected: no mite stream has been established yet)");
        assert_eq!(mite(&Default::default(), now), "<none>");
    }

    #[test]
    fn a_missing_class_is_explained() {
        let c =
            Controller::new("x", varroa_api::ControllerSpec { class_name: Some("huge".into()), ..Default::default() });
        let text = settings_section(varroa_config::settings::resolve(&c, None, None).map_err(|e| e.to_string()));
        assert!(
            text.contains("<cannot resolve: spec.className names ControllerClass huge, which does not exist"),
            "{text}"
        );
    }
}
