//! What the operator makes for a Controller, all named after it and owned by it (deleting the
//! Controller deletes them; the volume stays unless `storage.retention: Delete`):
//!
//! | Object | Name |
//! |---|---|
//! | ServiceAccount (Jenkins, its agents' pods) | `<name>` |
//! | Role + RoleBinding (agents: pods, exec, logs) | `<name>-agents` |
//! | ConfigMap (jenkins.yaml, plugins.txt, plugins-sha256.txt) | `<name>` |
//! | Secret (the mite's client certificate) | `<name>-mite-tls` |
//! | StatefulSet (`plugins-init`, `jenkins`, `mite`) with the volume claim template | `<name>` |
//! | Service, and the StatefulSet's headless Service | `<name>`, `<name>-headless` |
//! | Ingress (with `ingress.host`) | `<name>` |
//!
//! The pod template carries the digest of the restart-class settings (plugins, images,
//! resources, JVM options, the gateway CA and endpoint): it changes, and the pod rolls, only when
//! one of those does. JCasC content lives in the ConfigMap alone and is applied by the mite
//! without replacing the pod.

use crate::config::Config;
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy, StatefulSetSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource, EnvVar,
    EnvVarSource, HTTPGetAction, ObjectFieldSelector, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PodSecurityContext, PodSpec, PodTemplateSpec, Probe, ResourceRequirements, SeccompProfile, SecretVolumeSource,
    SecurityContext, Service, ServiceAccount, ServicePort, ServiceSpec, Volume, VolumeMount,
    VolumeResourceRequirements,
};
use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressBackend, IngressRule, IngressServiceBackend, IngressSpec,
    IngressTLS, ServiceBackendPort,
};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};
use std::collections::BTreeMap;
use varroa_api::lifecycle::{
    ANNOTATION_CONFIG_DIGEST, ANNOTATION_RESTART_DIGEST, CONTAINER_JENKINS, CONTAINER_MITE, CONTAINER_PLUGINS_INIT,
    LABEL_CONTROLLER, LABEL_MANAGED_BY, MANAGED_BY,
};
use varroa_api::{Controller, PowerState, Retention};
use varroa_config::Rendered;

/// Everything outside the Controller that decides the pod template.
#[derive(Debug, Clone)]
pub struct PodInputs<'a> {
    /// The update site plugins-init downloads from.
    pub update_site: String,
    /// The fingerprint of the gateway CA (a change rolls the pod).
    pub ca_fingerprint: &'a str,
    /// Parked by the inactivity policy: scaled to zero and marked.
    pub hibernated: bool,
}

pub fn secret_name(c: &Controller) -> String {
    format!("{}-mite-tls", c.name_any())
}

pub fn headless_name(c: &Controller) -> String {
    format!("{}-headless", c.name_any())
}

pub fn agents_name(c: &Controller) -> String {
    format!("{}-agents", c.name_any())
}

/// The labels on everything made for `c` (and its pods).
pub fn labels(c: &Controller) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_CONTROLLER.to_string(), c.name_any()),
        (LABEL_MANAGED_BY.to_string(), MANAGED_BY.to_string()),
        ("app.kubernetes.io/name".to_string(), "jenkins".to_string()),
        ("app.kubernetes.io/instance".to_string(), c.name_any()),
    ])
}

fn owner(c: &Controller) -> Vec<OwnerReference> {
    c.controller_owner_ref(&()).into_iter().collect()
}

/// Metadata of an object named `name` made for `c`.
pub fn meta(c: &Controller, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: c.namespace(),
        labels: Some(labels(c)),
        owner_references: Some(owner(c)),
        ..Default::default()
    }
}

pub fn service_account(c: &Controller) -> ServiceAccount {
    ServiceAccount { metadata: meta(c, &c.name_any()), ..Default::default() }
}

/// What the Kubernetes plugin needs to run agents in the controller's namespace.
pub fn agents_role(c: &Controller) -> Role {
    let rule = |resources: &[&str], verbs: &[&str]| PolicyRule {
        api_groups: Some(vec![String::new()]),
        resources: Some(resources.iter().map(|s| s.to_string()).collect()),
        verbs: verbs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    };
    Role {
        metadata: meta(c, &agents_name(c)),
        rules: Some(vec![
            rule(&["pods"], &["create", "delete", "get", "list", "watch"]),
            rule(&["pods/exec"], &["create", "get"]),
            rule(&["pods/log"], &["get"]),
            rule(&["events"], &["list", "watch"]),
        ]),
    }
}

pub fn agents_role_binding(c: &Controller) -> RoleBinding {
    RoleBinding {
        metadata: meta(c, &agents_name(c)),
        role_ref: RoleRef { api_group: "rbac.authorization.k8s.io".into(), kind: "Role".into(), name: agents_name(c) },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: c.name_any(),
            namespace: c.namespace(),
            ..Default::default()
        }]),
    }
}

pub fn config_map(c: &Controller, r: &Rendered) -> ConfigMap {
    let mut m = meta(c, &c.name_any());
    m.annotations = Some(BTreeMap::from([(ANNOTATION_CONFIG_DIGEST.to_string(), r.digest.clone())]));
    ConfigMap { metadata: m, data: Some(r.files.clone()), ..Default::default() }
}

fn service_port() -> ServicePort {
    ServicePort {
        name: Some("http".into()),
        port: 8080,
        protocol: Some("TCP".into()),
        target_port: Some(IntOrString::String("http".into())),
        ..Default::default()
    }
}

pub fn service(c: &Controller) -> Service {
    Service {
        metadata: meta(c, &c.name_any()),
        spec: Some(ServiceSpec {
            selector: Some(selector_labels(c)),
            ports: Some(vec![service_port()]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn headless_service(c: &Controller) -> Service {
    Service {
        metadata: meta(c, &headless_name(c)),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            selector: Some(selector_labels(c)),
            ports: Some(vec![service_port()]),
            publish_not_ready_addresses: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn selector_labels(c: &Controller) -> BTreeMap<String, String> {
    BTreeMap::from([(LABEL_CONTROLLER.to_string(), c.name_any())])
}

/// The Ingress, when the resolved settings name a host.
pub fn ingress(c: &Controller, r: &Rendered) -> Option<Ingress> {
    let settings = r.settings.settings.ingress.as_ref()?;
    let host = settings.host.clone()?;
    let mut m = meta(c, &c.name_any());
    if !settings.annotations.is_empty() {
        m.annotations = Some(settings.annotations.clone());
    }
    Some(Ingress {
        metadata: m,
        spec: Some(IngressSpec {
            ingress_class_name: settings.class_name.clone(),
            tls: settings
                .tls_secret_name
                .as_ref()
                .map(|s| vec![IngressTLS { hosts: Some(vec![host.clone()]), secret_name: Some(s.clone()) }]),
            rules: Some(vec![IngressRule {
                host: Some(host),
                http: Some(HTTPIngressRuleValue {
                    paths: vec![HTTPIngressPath {
                        path: Some("/".into()),
                        path_type: "Prefix".into(),
                        backend: IngressBackend {
                            service: Some(IngressServiceBackend {
                                name: c.name_any(),
                                port: Some(ServiceBackendPort { name: Some("http".into()), number: None }),
                            }),
                            ..Default::default()
                        },
                    }],
                }),
            }]),
            ..Default::default()
        }),
        ..Default::default()
    })
}

fn restricted() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities { drop: Some(vec!["ALL".into()]), ..Default::default() }),
        run_as_non_root: Some(true),
        seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), ..Default::default() }),
        ..Default::default()
    }
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..Default::default()
    }
}

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar { name: name.into(), value: Some(value.into()), ..Default::default() }
}

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector { field_path: path.into(), ..Default::default() }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The digest of everything restart-class: a change rolls the pod.
pub fn restart_digest(c: &Controller, r: &Rendered, cfg: &Config, inputs: &PodInputs) -> String {
    let s = &r.settings.settings;
    let parts = serde_json::json!({
        "plugins": r.plugins_digest,
        "image": r.image,
        "mite": cfg.mite_image,
        "pluginsInit": cfg.plugins_init_image(),
        "updateSite": inputs.update_site,
        "resources": s.resources,
        "jvm": s.jvm_options,
        "gatewayCa": inputs.ca_fingerprint,
        "gatewayEndpoint": cfg.gateway_endpoint,
        "controller": c.name_any(),
    });
    let d = ring::digest::digest(&ring::digest::SHA256, parts.to_string().as_bytes());
    let hex: String = d.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// The StatefulSet: `cells` Jenkins instances (zero when stopped).
pub fn stateful_set(c: &Controller, r: &Rendered, cfg: &Config, inputs: &PodInputs) -> StatefulSet {
    let s = &r.settings.settings;
    let name = c.name_any();
    let ns = c.namespace().unwrap_or_default();
    let cells = s.cells.unwrap_or(1).max(1);
    let replicas = if !inputs.hibernated && c.spec.power_state == PowerState::Running { cells } else { 0 };
    let storage = s.storage.clone().unwrap_or_default();
    let mut pod_labels = labels(c);
    pod_labels.insert(LABEL_CONTROLLER.into(), name.clone());
    let jvm = s.jvm_options.clone().unwrap_or_default().join(" ");
    let jenkins = Container {
        name: CONTAINER_JENKINS.into(),
        image: Some(r.image.clone()),
        ports: Some(vec![ContainerPort {
            name: Some("http".into()),
            container_port: 8080,
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        env: Some(vec![
            env("JAVA_OPTS", &jvm),
            env("CASC_JENKINS_CONFIG", "/var/jenkins_config/jenkins.yaml"),
            env("JENKINS_HOME", "/var/jenkins_home"),
        ]),
        resources: s.resources.clone(),
        readiness_probe: Some(Probe {
            http_get: Some(HTTPGetAction {
                path: Some("/login".into()),
                port: IntOrString::String("http".into()),
                ..Default::default()
            }),
            period_seconds: Some(10),
            failure_threshold: Some(3),
            ..Default::default()
        }),
        startup_probe: Some(Probe {
            http_get: Some(HTTPGetAction {
                path: Some("/login".into()),
                port: IntOrString::String("http".into()),
                ..Default::default()
            }),
            period_seconds: Some(10),
            failure_threshold: Some(60),
            ..Default::default()
        }),
        volume_mounts: Some(vec![
            mount("jenkins-home", "/var/jenkins_home", false),
            mount("config", "/var/jenkins_config", true),
            mount("plugins", "/usr/share/jenkins/ref/plugins", false),
            mount("tmp", "/tmp", false),
        ]),
        security_context: Some(restricted()),
        ..Default::default()
    };
    let mite = Container {
        name: CONTAINER_MITE.into(),
        image: Some(cfg.mite_image.clone()),
        args: Some(vec!["run".into()]),
        env: Some(vec![
            env("VARROA_CONTROLLER", &name),
            env("VARROA_NAMESPACE", &ns),
            env("VARROA_GATEWAY_ENDPOINT", &cfg.gateway_endpoint),
            env("VARROA_JENKINS_URL", "http://127.0.0.1:8080"),
            field_env("POD_NAME", "metadata.name"),
        ]),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".into(), Quantity("50m".into())),
                ("memory".into(), Quantity("64Mi".into())),
            ])),
            limits: Some(BTreeMap::from([("memory".into(), Quantity("256Mi".into()))])),
            ..Default::default()
        }),
        volume_mounts: Some(vec![
            mount("mite-tls", "/var/run/varroa/tls", true),
            mount("config", "/var/jenkins_config", true),
            mount("jenkins-home", "/var/jenkins_home", false),
        ]),
        security_context: Some(restricted()),
        ..Default::default()
    };
    let plugins_init = Container {
        name: CONTAINER_PLUGINS_INIT.into(),
        image: Some(cfg.plugins_init_image().to_string()),
        args: Some(vec![
            "install-plugins".into(),
            "--plugins".into(),
            "/var/jenkins_config/plugins.txt".into(),
            "--sha256".into(),
            "/var/jenkins_config/plugins-sha256.txt".into(),
            "--update-site".into(),
            inputs.update_site.clone(),
            "--dest".into(),
            "/plugins".into(),
        ]),
        volume_mounts: Some(vec![mount("config", "/var/jenkins_config", true), mount("plugins", "/plugins", false)]),
        security_context: Some(restricted()),
        ..Default::default()
    };
    let mut annotations = BTreeMap::new();
    annotations.insert(ANNOTATION_RESTART_DIGEST.to_string(), restart_digest(c, r, cfg, inputs));
    let volumes = vec![
        Volume {
            name: "config".into(),
            config_map: Some(ConfigMapVolumeSource { name: name.clone(), ..Default::default() }),
            ..Default::default()
        },
        Volume {
            name: "mite-tls".into(),
            secret: Some(SecretVolumeSource { secret_name: Some(secret_name(c)), ..Default::default() }),
            ..Default::default()
        },
        Volume { name: "plugins".into(), empty_dir: Some(EmptyDirVolumeSource::default()), ..Default::default() },
        Volume { name: "tmp".into(), empty_dir: Some(EmptyDirVolumeSource::default()), ..Default::default() },
    ];
    let claim = PersistentVolumeClaim {
        metadata: ObjectMeta { name: Some("jenkins-home".into()), labels: Some(labels(c)), ..Default::default() },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: storage.storage_class_name.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".into(),
                    Quantity(storage.size.clone().unwrap_or_else(|| "10Gi".into())),
                )])),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let when_deleted = match storage.retention {
        Some(Retention::Delete) => "Delete",
        _ => "Retain",
    };
    let mut sts_meta = meta(c, &name);
    if inputs.hibernated {
        sts_meta.annotations =
            Some(BTreeMap::from([(varroa_api::lifecycle::ANNOTATION_HIBERNATED.to_string(), "true".to_string())]));
    }
    StatefulSet {
        metadata: sts_meta,
        spec: Some(StatefulSetSpec {
            replicas: Some(replicas),
            service_name: Some(headless_name(c)),
            pod_management_policy: Some("Parallel".into()),
            selector: LabelSelector { match_labels: Some(selector_labels(c)), ..Default::default() },
            persistent_volume_claim_retention_policy: Some(StatefulSetPersistentVolumeClaimRetentionPolicy {
                when_deleted: Some(when_deleted.into()),
                when_scaled: Some("Retain".into()),
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    annotations: Some(annotations),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(name.clone()),
                    enable_service_links: Some(false),
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(1000),
                        run_as_group: Some(1000),
                        fs_group: Some(1000),
                        seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), ..Default::default() }),
                        ..Default::default()
                    }),
                    init_containers: Some(vec![plugins_init]),
                    containers: vec![jenkins, mite],
                    volumes: Some(volumes),
                    ..Default::default()
                }),
            },
            volume_claim_templates: Some(vec![claim]),
            ..Default::default()
        }),
        ..Default::default()
    }
}
