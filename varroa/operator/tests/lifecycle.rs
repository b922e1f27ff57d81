//! Issue 10, item 4 (per-object state), with the real `varroa-operator` binary on a devcluster:
//! 1,000 Controllers are created, reconciled and deleted. Controllers have no finalizer, so the
//! operator never reconciles a deleted one; its sweep against the Controller cache drops what it
//! kept about them (backoff, dwell, statuses written, phases, verified objects). Checked from its
//! `/metrics`: `varroa_tracked_objects` (the count of `Context::tracked_objects`) is back to 0,
//! every phase gauge is 0, and no Controller is named. Then, once garbage collection took the
//! owned objects too, the heap the process uses (`process_heap_in_use_bytes`, from the allocator)
//! is back within 16 MiB of its start. Its resident memory is read from /proc before, at the
//! peak and after (reported, not asserted: see the note at the end).

mod support;

use futures::StreamExt;
use kube::api::{DeleteParams, ListParams};
use optest::metrics::sample;
use optest::process::{Proc, Spawn};
use std::time::{Duration, Instant};
use support::{Env, TEAM};

const CONTROLLERS: usize = 1000;
/// Creating and provisioning 1,000 Controllers on a shared 2-core machine, debug build.
const ROUND: Duration = Duration::from_secs(900);

/// How far above its start the heap in use may stay once 1,000 Controllers and their objects are
/// gone: the caches of what remains (Namespaces, the team's objects), the allocator's bookkeeping.
const HEAP_SLACK: f64 = 16.0 * 1024.0 * 1024.0;

/// Scrape the operator's /metrics (every 500 ms) until `ok` holds; returns that scrape.
async fn wait_metrics(op: &Proc, what: &str, ok: impl Fn(&str) -> bool) -> String {
    let last = std::sync::Mutex::new(String::new());
    let found = optest::wait::poll(ROUND, Duration::from_millis(500), || async {
        let m = op.metrics().await;
        if ok(&m) {
            return Some(m);
        }
        *last.lock().expect("the last scrape") = m;
        None
    })
    .await;
    found.unwrap_or_else(|| {
        panic!("timed out waiting until {what}:\n{}\n{}", last.lock().expect("the last scrape"), op.log_text())
    })
}

/// Create the Controllers, wait until each has a phase, delete them all, wait until the
/// operator keeps nothing about them. Returns (RSS at the peak, RSS after) in KiB and the heap
/// in use (`process_heap_in_use_bytes`) at the peak and after, in bytes.
async fn round(env: &Env, op: &Proc, n: usize, heap_start: f64) -> ((u64, u64), (f64, f64)) {
    let names: Vec<String> = (0..CONTROLLERS).map(|i| format!("lc{n}-{i:04}")).collect();
    let started = Instant::now();
    // Stopped: every object is made (the StatefulSet at zero replicas), no pods are run.
    futures::stream::iter(names.iter().map(|name| env.create(name, serde_json::json!({"powerState": "Stopped"}))))
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    let deadline = Instant::now() + ROUND;
    loop {
        let list = env.controllers().list(&ListParams::default()).await.expect("list Controllers");
        let phased = list.items.iter().filter(|c| support::phase_of(c).is_some()).count();
        if phased == CONTROLLERS {
            break;
        }
        assert!(Instant::now() < deadline, "only {phased} of {CONTROLLERS} have a phase:\n{}", op.log_text());
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let provisioned = started.elapsed();
    let m = op.metrics().await;
    let tracked = sample(&m, "varroa_tracked_objects");
    assert!(tracked >= CONTROLLERS as f64, "state is kept about each Controller: {tracked}");
    let peak = op.memory().rss_kib;
    let heap_peak = sample(&m, "process_heap_in_use_bytes");

    let started = Instant::now();
    let deleted = env.controllers().delete_collection(&DeleteParams::default(), &ListParams::default()).await;
    deleted.expect("delete every Controller");
    let deadline = Instant::now() + ROUND;
    while !env.controllers().list(&ListParams::default()).await.expect("list").items.is_empty() {
        assert!(Instant::now() < deadline, "Controllers not deleted");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let m = wait_metrics(op, "varroa_tracked_objects is 0", |m| sample(m, "varroa_tracked_objects") == 0.0).await;
    let cleaned = started.elapsed();
    assert_eq!(sample(&m, "varroa_controllers"), 0.0, "no Controller is counted in a phase:\n{m}");
    for name in &names {
        assert!(!m.contains(name.as_str()), "/metrics still names {name}:\n{m}");
    }
    // The owned objects go after their Controllers (garbage collection), and with them the
    // watch caches' copies: wait until the heap in use is back near where it started.
    let m = wait_metrics(op, "the heap in use is back near its start", |m| {
        sample(m, "process_heap_in_use_bytes") <= heap_start + HEAP_SLACK
    })
    .await;
    let heap_after = sample(&m, "process_heap_in_use_bytes");
    let settled = started.elapsed();
    let after = op.memory().rss_kib;
    eprintln!(
        "round {n}: {CONTROLLERS} Controllers phased in {provisioned:?}, forgotten {cleaned:?} after the deletion, heap back {settled:?} after; tracked at the peak {tracked}; RSS peak {peak} KiB, after {after} KiB; heap in use at the peak {heap_peak} B, after {heap_after} B"
    );
    ((peak, after), (heap_peak, heap_after))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_deleted_controllers_leave_no_state_metrics_or_memory_behind() {
    let env = Env::cluster().await;
    // The admin's credentials, as the benchmark's: devcluster authorizes a ServiceAccount by
    // walking every RoleBinding, and each Controller brings one (tests/process.rs and e2e.rs run
    // as the ServiceAccount).
    let kubeconfig = env.dc.kubeconfig_path();
    let op = Spawn::new(env!("CARGO_BIN_EXE_varroa-operator"), "varroa-operator-lc")
        .clear_env("VARROA_")
        .env("POD_NAME", "varroa-operator-lc")
        .kubeconfig(&kubeconfig)
        .arg("--health-addr=127.0.0.1:0")
        .spawn();
    wait_metrics(&op, "the operator serves its metrics", |m| m.contains("varroa_tracked_objects")).await;
    let start = op.memory().rss_kib;
    let heap_start = sample(&op.metrics().await, "process_heap_in_use_bytes");
    eprintln!("RSS at start: {start} KiB, heap in use {heap_start} B ({TEAM})");
    let ((peak, after), (heap_peak, heap_after)) = round(&env, &op, 1, heap_start).await;
    // The heap the operator uses returned near where it started (round() waited for it): what
    // it keeps about deleted Controllers is gone, not just unnamed.
    assert!(
        heap_start > 0.0 && heap_peak > heap_start + HEAP_SLACK,
        "the gauge moves: start {heap_start}, peak {heap_peak}"
    );
    assert!(heap_after <= heap_start + HEAP_SLACK);
    // Not asserted: that RSS returns near the start (glibc keeps freed pages in its arenas).
    // Measured here (debug build, 1,000 stopped Controllers, 2026-12-02): with at most 32
    // reconciles at once, heap in use 0.7 MiB at the start, 27 MiB at the peak, 5.6 MiB ten
    // seconds after the deletion; RSS 37, 78 and 57 MiB. Before the bound (a reconcile per
    // Controller at once) the operator opened about a thousand connections to the API server,
    // whose buffers then sat in the client's pool until some later request (heaptrack: 8.5 MiB
    // in hyper's per-connection channels alone), and the peak was 175 MiB of heap and 274 MiB
    // of RSS; kube's event recorder also kept every Event of the last six minutes.
    // What is asserted: memory does not keep growing after the deletion.
    assert!(
        after <= peak + peak / 10,
        "memory after deleting {CONTROLLERS} Controllers: start {start}, peak {peak}, after {after} KiB"
    );
}
