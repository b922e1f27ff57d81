//! One pod's life as a kubelet lives it (pkg/kubelet/kuberuntime/kuberuntime_manager.go
//! `SyncPod`, pkg/kubelet/status/generate.go, pkg/kubelet/prober): volumes first, init
//! containers in order to completion, then every container under its restart policy with the
//! crash-loop back-off, probes, and the pod's status written as the kubelet writes it. A deleted
//! pod's processes get SIGTERM, then SIGKILL after the grace period, and the pod object is
//! removed once they are gone.

use super::logs::LogFile;
use super::spec::{self, Launch};
use super::{Runtime, process, volumes};
use crate::cluster::Cluster;
use crate::conditions::{self, Style};
use crate::image::container_id;
use crate::meta;
use serde_json::{Map, Value, json};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, watch};

const MANAGER: &str = "kubelet";

/// One run of a container (a restart is a new instance): its log and whether it ended.
#[derive(Debug, Clone)]
pub struct Instance {
    pub log: PathBuf,
    pub done: Arc<AtomicBool>,
}

/// What the runtime knows of one container.
#[derive(Debug, Clone)]
pub struct ContainerState {
    pub name: String,
    pub init: bool,
    pub image: String,
    /// Mapped to a process (false: simulated inside a runtime pod).
    pub runs: bool,
    pub state: Value,
    pub last_state: Value,
    pub restart_count: i64,
    pub ready: bool,
    pub started: bool,
    pub pid: Option<i32>,
    pub launch: Option<Launch>,
    /// The current instance and the one before it (for `previous`).
    pub instances: Vec<Instance>,
    pub container_id: String,
}

#[derive(Debug, Default)]
pub struct PodState {
    pub containers: Vec<ContainerState>,
    pub phase: String,
    pub start_time: Option<String>,
    pub volumes: volumes::VolumeState,
    pub kubeconfig: Option<PathBuf>,
    /// The last volume error reported (an event per new error, not per retry).
    mount_error: Option<String>,
}

/// A pod the runtime runs.
pub struct PodRun {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub ip: Ipv4Addr,
    pub dir: PathBuf,
    pub state: Mutex<PodState>,
    wake: Notify,
    /// The grace period once the pod is stopping.
    stop: watch::Sender<Option<Duration>>,
    publish: Mutex<()>,
    /// Process groups of running exec'd commands (and exec probes).
    execs: Mutex<std::collections::BTreeSet<i32>>,
}

impl PodRun {
    pub fn new(ns: &str, name: &str, uid: &str, ip: Ipv4Addr, dir: PathBuf) -> PodRun {
        PodRun {
            namespace: ns.into(),
            name: name.into(),
            uid: uid.into(),
            ip,
            dir,
            state: Mutex::new(PodState { phase: "Pending".into(), ..Default::default() }),
            wake: Notify::new(),
            stop: watch::channel(None).0,
            publish: Mutex::new(()),
            execs: Mutex::new(Default::default()),
        }
    }

    pub fn poke(&self) {
        self.wake.notify_one();
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, PodState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every process group of the pod: its containers' and the commands exec'd into them.
    pub fn process_groups(&self) -> Vec<i32> {
        let mut v: Vec<i32> = self.lock().containers.iter().filter_map(|c| c.pid).collect();
        v.extend(self.execs.lock().unwrap_or_else(|e| e.into_inner()).iter().copied());
        v
    }

    /// An exec'd command runs (until `exec_ended`): it ends with the pod.
    pub(crate) fn exec_started(&self, pgid: i32) {
        self.execs.lock().unwrap_or_else(|e| e.into_inner()).insert(pgid);
    }

    pub(crate) fn exec_ended(&self, pgid: i32) {
        self.execs.lock().unwrap_or_else(|e| e.into_inner()).remove(&pgid);
    }

    fn stopping(&self) -> Option<Duration> {
        *self.stop.borrow()
    }

    fn request_stop(&self, grace: Duration) {
        self.stop.send_if_modified(|s| match s {
            Some(g) if *g <= grace => false,
            _ => {
                *s = Some(grace);
                true
            }
        });
    }

    fn with_container<R>(&self, name: &str, init: bool, f: impl FnOnce(&mut ContainerState) -> R) -> Option<R> {
        let mut st = self.lock();
        st.containers.iter_mut().find(|c| c.name == name && c.init == init).map(f)
    }
}

fn now() -> String {
    meta::now()
}

/// Record an event about the pod as the kubelet's recorder does (repeats counted).
pub(crate) fn event(cl: &Cluster, run: &PodRun, type_: &str, reason: &str, message: &str) {
    if let Some(pod) = current(cl, run) {
        crate::client::event(cl, &pod, type_, reason, message, MANAGER);
    }
}

/// The current pod object if it is still this pod.
fn current(cl: &Cluster, run: &PodRun) -> Option<Arc<Value>> {
    cl.store
        .get(&crate::registry::GroupResource::new("", "pods"), &run.namespace, &run.name)
        .filter(|p| meta::uid(p) == run.uid)
}

/// Run a pod until it is deleted (or, for a pod that completes, until it is deleted too: its
/// logs stay readable meanwhile).
pub async fn run(cl: Arc<Cluster>, rt: Arc<Runtime>, run: Arc<PodRun>) {
    let Some(pod) = current(&cl, &run) else {
        finish(&cl, &rt, &run, false);
        return;
    };
    {
        let mut st = run.lock();
        st.start_time = Some(now());
        let has_inits = pod.pointer("/spec/initContainers").and_then(Value::as_array).is_some_and(|a| !a.is_empty());
        for (field, init) in [("initContainers", true), ("containers", false)] {
            for c in pod.pointer(&format!("/spec/{field}")).and_then(Value::as_array).into_iter().flatten() {
                let image = c.get("image").and_then(Value::as_str).unwrap_or("").to_string();
                st.containers.push(ContainerState {
                    name: c.get("name").and_then(Value::as_str).unwrap_or("").to_string(),
                    init,
                    runs: rt.executable(&image).is_some(),
                    image,
                    // Containers behind init containers wait `PodInitializing`, as the kubelet
                    // reports them (pkg/kubelet/kubelet_pods.go `convertToAPIContainerStatuses`).
                    state: json!({"waiting": {"reason": if has_inits { "PodInitializing" } else { "ContainerCreating" }}}),
                    last_state: json!({}),
                    restart_count: 0,
                    ready: false,
                    started: false,
                    pid: None,
                    launch: None,
                    instances: vec![],
                    container_id: String::new(),
                });
            }
        }
    }
    let _ = std::fs::create_dir_all(&run.dir);
    publish(&cl, &run);

    // Keep volumes current and watch for deletion, until the pod's processes are done.
    let watcher = tokio::spawn(watch_pod(cl.clone(), run.clone()));

    // Volumes must be set up before any container starts.
    let mut stop_rx = run.stop.subscribe();
    loop {
        if run.stopping().is_some() {
            break;
        }
        if mount(&cl, &run).is_ok() {
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = stop_rx.changed() => {}
        }
    }

    let policy = pod.pointer("/spec/restartPolicy").and_then(Value::as_str).unwrap_or("Always").to_string();
    let spec_of = |name: &str, init: bool| -> Value {
        let field = if init { "initContainers" } else { "containers" };
        pod.pointer(&format!("/spec/{field}"))
            .and_then(Value::as_array)
            .and_then(|a| a.iter().find(|c| c.get("name").and_then(Value::as_str) == Some(name)))
            .cloned()
            .unwrap_or_default()
    };
    // Init containers, in order, each to completion.
    let inits: Vec<String> = run.lock().containers.iter().filter(|c| c.init).map(|c| c.name.clone()).collect();
    let mut failed = false;
    for name in &inits {
        if run.stopping().is_some() {
            break;
        }
        let ok = supervise(cl.clone(), rt.clone(), run.clone(), spec_of(name, true), true, policy.clone()).await;
        if !ok {
            failed = true;
            break;
        }
    }
    if failed || run.stopping().is_some() {
        if failed {
            run.lock().phase = "Failed".into();
        }
    } else {
        let names: Vec<String> = run.lock().containers.iter().filter(|c| !c.init).map(|c| c.name.clone()).collect();
        let mut tasks = tokio::task::JoinSet::new();
        for name in names {
            tasks.spawn(supervise(cl.clone(), rt.clone(), run.clone(), spec_of(&name, false), false, policy.clone()));
        }
        while tasks.join_next().await.is_some() {}
        if run.stopping().is_none() {
            let st = run.lock();
            let all_zero = st
                .containers
                .iter()
                .filter(|c| !c.init && c.runs)
                .all(|c| c.state.pointer("/terminated/exitCode").and_then(Value::as_i64) == Some(0));
            drop(st);
            run.lock().phase = if all_zero { "Succeeded" } else { "Failed" }.into();
        }
    }
    publish(&cl, &run);
    // A completed pod stays (with its logs) until it is deleted.
    let mut stop_rx = run.stop.subscribe();
    while run.stopping().is_none() {
        if stop_rx.changed().await.is_err() {
            break;
        }
    }
    watcher.abort();
    finish(&cl, &rt, &run, true);
}

/// Mount (or refresh) the pod's volumes, and write its kubeconfig once the token is there.
fn mount(cl: &Cluster, run: &PodRun) -> Result<(), String> {
    let Some(pod) = current(cl, run) else { return Err("gone".into()) };
    let pvc_base = run.dir.parent().map(|p| p.join("..claims")).unwrap_or_else(|| run.dir.join("claims"));
    let mut st = run.lock();
    let r = volumes::sync(cl, &pod, &run.dir, &pvc_base, &mut st.volumes);
    if st.kubeconfig.is_none()
        && let Some(tf) = st.volumes.token_file.clone()
    {
        let path = run.dir.join("kubeconfig");
        if std::fs::write(&path, volumes::kubeconfig(cl, &run.namespace, &tf)).is_ok() {
            st.kubeconfig = Some(path);
        }
    }
    let report = match &r {
        Err(e) if st.mount_error.as_deref() != Some(e.as_str()) => Some(e.clone()),
        _ => None,
    };
    st.mount_error = r.as_ref().err().cloned();
    drop(st);
    if let Some(e) = report {
        event(cl, run, "Warning", "FailedMount", &e);
    }
    r
}

/// Every half second: the pod still there? being deleted? volumes current?
async fn watch_pod(cl: Arc<Cluster>, run: Arc<PodRun>) {
    loop {
        match current(&cl, &run) {
            None => run.request_stop(Duration::ZERO),
            Some(p) if meta::is_deleting(&p) => {
                let grace = p.pointer("/metadata/deletionGracePeriodSeconds").and_then(Value::as_i64).unwrap_or(30);
                run.request_stop(Duration::from_secs(grace.max(0) as u64));
            }
            Some(_) => {
                let _ = mount(&cl, &run);
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = run.wake.notified() => {}
        }
    }
}

/// The crash-loop back-off before restart `n` (1-based): none for the first, then base,
/// doubling, capped at 30 × base (10s to 5m by default).
fn backoff(base: Duration, n: i64) -> Duration {
    if n <= 1 {
        return Duration::ZERO;
    }
    let factor = 1u32 << (n - 2).min(16) as u32;
    (base * factor).min(base * 30)
}

fn go_duration(d: Duration) -> String {
    let s = d.as_secs();
    if s == 0 {
        format!("{}ms", d.as_millis())
    } else if s < 60 {
        format!("{s}s")
    } else {
        format!("{}m{}s", s / 60, s % 60)
    }
}

/// Run one container under the restart policy until it ends for good (or the pod stops).
/// Returns whether it ended well (exit 0; for init containers: may the pod go on).
async fn supervise(
    cl: Arc<Cluster>,
    rt: Arc<Runtime>,
    run: Arc<PodRun>,
    mut spec: Value,
    init: bool,
    policy: String,
) -> bool {
    let name = spec.get("name").and_then(Value::as_str).unwrap_or("").to_string();
    let mut image = spec.get("image").and_then(Value::as_str).unwrap_or("").to_string();
    let mut stop_rx = run.stop.subscribe();
    let Some(mut exe) = rt.executable(&image) else {
        // An unmapped container in a runtime pod is simulated: it runs (or, for an init
        // container, completes) at once.
        let cid = container_id(&run.uid, &name, 0);
        run.with_container(&name, init, |c| {
            c.container_id = cid.clone();
            if init {
                c.state = json!({"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now(), "finishedAt": now(), "containerID": cid}});
                c.ready = true;
            } else {
                c.state = json!({"running": {"startedAt": now()}});
                c.ready = true;
                c.started = true;
            }
        });
        publish(&cl, &run);
        if !init {
            while run.stopping().is_none() {
                if stop_rx.changed().await.is_err() {
                    break;
                }
            }
        }
        return true;
    };
    let mut ok = false;
    let mut restarts: i64 = 0;
    loop {
        if run.stopping().is_some() {
            break;
        }
        let Some(pod) = current(&cl, &run) else { break };
        let (dirs, kubeconfig) = {
            let st = run.lock();
            (st.volumes.dirs.clone(), st.kubeconfig.clone())
        };
        // The pod's address is its own even before the status carrying it is read back.
        let mut pod = (*pod).clone();
        if pod.pointer("/status/podIP").is_none()
            && let Some(m) = pod.as_object_mut()
        {
            let st = m.entry("status").or_insert_with(|| json!({}));
            st["podIP"] = run.ip.to_string().into();
            st["podIPs"] = json!([{"ip": run.ip.to_string()}]);
        }
        let launch = match spec::launch(&cl, &pod, &spec, &exe, &dirs, &run.dir, kubeconfig.as_deref()) {
            Ok(l) => l,
            Err(msg) => {
                let first = run
                    .with_container(&name, init, |c| {
                        let first = c.state.pointer("/waiting/message").and_then(Value::as_str) != Some(msg.as_str());
                        c.state = json!({"waiting": {"reason": "CreateContainerConfigError", "message": msg}});
                        first
                    })
                    .unwrap_or(false);
                if first {
                    event(&cl, &run, "Warning", "Failed", &format!("Error: {msg}"));
                }
                publish(&cl, &run);
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                    _ = stop_rx.changed() => {}
                }
                continue;
            }
        };
        let instance = restarts;
        let log_path = run.dir.join("logs").join(&name).join(format!("{instance}.log"));
        let cid = container_id(&run.uid, &name, instance);
        let log = match LogFile::create(&log_path) {
            Ok(l) => Arc::new(Mutex::new(l)),
            Err(e) => {
                tracing::warn!(path = %log_path.display(), error = %e, "cannot write the container log");
                break;
            }
        };
        let done = Arc::new(AtomicBool::new(false));
        let started_at = now();
        let spawned = process::spawn(&launch.argv, &launch.env, &launch.cwd, false).await;
        let has_startup = spec.get("startupProbe").is_some();
        let mut respec = false;
        let (code, reason, message) = match spawned {
            Err(e) => {
                let msg = format!(
                    "failed to create containerd task: failed to create shim task: OCI runtime create failed: exec: {:?}: {e}",
                    launch.argv.first().cloned().unwrap_or_default()
                );
                run.with_container(&name, init, |c| {
                    c.instances.push(Instance { log: log_path.clone(), done: done.clone() });
                    if c.instances.len() > 2 {
                        c.instances.remove(0);
                    }
                    c.container_id = cid.clone();
                    c.restart_count = restarts;
                });
                done.store(true, Ordering::SeqCst);
                (128, "StartError", Some(msg))
            }
            Ok(mut sp) => {
                if let Some(o) = sp.stdout.take() {
                    process::capture(o, "stdout", log.clone());
                }
                if let Some(e) = sp.stderr.take() {
                    process::capture(e, "stderr", log.clone());
                }
                let pid = sp.pid;
                event(&cl, &run, "Normal", "Pulled", &format!("Container image {image:?} already present on machine"));
                event(&cl, &run, "Normal", "Created", &format!("Created container: {name}"));
                event(&cl, &run, "Normal", "Started", &format!("Started container {name}"));
                let ready_without_probe = spec.get("readinessProbe").is_none();
                run.with_container(&name, init, |c| {
                    c.instances.push(Instance { log: log_path.clone(), done: done.clone() });
                    if c.instances.len() > 2 {
                        c.instances.remove(0);
                    }
                    c.pid = Some(pid);
                    c.launch = Some(launch.clone());
                    c.container_id = cid.clone();
                    c.restart_count = restarts;
                    c.state = json!({"running": {"startedAt": started_at}});
                    c.started = !has_startup;
                    c.ready = !init && !has_startup && ready_without_probe;
                });
                publish(&cl, &run);
                let (kill_tx, mut kill_rx) = tokio::sync::mpsc::channel::<&'static str>(1);
                let probes = if init {
                    None
                } else {
                    Some(tokio::spawn(super::stream::probe_loop(
                        cl.clone(),
                        run.clone(),
                        name.clone(),
                        spec.clone(),
                        launch.clone(),
                        kill_tx,
                    )))
                };
                let mut exit = sp.exit;
                let mut killed_by_probe = false;
                let code = loop {
                    tokio::select! {
                        c = &mut exit => break c.unwrap_or(137),
                        // A changed image restarts the container (the kubelet compares the
                        // container's spec hash: "definition changed").
                        _ = tokio::time::sleep(Duration::from_millis(500)), if !init && !respec && !killed_by_probe => {
                            if let Some(p) = current(&cl, &run)
                                && let Some(new) = container_spec(&p, &name)
                                && new.get("image") != spec.get("image")
                            {
                                respec = true;
                                event(&cl, &run, "Normal", "Killing", &format!("Container {name} definition changed, will be restarted"));
                                let grace = p.pointer("/spec/terminationGracePeriodSeconds").and_then(Value::as_i64).unwrap_or(30);
                                tokio::spawn(stop_container(run.clone(), spec.clone(), launch.clone(), pid, Duration::from_secs(grace.max(0) as u64)));
                            }
                        }
                        Some(probe) = kill_rx.recv(), if !killed_by_probe => {
                            // A failed liveness or startup probe: the container is killed with
                            // the pod's grace period and restarted under the policy.
                            killed_by_probe = true;
                            event(&cl, &run, "Normal", "Killing", &format!("Container {name} failed {probe} probe, will be restarted"));
                            let grace = pod.pointer("/spec/terminationGracePeriodSeconds").and_then(Value::as_i64).unwrap_or(30);
                            tokio::spawn(stop_container(
                                run.clone(),
                                spec.clone(),
                                launch.clone(),
                                pid,
                                Duration::from_secs(grace.max(0) as u64),
                            ));
                        }
                        changed = stop_rx.changed() => {
                            let grace = match (changed, run.stopping()) {
                                (Ok(()), Some(g)) => g,
                                _ => Duration::ZERO,
                            };
                            event(&cl, &run, "Normal", "Killing", &format!("Stopping container {name}"));
                            tokio::spawn(stop_container(run.clone(), spec.clone(), launch.clone(), pid, grace));
                            // Keep waiting for the exit; a forced delete (grace 0) kills at once.
                            let code = loop {
                                tokio::select! {
                                    c = &mut exit => break c.unwrap_or(137),
                                    r = stop_rx.changed() => {
                                        if r.is_err() || run.stopping() == Some(Duration::ZERO) {
                                            process::signal_group(pid, libc::SIGKILL);
                                            break (&mut exit).await.unwrap_or(137);
                                        }
                                    }
                                }
                            };
                            break code;
                        }
                    }
                };
                if let Some(p) = probes {
                    p.abort();
                }
                // A process group member may hold the pipes: end the group, then give the
                // capture threads a moment to drain.
                process::signal_group(pid, libc::SIGKILL);
                run.with_container(&name, init, |c| c.pid = None);
                tokio::time::sleep(Duration::from_millis(20)).await;
                done.store(true, Ordering::SeqCst);
                (code, if code == 0 { "Completed" } else { "Error" }, None)
            }
        };
        let mut terminated = json!({"exitCode": code, "reason": reason, "startedAt": started_at, "finishedAt": now(), "containerID": cid});
        if let Some(m) = message {
            terminated["message"] = m.into();
        }
        let restart = respec
            || match policy.as_str() {
                "Never" => false,
                "OnFailure" => code != 0,
                _ => !init || code != 0,
            };
        if run.stopping().is_some() || !restart {
            ok = code == 0;
            run.with_container(&name, init, |c| {
                c.state = json!({"terminated": terminated});
                c.ready = init && code == 0;
                c.started = false;
            });
            publish(&cl, &run);
            break;
        }
        restarts += 1;
        let wait = if respec { Duration::ZERO } else { backoff(rt.backoff_base, restarts) };
        if respec
            && let Some(p) = current(&cl, &run)
            && let Some(new) = container_spec(&p, &name)
        {
            image = new.get("image").and_then(Value::as_str).unwrap_or("").to_string();
            if let Some(e) = rt.executable(&image) {
                exe = e;
            }
            spec = new;
            let img = image.clone();
            run.with_container(&name, init, |c| c.image = img);
        }
        run.with_container(&name, init, |c| {
            c.last_state = json!({"terminated": terminated});
            c.ready = false;
            c.started = false;
            if !wait.is_zero() {
                c.state = json!({"waiting": {"reason": "CrashLoopBackOff", "message": format!("back-off {} restarting failed container={name} pod={}_{}({})", go_duration(wait), run.name, run.namespace, run.uid)}});
            }
        });
        publish(&cl, &run);
        if !wait.is_zero() {
            event(
                &cl,
                &run,
                "Warning",
                "BackOff",
                &format!(
                    "Back-off restarting failed container {name} in pod {}_{}({})",
                    run.name, run.namespace, run.uid
                ),
            );
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stop_rx.changed() => {}
            }
        }
    }
    ok
}

/// A regular container's spec in the pod.
fn container_spec(pod: &Value, name: &str) -> Option<Value> {
    pod.pointer("/spec/containers")?
        .as_array()?
        .iter()
        .find(|c| c.get("name").and_then(Value::as_str) == Some(name))
        .cloned()
}

/// Stop a container as the kubelet's `killContainer` does: its `preStop` hook (exec, httpGet or
/// sleep) within the grace period, then SIGTERM, then SIGKILL once the grace period is over (at
/// least 2 more seconds after a hook that used it all up).
async fn stop_container(run: Arc<PodRun>, spec: Value, launch: Launch, pgid: i32, grace: Duration) {
    let Some(hook) = spec.pointer("/lifecycle/preStop").filter(|_| !grace.is_zero()) else {
        return terminate(pgid, grace).await;
    };
    let started = tokio::time::Instant::now();
    let run_hook = async {
        if let Some(secs) = hook.pointer("/sleep/seconds").and_then(Value::as_i64) {
            tokio::time::sleep(Duration::from_secs(secs.max(0) as u64)).await;
        } else {
            let mut probe = hook.clone();
            if let Some(m) = probe.as_object_mut() {
                m.insert("timeoutSeconds".into(), grace.as_secs().max(1).into());
            }
            super::stream::probe_once(&run, &spec, &launch, &probe).await;
        }
    };
    let _ = tokio::time::timeout(grace, run_hook).await;
    terminate(pgid, grace.saturating_sub(started.elapsed()).max(Duration::from_secs(2))).await;
}

/// SIGTERM a process group, SIGKILL it after `grace` if it is still there.
async fn terminate(pgid: i32, grace: Duration) {
    if grace.is_zero() {
        process::signal_group(pgid, libc::SIGKILL);
        return;
    }
    process::signal_group(pgid, libc::SIGTERM);
    let until = tokio::time::Instant::now() + grace;
    while tokio::time::Instant::now() < until {
        if !process::group_alive(pgid) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    process::signal_group(pgid, libc::SIGKILL);
}

/// The pod's processes are gone: remove its files and the pod object (as the kubelet's final
/// delete with grace 0 does), release its address.
fn finish(cl: &Cluster, rt: &Arc<Runtime>, run: &PodRun, remove_object: bool) {
    rt.remove(run);
    // Commands still exec'd into the pod end with it.
    for pgid in run.execs.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        process::signal_group(*pgid, libc::SIGKILL);
    }
    super::release_ip(run.ip);
    let _ = std::fs::remove_dir_all(&run.dir);
    if remove_object
        && current(cl, run).is_some_and(|p| meta::is_deleting(&p))
        && let Some(pdef) = crate::client::def(cl, "", "pods")
    {
        let opts = crate::ops::DeleteOpts {
            grace_period_seconds: Some(0),
            precondition_uid: Some(run.uid.clone()),
            ..Default::default()
        };
        let _ = crate::ops::delete(cl, &pdef, &run.namespace, &run.name, &opts);
    }
    // A pod of the same name made meanwhile (a StatefulSet's replacement) starts now.
    if let Some(next) = cl.store.get(&crate::registry::GroupResource::new("", "pods"), &run.namespace, &run.name)
        && meta::uid(&next) != run.uid
        && next.pointer("/spec/nodeName").and_then(Value::as_str).is_some_and(|n| !n.is_empty())
        && rt.runs(&next)
    {
        rt.sync(&next);
    }
}

/// The status a kubelet writes for the pod now.
fn status(run: &PodRun, pod: &Value) -> Value {
    let st = run.lock();
    let now = now();
    let old = pod.get("status").cloned().unwrap_or_else(|| json!({}));
    let mut init_statuses = vec![];
    let mut statuses = vec![];
    let mut pending_init: Option<String> = None;
    let mut not_ready = vec![];
    for c in &st.containers {
        let (img, image_id) = crate::image::image_and_id(&c.image);
        let running_or_done =
            c.state.get("running").is_some() || c.state.get("terminated").is_some() || c.restart_count > 0;
        let mut s = Map::new();
        s.insert("name".into(), c.name.clone().into());
        s.insert("state".into(), c.state.clone());
        s.insert("lastState".into(), c.last_state.clone());
        s.insert("ready".into(), c.ready.into());
        s.insert("restartCount".into(), c.restart_count.into());
        s.insert("image".into(), img.into());
        s.insert("imageID".into(), if running_or_done { image_id.into() } else { "".into() });
        if !c.container_id.is_empty() {
            s.insert("containerID".into(), c.container_id.clone().into());
        }
        s.insert("started".into(), c.started.into());
        if c.init {
            if pending_init.is_none() && c.state.pointer("/terminated/exitCode").and_then(Value::as_i64) != Some(0) {
                pending_init = Some(c.name.clone());
            }
            init_statuses.push(Value::Object(s));
        } else {
            if !c.ready {
                not_ready.push(c.name.clone());
            }
            statuses.push(Value::Object(s));
        }
    }
    let phase = match st.phase.as_str() {
        "Succeeded" | "Failed" => st.phase.clone(),
        _ if pending_init.is_some() => "Pending".to_string(),
        _ if statuses.iter().any(|s| {
            s.pointer("/state/running").is_some() || s.get("restartCount").and_then(Value::as_i64) > Some(0)
        }) =>
        {
            "Running".to_string()
        }
        _ => "Pending".to_string(),
    };
    let terminal = phase == "Succeeded" || phase == "Failed";
    let mut conds = conditions::of(Some(&old));
    let sandbox = !terminal;
    conditions::set(
        &mut conds,
        Style::Pod,
        "PodReadyToStartContainers",
        if sandbox { "True" } else { "False" },
        "",
        "",
        &now,
    );
    match &pending_init {
        Some(n) if !terminal => conditions::set(
            &mut conds,
            Style::Pod,
            "Initialized",
            "False",
            "ContainersNotInitialized",
            &format!("containers with incomplete status: [{n}]"),
            &now,
        ),
        _ => conditions::set(&mut conds, Style::Pod, "Initialized", "True", "", "", &now),
    }
    if terminal {
        let reason = if phase == "Succeeded" { "PodCompleted" } else { "PodFailed" };
        conditions::set(&mut conds, Style::Pod, "Ready", "False", reason, "", &now);
        conditions::set(&mut conds, Style::Pod, "ContainersReady", "False", reason, "", &now);
    } else if not_ready.is_empty() && pending_init.is_none() {
        conditions::set(&mut conds, Style::Pod, "Ready", "True", "", "", &now);
        conditions::set(&mut conds, Style::Pod, "ContainersReady", "True", "", "", &now);
    } else {
        let msg = format!("containers with unready status: [{}]", not_ready.join(" "));
        conditions::set(&mut conds, Style::Pod, "Ready", "False", "ContainersNotReady", &msg, &now);
        conditions::set(&mut conds, Style::Pod, "ContainersReady", "False", "ContainersNotReady", &msg, &now);
    }
    conditions::set(&mut conds, Style::Pod, "PodScheduled", "True", "", "", &now);
    let order = ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"];
    conds.sort_by_key(|c| {
        order.iter().position(|o| c.get("type").and_then(Value::as_str) == Some(o)).unwrap_or(order.len())
    });
    let host_ip = old.get("hostIP").and_then(Value::as_str).map(str::to_string).unwrap_or_else(|| "10.0.0.1".into());
    let ip = run.ip.to_string();
    let mut s = Map::new();
    s.insert("phase".into(), phase.into());
    s.insert("conditions".into(), Value::Array(conds));
    s.insert("hostIP".into(), host_ip.clone().into());
    s.insert("hostIPs".into(), json!([{"ip": host_ip}]));
    s.insert("podIP".into(), ip.clone().into());
    s.insert("podIPs".into(), json!([{"ip": ip}]));
    s.insert(
        "startTime".into(),
        old.get("startTime").cloned().unwrap_or_else(|| st.start_time.clone().unwrap_or_else(|| now.clone()).into()),
    );
    if !init_statuses.is_empty() {
        s.insert("initContainerStatuses".into(), Value::Array(init_statuses));
    }
    s.insert("containerStatuses".into(), Value::Array(statuses));
    s.insert(
        "qosClass".into(),
        old.get("qosClass").cloned().unwrap_or_else(|| crate::builtin::defaults::pod_qos_class(pod).into()),
    );
    Value::Object(s)
}

/// Write the pod's status if it changed (re-reading the pod on a conflict).
pub(crate) fn publish(cl: &Cluster, run: &PodRun) {
    let _guard = run.publish.lock().unwrap_or_else(|e| e.into_inner());
    let Some(pdef) = crate::client::def(cl, "", "pods") else { return };
    for _ in 0..5 {
        let Some(pod) = current(cl, run) else { return };
        if pod.pointer("/spec/nodeName").and_then(Value::as_str).is_none_or(str::is_empty) {
            return;
        }
        // The host address comes from the node, as the simulated kubelet writes it.
        let mut pod_v = (*pod).clone();
        if pod_v.pointer("/status/hostIP").is_none() {
            let node = pod.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or("");
            if let Some(ip) = super::node_ip(cl, node)
                && let Some(m) = pod_v.as_object_mut()
            {
                let st = m.entry("status").or_insert_with(|| json!({}));
                st["hostIP"] = ip.into();
            }
        }
        let next = status(run, &pod_v);
        if pod.get("status") == Some(&next) {
            return;
        }
        let mut obj = (*pod).clone();
        if let Some(m) = obj.as_object_mut() {
            m.insert("status".into(), next);
        }
        let opts =
            crate::ops::WriteOpts { subresource: Some("status".into()), ..crate::ops::WriteOpts::system(MANAGER) };
        match crate::ops::update(cl, &pdef, &run.namespace, &run.name, obj, &opts) {
            Ok(_) => return,
            Err(e) if e.code == 409 => continue,
            Err(e) => {
                tracing::debug!(pod = %run.name, error = %e.message, "pod status update failed");
                return;
            }
        }
    }
}

/// The container a request names, with upstream's messages when it names none or a wrong one
/// (pkg/registry/core/pod/strategy.go `LogLocation`, `streamLocation`).
pub fn pick_container(pod: &Value, requested: Option<&str>) -> Result<String, String> {
    let names = |field: &str| -> Vec<String> {
        pod.pointer(&format!("/spec/{field}"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| c.get("name").and_then(Value::as_str).map(str::to_string))
            .collect()
    };
    let containers = names("containers");
    let inits = names("initContainers");
    let name = meta::name(pod);
    match requested.filter(|s| !s.is_empty()) {
        Some(c) => {
            if containers.iter().chain(inits.iter()).any(|n| n == c) {
                Ok(c.to_string())
            } else {
                Err(format!("container {c} is not valid for pod {name}"))
            }
        }
        None => {
            if let Some(d) =
                pod.pointer("/metadata/annotations/kubectl.kubernetes.io~1default-container").and_then(Value::as_str)
                && containers.iter().any(|n| n == d)
            {
                return Ok(d.to_string());
            }
            match containers.len() {
                1 => Ok(containers[0].clone()),
                0 => Err(format!("a container name must be specified for pod {name}")),
                _ => {
                    let mut e = format!(
                        "a container name must be specified for pod {name}, choose one of: [{}]",
                        containers.join(" ")
                    );
                    if !inits.is_empty() {
                        e.push_str(&format!(" or one of the init containers: [{}]", inits.join(" ")));
                    }
                    Err(e)
                }
            }
        }
    }
}

/// The state of a container of a running pod.
pub fn container(run: &PodRun, name: &str) -> Option<ContainerState> {
    let st = run.lock();
    st.containers.iter().find(|c| c.name == name).cloned()
}

pub(crate) fn set_ready(cl: &Cluster, run: &PodRun, name: &str, ready: Option<bool>, started: Option<bool>) {
    let changed = run
        .with_container(name, false, |c| {
            let before = (c.ready, c.started);
            if let Some(s) = started {
                c.started = s;
            }
            if let Some(r) = ready {
                c.ready = r && c.started;
            }
            before != (c.ready, c.started)
        })
        .unwrap_or(false);
    if changed {
        publish(cl, run);
    }
}
