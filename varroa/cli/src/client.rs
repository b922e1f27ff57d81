//! The API server connection ([`clikit::client`]: the kubeconfig, context and namespace read as
//! kubectl reads them) and the controllers it reaches; and, for the commands that read the build
//! record store and never the API server, the namespace alone ([`namespace`]).

use crate::error::{Error, Result};
use clikit::cli::GlobalArgs;
pub use clikit::client::{Target, connect};
use kube::Api;
use kube::config::Kubeconfig;
use std::path::{Path, PathBuf};
use varroa_api::Controller;

/// The controllers of a [`Target`]'s namespace.
pub trait Controllers {
    /// The controllers of the namespace.
    fn controllers(&self) -> Api<Controller>;
}

impl Controllers for Target {
    fn controllers(&self) -> Api<Controller> {
        self.namespaced()
    }
}

/// Where a pod's service account namespace is mounted (what kubectl uses in a pod).
const SERVICE_ACCOUNT_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// The namespace to work in, as kubectl picks it, without connecting anywhere: `-n`; else the
/// namespace of the context (`--context`, else the current context) of the kubeconfig
/// (`--kubeconfig`, else the files of `$KUBECONFIG` that exist, merged, else `~/.kube/config`);
/// else, with no kubeconfig at all, the pod's service account namespace; else `default`.
///
/// A kubeconfig named with `--kubeconfig` that cannot be read, one that does not parse, and a
/// `--context` it does not have are errors (the user asked for them); a missing kubeconfig is not
/// (these commands do not need a cluster).
pub fn namespace(g: &GlobalArgs) -> Result<String> {
    if let Some(ns) = &g.namespace {
        return Ok(ns.clone());
    }
    namespace_from(g, kubeconfig_paths(g), Path::new(SERVICE_ACCOUNT_NAMESPACE))
}

/// The kubeconfig files to read, in merge order.
fn kubeconfig_paths(g: &GlobalArgs) -> Vec<PathBuf> {
    if let Some(path) = &g.kubeconfig {
        return vec![path.clone()];
    }
    match std::env::var_os("KUBECONFIG") {
        Some(v) if !v.is_empty() => std::env::split_paths(&v).filter(|p| !p.as_os_str().is_empty()).collect(),
        _ => std::env::var_os("HOME").map(|h| vec![PathBuf::from(h).join(".kube/config")]).unwrap_or_default(),
    }
}

fn namespace_from(g: &GlobalArgs, paths: Vec<PathBuf>, service_account: &Path) -> Result<String> {
    let mut merged: Option<Kubeconfig> = None;
    for path in paths {
        // kubectl skips files of $KUBECONFIG that do not exist; --kubeconfig must exist.
        if g.kubeconfig.is_none() && !path.exists() {
            continue;
        }
        let kc = Kubeconfig::read_from(&path).map_err(|e| {
            Error::Failed(format!("reading the kubeconfig {} (for the namespace): {e}", path.display()))
        })?;
        merged = Some(match merged {
            None => kc,
            Some(m) => m.merge(kc).map_err(|e| {
                Error::Failed(format!("merging the kubeconfig {} (for the namespace): {e}", path.display()))
            })?,
        });
    }
    let Some(kc) = merged else {
        if let Some(context) = &g.context {
            return Err(Error::Failed(format!(
                "--context {context}: no kubeconfig found ($KUBECONFIG, ~/.kube/config): pass --kubeconfig, or -n for the namespace"
            )));
        }
        let sa = std::fs::read_to_string(service_account).unwrap_or_default();
        return Ok(if sa.trim().is_empty() { "default".into() } else { sa.trim().to_string() });
    };
    let name = g.context.clone().or(kc.current_context.clone());
    let context = name.as_ref().and_then(|n| kc.contexts.iter().find(|c| &c.name == n));
    match (context, &g.context) {
        (None, Some(asked)) => Err(Error::Failed(format!(
            "--context {asked}: the kubeconfig has no such context (`kubectl config get-contexts` lists them)"
        ))),
        (context, _) => Ok(context
            .and_then(|c| c.context.as_ref())
            .and_then(|c| c.namespace.clone())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBECONFIG: &str = "\
apiVersion: v1
kind: Config
clusters:
- cluster: {server: https://127.0.0.1:6443}
  name: c
contexts:
- context: {cluster: c, namespace: team-a, user: u}
  name: current
- context: {cluster: c, user: u}
  name: other
current-context: current
users:
- name: u
  user: {token: t}
";

    fn args(kubeconfig: Option<&Path>, context: Option<&str>) -> GlobalArgs {
        GlobalArgs {
            kubeconfig: kubeconfig.map(Path::to_path_buf),
            context: context.map(String::from),
            namespace: None,
        }
    }

    #[test]
    fn the_namespace_is_the_contexts_else_default_without_a_cluster() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config");
        std::fs::write(&path, KUBECONFIG).unwrap();
        let none = dir.path().join("no-sa");
        let ns = |g: &GlobalArgs, paths: Vec<PathBuf>| namespace_from(g, paths, &none);
        assert_eq!(ns(&args(Some(&path), None), vec![path.clone()]).unwrap(), "team-a");
        assert_eq!(ns(&args(Some(&path), Some("other")), vec![path.clone()]).unwrap(), "default");
        let missing = dir.path().join("missing");
        assert_eq!(ns(&args(None, None), vec![missing.clone(), path.clone()]).unwrap(), "team-a", "missing skipped");
        assert_eq!(ns(&args(None, None), vec![missing.clone()]).unwrap(), "default");
        let e = ns(&args(Some(&missing), None), vec![missing.clone()]).unwrap_err().to_string();
        assert!(e.starts_with(&format!("reading the kubeconfig {}", missing.display())), "{e}");
        let e = ns(&args(Some(&path), Some("nope")), vec![path.clone()]).unwrap_err().to_string();
        assert!(e.contains("--context nope") && e.contains("no such context"), "{e}");
        let e = ns(&args(None, Some("x")), vec![]).unwrap_err().to_string();
        assert!(e.contains("no kubeconfig found"), "{e}");
        let sa = dir.path().join("sa");
        std::fs::write(&sa, "ci-system\n").unwrap();
        assert_eq!(namespace_from(&args(None, None), vec![], &sa).unwrap(), "ci-system");
        let g = GlobalArgs { namespace: Some("x".into()), ..args(Some(&missing), None) };
        assert_eq!(namespace(&g).unwrap(), "x", "-n needs no kubeconfig");
    }
}
