//! Controller, ControllerClass and ProvisioningDefaults: one Jenkins controller, and the two
//! layers of settings it inherits (installation defaults < class < the Controller's own spec).

use crate::common::{NameRef, PluginPin, conditions_schema, plugin_pins_schema};
use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The settings a Controller, a ControllerClass and the ProvisioningDefaults can each set.
/// Resolution takes every field from the most specific layer that sets it: the Controller's
/// spec, else its class, else the installation defaults, else Varroa's built-in default.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControllerSettings {
    /// The JenkinsVersionProfile (cluster-scoped) that pins the Jenkins image, version and the
    /// locked plugin set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub version_profile: Option<String>,

    /// The ComposedBundle (in the Controller's namespace) holding the Jenkins configuration.
    /// Left out everywhere, the built-in `varroa-starter` bundle is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub composed_bundle_ref: Option<NameRef>,

    /// Plugin pins: an exact version for a plugin. A pin must agree with the version profile's
    /// lock for a locked plugin (a conflict blocks the Controller); a plugin the lock does not
    /// list is added at the pinned version. Pins from the class and defaults are combined by
    /// plugin name, the most specific layer winning.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "plugin_pins_schema")]
    pub plugins: Vec<PluginPin>,

    /// Requests and limits of the Jenkins container, combined per resource name (`cpu`,
    /// `memory`, ...) across layers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,

    /// JVM options of Jenkins (`JAVA_OPTS`), e.g. `-Xmx2g`. A list set by a layer replaces the
    /// list of the layers below it. Changing it restarts Jenkins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub jvm_options: Option<Vec<String>>,

    /// The persistent volume holding `JENKINS_HOME`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<Storage>,

    /// How Jenkins is reached from outside the cluster. Without a host, no Ingress is created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress: Option<IngressSettings>,

    /// The inactivity policy: a controller with no builds, no queue and no user activity for
    /// `idleAfter` is quieted down and scaled to zero (phase Hibernated) until woken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hibernation: Option<Hibernation>,

    /// The number of identical Jenkins instances (cells) to run, 1 to 16. With more than one,
    /// cells are disposable: configuration comes from the bundle and job-dsl only, and a cell
    /// that stays unready past `cellUnreadyGracePeriod` is replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 16))]
    pub cells: Option<i32>,

    /// How long a cell may stay unready before it is replaced (only with `cells` above 1),
    /// e.g. `10m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[1-9][0-9]{0,5}(s|m|h|d)$"))]
    pub cell_unready_grace_period: Option<String>,

    /// Which PodTemplates (in the Controller's namespace) become Kubernetes agent templates.
    /// Left out, every PodTemplate of the namespace is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_selector: Option<LabelSelector>,

    /// The UpdateCenter (cluster-scoped) that serves the locked plugins to the `plugins-init`
    /// step. Left out, Jenkins' own update site is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub update_center: Option<String>,

    /// Build claims: a queued build asks the ledger whether it may run and with which number
    /// (one gap-free sequence per job across every cell). Claims are on only when the
    /// installation has a build record store (the operator's `--build-records`); without it
    /// Jenkins numbers builds itself and this setting has no effect. Changing it rolls the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claims: Option<ClaimSettings>,
}

/// How a controller's build claims behave (docs/varroa/plugin-protocol.md, "Build claims").
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimSettings {
    /// What a queued build does when no decision can be had from the ledger in time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_ledger_down: Option<WhenLedgerDown>,
}

// The same spellings as `varroa_link::claims::WhenLedgerDown`, which the mite reads from
// `VARROA_CLAIMS_WHEN_LEDGER_DOWN`: this crate stays free of the control link's dependencies,
// and the operator converts.
/// What a queued build does when no decision can be had from the ledger in time (the gateway
/// or the ledger do not answer, or the ledger's database is away). `failClosed` (the default):
/// builds wait in the queue until the ledger is back; numbers stay gap-free and no trigger runs
/// twice. `failOpen`: builds go on with Jenkins' own numbers; while the ledger is away a trigger
/// may run on several cells and a number may repeat or leave a gap in the build records.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum WhenLedgerDown {
    /// Builds wait in the queue, asking again, until the ledger is back: numbers stay gap-free
    /// and no trigger runs on two cells, but no gated build starts while the ledger is away.
    /// The default.
    #[default]
    FailClosed,
    /// Builds go on at once with Jenkins' own numbers: while the ledger is away a trigger may
    /// run on several cells and a number may repeat or leave a gap in the build records.
    FailOpen,
}

impl WhenLedgerDown {
    /// The spelling in the Controller spec and in the mite's environment.
    pub fn as_str(self) -> &'static str {
        match self {
            WhenLedgerDown::FailClosed => "failClosed",
            WhenLedgerDown::FailOpen => "failOpen",
        }
    }
}

impl std::fmt::Display for WhenLedgerDown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The persistent volume of a controller.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Storage {
    /// The volume's size, e.g. `20Gi`. Default `10Gi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$"))]
    pub size: Option<String>,
    /// The StorageClass; left out, the cluster's default class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
    /// What happens to the volume when the Controller is deleted: `Retain` (default: the build
    /// history and secrets in JENKINS_HOME survive a mistaken delete) or `Delete`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<Retention>,
}

/// Whether a deleted Controller's volume is kept.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum Retention {
    Retain,
    Delete,
}

/// How Jenkins is exposed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct IngressSettings {
    /// The host name Jenkins is served at, e.g. `jenkins.team-a.example.com`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub host: Option<String>,
    /// The IngressClass; left out, the cluster's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class_name: Option<String>,
    /// The Secret holding the TLS certificate for the host; left out, no TLS section.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_secret_name: Option<String>,
    /// Annotations for the Ingress (e.g. for cert-manager). Combined per key across layers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// The inactivity (hibernation) policy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Hibernation {
    /// Park the controller after this long without builds, queue or user activity, e.g. `2h`.
    /// Left out, the controller never hibernates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[1-9][0-9]{0,5}(s|m|h|d)$"))]
    pub idle_after: Option<String>,
}

/// Whether the controller should run.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
pub enum PowerState {
    /// Jenkins runs (the default).
    #[default]
    Running,
    /// The StatefulSet is scaled to zero; the volume and configuration stay.
    Stopped,
}

/// One Jenkins controller, configured from a ComposedBundle and pinned by a
/// JenkinsVersionProfile. Settings left out come from its ControllerClass, then from the
/// ProvisioningDefaults.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "varroa.dev",
    version = "v1alpha1",
    kind = "Controller",
    namespaced,
    doc = "One Jenkins controller: a StatefulSet with the mite sidecar, its Services, volume and optional Ingress, configured from a ComposedBundle and pinned by a JenkinsVersionProfile.",
    status = "ControllerStatus",
    shortname = "jc",
    shortname = "ctrl",
    category = "varroa",
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Pending, Provisioning, Running, Connected, Stopped, Hibernated or Failed"
    ),
    printcolumn(
        name = "Attention",
        type_ = "string",
        json_path = ".status.attention",
        description = "What needs attention, in precedence order: Failed, Blocked, Boot failed, Plugin roll failed, Apply failed, Mite unreachable"
    ),
    printcolumn(name = "Class", type_ = "string", json_path = ".spec.className", priority = 1),
    printcolumn(name = "Profile", type_ = "string", json_path = ".status.resolved.versionProfile", priority = 1),
    printcolumn(name = "Reconciled", type_ = "date", json_path = ".status.lastReconciledAt", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct ControllerSpec {
    /// The ControllerClass (cluster-scoped) whose settings fill what this spec leaves out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub class_name: Option<String>,

    /// `Running` (default) or `Stopped` (scaled to zero; volume and configuration stay).
    #[serde(default)]
    pub power_state: PowerState,

    /// The controller's own settings; each one set here wins over the class and the defaults.
    #[serde(flatten)]
    pub settings: ControllerSettings,
}

/// Where a controller is in its lifecycle.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum ControllerPhase {
    /// Waiting for reconciliation.
    Pending,
    /// Resolving configuration or creating Kubernetes resources (also while a restart-class
    /// change rolls the pod).
    Provisioning,
    /// Jenkins runs, but the mite stream is not ready or is lost.
    Running,
    /// The mite stream is active: the normal steady state.
    Connected,
    /// `spec.powerState: Stopped` scaled the StatefulSet to zero.
    Stopped,
    /// The inactivity policy parked the controller.
    Hibernated,
    /// A blocking provisioning or operation error occurred; see the Failed condition.
    Failed,
}

impl std::fmt::Display for ControllerPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// What the mite reported of its last attempt to apply the desired configuration.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplyResult {
    /// Whether Jenkins accepted and reloaded the configuration.
    pub succeeded: bool,
    /// Jenkins' answer, e.g. the JCasC check's error.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The digest of the configuration the attempt applied.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub digest: String,
    /// When the attempt finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<Time>,
}

/// The resolved settings the operator acts on, in short (the full provenance is shown by
/// `varroa describe controller` and `varroa-operator render`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedSummary {
    /// The JenkinsVersionProfile in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_profile: Option<String>,
    /// The Jenkins version it pins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jenkins_version: Option<String>,
    /// The ComposedBundle in use (`varroa-starter` for the built-in one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle: Option<String>,
    /// How many plugins the rendered plugin list holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin_count: Option<i32>,
}

/// What the operator observed of a controller.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControllerStatus {
    /// Pending, Provisioning, Running, Connected, Stopped, Hibernated or Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<ControllerPhase>,
    /// The attention signal derived from the status, in precedence order: `Failed`, `Blocked`,
    /// `Boot failed`, `Plugin roll failed`, `Apply failed`, `Mite unreachable`; absent when
    /// nothing needs attention.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention: Option<String>,
    /// `Ready`, `Failed`, `ReconcileBlocked`, `JenkinsBootFailed`, `PluginRollFailed`,
    /// `MiteConnected`, with reason and message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// When a reconcile pass last completed without error. It goes stale only for a Blocked
    /// controller and during a Failed dwell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reconciled_at: Option<Time>,
    /// The mite's last apply result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_apply_result: Option<ApplyResult>,
    /// The digest of the resolved, rendered configuration (`sha256:...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_digest: Option<String>,
    /// The main resolved settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<ResolvedSummary>,
    /// Ready Jenkins instances (cells).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_cells: Option<i32>,
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// A reusable set of controller settings (cluster-scoped). A Controller names it in
/// `spec.className`; a change to the class reaches every controller that uses it.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "varroa.dev",
    version = "v1alpha1",
    kind = "ControllerClass",
    doc = "Reusable controller settings: a Controller naming this class in spec.className takes every setting it leaves out from here.",
    shortname = "jcc",
    category = "varroa",
    printcolumn(name = "Profile", type_ = "string", json_path = ".spec.versionProfile"),
    printcolumn(name = "Description", type_ = "string", json_path = ".spec.description"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct ControllerClassSpec {
    /// What the class is for, shown in listings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub description: Option<String>,
    /// The settings; the same fields a Controller can set.
    #[serde(flatten)]
    pub settings: ControllerSettings,
}

/// The installation's defaults (cluster-scoped, one object named `default`): the lowest layer
/// of controller settings.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "varroa.dev",
    version = "v1alpha1",
    kind = "ProvisioningDefaults",
    plural = "provisioningdefaults",
    doc = "The installation's controller defaults: the lowest layer under ControllerClass and Controller. A singleton named default.",
    category = "varroa",
    validation = kube::core::Rule::new("self.metadata.name == 'default'").message("ProvisioningDefaults is a singleton: name it default"),
    printcolumn(name = "Profile", type_ = "string", json_path = ".spec.versionProfile"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct ProvisioningDefaultsSpec {
    /// The settings; the same fields a Controller can set.
    #[serde(flatten)]
    pub settings: ControllerSettings,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_settings_are_spelled_as_the_mite_reads_them() {
        let s: ControllerSettings =
            serde_json::from_value(serde_json::json!({"claims": {"whenLedgerDown": "failOpen"}}))
                .expect("claims parse");
        assert_eq!(s.claims.and_then(|c| c.when_ledger_down), Some(WhenLedgerDown::FailOpen));
        for w in [WhenLedgerDown::FailClosed, WhenLedgerDown::FailOpen] {
            assert_eq!(serde_json::to_value(w).expect("serializes"), serde_json::json!(w.as_str()));
            assert_eq!(w.to_string(), w.as_str());
        }
        assert_eq!(WhenLedgerDown::default(), WhenLedgerDown::FailClosed);
        assert!(serde_json::from_value::<WhenLedgerDown>(serde_json::json!("open")).is_err());
        // Left out, nothing is written (so an unset layer inherits).
        assert_eq!(serde_json::to_value(ClaimSettings::default()).expect("serializes"), serde_json::json!({}));
    }
}
