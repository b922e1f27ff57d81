//! ComposedBundle, CatalogSource and CatalogItem: where a controller's Jenkins configuration
//! comes from.

use crate::common::{NameRef, PluginRequirement, conditions_schema, plugin_requirements_schema, yaml_object_schema};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// The name of the built-in bundle used when a controller names none.
pub const STARTER_BUNDLE: &str = "varroa-starter";

/// An ordered list of configuration inputs merged into one JCasC document and plugin list.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "varroa.dev",
    version = "v1alpha1",
    kind = "ComposedBundle",
    namespaced,
    doc = "Jenkins configuration composed from ordered inputs (catalog items, Git directories, OCI artifacts), merged in order into one JCasC document and plugin list.",
    status = "ComposedBundleStatus",
    shortname = "bundle",
    category = "varroa",
    printcolumn(name = "Inputs", type_ = "integer", json_path = ".status.inputCount"),
    printcolumn(name = "Digest", type_ = "string", json_path = ".status.digest", priority = 1),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct ComposedBundleSpec {
    /// The inputs, merged in order: maps merge deeply and a later input wins a scalar; see
    /// docs/varroa/configuration.md for the list rules.
    #[schemars(length(min = 1, max = 32))]
    pub inputs: Vec<BundleInput>,
}

/// One input of a bundle: exactly one of `catalogItem`, `git` or `oci`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("[has(self.catalogItem), has(self.git), has(self.oci)].filter(x, x).size() == 1").message("each input sets exactly one of catalogItem, git or oci"))]
pub struct BundleInput {
    /// A CatalogItem in the bundle's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catalog_item: Option<NameRef>,
    /// A directory of a Git repository at a branch, tag or commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitInput>,
    /// An OCI artifact by tag or digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci: Option<OciInput>,
}

/// A Git input: the `*.yaml` files and `plugins.yaml` of one directory.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitInput {
    /// The repository, e.g. `https://github.com/acme/jenkins-config.git`.
    #[schemars(length(min = 1, max = 2048))]
    pub url: String,
    /// A branch, a tag or a full commit SHA. Pin a tag or commit for reproducible controllers.
    #[serde(rename = "ref")]
    #[schemars(length(min = 1, max = 255))]
    pub reference: String,
    /// The directory in the repository; left out, the repository's root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    #[x_kube(validation = kube::core::Rule::new("!self.startsWith('/') && !self.contains('..')").message("path is relative to the repository root and may not contain '..'"))]
    pub path: Option<String>,
}

/// An OCI input: an artifact holding the same files as a Git input's directory.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct OciInput {
    /// `registry/repository:tag` or `registry/repository@sha256:<64 hex digits>`.
    #[serde(rename = "ref")]
    #[schemars(length(min = 1, max = 512))]
    #[x_kube(validation = kube::core::Rule::new(r"self.matches('^[a-zA-Z0-9.-]+(:[0-9]+)?/[a-z0-9._/-]+(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[a-f0-9]{64})$')").message("ref must be registry/repository:tag or registry/repository@sha256:<64 hex digits>"))]
    pub reference: String,
}

/// What the operator resolved of a bundle.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ComposedBundleStatus {
    /// `Ready` (every input fetched and merged) with reason and message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// The number of inputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_count: Option<i32>,
    /// The digest of the merged configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Each input's resolved revision (Git commit, OCI manifest digest, catalog item
    /// generation), in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<InputStatus>,
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The state of one bundle input.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InputStatus {
    /// The input, as a short description (`git https://...@v1:path`).
    pub source: String,
    /// The revision in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// The digest of the input's content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// When the revision in use was fetched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetched_at: Option<Time>,
    /// The last fetch error; the last good revision stays in use meanwhile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A shared piece of Jenkins configuration: a JCasC fragment and the plugins it needs.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "varroa.dev",
    version = "v1alpha1",
    kind = "CatalogItem",
    namespaced,
    doc = "A shared piece of Jenkins configuration: a JCasC fragment and the plugins it needs, used by ComposedBundles.",
    shortname = "citem",
    category = "varroa",
    printcolumn(name = "Description", type_ = "string", json_path = ".spec.description"),
    printcolumn(name = "Source", type_ = "string", json_path = ".metadata.labels.varroa\\.dev/catalog-source"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct CatalogItemSpec {
    /// What the item configures, shown in listings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub description: Option<String>,
    /// A JCasC fragment (YAML object), e.g. `{unclassified: {location: {url: ...}}}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "yaml_object_schema")]
    pub casc: Option<serde_json::Value>,
    /// Plugins the fragment needs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "plugin_requirements_schema")]
    pub plugins: Vec<PluginRequirement>,
}

/// A catalog of CatalogItems published from a Git repository or OCI artifact: each YAML file of
/// the source holding a CatalogItem becomes one CatalogItem in this namespace, labelled
/// `varroa.dev/catalog-source` with this source's name.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "varroa.dev",
    version = "v1alpha1",
    kind = "CatalogSource",
    namespaced,
    doc = "A catalog of CatalogItems published from a Git directory or an OCI artifact.",
    status = "CatalogSourceStatus",
    shortname = "csrc",
    category = "varroa",
    printcolumn(name = "Items", type_ = "integer", json_path = ".status.itemCount"),
    printcolumn(name = "Revision", type_ = "string", json_path = ".status.revision", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[x_kube(validation = kube::core::Rule::new("has(self.git) != has(self.oci)").message("a catalog source sets exactly one of git or oci"))]
#[serde(rename_all = "camelCase")]
pub struct CatalogSourceSpec {
    /// A Git directory holding the catalog.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitInput>,
    /// An OCI artifact holding the catalog.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci: Option<OciInput>,
    /// How often the source is checked for a new revision, e.g. `10m`. Default `10m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[1-9][0-9]{0,5}(s|m|h|d)$"))]
    pub interval: Option<String>,
}

/// What the operator synchronised from a catalog source.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CatalogSourceStatus {
    /// `Ready` with reason and message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// The revision in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// How many CatalogItems it published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_count: Option<i32>,
    /// When the source was last checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_synced_at: Option<Time>,
}
