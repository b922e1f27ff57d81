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
use k8s_openapi::api::core::v1::{Pod, Secret, ServiceAccount};
use kube::api::{Api, ListParams};
use optest::install::{
    Expect, check_build_context, check_deployment, check_documents, check_namespace, check_service_and_pdb,
};
use optest::kubectl::Kubectl;
use optest::manifests::{find, typed, yaml_file};
use optest::process::{Proc, Spawn, logs};
use optest::read;
use optest::replicas::{Replicas, Turn};
use std::collections::BTreeSet;
use std::path::Path;
use support::{TEAM, WORLD, phase_of, repo};
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
    // Every document of deploy/varroa/ is an object with a kind; only the Namespace repeats; in
    // kubectl's name order, everything comes after what it needs.
    check_documents("deploy/varroa");
    let files = optest::manifests::files("deploy/varroa");
    let pos = |f: &str| files.iter().position(|x| x == f).unwrap_or_else(|| panic!("{f} missing: {files:?}"));
    assert!(
        pos("deploy/varroa/operator-rbac.yaml") < pos("deploy/varroa/operator.yaml"),
        "kubectl's name order: {files:?}"
    );

    let op = yaml_file("deploy/varroa/operator.yaml");
    let rbac = yaml_file("deploy/varroa/operator-rbac.yaml");
    let ns = check_namespace("deploy/varroa", &op, &rbac);
    assert_eq!(ns.metadata.name.as_deref(), Some(NS));

    // The Deployment: what both operators' Deployments hold...
    let what = "deploy/varroa/operator.yaml Deployment";
    let d = manifest_deployment();
    let expect = Expect { namespace: NS, service_account: SA, image: IMAGE, shutdown_secs: OPERATOR_SHUTDOWN_SECS };
    let c = check_deployment(what, &d, &expect);
    let pod = d.spec.as_ref().and_then(|s| s.template.spec.as_ref()).expect("pod spec");
    let rbac_sa: ServiceAccount =
        typed("operator-rbac.yaml ServiceAccount", find("operator-rbac.yaml", &rbac, "ServiceAccount"));
    assert_eq!(rbac_sa.metadata.name.as_deref(), Some(SA));

    // ...and the rest of Pod Security `restricted`: the pod...
    for (field, set) in [("hostNetwork", pod.host_network), ("hostPID", pod.host_pid), ("hostIPC", pod.host_ipc)] {
        assert_ne!(set, Some(true), "{what}: {field}");
    }
    let psc = pod.security_context.clone().unwrap_or_default();
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
    // ...and its container.
    let sc = c.security_context.clone().unwrap_or_default();
    assert_eq!(sc.run_as_group, psc.run_as_group, "{what}: container and pod runAsGroup");
    assert_eq!(sc.proc_mount, None, "{what}: procMount");
    assert!(c.ports.iter().flatten().all(|p| p.host_port.is_none()), "{what}: hostPort");

    // A read-only root filesystem (checked above), with an emptyDir at /tmp for the Git fetches'
    // temporary directories (varroa-sources' Fetcher without a cache directory).
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
    let args = c.args.clone().unwrap_or_default();
    let cfg = parse_flags(&args).unwrap_or_else(|e| panic!("{what}: the operator refuses its args {args:?}:\n{e}"));
    cfg.validate().unwrap_or_else(|e| panic!("{what}: the operator would stop at start with its args {args:?}: {e}"));
    assert!(cfg.leader_elect, "{what}: two replicas need --leader-elect=true");
    assert_eq!(
        cfg.leader_election_namespace, NS,
        "{what}: the Lease lives where operator-rbac.yaml's Role grants Leases"
    );
    let role = find("operator-rbac.yaml", &rbac, "Role");
    assert_eq!(role["metadata"]["namespace"], NS, "operator-rbac.yaml: the leader election Role");
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

    // The Service (metrics, served on the health port) and the PDB select the pods.
    let (svc, pdb) = check_service_and_pdb(&op, &d, "health");
    assert_eq!(svc.metadata.namespace.as_deref(), Some(NS));
    assert_eq!(pdb.metadata.namespace.as_deref(), Some(NS));

    // The image: built by the Dockerfile from the repository root, the binary varroa-operator
    // (this crate's, CARGO_BIN_EXE_varroa-operator), run as the user of the security contexts.
    assert!(Path::new(env!("CARGO_BIN_EXE_varroa-operator")).is_file(), "the binary is named varroa-operator");
    check_build_context();
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
}

// ---------------------------------------------------------------------------------------------
// Processes

/// The NATS credentials Secrets of the operator, the gateway and the recorder, made the way
/// deploy/varroa/nats.yaml tells a user to.
async fn create_nats_secrets(kubectl: &Kubectl) {
    for c in ["operator", "gateway", "recorder"] {
        let password = format!("{c}-{}", std::process::id());
        let credentials = format!("--from-literal=credentials=user=varroa-{c}\npassword={password}\n");
        let name = format!("varroa-nats-{c}");
        let literal = format!("--from-literal=password={password}");
        kubectl.ok(&["-n", NS, "create", "secret", "generic", &name, &literal, &credentials]).await;
    }
}

/// The gateway CA for a trial, as operator.yaml says: `varroa-operator gateway-ca | kubectl apply
/// -f -` (this crate's binary, with only what a pod would have). Returns kubectl's stdout.
async fn apply_gateway_ca(kubectl: &Kubectl) -> String {
    let ca = Spawn::new(env!("CARGO_BIN_EXE_varroa-operator"), "varroa-operator gateway-ca")
        .clear_env("VARROA_")
        .arg("gateway-ca")
        .output()
        .await;
    kubectl.apply_text(&ca).await.stdout
}

/// Wait until the operator's and the gateway's Deployments are Available.
async fn wait_available(kubectl: &Kubectl) {
    kubectl.wait_available(NS, &["deployment/varroa-operator", "deployment/varroa-gateway"]).await;
}

/// Start the operator as one replica of the Deployment, with the credentials of `kubeconfig`.
fn spawn_operator(pod_name: &str, d: &Deployment, kubeconfig: &Path) -> Proc {
    Spawn::new(env!("CARGO_BIN_EXE_varroa-operator"), pod_name)
        .pod(d, &["--health-addr"])
        .clear_env("VARROA_")
        .kubeconfig(kubeconfig)
        .spawn()
}

/// The operator's leader election in varroa-system.
fn replicas(dc: &DevCluster) -> Replicas {
    Replicas::new(dc.client(), NS, LEASE, "varroa_reconciles_total")
}

/// A Controller in team-a, as a user writes it.
fn controller_yaml(name: &str) -> String {
    format!(
        "apiVersion: varroa.dev/v1alpha1\nkind: Controller\nmetadata:\n  name: {name}\n  namespace: {TEAM}\nspec: {{}}\n"
    )
}

/// `kubectl apply -f -` of a Controller named `name`, then wait until it is Running.
async fn serve_controller(dc: &DevCluster, kubectl: &Kubectl, name: &str, ops: &[&Proc]) {
    kubectl.apply_text(&controller_yaml(name)).await;
    wait_running(dc, name, ops).await;
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
    optest::wait::wait_for_explained(api, name, "controller Running", cond, |now| {
        format!("{}\n{}", serde_json::to_string_pretty(&now.map(|c| c.status)).unwrap_or_default(), logs(ops))
    })
    .await;
}

/// Issue 11: the install tested the way a user installs. devcluster's process runtime runs the
/// operator image as this crate's binary (`--run ghcr.io/eventide/varroa-operator*=...`), so
/// `kubectl apply -f deploy/varroa/` starts two real operators in the cluster, as their
/// ServiceAccount, with the manifest's args, env, probes and Lease; one leads and brings a
/// Controller to Running; its logs are read with `kubectl logs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_runs_the_operator_in_the_cluster_and_a_controller_runs() {
    let dc = optest::cluster::start(devcluster::Options {
        nodes: 3,
        run: vec![devcluster::runtime::RunRule::new(
            "ghcr.io/eventide/varroa-operator*",
            env!("CARGO_BIN_EXE_varroa-operator"),
        )],
        ..Default::default()
    })
    .await;
    let kubectl = Kubectl::new(dc.kubeconfig_path());
    let deploy_dir = repo("deploy/varroa").display().to_string();
    kubectl.ok(&["apply", "-f", &deploy_dir]).await;
    create_nats_secrets(&kubectl).await;
    apply_gateway_ca(&kubectl).await;
    // Available: both pods run the binary and answer their readiness probe (/readyz).
    wait_available(&kubectl).await;
    replicas(&dc)
        .a_pod_leads(&kubectl, "varroa-operator", async || {
            kubectl.apply_text(WORLD).await;
            serve_controller(&dc, &kubectl, "ci", &[]).await;
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_installs_varroa_and_two_replicas_elect_a_leader_and_fail_over() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dc = optest::cluster::start(devcluster::Options { nodes: 3, ..Default::default() }).await;
    let kubectl = Kubectl::new(dc.kubeconfig_path());

    // Install, as operator.yaml says; no warning (a Pod Security or deprecation warning would show).
    let deploy_dir = repo("deploy/varroa").display().to_string();
    let stderr = kubectl.ok(&["apply", "-f", &deploy_dir]).await.stderr;
    assert!(!stderr.contains("Warning"), "kubectl apply -f deploy/varroa/ warned:\n{stderr}");
    create_nats_secrets(&kubectl).await;
    let crds: Vec<String> =
        varroa_api::crds().iter().map(|c| format!("crd/{}", c.metadata.name.as_deref().unwrap_or_default())).collect();
    kubectl.wait_established(&crds.iter().map(String::as_str).collect::<Vec<_>>()).await;
    // The pods passed Pod Security `restricted` (enforced on varroa-system) and are ready.
    wait_available(&kubectl).await;
    let pods: Api<Pod> = Api::namespaced(dc.client(), NS);
    let pods =
        pods.list(&ListParams::default().labels("app.kubernetes.io/name=varroa-operator")).await.expect("list pods");
    let nodes: BTreeSet<String> = pods.items.iter().filter_map(|p| p.spec.as_ref()?.node_name.clone()).collect();
    assert_eq!((pods.items.len(), nodes.len()), (2, 2), "two replicas, on two nodes: {nodes:?}");

    // The gateway CA for a trial, as operator.yaml says: `varroa-operator gateway-ca | kubectl apply -f -`.
    let stdout = apply_gateway_ca(&kubectl).await;
    assert!(stdout.contains("secret/varroa-gateway-ca"), "{stdout}");
    let secrets: Api<Secret> = Api::namespaced(dc.client(), NS);
    let ca = secrets.get("varroa-gateway-ca").await.expect("the gateway CA Secret");
    assert_eq!(ca.type_.as_deref(), Some("kubernetes.io/tls"));

    // Two replicas, run here with the Deployment's args and env, as its ServiceAccount.
    let d = manifest_deployment();
    let sa_kubeconfig = dir.path().join("operator.kubeconfig");
    optest::service_account::write_kubeconfig(&dc, NS, SA, &sa_kubeconfig).await;
    let a = spawn_operator("varroa-operator-a", &d, &sa_kubeconfig);
    let b = spawn_operator("varroa-operator-b", &d, &sa_kubeconfig);
    // One leads and brings a Controller to Running (a profile, defaults naming it, a namespace);
    // when it gets SIGTERM it exits 0, the other takes over and brings the next to Running.
    replicas(&dc)
        .elect_and_fail_over(a, b, async |turn, ops| match turn {
            Turn::Leader => {
                kubectl.apply_text(WORLD).await;
                serve_controller(&dc, &kubectl, "ci", ops).await;
            }
            Turn::AfterTakeover => {
                serve_controller(&dc, &kubectl, "ci-2", ops).await;
                wait_running(&dc, "ci", ops).await;
            }
        })
        .await;
}
