//! The process runtime: pods that really run. Opt-in: a container whose image matches a
//! `--run IMAGE=EXECUTABLE` rule (`Options::run`, `DevCluster::set_run_rules`) runs as a local
//! process instead of being simulated; images without a rule stay simulated (src/controllers/
//! kubelet.rs). A pod with at least one mapped container (or init container) is a *runtime pod*;
//! its unmapped containers are simulated inside it (running and ready, no process).
//!
//! What it does, as the kubelet does it (pkg/kubelet/kubelet_pods.go, kuberuntime/):
//! - **argv** (`spec::argv`): the image's ENTRYPOINT is `[EXECUTABLE]` and its CMD `[]`. Neither
//!   `command` nor `args`: `[EXE]`; only `args`: `[EXE] + args`; `command` set: its first word
//!   names the program inside the image, which is the mapped executable, so
//!   `[EXE] + command[1..] + args`. `command: ["/varroa-mite", "run"], args: ["--v"]` with
//!   `--run example.com/mite*=/build/varroa-mite` runs `/build/varroa-mite run --v`.
//!   `$(VAR)` references in command, args and env values expand as upstream's `expansion`
//!   package does (`$$` escapes, unknown references stay as written).
//! - **env** (`spec::environment`): `env` (value, configMapKeyRef, secretKeyRef, fieldRef,
//!   resourceFieldRef), `envFrom` (with prefix), then the Service variables a kubelet injects
//!   (`<SVC>_SERVICE_HOST`, `_PORT`, docker links; only the `kubernetes` Service's when
//!   `enableServiceLinks` is false).
//! - **volumes** (`volumes`): configMap, secret, downwardAPI, projected (with
//!   serviceAccountToken) are written to a directory per pod and rewritten when their sources
//!   change, swapped atomically through a `..data` symlink as the kubelet's AtomicWriter does;
//!   emptyDir is a directory of the pod; a persistentVolumeClaim a directory per claim shared by
//!   its pods; hostPath the host path itself.
//! - **Translations** (the only two): a path under a volume mount (`mountPath`, with its
//!   `subPath`) in args, command or env values is rewritten to the pod's directory of that
//!   volume; and the process gets `KUBECONFIG` pointing at a kubeconfig for its
//!   ServiceAccount (server: this devcluster, its CA, `tokenFile` the mounted, refreshed
//!   token), with `KUBERNETES_SERVICE_HOST`/`_PORT` naming this devcluster's address, because
//!   in-cluster clients read fixed paths (/var/run/secrets/...) and a ClusterIP is not routed.
//! - **network**: each pod gets its own loopback address in 127.0.0.0/8 (never 127.0.0.1) as
//!   `status.podIP`; Endpoints and EndpointSlices follow it. No network namespace: ports are
//!   shared with the host, a program must bind its pod IP (env `POD_IP` via the downward API);
//!   a wildcard listen address (`0.0.0.0:PORT`, `[::]:PORT`) in args or env is rewritten to
//!   `POD_IP:PORT` (`spec::bind_address`) so that pods of one manifest do not collide, and so is
//!   a loopback address (`127.0.0.1:PORT`, `localhost:PORT`) whose port a container of the same
//!   pod declares: the pod's address stands for the pod's own loopback (sidecars talking over it).
//! - **lifecycle** (`worker`): init containers in order to completion, then the containers;
//!   exit codes, restart policy, CrashLoopBackOff (10s doubling to 5m, base
//!   `Options::crash_backoff`), startup/readiness/liveness probes (httpGet, tcpSocket, exec),
//!   graceful deletion (SIGTERM to the process group, SIGKILL after the grace period).
//! - **no orphans** (`process`): each container is its own process group, started by one
//!   long-lived thread with `PR_SET_PDEATHSIG(SIGKILL)`, so a `kill -9` of devcluster kills
//!   them; a stopping cluster terminates every process group.
//! - **logs** (`logs`): stdout/stderr per container instance in CRI log format, 10 MiB per
//!   file, one rotated file kept: `pods/log` with container, follow, previous, tailLines,
//!   sinceSeconds/sinceTime, timestamps, limitBytes.
//! - **exec and port-forward** (`stream`): WebSocket (`v5`/`v4.channel.k8s.io`) exec and
//!   `v4.channel.k8s.io` port-forward; kubectl's SPDY port-forward (`crate::spdy`).
//!
//! Resources (CPU, memory) are not limited; the processes run as devcluster's user.

pub(crate) mod logs;
pub(crate) mod process;
pub mod spec;
pub(crate) mod stream;
pub(crate) mod volumes;
mod worker;

use crate::cluster::Cluster;
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};
use std::time::Duration;

pub use crate::image::{RunRule, find};
pub use worker::PodRun;

/// The runtime of one cluster: its rules and the pods it runs.
pub struct Runtime {
    rules: RwLock<Vec<RunRule>>,
    pub(crate) backoff_base: Duration,
    cluster: OnceLock<Weak<Cluster>>,
    pods: Mutex<HashMap<(String, String), Arc<PodRun>>>,
    data_dir: Option<PathBuf>,
    base: OnceLock<Result<(PathBuf, Option<tempfile::TempDir>), String>>,
    stopped: std::sync::atomic::AtomicBool,
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime").field("rules", &self.rules()).finish_non_exhaustive()
    }
}

/// Loopback addresses of live pods of every cluster in this process.
static POD_IPS: Mutex<BTreeSet<Ipv4Addr>> = Mutex::new(BTreeSet::new());

/// A free address in 127.0.0.0/8 other than 127.0.0.0/24, random so that clusters of other
/// processes rarely pick the same one.
fn allocate_ip() -> Ipv4Addr {
    use rand::RngExt;
    let mut used = POD_IPS.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let mut rng = rand::rng();
        let ip = Ipv4Addr::new(127, rng.random_range(1..=254), rng.random_range(0..=255), rng.random_range(2..=254));
        if used.insert(ip) {
            return ip;
        }
    }
}

pub(crate) fn release_ip(ip: Ipv4Addr) {
    POD_IPS.lock().unwrap_or_else(|e| e.into_inner()).remove(&ip);
}

impl Runtime {
    pub fn new(rules: Vec<RunRule>, backoff_base: Duration, data_dir: Option<PathBuf>) -> Runtime {
        Runtime {
            rules: RwLock::new(rules),
            backoff_base,
            cluster: OnceLock::new(),
            pods: Mutex::new(HashMap::new()),
            data_dir,
            base: OnceLock::new(),
            stopped: Default::default(),
        }
    }

    /// Give the runtime its cluster (the workers write pod statuses through it). The cluster
    /// does not hold the runtime: its clients do (the simulated kubelet starts pods here, the
    /// API front serves their logs, exec and port-forward, `DevCluster` its rules).
    pub fn attach(&self, cl: &Arc<Cluster>) {
        let _ = self.cluster.set(Arc::downgrade(cl));
    }

    pub fn rules(&self) -> Vec<RunRule> {
        self.rules.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn set_rules(&self, rules: Vec<RunRule>) {
        *self.rules.write().unwrap_or_else(|e| e.into_inner()) = rules;
    }

    /// The executable a container image runs, if any. A relative path with a directory
    /// (`./target/debug/app`) is taken from devcluster's working directory, not the pod's.
    pub fn executable(&self, image: &str) -> Option<PathBuf> {
        let exe = find(&self.rules.read().unwrap_or_else(|e| e.into_inner()), image)?;
        if exe.is_relative() && exe.components().count() > 1 {
            return Some(std::env::current_dir().map(|d| d.join(&exe)).unwrap_or(exe));
        }
        Some(exe)
    }

    /// Whether a pod runs here: one of its containers has a mapped image (or it already runs).
    pub fn runs(&self, pod: &Value) -> bool {
        if self.pod(crate::meta::namespace(pod), crate::meta::name(pod)).is_some_and(|p| p.uid == crate::meta::uid(pod))
        {
            return true;
        }
        let rules = self.rules.read().unwrap_or_else(|e| e.into_inner());
        if rules.is_empty() {
            return false;
        }
        // A pod the simulated kubelet already started stays simulated (rules changed since).
        if pod.pointer("/status/podIP").and_then(Value::as_str).is_some_and(|ip| !ip.starts_with("127.")) {
            return false;
        }
        ["containers", "initContainers"].iter().any(|field| {
            pod.pointer(&format!("/spec/{field}"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|c| c.get("image").and_then(Value::as_str))
                .any(|image| find(&rules, image).is_some())
        })
    }

    /// The running pod of a namespace and name.
    pub fn pod(&self, ns: &str, name: &str) -> Option<Arc<PodRun>> {
        self.pods.lock().unwrap_or_else(|e| e.into_inner()).get(&(ns.to_string(), name.to_string())).cloned()
    }

    /// The directory pods' files live in: DATA_DIR/pods, or a temporary directory removed with
    /// the cluster.
    fn base_dir(&self) -> Result<PathBuf, String> {
        let r = self.base.get_or_init(|| match &self.data_dir {
            Some(d) => {
                let p = d.join("pods");
                // No process outlives devcluster: the pods' directories of an earlier run are
                // stale (their pods start afresh); claims' directories are kept.
                for entry in std::fs::read_dir(&p).into_iter().flatten().flatten() {
                    if entry.file_name() != "..claims" {
                        let _ = std::fs::remove_dir_all(entry.path());
                    }
                }
                std::fs::create_dir_all(&p).map(|_| (p.clone(), None)).map_err(|e| format!("{}: {e}", p.display()))
            }
            None => tempfile::Builder::new()
                .prefix("devcluster-pods-")
                .tempdir()
                .map(|t| (t.path().to_path_buf(), Some(t)))
                .map_err(|e| format!("creating a directory for pods: {e}")),
        });
        match r {
            Ok((p, _)) => Ok(p.clone()),
            Err(e) => Err(e.clone()),
        }
    }

    /// The kubelet's sync of a bound runtime pod: start its worker, or tell the running worker
    /// to look again (a deletion, a change). Returns false when no worker runs it and the pod is
    /// being deleted (the caller removes it at once).
    pub fn sync(self: &Arc<Self>, pod: &Value) -> bool {
        if self.stopped.load(std::sync::atomic::Ordering::SeqCst) {
            return false;
        }
        let ns = crate::meta::namespace(pod).to_string();
        let name = crate::meta::name(pod).to_string();
        let uid = crate::meta::uid(pod).to_string();
        let mut pods = self.pods.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = pods.get(&(ns.clone(), name.clone())) {
            if p.uid == uid {
                p.poke();
                return true;
            }
            // A pod of the same name replaced the old one: the old worker sees it and ends.
            p.poke();
            return !crate::meta::is_deleting(pod);
        }
        if crate::meta::is_deleting(pod)
            || matches!(pod.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded") | Some("Failed"))
        {
            return false;
        }
        let Some(cl) = self.cluster.get().and_then(Weak::upgrade) else { return false };
        let base = match self.base_dir() {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %e, "the process runtime has no directory for pods");
                return false;
            }
        };
        let dir = base.join(format!("{ns}_{name}_{uid}"));
        let run = Arc::new(PodRun::new(&ns, &name, &uid, allocate_ip(), dir));
        pods.insert((ns, name), run.clone());
        drop(pods);
        tokio::spawn(worker::run(cl, self.clone(), run));
        true
    }

    /// A pod object is gone: its processes end at once (a forced delete).
    pub fn gone(&self, ns: &str, name: &str) {
        if let Some(p) = self.pod(ns, name) {
            p.poke();
        }
    }

    pub(crate) fn remove(&self, run: &PodRun) {
        let mut pods = self.pods.lock().unwrap_or_else(|e| e.into_inner());
        let key = (run.namespace.clone(), run.name.clone());
        if pods.get(&key).is_some_and(|p| p.uid == run.uid) {
            pods.remove(&key);
        }
    }

    /// End every process (devcluster stops): SIGTERM to each process group, SIGKILL to those
    /// still there after `grace`. Blocks until done.
    pub fn shutdown(&self, grace: Duration) {
        self.stopped.store(true, std::sync::atomic::Ordering::SeqCst);
        let pods: Vec<Arc<PodRun>> =
            self.pods.lock().unwrap_or_else(|e| e.into_inner()).drain().map(|(_, p)| p).collect();
        let groups: Vec<i32> = pods.iter().flat_map(|p| p.process_groups()).collect();
        process::terminate_all(&groups, grace);
        for p in &pods {
            p.poke();
            release_ip(p.ip);
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.shutdown(Duration::ZERO);
    }
}

/// A node's InternalIP, which the kubelet (simulated or this runtime) reports as its pods' `hostIP`.
pub(crate) fn node_ip(cl: &Cluster, node: &str) -> Option<String> {
    let n = cl.store.get(&crate::registry::GroupResource::new("", "nodes"), "", node)?;
    n.pointer("/status/addresses")?
        .as_array()?
        .iter()
        .find(|a| a.get("type").and_then(Value::as_str) == Some("InternalIP"))?
        .get("address")?
        .as_str()
        .map(str::to_string)
}

/// The file mode a volume item gets.
pub(crate) fn mode_of(v: Option<&Value>, default: u32) -> u32 {
    v.and_then(Value::as_i64).map(|m| m as u32 & 0o777).unwrap_or(default)
}

/// `base/rel` with no escape from `base` (`..` and absolute parts dropped).
pub(crate) fn join_inside(base: &Path, rel: &str) -> PathBuf {
    let mut p = base.to_path_buf();
    for part in rel.split('/') {
        if part.is_empty() || part == "." || part == ".." {
            continue;
        }
        p.push(part);
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_ips_are_loopback_unique_and_not_localhost() {
        let a = allocate_ip();
        let b = allocate_ip();
        assert_ne!(a, b);
        for ip in [a, b] {
            assert!(ip.is_loopback() && ip.octets()[1] != 0);
        }
        release_ip(a);
        release_ip(b);
    }
}
