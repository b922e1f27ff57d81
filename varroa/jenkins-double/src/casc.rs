//! The slice of the configuration-as-code plugin (JCasC) the double plays: parsing a YAML source,
//! merging several sources, refusing unknown root elements, and reading `CASC_JENKINS_CONFIG`.
//!
//! Followed, in jenkinsci/configuration-as-code-plugin (plugin/src/main/java/io/jenkins/plugins/casc/):
//! - `ConfigurationAsCode.invokeWith`: root keys are matched case-insensitively against the root
//!   configurators; keys starting with `x-` are aliases and ignored; what is left is refused with
//!   `UnknownConfiguratorException`, whose message is the formatted text *followed by the names
//!   again* (its constructor appends `String.join(", ", names)` to the message). The double
//!   reproduces that text byte for byte, names included twice.
//! - `ConfigurationAsCode.configs`: a directory source is searched recursively for
//!   `*.{yml,yaml,YAML,YML}`, skipping hidden paths, sorted; a missing path is refused with
//!   `Invalid configuration: '<path>' isn't a valid path.`
//! - `yaml/ErrorOnConflictMergeStrategy` (the default `errorOnConflict`): mappings merge key by
//!   key, sequences concatenate, two scalars at the same place conflict.
//!
//! Deliberate differences: the real plugin validates every attribute against the configurator of
//! each root (unknown attributes, wrong types); the double only validates the YAML syntax and the
//! root elements, which is what the mite's tests need to tell a good bundle from a refused one.
//! The real `Mapping` is a `HashMap`, so several unknown names come in hash order; the double
//! keeps document order.

use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// Root elements of core Jenkins and the JCasC plugin itself (`jenkins`, `tool`, `unclassified`,
/// `security`, `appearance`: the `GlobalConfigurationCategory` roots every Jenkins has).
pub const CORE_ROOTS: &[&str] = &["jenkins", "tool", "unclassified", "security", "appearance"];

/// Root elements contributed by plugins, by plugin short name (`credentials` by the credentials
/// plugin, `jobs` by job-dsl).
pub const PLUGIN_ROOTS: &[(&str, &str)] = &[("credentials", "credentials"), ("job-dsl", "jobs")];

/// A JCasC failure, with the plugin's own message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CascError {
    /// What the plugin says (`e.getMessage()`), the text `/configuration-as-code/check` returns.
    pub message: String,
    /// `ConfiguratorException.getErrorMessage()`, which the reload error page shows.
    pub error_message: String,
    /// The configurator names the reload error page shows under the message (the unknown roots).
    pub target: String,
}

impl CascError {
    fn new(message: impl Into<String>) -> Self {
        let message = message.into();
        CascError { error_message: message.clone(), message, target: String::new() }
    }
}

/// The root elements known given the active plugins.
pub fn known_roots<'a>(active_plugins: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut roots: Vec<String> = CORE_ROOTS.iter().map(|s| s.to_string()).collect();
    for p in active_plugins {
        for (plugin, root) in PLUGIN_ROOTS {
            if *plugin == p {
                roots.push(root.to_string());
            }
        }
    }
    roots
}

/// Parses one YAML source. An empty document is an empty mapping (the plugin skips a null root).
pub fn parse(text: &str) -> Result<Map<String, Value>, CascError> {
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    let v: Value = serde_saphyr::from_str(text).map_err(|e| CascError::new(e.to_string()))?;
    match v {
        Value::Null => Ok(Map::new()),
        Value::Object(m) => Ok(m),
        other => Err(CascError::new(format!(
            "Invalid configuration: the top level must be a mapping of root elements, got {}",
            kind(&other)
        ))),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a sequence",
        Value::Object(_) => "a mapping",
    }
}

/// Refuses root elements no configurator knows, with `UnknownConfiguratorException`'s message.
pub fn check_roots(config: &Map<String, Value>, known: &[String]) -> Result<(), CascError> {
    let unknown: Vec<&str> = config
        .keys()
        .filter(|k| !k.starts_with("x-"))
        .filter(|k| !known.iter().any(|r| r.eq_ignore_ascii_case(k)))
        .map(String::as_str)
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    let names = unknown.join(", ");
    let message = format!(
        "No configurator found for the following root {}: {}. This may indicate that the required plugin is not \
         installed or failed to load. Verify that the plugin is installed and check the Jenkins startup logs for \
         plugin loading errors.",
        if unknown.len() > 1 { "elements" } else { "element" },
        names
    );
    Err(CascError { message: format!("{message}{names}"), error_message: message, target: names })
}

/// Merges `later` into `root` with the `errorOnConflict` strategy.
pub fn merge(root: &mut Value, later: Value, source: &str) -> Result<(), CascError> {
    match (root, later) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(&k) {
                    Some(existing) => merge(existing, v, source)?,
                    None => {
                        a.insert(k, v);
                    }
                }
            }
            Ok(())
        }
        (Value::Array(a), Value::Array(b)) => {
            a.extend(b);
            Ok(())
        }
        (a, b) if std::mem::discriminant(a) != std::mem::discriminant(&b) => {
            Err(CascError::new(format!("Found incompatible configuration elements {source}")))
        }
        _ => Err(CascError::new(format!("Found conflicting configuration at {source}"))),
    }
}

/// The YAML files a `CASC_JENKINS_CONFIG` value names: a comma-separated list of files and
/// directories (searched recursively, hidden paths skipped, sorted).
pub fn sources(config_param: &str) -> Result<Vec<PathBuf>, CascError> {
    let mut out = Vec::new();
    for part in config_param.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let root = Path::new(part);
        if !root.exists() {
            return Err(CascError::new(format!("Invalid configuration: '{part}' isn't a valid path.")));
        }
        if root.is_file() {
            out.push(root.to_path_buf());
            continue;
        }
        let mut found = Vec::new();
        walk(root, &mut found).map_err(|e| CascError::new(format!("failed config scan for {part}: {e}")))?;
        found.sort();
        out.extend(found);
    }
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        let path = entry.path();
        if path.is_dir() {
            walk(&path, out)?;
        } else if matches!(path.extension().and_then(|e| e.to_str()), Some("yml" | "yaml" | "YAML" | "YML")) {
            out.push(path);
        }
    }
    Ok(())
}

/// Loads and merges the configured sources, then checks their root elements: what
/// `/configuration-as-code/reload` does before configuring.
pub fn load(config_param: &str, known: &[String]) -> Result<Map<String, Value>, CascError> {
    let mut root = Value::Object(Map::new());
    for path in sources(config_param)? {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| CascError::new(format!("Failed to read {}: {e}", path.display())))?;
        let doc = parse(&text)?;
        merge(&mut root, Value::Object(doc), &path.display().to_string())?;
    }
    let Value::Object(map) = root else { unreachable!("root starts as a mapping and merge keeps its kind") };
    check_roots(&map, known)?;
    Ok(map)
}

/// Deep-merges `patch` into `base`, the later value winning (drift by hand, export defaults).
pub fn overlay(base: &mut Value, patch: &Value) {
    match (base, patch) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(k) {
                    Some(existing) => overlay(existing, v),
                    None => {
                        a.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (a, b) => *a = b.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_root_has_the_plugins_message() {
        let known = known_roots(std::iter::empty());
        let cfg = parse("jenkins: {systemMessage: hi}\nalice:\n  hello: bob\nx-anchor: 1\n").unwrap();
        let err = check_roots(&cfg, &known).unwrap_err();
        assert!(err.message.starts_with("No configurator found for the following root element: alice. This may"));
        assert!(err.message.ends_with("plugin loading errors.alice"), "{}", err.message);
        let two = parse("alice: 1\nbob: 2\n").unwrap();
        assert!(check_roots(&two, &known).unwrap_err().message.contains("root elements: alice, bob."));
    }

    #[test]
    fn roots_are_case_insensitive_and_plugin_roots_need_the_plugin() {
        let cfg = parse("Jenkins: {}\njobs: []\n").unwrap();
        assert!(check_roots(&cfg, &known_roots(std::iter::empty())).is_err());
        assert!(check_roots(&cfg, &known_roots(["job-dsl"].into_iter())).is_ok());
    }

    #[test]
    fn error_on_conflict_merge() {
        let mut a = serde_json::json!({"jenkins": {"systemMessage": "a", "nodes": [1]}});
        merge(&mut a, serde_json::json!({"jenkins": {"numExecutors": 2, "nodes": [2]}}), "b.yaml").unwrap();
        assert_eq!(a, serde_json::json!({"jenkins": {"systemMessage": "a", "nodes": [1, 2], "numExecutors": 2}}));
        let err = merge(&mut a, serde_json::json!({"jenkins": {"systemMessage": "c"}}), "c.yaml").unwrap_err();
        assert_eq!(err.message, "Found conflicting configuration at c.yaml");
    }
}
