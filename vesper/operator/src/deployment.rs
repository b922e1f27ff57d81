//! The preview's Deployment: the image, run so that Pod Security `restricted` admits it
//! (non-root, no privilege escalation, all capabilities dropped, RuntimeDefault seccomp, a
//! read-only root filesystem with a writable /tmp, no service-account token), with the
//! preview's port, env, args and resources and a readiness probe. Its /tmp is an emptyDir with
//! a size limit (`--tmp-size-limit`), and its container has ephemeral-storage bounds, so a
//! preview cannot fill its node's disk.

use crate::config::Config;
use crate::quota::pod_resources;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, HTTPGetAction, PodSecurityContext, PodSpec,
    PodTemplateSpec, Probe, SeccompProfile, SecurityContext, TCPSocketAction, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use vesper_api::PreviewEnvironment;

pub const NAME: &str = "app";
pub const CONTAINER: &str = "app";

pub fn deployment(pe: &PreviewEnvironment, cfg: &Config, namespace: &str) -> Deployment {
    let labels = crate::meta::labels(pe);
    // A spec with a quantity Kubernetes refuses never gets here (the quota, built first, fails
    // and the status says InvalidSpec); should it, the spec's own values are passed on, and the
    // API server refuses them with its message.
    let resources = match pod_resources(pe, cfg) {
        Ok(r) => r.requirements(),
        Err(_) => pe.spec.resources.clone().unwrap_or_default(),
    };
    let probe_handler = match &pe.spec.readiness_path {
        Some(path) => Probe {
            http_get: Some(HTTPGetAction {
                path: Some(path.clone()),
                port: IntOrString::String("http".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        None => Probe {
            tcp_socket: Some(TCPSocketAction { port: IntOrString::String("http".into()), ..Default::default() }),
            ..Default::default()
        },
    };
    let readiness = Probe { period_seconds: Some(5), failure_threshold: Some(3), ..probe_handler };
    let container = Container {
        name: CONTAINER.into(),
        image: Some(pe.spec.image.clone()),
        args: if pe.spec.args.is_empty() { None } else { Some(pe.spec.args.clone()) },
        ports: Some(vec![ContainerPort {
            name: Some("http".into()),
            container_port: pe.spec.port,
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        env: if pe.spec.env.is_empty() {
            None
        } else {
            Some(
                pe.spec
                    .env
                    .iter()
                    .map(|e| EnvVar { name: e.name.clone(), value: Some(e.value.clone()), value_from: None })
                    .collect(),
            )
        },
        resources: Some(resources),
        readiness_probe: Some(readiness),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities { drop: Some(vec!["ALL".into()]), add: None }),
            read_only_root_filesystem: Some(cfg.read_only_root_filesystem),
            run_as_non_root: Some(true),
            seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), localhost_profile: None }),
            ..Default::default()
        }),
        volume_mounts: Some(vec![VolumeMount { name: "tmp".into(), mount_path: "/tmp".into(), ..Default::default() }]),
        ..Default::default()
    };
    Deployment {
        metadata: crate::meta::object_meta(pe, namespace, NAME),
        spec: Some(DeploymentSpec {
            replicas: Some(pe.spec.replicas),
            revision_history_limit: Some(3),
            progress_deadline_seconds: Some(cfg.progress_deadline_seconds),
            selector: LabelSelector { match_labels: Some(labels.clone()), ..Default::default() },
            // A new image replaces pods one at a time, never below the wanted replicas: the
            // preview stays up while it updates, and a rollout fits the quota (quota.rs).
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_surge: Some(IntOrString::Int(1)),
                    max_unavailable: Some(IntOrString::Int(0)),
                }),
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    annotations: Some(crate::meta::annotations(pe)),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container],
                    automount_service_account_token: Some(false),
                    enable_service_links: Some(false),
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".into(),
                            localhost_profile: None,
                        }),
                        ..Default::default()
                    }),
                    volumes: Some(vec![Volume {
                        name: "tmp".into(),
                        // Written as the server stores it (canonical), or every reconcile writes.
                        empty_dir: Some(EmptyDirVolumeSource {
                            medium: None,
                            size_limit: Some(Quantity(cfg.tmp_size_limit.to_canonical())),
                        }),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tmp_and_the_container_have_storage_bounds() {
        let pe: PreviewEnvironment = serde_json::from_value(json!({
            "apiVersion": "vesper.eventide.dev/v1alpha1", "kind": "PreviewEnvironment",
            "metadata": {"name": "pr-1", "namespace": "team-a", "uid": "u"},
            "spec": {"image": "app:v1", "resources": {"limits": {"memory": "1.5Gi"}}}}))
        .expect("a preview");
        let cfg = Config { tmp_size_limit: crate::config::parse_quantity("0.5Gi").expect("q"), ..Config::default() };
        let d = serde_json::to_value(deployment(&pe, &cfg, "ns")).expect("json");
        let pod = &d["spec"]["template"]["spec"];
        assert_eq!(pod["volumes"], json!([{"name": "tmp", "emptyDir": {"sizeLimit": "512Mi"}}]));
        assert_eq!(
            pod["containers"][0]["resources"],
            json!({"requests": {"cpu": "100m", "ephemeral-storage": "64Mi", "memory": "1536Mi"},
                   "limits": {"cpu": "500m", "ephemeral-storage": "1Gi", "memory": "1536Mi"}})
        );
    }
}
