//! JenkinsVersionProfile and UpdateCenter: which Jenkins runs, with which plugins.

use crate::common::{conditions_schema, yaml_object_schema};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// A plugin of a version profile's lock: name, version and the sha256 of its `.hpi`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, schemars::JsonSchema)]
pub struct LockedPlugin {
    /// The plugin's short name, e.g. `git`.
    #[schemars(length(min = 1, max = 128), regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"))]
    pub name: String,
    /// The exact version.
    #[schemars(length(min = 1, max = 128), regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9._+-]*$"))]
    pub version: String,
    /// The sha256 of the plugin file, 64 lowercase hex digits; `plugins-init` refuses a file
    /// that does not match.
    #[schemars(regex(pattern = r"^[a-f0-9]{64}$"))]
    pub sha256: String,
}

fn locked_plugins_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let item = generator.subschema_for::<LockedPlugin>();
    schemars::json_schema!({
        "type": "array",
        "items": item,
        "maxItems": 1000,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"],
    })
}

/// A Jenkins version and the plugin set known to work with it.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "varroa.dev",
    version = "v1alpha1",
    kind = "JenkinsVersionProfile",
    doc = "Pins a Jenkins version and image, the locked plugin set known to work with it (name, version, sha256), and a version-specific JCasC overlay.",
    shortname = "jvp",
    category = "varroa",
    printcolumn(name = "Jenkins", type_ = "string", json_path = ".spec.jenkinsVersion"),
    printcolumn(name = "Image", type_ = "string", json_path = ".spec.image"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct JenkinsVersionProfileSpec {
    /// The Jenkins version, e.g. `2.479.3`.
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^[0-9]+(\.[0-9]+)*$"))]
    pub jenkins_version: String,
    /// The Jenkins image, pinned by a tag or a digest, e.g. `jenkins/jenkins:2.479.3-lts-jdk17`.
    #[schemars(length(min = 1, max = 512))]
    #[x_kube(validation = kube::core::Rule::new(r"(self.matches('^[^\\s@]+:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}(@sha256:[a-f0-9]{64})?$') || self.matches('^[^\\s@:]+(:[0-9]+)?[^\\s@:]*@sha256:[a-f0-9]{64}$')) && !self.matches(':latest(@|$)')").message("image must be pinned by a tag or a digest (not :latest), e.g. jenkins/jenkins:2.479.3-lts-jdk17"))]
    pub image: String,
    /// The locked plugin set. A Controller pin on a locked plugin must name the same version.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "locked_plugins_schema")]
    pub plugins: Vec<LockedPlugin>,
    /// A JCasC overlay for this Jenkins version (YAML object), merged over the bundle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "yaml_object_schema")]
    pub casc: Option<serde_json::Value>,
}

/// The optional plugin service: serves the locked plugins to `plugins-init`, so controllers
/// need no access to the internet.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "varroa.dev",
    version = "v1alpha1",
    kind = "UpdateCenter",
    doc = "The optional plugin service (varroa-update-center) that serves pinned plugins to controllers.",
    status = "UpdateCenterStatus",
    shortname = "uc",
    category = "varroa",
    printcolumn(name = "URL", type_ = "string", json_path = ".status.url"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct UpdateCenterSpec {
    /// The address plugins are downloaded from, e.g.
    /// `http://varroa-update-center.varroa-system.svc:8080`; `plugins-init` fetches
    /// `<url>/download/plugins/<name>/<version>/<name>.hpi`.
    #[schemars(length(min = 1, max = 2048), regex(pattern = r"^https?://"))]
    pub url: String,
    /// The upstream the service mirrors from; left out, `https://updates.jenkins.io`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^https?://"))]
    pub upstream: Option<String>,
}

/// What the operator observed of an update center.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateCenterStatus {
    /// `Ready` with reason and message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// The address in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}
