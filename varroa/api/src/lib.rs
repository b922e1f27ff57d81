//! The Varroa API: `varroa.dev/v1alpha1`.
//!
//! Namespaced: [`Controller`] (one Jenkins controller), [`ComposedBundle`], [`CatalogSource`],
//! [`CatalogItem`] (its configuration) and [`PodTemplate`] (reusable Kubernetes agents).
//! Cluster-scoped: [`ProvisioningDefaults`] and [`ControllerClass`] (layers of controller
//! settings), [`JenkinsVersionProfile`] (Jenkins version, image and locked plugins),
//! [`VarroaRole`]/[`VarroaRoleBinding`] (dashboard and API authorization),
//! [`JenkinsRole`]/[`JenkinsRoleBinding`] (authorization inside Jenkins) and [`UpdateCenter`].
//!
//! The CRDs generated from these types (deploy/varroa/crds.yaml) validate every write on the
//! API server, with messages that say what is allowed.

pub mod agent;
pub mod bundle;
pub mod common;
pub mod controller;
pub mod lifecycle;
pub mod profile;
pub mod rbac;

pub use agent::{AgentContainer, PodTemplate, PodTemplateSpec};
pub use bundle::{
    BundleInput, CatalogItem, CatalogItemSpec, CatalogSource, CatalogSourceSpec, CatalogSourceStatus, ComposedBundle,
    ComposedBundleSpec, ComposedBundleStatus, GitInput, InputStatus, OciInput, STARTER_BUNDLE,
};
pub use common::{NameRef, PluginPin, PluginRequirement, Subject, SubjectKind};
pub use controller::{
    ApplyResult, ClaimSettings, Controller, ControllerClass, ControllerClassSpec, ControllerPhase, ControllerSettings,
    ControllerSpec, ControllerStatus, Hibernation, IngressSettings, PowerState, ProvisioningDefaults,
    ProvisioningDefaultsSpec, ResolvedSummary, Retention, Storage, WhenLedgerDown,
};
pub use lifecycle::{Attention, attention};
pub use profile::{JenkinsVersionProfile, JenkinsVersionProfileSpec, LockedPlugin, UpdateCenter, UpdateCenterSpec};
pub use rbac::{
    JenkinsRole, JenkinsRoleBinding, JenkinsRoleBindingSpec, JenkinsRoleScope, JenkinsRoleSpec, VarroaRole,
    VarroaRoleBinding, VarroaRoleBindingSpec, VarroaRoleSpec, VarroaRule,
};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// The API group.
pub const GROUP: &str = "varroa.dev";
/// The API version.
pub const VERSION: &str = "v1alpha1";
/// The name ProvisioningDefaults must have.
pub const DEFAULTS_NAME: &str = "default";

/// Every CRD of the API, in a stable order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    use kube::CustomResourceExt;
    vec![
        Controller::crd(),
        ComposedBundle::crd(),
        CatalogSource::crd(),
        CatalogItem::crd(),
        PodTemplate::crd(),
        ProvisioningDefaults::crd(),
        ControllerClass::crd(),
        JenkinsVersionProfile::crd(),
        VarroaRole::crd(),
        VarroaRoleBinding::crd(),
        JenkinsRole::crd(),
        JenkinsRoleBinding::crd(),
        UpdateCenter::crd(),
    ]
}

/// The CRDs as one YAML stream, as checked in under deploy/varroa/crds.yaml.
pub fn crd_yaml() -> String {
    let mut out = String::from("# Generated from varroa/api (varroa-operator crds); do not edit.\n");
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&crd).unwrap_or_default());
    }
    out
}
