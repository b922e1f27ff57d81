//! The preview's namespace: created by Vesper, labelled with the preview's UID (the proof of
//! ownership) and Pod Security `restricted` (enforce, audit and warn). A namespace with that name
//! but without the preview's UID is not Vesper's: it is never adopted, changed or deleted.

use k8s_openapi::api::core::v1::Namespace;
use kube::api::ObjectMeta;
use vesper_api::PreviewEnvironment;

pub fn namespace(pe: &PreviewEnvironment, name: &str) -> Namespace {
    let mut labels = crate::meta::labels(pe);
    for mode in ["enforce", "audit", "warn"] {
        labels.insert(format!("pod-security.kubernetes.io/{mode}"), "restricted".into());
        labels.insert(format!("pod-security.kubernetes.io/{mode}-version"), "latest".into());
    }
    Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(labels),
            annotations: Some(crate::meta::annotations(pe)),
            ..Default::default()
        },
        spec: None,
        status: None,
    }
}
