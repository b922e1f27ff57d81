//! An operator binary as a child process, run the way a pod of its Deployment runs it: its args
//! and env (the Deployment's, or the test's), a kubeconfig (a ServiceAccount's, see
//! [`crate::service_account`]), nothing of the test's own environment; its log captured, its
//! health address, signals, memory and exit.

use crate::WAIT;
use k8s_openapi::api::apps::v1::Deployment;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

/// What to start; [`Spawn::spawn`] starts it.
pub struct Spawn {
    program: PathBuf,
    name: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
    cleared: Vec<String>,
    kubeconfig: Option<PathBuf>,
    health: Option<SocketAddr>,
    inherit_stderr: bool,
}

impl Spawn {
    /// `program` (e.g. `env!("CARGO_BIN_EXE_vesper-operator")`) as `name`: the name of its log and
    /// of the process in messages, as a pod's name. Without the test's RUST_LOG and POD_NAME,
    /// with NO_COLOR=1 and an empty stdin.
    pub fn new(program: impl AsRef<Path>, name: &str) -> Spawn {
        Spawn {
            program: program.as_ref().to_path_buf(),
            name: name.to_string(),
            args: vec![],
            env: vec![],
            cleared: vec![],
            kubeconfig: None,
            health: None,
            inherit_stderr: false,
        }
    }

    pub fn arg(mut self, arg: impl Into<String>) -> Spawn {
        self.args.push(arg.into());
        self
    }

    pub fn args<S: Into<String>>(mut self, args: impl IntoIterator<Item = S>) -> Spawn {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> Spawn {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    pub fn envs(mut self, vars: impl IntoIterator<Item = (String, String)>) -> Spawn {
        self.env.extend(vars);
        self
    }

    /// Leave out the test's own variables starting with `prefix` (`VESPER_`: the operator's
    /// flags' fallbacks), so that the process has only what a pod would have.
    pub fn clear_env(mut self, prefix: &str) -> Spawn {
        self.cleared.push(prefix.to_string());
        self
    }

    /// `KUBECONFIG`.
    pub fn kubeconfig(mut self, path: &Path) -> Spawn {
        self.kubeconfig = Some(path.to_path_buf());
        self
    }

    /// Run as a replica of this Deployment: its (first) container's args and env, `listen` flags
    /// (`--health-addr`, each passed as `--flag=...`) moved to free loopback ports, the downward
    /// API's `metadata.name` and `metadata.namespace` filled in with this process' name and the
    /// Deployment's namespace.
    pub fn pod(self, d: &Deployment, listen: &[&str]) -> Spawn {
        let name = self.name.clone();
        let (args, env) = pod_args_and_env(d, &name, listen);
        self.args(args).envs(env)
    }

    /// Serve on a free loopback port the test picks: each of `flags` (`--health-addr`,
    /// `--metrics-addr`) is passed that address, which is then its health address.
    pub fn listen(mut self, flags: &[&str]) -> Spawn {
        let addr =
            std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free loopback port");
        for f in flags {
            self.args.push(format!("{f}={addr}"));
        }
        self.health = Some(addr);
        self
    }

    /// Log warnings only, to the test's stderr (stdout dropped), not captured: as the benchmarks
    /// run it, watching it live. [`Proc::log_text`] is then empty.
    pub fn warnings_to_terminal(mut self) -> Spawn {
        self.inherit_stderr = true;
        self.env("RUST_LOG", "warn")
    }

    fn command(&self) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.program);
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy();
            if k == "RUST_LOG" || k == "POD_NAME" || self.cleared.iter().any(|p| k.starts_with(p.as_str())) {
                cmd.env_remove(k.as_ref());
            }
        }
        cmd.env("NO_COLOR", "1").args(&self.args).envs(self.env.iter().map(|(k, v)| (k, v))).stdin(Stdio::null());
        if let Some(k) = &self.kubeconfig {
            cmd.env("KUBECONFIG", k);
        }
        cmd.kill_on_drop(true);
        cmd
    }

    /// Run it to its end (a one-shot command such as `varroa-operator gateway-ca`); fails the
    /// test, with its stderr, unless it exits 0. Returns its stdout.
    pub async fn output(self) -> String {
        let out = self
            .command()
            .output()
            .await
            .unwrap_or_else(|e| panic!("run {} ({}): {e}", self.name, self.program.display()));
        assert!(
            out.status.success(),
            "{} failed ({}):\n{}",
            self.name,
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// [`Spawn::spawn`], then wait until /readyz answers 200.
    pub async fn spawn_ready(self, within: Duration) -> Proc {
        let p = self.spawn();
        p.wait_ready(within).await;
        p
    }

    /// Start it (within the test's tokio runtime); it is killed when the [`Proc`] is dropped.
    pub fn spawn(self) -> Proc {
        let dir = tempfile::tempdir().expect("a directory for the log");
        let log = dir.path().join(format!("{}.log", self.name));
        let mut cmd = self.command();
        if self.inherit_stderr {
            cmd.stdout(Stdio::null()).stderr(Stdio::inherit());
        } else {
            let out = std::fs::File::create(&log).unwrap_or_else(|e| panic!("create {}: {e}", log.display()));
            let err = out.try_clone().expect("the log file, for stderr");
            cmd.stdout(out).stderr(err);
        }
        let child = cmd.spawn().unwrap_or_else(|e| panic!("start {} ({}): {e}", self.name, self.program.display()));
        let pid = child.id().expect("a running child has a pid");
        Proc { name: self.name, pid, child, log, health: self.health, _dir: dir }
    }
}

/// A running child process, killed when dropped, so that a failing test leaves nothing running.
pub struct Proc {
    /// Its name in messages (a pod's name).
    pub name: String,
    pid: u32,
    child: tokio::process::Child,
    log: PathBuf,
    health: Option<SocketAddr>,
    _dir: tempfile::TempDir,
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Its stdout and stderr so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `kill <sig> <pid>` (`-TERM`, `-STOP`, ...).
    pub fn signal(&self, sig: &str) {
        let st = std::process::Command::new("kill").args([sig, &self.pid.to_string()]).status().expect("kill runs");
        assert!(st.success(), "kill {sig} {} ({})", self.pid, self.name);
    }

    /// SIGTERM, as the kubelet stops a container.
    pub fn terminate(&self) {
        self.signal("-TERM");
    }

    /// Wait until it exits; fails the test, with its log, if it does not within `within`.
    pub async fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        match tokio::time::timeout(within, self.child.wait()).await {
            Ok(status) => status.unwrap_or_else(|e| panic!("waiting for {}: {e}", self.name)),
            Err(_) => panic!("{} did not exit within {within:?}:\n{}", self.name, self.log_text()),
        }
    }

    /// Whether it still runs.
    pub fn running(&mut self) -> bool {
        self.child.try_wait().unwrap_or_else(|e| panic!("{}: {e}", self.name)).is_none()
    }

    /// The address of /healthz, /readyz and /metrics: the one of [`Spawn::listen`], or the one its
    /// log names (opkit's "serving /healthz ... addr=..." line), waited for.
    pub async fn health_addr(&self) -> String {
        if let Some(a) = self.health {
            return a.to_string();
        }
        let this = self;
        let found = crate::wait::poll(WAIT, Duration::from_millis(50), move || async move {
            this.log_text().lines().find(|l| l.contains("serving /healthz")).and_then(|l| {
                let rest = &l[l.find("addr=")? + "addr=".len()..];
                Some(rest.split_whitespace().next()?.to_string())
            })
        })
        .await;
        found.unwrap_or_else(|| panic!("{} serves no /healthz within {WAIT:?}:\n{}", self.name, self.log_text()))
    }

    /// `GET path` on its health address: (status, body).
    pub async fn get(&self, path: &str) -> (u16, String) {
        crate::http::get(&self.health_addr().await, path).await
    }

    /// Its /metrics.
    pub async fn metrics(&self) -> String {
        self.get("/metrics").await.1
    }

    /// Its /metrics, read.
    pub async fn scrape(&self) -> crate::metrics::Scrape {
        crate::metrics::Scrape::parse(&self.metrics().await)
    }

    /// Wait until /readyz answers 200 (connection refused meanwhile is fine).
    pub async fn wait_ready(&self, within: Duration) {
        let addr = self.health_addr().await;
        let addr = addr.as_str();
        let ready = crate::wait::poll(within, Duration::from_millis(20), move || async move {
            matches!(crate::http::try_get(addr, "/readyz").await, Ok((200, _))).then_some(())
        })
        .await;
        assert!(ready.is_some(), "{} was not ready within {within:?}:\n{}", self.name, self.log_text());
    }

    /// Its memory, from /proc.
    pub fn memory(&self) -> Memory {
        let path = format!("/proc/{}/status", self.pid);
        let status = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{} ({}): {e}", path, self.name));
        let kib = |key: &str| -> u64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap_or_else(|| panic!("{path}: no {key}"))
        };
        Memory { rss_kib: kib("VmRSS:"), peak_kib: kib("VmHWM:") }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.try_wait();
    }
}

/// A process' memory.
#[derive(Clone, Copy, Debug)]
pub struct Memory {
    /// Resident now (VmRSS), KiB.
    pub rss_kib: u64,
    /// Resident at the peak (VmHWM), KiB.
    pub peak_kib: u64,
}

impl Memory {
    /// (resident, peak) in MiB.
    pub fn mib(&self) -> (f64, f64) {
        (self.rss_kib as f64 / 1024.0, self.peak_kib as f64 / 1024.0)
    }
}

/// The logs of these processes, each under a header, for failure messages.
pub fn logs(procs: &[&Proc]) -> String {
    procs.iter().map(|p| format!("--- log of {} ---\n{}", p.name, p.log_text())).collect::<Vec<_>>().join("\n")
}

/// The Deployment's (first) container args and env for a run outside the cluster: each `listen`
/// flag's address becomes a free loopback port (`127.0.0.1:0`), the downward API fields get
/// this pod's values.
pub fn pod_args_and_env(d: &Deployment, pod_name: &str, listen: &[&str]) -> (Vec<String>, Vec<(String, String)>) {
    let what = format!("Deployment {}", d.metadata.name.as_deref().unwrap_or("?"));
    let spec = d.spec.as_ref().unwrap_or_else(|| panic!("{what}: no spec"));
    let pod = spec.template.spec.as_ref().unwrap_or_else(|| panic!("{what}: no pod spec"));
    let c = pod.containers.first().unwrap_or_else(|| panic!("{what}: no container"));
    let mut replaced = 0;
    let args = c
        .args
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|a| match a.split_once('=') {
            Some((flag, _)) if listen.contains(&flag) => {
                replaced += 1;
                format!("{flag}=127.0.0.1:0")
            }
            _ => a,
        })
        .collect();
    assert_eq!(replaced, listen.len(), "{what}: passes each of {listen:?} once, as --flag=...");
    let namespace = d.metadata.namespace.clone().unwrap_or_default();
    let env = c
        .env
        .iter()
        .flatten()
        .map(|e| {
            let v = match (&e.value, e.value_from.as_ref().and_then(|v| v.field_ref.as_ref())) {
                (Some(v), _) => v.clone(),
                (None, Some(f)) if f.field_path == "metadata.name" => pod_name.to_string(),
                (None, Some(f)) if f.field_path == "metadata.namespace" => namespace.clone(),
                _ => panic!("{what}: env {} has a source optest::process does not fill in: teach it", e.name),
            };
            (e.name.clone(), v)
        })
        .collect();
    (args, env)
}
