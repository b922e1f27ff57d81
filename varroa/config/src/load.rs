//! Reading Varroa objects from YAML files (what `varroa-operator render -f` and the docs'
//! tests do): multi-document streams, dispatched on `apiVersion` and `kind`.

use crate::render::World;
use serde_json::Value;
use varroa_api::Controller;

/// A document that is not a Varroa object Varroa can use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    #[error("{file}: document {index} is not readable YAML: {message}")]
    Yaml { file: String, index: usize, message: String },
    #[error("{file}: document {index} ({kind} {name}) is not a valid {kind}: {message}")]
    Invalid { file: String, index: usize, kind: String, name: String, message: String },
    #[error("{file}: document {index}: a second ProvisioningDefaults; there is one per installation, named default")]
    SecondDefaults { file: String, index: usize },
}

/// What a set of files held: the controllers and the world they draw on. Documents of other
/// API groups (a Namespace, say) are skipped and listed in `skipped`.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    pub controllers: Vec<Controller>,
    pub world: World,
    pub skipped: Vec<String>,
}

impl Loaded {
    /// Adds the documents of one YAML stream; `file` names it in errors.
    pub fn add_yaml(&mut self, file: &str, text: &str) -> Result<(), LoadError> {
        let docs: Vec<Value> = serde_saphyr::from_multiple(text).map_err(|e| LoadError::Yaml {
            file: file.to_string(),
            index: 0,
            message: e.to_string(),
        })?;
        for (index, doc) in docs.into_iter().enumerate() {
            if doc.is_null() {
                continue;
            }
            self.add(file, index, doc)?;
        }
        Ok(())
    }

    fn add(&mut self, file: &str, index: usize, mut doc: Value) -> Result<(), LoadError> {
        let api_version = doc.get("apiVersion").and_then(Value::as_str).unwrap_or_default().to_string();
        let kind = doc.get("kind").and_then(Value::as_str).unwrap_or_default().to_string();
        let name = doc.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string();
        if api_version != format!("{}/{}", varroa_api::GROUP, varroa_api::VERSION) {
            self.skipped.push(format!("{kind} {name} ({api_version})"));
            return Ok(());
        }
        // Namespaced kinds default to the `default` namespace, as kubectl does.
        if matches!(kind.as_str(), "Controller" | "ComposedBundle" | "CatalogItem" | "CatalogSource" | "PodTemplate")
            && doc.pointer("/metadata/namespace").is_none()
            && let Some(m) = doc.get_mut("metadata").and_then(Value::as_object_mut)
        {
            m.insert("namespace".into(), Value::String("default".into()));
        }
        fn parse<T: serde::de::DeserializeOwned>(
            doc: Value,
            file: &str,
            index: usize,
            kind: &str,
            name: &str,
        ) -> Result<T, LoadError> {
            // With the path of the field that did not fit (`spec.powerState: invalid type: ...`),
            // as the API server names it.
            let spec = doc.get("spec").cloned();
            serde_path_to_error::deserialize(doc).map_err(|e| {
                let mut path = e.path().to_string();
                let mut inner = e.inner().to_string();
                // The settings a Controller, a class and the defaults share are flattened into
                // their spec, where serde loses the path: read them alone to find the field.
                if path == "spec"
                    && let Some(spec) = spec
                    && let Err(e) = serde_path_to_error::deserialize::<_, varroa_api::ControllerSettings>(spec)
                    && e.path().to_string() != "."
                {
                    path = format!("spec.{}", e.path());
                    inner = e.inner().to_string();
                }
                let message = if path == "." { inner } else { format!("{path}: {inner}") };
                LoadError::Invalid {
                    file: file.to_string(),
                    index,
                    kind: kind.to_string(),
                    name: name.to_string(),
                    message,
                }
            })
        }
        let w = &mut self.world;
        match kind.as_str() {
            "Controller" => self.controllers.push(parse(doc, file, index, &kind, &name)?),
            "ProvisioningDefaults" => {
                if w.defaults.is_some() {
                    return Err(LoadError::SecondDefaults { file: file.to_string(), index });
                }
                w.defaults = Some(parse(doc, file, index, &kind, &name)?)
            }
            "ControllerClass" => w.classes.push(parse(doc, file, index, &kind, &name)?),
            "JenkinsVersionProfile" => w.profiles.push(parse(doc, file, index, &kind, &name)?),
            "ComposedBundle" => w.bundles.push(parse(doc, file, index, &kind, &name)?),
            "CatalogItem" => w.catalog_items.push(parse(doc, file, index, &kind, &name)?),
            "PodTemplate" => w.pod_templates.push(parse(doc, file, index, &kind, &name)?),
            "JenkinsRole" => w.jenkins_roles.push(parse(doc, file, index, &kind, &name)?),
            "JenkinsRoleBinding" => w.jenkins_role_bindings.push(parse(doc, file, index, &kind, &name)?),
            _ => self.skipped.push(format!("{kind} {name}")),
        }
        Ok(())
    }
}
