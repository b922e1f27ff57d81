//! The real `varroa-operator` binary against a devcluster: start it as a ServiceAccount, read
//! its log, its endpoints and its memory, stop it as the kubelet does.

#![allow(dead_code)]

use devcluster::DevCluster;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use serde_json::json;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A kubeconfig acting as the ServiceAccount `namespace/name` (a TokenRequest token), at `path`.
pub async fn service_account_kubeconfig(dc: &DevCluster, namespace: &str, name: &str, path: &Path) {
    let sas: Api<ServiceAccount> = Api::namespaced(dc.client(), namespace);
    let tr = TokenRequest {
        spec: TokenRequestSpec { audiences: vec![], expiration_seconds: Some(3600), ..Default::default() },
        ..Default::default()
    };
    let token = sas
        .create_token_request(name, &PostParams::default(), &tr)
        .await
        .unwrap_or_else(|e| panic!("a token for {namespace}/{name}: {e}"))
        .status
        .expect("the TokenRequest's status")
        .token;
    let kc = kube::config::Kubeconfig::from_yaml(dc.kubeconfig_yaml()).expect("the admin kubeconfig");
    let mut v = serde_json::to_value(&kc).expect("kubeconfig as JSON");
    v["users"] = json!([{"name": name, "user": {"token": token}}]);
    v["contexts"][0]["context"]["user"] = json!(name);
    std::fs::write(path, v.to_string()).expect("write the kubeconfig");
}

/// A child process killed (and reaped) when dropped.
pub struct Proc {
    pub name: String,
    pub child: Child,
    pub log: PathBuf,
}

/// Start `varroa-operator` with `args` (plus a free loopback health port), as `pod_name`, with
/// only what a pod would have in its environment.
pub fn spawn(pod_name: &str, args: &[&str], kubeconfig: &Path, dir: &Path) -> Proc {
    let log = dir.join(format!("{pod_name}.log"));
    let out = std::fs::File::create(&log).expect("log file");
    let err = out.try_clone().expect("log file");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_varroa-operator"));
    for (k, _) in std::env::vars() {
        if k.starts_with("VARROA_") || k == "RUST_LOG" || k == "POD_NAME" {
            cmd.env_remove(k);
        }
    }
    cmd.env("NO_COLOR", "1")
        .env("POD_NAME", pod_name)
        .env("KUBECONFIG", kubeconfig)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .arg("--health-addr=127.0.0.1:0")
        .args(args);
    let child = cmd.spawn().expect("start varroa-operator");
    Proc { name: pod_name.to_string(), child, log }
}

impl Proc {
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn signal(&self, sig: &str) {
        let pid = self.child.id().to_string();
        let st = Command::new("kill").args([sig, &pid]).status().expect("kill runs");
        assert!(st.success(), "kill {sig} {pid} ({})", self.name);
    }

    /// SIGTERM, as the kubelet stops a container.
    pub fn terminate(&self) {
        self.signal("-TERM");
    }

    /// Wait for the process to exit, until the deadline.
    pub fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                return st;
            }
            assert!(Instant::now() < deadline, "{} did not exit within {within:?}:\n{}", self.name, self.log_text());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether it still runs.
    pub fn running(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    /// The address of /healthz, /readyz and /metrics, from the log.
    pub fn health_addr(&self, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let found = self.log_text().lines().find(|l| l.contains("serving /healthz")).and_then(|l| {
                let rest = &l[l.find("addr=")? + "addr=".len()..];
                Some(rest.split_whitespace().next()?.to_string())
            });
            if let Some(a) = found {
                return a;
            }
            assert!(Instant::now() < deadline, "{} serves no /healthz:\n{}", self.name, self.log_text());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Resident memory (VmRSS) in KiB, from /proc.
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).expect("/proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .expect("VmRSS")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET path` on a local HTTP server: (status, body).
pub fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").expect("send");
    let mut buf = String::new();
    s.read_to_string(&mut buf).unwrap_or_else(|e| panic!("GET {addr}{path}: {e}"));
    let status = buf.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = buf.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

/// The sum of a metric's samples in a Prometheus text exposition.
pub fn sample(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

pub fn holder(l: &Lease) -> String {
    l.spec.as_ref().and_then(|s| s.holder_identity.clone()).unwrap_or_default()
}

/// Blocking work (waiting for a child, plain HTTP) from an async test.
pub fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}
