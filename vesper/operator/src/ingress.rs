//! The preview's Ingress, when the operator has a preview domain: host
//! `<name>-<namespace>-<hash>.<domain>` to the preview's Service, in the configured class; the
//! preview's URL is `https://` that host (TLS is the ingress controller's: a wildcard
//! certificate, or `--tls-secret`).

use crate::config::Config;
use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressBackend, IngressRule, IngressServiceBackend, IngressSpec,
    IngressTLS, ServiceBackendPort,
};
use kube::ResourceExt;
use vesper_api::PreviewEnvironment;

pub const NAME: &str = "app";

/// The preview's host, when there is a preview domain.
pub fn host(pe: &PreviewEnvironment, cfg: &Config) -> Option<String> {
    let domain = cfg.preview_domain.as_deref().filter(|d| !d.trim().is_empty())?;
    Some(crate::naming::host(&pe.namespace().unwrap_or_default(), &pe.name_any(), domain))
}

pub fn ingress(pe: &PreviewEnvironment, cfg: &Config, namespace: &str, host: &str) -> Ingress {
    Ingress {
        metadata: crate::meta::object_meta(pe, namespace, NAME),
        spec: Some(IngressSpec {
            ingress_class_name: cfg.ingress_class.clone(),
            rules: Some(vec![IngressRule {
                host: Some(host.to_string()),
                http: Some(HTTPIngressRuleValue {
                    paths: vec![HTTPIngressPath {
                        path: Some("/".into()),
                        path_type: "Prefix".into(),
                        backend: IngressBackend {
                            service: Some(IngressServiceBackend {
                                name: crate::service::NAME.into(),
                                port: Some(ServiceBackendPort { name: Some("http".into()), number: None }),
                            }),
                            resource: None,
                        },
                    }],
                }),
            }]),
            tls: Some(vec![IngressTLS { hosts: Some(vec![host.to_string()]), secret_name: cfg.tls_secret.clone() }]),
            default_backend: None,
        }),
        status: None,
    }
}
