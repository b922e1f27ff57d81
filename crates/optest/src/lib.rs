//! optest: the end-to-end test harness of both operators, Vesper and Varroa (issue 14, "one
//! reconcile kit"). Their tests and benchmarks used to carry a copy each of what is here, and the
//! copies drifted.
//!
//! - [`cluster`]: the devcluster fixture: start it, write multi-document YAML (server-side apply
//!   or create), wait for CRDs to be Established, create namespaces;
//! - [`service_account`]: a ServiceAccount's token (TokenRequest), kubeconfig, client;
//! - [`kubectl`]: the real `/usr/bin/kubectl` against a kubeconfig;
//! - [`process`]: an operator binary run as a pod of its Deployment would run it (args, env,
//!   kubeconfig), its log, health address, signals, memory and exit;
//! - [`inprocess`]: an operator running in a task of the test, stopped on drop, and the
//!   [`Fixture`] of an end-to-end test (cluster, admin, ServiceAccount, operator);
//! - [`wait`]: waits on watches (an object, its deletion, N objects), polling for in-process
//!   state, and a recorder of every version a watch sees;
//! - [`install`]: what both operators' install manifests (`deploy/<operator>/`) hold;
//! - [`replicas`]: two replicas of an operator electing a leader, failing over, dying honestly;
//! - [`events`], [`lease`], [`metrics`] (Prometheus text), [`http`] (plain GETs of /healthz,
//!   /readyz, /metrics), [`manifests`] (the checked-in YAML), [`fixtures`] (the status fixtures'
//!   comparison), [`bins`] (the workspace's other binaries).
//!
//! Decision: a dev-only crate (`publish = false`, a dev-dependency only) rather than a `testing`
//! module of opkit behind a feature. opkit is a dependency of both operator binaries; the
//! harness needs devcluster, tempfile, YAML and child processes, none of which belongs in the
//! binaries' dependency graph, and a feature that is on in one build and off in another makes
//! cargo compile opkit (and what depends on it) twice. opkit's former `testing` module
//! (`workspace_bins`) lives here now, as [`bins`].
//!
//! It knows neither operator: what is particular to one (its CRDs, its kinds, its metrics, its
//! flags) stays in that operator's `tests/support`, which builds on this. Where the harness must
//! run something of an operator it takes it generically: a future ([`inprocess::InProcess`]),
//! a binary's path and args ([`process::Spawn`]), a function counting reconciles ([`settle`]).
//!
//! Waits are on watches where the API has one; polling (at short intervals) is kept for what has
//! no watch: in-process counters, a child's log file, an HTTP endpoint. Every failure panics
//! with what was waited for and what was there instead.

pub mod bins;
pub mod cluster;
pub mod events;
pub mod fixtures;
pub mod http;
pub mod inprocess;
pub mod install;
pub mod kubectl;
pub mod lease;
pub mod manifests;
pub mod metrics;
pub mod process;
pub mod replicas;
pub mod service_account;
pub mod wait;

pub use inprocess::Fixture;
pub use wait::{eventually, wait_deleted, wait_for};

use kube::Resource;
use kube::api::{Api, Patch, PatchParams};
use kube::core::NamespaceResourceScope;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How long any one wait may take (generous: tests run in parallel on a small machine).
pub const WAIT: Duration = Duration::from_secs(90);

/// The annotation [`touch`] changes: nobody reads it.
pub const TOUCHED: &str = "e2e.example.com/touched";

/// What the tests need of an object's type: to read, write, print and compare it across tasks.
pub trait Object: Clone + Debug + Serialize + DeserializeOwned + Send + Sync + 'static {}
impl<K: Clone + Debug + Serialize + DeserializeOwned + Send + Sync + 'static> Object for K {}

/// A namespaced kind with a static type, as the tests read and write them.
pub trait Namespaced: Object + Resource<Scope = NamespaceResourceScope, DynamicType = ()> {}
impl<K: Object + Resource<Scope = NamespaceResourceScope, DynamicType = ()>> Namespaced for K {}

/// The workspace's root directory.
pub fn root() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    p.canonicalize().unwrap_or(p)
}

/// A path relative to the workspace's root (`deploy/vesper/operator-rbac.yaml`).
pub fn repo(rel: &str) -> PathBuf {
    root().join(rel)
}

/// The text of a file of the workspace (a path relative to its root).
pub fn read(rel: &str) -> String {
    let p = repo(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

/// The test's log: the operator's warnings (failed reconciles) and what `default_filter` adds,
/// written through the test harness' capture; RUST_LOG to see more. Once per process.
pub fn init_tracing(default_filter: &str) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default_filter.into()),
        )
        .with_test_writer()
        .try_init();
}

/// Blocking work (a child process without an async API, such as helm) from an async test on the
/// multi-threaded runtime; outside a runtime it simply runs `f`.
pub fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// A duration as the benchmarks' tables print it: `850 ms`, `12.34 s`.
pub fn secs(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{:.0} ms", d.as_secs_f64() * 1000.0)
    } else {
        format!("{:.2} s", d.as_secs_f64())
    }
}

/// Change the [`TOUCHED`] annotation of an object: a watch event without a spec change.
pub async fn touch<K>(api: &Api<K>, name: &str) -> K
where
    K: Clone + DeserializeOwned + Debug,
{
    static TOUCHES: AtomicU64 = AtomicU64::new(0);
    let n = TOUCHES.fetch_add(1, Ordering::Relaxed);
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {TOUCHED: n.to_string()}}})),
    )
    .await
    .unwrap_or_else(|e| panic!("touch {name}: {e}"))
}

/// Let an operator settle on an object: touch it and wait until `reconciles` (ended reconciles,
/// ok or not) moved, twice, so that no reconcile queued by an earlier change is still to come.
pub async fn settle<K>(api: &Api<K>, name: &str, reconciles: impl Fn() -> u64)
where
    K: Clone + DeserializeOwned + Debug,
{
    for _ in 0..2 {
        let before = reconciles();
        touch(api, name).await;
        eventually(&format!("the operator reconciled {name} after a touch"), || reconciles() > before).await;
    }
}
