//! The labels and annotations on everything the operator creates for a preview. An owner
//! reference cannot point across namespaces, so objects are tracked by these.

use kube::ResourceExt;
use kube::api::ObjectMeta;
use std::collections::BTreeMap;
use vesper_api::{LABEL_MANAGED_BY, LABEL_PREVIEW_UID, MANAGED_BY, PreviewEnvironment};

/// The annotation naming the preview an object belongs to (`namespace/name`): names may be
/// longer than a label value may.
pub const ANNOTATION_PREVIEW: &str = "vesper.eventide.dev/preview";

/// Labels every object of a preview carries (and selects its pods by).
pub fn labels(pe: &PreviewEnvironment) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_MANAGED_BY.to_string(), MANAGED_BY.to_string()),
        (LABEL_PREVIEW_UID.to_string(), pe.uid().unwrap_or_default()),
        ("app.kubernetes.io/name".to_string(), "preview".to_string()),
    ])
}

pub fn annotations(pe: &PreviewEnvironment) -> BTreeMap<String, String> {
    BTreeMap::from([(
        ANNOTATION_PREVIEW.to_string(),
        format!("{}/{}", pe.namespace().unwrap_or_default(), pe.name_any()),
    )])
}

/// Metadata of an object named `name` in the preview's namespace `namespace`.
pub fn object_meta(pe: &PreviewEnvironment, namespace: &str, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(namespace.to_string()),
        labels: Some(labels(pe)),
        annotations: Some(annotations(pe)),
        ..Default::default()
    }
}

/// The `namespace/name` of the preview an object belongs to, from its annotation.
pub fn preview_of(meta: &ObjectMeta) -> Option<(String, String)> {
    let v = meta.annotations.as_ref()?.get(ANNOTATION_PREVIEW)?;
    let (ns, name) = v.split_once('/')?;
    Some((ns.to_string(), name.to_string()))
}

/// Whether an object was made by Vesper for this preview (its UID label matches).
pub fn is_ours(meta: &ObjectMeta, pe: &PreviewEnvironment) -> bool {
    let uid = pe.uid().unwrap_or_default();
    !uid.is_empty() && meta.labels.as_ref().and_then(|l| l.get(LABEL_PREVIEW_UID)) == Some(&uid)
}
