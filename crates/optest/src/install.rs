//! An operator's install manifests (`deploy/<operator>/`), checked as a platform team reads them
//! before `kubectl apply -f deploy/<operator>/`: what both operators' install tests require of
//! their Deployment, Service, PodDisruptionBudget, Namespace and image. What is particular to one
//! operator (its flags, resources, volumes, Dockerfile) its own test checks on top.

use crate::manifests::{find, typed, yaml_file};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, Namespace, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// Every document of the manifest files of `dir` is an object with apiVersion, kind and name;
/// an object defined twice (across files) is a Namespace. And `kubectl apply -f <dir>/`, which
/// applies the files in name order and each file's documents in order, creates everything
/// before what needs it: the Namespace of every namespaced object, and the ServiceAccount of
/// every Deployment and StatefulSet with the (Cluster)RoleBindings that grant it, so that no pod
/// starts without its identity or rights.
pub fn check_documents(dir: &str) {
    let mut names = BTreeSet::new();
    // (namespace, name) of each ServiceAccount so far, and how many bindings name it.
    let mut accounts: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut namespaces = BTreeSet::new();
    let mut workloads = vec![];
    for f in crate::manifests::files(dir) {
        for d in yaml_file(&f) {
            let kind = d["kind"].as_str().unwrap_or_else(|| panic!("{f}: a document without kind"));
            assert!(d["apiVersion"].is_string(), "{f}: {kind} without apiVersion");
            let name = d["metadata"]["name"].as_str().unwrap_or_else(|| panic!("{f}: {kind} without a name"));
            let ns = d["metadata"]["namespace"].as_str().unwrap_or("");
            if !names.insert((kind.to_string(), ns.to_string(), name.to_string())) {
                assert_eq!(kind, "Namespace", "{f}: {kind} {name} defined twice");
            }
            if !ns.is_empty() && !namespaces.contains(ns) && !crate::manifests::BUILT_IN_NAMESPACES.contains(&ns) {
                panic!(
                    "{f}: {kind} {ns}/{name} comes before its Namespace in `kubectl apply -f {dir}/` (files in name order)"
                );
            }
            match kind {
                "Namespace" => {
                    namespaces.insert(name.to_string());
                }
                "ServiceAccount" => {
                    accounts.insert((ns.to_string(), name.to_string()), 0);
                }
                "RoleBinding" | "ClusterRoleBinding" => {
                    for s in d["subjects"].as_array().into_iter().flatten() {
                        if s["kind"] == "ServiceAccount" {
                            let key = (
                                s["namespace"].as_str().unwrap_or(ns).to_string(),
                                s["name"].as_str().unwrap_or("").to_string(),
                            );
                            if let Some(n) = accounts.get_mut(&key) {
                                *n += 1;
                            }
                        }
                    }
                }
                "Deployment" | "StatefulSet" => {
                    let sa = d["spec"]["template"]["spec"]["serviceAccountName"].as_str().unwrap_or("default");
                    if sa != "default" {
                        let bindings = accounts.get(&(ns.to_string(), sa.to_string())).copied().unwrap_or_else(|| {
                            panic!("{f}: {kind} {ns}/{name} comes before its ServiceAccount {sa} in `kubectl apply -f {dir}/` (files in name order)")
                        });
                        workloads.push((
                            f.clone(),
                            kind.to_string(),
                            format!("{ns}/{name}"),
                            (ns.to_string(), sa.to_string()),
                            bindings,
                        ));
                    }
                }
                _ => {}
            }
        }
    }
    // A binding of a workload's ServiceAccount applied after the workload: its pods start without it.
    for (f, kind, name, account, before) in workloads {
        let all = accounts[&account];
        assert_eq!(
            before,
            all,
            "{f}: {kind} {name} comes before {} of the {} bindings of its ServiceAccount {}/{} in `kubectl apply -f {dir}/`",
            all - before,
            all,
            account.0,
            account.1
        );
    }
}

/// The Namespace of operator.yaml (there for `kubectl apply -f <dir>`) equals operator-rbac.yaml's and
/// enforces Pod Security `restricted`; returns it.
pub fn check_namespace(dir: &str, operator: &[Value], rbac: &[Value]) -> Namespace {
    assert_eq!(
        find("operator.yaml", operator, "Namespace"),
        find("operator-rbac.yaml", rbac, "Namespace"),
        "the Namespace of operator.yaml (there for `kubectl apply -f {dir}/`) must equal operator-rbac.yaml's"
    );
    let ns: Namespace = typed("operator.yaml Namespace", find("operator.yaml", operator, "Namespace"));
    let psa = ns.metadata.labels.clone().unwrap_or_default();
    assert_eq!(psa.get("pod-security.kubernetes.io/enforce").map(String::as_str), Some("restricted"));
    ns
}

/// The labels of the Deployment's pods.
pub fn pod_labels(d: &Deployment) -> BTreeMap<String, String> {
    d.spec.as_ref().and_then(|s| s.template.metadata.as_ref()).and_then(|m| m.labels.clone()).unwrap_or_default()
}

/// Whether a (non-empty) label selector selects pods with these labels.
pub fn selects(labels: &BTreeMap<String, String>, selector: &BTreeMap<String, String>) -> bool {
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// What the operator's Deployment is run as.
pub struct Expect<'a> {
    pub namespace: &'a str,
    /// The ServiceAccount of operator-rbac.yaml.
    pub service_account: &'a str,
    pub image: &'a str,
    /// Seconds the operator may take to stop after SIGTERM (its main.rs): the grace period must
    /// exceed it.
    pub shutdown_secs: i64,
}

/// The operator's Deployment: in its namespace, two replicas (a leader and a standby)
/// preferring distinct nodes, selecting their pods, run as the ServiceAccount with a grace
/// period longer than the operator's shutdown; one container of the image, run by its
/// entrypoint; Pod Security `restricted` (non-root 65532, RuntimeDefault seccomp, no privilege
/// escalation, every capability dropped, a read-only root filesystem); probes /healthz and
/// /readyz on the port named health; POD_NAME (the leader identity's prefix) from the downward
/// API. Returns the container.
pub fn check_deployment(what: &str, d: &Deployment, expect: &Expect) -> Container {
    let spec = d.spec.as_ref().unwrap_or_else(|| panic!("{what}: no spec"));
    assert_eq!(d.metadata.namespace.as_deref(), Some(expect.namespace), "{what}: namespace");
    assert_eq!(spec.replicas, Some(2), "{what}: two replicas, one leader and a standby");
    let labels = pod_labels(d);
    let selector = spec.selector.match_labels.clone().unwrap_or_default();
    assert!(selects(&labels, &selector), "{what}: the selector {selector:?} must select the pod labels {labels:?}");
    let pod = spec.template.spec.as_ref().unwrap_or_else(|| panic!("{what}: no pod spec"));
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some(expect.service_account),
        "{what}: the ServiceAccount of operator-rbac.yaml"
    );
    let grace = pod.termination_grace_period_seconds.unwrap_or(30);
    assert!(
        grace > expect.shutdown_secs,
        "{what}: terminationGracePeriodSeconds {grace} must exceed the operator's shutdown grace"
    );
    let anti = pod
        .affinity
        .as_ref()
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| a.preferred_during_scheduling_ignored_during_execution.clone())
        .unwrap_or_default();
    assert!(
        anti.iter().any(|t| t.pod_affinity_term.topology_key == "kubernetes.io/hostname"
            && t.pod_affinity_term
                .label_selector
                .as_ref()
                .and_then(|s| s.match_labels.as_ref())
                .is_some_and(|sel| selects(&labels, sel))),
        "{what}: replicas prefer distinct nodes (podAntiAffinity on kubernetes.io/hostname)"
    );

    // Pod Security `restricted`: the pod...
    let psc = pod.security_context.clone().unwrap_or_default();
    assert_eq!(psc.run_as_non_root, Some(true), "{what}: pod runAsNonRoot");
    assert_eq!(psc.run_as_user, Some(65532), "{what}: pod runAsUser (distroless nonroot)");
    assert_eq!(psc.seccomp_profile.as_ref().map(|s| s.type_.as_str()), Some("RuntimeDefault"), "{what}: pod seccomp");
    assert_eq!(pod.containers.len(), 1, "{what}: one container");
    // ...and its container.
    let c = &pod.containers[0];
    assert_eq!(c.image.as_deref(), Some(expect.image), "{what}: image");
    let sc = c.security_context.clone().unwrap_or_default();
    assert_eq!(sc.allow_privilege_escalation, Some(false), "{what}: allowPrivilegeEscalation");
    assert_eq!(sc.read_only_root_filesystem, Some(true), "{what}: readOnlyRootFilesystem");
    assert_eq!(sc.run_as_non_root, Some(true), "{what}: container runAsNonRoot");
    assert_eq!(sc.run_as_user, Some(65532), "{what}: container runAsUser");
    assert_eq!(sc.privileged, None, "{what}: privileged");
    let caps = sc.capabilities.clone().unwrap_or_default();
    assert_eq!(caps.drop, Some(vec!["ALL".to_string()]), "{what}: capabilities.drop");
    assert_eq!(caps.add, None, "{what}: capabilities.add");
    assert_eq!(
        sc.seccomp_profile.as_ref().map(|s| s.type_.as_str()),
        Some("RuntimeDefault"),
        "{what}: container seccomp"
    );
    assert!(c.command.is_none(), "{what}: the image's entrypoint runs the operator");

    // The probes use the health port.
    for (probe, path) in [(&c.liveness_probe, "/healthz"), (&c.readiness_probe, "/readyz")] {
        let get = probe.as_ref().and_then(|p| p.http_get.as_ref()).unwrap_or_else(|| panic!("{what}: no {path} probe"));
        assert_eq!(get.path.as_deref(), Some(path), "{what}: probe path");
        assert_eq!(get.port, IntOrString::String("health".into()), "{what}: the {path} probe targets the health port");
    }

    // The leader identity (opkit::leader::default_identity) is $POD_NAME plus a suffix.
    let pod_name =
        c.env.iter().flatten().find(|e| e.name == "POD_NAME").unwrap_or_else(|| panic!("{what}: no POD_NAME"));
    let field = pod_name.value_from.as_ref().and_then(|v| v.field_ref.as_ref()).map(|f| f.field_path.as_str());
    assert_eq!(field, Some("metadata.name"), "{what}: POD_NAME comes from the downward API");
    c.clone()
}

/// operator.yaml's metrics Service and PodDisruptionBudget: both select the Deployment's pods,
/// the Service's port `metrics` targets the container port named `metrics_port`, and a drain
/// keeps one replica. Returns them, for what else the test checks.
pub fn check_service_and_pdb(operator: &[Value], d: &Deployment, metrics_port: &str) -> (Service, PodDisruptionBudget) {
    let labels = pod_labels(d);
    let svc: Service = typed("operator.yaml Service", find("operator.yaml", operator, "Service"));
    let svc_spec = svc.spec.clone().unwrap_or_default();
    assert!(
        selects(&labels, &svc_spec.selector.unwrap_or_default()),
        "the metrics Service selects the operator's pods"
    );
    let ports = svc_spec.ports.unwrap_or_default();
    assert!(
        ports
            .iter()
            .any(|p| p.name.as_deref() == Some("metrics")
                && p.target_port == Some(IntOrString::String(metrics_port.into()))),
        "the metrics Service targets the port serving /metrics ({metrics_port}): {ports:?}"
    );
    let pdb: PodDisruptionBudget =
        typed("operator.yaml PodDisruptionBudget", find("operator.yaml", operator, "PodDisruptionBudget"));
    let spec = pdb.spec.clone().unwrap_or_default();
    assert_eq!(spec.min_available, Some(IntOrString::Int(1)), "a drain keeps one replica");
    assert!(
        selects(&labels, &spec.selector.and_then(|s| s.match_labels).unwrap_or_default()),
        "the PDB selects the operator's pods"
    );
    (svc, pdb)
}

/// What the images' Dockerfiles build from: the toolchain their builder image matches, a
/// .dockerignore that keeps the build context small.
pub fn check_build_context() {
    let toolchain = crate::read("rust-toolchain.toml");
    assert!(
        toolchain.contains("channel = \"1.95"),
        "the Dockerfiles' builder is rust:1.95: update them with rust-toolchain.toml"
    );
    let ignore = crate::read(".dockerignore");
    for entry in ["target/", ".demo/", ".git"] {
        assert!(ignore.lines().any(|l| l.trim() == entry), ".dockerignore: {entry}");
    }
}
