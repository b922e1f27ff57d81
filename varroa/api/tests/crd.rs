//! The Varroa CRDs: checked in without drift, applied to a real API server (devcluster) with
//! kubectl, and refusing invalid objects with messages that say what is allowed.

use devcluster::DevCluster;
use std::path::PathBuf;
use std::process::{Command, Output};

fn checked_in() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/varroa/crds.yaml")
}

/// The generated CRDs and deploy/varroa/crds.yaml agree. `UPDATE_CRDS=1 cargo test` rewrites it.
#[test]
fn checked_in_crds_have_not_drifted() {
    let generated = varroa_api::crd_yaml();
    if std::env::var("UPDATE_CRDS").is_ok_and(|v| v == "1") {
        std::fs::write(checked_in(), &generated).expect("write deploy/varroa/crds.yaml");
    }
    let on_disk = std::fs::read_to_string(checked_in()).unwrap_or_default();
    assert!(
        on_disk == generated,
        "deploy/varroa/crds.yaml differs from the types in varroa/api: run `UPDATE_CRDS=1 cargo test -p varroa-api --test crd` and commit the result"
    );
}

fn kubectl(dc: &DevCluster, args: &[&str], stdin: Option<&str>) -> Output {
    use std::io::Write;
    let mut cmd = Command::new("kubectl");
    cmd.env("KUBECONFIG", dc.kubeconfig_path()).args(args);
    cmd.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("kubectl runs");
    if let Some(input) = stdin {
        child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("write stdin");
    }
    drop(child.stdin.take());
    child.wait_with_output().expect("kubectl output")
}

fn ok(out: Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{what}: {}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    stdout
}

async fn installed() -> DevCluster {
    let dc = DevCluster::start().await.expect("devcluster");
    let path = checked_in();
    let out = tokio::task::block_in_place(|| kubectl(&dc, &["apply", "-f", path.to_str().unwrap()], None));
    let stdout = ok(out, "kubectl apply -f deploy/varroa/crds.yaml");
    assert_eq!(stdout.lines().filter(|l| l.ends_with(" created")).count(), 13, "{stdout}");
    let out = tokio::task::block_in_place(|| {
        kubectl(&dc, &["wait", "--for=condition=Established", "crd", "-l", "", "--all", "--timeout=20s"], None)
    });
    ok(out, "kubectl wait established");
    dc
}

/// Applies `yaml` and returns kubectl's refusal (stderr), failing when it was accepted.
fn refused(dc: &DevCluster, yaml: &str) -> String {
    let out = kubectl(dc, &["apply", "-f", "-"], Some(yaml));
    assert!(!out.status.success(), "accepted, but should be refused:\n{yaml}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_crd_applies_and_valid_examples_are_accepted() {
    let dc = installed().await;
    let examples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/varroa/examples");
    let out = tokio::task::block_in_place(|| {
        kubectl(&dc, &["apply", "--server-side", "--validate=strict", "-f", examples.to_str().unwrap()], None)
    });
    let stdout = ok(out, "kubectl apply -f docs/varroa/examples");
    assert!(stdout.contains("controller.varroa.dev/"), "{stdout}");
    // Every kind is listed through its short name and category.
    let out = tokio::task::block_in_place(|| kubectl(&dc, &["get", "varroa", "-A", "-o", "name"], None));
    let listed = ok(out, "kubectl get varroa");
    for kind in ["controller.varroa.dev/", "composedbundle.varroa.dev/", "jenkinsversionprofile.varroa.dev/"] {
        assert!(listed.contains(kind), "{kind} missing from `kubectl get varroa`:\n{listed}");
    }
    // Printer columns.
    let out = tokio::task::block_in_place(|| kubectl(&dc, &["get", "jvp"], None));
    let table = ok(out, "kubectl get jvp");
    assert!(table.starts_with("NAME") && table.contains("JENKINS") && table.contains("IMAGE"), "{table}");
    // Field docs reach kubectl explain.
    let out = tokio::task::block_in_place(|| kubectl(&dc, &["explain", "controller.spec.versionProfile"], None));
    let doc = ok(out, "kubectl explain");
    assert!(doc.contains("JenkinsVersionProfile"), "{doc}");
    let out = tokio::task::block_in_place(|| kubectl(&dc, &["explain", "controller.spec"], None));
    let doc = ok(out, "kubectl explain controller.spec");
    for field in [
        "className",
        "composedBundleRef",
        "plugins",
        "powerState",
        "cells",
        "hibernation",
        "ingress",
        "storage",
        "claims",
    ] {
        assert!(doc.contains(field), "kubectl explain controller.spec lacks {field}:\n{doc}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_objects_are_refused_with_what_is_allowed() {
    let dc = installed().await;
    let cases: &[(&str, &str)] = &[
        (
            "apiVersion: varroa.dev/v1alpha1\nkind: ComposedBundle\nmetadata: {name: two, namespace: default}\nspec:\n  inputs:\n  - catalogItem: {name: a}\n    oci: {ref: 'ghcr.io/acme/casc:v1'}\n",
            "each input sets exactly one of catalogItem, git or oci",
        ),
        (
            "apiVersion: varroa.dev/v1alpha1\nkind: ComposedBundle\nmetadata: {name: none, namespace: default}\nspec:\n  inputs:\n  - {}\n",
            "each input sets exactly one of catalogItem, git or oci",
        ),
        (
            "apiVersion: varroa.dev/v1alpha1\nkind: ComposedBundle\nmetadata: {name: badref, namespace: default}\nspec:\n  inputs:\n  - oci: {ref: 'casc'}\n",
            "ref must be registry/repository:tag or registry/repository@sha256:<64 hex digits>",
        ),
        (
            "apiVersion: varroa.dev/v1alpha1\nkind: ComposedBundle\nmetadata: {name: escape, namespace: default}\nspec:\n  inputs:\n  - git: {url: 'https://example.com/x.git', ref: main, path: '../secrets'}\n",
            "path is relative to the repository root and may not contain '..'",
        ),
        (
            "apiVersion: varroa.dev/v1alpha1\nkind: ProvisioningDefaults\nmetadata: {name: mine}\nspec: {}\n",
            "ProvisioningDefaults is a singleton: name it default",
        ),
        (
            "apiVersion: varroa.dev/v1alpha1\nkind: JenkinsVersionProfile\nmetadata: {name: latest}\nspec: {jenkinsVersion: '2.479.3', image: 'jenkins/jenkins:latest'}\n",
            "image must be pinned by a tag or a digest (not :latest)",
        ),
        (
            "apiVersion: varroa.dev/v1alpha1\nkind: JenkinsVersionProfile\nmetadata: {name: bare}\nspec: {jenkinsVersion: '2.479.3', image: 'jenkins/jenkins'}\n",
            "image must be pinned by a tag or a digest",
        ),
        (
            "apiVersion: varroa.dev/v1alpha1\nkind: JenkinsVersionProfile\nmetadata: {name: badsha}\nspec:\n  jenkinsVersion: '2.479.3'\n  image: 'jenkins/jenkins:2.479.3-lts'\n  plugins:\n  - {name: git, version: '5.7.0', sha256: 'abc'}\n",
            "spec.plugins[0].sha256",
        ),
        (
            "apiVersion: varroa.dev/v1alpha1\nkind: JenkinsRole\nmetadata: {name: item-no-pattern}\nspec: {scope: Item, permissions: [Job/Build]}\n",
            "pattern is required with scope Item and not allowed with scope Global",
        ),
        (
            "apiVersion: varroa.dev/v1alpha1\nkind: JenkinsRole\nmetadata: {name: badperm}\nspec: {permissions: [build]}\n",
            "permissions are Jenkins permission IDs written Group/Name",
        ),
        (
            "apiVersion: varroa.dev/v1alpha1\nkind: VarroaRole\nmetadata: {name: badverb}\nspec:\n  rules:\n  - {verbs: [destroy], resources: [controllers]}\n",
            "verbs may be get, list, watch, start, stop, restart, update or *",
        ),
        (
            "apiVersion: varroa.dev/v1alpha1\nkind: Controller\nmetadata: {name: many, namespace: default}\nspec: {cells: 40}\n",
            "spec.cells",
        ),
        (
            "apiVersion: varroa.dev/v1alpha1\nkind: Controller\nmetadata: {name: power, namespace: default}\nspec: {powerState: Off}\n",
            "supported values: \"Running\", \"Stopped\"",
        ),
        (
            "apiVersion: varroa.dev/v1alpha1\nkind: Controller\nmetadata: {name: idle, namespace: default}\nspec: {hibernation: {idleAfter: 'soon'}}\n",
            "spec.hibernation.idleAfter",
        ),
        (
            "apiVersion: varroa.dev/v1alpha1\nkind: ControllerClass\nmetadata: {name: open}\nspec: {claims: {whenLedgerDown: open}}\n",
            "spec.claims.whenLedgerDown: Unsupported value: \"open\": supported values: \"failClosed\", \"failOpen\"",
        ),
        (
            "apiVersion: varroa.dev/v1alpha1\nkind: Controller\nmetadata: {name: dup, namespace: default}\nspec:\n  plugins:\n  - {name: git, version: '1'}\n  - {name: git, version: '2'}\n",
            "Duplicate value",
        ),
        (
            "apiVersion: varroa.dev/v1alpha1\nkind: CatalogSource\nmetadata: {name: both, namespace: default}\nspec:\n  git: {url: 'https://example.com/x.git', ref: main}\n  oci: {ref: 'ghcr.io/acme/catalog:v1'}\n",
            "a catalog source sets exactly one of git or oci",
        ),
    ];
    for (yaml, expected) in cases {
        let msg = tokio::task::block_in_place(|| refused(&dc, yaml));
        assert!(msg.contains(expected), "expected {expected:?} in the refusal of\n{yaml}\ngot: {msg}");
    }
}
