//! A devcluster with Varroa's CRDs (deploy/varroa/crds.yaml, installed with kubectl) and no
//! operator: tests write Controller statuses themselves, as the operator would, and run the
//! built `varroa` binary against the cluster through a kubeconfig, as a user runs it.

#![allow(dead_code)]

pub use clikit::testing::{Run, run_command};
use devcluster::DevCluster;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use varroa_api::Controller;

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_varroa"))
}

fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").join(path)
}

/// Whitespace squeezed to single spaces, for matching table lines whatever the column widths.
pub fn squeeze(text: &str) -> String {
    text.lines().map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")).collect::<Vec<_>>().join("\n")
}

/// A kubectl-style table as rows of header -> cell, cut at the header's column starts (so an
/// empty cell reads as "").
pub fn rows(table: &str) -> Vec<BTreeMap<String, String>> {
    let mut lines = table.lines();
    let header = lines.next().unwrap_or_default();
    let mut starts = vec![];
    let mut prev_space = true;
    for (i, ch) in header.char_indices() {
        if ch != ' ' && prev_space {
            starts.push(i);
        }
        prev_space = ch == ' ';
    }
    let names: Vec<String> = header.split_whitespace().map(String::from).collect();
    lines
        .map(|line| {
            names
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    let from = starts[i].min(line.len());
                    let to = starts.get(i + 1).copied().unwrap_or(line.len()).min(line.len());
                    (name.clone(), line[from..to].trim().to_string())
                })
                .collect()
        })
        .collect()
}

/// A condition as the operator writes it.
pub fn cond(type_: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({"type": type_, "status": status, "reason": reason, "message": message,
           "lastTransitionTime": jiff::Timestamp::now().to_string()})
}

pub struct Cluster {
    pub dc: DevCluster,
}

impl Cluster {
    /// A devcluster with deploy/varroa/crds.yaml applied and established.
    pub async fn start() -> Cluster {
        let dc = DevCluster::start().await.expect("devcluster");
        let c = Cluster { dc };
        let crds = repo("deploy/varroa/crds.yaml");
        c.kubectl(&["apply", "-f", crds.to_str().expect("utf-8 path")]).await.expect(0);
        c.kubectl(&["wait", "--for=condition=Established", "crd", "--all", "--timeout=20s"]).await.expect(0);
        c
    }

    /// `kubectl apply` the objects of docs/varroa/examples.
    pub async fn apply_examples(&self) {
        let dir = repo("docs/varroa/examples");
        self.kubectl(&["apply", "--server-side", "-f", dir.to_str().expect("utf-8 path")]).await.expect(0);
    }

    pub async fn kubectl(&self, args: &[&str]) -> Run {
        let mut cmd = Command::new("kubectl");
        cmd.args(args).env("KUBECONFIG", self.dc.kubeconfig_path());
        run_command(cmd).await
    }

    /// `varroa ARGS` with KUBECONFIG pointing at the cluster.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(bin());
        cmd.args(args).env("KUBECONFIG", self.dc.kubeconfig_path()).env_remove("HOME");
        cmd
    }

    pub async fn varroa(&self, args: &[&str]) -> Run {
        run_command(self.command(args)).await
    }

    pub fn controllers(&self, namespace: &str) -> Api<Controller> {
        Api::namespaced(self.dc.client(), namespace)
    }

    pub async fn create_namespace(&self, name: &str) {
        let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.dc.client());
        let ns = serde_json::from_value(json!({"metadata": {"name": name}})).expect("namespace");
        api.create(&PostParams::default(), &ns).await.expect("create namespace");
    }

    /// Create a Controller with this spec.
    pub async fn create(&self, namespace: &str, name: &str, spec: Value) -> Controller {
        let c: Controller = serde_json::from_value(json!({
            "apiVersion": "varroa.dev/v1alpha1", "kind": "Controller",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec,
        }))
        .expect("controller");
        self.controllers(namespace).create(&PostParams::default(), &c).await.expect("create controller")
    }

    /// Write a status, as the operator would (merge patch of the status subresource).
    pub async fn set_status(&self, namespace: &str, name: &str, status: Value) -> Controller {
        self.controllers(namespace)
            .patch_status(name, &PatchParams::default(), &Patch::Merge(json!({"status": status})))
            .await
            .expect("patch status")
    }
}
