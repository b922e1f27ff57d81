//! Small types and schema helpers shared by the Varroa resources.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde::{Deserialize, Serialize};

/// A reference to an object by name (in the same namespace, for namespaced kinds).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
pub struct NameRef {
    /// The object's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// A plugin and the version wanted.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, schemars::JsonSchema)]
pub struct PluginPin {
    /// The plugin's short name as the update center knows it, e.g. `git`, `kubernetes`.
    #[schemars(length(min = 1, max = 128), regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"))]
    pub name: String,
    /// The exact version, e.g. `5.7.0` or `4340.v345364d31a_2a_`.
    #[schemars(length(min = 1, max = 128), regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9._+-]*$"))]
    pub version: String,
}

/// A plugin a catalog item or bundle needs; the version is optional (the version profile's
/// lock decides when it is left out).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, schemars::JsonSchema)]
pub struct PluginRequirement {
    /// The plugin's short name, e.g. `git`.
    #[schemars(length(min = 1, max = 128), regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"))]
    pub name: String,
    /// The version wanted; left out, the version profile's lock decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128), regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9._+-]*$"))]
    pub version: Option<String>,
}

/// Who a binding names: a user or a group, as the identity provider (OIDC) reports them.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, schemars::JsonSchema)]
pub struct Subject {
    /// `User` or `Group`.
    pub kind: SubjectKind,
    /// The user's name (the OIDC `preferred_username` or `email`, as configured) or the group's.
    #[schemars(length(min = 1, max = 256))]
    pub name: String,
}

/// The kinds of subject.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, schemars::JsonSchema)]
pub enum SubjectKind {
    User,
    Group,
}

/// Conditions as a list map keyed by type, as the API conventions publish them.
pub(crate) fn conditions_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let item = generator.subschema_for::<Condition>();
    schemars::json_schema!({
        "type": "array",
        "items": item,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
    })
}

/// A free-form YAML object (a JCasC document or overlay), kept as written.
pub(crate) fn yaml_object_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// Plugin pins as a list map keyed by name (one entry per plugin).
pub(crate) fn plugin_pins_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let item = generator.subschema_for::<PluginPin>();
    schemars::json_schema!({
        "type": "array",
        "items": item,
        "maxItems": 500,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"],
    })
}

/// Plugin requirements as a list map keyed by name.
pub(crate) fn plugin_requirements_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let item = generator.subschema_for::<PluginRequirement>();
    schemars::json_schema!({
        "type": "array",
        "items": item,
        "maxItems": 500,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"],
    })
}

/// The rule for a duration field: a whole number of seconds, minutes, hours or days.
pub const DURATION_PATTERN: &str = r"^[1-9][0-9]{0,5}(s|m|h|d)$";
