//! Varroa's configuration resolution, pure and deterministic:
//!
//! - [`settings`]: a controller's settings from Varroa's built-in defaults < ProvisioningDefaults
//!   < ControllerClass < Controller spec, field by field, with the origin of every value;
//! - [`merge`] and [`compose`]: a ComposedBundle's inputs merged in order into one JCasC
//!   document and plugin list (or the built-in `varroa-starter`);
//! - [`plugins`]: the JenkinsVersionProfile's lock, the inputs' plugins and the pins, checked;
//! - [`render`]: the final `jenkins.yaml`, `plugins.txt` and digests.
//!
//! docs/varroa/configuration.md describes the model for users.

pub mod compose;
pub mod load;
pub mod merge;
pub mod plugins;
pub mod render;
pub mod settings;

pub use render::{FetchedInput, RenderError, Rendered, World, remote_inputs, render};
pub use settings::{Layer, ResolvedSettings};
