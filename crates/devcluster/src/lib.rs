//! devcluster: an embedded Kubernetes API server for tests and demos.
//!
//! It speaks the real Kubernetes REST and watch protocol over HTTPS, so `kubectl` and
//! `kube::Client` use it exactly as they use a real cluster. It is not a production cluster:
//! it binds to loopback by default, its credentials are random per start (or kept in its data
//! directory), and it simulates what a cluster does rather than running containers.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! let cluster = devcluster::DevCluster::start().await?;
//! let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::default_namespaced(cluster.client());
//! let list = pods.list(&Default::default()).await?;
//! # Ok(()) }
//! ```
//!
//! # Module layers
//!
//! Modules name each other as `crate::x`; `tools/module_cycles.py` prints the graph, which has
//! no cycle: each module only uses modules of the layers below it (or beside it, one way). As
//! in the real apiserver, the clients of the cluster (controllers, the simulated kubelet and
//! process runtime, bootstrap, the HTTP front) sit above the request path and are not called
//! back by it. From the bottom:
//!
//! - leaves, using no other module: `field`, `golike`, `meta`, `schema`, `clock`, `cron`,
//!   `duration`, `faults`, `protobuf`, `spdy`, `x509`, `conditions` (conditions as controllers
//!   write them), `image` (image references, container IDs and the `--run` rules); then
//!   `errors`, `names`, `jsonpath`, `patch`, `tls`;
//! - kinds as data: `builtin` (schemas, defaults, validation rules and printers of the built-in
//!   kinds), `selector`, `request`, `validation` (the structural-schema and CEL engine), `pdb`
//!   (PodDisruptionBudget helpers); `registry` on top of them; then `store`, `discovery`,
//!   `openapi`, `table`, which need the registry but nothing of the request path;
//! - the cluster's state: `index` (indexes of the stored objects), then `cluster` (registry,
//!   store, credentials, options, indexes), which uses nothing above it;
//! - the request path: `auth`, `crd`, `convert`, `opts` (the options of the verbs),
//!   `admission`, `patching`, `hooks` (per-kind strategies: which pruning, defaults and
//!   validation apply, and the side effects of writes), then `ops` (the generic
//!   get/list/create/update/patch/delete); beside `ops`, on top of it, the subresources and
//!   streams the front routes to: `scale`, `eviction`, `watch`;
//! - clients of the cluster: `client` (the in-process client: lookups, compare-then-write,
//!   Events), `bootstrap`, `runtime` (the process runtime), `controllers` (including the
//!   simulated kubelet), `api` (the HTTP front) and `server` (TLS and connections).
//!
//! Where the request path needs what a layer above does, it is handed in, not called:
//! `controllers::install` gives the write path the seeding of a new namespace
//! (`Cluster::on_namespace_created`); `ops` gives admission its status update
//! (`admission::UpdateStatus`) to charge quotas with; `run` below hands the process runtime to
//! the controllers and the API front; `api` routes `.../scale` to `scale`.

// Used by other crates, benches, tests or the binaries.
pub mod faults;
pub mod ops;
pub mod request;
pub mod runtime;
pub mod tls;
pub mod x509;
// Public because their types are reached through the public API (`Options::clock`,
// `Cluster::registry`/`store`, the errors of `ops`), so callers can name them.
pub mod clock;
pub mod errors;
pub mod registry;
pub mod store;

// The rest is the crate's own. `admission`, `auth`, `builtin`, `duration`, `jsonpath`, `names`,
// `patch` and `protobuf` were public although no other crate used them; what that left uncalled
// was decided item by item:
// - kept, compiled for the unit tests only (`#[cfg(test)]`; drop the attribute to use one): the
//   tested ports of upstream helpers and the entry points their tests drive live code through:
//   podsecurity's `NamespacePolicy::fully_privileged` and `namespace_policy`; quota's `usage`,
//   `usage_at` and `matches_scopes`; rbac's `rules_for` and `allowed_subjects`;
//   `patchmeta::lookup`; duration's `human_duration`, `short_human_duration`,
//   `short_human_duration_nanos` and `age`; `JsonPath::eval`, `execute` and
//   `selectable_field_value`, `jsonpath::go_format_float_v`; `names::is_c_identifier` and
//   `is_env_var_name`; patch's `merge_patch`, `PatchError::detail`,
//   `strategic_merge_patch_untyped`, `apply::apply`, `ApplyError::status_code` and `reason`,
//   `fields_of`, `fields_of_untyped` and `FieldSet::recursive_difference`; protobuf's `decode`,
//   `DecodeError::kind`, `supports` and `supported_kinds`;
// - kept compiled: `rbac::Decision::Deny`, which RBAC never returns, so that the decision and
//   the review status that renders it stay upstream's three-valued ones;
// - deleted, untested or a second copy of live code: podsecurity's audit annotation names
//   (devcluster writes no audit annotations), `builtin::defaults::service_ip_families`
//   (`hooks` sets the IP families with the cluster IP), `names::is_in_range` and
//   `is_http_header_name`, `jsonpath::go_json_quote` (`golike`'s), `FieldSet::members` and
//   `children`, `ApplyError::conflicts`, `protobuf::MEDIA_TYPE`, and unused re-exports in
//   `patch` and `builtin::quantity`.
pub(crate) mod admission;
pub(crate) mod auth;
pub(crate) mod builtin;
pub(crate) mod duration;
pub(crate) mod jsonpath;
pub(crate) mod names;
pub(crate) mod patch;
pub(crate) mod protobuf;

pub(crate) mod api;
pub(crate) mod bootstrap;
pub(crate) mod client;
pub(crate) mod cluster;
pub(crate) mod conditions;
pub(crate) mod controllers;
pub(crate) mod convert;
pub(crate) mod crd;
pub(crate) mod cron;
pub(crate) mod discovery;
pub(crate) mod eviction;
pub(crate) mod field;
pub(crate) mod golike;
pub(crate) mod hooks;
pub(crate) mod image;
pub(crate) mod index;
pub(crate) mod meta;
pub(crate) mod openapi;
pub(crate) mod opts;
pub(crate) mod patching;
pub(crate) mod pdb;
pub(crate) mod scale;
pub(crate) mod schema;
pub(crate) mod selector;
pub(crate) mod server;
pub(crate) mod spdy;
pub(crate) mod table;
pub(crate) mod validation;
pub(crate) mod watch;

pub use cluster::{Cluster, Options};

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

/// A running devcluster. It serves on its own threads, so tests may block (run `kubectl`, for
/// instance) without stalling it. Dropping the handle shuts it down.
pub struct DevCluster {
    cluster: Arc<Cluster>,
    runtime: Arc<runtime::Runtime>,
    addr: SocketAddr,
    url: String,
    kubeconfig: String,
    kubeconfig_dir: tempfile::TempDir,
    client: kube::Client,
    stop: tokio::sync::watch::Sender<bool>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for DevCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevCluster").field("url", &self.url).finish()
    }
}

impl DevCluster {
    /// Start a cluster on a free loopback port, in memory.
    pub async fn start() -> anyhow::Result<DevCluster> {
        Self::start_with(Options::default()).await
    }

    /// Start a cluster with options (a data directory, a fixed address, ...).
    pub async fn start_with(options: Options) -> anyhow::Result<DevCluster> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        let thread = std::thread::Builder::new().name("devcluster".into()).spawn(move || {
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("devcluster-worker")
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = ready_tx.send(Err(anyhow::anyhow!("starting the devcluster runtime: {e}")));
                    return;
                }
            };
            rt.block_on(run(options, ready_tx, stop_rx));
        })?;
        let (cluster, runtime, addr) = match ready_rx.await {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => {
                let _ = thread.join();
                anyhow::bail!("devcluster stopped before it was ready");
            }
        };
        let url = format!("https://{addr}");
        let kubeconfig = cluster.creds.kubeconfig(&url);
        let kubeconfig_dir = tempfile::tempdir()?;
        std::fs::write(kubeconfig_dir.path().join("kubeconfig"), &kubeconfig)?;
        let client = client_for(&kubeconfig).await?;
        Ok(DevCluster { cluster, runtime, addr, url, kubeconfig, kubeconfig_dir, client, stop, thread: Some(thread) })
    }

    /// A ready client authenticated as the admin user, default namespace `default`.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// `https://127.0.0.1:PORT`
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The kubeconfig (YAML) for the admin user.
    pub fn kubeconfig_yaml(&self) -> &str {
        &self.kubeconfig
    }

    /// A kubeconfig file for `KUBECONFIG=... kubectl`, removed with the handle.
    pub fn kubeconfig_path(&self) -> PathBuf {
        self.kubeconfig_dir.path().join("kubeconfig")
    }

    /// Write the kubeconfig somewhere else.
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, &self.kubeconfig)
    }

    /// The cluster's state, for tests that look underneath the API (compacting the watch
    /// history, counting writes).
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    /// The fault rules in force (see `faults`).
    pub fn faults(&self) -> Vec<faults::FaultRule> {
        self.cluster.faults()
    }

    /// Replace the fault rules; running pods are looked at again at once.
    pub fn set_faults(&self, rules: Vec<faults::FaultRule>) {
        self.cluster.set_faults(rules);
    }

    /// Move the clock of the time-driven controllers (CronJob schedules, Job deadlines, TTL
    /// after finished) forward, and have them look at everything again at once: a test of an
    /// hourly CronJob advances an hour instead of waiting one (see `clock`).
    pub fn advance_clock(&self, by: std::time::Duration) {
        self.cluster.options.clock.advance(by);
        self.cluster.kick.notify_one();
    }

    /// The process runtime's rules in force (see `runtime`).
    pub fn run_rules(&self) -> Vec<runtime::RunRule> {
        self.runtime.rules()
    }

    /// Replace the process runtime's rules: pods created from now on whose images match run as
    /// processes (pods already running or simulated stay as they are).
    pub fn set_run_rules(&self, rules: Vec<runtime::RunRule>) {
        self.runtime.set_rules(rules);
    }

    /// Change a node's addresses at run time (as a cloud provider would), e.g.
    /// `set_node_addresses("devcluster-node-1", "10.0.0.9", Some("203.0.113.9"))`.
    pub fn set_node_addresses(&self, node: &str, internal_ip: &str, external_ip: Option<&str>) -> anyhow::Result<()> {
        let cl = &self.cluster;
        let def = cl.registry.get("", "v1", "nodes").ok_or_else(|| anyhow::anyhow!("nodes are not served"))?;
        let cur = cl.store.get(&def.storage, "", node).ok_or_else(|| anyhow::anyhow!("node {node:?} not found"))?;
        let mut status = cur.get("status").cloned().unwrap_or_default();
        let mut addrs = vec![serde_json::json!({"type": "InternalIP", "address": internal_ip})];
        if let Some(e) = external_ip {
            addrs.push(serde_json::json!({"type": "ExternalIP", "address": e}));
        }
        addrs.push(serde_json::json!({"type": "Hostname", "address": node}));
        if let Some(m) = status.as_object_mut() {
            m.insert("addresses".into(), serde_json::Value::Array(addrs));
        }
        client::write_status(cl, &def, &cur, status, "cloud-node-controller");
        Ok(())
    }

    /// Stop serving and wait until every thread has finished.
    pub fn shutdown(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for DevCluster {
    fn drop(&mut self) {
        self.stop_now();
    }
}

/// A kube client for a kubeconfig.
pub async fn client_for(kubeconfig_yaml: &str) -> anyhow::Result<kube::Client> {
    let kc = kube::config::Kubeconfig::from_yaml(kubeconfig_yaml)?;
    let config = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

type Ready = anyhow::Result<(Arc<Cluster>, Arc<runtime::Runtime>, SocketAddr)>;

/// Bind, bootstrap, signal readiness, serve until stopped.
pub async fn run(
    options: Options,
    ready: tokio::sync::oneshot::Sender<Ready>,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let setup = async {
        let listener = tokio::net::TcpListener::bind(options.listen).await?;
        let addr = listener.local_addr()?;
        let runtime =
            Arc::new(runtime::Runtime::new(options.run.clone(), options.crash_backoff, options.data_dir.clone()));
        let cluster = Arc::new(Cluster::new(options)?);
        runtime.attach(&cluster);
        let _ = cluster.server_url.set(format!("https://{addr}"));
        let tls = cluster.creds.server_config(&[addr.ip()])?;
        controllers::install(&cluster);
        bootstrap::run(&cluster);
        controllers::settle(&cluster, &runtime);
        anyhow::Ok((cluster, runtime, addr, listener, tls))
    };
    match setup.await {
        Err(e) => {
            let _ = ready.send(Err(e));
        }
        Ok((cluster, runtime, addr, listener, tls)) => {
            let ctl = tokio::spawn(controllers::run(cluster.clone(), runtime.clone(), stop.clone()));
            let _ = ready.send(Ok((cluster.clone(), runtime.clone(), addr)));
            server::serve(cluster.clone(), runtime.clone(), listener, tls, stop).await;
            ctl.abort();
            // No process outlives the cluster: SIGTERM, a second to go, then SIGKILL.
            runtime.shutdown(std::time::Duration::from_secs(1));
        }
    }
}
