//! Navigation of OpenAPI v3 schemas as the apiserver publishes them, with the Kubernetes
//! extensions that patching, validation, pruning and apply depend on.
//!
//! Built-in kinds and custom resources are described the same way: a root schema plus a map of
//! named definitions (`components.schemas`) that `$ref: "#/components/schemas/<name>"` points
//! into. A CRD's `openAPIV3Schema` is simply a schema with no definitions.

use serde_json::{Map, Value};

/// The definitions a `$ref` resolves against.
pub type Defs = Map<String, Value>;

/// How the items of an array are identified, from `x-kubernetes-list-type` /
/// `x-kubernetes-list-map-keys` (or, on built-in kinds, `x-kubernetes-patch-merge-key`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListType {
    /// The list is replaced as a whole (the default for custom resources).
    Atomic,
    /// Items are scalars and unique; merged as a set.
    Set,
    /// Items are objects identified by the values of these keys.
    Map(Vec<String>),
}

/// A schema node together with the definitions its `$ref`s resolve against. Cheap to copy.
#[derive(Debug, Clone, Copy)]
pub struct SchemaRef<'a> {
    node: &'a Value,
    defs: &'a Defs,
}

const REF_PREFIXES: [&str; 3] = ["#/components/schemas/", "#/definitions/", "#/$defs/"];

fn resolve<'a>(mut node: &'a Value, defs: &'a Defs) -> &'a Value {
    // Follow `$ref` and the `allOf: [{$ref}]` wrapper the apiserver uses to attach a
    // description to a referenced type. Bounded, so a cyclic reference cannot loop.
    for _ in 0..16 {
        if let Some(r) = node.get("$ref").and_then(Value::as_str) {
            let name = REF_PREFIXES.iter().find_map(|p| r.strip_prefix(p)).unwrap_or(r);
            match defs.get(name) {
                Some(target) => {
                    node = target;
                    continue;
                }
                None => return node,
            }
        }
        if let Some(all) = node.get("allOf").and_then(Value::as_array)
            && all.len() == 1
            && node.get("properties").is_none()
            && node.get("type").is_none()
        {
            node = &all[0];
            continue;
        }
        return node;
    }
    node
}

impl<'a> SchemaRef<'a> {
    pub fn new(node: &'a Value, defs: &'a Defs) -> Self {
        SchemaRef { node: resolve(node, defs), defs }
    }

    /// The resolved JSON of this node.
    pub fn raw(&self) -> &'a Value {
        self.node
    }

    pub fn defs(&self) -> &'a Defs {
        self.defs
    }

    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.node.get(key)
    }

    /// `type`, when the schema sets one (`object`, `array`, `string`, `integer`, `number`, `boolean`).
    pub fn ty(&self) -> Option<&'a str> {
        match self.node.get("type") {
            Some(Value::String(s)) => Some(s.as_str()),
            // schemars may emit ["string", "null"] for nullable fields.
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).find(|t| *t != "null"),
            _ => None,
        }
    }

    pub fn format(&self) -> Option<&'a str> {
        self.node.get("format").and_then(Value::as_str)
    }

    pub fn nullable(&self) -> bool {
        self.flag("nullable") || matches!(self.node.get("type"), Some(Value::Array(a)) if a.iter().any(|t| t == "null"))
    }

    pub fn description(&self) -> Option<&'a str> {
        self.node.get("description").and_then(Value::as_str)
    }

    pub fn properties_map(&self) -> Option<&'a Map<String, Value>> {
        self.node.get("properties").and_then(Value::as_object)
    }

    pub fn has_properties(&self) -> bool {
        self.properties_map().is_some_and(|p| !p.is_empty())
    }

    pub fn property(&self, name: &str) -> Option<SchemaRef<'a>> {
        self.properties_map()?.get(name).map(|n| SchemaRef::new(n, self.defs))
    }

    pub fn properties(&self) -> impl Iterator<Item = (&'a str, SchemaRef<'a>)> + 'a {
        let defs = self.defs;
        self.properties_map()
            .into_iter()
            .flat_map(|m| m.iter())
            .map(move |(k, v)| (k.as_str(), SchemaRef::new(v, defs)))
    }

    pub fn required(&self) -> impl Iterator<Item = &'a str> + 'a {
        self.node.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str)
    }

    pub fn items(&self) -> Option<SchemaRef<'a>> {
        self.node.get("items").map(|n| SchemaRef::new(n, self.defs))
    }

    /// The schema of the values of a map (`additionalProperties: {schema}`); `None` when
    /// additionalProperties is absent or a boolean.
    pub fn additional_properties(&self) -> Option<SchemaRef<'a>> {
        match self.node.get("additionalProperties") {
            Some(v @ Value::Object(_)) => Some(SchemaRef::new(v, self.defs)),
            _ => None,
        }
    }

    /// `additionalProperties: true` (any value allowed under any key).
    pub fn additional_properties_any(&self) -> bool {
        matches!(self.node.get("additionalProperties"), Some(Value::Bool(true)))
    }

    fn flag(&self, key: &str) -> bool {
        self.node.get(key).and_then(Value::as_bool).unwrap_or(false)
    }

    pub fn preserves_unknown_fields(&self) -> bool {
        self.flag("x-kubernetes-preserve-unknown-fields")
    }

    pub fn int_or_string(&self) -> bool {
        self.flag("x-kubernetes-int-or-string")
    }

    pub fn embedded_resource(&self) -> bool {
        self.flag("x-kubernetes-embedded-resource")
    }

    /// `x-kubernetes-patch-strategy`, e.g. `merge`, `replace`, `retainKeys`, `merge,retainKeys`.
    pub fn patch_strategy(&self) -> Option<&'a str> {
        self.node.get("x-kubernetes-patch-strategy").and_then(Value::as_str)
    }

    pub fn patch_merge_key(&self) -> Option<&'a str> {
        self.node.get("x-kubernetes-patch-merge-key").and_then(Value::as_str)
    }

    /// True when strategic merge patch merges this list (or map) instead of replacing it.
    pub fn strategic_merge(&self) -> bool {
        self.patch_strategy().is_some_and(|s| s.split(',').any(|p| p == "merge"))
    }

    pub fn retain_keys(&self) -> bool {
        self.patch_strategy().is_some_and(|s| s.split(',').any(|p| p == "retainKeys"))
    }

    /// The list type used by server-side apply and by CEL equality. Explicit
    /// `x-kubernetes-list-type` wins; otherwise a strategic merge key makes a map keyed by it,
    /// a merge strategy on scalars makes a set, and everything else is atomic.
    pub fn list_type(&self) -> ListType {
        match self.node.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => return ListType::Set,
            Some("map") => {
                let keys = self
                    .node
                    .get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
                    .unwrap_or_default();
                return ListType::Map(keys);
            }
            Some(_) => return ListType::Atomic,
            None => {}
        }
        if let Some(key) = self.patch_merge_key() {
            return ListType::Map(vec![key.to_string()]);
        }
        if self.strategic_merge() {
            return ListType::Set;
        }
        ListType::Atomic
    }

    /// `x-kubernetes-map-type: atomic` makes an object replaced as a whole by apply.
    pub fn map_atomic(&self) -> bool {
        self.node.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic")
    }

    pub fn enum_values(&self) -> Option<&'a Vec<Value>> {
        self.node.get("enum").and_then(Value::as_array)
    }

    pub fn default_value(&self) -> Option<&'a Value> {
        self.node.get("default")
    }

    /// The schema of the value at `path`: object keys and map keys name a step; arrays on the
    /// way are stepped through into their `items` without consuming a segment.
    pub fn at_path(&self, path: &[&str]) -> Option<SchemaRef<'a>> {
        let mut cur = *self;
        for seg in path {
            while cur.ty() == Some("array") {
                cur = cur.items()?;
            }
            cur = match cur.property(seg) {
                Some(p) => p,
                None => cur.additional_properties()?,
            };
        }
        Some(cur)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn resolves_refs_and_reads_extensions() {
        let defs: Defs = serde_json::from_value(json!({
            "io.k8s.api.core.v1.Container": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "env": {
                    "type": "array",
                    "items": {"$ref": "#/components/schemas/io.k8s.api.core.v1.EnvVar"},
                    "x-kubernetes-patch-merge-key": "name",
                    "x-kubernetes-patch-strategy": "merge"
                }}
            },
            "io.k8s.api.core.v1.EnvVar": {"type": "object", "properties": {"name": {"type": "string"}}}
        }))
        .unwrap();
        let root = json!({"type": "object", "properties": {
            "containers": {"type": "array", "items": {"allOf": [{"$ref": "#/components/schemas/io.k8s.api.core.v1.Container"}]}}
        }});
        let s = SchemaRef::new(&root, &defs);
        let env = s.at_path(&["containers", "env"]).unwrap();
        assert_eq!(env.list_type(), ListType::Map(vec!["name".into()]));
        assert!(env.strategic_merge());
        assert_eq!(env.items().unwrap().property("name").unwrap().ty(), Some("string"));
        assert_eq!(s.property("containers").unwrap().list_type(), ListType::Atomic);
    }
}
