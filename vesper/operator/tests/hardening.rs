//! Issue 10, items 2 and 5 (first bullet), checked as a user would:
//!
//! - a preview's NetworkPolicy denies the cluster's pods and Services, the private, link-local
//!   and metadata ranges, keeps DNS and the internet, and opens `--allow-egress-cidrs` back
//!   (with the cluster's own ranges still denied inside); its LimitRange, quota and Deployment
//!   bound ephemeral storage; on devcluster, as the operator's ServiceAccount;
//! - quantities are exact: `1e3`-style, `100u` and fractional binary values are served, and an
//!   unchanged reconcile of them writes nothing (the operator writes the server's spelling);
//! - a quantity Kubernetes refuses fails the preview (`InvalidSpec`, the field named), and a
//!   fixed spec brings it back;
//! - the real binary refuses a bad CIDR or quantity flag at start-up, naming the flag.

mod support;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{LimitRange, ResourceQuota};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::ResourceExt;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::process::Command;
use support::*;
use vesper_api::Phase;

const IMAGE: &str = "registry.example.com/app:pr-1";

fn to_json(o: &impl serde::Serialize) -> Value {
    serde_json::to_value(o).expect("json")
}

fn cidrs(s: &str) -> vesper_operator::cidr::CidrList {
    s.parse().expect("cidrs")
}

fn quantity(s: &str) -> k8s_quantity::Quantity {
    vesper_operator::config::parse_quantity(s).expect("a quantity")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preview_is_isolated_from_the_cluster_and_bounded_on_disk() {
    let cfg = vesper_operator::Config {
        cluster_service_cidrs: cidrs("10.96.0.0/12"),
        allow_egress_cidrs: cidrs("10.0.0.0/8,192.168.1.0/24"),
        deny_egress_cidrs: cidrs("198.51.100.0/24"),
        tmp_size_limit: quantity("0.5Gi"),
        ..config()
    };
    let env = Env::start(cfg).await;
    env.create("pr-h1", json!({"image": IMAGE})).await;
    env.wait_ready("pr-h1").await;
    let ns = env.ns_of("pr-h1");

    // devcluster: nodes 10.0.0.1/203.0.113.1 and 10.0.0.2/203.0.113.2 with pod ranges
    // 10.244.0.0/24 and 10.244.1.0/24 (discovered from Node.spec.podCIDRs); the API server at
    // 127.0.0.1.
    let np: NetworkPolicy = env.obj(&ns, "preview-isolation").await;
    let egress = to_json(&np.spec)["egress"].clone();
    assert_eq!(
        egress,
        json!([
            {"to": [{"podSelector": {}}]},
            {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                     "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
             "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
            {"to": [
                {"ipBlock": {"cidr": "0.0.0.0/0", "except": [
                    "10.0.0.0/8", "100.64.0.0/10", "127.0.0.1/32", "169.254.0.0/16", "172.16.0.0/12",
                    "192.168.0.0/16", "198.51.100.0/24", "203.0.113.1/32", "203.0.113.2/32"]}},
                {"ipBlock": {"cidr": "::/0", "except": ["fc00::/7", "fe80::/10"]}},
            ]},
            {"to": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": [
                "10.0.0.1/32", "10.0.0.2/32", "10.96.0.0/12", "10.244.0.0/24", "10.244.1.0/24"]}}]},
            {"to": [{"ipBlock": {"cidr": "192.168.1.0/24"}}]},
        ]),
        "{egress:#}"
    );

    let lr: LimitRange = env.obj(&ns, "preview").await;
    let item = to_json(&lr.spec)["limits"][0].clone();
    assert_eq!(item["default"]["ephemeral-storage"], "1Gi");
    assert_eq!(item["defaultRequest"]["ephemeral-storage"], "64Mi");
    assert_eq!(item["max"]["ephemeral-storage"], "2Gi");

    let q: ResourceQuota = env.obj(&ns, "preview").await;
    let hard = q.spec.and_then(|s| s.hard).unwrap_or_default();
    // One replica: 3 pods of 64Mi requested, 1Gi limit.
    assert_eq!(hard.get("requests.ephemeral-storage").map(|q| q.0.as_str()), Some("192Mi"));
    assert_eq!(hard.get("limits.ephemeral-storage").map(|q| q.0.as_str()), Some("3Gi"));

    let d: Deployment = env.obj(&ns, "app").await;
    let pod = to_json(&d.spec.and_then(|s| s.template.spec));
    assert_eq!(pod["volumes"], json!([{"name": "tmp", "emptyDir": {"sizeLimit": "512Mi"}}]));
    assert_eq!(pod["containers"][0]["resources"]["limits"]["ephemeral-storage"], "1Gi");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_quantities_are_served_and_an_unchanged_reconcile_writes_nothing() {
    let env = Env::start(config()).await;
    // Each of these is a valid Kubernetes quantity the old float parser refused or rounded.
    let resources = json!({
        "requests": {"cpu": "100u", "memory": "1e8", "ephemeral-storage": "0.1Gi"},
        "limits": {"cpu": "0.5", "memory": "0.25Gi", "ephemeral-storage": "1e9"},
    });
    env.create("pr-h2", json!({"image": IMAGE, "resources": resources})).await;
    env.wait_ready("pr-h2").await;
    let ns = env.ns_of("pr-h2");
    let d: Deployment = env.obj(&ns, "app").await;
    let c = to_json(&d.spec.and_then(|s| s.template.spec).map(|p| p.containers[0].clone()));
    assert_eq!(
        c["resources"],
        json!({"requests": {"cpu": "1m", "ephemeral-storage": "107374182400m", "memory": "100e6"},
               "limits": {"cpu": "500m", "ephemeral-storage": "1e9", "memory": "256Mi"}})
    );
    let q: ResourceQuota = env.obj(&ns, "preview").await;
    let hard: BTreeMap<String, String> =
        q.spec.and_then(|s| s.hard).unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect();
    assert_eq!(hard["requests.cpu"], "3m");
    assert_eq!(hard["limits.cpu"], "1500m");
    assert_eq!(hard["requests.memory"], "300e6");
    assert_eq!(hard["limits.memory"], "768Mi");
    assert_eq!(hard["limits.ephemeral-storage"], "3e9");

    // Touch it twice: nothing is written.
    let m = env.metrics();
    let versions = || async {
        let q: ResourceQuota = env.obj(&ns, "preview").await;
        let l: LimitRange = env.obj(&ns, "preview").await;
        let p: NetworkPolicy = env.obj(&ns, "preview-isolation").await;
        let d: Deployment = env.obj(&ns, "app").await;
        [q.resource_version(), l.resource_version(), p.resource_version(), d.resource_version()]
    };
    env.settle("pr-h2").await;
    let before = versions().await;
    let writes = m.writes.writes();
    // Nor read: every object comes from the operator's watch caches (ADR-0009).
    let sent = |m: &vesper_operator::metrics::Metrics| {
        ["get", "list", "create", "update", "patch", "delete"].map(|v| (v, m.requests.total(v)))
    };
    let requests = sent(&m);
    env.settle("pr-h2").await;
    assert_eq!(m.writes.writes(), writes, "writes counted by the operator");
    assert_eq!(versions().await, before, "objects were written");
    assert_eq!(sent(&m), requests, "requests sent by reconciles that change nothing");
    assert!(requests[0].1 > 0, "the operator's requests are counted: {requests:?}");
    assert_eq!(reconciles_failed(&m), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quantity_kubernetes_refuses_fails_the_preview_naming_the_field() {
    let env = Env::start(config()).await;
    env.create("pr-h3", json!({"image": IMAGE, "resources": {"limits": {"memory": "2 gigs"}}})).await;
    let pe = env
        .wait_pe("pr-h3", "Failed with InvalidSpec", |pe| {
            phase_of(pe) == Some(Phase::Failed) && cond(pe, "Ready").1 == "InvalidSpec"
        })
        .await;
    let ready = condition(&pe, "Ready").expect("Ready").clone();
    assert!(
        ready.message.contains("spec.resources.limits.memory") && ready.message.contains("2 gigs"),
        "{}",
        ready.message
    );
    env.wait_event("pr-h3", "InvalidSpec", "Warning").await;
    // No Deployment was made for it.
    let deployments: kube::Api<Deployment> = kube::Api::namespaced(env.admin.clone(), &env.ns_of("pr-h3"));
    assert!(deployments.get_opt("app").await.expect("get").is_none());
    // Retries of the same spec change nothing more: the same status, no new event.
    let events = env.events_of("pr-h3").await.len();
    env.settle("pr-h3").await;
    assert_eq!(env.get("pr-h3").await.status, pe.status, "the status is unchanged");
    assert_eq!(env.events_of("pr-h3").await.len(), events, "no new event");

    // Fixed: it starts.
    env.patch_spec("pr-h3", json!({"resources": {"limits": {"memory": "256Mi"}}})).await;
    env.wait_ready("pr-h3").await;
}

#[test]
fn the_binary_refuses_a_bad_cidr_or_quantity_flag_naming_it() {
    let bin = env!("CARGO_BIN_EXE_vesper-operator");
    // (args, environment, the flag named, the value named)
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str, &'a str);
    let cases: [Case; 6] = [
        (&["--allow-egress-cidrs=10.0.0.0/8,10.0.0.0/33"], &[], "--allow-egress-cidrs", "10.0.0.0/33"),
        (&["--cluster-pod-cidrs=10.244.0.0"], &[], "--cluster-pod-cidrs", "10.244.0.0"),
        (&["--cluster-service-cidrs=fd00::/129"], &[], "--cluster-service-cidrs", "fd00::/129"),
        (&[], &[("VESPER_DENY_EGRESS_CIDRS", "nope/8")], "--deny-egress-cidrs", "nope/8"),
        (&["--quota-max-memory=12 GiB"], &[], "--quota-max-memory", "12 GiB"),
        (&["--tmp-size-limit=lots"], &[], "--tmp-size-limit", "lots"),
    ];
    for (args, envs, flag, value) in cases {
        let out = Command::new(bin)
            .args(args)
            .envs(envs.iter().copied())
            .env("KUBECONFIG", "/nonexistent/kubeconfig")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .output()
            .expect("the operator runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} {envs:?}: exited successfully");
        assert_eq!(out.status.code(), Some(2), "{args:?}: a usage error\n{stderr}");
        assert!(stderr.contains(flag) && stderr.contains(value), "{args:?} {envs:?}: {stderr}");
        assert!(!stderr.contains("connecting to the Kubernetes API"), "refused before connecting: {stderr}");
    }
    // Valid exact quantities and CIDRs pass the flags (and the binary goes on to connect).
    let out = Command::new(bin)
        .args(["--quota-max-cpu=1e3", "--default-cpu-request=100u", "--allow-egress-cidrs=169.254.20.10/32"])
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .expect("the operator runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("connecting to the Kubernetes API"), "{stderr}");
}
