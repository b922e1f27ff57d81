//! The Vesper API: `vesper.eventide.dev/v1alpha1`, kind `PreviewEnvironment`.
//!
//! A PreviewEnvironment asks for an isolated, self-expiring copy of an application: one image,
//! run in a namespace of its own with a quota, limits and network isolation, reachable at a URL,
//! deleted when its TTL passes. The CRD generated from these types validates every write on the
//! API server, even when the operator does not run: the image must be pinned by a tag or a
//! digest, the TTL must be between 1 minute and 7 days, and there are at most 5 replicas.

pub mod reference;
pub mod ttl;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

pub use reference::reference_markdown;
pub use ttl::{Ttl, TtlError};

/// The API group.
pub const GROUP: &str = "vesper.eventide.dev";
/// The finalizer that keeps a preview until its namespace is gone.
pub const FINALIZER: &str = "vesper.eventide.dev/cleanup";
/// Labels on everything the operator creates for a preview (an owner reference cannot cross
/// namespaces, so objects are tracked by these).
pub const LABEL_PREVIEW: &str = "vesper.eventide.dev/preview";
pub const LABEL_PREVIEW_NAMESPACE: &str = "vesper.eventide.dev/preview-namespace";
/// The preview's UID: the proof that Vesper created a namespace. The operator never adopts,
/// changes or deletes a namespace without the UID of the preview it acts for.
pub const LABEL_PREVIEW_UID: &str = "vesper.eventide.dev/preview-uid";
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "vesper";

/// The rule for `spec.image`: a repository (optionally with a registry host and port) and a tag,
/// a digest, or both; not `latest`.
pub const IMAGE_RULE: &str = r"self.matches('^([a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?/)?[a-z0-9]+([._-]+[a-z0-9]+)*(/[a-z0-9]+([._-]+[a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[a-f0-9]{64}|:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}@sha256:[a-f0-9]{64})$') && !self.matches(':latest(@|$)')";
pub const IMAGE_MESSAGE: &str = "image must be pinned by a tag or a digest, e.g. registry.example.com/app:pr-42 or registry.example.com/app@sha256:<64 hex digits>; a bare name or :latest is not pinned";

/// The rule for `spec.ttl`: a whole number of minutes, hours or days, 1m to 7d.
pub const TTL_RULE: &str = "self.matches('^[1-9][0-9]{0,5}[mhd]$') && (self.endsWith('m') ? int(self.substring(0, self.size() - 1)) <= 10080 : self.endsWith('h') ? int(self.substring(0, self.size() - 1)) <= 168 : int(self.substring(0, self.size() - 1)) <= 7)";
pub const TTL_MESSAGE: &str =
    "ttl must be a whole number of minutes, hours or days (e.g. 90m, 24h, 7d), between 1m and 7d";

/// A preview environment: one image, in a namespace of its own, for a limited time.
// The derive's `printcolumn(...)` entries repeat `type_ =` by design.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "vesper.eventide.dev",
    version = "v1alpha1",
    kind = "PreviewEnvironment",
    namespaced,
    doc = "A PreviewEnvironment runs one image in an isolated namespace of its own (quota, limits, network isolation), reachable at a URL, until its TTL passes.",
    status = "PreviewEnvironmentStatus",
    shortname = "preview",
    shortname = "pe",
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Pending, Ready, Failed or Expired"
    ),
    printcolumn(
        name = "URL",
        type_ = "string",
        json_path = ".status.url",
        description = "Where the preview is served"
    ),
    printcolumn(
        name = "Expires",
        type_ = "string",
        json_path = ".status.expiresAt",
        description = "When the preview is deleted"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct PreviewEnvironmentSpec {
    /// The container image to run, pinned by a tag or a digest:
    /// `registry.example.com/app:pr-42` or `registry.example.com/app@sha256:<64 hex digits>`.
    /// A bare name or `:latest` is refused: a reviewer must know which build they look at.
    #[schemars(length(min = 1, max = 512))]
    #[x_kube(validation = kube::core::Rule::new(IMAGE_RULE).message(IMAGE_MESSAGE))]
    pub image: String,

    /// How long the preview lives after it was created: a whole number of minutes, hours or
    /// days (`90m`, `24h`, `7d`), between 1m and 7d. Changing it moves the expiry. Default 24h.
    #[serde(default = "default_ttl")]
    #[schemars(length(min = 2, max = 7))]
    #[x_kube(validation = kube::core::Rule::new(TTL_RULE).message(TTL_MESSAGE))]
    pub ttl: String,

    /// Number of pods, 0 (paused) to 5. Default 1.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 0, max = 5))]
    pub replicas: i32,

    /// The port the container listens on; the preview's Service and URL route to it.
    /// Default 8080.
    #[serde(default = "default_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,

    /// Environment variables of the container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    #[x_kube(validation = kube::core::Rule::new("self.all(e, self.exists_one(f, f.name == e.name))").message("env names must be unique"))]
    pub env: Vec<EnvVar>,

    /// Arguments passed to the container's entrypoint.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub args: Vec<String>,

    /// Requests and limits of the container. Unset values come from the operator's defaults;
    /// the preview's quota is sized from them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,

    /// The HTTP path probed (`GET`) to decide the preview is ready, e.g. `/healthz`. Without it,
    /// a TCP connection to the port decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024), regex(pattern = r"^/"))]
    pub readiness_path: Option<String>,
}

/// An environment variable of the preview's container.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub struct EnvVar {
    /// The variable's name (a C identifier-like name: letters, digits, `_`, `-`, `.`).
    #[schemars(length(min = 1, max = 256), regex(pattern = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"))]
    pub name: String,
    /// Its value.
    #[serde(default)]
    pub value: String,
}

fn default_ttl() -> String {
    "24h".to_string()
}

fn default_replicas() -> i32 {
    1
}

fn default_port() -> i32 {
    8080
}

/// Where a preview is in its life.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum Phase {
    /// Being set up, or a new image is rolling out.
    Pending,
    /// Serving: its Deployment is available.
    Ready,
    /// Something is wrong: pods are refused, the rollout is stuck, or the namespace is not
    /// Vesper's. The Ready condition says why.
    Failed,
    /// Its TTL passed; it is being deleted.
    Expired,
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Phase::Pending => "Pending",
            Phase::Ready => "Ready",
            Phase::Failed => "Failed",
            Phase::Expired => "Expired",
        })
    }
}

/// What the operator observed of a preview.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreviewEnvironmentStatus {
    /// Pending, Ready, Failed or Expired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// `Ready`, `Available`, `Expired` and `ExpiringSoon`, with reason and message; while the
    /// preview is being deleted, also the namespace's own deletion conditions
    /// (`NamespaceContentRemaining`, `NamespaceFinalizersRemaining`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// The preview's address (`https://<host>`), when the operator has a preview domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// When the preview will be deleted: creation time plus TTL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Time>,
    /// The namespace the preview runs in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The image the pods actually run, by digest (from the pods' imageID), so a reviewer knows
    /// exactly which build they look at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_image: Option<String>,
    /// Pods of the preview that are ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
}

/// Conditions as a list map keyed by type, as the API conventions publish them.
fn conditions_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let item = generator.subschema_for::<Condition>();
    schemars::json_schema!({
        "type": "array",
        "items": item,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
    })
}

impl PreviewEnvironment {
    /// The preview's TTL, parsed (the API server has validated it; a stored object older than
    /// the validation falls back to the error).
    pub fn ttl(&self) -> Result<Ttl, TtlError> {
        self.spec.ttl.parse()
    }
}

/// The CRD as YAML, as checked in under deploy/vesper/crd.yaml.
pub fn crd_yaml() -> String {
    use kube::CustomResourceExt;
    let crd = PreviewEnvironment::crd();
    let body = serde_saphyr::to_string(&crd).unwrap_or_default();
    format!("# Generated from vesper/api (vesper-operator crd); do not edit.\n---\n{body}")
}
