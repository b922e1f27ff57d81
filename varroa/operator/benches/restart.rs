//! Varroa benchmark (`cargo bench -p varroa-operator --bench restart`): 500 Controllers are
//! provisioned, the operator is restarted, and the new process reconciles all of them. Reported:
//! time to all Running, the time the new process takes to reconcile every controller once, the
//! API writes it makes doing so (zero expected), and its memory.
//!
//! The operator runs as its own process (the release binary, resync and stamp intervals of 1h
//! so that only the restart is measured) against an in-process devcluster prepared as the
//! end-to-end tests prepare it (tests/support), with the admin's credentials, or with the token
//! of `varroa-system/varroa-operator` (exactly deploy/varroa/operator-rbac.yaml) when VARROA_BENCH_AS=sa.
//! The floor is the reads a reconcile makes (11 GETs and one LIST per controller) and the lists
//! a starting operator makes, sent directly by a client with the same credentials, in the same
//! run. Prints a
//! Markdown table for docs/benchmarks.md.

#[path = "../tests/support/mod.rs"]
mod support;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use optest::metrics::Scrape;
use optest::process::{Proc, Spawn};
use optest::secs;
use serde_json::json;
use std::time::{Duration, Instant};
use support::TEAM;
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

/// The sum of `metric` over the series with all of `labels`, as a count.
fn sum(s: &Scrape, metric: &str, labels: &[&str]) -> u64 {
    s.sum(metric, labels) as u64
}

fn reconciles(s: &Scrape) -> u64 {
    sum(s, "varroa_reconciles_total", &[])
}

/// API writes: `varroa_apply_total` with outcome created, updated or deleted.
fn writes(s: &Scrape) -> u64 {
    ["created", "updated", "deleted"].iter().map(|o| sum(s, "varroa_apply_total", &[&format!("outcome=\"{o}\"")])).sum()
}

/// The writes by kind and outcome, e.g. `ControllerStatus updated 3`.
fn writes_by_kind(s: &Scrape) -> String {
    let mut out = vec![];
    for (k, v) in s.series() {
        if let Some(labels) = k.strip_prefix("varroa_apply_total{")
            && !labels.contains("outcome=\"unchanged\"")
            && v > 0.0
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
fn fingerprint(s: &Scrape) -> (u64, u64, u64) {
    (reconciles(s), writes(s), sum(s, "varroa_apply_total", &["outcome=\"unchanged\""]))
}

/// The operator binary as a child process, ready; killed on drop.
async fn start_operator(kubeconfig: &std::path::Path, intervals: &[&str]) -> Proc {
    Spawn::new(env!("CARGO_BIN_EXE_varroa-operator"), "varroa-operator")
        .args(intervals.iter().copied())
        .listen(&["--health-addr"])
        .kubeconfig(kubeconfig)
        .warnings_to_terminal()
        .spawn_ready(Duration::from_secs(30))
        .await
}

/// Polls /metrics until `done` holds; returns the scrape that satisfied it.
async fn until(op: &Proc, what: &str, done: impl Fn(&Scrape) -> bool) -> Scrape {
    let found = optest::wait::poll(TIMEOUT, POLL, || async {
        let s = op.scrape().await;
        done(&s).then_some(s)
    })
    .await;
    found.unwrap_or_else(|| panic!("timed out waiting until {what}"))
}

/// Polls /metrics until reconciles and writes have not changed for [`QUIET`]; returns the last
/// scrape and when the counters last moved.
async fn until_idle(op: &Proc) -> (Scrape, Instant) {
    let wait = async {
        let mut last = op.scrape().await;
        let mut since = Instant::now();
        loop {
            tokio::time::sleep(POLL).await;
            let s = op.scrape().await;
            if fingerprint(&s) != fingerprint(&last) {
                since = Instant::now();
                last = s;
            } else if since.elapsed() >= QUIET {
                return (s, since);
            }
        }
    };
    tokio::time::timeout(TIMEOUT, wait).await.expect("the operator went idle in time")
}

/// SIGTERM, then wait for the exit (the binary's grace period is 15 s); returns how long the
/// shutdown took.
async fn terminate(mut op: Proc) -> Duration {
    let t = Instant::now();
    op.terminate();
    let exit = op.wait_exit(Duration::from_secs(30)).await;
    assert!(exit.success(), "the operator exited cleanly on SIGTERM: {exit}");
    t.elapsed()
}

/// Wait until `n` controllers are Running for their generation.
async fn all_running(client: Client, n: usize) {
    let api: Api<Controller> = Api::namespaced(client, TEAM);
    let running = |c: &Controller| {
        let st = c.status.as_ref();
        st.and_then(|s| s.phase) == Some(ControllerPhase::Running)
            && st.and_then(|s| s.observed_generation) == c.metadata.generation
    };
    optest::wait::until_count(api, watcher::Config::default(), n, TIMEOUT, "controllers Running", running).await;
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

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let env = support::Env::cluster().await;
    let dir = tempfile::tempdir().expect("tempdir");
    // The admin by default: devcluster's RBAC authorizer copies every Role and RoleBinding on
    // each request of a non-admin user, and each Controller brings one of each, so with the
    // service account's token (VARROA_BENCH_AS=sa) the cluster, not the operator, dominates.
    let as_sa = std::env::var("VARROA_BENCH_AS").is_ok_and(|v| v == "sa");
    let kubeconfig_yaml = if as_sa {
        optest::service_account::kubeconfig(&env.dc, "varroa-system", "varroa-operator").await
    } else {
        env.dc.kubeconfig_yaml().to_string()
    };
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, &kubeconfig_yaml).expect("kubeconfig written");
    let client = devcluster::client_for(&kubeconfig_yaml).await.expect("a client with the operator's credentials");
    let mut rows: Vec<(String, String, String)> = vec![];

    // Phase 1: provision.
    let op = start_operator(&kubeconfig, &INTERVALS).await;
    let (idle, _) = op.memory().mib();
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
    let (s1, _) = until_idle(&op).await;
    let (rss1, peak1) = op.memory().mib();
    let stop = terminate(op).await;
    let phase1_done = tokio::time::Instant::now();
    eprintln!("phase 1: all Running in {}; writes {}", secs(provisioned), writes_by_kind(&s1));

    // Phase 2: restart; the new process reconciles everything.
    let rv0 = env.dc.cluster().store.current_rv();
    let t = Instant::now();
    let op = start_operator(&kubeconfig, &INTERVALS).await;
    let ready = t.elapsed();
    until(&op, &format!("{N} reconciles"), |s| reconciles(s) >= N as u64).await;
    let reconciled = t.elapsed();
    let (s2, last) = until_idle(&op).await;
    let settled = last.duration_since(t);
    let (rss2, peak2) = op.memory().mib();
    let heap = |s: &Scrape| s.sum("process_heap_in_use_bytes", &[]) / (1024.0 * 1024.0);
    let store_writes = env.dc.cluster().store.current_rv() - rv0;
    let ok = sum(&s2, "varroa_reconciles_total", &["result=\"ok\""]);
    let failed = sum(&s2, "varroa_reconciles_total", &["result=\"error\""]);
    let unchanged = sum(&s2, "varroa_apply_total", &["outcome=\"unchanged\""]);
    let status_writes = sum(&s2, "varroa_apply_total", &["kind=\"ControllerStatus\""]);
    eprintln!("phase 2: writes {}", writes_by_kind(&s2));
    terminate(op).await;

    // Phase 3: a restart after the stamps went stale (an operator down longer than the stamp
    // interval): each controller earns exactly one status write, however many passes run.
    // Stamps of phase 1 are older than the interval when the third process starts; within it, a
    // second pass finds its own fresh stamp (an interval shorter than a pass under load would
    // keep stamping: the interval is minutes in production).
    tokio::time::sleep_until(phase1_done + Duration::from_secs(15)).await;
    let op = start_operator(&kubeconfig, &["--resync-interval", "1h", "--stamp-interval", "15s"]).await;
    until(&op, &format!("{N} reconciles"), |s| reconciles(s) >= N as u64).await;
    let (s3, _) = until_idle(&op).await;
    let stale_status_writes = sum(&s3, "varroa_apply_total", &["kind=\"ControllerStatus\""]);
    eprintln!("phase 3: writes {}", writes_by_kind(&s3));
    terminate(op).await;

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
        format!("{} ({:.1})", writes(&s1), writes(&s1) as f64 / N as f64),
        "-".into(),
    ));
    rows.push((
        format!("operator RSS with {N} Running Controllers (peak); idle before"),
        format!("{rss1:.1} MiB ({peak1:.1} MiB); {idle:.1} MiB; heap in use {:.1} MiB", heap(&s1)),
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
        format!("{} ({status_writes})", writes(&s2)),
        "0".into(),
    ));
    rows.push(("restart: compare-then-write checks that wrote nothing".into(), unchanged.to_string(), "-".into()));
    let requests = |s: &Scrape| {
        let by = |v: &str| sum(s, "varroa_api_requests_total", &[&format!("verb=\"{v}\"")]);
        format!(
            "{} GET, {} LIST, {} watch, {} dry runs and updates ({:.2} GET per reconcile)",
            by("get"),
            by("list"),
            by("watch"),
            by("update"),
            by("get") as f64 / reconciles(s).max(1) as f64
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
        format!("{stale_status_writes} ({})", writes(&s3) - stale_status_writes),
        format!("{N} (one stamp each), 0"),
    ));
    rows.push(("restart: store writes, cluster-wide".into(), store_writes.to_string(), "-".into()));
    rows.push((
        format!("operator RSS after reconciling {N} (peak); heap in use"),
        format!("{rss2:.1} MiB ({peak2:.1} MiB); heap in use {:.1} MiB", heap(&s2)),
        "-".into(),
    ));

    println!("credentials: {}", if as_sa { "varroa-system/varroa-operator" } else { "admin" });
    println!("| Varroa | with the operator | floor |");
    println!("|---|---|---|");
    for (a, b, c) in rows {
        println!("| {a} | {b} | {c} |");
    }
    if writes(&s2) > 0 {
        println!("\nwrites after the restart: {}", writes_by_kind(&s2));
    }
    drop(env);
}
