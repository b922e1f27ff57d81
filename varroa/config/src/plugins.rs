//! The final plugin set: the version profile's lock, the plugins the configuration needs, and
//! the controller's pins, checked against each other.

use crate::settings::{Layer, ResolvedSettings};
use std::collections::BTreeMap;
use varroa_api::JenkinsVersionProfile;

/// A plugin of the rendered list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginEntry {
    pub name: String,
    pub version: String,
    /// From the lock; a pinned plugin the lock does not list has none.
    pub sha256: Option<String>,
    /// Why it is in the list: `locked by JenkinsVersionProfile x`, `pinned by ...`.
    pub origin: String,
}

/// Something the user should know that does not block: recorded as an Event by the operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// CamelCase, e.g. `JobDslPinIgnored`.
    pub reason: &'static str,
    pub message: String,
}

/// A plugin set that cannot be installed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PluginError {
    #[error(
        "plugin pin {plugin}:{pinned} (from {layer}) conflicts with JenkinsVersionProfile {profile}, which locks {plugin}:{locked}: remove the pin, set it to {locked}, or choose a version profile that locks {plugin}:{pinned}"
    )]
    PinConflictsWithLock { plugin: String, pinned: String, layer: String, profile: String, locked: String },
    #[error(
        "{needed_by} needs plugin {plugin}:{wanted}, but JenkinsVersionProfile {profile} locks {plugin}:{locked}: drop the version from the input, or choose a version profile that locks {wanted}"
    )]
    InputConflictsWithLock { plugin: String, wanted: String, needed_by: String, profile: String, locked: String },
    #[error(
        "{needed_by} needs plugin {plugin} without a version, and JenkinsVersionProfile {profile} does not lock it: pin it in the Controller (spec.plugins: [{{name: {plugin}, version: ...}}]) or add it to the profile"
    )]
    Unversioned { plugin: String, needed_by: String, profile: String },
}

/// The plugin a cell keeps at the profile's version, whatever the pins say: cells are
/// configured from job-dsl, which must match the profile.
pub const CELL_LOCKED_PLUGIN: &str = "job-dsl";

/// Combines the lock, the needed plugins (name -> (version, needed by)) and the pins.
pub fn resolve_plugins(
    profile: &JenkinsVersionProfile,
    needed: &BTreeMap<String, (Option<String>, String)>,
    settings: &ResolvedSettings,
    controller: &str,
) -> Result<(Vec<PluginEntry>, Vec<Notice>), PluginError> {
    let profile_name = profile.metadata.name.clone().unwrap_or_default();
    let is_cell = settings.settings.cells.unwrap_or(1) > 1;
    let mut out: BTreeMap<String, PluginEntry> = BTreeMap::new();
    let mut notices = Vec::new();
    for p in &profile.spec.plugins {
        out.insert(
            p.name.clone(),
            PluginEntry {
                name: p.name.clone(),
                version: p.version.clone(),
                sha256: Some(p.sha256.clone()),
                origin: format!("locked by JenkinsVersionProfile {profile_name}"),
            },
        );
    }
    for pin in &settings.settings.plugins {
        let layer = settings.why(&format!("plugins[{}]", pin.name)).cloned().unwrap_or(Layer::Controller);
        match out.get(&pin.name) {
            Some(locked) if locked.sha256.is_some() && locked.version != pin.version => {
                if is_cell && pin.name == CELL_LOCKED_PLUGIN {
                    notices.push(Notice {
                        reason: "JobDslPinIgnored",
                        message: format!(
                            "Controller {controller} runs as cells, which keep the profile's {CELL_LOCKED_PLUGIN}:{}; the pin {CELL_LOCKED_PLUGIN}:{} (from {layer}) is ignored",
                            locked.version, pin.version
                        ),
                    });
                    continue;
                }
                return Err(PluginError::PinConflictsWithLock {
                    plugin: pin.name.clone(),
                    pinned: pin.version.clone(),
                    layer: layer.to_string(),
                    profile: profile_name,
                    locked: locked.version.clone(),
                });
            }
            Some(_) => {}
            None => {
                out.insert(
                    pin.name.clone(),
                    PluginEntry {
                        name: pin.name.clone(),
                        version: pin.version.clone(),
                        sha256: None,
                        origin: format!("pinned by {layer}"),
                    },
                );
            }
        }
    }
    for (name, (version, needed_by)) in needed {
        match (out.get(name), version) {
            (Some(have), Some(v)) if &have.version != v => {
                if have.sha256.is_some() {
                    return Err(PluginError::InputConflictsWithLock {
                        plugin: name.clone(),
                        wanted: v.clone(),
                        needed_by: needed_by.clone(),
                        profile: profile_name,
                        locked: have.version.clone(),
                    });
                }
                // A pin wins over an input's version: the pin is the controller's own choice.
            }
            (Some(_), _) => {}
            (None, Some(v)) => {
                out.insert(
                    name.clone(),
                    PluginEntry {
                        name: name.clone(),
                        version: v.clone(),
                        sha256: None,
                        origin: format!("needed by {needed_by}"),
                    },
                );
            }
            (None, None) => {
                return Err(PluginError::Unversioned {
                    plugin: name.clone(),
                    needed_by: needed_by.clone(),
                    profile: profile_name,
                });
            }
        }
    }
    Ok((out.into_values().collect(), notices))
}
