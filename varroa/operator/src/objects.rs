//! What the operator makes for a Controller, all named after it and owned by it (deleting the
//! Controller deletes them; the volume stays unless `storage.retention: Delete`):
//!
//! | Object | Name |
//! |---|---|
//! | ServiceAccount (Jenkins, its agents' pods) | `<name>` |
//! | RoleBinding to the ClusterRole `varroa-jenkins-agents` (agents: pods, exec, logs) | `<name>-agents` |
//! | ConfigMap (jenkins.yaml, plugins.txt, plugins-sha256.txt) | `<name>` |
//! | Secret (the mite's client certificate) | `<name>-mite-tls` |
//! | StatefulSet (init `plugins-init` and `casc-init`; `jenkins`, `mite`) with the volume claim template | `<name>` |
//! | Service, and the StatefulSet's headless Service | `<name>`, `<name>-headless` |
//! | Ingress (with `ingress.host`) | `<name>` |
//!
//! The operator writes only objects it made: an existing object of one of these names that lacks
//! Varroa's label or an owner reference to the Controller's UID ([`is_ours`]) is left untouched,
//! and the Controller is Failed with reason `OwnershipConflict`.
//!
//! The pod template carries the digest of the restart-class settings (plugins, images,
//! resources, JVM options, the gateway CA and endpoint, build claims): it changes, and the pod rolls, only when
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
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};
use std::collections::BTreeMap;
use varroa_api::lifecycle::{
    ANNOTATION_CONFIG_DIGEST, ANNOTATION_RESTART_DIGEST, CONTAINER_CASC_INIT, CONTAINER_JENKINS, CONTAINER_MITE,
    CONTAINER_PLUGINS_INIT, LABEL_CONTROLLER, LABEL_MANAGED_BY, MANAGED_BY,
};
use varroa_api::{Controller, PowerState, Retention};
use varroa_config::Rendered;
use varroa_link::claims::{ENV_CLAIMS, ENV_WHEN_LEDGER_DOWN, WhenLedgerDown};

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

/// The ClusterRole (shipped in deploy/varroa/operator-rbac.yaml) that grants the agents' rights: pods,
/// exec, logs and events, for the Kubernetes plugin's agent pods. The operator may only `bind`
/// it; it holds none of those rights itself.
pub const AGENTS_CLUSTER_ROLE: &str = "varroa-jenkins-agents";

/// Binds [`AGENTS_CLUSTER_ROLE`] to the controller's ServiceAccount, in its namespace.
pub fn agents_role_binding(c: &Controller) -> RoleBinding {
    RoleBinding {
        metadata: meta(c, &agents_name(c)),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: AGENTS_CLUSTER_ROLE.into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: c.name_any(),
            namespace: c.namespace(),
            ..Default::default()
        }]),
    }
}

/// Whether an object was made by Varroa for this controller: Varroa's label and an owner
/// reference to the controller's UID. Anything else is not the operator's to write.
pub fn is_ours(m: &ObjectMeta, c: &Controller) -> bool {
    let Some(uid) = c.uid().filter(|u| !u.is_empty()) else { return false };
    m.labels.as_ref().and_then(|l| l.get(LABEL_MANAGED_BY)).map(String::as_str) == Some(MANAGED_BY)
        && m.owner_references.iter().flatten().any(|o| o.uid == uid)
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

/// The Ingress, when the resolved settings name a host. Its annotations are the settings' that
/// pass `allowlist` (`--ingress-annotation-allowlist`, [`crate::config::annotation_allowed`]).
pub fn ingress(c: &Controller, r: &Rendered, allowlist: &[String]) -> Option<Ingress> {
    let settings = r.settings.settings.ingress.as_ref()?;
    let host = settings.host.clone()?;
    let mut m = meta(c, &c.name_any());
    let passed: BTreeMap<String, String> = settings
        .annotations
        .iter()
        .filter(|(k, _)| crate::config::annotation_allowed(allowlist, k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !passed.is_empty() {
        m.annotations = Some(passed);
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

/// The settings' Ingress annotations that `allowlist` leaves out (to be logged).
pub fn dropped_annotations(r: &Rendered, allowlist: &[String]) -> Vec<String> {
    let Some(settings) = r.settings.settings.ingress.as_ref() else { return Vec::new() };
    settings.annotations.keys().filter(|k| !crate::config::annotation_allowed(allowlist, k)).cloned().collect()
}

/// The host of an Ingress the operator builds.
pub fn ingress_host(i: &Ingress) -> Option<&str> {
    i.spec.as_ref()?.rules.as_ref()?.iter().find_map(|r| r.host.as_deref())
}

/// Whether `desired` (this controller's Ingress) must give way to another Controller's Ingress
/// among `existing` (Varroa's Ingresses in every namespace) that serves the same host: the
/// older one keeps it (by creation time, then namespace and name), so two Controllers never
/// take turns. Returns a message naming the other Ingress and the fix.
pub fn host_conflict(c: &Controller, desired: &Ingress, existing: &[Ingress]) -> Option<String> {
    let host = ingress_host(desired)?.to_ascii_lowercase();
    let ns = c.namespace().unwrap_or_default();
    let name = c.name_any();
    let ours = existing.iter().find(|i| i.namespace().as_deref() == Some(ns.as_str()) && i.name_any() == name);
    let key = |i: &Ingress| (i.creation_timestamp().map(|t| t.0), i.namespace().unwrap_or_default(), i.name_any());
    existing
        .iter()
        .filter(|i| !(i.namespace().as_deref() == Some(ns.as_str()) && i.name_any() == name))
        .filter(|i| i.labels().contains_key(LABEL_CONTROLLER))
        .filter(|i| {
            i.spec
                .as_ref()
                .and_then(|s| s.rules.as_ref())
                .is_some_and(|rs| rs.iter().any(|r| r.host.as_deref().is_some_and(|h| h.eq_ignore_ascii_case(&host))))
        })
        .filter(|other| ours.is_none_or(|mine| key(other) < key(mine)))
        .min_by_key(|i| key(i))
        .map(|other| {
            format!(
                "host {host} is already served by Ingress {}/{} of another Controller: no Ingress is written for this controller; choose another ingress.host, or remove it from the other Controller",
                other.namespace().unwrap_or_default(),
                other.name_any(),
            )
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

/// The JCasC directory Jenkins reads (`CASC_JENKINS_CONFIG`) and the mite writes, on the
/// `jenkins-home` volume both containers mount (ADR 0004).
pub const CASC_DIR: &str = "/var/jenkins_home/casc_configs";
/// The mite's plugin listener: the pod's loopback (docs/varroa/plugin-protocol.md).
pub const PLUGIN_LISTEN: &str = "127.0.0.1:8787";
/// Its port.
pub const PLUGIN_PORT: i32 = 8787;
/// The directory (an in-memory emptyDir both containers mount) of the plugin token.
pub const PLUGIN_DIR: &str = "/var/run/varroa/plugin";
/// The token the mite writes at start and the plugin sends.
pub const PLUGIN_TOKEN_FILE: &str = "/var/run/varroa/plugin/token";
/// The Jenkins user the mite acts as; the Varroa plugin authenticates it by the token in the
/// mite Secret (ADR 0004).
pub const MITE_USER: &str = "varroa-mite";

/// The build claims failure mode of the resolved settings, as the mite reads it
/// (`varroa_link::claims::WhenLedgerDown`; the API crate has its own enum of the same spellings).
pub fn when_ledger_down(s: &varroa_api::ControllerSettings) -> WhenLedgerDown {
    match s.claims.as_ref().and_then(|c| c.when_ledger_down).unwrap_or_default() {
        varroa_api::WhenLedgerDown::FailClosed => WhenLedgerDown::FailClosed,
        varroa_api::WhenLedgerDown::FailOpen => WhenLedgerDown::FailOpen,
    }
}

/// The mite's build claims environment: [`ENV_CLAIMS`] `on` when the installation has a build
/// record store (`--build-records`), else `off`; [`ENV_WHEN_LEDGER_DOWN`] the controller's
/// resolved `claims.whenLedgerDown`.
pub fn claims_env(s: &varroa_api::ControllerSettings, cfg: &Config) -> [(&'static str, &'static str); 2] {
    [(ENV_CLAIMS, if cfg.build_records { "on" } else { "off" }), (ENV_WHEN_LEDGER_DOWN, when_ledger_down(s).as_str())]
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
        // The mite reads them at start.
        "claims": claims_env(s, cfg),
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
    let [(claims_key, claims), (down_key, down)] = claims_env(s, cfg);
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
            // Jenkins listens on every address; the Jenkins double (devcluster's process runtime,
            // where pods share the host's network) binds this one, so two pods do not collide.
            field_env("POD_IP", "status.podIP"),
            env("JAVA_OPTS", &jvm),
            // The directory casc-init seeds from the ConfigMap and the mite applies to (ADR 0004).
            env("CASC_JENKINS_CONFIG", CASC_DIR),
            env("JENKINS_HOME", "/var/jenkins_home"),
            // For the Varroa plugin: the mite's user and the token it authenticates with.
            env("VARROA_MITE_USER", MITE_USER),
            env("VARROA_MITE_TOKEN_FILE", "/var/run/varroa/jenkins/token"),
            // The mite's plugin listener on the pod's loopback, and the token it writes for the
            // plugin (docs/varroa/plugin-protocol.md).
            env("VARROA_PLUGIN_URL", &format!("http://{PLUGIN_LISTEN}")),
            env("VARROA_PLUGIN_TOKEN_FILE", PLUGIN_TOKEN_FILE),
            // Whether the plugin asks a build claim for every queued build (`on`) or numbers
            // builds itself and never waits for the mite (`off`); the mite gets the same value.
            env(claims_key, claims),
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
            mount("mite-token", "/var/run/varroa/jenkins", true),
            mount("plugin", PLUGIN_DIR, true),
        ]),
        security_context: Some(restricted()),
        ..Default::default()
    };
    let mite = Container {
        name: CONTAINER_MITE.into(),
        image: Some(cfg.mite_image.clone()),
        args: Some(vec!["run".into()]),
        // The plugin listener binds the pod's loopback only; the port is declared so that a
        // runtime without network namespaces (devcluster's) gives the pod a loopback of its own.
        ports: Some(vec![ContainerPort {
            name: Some("varroa-plugin".into()),
            container_port: PLUGIN_PORT,
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        env: Some(vec![
            env("VARROA_CONTROLLER", &name),
            env("VARROA_NAMESPACE", &ns),
            // First: the values below refer to it as $(POD_IP), which Kubernetes expands only
            // from variables defined before.
            field_env("POD_IP", "status.podIP"),
            env("VARROA_GATEWAY_ENDPOINT", &cfg.gateway_endpoint),
            // Jenkins on the pod's own address (the issue's "its pod IP through the downward
            // API"): right on a cluster, and in devcluster's process runtime, where pods share
            // the host's loopback and each Jenkins double binds its pod IP.
            env("VARROA_JENKINS_URL", "http://$(POD_IP):8080"),
            env("VARROA_JENKINS_USER", MITE_USER),
            env("VARROA_JENKINS_TOKEN_FILE", &format!("/var/run/varroa/tls/{}", crate::certs::KEY_JENKINS_TOKEN)),
            // The certificate files, spelled out (the mite's defaults are the same paths): a
            // runtime that maps volume paths (devcluster's) sees them only in the pod spec.
            env("VARROA_TLS_CERT", "/var/run/varroa/tls/tls.crt"),
            env("VARROA_TLS_KEY", "/var/run/varroa/tls/tls.key"),
            env("VARROA_TLS_CA", "/var/run/varroa/tls/ca.crt"),
            env("VARROA_CASC_DIR", CASC_DIR),
            // Every address, as the mite's default; written out so devcluster binds it to the
            // pod IP (two pods' mites would collide on the host's port otherwise).
            env("VARROA_HEALTH_LISTEN", "0.0.0.0:8081"),
            env("VARROA_PLUGIN_LISTEN", PLUGIN_LISTEN),
            env("VARROA_PLUGIN_TOKEN_FILE", PLUGIN_TOKEN_FILE),
            // Build claims: on only with the build record store; the controller's failure mode.
            env(claims_key, claims),
            env(down_key, down),
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
            mount("plugin", PLUGIN_DIR, false),
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
    // Jenkins boots with the ConfigMap's configuration: copied into the writable directory the
    // mite applies to, before Jenkins starts.
    let casc_init = Container {
        name: CONTAINER_CASC_INIT.into(),
        image: Some(cfg.mite_image.clone()),
        args: Some(vec![
            "seed-casc".into(),
            "--from".into(),
            "/var/jenkins_config/jenkins.yaml".into(),
            "--to".into(),
            CASC_DIR.into(),
        ]),
        volume_mounts: Some(vec![
            mount("config", "/var/jenkins_config", true),
            mount("jenkins-home", "/var/jenkins_home", false),
        ]),
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
        // Jenkins sees the mite's API token alone, not the mite's private key.
        Volume {
            name: "mite-token".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret_name(c)),
                items: Some(vec![k8s_openapi::api::core::v1::KeyToPath {
                    key: crate::certs::KEY_JENKINS_TOKEN.into(),
                    path: "token".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        },
        Volume { name: "plugins".into(), empty_dir: Some(EmptyDirVolumeSource::default()), ..Default::default() },
        Volume { name: "tmp".into(), empty_dir: Some(EmptyDirVolumeSource::default()), ..Default::default() },
        // The plugin token the mite writes and Jenkins reads: in memory, never on the node's disk.
        Volume {
            name: "plugin".into(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("Memory".into()),
                size_limit: Some(Quantity("1Mi".into())),
            }),
            ..Default::default()
        },
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
                    init_containers: Some(vec![plugins_init, casc_init]),
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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn controller(ns: &str, name: &str, uid: &str) -> Controller {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "varroa.dev/v1alpha1", "kind": "Controller",
            "metadata": {"name": name, "namespace": ns, "uid": uid}, "spec": {},
        }))
        .expect("a Controller")
    }

    fn ingress_of(c: &Controller, host: &str, created: &str) -> Ingress {
        let mut m = meta(c, &c.name_any());
        m.creation_timestamp = Some(Time(created.parse().expect("a timestamp")));
        Ingress {
            metadata: m,
            spec: Some(IngressSpec {
                rules: Some(vec![IngressRule { host: Some(host.into()), http: None }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// A world of a profile, a ControllerClass `open` (claims failOpen) and three Controllers:
    /// `plain` (no class), `classed` (of the class) and `closed` (of the class, back to
    /// failClosed in its own spec).
    const CLAIMS_WORLD: &str = r#"
apiVersion: varroa.dev/v1alpha1
kind: JenkinsVersionProfile
metadata: {name: p1}
spec:
  jenkinsVersion: "2.479.3"
  image: jenkins/jenkins:2.479.3-lts-jdk17
  plugins:
  - {name: configuration-as-code, version: "1.0", sha256: "1111111111111111111111111111111111111111111111111111111111111111"}
  - {name: git, version: "5.7.0", sha256: "2222222222222222222222222222222222222222222222222222222222222222"}
  - {name: job-dsl, version: "1.90", sha256: "3333333333333333333333333333333333333333333333333333333333333333"}
  - {name: kubernetes, version: "4313", sha256: "4444444444444444444444444444444444444444444444444444444444444444"}
  - {name: workflow-aggregator, version: "600", sha256: "5555555555555555555555555555555555555555555555555555555555555555"}
  - {name: role-strategy, version: "756", sha256: "6666666666666666666666666666666666666666666666666666666666666666"}
---
apiVersion: varroa.dev/v1alpha1
kind: ProvisioningDefaults
metadata: {name: default}
spec: {versionProfile: p1}
---
apiVersion: varroa.dev/v1alpha1
kind: ControllerClass
metadata: {name: open}
spec: {claims: {whenLedgerDown: failOpen}}
---
apiVersion: varroa.dev/v1alpha1
kind: Controller
metadata: {name: plain, namespace: team-a, uid: u1}
spec: {}
---
apiVersion: varroa.dev/v1alpha1
kind: Controller
metadata: {name: classed, namespace: team-a, uid: u2}
spec: {className: open}
---
apiVersion: varroa.dev/v1alpha1
kind: Controller
metadata: {name: closed, namespace: team-a, uid: u3}
spec: {className: open, claims: {whenLedgerDown: failClosed}}
"#;

    /// The mite's claims environment and the restart digest of controller `name`'s StatefulSet.
    fn claims_of(name: &str, cfg: &Config) -> (Option<String>, Option<String>, String) {
        let mut l = varroa_config::load::Loaded::default();
        l.add_yaml("claims.yaml", CLAIMS_WORLD).expect("the world loads");
        let c = l.controllers.iter().find(|c| c.name_any() == name).expect("the controller");
        let r = varroa_config::render(c, &l.world).expect("renders");
        let inputs =
            PodInputs { update_site: "https://updates.jenkins.io".into(), ca_fingerprint: "ca", hibernated: false };
        let sts = stateful_set(c, &r, cfg, &inputs);
        let pod = sts.spec.and_then(|s| s.template.spec).expect("a pod spec");
        let mite = pod.containers.iter().find(|c| c.name == CONTAINER_MITE).expect("the mite");
        let jenkins = pod.containers.iter().find(|c| c.name == CONTAINER_JENKINS).expect("jenkins");
        let value = |c: &Container, k: &str| c.env.iter().flatten().find(|e| e.name == k).and_then(|e| e.value.clone());
        assert_eq!(value(jenkins, ENV_CLAIMS), value(mite, ENV_CLAIMS), "the plugin and the mite agree on the gate");
        (value(mite, ENV_CLAIMS), value(mite, ENV_WHEN_LEDGER_DOWN), restart_digest(c, &r, cfg, &inputs))
    }

    fn some(s: &str) -> Option<String> {
        Some(s.to_string())
    }

    #[test]
    fn the_mite_gets_claims_off_and_fail_closed_by_default() {
        let cfg = Config::for_tests();
        for name in ["plain", "closed"] {
            let (on, down, _) = claims_of(name, &cfg);
            assert_eq!((on, down), (some("off"), some("failClosed")), "{name}");
        }
        // Without the build record store the setting still reaches the mite (it answers
        // ungated whatever it is).
        let (on, down, _) = claims_of("classed", &cfg);
        assert_eq!((on, down), (some("off"), some("failOpen")));
    }

    #[test]
    fn with_build_records_claims_are_on_and_the_most_specific_failure_mode_wins() {
        let cfg = Config { build_records: true, ..Config::for_tests() };
        assert_eq!(claims_of("plain", &cfg).0, some("on"));
        assert_eq!(claims_of("plain", &cfg).1, some("failClosed"), "Varroa's default");
        assert_eq!(claims_of("classed", &cfg).1, some("failOpen"), "the class's");
        assert_eq!(claims_of("closed", &cfg).1, some("failClosed"), "the controller's own, over its class's");
    }

    #[test]
    fn a_change_of_either_claims_setting_rolls_the_pod() {
        let off = Config::for_tests();
        let on = Config { build_records: true, ..Config::for_tests() };
        let digest = |name: &str, cfg: &Config| claims_of(name, cfg).2;
        assert_ne!(digest("plain", &off), digest("plain", &on), "--build-records");
        // The same controller with the other failure mode.
        let mut l = varroa_config::load::Loaded::default();
        l.add_yaml("claims.yaml", CLAIMS_WORLD).expect("the world loads");
        let c = l.controllers.iter().find(|c| c.name_any() == "classed").expect("classed");
        let open = varroa_config::render(c, &l.world).expect("renders");
        let mut closed = open.clone();
        closed.settings.settings.claims =
            Some(varroa_api::ClaimSettings { when_ledger_down: Some(varroa_api::WhenLedgerDown::FailClosed) });
        let inputs =
            PodInputs { update_site: "https://updates.jenkins.io".into(), ca_fingerprint: "ca", hibernated: false };
        assert_ne!(restart_digest(c, &open, &on, &inputs), restart_digest(c, &closed, &on, &inputs), "whenLedgerDown");
    }

    #[test]
    fn the_api_failure_modes_are_the_links() {
        for (api, link) in [
            (varroa_api::WhenLedgerDown::FailClosed, WhenLedgerDown::FailClosed),
            (varroa_api::WhenLedgerDown::FailOpen, WhenLedgerDown::FailOpen),
        ] {
            let s = varroa_api::ControllerSettings {
                claims: Some(varroa_api::ClaimSettings { when_ledger_down: Some(api) }),
                ..Default::default()
            };
            assert_eq!(when_ledger_down(&s), link);
            assert_eq!(api.as_str(), link.as_str());
            assert_eq!(api.as_str().parse::<WhenLedgerDown>(), Ok(link));
        }
        assert_eq!(when_ledger_down(&varroa_api::ControllerSettings::default()), WhenLedgerDown::default());
    }

    #[test]
    fn ours_needs_the_label_and_an_owner_reference_to_this_uid() {
        let c = controller("team-a", "ci", "uid-1");
        assert!(is_ours(&meta(&c, "ci"), &c));
        let other = controller("team-a", "ci", "uid-2");
        assert!(!is_ours(&meta(&other, "ci"), &c), "a Controller of the same name but another uid");
        let mut unlabelled = meta(&c, "ci");
        unlabelled.labels = None;
        assert!(!is_ours(&unlabelled, &c));
        let mut unowned = meta(&c, "ci");
        unowned.owner_references = None;
        assert!(!is_ours(&unowned, &c));
        assert!(!is_ours(&ObjectMeta::default(), &c));
    }

    #[test]
    fn the_older_ingress_keeps_a_host_in_any_namespace() {
        let a = controller("team-a", "first", "uid-a");
        let b = controller("team-b", "second", "uid-b");
        let old = ingress_of(&a, "jenkins.example.com", "2026-01-01T00:00:00Z");
        let new = ingress_of(&b, "jenkins.example.com", "2026-02-01T00:00:00Z");
        // b asks for a's host: refused, naming a's Ingress.
        let msg = host_conflict(&b, &new, std::slice::from_ref(&old)).expect("a conflict");
        assert!(msg.contains("Ingress team-a/first") && msg.contains("choose another ingress.host"), "{msg}");
        // Both exist (written at once): the newer gives way, the older keeps it.
        assert!(host_conflict(&b, &new, &[old.clone(), new.clone()]).is_some());
        assert_eq!(host_conflict(&a, &old, &[old.clone(), new.clone()]), None);
        // Another host, or only its own Ingress: no conflict.
        let elsewhere = ingress_of(&b, "other.example.com", "2026-02-01T00:00:00Z");
        assert_eq!(host_conflict(&b, &elsewhere, &[old.clone(), elsewhere.clone()]), None);
        assert_eq!(host_conflict(&a, &old, std::slice::from_ref(&old)), None);
    }
}
