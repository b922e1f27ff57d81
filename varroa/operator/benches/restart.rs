//! Varroa benchmark (`cargo bench -p varroa-operator --bench restart`): 500 Controllers are
//! provisioned, the operator is restarted, and the new process reconciles all of them. Reported:
//! time to all Running, the time the new process takes to reconcile every controller once, the
//! API writes it makes doing so (zero expected), and its memory.
//!
//! The operator runs as its own process (the release binary, resync and stamp intervals of 1h
//! so that only the restart is measured) against an in-process devcluster prepared as the
//! end-to-end tests prepare it (tests/support), with the admin's credentials, or with the token
//! of `varroa-system/varroa-operator` (exactly deploy/varroa/rbac.yaml) when VARROA_BENCH_AS=sa.
//! The floor is the reads a reconcile makes (11 GETs and one LIST per controller) and the lists
//! a starting operator makes, sent directly by a client with the same credentials, in the same
//! run. Prints a
//! Markdown table for docs/benchmarks.md.

#[path = "../tests/support/mod.rs"]
mod support;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::TEAM;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use varroa_api::{Controller, ControllerPhase};

const N: usize = 500;
const CONCURRENCY: usize = 32;
const TIMEOUT: Duration = Duration::from_secs(900);
/// The counters must stay still this long to call the operator idle.
const QUIET: Duration = Duration::from_secs(3);
const POLL: Duration = Duration::from_millis(100);
/// Longer than the run: the restart is measured, not the periodic resync and lastReconciledAt
/// stamp (one status write per controller per stamp interval, by design).
const INTERVALS: [&str; 4] = ["--resync-interval", "1h", "--stamp-interval", "1h"];

/// Controller `i`: most with an empty spec, every fourth with an Ingress, every fourth with its
/// own resources.
fn controller(i: usize) -> Controller {
    let name = format!("ci-{i}");
    let spec = match i % 4 {
        1 => json!({"ingress": {"host": format!("{name}.team-a.example.com"), "tlsSecretName": format!("{name}-tls")}}),
        3 => json!({"resources": {"requests": {"cpu": "250m", "memory": "512Mi"}}}),
        _ => json!({}),
    };
    serde_json::from_value(json!({
        "apiVersion": "varroa.dev/v1alpha1", "kind": "Controller",
        "metadata": {"name": name, "namespace": TEAM}, "spec": spec,
    }))
    .expect("a valid Controller")
}

/// A kubeconfig for `varroa-system/varroa-operator` (a bound token), as JSON (valid YAML).
async fn operator_kubeconfig(env: &support::Env) -> String {
    let sas: Api<ServiceAccount> = Api::namespaced(env.admin.clone(), "varroa-system");
    let tr = TokenRequest {
        spec: TokenRequestSpec { audiences: vec![], expiration_seconds: Some(24 * 3600), ..Default::default() },
        ..Default::default()
    };
    let token = sas
        .create_token_request("varroa-operator", &PostParams::default(), &tr)
        .await
        .expect("a token for varroa-system/varroa-operator")
        .status
        .expect("a token")
        .token;
    let kc = kube::config::Kubeconfig::from_yaml(env.dc.kubeconfig_yaml()).expect("the admin kubeconfig");
    let mut v = serde_json::to_value(&kc).expect("kubeconfig as JSON");
    v["users"] = json!([{"name": "varroa-operator", "user": {"token": token}}]);
    v["contexts"][0]["context"]["user"] = json!("varroa-operator");
    v.to_string()
}

/// The operator binary as a child process, killed on drop.
struct Operator {
    child: Child,
    health: std::net::SocketAddr,
}

/// One scrape of /metrics: `name{labels}` to value.
struct Scrape(BTreeMap<String, f64>);

impl Scrape {
    /// The sum of `metric` over the series whose labels contain every one of `labels`
    /// (`key="value"`).
    fn sum(&self, metric: &str, labels: &[&str]) -> u64 {
        self.0
            .iter()
            .filter(|(k, _)| k.starts_with(&format!("{metric}{{")) && labels.iter().all(|l| k.contains(l)))
            .map(|(_, v)| v)
            .sum::<f64>() as u64
    }

    fn reconciles(&self) -> u64 {
        self.sum("varroa_reconciles_total", &[])
    }

    /// API writes: `varroa_apply_total` with outcome created, updated or deleted.
    fn writes(&self) -> u64 {
        ["created", "updated", "deleted"]
            .iter()
            .map(|o| self.sum("varroa_apply_total", &[&format!("outcome=\"{o}\"")]))
            .sum()
    }

    /// The writes by kind and outcome, e.g. `ControllerStatus updated 3`.
    fn writes_by_kind(&self) -> String {
        let mut out = vec![];
        for (k, v) in &self.0 {
            if let Some(labels) = k.strip_prefix("varroa_apply_total{")
                && !labels.contains("outcome=\"unchanged\"")
                && *v > 0.0
            {
                let label = |name: &str| {
                    labels
                        .split(',')
                        .find_map(|p| p.strip_prefix(&format!("{name}=\"")))
                        .map(|s| s.trim_end_matches(['"', '}']))
                };
                out.push(format!("{} {} {v}", label("kind").unwrap_or("?"), label("outcome").unwrap_or("?")));
            }
        }
        if out.is_empty() { "none".into() } else { out.join(", ") }
    }

    /// Everything the counters of interest add up to, to see when they stop moving.
    fn fingerprint(&self) -> (u64, u64, u64) {
        (self.reconciles(), self.writes(), self.sum("varroa_apply_total", &["outcome=\"unchanged\""]))
    }
}

impl Operator {
    async fn start(kubeconfig: &std::path::Path, intervals: &[&str]) -> Operator {
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port");
        let child = Command::new(env!("CARGO_BIN_EXE_varroa-operator"))
            .arg("--health-addr")
            .arg(port.to_string())
            .args(intervals)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the operator starts");
        let op = Operator { child, health: port };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(body) = op.get("/readyz").await
                && body.starts_with("HTTP/1.1 200")
            {
                break;
            }
            assert!(Instant::now() < deadline, "the operator was not ready within 30s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        op
    }

    async fn get(&self, path: &str) -> std::io::Result<String> {
        let mut s = tokio::net::TcpStream::connect(self.health).await?;
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes()).await?;
        let mut out = String::new();
        s.read_to_string(&mut out).await?;
        Ok(out)
    }

    async fn scrape(&self) -> Scrape {
        let body = self.get("/metrics").await.expect("metrics scraped");
        let body = body.split_once("\r\n\r\n").map_or(body.as_str(), |(_, b)| b);
        Scrape(
            body.lines()
                .filter(|l| !l.starts_with('#'))
                .filter_map(|l| {
                    let (k, v) = l.rsplit_once(' ')?;
                    Some((k.to_string(), v.parse::<f64>().ok()?))
                })
                .collect(),
        )
    }

    /// Polls /metrics until `done` holds; returns the scrape that satisfied it.
    async fn until(&self, what: &str, done: impl Fn(&Scrape) -> bool) -> Scrape {
        let wait = async {
            loop {
                let s = self.scrape().await;
                if done(&s) {
                    return s;
                }
                tokio::time::sleep(POLL).await;
            }
        };
        tokio::time::timeout(TIMEOUT, wait).await.unwrap_or_else(|_| panic!("timed out waiting until {what}"))
    }

    /// Polls /metrics until reconciles and writes have not changed for [`QUIET`]; returns the
    /// last scrape and when the counters last moved.
    async fn until_idle(&self) -> (Scrape, Instant) {
        let wait = async {
            let mut last = self.scrape().await;
            let mut since = Instant::now();
            loop {
                tokio::time::sleep(POLL).await;
                let s = self.scrape().await;
                if s.fingerprint() != last.fingerprint() {
                    since = Instant::now();
                    last = s;
                } else if since.elapsed() >= QUIET {
                    return (s, since);
                }
            }
        };
        tokio::time::timeout(TIMEOUT, wait).await.expect("the operator went idle in time")
    }

    /// (current RSS, peak RSS) in MiB, from /proc.
    fn memory(&self) -> (f64, f64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).expect("/proc status");
        let kib = |key: &str| -> f64 {
            status
                .lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        (kib("VmRSS:") / 1024.0, kib("VmHWM:") / 1024.0)
    }

    /// SIGTERM, then wait for the exit (the binary's grace period is 15 s); returns how long the
    /// shutdown took.
    async fn terminate(mut self) -> Duration {
        let t = Instant::now();
        let status = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status().expect("kill runs");
        assert!(status.success(), "SIGTERM sent");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(exit) = self.child.try_wait().expect("wait") {
                assert!(exit.success(), "the operator exited cleanly on SIGTERM: {exit}");
                return t.elapsed();
            }
            assert!(Instant::now() < deadline, "the operator did not stop within 30s of SIGTERM");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Wait until `n` controllers are Running for their generation.
async fn all_running(client: Client, n: usize) {
    let api: Api<Controller> = Api::namespaced(client, TEAM);
    let mut running = BTreeSet::new();
    let mut stream = watcher(api, watcher::Config::default()).applied_objects().boxed();
    let wait = async {
        while let Some(c) = stream.try_next().await.expect("watching controllers") {
            let st = c.status.as_ref();
            if st.and_then(|s| s.phase) == Some(ControllerPhase::Running)
                && st.and_then(|s| s.observed_generation) == c.metadata.generation
            {
                running.insert(c.name_any());
                if running.len() == n {
                    return;
                }
            }
        }
    };
    tokio::time::timeout(TIMEOUT, wait).await.expect("all controllers Running in time");
}

/// The floor of a reconcile: the reads it makes for controller `i`, in its order (the gateway
/// CA, the eight objects it compares, the StatefulSet again and the pods).
async fn reads_of(client: &Client, i: usize) -> kube::Result<()> {
    let c = controller(i);
    let name = c.name_any();
    let agents = varroa_operator::objects::agents_name(&c);
    Api::<Secret>::namespaced(client.clone(), "varroa-system").get("varroa-gateway-ca").await?;
    Api::<ServiceAccount>::namespaced(client.clone(), TEAM).get(&name).await?;
    Api::<RoleBinding>::namespaced(client.clone(), TEAM).get(&agents).await?;
    Api::<ConfigMap>::namespaced(client.clone(), TEAM).get(&name).await?;
    Api::<Secret>::namespaced(client.clone(), TEAM).get(&varroa_operator::objects::secret_name(&c)).await?;
    Api::<Service>::namespaced(client.clone(), TEAM).get(&name).await?;
    Api::<Service>::namespaced(client.clone(), TEAM).get(&varroa_operator::objects::headless_name(&c)).await?;
    Api::<StatefulSet>::namespaced(client.clone(), TEAM).get(&name).await?;
    Api::<Ingress>::namespaced(client.clone(), TEAM).get_opt(&name).await?;
    Api::<StatefulSet>::namespaced(client.clone(), TEAM).get(&name).await?;
    let lp = ListParams::default().labels(&format!("{}={name}", varroa_api::lifecycle::LABEL_CONTROLLER));
    Api::<Pod>::namespaced(client.clone(), TEAM).list(&lp).await?;
    Ok(())
}

/// The floor of a start: the lists behind the operator's caches (Controllers and what it owns).
async fn startup_lists(client: &Client) -> kube::Result<()> {
    let lp = ListParams::default();
    let ours = ListParams::default().labels(&format!(
        "{}={}",
        varroa_api::lifecycle::LABEL_MANAGED_BY,
        varroa_api::lifecycle::MANAGED_BY
    ));
    let pods = ListParams::default().labels(varroa_api::lifecycle::LABEL_CONTROLLER);
    tokio::try_join!(
        async { Api::<Controller>::all(client.clone()).list(&lp).await.map(drop) },
        async { Api::<StatefulSet>::all(client.clone()).list(&ours).await.map(drop) },
        async { Api::<ConfigMap>::all(client.clone()).list(&ours).await.map(drop) },
        async { Api::<Service>::all(client.clone()).list(&ours).await.map(drop) },
        async { Api::<ServiceAccount>::all(client.clone()).list(&ours).await.map(drop) },
        async { Api::<RoleBinding>::all(client.clone()).list(&ours).await.map(drop) },
        async { Api::<Ingress>::all(client.clone()).list(&ours).await.map(drop) },
        async { Api::<Pod>::all(client.clone()).list(&pods).await.map(drop) },
    )?;
    Ok(())
}

fn secs(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{:.0} ms", d.as_secs_f64() * 1000.0)
    } else {
        format!("{:.2} s", d.as_secs_f64())
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let env = support::Env::cluster().await;
    let dir = tempfile::tempdir().expect("tempdir");
    // The admin by default: devcluster's RBAC authorizer copies every Role and RoleBinding on
    // each request of a non-admin user, and each Controller brings one of each, so with the
    // service account's token (VARROA_BENCH_AS=sa) the cluster, not the operator, dominates.
    let as_sa = std::env::var("VARROA_BENCH_AS").is_ok_and(|v| v == "sa");
    let kubeconfig_yaml = if as_sa { operator_kubeconfig(&env).await } else { env.dc.kubeconfig_yaml().to_string() };
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, &kubeconfig_yaml).expect("kubeconfig written");
    let client = devcluster::client_for(&kubeconfig_yaml).await.expect("a client with the operator's credentials");
    let mut rows: Vec<(String, String, String)> = vec![];

    // Phase 1: provision.
    let op = Operator::start(&kubeconfig, &INTERVALS).await;
    let (idle, _) = op.memory();
    let t = Instant::now();
    let waiter = tokio::spawn(all_running(env.admin.clone(), N));
    let api = env.controllers();
    futures::stream::iter(0..N)
        .map(|i| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), &controller(i)).await.map(|_| ()) }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await
        .expect("controllers created");
    waiter.await.expect("waiter");
    let provisioned = t.elapsed();
    let (s1, _) = op.until_idle().await;
    let (rss1, peak1) = op.memory();
    let stop = op.terminate().await;
    let phase1_done = tokio::time::Instant::now();
    eprintln!("phase 1: all Running in {}; writes {}", secs(provisioned), s1.writes_by_kind());

    // Phase 2: restart; the new process reconciles everything.
    let rv0 = env.dc.cluster().store.current_rv();
    let t = Instant::now();
    let op = Operator::start(&kubeconfig, &INTERVALS).await;
    let ready = t.elapsed();
    op.until(&format!("{N} reconciles"), |s| s.reconciles() >= N as u64).await;
    let reconciled = t.elapsed();
    let (s2, last) = op.until_idle().await;
    let settled = last.duration_since(t);
    let (rss2, peak2) = op.memory();
    let store_writes = env.dc.cluster().store.current_rv() - rv0;
    let ok = s2.sum("varroa_reconciles_total", &["result=\"ok\""]);
    let failed = s2.sum("varroa_reconciles_total", &["result=\"error\""]);
    let unchanged = s2.sum("varroa_apply_total", &["outcome=\"unchanged\""]);
    let status_writes = s2.sum("varroa_apply_total", &["kind=\"ControllerStatus\""]);
    eprintln!("phase 2: writes {}", s2.writes_by_kind());
    op.terminate().await;

    // Phase 3: a restart after the stamps went stale (an operator down longer than the stamp
    // interval): each controller earns exactly one status write, however many passes run.
    // Stamps of phase 1 are older than the interval when the third process starts; within it, a
    // second pass finds its own fresh stamp (an interval shorter than a pass under load would
    // keep stamping: the interval is minutes in production).
    tokio::time::sleep_until(phase1_done + Duration::from_secs(15)).await;
    let op = Operator::start(&kubeconfig, &["--resync-interval", "1h", "--stamp-interval", "15s"]).await;
    op.until(&format!("{N} reconciles"), |s| s.reconciles() >= N as u64).await;
    let (s3, _) = op.until_idle().await;
    let stale_status_writes = s3.sum("varroa_apply_total", &["kind=\"ControllerStatus\""]);
    eprintln!("phase 3: writes {}", s3.writes_by_kind());
    op.terminate().await;

    // The floor: the same reads, sent directly with the operator's credentials.
    let t = Instant::now();
    startup_lists(&client).await.expect("lists");
    let lists = t.elapsed();
    let t = Instant::now();
    futures::stream::iter(0..N)
        .map(|i| reads_of(&client, i))
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await
        .expect("reads");
    let reads = t.elapsed();

    rows.push((format!("create {N} Controllers (32 in flight) to all Running"), secs(provisioned), "-".into()));
    rows.push((
        "operator writes while provisioning (per Controller)".into(),
        format!("{} ({:.1})", s1.writes(), s1.writes() as f64 / N as f64),
        "-".into(),
    ));
    rows.push((
        format!("operator RSS with {N} Running Controllers (peak); idle before"),
        format!("{rss1:.1} MiB ({peak1:.1} MiB); {idle:.1} MiB"),
        "-".into(),
    ));
    rows.push(("SIGTERM to exit".into(), secs(stop), "-".into()));
    rows.push((
        "restart: process start to ready (caches not yet listed)".into(),
        secs(ready),
        format!("{} (the {} lists behind the caches)", secs(lists), 9),
    ));
    rows.push((
        format!("restart: process start to {N} reconciles done"),
        secs(reconciled),
        format!(
            "{} (the reads of {N} reconciles: 11 GETs + 1 LIST each, {} requests, 32 in flight) + {}",
            secs(reads),
            N * 12,
            secs(lists)
        ),
    ));
    rows.push((
        "restart: process start to the last reconcile (ok / error reconciles)".into(),
        format!("{} ({ok} / {failed})", secs(settled)),
        format!("{N} reconciles needed"),
    ));
    rows.push((
        "restart: API writes by the operator (of which status)".into(),
        format!("{} ({status_writes})", s2.writes()),
        "0".into(),
    ));
    rows.push(("restart: compare-then-write checks that wrote nothing".into(), unchanged.to_string(), "-".into()));
    let requests = |s: &Scrape| {
        let by = |v: &str| s.sum("varroa_api_requests_total", &[&format!("verb=\"{v}\"")]);
        format!(
            "{} GET, {} LIST, {} watch, {} dry runs and updates ({:.2} GET per reconcile)",
            by("get"),
            by("list"),
            by("watch"),
            by("update"),
            by("get") as f64 / s.reconciles().max(1) as f64
        )
    };
    rows.push(("provisioning: requests the operator sent".into(), requests(&s1), "-".into()));
    rows.push((
        "restart: requests the restarted process sent".into(),
        requests(&s2),
        format!("{} requests: the reads of {N} reconciles without caches", N * 12),
    ));
    rows.push((
        "restart with stale stamps: status writes (other writes)".into(),
        format!("{stale_status_writes} ({})", s3.writes() - stale_status_writes),
        format!("{N} (one stamp each), 0"),
    ));
    rows.push(("restart: store writes, cluster-wide".into(), store_writes.to_string(), "-".into()));
    rows.push((
        format!("operator RSS after reconciling {N} (peak)"),
        format!("{rss2:.1} MiB ({peak2:.1} MiB)"),
        "-".into(),
    ));

    println!("credentials: {}", if as_sa { "varroa-system/varroa-operator" } else { "admin" });
    println!("| Varroa | with the operator | floor |");
    println!("|---|---|---|");
    for (a, b, c) in rows {
        println!("| {a} | {b} | {c} |");
    }
    if s2.writes() > 0 {
        println!("\nwrites after the restart: {}", s2.writes_by_kind());
    }
    drop(env);
}
