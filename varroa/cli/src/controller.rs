//! What the commands read off a Controller (its attention and the condition behind it, its
//! cells) and the requests every command makes about one, with plain "not found" messages.

use crate::client::{Controllers, Target};
use crate::error::{Error, Result};
use clikit::apierror::status;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;
use varroa_api::lifecycle::condition;
use varroa_api::{Attention, Controller, ControllerStatus};

/// The field manager of every write `varroa` makes.
pub const MANAGER: &str = "varroa-cli";

/// `controller.varroa.dev/NAME`, as kubectl names objects (`-o name`).
pub fn resource_name(name: &str) -> String {
    format!("controller.{}/{name}", varroa_api::GROUP)
}

/// `NAMESPACE/NAME`.
pub fn id(c: &Controller) -> String {
    format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any())
}

/// The status, or an empty one before the operator wrote any.
pub fn status_of(c: &Controller) -> ControllerStatus {
    c.status.clone().unwrap_or_default()
}

/// The condition of this type, if the status has it.
pub fn condition<'a>(status: &'a ControllerStatus, type_: &str) -> Option<&'a Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// The attention words (`Boot failed`), or "" when nothing needs attention.
pub fn attention_words(status: &ControllerStatus) -> &'static str {
    varroa_api::attention(status).map(Attention::as_str).unwrap_or("")
}

/// Why the attention signal is raised: the reason and message of the condition behind it (or
/// the mite's apply message).
pub fn attention_cause(status: &ControllerStatus, a: Attention) -> Option<String> {
    let type_ = match a {
        Attention::Failed => condition::FAILED,
        Attention::Blocked => condition::RECONCILE_BLOCKED,
        Attention::BootFailed => condition::JENKINS_BOOT_FAILED,
        Attention::PluginRollFailed => condition::PLUGIN_ROLL_FAILED,
        Attention::MiteUnreachable => condition::MITE_CONNECTED,
        Attention::ApplyFailed => {
            return status.last_apply_result.as_ref().map(|r| format!("the mite's last apply: {}", r.message));
        }
    };
    let c = condition(status, type_)?;
    Some(match (c.reason.is_empty(), c.message.is_empty()) {
        (true, true) => format!("{type_}={}", c.status),
        (false, true) => format!("{type_}: {}", c.reason),
        (true, false) => format!("{type_}: {}", c.message),
        (false, false) => format!("{type_}: {}: {}", c.reason, c.message),
    })
}

/// `3/4`: ready cells of desired ones (the resolved `cells`, else the spec's, else 1).
pub fn ready_cells(c: &Controller, resolved_cells: Option<i32>) -> String {
    let ready = c.status.as_ref().and_then(|s| s.ready_cells).unwrap_or(0);
    let desired = resolved_cells.or(c.spec.settings.cells).unwrap_or(1);
    format!("{ready}/{desired}")
}

/// The status describes the spec at `generation` or later.
pub fn observed(c: &Controller, generation: i64) -> bool {
    c.status.as_ref().and_then(|s| s.observed_generation).is_some_and(|g| g >= generation)
}

/// The controller, or a failure saying it does not exist in the namespace.
pub async fn get(t: &Target, name: &str) -> Result<Controller> {
    t.controllers().get(name).await.map_err(|e| request_error(t, name, "reading", e))
}

/// An error of a request about one controller: "not found" and "no such kind" said plainly.
pub fn request_error(t: &Target, name: &str, doing: &str, e: kube::Error) -> Error {
    match status(&e) {
        Some(s) if s.code == 404 => match s.details.as_ref() {
            Some(d) if d.kind == "namespaces" => Error::Failed(format!(
                "namespace {:?} does not exist (pick another with -n, or -A to look in every namespace)",
                d.name
            )),
            Some(d) if d.kind == "controllers" || d.name == name => not_found(t, name),
            _ => crd_missing(t),
        },
        _ => Error::kube(format!("{doing} controller {name:?} in namespace {}", t.namespace))(e),
    }
}

/// The API server does not serve the kind.
pub fn crd_missing(t: &Target) -> Error {
    Error::Failed(format!(
        "the API server at {} does not serve controllers.{}: install Varroa's CRDs first (kubectl apply -f deploy/varroa/crds.yaml)",
        t.server,
        varroa_api::GROUP
    ))
}

/// The controller does not exist.
pub fn not_found(t: &Target, name: &str) -> Error {
    Error::Failed(format!(
        "controller {name:?} not found in namespace {} (list them with `varroa get controllers -A`, or pick another namespace with -n)",
        t.namespace
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn status(v: serde_json::Value) -> ControllerStatus {
        serde_json::from_value(v).unwrap()
    }

    fn cond(type_: &str, reason: &str, message: &str) -> serde_json::Value {
        json!({"type": type_, "status": "True", "reason": reason, "message": message,
               "lastTransitionTime": "2026-01-01T00:00:00Z"})
    }

    #[test]
    fn attention_names_its_cause() {
        let s = status(json!({"phase": "Failed", "conditions": [
            cond("Failed", "ProvisioningFailed", "the StatefulSet was refused"),
            cond("ReconcileBlocked", "PinConflict", "git pinned against the lock"),
        ]}));
        assert_eq!(attention_words(&s), "Failed");
        assert_eq!(
            attention_cause(&s, Attention::Failed).as_deref(),
            Some("Failed: ProvisioningFailed: the StatefulSet was refused")
        );
        let s = status(json!({"phase": "Running", "lastApplyResult": {"succeeded": false, "message": "bad yaml"}}));
        assert_eq!(attention_words(&s), "Apply failed");
        assert_eq!(attention_cause(&s, Attention::ApplyFailed).as_deref(), Some("the mite's last apply: bad yaml"));
        assert_eq!(attention_words(&status(json!({"phase": "Connected"}))), "");
    }

    #[test]
    fn ready_cells_default_to_one_desired() {
        let mut c = Controller::new("a", Default::default());
        assert_eq!(ready_cells(&c, None), "0/1");
        c.spec.settings.cells = Some(3);
        c.status = Some(status(json!({"readyCells": 2})));
        assert_eq!(ready_cells(&c, None), "2/3");
        assert_eq!(ready_cells(&c, Some(4)), "2/4", "the resolved value wins");
    }
}
