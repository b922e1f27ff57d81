//! The shared state of one running cluster: registry, store, credentials, options.

use crate::faults::FaultRule;
use crate::registry::Registry;
use crate::store::{Store, StoreOptions};
use crate::tls::Credentials;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock, RwLock};
use std::time::Duration;
use tokio::sync::Notify;

/// How a cluster runs. `Default` is what tests want: a free loopback port, memory only.
#[derive(Debug, Clone)]
pub struct Options {
    /// Address to listen on; port 0 picks a free one.
    pub listen: SocketAddr,
    /// Keep state (objects, CA, admin token) here, surviving restarts and crashes.
    pub data_dir: Option<PathBuf>,
    /// Changes kept for watches that resume from an older resourceVersion.
    pub history: usize,
    /// How often a watch that asked for bookmarks gets one.
    pub bookmark_interval: Duration,
    /// Number of simulated nodes created at first start.
    pub nodes: usize,
    /// How long a pod takes from scheduled to running (0: at once).
    pub pod_startup: Duration,
    /// Fault injection rules (see `faults`).
    pub faults: Vec<FaultRule>,
    /// How long a simulated container of a Job's pod runs before it exits (0 or the fault
    /// rule's code, see `faults`); default 1s.
    pub job_pod_duration: Duration,
    /// The clock of the time-driven controllers (CronJobs, Job deadlines, TTL after finished);
    /// tests move it forward with `DevCluster::advance_clock`.
    pub clock: crate::clock::Clock,
    /// The process runtime's rules (`--run IMAGE=EXECUTABLE`): containers of matching images run
    /// as local processes (see `runtime`); others stay simulated.
    pub run: Vec<crate::image::RunRule>,
    /// The first crash-loop back-off of the process runtime (doubling to 30×: 10s to 5m by
    /// default); tests shorten it.
    pub crash_backoff: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            data_dir: None,
            history: 100_000,
            bookmark_interval: Duration::from_secs(60),
            nodes: 1,
            pod_startup: Duration::ZERO,
            faults: vec![],
            job_pod_duration: Duration::from_secs(1),
            clock: Default::default(),
            run: vec![],
            crash_backoff: Duration::from_secs(10),
        }
    }
}

/// One cluster's state, shared by the HTTP server and the cluster's own controllers.
#[derive(Debug)]
pub struct Cluster {
    pub registry: Registry,
    pub store: Store,
    pub creds: Credentials,
    pub options: Options,
    /// `https://127.0.0.1:PORT`, once bound.
    pub server_url: OnceLock<String>,
    /// Fault rules in force (changeable at run time).
    pub faults: RwLock<Vec<FaultRule>>,
    /// Wakes the controllers for a full pass (after fault rules change).
    pub kick: Notify,
    /// The last ClusterIP handed out, to allocate the next one.
    pub(crate) ip_alloc: Mutex<()>,
    /// What the write path calls right after a namespace is created, before the create
    /// returns (`hooks::after_write`): the namespace controller seeds it. Set at start-up by
    /// the controllers (`controllers::install`), which the write path knows only through it.
    pub(crate) on_namespace_created: OnceLock<fn(&Cluster, &str)>,
    /// Indexes of the stored objects the controllers look things up in.
    pub(crate) index: Mutex<crate::index::Indexes>,
}

impl Cluster {
    pub fn new(options: Options) -> anyhow::Result<Cluster> {
        let store = Store::open(StoreOptions { history: options.history, data_dir: options.data_dir.clone() })?;
        let creds = match &options.data_dir {
            Some(dir) => Credentials::load_or_generate(dir)?,
            None => Credentials::generate()?,
        };
        let faults = RwLock::new(options.faults.clone());
        Ok(Cluster {
            registry: Registry::with_builtins(),
            store,
            creds,
            options,
            server_url: OnceLock::new(),
            faults,
            kick: Notify::new(),
            ip_alloc: Mutex::new(()),
            on_namespace_created: OnceLock::new(),
            index: Mutex::new(Default::default()),
        })
    }

    /// The fault rules in force.
    pub fn faults(&self) -> Vec<FaultRule> {
        self.faults.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replace the fault rules; pods are looked at again.
    pub fn set_faults(&self, rules: Vec<FaultRule>) {
        *self.faults.write().unwrap_or_else(|e| e.into_inner()) = rules;
        self.kick.notify_one();
    }

    pub(crate) fn index(&self) -> std::sync::MutexGuard<'_, crate::index::Indexes> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn server_url(&self) -> &str {
        self.server_url.get().map(String::as_str).unwrap_or("")
    }
}
