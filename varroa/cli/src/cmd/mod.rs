//! The subcommands.

pub mod activity;
pub mod artifacts;
pub mod builds;
pub mod completion;
pub mod describe;
pub mod get;
pub mod logs;
pub mod power;
pub mod schedules;

/// The namespace a record command reads (`-n`, else the kubeconfig's), once every name it was
/// given is checked: the namespace, the controller, the job (`job`: the argument's name, `JOB` or
/// `--job`, and its value) and the cluster. A bad name is refused before anything connects.
pub fn record_scope(
    g: &clikit::cli::GlobalArgs,
    controller: &str,
    job: Option<(&str, &str)>,
    cluster: Option<&str>,
) -> crate::Result<String> {
    let namespace = crate::client::namespace(g)?;
    crate::names::namespace(&namespace)?;
    crate::names::controller(controller)?;
    if let Some((what, job)) = job {
        crate::names::job(what, job)?;
    }
    if let Some(cluster) = cluster {
        crate::names::cluster(cluster)?;
    }
    Ok(namespace)
}
