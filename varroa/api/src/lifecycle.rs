//! Names every Varroa component agrees on: condition types, the attention signal and its
//! words, the labels and container names of what the operator creates.

use crate::controller::{ControllerPhase, ControllerStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// Condition types of a Controller.
pub mod condition {
    /// A summary: True when the controller is Running or Connected.
    pub const READY: &str = "Ready";
    /// A blocking provisioning or operation error (phase Failed).
    pub const FAILED: &str = "Failed";
    /// The operator cannot proceed (unreadable bundle, pin against the lock, ...).
    pub const RECONCILE_BLOCKED: &str = "ReconcileBlocked";
    /// The Jenkins container crash-loops or its image cannot be pulled.
    pub const JENKINS_BOOT_FAILED: &str = "JenkinsBootFailed";
    /// The plugins-init step failed.
    pub const PLUGIN_ROLL_FAILED: &str = "PluginRollFailed";
    /// Whether the mite's stream to the gateway is up.
    pub const MITE_CONNECTED: &str = "MiteConnected";
    /// The Ingress host is already served by another Controller's Ingress: no Ingress is written.
    pub const INGRESS_HOST_CONFLICT: &str = "IngressHostConflict";
}

/// The reason of `Failed=True` when an object the operator would write exists and is not this
/// Controller's (it lacks Varroa's label or an owner reference to the Controller's UID).
pub const REASON_OWNERSHIP_CONFLICT: &str = "OwnershipConflict";
/// The reason of `IngressHostConflict=True`.
pub const REASON_HOST_IN_USE: &str = "HostInUse";

/// The reason of `MiteConnected=False` when an established stream was lost.
pub const REASON_STREAM_LOST: &str = "StreamLost";

/// The attention signal, in precedence order (the first that applies is shown).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Attention {
    Failed,
    Blocked,
    BootFailed,
    PluginRollFailed,
    ApplyFailed,
    MiteUnreachable,
}

impl Attention {
    /// The words the CLI, the dashboard and `kubectl get` show.
    pub fn as_str(self) -> &'static str {
        match self {
            Attention::Failed => "Failed",
            Attention::Blocked => "Blocked",
            Attention::BootFailed => "Boot failed",
            Attention::PluginRollFailed => "Plugin roll failed",
            Attention::ApplyFailed => "Apply failed",
            Attention::MiteUnreachable => "Mite unreachable",
        }
    }
}

impl std::fmt::Display for Attention {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

fn is_true(conditions: &[Condition], type_: &str) -> bool {
    conditions.iter().any(|c| c.type_ == type_ && c.status == "True")
}

/// Derives the attention signal from a status, in the seed's precedence order.
pub fn attention(status: &ControllerStatus) -> Option<Attention> {
    let c = &status.conditions;
    if status.phase == Some(ControllerPhase::Failed) {
        Some(Attention::Failed)
    } else if is_true(c, condition::RECONCILE_BLOCKED) {
        Some(Attention::Blocked)
    } else if is_true(c, condition::JENKINS_BOOT_FAILED) {
        Some(Attention::BootFailed)
    } else if is_true(c, condition::PLUGIN_ROLL_FAILED) {
        Some(Attention::PluginRollFailed)
    } else if status.last_apply_result.as_ref().is_some_and(|r| !r.succeeded) {
        Some(Attention::ApplyFailed)
    } else if c
        .iter()
        .any(|x| x.type_ == condition::MITE_CONNECTED && x.status == "False" && x.reason == REASON_STREAM_LOST)
    {
        Some(Attention::MiteUnreachable)
    } else {
        None
    }
}

/// The label carrying the Controller's name on everything made for it.
pub const LABEL_CONTROLLER: &str = "varroa.dev/controller";
/// `app.kubernetes.io/managed-by` on everything the operator makes.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Its value.
pub const MANAGED_BY: &str = "varroa-operator";
/// The pod template annotation holding the digest of the restart-class settings: a change
/// rolls the pod, anything else does not.
pub const ANNOTATION_RESTART_DIGEST: &str = "varroa.dev/restart-digest";
/// The ConfigMap annotation holding the digest of the rendered configuration.
pub const ANNOTATION_CONFIG_DIGEST: &str = "varroa.dev/config-digest";
/// The StatefulSet annotation marking a controller parked by its inactivity policy (phase
/// Hibernated) until it is woken.
pub const ANNOTATION_HIBERNATED: &str = "varroa.dev/hibernated";
/// Container names in the Jenkins pod.
pub const CONTAINER_JENKINS: &str = "jenkins";
pub const CONTAINER_MITE: &str = "mite";
pub const CONTAINER_PLUGINS_INIT: &str = "plugins-init";
/// The init container that seeds the JCasC directory from the ConfigMap.
pub const CONTAINER_CASC_INIT: &str = "casc-init";
