//! The preview's Service: port 80 to the container's `http` port, for the Ingress and for the
//! other pods of the preview.

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use vesper_api::PreviewEnvironment;

pub const NAME: &str = "app";

pub fn service(pe: &PreviewEnvironment, namespace: &str) -> Service {
    Service {
        metadata: crate::meta::object_meta(pe, namespace, NAME),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(crate::meta::labels(pe)),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port: 80,
                target_port: Some(IntOrString::String("http".into())),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    }
}
