//! Connecting to the API server the way kubectl does: `--kubeconfig`, else `$KUBECONFIG`
//! (several files merged), else `~/.kube/config`, else the in-cluster service account;
//! `--context` picks a context; the namespace is `-n`, else the context's, else `default`.

use crate::cli::GlobalArgs;
use crate::error::{Error, Result};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use varroa_api::Controller;

/// What every command works with: a client and the namespace of the controllers.
#[derive(Clone)]
pub struct Target {
    /// The client, authenticated as the kubeconfig says.
    pub client: Client,
    /// The namespace commands work in.
    pub namespace: String,
    /// The API server's address, for messages.
    pub server: String,
}

impl Target {
    /// The controllers of the namespace.
    pub fn controllers(&self) -> Api<Controller> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }
}

/// Read the kubeconfig and set up a client.
pub async fn connect(g: &GlobalArgs) -> Result<Target> {
    let options = KubeConfigOptions { context: g.context.clone(), cluster: None, user: None };
    let config = match (&g.kubeconfig, &g.context) {
        (Some(path), _) => {
            let kc = Kubeconfig::read_from(path)
                .map_err(|e| Error::Config(format!("reading the kubeconfig {}: {e}", path.display())))?;
            Config::from_custom_kubeconfig(kc, &options)
                .await
                .map_err(|e| Error::Config(format!("using the kubeconfig {}: {e}", path.display())))?
        }
        (None, Some(context)) => Config::from_kubeconfig(&options).await.map_err(|e| {
            Error::Config(format!("using context {context:?} of the kubeconfig ($KUBECONFIG or ~/.kube/config): {e}"))
        })?,
        (None, None) => Config::infer().await.map_err(|e| {
            Error::Config(format!(
                "no cluster to talk to: set KUBECONFIG or pass --kubeconfig (or run in a pod with a service account): {e}"
            ))
        })?,
    };
    let namespace = g.namespace.clone().unwrap_or_else(|| config.default_namespace.clone());
    let server = config.cluster_url.to_string();
    let client = Client::try_from(config)
        .map_err(|e| Error::Config(format!("setting up a client for {server}: {}", crate::error::readable(&e))))?;
    Ok(Target { client, namespace, server })
}
