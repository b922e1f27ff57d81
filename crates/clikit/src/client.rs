//! Connecting to the API server the way kubectl does: `--kubeconfig`, else `$KUBECONFIG`
//! (several files merged), else `~/.kube/config`, else the in-cluster service account;
//! `--context` picks a context; the namespace is `-n`, else the context's, else `default`.

use crate::cli::GlobalArgs;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use std::path::PathBuf;

/// What every command works with: a client and the namespace it works in.
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
    /// The objects of kind `K` in [`Target::namespace`].
    pub fn namespaced<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }
}

/// Why there is no client: each says which kubeconfig (or context) and what to do.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The file given with `--kubeconfig` could not be read or parsed.
    #[error("reading the kubeconfig {}: {source}", path.display())]
    Read {
        /// The `--kubeconfig` path.
        path: PathBuf,
        /// Why it could not be read.
        source: kube::config::KubeconfigError,
    },
    /// The file given with `--kubeconfig` has no usable context, cluster or user.
    #[error("using the kubeconfig {}: {source}", path.display())]
    Use {
        /// The `--kubeconfig` path.
        path: PathBuf,
        /// What is missing or wrong in it.
        source: kube::config::KubeconfigError,
    },
    /// The `--context` asked for is not usable in `$KUBECONFIG` or `~/.kube/config`.
    #[error("using context {context:?} of the kubeconfig ($KUBECONFIG or ~/.kube/config): {source}")]
    Context {
        /// The `--context` name.
        context: String,
        /// Why it is not usable.
        source: kube::config::KubeconfigError,
    },
    /// Neither a kubeconfig nor an in-cluster service account was found.
    #[error(
        "no cluster to talk to: set KUBECONFIG or pass --kubeconfig (or run in a pod with a service account): {source}"
    )]
    Infer {
        /// What was tried.
        source: kube::config::InferConfigError,
    },
    /// The configuration was read but a client could not be built from it (TLS, proxy).
    #[error("setting up a client for {server}: {}", crate::apierror::unreachable_server(source))]
    Client {
        /// The API server's address.
        server: String,
        /// The client's error.
        source: kube::Error,
    },
}

/// Read the kubeconfig as kubectl does (see the module doc) and set up a client.
pub async fn connect(g: &GlobalArgs) -> Result<Target, ConnectError> {
    let options = KubeConfigOptions { context: g.context.clone(), cluster: None, user: None };
    let config = match (&g.kubeconfig, &g.context) {
        (Some(path), _) => {
            let kc = Kubeconfig::read_from(path).map_err(|source| ConnectError::Read { path: path.clone(), source })?;
            Config::from_custom_kubeconfig(kc, &options)
                .await
                .map_err(|source| ConnectError::Use { path: path.clone(), source })?
        }
        (None, Some(context)) => Config::from_kubeconfig(&options)
            .await
            .map_err(|source| ConnectError::Context { context: context.clone(), source })?,
        (None, None) => Config::infer().await.map_err(|source| ConnectError::Infer { source })?,
    };
    let namespace = g.namespace.clone().unwrap_or_else(|| config.default_namespace.clone());
    let server = config.cluster_url.to_string();
    let client = Client::try_from(config).map_err(|source| ConnectError::Client { server: server.clone(), source })?;
    Ok(Target { client, namespace, server })
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBECONFIG: &str = "\
apiVersion: v1
kind: Config
clusters:
- cluster:
    server: https://127.0.0.1:6443
    insecure-skip-tls-verify: true
  name: c
contexts:
- context:
    cluster: c
    namespace: team-a
    user: u
  name: current
- context:
    cluster: c
    user: u
  name: other
current-context: current
users:
- name: u
  user:
    token: t
";

    fn args(path: &std::path::Path, context: Option<&str>, namespace: Option<&str>) -> GlobalArgs {
        GlobalArgs {
            kubeconfig: Some(path.to_path_buf()),
            context: context.map(String::from),
            namespace: namespace.map(String::from),
        }
    }

    #[tokio::test]
    async fn the_namespace_is_the_flag_else_the_contexts_else_default() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config");
        std::fs::write(&path, KUBECONFIG).unwrap();
        let t = connect(&args(&path, None, None)).await.unwrap();
        assert_eq!((t.namespace.as_str(), t.server.as_str()), ("team-a", "https://127.0.0.1:6443/"));
        assert_eq!(connect(&args(&path, Some("other"), None)).await.unwrap().namespace, "default");
        assert_eq!(connect(&args(&path, Some("other"), Some("x"))).await.unwrap().namespace, "x");
    }

    #[tokio::test]
    async fn errors_name_the_kubeconfig_and_context() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let e = connect(&args(&missing, None, None)).await.err().unwrap();
        assert!(e.to_string().starts_with(&format!("reading the kubeconfig {}: ", missing.display())), "{e}");
        let path = dir.path().join("config");
        std::fs::write(&path, KUBECONFIG).unwrap();
        let e = connect(&args(&path, Some("nope"), None)).await.err().unwrap();
        assert!(e.to_string().starts_with(&format!("using the kubeconfig {}: ", path.display())), "{e}");
    }
}
