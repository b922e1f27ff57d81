//! A devcluster with the PreviewEnvironment CRD and the Vesper operator running in-process, and
//! the built `vesperctl` binary run against it (through a kubeconfig, as a user runs it).

#![allow(dead_code)]

pub use clikit::testing::{Run, run_command};
use devcluster::DevCluster;
use devcluster::faults::FaultRule;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use kube::api::{Api, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;
use vesper_api::PreviewEnvironment;

pub const DOMAIN: &str = "preview.example.test";

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_vesperctl"))
}

pub struct Harness {
    pub dc: DevCluster,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    operator: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

pub struct Setup {
    pub faults: Vec<FaultRule>,
    pub preview_domain: Option<String>,
    pub pod_startup: Duration,
}

impl Default for Setup {
    fn default() -> Self {
        Setup { faults: vec![], preview_domain: Some(DOMAIN.into()), pod_startup: Duration::ZERO }
    }
}

impl Harness {
    pub async fn start() -> Harness {
        Self::start_with(Setup::default()).await
    }

    pub async fn start_with(setup: Setup) -> Harness {
        let dc = DevCluster::start_with(devcluster::Options {
            faults: setup.faults,
            pod_startup: setup.pod_startup,
            ..Default::default()
        })
        .await
        .expect("devcluster");
        let crds: Api<CustomResourceDefinition> = Api::all(dc.client());
        crds.create(&PostParams::default(), &PreviewEnvironment::crd()).await.expect("the CRD is accepted");
        tokio::time::timeout(
            Duration::from_secs(20),
            await_condition(crds, "previewenvironments.vesper.eventide.dev", conditions::is_crd_established()),
        )
        .await
        .expect("established in time")
        .expect("watch");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let config = vesper_operator::Config { preview_domain: setup.preview_domain, ..Default::default() };
        let operator = tokio::spawn(vesper_operator::run_with_clock(
            dc.client(),
            config,
            Arc::new(vesper_operator::metrics::Metrics::new()),
            vesper_operator::clock::Clock::default(),
            async move {
                let _ = stopped.await;
            },
        ));
        Harness { dc, stop: Some(stop), operator: Some(operator) }
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dc.kubeconfig_path()
    }

    /// `vesperctl ARGS` with KUBECONFIG pointing at the cluster.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(bin());
        cmd.args(args).env("KUBECONFIG", self.kubeconfig()).env_remove("HOME");
        cmd
    }

    pub async fn vesperctl(&self, args: &[&str]) -> Run {
        run_command(self.command(args)).await
    }

    pub fn previews(&self, namespace: &str) -> Api<PreviewEnvironment> {
        Api::namespaced(self.dc.client(), namespace)
    }

    /// Stop the operator and wait for it.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(op) = self.operator.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), op).await;
        }
    }
}

/// A directory holding the binary under the kubectl plugin name.
pub fn plugin_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::os::unix::fs::symlink(bin(), dir.path().join("kubectl-vesper")).expect("symlink");
    dir
}

/// PATH with `dir` first.
pub fn path_with(dir: &Path) -> String {
    format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default())
}
