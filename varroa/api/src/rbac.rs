//! VarroaRole/VarroaRoleBinding (who may do what through the dashboard and API) and
//! JenkinsRole/JenkinsRoleBinding (who may do what inside Jenkins).

use crate::common::{NameRef, Subject};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// A set of actions on Varroa's API and dashboard.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "varroa.dev",
    version = "v1alpha1",
    kind = "VarroaRole",
    doc = "Actions a subject may take through the Varroa dashboard and API, granted by a VarroaRoleBinding.",
    shortname = "vrole",
    category = "varroa",
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct VarroaRoleSpec {
    /// The rules; a request is allowed when one rule allows it.
    #[schemars(length(min = 1, max = 64))]
    pub rules: Vec<VarroaRule>,
}

/// One rule: these verbs on these resources.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct VarroaRule {
    /// `get`, `list`, `watch`, `start`, `stop`, `restart`, `update`, or `*`.
    #[schemars(length(min = 1))]
    #[x_kube(validation = kube::core::Rule::new("self.all(v, v in ['get', 'list', 'watch', 'start', 'stop', 'restart', 'update', '*'])").message("verbs may be get, list, watch, start, stop, restart, update or *"))]
    pub verbs: Vec<String>,
    /// `controllers`, `builds`, `logs`, `activity`, or `*`.
    #[schemars(length(min = 1))]
    #[x_kube(validation = kube::core::Rule::new("self.all(r, r in ['controllers', 'builds', 'logs', 'activity', '*'])").message("resources may be controllers, builds, logs, activity or *"))]
    pub resources: Vec<String>,
}

/// Grants a VarroaRole to users and groups, in some namespaces or everywhere.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "varroa.dev",
    version = "v1alpha1",
    kind = "VarroaRoleBinding",
    doc = "Grants a VarroaRole to users and groups, in the listed namespaces or, with none listed, in all.",
    shortname = "vrb",
    category = "varroa",
    printcolumn(name = "Role", type_ = "string", json_path = ".spec.roleRef.name"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct VarroaRoleBindingSpec {
    /// The VarroaRole granted.
    pub role_ref: NameRef,
    /// Who it is granted to.
    #[schemars(length(min = 1, max = 256))]
    pub subjects: Vec<Subject>,
    /// The namespaces whose controllers it covers; empty, all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
}

/// Where a Jenkins role applies.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, schemars::JsonSchema)]
pub enum JenkinsRoleScope {
    /// Everywhere in Jenkins.
    #[default]
    Global,
    /// Only on jobs and folders whose full name matches `pattern`.
    Item,
}

/// A set of Jenkins permissions, global or for matching items.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "varroa.dev",
    version = "v1alpha1",
    kind = "JenkinsRole",
    doc = "Jenkins permissions (Overall/Read, Job/Build, ...), globally or on items matching a pattern; rendered into the role-based authorization strategy.",
    shortname = "jrole",
    category = "varroa",
    printcolumn(name = "Scope", type_ = "string", json_path = ".spec.scope"),
    printcolumn(name = "Pattern", type_ = "string", json_path = ".spec.pattern"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[x_kube(validation = kube::core::Rule::new("self.scope == 'Item' ? has(self.pattern) : !has(self.pattern)").message("pattern is required with scope Item and not allowed with scope Global"))]
#[serde(rename_all = "camelCase")]
pub struct JenkinsRoleSpec {
    /// `Global` (default) or `Item`.
    #[serde(default)]
    pub scope: JenkinsRoleScope,
    /// With scope Item: a regular expression over item full names, e.g. `team-a/.*`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub pattern: Option<String>,
    /// Jenkins permission IDs as `Group/Name`, e.g. `Overall/Read`, `Job/Build`, `Job/Read`.
    #[schemars(length(min = 1, max = 128))]
    #[x_kube(validation = kube::core::Rule::new("self.all(p, p.matches('^[A-Z][A-Za-z]*/[A-Z][A-Za-z]*$'))").message("permissions are Jenkins permission IDs written Group/Name, e.g. Overall/Read or Job/Build"))]
    pub permissions: Vec<String>,
}

/// Grants a JenkinsRole to users and groups on some or all controllers.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "varroa.dev",
    version = "v1alpha1",
    kind = "JenkinsRoleBinding",
    doc = "Grants a JenkinsRole to users and groups inside the controllers of the listed namespaces or, with none listed, all controllers.",
    shortname = "jrb",
    category = "varroa",
    printcolumn(name = "Role", type_ = "string", json_path = ".spec.roleRef.name"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct JenkinsRoleBindingSpec {
    /// The JenkinsRole granted.
    pub role_ref: NameRef,
    /// Who it is granted to.
    #[schemars(length(min = 1, max = 256))]
    pub subjects: Vec<Subject>,
    /// The namespaces whose controllers it applies to; empty, all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
}
