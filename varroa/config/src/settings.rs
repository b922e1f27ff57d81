//! Resolution of a controller's settings: built-in defaults < ProvisioningDefaults <
//! ControllerClass < Controller spec, field by field, with the origin of every value.

use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fmt;
use varroa_api::{Controller, ControllerClass, ControllerSettings, ProvisioningDefaults};

/// A layer of settings, from least to most specific.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Layer {
    /// Varroa's own default.
    BuiltIn,
    /// The installation's ProvisioningDefaults (`default`).
    Defaults,
    /// The ControllerClass of this name.
    Class(String),
    /// The Controller's own spec.
    Controller,
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Layer::BuiltIn => f.write_str("Varroa's built-in default"),
            Layer::Defaults => f.write_str("ProvisioningDefaults default"),
            Layer::Class(name) => write!(f, "ControllerClass {name}"),
            Layer::Controller => f.write_str("the Controller's spec"),
        }
    }
}

/// The resolved settings and, for each field path (`storage.size`, `plugins[git]`,
/// `resources.limits.memory`), the layer it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedSettings {
    pub settings: ControllerSettings,
    pub provenance: BTreeMap<String, Layer>,
}

impl ResolvedSettings {
    /// The layer a field's value came from, e.g. `why("storage.size")`.
    pub fn why(&self, path: &str) -> Option<&Layer> {
        self.provenance.get(path)
    }
}

/// A settings problem found while resolving.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error(
        "spec.className names ControllerClass {0}, which does not exist: create it, or fix or remove spec.className"
    )]
    ClassNotFound(String),
    #[error("{layer} holds a value Varroa cannot read at {path}: {message}")]
    Unreadable { layer: String, path: String, message: String },
}

/// Varroa's built-in defaults: the bottom layer.
pub fn built_in() -> ControllerSettings {
    ControllerSettings {
        storage: Some(varroa_api::Storage {
            size: Some("10Gi".into()),
            storage_class_name: None,
            retention: Some(varroa_api::Retention::Retain),
        }),
        cells: Some(1),
        // Shown with its provenance like every other setting; the mite's own default too.
        claims: Some(varroa_api::ClaimSettings { when_ledger_down: Some(varroa_api::WhenLedgerDown::FailClosed) }),
        ..Default::default()
    }
}

/// Fields whose list value replaces the lower layers' list whole.
const REPLACED_WHOLE: &[&str] = &["jvmOptions", "podTemplateSelector"];

/// Resolves `controller`'s settings over its class (looked up by `spec.className` in
/// `classes`) and the installation `defaults`.
pub fn resolve(
    controller: &Controller,
    class: Option<&ControllerClass>,
    defaults: Option<&ProvisioningDefaults>,
) -> Result<ResolvedSettings, SettingsError> {
    if let Some(name) = &controller.spec.class_name
        && class.is_none_or(|c| c.metadata.name.as_deref() != Some(name.as_str()))
    {
        return Err(SettingsError::ClassNotFound(name.clone()));
    }
    let mut layers: Vec<(Layer, &ControllerSettings)> = Vec::new();
    let builtin = built_in();
    layers.push((Layer::BuiltIn, &builtin));
    if let Some(d) = defaults {
        layers.push((Layer::Defaults, &d.spec.settings));
    }
    if let Some(c) = class {
        layers.push((Layer::Class(c.metadata.name.clone().unwrap_or_default()), &c.spec.settings));
    }
    layers.push((Layer::Controller, &controller.spec.settings));
    resolve_layers(&layers)
}

/// Resolves an ordered stack of layers (least specific first).
pub fn resolve_layers(layers: &[(Layer, &ControllerSettings)]) -> Result<ResolvedSettings, SettingsError> {
    let mut out = Value::Object(Map::new());
    let mut provenance = BTreeMap::new();
    for (layer, settings) in layers {
        let v = serde_json::to_value(settings).map_err(|e| SettingsError::Unreadable {
            layer: layer.to_string(),
            path: String::new(),
            message: e.to_string(),
        })?;
        overlay(&mut out, &v, "", layer, &mut provenance);
    }
    let settings = serde_json::from_value(out).map_err(|e| SettingsError::Unreadable {
        layer: "the combined layers".into(),
        path: String::new(),
        message: e.to_string(),
    })?;
    Ok(ResolvedSettings { settings, provenance })
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_string() } else { format!("{path}.{key}") }
}

fn forget_under(path: &str, provenance: &mut BTreeMap<String, Layer>) {
    let dot = format!("{path}.");
    let idx = format!("{path}[");
    provenance.retain(|k, _| !(k == path || k.starts_with(&dot) || k.starts_with(&idx)));
}

fn overlay(base: &mut Value, layer_value: &Value, path: &str, layer: &Layer, provenance: &mut BTreeMap<String, Layer>) {
    match (base, layer_value) {
        (Value::Object(b), Value::Object(l)) if !REPLACED_WHOLE.contains(&path) => {
            for (k, lv) in l {
                let p = child(path, k);
                if path.is_empty() && k == "plugins" {
                    // Plugin pins combine by name, the more specific layer winning per plugin.
                    let existing = b.entry(k.clone()).or_insert_with(|| Value::Array(Vec::new()));
                    if let (Value::Array(have), Value::Array(pins)) = (existing, lv) {
                        for pin in pins {
                            let name = pin.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
                            match have.iter_mut().find(|h| h.get("name").and_then(Value::as_str) == Some(&name)) {
                                Some(h) => *h = pin.clone(),
                                None => have.push(pin.clone()),
                            }
                            provenance.insert(format!("plugins[{name}]"), layer.clone());
                        }
                    }
                    continue;
                }
                match b.get_mut(k) {
                    Some(bv) if bv.is_object() && lv.is_object() && !REPLACED_WHOLE.contains(&p.as_str()) => {
                        overlay(bv, lv, &p, layer, provenance)
                    }
                    _ => {
                        b.insert(k.clone(), lv.clone());
                        forget_under(&p, provenance);
                        record_leaves(lv, &p, layer, provenance);
                    }
                }
            }
        }
        (b, l) => {
            *b = l.clone();
            forget_under(path, provenance);
            record_leaves(l, path, layer, provenance);
        }
    }
}

fn record_leaves(v: &Value, path: &str, layer: &Layer, provenance: &mut BTreeMap<String, Layer>) {
    match v {
        Value::Object(m) if !m.is_empty() && !REPLACED_WHOLE.contains(&path) => {
            for (k, v) in m {
                record_leaves(v, &child(path, k), layer, provenance);
            }
        }
        _ => {
            provenance.insert(path.to_string(), layer.clone());
        }
    }
}
