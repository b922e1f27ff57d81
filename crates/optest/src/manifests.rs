//! The checked-in YAML (deploy/, examples/), read as the install tests read it.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Every document of a YAML stream (empty ones, such as a leading comment, left out).
pub fn yaml_docs(what: &str, text: &str) -> Vec<Value> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).unwrap_or_else(|e| panic!("{what}: not YAML: {e}"));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// Every document of a file of the workspace (a path relative to its root).
pub fn yaml_file(rel: &str) -> Vec<Value> {
    yaml_docs(rel, &crate::read(rel))
}

/// The one document of this kind.
pub fn find<'a>(what: &str, docs: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "{what}: expected one {kind}, found {}", found.len());
    found[0]
}

/// The object as its Rust type, which must know every field (a typo would be dropped silently
/// by the API server's non-strict decoding).
pub fn typed<K: Serialize + DeserializeOwned>(what: &str, v: &Value) -> K {
    let k: K = serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{what}: {e}\n{v:#}"));
    let back = serde_json::to_value(&k).expect("serialize");
    assert_eq!(back, *v, "{what}: has fields its type does not know (a typo?) or values of the wrong shape");
    k
}

/// The manifest files of a directory of the workspace (`deploy/vesper`), as paths relative to
/// the root, in the order `kubectl apply -f <dir>` takes them.
pub fn files(dir: &str) -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(crate::repo(dir))
        .unwrap_or_else(|e| panic!("read {dir}: {e}"))
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml") || n.ends_with(".yml") || n.ends_with(".json"))
        .map(|n| format!("{dir}/{n}"))
        .collect();
    files.sort();
    files
}

/// Namespaces every cluster has, which install manifests may use without creating them.
pub const BUILT_IN_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];
