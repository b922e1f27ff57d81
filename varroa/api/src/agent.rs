//! PodTemplate: a reusable Kubernetes agent, rendered into the Jenkins Kubernetes cloud.
//!
//! The kind shares its name with the core `v1` PodTemplate: address it as
//! `podtemplates.varroa.dev` (or the short name `agent`) with kubectl.

use k8s_openapi::api::core::v1::{EnvVar, ResourceRequirements};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A Kubernetes agent template: pods Jenkins starts for builds that ask for its labels.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "varroa.dev",
    version = "v1alpha1",
    kind = "PodTemplate",
    namespaced,
    doc = "A reusable Kubernetes agent: rendered into the Jenkins Kubernetes cloud of the controllers in its namespace that select it.",
    shortname = "agent",
    category = "varroa",
    printcolumn(name = "Labels", type_ = "string", json_path = ".spec.labels"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct PodTemplateSpec {
    /// The Jenkins labels builds use to ask for this agent (`agent { label 'maven' }`).
    #[schemars(length(min = 1, max = 16))]
    pub labels: Vec<String>,
    /// The agent pod's containers. The Jenkins agent (`jnlp`) container is added by the
    /// Kubernetes plugin unless one is named `jnlp` here.
    #[schemars(length(min = 1, max = 8))]
    pub containers: Vec<AgentContainer>,
    /// The ServiceAccount agent pods run as; left out, the namespace's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// Node selector of agent pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// How many agent pods of this template may run at once. Default 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub instance_cap: Option<i32>,
    /// Minutes an idle agent pod is kept for the next build. Default 0 (one pod per build).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1440))]
    pub idle_minutes: Option<i32>,
}

/// One container of an agent pod.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentContainer {
    /// The container's name, used in `container('name') { ... }` steps.
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub name: String,
    /// The image, pinned by a tag or digest.
    #[schemars(length(min = 1, max = 512))]
    pub image: String,
    /// The command; left out, the image's entrypoint (`sleep infinity`-style images need one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// Arguments of the command.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Environment variables.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// Requests and limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
}
