//! Installing Varroa: deploy/varroa/*.yaml and varroa/operator/Dockerfile, checked against the
//! operator itself.
//!
//! - The Deployment of deploy/varroa/operator.yaml passes Pod Security `restricted`, its args
//!   parse with the operator's own flags (`varroa_operator::Config`), the Service and the PDB
//!   select its pods, and the Dockerfile builds `varroa-operator` to run as the pod's user.
//! - `kubectl apply -f deploy/varroa/` on a devcluster (3 nodes, `restricted` enforced on
//!   varroa-system) makes the Deployment Available. Then, with a gateway CA made by
//!   `varroa-operator gateway-ca | kubectl apply -f -`, two operators run here with the
//!   Deployment's args and env, as its ServiceAccount with the shipped RBAC: one leads and brings
//!   a Controller to Running; when it gets SIGTERM it exits 0, the other takes over and brings
//!   the next Controller to Running.

mod support;

use clap::Parser;
use devcluster::DevCluster;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::wait::await_condition;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};
use support::{TEAM, WAIT, WORLD, phase_of, repo};
use varroa_api::{Controller, ControllerPhase};

/// The operator's namespace in deploy/varroa/.
const NS: &str = "varroa-system";
/// The operator's ServiceAccount (and Deployment) in deploy/varroa/.
const SA: &str = "varroa-operator";
/// The operator's Lease (fixed in main.rs).
const LEASE: &str = "varroa-operator";
/// Seconds the operator may take to stop after SIGTERM (main.rs); the grace period must exceed it.
const OPERATOR_SHUTDOWN_SECS: i64 = 15;
/// The image the manifest deploys.
const IMAGE: &str = concat!("ghcr.io/eventide/varroa-operator:", env!("CARGO_PKG_VERSION"));

/// The operator's flags, parsed by the operator's own type.
#[derive(Parser, Debug)]
#[command(name = "varroa-operator")]
struct Flags {
    #[command(flatten)]
    config: varroa_operator::Config,
}

fn parse_flags(args: &[String]) -> Result<varroa_operator::Config, clap::Error> {
    Flags::try_parse_from(std::iter::once("varroa-operator".to_string()).chain(args.iter().cloned())).map(|f| f.config)
}

/// The flags of `varroa-operator gateway-ca`, for its defaults.
#[derive(Parser, Debug)]
#[command(name = "gateway-ca")]
struct GatewayCaFlags {
    #[command(flatten)]
    args: varroa_operator::gateway_ca_cmd::GatewayCaArgs,
}

// ---------------------------------------------------------------------------------------------
// Files and YAML

fn read(rel: &str) -> String {
    let p = repo(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

/// Every document of a YAML stream (empty ones, such as a leading comment, left out).
fn yaml_docs(what: &str, text: &str) -> Vec<Value> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).unwrap_or_else(|e| panic!("{what}: not YAML: {e}"));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

fn yaml_file(rel: &str) -> Vec<Value> {
    yaml_docs(rel, &read(rel))
}

/// The one document of this kind.
fn find<'a>(what: &str, docs: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "{what}: expected one {kind}, found {}", found.len());
    found[0]
}

/// The object as its Rust type, which must know every field (a typo would be dropped silently
/// by the API server's non-strict decoding).
fn typed<K: Serialize + DeserializeOwned>(what: &str, v: &Value) -> K {
    let k: K = serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{what}: {e}\n{v:#}"));
    let back = serde_json::to_value(&k).expect("serialize");
    assert_eq!(back, *v, "{what}: has fields its type does not know (a typo?) or values of the wrong shape");
    k
}

/// The files of deploy/varroa/, in the order `kubectl apply -f deploy/varroa/` takes them.
fn manifest_files() -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(repo("deploy/varroa"))
        .expect("deploy/varroa")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml") || n.ends_with(".yml") || n.ends_with(".json"))
        .map(|n| format!("deploy/varroa/{n}"))
        .collect();
    files.sort();
    files
}

fn manifest_deployment() -> Deployment {
    typed("operator.yaml Deployment", find("operator.yaml", &yaml_file("deploy/varroa/operator.yaml"), "Deployment"))
}

// ---------------------------------------------------------------------------------------------
// The manifests and the Dockerfile

/// The volume types Pod Security `restricted` allows.
const RESTRICTED_VOLUMES: &[&str] =
    &["configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"];

#[test]
fn manifests_parse_are_restricted_and_carry_the_operators_flags() {
    // Every document of deploy/varroa/ is an object with a kind; only the Namespace repeats.
    let mut names = BTreeSet::new();
    for f in manifest_files() {
        for d in yaml_file(&f) {
            let kind = d["kind"].as_str().unwrap_or_else(|| panic!("{f}: a document without kind"));
            assert!(d["apiVersion"].is_string(), "{f}: {kind} without apiVersion");
            let name = d["metadata"]["name"].as_str().unwrap_or_else(|| panic!("{f}: {kind} without a name"));
            let ns = d["metadata"]["namespace"].as_str().unwrap_or("");
            if !names.insert((kind.to_string(), ns.to_string(), name.to_string())) {
                assert_eq!(kind, "Namespace", "{f}: {kind} {name} defined twice");
            }
        }
    }
    let files = manifest_files();
    let pos = |f: &str| files.iter().position(|x| x == f).unwrap_or_else(|| panic!("{f} missing: {files:?}"));
    assert!(pos("deploy/varroa/operator.yaml") < pos("deploy/varroa/rbac.yaml"), "kubectl's name order: {files:?}");

    let op = yaml_file("deploy/varroa/operator.yaml");
    let rbac = yaml_file("deploy/varroa/rbac.yaml");
    assert_eq!(
        find("operator.yaml", &op, "Namespace"),
        find("rbac.yaml", &rbac, "Namespace"),
        "the Namespace of operator.yaml (there for `kubectl apply -f deploy/varroa/`) must equal rbac.yaml's"
    );
    let ns: Namespace = typed("operator.yaml Namespace", find("operator.yaml", &op, "Namespace"));
    assert_eq!(ns.metadata.name.as_deref(), Some(NS));
    let psa = ns.metadata.labels.unwrap_or_default();
    assert_eq!(psa.get("pod-security.kubernetes.io/enforce").map(String::as_str), Some("restricted"));

    // The Deployment.
    let what = "deploy/varroa/operator.yaml Deployment";
    let d = manifest_deployment();
    let spec = d.spec.as_ref().expect("spec");
    assert_eq!(d.metadata.namespace.as_deref(), Some(NS), "{what}: namespace");
    assert_eq!(spec.replicas, Some(2), "{what}: two replicas, one leader and a standby");
    let labels = spec.template.metadata.as_ref().and_then(|m| m.labels.clone()).unwrap_or_default();
    let selects = |sel: &BTreeMap<String, String>| !sel.is_empty() && sel.iter().all(|(k, v)| labels.get(k) == Some(v));
    let selector = spec.selector.match_labels.clone().unwrap_or_default();
    assert!(selects(&selector), "{what}: the selector {selector:?} must select the pod labels {labels:?}");
    let pod = spec.template.spec.as_ref().expect("pod spec");
    assert_eq!(pod.service_account_name.as_deref(), Some(SA), "{what}: the ServiceAccount of rbac.yaml");
    let rbac_sa: ServiceAccount = typed("rbac.yaml ServiceAccount", find("rbac.yaml", &rbac, "ServiceAccount"));
    assert_eq!(rbac_sa.metadata.name.as_deref(), Some(SA));
    let grace = pod.termination_grace_period_seconds.unwrap_or(30);
    assert!(
        grace > OPERATOR_SHUTDOWN_SECS,
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
            && t.pod_affinity_term.label_selector.as_ref().and_then(|s| s.match_labels.as_ref()).is_some_and(selects)),
        "{what}: replicas prefer distinct nodes (podAntiAffinity on kubernetes.io/hostname)"
    );

    // Pod Security `restricted`: the pod...
    for (field, set) in [("hostNetwork", pod.host_network), ("hostPID", pod.host_pid), ("hostIPC", pod.host_ipc)] {
        assert_ne!(set, Some(true), "{what}: {field}");
    }
    let psc = pod.security_context.clone().unwrap_or_default();
    assert_eq!(psc.run_as_non_root, Some(true), "{what}: pod runAsNonRoot");
    assert_eq!(psc.run_as_user, Some(65532), "{what}: pod runAsUser (distroless nonroot)");
    assert_eq!(psc.seccomp_profile.as_ref().map(|s| s.type_.as_str()), Some("RuntimeDefault"), "{what}: pod seccomp");
    let pod_json = serde_json::to_value(pod).expect("pod as JSON");
    let volumes = pod.volumes.clone().unwrap_or_default();
    for (i, v) in pod_json["volumes"].as_array().cloned().unwrap_or_default().iter().enumerate() {
        let types: Vec<&String> = v.as_object().expect("a volume").keys().filter(|k| *k != "name").collect();
        assert!(
            types.iter().all(|t| RESTRICTED_VOLUMES.contains(&t.as_str())),
            "{what}: volume {i} is of a type `restricted` refuses: {types:?}"
        );
    }
    assert!(pod.init_containers.is_none() && pod.ephemeral_containers.is_none(), "{what}: one container only");
    assert_eq!(pod.containers.len(), 1, "{what}: one container");
    // ...and its container.
    let c = &pod.containers[0];
    assert_eq!(c.image.as_deref(), Some(IMAGE), "{what}: image");
    let sc = c.security_context.clone().unwrap_or_default();
    assert_eq!(sc.allow_privilege_escalation, Some(false), "{what}: allowPrivilegeEscalation");
    assert_eq!(sc.run_as_non_root, Some(true), "{what}: container runAsNonRoot");
    assert_eq!(sc.run_as_user, Some(65532), "{what}: container runAsUser");
    assert_eq!(sc.run_as_group, psc.run_as_group, "{what}: container and pod runAsGroup");
    assert_eq!(sc.privileged, None, "{what}: privileged");
    assert_eq!(sc.proc_mount, None, "{what}: procMount");
    let caps = sc.capabilities.clone().unwrap_or_default();
    assert_eq!(caps.drop, Some(vec!["ALL".to_string()]), "{what}: capabilities.drop");
    assert_eq!(caps.add, None, "{what}: capabilities.add");
    assert_eq!(
        sc.seccomp_profile.as_ref().map(|s| s.type_.as_str()),
        Some("RuntimeDefault"),
        "{what}: container seccomp"
    );
    assert!(c.ports.iter().flatten().all(|p| p.host_port.is_none()), "{what}: hostPort");

    // A read-only root filesystem, with an emptyDir at /tmp for the Git fetches' temporary
    // directories (varroa-sources' Fetcher without a cache directory).
    assert_eq!(sc.read_only_root_filesystem, Some(true), "{what}: readOnlyRootFilesystem");
    let tmp = c
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.mount_path == "/tmp")
        .unwrap_or_else(|| panic!("{what}: nothing mounted at /tmp, where the Git fetches write"));
    assert_ne!(tmp.read_only, Some(true), "{what}: /tmp is writable");
    let vol = volumes.iter().find(|v| v.name == tmp.name).unwrap_or_else(|| panic!("{what}: no volume {}", tmp.name));
    assert!(vol.empty_dir.as_ref().is_some_and(|e| e.size_limit.is_some()), "{what}: /tmp is an emptyDir with a limit");

    // Resources: requests and limits of CPU and memory.
    let res = c.resources.clone().unwrap_or_default();
    for (which, m) in [("requests", &res.requests), ("limits", &res.limits)] {
        let m = m.clone().unwrap_or_default();
        assert!(m.contains_key("cpu") && m.contains_key("memory"), "{what}: resources.{which} of cpu and memory");
    }

    // The args are the operator's.
    assert!(c.command.is_none(), "{what}: the image's entrypoint runs the operator");
    let args = c.args.clone().unwrap_or_default();
    let cfg = parse_flags(&args).unwrap_or_else(|e| panic!("{what}: the operator refuses its args {args:?}:\n{e}"));
    cfg.validate().unwrap_or_else(|e| panic!("{what}: the operator would stop at start with its args {args:?}: {e}"));
    assert!(cfg.leader_elect, "{what}: two replicas need --leader-elect=true");
    assert_eq!(cfg.leader_election_namespace, NS, "{what}: the Lease lives where rbac.yaml's Role grants Leases");
    let role = find("rbac.yaml", &rbac, "Role");
    assert_eq!(role["metadata"]["namespace"], NS, "rbac.yaml: the leader election Role");
    // The CA Secret the operator reads is the one `varroa-operator gateway-ca` prints.
    let ca = GatewayCaFlags::try_parse_from(["gateway-ca"]).expect("gateway-ca's defaults").args;
    assert_eq!(cfg.gateway_ca(), (ca.namespace, ca.name), "{what}: --gateway-ca-secret vs `gateway-ca`");
    assert!(cfg.health_addr.ip().is_unspecified(), "{what}: --health-addr must listen on every interface");
    // Build claims need the build record store, which needs a database of the user's: the
    // manifest says which it is rather than leave it to a default.
    assert!(
        args.iter().any(|a| a.starts_with("--build-records=")),
        "{what}: state --build-records=true or false (build claims need the build record store)"
    );

    // The port: where the operator serves; the probes use it.
    let ports: Vec<_> = c.ports.clone().unwrap_or_default();
    let health = ports
        .iter()
        .find(|p| p.name.as_deref() == Some("health"))
        .unwrap_or_else(|| panic!("{what}: no container port named health"));
    assert_eq!(health.container_port, i32::from(cfg.health_addr.port()), "{what}: port `health` is --health-addr's");
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

    // The Service (metrics, served on the health port) and the PDB select the pods.
    let svc: Service = typed("operator.yaml Service", find("operator.yaml", &op, "Service"));
    assert_eq!(svc.metadata.namespace.as_deref(), Some(NS));
    let svc_spec = svc.spec.unwrap_or_default();
    assert!(selects(&svc_spec.selector.unwrap_or_default()), "the metrics Service selects the operator's pods");
    let svc_ports = svc_spec.ports.unwrap_or_default();
    assert!(
        svc_ports.iter().any(
            |p| p.name.as_deref() == Some("metrics") && p.target_port == Some(IntOrString::String("health".into()))
        ),
        "the metrics Service targets the port serving /metrics (health): {svc_ports:?}"
    );
    let pdb: PodDisruptionBudget =
        typed("operator.yaml PodDisruptionBudget", find("operator.yaml", &op, "PodDisruptionBudget"));
    assert_eq!(pdb.metadata.namespace.as_deref(), Some(NS));
    let pdb = pdb.spec.unwrap_or_default();
    assert_eq!(pdb.min_available, Some(IntOrString::Int(1)), "a drain keeps one replica");
    assert!(
        selects(&pdb.selector.and_then(|s| s.match_labels).unwrap_or_default()),
        "the PDB selects the operator's pods"
    );

    // The image: built by the Dockerfile from the repository root, the binary varroa-operator
    // (this crate's, CARGO_BIN_EXE_varroa-operator), run as the user of the security contexts.
    assert!(Path::new(env!("CARGO_BIN_EXE_varroa-operator")).is_file(), "the binary is named varroa-operator");
    let toolchain = read("rust-toolchain.toml");
    assert!(
        toolchain.contains("channel = \"1.95"),
        "the Dockerfile's builder is rust:1.95: update it with rust-toolchain.toml"
    );
    let file = "varroa/operator/Dockerfile";
    let text = read(file);
    for needle in [
        "FROM rust:1.95-bookworm AS build",
        "COPY . .",
        "cargo build -p varroa-operator --release --locked",
        "cp target/release/varroa-operator /usr/local/bin/varroa-operator",
        "FROM gcr.io/distroless/cc-debian12:nonroot",
        "COPY --from=build /usr/local/bin/varroa-operator /usr/local/bin/varroa-operator",
        "ENTRYPOINT [\"/usr/local/bin/varroa-operator\"]",
        "docker build -f varroa/operator/Dockerfile",
        "repository root",
    ] {
        assert!(text.contains(needle), "{file}: expected {needle:?}");
    }
    let user =
        text.lines().filter_map(|l| l.strip_prefix("USER ")).next_back().unwrap_or_else(|| panic!("{file}: no USER"));
    let want = format!("{}:{}", sc.run_as_user.unwrap_or(-1), sc.run_as_group.unwrap_or(-1));
    assert_eq!(user.trim(), want, "{file}: USER must be the securityContext's runAsUser:runAsGroup, numerically");
    let exposed: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("EXPOSE ")).collect();
    assert_eq!(exposed, [health.container_port.to_string()], "{file}: EXPOSE the health port");
    let ignore = read(".dockerignore");
    for entry in ["target/", ".demo/", ".git"] {
        assert!(ignore.lines().any(|l| l.trim() == entry), ".dockerignore: {entry}");
    }
}

// ---------------------------------------------------------------------------------------------
// Processes

/// A child process killed (and reaped) when dropped, so that a failing test leaves nothing running.
struct Proc {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Proc {
    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, as the kubelet stops a container.
    fn terminate(&self) {
        let pid = self.child.id().to_string();
        let st = Command::new("kill").args(["-TERM", &pid]).status().expect("kill runs");
        assert!(st.success(), "kill -TERM {pid} ({})", self.name);
    }

    /// Wait for the process to exit, until the deadline.
    fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                return st;
            }
            assert!(Instant::now() < deadline, "{} did not exit within {within:?}:\n{}", self.name, self.log_text());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The address of /healthz, /readyz and /metrics, from the operator's log.
    fn health_addr(&self) -> String {
        wait_until(&format!("{} serves /healthz", self.name), || {
            self.log_text().lines().find(|l| l.contains("serving /healthz")).and_then(|l| {
                let rest = &l[l.find("addr=")? + "addr=".len()..];
                Some(rest.split_whitespace().next()?.to_string())
            })
        })
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Poll `f` (a cheap local look: a log file) until it gives a value, or fail at the deadline.
fn wait_until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `GET path` on a local HTTP server: (status, body).
fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").expect("send");
    let mut buf = String::new();
    s.read_to_string(&mut buf).unwrap_or_else(|e| panic!("GET {addr}{path}: {e}"));
    let status = buf.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = buf.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

/// The sum of a counter's samples in a Prometheus text exposition.
fn counter(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `kubectl` against one cluster, with a discovery cache of its own.
struct Kubectl {
    kubeconfig: PathBuf,
    cache: PathBuf,
}

impl Kubectl {
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("kubectl");
        cmd.env("KUBECONFIG", &self.kubeconfig).arg(format!("--cache-dir={}", self.cache.display())).args(args);
        cmd
    }

    fn check(args: &[&str], out: Output) -> (String, String) {
        let (stdout, stderr) =
            (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
        assert!(out.status.success(), "kubectl {} failed:\n{stdout}\n{stderr}", args.join(" "));
        (stdout, stderr)
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("kubectl runs (it is installed at /usr/bin/kubectl)")
    }

    /// Run; fail the test unless it succeeds. Returns (stdout, stderr).
    fn ok(&self, args: &[&str]) -> (String, String) {
        Self::check(args, self.run(args))
    }

    /// `kubectl apply -f -` of what `input` gives on stdin.
    fn apply_stdin(&self, input: Stdio) -> (String, String) {
        let args = ["apply", "-f", "-"];
        let out = self.command(&args).stdin(input).output().expect("kubectl runs");
        Self::check(&args, out)
    }

    /// `kubectl apply -f -` of a YAML text.
    fn apply_text(&self, yaml: &str) -> (String, String) {
        let args = ["apply", "-f", "-"];
        let mut child = self
            .command(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl runs");
        child.stdin.take().expect("stdin").write_all(yaml.as_bytes()).expect("write to kubectl");
        Self::check(&args, child.wait_with_output().expect("kubectl ends"))
    }

    /// Wait until the operator's Deployment is Available; on timeout, fail with what its
    /// ReplicaSets and pods say (a pod refused by Pod Security shows there as FailedCreate).
    /// The NATS credentials Secrets of the operator, the gateway and the recorder, made the way
    /// deploy/varroa/nats.yaml tells a user to.
    fn create_nats_secrets(&self) {
        for c in ["operator", "gateway", "recorder"] {
            let password = format!("{c}-{}", std::process::id());
            let credentials = format!("--from-literal=credentials=user=varroa-{c}\npassword={password}\n");
            let name = format!("varroa-nats-{c}");
            let literal = format!("--from-literal=password={password}");
            self.ok(&["-n", NS, "create", "secret", "generic", &name, &literal, &credentials]);
        }
    }

    fn wait_available(&self) {
        let t = format!("--timeout={}s", WAIT.as_secs());
        let out = self.run(&[
            "wait",
            "--for=condition=Available",
            "deployment/varroa-operator",
            "deployment/varroa-gateway",
            "-n",
            NS,
            &t,
        ]);
        if !out.status.success() {
            let describe = self.run(&["describe", "deployment,replicaset,pods", "-n", NS]);
            panic!(
                "the operator's Deployment is not Available: {}\n{}",
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&describe.stdout)
            );
        }
    }
}

/// Blocking work (kubectl, a child's log, plain HTTP) from the async test.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// A kubeconfig acting as `varroa-system/varroa-operator`, with a TokenRequest token (what
/// `devcluster token varroa-system/varroa-operator` prints), written to `path`.
async fn service_account_kubeconfig(dc: &DevCluster, path: &Path) {
    let sas: Api<ServiceAccount> = Api::namespaced(dc.client(), NS);
    let tr = TokenRequest {
        spec: TokenRequestSpec { audiences: vec![], expiration_seconds: Some(3600), ..Default::default() },
        ..Default::default()
    };
    let token = sas
        .create_token_request(SA, &PostParams::default(), &tr)
        .await
        .expect("a token for varroa-system/varroa-operator")
        .status
        .expect("the TokenRequest's status")
        .token;
    let kc = kube::config::Kubeconfig::from_yaml(dc.kubeconfig_yaml()).expect("the admin kubeconfig");
    let mut v = serde_json::to_value(&kc).expect("kubeconfig as JSON");
    v["users"] = json!([{"name": SA, "user": {"token": token}}]);
    v["contexts"][0]["context"]["user"] = json!(SA);
    // JSON is YAML.
    std::fs::write(path, v.to_string()).expect("write the operator's kubeconfig");
}

/// The Deployment's container args and env for a run outside the cluster: the listen address
/// becomes a free loopback port, the downward API fields get this pod's values.
fn local_args_and_env(d: &Deployment, pod_name: &str) -> (Vec<String>, Vec<(String, String)>) {
    let spec = d.spec.as_ref().expect("spec");
    let c = &spec.template.spec.as_ref().expect("pod spec").containers[0];
    let mut replaced = 0;
    let args = c
        .args
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|a| match a.split_once('=') {
            Some((flag @ "--health-addr", _)) => {
                replaced += 1;
                format!("{flag}=127.0.0.1:0")
            }
            _ => a,
        })
        .collect();
    assert_eq!(replaced, 1, "operator.yaml passes --health-addr=...");
    let namespace = d.metadata.namespace.clone().unwrap_or_default();
    let env = c
        .env
        .iter()
        .flatten()
        .map(|e| {
            let v = match (&e.value, e.value_from.as_ref().and_then(|v| v.field_ref.as_ref())) {
                (Some(v), _) => v.clone(),
                (None, Some(f)) if f.field_path == "metadata.name" => pod_name.to_string(),
                (None, Some(f)) if f.field_path == "metadata.namespace" => namespace.clone(),
                _ => panic!("operator.yaml: env {} has a source this test does not fill in: teach it", e.name),
            };
            (e.name.clone(), v)
        })
        .collect();
    (args, env)
}

/// `varroa-operator` (this crate's binary) with only what a pod would have: none of this
/// process' VARROA_* settings, log filter or POD_NAME.
fn operator_command() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_varroa-operator"));
    for (k, _) in std::env::vars() {
        if k.starts_with("VARROA_") || k == "RUST_LOG" || k == "POD_NAME" {
            cmd.env_remove(k);
        }
    }
    cmd.env("NO_COLOR", "1").stdin(Stdio::null());
    cmd
}

/// Start the operator as one replica of the Deployment.
fn spawn_operator(pod_name: &str, d: &Deployment, kubeconfig: &Path, dir: &Path) -> Proc {
    let (args, env) = local_args_and_env(d, pod_name);
    let log = dir.join(format!("{pod_name}.log"));
    let out = std::fs::File::create(&log).expect("log file");
    let err = out.try_clone().expect("log file");
    let mut cmd = operator_command();
    cmd.args(&args).envs(env).env("KUBECONFIG", kubeconfig).stdout(out).stderr(err);
    let child = cmd.spawn().expect("start varroa-operator");
    Proc { name: pod_name.to_string(), child, log }
}

fn holder(l: &Lease) -> String {
    l.spec.as_ref().and_then(|s| s.holder_identity.clone()).unwrap_or_default()
}

fn transitions(l: &Lease) -> i32 {
    l.spec.as_ref().and_then(|s| s.lease_transitions).unwrap_or(0)
}

/// Wait until the Lease's holder satisfies `ok`; on timeout, fail with the operators' logs.
async fn wait_lease(leases: &Api<Lease>, what: &str, ops: &[&Proc], ok: impl Fn(&str) -> bool) -> Lease {
    let cond = move |l: Option<&Lease>| l.is_some_and(|l| ok(&holder(l)));
    match tokio::time::timeout(WAIT, await_condition(leases.clone(), LEASE, cond)).await {
        Ok(Ok(Some(l))) => l,
        other => {
            let now = leases.get_opt(LEASE).await.ok().flatten();
            panic!("waiting for the Lease: {what}: {other:?}\nthe Lease: {now:#?}\n{}", logs(ops))
        }
    }
}

/// A Controller in team-a, as a user writes it.
fn controller_yaml(name: &str) -> String {
    format!(
        "apiVersion: varroa.dev/v1alpha1\nkind: Controller\nmetadata:\n  name: {name}\n  namespace: {TEAM}\nspec: {{}}\n"
    )
}

/// Wait until a Controller (namespace team-a) is Running for its generation; on timeout, fail
/// with its status and the operators' logs.
async fn wait_running(dc: &DevCluster, name: &str, ops: &[&Proc]) {
    let api: Api<Controller> = Api::namespaced(dc.client(), TEAM);
    let cond = |c: Option<&Controller>| {
        c.is_some_and(|c| {
            phase_of(c) == Some(ControllerPhase::Running)
                && c.status.as_ref().and_then(|s| s.observed_generation) == c.metadata.generation
        })
    };
    if !matches!(tokio::time::timeout(WAIT, await_condition(api.clone(), name, cond)).await, Ok(Ok(Some(_)))) {
        let now = api.get_opt(name).await.ok().flatten();
        panic!(
            "controller {name} is not Running: {}\n{}",
            serde_json::to_string_pretty(&now.map(|c| c.status)).unwrap_or_default(),
            logs(ops)
        );
    }
}

fn logs(ops: &[&Proc]) -> String {
    ops.iter().map(|p| format!("--- log of {} ---\n{}", p.name, p.log_text())).collect::<Vec<_>>().join("\n")
}

/// Issue 11: the install tested the way a user installs. devcluster's process runtime runs the
/// operator image as this crate's binary (`--run ghcr.io/eventide/varroa-operator*=...`), so
/// `kubectl apply -f deploy/varroa/` starts two real operators in the cluster, as their
/// ServiceAccount, with the manifest's args, env, probes and Lease; one leads and brings a
/// Controller to Running; its logs are read with `kubectl logs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_runs_the_operator_in_the_cluster_and_a_controller_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dc = DevCluster::start_with(devcluster::Options {
        nodes: 3,
        run: vec![devcluster::runtime::RunRule::new(
            "ghcr.io/eventide/varroa-operator*",
            env!("CARGO_BIN_EXE_varroa-operator"),
        )],
        ..Default::default()
    })
    .await
    .expect("devcluster starts");
    let kubectl = Kubectl { kubeconfig: dc.kubeconfig_path(), cache: dir.path().join("kube-cache") };
    let deploy_dir = repo("deploy/varroa").display().to_string();
    blocking(|| {
        kubectl.ok(&["apply", "-f", &deploy_dir]);
        kubectl.create_nats_secrets();
        let mut make_ca = operator_command().arg("gateway-ca").stdout(Stdio::piped()).spawn().expect("gateway-ca runs");
        let out = make_ca.stdout.take().expect("gateway-ca's stdout");
        kubectl.apply_stdin(Stdio::from(out));
        assert!(make_ca.wait().expect("gateway-ca ends").success(), "varroa-operator gateway-ca failed");
        // Available: both pods run the binary and answer their readiness probe (/readyz).
        kubectl.wait_available();
    });
    let pods: Api<Pod> = Api::namespaced(dc.client(), NS);
    let listed =
        pods.list(&ListParams::default().labels("app.kubernetes.io/name=varroa-operator")).await.expect("list pods");
    let names: Vec<String> = listed.items.iter().filter_map(|p| p.metadata.name.clone()).collect();
    assert_eq!(names.len(), 2, "two replicas: {names:?}");
    let leases: Api<Lease> = Api::namespaced(dc.client(), NS);
    let lease = tokio::time::timeout(
        WAIT,
        await_condition(leases.clone(), LEASE, |l: Option<&Lease>| {
            l.is_some_and(|l| names.iter().any(|n| holder(l).starts_with(&format!("{n}_"))))
        }),
    )
    .await;
    assert!(matches!(lease, Ok(Ok(Some(_)))), "no pod of the Deployment leads: {lease:?}");
    blocking(|| {
        kubectl.apply_text(WORLD);
        kubectl.apply_text(&controller_yaml("ci"));
    });
    wait_running(&dc, "ci", &[]).await;
    let logs: String =
        names.iter().map(|n| blocking(|| kubectl.ok(&["logs", "-n", NS, n.as_str()])).0).collect::<Vec<_>>().join("\n");
    assert!(logs.contains("successfully acquired lease"), "kubectl logs of the operator pods:\n{logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_installs_varroa_and_two_replicas_elect_a_leader_and_fail_over() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dc = DevCluster::start_with(devcluster::Options { nodes: 3, ..Default::default() })
        .await
        .expect("devcluster starts");
    let kubectl = Kubectl { kubeconfig: dc.kubeconfig_path(), cache: dir.path().join("kube-cache") };

    // Install, as operator.yaml says; no warning (a Pod Security or deprecation warning would show).
    let deploy_dir = repo("deploy/varroa").display().to_string();
    let (_, stderr) = blocking(|| kubectl.ok(&["apply", "-f", &deploy_dir]));
    assert!(!stderr.contains("Warning"), "kubectl apply -f deploy/varroa/ warned:\n{stderr}");
    blocking(|| kubectl.create_nats_secrets());
    blocking(|| {
        let t = format!("--timeout={}s", WAIT.as_secs());
        let crds: Vec<String> = varroa_api::crds()
            .iter()
            .map(|c| format!("crd/{}", c.metadata.name.as_deref().unwrap_or_default()))
            .collect();
        let mut args = vec!["wait", "--for=condition=Established", &t];
        args.extend(crds.iter().map(String::as_str));
        kubectl.ok(&args);
        // The pods passed Pod Security `restricted` (enforced on varroa-system) and are ready.
        kubectl.wait_available();
    });
    let pods: Api<Pod> = Api::namespaced(dc.client(), NS);
    let pods =
        pods.list(&ListParams::default().labels("app.kubernetes.io/name=varroa-operator")).await.expect("list pods");
    let nodes: BTreeSet<String> = pods.items.iter().filter_map(|p| p.spec.as_ref()?.node_name.clone()).collect();
    assert_eq!((pods.items.len(), nodes.len()), (2, 2), "two replicas, on two nodes: {nodes:?}");

    // The gateway CA for a trial, as operator.yaml says: `varroa-operator gateway-ca | kubectl apply -f -`.
    blocking(|| {
        let mut make_ca = operator_command().arg("gateway-ca").stdout(Stdio::piped()).spawn().expect("gateway-ca runs");
        let out = make_ca.stdout.take().expect("gateway-ca's stdout");
        let (stdout, _) = kubectl.apply_stdin(Stdio::from(out));
        assert!(make_ca.wait().expect("gateway-ca ends").success(), "varroa-operator gateway-ca failed");
        assert!(stdout.contains("secret/varroa-gateway-ca"), "{stdout}");
    });
    let secrets: Api<Secret> = Api::namespaced(dc.client(), NS);
    let ca = secrets.get("varroa-gateway-ca").await.expect("the gateway CA Secret");
    assert_eq!(ca.type_.as_deref(), Some("kubernetes.io/tls"));

    // Two replicas, run here with the Deployment's args and env, as its ServiceAccount.
    let d = manifest_deployment();
    let sa_kubeconfig = dir.path().join("operator.kubeconfig");
    service_account_kubeconfig(&dc, &sa_kubeconfig).await;
    let a = spawn_operator("varroa-operator-a", &d, &sa_kubeconfig, dir.path());
    let b = spawn_operator("varroa-operator-b", &d, &sa_kubeconfig, dir.path());
    let leases: Api<Lease> = Api::namespaced(dc.client(), NS);
    let lease = wait_lease(&leases, "held by one of the replicas", &[&a, &b], |h| {
        h.starts_with("varroa-operator-a_") || h.starts_with("varroa-operator-b_")
    })
    .await;
    let (mut leader, follower) = if holder(&lease).starts_with("varroa-operator-a_") { (a, b) } else { (b, a) };

    // The leader brings a Controller to Running (a profile, defaults naming it, a namespace).
    blocking(|| {
        kubectl.apply_text(WORLD);
        kubectl.apply_text(&controller_yaml("ci"));
    });
    wait_running(&dc, "ci", &[&leader, &follower]).await;

    // Only one leads: the Lease names it, it alone reconciled; the standby is ready but idle.
    let lease = leases.get(LEASE).await.expect("the Lease");
    assert!(holder(&lease).starts_with(&format!("{}_", leader.name)), "the Lease moved: {lease:#?}");
    blocking(|| {
        let (leader_addr, follower_addr) = (leader.health_addr(), follower.health_addr());
        for (p, addr) in [(&leader, &leader_addr), (&follower, &follower_addr)] {
            assert_eq!(http_get(addr, "/readyz").0, 200, "{} is ready (a standby too)", p.name);
            assert_eq!(http_get(addr, "/healthz").0, 200, "{} is live", p.name);
        }
        let (_, m) = http_get(&leader_addr, "/metrics");
        assert!(counter(&m, "varroa_reconciles_total") > 0.0, "the leader reconciled:\n{m}");
        let (_, m) = http_get(&follower_addr, "/metrics");
        assert_eq!(counter(&m, "varroa_reconciles_total"), 0.0, "the standby reconciled:\n{m}");
    });
    let (leader_log, follower_log) = (leader.log_text(), follower.log_text());
    assert!(leader_log.contains("successfully acquired lease"), "{}", logs(&[&leader]));
    assert!(follower_log.contains("waiting for the leader lease"), "{}", logs(&[&follower]));
    assert!(!follower_log.contains("successfully acquired lease"), "two leaders:\n{}", logs(&[&leader, &follower]));

    // Stop the leader as the kubelet does: it stops, releases the Lease, exits 0; the standby
    // takes over and brings the next Controller to Running.
    let before = transitions(&lease);
    leader.terminate();
    let status = blocking(|| leader.wait_exit(WAIT));
    assert!(status.success(), "the leader exits 0 on SIGTERM: {status}\n{}", logs(&[&leader]));
    assert!(
        leader.log_text().contains("released the lease"),
        "the leader releases the Lease on SIGTERM:\n{}",
        logs(&[&leader])
    );
    let prefix = format!("{}_", follower.name);
    let lease =
        wait_lease(&leases, "taken over by the standby", &[&leader, &follower], |h| h.starts_with(&prefix)).await;
    assert!(
        transitions(&lease) > before,
        "leaseTransitions counts the takeover: {before} then {}",
        transitions(&lease)
    );
    blocking(|| kubectl.apply_text(&controller_yaml("ci-2")));
    wait_running(&dc, "ci-2", &[&leader, &follower]).await;
    wait_running(&dc, "ci", &[&leader, &follower]).await;
    assert!(follower.log_text().contains("successfully acquired lease"), "{}", logs(&[&follower]));
    blocking(|| {
        let (_, m) = http_get(&follower.health_addr(), "/metrics");
        assert!(counter(&m, "varroa_reconciles_total") > 0.0, "the new leader reconciles:\n{m}");
    });
    drop(follower);
    drop(leader);
}
