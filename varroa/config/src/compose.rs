//! Composition of a ComposedBundle: its inputs, in order, merged into one JCasC document and
//! one plugin list. An input's content is a set of files (a Git directory or an OCI artifact):
//! every `*.yaml`/`*.yml` file except `plugins.yaml` is a JCasC fragment, merged in path order;
//! `plugins.txt` (`name` or `name:version` per line) and `plugins.yaml` (a list of
//! `{name, version}`) list plugins. A CatalogItem gives its `spec.casc` and `spec.plugins`.

use crate::merge::{MergeError, Origins, merge_into};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use varroa_api::{BundleInput, CatalogItem, PluginRequirement};

/// One input, read: its JCasC fragment and plugins, and the revision it was read at.
#[derive(Debug, Clone, PartialEq)]
pub struct InputContent {
    /// How messages and provenance name the input, e.g. `ComposedBundle team-a inputs[1] (git https://...@v1)`.
    pub label: String,
    /// The revision read (Git commit, OCI manifest digest, catalog item generation).
    pub revision: Option<String>,
    /// The JCasC fragment (a map).
    pub casc: Value,
    /// The plugins it needs.
    pub plugins: Vec<PluginRequirement>,
}

/// A composition that cannot be done.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ComposeError {
    #[error(transparent)]
    Merge(#[from] MergeError),
    #[error("{input}: {file} is not readable JCasC YAML ({message}): fix the file")]
    UnreadableFile { input: String, file: String, message: String },
    #[error("{input}: {file} holds {kind}, but a JCasC file must hold a map (e.g. `jenkins:` at the top)")]
    NotAMap { input: String, file: String, kind: &'static str },
    #[error("{input}: {file} line {line}: {message}")]
    BadPluginList { input: String, file: String, line: usize, message: String },
    #[error(
        "{input} names CatalogItem {name}, which does not exist in namespace {namespace}: create it, or remove the input"
    )]
    CatalogItemNotFound { input: String, name: String, namespace: String },
    #[error("{input} could not be fetched and no earlier fetch succeeded: {message}")]
    InputUnavailable { input: String, message: String },
    #[error(
        "plugin {plugin}: {earlier} needs version {earlier_version} but {later} needs {later_version}: make the inputs agree, or drop the version from one and let the version profile decide"
    )]
    PluginConflict { plugin: String, earlier: String, earlier_version: String, later: String, later_version: String },
}

/// The merged result of a bundle.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Composed {
    /// The merged JCasC document.
    pub casc: Value,
    /// Which input set each path.
    pub origins: Origins,
    /// The plugins the inputs need, by name, with the input that asked (the later one when
    /// several did).
    pub plugins: BTreeMap<String, (Option<String>, String)>,
    /// The inputs, in order, with their revisions.
    pub inputs: Vec<(String, Option<String>)>,
}

/// Merges `inputs` in order.
pub fn compose(inputs: &[InputContent]) -> Result<Composed, ComposeError> {
    let mut out = Composed { casc: Value::Object(Map::new()), ..Default::default() };
    for input in inputs {
        merge_into(&mut out.casc, &input.casc, &input.label, &mut out.origins)?;
        add_plugins(&mut out.plugins, &input.plugins, &input.label)?;
        out.inputs.push((input.label.clone(), input.revision.clone()));
    }
    Ok(out)
}

/// Adds `plugins` needed by `label`; two explicit, different versions are a conflict.
pub fn add_plugins(
    into: &mut BTreeMap<String, (Option<String>, String)>,
    plugins: &[PluginRequirement],
    label: &str,
) -> Result<(), ComposeError> {
    for p in plugins {
        match into.get_mut(&p.name) {
            Some((Some(have), by)) => {
                if let Some(v) = &p.version
                    && v != have
                {
                    return Err(ComposeError::PluginConflict {
                        plugin: p.name.clone(),
                        earlier: by.clone(),
                        earlier_version: have.clone(),
                        later: label.to_string(),
                        later_version: v.clone(),
                    });
                }
            }
            Some(entry) => {
                if p.version.is_some() {
                    *entry = (p.version.clone(), label.to_string());
                }
            }
            None => {
                into.insert(p.name.clone(), (p.version.clone(), label.to_string()));
            }
        }
    }
    Ok(())
}

/// Reads the files of a Git directory or OCI artifact.
pub fn read_files(
    label: &str,
    revision: Option<String>,
    files: &BTreeMap<String, Vec<u8>>,
) -> Result<InputContent, ComposeError> {
    let mut casc = Value::Object(Map::new());
    let mut origins = Origins::new();
    let mut plugins = Vec::new();
    for (path, bytes) in files {
        let file_name = path.rsplit('/').next().unwrap_or(path);
        let text = || {
            std::str::from_utf8(bytes).map_err(|e| ComposeError::UnreadableFile {
                input: label.to_string(),
                file: path.clone(),
                message: e.to_string(),
            })
        };
        match file_name {
            "plugins.txt" => plugins.extend(parse_plugins_txt(label, path, text()?)?),
            "plugins.yaml" | "plugins.yml" => plugins.extend(parse_plugins_yaml(label, path, text()?)?),
            n if n.ends_with(".yaml") || n.ends_with(".yml") => {
                let doc = parse_yaml(label, path, text()?)?;
                merge_into(&mut casc, &doc, &format!("{label} {path}"), &mut origins)?;
            }
            _ => {}
        }
    }
    Ok(InputContent { label: label.to_string(), revision, casc, plugins })
}

fn parse_yaml(label: &str, file: &str, text: &str) -> Result<Value, ComposeError> {
    if text.trim().is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    let v: Value = serde_saphyr::from_str(text).map_err(|e| ComposeError::UnreadableFile {
        input: label.to_string(),
        file: file.to_string(),
        message: e.to_string(),
    })?;
    match v {
        Value::Object(_) => Ok(v),
        Value::Null => Ok(Value::Object(Map::new())),
        other => Err(ComposeError::NotAMap {
            input: label.to_string(),
            file: file.to_string(),
            kind: if other.is_array() { "a list" } else { "a scalar" },
        }),
    }
}

const PLUGIN_NAME_RULE: &str = "a plugin name is letters, digits, '.', '_' or '-'";

fn valid_token(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "._-+".contains(c))
}

/// `plugins.txt`: `name` or `name:version` per line; `#` starts a comment.
pub fn parse_plugins_txt(label: &str, file: &str, text: &str) -> Result<Vec<PluginRequirement>, ComposeError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut parts = line.splitn(2, ':');
        let name = parts.next().unwrap_or("").trim();
        let version = parts.next().map(|v| v.trim().to_string());
        if !valid_token(name) || version.as_deref().is_some_and(|v| !valid_token(v)) {
            return Err(ComposeError::BadPluginList {
                input: label.to_string(),
                file: file.to_string(),
                line: i + 1,
                message: format!("{line:?} is not `name` or `name:version` ({PLUGIN_NAME_RULE})"),
            });
        }
        out.push(PluginRequirement { name: name.to_string(), version });
    }
    Ok(out)
}

/// `plugins.yaml`: a list of `{name, version}`, or a map with such a list under `plugins`.
pub fn parse_plugins_yaml(label: &str, file: &str, text: &str) -> Result<Vec<PluginRequirement>, ComposeError> {
    let v = if text.trim().is_empty() { Value::Array(Vec::new()) } else { parse_any_yaml(label, file, text)? };
    let list = match &v {
        Value::Object(m) => m.get("plugins").cloned().unwrap_or(Value::Array(Vec::new())),
        other => other.clone(),
    };
    serde_json::from_value(list).map_err(|e| ComposeError::BadPluginList {
        input: label.to_string(),
        file: file.to_string(),
        line: 0,
        message: format!("expected a list of {{name, version}}: {e}"),
    })
}

fn parse_any_yaml(label: &str, file: &str, text: &str) -> Result<Value, ComposeError> {
    serde_saphyr::from_str(text).map_err(|e| ComposeError::UnreadableFile {
        input: label.to_string(),
        file: file.to_string(),
        message: e.to_string(),
    })
}

/// A CatalogItem as an input.
pub fn read_catalog_item(label: &str, item: &CatalogItem) -> InputContent {
    InputContent {
        label: label.to_string(),
        revision: item.metadata.generation.map(|g| format!("generation {g}")),
        casc: item.spec.casc.clone().filter(Value::is_object).unwrap_or_else(|| Value::Object(Map::new())),
        plugins: item.spec.plugins.clone(),
    }
}

/// The built-in `varroa-starter` bundle's content.
pub fn starter() -> InputContent {
    let mut files = BTreeMap::new();
    files.insert("jenkins.yaml".to_string(), include_bytes!("../starter/jenkins.yaml").to_vec());
    files.insert("plugins.txt".to_string(), include_bytes!("../starter/plugins.txt").to_vec());
    // The starter is part of the binary and tested; it always reads.
    read_files("bundle varroa-starter (built in)", Some(format!("varroa {}", env!("CARGO_PKG_VERSION"))), &files)
        .unwrap_or_else(|e| InputContent {
            label: format!("bundle varroa-starter (unreadable: {e})"),
            revision: None,
            casc: Value::Object(Map::new()),
            plugins: Vec::new(),
        })
}

/// A short description of a bundle input, used in labels: `git <url>@<ref>:<path>`,
/// `oci <ref>`, `catalogItem <name>`.
pub fn describe_input(input: &BundleInput) -> String {
    if let Some(c) = &input.catalog_item {
        format!("catalogItem {}", c.name)
    } else if let Some(g) = &input.git {
        match g.path.as_deref().filter(|p| !p.is_empty() && *p != ".") {
            Some(p) => format!("git {}@{}:{}", g.url, g.reference, p),
            None => format!("git {}@{}", g.url, g.reference),
        }
    } else if let Some(o) = &input.oci {
        format!("oci {}", o.reference)
    } else {
        "an empty input".to_string()
    }
}
