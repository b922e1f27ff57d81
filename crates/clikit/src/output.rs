//! `-o json` and `-o yaml`: the objects as stored, without `metadata.managedFields` (as kubectl
//! shows them); one object asked for by name alone, several in a `v1` List.

use serde::Serialize;
use serde_json::{Value, json};

/// A document format of `-o`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Pretty-printed JSON with a final newline.
    Json,
    /// YAML.
    Yaml,
}

/// Why the objects could not be printed.
#[derive(Debug, thiserror::Error)]
pub enum PrintError {
    /// An object did not serialize to JSON.
    #[error("serializing {noun}: {source}")]
    Serialize {
        /// What the object is (`preview`, `controller`).
        noun: String,
        /// The serializer's error.
        source: serde_json::Error,
    },
    /// The document did not print as JSON.
    #[error("printing JSON: {0}")]
    Json(serde_json::Error),
    /// The document did not print as YAML.
    #[error("printing YAML: {0}")]
    Yaml(serde_saphyr::SerializeError),
}

/// `items` as one document in `format`. `single`: one object asked for by name, printed alone
/// rather than in a List. `noun` names an object in errors (`preview`).
pub fn print<T: Serialize>(items: &[T], single: bool, noun: &str, format: Format) -> Result<String, PrintError> {
    let doc = document(items, single, noun)?;
    match format {
        Format::Json => serde_json::to_string_pretty(&doc).map(|s| s + "\n").map_err(PrintError::Json),
        Format::Yaml => serde_saphyr::to_string(&doc).map_err(PrintError::Yaml),
    }
}

fn document<T: Serialize>(items: &[T], single: bool, noun: &str) -> Result<Value, PrintError> {
    let mut objects = Vec::with_capacity(items.len());
    for item in items {
        let mut v =
            serde_json::to_value(item).map_err(|source| PrintError::Serialize { noun: noun.to_string(), source })?;
        if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
        objects.push(v);
    }
    if single && objects.len() == 1 {
        return Ok(objects.remove(0));
    }
    Ok(json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": objects}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(name: &str) -> Value {
        json!({"kind": "Thing", "metadata": {"name": name, "managedFields": [{"manager": "m"}]}})
    }

    #[test]
    fn one_object_alone_without_managed_fields() {
        assert_eq!(
            print(&[object("a")], true, "thing", Format::Json).unwrap(),
            "{\n  \"kind\": \"Thing\",\n  \"metadata\": {\n    \"name\": \"a\"\n  }\n}\n"
        );
        assert_eq!(print(&[object("a")], true, "thing", Format::Yaml).unwrap(), "kind: Thing\nmetadata:\n  name: a\n");
    }

    #[test]
    fn several_objects_and_none_are_a_list() {
        let yaml = print(&[object("a"), object("b")], false, "thing", Format::Yaml).unwrap();
        assert!(yaml.starts_with("apiVersion: v1\nkind: List\nmetadata:\n  resourceVersion: \"\"\nitems:\n"), "{yaml}");
        assert!(!yaml.contains("managedFields") && yaml.contains("name: b"), "{yaml}");
        let none: Value = serde_json::from_str(&print::<Value>(&[], true, "thing", Format::Json).unwrap()).unwrap();
        assert_eq!(none["kind"], "List");
        assert_eq!(none["items"], json!([]));
    }

    #[test]
    fn an_object_that_does_not_serialize_is_named() {
        struct Broken;
        impl Serialize for Broken {
            fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
                Err(serde::ser::Error::custom("no"))
            }
        }
        let e = print(&[Broken], true, "thing", Format::Json).unwrap_err();
        assert_eq!(e.to_string(), "serializing thing: no");
    }
}
