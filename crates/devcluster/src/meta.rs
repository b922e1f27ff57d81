//! Object metadata as the apiserver writes it: timestamps, uids, generated names, and the
//! canonical field order of serialized objects.

use rand::RngExt;
use serde_json::{Map, Value};

/// Now, as the apiserver writes `metav1.Time`: RFC 3339 in UTC with whole seconds.
pub fn now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

pub fn new_uid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The 5 random characters appended to `generateName` (apiserver's `names.SimpleNameGenerator`).
pub fn generate_name(prefix: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    // Like upstream, the prefix is truncated so the result fits in 63 characters.
    let max_prefix = 63 - 5;
    let prefix = if prefix.len() > max_prefix { &prefix[..floor_char_boundary(prefix, max_prefix)] } else { prefix };
    let mut rng = rand::rng();
    let suffix: String = (0..5).map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char).collect();
    format!("{prefix}{suffix}")
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

const META_ORDER: [&str; 15] = [
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// Put `kind` and `apiVersion` first (built-in kinds print `kind` first, custom resources, being
/// unstructured maps, `apiVersion`), then metadata in ObjectMeta field order, then the rest, with
/// `status` last.
pub fn canonicalize(obj: &mut Value, custom: bool) {
    let Value::Object(m) = obj else { return };
    let mut out = Map::with_capacity(m.len());
    let first: [&str; 2] = if custom { ["apiVersion", "kind"] } else { ["kind", "apiVersion"] };
    for k in first {
        if let Some(v) = m.remove(k) {
            out.insert(k.to_string(), v);
        }
    }
    if let Some(mut meta) = m.remove("metadata") {
        if let Value::Object(mm) = &mut meta {
            canonicalize_meta(mm);
        }
        out.insert("metadata".into(), meta);
    }
    let status = m.remove("status");
    out.append(m);
    if let Some(s) = status {
        out.insert("status".into(), s);
    }
    *m = out;
}

/// Put ObjectMeta's fields in their Go declaration order.
pub fn canonicalize_meta(mm: &mut Map<String, Value>) {
    let mut ordered = Map::with_capacity(mm.len());
    for k in META_ORDER {
        if let Some(v) = mm.remove(k) {
            ordered.insert(k.to_string(), v);
        }
    }
    ordered.append(mm);
    *mm = ordered;
}

/// `obj.metadata`, created when absent (or not an object). None when `obj` is not an object.
pub fn meta_mut(obj: &mut Value) -> Option<&mut Map<String, Value>> {
    let m = obj.as_object_mut()?;
    let meta = m.entry("metadata").or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    meta.as_object_mut()
}

pub fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

pub fn name(obj: &Value) -> &str {
    meta_str(obj, "name").unwrap_or("")
}

pub fn namespace(obj: &Value) -> &str {
    meta_str(obj, "namespace").unwrap_or("")
}

pub fn uid(obj: &Value) -> &str {
    meta_str(obj, "uid").unwrap_or("")
}

pub fn labels(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata")?.get("labels")?.as_object()
}

pub fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default()
}

pub fn is_deleting(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp").is_some_and(|v| !v.is_null())
}

/// Read a dotted field path (`spec.nodeName`) as the string a field selector compares with.
pub fn field_string(obj: &Value, path: &str) -> Option<String> {
    let mut cur = obj;
    for seg in path.split('.') {
        cur = cur.get(seg)?;
    }
    match cur {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_order() {
        let mut o =
            json!({"status": {}, "spec": {}, "metadata": {"uid": "u", "name": "n"}, "apiVersion": "v1", "kind": "Pod"});
        canonicalize(&mut o, false);
        assert_eq!(
            serde_json::to_string(&o).unwrap(),
            r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"n","uid":"u"},"spec":{},"status":{}}"#
        );
        let g = generate_name("web-");
        assert_eq!(g.len(), 9);
        assert!(g.starts_with("web-"));
    }
}
